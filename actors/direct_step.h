// Direct steps: the steady-state fast path of a step whose work all runs on other processes.
//
// A step through the master costs seven thread hand-offs (client -> master -> local device
// actor -> remote reader -> remote device actor -> local reader -> master -> client). Once the
// master has placed, partitioned and registered a run signature whose partitions are all
//   * remote and take no feeds (run requests can go over the data plane), or
//   * local "forwarders" that only pass feeds on to other devices (_Arg -> _Send),
// it publishes a DirectPlan for it here. A Session that finds one runs the step from its own
// thread: it writes the forwarded feeds and the run requests on the data-plane connections,
// and the data plane's reader thread completes the caller's wait when every partition has
// reported (client -> remote reader -> remote device actor -> local reader -> client).
//
// Failures behave as through the master: a partition's error fails the step and aborts the
// other partitions; a task reported down (Membership -> master) fails the steps that use it
// and withdraws the plans that use it; a step timeout is DeadlineExceeded naming the step, the
// device and how long it waited (step_deadline_error); a data-plane connection that closes
// while a step waits fails it (Unavailable); a task that answers a query (after 1 s without an
// outcome, then at growing gaps) that it does not run the step fails it at once (Aborted).
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/routing.h"
#include "actors/messages.h"
#include "core/status.h"
#include "tensor/tensor.h"
#include "runtime/step_plan.h"

namespace actorflow {

// What a direct step does, derived by the master from a registered plan. Immutable once
// published; shared by the sessions that use it.
struct DirectPlan {
  // Feed `arg` is sent to the _Recv with rendezvous key `key` (runtime/step_plan.h).
  using Forward = FeedForward;
  // A registered partition of another process, started over the data plane.
  struct Dispatch {
    DeviceInfo device;
    std::string handle;
    std::vector<Forward> forwards;  // the feeds its _Recvs take, sent with its run request
  };
  std::vector<Dispatch> dispatches;   // at least one
  std::vector<std::string> feed_names;
  std::vector<DType> arg_types;       // per feed; kInvalid: fed but unused
  std::vector<Shape> arg_shapes;
  size_t num_fetches = 0;
  std::string from_task;              // the master's task prefix ("/job:host/task:0")
};

// Checks `feeds` against a plan's feed signature: every feed initialised, and of the dtype and a
// shape compatible with `types[i]` / `shapes[i]` (kInvalid: fed but unused, not checked).
// InvalidArgument naming the feed (`names[i]`) otherwise. Pure; used by the master and by direct
// steps so both reject the same feeds with the same words.
Status check_feeds(const std::vector<std::string>& names, const std::vector<DType>& types,
                   const std::vector<Shape>& shapes, const std::vector<Tensor>& feeds);

// Returns a step id unique in this process and, with overwhelming probability, across the
// cluster (random 62-bit start, then increments). Thread-safe. Every master and direct step of
// a process draws from it.
int64_t next_step_id();

// The direct-step plans of one server and the steps waiting for their outcome.
// Thread-safe: every method may be called from any thread.
class DirectSteps {
 public:
  DirectSteps() = default;
  DirectSteps(const DirectSteps&) = delete;
  DirectSteps& operator=(const DirectSteps&) = delete;

  // Publishes `plan` under the master's plan key (replacing an older one). Called by the master.
  void publish(const std::string& plan_key, std::shared_ptr<const DirectPlan> plan);
  // The plan published under `plan_key`, or null.
  std::shared_ptr<const DirectPlan> find(const std::string& plan_key) const;
  // True when any plan is published (a cheap check before computing a plan key).
  bool has_plans() const;
  // Withdraws every plan (the master's device list changed).
  void clear_plans();
  // Task `task` (a prefix such as "/job:worker/task:0") went down: withdraws the plans that
  // use it and fails the waiting steps that use it with Unavailable naming the task.
  void task_down(const std::string& task, const std::string& reason);
  // The server stops: every waiting step ends with `why` now, and every later run() too (it
  // returns `why` without sending anything). Idempotent.
  void cancel_all(const Status& why);

  // Runs one step of `plan` with `feeds` (in the plan's feed order) from the calling thread,
  // through `router` (which owns the data-plane connections). Waits at most `timeout` (0: no
  // limit other than the liveness checks above). Returns nullopt without doing anything when
  // the step cannot go direct now (a connection cannot be opened): the caller then runs it
  // through the master. Fault injection changes nothing here: link faults act in the router. Otherwise the fetches or the step's error.
  std::optional<Result<std::vector<Tensor>>> run(StepDispatcher& router, const DirectPlan& plan,
                                                 const std::vector<Tensor>& feeds,
                                                 std::chrono::milliseconds timeout);

  // From the data plane's reader: a fetched tensor / the outcome (with its typed detail) of
  // partition `device` of step `step_id`. Returns false when no direct step waits for it (the
  // message then belongs to the master).
  bool on_ret(int64_t step_id, const std::string& device, int32_t index, Tensor t);
  bool on_done(int64_t step_id, const std::string& device, const Status& outcome);
  // From the data plane's reader: the answer of `device`'s task to a query about step
  // `step_id` (StepDispatcher::query_step). Not running while the step still waits for `device` fails
  // the step at once with Aborted naming the task (the answer comes behind any outcome). Returns
  // false when no direct step waits for it.
  bool on_state(int64_t step_id, const std::string& device, bool running);

  // How many steps went direct (run() did not return nullopt) since this object was made.
  uint64_t steps_run() const { return steps_run_.load(std::memory_order_relaxed); }

 private:
  struct Waiter;
  // Completes `w` (under w's lock) with `s` unless done; returns true if this call completed it.
  static bool finish(Waiter& w, const Status& s);
  // The waiter of `step_id`, or null.
  std::shared_ptr<Waiter> waiter(int64_t step_id) const;
  // Tells the devices of `plan` in `pending` (those that have not reported) to abort the step,
  // through `router` (as this process's node actor: the peers ignore anonymous aborts).
  void abort_others(StepDispatcher& router, const DirectPlan& plan, int64_t step_id, const std::set<std::string>& pending,
                    const std::string& why);

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const DirectPlan>> plans_;
  std::unordered_map<int64_t, std::shared_ptr<Waiter>> waiting_;
  Status cancelled_;  // set by cancel_all (under mu_)
  std::atomic<uint64_t> steps_run_{0};
};

}  // namespace actorflow
