// tessera decode: saved shape tokens (`tessera generate --tokens-out`) -> mesh, at any resolution,
// without running the text encoder or the GPT (preview fast, then decode the keeper finely).
// A file with fewer ids than the model's num_latents is a prefix: the rest is filled with the
// model's fill token (see engine/shape/pipeline.h).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "app/cli/shape_cli.h"
#include "engine/core/trace.h"
#include "engine/mesh/export.h"
#include "engine/shape/pipeline.h"

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
  auto export_options = to_export_options(o.exporting);
  if (!export_options.ok()) return fail(export_options.status().message());
  auto texture = load_texture_option(o.exporting);
  if (!texture.ok()) return fail(texture.status().message());
  if (auto k = shape::resolution_base(o.resolution); o.resolution != 0 && !k.ok())
    return fail("--resolution: " + k.status().message());
  auto ids = read_tokens_file(o.tokens);
  if (!ids.ok()) return fail(ids.status().message());
  auto model_dir = resolve_model_dir(o.model);
  if (!model_dir.ok()) return fail(model_dir.status().message());

  Stopwatch load_watch;
  auto pipeline =
      shape::ShapePipeline::load(*model_dir, cli_pipeline_options(o.bf16, o.device.choice()));
  if (!pipeline.ok()) return fail(pipeline.status().message());
  print_device(o.device, **pipeline);
  const double load_ms = load_watch.elapsed_ms();
  if (Status st = (*pipeline)->validate_tokens(*ids); !st.ok()) {
    return fail("tokens file '" + o.tokens + "': " + st.message());
  }
  shape::MeshOptions mesh_options;
  mesh_options.resolution = o.resolution;
  mesh_options.cleanup.max_triangles = o.exporting.max_faces;  // decimated before normals
  Trace trace;
  mesh::ExtractionStats stats;
  auto result = (*pipeline)->tokens_to_mesh(*ids, mesh_options, &trace, nullptr, &stats);
  if (!result.ok()) return fail(result.status().message());
  if (Status st = write_cli_mesh(*result, o.output, *export_options, o.exporting, *texture);
      !st.ok())
    return fail(st.message());

  auto total = [&](const char* name) {
    const TraceStats* s = trace.find(name);
    return s != nullptr ? s->total_ms : 0.0;
  };
  std::fprintf(stderr, "timings (ms):\n");
  std::fprintf(stderr, "  load           %9.1f\n", load_ms);
  std::fprintf(stderr, "  latent decode  %9.1f  (%zu tokens%s)\n", total(shape::kTraceLatentDecode),
               ids->size(),
               static_cast<int64_t>(ids->size()) < (*pipeline)->num_latents()
                   ? (", filled to " + std::to_string((*pipeline)->num_latents()) + " with code " +
                      std::to_string((*pipeline)->fill_token_id()))
                         .c_str()
                   : "");
  std::fprintf(stderr,
               "  extraction     %9.1f  (resolution %d, %lld occupancy queries, %d levels)\n",
               total(shape::kTraceExtraction), (*pipeline)->resolve_resolution(o.resolution),
               static_cast<long long>(stats.queries),
               stats.levels);
  std::fprintf(stderr, "  cleanup        %9.1f\n", total(shape::kTraceCleanup));
  std::printf("wrote %s (%lld vertices, %lld triangles)\n", o.output.c_str(),
              static_cast<long long>(result->vertex_count()),
              static_cast<long long>(result->triangle_count()));
  return 0;
}

}  // namespace

void register_decode(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<DecodeCliOptions>();
  CLI::App* cmd =
      app.add_subcommand("decode", "Turn saved shape tokens into a mesh (no generation)");
  cmd->add_option("--tokens,-t", o->tokens, "Tokens file (from generate --tokens-out)")->required();
  cmd->add_option("--model,-m", o->model, "Model directory (default: the embedded tessera-tiny)");
  cmd->add_option("--output,-o", o->output, "Mesh to write: .obj (+ .mtl), .glb or .fbx")
      ->required();
  add_mesh_export_options(cmd, &o->exporting);
  cmd->add_option("--resolution,-r", o->resolution,
                  "Extraction lattice points per axis, 2^k+1 (default: the model's, 65 for tessera-tiny, 257 for Cube 3D)");
  cmd->add_flag("--bf16", o->bf16, "Convert the weights to bf16 once at load");
  add_device_options(cmd, &o->device);
  cmd->callback([o, exit_code] { *exit_code = run_decode(*o); });
}

}  // namespace tessera::cli
