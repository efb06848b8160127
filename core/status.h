// Status and Expected<T>: how runtime failures come back in Tessera.
//
// Contract: every function that can fail on bad input (missing file, malformed checkpoint, out of
// memory, unwritable path) returns Status or Expected<T>. The message names the file or field and
// what is wrong, in words a user can act on. Asserts are reserved for programmer errors; nothing in
// the engine calls exit() or abort() on bad input.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace tessera {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // caller passed something malformed (size, flag, prompt)
  kNotFound,         // file or tensor does not exist
  kIoError,          // read/write/mmap failed
  kCorruptData,      // a file's contents violate its format
  kUnsupported,      // valid input we do not handle (dtype, architecture)
  kOutOfMemory,
  kCancelled,
  kInternal,
};

const char* error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }
  bool ok() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return ok(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt data: model.safetensors: header length 9999 exceeds file size 120"
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status with_context(const std::string& context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return {ErrorCode::kInvalidArgument, std::move(m)};
}
inline Status not_found(std::string m) {
  return {ErrorCode::kNotFound, std::move(m)};
}
inline Status io_error(std::string m) {
  return {ErrorCode::kIoError, std::move(m)};
}
inline Status corrupt_data(std::string m) {
  return {ErrorCode::kCorruptData, std::move(m)};
}
inline Status unsupported(std::string m) {
  return {ErrorCode::kUnsupported, std::move(m)};
}
inline Status out_of_memory(std::string m) {
  return {ErrorCode::kOutOfMemory, std::move(m)};
}
inline Status cancelled(std::string m) {
  return {ErrorCode::kCancelled, std::move(m)};
}
inline Status internal_error(std::string m) {
  return {ErrorCode::kInternal, std::move(m)};
}

// Expected<T>: a value or a non-ok Status. Move-only types are fine.
template <typename T>
class [[nodiscard]] Expected {
 public:
  // Implicit, so that a function returns `value;` or `status;` as it is.
  Expected(T value) : storage_(std::move(value)) {}
  Expected(Status status) : storage_(std::move(status)) {
    assert(!std::get<Status>(storage_).ok() && "Expected constructed from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(storage_); }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<T>(storage_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<T>(storage_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(storage_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  // The error; an ok Status when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(storage_); }

 private:
  std::variant<T, Status> storage_;
};

}  // namespace tessera

// Propagate a non-ok Status from an expression returning Status.
#define TESSERA_RETURN_IF_ERROR(expr)          \
  do {                                         \
    ::tessera::Status tessera_st_ = (expr);    \
    if (!tessera_st_.ok()) return tessera_st_; \
  } while (0)

#define TESSERA_CONCAT_INNER_(a, b) a##b
#define TESSERA_CONCAT_(a, b) TESSERA_CONCAT_INNER_(a, b)
// TESSERA_ASSIGN_OR_RETURN(auto x, f()); declares x from an Expected, or returns its Status.
#define TESSERA_ASSIGN_OR_RETURN(decl, expr) \
  TESSERA_ASSIGN_OR_RETURN_IMPL_(TESSERA_CONCAT_(tessera_ex_, __LINE__), decl, expr)
#define TESSERA_ASSIGN_OR_RETURN_IMPL_(tmp, decl, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  decl = std::move(tmp).value()
