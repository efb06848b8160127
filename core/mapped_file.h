// MappedFile: a read-only memory map of a whole file (RAII, move-only).
//
// open() checks the path exists, is a regular file (not a directory) and is readable; errors name
// the path. An empty file maps to size 0 with data() == nullptr.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace tessera {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  static Expected<MappedFile> open(const std::string& path);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Tells the kernel the pages wholly inside [p, p + n) (a range of this map) are not needed now:
  // they leave the resident set and are read from the file again if touched. For loaders that
  // copy (convert) a tensor once and never read the mapped bytes again, so a converted model does
  // not also keep the file's pages resident. No effect outside the map or on an empty one.
  void drop_pages(const void* p, size_t n) const;

 private:
  void release();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Reads a whole file into a string (for small text files: vocabularies, configs). Same checks.
Expected<std::string> read_file(const std::string& path);

// Writes `size` bytes to `path` atomically: a temporary file beside it, fsync, then rename, so a
// failure never leaves a half-written file at `path`.
Status write_file_atomic(const std::string& path, const void* data, size_t size);

}  // namespace tessera
