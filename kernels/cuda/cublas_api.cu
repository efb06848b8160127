// cuBLAS opened at first use (cublas_api.h).
#include "kernels/cuda/cublas_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace tessera::kernels::cuda {
namespace {

const char* library_name() {
#define TESSERA_STR2(x) #x
#define TESSERA_STR(x) TESSERA_STR2(x)
  return "libcublas.so." TESSERA_STR(CUBLAS_VER_MAJOR);
#undef TESSERA_STR
#undef TESSERA_STR2
}

template <typename Fn>
Status resolve(void* library, const char* symbol, Fn* out) {
  dlerror();
  void* address = dlsym(library, symbol);
  if (address == nullptr) {
    return unsupported(std::string(library_name()) + " has no " + symbol +
                       " (a cuBLAS older than the toolkit Tessera was built with?)");
  }
  *out = reinterpret_cast<Fn>(address);
  return Status();
}

struct Loaded {
  CublasApi api{};
  Status error;
};

Status open_into(CublasApi& a) {
  // Never closed: handles made from it live in thread_local objects until their threads end.
  void* library = dlopen(library_name(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    return unsupported(
        std::string("cannot open ") + library_name() +
        " (cuBLAS, for the CUDA backend): " + (reason != nullptr ? reason : "unknown reason"));
  }
  TESSERA_RETURN_IF_ERROR(resolve(library, "cublasCreate_v2", &a.create));
  TESSERA_RETURN_IF_ERROR(resolve(library, "cublasDestroy_v2", &a.destroy));
  TESSERA_RETURN_IF_ERROR(resolve(library, "cublasSetStream_v2", &a.set_stream));
  TESSERA_RETURN_IF_ERROR(resolve(library, "cublasSetMathMode", &a.set_math_mode));
  TESSERA_RETURN_IF_ERROR(resolve(library, "cublasSgemm_v2", &a.sgemm));
  TESSERA_RETURN_IF_ERROR(resolve(library, "cublasSgemmStridedBatched", &a.sgemm_strided_batched));
  TESSERA_RETURN_IF_ERROR(resolve(library, "cublasGemmEx", &a.gemm_ex));
  TESSERA_RETURN_IF_ERROR(resolve(library, "cublasGetStatusName", &a.status_name));
  return resolve(library, "cublasGetStatusString", &a.status_string);
}

Loaded load() {
  CublasApi api{};
  Status error = open_into(api);
  return Loaded{api, std::move(error)};
}

}  // namespace

Expected<const CublasApi*> cublas_api() {
  static const Loaded loaded = load();  // once, thread-safe
  if (!loaded.error.ok()) return loaded.error;
  return &loaded.api;
}

const CublasApi& cublas() {
  const Expected<const CublasApi*> api = cublas_api();
  if (!api.ok()) std::abort();
  return **api;
}

}  // namespace tessera::kernels::cuda
