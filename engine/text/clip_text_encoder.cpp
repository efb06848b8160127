// CLIP text encoder (see clip_text_encoder.h).
//
// Key padding mask with an attention op that has only a causal flag: with the causal mask AND the
// prefix mask of a sequence of L real tokens (T positions),
//   query i < L  sees keys j <= i            (all real: the causal mask alone),
//   query i >= L sees keys j <= i and j < L  == all keys 0..L-1 (i >= L > j).
// So each sequence runs as two attention calls over its first L keys: the L real queries causally
// (q_len == kv_len == L), and the T - L padded queries without a mask (kv_len = L). This is exact,
// not an approximation, and it skips the masked keys instead of computing and discarding them.
#include "engine/text/clip_text_encoder.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/mapped_file.h"

namespace tessera::text {

namespace fs = std::filesystem;

Expected<int64_t> read_clip_num_heads(const std::string& config_json_path) {
  if (config_json_path.empty()) return int64_t{0};
  std::error_code ec;
  if (!fs::exists(config_json_path, ec)) return int64_t{0};
  TESSERA_ASSIGN_OR_RETURN(const std::string text, read_file(config_json_path));
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(config_json_path + ": invalid JSON: " + e.what());
  }
  if (!config.is_object()) return invalid_argument(config_json_path + ": not a JSON object");
  // A full CLIPModel config nests the text model's settings under text_config.
  const nlohmann::json* scope = &config;
  if (!config.contains("num_attention_heads") && config.contains("text_config") &&
      config["text_config"].is_object()) {
    scope = &config["text_config"];
  }
  if (!scope->contains("num_attention_heads")) return int64_t{0};
  const nlohmann::json& heads = (*scope)["num_attention_heads"];
  if (!heads.is_number_integer() || heads.get<int64_t>() <= 0) {
    return invalid_argument(
        config_json_path + ": num_attention_heads must be a positive integer, got " + heads.dump());
  }
  return heads.get<int64_t>();
}

namespace {

constexpr const char* kTokenEmbedding = "text_model.embeddings.token_embedding.weight";

struct Linear {
  kernels::Weight weight;
  const float* bias = nullptr;
};

struct Layer {
  const float* ln1_weight = nullptr;
  const float* ln1_bias = nullptr;
  Linear q, k, v, out;
  const float* ln2_weight = nullptr;
  const float* ln2_bias = nullptr;
  Linear fc1, fc2;
};

}  // namespace

struct ClipTextEncoder::Impl {
  kernels::Backend* backend = nullptr;
  WeightStore store;
  ClipTextConfig config;
  // Backend copies of the weights (empty on the CPU: zero-copy).
  std::vector<kernels::DeviceBuffer> weight_storage;

  kernels::Weight token_embedding;
  const float* position_embedding = nullptr;  // [max_positions, width]
  std::vector<Layer> layers;
  const float* final_ln_weight = nullptr;
  const float* final_ln_bias = nullptr;

  // Activations for up to capacity_batch sequences of max_positions tokens.
  int64_t capacity_batch = 0;
  kernels::DeviceBuffer ids, x, h, q, k, v, attn, mlp, out;

  Status load_weights();
  Status ensure_capacity(int64_t batch);
  Status attention(int64_t batch, int64_t seq_len, const int32_t* valid_lengths);
  Status snapshot(const float* src, size_t n, std::vector<std::vector<float>>* hidden_states);

  std::string name(const std::string& suffix) const { return config.prefix + suffix; }

  // An f32 tensor of `shape` (n elements in all) on the backend.
  Expected<const float*> vector(const std::string& suffix, int64_t n,
                                std::vector<int64_t> shape = {}) {
    if (shape.empty()) shape = {n};
    TESSERA_ASSIGN_OR_RETURN(const float* host, store.f32(name(suffix), shape));
    kernels::DeviceBuffer storage;
    TESSERA_ASSIGN_OR_RETURN(const float* data, backend->upload_f32(host, n, &storage));
    if (storage.data() != nullptr) weight_storage.push_back(std::move(storage));
    return data;
  }
  Expected<kernels::Weight> matrix(const std::string& suffix, int64_t rows, int64_t cols) {
    TESSERA_ASSIGN_OR_RETURN(const kernels::Weight host, store.matrix(name(suffix), rows, cols));
    kernels::DeviceBuffer storage;
    TESSERA_ASSIGN_OR_RETURN(const kernels::Weight weight, backend->upload_weight(host, &storage));
    if (storage.data() != nullptr) weight_storage.push_back(std::move(storage));
    return weight;
  }
  Expected<Linear> linear(const std::string& prefix, int64_t out_features, int64_t in_features) {
    Linear l;
    TESSERA_ASSIGN_OR_RETURN(l.weight, matrix(prefix + ".weight", out_features, in_features));
    TESSERA_ASSIGN_OR_RETURN(l.bias, vector(prefix + ".bias", out_features));
    return l;
  }
};

Status ClipTextEncoder::Impl::load_weights() {
  const int64_t width = config.width;
  TESSERA_ASSIGN_OR_RETURN(token_embedding, matrix(kTokenEmbedding, config.vocab_size, width));
  TESSERA_ASSIGN_OR_RETURN(position_embedding,
                           vector("text_model.embeddings.position_embedding.weight",
                                  config.max_positions * width, {config.max_positions, width}));
  layers.resize(static_cast<size_t>(config.n_layers));
  for (int64_t i = 0; i < config.n_layers; ++i) {
    const std::string p = "text_model.encoder.layers." + std::to_string(i) + ".";
    Layer& layer = layers[static_cast<size_t>(i)];
    TESSERA_ASSIGN_OR_RETURN(layer.ln1_weight, vector(p + "layer_norm1.weight", width));
    TESSERA_ASSIGN_OR_RETURN(layer.ln1_bias, vector(p + "layer_norm1.bias", width));
    TESSERA_ASSIGN_OR_RETURN(layer.q, linear(p + "self_attn.q_proj", width, width));
    TESSERA_ASSIGN_OR_RETURN(layer.k, linear(p + "self_attn.k_proj", width, width));
    TESSERA_ASSIGN_OR_RETURN(layer.v, linear(p + "self_attn.v_proj", width, width));
    TESSERA_ASSIGN_OR_RETURN(layer.out, linear(p + "self_attn.out_proj", width, width));
    TESSERA_ASSIGN_OR_RETURN(layer.ln2_weight, vector(p + "layer_norm2.weight", width));
    TESSERA_ASSIGN_OR_RETURN(layer.ln2_bias, vector(p + "layer_norm2.bias", width));
    TESSERA_ASSIGN_OR_RETURN(layer.fc1, linear(p + "mlp.fc1", config.mlp_hidden, width));
    TESSERA_ASSIGN_OR_RETURN(layer.fc2, linear(p + "mlp.fc2", width, config.mlp_hidden));
  }
  TESSERA_ASSIGN_OR_RETURN(final_ln_weight, vector("text_model.final_layer_norm.weight", width));
  TESSERA_ASSIGN_OR_RETURN(final_ln_bias, vector("text_model.final_layer_norm.bias", width));
  return Status();
}

Status ClipTextEncoder::Impl::ensure_capacity(int64_t batch) {
  if (batch <= capacity_batch) return Status();
  const size_t rows = static_cast<size_t>(batch * config.max_positions);
  const size_t act = rows * static_cast<size_t>(config.width) * sizeof(float);
  TESSERA_ASSIGN_OR_RETURN(ids, backend->allocate(rows * sizeof(int32_t)));
  for (kernels::DeviceBuffer* buffer : {&x, &h, &q, &k, &v, &attn, &out}) {
    TESSERA_ASSIGN_OR_RETURN(*buffer, backend->allocate(act));
  }
  TESSERA_ASSIGN_OR_RETURN(
      mlp, backend->allocate(rows * static_cast<size_t>(config.mlp_hidden) * sizeof(float)));
  capacity_batch = batch;
  return Status();
}

Status ClipTextEncoder::Impl::attention(int64_t batch, int64_t seq_len,
                                        const int32_t* valid_lengths) {
  const int64_t width = config.width;
  const float scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  const float* qp = q.as<float>();
  const float* kp = k.as<float>();
  const float* vp = v.as<float>();
  float* op = attn.as<float>();
  if (valid_lengths == nullptr) {
    const kernels::AttentionShape s = kernels::contiguous_attention(
        batch, config.n_heads, seq_len, seq_len, config.head_dim, /*causal=*/true, scale);
    return backend->attention(qp, kp, vp, op, s);
  }
  // See the file comment: real queries causal over the real keys, padded queries unmasked over
  // the real keys.
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = valid_lengths[b];
    const int64_t base = b * seq_len * width;
    kernels::AttentionShape s = kernels::contiguous_attention(
        1, config.n_heads, length, length, config.head_dim, /*causal=*/true, scale);
    TESSERA_RETURN_IF_ERROR(backend->attention(qp + base, kp + base, vp + base, op + base, s));
    if (length < seq_len) {
      const int64_t padded = seq_len - length;
      s = kernels::contiguous_attention(1, config.n_heads, padded, length, config.head_dim,
                                        /*causal=*/false, scale);
      const int64_t offset = base + length * width;
      TESSERA_RETURN_IF_ERROR(
          backend->attention(qp + offset, kp + base, vp + base, op + offset, s));
    }
  }
  return Status();
}

Status ClipTextEncoder::Impl::snapshot(const float* src, size_t n,
                                       std::vector<std::vector<float>>* hidden_states) {
  if (hidden_states == nullptr) return Status();
  hidden_states->emplace_back(n);
  return backend->download(hidden_states->back().data(), src, n * sizeof(float));
}

ClipTextEncoder::ClipTextEncoder(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)), config_(impl_->config) {}
ClipTextEncoder::ClipTextEncoder(ClipTextEncoder&&) noexcept = default;
ClipTextEncoder& ClipTextEncoder::operator=(ClipTextEncoder&&) noexcept = default;
ClipTextEncoder::~ClipTextEncoder() = default;

void ClipTextEncoder::release_weight_pages() const {
  impl_->store.file().drop_all_pages();
}
const WeightStore& ClipTextEncoder::weights() const {
  return impl_->store;
}

Expected<ClipTextEncoder> ClipTextEncoder::create(WeightStore store, kernels::Backend& backend,
                                                  const Options& options) {
  const SafeTensors& file = store.file();
  ClipTextConfig config;
  // The prefix is whatever precedes text_model.embeddings.token_embedding.weight.
  const std::string suffix = kTokenEmbedding;
  const TensorInfo* embedding = nullptr;
  for (const TensorInfo& info : file.tensors()) {
    if (info.name.size() >= suffix.size() &&
        info.name.compare(info.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      embedding = &info;
      break;
    }
  }
  if (embedding == nullptr) {
    return not_found(file.path() + ": missing tensor '" + suffix +
                     "' (not a CLIP text encoder checkpoint: no text_model.* tensors)");
  }
  config.prefix = embedding->name.substr(0, embedding->name.size() - suffix.size());
  if (embedding->shape.size() != 2 || embedding->shape[0] <= 0 || embedding->shape[1] <= 0) {
    return invalid_argument(file.path() + ": tensor '" + embedding->name + "' has shape " +
                            embedding->shape_string() + ", expected [vocab_size, width]");
  }
  config.vocab_size = embedding->shape[0];
  config.width = embedding->shape[1];

  const std::string position_name =
      config.prefix + "text_model.embeddings.position_embedding.weight";
  const TensorInfo* position = file.find(position_name);
  if (position == nullptr) {
    return not_found(file.path() + ": missing tensor '" + position_name + "'");
  }
  if (position->shape.size() != 2 || position->shape[0] <= 0 ||
      position->shape[1] != config.width) {
    return invalid_argument(file.path() + ": tensor '" + position_name + "' has shape " +
                            position->shape_string() + ", expected [max_positions, " +
                            std::to_string(config.width) + "]");
  }
  config.max_positions = position->shape[0];

  while (file.contains(config.prefix + "text_model.encoder.layers." +
                       std::to_string(config.n_layers) + ".layer_norm1.weight")) {
    ++config.n_layers;
  }
  if (config.n_layers == 0) {
    return not_found(file.path() + ": missing tensor '" + config.prefix +
                     "text_model.encoder.layers.0.layer_norm1.weight' (no encoder layers)");
  }
  const std::string fc1_name = config.prefix + "text_model.encoder.layers.0.mlp.fc1.weight";
  const TensorInfo* fc1 = file.find(fc1_name);
  if (fc1 == nullptr) return not_found(file.path() + ": missing tensor '" + fc1_name + "'");
  if (fc1->shape.size() != 2 || fc1->shape[0] <= 0 || fc1->shape[1] != config.width) {
    return invalid_argument(file.path() + ": tensor '" + fc1_name + "' has shape " +
                            fc1->shape_string() + ", expected [mlp_hidden, " +
                            std::to_string(config.width) + "]");
  }
  config.mlp_hidden = fc1->shape[0];

  if (options.n_heads < 0) {
    return invalid_argument("CLIP text encoder: negative head count " +
                            std::to_string(options.n_heads));
  }
  config.n_heads = options.n_heads;
  if (config.n_heads == 0) {
    if (config.width % 64 != 0) {
      return invalid_argument(file.path() + ": width " + std::to_string(config.width) +
                              " is not a multiple of 64, so the head count cannot be guessed; "
                              "give num_attention_heads in config.json");
    }
    config.n_heads = config.width / 64;
  }
  if (config.width % config.n_heads != 0) {
    return invalid_argument(file.path() + ": width " + std::to_string(config.width) +
                            " is not divisible by the head count " +
                            std::to_string(config.n_heads));
  }
  config.head_dim = config.width / config.n_heads;

  auto impl = std::make_unique<Impl>();
  impl->backend = &backend;
  impl->store = std::move(store);
  impl->config = config;
  TESSERA_RETURN_IF_ERROR(impl->load_weights());
  return ClipTextEncoder(std::move(impl));
}

Expected<ClipTextEncoder> ClipTextEncoder::load(const std::string& path, kernels::Backend& backend,
                                                WeightFormat format) {
  std::error_code ec;
  std::string weights = path;
  std::string config;
  const bool names_a_file =
      path.size() >= 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
  if (fs::is_directory(path, ec) || (!names_a_file && !fs::exists(path, ec))) {
    weights = (fs::path(path) / "model.safetensors").string();
    config = (fs::path(path) / "config.json").string();
  } else {
    config = (fs::path(path).parent_path() / "config.json").string();
  }
  if (!fs::exists(weights, ec)) {
    return not_found("CLIP text encoder: file not found: " + weights);
  }
  TESSERA_ASSIGN_OR_RETURN(const int64_t heads, read_clip_num_heads(config));
  TESSERA_ASSIGN_OR_RETURN(SafeTensors file, SafeTensors::open(weights));
  Options options;
  options.n_heads = heads;
  return create(WeightStore(std::move(file), format), backend, options);
}

Expected<const float*> ClipTextEncoder::encode(const int32_t* ids, const int32_t* valid_lengths,
                                               int64_t batch, int64_t seq_len,
                                               std::vector<std::vector<float>>* hidden_states) {
  Impl& m = *impl_;
  const ClipTextConfig& c = m.config;
  if (batch <= 0)
    return invalid_argument("CLIP encode: batch must be positive, got " + std::to_string(batch));
  if (seq_len <= 0 || seq_len > c.max_positions) {
    return invalid_argument("CLIP encode: sequence length " + std::to_string(seq_len) +
                            " outside [1, " + std::to_string(c.max_positions) + "]");
  }
  if (ids == nullptr) return invalid_argument("CLIP encode: null ids");
  for (int64_t i = 0; i < batch * seq_len; ++i) {
    if (ids[i] < 0 || ids[i] >= c.vocab_size) {
      return invalid_argument("CLIP encode: token id " + std::to_string(ids[i]) + " at sequence " +
                              std::to_string(i / seq_len) + " position " +
                              std::to_string(i % seq_len) + " is outside the vocabulary [0, " +
                              std::to_string(c.vocab_size) + ")");
    }
  }
  if (valid_lengths != nullptr) {
    for (int64_t b = 0; b < batch; ++b) {
      if (valid_lengths[b] < 1 || valid_lengths[b] > seq_len) {
        return invalid_argument("CLIP encode: valid length " + std::to_string(valid_lengths[b]) +
                                " of sequence " + std::to_string(b) + " outside [1, " +
                                std::to_string(seq_len) + "]");
      }
    }
  }
  TESSERA_RETURN_IF_ERROR(m.ensure_capacity(batch));
  if (hidden_states != nullptr) hidden_states->clear();

  kernels::Backend& be = *m.backend;
  const int64_t rows = batch * seq_len;
  const int64_t width = c.width;
  const size_t act = static_cast<size_t>(rows * width);
  float* x = m.x.as<float>();
  float* h = m.h.as<float>();
  TESSERA_RETURN_IF_ERROR(be.upload(m.ids.data(), ids, size_t(rows) * sizeof(int32_t)));
  TESSERA_RETURN_IF_ERROR(be.embedding_gather(m.token_embedding, m.ids.as<int32_t>(), rows, x));
  for (int64_t b = 0; b < batch; ++b) {
    float* xb = x + b * seq_len * width;
    TESSERA_RETURN_IF_ERROR(be.add(xb, m.position_embedding, xb, seq_len * width));
  }
  TESSERA_RETURN_IF_ERROR(m.snapshot(x, act, hidden_states));

  for (const Layer& layer : m.layers) {
    TESSERA_RETURN_IF_ERROR(
        be.layer_norm(x, layer.ln1_weight, layer.ln1_bias, h, rows, width, c.eps));
    TESSERA_RETURN_IF_ERROR(be.linear(h, rows, layer.q.weight, layer.q.bias, m.q.as<float>()));
    TESSERA_RETURN_IF_ERROR(be.linear(h, rows, layer.k.weight, layer.k.bias, m.k.as<float>()));
    TESSERA_RETURN_IF_ERROR(be.linear(h, rows, layer.v.weight, layer.v.bias, m.v.as<float>()));
    TESSERA_RETURN_IF_ERROR(m.attention(batch, seq_len, valid_lengths));
    TESSERA_RETURN_IF_ERROR(
        be.linear(m.attn.as<float>(), rows, layer.out.weight, layer.out.bias, h));
    TESSERA_RETURN_IF_ERROR(be.add(x, h, x, rows * width));

    TESSERA_RETURN_IF_ERROR(
        be.layer_norm(x, layer.ln2_weight, layer.ln2_bias, h, rows, width, c.eps));
    float* mlp = m.mlp.as<float>();
    TESSERA_RETURN_IF_ERROR(be.linear(h, rows, layer.fc1.weight, layer.fc1.bias, mlp));
    TESSERA_RETURN_IF_ERROR(be.quick_gelu(mlp, mlp, rows * c.mlp_hidden));
    TESSERA_RETURN_IF_ERROR(be.linear(mlp, rows, layer.fc2.weight, layer.fc2.bias, h));
    TESSERA_RETURN_IF_ERROR(be.add(x, h, x, rows * width));
    TESSERA_RETURN_IF_ERROR(m.snapshot(x, act, hidden_states));
  }
  float* out = m.out.as<float>();
  TESSERA_RETURN_IF_ERROR(
      be.layer_norm(x, m.final_ln_weight, m.final_ln_bias, out, rows, width, c.eps));
  return static_cast<const float*>(out);
}

Status ClipTextEncoder::encode_to_host(const int32_t* ids, const int32_t* valid_lengths,
                                       int64_t batch, int64_t seq_len, std::vector<float>* out) {
  if (out == nullptr) return invalid_argument("CLIP encode_to_host: null output");
  TESSERA_ASSIGN_OR_RETURN(const float* result, encode(ids, valid_lengths, batch, seq_len));
  out->resize(static_cast<size_t>(batch * seq_len * config_.width));
  return impl_->backend->download(out->data(), result, out->size() * sizeof(float));
}

}  // namespace tessera::text
