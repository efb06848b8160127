// libFuzzer target for the Assimp boundary (engine/mesh/isolated_import.h): the input's first byte
// picks a format Assimp reads (PLY, OFF, COLLADA, OBJ, STL, 3DS, ASCII FBX, glTF 1.0), the rest is
// written to a file that tessera-mesh-reader reads in its child process under short limits. Assimp
// itself may abort, hang or run out of memory there (that is what the child is for); what must
// hold is this process: no crash, no hang past the limit, every error naming the file, and any
// mesh that comes back valid. Slow (a process per input), so its corpus is small and pointed.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/mesh/isolated_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* const kExtensions[] = {".ply", ".off", ".dae", ".obj",
                                            ".stl", ".3ds", ".fbx", ".gltf"};
  if (size < 1) return 0;
  const std::string ext = kExtensions[data[0] % 8];
  static const std::string dir = [] {
    const auto d = std::filesystem::temp_directory_path() /
                   ("tessera-mesh-reader-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d.string();
  }();
  const std::string path = dir + "/input" + ext;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
  }
  tessera::mesh::IsolatedReadLimits limits;
  limits.seconds = 3.0;
  limits.memory_bytes = uint64_t{1} << 30;
  limits.output_bytes = uint64_t{64} << 20;
  std::vector<std::string> warnings;
  auto mesh = tessera::mesh::import_isolated(path, &warnings, limits);
  if (!mesh.ok()) {
    if (mesh.status().message().find(path) == std::string::npos) __builtin_trap();
    return 0;
  }
  if (!tessera::mesh::validate(*mesh).ok() || mesh->empty()) __builtin_trap();
  for (const std::string& w : warnings) {
    if (w.find("input") == std::string::npos) __builtin_trap();
  }
  return 0;
}
