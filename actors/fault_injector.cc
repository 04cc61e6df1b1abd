// The FaultInjector: the runtime's fault hooks over the faults of a plan (config/fault_plan.h).
#include "core/metrics.h"
#include "actors/fault_injector.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "config/task_names.h"
#include "core/logging.h"
#include "data/checkpoint.h"

namespace actorflow {

namespace {

// Seconds with three decimals, for log lines.
std::string secs(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", d);
  return buf;
}

}  // namespace

struct FaultInjector::Active {
  Fault f;
  size_t index = 0;
  uint64_t seed = 0;
  FaultRng rng{0};
  bool send_side = true, recv_side = true;
  std::optional<Clock::time_point> start, end;
  double start_secs = 0;  // derived, for logs
  bool started = false, ended = false, fired = false;
  int64_t hits = 0;

  // How the start reads in the log line (describe() already says "at step N").
  std::string trigger() const { return f.at_step ? std::string() : "at t=" + secs(start_secs) + " s"; }

  bool active(Clock::time_point now) const {
    if (!start || now < *start) return false;
    if (end && now >= *end) return false;
    return !(is_one_shot_fault(f.kind) && fired);
  }
};

FaultInjector& FaultInjector::global() {
  static FaultInjector* g = new FaultInjector();
  return *g;
}

FaultInjector::FaultInjector() = default;

FaultInjector::~FaultInjector() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (timer_.joinable()) timer_.join();
}

void FaultInjector::set_seed(uint64_t seed) {
  std::lock_guard<std::mutex> l(mu_);
  seed_ = seed;
}

uint64_t FaultInjector::seed() const {
  std::lock_guard<std::mutex> l(mu_);
  return seed_;
}

void FaultInjector::set_kill_handler_for_testing(std::function<void(const std::string&)> fn) {
  std::lock_guard<std::mutex> l(mu_);
  kill_fn_ = std::move(fn);
}

void FaultInjector::ensure_timer_locked() {
  if (!timer_.joinable()) timer_ = std::thread([this] { timer_loop(); });
}

Status FaultInjector::add_locked(Fault f, size_t index, uint64_t seed, bool send_side, bool recv_side,
                                 std::optional<double> start_secs, std::string* description) {
  const std::vector<FaultProblem> errs = check_fault(&f);
  if (!errs.empty()) {
    std::string msg = "fault " + std::string(fault_kind_name(f.kind)) + ": ";
    for (size_t i = 0; i < errs.size(); ++i) msg += (i ? "; " : "") + errs[i].key + ": " + errs[i].what;
    return InvalidArgument(msg);
  }
  auto a = std::make_unique<Active>();
  a->index = index;
  a->seed = seed;
  a->rng = FaultRng::stream(seed, index, 0);
  a->send_side = send_side;
  a->recv_side = recv_side;
  if (start_secs) {
    a->start_secs = *start_secs;
    a->start = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*start_secs));
    if (f.duration_secs)
      a->end = *a->start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*f.duration_secs));
  }
  a->f = std::move(f);
  if (description) {
    *description = a->f.describe();
    if (start_secs) *description += " (starts at t=" + secs(*start_secs) + " s)";
  }
  faults_.push_back(std::move(a));
  armed_.store(true, std::memory_order_release);
  ensure_timer_locked();
  return Status::OK();
}

Status FaultInjector::add(Fault f) {
  std::lock_guard<std::mutex> l(mu_);
  const size_t index = added_++;
  std::optional<double> start = fault_start_secs(f, seed_, index);
  Status s = add_locked(std::move(f), index, seed_, true, true, start, nullptr);
  cv_.notify_all();
  return s;
}

Result<std::vector<std::string>> FaultInjector::load(const FaultPlan& plan, const std::string& self_task) {
  std::vector<std::string> out;
  std::lock_guard<std::mutex> l(mu_);
  seed_ = plan.seed;
  for (size_t i = 0; i < plan.faults.size(); ++i) {
    if (!plan.involves(i, self_task)) continue;
    const Fault& f = plan.faults[i];
    const bool receiver_only = is_link_fault(f.kind) || f.kind == FaultKind::kPartition;
    std::string desc;
    AF_RETURN_IF_ERROR(add_locked(f, i, plan.seed, !receiver_only, true, plan.start_secs(i), &desc));
    ++added_;
    AF_LOG(INFO) << "fault plan " << plan.source << " (seed " << plan.seed << "): loaded for "
                 << short_task_name(normalise_task_name(self_task)) << ": " << desc;
    out.push_back(desc);
  }
  cv_.notify_all();
  return out;
}

void FaultInjector::clear() {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& a : faults_)
    AF_LOG(INFO) << "fault cleared: " << a->f.describe() << " (" << a->hits << " hits, seed " << a->seed << ")";
  faults_.clear();
  armed_.store(false, std::memory_order_release);
  cv_.notify_all();
}

std::vector<std::string> FaultInjector::describe() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> out;
  const auto now = Clock::now();
  for (const auto& a : faults_) {
    const char* state = a->active(now) ? "active" : (a->start && (a->fired || a->ended || now >= *a->start)) ? "done" : "pending";
    out.push_back(a->f.describe() + " [" + state + ", " + std::to_string(a->hits) + " hits]");
  }
  return out;
}

FaultStats FaultInjector::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void FaultInjector::fire_locked(Active& a, const std::string& trigger, std::vector<std::function<void()>>* actions) {
  if (a.started) return;
  a.started = true;
  Metrics::global()
      .counter("actorflow_faults_injected_total", "Faults this process injected (actorflow chaos / fault plans).",
               {{"kind", fault_kind_name(a.f.kind)}})
      .inc();
  const std::string what = a.f.describe();
  const std::string line =
      "fault injected: " + what + (trigger.empty() ? "" : " " + trigger) + " (seed " + std::to_string(a.seed) + ")";
  switch (a.f.kind) {
    case FaultKind::kKill: {
      a.fired = true;
      ++stats_.killed;
      ++a.hits;
      AF_LOG(WARNING) << line << ": SIGKILL to pid " << ::getpid();
      auto fn = kill_fn_;
      actions->push_back([fn, line] {
        if (fn) fn(line);
        else ::kill(::getpid(), SIGKILL);
      });
      break;
    }
    case FaultKind::kCorruptCheckpoint: {
      a.fired = true;
      ++stats_.corrupted;
      ++a.hits;
      const std::string dir = a.f.logdir;
      const CorruptMode mode = a.f.mode == "truncate" ? CorruptMode::kTruncateHalf : CorruptMode::kFlipByte;
      actions->push_back([dir, mode, line] {
        auto p = corrupt_latest(dir, mode);
        if (p.ok()) AF_LOG(WARNING) << line << ": damaged " << *p;
        else AF_LOG(WARNING) << line << ": nothing damaged (" << p.status().message() << ")";
      });
      break;
    }
    case FaultKind::kThrow:
      AF_LOG(WARNING) << line << ": armed for the next message";
      break;
    default:
      AF_LOG(WARNING) << line;
  }
}

void FaultInjector::timer_loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    std::vector<std::function<void()>> actions;
    const auto now = Clock::now();
    auto next = Clock::time_point::max();
    for (auto it = timed_.begin(); it != timed_.end();) {
      if (it->at <= now) {
        actions.push_back(std::move(it->fn));
        it = timed_.erase(it);
      } else {
        next = std::min(next, it->at);
        ++it;
      }
    }
    for (auto& a : faults_) {
      if (a->start && !a->started) {
        if (now >= *a->start) fire_locked(*a, a->trigger(), &actions);
        else next = std::min(next, *a->start);
      }
      if (a->end && a->started && !a->ended) {
        if (now >= *a->end) {
          a->ended = true;
          AF_LOG(WARNING) << "fault healed: " << a->f.describe() << " (" << a->hits << " messages affected, seed "
                          << a->seed << ")";
        } else {
          next = std::min(next, *a->end);
        }
      }
    }
    if (!actions.empty()) {
      l.unlock();
      for (auto& fn : actions) fn();
      l.lock();
      continue;
    }
    if (next == Clock::time_point::max()) cv_.wait(l);
    else cv_.wait_until(l, next);
  }
}

void FaultInjector::run_after(std::chrono::milliseconds delay, std::function<void()> fn) {
  std::lock_guard<std::mutex> l(mu_);
  timed_.push_back(Timed{Clock::now() + delay, std::move(fn)});
  ensure_timer_locked();
  cv_.notify_all();
}

Status FaultInjector::apply(const LinkDecision& d, const std::function<Status()>& deliver) {
  if (d.drop) return Status::OK();
  if (d.delay_ms > 0) {
    const bool dup = d.duplicate;
    run_after(std::chrono::milliseconds(d.delay_ms), [deliver, dup] {
      for (int i = 0; i < (dup ? 2 : 1); ++i) {
        Status s = deliver();
        if (!s.ok()) {
          AF_LOG(WARNING) << "delayed delivery failed: " << s.message();
        }
      }
    });
    return Status::OK();
  }
  Status s = deliver();
  if (d.duplicate) {
    Status s2 = deliver();
    if (s.ok()) s = s2;
  }
  return s;
}

LinkDecision FaultInjector::decide(const std::string& src_in, const std::string& dst_in, bool sending) {
  LinkDecision d;
  if (!armed()) return d;
  const std::string src = normalise_task_name(src_in), dst = normalise_task_name(dst_in);
  if (!src.empty() && src == dst) return d;  // not a link
  std::vector<std::function<void()>> actions;
  std::lock_guard<std::mutex> l(mu_);
  const auto now = Clock::now();
  auto in = [](const std::vector<std::string>& v, const std::string& t) {
    return !t.empty() && std::find(v.begin(), v.end(), t) != v.end();
  };
  for (auto& ap : faults_) {
    Active& a = *ap;
    if (sending ? !a.send_side : !a.recv_side) continue;
    const Fault& f = a.f;
    if (f.kind == FaultKind::kPartition) {
      if (!a.active(now)) continue;
      if ((in(f.tasks_a, src) && in(f.tasks_b, dst)) || (in(f.tasks_b, src) && in(f.tasks_a, dst))) {
        fire_locked(a, a.trigger(), &actions);
        d.drop = true;
        ++a.hits;
      }
      continue;
    }
    if (!is_link_fault(f.kind) || !a.active(now)) continue;
    if (!f.src.empty() && f.src != src) continue;
    if (!f.dst.empty() && f.dst != dst) continue;
    fire_locked(a, a.trigger(), &actions);
    if (f.probability < 1.0 && !(a.rng.uniform() < f.probability)) continue;
    ++a.hits;
    if (f.kind == FaultKind::kDrop) d.drop = true;
    else if (f.kind == FaultKind::kDelay) d.delay_ms = std::max(d.delay_ms, f.delay_ms);
    else d.duplicate = true;
  }
  if (d.drop) {
    ++stats_.dropped;
    d.delay_ms = 0;
    d.duplicate = false;
  } else {
    if (d.delay_ms > 0) ++stats_.delayed;
    if (d.duplicate) ++stats_.duplicated;
  }
  return d;
}

LinkDecision FaultInjector::on_send(const std::string& src_task, const std::string& dst_task) {
  return decide(src_task, dst_task, true);
}

LinkDecision FaultInjector::on_receive(const std::string& src_task, const std::string& self_task) {
  return decide(src_task, self_task, false);
}

void FaultInjector::on_global_step(int64_t step) {
  int64_t prev = last_step_.load();
  while (step > prev && !last_step_.compare_exchange_weak(prev, step)) {
  }
  if (!armed()) return;
  std::vector<std::function<void()>> actions;
  {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = Clock::now();
    for (auto& a : faults_) {
      if (!a->f.at_step || a->start || step < *a->f.at_step) continue;
      a->start = now;
      if (a->f.duration_secs)
        a->end = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*a->f.duration_secs));
      fire_locked(*a, "(observed step " + std::to_string(step) + ")", &actions);
    }
    cv_.notify_all();  // end times to watch
  }
  for (auto& fn : actions) fn();
}

bool FaultInjector::targets_device(const std::string& device_name) const {
  if (!armed()) return false;
  std::lock_guard<std::mutex> l(mu_);
  const auto now = Clock::now();
  const std::string task = task_of_device(device_name);
  for (const auto& a : faults_) {
    const bool device_fault = a->f.kind == FaultKind::kSlow || (a->f.kind == FaultKind::kThrow && a->f.actor == "device");
    if (!device_fault || (a->end && now >= *a->end) || (is_one_shot_fault(a->f.kind) && a->fired)) continue;
    if (a->f.task.empty() || a->f.task == task) return true;
  }
  return false;
}

bool FaultInjector::acts_on_sends() const {
  if (!armed()) return false;
  std::lock_guard<std::mutex> l(mu_);
  const auto now = Clock::now();
  for (const auto& a : faults_) {
    if (!a->send_side || !(is_link_fault(a->f.kind) || a->f.kind == FaultKind::kPartition)) continue;
    if (!(a->end && now >= *a->end)) return true;  // pending or active
  }
  return false;
}

double FaultInjector::slow_factor(const std::string& device_name) {
  if (!armed()) return 1.0;
  std::vector<std::function<void()>> actions;
  double factor = 1.0;
  {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = Clock::now();
    const std::string task = task_of_device(device_name);
    for (auto& a : faults_) {
      if (a->f.kind != FaultKind::kSlow || !a->active(now)) continue;
      if (a->f.task != task) continue;
      if (!a->f.device.empty()) {
        const std::string suffix = "/device:" + a->f.device;
        if (device_name.size() < suffix.size() ||
            device_name.compare(device_name.size() - suffix.size(), suffix.size(), suffix) != 0)
          continue;
      }
      fire_locked(*a, a->trigger(),
                  &actions);
      ++a->hits;
      factor = std::max(factor, a->f.factor);
    }
    if (factor > 1.0) ++stats_.slowed_steps;
  }
  for (auto& fn : actions) fn();
  return factor;
}

void FaultInjector::maybe_throw(const std::string& actor_kind, const std::string& where) {
  if (!armed()) return;
  std::string msg;
  std::vector<std::function<void()>> actions;
  {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = Clock::now();
    const std::string task = where.empty() ? "" : task_of_device(where);
    for (auto& a : faults_) {
      if (a->f.kind != FaultKind::kThrow || a->f.actor != actor_kind || !a->active(now)) continue;
      if (!task.empty() && !a->f.task.empty() && a->f.task != task) continue;
      fire_locked(*a, a->trigger(),
                  &actions);
      a->fired = true;
      ++a->hits;
      ++stats_.thrown;
      msg = "injected fault: exception in the " + actor_kind + " actor " + (where.empty() ? short_task_name(a->f.task) : where) +
            " (seed " + std::to_string(a->seed) + ")";
      break;
    }
  }
  for (auto& fn : actions) fn();
  if (!msg.empty()) {
    AF_LOG(WARNING) << "fault injected: throwing: " << msg;
    throw InjectedFault(msg);
  }
}

}  // namespace actorflow
