// Stable Diffusion samplers in the k-diffusion form (Karras et al. 2022, "Elucidating the Design
// Space of Diffusion-Based Generative Models"; Lu et al. 2022, "DPM-Solver++"): Euler, Euler
// ancestral and DPM++ 2M over the "normal" (discrete) or Karras sigma schedule, for an
// epsilon-prediction model trained with SD's scaled-linear betas.
//
// The denoising loop a caller writes (x: the latents, any layout, `n` floats):
//   TESSERA_ASSIGN_OR_RETURN(Sampler s, Sampler::create(sched, SamplerKind::kEuler,
//                                                       SigmaSchedule::kNormal, steps, n, seed));
//   s.init_latents(x);                                  // N(0,1) * sigma_0
//   for (int i = 0; i < s.steps(); ++i) {
//     scale_model_input(x, n, s.sigma(i), x_in);        // x / sqrt(sigma^2 + 1)
//     unet(x_in, t = s.timestep(i)) -> eps              // (guidance: apply_guidance)
//     TESSERA_RETURN_IF_ERROR(s.step(i, eps, x));       // x updated in place
//   }
// Sigmas and timesteps are computed in double (the model sees them as float); latents are float,
// each update is evaluated in double per element. The reference is tools/tessera_ref/sd_sampler.py
// (fixtures: tests/fixtures/diffusion/scheduler.json, tools/make_scheduler_fixtures.py).
//
// Allocation: Sampler::create allocates everything (the sigma table, DPM++ 2M's previous
// prediction, Euler ancestral's noise buffer); step() allocates nothing. Not thread-safe; one
// Sampler per denoising run.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace tessera::diffusion {

// SD 1.x training noise: scaled-linear betas over 1000 timesteps.
inline constexpr int kSdTrainSteps = 1000;
inline constexpr double kSdBetaStart = 0.00085;
inline constexpr double kSdBetaEnd = 0.012;
inline constexpr double kKarrasRho = 7.0;

// The training noise levels of a discrete epsilon-prediction DDPM (k-diffusion's
// DiscreteEpsDDPMDenoiser): sigma_t = sqrt((1 - acp_t) / acp_t), acp = cumprod(1 - beta), with
// beta_t = linspace(sqrt(beta_start), sqrt(beta_end), train_steps)_t^2. For SD 1.x sigma_min =
// sigma_0 ~ 0.0292 and sigma_max = sigma_999 ~ 14.6146. Sigmas increase with t.
class NoiseSchedule {
 public:
  // Fails (kInvalidArgument) unless 2 <= train_steps <= 100000 and 0 < beta_start <= beta_end < 1.
  static Expected<NoiseSchedule> scaled_linear(double beta_start = kSdBetaStart,
                                               double beta_end = kSdBetaEnd,
                                               int train_steps = kSdTrainSteps);
  // The SD 1.x schedule (cannot fail).
  static NoiseSchedule sd();

  int train_steps() const { return static_cast<int>(sigmas_.size()); }
  const std::vector<double>& sigmas() const { return sigmas_; }  // [train_steps], increasing
  double sigma_min() const { return sigmas_.front(); }
  double sigma_max() const { return sigmas_.back(); }

  // sigma(t) for a fractional timestep t in [0, train_steps - 1] (clamped): linear interpolation
  // of log sigma between the neighbouring integer timesteps (k-diffusion t_to_sigma).
  double t_to_sigma(double t) const;
  // The inverse: the fractional timestep whose interpolated log sigma is log(sigma), clamped to
  // [0, train_steps - 1] (k-diffusion sigma_to_t, unquantized). sigma must be > 0.
  double sigma_to_t(double sigma) const;

 private:
  std::vector<double> sigmas_, log_sigmas_;
};

enum class SigmaSchedule {
  kNormal,  // timesteps linspace(train_steps - 1, 0, steps), sigma(t) interpolated (k-diffusion)
  kKarras,  // (s_max^(1/7) + ramp (s_min^(1/7) - s_max^(1/7)))^7, ramp = linspace(0, 1, steps)
};
const char* sigma_schedule_name(SigmaSchedule s);  // "normal", "karras"

// The steps + 1 sigmas of a sampling run, decreasing from sigma_max, the last one 0. Errors
// (kInvalidArgument, message names `steps`): steps < 1 or steps > the schedule's train_steps.
Expected<std::vector<double>> make_sigmas(const NoiseSchedule& sched, SigmaSchedule kind,
                                          int steps);

// c_in = 1 / sqrt(sigma^2 + 1): the model sees x * c_in (unit variance at every noise level).
double input_scale(double sigma);
// out[k] = x[k] * input_scale(sigma), k < n. out may alias x.
void scale_model_input(const float* x, int64_t n, double sigma, float* out);

// Classifier-free guidance: out[k] = u[k] + scale * (c[k] - u[k]), k < n. out may alias u or c.
void apply_guidance(const float* eps_uncond, const float* eps_cond, int64_t n, float scale,
                    float* out);

// Gaussian noise from a counter-based generator (no state between calls, so the values depend only
// on (seed, stream, index): deterministic across thread counts, platforms and call orders).
// Definition: gamma = 0x9E3779B97F4A7C15, mix = the splitmix64 finalizer (Steele et al. 2014:
// z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31),
// key = mix(seed + gamma), c = stream * 2^40 + pair index j (j = index / 2, 2^40 pairs per
// stream), b1 = mix(key ^ mix(2c + 1)), b2 = mix(key ^ mix(2c + 2)),
// u1 = ((b1 >> 11) + 1) 2^-53 in (0, 1], u2 = (b2 >> 11) 2^-53, and Box-Muller:
// value[2j] = r cos(2 pi u2), value[2j + 1] = r sin(2 pi u2), r = sqrt(-2 ln u1), in double,
// rounded to float. The integer part is exact everywhere; log/cos/sin come from the C library
// (within an ulp of each other on IEEE platforms, invisible after the rounding to float in all
// but rare ties).
class NoiseRng {
 public:
  explicit NoiseRng(uint64_t seed);
  // out[k] = value(stream, k), k < n.
  void fill(uint64_t stream, float* out, int64_t n) const;

 private:
  uint64_t key_;
};

enum class SamplerKind {
  kEuler,           // first order, deterministic
  kEulerAncestral,  // Euler to sigma_down, then fresh noise * sigma_up (eta = 1)
  kDpmpp2m,         // DPM-Solver++(2M): second-order multistep with the previous prediction
  // Latent consistency (Luo et al. 2023; diffusers' LCMScheduler with its defaults): its own
  // integer timesteps (lcm_timesteps; the SigmaSchedule is not used), per step the consistency
  // prediction denoised = c_out x0 + c_skip x_t, then fresh noise at the next step's level. For
  // LCM-distilled weights (an LCM-LoRA): 2-8 steps, guidance 1-2.
  kLcm,
};
const char* sampler_kind_name(SamplerKind k);  // "euler", "euler_a", "dpmpp_2m", "lcm"

// LCM's schedule: the origin timesteps k - 1, 2k - 1, ..., (k = train_steps / kLcmOriginalSteps)
// of which the first floor(kLcmOriginalSteps * strength) are kept (image-to-image keeps the low
// noise end), reversed, at indices floor(i * L / steps) (L kept): 4 steps give 999, 759, 499,
// 259. Errors (kInvalidArgument): steps < 1, strength outside (0, 1], or more steps than the L
// timesteps kept.
inline constexpr int kLcmOriginalSteps = 50;
// steps x strength is floored with this margin: strengths arrive as floats (0.7f is 0.69999998),
// and 0.7 of 10 steps must run 7, 0.29 of 100 run 29.
inline constexpr double kStrengthMargin = 1e-4;
Expected<std::vector<int>> lcm_timesteps(int steps, double strength = 1.0,
                                         int train_steps = kSdTrainSteps);
// LCM's boundary scalings at timestep t (sigma_data 0.5, timestep scaling 10):
// c_skip = 0.25 / (u^2 + 0.25), c_out = u / sqrt(u^2 + 0.25), u = 10 t.
struct LcmScalings {
  double c_skip = 0, c_out = 0;
};
LcmScalings lcm_scalings(double timestep);

// Euler ancestral's split of a step sigma -> sigma_next (eta 1): the deterministic part goes to
// sigma_down, noise of std sigma_up is added; sigma_down^2 + sigma_up^2 = sigma_next^2. Both 0
// when sigma_next is 0.
struct AncestralStep {
  double sigma_down = 0;
  double sigma_up = 0;
};
AncestralStep ancestral_step(double sigma, double sigma_next, double eta = 1.0);

class Sampler {
 public:
  // A run of `steps` steps over `n` latent values. Errors (kInvalidArgument): steps < 1, steps >
  // sched.train_steps() (1000 for SD), n < 1. seed drives init_latents() and Euler ancestral's
  // noise (stream 0 for the initial latents, stream i + 1 for step i).
  static Expected<Sampler> create(const NoiseSchedule& sched, SamplerKind kind,
                                  SigmaSchedule schedule, int steps, int64_t n, uint64_t seed);

  SamplerKind kind() const { return kind_; }
  int steps() const { return steps_; }
  // Image-to-image: the run starts at step first_step() (diffusers' img2img rule; LCM instead
  // keeps every step over a schedule truncated to its low-noise end, lcm_timesteps): of the
  // `steps`-step schedule the last floor(steps * strength + kStrengthMargin) steps run, from the
  // init latents noised
  // to sigma(first_step()). Errors (kInvalidArgument, naming the strength): strength outside
  // (0, 1], or so low that no step would run. Call before the first step; 1 restores step 0.
  Status set_strength(double strength);
  int first_step() const { return first_step_; }
  int64_t size() const { return n_; }
  const std::vector<double>& sigmas() const { return sigmas_; }          // steps + 1, last 0
  double sigma(int i) const { return sigmas_[static_cast<size_t>(i)]; }  // i <= steps
  // The model timestep for step i (sched.sigma_to_t(sigma(i))), i < steps.
  double timestep(int i) const { return timesteps_[static_cast<size_t>(i)]; }

  // x[k] = N(0, 1) * sigma(0) from the seed's stream 0 (x holds size() floats).
  void init_latents(float* x) const;

  // Step i (first_step() <= i < steps) from sigma(i) to sigma(i + 1): eps is the model's (guided)
  // epsilon for x * input_scale(sigma(i)) at timestep(i); x (size() floats) is updated in place.
  // Steps run in order first_step(), first_step() + 1, ...; the first step may be called again to
  // restart (DPM++ 2M forgets its history).
  // Euler ancestral and LCM draw their noise from the seed (stream i + 1).
  // Errors: kInvalidArgument for i out of order or out of range; kCorruptData when eps or the
  // updated latents hold a NaN or an infinity ("step 4 of 20 (sigma 1.86): model output has NaN
  // at element 123"); x is then unspecified and the run must restart at step 0.
  Status step(int i, const float* eps, float* x);
  // Step i with the noise supplied by the caller (size() floats of N(0, 1); Euler ancestral and
  // LCM, ignored by the others): for parity with another RNG (tests, PyTorch).
  Status step_with_noise(int i, const float* eps, const float* noise, float* x);

 private:
  Sampler() = default;
  Status check_finite(int i, const float* v, const char* what) const;
  // LCM: the timesteps and sigmas of lcm_timesteps(steps, strength).
  Status use_lcm_schedule(double strength);

  SamplerKind kind_ = SamplerKind::kEuler;
  int steps_ = 0;
  int64_t n_ = 0;
  int next_step_ = 0;
  int first_step_ = 0;
  NoiseRng rng_{0};
  std::vector<double> sigmas_, timesteps_;
  std::vector<float> prev_denoised_;  // DPM++ 2M: the previous step's prediction of x0
  std::vector<float> noise_;          // Euler ancestral, LCM: this step's noise
  NoiseSchedule sched_;               // LCM: to rebuild its schedule for a strength
};

}  // namespace tessera::diffusion
