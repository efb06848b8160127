// Next-token choice of the shape engine, as ops: the guidance mix and the sampler (greedy argmax,
// or temperature -> top-k -> softmax in double -> top-p -> one xoshiro256** draw). The host code
// here serves engine/shape/sampler.h's Sampler and the CPU backend's choose_token; the CUDA
// backend's choose_token (kernels/cuda/sampling.cu) has the same contract, with the step counter
// and the RNG state in device memory, so a captured decode step needs no host round trip.
//
// RNG: xoshiro256** (Blackman & Vigna, "Scrambled linear pseudorandom number generators", 2021)
// seeded by four outputs of splitmix64(seed); a draw is u = (next() >> 11) * 2^-53 in [0, 1). The
// same seed gives the same tokens on every platform (no std:: distributions involved).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::kernels {

#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif

// One xoshiro256** step on the state words s[0..4): the host generator below and the CUDA
// choose_token both advance their state with it.
TESSERA_HOST_DEVICE inline uint64_t xoshiro256_next(uint64_t* s) {
  const uint64_t x = s[1] * 5;
  const uint64_t result = ((x << 7) | (x >> 57)) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = (s[3] << 45) | (s[3] >> 19);
  return result;
}

// splitmix64 (Steele, Lea, Flood 2014): advances *state and returns the next output.
uint64_t splitmix64(uint64_t* state);

class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);
  // A generator continuing from state words (as state() returned them).
  static Xoshiro256 from_state(const std::array<uint64_t, 4>& words);
  uint64_t next();
  double uniform();  // [0, 1), 53 bits
  std::array<uint64_t, 4> state() const { return {s_[0], s_[1], s_[2], s_[3]}; }

 private:
  Xoshiro256() = default;
  uint64_t s_[4] = {};
};

// Index of the largest value, lowest index on ties (n >= 1, values finite).
int32_t argmax(const float* values, int64_t n);

struct SamplingParams {
  bool sample = false;       // false: greedy argmax
  float temperature = 1.0f;  // > 0
  int64_t top_k = 0;         // 0: no top-k filter
  float top_p = 1.0f;        // in (0, 1]; 1: no nucleus filter
};

// The pick from logits[0, n) (each finite or -inf, at least one finite: the caller checks):
// argmax, or, sampling, in this order: z = logits / temperature; top-k keeps the k largest z (ties
// towards the lower index); softmax over the kept ones in double; top-p (the reference's rule: in
// descending order a token is dropped when the cumulative probability up to and including it
// exceeds top_p; the top token always stays); one draw of `rng` from the renormalized
// distribution. order and probs: scratch of at least n entries.
int32_t pick_token(const float* logits, int64_t n, const SamplingParams& params, Xoshiro256& rng,
                   int32_t* order, double* probs);

// ---- choose_token: guidance mix + pick, state in backend memory ---------------------------------
struct TokenChoice {
  int64_t codes = 0;       // candidates: logits [0, codes) of the row(s), 1..kChooseTokenMaxCodes
  int64_t row_stride = 0;  // guided: floats from the conditional to the unconditional row
  bool guided = false;     // mix (1 + g) * cond - g * uncond, g = guidance_weight(scale, step, n)
  float guidance_scale = 0.0f;
  int64_t total_steps = 1;  // n above (the tokens of the whole generation), >= 1
  SamplingParams sampling;
  // Several generations decoded together (variations): candidate j mixes and picks from
  // logits + j * candidate_stride (its conditional row; its unconditional row row_stride further),
  // with its own RNG state rng[4j .. 4j + 4), writes its token to its share of ids (ids_count /
  // candidates consecutive entries, j-th share) and to its own ring ring[j * ring_size ..). The
  // step counter advances once per call.
  int64_t candidates = 1;
  int64_t candidate_stride = 0;  // floats; with candidates > 1 at least row_stride + codes (guided)
                                 // or codes
};
inline constexpr int64_t kChooseTokenMaxCodes = 16384;
// What choose_token publishes instead of a token id (>= 0) when the mixed logits are bad: -1 - i
// when logit i is NaN or +inf, kTokenAllNegInf when every logit is -inf.
inline constexpr int32_t kTokenAllNegInf = -2147483647 - 1;

// The reference's decaying guidance: scale * (n - step) / n, in float.
inline float guidance_weight(float scale, int64_t step, int64_t total_steps) {
  return scale * static_cast<float>(total_steps - step) / static_cast<float>(total_steps);
}

// The argument checks of every choose_token (messages start with `op`).
inline Status check_token_choice(const std::string& op, const float* logits, const TokenChoice& c,
                                 const int64_t* step, const uint64_t* rng, const int32_t* ids,
                                 int64_t ids_count, const int32_t* ring, int64_t ring_size) {
  const std::string p = op + ": ";
  if (logits == nullptr || step == nullptr || rng == nullptr) {
    return invalid_argument(p + "null logits, step or rng pointer");
  }
  if (c.codes < 1 || c.codes > kChooseTokenMaxCodes) {
    return invalid_argument(p + "codes " + std::to_string(c.codes) + " outside [1, " +
                            std::to_string(kChooseTokenMaxCodes) + "]");
  }
  if (c.guided && c.row_stride < c.codes) {
    return invalid_argument(p + "guided with row_stride " + std::to_string(c.row_stride) +
                            " < codes " + std::to_string(c.codes) +
                            " (the unconditional row would overlap the conditional one)");
  }
  if (c.candidates < 1) {
    return invalid_argument(p + "candidates " + std::to_string(c.candidates) + " must be >= 1");
  }
  if (c.candidates > 1) {
    const int64_t span = c.guided ? c.row_stride + c.codes : c.codes;
    if (c.candidate_stride < span) {
      return invalid_argument(p + "candidate_stride " + std::to_string(c.candidate_stride) + " < " +
                              std::to_string(span) + " (candidates' logits rows would overlap)");
    }
    if (ids_count % c.candidates != 0) {
      return invalid_argument(p + "ids_count " + std::to_string(ids_count) +
                              " is not a multiple of candidates " + std::to_string(c.candidates));
    }
  }
  if (c.total_steps < 1) {
    return invalid_argument(p + "total_steps " + std::to_string(c.total_steps) + " must be >= 1");
  }
  const SamplingParams& s = c.sampling;
  if (s.sample) {
    if (!(s.temperature > 0.0f) || !std::isfinite(s.temperature)) {
      return invalid_argument(p + "temperature " + std::to_string(s.temperature) +
                              " must be a finite number > 0");
    }
    if (s.top_k < 0) return invalid_argument(p + "top_k " + std::to_string(s.top_k) + " < 0");
    if (!(s.top_p > 0.0f && s.top_p <= 1.0f)) {
      return invalid_argument(p + "top_p " + std::to_string(s.top_p) + " outside (0, 1]");
    }
  }
  if (ids_count < 0 || (ids_count > 0 && ids == nullptr)) {
    return invalid_argument(p + "ids_count " + std::to_string(ids_count) +
                            (ids == nullptr ? " with null ids" : ""));
  }
  if (ring != nullptr && ring_size < 1) {
    return invalid_argument(p + "ring_size " + std::to_string(ring_size) + " must be >= 1");
  }
  return Status();
}

// Scratch of choose_token_host, grown on demand.
struct ChooseTokenScratch {
  std::vector<float> mixed;
  std::vector<int32_t> order;
  std::vector<double> probs;
};

// choose_token on host memory (the CPU backend's op): reads *step (this token's index i) and the
// logits of step i, mixes the guidance, picks (the RNG words in rng[0..4) advanced once per
// sampled token), writes the choice to ids[0, ids_count) (unchanged on an error code), to
// ring[i % ring_size] when ring is not null, and sets *step = i + 1.
Status choose_token_host(const float* logits, const TokenChoice& choice, int64_t* step,
                         uint64_t* rng, int32_t* ids, int64_t ids_count, int32_t* ring,
                         int64_t ring_size, ChooseTokenScratch* scratch);

}  // namespace tessera::kernels
