#include "net/frames.h"

#include <type_traits>

namespace actorflow {
namespace net {

Status DoneFrame::status() const {
  if (code == 0) return Status::OK();
  return Status(code_from_wire(code), message).with_wire_detail(detail);
}

DoneFrame DoneFrame::of(const std::string& device, const Status& s) {
  DoneFrame d;
  d.device = device;
  d.code = static_cast<int32_t>(s.code());
  if (!s.ok()) {
    d.message = s.message().empty() ? std::string("error") : s.message();
    if (const StatusDetail* detail = s.any_detail()) d.detail = encode_status_detail(*detail);
  }
  return d;
}

const std::string& frame_name(const FrameBody& b) {
  return std::visit(
      [](const auto& f) -> const std::string& {
        using T = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<T, TensorFrame> || std::is_same_v<T, ErrorFrame> || std::is_same_v<T, FeedFrame>)
          return f.key;
        else
          return f.device;
      },
      b);
}

Tensor* frame_tensor(FrameBody& b) {
  if (auto* t = std::get_if<TensorFrame>(&b)) return &t->tensor;
  if (auto* f = std::get_if<FeedFrame>(&b)) return &f->tensor;
  if (auto* r = std::get_if<RetFrame>(&b)) return &r->tensor;
  return nullptr;
}

const Tensor* frame_tensor(const FrameBody& b) { return frame_tensor(const_cast<FrameBody&>(b)); }

}  // namespace net
}  // namespace actorflow
