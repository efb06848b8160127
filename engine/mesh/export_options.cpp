#include "engine/mesh/export_options.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <string>

#include "core/mapped_file.h"
#include "core/png.h"
#include "engine/mesh/texture.h"

namespace tessera::mesh {

std::string texture_path_for(const std::string& mesh_path) {
  std::filesystem::path p(mesh_path);
  p.replace_filename(p.stem().string() + "_texture.png");
  return p.string();
}

Expected<std::string> texture_png_file(const Mesh& mesh, const std::string& metadata_json) {
  TESSERA_ASSIGN_OR_RETURN(std::string png, encode_texture_png(mesh.texture));
  return add_png_text(std::move(png), tessera_png_text(metadata_json));
}

Status write_texture_beside(const Mesh& mesh, const std::string& mesh_path,
                            const std::string& metadata_json) {
  if (mesh.texture.empty()) return Status();
  Expected<std::string> png = texture_png_file(mesh, metadata_json);
  if (!png.ok()) return png.status().with_context(mesh_path);
  return write_file_atomic(texture_path_for(mesh_path), png->data(), png->size())
      .with_context(mesh_path);
}

std::string lod_object_name(size_t level, size_t levels) {
  if (levels <= 1) return kMeshObjectName;
  return std::string(kMeshObjectName) + "_LOD" + std::to_string(level);
}

double metres_per_unit(LengthUnit unit) {
  switch (unit) {
    case LengthUnit::kCentimetre:
      return 0.01;
    case LengthUnit::kMillimetre:
      return 0.001;
    case LengthUnit::kStud:
      return kMetresPerStud;
    case LengthUnit::kMetre:
      break;
  }
  return 1.0;
}

const char* unit_name(LengthUnit unit) {
  switch (unit) {
    case LengthUnit::kCentimetre:
      return "cm";
    case LengthUnit::kMillimetre:
      return "mm";
    case LengthUnit::kStud:
      return "studs";
    case LengthUnit::kMetre:
      break;
  }
  return "m";
}

std::optional<LengthUnit> parse_unit(std::string_view text) {
  std::string t(text);
  std::transform(t.begin(), t.end(), t.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (t == "m" || t == "metre" || t == "metres" || t == "meter" || t == "meters") {
    return LengthUnit::kMetre;
  }
  if (t == "cm" || t == "centimetre" || t == "centimetres" || t == "centimeter" ||
      t == "centimeters") {
    return LengthUnit::kCentimetre;
  }
  if (t == "mm" || t == "millimetre" || t == "millimetres" || t == "millimeter" ||
      t == "millimeters") {
    return LengthUnit::kMillimetre;
  }
  if (t == "stud" || t == "studs") return LengthUnit::kStud;
  return std::nullopt;
}

const char* pivot_name(Pivot pivot) {
  switch (pivot) {
    case Pivot::kBase:
      return "base";
    case Pivot::kCenter:
      return "center";
    case Pivot::kOrigin:
      break;
  }
  return "origin";
}

std::optional<Pivot> parse_pivot(std::string_view text) {
  if (text == "origin") return Pivot::kOrigin;
  if (text == "base") return Pivot::kBase;
  if (text == "center" || text == "centre") return Pivot::kCenter;
  return std::nullopt;
}

Status validate_export_options(const ExportOptions& options) {
  if (!std::isfinite(options.scale) || options.scale <= 0.0f) {
    return invalid_argument("export scale " + std::to_string(options.scale) +
                            " must be finite and > 0");
  }
  if (options.up_axis != UpAxis::kY && options.up_axis != UpAxis::kZ) {
    return invalid_argument("export up axis must be Y or Z");
  }
  if (!std::isfinite(options.size_m) || options.size_m < 0.0) {
    return invalid_argument("export size " + std::to_string(options.size_m) +
                            " m must be finite and > 0");
  }
  if (!std::isfinite(options.height_m) || options.height_m < 0.0) {
    return invalid_argument("export height " + std::to_string(options.height_m) +
                            " m must be finite and > 0");
  }
  if (options.size_m > 0.0 && options.height_m > 0.0) {
    return invalid_argument("export size and height are exclusive (give one)");
  }
  if (options.front_x && options.up_axis != UpAxis::kZ) {
    return invalid_argument("export front along +X needs the Z-up axis");
  }
  for (double v : options.offset) {
    if (!std::isfinite(v)) return invalid_argument("export offset must be finite");
  }
  return Status();
}

Expected<ExportOptions> resolve_placement(const Mesh& reference, const ExportOptions& options) {
  TESSERA_RETURN_IF_ERROR(validate_export_options(options));
  ExportOptions out = options;
  if (options.pivot == Pivot::kOrigin && options.size_m == 0.0 && options.height_m == 0.0) {
    return out;
  }
  const Bounds b = compute_bounds(reference);
  if (options.size_m > 0.0 || options.height_m > 0.0) {
    const double extent = options.size_m > 0.0
                              ? std::max({double(b.max[0]) - b.min[0], double(b.max[1]) - b.min[1],
                                          double(b.max[2]) - b.min[2]})
                              : double(b.max[1]) - b.min[1];
    if (!(extent > 0.0)) {
      return invalid_argument(
          std::string("the mesh has no ") + (options.size_m > 0.0 ? "extent" : "height") +
          " to scale to " +
          std::to_string(options.size_m > 0.0 ? options.size_m : options.height_m) + " m");
    }
    const double metres = options.size_m > 0.0 ? options.size_m : options.height_m;
    const double scale = metres / extent;
    if (!(scale > 0.0) || !std::isfinite(static_cast<float>(scale))) {
      return invalid_argument("export size " + std::to_string(metres) + " m is out of range");
    }
    out.scale = static_cast<float>(scale);
    out.size_m = out.height_m = 0.0;
  }
  if (options.pivot != Pivot::kOrigin) {
    const double cx = 0.5 * (double(b.min[0]) + b.max[0]);
    const double cy = 0.5 * (double(b.min[1]) + b.max[1]);
    const double cz = 0.5 * (double(b.min[2]) + b.max[2]);
    out.offset = {-cx, options.pivot == Pivot::kBase ? -double(b.min[1]) : -cy, -cz};
    out.pivot = Pivot::kOrigin;
  }
  return out;
}

const char* up_axis_name(UpAxis axis) {
  return axis == UpAxis::kZ ? "z" : "y";
}

Mesh transform_for_export(const Mesh& mesh, const ExportOptions& given) {
  Expected<ExportOptions> resolved = resolve_placement(mesh, given);
  const ExportOptions& options = resolved.ok() ? *resolved : given;
  Mesh out = mesh;
  const bool z_up = options.up_axis == UpAxis::kZ;
  const bool front_x = z_up && options.front_x;
  const double k = double(options.scale) / metres_per_unit(options.unit);
  const auto& o = options.offset;
  // (x, y, z) in the engine's frame -> the file's: Y-up as is; Z-up (x, -z, y); Z-up with the
  // front along +X (z, x, y).
  auto rotate = [&](double x, double y, double z, float* dst) {
    if (front_x) {
      dst[0] = static_cast<float>(z), dst[1] = static_cast<float>(x),
      dst[2] = static_cast<float>(y);
    } else if (z_up) {
      dst[0] = static_cast<float>(x), dst[1] = static_cast<float>(-z),
      dst[2] = static_cast<float>(y);
    } else {
      dst[0] = static_cast<float>(x), dst[1] = static_cast<float>(y),
      dst[2] = static_cast<float>(z);
    }
  };
  for (size_t i = 0; i + 2 < out.positions.size(); i += 3) {
    rotate((mesh.positions[i] + o[0]) * k, (mesh.positions[i + 1] + o[1]) * k,
           (mesh.positions[i + 2] + o[2]) * k, &out.positions[i]);
  }
  if (z_up) {
    for (size_t i = 0; i + 2 < out.normals.size(); i += 3) {
      rotate(mesh.normals[i], mesh.normals[i + 1], mesh.normals[i + 2], &out.normals[i]);
    }
  }
  return out;
}

}  // namespace tessera::mesh
