// tessera-bench cleanup: the mesh clean-up (mesh::cleanup: weld, collapsed and repeated faces,
// small components, Taubin smoothing, compaction, normals) timed stage by stage on surfaces
// extracted the way a job extracts them (coarse-to-fine marching at 2^k + 1, the product's clean-up
// options). Two fields, both analytic so that the run needs no model:
// - "object": a chair-sized union of boxes and a torus, a smooth signed-distance field (what a
//   trained model's surface is like: one body, a few hundred thousand triangles at 257);
// - "noise": a sum of random plane waves that crosses zero all over the cube (what random
//   full-size weights give: millions of triangles, thousands of small pieces).
// Each field's mesh is extracted once; then --repeat clean-ups of fresh copies are timed, on the
// default thread pool (--threads) and on one thread, and the medians written to the
// "## Mesh clean-up (CPU)" section of bench/RESULTS.md with --write-results.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/common.h"
#include "bench/fields.h"
#include "bench/subcommands.h"
#include "core/thread_pool.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/extraction.h"

namespace tessera::bench {

namespace {

float box_sdf(const float* p, const float c[3], const float h[3]) {
  float q[3], outside = 0.0f, inside = -1e30f;
  for (int d = 0; d < 3; ++d) {
    q[d] = std::fabs(p[d] - c[d]) - h[d];
    outside += std::max(q[d], 0.0f) * std::max(q[d], 0.0f);
    inside = std::max(inside, q[d]);
  }
  return std::sqrt(outside) + std::min(inside, 0.0f);
}

}  // namespace

// A chair: seat, four legs, a back, and a torus armrest; logit = -distance * 40.
Status object_field(const float* points, int64_t n, float* logits) {
  static const float boxes[][6] = {
      {0.0f, 0.0f, 0.0f, 0.5f, 0.06f, 0.5f},       {-0.42f, -0.5f, -0.42f, 0.05f, 0.45f, 0.05f},
      {0.42f, -0.5f, -0.42f, 0.05f, 0.45f, 0.05f}, {-0.42f, -0.5f, 0.42f, 0.05f, 0.45f, 0.05f},
      {0.42f, -0.5f, 0.42f, 0.05f, 0.45f, 0.05f},  {0.0f, 0.5f, -0.45f, 0.5f, 0.45f, 0.05f}};
  for (int64_t i = 0; i < n; ++i) {
    const float* p = points + 3 * i;
    float d = 1e30f;
    for (const auto& b : boxes) d = std::min(d, box_sdf(p, b, b + 3));
    // A torus around the y axis above the seat's front edge.
    const float rx = p[0], ry = p[1] - 0.25f, rz = p[2] - 0.2f;
    const float ring = std::sqrt(rx * rx + rz * rz) - 0.3f;
    d = std::min(d, std::sqrt(ring * ring + ry * ry) - 0.05f);
    logits[i] = -40.0f * d;
  }
  return Status();
}

namespace {

struct CleanupBenchOptions {
  int resolution_base = 8;  // 257 per axis, the product's default lattice
  int repeat = 5;
  double noise_frequency = 8.0;  // radians per unit of the noise field's waves
  bool write_results = false;
  std::string results_path;
};

struct Wave {
  float k[3];
  float phase, amplitude;
};

std::vector<Wave> make_waves(double frequency) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 6.2831853f);
  std::vector<Wave> waves(24);
  for (Wave& w : waves) {
    float len = 0.0f;
    for (float& c : w.k) {
      c = normal(rng);
      len += c * c;
    }
    const float scale =
        static_cast<float>(frequency) * (0.5f + 0.5f * uniform(rng) / 6.2831853f) / std::sqrt(len);
    for (float& c : w.k) c *= scale;
    w.phase = uniform(rng);
    w.amplitude = 1.0f;
  }
  return waves;
}

struct Case {
  std::string name;
  mesh::Mesh mesh;
};

Expected<mesh::Mesh> extract(const mesh::OccupancyFn& field, int resolution_base) {
  mesh::ExtractionOptions ex;
  ex.resolution_base = resolution_base;
  return mesh::extract_coarse_to_fine(field, ex);
}

// Median of `repeat` clean-ups of copies of `input` (each after one warm-up), with every stage's
// median; `out` gets the last result.
struct StageTimes {
  Timing total;
  mesh::CleanupStats stages;  // medians per stage
  mesh::Mesh out;
};

StageTimes time_cleanup(const mesh::Mesh& input, int repeat) {
  const mesh::CleanupOptions options;  // the product's defaults
  std::vector<double> totals;
  std::vector<mesh::CleanupStats> stats;
  StageTimes result;
  for (int r = 0; r <= repeat; ++r) {
    mesh::Mesh m = input;
    mesh::CleanupStats s;
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = mesh::cleanup(m, options, &s);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok()) std::fprintf(stderr, "clean-up failed: %s\n", st.to_string().c_str());
    if (r == 0) continue;  // warm-up
    totals.push_back(sec);
    stats.push_back(s);
    result.out = std::move(m);
  }
  result.total = summarize(totals);
  auto median_of = [&](double mesh::CleanupStats::*field) {
    std::vector<double> v;
    v.reserve(stats.size());
    for (const auto& s : stats) v.push_back(s.*field);
    return percentile(v, 50);
  };
  result.stages.weld_ms = median_of(&mesh::CleanupStats::weld_ms);
  result.stages.faces_ms = median_of(&mesh::CleanupStats::faces_ms);
  result.stages.components_ms = median_of(&mesh::CleanupStats::components_ms);
  result.stages.smooth_ms = median_of(&mesh::CleanupStats::smooth_ms);
  result.stages.decimate_ms = median_of(&mesh::CleanupStats::decimate_ms);
  result.stages.normals_ms = median_of(&mesh::CleanupStats::normals_ms);
  return result;
}

Status run_bench_cleanup(const CleanupBenchOptions& o) {
  const Machine machine = describe_machine();
  warn_if_busy(machine);
  const std::vector<Wave> waves = make_waves(o.noise_frequency);
  const mesh::OccupancyFn noise = [&waves](const float* points, int64_t n, float* logits) {
    for (int64_t i = 0; i < n; ++i) {
      const float* p = points + 3 * i;
      float v = 0.35f;  // a little more inside than out
      for (const Wave& w : waves) {
        v += w.amplitude * std::sin(w.k[0] * p[0] + w.k[1] * p[1] + w.k[2] * p[2] + w.phase);
      }
      logits[i] = v;
    }
    return Status();
  };
  std::vector<Case> cases;
  for (const auto& [name, field] :
       {std::pair<const char*, mesh::OccupancyFn>{"object", object_field}, {"noise", noise}}) {
    const auto t0 = std::chrono::steady_clock::now();
    TESSERA_ASSIGN_OR_RETURN(mesh::Mesh m, extract(field, o.resolution_base));
    std::fprintf(stderr, "%s: %lld vertices, %lld triangles extracted in %.1f s\n", name,
                 static_cast<long long>(m.vertex_count()),
                 static_cast<long long>(m.triangle_count()),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    cases.push_back({name, std::move(m)});
  }
  const int threads = default_thread_pool().num_threads();
  std::string table =
      "| surface | vertices | triangles in / out | threads | clean-up (median) | min - max | weld "
      "| faces | components | smoothing | normals |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Case& c : cases) {
    std::vector<int> counts{threads};
    if (threads > 1) counts.push_back(1);
    for (int n : counts) {
      set_default_threads(n);
      const StageTimes t = time_cleanup(c.mesh, o.repeat);
      char line[512];
      std::snprintf(line, sizeof(line),
                    "| %s | %lld | %lld / %lld | %d | **%.0f ms** | %.0f - %.0f | %.0f | %.0f | "
                    "%.0f | %.0f | %.0f |\n",
                    c.name.c_str(), static_cast<long long>(c.mesh.vertex_count()),
                    static_cast<long long>(c.mesh.triangle_count()),
                    static_cast<long long>(t.out.triangle_count()), n, t.total.median * 1e3,
                    t.total.min * 1e3, t.total.max * 1e3, t.stages.weld_ms, t.stages.faces_ms,
                    t.stages.components_ms, t.stages.smooth_ms, t.stages.normals_ms);
      table += line;
      std::fputs(line, stderr);
    }
    set_default_threads(threads);
  }
  char head[1024];
  std::snprintf(head, sizeof(head),
                "Surfaces extracted coarse-to-fine at %d per axis from two analytic fields: "
                "\"object\", a chair (boxes and a torus, one smooth body, what a trained model "
                "gives), and \"noise\", %zu random plane waves at ~%.0f rad/unit (a surface all "
                "over the cube, in thousands of pieces, what random full-size weights give). "
                "`mesh::cleanup` with the product's options (weld, collapsed and repeated faces, "
                "small components under 15 %% of the diagonal, 20 Taubin iterations, normals), "
                "%d timed runs on fresh copies after one warm-up; stage medians in ms.\n\n",
                (1 << o.resolution_base) + 1, waves.size(), o.noise_frequency, o.repeat);
  const std::string heading = "## Mesh clean-up (CPU)\n";
  const std::string section = heading + "\n" + machine_markdown(machine) + head + table + "\n";
  std::fputs(section.c_str(), stdout);
  if (o.write_results) {
    Options paths;
    paths.results_path = o.results_path;
    const std::string path = results_path(paths);
    TESSERA_RETURN_IF_ERROR(write_results_section(path, heading, section));
    std::printf("wrote the \"Mesh clean-up (CPU)\" section of %s\n", path.c_str());
  }
  return Status();
}

}  // namespace

void register_cleanup_bench(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<CleanupBenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "cleanup", "The mesh clean-up stage by stage on an object-like and a noise-like surface");
  cmd->add_option("--resolution-base", o->resolution_base,
                  "Extraction lattice 2^k + 1 per axis (default 8: 257, the product's)")
      ->check(CLI::Range(4, 9));
  cmd->add_option("--repeat", o->repeat,
                  "Timed clean-ups per surface after one warm-up (default 5)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--noise-frequency", o->noise_frequency,
                  "Radians per unit of the noise field's waves (default 8)")
      ->check(CLI::Range(1.0, 200.0));
  cmd->add_flag("--write-results", o->write_results,
                "Replace the \"## Mesh clean-up (CPU)\" section of bench/RESULTS.md");
  cmd->add_option("--results", o->results_path, "Results file for --write-results");
  cmd->callback([o, exit_code] {
    const Status st = run_bench_cleanup(*o);
    if (!st.ok()) {
      std::fprintf(stderr, "tessera-bench cleanup: %s\n", st.to_string().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tessera::bench
