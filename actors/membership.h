// Membership: this task's view of the other tasks of its cluster.
//
// ensure(task) connects to a peer's node actor (CAF middleman), checks protocol version and
// cluster-file fingerprint, and authenticates both ways by challenge-response; it retries
// with a bounded, logged backoff while the peer is not up yet, and fails with an error naming
// the task and its address when the peer never answers in time. Connected peers are watched:
// a closed connection (down_msg) or a peer that stops answering heartbeats within
// peer_timeout is marked down and every listener is told (the master fails that task's steps).
//
// Thread-safe. ensure() blocks the calling thread (never call it from an actor handler).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/messages.h"
#include "actors/node_actor.h"
#include "config/cluster.h"
#include "core/status.h"
#include "net/tls.h"

namespace actorflow {


struct PeerInfo {
  std::string task;              // "/job:worker/replica:0/task:1"
  std::string address;           // "host:port" of its node actor
  node_actor_t node;             // its node actor
  std::vector<DeviceInfo> devices;
  std::string data_addr;
  std::vector<std::string> serves_for;  // NodeInfo::serves_for as the peer said at connection
};

struct MembershipConfig {
  std::string self_task;                   // our own task prefix
  std::string fingerprint;
  std::string secret;
  std::shared_ptr<const net::TlsContext> tls;  // TLS for the control plane (net/tls.h); null: none
  std::chrono::milliseconds connect_timeout{30000};
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds peer_timeout{3000};
};

// The TLS context `identity` ("worker/1" for a task, "client" for tools) presents in `cluster`
// (its [cluster] tls_dir, net/tls.h), or null when the cluster runs without TLS. Errors name the
// file and say how to make it (`actorflow certs`). Thread-safe.
Result<std::shared_ptr<const net::TlsContext>> cluster_tls(const ClusterSpec& cluster, const std::string& identity);

// The membership configuration of a tool: a process that is no task of `cluster` (`actorflow
// status`, `actorflow chaos`, a remote client session) and connects to the cluster's tasks. It
// claims the task "/job:<tool_job>/replica:0/task:0" (`tool_job` starts with '_', the names the TLS
// "client" certificate may claim: net/tls.h), authenticates with the cluster's secret and
// fingerprint, and with TLS on presents the "client" certificate, or for the operator's job
// "_chaos" (which may load fault plans: PeerRole) the "operator" one; timeouts are the defaults.
// InvalidArgument for a job name without the leading '_'; the TLS files' errors (naming the file
// and how to make it). Thread-safe.
Result<MembershipConfig> tool_membership_config(const ClusterSpec& cluster, const std::string& tool_job);

// True when the "host:port" addresses `a` and `b` name the same host (localhost = 127.0.0.1;
// names are compared as written, not resolved). Pure; thread-safe.
bool same_host(const std::string& a, const std::string& b);

class Membership;

// What a peer watcher holds instead of a raw Membership*: `membership` is cleared (under `mu`)
// by ~Membership, so a watcher still running after its Membership died touches nothing freed.
struct MembershipGuard {
  std::mutex mu;
  Membership* membership = nullptr;
};

class Membership {
 public:
  Membership(caf::actor_system& sys, MembershipConfig cfg);
  ~Membership();

  // Connected, authenticated peer `task` at `address` (cached while up). Blocks with bounded
  // retries up to `timeout` (0 = the configured connect_timeout); a timeout shorter than the
  // first backoff means one attempt. `quiet` suppresses the "waiting for task" log lines (for
  // callers that poll).
  Result<PeerInfo> ensure(const std::string& task, const std::string& address,
                          std::chrono::milliseconds timeout = std::chrono::milliseconds(0), bool quiet = false);
  // Ends every ensure() that waits to retry, and every later one that would, with `why` (the
  // server stopped); a connection attempt under way finishes first (bounded by its timeouts).
  // Idempotent; thread-safe.
  void cancel(const Status& why);
  // Forgets `task` (it will be reconnected by the next ensure()).
  void mark_down(const std::string& task, const std::string& reason);
  // Actors told (down_atom, task, reason) whenever a peer goes down. Thread-safe.
  void add_listener(caf::actor a);
  // `f(task)` is called whenever a peer goes down, on the thread that noticed it, before the
  // listeners are told; it must not block or call back into this Membership. Thread-safe.
  void add_down_callback(std::function<void(const std::string& task)> f);
  // Incremented whenever a peer joins or leaves.
  uint64_t epoch() const;
  std::vector<PeerInfo> peers() const;

 private:
  Result<PeerInfo> connect_once(const std::string& task, const std::string& address);

  caf::actor_system& sys_;
  MembershipConfig cfg_;
  std::condition_variable cancel_cv_;  // wakes ensure()'s retry pacing (under mu_)
  Status cancelled_;                   // set by cancel() (under mu_)
  mutable std::mutex mu_;
  std::map<std::string, PeerInfo> up_;
  std::map<std::string, caf::actor> watchers_;
  // One handshake per peer at a time: two concurrent hellos from this process to one node
  // would overwrite each other's challenge and fail authentication.
  std::map<std::string, std::shared_ptr<std::mutex>> connecting_;
  std::vector<caf::actor> listeners_;
  std::vector<std::function<void(const std::string&)>> down_callbacks_;
  uint64_t epoch_ = 0;
  std::shared_ptr<MembershipGuard> guard_;  // shared with the peer watchers
};

}  // namespace actorflow
