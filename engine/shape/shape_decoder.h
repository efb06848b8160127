// Shape tokenizer decode path of Cube 3D ("OneDAutoEncoder", docs/cube3d.md): shape token ids ->
// latents (codebook lookup, c_out, positional encodings, bidirectional transformer), and occupancy
// logits of query points given the latents (phase-modulated Fourier embedding, query_in MLP, one
// cross-attention layer, MLP, ln_f, c_head).
//
// Config is inferred from tensor shapes (positional encodings -> latents and width, q_norm ->
// head_dim, block indices -> layers, codebook -> codes and embed dim, embedder weight ->
// frequencies); every tensor is checked by name and shape at load, and errors name the tensor and
// the file. Weights are owned by the WeightStore (which must outlive the decoder) and uploaded
// through the Backend; all activation buffers are allocated once at load for num_latents tokens and
// chunks of `occupancy_chunk` points, so decoding and queries allocate nothing. Chunks should be
// thousands of points (the default 8192) so that the query MLP's linear layers run as real GEMMs
// rather than thin matrix products; the chunk's Fourier embedding is written straight into the
// backend buffer when that is host memory. Not thread-safe: one decoder serves one thread at a
// time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/weights/weight_store.h"
#include "kernels/backend.h"

namespace tessera::shape {

struct ShapeDecoderConfig {
  int64_t width = 768;
  int64_t heads = 12;
  int64_t head_dim = 64;
  int64_t num_latents = 1024;
  int64_t num_codes = 16384;
  int64_t embed_dim = 32;
  int64_t num_freqs = 128;
  int64_t layers = 24;
  int64_t mlp_hidden = 3072;
  float ln_eps = 1e-6f;
  float qk_norm_eps = 1e-5f;
  float vq_norm_eps = 1e-5f;
  int64_t fourier_dim() const { return 3 * (2 * num_freqs + 1); }
};

// Infers the config from the tensors of a shape tokenizer file (encoder tensors optional).
Expected<ShapeDecoderConfig> infer_shape_decoder_config(const SafeTensors& file);

// Phase-modulated Fourier embedding (fp32; the weights are high-frequency, so no lower precision):
// out[n * (3 + 6F)] = [p0, p1, p2, cos(fm) + cos(pm) (3F), sin(fm) + sin(pm) (3F)] with
// fm[d*F + j] = p_d * weight[d, j], pm[d*F + j] = p_d * pi/2 + carrier_j. weight is [3, F].
//
// FourierEmbedder is the fast version used by the decoder: the carrier's cos/sin are tabulated
// once, cos(pm)/sin(pm) come from the angle-addition formulas (one sincos of p_d * pi/2 per point
// and axis), and sincos(fm) is a Cody-Waite reduction + minimax polynomial (Cephes sinf/cosf, ~1
// ulp) vectorised with AVX2+FMA when cpu_features() allows (a scalar loop of the same algorithm
// otherwise: the off switch). Arguments beyond |x| > 8192 (where the 3-part reduction loses bits)
// and NaN fall back to std::sin/std::cos. Points are spread over default_thread_pool(). Against
// fourier_embed_reference (libm on the fp32 arguments, what PyTorch computes) the difference is a
// few 1e-6 absolute: pm is not rounded to fp32 before its cos/sin (an fp32 pm near 100 rad carries
// up to 4e-6 rad of rounding error, so the fast path is the closer one to the exact value).
class FourierEmbedder {
 public:
  FourierEmbedder() = default;
  // `weight` [3, num_freqs] host fp32 must outlive the embedder; num_freqs >= 1.
  FourierEmbedder(const float* weight, int64_t num_freqs);

  int64_t num_freqs() const { return num_freqs_; }
  int64_t dim() const { return 3 + 6 * num_freqs_; }
  // points: host [n, 3]; out: host [n, dim()]. Thread-safe (const; uses the default pool).
  void embed(const float* points, int64_t n, float* out) const;

 private:
  void embed_range(const float* points, int64_t begin, int64_t end, float* out, bool simd) const;

  const float* weight_ = nullptr;
  int64_t num_freqs_ = 0;
  std::vector<float> carrier_cos_,
      carrier_sin_;  // cos/sin of the fp32 carrier, rounded from double
};

// One-shot FourierEmbedder (tables built per call).
void fourier_embed(const float* points, int64_t n, const float* weight, int64_t num_freqs,
                   float* out);
// The plain reference: libm cos/sin of the fp32 fm and pm, single-threaded (tests compare the fast
// path with it).
void fourier_embed_reference(const float* points, int64_t n, const float* weight, int64_t num_freqs,
                             float* out);
// carrier_j = ((F/8)^linspace(1,0,F)_j + linspace(0,1,F)_j) * 2 pi (fixed, not stored in files).
std::vector<float> fourier_carrier(int64_t num_freqs);

class ShapeDecoder {
 public:
  static constexpr int64_t kDefaultOccupancyChunk = 8192;

  // `store` and `backend` must outlive the decoder.
  static Expected<std::unique_ptr<ShapeDecoder>> load(
      WeightStore& store, kernels::Backend& backend,
      int64_t occupancy_chunk = kDefaultOccupancyChunk);

  const ShapeDecoderConfig& config() const { return config_; }
  // RMSNorm(codebook * cb_weight + cb_bias) * norm.weight, [num_codes, embed_dim], host f32.
  const std::vector<float>& normalized_codebook() const { return codebook_; }

  // ids[0..n) (n <= num_latents) -> latents, host [n, width]. Ids >= num_codes or < 0:
  // kInvalidArgument naming the position. If `layer_outputs` is not null it receives the decoder
  // input (z + positional encodings) and then the output of every block, each [n, width].
  Status decode_tokens(const int32_t* ids, int64_t n, float* latents,
                       std::vector<std::vector<float>>* layer_outputs = nullptr);

  // Occupancy logits of `num_points` points (host [num_points, 3], inside [-1.05, 1.05]^3) given
  // latents (host [num_latents_used, width], from decode_tokens). Evaluated in chunks of
  // occupancy_chunk points; the latents' keys/values are computed once per call.
  Status occupancy(const float* latents, int64_t num_latents_used, const float* points,
                   int64_t num_points, float* logits);

  // The same with the keys/values of the latents prepared once (set_latents) for many calls
  // (extraction queries in batches).
  Status set_latents(const float* latents, int64_t num_latents_used);
  Status query(const float* points, int64_t num_points, float* logits);

  // The learned Fourier weight [3, num_freqs] (host).
  const float* fourier_weight() const { return fourier_weight_; }

 private:
  struct Block {
    kernels::Weight q, k, v, proj, up, down;
    const float *q_bias, *k_bias, *v_bias, *proj_bias, *up_bias, *down_bias;
    const float *q_norm, *k_norm;
  };
  ShapeDecoder(kernels::Backend& backend) : backend_(backend) {}
  Status load_weights(WeightStore& store);
  Expected<kernels::Weight> weight(WeightStore& store, const std::string& name, int64_t rows,
                                   int64_t cols, int64_t row_offset = 0, int64_t take_rows = -1);
  Expected<const float*> vec(WeightStore& store, const std::string& name, int64_t n,
                             int64_t offset = 0, int64_t take = -1);
  Expected<float*> buffer(int64_t floats);
  Status query_chunk(const float* points, int64_t n, float* logits);

  kernels::Backend& backend_;
  ShapeDecoderConfig config_;
  int64_t chunk_ = 0;
  std::vector<kernels::DeviceBuffer> storage_;  // uploaded weights (empty on the CPU backend)
  std::vector<kernels::DeviceBuffer> buffers_;  // activations
  std::vector<float> codebook_;
  const float* fourier_weight_ = nullptr;
  FourierEmbedder embedder_;
  std::vector<float> embed_host_;  // staging for backends whose memory is not host memory
  // Device Fourier features (ExtractionOps::fourier_embed) where the backend has them.
  bool device_embed_ = false;
  const float* fourier_freqs_dev_ = nullptr;  // [3][num_freqs]
  const float* carrier_cs_dev_ = nullptr;     // cos [num_freqs], then sin [num_freqs]
  float* points_dev_ = nullptr;               // [chunk][3]

  kernels::Weight codebook_w_{}, c_out_{};
  const float* c_out_bias_ = nullptr;
  const float* positional_ = nullptr;  // backend memory [num_latents, width]
  std::vector<Block> blocks_;
  kernels::Weight query_in1_{}, query_in2_{};
  const float *query_in1_bias_ = nullptr, *query_in2_bias_ = nullptr;
  Block cross_{};  // q/k/v/proj + up/down; no q/k norm
  const float *ln_f_w_ = nullptr, *ln_f_b_ = nullptr;
  kernels::Weight head_{};
  const float* head_bias_ = nullptr;

  // Activation buffers (backend memory).
  float *ids_buf_ = nullptr, *x_ = nullptr, *h_ = nullptr, *q_ = nullptr, *k_ = nullptr,
        *v_ = nullptr, *att_ = nullptr, *mlp_ = nullptr;
  float *emb_ = nullptr, *qx_ = nullptr, *qh_ = nullptr, *qq_ = nullptr, *qatt_ = nullptr,
        *qmlp_ = nullptr, *lat_ = nullptr, *lk_ = nullptr, *lv_ = nullptr, *logit_ = nullptr;
  int64_t latents_ready_ = 0;
};

}  // namespace tessera::shape
