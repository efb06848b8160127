// tessera models: the models Tessera knows by name and what of them is on this machine
// (engine/runtime/models.h).
//   tessera models list [--revision REV]   every known model: kind, size, cached or not, revision,
//                                          size on disk, where; what a partial one lacks
//   tessera models pull NAME [--revision R] fetches NAME (and a shape model's text encoder) into
//                                          the Hugging Face cache: resumable, verified, atomic
//   tessera models verify NAME              every cached file's hash against what the Hub stated
//   tessera models rm NAME                  deletes NAME from the Hugging Face cache
// A name then works wherever a model folder does: tessera generate --model Roblox/cube3d-v0.5.
// Exit status 0, 1 on an error (the reason on stderr), 2 for bad usage.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "app/cli/commands.h"
#include "engine/runtime/model_pull.h"
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

// "[#####.....] shape_gpt.safetensors 3.10/7.17 GB  41.2 MB/s  1m38s left", redrawn in place on a
// terminal; elsewhere a line per quarter of each file.
class PullBar {
 public:
  PullBar() : tty_(::isatty(STDERR_FILENO) == 1) {}
  void update(const runtime::PullProgress& p) {
    if (p.file != file_) {
      if (tty_ && !file_.empty()) std::fputc('\n', stderr);
      file_ = p.file;
      quarter_ = -1;
    }
    const double fraction = p.total > 0 ? static_cast<double>(p.done) / p.total : 1.0;
    const int quarter = static_cast<int>(fraction * 4);
    if (!tty_ && quarter <= quarter_) return;
    quarter_ = quarter;
    char eta[32] = "";
    if (p.bytes_per_second > 0 && p.done < p.total) {
      const int64_t left = static_cast<int64_t>((p.total - p.done) / p.bytes_per_second);
      std::snprintf(eta, sizeof(eta), "  %lldm%02llds left", static_cast<long long>(left / 60),
                    static_cast<long long>(left % 60));
    }
    std::string bar(20, '.');
    for (int i = 0; i < static_cast<int>(fraction * 20) && i < 20; ++i) bar[i] = '#';
    std::fprintf(stderr, "%s[%s] %s %s/%s  %.1f MB/s%s%s", tty_ ? "\r" : "", bar.c_str(),
                 (p.model + "/" + p.file).c_str(), gigabytes(p.done).c_str(),
                 gigabytes(p.total).c_str(), p.bytes_per_second / 1e6, eta, tty_ ? "   " : "\n");
    std::fflush(stderr);
  }
  void finish() {
    if (tty_ && !file_.empty()) std::fputc('\n', stderr);
  }

 private:
  bool tty_;
  std::string file_;
  int quarter_ = -1;
};

int run_pull(const std::string& name, const std::string& revision) {
  runtime::PullOptions options;
  options.revision = revision;
  PullBar bar;
  options.on_progress = [&bar](const runtime::PullProgress& p) { bar.update(p); };
  auto report = runtime::pull_model(name, options);
  bar.finish();
  if (!report.ok()) {
    std::fprintf(stderr, "tessera models pull: %s\n", report.status().message().c_str());
    return 1;
  }
  for (const std::string& m : report->models) {
    auto cached = runtime::find_cached_model(m, m == name ? revision : "main");
    std::printf("%s: %s\n", m.c_str(),
                cached.ok() && cached->complete() ? cached->snapshot_dir.c_str() : "?");
  }
  std::printf("downloaded %s, %s already here\n", gigabytes(report->downloaded_bytes).c_str(),
              gigabytes(report->reused_bytes).c_str());
  std::printf("use it with: tessera generate --model %s -p \"a chair\" -o chair.glb\n",
              name.c_str());
  return 0;
}

int run_verify(const std::string& name, const std::string& revision) {
  auto report = runtime::verify_model(name, revision);
  if (!report.ok()) {
    std::fprintf(stderr, "tessera models verify: %s\n", report.status().message().c_str());
    return 1;
  }
  for (const std::string& g : report->good) std::printf("ok   %s\n", g.c_str());
  for (const std::string& b : report->bad) std::printf("BAD  %s\n", b.c_str());
  if (!report->bad.empty()) {
    std::fprintf(stderr, "tessera models verify: %zu file(s) bad; pull again to replace them\n",
                 report->bad.size());
    return 1;
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
      "models", "The models Tessera knows by name (Hugging Face cache): list, pull, verify, rm");
  models->require_subcommand(1);
  auto revision = std::make_shared<std::string>("main");
  CLI::App* list = models->add_subcommand("list", "Known models, cached or not, and where");
  list->add_option("--revision", *revision, "A branch, tag or commit (default: main)");
  list->callback([exit_code, revision] { *exit_code = run_list(*revision); });
  auto name = std::make_shared<std::string>();
  CLI::App* pull = models->add_subcommand(
      "pull", "Fetch a model (and a shape model's text encoder) into the Hugging Face cache");
  pull->add_option("name", *name, "The model, e.g. Roblox/cube3d-v0.5")->required();
  pull->add_option("--revision", *revision, "A branch, tag or commit (default: main)");
  pull->callback([exit_code, name, revision] { *exit_code = run_pull(*name, *revision); });
  CLI::App* verify =
      models->add_subcommand("verify", "Check every cached file against the Hub's stated hash");
  verify->add_option("name", *name, "The model")->required();
  verify->add_option("--revision", *revision, "A branch, tag or commit (default: main)");
  verify->callback([exit_code, name, revision] { *exit_code = run_verify(*name, *revision); });
  CLI::App* rm = models->add_subcommand("rm", "Delete a model from the Hugging Face cache");
  rm->add_option("name", *name, "The model, e.g. Roblox/cube3d-v0.5")->required();
  rm->callback([exit_code, name] { *exit_code = run_rm(*name); });
}

}  // namespace tessera::cli
