// ProcessRouter: the Router of one task process (actors/device_actor.h has the interface).
//
// Two jobs, in two source files:
//   - Tensor routing (actors/router.cc): a _Send's tensor goes to a device actor of this process
//     by reference, to another task over the data plane (net/tensor_transport.h) or, for a peer
//     that advertised no data plane, through that task's node actor (sent as this task's node
//     actor so the receiver can authenticate it). Tensors arriving over the data plane go to the
//     local device actor their key names.
//   - Step dispatch (actors/step_dispatch.cc): steps sent over the data plane as typed frames
//     (net/wire.h: feed, run, ret, done; query and state ask whether a step runs). A run request goes with its partition's feeds in one
//     write; on the receiving task the reader thread hands it to the device actor as one message,
//     or runs a self-contained partition inline (InlinePartitions). Outcomes go back to the
//     dispatching process (to its data-plane address, or on the request's own connection), where
//     they complete a direct step's wait (actors/direct_step.h) or reach the master.
//
// Fault injection (actors/faults.h) acts here and in the node actor only, where messages cross
// the process boundary, so faults never change the step path:
//   - receiving hook: deliver(), every data-plane frame that enters this process;
//   - sending hooks: route() (tensors for another task) and dispatch_step()/dispatch_step_awaiting()
//     (run requests with their feeds).
//
// Thread-safety: every method may be called from any thread (device actors, the data plane's
// reader threads, sessions' threads, the injector's timer thread). Create it with make_shared
// (delayed deliveries hold a weak reference).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/device_actor.h"
#include "actors/faults.h"
#include "net/log_limiter.h"
#include "net/tensor_transport.h"

namespace actorflow {

class DirectSteps;

class ProcessRouter final : public DeviceRouter,
                            public StepDispatcher,
                            public std::enable_shared_from_this<ProcessRouter> {
 public:
  // `own_task`: the task prefix of this process ("/job:worker/replica:0/task:1"), the receiving
  // end of its link faults. `own_incarnation`: this process's incarnation (0: not known): a
  // _Send whose key was planned for another incarnation of this task fails its step (Aborted).
  explicit ProcessRouter(std::string own_task, uint64_t own_incarnation = 0);

  // ---- set-up (the Server) ----
  // Device `device` of this process is served by actor `a`.
  void add(const std::string& device, device_actor_t a);
  // This task's node actor: what cross-process CAF messages are sent as.
  void set_self_node(node_actor_t node);
  // Task `task_prefix` is reached through its node actor `node`, and over the data plane at
  // `data_addr` ("host:port"; "" = it advertised none); it runs as `incarnation` (0: not known).
  // An incarnation it ran as before (the task restarted) is remembered as stale: tensors keyed
  // with it that arrive over the data plane are dropped (see deliver()).
  void set_remote(const std::string& task_prefix, node_actor_t node, const std::string& data_addr = "",
                  uint64_t incarnation = 0);
  // The data plane's client (shared: delayed deliveries may outlive the Server's reference) and
  // this process's own data-plane address (where outcomes of steps it dispatches come back).
  void set_data_client(std::shared_ptr<net::TensorClient> client, const std::string& own_data_addr = "");
  // The master that gets outcomes of steps it dispatched, and the direct steps waiting for theirs.
  void set_master(master_actor_t master, std::shared_ptr<DirectSteps> direct);
  // Forgets every route, the client, the master: the Server is stopping. Later calls find nothing.
  void clear();

  // ---- tensor routing (router.cc) ----
  // DeviceRouter: delivers (step_id, key, t) to the key's destination device (the sending hook). No
  // string is parsed: the fields and task names come from `key`.
  Status route_key(int64_t step_id, const RendezvousKey& key, const Tensor& t) override;
  // DeviceRouter: parses `key` once (InvalidArgument saying why it is malformed), then route_key().
  Status route(int64_t step_id, const std::string& key, const Tensor& t) override;
  // A frame from the data plane (the TensorServer's callback): the receiving hook, then a
  // tensor for a local device or step control. Never throws; bad frames are logged and dropped.
  // The rendezvous key of a tensor, error or feed frame is parsed here, once, for the whole way
  // in: a malformed one, or one of a stale incarnation of its sender (see set_remote), drops the
  // frame, with a WARNING naming the peer and the frame (at most one line a second) and a count
  // in actorflow_bad_rendezvous_keys_total{reason="malformed"|"stale"}.
  void deliver(const net::Frame& m);
  // The data-plane connection whose ReplyChannel has id `channel_id` ended (the TensorServer's
  // closed callback, on that connection's reader thread, after its last frame): feeds carried for
  // run requests that were to follow on it are dropped (their run request can no longer come:
  // it travels in the same write, on the same connection), with a WARNING naming the step, and
  // counted in actorflow_early_tensors_dropped_total{reason="closed"}. Thread-safe; never throws.
  void connection_closed(uint64_t channel_id);

  // ---- step dispatch (step_dispatch.cc); contracts in StepDispatcher and DeviceRouter (actors/routing.h) ----
  bool can_dispatch(const std::string& device) override;
  bool dispatch_connection_open(const std::string& device) override;
  Status open_dispatch(const std::string& device) override;
  Status dispatch_step(const std::string& device, const std::string& handle, int64_t step_id,
                       const std::string& from_task,
                       const std::vector<std::pair<std::string, Tensor>>& feeds) override;
  Result<std::shared_ptr<net::ClientConnection>> dispatch_step_awaiting(
      const std::string& device, const std::string& handle, int64_t step_id, const std::string& from_task,
      const std::vector<std::pair<std::string, Tensor>>& feeds) override;
  Status await_dispatched(net::ClientConnection& conn, const std::function<bool()>& done,
                          std::chrono::microseconds spin, std::chrono::milliseconds wait) override;
  Status reply_step(const StepReply& reply, int64_t step_id, const std::string& device, const Status& status,
                    const std::vector<Tensor>& retvals) override;
  Status query_step(const std::string& device, int64_t step_id, bool on_request_connection) override;
  void abort_remote_step(const node_actor_t& node, const std::string& device, int64_t step_id,
                         const std::string& why) override;
  InlinePartitions* inline_partitions() override { return &inline_; }
  uint64_t inline_steps_run() const override { return inline_steps_.load(std::memory_order_relaxed); }

 private:
  // deliver() past the fault hook; `key` is the frame's parsed key (tensor and error frames).
  void deliver_now(const net::Frame& m, const RendezvousKey& key);
  // The parsed key of frame `m` (a tensor, error or feed frame), or nullopt when it is malformed
  // or stale (the frame is dropped: logged and counted as deliver() says) or `m` has no key.
  std::optional<RendezvousKey> frame_key(const net::Frame& m);
  // route_key() past the fault hook (records a "send" event for a traced step, core/step_trace.h).
  Status route_now(int64_t step_id, const RendezvousKey& key, const Tensor& t);
  // route_now's sending; sets *via_out (when given) to how the tensor went: "in process",
  // "data plane" or "control plane".
  Status route_send(int64_t step_id, const RendezvousKey& key, const Tensor& t, const char** via_out);
  // A tensor that arrived over the data plane: to the local device actor its key names.
  void deliver_local(int64_t step_id, const RendezvousKey& key, const Tensor& t);
  // An error frame (net/frames.h) of step `step_id`, for rendezvous key `key` unless it stands for
  // a ret: a tensor that did not arrive aborts the step on the key's device, saying why; a ret
  // that could not be received fails its step (ResourceExhausted); a lost feed is dropped.
  void on_error(int64_t step_id, const RendezvousKey& key, const net::ErrorFrame& e);
  // Step control frames (step_dispatch.cc); `reply` is the connection the frame came on.
  void on_feed(int64_t step_id, const net::FeedFrame& f, const std::shared_ptr<net::ReplyChannel>& reply);
  void on_run(int64_t step_id, const net::RunFrame& r, const std::shared_ptr<net::ReplyChannel>& reply);
  // Outcomes of steps this process dispatched: to a direct step's wait or to the master.
  void on_outcome(int64_t step_id, const net::RetFrame& r);
  void on_outcome(int64_t step_id, const net::DoneFrame& d);
  void on_outcome(int64_t step_id, const net::StateFrame& st);
  // The master and the direct steps that outcomes go to (either may be null).
  void outcome_routes(master_actor_t* master, std::shared_ptr<DirectSteps>* direct);
  // A query (net/wire.h): answers at once, on this reader thread, from live_runs_.
  void on_query(int64_t step_id, const net::QueryFrame& q, const std::shared_ptr<net::ReplyChannel>& reply);
  // Where the answer to a run or query frame goes: `channel` (the connection the frame came on)
  // when its reply address `reply_to` is empty, else that address. Pure.
  static StepReply reply_for(const std::string& reply_to, const std::shared_ptr<net::ReplyChannel>& channel);
  // Writes `msgs` (an outcome or a state answer of step `step_id`) as `reply` says: on its
  // connection, or to its address when that is a member's data-plane address (PermissionDenied
  // otherwise: a request cannot make this task dial an address of its choosing).
  Status send_back(const StepReply& reply, int64_t step_id, const std::vector<net::Frame>& msgs);
  // The outcome of a step this process dispatched, read from the request's own connection.
  void deliver_reply(const net::Frame& m);
  void drop_carried(int64_t step_id);
  // Drops the carried feeds older than early_tensor_limits().ttl (their run request is not
  // coming), with a WARNING naming the step. Called for every frame that enters (deliver()).
  void expire_carried();
  // Drops, with mu_ held, every carried entry for which `drop(entry)` is true: its bytes leave
  // carried_bytes_, its feeds count as `reason`, and a WARNING ends with `why`; carried_oldest_
  // is recomputed from what stays.
  template <typename Pred>
  void drop_carried_locked(const Pred& drop, const char* reason, const std::string& why);
  // Where run requests for `device` go: its task's data-plane address, this process's own (for
  // replies) and the client; false when steps for it cannot go over the data plane.
  bool dispatch_route(const std::string& device, std::string* addr, std::string* own,
                      std::shared_ptr<net::TensorClient>* client);
  std::shared_ptr<net::TensorClient> client();
  // The sending hook of dispatch_step and dispatch_step_awaiting: nullopt when no link fault acts
  // on from_task -> the device's task (send as usual); otherwise the request was handed to
  // send_faulted (with this process's reply address `own`) and this is its outcome.
  std::optional<Status> send_if_faulted(const std::string& device, const std::string& handle, int64_t step_id,
                                        const std::string& from_task,
                                        const std::vector<std::pair<std::string, Tensor>>& feeds,
                                        const std::string& addr, const std::string& own);
  // A run request that meets a sending-side link fault `d`.
  Status send_faulted(LinkDecision d, const std::string& addr, std::vector<net::Frame> msgs);
  // Writes a run request's frames; with `duplicate_feeds` its feeds once more afterwards, as
  // plain tensors (the device finds them already delivered and ignores them).
  Status send_run_request(const std::string& addr, const std::vector<net::Frame>& msgs, bool duplicate_feeds);

  // Feeds of dispatched steps whose run request has not been read yet (they precede it in the
  // same write); bounded in steps and in bytes (on_feed).
  static constexpr size_t kMaxCarried = 4096;
  static constexpr size_t kMaxLiveRuns = 1 << 16;

  const std::string own_task_;
  const uint64_t own_incarnation_;
  mutable std::mutex mu_;
  // Per peer task: the incarnations it ran as before its current one (set_remote; the last
  // kMaxRetiredIncarnations). A key of one of them is stale. Guarded by mu_.
  struct Incarnations {
    uint64_t current = 0;
    std::vector<uint64_t> retired;
  };
  static constexpr size_t kMaxRetiredIncarnations = 8;
  std::map<std::string, Incarnations> incarnations_;
  // Whether any task has a retired incarnation: until one restarts, frame_key() checks no
  // staleness and takes no lock (set under mu_, read without it).
  std::atomic<bool> any_retired_{false};
  // "bad rendezvous key" lines: at most one a second. Guarded by mu_.
  net::LogLimiter bad_key_log_;
  // Tensor routing.
  std::map<std::string, device_actor_t> local_;
  // "dropped tensor ... no device here": at most one line a second (a peer decides how many
  // frames name a device this process does not have). Guarded by mu_.
  net::LogLimiter unknown_device_log_;
  std::map<std::string, node_actor_t> remote_;
  std::map<std::string, std::string> data_;  // task prefix -> data-plane "host:port"
  node_actor_t self_node_;
  std::shared_ptr<net::TensorClient> client_;
  std::string own_data_addr_;
  // Step dispatch.
  master_actor_t master_;
  std::shared_ptr<DirectSteps> direct_;
  struct Carried {
    std::vector<std::pair<std::string, Tensor>> feeds;
    std::chrono::steady_clock::time_point first;  // when its first feed arrived
    uint64_t channel = 0;  // ReplyChannel::id() of the connection its first feed came on (0: none)
  };
  // Counts `n` dropped feeds in actorflow_early_tensors_dropped_total{reason}: "budget",
  // "expired" or "closed".
  static void count_dropped_feeds(const char* reason, size_t n);
  std::unordered_map<int64_t, Carried> carried_;
  // No entry of carried_ is older than this (a lower bound; expire_carried() sweeps past it).
  std::chrono::steady_clock::time_point carried_oldest_ = std::chrono::steady_clock::time_point::max();
  size_t carried_bytes_ = 0;  // of the tensors in carried_ (at most early_tensor_limits().max_bytes)
  std::chrono::steady_clock::time_point carried_logged_{};  // the last WARNING about dropping them
  // (step, device) of the run requests that entered over the data plane (held back by a link
  // delay included, dropped ones not) whose outcome has not been sent yet: what a query asks.
  // Bounded: past kMaxLiveRuns (outcomes never sent: a device restarted mid-step) it is cleared
  // with a warning; a query then answers "not running" and the caller retries.
  std::set<std::pair<int64_t, std::string>> live_runs_;
  InlinePartitions inline_;
  std::atomic<uint64_t> inline_steps_{0};
};

}  // namespace actorflow
