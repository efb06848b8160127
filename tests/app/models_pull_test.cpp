// tessera models pull / verify against a Hub stand-in on the loopback interface
// (tests/support/hub_server.py, started here, stopped after): the parity fixtures served as
// Roblox/cube3d-v0.5 (safetensors through LFS redirects) and a gated CLIP. A pull, a generate by
// name online and with HF_HUB_OFFLINE=1, a pull killed part way and resumed (only the rest is
// sent), a connection dropped mid-file (resumed in the same call), a corrupted transfer (refused,
// nothing left), a gated repository without and with HF_TOKEN, a bad revision, no network.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"
#include "tests/support/fixture_model_dir.h"
#include "tests/support/hub_server.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::FixtureModelDir;
using testing::HubServer;
using testing::run_tessera;
using testing::shell_quote;

constexpr const char* kToken = "hf_test_token";

class ModelsPull : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("tessera-pull-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    const fs::path parity = fs::path(TESSERA_SOURCE_DIR) / "tests" / "fixtures" / "parity";
    const nlohmann::json spec = testing::parity_hub_spec(fixture_.path(), kToken);
    server_ = std::make_unique<HubServer>(root_, spec);
    ASSERT_GT(server_->port(), 0) << "the hub stand-in did not start";
    hub_ = root_ / "hub";
    env_ = "HF_ENDPOINT=" + server_->url() + " HF_HUB_CACHE=" + shell_quote(hub_.string()) +
           " XDG_CACHE_HOME=" + shell_quote((root_ / "xdg").string()) + " ";
    gpt_size_ = static_cast<int64_t>(fs::file_size(parity / "gpt_v05" / "shape_gpt.safetensors"));
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(root_);
  }
  std::string with_token() const { return env_ + "HF_TOKEN=" + kToken + " "; }
  int64_t incomplete_bytes() const {
    int64_t n = 0;
    std::error_code ec;
    const fs::path blobs = hub_ / "models--Roblox--cube3d-v0.5" / "blobs";
    if (!fs::exists(blobs, ec)) return 0;
    for (const auto& e : fs::directory_iterator(blobs)) {
      if (e.path().extension() == ".incomplete") n += static_cast<int64_t>(fs::file_size(e.path()));
    }
    return n;
  }

  FixtureModelDir fixture_{"models-pull"};
  fs::path root_, hub_;
  std::unique_ptr<HubServer> server_;
  std::string env_;
  int64_t gpt_size_ = 0;
};

TEST_F(ModelsPull, PullThenGenerateByNameOnlineAndOffline) {
  // CLIP is gated: without a token the pull says so and how to fix it.
  auto gated = run_tessera("models pull Roblox/cube3d-v0.5", env_);
  EXPECT_EQ(gated.exit_code, 1);
  EXPECT_NE(gated.err.find("gated"), std::string::npos) << gated.err;
  EXPECT_NE(gated.err.find("HF_TOKEN"), std::string::npos) << gated.err;

  // The token `huggingface-cli login` saves is used too (HF_HOME/token).
  fs::create_directories(root_ / "hf-home");
  std::ofstream(root_ / "hf-home" / "token") << kToken << "\n";
  auto pull = run_tessera("models pull Roblox/cube3d-v0.5",
                          env_ + "HF_HOME=" + shell_quote((root_ / "hf-home").string()) + " ");
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  EXPECT_NE(pull.out.find("openai/clip-vit-large-patch14"), std::string::npos) << pull.out;
  EXPECT_TRUE(fs::is_regular_file(hub_ / "models--Roblox--cube3d-v0.5" / "snapshots" /
                                  "1111111111111111111111111111111111111111" /
                                  "shape_gpt.safetensors"));
  EXPECT_TRUE(fs::is_symlink(hub_ / "models--Roblox--cube3d-v0.5" / "snapshots" /
                             "1111111111111111111111111111111111111111" / "shape_gpt.safetensors"));
  auto verify = run_tessera("models verify Roblox/cube3d-v0.5", env_);
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_NE(verify.out.find("ok   openai/clip-vit-large-patch14/vocab.json"), std::string::npos)
      << verify.out;

  // Pulling again fetches nothing.
  const int64_t before = server_->cdn_bytes();
  auto again = run_tessera("models pull Roblox/cube3d-v0.5", with_token());
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(server_->cdn_bytes(), before);

  const std::string out = (root_ / "chair.obj").string();
  auto gen =
      run_tessera("generate --model Roblox/cube3d-v0.5 -p " + shell_quote(testing::kParityPrompt) +
                      " --resolution 9 -o " + shell_quote(out),
                  env_);
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  fs::remove(out);
  auto offline =
      run_tessera("generate --model Roblox/cube3d-v0.5 -p " + shell_quote(testing::kParityPrompt) +
                      " --resolution 9 -o " + shell_quote(out),
                  env_ + "HF_HUB_OFFLINE=1 HF_ENDPOINT=http://127.0.0.1:1 ");
  ASSERT_EQ(offline.exit_code, 0) << offline.err;
  EXPECT_TRUE(fs::exists(out));

  // A blob changed on disk: verify names it.
  for (const auto& e :
       fs::directory_iterator(hub_ / "models--openai--clip-vit-large-patch14" / "blobs")) {
    if (e.path().filename().string().size() == 40) {  // a small (Git) file
      std::ofstream(e.path(), std::ios::app) << "x";
      break;
    }
  }
  auto bad = run_tessera("models verify Roblox/cube3d-v0.5", env_);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.out.find("BAD  openai/clip-vit-large-patch14/"), std::string::npos) << bad.out;
}

TEST_F(ModelsPull, AKilledPullResumesAndFetchesOnlyTheRest) {
  server_->fault(R"({"trickle_ms": 40})");
  // Killed part way (SIGKILL: no chance to clean up), once some bytes are on disk.
  const std::string cmd = "exec env " + with_token() + shell_quote(TESSERA_CLI_PATH) +
                          " models pull Roblox/cube3d-v0.5 > /dev/null 2>&1";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  for (int i = 0; i < 600 && incomplete_bytes() < 50'000; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  const int64_t partial = incomplete_bytes();
  ASSERT_GT(partial, 0) << "nothing was written before the kill";
  ASSERT_LT(partial, gpt_size_ + 1'700'000);
  server_->fault("{}");
  const int64_t before = server_->cdn_bytes();
  auto pull = run_tessera("models pull Roblox/cube3d-v0.5", with_token());
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  const int64_t sent = server_->cdn_bytes() - before;
  const int64_t all =
      static_cast<int64_t>(fs::file_size(fs::path(TESSERA_SOURCE_DIR) /
                                         "tests/fixtures/parity/gpt_v05/shape_gpt.safetensors") +
                           fs::file_size(fs::path(TESSERA_SOURCE_DIR) /
                                         "tests/fixtures/parity/shape_tokenizer.safetensors") +
                           fs::file_size(fs::path(TESSERA_SOURCE_DIR) /
                                         "tests/fixtures/parity/text_encoder/model.safetensors"));
  // Only the rest is sent (the server may count a chunk or two it wrote to the killed client's
  // socket after the kill; at 16 kB a chunk, 64 kB of slack).
  EXPECT_GE(sent + partial, all) << "sent " << sent << " after " << partial << " of " << all;
  EXPECT_LE(sent + partial, all + 65'536)
      << "sent " << sent << " after " << partial << " of " << all;
  EXPECT_EQ(incomplete_bytes(), 0);
  EXPECT_EQ(run_tessera("models verify Roblox/cube3d-v0.5", env_).exit_code, 0);
}

TEST_F(ModelsPull, DroppedCorruptedAndMissingAreHandled) {
  // A connection dropped mid-file: resumed within the same pull, nothing sent twice.
  server_->fault(R"({"drop_after": 100000})");
  auto dropped = run_tessera("models pull Roblox/cube3d-v0.5", with_token());
  ASSERT_EQ(dropped.exit_code, 0) << dropped.err;
  EXPECT_EQ(run_tessera("models verify Roblox/cube3d-v0.5", env_).exit_code, 0);
  EXPECT_EQ(run_tessera("models rm Roblox/cube3d-v0.5", env_).exit_code, 0);

  // Corrupted bytes: refused by the hash, nothing left in place, the snapshot not linked.
  server_->fault(R"({"corrupt": true})");
  auto corrupt = run_tessera("models pull Roblox/cube3d-v0.5", with_token());
  EXPECT_EQ(corrupt.exit_code, 1);
  EXPECT_NE(corrupt.err.find("hash"), std::string::npos) << corrupt.err;
  EXPECT_FALSE(fs::exists(hub_ / "models--Roblox--cube3d-v0.5" / "snapshots" /
                          "1111111111111111111111111111111111111111" / "shape_gpt.safetensors"));
  EXPECT_EQ(incomplete_bytes(), 0);
  server_->fault("{}");

  // A Hub that states more than the disk holds: refused before any byte, naming both sizes.
  const int64_t sent_before = server_->cdn_bytes();
  server_->fault(R"({"claim_size": 1000000000000000})");
  auto full = run_tessera("models pull Roblox/cube3d-v0.5", with_token());
  EXPECT_EQ(full.exit_code, 1);
  EXPECT_NE(full.err.find("not enough disk space"), std::string::npos) << full.err;
  EXPECT_EQ(server_->cdn_bytes(), sent_before);
  // One that states less than it sends: the surplus is refused, nothing kept.
  server_->fault(R"({"claim_size": 1000})");
  auto lies = run_tessera("models pull Roblox/cube3d-v0.5", with_token());
  EXPECT_EQ(lies.exit_code, 1);
  EXPECT_NE(lies.err.find("more than the 1000"), std::string::npos) << lies.err;
  EXPECT_EQ(incomplete_bytes(), 0);
  server_->fault("{}");

  // A revision the Hub does not have; offline with nothing cached; no server at all.
  auto revision = run_tessera("models pull Roblox/cube3d-v0.5 --revision v9", with_token());
  EXPECT_EQ(revision.exit_code, 1);
  EXPECT_NE(revision.err.find("no revision v9"), std::string::npos) << revision.err;
  auto offline = run_tessera("models pull Roblox/cube3d-v0.5", env_ + "HF_HUB_OFFLINE=1 ");
  EXPECT_EQ(offline.exit_code, 1);
  EXPECT_NE(offline.err.find("HF_HUB_OFFLINE"), std::string::npos) << offline.err;
  auto down =
      run_tessera("models pull Roblox/cube3d-v0.5", env_ + "HF_ENDPOINT=http://127.0.0.1:1 ");
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_NE(down.err.find("cannot reach"), std::string::npos) << down.err;
  auto unknown = run_tessera("models pull Foo/bar", env_);
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("Roblox/cube3d-v0.5"), std::string::npos) << unknown.err;
}

TEST_F(ModelsPull, TwoPullsAtOnceFetchEachFileOnce) {
  server_->fault(R"({"trickle_ms": 5})");
  const std::string cmd = "exec env " + with_token() + shell_quote(TESSERA_CLI_PATH) +
                          " models pull Roblox/cube3d-v0.5 > /dev/null 2>&1";
  pid_t pids[2];
  for (pid_t& pid : pids) {
    pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  const fs::path parity = fs::path(TESSERA_SOURCE_DIR) / "tests/fixtures/parity";
  const int64_t all =
      static_cast<int64_t>(fs::file_size(parity / "gpt_v05/shape_gpt.safetensors") +
                           fs::file_size(parity / "shape_tokenizer.safetensors") +
                           fs::file_size(parity / "text_encoder/model.safetensors"));
  EXPECT_EQ(server_->cdn_bytes(), all);  // one copy: the second waited for the first's blobs
  EXPECT_EQ(run_tessera("models verify Roblox/cube3d-v0.5", env_).exit_code, 0);
}

}  // namespace
}  // namespace tessera
