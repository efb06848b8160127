#include "engine/diffusion/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <numbers>
#include <string>

namespace tessera::diffusion {
namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
constexpr int kStreamShift = 40;  // 2^40 normal pairs per stream

uint64_t mix64(uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z;
}

std::string step_name(int i, int steps, double sigma) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "step %d of %d (sigma %.6g)", i, steps, sigma);
  return buf;
}

}  // namespace

// ---- NoiseSchedule ----

Expected<NoiseSchedule> NoiseSchedule::scaled_linear(double beta_start, double beta_end,
                                                     int train_steps) {
  if (train_steps < 2 || train_steps > 100000) {
    return invalid_argument("noise schedule: train_steps " + std::to_string(train_steps) +
                            " is outside [2, 100000]");
  }
  if (!(beta_start > 0) || !(beta_start <= beta_end) || !(beta_end < 1)) {
    return invalid_argument("noise schedule: betas " + std::to_string(beta_start) + " -> " +
                            std::to_string(beta_end) + " must satisfy 0 < start <= end < 1");
  }
  NoiseSchedule s;
  s.sigmas_.resize(static_cast<size_t>(train_steps));
  s.log_sigmas_.resize(s.sigmas_.size());
  const double a = std::sqrt(beta_start), b = std::sqrt(beta_end);
  double acp = 1.0;
  for (int t = 0; t < train_steps; ++t) {
    // numpy's linspace: start + t * step, the last point exactly `end`.
    const double r = t == train_steps - 1 ? b : a + t * ((b - a) / (train_steps - 1));
    acp *= 1.0 - r * r;
    s.sigmas_[static_cast<size_t>(t)] = std::sqrt((1.0 - acp) / acp);
    s.log_sigmas_[static_cast<size_t>(t)] = std::log(s.sigmas_[static_cast<size_t>(t)]);
  }
  return s;
}

NoiseSchedule NoiseSchedule::sd() {
  return std::move(scaled_linear(kSdBetaStart, kSdBetaEnd, kSdTrainSteps)).value();
}

double NoiseSchedule::t_to_sigma(double t) const {
  const double t_max = static_cast<double>(sigmas_.size() - 1);
  t = std::clamp(t, 0.0, t_max);
  const double lo = std::floor(t), w = t - lo;
  const auto l = static_cast<size_t>(lo);
  const size_t h = static_cast<size_t>(std::ceil(t));
  return std::exp((1.0 - w) * log_sigmas_[l] + w * log_sigmas_[h]);
}

double NoiseSchedule::sigma_to_t(double sigma) const {
  const double ls = std::log(sigma);
  // The last training log sigma <= log(sigma) (log sigmas increase), kept in [0, n - 2] so that
  // sigmas beyond either end extrapolate from the end interval before the clamp of w.
  const auto count =
      std::upper_bound(log_sigmas_.begin(), log_sigmas_.end(), ls) - log_sigmas_.begin();
  const auto lo = static_cast<size_t>(std::clamp<std::ptrdiff_t>(
      count - 1, 0, static_cast<std::ptrdiff_t>(log_sigmas_.size()) - 2));
  const double low = log_sigmas_[lo], high = log_sigmas_[lo + 1];
  const double w = std::clamp((low - ls) / (low - high), 0.0, 1.0);
  return (1.0 - w) * static_cast<double>(lo) + w * static_cast<double>(lo + 1);
}

// ---- schedules ----

const char* sigma_schedule_name(SigmaSchedule s) {
  switch (s) {
    case SigmaSchedule::kNormal:
      return "normal";
    case SigmaSchedule::kKarras:
      return "karras";
  }
  return "?";
}

Expected<std::vector<double>> make_sigmas(const NoiseSchedule& sched, SigmaSchedule kind,
                                          int steps) {
  if (steps < 1 || steps > sched.train_steps()) {
    return invalid_argument("sampler: steps " + std::to_string(steps) + " is outside [1, " +
                            std::to_string(sched.train_steps()) + "]");
  }
  std::vector<double> sigmas(static_cast<size_t>(steps) + 1, 0.0);
  // linspace(start, end, steps)[i] as numpy computes it (a single point is `start`).
  const auto linspace = [steps](double start, double end, int i) {
    if (steps == 1) return start;
    if (i == steps - 1) return end;
    return start + i * ((end - start) / (steps - 1));
  };
  if (kind == SigmaSchedule::kNormal) {
    const double t_max = sched.train_steps() - 1;
    for (int i = 0; i < steps; ++i)
      sigmas[static_cast<size_t>(i)] = sched.t_to_sigma(linspace(t_max, 0.0, i));
  } else {
    const double lo = std::pow(sched.sigma_min(), 1.0 / kKarrasRho);
    const double hi = std::pow(sched.sigma_max(), 1.0 / kKarrasRho);
    for (int i = 0; i < steps; ++i) {
      sigmas[static_cast<size_t>(i)] = std::pow(hi + linspace(0.0, 1.0, i) * (lo - hi), kKarrasRho);
    }
  }
  return sigmas;
}

double input_scale(double sigma) {
  return 1.0 / std::sqrt(sigma * sigma + 1.0);
}

void scale_model_input(const float* x, int64_t n, double sigma, float* out) {
  const double c = input_scale(sigma);
  for (int64_t k = 0; k < n; ++k) out[k] = static_cast<float>(x[k] * c);
}

void apply_guidance(const float* eps_uncond, const float* eps_cond, int64_t n, float scale,
                    float* out) {
  for (int64_t k = 0; k < n; ++k) {
    const float u = eps_uncond[k];
    out[k] = u + scale * (eps_cond[k] - u);
  }
}

// ---- NoiseRng ----

NoiseRng::NoiseRng(uint64_t seed) : key_(mix64(seed + kGamma)) {}

void NoiseRng::fill(uint64_t stream, float* out, int64_t n) const {
  constexpr double k2pow53 = 1.0 / 9007199254740992.0;
  const uint64_t base = stream << kStreamShift;
  for (int64_t k = 0; k < n; k += 2) {
    const uint64_t c = base + static_cast<uint64_t>(k / 2);
    const uint64_t b1 = mix64(key_ ^ mix64(2 * c + 1));
    const uint64_t b2 = mix64(key_ ^ mix64(2 * c + 2));
    const double u1 = static_cast<double>((b1 >> 11) + 1) * k2pow53;  // (0, 1]: log is finite
    const double u2 = static_cast<double>(b2 >> 11) * k2pow53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = 2.0 * std::numbers::pi * u2;
    out[k] = static_cast<float>(r * std::cos(a));
    if (k + 1 < n) out[k + 1] = static_cast<float>(r * std::sin(a));
  }
}

// ---- Sampler ----

const char* sampler_kind_name(SamplerKind k) {
  switch (k) {
    case SamplerKind::kEuler:
      return "euler";
    case SamplerKind::kEulerAncestral:
      return "euler_a";
    case SamplerKind::kDpmpp2m:
      return "dpmpp_2m";
    case SamplerKind::kLcm:
      return "lcm";
  }
  return "?";
}

Expected<std::vector<int>> lcm_timesteps(int steps, double strength, int train_steps) {
  if (!(strength > 0.0 && strength <= 1.0)) {
    return invalid_argument("strength " + std::to_string(strength) + " is outside (0, 1]");
  }
  const int kept = static_cast<int>(std::floor(kLcmOriginalSteps * strength + kStrengthMargin));
  if (steps < 1 || steps > kept) {
    return invalid_argument(
        "LCM steps " + std::to_string(steps) + " is outside [1, " + std::to_string(kept) + "] (" +
        std::to_string(kept) + " timesteps of its " + std::to_string(kLcmOriginalSteps) +
        (strength < 1.0 ? " at strength " + std::to_string(strength) : "") + "; 4 is typical)");
  }
  const int k = train_steps / kLcmOriginalSteps;
  std::vector<int> t(static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    // floor(linspace(0, kept, steps, endpoint=False)[i]) = floor(i * kept / steps); the origin
    // reversed: entry j is (kept - j) * k - 1.
    const int j = static_cast<int>((static_cast<int64_t>(i) * kept) / steps);
    t[static_cast<size_t>(i)] = (kept - j) * k - 1;
  }
  return t;
}

LcmScalings lcm_scalings(double timestep) {
  const double u = 10.0 * timestep, d2 = 0.25;
  return {d2 / (u * u + d2), u / std::sqrt(u * u + d2)};
}

AncestralStep ancestral_step(double sigma, double sigma_next, double eta) {
  if (sigma_next == 0.0) return {};
  AncestralStep s;
  s.sigma_up = std::min(
      sigma_next, eta * std::sqrt(sigma_next * sigma_next *
                                  (sigma * sigma - sigma_next * sigma_next) / (sigma * sigma)));
  s.sigma_down = std::sqrt(sigma_next * sigma_next - s.sigma_up * s.sigma_up);
  return s;
}

Expected<Sampler> Sampler::create(const NoiseSchedule& sched, SamplerKind kind,
                                  SigmaSchedule schedule, int steps, int64_t n, uint64_t seed) {
  if (n < 1) return invalid_argument("sampler: latent size " + std::to_string(n) + " must be >= 1");
  TESSERA_ASSIGN_OR_RETURN(std::vector<double> sigmas, make_sigmas(sched, schedule, steps));
  Sampler s;
  s.kind_ = kind;
  s.steps_ = steps;
  s.n_ = n;
  s.rng_ = NoiseRng(seed);
  s.sched_ = sched;
  s.sigmas_ = std::move(sigmas);
  s.timesteps_.resize(static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    s.timesteps_[static_cast<size_t>(i)] = sched.sigma_to_t(s.sigmas_[static_cast<size_t>(i)]);
  }
  if (kind == SamplerKind::kLcm) TESSERA_RETURN_IF_ERROR(s.use_lcm_schedule(1.0));
  if (kind == SamplerKind::kDpmpp2m) s.prev_denoised_.resize(static_cast<size_t>(n));
  if (kind == SamplerKind::kEulerAncestral || kind == SamplerKind::kLcm) {
    s.noise_.resize(static_cast<size_t>(n));
  }
  return s;
}

void Sampler::init_latents(float* x) const {
  rng_.fill(0, x, n_);
  const double s0 = sigmas_[0];
  for (int64_t k = 0; k < n_; ++k) x[k] = static_cast<float>(x[k] * s0);
}

Status Sampler::check_finite(int i, const float* v, const char* what) const {
  for (int64_t k = 0; k < n_; ++k) {
    if (!std::isfinite(v[k])) {
      return corrupt_data(step_name(i, steps_, sigma(i)) + ": " + what + " has " +
                          (std::isnan(v[k]) ? "NaN" : "an infinity") + " at element " +
                          std::to_string(k));
    }
  }
  return Status::ok_status();
}

Status Sampler::step(int i, const float* eps, float* x) {
  if ((kind_ == SamplerKind::kEulerAncestral || kind_ == SamplerKind::kLcm) && i >= 0 &&
      i < steps_) {
    rng_.fill(static_cast<uint64_t>(i) + 1, noise_.data(), n_);
  }
  return step_with_noise(i, eps, noise_.data(), x);
}

Status Sampler::use_lcm_schedule(double strength) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<int> t,
                           lcm_timesteps(steps_, strength, sched_.train_steps()));
  for (int i = 0; i < steps_; ++i) {
    timesteps_[static_cast<size_t>(i)] = t[static_cast<size_t>(i)];
    sigmas_[static_cast<size_t>(i)] =
        sched_.sigmas()[static_cast<size_t>(t[static_cast<size_t>(i)])];
  }
  sigmas_[static_cast<size_t>(steps_)] = 0.0;
  return Status::ok_status();
}

Status Sampler::set_strength(double strength) {
  if (kind_ == SamplerKind::kLcm && strength > 0.0 && strength <= 1.0) {
    TESSERA_RETURN_IF_ERROR(use_lcm_schedule(strength));
    first_step_ = 0;
    next_step_ = 0;
    return Status::ok_status();
  }
  if (!(strength > 0.0 && strength <= 1.0)) {
    return invalid_argument("strength " + std::to_string(strength) +
                            " is outside (0, 1] (the share of the steps that repaint the init "
                            "image)");
  }
  const int run = static_cast<int>(std::floor(steps_ * strength + kStrengthMargin));
  if (run < 1) {
    return invalid_argument("strength " + std::to_string(strength) + " with " +
                            std::to_string(steps_) +
                            " steps runs no step (floor(steps x strength) "
                            "is 0): raise the strength to at least " +
                            std::to_string(1.0 / steps_) + " or use more steps");
  }
  first_step_ = steps_ - run;
  next_step_ = first_step_;
  return Status::ok_status();
}

Status Sampler::step_with_noise(int i, const float* eps, const float* noise, float* x) {
  if (i < first_step_ || i >= steps_) {
    return invalid_argument("sampler: step " + std::to_string(i) + " is outside [" +
                            std::to_string(first_step_) + ", " + std::to_string(steps_) + ")");
  }
  if (i != first_step_ && i != next_step_) {
    return invalid_argument("sampler: step " + std::to_string(i) + " called out of order (step " +
                            std::to_string(next_step_) + " is next)");
  }
  next_step_ = first_step_;  // a failed step forces a restart
  TESSERA_RETURN_IF_ERROR(check_finite(i, eps, "model output"));
  const double s = sigma(i), sn = sigma(i + 1);
  // With epsilon prediction denoised = x - s * eps, so the ODE derivative (x - denoised) / s is
  // eps itself.
  switch (kind_) {
    case SamplerKind::kEuler: {
      const double dt = sn - s;
      for (int64_t k = 0; k < n_; ++k) x[k] = static_cast<float>(x[k] + eps[k] * dt);
      break;
    }
    case SamplerKind::kEulerAncestral: {
      if (noise == nullptr) return invalid_argument("sampler: euler_a step without noise");
      const AncestralStep a = ancestral_step(s, sn);
      const double dt = a.sigma_down - s;
      for (int64_t k = 0; k < n_; ++k) {
        double v = x[k] + eps[k] * dt;
        if (sn > 0) v += noise[k] * a.sigma_up;
        x[k] = static_cast<float>(v);
      }
      break;
    }
    case SamplerKind::kLcm: {
      if (noise == nullptr) return invalid_argument("sampler: lcm step without noise");
      // In the k-diffusion scaling x = x_t / sqrt(abar): x0 = x - s eps, x_t = x / sqrt(1 + s^2),
      // and the next x = denoised + s_next * noise (x_t' / sqrt(abar') of the DDPM form).
      const LcmScalings c = lcm_scalings(timestep(i));
      const double root_abar = 1.0 / std::sqrt(1.0 + s * s);
      for (int64_t k = 0; k < n_; ++k) {
        const double x0 = x[k] - s * static_cast<double>(eps[k]);
        double v = c.c_out * x0 + c.c_skip * root_abar * x[k];
        if (sn > 0) v += sn * static_cast<double>(noise[k]);
        x[k] = static_cast<float>(v);
      }
      break;
    }
    case SamplerKind::kDpmpp2m: {
      float* prev = prev_denoised_.data();
      if (sn == 0.0) {
        // The update's limit as sigma_next -> 0 (k-diffusion: exp(-inf) = 0, expm1(-inf) = -1).
        for (int64_t k = 0; k < n_; ++k) {
          const double d = x[k] - s * static_cast<double>(eps[k]);
          prev[k] = static_cast<float>(d);
          x[k] = static_cast<float>(d);
        }
        break;
      }
      // lambda = -log sigma; x_next = (sn / s) x - expm1(-h) D, h = lambda_next - lambda, where D
      // is denoised (first step) or the multistep extrapolation
      // (1 + 1/(2r)) denoised - 1/(2r) denoised_prev, r = h_last / h.
      const double h = std::log(s) - std::log(sn);
      const double ratio = sn / s, em = std::expm1(-h);
      double c_cur = 1.0, c_prev = 0.0;
      if (i > first_step_) {
        const double r = (std::log(sigma(i - 1)) - std::log(s)) / h;
        c_cur = 1.0 + 1.0 / (2.0 * r);
        c_prev = -1.0 / (2.0 * r);
      }
      for (int64_t k = 0; k < n_; ++k) {
        const double d = x[k] - s * static_cast<double>(eps[k]);
        const double dd = c_cur * d + c_prev * prev[k];
        prev[k] = static_cast<float>(d);
        x[k] = static_cast<float>(ratio * x[k] - em * dd);
      }
      break;
    }
  }
  TESSERA_RETURN_IF_ERROR(check_finite(i, x, "latents"));
  next_step_ = i + 1;
  return Status::ok_status();
}

}  // namespace tessera::diffusion
