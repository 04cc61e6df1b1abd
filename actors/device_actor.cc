#include "actors/device_actor.h"
#include "core/step_trace.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <deque>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "actors/faults.h"
#include "actors/restart.h"
#include "actors/sync_waits.h"
#include "core/env.h"
#include "core/hang_report.h"
#include "core/logging.h"
#include "core/metrics.h"
#include "core/waits.h"
#include "graph/graph_def.h"

namespace actorflow {

std::string make_rendezvous_key(const std::string& src, const std::string& dst, const std::string& edge) {
  return src + ";" + dst + ";" + edge;
}

void InlinePartitions::publish(const std::string& device, const std::string& handle, Entry e) {
  std::lock_guard<std::mutex> l(mu_);
  entries_[{device, handle}] = std::move(e);
}

void InlinePartitions::withdraw(const std::string& device, const std::string& handle) {
  std::lock_guard<std::mutex> l(mu_);
  entries_.erase({device, handle});
}

void InlinePartitions::withdraw_device(const std::string& device) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = entries_.lower_bound({device, std::string()}); it != entries_.end() && it->first.first == device;)
    it = entries_.erase(it);
}

std::optional<InlinePartitions::Entry> InlinePartitions::find(const std::string& device,
                                                              const std::string& handle) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find({device, handle});
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::pair<Status, std::vector<Tensor>>> try_run_inline(const InlinePartitions::Entry& e,
                                                                     const std::string& device, int64_t step_id,
                                                                     std::vector<std::string>& keys,
                                                                     std::vector<Tensor>& tensors) {
  if (!e.exec || !e.gate || keys.size() != tensors.size()) return std::nullopt;
  for (const auto& k : e.exec->recv_keys())
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) return std::nullopt;
  std::unique_lock<std::mutex> lock(e.gate->mu, std::try_to_lock);
  if (!lock.owns_lock() || !e.gate->open) return std::nullopt;
  // Self-contained: no _Send, so the send function is never called.
  StepExecution step(e.exec, step_id, {}, [](const RendezvousKey& key, const Tensor&) {
    return Internal("a self-contained partition sent '" + key.wire() + "'");
  });
  // Nothing may escape onto the reader thread: a kernel's exception already fails the step
  // (naming the node); anything else thrown here fails it naming the device.
  try {
    for (size_t i = 0; i < keys.size(); ++i) step.deliver(keys[i], std::move(tensors[i]));
    step.run();
  } catch (const std::exception& ex) {
    return std::make_pair(Internal(device + ": exception while running a step inline: " + ex.what()),
                          std::vector<Tensor>{});
  } catch (...) {
    return std::make_pair(Internal(device + ": unknown exception while running a step inline"),
                          std::vector<Tensor>{});
  }
  lock.unlock();
  if (!step.done())
    return std::make_pair(Internal(device + ": step " + std::to_string(step_id) + " of a self-contained partition " +
                                   "did not finish in one run"),
                          std::vector<Tensor>{});
  if (!step.status().ok()) return std::make_pair(step.status(), std::vector<Tensor>{});
  return std::make_pair(Status::OK(), std::move(step.retvals()));
}

EarlyTensorLimits early_tensor_limits() {
  static const EarlyTensorLimits limits = [] {
    EarlyTensorLimits l;
    l.max_bytes = static_cast<size_t>(
        positive_env_int("ACTORFLOW_MAX_EARLY_TENSOR_BYTES", static_cast<int64_t>(l.max_bytes)));
    l.ttl = std::chrono::milliseconds(positive_env_int("ACTORFLOW_EARLY_TENSOR_TTL_MS", l.ttl.count()));
    return l;
  }();
  return limits;
}

namespace {

// Tensors that arrived before their step started, per step, within EarlyTensorLimits: a byte
// budget (the oldest steps' tensors make room) and an expiry. Owned by one device actor; not
// thread-safe.
class EarlyTensors {
 public:
  using Clock = std::chrono::steady_clock;
  using Tensors = std::vector<std::pair<std::string, Tensor>>;

  explicit EarlyTensors(std::string device = "") : device_(std::move(device)) {}

  // Keeps `t` for step `step` (sent under rendezvous key `key`). Makes room by dropping the
  // oldest steps' tensors; a tensor larger than the whole budget is dropped itself.
  void add(int64_t step, std::string key, Tensor t) {
    const size_t bytes = t.bytes();
    const Clock::time_point now = Clock::now();
    expire(now);
    if (bytes > limits_.max_bytes) {
      note_drop("budget", step, key, 1, bytes);
      return;
    }
    while (bytes_ + bytes > limits_.max_bytes && !order_.empty()) drop_oldest("budget");
    auto [it, fresh] = by_step_.try_emplace(step);
    if (fresh) {
      it->second.first = now;
      order_.emplace_back(now, step);
    }
    it->second.bytes += bytes;
    it->second.tensors.emplace_back(std::move(key), std::move(t));
    bytes_ += bytes;
    prune_order();
  }
  // Takes (removes and returns) what is kept for `step`.
  Tensors take(int64_t step) {
    auto it = by_step_.find(step);
    if (it == by_step_.end()) return {};
    Tensors out = std::move(it->second.tensors);
    bytes_ -= it->second.bytes;
    by_step_.erase(it);
    prune_order();
    return out;
  }
  void erase(int64_t step) { (void)take(step); }
  void clear() {
    by_step_.clear();
    order_.clear();
    bytes_ = 0;
  }
  bool empty() const { return by_step_.empty(); }
  size_t steps() const { return by_step_.size(); }
  // Drops the steps whose first tensor came longer than the expiry ago.
  void expire(Clock::time_point now) {
    while (!order_.empty() && now - order_.front().first >= limits_.ttl) {
      drop_oldest("expired");
    }
  }
  // When the oldest kept step expires (nullopt: nothing kept).
  std::optional<Clock::time_point> next_expiry() {
    prune_order();
    if (order_.empty()) return std::nullopt;
    return order_.front().first + limits_.ttl;
  }
  std::chrono::milliseconds ttl() const { return limits_.ttl; }

 private:
  struct Entry {
    Tensors tensors;
    size_t bytes = 0;
    Clock::time_point first;
  };
  // Drops the oldest step in order_; false when that entry was stale (the step was taken).
  bool drop_oldest(const char* reason) {
    auto [when, step] = order_.front();
    order_.pop_front();
    auto it = by_step_.find(step);
    if (it == by_step_.end() || it->second.first != when) return false;
    note_drop(reason, step, it->second.tensors.empty() ? std::string() : it->second.tensors.front().first,
              it->second.tensors.size(), it->second.bytes);
    bytes_ -= it->second.bytes;
    by_step_.erase(it);
    return true;
  }
  // order_ holds one entry per kept step plus stale ones of steps taken since: drop the stale
  // ones at its front, and rebuild it when they outnumber the live ones.
  void prune_order() {
    while (!order_.empty()) {
      auto it = by_step_.find(order_.front().second);
      if (it != by_step_.end() && it->second.first == order_.front().first) break;
      order_.pop_front();
    }
    if (order_.size() > 2 * by_step_.size() + 64) {
      std::deque<std::pair<Clock::time_point, int64_t>> live;
      for (const auto& e : order_) {
        auto it = by_step_.find(e.second);
        if (it != by_step_.end() && it->second.first == e.first) live.push_back(e);
      }
      order_ = std::move(live);
    }
  }
  void note_drop(const char* reason, int64_t step, const std::string& key, size_t n, size_t bytes) {
    static Counter& by_budget = Metrics::global().counter(
        "actorflow_early_tensors_dropped_total", "Tensors that arrived before their step and were dropped",
        {{"reason", "budget"}});
    static Counter& by_expiry = Metrics::global().counter(
        "actorflow_early_tensors_dropped_total", "Tensors that arrived before their step and were dropped",
        {{"reason", "expired"}});
    const bool budget = std::string(reason) == "budget";
    (budget ? by_budget : by_expiry).inc(static_cast<int64_t>(n));
    const Clock::time_point now = Clock::now();
    Clock::time_point& last = last_log_[budget ? 0 : 1];
    size_t& held = held_[budget ? 0 : 1];
    if (now - last < std::chrono::seconds(1) && last != Clock::time_point()) {
      held += n;
      return;
    }
    last = now;
    // A log line only (not a step's path): parse the key for its sender.
    auto parsed = RendezvousKey::parse(key);
    const std::string from = parsed.ok() ? parsed->src_device() : std::string();
    AF_LOG(WARNING) << device_ << ": dropped " << n << " tensor(s) (" << bytes << " bytes) of step " << step
                    << " from " << (from.empty() ? std::string("an unknown device") : from)
                    << " that arrived before the step started: "
                    << (budget
                            ? "over the early-arrival budget of " + std::to_string(limits_.max_bytes) +
                                  " bytes (ACTORFLOW_MAX_EARLY_TENSOR_BYTES)"
                            : "the step did not start within " + std::to_string(limits_.ttl.count()) +
                                  " ms (ACTORFLOW_EARLY_TENSOR_TTL_MS)")
                    << (held > 0 ? " (" + std::to_string(held) + " more dropped since the last line)" : "");
    held = 0;
  }

  std::string device_;
  EarlyTensorLimits limits_ = early_tensor_limits();
  std::unordered_map<int64_t, Entry> by_step_;
  std::deque<std::pair<Clock::time_point, int64_t>> order_;  // first arrival per step, oldest first
  size_t bytes_ = 0;
  // Per reason (budget, expired): when a line was last written, drops held back since.
  Clock::time_point last_log_[2]{};
  size_t held_[2]{};
};

struct DeviceState;
using DeviceActor = device_actor_t::stateful_base<DeviceState>;
void drive(DeviceActor* self, int64_t step_id);

// Serves kernels' resource calls through the variables' inline parts where they take them, and
// otherwise turns them into requests to the task's resource actors; those replies come back as
// messages to this device actor, which resumes the step.
class DeviceResourceEnv final : public ResourceEnv {
 public:
  DeviceResourceEnv(DeviceActor* self, std::shared_ptr<ResourceManager> rm) : self_(self), rm_(std::move(rm)) {}
  void call(ResourceCall call, ResourceDone done) override;

 private:
  DeviceActor* self_;
  std::shared_ptr<ResourceManager> rm_;
};

struct DeviceState {
  Device* device = nullptr;
  std::shared_ptr<DeviceRouter> router;
  // Held while this actor runs kernels; shared with inline runs (InlinePartitions).
  std::shared_ptr<DeviceGate> gate = std::make_shared<DeviceGate>();
  std::shared_ptr<ResourceManager> resources;
  std::unique_ptr<DeviceResourceEnv> env;
  KernelOverrideFn kernel_override;
  std::unordered_map<std::string, std::shared_ptr<const Executor>> partitions;
  struct Step {
    std::unique_ptr<StepExecution> exec;
    caf::response_promise rp;
    // Set for a step dispatched over the data plane: where its outcome goes (DeviceRouter::reply_step).
    std::optional<StepReply> reply;
    // The task whose master started it (from the partition's handle), and what the parked step
    // waits for (core/waits.h): its first missing _Recv key, or "" for an asynchronous kernel.
    std::string origin;
    std::string parked_on;
    WaitHandle wait;
    // Replies to whoever started the step: the CAF request's promise or the data plane.
    void finish(const Status& s, std::vector<Tensor> retvals, DeviceState& st, int64_t step_id);
  };
  std::unordered_map<int64_t, Step> steps;
  // Tensors that arrived before their step started (bounded: EarlyTensorLimits).
  EarlyTensors early;
  bool expiry_timer = false;  // a next_atom to self is pending
  // Steps that ended (or were aborted): late tensors for them are dropped.
  std::unordered_set<int64_t> ended;
  std::deque<int64_t> ended_order;
  std::unordered_map<int64_t, Status> aborted_before_start;
  RestartBudget restarts;  // in-place restarts after exceptions
  Status failed;           // set when the restart budget is spent: every run gets it
  // The hang report's view (core/hang_report.h), published for the report's thread after each
  // step's progress: steps in flight, early tensors' steps, the mailbox size last seen.
  struct Published {
    std::atomic<size_t> steps{0}, early_steps{0}, mailbox{0};
  };
  std::shared_ptr<Published> published = std::make_shared<Published>();
  DumpReporter reporter;
  static constexpr const char* name = "device";

  void mark_ended(int64_t step) {
    if (ended.insert(step).second) {
      ended_order.push_back(step);
      if (ended_order.size() > 4096) {
        ended.erase(ended_order.front());
        ended_order.pop_front();
      }
    }
    early.erase(step);
  }
};

void DeviceState::Step::finish(const Status& s, std::vector<Tensor> retvals, DeviceState& st, int64_t step_id) {
  if (!reply) {
    if (s.ok()) rp.deliver(std::move(retvals));
    else rp.deliver(to_caf_error(s));
    return;
  }
  Status sent = st.router ? st.router->reply_step(*reply, step_id, st.device->name(), s, retvals)
                          : Unavailable("no router");
  if (!sent.ok()) AF_LOG(WARNING) << st.device->name() << ": cannot report step " << step_id << ": " << sent;
}

void DeviceResourceEnv::call(ResourceCall call, ResourceDone done) {
  const int64_t step = call.step_id;
  // The call names the task whose step sent it: a synchronous contribution's accumulator says
  // whose contributions are missing (actors/sync_waits.h).
  if (auto it = self_->state.steps.find(step); it != self_->state.steps.end()) call.caller_task = it->second.origin;
  if (StepTraces::any() && step_trace(step)) call.sent_ns = trace_clock_ns();
  // A kernel's call is a direct one: only the node actor marks a replicated call.
  call.replica.reset();
  Result<Resource> a = rm_ ? rm_->get_for_kernel(call.resource)
                           : Result<Resource>(FailedPrecondition("no resource container on this task for '" +
                                                                 call.resource + "'"));
  // Served at once on this thread where the variable's inline part takes the call (a read, an
  // update of a small host variable): no mailbox hop either way (actors/resources.h).
  if (a.ok() && a->inline_part) {
    if (auto now = a->inline_part->try_call(call)) {
      done(std::move(*now));
      return;
    }
  }
  if (!a.ok()) {
    // Reply asynchronously, as the contract requires. (Once the task's container is closed,
    // the task is stopping: Cancelled, and no resource actor is spawned that would outlive it.)
    auto msg = std::make_shared<ResourceDone>(std::move(done));
    const Status why = a.status();
    self_->request(caf::actor_cast<device_actor_t>(self_), caf::infinite, ping_atom::value)
        .then([=](const std::string&) {
          (*msg)(why);
          drive(self_, step);
        });
    return;
  }
  auto shared = std::make_shared<ResourceDone>(std::move(done));
  DeviceActor* self = self_;
  self_->request(a->actor, caf::infinite, resource_atom::value, ResourceCallPtr(std::make_shared<ResourceCall>(std::move(call))))
      .then(
          [=](std::vector<Tensor>& out) {
            (*shared)(std::move(out));
            drive(self, step);
          },
          [=](caf::error& e) {
            (*shared)(from_caf_error(e, "resource"));
            drive(self, step);
          });
}

Status register_partition(DeviceState& st, const std::string& handle, GraphPtr g) {
  auto ex = Executor::create(std::move(g), st.device, st.kernel_override);
  if (!ex.ok()) return ex.status().with_prefix("registering partition on " + st.device->name());
  InlinePartitions* inl = st.router ? st.router->inline_partitions() : nullptr;
  if (inl) {
    if ((*ex)->self_contained() && (*ex)->num_args() == 0 && st.device->type() == "CPU")
      inl->publish(st.device->name(), handle, InlinePartitions::Entry{*ex, st.gate});
    else
      inl->withdraw(st.device->name(), handle);
  }
  st.partitions[handle] = std::move(*ex);
  return Status::OK();
}

// The task that sends the tensor of _Recv key `key` of `step` (from the key its executor parsed
// once), or "" for a key that is not a RendezvousKey.
std::string sending_task(const StepExecution& step, const std::string& key) {
  const RendezvousKey* k = step.executor().parsed_recv_key(key);
  return k ? k->src_task() : std::string();
}

// The step stays parked: registers what it waits for (core/waits.h), the first _Recv key still
// missing (on the sending task) or else an asynchronous kernel (a variable call: on this task),
// and publishes the hang report's figures. A wait changes only when what it waits for does.
void note_parked(DeviceActor* self, DeviceState::Step& s, int64_t step_id) {
  auto& st = self->state;
  const std::vector<std::string> keys = s.exec->waiting_for();
  const std::string on = keys.empty() ? std::string() : keys.front();
  if (!s.wait.active() || on != s.parked_on) {
    s.parked_on = on;
    const std::string step = "step " + std::to_string(step_id) + (s.origin.empty() ? "" : " of " + s.origin) + " on " +
                             st.device->name();
    s.wait = keys.empty() ? WaitHandle("device", step + ": an asynchronous kernel (a variable call) has not answered", "")
                          : WaitHandle("tensor", step + ": waits for tensor " + on +
                                                     (keys.size() > 1 ? " (and " + std::to_string(keys.size() - 1) + " more)" : ""),
                                       sending_task(*s.exec, on));
  }
  st.published->steps.store(st.steps.size(), std::memory_order_relaxed);
  st.published->early_steps.store(st.early.steps(), std::memory_order_relaxed);
  // No mailbox size: CAF 0.17.6's fifo_inbox::size() downcasts its queue's sentinel node, which
  // UBSan reports (task_queue.hpp:67) in every step.
}

// Runs the step as far as it goes; replies and cleans up when it is done. May throw (a kernel
// bug, bad_alloc): drive() below catches.
void drive_unguarded(DeviceActor* self, int64_t step_id) {
  auto& st = self->state;
  auto it = st.steps.find(step_id);
  if (it == st.steps.end()) return;
  auto& step = *it->second.exec;
  // Fault injection: a `slow` fault makes this device take `factor` times as long (detached
  // actor: sleeping holds only this device's own thread).
  const double slow = FaultInjector::global().slow_factor(st.device->name());
  const auto ran_from = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> gate(st.gate->mu);
    step.run();
  }
  if (slow > 1.0) std::this_thread::sleep_for((slow - 1.0) * (std::chrono::steady_clock::now() - ran_from));
  if (!step.done()) {
    note_parked(self, it->second, step_id);
    return;
  }
  it->second.finish(step.status(), step.status().ok() ? std::move(step.retvals()) : std::vector<Tensor>{}, st, step_id);
  st.steps.erase(it);
  st.mark_ended(step_id);
  st.published->steps.store(st.steps.size(), std::memory_order_relaxed);
}

// After an exception escaped a kernel or a handler: restart in place (one_for_one). Every
// in-flight step fails with Aborted (its session retries or recovers), buffered tensors are
// dropped, the registered partitions and the actor's handle stay. Past the restart budget
// the actor keeps answering every run with the budget's error (naming the device, hence the
// task, and how often it failed). Returns the error for the request that threw.
Status restart_in_place(DeviceActor* self, const std::string& what) {
  auto& st = self->state;
  const std::string dev = st.device ? st.device->name() : std::string("device");
  Status budget = st.restarts.record_failure(dev + " (device actor)", what);
  Status why = budget.ok() ? Aborted(dev + ": exception in the device actor: " + what + "; the actor restarted in place")
                           : budget;
  auto steps = std::move(st.steps);
  st.steps.clear();
  for (auto& [id, step] : steps) {
    step.exec->abort(why);
    step.finish(why, {}, st, id);
    st.mark_ended(id);
  }
  st.early.clear();
  st.aborted_before_start.clear();
  if (!budget.ok()) {
    st.failed = budget;
    std::lock_guard<std::mutex> gate(st.gate->mu);
    st.gate->open = false;  // no inline runs on a failed device either
  }
  return why;
}

void drive(DeviceActor* self, int64_t step_id) {
  try {
    drive_unguarded(self, step_id);
  } catch (const std::exception& e) {
    restart_in_place(self, e.what());
  }
}

// Makes sure a next_atom reaches this actor when the oldest early tensor expires.
void arm_expiry(DeviceActor* self) {
  auto& st = self->state;
  if (st.expiry_timer) return;
  auto when = st.early.next_expiry();
  if (!when) return;
  st.expiry_timer = true;
  const auto wait = std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                *when - EarlyTensors::Clock::now()) +
                                                                std::chrono::milliseconds(1));
  self->delayed_send(self, wait, next_atom::value);
}

// A tensor for a _Recv of step `step_id`. A tensor that arrives twice (a duplicating link) is
// harmless: the second copy waits unused in the step's inbox (or is dropped once the step ended).
void accept_tensor(DeviceActor* self, int64_t step_id, const std::string& key, Tensor t) {
  auto& st = self->state;
  auto it = st.steps.find(step_id);
  if (it != st.steps.end()) {
    it->second.exec->deliver(key, std::move(t));
    drive(self, step_id);
    return;
  }
  if (st.ended.count(step_id)) return;  // late tensor of a finished/aborted step
  st.early.add(step_id, key, std::move(t));
  arm_expiry(self);
}

// Starts step `step_id` of partition `handle` and runs it as far as it goes; the reply is
// delivered when the step ends.
// `reply` set: a step dispatched over the data plane (its outcome goes as it says; the returned
// result is then only meaningful as an immediate error).
caf::result<std::vector<Tensor>> start_step(DeviceActor* self, const std::string& handle, int64_t step_id,
                                            std::vector<Tensor>& args, const StepReply* reply = nullptr) {
  auto& st = self->state;
  auto pit = st.partitions.find(handle);
  if (pit == st.partitions.end())
    return to_caf_error(NotFound("partition '" + handle + "' is not registered on " + st.device->name()));
  auto ab = st.aborted_before_start.find(step_id);
  if (ab != st.aborted_before_start.end()) {
    Status s = ab->second;
    st.aborted_before_start.erase(ab);
    return to_caf_error(s);
  }
  if (st.steps.count(step_id))
    return to_caf_error(AlreadyExists("step " + std::to_string(step_id) + " already runs on " + st.device->name()));
  std::weak_ptr<DeviceRouter> weak_router = st.router;
  auto send = [weak_router, step_id](const RendezvousKey& key, const Tensor& t) -> Status {
    auto r = weak_router.lock();
    if (!r) return Cancelled("device shutting down");
    return r->route_key(step_id, key, t);  // where link faults act (the router's sending hook)
  };
  DeviceState::Step step;
  step.exec = std::make_unique<StepExecution>(pit->second, step_id, std::move(args), send, st.env.get());
  if (reply) step.reply = *reply;
  else step.rp = self->make_response_promise();
  // A master's handle is "m<task>.<nonce>_p<n>" (partition_handle_prefix): the step's origin.
  if (handle.size() > 1 && handle[0] == 'm' && handle.rfind('.') != std::string::npos)
    step.origin = handle.substr(1, handle.rfind('.') - 1);
  for (auto& [k, t] : st.early.take(step_id)) step.exec->deliver(k, std::move(t));
  st.steps.emplace(step_id, std::move(step));
  drive(self, step_id);
  return caf::delegated<std::vector<Tensor>>();
}


device_actor_t::behavior_type device_actor(DeviceActor* self, Device* device, std::shared_ptr<DeviceRouter> router,
                           std::shared_ptr<ResourceManager> resources, KernelOverrideFn kernel_override,
                           RestartPolicy restarts) {
  self->state.device = device;
  self->state.early = EarlyTensors(device->name());
  self->state.restarts = RestartBudget(restarts);
  ignore_remote_exits(self, "device actor " + device->name());
  self->state.router = std::move(router);
  self->state.resources = resources;
  self->state.env = std::make_unique<DeviceResourceEnv>(self, resources);
  self->state.kernel_override = std::move(kernel_override);
  self->state.reporter = DumpReporter("device " + device->name(), [p = self->state.published] {
    return "steps in flight: " + std::to_string(p->steps.load(std::memory_order_relaxed)) +
           ", steps with early tensors: " + std::to_string(p->early_steps.load(std::memory_order_relaxed)) + "\n";
  });
  // Last resort for an exception escaping a handler other than run (which catches its own):
  // CAF 0.17 always stops the actor then; the pending request gets this error naming the device.
  {
    // When the actor ends: no more inline runs of its partitions (the device may go next).
    std::weak_ptr<DeviceRouter> weak_router = self->state.router;
    std::shared_ptr<DeviceGate> gate = self->state.gate;
    const std::string name = device->name();
    self->attach_functor([weak_router, gate, name](const caf::error&) {
      {
        std::lock_guard<std::mutex> l(gate->mu);
        gate->open = false;
      }
      if (auto r = weak_router.lock())
        if (auto* inl = r->inline_partitions()) inl->withdraw_device(name);
    });
  }
  self->set_exception_handler([self](std::exception_ptr& ep) -> caf::error {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    const std::string name = self->state.device ? self->state.device->name() : "device";
    AF_LOG(ERROR) << "device actor " << name << " stopped by an unhandled exception: " << what;
    return to_caf_error(Internal(name + ": device actor stopped by an unhandled exception: " + what));
  });
  return {
      [=](register_atom, const std::string& handle, const GraphPtr& g) -> caf::result<bool> {
        Status s = register_partition(self->state, handle, g);
        if (!s.ok()) return to_caf_error(s);
        return true;
      },
      [=](register_atom, const std::string& handle, const std::string& graph_def) -> caf::result<bool> {
        auto g = deserialize_graph(graph_def);
        if (!g.ok()) return to_caf_error(g.status().with_prefix("partition for " + self->state.device->name()));
        Status s = register_partition(self->state, handle, std::make_shared<const Graph>(std::move(*g)));
        if (!s.ok()) return to_caf_error(s);
        return true;
      },
      [=](deregister_atom, const std::string& handle) -> bool {
        if (auto* inl = self->state.router ? self->state.router->inline_partitions() : nullptr)
          inl->withdraw(self->state.device->name(), handle);
        return self->state.partitions.erase(handle) > 0;
      },
      [=](run_atom, const std::string& handle, int64_t step_id, std::vector<Tensor>& args) -> caf::result<std::vector<Tensor>> {
        if (!self->state.failed.ok()) return to_caf_error(self->state.failed);
        // An exception in here (an injected `throw` fault or a real one) fails this request
        // (naming the device, hence the task) and restarts the actor in place: CAF 0.17 would
        // stop it instead.
        try {
          FaultInjector::global().maybe_throw("device", self->state.device->name());
          return start_step(self, handle, step_id, args);
        } catch (const std::exception& e) {
          return to_caf_error(restart_in_place(self, e.what()));
        }
      },
      [=](steprun_atom, const std::string& handle, int64_t step_id, const StepReply& reply,
          std::vector<std::string>& keys, std::vector<Tensor>& tensors) {
        // A run request that came over the data plane (StepDispatcher::dispatch_step): same as run_atom
        // without arguments, but the outcome goes back over the data plane as `reply` says; the
        // tensors for its _Recvs that came with it (keys[i] -> tensors[i]) are delivered first.
        auto& st = self->state;
        auto report = [&](const Status& s) {
          Status sent = st.router ? st.router->reply_step(reply, step_id, st.device->name(), s, {})
                                  : Unavailable("no router");
          if (!sent.ok()) AF_LOG(WARNING) << st.device->name() << ": cannot report step " << step_id << ": " << sent;
        };
        if (!st.failed.ok()) return report(st.failed);
        std::vector<Tensor> no_args;
        if (!keys.empty() && keys.size() == tensors.size() && !st.ended.count(step_id) && !st.steps.count(step_id)) {
          for (size_t i = 0; i < keys.size(); ++i) st.early.add(step_id, std::move(keys[i]), std::move(tensors[i]));
          arm_expiry(self);
        }
        try {
          FaultInjector::global().maybe_throw("device", st.device->name());
          auto r = start_step(self, handle, step_id, no_args, &reply);
          if (r.flag == caf::rt_error) {
            if (!st.steps.count(step_id)) st.early.erase(step_id);
            report(from_caf_error(r.err));
          }
        } catch (const std::exception& e) {
          report(restart_in_place(self, e.what()));
        }
      },
      [=](tensor_atom, int64_t step_id, const std::string& key, Tensor& t) {
        // Link faults acted where the tensor entered this process (the data plane's router or
        // the node actor).
        accept_tensor(self, step_id, key, std::move(t));
      },
      [=](abort_atom, int64_t step_id, const std::string& why) {
        auto& st = self->state;
        auto it = st.steps.find(step_id);
        Status s = Aborted(why);
        if (it != st.steps.end()) {
          it->second.exec->abort(s);
          it->second.finish(s, {}, st, step_id);
          st.steps.erase(it);
        } else if (!st.ended.count(step_id)) {
          st.aborted_before_start[step_id] = s;
          if (st.aborted_before_start.size() > 4096) st.aborted_before_start.clear();
        }
        st.mark_ended(step_id);
      },
      [=](next_atom) {
        auto& st = self->state;
        st.expiry_timer = false;
        st.early.expire(EarlyTensors::Clock::now());
        arm_expiry(self);
      },
      [=](ping_atom) { return self->state.device->name(); },
  };
}

}  // namespace

device_actor_t spawn_device_actor(caf::actor_system& sys, Device* device, std::shared_ptr<DeviceRouter> router,
                              std::shared_ptr<ResourceManager> resources, KernelOverrideFn kernel_override,
                              RestartPolicy restarts) {
  return sys.spawn<caf::detached>(device_actor, device, std::move(router), std::move(resources),
                                  std::move(kernel_override), restarts);
}

}  // namespace actorflow
