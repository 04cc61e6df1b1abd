// tf.train.MonitoredTrainingSession for actorflow: a session that initialises or restores the
// model (as the Supervisor does), runs hooks around every step, saves checkpoints, recovers from a
// lost parameter server or chief, and tells the training loop when to stop.
//
//   train::MonitoredTrainingSession::Options o;
//   o.master = server.target();
//   o.is_chief = task_index == 0;
//   o.checkpoint_dir = "/tmp/train_logs";
//   o.hooks = {std::make_shared<train::StopAtStepHook>(0, 5000),
//              std::make_shared<train::NanTensorHook>(loss)};
//   auto sess = train::MonitoredTrainingSession::create(root, o);   // Result<unique_ptr<...>>
// or, from the cluster file the task runs with (its [supervisor] section):
//   auto o = train::MonitoredTrainingSession::Options::for_task(*cluster, af::TaskId{"worker", i});
//   while (!(*sess)->should_stop()) (*sess)->run({{x, batch}}, {}, {train_op});
//   (*sess)->close();
//
// A run that fails because a task died (Unavailable, Aborted, DeadlineExceeded, or a variable
// that is no longer initialised: FailedPrecondition) is recovered (the chief restores the newest
// checkpoint when the model is gone, other workers wait until it is ready again) and the step is
// run again, at most `max_recoveries_per_run` times. A hook whose after_run fails with one of
// those codes after a successful step (its own run met the dead task) is recovered from the same
// way, the hook's work for that step lost. OutOfRange (the end of the input, or a
// closed synchronous group: SyncReplicasOptimizer) ends training: should_stop() turns true and
// the run returns the OutOfRange status.
//
// Thread-safety: one training loop drives a MonitoredTrainingSession (run, should_stop, close
// from one thread). Hooks are called on that thread. Brings no CAF header.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actorflow/train.h"
#include "actorflow/session.h"
#include "actorflow/supervisor.h"

namespace actorflow {
class ClusterSpec;  // <actorflow/cluster.h>
struct TaskId;      // <actorflow/cluster.h>
}  // namespace actorflow

namespace actorflow {
class EventFileWriter;  // data/event_file.h (actorflow's runtime only)
namespace train {

class MonitoredTrainingSession;

// What a hook sees of the run in progress. Owned by the session; valid during the hook call.
class SessionRunContext {
 public:
  // The fetches the training loop asked for (not the hooks' extra ones).
  const std::vector<Output>& original_fetches() const { return *fetches_; }
  // Asks the session to stop after this run: should_stop() turns true.
  void request_stop() { stop_requested_ = true; }
  bool stop_requested() const { return stop_requested_; }
  // Saves a checkpoint now (the chief's Supervisor; FailedPrecondition without a checkpoint_dir
  // or on a non-chief). Returns its path.
  Result<std::string> save_checkpoint();
  // Appends scalar summaries for `step` to this task's summary file (see Supervisor::summary).
  void summary(int64_t step, const std::map<std::string, double>& values);
  // Appends histogram summaries for `step` (see Supervisor::summary_histograms).
  void summary_histograms(int64_t step, const std::map<std::string, std::vector<double>>& values);
  // The chief's flag (hooks that only the chief should act on).
  bool is_chief() const;
  // The session underneath, for a hook's own runs (no hooks run around them).
  Session& session();
  // The graph's global step (invalid when it has none).
  const Output& global_step() const;

 private:
  friend class MonitoredTrainingSession;
  SessionRunContext(MonitoredTrainingSession* owner, const std::vector<Output>* fetches)
      : owner_(owner), fetches_(fetches) {}
  MonitoredTrainingSession* owner_;
  const std::vector<Output>* fetches_;
  bool stop_requested_ = false;
};

// Extra tensors a hook wants fetched with the run, and the run options it wants
// (tf.train.SessionRunArgs). The run is traced when any hook asks for kFullTrace (with the
// largest trace_max_events asked for).
struct SessionRunArgs {
  SessionRunArgs() = default;
  // Only fetches (`return {{loss}};` in a hook's before_run).
  SessionRunArgs(std::vector<Output> f) : fetches(std::move(f)) {}  // NOLINT: implicit on purpose
  SessionRunArgs(std::vector<Output> f, RunOptions o) : fetches(std::move(f)), options(o) {}
  std::vector<Output> fetches;
  RunOptions options;
};

// What a hook gets after the run: the values of its own extra fetches, in its order, and the
// global step as the run read it (-1 when the graph has no global step): for a train op that
// increments it, the value before this run's increment, as in TensorFlow.
struct SessionRunValues {
  std::vector<Tensor> results;
  int64_t global_step = -1;
  // The run's metadata (its trace when a hook asked for one; empty otherwise). Owned by the
  // session; valid during after_run. Never null in after_run.
  const RunMetadata* run_metadata = nullptr;
};

// tf.train.SessionRunHook. Every method has a default that does nothing; an error from a hook
// ends the call it was made in (run() returns it; create() fails). Called on the training loop's
// thread, never concurrently.
class SessionRunHook {
 public:
  virtual ~SessionRunHook() = default;
  // Once, after the model is ready (initialised or restored); `global_step` as then (-1: none).
  virtual Status after_create_session(Session& /*session*/, int64_t /*global_step*/) { return Status::OK(); }
  // Before each run: the extra tensors to fetch with it.
  virtual SessionRunArgs before_run(SessionRunContext& /*ctx*/) { return {}; }
  // After each successful run, with the extra fetches' values.
  virtual Status after_run(SessionRunContext& /*ctx*/, const SessionRunValues& /*values*/) { return Status::OK(); }
  // Once, from close().
  virtual Status end(Session& /*session*/) { return Status::OK(); }
};

// Stops training when the global step reaches `last_step`, or `num_steps` steps after the step
// the session started at (give one: the other 0). Needs a global step in the graph. As TF's: once
// the step a run read is last_step - 1 or later, the hook reads the global step again and stops
// when it has reached last_step.
class StopAtStepHook : public SessionRunHook {
 public:
  StopAtStepHook(int64_t num_steps, int64_t last_step);
  Status after_create_session(Session& session, int64_t global_step) override;
  Status after_run(SessionRunContext& ctx, const SessionRunValues& values) override;

 private:
  int64_t num_steps_, last_step_;
};

// Saves a checkpoint every `save_steps` global steps (0: off) and/or every `save_secs` seconds
// (0: off), and one at the end; the chief only (a no-op elsewhere). Needs a checkpoint_dir.
class CheckpointSaverHook : public SessionRunHook {
 public:
  CheckpointSaverHook(int64_t save_steps, double save_secs);
  Status after_run(SessionRunContext& ctx, const SessionRunValues& values) override;
  // The paths saved so far (for tests and logs).
  const std::vector<std::string>& saved() const { return saved_; }

 private:
  int64_t save_steps_;
  double save_secs_;
  int64_t last_saved_step_ = -1;
  std::chrono::steady_clock::time_point last_saved_time_ = std::chrono::steady_clock::now();
  std::vector<std::string> saved_;
};

// Fetches the scalar tensors `scalars` (name -> float or int scalar) every `save_steps` runs, or
// with the three-argument form also on the first run at least `save_secs` seconds after the last
// save (0 turns either trigger off; tf.train.SummarySaverHook(save_steps, save_secs)), and
// appends them, with the global step, to the task's summary file (Supervisor::summary, which also
// records steps/s). With `histograms` (name -> a tensor of any shape and numeric dtype, e.g. a
// weight or an activation: tf.summary.histogram), their elements are fetched at the same runs
// and written as TensorBoard histograms (Supervisor::summary_histograms).
class SummarySaverHook : public SessionRunHook {
 public:
  SummarySaverHook(int64_t save_steps, std::map<std::string, Output> scalars);
  SummarySaverHook(int64_t save_steps, double save_secs, std::map<std::string, Output> scalars);
  SummarySaverHook(int64_t save_steps, double save_secs, std::map<std::string, Output> scalars,
                   std::map<std::string, Output> histograms);
  Status after_create_session(Session& session, int64_t global_step) override;
  SessionRunArgs before_run(SessionRunContext& ctx) override;
  Status after_run(SessionRunContext& ctx, const SessionRunValues& values) override;

 private:
  int64_t save_steps_;
  double save_secs_ = 0;
  std::vector<std::pair<std::string, Output>> scalars_;
  std::vector<std::pair<std::string, Output>> histograms_;
  int64_t runs_ = 0;
  std::chrono::steady_clock::time_point last_saved_time_ = std::chrono::steady_clock::now();
  bool fetching_ = false;
};

// Logs the values of `tensors` (name -> Output) every `every_n_iter` runs as one line
// "name = value, name = value (step S)", to `sink` (default: the INFO log).
class LoggingTensorHook : public SessionRunHook {
 public:
  LoggingTensorHook(std::map<std::string, Output> tensors, int64_t every_n_iter,
                    std::function<void(const std::string&)> sink = nullptr);
  SessionRunArgs before_run(SessionRunContext& ctx) override;
  Status after_run(SessionRunContext& ctx, const SessionRunValues& values) override;

 private:
  std::vector<std::pair<std::string, Output>> tensors_;
  int64_t every_n_;
  std::function<void(const std::string&)> sink_;
  int64_t runs_ = 0;
  bool fetching_ = false;
};

// Checks `loss` after every run: a NaN fails the run with InvalidArgument "NaN loss during
// training (step S)" when `fail_on_nan_loss`, else requests a stop (and logs it).
class NanTensorHook : public SessionRunHook {
 public:
  explicit NanTensorHook(Output loss, bool fail_on_nan_loss = true);
  SessionRunArgs before_run(SessionRunContext& ctx) override;
  Status after_run(SessionRunContext& ctx, const SessionRunValues& values) override;

 private:
  Output loss_;
  bool fail_;
};

// Traces a step every `save_steps` runs (the first run, then every save_steps-th: TensorFlow's
// ProfilerHook) and writes each as Chrome trace JSON to `output_dir`/timeline-<global step>.json
// (the run counter when the graph has no global step), creating the directory, and as run
// metadata tagged "step_<global step>" into an events file in `output_dir` (TensorBoard's Graphs
// tab: a "session run" per traced step, with each node's compute time). Each traced run
// keeps at most `max_events` events per task (RunOptions::trace_max_events). The cluster file's
// [supervisor] trace_every_steps adds one to every MonitoredTrainingSession of its tasks
// (docs/cluster-file.md). Errors: the directory or a file cannot be written (the run that
// traced fails with it).
class ProfilerHook : public SessionRunHook {
 public:
  ProfilerHook(int64_t save_steps, std::string output_dir, size_t max_events = StepTraces::kDefaultMaxEvents);
  ~ProfilerHook() override;
  SessionRunArgs before_run(SessionRunContext& ctx) override;
  Status after_run(SessionRunContext& ctx, const SessionRunValues& values) override;
  // The files written so far, in order.
  const std::vector<std::string>& written() const { return written_; }

 private:
  int64_t save_steps_;
  std::string dir_;
  size_t max_events_;
  int64_t runs_ = 0;
  bool tracing_ = false;
  std::vector<std::string> written_;
  std::unique_ptr<EventFileWriter> events_;  // opened with the first trace
};

class MonitoredTrainingSession {
 public:
  struct Options {
    std::string master;              // the server target (Server::target())
    bool is_chief = true;
    std::string checkpoint_dir;      // "" = no checkpoints or summaries
    std::vector<std::shared_ptr<SessionRunHook>> hooks;
    std::vector<std::shared_ptr<SessionRunHook>> chief_only_hooks;  // run only when is_chief
    double save_checkpoint_secs = 600;  // the Supervisor's periodic save (0: only at close)
    int keep_checkpoints = 5;
    bool tensorflow_checkpoints = false;  // SupervisorConfig::tensorflow_checkpoints
    double ready_timeout_secs = 120;    // non-chief: how long to wait for the model
    std::string task_name = "worker";   // log lines and the summary file's name
    Output init_op;                     // default: global_variables_initializer of the graph
    SessionOptions session;
    int max_recoveries_per_run = 3;

    // The options of task `task` of `cluster` as its cluster file says (TensorFlow's
    // MonitoredTrainingSession(master=server.target, is_chief=..., checkpoint_dir=...) in one
    // call): master is the task's target ("actorflow://" + its address, what
    // Server::target() gives it), is_chief whether it is [supervisor] chief, checkpoint_dir the
    // logdir, and save_checkpoint_secs, keep_checkpoints, the checkpoint format and
    // ready_timeout_secs from [supervisor]; task_name "job/N". Hooks, init_op and session stay
    // as defaulted ([supervisor] save_summaries_secs is the period to give a SummarySaverHook;
    // trace_every_steps applies by itself). NotFound when `task` is not in the cluster. Pure.
    static Result<Options> for_task(const ClusterSpec& cluster, const TaskId& task);
  };

  // Builds the Supervisor over `scope`'s graph (build the model first), opens a session whose
  // model is ready, and calls every hook's after_create_session. Errors: the Supervisor's (no
  // model within ready_timeout_secs, an unreadable checkpoint_dir), a hook's.
  static Result<std::unique_ptr<MonitoredTrainingSession>> create(const Scope& scope, Options options);
  ~MonitoredTrainingSession();
  MonitoredTrainingSession(const MonitoredTrainingSession&) = delete;
  MonitoredTrainingSession& operator=(const MonitoredTrainingSession&) = delete;

  // True once a hook asked to stop, training ran out of range, the Supervisor stopped (a fatal
  // error in its background work, or Supervisor::request_stop), or close() ran.
  bool should_stop() const { return stopped_ || supervisor_->should_stop(); }
  // One step with the hooks (see the file comment). Returns the values of `fetches`.
  // FailedPrecondition after should_stop().
  Result<std::vector<Tensor>> run(const FeedDict& feeds, const std::vector<Output>& fetches,
                                  const std::vector<Output>& targets = {});
  // A run without the hooks (an evaluation, a final read), recovered as run() recovers a step
  // (a parameter server lost while the test set is evaluated is waited for and the run made
  // again), as TensorFlow's run_step_fn with the raw session. Allowed after should_stop() (the
  // training loop ended) until close(): FailedPrecondition after close(). Returns the values of
  // `fetches`, or the error of the last attempt (past max_recoveries_per_run, or one that is not
  // recoverable).
  Result<std::vector<Tensor>> run_without_hooks(const FeedDict& feeds, const std::vector<Output>& fetches,
                                                const std::vector<Output>& targets = {});
  // Calls every hook's end(), then stops the Supervisor (the chief's final checkpoint).
  // Idempotent; returns the first error.
  Status close();

  // The session underneath (runs with neither hooks nor recovery). Owned here.
  Session& raw_session() { return *session_; }
  Supervisor& supervisor() { return *supervisor_; }
  bool is_chief() const { return options_.is_chief; }

 private:
  MonitoredTrainingSession() = default;
  friend class SessionRunContext;
  // session_->run, recovering from a lost task up to max_recoveries_per_run times (run() and
  // run_without_hooks). OutOfRange marks training over (should_stop()).
  Result<std::vector<Tensor>> run_recovering(const RunOptions& options, const FeedDict& feeds,
                                             const std::vector<Output>& fetches, const std::vector<Output>& targets,
                                             RunMetadata* metadata);

  Options options_;
  Output global_step_;
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<Session> session_;
  std::vector<std::shared_ptr<SessionRunHook>> hooks_;
  int64_t last_global_step_ = 0;
  bool stopped_ = false;
  bool closed_ = false;
};

}  // namespace train
}  // namespace actorflow
