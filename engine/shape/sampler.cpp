#include "engine/shape/sampler.h"

#include <algorithm>
#include <cmath>

namespace tessera::shape {

Sampler::Sampler(const SamplingSettings& options, int64_t vocab)
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
  kernels::SamplingParams params;
  params.sample = options_.sample;
  params.temperature = options_.temperature;
  params.top_k = options_.top_k;
  params.top_p = options_.top_p;
  return kernels::pick_token(logits, n, params, rng_, order_.data(), probs_.data());
}

}  // namespace tessera::shape
