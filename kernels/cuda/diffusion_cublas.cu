// The cuBLAS handle of the CUDA diffusion ops (diffusion_internal.h). Separate from linear.cu's
// (which keeps its own in an anonymous namespace): one handle per thread and device each, cheap.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/diffusion_internal.h"

namespace tessera::kernels::cuda::diffusion_detail {
namespace {

struct ThreadHandle {
  int device = -1;
  cublasHandle_t handle = nullptr;
  ~ThreadHandle() {
    if (handle != nullptr) cublas().destroy(handle);
  }
};

}  // namespace

Status cublas_status(cublasStatus_t st, const char* op, const char* what) {
  std::string message = std::string("cuda ") + op + ": " + what +
                        " failed: " + cublas().status_name(st) + " (" + cublas().status_string(st) +
                        ")";
  if (st == CUBLAS_STATUS_ALLOC_FAILED) return out_of_memory(std::move(message));
  return internal_error(std::move(message));
}

Expected<cublasHandle_t> cublas_for_stream(cudaStream_t stream, const char* op) {
  TESSERA_ASSIGN_OR_RETURN(const CublasApi* blas, cublas_api());
  thread_local ThreadHandle cached;
  int device = 0;
  TESSERA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), std::string(op) + ": cudaGetDevice");
  if (cached.handle == nullptr || cached.device != device) {
    if (cached.handle != nullptr) blas->destroy(cached.handle);
    cached.handle = nullptr;
    cublasHandle_t handle = nullptr;
    const cublasStatus_t st = blas->create(&handle);
    if (st != CUBLAS_STATUS_SUCCESS) return cublas_status(st, op, "cublasCreate");
    cached.handle = handle;
    cached.device = device;
  }
  cublasStatus_t st = blas->set_stream(cached.handle, stream);
  if (st != CUBLAS_STATUS_SUCCESS) return cublas_status(st, op, "cublasSetStream");
  st = blas->set_math_mode(cached.handle,
                           tf32_products() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  if (st != CUBLAS_STATUS_SUCCESS) return cublas_status(st, op, "cublasSetMathMode");
  return cached.handle;
}

}  // namespace tessera::kernels::cuda::diffusion_detail
