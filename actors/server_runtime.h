// The runtime's side of af::Server: what actorflow's own sessions, supervisor, tools and tests use
// of a server beyond the public API (include/actorflow/server.h): its devices, routing,
// membership, cluster and options, the in-process registry, ps failover. Not a public header
// (not installed among the public ones; programs never need it). Brings no CAF header.
//
//   ServerRuntime rt(server);                 // a view; the Server must outlive it
//   auto router = rt.router();
//
// ServerRuntime is a non-owning view of one Server (two pointers, copyable): it is valid while
// that server lives. Its methods are as thread-safe as the Server's (any thread) unless a
// comment says otherwise.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actorflow/server.h"
#include "core/status.h"

namespace actorflow {

class ClusterSpec;
struct ClusterInit;
class DirectSteps;
class Graph;
class Membership;
class PsServing;
class ResourceManager;
class ProcessRouter;
class ServerGate;
struct DeviceInfo;
struct ServerOptions;
struct TaskId;

// True when `host` names this machine: loopback, its hostname, or one of its addresses.
// Thread-safe.
bool is_local_host(const std::string& host);

class ServerRuntime {
 public:
  // A view of `server`, which must outlive it (and every copy).
  explicit ServerRuntime(Server& server);

  // The in-process server registered under `target`, or nullptr. The pointer is not owning and
  // is valid until that server is destroyed. Thread-safe.
  static Server* find(const std::string& target);
  // The gate of the in-process server registered under `target` (see gate()), or null; taken
  // under the registry's lock, so the server cannot be destroyed in between. Thread-safe.
  static std::shared_ptr<ServerGate> gate_of(const std::string& target);

  // This task's device-name prefix, e.g. "/job:localhost/replica:0/task:0". Valid for the
  // server's life.
  const std::string& task_prefix() const;
  // The cluster the server belongs to (empty for local servers). Valid for the server's life.
  const ClusterSpec& cluster() const;
  // This task's [server] options from the cluster file (defaults for local servers). Sessions on
  // the server apply its placement policy: log_device_placement turns placement logging on for
  // every session, allow_soft_placement = false forbids soft placement for every session. Valid
  // for the server's life.
  const ServerOptions& server_options() const;

  // Connects (bounded retry) to every task that `graph` places ops on and returns the devices of
  // this task and those tasks. Blocks; called by Session::run from the client thread.
  // `task_aliases` (PlacementOptions::task_aliases) redirect the tasks the graph names.
  Result<std::vector<DeviceInfo>> cluster_devices_for(const Graph& graph, std::chrono::milliseconds timeout,
                                                      const std::map<std::string, std::string>& task_aliases = {});
  // What sessions pass to use the server (actors/server_gate.h): open from creation until
  // stop(), which closes it and cancels the waits of the calls inside; ~Server waits, bounded,
  // until they have left. Shared with the caller; never null.
  std::shared_ptr<ServerGate> gate() const;
  // The membership of a cluster server (nullptr for local servers); owned by the server.
  Membership* membership();
  // The task's resource container (variables), shared.
  const std::shared_ptr<ResourceManager>& resources() const;
  // This task's devices (name, type, memory, device actor). Valid for the server's life.
  const std::vector<DeviceInfo>& devices() const;
  // The direct-step plans and waiting steps of the server (actors/direct_step.h), shared with
  // the caller (Session::run holds it for the length of a step). Never null after creation.
  std::shared_ptr<DirectSteps> direct_steps() const;
  // Routes tensors and step dispatches of the server's devices (data plane included), shared
  // with the caller; after the server stops it routes nothing.
  std::shared_ptr<ProcessRouter> router() const;
  // With [supervisor] ps_replicas = 2, which ps task serves each ps task's variables as this
  // process sees it (actors/ps_replication.h; updated when a ps task goes down), else null.
  // Shared with the caller.
  std::shared_ptr<PsServing> ps_serving() const;
  // A step run by this process failed with `why`. A ps task's refusal (the typed detail
  // ServedBy, core/status.h: a backup copy whose primary lives, or a returned ps task whose
  // variables are served elsewhere), or a variable not initialized (the detail Uninitialized)
  // where a failed-over route leads, makes this process refresh its routes (refresh_ps_serving);
  // the message text is never read. Called by Session::run on the client
  // thread; a no-op without ps_serving().
  void note_step_failure(const Status& why);
  // What refresh_ps_serving found.
  struct PsRefresh {
    bool changed = false;       // a route changed (logged)
    bool all_answered = false;  // every ps task answered: the routes are as the ps tasks say
  };
  // ps_replicas = 2: asks every ps task that answers now (one connection attempt each, then a
  // request bounded by the peer timeout) which ps tasks it serves for, and routes each ps task to
  // the one that claims it (the first after it in index order, cyclically), or to itself when it
  // or the task it is routed to answers and nobody claims it; a task that is silent, as is its
  // route's task, and that nobody claims keeps its route (PsServing::follow_claims). A change is
  // logged with `why`. Blocks the calling thread; never call it from an actor.
  PsRefresh refresh_ps_serving(const std::string& why);

 private:
  friend class Server;  // the factories build the server through the steps below
  Status init_local(const LocalServerOptions& opts);
  Status init(const std::string& task_prefix, const DeviceOptions& dopts);
  // Cluster mode: each step below builds one part, in this order (init_cluster calls them).
  Status init_cluster(const ClusterSpec& cluster, const TaskId& task);
  // The task's address, the cluster's security and this task's options (ClusterInit, server.cc).
  Result<ClusterInit> cluster_task(const ClusterSpec& cluster, const TaskId& task);
  // ps_replicas = 2 on a ps task: its replicator (backup = the next ps task); fills `c.ps_peers`.
  Status init_ps_replication(ClusterInit& c);
  // Membership (heartbeats to every peer) and, with ps_replicas = 2, the ps serving map it updates.
  void init_membership(ClusterInit& c);
  // The node actor's configuration: who it serves, which peers it trusts, its sweeper.
  void init_node_config(ClusterInit& c);
  // The tensor data plane (listener, client, replica inbox), wired to the router.
  Status init_data_plane(ClusterInit& c);
  // Spawns the node actor; its unexpected end ends the process.
  void init_node_actor(ClusterInit& c);
  // The control plane on the task's port, and the metrics endpoint when configured.
  Status init_control_plane(ClusterInit& c);
  Status init_metrics(const ClusterInit& c);
  Status connect_tasks(const std::vector<std::string>& task_prefixes);
  // A replicated ps task (ps_replicas = 2) at start: asks the other ps tasks (`ps_peers`: task
  // prefix and address, its backup first; one attempt each) whether one took this task's
  // variables over, and its backup again at every reconnection of the replicator; if so this
  // task's serving map says so, and kernels' accesses to variables it does not hold are refused
  // with the ServedBy detail instead of creating empty ones.
  void learn_own_failover(const std::vector<std::pair<std::string, std::string>>& ps_peers);

  Server* server_;
  Server::Impl* impl_;  // server_->impl_, so the runtime's code reads as the server's own
};

}  // namespace actorflow
