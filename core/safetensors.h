// Safetensors: validated, zero-copy reading and atomic writing of the one checkpoint format Tessera
// loads (checkpoints come from the internet; pickle is never loaded).
//
// File layout: an 8-byte little-endian u64 header length N, N bytes of UTF-8 JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// (possibly padded with trailing spaces), then the data section. Offsets are in bytes, relative to
// the start of the data section; tensors are contiguous, row-major, little-endian.
//
// Validation (SafeTensors::open / parse) checks everything before any view is handed out, and
// every failure is a Status whose message starts with the file name and names the problem
// (tensor, field, offset). It is at least as strict as the official Rust implementation:
//   - header length 0, > 100 MB, or beyond the end of the file;
//   - header not valid UTF-8, not valid JSON (with the byte offset), top level not an object;
//   - duplicate keys anywhere (tensor names, entry fields, metadata keys);
//   - an entry that is not an object, missing or extra fields;
//   - dtype not one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL (kUnsupported, names the tensor;
//     e.g. F8_E4M3);
//   - shape not an array of non-negative integers, more than kMaxDims (6) dimensions
//     (kUnsupported), element count or byte size overflowing 64 bits;
//   - data_offsets not two non-negative integers, begin > end, end beyond the data section,
//     end - begin != numel * dtype size;
//   - overlapping tensors, and gaps: the tensors must cover the data section exactly, with no
//     unclaimed bytes between them or after the last one. The format's text allows gaps, but the
//     official reader (and so every file PyTorch/diffusers can load) rejects them, and refusing
//     them means no unvalidated bytes hide inside an accepted file;
//   - __metadata__ not an object of string -> string.
// Zero-element tensors (a 0 in the shape) are valid; their views point at their offset (inside or
// one past the data section) and must not be dereferenced. Scalars have shape [] and one element.
//
// Alignment: the format does not require a tensor's offset to be a multiple of its element size
// (writers that pack a 1-byte tensor before a 4-byte one produce unaligned data). Such files are
// accepted; TensorInfo::aligned says whether the tensor's first byte is aligned to its element
// size in memory. view() hands out the pointer as it is (callers that dereference typed pointers
// must check `aligned` or copy); load_f32()/to_f32() work for aligned and unaligned tensors alike.
// write_safetensors() starts the data section 8-byte aligned in the file (and mmap returns
// page-aligned memory), so its files are aligned whenever every tensor's byte offset is a multiple
// of its element size (e.g. one dtype throughout, or the wider dtypes first).
//
// Cost: opening maps the file and parses only the header (milliseconds for a 7 GB checkpoint);
// tensor bytes are not touched until the caller reads a view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace tessera {

// Largest header accepted (the official implementation's limit).
constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // [] for a scalar
  uint64_t offset = 0;         // bytes from the start of the data section
  uint64_t nbytes = 0;         // == numel() * dtype_size(dtype)
  bool aligned = true;         // first byte aligned to dtype_size(dtype) in memory

  int64_t numel() const;
  std::string shape_string() const { return shape_to_string(shape); }
};

// A parsed safetensors file. Move-only; owns the memory map when created by open(). Views and
// pointers it hands out stay valid while the object (or the object it was moved into) lives: moving
// does not move the mapped bytes.
class SafeTensors {
 public:
  SafeTensors() = default;
  SafeTensors(SafeTensors&&) noexcept = default;
  SafeTensors& operator=(SafeTensors&&) noexcept = default;
  SafeTensors(const SafeTensors&) = delete;
  SafeTensors& operator=(const SafeTensors&) = delete;

  // Maps `path` and validates it. Errors: kNotFound (no such file), kInvalidArgument (a directory
  // or non-regular file), kIoError, kCorruptData (format violations), kUnsupported (dtype, rank).
  static Expected<SafeTensors> open(const std::string& path);

  // Validates `size` bytes at `bytes` (the whole file) without copying them. `name` is used in
  // error messages. The caller keeps the bytes alive and unchanged while the result and its views
  // are used. `bytes` may be null only when size == 0. This is the path open() takes too.
  static Expected<SafeTensors> parse(const uint8_t* bytes, size_t size, std::string name);

  // File name (as given to open/parse), for messages.
  const std::string& path() const { return path_; }
  size_t size() const { return tensors_.size(); }
  bool empty() const { return tensors_.empty(); }
  // Tensors in data-offset order (ties: by name).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  std::vector<std::string> names() const;
  // nullptr when there is no tensor `name`.
  const TensorInfo* find(const std::string& name) const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  // The __metadata__ map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Byte offset of the data section within the file (8 + header length).
  uint64_t data_section_offset() const { return data_offset_; }
  // Sum of numel over all tensors, and size of the data section in bytes.
  uint64_t total_elements() const;
  uint64_t total_bytes() const { return data_size_; }

  // A read-only CPU view into the file bytes (writing through it faults: the map is read-only).
  // kNotFound names the tensor and the file. See the alignment note above.
  Expected<TensorView> view(const std::string& name) const;
  // view() plus a check of dtype and shape; a -1 in `shape` matches any size in that dimension.
  // The error names the tensor, the file, the expected and the actual dtype/shape.
  Expected<TensorView> view_as(const std::string& name, DType dtype,
                               const std::vector<int64_t>& shape) const;
  // The same check without the view (kNotFound, kInvalidArgument on mismatch).
  Status expect(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const;

  // Converts tensor `name` (F32, F16 or BF16) to f32 into dst[0..n). n must equal its element
  // count; dst may be null only when n == 0. Works for unaligned tensors.
  Status load_f32(const std::string& name, float* dst, size_t n) const;
  Expected<std::vector<float>> to_f32(const std::string& name) const;
  // MappedFile::drop_pages for the bytes of tensor `name` (after a loader converted it into memory
  // of its own). No effect for a parsed (not opened) file or an unknown name.
  void drop_pages(const std::string& name) const;
  // The same for every tensor of the file: its mapped pages leave this process's resident memory
  // and are read again (from the page cache, else the disk) when next touched. Views stay valid.
  void drop_all_pages() const;

 private:
  Expected<const TensorInfo*> lookup(const std::string& name) const;
  const uint8_t* tensor_bytes(const TensorInfo& info) const { return data_ + info.offset; }

  MappedFile file_;  // empty when created by parse()
  std::string path_;
  const uint8_t* data_ = nullptr;  // start of the data section
  uint64_t data_offset_ = 0;
  uint64_t data_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// One tensor for write_safetensors. `data` points to numel elements of `source` type, row-major
// and contiguous, owned by the caller; it may be null only when numel == 0. `dtype` is what the
// file stores: equal to `source`, or F16/BF16 with `source` F32 (converted while writing, round to
// nearest even, as core/dtype.h).
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  DType source = DType::kF32;

  // Stored as is.
  static TensorToWrite raw(std::string name, DType dtype, std::vector<int64_t> shape,
                           const void* data) {
    return {std::move(name), dtype, std::move(shape), data, dtype};
  }
  // f32 data stored as `stored` (F32, F16 or BF16).
  static TensorToWrite from_f32(std::string name, DType stored, std::vector<int64_t> shape,
                                const float* data) {
    return {std::move(name), stored, std::move(shape), data, DType::kF32};
  }
};

// Writes a safetensors file at `path`: tensors laid out in the given order, the header padded with
// spaces so the data section starts 8-byte aligned, metadata as __metadata__ (omitted if empty).
// Streams into a temporary file beside `path`, fsyncs and renames, so a failure never leaves a
// partial file at `path`; memory use is bounded (no copy of the whole file). Errors:
// kInvalidArgument (empty, duplicate or reserved name, invalid UTF-8, negative size, more than
// kMaxDims dimensions, null data, unsupported conversion), kIoError (naming `path`).
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

// True when `s` is well-formed UTF-8 (no overlong forms, surrogates or code points > U+10FFFF).
// On failure *bad_offset (if not null) receives the offset of the first offending byte.
bool is_valid_utf8(const char* s, size_t n, size_t* bad_offset = nullptr);

}  // namespace tessera
