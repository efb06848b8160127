// tessera decode: saved shape tokens (`tessera generate --tokens-out`) -> mesh, at any resolution,
// without running the text encoder or the GPT (preview fast, then decode the keeper finely).
// A file with fewer ids than the model's num_latents is a prefix: the rest is filled with the
// model's fill token (see engine/shape/pipeline.h).
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "app/cli/commands.h"
#include "app/cli/shape_cli.h"
#include "engine/runtime/tokens_file.h"
#include "core/trace.h"
#include "engine/mesh/export.h"
#include "engine/runtime/session.h"

namespace tessera::cli {

namespace {

struct DecodeCliOptions {
  std::string tokens;
  std::string model;
  std::string output;
  int resolution = 0;  // 0: the model's default (tessera-tiny: 65; Cube 3D: 257)
  bool bf16 = false;
  DeviceCli device;
  MeshExportCli exporting;
};

int run_decode(const DecodeCliOptions& o) {
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "tessera decode: %s\n", message.c_str());
    return 1;
  };
  if (Status st = check_mesh_output(o.output); !st.ok()) return fail(st.message());
  auto export_options = checked_export_options(o.exporting, o.output);
  if (!export_options.ok()) return fail(export_options.status().message());
  auto texture = load_texture_option(o.exporting);
  if (!texture.ok()) return fail(texture.status().message());
  if (auto k = runtime::resolution_base(o.resolution); o.resolution != 0 && !k.ok())
    return fail("--resolution: " + k.status().message());
  auto ids = runtime::read_tokens_file(o.tokens);
  if (!ids.ok()) return fail(ids.status().message());
  Stopwatch load_watch;
  auto session = runtime::Session::open(shape_model_options(
      o.model, o.bf16 ? runtime::ShapeWeights::kBF16 : runtime::ShapeWeights::kAuto, o.device));
  if (!session.ok()) return fail(session.status().message());
  const runtime::ShapeModelInfo model = *(*session)->shape_model();
  print_device(o.device, model.backend, model.backend_note);
  const double load_ms = load_watch.elapsed_ms();
  if (Status st = (*session)->check_tokens(*ids); !st.ok()) {
    return fail("tokens file '" + o.tokens + "': " + st.message());
  }
  runtime::JobOptions job;
  job.tokens = *ids;
  job.mesh.resolution = o.resolution;
  job.mesh.cleanup.max_triangles = effective_max_faces(o.exporting);  // before normals
  std::vector<std::pair<std::string, double>> stages;
  std::shared_ptr<const runtime::FinalMeshEvent> final_mesh;
  const runtime::Event end =
      (*session)->wait_for((*session)->submit(job), [&](const runtime::Event& event) {
        if (const auto* s = std::get_if<runtime::StageEvent>(&event.payload)) {
          stages.emplace_back(s->name, s->ms);
        } else if (const auto* f = std::get_if<runtime::FinalMeshEvent>(&event.payload)) {
          final_mesh = std::make_shared<const runtime::FinalMeshEvent>(*f);
        }
      });
  if (const auto* e = std::get_if<runtime::ErrorEvent>(&end.payload)) {
    return fail(e->status.message());
  }
  if (!final_mesh) return fail("internal error: the job ended without a mesh");
  const mesh::Mesh& result = *final_mesh->mesh;
  if (Status st = write_cli_mesh(result, o.output, *export_options, o.exporting, *texture);
      !st.ok())
    return fail(st.message());

  auto total = [&](const char* name) {
    for (const auto& [n, ms] : stages) {
      if (n == name) return ms;
    }
    return 0.0;
  };
  std::fprintf(stderr, "timings (ms):\n");
  std::fprintf(stderr, "  load           %9.1f\n", load_ms);
  std::fprintf(stderr, "  latent decode  %9.1f  (%zu tokens%s)\n",
               total(runtime::kStageLatentDecode), ids->size(),
               static_cast<int64_t>(ids->size()) < model.num_latents
                   ? (", filled to " + std::to_string(model.num_latents) + " with code " +
                      std::to_string(model.fill_token_id))
                         .c_str()
                   : "");
  print_extraction_timing(total(runtime::kStageExtraction), *final_mesh);
  std::fprintf(stderr, "  cleanup        %9.1f\n", total(runtime::kStageCleanup));
  std::printf("wrote %s (%lld vertices, %lld triangles)\n", o.output.c_str(),
              static_cast<long long>(result.vertex_count()),
              static_cast<long long>(result.triangle_count()));
  return 0;
}

}  // namespace

void register_decode(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<DecodeCliOptions>();
  CLI::App* cmd =
      app.add_subcommand("decode", "Turn saved shape tokens into a mesh (no generation)");
  cmd->add_option("--tokens,-t", o->tokens, "Tokens file (from generate --tokens-out)")->required();
  cmd->add_option("--model,-m", o->model,
                  "Model directory, or a name from the Hugging Face cache (Roblox/cube3d-v0.5; "
                  "tessera models list); default: the embedded tessera-tiny");
  cmd->add_option("--output,-o", o->output, "Mesh to write: .obj (+ .mtl), .glb or .fbx")
      ->required();
  add_mesh_export_options(cmd, &o->exporting);
  cmd->add_option("--resolution,-r", o->resolution,
                  "Extraction lattice points per axis, 2^k+1 (default: the model's, 65 for "
                  "tessera-tiny, 257 for Cube 3D)");
  cmd->add_flag("--bf16", o->bf16,
                "Convert the weights to bf16 once at load (default: automatic, bf16 for large "
                "models)");
  add_device_options(cmd, &o->device);
  cmd->callback([o, exit_code] { *exit_code = run_decode(*o); });
}

}  // namespace tessera::cli
