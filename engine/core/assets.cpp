#include "engine/core/assets.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace tessera {

std::string find_assets_dir(const std::string& source_tree_assets) {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("TESSERA_ASSETS")) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "tessera" / "assets";
    if (fs::is_directory(installed, ec)) return installed.string();
  }
  return source_tree_assets;
}

}  // namespace tessera
