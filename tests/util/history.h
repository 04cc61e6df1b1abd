// A history of a replicated-ps job's acknowledged updates and its checker, in the manner of
// Jepsen: record every operation a client invoked and how it ended, then check the final state
// against that record (docs/reliability.md, "The history checker").
//
// The model is additive so that the final state says exactly which operations were applied and
// how often: operation k adds 1 to element k of a "marks" vector on every ps task (a
// scatter_add at index k) and 1 to a counter (global_step-like, assign_add), whose new value the
// operation returns. So after the job:
//   - marks[k] is the number of times operation k was applied on that ps task's variable:
//     0 for an acknowledged k is a lost update, 2 or more an update applied twice, a non-zero
//     mark of an id nobody invoked a phantom write;
//   - the counter values acknowledged operations saw are distinct (two operations that saw the
//     same value were applied to two different copies: two primaries, or an update lost between
//     them) and follow real time (an operation that completed before another was invoked saw a
//     smaller value);
//   - the final counter lies between the number of acknowledged operations and that number plus
//     the failed ones (a failed operation may or may not have been applied: indeterminate).
//
// Also the seeded fault schedules the history tests run (make_schedule).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace actorflow::testing {

// How an operation ended: acknowledged (the run returned OK), failed (the run returned an error:
// applied or not, nobody knows), or still pending (the job ended while it ran; indeterminate too).
enum class OpOutcome { kPending, kAcknowledged, kFailed };

// One operation of a history. `step` is the counter value an acknowledged operation returned
// (-1 otherwise); the times are microseconds since the history began.
struct HistoryOp {
  int64_t id = 0;
  int writer = 0;
  OpOutcome outcome = OpOutcome::kPending;
  int64_t step = -1;
  int64_t invoked_us = 0;
  int64_t completed_us = -1;
};

// The record of a job's operations. Writers call invoke() before they run an operation and
// complete() after; ids are dense from 0 in invocation order. Thread-safe.
class History {
 public:
  History();
  // Moves `other`'s record (locking it); `other` is left empty.
  History(History&& other) noexcept;
  History& operator=(History&&) = delete;
  // Records the invocation of a new operation by `writer`; returns its id.
  int64_t invoke(int writer);
  // Records how operation `id` ended; `step` is the counter value it returned (acknowledged
  // operations only). An unknown id or a second completion is ignored and counted in errors().
  void complete(int64_t id, OpOutcome outcome, int64_t step = -1);
  // A copy of every operation so far, by id.
  std::vector<HistoryOp> ops() const;
  // How many operations were invoked, acknowledged and failed so far.
  int64_t invoked() const;
  int64_t acknowledged() const;
  int64_t failed() const;
  // Misuses of complete() (unknown id, completed twice); a checker reports them as violations.
  int64_t errors() const;

  // One line per operation ("id writer outcome step invoked_us completed_us"), for a report file
  // or a later check. Pure on a snapshot.
  std::string to_text() const;
  // Parses to_text()'s form; InvalidArgument naming the line that does not parse. Pure.
  static Result<History> from_text(const std::string& text);

 private:
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point start_;
  std::vector<HistoryOp> ops_;
  int64_t errors_ = 0;
};

// What a check found wrong.
enum class ViolationKind {
  kLost,            // an acknowledged operation's mark is 0 on some ps task
  kAppliedTwice,    // a mark of 2 or more
  kPhantom,         // a mark of an id nobody invoked
  kBadMark,         // a mark that is not a whole number >= 0 (the model's state is corrupt)
  kDuplicateStep,   // two acknowledged operations saw the same counter value
  kNotMonotonic,    // an operation that completed before another was invoked saw a larger value
  kCounterRange,    // the final counter outside [acknowledged, acknowledged + failed + pending]
  kHistoryMisuse,   // the recorder was misused (History::errors())
};

// The name of `k` ("lost", "applied twice", ...). Pure.
const char* violation_name(ViolationKind k);

struct Violation {
  ViolationKind kind;
  int64_t id = -1;  // the operation concerned, -1 when none
  std::string what;  // one line: which ps task, which values
};

// The final state of the additive model: each ps task's marks, and the counter.
struct FinalState {
  std::vector<std::pair<std::string, std::vector<float>>> marks;  // (ps task, marks)
  int64_t counter = 0;
};

// The outcome of a check: counts, and every violation found (all kinds, each operation once per
// kind and ps task).
struct CheckReport {
  int64_t invoked = 0, acknowledged = 0, failed = 0, pending = 0;
  // Indeterminate operations (failed or pending) found applied, per ps task summed.
  int64_t indeterminate_applied = 0;
  std::vector<Violation> violations;
  bool ok() const { return violations.empty(); }
  // A short report: the counts, then up to `max_lines` violations, one per line.
  std::string to_string(size_t max_lines = 20) const;
};

// Checks `history` against `state` as the header comment says. Pure.
CheckReport check_history(const History& history, const FinalState& state);

// A fault of a schedule: `after_ms` after the job recovered from the fault before (or after its
// start), ps task `task` is killed (SIGKILL, restarted after `down_ms`) or paused (SIGSTOP,
// SIGCONT after `down_ms`).
struct ScheduledFault {
  enum Kind { kKill, kPause } kind = kKill;
  int task = 0;
  int64_t after_ms = 0;
  int64_t down_ms = 0;
};

// A schedule of `faults` faults over `ps_tasks` ps tasks, drawn from `seed` (the same seed gives
// the same schedule): kills and pauses alternate at random, pauses last from 50 ms to
// `max_pause_ms`, kills leave the task down 0 to 1000 ms, and each fault comes 300 to 1500 ms
// after the job recovered from the one before (which the runner waits for: at most one copy is
// ever down, the failures two copies promise to survive). Pure.
std::vector<ScheduledFault> make_schedule(uint64_t seed, int ps_tasks, int faults, int64_t max_pause_ms);

// One line per fault ("kill ps/1 812 ms after the last recovery, down 230 ms"). Pure.
std::string describe_schedule(const std::vector<ScheduledFault>& schedule);

}  // namespace actorflow::testing
