#include "engine/shape/shape_decoder.h"

#include <cmath>
#include <regex>
#include <set>
#include <string>

namespace tessera::shape {
namespace {

constexpr double kPi = 3.14159265358979323846;

Expected<std::vector<int64_t>> shape_of(const SafeTensors& f, const std::string& name, size_t ndim) {
  const TensorInfo* t = f.find(name);
  if (t == nullptr) return not_found(f.path() + ": missing tensor '" + name + "' (shape tokenizer)");
  if (t->shape.size() != ndim) {
    return invalid_argument(f.path() + ": tensor '" + name + "' has shape " + t->shape_string() +
                            ", expected " + std::to_string(ndim) + " dimensions");
  }
  return t->shape;
}

const char* fourier_key(const SafeTensors& f) {
  for (const char* k : {"embedder.weight", "occupancy_decoder.embedder.weight", "encoder.embedder.weight"}) {
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
                            std::to_string(c.head_dim) + " does not divide width " + std::to_string(c.width));
  }
  c.heads = c.width / c.head_dim;
  TESSERA_ASSIGN_OR_RETURN(auto cb, shape_of(f, "bottleneck.block.codebook.weight", 2));
  c.num_codes = cb[0];
  c.embed_dim = cb[1];
  const char* fk = fourier_key(f);
  if (fk == nullptr) {
    return not_found(f.path() + ": missing Fourier weight (embedder.weight or "
                     "occupancy_decoder.embedder.weight or encoder.embedder.weight)");
  }
  TESSERA_ASSIGN_OR_RETURN(auto fw, shape_of(f, fk, 2));
  if (fw[0] != 3) return invalid_argument(f.path() + ": " + fk + " has " + std::to_string(fw[0]) + " rows, expected 3");
  c.num_freqs = fw[1];
  std::set<int64_t> blocks;
  static const std::regex re(R"(^decoder\.blocks\.(\d+)\.)");
  for (const TensorInfo& t : f.tensors()) {
    std::smatch m;
    if (std::regex_search(t.name, m, re)) blocks.insert(std::stoll(m[1].str()));
  }
  c.layers = static_cast<int64_t>(blocks.size());
  if (c.layers == 0 || *blocks.rbegin() != c.layers - 1) {
    return invalid_argument(f.path() + ": decoder.blocks.* indices are not 0.." + std::to_string(c.layers - 1));
  }
  TESSERA_ASSIGN_OR_RETURN(auto up, shape_of(f, "decoder.blocks.0.mlp.up_proj.weight", 2));
  c.mlp_hidden = up[0];
  return c;
}

std::vector<float> fourier_carrier(int64_t num_freqs) {
  std::vector<float> c(static_cast<size_t>(num_freqs));
  for (int64_t j = 0; j < num_freqs; ++j) {
    // torch.linspace in fp32: start + step * j (end exact at the last index).
    const float t = num_freqs == 1 ? 0.0f : static_cast<float>(j) / static_cast<float>(num_freqs - 1);
    const float down = 1.0f - t;
    const float base = std::pow(static_cast<float>(num_freqs) / 8.0f, down);
    c[static_cast<size_t>(j)] = (base + t) * 2.0f * static_cast<float>(kPi);
  }
  return c;
}

void fourier_embed(const float* points, int64_t n, const float* weight, int64_t num_freqs, float* out) {
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

Expected<kernels::Weight> ShapeDecoder::weight(WeightStore& store, const std::string& name, int64_t rows,
                                               int64_t cols, int64_t row_offset, int64_t take_rows) {
  TESSERA_ASSIGN_OR_RETURN(kernels::Weight w, store.matrix(name, rows, cols));
  if (take_rows >= 0) {
    w.data = static_cast<const uint8_t*>(w.data) + row_offset * cols * static_cast<int64_t>(dtype_size(w.dtype));
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
  TESSERA_ASSIGN_OR_RETURN(kernels::DeviceBuffer b, backend_.allocate(static_cast<size_t>(std::max<int64_t>(floats, 1)) * 4));
  buffers_.push_back(std::move(b));
  return buffers_.back().as<float>();
}

Expected<std::unique_ptr<ShapeDecoder>> ShapeDecoder::load(WeightStore& store, kernels::Backend& backend,
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
    TESSERA_ASSIGN_OR_RETURN(const float* cb, store.f32("bottleneck.block.codebook.weight", {c.num_codes, E}));
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
      const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(E)) + c.vq_norm_eps);
      for (int64_t e = 0; e < E; ++e) row[e] = row[e] * inv * nw[e];
    }
    codebook_w_ = kernels::Weight{codebook_.data(), DType::kF32, c.num_codes, E};
    storage_.emplace_back();
    TESSERA_ASSIGN_OR_RETURN(codebook_w_, backend_.upload_weight(codebook_w_, &storage_.back()));
  }
  TESSERA_ASSIGN_OR_RETURN(c_out_, weight(store, "bottleneck.block.c_out.weight", W, E));
  TESSERA_ASSIGN_OR_RETURN(c_out_bias_, vec(store, "bottleneck.block.c_out.bias", W));
  {
    TESSERA_ASSIGN_OR_RETURN(const float* pe, store.f32("decoder.positional_encodings", {c.num_latents, W}));
    storage_.emplace_back();
    TESSERA_ASSIGN_OR_RETURN(positional_, backend_.upload_f32(pe, c.num_latents * W, &storage_.back()));
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
  TESSERA_ASSIGN_OR_RETURN(query_in1_, weight(store, o + "query_in.in_layer.weight", W, c.fourier_dim()));
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
  embed_host_.resize(static_cast<size_t>(C * c.fourier_dim()));
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
      return invalid_argument("shape decoder: token " + std::to_string(i) + " has id " + std::to_string(ids[i]) +
                              ", outside the codebook [0, " + std::to_string(c.num_codes) + ")");
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
  TESSERA_RETURN_IF_ERROR(be.embedding_gather(codebook_w_, id_dev, n, h_));   // [n, E]
  TESSERA_RETURN_IF_ERROR(be.linear(h_, n, c_out_, c_out_bias_, x_));          // z
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
    return invalid_argument("shape decoder: " + std::to_string(num_latents_used) + " latents, expected 1.." +
                            std::to_string(c.num_latents));
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
  fourier_embed(points, n, fourier_weight_, c.num_freqs, embed_host_.data());
  TESSERA_RETURN_IF_ERROR(be.upload(emb_, embed_host_.data(), static_cast<size_t>(n * F) * 4));
  TESSERA_RETURN_IF_ERROR(be.linear(emb_, n, query_in1_, query_in1_bias_, qh_));
  TESSERA_RETURN_IF_ERROR(be.silu(qh_, qh_, n * W));
  TESSERA_RETURN_IF_ERROR(be.linear(qh_, n, query_in2_, query_in2_bias_, qx_));
  TESSERA_RETURN_IF_ERROR(be.layer_norm(qx_, nullptr, nullptr, qh_, n, W, c.ln_eps));
  TESSERA_RETURN_IF_ERROR(be.linear(qh_, n, cross_.q, cross_.q_bias, qq_));
  kernels::AttentionShape as = kernels::contiguous_attention(
      1, c.heads, n, latents_ready_, c.head_dim, false, 1.0f / std::sqrt(static_cast<float>(c.head_dim)));
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
