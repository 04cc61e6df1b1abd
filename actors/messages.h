// The actors' message payloads: Tensor's CAF inspector, the type registration, and the one place
// where Status and caf::error convert into each other. The atoms, each actor's typed interface
// and DeviceInfo/NodeInfo are in actors/interfaces.h (included here).
#pragma once

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <string>
#include <vector>

#include "actors/interfaces.h"
#include "core/status.h"
#include "device/device.h"
#include "graph/graph.h"
#include "tensor/tensor.h"

namespace actorflow {

// The atoms, the actor interfaces and DeviceInfo are in actors/interfaces.h.

// True when `type` is a known dtype, `dims` has at most 64 entries, none negative, and
// product(dims) * dtype_size(type), computed without overflow, equals `present` (the bytes that
// arrived). Decoders call it before allocating anything for a tensor. Pure; thread-safe.
bool tensor_bytes_match(DType type, const std::vector<int64_t>& dims, size_t present);

// The raw paths of the Tensor inspectors below for CAF's binary (de)serializers (BASP): the same
// bytes on the wire as the generic path (dtype, dims, then the data as one length-prefixed byte
// block), without the intermediate std::string copy on either side nor zero-filling the received
// tensor. load: checks that the claimed length describes the shape exactly and is present in the
// buffer before allocating anything (from cpu_host_pool()); invalid_argument / end_of_stream
// otherwise. Thread-safe (no shared state).
caf::error save_tensor_raw(caf::serializer& f, Tensor& t);
caf::error load_tensor_raw(caf::deserializer& f, caf::binary_deserializer& source, Tensor& t);

// Tensors cross CAF as dtype, dims and one byte block (no per-element work). Large tensors
// between processes use the data plane in net/ instead.
template <class Inspector>
typename std::enable_if<Inspector::reads_state, typename Inspector::result_type>::type inspect(Inspector& f,
                                                                                                 Tensor& t) {
  if constexpr (std::is_same<Inspector, caf::serializer>::value) return save_tensor_raw(f, t);
  uint8_t dt = static_cast<uint8_t>(t.dtype());
  std::vector<int64_t> dims = t.shape().dims();
  std::string bytes;  // same encoding as a byte vector; see the loading side
  if (t.is_initialized() && t.on_host() && t.bytes()) {
    const char* p = static_cast<const char*>(t.raw_data());
    bytes.assign(p, p + t.bytes());
  }
  return f(caf::meta::type_name("actorflow::Tensor"), dt, dims, bytes);
}

template <class Inspector>
typename std::enable_if<Inspector::writes_state, typename Inspector::result_type>::type inspect(Inspector& f,
                                                                                                  Tensor& t) {
  if constexpr (std::is_same<Inspector, caf::deserializer>::value) {
    if (auto* bin = dynamic_cast<caf::binary_deserializer*>(&f)) return load_tensor_raw(f, *bin, t);
  }
  uint8_t dt = 0;
  std::vector<int64_t> dims;
  // A std::string, not a std::vector<char>: CAF 0.17's binary deserializer resizes a byte vector
  // to the length the sender claims (up to 4 GiB) before it checks that many bytes are present,
  // but checks a string's length against the bytes present first.
  std::string bytes;
  auto load = [&]() -> caf::error {
    if (dt == 0) {
      t = Tensor();
      return caf::none;
    }
    DType type = static_cast<DType>(dt);
    // Nothing is allocated before the shape is known to describe exactly the bytes that came.
    if (!tensor_bytes_match(type, dims, bytes.size())) return caf::sec::invalid_argument;
    if (!bool_bytes_valid(type, bytes.data(), bytes.size())) return caf::sec::invalid_argument;
    Tensor out(type, Shape(dims));
    if (bytes.size() != out.bytes()) return caf::sec::invalid_argument;
    if (!bytes.empty()) std::memcpy(out.raw_data(), bytes.data(), bytes.size());
    t = std::move(out);
    return caf::none;
  };
  return f(caf::meta::type_name("actorflow::Tensor"), dt, dims, bytes, caf::meta::load_callback(load));
}

// ---- blocking calls from threads outside the actor system ------------------------------
// caf::scoped_actor for a thread that is not one of the actor system's (a session's caller, a
// tool's main thread). CAF 0.17's scoped_actor makes its system's logger the thread's current
// logger (a thread-local reference) and never lets go: a thread that outlives the system keeps
// the logger alive, and ~actor_system then waits for the logger's destructor forever (a Server
// destroyed on one thread while another thread had run a step hung there). This one ends the
// thread's reference when it ends. Use it like caf::scoped_actor (self->request(...)); one per
// thread at a time.
class ScopedActor {
 public:
  explicit ScopedActor(caf::actor_system& sys) : self_(std::in_place, sys) {}
  ~ScopedActor() {
    self_.reset();
    caf::logger::set_current_actor_system(nullptr);
  }
  ScopedActor(const ScopedActor&) = delete;
  ScopedActor& operator=(const ScopedActor&) = delete;
  caf::blocking_actor* operator->() { return self_->ptr(); }
  caf::scoped_actor& operator*() { return *self_; }

 private:
  std::optional<caf::scoped_actor> self_;
};

// ---- Status <-> caf::error (the only conversion point) ---------------------------------
// Our errors travel with category atom "actorflow", code = Code, context = the message.
caf::error to_caf_error(const Status& s);
// Converts any caf::error (ours or CAF's own, e.g. request timeouts or unreachable remote
// actors) into a Status whose message says what happened; `where` names the peer/task.
Status from_caf_error(const caf::error& e, const std::string& where = "");
// The error of a step that got no outcome from `device` within its deadline: DeadlineExceeded
// naming the step, the device, its task and how long the step waited. Pure.
Status step_deadline_error(int64_t step_id, const std::string& device, std::chrono::milliseconds waited);

// Makes `self` ignore exit messages whose source lives in another process, and error messages
// (not responses) sent from another process, logging at most one line per second; local ones keep
// CAF's default effect (a non-normal exit or an error ends the actor). Call first in the behavior
// factory of every actor that other processes may reach. `who` names the actor in the log.
// `before_quit`, when given, runs on a local exit just before the actor quits (to answer what it
// still owes: requests whose responses it holds).
void ignore_remote_exits(caf::scheduled_actor* self, std::string who,
                         std::function<void(const caf::error&)> before_quit = nullptr);

// Registers every actorflow message type and the error category with `cfg`. Call once per
// actor_system_config before creating the actor_system (Server does this for its own
// system; embedders call it on theirs).
void register_actorflow_types(caf::actor_system_config& cfg);

}  // namespace actorflow

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorflow::GraphPtr)
