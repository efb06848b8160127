// tessera check MESH [--json] [--max-pairs N]: is a mesh file closed and manifold, as a printer,
// a slicer or Roblox will see it (engine/mesh/check.h says what is measured). Exit status 0 only
// when it is closed and manifold; 1 when it is not, or the file cannot be read (the reason on
// stderr, naming the file); 2 for bad usage.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "app/cli/commands.h"
#include "engine/mesh/check.h"
#include "engine/mesh/import.h"

namespace tessera::cli {
namespace {

struct CheckCliOptions {
  std::string path;
  bool json = false;
  bool formats = false;
  int64_t max_pairs = mesh::CheckOptions{}.max_pair_tests;
};

int run_check(const CheckCliOptions& o) {
  if (o.formats) {
    std::printf("%s\n", mesh::import_formats_text().c_str());
    return 0;
  }
  if (o.path.empty()) {
    std::fprintf(stderr, "tessera check: a mesh file is required (or --formats)\n");
    return 2;
  }
  std::vector<std::string> warnings;
  auto m = mesh::import_mesh_file(o.path, &warnings);
  if (!m.ok()) {
    std::fprintf(stderr, "tessera check: %s\n", m.status().message().c_str());
    return 1;
  }
  for (const std::string& w : warnings)
    std::fprintf(stderr, "tessera check: warning: %s\n", w.c_str());
  mesh::CheckOptions options;
  options.max_pair_tests = o.max_pairs;
  const mesh::MeshReport report = mesh::check_mesh(*m, options);
  if (o.json) {
    std::printf("%s\n", mesh::report_json(report).c_str());
  } else {
    std::printf("%s\n%s", o.path.c_str(), mesh::report_text(report).c_str());
    std::printf("result              %s\n", report.watertight()
                                                ? "closed and manifold"
                                                : "NOT closed and manifold (exit status 1)");
  }
  return report.watertight() ? 0 : 1;
}

}  // namespace

void register_check(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<CheckCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "check",
      "Check a mesh file (.obj .glb .gltf .fbx .stl .3mf, or any format Assimp reads: .dae .ply "
      ".3ds ...; --formats lists them): holes, non-manifold edges, components, genus, volume, "
      "self-intersections; exit status 0 only when closed and manifold");
  cmd->add_option("mesh", o->path, "Mesh file");
  cmd->add_flag("--formats", o->formats,
                "List the formats that open (natively, and through Assimp when installed)");
  cmd->add_flag("--json", o->json, "Print the report as JSON");
  cmd->add_option("--max-pairs", o->max_pairs,
                  "Self-intersection check: test at most N triangle pairs (default 20000000)")
      ->check(CLI::PositiveNumber);
  cmd->callback([o, exit_code] { *exit_code = run_check(*o); });
}

}  // namespace tessera::cli
