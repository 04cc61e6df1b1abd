// af::Server: one task's server (tf.train.Server): its devices, device actors, node actor
// and master actor, inside an actor system it owns or one the caller embeds it in.
//
// Thread-safety: all methods may be called from any thread. Destroying a Server stops its
// actors and (if it owns it) its actor system; sessions that still target it get
// Unavailable errors.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <condition_variable>
#include <caf/io/all.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/control_plane.h"
#include "actors/device_actor.h"
#include "actors/direct_step.h"
#include "actors/membership.h"
#include "actors/messages.h"
#include "config/cluster_spec.h"
#include "core/status.h"
#include "device/device.h"

namespace actorflow {
namespace net {
class TensorServer;
class TensorClient;
}  // namespace net

// Options of a process-local server (Server::local).
struct LocalServerOptions {
  int cpu_devices = 1;               // number of /device:CPU:N devices
  std::string visible_devices;       // GPUs (TF visible_device_list)
  double gpu_memory_fraction = 0.0;
  bool allow_growth = false;
};

// The environment variable naming a fault plan (docs/reliability.md) for the task a process
// serves: Server::create loads it for that task, as `actorflow node --plan` does. `actorflow up
// --plan P -- PROGRAM` sets it for each task's first start.
constexpr const char* kFaultPlanEnv = "ACTORFLOW_FAULT_PLAN";

// True when `host` names this machine: loopback, its hostname, or one of its addresses.
bool is_local_host(const std::string& host);

class Server {
 public:
  // The single-process cluster of tf.train.Server.create_local_server(): job "localhost",
  // task 0, in an actor system of its own. Errors: device creation failures.
  static Result<std::unique_ptr<Server>> local(const LocalServerOptions& opts = {});
  // The same inside the caller's actor system `sys` (which must have been configured with
  // register_actorflow_types and must outlive the Server).
  static Result<std::unique_ptr<Server>> local_in(caf::actor_system& sys, const LocalServerOptions& opts = {});
  // The server of `task` in `cluster` (tf.train.Server(cluster, job_name, task_index)): its
  // node actor is published on the task's address. Errors: task not in the cluster file,
  // address not local or already in use, missing secret for a non-loopback cluster. When the
  // environment names a fault plan (kFaultPlanEnv), its faults for `task` are loaded once the
  // server serves; a plan that cannot be read or names tasks the cluster lacks is an error.
  static Result<std::unique_ptr<Server>> create(const ClusterSpec& cluster, const TaskId& task);
  // The same inside the caller's actor system, which must have loaded caf::io::middleman and
  // been configured with register_actorflow_types().
  static Result<std::unique_ptr<Server>> create_in(caf::actor_system& sys, const ClusterSpec& cluster,
                                                   const TaskId& task);
  // A config with everything an embedding actor system needs (types, middleman).
  static void configure(caf::actor_system_config& cfg);

  // Connects (bounded retry) to every task that `graph` places ops on and returns the devices
  // of this task and those tasks. Blocks; called by Session::run from the client thread.
  Result<std::vector<DeviceInfo>> cluster_devices_for(const Graph& graph, std::chrono::milliseconds timeout);
  // The cluster this server belongs to (empty for local servers).
  const ClusterSpec& cluster() const { return cluster_; }
  // The node actor's published port (0 for local servers).
  uint16_t port() const { return port_; }
  Membership* membership() { return membership_.get(); }
  // The task's resource container (variables).
  const std::shared_ptr<ResourceManager>& resources() const { return resources_; }

  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The string a Session connects with: "local://<n>" or "actorflow://host:port".
  const std::string& target() const { return target_; }
  // "/job:localhost/replica:0/task:0".
  const std::string& task_prefix() const { return task_prefix_; }
  // This task's [server] options from the cluster file (defaults for local servers). Sessions on
  // this server apply its placement policy: log_device_placement turns placement logging on for
  // every session, allow_soft_placement = false forbids soft placement for every session.
  const ServerOptions& server_options() const { return server_options_; }
  caf::actor_system& system() { return *sys_; }
  caf::actor master() const { return master_; }
  const std::vector<DeviceInfo>& devices() const { return device_infos_; }
  // The direct-step plans and waiting steps of this server (actors/direct_step.h), shared with
  // the caller (Session::run holds it for the length of a step). Never null after creation.
  std::shared_ptr<DirectSteps> direct_steps() const { return direct_; }
  // Routes tensors and step dispatches of this server's devices (data plane included), shared
  // with the caller; after the server stops it routes nothing. Thread-safe.
  std::shared_ptr<Router> router() const { return router_; }

  // Blocks until stop() is called (tf.train.Server.join()).
  void join();
  // Stops the actors; join() returns. Idempotent.
  void stop();

  // The in-process server registered under `target`, or nullptr. Thread-safe.
  static Server* find(const std::string& target);

 private:
  Server() = default;
  Status init(const std::string& task_prefix, const DeviceEnumerationOptions& dopts);
  Status init_cluster(const ClusterSpec& cluster, const TaskId& task);
  Status connect_tasks(const std::vector<std::string>& task_prefixes);

  std::unique_ptr<caf::actor_system_config> own_cfg_;
  std::unique_ptr<caf::actor_system> own_sys_;
  caf::actor_system* sys_ = nullptr;
  std::string target_;
  std::string task_prefix_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<DeviceInfo> device_infos_;
  std::shared_ptr<Router> router_;
  std::shared_ptr<DirectSteps> direct_;
  std::shared_ptr<ResourceManager> resources_;
  caf::actor master_;
  caf::actor node_;
  ClusterSpec cluster_;
  TaskId task_;
  ServerOptions server_options_;
  uint16_t port_ = 0;
  std::shared_ptr<AuthenticatedPeers> auth_peers_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<ControlPlaneListener> control_;  // the task port (cluster mode)
  std::string shutdown_token_;                      // stops node_ (actors/node_actor.h)
  std::shared_ptr<std::atomic<bool>> stopping_flag_ = std::make_shared<std::atomic<bool>>(false);
  std::string routes_key_;
  std::unique_ptr<actorflow::net::TensorServer> data_server_;
  std::unique_ptr<actorflow::net::TensorClient> data_client_;
  std::mutex connect_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
};

// For a program's main(): destroys `server` (stopping its actors and, if it owns it, its actor
// system) but bounds how long that may take. When it does not finish within `bound` (a stuck
// peer, or a detached actor CAF 0.17 never releases), logs an ERROR naming the task and ends
// the process with _exit(exit_code_on_timeout), so no process outlives its job. Never returns
// on timeout. Not for embedders: it may end the caller's process.
void destroy_server_bounded(std::unique_ptr<Server> server, std::chrono::milliseconds bound, int exit_code_on_timeout);

}  // namespace actorflow
