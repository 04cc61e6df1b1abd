#include "actors/server_runtime.h"
#include "actors/session.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <cstdlib>
#include <mutex>

#include "core/metrics.h"
#include "core/step_stats.h"
#include "core/step_trace.h"
#include "core/waits.h"
#include "actors/direct_step.h"
#include "actors/master_actor.h"
#include "actors/remote_client.h"
#include "actors/router.h"
#include "actors/ps_replication.h"
#include "actors/server.h"
#include "actors/server_gate.h"
#include "config/task_names.h"
#include "config/tf_cluster.h"
#include "config/cluster_spec.h"  // the cluster file's options

namespace actorflow {

// The session's state (include/actorflow/session.h keeps it out of the public header).
struct Session::Impl {
  Impl(const Scope& scope, SessionOptions opts) : scope_(scope), opts_(std::move(opts)) {}
  Scope scope_;
  SessionOptions opts_;
  Status status_;
  std::unique_ptr<Server> own_server_;
  Server* server_ = nullptr;
  // The server's gate (actors/server_gate.h): every call that touches server_ holds an entry,
  // so a server destroyed while the session lives fails the call instead of being used freed.
  std::shared_ptr<ServerGate> gate_;
  std::string target_;

  Status server_gone() const {
    return Cancelled("the server " + target_ + " this session runs on was stopped or destroyed");
  }
  uint64_t graph_id_ = 0;
  std::mutex mu_;
  std::shared_ptr<const Graph> snapshot_;
  int snapshot_nodes_ = -1;
  bool closed_ = false;
  // The cluster devices of snapshot_ while the membership epoch stays `epoch` (no task came or
  // went, so every task the graph names is still up and routed). Its device actor handles keep
  // the server's detached device actors alive: the server's gate empties it when it closes.
  struct DeviceCache {
    std::mutex mu;
    std::shared_ptr<const Graph> graph;
    uint64_t epoch = 0;
    uint64_t serving = 0;  // and the ps failover generation stays this (ps_replicas = 2)
    std::vector<DeviceInfo> devices;
  };
  std::shared_ptr<DeviceCache> cache_ = std::make_shared<DeviceCache>();

  // Takes the server's gate and lets go of the cached devices when it closes.
  void use_gate(std::shared_ptr<ServerGate> gate) {
    gate_ = std::move(gate);
    if (!gate_) return;
    std::weak_ptr<DeviceCache> weak = cache_;
    gate_->on_close(weak, [weak] {
      if (auto c = weak.lock()) {
        std::lock_guard<std::mutex> l(c->mu);
        c->graph.reset();
        c->devices.clear();
      }
    });
  }
  std::unique_ptr<RemoteClient> remote_;      // remote sessions only (actors/remote_client.h)
  std::shared_ptr<const Graph> sent_graph_;   // the snapshot the remote task holds; guarded by mu_

  // The deadline of each step: the session's own, else its server's [server] step_timeout_secs
  // (10 min by default), so that no step waits without a bound. A remote session's task applies
  // its own default when this one sets none.
  std::chrono::milliseconds step_timeout() const {
    if (opts_.timeout().count() > 0 || !server_) return opts_.timeout();
    return std::chrono::milliseconds(
        static_cast<int64_t>(std::ceil(ServerRuntime(*server_).server_options().step_timeout_secs * 1000.0)));
  }

  std::shared_ptr<const Graph> snapshot() {
    std::lock_guard<std::mutex> l(mu_);
    const Graph* g = scope_.graph();
    if (!snapshot_ || snapshot_nodes_ != g->num_nodes()) {
      snapshot_ = std::make_shared<const Graph>(*g);
      snapshot_nodes_ = g->num_nodes();
    }
    return snapshot_;
  }

  // A session on a task of another process: the cluster file authenticates this client.
  Status open_remote(const std::string& target) {
    std::string file = opts_.cluster_file();
    if (file.empty()) {
      const char* env = std::getenv("ACTORFLOW_CLUSTER");
      if (env) file = env;
    }
    if (file.empty())
      return FailedPrecondition("remote session to " + target +
                                ": no server with that target in this process, and no cluster file to "
                                "authenticate with (SessionOptions::cluster_file or ACTORFLOW_CLUSTER)");
    auto cluster = cluster_from_any_file(file);
    if (!cluster.ok()) return cluster.status().with_prefix("remote session to " + target);
    auto client = RemoteClient::create(target, cluster->cluster);
    if (!client.ok()) return client.status();
    remote_ = std::move(*client);
    return Status::OK();
  }

  // `traced` (may be null): the task traces the step and its reply carries the StepStats as one
  // more uint8 tensor (actors/client_sessions.h), which goes to `metadata` on this clock.
  Result<std::vector<Tensor>> run_remote(const std::vector<std::pair<std::string, Tensor>>& feeds,
                                         const std::vector<std::string>& fetches,
                                         const std::vector<std::string>& targets, const RunOptions* traced = nullptr,
                                         RunMetadata* metadata = nullptr) {
    if (!status_.ok()) return status_;
    if (!scope_.ok()) return scope_.status();
    {
      std::lock_guard<std::mutex> l(mu_);
      if (closed_) return Cancelled("session is closed");
    }
    std::shared_ptr<const Graph> g = snapshot();
    bool send_graph;
    {
      std::lock_guard<std::mutex> l(mu_);
      send_graph = sent_graph_ != g;
    }
    ClientRunRequest req;
    req.session = graph_id_;
    req.graph_version = static_cast<uint64_t>(g->num_nodes());
    for (const auto& [name, t] : feeds) {
      req.feed_names.push_back(name);
      req.feeds.push_back(t);
    }
    req.fetches = fetches;
    req.targets = targets;
    req.placement = opts_.placement();
    req.timeout_ms = opts_.timeout().count();
    const size_t max_events = traced ? std::clamp<size_t>(traced->trace_max_events, 1, StepTraces::kMaxEventsLimit) : 0;
    req.trace_max_events = static_cast<uint32_t>(max_events);
    bool sent = false;
    const int64_t sent_ns = trace_clock_ns();
    auto out = remote_->run(std::move(req), *g, send_graph, &sent);
    const int64_t received_ns = trace_clock_ns();
    if (traced && out.ok()) {
      // The last tensor is the task's trace (client_sessions.h), bounded like a collected one.
      if (out->size() != fetches.size() + 1 || out->back().dtype() != DType::kUInt8 || out->back().shape().rank() != 1)
        return DataLoss("traced run on " + target_ + ": the reply carries no trace");
      const Tensor t = out->back();
      out->pop_back();
      auto stats = decode_step_stats(
          std::string(reinterpret_cast<const char*>(t.data<uint8_t>()), static_cast<size_t>(t.num_elements())),
          max_events * 64 + 4096);
      if (!stats.ok()) return stats.status().with_prefix("traced run on " + target_);
      if (metadata) metadata->step_stats = align_remote_step_stats(std::move(*stats), sent_ns, received_ns, target_);
    }
    if (sent) {
      std::lock_guard<std::mutex> l(mu_);
      sent_graph_ = g;
    }
    return out;
  }
};

Session::Session(const Scope& scope, const std::string& target, SessionOptions opts)
    : impl_(std::make_unique<Impl>(scope, std::move(opts))) {
  static std::atomic<uint64_t> ids{0};
  impl_->graph_id_ = ++ids;
  impl_->target_ = target.empty() ? std::string("of this session") : target;
  if (target.empty()) {
    auto s = Server::local();
    if (!s.ok()) {
      impl_->status_ = s.status();
      return;
    }
    impl_->own_server_ = std::move(*s);
    impl_->server_ = impl_->own_server_.get();
    impl_->use_gate(ServerRuntime(*impl_->server_).gate());
  } else {
    // The gate is taken while the registry holds the server (ServerRuntime::find's pointer is valid
    // until the server is destroyed, which needs its gate first).
    impl_->use_gate(ServerRuntime::gate_of(target));
    impl_->server_ = impl_->gate_ ? ServerRuntime::find(target) : nullptr;
    if (!impl_->server_ && target.rfind("actorflow://", 0) == 0) {
      impl_->status_ = impl_->open_remote(target);
    } else if (!impl_->server_) {
      // TensorFlow's targets ("grpc://host:port") and bare addresses are what a ported program
      // passes first: say what actorflow takes instead.
      std::string hint;
      if (target.rfind("grpc://", 0) == 0)
        hint = "; actorflow's targets are 'actorflow://host:port' (TensorFlow's grpc:// protocol is not spoken): "
               "the address of a task of the cluster file, as Server::target() gives it, with "
               "SessionOptions().cluster_file(FILE) to reach the cluster's other tasks";
      else
        hint = "; a target is a Server's target() in this process, or 'actorflow://host:port' of a task of the "
               "cluster file (SessionOptions().cluster_file(FILE))";
      impl_->status_ = NotFound("no server with target '" + target + "' in this process" + hint);
    }
  }
}

Session::~Session() { close(); }

Status Session::status() const { return impl_->status_; }

Status Session::close() {
  bool was_open;
  {
    std::lock_guard<std::mutex> l(impl_->mu_);
    was_open = !impl_->closed_;
    impl_->closed_ = true;
  }
  if (was_open && impl_->remote_) impl_->remote_->close(impl_->graph_id_);
  return Status::OK();
}

std::shared_ptr<const Graph> Session::snapshot() { return impl_->snapshot(); }

Result<std::vector<Tensor>> Session::run(const std::vector<Output>& fetches) { return run({}, fetches, {}); }

Result<std::vector<Tensor>> Session::run(const FeedDict& feeds, const std::vector<Output>& fetches,
                                         const std::vector<Output>& targets) {
  return run(RunOptions{}, feeds, fetches, targets, nullptr);
}

Status RunMetadata::write_chrome_trace(const std::string& path) const {
  if (step_stats.empty())
    return FailedPrecondition("no trace to write to " + path +
                              ": the run was not traced (RunOptions::trace_level = kFullTrace)");
  return actorflow::write_chrome_trace(step_stats, path);
}

Result<std::vector<Tensor>> Session::run(const RunOptions& options, const FeedDict& feeds,
                                         const std::vector<Output>& fetches, const std::vector<Output>& targets,
                                         RunMetadata* metadata) {
  if (metadata) *metadata = RunMetadata{};
  if (!impl_->scope_.ok()) return impl_->scope_.status();
  std::vector<std::pair<std::string, Tensor>> f;
  for (const auto& [o, t] : feeds) {
    if (!o.valid()) return InvalidArgument("feed of an invalid Output (an earlier op failed to build)");
    f.emplace_back(o.name(), t);
  }
  std::vector<std::string> fe, ta;
  for (const auto& o : fetches) {
    if (!o.valid()) return InvalidArgument("fetch of an invalid Output (an earlier op failed to build)");
    fe.push_back(o.name());
  }
  for (const auto& o : targets) {
    if (!o.valid()) return InvalidArgument("target is an invalid Output (an earlier op failed to build)");
    ta.push_back(o.node()->name);
  }
  // What the task measures of its steps (core/metrics.h): runs, failures, latency.
  static Counter& ok_runs = Metrics::global().counter("actorflow_session_runs_total",
                                                      "Session::run calls of this process, by outcome.", {{"result", "ok"}});
  static Counter& failed_runs = Metrics::global().counter(
      "actorflow_session_runs_total", "Session::run calls of this process, by outcome.", {{"result", "error"}});
  static Histogram& latency = Metrics::global().histogram(
      "actorflow_session_run_seconds", "Wall time of this process's Session::run calls, in seconds.");
  const auto t0 = std::chrono::steady_clock::now();
  ServerGate::Entry in(impl_->gate_);
  if (impl_->gate_ && !in) return impl_->server_gone();
  auto r = run_named(&options, metadata, f, fe, ta);
  if (!r.ok() && impl_->server_) ServerRuntime(*impl_->server_).note_step_failure(r.status());
  latency.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  (r.ok() ? ok_runs : failed_runs).inc();
  return r;
}

caf::actor Session::master() const {
  ServerGate::Entry in(impl_->gate_);
  return impl_->server_ && in ? impl_->server_->master() : caf::actor();
}

Result<std::shared_ptr<const RunRequest>> Session::prepare(const std::vector<std::pair<std::string, Tensor>>& feeds,
                                                           const std::vector<std::string>& fetches,
                                                           const std::vector<std::string>& targets) {
  if (impl_->remote_)
    return FailedPrecondition("prepare: a remote session's steps run on its task, not through a local master");
  if (!impl_->status_.ok()) return impl_->status_;
  ServerGate::Entry in(impl_->gate_);
  if (!in) return impl_->server_gone();
  if (!impl_->scope_.ok()) return impl_->scope_.status();
  {
    std::lock_guard<std::mutex> l(impl_->mu_);
    if (impl_->closed_) return Cancelled("session is closed");
  }
  auto req = std::make_shared<RunRequest>();
  req->graph = snapshot();
  req->graph_id = impl_->graph_id_;
  // Every name must exist now, not when the step is first planned (TensorFlow's Session::Run
  // fails on an unknown name before it runs anything too).
  for (const auto& [name, t] : feeds) {
    auto e = req->graph->parse_endpoint(name);
    if (!e.ok()) return e.status().with_prefix("feed '" + name + "'");
  }
  for (const auto& name : fetches) {
    auto e = req->graph->parse_endpoint(name);
    if (!e.ok()) return e.status().with_prefix("fetch '" + name + "'");
  }
  for (const auto& name : targets)
    if (!req->graph->find(name)) return NotFound("target '" + name + "': no node named '" + name + "' in the graph");
  for (const auto& [name, t] : feeds) {
    req->sig.feeds.push_back(name);
    req->feeds.push_back(t);
  }
  req->sig.fetches = fetches;
  req->sig.targets = targets;
  // The server's [server] policy from the cluster file applies to every session on it.
  req->placement = impl_->opts_.placement();
  req->placement.log_device_placement |= ServerRuntime(*impl_->server_).server_options().log_device_placement;
  req->placement.allow_soft_placement &= ServerRuntime(*impl_->server_).server_options().allow_soft_placement;
  req->placement.mixed_bfloat16 |= ServerRuntime(*impl_->server_).server_options().mixed_bfloat16;
  req->timeout = impl_->step_timeout();
  // A failed-over parameter server's ops go to its backup (ps_replicas = 2).
  uint64_t serving_generation = 0;
  if (auto serving = ServerRuntime(*impl_->server_).ps_serving()) {
    serving_generation = serving->generation();
    req->placement.task_aliases = serving->aliases();
  }
  if (Membership* membership = ServerRuntime(*impl_->server_).membership()) {
    // Connecting and routing happen once per graph version, membership change and failover.
    const uint64_t epoch = membership->epoch();
    Impl::DeviceCache& cache = *impl_->cache_;
    {
      std::lock_guard<std::mutex> l(cache.mu);
      if (cache.graph == req->graph && cache.epoch == epoch && cache.serving == serving_generation) {
        req->devices = cache.devices;
        req->membership_epoch = epoch;
      }
    }
    if (req->devices.empty()) {
      // Reaching the tasks: the session's own deadline, else the server's connect_timeout_ms.
      const auto connect_timeout = impl_->opts_.timeout();
      const uint64_t before = membership->epoch();
      auto devs = ServerRuntime(*impl_->server_).cluster_devices_for(*req->graph, connect_timeout, req->placement.task_aliases);
      if (!devs.ok()) return devs.status();
      req->devices = std::move(*devs);
      req->membership_epoch = membership->epoch();
      if (req->membership_epoch == before) {
        std::lock_guard<std::mutex> l(cache.mu);
        // Not once the server stops: its gate's close hook has emptied the cache already.
        if (impl_->gate_->is_open()) {
          cache.graph = req->graph;
          cache.epoch = req->membership_epoch;
          cache.serving = serving_generation;
          cache.devices = req->devices;
        }
      }
    }
  }
  return std::shared_ptr<const RunRequest>(req);
}

Result<std::vector<Tensor>> Session::run_by_name(const std::vector<std::pair<std::string, Tensor>>& feeds,
                                                 const std::vector<std::string>& fetches,
                                                 const std::vector<std::string>& targets) {
  return run_named(nullptr, nullptr, feeds, fetches, targets);
}

Result<std::vector<Tensor>> Session::run_by_name(const RunOptions& options,
                                                 const std::vector<std::pair<std::string, Tensor>>& feeds,
                                                 const std::vector<std::string>& fetches,
                                                 const std::vector<std::string>& targets, RunMetadata* metadata) {
  if (metadata) *metadata = RunMetadata{};
  return run_named(&options, metadata, feeds, fetches, targets);
}

Result<std::vector<Tensor>> Session::run_named(const RunOptions* options, RunMetadata* metadata,
                                               const std::vector<std::pair<std::string, Tensor>>& feeds,
                                               const std::vector<std::string>& fetches,
                                               const std::vector<std::string>& targets) {
  const bool traced = options && options->trace_level == RunOptions::TraceLevel::kFullTrace;
  // A tensor asked for twice ("x" and "x:0" are one) is fetched once and returned at each place:
  // steps with duplicate fetches of a tensor from another task could stall (seen under ASan).
  // The check allocates nothing (fetch lists are short); only a list with a duplicate is rebuilt.
  auto same = [](const std::string& a, const std::string& b) {
    if (a == b) return true;
    const std::string& s = a.size() < b.size() ? a : b;
    const std::string& l = a.size() < b.size() ? b : a;
    return l.size() == s.size() + 2 && l.compare(0, s.size(), s) == 0 && l.compare(s.size(), 2, ":0") == 0;
  };
  bool duplicate = false;
  for (size_t i = 1; i < fetches.size() && !duplicate; ++i)
    for (size_t j = 0; j < i && !duplicate; ++j) duplicate = same(fetches[i], fetches[j]);
  if (duplicate) {
    std::vector<std::string> unique;
    std::vector<size_t> slot(fetches.size());
    for (size_t i = 0; i < fetches.size(); ++i) {
      size_t k = 0;
      while (k < unique.size() && !same(unique[k], fetches[i])) ++k;
      if (k == unique.size()) unique.push_back(fetches[i]);
      slot[i] = k;
    }
    AF_ASSIGN_OR_RETURN(std::vector<Tensor> once, run_named(options, metadata, feeds, unique, targets));
    std::vector<Tensor> out(fetches.size());
    for (size_t i = 0; i < fetches.size(); ++i) out[i] = once[slot[i]];
    return out;
  }
  if (impl_->remote_) return impl_->run_remote(feeds, fetches, targets, traced ? options : nullptr, metadata);
  if (!impl_->status_.ok()) return impl_->status_;
  if (traced) return run_traced(*options, metadata, feeds, fetches, targets);
  ServerGate::Entry in(impl_->gate_);
  if (!in) return impl_->server_gone();
  // The run waits for its step (core/waits.h); what it waits on inside is the master's or the
  // direct step's business.
  const WaitHandle wait("step", "Session::run (" + std::to_string(fetches.size()) + " fetches, " +
                                    std::to_string(targets.size()) + " targets" +
                                    (fetches.empty() ? std::string() : ", first fetch " + fetches.front()) + ")",
                        "");
  AF_ASSIGN_OR_RETURN(auto req, prepare(feeds, fetches, targets));
  // The steady state of a signature whose work runs on other processes: straight over the
  // data plane from this thread (actors/direct_step.h); otherwise, or when that is not
  // possible right now, through the master.
  std::shared_ptr<DirectSteps> direct = ServerRuntime(*impl_->server_).membership() ? ServerRuntime(*impl_->server_).direct_steps() : nullptr;
  if (direct && direct->has_plans()) {
    auto plan = direct->find(plan_key(*req));
    std::shared_ptr<ProcessRouter> router = plan ? ServerRuntime(*impl_->server_).router() : nullptr;
    if (plan && router) {
      auto r = direct->run(*router, *plan, req->feeds, req->timeout);
      if (r) return std::move(*r);
    }
  }
  ScopedActor self{impl_->server_->system()};
  Result<std::vector<Tensor>> out = Internal("no reply from the master");
  // The master ends the step at its deadline; this bound is only for a master that cannot answer.
  const caf::duration timeout{req->timeout + std::chrono::seconds(5)};
  self->request(impl_->server_->master(), timeout, run_atom::value, RunRequestPtr(req))
      .receive([&](std::vector<Tensor>& v) { out = std::move(v); },
               [&](caf::error& err) { out = from_caf_error(err, "master"); });
  return out;
}

// ---- traced steps (core/step_trace.h, docs/architecture/tracing.md) ------------------------

namespace {

// How long one trace exchange with a task (arm or collect) may take.
constexpr std::chrono::seconds kTraceExchangeTimeout{10};

// A task of a traced step that lives in another server: reached through its node actor.
struct TracedTask {
  node_actor_t node;
  std::vector<ClockSample> samples;
  bool same_process = false;
  bool armed = false;
  std::string error;
};

}  // namespace

Result<std::vector<Tensor>> Session::run_traced(const RunOptions& options, RunMetadata* metadata,
                                                const std::vector<std::pair<std::string, Tensor>>& feeds,
                                                const std::vector<std::string>& fetches,
                                                const std::vector<std::string>& targets) {
  ServerGate::Entry in(impl_->gate_);
  if (!in) return impl_->server_gone();
  AF_ASSIGN_OR_RETURN(auto prepared, prepare(feeds, fetches, targets));
  auto req = std::make_shared<RunRequest>(*prepared);
  req->step_id = next_step_id();
  const int64_t step_id = req->step_id;
  const uint32_t max_events = static_cast<uint32_t>(
      std::clamp<size_t>(options.trace_max_events, 1, StepTraces::kMaxEventsLimit));
  const std::string own_task = ServerRuntime(*impl_->server_).task_prefix();
  // Every task of the session's devices: this process's are armed here, the others through
  // their node actors (which also give a clock sample each way).
  std::map<std::string, TracedTask> tasks;
  for (const auto& d : req->devices) {
    const std::string t = task_of_device(d.name);
    if (t != own_task && !d.actor && d.node) tasks[t].node = d.node;
  }
  ScopedActor self{impl_->server_->system()};
  auto exchange = [&](const std::string& task, TracedTask& t, uint32_t max) {
    std::string events;
    ClockSample cs;
    cs.sent_ns = trace_clock_ns();
    self->request(t.node, caf::duration{kTraceExchangeTimeout}, trace_atom::value, step_id, max)
        .receive(
            [&](int64_t now, uint64_t token, std::string& ev) {
              cs.received_ns = trace_clock_ns();
              cs.remote_ns = now;
              t.samples.push_back(cs);
              t.same_process = token == trace_process_token();
              events = std::move(ev);
            },
            [&](caf::error& e) {
              t.error = (max ? "arming: " : "collecting: ") + from_caf_error(e, task).to_string();
            });
    return events;
  };
  for (auto& [task, t] : tasks) {
    exchange(task, t, max_events);
    t.armed = t.error.empty();
  }
  StepTraces::global().arm(step_id, max_events);
  // The step, through the master (a direct step has no master to carry the step id).
  const int64_t start_ns = trace_clock_ns();
  Result<std::vector<Tensor>> out = Internal("no reply from the master");
  {
    const caf::duration timeout{req->timeout + std::chrono::seconds(5)};
    self->request(impl_->server_->master(), timeout, run_atom::value, RunRequestPtr(req))
        .receive([&](std::vector<Tensor>& v) { out = std::move(v); },
                 [&](caf::error& err) { out = from_caf_error(err, "master"); });
  }
  const int64_t end_ns = trace_clock_ns();
  // Collect (which also disarms, whatever the outcome).
  std::vector<TaskTracePart> parts;
  TaskTracePart own;
  own.task = own_task;
  own.clock.method = "same process";
  if (auto taken = StepTraces::global().take(step_id); taken.ok()) {
    own.events = std::move(taken->first);
    own.dropped = taken->second;
  } else {
    own.error = taken.status().to_string();
  }
  parts.push_back(std::move(own));
  for (auto& [task, t] : tasks) {
    TaskTracePart part;
    part.task = task;
    if (t.armed && !t.same_process) {
      std::string bytes = exchange(task, t, 0);
      if (t.error.empty()) {
        auto decoded = decode_trace_events(bytes, StepTraces::kMaxEventsLimit);
        if (decoded.ok()) {
          part.events = std::move(decoded->first);
          part.dropped = decoded->second;
        } else {
          t.error = "collecting: " + decoded.status().to_string();
        }
      }
    }
    auto clock = align_clock(t.samples, t.same_process);
    if (clock.ok()) part.clock = *clock;
    else if (t.error.empty()) t.error = clock.status().to_string();
    part.error = t.error;
    parts.push_back(std::move(part));
  }
  if (!out.ok()) return out;
  if (metadata) metadata->step_stats = merge_step_trace(step_id, start_ns, end_ns, own_task, std::move(parts));
  return out;
}

}  // namespace actorflow
