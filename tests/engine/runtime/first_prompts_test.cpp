// The first prompts a newcomer types (tools/train/first_prompts.tsv, issue 22) through the runtime
// on the embedded model, with the defaults every front end starts from (JobOptions{}: greedy,
// guidance 3, the model's default resolution, default clean-up): every mesh is closed and manifold,
// by index, after welding coincident vertices, and as written to OBJ / GLB / FBX and read back.
// Whether each shape is the family asked for is the recogniser's job
// (tools/train/first_prompts.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "engine/mesh/export.h"
#include "engine/mesh/import.h"
#include "engine/mesh/mesh.h"
#include "engine/runtime/session.h"

namespace tessera::runtime {
namespace {

struct FirstPrompt {
  std::string family, prompt, check, group;
};

std::vector<FirstPrompt> read_first_prompts() {
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/tools/train/first_prompts.tsv");
  std::vector<FirstPrompt> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::stringstream fields(line);
    FirstPrompt p;
    std::getline(fields, p.family, '\t');
    std::getline(fields, p.prompt, '\t');
    std::getline(fields, p.check, '\t');
    std::getline(fields, p.group, '\t');
    out.push_back(p);
  }
  return out;
}

std::string describe(const mesh::Topology& t) {
  return std::to_string(t.boundary_edges) + " boundary and " +
         std::to_string(t.non_manifold_edges) + " non-manifold edges";
}

TEST(FirstPrompts, TheSetCoversEveryFamilyOfTheEmbeddedModel) {
  const auto prompts = read_first_prompts();
  ASSERT_GE(prompts.size(), 80u);
  auto session = Session::open(ShapeModelOptions{});
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  const auto info = (*session)->shape_model();
  ASSERT_TRUE(info.has_value());
  ASSERT_EQ(info->example_prompts.size(), 19u);
  for (const std::string& example : info->example_prompts) {
    bool found = false;
    for (const auto& p : prompts) found = found || (p.prompt == example && p.group == "a-family");
    EXPECT_TRUE(found) << "example prompt '" << example << "' is not an a-family prompt of the set";
  }
}

TEST(FirstPrompts, EveryMeshIsClosedAndManifoldAsExported) {
  const auto prompts = read_first_prompts();
  ASSERT_GE(prompts.size(), 80u);
  auto opened = Session::open(ShapeModelOptions{});
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  Session& session = **opened;
  const auto dir = std::filesystem::temp_directory_path() / "tessera_first_prompts_test";
  std::filesystem::create_directories(dir);
  int index = 0;
  for (const auto& p : prompts) {
    JobOptions job;
    job.prompt = p.prompt;
    const uint64_t id = session.submit(job);
    std::shared_ptr<const mesh::Mesh> result;
    const Event end = session.wait_for(id, [&](const Event& e) {
      if (const auto* f = std::get_if<FinalMeshEvent>(&e.payload)) result = f->mesh;
    });
    ASSERT_TRUE(std::holds_alternative<DoneEvent>(end.payload)) << p.prompt;
    ASSERT_NE(result, nullptr) << p.prompt;
    const mesh::Topology by_index = mesh::compute_topology(*result);
    EXPECT_TRUE(by_index.watertight()) << "'" << p.prompt << "': " << describe(by_index);
    const mesh::Topology welded = mesh::compute_welded_topology(*result);
    EXPECT_TRUE(welded.watertight()) << "'" << p.prompt << "' welded: " << describe(welded);
    EXPECT_EQ(welded.misoriented_edges, 0) << p.prompt;
    // Every format for a third of the prompts (all three formats over the set).
    const char* ext = std::vector<const char*>{".obj", ".glb", ".fbx"}[index++ % 3];
    const auto path = dir / ("shape" + std::to_string(index) + ext);
    ASSERT_TRUE(mesh::write_mesh(*result, path.string()).ok()) << path;
    auto back = mesh::import_mesh_file(path.string());
    ASSERT_TRUE(back.ok()) << path << ": " << back.status().to_string();
    const mesh::Topology file = mesh::compute_welded_topology(*back);
    EXPECT_TRUE(file.watertight()) << "'" << p.prompt << "' as " << ext << ": " << describe(file);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::runtime
