#include "actors/server_runtime.h"
#include "actors/supervisor.h"

#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <condition_variable>
#include <thread>

#include "actors/membership.h"
#include "actors/ps_replication.h"
#include "actors/server.h"
#include "actors/server_gate.h"
#include "core/logging.h"
#include "config/cluster_spec.h"  // [supervisor] chief
#include "core/waits.h"
#include "core/metrics.h"
#include "actors/variable_checkpoint.h"
#include "data/checkpoint.h"
#include "data/event_file.h"
#include "graph/ops.h"
#include "graph/ops_variables.h"
#include "graph/tf/tf_export.h"
#include "graph/op_kinds.h"

namespace actorflow {

class Supervisor::Impl {
 public:
  Impl(Supervisor* owner, const Scope& scope, SupervisorConfig cfg)
      : owner_(owner), scope_(scope), cfg_(std::move(cfg)), io_(scope, all_variables(scope), "save") {
    Scope save = scope.new_sub_scope("ready");
    for (const Output& v : io_.variables())
      initialized_.push_back(ops::is_variable_initialized(save.with_device(v.node()->requested_device), v));
    if (!io_.status().ok()) status_ = io_.status().with_prefix("Supervisor");
    if (!scope.ok()) status_ = scope.status().with_prefix("Supervisor");
    if (!cfg_.logdir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(cfg_.logdir, ec);
      if (ec) status_ = InvalidArgument("Supervisor: cannot create logdir '" + cfg_.logdir + "': " + ec.message());
      ckpt_ = std::make_unique<CheckpointManager>(
          cfg_.logdir, cfg_.keep_checkpoints, "model.ckpt",
          cfg_.tensorflow_checkpoints ? CheckpointFormat::kTensorFlow : CheckpointFormat::kActorflow);
      summary_path_ = cfg_.logdir + "/summaries-" + sanitize(cfg_.task_name) + ".jsonl";
    }
  }

  ~Impl() {
    disarm_gate_hook();
    stop_saver();
    stop_monitor();
  }

  // After this no gate hook (server_closed) runs or is running: the hook runs only while it can
  // lock alive_, so drop it and wait for a running one to let go (it does not block). Idempotent.
  void disarm_gate_hook() {
    std::weak_ptr<int> running = alive_;
    alive_.reset();
    while (!running.expired()) std::this_thread::yield();
  }

  // Every variable of the graph, in creation order.
  static std::vector<Output> all_variables(const Scope& scope) {
    std::vector<Output> out;
    Graph* g = scope.graph();
    for (int i = 0; i < g->num_nodes(); ++i)
      if (is_variable_op(g->node(i)->op)) out.emplace_back(g->node(i), 0);
    return out;
  }

  static std::string sanitize(std::string s) {
    for (auto& c : s)
      if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
    return s;
  }

  Result<std::unique_ptr<Session>> managed_session(const std::string& target, SessionOptions opts) {
    AF_RETURN_IF_ERROR(status_);
    auto sess = std::make_unique<Session>(scope_, target, opts);
    AF_RETURN_IF_ERROR(sess->status());
    session_ = sess.get();
    // The server is used only inside its gate (server_gate.h): a Server destroyed before this
    // Supervisor (the "wrong" order) closes the gate, and every later use finds it closed
    // instead of a destroyed object. Its closing also wakes the periodic saves and the task
    // monitor, which then end.
    gate_ = ServerRuntime::gate_of(target);
    server_ = gate_ ? ServerRuntime::find(target) : nullptr;
    if (gate_) gate_->on_close(alive_, [this] { server_closed(); });
    // On failure the session dies with this frame: nothing may keep pointing at it (stop() would
    // save a final checkpoint through it: a use after free, seen when a restore failed).
    Status ready = Status::OK();
    if (cfg_.is_chief) {
      start_monitor();
      ready = prepare_chief(*sess);
      if (ready.ok()) start_saver();
    } else {
      ready = wait_until_ready(*sess);
    }
    if (!ready.ok()) {
      session_ = nullptr;
      return ready;
    }
    last_summary_time_ = std::chrono::steady_clock::now();
    return sess;
  }

  // The chief: restore the newest valid checkpoint, or initialize.
  Status prepare_chief(Session& sess) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(cfg_.ready_timeout_secs));
    // A restarted chief whose parameter servers kept the model (only the chief died): adopt
    // it as it is. Restoring a checkpoint would roll back what the other workers trained
    // meanwhile, and initializing would throw it away.
    auto ready = model_ready(sess);
    if (ready.ok() && *ready) {
      int64_t step = 0;
      if (cfg_.global_step.valid()) {
        auto gs = sess.run({cfg_.global_step});
        if (gs.ok()) {
          auto v = global_step_value((*gs)[0]);
          if (v.ok()) step = *v;
        }
      }
      owner_->restored_step_ = step;
      AF_LOG(INFO) << cfg_.task_name << ": the model is already initialized on the parameter servers (global step "
                   << step << "); resuming without restoring or initializing";
      return Status::OK();
    }
    if (ckpt_) {
      auto restored = ckpt_->restore_latest();
      if (!restored.ok()) {
        // Every checkpoint is corrupt: refuse to silently start over.
        return restored.status().with_prefix("Supervisor: cannot restore from " + cfg_.logdir);
      }
      for (const auto& s : ckpt_->last_restore_skipped())
        AF_LOG(WARNING) << "skipped checkpoint " << s.path << ": " << s.why.message();
      if (*restored) {
        AF_RETURN_IF_ERROR(retry_until(deadline, "restoring the model", [&] { return restore(sess, **restored); }));
        owner_->restored_step_ = (*restored)->global_step;
        static Counter& restores = Metrics::global().counter(
            "actorflow_checkpoint_restores_total", "Times the chief restored the model from a checkpoint.");
        restores.inc();
        AF_LOG(INFO) << cfg_.task_name << ": restored the model from global step " << (*restored)->global_step
                     << " (" << ckpt_->last_restored_path() << ")";
        return Status::OK();
      }
    }
    if (!cfg_.init_op.valid()) return InvalidArgument("Supervisor: the chief needs an init_op");
    AF_RETURN_IF_ERROR(retry_until(deadline, "initializing the model",
                                   [&] { return sess.run({}, {}, {cfg_.init_op}).status(); }));
    AF_LOG(INFO) << cfg_.task_name << ": initialized the model";
    return Status::OK();
  }

  // Retries `fn` while the cluster is still coming up (Unavailable / DeadlineExceeded).
  template <typename F>
  Status retry_until(std::chrono::steady_clock::time_point deadline, const char* what, F fn) {
    std::chrono::milliseconds backoff(100);
    int attempt = 0;
    while (true) {
      Status s = fn();
      if (s.ok()) return s;
      const bool transient = s.code() == Code::kUnavailable || s.code() == Code::kDeadlineExceeded;
      if (!transient || std::chrono::steady_clock::now() + backoff > deadline) return s.with_prefix(what);
      if (++attempt % 10 == 1) {
        AF_LOG(INFO) << cfg_.task_name << ": " << what << " (retrying): " << s.message();
      }
      std::this_thread::sleep_for(backoff);  // pacing retries while peers start
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
  }

  Status restore(Session& sess, const CheckpointData& data) {
    const std::vector<std::string> missing = io_.missing_from(data);
    for (const std::string& name : missing) {
      AF_LOG(WARNING) << "checkpoint has no value for variable '" << name << "'; it keeps its initializer";
    }
    if (!missing.empty() && cfg_.init_op.valid()) {
      AF_RETURN_IF_ERROR(sess.run({}, {}, {cfg_.init_op}).status());
    }
    return io_.assign(sess, data, cfg_.logdir, /*allow_missing=*/true);
  }

  // Non-chief: wait until every variable is initialized.
  Status wait_until_ready(Session& sess) {
    const std::vector<Output>& checks = initialized_;
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(cfg_.ready_timeout_secs));
    auto last_log = start - std::chrono::seconds(10);
    std::chrono::milliseconds backoff(50);
    std::string why = "no answer yet";
    // Registered while it lasts (core/waits.h): on the chief, naming what is not initialized.
    std::string chief;
    if (ServerGate::Entry in(gate_); in && server_ && ServerRuntime(*server_).membership())
      chief = ServerRuntime(*server_).cluster().supervisor().chief.device_prefix();
    const std::string waiting = cfg_.task_name + " waits for the chief" + (chief.empty() ? "" : " " + chief) +
                                " to initialize or restore the model";
    WaitHandle wait("model", waiting + " (no answer yet)", chief);
    while (true) {
      auto r = sess.run(checks);
      if (r.ok()) {
        size_t ready = 0, unnamed = 0;
        std::string missing;
        for (size_t i = 0; i < r->size(); ++i) {
          if ((*r)[i].data<bool>()[0]) {
            ++ready;
          } else if (i < io_.variables().size() && missing.size() < 256) {
            missing += (missing.empty() ? "" : ", ") + io_.variables()[i].node()->name;
          } else {
            ++unnamed;
          }
        }
        if (ready == checks.size()) {
          AF_LOG(INFO) << cfg_.task_name << ": model is ready";
          return Status::OK();
        }
        if (unnamed > 0) missing += " and " + std::to_string(unnamed) + " more";
        // As TensorFlow's "Variables not initialized: ...": the log line and the timeout name them.
        why = std::to_string(ready) + " of " + std::to_string(checks.size()) +
              " variables initialized; not initialized: " + missing;
        wait.update(waiting + " (" + why + ")", chief);
      } else {
        why = r.status().message();
        if (r.status().code() != Code::kUnavailable && r.status().code() != Code::kDeadlineExceeded &&
            r.status().code() != Code::kFailedPrecondition)
          return r.status().with_prefix("waiting for the model");
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline)
        return DeadlineExceeded(cfg_.task_name + ": the model was not ready after " +
                                std::to_string(cfg_.ready_timeout_secs) + " s (" + why + ")");
      if (now - last_log > std::chrono::seconds(5)) {
        AF_LOG(INFO) << cfg_.task_name << ": waiting for the chief to initialize the model (" << why << ")";
        last_log = now;
      }
      std::this_thread::sleep_for(backoff);  // polling remote state, bounded by the deadline
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    }
  }

  // Is every variable initialized? (false, with no error, when a parameter server lost them)
  Result<bool> model_ready(Session& sess) {
    AF_ASSIGN_OR_RETURN(auto r, sess.run(initialized_));
    for (const auto& t : r)
      if (!t.data<bool>()[0]) return false;
    return true;
  }

  Status recover(const Status& failure, int64_t last_step) {
    if (!session_) return failure;
    AF_LOG(WARNING) << cfg_.task_name << ": step failed (" << failure.message() << "); recovering";
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(cfg_.ready_timeout_secs));
    std::chrono::milliseconds backoff(100);
    auto last_log = std::chrono::steady_clock::now();
    while (true) {
      // Replicated ps tasks: a route that failed over may lead where the model no longer is (both
      // copies died and the chief restored it where it was placed); the ps tasks say where. The
      // chief restores only through routes every ps task confirmed: a route kept because its
      // tasks were silent could write one task's variables on another (which would then hold
      // them as their primary, and the task they belong to as refusing backup copies).
      bool routes_confirmed = true;
      if (ServerGate::Entry in(gate_); in && server_) {
        ServerRuntime rt(*server_);
        if (rt.ps_serving() && !rt.ps_serving()->aliases().empty())
          routes_confirmed = rt.refresh_ps_serving(cfg_.task_name + " is recovering").all_answered;
      }
      auto ready = model_ready(*session_);
      if (ready.ok() && *ready) {
        AF_LOG(INFO) << cfg_.task_name << ": model is available again; resuming";
        return Status::OK();
      }
      if (ready.ok() && cfg_.is_chief && routes_confirmed) {
        // A parameter server came back empty: restore it.
        Status s = prepare_chief(*session_);
        if (s.ok()) {
          static Counter& rollbacks = Metrics::global().counter(
              "actorflow_rollbacks_total", "Recoveries in which the chief restored a parameter server that came back empty.");
          static Counter& rolled = Metrics::global().counter(
              "actorflow_rolled_back_steps_total", "Global steps lost to those recoveries (last step minus the restored one).");
          rollbacks.inc();
          rolled.inc(std::max<int64_t>(0, last_step - owner_->restored_step_));
          AF_LOG(WARNING) << cfg_.task_name << ": parameter server restored from global step " << owner_->restored_step_
                          << "; " << std::max<int64_t>(0, last_step - owner_->restored_step_)
                          << " global steps rolled back";
          return Status::OK();
        }
      }
      const auto now = std::chrono::steady_clock::now();
      if (now - last_log >= std::chrono::seconds(5)) {
        AF_LOG(INFO) << cfg_.task_name << ": still waiting for the model to come back ("
                     << (ready.ok() ? std::string("a parameter server lost its variables") : ready.status().message())
                     << "); giving up in "
                     << std::chrono::duration_cast<std::chrono::seconds>(deadline - now).count() << " s";
        last_log = now;
      }
      if (now + backoff > deadline)
        return DeadlineExceeded(cfg_.task_name + ": the model did not come back within " +
                                std::to_string(cfg_.ready_timeout_secs) + " s after: " + failure.message());
      std::this_thread::sleep_for(backoff);  // polling a restarting task, bounded by the deadline
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
  }

  // --- the chief's task monitor -------------------------------------------------------------
  // A thread that keeps a Membership connection to every other task of the cluster: the
  // connection's watcher (actors/membership.cc) detects a closed connection at once and a silent
  // peer within peer_timeout_ms, and logs it; this loop notices the task left the membership,
  // records the outage and reconnects when the task is back (logging how long it was gone).
  void start_monitor() {
    ServerGate::Entry in(gate_);
    if (!in || !cfg_.monitor_tasks || !server_ || !ServerRuntime(*server_).membership() || monitor_.joinable()) return;
    const ClusterSpec& cluster = ServerRuntime(*server_).cluster();
    for (const TaskId& t : cluster.all_tasks()) {
      const std::string prefix = t.device_prefix();
      if (prefix == ServerRuntime(*server_).task_prefix()) continue;
      auto addr = cluster.task_address(t);
      if (!addr.ok()) continue;
      Health h;
      h.info.task = prefix;
      h.address = *addr;
      health_.push_back(h);
    }
    if (health_.empty()) return;
    AF_LOG(INFO) << cfg_.task_name << ": supervisor monitoring " << health_.size() << " tasks";
    monitor_ = std::thread([this] { monitor_loop(); });
  }

  // Holds the server's gate for one round at a time (never across the wait), so that ~Server
  // waits at most one round; ends when the gate is closed.
  void monitor_loop() {
    std::unique_lock<std::mutex> l(health_mu_);
    while (!monitor_stop_) {
      l.unlock();
      ServerGate::Entry in(gate_);
      if (!in) return;  // the server is stopping: its membership goes with it
      Membership* m = ServerRuntime(*server_).membership();
      std::set<std::string> up;
      for (const auto& p : m->peers()) up.insert(p.task);
      l.lock();
      const auto now = std::chrono::steady_clock::now();
      for (auto& h : health_) {
        if (monitor_stop_) break;
        if (up.count(h.info.task)) {
          h.info.up = true;
          continue;
        }
        if (h.info.up) {  // it left the membership (the watcher logged why)
          h.info.up = false;
          ++h.info.times_down;
          h.down_since = now;
        }
        const std::string task = h.info.task, address = h.address;
        l.unlock();
        auto r = m->ensure(task, address, std::chrono::milliseconds(1), /*quiet=*/true);
        l.lock();
        if (r.ok()) {
          h.info.up = true;
          if (h.info.times_down > 0) {
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - h.down_since).count();
            h.info.down_secs += secs;
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.2f", secs);
            AF_LOG(INFO) << cfg_.task_name << ": supervisor: task " << task << " is back after " << buf << " s";
          }
        }
      }
      // Pace reconnection attempts; stop() wakes us at once.
      monitor_cv_.wait_for(l, std::chrono::milliseconds(200), [this] { return monitor_stop_; });
    }
  }

  // The server's gate closed (it is stopping or being destroyed; the gate's hook, which must
  // not block): the periodic work ends, and training should stop.
  void server_closed() {
    {
      std::lock_guard<std::mutex> l(health_mu_);
      monitor_stop_ = true;
    }
    monitor_cv_.notify_all();
    {
      std::lock_guard<std::mutex> l(saver_mu_);
      saver_stop_ = true;
      server_gone_ = true;
    }
    saver_cv_.notify_all();
    owner_->request_stop(Cancelled(cfg_.task_name + ": the server this Supervisor's session runs on was stopped"));
  }

  void stop_monitor() {
    {
      std::lock_guard<std::mutex> l(health_mu_);
      monitor_stop_ = true;
    }
    monitor_cv_.notify_all();
    if (monitor_.joinable()) monitor_.join();
  }

  std::vector<TaskHealth> task_health() const {
    std::lock_guard<std::mutex> l(health_mu_);
    std::vector<TaskHealth> out;
    const auto now = std::chrono::steady_clock::now();
    for (const auto& h : health_) {
      TaskHealth t = h.info;
      if (!t.up && t.times_down > 0) t.down_secs += std::chrono::duration<double>(now - h.down_since).count();
      out.push_back(t);
    }
    return out;
  }

  Result<std::string> save_checkpoint() {
    if (!cfg_.is_chief) return FailedPrecondition("only the chief saves checkpoints");
    if (!ckpt_) return FailedPrecondition("no logdir: checkpoints are off");
    if (!session_) return FailedPrecondition("no managed session yet");
    WaitHandle wait("checkpoint", cfg_.task_name + ": saving a checkpoint in " + cfg_.logdir + " (reading the variables)", "");
    AF_ASSIGN_OR_RETURN(CheckpointData data, io_.read(*session_, cfg_.global_step));
    wait.update(cfg_.task_name + ": saving a checkpoint in " + cfg_.logdir + " at global step " +
                    std::to_string(data.global_step) + " (writing)",
                "");
    std::lock_guard<std::mutex> l(ckpt_mu_);
    auto path = ckpt_->save(data);
    if (path.ok()) {
      static Counter& saved = Metrics::global().counter("actorflow_checkpoints_saved_total", "Checkpoints the chief saved.");
      static Gauge& saved_step = Metrics::global().gauge("actorflow_checkpoint_last_step",
                                                         "The global step of the newest checkpoint this task saved.");
      saved.inc();
      saved_step.set(static_cast<double>(data.global_step));
      AF_LOG(INFO) << cfg_.task_name << ": saved checkpoint " << *path << " at global step " << data.global_step;
    }
    return path;
  }

  void summary(int64_t step, const std::map<std::string, double>& values) {
    // Each scalar is also a gauge of the registry, so /metrics (and `actorflow dashboard`) show
    // the latest value of every summary tag.
    for (const auto& [k, v] : values)
      Metrics::global().gauge("actorflow_summary", "The latest value of each summary scalar, by tag.", {{"tag", k}}).set(v);
    if (summary_path_.empty()) return;
    const double t = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::string line = "{\"step\": " + std::to_string(step) + ", \"time\": " + std::to_string(t);
    for (const auto& [k, v] : values) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.6g", v);
      line += ", \"" + k + "\": " + buf;
    }
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> l(summary_mu_);
      std::map<std::string, double> scalars = values;
      const double dt = std::chrono::duration<double>(now - last_summary_time_).count();
      if (last_summary_step_ >= 0 && dt > 0 && step > last_summary_step_) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.3f", (step - last_summary_step_) / dt);
        line += std::string(", \"steps_per_sec\": ") + buf;
        scalars["global_step/sec"] = (step - last_summary_step_) / dt;
      }
      last_summary_step_ = step;
      last_summary_time_ = now;
      std::ofstream f(summary_path_, std::ios::app);
      f << line << "}\n";
      // The same scalars as a TensorBoard event file in the logdir (data/event_file.h).
      if (open_events()) {
        Status s = events_->add_scalars(step, scalars);
        if (!s.ok()) {
          AF_LOG(WARNING) << "Supervisor: " << s;
        }
      }
    }
  }

  // Histograms for TensorBoard (no JSON line: the summary file holds scalars).
  void summary_histograms(int64_t step, const std::map<std::string, std::vector<double>>& values) {
    if (summary_path_.empty() || values.empty()) return;
    std::lock_guard<std::mutex> l(summary_mu_);
    if (!open_events()) return;
    Status s = events_->add_histograms(step, values);
    if (!s.ok()) {
      AF_LOG(WARNING) << "Supervisor: " << s;
    }
  }

  // This task's event file, opened on first use with the graph as its first event (TensorBoard's
  // Graphs tab; tf.train.Supervisor writes the graph the same way); null when it cannot be opened
  // (logged once). Caller holds summary_mu_.
  EventFileWriter* open_events() {
    if (!events_ && !events_failed_) {
      auto w = EventFileWriter::open(cfg_.logdir, "." + sanitize(cfg_.task_name));
      if (w.ok()) {
        events_ = std::move(*w);
        auto gd = tf_graph_def_proto(*scope_.graph());
        Status g = gd.ok() ? events_->add_graph(*gd) : gd.status();
        if (!g.ok()) {
          AF_LOG(WARNING) << "Supervisor: " << g;
        }
      } else {
        events_failed_ = true;
        AF_LOG(WARNING) << "Supervisor: no TensorBoard event file: " << w.status();
      }
    }
    return events_.get();
  }

  // The chief's periodic saves: a thread of the Supervisor's own (not an actor of the server's
  // system, which ~Server would wait for while it waits for the next tick: a Server destroyed
  // before its Supervisor hung there). stop_saver() and the server's closing wake it.
  void start_saver() {
    if (!server_ || cfg_.save_checkpoint_secs <= 0 || !ckpt_ || saver_.joinable()) return;
    const auto period = std::chrono::milliseconds(static_cast<int64_t>(cfg_.save_checkpoint_secs * 1000));
    saver_ = std::thread([this, period] {
      std::unique_lock<std::mutex> l(saver_mu_);
      while (!saver_cv_.wait_for(l, period, [this] { return saver_stop_; })) {
        l.unlock();
        auto p = save_checkpoint();
        l.lock();
        if (!p.ok() && !saver_stop_) {
          AF_LOG(WARNING) << cfg_.task_name << ": periodic checkpoint failed: " << p.status();
        }
      }
      if (server_gone_) {
        AF_LOG(WARNING) << cfg_.task_name << ": the server stopped; no more periodic checkpoints";
      }
    });
  }

  void stop_saver() {
    {
      std::lock_guard<std::mutex> l(saver_mu_);
      saver_stop_ = true;
    }
    saver_cv_.notify_all();
    if (saver_.joinable()) saver_.join();
  }

  Supervisor* owner_;
  Scope scope_;
  SupervisorConfig cfg_;
  Status status_;
  VariableCheckpointOps io_;          // save (read) and restore (assign) ops of every variable
  std::vector<Output> initialized_;   // IsVariableInitialized of each of io_'s variables
  std::unique_ptr<CheckpointManager> ckpt_;
  std::mutex ckpt_mu_;
  std::string summary_path_;
  std::unique_ptr<EventFileWriter> events_;  // TensorBoard events, opened at the first summary
  bool events_failed_ = false;
  std::mutex summary_mu_;
  int64_t last_summary_step_ = -1;
  std::chrono::steady_clock::time_point last_summary_time_;
  Session* session_ = nullptr;
  std::shared_ptr<ServerGate> gate_;  // the session's server's; null when it is not in-process
  Server* server_ = nullptr;          // valid only inside gate_ (ServerGate::Entry)
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // the gate hook's owner: this Impl
  std::mutex saver_mu_;
  std::condition_variable saver_cv_;
  bool saver_stop_ = false;
  bool server_gone_ = false;
  std::thread saver_;
  struct Health {
    TaskHealth info;
    std::string address;
    std::chrono::steady_clock::time_point down_since;
  };
  mutable std::mutex health_mu_;
  std::condition_variable monitor_cv_;
  std::vector<Health> health_;
  bool monitor_stop_ = false;
  std::thread monitor_;
  Status stop_reason_;
  std::mutex stop_mu_;
  bool stopped_ = false;
};

Supervisor::Supervisor(const Scope& scope, SupervisorConfig cfg) : impl_(std::make_unique<Impl>(this, scope, std::move(cfg))) {}

Supervisor::~Supervisor() { stop(); }

Result<std::unique_ptr<Session>> Supervisor::managed_session(const std::string& target, SessionOptions opts) {
  return impl_->managed_session(target, std::move(opts));
}

void Supervisor::request_stop(const Status& why) {
  {
    std::lock_guard<std::mutex> l(impl_->stop_mu_);
    if (!why.ok() && impl_->stop_reason_.ok()) {
      impl_->stop_reason_ = why;
      AF_LOG(ERROR) << impl_->cfg_.task_name << ": stopping: " << why;
    }
  }
  stop_ = true;
}

void Supervisor::summary(int64_t step, const std::map<std::string, double>& values) { impl_->summary(step, values); }

void Supervisor::summary_histograms(int64_t step, const std::map<std::string, std::vector<double>>& values) {
  impl_->summary_histograms(step, values);
}

Result<std::string> Supervisor::save_checkpoint() { return impl_->save_checkpoint(); }

std::vector<TaskHealth> Supervisor::task_health() const { return impl_->task_health(); }

Status Supervisor::recover(const Status& failure, int64_t last_global_step) {
  return impl_->recover(failure, last_global_step);
}

Status Supervisor::stop() {
  {
    std::lock_guard<std::mutex> l(impl_->stop_mu_);
    if (impl_->stopped_) return impl_->stop_reason_;
    impl_->stopped_ = true;
  }
  stop_ = true;
  impl_->disarm_gate_hook();
  impl_->stop_saver();
  impl_->stop_monitor();
  if (impl_->cfg_.is_chief && impl_->ckpt_ && impl_->session_) {
    auto p = impl_->save_checkpoint();
    if (!p.ok()) {
      AF_LOG(WARNING) << impl_->cfg_.task_name << ": final checkpoint failed: " << p.status();
    }
  }
  return impl_->stop_reason_;
}

}  // namespace actorflow
