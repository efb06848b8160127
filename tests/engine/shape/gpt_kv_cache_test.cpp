// GptSession's bf16 K/V cache (GptSessionOptions::kv_dtype) on the v0.5 parity fixture: the
// default follows the weight dtype, prefill and forward_full logits are those of the f32 cache
// (their attention runs over f32 K/V), decode logits stay within the bf16 rounding of K/V of the
// f32 cache's and of the reference's, greedy tokens agree, and the reuse of the unconditional
// row's condition K/V works from the bf16 cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "engine/shape/gpt.h"
#include "tests/support/gpt_parity.h"
#include "tests/support/kernel_test_util.h"

namespace tessera::shape {
namespace {

constexpr int kVocab = 67;

using Models = test::ParityGpts;
Models& models() {
  return test::parity_gpts();
}

// |a - e| <= rel * max|e| elementwise: bf16 K/V move logits by ~2^-9 of their scale.
::testing::AssertionResult close_to_scale(const std::vector<float>& a, const std::vector<float>& e,
                                          double rel) {
  double scale = 0;
  for (float v : e) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  return test::all_close(a.data(), e.data(), a.size(), rel * scale, 0.0);
}

std::unique_ptr<GptSession> session(const CubeGpt& model, DType kv, int64_t len) {
  GptSessionOptions o;
  o.kv_dtype = kv;
  return GptSession::create(model, 2, len, o).value();
}

TEST(GptKvCacheTest, DefaultFollowsWeightDtype) {
  Models& m = models();
  EXPECT_EQ(GptSession::create(*m.v05, 2, 4).value()->kv_dtype(), DType::kF32);
  EXPECT_EQ(GptSession::create(*m.v05_bf16, 2, 4).value()->kv_dtype(), DType::kBF16);
  EXPECT_EQ(session(*m.v05, DType::kBF16, 4)->kv_dtype(), DType::kBF16);
  EXPECT_EQ(session(*m.v05_bf16, DType::kF32, 4)->kv_dtype(), DType::kF32);
  GptSessionOptions f16;
  f16.kv_dtype = DType::kF16;
  const auto bad = GptSession::create(*m.v05, 2, 4, f16);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("F16"), std::string::npos) << bad.status().message();
}

// Teacher-forced prefill + 8 decode steps, f32 weights: bf16 cache vs f32 cache vs reference.
TEST(GptKvCacheTest, Bf16CacheDecodeStaysCloseToF32Cache) {
  Models& m = models();
  const std::vector<float> hidden = m.f32("clip.last_hidden_state");
  const std::vector<float> bbox = m.f32("gpt.bbox");
  const TensorView idv = m.expected.view("gpt.teacher_ids").value();
  const int32_t* ids = idv.as<const int32_t>();  // [2, 9]
  auto a = session(*m.v05, DType::kF32, 9);
  auto b = session(*m.v05, DType::kBF16, 9);
  ASSERT_TRUE(a->set_condition(2, hidden.data(), bbox.data()).ok());
  ASSERT_TRUE(b->set_condition(2, hidden.data(), bbox.data()).ok());
  std::vector<float> la(2 * kVocab), lb(2 * kVocab), dec_b;
  const int32_t bos[2] = {ids[0], ids[9]};
  ASSERT_TRUE(a->prefill(bos, la.data()).ok());
  ASSERT_TRUE(b->prefill(bos, lb.data()).ok());
  // The prefill attends over the condition's K/V as cached (bf16), the BOS token's as computed.
  EXPECT_TRUE(close_to_scale(lb, la, 1e-2));
  for (int step = 1; step <= 8; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const int32_t next[2] = {ids[step], ids[9 + step]};
    ASSERT_TRUE(a->decode(next, la.data()).ok());
    ASSERT_TRUE(b->decode(next, lb.data()).ok());
    EXPECT_TRUE(close_to_scale(lb, la, 1e-2));
    for (int r = 0; r < 2; ++r) {  // same greedy token
      EXPECT_EQ(
          std::max_element(lb.begin() + r * kVocab, lb.begin() + (r + 1) * kVocab) - lb.begin(),
          std::max_element(la.begin() + r * kVocab, la.begin() + (r + 1) * kVocab) - la.begin());
    }
    dec_b.insert(dec_b.end(), lb.begin(), lb.end());
  }
  // Against the reference's cached decode logits ([b][step][v] there, [step][b][v] here).
  const std::vector<float> want = m.f32("gpt.decode_logits_cached");
  std::vector<float> got(want.size());
  for (int s = 0; s < 8; ++s)
    for (int r = 0; r < 2; ++r)
      for (int v = 0; v < kVocab; ++v)
        got[(r * 8 + s) * kVocab + v] = dec_b[(s * 2 + r) * kVocab + v];
  EXPECT_TRUE(close_to_scale(got, want, 1e-2));
  // forward_full stores its K/V rounded; decoding continues from them.
  std::vector<int32_t> prefix(ids, ids + 18);
  ASSERT_TRUE(a->forward_full(prefix.data(), 9, la.data(), nullptr).ok());
  ASSERT_TRUE(b->forward_full(prefix.data(), 9, lb.data(), nullptr).ok());
  EXPECT_TRUE(close_to_scale(lb, la, 1e-2));
  auto a2 = session(*m.v05, DType::kF32, 10), b2 = session(*m.v05, DType::kBF16, 10);
  for (GptSession* s : {a2.get(), b2.get()}) {
    ASSERT_TRUE(s->set_condition(2, hidden.data(), bbox.data()).ok());
    ASSERT_TRUE(s->forward_full(prefix.data(), 9, nullptr, nullptr).ok());
  }
  const int32_t next[2] = {5, 7};
  ASSERT_TRUE(a2->decode(next, la.data()).ok());
  ASSERT_TRUE(b2->decode(next, lb.data()).ok());
  EXPECT_TRUE(close_to_scale(lb, la, 1e-2));
}

// Consecutive generations with a bf16 cache: the unconditional row's condition K/V are widened
// from the cache, the new prompt row is recomputed; the logits are a fresh session's bit for bit
// (a fresh prefill attends over its condition K/V rounded as cached too), so a generation never
// depends on what the session ran before (bf16 weights: the bf16 cache's default configuration).
TEST(GptKvCacheTest, Bf16CacheReusesUnconditionalRow) {
  Models& m = models();
  std::vector<float> hidden = m.f32("clip.last_hidden_state");
  const std::vector<float> bbox = m.f32("gpt.bbox");
  const int32_t bos[2] = {m.v05_bf16->config().bos_id(), m.v05_bf16->config().bos_id()};
  const int32_t next[2] = {3, 3};
  auto reused = GptSession::create(*m.v05_bf16, 2, 4).value();
  ASSERT_EQ(reused->kv_dtype(), DType::kBF16);
  std::vector<float> p(2 * kVocab), d(2 * kVocab), fp(2 * kVocab), fd(2 * kVocab);
  ASSERT_TRUE(reused->set_condition(2, hidden.data(), bbox.data()).ok());
  ASSERT_TRUE(reused->prefill(bos, p.data()).ok());
  // A new prompt row 0, the same row 1.
  for (size_t i = 0; i < hidden.size() / 2; ++i) hidden[i] = -hidden[i];
  ASSERT_TRUE(reused->set_condition(2, hidden.data(), bbox.data()).ok());
  ASSERT_TRUE(reused->prefill(bos, p.data()).ok());
  ASSERT_TRUE(reused->decode(next, d.data()).ok());
  auto fresh = GptSession::create(*m.v05_bf16, 2, 4).value();
  ASSERT_TRUE(fresh->set_condition(2, hidden.data(), bbox.data()).ok());
  ASSERT_TRUE(fresh->prefill(bos, fp.data()).ok());
  ASSERT_TRUE(fresh->decode(next, fd.data()).ok());
  EXPECT_TRUE(test::all_equal(p.data(), fp.data(), p.size()));
  EXPECT_TRUE(test::all_equal(d.data(), fd.data(), d.size()));
}

// A prefill from scratch stacks its rows' condition streams into one call per layer where the
// backend gives every row the same bits either way (bf16 weights on AVX-512 BF16, int8 weights):
// each row's prefill and decode logits are then those of the row alone in a one-row session.
TEST(GptKvCacheTest, StackedConditionRowsGiveEachRowItsLoneBits) {
  Models& m = models();
  const std::vector<float> hidden = m.f32("clip.last_hidden_state");
  const std::vector<float> bbox = m.f32("gpt.bbox");
  GptLoadOptions int8_options;
  int8_options.int8 = true;
  auto v05_int8 = CubeGpt::load(m.gpt05, m.codebook, *m.backend, int8_options);
  ASSERT_TRUE(v05_int8.ok()) << v05_int8.status().to_string();
  for (const CubeGpt* model : {m.v05_bf16.get(), v05_int8->get()}) {
    const int64_t cond = static_cast<int64_t>(hidden.size()) / 2;  // one row's CLIP states
    const int32_t bos[2] = {model->config().bos_id(), model->config().bos_id()};
    const int32_t next[2] = {3, 5};
    auto both = GptSession::create(*model, 2, 4).value();
    const bool expect_stacked =
        model == v05_int8->get() ||
        m.backend->linear_rows_invariant(model->weights().dual[0].post_2.up.w, 78);
    EXPECT_EQ(both->stacks_condition_rows(), expect_stacked);
    std::vector<float> p(2 * kVocab), d(2 * kVocab);
    std::vector<float> bbox2(bbox.begin(), bbox.end());
    if (bbox2.size() < 6) bbox2.insert(bbox2.end(), bbox.begin(), bbox.begin() + 3);
    ASSERT_TRUE(both->set_condition(2, hidden.data(), bbox2.data()).ok());
    ASSERT_TRUE(both->prefill(bos, p.data()).ok());
    ASSERT_TRUE(both->decode(next, d.data()).ok());
    for (int64_t r = 0; r < 2; ++r) {
      auto lone = GptSession::create(*model, 1, 4).value();
      std::vector<float> lp(kVocab), ld(kVocab);
      const float* row_bbox = bbox.size() >= 6 ? bbox.data() + 3 * r : bbox.data();
      ASSERT_TRUE(lone->set_condition(1, hidden.data() + r * cond, row_bbox).ok());
      ASSERT_TRUE(lone->prefill(bos, lp.data()).ok());
      ASSERT_TRUE(lone->decode(next + r, ld.data()).ok());
      EXPECT_TRUE(test::all_equal(lp.data(), p.data() + r * kVocab, kVocab)) << "row " << r;
      EXPECT_TRUE(test::all_equal(ld.data(), d.data() + r * kVocab, kVocab)) << "row " << r;
    }
  }
}

}  // namespace
}  // namespace tessera::shape
