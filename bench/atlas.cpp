// tessera-bench atlas [--repeat N] [--mesh FILE]: the UV atlas (engine/mesh/uv_atlas.h) timed by
// phase (charts, flatten, pack) on meshes of about 100k triangles, with what it gives: charts,
// utilisation, L2 stretch percentiles, overlaps and flips, at 1024, 2048 and 4096:
// - "object": the chair field of `bench cleanup` extracted at 2^7 + 1 and cleaned with the
//   product's clean-up (a generated asset's surface);
// - "torus": an analytic 400 x 128 torus (102,400 triangles; long curved charts);
// - --mesh FILE: any mesh Tessera opens (its uvs replaced).
// Medians of --repeat runs after one warm-up; nothing is written (the figures go to RESULTS.md by
// hand with the command and the machine line printed here).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/common.h"
#include "bench/fields.h"
#include "bench/subcommands.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/extraction.h"
#include "engine/mesh/import.h"
#include "engine/mesh/uv_atlas.h"

namespace tessera::bench {
namespace {

struct AtlasBenchOptions {
  int repeat = 3;
  std::string mesh;
};

mesh::Mesh torus(int rings, int sides) {
  mesh::Mesh m;
  for (int i = 0; i < rings; ++i) {
    for (int j = 0; j < sides; ++j) {
      const double a = 2 * M_PI * i / rings, b = 2 * M_PI * j / sides;
      const double r = 1.0 + 0.35 * std::cos(b);
      m.positions.push_back(static_cast<float>(r * std::cos(a)));
      m.positions.push_back(static_cast<float>(0.35 * std::sin(b)));
      m.positions.push_back(static_cast<float>(r * std::sin(a)));
    }
  }
  for (int i = 0; i < rings; ++i) {
    for (int j = 0; j < sides; ++j) {
      const auto at = [&](int ii, int jj) {
        return static_cast<uint32_t>((ii % rings) * sides + jj % sides);
      };
      m.triangles.insert(m.triangles.end(), {at(i, j), at(i + 1, j + 1), at(i + 1, j), at(i, j),
                                             at(i, j + 1), at(i + 1, j + 1)});
    }
  }
  return m;
}

Status run_bench_atlas(const AtlasBenchOptions& o) {
  const Machine machine = describe_machine();
  std::printf("%s", machine_markdown(machine).c_str());
  warn_if_busy(machine);
  std::vector<std::pair<std::string, mesh::Mesh>> meshes;
  {
    mesh::ExtractionOptions ex;
    ex.resolution_base = 7;
    TESSERA_ASSIGN_OR_RETURN(mesh::Mesh object, mesh::extract_coarse_to_fine(object_field, ex));
    TESSERA_RETURN_IF_ERROR(mesh::cleanup(object, mesh::CleanupOptions{}, nullptr));
    meshes.emplace_back("object", std::move(object));
  }
  meshes.emplace_back("torus", torus(400, 128));
  if (!o.mesh.empty()) {
    TESSERA_ASSIGN_OR_RETURN(mesh::Mesh m, mesh::import_mesh_file(o.mesh));
    m.uvs.clear();
    m.texture = mesh::TextureImage{};
    meshes.emplace_back(o.mesh, std::move(m));
  }
  std::printf(
      "\n| mesh | triangles | size | charts (LSCM) | utilisation | stretch p50/p90/p99 | "
      "overlaps / flips | charts ms | flatten ms | pack ms | total ms |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& [name, m] : meshes) {
    for (int size : {1024, 2048, 4096}) {
      mesh::AtlasOptions options;
      options.size = size;
      options.replace_existing = true;
      std::vector<double> total, charts, flatten, pack;
      mesh::AtlasReport r;
      for (int rep = 0; rep <= o.repeat; ++rep) {
        const auto start = std::chrono::steady_clock::now();
        auto out = mesh::make_uv_atlas(m, options, &r);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        if (!out.ok()) return out.status();
        if (rep == 0) continue;  // warm-up
        total.push_back(ms);
        charts.push_back(r.charts_ms);
        flatten.push_back(r.flatten_ms);
        pack.push_back(r.pack_ms);
      }
      std::printf(
          "| %s | %lld | %d | %lld (%lld) | %.3f | %.3f / %.3f / %.3f | %lld / %lld | "
          "%.0f | %.0f | %.0f | **%.0f** |\n",
          name.c_str(), static_cast<long long>(m.triangle_count()), size,
          static_cast<long long>(r.charts), static_cast<long long>(r.lscm_charts), r.utilization,
          r.stretch_p50, r.stretch_p90, r.stretch_p99, static_cast<long long>(r.overlapping),
          static_cast<long long>(r.flipped), percentile(charts, 50), percentile(flatten, 50),
          percentile(pack, 50), percentile(total, 50));
      std::fflush(stdout);
    }
  }
  return Status();
}

}  // namespace

void register_atlas_bench(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<AtlasBenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "atlas", "UV atlas by phase on ~100k-triangle meshes: charts, utilisation, stretch, time");
  cmd->add_option("--repeat", o->repeat, "Timed runs per row after a warm-up (default 3)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--mesh", o->mesh, "Also a mesh file (any format Tessera opens)");
  cmd->callback([o, exit_code] {
    const Status st = run_bench_atlas(*o);
    if (!st.ok()) std::fprintf(stderr, "tessera-bench atlas: %s\n", st.message().c_str());
    *exit_code = st.ok() ? 0 : 1;
  });
}

}  // namespace tessera::bench
