// cuda::choose_token (guidance mix + next token on the device) against the host's generator mix
// and shape::Sampler, step by step over whole generations: greedy and sampled (temperature, top-k,
// top-p and their combinations), guided and not, the tiny model's 64 codes and Cube 3D's 16384,
// ties, the step counter, the RNG state carried on the device, the ring buffer, and the error codes
// for NaN / +inf / all -inf logits. The argument checks run without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "engine/shape/sampler.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/kernel_test_util.h"

#if TESSERA_HAVE_CUDA
namespace tessera {
namespace {

namespace cuda = kernels::cuda;

struct Config {
  std::string name;
  int64_t codes, vocab;
  bool guided;
  SamplingSettings sampler;
};

// The host's mix, exactly as engine/shape/generator.cpp writes it.
std::vector<float> host_mix(const std::vector<float>& logits, int64_t codes, int64_t vocab,
                            bool guided, float scale, int64_t step, int64_t steps) {
  std::vector<float> out(static_cast<size_t>(codes));
  if (!guided) {
    for (int64_t j = 0; j < codes; ++j) out[size_t(j)] = logits[size_t(j)];
    return out;
  }
  const float g = scale * static_cast<float>(steps - step) / static_cast<float>(steps);
  for (int64_t j = 0; j < codes; ++j) {
    out[size_t(j)] = (1.0f + g) * logits[size_t(j)] - g * logits[size_t(vocab + j)];
  }
  return out;
}

class ChooseTokenTest : public test::GpuTest {
 protected:
  // Runs `steps` tokens of one generation on the device and on the host with fresh random logits
  // per step (a few exact ties planted), and expects the same token every step.
  void run_generation(const Config& c, int64_t steps, uint64_t seed) {
    SCOPED_TRACE(c.name);
    const float scale = 3.0f;
    kernels::TokenChoice choice;
    choice.codes = c.codes;
    choice.row_stride = c.vocab;
    choice.guided = c.guided;
    choice.guidance_scale = scale;
    choice.total_steps = steps;
    choice.sampling.sample = c.sampler.sample;
    choice.sampling.temperature = c.sampler.temperature;
    choice.sampling.top_k = c.sampler.top_k;
    choice.sampling.top_p = c.sampler.top_p;
    shape::Sampler host(c.sampler, c.codes);
    const std::array<uint64_t, 4> words = shape::Xoshiro256(c.sampler.seed).state();
    const std::vector<int64_t> step0 = {0};
    auto d_step = upload(step0);
    auto d_rng = upload(words.data(), words.size());
    auto d_ids = alloc<int32_t>(2);
    const int64_t ring_size = 5;
    auto d_ring = alloc<int32_t>(size_t(ring_size));
    const int64_t rows = c.guided ? 2 : 1;
    std::vector<int32_t> want;
    for (int64_t i = 0; i < steps; ++i) {
      std::vector<float> logits =
          test::random_floats(size_t(rows * c.vocab), seed + uint64_t(i), -4.0f, 4.0f);
      // Ties: copy a few values within the candidates (argmax and the sort must break them
      // towards the lower index).
      for (int64_t t = 0; t < 4 && c.codes > 8; ++t) {
        logits[size_t((7 * t + 5) % c.codes)] = logits[size_t((3 * t + 1) % c.codes)];
      }
      auto d_logits = upload(logits);
      ASSERT_TRUE(cuda::choose_token(d_logits.as<float>(), choice, d_step.as<int64_t>(),
                                     d_rng.as<uint64_t>(), d_ids.as<int32_t>(), 2,
                                     d_ring.as<int32_t>(), ring_size, stream_)
                      .ok());
      ASSERT_TRUE(sync());
      const std::vector<float> mixed =
          host_mix(logits, c.codes, c.vocab, c.guided, scale, i, steps);
      const Expected<int32_t> token = host.next(mixed.data(), c.codes);
      ASSERT_TRUE(token.ok()) << token.status().to_string();
      want.push_back(*token);
      const std::vector<int32_t> ids = download<int32_t>(d_ids, 2);
      ASSERT_EQ(ids[0], *token) << "step " << i;
      ASSERT_EQ(ids[1], *token) << "step " << i;
    }
    EXPECT_EQ(download<int64_t>(d_step, 1)[0], steps);
    const std::vector<int32_t> ring = download<int32_t>(d_ring, size_t(ring_size));
    for (int64_t i = std::max<int64_t>(0, steps - ring_size); i < steps; ++i) {
      EXPECT_EQ(ring[size_t(i % ring_size)], want[size_t(i)]) << "ring slot of step " << i;
    }
    // The device RNG advanced exactly as the host's: one draw per sampled token.
    shape::Xoshiro256 rng(c.sampler.seed);
    for (int64_t i = 0; i < (c.sampler.sample ? steps : 0); ++i) rng.next();
    const std::vector<uint64_t> device_words = download<uint64_t>(d_rng, 4);
    const std::array<uint64_t, 4> host_words = rng.state();
    for (int w = 0; w < 4; ++w) EXPECT_EQ(device_words[size_t(w)], host_words[size_t(w)]);
  }

  // One step on logits whose mix is bad; returns what the kernel published in the ring.
  int32_t run_bad(std::vector<float> logits, bool sample) {
    kernels::TokenChoice choice;
    choice.codes = static_cast<int64_t>(logits.size());
    choice.sampling.sample = sample;
    const std::vector<int64_t> step0 = {0};
    const std::array<uint64_t, 4> words = shape::Xoshiro256(1).state();
    auto d_step = upload(step0);
    auto d_rng = upload(words.data(), words.size());
    const std::vector<int32_t> sentinel = {-7};
    auto d_ids = upload(sentinel);
    auto d_ring = alloc<int32_t>(1);
    auto d_logits = upload(logits);
    EXPECT_TRUE(cuda::choose_token(d_logits.as<float>(), choice, d_step.as<int64_t>(),
                                   d_rng.as<uint64_t>(), d_ids.as<int32_t>(), 1,
                                   d_ring.as<int32_t>(), 1, stream_)
                    .ok());
    EXPECT_TRUE(sync());
    // The ring always gets the result; ids only a chosen token (an error code never reaches the
    // next step's embedding lookup).
    const int32_t result = download<int32_t>(d_ring, 1)[0];
    const int32_t id = download<int32_t>(d_ids, 1)[0];
    if (result < 0) {
      EXPECT_EQ(id, -7) << "ids must stay unchanged on an error";
    } else {
      EXPECT_EQ(id, result) << "ids get the chosen token";
    }
    return result;
  }
};

SamplingSettings sampled(float temperature, int64_t top_k, float top_p, uint64_t seed) {
  SamplingSettings o;
  o.sample = true;
  o.temperature = temperature;
  o.top_k = top_k;
  o.top_p = top_p;
  o.seed = seed;
  return o;
}

TEST_F(ChooseTokenTest, GreedyMatchesTheHostArgmaxGuidedAndNot) {
  run_generation({"tiny greedy guided", 64, 67, true, {}}, 64, 10);
  run_generation({"tiny greedy unguided", 64, 67, false, {}}, 20, 20);
  run_generation({"v0.5 greedy guided", 16384, 16387, true, {}}, 12, 30);
}

TEST_F(ChooseTokenTest, SampledTokensMatchTheHostSampler) {
  const Config configs[] = {
      {"tiny T=1", 64, 67, true, sampled(1.0f, 0, 1.0f, 5)},
      {"tiny T=0.7 top-k 8", 64, 67, true, sampled(0.7f, 8, 1.0f, 6)},
      {"tiny top-p 0.8", 64, 67, false, sampled(1.0f, 0, 0.8f, 7)},
      {"tiny T=2 top-k 20 top-p 0.95", 64, 67, true, sampled(2.0f, 20, 0.95f, 8)},
      {"tiny top-k 1 (greedy by filter)", 64, 67, true, sampled(1.0f, 1, 1.0f, 9)},
      {"tiny tiny top-p keeps the top token", 64, 67, true, sampled(1.0f, 0, 1e-6f, 10)},
      {"v0.5 T=1", 16384, 16387, true, sampled(1.0f, 0, 1.0f, 11)},
      {"v0.5 top-k 50 top-p 0.9", 16384, 16387, true, sampled(0.8f, 50, 0.9f, 12)},
      {"odd size 1000 top-p 0.5", 1000, 1003, true, sampled(1.3f, 0, 0.5f, 13)},
      {"one code", 1, 3, true, sampled(1.0f, 0, 1.0f, 14)},
  };
  uint64_t seed = 100;
  for (const Config& c : configs) run_generation(c, 24, seed += 50);
}

TEST_F(ChooseTokenTest, BadLogitsPublishErrorCodes) {
  const float inf = std::numeric_limits<float>::infinity();
  for (bool sample : {false, true}) {
    SCOPED_TRACE(sample ? "sampling" : "greedy");
    std::vector<float> nan_at_5(40, 0.5f), inf_at_9(40, 0.5f), all_neg_inf(40, -inf);
    nan_at_5[5] = std::nanf("");
    nan_at_5[30] = std::nanf("");
    inf_at_9[9] = inf;
    EXPECT_EQ(run_bad(nan_at_5, sample), -1 - 5);
    EXPECT_EQ(run_bad(inf_at_9, sample), -1 - 9);
    EXPECT_EQ(run_bad(all_neg_inf, sample), kernels::kTokenAllNegInf);
  }
  // Some -inf among finite logits is fine: those codes are never chosen.
  std::vector<float> masked(40, -inf);
  masked[17] = 1.0f;
  masked[23] = 0.5f;
  EXPECT_EQ(run_bad(masked, false), 17);
}

TEST(ChooseTokenArgs, RejectedBeforeAnyDeviceCall) {
  // Host pointers are fine here: the checks run before anything touches them.
  float logits[4] = {};
  int64_t step = 0;
  uint64_t rng[4] = {};
  int32_t ids[2] = {};
  kernels::TokenChoice ok;
  ok.codes = 4;
  auto check = [&](kernels::TokenChoice c, const char* what) {
    const Status st = cuda::choose_token(logits, c, &step, rng, ids, 2, nullptr, 0, nullptr);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << what;
    EXPECT_NE(st.message().find("choose_token"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  };
  kernels::TokenChoice c = ok;
  c.codes = 0;
  check(c, "codes");
  c.codes = kernels::kChooseTokenMaxCodes + 1;
  check(c, "codes");
  c = ok;
  c.guided = true;
  c.row_stride = 3;
  check(c, "row_stride");
  c = ok;
  c.total_steps = 0;
  check(c, "total_steps");
  c = ok;
  c.sampling.sample = true;
  c.sampling.temperature = 0.0f;
  check(c, "temperature");
  c.sampling.temperature = 1.0f;
  c.sampling.top_p = 1.5f;
  check(c, "top_p");
  c.sampling.top_p = 1.0f;
  c.sampling.top_k = -1;
  check(c, "top_k");
  const Status null_rng =
      cuda::choose_token(logits, ok, &step, nullptr, ids, 2, nullptr, 0, nullptr);
  EXPECT_EQ(null_rng.code(), ErrorCode::kInvalidArgument);
  int32_t ring[1] = {};
  const Status bad_ring = cuda::choose_token(logits, ok, &step, rng, ids, 2, ring, 0, nullptr);
  EXPECT_EQ(bad_ring.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad_ring.message().find("ring_size"), std::string::npos) << bad_ring.message();
}

}  // namespace
}  // namespace tessera
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(ChooseToken)
#endif
