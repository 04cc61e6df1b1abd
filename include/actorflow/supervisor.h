// af::Supervisor: tf.train.Supervisor for between-graph replication (seed 002).
//
// Every worker builds the same graph and a Supervisor over it. The chief (is_chief) restores
// the newest valid checkpoint in logdir or, when there is none, runs init_op; the other
// workers wait (bounded, logged) until every variable is initialized. The chief's
// supervisor actor (detached: it may block on sessions and files) then saves a checkpoint
// every save_checkpoint_secs (actorflow's msgpack file or TensorFlow's format, atomic, checksummed, newest K kept) and writes scalar
// summaries as JSON lines. should_stop() turns true after request_stop() or a fatal error.
//
// Thread-safety: should_stop, request_stop and summary may be called from any thread; the other
// methods from the thread that drives training. Brings no CAF header (the supervisor actor lives
// in actors/supervisor.cc). Part of <actorflow/train.h>.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actorflow/session.h"
#include "core/status.h"
#include "graph/scope.h"

namespace actorflow {

struct SupervisorConfig {
  bool is_chief = false;
  std::string logdir;                  // checkpoints and summaries; "" = neither
  Output global_step;                  // optional int64 scalar variable
  Output init_op;                      // run by the chief when no checkpoint exists
  double save_checkpoint_secs = 60;    // 0 = only at stop()
  int keep_checkpoints = 5;
  // Write checkpoints in TensorFlow's format (tf.train.Saver reads them; docs/interop.md) instead
  // of actorflow's: sharded, one data file per parameter-server task holding variables, and
  // partitioned variables as TensorFlow's slices. Restoring reads either format, whichever the
  // newest checkpoint is in.
  bool tensorflow_checkpoints = false;
  double ready_timeout_secs = 120;     // how long a non-chief waits for the model
  double save_summaries_secs = 10;     // steps/s summaries; 0 = off
  std::string task_name = "worker";    // used in log lines and the summary file name
  // Chief of a multi-task cluster: watch every task of the cluster (not only those its session
  // uses). A closed connection is detected at once, a silent task after the cluster's
  // peer_timeout_ms (default 3 s); both are logged ("task T is down: why"), and so is the task's
  // return ("supervisor: task T is back after S s").
  bool monitor_tasks = true;
};

// What the chief's supervisor knows about one task (see Supervisor::task_health).
struct TaskHealth {
  std::string task;        // "/job:worker/replica:0/task:1"
  bool up = false;
  int times_down = 0;      // how often it went down since the supervisor started
  double down_secs = 0;    // total time it was down (including now, if down)
};

class Supervisor {
 public:
  // Adds save/restore/readiness ops for every variable of `scope`'s graph (so build the model
  // first). Construction errors are reported by managed_session().
  Supervisor(const Scope& scope, SupervisorConfig cfg);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // A session on `target` whose model is ready to train (see the class comment). The
  // Supervisor keeps a pointer to it for checkpoints; it must outlive the returned session's
  // use by the supervisor, i.e. call stop() before destroying the session.
  Result<std::unique_ptr<Session>> managed_session(const std::string& target, SessionOptions opts = {});

  bool should_stop() const { return stop_.load(); }
  // Asks every loop to finish; `why` (if not OK) is logged and returned by stop().
  void request_stop(const Status& why = Status::OK());
  // Appends one JSON line {"step":..,"time":..,"<name>":value,...} to the summary file, and the
  // same scalars (plus "global_step/sec" from the second summary on) as one event to this task's
  // TensorBoard event file in logdir (events.out.tfevents.<secs>.<host>.<task>, data/event_file.h),
  // so `tensorboard --logdir <logdir>` shows them.
  void summary(int64_t step, const std::map<std::string, double>& values);
  // Appends one event of histograms (tag -> the values summarised, e.g. a weight tensor's
  // elements) for `step` to the same TensorBoard event file (its Histograms and Distributions
  // tabs). The event file's first event is the graph (its Graphs tab), written when the file is
  // opened by the first summary of either kind. Thread-safe like summary().
  void summary_histograms(int64_t step, const std::map<std::string, std::vector<double>>& values);
  // Saves a checkpoint now (chief only). Returns its path.
  Result<std::string> save_checkpoint();
  // After a step failed because a task died (Unavailable, Aborted, or a variable that is no
  // longer initialized because its parameter server restarted): the chief restores the newest
  // checkpoint when the model is gone (logging how many global steps were rolled back) and other
  // workers wait until the model is ready again. Bounded by ready_timeout_secs.
  Status recover(const Status& failure, int64_t last_global_step);
  // The chief's view of every other task (empty unless monitoring). Thread-safe.
  std::vector<TaskHealth> task_health() const;
  // The global step the chief restored (0 when it initialized).
  int64_t restored_step() const { return restored_step_; }
  // Final checkpoint (chief), stops the periodic work. Idempotent. Returns the stop reason.
  Status stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_{false};
  int64_t restored_step_ = 0;
};

}  // namespace actorflow
