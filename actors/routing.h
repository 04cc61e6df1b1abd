// The two faces of a process's router (actors/router.h's ProcessRouter implements both, one
// object per process):
//   DeviceRouter    what a device actor needs: deliver a _Send's tensor to the device of its
//                   _Recv, answer a step dispatched to it over the data plane, publish the
//                   partitions a data-plane reader may run itself;
//   StepDispatcher  what a master (and a session's direct steps) needs: send a step's run
//                   request to another process's device over the data plane, wait for or ask
//                   about its outcome, abort it.
// Each consumer holds only the face it uses. Both are thread-safe (shared by the actors and
// threads of one process).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/interfaces.h"
#include "core/status.h"
#include "device/rendezvous_key.h"
#include "tensor/tensor.h"

namespace actorflow {

namespace net {
class ClientConnection;
}
class InlinePartitions;

// Routes a _Send's tensor to the device actor that owns the matching _Recv (the key's
// destination device; device/rendezvous_key.h, the master's partitioning builds the keys), and
// carries the outcome of a dispatched step back to whoever dispatched it.
class DeviceRouter {
 public:
  virtual ~DeviceRouter() = default;
  // Delivers (step_id, key, t) to key.dst_device(): what a _Send calls, with the key its
  // executor parsed once (`key` is borrowed for the call). Errors name the destination device.
  // The default hands the wire form to route() (routers that match keys only as strings).
  virtual Status route_key(int64_t step_id, const RendezvousKey& key, const Tensor& t) {
    return route(step_id, key.wire(), t);
  }
  // Delivers (step_id, key, t) given the key's wire form (a router that needs its fields parses
  // it, once); errors name the destination device, or say why the key is malformed.
  virtual Status route(int64_t step_id, const std::string& key, const Tensor& t) = 0;
  // Sends the outcome of a dispatched step (retvals indexed by fetch; uninitialised ones are
  // skipped) of `device` back as `reply` says: on the connection the request came on
  // (StepDispatcher::dispatch_step_awaiting), or to a member's data-plane address. Unavailable
  // when that connection is closed; PermissionDenied for an address that is no member's. The
  // default: Unimplemented.
  virtual Status reply_step(const StepReply& reply, int64_t step_id, const std::string& device,
                            const Status& status, const std::vector<Tensor>& retvals) {
    (void)reply; (void)step_id; (void)device; (void)status; (void)retvals;
    return Unimplemented("step dispatch over the data plane");
  }
  // The partitions whose dispatched steps may run on the data plane's reader thread, or null
  // (device actors then publish nothing). Owned by the router.
  virtual InlinePartitions* inline_partitions() { return nullptr; }
  // How many dispatched steps this process ran on a data-plane reader thread.
  virtual uint64_t inline_steps_run() const { return 0; }
};

// Step dispatch over the data plane (the defaults say "not available", and callers then use CAF
// requests). A dispatched step's device actor gets
//   (steprun_atom, handle, step_id, StepReply reply, vector<string> keys, vector<Tensor> feeds)
// and reports its outcome with DeviceRouter::reply_step; the master of the process it goes to
// then gets one (stepret_atom, step_id, device, int32 fetch index, Tensor) per
// fetched tensor and finally (stepdone_atom, step_id, device, Status) (the outcome with its
// typed detail).
class StepDispatcher {
 public:
  virtual ~StepDispatcher() = default;
  // True when run requests for `device` (of another process) can be sent now without
  // connecting first.
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
  // that takes no locks. Several threads may wait on one connection.
  virtual Status await_dispatched(net::ClientConnection& conn, const std::function<bool()>& done,
                                  std::chrono::microseconds spin, std::chrono::milliseconds wait) {
    (void)conn; (void)done; (void)spin; (void)wait;
    return Unimplemented("step dispatch over the data plane");
  }
  // Tells `node` (the node actor of another process) to abort step `step_id` of its device
  // `device` because of `why`. Sent as this process's node actor, so that the peer, which
  // executes only what authenticated nodes send, accepts it; the default sends it anonymously.
  virtual void abort_remote_step(const node_actor_t& node, const std::string& device, int64_t step_id,
                                 const std::string& why) {
    caf::anon_send(node, abort_atom::value, device, step_id, why);
  }
  // Asks the task of `device` (another process) whether step `step_id`, dispatched there with
  // dispatch_step or dispatch_step_awaiting, is running there (net/wire.h: query). The answer
  // travels as an outcome does: back on the connection the step went on when
  // `on_request_connection` (read by await_dispatched), else to this process's data-plane
  // address; it reaches DirectSteps::on_state. "Not running" means the task never got the run
  // request or already sent the outcome ahead of the answer. OK when the query was written;
  // Unavailable when it could not be; the default Unimplemented (callers then wait for their
  // deadline).
  virtual Status query_step(const std::string& device, int64_t step_id, bool on_request_connection) {
    (void)device; (void)step_id; (void)on_request_connection;
    return Unimplemented("step queries over the data plane");
  }
};

}  // namespace actorflow
