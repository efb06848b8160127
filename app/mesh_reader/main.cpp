// tessera-mesh-reader: the child process that reads one mesh file through Assimp for
// import_mesh_file() (engine/mesh/isolated_import.h says why and how it is started).
//
//   tessera-mesh-reader FILE      the mesh as a GLB on standard output (positions, triangles, uvs
//   and
//                                 base colour texture); each warning as "warning: ..." on standard
//                                 error; exit 0
//   tessera-mesh-reader --formats "assimp VERSION", then one extension a line (".dae"); exit 0
// A refusal: "error: ..." on standard error, exit 2 (3: out of memory). Anything else (a signal, an
// abort inside Assimp, another exit status) is a crash, and the parent says so.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "engine/mesh/export.h"
#include "engine/mesh/import_assimp.h"

namespace {

int refuse(const tessera::Status& status) {
  std::fprintf(stderr, "error: %s\n", status.message().c_str());
  return status.code() == tessera::ErrorCode::kOutOfMemory ? 3 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] == '\0') {
    std::fprintf(stderr, "usage: tessera-mesh-reader FILE | --formats\n");
    return 64;
  }
  if (std::strcmp(argv[1], "--formats") == 0) {
    std::printf("assimp %s\n", tessera::mesh::assimp_version().c_str());
    for (const std::string& ext : tessera::mesh::assimp_extensions())
      std::printf("%s\n", ext.c_str());
    return 0;
  }
  try {
    std::vector<std::string> warnings;
    auto mesh = tessera::mesh::read_with_assimp(argv[1], &warnings);
    for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (!mesh.ok()) return refuse(mesh.status());
    auto glb = tessera::mesh::to_glb(*mesh);
    if (!glb.ok()) return refuse(glb.status());
    if (std::fwrite(glb->data(), 1, glb->size(), stdout) != glb->size() ||
        std::fflush(stdout) != 0) {
      std::fprintf(stderr, "error: %s: the mesh could not be handed back (%s)\n", argv[1],
                   std::strerror(errno));
      return 2;
    }
    return 0;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: %s: reading it needs more memory than the reader may use\n",
                 argv[1]);
    return 3;
  }
}
