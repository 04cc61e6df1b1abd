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
#include <mutex>
#include <string>
#include <thread>

#include "actors/interfaces.h"
#include "core/status.h"
#include "graph/graph.h"

namespace actorflow {

class Membership;

// The attr a replicated call carries on the backup (set by the node actor): the variable
// actor then applies it as a backup and never forwards it.
inline constexpr const char* kReplicaCallAttr = "_replica";

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
  // The backup of this ps task: `backup_task` (a task prefix) at `backup_address`; calls to it
  // time out after `timeout` (the peer timeout: a stopped backup is noticed within it).
  PsReplicator(std::string backup_task, std::string backup_address, std::chrono::milliseconds timeout);
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
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  void run();

  const std::string backup_task_, backup_address_;
  const std::chrono::milliseconds timeout_;
  Membership* membership_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  node_actor_t node_;        // guarded by mu_
  uint64_t epoch_ = 0;       // guarded by mu_
  bool stopping_ = false;    // guarded by mu_
  std::thread thread_;
};

}  // namespace actorflow
