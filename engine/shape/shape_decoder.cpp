#include "engine/shape/shape_decoder.h"

#include <cmath>
#include <regex>
#include <set>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/thread_pool.h"

namespace tessera::shape {
namespace {

constexpr double kPi = 3.14159265358979323846;

Expected<std::vector<int64_t>> shape_of(const SafeTensors& f, const std::string& name,
                                        size_t ndim) {
  const TensorInfo* t = f.find(name);
  if (t == nullptr)
    return not_found(f.path() + ": missing tensor '" + name + "' (shape tokenizer)");
  if (t->shape.size() != ndim) {
    return invalid_argument(f.path() + ": tensor '" + name + "' has shape " + t->shape_string() +
                            ", expected " + std::to_string(ndim) + " dimensions");
  }
  return t->shape;
}

const char* fourier_key(const SafeTensors& f) {
  for (const char* k :
       {"embedder.weight", "occupancy_decoder.embedder.weight", "encoder.embedder.weight"}) {
    if (f.contains(k)) return k;
  }
  return nullptr;
}

}  // namespace

Expected<ShapeDecoderConfig> infer_shape_decoder_config(const SafeTensors& f) {
  ShapeDecoderConfig c;
  TESSERA_ASSIGN_OR_RETURN(auto pos, shape_of(f, "decoder.positional_encodings", 2));
  c.num_latents = pos[0];
  c.width = pos[1];
  TESSERA_ASSIGN_OR_RETURN(auto qn, shape_of(f, "decoder.blocks.0.attn.q_norm.weight", 1));
  c.head_dim = qn[0];
  if (c.head_dim <= 0 || c.width % c.head_dim != 0) {
    return invalid_argument(f.path() + ": decoder.blocks.0.attn.q_norm.weight size " +
                            std::to_string(c.head_dim) + " does not divide width " +
                            std::to_string(c.width));
  }
  c.heads = c.width / c.head_dim;
  TESSERA_ASSIGN_OR_RETURN(auto cb, shape_of(f, "bottleneck.block.codebook.weight", 2));
  c.num_codes = cb[0];
  c.embed_dim = cb[1];
  const char* fk = fourier_key(f);
  if (fk == nullptr) {
    return not_found(f.path() +
                     ": missing Fourier weight (embedder.weight or "
                     "occupancy_decoder.embedder.weight or encoder.embedder.weight)");
  }
  TESSERA_ASSIGN_OR_RETURN(auto fw, shape_of(f, fk, 2));
  if (fw[0] != 3)
    return invalid_argument(f.path() + ": " + fk + " has " + std::to_string(fw[0]) +
                            " rows, expected 3");
  c.num_freqs = fw[1];
  std::set<int64_t> blocks;
  static const std::regex re(R"(^decoder\.blocks\.(\d+)\.)");
  for (const TensorInfo& t : f.tensors()) {
    std::smatch m;
    if (std::regex_search(t.name, m, re)) blocks.insert(std::stoll(m[1].str()));
  }
  c.layers = static_cast<int64_t>(blocks.size());
  if (c.layers == 0 || *blocks.rbegin() != c.layers - 1) {
    return invalid_argument(f.path() + ": decoder.blocks.* indices are not 0.." +
                            std::to_string(c.layers - 1));
  }
  TESSERA_ASSIGN_OR_RETURN(auto up, shape_of(f, "decoder.blocks.0.mlp.up_proj.weight", 2));
  c.mlp_hidden = up[0];
  return c;
}

std::vector<float> fourier_carrier(int64_t num_freqs) {
  std::vector<float> c(static_cast<size_t>(num_freqs));
  for (int64_t j = 0; j < num_freqs; ++j) {
    // torch.linspace in fp32: start + step * j (end exact at the last index).
    const float t =
        num_freqs == 1 ? 0.0f : static_cast<float>(j) / static_cast<float>(num_freqs - 1);
    const float down = 1.0f - t;
    const float base = std::pow(static_cast<float>(num_freqs) / 8.0f, down);
    c[static_cast<size_t>(j)] = (base + t) * 2.0f * static_cast<float>(kPi);
  }
  return c;
}

namespace {

// sincos for fp32 (Cephes sinf/cosf): x = k * pi/2 + r with |r| <= pi/4 by a three-part Cody-Waite
// reduction (kPio2A and kPio2B have few enough mantissa bits that k * kPio2A and k * kPio2B are
// exact for |k| < 2^13, i.e. |x| <= kMaxReducedArg), then minimax polynomials for sin and cos on r,
// and the quadrant k mod 4 picks and signs them.
constexpr float kTwoOverPi = 0.636619772367581343f;
constexpr float kPio2A = 1.5703125f;
constexpr float kPio2B = 4.837512969970703125e-4f;
constexpr float kPio2C = 7.54978995489188216e-8f;
constexpr float kMaxReducedArg = 8192.0f;
constexpr float kSin1 = -1.6666654611e-1f, kSin2 = 8.3321608736e-3f, kSin3 = -1.9515295891e-4f;
constexpr float kCos1 = 4.166664568298827e-2f, kCos2 = -1.388731625493765e-3f,
                kCos3 = 2.443315711809948e-5f;

inline void sincos_scalar(float x, float* s, float* c) {
  if (!(std::fabs(x) <= kMaxReducedArg)) {  // also NaN
    *s = std::sin(x);
    *c = std::cos(x);
    return;
  }
  const float k = std::nearbyint(x * kTwoOverPi);
  const float r = ((x - k * kPio2A) - k * kPio2B) - k * kPio2C;
  const float z = r * r;
  const float ps = r + r * z * (kSin1 + z * (kSin2 + z * kSin3));
  const float pc = 1.0f - 0.5f * z + z * z * (kCos1 + z * (kCos2 + z * kCos3));
  const int q = static_cast<int>(k) & 3;
  const float sv[4] = {ps, pc, -ps, -pc};
  const float cv[4] = {pc, -ps, -pc, ps};
  *s = sv[q];
  *c = cv[q];
}

// One point's embedding: the three coordinates, then for each axis d the cos and sin sums for
// frequencies j in [j_begin, F) (the SIMD path does [0, j_begin) itself).
inline void embed_point_scalar(const float* p, const float* weight, const float* cc,
                               const float* cs, int64_t F, int64_t j_begin, int d, float* o) {
  const float a = p[d] * static_cast<float>(0.5 * kPi);
  float sa, ca;
  sincos_scalar(a, &sa, &ca);
  for (int64_t j = j_begin; j < F; ++j) {
    float sf, cf;
    sincos_scalar(p[d] * weight[d * F + j], &sf, &cf);
    o[3 + d * F + j] = cf + (ca * cc[j] - sa * cs[j]);
    o[3 + 3 * F + d * F + j] = sf + (sa * cc[j] + ca * cs[j]);
  }
}

#if defined(__x86_64__) || defined(__i386__)
#define TESSERA_FOURIER_AVX2 1
__attribute__((target("avx2,fma"))) void embed_points_avx2(const float* points, int64_t begin,
                                                           int64_t end, const float* weight,
                                                           const float* cc, const float* cs,
                                                           int64_t F, float* out) {
  const int64_t dim = 3 + 6 * F, vec_end = F / 8 * 8;
  const __m256 two_over_pi = _mm256_set1_ps(kTwoOverPi), max_arg = _mm256_set1_ps(kMaxReducedArg);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 npa = _mm256_set1_ps(-kPio2A), npb = _mm256_set1_ps(-kPio2B),
               npc = _mm256_set1_ps(-kPio2C);
  const __m256 s1 = _mm256_set1_ps(kSin1), s2 = _mm256_set1_ps(kSin2), s3 = _mm256_set1_ps(kSin3);
  const __m256 c1 = _mm256_set1_ps(kCos1), c2 = _mm256_set1_ps(kCos2), c3 = _mm256_set1_ps(kCos3);
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  const __m256i i1 = _mm256_set1_epi32(1), i2 = _mm256_set1_epi32(2);
  for (int64_t i = begin; i < end; ++i) {
    const float* p = points + 3 * i;
    float* o = out + i * dim;
    o[0] = p[0];
    o[1] = p[1];
    o[2] = p[2];
    for (int d = 0; d < 3; ++d) {
      float sa_s, ca_s;
      sincos_scalar(p[d] * static_cast<float>(0.5 * kPi), &sa_s, &ca_s);
      const __m256 pv = _mm256_set1_ps(p[d]), sa = _mm256_set1_ps(sa_s), ca = _mm256_set1_ps(ca_s);
      const float* w = weight + d * F;
      float* oc = o + 3 + d * F;
      float* os = o + 3 + 3 * F + d * F;
      for (int64_t j = 0; j < vec_end; j += 8) {
        const __m256 x = _mm256_mul_ps(pv, _mm256_loadu_ps(w + j));
        const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, two_over_pi),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 r = _mm256_fmadd_ps(k, npa, x);
        r = _mm256_fmadd_ps(k, npb, r);
        r = _mm256_fmadd_ps(k, npc, r);
        const __m256 z = _mm256_mul_ps(r, r);
        __m256 ps = _mm256_fmadd_ps(_mm256_fmadd_ps(s3, z, s2), z, s1);
        ps = _mm256_fmadd_ps(_mm256_mul_ps(ps, z), r, r);
        __m256 pc = _mm256_fmadd_ps(_mm256_fmadd_ps(c3, z, c2), z, c1);
        pc = _mm256_fmadd_ps(_mm256_mul_ps(pc, z), z, _mm256_fnmadd_ps(half, z, one));
        // Quadrant q = k & 3: odd q swaps sin and cos; sin is negated for q in {2, 3}, cos for
        // q in {1, 2}.
        const __m256i q = _mm256_cvtps_epi32(k);
        const __m256 swap = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(q, i1), i1));
        const __m256 sin_sign = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(q, i2), 30));
        const __m256 cos_sign = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_and_si256(_mm256_add_epi32(q, i1), i2), 30));
        __m256 sf = _mm256_xor_ps(_mm256_blendv_ps(ps, pc, swap), sin_sign);
        __m256 cf = _mm256_xor_ps(_mm256_blendv_ps(pc, ps, swap), cos_sign);
        const __m256 big = _mm256_cmp_ps(_mm256_and_ps(x, abs_mask), max_arg, _CMP_NLE_UQ);
        if (_mm256_movemask_ps(big) != 0) {  // rare: huge weights or NaN points
          alignas(32) float xs[8], sv[8], cv[8];
          _mm256_store_ps(xs, x);
          _mm256_store_ps(sv, sf);
          _mm256_store_ps(cv, cf);
          for (int l = 0; l < 8; ++l) sincos_scalar(xs[l], &sv[l], &cv[l]);
          sf = _mm256_load_ps(sv);
          cf = _mm256_load_ps(cv);
        }
        const __m256 pcc = _mm256_loadu_ps(cc + j), pcs = _mm256_loadu_ps(cs + j);
        const __m256 cos_pm = _mm256_fmsub_ps(ca, pcc, _mm256_mul_ps(sa, pcs));
        const __m256 sin_pm = _mm256_fmadd_ps(sa, pcc, _mm256_mul_ps(ca, pcs));
        _mm256_storeu_ps(oc + j, _mm256_add_ps(cf, cos_pm));
        _mm256_storeu_ps(os + j, _mm256_add_ps(sf, sin_pm));
      }
      if (vec_end < F) embed_point_scalar(p, weight, cc, cs, F, vec_end, d, o);
    }
  }
}
#endif

}  // namespace

FourierEmbedder::FourierEmbedder(const float* weight, int64_t num_freqs)
    : weight_(weight), num_freqs_(num_freqs) {
  const std::vector<float> carrier = fourier_carrier(num_freqs);
  carrier_cos_.resize(carrier.size());
  carrier_sin_.resize(carrier.size());
  for (size_t j = 0; j < carrier.size(); ++j) {
    carrier_cos_[j] = static_cast<float>(std::cos(static_cast<double>(carrier[j])));
    carrier_sin_[j] = static_cast<float>(std::sin(static_cast<double>(carrier[j])));
  }
}

void FourierEmbedder::embed_range(const float* points, int64_t begin, int64_t end, float* out,
                                  bool simd) const {
  const int64_t F = num_freqs_;
#ifdef TESSERA_FOURIER_AVX2
  if (simd) {
    embed_points_avx2(points, begin, end, weight_, carrier_cos_.data(), carrier_sin_.data(), F,
                      out);
    return;
  }
#else
  (void)simd;
#endif
  for (int64_t i = begin; i < end; ++i) {
    const float* p = points + 3 * i;
    float* o = out + i * dim();
    for (int d = 0; d < 3; ++d) o[d] = p[d];
    for (int d = 0; d < 3; ++d) {
      embed_point_scalar(p, weight_, carrier_cos_.data(), carrier_sin_.data(), F, 0, d, o);
    }
  }
}

void FourierEmbedder::embed(const float* points, int64_t n, float* out) const {
  if (n <= 0) return;
  const CpuFeatures f = cpu_features();
  const bool simd = f.avx2 && f.fma;
  // ~0.3 us (SIMD) to ~2 us (scalar) per point at F = 128: 64 points amortise a pool hand-off.
  default_thread_pool().parallel_for(
      n, 64, [&](int64_t begin, int64_t end) { embed_range(points, begin, end, out, simd); });
}

void fourier_embed(const float* points, int64_t n, const float* weight, int64_t num_freqs,
                   float* out) {
  FourierEmbedder(weight, num_freqs).embed(points, n, out);
}

void fourier_embed_reference(const float* points, int64_t n, const float* weight, int64_t num_freqs,
                             float* out) {
  const std::vector<float> carrier = fourier_carrier(num_freqs);
  const int64_t dim = 3 + 6 * num_freqs, f3 = 3 * num_freqs;
  const float half_pi = static_cast<float>(0.5 * kPi);
  for (int64_t i = 0; i < n; ++i) {
    float* o = out + i * dim;
    for (int d = 0; d < 3; ++d) o[d] = points[3 * i + d];
    for (int d = 0; d < 3; ++d) {
      const float p = points[3 * i + d];
      for (int64_t j = 0; j < num_freqs; ++j) {
        const float fm = p * weight[d * num_freqs + j];
        const float pm = p * half_pi + carrier[static_cast<size_t>(j)];
        o[3 + d * num_freqs + j] = std::cos(fm) + std::cos(pm);
        o[3 + f3 + d * num_freqs + j] = std::sin(fm) + std::sin(pm);
      }
    }
  }
}

Expected<kernels::Weight> ShapeDecoder::weight(WeightStore& store, const std::string& name,
                                               int64_t rows, int64_t cols, int64_t row_offset,
                                               int64_t take_rows) {
  TESSERA_ASSIGN_OR_RETURN(kernels::Weight w, store.matrix(name, rows, cols));
  if (take_rows >= 0) {
    w.data = static_cast<const uint8_t*>(w.data) +
             row_offset * cols * static_cast<int64_t>(dtype_size(w.dtype));
    w.rows = take_rows;
  }
  storage_.emplace_back();
  return backend_.upload_weight(w, &storage_.back());
}

Expected<const float*> ShapeDecoder::vec(WeightStore& store, const std::string& name, int64_t n,
                                         int64_t offset, int64_t take) {
  TESSERA_ASSIGN_OR_RETURN(const float* p, store.f32(name, {n}));
  storage_.emplace_back();
  return backend_.upload_f32(p + offset, take >= 0 ? take : n, &storage_.back());
}

Expected<float*> ShapeDecoder::buffer(int64_t floats) {
  TESSERA_ASSIGN_OR_RETURN(
      kernels::DeviceBuffer b,
      backend_.allocate(static_cast<size_t>(std::max<int64_t>(floats, 1)) * 4));
  buffers_.push_back(std::move(b));
  return buffers_.back().as<float>();
}

Expected<std::unique_ptr<ShapeDecoder>> ShapeDecoder::load(WeightStore& store,
                                                           kernels::Backend& backend,
                                                           int64_t occupancy_chunk) {
  if (occupancy_chunk < 1) return invalid_argument("shape decoder: occupancy_chunk must be >= 1");
  std::unique_ptr<ShapeDecoder> d(new ShapeDecoder(backend));
  TESSERA_ASSIGN_OR_RETURN(d->config_, infer_shape_decoder_config(store.file()));
  d->chunk_ = occupancy_chunk;
  TESSERA_RETURN_IF_ERROR(d->load_weights(store));
  return d;
}

Status ShapeDecoder::load_weights(WeightStore& store) {
  const ShapeDecoderConfig& c = config_;
  const int64_t W = c.width, H = c.mlp_hidden, E = c.embed_dim;
  storage_.reserve(512);
  // Normalized codebook on the host, in fp32.
  {
    TESSERA_ASSIGN_OR_RETURN(const float* cb,
                             store.f32("bottleneck.block.codebook.weight", {c.num_codes, E}));
    TESSERA_ASSIGN_OR_RETURN(const float* cw, store.f32("bottleneck.block.cb_weight", {E}));
    TESSERA_ASSIGN_OR_RETURN(const float* cbias, store.f32("bottleneck.block.cb_bias", {E}));
    TESSERA_ASSIGN_OR_RETURN(const float* nw, store.f32("bottleneck.block.norm.weight", {E}));
    codebook_.resize(static_cast<size_t>(c.num_codes * E));
    for (int64_t r = 0; r < c.num_codes; ++r) {
      double ss = 0;
      float* row = codebook_.data() + r * E;
      for (int64_t e = 0; e < E; ++e) {
        row[e] = cb[r * E + e] * cw[e] + cbias[e];
        ss += static_cast<double>(row[e]) * row[e];
      }
      const float inv =
          1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(E)) + c.vq_norm_eps);
      for (int64_t e = 0; e < E; ++e) row[e] = row[e] * inv * nw[e];
    }
    codebook_w_ = kernels::Weight{codebook_.data(), DType::kF32, c.num_codes, E};
    storage_.emplace_back();
    TESSERA_ASSIGN_OR_RETURN(codebook_w_, backend_.upload_weight(codebook_w_, &storage_.back()));
  }
  TESSERA_ASSIGN_OR_RETURN(c_out_, weight(store, "bottleneck.block.c_out.weight", W, E));
  TESSERA_ASSIGN_OR_RETURN(c_out_bias_, vec(store, "bottleneck.block.c_out.bias", W));
  {
    TESSERA_ASSIGN_OR_RETURN(const float* pe,
                             store.f32("decoder.positional_encodings", {c.num_latents, W}));
    storage_.emplace_back();
    TESSERA_ASSIGN_OR_RETURN(positional_,
                             backend_.upload_f32(pe, c.num_latents * W, &storage_.back()));
  }
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "decoder.blocks." + std::to_string(l) + ".";
    Block b{};
    TESSERA_ASSIGN_OR_RETURN(b.q, weight(store, p + "attn.c_qk.weight", 2 * W, W, 0, W));
    TESSERA_ASSIGN_OR_RETURN(b.k, weight(store, p + "attn.c_qk.weight", 2 * W, W, W, W));
    TESSERA_ASSIGN_OR_RETURN(b.q_bias, vec(store, p + "attn.c_qk.bias", 2 * W, 0, W));
    TESSERA_ASSIGN_OR_RETURN(b.k_bias, vec(store, p + "attn.c_qk.bias", 2 * W, W, W));
    TESSERA_ASSIGN_OR_RETURN(b.v, weight(store, p + "attn.c_v.weight", W, W));
    TESSERA_ASSIGN_OR_RETURN(b.v_bias, vec(store, p + "attn.c_v.bias", W));
    TESSERA_ASSIGN_OR_RETURN(b.proj, weight(store, p + "attn.c_proj.weight", W, W));
    TESSERA_ASSIGN_OR_RETURN(b.proj_bias, vec(store, p + "attn.c_proj.bias", W));
    TESSERA_ASSIGN_OR_RETURN(b.q_norm, vec(store, p + "attn.q_norm.weight", c.head_dim));
    TESSERA_ASSIGN_OR_RETURN(b.k_norm, vec(store, p + "attn.k_norm.weight", c.head_dim));
    TESSERA_ASSIGN_OR_RETURN(b.up, weight(store, p + "mlp.up_proj.weight", H, W));
    TESSERA_ASSIGN_OR_RETURN(b.up_bias, vec(store, p + "mlp.up_proj.bias", H));
    TESSERA_ASSIGN_OR_RETURN(b.down, weight(store, p + "mlp.down_proj.weight", W, H));
    TESSERA_ASSIGN_OR_RETURN(b.down_bias, vec(store, p + "mlp.down_proj.bias", W));
    blocks_.push_back(b);
  }
  const std::string o = "occupancy_decoder.";
  const char* fk = fourier_key(store.file());
  TESSERA_ASSIGN_OR_RETURN(fourier_weight_, store.f32(fk, {3, c.num_freqs}));
  embedder_ = FourierEmbedder(fourier_weight_, c.num_freqs);
  TESSERA_ASSIGN_OR_RETURN(query_in1_,
                           weight(store, o + "query_in.in_layer.weight", W, c.fourier_dim()));
  TESSERA_ASSIGN_OR_RETURN(query_in1_bias_, vec(store, o + "query_in.in_layer.bias", W));
  TESSERA_ASSIGN_OR_RETURN(query_in2_, weight(store, o + "query_in.out_layer.weight", W, W));
  TESSERA_ASSIGN_OR_RETURN(query_in2_bias_, vec(store, o + "query_in.out_layer.bias", W));
  const std::string a = o + "attn_out.attn.";
  TESSERA_ASSIGN_OR_RETURN(cross_.q, weight(store, a + "c_q.weight", W, W));
  TESSERA_ASSIGN_OR_RETURN(cross_.q_bias, vec(store, a + "c_q.bias", W));
  TESSERA_ASSIGN_OR_RETURN(cross_.k, weight(store, a + "c_k.weight", W, W));
  TESSERA_ASSIGN_OR_RETURN(cross_.k_bias, vec(store, a + "c_k.bias", W));
  TESSERA_ASSIGN_OR_RETURN(cross_.v, weight(store, a + "c_v.weight", W, W));
  TESSERA_ASSIGN_OR_RETURN(cross_.v_bias, vec(store, a + "c_v.bias", W));
  TESSERA_ASSIGN_OR_RETURN(cross_.proj, weight(store, a + "c_proj.weight", W, W));
  TESSERA_ASSIGN_OR_RETURN(cross_.proj_bias, vec(store, a + "c_proj.bias", W));
  TESSERA_ASSIGN_OR_RETURN(cross_.up, weight(store, o + "attn_out.mlp.up_proj.weight", H, W));
  TESSERA_ASSIGN_OR_RETURN(cross_.up_bias, vec(store, o + "attn_out.mlp.up_proj.bias", H));
  TESSERA_ASSIGN_OR_RETURN(cross_.down, weight(store, o + "attn_out.mlp.down_proj.weight", W, H));
  TESSERA_ASSIGN_OR_RETURN(cross_.down_bias, vec(store, o + "attn_out.mlp.down_proj.bias", W));
  TESSERA_ASSIGN_OR_RETURN(ln_f_w_, vec(store, o + "ln_f.weight", W));
  TESSERA_ASSIGN_OR_RETURN(ln_f_b_, vec(store, o + "ln_f.bias", W));
  TESSERA_ASSIGN_OR_RETURN(head_, weight(store, o + "c_head.weight", 1, W));
  TESSERA_ASSIGN_OR_RETURN(head_bias_, vec(store, o + "c_head.bias", 1));

  const int64_t L = c.num_latents, C = chunk_;
  buffers_.reserve(32);
  TESSERA_ASSIGN_OR_RETURN(ids_buf_, buffer(L));
  TESSERA_ASSIGN_OR_RETURN(x_, buffer(L * W));
  TESSERA_ASSIGN_OR_RETURN(h_, buffer(L * W));
  TESSERA_ASSIGN_OR_RETURN(q_, buffer(L * W));
  TESSERA_ASSIGN_OR_RETURN(k_, buffer(L * W));
  TESSERA_ASSIGN_OR_RETURN(v_, buffer(L * W));
  TESSERA_ASSIGN_OR_RETURN(att_, buffer(L * W));
  TESSERA_ASSIGN_OR_RETURN(mlp_, buffer(L * H));
  TESSERA_ASSIGN_OR_RETURN(emb_, buffer(C * c.fourier_dim()));
  TESSERA_ASSIGN_OR_RETURN(qx_, buffer(C * W));
  TESSERA_ASSIGN_OR_RETURN(qh_, buffer(C * W));
  TESSERA_ASSIGN_OR_RETURN(qq_, buffer(C * W));
  TESSERA_ASSIGN_OR_RETURN(qatt_, buffer(C * W));
  TESSERA_ASSIGN_OR_RETURN(qmlp_, buffer(C * H));
  TESSERA_ASSIGN_OR_RETURN(lat_, buffer(L * W));
  TESSERA_ASSIGN_OR_RETURN(lk_, buffer(L * W));
  TESSERA_ASSIGN_OR_RETURN(lv_, buffer(L * W));
  TESSERA_ASSIGN_OR_RETURN(logit_, buffer(C));
  if (backend_.device() != Device::kCpu) {
    embed_host_.resize(static_cast<size_t>(C * c.fourier_dim()));
  }
  if (backend_.extraction() != nullptr) {
    // Fourier features on the device where the backend has them (its extraction facet): the
    // frequencies and the carrier's cos/sin (as FourierEmbedder rounds them) go up once; a chunk
    // then uploads its points (12 bytes each) instead of their features (4 (3 + 6 F) bytes each).
    std::vector<float> carrier_cs(static_cast<size_t>(2 * c.num_freqs));
    const std::vector<float> carrier = fourier_carrier(c.num_freqs);
    for (int64_t j = 0; j < c.num_freqs; ++j) {
      carrier_cs[static_cast<size_t>(j)] =
          static_cast<float>(std::cos(static_cast<double>(carrier[static_cast<size_t>(j)])));
      carrier_cs[static_cast<size_t>(c.num_freqs + j)] =
          static_cast<float>(std::sin(static_cast<double>(carrier[static_cast<size_t>(j)])));
    }
    storage_.emplace_back();
    TESSERA_ASSIGN_OR_RETURN(
        fourier_freqs_dev_,
        backend_.upload_f32(fourier_weight_, 3 * c.num_freqs, &storage_.back()));
    storage_.emplace_back();
    TESSERA_ASSIGN_OR_RETURN(
        carrier_cs_dev_, backend_.upload_f32(carrier_cs.data(), 2 * c.num_freqs, &storage_.back()));
    TESSERA_ASSIGN_OR_RETURN(points_dev_, buffer(C * 3));
    device_embed_ = true;
  }
  return Status();
}

Status ShapeDecoder::decode_tokens(const int32_t* ids, int64_t n, float* latents,
                                   std::vector<std::vector<float>>* layer_outputs) {
  const ShapeDecoderConfig& c = config_;
  if (n < 1 || n > c.num_latents) {
    return invalid_argument("shape decoder: " + std::to_string(n) + " tokens, expected 1.." +
                            std::to_string(c.num_latents));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= c.num_codes) {
      return invalid_argument("shape decoder: token " + std::to_string(i) + " has id " +
                              std::to_string(ids[i]) + ", outside the codebook [0, " +
                              std::to_string(c.num_codes) + ")");
    }
  }
  const int64_t W = c.width, H = c.mlp_hidden;
  kernels::Backend& be = backend_;
  auto snapshot = [&](const float* src) -> Status {
    if (layer_outputs == nullptr) return Status();
    layer_outputs->emplace_back(static_cast<size_t>(n * W));
    return be.download(layer_outputs->back().data(), src, static_cast<size_t>(n * W) * 4);
  };
  if (layer_outputs != nullptr) layer_outputs->clear();
  int32_t* id_dev = reinterpret_cast<int32_t*>(ids_buf_);
  TESSERA_RETURN_IF_ERROR(be.upload(id_dev, ids, static_cast<size_t>(n) * 4));
  TESSERA_RETURN_IF_ERROR(be.embedding_gather(codebook_w_, id_dev, n, h_));  // [n, E]
  TESSERA_RETURN_IF_ERROR(be.linear(h_, n, c_out_, c_out_bias_, x_));        // z
  TESSERA_RETURN_IF_ERROR(be.add(x_, positional_, x_, n * W));
  TESSERA_RETURN_IF_ERROR(snapshot(x_));
  const kernels::AttentionShape as = kernels::contiguous_attention(
      1, c.heads, n, n, c.head_dim, false, 1.0f / std::sqrt(static_cast<float>(c.head_dim)));
  for (const Block& b : blocks_) {
    TESSERA_RETURN_IF_ERROR(be.layer_norm(x_, nullptr, nullptr, h_, n, W, c.ln_eps));
    TESSERA_RETURN_IF_ERROR(be.linear(h_, n, b.q, b.q_bias, q_));
    TESSERA_RETURN_IF_ERROR(be.linear(h_, n, b.k, b.k_bias, k_));
    TESSERA_RETURN_IF_ERROR(be.linear(h_, n, b.v, b.v_bias, v_));
    TESSERA_RETURN_IF_ERROR(be.rms_norm(q_, b.q_norm, q_, n * c.heads, c.head_dim, c.qk_norm_eps));
    TESSERA_RETURN_IF_ERROR(be.rms_norm(k_, b.k_norm, k_, n * c.heads, c.head_dim, c.qk_norm_eps));
    TESSERA_RETURN_IF_ERROR(be.attention(q_, k_, v_, att_, as));
    TESSERA_RETURN_IF_ERROR(be.linear(att_, n, b.proj, b.proj_bias, h_));
    TESSERA_RETURN_IF_ERROR(be.add(x_, h_, x_, n * W));
    TESSERA_RETURN_IF_ERROR(be.layer_norm(x_, nullptr, nullptr, h_, n, W, c.ln_eps));
    TESSERA_RETURN_IF_ERROR(be.linear(h_, n, b.up, b.up_bias, mlp_));
    TESSERA_RETURN_IF_ERROR(be.gelu_erf(mlp_, mlp_, n * H));
    TESSERA_RETURN_IF_ERROR(be.linear(mlp_, n, b.down, b.down_bias, h_));
    TESSERA_RETURN_IF_ERROR(be.add(x_, h_, x_, n * W));
    TESSERA_RETURN_IF_ERROR(snapshot(x_));
  }
  return be.download(latents, x_, static_cast<size_t>(n * W) * 4);
}

Status ShapeDecoder::set_latents(const float* latents, int64_t num_latents_used) {
  const ShapeDecoderConfig& c = config_;
  if (num_latents_used < 1 || num_latents_used > c.num_latents) {
    return invalid_argument("shape decoder: " + std::to_string(num_latents_used) +
                            " latents, expected 1.." + std::to_string(c.num_latents));
  }
  const int64_t W = c.width, n = num_latents_used;
  kernels::Backend& be = backend_;
  TESSERA_RETURN_IF_ERROR(be.upload(lat_, latents, static_cast<size_t>(n * W) * 4));
  TESSERA_RETURN_IF_ERROR(be.layer_norm(lat_, nullptr, nullptr, lat_, n, W, c.ln_eps));
  TESSERA_RETURN_IF_ERROR(be.linear(lat_, n, cross_.k, cross_.k_bias, lk_));
  TESSERA_RETURN_IF_ERROR(be.linear(lat_, n, cross_.v, cross_.v_bias, lv_));
  latents_ready_ = n;
  return Status();
}

Status ShapeDecoder::query_chunk(const float* points, int64_t n, float* logits) {
  const ShapeDecoderConfig& c = config_;
  const int64_t W = c.width, H = c.mlp_hidden, F = c.fourier_dim();
  kernels::Backend& be = backend_;
  bool embedded = false;
  if (be.device() == Device::kCpu) {
    embedder_.embed(points, n, emb_);  // CPU backend memory is host memory: no staging copy
    embedded = true;
  } else if (device_embed_) {
    TESSERA_RETURN_IF_ERROR(be.upload(points_dev_, points, static_cast<size_t>(n * 3) * 4));
    TESSERA_RETURN_IF_ERROR(be.extraction()->fourier_embed(points_dev_, n, fourier_freqs_dev_,
                                                           carrier_cs_dev_, c.num_freqs, emb_));
    embedded = true;
  }
  if (!embedded) {
    embedder_.embed(points, n, embed_host_.data());
    TESSERA_RETURN_IF_ERROR(be.upload(emb_, embed_host_.data(), static_cast<size_t>(n * F) * 4));
  }
  TESSERA_RETURN_IF_ERROR(be.linear(emb_, n, query_in1_, query_in1_bias_, qh_));
  TESSERA_RETURN_IF_ERROR(be.silu(qh_, qh_, n * W));
  TESSERA_RETURN_IF_ERROR(be.linear(qh_, n, query_in2_, query_in2_bias_, qx_));
  TESSERA_RETURN_IF_ERROR(be.layer_norm(qx_, nullptr, nullptr, qh_, n, W, c.ln_eps));
  TESSERA_RETURN_IF_ERROR(be.linear(qh_, n, cross_.q, cross_.q_bias, qq_));
  kernels::AttentionShape as =
      kernels::contiguous_attention(1, c.heads, n, latents_ready_, c.head_dim, false,
                                    1.0f / std::sqrt(static_cast<float>(c.head_dim)));
  // bf16 checkpoints: the query layers already run in bf16 (cpu::linear's bf16 GEMM), so the
  // cross-attention may too (f32 checkpoints stay exact: the parity tests' tolerance).
  as.allow_bf16 = cross_.q.dtype == DType::kBF16;
  TESSERA_RETURN_IF_ERROR(be.attention(qq_, lk_, lv_, qatt_, as));
  TESSERA_RETURN_IF_ERROR(be.linear(qatt_, n, cross_.proj, cross_.proj_bias, qh_));
  TESSERA_RETURN_IF_ERROR(be.add(qx_, qh_, qx_, n * W));
  TESSERA_RETURN_IF_ERROR(be.layer_norm(qx_, nullptr, nullptr, qh_, n, W, c.ln_eps));
  TESSERA_RETURN_IF_ERROR(be.linear(qh_, n, cross_.up, cross_.up_bias, qmlp_));
  TESSERA_RETURN_IF_ERROR(be.gelu_erf(qmlp_, qmlp_, n * H));
  TESSERA_RETURN_IF_ERROR(be.linear(qmlp_, n, cross_.down, cross_.down_bias, qh_));
  TESSERA_RETURN_IF_ERROR(be.add(qx_, qh_, qx_, n * W));
  TESSERA_RETURN_IF_ERROR(be.layer_norm(qx_, ln_f_w_, ln_f_b_, qh_, n, W, c.ln_eps));
  TESSERA_RETURN_IF_ERROR(be.linear(qh_, n, head_, head_bias_, logit_));
  return be.download(logits, logit_, static_cast<size_t>(n) * 4);
}

Status ShapeDecoder::query(const float* points, int64_t num_points, float* logits) {
  if (latents_ready_ == 0) return invalid_argument("shape decoder: query before set_latents");
  for (int64_t begin = 0; begin < num_points; begin += chunk_) {
    const int64_t n = std::min(chunk_, num_points - begin);
    TESSERA_RETURN_IF_ERROR(query_chunk(points + 3 * begin, n, logits + begin));
  }
  return Status();
}

Status ShapeDecoder::occupancy(const float* latents, int64_t num_latents_used, const float* points,
                               int64_t num_points, float* logits) {
  TESSERA_RETURN_IF_ERROR(set_latents(latents, num_latents_used));
  return query(points, num_points, logits);
}

}  // namespace tessera::shape
