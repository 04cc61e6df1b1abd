// The runtime side of fault injection: the process-wide FaultInjector that the runtime consults at
// its hook points, and what its hooks decide. Plans and faults themselves are config/fault_plan.h.
//
// Where faults act (each at exactly one place, so a plan loaded by every task applies once):
//   kill               the process of `task` SIGKILLs itself (after_secs after load, or when it
//                      observes global step >= at_step).
//   throw              the next message handled by an actor of kind `actor` ("device" or
//                      "variable") on `task` throws an exception inside that actor's handler.
//   drop/delay/duplicate  messages on the link src -> dst (either may be omitted = any task).
//   partition          every message between a task of tasks_a and a task of tasks_b, both
//                      directions, for duration_secs.
//   slow               each step a device of `task` runs takes `factor` times as long.
//   corrupt_checkpoint the process of `task` damages the newest checkpoint in `logdir`.
// Link faults and partitions loaded from a plan (load()) are enforced by the *receiving* task
// (every cross-process message enters a task through its node actor or its data plane);
// faults added with add() act at both the sending and the receiving hooks of this process.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "config/fault_plan.h"
#include "core/status.h"

namespace actorflow {

// What happens to one message on a link. A plain value; FaultInjector::apply carries it out.
struct LinkDecision {
  bool drop = false;
  int64_t delay_ms = 0;   // deliver after this long (0 = now)
  bool duplicate = false; // deliver twice
};

// The exception a `throw` fault raises inside an actor's handler.
class InjectedFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Counters of what the injector did (a snapshot; a plain value).
struct FaultStats {
  int64_t dropped = 0;
  int64_t delayed = 0;
  int64_t duplicated = 0;
  int64_t thrown = 0;
  int64_t slowed_steps = 0;
  int64_t killed = 0;      // kill faults executed (only ever seen with a test kill handler)
  int64_t corrupted = 0;
};

// The process-wide fault injector. Thread-safe: every method may be called from any thread.
// With no faults loaded each hook costs one atomic load.
class FaultInjector {
 public:
  // The instance the runtime's hooks consult. Never destroyed (so hooks may run during static
  // destruction); the reference stays valid for the life of the process.
  static FaultInjector& global();

  FaultInjector();   // independent instances for unit tests
  ~FaultInjector();  // stops the timer thread; pending delayed deliveries are dropped
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  // Adds one fault, acting at this process's sending and receiving hooks; its time base is now
  // and its random stream comes from seed() and the number of faults added so far.
  // InvalidArgument for malformed task names or values (the same rules as plans).
  Status add(Fault f);
  // Loads the faults of `plan` that `self_task` executes or enforces (FaultPlan::involves);
  // link faults and partitions act at the receiving hook only. Adds to what is loaded; sets
  // seed(). Returns the descriptions of the faults loaded, with their derived start times.
  Result<std::vector<std::string>> load(const FaultPlan& plan, const std::string& self_task);
  // Removes every fault (delayed deliveries already scheduled still happen). Logs a summary.
  void clear();
  // Seed for add()ed faults' streams (load() sets it from the plan).
  void set_seed(uint64_t seed);
  uint64_t seed() const;
  // True when any fault is loaded (the hooks' fast path).
  bool armed() const { return armed_.load(std::memory_order_acquire); }
  // Descriptions of the loaded faults, with state ("pending", "active", "done") and hits; a copy.
  std::vector<std::string> describe() const;
  // What the injector has done so far (a copy).
  FaultStats stats() const;

  // ---- hooks the runtime calls (task names: canonical prefixes or "worker/1") ----
  // A message this process sends from `src_task` to `dst_task`: what to do with it (the default
  // LinkDecision, deliver now, when no fault applies).
  LinkDecision on_send(const std::string& src_task, const std::string& dst_task);
  // A message from `src_task` ("" if unknown) that arrived at `self_task`: what to do with it.
  LinkDecision on_receive(const std::string& src_task, const std::string& self_task);
  // The runtime saw the global step (a variable actor named global_step, or a master fetching
  // it). Starts at_step faults; a kill fault of this process kills it here.
  void on_global_step(int64_t step);
  // The last global step observed (-1 before any).
  int64_t last_global_step() const { return last_step_.load(); }
  // True while a device fault (slow, or throw in a device actor) that may still act targets
  // device `device_name` (full name): pending, active, or not yet fired. Such a device runs its
  // steps in its actor, where those faults act (never inline on a reader thread).
  bool targets_device(const std::string& device_name) const;
  // True while a fault loaded here may still hold back or drop messages this process sends (a
  // link fault or partition added with its sending side, as FaultInjector::add does; a plan's
  // link faults act only where messages arrive). A step then cannot tell a request still on its
  // way from one never sent.
  bool acts_on_sends() const;
  // Slow-down factor of device `device_name` (full name) now; 1.0 when none.
  double slow_factor(const std::string& device_name);
  // Throws InjectedFault when an armed throw fault targets an actor of kind `actor_kind` at
  // `where` (a device name or task prefix; "" matches any task). One-shot per fault.
  void maybe_throw(const std::string& actor_kind, const std::string& where);

  // Runs `fn` on the injector's timer thread after `delay` (delayed deliveries). `fn` must not
  // call back into this injector's add/load/clear.
  void run_after(std::chrono::milliseconds delay, std::function<void()> fn);
  // Applies a decision to one delivery: drops it, runs `deliver` now (twice when duplicated), or
  // schedules it on the timer thread. Returns the first error of a synchronous delivery.
  Status apply(const LinkDecision& d, const std::function<Status()>& deliver);

  // Test hook: what a kill fault does instead of SIGKILLing the process (null restores it).
  void set_kill_handler_for_testing(std::function<void(const std::string& why)> fn);

 private:
  using Clock = std::chrono::steady_clock;
  struct Active;
  struct Timed {
    Clock::time_point at;
    std::function<void()> fn;
  };
  Status add_locked(Fault f, size_t index, uint64_t seed, bool send_side, bool recv_side,
                    std::optional<double> start_secs, std::string* description);
  LinkDecision decide(const std::string& src, const std::string& dst, bool sending);
  void fire_locked(Active& a, const std::string& trigger, std::vector<std::function<void()>>* actions);
  void timer_loop();
  void ensure_timer_locked();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Active>> faults_;
  std::vector<Timed> timed_;
  std::atomic<bool> armed_{false};
  std::atomic<int64_t> last_step_{-1};
  uint64_t seed_ = 0;
  size_t added_ = 0;
  FaultStats stats_;
  std::function<void(const std::string&)> kill_fn_;
  std::thread timer_;
  bool stop_ = false;
  uint64_t generation_ = 0;
};

}  // namespace actorflow
