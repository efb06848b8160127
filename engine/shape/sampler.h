// Sampler: picks the next shape code from (guided, restricted) logits.
//
// Greedy (the default) is argmax with ties going to the lowest index: it reproduces the reference.
// Sampling (SamplingSettings::sample = true, core/sampling.h) applies, in this order:
//   1. temperature: z = logits / temperature (temperature > 0);
//   2. top-k: keep the k largest z (k = 0: all); ties broken towards the lower index;
//   3. softmax over the kept tokens (in double);
//   4. top-p (nucleus), the reference's rule: in descending order a token is dropped when the
//      cumulative probability up to and including it exceeds top_p; the top token always stays
//      (top_p = 1: no filter);
//   5. one draw from the renormalized distribution with the generator below.
// RNG: xoshiro256** (Blackman & Vigna, "Scrambled linear pseudorandom number generators", 2021)
// seeded by four outputs of splitmix64(seed); a draw is u = (next() >> 11) * 2^-53 in [0, 1). The
// same seed gives the same tokens on every platform (no std:: distributions involved).
//
// The sampler owns scratch of `vocab` entries, allocated in the constructor: next() allocates
// nothing. Non-finite logits (NaN, +inf, or all -inf) are reported as errors, never sampled.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/sampling.h"
#include "core/status.h"
#include "kernels/sampling.h"

namespace tessera::shape {

// The RNG and argmax live with the sampling ops (kernels/sampling.h), which the device sampler
// shares.
using ::tessera::kernels::argmax;
using ::tessera::kernels::splitmix64;
using ::tessera::kernels::Xoshiro256;

class Sampler {
 public:
  // options must be valid (check_sampling); vocab >= 1 is the size next() expects. The guidance
  // is not the sampler's (the generator mixes the logits before they arrive here).
  Sampler(const SamplingSettings& options, int64_t vocab);

  // The next token from logits[0, n) (n <= vocab). Errors: kInvalidArgument for non-finite
  // logits (naming the index) or n outside [1, vocab].
  Expected<int32_t> next(const float* logits, int64_t n);
  const SamplingSettings& options() const { return options_; }

 private:
  SamplingSettings options_;
  Xoshiro256 rng_;
  std::vector<int32_t> order_;
  std::vector<double> probs_;
};

}  // namespace tessera::shape
