// MonitoredTrainingSession and the standard hooks (include/actorflow/monitored_session.h): the
// Supervisor does initialisation, restore, checkpoints and recovery; this file adds hooks around
// each run and the stop logic.
#include "actorflow/monitored_session.h"

#include "data/event_file.h"

#include "core/metrics.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "core/logging.h"
#include "actors/server_runtime.h"
#include "config/cluster_spec.h"

namespace actorflow {
namespace train {
namespace {

// The scalar value of `t` as a double (float, double, int32, int64 scalars; NaN otherwise).
double scalar_value(const Tensor& t) {
  if (!t.is_initialized() || t.num_elements() != 1) return NAN;
  switch (t.dtype()) {
    case DType::kFloat32: return t.data<float>()[0];
    case DType::kFloat64: return t.data<double>()[0];
    case DType::kInt32: return t.data<int32_t>()[0];
    case DType::kInt64: return static_cast<double>(t.data<int64_t>()[0]);
    default: return NAN;
  }
}

// Codes after which the Supervisor can bring the model back (a task died mid-step).
bool recoverable(Code c) {
  return c == Code::kUnavailable || c == Code::kAborted || c == Code::kFailedPrecondition ||
         c == Code::kDeadlineExceeded;
}

}  // namespace

// ---- SessionRunContext ---------------------------------------------------------------------

Result<std::string> SessionRunContext::save_checkpoint() {
  if (!owner_->is_chief()) return FailedPrecondition("only the chief saves checkpoints");
  return owner_->supervisor().save_checkpoint();
}

void SessionRunContext::summary(int64_t step, const std::map<std::string, double>& values) {
  owner_->supervisor().summary(step, values);
}

void SessionRunContext::summary_histograms(int64_t step, const std::map<std::string, std::vector<double>>& values) {
  owner_->supervisor().summary_histograms(step, values);
}

bool SessionRunContext::is_chief() const { return owner_->is_chief(); }

Session& SessionRunContext::session() { return owner_->raw_session(); }

Result<MonitoredTrainingSession::Options> MonitoredTrainingSession::Options::for_task(const ClusterSpec& cluster,
                                                                                       const TaskId& task) {
  AF_ASSIGN_OR_RETURN(std::string address, cluster.task_address(task));
  const SupervisorOptions& sv = cluster.supervisor();
  Options o;
  o.master = "actorflow://" + address;
  o.is_chief = sv.chief == task;
  o.checkpoint_dir = sv.logdir;
  o.save_checkpoint_secs = sv.save_checkpoint_secs;
  o.keep_checkpoints = sv.keep_checkpoints;
  o.tensorflow_checkpoints = sv.tensorflow_checkpoints;
  o.ready_timeout_secs = sv.ready_timeout_secs;
  o.task_name = task.job + "/" + std::to_string(task.index);
  return o;
}

const Output& SessionRunContext::global_step() const { return owner_->global_step_; }

// ---- hooks -------------------------------------------------------------------------------------

StopAtStepHook::StopAtStepHook(int64_t num_steps, int64_t last_step) : num_steps_(num_steps), last_step_(last_step) {}

Status StopAtStepHook::after_create_session(Session&, int64_t global_step) {
  if ((num_steps_ > 0) == (last_step_ > 0))
    return InvalidArgument("StopAtStepHook: give exactly one of num_steps (" + std::to_string(num_steps_) +
                           ") and last_step (" + std::to_string(last_step_) + ")");
  if (global_step < 0) return FailedPrecondition("StopAtStepHook needs a global step in the graph");
  if (num_steps_ > 0) last_step_ = global_step + num_steps_;
  return Status::OK();
}

Status StopAtStepHook::after_run(SessionRunContext& ctx, const SessionRunValues& v) {
  if (v.global_step < 0 || v.global_step + 1 < last_step_) return Status::OK();
  // The run read the step before its own increment: read it again.
  auto now = ctx.session().run({ctx.global_step()});
  if (!now.ok()) return now.status();
  if (static_cast<int64_t>(scalar_value((*now)[0])) >= last_step_) ctx.request_stop();
  return Status::OK();
}

CheckpointSaverHook::CheckpointSaverHook(int64_t save_steps, double save_secs)
    : save_steps_(save_steps), save_secs_(save_secs) {}

Status CheckpointSaverHook::after_run(SessionRunContext& ctx, const SessionRunValues& v) {
  if (!ctx.is_chief()) return Status::OK();
  const auto now = std::chrono::steady_clock::now();
  bool due = false;
  if (save_steps_ > 0 && v.global_step >= 0 &&
      (last_saved_step_ < 0 ? v.global_step >= save_steps_ && v.global_step % save_steps_ == 0
                            : v.global_step >= last_saved_step_ + save_steps_))
    due = true;
  if (save_secs_ > 0 && std::chrono::duration<double>(now - last_saved_time_).count() >= save_secs_) due = true;
  if (!due) return Status::OK();
  AF_ASSIGN_OR_RETURN(std::string path, ctx.save_checkpoint());
  saved_.push_back(path);
  last_saved_step_ = v.global_step;
  last_saved_time_ = now;
  return Status::OK();
}

SummarySaverHook::SummarySaverHook(int64_t save_steps, std::map<std::string, Output> scalars)
    : save_steps_(save_steps), scalars_(scalars.begin(), scalars.end()) {}

SummarySaverHook::SummarySaverHook(int64_t save_steps, double save_secs, std::map<std::string, Output> scalars)
    : save_steps_(save_steps), save_secs_(save_secs), scalars_(scalars.begin(), scalars.end()) {}

SummarySaverHook::SummarySaverHook(int64_t save_steps, double save_secs, std::map<std::string, Output> scalars,
                                   std::map<std::string, Output> histograms)
    : save_steps_(save_steps),
      save_secs_(save_secs),
      scalars_(scalars.begin(), scalars.end()),
      histograms_(histograms.begin(), histograms.end()) {}

Status SummarySaverHook::after_create_session(Session&, int64_t) {
  last_saved_time_ = std::chrono::steady_clock::now();
  return Status::OK();
}

SessionRunArgs SummarySaverHook::before_run(SessionRunContext&) {
  SessionRunArgs a;
  const auto now = std::chrono::steady_clock::now();
  fetching_ = save_steps_ > 0 && ++runs_ % save_steps_ == 0;
  if (save_secs_ > 0 && std::chrono::duration<double>(now - last_saved_time_).count() >= save_secs_) fetching_ = true;
  if (fetching_) last_saved_time_ = now;
  if (fetching_) {
    for (const auto& kv : scalars_) a.fetches.push_back(kv.second);
    for (const auto& kv : histograms_) a.fetches.push_back(kv.second);
  }
  return a;
}

Status SummarySaverHook::after_run(SessionRunContext& ctx, const SessionRunValues& v) {
  if (!fetching_) return Status::OK();
  std::map<std::string, double> values;
  for (size_t i = 0; i < scalars_.size() && i < v.results.size(); ++i)
    values[scalars_[i].first] = scalar_value(v.results[i]);
  ctx.summary(v.global_step, values);
  if (histograms_.empty()) return Status::OK();
  std::map<std::string, std::vector<double>> histos;
  for (size_t i = 0; i < histograms_.size() && scalars_.size() + i < v.results.size(); ++i) {
    const Tensor& t = v.results[scalars_.size() + i];
    std::vector<double>& out = histos[histograms_[i].first];
    out.reserve(static_cast<size_t>(t.num_elements()));
    Status s = Status::OK();
    dispatch_dtype(t.dtype(), [&](auto zero) {
      using T = decltype(zero);
      if constexpr (std::is_same_v<T, bool>) {
        s = InvalidArgument("SummarySaverHook: histogram '" + histograms_[i].first + "' is a bool tensor");
      } else {
        const T* d = t.data<T>();
        for (int64_t k = 0; k < t.num_elements(); ++k) out.push_back(static_cast<double>(d[k]));
      }
      return 0;
    });
    AF_RETURN_IF_ERROR(s);
  }
  ctx.summary_histograms(v.global_step, histos);
  return Status::OK();
}

LoggingTensorHook::LoggingTensorHook(std::map<std::string, Output> tensors, int64_t every_n_iter,
                                     std::function<void(const std::string&)> sink)
    : tensors_(tensors.begin(), tensors.end()), every_n_(every_n_iter > 0 ? every_n_iter : 1), sink_(std::move(sink)) {}

SessionRunArgs LoggingTensorHook::before_run(SessionRunContext&) {
  SessionRunArgs a;
  fetching_ = runs_++ % every_n_ == 0;  // the first run, then every n-th (as TF)
  if (fetching_)
    for (const auto& kv : tensors_) a.fetches.push_back(kv.second);
  return a;
}

Status LoggingTensorHook::after_run(SessionRunContext&, const SessionRunValues& v) {
  if (!fetching_) return Status::OK();
  std::ostringstream line;
  for (size_t i = 0; i < tensors_.size() && i < v.results.size(); ++i) {
    if (i) line << ", ";
    const Tensor& t = v.results[i];
    line << tensors_[i].first << " = ";
    if (t.num_elements() == 1) line << scalar_value(t);
    else line << t.to_string();
  }
  if (v.global_step >= 0) line << " (step " << v.global_step << ")";
  if (sink_) sink_(line.str());
  else AF_LOG(INFO) << line.str();
  return Status::OK();
}

NanTensorHook::NanTensorHook(Output loss, bool fail_on_nan_loss) : loss_(std::move(loss)), fail_(fail_on_nan_loss) {}

SessionRunArgs NanTensorHook::before_run(SessionRunContext&) { return SessionRunArgs{{loss_}}; }

Status NanTensorHook::after_run(SessionRunContext& ctx, const SessionRunValues& v) {
  if (v.results.empty() || !std::isnan(scalar_value(v.results[0]))) return Status::OK();
  const std::string what = "NaN loss during training (step " + std::to_string(v.global_step) + ")";
  if (fail_) return InvalidArgument(what);
  AF_LOG(WARNING) << what << "; stopping";
  ctx.request_stop();
  return Status::OK();
}

// ---- ProfilerHook -----------------------------------------------------------------------------

ProfilerHook::ProfilerHook(int64_t save_steps, std::string output_dir, size_t max_events)
    : save_steps_(std::max<int64_t>(1, save_steps)), dir_(std::move(output_dir)), max_events_(max_events) {}

ProfilerHook::~ProfilerHook() = default;

SessionRunArgs ProfilerHook::before_run(SessionRunContext&) {
  SessionRunArgs a;
  tracing_ = runs_++ % save_steps_ == 0;
  if (tracing_) {
    a.options.trace_level = RunOptions::TraceLevel::kFullTrace;
    a.options.trace_max_events = max_events_;
  }
  return a;
}

Status ProfilerHook::after_run(SessionRunContext&, const SessionRunValues& values) {
  if (!tracing_ || !values.run_metadata || values.run_metadata->step_stats.empty()) return Status::OK();
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return Unavailable("ProfilerHook: cannot create " + dir_ + ": " + ec.message());
  const int64_t step = values.global_step >= 0 ? values.global_step : runs_ - 1;
  const std::string path = dir_ + "/timeline-" + std::to_string(step) + ".json";
  AF_RETURN_IF_ERROR(values.run_metadata->write_chrome_trace(path));
  written_.push_back(path);
  if (!events_) {
    auto w = EventFileWriter::open(dir_, ".profile");
    if (!w.ok()) return w.status().with_prefix("ProfilerHook");
    events_ = std::move(*w);
  }
  return events_->add_run_metadata(step, "step_" + std::to_string(step), values.run_metadata->step_stats)
      .with_prefix("ProfilerHook");
}

// ---- MonitoredTrainingSession -----------------------------------------------------------------

Result<std::unique_ptr<MonitoredTrainingSession>> MonitoredTrainingSession::create(const Scope& scope,
                                                                                   Options options) {
  AF_RETURN_IF_ERROR(scope.status());
  std::unique_ptr<MonitoredTrainingSession> m(new MonitoredTrainingSession());
  m->global_step_ = get_global_step(scope);
  if (!options.init_op.valid()) {
    AF_ASSIGN_OR_RETURN(options.init_op, global_variables_initializer(scope));
  }
  SupervisorConfig sc;
  sc.is_chief = options.is_chief;
  sc.logdir = options.checkpoint_dir;
  sc.global_step = m->global_step_;
  sc.init_op = options.init_op;
  sc.save_checkpoint_secs = options.save_checkpoint_secs;
  sc.keep_checkpoints = options.keep_checkpoints;
  sc.tensorflow_checkpoints = options.tensorflow_checkpoints;
  sc.ready_timeout_secs = options.ready_timeout_secs;
  sc.task_name = options.task_name;
  m->supervisor_ = std::make_unique<Supervisor>(scope, sc);
  AF_ASSIGN_OR_RETURN(m->session_, m->supervisor_->managed_session(options.master, options.session));
  m->hooks_ = options.hooks;
  if (options.is_chief) m->hooks_.insert(m->hooks_.end(), options.chief_only_hooks.begin(), options.chief_only_hooks.end());
  // The cluster file's [supervisor] trace_every_steps: a ProfilerHook on every task's session.
  if (Server* server = ServerRuntime::find(options.master)) {
    const SupervisorOptions& sup = ServerRuntime(*server).cluster().supervisor();
    if (sup.trace_every_steps > 0)
      m->hooks_.push_back(std::make_shared<ProfilerHook>(
          sup.trace_every_steps, sup.trace_dir.empty() ? sup.logdir + "/traces" : sup.trace_dir));
  }
  m->options_ = std::move(options);
  int64_t gs = -1;
  if (m->global_step_.valid()) {
    AF_ASSIGN_OR_RETURN(auto r, m->session_->run({m->global_step_}));
    gs = static_cast<int64_t>(scalar_value(r[0]));
    m->last_global_step_ = gs;
  }
  for (auto& h : m->hooks_) {
    Status st = h->after_create_session(*m->session_, gs);
    if (!st.ok()) {
      m->supervisor_->stop();
      return st;
    }
  }
  return m;
}

MonitoredTrainingSession::~MonitoredTrainingSession() { close(); }

Result<std::vector<Tensor>> MonitoredTrainingSession::run(const FeedDict& feeds, const std::vector<Output>& fetches,
                                                          const std::vector<Output>& targets) {
  if (closed_) return FailedPrecondition("MonitoredTrainingSession: run after close()");
  if (stopped_) return FailedPrecondition("MonitoredTrainingSession: run after should_stop()");
  SessionRunContext ctx(this, &fetches);
  // Everyone's fetches in one run: the loop's, then each hook's, then the global step (a tensor
  // several of them ask for is fetched once: Session::run_by_name).
  std::vector<Output> all = fetches;
  std::vector<std::pair<size_t, size_t>> ranges;  // per hook: [begin, end) in `all`
  RunOptions options;  // traced when any hook asks
  for (auto& h : hooks_) {
    SessionRunArgs a = h->before_run(ctx);
    ranges.emplace_back(all.size(), all.size() + a.fetches.size());
    all.insert(all.end(), a.fetches.begin(), a.fetches.end());
    if (a.options.trace_level == RunOptions::TraceLevel::kFullTrace) {
      options.trace_max_events = options.trace_level == RunOptions::TraceLevel::kFullTrace
                                     ? std::max(options.trace_max_events, a.options.trace_max_events)
                                     : a.options.trace_max_events;
      options.trace_level = RunOptions::TraceLevel::kFullTrace;
    }
  }
  RunMetadata metadata;
  const bool with_gs = global_step_.valid();
  if (with_gs) all.push_back(global_step_);
  Result<std::vector<Tensor>> r = run_recovering(options, feeds, all, targets, &metadata);
  if (!r.ok()) return r.status();
  std::vector<Tensor>& values = *r;
  if (with_gs) {
    last_global_step_ = static_cast<int64_t>(scalar_value(values.back()));
    static Gauge& gs = Metrics::global().gauge("actorflow_global_step", "The global step this task's training loop last read.");
    gs.set(static_cast<double>(last_global_step_));
  }
  for (size_t i = 0; i < hooks_.size(); ++i) {
    SessionRunValues v;
    v.results.assign(values.begin() + static_cast<std::ptrdiff_t>(ranges[i].first),
                     values.begin() + static_cast<std::ptrdiff_t>(ranges[i].second));
    v.global_step = with_gs ? last_global_step_ : -1;
    v.run_metadata = &metadata;
    Status hs = hooks_[i]->after_run(ctx, v);
    if (!hs.ok()) {
      // A hook's own run (a checkpoint, an extra read) met a task that died after the step: the
      // step stands; recover as for a failed step (bounded by ready_timeout_secs) and go on,
      // the hook's work for this step lost. Anything else ends the run.
      if (!recoverable(hs.code())) return hs;
      AF_LOG(WARNING) << options_.task_name << ": a hook failed after the step (" << hs << "); recovering";
      AF_RETURN_IF_ERROR(supervisor_->recover(hs, last_global_step_));
    }
  }
  if (ctx.stop_requested()) stopped_ = true;
  values.resize(fetches.size());
  return std::move(values);
}

Result<std::vector<Tensor>> MonitoredTrainingSession::run_recovering(const RunOptions& options,
                                                                     const FeedDict& feeds,
                                                                     const std::vector<Output>& fetches,
                                                                     const std::vector<Output>& targets,
                                                                     RunMetadata* metadata) {
  for (int attempt = 0;; ++attempt) {
    Result<std::vector<Tensor>> r = session_->run(options, feeds, fetches, targets, metadata);
    if (r.ok()) return r;
    const Code c = r.status().code();
    if (c == Code::kOutOfRange) {
      stopped_ = true;  // the input ended, or the synchronous group closed: training is over
      return r.status();
    }
    if (!recoverable(c) || attempt >= options_.max_recoveries_per_run) return r.status();
    AF_LOG(WARNING) << options_.task_name << ": step failed (" << r.status() << "); recovering";
    Status rs = supervisor_->recover(r.status(), last_global_step_);
    if (!rs.ok()) return rs;
  }
}

Result<std::vector<Tensor>> MonitoredTrainingSession::run_without_hooks(const FeedDict& feeds,
                                                                        const std::vector<Output>& fetches,
                                                                        const std::vector<Output>& targets) {
  if (closed_) return FailedPrecondition("MonitoredTrainingSession: run_without_hooks after close()");
  RunMetadata metadata;
  return run_recovering(RunOptions(), feeds, fetches, targets, &metadata);
}

Status MonitoredTrainingSession::close() {
  if (closed_) return Status::OK();
  closed_ = true;
  stopped_ = true;
  Status first;
  for (auto& h : hooks_) {
    Status st = h->end(*session_);
    if (first.ok() && !st.ok()) first = st;
  }
  Status st = supervisor_->stop();
  if (first.ok() && !st.ok()) first = st;
  return first;
}

}  // namespace train
}  // namespace actorflow
