#include "actors/node_actor.h"

#include "actors/ps_replication.h"
#include "core/step_trace.h"
#include "device/variable_call.h"

#include <atomic>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "actors/auth.h"
#include "actors/detached_actors.h"
#include "actors/client_reply_budget.h"
#include "actors/device_actor.h"
#include "actors/faults.h"
#include "actors/peer_link.h"
#include "core/logging.h"
#include "core/metrics.h"

namespace actorflow {

bool sender_allowed(caf::local_actor* self, const AuthenticatedPeers* peers, const char* what) {
  const auto& sender = self->current_sender();
  if (!sender) {
    AF_LOG(WARNING) << "rejected anonymous " << what;
    return false;
  }
  if (sender->node() == self->home_system().node()) return true;
  if (peers && peers->contains(sender->node())) return true;
  AF_LOG(WARNING) << "rejected " << what << " from unauthenticated node " << caf::to_string(sender->node());
  return false;
}

PeerRole peer_role(const std::string& task) {
  std::string job;
  if (task.rfind("/job:", 0) == 0) {
    const size_t end = task.find('/', 5);
    job = task.substr(5, end == std::string::npos ? std::string::npos : end - 5);
  } else {
    const size_t slash = task.find('/');
    if (slash != std::string::npos) job = task.substr(0, slash);
  }
  if (job.empty()) return PeerRole::kClient;
  if (job[0] != '_') return PeerRole::kMember;
  return job == "_chaos" ? PeerRole::kOperator : PeerRole::kClient;
}

const char* peer_role_name(PeerRole r) {
  switch (r) {
    case PeerRole::kClient: return "client";
    case PeerRole::kOperator: return "operator";
    case PeerRole::kMember: return "member";
  }
  return "?";
}

namespace {

// Self-message: has `node` authenticated by now? (node, generation of its auth watch)
using authcheck_atom = caf::atom_constant<caf::atom("authcheck")>;
using sweep_atom = caf::atom_constant<caf::atom("sweepconn")>;
// Self-message: the replicated calls queued for that primary (its queue id) may go on now (their
// tensors arrived over the data plane, or the first one's wait timed out).
using replready_atom = caf::atom_constant<caf::atom("replready")>;
// Self-message from the middleman's thread: the task `node`'s direct connection proved
// (resolve_peer_task), which finishes that node's pending authentication with its role.
using peerrole_atom = caf::atom_constant<caf::atom("peerrole")>;
// The node actor's interface with its private timers.
using node_impl_t = node_actor_t::extend<caf::reacts_to<authcheck_atom, caf::node_id, uint64_t>,
                                         caf::reacts_to<sweep_atom>, caf::reacts_to<replready_atom, uint64_t>,
                                         caf::reacts_to<peerrole_atom, caf::node_id, std::string, std::string>>;

// An auth request whose proof was right, waiting for its node's role (resolve_peer_task).
struct PendingAuth {
  caf::typed_response_promise<NodeInfo, std::string> rp;
  std::string client_nonce;
  std::string ticket;  // random: only the middleman's answer for this auth carries it
};

// A replicated call waiting for the tensors it sent ahead over the data plane (ReplicaCall::data_count),
// or queued behind one that waits: a primary's calls are applied in the order they came.
struct PendingReplica {
  caf::typed_response_promise<std::vector<Tensor>> rp;
  variable_actor_t var;
  std::shared_ptr<ResourceCall> call;  // its args hold uninitialised tensors where the data plane's go
  std::string key;       // the data plane's call key; empty: the call carries every tensor
  size_t n = 0;          // tensors sent ahead
  std::chrono::steady_clock::time_point deadline;
  bool armed = false;    // the inbox will send replready when they are all here
};

struct NodeState {
  NodeActorConfig cfg;
  std::map<std::string, device_actor_t> local;  // device name -> device actor
  std::map<caf::node_id, std::string> challenges;  // server nonce per peer node
  std::map<caf::node_id, std::string> peer_tasks;  // task each peer node named in its hello
  std::set<std::tuple<caf::node_id, caf::actor_id, uint64_t>> redelivered;  // delayed requests
  // Remote nodes that contacted us and have not authenticated yet -> generation of their
  // pending auth check (a node that reconnects after being dropped starts a new one).
  std::map<caf::node_id, uint64_t> auth_pending;
  uint64_t auth_generation = 0;
  // Primaries replicating to this task (ps_replicas = 2), monitored: actor address -> task.
  std::map<caf::actor_addr, std::string> primaries;
  // Replicated calls waiting for their data-plane tensors, per sending variable actor (queue id).
  std::map<caf::actor_addr, uint64_t> replica_queue_ids;
  std::map<uint64_t, std::deque<PendingReplica>> replica_queues;
  uint64_t next_replica_queue = 0;
  // The task each authenticated remote node's connection proved (its role's source), for messages.
  std::map<caf::node_id, std::string> proved_tasks;
  // Authentications waiting for their node's role, per node (a newer auth replaces an older one).
  std::map<caf::node_id, PendingAuth> pending_auth;
  // Refusals by role are logged at most once a second.
  std::chrono::steady_clock::time_point last_role_log{};
  // Remote clients' runs in flight and unread replies (actors/client_reply_budget.h).
  std::shared_ptr<ClientReplyBudget> client_replies;
  static constexpr const char* name = "node";
};
using NodeActor = node_impl_t::stateful_base<NodeState>;

// ---- fault injection (actors/faults.h) ----------------------------------------------------
// Applies this task's link faults to the current request if it comes from another process.
// True when it must not be handled now: dropped (never answered: the sender's request timeout
// or heartbeats notice) or postponed (re-enqueued with the same sender and request id after
// the delay, then handled without a second check). Duplicates do not apply to requests.
bool fault_gate(NodeActor* self) {
  auto& inj = FaultInjector::global();
  if (!inj.armed()) return false;
  const auto& sender = self->current_sender();
  if (!sender || sender->node() == self->home_system().node()) return false;
  auto& st = self->state;
  const caf::message_id mid = self->current_message_id();
  auto key = std::make_tuple(sender->node(), sender->id(), mid.integer_value());
  if (st.redelivered.erase(key)) return false;
  auto it = st.peer_tasks.find(sender->node());
  LinkDecision d = inj.on_receive(it == st.peer_tasks.end() ? "" : it->second, st.cfg.task);
  if (d.drop) return true;
  if (d.delay_ms <= 0 || !mid.is_request()) return false;
  st.redelivered.insert(key);
  auto& clock = self->home_system().clock();
  clock.schedule_message(clock.now() + std::chrono::milliseconds(d.delay_ms), caf::actor_cast<caf::strong_actor_ptr>(self),
                         caf::make_mailbox_element(sender, mid, {}, self->current_mailbox_element()->copy_content_to_message()));
  return true;
}

// ---- unauthenticated peers ----------------------------------------------------------------
// Whether the current message came from another process (the node actor's self-timers ignore those).
bool from_another_process(NodeActor* self) {
  return self->current_sender() && self->current_sender()->node() != self->home_system().node();
}

// A remote node that says hello or sends anything before authenticating must complete the
// handshake within cfg.auth_timeout; one whose proof fails is checked at once. A node still
// unauthenticated at its check has its CAF connection closed (actors/peer_link.h).
void check_auth_later(NodeActor* self, const caf::node_id& node, std::chrono::milliseconds after) {
  auto& st = self->state;
  if (node == self->home_system().node() || (st.cfg.peers && st.cfg.peers->contains(node))) return;
  auto it = st.auth_pending.find(node);
  uint64_t gen;
  if (it == st.auth_pending.end()) {
    gen = ++st.auth_generation;
    st.auth_pending.emplace(node, gen);
  } else {
    gen = it->second;
    if (after >= st.cfg.auth_timeout) return;  // its deadline is already scheduled
  }
  self->delayed_send(self, after, authcheck_atom::value, node, gen);
}

// sender_allowed, plus: a remote sender that is refused gets an auth deadline.
bool allowed(NodeActor* self, const char* what) {
  if (self->current_sender() == caf::actor_cast<caf::strong_actor_ptr>(self)) {
    AF_LOG(WARNING) << "dropped " << what << " that claims to come from this node actor itself";
    return false;
  }
  if (sender_allowed(self, self->state.cfg.peers.get(), what)) return true;
  const auto& sender = self->current_sender();
  if (sender) check_auth_later(self, sender->node(), self->state.cfg.auth_timeout);
  return false;
}

// The role of the current message's sender: kMember for this process, its authenticated role
// for a remote node (call after allowed()).
PeerRole sender_role(NodeActor* self) {
  const auto& sender = self->current_sender();
  if (!sender || sender->node() == self->home_system().node()) return PeerRole::kMember;
  return self->state.cfg.peers ? self->state.cfg.peers->role(sender->node()) : PeerRole::kClient;
}

// Who may send `what` (docs/security.md "Roles"): OK, Unauthenticated (not authenticated:
// allowed() refused it) or PermissionDenied naming what and the role it needs (logged at most
// once a second).
Status permitted(NodeActor* self, const char* what, PeerRole needs) {
  if (!allowed(self, what)) return Unauthenticated(std::string(what) + " refused: peer has not authenticated");
  const PeerRole role = sender_role(self);
  if (role >= needs) return Status::OK();
  auto& st = self->state;
  const auto node = self->current_sender()->node();
  auto t = st.proved_tasks.find(node);
  const std::string who = std::string(peer_role_name(role)) +
                          (t == st.proved_tasks.end() || t->second.empty() ? std::string(" of unknown name")
                                                                           : " (" + t->second + ")");
  const auto now = std::chrono::steady_clock::now();
  if (now - st.last_role_log >= std::chrono::seconds(1)) {
    st.last_role_log = now;
    AF_LOG(WARNING) << "task " << st.cfg.task << " refused " << what << " from " << who << ": only a "
                    << peer_role_name(needs) << (needs == PeerRole::kMember ? "" : " or a member") << " may send it";
  }
  return PermissionDenied(std::string(what) + " refused by task " + st.cfg.task + ": the peer is a " + who +
                          ", and only a " + peer_role_name(needs) +
                          (needs == PeerRole::kMember ? std::string() : std::string(" or a member")) + " may send it");
}

// Applies the queued replicated calls of queue `qid` whose tensors are all here, in order: the
// first whose tensors are missing stops it (the inbox is asked to say when they arrive) unless
// its wait passed its deadline, which fails it (the primary then counts its backup as failed and
// sends the whole state on the next connection).
void drain_replicas(NodeActor* self, uint64_t qid) {
  auto& st = self->state;
  auto qit = st.replica_queues.find(qid);
  if (qit == st.replica_queues.end()) return;
  auto& q = qit->second;
  while (!q.empty()) {
    PendingReplica& p = q.front();
    if (!p.key.empty()) {
      std::vector<std::pair<size_t, Tensor>> got;
      if (!st.cfg.replica_inbox->take(p.key, p.n, &got)) {
        if (std::chrono::steady_clock::now() >= p.deadline) {
          st.cfg.replica_inbox->forget(p.key);
          p.rp.deliver(to_caf_error(DeadlineExceeded("replicated call " + p.call->method() + " of variable '" +
                                                     p.call->resource + "': its tensors did not arrive over the data plane")));
          q.pop_front();
          continue;
        }
        if (!p.armed) {
          p.armed = true;
          // A weak handle: the inbox (which the node actor's config owns) must not keep it alive.
          caf::weak_actor_ptr me = caf::actor_cast<caf::weak_actor_ptr>(self->ctrl());
          st.cfg.replica_inbox->notify(p.key, [me, qid] {
            if (auto strong = caf::actor_cast<caf::strong_actor_ptr>(me))
              caf::anon_send(caf::actor_cast<caf::actor>(strong), replready_atom::value, qid);
          });
          self->delayed_send(self, p.deadline - std::chrono::steady_clock::now() + std::chrono::milliseconds(1),
                             replready_atom::value, qid);
        }
        return;
      }
      for (auto& [i, t] : got) {
        if (i >= p.call->args.size() || p.call->args[i].is_initialized()) {
          p.rp.deliver(to_caf_error(InvalidArgument("replicated call " + p.call->method() + " of variable '" +
                                                    p.call->resource + "': data-plane tensor for argument " +
                                                    std::to_string(i) + " has no place in the call")));
          p.call.reset();
          break;
        }
        p.call->args[i] = std::move(t);
      }
    }
    if (p.call) {
      auto rp = p.rp;
      self->request(p.var, caf::infinite, resource_atom::value, ResourceCallPtr(std::move(p.call)))
          .then([rp](const std::vector<Tensor>& v) mutable { rp.deliver(v); },
                [rp](const caf::error& e) mutable { rp.deliver(e); });
    }
    q.pop_front();
  }
  st.replica_queues.erase(qit);
  for (auto it = st.replica_queue_ids.begin(); it != st.replica_queue_ids.end(); ++it)
    if (it->second == qid) {
      st.replica_queue_ids.erase(it);
      break;
    }
}

// The ps tasks (other than this one) whose variables this task serves now: the primaries its
// copies took over and those its serving map moved to it (NodeInfo::serves_for).
std::vector<std::string> serves_for(const NodeActorConfig& cfg) {
  std::set<std::string> serves;
  if (cfg.replicator)
    for (auto& t : cfg.replicator->taken_over()) serves.insert(std::move(t));
  if (cfg.serving)
    for (auto& t : cfg.serving->served_by(cfg.task)) serves.insert(std::move(t));
  serves.erase(cfg.task);
  return {serves.begin(), serves.end()};
}

node_impl_t::behavior_type node_actor(NodeActor* self, NodeActorConfig cfg,
                                      std::shared_ptr<ClientReplyBudget> client_replies) {
  self->state.cfg = std::move(cfg);
  self->state.client_replies = std::move(client_replies);
  if (self->state.cfg.shutdown_token.empty()) self->state.cfg.shutdown_token = random_nonce();
  // Exit and error messages stop nothing here (a member's CAF node could send them in anyone's
  // name); only the Server's shutdown message does. At most one log line per second.
  auto last_log = std::make_shared<std::chrono::steady_clock::time_point>();
  auto note = [last_log](const std::string& what) {
    auto now = std::chrono::steady_clock::now();
    if (now - *last_log < std::chrono::seconds(1)) return;
    *last_log = now;
    AF_LOG(WARNING) << "node actor ignored " << what;
  };
  self->set_exit_handler([note](caf::exit_msg& m) {
    note("an exit message (" + caf::to_string(m.reason) + ") from " + caf::to_string(m.source));
  });
  self->set_error_handler([note](caf::error& e) { note("an error message (" + caf::to_string(e) + ")"); });
  // A monitored primary's node actor is gone (its connection closed): its copies here may
  // take over. Other down messages are not ours to act on.
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    auto it = st.primaries.find(dm.source);
    if (it == st.primaries.end()) return;
    if (st.cfg.replicator) st.cfg.replicator->primary_lost(it->second);
    st.primaries.erase(it);
  });
  for (const auto& d : self->state.cfg.devices) self->state.local[d.name] = d.actor;
  auto device = [self](const std::string& name) -> device_actor_t {
    auto it = self->state.local.find(name);
    return it == self->state.local.end() ? device_actor_t() : it->second;
  };
  auto no_device = [self](const std::string& name) {
    return to_caf_error(NotFound("task " + self->state.cfg.task + " has no device '" + name + "'"));
  };
  // The devices as peers see them: reachable through this node actor, never directly.
  auto advertised = [self] {
    std::vector<DeviceInfo> out = self->state.cfg.devices;
    for (auto& d : out) {
      d.actor = device_actor_t();
      d.node = caf::actor_cast<node_actor_t>(self);
    }
    return out;
  };
  if (self->state.cfg.sweeper)
    self->delayed_send(self, self->state.cfg.sweeper->limit() / 2, sweep_atom::value);
  auto unauth = [](const char* what) {
    return to_caf_error(Unauthenticated(std::string(what) + " refused: peer has not authenticated"));
  };
  return {
      [=](hello_atom, uint32_t version, const std::string& fingerprint,
          const std::string& client_task) -> caf::result<std::string> {
        auto& st = self->state;
        if (self->current_sender()) {
          st.peer_tasks[self->current_sender()->node()] = client_task;
          check_auth_later(self, self->current_sender()->node(), st.cfg.auth_timeout);
        }
        if (fault_gate(self)) return caf::delegated<std::string>();
        if (version != kProtocolVersion) {
          AF_LOG(WARNING) << "peer " << client_task << " speaks protocol " << version << ", this task "
                          << kProtocolVersion << ": refused";
          return to_caf_error(FailedPrecondition("protocol version mismatch: peer " + client_task + " has " +
                                                 std::to_string(version) + ", task " + st.cfg.task + " has " +
                                                 std::to_string(kProtocolVersion)));
        }
        if (fingerprint != st.cfg.fingerprint) {
          AF_LOG(WARNING) << "peer " << client_task << " holds a different cluster file: refused";
          return to_caf_error(FailedPrecondition("cluster file mismatch: peer " + client_task + " and task " +
                                                 st.cfg.task + " hold different cluster files"));
        }
        const auto& sender = self->current_sender();
        if (!sender) return to_caf_error(Unauthenticated("anonymous hello"));
        std::string nonce = random_nonce();
        st.challenges[sender->node()] = nonce;
        return nonce;
      },
      [=](auth_atom, const std::string& client_proof,
          const std::string& client_nonce) -> caf::result<NodeInfo, std::string> {
        auto& st = self->state;
        if (fault_gate(self)) return caf::delegated<NodeInfo, std::string>();
        const auto& sender = self->current_sender();
        if (!sender) return to_caf_error(Unauthenticated("anonymous auth message"));
        auto it = st.challenges.find(sender->node());
        if (it == st.challenges.end()) return to_caf_error(Unauthenticated("auth without hello"));
        std::string expected = auth_proof(st.cfg.secret, "client", it->second, st.cfg.fingerprint, kProtocolVersion);
        st.challenges.erase(it);
        if (!proofs_equal(expected, client_proof)) {
          AF_LOG(WARNING) << "peer node " << caf::to_string(sender->node())
                          << " failed authentication (wrong cluster secret): dropped";
          // Closed once this error reply had time to leave (the peer then sees why).
          check_auth_later(self, sender->node(), std::chrono::milliseconds(100));
          return to_caf_error(Unauthenticated("authentication failed: wrong cluster secret"));
        }
        const caf::node_id node = sender->node();
        if (node == self->home_system().node()) {
          st.auth_pending.erase(node);
          NodeInfo info{st.cfg.task, advertised(), st.cfg.data_addr, serves_for(st.cfg)};
          return caf::result<NodeInfo, std::string>(
              std::move(info),
              auth_proof(st.cfg.secret, "node", client_nonce, st.cfg.fingerprint, kProtocolVersion));
        }
        // The proof is right: what the peer may do comes from what its connection proved
        // (actors/control_plane.h), looked up on the middleman's thread; the answer follows.
        PendingAuth pa{self->make_response_promise<NodeInfo, std::string>(), client_nonce, random_nonce()};
        auto rp = pa.rp;
        const std::string ticket = pa.ticket;
        auto old = st.pending_auth.find(node);
        if (old != st.pending_auth.end()) {
          old->second.rp.deliver(to_caf_error(Unauthenticated("authentication superseded by a newer one")));
          st.pending_auth.erase(old);
        }
        st.pending_auth.emplace(node, std::move(pa));
        caf::weak_actor_ptr me = caf::actor_cast<caf::weak_actor_ptr>(self->ctrl());
        resolve_peer_task(self->home_system(), node, [me, node, ticket](std::string task) {
          if (auto strong = caf::actor_cast<caf::strong_actor_ptr>(me))
            caf::anon_send(caf::actor_cast<caf::actor>(strong), peerrole_atom::value, node, std::move(task), ticket);
        });
        return rp;
      },
      [=](devices_atom) -> caf::result<std::vector<DeviceInfo>> {
        if (!allowed(self, "devices request")) return unauth("devices");
        if (fault_gate(self)) return caf::delegated<std::vector<DeviceInfo>>();
        return advertised();
      },
      [=](register_atom, const std::string& dev, const std::string& handle, std::string& graph_def) -> caf::result<bool> {
        if (Status st = permitted(self, "partition registration", PeerRole::kMember); !st.ok()) return to_caf_error(st);
        if (fault_gate(self)) return caf::delegated<bool>();
        auto a = device(dev);
        if (!a) return no_device(dev);
        self->delegate(a, register_atom::value, handle, std::move(graph_def));
        return caf::delegated<bool>();
      },
      [=](deregister_atom, const std::string& dev, const std::string& handle) -> caf::result<bool> {
        if (Status st = permitted(self, "deregistration", PeerRole::kMember); !st.ok()) return to_caf_error(st);
        if (fault_gate(self)) return caf::delegated<bool>();
        auto a = device(dev);
        if (!a) return no_device(dev);
        self->delegate(a, deregister_atom::value, handle);
        return caf::delegated<bool>();
      },
      [=](replicate_atom, ReplicaCall& rc) -> caf::result<std::vector<Tensor>> {
        if (Status st = permitted(self, "replicated variable call", PeerRole::kMember); !st.ok()) return to_caf_error(st);
        if (!self->state.cfg.resources)
          return to_caf_error(FailedPrecondition("task " + self->state.cfg.task + " keeps no variables"));
        const std::string& var = rc.var;
        auto refuse = [&](const std::string& why) {
          return to_caf_error(InvalidArgument("replicated call " + rc.method.substr(0, 64) + " of variable '" +
                                              var.substr(0, 256) + "': " + why));
        };
        if (var.empty()) return refuse("no variable name");
        auto decoded = decode_call_attrs(rc.attrs);
        if (!decoded.ok()) return to_caf_error(decoded.status());
        // Tensors sent ahead over the data plane: how many and the key of their frames.
        const size_t n = rc.data_count;
        if (n > 0) {
          if (n > ReplicaInbox::kMaxArgs || n > rc.args.size())
            return refuse("data_count " + std::to_string(n) + " for " + std::to_string(rc.args.size()) +
                          " arguments (at most " + std::to_string(ReplicaInbox::kMaxArgs) + ")");
          if (!ReplicaInbox::valid_call_key(rc.data_key))
            return refuse("data_key of " + std::to_string(rc.data_key.size()) + " bytes (1 to " +
                          std::to_string(ReplicaInbox::kMaxCallKeyBytes) + ")");
          if (!self->state.cfg.replica_inbox)
            return to_caf_error(FailedPrecondition("task " + self->state.cfg.task + " takes no replicated tensors over the data plane"));
        } else if (!rc.data_key.empty()) {
          return refuse("a data_key without data_count");
        }
        // Decoded here, once per replicated call (device/variable_call.h).
        auto op = decode_variable_op(rc.method, std::move(*decoded));
        if (!op.ok()) return refuse(op.status().message());
        auto a = self->state.cfg.resources->get_or_create(var);
        if (!a.ok()) return to_caf_error(a.status());
        // Which task is the primary: the one its node named in its (authenticated) hello.
        std::string from;
        if (const auto& sender = self->current_sender()) {
          auto& st = self->state;
          auto t = st.peer_tasks.find(sender->node());
          if (t != st.peer_tasks.end()) from = t->second;
          const caf::actor_addr addr = caf::actor_cast<caf::actor_addr>(sender);
          if (!from.empty() && st.cfg.replicator) {
            if (!st.primaries.count(addr)) {
              self->monitor(caf::actor_cast<caf::actor>(sender));
              st.primaries.emplace(addr, from);
            }
            st.cfg.replicator->primary_seen(from);
          }
        }
        std::string key = n > 0 ? std::move(rc.data_key) : std::string();
        auto call = std::make_shared<ResourceCall>();
        call->resource = var;
        call->op = std::move(*op);
        call->args = std::move(rc.args);
        // The mark that makes the variable actor apply it as a backup: a field only this handler
        // sets (a kernel's call never has it, whatever its op's attributes say).
        call->replica = ReplicaOrigin{from};
        // A primary's calls are applied in their order: behind any of its calls still waiting
        // for data-plane tensors, and (with tensors of their own) once those are here.
        const caf::actor_addr sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
        auto& st = self->state;
        auto qid_it = st.replica_queue_ids.find(sender);
        if (key.empty() && qid_it == st.replica_queue_ids.end()) {
          self->delegate(*a, resource_atom::value, ResourceCallPtr(std::move(call)));
          return caf::delegated<std::vector<Tensor>>();
        }
        uint64_t qid;
        if (qid_it == st.replica_queue_ids.end()) {
          qid = ++st.next_replica_queue;
          st.replica_queue_ids.emplace(sender, qid);
        } else {
          qid = qid_it->second;
        }
        PendingReplica p;
        p.rp = self->make_response_promise<std::vector<Tensor>>();
        p.var = *a;
        p.call = std::move(call);
        p.key = std::move(key);
        p.n = n;
        p.deadline = std::chrono::steady_clock::now() +
                     (st.cfg.replicator ? st.cfg.replicator->timeout() : std::chrono::milliseconds(5000));
        auto rp = p.rp;
        st.replica_queues[qid].push_back(std::move(p));
        drain_replicas(self, qid);
        return rp;
      },
      [=](run_atom, const std::string& dev, const std::string& handle, int64_t step_id,
          std::vector<Tensor>& args) -> caf::result<std::vector<Tensor>> {
        if (Status st = permitted(self, "run request", PeerRole::kMember); !st.ok()) return to_caf_error(st);
        if (fault_gate(self)) return caf::delegated<std::vector<Tensor>>();
        auto a = device(dev);
        if (!a) return no_device(dev);
        self->delegate(a, run_atom::value, handle, step_id, std::move(args));
        return caf::delegated<std::vector<Tensor>>();
      },
      [=](abort_atom, const std::string& dev, int64_t step_id, const std::string& why) {
        if (!permitted(self, "abort", PeerRole::kMember).ok()) return;
        if (fault_gate(self)) return;  // a dropped abort: the step ends by its own error or timeout
        if (auto a = device(dev)) self->send(a, abort_atom::value, step_id, why);
      },
      [=](tensor_atom, int64_t step_id, const std::string& key, Tensor& t) {
        if (!permitted(self, "tensor", PeerRole::kMember).ok()) return;
        // The key is parsed once here, where it enters the process over the control plane.
        auto parsed = RendezvousKey::parse(key);
        if (!parsed.ok()) {
          AF_LOG(WARNING) << "dropped a tensor of step " << step_id << " from node "
                          << caf::to_string(self->current_sender()->node()) << " (control plane): " << parsed.status().message();
          return;
        }
        const std::string& dst = parsed->dst_device();
        device_actor_t a = device(dst);
        if (!a) {
          AF_LOG(WARNING) << "dropped tensor " << key << ": no device " << dst << " on this task";
          return;
        }
        // Fault injection: a tensor from another task passes this task's link faults here, as
        // it would on the data plane (the router's receiving hook).
        auto& inj = FaultInjector::global();
        if (inj.armed()) {
          LinkDecision d = inj.on_receive(parsed->src_task(), self->state.cfg.task);
          if (d.drop) return;
          for (int i = 0; i < (d.duplicate ? 2 : 1); ++i) {
            if (d.delay_ms > 0) self->delayed_send(a, std::chrono::milliseconds(d.delay_ms), tensor_atom::value, step_id, key, t);
            else self->send(a, tensor_atom::value, step_id, key, t);
          }
          return;
        }
        self->send(a, tensor_atom::value, step_id, key, std::move(t));
      },
      [=](shutdown_atom, const std::string& token) {
        // Only its own Server stops it: never a message from another process, whatever its token.
        if (from_another_process(self) || !proofs_equal(token, self->state.cfg.shutdown_token)) {
          note("a shutdown message from another process or with a wrong token");
          return;
        }
        self->quit(caf::exit_reason::user_shutdown);
      },
      [=](authcheck_atom, const caf::node_id& node, uint64_t gen) {
        auto& st = self->state;
        auto it = st.auth_pending.find(node);
        if (it == st.auth_pending.end() || it->second != gen) return;  // authenticated, or a newer check
        st.auth_pending.erase(it);
        st.challenges.erase(node);  // per-peer state of a peer that never authenticated expires
        if (st.cfg.peers && st.cfg.peers->contains(node)) return;
        auto task = st.peer_tasks.find(node);
        close_peer_connection(self->home_system(), node,
                              "peer" + (task == st.peer_tasks.end() ? std::string() : " claiming task " + task->second) +
                                  " did not authenticate within " + std::to_string(st.cfg.auth_timeout.count()) +
                                  " ms or failed to");
        st.peer_tasks.erase(node);
      },
      [=](peerrole_atom, const caf::node_id& node, const std::string& task, const std::string& ticket) {
        auto& st = self->state;
        auto it = st.pending_auth.find(node);
        if (it == st.pending_auth.end() || !proofs_equal(it->second.ticket, ticket)) return;
        PendingAuth pa = std::move(it->second);
        st.pending_auth.erase(it);
        st.cfg.peers->add(node, peer_role(task));
        st.proved_tasks[node] = task;
        st.auth_pending.erase(node);
        NodeInfo info{st.cfg.task, advertised(), st.cfg.data_addr, serves_for(st.cfg)};
        pa.rp.deliver(std::move(info),
                      auth_proof(st.cfg.secret, "node", pa.client_nonce, st.cfg.fingerprint, kProtocolVersion));
      },
      [=](replready_atom, uint64_t qid) {
        // Only this process's own timer or inbox (a remote sender could only make it look sooner).
        if (from_another_process(self)) return;
        auto& st = self->state;
        auto q = st.replica_queues.find(qid);
        if (q != st.replica_queues.end() && !q->second.empty()) q->second.front().armed = false;
        drain_replicas(self, qid);
      },
      [=](sweep_atom) {
        // Only this process's own timer (a remote sender could only make it sweep more often).
        if (from_another_process(self)) return;
        auto& sw = self->state.cfg.sweeper;
        if (!sw) return;
        sw->sweep();
        self->delayed_send(self, sw->limit() / 2, sweep_atom::value);
      },
      [=](servesfor_atom) -> caf::result<std::vector<std::string>> {
        if (!allowed(self, "serving query")) return unauth("servesfor");
        if (fault_gate(self)) return caf::delegated<std::vector<std::string>>();
        return serves_for(self->state.cfg);
      },
      [=](trace_atom, int64_t step_id, uint32_t max_events) -> caf::result<int64_t, uint64_t, std::string> {
        if (Status st = permitted(self, "trace request", PeerRole::kMember); !st.ok()) return to_caf_error(st);
        if (fault_gate(self)) return caf::delegated<int64_t, uint64_t, std::string>();
        std::string events;
        if (max_events > 0) {
          StepTraces::global().arm(step_id, max_events);
        } else {
          auto taken = StepTraces::global().take(step_id);
          if (!taken.ok()) return to_caf_error(taken.status());
          events = encode_trace_events(taken->first, taken->second);
        }
        return {trace_clock_ns(), trace_process_token(), std::move(events)};
      },
      [=](ping_atom) -> caf::result<std::string> {
        if (!allowed(self, "ping")) return unauth("ping");
        if (fault_gate(self)) return caf::delegated<std::string>();
        // A `throw` fault for the node actor (actor = "node"): not caught, so the actor ends, and
        // with it the process (Server: a node actor that ends while the server runs).
        FaultInjector::global().maybe_throw("node", self->state.cfg.task);
        static Counter& received = Metrics::global().counter(
            "actorflow_heartbeats_received_total", "Heartbeats (pings) from members this task answered.");
        received.inc();
        return self->state.cfg.task;
      },
      [=](fault_atom, const std::string& plan_toml) -> caf::result<std::vector<std::string>> {
        if (Status st = permitted(self, "fault plan", PeerRole::kOperator); !st.ok()) return to_caf_error(st);
        if (plan_toml.empty()) {
          FaultInjector::global().clear();
          return std::vector<std::string>{};
        }
        auto plan = FaultPlan::parse(plan_toml, "<fault plan>");
        if (!plan.ok()) return to_caf_error(plan.status());
        auto loaded = FaultInjector::global().load(*plan, self->state.cfg.task);
        if (!loaded.ok()) return to_caf_error(loaded.status());
        return std::move(*loaded);
      },
      [=](peers_atom, std::vector<std::string>& tasks) -> caf::result<bool> {
        if (Status st = permitted(self, "peer list", PeerRole::kMember); !st.ok()) return to_caf_error(st);
        if (fault_gate(self)) return caf::delegated<bool>();
        auto fn = self->state.cfg.connect_peers;
        if (!fn) return true;
        // Connecting blocks: do it on a worker with its own thread.
        auto worker = self->spawn<caf::detached>([fn](caf::event_based_actor* w) -> caf::behavior {
          return {[=](peers_atom, const std::vector<std::string>& ts) -> caf::result<bool> {
            Status s = fn(ts);
            w->quit();
            if (!s.ok()) return to_caf_error(s);
            return true;
          }};
        });
        if (auto& d = self->state.cfg.detached) d->add(caf::actor_cast<caf::strong_actor_ptr>(worker));
        self->delegate(worker, peers_atom::value, std::move(tasks));
        return caf::delegated<bool>();
      },
      [=](crun_atom, ClientRunRequest& req) -> caf::result<std::vector<Tensor>> {
        if (!allowed(self, "client run")) return unauth("client run");
        auto clients = self->state.cfg.clients;
        if (!clients) return to_caf_error(Unimplemented("task " + self->state.cfg.task + " takes no client sessions"));
        const caf::node_id client = self->current_sender()->node();
        const std::string peer = caf::to_string(client);
        // Roles: only a member's graph may hold ops that touch files (OpDef::touches_files).
        const bool may_touch_files = sender_role(self) == PeerRole::kMember;
        // Bounded per client: runs in flight, and reply bytes it has not read (a client from
        // another process; this process's own sessions are not counted).
        std::shared_ptr<ClientReplyBudget> budget =
            client == self->home_system().node() ? nullptr : self->state.client_replies;
        std::string who = peer;
        if (auto t = self->state.proved_tasks.find(client); t != self->state.proved_tasks.end() && !t->second.empty())
          who = t->second + " (node " + peer + ")";
        if (budget)
          if (Status st = budget->begin_run(client, who); !st.ok()) return to_caf_error(st);
        // A run blocks for the length of its step: do it on a worker with its own thread.
        auto worker = self->spawn<caf::detached>([clients, peer, may_touch_files, budget, client,
                                                  who](caf::event_based_actor* w) -> caf::behavior {
          if (budget) {
            auto admitted = std::make_shared<size_t>(0);
            w->attach_functor([budget, client, admitted](const caf::error&) {
              // After the reply went to CAF (the worker ends once it returned).
              if (*admitted > 0) budget->release(client, *admitted);
              budget->end_run(client);
            });
            return {[=](crun_atom, const ClientRunRequest& r) -> caf::result<std::vector<Tensor>> {
              auto out = clients->run(peer, r, may_touch_files);
              w->quit();
              if (!out.ok()) return to_caf_error(out.status());
              size_t bytes = 0;
              for (const auto& t : *out) bytes += t.bytes();
              if (Status st = budget->admit(client, who, bytes); !st.ok()) return to_caf_error(st);
              *admitted = bytes;
              return std::move(*out);
            }};
          }
          return {[=](crun_atom, const ClientRunRequest& r) -> caf::result<std::vector<Tensor>> {
            auto out = clients->run(peer, r, may_touch_files);
            w->quit();
            if (!out.ok()) return to_caf_error(out.status());
            return std::move(*out);
          }};
        });
        if (auto& d = self->state.cfg.detached) d->add(caf::actor_cast<caf::strong_actor_ptr>(worker));
        self->delegate(worker, crun_atom::value, std::move(req));
        return caf::delegated<std::vector<Tensor>>();
      },
      [=](cclose_atom, uint64_t session) -> caf::result<bool> {
        if (!allowed(self, "client close")) return unauth("client close");
        if (self->state.cfg.clients)
          self->state.cfg.clients->close(caf::to_string(self->current_sender()->node()), session);
        return true;
      },
  };
}

// The node actor's class: the behaviour above, plus a mailbox that takes no exit message.
// CAF 0.17 ends an actor on exit_reason::kill before any handler sees it (scheduled_actor's
// categorize), so a member's `anon_send_exit(node, kill)` would end the task's front door; the
// only place to refuse it is enqueue, which every message passes (local or from BASP), on the
// sender's thread. Other reasons are dropped here too (the exit handler would ignore them).
class NodeActorImpl : public NodeActor {
 public:
  NodeActorImpl(caf::actor_config& c, NodeActorConfig cfg)
      : NodeActor(c),
        cfg_(std::move(cfg)),
        client_replies_(ClientReplyBudget::create(home_system(), ClientReplyBudget::limits_from_env())) {}

  void enqueue(caf::mailbox_element_ptr what, caf::execution_unit* eu) override {
    if (what && what->content().match_elements<caf::exit_msg>()) {
      note_dropped_exit(*what);
      return;  // not a request: nobody waits for an answer
    }
    // Whatever a remote node sends may be answered on its connection: its backlog is checked
    // (a client that does not read is closed; actors/client_reply_budget.h).
    if (what && what->sender && what->sender->node() != home_system().node())
      client_replies_->note_request(what->sender->node());
    NodeActor::enqueue(std::move(what), eu);
  }

  behavior_type make_behavior() override { return node_actor(this, std::move(cfg_), client_replies_); }

 private:
  // At most one log line per second, from any sending thread.
  void note_dropped_exit(const caf::mailbox_element& m) {
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now().time_since_epoch()).count();
    int64_t last = last_exit_log_ms_.load(std::memory_order_relaxed);
    if (now - last < 1000 || !last_exit_log_ms_.compare_exchange_strong(last, now)) return;
    const auto& em = m.content().get_as<caf::exit_msg>(0);
    AF_LOG(WARNING) << "node actor ignored an exit message (" << caf::to_string(em.reason) << ") from "
                    << (m.sender ? caf::to_string(m.sender->node()) : std::string("an anonymous sender"))
                    << ": only its Server stops it";
  }

  NodeActorConfig cfg_;
  const std::shared_ptr<ClientReplyBudget> client_replies_;  // shared with the behaviour's state
  std::atomic<int64_t> last_exit_log_ms_{-1000000};
};

}  // namespace

node_actor_t spawn_node_actor(caf::actor_system& sys, NodeActorConfig cfg) {
  return caf::actor_cast<node_actor_t>(sys.spawn<NodeActorImpl>(std::move(cfg)));
}

void register_node_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<NodeInfo>("actorflow::NodeInfo");
  cfg.add_message_type<ReplicaCall>("actorflow::ReplicaCall");
}

}  // namespace actorflow
