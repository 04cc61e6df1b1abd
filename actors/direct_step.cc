#include "actors/direct_step.h"

#include <atomic>
#include <cstdlib>
#include <random>
#include <set>

#include "actors/faults.h"
#include "core/cpu_relax.h"
#include "core/logging.h"

namespace actorflow {

Status check_feeds(const std::vector<std::string>& names, const std::vector<DType>& types,
                   const std::vector<Shape>& shapes, const std::vector<Tensor>& feeds) {
  for (size_t i = 0; i < feeds.size() && i < names.size(); ++i) {
    const Tensor& t = feeds[i];
    const std::string& name = names[i];
    if (!t.is_initialized()) return InvalidArgument("feed '" + name + "': the tensor is empty");
    if (i >= types.size() || types[i] == DType::kInvalid) continue;  // fed but unused
    if (t.dtype() != types[i])
      return InvalidArgument("feed '" + name + "': expected " + dtype_name(types[i]) + ", got " + dtype_name(t.dtype()));
    if (i < shapes.size() && !shapes[i].compatible_with(t.shape()))
      return InvalidArgument("feed '" + name + "': expected shape " + shapes[i].to_string() + ", got " +
                             t.shape().to_string());
  }
  return Status::OK();
}

int64_t next_step_id() {
  static std::atomic<int64_t> next{[] {
    std::random_device rd;
    return static_cast<int64_t>(((static_cast<uint64_t>(rd()) << 32) ^ rd()) >> 2);
  }()};
  return next.fetch_add(1, std::memory_order_relaxed);
}

namespace {

// How long a waiting caller polls before it sleeps: a wake-up through the kernel can cost tens
// of microseconds on a VM whose other vCPU is halted, more than a tiny step itself.
// AF_DIRECT_SPIN_US overrides (0 = never poll).
std::chrono::microseconds spin_budget() {
  static const std::chrono::microseconds us{[] {
    const char* e = std::getenv("AF_DIRECT_SPIN_US");
    if (!e || !*e) return 50L;
    long v = std::strtol(e, nullptr, 10);
    return v < 0 ? 0L : (v > 10000 ? 10000L : v);
  }()};
  return us;
}

// How often a waiting step checks its connections and deadline.
constexpr std::chrono::milliseconds kLivenessSlice{250};
// When a step without an outcome first asks its tasks whether they run it, and the longest gap
// between two such queries (the gap doubles from the first).
constexpr std::chrono::milliseconds kFirstQuery{1000};
constexpr std::chrono::milliseconds kMaxQueryGap{8000};

}  // namespace

struct DirectSteps::Waiter {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  std::set<std::string> pending;  // dispatched devices that have not reported
  std::vector<Tensor> fetches;
  Status status;
  int64_t step_id = 0;
};

bool DirectSteps::finish(Waiter& w, const Status& s) {
  if (w.done.load(std::memory_order_relaxed)) return false;
  w.status = s;
  w.done.store(true, std::memory_order_release);
  w.cv.notify_all();
  return true;
}

void DirectSteps::publish(const std::string& plan_key, std::shared_ptr<const DirectPlan> plan) {
  std::lock_guard<std::mutex> l(mu_);
  plans_[plan_key] = std::move(plan);
}

std::shared_ptr<const DirectPlan> DirectSteps::find(const std::string& plan_key) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = plans_.find(plan_key);
  return it == plans_.end() ? nullptr : it->second;
}

bool DirectSteps::has_plans() const {
  std::lock_guard<std::mutex> l(mu_);
  return !plans_.empty();
}

void DirectSteps::clear_plans() {
  std::lock_guard<std::mutex> l(mu_);
  plans_.clear();
}

void DirectSteps::task_down(const std::string& task, const std::string& reason) {
  const std::string prefix = task + "/";
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = plans_.begin(); it != plans_.end();) {
    bool uses = false;
    for (const auto& d : it->second->dispatches)
      if (d.device.name.rfind(prefix, 0) == 0) uses = true;
    if (uses) it = plans_.erase(it);
    else ++it;
  }
  for (auto& [id, w] : waiting_) {
    std::lock_guard<std::mutex> wl(w->mu);
    for (const auto& d : w->pending)
      if (d.rfind(prefix, 0) == 0) {
        finish(*w, Unavailable("task " + task + " failed during step " + std::to_string(id) + ": " + reason));
        break;
      }
  }
}

void DirectSteps::cancel_all(const Status& why) {
  std::lock_guard<std::mutex> l(mu_);
  if (cancelled_.ok()) cancelled_ = why;
  plans_.clear();
  for (auto& [id, w] : waiting_) {
    std::lock_guard<std::mutex> wl(w->mu);
    finish(*w, cancelled_);
  }
}

void DirectSteps::abort_others(StepDispatcher& router, const DirectPlan& plan, int64_t step_id,
                               const std::set<std::string>& pending, const std::string& why) {
  // Partitions that reported already ended on their device: only the others need the abort.
  for (const auto& d : plan.dispatches)
    if (d.device.node && pending.count(d.device.name))
      router.abort_remote_step(d.device.node, d.device.name, step_id, why);
}

std::optional<Result<std::vector<Tensor>>> DirectSteps::run(StepDispatcher& router, const DirectPlan& plan,
                                                            const std::vector<Tensor>& feeds,
                                                            std::chrono::milliseconds timeout) {
  if (plan.dispatches.empty()) return std::nullopt;
  for (const auto& d : plan.dispatches)
    if (!router.can_dispatch(d.device.name) && !router.open_dispatch(d.device.name).ok()) return std::nullopt;
  if (feeds.size() != plan.arg_types.size())
    return Result<std::vector<Tensor>>(Internal("direct step: " + std::to_string(feeds.size()) + " feeds for a plan of " +
                                                std::to_string(plan.arg_types.size())));
  Status fed = check_feeds(plan.feed_names, plan.arg_types, plan.arg_shapes, feeds);
  if (!fed.ok()) return Result<std::vector<Tensor>>(fed);

  steps_run_.fetch_add(1, std::memory_order_relaxed);
  auto w = std::make_shared<Waiter>();
  w->step_id = next_step_id();
  w->fetches.resize(plan.num_fetches);
  for (const auto& d : plan.dispatches) w->pending.insert(d.device.name);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!cancelled_.ok()) return Result<std::vector<Tensor>>(cancelled_);
    waiting_[w->step_id] = w;
  }
  auto fail_now = [&](const Status& s) {
    std::lock_guard<std::mutex> wl(w->mu);
    finish(*w, s);
  };
  const auto start = std::chrono::steady_clock::now();
  auto timed_out = [&] { return timeout.count() > 0 && std::chrono::steady_clock::now() - start >= timeout; };
  auto deadline_error = [&] {
    const std::string first = w->pending.empty() ? std::string("the step") : *w->pending.begin();
    return step_deadline_error(w->step_id, first, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                      std::chrono::steady_clock::now() - start));
  };
  // A step still without an outcome asks the tasks it waits for whether they run it (after 1 s,
  // then 2, 4, 8, 8, ... s): a task that never got the request, or sent an outcome that never
  // came, says so at once (on_state), instead of the wait running into the deadline.
  auto next_query = start + kFirstQuery;
  auto query_gap = kFirstQuery;
  bool queries = true;
  auto maybe_query = [&](bool on_request_connection) {
    const auto now = std::chrono::steady_clock::now();
    if (!queries || now < next_query) return;
    std::set<std::string> pending;
    {
      std::lock_guard<std::mutex> wl(w->mu);
      pending = w->pending;
    }
    for (const auto& device : pending) {
      Status q = router.query_step(device, w->step_id, on_request_connection);
      if (q.code() == Code::kUnimplemented) queries = false;
    }
    query_gap = std::min(query_gap * 2, kMaxQueryGap);
    next_query = now + query_gap;
  };
  // Each run request goes with the feeds of its partition, in one write.
  std::vector<std::pair<std::string, Tensor>> carried;
  auto carry = [&](const DirectPlan::Dispatch& d) {
    carried.clear();
    for (const auto& f : d.forwards) carried.emplace_back(f.key.wire(), feeds[static_cast<size_t>(f.arg)]);
  };
  // One partition: its outcome comes back on the request's own connection and this thread
  // reads it (no reader thread to wake in between). A null connection: the request went with a
  // reply address (a link fault met it), and the outcome comes through the reader threads.
  Result<std::shared_ptr<net::ClientConnection>> conn = std::shared_ptr<net::ClientConnection>();
  if (plan.dispatches.size() == 1) {
    const auto& d = plan.dispatches.front();
    carry(d);
    conn = router.dispatch_step_awaiting(d.device.name, d.handle, w->step_id, plan.from_task, carried);
    if (!conn.ok()) fail_now(conn.status());
  }
  if (!conn.ok() || *conn) {
    const auto& d = plan.dispatches.front();
    auto is_done = [&w] { return w->done.load(std::memory_order_acquire); };
    std::chrono::microseconds spin = spin_budget();
    while (conn.ok() && !is_done()) {
      auto wait = kLivenessSlice;
      if (timeout.count() > 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(timeout - (std::chrono::steady_clock::now() - start));
        wait = std::max(std::chrono::milliseconds(1), std::min(wait, left));
      }
      Status s = router.await_dispatched(**conn, is_done, spin, wait);
      spin = std::chrono::microseconds(0);
      if (s.ok() && !is_done()) maybe_query(/*on_request_connection=*/true);
      std::lock_guard<std::mutex> wl(w->mu);
      if (w->done.load(std::memory_order_relaxed)) break;
      if (!s.ok()) {
        finish(*w, Unavailable("the data-plane connection to " + task_of_device(d.device.name) + " closed during step " +
                               std::to_string(w->step_id) + ": " + s.message()));
      } else if (timed_out()) {
        finish(*w, deadline_error());
      }
    }
  } else {
    for (size_t i = 0; plan.dispatches.size() > 1 && i < plan.dispatches.size(); ++i) {
      const auto& d = plan.dispatches[i];
      carry(d);
      Status s = router.dispatch_step(d.device.name, d.handle, w->step_id, plan.from_task, carried);
      if (!s.ok()) {
        fail_now(s);
        break;
      }
    }
    // Wait for the process's reader threads: poll briefly, then sleep in slices that check the
    // deadline and the connections.
    const auto spin_end = start + spin_budget();
    while (!w->done.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < spin_end) cpu_relax();
    // While this process may hold back what it sends (FaultInjector::add's link faults) a run
    // request may still be on its way: no queries then, whose "not running" would be premature.
    queries = !FaultInjector::global().acts_on_sends();
    std::unique_lock<std::mutex> wl(w->mu);
    while (!w->done.load(std::memory_order_relaxed)) {
      if (w->cv.wait_for(wl, kLivenessSlice, [&] { return w->done.load(std::memory_order_relaxed); })) break;
      if (timed_out()) {
        finish(*w, deadline_error());
        break;
      }
      wl.unlock();
      maybe_query(/*on_request_connection=*/false);
      wl.lock();
      if (w->done.load(std::memory_order_relaxed)) break;
      for (const auto& d : w->pending)
        if (!router.dispatch_connection_open(d)) {
          finish(*w, Unavailable("the data-plane connection to " + task_of_device(d) + " closed during step " +
                                 std::to_string(w->step_id)));
          break;
        }
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    waiting_.erase(w->step_id);
  }
  if (!w->status.ok()) {
    std::set<std::string> pending;
    {
      std::lock_guard<std::mutex> wl(w->mu);
      pending = w->pending;
    }
    abort_others(router, plan, w->step_id, pending, w->status.message());
    return Result<std::vector<Tensor>>(w->status);
  }
  return Result<std::vector<Tensor>>(std::move(w->fetches));
}

bool DirectSteps::on_state(int64_t step_id, const std::string& device, bool running) {
  std::shared_ptr<Waiter> w = waiter(step_id);
  if (!w) return false;
  if (running) return true;
  std::lock_guard<std::mutex> wl(w->mu);
  if (w->done.load(std::memory_order_relaxed) || !w->pending.count(device)) return true;
  // The task answered behind any outcome it sent for this step: none is coming.
  finish(*w, Aborted("step " + std::to_string(step_id) + ": " + task_of_device(device) +
                     " is alive but does not run it on " + device +
                     " (it never got the run request, or its outcome was lost on the way)"));
  return true;
}

std::shared_ptr<DirectSteps::Waiter> DirectSteps::waiter(int64_t step_id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = waiting_.find(step_id);
  return it == waiting_.end() ? nullptr : it->second;
}

bool DirectSteps::on_ret(int64_t step_id, const std::string& device, int32_t index, Tensor t) {
  std::shared_ptr<Waiter> w = waiter(step_id);
  if (!w) return false;
  std::lock_guard<std::mutex> wl(w->mu);
  if (w->done.load(std::memory_order_relaxed) || !w->pending.count(device)) return true;
  if (index >= 0 && static_cast<size_t>(index) < w->fetches.size()) w->fetches[static_cast<size_t>(index)] = std::move(t);
  return true;
}

bool DirectSteps::on_done(int64_t step_id, const std::string& device, const Status& outcome) {
  std::shared_ptr<Waiter> w = waiter(step_id);
  if (!w) return false;
  std::lock_guard<std::mutex> wl(w->mu);
  if (w->done.load(std::memory_order_relaxed) || !w->pending.erase(device)) return true;
  if (!outcome.ok()) finish(*w, outcome);
  else if (w->pending.empty()) finish(*w, Status::OK());
  return true;
}

}  // namespace actorflow
