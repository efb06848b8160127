#include "engine/shape/pipeline.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "core/mapped_file.h"

namespace tessera::shape {

namespace {

bool is_cancelled(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}

// What Tessera reads from a model directory's model.json card (tessera-tiny has one; the released
// Cube 3D folders do not): tokens.fill_token_id, defaults.resolution and the example prompts
// (example_prompts, else "a <family>" for each of families), each optional.
struct ModelCard {
  std::optional<int32_t> fill_token_id;
  std::optional<int> default_resolution;
  std::optional<int> coarse_base;           // from defaults.coarse_resolution (2^k + 1)
  std::optional<float> near_surface_logit;  // defaults.near_surface_logit
  std::vector<std::string> example_prompts;
};

// "a box", "an arch": the indefinite article English puts before a noun (by its first letter,
// as the training captions do).
std::string with_article(const std::string& noun) {
  const bool vowel = !noun.empty() && std::string("aeiou").find(noun[0]) != std::string::npos;
  return (vowel ? "an " : "a ") + noun;
}

// A JSON array of non-empty strings (at most 256 of at most 200 bytes each: a card is not a
// corpus).
Expected<std::vector<std::string>> read_string_list(const nlohmann::json& v,
                                                    const std::string& what) {
  if (!v.is_array()) return corrupt_data(what + " is not an array of strings");
  if (v.size() > 256)
    return corrupt_data(what + " has " + std::to_string(v.size()) + " entries (256 at most)");
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string() || v[i].get<std::string>().empty() ||
        v[i].get<std::string>().size() > 200) {
      return corrupt_data(what + "[" + std::to_string(i) +
                          "] is not a non-empty string of at most 200 bytes");
    }
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

// An optional JSON file of the model folder: nullopt when absent; present but not a JSON object is
// an error naming it (it belongs to the model and something is wrong with it).
Expected<std::optional<nlohmann::json>> read_optional_json_object(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::optional<nlohmann::json>();
  TESSERA_ASSIGN_OR_RETURN(std::string text, read_file(path));
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return corrupt_data(path + ": not a JSON object");
  return std::optional<nlohmann::json>(std::move(doc));
}

Expected<ModelCard> read_model_card(const std::string& dir, int64_t codebook_size) {
  ModelCard out;
  const std::string path = (std::filesystem::path(dir) / "model.json").string();
  TESSERA_ASSIGN_OR_RETURN(const std::optional<nlohmann::json> doc,
                           read_optional_json_object(path));
  if (!doc) return out;
  const nlohmann::json& card = *doc;
  if (const auto tokens = card.find("tokens"); tokens != card.end() && tokens->is_object()) {
    const auto fill = tokens->find("fill_token_id");
    if (fill != tokens->end() && !fill->is_null()) {
      if (!fill->is_number_integer()) {
        return corrupt_data(path + ": tokens.fill_token_id is not an integer");
      }
      const int64_t id = fill->get<int64_t>();
      if (id < 0 || id >= codebook_size) {
        return corrupt_data(path + ": tokens.fill_token_id " + std::to_string(id) +
                            " is outside the codebook [0, " + std::to_string(codebook_size) + ")");
      }
      out.fill_token_id = static_cast<int32_t>(id);
    }
  }
  if (const auto defaults = card.find("defaults");
      defaults != card.end() && defaults->is_object()) {
    const auto res = defaults->find("resolution");
    if (res != defaults->end() && !res->is_null()) {
      if (!res->is_number_integer()) {
        return corrupt_data(path + ": defaults.resolution is not an integer");
      }
      const int64_t r = res->get<int64_t>();
      if (r < 0 || r > 1025 || !resolution_base(static_cast<int>(r)).ok()) {
        return corrupt_data(path + ": defaults.resolution " + std::to_string(r) +
                            " is not 2^k + 1 with k in [1, 10]");
      }
      out.default_resolution = static_cast<int>(r);
    }
    const auto coarse = defaults->find("coarse_resolution");
    if (coarse != defaults->end() && !coarse->is_null()) {
      const int64_t r = coarse->is_number_integer() ? coarse->get<int64_t>() : -1;
      const auto k = r >= 0 && r <= 1025 ? resolution_base(static_cast<int>(r))
                                         : Expected<int>(invalid_argument(""));
      if (!k.ok()) {
        return corrupt_data(path +
                            ": defaults.coarse_resolution is not 2^k + 1 with k in "
                            "[1, 10]");
      }
      out.coarse_base = *k;
    }
    const auto near = defaults->find("near_surface_logit");
    if (near != defaults->end() && !near->is_null()) {
      if (!near->is_number() || !(near->get<double>() >= 0.0) || near->get<double>() > 100.0) {
        return corrupt_data(path + ": defaults.near_surface_logit is not a number in [0, 100]");
      }
      out.near_surface_logit = near->get<float>();
    }
  }
  if (const auto ex = card.find("example_prompts"); ex != card.end() && !ex->is_null()) {
    TESSERA_ASSIGN_OR_RETURN(out.example_prompts,
                             read_string_list(*ex, path + ": example_prompts"));
  } else if (const auto fam = card.find("families"); fam != card.end() && !fam->is_null()) {
    TESSERA_ASSIGN_OR_RETURN(std::vector<std::string> families,
                             read_string_list(*fam, path + ": families"));
    for (const std::string& f : families) out.example_prompts.push_back(with_article(f));
  }
  return out;
}

// The diffusion model's vocabulary extension (text_encoder/extension.json, written by
// tools/train/diffusion/extend_vocab.py): whole-word tokens for colour / material / background
// words that the shape GPT never saw in training. Returns their ids ({} when the file is absent);
// a present but malformed file is an error naming it.
Expected<std::vector<int32_t>> read_image_only_token_ids(const std::string& text_encoder_file,
                                                         size_t vocab_size) {
  std::vector<int32_t> ids;
  const std::string path =
      (std::filesystem::path(text_encoder_file).parent_path() / "extension.json").string();
  TESSERA_ASSIGN_OR_RETURN(const std::optional<nlohmann::json> doc,
                           read_optional_json_object(path));
  if (!doc) return ids;
  const nlohmann::json& ext = *doc;
  const auto words = ext.find("words");
  if (words == ext.end() || !words->is_object()) {
    return corrupt_data(path + ": no \"words\" object (word -> token id)");
  }
  for (const auto& [word, id] : words->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= static_cast<int64_t>(vocab_size)) {
      return corrupt_data(path + ": words." + word + " is not a token id of the " +
                          std::to_string(vocab_size) + "-token vocabulary");
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

Expected<int> resolution_base(int resolution) {
  for (int k = 1; k <= 10; ++k) {
    if (resolution == (1 << k) + 1) return k;
  }
  return invalid_argument(
      "resolution " + std::to_string(resolution) +
      " is not 2^k + 1 points per axis with k in [1, 10] (e.g. 33, 65, 129, 257)");
}

ShapePipeline::~ShapePipeline() = default;

Expected<std::unique_ptr<ShapePipeline>> ShapePipeline::load(const std::string& model_dir,
                                                             const PipelineOptions& options,
                                                             kernels::Backend* backend) {
  if (backend != nullptr) return load_on(model_dir, options, backend, nullptr, "");
  TESSERA_ASSIGN_OR_RETURN(kernels::BackendSelection selection,
                           kernels::make_backend(options.device));
  const bool auto_on_gpu =
      options.device == kernels::DeviceChoice::kAuto && selection.backend->device() != Device::kCpu;
  Expected<std::unique_ptr<ShapePipeline>> loaded =
      load_on(model_dir, options, nullptr, std::move(selection.backend), std::move(selection.note));
  if (loaded.ok() || !auto_on_gpu || loaded.status().code() != ErrorCode::kOutOfMemory) {
    return loaded;
  }
  // auto found a GPU too small for this model: the CPU, as if there were no GPU. (The failed
  // pipeline, and with it the GPU backend and its memory, is gone by now.)
  return load_on(model_dir, options, nullptr, kernels::make_cpu_backend(),
                 "using the CPU backend: the models do not fit on the GPU (" +
                     loaded.status().message() + ")");
}

Expected<std::unique_ptr<ShapePipeline>> ShapePipeline::load_on(
    const std::string& model_dir, const PipelineOptions& options, kernels::Backend* external,
    std::unique_ptr<kernels::Backend> owned, std::string note) {
  std::unique_ptr<ShapePipeline> p(new ShapePipeline());
  p->owned_backend_ = std::move(owned);
  kernels::Backend* backend = external != nullptr ? external : p->owned_backend_.get();
  if (backend == nullptr) return internal_error("ShapePipeline: no backend to load on");
  p->backend_ = backend;
  p->backend_note_ = std::move(note);
  p->release_idle_pages_ = options.release_idle_pages;

  ModelDirOptions dir_options;
  dir_options.weights = options.weights;
  dir_options.check_finite = options.check_finite;
  dir_options.clip_vocab_fallback = options.clip_vocab_fallback;
  TESSERA_ASSIGN_OR_RETURN(ModelDir opened, open_model_dir(model_dir, dir_options));
  p->model_ = std::make_unique<ModelDir>(std::move(opened));
  ModelDir& m = *p->model_;

  TESSERA_ASSIGN_OR_RETURN(text::ClipTokenizer tokenizer, text::ClipTokenizer::load(m.paths.vocab));
  p->tokenizer_.emplace(std::move(tokenizer));
  TESSERA_ASSIGN_OR_RETURN(
      p->image_only_ids_,
      read_image_only_token_ids(m.paths.text_encoder, p->tokenizer_->vocab_size()));
  for (const char* article : {"a</w>", "an</w>", "the</w>"}) {
    const int32_t id = p->tokenizer_->token_to_id(article);
    if (id >= 0) p->article_ids_.push_back(id);
  }
  text::ClipTextEncoderOptions clip_options;
  clip_options.n_heads = m.text_heads;
  auto encoder = text::ClipTextEncoder::create(std::move(m.text_encoder), *backend, clip_options);
  if (!encoder.ok()) return encoder.status().with_context(m.paths.text_encoder);
  p->text_encoder_.emplace(std::move(encoder).value());

  auto decoder = ShapeDecoder::load(m.shape_tokenizer, *backend, options.occupancy_chunk);
  if (!decoder.ok()) return decoder.status().with_context(m.paths.shape_tokenizer);
  p->decoder_ = std::move(decoder).value();
  const ShapeDecoderConfig& dc = p->decoder_->config();

  NormalizedCodebook codebook;
  codebook.rows = dc.num_codes;
  codebook.dim = dc.embed_dim;
  codebook.values = p->decoder_->normalized_codebook();
  GptLoadOptions gpt_options;
  gpt_options.bf16 = options.weights == WeightFormat::kBF16;
  gpt_options.int8 = options.gpt_int8;
  auto gpt = CubeGpt::load(m.shape_gpt.file(), codebook, *backend, gpt_options);
  if (!gpt.ok()) return gpt.status().with_context(m.paths.shape_gpt);
  p->gpt_ = std::move(gpt).value();
  p->gpt_->set_num_latents(dc.num_latents);
  const GptConfig& gc = p->gpt_->config();

  // The condition is the CLIP hidden state at all text_len positions: the encoder must have that
  // many positions and the GPT's text_proj must take its width.
  const text::ClipTextConfig& tc = p->text_encoder_->config();
  if (tc.max_positions < gc.text_len) {
    return invalid_argument("model directory '" + model_dir + "': the CLIP text encoder has " +
                            std::to_string(tc.max_positions) + " positions, the GPT needs " +
                            std::to_string(gc.text_len));
  }
  if (tc.width != gc.text_embed_dim) {
    return invalid_argument("model directory '" + model_dir + "': CLIP width " +
                            std::to_string(tc.width) + " differs from the GPT's text_proj input " +
                            std::to_string(gc.text_embed_dim));
  }
  TESSERA_ASSIGN_OR_RETURN(p->generator_, ShapeGenerator::create(*p->gpt_, dc.num_latents));

  TESSERA_ASSIGN_OR_RETURN(const ModelCard card, read_model_card(m.paths.dir, gc.codebook_size));
  p->learned_fill_ = card.fill_token_id.has_value();
  p->fill_token_id_ = card.fill_token_id.value_or(0);
  p->default_resolution_ = card.default_resolution.value_or(kReferenceResolution);
  p->default_coarse_base_ = card.coarse_base.value_or(kDefaultCoarseBase);
  p->default_near_surface_logit_ = card.near_surface_logit.value_or(0.0f);
  p->example_prompts_ = card.example_prompts;

  p->clip_ids_.resize(static_cast<size_t>(gc.text_len));
  p->clip_lengths_.resize(1);
  p->filled_ids_.resize(static_cast<size_t>(dc.num_latents));
  p->latents_.resize(static_cast<size_t>(dc.num_latents * dc.width));
  if (p->release_idle_pages_) {  // the load's checks touched every mapped weight: none is in use
                                 // yet
    p->text_encoder_->release_weight_pages();
    m.shape_tokenizer.file().drop_all_pages();
    p->gpt_->release_weight_pages();
  }
  return p;
}

std::vector<int32_t> ShapePipeline::shape_prompt_ids(std::string_view text, int* dropped) const {
  std::vector<int32_t> ids = tokenizer_->encode(text);
  if (image_only_ids_.empty()) return ids;
  const auto image_only = [&](int32_t id) {
    return std::binary_search(image_only_ids_.begin(), image_only_ids_.end(), id);
  };
  const auto is_article = [&](int32_t id) {
    return std::find(article_ids_.begin(), article_ids_.end(), id) != article_ids_.end();
  };
  // ids = [BOS, words..., EOS]. Drop the image-only words, then the articles left with no word
  // after them ("a torus on a dark background" -> "a torus", not "a torus a").
  std::vector<int32_t> kept;
  kept.reserve(ids.size());
  const size_t before = ids.size();
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    if (i == 0 || !image_only(ids[i])) kept.push_back(ids[i]);
  }
  // Only when a word was dropped: a prompt without image-only words is passed on untouched.
  while (kept.size() + 1 < before && kept.size() > 1 && is_article(kept.back())) kept.pop_back();
  kept.push_back(ids.back());
  if (dropped != nullptr && kept.size() < before) *dropped = static_cast<int>(before - kept.size());
  return kept;
}

Expected<EncodedPrompt> ShapePipeline::encode_prompt(std::string_view prompt, Trace* trace,
                                                     const std::atomic<bool>* cancel) {
  if (is_cancelled(cancel)) return cancelled("cancelled before text encoding");
  ScopedTimer timer(trace, kTraceText);
  const int context = static_cast<int>(gpt_->config().text_len);
  const int32_t eos = tokenizer_->eos_id();
  // One row at a time (batch 1) for both the prompt and "": the unconditional hidden states are
  // then bit-identical from job to job, whatever else ran, so greedy generation is reproducible.
  EncodedPrompt encoded;
  auto encode_one = [&](std::string_view text, std::vector<float>* out) -> Status {
    std::vector<int32_t> ids = shape_prompt_ids(text, &encoded.image_only_tokens);
    if (ids.size() > static_cast<size_t>(context)) {
      ids.resize(static_cast<size_t>(context));
      ids.back() = eos;
    }
    const auto length = static_cast<int32_t>(ids.size());
    ids.resize(static_cast<size_t>(context), eos);
    std::copy(ids.begin(), ids.end(), clip_ids_.begin());
    clip_lengths_[0] = length;
    return text_encoder_->encode_to_host(clip_ids_.data(), clip_lengths_.data(), 1, context, out);
  };
  encoded.prompt_tokens = static_cast<int>(shape_prompt_ids(prompt, nullptr).size());
  encoded.truncated = encoded.prompt_tokens > context;
  const Status st = [&]() -> Status {
    TESSERA_RETURN_IF_ERROR(encode_one(prompt, &encoded.cond));
    if (uncond_cache_.empty()) TESSERA_RETURN_IF_ERROR(encode_one("", &uncond_cache_));
    return Status();
  }();
  if (release_idle_pages_) text_encoder_->release_weight_pages();
  TESSERA_RETURN_IF_ERROR(st);
  encoded.uncond = uncond_cache_;
  return encoded;
}

Expected<std::vector<int32_t>> ShapePipeline::generate(const EncodedPrompt& prompt,
                                                       const GenerationOptions& options,
                                                       const TokenCallback& on_token, Trace* trace,
                                                       const std::atomic<bool>* cancel) {
  CandidateTokenCallback each;
  if (on_token) each = [&](int64_t, int64_t i, int32_t id, double ms) { on_token(i, id, ms); };
  TESSERA_ASSIGN_OR_RETURN(auto tokens,
                           generate_candidates({&prompt}, {CandidateSpec{0, options.sampling.seed}},
                                               options, each, trace, cancel));
  return std::move(tokens[0]);
}

Expected<std::vector<std::vector<int32_t>>> ShapePipeline::generate_candidates(
    const std::vector<const EncodedPrompt*>& prompts, const std::vector<CandidateSpec>& candidates,
    const GenerationOptions& options, const CandidateTokenCallback& on_token, Trace* trace,
    const std::atomic<bool>* cancel) {
  const GptConfig& c = gpt_->config();
  const size_t hidden = static_cast<size_t>(c.text_len * c.text_embed_dim);
  for (const EncodedPrompt* prompt : prompts) {
    if (prompt == nullptr || prompt->cond.size() != hidden || prompt->uncond.size() != hidden) {
      return invalid_argument(
          "generate: the encoded prompt holds " + std::to_string(prompt ? prompt->cond.size() : 0) +
          " / " + std::to_string(prompt ? prompt->uncond.size() : 0) + " values, expected " +
          std::to_string(hidden) + " (77 x CLIP width) each");
    }
  }
  if (options.num_tokens < 0 || options.num_tokens > num_latents()) {
    return invalid_argument("generate: num_tokens " + std::to_string(options.num_tokens) +
                            " outside [0, " + std::to_string(num_latents()) + "]");
  }
  if (options.bbox) {
    for (float v : *options.bbox) {
      if (!std::isfinite(v)) return invalid_argument("generate: bbox has a non-finite component");
    }
  }
  const int64_t count = static_cast<int64_t>(candidates.size());
  if (count < 1 || count > kMaxCandidates) {
    return invalid_argument("generate: " + std::to_string(count) + " candidates outside [1, " +
                            std::to_string(kMaxCandidates) + "]");
  }
  if (!generator_ || count > generator_->max_candidates()) {
    // Grow the cache (the old generator's memory is released first).
    generator_.reset();
    auto grown = ShapeGenerator::create(*gpt_, num_latents(), count);
    if (!grown.ok()) {  // e.g. out of memory: keep a single-generation cache and say why
      auto single = ShapeGenerator::create(*gpt_, num_latents(), 1);
      if (single.ok()) generator_ = std::move(single).value();
      return grown.status().with_context("generate: the cache for " + std::to_string(count) +
                                         " candidates");
    }
    generator_ = std::move(grown).value();
  }
  std::vector<ConditionInputs> inputs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    inputs[i].cond_hidden = prompts[i]->cond.data();
    inputs[i].uncond_hidden = prompts[i]->uncond.data();
    inputs[i].bbox = options.bbox;
  }
  GenerateOptions g;
  g.num_tokens = options.num_tokens;
  g.use_kv_cache = options.use_kv_cache;
  g.use_graphs = options.use_graphs;
  g.sampling = options.sampling;
  g.cancel = cancel;
  g.trace = trace;
  g.release_condition_pages = release_idle_pages_;
  auto tokens = generator_->generate_candidates(inputs, candidates, g, on_token);
  if (release_idle_pages_) gpt_->release_weight_pages();
  return tokens;
}

Status validate_token_ids(const std::vector<int32_t>& ids, int64_t num_latents, int64_t num_codes) {
  if (ids.empty()) return invalid_argument("shape tokens: no ids");
  if (static_cast<int64_t>(ids.size()) > num_latents) {
    return invalid_argument("shape tokens: " + std::to_string(ids.size()) +
                            " ids, the model decodes at most " + std::to_string(num_latents));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= num_codes) {
      return invalid_argument("shape tokens: id " + std::to_string(ids[i]) + " at position " +
                              std::to_string(i) + " is outside the codebook [0, " +
                              std::to_string(num_codes) + ")");
    }
  }
  return Status();
}

Status ShapePipeline::validate_tokens(const std::vector<int32_t>& ids) const {
  return validate_token_ids(ids, num_latents(), decoder_codes());
}

Status ShapePipeline::decode_latents(const std::vector<int32_t>& ids, Trace* trace) {
  latents_ready_ = false;
  TESSERA_RETURN_IF_ERROR(validate_tokens(ids));
  ScopedTimer timer(trace, kTraceLatentDecode);
  std::copy(ids.begin(), ids.end(), filled_ids_.begin());
  std::fill(filled_ids_.begin() + static_cast<std::ptrdiff_t>(ids.size()), filled_ids_.end(),
            fill_token_id_);
  const int64_t n = num_latents();
  TESSERA_RETURN_IF_ERROR(decoder_->decode_tokens(filled_ids_.data(), n, latents_.data()));
  TESSERA_RETURN_IF_ERROR(decoder_->set_latents(latents_.data(), n));
  latents_ready_ = true;
  return Status();
}

Expected<mesh::Mesh> ShapePipeline::extract_mesh(const MeshOptions& options, Trace* trace,
                                                 const std::atomic<bool>* cancel,
                                                 mesh::ExtractionStats* stats) {
  TESSERA_ASSIGN_OR_RETURN(mesh::Mesh result, extract_surface(options, trace, cancel, stats));
  {
    ScopedTimer timer(trace, kTraceCleanup);
    TESSERA_RETURN_IF_ERROR(mesh::cleanup(result, options.cleanup));
  }
  return result;
}

Expected<mesh::Mesh> ShapePipeline::extract_surface(const MeshOptions& options, Trace* trace,
                                                    const std::atomic<bool>* cancel,
                                                    mesh::ExtractionStats* stats) {
  if (!latents_ready_)
    return invalid_argument("extract_mesh: no latents (call decode_latents first)");
  const int resolution = resolve_resolution(options.resolution);
  TESSERA_ASSIGN_OR_RETURN(const int k, resolution_base(resolution));
  if (options.coarse_base < 0) {
    return invalid_argument("extract_mesh: coarse_base " + std::to_string(options.coarse_base) +
                            " must be >= 1 (0: the model's)");
  }
  mesh::ExtractionOptions ex;
  ex.resolution_base = k;
  ex.coarse_base =
      std::min(options.coarse_base > 0 ? options.coarse_base : default_coarse_base_, k);
  ex.near_surface_logit =
      options.near_surface_logit >= 0.0f ? options.near_surface_logit : default_near_surface_logit_;
  mesh::OccupancyFn occupancy = [&](const float* points, int64_t n, float* logits) -> Status {
    if (is_cancelled(cancel)) return cancelled("cancelled during surface extraction");
    return decoder_->query(points, n, logits);
  };
  // On a GPU the finest level's surface cells are polygonized on the device (the same surface).
  if (kernels::ExtractionOps* device = backend_->extraction()) {
    ex.polygonize = [device](const kernels::CellGrid& grid, const int64_t* cells,
                             const float* corners, int64_t n, std::vector<float>* positions,
                             std::vector<uint32_t>* triangles) {
      return device->polygonize_cells(grid, cells, corners, n, positions, triangles);
    };
  }
  Expected<mesh::Mesh> extracted = [&] {
    ScopedTimer timer(trace, kTraceExtraction);
    return mesh::extract_coarse_to_fine(occupancy, ex, stats);
  }();
  if (release_idle_pages_) model_->shape_tokenizer.file().drop_all_pages();
  if (!extracted.ok()) {
    const Status& st = extracted.status();
    // extraction.h reports an empty field as kInvalidArgument "no surface"; here it is not the
    // caller's argument that is wrong but the shape: report it as such.
    if (st.code() == ErrorCode::kInvalidArgument &&
        st.message().find("no surface") != std::string::npos) {
      return not_found("no surface at resolution " + std::to_string(resolution) +
                       ": the decoded shape is empty (" + st.message() + ")");
    }
    return st;
  }
  return std::move(extracted).value();
}

Expected<mesh::Mesh> ShapePipeline::tokens_to_mesh(const std::vector<int32_t>& ids,
                                                   const MeshOptions& options, Trace* trace,
                                                   const std::atomic<bool>* cancel,
                                                   mesh::ExtractionStats* stats) {
  if (is_cancelled(cancel)) return cancelled("cancelled before latent decoding");
  // Validate the resolution before the (costly) decode.
  TESSERA_RETURN_IF_ERROR(resolution_base(resolve_resolution(options.resolution)).status());
  TESSERA_RETURN_IF_ERROR(decode_latents(ids, trace));
  return extract_mesh(options, trace, cancel, stats);
}

}  // namespace tessera::shape
