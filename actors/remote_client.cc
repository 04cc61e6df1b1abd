// The client end of remote sessions (actors/remote_client.h).
#include "actors/remote_client.h"

#include <cmath>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <map>

#include "actors/membership.h"
#include "actors/server.h"
#include "graph/graph_def.h"
#include "config/cluster_spec.h"  // the cluster file's options

namespace actorflow {
namespace {

constexpr const char* kScheme = "actorflow://";
constexpr const char* kClientJob = "_client";  // claims /job:_client/replica:0/task:0

// Forwards runs to the task's node actor and fails them when membership reports the task down
// (a request to a remote actor is never answered once its connection is gone).
struct WaiterState {
  std::string task;
  uint64_t next = 0;
  std::map<uint64_t, caf::response_promise> pending;
};

caf::behavior waiter(caf::stateful_actor<WaiterState>* self, std::string task) {
  self->state.task = std::move(task);
  return {
      [=](crun_atom, const node_actor_t& node, ClientRunRequest& req) -> caf::result<std::vector<Tensor>> {
        auto rp = self->make_response_promise<std::vector<Tensor>>();
        const uint64_t id = ++self->state.next;
        self->state.pending.emplace(id, rp);
        self->request(node, caf::infinite, crun_atom::value, std::move(req))
            .then(
                [=](std::vector<Tensor>& v) {
                  auto it = self->state.pending.find(id);
                  if (it == self->state.pending.end()) return;
                  it->second.deliver(std::move(v));
                  self->state.pending.erase(it);
                },
                [=](caf::error& e) {
                  auto it = self->state.pending.find(id);
                  if (it == self->state.pending.end()) return;
                  it->second.deliver(std::move(e));
                  self->state.pending.erase(it);
                });
        return rp;
      },
      [=](down_atom, const std::string& task, const std::string& reason) {
        if (task != self->state.task) return;
        for (auto& kv : self->state.pending)
          kv.second.deliver(to_caf_error(Unavailable("task " + task + " went down during a remote run: " + reason)));
        self->state.pending.clear();
      },
  };
}

}  // namespace

struct RemoteClient::Impl {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<Membership> membership;
  caf::actor waiter;
  std::string task;
  std::string address;
  std::chrono::milliseconds connect_timeout{30000};
  // The step deadline the task applies to a request that sets none ([server] step_timeout_secs
  // of its entry in the cluster file): this client waits no longer than that either.
  std::chrono::milliseconds default_step_timeout{600000};
};

RemoteClient::RemoteClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)), task_(impl_->task) {}

RemoteClient::~RemoteClient() {
  if (!impl_) return;
  caf::anon_send_exit(impl_->waiter, caf::exit_reason::user_shutdown);
  impl_->membership.reset();
  impl_->sys.reset();
}

Result<std::unique_ptr<RemoteClient>> RemoteClient::create(const std::string& target, const ClusterSpec& cluster) {
  const std::string scheme = kScheme;
  if (target.compare(0, scheme.size(), scheme) != 0 || target.size() == scheme.size())
    return InvalidArgument("remote session target '" + target + "' is not actorflow://host:port");
  const std::string address = target.substr(scheme.size());
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size())
    return InvalidArgument("remote session target '" + target + "' has no port");
  // Which task of the cluster file serves that address?
  std::string task;
  double step_timeout_secs = 600;
  ServerOptions server_opts;
  for (const auto& t : cluster.all_tasks()) {
    auto a = cluster.task_address(t);
    if (!a.ok()) continue;
    const auto c = a->rfind(':');
    if (*a == address || (same_host(*a, address) && a->substr(c + 1) == address.substr(colon + 1))) {
      task = t.device_prefix();
      server_opts = cluster.server_options(t);
      step_timeout_secs = server_opts.step_timeout_secs;
      break;
    }
  }
  if (task.empty())
    return NotFound("remote session target '" + target + "': no task of cluster file " + cluster.source() +
                    " has the address " + address);
  auto impl = std::make_unique<Impl>();
  Server::configure(impl->cfg);
  impl->sys = std::make_unique<caf::actor_system>(impl->cfg);
  AF_ASSIGN_OR_RETURN(MembershipConfig mc, tool_membership_config(cluster, kClientJob));
  // The target task's [server] timeouts: how long to wait for it to come (back) up, and when a
  // silent connection counts as lost, are the cluster's, as for its own tasks.
  mc.connect_timeout = std::chrono::milliseconds(server_opts.connect_timeout_ms);
  mc.heartbeat_interval = std::chrono::milliseconds(server_opts.heartbeat_interval_ms);
  mc.peer_timeout = std::chrono::milliseconds(server_opts.peer_timeout_ms);
  impl->membership = std::make_unique<Membership>(*impl->sys, mc);
  impl->waiter = impl->sys->spawn(waiter, task);
  impl->membership->add_listener(impl->waiter);
  impl->task = task;
  impl->address = address;
  impl->connect_timeout = mc.connect_timeout;
  impl->default_step_timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(step_timeout_secs * 1000.0)));
  return std::unique_ptr<RemoteClient>(new RemoteClient(std::move(impl)));
}

Result<std::vector<Tensor>> RemoteClient::run(ClientRunRequest req, const Graph& graph, bool send_graph,
                                              bool* graph_sent) {
  if (graph_sent) *graph_sent = false;
  const auto step_timeout = req.timeout_ms > 0 ? std::chrono::milliseconds(req.timeout_ms) : impl_->default_step_timeout;
  // Reaching the task: the request's own deadline, else the cluster's connect_timeout_ms.
  const auto connect = req.timeout_ms > 0 ? std::chrono::milliseconds(req.timeout_ms) : std::chrono::milliseconds(0);
  AF_ASSIGN_OR_RETURN(PeerInfo peer, impl_->membership->ensure(impl_->task, impl_->address, connect));
  if (send_graph) req.graph_def = serialize_graph(graph);
  // The task ends the step at its deadline; this bound is for a task that cannot answer.
  const caf::duration timeout{step_timeout + std::chrono::seconds(5)};
  for (int attempt = 0;; ++attempt) {
    const bool carried = !req.graph_def.empty();
    ScopedActor self{*impl_->sys};
    Result<std::vector<Tensor>> out = Internal("no reply from task " + impl_->task);
    self->request(impl_->waiter, timeout, crun_atom::value, peer.node, req)
        .receive([&](std::vector<Tensor>& v) { out = std::move(v); },
                 [&](caf::error& e) { out = from_caf_error(e, "task " + impl_->task); });
    if (out.ok()) {
      if (graph_sent && carried) *graph_sent = true;
      return out;
    }
    // The task does not hold this graph (it restarted, or dropped an idle session): send it.
    const Status& st = out.status();
    if (attempt == 0 && !carried && st.code() == Code::kFailedPrecondition &&
        st.message().find(kClientGraphUnknown) != std::string::npos) {
      req.graph_def = serialize_graph(graph);
      continue;
    }
    return out;
  }
}

void RemoteClient::close(uint64_t session) {
  auto peers = impl_->membership->peers();
  for (const auto& p : peers) {
    if (p.task != impl_->task) continue;
    ScopedActor self{*impl_->sys};
    self->send(p.node, cclose_atom::value, session);
  }
}

}  // namespace actorflow
