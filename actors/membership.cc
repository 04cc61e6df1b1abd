#include "core/metrics.h"
#include "actors/membership.h"

#include "actors/control_plane.h"
#include "net/socket.h"

#include <caf/io/all.hpp>

#include <thread>

#include "actors/auth.h"
#include "actors/faults.h"
#include "core/logging.h"
#include "core/waits.h"

namespace actorflow {
namespace {

using tick_atom = caf::atom_constant<caf::atom("tick")>;

// Peers joining or leaving this task's membership (each a new epoch).
Counter& membership_events() {
  static Counter& c = Metrics::global().counter(
      "actorflow_membership_events_total", "Peers that joined or left this task's membership (epoch changes).");
  return c;
}

struct WatcherState {
  std::string self_task;
  std::string task;
  node_actor_t node;
  std::shared_ptr<MembershipGuard> membership;
  std::chrono::milliseconds interval{500};
  std::chrono::milliseconds timeout{3000};
  std::chrono::steady_clock::time_point last_answer;
  bool reported = false;
  static constexpr const char* name = "peer_watcher";
};
using Watcher = caf::stateful_actor<WatcherState>;

// Watches one peer: a monitor for closed connections, heartbeats for silent peers.
caf::behavior peer_watcher(Watcher* self, std::string self_task, std::string task, node_actor_t node,
                           std::shared_ptr<MembershipGuard> m,
                           std::chrono::milliseconds interval, std::chrono::milliseconds timeout) {
  auto& st = self->state;
  st.self_task = std::move(self_task);
  st.task = task;
  st.node = node;
  st.membership = m;
  st.interval = interval;
  st.timeout = timeout;
  st.last_answer = std::chrono::steady_clock::now();
  self->monitor(node);
  auto report = [self](const std::string& reason) {
    if (self->state.reported) return;
    self->state.reported = true;
    // The watcher may still be running a handler while its Membership is destroyed (the exit
    // the destructor sends is asynchronous): the guard says whether it is still there.
    {
      std::lock_guard<std::mutex> l(self->state.membership->mu);
      if (self->state.membership->membership)
        self->state.membership->membership->mark_down(self->state.task, reason);
    }
    self->quit();
  };
  self->set_down_handler([=](caf::down_msg& dm) {
    if (dm.source == self->state.node.address())
      report("connection closed (" + caf::to_string(dm.reason) + ")");
  });
  self->send(self, tick_atom::value);
  return {
      [=](tick_atom) {
        auto& s = self->state;
        auto now = std::chrono::steady_clock::now();
        if (now - s.last_answer > s.timeout) {
          report("no heartbeat answer for " + std::to_string(s.timeout.count()) + " ms");
          return;
        }
        // Fault injection: a dropped link or a partition swallows the heartbeat.
        if (!FaultInjector::global().on_send(s.self_task, s.task).drop) {
          static Counter& sent = Metrics::global().counter(
              "actorflow_heartbeats_sent_total", "Heartbeats (pings) this task's peer watchers sent, over all peers.");
          sent.inc();
          static Histogram& rtt = Metrics::global().histogram(
              "actorflow_heartbeat_rtt_seconds", "Round trip of the heartbeats this task sends its peers, in seconds.");
          self->request(s.node, s.timeout, ping_atom::value).then(
              [=](const std::string&) {
                const auto answered = std::chrono::steady_clock::now();
                rtt.observe(std::chrono::duration<double>(answered - now).count());
                self->state.last_answer = answered;
              },
              [=](caf::error&) { /* judged by last_answer on the next tick */ });
        }
        self->delayed_send(self, s.interval, tick_atom::value);
      },
  };
}

}  // namespace

Membership::Membership(caf::actor_system& sys, MembershipConfig cfg)
    : sys_(sys), cfg_(std::move(cfg)), guard_(std::make_shared<MembershipGuard>()) {
  guard_->membership = this;
}

Membership::~Membership() {
  {
    std::lock_guard<std::mutex> g(guard_->mu);  // waits for a watcher inside mark_down
    guard_->membership = nullptr;
  }
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [t, w] : watchers_) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  watchers_.clear();
}

uint64_t Membership::epoch() const {
  std::lock_guard<std::mutex> l(mu_);
  return epoch_;
}

std::vector<PeerInfo> Membership::peers() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<PeerInfo> out;
  for (const auto& [k, v] : up_) out.push_back(v);
  return out;
}

void Membership::add_listener(caf::actor a) {
  std::lock_guard<std::mutex> l(mu_);
  listeners_.push_back(std::move(a));
}

void Membership::add_down_callback(std::function<void(const std::string& task)> f) {
  std::lock_guard<std::mutex> l(mu_);
  down_callbacks_.push_back(std::move(f));
}

void Membership::mark_down(const std::string& task, const std::string& reason) {
  std::vector<caf::actor> listeners;
  std::vector<std::function<void(const std::string&)>> callbacks;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!up_.erase(task)) return;
    auto w = watchers_.find(task);
    if (w != watchers_.end()) {
      caf::anon_send_exit(w->second, caf::exit_reason::user_shutdown);
      watchers_.erase(w);
    }
    ++epoch_;
    membership_events().inc();
    listeners = listeners_;
    callbacks = down_callbacks_;
  }
  // A peer that shut down on purpose (its job finished, Ctrl-C) is news, not a warning.
  if (reason.find("user_shutdown") != std::string::npos || reason.find("exit_reason(normal)") != std::string::npos)
    AF_LOG(INFO) << "task " << task << " is down: " << reason;
  else
    AF_LOG(WARNING) << "task " << task << " is down: " << reason;
  for (auto& f : callbacks) f(task);
  for (auto& a : listeners) caf::anon_send(a, down_atom::value, task, reason);
}

namespace {
// The host part of "host:port" ("[v6]:port" -> "v6"), with localhost read as 127.0.0.1.
std::string host_of(const std::string& addr) {
  auto hp = net::parse_host_port(addr);
  std::string h = hp.ok() ? hp->host : addr;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h == "localhost") h = "127.0.0.1";
  return h;
}
}  // namespace

Result<std::shared_ptr<const net::TlsContext>> cluster_tls(const ClusterSpec& cluster, const std::string& identity) {
  if (!cluster.tls()) return std::shared_ptr<const net::TlsContext>();
  auto t = net::TlsContext::load(net::cluster_tls_files(cluster.tls_dir(), identity));
  if (!t.ok())
    return t.status().with_prefix("TLS (make the files with `actorflow certs --cluster " + cluster.source() +
                                  " --out " + cluster.tls_dir() + "`)");
  return *t;
}

Result<MembershipConfig> tool_membership_config(const ClusterSpec& cluster, const std::string& tool_job) {
  if (tool_job.size() < 2 || tool_job[0] != '_')
    return InvalidArgument("a tool's job name must start with '_' (got '" + tool_job + "')");
  MembershipConfig mc;
  mc.self_task = "/job:" + tool_job + "/replica:0/task:0";
  mc.fingerprint = cluster.fingerprint();
  mc.secret = cluster.secret();
  // The operator's job (fault plans) presents the "operator" certificate, other tools "client".
  AF_ASSIGN_OR_RETURN(mc.tls, cluster_tls(cluster, tool_job == "_chaos" ? "operator" : "client"));
  return mc;
}

bool same_host(const std::string& a, const std::string& b) { return host_of(a) == host_of(b); }

Result<PeerInfo> Membership::connect_once(const std::string& task, const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("malformed address '" + address + "' of task " + task);
  if (FaultInjector::global().on_send(cfg_.self_task, task).drop)
    return Unavailable("cannot reach task " + task + " at " + address + ": link dropped by fault injection");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const uint16_t port = static_cast<uint16_t>(std::stoi(address.substr(colon + 1)));
  // A handshake unanswered for peer_timeout means the peer is not reachable now (a partition or
  // a stopped process): fail this attempt and let the caller retry.
  const auto t = std::max<std::chrono::milliseconds>(cfg_.peer_timeout, std::chrono::milliseconds(1000));
  net::HandshakeConfig hs;
  hs.fingerprint = cfg_.fingerprint;
  hs.secret = cfg_.secret;
  hs.task_name = cfg_.self_task;
  hs.timeout = t;
  hs.tls = cfg_.tls;
  auto conn = connect_control_plane(sys_, host, port, hs, t, task);
  if (!conn.ok()) {
    if (conn.status().code() == Code::kUnauthenticated || conn.status().code() == Code::kFailedPrecondition)
      return conn.status().with_prefix("task " + task);
    return Unavailable("cannot reach task " + task + " at " + address + ": " + conn.status().message());
  }
  // What a task publishes on its control-plane port is its node actor.
  const node_actor_t node = caf::actor_cast<node_actor_t>(*conn);
  ScopedActor self{sys_};
  Result<PeerInfo> out = Internal("handshake with " + task + " got no answer");
  std::string server_nonce;
  bool hello_ok = false;
  self->request(node, t, hello_atom::value, kProtocolVersion, cfg_.fingerprint, cfg_.self_task)
      .receive(
          [&](std::string& nonce) {
            server_nonce = std::move(nonce);
            hello_ok = true;
          },
          [&](caf::error& e) { out = from_caf_error(e, "task " + task + " at " + address); });
  if (!hello_ok) return out;
  const std::string my_nonce = random_nonce();
  self->request(node, t, auth_atom::value,
                auth_proof(cfg_.secret, "client", server_nonce, cfg_.fingerprint, kProtocolVersion), my_nonce)
      .receive(
          [&](NodeInfo& info, std::string& server_proof) {
            if (!proofs_equal(server_proof,
                              auth_proof(cfg_.secret, "node", my_nonce, cfg_.fingerprint, kProtocolVersion))) {
              AF_LOG(WARNING) << "task " << task << " at " << address << " failed to prove the cluster secret: dropped";
              out = Unauthenticated("task " + task + " at " + address + " does not hold the cluster secret");
              return;
            }
            if (info.task != task) {
              out = FailedPrecondition("address " + address + " is served by task " + info.task + ", expected " + task);
              return;
            }
            // Replies are dialled back only to a member's cluster address: the data plane
            // must listen on the host the cluster file names for the task.
            if (!info.data_addr.empty() && !same_host(info.data_addr, address)) {
              out = FailedPrecondition("task " + task + " at " + address + " advertises its data plane at " +
                                       info.data_addr + ", not on its cluster address's host");
              return;
            }
            PeerInfo p;
            p.task = task;
            p.address = address;
            p.node = node;
            p.devices = std::move(info.devices);
            // What a peer says about handles is not trusted: its devices are reached through the
            // node actor this handshake authenticated, never through a handle it hands out (a
            // non-null `actor` would make the master treat a remote device as one of this process).
            for (auto& d : p.devices) {
              d.actor = device_actor_t();
              d.node = node;
            }
            p.data_addr = std::move(info.data_addr);
            p.serves_for = std::move(info.serves_for);
            out = std::move(p);
          },
          [&](caf::error& e) { out = from_caf_error(e, "task " + task + " at " + address); });
  return out;
}

void Membership::cancel(const Status& why) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (cancelled_.ok()) cancelled_ = why.ok() ? Cancelled("membership cancelled") : why;
  }
  cancel_cv_.notify_all();
}

Result<PeerInfo> Membership::ensure(const std::string& task, const std::string& address,
                                    std::chrono::milliseconds timeout, bool quiet) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = up_.find(task);
    if (it != up_.end()) return it->second;
    if (!cancelled_.ok()) return cancelled_;
  }
  if (timeout.count() <= 0) timeout = cfg_.connect_timeout;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::shared_ptr<std::mutex> connecting;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto& m = connecting_[task];
    if (!m) m = std::make_shared<std::mutex>();
    connecting = m;
  }
  std::lock_guard<std::mutex> one_handshake(*connecting);
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = up_.find(task);
    if (it != up_.end()) return it->second;  // connected while we waited for the handshake lock
  }
  std::chrono::milliseconds backoff(100);
  int attempt = 0;
  Status last;
  WaitHandle wait("connect", "connecting to " + task + " at " + address, task);  // core/waits.h
  while (true) {
    ++attempt;
    if (attempt > 1)
      wait.update("connecting to " + task + " at " + address + " (attempt " + std::to_string(attempt) +
                      "; last error: " + last.message() + ")",
                  task);
    auto p = connect_once(task, address);
    if (p.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      auto it = up_.find(task);
      if (it != up_.end()) return it->second;  // another thread won the race
      up_[task] = *p;
      watchers_[task] = sys_.spawn(peer_watcher, cfg_.self_task, task, p->node, guard_, cfg_.heartbeat_interval, cfg_.peer_timeout);
      ++epoch_;
      membership_events().inc();
      if (attempt > 1 && !quiet) AF_LOG(INFO) << "connected to task " << task << " at " << address << " after " << attempt << " attempts";
      return *p;
    }
    last = p.status();
    // Authentication and configuration mismatches do not heal by waiting.
    if (last.code() == Code::kUnauthenticated || last.code() == Code::kFailedPrecondition ||
        last.code() == Code::kInvalidArgument)
      return last;
    if (std::chrono::steady_clock::now() + backoff > deadline) break;
    if (!quiet && (attempt == 1 || attempt % 10 == 0))
      AF_LOG(INFO) << "waiting for task " << task << " at " << address << " (attempt " << attempt << "): " << last.message();
    {
      // Retry pacing while a peer starts (not synchronisation); cancel() ends it at once.
      std::unique_lock<std::mutex> l(mu_);
      if (cancel_cv_.wait_for(l, backoff, [&] { return !cancelled_.ok(); })) return cancelled_;
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  return Unavailable("task " + task + " at " + address + " never answered within " + std::to_string(timeout.count()) +
                     " ms (" + std::to_string(attempt) + " attempts; last error: " + last.message() + ")");
}

}  // namespace actorflow
