// A public corpus nobody here wrote: Debian's assimp-testmodels (installed by scripts/setup.sh),
// its OBJ, FBX, glTF, GLB, STL, 3MF, DAE, PLY and 3DS files from many exporters, the invalid/
// folders left out. Every file goes through the importer every front end uses
// (mesh::import_mesh_file); the result, opened or refused with its reason, is compared with the
// record tests/fixtures/corpus/assimp-testmodels.tsv: a file that opened before and fails now is a
// failure, and so is a crash (of the test, or of the Assimp reader's child process) or a read that
// ran into the time limit. New openings are printed (update the record with
// TESSERA_UPDATE_CORPUS=1). It is also held against Assimp itself (`assimp info`, recorded in
// tests/fixtures/corpus/assimp-info.tsv by tools/corpus/assimp_info_baseline.sh): every file Assimp
// turns into triangles opens here too, unless the readers here refuse it as malformed
// (kCorruptData: an index out of range, a vertex count that is not a multiple of 3, which Assimp
// passes over silently), and at least as many files open as Assimp turns into triangles (Assimp
// also "opens" files holding only points or lines, which have no surface to show or export).
// Skips when the package is not installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "engine/mesh/import.h"
#include "engine/mesh/uv_atlas.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = "/usr/share/assimp/models";

std::vector<fs::path> corpus_files() {
  static const std::vector<std::string> kExts = {".obj", ".fbx", ".gltf", ".glb", ".stl",
                                                 ".3mf", ".dae", ".ply",  ".3ds"};
  std::vector<fs::path> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(kCorpus, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    std::string ext = it->path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string lower = it->path().string();
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower.find("/invalid/") != std::string::npos) continue;
    if (std::find(kExts.begin(), kExts.end(), ext) != kExts.end()) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(MeshCorpus, AssimpTestModelsOpenAtLeastAsBeforeAndNothingCrashes) {
  if (!fs::is_directory(kCorpus)) GTEST_SKIP() << "assimp-testmodels is not installed";
  const fs::path record =
      fs::path(TESSERA_SOURCE_DIR) / "tests" / "fixtures" / "corpus" / "assimp-testmodels.tsv";
  std::map<std::string, std::string> before;  // relative path -> "opened" / "refused"
  {
    std::ifstream in(record);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const size_t tab = line.find('\t');
      const size_t tab2 = line.find('\t', tab + 1);
      before[line.substr(0, tab)] = line.substr(tab + 1, tab2 - tab - 1);
    }
  }
  // Assimp's own reading of each file: "opened" + its primitive types, or "refused".
  std::map<std::string, std::string> assimp;  // relative path -> primitive types ("" = refused)
  {
    std::ifstream in(record.parent_path() / "assimp-info.tsv");
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const size_t tab = line.find('\t');
      const size_t tab2 = line.find('\t', tab + 1);
      if (line.substr(tab + 1, tab2 - tab - 1) == "opened") {
        assimp[line.substr(0, tab)] = line.substr(tab2 + 1);
      }
    }
  }
  ASSERT_FALSE(assimp.empty()) << "tests/fixtures/corpus/assimp-info.tsv is missing";
  int assimp_triangles = 0;
  std::string now_text =
      "# tests/app/mesh_corpus_test.cpp: each assimp-testmodels file, opened or refused (reason)\n";
  int opened = 0, total = 0;
  for (const fs::path& file : corpus_files()) {
    const std::string rel = fs::relative(file, kCorpus).string();
    const auto start = std::chrono::steady_clock::now();
    auto mesh = mesh::import_mesh_file(file.string());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 30.0) << rel << " took " << seconds << " s";
    ++total;
    const auto by_assimp = assimp.find(rel);
    const bool assimp_meshes =
        by_assimp != assimp.end() && (by_assimp->second.find("triangles") != std::string::npos ||
                                      by_assimp->second.find("polygons") != std::string::npos);
    if (assimp_meshes) ++assimp_triangles;
    std::string reason;
    if (mesh.ok()) {
      ++opened;
    } else {
      reason = mesh.status().message();
      std::replace(reason.begin(), reason.end(), '\t', ' ');
      std::replace(reason.begin(), reason.end(), '\n', ' ');
      // Every refusal says why (and names the file).
      EXPECT_NE(reason.find(file.filename().string()), std::string::npos) << rel << ": " << reason;
      // The Assimp reader neither crashed nor hung on any of these files.
      EXPECT_EQ(reason.find("crashed"), std::string::npos) << rel << ": " << reason;
      EXPECT_EQ(reason.find("did not finish"), std::string::npos) << rel << ": " << reason;
      if (assimp_meshes) {
        EXPECT_EQ(mesh.status().code(), ErrorCode::kCorruptData)
            << rel
            << ": Assimp reads triangles from it, and it is refused here for no fault: " << reason;
      }
    }
    const std::string state = mesh.ok() ? "opened" : "refused";
    now_text += rel + "\t" + state + "\t" + reason.substr(0, 200) + "\n";
    const auto it = before.find(rel);
    if (it != before.end() && it->second == "opened") {
      EXPECT_TRUE(mesh.ok()) << rel << " opened before and now fails: " << reason;
    } else if (mesh.ok()) {
      std::printf("newly opened: %s\n", rel.c_str());
    }
  }
  std::printf(
      "assimp-testmodels: %d of %d files open; assimp info opens %zu, %d of them with triangles\n",
      opened, total, assimp.size(), assimp_triangles);
  EXPECT_GE(opened, assimp_triangles);
  if (std::getenv("TESSERA_UPDATE_CORPUS") != nullptr) {
    fs::create_directories(record.parent_path());
    std::ofstream(record) << now_text;
  }
}

// Every corpus mesh that opens gets a new UV atlas (its own uvs replaced) with no overlapping
// and no flipped triangles, or an error that says why; none takes long.
TEST(MeshCorpus, EveryOpeningMeshGetsAValidUvAtlasOrAClearError) {
  if (!fs::is_directory(kCorpus)) GTEST_SKIP() << "assimp-testmodels is not installed";
  int made = 0, refused = 0, used_60 = 0;
  double worst_seconds = 0, utilization_sum = 0;
  std::string worst;
  for (const fs::path& file : corpus_files()) {
    const std::string rel = fs::relative(file, kCorpus).string();
    auto m = mesh::import_mesh_file(file.string());
    if (!m.ok()) continue;
    mesh::AtlasOptions options;
    options.size = 1024;
    options.replace_existing = true;
    mesh::AtlasReport report;
    const auto start = std::chrono::steady_clock::now();
    auto atlas = mesh::make_uv_atlas(*m, options, &report);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 10.0) << rel;
    if (seconds > worst_seconds) {
      worst_seconds = seconds;
      worst = rel + " (" + std::to_string(m->triangle_count()) + " triangles)";
    }
    if (!atlas.ok()) {
      ++refused;
      EXPECT_EQ(atlas.status().code(), ErrorCode::kInvalidArgument) << rel;
      EXPECT_FALSE(atlas.status().message().empty()) << rel;
      std::printf("no atlas: %s: %s\n", rel.c_str(), atlas.status().message().c_str());
      continue;
    }
    ++made;
    utilization_sum += report.utilization;
    if (report.utilization >= 0.6) {
      ++used_60;
    } else {  // a single triangle, or parts so many or so small that the gutters take the texture
      std::printf("under 60 %% used: %.3f, %lld charts for %lld triangles: %s\n",
                  report.utilization, static_cast<long long>(report.charts),
                  static_cast<long long>(m->triangle_count()), rel.c_str());
    }
    EXPECT_TRUE(mesh::validate(*atlas).ok()) << rel;
    EXPECT_EQ(report.overlapping, 0) << rel;
    EXPECT_EQ(report.flipped, 0) << rel;
    EXPECT_EQ(atlas->triangles.size(), m->triangles.size()) << rel;
  }
  std::printf(
      "UV atlas over the corpus: %d made (%d using 60 %% or more), %d refused; mean utilisation "
      "%.3f; slowest %.2f s: %s\n",
      made, used_60, refused, made > 0 ? utilization_sum / made : 0.0, worst_seconds,
      worst.c_str());
  EXPECT_GT(made, 0);
}

}  // namespace
}  // namespace tessera
