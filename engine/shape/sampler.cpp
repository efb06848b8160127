#include "engine/shape/sampler.h"

#include <algorithm>
#include <cmath>

namespace tessera::shape {

Status validate_sampler_options(const SamplerOptions& o) {
  if (!(o.temperature > 0.0f) || !std::isfinite(o.temperature)) {
    return invalid_argument("sampler: temperature " + std::to_string(o.temperature) +
                            " must be a finite number > 0");
  }
  if (o.top_k < 0)
    return invalid_argument("sampler: top_k " + std::to_string(o.top_k) + " must be >= 0");
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) {
    return invalid_argument("sampler: top_p " + std::to_string(o.top_p) + " must be in (0, 1]");
  }
  return {};
}

uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Xoshiro256::Xoshiro256(uint64_t seed) {
  uint64_t state = seed;
  for (uint64_t& word : s_) word = splitmix64(&state);
}

uint64_t Xoshiro256::next() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Xoshiro256::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

int32_t argmax(const float* values, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (values[i] > values[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplerOptions& options, int64_t vocab)
    : options_(options), rng_(options.seed) {
  order_.resize(static_cast<size_t>(std::max<int64_t>(vocab, 1)));
  probs_.resize(order_.size());
}

Expected<int32_t> Sampler::next(const float* logits, int64_t n) {
  if (n < 1 || n > static_cast<int64_t>(order_.size())) {
    return invalid_argument("sampler: " + std::to_string(n) + " logits outside [1, " +
                            std::to_string(order_.size()) + "]");
  }
  bool any_finite = false;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i]) || logits[i] == INFINITY) {
      return invalid_argument("sampler: logit " + std::to_string(i) + " is " +
                              (std::isnan(logits[i]) ? "NaN" : "+inf") +
                              " (non-finite model output: corrupt weights or condition?)");
    }
    any_finite = any_finite || std::isfinite(logits[i]);
  }
  if (!any_finite) return invalid_argument("sampler: every logit is -inf");
  if (!options_.sample) return argmax(logits, n);

  // Candidates in descending order of logit, ties towards the lower index.
  for (int64_t i = 0; i < n; ++i) order_[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  auto greater = [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int64_t kept = n;
  if (options_.top_k > 0 && options_.top_k < n) {
    kept = options_.top_k;
    std::partial_sort(order_.begin(), order_.begin() + kept, order_.begin() + n, greater);
  } else {
    std::sort(order_.begin(), order_.begin() + n, greater);
  }
  const double inv_t = 1.0 / static_cast<double>(options_.temperature);
  const double top = static_cast<double>(logits[order_[0]]) * inv_t;
  double total = 0;
  for (int64_t i = 0; i < kept; ++i) {
    const double p =
        std::exp(static_cast<double>(logits[order_[static_cast<size_t>(i)]]) * inv_t - top);
    probs_[static_cast<size_t>(i)] = p;
    total += p;
  }
  if (options_.top_p < 1.0f) {
    double cumulative = 0;
    int64_t nucleus = kept;
    for (int64_t i = 0; i < kept; ++i) {
      cumulative += probs_[static_cast<size_t>(i)] / total;
      if (cumulative > static_cast<double>(options_.top_p) && i > 0) {
        nucleus = i;
        break;
      }
    }
    kept = nucleus;
    total = 0;
    for (int64_t i = 0; i < kept; ++i) total += probs_[static_cast<size_t>(i)];
  }
  const double target = rng_.uniform() * total;
  double acc = 0;
  for (int64_t i = 0; i < kept; ++i) {
    acc += probs_[static_cast<size_t>(i)];
    if (target < acc) return order_[static_cast<size_t>(i)];
  }
  return order_[static_cast<size_t>(kept - 1)];  // rounding left target == total
}

}  // namespace tessera::shape
