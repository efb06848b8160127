// CUDA elementwise activations (grid-stride loops), the residual add and the fused gated units
// swiglu / geglu.
// Precise expf/erff/tanhf (the build does not use --use_fast_math), so results match the reference
// to a few ulp. In place is safe: each element is read and written by the same thread.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"

namespace tessera::kernels::cuda {
namespace {

constexpr int kActThreads = 256;

__device__ __forceinline__ float silu_f(float v) {
  return v / (1.f + expf(-v));
}
__device__ __forceinline__ float gelu_erf_f(float v) {
  return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));  // 1/sqrt(2)
}
__device__ __forceinline__ float gelu_tanh_f(float v) {
  constexpr float kSqrt2OverPi = 0.79788456080286536f;
  return 0.5f * v * (1.f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
}

__device__ __forceinline__ float quick_gelu_f(float v) {
  return v / (1.f + expf(-1.702f * v));
}

struct SiluOp {
  __device__ float operator()(float v) const { return silu_f(v); }
};
struct GeluErfOp {
  __device__ float operator()(float v) const { return gelu_erf_f(v); }
};
struct GeluTanhOp {
  __device__ float operator()(float v) const { return gelu_tanh_f(v); }
};

struct QuickGeluOp {
  __device__ float operator()(float v) const { return quick_gelu_f(v); }
};

template <typename Op>
__global__ void __launch_bounds__(kActThreads)
    unary_kernel(const float* x, float* y, int64_t n, Op op) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = op(x[i]);
  }
}

__global__ void __launch_bounds__(kActThreads)
    add_kernel(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = a[i] + b[i];
  }
}

__global__ void __launch_bounds__(kActThreads)
    swiglu_kernel(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = silu_f(gate[i]) * up[i];
  }
}

__global__ void __launch_bounds__(kActThreads)
    geglu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t hidden) {
  const int64_t total = rows * hidden;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / hidden;
    const int64_t c = i % hidden;
    const float* xr = x + r * 2 * hidden;
    y[i] = xr[c] * gelu_erf_f(xr[hidden + c]);
  }
}

Status check_elementwise(const char* op, const void* a, const void* b, const void* y, int64_t n) {
  if (n < 0)
    return invalid_argument(std::string("cuda ") + op + ": negative n " + std::to_string(n));
  if (n > 0 && (a == nullptr || b == nullptr || y == nullptr)) {
    return invalid_argument(std::string("cuda ") + op + ": null input or output");
  }
  return Status();
}

template <typename Op>
Status launch_unary(const char* name, const float* x, float* y, int64_t n, cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(check_elementwise(name, x, x, y, n));
  if (n == 0) return Status();
  unary_kernel<<<detail::grid_stride_blocks(n, kActThreads), kActThreads, 0, stream>>>(x, y, n,
                                                                                       Op{});
  TESSERA_CUDA_CHECK_LAUNCH(std::string(name) + ": kernel launch");
  return Status();
}

}  // namespace

Status silu(const float* x, float* y, int64_t n, cudaStream_t stream) {
  return launch_unary<SiluOp>("silu", x, y, n, stream);
}
Status gelu_erf(const float* x, float* y, int64_t n, cudaStream_t stream) {
  return launch_unary<GeluErfOp>("gelu_erf", x, y, n, stream);
}
Status gelu_tanh(const float* x, float* y, int64_t n, cudaStream_t stream) {
  return launch_unary<GeluTanhOp>("gelu_tanh", x, y, n, stream);
}

Status quick_gelu(const float* x, float* y, int64_t n, cudaStream_t stream) {
  return launch_unary<QuickGeluOp>("quick_gelu", x, y, n, stream);
}

Status add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(check_elementwise("add", a, b, y, n));
  if (n == 0) return Status();
  add_kernel<<<detail::grid_stride_blocks(n, kActThreads), kActThreads, 0, stream>>>(a, b, y, n);
  TESSERA_CUDA_CHECK_LAUNCH("add: kernel launch");
  return Status();
}

Status swiglu(const float* gate, const float* up, float* y, int64_t n, cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(check_elementwise("swiglu", gate, up, y, n));
  if (n == 0) return Status();
  swiglu_kernel<<<detail::grid_stride_blocks(n, kActThreads), kActThreads, 0, stream>>>(gate, up, y,
                                                                                        n);
  TESSERA_CUDA_CHECK_LAUNCH("swiglu: kernel launch");
  return Status();
}

Status geglu(const float* x, float* y, int64_t rows, int64_t hidden, cudaStream_t stream) {
  if (rows < 0 || hidden < 0) {
    return invalid_argument("cuda geglu: negative size (rows " + std::to_string(rows) +
                            ", hidden " + std::to_string(hidden) + ")");
  }
  const int64_t total = rows * hidden;
  TESSERA_RETURN_IF_ERROR(check_elementwise("geglu", x, x, y, total));
  if (total == 0) return Status();
  geglu_kernel<<<detail::grid_stride_blocks(total, kActThreads), kActThreads, 0, stream>>>(
      x, y, rows, hidden);
  TESSERA_CUDA_CHECK_LAUNCH("geglu: kernel launch");
  return Status();
}

namespace {

// One thread per (point, axis d, frequency j): both features of the pair, and the coordinate
// itself at j == 0. cos/sin of p pi/2 + c_j by the angle-addition formulas over the carrier's
// precomputed cos/sin (pm is never rounded to f32, as on the CPU).
__global__ void fourier_embed_kernel(const float* __restrict__ points, int64_t n,
                                     const float* __restrict__ freqs,
                                     const float* __restrict__ carrier_cs, int64_t num_freqs,
                                     float* __restrict__ out) {
  const int64_t dim = 3 + 6 * num_freqs, f3 = 3 * num_freqs;
  const int64_t total = n * f3;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = t / f3;
    const int64_t dj = t % f3;  // d * num_freqs + j
    const int64_t d = dj / num_freqs, j = dj % num_freqs;
    const float p = points[3 * i + d];
    float* o = out + i * dim;
    if (j == 0) o[d] = p;
    float sf, cf, sa, ca;
    sincosf(p * freqs[dj], &sf, &cf);
    sincosf(p * 1.57079632679489662f, &sa, &ca);
    const float cc = carrier_cs[j], cs = carrier_cs[num_freqs + j];
    o[3 + dj] = cf + (ca * cc - sa * cs);
    o[3 + f3 + dj] = sf + (sa * cc + ca * cs);
  }
}

}  // namespace

Status fourier_embed(const float* points, int64_t n, const float* freqs, const float* carrier_cs,
                     int64_t num_freqs, float* out, cudaStream_t stream) {
  if (n < 0 || num_freqs < 1) {
    return invalid_argument("cuda fourier_embed: n " + std::to_string(n) + ", num_freqs " +
                            std::to_string(num_freqs));
  }
  if (n == 0) return Status();
  if (points == nullptr || freqs == nullptr || carrier_cs == nullptr || out == nullptr) {
    return invalid_argument("cuda fourier_embed: null pointer");
  }
  constexpr int kThreads = 256;
  fourier_embed_kernel<<<detail::grid_stride_blocks(n * 3 * num_freqs, kThreads), kThreads, 0,
                         stream>>>(points, n, freqs, carrier_cs, num_freqs, out);
  TESSERA_CUDA_CHECK_LAUNCH("fourier_embed: kernel launch");
  return Status();
}

}  // namespace tessera::kernels::cuda
