// The rendezvous key of a cross-device edge, parsed once.
//
// A _Send and its _Recv share one key (their attr "tensor_name"): which device sends, which
// incarnation of the sending task the partition was planned for, which device receives, and
// which tensor of the graph travels ("node:index", or "^node" for a control edge). The
// partitioner (runtime/partition.h) builds the keys once when a step is planned; the executor
// parses each _Send's and _Recv's key once when a partition is registered; a key that comes
// from the network is parsed once where it enters the process. Every hop after that reads the
// fields (and the task names, resolved once) from the value: nothing re-parses the string.
//
// The wire form (what the graph attr and the data plane's frames carry):
//   src_device;dst_device;edge                   incarnation 0: not known (tools, tests)
//   src_device;INCARNATION;dst_device;edge       INCARNATION: 16 lowercase hex digits, not all 0
// Device names start with '/'; no field is empty or holds ';' or a control character; the whole
// key is at most kMaxWireBytes bytes.
//
// The incarnation is the sending task's (a random number each process draws when it starts,
// actors/server.h): a tensor a previous incarnation of a restarted task sent carries the old one,
// so a receiver that knows the task's current incarnation recognises it as stale
// (check_incarnation) instead of parking it as a tensor of the step.
//
// This lives in device/ (not runtime/) because the executor (device/executor.h), which runs the
// _Send and _Recv nodes, holds the parsed keys. Immutable value; thread-safe to share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace actorflow {

class RendezvousKey {
 public:
  // The longest wire form accepted (a longer key is refused by make and parse).
  static constexpr size_t kMaxWireBytes = 4096;

  // The key of `edge` from `src_device` (whose task runs as `src_incarnation`; 0: not known) to
  // `dst_device`. InvalidArgument naming the field when one is empty, holds ';' or a control
  // character, a device name does not start with '/', or the key would exceed kMaxWireBytes.
  // Pure; thread-safe.
  static Result<RendezvousKey> make(std::string src_device, uint64_t src_incarnation, std::string dst_device,
                                    std::string edge);
  // The key whose wire form is `wire` (either form above). InvalidArgument saying what is wrong
  // (the key's first bytes quoted, control characters escaped) for a key that is too long, has
  // a wrong number of fields, an empty or malformed field, or a bad incarnation. parse(k.wire())
  // == k for every key k. Pure; thread-safe.
  static Result<RendezvousKey> parse(std::string_view wire);

  // An empty key (every field empty; valid() false): a placeholder to assign a parsed key to.
  RendezvousKey() = default;

  // False only for a default-constructed key.
  bool valid() const { return !wire_.empty(); }
  const std::string& src_device() const { return src_device_; }
  // The sending task's incarnation the key was planned for; 0: not known (never stale).
  uint64_t src_incarnation() const { return src_incarnation_; }
  const std::string& dst_device() const { return dst_device_; }
  const std::string& edge() const { return edge_; }
  // The task prefixes of the two devices ("/job:w/replica:0/task:1"; a device name without
  // "/device:" is its own task), as config/task_names.h's task_of_device gives them.
  const std::string& src_task() const { return src_task_; }
  const std::string& dst_task() const { return dst_task_; }
  // The wire form, built once.
  const std::string& wire() const { return wire_; }

  // True when both keys name the same edge between the same devices, whatever their incarnations.
  bool same_edge(const RendezvousKey& o) const {
    return edge_ == o.edge_ && src_device_ == o.src_device_ && dst_device_ == o.dst_device_;
  }
  // OK when this key may come from the sending task as it runs now, `current` its incarnation
  // (0: not known): either incarnation is 0, or they are equal. Otherwise Aborted naming the key,
  // the source task and both incarnations: the tensor was sent by (or planned for) another
  // incarnation of the task. Pure.
  Status check_incarnation(uint64_t current) const;

  friend bool operator==(const RendezvousKey& a, const RendezvousKey& b) { return a.wire_ == b.wire_; }
  friend bool operator!=(const RendezvousKey& a, const RendezvousKey& b) { return !(a == b); }

 private:
  std::string src_device_, dst_device_, edge_, src_task_, dst_task_, wire_;
  uint64_t src_incarnation_ = 0;
};

// An incarnation as the wire form writes it: 16 lowercase hex digits. Pure.
std::string incarnation_hex(uint64_t incarnation);

// A fresh, non-zero incarnation for a task that starts now (random). Thread-safe.
uint64_t new_incarnation();

}  // namespace actorflow
