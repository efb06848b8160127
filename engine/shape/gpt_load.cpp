// Loading the Cube GPT (gpt.h): the shape tokenizer's normalized codebook, then every tensor of the
// checkpoint checked (name, dtype, shape; an int8 matrix's scales) and converted once where the
// options or the file ask (bf16, int8, f16), and handed to the backend. The tensor names the engine
// requires are here (docs/cube3d.md).
#include "engine/shape/gpt.h"

#include <algorithm>
#include <cmath>

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

}  // namespace tessera::shape
