// DeviceRef: how the master reaches a partition's device, wherever it is.
//
// A device of this process is its device actor; a device of another task is reached through
// that task's node actor, which authenticates the sender and forwards to its device actor (so
// those messages name the device, and graphs travel serialized). DeviceRef hides the
// difference: callers request a registration, a run or an abort and never branch on where the
// device lives. on_other_process() remains for the decisions that depend on it (a step over the
// data plane, a direct-step plan), not for the message shapes.
//
// A DeviceRef borrows `self` and the DeviceInfo: use it within the handler that made it. Not
// thread-safe (an actor's own state).
#pragma once

#include <caf/all.hpp>

#include <string>
#include <utility>
#include <vector>

#include "actors/messages.h"
#include "actors/node_actor.h"
#include "graph/graph_def.h"

namespace actorflow {

template <class Self>
class DeviceRef {
 public:
  DeviceRef(Self* self, const DeviceInfo& device) : self_(self), device_(device) {}

  const std::string& name() const { return device_.name; }
  // True when the device belongs to another process (reached through its task's node actor):
  // a DeviceInfo from another process carries no device actor, only its task's node actor.
  bool on_other_process() const { return !device_.actor; }

  // Registers partition `graph` as `handle`; the response handle answers a bool (then(...)).
  auto request_register(caf::duration timeout, const std::string& handle, const GraphPtr& graph) const {
    return on_other_process()
               ? self_->request(device_.node, timeout, register_atom::value, device_.name, handle,
                                serialize_graph(*graph))
               : self_->request(device_.actor, timeout, register_atom::value, handle, graph);
  }
  // Runs step `step_id` of partition `handle` with `args`; answers std::vector<Tensor> retvals.
  auto request_run(caf::duration timeout, const std::string& handle, int64_t step_id, std::vector<Tensor> args) const {
    return on_other_process()
               ? self_->request(device_.node, timeout, run_atom::value, device_.name, handle, step_id, std::move(args))
               : self_->request(device_.actor, timeout, run_atom::value, handle, step_id, std::move(args));
  }
  // Tells the device to abort step `step_id` because of `why` (one-way).
  void abort(int64_t step_id, const std::string& why) const {
    if (on_other_process()) self_->send(device_.node, abort_atom::value, device_.name, step_id, why);
    else self_->send(device_.actor, abort_atom::value, step_id, why);
  }

 private:
  Self* self_;
  const DeviceInfo& device_;
};

template <class Self>
DeviceRef<Self> device_ref(Self* self, const DeviceInfo& device) {
  return DeviceRef<Self>(self, device);
}

}  // namespace actorflow
