// Step traces, the recording side: what one process did for a step that asked to be traced
// (RunOptions::trace_level = kFullTrace, include/actorflow/session.h).
//
// A traced step is armed in every process it touches before it runs (StepTraces::arm, by the
// session through each task's node actor) and its events are taken after it ran
// (StepTraces::take). While armed, the executor records every op, the router every tensor
// transfer, the variable actors every call and every synchronous wait, each into the step's
// StepTrace. Every recording site first asks step_trace(step_id): with no step armed in the
// process that is one relaxed atomic load and a branch, so untraced steps take the untraced path.
//
// Bounds: at most kMaxArmed steps armed at once per process (arming one more forgets the oldest,
// whose later take() is NotFound); at most max_events events per step and process (past it
// events are counted in `dropped`, not kept); every text of an event cut to kMaxText bytes.
// Thread-safety: everything here is thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace actorflow {

// One recorded span (an instant when end_ns == start_ns). Plain value.
struct TraceEvent {
  std::string task;   // the task that recorded it ("/job:ps/replica:0/task:0"): the trace's process
  std::string track;  // the device or actor it ran on: the trace's thread
  std::string name;   // op name, rendezvous key, variable name
  std::string kind;   // "op", "send", "arrive", "deliver", "variable", "sync_wait", "transfer", "step"
  std::string op;     // op type, variable method, or how a tensor travelled
  int64_t start_ns = 0;  // the recording process's steady clock (StepStats: the client's clock)
  int64_t end_ns = 0;
  std::vector<std::pair<std::string, int64_t>> nums;       // e.g. {"bytes", 16}
  std::vector<std::pair<std::string, std::string>> texts;  // e.g. {"to", "/job:ps/.../device:CPU:0"}

  // The number named `key`, or `otherwise`. Pure.
  int64_t num(const std::string& key, int64_t otherwise = -1) const;
  // The text named `key`, or "". Pure.
  std::string text(const std::string& key) const;
};

// The steady clock in nanoseconds: the clock every event of this process is recorded in.
int64_t trace_clock_ns();

// A random number fixed for the life of this process: tells a trace's collector whether a task
// lives in its own process (same clock, no alignment needed). Thread-safe.
uint64_t trace_process_token();

// The events of one armed step in this process. Thread-safe (any thread records).
class StepTrace {
 public:
  static constexpr size_t kMaxText = 512;
  explicit StepTrace(size_t max_events) : max_events_(max_events) {}
  // Keeps `e` (its texts cut to kMaxText bytes), or counts it as dropped past max_events.
  void add(TraceEvent e);
  // The events so far and how many were dropped.
  std::pair<std::vector<TraceEvent>, int64_t> take();

 private:
  const size_t max_events_;
  std::mutex mu_;
  std::vector<TraceEvent> events_;
  int64_t dropped_ = 0;
};

namespace detail {
inline std::atomic<int> g_armed_steps{0};  // how many steps are armed in this process
}  // namespace detail

// The process's armed steps. Never destroyed.
class StepTraces {
 public:
  static constexpr size_t kMaxArmed = 64;
  static constexpr size_t kDefaultMaxEvents = 100000;
  static constexpr size_t kMaxEventsLimit = 1000000;

  static StepTraces& global();
  // Whether any step is armed in this process (one relaxed load).
  static bool any() { return detail::g_armed_steps.load(std::memory_order_relaxed) != 0; }

  // Arms `step_id` with room for `max_events` events (clamped to [1, kMaxEventsLimit]); arming
  // an armed step keeps its events. Past kMaxArmed the oldest armed step is forgotten.
  void arm(int64_t step_id, size_t max_events);
  // The trace of `step_id`, null when it is not armed.
  std::shared_ptr<StepTrace> find(int64_t step_id) const;
  // Disarms `step_id` and returns its events and dropped count; NotFound naming the step when it
  // was not armed here (never, already taken, or forgotten past kMaxArmed).
  Result<std::pair<std::vector<TraceEvent>, int64_t>> take(int64_t step_id);
  // How many steps are armed now.
  size_t armed() const;

 private:
  StepTraces() = default;
  mutable std::mutex mu_;
  std::map<int64_t, std::shared_ptr<StepTrace>> steps_;
  std::deque<int64_t> order_;  // arming order, oldest first
};

// The trace of `step_id` in this process, or null: the check every recording site makes (one
// relaxed atomic load when no step is armed).
inline std::shared_ptr<StepTrace> step_trace(int64_t step_id) {
  if (!StepTraces::any()) return nullptr;
  return StepTraces::global().find(step_id);
}

// Events and their dropped count as bytes, for the trip from a task to the collector. Pure.
std::string encode_trace_events(const std::vector<TraceEvent>& events, int64_t dropped);
// The inverse; DataLoss naming the byte offset for truncated or malformed input, and
// ResourceExhausted when it holds more than `max_events` events (nothing is allocated for them
// beyond what arrived). Pure.
Result<std::pair<std::vector<TraceEvent>, int64_t>> decode_trace_events(const std::string& bytes,
                                                                       size_t max_events);

}  // namespace actorflow
