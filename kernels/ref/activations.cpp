// Reference elementwise activations (tests only), evaluated in double.
#include <cmath>
#include <cstdint>

#include "kernels/ops.h"

namespace tessera::kernels::ref {

namespace {
double silu_d(double x) {
  return x / (1.0 + std::exp(-x));
}
double gelu_erf_d(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}
double gelu_tanh_d(double x) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
}  // namespace

void silu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(silu_d(x[i]));
}

void gelu_erf(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(gelu_erf_d(x[i]));
}

void gelu_tanh(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(gelu_tanh_d(x[i]));
}

void quick_gelu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(v / (1.0 + std::exp(-1.702 * v)));
  }
}

void add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void swiglu(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(silu_d(gate[i]) * up[i]);
}

void geglu(const float* x, float* y, int64_t rows, int64_t hidden) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* value = x + r * 2 * hidden;
    const float* gate = value + hidden;
    for (int64_t i = 0; i < hidden; ++i)
      y[r * hidden + i] = static_cast<float>(value[i] * gelu_erf_d(gate[i]));
  }
}

}  // namespace tessera::kernels::ref
