// Blender 3.4 headless for the end-to-end tests: whether it is installed, the scripts' shared
// opening, and one run of a script over files with the lines it printed under a tag.
#pragma once

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "tests/support/cli_runner.h"

namespace tessera::testing {

inline bool blender_on_path() {
  return std::system("command -v blender >/dev/null 2>&1") == 0;
}

// Prepended to every script: Blender 3.4's glTF importer still uses numpy.bool (gone in Debian 12's
// numpy 1.24), so the alias goes back; import_file(path) empties the scene and imports one file by
// its extension (glTF with smooth shading: the default shading path is the one that crashes).
inline constexpr const char* kBlenderPrelude = R"PY(
import sys, json, os, bpy
import numpy
if not hasattr(numpy, "bool"):
    numpy.bool = bool
def import_file(path):
    for o in list(bpy.data.objects):
        bpy.data.objects.remove(o)
    p = path.lower()
    if p.endswith(".fbx"):
        bpy.ops.import_scene.fbx(filepath=path)
    elif p.endswith(".glb"):
        bpy.ops.import_scene.gltf(filepath=path, import_shading="SMOOTH")
    elif p.endswith(".stl"):
        bpy.ops.import_mesh.stl(filepath=path)
    else:
        bpy.ops.wm.obj_import(filepath=path)
PATHS = sys.argv[sys.argv.index("--") + 1:]
)PY";

struct BlenderRun {
  int exit_code = -1;
  std::string output;               // everything it printed (for failure messages)
  std::vector<std::string> tagged;  // the lines that began with the tag, without it
};

// `blender -b --factory-startup` running kBlenderPrelude + `script` with `paths` after "--",
// within `timeout_s`; its output goes through `log` (a file the caller's folder removes).
inline BlenderRun run_blender(const std::string& script, const std::vector<std::string>& paths,
                              const std::string& log, const std::string& tag, int timeout_s = 180) {
  std::string command = "timeout " + std::to_string(timeout_s) +
                        " blender -b --factory-startup --python-expr " +
                        shell_quote(std::string(kBlenderPrelude) + script) + " --";
  for (const std::string& p : paths) command += " " + shell_quote(p);
  command += " >" + shell_quote(log) + " 2>&1";
  BlenderRun run;
  run.exit_code = std::system(command.c_str());
  auto output = read_file(log);
  if (output.ok()) run.output = std::move(*output);
  std::istringstream in(run.output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(tag, 0) == 0) run.tagged.push_back(line.substr(tag.size()));
  }
  return run;
}

}  // namespace tessera::testing
