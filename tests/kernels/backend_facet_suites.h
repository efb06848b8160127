// The conformance suites of the backend's facets (kernels/backend.h, docs/adding-an-op.md): one
// value-parameterised suite per facet, each op of the facet against its reference (kernels::ref,
// or the CPU's host version where that is the reference, as for polygonize_cells), through the
// Backend interface only: memory from allocate(), data in with upload(), results out with
// download(). Every backend that has a facet runs its suite: the CPU backend in
// backend_facets_test.cpp, the CUDA backend in backend_facets_gpu_test.cpp (skipped there without
// a device). A new op adds its test here, and every backend is held to it at once.
//
// The TEST_Ps are defined in this header: include it from exactly one file of each test binary,
// which instantiates the suites for its backends (the ones a binary has no backend for are
// allowed to stay uninstantiated).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "engine/shape/shape_decoder.h"
#include "kernels/backend.h"
#include "kernels/diffusion_ops.h"
#include "kernels/marching_tets.h"
#include "kernels/ops.h"
#include "kernels/sampling.h"
#include "tests/support/kernel_test_util.h"

namespace tessera::test {

// A backend under test: the name its tests carry, and how to get it (null, with the reason in
// `why`, where this machine has none).
struct BackendUnderTest {
  std::string name;
  std::function<kernels::Backend*(std::string* why)> get;
};
// gtest prints the parameter by its name, not its bytes.
inline void PrintTo(const BackendUnderTest& backend, std::ostream* os) {
  *os << backend.name;
}
inline std::string backend_test_name(const ::testing::TestParamInfo<BackendUnderTest>& info) {
  return info.param.name;
}

class FacetTest : public ::testing::TestWithParam<BackendUnderTest> {
 protected:
  void SetUp() override {
    std::string why;
    backend_ = GetParam().get(&why);
    if (backend_ == nullptr) GTEST_SKIP() << GetParam().name << ": " << why;
  }
  kernels::Backend& be() { return *backend_; }

  // Backend memory holding host's values, kept for the test's life.
  template <typename T>
  T* put(const std::vector<T>& host) {
    T* p = space<T>(host.size());
    if (p != nullptr && !host.empty()) {
      EXPECT_TRUE(be().upload(p, host.data(), host.size() * sizeof(T)).ok());
    }
    return p;
  }
  // n uninitialised elements of backend memory, kept for the test's life.
  template <typename T = float>
  T* space(size_t n) {
    auto b = be().allocate(std::max<size_t>(n, 1) * sizeof(T));
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (!b.ok()) return nullptr;
    buffers_.push_back(std::move(b).value());
    return buffers_.back().template as<T>();
  }
  // n elements of backend memory back on the host (synchronizes).
  template <typename T>
  std::vector<T> get(const T* p, size_t n) {
    std::vector<T> host(n);
    EXPECT_TRUE(be().download(host.data(), p, n * sizeof(T)).ok());
    return host;
  }
  // An f32 weight [rows, cols] in the backend's memory.
  kernels::Weight weight(const std::vector<float>& host, int64_t rows, int64_t cols) {
    kernels::DeviceBuffer storage;
    auto w = be().upload_weight(kernels::Weight{host.data(), DType::kF32, rows, cols}, &storage);
    EXPECT_TRUE(w.ok()) << w.status().to_string();
    if (storage.data() != nullptr) buffers_.push_back(std::move(storage));
    if (!w.ok()) return {};
    // A host backend's weight is the host vector itself: keep a copy that lives with the test.
    if (w->data == host.data()) {
      hosts_.push_back(host);
      w->data = hosts_.back().data();
    }
    return *w;
  }

 private:
  kernels::Backend* backend_ = nullptr;
  std::vector<kernels::DeviceBuffer> buffers_;
  std::vector<std::vector<float>> hosts_;
};

class TensorOpsConformance : public FacetTest {};

// The suite of an optional facet: skipped on a backend that does not have it.
template <typename Ops, Ops* (kernels::Backend::*Facet)()>
class OptionalFacetTest : public FacetTest {
 protected:
  void SetUp() override {
    FacetTest::SetUp();
    if (IsSkipped()) return;
    if ((be().*Facet)() == nullptr) GTEST_SKIP() << be().name() << " does not have this facet";
  }
  Ops& ops() { return *(be().*Facet)(); }
};

class DecodeOpsConformance
    : public OptionalFacetTest<kernels::DecodeOps, &kernels::Backend::decode> {};
class DiffusionOpsConformance
    : public OptionalFacetTest<kernels::DiffusionOps, &kernels::Backend::diffusion> {};
class ExtractionOpsConformance
    : public OptionalFacetTest<kernels::ExtractionOps, &kernels::Backend::extraction> {};

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TensorOpsConformance);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DecodeOpsConformance);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DiffusionOpsConformance);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ExtractionOpsConformance);

// The tolerance of every f32 op here: summation order and libm/fast-math differences only.
inline ::testing::AssertionResult near_ref(const std::vector<float>& got,
                                           const std::vector<float>& want, double rel = 2e-5) {
  return close_rel(got, want, rel);
}

// ---- TensorOps ----------------------------------------------------------------------------------

TEST_P(TensorOpsConformance, LinearAndLinearMultiMatchTheReference) {
  const int64_t k = 67, n = 45;
  const std::vector<float> w = random_floats(size_t(n * k), 1),
                           w2 = random_floats(size_t(n * k), 2);
  const std::vector<float> bias = random_floats(size_t(n), 3);
  const kernels::Weight dw = weight(w, n, k), dw2 = weight(w2, n, k);
  for (int64_t m : {1, 7, 40}) {
    SCOPED_TRACE("m " + std::to_string(m));
    const std::vector<float> x = random_floats(size_t(m * k), 4 + uint64_t(m));
    std::vector<float> want(static_cast<size_t>(m * n)), want2(static_cast<size_t>(m * n));
    kernels::ref::linear(x.data(), m, kernels::Weight{w.data(), DType::kF32, n, k}, bias.data(),
                         want.data());
    kernels::ref::linear(x.data(), m, kernels::Weight{w2.data(), DType::kF32, n, k}, nullptr,
                         want2.data());
    const float* dx = put(x);
    float* y = space(want.size());
    ASSERT_TRUE(be().linear(dx, m, dw, put(bias), y).ok());
    EXPECT_TRUE(near_ref(get(y, want.size()), want));
    float *y1 = space(want.size()), *y2 = space(want.size());
    const kernels::LinearPart parts[2] = {{dw, put(bias), y1}, {dw2, nullptr, y2}};
    ASSERT_TRUE(be().linear_multi(dx, m, parts, 2).ok());
    EXPECT_TRUE(near_ref(get(y1, want.size()), want));
    EXPECT_TRUE(near_ref(get(y2, want2.size()), want2));
  }
}

TEST_P(TensorOpsConformance, NormsMatchTheReference) {
  const int64_t rows = 5, dim = 96;
  const std::vector<float> x = random_floats(size_t(rows * dim), 10, -3.0f, 5.0f);
  const std::vector<float> g = random_floats(size_t(dim), 11), b = random_floats(size_t(dim), 12);
  const float* dx = put(x);
  std::vector<float> want(x.size());
  float* y = space(x.size());
  kernels::ref::layer_norm(x.data(), g.data(), b.data(), want.data(), rows, dim, 1e-5f);
  ASSERT_TRUE(be().layer_norm(dx, put(g), put(b), y, rows, dim, 1e-5f).ok());
  EXPECT_TRUE(near_ref(get(y, x.size()), want));
  kernels::ref::layer_norm(x.data(), nullptr, nullptr, want.data(), rows, dim, 1e-6f);
  ASSERT_TRUE(be().layer_norm(dx, nullptr, nullptr, y, rows, dim, 1e-6f).ok());
  EXPECT_TRUE(near_ref(get(y, x.size()), want));
  kernels::ref::rms_norm(x.data(), g.data(), want.data(), rows, dim, 1e-6f);
  ASSERT_TRUE(be().rms_norm(dx, put(g), y, rows, dim, 1e-6f).ok());
  EXPECT_TRUE(near_ref(get(y, x.size()), want));
}

TEST_P(TensorOpsConformance, ElementwiseOpsAndSoftmaxMatchTheReference) {
  const int64_t n = 1000, rows = 8, hidden = 125;
  const std::vector<float> a = random_floats(size_t(n), 20, -6.0f, 6.0f);
  const std::vector<float> c = random_floats(size_t(n), 21, -6.0f, 6.0f);
  const float *da = put(a), *dc = put(c);
  float* y = space(size_t(n));
  std::vector<float> want(static_cast<size_t>(n));
  using Unary = std::function<Status(const float*, float*, int64_t)>;
  using RefUnary = void (*)(const float*, float*, int64_t);
  const std::vector<std::tuple<std::string, Unary, RefUnary>> unary = {
      {"silu", [&](const float* x, float* o, int64_t k) { return be().silu(x, o, k); },
       kernels::ref::silu},
      {"gelu_erf", [&](const float* x, float* o, int64_t k) { return be().gelu_erf(x, o, k); },
       kernels::ref::gelu_erf},
      {"gelu_tanh", [&](const float* x, float* o, int64_t k) { return be().gelu_tanh(x, o, k); },
       kernels::ref::gelu_tanh},
      {"quick_gelu", [&](const float* x, float* o, int64_t k) { return be().quick_gelu(x, o, k); },
       kernels::ref::quick_gelu},
  };
  for (const auto& [name, op, ref] : unary) {
    SCOPED_TRACE(name);
    ref(a.data(), want.data(), n);
    ASSERT_TRUE(op(da, y, n).ok());
    EXPECT_TRUE(near_ref(get(y, size_t(n)), want, 1e-5));
  }
  kernels::ref::swiglu(a.data(), c.data(), want.data(), n);
  ASSERT_TRUE(be().swiglu(da, dc, y, n).ok());
  EXPECT_TRUE(near_ref(get(y, size_t(n)), want, 1e-5));
  kernels::ref::add(a.data(), c.data(), want.data(), n);
  ASSERT_TRUE(be().add(da, dc, y, n).ok());
  EXPECT_TRUE(all_equal(get(y, size_t(n)).data(), want.data(), size_t(n)));
  std::vector<float> gl(static_cast<size_t>(rows * hidden));
  kernels::ref::geglu(a.data(), gl.data(), rows, hidden / 2);
  ASSERT_TRUE(be().geglu(da, y, rows, hidden / 2).ok());
  std::vector<float> got = get(y, size_t(rows * (hidden / 2)));
  gl.resize(got.size());
  EXPECT_TRUE(near_ref(got, gl, 1e-5));
  kernels::ref::softmax(a.data(), want.data(), rows, n / rows);
  ASSERT_TRUE(be().softmax(da, y, rows, n / rows).ok());
  EXPECT_TRUE(near_ref(get(y, size_t(n)), want, 1e-5));
}

TEST_P(TensorOpsConformance, RopeAndItsFusionsMatchTheirParts) {
  const int64_t tokens = 6, heads = 3, head_dim = 16, d = heads * head_dim;
  const std::vector<float> x = random_floats(size_t(tokens * d), 30);
  const std::vector<float> x2 = random_floats(size_t(tokens * d), 31);
  const std::vector<float> g = random_floats(size_t(head_dim), 32, 0.5f, 1.5f);
  const std::vector<float> g2 = random_floats(size_t(head_dim), 33, 0.5f, 1.5f);
  const std::vector<int32_t> pos = {0, 1, 2, 7, 100, 4095};
  std::vector<float> want = x, want2 = x2;
  kernels::ref::rms_norm(want.data(), g.data(), want.data(), tokens * heads, head_dim, 1e-6f);
  kernels::ref::rope_interleaved(want.data(), tokens, heads, head_dim, d, pos.data(), 10000.0f);
  kernels::ref::rms_norm(want2.data(), g2.data(), want2.data(), tokens * heads, head_dim, 1e-6f);
  kernels::ref::rope_interleaved(want2.data(), tokens, heads, head_dim, d, pos.data(), 10000.0f);
  float *dq = put(x), *dk = put(x2);
  ASSERT_TRUE(be().rms_norm_rope_pair(dq, put(g), dk, put(g2), tokens, heads, head_dim, 1e-6f,
                                      put(pos), 10000.0f)
                  .ok());
  EXPECT_TRUE(near_ref(get(dq, x.size()), want, 1e-5));
  EXPECT_TRUE(near_ref(get(dk, x2.size()), want2, 1e-5));
  // add_layer_norm: x += t, h = LayerNorm(x).
  std::vector<float> sum(x.size()), h(x.size());
  kernels::ref::add(x.data(), x2.data(), sum.data(), int64_t(x.size()));
  kernels::ref::layer_norm(sum.data(), nullptr, nullptr, h.data(), tokens, d, 1e-6f);
  float* dx = put(x);
  float* dh = space(x.size());
  ASSERT_TRUE(be().add_layer_norm(dx, put(x2), dh, tokens, d, 1e-6f).ok());
  EXPECT_TRUE(all_equal(get(dx, x.size()).data(), sum.data(), x.size()));
  EXPECT_TRUE(near_ref(get(dh, x.size()), h, 1e-5));
}

TEST_P(TensorOpsConformance, LinearSwigluMatchesItsParts) {
  const int64_t m = 3, k = 48, n = 40;
  const std::vector<float> x = random_floats(size_t(m * k), 40);
  const std::vector<float> wg = random_floats(size_t(n * k), 41),
                           wu = random_floats(size_t(n * k), 42);
  const std::vector<float> bg = random_floats(size_t(n), 43);
  std::vector<float> gate(static_cast<size_t>(m * n)), up(static_cast<size_t>(m * n)),
      want(size_t(m * n));
  kernels::ref::linear(x.data(), m, kernels::Weight{wg.data(), DType::kF32, n, k}, bg.data(),
                       gate.data());
  kernels::ref::linear(x.data(), m, kernels::Weight{wu.data(), DType::kF32, n, k}, nullptr,
                       up.data());
  kernels::ref::swiglu(gate.data(), up.data(), want.data(), m * n);
  float* y = space(want.size());
  ASSERT_TRUE(be().linear_swiglu(put(x), m, weight(wg, n, k), put(bg), weight(wu, n, k), nullptr,
                                 space(want.size()), space(want.size()), y)
                  .ok());
  EXPECT_TRUE(near_ref(get(y, want.size()), want, 1e-4));
}

TEST_P(TensorOpsConformance, AttentionMatchesTheReference) {
  const int64_t batch = 2, heads = 2, q_len = 9, kv_len = 9, head_dim = 32;
  const float scale = 1.0f / std::sqrt(float(head_dim));
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    const kernels::AttentionShape s =
        kernels::contiguous_attention(batch, heads, q_len, kv_len, head_dim, causal, scale);
    const size_t nq = size_t(batch * q_len * heads * head_dim);
    const std::vector<float> q = random_floats(nq, 50), k = random_floats(nq, 51),
                             v = random_floats(nq, 52);
    std::vector<float> want(nq);
    kernels::ref::attention(q.data(), k.data(), v.data(), want.data(), s);
    float* o = space(nq);
    ASSERT_TRUE(be().attention(put(q), put(k), put(v), o, s).ok());
    EXPECT_TRUE(near_ref(get(o, nq), want, 1e-5));
  }
  const kernels::AttentionShape d =
      kernels::contiguous_attention(batch, heads, 1, 300, head_dim, false, scale);
  const std::vector<float> q = random_floats(size_t(batch * heads * head_dim), 53);
  const std::vector<float> k = random_floats(size_t(batch * 300 * heads * head_dim), 54);
  const std::vector<float> v = random_floats(k.size(), 55);
  std::vector<float> want(q.size());
  kernels::ref::attention_decode(q.data(), k.data(), v.data(), want.data(), d);
  float* o = space(q.size());
  ASSERT_TRUE(be().attention_decode(put(q), put(k), put(v), o, d).ok());
  EXPECT_TRUE(near_ref(get(o, q.size()), want, 1e-5));
}

TEST_P(TensorOpsConformance, EmbeddingGatherCopiesRowsExactly) {
  const int64_t rows = 50, dim = 24;
  const std::vector<float> table = random_floats(size_t(rows * dim), 60);
  const std::vector<int32_t> ids = {0, 49, 7, 7, 23};
  std::vector<float> want(ids.size() * size_t(dim));
  kernels::ref::embedding_gather(kernels::Weight{table.data(), DType::kF32, rows, dim}, ids.data(),
                                 int64_t(ids.size()), want.data());
  float* out = space(want.size());
  ASSERT_TRUE(
      be().embedding_gather(weight(table, rows, dim), put(ids), int64_t(ids.size()), out).ok());
  EXPECT_TRUE(all_equal(get(out, want.size()).data(), want.data(), want.size()));
}

// ---- DecodeOps ----------------------------------------------------------------------------------

TEST_P(DecodeOpsConformance, Bf16ConversionRoundsToNearestEvenAndWidensExactly) {
  std::vector<float> x = random_floats(1000, 70, -100.0f, 100.0f);
  x.push_back(1.00390625f);  // halfway between two bf16 values: rounds to the even one
  x.push_back(-0.0f);
  std::vector<uint16_t> want(x.size());
  convert_f32_to_bf16(x.data(), want.data(), want.size());
  uint16_t* b = space<uint16_t>(x.size());
  ASSERT_TRUE(ops().convert_f32_to_bf16(b, put(x), int64_t(x.size())).ok());
  EXPECT_EQ(get(b, x.size()), want);
  float* back = space(x.size());
  ASSERT_TRUE(ops().convert_bf16_to_f32(back, b, int64_t(x.size())).ok());
  std::vector<float> widened(x.size());
  convert_bf16_to_f32(want.data(), widened.data(), widened.size());
  EXPECT_TRUE(all_equal(get(back, x.size()).data(), widened.data(), x.size()));
}

// The step-counter ops read *step where they run: rows land at slot offset + step, positions
// count from it, and attention sees the first step + offset keys.
TEST_P(DecodeOpsConformance, StepOpsReadTheStepCounterWhereTheyRun) {
  const int64_t batch = 2, heads = 2, head_dim = 16, d = heads * head_dim, slots = 12;
  const std::vector<int64_t> step_host = {5};
  int64_t* step = put(step_host);
  const std::vector<float> rows = random_floats(size_t(batch * d), 80);
  std::vector<float> cache_host(size_t(batch * slots * d), 0.0f);
  float* cache = put(cache_host);
  ASSERT_TRUE(
      ops().store_kv_rows(cache, DType::kF32, put(rows), batch, d, slots * d, 2, step).ok());
  const std::vector<float> cache_got = get(cache, cache_host.size());
  for (int64_t b = 0; b < batch; ++b) {
    EXPECT_EQ(0, std::memcmp(cache_got.data() + (b * slots + 7) * d, rows.data() + b * d,
                             size_t(d) * sizeof(float)))
        << "row " << b << " not at slot 2 + step";
  }
  int32_t* positions = space<int32_t>(6);
  ASSERT_TRUE(ops().set_positions(positions, 2, 3, step, 10).ok());
  EXPECT_EQ(get(positions, 6), (std::vector<int32_t>{15, 16, 17, 15, 16, 17}));

  kernels::AttentionShape s =
      kernels::contiguous_attention(batch, heads, 1, slots, head_dim, false, 0.25f);
  const std::vector<float> q = random_floats(size_t(batch * d), 81);
  const std::vector<float> k = random_floats(size_t(batch * slots * d), 82);
  const std::vector<float> v = random_floats(k.size(), 83);
  kernels::AttentionShape seen = s;
  seen.kv_len = 5 + 3;  // *step + kv_len_offset
  std::vector<float> want(q.size());
  kernels::ref::attention_decode(q.data(), k.data(), v.data(), want.data(), seen);
  float* o = space(q.size());
  ASSERT_TRUE(ops().attention_decode_at(put(q), put(k), put(v), DType::kF32, o, s, step, 3).ok());
  EXPECT_TRUE(near_ref(get(o, q.size()), want, 1e-5));
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  convert_f32_to_bf16(k.data(), k16.data(), k16.size());
  convert_f32_to_bf16(v.data(), v16.data(), v16.size());
  kernels::ref::attention_decode_bf16kv(q.data(), k16.data(), v16.data(), want.data(), seen);
  ASSERT_TRUE(
      ops().attention_decode_at(put(q), put(k16), put(v16), DType::kBF16, o, s, step, 3).ok());
  EXPECT_TRUE(near_ref(get(o, q.size()), want, 1e-4));
  ASSERT_TRUE(ops().attention_decode_bf16kv(put(q), put(k16), put(v16), o, s).ok());
  kernels::ref::attention_decode_bf16kv(q.data(), k16.data(), v16.data(), want.data(), s);
  EXPECT_TRUE(near_ref(get(o, q.size()), want, 1e-4));
}

TEST_P(DecodeOpsConformance, ChooseTokenMixesGuidanceAndAdvancesTheStep) {
  const int64_t codes = 300, steps = 4;
  kernels::TokenChoice c;
  c.codes = codes;
  c.row_stride = codes;
  c.guided = true;
  c.guidance_scale = 3.0f;
  c.total_steps = steps;
  int64_t* step = put(std::vector<int64_t>{0});
  uint64_t* rng = put(std::vector<uint64_t>{1, 2, 3, 4});
  int32_t* ids = space<int32_t>(1);
  int32_t* ring = space<int32_t>(size_t(steps));
  std::vector<int32_t> want;
  for (int64_t i = 0; i < steps; ++i) {
    const std::vector<float> logits = random_floats(size_t(2 * codes), 90 + uint64_t(i));
    const float g = kernels::guidance_weight(3.0f, i, steps);
    std::vector<float> mixed(static_cast<size_t>(codes));
    for (int64_t j = 0; j < codes; ++j) {
      mixed[size_t(j)] = (1.0f + g) * logits[size_t(j)] - g * logits[size_t(codes + j)];
    }
    want.push_back(kernels::argmax(mixed.data(), codes));
    ASSERT_TRUE(ops().choose_token(put(logits), c, step, rng, ids, 1, ring, steps).ok());
    EXPECT_EQ(get(ids, 1)[0], want.back()) << "step " << i;
  }
  EXPECT_EQ(get(step, 1)[0], steps);
  EXPECT_EQ(get(ring, size_t(steps)), want);
}

// ---- DiffusionOps -------------------------------------------------------------------------------

TEST_P(DiffusionOpsConformance, GroupNormWithAndWithoutSiluMatchesTheReference) {
  const kernels::ImageShape s{2, 5, 7, 64};
  const std::vector<float> x = random_floats(size_t(s.elements()), 100, -2.0f, 4.0f);
  const std::vector<float> g = random_floats(size_t(s.channels), 101);
  const std::vector<float> b = random_floats(size_t(s.channels), 102);
  float* y = space(x.size());
  for (bool silu : {false, true}) {
    for (kernels::Fusion f : {kernels::Fusion::kOn, kernels::Fusion::kOff}) {
      SCOPED_TRACE(std::string(silu ? "silu " : "") +
                   (f == kernels::Fusion::kOn ? "fused" : "off"));
      std::vector<float> want(x.size());
      kernels::ref::group_norm(x.data(), g.data(), b.data(), want.data(), s, 32, 1e-5f, silu);
      ASSERT_TRUE(ops().group_norm(put(x), put(g), put(b), y, s, 32, 1e-5f, silu, f).ok());
      EXPECT_TRUE(near_ref(get(y, x.size()), want, 1e-5));
    }
  }
}

TEST_P(DiffusionOpsConformance, ConvolutionsMatchTheReferenceWithEveryAlgorithm) {
  struct Case {
    const char* name;
    kernels::Conv2dShape s;
  };
  std::vector<Case> cases;
  kernels::Conv2dShape s;
  s.batch = 2, s.in_h = 9, s.in_w = 10, s.in_c = 32, s.out_c = 24;
  cases.push_back({"3x3", s});
  s.stride = 2;
  cases.push_back({"3x3 stride 2", s});
  s.stride = 1, s.upsample2x = true;
  cases.push_back({"3x3 upsampled", s});
  s.upsample2x = false, s.kernel = 1;
  cases.push_back({"1x1", s});
  for (const Case& c : cases) {
    const kernels::Conv2dShape& cs = c.s;
    const std::vector<float> x =
        random_floats(size_t(cs.batch * cs.in_h * cs.in_w * cs.in_c), 110, -1.0f, 2.0f);
    const std::vector<float> w =
        random_floats(size_t(cs.out_c * cs.in_c * cs.kernel * cs.kernel), 111, -0.1f, 0.1f);
    const std::vector<float> bias = random_floats(size_t(cs.out_c), 112);
    const size_t ny = size_t(cs.batch * cs.out_h() * cs.out_w() * cs.out_c);
    std::vector<float> want(ny);
    kernels::ref::conv2d(x.data(), w.data(), bias.data(), want.data(), cs);
    for (kernels::ConvAlgo algo : {kernels::ConvAlgo::kGemm, kernels::ConvAlgo::kWinograd}) {
      if (algo == kernels::ConvAlgo::kWinograd && !kernels::cpu::winograd_applies(cs)) continue;
      SCOPED_TRACE(std::string(c.name) +
                   (algo == kernels::ConvAlgo::kGemm ? " im2col" : " winograd"));
      std::vector<float> packed(size_t(kernels::cpu::conv2d_packed_floats(cs, algo)));
      kernels::cpu::conv2d_pack_weights(w.data(), cs, algo, packed.data());
      float* y = space(ny);
      ASSERT_TRUE(ops().conv2d(put(x), put(packed), put(bias), y, cs, algo).ok());
      EXPECT_TRUE(near_ref(get(y, ny), want, algo == kernels::ConvAlgo::kGemm ? 5e-6 : 2e-5));
    }
    const kernels::ConvAlgo chosen = ops().choose_conv_algo(cs);
    EXPECT_TRUE(chosen == kernels::ConvAlgo::kGemm || kernels::cpu::winograd_applies(cs))
        << c.name << ": the chooser picked Winograd where it does not apply";
  }
}

TEST_P(DiffusionOpsConformance, DataMovementOpsAreExact) {
  const kernels::ImageShape s{2, 3, 4, 5};
  const std::vector<float> x = random_floats(size_t(s.elements()), 120);
  std::vector<float> want(size_t(4 * s.elements()));
  kernels::ref::upsample_nearest2x(x.data(), want.data(), s);
  float* up = space(want.size());
  ASSERT_TRUE(ops().upsample_nearest2x(put(x), up, s).ok());
  EXPECT_TRUE(all_equal(get(up, want.size()).data(), want.data(), want.size()));

  const int64_t pixels = s.pixels(), ac = 5, bc = 3;
  const std::vector<float> b = random_floats(size_t(pixels * bc), 121);
  float* cat = space(size_t(pixels * (ac + bc)));
  ASSERT_TRUE(ops().concat_channels(put(x), ac, put(b), bc, cat, pixels).ok());
  const std::vector<float> got = get(cat, size_t(pixels * (ac + bc)));
  for (int64_t p = 0; p < pixels; ++p) {
    for (int64_t c = 0; c < ac + bc; ++c) {
      const float w = c < ac ? x[size_t(p * ac + c)] : b[size_t(p * bc + c - ac)];
      ASSERT_EQ(got[size_t(p * (ac + bc) + c)], w) << "pixel " << p << " channel " << c;
    }
  }

  const std::vector<float> rows = random_floats(size_t(s.batch * s.channels), 122);
  float* y = put(x);
  ASSERT_TRUE(ops().add_per_image(y, put(rows), s.batch, s.height * s.width, s.channels).ok());
  const std::vector<float> added = get(y, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t n = i / size_t(s.height * s.width * s.channels), c = i % size_t(s.channels);
    ASSERT_EQ(added[i], x[i] + rows[n * size_t(s.channels) + c]) << "element " << i;
  }

  float* q = space(x.size());
  ASSERT_TRUE(ops().divide(put(x), 0.18215f, q, int64_t(x.size())).ok());
  const std::vector<float> divided = get(q, x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(divided[i], x[i] / 0.18215f) << i;
}

TEST_P(DiffusionOpsConformance, PointwiseMapsMatchTheReference) {
  // Values across the clamp's knee and both signs, an odd count (no vector-width tail assumed),
  // and one map in place.
  std::vector<float> x = random_floats(1001, 31, -8.0f, 8.0f);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 40.0f;
  x[3] = -40.0f;
  const int64_t n = int64_t(x.size());
  using K = kernels::Pointwise::Kind;
  for (const kernels::Pointwise f :
       {kernels::Pointwise{K::kRelu, 1.0f, 0.0f}, kernels::Pointwise{K::kScaledTanh, 3.0f, 0.0f},
        kernels::Pointwise{K::kAffine, 2.0f, -1.0f}}) {
    std::vector<float> want(x.size());
    kernels::ref::pointwise(x.data(), want.data(), n, f);
    float* y = space(x.size());
    ASSERT_TRUE(ops().pointwise(put(x), y, n, f).ok());
    const std::vector<float> got = get(y, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-6f * std::max(1.0f, std::fabs(want[i])))
          << "kind " << int(f.kind) << " at " << i << " (x " << x[i] << ")";
    }
    float* inplace = put(x);
    ASSERT_TRUE(ops().pointwise(inplace, inplace, n, f).ok());
    EXPECT_EQ(get(inplace, x.size()), got) << "kind " << int(f.kind) << " in place";
  }
  EXPECT_EQ(kernels::Pointwise{}.kind, K::kRelu);
}

TEST_P(DiffusionOpsConformance, GegluFeedForwardMatchesTheReferenceFusedOrNot) {
  const int64_t rows = 7, hidden = 80;
  const std::vector<float> x = random_floats(size_t(rows * 2 * hidden), 130, -4.0f, 4.0f);
  std::vector<float> want(static_cast<size_t>(rows * hidden));
  kernels::ref::geglu(x.data(), want.data(), rows, hidden);
  for (kernels::Fusion f : {kernels::Fusion::kOn, kernels::Fusion::kOff}) {
    float* y = space(want.size());
    ASSERT_TRUE(ops().geglu_ff(put(x), y, rows, hidden, f).ok());
    EXPECT_TRUE(near_ref(get(y, want.size()), want, 1e-5));
  }
}

TEST_P(DiffusionOpsConformance, AttentionMatchesTheReferenceWithEveryAlgorithm) {
  const int64_t batch = 2, heads = 2, q_len = 64, kv_len = 77, head_dim = 40;
  kernels::AttentionShape s = kernels::contiguous_attention(batch, heads, q_len, kv_len, head_dim,
                                                            false, 1.0f / std::sqrt(40.0f));
  const size_t nq = size_t(batch * q_len * heads * head_dim);
  const size_t nk = size_t(batch * kv_len * heads * head_dim);
  const std::vector<float> q = random_floats(nq, 140), k = random_floats(nk, 141),
                           v = random_floats(nk, 142);
  std::vector<float> want(nq);
  kernels::ref::attention(q.data(), k.data(), v.data(), want.data(), s);
  for (kernels::AttentionAlgo a :
       {kernels::AttentionAlgo::kAuto, kernels::AttentionAlgo::kFlash,
        kernels::AttentionAlgo::kPartialFused, kernels::AttentionAlgo::kNaive}) {
    SCOPED_TRACE("algorithm " + std::to_string(static_cast<int>(a)));
    float* o = space(nq);
    ASSERT_TRUE(ops().diffusion_attention(put(q), put(k), put(v), o, s, a).ok());
    EXPECT_TRUE(near_ref(get(o, nq), want, 1e-5));
  }
}

// The host bf16 products run where the backend says so and are refused, by name, where it does
// not; a packing is the backend's own: an empty one is refused.
TEST_P(DiffusionOpsConformance, Bf16ProductsRunWhereOfferedAndAreRefusedElsewhere) {
  const int64_t m = 20, k = 64, n = 48;
  const std::vector<float> w = random_floats(size_t(n * k), 150);
  const std::vector<float> x = random_floats(size_t(m * k), 151);
  auto packed = ops().pack_linear_bf16(kernels::Weight{w.data(), DType::kF32, n, k});
  if (!ops().bf16_compute()) {
    ASSERT_FALSE(packed.ok());
    EXPECT_EQ(packed.status().code(), ErrorCode::kUnsupported);
    EXPECT_NE(packed.status().message().find("pack_linear_bf16"), std::string::npos)
        << packed.status().message();
    EXPECT_EQ(
        ops().linear_bf16(put(x), m, kernels::PackedWeight(), nullptr, space(size_t(m * n))).code(),
        ErrorCode::kUnsupported);
    return;
  }
  ASSERT_TRUE(packed.ok()) << packed.status().to_string();
  std::vector<float> want(static_cast<size_t>(m * n));
  kernels::ref::linear(x.data(), m, kernels::Weight{w.data(), DType::kF32, n, k}, nullptr,
                       want.data());
  float* y = space(want.size());
  ASSERT_TRUE(ops().linear_bf16(put(x), m, *packed, nullptr, y).ok());
  EXPECT_TRUE(near_ref(get(y, want.size()), want, 2e-2));
  EXPECT_EQ(ops().linear_bf16(put(x), m, kernels::PackedWeight(), nullptr, y).code(),
            ErrorCode::kInvalidArgument);
}

// ---- ExtractionOps ------------------------------------------------------------------------------

TEST_P(ExtractionOpsConformance, FourierFeaturesMatchTheHostReference) {
  const int64_t n = 500, num_freqs = 8, dim = 3 + 6 * num_freqs;
  std::vector<float> points(static_cast<size_t>(3 * n)), freqs(static_cast<size_t>(3 * num_freqs));
  for (size_t i = 0; i < points.size(); ++i) points[i] = std::sin(0.37f * float(i));
  for (size_t i = 0; i < freqs.size(); ++i) freqs[i] = 4.0f * std::cos(1.3f * float(i));
  std::vector<float> want(static_cast<size_t>(n * dim));
  shape::fourier_embed_reference(points.data(), n, freqs.data(), num_freqs, want.data());
  const std::vector<float> carrier = shape::fourier_carrier(num_freqs);
  std::vector<float> cs(static_cast<size_t>(2 * num_freqs));
  for (int64_t j = 0; j < num_freqs; ++j) {
    cs[size_t(j)] = float(std::cos(double{carrier[size_t(j)]}));
    cs[size_t(num_freqs + j)] = float(std::sin(double{carrier[size_t(j)]}));
  }
  float* out = space(want.size());
  ASSERT_TRUE(ops().fourier_embed(put(points), n, put(freqs), put(cs), num_freqs, out).ok());
  EXPECT_TRUE(all_close(get(out, want.size()).data(), want.data(), want.size(), 2e-5, 0));
}

TEST_P(ExtractionOpsConformance, PolygonizedCellsMatchTheHostPolygonizer) {
  kernels::CellGrid g;
  g.n[0] = g.n[1] = g.n[2] = 12;
  g.origin[0] = g.origin[1] = g.origin[2] = -1.1f;
  g.spacing = 0.2f;
  std::vector<int64_t> cells;
  std::vector<float> corners;
  auto value = [&](int64_t i, int64_t j, int64_t k) {
    const float x = g.origin[0] + g.spacing * float(i), y = g.origin[1] + g.spacing * float(j),
                z = g.origin[2] + g.spacing * float(k);
    return 0.8f - std::sqrt(x * x + y * y + z * z);
  };
  for (int64_t k = 0; k + 1 < g.n[2]; ++k) {
    for (int64_t j = 0; j + 1 < g.n[1]; ++j) {
      for (int64_t i = 0; i + 1 < g.n[0]; ++i) {
        cells.push_back(i + g.n[0] * (j + g.n[1] * k));
        for (int c = 0; c < 8; ++c)
          corners.push_back(value(i + (c & 1), j + (c >> 1 & 1), k + (c >> 2)));
      }
    }
  }
  const int64_t n = int64_t(cells.size());
  std::vector<float> want_pos, got_pos;
  std::vector<uint32_t> want_tri, got_tri;
  ASSERT_TRUE(
      kernels::cpu::polygonize_cells(g, cells.data(), corners.data(), n, &want_pos, &want_tri)
          .ok());
  ASSERT_FALSE(want_tri.empty());
  ASSERT_TRUE(ops().polygonize_cells(g, cells.data(), corners.data(), n, &got_pos, &got_tri).ok());
  EXPECT_EQ(got_tri, want_tri);
  EXPECT_TRUE(all_close(got_pos.data(), want_pos.data(), want_pos.size(), 1e-6, 0));
}

}  // namespace tessera::test
