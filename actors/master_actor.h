// The master actor: runs client steps on the cluster.
//
// For each new (graph version, feeds, fetches, targets) signature it rewrites the graph
// (feeds -> _Arg, fetches -> _Retval), places it on the cluster's devices, partitions it
// per device with _Send/_Recv pairs, and registers each partition with its device actor.
// Each run then sends run_step to every involved device actor with a fresh step id,
// gathers the fetched tensors, and on the first error aborts the step everywhere and
// replies with that error (naming the op or the task). Many runs may be in flight.
//
// Message interface (master_actor_t in actors/interfaces.h):
//   (run_atom, RunRequestPtr)            -> std::vector<Tensor>     one per fetch
//   (devices_atom)                       -> std::vector<DeviceInfo> the devices it places on
//   (devices_atom, std::vector<DeviceInfo>)   replaces the device list (cluster membership)
//   (down_atom, task, reason)            fails every in-flight step that involves `task`
//   (stepret_atom, step_id, device, int32 fetch index, Tensor)   a fetched tensor of a step
//        dispatched over the data plane (from the router)
//   (stepdone_atom, step_id, device, Status)   its outcome (its typed detail included)
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "actors/messages.h"
#include "graph/subgraph.h"
#include "runtime/placer.h"

namespace actorflow {

struct RunRequest {
  GraphPtr graph;              // immutable snapshot of the client's graph
  uint64_t graph_id = 0;       // identifies the client graph across snapshots
  RunSignature sig;
  std::vector<Tensor> feeds;   // one per sig.feeds
  PlacementOptions placement;  // the session's; default_device "" = the master's task CPU:0
  std::chrono::milliseconds timeout{0};  // 0 = none (dead tasks are detected by monitoring)
  // The devices to place on (this task's and connected peers'); empty = the master's own list.
  std::vector<DeviceInfo> devices;
  uint64_t membership_epoch = 0;  // plans are rebuilt when membership changes
  // The step id to run under (a traced step's, armed for tracing on its tasks before it runs:
  // core/step_trace.h); 0 = the master picks one (next_step_id).
  int64_t step_id = 0;
};
using RunRequestPtr = std::shared_ptr<const RunRequest>;

class StepDispatcher;
class DirectSteps;

// The key under which the master caches the plan of `r` (graph, signature, devices, membership
// epoch, placement options); direct-step plans are published under the same key. Pure.
std::string plan_key(const RunRequest& r);

// The prefix of the partition handles a master of `task` gives out: "m<task>.<random nonce>".
// Handles name partitions on devices that several processes' masters share (every worker's on
// the ps devices), so they must differ across processes and across restarts of one task; the
// nonce (64 bits from std::random_device) makes two calls differ, even for one task. Thread-safe.
std::string partition_handle_prefix(const std::string& task);

// Spawns a master that places on `devices` and puts unconstrained ops on `default_device`.
// With a `router` that can dispatch steps over the data plane (StepDispatcher::can_dispatch), runs of
// remote partitions without arguments are sent that way instead of as CAF requests (fewer
// thread hand-offs per step); the router must then deliver stepret/stepdone messages to this
// master. Otherwise CAF requests. Armed fault injection changes neither (faults act in the
// router and the node actor, where messages cross the process boundary).
// With `direct` (may be null), plans whose work all runs on other processes are published
// there once registered, for sessions to run without the master (actors/direct_step.h).
master_actor_t spawn_master_actor(caf::actor_system& sys, std::vector<DeviceInfo> devices,
                              std::string default_device, std::shared_ptr<StepDispatcher> router = nullptr,
                              std::shared_ptr<DirectSteps> direct = nullptr);

}  // namespace actorflow

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorflow::RunRequestPtr)
