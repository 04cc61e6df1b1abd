// The data plane's frames as values: one type per frame kind of net/wire.h, each holding exactly
// the fields its kind has, and Frame, the envelope a TensorServer delivers and a TensorClient
// sends (a step id, one of the kinds, and the connection it came on).
//
// Receivers dispatch on the kind with std::visit or std::get_if: no field means different things
// for different kinds, and a kind cannot be read as another. The byte layout stays in net/wire.h;
// net/tensor_transport.cc converts between the two.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "net/wire.h"
#include "tensor/tensor.h"

namespace actorflow {
namespace net {

class ReplyChannel;

// Kind 1: a tensor for rendezvous key `key`. The tensor is initialised and on the host when
// sent; a received one is a fresh buffer.
struct TensorFrame {
  std::string key;
  Tensor tensor;
};
// Kind 2: the sender reports `error` instead of the tensor for `key`. A receiver also delivers
// one for a tensor, feed or ret frame whose tensor it could not take (allocation refused): then
// `of` is that frame's kind and `key` its key (tensor, feed) or device (ret); the stream stays in
// sync. A sender leaves `of` at kTensor.
struct ErrorFrame {
  std::string key;
  std::string error;  // never empty on the wire
  FrameKind of = FrameKind::kTensor;
  int32_t index = 0;  // of == kRet: the fetch index
};
// Kind 3: an input of a _Recv (`key`) of the run request that follows in the same write.
struct FeedFrame {
  std::string key;
  Tensor tensor;
};
// Kind 4: run the registered partition `handle` on `device`; its outcome goes to `reply_to`
// (a member's data-plane address, or "" for the connection this frame came on).
struct RunFrame {
  std::string device;
  std::string handle;
  std::string reply_to;
  std::string from_task;  // the task that dispatched the step
};
// Kind 5: fetched value number `index` of the step on `device`.
struct RetFrame {
  std::string device;
  int32_t index = 0;
  Tensor tensor;
};
// Kind 6: the step on `device` ended: `code` 0 (OK) or a Code with its message and typed detail
// (encode_status_detail, core/status.h; empty: none). status() gives it back as a Status.
struct DoneFrame {
  std::string device;
  int32_t code = 0;
  std::string message;
  std::string detail;
  // The outcome: OK for code 0, else the code (unknown codes read as Unknown), the message and
  // the detail. Pure.
  Status status() const;
  // The frame reporting `s` for `device`. Pure.
  static DoneFrame of(const std::string& device, const Status& s);
};
// Kind 7: is the step running on `device`? The answer goes to `reply_to` as RunFrame's does.
struct QueryFrame {
  std::string device;
  std::string reply_to;
};
// Kind 8: the answer to a query: whether the step runs on `device` (false: it never got the run
// request, or it already sent its outcome, before this answer).
struct StateFrame {
  std::string device;
  bool running = false;
};

// The alternatives in wire-kind order: index + 1 is the FrameKind (kind_of).
using FrameBody =
    std::variant<TensorFrame, ErrorFrame, FeedFrame, RunFrame, RetFrame, DoneFrame, QueryFrame, StateFrame>;

// The wire kind of `b`. Pure.
inline FrameKind kind_of(const FrameBody& b) { return static_cast<FrameKind>(b.index() + 1); }

// One frame of step `step_id`. Plain value (copies share the tensor's buffer).
struct Frame {
  int64_t step_id = 0;
  FrameBody body;
  // Set by TensorServer on the frames it delivers: the connection the frame came on (replies to a
  // request go back on it; its peer() names the sender). Ignored when sending.
  std::shared_ptr<ReplyChannel> reply{};

  Frame() = default;
  Frame(int64_t step, FrameBody b) : step_id(step), body(std::move(b)) {}
  // A tensor frame (kind 1): the common case.
  Frame(int64_t step, std::string key, Tensor t) : step_id(step), body(TensorFrame{std::move(key), std::move(t)}) {}

  FrameKind kind() const { return kind_of(body); }
  // The body as `T`, or null when it is another kind. Valid while this frame is.
  template <typename T>
  const T* as() const { return std::get_if<T>(&body); }
  template <typename T>
  T* as() { return std::get_if<T>(&body); }
};

// What names frame body `b`: the rendezvous key of a tensor, error or feed frame, the device of
// a run, ret, done, query or state frame. Valid while `b` is. Pure.
const std::string& frame_name(const FrameBody& b);
// The tensor of a tensor, feed or ret frame; null for the other kinds. Valid while `b` is. Pure.
const Tensor* frame_tensor(const FrameBody& b);
Tensor* frame_tensor(FrameBody& b);

// A short name of `k` for messages ("tensor", "feed", "ret", ...). Pure. (Defined in wire.cc.)
const char* frame_kind_name(FrameKind k);

}  // namespace net
}  // namespace actorflow
