#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace tessera {

namespace {
std::string errno_text() {
  return std::strerror(errno);
}

// Opens `path` for reading after checking it is a regular file. Returns fd or a Status.
Expected<int> open_regular(const std::string& path, size_t* size) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return not_found(path + ": no such file");
    return io_error(path + ": " + errno_text());
  }
  if (S_ISDIR(st.st_mode)) return invalid_argument(path + ": is a directory, expected a file");
  if (!S_ISREG(st.st_mode)) return invalid_argument(path + ": not a regular file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path + ": cannot open: " + errno_text());
  *size = static_cast<size_t>(st.st_size);
  return fd;
}
}  // namespace

MappedFile::~MappedFile() {
  release();
}

void MappedFile::release() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

Expected<MappedFile> MappedFile::open(const std::string& path) {
  size_t size = 0;
  TESSERA_ASSIGN_OR_RETURN(int fd, open_regular(path, &size));
  MappedFile file;
  file.path_ = path;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const std::string err = errno_text();
      ::close(fd);
      return io_error(path + ": mmap failed: " + err);
    }
    file.data_ = static_cast<const uint8_t*>(p);
    file.size_ = size;
  }
  ::close(fd);
  return file;
}

void MappedFile::drop_pages(const void* p, size_t n) const {
  const auto* begin = static_cast<const uint8_t*>(p);
  if (data_ == nullptr || begin < data_ || begin + n > data_ + size_ || n == 0) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(begin) + n) / page * page;
  if (hi <= lo) return;
  ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);  // advice: failure is harmless
}

Expected<std::string> read_file(const std::string& path) {
  size_t size = 0;
  TESSERA_ASSIGN_OR_RETURN(int fd, open_regular(path, &size));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string err = errno_text();
      ::close(fd);
      return io_error(path + ": read failed: " + err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Status write_file_atomic(const std::string& path, const void* data, size_t size) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return invalid_argument(path + ": is a directory, expected a file path");
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(path + ": cannot create: " + errno_text());
  const auto* p = static_cast<const uint8_t*>(data);
  size_t left = size;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string err = errno_text();
      ::close(fd);
      ::unlink(tmp.c_str());
      return io_error(path + ": write failed: " + err);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string err = errno_text();
    ::unlink(tmp.c_str());
    return io_error(path + ": flush failed: " + err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = errno_text();
    ::unlink(tmp.c_str());
    return io_error(path + ": rename failed: " + err);
  }
  return {};
}

}  // namespace tessera
