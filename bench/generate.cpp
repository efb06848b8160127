// tessera-bench generate: prompt -> final mesh through the runtime Session, end to end, as the
// studio and `tessera generate` run it (text encoder, prefill, decode with guidance, latent
// decode, coarse-to-fine extraction at the model's default resolution, clean-up; no file write).
// One warm-up job, then --repeat timed jobs per prompt; reports the median, min and max of the job
// time (submit -> Done) and the median of every stage, and optionally writes the
// "## Generation end to end (CPU)" section of bench/RESULTS.md.
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/common.h"
#include "bench/subcommands.h"
#include "core/process_memory.h"
#include "core/thread_pool.h"
#include "engine/mesh/extraction.h"
#include "engine/runtime/capabilities.h"
#include "engine/runtime/session.h"

namespace tessera::bench {
namespace {

struct GenerateBenchOptions {
  std::string model;
  std::vector<std::string> prompts;
  int repeat = 5;
  int resolution = 0;
  int variations = 1;            // > 1: also the variations table (N candidates vs 1, sampled)
  std::string weights = "auto";  // runtime::ShapeWeights: auto | fast | f32 | bf16 | int8
  bool keep_pages = false;       // runtime::ShapeModelOptions::release_idle_pages = false
  std::string device = "cpu";    // runtime::ShapeModelOptions::device: cpu | cuda | auto
  int warmup = 1;                // untimed jobs per prompt first
  bool write_results = false;
  std::string results_path;
};

struct JobResult {
  double total_ms = 0;
  std::map<std::string, double> stage_ms;
  int64_t queries = 0;
  std::string level_queries;  // mesh::describe_level_queries
  int64_t triangles = 0;
};

// Runs one job to its terminal event. Errors: the job's Error event, or a cancel.
Expected<JobResult> run_job(runtime::Session& session, const std::string& prompt, int resolution,
                            int variations = 0) {
  runtime::JobOptions job;
  job.prompt = prompt;
  job.mesh.resolution = resolution;
  if (variations > 0) {  // sampled with the product's defaults, seeds 1..variations
    job.variations = variations;
    job.generation.sampling.sample = true;
    job.generation.sampling.seed = 1;
  }
  const auto start = std::chrono::steady_clock::now();
  const uint64_t id = session.submit(std::move(job));
  JobResult result;
  const runtime::Event last = session.wait_for(id, [&](const runtime::Event& e) {
    if (const auto* s = std::get_if<runtime::StageEvent>(&e.payload)) {
      result.stage_ms[s->name] += s->ms;
    } else if (const auto* f = std::get_if<runtime::FinalMeshEvent>(&e.payload)) {
      result.queries = f->extraction.queries;
      result.level_queries = mesh::describe_level_queries(f->extraction);
      result.triangles = static_cast<int64_t>(f->mesh->triangle_count());
    }
  });
  if (const auto* e = std::get_if<runtime::ErrorEvent>(&last.payload)) return e->status;
  if (!std::holds_alternative<runtime::DoneEvent>(last.payload)) {
    return cancelled("bench generate: the job was cancelled");
  }
  result.total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

Status run_bench_generate(const GenerateBenchOptions& o) {
  if (o.repeat < 1) return invalid_argument("bench generate: --repeat must be >= 1");
  const Machine machine = describe_machine();
  warn_if_busy(machine);
  const auto load_start = std::chrono::steady_clock::now();
  // As `tessera generate` opens it by default: automatic precision on the CPU, the embedded model
  // unless --model (a missing default is an error naming it).
  runtime::ShapeModelOptions model;
  model.path = o.model;
  TESSERA_ASSIGN_OR_RETURN(model.weights, runtime::parse_shape_weights(o.weights));
  model.release_idle_pages = !o.keep_pages;
  TESSERA_ASSIGN_OR_RETURN(model.device, runtime::parse_device(o.device));
  // Device memory (a GPU run): polled from before the load; the first query creates the process's
  // CUDA context, so `device_before` counts it.
  DeviceMemoryPeak device_memory(model.device != runtime::DeviceChoice::kCpu);
  const int64_t device_before = device_memory.current();
  reset_peak_resident_memory();
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Session> session,
                           runtime::Session::open(model));
  const runtime::ShapeModelInfo info = *session->shape_model();
  const int64_t load_peak = peak_resident_memory_bytes();
  // From here the peak is the jobs' own (where the kernel lets the peak be reset).
  const bool jobs_peak = reset_peak_resident_memory();
  const int64_t device_loaded = device_memory.current();
  const int64_t device_load_peak = device_memory.peak();
  device_memory.reset();
  const std::string model_dir = session->shape_model()->path;
  // What RESULTS.md names: the path given, or the embedded model's folder name (its absolute path
  // belongs to this checkout, not to the record).
  const std::string model_shown =
      o.model.empty()
          ? std::filesystem::path(model_dir).filename().string() + " (the embedded model)"
          : o.model;
  const double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_start)
          .count();
  const int resolution = o.resolution != 0 ? o.resolution : session->default_resolution();
  const std::vector<std::string> prompts =
      o.prompts.empty() ? std::vector<std::string>{"a torus", "a tall thin cylinder", "a mug",
                                                   "a wide flat box", "a snowman"}
                        : o.prompts;
  const char* stages[] = {runtime::kStageText,       runtime::kStagePrefill,
                          runtime::kStageDecode,     runtime::kStageLatentDecode,
                          runtime::kStageExtraction, runtime::kStageCleanup};

  std::string table =
      "| prompt | job (median) | min - max | text | prefill | decode | latent decode | "
      "extraction | cleanup | queries (per level) | triangles |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::vector<double> all_medians;
  for (const std::string& prompt : prompts) {
    for (int w = 0; w < o.warmup; ++w) {
      TESSERA_RETURN_IF_ERROR(run_job(*session, prompt, o.resolution).status());
    }
    std::vector<double> totals;
    std::map<std::string, std::vector<double>> per_stage;
    JobResult last;
    for (int r = 0; r < o.repeat; ++r) {
      TESSERA_ASSIGN_OR_RETURN(last, run_job(*session, prompt, o.resolution));
      totals.push_back(last.total_ms);
      for (const char* s : stages) per_stage[s].push_back(last.stage_ms[s]);
    }
    const Timing t = summarize(totals);
    all_medians.push_back(t.median);
    char line[512];
    std::snprintf(line, sizeof(line), "| %s | %.0f ms | %.0f - %.0f ms |", prompt.c_str(), t.median,
                  t.min, t.max);
    table += line;
    for (const char* s : stages) {
      std::snprintf(line, sizeof(line), " %.1f |", percentile(per_stage[s], 50));
      table += line;
    }
    std::snprintf(line, sizeof(line), " %lld (%s) | %lld |\n", static_cast<long long>(last.queries),
                  last.level_queries.c_str(), static_cast<long long>(last.triangles));
    table += line;
  }
  const double overall = percentile(all_medians, 50);
  // Variations: the same prompts sampled, 1 candidate (seed 1) and N candidates (seeds 1..N) in
  // one job, alternated so that both see the same machine.
  std::string variations_table;
  if (o.variations > 1) {
    char line[768];
    std::snprintf(line, sizeof(line),
                  "\nVariations: each prompt sampled (temperature 1, top-p 0.9), one job of 1 "
                  "candidate and one of %d candidates decoded together (seeds 1..%d), alternated, "
                  "%d of each after a warm-up; medians. Decode = prefill + decode stages (one step "
                  "serves every candidate); mesh = latent decode + extraction + clean-up of all "
                  "candidates, summed over the stages (a candidate's clean-up runs beside the next "
                  "candidate's extraction, so with several candidates the sum exceeds the time "
                  "they take).\n\n"
                  "| prompt | 1 candidate | %d candidates | ratio | decode 1 / %d | mesh 1 / %d |\n"
                  "|---|---|---|---|---|---|\n",
                  o.variations, o.variations, o.repeat, o.variations, o.variations, o.variations);
    variations_table = line;
    std::vector<double> ratios;
    for (const std::string& prompt : prompts) {
      TESSERA_RETURN_IF_ERROR(run_job(*session, prompt, o.resolution, o.variations).status());
      std::vector<double> one, many, dec1, decn, mesh1, meshn;
      for (int r = 0; r < o.repeat; ++r) {
        TESSERA_ASSIGN_OR_RETURN(JobResult a, run_job(*session, prompt, o.resolution, 1));
        TESSERA_ASSIGN_OR_RETURN(JobResult b,
                                 run_job(*session, prompt, o.resolution, o.variations));
        one.push_back(a.total_ms);
        many.push_back(b.total_ms);
        for (auto [res, dec, mesh] :
             {std::tuple{&a, &dec1, &mesh1}, std::tuple{&b, &decn, &meshn}}) {
          dec->push_back(res->stage_ms[runtime::kStagePrefill] +
                         res->stage_ms[runtime::kStageDecode]);
          mesh->push_back(res->stage_ms[runtime::kStageLatentDecode] +
                          res->stage_ms[runtime::kStageExtraction] +
                          res->stage_ms[runtime::kStageCleanup]);
        }
      }
      const double m1 = percentile(one, 50), mn = percentile(many, 50);
      ratios.push_back(mn / m1);
      std::snprintf(line, sizeof(line),
                    "| %s | %.0f ms | %.0f ms | %.2fx | %.0f / %.0f ms | %.0f / %.0f ms |\n",
                    prompt.c_str(), m1, mn, mn / m1, percentile(dec1, 50), percentile(decn, 50),
                    percentile(mesh1, 50), percentile(meshn, 50));
      variations_table += line;
    }
    std::snprintf(line, sizeof(line),
                  "\nMedian ratio over the prompts: **%.2fx** for %d candidates.\n",
                  percentile(ratios, 50), o.variations);
    variations_table += line;
  }
  char head[1536];
  std::snprintf(
      head, sizeof(head),
      "Model `%s`, shape GPT weights %s (%.3f GB read per token), resolution %d (the "
      "model's default unless --resolution), greedy, guidance 3.0, %d timed jobs per "
      "prompt after %d warm-up, %d threads; model load %.0f ms (once). Job = submit -> "
      "Done through the runtime Session (no file write). Median over prompts of the "
      "per-prompt medians: **%.0f ms**. Resident memory: %.2f GB after the load (peak "
      "during it %.2f GB), peak %s **%.2f GB**; weights mapped from their "
      "files %s.\n\n",
      model_shown.c_str(), info.weights.c_str(), static_cast<double>(info.gpt_weight_bytes) / 1e9,
      resolution, o.repeat, o.warmup, default_thread_pool().num_threads(), load_ms, overall,
      static_cast<double>(info.resident_bytes) / 1e9, static_cast<double>(load_peak) / 1e9,
      jobs_peak ? "of the jobs (after the load)" : "of the whole run",
      static_cast<double>(peak_resident_memory_bytes()) / 1e9,
      o.keep_pages ? "kept resident (--keep-pages)"
                   : "released between the phases that read them (the default)");
  std::string device_line;
  if (info.on_gpu && device_memory.active()) {
    char line[768];
    std::snprintf(line, sizeof(line),
                  "Backend %s. Device memory in use (cudaMemGetInfo: the whole device, which runs "
                  "nothing else; polled every 2 ms): %.2f GB before the load (this process's CUDA "
                  "context), %.2f GB after it (peak during it %.2f GB), peak of the jobs **%.2f "
                  "GB**.\n\n",
                  info.backend.c_str(), static_cast<double>(device_before) / 1e9,
                  static_cast<double>(device_loaded) / 1e9,
                  static_cast<double>(device_load_peak) / 1e9,
                  static_cast<double>(device_memory.peak()) / 1e9);
    device_line = line;
  } else if (info.on_gpu) {
    device_line = "Backend " + info.backend + " (device memory not measurable here).\n\n";
  }
  const std::string heading =
      info.on_gpu ? "## Generation end to end (CUDA)\n" : "## Generation end to end (CPU)\n";
  const std::string section = heading + "\n" + machine_markdown(machine) + head + device_line +
                              table + variations_table + "\n";
  std::fputs(section.c_str(), stdout);
  if (o.write_results) {
    Options paths;
    paths.results_path = o.results_path;
    const std::string path = results_path(paths);
    TESSERA_RETURN_IF_ERROR(write_results_section(path, heading, section));
    std::printf("wrote the \"%s\" section of %s\n", heading.substr(3, heading.size() - 4).c_str(),
                path.c_str());
  }
  return Status::ok_status();
}

}  // namespace

void register_generate_bench(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<GenerateBenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "generate", "Prompt -> final mesh end to end through the Session (default: tessera-tiny)");
  cmd->add_option("--model,-m", o->model, "Model directory (default: the embedded tessera-tiny)");
  cmd->add_option("--prompt,-p", o->prompts, "Prompt (repeatable; default: five examples)");
  cmd->add_option("--repeat", o->repeat, "Timed jobs per prompt after one warm-up (default 5)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--variations", o->variations,
                  "Also time N candidates in one job against 1 (sampled), per prompt (2-8)")
      ->check(CLI::Range(1, 8));
  cmd->add_option(
      "--weights", o->weights,
      "The weights: auto (the default: as tessera generate), fast, f32, bf16, int8 (the shape "
      "GPT quantized at load unless the file is int8 already)");
  cmd->add_flag("--keep-pages", o->keep_pages,
                "Keep the weights mapped from their files resident between the job's phases (the "
                "default drops them when a phase is done with them; this measures the difference)");
  cmd->add_option("--device", o->device,
                  "cpu (default), cuda (the GPU; fails, saying why, without a usable one; adds the "
                  "device memory in use, load and peak) or auto")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  cmd->add_option("--warmup", o->warmup, "Untimed jobs per prompt first (default 1)")
      ->check(CLI::Range(0, 100));
  cmd->add_option("--resolution,-r", o->resolution,
                  "Extraction lattice 2^k+1 (default: the model's)");
  cmd->add_flag("--write-results", o->write_results,
                "Replace the \"## Generation end to end (CPU)\" section of bench/RESULTS.md (CUDA "
                "with --device cuda)");
  cmd->add_option("--results", o->results_path, "Results file for --write-results");
  cmd->callback([o, exit_code] {
    const Status st = run_bench_generate(*o);
    if (!st.ok()) {
      std::fprintf(stderr, "tessera-bench generate: %s\n", st.to_string().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tessera::bench
