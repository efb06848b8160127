#include "core/assets.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#ifndef TESSERA_SOURCE_ASSETS
#error "tessera_core is compiled with TESSERA_SOURCE_ASSETS (engine/CMakeLists.txt)"
#endif

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

std::string assets_dir() {
  return find_assets_dir(TESSERA_SOURCE_ASSETS);
}

std::string default_shape_model_dir() {
  return assets_dir() + "/models/tessera-tiny";
}

std::string default_diffusion_model_dir() {
  return default_shape_model_dir() + "/diffusion";
}

std::string default_clip_vocab_dir() {
  return assets_dir() + "/vocab/clip";
}

std::string default_clip_vocab_file() {
  return default_clip_vocab_dir() + "/bpe_simple_vocab_16e6.txt.gz";
}

}  // namespace tessera
