#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/trace.h"

namespace tessera {
namespace {

Expected<int> half_of(int v) {
  if (v % 2) return invalid_argument("value " + std::to_string(v) + " is odd");
  return v / 2;
}

Status quarter_of(int v, int* out) {
  TESSERA_ASSIGN_OR_RETURN(int h, half_of(v));
  TESSERA_ASSIGN_OR_RETURN(int q, half_of(h));
  *out = q;
  return {};
}

TEST(Status, PropagatesAndNamesTheProblem) {
  int q = 0;
  EXPECT_TRUE(quarter_of(8, &q).ok());
  EXPECT_EQ(q, 2);
  const Status st = quarter_of(6, &q);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "value 3 is odd");
  EXPECT_EQ(st.with_context("model.safetensors").to_string(),
            "invalid argument: model.safetensors: value 3 is odd");
}

TEST(Trace, StatsAndPercentiles) {
  Trace trace;
  trace.keep_samples("token");
  for (int i = 1; i <= 100; ++i) trace.add("token", static_cast<double>(i));
  trace.add("stage", 5.0);
  const TraceStats* t = trace.find("token");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->count, 100);
  EXPECT_DOUBLE_EQ(t->mean_ms(), 50.5);
  EXPECT_DOUBLE_EQ(t->min_ms, 1.0);
  EXPECT_DOUBLE_EQ(t->max_ms, 100.0);
  EXPECT_DOUBLE_EQ(t->percentile_ms(50), 50.0);
  EXPECT_DOUBLE_EQ(t->percentile_ms(99), 99.0);
  EXPECT_TRUE(trace.find("stage")->samples_ms.empty());
  EXPECT_EQ(trace.find("missing"), nullptr);
  { ScopedTimer timer(&trace, "scope"); }
  EXPECT_EQ(trace.find("scope")->count, 1);
  EXPECT_NE(trace.summary().find("token"), std::string::npos);
}

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() /
        ("tessera-file-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(FileTest, MissingFileAndDirectoryAreClearErrors) {
  auto missing = MappedFile::open((dir_ / "nope.bin").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.bin"), std::string::npos);
  auto dir = MappedFile::open(dir_.string());
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos);
  EXPECT_FALSE(read_file(dir_.string()).ok());
}

TEST_F(FileTest, AtomicWriteThenMapAndRead) {
  const std::string path = (dir_ / "data.bin").string();
  const std::string payload = "tessera\0bytes";
  ASSERT_TRUE(write_file_atomic(path, payload.data(), payload.size()).ok());
  auto mapped = MappedFile::open(path);
  ASSERT_TRUE(mapped.ok());
  ASSERT_EQ(mapped->size(), payload.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(mapped->data()), mapped->size()), payload);
  auto text = read_file(path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, payload);
  // No temporary file left behind.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST_F(FileTest, AtomicWriteIntoMissingDirectoryFailsWithoutLeftovers) {
  const std::string path = (dir_ / "no-such-dir" / "out.bin").string();
  const Status st = write_file_atomic(path, "x", 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("out.bin"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(FileTest, AtomicWriteOverDirectoryRefused) {
  const Status st = write_file_atomic(dir_.string(), "x", 1);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(std::filesystem::is_directory(dir_));
}

TEST_F(FileTest, EmptyFileMapsToZeroBytes) {
  const std::string path = (dir_ / "empty").string();
  std::ofstream(path).close();
  auto mapped = MappedFile::open(path);
  ASSERT_TRUE(mapped.ok());
  EXPECT_EQ(mapped->size(), 0u);
}

}  // namespace
}  // namespace tessera
