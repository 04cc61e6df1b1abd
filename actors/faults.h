// Fault injection: seeded, reproducible fault plans and the process-wide FaultInjector that the
// runtime consults at its hook points.
//
// A plan is TOML (see docs/reliability.md, "Fault injection"):
//
//   seed = 7
//   [[fault]]
//   kind = "kill"          # kill | throw | drop | delay | duplicate | partition | slow | corrupt_checkpoint
//   task = "worker/1"
//   at_step = 300
//
// Every random choice of a fault comes from its own stream, derived from the plan's seed and the
// fault's index in the plan, so a plan replays the same way (per process: the n-th decision of a
// fault is the same for the same seed; which message meets it depends on message order).
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
#include <string_view>
#include <thread>
#include <vector>

#include "config/cluster_spec.h"
#include "core/status.h"

namespace actorflow {

// Limits of fault plans: times (after_secs, duration_secs, jitter_secs) in seconds, and the size
// of a plan file.
constexpr double kMaxFaultSecs = 1e6;
constexpr uint64_t kMaxPlanBytes = 1 << 20;


enum class FaultKind { kKill, kThrow, kDrop, kDelay, kDuplicate, kPartition, kSlow, kCorruptCheckpoint };

// "kill", "throw", ... as written in plans.
const char* fault_kind_name(FaultKind k);

// One fault. Task names are canonical task prefixes ("/job:worker/replica:0/task:1") once the
// fault has been parsed or added; builders and add() accept "worker/1" too.
struct Fault {
  FaultKind kind = FaultKind::kKill;
  std::string task;                            // kill, throw, slow, corrupt_checkpoint
  std::vector<std::string> tasks_a, tasks_b;   // partition
  std::string src, dst;                        // drop, delay, duplicate ("" = any task)
  std::optional<int64_t> at_step;              // trigger: the observed global step reaches this
  std::optional<double> after_secs;            // trigger: seconds after the plan was loaded
  std::optional<double> duration_secs;         // how long a window fault lasts (none = until cleared)
  double jitter_secs = 0;                      // start moved later by a seed-derived U[0, jitter)
  double probability = 1.0;                    // drop, delay, duplicate: per message
  int64_t delay_ms = 0;                        // delay
  double factor = 1.0;                         // slow (> 1)
  std::string device;                          // slow: "CPU:0" ("" = every device of the task)
  std::string actor = "device";                // throw: "device" or "variable"
  std::string mode = "flip";                   // corrupt_checkpoint: "flip" or "truncate"
  std::string logdir;                          // corrupt_checkpoint
  int line = 0, column = 0;                    // position of the [[fault]] in its plan file

  // "kill worker/1 at step 300", "drop host/0 -> worker/1 p=0.3", ... Pure.
  std::string describe() const;

  // Builders for tests and embedders (task names as "worker/1" or full prefixes).
  static Fault kill_after(const std::string& task, double secs);
  static Fault kill_at_step(const std::string& task, int64_t step);
  static Fault throw_in(const std::string& task, const std::string& actor = "device");
  static Fault drop(const std::string& src, const std::string& dst, double probability = 1.0);
  static Fault delay(const std::string& src, const std::string& dst, int64_t delay_ms, double probability = 1.0);
  static Fault duplicate(const std::string& src, const std::string& dst, double probability = 1.0);
  static Fault partition(std::vector<std::string> a, std::vector<std::string> b, double secs);
  static Fault slow(const std::string& task, double factor, const std::string& device = "");
  static Fault corrupt_checkpoint(const std::string& task, const std::string& logdir, const std::string& mode = "flip");
};

// A parsed plan. Plain value.
struct FaultPlan {
  uint64_t seed = 0;
  std::string source = "<plan>";  // file name used in error messages
  std::vector<Fault> faults;

  // Parses and validates a plan. InvalidArgument listing every mistake as
  // "<source>:<line>:<column>: fault[<i>].<key>: <what>" (unknown keys and kinds, keys that do
  // not apply to the kind, wrong types, out-of-range values, malformed or repeated task names).
  static Result<FaultPlan> parse(std::string_view toml, const std::string& source = "<plan>");
  static Result<FaultPlan> from_file(const std::string& path);

  // The plan as TOML; parse(to_toml()) gives an equal plan (positions aside). Pure.
  std::string to_toml() const;
  // Seconds after load at which fault i starts: after_secs (0 when absent) plus its seed-derived
  // jitter; nullopt for a fault triggered by at_step. Pure: the same seed gives the same times.
  std::optional<double> start_secs(size_t i) const;
  // True when task `self_task` (any accepted spelling) executes or enforces fault i: it is the
  // fault's task, the receiving end of a link fault (or any task when dst is omitted), or in
  // either set of a partition.
  bool involves(size_t i, const std::string& self_task) const;
  // Every task the plan names, canonical, sorted, without duplicates.
  std::vector<std::string> tasks() const;
};

// A seed-derived random stream (splitmix64): the same seed gives the same sequence on every
// platform. Not thread-safe.
class FaultRng {
 public:
  explicit FaultRng(uint64_t seed) : state_(seed) {}
  // The stream of fault `index`, for `purpose` (0 = per-message decisions, 1 = start jitter).
  static FaultRng stream(uint64_t plan_seed, uint64_t index, uint64_t purpose);
  uint64_t next();
  // Uniform in [0, 1).
  double uniform();

 private:
  uint64_t state_;
};

// What happens to one message on a link.
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

// Counters of what the injector did (a snapshot).
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
  // The instance the runtime's hooks consult. Never destroyed.
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
  // Descriptions of the loaded faults, with state ("pending", "active", "done").
  std::vector<std::string> describe() const;
  FaultStats stats() const;

  // ---- hooks the runtime calls (task names: canonical prefixes or "worker/1") ----
  // A message this process sends from `src_task` to `dst_task`.
  LinkDecision on_send(const std::string& src_task, const std::string& dst_task);
  // A message from `src_task` ("" if unknown) that arrived at `self_task`.
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

// The task prefix of a device name ("/job:w/replica:0/task:1/device:CPU:0" -> "/job:w/replica:0/task:1").
std::string task_of_device(const std::string& device_name);
// "worker/1" for a canonical task prefix (the input unchanged when it is not one).
std::string short_task_name(const std::string& task_prefix);

// OK when every task `plan` names is a task of `cluster`; else InvalidArgument naming the
// plan's [[fault]] line and the task. Pure; thread-safe.
Status check_plan_tasks(const FaultPlan& plan, const ClusterSpec& cluster);
// The canonical task prefix for "worker/1", "/job:worker/task:1" or a full prefix.
Result<std::string> canonical_task(const std::string& name);
// True for the global step variable's name or output: "global_step", "global_step:0",
// "scope/global_step". Pure.
bool is_global_step_name(const std::string& name);

}  // namespace actorflow
