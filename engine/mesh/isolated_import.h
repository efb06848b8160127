// Reading a mesh file through Assimp in a child process, for the files the project's own readers do
// not read (import.h: other formats such as .dae, .ply, .3ds, ASCII FBX, glTF 1.0).
//
// Why a child. Debian builds Assimp 5.2.5 with assertions on: on malformed input some of its
// importers abort() (a PLY whose face list is cut short), spin forever (a PLY header cut mid-line)
// or allocate until the machine swaps (assimp-testmodels' invalid/OutOfMemory.off). In-process that
// would take the studio, a batch or the server down; in tessera-mesh-reader (app/mesh_reader) it
// costs that one file. The parent sets the limits and enforces them:
//  - time: the child is killed (SIGKILL) after `seconds` of wall time (and RLIMIT_CPU stops a spin
//    even if the parent were gone; PR_SET_PDEATHSIG kills the child with its parent);
//  - memory: RLIMIT_AS (address space) of `memory_bytes`: an allocation past it fails in the child;
//  - output: at most `output_bytes` of mesh come back; past that the child is killed;
//  - no core dumps (RLIMIT_CORE 0), no inherited descriptors but the three standard ones.
// What comes back is a GLB (the child writes the Mesh with the project's GLB writer) and is read
// with the project's fuzzed GLB reader (parse_glb) under the original file's name, then validated:
// finite coordinates, indices in range and sizes are checked exactly as for any import, so a child
// that misbehaves cannot hand the parent anything a hostile file could not.
//
// Finding the reader: $TESSERA_MESH_READER when set; else tessera-mesh-reader beside the running
// executable; else <exe dir>/../libexec/tessera/tessera-mesh-reader (the .deb); else the build
// tree's (a developer build and the tests). When none is an executable file, the Assimp formats are
// unavailable and the messages say which.
//
// Threads: every function may be called from any thread (each read is its own process).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

struct IsolatedReadLimits {
  double seconds = 60.0;                      // wall time of one read
  uint64_t memory_bytes = uint64_t{4} << 30;  // the child's address space
  uint64_t output_bytes = uint64_t{1} << 30;  // the GLB it hands back
};

// The reader program found by the rule above; empty when there is none. `tried` (nullable) receives
// the places looked at, for messages.
std::string mesh_reader_path(std::vector<std::string>* tried = nullptr);

// What the reader at mesh_reader_path() reads, asked once per reader path and process
// (`tessera-mesh-reader --formats`, 10 s at most).
struct IsolatedFormats {
  bool available = false;
  std::string reader;                   // its path
  std::string version;                  // Assimp's, e.g. "5.2.4"
  std::vector<std::string> extensions;  // lower case with the dot, sorted: ".3ds", ".dae", ...
  std::string why_not;                  // when !available: what was looked for and what failed
};
IsolatedFormats isolated_formats();

// Reads `path` in the reader under `limits`. Errors name the file: the reader's own refusal
// (kUnsupported, kNotFound, kCorruptData as it gives them), kOutOfMemory past memory_bytes,
// kInternal when the reader crashed (the signal named) or ran past the time or output limits,
// kUnsupported when there is no reader; whatever the GLB reader finds wrong in what came back.
// `warnings` (nullable) gets the reader's warnings.
Expected<Mesh> import_isolated(const std::string& path,
                               std::vector<std::string>* warnings = nullptr,
                               const IsolatedReadLimits& limits = {});

}  // namespace tessera::mesh
