// Status and Result<T>: errors as values, after LevelDB's and TensorFlow's Status.
//
// A Status is either OK or carries a code and a human-readable message that says
// what went wrong and where (op name, config file:line, task address), and optionally a typed
// detail (StatusDetail) for code that acts on the error. Status is a small value type; copying
// is cheap enough for error paths (the detail is shared, immutable). Thread-safety: a Status
// object is not synchronised; distinct objects may be used from any thread.
#pragma once

#include <cassert>
#include <cstdint>
#include <memory>
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
// `v` as a Code: kUnknown for a value no Code has (a code that came from another process). Pure.
Code code_from_wire(int64_t v);

// ---- typed details -------------------------------------------------------------------------
// What an error says for code to act on, beside its message for people: a caller that reroutes
// or refreshes on an error reads the detail, never the message text. A detail travels with its
// Status across processes as encode_status_detail's bytes (actors/messages.h: CAF errors;
// net/wire.h: step outcomes on the data plane), and a receiver drops one that does not decode.

// A task refused a call on a resource because another task serves it: `copy_task` (the task
// that refused: a backup copy whose primary lives, or a ps task whose variables were taken over
// while it was down) names `primary_task`, which serves it. Both non-empty.
struct ServedBy {
  std::string copy_task;
  std::string primary_task;
  bool operator==(const ServedBy& o) const { return copy_task == o.copy_task && primary_task == o.primary_task; }
};
// The resource (a variable) holds no value yet. `resource` is its name (non-empty).
struct Uninitialized {
  std::string resource;
  bool operator==(const Uninitialized& o) const { return resource == o.resource; }
};
using StatusDetail = std::variant<ServedBy, Uninitialized>;

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

  // Returns a copy whose message is "<prefix>: <message>" (the detail stays). OK stays OK.
  Status with_prefix(const std::string& prefix) const;

  // Returns a copy that carries `detail` (replacing any). OK stays OK and carries none.
  Status with_detail(StatusDetail detail) const;
  // Returns a copy with the detail decoded from `bytes` (encode_status_detail; empty: none, the
  // detail this Status has is kept). Bytes that do not decode are dropped: the code and the
  // message stay, so a malformed or hostile peer can only lose the detail.
  Status with_wire_detail(const std::string& bytes) const;
  // The detail when it is a T, else null. Valid while this Status (or a copy of it) lives.
  template <class T>
  const T* detail() const {
    return detail_ ? std::get_if<T>(detail_.get()) : nullptr;
  }
  // The detail, or null.
  const StatusDetail* any_detail() const { return detail_.get(); }

  // Equal code, message and detail.
  bool operator==(const Status& o) const {
    return code_ == o.code_ && message_ == o.message_ &&
           (detail_ == o.detail_ || (detail_ && o.detail_ && *detail_ == *o.detail_));
  }
  bool operator!=(const Status& o) const { return !(*this == o); }

 private:
  Code code_ = Code::kOk;
  std::string message_;
  std::shared_ptr<const StatusDetail> detail_;  // null: none; shared by copies, never changed
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

// The wire form of `d`: a tag byte, then each string field as a little-endian u32 length and
// its bytes. Pure; thread-safe.
std::string encode_status_detail(const StatusDetail& d);
// Each string field of a detail holds at most this many bytes (task and variable names).
inline constexpr size_t kMaxStatusDetailField = 4096;
// Decodes encode_status_detail's bytes. InvalidArgument saying what is wrong for an unknown tag,
// a missing, truncated, empty or over-long (kMaxStatusDetailField) field, or bytes after the
// last field. Pure; thread-safe.
Result<StatusDetail> decode_status_detail(const std::string& bytes);

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
