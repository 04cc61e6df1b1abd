#include "net/frames.h"

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

}  // namespace net
}  // namespace actorflow
