// The actors' interfaces: every actor another actor (or another process) talks to, declared as a
// CAF 0.17 typed actor, with the public atoms its messages start with. The compiler checks both
// sides: a behavior that does not implement exactly its interface, or a send or request that no
// handler of the receiver accepts, does not build.
//
// Who is reachable from where:
//   node actor      published on the task's control-plane port; the only actor other processes
//                   reach (it authenticates them, then forwards device messages to its devices).
//   device actor    one per device of the task; in-process only (the node actor, the router and
//                   the master talk to it).
//   master actor    one per task that runs client steps; in-process (Session, Server::master()).
//   variable actor  one per variable of a task's resource container; in-process (device actors).
//   data actor      a worker's input pipeline; in-process (next_batch, embedders).
// Timer messages an actor sends only to itself (its private atoms) are declared in its .cc file,
// which spawns it with its interface extended by them; the handle it hands out is the interface
// below.
//
// Handles are values: copy them freely between threads. A null handle is a valid "none".
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tensor/tensor.h"

namespace actorflow {

class Graph;
struct ResourceCall;
struct RunRequest;
struct ClientRunRequest;
struct DeviceInfo;
struct NodeInfo;
struct ReplicaCall;
namespace net {
class ReplyChannel;
}

// Where the outcome of a step dispatched over the data plane goes (net/wire.h's run frame): back
// on the connection its run request came on (`channel`, when the request asked for that), or else
// to a member's data-plane address (`address`; the router checks it is a member's before it writes
// there). The router makes it when the run request arrives; a device actor only carries it to
// DeviceRouter::reply_step. Plain value; copies refer to the same connection, which they do not
// keep open (a closed one fails the reply).
struct StepReply {
  std::weak_ptr<net::ReplyChannel> channel;
  std::string address;
};

using GraphPtr = std::shared_ptr<const Graph>;
using RunRequestPtr = std::shared_ptr<const RunRequest>;
using ResourceCallPtr = std::shared_ptr<const ResourceCall>;
using TensorList = std::vector<Tensor>;

// ---- public atoms (CAF 0.17: at most 10 characters) ----------------------------------------
using register_atom = caf::atom_constant<caf::atom("register")>;
using deregister_atom = caf::atom_constant<caf::atom("deregistr")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using tensor_atom = caf::atom_constant<caf::atom("tensor")>;
using abort_atom = caf::atom_constant<caf::atom("abortstep")>;
using devices_atom = caf::atom_constant<caf::atom("devices")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using steprun_atom = caf::atom_constant<caf::atom("steprun")>;
using stepret_atom = caf::atom_constant<caf::atom("stepret")>;
using stepdone_atom = caf::atom_constant<caf::atom("stepdone")>;
using down_atom = caf::atom_constant<caf::atom("down")>;
using hello_atom = caf::atom_constant<caf::atom("hello")>;
using auth_atom = caf::atom_constant<caf::atom("auth")>;
using peers_atom = caf::atom_constant<caf::atom("peers")>;
using fault_atom = caf::atom_constant<caf::atom("fault")>;
using shutdown_atom = caf::atom_constant<caf::atom("shutdown")>;
using crun_atom = caf::atom_constant<caf::atom("crun")>;
using cclose_atom = caf::atom_constant<caf::atom("cclose")>;
using resource_atom = caf::atom_constant<caf::atom("resource")>;
using next_atom = caf::atom_constant<caf::atom("next")>;
using replicate_atom = caf::atom_constant<caf::atom("replicate")>;
using servesfor_atom = caf::atom_constant<caf::atom("servesfor")>;
using trace_atom = caf::atom_constant<caf::atom("steptrace")>;

// ---- device actor (actors/device_actor.h) -------------------------------------------------
using device_actor_t = caf::typed_actor<
    // Registers a partition (in-process: the graph itself) under `handle`.
    caf::replies_to<register_atom, std::string, GraphPtr>::with<bool>,
    // Registers a partition from its serialized GraphDef (from another process, via the node).
    caf::replies_to<register_atom, std::string, std::string>::with<bool>,
    // Forgets partition `handle`: true when it was registered.
    caf::replies_to<deregister_atom, std::string>::with<bool>,
    // Runs step `step_id` of partition `handle` with its _Arg values; answers its _Retvals.
    caf::replies_to<run_atom, std::string, int64_t, TensorList>::with<TensorList>,
    // (handle, step_id, reply, keys, tensors): a step dispatched over the data plane; its
    // outcome goes back as `reply` says (DeviceRouter::reply_step), not as a CAF reply;
    // keys[i] -> tensors[i] are _Recv inputs that came with it. In-process only (from the router).
    caf::reacts_to<steprun_atom, std::string, int64_t, StepReply, std::vector<std::string>, TensorList>,
    // (step_id, rendezvous key, tensor): an input of one of the step's _Recv ops.
    caf::reacts_to<tensor_atom, int64_t, std::string, Tensor>,
    // (step_id, why): aborts that step (or marks it aborted if it has not started).
    caf::reacts_to<abort_atom, int64_t, std::string>,
    // Drops the early-arrival tensors past their expiry (the actor's own timer; harmless from
    // anyone else).
    caf::reacts_to<next_atom>,
    // The device's canonical name.
    caf::replies_to<ping_atom>::with<std::string>>;

// ---- node actor (actors/node_actor.h) -----------------------------------------------------
// Requests from other processes are executed only once their node authenticated (hello, auth);
// the device messages name the device after the atom and are forwarded to it.
using node_actor_t = caf::typed_actor<
    // (protocol version, cluster-file fingerprint, client task) -> server nonce.
    caf::replies_to<hello_atom, uint32_t, std::string, std::string>::with<std::string>,
    // (client proof, client nonce) -> (what the task tells peers, server proof).
    caf::replies_to<auth_atom, std::string, std::string>::with<NodeInfo, std::string>,
    // The task's devices as peers see them (each with this node actor as its way in).
    caf::replies_to<devices_atom>::with<std::vector<DeviceInfo>>,
    caf::replies_to<register_atom, std::string, std::string, std::string>::with<bool>,
    caf::replies_to<deregister_atom, std::string, std::string>::with<bool>,
    caf::replies_to<run_atom, std::string, std::string, int64_t, TensorList>::with<TensorList>,
    caf::reacts_to<abort_atom, std::string, int64_t, std::string>,
    // A tensor routed by its key's destination device.
    caf::reacts_to<tensor_atom, int64_t, std::string, Tensor>,
    // (token): stops the node actor when the token is its Server's.
    caf::reacts_to<shutdown_atom, std::string>,
    // The task's name.
    caf::replies_to<ping_atom>::with<std::string>,
    // (fault plan TOML) -> descriptions of the faults this task took (empty plan: clears them).
    caf::replies_to<fault_atom, std::string>::with<std::vector<std::string>>,
    // (task prefixes): connect to these tasks.
    caf::replies_to<peers_atom, std::vector<std::string>>::with<bool>,
    // A remote client's run (actors/client_sessions.h) -> one tensor per fetch.
    caf::replies_to<crun_atom, ClientRunRequest>::with<TensorList>,
    // (client session id): forgets that client session.
    caf::replies_to<cclose_atom, uint64_t>::with<bool>,
    // A primary ps's mutating call, applied to this task's backup copy of the variable
    // (actors/ps_replication.h) -> the call's results (empty for a held or acknowledged update).
    caf::replies_to<replicate_atom, ReplicaCall>::with<TensorList>,
    // ps_replicas = 2: the other ps tasks whose variables this task serves now (NodeInfo::serves_for,
    // as of this moment).
    caf::replies_to<servesfor_atom>::with<std::vector<std::string>>,
    // (step_id, max_events) -> (the task's trace clock in ns, its process token, events): with
    // max_events > 0 arms step `step_id` for tracing in this task's process (events ""); with 0
    // takes its events (core/step_trace.h's encoding) and disarms it. Members only.
    caf::replies_to<trace_atom, int64_t, uint32_t>::with<int64_t, uint64_t, std::string>>;

// ---- master actor (actors/master_actor.h) -------------------------------------------------
using master_actor_t = caf::typed_actor<
    // Runs a client step -> one tensor per fetch.
    caf::replies_to<run_atom, RunRequestPtr>::with<TensorList>,
    // The devices it places on.
    caf::replies_to<devices_atom>::with<std::vector<DeviceInfo>>,
    // Replaces the device list (cluster membership changed).
    caf::reacts_to<devices_atom, std::vector<DeviceInfo>>,
    // (task, reason): fails every in-flight step that involves the task.
    caf::reacts_to<down_atom, std::string, std::string>,
    // (step_id, device, fetch index, tensor): a fetched tensor of a step dispatched over the
    // data plane (from the router).
    caf::reacts_to<stepret_atom, int64_t, std::string, int32_t, Tensor>,
    // (step_id, device, outcome): that step's outcome on the device, with its typed detail
    // (in-process only: the router decodes it from the data plane's done frame).
    caf::reacts_to<stepdone_atom, int64_t, std::string, Status>>;

// ---- variable actor (actors/variable_actor.h) ---------------------------------------------
using variable_actor_t = caf::typed_actor<
    // One method call on the variable (read, assign, apply_*, save, ...) -> its results.
    caf::replies_to<resource_atom, ResourceCallPtr>::with<TensorList>>;

// ---- data actor (actors/data_actor.h) -----------------------------------------------------
using data_actor_t = caf::typed_actor<
    // The next element; OutOfRange at the end of the data, or the pipeline's error.
    caf::replies_to<next_atom>::with<TensorList>>;

// ---- what peers learn of a task -----------------------------------------------------------
// A device of some task.
struct DeviceInfo {
  std::string name;   // canonical full name
  std::string type;   // "CPU" / "GPU"
  int64_t memory_limit = 0;
  std::string description;
  // The device actor: set for a device of this process, null in a DeviceInfo that came from
  // another process (device actors are never exposed).
  device_actor_t actor;
  // The node actor of the device's task, set on the devices a node actor advertises: how a
  // device of another process is reached.
  node_actor_t node;
  // The incarnation of the device's task (a random number its process drew when it started,
  // device/rendezvous_key.h); 0: not known. The rendezvous keys of a plan carry the sender's.
  uint64_t incarnation = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, DeviceInfo& x) {
  return f(caf::meta::type_name("actorflow::DeviceInfo"), x.name, x.type, x.memory_limit, x.description, x.actor,
           x.node, x.incarnation);
}

// What a task tells an authenticated peer about itself.
struct NodeInfo {
  std::string task;                 // "/job:worker/replica:0/task:1"
  std::vector<DeviceInfo> devices;
  std::string data_addr;            // "host:port" of its tensor data plane
  // ps_replicas = 2: the other ps tasks whose variables this task serves now (it took them over
  // when they failed); empty otherwise. A ps task that returns learns from its backup here that
  // its own variables are served there.
  std::vector<std::string> serves_for;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NodeInfo& x) {
  return f(caf::meta::type_name("actorflow::NodeInfo"), x.task, x.devices, x.data_addr, x.serves_for);
}

// ---- replication between ps tasks -----------------------------------------------------------
// A primary ps's mutating variable call, replicated to its backup task's node actor
// ((replicate_atom, ReplicaCall); actors/ps_replication.h). Everything the backup needs to know
// about the replication is a field here, never an attribute of the op: the receiving node actor
// marks the call as replicated (ResourceCall::replica, device/kernel.h) with the primary's task
// from the sender's authenticated hello. The node actor validates every field before use
// (a malformed call is refused with InvalidArgument naming the variable and the field). Plain value.
struct ReplicaCall {
  std::string var;     // the variable's shared name
  std::string method;  // the variable method (device/variable_call.h): "apply_adam", "sync_state", ...
  TensorList args;     // its tensors; uninitialised in the places of those sent over the data plane
  std::string attrs;   // the op's own attributes (encode_call_attrs, actors/ps_replication.h)
  // Tensors sent ahead over the tensor data plane: how many (0: none, else at most
  // ReplicaInbox::kMaxArgs) and the call key their frames carry (ReplicaInbox::frame_key).
  uint32_t data_count = 0;
  std::string data_key;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ReplicaCall& x) {
  return f(caf::meta::type_name("actorflow::ReplicaCall"), x.var, x.method, x.args, x.attrs, x.data_count,
           x.data_key);
}

}  // namespace actorflow

// A step outcome between the router and the master of one process (stepdone_atom): never
// serialized (the data plane carries it as a done frame, net/wire.h).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorflow::Status)
// Where a dispatched step's outcome goes, from the router to a device actor of its process: never
// serialized (a peer cannot send one).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorflow::StepReply)
