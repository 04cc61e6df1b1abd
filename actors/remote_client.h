// The client end of remote sessions (actors/client_sessions.h): a process that is not a task
// of the cluster file reaches one task's master, as tf.Session("grpc://worker7:2222") does.
//
// A RemoteClient owns an actor system of its own and authenticates on the task's control plane
// as the cluster's tools do: the cluster secret, the TLS identity "client" when the cluster runs
// TLS, and the claimed task "/job:_client/replica:0/task:0" (a tool's name, net/tls.h). It holds
// nothing a task holds (no devices, no variables); the task runs the graph on the cluster.
//
// Liveness: the connection is watched with heartbeats (actors/membership.h); a run in flight
// when the task goes down fails with Unavailable within the heartbeat timeout, never hangs. The
// next run connects again (bounded by the connect timeout).
//
// Thread-safety: run() and close() may be called from any thread, concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/client_sessions.h"
#include "config/cluster.h"
#include "core/status.h"
#include "graph/graph.h"

namespace actorflow {

class RemoteClient {
 public:
  // A client of the task that `cluster` places at `target`'s address ("actorflow://host:port").
  // Connects lazily (on the first run). Errors: InvalidArgument for a malformed target,
  // NotFound when no task of the cluster file has that address, the TLS files' errors.
  static Result<std::unique_ptr<RemoteClient>> create(const std::string& target, const ClusterSpec& cluster);
  // Stops the actor system (runs in flight fail with Cancelled first). Blocks briefly.
  ~RemoteClient();
  RemoteClient(const RemoteClient&) = delete;
  RemoteClient& operator=(const RemoteClient&) = delete;

  // Runs `req` on the task and returns one tensor per fetch. `graph` is the graph of
  // req.graph_version: sent with the request when `send_graph`, and again (once) when the task
  // asks for it. `*graph_sent` (may be null) is set when the task now holds the graph. Blocks for
  // the step (bounded by req.timeout_ms + 5 s when that is set, by liveness otherwise).
  // Errors: the step's, Unavailable (task unreachable or gone), Unauthenticated /
  // FailedPrecondition (wrong secret or cluster file), naming the task.
  Result<std::vector<Tensor>> run(ClientRunRequest req, const Graph& graph, bool send_graph, bool* graph_sent);
  // Tells the task to forget `session` (best effort, does not wait).
  void close(uint64_t session);
  // The task this client reaches ("/job:worker/replica:0/task:0").
  const std::string& task() const { return task_; }

 private:
  struct Impl;
  explicit RemoteClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string task_;
};

}  // namespace actorflow
