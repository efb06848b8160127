// choose_token (kernels/cuda/cuda_ops.h): guidance mix + greedy or sampled next token in one block
// of kThreads threads, for the device-resident decode loop (no host synchronisation per
// token).
//
// 1. Every thread mixes its share of the codes with the host's exact float operations (explicit
//    _rn intrinsics: no FMA contraction), checks them (NaN / +inf -> error code, all -inf -> error
//    code) and keeps the largest key, key = order-preserving bits of the value << 32 | ~index, so
//    that the largest key is the largest value with the lowest index (the host's argmax).
// 2. Greedy: that key's index. Sampling: the keys of all codes are sorted descending in shared
//    memory (bitonic; 2^ceil(log2 codes) x 8 bytes, 128 KB at 16384 codes), which is the host's
//    candidate order (value descending, ties to the lower index); top-k keeps the first k;
//    p_i = exp(v_i / T - v_0 / T) in double; the nucleus and the draw are found from block-wide
//    prefix sums of p (each thread owns a contiguous run of candidates); thread 0 advances the
//    xoshiro256** state once and broadcasts u.
// 3. Thread 0 writes the ids, the ring slot and the next step.
// Candidates (TokenChoice::candidates > 1, variations): one block per candidate, each with its
// own logits rows, RNG state, share of ids and ring; no block writes the step (a block could
// finish before another has read it): advance_step_kernel, launched after them on the same stream,
// does.
#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_util.h"

namespace tessera::kernels::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kMaxDevices = 64;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

// Monotone map of a non-NaN float to uint32 (-inf lowest); -0 and +0 map alike, as they compare
// equal on the host.
__device__ __forceinline__ uint32_t ordered_bits(float f) {
  const uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float from_ordered_bits(uint32_t o) {
  return __uint_as_float((o & 0x80000000u) != 0 ? (o & 0x7fffffffu) : ~o);
}
__device__ __forceinline__ unsigned long long make_key(float v, int64_t index) {
  return (static_cast<unsigned long long>(ordered_bits(v)) << 32) |
         static_cast<unsigned long long>(0xffffffffu - static_cast<uint32_t>(index));
}
__device__ __forceinline__ int32_t key_index(unsigned long long key) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key & 0xffffffffull));
}
__device__ __forceinline__ double key_value(unsigned long long key) {
  return static_cast<double>(from_ordered_bits(static_cast<uint32_t>(key >> 32)));
}

// Inclusive prefix sum of v over the block (thread order); *total gets the block's sum. Every
// thread must call it. scratch: __shared__ double[kWarps].
__device__ double block_inclusive_scan(double v, double* scratch, double* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double x = v;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const double y = __shfl_up_sync(kFull, x, offset);
    if (lane >= offset) x += y;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    double w = scratch[lane];  // kWarps == 32
    for (int offset = 1; offset < 32; offset <<= 1) {
      const double y = __shfl_up_sync(kFull, w, offset);
      if (lane >= offset) w += y;
    }
    scratch[lane] = w;
  }
  __syncthreads();
  const double result = (warp > 0 ? scratch[warp - 1] : 0.0) + x;
  *total = scratch[kWarps - 1];
  __syncthreads();
  return result;
}

__global__ void __launch_bounds__(kThreads)
    choose_token_kernel(const float* __restrict__ logits, TokenChoice c, int64_t* step,
                        uint64_t* rng, int32_t* ids, int64_t ids_count, int32_t* ring,
                        int64_t ring_size, int sort_size) {
  // This block's candidate.
  const int64_t cand = blockIdx.x;
  logits += cand * c.candidate_stride;
  rng += 4 * cand;
  const int64_t ids_per = ids_count / c.candidates;
  ids += cand * ids_per;
  ids_count = ids_per;
  if (ring != nullptr) ring += cand * ring_size;
  extern __shared__ unsigned long long keys[];  // sort_size entries when sampling
  __shared__ int first_bad, any_finite, first_hit;
  __shared__ unsigned long long best;
  __shared__ double scan_scratch[kWarps];
  __shared__ double shared_total, shared_u;
  const int tid = threadIdx.x;
  const int64_t i = *step;
  if (tid == 0) {
    first_bad = INT_MAX;
    any_finite = 0;
    best = 0;
  }
  __syncthreads();

  // 1. Mix, check, argmax (and the keys to sort).
  const float g =
      c.guided ? __fdiv_rn(__fmul_rn(c.guidance_scale, static_cast<float>(c.total_steps - i)),
                           static_cast<float>(c.total_steps))
               : 0.0f;
  int bad = INT_MAX, finite = 0;
  unsigned long long top = 0;
  for (int64_t j = tid; j < c.codes; j += kThreads) {
    float v = logits[j];
    if (c.guided) {
      v = __fsub_rn(__fmul_rn(__fadd_rn(1.0f, g), v), __fmul_rn(g, logits[c.row_stride + j]));
    }
    if (isnan(v) || v == INFINITY) {
      bad = min(bad, static_cast<int>(j));
      continue;
    }
    finite |= isfinite(v) ? 1 : 0;
    const unsigned long long key = make_key(v, j);
    top = key > top ? key : top;
    if (c.sampling.sample) keys[j] = key;
  }
  if (c.sampling.sample) {
    for (int64_t j = c.codes + tid; j < sort_size; j += kThreads) keys[j] = 0;  // below -inf
  }
  if (bad != INT_MAX) atomicMin(&first_bad, bad);
  if (finite) atomicOr(&any_finite, 1);
  atomicMax(&best, top);
  __syncthreads();

  int32_t result = 0;
  if (first_bad != INT_MAX) {
    result = -1 - first_bad;
  } else if (!any_finite) {
    result = kTokenAllNegInf;
  } else if (!c.sampling.sample) {
    result = key_index(best);
  } else {
    // 2. Candidates in the host's order: bitonic sort, descending.
    for (int k = 2; k <= sort_size; k <<= 1) {
      for (int j = k >> 1; j > 0; j >>= 1) {
        for (int a = tid; a < sort_size; a += kThreads) {
          const int b = a ^ j;
          if (b > a) {
            const unsigned long long ka = keys[a], kb = keys[b];
            const bool descending = (a & k) == 0;
            if (descending ? ka < kb : ka > kb) {
              keys[a] = kb;
              keys[b] = ka;
            }
          }
        }
        __syncthreads();
      }
    }
    const int64_t top_k = c.sampling.top_k;
    int64_t kept = (top_k > 0 && top_k < c.codes) ? top_k : c.codes;
    const double inv_t = 1.0 / static_cast<double>(c.sampling.temperature);
    const double top_scaled = key_value(keys[0]) * inv_t;
    // Thread t owns candidates [t * per, (t + 1) * per) of the kept ones.
    const int64_t per = (kept + kThreads - 1) / kThreads;
    const int64_t begin = tid * per;
    auto prob = [&](int64_t r) { return exp(key_value(keys[r]) * inv_t - top_scaled); };
    double local = 0.0;
    for (int64_t r = begin; r < begin + per && r < kept; ++r) local += prob(r);
    double total = 0.0;
    double before = block_inclusive_scan(local, scan_scratch, &total) - local;
    if (c.sampling.top_p < 1.0f) {
      // The first r > 0 whose cumulative probability (through r) exceeds top_p ends the nucleus.
      if (tid == 0) first_hit = INT_MAX;
      __syncthreads();
      double cumulative = before;
      for (int64_t r = begin; r < begin + per && r < kept; ++r) {
        cumulative += prob(r);
        if (r > 0 && cumulative / total > static_cast<double>(c.sampling.top_p)) {
          atomicMin(&first_hit, static_cast<int>(r));
          break;
        }
      }
      __syncthreads();
      if (first_hit != INT_MAX) kept = first_hit;
      // The kept mass, summed again in the same order.
      local = 0.0;
      for (int64_t r = begin; r < begin + per && r < kept; ++r) local += prob(r);
      before = block_inclusive_scan(local, scan_scratch, &total) - local;
    }
    if (tid == 0) {
      shared_u = static_cast<double>(xoshiro256_next(rng) >> 11) * 0x1.0p-53;
      shared_total = total;
      first_hit = INT_MAX;
    }
    __syncthreads();
    const double target = shared_u * shared_total;
    double cumulative = before;
    for (int64_t r = begin; r < begin + per && r < kept; ++r) {
      cumulative += prob(r);
      if (target < cumulative) {
        atomicMin(&first_hit, static_cast<int>(r));
        break;
      }
    }
    __syncthreads();
    const int64_t chosen = first_hit != INT_MAX ? first_hit : kept - 1;  // target == total
    result = key_index(keys[chosen]);
  }

  // 3. Publish.
  if (tid == 0) {
    if (result >= 0) {
      for (int64_t b = 0; b < ids_count; ++b) ids[b] = result;
    }
    if (ring != nullptr) ring[i % ring_size] = result;
    if (c.candidates == 1) *step = i + 1;
  }
}

__global__ void advance_step_kernel(int64_t* step) {
  *step += 1;
}

}  // namespace

Status choose_token(const float* logits, const TokenChoice& choice, int64_t* step, uint64_t* rng,
                    int32_t* ids, int64_t ids_count, int32_t* ring, int64_t ring_size,
                    cudaStream_t stream) {
  TESSERA_RETURN_IF_ERROR(check_token_choice("cuda choose_token", logits, choice, step, rng, ids,
                                             ids_count, ring, ring_size));
  int sort_size = 1;
  while (sort_size < choice.codes) sort_size <<= 1;
  const size_t shared = choice.sampling.sample ? static_cast<size_t>(sort_size) * 8 : 0;
  if (shared > 48 * 1024) {
    // Above the default 48 KB of dynamic shared memory a kernel must opt in, once per device (so
    // that a recorded step, run eagerly once before, makes no such call while being captured).
    static std::atomic<size_t> opted_in[kMaxDevices];
    int device = 0;
    TESSERA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "choose_token: cudaGetDevice");
    std::atomic<size_t>* done = device >= 0 && device < kMaxDevices ? &opted_in[device] : nullptr;
    if (done == nullptr || done->load() < shared) {
      TESSERA_CUDA_RETURN_IF_ERROR(
          cudaFuncSetAttribute(choose_token_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(shared)),
          "choose_token: " + std::to_string(shared) + " bytes of shared memory for the sort");
      if (done != nullptr) done->store(shared);
    }
  }
  const unsigned blocks = static_cast<unsigned>(choice.candidates);
  choose_token_kernel<<<blocks, kThreads, shared, stream>>>(logits, choice, step, rng, ids,
                                                            ids_count, ring, ring_size, sort_size);
  TESSERA_CUDA_CHECK_LAUNCH("choose_token: kernel launch");
  if (choice.candidates > 1) {
    advance_step_kernel<<<1, 1, 0, stream>>>(step);
    TESSERA_CUDA_CHECK_LAUNCH("choose_token: step kernel launch");
  }
  return Status();
}

}  // namespace tessera::kernels::cuda
