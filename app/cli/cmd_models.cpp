// tessera models: the models Tessera knows by name and what of them is on this machine
// (engine/runtime/models.h).
//   tessera models list [--revision REV]   every known model: kind, size, cached or not, revision,
//                                          size on disk, where; what a partial one lacks
//   tessera models rm NAME                  deletes NAME from the Hugging Face cache
// A name then works wherever a model folder does: tessera generate --model Roblox/cube3d-v0.5.
// Exit status 0, 1 on an error (the reason on stderr), 2 for bad usage.
#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "app/cli/commands.h"
#include "engine/runtime/models.h"

namespace tessera::cli {
namespace {

std::string gigabytes(int64_t bytes) {
  char buffer[32];
  if (bytes >= 1'000'000'000) {
    std::snprintf(buffer, sizeof(buffer), "%.2f GB", static_cast<double>(bytes) / 1e9);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.1f MB", static_cast<double>(bytes) / 1e6);
  }
  return buffer;
}

int run_list(const std::string& revision) {
  std::printf("Hugging Face cache: %s\n", runtime::hf_hub_cache_dir().c_str());
  for (const runtime::KnownModel& m : runtime::known_models()) {
    auto cached = runtime::find_cached_model(m.name, revision);
    if (!cached.ok()) {
      std::fprintf(stderr, "tessera models: %s\n", cached.status().message().c_str());
      return 1;
    }
    std::printf("%-45s %-12s %9s  ", m.name.c_str(), runtime::model_kind_name(m.kind),
                gigabytes(m.bytes()).c_str());
    if (cached->complete()) {
      std::printf("cached: %s -> %.12s, %s on disk, %s\n", cached->revision.c_str(),
                  cached->commit.c_str(), gigabytes(cached->bytes_on_disk).c_str(),
                  cached->snapshot_dir.c_str());
    } else if (!cached->commit.empty()) {
      std::string missing;
      for (const std::string& f : cached->missing) {
        if (!missing.empty()) missing += ", ";
        missing += f;
      }
      std::printf("partial: %s -> %.12s lacks %s\n", cached->revision.c_str(),
                  cached->commit.c_str(), missing.c_str());
    } else {
      std::printf("not cached\n");
    }
    std::printf("  %s\n", m.summary.c_str());
  }
  return 0;
}

int run_rm(const std::string& name) {
  if (Status st = runtime::remove_cached_model(name); !st.ok()) {
    std::fprintf(stderr, "tessera models rm: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("removed %s from %s\n", name.c_str(), runtime::hf_hub_cache_dir().c_str());
  return 0;
}

}  // namespace

void register_models(CLI::App& app, int* exit_code) {
  CLI::App* models = app.add_subcommand(
      "models", "The models Tessera knows by name (Hugging Face cache): list, rm");
  models->require_subcommand(1);
  auto revision = std::make_shared<std::string>("main");
  CLI::App* list = models->add_subcommand("list", "Known models, cached or not, and where");
  list->add_option("--revision", *revision, "A branch, tag or commit (default: main)");
  list->callback([exit_code, revision] { *exit_code = run_list(*revision); });
  auto name = std::make_shared<std::string>();
  CLI::App* rm = models->add_subcommand("rm", "Delete a model from the Hugging Face cache");
  rm->add_option("name", *name, "The model, e.g. Roblox/cube3d-v0.5")->required();
  rm->callback([exit_code, name] { *exit_code = run_rm(*name); });
}

}  // namespace tessera::cli
