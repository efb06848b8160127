#include "bench/previews.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <variant>

#include "bench/common.h"
#include "engine/runtime/session.h"

namespace tessera::bench {
namespace {

struct PreviewJob {
  double total_ms = 0.0;
  int previews = 0;
  double preview_ms = 0.0;  // sum over the previews
};

Expected<PreviewJob> run_preview_job(runtime::Session& session, const std::string& prompt,
                                     int every, int resolution, double budget) {
  runtime::JobOptions job;
  job.prompt = prompt;
  if (budget > 0.0) {
    job.preview_every = every;
    job.preview_resolution = resolution;
    job.preview_budget = budget;
  }
  const auto start = std::chrono::steady_clock::now();
  const uint64_t id = session.submit(std::move(job));
  PreviewJob result;
  const runtime::Event last = session.wait_for(id, [&](const runtime::Event& e) {
    if (const auto* p = std::get_if<runtime::PartialMeshEvent>(&e.payload)) {
      ++result.previews;
      result.preview_ms += p->ms;
    }
  });
  if (const auto* e = std::get_if<runtime::ErrorEvent>(&last.payload)) {
    return e->status.with_context("bench previews: \"" + prompt + "\"");
  }
  if (!std::holds_alternative<runtime::DoneEvent>(last.payload)) {
    return cancelled("bench previews: the job was cancelled");
  }
  result.total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

Expected<PreviewBench> bench_previews(bool quick) {
  PreviewBench b;
  b.repeat = quick ? 3 : 5;
  runtime::ShapeModelOptions model;  // the embedded tessera-tiny, f32, CPU
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Session> session,
                           runtime::Session::open(model));
  b.model = std::filesystem::path(session->shape_model()->path).filename().string() +
            " (the embedded model)";
  const std::vector<std::pair<std::string, double>> modes = {
      {"off", 0.0},
      {"budget " + std::to_string(static_cast<int>(runtime::kDefaultPreviewBudget * 100 + 0.5)) +
           " %",
       runtime::kDefaultPreviewBudget},
      {"no budget", 1.0}};
  const std::vector<std::string> prompts =
      quick ? std::vector<std::string>{"a torus", "a snowman"}
            : std::vector<std::string>{"a torus", "a mug", "a snowman", "a chair"};
  for (const std::string& prompt : prompts) {
    std::vector<std::vector<double>> total(modes.size()), shown(modes.size()), each(modes.size());
    for (int rep = 0; rep <= b.repeat; ++rep) {  // rep 0: warm-up of each mode
      for (size_t m = 0; m < modes.size(); ++m) {
        TESSERA_ASSIGN_OR_RETURN(const PreviewJob j,
                                 run_preview_job(*session, prompt, b.preview_every,
                                                 b.preview_resolution, modes[m].second));
        if (rep == 0) continue;
        total[m].push_back(j.total_ms);
        shown[m].push_back(j.previews);
        if (j.previews > 0) each[m].push_back(j.preview_ms / j.previews);
      }
    }
    PreviewRow row;
    row.prompt = prompt;
    for (size_t m = 0; m < modes.size(); ++m) {
      PreviewMode mode;
      mode.name = modes[m].first;
      mode.budget = modes[m].second;
      mode.job_ms = median_of(total[m]);
      mode.previews = median_of(shown[m]);
      mode.preview_ms = median_of(each[m]);
      row.modes.push_back(mode);
    }
    std::printf(
        "  previews \"%s\": off %.0f ms, %s %.0f ms (%.0f previews), %s %.0f ms (%.0f "
        "previews)\n",
        prompt.c_str(), row.modes[0].job_ms, row.modes[1].name.c_str(), row.modes[1].job_ms,
        row.modes[1].previews, row.modes[2].name.c_str(), row.modes[2].job_ms,
        row.modes[2].previews);
    std::fflush(stdout);
    b.rows.push_back(std::move(row));
  }
  return b;
}

std::string previews_markdown(const PreviewBench& b) {
  std::ostringstream md;
  char buf[512];
  if (b.rows.empty()) return "";
  const PreviewRow& first = b.rows.front();
  std::snprintf(buf, sizeof buf,
                "Live previews on a whole object: `%s` through the runtime Session (the studio's "
                "path), previews every %d tokens at %d, the model's default final resolution; "
                "jobs with previews off, on with the default budget and on without one (every "
                "due preview, meshed beside the decode), alternated, %d of each after a warm-up; "
                "medians. Overhead = job time against previews off in the same run.\n\n",
                b.model.c_str(), b.preview_every, b.preview_resolution, b.repeat);
  md << buf;
  md << "| prompt | previews off |";
  for (size_t m = 1; m < first.modes.size(); ++m) {
    md << " " << first.modes[m].name << ": job | previews | overhead |";
  }
  md << "\n|---|---|";
  for (size_t m = 1; m < first.modes.size(); ++m) md << "---|---|---|";
  md << "\n";
  for (const PreviewRow& r : b.rows) {
    std::snprintf(buf, sizeof buf, "| %s | %.0f ms |", r.prompt.c_str(), r.modes[0].job_ms);
    md << buf;
    for (size_t m = 1; m < r.modes.size(); ++m) {
      const PreviewMode& x = r.modes[m];
      char each[64] = "";
      if (x.previews > 0) std::snprintf(each, sizeof each, " of %.0f ms", x.preview_ms);
      std::snprintf(buf, sizeof buf, " %.0f ms | %.0f%s | %+.1f %% |", x.job_ms, x.previews, each,
                    100.0 * (x.job_ms / r.modes[0].job_ms - 1.0));
      md << buf;
    }
    md << "\n";
  }
  md << "\n";
  return md.str();
}

}  // namespace tessera::bench
