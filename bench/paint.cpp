// tessera-bench paint [--config sd15|tessera-tiny] [--size PX] [--steps N] [--views N] [--mesh
// FILE]
// [--work DIR]: a whole paint job (runtime::Session::submit_paint, what `tessera paint` runs) timed
// by phase: model load, atlas, and per view the render (depth, init, mask), the generation and the
// bake, then the fill and the checks; with what it gives: coverage, seam error, agreement.
// - sd15 (default): SD 1.5's architecture with random weights (no download) as a CompVis single
//   file, a random SD 1.5 depth ControlNet and a random tiny decoder (TAESD), written under --work
//   (about 3 GB, removed afterwards unless --keep): 512 x 512 views with LCM in 4 steps at guidance
//   1 (what --fast runs; the LCM-LoRA's merge is timed by `tessera-bench lora`), each through the
//   depth ControlNet, views after the first inpainted over the paint so far.
// - tessera-tiny: the embedded model with its own ControlNet (64 x 64 views, Euler, 20 steps).
// The mesh: the chair field of `bench atlas` extracted at 2^7 + 1 (about 188k triangles), or
// --mesh FILE. --runs paints in one session (default 2): the first after the model load pays the
// first-use costs (the CPU's convolution algorithm chosen by measurement per layer and shape, the
// weights packed for it), a later one is what the studio or `tessera serve` sees from then on; the
// table is the last run's, a line per run above it. The figures go to RESULTS.md by hand with the
// command and the machine line printed here.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/common.h"
#include "bench/fields.h"
#include "bench/random_checkpoint.h"
#include "bench/subcommands.h"
#include "core/mapped_file.h"
#include "engine/diffusion/controlnet.h"
#include "engine/diffusion/sd_config.h"
#include "engine/diffusion/tiny_decoder.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/extraction.h"
#include "engine/mesh/import.h"
#include "engine/runtime/session.h"

namespace tessera::bench {
namespace {

struct PaintBenchOptions {
  std::string config = "sd15";
  int size = 0;   // 0: 512 for sd15, the model's for tessera-tiny
  int steps = 0;  // 0: 4 (LCM) for sd15, 20 (Euler) for tessera-tiny
  int views = 4;  // the ring; plus top and bottom
  std::string mesh;
  std::string work;
  bool keep = false;
  int runs = 2;  // paints in one session: the first pays the kernels' first-use costs
};

// CLIP ViT-L/14's text encoder (SD 1.x's) under `prefix`.
std::map<std::string, std::vector<int64_t>> clip_l_shapes(const std::string& prefix) {
  constexpr int64_t kWidth = 768, kLayers = 12, kHidden = 3072, kVocab = 49408, kPositions = 77;
  std::map<std::string, std::vector<int64_t>> s;
  const std::string t = prefix + "text_model.";
  s[t + "embeddings.token_embedding.weight"] = {kVocab, kWidth};
  s[t + "embeddings.position_embedding.weight"] = {kPositions, kWidth};
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string layer = t + "encoder.layers." + std::to_string(l) + ".";
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      s[layer + "self_attn." + proj + ".weight"] = {kWidth, kWidth};
      s[layer + "self_attn." + proj + ".bias"] = {kWidth};
    }
    for (const char* norm : {"layer_norm1", "layer_norm2"}) {
      s[layer + norm + ".weight"] = {kWidth};
      s[layer + norm + ".bias"] = {kWidth};
    }
    s[layer + "mlp.fc1.weight"] = {kHidden, kWidth};
    s[layer + "mlp.fc1.bias"] = {kHidden};
    s[layer + "mlp.fc2.weight"] = {kWidth, kHidden};
    s[layer + "mlp.fc2.bias"] = {kWidth};
  }
  s[t + "final_layer_norm.weight"] = {kWidth};
  s[t + "final_layer_norm.bias"] = {kWidth};
  return s;
}

Status write_random(const std::map<std::string, std::vector<int64_t>>& shapes,
                    const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<uint8_t> image, random_checkpoint(shapes));
  return write_file_atomic(path, image.data(), image.size());
}

struct Sd15Files {
  std::string model, control, taesd;
};

// SD 1.5 (UNet, VAE encoder and decoder, CLIP-L) as a CompVis single file, its depth ControlNet
// and a tiny decoder, random, in `dir`.
Expected<Sd15Files> write_sd15_files(const std::filesystem::path& dir) {
  Sd15Files f{(dir / "sd15-random.safetensors").string(),
              (dir / "control-depth-random.safetensors").string(),
              (dir / "taesd_decoder.safetensors").string()};
  std::map<std::string, std::vector<int64_t>> shapes =
      clip_l_shapes("cond_stage_model.transformer.");
  for (auto& [n, s] : diffusion::unet_tensor_shapes(diffusion::sd15_unet_config())) shapes[n] = s;
  for (auto& [n, s] : diffusion::vae_decoder_tensor_shapes(diffusion::sd15_vae_decoder_config())) {
    shapes[n] = s;
  }
  for (auto& [n, s] : diffusion::vae_encoder_tensor_shapes(diffusion::sd15_vae_encoder_config())) {
    shapes[n] = s;
  }
  TESSERA_RETURN_IF_ERROR(write_random(shapes, f.model));
  std::map<std::string, std::vector<int64_t>> control;
  for (auto& [n, s] : diffusion::controlnet_tensor_shapes(diffusion::sd15_controlnet_config())) {
    control[n] = s;
  }
  TESSERA_RETURN_IF_ERROR(write_random(control, f.control));
  std::map<std::string, std::vector<int64_t>> tiny;
  for (auto& [n, s] : diffusion::tiny_decoder_tensor_shapes(diffusion::TinyDecoderConfig{})) {
    tiny[n] = s;
  }
  TESSERA_RETURN_IF_ERROR(write_random(tiny, f.taesd));
  return f;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

Status run_bench_paint(const PaintBenchOptions& o) {
  namespace fs = std::filesystem;
  const bool sd15 = o.config == "sd15";
  if (!sd15 && o.config != "tessera-tiny") {
    return invalid_argument("bench paint: --config must be sd15 or tessera-tiny, not '" + o.config +
                            "'");
  }
  const Machine machine = describe_machine();
  std::printf("%s", machine_markdown(machine).c_str());
  warn_if_busy(machine);

  mesh::Mesh object;
  std::string mesh_name = "object (bench atlas's chair field at 2^7 + 1)";
  if (o.mesh.empty()) {
    mesh::ExtractionOptions ex;
    ex.resolution_base = 7;
    TESSERA_ASSIGN_OR_RETURN(object, mesh::extract_coarse_to_fine(object_field, ex));
    TESSERA_RETURN_IF_ERROR(mesh::cleanup(object, mesh::CleanupOptions{}, nullptr));
  } else {
    TESSERA_ASSIGN_OR_RETURN(object, mesh::import_mesh_file(o.mesh));
    mesh_name = o.mesh;
  }

  runtime::PaintJobOptions job;
  job.image.prompt = "a wooden chair with a red cushion";
  job.views.ring = o.views;
  std::optional<Sd15Files> files;
  fs::path work;
  runtime::ImageModelOptions model;
  if (sd15) {
    work = o.work.empty()
               ? fs::temp_directory_path() / ("tessera-bench-paint-" + std::to_string(::getpid()))
               : fs::path(o.work);
    std::error_code ec;
    fs::create_directories(work, ec);
    if (ec) return invalid_argument("--work " + work.string() + ": " + ec.message());
    const auto writing = std::chrono::steady_clock::now();
    auto written = write_sd15_files(work);
    if (!written.ok()) {
      if (!o.keep) fs::remove_all(work, ec);
      return written.status();
    }
    files = *written;
    std::printf("random SD 1.5 files written to %s in %.1f s\n", work.string().c_str(),
                ms_since(writing) / 1000);
    model.path = files->model;
    job.image.sampler = runtime::SamplerKind::kLcm;
    job.image.steps = o.steps > 0 ? o.steps : 4;
    job.image.guidance = 1.0f;
    job.image.control_model = files->control;
    job.image.tiny_decoder = files->taesd;
    job.view_size = o.size > 0 ? o.size : 512;
  } else {
    job.image.steps = o.steps > 0 ? o.steps : runtime::kDefaultImageSteps;
    job.view_size = o.size;
  }
  auto cleanup_work = [&] {
    std::error_code ec;
    if (sd15 && !o.keep) fs::remove_all(work, ec);
  };

  auto session = runtime::Session::create();
  const auto loading = std::chrono::steady_clock::now();
  const runtime::Event loaded = session->wait_for(session->load_image_model(model));
  const double load_ms = ms_since(loading);
  if (const auto* e = std::get_if<runtime::ErrorEvent>(&loaded.payload)) {
    cleanup_work();
    return e->status;
  }
  const runtime::ImageModelInfo info = *session->image_model();
  job.mesh = std::make_shared<const mesh::Mesh>(std::move(object));
  std::map<std::string, double> stages;
  std::vector<runtime::PaintViewEvent> views;
  std::vector<int> steps_per_view;
  runtime::PaintedMeshEvent result;
  double paint_ms = 0;
  for (int run = 1; run <= o.runs; ++run) {
    stages.clear();
    views.clear();
    steps_per_view.clear();
    const auto painting = std::chrono::steady_clock::now();
    const uint64_t id = session->submit_paint(job);
    int steps = 0;
    for (bool done = false; !done;) {
      auto event = session->wait_event(std::chrono::milliseconds(200));
      if (!event || event->job != id) continue;
      if (std::get_if<runtime::ImageStepEvent>(&event->payload) != nullptr) {
        ++steps;
      } else if (const auto* s = std::get_if<runtime::StageEvent>(&event->payload)) {
        stages[s->name] += s->ms;
      } else if (const auto* v = std::get_if<runtime::PaintViewEvent>(&event->payload)) {
        views.push_back(*v);
        steps_per_view.push_back(steps);
        steps = 0;
        std::fprintf(stderr, "run %d view %d/%d %s: %.1f s\n", run, v->view + 1, v->views,
                     v->name.c_str(),
                     (v->render_ms + v->generate_ms + v->bake_ms + v->fill_ms) / 1000);
      } else if (const auto* r = std::get_if<runtime::PaintedMeshEvent>(&event->payload)) {
        result = *r;
      } else if (const auto* e = std::get_if<runtime::ErrorEvent>(&event->payload)) {
        cleanup_work();
        return e->status;
      }
      done = event->terminal();
    }
    paint_ms = ms_since(painting);
    std::printf("run %d: whole paint %.1f s%s\n", run, paint_ms / 1000,
                run == 1 ? " (the first after the model load)" : "");
  }
  cleanup_work();

  std::printf("\nmodel: %s (%s), %s; mesh: %s, %lld triangles\n",
              sd15 ? "SD 1.5 architecture, random weights" : "tessera-tiny (embedded)",
              info.precision.c_str(), info.summary.c_str(), mesh_name.c_str(),
              static_cast<long long>(job.mesh->triangle_count()));
  std::printf("views %d x %d px, %s %d steps, guidance %.1f, texture %d\n\n",
              static_cast<int>(result.view_size), static_cast<int>(result.view_size),
              sd15 ? "LCM" : "Euler", job.image.steps, job.image.guidance, job.texture_size);
  std::printf(
      "| phase | generated | steps | render ms | generate ms (text / encode / denoise / decode / "
      "other) | bake ms | fill ms |\n|---|---|---|---|---|---|---|\n");
  std::printf("| model load | | | | %.0f | | |\n", load_ms);
  std::printf("| atlas | | | | | %.0f | |\n", stages[runtime::kStagePaintAtlas]);
  double render = 0, generate = 0, bake = 0, fill = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    const runtime::PaintViewEvent& v = views[i];
    std::printf(
        "| view %d %s | %.0f %% | %d | %.0f | %.0f (%.0f / %.0f / %.0f / %.0f / %.0f) | %.0f | "
        "%.0f "
        "|\n",
        v.view + 1, v.name.c_str(), 100 * v.generated_share, steps_per_view[i], v.render_ms,
        v.generate_ms, v.text_ms, v.encode_ms, v.denoise_ms, v.decode_ms,
        v.generate_ms - v.text_ms - v.encode_ms - v.denoise_ms - v.decode_ms, v.bake_ms, v.fill_ms);
    render += v.render_ms;
    generate += v.generate_ms;
    bake += v.bake_ms;
    fill += v.fill_ms;
  }
  std::printf("| checks (agreement, seams) | | | | | %.0f | |\n",
              stages[runtime::kStagePaintCheck]);
  std::printf("| **whole paint** | | | %.0f | %.0f | %.0f | %.0f |\n\n", render, generate, bake,
              fill);
  std::printf("whole paint, run %d (atlas to painted mesh, the model loaded): %.1f s\n", o.runs,
              paint_ms / 1000);
  std::string agreement;
  for (size_t i = 0; i < result.agreement_db.size(); ++i) {
    char part[64];
    std::snprintf(part, sizeof(part), "%s%s %.1f", i ? ", " : "", result.view_names[i].c_str(),
                  result.agreement_db[i]);
    agreement += part;
  }
  for (const std::string& note : result.notes) std::printf("note: %s\n", note.c_str());
  std::printf("coverage %.1f %%; seam error mean %.2f, p95 %.2f levels; agreement (dB): %s\n",
              100 * result.coverage, result.seam_mean, result.seam_p95, agreement.c_str());
  return Status();
}

}  // namespace

void register_paint_bench(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<PaintBenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "paint",
      "A whole paint job by phase (atlas, render, generate, bake, fill) on SD 1.5-sized "
      "random weights (LCM 4 steps, depth ControlNet, tiny decoder) or tessera-tiny");
  cmd->add_option("--config", o->config, "sd15 (default) or tessera-tiny");
  cmd->add_option("--size", o->size, "View side in pixels (default 512 for sd15)");
  cmd->add_option("--steps", o->steps, "Steps per view (default 4 LCM for sd15, 20 Euler)");
  cmd->add_option("--views", o->views, "Views around the object (plus top and bottom)");
  cmd->add_option("--mesh", o->mesh, "Paint this mesh instead of the chair object");
  cmd->add_option("--work", o->work, "Where the random SD 1.5 files go (default: a temp folder)");
  cmd->add_flag("--keep", o->keep, "Keep them");
  cmd->add_option("--runs", o->runs, "Paints in one session (default 2; the table is the last's)")
      ->check(CLI::Range(1, 10));
  cmd->callback([o, exit_code] {
    const Status st = run_bench_paint(*o);
    if (!st.ok()) std::fprintf(stderr, "tessera-bench paint: %s\n", st.message().c_str());
    *exit_code = st.ok() ? 0 : 1;
  });
}

}  // namespace tessera::bench
