// cuBLAS, opened at its first use instead of linked. libcublas and libcublasLt run static
// initialisers when a process loads them: about 0.5 s of CPU and 200 MB resident in every process
// that links them, GPU or not (the CLI, the studio, each test process; bench/RESULTS.md). Linked
// this way, only a process that makes a cuBLAS handle pays, and a machine without the library still
// runs everything but the CUDA products, which report what is missing.
#pragma once

#include <cublas_v2.h>

#include "core/status.h"

namespace tessera::kernels::cuda {

// The cuBLAS entry points the CUDA kernels call, typed from cublas_v2.h's declarations.
struct CublasApi {
  decltype(&::cublasCreate_v2) create;
  decltype(&::cublasDestroy_v2) destroy;
  decltype(&::cublasSetStream_v2) set_stream;
  decltype(&::cublasSetMathMode) set_math_mode;
  decltype(&::cublasSgemm_v2) sgemm;
  decltype(&::cublasSgemmStridedBatched) sgemm_strided_batched;
  // The overload with a cublasComputeType_t (the header adds an inline one for cudaDataType).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t);
  decltype(&::cublasGetStatusName) status_name;
  decltype(&::cublasGetStatusString) status_string;
};

// Opens libcublas.so.<CUBLAS_VER_MAJOR> once per process (thread-safe; later calls return the same
// table or the same error). Errors (kUnsupported): the library cannot be opened (names it and the
// loader's reason) or lacks an entry point (names the symbol).
Expected<const CublasApi*> cublas_api();

// The table, for code that holds a cuBLAS handle (made through cublas_api(), so the library is
// open). Aborts if it is not: a handle without the library is a bug, not an input.
const CublasApi& cublas();

}  // namespace tessera::kernels::cuda
