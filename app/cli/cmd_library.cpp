// tessera library: the results kept in the library (engine/runtime/library.h), the same catalogue
// the studio uses.
//   tessera library path                      the library's folder (TESSERA_LIBRARY to change it)
//   tessera library list [--query Q] [--model M] [--trash] [--limit N] [--json]
//   tessera library show ID [--json]          one result: prompt, settings, files
//   tessera library export ID -o FILE         the result's mesh as .glb/.obj/.fbx/.stl/.3mf, with
//                                             its settings in the file
//   tessera library rm ID                     to the trash;  restore ID  back;  empty-trash
// `tessera generate --library` adds what it makes. Exit status 0, 1 on an error, 2 for bad usage.
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <ctime>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "engine/mesh/import.h"
#include "engine/runtime/export_asset.h"
#include "engine/runtime/library.h"

namespace tessera::cli {
namespace {

struct LibraryCliOptions {
  std::string query, model, output;
  bool trash = false, json = false;
  int64_t limit = 0;
  int64_t id = 0;
};

nlohmann::json entry_json(const runtime::LibraryEntry& e) {
  nlohmann::json j = {{"id", e.id},
                      {"created_ms", e.created_ms},
                      {"prompt", e.prompt},
                      {"name", e.name},
                      {"model", e.model},
                      {"group", e.group},
                      {"candidate", e.candidate},
                      {"seed", e.seed},
                      {"vertices", e.vertices},
                      {"triangles", e.triangles},
                      {"favourite", e.favourite},
                      {"mesh", e.mesh_file()},
                      {"tokens", e.tokens_file()},
                      {"settings", e.settings}};
  if (e.trashed_ms) j["trashed_ms"] = *e.trashed_ms;
  // What came with it, when it is there: timings, the concept image, the textured mesh.
  std::error_code ec;
  for (const auto& [key, file] : {std::pair<const char*, std::string>{"timings", e.timings_file()},
                                  {"concept_image", e.concept_file()},
                                  {"textured_mesh", e.textured_file()}}) {
    if (std::filesystem::is_regular_file(file, ec)) j[key] = file;
  }
  return j;
}

std::string when(int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d %H:%M", &tm);
  return buffer;
}

Expected<std::unique_ptr<runtime::Library>> open_library() {
  return runtime::Library::open(runtime::default_library_dir());
}

int fail(const Status& st) {
  std::fprintf(stderr, "tessera library: %s\n", st.message().c_str());
  return 1;
}

int run_list(const LibraryCliOptions& o) {
  auto library = open_library();
  if (!library.ok()) return fail(library.status());
  auto entries = (*library)->list({o.query, o.model, o.trash, o.limit});
  if (!entries.ok()) return fail(entries.status());
  if (o.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& e : *entries) all.push_back(entry_json(e));
    std::printf("%s\n", all.dump(2).c_str());
    return 0;
  }
  for (const auto& e : *entries) {
    std::printf("%6lld  %s  %-40s seed %-6llu %7lld tris  %s%s\n", static_cast<long long>(e.id),
                when(e.created_ms).c_str(), (e.name.empty() ? e.prompt : e.name).c_str(),
                static_cast<unsigned long long>(e.seed), static_cast<long long>(e.triangles),
                e.model.c_str(), e.favourite ? "  *" : "");
  }
  if (entries->empty()) std::printf("(nothing%s)\n", o.trash ? " in the trash" : "");
  return 0;
}

int run_show(const LibraryCliOptions& o) {
  auto library = open_library();
  if (!library.ok()) return fail(library.status());
  auto e = (*library)->get(o.id);
  if (!e.ok()) return fail(e.status());
  if (o.json) {
    std::printf("%s\n", entry_json(*e).dump(2).c_str());
    return 0;
  }
  std::printf("result %lld, %s%s\n", static_cast<long long>(e->id), when(e->created_ms).c_str(),
              e->trashed_ms ? " (in the trash)" : "");
  std::printf("prompt   %s\n", e->prompt.c_str());
  if (!e->name.empty()) std::printf("name     %s\n", e->name.c_str());
  std::printf(
      "model    %s\nseed     %llu (candidate %d of group %s)\nmesh     %s (%lld vertices, "
      "%lld triangles)\ntokens   %s\nsettings %s\n",
      e->model.c_str(), static_cast<unsigned long long>(e->seed), e->candidate + 1,
      e->group.c_str(), e->mesh_file().c_str(), static_cast<long long>(e->vertices),
      static_cast<long long>(e->triangles), e->tokens_file().c_str(), e->settings.dump().c_str());
  const nlohmann::json extras = entry_json(*e);
  for (const char* key : {"timings", "concept_image", "textured_mesh"}) {
    if (extras.contains(key)) {
      std::printf("%-8s %s\n", key, extras[key].get<std::string>().c_str());
    }
  }
  return 0;
}

int run_export(const LibraryCliOptions& o) {
  auto library = open_library();
  if (!library.ok()) return fail(library.status());
  auto e = (*library)->get(o.id);
  if (!e.ok()) return fail(e.status());
  // The kept file is the result as it was written (default placement, its settings inside): a
  // .glb is that file again, byte for byte; other formats are converted from it.
  std::string ext = std::filesystem::path(o.output).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".glb") {
    const std::string tmp = o.output + ".tmp-" + std::to_string(::getpid());
    std::error_code ec;
    std::filesystem::copy_file(e->mesh_file(), tmp,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (!ec) std::filesystem::rename(tmp, o.output, ec);
    if (ec) {
      std::filesystem::remove(tmp, ec);
      return fail(io_error("cannot write " + o.output + ": " + ec.message()));
    }
    std::printf("wrote %s\n", o.output.c_str());
    return 0;
  }
  auto mesh = mesh::import_mesh_file(e->mesh_file());
  if (!mesh.ok()) return fail(mesh.status());
  runtime::AssetExport request;
  request.settings = e->settings;
  auto written = runtime::export_asset(*mesh, o.output, request);
  if (!written.ok()) return fail(written.status());
  std::printf("wrote %s\n", o.output.c_str());
  return 0;
}

int run_change(const LibraryCliOptions& o, const char* what) {
  auto library = open_library();
  if (!library.ok()) return fail(library.status());
  const std::string action = what;
  Status st = action == "rm" ? (*library)->trash(o.id) : (*library)->restore(o.id);
  if (!st.ok()) return fail(st);
  std::printf("%s %lld\n",
              action == "rm" ? "moved to the trash:" : "restored:", static_cast<long long>(o.id));
  return 0;
}

}  // namespace

void register_library(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<LibraryCliOptions>();
  CLI::App* lib = app.add_subcommand(
      "library", "Every result kept: list, show, export, rm, restore, empty-trash, path");
  lib->require_subcommand(1);
  lib->add_subcommand("path", "The library's folder")->callback([exit_code] {
    std::printf("%s\n", runtime::default_library_dir().c_str());
    *exit_code = 0;
  });
  CLI::App* list = lib->add_subcommand("list", "Results, newest first");
  list->add_option("--query,-q", o->query, "Only results whose prompt or name contains this");
  list->add_option("--model", o->model, "Only results of this model");
  list->add_flag("--trash", o->trash, "The trash instead");
  list->add_option("--limit", o->limit, "At most this many")->check(CLI::NonNegativeNumber);
  list->add_flag("--json", o->json, "As JSON");
  list->callback([exit_code, o] { *exit_code = run_list(*o); });
  CLI::App* show = lib->add_subcommand("show", "One result");
  show->add_option("id", o->id, "Its id (library list)")->required();
  show->add_flag("--json", o->json, "As JSON");
  show->callback([exit_code, o] { *exit_code = run_show(*o); });
  CLI::App* exp = lib->add_subcommand("export", "Write a result's mesh, its settings in the file");
  exp->add_option("id", o->id, "Its id")->required();
  exp->add_option("--output,-o", o->output, "The file (.glb .obj .fbx .stl .3mf)")->required();
  exp->callback([exit_code, o] { *exit_code = run_export(*o); });
  CLI::App* rm = lib->add_subcommand("rm", "Move a result to the trash");
  rm->add_option("id", o->id, "Its id")->required();
  rm->callback([exit_code, o] { *exit_code = run_change(*o, "rm"); });
  CLI::App* restore = lib->add_subcommand("restore", "Take a result back from the trash");
  restore->add_option("id", o->id, "Its id")->required();
  restore->callback([exit_code, o] { *exit_code = run_change(*o, "restore"); });
  lib->add_subcommand("empty-trash", "Delete what is in the trash for good")->callback([exit_code] {
    auto library = open_library();
    if (!library.ok()) {
      *exit_code = fail(library.status());
      return;
    }
    auto n = (*library)->empty_trash();
    if (!n.ok()) {
      *exit_code = fail(n.status());
      return;
    }
    std::printf("deleted %lld result(s)\n", static_cast<long long>(*n));
    *exit_code = 0;
  });
}

}  // namespace tessera::cli
