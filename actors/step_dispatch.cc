// ProcessRouter, part 2: steps dispatched over the data plane (see router.h and, for the
// frames, net/wire.h).
#include <algorithm>

#include "actors/direct_step.h"
#include "actors/router.h"
#include "core/logging.h"
#include "core/metrics.h"

namespace actorflow {
namespace {

// The frames of a run request: `feeds` for the partition's _Recvs, then the run itself.
std::vector<net::Frame> run_request(const std::string& device, const std::string& handle, int64_t step_id,
                                    const std::string& reply_to, const std::string& from_task,
                                    const std::vector<std::pair<std::string, Tensor>>& feeds) {
  std::vector<net::Frame> msgs;
  msgs.reserve(feeds.size() + 1);
  for (const auto& [key, t] : feeds) msgs.emplace_back(step_id, net::FeedFrame{key, t});
  msgs.emplace_back(step_id, net::RunFrame{device, handle, reply_to, from_task});
  return msgs;
}

}  // namespace

// ---- the dispatching side ---------------------------------------------------------------------

bool ProcessRouter::dispatch_route(const std::string& device, std::string* addr, std::string* own,
                                   std::shared_ptr<net::TensorClient>* client) {
  std::lock_guard<std::mutex> l(mu_);
  auto da = data_.find(task_of_device(device));
  if (da == data_.end() || !client_ || own_data_addr_.empty()) return false;
  *addr = da->second;
  *own = own_data_addr_;
  *client = client_;
  return true;
}

bool ProcessRouter::can_dispatch(const std::string& device) {
  std::string addr, own;
  std::shared_ptr<net::TensorClient> client;
  return dispatch_route(device, &addr, &own, &client) && client->is_connected(addr, /*probe=*/false);
}

bool ProcessRouter::dispatch_connection_open(const std::string& device) {
  std::string addr, own;
  std::shared_ptr<net::TensorClient> client;
  return dispatch_route(device, &addr, &own, &client) && client->is_connected(addr, /*probe=*/true);
}

Status ProcessRouter::open_dispatch(const std::string& device) {
  std::string addr, own;
  std::shared_ptr<net::TensorClient> client;
  if (!dispatch_route(device, &addr, &own, &client)) return Unavailable("no data-plane route to " + device);
  return client->ensure_connected(addr);
}

// The sending hook for run requests: a run request passes this process's sending-side link
// faults as its feeds would (from `from_task` to the device's task): dropped, delayed (written
// later by the injector's timer thread) or with its feeds sent twice (the request itself once).
Status ProcessRouter::dispatch_step(const std::string& device, const std::string& handle, int64_t step_id,
                                    const std::string& from_task,
                                    const std::vector<std::pair<std::string, Tensor>>& feeds) {
  std::string addr, own;
  std::shared_ptr<net::TensorClient> client;
  if (!dispatch_route(device, &addr, &own, &client)) return Unavailable("no data-plane route to " + device);
  if (auto faulted = send_if_faulted(device, handle, step_id, from_task, feeds, addr, own)) return *faulted;
  Status s = client->send_batch(addr, run_request(device, handle, step_id, own, from_task, feeds));
  if (!s.ok()) return Unavailable("dispatching step " + std::to_string(step_id) + " to " + device + ": " + s.message());
  return Status::OK();
}

// With a link fault on the way, the request goes as dispatch_step() sends it (with this
// process's reply address) and the result is a null connection.
Result<std::shared_ptr<net::ClientConnection>> ProcessRouter::dispatch_step_awaiting(
    const std::string& device, const std::string& handle, int64_t step_id, const std::string& from_task,
    const std::vector<std::pair<std::string, Tensor>>& feeds) {
  std::string addr, own;
  std::shared_ptr<net::TensorClient> client;
  if (!dispatch_route(device, &addr, &own, &client)) return Unavailable("no data-plane route to " + device);
  if (auto faulted = send_if_faulted(device, handle, step_id, from_task, feeds, addr, own)) {
    if (!faulted->ok()) return *faulted;
    return std::shared_ptr<net::ClientConnection>();
  }
  // An empty reply address: the outcome comes back on this connection.
  auto conn = client->send_batch_awaiting(addr, run_request(device, handle, step_id, "", from_task, feeds));
  if (!conn.ok())
    return Unavailable("dispatching step " + std::to_string(step_id) + " to " + device + ": " +
                       conn.status().message());
  return conn;
}

std::optional<Status> ProcessRouter::send_if_faulted(const std::string& device, const std::string& handle,
                                                     int64_t step_id, const std::string& from_task,
                                                     const std::vector<std::pair<std::string, Tensor>>& feeds,
                                                     const std::string& addr, const std::string& own) {
  FaultInjector& inj = FaultInjector::global();
  if (!inj.armed()) return std::nullopt;
  LinkDecision d = inj.on_send(from_task, task_of_device(device));
  if (!d.drop && d.delay_ms <= 0 && !d.duplicate) return std::nullopt;
  return send_faulted(d, addr, run_request(device, handle, step_id, own, from_task, feeds));
}

Status ProcessRouter::send_faulted(LinkDecision d, const std::string& addr, std::vector<net::Frame> msgs) {
  std::weak_ptr<ProcessRouter> weak = weak_from_this();
  const bool dup = d.duplicate;
  d.duplicate = false;  // the request once, its feeds twice
  return FaultInjector::global().apply(d, [weak, addr, msgs = std::move(msgs), dup]() -> Status {
    auto r = weak.lock();
    if (!r) return Cancelled("the router is gone");
    return r->send_run_request(addr, msgs, dup);
  });
}

Status ProcessRouter::send_run_request(const std::string& addr, const std::vector<net::Frame>& msgs,
                                       bool duplicate_feeds) {
  std::shared_ptr<net::TensorClient> c = client();
  if (!c) return Unavailable("no data plane in this process");
  AF_RETURN_IF_ERROR(c->send_batch(addr, msgs));
  if (!duplicate_feeds) return Status::OK();
  std::vector<net::Frame> again;
  for (const auto& m : msgs)
    if (const auto* f = m.as<net::FeedFrame>()) again.emplace_back(m.step_id, f->key, f->tensor);
  return again.empty() ? Status::OK() : c->send_batch(addr, again);
}

Status ProcessRouter::await_dispatched(net::ClientConnection& conn, const std::function<bool()>& done,
                                       std::chrono::microseconds spin, std::chrono::milliseconds wait) {
  std::shared_ptr<net::TensorClient> c = client();
  if (!c) return Unavailable("no data plane in this process");
  return c->await_replies(
      conn, [this](const net::Frame& m) { deliver_reply(m); }, done, spin, wait);
}

void ProcessRouter::deliver_reply(const net::Frame& m) {
  // Only step outcomes (and answers to queries) are accepted on a request's connection; an error
  // frame there stands for a fetched value that could not be received.
  const auto* err = m.as<net::ErrorFrame>();
  if (m.as<net::RetFrame>() || m.as<net::DoneFrame>() || m.as<net::StateFrame>() ||
      (err && err->of == net::FrameKind::kRet)) {
    deliver(m);
    return;
  }
  AF_LOG(WARNING) << "data plane: ignored a message that is not a step outcome on a request connection (step "
                  << m.step_id << ")";
}

void ProcessRouter::abort_remote_step(const node_actor_t& node, const std::string& device, int64_t step_id,
                                      const std::string& why) {
  node_actor_t self_node;
  {
    std::lock_guard<std::mutex> l(mu_);
    self_node = self_node_;
  }
  if (self_node) caf::send_as(self_node, node, abort_atom::value, device, step_id, why);
  else caf::anon_send(node, abort_atom::value, device, step_id, why);
}

// ---- the running side --------------------------------------------------------------------------

void ProcessRouter::count_dropped_feeds(const char* reason, size_t n) {
  static const char* const kReasons[] = {"budget", "expired", "closed"};
  static Counter* counters[3] = {nullptr, nullptr, nullptr};
  static std::once_flag once;
  std::call_once(once, [] {
    for (int i = 0; i < 3; ++i)
      counters[i] = &Metrics::global().counter("actorflow_early_tensors_dropped_total",
                                               "Tensors that arrived before their step and were dropped",
                                               {{"reason", kReasons[i]}});
  });
  for (int i = 0; i < 3; ++i)
    if (std::string(reason) == kReasons[i]) counters[i]->inc(static_cast<int64_t>(n));
}

template <typename Pred>
void ProcessRouter::drop_carried_locked(const Pred& drop, const char* reason, const std::string& why) {
  carried_oldest_ = std::chrono::steady_clock::time_point::max();
  for (auto it = carried_.begin(); it != carried_.end();) {
    if (!drop(it->second)) {
      carried_oldest_ = std::min(carried_oldest_, it->second.first);
      ++it;
      continue;
    }
    size_t bytes = 0;
    for (const auto& kt : it->second.feeds) bytes += kt.second.bytes();
    carried_bytes_ -= bytes;
    count_dropped_feeds(reason, it->second.feeds.size());
    AF_LOG(WARNING) << "data plane: dropped " << it->second.feeds.size() << " feed(s) (" << bytes << " bytes) of step "
                    << it->first << " (the first: " << (it->second.feeds.empty() ? "" : it->second.feeds.front().first)
                    << "): " << why;
    it = carried_.erase(it);
  }
}

void ProcessRouter::connection_closed(uint64_t channel_id) {
  std::lock_guard<std::mutex> l(mu_);
  if (carried_.empty()) return;
  drop_carried_locked([&](const Carried& c) { return c.channel == channel_id; }, "closed",
                      "the connection they came on closed before their run request");
}

void ProcessRouter::drop_carried(int64_t step_id) {
  std::lock_guard<std::mutex> l(mu_);
  auto c = carried_.find(step_id);
  if (c == carried_.end()) return;
  for (const auto& kt : c->second.feeds) carried_bytes_ -= kt.second.bytes();
  carried_.erase(c);
}

void ProcessRouter::expire_carried() {
  const auto now = std::chrono::steady_clock::now();
  const auto ttl = early_tensor_limits().ttl;
  std::lock_guard<std::mutex> l(mu_);
  if (carried_.empty() || now - carried_oldest_ < ttl) return;
  drop_carried_locked([&](const Carried& c) { return now - c.first >= ttl; }, "expired",
                      "its run request did not come within " + std::to_string(ttl.count()) +
                          " ms (ACTORFLOW_EARLY_TENSOR_TTL_MS)");
}

// A feed travels with the run request that follows it in the same write.
void ProcessRouter::on_feed(int64_t step_id, const net::FeedFrame& f, const std::shared_ptr<net::ReplyChannel>& reply) {
  std::lock_guard<std::mutex> l(mu_);
  // Bounded in steps and in bytes (the device actors' early-arrival budget): past either, every
  // feed held is dropped (their steps fail by their deadlines), with a WARNING at most once a second.
  const size_t max_bytes = early_tensor_limits().max_bytes;
  const size_t bytes = f.tensor.bytes();
  if (carried_.size() >= kMaxCarried || carried_bytes_ + bytes > max_bytes) {
    const auto now = std::chrono::steady_clock::now();
    if (now - carried_logged_ >= std::chrono::seconds(1)) {
      carried_logged_ = now;
      AF_LOG(WARNING) << "data plane: feeds of " << carried_.size() << " steps (" << carried_bytes_
                      << " bytes, limits " << kMaxCarried << " steps and " << max_bytes
                      << " bytes) arrived without their run requests; dropped (the last: step " << step_id
                      << ", feed " << f.key << ")";
    }
    size_t n = 0;
    for (const auto& kc : carried_) n += kc.second.feeds.size();
    count_dropped_feeds("budget", n + (bytes > max_bytes ? 1 : 0));
    carried_.clear();
    carried_bytes_ = 0;
    carried_oldest_ = std::chrono::steady_clock::time_point::max();
  }
  if (bytes > max_bytes) return;
  auto [c, fresh] = carried_.try_emplace(step_id);
  if (fresh) {
    c->second.channel = reply ? reply->id() : 0;
    c->second.first = std::chrono::steady_clock::now();
    carried_oldest_ = std::min(carried_oldest_, c->second.first);
  }
  c->second.feeds.emplace_back(f.key, f.tensor);
  carried_bytes_ += bytes;
}

void ProcessRouter::on_run(int64_t step_id, const net::RunFrame& r, const std::shared_ptr<net::ReplyChannel>& reply) {
  const std::string& device = r.device;
  if (r.reply_to.empty() && !reply) {
    AF_LOG(WARNING) << "step " << step_id << " asks for a reply on a connection that has none; ignored";
    return;
  }
  const StepReply back = reply_for(r.reply_to, reply);
  device_actor_t a;
  std::vector<std::string> keys;
  std::vector<Tensor> tensors;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = local_.find(device);
    if (it != local_.end()) a = it->second;
    auto c = carried_.find(step_id);
    if (c != carried_.end()) {
      for (auto& [k, t] : c->second.feeds) {
        carried_bytes_ -= t.bytes();
        keys.push_back(std::move(k));
        tensors.push_back(std::move(t));
      }
      carried_.erase(c);
    }
  }
  if (!a) {
    AF_LOG(WARNING) << "step " << step_id << " dispatched to unknown device " << device << " here";
    Status s = reply_step(back, step_id, device, NotFound("no device '" + device + "' on this task"), {});
    if (!s.ok()) {
      AF_LOG(WARNING) << "cannot report step " << step_id << ": " << s;
    }
    return;
  }
  // A self-contained partition whose device is idle runs right here: no thread to wake. Device
  // faults (slow, throw) act inside the device actor: a device one targets runs its steps there.
  if (auto entry = FaultInjector::global().targets_device(device) ? std::nullopt : inline_.find(device, r.handle)) {
    if (auto outcome = try_run_inline(*entry, device, step_id, keys, tensors)) {
      inline_steps_.fetch_add(1, std::memory_order_relaxed);
      Status s = reply_step(back, step_id, device, outcome->first, outcome->second);
      if (!s.ok()) {
        AF_LOG(WARNING) << device << ": cannot report step " << step_id << ": " << s;
      }
      return;
    }
  }
  // One message with the step's feeds: the device actor wakes once.
  caf::anon_send(a, steprun_atom::value, r.handle, step_id, back, std::move(keys), std::move(tensors));
}

Status ProcessRouter::reply_step(const StepReply& reply, int64_t step_id, const std::string& device,
                                 const Status& status, const std::vector<Tensor>& retvals) {
  // The fetched tensors and the outcome in one write: the master's reader gets them together.
  std::vector<net::Frame> msgs;
  if (status.ok())
    for (size_t i = 0; i < retvals.size(); ++i)
      if (retvals[i].is_initialized())
        msgs.emplace_back(step_id, net::RetFrame{device, static_cast<int32_t>(i), retvals[i]});
  msgs.emplace_back(step_id, net::DoneFrame::of(device, status));
  Status sent = send_back(reply, step_id, msgs);
  // After the write: a query answered from now on ("not running") comes behind the outcome.
  std::lock_guard<std::mutex> l(mu_);
  live_runs_.erase({step_id, device});
  return sent;
}

StepReply ProcessRouter::reply_for(const std::string& reply_to, const std::shared_ptr<net::ReplyChannel>& channel) {
  StepReply r;
  if (reply_to.empty()) r.channel = channel;
  else r.address = reply_to;
  return r;
}

Status ProcessRouter::send_back(const StepReply& reply, int64_t step_id, const std::vector<net::Frame>& msgs) {
  if (reply.address.empty()) {
    std::shared_ptr<net::ReplyChannel> channel = reply.channel.lock();
    if (!channel) return Unavailable("the connection step " + std::to_string(step_id) + " came on is closed");
    return channel->send_batch(msgs);
  }
  std::shared_ptr<net::TensorClient> client;
  {
    // Only to a member's data plane (learned from its authenticated NodeInfo, whose host
    // Membership checked against the cluster file): a request cannot make this task dial an
    // address of the requester's choosing.
    std::lock_guard<std::mutex> l(mu_);
    client = client_;
    bool member = reply.address == own_data_addr_;
    for (const auto& kv : data_) member = member || kv.second == reply.address;
    if (!member)
      return PermissionDenied("step " + std::to_string(step_id) + " asks for its outcome at " + reply.address +
                              ", which is no member's data-plane address");
  }
  if (!client) return Unavailable("no data plane in this process");
  return client->send_batch(reply.address, msgs);
}

void ProcessRouter::on_query(int64_t step_id, const net::QueryFrame& q, const std::shared_ptr<net::ReplyChannel>& reply) {
  bool running = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    running = live_runs_.count({step_id, q.device}) != 0;
  }
  if (q.reply_to.empty() && !reply) return;  // asks for an answer on a connection it did not come on
  Status s = send_back(reply_for(q.reply_to, reply), step_id, {net::Frame(step_id, net::StateFrame{q.device, running})});
  if (!s.ok()) {
    AF_LOG(WARNING) << "cannot answer a query about step " << step_id << " on " << q.device << ": " << s;
  }
}

Status ProcessRouter::query_step(const std::string& device, int64_t step_id, bool on_request_connection) {
  std::string addr, own;
  std::shared_ptr<net::TensorClient> client;
  if (!dispatch_route(device, &addr, &own, &client)) return Unavailable("no data-plane route to " + device);
  return client->send(addr, net::Frame(step_id, net::QueryFrame{device, on_request_connection ? std::string() : own}));
}

// ---- the dispatching side again: outcomes ------------------------------------------------------

void ProcessRouter::outcome_routes(master_actor_t* master, std::shared_ptr<DirectSteps>* direct) {
  std::lock_guard<std::mutex> l(mu_);
  *master = master_;
  *direct = direct_;
}

void ProcessRouter::on_outcome(int64_t step_id, const net::StateFrame& st) {
  master_actor_t master;
  std::shared_ptr<DirectSteps> direct;
  outcome_routes(&master, &direct);
  if (direct) direct->on_state(step_id, st.device, st.running);  // only direct steps ask
}

void ProcessRouter::on_outcome(int64_t step_id, const net::RetFrame& r) {
  master_actor_t master;
  std::shared_ptr<DirectSteps> direct;
  outcome_routes(&master, &direct);
  // A direct step's outcome completes its caller's wait here, on this reader thread.
  if (direct && direct->on_ret(step_id, r.device, r.index, r.tensor)) return;
  if (master) caf::anon_send(master, stepret_atom::value, step_id, r.device, r.index, r.tensor);
}

void ProcessRouter::on_outcome(int64_t step_id, const net::DoneFrame& d) {
  master_actor_t master;
  std::shared_ptr<DirectSteps> direct;
  outcome_routes(&master, &direct);
  // The outcome, typed: code, message and detail (decode_step_fields checked that it decodes).
  Status outcome = d.status();
  if (direct && direct->on_done(step_id, d.device, outcome)) return;
  if (master) caf::anon_send(master, stepdone_atom::value, step_id, d.device, std::move(outcome));
}

}  // namespace actorflow
