#include "engine/shape/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "kernels/int8.h"

namespace tessera::shape {

using kernels::Backend;
using kernels::DeviceBuffer;
using kernels::Weight;

// ---- normalized codebook ----------------------------------------------------------------------

NormalizedCodebook normalize_codebook(const float* codebook, int64_t rows, int64_t dim,
                                      const float* cb_weight, const float* cb_bias,
                                      const float* norm_weight, float eps) {
  NormalizedCodebook out;
  out.rows = rows;
  out.dim = dim;
  out.values.resize(static_cast<size_t>(rows * dim));
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out.values.data() + r * dim;
    double sum_sq = 0;
    for (int64_t d = 0; d < dim; ++d) {
      o[d] = codebook[r * dim + d] * cb_weight[d] + cb_bias[d];
      sum_sq += static_cast<double>(o[d]) * o[d];
    }
    const float inv = 1.0f / std::sqrt(static_cast<float>(sum_sq / static_cast<double>(dim)) + eps);
    for (int64_t d = 0; d < dim; ++d) o[d] = o[d] * inv * norm_weight[d];
  }
  return out;
}

Expected<NormalizedCodebook> load_normalized_codebook(const SafeTensors& tokenizer) {
  const std::string cb_name = "bottleneck.block.codebook.weight";
  const TensorInfo* info = tokenizer.find(cb_name);
  if (!info) return not_found(tokenizer.path() + ": missing tensor '" + cb_name + "'");
  if (info->shape.size() != 2 || info->shape[0] < 1 || info->shape[1] < 1) {
    return corrupt_data(tokenizer.path() + ": tensor '" + cb_name + "' has shape " +
                        info->shape_string() + ", expected [codes, dim]");
  }
  const int64_t rows = info->shape[0], dim = info->shape[1];
  std::vector<float> codebook(static_cast<size_t>(rows * dim));
  TESSERA_RETURN_IF_ERROR(tokenizer.load_f32(cb_name, codebook.data(), codebook.size()));
  std::vector<float> vecs[3];
  const char* names[3] = {"bottleneck.block.cb_weight", "bottleneck.block.cb_bias",
                          "bottleneck.block.norm.weight"};
  for (int i = 0; i < 3; ++i) {
    const TensorInfo* vi = tokenizer.find(names[i]);
    if (!vi) return not_found(tokenizer.path() + ": missing tensor '" + names[i] + "'");
    if (vi->shape != std::vector<int64_t>{dim}) {
      return corrupt_data(tokenizer.path() + ": tensor '" + names[i] + "' has shape " +
                          vi->shape_string() + ", expected [" + std::to_string(dim) + "]");
    }
    vecs[i].resize(static_cast<size_t>(dim));
    TESSERA_RETURN_IF_ERROR(tokenizer.load_f32(names[i], vecs[i].data(), vecs[i].size()));
  }
  return normalize_codebook(codebook.data(), rows, dim, vecs[0].data(), vecs[1].data(),
                            vecs[2].data());
}

// ---- loading ------------------------------------------------------------------------------------

// Builds a CubeGpt's weights: checks each tensor, converts where needed, hands them to the backend.
class GptLoader {
 public:
  GptLoader(const SafeTensors& file, Backend& backend, CubeGpt& model, bool bf16)
      : file_(file), backend_(backend), model_(model), bf16_(bf16) {}
  void set_int8(bool on) { int8_ = on; }

  // allow_i8: matrices of a quantized file (engine/runtime/quantize.h) may be I8.
  Status check_dtype(const TensorInfo& info, bool allow_i8 = false) const {
    if (info.dtype == DType::kI8 && allow_i8) return {};
    if (info.dtype != DType::kF32 && info.dtype != DType::kBF16 && info.dtype != DType::kF16) {
      return unsupported(file_.path() + ": tensor '" + info.name + "' has dtype " +
                         dtype_name(info.dtype) + "; expected F32, BF16 or F16" +
                         (allow_i8 ? " (or I8 with scales)" : ""));
    }
    return {};
  }

  Expected<const TensorInfo*> lookup(const std::string& name, const std::vector<int64_t>& shape,
                                     bool allow_i8 = false) {
    const TensorInfo* info = file_.find(name);
    if (!info) return not_found(file_.path() + ": missing tensor '" + name + "'");
    if (info->shape != shape) {
      return corrupt_data(file_.path() + ": tensor '" + name + "' has shape " +
                          info->shape_string() + ", expected " + shape_to_string(shape));
    }
    TESSERA_RETURN_IF_ERROR(check_dtype(*info, allow_i8));
    return info;
  }

  Expected<Weight> int8_weight(const int8_t* q, std::vector<float> scales, int64_t rows,
                               int64_t cols, int64_t group) {
    model_.host_f32_.push_back(std::move(scales));
    model_.int8_weights_ = true;
    Weight host{q, DType::kI8, rows, cols, model_.host_f32_.back().data(), group};
    return upload(host);
  }

  // An I8 matrix of a quantized file and its NAME_scale tensor (kernels/int8.h's file format),
  // checked: the scales [rows, groups] with groups dividing cols into groups of a multiple of 32,
  // every scale finite and > 0, every weight in [-127, 127]. Errors name the tensor.
  Expected<Weight> stored_int8(const std::string& name, int64_t rows, int64_t cols) {
    const std::string scale_name = name + kernels::kInt8ScaleSuffix;
    const std::string where = file_.path() + ": int8 tensor '" + name + "'";
    const TensorInfo* s = file_.find(scale_name);
    if (!s) return corrupt_data(where + " has no scales (missing tensor '" + scale_name + "')");
    if (s->dtype != DType::kF32 && s->dtype != DType::kBF16 && s->dtype != DType::kF16) {
      return corrupt_data(file_.path() + ": tensor '" + scale_name + "' has dtype " +
                          dtype_name(s->dtype) + "; scales must be F32 (or F16/BF16)");
    }
    if (s->shape.size() != 2 || s->shape[0] != rows || s->shape[1] < 1) {
      return corrupt_data(file_.path() + ": tensor '" + scale_name + "' has shape " +
                          s->shape_string() + ", expected [" + std::to_string(rows) +
                          ", groups] for the int8 weight '" + name + "' of shape [" +
                          std::to_string(rows) + ", " + std::to_string(cols) + "]");
    }
    const int64_t groups = s->shape[1];
    if (cols % groups != 0) {
      return corrupt_data(file_.path() + ": tensor '" + scale_name + "' has " +
                          std::to_string(groups) + " groups per row, which do not divide the " +
                          std::to_string(cols) + " weights of a row of '" + name + "'");
    }
    const int64_t group = cols / groups;
    if (group % 32 != 0) {
      return unsupported(where + " uses groups of " + std::to_string(group) +
                         " weights; Tessera's int8 kernels take groups that are a multiple of 32");
    }
    std::vector<float> scales(static_cast<size_t>(rows * groups));
    TESSERA_RETURN_IF_ERROR(file_.load_f32(scale_name, scales.data(), scales.size()));
    for (size_t i = 0; i < scales.size(); ++i) {
      if (!(std::isfinite(scales[i]) && scales[i] > 0.0f)) {
        const int64_t r = static_cast<int64_t>(i) / groups, g = static_cast<int64_t>(i) % groups;
        return corrupt_data(
            file_.path() + ": tensor '" + scale_name + "' holds " +
            (std::isnan(scales[i]) ? std::string("NaN") : std::to_string(scales[i])) + " at [" +
            std::to_string(r) + ", " + std::to_string(g) +
            "]; int8 scales must be finite and positive");
      }
    }
    // The mapped bytes are the weights (zero-copy on the CPU backend; a device backend copies).
    TESSERA_ASSIGN_OR_RETURN(TensorView view, file_.view(name));
    const auto* q = static_cast<const int8_t*>(view.data);
    const int64_t bad = kernels::int8_find_out_of_range(q, rows * cols);
    if (bad >= 0) {
      return corrupt_data(where + " holds -128 at [" + std::to_string(bad / cols) + ", " +
                          std::to_string(bad % cols) +
                          "]; int8 weights are symmetric, in [-127, 127]");
    }
    file_.drop_pages(name);  // checked; read again from the page cache by the first job
    return int8_weight(q, std::move(scales), rows, cols, group);
  }

  // A [rows, cols] matrix in the model's weight dtype, on the backend: int8 when the file stores
  // it so, or when GptLoadOptions::int8 asks (and the matrix is int8_quantizable).
  Expected<Weight> matrix(const std::string& name, int64_t rows, int64_t cols) {
    TESSERA_ASSIGN_OR_RETURN(const TensorInfo* info, lookup(name, {rows, cols}, true));
    if (info->dtype == DType::kI8) return stored_int8(name, rows, cols);
    if (file_.contains(name + kernels::kInt8ScaleSuffix)) {
      return corrupt_data(file_.path() + ": unexpected tensor '" + name +
                          kernels::kInt8ScaleSuffix + "': '" + name + "' is " +
                          dtype_name(info->dtype) + ", not an int8 weight");
    }
    TESSERA_ASSIGN_OR_RETURN(TensorView view, file_.view(name));
    if (int8_ && kernels::int8_quantizable(cols)) {  // quantized once here (kernels/int8.h)
      const size_t n = static_cast<size_t>(rows * cols);
      std::vector<float> f32(n);
      TESSERA_RETURN_IF_ERROR(file_.load_f32(name, f32.data(), n));
      file_.drop_pages(name);
      const int64_t group = kernels::int8_group_for(cols);
      std::vector<int8_t> q(n);
      std::vector<float> scales(static_cast<size_t>(rows * (cols / group)));
      kernels::quantize_int8_rows(f32.data(), rows, cols, group, q.data(), scales.data());
      model_.host_i8_.push_back(std::move(q));
      return int8_weight(model_.host_i8_.back().data(), std::move(scales), rows, cols, group);
    }
    const DType target = (bf16_ || info->dtype == DType::kBF16) ? DType::kBF16 : DType::kF32;
    Weight host{view.data, target, rows, cols};
    if (info->dtype != target || !info->aligned) {
      const size_t n = static_cast<size_t>(rows * cols);
      std::vector<float> f32(n);
      TESSERA_RETURN_IF_ERROR(file_.load_f32(name, f32.data(), n));
      file_.drop_pages(name);  // converted: the mapped bytes are not read again
      if (target == DType::kF32) {
        model_.host_f32_.push_back(std::move(f32));
        host.data = model_.host_f32_.back().data();
      } else {
        std::vector<uint16_t> b(n);
        convert_f32_to_bf16(f32.data(), b.data(), n);
        model_.host_u16_.push_back(std::move(b));
        host.data = model_.host_u16_.back().data();
      }
    }
    return upload(host);
  }

  Expected<Weight> upload(const Weight& host) {
    DeviceBuffer storage;
    TESSERA_ASSIGN_OR_RETURN(Weight w, backend_.upload_weight(host, &storage));
    if (storage.data()) model_.device_.push_back(std::move(storage));
    return w;
  }

  // An f32 vector of n values on the backend.
  Expected<const float*> vec(const std::string& name, int64_t n) {
    TESSERA_ASSIGN_OR_RETURN(const TensorInfo* info, lookup(name, {n}));
    const float* host = nullptr;
    if (info->dtype == DType::kF32 && info->aligned) {
      TESSERA_ASSIGN_OR_RETURN(TensorView view, file_.view(name));
      host = view.as<const float>();
    } else {
      TESSERA_ASSIGN_OR_RETURN(auto values, file_.to_f32(name));
      model_.host_f32_.push_back(std::move(values));
      host = model_.host_f32_.back().data();
    }
    return upload_f32(host, n);
  }

  Expected<const float*> upload_f32(const float* host, int64_t n) {
    DeviceBuffer storage;
    TESSERA_ASSIGN_OR_RETURN(const float* p, backend_.upload_f32(host, n, &storage));
    if (storage.data()) model_.device_.push_back(std::move(storage));
    return p;
  }

  Expected<detail::GptLinear> linear(const std::string& prefix, int64_t out, int64_t in,
                                     bool bias) {
    detail::GptLinear l;
    TESSERA_ASSIGN_OR_RETURN(l.w, matrix(prefix + ".weight", out, in));
    if (condition_) model_.condition_matrices_.push_back(prefix + ".weight");
    if (bias) {
      TESSERA_ASSIGN_OR_RETURN(l.bias, vec(prefix + ".bias", out));
    } else if (file_.contains(prefix + ".bias")) {
      return corrupt_data(file_.path() + ": unexpected tensor '" + prefix +
                          ".bias' (this layer has no bias in Cube 3D)");
    }
    return l;
  }

  // Splits a [2d, d] c_qk weight into its q (rows 0..d-1) and k (rows d..2d-1) halves.
  static void split_qk(const Weight& qk, Weight* q, Weight* k) {
    const int64_t d = qk.cols;
    *q = qk;
    q->rows = d;
    *k = *q;
    k->data =
        static_cast<const char*>(qk.data) + d * d * static_cast<int64_t>(dtype_size(qk.dtype));
    if (qk.dtype == DType::kI8) k->scales = qk.scales + d * (d / qk.group);  // rows d.. of scales
  }

  Expected<detail::GptPreAttention> pre_attention(const std::string& p, bool query) {
    const GptConfig& c = model_.config_;
    detail::GptPreAttention pre;
    pre.query = query;
    if (query) {
      TESSERA_ASSIGN_OR_RETURN(auto qk, linear(p + ".c_qk", 2 * c.n_embd, c.n_embd, false));
      split_qk(qk.w, &pre.q.w, &pre.k.w);
      TESSERA_ASSIGN_OR_RETURN(pre.q_norm, vec(p + ".q_norm.weight", c.head_dim));
    } else {
      TESSERA_ASSIGN_OR_RETURN(pre.k, linear(p + ".c_k", c.n_embd, c.n_embd, true));
    }
    TESSERA_ASSIGN_OR_RETURN(pre.k_norm, vec(p + ".k_norm.weight", c.head_dim));
    TESSERA_ASSIGN_OR_RETURN(pre.v, linear(p + ".c_v", c.n_embd, c.n_embd, true));
    return pre;
  }

  Status mlp(const std::string& p, detail::GptPostAttention* post) {
    const GptConfig& c = model_.config_;
    TESSERA_ASSIGN_OR_RETURN(post->gate, linear(p + ".gate_proj", c.mlp_hidden, c.n_embd, true));
    TESSERA_ASSIGN_OR_RETURN(post->up, linear(p + ".up_proj", c.mlp_hidden, c.n_embd, true));
    TESSERA_ASSIGN_OR_RETURN(post->down, linear(p + ".down_proj", c.n_embd, c.mlp_hidden, true));
    return {};
  }

  Expected<detail::GptPostAttention> post_attention(const std::string& p) {
    detail::GptPostAttention post;
    TESSERA_ASSIGN_OR_RETURN(
        post.c_proj, linear(p + ".c_proj", model_.config_.n_embd, model_.config_.n_embd, true));
    TESSERA_RETURN_IF_ERROR(mlp(p + ".mlp", &post));
    return post;
  }

  // wte with rows 0..K-1 = shape_proj(codebook), the rest from the file.
  Status token_table(const NormalizedCodebook& codebook) {
    const GptConfig& c = model_.config_;
    const int64_t k = c.codebook_size, d = c.n_embd;
    TESSERA_ASSIGN_OR_RETURN(auto proj, linear("shape_proj", d, c.shape_embed_dim, true));
    TESSERA_RETURN_IF_ERROR(lookup("transformer.wte.weight", {c.vocab_size, d}).status());
    // shape_proj on the backend (805 M multiply-adds at full size), result back to the host.
    TESSERA_ASSIGN_OR_RETURN(DeviceBuffer cb,
                             backend_.allocate(codebook.values.size() * sizeof(float)));
    TESSERA_ASSIGN_OR_RETURN(DeviceBuffer rows,
                             backend_.allocate(static_cast<size_t>(k * d) * sizeof(float)));
    TESSERA_RETURN_IF_ERROR(backend_.upload(cb.data(), codebook.values.data(), cb.bytes()));
    TESSERA_RETURN_IF_ERROR(
        backend_.linear(cb.as<float>(), k, proj.w, proj.bias, rows.as<float>()));
    std::vector<float> table(static_cast<size_t>(c.vocab_size * d));
    TESSERA_RETURN_IF_ERROR(backend_.download(table.data(), rows.data(), rows.bytes()));
    std::vector<float> wte(table.size());
    TESSERA_RETURN_IF_ERROR(file_.load_f32("transformer.wte.weight", wte.data(), wte.size()));
    std::copy(wte.begin() + k * d, wte.end(), table.begin() + k * d);
    Weight host{nullptr, model_.weight_dtype_, c.vocab_size, d};
    if (model_.weight_dtype_ == DType::kBF16) {
      std::vector<uint16_t> b(table.size());
      convert_f32_to_bf16(table.data(), b.data(), b.size());
      model_.host_u16_.push_back(std::move(b));
      host.data = model_.host_u16_.back().data();
    } else {
      model_.host_f32_.push_back(std::move(table));
      host.data = model_.host_f32_.back().data();
    }
    TESSERA_ASSIGN_OR_RETURN(model_.weights_.wte, upload(host));
    return {};
  }

  Status load_all(const NormalizedCodebook& codebook) {
    const GptConfig& c = model_.config_;
    detail::GptWeights& w = model_.weights_;
    const int64_t d = c.n_embd;
    condition_ = true;  // the condition stream's matrices: read by the prefill only
    TESSERA_ASSIGN_OR_RETURN(w.text_proj, linear("text_proj", d, c.text_embed_dim, true));
    if (c.use_bbox) {
      TESSERA_ASSIGN_OR_RETURN(w.bbox_proj, linear("bbox_proj", d, 3, true));
    }
    condition_ = false;
    TESSERA_RETURN_IF_ERROR(token_table(codebook));
    TESSERA_ASSIGN_OR_RETURN(w.lm_head, matrix("lm_head.weight", c.vocab_size, d));
    for (int64_t i = 0; i < c.n_dual; ++i) {
      const std::string p = "transformer.dual_blocks." + std::to_string(i);
      detail::GptDualBlock b;
      b.cond_pre_only = i == c.n_dual - 1;
      TESSERA_ASSIGN_OR_RETURN(b.pre_x, pre_attention(p + ".attn.pre_x", true));
      condition_ = true;
      TESSERA_ASSIGN_OR_RETURN(b.pre_c, pre_attention(p + ".attn.pre_c", !b.cond_pre_only));
      condition_ = false;
      TESSERA_ASSIGN_OR_RETURN(b.post_1, post_attention(p + ".post_1"));
      if (!b.cond_pre_only) {
        condition_ = true;
        TESSERA_ASSIGN_OR_RETURN(b.post_2, post_attention(p + ".post_2"));
        condition_ = false;
      }
      w.dual.push_back(b);
    }
    for (int64_t i = 0; i < c.n_single; ++i) {
      const std::string p = "transformer.single_blocks." + std::to_string(i);
      detail::GptSingleBlock b;
      TESSERA_ASSIGN_OR_RETURN(b.attn, pre_attention(p + ".attn", true));
      TESSERA_ASSIGN_OR_RETURN(b.post.c_proj, linear(p + ".attn.c_proj", d, d, true));
      TESSERA_RETURN_IF_ERROR(mlp(p + ".mlp", &b.post));
      w.single.push_back(b);
    }
    return {};
  }

 private:
  const SafeTensors& file_;
  Backend& backend_;
  CubeGpt& model_;
  bool bf16_;
  bool int8_ = false;
  bool condition_ = false;  // loading the condition stream (CubeGpt::condition_matrices_)
};

CubeGpt::~CubeGpt() = default;

int64_t CubeGpt::decode_weight_bytes() const {
  // int8: one byte per weight plus an f32 scale per group (128 for the full-size model's widths).
  if (int8_weights_) return config_.decode_weight_elements() * 33 / 32;
  return config_.decode_weight_elements() * static_cast<int64_t>(dtype_size(weight_dtype_));
}

void CubeGpt::release_condition_pages() const {
  if (file_ == nullptr) return;
  for (const std::string& name : condition_matrices_) file_->drop_pages(name);
}

void CubeGpt::release_weight_pages() const {
  if (file_ != nullptr) file_->drop_all_pages();
}

Expected<std::unique_ptr<CubeGpt>> CubeGpt::load(const SafeTensors& file,
                                                 const NormalizedCodebook& codebook,
                                                 Backend& backend, const GptLoadOptions& options) {
  std::unique_ptr<CubeGpt> model(new CubeGpt());
  TESSERA_ASSIGN_OR_RETURN(model->config_, infer_gpt_config(file));
  const GptConfig& c = model->config_;
  if (codebook.rows != c.codebook_size || codebook.dim != c.shape_embed_dim) {
    return invalid_argument(
        file.path() + ": the GPT expects a codebook of " + std::to_string(c.codebook_size) + " x " +
        std::to_string(c.shape_embed_dim) + " (vocabulary " + std::to_string(c.vocab_size) +
        " - 3), the shape tokenizer has " + std::to_string(codebook.rows) + " x " +
        std::to_string(codebook.dim) + ": GPT and shape tokenizer do not match");
  }
  const TensorInfo* wte = file.find("transformer.wte.weight");
  model->backend_ = &backend;
  model->file_ = &file;
  model->weight_dtype_ =
      (options.bf16 || (wte && wte->dtype == DType::kBF16)) ? DType::kBF16 : DType::kF32;
  // Pointers into the host_* inner vectors are handed out while the outer vectors grow: moving an
  // inner vector keeps its buffer, so they stay valid.
  GptLoader loader(file, backend, *model, options.bf16);
  loader.set_int8(options.int8);
  TESSERA_RETURN_IF_ERROR(loader.load_all(codebook));
  return model;
}

// ---- session ------------------------------------------------------------------------------------

GptSession::~GptSession() = default;

Expected<std::unique_ptr<GptSession>> GptSession::create(const CubeGpt& model, int64_t max_batch,
                                                         int64_t max_shape_tokens,
                                                         const GptSessionOptions& options) {
  if (max_batch < 1 || max_shape_tokens < 1) {
    return invalid_argument("GptSession: batch " + std::to_string(max_batch) +
                            " and shape tokens " + std::to_string(max_shape_tokens) +
                            " must be >= 1");
  }
  const DType kv_dtype =
      options.kv_dtype.value_or(model.weight_dtype() == DType::kBF16 ? DType::kBF16 : DType::kF32);
  if (kv_dtype != DType::kF32 && kv_dtype != DType::kBF16) {
    return invalid_argument(std::string("GptSession: K/V cache dtype ") + dtype_name(kv_dtype) +
                            " is not supported (F32 or BF16)");
  }
  const GptConfig& c = model.config();
  std::unique_ptr<GptSession> s(new GptSession());
  s->kv_dtype_ = kv_dtype;
  s->model_ = &model;
  s->be_ = &model.backend();
  s->max_batch_ = max_batch;
  s->max_len_ = max_shape_tokens;
  s->cond_len_ = c.cond_len();
  s->joint_len_ = s->cond_len_ + max_shape_tokens;
  const int64_t b = max_batch, d = c.n_embd, rows = b * std::max(s->cond_len_, max_shape_tokens);
  auto alloc = [&](int64_t elements, auto** out) -> Status {
    TESSERA_ASSIGN_OR_RETURN(DeviceBuffer buf,
                             s->be_->allocate(static_cast<size_t>(elements) * sizeof(**out)));
    *out = static_cast<std::remove_reference_t<decltype(**out)>*>(buf.data());
    s->buffers_.push_back(std::move(buf));
    return {};
  };
  TESSERA_RETURN_IF_ERROR(alloc(b * s->cond_len_ * d, &s->cond_));
  TESSERA_RETURN_IF_ERROR(alloc(b * s->cond_len_ * d, &s->c_));
  TESSERA_RETURN_IF_ERROR(alloc(b * max_shape_tokens * d, &s->x_));
  for (float** p : {&s->h_, &s->q_, &s->k_, &s->v_, &s->y_, &s->t_}) {
    TESSERA_RETURN_IF_ERROR(alloc(rows * d, p));
  }
  TESSERA_RETURN_IF_ERROR(alloc(rows * c.mlp_hidden, &s->gate_));
  TESSERA_RETURN_IF_ERROR(alloc(rows * c.mlp_hidden, &s->up_));
  TESSERA_RETURN_IF_ERROR(alloc(b * s->joint_len_ * d, &s->qj_));
  TESSERA_RETURN_IF_ERROR(alloc(b * s->joint_len_ * d, &s->oj_));
  TESSERA_RETURN_IF_ERROR(alloc(b * c.vocab_size, &s->logits_));
  TESSERA_RETURN_IF_ERROR(alloc(b * c.text_len * c.text_embed_dim, &s->clip_in_));
  TESSERA_RETURN_IF_ERROR(alloc(b * 3, &s->bbox_in_));
  TESSERA_RETURN_IF_ERROR(alloc(b * max_shape_tokens, &s->ids_));
  TESSERA_RETURN_IF_ERROR(alloc(b * max_shape_tokens, &s->positions_));
  for (int64_t i = 0; i < c.n_dual + c.n_single; ++i) {
    const int64_t len = i < c.n_dual ? s->joint_len_ : max_shape_tokens;
    if (kv_dtype == DType::kBF16) {
      uint16_t *k = nullptr, *v = nullptr;
      TESSERA_RETURN_IF_ERROR(alloc(b * len * d, &k));
      TESSERA_RETURN_IF_ERROR(alloc(b * len * d, &v));
      s->k_cache16_.push_back(k);
      s->v_cache16_.push_back(v);
    } else {
      float *k = nullptr, *v = nullptr;
      TESSERA_RETURN_IF_ERROR(alloc(b * len * d, &k));
      TESSERA_RETURN_IF_ERROR(alloc(b * len * d, &v));
      s->k_cache_.push_back(k);
      s->v_cache_.push_back(v);
    }
  }
  if (kv_dtype == DType::kBF16) {
    // joint_len_ >= max_shape_tokens: also holds a single block's [max_batch][max_len] K/V.
    TESSERA_RETURN_IF_ERROR(alloc(b * s->joint_len_ * d, &s->kj_));
    TESSERA_RETURN_IF_ERROR(alloc(b * s->joint_len_ * d, &s->vj_));
    // Fail here, not in the first decode step, on a backend without bf16 K/V support.
    TESSERA_RETURN_IF_ERROR(s->be_->convert_f32_to_bf16(s->k_cache16_[0], s->kj_, 0));
    TESSERA_RETURN_IF_ERROR(s->be_->convert_bf16_to_f32(s->kj_, s->k_cache16_[0], 0));
  }
  s->stack_condition_rows_ = options.stack_condition_rows;
  for (const detail::GptDualBlock& blk : model.weights().dual) {
    const detail::GptLinear* ws[] = {&blk.pre_c.q,       &blk.pre_c.k,     &blk.pre_c.v,
                                     &blk.post_2.c_proj, &blk.post_2.gate, &blk.post_2.up,
                                     &blk.post_2.down};
    for (const detail::GptLinear* l : ws) {
      if (l->w.data == nullptr) continue;  // absent (no query, or post_2 of cond_pre_only)
      if (!s->be_->linear_rows_invariant(l->w, s->cond_len_)) s->stack_condition_rows_ = false;
    }
  }
  s->host_positions_.resize(static_cast<size_t>(b * max_shape_tokens));
  s->cache_condition_.resize(static_cast<size_t>(b * s->cond_len_ * d));
  s->condition_scratch_.resize(static_cast<size_t>(s->cond_len_ * d));
  s->cache_condition_valid_.assign(static_cast<size_t>(b), false);
  return s;
}

Status GptSession::set_condition(int64_t batch, const float* clip_hidden, const float* bbox) {
  const GptConfig& c = model_->config();
  if (batch < 1 || batch > max_batch_) {
    return invalid_argument("GptSession::set_condition: batch " + std::to_string(batch) +
                            " outside [1, " + std::to_string(max_batch_) + "]");
  }
  if (!clip_hidden) return invalid_argument("GptSession::set_condition: no CLIP hidden states");
  batch_ = batch;
  length_ = 0;
  has_condition_ = false;
  const detail::GptWeights& w = model_->weights();
  const int64_t d = c.n_embd, s = cond_len_;
  TESSERA_RETURN_IF_ERROR(be_->upload(
      clip_in_, clip_hidden, static_cast<size_t>(batch * c.text_len * c.text_embed_dim) * 4));
  for (int64_t b = 0; b < batch; ++b) {
    TESSERA_RETURN_IF_ERROR(be_->linear(clip_in_ + b * c.text_len * c.text_embed_dim, c.text_len,
                                        w.text_proj.w, w.text_proj.bias, cond_ + b * s * d));
  }
  if (c.use_bbox) {
    float zeros[3] = {0, 0, 0};
    for (int64_t b = 0; b < batch; ++b) {
      TESSERA_RETURN_IF_ERROR(be_->upload(bbox_in_ + 3 * b, bbox ? bbox + 3 * b : zeros, 12));
    }
    TESSERA_RETURN_IF_ERROR(be_->linear(bbox_in_, batch, w.bbox_proj.w, w.bbox_proj.bias, t_));
    for (int64_t b = 0; b < batch; ++b) {
      TESSERA_RETURN_IF_ERROR(
          be_->copy(cond_ + (b * s + c.text_len) * d, t_ + b * d, static_cast<size_t>(d) * 4));
    }
  }
  has_condition_ = true;
  return {};
}

Status GptSession::read_condition(std::vector<float>* out) const {
  if (!has_condition_) return invalid_argument("GptSession: no condition set");
  out->resize(static_cast<size_t>(batch_ * cond_len_ * model_->config().n_embd));
  return be_->download(out->data(), cond_, out->size() * 4);
}

Status GptSession::upload_ids(const int32_t* ids, int64_t n) {
  const int32_t vocab = static_cast<int32_t>(model_->config().vocab_size);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return invalid_argument("Cube GPT: token id " + std::to_string(ids[i]) + " at index " +
                              std::to_string(i) + " outside the vocabulary [0, " +
                              std::to_string(vocab) + ")");
    }
  }
  return be_->upload(ids_, ids, static_cast<size_t>(n) * 4);
}

// positions[b * len + t] = first + t for every row b.
Status GptSession::upload_positions(int64_t len, int64_t first) {
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t t = 0; t < len; ++t)
      host_positions_[static_cast<size_t>(b * len + t)] = static_cast<int32_t>(first + t);
  }
  return be_->upload(positions_, host_positions_.data(), static_cast<size_t>(batch_ * len) * 4);
}

// q/k/v of `rows` tokens (normalized input h): per-head RMSNorm of q and k, RoPE at positions_
// when `rope` (condition tokens sit at position 0, where the rotation is the identity).
Status GptSession::project(const detail::GptPreAttention& pre, const float* h, int64_t rows,
                           bool rope, float* q, float* k, float* v) {
  const GptConfig& c = model_->config();
  // q, k and v read the same h: one linear_multi (one pass over the three weights on the CPU).
  const kernels::LinearPart parts[3] = {
      {pre.k.w, pre.k.bias, k}, {pre.v.w, pre.v.bias, v}, {pre.q.w, pre.q.bias, q}};
  TESSERA_RETURN_IF_ERROR(be_->linear_multi(h, rows, parts, pre.query ? 3 : 2));
  // Per-head RMSNorm (+ RoPE): one fused op on backends that fuse it (heads are contiguous:
  // n_embd = n_head * head_dim).
  const int32_t* positions = rope ? positions_ : nullptr;
  if (pre.query) {
    return be_->rms_norm_rope_pair(q, pre.q_norm, k, pre.k_norm, rows, c.n_head, c.head_dim,
                                   c.qk_norm_eps, positions, c.rope_theta);
  }
  return be_->rms_norm_rope(k, pre.k_norm, rows, c.n_head, c.head_dim, c.qk_norm_eps, positions,
                            c.rope_theta);
}

// x += c_proj(y); x += SwiGLU(LN(x)); with `then_norm`, also h_ = LN(x) for what follows (the
// next block's input norm, or the head's): the last add and that norm in one backend op.
Status GptSession::post(const detail::GptPostAttention& p, float* x, const float* y, int64_t rows,
                        bool then_norm) {
  const GptConfig& c = model_->config();
  const int64_t n = rows * c.n_embd;
  TESSERA_RETURN_IF_ERROR(be_->linear(y, rows, p.c_proj.w, p.c_proj.bias, t_));
  TESSERA_RETURN_IF_ERROR(be_->add_layer_norm(x, t_, h_, rows, c.n_embd, c.eps));
  TESSERA_RETURN_IF_ERROR(
      be_->linear_swiglu(h_, rows, p.gate.w, p.gate.bias, p.up.w, p.up.bias, gate_, up_, gate_));
  TESSERA_RETURN_IF_ERROR(be_->linear(gate_, rows, p.down.w, p.down.bias, t_));
  if (then_norm) return be_->add_layer_norm(x, t_, h_, rows, c.n_embd, c.eps);
  return be_->add(x, t_, x, n);
}

// One dual block over the condition stream c_ [batch, S] and `len` shape tokens x_ [batch, len].
// The joint sequence [c ; x] of row b lives at slots 0..S+len-1 of qj_/oj_/the layer's cache.
Status GptSession::dual_full(size_t i, int64_t len, int64_t cond_rows) {
  const GptConfig& c = model_->config();
  const detail::GptDualBlock& blk = model_->weights().dual[i];
  const int64_t d = c.n_embd, s = cond_len_, t = joint_len_;
  const size_t row_bytes = static_cast<size_t>(d) * 4;
  float* kc = full_k(i);
  float* vc = full_v(i);
  // Condition stream: S rows per batch row (the other rows' condition K/V are in the cache), so
  // that a row's condition K/V are the same bits whether it is computed alone or with others (GEMM
  // paths may depend on m): a generation's tokens never depend on what else ran. Stacked into one
  // call where the backend promises that (stack_condition_rows_), else one row at a time.
  const int64_t cond_step = stack_condition_rows_ ? std::max<int64_t>(cond_rows, 1) : 1;
  for (int64_t b = 0; b < cond_rows; b += cond_step) {
    const int64_t at = b * s * d, rows = std::min(cond_step, cond_rows - b) * s;
    TESSERA_RETURN_IF_ERROR(be_->layer_norm(c_ + at, nullptr, nullptr, h_ + at, rows, d, c.eps));
    TESSERA_RETURN_IF_ERROR(project(blk.pre_c, h_ + at, rows, false, q_ + at, k_ + at, v_ + at));
  }
  for (int64_t b = 0; b < cond_rows; ++b) {
    const size_t bytes = static_cast<size_t>(s) * row_bytes;
    if (blk.pre_c.query) TESSERA_RETURN_IF_ERROR(be_->copy(qj_ + b * t * d, q_ + b * s * d, bytes));
    TESSERA_RETURN_IF_ERROR(be_->copy(kc + b * t * d, k_ + b * s * d, bytes));
    TESSERA_RETURN_IF_ERROR(be_->copy(vc + b * t * d, v_ + b * s * d, bytes));
  }
  // Shape stream: rows batch * len, positions 0..len-1.
  TESSERA_RETURN_IF_ERROR(be_->layer_norm(x_, nullptr, nullptr, h_, batch_ * len, d, c.eps));
  TESSERA_RETURN_IF_ERROR(project(blk.pre_x, h_, batch_ * len, true, q_, k_, v_));
  for (int64_t b = 0; b < batch_; ++b) {
    const size_t bytes = static_cast<size_t>(len) * row_bytes;
    const int64_t at = (b * t + s) * d;
    TESSERA_RETURN_IF_ERROR(be_->copy(qj_ + at, q_ + b * len * d, bytes));
    TESSERA_RETURN_IF_ERROR(be_->copy(kc + at, k_ + b * len * d, bytes));
    TESSERA_RETURN_IF_ERROR(be_->copy(vc + at, v_ + b * len * d, bytes));
  }
  // The K/V cache gets the new slots: [c ; x] of rows that ran the condition stream, x of the
  // others, whose cached condition K/V the attention below reads (widened, with a bf16 cache).
  // With a bf16 cache the attention reads the condition's K/V as cached (rounded), whether they
  // were computed now or reused: a prefill gives the same bits either way, so a generation's
  // tokens do not depend on what the session ran before (batch invariance across calls).
  for (int64_t b = 0; b < batch_; ++b) {
    const bool with_condition = b < cond_rows;
    if (!with_condition) TESSERA_RETURN_IF_ERROR(widen_cached_kv(i, b * t, s));
    TESSERA_RETURN_IF_ERROR(
        store_full_kv(i, b * t + (with_condition ? 0 : s), len + (with_condition ? s : 0)));
    if (with_condition) TESSERA_RETURN_IF_ERROR(widen_cached_kv(i, b * t, s));
  }
  // One causal attention over the joint sequence. Condition-pre-only, and rows whose condition
  // stream is skipped: queries are the shape tokens, the last `len` positions of the joint
  // sequence.
  kernels::AttentionShape as;
  as.heads = c.n_head;
  as.head_dim = c.head_dim;
  as.kv_len = s + len;
  as.q_token_stride = as.k_token_stride = as.v_token_stride = as.o_token_stride = d;
  as.q_batch_stride = as.k_batch_stride = as.v_batch_stride = as.o_batch_stride = t * d;
  as.causal = true;
  as.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  auto attend = [&](int64_t first_row, int64_t rows, bool condition_queries) {
    as.batch = rows;
    as.q_len = condition_queries ? s + len : len;
    const int64_t at = first_row * t * d;
    const int64_t q_off = at + (condition_queries ? 0 : s * d);
    return be_->attention(qj_ + q_off, kc + at, vc + at, oj_ + q_off, as);
  };
  if (blk.cond_pre_only) {
    TESSERA_RETURN_IF_ERROR(attend(0, batch_, false));
  } else {
    if (cond_rows > 0) TESSERA_RETURN_IF_ERROR(attend(0, cond_rows, true));
    if (cond_rows < batch_) TESSERA_RETURN_IF_ERROR(attend(cond_rows, batch_ - cond_rows, false));
  }
  for (int64_t b = 0; b < batch_; ++b) {
    TESSERA_RETURN_IF_ERROR(
        be_->copy(y_ + b * len * d, oj_ + (b * t + s) * d, static_cast<size_t>(len) * row_bytes));
  }
  TESSERA_RETURN_IF_ERROR(post(blk.post_1, x_, y_, batch_ * len));
  if (blk.cond_pre_only || cond_rows == 0) return {};
  for (int64_t b = 0; b < cond_rows; ++b) {
    TESSERA_RETURN_IF_ERROR(
        be_->copy(y_ + b * s * d, oj_ + b * t * d, static_cast<size_t>(s) * row_bytes));
  }
  for (int64_t b = 0; b < cond_rows; b += cond_step) {  // as above
    TESSERA_RETURN_IF_ERROR(
        post(blk.post_2, c_ + b * s * d, y_ + b * s * d, std::min(cond_step, cond_rows - b) * s));
  }
  return {};
}

Status GptSession::single_full(size_t i, int64_t len) {
  const GptConfig& c = model_->config();
  const detail::GptSingleBlock& blk = model_->weights().single[i];
  const int64_t d = c.n_embd, layer = c.n_dual + static_cast<int64_t>(i);
  float* kc = full_k(static_cast<size_t>(layer));
  float* vc = full_v(static_cast<size_t>(layer));
  TESSERA_RETURN_IF_ERROR(be_->layer_norm(x_, nullptr, nullptr, h_, batch_ * len, d, c.eps));
  TESSERA_RETURN_IF_ERROR(project(blk.attn, h_, batch_ * len, true, q_, k_, v_));
  for (int64_t b = 0; b < batch_; ++b) {
    const size_t bytes = static_cast<size_t>(len * d) * 4;
    TESSERA_RETURN_IF_ERROR(be_->copy(kc + b * max_len_ * d, k_ + b * len * d, bytes));
    TESSERA_RETURN_IF_ERROR(be_->copy(vc + b * max_len_ * d, v_ + b * len * d, bytes));
    TESSERA_RETURN_IF_ERROR(store_full_kv(static_cast<size_t>(layer), b * max_len_, len));
  }
  kernels::AttentionShape as =
      kernels::contiguous_attention(batch_, c.n_head, len, len, c.head_dim, true,
                                    1.0f / std::sqrt(static_cast<float>(c.head_dim)));
  as.k_batch_stride = as.v_batch_stride = max_len_ * d;
  TESSERA_RETURN_IF_ERROR(be_->attention(q_, kc, vc, y_, as));
  return post(blk.post, x_, y_, batch_ * len);
}

Status GptSession::store_full_kv(size_t layer, int64_t first, int64_t n) {
  if (kv_dtype_ != DType::kBF16 || n <= 0) return {};
  const int64_t d = model_->config().n_embd;
  TESSERA_RETURN_IF_ERROR(
      be_->convert_f32_to_bf16(k_cache16_[layer] + first * d, kj_ + first * d, n * d));
  return be_->convert_f32_to_bf16(v_cache16_[layer] + first * d, vj_ + first * d, n * d);
}

Status GptSession::widen_cached_kv(size_t layer, int64_t first, int64_t n) {
  if (kv_dtype_ != DType::kBF16 || n <= 0) return {};
  const int64_t d = model_->config().n_embd;
  TESSERA_RETURN_IF_ERROR(
      be_->convert_bf16_to_f32(kj_ + first * d, k_cache16_[layer] + first * d, n * d));
  return be_->convert_bf16_to_f32(vj_ + first * d, v_cache16_[layer] + first * d, n * d);
}

Status GptSession::observe(const GptBlockObserver& observer, const std::string& name,
                           const float* data, int64_t n) const {
  if (!observer) return {};
  std::vector<float> host(static_cast<size_t>(n));
  TESSERA_RETURN_IF_ERROR(be_->download(host.data(), data, host.size() * 4));
  observer(name, host);
  return {};
}

Expected<bool> GptSession::cached_condition_matches(int64_t b) {
  if (!cache_condition_valid_[static_cast<size_t>(b)]) return false;
  const size_t n = condition_scratch_.size();
  TESSERA_RETURN_IF_ERROR(
      be_->download(condition_scratch_.data(), cond_ + static_cast<int64_t>(n) * b, n * 4));
  return std::memcmp(condition_scratch_.data(),
                     cache_condition_.data() + n * static_cast<size_t>(b), n * 4) == 0;
}

Status GptSession::remember_condition(int64_t rows) {
  const size_t n = condition_scratch_.size();
  if (rows > 0) {
    TESSERA_RETURN_IF_ERROR(
        be_->download(cache_condition_.data(), cond_, n * static_cast<size_t>(rows) * 4));
  }
  for (int64_t b = 0; b < rows; ++b) cache_condition_valid_[static_cast<size_t>(b)] = true;
  return {};
}

Status GptSession::run_full(const int32_t* ids, int64_t len, const GptBlockObserver& observer,
                            int64_t cond_rows) {
  const GptConfig& c = model_->config();
  if (!has_condition_)
    return invalid_argument("Cube GPT: no condition set (call set_condition first)");
  if (len < 1 || len > max_len_) {
    return invalid_argument("Cube GPT: " + std::to_string(len) +
                            " shape tokens outside the session's [1, " + std::to_string(max_len_) +
                            "]");
  }
  length_ = 0;
  const int64_t d = c.n_embd;
  // Rows [0, cond_rows) get new condition K/V; valid again only once they are complete.
  for (int64_t b = 0; b < cond_rows; ++b) cache_condition_valid_[static_cast<size_t>(b)] = false;
  TESSERA_RETURN_IF_ERROR(upload_ids(ids, batch_ * len));
  TESSERA_RETURN_IF_ERROR(be_->embedding_gather(model_->weights().wte, ids_, batch_ * len, x_));
  TESSERA_RETURN_IF_ERROR(be_->copy(c_, cond_, static_cast<size_t>(batch_ * cond_len_ * d) * 4));
  TESSERA_RETURN_IF_ERROR(upload_positions(len, 0));
  for (size_t i = 0; i < static_cast<size_t>(c.n_dual); ++i) {
    TESSERA_RETURN_IF_ERROR(dual_full(i, len, cond_rows));
    TESSERA_RETURN_IF_ERROR(
        observe(observer, "dual." + std::to_string(i) + ".x", x_, batch_ * len * d));
    if (!model_->weights().dual[i].cond_pre_only) {
      TESSERA_RETURN_IF_ERROR(
          observe(observer, "dual." + std::to_string(i) + ".c", c_, batch_ * cond_len_ * d));
    }
  }
  for (size_t i = 0; i < static_cast<size_t>(c.n_single); ++i) {
    TESSERA_RETURN_IF_ERROR(single_full(i, len));
    TESSERA_RETURN_IF_ERROR(
        observe(observer, "single." + std::to_string(i) + ".x", x_, batch_ * len * d));
  }
  if (observer) {
    TESSERA_RETURN_IF_ERROR(be_->layer_norm(x_, nullptr, nullptr, h_, batch_ * len, d, c.eps));
    TESSERA_RETURN_IF_ERROR(observe(observer, "ln_f", h_, batch_ * len * d));
  }
  TESSERA_RETURN_IF_ERROR(remember_condition(cond_rows));
  length_ = len;
  return {};
}

// logits = lm_head(ln_f(rows_in [batch, D])) -> host [batch, vocab].
Status GptSession::head(const float* rows_in, float* logits) {
  const GptConfig& c = model_->config();
  TESSERA_RETURN_IF_ERROR(be_->layer_norm(rows_in, nullptr, nullptr, h_, batch_, c.n_embd, c.eps));
  TESSERA_RETURN_IF_ERROR(be_->linear(h_, batch_, model_->weights().lm_head, nullptr, logits_));
  return be_->download(logits, logits_, static_cast<size_t>(batch_ * c.vocab_size) * 4);
}

Status GptSession::forward_full(const int32_t* ids, int64_t len, float* logits_last,
                                float* logits_all, const GptBlockObserver& observer) {
  TESSERA_RETURN_IF_ERROR(run_full(ids, len, observer, batch_));
  const GptConfig& c = model_->config();
  const int64_t d = c.n_embd, v = c.vocab_size;
  const size_t row_bytes = static_cast<size_t>(d) * 4;
  if (logits_all) {
    std::vector<float> step(static_cast<size_t>(batch_ * v));
    for (int64_t t = 0; t < len; ++t) {
      for (int64_t b = 0; b < batch_; ++b) {
        TESSERA_RETURN_IF_ERROR(be_->copy(y_ + b * d, x_ + (b * len + t) * d, row_bytes));
      }
      TESSERA_RETURN_IF_ERROR(head(y_, step.data()));
      for (int64_t b = 0; b < batch_; ++b) {
        std::copy(step.begin() + b * v, step.begin() + (b + 1) * v, logits_all + (b * len + t) * v);
      }
    }
  }
  if (logits_last) {
    for (int64_t b = 0; b < batch_; ++b) {
      TESSERA_RETURN_IF_ERROR(be_->copy(y_ + b * d, x_ + (b * len + len - 1) * d, row_bytes));
    }
    TESSERA_RETURN_IF_ERROR(head(y_, logits_last));
  }
  return {};
}

Status GptSession::prefill(const int32_t* ids, float* logits) {
  // Trailing rows whose cached condition K/V still hold: skip their condition stream.
  int64_t cond_rows = batch_;
  while (cond_rows > 0 && has_condition_) {
    TESSERA_ASSIGN_OR_RETURN(const bool same, cached_condition_matches(cond_rows - 1));
    if (!same) break;
    --cond_rows;
  }
  TESSERA_RETURN_IF_ERROR(run_full(ids, 1, {}, cond_rows));
  return head(x_, logits);  // len 1: x_ is [batch, D]
}

Status GptSession::decode(const int32_t* ids, float* logits) {
  const GptConfig& c = model_->config();
  if (!has_condition_ || length_ == 0) {
    return invalid_argument("Cube GPT: decode before prefill (no condition in the cache)");
  }
  if (length_ >= max_len_) {
    return invalid_argument("Cube GPT: KV cache full (" + std::to_string(max_len_) +
                            " shape tokens)");
  }
  const int64_t d = c.n_embd, pos = length_, s = cond_len_, t = joint_len_;
  const size_t row_bytes = static_cast<size_t>(d) * 4;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  TESSERA_RETURN_IF_ERROR(upload_ids(ids, batch_));
  TESSERA_RETURN_IF_ERROR(be_->embedding_gather(model_->weights().wte, ids_, batch_, x_));
  TESSERA_RETURN_IF_ERROR(upload_positions(1, pos));
  // One query per (row, head) over layer's cache: q [batch, D], keys at row stride `slots` * D,
  // the new token's K/V (k_, v_ [batch, D]) first written at slot `at` of each row (rounded to
  // bf16 with a bf16 cache).
  auto attend = [&](size_t layer, int64_t slots, int64_t at, int64_t kv_len) -> Status {
    const bool bf16 = kv_dtype_ == DType::kBF16;
    for (int64_t b = 0; b < batch_; ++b) {
      const int64_t dst = (b * slots + at) * d;
      if (bf16) {
        TESSERA_RETURN_IF_ERROR(be_->convert_f32_to_bf16(k_cache16_[layer] + dst, k_ + b * d, d));
        TESSERA_RETURN_IF_ERROR(be_->convert_f32_to_bf16(v_cache16_[layer] + dst, v_ + b * d, d));
      } else {
        TESSERA_RETURN_IF_ERROR(be_->copy(k_cache_[layer] + dst, k_ + b * d, row_bytes));
        TESSERA_RETURN_IF_ERROR(be_->copy(v_cache_[layer] + dst, v_ + b * d, row_bytes));
      }
    }
    kernels::AttentionShape as;
    as.batch = batch_;
    as.heads = c.n_head;
    as.head_dim = c.head_dim;
    as.q_len = 1;
    as.kv_len = kv_len;
    as.q_token_stride = as.k_token_stride = as.v_token_stride = as.o_token_stride = d;
    as.q_batch_stride = as.o_batch_stride = d;
    as.k_batch_stride = as.v_batch_stride = slots * d;
    as.causal = false;  // one query at the end of the sequence sees every key
    as.scale = scale;
    if (bf16) {
      return be_->attention_decode_bf16kv(q_, k_cache16_[layer], v_cache16_[layer], y_, as);
    }
    return be_->attention_decode(q_, k_cache_[layer], v_cache_[layer], y_, as);
  };
  const detail::GptWeights& w = model_->weights();
  for (size_t i = 0; i < w.dual.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(be_->layer_norm(x_, nullptr, nullptr, h_, batch_, d, c.eps));
    TESSERA_RETURN_IF_ERROR(project(w.dual[i].pre_x, h_, batch_, true, q_, k_, v_));
    TESSERA_RETURN_IF_ERROR(attend(i, t, s + pos, s + pos + 1));
    TESSERA_RETURN_IF_ERROR(post(w.dual[i].post_1, x_, y_, batch_));
  }
  for (size_t i = 0; i < w.single.size(); ++i) {
    const size_t layer = w.dual.size() + i;
    TESSERA_RETURN_IF_ERROR(be_->layer_norm(x_, nullptr, nullptr, h_, batch_, d, c.eps));
    TESSERA_RETURN_IF_ERROR(project(w.single[i].attn, h_, batch_, true, q_, k_, v_));
    TESSERA_RETURN_IF_ERROR(attend(layer, max_len_, pos, pos + 1));
    TESSERA_RETURN_IF_ERROR(post(w.single[i].post, x_, y_, batch_));
  }
  length_ = pos + 1;
  return head(x_, logits);
}

Status GptSession::decode_at(const int64_t* step) {
  const GptConfig& c = model_->config();
  if (!has_condition_ || length_ == 0) {
    return invalid_argument("Cube GPT: decode_at before prefill (no condition in the cache)");
  }
  const int64_t d = c.n_embd, s = cond_len_, t = joint_len_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  TESSERA_RETURN_IF_ERROR(be_->embedding_gather(model_->weights().wte, ids_, batch_, x_));
  TESSERA_RETURN_IF_ERROR(be_->set_positions(positions_, batch_, 1, step, 0));
  const bool bf16 = kv_dtype_ == DType::kBF16;
  // As decode()'s attend, with the slot (slot_offset + *step) and the keys in use (*step +
  // kv_offset) read from *step: dual blocks s + step / s + step + 1, single blocks step / step + 1.
  auto attend = [&](size_t layer, int64_t slots, int64_t slot_offset, int64_t kv_offset) -> Status {
    void* kc = bf16 ? static_cast<void*>(k_cache16_[layer]) : static_cast<void*>(k_cache_[layer]);
    void* vc = bf16 ? static_cast<void*>(v_cache16_[layer]) : static_cast<void*>(v_cache_[layer]);
    TESSERA_RETURN_IF_ERROR(
        be_->store_kv_pair(kc, vc, kv_dtype_, k_, v_, batch_, d, slots * d, slot_offset, step));
    kernels::AttentionShape as;
    as.batch = batch_;
    as.heads = c.n_head;
    as.head_dim = c.head_dim;
    as.q_len = 1;
    as.kv_len = slots;  // the capacity; the keys in use come from *step
    as.q_token_stride = as.k_token_stride = as.v_token_stride = as.o_token_stride = d;
    as.q_batch_stride = as.o_batch_stride = d;
    as.k_batch_stride = as.v_batch_stride = slots * d;
    as.causal = false;
    as.scale = scale;
    return be_->attention_decode_at(q_, kc, vc, kv_dtype_, y_, as, step, kv_offset);
  };
  const detail::GptWeights& w = model_->weights();
  // Each block's input norm is made by the previous block's last residual add (post with
  // then_norm; one kernel on the GPU), the first by a layer_norm here, the head's by the last
  // block.
  TESSERA_RETURN_IF_ERROR(be_->layer_norm(x_, nullptr, nullptr, h_, batch_, d, c.eps));
  for (size_t i = 0; i < w.dual.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(project(w.dual[i].pre_x, h_, batch_, true, q_, k_, v_));
    TESSERA_RETURN_IF_ERROR(attend(i, t, s, s + 1));
    TESSERA_RETURN_IF_ERROR(post(w.dual[i].post_1, x_, y_, batch_, true));
  }
  for (size_t i = 0; i < w.single.size(); ++i) {
    const size_t layer = w.dual.size() + i;
    TESSERA_RETURN_IF_ERROR(project(w.single[i].attn, h_, batch_, true, q_, k_, v_));
    TESSERA_RETURN_IF_ERROR(attend(layer, max_len_, 0, 1));
    TESSERA_RETURN_IF_ERROR(post(w.single[i].post, x_, y_, batch_, true));
  }
  return be_->linear(h_, batch_, w.lm_head, nullptr, logits_);
}

Status GptSession::copy_row(int64_t src, int64_t dst) {
  if (src < 0 || src >= max_batch_ || dst < 0 || dst >= max_batch_) {
    return invalid_argument("GptSession::copy_row: rows " + std::to_string(src) + " -> " +
                            std::to_string(dst) + " outside [0, " + std::to_string(max_batch_) +
                            ")");
  }
  if (!has_condition_ || length_ == 0) {
    return invalid_argument("GptSession::copy_row: nothing cached yet (call prefill first)");
  }
  if (src == dst) return {};
  const GptConfig& c = model_->config();
  const int64_t d = c.n_embd, s = cond_len_;
  const size_t elem = kv_dtype_ == DType::kBF16 ? 2 : 4;
  const int64_t layers = c.n_dual + c.n_single;
  for (int64_t layer = 0; layer < layers; ++layer) {
    const bool dual = layer < c.n_dual;
    const int64_t slots = dual ? joint_len_ : max_len_;
    const int64_t used = dual ? s + length_ : length_;
    const size_t bytes = static_cast<size_t>(used * d) * elem;
    const size_t from = static_cast<size_t>(src * slots * d) * elem;
    const size_t to = static_cast<size_t>(dst * slots * d) * elem;
    const size_t l = static_cast<size_t>(layer);
    auto* kc = kv_dtype_ == DType::kBF16 ? static_cast<void*>(k_cache16_[l])
                                         : static_cast<void*>(k_cache_[l]);
    auto* vc = kv_dtype_ == DType::kBF16 ? static_cast<void*>(v_cache16_[l])
                                         : static_cast<void*>(v_cache_[l]);
    TESSERA_RETURN_IF_ERROR(
        be_->copy(static_cast<char*>(kc) + to, static_cast<const char*>(kc) + from, bytes));
    TESSERA_RETURN_IF_ERROR(
        be_->copy(static_cast<char*>(vc) + to, static_cast<const char*>(vc) + from, bytes));
  }
  const size_t n = condition_scratch_.size();
  TESSERA_RETURN_IF_ERROR(be_->copy(cond_ + dst * s * d, cond_ + src * s * d, n * sizeof(float)));
  std::copy(
      cache_condition_.begin() + static_cast<std::ptrdiff_t>(n * static_cast<size_t>(src)),
      cache_condition_.begin() + static_cast<std::ptrdiff_t>(n * static_cast<size_t>(src + 1)),
      cache_condition_.begin() + static_cast<std::ptrdiff_t>(n * static_cast<size_t>(dst)));
  cache_condition_valid_[static_cast<size_t>(dst)] =
      cache_condition_valid_[static_cast<size_t>(src)];
  return {};
}

Status GptSession::set_rows(int64_t rows) {
  if (rows < 1 || rows > max_batch_) {
    return invalid_argument("GptSession::set_rows: " + std::to_string(rows) + " rows outside [1, " +
                            std::to_string(max_batch_) + "]");
  }
  if (!has_condition_ || length_ == 0) {
    return invalid_argument("GptSession::set_rows: nothing cached yet (call prefill first)");
  }
  batch_ = rows;
  return {};
}

Status GptSession::load_logits(const float* logits, int64_t rows) {
  if (rows < 1 || rows > max_batch_ || logits == nullptr) {
    return invalid_argument("GptSession::load_logits: " + std::to_string(rows) +
                            " rows outside [1, " + std::to_string(max_batch_) + "] or no data");
  }
  return be_->upload(logits_, logits,
                     static_cast<size_t>(rows * model_->config().vocab_size) * sizeof(float));
}

Status GptSession::advance(int64_t steps) {
  if (steps < 0 || length_ + steps > max_len_) {
    return invalid_argument("Cube GPT: advance(" + std::to_string(steps) + ") from " +
                            std::to_string(length_) + " past the KV cache's " +
                            std::to_string(max_len_) + " shape tokens");
  }
  length_ += steps;
  return {};
}

}  // namespace tessera::shape
