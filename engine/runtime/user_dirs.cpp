#include "engine/runtime/user_dirs.h"

#include <filesystem>

#include "engine/runtime/environment_internal.h"

namespace tessera::runtime {

std::string user_data_dir() {
  return (std::filesystem::path(data_home()) / "tessera").string();
}

std::string user_config_dir() {
  return (std::filesystem::path(config_home()) / "tessera").string();
}

}  // namespace tessera::runtime
