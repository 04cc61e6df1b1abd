#include "actors/messages.h"

#include <chrono>
#include <cstdio>
#include <memory>

#include "actors/client_sessions.h"
#include "config/task_names.h"
#include "core/logging.h"
#include "tensor/pooling_allocator.h"

namespace actorflow {

caf::error save_tensor_raw(caf::serializer& f, Tensor& t) {
  uint8_t dt = static_cast<uint8_t>(t.dtype());
  std::vector<int64_t> dims = t.shape().dims();
  size_t n = t.is_initialized() && t.on_host() ? t.bytes() : 0;
  if (auto e = f(dt, dims)) return e;
  if (auto e = f.begin_sequence(n)) return e;
  if (n > 0) {
    if (auto e = f.apply_raw(n, t.raw_data())) return e;
  }
  return f.end_sequence();
}

caf::error load_tensor_raw(caf::deserializer& f, caf::binary_deserializer& source, Tensor& t) {
  uint8_t dt = 0;
  std::vector<int64_t> dims;
  if (auto e = f(dt, dims)) return e;
  size_t n = 0;
  if (auto e = f.begin_sequence(n)) return e;
  if (dt == 0) {
    // The uninitialised tensor: no bytes follow (a sender that claims some is malformed).
    if (n != 0) return caf::sec::invalid_argument;
    t = Tensor();
    return f.end_sequence();
  }
  // Nothing is allocated before the shape describes exactly the claimed bytes, and they are here.
  const DType type = static_cast<DType>(dt);
  if (!tensor_bytes_match(type, dims, n)) return caf::sec::invalid_argument;
  if (n > source.remaining()) return caf::sec::end_of_stream;
  auto out = Tensor::allocate(cpu_host_pool(), type, Shape(dims));
  if (!out.ok() || out->bytes() != n) return caf::sec::invalid_argument;
  if (n > 0) {
    if (auto e = f.apply_raw(n, out->raw_data())) return e;
  }
  if (!bool_bytes_valid(type, out->raw_data(), n)) return caf::sec::invalid_argument;
  t = std::move(*out);
  return f.end_sequence();
}

bool tensor_bytes_match(DType type, const std::vector<int64_t>& dims, size_t present) {
  const size_t elem = dtype_size(type);
  if (elem == 0 || dims.size() > 64) return false;
  // A shape no tensor may have (e.g. zero elements, but its other dims multiply past 2^60) is
  // refused like a lying one: Tensor would refuse it after the fact.
  for (int64_t d : dims)
    if (d < 0) return false;
  if (!Shape(dims).valid_for_tensor()) return false;
  bool empty = false;
  for (int64_t d : dims) {
    if (d < 0) return false;
    empty = empty || d == 0;
  }
  if (empty) return present == 0;  // zero elements, however large the other dimensions
  uint64_t total = elem;
  for (int64_t d : dims)
    if (__builtin_mul_overflow(total, static_cast<uint64_t>(d), &total)) return false;
  return total == present;
}
void ignore_remote_exits(caf::scheduled_actor* self, std::string who,
                         std::function<void(const caf::error&)> before_quit) {
  auto last = std::make_shared<std::chrono::steady_clock::time_point>();
  auto note = [last, who](const std::string& what) {
    const auto now = std::chrono::steady_clock::now();
    if (now - *last < std::chrono::seconds(1)) return;
    *last = now;
    AF_LOG(WARNING) << who << " ignored " << what << " from another process";
  };
  self->set_exit_handler([self, note, before_quit](caf::scheduled_actor*, caf::exit_msg& m) {
    if (m.source && m.source.node() != self->home_system().node()) {
      note("an exit message (" + caf::to_string(m.reason) + ")");
      return;
    }
    if (!m.reason) return;
    if (before_quit) before_quit(m.reason);
    self->quit(std::move(m.reason));
  });
  self->set_error_handler([self, note](caf::scheduled_actor*, caf::error& e) {
    const auto& sender = self->current_sender();
    if (sender && sender->node() != self->home_system().node()) {
      note("an error message (" + caf::to_string(e) + ")");
      return;
    }
    self->quit(std::move(e));
  });
}

namespace {
const caf::atom_value kCategory = caf::atom("actorflow");
}

caf::error to_caf_error(const Status& s) {
  if (s.ok()) return caf::none;
  // The typed detail, when there is one, rides as a second string: its wire form
  // (encode_status_detail), decoded and validated by from_caf_error on the other side.
  if (const StatusDetail* d = s.any_detail())
    return caf::error(static_cast<uint8_t>(s.code()), kCategory, caf::make_message(s.message(), encode_status_detail(*d)));
  return caf::error(static_cast<uint8_t>(s.code()), kCategory, caf::make_message(s.message()));
}

Status step_deadline_error(int64_t step_id, const std::string& device, std::chrono::milliseconds waited) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.2f", static_cast<double>(waited.count()) / 1000.0);
  return DeadlineExceeded("step " + std::to_string(step_id) + ": no outcome from " + device + " (task " +
                          task_of_device(device) + ") after " + secs +
                          " s, the step's deadline (SessionOptions::timeout, else [server] step_timeout_secs)");
}

Status from_caf_error(const caf::error& e, const std::string& where) {
  if (!e) return Status::OK();
  const std::string prefix = where.empty() ? "" : where + ": ";
  if (e.category() == kCategory) {
    // From another process the code is whatever the peer sent: one outside Code's range reads
    // as Unknown, and a detail that does not decode is dropped (Status::with_wire_detail).
    const Code code = code_from_wire(e.code());
    const caf::message& ctx = e.context();
    if (ctx.match_elements<std::string, std::string>())
      return Status(code, ctx.get_as<std::string>(0)).with_wire_detail(ctx.get_as<std::string>(1));
    std::string msg;
    if (ctx.match_elements<std::string>()) msg = ctx.get_as<std::string>(0);
    return Status(code, msg);
  }
  if (e.category() == caf::atom("system")) {
    auto code = static_cast<caf::sec>(e.code());
    std::string what = caf::to_string(code);
    switch (code) {
      case caf::sec::request_timeout:
        return DeadlineExceeded(prefix + "no answer in time (" + what + ")");
      case caf::sec::request_receiver_down:
      case caf::sec::remote_linking_failed:
      case caf::sec::no_route_to_receiving_node:
      case caf::sec::cannot_connect_to_node:
        return Unavailable(prefix + "task unreachable (" + what + ")");
      default:
        return Unavailable(prefix + what);
    }
  }
  if (e.category() == caf::atom("exit")) {
    return Unavailable(prefix + "actor exited (" + caf::to_string(static_cast<caf::exit_reason>(e.code())) + ")");
  }
  return Status(Code::kUnknown, prefix + "error " + std::to_string(e.code()) + " in category " + caf::to_string(e.category()));
}

void register_actorflow_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<Tensor>("actorflow::Tensor");
  cfg.add_message_type<DeviceInfo>("actorflow::DeviceInfo");
  register_client_session_types(cfg);
  cfg.add_error_category(kCategory, [](uint8_t code, caf::atom_value, const caf::message& ctx) -> std::string {
    std::string msg;
    if (ctx.match_elements<std::string>() || ctx.match_elements<std::string, std::string>())
      msg = ctx.get_as<std::string>(0);
    return std::string(code_name(static_cast<Code>(code))) + ": " + msg;
  });
}

}  // namespace actorflow
