// Host sampling ops (kernels/sampling.h).
#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>

namespace tessera::kernels {

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

Xoshiro256 Xoshiro256::from_state(const std::array<uint64_t, 4>& words) {
  Xoshiro256 g;
  for (int i = 0; i < 4; ++i) g.s_[i] = words[static_cast<size_t>(i)];
  return g;
}

uint64_t Xoshiro256::next() {
  return xoshiro256_next(s_);
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

int32_t pick_token(const float* logits, int64_t n, const SamplingParams& params, Xoshiro256& rng,
                   int32_t* order, double* probs) {
  if (!params.sample) return argmax(logits, n);
  // Candidates in descending order of logit, ties towards the lower index.
  for (int64_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>(i);
  auto greater = [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int64_t kept = n;
  if (params.top_k > 0 && params.top_k < n) {
    kept = params.top_k;
    std::partial_sort(order, order + kept, order + n, greater);
  } else {
    std::sort(order, order + n, greater);
  }
  const double inv_t = 1.0 / static_cast<double>(params.temperature);
  const double top = static_cast<double>(logits[order[0]]) * inv_t;
  double total = 0;
  for (int64_t i = 0; i < kept; ++i) {
    const double p = std::exp(static_cast<double>(logits[order[i]]) * inv_t - top);
    probs[i] = p;
    total += p;
  }
  if (params.top_p < 1.0f) {
    double cumulative = 0;
    int64_t nucleus = kept;
    for (int64_t i = 0; i < kept; ++i) {
      cumulative += probs[i] / total;
      if (cumulative > static_cast<double>(params.top_p) && i > 0) {
        nucleus = i;
        break;
      }
    }
    kept = nucleus;
    total = 0;
    for (int64_t i = 0; i < kept; ++i) total += probs[i];
  }
  const double target = rng.uniform() * total;
  double acc = 0;
  for (int64_t i = 0; i < kept; ++i) {
    acc += probs[i];
    if (target < acc) return order[i];
  }
  return order[kept - 1];  // rounding left target == total
}

Status choose_token_host(const float* logits, const TokenChoice& c, int64_t* step, uint64_t* rng,
                         int32_t* ids, int64_t ids_count, int32_t* ring, int64_t ring_size,
                         ChooseTokenScratch* scratch) {
  TESSERA_RETURN_IF_ERROR(check_token_choice("cpu choose_token", logits, c, step, rng, ids,
                                             ids_count, ring, ring_size));
  const int64_t i = *step, k = c.codes;
  const size_t n = static_cast<size_t>(k);
  if (scratch->mixed.size() < n) {
    scratch->mixed.resize(n);
    scratch->order.resize(n);
    scratch->probs.resize(n);
  }
  float* mixed = scratch->mixed.data();
  const int64_t ids_per = ids_count / c.candidates;
  for (int64_t cand = 0; cand < c.candidates; ++cand) {
    const float* row = logits + cand * c.candidate_stride;
    uint64_t* state = rng + 4 * cand;
    if (c.guided) {
      const float g = guidance_weight(c.guidance_scale, i, c.total_steps);
      const float* uncond = row + c.row_stride;
      for (int64_t j = 0; j < k; ++j) mixed[j] = (1.0f + g) * row[j] - g * uncond[j];
    } else {
      std::copy(row, row + k, mixed);
    }
    int32_t result = 0;
    bool any_finite = false, bad = false;
    for (int64_t j = 0; j < k && !bad; ++j) {
      if (std::isnan(mixed[j]) || mixed[j] == INFINITY) {
        result = static_cast<int32_t>(-1 - j);
        bad = true;
      }
      any_finite = any_finite || std::isfinite(mixed[j]);
    }
    if (!bad && !any_finite) {
      result = kTokenAllNegInf;
    } else if (!bad) {
      Xoshiro256 g = Xoshiro256::from_state({state[0], state[1], state[2], state[3]});
      result = pick_token(mixed, k, c.sampling, g, scratch->order.data(), scratch->probs.data());
      const std::array<uint64_t, 4> words = g.state();
      for (int w = 0; w < 4; ++w) state[w] = words[static_cast<size_t>(w)];
    }
    if (result >= 0) std::fill(ids + cand * ids_per, ids + (cand + 1) * ids_per, result);
    if (ring != nullptr) ring[cand * ring_size + i % ring_size] = result;
  }
  *step = i + 1;
  return Status();
}

}  // namespace tessera::kernels
