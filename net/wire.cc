#include "net/wire.h"

#include <cstring>
#include <limits>

#include "net/frames.h"

namespace actorflow {
namespace net {
namespace {

template <typename T>
void put_le(char* p, T v) {
  std::memcpy(p, &v, sizeof v);  // little-endian host (static_assert in wire.h)
}
template <typename T>
T get_le(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

bool valid_wire_dtype(uint8_t d) {
  return d >= static_cast<uint8_t>(DType::kFloat32) && d <= static_cast<uint8_t>(DType::kBool);
}

}  // namespace

Status encode_frame_prefix(FrameKind kind, int64_t step_id, const std::string& key, DType dtype,
                           const std::vector<int64_t>& dims, uint64_t data_bytes, const std::string& error,
                           std::string* out) {
  if (dims.size() > static_cast<size_t>(kMaxFrameRank))
    return InvalidArgument("tensor of rank " + std::to_string(dims.size()) + " exceeds the wire format's rank limit " +
                           std::to_string(kMaxFrameRank));
  if (key.size() > std::numeric_limits<uint32_t>::max() || error.size() > std::numeric_limits<uint32_t>::max())
    return InvalidArgument("frame key or error text too long");
  out->resize(kFrameFixedBytes + dims.size() * 8 + key.size() + error.size());
  char* p = &(*out)[0];
  put_le<uint32_t>(p, kFrameMagic);
  p[4] = static_cast<char>(kind);
  p[5] = static_cast<char>(dtype);
  put_le<uint16_t>(p + 6, static_cast<uint16_t>(dims.size()));
  put_le<uint32_t>(p + 8, static_cast<uint32_t>(key.size()));
  put_le<uint32_t>(p + 12, static_cast<uint32_t>(error.size()));
  put_le<int64_t>(p + 16, step_id);
  put_le<uint64_t>(p + 24, data_bytes);
  p += kFrameFixedBytes;
  for (int64_t d : dims) {
    put_le<int64_t>(p, d);
    p += 8;
  }
  if (!key.empty()) std::memcpy(p, key.data(), key.size());
  p += key.size();
  if (!error.empty()) std::memcpy(p, error.data(), error.size());
  return Status::OK();
}

const char* frame_kind_name(FrameKind k) {
  switch (k) {
    case FrameKind::kTensor: return "tensor";
    case FrameKind::kError: return "error";
    case FrameKind::kFeed: return "feed";
    case FrameKind::kRun: return "run";
    case FrameKind::kRet: return "ret";
    case FrameKind::kDone: return "done";
    case FrameKind::kQuery: return "query";
    case FrameKind::kState: return "state";
  }
  return "unknown";
}

namespace {

const char* step_kind_name(FrameKind k) { return is_step_control(k) ? frame_kind_name(k) : "non-step"; }

void put_field(std::string* out, const char* p, size_t n) {
  char len[4];
  put_le<uint32_t>(len, static_cast<uint32_t>(n));
  out->append(len, 4);
  out->append(p, n);
}

}  // namespace

std::string encode_step_fields(FrameKind kind, const StepFields& f) {
  std::string out;
  auto str = [&](const std::string& v) { put_field(&out, v.data(), v.size()); };
  auto num = [&](int32_t v) {
    char b[4];
    put_le<int32_t>(b, v);
    put_field(&out, b, 4);
  };
  switch (kind) {
    case FrameKind::kFeed: str(f.key); break;
    case FrameKind::kRun: str(f.device); str(f.handle); str(f.reply_to); str(f.from_task); break;
    case FrameKind::kRet:
    case FrameKind::kState: str(f.device); num(f.number); break;
    case FrameKind::kDone: str(f.device); num(f.number); str(f.detail); break;
    case FrameKind::kQuery: str(f.device); str(f.reply_to); break;
    default: break;
  }
  return out;
}

Result<StepFields> decode_step_fields(FrameKind kind, const char* p, size_t n) {
  StepFields f;
  size_t at = 0;
  const std::string what = std::string(step_kind_name(kind)) + " frame";
  auto field = [&](std::string* v) -> Status {
    if (n - at < 4) return DataLoss(what + ": truncated field length at byte " + std::to_string(at));
    const uint32_t len = get_le<uint32_t>(reinterpret_cast<const unsigned char*>(p + at));
    at += 4;
    if (n - at < len) return DataLoss(what + ": field of " + std::to_string(len) + " bytes overruns the key area");
    v->assign(p + at, len);
    at += len;
    return Status::OK();
  };
  auto number = [&](int32_t* v) -> Status {
    std::string b;
    AF_RETURN_IF_ERROR(field(&b));
    if (b.size() != 4) return DataLoss(what + ": a number field of " + std::to_string(b.size()) + " bytes, not 4");
    *v = get_le<int32_t>(reinterpret_cast<const unsigned char*>(b.data()));
    return Status::OK();
  };
  switch (kind) {
    case FrameKind::kFeed: AF_RETURN_IF_ERROR(field(&f.key)); break;
    case FrameKind::kRun:
      AF_RETURN_IF_ERROR(field(&f.device));
      AF_RETURN_IF_ERROR(field(&f.handle));
      AF_RETURN_IF_ERROR(field(&f.reply_to));
      AF_RETURN_IF_ERROR(field(&f.from_task));
      break;
    case FrameKind::kRet:
    case FrameKind::kState:
      AF_RETURN_IF_ERROR(field(&f.device));
      AF_RETURN_IF_ERROR(number(&f.number));
      break;
    case FrameKind::kDone:
      AF_RETURN_IF_ERROR(field(&f.device));
      AF_RETURN_IF_ERROR(number(&f.number));
      AF_RETURN_IF_ERROR(field(&f.detail));
      if (!f.detail.empty()) {
        if (f.number == 0) return DataLoss(what + ": a typed detail on a successful outcome");
        auto d = decode_status_detail(f.detail);
        if (!d.ok()) return DataLoss(what + ": " + d.status().message());
      }
      break;
    case FrameKind::kQuery:
      AF_RETURN_IF_ERROR(field(&f.device));
      AF_RETURN_IF_ERROR(field(&f.reply_to));
      break;
    default: return DataLoss("not a step-control frame kind: " + std::to_string(static_cast<int>(kind)));
  }
  if (at != n) return DataLoss(what + ": " + std::to_string(n - at) + " bytes after its fields");
  return f;
}

Result<FrameHeader> decode_frame_fixed(const unsigned char* p, const FrameLimits& limits) {
  const uint32_t magic = get_le<uint32_t>(p);
  if (magic != kFrameMagic) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", magic);
    return DataLoss(std::string("bad frame magic ") + buf);
  }
  FrameHeader h;
  const uint8_t kind = p[4];
  const uint8_t dtype = p[5];
  h.rank = get_le<uint16_t>(p + 6);
  h.key_bytes = get_le<uint32_t>(p + 8);
  h.error_bytes = get_le<uint32_t>(p + 12);
  h.step_id = get_le<int64_t>(p + 16);
  h.data_bytes = get_le<uint64_t>(p + 24);
  if (h.key_bytes > limits.max_key_bytes)
    return DataLoss("frame key of " + std::to_string(h.key_bytes) + " bytes exceeds the limit of " +
                    std::to_string(limits.max_key_bytes));
  if (h.error_bytes > limits.max_error_bytes)
    return DataLoss("frame error text of " + std::to_string(h.error_bytes) + " bytes exceeds the limit of " +
                    std::to_string(limits.max_error_bytes));
  if (kind == static_cast<uint8_t>(FrameKind::kTensor) || kind == static_cast<uint8_t>(FrameKind::kFeed) ||
      kind == static_cast<uint8_t>(FrameKind::kRet)) {
    h.kind = static_cast<FrameKind>(kind);
    if (!valid_wire_dtype(dtype)) return DataLoss("bad frame dtype " + std::to_string(dtype));
    h.dtype = static_cast<DType>(dtype);
    if (h.rank > kMaxFrameRank)
      return DataLoss("frame rank " + std::to_string(h.rank) + " exceeds " + std::to_string(kMaxFrameRank));
    if (h.error_bytes != 0) return DataLoss("tensor frame carries error text");
    if (h.data_bytes > limits.max_tensor_bytes)
      return DataLoss("tensor of " + std::to_string(h.data_bytes) + " bytes exceeds the limit of " +
                      std::to_string(limits.max_tensor_bytes) + " bytes");
  } else if (kind == static_cast<uint8_t>(FrameKind::kError)) {
    h.kind = FrameKind::kError;
    if (dtype != 0 || h.rank != 0 || h.data_bytes != 0)
      return DataLoss("error frame carries tensor fields");
    if (h.error_bytes == 0) return DataLoss("error frame without error text");
  } else if (kind == static_cast<uint8_t>(FrameKind::kRun) || kind == static_cast<uint8_t>(FrameKind::kDone) ||
             kind == static_cast<uint8_t>(FrameKind::kQuery) || kind == static_cast<uint8_t>(FrameKind::kState)) {
    h.kind = static_cast<FrameKind>(kind);
    if (dtype != 0 || h.rank != 0 || h.data_bytes != 0)
      return DataLoss(std::string(step_kind_name(h.kind)) + " frame carries tensor fields");
    if (h.kind != FrameKind::kDone && h.error_bytes != 0)
      return DataLoss(std::string(step_kind_name(h.kind)) + " frame carries error text");
  } else {
    return DataLoss("bad frame kind " + std::to_string(kind));
  }
  return h;
}

Result<std::vector<int64_t>> decode_frame_dims(const FrameHeader& h, const unsigned char* p) {
  std::vector<int64_t> dims(h.rank);
  unsigned __int128 elements = 1;
  bool overflow = false;
  for (int i = 0; i < h.rank; ++i) {
    dims[i] = get_le<int64_t>(p + 8 * i);
    if (dims[i] < 0) return DataLoss("negative dimension " + std::to_string(dims[i]) + " in frame");
    elements *= static_cast<uint64_t>(dims[i]);
    if (elements > (static_cast<unsigned __int128>(1) << 64)) overflow = true;  // saturate the check
    if (overflow) elements = static_cast<unsigned __int128>(1) << 65;
  }
  if (!carries_tensor(h.kind)) return dims;
  // The shape rule every tensor keeps (tensor/types.h): no zero-element shape whose other dims
  // multiply past 2^60 either (Tensor::allocate would refuse it after the bytes were read).
  if (auto n = Shape(dims).checked_num_elements(); !n.ok())
    return DataLoss("frame shape: " + n.status().message());
  const unsigned __int128 bytes = elements * dtype_size(h.dtype);
  if (overflow || bytes != h.data_bytes)
    return DataLoss("frame shape and dtype describe " + (overflow ? std::string("more than 2^64") : std::to_string(static_cast<uint64_t>(bytes))) +
                    " bytes but the frame announces " + std::to_string(h.data_bytes));
  return dims;
}

}  // namespace net
}  // namespace actorflow
