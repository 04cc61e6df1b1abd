// af::Server: one task's server (tf.train.Server): its devices, device actors, node actor
// and master actor, inside an actor system it owns or one the caller embeds it in.
//
//   #include <actorflow/server.h>
//   auto server = af::Server::local();                    // Result<std::unique_ptr<Server>>
//   af::Session sess(root, (*server)->target());
//
// Thread-safety: all methods may be called from any thread. Destroying a Server stops its
// actors and (if it owns it) its actor system; sessions that still target it get
// Unavailable errors.
//
// This header names only what a program calls: the factories, target(), port(), join(), stop(),
// and the embedding members. It brings no CAF header and no cluster-file header: ClusterSpec and
// TaskId are forward-declared (<actorflow/cluster.h> defines them). The server's state lives
// behind a pointer (Server::Impl, defined in actors/server.cc). The members that take or return
// actor-system types (configure, local_in, create_in, system, master) are declared with
// forward-declared CAF classes: call them after including <actorflow/embedding.h>. actorflow's
// own runtime reaches the rest of a server (devices, routing, membership, its cluster and
// options, the in-process registry) through ServerRuntime (actors/server_runtime.h), which is
// not part of the public API.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "device/device_options.h"

namespace caf {
class actor;
class actor_system;
class actor_system_config;
}  // namespace caf

namespace actorflow {

class ClusterSpec;      // <actorflow/cluster.h>
struct TaskId;          // <actorflow/cluster.h>
class ServerRuntime;    // actors/server_runtime.h (actorflow's runtime only)

// Options of a process-local server (Server::local). A plain value type.
// The device fields (cpu_devices, visible_devices, gpu_memory_fraction, allow_growth) are the
// base DeviceOptions (device/device_options.h), as in the cluster file's ServerOptions.
struct LocalServerOptions : DeviceOptions {
  // In-place restarts of this server's device and variable actors after exceptions, as a
  // cluster file's [supervisor] section sets them for a cluster server: at most max_restarts
  // (>= 0) within restart_window_secs (> 0), then the actor gives up.
  int max_restarts = 5;
  double restart_window_secs = 60;
};

// The environment variable naming a fault plan (docs/reliability.md) for the task a process
// serves: Server::create loads it for that task, as `actorflow node --plan` does. `actorflow up
// --plan P -- PROGRAM` sets it for each task's first start.
constexpr const char* kFaultPlanEnv = "ACTORFLOW_FAULT_PLAN";

// The exit status of a process whose cluster server's node actor ended while the server ran
// (Server::create): the process ends at once (logged as an ERROR) rather than live on serving
// nothing, so that `actorflow up` or Kubernetes restarts the task (EX_SOFTWARE).
constexpr int kNodeActorLostExitCode = 70;

// One task's server. Created by the static factories (which return an owning unique_ptr); not
// copyable or movable. Registered in the process under target() from creation to stop().
class Server {
 public:
  // The single-process cluster of tf.train.Server.create_local_server(): job "localhost",
  // task 0, in an actor system of its own. Errors: device creation failures.
  static Result<std::unique_ptr<Server>> local(const LocalServerOptions& opts = {});
  // The server of `task` in `cluster` (tf.train.Server(cluster, job_name, task_index)): its
  // node actor is published on the task's address. Errors: task not in the cluster file,
  // address not local or already in use, missing secret for a non-loopback cluster. When the
  // environment names a fault plan (kFaultPlanEnv), its faults for `task` are loaded once the
  // server serves; a plan that cannot be read or names tasks the cluster lacks is an error.
  // The node actor ends only through stop(); should it end otherwise (an exception escaping a
  // handler), the process exits with kNodeActorLostExitCode (also for create_in).
  static Result<std::unique_ptr<Server>> create(const ClusterSpec& cluster, const TaskId& task);

  // Embedding (needs <actorflow/embedding.h>): local() inside the caller's actor system `sys`
  // (which must have been configured with Server::configure or register_actorflow_types and
  // must outlive the Server).
  static Result<std::unique_ptr<Server>> local_in(caf::actor_system& sys, const LocalServerOptions& opts = {});
  // Embedding (needs <actorflow/embedding.h>): create() inside the caller's actor system, which
  // must have loaded caf::io::middleman and been configured with register_actorflow_types()
  // (Server::configure does both) and must outlive the Server.
  static Result<std::unique_ptr<Server>> create_in(caf::actor_system& sys, const ClusterSpec& cluster,
                                                   const TaskId& task);
  // Embedding (needs <actorflow/embedding.h>): puts into `cfg` everything an embedding actor
  // system needs (message types, the middleman, scheduler settings). Call before constructing
  // the caf::actor_system. Thread-safe (touches only `cfg`).
  static void configure(caf::actor_system_config& cfg);

  // Stops the server (stop()), waits for its actors and, if it owns it, ends its actor system.
  // Blocks; see destroy_server_bounded for a bounded wait.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The string a Session connects with: "local://<n>" or "actorflow://host:port". Stable for the
  // server's life.
  const std::string& target() const;
  // The control-plane port the task listens on (0 for local servers).
  uint16_t port() const;

  // Blocks until stop() is called (tf.train.Server.join()).
  void join();
  // Stops the actors; join() returns; the target is unregistered. Idempotent.
  void stop();

  // Embedding (needs <actorflow/embedding.h>): the actor system the server's actors run in (its
  // own, or the one given to local_in/create_in). Valid for the server's life.
  caf::actor_system& system();
  // Embedding (needs <actorflow/embedding.h>): the master actor, which runs steps
  // ((run_atom, RunRequestPtr) -> std::vector<Tensor>). A handle; the server owns the actor.
  caf::actor master() const;

 private:
  friend class ServerRuntime;
  friend void destroy_server_bounded(std::unique_ptr<Server> server, std::chrono::milliseconds bound,
                                     int exit_code_on_timeout, int exit_code_if_actors_ended);
  struct Impl;
  Server();

  std::unique_ptr<Impl> impl_;
};

// For a program's main(): destroys `server` (stopping its actors and, if it owns it, its actor
// system) but bounds how long that may take. When it does not finish within `bound`, ends the
// process with _exit, so no process outlives its job; never returns then. If some actor of the
// server had not ended (a stuck peer or kernel), it logs an ERROR naming the task and exits with
// `exit_code_on_timeout`. If every actor had ended and only CAF 0.17's teardown of the actor
// system still waits (on the thread of a finished detached actor whose last reference CAF does
// not release: seen about once in 40 TLS cluster runs under ASan, cause open), nothing of the
// server runs any more: it logs a WARNING saying so and exits with `exit_code_if_actors_ended`.
// Not for embedders: it may end the caller's process.
void destroy_server_bounded(std::unique_ptr<Server> server, std::chrono::milliseconds bound, int exit_code_on_timeout,
                            int exit_code_if_actors_ended = 0);

// For a parameter server's main() (TF's server.join()): blocks SIGINT and SIGTERM in the calling
// thread before any server thread starts (so they inherit the mask), creates the server of `task`
// in `cluster`, writes the hang report to stderr on each SIGUSR1 (docs/architecture/diagnosis.md)
// and the crashing thread's stack on a fatal signal (core/crash_trace.h),
// prints "<job> <index> serving <target>" to stdout, waits for SIGINT or SIGTERM and
// then destroy_server_bounded(10 s, exit code 0). Returns OK after a signal, or the creation error.
// Call from the main thread before starting other threads. Not for embedders.
Status serve_until_signal(const ClusterSpec& cluster, const TaskId& task);

}  // namespace actorflow
