// Mesh import (tessera-view, `tessera render`, the studio's File > Open mesh and drag-and-drop):
// Wavefront OBJ, binary glTF 2.0 (.glb), glTF 2.0 text (.gltf) and binary FBX 7.x, each read by a
// small bounds-checked reader of our own (one file per format: import_obj.cpp, import_glb.cpp,
// import_fbx.cpp), merged into one mesh::Mesh with its base colour texture when the file has one.
//
// Why our own readers. Mesh files come from the internet, so a reader may only ever return a
// Status: every count, index, offset, stride and length is checked before use, allocations are
// bounded by what the file's bytes can hold, and each reader has a libFuzzer target
// (tests/fuzz/*_import_fuzz).
//  - Assimp reads everything else, never in this process: Debian builds it with assertions on and
//    some of its importers abort(), hang or allocate without bound on odd input (and Debian's 5.2.5
//    cannot even read its own binary FBX), so it runs in a child process with limits whose output
//    is read back by the GLB reader here (isolated_import.h). The formats the readers here read
//    stay theirs: they are the ones artists send most, and they are fuzzed.
//  - OBJ: Debian's tinyobjloader (2.0.0~rc10, libtinyobjloader-dev) was checked and not taken: on
//    "f 1 2 9" over 3 vertices LoadObj returns true and hands back vertex index 8 (only a warning
//    string says so); "f -1 -2 -7" returns index -4 with no warning at all; `v nan 0 0`,
//    `v abc def ghi` and `v 0 0` silently become zeros; an index of 99999999999999999999 goes
//    through atoi and silently becomes the last vertex. Every index would have to be re-checked by
//    us anyway, malformed numbers could not be reported, and the uv-seam splitting and MTL lookup
//    below are ours either way; our reader reports each of these with the file and line.
//
// What is read:
//  - OBJ: `v` positions, `vt` texture coordinates and `f` faces (polygons fan-triangulated;
//  1-based,
//    negative = relative indices; normal indices ignored: normals are recomputed by the renderer).
//  - GLB / glTF: every triangle primitive (mode 4, the default) of the meshes reached from the
//    default scene (node matrices / TRS applied; nodes must form a tree), POSITION as float VEC3,
//    indices u8/u16/u32 or none; strips (5) and fans (6) become triangles; points and lines are
//    skipped. KHR_draco_mesh_compression primitives are decoded with Google's libdraco (Debian's
//    libdraco-dev; without it they are kUnsupported and go to Assimp). glTF 1.0 is kUnsupported
//    (and goes to Assimp). A .glb reads its BIN chunk
//    (buffer 0); a .gltf reads buffers from base64 `data:` URIs or from relative files beside it
//    (absolute paths and other URI schemes are refused).
//  - FBX (binary 7.x; 32-bit node headers below 7500, 64-bit from 7500; arrays raw or zlib, a zlib
//    array may claim no more than 1032 x its stored bytes, zlib's limit, and all of a file's zlib
//    arrays together may inflate to at most 1 MiB + 128 x the file's size: real files compress a
//    few times, a thousandfold stream is a bomb whose millions of triangles are not worth waiting
//    for): every Objects/Geometry of class "Mesh": Vertices (d or f) and PolygonVertexIndex (i or
//    l, a negative index ends a polygon and is stored as ~index), polygons fan-triangulated,
//    polygons of fewer than 3 corners skipped. Each geometry is placed by the Model(s) it is
//    connected to (OO Connections) and their parent Models: Lcl Translation, Lcl Rotation (degrees,
//    XYZ order: R = Rz * Ry * Rx) and Lcl Scaling, as T * R * S. IGNORED: RotationOrder,
//    Pre/PostRotation, rotation/scaling pivots and offsets, Geometric* transforms, UnitScaleFactor
//    (positions stay in file units), deformers, blend shapes, animation. GlobalSettings
//    UpAxis/UpAxisSign is honoured: the data is rotated so that the file's up becomes +Y (the
//    engine's frame); Front/Coord axes are not read. ASCII FBX is kUnsupported (the message says to
//    export binary).
//  Everything merges into one mesh::Mesh without normals.
//
// Textures (Mesh::uvs + Mesh::texture, the surface the renderer's textured mode draws). A vertex
// has one uv: a vertex used with different uvs is split (copies appended after the file's
// vertices); a corner without a uv takes its vertex's, and vertices never given one get (0, 0).
//  - OBJ: `vt` per face corner. The texture is the `map_Kd` of the material named by the first
//    `usemtl` (or the first material with a map_Kd when there is no usemtl), looked up in the
//    `mtllib` files; the MTL and the image path are relative to the OBJ's directory (map_Kd options
//    such as `-s u v w` are skipped; backslashes read as '/').
//  - GLB / glTF: TEXCOORD_0 as float VEC2, v flipped back from glTF's top-left origin
//    (v = 1 - v_file, the inverse of export.cpp's flip), kept only when every primitive has it. The
//    texture is the base colour texture (texCoord 0) of the first primitive's material: a PNG in a
//    buffer view, a base64 `data:image/png` URI, or (with a directory) a relative PNG file.
//  - FBX: the first LayerElementUV of each geometry (ByPolygonVertex, ByVertice/ByVertex or
//    ByPolygon mapping; Direct or IndexToDirect reference; an index of -1 = no uv for that corner),
//    no flip (FBX and Mesh are both bottom-left). The texture is the one connected to a material's
//    DiffuseColor (else the first Texture object): the Video's embedded Content when present, else
//    the PNG named by RelativeFilename (relative to the FBX's directory), else the file name of
//    RelativeFilename / FileName beside the FBX (absolute paths of the machine that wrote the file
//    are not followed).
//  Only PNG images are decoded, at most 8192 x 8192 pixels (and no more pixels than the PNG's bytes
//  can encode). Texture problems are WARNINGS, not errors: the geometry is the file's content and
//  a mesh copied without its sidecar files is common, so a missing or unreadable MTL/image, an
//  image that is not a decodable PNG, a texture without uvs, uvs on only some meshes, uvs outside
//  [0, 1] (tiling: Mesh allows [0, 1] only; values within 1e-5 are clamped) or a malformed uv layer
//  drop the texture (and, for the uv faults, the uvs) and append one message naming the file and
//  the fault to `*warnings` (when non-null).
//
// Errors (Status messages always name the file): kIoError when the file cannot be read;
// kInvalidArgument for an extension other than .obj/.glb/.gltf/.fbx, an empty file, or bytes that
// are not the format the extension promises (no "glTF" / "Kaydara FBX Binary" magic, binary data in
// an OBJ); kUnsupported for ASCII FBX; kCorruptData naming the fault for a malformed file
// (truncated data, lengths or offsets beyond the file, indices out of range, NaN/Inf coordinates,
// arrays claiming more than the file holds); kNotFound when it holds no triangles. A returned mesh
// always passes mesh::validate. Nothing here keeps state: the functions are thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/mesh/mesh.h"

namespace tessera::mesh {

// File-dialog filter (Qt syntax) for every format import_mesh_file() opens: the native ones and,
// when the Assimp reader is installed, the formats it reads (isolated_import.h).
std::string import_filter();

// What opens, for people (`tessera info`): the native formats, then Assimp's (its version and
// extensions) or why they are unavailable.
std::string import_formats_text();

// Reads `path`. The project's own readers come first, by extension (.obj, .glb, .gltf, .fbx; .stl
// through stl.h, .3mf through threemf.h (its unit is not applied); case-insensitive), checked
// against the first bytes: a file whose magic says it is another of these formats (a GLB named
// .gltf, a binary FBX named .glb) is read as what it is; UTF-16 OBJ and glTF text (with a
// byte-order mark) is read as UTF-8. What they refuse as unsupported rather than malformed (ASCII
// FBX, glTF 1.0, Draco without libdraco) and every other extension Assimp reads (.dae, .ply,
// .3ds, .blend, ...) goes to Assimp in a child process with limits (isolated_import.h); when both
// refuse, the message gives both reasons. Without the Assimp reader, those files are kUnsupported
// and the message says Assimp is missing. An extension no reader knows is kInvalidArgument ("not a
// mesh file"). Sidecar files (MTL, textures, .bin buffers) are looked up in the file's directory.
// Errors and warnings as above; `warnings` is appended to and nullable. The mesh comes back
// without normals.
Expected<Mesh> import_mesh_file(const std::string& path,
                                std::vector<std::string>* warnings = nullptr);

// The readers on bytes already in memory (tests, fuzzers, callers with their own I/O). `name` is
// used in every error and warning message. `directory` is where sidecar files are looked up; empty
// means none are read (an OBJ then gets uvs but no texture, a .gltf can use data: URIs only, an FBX
// only embedded textures).
Expected<Mesh> parse_obj(std::string_view text, const std::string& name,
                         std::vector<std::string>* warnings = nullptr,
                         const std::string& directory = "");
Expected<Mesh> parse_glb(std::string_view bytes, const std::string& name,
                         std::vector<std::string>* warnings = nullptr,
                         const std::string& directory = "");
Expected<Mesh> parse_gltf(std::string_view json_text, const std::string& name,
                          std::vector<std::string>* warnings = nullptr,
                          const std::string& directory = "");
Expected<Mesh> parse_fbx(std::string_view bytes, const std::string& name,
                         std::vector<std::string>* warnings = nullptr,
                         const std::string& directory = "");

}  // namespace tessera::mesh
