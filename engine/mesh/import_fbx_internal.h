// The binary FBX 7.x node tree, as the FBX importer (import_fbx.cpp) reads its scene from it;
// internal to engine/mesh (callers use import.h). Parsing is import_fbx_nodes.cpp; the format
// facts are the project's FBX notes, docs/fbx.md.
//
// Every record is checked against the bytes before anything is read: a node's EndOffset must lie
// inside its parent (or the file), its property list inside the node and exactly PropertyListLen
// long, each property inside the list, every child list must end with an all-zero NULL record of
// the version's size, nesting is at most 64 deep, and the top-level list must end with its NULL
// record (so a truncated file is an error). Properties are kept as (type, offset) pairs; array
// payloads are decoded only when the importer uses them.
//
// Arrays: count, encoding, stored length (u32 each, also at 7500). Raw arrays must store exactly
// count * element size bytes; zlib arrays may claim at most what their stored bytes can inflate to
// (zlib's maximum ratio is 1032:1) and must inflate to exactly that size. So no allocation exceeds
// about a thousand times the file, and the importer decodes only the arrays it uses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::mesh::fbx_detail {

// Deepest node nesting the tree accepts, and the longest Model parent chain the scene climbs.
inline constexpr int kMaxDepth = 64;

struct Property {
  char type = 0;
  uint64_t offset = 0;  // of the payload, just after the type code
};

struct Node {
  std::string_view name;
  uint64_t offset = 0;  // of the record, for messages
  std::vector<Property> props;
  std::vector<Node> children;

  const Node* child(std::string_view n) const {
    for (const Node& c : children) {
      if (c.name == n) return &c;
    }
    return nullptr;
  }
};

// The node tree of `bytes` (which, like `name`, must outlive it: nodes and values are views) and
// its property values. Errors are kCorruptData naming `name` (fail), kUnsupported for ASCII or
// pre-7.0 files, kInvalidArgument for a file that is no FBX.
class NodeTree {
 public:
  NodeTree(std::string_view bytes, const std::string& name) : d_(bytes), name_(name) {}

  // Checks the header and reads every record into root().
  Status parse();
  const Node& root() const { return root_; }
  const std::string& name() const { return name_; }
  Status fail(const std::string& what) const;

  // Scalar values; nullopt when the property has another type.
  std::optional<int64_t> as_int(const Property& p) const;
  std::optional<double> as_number(const Property& p) const;
  std::optional<std::string_view> as_string(const Property& p) const;
  // The first property of `node`'s child `child` as a string ("" when absent or not a string).
  std::string_view child_string(const Node& node, std::string_view child) const;
  std::optional<int64_t> object_id(const Node& node) const;

  // Arrays, decoded (and inflated, counting against the file's budget) on each call. `what`
  // names the array in messages.
  Status read_doubles(const Property& p, const std::string& what, std::vector<double>* out);
  Status read_ints(const Property& p, const std::string& what, std::vector<int64_t>* out);
  // The array in the first property of child `child` of `node`.
  const Property* array_child(const Node& node, std::string_view child) const;

 private:
  uint64_t le(uint64_t at, int n) const;
  Status check_header();
  Status parse_tree();
  Status read_node(uint64_t& pos, uint64_t limit, int depth, Node* node, bool* is_null);
  Status read_property(uint64_t& pos, uint64_t limit, const std::string& what, Property* p);
  Status array_bytes(const Property& p, const std::string& what, std::string* out, uint64_t* count,
                     size_t* element);

  std::string_view d_;
  const std::string& name_;
  uint32_t version_ = 0;
  bool wide_ = false;
  uint64_t decoded_bytes_ = 0;  // inflated by zlib arrays so far
  uint64_t header_bytes_ = 13;
  Node root_;
};

}  // namespace tessera::mesh::fbx_detail
