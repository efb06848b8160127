// tessera convert MESH -o OUT [--preset NAME] [export options...] [--no-metadata]: an existing mesh
// (.obj .glb .gltf .fbx .stl .3mf, read as Y-up, the way Tessera's default exports and glTF are)
// written again as an asset for a platform: the preset's axes, unit, budget, closing, size, pivot
// and LODs, exactly as `generate` applies them. Tessera metadata the input carries goes on into
// the output with the new export settings (so `generate --from OUT` still works), unless
// --no-metadata. Exit status 0 when written, 1 on an error (the reason on stderr, naming the file
// or the option; nothing is written then), 2 for bad usage.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/shape_cli.h"
#include "engine/mesh/import.h"
#include "engine/mesh/metadata.h"

namespace tessera::cli {
namespace {

struct ConvertCliOptions {
  std::string input;
  std::string output;
  bool no_metadata = false;
  MeshExportCli exporting;
};

int run_convert(const ConvertCliOptions& o) {
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "tessera convert: %s\n", message.c_str());
    return 1;
  };
  if (Status st = check_mesh_output(o.output); !st.ok()) return fail(st.message());
  auto export_options = checked_export_options(o.exporting, o.output);
  if (!export_options.ok()) return fail(export_options.status().message());
  auto texture = load_texture_option(o.exporting);
  if (!texture.ok()) return fail(texture.status().message());
  std::vector<std::string> warnings;
  auto m = mesh::import_mesh_file(o.input, &warnings);
  if (!m.ok()) return fail(m.status().message());
  for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (m->empty()) return fail(o.input + ": the file holds no triangles");
  nlohmann::json settings;  // the source's own, carried over (export_asset adds this export's)
  if (!o.no_metadata) {
    auto metadata = mesh::read_metadata(o.input);
    if (metadata.ok()) {
      settings = std::move(*metadata);
    } else if (metadata.status().code() != ErrorCode::kNotFound &&
               metadata.status().code() != ErrorCode::kInvalidArgument) {
      std::fprintf(stderr, "warning: %s (the output carries no settings)\n",
                   metadata.status().message().c_str());
    }
  }
  const int64_t budget = effective_max_faces(o.exporting);
  mesh::AssetReport report;
  if (Status st = write_cli_mesh(*m, o.output, *export_options, o.exporting, *texture,
                                 std::move(settings), &report);
      !st.ok()) {
    return fail(st.message());
  }
  std::printf("%s: %lld triangles", o.output.c_str(),
              static_cast<long long>(report.lod_triangles.empty() ? 0 : report.lod_triangles[0]));
  if (budget > 0) std::printf(" (budget %lld)", static_cast<long long>(budget));
  std::printf("\n");
  return 0;
}

}  // namespace

void register_convert(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ConvertCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Write an existing mesh (.obj .glb .gltf .fbx .stl .3mf, or any format Assimp reads: .dae "
      ".ply .3ds ...; `tessera check --formats` lists them) again for a platform: --preset, "
      "size, pivot, unit, axes, triangle budget, LODs, closing");
  cmd->add_option("mesh", o->input, "Mesh file to read (Y-up)")->required();
  cmd->add_option("-o,--output", o->output, "Output mesh (.obj, .glb, .fbx, .stl or .3mf)")
      ->required();
  cmd->add_flag("--no-metadata", o->no_metadata,
                "Do not carry the input's Tessera settings into the output");
  add_mesh_export_options(cmd, &o->exporting);
  cmd->callback([o, exit_code] { *exit_code = run_convert(*o); });
}

}  // namespace tessera::cli
