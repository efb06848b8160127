// Models by name from a Hugging Face cache laid out as the Hub's tools write it (refs, snapshots of
// links, blobs): the parity fixtures posing as Roblox/cube3d-v0.5 and its CLIP. `--model NAME`
// works in the CLI and the Session, a damaged cache is reported naming what is missing, `tessera
// models list` says what is where, `rm` removes it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/runtime/models.h"
#include "engine/runtime/session.h"
#include "tests/support/cli_runner.h"
#include "tests/support/fixture_model_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::FixtureModelDir;
using testing::run_tessera;
using testing::shell_quote;

constexpr const char* kShapeCommit = "0123456789abcdef0123456789abcdef01234567";
constexpr const char* kClipCommit = "89abcdef0123456789abcdef0123456789abcdef";

class ModelsByName : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("tessera-models-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    hub_ = root_ / "hub";
    // Roblox/cube3d-v0.5: the fixture GPT and tokenizer as blobs, linked from the snapshot.
    add_repo("models--Roblox--cube3d-v0.5", kShapeCommit,
             {{"shape_gpt.safetensors", fixture_.path() + "/shape_gpt.safetensors"},
              {"shape_tokenizer.safetensors", fixture_.path() + "/shape_tokenizer.safetensors"}});
    add_repo("models--openai--clip-vit-large-patch14", kClipCommit,
             {{"model.safetensors", fixture_.path() + "/text_encoder/model.safetensors"},
              {"config.json", fixture_.path() + "/text_encoder/config.json"},
              {"vocab.json", fixture_.path() + "/vocab.json"},
              {"merges.txt", fixture_.path() + "/merges.txt"}});
    env_ = "HF_HUB_CACHE=" + shell_quote(hub_.string()) +
           " XDG_CACHE_HOME=" + shell_quote((root_ / "xdg").string()) + " ";
    setenv("HF_HUB_CACHE", hub_.c_str(), 1);
    setenv("XDG_CACHE_HOME", (root_ / "xdg").c_str(), 1);
  }
  void TearDown() override {
    unsetenv("HF_HUB_CACHE");
    unsetenv("XDG_CACHE_HOME");
    fs::remove_all(root_);
  }

  void add_repo(const std::string& folder, const std::string& commit,
                const std::vector<std::pair<std::string, std::string>>& files) {
    const fs::path repo = hub_ / folder;
    fs::create_directories(repo / "refs");
    fs::create_directories(repo / "blobs");
    fs::create_directories(repo / "snapshots" / commit);
    std::ofstream(repo / "refs" / "main") << commit;  // no newline, as the Hub writes it
    int n = 0;
    for (const auto& [path, source] : files) {
      const std::string blob = "blob" + std::to_string(n++) + folder.substr(0, 12);
      fs::copy_file(fs::canonical(source), repo / "blobs" / blob);
      fs::create_symlink(fs::path("..") / ".." / "blobs" / blob,
                         repo / "snapshots" / commit / path);
    }
  }

  FixtureModelDir fixture_{"models-by-name"};
  fs::path root_, hub_;
  std::string env_;
};

TEST_F(ModelsByName, ANameResolvesThroughTheCacheAndGeneratesLikeTheFolder) {
  auto cached = runtime::find_cached_model("Roblox/cube3d-v0.5");
  ASSERT_TRUE(cached.ok()) << cached.status().message();
  EXPECT_TRUE(cached->complete());
  EXPECT_EQ(cached->commit, kShapeCommit);
  EXPECT_GT(cached->bytes_on_disk, 0);
  auto view = runtime::resolve_model_path("Roblox/cube3d-v0.5", runtime::ModelKind::kShape);
  ASSERT_TRUE(view.ok()) << view.status().message();
  EXPECT_TRUE(fs::is_regular_file(fs::path(*view) / "shape_gpt.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(fs::path(*view) / "text_encoder" / "model.safetensors"));
  // Resolving again keeps the view; a folder path passes unchanged.
  EXPECT_EQ(runtime::resolve_model_path("Roblox/cube3d-v0.5", runtime::ModelKind::kShape).value(),
            *view);
  EXPECT_EQ(runtime::resolve_model_path(fixture_.path(), runtime::ModelKind::kShape).value(),
            fixture_.path());
  // What a front end shows for it: the name and the commit.
  EXPECT_EQ(runtime::describe_model_path(*view), "Roblox/cube3d-v0.5 @ 0123456");
  EXPECT_EQ(runtime::describe_model_path(cached->snapshot_dir), "Roblox/cube3d-v0.5 @ 0123456");
  EXPECT_EQ(runtime::describe_model_path("/x/tessera-tiny/"), "tessera-tiny");
  // A shape model is not an image model; an unknown ORG/NAME is refused naming the known ones.
  EXPECT_EQ(
      runtime::resolve_model_path("Roblox/cube3d-v0.5", runtime::ModelKind::kImage).status().code(),
      ErrorCode::kInvalidArgument);
  auto unknown = runtime::resolve_model_path("Roblox/cube9", runtime::ModelKind::kShape);
  EXPECT_EQ(unknown.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("Roblox/cube3d-v0.1"), std::string::npos);

  // The CLI: the same tokens from the name as from the folder.
  const fs::path a = root_ / "a.obj", b = root_ / "b.obj";
  auto by_name =
      run_tessera("generate --model Roblox/cube3d-v0.5 --prompt " +
                      shell_quote(testing::kParityPrompt) + " --resolution 9 --tokens-out " +
                      shell_quote((root_ / "a.txt").string()) + " -o " + shell_quote(a.string()),
                  env_);
  ASSERT_EQ(by_name.exit_code, 0) << by_name.err;
  auto by_folder =
      run_tessera("generate --model " + shell_quote(fixture_.path()) + " --prompt " +
                      shell_quote(testing::kParityPrompt) + " --resolution 9 --tokens-out " +
                      shell_quote((root_ / "b.txt").string()) + " -o " + shell_quote(b.string()),
                  env_);
  ASSERT_EQ(by_folder.exit_code, 0) << by_folder.err;
  EXPECT_EQ(testing::slurp((root_ / "a.txt").string()), testing::slurp((root_ / "b.txt").string()));
  EXPECT_FALSE(testing::slurp((root_ / "a.txt").string()).empty());

  auto list = run_tessera("models list", env_);
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find(hub_.string()), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("cached: main -> 0123456789ab"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("not cached"), std::string::npos) << list.out;  // v0.1, SD 1.5
}

TEST_F(ModelsByName, ADamagedCacheIsReportedNamingWhatIsMissing) {
  // A blob deleted by hand: the link dangles, the file counts as missing.
  const fs::path repo = hub_ / "models--openai--clip-vit-large-patch14";
  for (const auto& e : fs::directory_iterator(repo / "blobs")) {
    if (fs::file_size(e.path()) > 10000) fs::remove(e.path());  // model.safetensors
  }
  auto r = run_tessera(
      "generate --model Roblox/cube3d-v0.5 -p cube -o " + shell_quote((root_ / "x.obj").string()),
      env_);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("openai/clip-vit-large-patch14"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tessera models pull Roblox/cube3d-v0.5"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(root_ / "x.obj"));
  auto list = run_tessera("models list", env_);
  EXPECT_NE(list.out.find("partial: main -> 89abcdef0123 lacks model.safetensors"),
            std::string::npos)
      << list.out;

  // rm: gone from the cache; a second rm says it is not there; an unknown name is refused.
  auto rm = run_tessera("models rm Roblox/cube3d-v0.5", env_);
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_FALSE(fs::exists(hub_ / "models--Roblox--cube3d-v0.5"));
  EXPECT_EQ(run_tessera("models rm Roblox/cube3d-v0.5", env_).exit_code, 1);
  auto unknown = run_tessera("models rm Foo/bar", env_);
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("'Foo/bar' is not a model Tessera knows"), std::string::npos)
      << unknown.err;
  auto gone = run_tessera(
      "generate --model Roblox/cube3d-v0.5 -p cube -o " + shell_quote((root_ / "x.obj").string()),
      env_);
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_NE(gone.err.find("is not in the Hugging Face cache"), std::string::npos) << gone.err;
}

TEST(ModelTable, EveryModelNamesItsFilesAndShapeModelsTheirTextEncoder) {
  for (const runtime::KnownModel& m : runtime::known_models()) {
    EXPECT_TRUE(runtime::looks_like_model_name(m.name)) << m.name;
    EXPECT_FALSE(m.files.empty()) << m.name;
    EXPECT_GT(m.bytes(), 1'000'000) << m.name;
    if (m.kind == runtime::ModelKind::kShape) {
      const runtime::KnownModel* text = runtime::find_known_model(m.text_encoder);
      ASSERT_NE(text, nullptr) << m.name;
      EXPECT_EQ(text->kind, runtime::ModelKind::kTextEncoder);
    }
  }
  EXPECT_FALSE(runtime::looks_like_model_name("./a/b"));
  EXPECT_FALSE(runtime::looks_like_model_name("/models/x"));
  EXPECT_FALSE(runtime::looks_like_model_name("a/b/c"));
  EXPECT_FALSE(runtime::looks_like_model_name("tessera-tiny"));
}

}  // namespace
}  // namespace tessera
