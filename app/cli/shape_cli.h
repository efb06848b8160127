// Pieces shared by `tessera generate`, `decode`, `batch`, `convert` and `image`: the compute device
// (--device, --verbose), output path checks, the mesh export options (--preset, --up-axis,
// --forward, --unit, --size, --height, --pivot, --scale, --max-faces, --lods, --closed), and the
// shape-tokens file format.
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
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include <cmath>
#include <nlohmann/json.hpp>
#include "engine/mesh/asset.h"
#include "engine/mesh/export.h"
#include "engine/mesh/extraction.h"
#include "engine/mesh/texture.h"
#include "engine/runtime/export_asset.h"
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

// The shape model to open: --model (empty: the embedded default), the weights' precision (--bf16
// or --weights; automatic by default: runtime::ShapeWeights), --device.
inline runtime::ShapeModelOptions shape_model_options(const std::string& model,
                                                      runtime::ShapeWeights weights,
                                                      const DeviceCli& device) {
  runtime::ShapeModelOptions options;
  options.path = model;
  options.weights = weights;
  options.device = device.choice();
  return options;
}

// A file we will write at the end of a long run: check what can be checked up front (its
// directory exists) so that a typo does not cost a whole generation. `what` names the option.
// The extraction line of --timings (generate, decode): milliseconds, resolution and where the
// occupancy queries went.
inline void print_extraction_timing(double ms, const runtime::FinalMeshEvent& final_mesh) {
  std::fprintf(
      stderr, "  extraction     %9.1f  (resolution %d, %lld occupancy queries, %d levels: %s)\n",
      ms, final_mesh.resolution, static_cast<long long>(final_mesh.extraction.queries),
      final_mesh.extraction.levels, mesh::describe_level_queries(final_mesh.extraction).c_str());
}

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

// The export options the mesh-writing commands share, as given on the command line. Empty
// strings and negative numbers are "not given": the preset's value (or the plain default) applies.
struct MeshExportCli {
  std::string preset;   // --preset NAME (engine/mesh/asset.h)
  std::string up_axis;  // --up-axis y|z
  std::string forward;  // --forward x|default
  std::string unit;     // --unit m|cm|mm|studs
  double size = 0.0;    // --size H: largest extent in metres
  double height = 0.0;  // --height H: height in metres
  bool size_given = false, height_given = false;
  std::string pivot = "origin";  // --pivot origin|base|center
  float scale = 1.0f;            // --scale S: metres per model unit
  int64_t max_faces = -1;        // --max-faces N: decimation budget; -1: the preset's (else none)
  int lods = 0;                  // --lods N: LOD1..LODn besides LOD0
  int64_t max_texture = -1;      // --max-texture N: the texture's longest side; -1: the preset's
  bool closed = false, open = false;   // --closed / --no-closed: close small holes (or not)
  std::string texture;                 // --texture IMAGE.png: projected from the front (texture.h)
  float texture_margin = 0.0f;         // --texture-margin: ProjectionOptions::margin
  std::string texture_fit = "object";  // --texture-fit object|frame: ProjectionOptions::fit
};

// The preset named by --preset (nullptr without one); kInvalidArgument for an unknown name.
inline Expected<const mesh::AssetPreset*> cli_preset(const MeshExportCli& o) {
  if (o.preset.empty()) return static_cast<const mesh::AssetPreset*>(nullptr);
  const mesh::AssetPreset* p = mesh::find_preset(o.preset);
  if (p == nullptr) {
    return invalid_argument("--preset '" + o.preset + "' is not a preset (one of " +
                            mesh::preset_names() + ")");
  }
  return p;
}

// The decimation budget of the final mesh: --max-faces, else the preset's limit, else 0 (none).
inline int64_t effective_max_faces(const MeshExportCli& o) {
  if (o.max_faces >= 0) return o.max_faces;
  const mesh::AssetPreset* p = o.preset.empty() ? nullptr : mesh::find_preset(o.preset);
  return p != nullptr ? p->max_triangles : 0;
}

// Budget, LODs and closing from the options and the preset; kInvalidArgument naming the option.
inline Expected<mesh::AssetOptions> to_asset_options(const MeshExportCli& o) {
  TESSERA_ASSIGN_OR_RETURN(const mesh::AssetPreset* preset, cli_preset(o));
  if (o.closed && o.open) return invalid_argument("--closed and --no-closed are exclusive");
  mesh::AssetOptions a;
  a.max_triangles = effective_max_faces(o);
  a.lods = o.lods;
  a.max_texture_size = o.max_texture >= 0  ? o.max_texture
                       : preset != nullptr ? preset->max_texture_size
                                           : 0;
  a.closed = o.closed || (preset != nullptr && preset->closed && !o.open);
  if (Status st = mesh::validate_asset_options(a); !st.ok()) {
    if (st.message().rfind("texture limit", 0) == 0)
      return invalid_argument("--max-texture: " + st.message());
    if (a.max_triangles > 0 && a.max_triangles < (a.closed ? mesh::kMinClosedTriangles : 1)) {
      return invalid_argument(
          "--max-faces " + std::to_string(a.max_triangles) + ": " + st.message() +
          (preset != nullptr && preset->closed ? " (--preset " + preset->name + " needs it closed)"
                                               : std::string()));
    }
    return st;
  }
  return a;
}

inline mesh::ProjectionOptions projection_options(const MeshExportCli& o) {
  mesh::ProjectionOptions projection;
  projection.margin = o.texture_margin;
  projection.fit = o.texture_fit == "frame" ? mesh::ImageFit::kFrame : mesh::ImageFit::kObject;
  return projection;
}

// `texture_options`: also --texture, --texture-fit and --texture-margin (not for a command that
// makes its own texture).
inline void add_mesh_export_options(CLI::App* cmd, MeshExportCli* o, bool texture_options = true) {
  cmd->add_option("--preset", o->preset,
                  "Target platform: roblox (Y-up, studs, <= 20000 triangles, closed; .fbx/.obj), "
                  "unity (Y-up, m; .fbx/.glb), unreal (Z-up, front +X, cm; .fbx), blender (Z-up, "
                  "m; .fbx/.glb), godot (.glb), print (Z-up, mm, closed; .stl/.3mf). Any option "
                  "below overrides the preset's value");
  cmd->add_option("--up-axis", o->up_axis,
                  "Up axis of the written file: y (default; Maya, Unity, glTF) or z (Blender, "
                  "3ds Max, Unreal, slicers); the mesh is rotated +Y -> +Z for z")
      ->check(CLI::IsMember({"y", "z", "Y", "Z"}));
  cmd->add_option("--forward", o->forward,
                  "x: the object's front faces +X (Unreal's forward; needs --up-axis z); default: "
                  "-Y under Z-up (Blender's front view), +Z under Y-up")
      ->check(CLI::IsMember({"x", "default"}));
  cmd->add_option("--unit", o->unit,
                  "Unit of the numbers in the file: m (default), cm, mm or studs (Roblox, "
                  "0.28 m); FBX and 3MF declare it, so importers show the same size; GLB is "
                  "always metres");
  cmd->add_option_function<double>(
      "--size",
      [o](const double& v) {
        o->size = v;
        o->size_given = true;
      },
      "Make the largest extent H metres, whatever the file's unit");
  cmd->add_option_function<double>(
      "--height",
      [o](const double& v) {
        o->height = v;
        o->height_given = true;
      },
      "Make the height H metres (instead of --size)");
  cmd->add_option("--pivot", o->pivot,
                  "Where the model's origin goes: origin (default: as generated), base (the "
                  "centre of the bottom at the origin) or center")
      ->check(CLI::IsMember({"origin", "base", "center", "centre"}));
  cmd->add_option("--scale", o->scale,
                  "Metres per model unit (default 1; the model spans about 2 units); --size or "
                  "--height set it from the mesh instead");
  cmd->add_option("--max-faces", o->max_faces,
                  "Decimate the final mesh to at most N triangles (quadric error; 0: keep all; "
                  "default: the preset's limit, else all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--lods", o->lods,
                  "Also write LOD1..LODN at halving triangle budgets, as meshes named "
                  "TesseraMesh_LOD0.. in one .glb or .fbx (0..8, default 0)");
  cmd->add_option("--max-texture", o->max_texture,
                  "Shrink the texture to at most N pixels on its longest side (0: keep it; "
                  "default: the preset's limit: roblox 1024, unity 2048, unreal and godot 4096)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--closed", o->closed,
                "Close small holes so the mesh is closed and manifold (the roblox and print "
                "presets do this); says so when it could not");
  cmd->add_flag("--no-closed", o->open, "Leave holes open, even under a preset that closes them");
  if (!texture_options) return;
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

// --texture, read and checked before the long run so that a bad image fails early; null when the
// option is absent.
inline Expected<std::shared_ptr<const mesh::TextureImage>> load_texture_option(
    const MeshExportCli& o) {
  const mesh::ProjectionOptions projection = projection_options(o);
  if (Status st = mesh::validate_projection_options(projection); !st.ok()) {
    return invalid_argument("--texture-margin: " + st.message());
  }
  if (o.texture.empty()) return std::shared_ptr<const mesh::TextureImage>();
  Expected<mesh::TextureImage> image = mesh::read_texture_png(o.texture);
  if (!image.ok()) return Status(image.status()).with_context("--texture");
  return std::shared_ptr<const mesh::TextureImage>(
      std::make_shared<mesh::TextureImage>(std::move(*image)));
}

// The ExportOptions for writing `output` (its extension decides GLB's fixed frame): the
// preset's axes and unit, then the options given. kInvalidArgument naming the option.
inline Expected<mesh::ExportOptions> to_export_options(const MeshExportCli& o,
                                                       const std::string& output) {
  TESSERA_ASSIGN_OR_RETURN(const mesh::AssetPreset* preset, cli_preset(o));
  const std::string ext = [&] {
    std::string e = std::filesystem::path(output).extension().string();
    std::transform(e.begin(), e.end(), e.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return e;
  }();
  mesh::ExportOptions options =
      preset != nullptr ? mesh::preset_export_options(*preset, ext) : mesh::ExportOptions();
  if (!o.up_axis.empty()) {
    options.up_axis = (o.up_axis == "z" || o.up_axis == "Z") ? mesh::UpAxis::kZ : mesh::UpAxis::kY;
    if (options.up_axis == mesh::UpAxis::kY && o.forward.empty()) options.front_x = false;
  }
  if (!o.forward.empty()) options.front_x = o.forward == "x";
  if (options.front_x && options.up_axis != mesh::UpAxis::kZ) {
    return invalid_argument("--forward x needs a Z-up file (--up-axis z)");
  }
  if (!o.unit.empty()) {
    const auto unit = mesh::parse_unit(o.unit);
    if (!unit) return invalid_argument("--unit '" + o.unit + "' is not m, cm, mm or studs");
    options.unit = *unit;
  }
  if (ext == ".glb" && options.unit != mesh::LengthUnit::kMetre) {
    return invalid_argument(std::string("--unit ") + mesh::unit_name(options.unit) +
                            ": a .glb file is in metres by definition (glTF)");
  }
  if (ext == ".3mf" && options.unit == mesh::LengthUnit::kStud) {
    return invalid_argument("--unit studs: 3MF files are in metric or imperial units");
  }
  auto shown = [](double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", v);
    return std::string(text);
  };
  if (o.size_given && !(std::isfinite(o.size) && o.size > 0.0)) {
    return invalid_argument("--size " + shown(o.size) + ": must be a length > 0 (metres)");
  }
  if (o.height_given && !(std::isfinite(o.height) && o.height > 0.0)) {
    return invalid_argument("--height " + shown(o.height) + ": must be a length > 0 (metres)");
  }
  if (o.size_given && o.height_given) {
    return invalid_argument(
        "--size and --height are exclusive (the largest extent, or the height)");
  }
  if (o.size_given) options.size_m = o.size;
  if (o.height_given) options.height_m = o.height;
  options.pivot = mesh::parse_pivot(o.pivot).value_or(mesh::Pivot::kOrigin);
  options.scale = o.scale;
  if (Status st = mesh::validate_export_options(options); !st.ok()) {
    return invalid_argument("--scale " + std::to_string(o.scale) + ": must be finite and > 0");
  }
  return options;
}

// Warnings about a preset's expectations the given options break (printed, not refused: any
// field may be overridden). Empty without a preset.
inline std::vector<std::string> preset_warnings(const MeshExportCli& o, const std::string& output) {
  std::vector<std::string> out;
  const mesh::AssetPreset* p = o.preset.empty() ? nullptr : mesh::find_preset(o.preset);
  if (p == nullptr) return out;
  std::string ext = std::filesystem::path(output).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (std::find(p->formats.begin(), p->formats.end(), ext) == p->formats.end()) {
    std::string formats;
    for (const std::string& f : p->formats) formats += (formats.empty() ? "" : " or ") + f;
    out.push_back("--preset " + p->name + " expects " + formats + "; writing " + ext + " as asked");
  }
  if (p->max_triangles > 0 && o.max_faces > p->max_triangles) {
    out.push_back("--max-faces " + std::to_string(o.max_faces) + " is above " + p->name +
                  "'s limit of " + std::to_string(p->max_triangles) + " triangles");
  }
  if (p->max_triangles > 0 && o.max_faces == 0) {
    out.push_back("--max-faces 0 keeps every triangle; " + p->name + " accepts at most " +
                  std::to_string(p->max_triangles));
  }
  return out;
}

// Everything checked before a long run: to_export_options() and to_asset_options(); the preset's
// warnings printed on stderr. The ExportOptions for `output`, or the first error.
inline Expected<mesh::ExportOptions> checked_export_options(const MeshExportCli& o,
                                                            const std::string& output) {
  TESSERA_ASSIGN_OR_RETURN(mesh::ExportOptions options, to_export_options(o, output));
  TESSERA_RETURN_IF_ERROR(to_asset_options(o).status());
  for (const std::string& w : preset_warnings(o, output)) {
    std::fprintf(stderr, "warning: %s\n", w.c_str());
  }
  return options;
}

// The runtime's export request for the command line's options: `given` (to_export_options()),
// the budget, LODs and closing (to_asset_options()), the preset's name, the --texture image and
// its projection, and the shape's `settings` to record (null: none). kInvalidArgument naming the
// option.
inline Expected<runtime::AssetExport> cli_asset_export(
    const mesh::ExportOptions& given, const MeshExportCli& o,
    std::shared_ptr<const mesh::TextureImage> texture, nlohmann::json settings = nullptr) {
  runtime::AssetExport request;
  TESSERA_ASSIGN_OR_RETURN(request.asset, to_asset_options(o));
  request.options = given;
  request.preset = o.preset;
  request.texture = std::move(texture);
  request.projection = projection_options(o);
  request.settings = std::move(settings);
  return request;
}

// Writes `m` to `path` through runtime::export_asset (the one export every front end shares):
// budget, closing, LODs, the texture projected onto each level, the placement, and `settings`
// with the export record as the file's metadata (null: none). A mesh that stays open although
// closing was asked, and the LODs' counts, are reported on stderr.
inline Status write_cli_mesh(const mesh::Mesh& m, const std::string& path,
                             const mesh::ExportOptions& given, const MeshExportCli& o,
                             const std::shared_ptr<const mesh::TextureImage>& texture,
                             nlohmann::json settings = nullptr,
                             mesh::AssetReport* report_out = nullptr) {
  TESSERA_ASSIGN_OR_RETURN(const runtime::AssetExport request,
                           cli_asset_export(given, o, texture, std::move(settings)));
  TESSERA_ASSIGN_OR_RETURN(const mesh::AssetReport report, runtime::export_asset(m, path, request));
  if (request.asset.closed && !report.closed) {
    std::fprintf(stderr,
                 "warning: %s is not closed: %lld boundary and %lld non-manifold edges left "
                 "(holes larger than %lld edges are not closed)\n",
                 path.c_str(), static_cast<long long>(report.holes.boundary_edges_left),
                 static_cast<long long>(report.holes.non_manifold_edges),
                 static_cast<long long>(request.asset.max_hole_edges));
  }
  if (request.asset.lods > 0) {
    std::string counts;
    for (size_t i = 0; i < report.lod_triangles.size(); ++i) {
      counts += (i ? ", " : "") + std::string("LOD") + std::to_string(i) + " " +
                std::to_string(report.lod_triangles[i]);
    }
    std::fprintf(stderr, "%s: triangles %s\n", path.c_str(), counts.c_str());
  }
  if (report.texture_shrunk()) {
    std::fprintf(stderr, "%s: texture shrunk from %lldx%lld to %lldx%lld (the limit is %lld)\n",
                 path.c_str(), static_cast<long long>(report.texture_width_before),
                 static_cast<long long>(report.texture_height_before),
                 static_cast<long long>(report.texture_width),
                 static_cast<long long>(report.texture_height),
                 static_cast<long long>(request.asset.max_texture_size));
  }
  if (report_out != nullptr) *report_out = report;
  return Status();
}

}  // namespace tessera::cli
