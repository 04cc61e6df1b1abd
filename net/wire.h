// The data plane's frame format: one header followed by the tensor's raw bytes.
//
// After the handshake (net/handshake.h) a client sends frames and the server only reads. A frame:
//
//   fixed header, 32 bytes, little-endian:
//     magic "AFTF" u32 | kind u8 | dtype u8 | rank u16 | key length u32 |
//     error length u32 | step_id i64 | data bytes u64
//   dims      rank x i64
//   key       key length bytes
//   error     error length bytes (kinds 2 and 6 only)
//   data      data bytes: the tensor's elements, row-major, in the host's (little-endian) byte order
//
// Kinds:
//   1 tensor  a tensor for the rendezvous key `key`
//   2 error   the sender reports an error (the error text) instead of the tensor for `key`
//   Step control (steps dispatched over the data plane, actors/router.h). The key area holds
//   the frame's typed fields, each as u32 length | bytes, in this order (StepFields):
//   3 feed    key                                   + a tensor: a _Recv's input, ahead of its run
//   4 run     device, handle, reply_to, from_task   no tensor, no error: run a registered partition
//   5 ret     device, fetch index (4 bytes, i32)     + a tensor: a fetched value of a step
//   6 done    device, status code (4 bytes, i32)     error text = the status message (none when OK)
//   7 query   device, reply_to                      no tensor, no error: is step `step_id` running there?
//   8 state   device, running (4 bytes, i32: 1 yes, 0 no) the answer to a query; 0 means the task
//             never got the step's run request or already sent its outcome (before this answer)
//
// The data block is written straight from the tensor's buffer (writev) and read straight into a
// freshly allocated tensor: no per-element work, no staging copy. Receivers validate every field
// before allocating (see FrameLimits).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "tensor/types.h"

namespace actorflow {
namespace net {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the tensor wire format assumes a little-endian host");

constexpr uint32_t kFrameMagic = 0x46544641;  // "AFTF" little-endian
constexpr size_t kFrameFixedBytes = 32;
constexpr int kMaxFrameRank = 32;

enum class FrameKind : uint8_t {
  kTensor = 1, kError = 2, kFeed = 3, kRun = 4, kRet = 5, kDone = 6, kQuery = 7, kState = 8
};

// True for the step-control kinds (feed, run, ret, done, query, state). Pure.
inline bool is_step_control(FrameKind k) { return k >= FrameKind::kFeed && k <= FrameKind::kState; }
// True for the kinds that carry a tensor (tensor, feed, ret). Pure.
inline bool carries_tensor(FrameKind k) {
  return k == FrameKind::kTensor || k == FrameKind::kFeed || k == FrameKind::kRet;
}

// The typed fields of a step-control frame; which ones a kind uses is in the diagram above.
// Plain value.
struct StepFields {
  std::string key;        // feed: the rendezvous key of the _Recv it feeds
  std::string device;     // run, ret, done, query, state: the partition's device
  std::string handle;     // run: the registered partition
  std::string reply_to;   // run, query: where the outcome/answer goes ("" = back on this connection)
  std::string from_task;  // run: the task that dispatched the step
  int32_t number = 0;     // ret: the fetch index; done: the status code (0 = OK); state: 1 running, 0 not
  // done: the failed status's typed detail (encode_status_detail, core/status.h); empty: none.
  // decode_step_fields checks that it decodes.
  std::string detail;
};

// The key area of a step-control frame of `kind` (is_step_control) holding `f`'s fields for that
// kind. Pure.
std::string encode_step_fields(FrameKind kind, const StepFields& f);
// Decodes the key area (`p`, `n` bytes) of a step-control frame of `kind`. DataLoss naming the
// kind when the fields are missing, truncated, of the wrong size, or followed by extra bytes.
Result<StepFields> decode_step_fields(FrameKind kind, const char* p, size_t n);

// Bounds a receiver enforces on incoming frames (so a bad peer cannot make it allocate absurdly).
struct FrameLimits {
  uint64_t max_tensor_bytes = uint64_t{4} << 30;  // 4 GiB
  uint32_t max_key_bytes = 64 * 1024;
  uint32_t max_error_bytes = 64 * 1024;
};

// A decoded fixed header plus the variable part's sizes.
struct FrameHeader {
  FrameKind kind = FrameKind::kTensor;
  DType dtype = DType::kInvalid;
  uint16_t rank = 0;
  uint32_t key_bytes = 0;
  uint32_t error_bytes = 0;
  int64_t step_id = 0;
  uint64_t data_bytes = 0;
  // Bytes of dims + key + error that follow the fixed header.
  size_t variable_bytes() const { return size_t{rank} * 8 + key_bytes + error_bytes; }
};

// Encodes the fixed header, dims, key and error of a frame into `out` (replacing its contents).
// For a tensor frame pass the tensor's dtype, dims and byte count and an empty `error`; for an
// error frame pass DType::kInvalid, no dims, 0 bytes and a non-empty `error`. The caller then
// sends `out` followed by exactly `data_bytes` raw bytes. InvalidArgument when a field exceeds the
// format's limits (rank > 32, key or error longer than 4 GiB).
Status encode_frame_prefix(FrameKind kind, int64_t step_id, const std::string& key, DType dtype,
                           const std::vector<int64_t>& dims, uint64_t data_bytes, const std::string& error,
                           std::string* out);

// Decodes and validates the 32 fixed bytes at `p`: magic, kind, dtype, rank, key/error sizes and
// the data size against `limits`. DataLoss describing the first bad field.
Result<FrameHeader> decode_frame_fixed(const unsigned char* p, const FrameLimits& limits);

// Decodes the dims (rank x i64 at `p`) and checks that they are non-negative, that a tensor may
// have them (Shape::checked_num_elements) and that their product times the dtype's size equals
// h.data_bytes without overflow. DataLoss otherwise.
Result<std::vector<int64_t>> decode_frame_dims(const FrameHeader& h, const unsigned char* p);

}  // namespace net
}  // namespace actorflow
