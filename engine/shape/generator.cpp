#include "engine/shape/generator.h"

#include <algorithm>
#include <array>
#include <string>

namespace tessera::shape {

Expected<std::unique_ptr<ShapeGenerator>> ShapeGenerator::create(const CubeGpt& model,
                                                                 int64_t max_tokens) {
  const GptConfig& c = model.config();
  if (max_tokens == 0) max_tokens = c.num_latents;
  if (max_tokens < 1) {
    return invalid_argument(
        "ShapeGenerator: number of tokens unknown (num_latents not set) or < 1");
  }
  std::unique_ptr<ShapeGenerator> g(new ShapeGenerator());
  g->model_ = &model;
  TESSERA_ASSIGN_OR_RETURN(g->session_, GptSession::create(model, 2, max_tokens));
  g->logits_.resize(static_cast<size_t>(2 * c.vocab_size));
  g->hidden_.resize(static_cast<size_t>(2 * c.text_len * c.text_embed_dim));
  g->guided_.resize(static_cast<size_t>(c.codebook_size));
  g->history_.resize(static_cast<size_t>(2 * max_tokens));
  g->step_ids_.resize(static_cast<size_t>(2 * max_tokens));
  return g;
}

Expected<std::vector<int32_t>> ShapeGenerator::generate(const ConditionInputs& inputs,
                                                        const GenerateOptions& options,
                                                        const TokenCallback& on_token) {
  const GptConfig& c = model_->config();
  const int64_t n = tokens_to_generate(options.num_tokens, c.num_latents);
  if (n < 1 || n > session_->max_shape_tokens()) {
    return invalid_argument("generate: num_tokens " + std::to_string(n) + " outside [1, " +
                            std::to_string(session_->max_shape_tokens()) + "]");
  }
  if (!(options.guidance_scale >= 0.0f)) {
    return invalid_argument("generate: guidance_scale " + std::to_string(options.guidance_scale) +
                            " must be >= 0");
  }
  if (options.sampler.sample) TESSERA_RETURN_IF_ERROR(validate_sampler_options(options.sampler));
  if (!inputs.cond_hidden) return invalid_argument("generate: no condition (CLIP hidden states)");
  const bool guided = options.guidance_scale > 0.0f;
  if (guided && !inputs.uncond_hidden) {
    return invalid_argument(
        "generate: guidance needs the unconditional (empty prompt) hidden states");
  }
  const int64_t batch = guided ? 2 : 1;
  const size_t hidden_n = static_cast<size_t>(c.text_len * c.text_embed_dim);
  std::copy(inputs.cond_hidden, inputs.cond_hidden + hidden_n, hidden_.begin());
  if (guided)
    std::copy(inputs.uncond_hidden, inputs.uncond_hidden + hidden_n, hidden_.begin() + hidden_n);
  float bbox[6] = {0, 0, 0, 0, 0, 0};
  if (inputs.bbox) std::copy(inputs.bbox->begin(), inputs.bbox->end(), bbox);
  {
    ScopedTimer timer(options.trace, "gpt.condition");
    TESSERA_RETURN_IF_ERROR(session_->set_condition(batch, hidden_.data(), bbox));
  }
  if (options.trace) options.trace->keep_samples("gpt.decode");
  if (options.guided_logits) {
    options.guided_logits->reserve(options.guided_logits->size() +
                                   static_cast<size_t>(n * c.codebook_size));
  }

  if (options.use_kv_cache && !options.guided_logits && model_->backend().device_resident()) {
    return generate_resident(n, batch, guided, options, on_token);
  }

  Sampler sampler(options.sampler, c.codebook_size);
  const int64_t k = c.codebook_size, v = c.vocab_size;
  std::vector<int32_t> tokens;
  tokens.reserve(static_cast<size_t>(n));
  for (int64_t b = 0; b < batch; ++b) history_[static_cast<size_t>(b * n)] = c.bos_id();
  for (int64_t i = 0; i < n; ++i) {
    if (options.cancel && options.cancel->load(std::memory_order_relaxed)) {
      return cancelled("generation cancelled after " + std::to_string(i) + " of " +
                       std::to_string(n) + " tokens");
    }
    Stopwatch watch;
    if (options.use_kv_cache) {
      for (int64_t b = 0; b < batch; ++b) {
        step_ids_[static_cast<size_t>(b)] = history_[static_cast<size_t>(b * n + i)];
      }
      TESSERA_RETURN_IF_ERROR(i == 0 ? session_->prefill(step_ids_.data(), logits_.data())
                                     : session_->decode(step_ids_.data(), logits_.data()));
    } else {
      // Pack the rows' histories [batch][i + 1] contiguously for the full recompute.
      for (int64_t b = 0; b < batch; ++b) {
        std::copy(history_.begin() + b * n, history_.begin() + b * n + i + 1,
                  step_ids_.begin() + b * (i + 1));
      }
      TESSERA_RETURN_IF_ERROR(
          session_->forward_full(step_ids_.data(), i + 1, logits_.data(), nullptr));
    }
    // Restrict to the codes and mix the guidance in f32, as the reference does.
    const float* cond = logits_.data();
    if (guided) {
      const float g = kernels::guidance_weight(options.guidance_scale, i, n);
      const float* uncond = logits_.data() + v;
      for (int64_t j = 0; j < k; ++j) {
        guided_[static_cast<size_t>(j)] = (1.0f + g) * cond[j] - g * uncond[j];
      }
    } else {
      std::copy(cond, cond + k, guided_.begin());
    }
    if (options.guided_logits) {
      options.guided_logits->insert(options.guided_logits->end(), guided_.begin(), guided_.end());
    }
    auto next = sampler.next(guided_.data(), k);
    if (!next.ok()) {
      return next.status().with_context("generate: step " + std::to_string(i) + " of " +
                                        std::to_string(n));
    }
    const int32_t id = *next;
    tokens.push_back(id);
    if (i + 1 < n) {
      for (int64_t b = 0; b < batch; ++b) history_[static_cast<size_t>(b * n + i + 1)] = id;
    }
    const double ms = watch.elapsed_ms();
    if (options.trace) options.trace->add(i == 0 ? "gpt.prefill" : "gpt.decode", ms);
    if (on_token) on_token(i, id, ms);
  }
  return tokens;
}

kernels::TokenChoice make_token_choice(const GptConfig& c, bool guided, float guidance_scale,
                                       int64_t total_steps, const SamplerOptions& sampler) {
  kernels::TokenChoice choice;
  choice.codes = c.codebook_size;
  choice.row_stride = c.vocab_size;
  choice.guided = guided;
  choice.guidance_scale = guidance_scale;
  choice.total_steps = total_steps;
  choice.sampling.sample = sampler.sample;
  choice.sampling.temperature = sampler.temperature;
  choice.sampling.top_k = sampler.top_k;
  choice.sampling.top_p = sampler.top_p;
  return choice;
}

Status reset_resident_state(kernels::Backend& be, void* step, void* rng, int64_t first,
                            uint64_t seed) {
  const std::array<uint64_t, 4> words = Xoshiro256(seed).state();
  TESSERA_RETURN_IF_ERROR(be.upload(step, &first, sizeof(first)));
  return be.upload(rng, words.data(), sizeof(words));
}

Expected<std::vector<int32_t>> ShapeGenerator::generate_resident(int64_t n, int64_t batch,
                                                                 bool guided,
                                                                 const GenerateOptions& options,
                                                                 const TokenCallback& on_token) {
  const GptConfig& c = model_->config();
  kernels::Backend& be = model_->backend();
  const int64_t ring_size = session_->max_shape_tokens();
  const size_t ring_bytes = static_cast<size_t>(ring_size) * sizeof(int32_t);
  auto ensure = [&](kernels::DeviceBuffer* buffer, size_t bytes, bool host_visible) -> Status {
    if (buffer->data() != nullptr && buffer->bytes() >= bytes) return {};
    TESSERA_ASSIGN_OR_RETURN(*buffer,
                             host_visible ? be.allocate_host_visible(bytes) : be.allocate(bytes));
    return {};
  };
  TESSERA_RETURN_IF_ERROR(ensure(&step_buf_, sizeof(int64_t), false));
  TESSERA_RETURN_IF_ERROR(ensure(&rng_buf_, 4 * sizeof(uint64_t), false));
  TESSERA_RETURN_IF_ERROR(ensure(&ring_buf_, ring_bytes, true));
  TESSERA_RETURN_IF_ERROR(
      reset_resident_state(be, step_buf_.data(), rng_buf_.data(), 0, options.sampler.seed));
  const kernels::TokenChoice choice =
      make_token_choice(c, guided, options.guidance_scale, n, options.sampler);
  int64_t* step = step_buf_.as<int64_t>();
  int32_t* ring = ring_buf_.as<int32_t>();  // host-visible: read directly after synchronize()
  auto choose = [&]() {
    return be.choose_token(session_->device_logits(), choice, step, rng_buf_.as<uint64_t>(),
                           session_->device_ids(), batch, ring, ring_size);
  };

  // Token 0: prefill from BOS (host ids), then the choice on the backend.
  for (int64_t b = 0; b < batch; ++b) step_ids_[static_cast<size_t>(b)] = c.bos_id();
  // Token i >= 1: the GPT step at *step == i and the choice, eagerly or by replaying `recording`.
  int64_t recording = -1;
  auto launch = [&](int64_t i) -> Status {
    if (i == 0) {
      TESSERA_RETURN_IF_ERROR(session_->prefill(step_ids_.data(), logits_.data()));
      return choose();
    }
    if (recording >= 0) {
      TESSERA_RETURN_IF_ERROR(be.replay(recording));
    } else {
      TESSERA_RETURN_IF_ERROR(session_->decode_at(step));
      TESSERA_RETURN_IF_ERROR(choose());
    }
    return session_->advance(1);
  };
  struct DropRecording {
    kernels::Backend& be;
    int64_t* id;
    ~DropRecording() {
      if (*id >= 0) be.drop_recording(*id);
    }
  } drop{be, &recording};

  const bool record = options.use_graphs && be.can_record() && n > 2;
  const int64_t lag = record ? kRingLag : 1;  // tokens launched ahead of the host's reads
  std::vector<int32_t> tokens;
  tokens.reserve(static_cast<size_t>(n));
  int64_t launched = 0;  // tokens [0, launched) are queued
  Stopwatch watch;
  while (static_cast<int64_t>(tokens.size()) < n) {
    const int64_t done = static_cast<int64_t>(tokens.size());
    if (options.cancel && options.cancel->load(std::memory_order_relaxed)) {
      TESSERA_RETURN_IF_ERROR(be.synchronize());
      return cancelled("generation cancelled after " + std::to_string(done) + " of " +
                       std::to_string(n) + " tokens");
    }
    // Record after tokens 0 and 1 ran eagerly (workspaces allocated, kernels loaded).
    if (record && recording < 0 && done == 2) {
      TESSERA_RETURN_IF_ERROR(be.begin_recording());
      Status recorded = session_->decode_at(step);
      if (recorded.ok()) recorded = choose();
      Expected<int64_t> id = be.end_recording();
      TESSERA_RETURN_IF_ERROR(recorded);
      if (!id.ok()) return id.status().with_context("generate: recording the decode step");
      recording = *id;
    }
    const int64_t window = done < 2 ? 1 : lag;
    while (launched < n && launched - done < window) TESSERA_RETURN_IF_ERROR(launch(launched++));
    TESSERA_RETURN_IF_ERROR(be.synchronize());
    const double ms = watch.elapsed_ms() / static_cast<double>(launched - done);
    watch = Stopwatch();
    for (int64_t i = done; i < launched; ++i) {
      const int32_t id = ring[i % ring_size];
      if (id < 0) {
        const std::string what =
            id == kernels::kTokenAllNegInf
                ? std::string("every logit is -inf")
                : "logit " + std::to_string(-1 - static_cast<int64_t>(id)) + " is NaN or +inf";
        return invalid_argument("generate: step " + std::to_string(i) + " of " +
                                std::to_string(n) + ": sampler: " + what +
                                " (non-finite model output: corrupt weights or condition?)");
      }
      tokens.push_back(id);
      if (options.trace) options.trace->add(i == 0 ? "gpt.prefill" : "gpt.decode", ms);
      if (on_token) on_token(i, id, ms);
    }
  }
  return tokens;
}

}  // namespace tessera::shape
