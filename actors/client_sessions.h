// Remote client sessions (tf.Session("grpc://worker7:2222")): a process that is not a task of
// the cluster file runs graphs on a task's master.
//
// The wire: the client (actors/remote_client.h) authenticates on the task's control plane as a
// tool does (the cluster secret, TLS identity "client", claimed task "/job:_client/...") and
// sends its node actor
//
//   (crun_atom, ClientRunRequest)  -> std::vector<Tensor>    one per fetch
//   (cclose_atom, uint64 session)  -> bool                   forgets that session here
//
// The first run of a graph version carries the graph (GraphDef bytes, graph/graph_def.h); later
// runs carry only its version, so a training loop ships its graph once. A run whose version this
// task does not hold (it restarted, or evicted the session) is refused with FailedPrecondition
// starting with kClientGraphUnknown, and the client sends the graph again.
//
// On the task, ClientSessions keeps one af::Session per (client node, session id) over the
// client's graph, so a remote run is the same step path as a local one (placement, the data
// plane, direct steps). The node actor runs each request on a detached worker (a run blocks).
// Bounds: at most `max_sessions` sessions (the least recently used idle one is dropped to make
// room, else ResourceExhausted), at most `max_running` runs at once (ResourceExhausted), and a
// session idle for `idle_expiry` is dropped on the next access.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "actors/messages.h"  // Tensor's inspector
#include "graph/placement_options.h"
#include "core/status.h"
#include "tensor/tensor.h"

namespace actorflow {


// The prefix of the FailedPrecondition that asks a client to send its graph again.
constexpr const char* kClientGraphUnknown = "client graph unknown here: ";

// One remote run. Plain data; the node actor validates nothing beyond CAF's decoding (tensors are
// size-checked by their inspector) and ClientSessions checks the rest.
struct ClientRunRequest {
  uint64_t session = 0;        // the client's session id (unique within the client process)
  uint64_t graph_version = 0;  // the client's graph version (its node count)
  std::string graph_def;       // serialize_graph of that version, or "" when sent before
  std::vector<std::string> feed_names;
  std::vector<Tensor> feeds;   // one per feed_names entry
  std::vector<std::string> fetches, targets;
  PlacementOptions placement;  // SessionOptions::placement() of the client
  int64_t timeout_ms = 0;      // SessionOptions::timeout; 0 = none
  // RunOptions::trace_max_events of a traced run (kFullTrace), 0 for an untraced one. A traced
  // run's reply holds one more tensor after the fetches: a uint8 vector, encode_step_stats() of
  // the step as this task traced it (core/step_stats.h).
  uint32_t trace_max_events = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ClientRunRequest& x) {
  return f(caf::meta::type_name("actorflow::ClientRunRequest"), x.session, x.graph_version, x.graph_def,
           x.feed_names, x.feeds, x.fetches, x.targets, x.placement.log_device_placement,
           x.placement.allow_soft_placement, x.placement.default_device, x.placement.mixed_bfloat16,
           x.placement.fuse_kernels, x.timeout_ms, x.trace_max_events);
}

// Registers ClientRunRequest with an actor system config (register_actorflow_types calls it).
void register_client_session_types(caf::actor_system_config& cfg);

// The sessions remote clients hold on this task. Thread-safe: run() blocks its caller for the
// length of the step and may be called from many threads at once; close() from any thread.
class ClientSessions {
 public:
  struct Limits {
    size_t max_sessions = 256;
    size_t max_running = 64;
    std::chrono::minutes idle_expiry{60};
  };
  // Sessions run on the in-process server registered under `target` (Server::target()), which
  // must outlive this object.
  explicit ClientSessions(std::string target, Limits limits);
  explicit ClientSessions(std::string target) : ClientSessions(std::move(target), Limits()) {}
  ~ClientSessions();
  ClientSessions(const ClientSessions&) = delete;
  ClientSessions& operator=(const ClientSessions&) = delete;

  // Runs `req` for client `peer` (its CAF node, as a string) and returns the fetched tensors.
  // Errors: FailedPrecondition kClientGraphUnknown... when the graph must be sent again;
  // DataLoss / InvalidArgument (naming the session) for graph bytes that do not parse, InvalidArgument
  // for feed names and tensors that do not pair up; PermissionDenied naming the node and its op
  // when `may_touch_files` is false and the graph holds an op that touches files
  // (OpDef::touches_files: a remote client's graph; a task's may);
  // ResourceExhausted past the limits; and whatever the step reports.
  Result<std::vector<Tensor>> run(const std::string& peer, const ClientRunRequest& req, bool may_touch_files = false);
  // Forgets session `session` of `peer` (a run in flight finishes). Idempotent.
  void close(const std::string& peer, uint64_t session);
  // Number of sessions held (for tests and status).
  size_t size() const;

 private:
  struct Entry;
  std::string target_;
  Limits limits_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, uint64_t>, std::shared_ptr<Entry>> sessions_;
  size_t running_ = 0;
  std::chrono::steady_clock::time_point last_sweep_;  // idle sessions are looked for once a minute
};

}  // namespace actorflow
