// The Assimp reader: every format Assimp (Debian's libassimp 5.2.5) reads, turned into one
// mesh::Mesh.
//
// This header is for ONE program only: tessera-mesh-reader (app/mesh_reader), the child process
// that import_mesh_file() starts for the files the project's own readers do not read
// (isolated_import.h). It is built into its own library (tessera_mesh_assimp), which nothing else
// links. Why a child: Debian builds Assimp with assertions on, and some of its importers abort() (a
// truncated PLY), spin forever (a PLY header cut mid-line) or allocate without bound
// (invalid/OutOfMemory.off of assimp-testmodels) on malformed input; in a child that costs the
// file, not the studio or a batch.
//
// What is read: every mesh reached from the root node, node transforms applied, triangulated
// (aiProcess_Triangulate); points and lines are left out (nothing to shade). The FBX importer's
// UpAxis/UpAxisSign metadata is applied as the native FBX reader applies it (the file's up becomes
// +Y); other formats come as Assimp gives them (its Collada importer already turns Z-up files to
// Y-up). UV channel 0 is kept when every mesh has it and it lies in [0, 1]; the texture is the base
// colour (else diffuse) texture of the first mesh's material: embedded (compressed PNG bytes or
// uncompressed texels) or a file beside the model (import_internal.h's rules), PNG, JPEG, TGA or
// BMP (decoded in the child), at most 8192 x 8192 pixels. Texture problems
// are warnings, as in every reader. Every coordinate is checked finite.
//
// Errors name the file: kUnsupported when Assimp cannot read it (its own message attached),
// kNotFound when it holds no triangles, kCorruptData for non-finite data, kOutOfMemory when memory
// runs out.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

Expected<Mesh> read_with_assimp(const std::string& path, std::vector<std::string>* warnings);

// The lower-case extensions Assimp reads, with the dot (".dae", ".ply", ...), sorted.
std::vector<std::string> assimp_extensions();

// "5.2.4" (Debian's 5.2.5 reports 5.2.4).
std::string assimp_version();

}  // namespace tessera::mesh
