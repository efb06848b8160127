// SD samplers (engine/diffusion/scheduler.h) against the float64 k-diffusion reference
// (tools/tessera_ref/sd_sampler.py -> tests/fixtures/diffusion/scheduler.json via
// tools/make_scheduler_fixtures.py), the seeded noise generator, and bad input.
#include "engine/diffusion/scheduler.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "tests/engine/diffusion/diffusion_test_util.h"

namespace tessera::diffusion {
namespace {

using test_util::close_rel;

// The fixture is one flat JSON object whose values are number lists (or strings, skipped); this
// reads exactly that shape and fails the test on anything else.
std::map<std::string, std::vector<double>> load_fixture() {
  const std::string path = test_util::fixture_dir() + "scheduler.json";
  auto bytes = read_file(path);
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  std::map<std::string, std::vector<double>> out;
  if (!bytes.ok()) return out;
  const std::string& text = *bytes;
  size_t p = 0;
  const auto ws = [&] {
    while (p < text.size() && std::isspace(static_cast<unsigned char>(text[p]))) ++p;
  };
  const auto string = [&] {
    std::string s;
    ++p;  // opening quote; the fixture has no escapes
    while (p < text.size() && text[p] != '"') s += text[p++];
    ++p;
    return s;
  };
  ws();
  EXPECT_EQ(text[p], '{');
  ++p;
  for (;;) {
    ws();
    if (p >= text.size() || text[p] == '}') break;
    const std::string key = string();
    ws();
    EXPECT_EQ(text[p], ':') << key;
    ++p;
    ws();
    if (text[p] == '"') {
      string();
    } else {
      EXPECT_EQ(text[p], '[') << key;
      ++p;
      std::vector<double>& v = out[key];
      for (;;) {
        ws();
        if (text[p] == ']') {
          ++p;
          break;
        }
        char* end = nullptr;
        v.push_back(std::strtod(text.c_str() + p, &end));
        EXPECT_NE(end, text.c_str() + p) << key << " at byte " << p;
        if (end == text.c_str() + p) return out;
        p = static_cast<size_t>(end - text.c_str());
        ws();
        if (text[p] == ',') ++p;
      }
    }
    ws();
    if (text[p] == ',') ++p;
  }
  return out;
}

const std::map<std::string, std::vector<double>>& fixture() {
  static const auto* f = new std::map<std::string, std::vector<double>>(load_fixture());
  return *f;
}

const std::vector<double>& fx(const std::string& name) {
  static const std::vector<double> empty;
  auto it = fixture().find(name);
  EXPECT_NE(it, fixture().end()) << "scheduler.json has no " << name;
  return it == fixture().end() ? empty : it->second;
}

std::vector<float> as_float(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}

TEST(SdScheduler, TrainingSigmasMatchReference) {
  const NoiseSchedule s = NoiseSchedule::sd();
  ASSERT_EQ(s.train_steps(), 1000);
  const auto slice = [&](size_t a, size_t b) {
    return as_float(std::vector<double>(s.sigmas().begin() + a, s.sigmas().begin() + b));
  };
  EXPECT_TRUE(close_rel(slice(0, 3), as_float(fx("train_sigmas_first")), 1e-6));
  EXPECT_TRUE(close_rel(slice(499, 501), as_float(fx("train_sigmas_middle")), 1e-6));
  EXPECT_TRUE(close_rel(slice(997, 1000), as_float(fx("train_sigmas_last")), 1e-6));
  EXPECT_NEAR(s.sigma_min(), 0.0292, 1e-4);
  EXPECT_NEAR(s.sigma_max(), 14.6146, 1e-4);
}

TEST(SdScheduler, SigmaSchedulesAndTimestepsMatchReference) {
  const NoiseSchedule sched = NoiseSchedule::sd();
  for (int steps : {1, 7, 20}) {
    for (SigmaSchedule kind : {SigmaSchedule::kNormal, SigmaSchedule::kKarras}) {
      const std::string name = std::string(sigma_schedule_name(kind)) + "_" + std::to_string(steps);
      SCOPED_TRACE(name);
      auto sigmas = make_sigmas(sched, kind, steps);
      ASSERT_TRUE(sigmas.ok()) << sigmas.status().to_string();
      ASSERT_EQ(sigmas->size(), static_cast<size_t>(steps) + 1);
      EXPECT_EQ(sigmas->back(), 0.0);
      EXPECT_TRUE(close_rel(as_float(*sigmas), as_float(fx(name)), 1e-5));
      std::vector<double> t;
      for (int i = 0; i < steps; ++i) t.push_back(sched.sigma_to_t((*sigmas)[i]));
      EXPECT_TRUE(close_rel(as_float(t), as_float(fx(name + "_t")), 1e-5));
      // sigma_to_t inverts t_to_sigma.
      for (int i = 0; i < steps; ++i) {
        EXPECT_NEAR(sched.t_to_sigma(t[static_cast<size_t>(i)]), (*sigmas)[i], 1e-9 * (*sigmas)[i]);
      }
    }
  }
}

TEST(SdScheduler, InputScaleAndGuidance) {
  EXPECT_DOUBLE_EQ(input_scale(0.0), 1.0);
  EXPECT_NEAR(input_scale(14.6146), 1.0 / std::sqrt(14.6146 * 14.6146 + 1), 1e-15);
  const float x[3] = {2.0f, -4.0f, 0.5f};
  float y[3];
  scale_model_input(x, 3, std::sqrt(3.0), y);  // c_in = 1/2
  EXPECT_FLOAT_EQ(y[0], 1.0f);
  EXPECT_FLOAT_EQ(y[1], -2.0f);
  EXPECT_FLOAT_EQ(y[2], 0.25f);
  const float u[3] = {1.0f, 0.0f, -1.0f}, c[3] = {2.0f, 1.0f, -1.0f};
  float g[3];
  apply_guidance(u, c, 3, 7.5f, g);
  EXPECT_FLOAT_EQ(g[0], 8.5f);
  EXPECT_FLOAT_EQ(g[1], 7.5f);
  EXPECT_FLOAT_EQ(g[2], -1.0f);
  std::vector<float> alias(u, u + 3);
  apply_guidance(alias.data(), c, 3, 1.0f, alias.data());  // scale 1: the conditional output
  EXPECT_EQ(alias, std::vector<float>(c, c + 3));
}

TEST(SdScheduler, AncestralStepSplitsTheVariance) {
  const AncestralStep a = ancestral_step(5.0, 2.0);
  EXPECT_NEAR(a.sigma_down * a.sigma_down + a.sigma_up * a.sigma_up, 4.0, 1e-12);
  EXPECT_NEAR(a.sigma_up, std::sqrt(4.0 * (25.0 - 4.0) / 25.0), 1e-12);
  const AncestralStep last = ancestral_step(0.03, 0.0);
  EXPECT_EQ(last.sigma_down, 0.0);
  EXPECT_EQ(last.sigma_up, 0.0);
}

// Runs a sampler on the fixture's toy model eps = A * x_in + B * t / 1000 and returns x after every
// step, flattened.
std::vector<float> toy_trajectory(SamplerKind kind, SigmaSchedule schedule, int steps,
                                  const std::vector<double>* noise,
                                  const std::string& start = "x0") {
  const NoiseSchedule sched = NoiseSchedule::sd();
  const std::vector<float> x0 = as_float(fx(start));
  const auto n = static_cast<int64_t>(x0.size());
  const double a = fx("toy_a").at(0), b = fx("toy_b").at(0);
  Sampler s = Sampler::create(sched, kind, schedule, steps, n, 1).value();
  std::vector<float> x = x0, x_in(x0.size()), eps(x0.size()), nz(x0.size()), traj;
  for (int i = 0; i < steps; ++i) {
    scale_model_input(x.data(), n, s.sigma(i), x_in.data());
    for (size_t k = 0; k < x.size(); ++k) {
      eps[k] = static_cast<float>(a * x_in[k] + b * s.timestep(i) / 1000.0);
    }
    Status st;
    if (noise != nullptr) {
      for (size_t k = 0; k < x.size(); ++k) {
        nz[k] = static_cast<float>((*noise)[static_cast<size_t>(i) * x.size() + k]);
      }
      st = s.step_with_noise(i, eps.data(), nz.data(), x.data());
    } else {
      st = s.step(i, eps.data(), x.data());
    }
    EXPECT_TRUE(st.ok()) << st.to_string();
    traj.insert(traj.end(), x.begin(), x.end());
  }
  return traj;
}

TEST(SdScheduler, LcmTimestepsMatchReference) {
  for (int n : {1, 2, 4, 6, 8}) {
    const std::vector<int> t = lcm_timesteps(n).value();
    EXPECT_EQ(std::vector<double>(t.begin(), t.end()), fx("lcm_" + std::to_string(n) + "_t")) << n;
  }
  const std::vector<int> half = lcm_timesteps(4, 0.5).value();
  EXPECT_EQ(std::vector<double>(half.begin(), half.end()), fx("lcm_4_s05_t"));
  // The spec's worked values: 4 steps 999, 759, 499, 259; c_skip 6.9e-6 and c_out ~1 at t 19.
  EXPECT_EQ(lcm_timesteps(4).value(), (std::vector<int>{999, 759, 499, 259}));
  EXPECT_NEAR(lcm_scalings(19).c_skip, 6.925e-6, 1e-8);
  EXPECT_NEAR(lcm_scalings(19).c_out, 0.999997, 1e-6);
  EXPECT_EQ(lcm_timesteps(0).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(lcm_timesteps(51).status().code(), ErrorCode::kInvalidArgument);
  const Status st = lcm_timesteps(26, 0.5).status();
  EXPECT_NE(st.message().find("outside [1, 25]"), std::string::npos) << st.message();
}

TEST(SdScheduler, LcmTrajectoryMatchesReference) {
  // The engine's k-diffusion form of LCM against diffusers' DDPM form in the reference.
  const std::vector<double>& noise = fx("lcm_noise");
  ASSERT_EQ(noise.size(), 4u * fx("lcm_x0").size());
  EXPECT_TRUE(
      close_rel(toy_trajectory(SamplerKind::kLcm, SigmaSchedule::kNormal, 4, &noise, "lcm_x0"),
                as_float(fx("lcm_4")), 1e-5));
  Sampler s =
      Sampler::create(NoiseSchedule::sd(), SamplerKind::kLcm, SigmaSchedule::kKarras, 4, 2, 0)
          .value();
  EXPECT_EQ(s.timestep(1), 759.0);
  EXPECT_DOUBLE_EQ(s.sigma(0), NoiseSchedule::sd().sigmas()[999]);
  EXPECT_EQ(s.sigma(4), 0.0);
  // Image-to-image keeps every step over the low-noise half.
  ASSERT_TRUE(s.set_strength(0.5).ok());
  EXPECT_EQ(s.first_step(), 0);
  EXPECT_EQ(s.timestep(0), 499.0);
  EXPECT_EQ(
      Sampler::create(NoiseSchedule::sd(), SamplerKind::kLcm, SigmaSchedule::kNormal, 60, 2, 0)
          .status()
          .code(),
      ErrorCode::kInvalidArgument);
}

TEST(SdScheduler, EulerTrajectoryMatchesReference) {
  EXPECT_TRUE(close_rel(toy_trajectory(SamplerKind::kEuler, SigmaSchedule::kNormal, 7, nullptr),
                        as_float(fx("euler_normal_7")), 1e-5));
}

TEST(SdScheduler, EulerAncestralWithSuppliedNoiseMatchesReference) {
  const std::vector<double>& noise = fx("euler_ancestral_noise");
  ASSERT_EQ(noise.size(), 7u * fx("x0").size());
  EXPECT_TRUE(
      close_rel(toy_trajectory(SamplerKind::kEulerAncestral, SigmaSchedule::kNormal, 7, &noise),
                as_float(fx("euler_ancestral_normal_7")), 1e-5));
}

TEST(SdScheduler, Dpmpp2mTrajectoriesMatchReference) {
  EXPECT_TRUE(close_rel(toy_trajectory(SamplerKind::kDpmpp2m, SigmaSchedule::kKarras, 7, nullptr),
                        as_float(fx("dpmpp_2m_karras_7")), 1e-5));
  EXPECT_TRUE(close_rel(toy_trajectory(SamplerKind::kDpmpp2m, SigmaSchedule::kKarras, 20, nullptr),
                        as_float(fx("dpmpp_2m_karras_20")), 1e-5));
  EXPECT_TRUE(close_rel(toy_trajectory(SamplerKind::kDpmpp2m, SigmaSchedule::kNormal, 7, nullptr),
                        as_float(fx("dpmpp_2m_normal_7")), 1e-5));
}

TEST(SdScheduler, Dpmpp2mRestartsAtStepZero) {
  // A second run on the same Sampler (step 0 again) must not use the first run's history.
  const NoiseSchedule sched = NoiseSchedule::sd();
  Sampler s =
      Sampler::create(sched, SamplerKind::kDpmpp2m, SigmaSchedule::kKarras, 3, 4, 1).value();
  const std::vector<float> eps = {0.1f, -0.2f, 0.3f, 0.0f};
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    std::vector<float> x = {1.0f, 2.0f, -3.0f, 0.5f};
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.step(i, eps.data(), x.data()).ok());
    runs.push_back(x);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(SdScheduler, NoiseRngIsDeterministicAndStandardNormal) {
  constexpr int64_t kN = 200001;  // odd: the last pair is cut in half
  std::vector<float> a(kN), b(kN), c(kN), other_stream(kN);
  NoiseRng(42).fill(3, a.data(), kN);
  NoiseRng(42).fill(3, b.data(), kN);
  NoiseRng(43).fill(3, c.data(), kN);
  NoiseRng(42).fill(4, other_stream.data(), kN);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, other_stream);
  // A prefix is the same values (counter-based: independent of n).
  std::vector<float> prefix(7);
  NoiseRng(42).fill(3, prefix.data(), 7);
  EXPECT_EQ(prefix, std::vector<float>(a.begin(), a.begin() + 7));
  double sum = 0, sum2 = 0, sum4 = 0, lag = 0;
  for (int64_t k = 0; k < kN; ++k) {
    const double v = a[static_cast<size_t>(k)];
    sum += v;
    sum2 += v * v;
    sum4 += v * v * v * v;
    if (k > 0) lag += v * a[static_cast<size_t>(k - 1)];
  }
  const double mean = sum / kN, var = sum2 / kN - mean * mean;
  // Standard errors at n = 2e5: mean 0.0022, variance 0.0032, kurtosis ~0.011, lag-1 0.0022.
  EXPECT_NEAR(mean, 0.0, 0.012);
  EXPECT_NEAR(var, 1.0, 0.016);
  EXPECT_NEAR(sum4 / kN, 3.0, 0.06);
  EXPECT_NEAR(lag / kN, 0.0, 0.012);
}

TEST(SdScheduler, EulerAncestralWithSeedIsDeterministic) {
  const NoiseSchedule sched = NoiseSchedule::sd();
  constexpr int64_t kN = 4096;
  const auto run = [&](uint64_t seed) {
    Sampler s =
        Sampler::create(sched, SamplerKind::kEulerAncestral, SigmaSchedule::kNormal, 10, kN, seed)
            .value();
    std::vector<float> x(kN), eps(kN);
    s.init_latents(x.data());
    for (int i = 0; i < s.steps(); ++i) {
      // A toy model whose prediction depends on x, so that every step's noise reaches the end.
      const double c = input_scale(s.sigma(i));
      for (size_t k = 0; k < x.size(); ++k) eps[k] = static_cast<float>(0.5 * x[k] * c);
      EXPECT_TRUE(s.step(i, eps.data(), x.data()).ok());
    }
    return x;
  };
  const std::vector<float> a = run(7), b = run(7), c = run(8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (float v : a) ASSERT_TRUE(std::isfinite(v));

  // init_latents: N(0, 1) * sigma_max.
  Sampler s = Sampler::create(sched, SamplerKind::kEuler, SigmaSchedule::kNormal, 5, kN, 7).value();
  std::vector<float> x(kN);
  s.init_latents(x.data());
  double sum2 = 0;
  for (float v : x) sum2 += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(sum2 / kN) / s.sigma(0), 1.0, 0.05);
}

TEST(SdScheduler, EulerAncestralNoiseHasUnitVarianceMidRun) {
  // Denoised = 0 makes x after step i (not the last) equal sigma_down/sigma * x + sigma_up * z;
  // with x = 0 it is sigma_up * z: the drawn noise, which must be N(0, 1).
  const NoiseSchedule sched = NoiseSchedule::sd();
  constexpr int64_t kN = 50000;
  Sampler s =
      Sampler::create(sched, SamplerKind::kEulerAncestral, SigmaSchedule::kKarras, 20, kN, 99)
          .value();
  std::vector<float> x(kN, 0.0f), eps(kN, 0.0f);
  ASSERT_TRUE(s.step(0, eps.data(), x.data()).ok());
  const double up = ancestral_step(s.sigma(0), s.sigma(1)).sigma_up;
  double sum = 0, sum2 = 0;
  for (float v : x) {
    sum += v / up;
    sum2 += (v / up) * (v / up);
  }
  EXPECT_NEAR(sum / kN, 0.0, 0.02);
  EXPECT_NEAR(sum2 / kN, 1.0, 0.03);
}

TEST(SdScheduler, BadStepCountsAreRejected) {
  const NoiseSchedule sched = NoiseSchedule::sd();
  for (int steps : {0, -3, 1001}) {
    auto s = Sampler::create(sched, SamplerKind::kEuler, SigmaSchedule::kNormal, steps, 4, 0);
    ASSERT_FALSE(s.ok()) << steps;
    EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("steps " + std::to_string(steps)), std::string::npos)
        << s.status().message();
  }
  EXPECT_TRUE(make_sigmas(sched, SigmaSchedule::kKarras, 1000).ok());
  EXPECT_FALSE(Sampler::create(sched, SamplerKind::kEuler, SigmaSchedule::kNormal, 5, 0, 0).ok());
  EXPECT_FALSE(NoiseSchedule::scaled_linear(0.0, 0.012, 1000).ok());
  EXPECT_FALSE(NoiseSchedule::scaled_linear(0.02, 0.012, 1000).ok());
  EXPECT_FALSE(NoiseSchedule::scaled_linear(0.00085, 0.012, 1).ok());
}

TEST(SdScheduler, OutOfOrderStepsAreRejected) {
  const NoiseSchedule sched = NoiseSchedule::sd();
  Sampler s =
      Sampler::create(sched, SamplerKind::kDpmpp2m, SigmaSchedule::kKarras, 5, 2, 0).value();
  std::vector<float> x = {1.0f, 1.0f}, eps = {0.0f, 0.0f};
  EXPECT_EQ(s.step(2, eps.data(), x.data()).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.step(5, eps.data(), x.data()).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.step(-1, eps.data(), x.data()).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(s.step(0, eps.data(), x.data()).ok());
  EXPECT_TRUE(s.step(1, eps.data(), x.data()).ok());
  EXPECT_EQ(s.step(1, eps.data(), x.data()).code(), ErrorCode::kInvalidArgument);
}

TEST(SdScheduler, StrengthPicksTheFirstStep) {
  const NoiseSchedule sched = NoiseSchedule::sd();
  Sampler s = Sampler::create(sched, SamplerKind::kEuler, SigmaSchedule::kNormal, 20, 2, 0).value();
  EXPECT_EQ(s.first_step(), 0);
  ASSERT_TRUE(s.set_strength(0.6).ok());
  EXPECT_EQ(s.first_step(), 8);  // the last 12 of 20 run
  ASSERT_TRUE(s.set_strength(1.0).ok());
  EXPECT_EQ(s.first_step(), 0);
  ASSERT_TRUE(s.set_strength(0.05).ok());
  EXPECT_EQ(s.first_step(), 19);  // one step
  Sampler hundred =
      Sampler::create(sched, SamplerKind::kEuler, SigmaSchedule::kNormal, 100, 2, 0).value();
  ASSERT_TRUE(hundred.set_strength(0.29).ok());
  EXPECT_EQ(hundred.first_step(), 71);  // 29 steps, not float's 28.999...
  for (double bad : {0.0, -0.1, 1.01, std::nan("")}) {
    const Status st = s.set_strength(bad);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("outside (0, 1]"), std::string::npos) << st.message();
  }
  const Status none = s.set_strength(0.04);
  EXPECT_EQ(none.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(none.message().find("runs no step"), std::string::npos) << none.message();
}

TEST(SdScheduler, LateStartRunsFromTheFirstStep) {
  // DPM++ 2M started at step 3 of 7: the first step run is first order (no history), as
  // k-diffusion's sampler given the sigmas from there on; earlier steps are refused.
  const NoiseSchedule sched = NoiseSchedule::sd();
  Sampler s =
      Sampler::create(sched, SamplerKind::kDpmpp2m, SigmaSchedule::kKarras, 7, 2, 0).value();
  ASSERT_TRUE(s.set_strength(4.0 / 7.0).ok());
  ASSERT_EQ(s.first_step(), 3);
  std::vector<float> x = {1.0f, -2.0f}, eps = {0.3f, 0.1f};
  EXPECT_EQ(s.step(0, eps.data(), x.data()).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.step(4, eps.data(), x.data()).code(), ErrorCode::kInvalidArgument);
  const double sg = s.sigma(3), sn = s.sigma(4), h = std::log(sg) - std::log(sn);
  std::vector<double> want(2);
  for (int k = 0; k < 2; ++k) {
    const double d = x[k] - sg * eps[k];
    want[k] = sn / sg * x[k] - std::expm1(-h) * d;
  }
  ASSERT_TRUE(s.step(3, eps.data(), x.data()).ok());
  for (int k = 0; k < 2; ++k) EXPECT_NEAR(x[k], want[k], 1e-6 * std::abs(want[k]) + 1e-7);
  EXPECT_TRUE(s.step(4, eps.data(), x.data()).ok());
}

TEST(SdScheduler, NaNsAreReportedWithTheStep) {
  const NoiseSchedule sched = NoiseSchedule::sd();
  for (SamplerKind kind :
       {SamplerKind::kEuler, SamplerKind::kEulerAncestral, SamplerKind::kDpmpp2m}) {
    SCOPED_TRACE(sampler_kind_name(kind));
    Sampler s = Sampler::create(sched, kind, SigmaSchedule::kNormal, 20, 8, 5).value();
    std::vector<float> x(8, 1.0f), eps(8, 0.1f);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.step(i, eps.data(), x.data()).ok());
    eps[5] = std::nanf("");
    Status st = s.step(3, eps.data(), x.data());
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), ErrorCode::kCorruptData);
    EXPECT_NE(st.message().find("step 3 of 20"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("NaN at element 5"), std::string::npos) << st.message();
    // After a failure the run restarts at step 0.
    EXPECT_EQ(s.step(4, eps.data(), x.data()).code(), ErrorCode::kInvalidArgument);
    // A NaN already in the latents shows up in the updated latents.
    eps[5] = 0.1f;
    x.assign(8, 1.0f);
    x[2] = std::nanf("");
    st = s.step(0, eps.data(), x.data());
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("step 0 of 20"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("latents has NaN at element 2"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace tessera::diffusion
