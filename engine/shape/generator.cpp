#include "engine/shape/generator.h"

#include <algorithm>
#include <array>
#include <string>

namespace tessera::shape {

Expected<std::unique_ptr<ShapeGenerator>> ShapeGenerator::create(const CubeGpt& model,
                                                                 int64_t max_tokens,
                                                                 int64_t max_candidates) {
  const GptConfig& c = model.config();
  if (max_tokens == 0) max_tokens = c.num_latents;
  if (max_tokens < 1) {
    return invalid_argument(
        "ShapeGenerator: number of tokens unknown (num_latents not set) or < 1");
  }
  if (max_candidates < 1) {
    return invalid_argument("ShapeGenerator: max_candidates " + std::to_string(max_candidates) +
                            " must be >= 1");
  }
  std::unique_ptr<ShapeGenerator> g(new ShapeGenerator());
  g->model_ = &model;
  g->max_candidates_ = max_candidates;
  const int64_t rows = 2 * max_candidates;
  TESSERA_ASSIGN_OR_RETURN(g->session_, GptSession::create(model, rows, max_tokens));
  g->logits_.resize(static_cast<size_t>(rows * c.vocab_size));
  g->hidden_.resize(static_cast<size_t>(rows * c.text_len * c.text_embed_dim));
  g->guided_.resize(static_cast<size_t>(c.codebook_size));
  g->history_.resize(static_cast<size_t>(rows * max_tokens));
  g->step_ids_.resize(static_cast<size_t>(rows * max_tokens));
  return g;
}

Expected<std::vector<int32_t>> ShapeGenerator::generate(const ConditionInputs& inputs,
                                                        const GenerateOptions& options,
                                                        const TokenCallback& on_token) {
  CandidateTokenCallback each;
  if (on_token) each = [&](int64_t, int64_t i, int32_t id, double ms) { on_token(i, id, ms); };
  TESSERA_ASSIGN_OR_RETURN(
      auto tokens,
      generate_candidates({inputs}, {CandidateSpec{0, options.sampling.seed}}, options, each));
  return std::move(tokens[0]);
}

Status ShapeGenerator::prefill_candidates(const std::vector<ConditionInputs>& prompts,
                                          const std::vector<CandidateSpec>& candidates, bool guided,
                                          const GenerateOptions& options) {
  const GptConfig& c = model_->config();
  const int64_t r = guided ? 2 : 1, v = c.vocab_size;
  const size_t hidden_n = static_cast<size_t>(c.text_len * c.text_embed_dim);
  // Each prompt once, the prompt of candidate 0 last: rows [0, r), where every prefill runs, are
  // candidate 0's own.
  std::vector<int64_t> order;
  for (const CandidateSpec& spec : candidates) {
    if (spec.prompt != candidates[0].prompt &&
        std::find(order.begin(), order.end(), spec.prompt) == order.end()) {
      order.push_back(spec.prompt);
    }
  }
  order.push_back(candidates[0].prompt);
  std::vector<float> prefill_logits(static_cast<size_t>(r * v));
  std::vector<int32_t> bos(static_cast<size_t>(r), c.bos_id());
  for (int64_t p : order) {
    const ConditionInputs& in = prompts[static_cast<size_t>(p)];
    std::copy(in.cond_hidden, in.cond_hidden + hidden_n, hidden_.begin());
    if (guided) {
      std::copy(in.uncond_hidden, in.uncond_hidden + hidden_n,
                hidden_.begin() + static_cast<std::ptrdiff_t>(hidden_n));
    }
    float bbox[6] = {0, 0, 0, 0, 0, 0};
    if (in.bbox) std::copy(in.bbox->begin(), in.bbox->end(), bbox);
    {
      ScopedTimer timer(options.trace, "gpt.condition");
      TESSERA_RETURN_IF_ERROR(session_->set_condition(r, hidden_.data(), bbox));
    }
    TESSERA_RETURN_IF_ERROR(session_->prefill(bos.data(), prefill_logits.data()));
    for (size_t j = 0; j < candidates.size(); ++j) {
      if (candidates[j].prompt != p) continue;
      for (int64_t row = 0; row < r; ++row) {
        const int64_t dst = static_cast<int64_t>(j) * r + row;
        TESSERA_RETURN_IF_ERROR(session_->copy_row(row, dst));
        std::copy(prefill_logits.begin() + row * v, prefill_logits.begin() + (row + 1) * v,
                  logits_.begin() + dst * v);
      }
    }
  }
  return session_->set_rows(static_cast<int64_t>(candidates.size()) * r);
}

Expected<std::vector<std::vector<int32_t>>> ShapeGenerator::generate_candidates(
    const std::vector<ConditionInputs>& prompts, const std::vector<CandidateSpec>& candidates,
    const GenerateOptions& options, const CandidateTokenCallback& on_token) {
  const GptConfig& c = model_->config();
  const int64_t n = tokens_to_generate(options.num_tokens, c.num_latents);
  if (n < 1 || n > session_->max_shape_tokens()) {
    return invalid_argument("generate: num_tokens " + std::to_string(n) + " outside [1, " +
                            std::to_string(session_->max_shape_tokens()) + "]");
  }
  if (Status st = check_sampling(options.sampling); !st.ok()) return st.with_context("generate");
  const int64_t count = static_cast<int64_t>(candidates.size());
  if (count < 1 || count > max_candidates_) {
    return invalid_argument("generate: " + std::to_string(count) + " candidates outside [1, " +
                            std::to_string(max_candidates_) + "] (the generator's max_candidates)");
  }
  const bool guided = options.sampling.guidance > 0.0f;
  for (int64_t j = 0; j < count; ++j) {
    const int64_t p = candidates[static_cast<size_t>(j)].prompt;
    if (p < 0 || p >= static_cast<int64_t>(prompts.size())) {
      return invalid_argument("generate: candidate " + std::to_string(j) + " names prompt " +
                              std::to_string(p) + " of " + std::to_string(prompts.size()));
    }
    const ConditionInputs& in = prompts[static_cast<size_t>(p)];
    if (!in.cond_hidden) return invalid_argument("generate: no condition (CLIP hidden states)");
    if (guided && !in.uncond_hidden) {
      return invalid_argument(
          "generate: guidance needs the unconditional (empty prompt) hidden states");
    }
  }
  const int64_t r = guided ? 2 : 1, rows = count * r;
  if (options.trace) options.trace->keep_samples("gpt.decode");
  if (options.guided_logits) {
    options.guided_logits->reserve(options.guided_logits->size() +
                                   static_cast<size_t>(n * c.codebook_size));
  }
  const int64_t k = c.codebook_size, v = c.vocab_size;

  double prefill_ms = 0.0;  // counted as step 0's time, with its token choice
  if (options.use_kv_cache) {
    Stopwatch prefill_watch;
    TESSERA_RETURN_IF_ERROR(prefill_candidates(prompts, candidates, guided, options));
    if (options.release_condition_pages) model_->release_condition_pages();
    prefill_ms = prefill_watch.elapsed_ms();
    if (!options.guided_logits && model_->backend().decode() != nullptr) {
      return generate_resident(n, guided, candidates, prefill_ms, options, on_token);
    }
  } else {
    // The uncached baseline recomputes every row's whole sequence each step: all rows' conditions.
    const size_t hidden_n = static_cast<size_t>(c.text_len * c.text_embed_dim);
    std::vector<float> bbox(static_cast<size_t>(3 * rows), 0.0f);
    for (int64_t j = 0; j < count; ++j) {
      const ConditionInputs& in =
          prompts[static_cast<size_t>(candidates[static_cast<size_t>(j)].prompt)];
      std::copy(
          in.cond_hidden, in.cond_hidden + hidden_n,
          hidden_.begin() + static_cast<std::ptrdiff_t>(hidden_n * static_cast<size_t>(j * r)));
      if (guided) {
        std::copy(in.uncond_hidden, in.uncond_hidden + hidden_n,
                  hidden_.begin() +
                      static_cast<std::ptrdiff_t>(hidden_n * static_cast<size_t>(j * r + 1)));
      }
      if (in.bbox) std::copy(in.bbox->begin(), in.bbox->end(), bbox.begin() + 3 * j * r);
    }
    ScopedTimer timer(options.trace, "gpt.condition");
    TESSERA_RETURN_IF_ERROR(session_->set_condition(rows, hidden_.data(), bbox.data()));
  }

  std::vector<Sampler> samplers;
  samplers.reserve(static_cast<size_t>(count));
  for (const CandidateSpec& spec : candidates) {
    SamplingSettings so = options.sampling;
    so.seed = spec.seed;
    samplers.emplace_back(so, c.codebook_size);
  }
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(count));
  for (auto& t : tokens) t.reserve(static_cast<size_t>(n));
  for (int64_t b = 0; b < rows; ++b) history_[static_cast<size_t>(b * n)] = c.bos_id();
  for (int64_t i = 0; i < n; ++i) {
    if (options.cancel && options.cancel->load(std::memory_order_relaxed)) {
      return cancelled("generation cancelled after " + std::to_string(i) + " of " +
                       std::to_string(n) + " tokens");
    }
    Stopwatch watch;
    if (options.use_kv_cache) {
      if (i > 0) {  // step 0's logits come from the prefill
        for (int64_t b = 0; b < rows; ++b) {
          step_ids_[static_cast<size_t>(b)] = history_[static_cast<size_t>(b * n + i)];
        }
        TESSERA_RETURN_IF_ERROR(session_->decode(step_ids_.data(), logits_.data()));
      }
    } else {
      // Pack the rows' histories [rows][i + 1] contiguously for the full recompute.
      for (int64_t b = 0; b < rows; ++b) {
        std::copy(history_.begin() + b * n, history_.begin() + b * n + i + 1,
                  step_ids_.begin() + b * (i + 1));
      }
      TESSERA_RETURN_IF_ERROR(
          session_->forward_full(step_ids_.data(), i + 1, logits_.data(), nullptr));
    }
    const double ms = watch.elapsed_ms() + (i == 0 ? prefill_ms : 0.0);
    if (options.trace) options.trace->add(i == 0 ? "gpt.prefill" : "gpt.decode", ms);
    for (int64_t j = 0; j < count; ++j) {
      // Restrict to the codes and mix the guidance in f32, as the reference does.
      const float* cond = logits_.data() + j * r * v;
      if (guided) {
        const float g = kernels::guidance_weight(options.sampling.guidance, i, n);
        const float* uncond = cond + v;
        for (int64_t q = 0; q < k; ++q) {
          guided_[static_cast<size_t>(q)] = (1.0f + g) * cond[q] - g * uncond[q];
        }
      } else {
        std::copy(cond, cond + k, guided_.begin());
      }
      if (options.guided_logits && j == 0) {
        options.guided_logits->insert(options.guided_logits->end(), guided_.begin(), guided_.end());
      }
      auto next = samplers[static_cast<size_t>(j)].next(guided_.data(), k);
      if (!next.ok()) {
        return next.status().with_context(
            "generate: step " + std::to_string(i) + " of " + std::to_string(n) +
            (count > 1 ? " (candidate " + std::to_string(j) + ")" : std::string()));
      }
      const int32_t id = *next;
      tokens[static_cast<size_t>(j)].push_back(id);
      if (i + 1 < n) {
        for (int64_t b = j * r; b < (j + 1) * r; ++b) {
          history_[static_cast<size_t>(b * n + i + 1)] = id;
        }
      }
      if (on_token) on_token(j, i, id, ms);
    }
  }
  return tokens;
}

kernels::TokenChoice make_token_choice(const GptConfig& c, bool guided, int64_t total_steps,
                                       const SamplingSettings& sampling) {
  kernels::TokenChoice choice;
  choice.codes = c.codebook_size;
  choice.row_stride = c.vocab_size;
  choice.guided = guided;
  choice.guidance_scale = sampling.guidance;
  choice.total_steps = total_steps;
  choice.sampling.sample = sampling.sample;
  choice.sampling.temperature = sampling.temperature;
  choice.sampling.top_k = sampling.top_k;
  choice.sampling.top_p = sampling.top_p;
  return choice;
}

Status reset_resident_state(kernels::Backend& be, void* step, void* rng, int64_t first,
                            uint64_t seed) {
  const std::array<uint64_t, 4> words = Xoshiro256(seed).state();
  TESSERA_RETURN_IF_ERROR(be.upload(step, &first, sizeof(first)));
  return be.upload(rng, words.data(), sizeof(words));
}

Expected<std::vector<std::vector<int32_t>>> ShapeGenerator::generate_resident(
    int64_t n, bool guided, const std::vector<CandidateSpec>& candidates, double prefill_ms,
    const GenerateOptions& options, const CandidateTokenCallback& on_token) {
  const GptConfig& c = model_->config();
  kernels::Backend& be = model_->backend();
  const int64_t count = static_cast<int64_t>(candidates.size());
  const int64_t rows = count * (guided ? 2 : 1);
  const int64_t ring_size = session_->max_shape_tokens();
  const size_t ring_bytes = static_cast<size_t>(ring_size * count) * sizeof(int32_t);
  auto ensure = [&](kernels::DeviceBuffer* buffer, size_t bytes, bool host_visible) -> Status {
    if (buffer->data() != nullptr && buffer->bytes() >= bytes) return {};
    TESSERA_ASSIGN_OR_RETURN(*buffer,
                             host_visible ? be.allocate_host_visible(bytes) : be.allocate(bytes));
    return {};
  };
  TESSERA_RETURN_IF_ERROR(ensure(&step_buf_, sizeof(int64_t), false));
  TESSERA_RETURN_IF_ERROR(
      ensure(&rng_buf_, static_cast<size_t>(4 * count) * sizeof(uint64_t), false));
  TESSERA_RETURN_IF_ERROR(ensure(&ring_buf_, ring_bytes, true));
  std::vector<uint64_t> words(static_cast<size_t>(4 * count));
  for (int64_t j = 0; j < count; ++j) {
    const std::array<uint64_t, 4> w = Xoshiro256(candidates[static_cast<size_t>(j)].seed).state();
    std::copy(w.begin(), w.end(), words.begin() + 4 * j);
  }
  const int64_t first = 0;
  TESSERA_RETURN_IF_ERROR(be.upload(step_buf_.data(), &first, sizeof(first)));
  TESSERA_RETURN_IF_ERROR(
      be.upload(rng_buf_.data(), words.data(), words.size() * sizeof(uint64_t)));
  // The prefill's logits of every row (prefill_candidates left them in logits_).
  TESSERA_RETURN_IF_ERROR(session_->load_logits(logits_.data(), rows));
  kernels::TokenChoice choice = make_token_choice(c, guided, n, options.sampling);
  choice.candidates = count;
  choice.candidate_stride = (guided ? 2 : 1) * c.vocab_size;
  int64_t* step = step_buf_.as<int64_t>();
  int32_t* ring = ring_buf_.as<int32_t>();  // host-visible: read directly after synchronize()
  auto choose = [&]() {
    return be.decode()->choose_token(session_->device_logits(), choice, step,
                                     rng_buf_.as<uint64_t>(), session_->device_ids(), rows, ring,
                                     ring_size);
  };

  // Token 0: the choice over the prefill's logits. Token i >= 1: the GPT step at *step == i and
  // the choice, eagerly or by replaying `recording`.
  int64_t recording = -1;
  auto launch = [&](int64_t i) -> Status {
    if (i == 0) return choose();
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
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(count));
  for (auto& t : tokens) t.reserve(static_cast<size_t>(n));
  int64_t done = 0;      // tokens [0, done) of every candidate are on the host
  int64_t launched = 0;  // tokens [0, launched) are queued
  Stopwatch watch;
  while (done < n) {
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
      const double step_ms = ms + (i == 0 ? prefill_ms : 0.0);
      if (options.trace) options.trace->add(i == 0 ? "gpt.prefill" : "gpt.decode", step_ms);
      for (int64_t j = 0; j < count; ++j) {
        const int32_t id = ring[j * ring_size + i % ring_size];
        if (id < 0) {
          const std::string what =
              id == kernels::kTokenAllNegInf
                  ? std::string("every logit is -inf")
                  : "logit " + std::to_string(-1 - static_cast<int64_t>(id)) + " is NaN or +inf";
          return invalid_argument(
              "generate: step " + std::to_string(i) + " of " + std::to_string(n) +
              (count > 1 ? " (candidate " + std::to_string(j) + ")" : std::string()) +
              ": sampler: " + what + " (non-finite model output: corrupt weights or condition?)");
        }
        tokens[static_cast<size_t>(j)].push_back(id);
        if (on_token) on_token(j, i, id, step_ms);
      }
    }
    done = launched;
  }
  return tokens;
}

}  // namespace tessera::shape
