// Painting from the command line, shared by `tessera paint MESH` and `tessera generate --paint`:
// the options (plain in paint, "--paint-" in generate), the job built from them, and the run with
// its progress on stderr (a line per view; Ctrl-C cancels). The painted file's metadata is the
// runtime's (runtime/provenance.h paint_settings_json): the same record from both commands.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/cli/shape_cli.h"
#include "core/status.h"
#include "engine/mesh/mesh.h"
#include "engine/runtime/session.h"

namespace tessera::cli {

struct PaintCli {
  std::string negative_prompt, model;
  int steps = runtime::kDefaultImageSteps;
  float guidance = runtime::kDefaultImageGuidance;
  std::string sampler = "euler";
  int64_t seed = -1;  // the first view's (view k: seed + k); -1: the caller's default
  bool fast = false;
  std::string lora_dir, taesd, control_model;
  std::vector<std::string> loras;
  float control_scale = runtime::kDefaultControlScale;
  mesh::ViewSetOptions views;
  bool no_top = false, no_bottom = false;
  int view_size = 0;
  int texture_size = runtime::kDefaultPaintTextureSize;
  bool new_atlas = false;
  std::string save_views;
  std::string precision = "auto";
};

// Adds the options as "--" + prefix + name ("--steps" or "--paint-steps"); with a prefix the model
// option has no short form and --new-atlas is left out (a generated mesh has no uvs of its own).
void add_paint_options(CLI::App* cmd, PaintCli* o, const std::string& prefix);

// A painted mesh's file must keep its texture: kInvalidArgument naming `option` and `path` for
// .stl or .3mf (before minutes of painting are thrown away).
Status check_paint_output(const std::string& path, const std::string& option);

struct PaintOutcome {
  std::shared_ptr<const mesh::Mesh> mesh;  // uvs + texture
  runtime::PaintedMeshEvent result;
  nlohmann::json record;  // the "paint" record for the file's metadata
};

// A session of its own loads the image model and paints `mesh` with `prompt`; `seed` is used when
// the options give none. Progress and notes on stderr. Errors: the message to print (options
// named with `prefix`), kCancelled when Ctrl-C stopped it (nothing of it written).
class PaintRunner {
 public:
  PaintRunner(PaintCli options, std::string prefix, DeviceCli device);
  ~PaintRunner();
  PaintRunner(const PaintRunner&) = delete;
  PaintRunner& operator=(const PaintRunner&) = delete;

  // Everything that can be checked before any work: the options, the LoRA files, the prompt.
  Status check(const std::string& prompt) const;
  Expected<PaintOutcome> paint(std::shared_ptr<const mesh::Mesh> mesh, const std::string& prompt,
                               uint64_t seed);

 private:
  Expected<runtime::PaintJobOptions> job(const std::string& prompt, uint64_t seed) const;
  Status load(const std::string& prompt);

  PaintCli o_;
  std::string prefix_;
  DeviceCli device_;
  std::unique_ptr<runtime::Session> session_;
};

}  // namespace tessera::cli
