// ProcessRouter, part 1: set-up, tensor routing and the data plane's receiving hook
// (step dispatch is in step_dispatch.cc). See router.h.
#include "actors/router.h"

#include <atomic>
#include <type_traits>
#include <variant>

#include "actors/direct_step.h"
#include "core/logging.h"
#include "core/metrics.h"
#include "core/step_trace.h"

namespace actorflow {

ProcessRouter::ProcessRouter(std::string own_task, uint64_t own_incarnation)
    : own_task_(std::move(own_task)), own_incarnation_(own_incarnation) {}

void ProcessRouter::add(const std::string& device, device_actor_t a) {
  std::lock_guard<std::mutex> l(mu_);
  local_[device] = std::move(a);
}

void ProcessRouter::set_self_node(node_actor_t node) {
  std::lock_guard<std::mutex> l(mu_);
  self_node_ = std::move(node);
}

void ProcessRouter::set_remote(const std::string& task_prefix, node_actor_t node, const std::string& data_addr,
                               uint64_t incarnation) {
  std::lock_guard<std::mutex> l(mu_);
  remote_[task_prefix] = std::move(node);
  if (incarnation != 0) {
    Incarnations& inc = incarnations_[task_prefix];
    if (inc.current != 0 && inc.current != incarnation) {
      // The task restarted: what its previous incarnation sent is stale from now on.
      inc.retired.push_back(inc.current);
      any_retired_.store(true, std::memory_order_release);
      if (inc.retired.size() > kMaxRetiredIncarnations) inc.retired.erase(inc.retired.begin());
    }
    inc.current = incarnation;
  }
  if (!data_addr.empty()) {
    data_[task_prefix] = data_addr;
    // Under TLS the data plane's server there must present this task's certificate.
    if (client_) client_->expect_task(data_addr, task_prefix);
  }
}

void ProcessRouter::set_data_client(std::shared_ptr<net::TensorClient> client, const std::string& own_data_addr) {
  std::lock_guard<std::mutex> l(mu_);
  client_ = std::move(client);
  own_data_addr_ = own_data_addr;
  if (client_)
    for (const auto& [task, addr] : data_) client_->expect_task(addr, task);
}

void ProcessRouter::set_master(master_actor_t master, std::shared_ptr<DirectSteps> direct) {
  std::lock_guard<std::mutex> l(mu_);
  master_ = std::move(master);
  direct_ = std::move(direct);
}

void ProcessRouter::clear() {
  std::lock_guard<std::mutex> l(mu_);
  local_.clear();
  remote_.clear();
  data_.clear();
  client_ = nullptr;
  self_node_ = node_actor_t();
  master_ = master_actor_t();
  direct_ = nullptr;
}

std::shared_ptr<net::TensorClient> ProcessRouter::client() {
  std::lock_guard<std::mutex> l(mu_);
  return client_;
}

// ---- tensor routing -------------------------------------------------------------------------

Status ProcessRouter::route(int64_t step_id, const std::string& key, const Tensor& t) {
  auto parsed = RendezvousKey::parse(key);
  if (!parsed.ok()) return parsed.status().with_prefix("cannot route a tensor of step " + std::to_string(step_id));
  return route_key(step_id, *parsed, t);
}

Status ProcessRouter::route_key(int64_t step_id, const RendezvousKey& key, const Tensor& t) {
  // A partition planned for another incarnation of this task (the master had not yet learnt
  // that it restarted) must not send: its peers expect the current incarnation's keys.
  if (key.src_incarnation() != own_incarnation_ && key.src_task() == own_task_) {
    Status s = key.check_incarnation(own_incarnation_);
    if (!s.ok()) return s;
  }
  // The sending hook: a tensor for another task passes this process's sending-side link faults
  // (faults add()ed here; a plan's act where they are received).
  FaultInjector& inj = FaultInjector::global();
  if (inj.armed()) {
    const std::string& src = key.src_task();
    const std::string& dst = key.dst_task();
    if (src != dst) {
      std::weak_ptr<ProcessRouter> weak = weak_from_this();
      return inj.apply(inj.on_send(src, dst), [weak, step_id, key, t] {
        auto r = weak.lock();
        return r ? r->route_now(step_id, key, t) : Cancelled("the router is gone");
      });
    }
  }
  return route_now(step_id, key, t);
}

Status ProcessRouter::route_now(int64_t step_id, const RendezvousKey& key, const Tensor& t) {
  auto trace = step_trace(step_id);
  if (!trace) return route_send(step_id, key, t, nullptr);
  // A traced step: one "send" event on the sending device, from the call to the tensor's
  // hand-off (by reference here, or the whole frame in the socket).
  const int64_t start = trace_clock_ns();
  const char* via = "";
  Status s = route_send(step_id, key, t, &via);
  TraceEvent e;
  e.track = key.src_device();
  e.task = key.src_task();
  e.name = key.wire();
  e.kind = "send";
  e.op = via;
  e.start_ns = start;
  e.end_ns = trace_clock_ns();
  e.nums = {{"bytes", static_cast<int64_t>(t.bytes())}};
  e.texts = {{"to", key.dst_device()}};
  if (!s.ok()) e.texts.emplace_back("error", s.message());
  trace->add(std::move(e));
  return s;
}

Status ProcessRouter::route_send(int64_t step_id, const RendezvousKey& key, const Tensor& t, const char** via_out) {
  const std::string& dst = key.dst_device();
  device_actor_t a;           // a device of this process, or
  node_actor_t remote, via;   // the node actor of the device's task, and ours to send as
  std::string data_addr;
  std::shared_ptr<net::TensorClient> client;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = local_.find(dst);
    if (it != local_.end()) {
      a = it->second;
    } else {
      const std::string& task = key.dst_task();
      auto r = remote_.find(task);
      if (r == remote_.end() || !self_node_)
        return Unavailable("no route to device '" + dst + "' for tensor " + key.wire());
      remote = r->second;
      via = self_node_;
      auto da = data_.find(task);
      if (da != data_.end() && client_) {
        data_addr = da->second;
        client = client_;
      }
    }
  }
  if (client) {
    // The data plane: a header and one raw block per tensor, no per-element work.
    if (via_out) *via_out = "data plane";
    Status s = client->send(data_addr, net::Frame(step_id, key.wire(), t));
    if (!s.ok()) return Unavailable("sending tensor to " + dst + ": " + s.message());
    return Status::OK();
  }
  if (via) {
    // No data-plane route (a peer that advertised none): CAF carries it as one byte block.
    static std::atomic<int> warned{0};
    if (warned.fetch_add(1) == 0) {
      AF_LOG(WARNING) << "tensor " << key.wire() << " to " << dst << " goes through CAF: no data-plane route";
    }
    if (via_out) *via_out = "control plane";
    caf::send_as(via, remote, tensor_atom::value, step_id, key.wire(), t);
  } else {
    if (via_out) *via_out = "in process";
    caf::anon_send(a, tensor_atom::value, step_id, key.wire(), t);
  }
  return Status::OK();
}

void ProcessRouter::deliver_local(int64_t step_id, const RendezvousKey& key, const Tensor& t) {
  const std::string& dst = key.dst_device();
  device_actor_t a;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = local_.find(dst);
    if (it == local_.end()) {
      int64_t held = 0;
      if (unknown_device_log_.allow(&held))
        AF_LOG(WARNING) << "dropped tensor " << key.wire() << " from the data plane: no device " << dst << " here"
                        << net::suppressed_note(held);
      return;
    }
    a = it->second;
  }
  if (auto trace = step_trace(step_id)) {
    // A traced step: the tensor is in this process (read whole by the data plane's reader).
    TraceEvent e;
    e.track = "data plane";
    e.task = key.dst_task();
    e.name = key.wire();
    e.kind = "arrive";
    e.op = "data plane";
    e.start_ns = e.end_ns = trace_clock_ns();
    e.nums = {{"bytes", static_cast<int64_t>(t.bytes())}};
    trace->add(std::move(e));
  }
  caf::anon_send(a, tensor_atom::value, step_id, key.wire(), t);
}

// ---- the data plane's receiving hook ------------------------------------------------------------

void ProcessRouter::deliver(const net::Frame& m) {
  // Every frame that enters this process over the data plane passes this task's link faults
  // here, whatever step path sent it. A run request's feeds travel with it and share its fate
  // (they are judged with the run frame that follows them in the same write).
  FaultInjector& inj = FaultInjector::global();
  expire_carried();
  // A query is answered at once, whatever the links: it asks about a run request that went
  // before it on the same connection, which the faults below judged already.
  if (const auto* q = m.as<net::QueryFrame>()) {
    on_query(m.step_id, *q, m.reply);
    return;
  }
  const auto* run = m.as<net::RunFrame>();
  auto note_run = [&] {
    if (!run) return;
    std::lock_guard<std::mutex> l(mu_);
    if (live_runs_.size() >= kMaxLiveRuns) {
      AF_LOG(WARNING) << "data plane: " << live_runs_.size()
                      << " dispatched steps never reported an outcome; forgetting them (queries now say 'not running')";
      live_runs_.clear();
    }
    live_runs_.emplace(m.step_id, run->device);
  };
  // The frame's rendezvous key, parsed once for the whole way in (tensor, error and feed frames;
  // not an error frame standing for a ret that could not be received: it names a device).
  RendezvousKey key;
  const auto* err = m.as<net::ErrorFrame>();
  const bool keyed = m.as<net::TensorFrame>() || m.as<net::FeedFrame>() || (err && err->of != net::FrameKind::kRet);
  if (keyed) {
    auto k = frame_key(m);
    if (!k) return;
    key = std::move(*k);
  }
  const bool feed = m.as<net::FeedFrame>() || (err && err->of == net::FrameKind::kFeed);
  if (!inj.armed() || feed) {
    note_run();
    deliver_now(m, key);
    return;
  }
  std::string src;
  if (keyed) src = key.src_task();
  else if (run) src = run->from_task;
  else src = task_of_device(net::frame_name(m.body));  // an outcome (or a lost ret) comes from the device's task
  // Tensors and fetched values may arrive twice; a request has one run, a step one outcome.
  const bool repeatable = m.as<net::TensorFrame>() || m.as<net::RetFrame>();
  LinkDecision d = inj.on_receive(src, own_task_);
  if (d.drop) {
    if (run) drop_carried(m.step_id);
    return;
  }
  note_run();  // a delayed run request is known (running) from now on
  if (d.delay_ms > 0) {
    std::weak_ptr<ProcessRouter> weak = weak_from_this();
    const int copies = d.duplicate && repeatable ? 2 : 1;
    inj.run_after(std::chrono::milliseconds(d.delay_ms), [weak, m, key, copies] {
      if (auto r = weak.lock())
        for (int i = 0; i < copies; ++i) r->deliver_now(m, key);
    });
    return;
  }
  if (d.duplicate && repeatable) deliver_now(m, key);
  deliver_now(m, key);
}

std::optional<RendezvousKey> ProcessRouter::frame_key(const net::Frame& m) {
  static Counter& malformed = Metrics::global().counter(
      "actorflow_bad_rendezvous_keys_total",
      "Data-plane frames dropped for their rendezvous key: malformed, or of a stale incarnation of the sender",
      {{"reason", "malformed"}});
  static Counter& stale = Metrics::global().counter(
      "actorflow_bad_rendezvous_keys_total",
      "Data-plane frames dropped for their rendezvous key: malformed, or of a stale incarnation of the sender",
      {{"reason", "stale"}});
  if (!m.as<net::TensorFrame>() && !m.as<net::FeedFrame>() && !m.as<net::ErrorFrame>()) return std::nullopt;
  auto k = RendezvousKey::parse(net::frame_name(m.body));
  Status why = k.ok() ? Status::OK() : k.status();
  if (k.ok() && k->src_incarnation() != 0 && any_retired_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = incarnations_.find(k->src_task());
    if (it != incarnations_.end())
      for (uint64_t old : it->second.retired)
        if (old == k->src_incarnation()) why = k->check_incarnation(it->second.current);
  }
  if (why.ok()) return std::move(*k);
  (k.ok() ? stale : malformed).inc();
  int64_t held = 0;
  bool log = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    log = bad_key_log_.allow(&held);
  }
  if (log)
    AF_LOG(WARNING) << "data plane: dropped a " << net::frame_kind_name(m.kind()) << " frame of step " << m.step_id
                    << " from " << (m.reply ? m.reply->peer() : std::string("a peer")) << ": " << why.message()
                    << net::suppressed_note(held);
  return std::nullopt;
}

void ProcessRouter::deliver_now(const net::Frame& m, const RendezvousKey& key) {
  std::visit(
      [&](const auto& f) {
        using T = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<T, net::TensorFrame>) deliver_local(m.step_id, key, f.tensor);
        else if constexpr (std::is_same_v<T, net::ErrorFrame>) on_error(m.step_id, key, f);
        else if constexpr (std::is_same_v<T, net::FeedFrame>) on_feed(m.step_id, f, m.reply);
        else if constexpr (std::is_same_v<T, net::RunFrame>) on_run(m.step_id, f, m.reply);
        else if constexpr (std::is_same_v<T, net::QueryFrame>) on_query(m.step_id, f, m.reply);
        else on_outcome(m.step_id, f);  // ret, done, state
      },
      m.body);
}

void ProcessRouter::on_error(int64_t step_id, const RendezvousKey& key, const net::ErrorFrame& e) {
  if (e.of == net::FrameKind::kFeed) return;  // its run request finds the feed missing: the step fails by its deadline
  if (e.of == net::FrameKind::kRet) {
    // A fetched value that could not be received fails the step it belongs to, at once.
    on_outcome(step_id, net::DoneFrame::of(e.key, ResourceExhausted(e.error)));
    return;
  }
  // A tensor its sender could not send, or this process could not receive: the step waiting for
  // it on the key's device fails now, saying why, rather than at its deadline.
  device_actor_t a;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = local_.find(key.dst_device());
    if (it == local_.end()) return;
    a = it->second;
  }
  caf::anon_send(a, abort_atom::value, step_id,
                 "tensor " + key.wire() + " of step " + std::to_string(step_id) + " did not arrive: " + e.error);
}

}  // namespace actorflow
