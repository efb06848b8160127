// Sampler: picks the next shape code from (guided, restricted) logits.
//
// Greedy (the default) is argmax with ties going to the lowest index: it reproduces the reference.
// Sampling (SamplerOptions::sample = true) applies, in this order:
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

#include "core/status.h"
#include "kernels/sampling.h"

namespace tessera::shape {

struct SamplerOptions {
  bool sample = false;       // false: greedy argmax (the reference's behaviour)
  float temperature = 1.0f;  // > 0
  int64_t top_k = 0;         // 0: no top-k filter
  float top_p = 1.0f;        // in (0, 1]; 1: no nucleus filter
  uint64_t seed = 0;
};

// Checks the ranges above; the message names the offending option.
Status validate_sampler_options(const SamplerOptions& options);

// The RNG and argmax live with the sampling ops (kernels/sampling.h), which the device sampler
// shares.
using ::tessera::kernels::argmax;
using ::tessera::kernels::splitmix64;
using ::tessera::kernels::Xoshiro256;

class Sampler {
 public:
  // options must be valid (validate_sampler_options); vocab >= 1 is the size next() expects.
  Sampler(const SamplerOptions& options, int64_t vocab);

  // The next token from logits[0, n) (n <= vocab). Errors: kInvalidArgument for non-finite
  // logits (naming the index) or n outside [1, vocab].
  Expected<int32_t> next(const float* logits, int64_t n);
  const SamplerOptions& options() const { return options_; }

 private:
  SamplerOptions options_;
  Xoshiro256 rng_;
  std::vector<int32_t> order_;
  std::vector<double> probs_;
};

}  // namespace tessera::shape
