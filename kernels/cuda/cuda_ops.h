// The CUDA backend of the op interface (kernels/ops.h): the same ops and argument conventions as
// TESSERA_DECLARE_HOST_OPS, with device pointers and a trailing stream.
//
// Contract (every op below):
// - Every pointer is device memory (x, y, bias, weights, ids, positions, workspace), except the
//   Weight / AttentionShape structs themselves, which are read on the host. Weight::data points to
//   device memory.
// - Ops are asynchronous on `stream` (nullptr = the legacy default stream) and allocate nothing.
// They
//   return a non-ok Status, whose message names the op, when the arguments are rejected
//   (unsupported dtype or head_dim, size beyond what a launch can address, workspace too small) or
//   when the launch itself fails (cudaGetLastError). Errors raised while a kernel runs (e.g. an
//   illegal address) surface at the next synchronisation, as always with CUDA.
// - Activations are f32; weights f32 or bf16; accumulation is f32 (the reference accumulates in
//   double, so results differ by accumulation order only).
// - Argument validation happens before any CUDA call, so a rejected call never touches the device.
// - linear() on more than kGemvMaxRows rows with f32 or bf16 weights uses cuBLAS through a handle
// created
//   lazily per host thread and device (the first such call on a thread must not be inside a CUDA
//   graph capture: run one eager step first).
//
// Usable from plain C++ without the CUDA headers: cudaStream_t is forward-declared exactly as
// CUDA's driver_types.h declares it, so including both in either order is fine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kernels/marching_tets.h"
#include "kernels/ops.h"
#include "kernels/sampling.h"

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;  // as driver_types.h declares it

namespace tessera::kernels::cuda {

// linear() takes the GEMV kernel (one warp per output feature, weights read once) up to this many
// rows, and a GEMM (cuBLAS for f32 weights, a shared-memory tiled kernel for bf16 and int8 weights)
// above. 16 = the decode step of 8 candidates with guidance, as on the CPU (kMaxGemvRows): every
// row's sum has the same order of additions whatever the other rows, so a candidate's logits, and
// so its tokens, do not depend on how many candidates are decoded with it; a GEMM for
// 5-8 guided candidates would sum in another order than a lone generation's GEMV.
inline constexpr int64_t kGemvMaxRows = 16;
// Largest head_dim the attention kernels handle.
inline constexpr int64_t kAttentionMaxHeadDim = 256;

// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n] if bias != nullptr); n = w.rows, k = w.cols.
// w.dtype must be kF32, kBF16 or kI8 (with w.scales on the device, one per w.group weights along a
// row, w.group dividing k: kernels/int8.h). With bf16 weights x is rounded to bf16 first (the
// ops.h contract) on every path: the GEMV, and above it cuBLAS's bf16 GEMM on the tensor cores
// (f32 accumulation; the tiled kernel when its x scratch cannot be had). The int8 GEMM converts
// the weights to f32 in shared memory; the f32 GEMM uses cublasSgemm with CUBLAS_DEFAULT_MATH.
// TF32 tensor-core products for the calling thread's later cuBLAS calls (cuda::linear's f32 GEMM,
// the diffusion convolutions and attention products): operands rounded to TF32 (10 explicit
// mantissa bits, bf16 has 7), f32 accumulation. Off by default (f32 accuracy). The CUDA backend
// switches it on around im2col convolutions only (PyTorch's default: TF32 in convolutions,
// torch.backends.cudnn.allow_tf32, not in matmuls). The custom kernels (GEMV, the bf16-weight
// tiled GEMM, attention) are unaffected.
void set_tf32_products(bool on);
bool tf32_products();

Status linear(const float* x, int64_t m, const Weight& w, const float* bias, float* y,
              cudaStream_t stream);
// linear() with x already in bf16 (bit patterns, m x w.cols, e.g. an im2col block written in bf16)
// and bf16 weights: cuBLAS's bf16 GEMM on the tensor cores at any m (f32 sums and output), then
// the bias. The same contract as linear()'s bf16 path over the rounded x.
Status linear_bf16_x(const uint16_t* xb, int64_t m, const Weight& w, const float* bias, float* y,
                     cudaStream_t stream);
// linear() for each part over the same x; the GEMV sizes (m <= kGemvMaxRows) of up to 4 f32 or
// bf16 parts with one k run as one kernel launch (the decode step's q/k/v and gate/up), with the
// results of separate calls (each feature's sum is computed the same way).
Status linear_multi(const float* x, int64_t m, const LinearPart* parts, int64_t n_parts,
                    cudaStream_t stream);
// Backend::linear_swiglu for the GEMV sizes (m <= kGemvMaxRows, f32 or bf16 weights of one
// shape, 16-byte aligned rows): one kernel writing only y. False (nothing launched) for any other
// case: the caller takes linear_multi + swiglu.
Expected<bool> linear_swiglu(const float* x, int64_t m, const Weight& gate, const float* gate_bias,
                             const Weight& up, const float* up_bias, float* y, cudaStream_t stream);

// LayerNorm over the last dim (two-pass mean/variance); weight/bias may be null. In place OK.
Status layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows,
                  int64_t dim, float eps, cudaStream_t stream);
// x += t; h = LayerNorm(x) without affine, one kernel (Backend::add_layer_norm); h must not alias
// x or t.
Status add_layer_norm(float* x, const float* t, float* h, int64_t rows, int64_t dim, float eps,
                      cudaStream_t stream);

// RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight (weight may be null). In place OK.
Status rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps,
                cudaStream_t stream);

// In-place rotary embedding, interleaved pairs (2i, 2i+1) rotated by pos * theta^(-2i/head_dim), on
// x[t*token_stride + h*head_dim + d]; positions[t] (device) is token t's position. An odd head_dim
// leaves each head's last element unchanged; elements outside the heads (token_stride >
// heads*head_dim) are not touched.
Status rope_interleaved(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                        int64_t token_stride, const int32_t* positions, float theta,
                        cudaStream_t stream);

// rms_norm over the rows of head_dim of x ([tokens][heads][head_dim], contiguous), in place, then,
// when positions is not null, rope_interleaved (token stride heads * head_dim), in one kernel:
// Backend::rms_norm_rope. The row's sum of squares is a warp reduction (rms_norm's is a block
// reduction: results agree to float rounding).
Status rms_norm_rope(float* x, const float* weight, int64_t tokens, int64_t heads, int64_t head_dim,
                     float eps, const int32_t* positions, float theta, cudaStream_t stream);
// rms_norm_rope of q (q_weight) and k (k_weight), same shapes and positions, in one launch.
Status rms_norm_rope_pair(float* q, const float* q_weight, float* k, const float* k_weight,
                          int64_t tokens, int64_t heads, int64_t head_dim, float eps,
                          const int32_t* positions, float theta, cudaStream_t stream);

// Backend::fourier_embed (the shape decoder's query features) on the device.
Status fourier_embed(const float* points, int64_t n, const float* freqs, const float* carrier_cs,
                     int64_t num_freqs, float* out, cudaStream_t stream);

// Row-wise softmax over cols; a row of only -inf (fully masked) becomes zeros. In place OK.
Status softmax(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);

// Elementwise; in place OK. gelu_erf is exact GELU, gelu_tanh the tanh approximation.
Status silu(const float* x, float* y, int64_t n, cudaStream_t stream);
Status gelu_erf(const float* x, float* y, int64_t n, cudaStream_t stream);
Status gelu_tanh(const float* x, float* y, int64_t n, cudaStream_t stream);
// quick_gelu(x) = x * sigmoid(1.702 x) (CLIP's activation). In place OK.
Status quick_gelu(const float* x, float* y, int64_t n, cudaStream_t stream);
// y = a + b elementwise over n (residual connections). y may alias a or b.
Status add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream);
// y = silu(gate) * up, elementwise over n. y may alias gate or up.
Status swiglu(const float* gate, const float* up, float* y, int64_t n, cudaStream_t stream);
// x rows are [value (hidden) | gate (hidden)]; y[r, i] = value * gelu_erf(gate). y is [rows,
// hidden] and must not alias x.
Status geglu(const float* x, float* y, int64_t rows, int64_t hidden, cudaStream_t stream);

// Flash-style attention (one block per (query tile, head, batch), keys and values streamed through
// shared-memory tiles, online softmax; Dao et al. 2022, "FlashAttention"). Layout and causal rule
// as in AttentionShape; head_dim 1..kAttentionMaxHeadDim. o must not alias q/k/v. A query that sees
// no key (causal with kv_len < q_len) gets a zero output row.
Status attention(const float* q, const float* k, const float* v, float* o, const AttentionShape& s,
                 cudaStream_t stream);

// Bytes of device scratch attention_decode() needs for this shape (depends on batch, heads, kv_len
// and head_dim). Callers allocate it once (for the largest kv_len they will use: a smaller kv_len
// never needs more) and pass it to every call, so decode allocates nothing. Its first 16 KiB are
// the fused combine's arrival counters, the same place for every shape: the workspace must be
// zero there before its first use (cudaMemset it to 0 when allocated), and every call leaves
// them zero, so one workspace serves calls of any shape.
size_t attention_decode_workspace_bytes(const AttentionShape& s);

// Single-query attention (s.q_len must be 1) by split-KV ("flash-decoding", Dao et al. 2023): the
// keys are cut into splits processed by separate blocks, which write partial (max, sum, output) to
// `workspace`; the last block of each (batch, head) to finish merges them (a second kernel for the
// head sizes the vector kernel does not take). `workspace` (device, 4-byte aligned) must hold
// attention_decode_workspace_bytes(s) bytes; `workspace_bytes` is its size, checked. The causal
// flag does not restrict anything here (the single query is the last position and sees every key).
Status attention_decode(const float* q, const float* k, const float* v, float* o,
                        const AttentionShape& s, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream);

// attention_decode over a bf16 K/V cache (kernels/ops.h: attention_decode_bf16kv): k and v hold
// bf16 bit patterns, widened exactly to f32 as they are loaded, and q is rounded to bf16 (nearest
// even); scores, softmax and accumulation are f32, so the result equals attention_decode of the
// rounded q over the widened K/V up to summation order. Same
// split-KV scheme, workspace (attention_decode_workspace_bytes) and argument checks as
// attention_decode.
Status attention_decode_bf16kv(const float* q, const uint16_t* k, const uint16_t* v, float* o,
                               const AttentionShape& s, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream);

// The two decode attentions with the number of keys read from device memory when the kernel runs
// (for a decode step captured once in a CUDA graph and replayed as the cache grows): the first
// clamp(*step + kv_len_offset, 0, s.kv_len) keys are used (the GPT's dual blocks: step + cond_len +
// 1, its single blocks: step + 1); s.kv_len is the capacity, which sets the split geometry and the
// workspace size (attention_decode_workspace_bytes(s)). No key in use gives a zero output.
Status attention_decode_device_len(const float* q, const float* k, const float* v, float* o,
                                   const AttentionShape& s, const int64_t* step,
                                   int64_t kv_len_offset, void* workspace, size_t workspace_bytes,
                                   cudaStream_t stream);
Status attention_decode_bf16kv_device_len(const float* q, const uint16_t* k, const uint16_t* v,
                                          float* o, const AttentionShape& s, const int64_t* step,
                                          int64_t kv_len_offset, void* workspace,
                                          size_t workspace_bytes, cudaStream_t stream);

// Writes rows[b] (f32, row_elems floats at rows + b * row_elems) into a K/V cache at slot
// (slot_offset + *slot) of batch row b: cache + b * cache_batch_stride + slot * row_elems,
// elements of cache_dtype (kF32: copied; kBF16: rounded to nearest even, bit-identical to
// convert_f32_to_bf16). *slot is read when the kernel runs, so a captured decode step appends at
// the current position on every replay. The caller keeps slot_offset + *slot within the cache.
Status store_kv_rows(void* cache, DType cache_dtype, const float* rows, int64_t batch,
                     int64_t row_elems, int64_t cache_batch_stride, int64_t slot_offset,
                     const int64_t* slot, cudaStream_t stream);
// store_kv_rows of K and V (same shapes) in one launch.
Status store_kv_pair(void* k_cache, void* v_cache, DType cache_dtype, const float* k_rows,
                     const float* v_rows, int64_t batch, int64_t row_elems,
                     int64_t cache_batch_stride, int64_t slot_offset, const int64_t* slot,
                     cudaStream_t stream);

// positions[r * len + t] = *step + offset + t for r < rows, t < len (int32): rope_interleaved's
// positions in a captured step (a decode step: len 1, every batch row at the same position).
Status set_positions(int32_t* positions, int64_t rows, int64_t len, const int64_t* step,
                     int64_t offset, cudaStream_t stream);

// dst[i] = bf16(src[i]) for i < n: round to nearest even, NaN stays a quiet NaN (bit-identical to
// core/dtype.h's f32_to_bf16). dst must not overlap src. n <= 0 is a no-op.
Status convert_f32_to_bf16(uint16_t* dst, const float* src, int64_t n, cudaStream_t stream);
// dst[i] = f32(src[i]) (exact) for i < n. dst must not overlap src. n <= 0 is a no-op.
Status convert_bf16_to_f32(float* dst, const uint16_t* src, int64_t n, cudaStream_t stream);

// out[i, :] = table row ids[i] (f32 or bf16 table, f32 out). Callers validate ids; an id outside
// [0, table.rows) (a caller bug) yields a NaN row instead of an out-of-bounds read.
Status embedding_gather(const Weight& table, const int32_t* ids, int64_t n, float* out,
                        cudaStream_t stream);

// ---- Guidance mix + next token, fused (kernels/cuda/sampling.cu) -------------------------------
// The shape engine's per-token choice on the device, so a decode step needs no host round trip:
// one block mixes the guidance, checks the logits and picks the token, with the same semantics as
// engine/shape/generator.cpp (the mix) and engine/shape/sampler.cpp (greedy, or temperature ->
// top-k -> softmax in double -> top-p -> one draw of xoshiro256**), the step counter and the RNG
// state in device memory.
// TokenChoice, kChooseTokenMaxCodes, kTokenAllNegInf: kernels/sampling.h (shared with the CPU
// backend's choose_token_host, the same contract on host memory).
// Reads *step (device int64: this token's index i) and the logits of step i, writes the choice to
// ids[0, ids_count) (the next step's input ids, one per batch row; left unchanged on an error
// code), to ring[i % ring_size] when ring is not null (it may be host-mapped pinned memory: the
// host sees tokens a few steps behind without a synchronisation), and sets *step = i + 1. rng
// (device, 4 x uint64) holds the xoshiro256** words of shape::Xoshiro256(seed).state() and is
// advanced once per sampled token, as the host sampler does. Floating-point notes: the mix and
// the candidates' order are bit-identical to the host's; the softmax's double sums are parallel
// prefix sums (the host sums in order), so a sampled token can differ from the host's only where
// the draw falls within a few ulps of a boundary. Several candidates (TokenChoice::candidates):
// one block each, over its own rows, RNG words, ids share and ring (kernels/sampling.h), then one
// more launch advances *step.
Status choose_token(const float* logits, const TokenChoice& choice, int64_t* step, uint64_t* rng,
                    int32_t* ids, int64_t ids_count, int32_t* ring, int64_t ring_size,
                    cudaStream_t stream);

// ---- Marching tetrahedra over surface cells (kernels/cuda/marching.cu)
// ---------------------------- kernels::cpu::polygonize_cells' contract and result (same vertex
// order: edge keys; positions may differ from the host's in the last bit where the compiler
// contracts to FMA), from and to host memory: uploads the cells and corners, counts + scans, emits,
// welds (cub radix sort of the corner slots by edge key, stable), downloads the mesh. Synchronises
// `stream` (twice for sizes, once at the end). Device scratch: about 40 bytes per cell and 28 per
// triangle corner; an allocation failure is kOutOfMemory naming the buffer.
Status polygonize_cells(const CellGrid& grid, const int64_t* cells, const float* corners, int64_t n,
                        std::vector<float>* positions, std::vector<uint32_t>* triangles,
                        cudaStream_t stream);

}  // namespace tessera::kernels::cuda
