#include "core/status.h"

#include <cstdint>

namespace actorflow {
namespace {

// Tags of the wire form; a new detail gets a new tag (never reuse one).
constexpr char kServedByTag = 1;
constexpr char kUninitializedTag = 2;

void put_field(std::string& out, const std::string& v) {
  const auto n = static_cast<uint32_t>(v.size());
  for (int i = 0; i < 4; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  out += v;
}

// Reads the field at bytes[*at..] into *v. InvalidArgument naming `what` when it is missing,
// truncated, empty or longer than kMaxStatusDetailField.
Status get_field(const std::string& bytes, size_t* at, const char* what, std::string* v) {
  const std::string where = std::string("status detail: field '") + what + "'";
  if (bytes.size() - *at < 4) return InvalidArgument(where + " is missing or truncated");
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[*at + i])) << (8 * i);
  *at += 4;
  if (n == 0) return InvalidArgument(where + " is empty");
  if (n > kMaxStatusDetailField)
    return InvalidArgument(where + " claims " + std::to_string(n) + " bytes (at most " +
                           std::to_string(kMaxStatusDetailField) + ")");
  if (bytes.size() - *at < n) return InvalidArgument(where + " is truncated");
  v->assign(bytes, *at, n);
  *at += n;
  return Status::OK();
}

}  // namespace

std::string encode_status_detail(const StatusDetail& d) {
  std::string out;
  if (const auto* s = std::get_if<ServedBy>(&d)) {
    out += kServedByTag;
    put_field(out, s->copy_task);
    put_field(out, s->primary_task);
  } else if (const auto* u = std::get_if<Uninitialized>(&d)) {
    out += kUninitializedTag;
    put_field(out, u->resource);
  }
  return out;
}

Result<StatusDetail> decode_status_detail(const std::string& bytes) {
  if (bytes.empty()) return InvalidArgument("status detail: no bytes");
  size_t at = 1;
  StatusDetail out;
  switch (bytes[0]) {
    case kServedByTag: {
      ServedBy s;
      AF_RETURN_IF_ERROR(get_field(bytes, &at, "copy_task", &s.copy_task));
      AF_RETURN_IF_ERROR(get_field(bytes, &at, "primary_task", &s.primary_task));
      out = std::move(s);
      break;
    }
    case kUninitializedTag: {
      Uninitialized u;
      AF_RETURN_IF_ERROR(get_field(bytes, &at, "resource", &u.resource));
      out = std::move(u);
      break;
    }
    default:
      return InvalidArgument("status detail: unknown tag " + std::to_string(static_cast<unsigned char>(bytes[0])));
  }
  if (at != bytes.size())
    return InvalidArgument("status detail: " + std::to_string(bytes.size() - at) + " bytes after its fields");
  return out;
}

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kCancelled: return "Cancelled";
    case Code::kUnknown: return "Unknown";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kDeadlineExceeded: return "DeadlineExceeded";
    case Code::kNotFound: return "NotFound";
    case Code::kAlreadyExists: return "AlreadyExists";
    case Code::kPermissionDenied: return "PermissionDenied";
    case Code::kResourceExhausted: return "ResourceExhausted";
    case Code::kFailedPrecondition: return "FailedPrecondition";
    case Code::kAborted: return "Aborted";
    case Code::kOutOfRange: return "OutOfRange";
    case Code::kUnimplemented: return "Unimplemented";
    case Code::kInternal: return "Internal";
    case Code::kUnavailable: return "Unavailable";
    case Code::kDataLoss: return "DataLoss";
    case Code::kUnauthenticated: return "Unauthenticated";
  }
  return "Unknown";
}

Code code_from_wire(int64_t v) {
  return v >= 0 && v <= static_cast<int64_t>(Code::kUnauthenticated) ? static_cast<Code>(v) : Code::kUnknown;
}

Status::Status(Code code, std::string message) : code_(code) {
  if (code_ != Code::kOk) message_ = std::move(message);
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(code_name(code_)) + ": " + message_;
}

Status Status::with_prefix(const std::string& prefix) const {
  if (ok()) return *this;
  Status out(code_, prefix + ": " + message_);
  out.detail_ = detail_;
  return out;
}

Status Status::with_detail(StatusDetail detail) const {
  if (ok()) return *this;
  Status out = *this;
  out.detail_ = std::make_shared<const StatusDetail>(std::move(detail));
  return out;
}

Status Status::with_wire_detail(const std::string& bytes) const {
  if (ok() || bytes.empty()) return *this;
  auto d = decode_status_detail(bytes);
  return d.ok() ? with_detail(std::move(*d)) : *this;
}

std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.to_string(); }

Status Cancelled(std::string m) { return Status(Code::kCancelled, std::move(m)); }
Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
Status DeadlineExceeded(std::string m) { return Status(Code::kDeadlineExceeded, std::move(m)); }
Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
Status AlreadyExists(std::string m) { return Status(Code::kAlreadyExists, std::move(m)); }
Status PermissionDenied(std::string m) { return Status(Code::kPermissionDenied, std::move(m)); }
Status ResourceExhausted(std::string m) { return Status(Code::kResourceExhausted, std::move(m)); }
Status FailedPrecondition(std::string m) { return Status(Code::kFailedPrecondition, std::move(m)); }
Status Aborted(std::string m) { return Status(Code::kAborted, std::move(m)); }
Status OutOfRange(std::string m) { return Status(Code::kOutOfRange, std::move(m)); }
Status Unimplemented(std::string m) { return Status(Code::kUnimplemented, std::move(m)); }
Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }
Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
Status DataLoss(std::string m) { return Status(Code::kDataLoss, std::move(m)); }
Status Unauthenticated(std::string m) { return Status(Code::kUnauthenticated, std::move(m)); }

}  // namespace actorflow
