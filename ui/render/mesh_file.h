// Reading a mesh file for viewing (tessera-view, `tessera render`): Wavefront OBJ and binary glTF
// 2.0 (.glb), with small readers of our own rather than Assimp, because Debian's Assimp is built
// with assertions on and aborts on some malformed files; these readers check every count, index,
// offset and stride before use, so an untrusted file can only produce a Status.
//
// What is read: OBJ `v` positions, `vt` texture coordinates and `f` faces (polygons
// fan-triangulated; 1-based, negative = relative indices; normal indices ignored: normals are
// recomputed by the renderer). GLB: every triangle primitive (mode 4, the default) of the meshes
// reached from the default scene (node matrices / TRS applied), POSITION as float VEC3, indices
// u8/u16/u32 or none; other primitive modes are skipped. Everything merges into one mesh::Mesh
// (no normals).
//
// Textures (Mesh::uvs + Mesh::texture, the surface ShadingMode::kTextured draws):
//  - OBJ: a vertex keeps its file index; a vertex used with different `vt`s is split (copies
//    appended after the file's vertices); a face corner without a `vt` takes the vertex's uv, and
//    vertices never given one get (0, 0). The texture is the `map_Kd` of the material named by the
//    first `usemtl` (or the first material with a map_Kd when there is no usemtl), looked up in
//    the `mtllib` files; the MTL and the image path are relative to the OBJ's directory (map_Kd
//    options such as `-s u v w` are skipped; backslashes read as '/'). Only load_mesh_file reads
//    them (parse_obj has no directory).
//  - GLB: TEXCOORD_0 as float VEC2, v flipped back from glTF's top-left origin (v = 1 - v_file,
//    the inverse of engine/mesh/export.cpp's flip), kept only when every primitive has it. The
//    texture is the base colour texture (texCoord 0) of the first primitive's material when its
//    image is embedded (images[i].bufferView) PNG data.
//  Texture problems are WARNINGS, not errors: the geometry is the file's content and an OBJ copied
//  without its sidecar files is common, so a missing/unreadable MTL or image, an image that is not
//  a decodable PNG, a texture without uvs, uvs outside [0, 1] (tiling: Mesh allows [0, 1] only) or
//  a non-float / malformed TEXCOORD_0 drop the texture (and, for the last two, the uvs) and append
//  one message naming the file and the fault to `*warnings` (when non-null). A returned mesh
//  always passes mesh::validate.
#pragma once

#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::render {

// By extension (.obj or .glb, case-insensitive). kIoError when the file cannot be read,
// kInvalidArgument for another extension, kCorruptData naming the path and the fault for a
// malformed file, kNotFound when it holds no triangles. Texture warnings (see above) go to
// `*warnings` when it is non-null (appended; nullable).
Expected<mesh::Mesh> load_mesh_file(const std::string& path,
                                    std::vector<std::string>* warnings = nullptr);

// The parsers on bytes already in memory; `name` is used in error and warning messages.
// parse_obj reads uvs but no texture (it has no directory to find the MTL in).
Expected<mesh::Mesh> parse_obj(const std::string& text, const std::string& name,
                               std::vector<std::string>* warnings = nullptr);
Expected<mesh::Mesh> parse_glb(const std::string& bytes, const std::string& name,
                               std::vector<std::string>* warnings = nullptr);

}  // namespace tessera::render
