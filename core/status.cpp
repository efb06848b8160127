#include "core/status.h"

namespace tessera {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kNotFound:
      return "not found";
    case ErrorCode::kIoError:
      return "i/o error";
    case ErrorCode::kCorruptData:
      return "corrupt data";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kOutOfMemory:
      return "out of memory";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kInternal:
      return "internal error";
  }
  return "unknown error";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(error_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace tessera
