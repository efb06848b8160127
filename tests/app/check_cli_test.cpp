// `tessera check MESH` as a user runs it (issue 24): a closed, manifold mesh exits 0 with its
// report; a mesh with a hole exits 1 and says why; a missing or malformed file exits 1 naming it;
// --json is one JSON object; STL and 3MF written by `tessera generate` check clean.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"

namespace tessera::testing {
namespace {

class CheckCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("tessera-check-test-") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(path(name), std::ios::binary) << text;
  }
  std::filesystem::path dir_;
};

// The unit cube as an OBJ; `faces` of its 12 triangles.
std::string cube_obj(int faces = 12) {
  std::string s =
      "v -1 -1 -1\nv 1 -1 -1\nv -1 1 -1\nv 1 1 -1\nv -1 -1 1\nv 1 -1 1\nv -1 1 1\n"
      "v 1 1 1\n";
  const int quads[6][4] = {{5, 6, 8, 7}, {2, 1, 3, 4}, {1, 5, 7, 3},
                           {6, 2, 4, 8}, {7, 8, 4, 3}, {1, 2, 6, 5}};
  int written = 0;
  for (const auto& q : quads) {
    for (int t = 0; t < 2 && written < faces; ++t, ++written) {
      s += "f " + std::to_string(q[0]) + " " + std::to_string(q[1 + t]) + " " +
           std::to_string(q[2 + t]) + "\n";
    }
  }
  return s;
}

TEST_F(CheckCliTest, ClosedMeshExitsZeroAndAHoleExitsOne) {
  write("cube.obj", cube_obj());
  CliResult r = run_tessera("check " + shell_quote(path("cube.obj")));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("closed and manifold"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("genus               0"), std::string::npos) << r.out;

  write("open.obj", cube_obj(10));
  r = run_tessera("check " + shell_quote(path("open.obj")));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("boundary edges      4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NOT closed"), std::string::npos) << r.out;

  r = run_tessera("check --json " + shell_quote(path("open.obj")));
  EXPECT_EQ(r.exit_code, 1);
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["boundary_edges"], 4);
  EXPECT_EQ(j["watertight"], false);
}

TEST_F(CheckCliTest, MissingAndMalformedFilesAreNamed) {
  CliResult r = run_tessera("check " + shell_quote(path("nope.stl")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("nope.stl"), std::string::npos) << r.err;
  write("bad.stl", "solid x\n facet normal 0 0 1\n outer loop\n vertex 0 0 zero\n");
  r = run_tessera("check " + shell_quote(path("bad.stl")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bad.stl"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("line 4"), std::string::npos) << r.err;
  write("bad.3mf", "PK not really a zip");
  r = run_tessera("check " + shell_quote(path("bad.3mf")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bad.3mf"), std::string::npos) << r.err;
  r = run_tessera("check");  // no file: usage
  EXPECT_NE(r.exit_code, 0);
}

TEST_F(CheckCliTest, GeneratedStlAnd3mfCheckClean) {
  for (const char* ext : {".stl", ".3mf"}) {
    const std::string out = path(std::string("ball") + ext);
    CliResult g = run_tessera("generate -p 'a ball' -o " + shell_quote(out));
    ASSERT_EQ(g.exit_code, 0) << g.err;
    CliResult r = run_tessera("check " + shell_quote(out));
    EXPECT_EQ(r.exit_code, 0) << ext << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("0 intersecting pairs"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace tessera::testing
