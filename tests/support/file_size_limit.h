// A full disk, as a test can have one without mounting anything: for its lifetime, this process's
// writes past `bytes` in any one file fail (EFBIG, as ENOSPC would on a full disk; SIGXFSZ is
// ignored meanwhile). Restores the limit and the signal's handler when it ends.
#pragma once

#include <sys/resource.h>

#include <csignal>
#include <cstdint>

namespace tessera::testing {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(uint64_t bytes) {
    ok_ = ::getrlimit(RLIMIT_FSIZE, &old_) == 0;
    previous_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old_;
    small.rlim_cur = bytes;
    ok_ = ok_ && ::setrlimit(RLIMIT_FSIZE, &small) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, previous_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  void (*previous_)(int) = nullptr;
  bool ok_ = false;
};

}  // namespace tessera::testing
