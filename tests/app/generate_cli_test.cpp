// End-to-end tests of `tessera generate` and `tessera decode` on a model directory assembled from
// the parity fixtures (random weights: the shape itself does not matter, the files must be complete
// and parseable, tokens must round-trip, and every bad input must give a clear error and exit 1).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "engine/runtime/job_request.h"
#include "tests/support/cli_runner.h"
#include "tests/support/fixture_model_dir.h"

namespace tessera {
namespace {

using testing::FixtureModelDir;
using testing::run_bench;
using testing::run_tessera;
using testing::shell_quote;

using testing::slurp;

// Parses an OBJ as written by engine/mesh/export: checks every face index and counts elements.
struct ObjCounts {
  int64_t vertices = 0, normals = 0, faces = 0;
  bool indices_valid = true;
};
ObjCounts parse_obj(const std::string& text) {
  ObjCounts c;
  std::istringstream in(text);
  std::string line;
  std::vector<std::string> faces;
  while (std::getline(in, line)) {
    if (line.rfind("v ", 0) == 0) ++c.vertices;
    if (line.rfind("vn ", 0) == 0) ++c.normals;
    if (line.rfind("f ", 0) == 0) faces.push_back(line);
  }
  c.faces = static_cast<int64_t>(faces.size());
  for (const std::string& f : faces) {
    std::istringstream fs(f.substr(2));
    std::string corner;
    int corners = 0;
    while (fs >> corner) {
      ++corners;
      const long index = std::stol(corner.substr(0, corner.find('/')));
      if (index < 1 || index > c.vertices) c.indices_valid = false;
    }
    if (corners != 3) c.indices_valid = false;
  }
  return c;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::istringstream in(text);
  std::vector<int32_t> ids;
  int32_t id = 0;
  while (in >> id) ids.push_back(id);
  return ids;
}

class GenerateCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = new FixtureModelDir("cli"); }
  static void TearDownTestSuite() { delete model_; }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("tessera-generate-cli-") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string model_arg() { return " --model " + shell_quote(model_->path()); }
  // The fixture prompt and box; small lattices keep the tests fast.
  static std::string generate_args(const std::string& output, int resolution = 17) {
    return "generate" + model_arg() + " --prompt " + shell_quote(testing::kParityPrompt) +
           " --bbox 0.5 1 0.25 --resolution " + std::to_string(resolution) + " -o " +
           shell_quote(output);
  }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(path(name)) << text;
    return path(name);
  }

  static FixtureModelDir* model_;
  std::filesystem::path dir_;
};
FixtureModelDir* GenerateCliTest::model_ = nullptr;

TEST_F(GenerateCliTest, WritesAnObjAndTokensThatRoundTripThroughDecode) {
  const std::string obj = path("out.obj"), tokens = path("tokens.txt");
  // --no-metadata: `decode` below writes no generation settings, so the two files can match.
  const auto r = run_tessera(generate_args(obj) + " --tokens-out " + shell_quote(tokens) +
                             " --preview-every 4 --preview-resolution 9 --no-metadata");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote " + obj), std::string::npos) << r.out;
  // Progress bar and timing summary on stderr.
  EXPECT_NE(r.err.find("16/16 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("TPOT"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("extraction"), std::string::npos) << r.err;

  const std::string mesh_text = slurp(obj);
  const ObjCounts counts = parse_obj(mesh_text);
  EXPECT_GT(counts.vertices, 0);
  EXPECT_GT(counts.faces, 0);
  EXPECT_EQ(counts.normals, counts.vertices);
  EXPECT_TRUE(counts.indices_valid);

  // Greedy from the fixture prompt reproduces the reference's tokens.
  const std::vector<int32_t> ids = parse_ids(slurp(tokens));
  SafeTensors expected = SafeTensors::open(std::string(TESSERA_SOURCE_DIR) +
                                           "/tests/fixtures/parity/expected.safetensors")
                             .value();
  TensorView greedy = expected.view("gpt.greedy_tokens").value();
  EXPECT_EQ(ids, std::vector<int32_t>(greedy.as<const int32_t>(), greedy.as<const int32_t>() + 16));

  // decode at the same resolution gives the same file; at another one, another valid mesh.
  // Same file name (in another directory), so that the OBJ's "mtllib out.mtl" line matches too.
  std::filesystem::create_directories(dir_ / "decoded");
  const std::string decoded = path("decoded/out.obj");
  const auto d = run_tessera("decode" + model_arg() + " --tokens " + shell_quote(tokens) +
                             " --resolution 17 -o " + shell_quote(decoded));
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(slurp(decoded), mesh_text);
  const auto coarse = run_tessera("decode" + model_arg() + " --tokens " + shell_quote(tokens) +
                                  " --resolution 9 -o " + shell_quote(decoded));
  ASSERT_EQ(coarse.exit_code, 0) << coarse.err;
  EXPECT_TRUE(parse_obj(slurp(decoded)).indices_valid);
  EXPECT_NE(slurp(decoded), mesh_text);
}

TEST_F(GenerateCliTest, WritesAValidGlbWithSamplingAndWithoutKvCache) {
  const std::string glb = path("out.GLB");
  const auto r =
      run_tessera(generate_args(glb) + " --seed 3 --top-k 10 --temperature 0.8 --no-kv-cache");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("no KV cache"), std::string::npos) << r.err;
  const std::string bytes = slurp(glb);
  ASSERT_GE(bytes.size(), 20u);
  uint32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(std::string(bytes.data(), 4), "glTF");
  EXPECT_EQ(header[1], 2u);
  EXPECT_EQ(header[2], bytes.size());
  EXPECT_NE(bytes.find("\"POSITION\""), std::string::npos);
}

// --variations N: OUT_1..OUT_N and T_1..T_N, seeds S..S+N-1 printed, sampling on; variation i is
// exactly a lone `generate --seed S+i-1` (batch invariance through the whole CLI), and the
// candidates differ from each other.
TEST_F(GenerateCliTest, VariationsWriteNumberedFilesThatALoneSeedRemakes) {
  const std::string glb = path("cand.glb"), tokens = path("t.txt");
  const auto r = run_tessera(generate_args(glb) + " --variations 3 --seed 41 --tokens-out " +
                             shell_quote(tokens));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("seeds 41..43"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("over 3 candidates"), std::string::npos) << r.err;
  std::vector<std::vector<int32_t>> ids;
  for (int i = 1; i <= 3; ++i) {
    const std::string n = std::to_string(i);
    EXPECT_NE(r.out.find("wrote " + path("cand_" + n + ".glb")), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("seed " + std::to_string(40 + i)), std::string::npos) << r.out;
    EXPECT_EQ(slurp(path("cand_" + n + ".glb")).substr(0, 4), "glTF");
    ids.push_back(parse_ids(slurp(path("t_" + n + ".txt"))));
    EXPECT_EQ(ids.back().size(), 16u);
  }
  EXPECT_FALSE(std::filesystem::exists(glb)) << "no unnumbered file with --variations";
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_NE(ids[1], ids[2]);
  const auto lone = run_tessera(generate_args(path("lone.glb")) + " --seed 42 --tokens-out " +
                                shell_quote(path("lone.txt")));
  ASSERT_EQ(lone.exit_code, 0) << lone.err;
  EXPECT_EQ(parse_ids(slurp(path("lone.txt"))), ids[1]);
  EXPECT_EQ(slurp(path("lone.glb")), slurp(path("cand_2.glb")));
  // Without --seed: a random seed, printed, that remakes variation 1.
  const auto random = run_tessera(generate_args(path("r.obj")) + " --variations 2 --tokens-out " +
                                  shell_quote(path("r.txt")));
  ASSERT_EQ(random.exit_code, 0) << random.err;
  const size_t at = random.err.find("seeds ");
  ASSERT_NE(at, std::string::npos) << random.err;
  const std::string seed = random.err.substr(at + 6, random.err.find("..", at) - at - 6);
  const auto again = run_tessera(generate_args(path("again.obj")) + " --seed " + seed +
                                 " --tokens-out " + shell_quote(path("again.txt")));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(slurp(path("again.txt")), slurp(path("r_1.txt")));
  // Out of range: a clear error before anything is loaded or written.
  for (const char* bad : {"0", "9", "-2"}) {
    const auto e = run_tessera(generate_args(path("bad.obj")) + " --variations " + bad);
    EXPECT_NE(e.exit_code, 0) << bad;
    EXPECT_NE(e.err.find("--variations"), std::string::npos) << e.err;
    EXPECT_FALSE(std::filesystem::exists(path("bad_1.obj")));
  }
}

TEST_F(GenerateCliTest, MissingModelDirectoriesAreNamed) {
  auto r = run_tessera("generate --model /nonexistent/model --prompt x -o " +
                       shell_quote(path("a.obj")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("tessera generate: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/model"), std::string::npos) << r.err;
  // No --model and no embedded model: say so and suggest --model.
  std::filesystem::create_directories(dir_ / "assets");
  r = run_tessera("generate --prompt x -o " + shell_quote(path("a.obj")),
                  "TESSERA_ASSETS=" + shell_quote(path("assets")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tessera-tiny"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;
  r = run_tessera("decode --tokens " + shell_quote(write("t.txt", "1 2 3\n")) + " -o " +
                      shell_quote(path("a.obj")),
                  "TESSERA_ASSETS=" + shell_quote(path("assets")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("a.obj")));
}

TEST_F(GenerateCliTest, BadOutputPathsFailClearly) {
  auto r = run_tessera(generate_args(path("out.ply")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown extension '.ply'"), std::string::npos) << r.err;
  r = run_tessera(generate_args(path("no-such-dir/out.obj")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  r = run_tessera(generate_args(path("out.obj")) + " --tokens-out " +
                  shell_quote(path("missing/t.txt")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--tokens-out"), std::string::npos) << r.err;
  // A directory that exists but cannot be written (procfs refuses new files, even for root): the
  // error comes at the end and names the path.
  r = run_tessera(generate_args("/proc/tessera-out.obj"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("tessera generate: "), r.err.rfind("tessera generate: ")) << r.err;
  EXPECT_NE(r.err.find("/proc/tessera-out.obj"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("out.obj")));
}

TEST_F(GenerateCliTest, BadOptionsFailBeforeGenerating) {
  auto r = run_tessera(generate_args(path("out.obj"), 100));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("resolution 100"), std::string::npos) << r.err;
  // The sampling settings: check_sampling's message, the same words as a JSON job's (one per bad
  // field), before the model is loaded.
  r = run_tessera(generate_args(path("out.obj")) + " --top-p 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tessera generate: top_p: 0 is outside (0, 1]\n"), std::string::npos)
      << r.err;
  r = run_tessera(generate_args(path("out.obj")) + " --top-p 1.5 --top-k -2 --guidance -1");
  EXPECT_EQ(r.exit_code, 1);
  const auto job = runtime::parse_job_request(
      nlohmann::json{{"prompt", "x"}, {"top_p", 1.5}, {"top_k", -2}, {"guidance", -1}});
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().message(),
            "top_k: -2 is outside [0, inf); top_p: 1.5 is outside (0, 1]; guidance: -1 is outside "
            "[0, inf)");
  EXPECT_NE(r.err.find("tessera generate: " + job.status().message() + "\n"), std::string::npos)
      << r.err;
  r = run_tessera(generate_args(path("out.obj")) + " --temperature 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tessera generate: temperature: 0 is outside (0, inf)"), std::string::npos)
      << r.err;
  r = run_tessera(generate_args(path("out.obj")) + " --tokens 99");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--tokens 99"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("out.obj")));
}

TEST_F(GenerateCliTest, BadTokensFilesAreNamed) {
  const std::string out = path("out.obj");
  auto decode = [&](const std::string& tokens_file) {
    return run_tessera("decode" + model_arg() + " --tokens " + shell_quote(tokens_file) +
                       " --resolution 9 -o " + shell_quote(out));
  };
  auto r = decode(write("range.txt", "1 2 64 3\n"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("tessera decode: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("range.txt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("id 64 at position 2"), std::string::npos) << r.err;
  r = decode(write("negative.txt", "-1\n"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("id -1"), std::string::npos) << r.err;
  r = decode(write("empty.txt", ""));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("holds no token ids"), std::string::npos) << r.err;
  r = decode(write("blank.txt", " \n\n"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("holds no token ids"), std::string::npos) << r.err;
  r = decode(write("garbage.txt", "1 two 3\n"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("entry 2 'two'"), std::string::npos) << r.err;
  r = decode(write("huge.txt", "99999999999999999999\n"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("entry 1"), std::string::npos) << r.err;
  std::string many;
  for (int i = 0; i < 17; ++i) many += "1 ";
  r = decode(write("many.txt", many));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("17 ids"), std::string::npos) << r.err;
  r = decode(path("does-not-exist.txt"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does-not-exist.txt"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));

  // A prefix is fine: the rest is filled with the fill token (code 0 here). Which prefix has a
  // surface depends on the random weights: the first half of the greedy tokens has one, the
  // three codes 5 6 7 do not (the whole cube is inside).
  r = decode(write("prefix.txt", "11 57 11 6 5 48 15 57\n"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("filled to 16 with code 0"), std::string::npos) << r.err;
  r = decode(write("nosurface.txt", "5 6 7\n"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no surface"), std::string::npos) << r.err;
}

TEST_F(GenerateCliTest, BenchGenerateTimesWholeJobsAndWritesItsSection) {
  const std::string results = write("RESULTS.md", "# Benchmark results\n\n## Other\n\nkept\n");
  const auto r =
      run_bench("generate" + model_arg() + " --prompt " + shell_quote(testing::kParityPrompt) +
                " --repeat 2 --resolution 17 --write-results --results " + shell_quote(results));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("## Generation end to end (CPU)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resolution 17"), std::string::npos) << r.out;
  std::ifstream in(results);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("## Generation end to end (CPU)"), std::string::npos) << text;
  EXPECT_NE(text.find("kept"), std::string::npos) << text;  // other sections untouched

  const auto bad = run_bench("generate --model /nonexistent/tessera-model --repeat 1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("/nonexistent/tessera-model"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace tessera
