// Pieces shared by `tessera generate`, `decode` and `image`: the compute device (--device, --verbose), output path checks, the mesh export options (--up-axis,
// --scale, --max-faces), and the shape-tokens file format.
//
// Tokens file: the shape tokens of one object as decimal ids separated by spaces on one line
// (ending with a newline); readers accept any whitespace. Ids are codes of the model's codebook;
// the file does not name the model, so decode with the model that generated it.
#pragma once

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "engine/core/mapped_file.h"
#include "engine/core/status.h"
#include "engine/mesh/export.h"
#include "engine/mesh/texture.h"
#include "engine/runtime/session.h"

namespace tessera::cli {

// --device and --verbose, as given on the command line.
struct DeviceCli {
  // cpu stays the default until the CUDA backend has passed scripts/gpu-check.sh on a GPU; auto
  // is then the better default (it is silent and no slower where there is no GPU).
  std::string device = "cpu";
  bool verbose = false;

  runtime::DeviceChoice choice() const {
    // CLI11 already restricted the value (add_device_options); cpu for anything else.
    const auto parsed = runtime::parse_device(device);
    return parsed.ok() ? *parsed : runtime::DeviceChoice::kCpu;
  }
};

inline void add_device_options(CLI::App* cmd, DeviceCli* o) {
  cmd->add_option("--device", o->device,
                  "Compute device: cpu (default), cuda (an NVIDIA GPU, compute capability 8.0+; "
                  "fails when none is usable), auto (the GPU when usable, else the CPU)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_flag("--verbose,-v", o->verbose,
                "Print the backend used (and why auto chose the CPU) on stderr");
}

// With --verbose: "device: cuda (NVIDIA H200, ...)" and, when auto fell back, the reason.
inline void print_device(const DeviceCli& o, const std::string& backend, const std::string& note) {
  if (!o.verbose) return;
  std::fprintf(stderr, "device: %s\n", backend.c_str());
  if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
}

// The shape model to open: --model (empty: the embedded default), --bf16, --device.
inline runtime::ShapeModelOptions shape_model_options(const std::string& model, bool bf16,
                                                      const DeviceCli& device) {
  runtime::ShapeModelOptions options;
  options.path = model;
  options.bf16 = bf16;
  options.device = device.choice();
  return options;
}

// A file we will write at the end of a long run: check what can be checked up front (its
// directory exists) so that a typo does not cost a whole generation. `what` names the option.
inline Status check_output_file(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (!fs::is_directory(parent, ec)) {
    return not_found(what + " '" + path + "': directory '" + parent.string() + "' does not exist");
  }
  if (fs::is_directory(path, ec)) return invalid_argument(what + " '" + path + "' is a directory");
  return Status();
}

// Mesh output: .obj, .glb or .fbx (case-insensitive), in an existing directory.
inline Status check_mesh_output(const std::string& path) {
  if (!mesh::is_supported_mesh_extension(path)) {
    return invalid_argument("output '" + path + "': unknown extension '" +
                            std::filesystem::path(path).extension().string() + "' (write " +
                            mesh::kSupportedMeshExtensions + ")");
  }
  return check_output_file(path, "output");
}

// The export options both commands share, as given on the command line.
struct MeshExportCli {
  std::string up_axis = "y";  // --up-axis y|z
  float scale = 1.0f;         // --scale S: file units per model unit
  int64_t max_faces = 0;      // --max-faces N: decimation budget (cleanup.h); 0: no decimation
  std::string texture;        // --texture IMAGE.png: projected from the front (texture.h)
  float texture_margin = 0.0f;  // --texture-margin: ProjectionOptions::margin
  std::string texture_fit = "object";  // --texture-fit object|frame: ProjectionOptions::fit
};

inline mesh::ProjectionOptions projection_options(const MeshExportCli& o) {
  mesh::ProjectionOptions projection;
  projection.margin = o.texture_margin;
  projection.fit = o.texture_fit == "frame" ? mesh::ImageFit::kFrame : mesh::ImageFit::kObject;
  return projection;
}

inline void add_mesh_export_options(CLI::App* cmd, MeshExportCli* o) {
  cmd->add_option("--up-axis", o->up_axis,
                  "Up axis of the written file: y (default; Maya, Unity, glTF) or z (Blender, "
                  "3ds Max); the mesh is rotated +Y -> +Z for z")
      ->check(CLI::IsMember({"y", "z", "Y", "Z"}));
  cmd->add_option("--scale", o->scale,
                  "File units per model unit (default 1; the model spans about 2 units); FBX and "
                  "GLB files are in metres");
  cmd->add_option("--max-faces", o->max_faces,
                  "Decimate the final mesh to at most N triangles (quadric error; 0: keep all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--texture", o->texture,
                  "PNG image to project onto the mesh from the front view (the back gets a "
                  "softened blend); the texture is embedded in .glb, written beside .obj/.fbx as "
                  "<name>_texture.png");
  cmd->add_option("--texture-fit", o->texture_fit,
                  "object (default): the object the image shows (told from the background at its "
                  "border) is stretched onto the mesh, e.g. a `tessera image` render; frame: the "
                  "whole image less --texture-margin is fitted to the mesh (also what object does "
                  "for an image without a distinct background)")
      ->check(CLI::IsMember({"object", "frame"}));
  cmd->add_option("--texture-margin", o->texture_margin,
                  "Frame fit: fraction of the image on each side that lies outside the object "
                  "(0..0.45, default 0)");
}

// --texture, read and checked before the long run so that a bad image fails early; nullopt when
// the option is absent.
inline Expected<std::optional<mesh::TextureImage>> load_texture_option(const MeshExportCli& o) {
  const mesh::ProjectionOptions projection = projection_options(o);
  if (Status st = mesh::validate_projection_options(projection); !st.ok()) {
    return invalid_argument("--texture-margin: " + st.message());
  }
  if (o.texture.empty()) return std::optional<mesh::TextureImage>();
  Expected<mesh::TextureImage> image = mesh::read_texture_png(o.texture);
  if (!image.ok()) return Status(image.status()).with_context("--texture");
  return std::optional<mesh::TextureImage>(std::move(*image));
}

// Writes `m` to `path`; with a texture, a copy of `m` gets it projected from the front first.
// The projection uses the engine's Y-up frame: the export's up axis rotates the textured result.
inline Status write_cli_mesh(const mesh::Mesh& m, const std::string& path,
                             const mesh::ExportOptions& options, const MeshExportCli& o,
                             const std::optional<mesh::TextureImage>& texture) {
  if (!texture) return mesh::write_mesh(m, path, options);
  mesh::Mesh textured = m;
  TESSERA_RETURN_IF_ERROR(mesh::project_texture_front(*texture, projection_options(o), &textured)
                              .with_context("--texture " + o.texture));
  return mesh::write_mesh(textured, path, options);
}

// kInvalidArgument naming the option for a bad --scale (the up axis is checked by CLI11).
inline Expected<mesh::ExportOptions> to_export_options(const MeshExportCli& o) {
  mesh::ExportOptions options;
  options.up_axis = (o.up_axis == "z" || o.up_axis == "Z") ? mesh::UpAxis::kZ : mesh::UpAxis::kY;
  options.scale = o.scale;
  if (Status st = mesh::validate_export_options(options); !st.ok()) {
    return invalid_argument("--scale " + std::to_string(o.scale) + ": must be finite and > 0");
  }
  return options;
}

inline Status write_tokens_file(const std::string& path, const std::vector<int32_t>& ids) {
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  return write_file_atomic(path, line.data(), line.size());
}

// Parses a tokens file. Errors name the file and the offending entry (1-based); range checks
// against the model are the runtime's (Session::check_tokens).
inline Expected<std::vector<int32_t>> read_tokens_file(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, read_file(path));
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
    if (pos >= text.size()) break;
    size_t end = pos;
    while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end]))) ++end;
    const std::string word = text.substr(pos, end - pos);
    char* stop = nullptr;
    errno = 0;
    const long long value = std::strtoll(word.c_str(), &stop, 10);
    if (stop != word.c_str() + word.size() || errno == ERANGE || value < INT32_MIN ||
        value > INT32_MAX) {
      const std::string shown = word.size() > 32 ? word.substr(0, 32) + "..." : word;
      return corrupt_data("tokens file '" + path + "': entry " + std::to_string(ids.size() + 1) +
                          " '" + shown + "' is not a token id (decimal integer)");
    }
    ids.push_back(static_cast<int32_t>(value));
    pos = end;
  }
  if (ids.empty()) return corrupt_data("tokens file '" + path + "' holds no token ids");
  return ids;
}

}  // namespace tessera::cli
