#include "engine/runtime/export_asset.h"

#include <string>
#include <utility>
#include <vector>

#include "engine/runtime/user_text.h"

namespace tessera::runtime {

namespace {

// Every string in `j` through the text rule (keys included), so that dumping it cannot throw and
// no file carries invalid text, whatever a caller put in (a file's metadata, a model's name).
nlohmann::json valid_text(const nlohmann::json& j) {
  if (j.is_string()) return display_path(j.get_ref<const std::string&>());
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : j) out.push_back(valid_text(e));
    return out;
  }
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, value] : j.items()) out[display_path(key)] = valid_text(value);
    return out;
  }
  return j;
}

}  // namespace

nlohmann::json export_record(const AssetExport& request, const mesh::AssetReport* report) {
  const mesh::ExportOptions& o = request.options;
  nlohmann::json e = {{"up_axis", mesh::up_axis_name(o.up_axis)},
                      {"scale", std::stod(std::to_string(o.scale))},  // as the user wrote it
                      {"max_faces", request.asset.max_triangles},
                      {"closed_asked", request.asset.closed}};
  if (!request.preset.empty()) e["preset"] = display_path(request.preset);
  if (o.front_x) e["forward"] = "x";
  if (o.unit != mesh::LengthUnit::kMetre) e["unit"] = mesh::unit_name(o.unit);
  if (o.size_m > 0) e["size"] = o.size_m;
  if (o.height_m > 0) e["height"] = o.height_m;
  if (o.pivot != mesh::Pivot::kOrigin) e["pivot"] = mesh::pivot_name(o.pivot);
  if (request.asset.lods > 0) e["lods"] = request.asset.lods;
  // Under a preset even 0 (none) is recorded: `--from` must not bring the preset's limit back.
  if (request.asset.max_texture_size > 0 || !request.preset.empty()) {
    e["max_texture"] = request.asset.max_texture_size;
  }
  if (report != nullptr) {
    if (request.asset.lods > 0) e["lod_triangles"] = report->lod_triangles;
    if (request.asset.closed) e["closed"] = report->closed;
    if (report->texture_shrunk()) {
      e["texture_size"] = {report->texture_width, report->texture_height};
      e["texture_size_before"] = {report->texture_width_before, report->texture_height_before};
    }
  }
  return e;
}

Expected<mesh::AssetReport> export_asset(const mesh::Mesh& mesh, const std::string& path,
                                         const AssetExport& request) {
  const std::string shown = display_path(path);
  if (!mesh::is_supported_mesh_extension(path)) {
    return invalid_argument(shown + ": unknown extension (write " + mesh::kSupportedMeshExtensions +
                            ")");
  }
  if (!request.settings.is_null() && !request.settings.is_object()) {
    return invalid_argument(shown + ": the settings to record are not a JSON object");
  }
  TESSERA_RETURN_IF_ERROR(mesh::validate_export_options(request.options).with_context(shown));
  mesh::AssetReport report;
  Expected<std::vector<mesh::Mesh>> levels = mesh::prepare_asset(mesh, request.asset, &report);
  if (!levels.ok()) return levels.status().with_context(shown);
  if (request.texture != nullptr) {
    for (mesh::Mesh& level : *levels) {
      TESSERA_RETURN_IF_ERROR(
          mesh::project_texture_front(*request.texture, request.projection, &level)
              .with_context(shown + ": texture"));
    }
    mesh::limit_texture_size(&levels->front(), request.asset.max_texture_size, &report);
  }
  mesh::ExportOptions options = request.options;
  options.metadata_json.clear();
  if (request.settings.is_object()) {
    nlohmann::json j = valid_text(request.settings);
    j["export"] = export_record(request, &report);
    options.metadata_json = j.dump();
  }
  TESSERA_RETURN_IF_ERROR(mesh::write_mesh_lods(*levels, path, options));
  return report;
}

}  // namespace tessera::runtime
