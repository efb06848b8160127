// The CPU backend's device-resident decoding ops (kernels/backend.h: store_kv_rows, set_positions,
// attention_decode_at, choose_token), which the decode loop uses on every backend: the step is
// read from backend memory. Against the plain ops / references / the host sampler (the CUDA
// versions are checked in tests/kernels/device_step_gpu_test.cpp and
// tests/engine/shape/choose_token_gpu_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "kernels/ops.h"
#include "kernels/sampling.h"
#include "tests/support/kernel_test_util.h"

namespace tessera::kernels {
namespace {

TEST(CpuDeviceResident, StoreKvRowsAndPositionsFollowTheStep) {
  auto be = make_cpu_backend();
  ASSERT_NE(be->decode(), nullptr);
  const int64_t batch = 2, row = 37, slots = 6, offset = 1;
  const std::vector<float> rows = test::random_floats(size_t(batch * row), 3);
  for (int64_t step : {0, 2, 4}) {
    std::vector<float> f32(size_t(batch * slots * row), -9.0f);
    std::vector<uint16_t> bf16(f32.size(), 0x7777);
    ASSERT_TRUE(be->decode()
                    ->store_kv_rows(f32.data(), DType::kF32, rows.data(), batch, row, slots * row,
                                    offset, &step)
                    .ok());
    ASSERT_TRUE(be->decode()
                    ->store_kv_rows(bf16.data(), DType::kBF16, rows.data(), batch, row, slots * row,
                                    offset, &step)
                    .ok());
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t s = 0; s < slots; ++s) {
        for (int64_t e = 0; e < row; ++e) {
          const size_t at = size_t((b * slots + s) * row + e);
          const bool written = s == offset + step;
          const float src = rows[size_t(b * row + e)];
          ASSERT_EQ(f32[at], written ? src : -9.0f) << b << " " << s << " " << e;
          ASSERT_EQ(bf16[at], written ? f32_to_bf16(src) : uint16_t{0x7777});
        }
      }
    }
    int32_t positions[6] = {};
    ASSERT_TRUE(be->decode()->set_positions(positions, 2, 3, &step, 10).ok());
    for (int r = 0; r < 2; ++r) {
      for (int t = 0; t < 3; ++t) EXPECT_EQ(positions[r * 3 + t], step + 10 + t);
    }
  }
  float dummy = 0.0f;
  EXPECT_EQ(be->decode()->store_kv_rows(&dummy, DType::kF16, &dummy, 1, 1, 1, 0, nullptr).code(),
            ErrorCode::kUnsupported);
}

TEST(CpuDeviceResident, AttentionAtUsesTheKeysTheStepSays) {
  auto be = make_cpu_backend();
  const int64_t batch = 2, heads = 3, dim = 32, capacity = 300;
  AttentionShape s = contiguous_attention(batch, heads, 1, capacity, dim, false, 0.2f);
  const size_t kv_n = size_t(batch * capacity * heads * dim), q_n = size_t(batch * heads * dim);
  const std::vector<float> q = test::random_floats(q_n, 11);
  const std::vector<float> k = test::random_floats(kv_n, 12), v = test::random_floats(kv_n, 13);
  std::vector<uint16_t> k16(kv_n), v16(kv_n);
  convert_f32_to_bf16(k.data(), k16.data(), kv_n);
  convert_f32_to_bf16(v.data(), v16.data(), kv_n);
  for (int64_t step : {0, 5, 120, 298, 400}) {
    const int64_t offset = 2, used = std::min<int64_t>(step + offset, capacity);
    AttentionShape r = s;
    r.kv_len = used;
    std::vector<float> want(q_n), got(q_n, NAN), want16(q_n), got16(q_n, NAN);
    cpu::attention_decode(q.data(), k.data(), v.data(), want.data(), r);
    cpu::attention_decode_bf16kv(q.data(), k16.data(), v16.data(), want16.data(), r);
    ASSERT_TRUE(be->decode()
                    ->attention_decode_at(q.data(), k.data(), v.data(), DType::kF32, got.data(), s,
                                          &step, offset)
                    .ok());
    ASSERT_TRUE(be->decode()
                    ->attention_decode_at(q.data(), k16.data(), v16.data(), DType::kBF16,
                                          got16.data(), s, &step, offset)
                    .ok());
    EXPECT_TRUE(test::all_equal(got.data(), want.data(), q_n)) << "step " << step;
    EXPECT_TRUE(test::all_equal(got16.data(), want16.data(), q_n)) << "step " << step;
  }
}

// choose_token over a whole generation against pick_token on the host's own mix, the RNG words
// carried in memory, the ring and the step counter.
TEST(CpuDeviceResident, ChooseTokenMatchesTheHostSamplerStepByStep) {
  auto be = make_cpu_backend();
  const int64_t codes = 64, vocab = 67, steps = 40;
  for (bool guided : {true, false}) {
    for (const SamplingParams& p :
         {SamplingParams{}, SamplingParams{true, 1.0f, 0, 1.0f},
          SamplingParams{true, 0.7f, 8, 0.9f}, SamplingParams{true, 2.0f, 0, 0.5f}}) {
      SCOPED_TRACE(std::string(guided ? "guided" : "unguided") +
                   (p.sample ? " sampled" : " greedy") + " T " + std::to_string(p.temperature));
      TokenChoice c;
      c.codes = codes;
      c.row_stride = vocab;
      c.guided = guided;
      c.guidance_scale = 3.0f;
      c.total_steps = steps;
      c.sampling = p;
      int64_t step = 0;
      std::array<uint64_t, 4> rng = Xoshiro256(77).state();
      Xoshiro256 host_rng(77);
      std::vector<int32_t> order(static_cast<size_t>(codes)), ring(static_cast<size_t>(steps), -5);
      std::vector<int32_t> ids = {-1, -1};
      std::vector<double> probs(static_cast<size_t>(codes));
      for (int64_t i = 0; i < steps; ++i) {
        const std::vector<float> logits = test::random_floats(size_t(2 * vocab), 500 + uint64_t(i));
        std::vector<float> mixed(logits.begin(), logits.begin() + codes);
        if (guided) {
          const float g = guidance_weight(3.0f, i, steps);
          for (int64_t j = 0; j < codes; ++j) {
            mixed[size_t(j)] = (1.0f + g) * logits[size_t(j)] - g * logits[size_t(vocab + j)];
          }
        }
        const int32_t want =
            pick_token(mixed.data(), codes, p, host_rng, order.data(), probs.data());
        ASSERT_TRUE(be->decode()
                        ->choose_token(logits.data(), c, &step, rng.data(), ids.data(), 2,
                                       ring.data(), steps)
                        .ok());
        ASSERT_EQ(step, i + 1);
        ASSERT_EQ(ring[size_t(i)], want) << "step " << i;
        ASSERT_EQ(ids[0], want);
        ASSERT_EQ(ids[1], want);
      }
      EXPECT_EQ(rng, host_rng.state());
    }
  }
}

TEST(CpuDeviceResident, ChooseTokenPublishesErrorCodesAndChecksArguments) {
  auto be = make_cpu_backend();
  const float inf = std::numeric_limits<float>::infinity();
  TokenChoice c;
  c.codes = 8;
  std::array<uint64_t, 4> rng = Xoshiro256(1).state();
  for (bool sample : {false, true}) {
    c.sampling.sample = sample;
    std::vector<float> nan_at_3(8, 0.5f), inf_at_6(8, 0.5f), all_neg(8, -inf), masked(8, -inf);
    nan_at_3[3] = std::nanf("");
    nan_at_3[5] = std::nanf("");
    inf_at_6[6] = inf;
    masked[4] = 2.0f;
    const std::pair<std::vector<float>*, int32_t> cases[] = {
        {&nan_at_3, -1 - 3}, {&inf_at_6, -1 - 6}, {&all_neg, kTokenAllNegInf}, {&masked, 4}};
    for (const auto& [logits, want] : cases) {
      int64_t step = 0;
      int32_t ids[1] = {-7}, ring[1] = {0};
      ASSERT_TRUE(
          be->decode()->choose_token(logits->data(), c, &step, rng.data(), ids, 1, ring, 1).ok());
      EXPECT_EQ(ring[0], want);
      EXPECT_EQ(ids[0], want >= 0 ? want : -7) << "ids unchanged on an error code";
      EXPECT_EQ(step, 1);
    }
  }
  float logits[8] = {};
  int64_t step = 0;
  int32_t ids[1] = {};
  TokenChoice bad = c;
  bad.codes = 0;
  Status st = be->decode()->choose_token(logits, bad, &step, rng.data(), ids, 1, nullptr, 0);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cpu choose_token: codes 0"), std::string::npos) << st.message();
  bad = c;
  bad.sampling = SamplingParams{true, -1.0f, 0, 1.0f};
  st = be->decode()->choose_token(logits, bad, &step, rng.data(), ids, 1, nullptr, 0);
  EXPECT_NE(st.message().find("temperature"), std::string::npos) << st.message();
  EXPECT_EQ(step, 0) << "a rejected call changes nothing";
}

}  // namespace
}  // namespace tessera::kernels
