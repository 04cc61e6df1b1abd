// af::Session: runs a Scope's graph on a server (tf.Session / ClientSession).
//
// run() blocks the calling thread until the step finishes and returns the fetched tensors
// or an error naming the op, feed or task that failed. Several threads may call run() on
// one Session concurrently; each call is its own step. The graph may grow between runs
// (new nodes are picked up on the next run).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.h"
#include "core/status.h"
#include "graph/scope.h"
#include "graph/tensor.h"

namespace actorflow {

class Server;
class RemoteClient;
struct RunRequest;

// Options of a session (TF's ConfigProto subset). Fluent setters return *this.
class SessionOptions {
 public:
  SessionOptions& log_device_placement(bool v) { log_device_placement_ = v; return *this; }
  SessionOptions& allow_soft_placement(bool v) { allow_soft_placement_ = v; return *this; }
  // Upper bound for one run(); 0 = none (dead tasks are still detected and reported).
  SessionOptions& timeout(std::chrono::milliseconds v) { timeout_ = v; return *this; }
  // Where ops without a device request go; "" = the target server's /device:CPU:0.
  SessionOptions& default_device(std::string v) { default_device_ = std::move(v); return *this; }
  // The cluster file (TOML or TF_CONFIG JSON) of a remote target: a Session whose target
  // "actorflow://host:port" is not a server in this process connects to that task as a client,
  // authenticated with the file's secret (and TLS files). "" = $ACTORFLOW_CLUSTER.
  SessionOptions& cluster_file(std::string v) { cluster_file_ = std::move(v); return *this; }

  bool log_device_placement() const { return log_device_placement_; }
  bool allow_soft_placement() const { return allow_soft_placement_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& default_device() const { return default_device_; }
  const std::string& cluster_file() const { return cluster_file_; }

 private:
  bool log_device_placement_ = false;
  bool allow_soft_placement_ = true;
  std::chrono::milliseconds timeout_{0};
  std::string default_device_;
  std::string cluster_file_;
};

// Feeds: which Output gets which value.
using FeedDict = std::vector<std::pair<Output, Tensor>>;

class Session {
 public:
  // A session on the server registered under `target` (Server::target()) in this process.
  // With an empty target, the session starts its own local server (tf.Session()). A target
  // "actorflow://host:port" that is not in this process is a remote session (seed 000's
  // tf.Session("grpc://worker7:2222")): it runs the graph on that task, which needs the cluster
  // file (opts.cluster_file or $ACTORFLOW_CLUSTER) to authenticate (actors/remote_client.h).
  // Construction errors (unknown target, no or bad cluster file) are reported by status() and by
  // every run(); the connection itself is made by the first run.
  explicit Session(const Scope& scope, const std::string& target = "", SessionOptions opts = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  Status status() const { return status_; }

  // Runs the graph and returns one tensor per fetch, in order.
  Result<std::vector<Tensor>> run(const std::vector<Output>& fetches);
  Result<std::vector<Tensor>> run(const FeedDict& feeds, const std::vector<Output>& fetches,
                                  const std::vector<Output>& targets = {});
  // The same by tensor names ("node", "node:1"), as TensorFlow's Session::Run.
  Result<std::vector<Tensor>> run_by_name(const std::vector<std::pair<std::string, Tensor>>& feeds,
                                          const std::vector<std::string>& fetches,
                                          const std::vector<std::string>& targets = {});
  // Releases the session; later run() calls fail with Cancelled. Idempotent.
  Status close();

  // For actors that must not block: builds the request that run_by_name() would send, so an
  // embedding actor can send (run_atom, request) to master() itself and handle the reply
  // (std::vector<Tensor> or an error) asynchronously. May block briefly in cluster mode to
  // connect to the tasks the graph names.
  Result<std::shared_ptr<const RunRequest>> prepare(const std::vector<std::pair<std::string, Tensor>>& feeds,
                                                           const std::vector<std::string>& fetches,
                                                           const std::vector<std::string>& targets = {});
  // The master actor that runs this session's steps (invalid for a remote session).
  caf::actor master() const;

 private:
  std::shared_ptr<const Graph> snapshot();
  Status open_remote(const std::string& target);
  Result<std::vector<Tensor>> run_remote(const std::vector<std::pair<std::string, Tensor>>& feeds,
                                         const std::vector<std::string>& fetches,
                                         const std::vector<std::string>& targets);

  Scope scope_;
  SessionOptions opts_;
  Status status_;
  std::unique_ptr<Server> own_server_;
  std::unique_ptr<RemoteClient> remote_;      // remote sessions only
  std::shared_ptr<const Graph> sent_graph_;   // the snapshot the remote task holds; guarded by mu_
  Server* server_ = nullptr;
  uint64_t graph_id_;
  std::mutex mu_;
  std::shared_ptr<const Graph> snapshot_;
  int snapshot_nodes_ = -1;
  bool closed_ = false;
  // The cluster devices of snapshot_ while the membership epoch stays `devices_epoch_` (no task
  // came or went, so every task the graph names is still up and routed). Guarded by mu_.
  std::shared_ptr<const Graph> devices_graph_;
  uint64_t devices_epoch_ = 0;
  std::vector<DeviceInfo> devices_;
};

}  // namespace actorflow
