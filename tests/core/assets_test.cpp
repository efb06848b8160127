#include "core/assets.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(Assets, EnvironmentWinsThenTheSourceTreeFallback) {
  const char* saved = std::getenv("TESSERA_ASSETS");
  const std::string saved_value = saved ? saved : "";
  setenv("TESSERA_ASSETS", "/opt/tessera-test-assets", 1);
  EXPECT_EQ(find_assets_dir("/fallback/assets"), "/opt/tessera-test-assets");
  unsetenv("TESSERA_ASSETS");
  // The test binary lives in <build>/tests: there is no <build>/share/tessera/assets beside it.
  namespace fs = std::filesystem;
  const fs::path exe = fs::read_symlink("/proc/self/exe");
  ASSERT_FALSE(fs::exists(exe.parent_path().parent_path() / "share" / "tessera" / "assets"));
  EXPECT_EQ(find_assets_dir("/fallback/assets"), "/fallback/assets");
  if (saved) setenv("TESSERA_ASSETS", saved_value.c_str(), 1);
}

}  // namespace
}  // namespace tessera
