// Replicated parameter servers ([supervisor] ps_replicas = 2; docs/architecture/ps-replication.md,
// "Replicated parameter servers"): primary-backup. The variable actors of ps task p are the
// primaries of p's variables; ps task (p+1) % num_ps holds a backup of each, under the same
// name in its resource container. A primary applies a mutating call, forwards the same call
// (or, the first time after its backup (re)connected, its whole state: value and slots) to the
// backup's node actor as (replicate_atom, ...) and answers its caller only once the backup
// acknowledged, so an acknowledged update is held by both. The forward is a typed message
// ((replicate_atom, ReplicaCall), actors/interfaces.h); the backup's node actor marks the call it
// hands its copy as replicated (ResourceCall::replica, device/kernel.h), never an attribute. Calls reach the backup in the
// primary's order (one sender, one receiver), and the kernels are deterministic, so both hold
// the same state.
//
// PsReplicator is a ps task's link to its backup task: it keeps an authenticated connection to
// it (Membership::ensure on its own thread, reconnecting after a failure) and hands the variable
// actors the backup's node actor with an epoch that changes with every new connection (a
// variable whose last full copy went out under an older epoch sends its whole state first).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "actors/interfaces.h"
#include "core/status.h"
#include "graph/graph.h"
#include "net/tensor_transport.h"

namespace actorflow {

class Membership;

// A backup copy's refusal of a direct update (and a returned ps task's refusal of a variable
// its backup took over) is a Status carrying the typed detail ServedBy{copy, primary}
// (core/status.h), which the caller's process reads to refresh its routes (PsRouting).

// AttrMap <-> bytes: the op's own attributes of a replicated call (ReplicaCall::attrs; every
// AttrValue kind except Tensor, which variable calls never carry; a Tensor attr is dropped).
// decode: InvalidArgument on malformed bytes. Pure; thread-safe.
std::string encode_call_attrs(const AttrMap& attrs);
Result<AttrMap> decode_call_attrs(const std::string& bytes);

// A replicated call's large tensors travel over the tensor data plane instead of with the call
// (ReplicaCall::data_count, data_key: the BASP call carries uninitialised tensors in their
// places; the backup's node actor takes them from its ReplicaInbox before applying the call).
// Arguments of at least this many bytes go over the data plane (smaller ones stay in the call).
inline constexpr size_t kReplicaDataMinBytes = 16 * 1024;
// A call whose arguments would move more than this over the data plane goes whole over the
// control plane instead (so one call never needs more of a backup's ReplicaInbox than this).
inline constexpr size_t kReplicaDataMaxCallBytes = size_t{512} << 20;

// Which variable calls are replicated: those that change state, mutates() of their decoded
// VariableCall (device/variable_call.h).

// The backup side of the data plane for replicated calls: the tensors a primary sends ahead of
// (or after) its call, held until the call takes them. Frames arrive on the data plane's reader
// threads (put), calls on the node actor (take, notify, forget).
//
// A frame is a kTensor frame whose key is frame_key(i, n, call key): argument i of the n the
// call moved. Memory is bounded: at most `max_bytes` of tensors are held (a frame past it is
// dropped with a log line, and its call then times out on the node actor), and a call's
// tensors not taken within `ttl` of their first frame are dropped. Thread-safe.
class ReplicaInbox {
 public:
  ReplicaInbox(size_t max_bytes, std::chrono::milliseconds ttl);
  static constexpr size_t kMaxArgs = 64;

  // Whether `m` is a replica frame (its key starts with the replica prefix). Pure.
  static bool is_replica_frame(const net::Frame& m);
  // The key of the frame carrying argument `i` of the `n` a call moved. Pure.
  static std::string frame_key(size_t i, size_t n, const std::string& call_key);
  // Whether `call_key` may name a call's frames: non-empty, at most kMaxCallKeyBytes, and (it is
  // the tail of the frame key) fine in any byte. Pure.
  static constexpr size_t kMaxCallKeyBytes = 1024;
  static bool valid_call_key(const std::string& call_key);

  // Holds the tensor of frame `m` (is_replica_frame). A malformed key, an index out of range, a
  // count that disagrees with the call's earlier frames, a repeated index or a frame past
  // max_bytes is dropped with a log line naming `m`'s peer. Runs the call's notify callback
  // (on this thread, with no lock held) when this frame completes it. The first frame held is
  // logged ("tensors of replicated calls arrive over the data plane from <peer>").
  void put(const net::Frame& m);
  // When all `n` tensors of `call_key` are here: moves them into `out` as (argument index,
  // tensor), forgets the call and returns true. False otherwise (nothing changes).
  bool take(const std::string& call_key, size_t n, std::vector<std::pair<size_t, Tensor>>* out);
  // Calls `ready` once all tensors of `call_key` are here: now (on this thread) when they are,
  // else from the put() that completes them. Replaces an earlier callback of the call.
  void notify(const std::string& call_key, std::function<void()> ready);
  // Drops the call's tensors and callback (its call gave up on them).
  void forget(const std::string& call_key);
  // Bytes of tensors held now; calls with tensors or callbacks held. For tests.
  size_t held_bytes() const;
  size_t held_calls() const;

 private:
  struct Entry {
    size_t n = 0;  // 0 until the first frame
    std::vector<std::pair<size_t, Tensor>> tensors;
    size_t bytes = 0;
    std::chrono::steady_clock::time_point first;
    std::function<void()> ready;
  };
  void expire_locked(std::chrono::steady_clock::time_point now);
  const size_t max_bytes_;
  const std::chrono::milliseconds ttl_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> calls_;  // guarded by mu_
  size_t bytes_ = 0;                    // guarded by mu_
  bool said_first_ = false;             // guarded by mu_; the first frame is logged
};

class PsReplicator {
 public:
  // The replicator of ps task `own_task` (a task prefix), whose backup is `backup_task` at
  // `backup_address`; calls to it time out after `timeout` (the peer timeout: a stopped backup
  // is noticed within it).
  PsReplicator(std::string own_task, std::string backup_task, std::string backup_address,
               std::chrono::milliseconds timeout);
  // Stops the connecting thread (stop()).
  ~PsReplicator();
  PsReplicator(const PsReplicator&) = delete;
  PsReplicator& operator=(const PsReplicator&) = delete;

  // Starts the thread that connects to the backup through `membership` (which must outlive
  // stop()) and reconnects after backup_failed(). With `data` (the task's data-plane settings)
  // the same thread also sends the tensors of send_tensors() to the backup's data plane; without
  // it, Backup::data_addr stays empty and calls carry their tensors. Call once.
  void start(Membership* membership, std::optional<net::TransportOptions> data = std::nullopt);
  // Stops and joins the thread. Idempotent; thread-safe.
  void stop();

  struct Backup {
    node_actor_t node;   // null while not connected: the primary then serves alone
    uint64_t epoch = 0;  // changes with every connection
    std::string data_addr;  // the backup's data plane ("host:port"); empty: send tensors with the call
  };
  // The backup as now known. Thread-safe.
  Backup backup() const;
  // A replicated call of connection `epoch` failed: forget that connection (when it is still
  // the current one) and reconnect. Thread-safe.
  void backup_failed(uint64_t epoch, const std::string& why);
  // Queues `tensors` (argument index, tensor: host tensors the caller no longer changes) for the
  // backup of connection `epoch` as the frames of `call_key`, in the order of the calls. Sent by
  // the replicator's thread; dropped when the connection changed meanwhile. A failed send calls
  // backup_failed(epoch). Thread-safe.
  void send_tensors(uint64_t epoch, const std::string& call_key, std::vector<std::pair<size_t, Tensor>> tensors);
  // A name no other replicator (of this process or any other, before or after) has: the start
  // of this replicator's data-plane call keys. Thread-safe.
  const std::string& instance() const { return instance_; }
  const std::string& backup_task() const { return backup_task_; }
  const std::string& own_task() const { return own_task_; }

  // The backup side: the primaries that replicate to this task. The node actor calls
  // primary_seen(task) for every replicated call (from an authenticated peer) and
  // primary_lost(task) when that peer's node actor is gone (its connection closed). A backup
  // copy whose primary is alive refuses direct updates (a caller that has not failed over);
  // once the primary is lost, the first direct update promotes it. Thread-safe.
  void primary_seen(const std::string& task);
  void primary_lost(const std::string& task);
  bool primary_alive(const std::string& task) const;
  // The primaries this task's copies took over: every task given to primary_lost() after it was
  // seen alive, until primary_seen() sees it replicate again. Sorted. Thread-safe.
  std::vector<std::string> taken_over() const;

  // `f(serves_for)` is called on the replicator's thread each time it connects to the backup,
  // with the ps tasks the backup said it serves for (NodeInfo::serves_for): how a ps task that
  // returns after a failover learns that its backup serves its variables now. Set before
  // start(); `f` must not block.
  void set_on_connect(std::function<void(const std::vector<std::string>& serves_for)> f);
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  void run();
  struct Outgoing {
    uint64_t epoch;
    std::string call_key;
    std::vector<std::pair<size_t, Tensor>> tensors;
  };
  // Sends `o` (on the replicator's thread, mu_ not held).
  void send_now(const Outgoing& o, const std::string& data_addr);

  const std::string own_task_, backup_task_, backup_address_, instance_;
  const std::chrono::milliseconds timeout_;
  Membership* membership_ = nullptr;
  std::unique_ptr<net::TensorClient> data_;  // set by start() when given data-plane settings
  mutable std::mutex mu_;
  std::condition_variable cv_;
  node_actor_t node_;        // guarded by mu_
  uint64_t epoch_ = 0;       // guarded by mu_
  std::string data_addr_;    // guarded by mu_; the connected backup's data plane
  std::deque<Outgoing> outgoing_;  // guarded by mu_
  bool stopping_ = false;    // guarded by mu_
  std::set<std::string> primaries_alive_;  // guarded by mu_
  std::set<std::string> taken_over_;       // guarded by mu_
  std::function<void(const std::vector<std::string>&)> on_connect_;  // set before start()
  std::thread thread_;
};

// Which ps task serves each ps task's variables, as one process (a worker, a client) sees it
// when the cluster runs with ps_replicas = 2: the identity until a ps task goes down; from then
// on every ps task it served is served by its backup ((i+1) % n in index order, as the ps tasks
// place their backups), and stays so (sticky: the returning task is a backup now, refreshed by
// the acting primary). A backup's refusal of a direct update (a Status with the ServedBy detail)
// makes the process ask the ps tasks where each one's variables are served (follow_claims),
// which is how a process that started after a failover learns it. The result is the placement's task_aliases (graph/placement_options.h).
// Thread-safe.
class PsServing {
 public:
  // `ps_tasks`: the ps task prefixes in index order (at least 2).
  explicit PsServing(std::vector<std::string> ps_tasks);

  // `task` went down: the ps tasks it served move to its backup. Returns whether anything
  // changed (false for a task that is no ps task or serves nothing now).
  bool task_down(const std::string& task);
  // A copy on `copy_task` refused an update and named `primary_task`: the ps tasks served by
  // `copy_task` move there. Returns whether anything changed (false for unknown tasks).
  bool redirect(const std::string& copy_task, const std::string& primary_task);
  // Whether some ps task's variables are served by `task` now (false after it failed over).
  bool serves(const std::string& task) const;
  // The task that serves ps task `task`'s variables now (`task` itself for a task this map does
  // not know).
  std::string server_of(const std::string& task) const;
  // The other ps tasks whose variables `task` serves now (it took them over), in index order.
  std::vector<std::string> served_by(const std::string& task) const;
  // Routes every ps task as the ps tasks that answered say: `claims` maps each answering ps
  // task to the other ps tasks it serves for now (NodeInfo::serves_for). Each ps task goes to
  // the first claimant after it in ring order; else, nobody claiming it, to itself when it
  // answered or when its present server answered without claiming it (that route leads where
  // its variables are not: after both copies died a chief would restore them there); else (it
  // and its server both silent) it keeps its route. Returns whether anything changed.
  bool follow_claims(const std::map<std::string, std::vector<std::string>>& claims);
  // The ps tasks in index order.
  const std::vector<std::string>& ps_tasks() const { return ps_; }
  // The non-identity entries (ps task -> serving task), for PlacementOptions::task_aliases.
  std::map<std::string, std::string> aliases() const;
  // Changes with every change of aliases() (starts at 0).
  uint64_t generation() const;

 private:
  bool move_all(const std::string& from, const std::string& to);
  const std::vector<std::string> ps_;
  mutable std::mutex mu_;
  std::map<std::string, std::string> serving_;  // guarded by mu_; every ps task -> its server
  uint64_t generation_ = 0;                     // guarded by mu_
};

}  // namespace actorflow
