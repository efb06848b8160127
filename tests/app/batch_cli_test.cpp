// tessera batch (issue 23): text and JSON-lines items with bad lines reported by line number and
// skipped, a manifest whose checksums match the files, resuming, shards that together make every
// item once (and --merge that checks it), and kill -9 at several moments followed by a rerun that
// completes with no duplicate, no half-written file and the same files as an uninterrupted run.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/png.h"
#include "core/sha256.h"
#include "tests/support/cli_runner.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string slurp(const fs::path& p) {
  return testing::slurp(p.string());
}

// The manifest's entries (one per file made); `failures` gets its failure lines ({"item", "line",
// "error"}: why a bad line made nothing).
std::vector<json> manifest_lines(const fs::path& path, std::vector<json>* failures = nullptr) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line);
    if (j.contains("error")) {
      if (failures != nullptr) failures->push_back(std::move(j));
    } else {
      out.push_back(std::move(j));
    }
  }
  return out;
}

class BatchCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           (std::string("tessera-batch-cli-") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path path(const std::string& name) const { return dir_ / name; }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(path(name)) << text;
    return path(name).string();
  }
  // Every entry's file exists with its checksum; every (item, candidate) once; no temporary files.
  void expect_consistent(const fs::path& out, const std::vector<json>& entries) {
    std::set<std::pair<int, int>> keys;
    for (const json& e : entries) {
      EXPECT_TRUE(keys.insert({e["item"].get<int>(), e["candidate"].get<int>()}).second)
          << "duplicate entry " << e.dump();
      const fs::path file = out / e["file"].get<std::string>();
      auto digest = sha256_file(file.string());
      ASSERT_TRUE(digest.ok()) << digest.status().to_string();
      EXPECT_EQ(*digest, e["sha256"].get<std::string>()) << file;
    }
    for (const auto& entry : fs::directory_iterator(out)) {
      EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos)
          << "leftover " << entry.path();
    }
  }
  fs::path dir_;
};

// The embedded tessera-tiny at a small lattice: ~0.1-0.2 s an item.
const std::string kSettings = " --resolution 17";

TEST_F(BatchCliTest, TextAndJsonItemsBadLinesManifestAndResume) {
  const std::string prompts =
      write("p.txt",
            "a cube\n"
            "\n"
            "# a comment\n"
            "{\"prompt\": \"a chair\", \"seed\": 5, \"variations\": 2}\n"
            "{\"prompt\": \"a mug\", \"colour\": \"red\"}\n"
            "{not json\n"
            "a torus  \r\n"
            "{\"prompt\": \"\"}\n"
            "{\"prompt\": \"a cone\", \"top_p\": 1.5}\n"
            "{\"prompt\": \"a ring\", \"name\": \"ring\", \"resolution\": 33}\n");
  const fs::path out = path("out");
  const auto r = run_tessera("batch " + shell_quote(prompts) + " --out " +
                             shell_quote(out.string()) + kSettings);
  EXPECT_EQ(r.exit_code, 1) << "bad lines make the exit status 1\n" << r.err;
  EXPECT_NE(r.err.find("p.txt:5: unknown key \"colour\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("p.txt:6: invalid JSON"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("p.txt:8: empty prompt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("p.txt:9: top_p: 1.5 is outside (0, 1]"), std::string::npos) << r.err;
  std::vector<json> failures;
  const std::vector<json> entries = manifest_lines(out / "manifest.jsonl", &failures);
  ASSERT_EQ(entries.size(), 5u);   // a cube, a chair x2, a torus, a ring
  ASSERT_EQ(failures.size(), 4u);  // lines 5, 6, 8 and 9, each saying why
  EXPECT_EQ(failures[0]["line"], 5);
  EXPECT_NE(failures[0]["error"].get<std::string>().find("unknown key"), std::string::npos);
  EXPECT_EQ(failures[3]["line"], 9);
  expect_consistent(out, entries);
  std::map<std::string, json> by_file;
  for (const json& e : entries) by_file[e["file"].get<std::string>()] = e;
  ASSERT_EQ(by_file.count("0000_a-cube.glb"), 1u);
  ASSERT_EQ(by_file.count("0001_a-chair_s5.glb"), 1u);
  ASSERT_EQ(by_file.count("0001_a-chair_s6.glb"), 1u);
  ASSERT_EQ(by_file.count("0004_a-torus.glb"), 1u);  // items counted with the bad lines
  ASSERT_EQ(by_file.count("ring.glb"), 1u);
  const json& chair = by_file["0001_a-chair_s6.glb"];
  EXPECT_EQ(chair["prompt"], "a chair");
  EXPECT_EQ(chair["seed"], 6);
  EXPECT_EQ(chair["candidate"], 1);
  EXPECT_EQ(chair["line"], 4);
  EXPECT_EQ(chair["settings"]["sample"], true);
  EXPECT_EQ(chair["settings"]["top_p"], 0.9);
  EXPECT_EQ(chair["model"]["name"], "tessera-tiny");
  EXPECT_EQ(chair["model"]["gpt_sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(by_file["ring.glb"]["resolution"], 33);
  EXPECT_EQ(by_file["0000_a-cube.glb"]["settings"]["sample"], false);
  // A variation is a lone generate with its seed (without the settings generate carries in its
  // files: the batch's are in its manifest).
  const auto lone = run_tessera("generate --prompt 'a chair' --seed 6 --no-metadata -o " +
                                shell_quote(path("lone.glb").string()) + kSettings);
  ASSERT_EQ(lone.exit_code, 0) << lone.err;
  EXPECT_TRUE(slurp(path("lone.glb")) == slurp(out / "0001_a-chair_s6.glb"));

  // Rerun: nothing to make. A deleted file and a torn manifest line are made good again.
  const auto again = run_tessera("batch " + shell_quote(prompts) + " --out " +
                                 shell_quote(out.string()) + kSettings);
  EXPECT_NE(again.out.find("nothing to do"), std::string::npos) << again.out << again.err;
  fs::remove(out / "0004_a-torus.glb");
  { std::ofstream(out / "manifest.jsonl", std::ios::app) << "{\"item\": 7, \"cand"; }
  const auto repair = run_tessera("batch " + shell_quote(prompts) + " --out " +
                                  shell_quote(out.string()) + kSettings);
  EXPECT_NE(repair.err.find("1 to make"), std::string::npos) << repair.err;
  const std::vector<json> repaired = manifest_lines(out / "manifest.jsonl");
  EXPECT_EQ(repaired.size(), 5u);
  expect_consistent(out, repaired);
}

// The command line's sampling settings are checked before anything runs, with the words a JSON
// line gets (check_sampling's); a line's own bad value fails that line alone.
// Image lines beside shape lines: a PNG with its settings per image line (its pictures as paths
// beside PROMPTS), bad image lines named by line, and a rerun that makes nothing again.
TEST_F(BatchCliTest, ImageLinesMakePngsAndResume) {
  {
    std::vector<uint8_t> rgb(48 * 48 * 3);
    for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 5) % 251);
    auto png = encode_png(rgb.data(), 48, 48, 3);
    ASSERT_TRUE(png.ok());
    std::ofstream(path("start.png"), std::ios::binary) << *png;
  }
  const std::string prompts =
      write("mixed.txt",
            "a cube\n"
            "{\"kind\": \"image\", \"prompt\": \"a red torus\", \"steps\": 3, \"seed\": 4}\n"
            "{\"kind\": \"image\", \"prompt\": \"a blue torus\", \"steps\": 4, \"init_image\": "
            "\"start.png\", \"strength\": 0.5, \"name\": \"from-picture\"}\n"
            "{\"kind\": \"image\", \"prompt\": \"x\", \"init_image\": \"missing.png\"}\n"
            "{\"kind\": \"image\", \"prompt\": \"x\", \"steps\": 0}\n");
  const fs::path out = path("out");
  auto r = run_tessera("batch " + shell_quote(prompts) + " --out " + shell_quote(out.string()) +
                       kSettings);
  EXPECT_EQ(r.exit_code, 1) << r.err;  // the two bad lines
  EXPECT_NE(r.err.find("mixed.txt:4: \"init_image\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("missing.png"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mixed.txt:5: \"steps\""), std::string::npos) << r.err;
  const std::vector<json> entries = manifest_lines(out / "manifest.jsonl");
  ASSERT_EQ(entries.size(), 3u);
  expect_consistent(out, entries);
  std::map<std::string, json> by_file;
  for (const json& e : entries) by_file[e["file"].get<std::string>()] = e;
  ASSERT_EQ(by_file.count("0001_a-red-torus.png"), 1u) << r.err;
  ASSERT_EQ(by_file.count("from-picture.png"), 1u);
  EXPECT_EQ(by_file["0001_a-red-torus.png"]["seed"], 4);
  EXPECT_EQ(by_file["0001_a-red-torus.png"]["kind"], "image");
  const json& picture = by_file["from-picture.png"];
  EXPECT_EQ(picture["settings"]["init_image"], "start.png") << picture.dump();
  EXPECT_EQ(picture["settings"]["strength"], 0.5);
  // The PNG carries its settings.
  const std::string png = slurp(out / "from-picture.png");
  auto text = read_png_text(png, "from-picture.png");
  ASSERT_TRUE(text.ok());
  bool found = false;
  for (const auto& [k, v] : *text) found |= k == "parameters" && v.find("a blue torus") == 0;
  EXPECT_TRUE(found);
  // A rerun keeps everything and makes nothing.
  r = run_tessera("batch " + shell_quote(prompts) + " --out " + shell_quote(out.string()) +
                  kSettings);
  EXPECT_NE(r.err.find("3 done already, 0 to make"), std::string::npos) << r.err;
  EXPECT_EQ(manifest_lines(out / "manifest.jsonl").size(), 3u);
}

TEST_F(BatchCliTest, SamplingSettingsOutOfRangeAreTheOneMessage) {
  const std::string prompts = write("p.txt", "a cube\n");
  const fs::path out = path("out");
  auto r = run_tessera("batch " + shell_quote(prompts) + " --out " + shell_quote(out.string()) +
                       kSettings + " --top-p 1.5 --temperature 0");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("tessera batch: temperature: 0 is outside (0, inf); top_p: 1.5 is outside "
                       "(0, 1]\n"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(out / "manifest.jsonl"));
  // A line's value over a valid command line: the line's message names the field.
  const std::string line = write("q.txt", "{\"prompt\": \"a cone\", \"top_k\": -1}\n");
  r = run_tessera("batch " + shell_quote(line) + " --out " + shell_quote(out.string()) + kSettings +
                  " --top-p 0.5");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("q.txt:1: top_k: -1 is outside [0, inf)"), std::string::npos) << r.err;
}

TEST_F(BatchCliTest, ShardsMakeEveryItemOnceAndMergeChecksIt) {
  std::string text;
  for (int i = 0; i < 7; ++i)
    text += "{\"prompt\": \"a box\", \"seed\": " + std::to_string(i) + "}\n";
  const std::string prompts = write("p.jsonl", text);
  const fs::path out = path("out");
  const std::string base =
      "batch " + shell_quote(prompts) + " --out " + shell_quote(out.string()) + kSettings;
  // Merging before every shard ran fails and names what is missing.
  const auto s0 = run_tessera(base + " --shard 0/3");
  ASSERT_EQ(s0.exit_code, 0) << s0.err;
  EXPECT_EQ(manifest_lines(out / "manifest-0-of-3.jsonl").size(), 3u);  // items 0, 3, 6
  const auto early = run_tessera(base + " --merge 3");
  EXPECT_EQ(early.exit_code, 1);
  EXPECT_NE(early.err.find("missing: item 1"), std::string::npos) << early.err;
  EXPECT_FALSE(fs::exists(out / "manifest.jsonl"));
  for (const char* shard : {"1/3", "2/3"}) {
    const auto s = run_tessera(base + " --shard " + shard);
    ASSERT_EQ(s.exit_code, 0) << s.err;
  }
  const auto merged = run_tessera(base + " --merge 3");
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  const std::vector<json> all = manifest_lines(out / "manifest.jsonl");
  ASSERT_EQ(all.size(), 7u);
  expect_consistent(out, all);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(all[static_cast<size_t>(i)]["item"], i);
  // Bad shards.
  for (const char* bad : {"3/3", "1", "a/b", "-1/2", "0/0"}) {
    const auto b = run_tessera(base + " --shard " + bad);
    EXPECT_NE(b.exit_code, 0) << bad;
    EXPECT_NE(b.err.find("--shard"), std::string::npos) << b.err;
  }
}

// Starts `tessera ARGS` in the background; returns its pid.
pid_t spawn(const std::string& args, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string cmd = "exec " + shell_quote(TESSERA_CLI_PATH) + " " + args + " >" +
                            shell_quote(log.string()) + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

TEST_F(BatchCliTest, KillNineAtAnyMomentThenRerunCompletes) {
  std::string text;
  for (int i = 0; i < 10; ++i) {
    text +=
        "{\"prompt\": \"a cylinder\", \"seed\": " + std::to_string(i) + ", \"variations\": 2}\n";
  }
  const std::string prompts = write("p.jsonl", text);
  const std::string settings = " --resolution 33";
  // The uninterrupted run: the files every interrupted one must end with.
  const fs::path clean = path("clean");
  const auto whole = run_tessera("batch " + shell_quote(prompts) + " --out " +
                                 shell_quote(clean.string()) + settings);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const std::vector<json> expected = manifest_lines(clean / "manifest.jsonl");
  ASSERT_EQ(expected.size(), 20u);

  const fs::path out = path("out");
  const std::string args =
      "batch " + shell_quote(prompts) + " --out " + shell_quote(out.string()) + settings;
  // Kill at several moments of the run (some inside a write, by chance), each time resuming.
  int kills = 0;
  for (int delay_ms : {150, 400, 250, 600, 350}) {
    const pid_t pid = spawn(args, path("log.txt"));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ++kills;
    }
  }
  EXPECT_GE(kills, 2) << "the run finished before most kills: the test would prove little";
  const auto finish = run_tessera(args);
  ASSERT_EQ(finish.exit_code, 0) << finish.err;
  const std::vector<json> got = manifest_lines(out / "manifest.jsonl");
  ASSERT_EQ(got.size(), 20u);
  expect_consistent(out, got);
  for (const json& e : expected) {
    const std::string file = e["file"].get<std::string>();
    EXPECT_EQ(slurp(out / file), slurp(clean / file)) << file;
  }
}

}  // namespace
}  // namespace tessera::testing
