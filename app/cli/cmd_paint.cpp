// tessera paint MESH --prompt TEXT -o OUT [options]: paints any mesh Tessera opens from views
// around it with the image model (docs/texture-painting.md) and writes it textured (.glb, .fbx,
// .obj + .mtl + .png) through the export every command shares (presets, size, texture limit).
// Progress per view on stderr; Ctrl-C cancels and the mesh is not written (views already saved
// with --save-views stay: they are progress, written as each view ends). The file carries the
// input's Tessera settings, if any, plus the "paint" record (unless --no-metadata).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "app/cli/commands.h"
#include "app/cli/paint_cli.h"
#include "app/cli/shape_cli.h"
#include "engine/mesh/import.h"
#include "engine/mesh/metadata.h"

namespace tessera::cli {
namespace {

struct PaintCliOptions {
  std::string input, output, prompt;
  PaintCli paint;
  MeshExportCli exporting;
  bool no_metadata = false;
  DeviceCli device;
};

int run_paint(const PaintCliOptions& o) {
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "tessera paint: %s\n", message.c_str());
    return 1;
  };
  if (Status st = check_mesh_output(o.output); !st.ok()) return fail(st.message());
  if (Status st = check_paint_output(o.output, "-o"); !st.ok()) return fail(st.message());
  auto export_options = checked_export_options(o.exporting, o.output);
  if (!export_options.ok()) return fail(export_options.status().message());
  PaintRunner painter(o.paint, "", o.device);
  if (Status st = painter.check(o.prompt); !st.ok()) return fail(st.message());
  std::vector<std::string> warnings;
  auto m = mesh::import_mesh_file(o.input, &warnings);
  if (!m.ok()) return fail(m.status().message());
  for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (m->empty()) return fail(o.input + ": the file holds no triangles");
  nlohmann::json settings;  // the input's own (a generated mesh's shape settings), carried over
  if (!o.no_metadata) {
    auto metadata = mesh::read_metadata(o.input);
    settings =
        metadata.ok() && metadata->is_object() ? std::move(*metadata) : nlohmann::json::object();
  }
  auto painted = painter.paint(std::make_shared<const mesh::Mesh>(std::move(*m)), o.prompt,
                               static_cast<uint64_t>(0));
  if (!painted.ok()) return fail(painted.status().message());
  if (!o.no_metadata) settings["paint"] = painted->record;
  if (Status st = write_cli_mesh(*painted->mesh, o.output, *export_options, o.exporting, nullptr,
                                 std::move(settings));
      !st.ok()) {
    return fail(st.message());
  }
  std::printf("wrote %s (%lld triangles, %lldx%lld texture, %s uvs)\n", o.output.c_str(),
              static_cast<long long>(painted->mesh->triangle_count()),
              static_cast<long long>(painted->mesh->texture.width),
              static_cast<long long>(painted->mesh->texture.height),
              painted->result.new_atlas ? "new" : "its own");
  return 0;
}

}  // namespace

void register_paint(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<PaintCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "paint",
      "Paint a mesh (any format Tessera opens) from views around it with the image model: a UV "
      "atlas, a depth-ControlNet image per view inpainted over what earlier views painted, "
      "baked into one texture; writes .glb, .fbx or .obj (+ .mtl + .png)");
  cmd->add_option("mesh", o->input, "Mesh file to paint")->required();
  cmd->add_option("-p,--prompt", o->prompt, "What the object looks like")->required();
  cmd->add_option("-o,--output", o->output, "Textured mesh to write (.glb, .fbx, .obj)")
      ->required();
  add_paint_options(cmd, &o->paint, "");
  add_mesh_export_options(cmd, &o->exporting, false);
  cmd->add_flag("--no-metadata", o->no_metadata,
                "Write no settings into the file (neither the input's nor the painting's)");
  add_device_options(cmd, &o->device);
  cmd->callback([o, exit_code] { *exit_code = run_paint(*o); });
}

}  // namespace tessera::cli
