// The environment variables the runtime reads (engine/runtime internal): the Hugging Face cache's
// (models.h, model_pull.h) and the library's folder (library.h), and the XDG base folders they
// fall back on.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tessera::runtime {

// The variable's value; "" when unset.
inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// XDG_CACHE_HOME, else ~/.cache.
inline std::string cache_home() {
  if (std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) return xdg;
  return (std::filesystem::path(env("HOME")) / ".cache").string();
}

// XDG_DATA_HOME, else ~/.local/share.
inline std::string data_home() {
  if (std::string xdg = env("XDG_DATA_HOME"); !xdg.empty()) return xdg;
  return (std::filesystem::path(env("HOME")) / ".local" / "share").string();
}

// XDG_CONFIG_HOME, else ~/.config.
inline std::string config_home() {
  if (std::string xdg = env("XDG_CONFIG_HOME"); !xdg.empty()) return xdg;
  return (std::filesystem::path(env("HOME")) / ".config").string();
}

}  // namespace tessera::runtime
