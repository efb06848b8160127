#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_set>
#include <utility>

namespace tessera {

namespace {

using nlohmann::json;

// Element count and byte size of a shape, with overflow checks. False on overflow.
bool checked_numel(const std::vector<int64_t>& shape, size_t elem_size, uint64_t* numel,
                   uint64_t* nbytes) {
  uint64_t n = 1;
  bool zero = false;
  for (int64_t d : shape) {
    if (d == 0) zero = true;
  }
  if (zero) {
    *numel = 0;
    *nbytes = 0;
    return true;
  }
  for (int64_t d : shape) {
    const auto ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > std::numeric_limits<uint64_t>::max() / ud) return false;
    n *= ud;
  }
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  if (n > std::numeric_limits<uint64_t>::max() / elem_size) return false;
  *numel = n;
  *nbytes = n * elem_size;
  return true;
}

std::string in_quotes(const std::string& s) {
  return "'" + s + "'";
}

std::string range_string(uint64_t begin, uint64_t end) {
  // Appended piecewise: GCC 12 warns falsely (-Wrestrict) on "[" + std::to_string(...).
  std::string s = "[";
  s += std::to_string(begin);
  s += ", ";
  s += std::to_string(end);
  s += ")";
  return s;
}

// Reads a JSON value that must be a non-negative integer fitting in int64.
// Returns an empty string on success, otherwise what is wrong with it.
std::string read_index(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return "is too large";
    *out = u;
    return {};
  }
  if (v.is_number_integer()) return "is negative (" + std::to_string(v.get<int64_t>()) + ")";
  if (v.is_number_float()) return "is not an integer (" + v.dump() + ")";
  return std::string("is a ") + v.type_name() + ", expected an integer";
}

// The tensor entry `value` for `name`, validated (offsets are checked against the data section
// later, once all entries are known).
Status parse_entry(const std::string& file, const std::string& name, const json& value,
                   uint64_t data_size, TensorInfo* info) {
  const std::string where = file + ": tensor " + in_quotes(name);
  if (!value.is_object())
    return corrupt_data(where + ": entry is a " + value.type_name() + ", expected an object");
  for (const auto& [key, unused] : value.items()) {
    (void)unused;
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      return corrupt_data(where + ": unexpected field " + in_quotes(key) +
                          " (expected dtype, shape, data_offsets)");
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(field)) return corrupt_data(where + ": missing field " + in_quotes(field));
  }

  const json& dtype = value["dtype"];
  if (!dtype.is_string())
    return corrupt_data(where + ": dtype is a " + std::string(dtype.type_name()) +
                        ", expected a string");
  const auto& dtype_str = dtype.get_ref<const std::string&>();
  const auto parsed_dtype = dtype_from_name(dtype_str);
  if (!parsed_dtype)
    return unsupported(where + ": unsupported dtype " + in_quotes(dtype_str) +
                       " (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
  info->dtype = *parsed_dtype;

  const json& shape = value["shape"];
  if (!shape.is_array())
    return corrupt_data(where + ": shape is a " + std::string(shape.type_name()) +
                        ", expected an array of integers");
  if (shape.size() > static_cast<size_t>(kMaxDims))
    return unsupported(where + ": shape has " + std::to_string(shape.size()) +
                       " dimensions, at most " + std::to_string(kMaxDims) + " are supported");
  info->shape.clear();
  for (size_t i = 0; i < shape.size(); ++i) {
    uint64_t d = 0;
    const std::string problem = read_index(shape[i], &d);
    if (!problem.empty())
      return corrupt_data(where + ": shape[" + std::to_string(i) + "] " + problem);
    info->shape.push_back(static_cast<int64_t>(d));
  }
  uint64_t numel = 0;
  uint64_t nbytes = 0;
  if (!checked_numel(info->shape, dtype_size(info->dtype), &numel, &nbytes))
    return corrupt_data(where + ": shape " + info->shape_string() +
                        " has an element count that overflows 64 bits");

  const json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    return corrupt_data(where + ": data_offsets must be an array of two integers [begin, end]");
  uint64_t begin = 0;
  uint64_t end = 0;
  std::string problem = read_index(offsets[0], &begin);
  if (!problem.empty()) return corrupt_data(where + ": data_offsets[0] " + problem);
  problem = read_index(offsets[1], &end);
  if (!problem.empty()) return corrupt_data(where + ": data_offsets[1] " + problem);
  if (begin > end)
    return corrupt_data(where + ": data_offsets begin " + std::to_string(begin) + " is after end " +
                        std::to_string(end));
  if (end > data_size)
    return corrupt_data(where + ": data_offsets end " + std::to_string(end) +
                        " is beyond the data section (" + std::to_string(data_size) + " bytes)");
  if (end - begin != nbytes)
    return corrupt_data(where + ": data_offsets " + range_string(begin, end) + " span " +
                        std::to_string(end - begin) + " bytes, but " + dtype_name(info->dtype) +
                        " " + info->shape_string() + " needs " + std::to_string(nbytes));
  info->name = name;
  info->offset = begin;
  info->nbytes = nbytes;
  return {};
}

Status parse_metadata(const std::string& file, const json& value,
                      std::map<std::string, std::string>* out) {
  if (!value.is_object())
    return corrupt_data(file + ": __metadata__ is a " + std::string(value.type_name()) +
                        ", expected an object of string values");
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      return corrupt_data(file + ": __metadata__ entry " + in_quotes(key) + " is a " +
                          std::string(v.type_name()) + ", expected a string");
    (*out)[key] = v.get<std::string>();
  }
  return {};
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

bool is_valid_utf8(const char* s, size_t n, size_t* bad_offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(s);
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    if (n - i < len) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) {
        if (bad_offset) *bad_offset = i;
        return false;
      }
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Expected<SafeTensors> SafeTensors::open(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  TESSERA_ASSIGN_OR_RETURN(SafeTensors st, parse(file.data(), file.size(), path));
  st.file_ = std::move(file);  // the mapped bytes do not move; st's pointers stay valid
  return st;
}

Expected<SafeTensors> SafeTensors::parse(const uint8_t* bytes, size_t size, std::string name) {
  const std::string& file = name;
  if (size < 8)
    return corrupt_data(file + ": file is " + std::to_string(size) +
                        " bytes, too short to hold the 8-byte header length (not a safetensors "
                        "file?)");
  const uint64_t header_len = read_le64(bytes);
  const uint64_t available = size - 8;
  if (header_len == 0) return corrupt_data(file + ": header length is 0");
  if (header_len > available)
    return corrupt_data(file + ": header length " + std::to_string(header_len) +
                        " exceeds the file size " + std::to_string(size) +
                        " (truncated or not a safetensors file)");
  if (header_len > kSafetensorsMaxHeaderBytes)
    return corrupt_data(file + ": header length " + std::to_string(header_len) +
                        " exceeds the limit of " + std::to_string(kSafetensorsMaxHeaderBytes) +
                        " bytes");
  const char* header = reinterpret_cast<const char*>(bytes + 8);
  size_t bad = 0;
  if (!is_valid_utf8(header, header_len, &bad))
    return corrupt_data(file + ": header is not valid UTF-8 (byte " + std::to_string(bad) +
                        " of the header)");

  // The DOM parser silently keeps the last of duplicate keys; the callback sees every key first.
  // Duplicates are rejected at every depth: tensor names, entry fields and metadata keys.
  std::vector<std::unordered_set<std::string>> open_objects;
  std::string top_key;  // the current top-level key, for context
  std::string duplicate;
  bool duplicate_is_tensor = false;
  json root;
  try {
    root = json::parse(
        header, header + header_len,
        [&](int /*depth*/, json::parse_event_t event, json& parsed) {
          if (event == json::parse_event_t::object_start) {
            open_objects.emplace_back();
          } else if (event == json::parse_event_t::object_end && !open_objects.empty()) {
            open_objects.pop_back();
          } else if (event == json::parse_event_t::key && !open_objects.empty()) {
            const auto& key = parsed.get_ref<const std::string&>();
            if (open_objects.size() == 1) top_key = key;
            if (!open_objects.back().insert(key).second && duplicate.empty()) {
              duplicate = key;
              duplicate_is_tensor = open_objects.size() == 1;
            }
          }
          return true;
        },
        /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix; keep the explanation.
    if (const auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    return corrupt_data(file + ": header is not valid JSON (near header byte " +
                        std::to_string(e.byte) + "): " + what);
  } catch (const std::exception& e) {
    return corrupt_data(file + ": header is not valid JSON: " + e.what());
  }
  if (!duplicate.empty()) {
    if (duplicate_is_tensor)
      return corrupt_data(file + ": duplicate tensor name " + in_quotes(duplicate) +
                          " in the header");
    return corrupt_data(file + ": duplicate key " + in_quotes(duplicate) + " inside " +
                        in_quotes(top_key) + " in the header");
  }
  if (!root.is_object())
    return corrupt_data(file + ": header is a JSON " + std::string(root.type_name()) +
                        ", expected an object");

  SafeTensors st;
  st.path_ = std::move(name);
  st.data_offset_ = 8 + header_len;
  st.data_size_ = available - header_len;
  st.data_ = bytes + st.data_offset_;
  st.tensors_.reserve(root.size());
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      TESSERA_RETURN_IF_ERROR(parse_metadata(st.path_, value, &st.metadata_));
      continue;
    }
    TensorInfo info;
    TESSERA_RETURN_IF_ERROR(parse_entry(st.path_, key, value, st.data_size_, &info));
    info.aligned =
        reinterpret_cast<uintptr_t>(st.data_ + info.offset) % dtype_size(info.dtype) == 0;
    st.tensors_.push_back(std::move(info));
  }

  std::sort(st.tensors_.begin(), st.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.offset != b.offset) return a.offset < b.offset;
    if (a.nbytes != b.nbytes) return a.nbytes < b.nbytes;
    return a.name < b.name;
  });
  // Exact coverage: each tensor starts where the previous one ended (see the header comment).
  uint64_t covered = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : st.tensors_) {
    if (t.offset < covered)
      return corrupt_data(st.path_ + ": tensor " + in_quotes(t.name) + " " +
                          range_string(t.offset, t.offset + t.nbytes) + " overlaps tensor " +
                          in_quotes(prev->name) + " " +
                          range_string(prev->offset, prev->offset + prev->nbytes));
    if (t.offset > covered)
      return corrupt_data(st.path_ + ": data section not fully covered: bytes " +
                          range_string(covered, t.offset) + " before tensor " + in_quotes(t.name) +
                          " belong to no tensor");
    covered = t.offset + t.nbytes;
    prev = &t;
  }
  if (covered != st.data_size_)
    return corrupt_data(
        st.path_ + ": data section not fully covered: " + std::to_string(st.data_size_ - covered) +
        " trailing bytes after the last tensor (tensors end at " + std::to_string(covered) +
        ", data section is " + std::to_string(st.data_size_) + " bytes)");

  st.index_.reserve(st.tensors_.size());
  for (size_t i = 0; i < st.tensors_.size(); ++i) st.index_.emplace(st.tensors_[i].name, i);
  return st;
}

std::vector<std::string> SafeTensors::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& t : tensors_) out.push_back(t.name);
  return out;
}

const TensorInfo* SafeTensors::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t SafeTensors::total_elements() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += static_cast<uint64_t>(t.numel());
  return n;
}

Expected<const TensorInfo*> SafeTensors::lookup(const std::string& name) const {
  const TensorInfo* info = find(name);
  if (!info) return not_found(path_ + ": no tensor named " + in_quotes(name));
  return info;
}

Expected<TensorView> SafeTensors::view(const std::string& name) const {
  TESSERA_ASSIGN_OR_RETURN(const TensorInfo* info, lookup(name));
  // The map is read-only; TensorView has no const flavour, so constness is a documented contract.
  return TensorView(const_cast<uint8_t*>(tensor_bytes(*info)), info->dtype, info->shape);
}

Status SafeTensors::expect(const std::string& name, DType dtype,
                           const std::vector<int64_t>& shape) const {
  TESSERA_ASSIGN_OR_RETURN(const TensorInfo* info, lookup(name));
  bool shape_ok = info->shape.size() == shape.size();
  for (size_t i = 0; shape_ok && i < shape.size(); ++i)
    shape_ok = shape[i] == -1 || shape[i] == info->shape[i];
  if (!shape_ok || info->dtype != dtype)
    return invalid_argument(path_ + ": tensor " + in_quotes(name) + " is " +
                            dtype_name(info->dtype) + " " + info->shape_string() + ", expected " +
                            dtype_name(dtype) + " " + shape_to_string(shape));
  return {};
}

Expected<TensorView> SafeTensors::view_as(const std::string& name, DType dtype,
                                          const std::vector<int64_t>& shape) const {
  TESSERA_RETURN_IF_ERROR(expect(name, dtype, shape));
  return view(name);
}

void SafeTensors::drop_pages(const std::string& name) const {
  const TensorInfo* info = find(name);
  if (info != nullptr) file_.drop_pages(tensor_bytes(*info), info->nbytes);
}

void SafeTensors::drop_all_pages() const {
  if (data_ != nullptr) file_.drop_pages(data_, data_size_);
}

Status SafeTensors::load_f32(const std::string& name, float* dst, size_t n) const {
  TESSERA_ASSIGN_OR_RETURN(const TensorInfo* info, lookup(name));
  const auto numel = static_cast<uint64_t>(info->numel());
  if (n != numel)
    return invalid_argument(path_ + ": tensor " + in_quotes(name) + " has " +
                            std::to_string(numel) + " elements, caller asked for " +
                            std::to_string(n));
  if (info->dtype != DType::kF32 && info->dtype != DType::kF16 && info->dtype != DType::kBF16)
    return unsupported(path_ + ": tensor " + in_quotes(name) + " is " + dtype_name(info->dtype) +
                       ", cannot convert to F32 (only F32, F16, BF16)");
  if (n == 0) return {};
  const uint8_t* src = tensor_bytes(*info);
  if (info->dtype == DType::kF32) {
    std::memcpy(dst, src, n * sizeof(float));  // memcpy: no alignment needed
    return {};
  }
  const auto convert = info->dtype == DType::kF16 ? convert_f16_to_f32 : convert_bf16_to_f32;
  if (info->aligned) {
    convert(reinterpret_cast<const uint16_t*>(src), dst, n);
    return {};
  }
  // Unaligned 16-bit data: stage through an aligned buffer rather than form misaligned pointers.
  constexpr size_t kChunk = 4096;
  uint16_t staging[kChunk];
  for (size_t i = 0; i < n; i += kChunk) {
    const size_t m = std::min(kChunk, n - i);
    std::memcpy(staging, src + i * 2, m * 2);
    convert(staging, dst + i, m);
  }
  return {};
}

Expected<std::vector<float>> SafeTensors::to_f32(const std::string& name) const {
  TESSERA_ASSIGN_OR_RETURN(const TensorInfo* info, lookup(name));
  std::vector<float> out(static_cast<size_t>(info->numel()));
  TESSERA_RETURN_IF_ERROR(load_f32(name, out.data(), out.size()));
  return out;
}

// ---- writer ------------------------------------------------------------------------------------

namespace {

// A temporary file beside the destination, renamed over it on commit; unlinked otherwise.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path) : path_(std::move(path)) {}
  ~AtomicFileWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
  }
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  Status open() {
    struct stat st {};
    if (::stat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      return invalid_argument(path_ + ": is a directory, expected a file path");
    static std::atomic<unsigned> counter{0};
    tmp_ = path_ + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      tmp_.clear();
      return io_error(path_ + ": cannot create: " + std::strerror(errno));
    }
    return {};
  }

  Status write(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd_, p, std::min<size_t>(size, size_t{1} << 30));
      if (n < 0) {
        if (errno == EINTR) continue;
        return io_error(path_ + ": write failed: " + std::strerror(errno));
      }
      p += n;
      size -= static_cast<size_t>(n);
    }
    return {};
  }

  Status commit() {
    const bool synced = ::fsync(fd_) == 0;
    const int sync_errno = errno;
    const bool closed = ::close(fd_) == 0;
    fd_ = -1;
    if (!synced || !closed)
      return io_error(path_ + ": flush failed: " + std::strerror(synced ? errno : sync_errno));
    if (::rename(tmp_.c_str(), path_.c_str()) != 0)
      return io_error(path_ + ": rename failed: " + std::strerror(errno));
    committed_ = true;
    return {};
  }

 private:
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) {
      if (!is_valid_utf8(k.data(), k.size()) || !is_valid_utf8(v.data(), v.size()))
        return invalid_argument(path + ": metadata entry " + in_quotes(k) + " is not valid UTF-8");
      meta[k] = v;
    }
    header["__metadata__"] = std::move(meta);
  }
  std::vector<uint64_t> sizes;
  sizes.reserve(tensors.size());
  std::unordered_set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const std::string where = path + ": tensor " + in_quotes(t.name);
    if (t.name.empty()) return invalid_argument(path + ": a tensor has an empty name");
    if (t.name == "__metadata__") return invalid_argument(where + ": the name is reserved");
    if (!is_valid_utf8(t.name.data(), t.name.size()))
      return invalid_argument(path + ": a tensor name is not valid UTF-8");
    if (!names.insert(t.name).second) return invalid_argument(where + ": duplicate name");
    if (t.shape.size() > static_cast<size_t>(kMaxDims))
      return invalid_argument(where + ": " + std::to_string(t.shape.size()) +
                              " dimensions, at most " + std::to_string(kMaxDims));
    for (int64_t d : t.shape)
      if (d < 0)
        return invalid_argument(where + ": negative size in shape " + shape_to_string(t.shape));
    const bool converts = t.source != t.dtype;
    if (converts &&
        !(t.source == DType::kF32 && (t.dtype == DType::kF16 || t.dtype == DType::kBF16)))
      return invalid_argument(where + ": cannot convert " + dtype_name(t.source) + " to " +
                              dtype_name(t.dtype) + " (only F32 to F16/BF16)");
    uint64_t numel = 0;
    uint64_t nbytes = 0;
    if (!checked_numel(t.shape, dtype_size(t.dtype), &numel, &nbytes))
      return invalid_argument(where + ": shape " + shape_to_string(t.shape) + " overflows");
    if (numel > 0 && t.data == nullptr) return invalid_argument(where + ": data is null");
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    sizes.push_back(nbytes);
  }
  std::string text = header.dump();
  // Pad so the data section (at 8 + header length) starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(text.size() >> (8 * i));

  AtomicFileWriter out(path);
  TESSERA_RETURN_IF_ERROR(out.open());
  TESSERA_RETURN_IF_ERROR(out.write(len_bytes, 8));
  TESSERA_RETURN_IF_ERROR(out.write(text.data(), text.size()));
  constexpr size_t kChunk = 1 << 16;
  std::vector<uint16_t> staging;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& t = tensors[i];
    if (sizes[i] == 0) continue;
    if (t.source == t.dtype) {
      TESSERA_RETURN_IF_ERROR(out.write(t.data, sizes[i]));
      continue;
    }
    staging.resize(kChunk);
    const auto* src = static_cast<const float*>(t.data);
    const size_t n = sizes[i] / 2;
    for (size_t j = 0; j < n; j += kChunk) {
      const size_t m = std::min(kChunk, n - j);
      if (t.dtype == DType::kBF16)
        convert_f32_to_bf16(src + j, staging.data(), m);
      else
        convert_f32_to_f16(src + j, staging.data(), m);
      TESSERA_RETURN_IF_ERROR(out.write(staging.data(), m * 2));
    }
  }
  return out.commit();
}

}  // namespace tessera
