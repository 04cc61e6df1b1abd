// In-place restarts of actors that failed inside a live process (one_for_one: only the failed
// actor restarts; its siblings and the process keep running).
//
// An actor that catches an exception from one of its handlers "restarts in place": it drops
// its transient state (in-flight steps, pending requests), keeps its durable configuration
// (registered partitions, a variable's value) and its handle, so nobody holds a stale
// reference. RestartBudget counts those restarts; past `max_restarts` within
// `restart_window_secs` the actor gives up and stops with an error that names it and says how
// often it failed. The limits come from the cluster file's [supervisor] section, per Server
// (LocalServerOptions for a local one): nothing about them is process-wide.
#pragma once

#include <chrono>
#include <deque>
#include <string>

#include "core/status.h"

namespace actorflow {

struct RestartPolicy {
  int max_restarts = 5;             // restarts allowed within the window (0: never restart)
  double restart_window_secs = 60;  // sliding window (> 0)
};

// Restart accounting for one actor. Not thread-safe: owned by that actor's state.
class RestartBudget {
 public:
  explicit RestartBudget(RestartPolicy p = RestartPolicy{}) : policy_(p) {}

  // Records a failure of `who` (e.g. "/job:worker/replica:0/task:1/device:CPU:0") caused by
  // `what` now. OK when the actor may restart (logged as a WARNING with the count); otherwise an
  // Internal error "<who> failed N times within W s (max_restarts = M); giving up: <what>",
  // also logged. Restart counts of all actors are added to restarts_total().
  Status record_failure(const std::string& who, const std::string& what);
  // Failures within the current window.
  int recent() const { return static_cast<int>(times_.size()); }

 private:
  RestartPolicy policy_;
  std::deque<std::chrono::steady_clock::time_point> times_;
};

// In-place restarts performed in this process so far (for tests and status). Thread-safe.
int64_t restarts_total();

}  // namespace actorflow
