// The node actor: one per task (process), published on the task's address. It is the
// task's front door: peers authenticate with it (see actors/auth.h) before they get
// anything, then ask it for the task's devices (whose device actors run partitions).
//
// Message interface (node_actor_t in actors/interfaces.h; every request replies or errors):
//   (hello_atom, uint32 version, string fingerprint, string client_task) -> string server_nonce
//        FailedPrecondition on a protocol version or cluster-file mismatch
//   (auth_atom, string client_proof, string client_nonce) -> (NodeInfo, string server_proof)
//        Unauthenticated (and a log line) when client_proof does not prove the secret. A remote
//        node's answer waits for its connection's proved task (resolve_peer_task), its role.
//        NodeInfo::serves_for: the ps tasks whose copies this task took over (the replicator's
//        taken_over()) and those the serving map says it serves, without itself
//   (devices_atom) -> std::vector<DeviceInfo>              authenticated peers only
//   (ping_atom) -> std::string task name                   authenticated peers only
//   (servesfor_atom) -> std::vector<std::string>           NodeInfo::serves_for as of now;
//        authenticated peers only
//   (peers_atom, std::vector<std::string> task prefixes) -> bool   connect to these tasks
//   (crun_atom, ClientRunRequest) -> std::vector<Tensor>   a remote client's run, on a detached
//        worker (actors/client_sessions.h); authenticated peers only
//   (cclose_atom, uint64 session) -> bool                  forgets that client session
//   (replicate_atom, var, method, args, attrs) -> std::vector<Tensor>   a primary ps's call on
//        this task's backup copy of `var` (actors/ps_replication.h), in arrival order; no fault
//        gate (a delayed call would overtake nothing, but a dropped one would desynchronise
//        the copies). FailedPrecondition when this task keeps no resources.
//   (fault_atom, std::string plan_toml) -> std::vector<std::string>  loads the faults of a fault
//        plan (actors/faults.h) that this task takes part in into this process's FaultInjector and
//        returns their descriptions; an empty plan clears every fault. InvalidArgument for a bad plan.
//   Forwarded to the named local device actor (which replies to the original sender):
//   (register_atom, device, handle, string graph_def) -> bool
//   (deregister_atom, device, handle) -> bool
//   (run_atom, device, handle, step_id, std::vector<Tensor>) -> std::vector<Tensor>
//   (abort_atom, device, step_id, why)
//   (tensor_atom, step_id, key, Tensor)   routed by the key's destination device
// Device actors are never exposed to other processes: peers reach them only through here,
// so one check covers everything. Anonymous messages are refused (every cross-process
// message of actorflow carries a sender).
// Roles (PeerRole; docs/security.md "Roles"): an authenticated remote node's role comes from the
// task its control-plane connection proved (the handshake's name, under TLS its certificate's:
// not the name it says in hello), found once when its auth succeeds. Clients ('_' jobs: tools,
// remote client sessions) may send hello, auth, devices, ping, servesfor, crun (graphs without
// ops that touch files) and cclose; the operator (job _chaos) also fault; members (tasks)
// everything. A request above the sender's role is answered PermissionDenied naming it and the
// role it needs (logged at most once a second); a one-way message (abort, tensor) is dropped.
// Robustness against members too: exit messages of every reason, kill included, are dropped
// before they reach the mailbox (CAF 0.17 would end the actor on kill before any handler), error
// messages are ignored, only (shutdown_atom, token) from its own process stops it, and a request
// that claims the node actor itself as sender is dropped (it would answer itself forever).
// Messages from unauthenticated remote senders are dropped, logged, and answered with
// Unauthenticated; nothing is executed for them. Local senders are trusted.
// Dropping a peer: a remote node that fails authentication (wrong or no secret) has its CAF
// connection closed about 100 ms later (after the error reply left); one that says hello or
// sends anything but does not complete authentication within auth_timeout is closed then
// (actors/peer_link.h). The peer sees its connection closed (its proxies go down).
// Fault injection: requests from remote peers pass the receiving task's link faults first
// (FaultInjector::on_receive with the peer's task, known from its hello): a dropped request is
// never answered (the sender's timeout or heartbeats notice), a delayed one is handled later.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "actors/client_sessions.h"
#include "actors/messages.h"
#include "actors/peer_link.h"
#include "actors/resources.h"

namespace actorflow {

// hello_atom, auth_atom, peers_atom, fault_atom, shutdown_atom and NodeInfo: actors/interfaces.h.

// What an authenticated peer may ask of a node actor (docs/security.md "Roles"), from least to
// most. Checked by the receiving node actor for every request.
enum class PeerRole {
  kClient,    // tools and remote client sessions (a '_' job other than _chaos): handshake,
              // devices, ping, serving query, client runs without ops that touch files
  kOperator,  // `actorflow chaos` (job _chaos): a client's rights, plus loading fault plans
  kMember,    // a task of the cluster: everything the runtime needs (partitions, steps, tensors,
              // replicated calls, peer lists, fault plans)
};

// The role of a peer that proved (connection handshake, and under TLS its certificate:
// net::certificate_allows) the task name `task`: "" (unknown) and '_' jobs are clients, job
// "_chaos" is an operator, any other job a member. With the cluster secret alone the name is the
// peer's claim (every holder of the secret can claim any name); with TLS it is its certificate's.
// Pure.
PeerRole peer_role(const std::string& task);
// "client", "operator", "member". Pure.
const char* peer_role_name(PeerRole r);

// The remote CAF nodes that passed authentication, with their role. Thread-safe; shared by the
// node actor (which adds) and the device actors (which check senders).
class AuthenticatedPeers {
 public:
  void add(const caf::node_id& n, PeerRole r = PeerRole::kMember) {
    std::lock_guard<std::mutex> l(mu_);
    roles_[n] = r;
  }
  void remove(const caf::node_id& n) { std::lock_guard<std::mutex> l(mu_); roles_.erase(n); }
  bool contains(const caf::node_id& n) const { std::lock_guard<std::mutex> l(mu_); return roles_.count(n) != 0; }
  // The role of an authenticated node, or kClient for one that is not (callers check contains).
  PeerRole role(const caf::node_id& n) const {
    std::lock_guard<std::mutex> l(mu_);
    auto it = roles_.find(n);
    return it == roles_.end() ? PeerRole::kClient : it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<caf::node_id, PeerRole> roles_;
};

// True when the current message of `self` may be executed: it comes from this process or
// from an authenticated node. Logs and returns false otherwise.
bool sender_allowed(caf::local_actor* self, const AuthenticatedPeers* peers, const char* what);
// True when `a` lives in another process than `self`.
template <class Handle>
bool is_remote(const caf::local_actor* self, const Handle& a) {
  return a && a.node() != self->home_system().node();
}

class PsReplicator;
class PsServing;
class DetachedActors;
class ReplicaInbox;

struct NodeActorConfig {
  std::string task;          // "/job:worker/replica:0/task:1"
  std::string fingerprint;   // ClusterSpec::fingerprint()
  std::string secret;        // cluster secret ("" for loopback clusters without one)
  std::vector<DeviceInfo> devices;   // with the local device actors
  std::string data_addr;
  std::shared_ptr<AuthenticatedPeers> peers;
  // How long a remote node that contacted us may take to authenticate before it is dropped.
  std::chrono::milliseconds auth_timeout{5000};
  // Sweeps connections that never complete CAF's handshake, every limit / 2 (may be null).
  std::shared_ptr<SilentConnectionSweeper> sweeper;
  // Connects to the given tasks (blocking; run on a detached worker) so this task can send
  // them tensors. Answers (peers_atom, tasks).
  std::function<Status(const std::vector<std::string>& tasks)> connect_peers;
  // Remote client sessions (actors/client_sessions.h); null: this task refuses client runs.
  std::shared_ptr<ClientSessions> clients;
  // The task's resource container, for replicated calls of a primary ps (null: refused).
  std::shared_ptr<ResourceManager> resources;
  // A ps task's replicator with ps_replicas = 2 (null otherwise): told which primaries replicate
  // to this task and when one's node actor is gone (actors/ps_replication.h).
  std::shared_ptr<PsReplicator> replicator;
  // Where the data plane puts the tensors that replicated calls sent ahead of themselves
  // (ReplicaCall::data_count; null: such calls are refused).
  std::shared_ptr<ReplicaInbox> replica_inbox;
  // ps_replicas = 2: which ps task serves which ps task's variables, as this task sees it (null
  // otherwise). With the replicator it makes NodeInfo::serves_for: the tasks this one took over.
  std::shared_ptr<PsServing> serving;
  // The only way to stop the node actor short of exit_reason::kill: (shutdown_atom, token) from
  // its Server. Exit and error messages are ignored (logged, rate limited), whoever claims to
  // send them. Empty: a random token nobody knows (the actor then ends only with its system).
  std::string shutdown_token;
  // Where the node actor records the detached workers it spawns, for its Server's teardown
  // (actors/detached_actors.h; may be null).
  std::shared_ptr<DetachedActors> detached;
};

// Spawns the node actor of a task. The caller owns the handle; thread-safe.
node_actor_t spawn_node_actor(caf::actor_system& sys, NodeActorConfig cfg);

// Registers NodeInfo and ReplicaCall with a config (called by register_actorflow_types users that
// need it).
void register_node_types(caf::actor_system_config& cfg);

}  // namespace actorflow
