// Replicated parameter servers ([supervisor] ps_replicas = 2; docs/architecture.md,
// "Replicated parameter servers"): primary-backup. The variable actors of ps task p are the
// primaries of p's variables; ps task (p+1) % num_ps holds a backup of each, under the same
// name in its resource container. A primary applies a mutating call, forwards the same call
// (or, the first time after its backup (re)connected, its whole state: value and slots) to the
// backup's node actor as (replicate_atom, ...) and answers its caller only once the backup
// acknowledged, so an acknowledged update is held by both. Calls reach the backup in the
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
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "actors/interfaces.h"
#include "core/status.h"
#include "graph/graph.h"

namespace actorflow {

class Membership;

// The attr a replicated call carries on the backup (set by the node actor): the variable
// actor then applies it as a backup and never forwards it.
inline constexpr const char* kReplicaCallAttr = "_replica";
// The attr that names the task the replicated call came from (its primary), set beside it.
inline constexpr const char* kReplicaFromAttr = "_replica_from";

// The marker a backup copy's refusal of a direct update carries, so that the caller's process
// can route that ps task's variables to the primary instead: "[served_by COPY -> PRIMARY]".
// Pure.
std::string served_by_marker(const std::string& copy_task, const std::string& primary_task);
// The first such marker in `message`: false when there is none (the outputs are then untouched).
// Pure.
bool parse_served_by(const std::string& message, std::string* copy_task, std::string* primary_task);

// AttrMap <-> bytes for replicated calls (every AttrValue kind except Tensor, which variable
// calls never carry; a Tensor attr is dropped). decode: InvalidArgument on malformed bytes.
// Pure; thread-safe.
std::string encode_call_attrs(const AttrMap& attrs);
Result<AttrMap> decode_call_attrs(const std::string& bytes);

// True for the variable methods that change state (and so are replicated); `attrs` tells a
// sync_control "stats" (a read) from "leave"/"close". Pure.
bool replicated_method(const std::string& method, const AttrMap& attrs);

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
  // stop()) and reconnects after backup_failed(). Call once.
  void start(Membership* membership);
  // Stops and joins the thread. Idempotent; thread-safe.
  void stop();

  struct Backup {
    node_actor_t node;   // null while not connected: the primary then serves alone
    uint64_t epoch = 0;  // changes with every connection
  };
  // The backup as now known. Thread-safe.
  Backup backup() const;
  // A replicated call of connection `epoch` failed: forget that connection (when it is still
  // the current one) and reconnect. Thread-safe.
  void backup_failed(uint64_t epoch, const std::string& why);
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
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  void run();

  const std::string own_task_, backup_task_, backup_address_;
  const std::chrono::milliseconds timeout_;
  Membership* membership_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  node_actor_t node_;        // guarded by mu_
  uint64_t epoch_ = 0;       // guarded by mu_
  bool stopping_ = false;    // guarded by mu_
  std::set<std::string> primaries_alive_;  // guarded by mu_
  std::thread thread_;
};

// Which ps task serves each ps task's variables, as one process (a worker, a client) sees it
// when the cluster runs with ps_replicas = 2: the identity until a ps task goes down; from then
// on every ps task it served is served by its backup ((i+1) % n in index order, as the ps tasks
// place their backups), and stays so (sticky: the returning task is a backup now, refreshed by
// the acting primary). A backup's refusal of a direct update names its primary (served_by
// marker) and moves the serving there, which is how a process that started after a failover
// learns it. The result is the placement's task_aliases (graph/placement_options.h).
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
