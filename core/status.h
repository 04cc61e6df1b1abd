// Status and Result<T>: errors as values, after LevelDB's and TensorFlow's Status.
//
// A Status is either OK or carries a code and a human-readable message that says
// what went wrong and where (op name, config file:line, task address). Status is a
// small value type; copying is cheap enough for error paths. Thread-safety: a
// Status object is not synchronised; distinct objects may be used from any thread.
#pragma once

#include <cassert>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <variant>

namespace actorflow {

// Error codes, matching TensorFlow's canonical codes where one exists.
enum class Code : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// Returns the canonical name of `code`, e.g. "InvalidArgument". Never null.
const char* code_name(Code code);

class Status {
 public:
  // Creates an OK status.
  Status() = default;
  // Creates a status with `code` and `message`. `code == kOk` yields OK and drops the message.
  Status(Code code, std::string message);

  // Returns an OK status.
  static Status OK() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  // The message without the code name; empty for OK.
  const std::string& message() const { return message_; }
  // "OK" or "<CodeName>: <message>".
  std::string to_string() const;

  // Returns a copy whose message is "<prefix>: <message>". OK stays OK.
  Status with_prefix(const std::string& prefix) const;

  bool operator==(const Status& o) const { return code_ == o.code_ && message_ == o.message_; }
  bool operator!=(const Status& o) const { return !(*this == o); }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

std::ostream& operator<<(std::ostream& os, const Status& s);

// Convenience constructors, one per code.
Status Cancelled(std::string msg);
Status InvalidArgument(std::string msg);
Status DeadlineExceeded(std::string msg);
Status NotFound(std::string msg);
Status AlreadyExists(std::string msg);
Status PermissionDenied(std::string msg);
Status ResourceExhausted(std::string msg);
Status FailedPrecondition(std::string msg);
Status Aborted(std::string msg);
Status OutOfRange(std::string msg);
Status Unimplemented(std::string msg);
Status Internal(std::string msg);
Status Unavailable(std::string msg);
Status DataLoss(std::string msg);
Status Unauthenticated(std::string msg);

// Result<T> holds either a T or a non-OK Status. Accessing the value of an
// errored Result is a programming error (asserts in debug builds).
template <typename T>
class Result {
 public:
  // Implicit from a value or a non-OK Status, so functions can `return value;` or `return status;`.
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result constructed from an OK Status");
    if (std::get<Status>(v_).ok()) v_ = Status(Code::kInternal, "Result built from OK status without value");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // OK when a value is held, otherwise the error.
  Status status() const { return ok() ? Status::OK() : std::get<Status>(v_); }

  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace actorflow

#define AF_CONCAT_INNER(a, b) a##b
#define AF_CONCAT(a, b) AF_CONCAT_INNER(a, b)

// Returns from the enclosing function with the status of `expr` if it is not OK.
#define AF_RETURN_IF_ERROR(expr)                              \
  do {                                                        \
    ::actorflow::Status _af_st = (expr);                      \
    if (!_af_st.ok()) return _af_st;                          \
  } while (0)

// Evaluates `rexpr` (a Result<T>); on error returns its status, else moves the value into `lhs`.
#define AF_ASSIGN_OR_RETURN(lhs, rexpr)                                   \
  auto AF_CONCAT(_af_res_, __LINE__) = (rexpr);                           \
  if (!AF_CONCAT(_af_res_, __LINE__).ok())                                \
    return AF_CONCAT(_af_res_, __LINE__).status();                        \
  lhs = std::move(AF_CONCAT(_af_res_, __LINE__)).value()
