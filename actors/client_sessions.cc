// The task's side of remote client sessions (actors/client_sessions.h).
#include "actors/client_sessions.h"

#include <cstring>
#include <optional>
#include <tuple>

#include "actors/session.h"
#include "core/step_stats.h"
#include "graph/graph_def.h"
#include "graph/op_kinds.h"
#include "graph/op_registry.h"
#include "graph/scope.h"

namespace actorflow {

void register_client_session_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<ClientRunRequest>("actorflow::ClientRunRequest");
}

struct ClientSessions::Entry {
  std::mutex mu;                       // one graph or options change at a time
  uint64_t version = 0;
  std::unique_ptr<Scope> scope;        // holds the client's graph
  std::shared_ptr<Session> session;    // over scope, with `opts`
  std::tuple<bool, bool, std::string, bool, bool, int64_t> opts;
  std::chrono::steady_clock::time_point last_used;
  int running = 0;                     // guarded by ClientSessions::mu_
};

ClientSessions::ClientSessions(std::string target, Limits limits) : target_(std::move(target)), limits_(limits) {}

ClientSessions::~ClientSessions() = default;

size_t ClientSessions::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return sessions_.size();
}

void ClientSessions::close(const std::string& peer, uint64_t session) {
  std::lock_guard<std::mutex> l(mu_);
  sessions_.erase({peer, session});
}

Result<std::vector<Tensor>> ClientSessions::run(const std::string& peer, const ClientRunRequest& req,
                                                bool may_touch_files) {
  if (req.feed_names.size() != req.feeds.size())
    return InvalidArgument("client run: " + std::to_string(req.feed_names.size()) + " feed names but " +
                           std::to_string(req.feeds.size()) + " feed tensors");
  // A graph that does not parse is refused before any session state exists for it.
  std::optional<Graph> graph;
  if (!req.graph_def.empty()) {
    auto g = deserialize_graph(req.graph_def);
    if (!g.ok()) return g.status().with_prefix("client graph of session " + std::to_string(req.session));
    // Roles (docs/security.md): a remote client's graph may not touch the task's files. Checked
    // on every graph that arrives, so a session's later versions are checked too.
    if (!may_touch_files) {
      for (int i = 0; i < g->num_nodes(); ++i) {
        const Node* n = g->node(i);
        auto def = OpRegistry::global().lookup(n->op);
        if (def.ok() && (*def)->touches_files)
          return PermissionDenied("client graph of session " + std::to_string(req.session) + ": node '" + n->name +
                                  "' (op " + n->op + ") touches the task's files, which a remote client may not do");
      }
    }
    // The runtime's own ops are the master's to insert, never a client's.
    for (int id = 0; id < g->num_nodes(); ++id) {
      const Node* n = g->node(id);
      if (is_runtime_op(n->op))
        return InvalidArgument("client graph of session " + std::to_string(req.session) + ": " + n->op + " '" +
                               n->name + "': the runtime's own op cannot be in a client's graph");
    }
    // The shapes and dtypes a client declares are not trusted: every node's shape function runs
    // again here (and validates its attributes and constant inputs), and its results replace them.
    Status inferred = infer_graph_shapes(*g);
    if (!inferred.ok()) return inferred.with_prefix("client graph of session " + std::to_string(req.session));
    graph = std::move(*g);
  }
  const auto now = std::chrono::steady_clock::now();
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (now - last_sweep_ >= std::chrono::minutes(1)) {
      last_sweep_ = now;
      for (auto it = sessions_.begin(); it != sessions_.end();) {
        if (it->second->running == 0 && now - it->second->last_used > limits_.idle_expiry) it = sessions_.erase(it);
        else ++it;
      }
    }
    if (running_ >= limits_.max_running)
      return ResourceExhausted("client run refused: " + std::to_string(limits_.max_running) +
                               " client runs are already in flight on this task");
    const auto key = std::make_pair(peer, req.session);
    auto it = sessions_.find(key);
    if (it == sessions_.end()) {
      if (req.graph_def.empty())
        return FailedPrecondition(std::string(kClientGraphUnknown) + "session " + std::to_string(req.session) +
                                  " is not open on this task");
      if (sessions_.size() >= limits_.max_sessions) {
        auto lru = sessions_.end();
        for (auto j = sessions_.begin(); j != sessions_.end(); ++j)
          if (j->second->running == 0 && (lru == sessions_.end() || j->second->last_used < lru->second->last_used))
            lru = j;
        if (lru == sessions_.end())
          return ResourceExhausted("client session refused: " + std::to_string(limits_.max_sessions) +
                                   " client sessions are open on this task, all running");
        sessions_.erase(lru);
      }
      it = sessions_.emplace(key, std::make_shared<Entry>()).first;
    }
    e = it->second;
    ++e->running;
    e->last_used = now;
    ++running_;
  }
  struct Done {
    ClientSessions* self;
    Entry* e;
    ~Done() {
      std::lock_guard<std::mutex> l(self->mu_);
      --e->running;
      e->last_used = std::chrono::steady_clock::now();
      --self->running_;
    }
  } done{this, e.get()};
  std::shared_ptr<Session> session;
  {
    std::lock_guard<std::mutex> l(e->mu);
    if (!e->scope || e->version != req.graph_version) {
      if (!graph)
        return FailedPrecondition(std::string(kClientGraphUnknown) + "session " + std::to_string(req.session) +
                                  " holds another graph version here");
      auto scope = std::make_unique<Scope>(Scope::root());
      *scope->graph() = std::move(*graph);
      e->scope = std::move(scope);
      e->version = req.graph_version;
      e->session.reset();
    }
    auto opts = std::make_tuple(req.placement.log_device_placement, req.placement.allow_soft_placement,
                                req.placement.default_device, req.placement.mixed_bfloat16, req.placement.fuse_kernels,
                                req.timeout_ms);
    if (!e->session || e->opts != opts) {
      SessionOptions so;
      so.log_device_placement(req.placement.log_device_placement)
          .allow_soft_placement(req.placement.allow_soft_placement)
          .default_device(req.placement.default_device)
          .mixed_bfloat16(req.placement.mixed_bfloat16)
          .fuse_kernels(req.placement.fuse_kernels)
          .timeout(std::chrono::milliseconds(std::max<int64_t>(0, req.timeout_ms)));
      auto s = std::make_shared<Session>(*e->scope, target_, so);
      if (!s->status().ok()) return s->status();
      e->session = std::move(s);
      e->opts = opts;
    }
    session = e->session;
  }
  std::vector<std::pair<std::string, Tensor>> feeds;
  feeds.reserve(req.feeds.size());
  for (size_t i = 0; i < req.feeds.size(); ++i) feeds.emplace_back(req.feed_names[i], req.feeds[i]);
  if (req.trace_max_events == 0) return session->run_by_name(feeds, req.fetches, req.targets);
  RunOptions traced;
  traced.trace_level = RunOptions::TraceLevel::kFullTrace;
  traced.trace_max_events = req.trace_max_events;  // clamped by the run
  RunMetadata md;
  AF_ASSIGN_OR_RETURN(std::vector<Tensor> out, session->run_by_name(traced, feeds, req.fetches, req.targets, &md));
  const std::string bytes = encode_step_stats(md.step_stats);
  Tensor t(DType::kUInt8, Shape{static_cast<int64_t>(bytes.size())});
  if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  out.push_back(std::move(t));
  return out;
}

}  // namespace actorflow
