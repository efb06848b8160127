// The binary FBX node tree (import_fbx_internal.h): the header and every record checked against the
// bytes, and the property values decoded on demand, arrays included (zlib-inflated within the
// budget import_fbx_internal.h describes).
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "engine/mesh/import_fbx_internal.h"

namespace tessera::mesh::fbx_detail {
namespace {

constexpr std::string_view kMagic("Kaydara FBX Binary  \0\x1a\0", 23);
constexpr uint64_t kZlibMaxRatio = 1032;
// Largest decoded array (zlib's avail_out is 32-bit, and no mesh worth viewing needs more).
constexpr uint64_t kMaxArrayBytes = uint64_t{1} << 31;
// All zlib arrays of a file may inflate to at most 1 MiB + 128 x the file's size.
constexpr uint64_t kDecodeBudgetBase = uint64_t{1} << 20;
constexpr uint64_t kDecodeBudgetRatio = 128;

}  // namespace

Status NodeTree::fail(const std::string& what) const {
  return corrupt_data(name_ + ": " + what);
}

uint64_t NodeTree::le(uint64_t at, int n) const {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(d_[at + i]);
  return v;
}

Status NodeTree::parse() {
  TESSERA_RETURN_IF_ERROR(check_header());
  return parse_tree();
}

Status NodeTree::check_header() {
  if (d_.size() < kMagic.size() + 4 || d_.substr(0, kMagic.size()) != kMagic) {
    const std::string_view head = d_.substr(0, std::min<size_t>(d_.size(), 4096));
    if (head.find('\0') == std::string_view::npos &&
        (head.find("FBXHeaderExtension") != std::string_view::npos ||
         head.find("; FBX") != std::string_view::npos)) {
      return unsupported(name_ +
                         ": an ASCII FBX file; only binary FBX is read (export it as binary FBX)");
    }
    if (d_.substr(0, std::min<size_t>(d_.size(), 18)) == kMagic.substr(0, 18) &&
        d_.size() < kMagic.size() + 4) {
      return fail("truncated in the file header (" + std::to_string(d_.size()) + " bytes)");
    }
    return invalid_argument(name_ + ": not a binary FBX file (no \"Kaydara FBX Binary\" magic)");
  }
  version_ = static_cast<uint32_t>(le(23, 4));
  if (version_ < 7000) {
    return unsupported(name_ + ": FBX version " + std::to_string(version_) +
                       " is older than 7.0 and not read");
  }
  if (version_ > 20000) {
    return fail("implausible FBX version " + std::to_string(version_));
  }
  wide_ = version_ >= 7500;
  header_bytes_ = wide_ ? 25 : 13;
  return Status();
}

Status NodeTree::parse_tree() {
  uint64_t pos = kMagic.size() + 4;
  for (;;) {
    if (d_.size() - pos < header_bytes_) {
      return fail(
          "truncated: the top-level node list has no closing NULL record (file ends at "
          "byte " +
          std::to_string(d_.size()) + ")");
    }
    Node node;
    bool is_null = false;
    TESSERA_RETURN_IF_ERROR(read_node(pos, d_.size(), 0, &node, &is_null));
    if (is_null) break;
    root_.children.push_back(std::move(node));
  }
  return Status();
}

// Reads the record at `pos` (which must end by `limit`), advancing `pos` past it.
Status NodeTree::read_node(uint64_t& pos, uint64_t limit, int depth, Node* node, bool* is_null) {
  if (depth > kMaxDepth) return fail("nodes nested deeper than 64 at byte " + std::to_string(pos));
  const uint64_t start = pos;
  if (limit < pos || limit - pos < header_bytes_) {
    return fail("truncated node header at byte " + std::to_string(pos));
  }
  const int w = wide_ ? 8 : 4;
  const uint64_t end = le(pos, w), num_props = le(pos + w, w), prop_len = le(pos + 2 * w, w);
  const uint64_t name_len = static_cast<unsigned char>(d_[pos + 3 * w]);
  pos += header_bytes_;
  if (end == 0) {
    if (num_props != 0 || prop_len != 0 || name_len != 0) {
      return fail("node at byte " + std::to_string(start) +
                  " has EndOffset 0 but is not an all-zero NULL record");
    }
    *is_null = true;
    return Status();
  }
  const std::string where = "node at byte " + std::to_string(start);
  if (end > limit || end < pos + name_len) {
    return fail(where + ": EndOffset " + std::to_string(end) + " lies outside " +
                std::to_string(pos + name_len) + ".." + std::to_string(limit) +
                " (truncated, or a lying length)");
  }
  node->offset = start;
  node->name = d_.substr(pos, name_len);
  pos += name_len;
  const std::string what = where + " ('" + std::string(node->name) + "')";
  if (prop_len > end - pos) {
    return fail(what + ": property list of " + std::to_string(prop_len) +
                " bytes runs past the node's end");
  }
  if (num_props > prop_len / 2) {  // the smallest property ('C') takes 2 bytes
    return fail(what + ": " + std::to_string(num_props) + " properties cannot fit in " +
                std::to_string(prop_len) + " bytes");
  }
  const uint64_t props_end = pos + prop_len;
  node->props.reserve(num_props);
  for (uint64_t i = 0; i < num_props; ++i) {
    Property p;
    TESSERA_RETURN_IF_ERROR(read_property(pos, props_end, what, &p));
    node->props.push_back(p);
  }
  if (pos != props_end) {
    return fail(what + ": its properties take " + std::to_string(pos - (props_end - prop_len)) +
                " bytes, not the " + std::to_string(prop_len) + " PropertyListLen says");
  }
  if (pos == end) return Status();  // a leaf without a NULL record
  if (end - pos < header_bytes_) {
    return fail(what + ": " + std::to_string(end - pos) +
                " bytes after the properties are too few for the closing NULL record");
  }
  while (end - pos > header_bytes_) {
    Node child;
    bool child_null = false;
    TESSERA_RETURN_IF_ERROR(read_node(pos, end - header_bytes_, depth + 1, &child, &child_null));
    if (child_null) {
      return fail(what + ": a NULL record at byte " + std::to_string(pos - header_bytes_) +
                  " before the end of its child list");
    }
    node->children.push_back(std::move(child));
  }
  if (end - pos != header_bytes_) {
    return fail(what + ": its children end " + std::to_string(pos) + " past its EndOffset");
  }
  for (uint64_t i = pos; i < end; ++i) {
    if (d_[i] != 0) {
      return fail(what + ": the child list does not end with a NULL record (nonzero byte at " +
                  std::to_string(i) + ")");
    }
  }
  pos = end;
  return Status();
}

Status NodeTree::read_property(uint64_t& pos, uint64_t limit, const std::string& what,
                               Property* p) {
  if (pos >= limit) return fail(what + ": property list truncated");
  p->type = d_[pos];
  p->offset = pos + 1;
  const uint64_t avail = limit - pos - 1;
  uint64_t size = 0;
  switch (p->type) {
    case 'Y':
      size = 2;
      break;
    case 'C':
      size = 1;
      break;
    case 'I':
    case 'F':
      size = 4;
      break;
    case 'D':
    case 'L':
      size = 8;
      break;
    case 'S':
    case 'R':
      if (avail < 4) return fail(what + ": string property truncated");
      size = 4 + le(p->offset, 4);
      break;
    case 'f':
    case 'd':
    case 'l':
    case 'i':
    case 'b':
    case 'c':
      if (avail < 12) return fail(what + ": array property header truncated");
      size = 12 + le(p->offset + 8, 4);
      break;
    default: {
      const auto code = static_cast<unsigned char>(p->type);
      return fail(what + ": unknown property type code " + std::to_string(code) + " at byte " +
                  std::to_string(pos));
    }
  }
  if (size > avail) {
    return fail(what + ": property '" + std::string(1, p->type) + "' at byte " +
                std::to_string(pos) + " needs " + std::to_string(size) +
                " bytes, more than the property list holds");
  }
  pos = p->offset + size;
  return Status();
}

std::optional<int64_t> NodeTree::as_int(const Property& p) const {
  switch (p.type) {
    case 'Y':
      return static_cast<int16_t>(le(p.offset, 2));
    case 'C':
      return static_cast<int64_t>(le(p.offset, 1));
    case 'I':
      return static_cast<int32_t>(le(p.offset, 4));
    case 'L':
      return static_cast<int64_t>(le(p.offset, 8));
    default:
      return std::nullopt;
  }
}

std::optional<double> NodeTree::as_number(const Property& p) const {
  if (p.type == 'F') {
    float f;
    std::memcpy(&f, d_.data() + p.offset, 4);
    return f;
  }
  if (p.type == 'D') {
    double v;
    std::memcpy(&v, d_.data() + p.offset, 8);
    return v;
  }
  if (auto i = as_int(p)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<std::string_view> NodeTree::as_string(const Property& p) const {
  if (p.type != 'S' && p.type != 'R') return std::nullopt;
  return d_.substr(p.offset + 4, le(p.offset, 4));
}

// The first property of `node`'s child `child` as a string ("" when absent or not a string).
std::string_view NodeTree::child_string(const Node& node, std::string_view child) const {
  const Node* c = node.child(child);
  if (c == nullptr || c->props.empty()) return {};
  return as_string(c->props[0]).value_or(std::string_view());
}

std::optional<int64_t> NodeTree::object_id(const Node& node) const {
  if (node.props.empty() || node.props[0].type != 'L') return std::nullopt;
  return as_int(node.props[0]);
}

// Decodes an array property into raw little-endian bytes (checked as described at the top).
Status NodeTree::array_bytes(const Property& p, const std::string& what, std::string* out,
                             uint64_t* count, size_t* element) {
  size_t elem = 0;
  switch (p.type) {
    case 'f':
    case 'i':
      elem = 4;
      break;
    case 'd':
    case 'l':
      elem = 8;
      break;
    case 'b':
    case 'c':
      elem = 1;
      break;
    default:
      return fail(what + " is not an array (property type '" + std::string(1, p.type) + "')");
  }
  const uint64_t n = le(p.offset, 4), encoding = le(p.offset + 4, 4), stored = le(p.offset + 8, 4);
  const uint64_t raw = n * elem;  // n < 2^32: no overflow
  const std::string_view data = d_.substr(p.offset + 12, stored);
  if (encoding == 0) {
    if (stored != raw) {
      return fail(what + ": " + std::to_string(n) + " elements need " + std::to_string(raw) +
                  " bytes but " + std::to_string(stored) + " are stored");
    }
    out->assign(data);
  } else if (encoding == 1) {
    if (raw > stored * kZlibMaxRatio + 64) {
      return fail(what + ": claims " + std::to_string(n) + " elements (" + std::to_string(raw) +
                  " bytes), more than its " + std::to_string(stored) +
                  " compressed bytes can hold");
    }
    // Real FBX arrays compress a few times; a stream that inflates a thousandfold is a bomb,
    // and its output (millions of fan triangles from a few kB) is not a mesh to wait for.
    decoded_bytes_ += raw;
    if (decoded_bytes_ > kDecodeBudgetBase + kDecodeBudgetRatio * d_.size()) {
      return fail(what + ": the file's compressed arrays inflate to more than " +
                  std::to_string(kDecodeBudgetRatio) + " times its size (" +
                  std::to_string(decoded_bytes_) + " bytes so far)");
    }
    if (raw > kMaxArrayBytes) {
      return fail(what + ": an array of " + std::to_string(raw) + " bytes is larger than the " +
                  std::to_string(kMaxArrayBytes >> 20) + " MiB this reader accepts");
    }
    out->assign(raw, '\0');
    z_stream zs{};
    if (inflateInit(&zs) != Z_OK) return fail(what + ": zlib initialisation failed");
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
    zs.avail_in = static_cast<uInt>(data.size());
    zs.next_out = reinterpret_cast<Bytef*>(out->data());
    zs.avail_out = static_cast<uInt>(raw);
    const int rc = inflate(&zs, Z_FINISH);
    const uint64_t produced = zs.total_out;
    inflateEnd(&zs);
    if (rc != Z_STREAM_END || produced != raw) {
      return fail(what + ": the zlib data does not inflate to the " + std::to_string(raw) +
                  " bytes of " + std::to_string(n) + " elements (" +
                  (rc == Z_STREAM_END ? "it holds " + std::to_string(produced)
                                      : std::string(rc == Z_BUF_ERROR ? "more or truncated data"
                                                                      : "corrupt stream")) +
                  ")");
    }
  } else {
    return fail(what + ": unknown array encoding " + std::to_string(encoding));
  }
  *count = n;
  *element = elem;
  return Status();
}

Status NodeTree::read_doubles(const Property& p, const std::string& what,
                              std::vector<double>* out) {
  std::string raw;
  uint64_t n = 0;
  size_t elem = 0;
  TESSERA_RETURN_IF_ERROR(array_bytes(p, what, &raw, &n, &elem));
  if (p.type != 'd' && p.type != 'f') return fail(what + " is not a float or double array");
  out->resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    if (elem == 8) {
      std::memcpy(&(*out)[i], raw.data() + 8 * i, 8);
    } else {
      float f;
      std::memcpy(&f, raw.data() + 4 * i, 4);
      (*out)[i] = f;
    }
  }
  return Status();
}

Status NodeTree::read_ints(const Property& p, const std::string& what, std::vector<int64_t>* out) {
  std::string raw;
  uint64_t n = 0;
  size_t elem = 0;
  TESSERA_RETURN_IF_ERROR(array_bytes(p, what, &raw, &n, &elem));
  if (p.type != 'i' && p.type != 'l') return fail(what + " is not an integer array");
  out->resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    if (elem == 8) {
      int64_t v;
      std::memcpy(&v, raw.data() + 8 * i, 8);
      (*out)[i] = v;
    } else {
      int32_t v;
      std::memcpy(&v, raw.data() + 4 * i, 4);
      (*out)[i] = v;
    }
  }
  return Status();
}

// The array in the first property of child `child` of `node`.
const Property* NodeTree::array_child(const Node& node, std::string_view child) const {
  const Node* c = node.child(child);
  if (c == nullptr || c->props.empty()) return nullptr;
  return &c->props[0];
}

}  // namespace tessera::mesh::fbx_detail
