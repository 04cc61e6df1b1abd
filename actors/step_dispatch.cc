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
std::vector<net::TensorMessage> run_request(const std::string& device, const std::string& handle, int64_t step_id,
                                            const std::string& reply_to, const std::string& from_task,
                                            const std::vector<std::pair<std::string, Tensor>>& feeds) {
  std::vector<net::TensorMessage> msgs(feeds.size() + 1);
  for (size_t i = 0; i < feeds.size(); ++i) {
    msgs[i].kind = net::FrameKind::kFeed;
    msgs[i].step_id = step_id;
    msgs[i].step.key = feeds[i].first;
    msgs[i].tensor = feeds[i].second;
  }
  net::TensorMessage& m = msgs.back();
  m.kind = net::FrameKind::kRun;
  m.step_id = step_id;
  m.step.device = device;
  m.step.handle = handle;
  m.step.reply_to = reply_to;
  m.step.from_task = from_task;
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

Status ProcessRouter::send_faulted(LinkDecision d, const std::string& addr, std::vector<net::TensorMessage> msgs) {
  std::weak_ptr<ProcessRouter> weak = weak_from_this();
  const bool dup = d.duplicate;
  d.duplicate = false;  // the request once, its feeds twice
  return FaultInjector::global().apply(d, [weak, addr, msgs = std::move(msgs), dup]() -> Status {
    auto r = weak.lock();
    if (!r) return Cancelled("the router is gone");
    return r->send_run_request(addr, msgs, dup);
  });
}

Status ProcessRouter::send_run_request(const std::string& addr, const std::vector<net::TensorMessage>& msgs,
                                       bool duplicate_feeds) {
  std::shared_ptr<net::TensorClient> c = client();
  if (!c) return Unavailable("no data plane in this process");
  AF_RETURN_IF_ERROR(c->send_batch(addr, msgs));
  if (!duplicate_feeds) return Status::OK();
  std::vector<net::TensorMessage> again;
  for (const auto& m : msgs) {
    if (m.kind != net::FrameKind::kFeed) continue;
    net::TensorMessage t;
    t.step_id = m.step_id;
    t.key = m.step.key;
    t.tensor = m.tensor;
    again.push_back(std::move(t));
  }
  return again.empty() ? Status::OK() : c->send_batch(addr, again);
}

Status ProcessRouter::await_dispatched(net::ClientConnection& conn, const std::function<bool()>& done,
                                       std::chrono::microseconds spin, std::chrono::milliseconds wait) {
  std::shared_ptr<net::TensorClient> c = client();
  if (!c) return Unavailable("no data plane in this process");
  return c->await_replies(
      conn, [this](const net::TensorMessage& m) { deliver_reply(m); }, done, spin, wait);
}

void ProcessRouter::deliver_reply(const net::TensorMessage& m) {
  // Only step outcomes (and answers to queries) are accepted on a request's connection.
  if (m.kind == net::FrameKind::kRet || m.kind == net::FrameKind::kDone || m.kind == net::FrameKind::kState) {
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
  channels_.erase(std::string(1, kChannelToken) + std::to_string(channel_id));
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
void ProcessRouter::on_feed(const net::TensorMessage& m) {
  if (!m.status_error.empty()) return;  // could not be received; the step fails by its timeout
  std::lock_guard<std::mutex> l(mu_);
  // Bounded in steps and in bytes (the device actors' early-arrival budget): past either, every
  // feed held is dropped (their steps fail by their deadlines), with a WARNING at most once a second.
  const size_t max_bytes = early_tensor_limits().max_bytes;
  const size_t bytes = m.tensor.bytes();
  if (carried_.size() >= kMaxCarried || carried_bytes_ + bytes > max_bytes) {
    const auto now = std::chrono::steady_clock::now();
    if (now - carried_logged_ >= std::chrono::seconds(1)) {
      carried_logged_ = now;
      AF_LOG(WARNING) << "data plane: feeds of " << carried_.size() << " steps (" << carried_bytes_
                      << " bytes, limits " << kMaxCarried << " steps and " << max_bytes
                      << " bytes) arrived without their run requests; dropped (the last: step " << m.step_id
                      << ", feed " << m.step.key << ")";
    }
    size_t n = 0;
    for (const auto& kc : carried_) n += kc.second.feeds.size();
    count_dropped_feeds("budget", n + (bytes > max_bytes ? 1 : 0));
    carried_.clear();
    carried_bytes_ = 0;
    carried_oldest_ = std::chrono::steady_clock::time_point::max();
  }
  if (bytes > max_bytes) return;
  auto [c, fresh] = carried_.try_emplace(m.step_id);
  if (fresh) {
    c->second.channel = m.reply ? m.reply->id() : 0;
    c->second.first = std::chrono::steady_clock::now();
    carried_oldest_ = std::min(carried_oldest_, c->second.first);
  }
  c->second.feeds.emplace_back(m.step.key, m.tensor);
  carried_bytes_ += bytes;
}

void ProcessRouter::on_run(const net::TensorMessage& m) {
  const std::string& device = m.step.device;
  std::string reply_to = m.step.reply_to;
  device_actor_t a;
  std::vector<std::string> keys;
  std::vector<Tensor> tensors;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (reply_to.empty()) {
      // Reply on the connection the request came on: the device actor gets a token for it.
      if (!m.reply) {
        AF_LOG(WARNING) << "step " << m.step_id << " asks for a reply on a connection that has none; ignored";
        return;
      }
      reply_to = std::string(1, kChannelToken) + std::to_string(m.reply->id());
      if (channels_.emplace(reply_to, m.reply).second && channels_.size() > 2 * channels_pruned_at_) {
        for (auto it = channels_.begin(); it != channels_.end();)
          it = it->second.expired() ? channels_.erase(it) : std::next(it);
        channels_pruned_at_ = std::max<size_t>(16, channels_.size());
      }
    }
    auto it = local_.find(device);
    if (it != local_.end()) a = it->second;
    auto c = carried_.find(m.step_id);
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
    AF_LOG(WARNING) << "step " << m.step_id << " dispatched to unknown device " << device << " here";
    Status s = reply_step(reply_to, m.step_id, device, NotFound("no device '" + device + "' on this task"), {});
    if (!s.ok()) {
      AF_LOG(WARNING) << "cannot report step " << m.step_id << ": " << s;
    }
    return;
  }
  // A self-contained partition whose device is idle runs right here: no thread to wake. Device
  // faults (slow, throw) act inside the device actor: a device one targets runs its steps there.
  if (auto entry = FaultInjector::global().targets_device(device) ? std::nullopt : inline_.find(device, m.step.handle)) {
    if (auto outcome = try_run_inline(*entry, device, m.step_id, keys, tensors)) {
      inline_steps_.fetch_add(1, std::memory_order_relaxed);
      Status s = reply_step(reply_to, m.step_id, device, outcome->first, outcome->second);
      if (!s.ok()) {
        AF_LOG(WARNING) << device << ": cannot report step " << m.step_id << ": " << s;
      }
      return;
    }
  }
  // One message with the step's feeds: the device actor wakes once.
  caf::anon_send(a, steprun_atom::value, m.step.handle, m.step_id, reply_to, std::move(keys), std::move(tensors));
}

Status ProcessRouter::reply_step(const std::string& reply_to, int64_t step_id, const std::string& device,
                                 const Status& status, const std::vector<Tensor>& retvals) {
  // The fetched tensors and the outcome in one write: the master's reader gets them together.
  std::vector<net::TensorMessage> msgs;
  if (status.ok())
    for (size_t i = 0; i < retvals.size(); ++i) {
      if (!retvals[i].is_initialized()) continue;
      net::TensorMessage r;
      r.kind = net::FrameKind::kRet;
      r.step_id = step_id;
      r.step.device = device;
      r.step.number = static_cast<int32_t>(i);
      r.tensor = retvals[i];
      msgs.push_back(std::move(r));
    }
  net::TensorMessage m;
  m.kind = net::FrameKind::kDone;
  m.step_id = step_id;
  m.step.device = device;
  m.step.number = static_cast<int32_t>(status.code());
  if (!status.ok()) {
    m.status_error = status.message().empty() ? std::string("error") : status.message();
    if (const StatusDetail* d = status.any_detail()) m.step.detail = encode_status_detail(*d);
  }
  msgs.push_back(std::move(m));
  Status sent = send_back(reply_to, nullptr, step_id, msgs);
  // After the write: a query answered from now on ("not running") comes behind the outcome.
  std::lock_guard<std::mutex> l(mu_);
  live_runs_.erase({step_id, device});
  return sent;
}

Status ProcessRouter::send_back(const std::string& reply_to, const std::shared_ptr<net::ReplyChannel>& channel_in,
                                int64_t step_id, const std::vector<net::TensorMessage>& msgs) {
  std::shared_ptr<net::TensorClient> client;
  std::shared_ptr<net::ReplyChannel> channel = reply_to.empty() ? channel_in : nullptr;
  {
    std::lock_guard<std::mutex> l(mu_);
    client = client_;
    if (!reply_to.empty() && reply_to[0] == kChannelToken) {
      auto it = channels_.find(reply_to);
      if (it != channels_.end()) channel = it->second.lock();
      if (!channel) return Unavailable("the connection step " + std::to_string(step_id) + " came on is closed");
    }
  }
  if (reply_to.empty() && !channel) return Unavailable("step " + std::to_string(step_id) + " came on no connection");
  if (channel) return channel->send_batch(msgs);
  if (!client) return Unavailable("no data plane in this process");
  {
    // Only to a member's data plane (learned from its authenticated NodeInfo, whose host
    // Membership checked against the cluster file): a request cannot make this task dial an
    // address of the requester's choosing.
    std::lock_guard<std::mutex> l(mu_);
    bool member = reply_to == own_data_addr_;
    for (const auto& kv : data_) member = member || kv.second == reply_to;
    if (!member)
      return PermissionDenied("step " + std::to_string(step_id) + " asks for its outcome at " + reply_to +
                              ", which is no member's data-plane address");
  }
  return client->send_batch(reply_to, msgs);
}

void ProcessRouter::on_query(const net::TensorMessage& m) {
  net::TensorMessage a;
  a.kind = net::FrameKind::kState;
  a.step_id = m.step_id;
  a.step.device = m.step.device;
  {
    std::lock_guard<std::mutex> l(mu_);
    a.step.number = live_runs_.count({m.step_id, m.step.device}) ? 1 : 0;
  }
  Status s = send_back(m.step.reply_to, m.reply, m.step_id, {a});
  if (!s.ok()) {
    AF_LOG(WARNING) << "cannot answer a query about step " << m.step_id << " on " << m.step.device << ": " << s;
  }
}

Status ProcessRouter::query_step(const std::string& device, int64_t step_id, bool on_request_connection) {
  std::string addr, own;
  std::shared_ptr<net::TensorClient> client;
  if (!dispatch_route(device, &addr, &own, &client)) return Unavailable("no data-plane route to " + device);
  net::TensorMessage q;
  q.kind = net::FrameKind::kQuery;
  q.step_id = step_id;
  q.step.device = device;
  q.step.reply_to = on_request_connection ? std::string() : own;
  return client->send(addr, q);
}

// ---- the dispatching side again: outcomes ------------------------------------------------------

void ProcessRouter::on_outcome(const net::TensorMessage& m) {
  master_actor_t master;
  std::shared_ptr<DirectSteps> direct;
  {
    std::lock_guard<std::mutex> l(mu_);
    master = master_;
    direct = direct_;
  }
  if (m.kind == net::FrameKind::kState) {  // only direct steps ask
    if (direct) direct->on_state(m.step_id, m.step.device, m.step.number != 0);
    return;
  }
  const bool ret = m.kind == net::FrameKind::kRet;
  // A direct step's outcome completes its caller's wait here, on this reader thread.
  if (direct && ret && direct->on_ret(m.step_id, m.step.device, m.step.number, m.tensor)) return;
  // The outcome, typed: code, message and detail (decode_step_fields checked that it decodes).
  Status outcome;
  if (!ret && m.step.number != 0)
    outcome = Status(code_from_wire(m.step.number), m.status_error).with_wire_detail(m.step.detail);
  if (direct && !ret && direct->on_done(m.step_id, m.step.device, outcome)) return;
  if (!master) return;
  if (ret)
    caf::anon_send(master, stepret_atom::value, m.step_id, m.step.device, m.step.number, m.tensor);
  else
    caf::anon_send(master, stepdone_atom::value, m.step_id, m.step.device, std::move(outcome));
}

}  // namespace actorflow
