// tessera generate: prompt -> shape tokens -> mesh (.obj / .glb / .fbx), through a runtime::Session
// (the same worker-thread path the studio uses), with a progress bar and a per-stage timing summary
// on stderr.
//
// Sampling: greedy by default (reproduces the reference); giving any of --seed, --temperature,
// --top-k, --top-p or --variations N > 1 switches to sampling with those settings (the others at
// their defaults: seed 0, or a random one printed with --variations; temperature 1, no top-k, top-p
// 0.9).
//
// Variations: --variations N decodes N candidates together (one KV-cached decode, the weights read
// once per step for all of them) and writes OUT_1.EXT ... OUT_N.EXT (--tokens-out T.txt:
// T_1.txt ... T_N.txt). Candidate i samples with seed S + i - 1, and its tokens are exactly those
// of a lone `generate --seed S+i-1` (the engine is batch-invariant), so any candidate can be made
// again on its own.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/cli/commands.h"
#include "app/cli/paint_cli.h"
#include "app/cli/shape_cli.h"
#include "engine/runtime/tokens_file.h"
#include "core/sha256.h"
#include "core/trace.h"
#include "engine/mesh/export.h"
#include "engine/mesh/metadata.h"
#include "engine/runtime/library.h"
#include "engine/runtime/provenance.h"
#include "engine/runtime/session.h"
#include "engine/runtime/user_text.h"

namespace tessera::cli {

namespace {

struct GenerateCliOptions {
  std::string prompt;
  std::string model;
  std::string output;
  std::string tokens_out;
  // Seed, temperature, top-k, top-p, guidance; sampling.sample is set when any sampling option
  // (or --variations > 1) was given.
  SamplingSettings sampling = runtime::kDefaultSampling;
  bool seed_given = false;
  int variations = 1;
  std::vector<float> bbox;
  bool no_kv_cache = false;
  bool no_graphs = false;
  bool bf16 = false;
  int resolution = 0;  // 0: the model's default (tessera-tiny: 65; Cube 3D: 257)
  int64_t preview_every = 0;
  int preview_resolution = runtime::kDefaultPreviewResolution;
  double preview_budget = runtime::kDefaultPreviewBudget;
  int64_t tokens = 0;
  DeviceCli device;
  MeshExportCli exporting;
  std::string from;         // --from FILE: the settings of a mesh Tessera wrote
  std::string prompt_file;  // --prompt-file FILE: the prompt's bytes
  bool prompt_given = false;
  bool no_metadata = false;  // --no-metadata: write no settings into the files
  bool library = false;      // --library: also keep every result in the library
  std::string weights;       // --weights auto|fast|f32|bf16|int8 ("": auto, or bf16 with --bf16)
  bool paint = false;        // --paint: paint each mesh with the image model before writing it
  PaintCli painting;         // its --paint-* options
};

// Redraws "[#####.....] 512/1024 tokens  190.3 tokens/s" in place on a terminal (at most ~10 times
// a second); elsewhere (logs, pipes) prints a line at each quarter.
class ProgressBar {
 public:
  explicit ProgressBar(int64_t total) : total_(total), tty_(::isatty(STDERR_FILENO) == 1) {}

  void update(int64_t done, double elapsed_ms) {
    const bool last = done == total_;
    if (tty_) {
      const auto now = std::chrono::steady_clock::now();
      if (!last && done > 1 && now - last_draw_ < std::chrono::milliseconds(100)) return;
      last_draw_ = now;
      std::fprintf(stderr, "\r%s", line(done, elapsed_ms).c_str());
      if (last) std::fputc('\n', stderr);
    } else {
      const int64_t quarter = total_ > 0 ? (4 * done) / total_ : 4;
      if (quarter <= last_quarter_) return;
      last_quarter_ = quarter;
      std::fprintf(stderr, "%s\n", line(done, elapsed_ms).c_str());
    }
    std::fflush(stderr);
  }
  // Ends a partly drawn bar (cancel / error) so the next message starts on its own line.
  void finish() {
    if (tty_) std::fputc('\n', stderr);
  }

 private:
  std::string line(int64_t done, double elapsed_ms) const {
    constexpr int kWidth = 30;
    const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    const double rate = elapsed_ms > 0 ? 1000.0 * static_cast<double>(done) / elapsed_ms : 0.0;
    char text[160];
    std::snprintf(text, sizeof(text), "[%s] %lld/%lld tokens  %.1f tokens/s", bar.c_str(),
                  static_cast<long long>(done), static_cast<long long>(total_), rate);
    return text;
  }

  int64_t total_;
  bool tty_;
  int64_t last_quarter_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
};

// PATH with "_i" before its extension: out.glb -> out_3.glb (variation i of N > 1); PATH itself
// for a single candidate.
std::string numbered_path(const std::string& path, int i, int count) {
  if (count <= 1) return path;
  const std::filesystem::path p(path);
  std::filesystem::path name = p.stem();
  name += "_" + std::to_string(i) + p.extension().string();
  return (p.parent_path() / name).string();
}

// --from FILE: the settings a Tessera mesh carries (engine/mesh/metadata.h), applied to `o` (the
// prompt, sampling, guidance, box, resolution, token count and export settings; one variation).
// Errors name the file and the field.
Status apply_metadata(const nlohmann::json& m, const std::string& file, GenerateCliOptions* o) {
  auto restored = runtime::restored_settings(m, file);
  if (!restored.ok()) return invalid_argument("--from " + restored.status().message());
  const runtime::RestoredSettings& r = *restored;
  for (const std::string& note : r.notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  o->prompt = r.prompt;
  // The fields the file has (r.sampling holds the product's defaults for those it leaves out).
  if (r.has_sampling) {
    o->sampling.sample = r.sampling.sample;
    o->sampling.temperature = r.sampling.temperature;
    o->sampling.top_k = r.sampling.top_k;
    o->sampling.top_p = r.sampling.top_p;
    if (r.has_seed) {
      o->sampling.seed = r.sampling.seed;
      o->seed_given = true;
    }
  }
  if (r.has_guidance) o->sampling.guidance = r.sampling.guidance;
  if (r.bbox) o->bbox.assign(r.bbox->begin(), r.bbox->end());
  if (r.resolution > 0) o->resolution = r.resolution;
  if (r.tokens > 0) o->tokens = r.tokens;
  if (r.exporting) {
    const runtime::RestoredExport& e = *r.exporting;
    MeshExportCli& x = o->exporting;
    if (!e.up_axis.empty()) x.up_axis = e.up_axis;
    if (!e.preset.empty()) x.preset = e.preset;
    if (!e.forward.empty()) x.forward = e.forward;
    if (!e.unit.empty()) x.unit = e.unit;
    x.pivot = e.pivot;
    if (e.scale) x.scale = *e.scale;
    if (e.size) {
      x.size = *e.size;
      x.size_given = true;
    }
    if (e.height) {
      x.height = *e.height;
      x.height_given = true;
    }
    if (e.max_faces) x.max_faces = *e.max_faces;
    if (e.lods) x.lods = *e.lods;
    if (e.max_texture) x.max_texture = *e.max_texture;
    if (e.closed) {
      x.closed = *e.closed;
      x.open = !*e.closed;
    }
  }
  o->variations = 1;
  return Status();
}

// The prompt: from --from FILE's metadata (with the rest of its settings, applied to `o`; its
// metadata comes back for the model check), --prompt-file or --prompt; then the text rule every
// front end shares (repaired and said so on stderr, or refused). Errors as the message to print.
Expected<std::optional<nlohmann::json>> read_prompt(GenerateCliOptions* o) {
  std::optional<nlohmann::json> from;
  if (!o->from.empty()) {
    auto m = mesh::read_metadata(o->from);
    if (!m.ok()) return invalid_argument("--from: " + m.status().message());
    if (Status st = apply_metadata(*m, o->from, o); !st.ok()) return st;
    from = std::move(*m);
  } else if (!o->prompt_file.empty()) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(o->prompt_file, ec);
    if (!ec && bytes > (size_t{1} << 20)) {  // not even read: surely not a prompt
      return invalid_argument("--prompt-file " + runtime::display_path(o->prompt_file) + ": " +
                              std::to_string(bytes) + " bytes; a prompt is at most " +
                              std::to_string(runtime::kMaxPromptBytes));
    }
    auto text = read_file(o->prompt_file);
    if (!text.ok()) return invalid_argument("--prompt-file: " + text.status().message());
    o->prompt = std::move(*text);
    if (!o->prompt.empty() && o->prompt.back() == '\n') o->prompt.pop_back();
    if (!o->prompt.empty() && o->prompt.back() == '\r') o->prompt.pop_back();
  } else if (!o->prompt_given) {
    return invalid_argument(
        "give --prompt TEXT (or --prompt-file FILE, or --from FILE to make a Tessera "
        "mesh again)");
  }
  runtime::JobOptions text;
  text.prompt = o->prompt;
  auto notes = runtime::accept_job_text(&text);
  if (!notes.ok()) return notes.status();
  for (const std::string& note : *notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  o->prompt = std::move(text.prompt);
  return from;
}

// What one generate run produced and how long each part took (run_generate fills it).
struct JobRun {
  double load_ms = 0, write_ms = 0, job_ms = 0, paint_ms = 0;
  std::string weights;  // what the shape GPT runs in (ShapeModelInfo::weights: f32, bf16, int8)
  int64_t previews = 0;
  std::vector<std::pair<std::string, double>> stages;
  std::vector<std::vector<int32_t>> tokens;  // per candidate
  std::vector<std::shared_ptr<const runtime::FinalMeshEvent>> final_meshes;
  std::map<int, std::pair<int64_t, int64_t>> written_counts;  // per candidate: LOD0's V, T
};

// The timing summary (mesh stages summed over the candidates) and the prompt's notes on stderr,
// a "wrote" line per file on stdout.
void print_summary(const GenerateCliOptions& o, JobRun& r) {
  const runtime::FinalMeshEvent* final_mesh = r.final_meshes[0].get();

  auto stage_ms = [&](const char* name) {
    double sum = 0.0;
    for (const auto& [n, ms] : r.stages) {
      if (n == name) sum += ms;
    }
    return sum;
  };
  const double prefill = stage_ms(runtime::kStagePrefill), decode = stage_ms(runtime::kStageDecode);
  const int64_t per_candidate = static_cast<int64_t>(r.tokens[0].size());
  const int64_t steps = per_candidate - 1;
  const double tpot = steps > 0 ? decode / static_cast<double>(steps) : 0.0;
  const double rate = prefill + decode > 0 ? 1000.0 * static_cast<double>(per_candidate) *
                                                 o.variations / (prefill + decode)
                                           : 0.0;
  std::fprintf(stderr, "timings (ms):\n");
  std::fprintf(stderr, "  load           %9.1f  (%s weights)\n", r.load_ms, r.weights.c_str());
  std::fprintf(stderr, "  text           %9.1f\n", stage_ms(runtime::kStageText));
  std::fprintf(stderr, "  prefill        %9.1f\n", prefill);
  std::fprintf(
      stderr, "  decode         %9.1f  (%lld steps, TPOT %.2f ms, %.1f tokens/s%s%s)\n", decode,
      static_cast<long long>(std::max<int64_t>(steps, 0)), tpot, rate,
      o.variations > 1 ? (" over " + std::to_string(o.variations) + " candidates").c_str() : "",
      o.no_kv_cache ? ", no KV cache" : "");
  std::fprintf(stderr, "  latent decode  %9.1f\n", stage_ms(runtime::kStageLatentDecode));
  print_extraction_timing(stage_ms(runtime::kStageExtraction), *final_mesh);
  std::fprintf(stderr, "  cleanup        %9.1f\n", stage_ms(runtime::kStageCleanup));
  if (r.paint_ms > 0) std::fprintf(stderr, "  paint          %9.1f\n", r.paint_ms);
  std::fprintf(stderr, "  write          %9.1f\n", r.write_ms - r.paint_ms);
  std::fprintf(
      stderr, "  job total      %9.1f%s\n", r.job_ms,
      r.previews > 0 ? ("  (" + std::to_string(r.previews) + " preview meshes)").c_str() : "");
  if (final_mesh->prompt_truncated) {
    std::fprintf(
        stderr,
        "note: the prompt has %d CLIP tokens; only the first 77 (BOS + 75 + EOS) were used\n",
        final_mesh->prompt_tokens);
  }
  if (final_mesh->image_only_tokens > 0) {
    std::fprintf(stderr,
                 "note: %d colour / material / background token(s) of the prompt go to the image "
                 "model only (the shape model never learned them)\n",
                 final_mesh->image_only_tokens);
  }
  for (const auto& f : r.final_meshes) {
    const int i = f->candidate + 1;
    std::printf("wrote %s (%lld vertices, %lld triangles",
                numbered_path(o.output, i, o.variations).c_str(),
                static_cast<long long>(r.written_counts[f->candidate].first),
                static_cast<long long>(r.written_counts[f->candidate].second));
    if (o.sampling.sample) std::printf(", seed %llu", static_cast<unsigned long long>(f->seed));
    std::printf(")\n");
    if (!o.tokens_out.empty()) {
      std::printf("wrote %s (%zu shape tokens)\n",
                  numbered_path(o.tokens_out, i, o.variations).c_str(), f->tokens.size());
    }
  }
}

int run_generate(GenerateCliOptions o) {
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "tessera generate: %s\n", message.c_str());
    return 1;
  };
  // Everything that can be checked before loading and generating, the text first.
  auto read = read_prompt(&o);
  if (!read.ok()) return fail(read.status().message());
  const std::optional<nlohmann::json> from = std::move(*read);
  if (o.variations < 1 || o.variations > runtime::kMaxVariations) {
    return fail("--variations " + std::to_string(o.variations) + " outside [1, " +
                std::to_string(runtime::kMaxVariations) + "]");
  }
  if (Status st = check_sampling(o.sampling); !st.ok()) return fail(st.message());
  if (o.variations > 1) o.sampling.sample = true;
  if (o.sampling.sample && !o.seed_given && o.variations > 1) {
    o.sampling.seed = std::random_device{}() & 0xffffffu;  // short enough to type again
  }
  for (int i = 1; i <= o.variations; ++i) {
    if (Status st = check_mesh_output(numbered_path(o.output, i, o.variations)); !st.ok())
      return fail(st.message());
  }
  auto export_options = checked_export_options(o.exporting, o.output);
  if (!export_options.ok()) return fail(export_options.status().message());
  if (o.paint && !o.exporting.texture.empty()) return fail("--paint and --texture are exclusive");
  auto texture = load_texture_option(o.exporting);
  if (!texture.ok()) return fail(texture.status().message());
  // --paint: checked now, its model loaded at the first mesh (in a session of its own, so the
  // shape job's events stay in this one).
  std::unique_ptr<PaintRunner> painter;
  if (o.paint) {
    if (o.prompt.empty()) return fail("--paint needs a prompt (the views are painted from it)");
    if (Status st = check_paint_output(o.output, "-o"); !st.ok()) return fail(st.message());
    painter = std::make_unique<PaintRunner>(o.painting, "paint-", o.device);
    if (Status st = painter->check(o.prompt); !st.ok()) return fail(st.message());
  }
  if (!o.tokens_out.empty()) {
    for (int i = 1; i <= o.variations; ++i) {
      if (Status st =
              check_output_file(numbered_path(o.tokens_out, i, o.variations), "--tokens-out");
          !st.ok())
        return fail(st.message());
    }
  }
  if (o.variations > 1) {
    std::fprintf(
        stderr, "variations: %d, seeds %llu..%llu (--seed S+i-1 remakes variation i)\n",
        o.variations, static_cast<unsigned long long>(o.sampling.seed),
        static_cast<unsigned long long>(o.sampling.seed + static_cast<uint64_t>(o.variations) - 1));
  }
  if (auto k = runtime::resolution_base(o.resolution); o.resolution != 0 && !k.ok())
    return fail("--resolution: " + k.status().message());
  if (o.preview_every > 0) {
    if (auto k = runtime::resolution_base(o.preview_resolution); !k.ok()) {
      return fail("--preview-resolution: " + k.status().message());
    }
  }
  Stopwatch load_watch;
  std::string weights_used;
  runtime::ShapeWeights weights = runtime::ShapeWeights::kAuto;
  if (!o.weights.empty()) {
    auto parsed = runtime::parse_shape_weights(o.weights);
    if (!parsed.ok()) return fail("--weights: " + parsed.status().message());
    weights = *parsed;
  } else if (o.bf16) {
    weights = runtime::ShapeWeights::kBF16;
  }
  auto session = runtime::Session::open(shape_model_options(o.model, weights, o.device));
  if (!session.ok()) return fail(session.status().message());
  {
    const runtime::ShapeModelInfo model = *(*session)->shape_model();
    print_device(o.device, model.backend, model.backend_note);
    weights_used = model.weights;
  }
  const double load_ms = load_watch.elapsed_ms();
  // The model's identity for the files' metadata (and --from's check): its folder name and the
  // SHA-256 of its shape GPT.
  std::string model_name, gpt_sha256;
  if (!o.no_metadata || from) {
    const runtime::ShapeModelInfo model = *(*session)->shape_model();
    model_name = runtime::display_path(std::filesystem::path(model.path).filename().string());
    auto digest = sha256_file(model.shape_gpt_file);
    if (digest.ok()) gpt_sha256 = *digest;
  }
  if (from) {
    const nlohmann::json& made_with = (*from)["model"];
    const bool known = made_with.is_object() && made_with.contains("gpt_sha256") &&
                       made_with["gpt_sha256"].is_string();
    if (!known || made_with["gpt_sha256"].get<std::string>() != gpt_sha256) {
      const std::string theirs = made_with.is_object() && made_with.contains("name")
                                     ? made_with["name"].dump()
                                     : "unknown";
      std::fprintf(stderr,
                   "tessera generate: warning: %s was made with another model (%s); this one "
                   "(%s) will make a different shape\n",
                   o.from.c_str(), theirs.c_str(), model_name.c_str());
    }
  }

  if (o.tokens > (*session)->num_latents()) {
    return fail("--tokens " + std::to_string(o.tokens) + " exceeds the model's " +
                std::to_string((*session)->num_latents()) + " tokens per shape");
  }

  runtime::JobOptions job;
  job.prompt = o.prompt;
  job.generation.sampling = o.sampling;
  if (!o.bbox.empty()) job.generation.bbox = std::array<float, 3>{o.bbox[0], o.bbox[1], o.bbox[2]};
  job.generation.use_kv_cache = !o.no_kv_cache;
  job.generation.use_graphs = !o.no_graphs;
  job.generation.num_tokens = o.tokens;
  job.mesh.resolution = o.resolution;
  job.mesh.cleanup.max_triangles = effective_max_faces(o.exporting);  // before normals
  job.preview_every = o.preview_every;
  job.preview_resolution = o.preview_resolution;
  job.preview_budget = o.preview_budget;
  job.variations = o.variations;

  const int64_t total = runtime::tokens_to_generate(o.tokens, (*session)->num_latents());
  ProgressBar progress(total);
  Stopwatch generation_watch;
  JobRun run;
  run.load_ms = load_ms;
  run.weights = weights_used;
  run.tokens.resize(static_cast<size_t>(o.variations));
  auto& tokens = run.tokens;
  auto& stages = run.stages;
  auto& final_meshes = run.final_meshes;
  auto& written_counts = run.written_counts;
  // --library: opened before the job, so a library that cannot be written fails before any work.
  std::unique_ptr<runtime::Library> library;
  std::string library_group;
  if (o.library) {
    auto opened = runtime::Library::open(runtime::default_library_dir());
    if (!opened.ok()) return fail(opened.status().message());
    library = std::move(opened).value();
  }
  const uint64_t id = (*session)->submit(job);
  library_group = "job-" + std::to_string(id) + "-" + std::to_string(::getpid()) + "-" +
                  std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
  for (bool done = false; !done;) {
    auto event = (*session)->wait_event(std::chrono::milliseconds(200));
    if (!event || event->job != id) continue;
    if (const auto* t = std::get_if<runtime::TokenEvent>(&event->payload)) {
      if (t->candidate < 0 || t->candidate >= o.variations) continue;
      std::vector<int32_t>& mine = tokens[static_cast<size_t>(t->candidate)];
      mine.push_back(t->id);
      if (t->candidate == o.variations - 1) {  // a step is complete
        progress.update(static_cast<int64_t>(mine.size()), generation_watch.elapsed_ms());
      }
    } else if (const auto* s = std::get_if<runtime::StageEvent>(&event->payload)) {
      stages.emplace_back(s->name, s->ms);
      // The tokens are complete: save them now, so that they survive a failed extraction.
      if (s->name == runtime::kStageDecode && !o.tokens_out.empty()) {
        for (int i = 1; i <= o.variations; ++i) {
          if (Status st = runtime::write_tokens_file(numbered_path(o.tokens_out, i, o.variations),
                                                     tokens[static_cast<size_t>(i - 1)]);
              !st.ok())
            return fail(st.message());
        }
      }
    } else if (std::holds_alternative<runtime::PartialMeshEvent>(event->payload)) {
      ++run.previews;
    } else if (auto* f = std::get_if<runtime::FinalMeshEvent>(&event->payload)) {
      // Written as each candidate is done: a later candidate's failure keeps the earlier files.
      const std::string path = numbered_path(o.output, f->candidate + 1, o.variations);
      Stopwatch write_watch;
      // Everything that decides its shape (read back by --from); export_asset adds the export's.
      nlohmann::json settings =
          o.no_metadata
              ? nlohmann::json()
              : runtime::shape_settings_json(job, f->seed, f->resolution, model_name, gpt_sha256);
      std::shared_ptr<const mesh::Mesh> result = f->mesh;
      if (painter != nullptr) {
        progress.finish();
        std::fprintf(stderr, "painting %s\n", path.c_str());
        Stopwatch paint_watch;
        auto painted = painter->paint(f->mesh, job.prompt, f->seed);
        run.paint_ms += paint_watch.elapsed_ms();
        if (!painted.ok()) return fail(painted.status().message());
        result = painted->mesh;
        if (!o.no_metadata) settings["paint"] = painted->record;
      }
      mesh::AssetReport written;
      if (Status st = write_cli_mesh(*result, path, *export_options, o.exporting, *texture,
                                     settings, &written);
          !st.ok())
        return fail(st.message());
      if (!written.lod_triangles.empty()) {
        written_counts[f->candidate] = {written.lod_vertices[0], written.lod_triangles[0]};
      }
      if (library) {
        runtime::NewResult kept;
        kept.prompt = job.prompt;
        kept.model = model_name;
        kept.settings =
            runtime::shape_settings_json(job, f->seed, f->resolution, model_name, gpt_sha256);
        if (settings.contains("paint")) kept.settings["paint"] = settings["paint"];
        kept.group = library_group;
        kept.candidate = f->candidate;
        kept.seed = f->seed;
        kept.mesh = result.get();
        kept.tokens = f->tokens;
        auto kept_id = library->add(kept);
        if (!kept_id.ok()) return fail(kept_id.status().message());
        std::printf("kept in the library as %lld\n", static_cast<long long>(*kept_id));
      }
      run.write_ms += write_watch.elapsed_ms();
      final_meshes.push_back(std::make_shared<const runtime::FinalMeshEvent>(std::move(*f)));
    } else if (const auto* e = std::get_if<runtime::ErrorEvent>(&event->payload)) {
      progress.finish();
      return fail(e->status.message());
    } else if (const auto* c = std::get_if<runtime::CancelledEvent>(&event->payload)) {
      progress.finish();
      return fail("cancelled: " + c->reason);
    } else if (const auto* d = std::get_if<runtime::DoneEvent>(&event->payload)) {
      run.job_ms = d->total_ms;
      done = true;
    }
  }
  if (static_cast<int>(final_meshes.size()) != o.variations) {
    return fail("internal error: the job ended with " + std::to_string(final_meshes.size()) +
                " of " + std::to_string(o.variations) + " meshes");
  }
  print_summary(o, run);
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<GenerateCliOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a 3D mesh from a text prompt");
  auto* prompt = cmd->add_option("--prompt,-p", o->prompt,
                                 "The text prompt (\"\" is the unconditional shape)");
  cmd->add_option("--from", o->from,
                  "Make a mesh again from the settings a Tessera .glb/.obj/.3mf carries (prompt, "
                  "seed, sampling, guidance, resolution, export); same model and device: the same "
                  "mesh")
      ->excludes(prompt);
  auto* prompt_file = cmd->add_option(
      "--prompt-file", o->prompt_file,
      "Read the prompt from a file (its text as it is, one trailing line break dropped; the "
      "same rule as --prompt: invalid UTF-8 and control characters repaired and reported)");
  prompt_file->excludes(prompt);
  prompt_file->excludes("--from");
  cmd->add_flag("--no-metadata", o->no_metadata,
                "Write no settings (prompt, seed, model...) into the files");
  cmd->add_option("--model,-m", o->model,
                  "Model directory, or a name from the Hugging Face cache (Roblox/cube3d-v0.5; "
                  "tessera models list); default: the embedded tessera-tiny");
  cmd->add_option("--output,-o", o->output, "Mesh to write: .obj (+ .mtl), .glb or .fbx")
      ->required();
  add_mesh_export_options(cmd, &o->exporting);
  cmd->add_flag("--paint", o->paint,
                "Paint each mesh with the image model before writing it (as tessera paint: views "
                "around it, baked into a UV atlas; the prompt and the shape's seed; the --paint-* "
                "options below); the file carries the settings of both");
  add_paint_options(cmd, &o->painting, "paint-");
  cmd->add_option("--tokens-out", o->tokens_out, "Also save the shape tokens (one line of ids)");
  cmd->add_flag("--library", o->library,
                "Also keep every result in the library (tessera library list; off by default for "
                "scripts)");
  // The ranges are check_sampling's (core/sampling.h), checked with the rest in run_generate.
  auto* seed = cmd->add_option("--seed", o->sampling.seed, "Sampling seed (switches to sampling)");
  auto* temperature = cmd->add_option("--temperature", o->sampling.temperature,
                                      "Sampling temperature > 0 (switches to sampling)");
  auto* top_k = cmd->add_option("--top-k", o->sampling.top_k,
                                "Keep the K most likely codes, 0: all (switches to sampling)");
  auto* top_p = cmd->add_option("--top-p", o->sampling.top_p,
                                "Nucleus sampling threshold in (0, 1], default 0.9 (switches to "
                                "sampling)");
  cmd->add_option("--variations", o->variations,
                  "Decode N candidates together (1-8), written as OUT_1 ... OUT_N; variation i "
                  "samples with seed S+i-1 (switches to sampling; S random and printed without "
                  "--seed)");
  cmd->add_option("--guidance", o->sampling.guidance,
                  "Classifier-free guidance scale, 0: off (default 3)");
  cmd->add_option("--bbox", o->bbox, "Bounding box proportions X Y Z (v0.5 models)")->expected(3);
  cmd->add_flag("--no-kv-cache", o->no_kv_cache,
                "Recompute the whole sequence every step (baseline)");
  cmd->add_flag("--no-graphs", o->no_graphs,
                "CUDA: launch every op each step instead of replaying the recorded decode step "
                "(the eager baseline; no effect on the CPU)");
  cmd->add_flag("--bf16", o->bf16, "Convert the weights to bf16 once at load (= --weights bf16)");
  cmd->add_option("--weights", o->weights,
                  "Weights: auto (default: int8 for a quantized model, bf16 for large ones, f32 "
                  "for small ones such as tessera-tiny), fast (the quickest whose shapes hold: "
                  "int8 on the CPU, bf16 on a GPU), f32 (as stored), bf16, or int8 (the shape "
                  "GPT's linear layers quantized once at load, a scale per 128 weights; CPU)")
      ->check(CLI::IsMember({"auto", "fast", "f32", "bf16", "int8"}));
  add_device_options(cmd, &o->device);
  cmd->add_option("--resolution,-r", o->resolution,
                  "Extraction lattice points per axis, 2^k+1 (default: the model's, 65 for "
                  "tessera-tiny, 257 for Cube 3D)");
  cmd->add_option("--preview-every", o->preview_every,
                  "Decode a low-resolution preview every K tokens")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--preview-resolution", o->preview_resolution,
                  "Preview lattice, 2^k+1 (default 33)");
  cmd->add_option("--preview-budget", o->preview_budget,
                  "Largest fraction of the job's time the previews may take, in (0, 1] "
                  "(default 0.1; 1: every due preview)")
      ->check(CLI::Range(1e-6, 1.0));
  cmd->add_option("--tokens", o->tokens,
                  "Generate only the first N tokens (0: all; the rest is filled)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([o, exit_code, seed, temperature, top_k, top_p, prompt] {
    o->prompt_given = prompt->count() > 0;
    o->sampling.sample = seed->count() + temperature->count() + top_k->count() + top_p->count() > 0;
    o->seed_given = seed->count() > 0;
    *exit_code = run_generate(*o);
  });
}

}  // namespace tessera::cli
