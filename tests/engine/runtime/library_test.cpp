// The library (engine/runtime/library.h): results kept with their files and settings, searched,
// renamed, trashed and restored, a crash between files and row cleaned up, two writers at once,
// an unwritable folder refused with a message; `tessera generate --library` and `tessera library`
// over the same catalogue, the export byte-identical to what generate wrote.
#include "engine/runtime/library.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/status.h"
#include "engine/mesh/mesh.h"
#include "tests/support/cli_runner.h"
#include "tests/support/file_size_limit.h"

namespace tessera::runtime {
namespace {

namespace fs = std::filesystem;

mesh::Mesh tetrahedron() {
  mesh::Mesh m;
  m.positions = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
  m.triangles = {0, 2, 1, 0, 1, 3, 0, 3, 2, 1, 2, 3};
  return m;
}

class LibraryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-library-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  NewResult result(const std::string& prompt, uint64_t seed) {
    NewResult r;
    r.prompt = prompt;
    r.model = "tessera-tiny";
    r.settings = {{"prompt", prompt}, {"sampling", {{"sample", true}, {"seed", seed}}}};
    r.seed = seed;
    r.mesh = &mesh_;
    r.tokens = {1, 2, 3};
    return r;
  }
  fs::path dir_;
  mesh::Mesh mesh_ = tetrahedron();
};

TEST_F(LibraryTest, KeepsSearchesTrashesAndRestores) {
  auto lib = Library::open(dir_.string());
  ASSERT_TRUE(lib.ok()) << lib.status().message();
  auto a = (*lib)->add(result("a chair", 1));
  auto b = (*lib)->add(result("a red chair", 2));
  auto c = (*lib)->add(result("a mug", 3));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto all = (*lib)->list();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ(all->front().id, *c);  // newest first
  auto chairs = (*lib)->list({"CHAIR", "", false, 0});
  ASSERT_TRUE(chairs.ok());
  EXPECT_EQ(chairs->size(), 2u);
  auto e = (*lib)->get(*a);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->prompt, "a chair");
  EXPECT_EQ(e->settings["sampling"]["seed"], 1);
  EXPECT_EQ(e->triangles, 4);
  EXPECT_TRUE(fs::is_regular_file(e->mesh_file()));
  std::ifstream tokens(e->tokens_file());
  std::string line;
  std::getline(tokens, line);
  EXPECT_EQ(line, "1 2 3");

  ASSERT_TRUE((*lib)->rename(*a, "throne").ok());
  ASSERT_TRUE((*lib)->set_favourite(*a, true).ok());
  EXPECT_EQ((*lib)->list({"throne", "", false, 0})->size(), 1u);
  EXPECT_TRUE((*lib)->get(*a)->favourite);
  ASSERT_TRUE((*lib)->trash(*b).ok());
  EXPECT_EQ((*lib)->list()->size(), 2u);
  EXPECT_EQ((*lib)->list({"", "", true, 0})->size(), 1u);
  ASSERT_TRUE((*lib)->restore(*b).ok());
  EXPECT_EQ((*lib)->list()->size(), 3u);
  ASSERT_TRUE((*lib)->trash(*c).ok());
  const std::string c_folder = (*lib)->get(*c)->folder;
  EXPECT_EQ((*lib)->empty_trash().value(), 1);
  EXPECT_FALSE(fs::exists(c_folder));
  EXPECT_EQ((*lib)->get(*c).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ((*lib)->trash(999).code(), ErrorCode::kNotFound);
  EXPECT_TRUE((*lib)->check().ok()) << (*lib)->check().message();

  // Reopened: the same results.
  lib->reset();
  auto again = Library::open(dir_.string());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->list()->size(), 2u);
  EXPECT_EQ((*again)->get(*a)->name, "throne");
}

TEST_F(LibraryTest, AFolderWithoutItsRowIsRemovedAndAMissingFileIsFound) {
  auto lib = Library::open(dir_.string());
  ASSERT_TRUE(lib.ok());
  ASSERT_TRUE((*lib)->add(result("a cube", 1)).ok());
  // A crash after the rename, before the row: a folder nobody knows.
  fs::create_directories(dir_ / "items" / "0123456789abcdef0123456789abcdef");
  fs::last_write_time(dir_ / "items" / "0123456789abcdef0123456789abcdef",
                      fs::file_time_type::clock::now() - std::chrono::minutes(5));
  // One just renamed by another process, its row about to come: left alone.
  fs::create_directories(dir_ / "items" / "11111111111111111111111111111111");
  // A process still writing (this one): left alone; one that died while writing: removed.
  const std::string writing = "fedcba.tmp-" + std::to_string(::getpid());
  fs::create_directories(dir_ / "items" / writing);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string dead = "abcdef.tmp-" + std::to_string(child);
  fs::create_directories(dir_ / "items" / dead);
  lib->reset();
  lib = Library::open(dir_.string());
  ASSERT_TRUE(lib.ok());
  EXPECT_FALSE(fs::exists(dir_ / "items" / "0123456789abcdef0123456789abcdef"));
  EXPECT_TRUE(fs::exists(dir_ / "items" / writing));
  EXPECT_FALSE(fs::exists(dir_ / "items" / dead));
  EXPECT_TRUE(fs::exists(dir_ / "items" / "11111111111111111111111111111111"));
  EXPECT_TRUE((*lib)->check().ok());
  fs::remove((*lib)->list()->front().mesh_file());
  const Status broken = (*lib)->check();
  EXPECT_EQ(broken.code(), ErrorCode::kCorruptData);
  EXPECT_NE(broken.message().find("mesh.glb"), std::string::npos) << broken.message();
}

TEST_F(LibraryTest, TwoWritersAtOnceLoseNoRow) {
  ASSERT_TRUE(Library::open(dir_.string()).ok());
  auto writer = [&](int base) {
    auto lib = Library::open(dir_.string());
    ASSERT_TRUE(lib.ok());
    for (int i = 0; i < 20; ++i) {
      const std::string prompt = std::string("p").append(std::to_string(base + i));
      auto id = (*lib)->add(result(prompt, static_cast<uint64_t>(i)));
      ASSERT_TRUE(id.ok()) << id.status().message();
    }
  };
  std::thread t1(writer, 0), t2(writer, 100);
  t1.join();
  t2.join();
  auto lib = Library::open(dir_.string());
  EXPECT_EQ((*lib)->list()->size(), 40u);
  EXPECT_TRUE((*lib)->check().ok());
}

TEST_F(LibraryTest, AnUnwritableFolderIsRefusedNamingIt) {
  std::ofstream(dir_.string()) << "a file where the folder should be";
  auto lib = Library::open((dir_ / "library").string());
  ASSERT_FALSE(lib.ok());
  EXPECT_NE(lib.status().message().find(dir_.string()), std::string::npos)
      << lib.status().message();
  NewResult empty;
  fs::remove(dir_);
  auto fresh = Library::open(dir_.string());
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ((*fresh)->add(empty).status().code(), ErrorCode::kInvalidArgument);
}

TEST_F(LibraryTest, AFullDiskIsAClearErrorAndNothingHalfWrittenStays) {
  auto lib = Library::open(dir_.string());
  ASSERT_TRUE(lib.ok());
  ASSERT_TRUE((*lib)->add(result("before", 1)).ok());
  NewResult big = result("too big", 2);
  big.thumbnail_png.assign(64 * 1024, 7);
  Expected<int64_t> added = int64_t{0};
  {
    testing::FileSizeLimit full_disk(16 * 1024);  // a full disk
    ASSERT_TRUE(full_disk.ok());
    added = (*lib)->add(big);
  }
  ASSERT_FALSE(added.ok());
  EXPECT_NE(added.status().message().find(dir_.string()), std::string::npos)
      << added.status().message();
  EXPECT_NE(added.status().message().find("thumbnail.png"), std::string::npos)
      << added.status().message();
  // No row, no folder left behind, and the library goes on working.
  EXPECT_EQ((*lib)->list()->size(), 1u);
  int folders = 0;
  for ([[maybe_unused]] const auto& f : fs::directory_iterator(dir_ / "items")) ++folders;
  EXPECT_EQ(folders, 1);
  EXPECT_TRUE((*lib)->add(result("after", 3)).ok());
  EXPECT_TRUE((*lib)->check().ok());
}

TEST_F(LibraryTest, TimingsAreKeptBesideTheMesh) {
  auto lib = Library::open(dir_.string());
  NewResult r = result("a cube", 4);
  r.timings = {{"token_ms", {1.5, 0.5}}, {"total_ms", 40.0}};
  auto id = (*lib)->add(r);
  ASSERT_TRUE(id.ok());
  auto entry = (*lib)->get(*id);
  std::ifstream in(entry->timings_file());
  const auto timings = nlohmann::json::parse(in, nullptr, false);
  EXPECT_EQ(timings, r.timings);
  auto bare = (*lib)->add(result("a ball", 5));
  EXPECT_FALSE(fs::exists((*lib)->get(*bare)->timings_file()));
}

TEST_F(LibraryTest, JobsOfAProcessThatDiedAreTakenOnceAndRunningOnesStay) {
  auto lib = Library::open(dir_.string());
  ASSERT_TRUE(lib.ok());
  const nlohmann::json settings = {{"prompt", "a chair"}, {"sampling", {{"seed", 7}}}};
  // This process's job is running: not interrupted.
  auto mine = (*lib)->begin_job("a lamp", settings, 1);
  ASSERT_TRUE(mine.ok());
  // A child process begins a job and dies without ending it (as a kill -9 would leave it).
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto theirs = Library::open(dir_.string());
    const bool ok = theirs.ok() && (*theirs)->begin_job("a chair", settings, 4).ok();
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto other = Library::open(dir_.string());  // the next start
  auto taken = (*other)->take_interrupted();
  ASSERT_TRUE(taken.ok()) << taken.status().message();
  ASSERT_EQ(taken->size(), 1u);
  EXPECT_EQ(taken->front().prompt, "a chair");
  EXPECT_EQ(taken->front().variations, 4);
  EXPECT_EQ(taken->front().settings, settings);
  EXPECT_GT(taken->front().started_ms, 0);
  EXPECT_TRUE((*other)->take_interrupted()->empty());  // said once
  ASSERT_TRUE((*lib)->end_job(*mine).ok());
  EXPECT_TRUE((*other)->take_interrupted()->empty());
}

TEST_F(LibraryTest, DataVersionChangesWhenAnotherConnectionWrites) {
  auto watcher = Library::open(dir_.string());
  auto writer = Library::open(dir_.string());
  const int64_t before = *(*watcher)->data_version();
  EXPECT_EQ(*(*watcher)->data_version(), before);
  ASSERT_TRUE((*writer)->add(result("a cube", 1)).ok());
  EXPECT_NE(*(*watcher)->data_version(), before);
}

TEST_F(LibraryTest, GenerateKeepsResultsAndTheCliListsShowsAndExportsThem) {
  const std::string env = "TESSERA_LIBRARY=" + testing::shell_quote(dir_.string()) + " ";
  const fs::path out = dir_.parent_path() / ("tessera-lib-out-" + std::to_string(::getpid()));
  fs::create_directories(out);
  auto gen = testing::run_tessera("generate -p 'a chair' --variations 2 --seed 5 --library -o " +
                                      testing::shell_quote((out / "chair.glb").string()),
                                  env);
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_NE(gen.out.find("kept in the library as"), std::string::npos) << gen.out;
  auto plain = testing::run_tessera(
      "generate -p 'a mug' -o " + testing::shell_quote((out / "mug.glb").string()), env);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;  // no --library: not kept

  auto list = testing::run_tessera("library list --json", env);
  ASSERT_EQ(list.exit_code, 0) << list.err;
  const auto entries = nlohmann::json::parse(list.out);
  ASSERT_EQ(entries.size(), 2u) << list.out;
  EXPECT_EQ(entries[0]["prompt"], "a chair");
  EXPECT_EQ(entries[0]["group"], entries[1]["group"]);  // the two variations of one job
  const int64_t id = entries[1]["id"];                  // the older: candidate 1, seed 5
  EXPECT_EQ(entries[1]["seed"], 5);

  auto show = testing::run_tessera("library show " + std::to_string(id), env);
  EXPECT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("a chair"), std::string::npos) << show.out;
  // Exported again: the same bytes as generate wrote for that candidate.
  const fs::path again = out / "again.glb";
  auto exp = testing::run_tessera(
      "library export " + std::to_string(id) + " -o " + testing::shell_quote(again.string()), env);
  ASSERT_EQ(exp.exit_code, 0) << exp.err;
  EXPECT_EQ(testing::slurp(again.string()), testing::slurp((out / "chair_1.glb").string()));

  EXPECT_EQ(testing::run_tessera("library rm " + std::to_string(id), env).exit_code, 0);
  EXPECT_NE(testing::run_tessera("library list", env).out.find("a chair"), std::string::npos);
  EXPECT_NE(testing::run_tessera("library list --trash", env).out.find("a chair"),
            std::string::npos);
  EXPECT_EQ(testing::run_tessera("library show 999", env).exit_code, 1);
  // batch --library keeps its results too, each item's variations as one group.
  std::ofstream(out / "prompts.txt") << "a cube\na ball\n";
  auto batch = testing::run_tessera(
      "batch " + testing::shell_quote((out / "prompts.txt").string()) + " --out " +
          testing::shell_quote((out / "b").string()) + " --library",
      env);
  ASSERT_EQ(batch.exit_code, 0) << batch.err;
  auto cubes = testing::run_tessera("library list --query cube --json", env);
  EXPECT_EQ(nlohmann::json::parse(cubes.out).size(), 1u) << cubes.out;
  auto path = testing::run_tessera("library path", env);
  EXPECT_EQ(path.out, dir_.string() + "\n");
  fs::remove_all(out);
}

}  // namespace
}  // namespace tessera::runtime
