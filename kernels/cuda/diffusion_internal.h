// Shared by the CUDA diffusion ops (kernels/cuda/diffusion_*.cu) only; needs the CUDA headers.
#pragma once

#include <string>

#include "core/status.h"
#include "kernels/cuda/cublas_api.h"

namespace tessera::kernels::cuda::diffusion_detail {

// A cuBLAS handle for the calling host thread and the current device (created on first use, kept
// for the thread's life, recreated when the thread switches devices), bound to `stream` with
// CUBLAS_DEFAULT_MATH (no TF32). `op` names the caller in error messages.
Expected<cublasHandle_t> cublas_for_stream(cudaStream_t stream, const char* op);

// "cuda <op>: <what> failed: CUBLAS_STATUS_... (...)", kOutOfMemory for allocation failures.
Status cublas_status(cublasStatus_t st, const char* op, const char* what);

}  // namespace tessera::kernels::cuda::diffusion_detail
