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

// Routes a _Send's tensor to the device actor that owns the matching _Recv: the key's
// destination device (device/rendezvous_key.h; the master's partitioning builds the keys).
// Thread-safe; shared by the device actors of one process.
class Router {
 public:
  virtual ~Router() = default;
  // Delivers (step_id, key, t) to key.dst_device(): what a _Send calls, with the key its
  // executor parsed once (`key` is borrowed for the call). Errors name the destination device.
  // The default hands the wire form to route() (routers that match keys only as strings).
  virtual Status route_key(int64_t step_id, const RendezvousKey& key, const Tensor& t) {
    return route(step_id, key.wire(), t);
  }
  // Delivers (step_id, key, t) given the key's wire form (a router that needs its fields parses
  // it, once); errors name the destination device, or say why the key is malformed.
  virtual Status route(int64_t step_id, const std::string& key, const Tensor& t) = 0;

  // Step dispatch over the data plane (optional: the defaults say "not available", and callers
  // then use CAF requests). A dispatched step's device actor gets
  //   (steprun_atom, handle, step_id, string reply_to, vector<string> keys, vector<Tensor> feeds)
  // and reports its outcome with reply_step(); the master of the process at `reply_to` then
  // gets one (stepret_atom, step_id, device, int32 fetch index, Tensor) per fetched tensor and
  // finally (stepdone_atom, step_id, device, Status) (the outcome with its typed detail).
  //
  // True when run requests for `device` (of another process) can be sent now without
  // connecting first. Thread-safe.
  virtual bool can_dispatch(const std::string& device) { (void)device; return false; }
  // Like can_dispatch, but also checks (a system call) that the peer has not closed the
  // connection since. For liveness checks while a dispatched step waits.
  virtual bool dispatch_connection_open(const std::string& device) { return can_dispatch(device); }
  // Opens the data-plane connection run requests for `device` would use (blocks: connect and
  // authenticate, bounded by the transport's timeouts). OK when can_dispatch(device) may now be
  // true; Unavailable/Unimplemented when steps for it cannot go over the data plane.
  virtual Status open_dispatch(const std::string& device) {
    (void)device;
    return Unimplemented("step dispatch over the data plane");
  }
  // Sends the run request of step `step_id` of partition `handle` on `device`, on behalf of task
  // `from_task`, preceded (in the same write) by `feeds`: tensors for _Recvs of that partition,
  // as (rendezvous key, tensor). Unavailable when it could not be written.
  virtual Status dispatch_step(const std::string& device, const std::string& handle, int64_t step_id,
                               const std::string& from_task,
                               const std::vector<std::pair<std::string, Tensor>>& feeds = {}) {
    (void)device; (void)handle; (void)step_id; (void)from_task; (void)feeds;
    return Unimplemented("step dispatch over the data plane");
  }
  // Like dispatch_step, but the outcome (the same ret and done messages) comes back on the
  // connection the request went on, not to a reply address: whoever waits for it reads it with
  // await_dispatched() on its own thread, no reader thread in between. Returns that connection
  // (shared with other requests to the same task), or a null one when the request went as
  // dispatch_step() sends it instead (a link fault met it: the outcome then comes through the
  // process's reader threads). Unavailable as dispatch_step.
  virtual Result<std::shared_ptr<net::ClientConnection>> dispatch_step_awaiting(
      const std::string& device, const std::string& handle, int64_t step_id, const std::string& from_task,
      const std::vector<std::pair<std::string, Tensor>>& feeds) {
    (void)device; (void)handle; (void)step_id; (void)from_task; (void)feeds;
    return Unimplemented("step dispatch over the data plane");
  }
  // Reads outcomes arriving on `conn` (of any step dispatched on it: each goes where a reply
  // address would have taken it) until `done()` holds, `wait` passes (OK both) or the
  // connection fails (Unavailable). Polls for the first `spin`. `done` must be a cheap check
  // that takes no locks. Thread-safe: several threads may wait on one connection.
  virtual Status await_dispatched(net::ClientConnection& conn, const std::function<bool()>& done,
                                  std::chrono::microseconds spin, std::chrono::milliseconds wait) {
    (void)conn; (void)done; (void)spin; (void)wait;
    return Unimplemented("step dispatch over the data plane");
  }
  // Tells `node` (the node actor of another process) to abort step `step_id` of its device
  // `device` because of `why`. Sent as this process's node actor, so that the peer, which
  // executes only what authenticated nodes send, accepts it; the default sends it anonymously.
  // Thread-safe.
  virtual void abort_remote_step(const node_actor_t& node, const std::string& device, int64_t step_id,
                                 const std::string& why) {
    caf::anon_send(node, abort_atom::value, device, step_id, why);
  }
  // The partitions whose dispatched steps may run on the data plane's reader thread, or null
  // (device actors then publish nothing). Owned by the router.
  virtual InlinePartitions* inline_partitions() { return nullptr; }
  // How many dispatched steps this process ran on a data-plane reader thread. Thread-safe.
  virtual uint64_t inline_steps_run() const { return 0; }
  // Asks the task of `device` (another process) whether step `step_id`, dispatched there with
  // dispatch_step or dispatch_step_awaiting, is running there (net/wire.h: query). The answer
  // travels as an outcome does: back on the connection the step went on when
  // `on_request_connection` (read by await_dispatched), else to this process's data-plane
  // address; it reaches DirectSteps::on_state. "Not running" means the task never got the run
  // request or already sent the outcome ahead of the answer. OK when the query was written;
  // Unavailable when it could not be; the default Unimplemented (callers then wait for their
  // deadline). Thread-safe.
  virtual Status query_step(const std::string& device, int64_t step_id, bool on_request_connection) {
    (void)device; (void)step_id; (void)on_request_connection;
    return Unimplemented("step queries over the data plane");
  }
  // Sends the outcome of a dispatched step (retvals indexed by fetch; uninitialised ones are
  // skipped) of `device` back to `reply_to`: a data-plane address, or a token for the connection
  // the request came on (see dispatch_step_awaiting).
  virtual Status reply_step(const std::string& reply_to, int64_t step_id, const std::string& device,
                            const Status& status, const std::vector<Tensor>& retvals) {
    (void)reply_to; (void)step_id; (void)device; (void)status; (void)retvals;
    return Unimplemented("step dispatch over the data plane");
  }
};


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
device_actor_t spawn_device_actor(caf::actor_system& sys, Device* device, std::shared_ptr<Router> router,
                              std::shared_ptr<ResourceManager> resources = nullptr,
                              KernelOverrideFn kernel_override = nullptr, RestartPolicy restarts = RestartPolicy{});

}  // namespace actorflow
