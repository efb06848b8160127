// A public corpus nobody here wrote: Debian's assimp-testmodels (installed by scripts/setup.sh),
// its OBJ, FBX, glTF, GLB, STL, 3MF, DAE, PLY and 3DS files from many exporters, the invalid/
// folders left out. Every file goes through the importer every front end uses
// (mesh::import_mesh_file); the result, opened or refused with its reason, is compared with the
// record tests/fixtures/corpus/assimp-testmodels.tsv: a file that opened before and fails now is a
// failure, and so is a crash. New openings are printed (update the record with
// TESSERA_UPDATE_CORPUS=1). Skips when the package is not installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "engine/mesh/import.h"

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
  std::string now_text =
      "# tests/app/mesh_corpus_test.cpp: each assimp-testmodels file, opened or refused (reason)\n";
  int opened = 0, total = 0;
  for (const fs::path& file : corpus_files()) {
    const std::string rel = fs::relative(file, kCorpus).string();
    auto mesh = mesh::import_mesh_file(file.string());
    ++total;
    std::string reason;
    if (mesh.ok()) {
      ++opened;
    } else {
      reason = mesh.status().message();
      std::replace(reason.begin(), reason.end(), '\t', ' ');
      std::replace(reason.begin(), reason.end(), '\n', ' ');
      // Every refusal says why (and names the file).
      EXPECT_NE(reason.find(file.filename().string()), std::string::npos) << rel << ": " << reason;
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
  std::printf("assimp-testmodels: %d of %d files open\n", opened, total);
  if (std::getenv("TESSERA_UPDATE_CORPUS") != nullptr) {
    fs::create_directories(record.parent_path());
    std::ofstream(record) << now_text;
  }
}

}  // namespace
}  // namespace tessera
