// The device actor: runs the graph partitions registered on one device.
//
// Each step of a partition runs as a StepExecution: ready ops run inside the actor's
// handler; a _Recv whose tensor has not arrived parks the step and the actor returns to its
// mailbox, so no thread ever waits. Tensors for steps that have not started yet are
// buffered. Device actors are spawned detached (one thread each), so long kernels never
// hold a CAF scheduler thread.
//
// Message interface: device_actor_t in actors/interfaces.h.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "actors/messages.h"
#include "actors/resources.h"
#include "actors/restart.h"
#include "actors/routing.h"
#include "device/device.h"
#include "device/executor.h"

namespace actorflow {

namespace net {
class ClientConnection;
}

// The lock under which a device's kernels run, one step at a time: the device actor holds `mu`
// while it runs a step's kernels; a data-plane reader thread may run a self-contained step
// (InlinePartitions) when it gets `mu` without waiting. `open` (guarded by `mu`) turns false
// for good when the device actor failed past its restart budget or ended.
struct DeviceGate {
  std::mutex mu;
  bool open = true;
};

// Partitions whose steps a data-plane reader thread may run itself, instead of handing them to
// the device actor: on the latency-bound path of a tiny step that saves a thread wake-up. Only
// self-contained partitions (Executor::self_contained: synchronous kernels, no _Send) of CPU
// devices, taking no arguments, are published (by their device actors, at registration), and
// a step runs inline only when every _Recv tensor came with its run request and the device is
// idle (its gate is free). Thread-safe.
class InlinePartitions {
 public:
  struct Entry {
    std::shared_ptr<const Executor> exec;
    std::shared_ptr<DeviceGate> gate;
  };
  // Publishes (replaces) partition `handle` of `device`.
  void publish(const std::string& device, const std::string& handle, Entry e);
  // Withdraws partition `handle` of `device` / every partition of `device`.
  void withdraw(const std::string& device, const std::string& handle);
  void withdraw_device(const std::string& device);
  // The entry, or nullopt.
  std::optional<Entry> find(const std::string& device, const std::string& handle) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, Entry> entries_;
};

// Runs step `step_id` of the published partition `e` of device `device` on the calling thread,
// with `keys[i] -> tensors[i]` for its _Recvs, if that can finish without waiting: every _Recv
// key is among `keys` and the device's gate is open and free right now. Returns nullopt, having
// done nothing (the tensors are left alone), when not; otherwise the step's outcome and its
// fetches (by _Retval index; empty on error). A kernel's exception fails the step naming the
// node (as StepExecution does anywhere); anything else thrown becomes Internal naming the
// device: nothing escapes to the caller. Thread-safe.
std::optional<std::pair<Status, std::vector<Tensor>>> try_run_inline(const InlinePartitions::Entry& e,
                                                                     const std::string& device, int64_t step_id,
                                                                     std::vector<std::string>& keys,
                                                                     std::vector<Tensor>& tensors);


// Builds the wire form of the rendezvous key of a cross-device edge without an incarnation,
// "src;dst;edge" (RendezvousKey::make's; tools and tests). Pure.
std::string make_rendezvous_key(const std::string& src_device, const std::string& dst_device,
                                const std::string& edge);

// Optional per-node kernel override (the runtime's variable ops); may be null.
using KernelOverrideFn = Executor::KernelOverride;

// What a device actor keeps of tensors that arrive before their step's run request (the
// early-arrival store): at most `max_bytes` in all (the oldest steps' tensors are dropped first
// to make room; a tensor larger than the whole budget is dropped at once), and none longer than
// `ttl` (a step that has not started by then is not coming: its tensors are dropped). Every drop
// is a WARNING (at most one line a second per device, naming the step and the sending device)
// and counts in actorflow_early_tensors_dropped_total{reason="budget"|"expired"}. A step whose
// tensor was dropped fails by its own deadline, as if the tensor had been lost on the wire.
struct EarlyTensorLimits {
  size_t max_bytes = size_t{256} << 20;
  std::chrono::milliseconds ttl{60000};
};
// The limits of this process: the defaults above, or ACTORFLOW_MAX_EARLY_TENSOR_BYTES (bytes)
// and ACTORFLOW_EARLY_TENSOR_TTL_MS (milliseconds) when set to positive integers (read once;
// other values are ignored with a WARNING). Thread-safe.
EarlyTensorLimits early_tensor_limits();

// Spawns the device actor of `device` (borrowed; must outlive the actor) in `sys`, detached.
// `resources` (may be null) is the task's resource container used by variable kernels;
// `restarts` bounds its in-place restarts after exceptions (its Server's [supervisor] budget).
device_actor_t spawn_device_actor(caf::actor_system& sys, Device* device, std::shared_ptr<DeviceRouter> router,
                              std::shared_ptr<ResourceManager> resources = nullptr,
                              KernelOverrideFn kernel_override = nullptr, RestartPolicy restarts = RestartPolicy{});

}  // namespace actorflow
