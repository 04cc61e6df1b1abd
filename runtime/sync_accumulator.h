// The SyncReplicas accumulator of one variable (SyncReplicasOptimizer's gradient accumulator):
// collects the replicas' gradients of one global step and hands out their average once
// `replicas_to_aggregate` have arrived. It holds only the arithmetic and the step bookkeeping
// (which step it collects for, stale and realigned contributions, group membership and closing);
// the variable actor (actors/variable_actor.cc) owns one, applies the average with the optimizer
// (device/optimizers.h), holds the waiting replicas' replies and runs the step's timer.
//
// The rules (docs/architecture/variables.md, "Sync replicas"):
//   - it aligns with the local step of its first contribution (so it joins a restored global step);
//   - a contribution below the current step is stale: dropped and counted;
//   - a contribution of a later step realigns the accumulator when nothing is collected yet (the
//     accumulator was behind), and otherwise counts for the current step;
//   - every contribution of a step uses the same optimizer and is dense or sparse throughout;
//   - once fewer than replicas_to_aggregate of total_num_replicas are left (leave), or on close,
//     it is closed: contributions fail with OutOfRange until reset (an assign or restore);
//   - with a sync deadline (SyncContribution::deadline_secs > 0) a step that has at least one
//     contribution closes short when the deadline passes (take_short: the average over the
//     contributions it got, counted) or when a contribution of a later step shows that the job
//     has moved on (add reports it as `passed`).
// Not thread-safe (the variable actor's state).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "device/optimizers.h"
#include "device/variable_call.h"
#include "tensor/tensor.h"

namespace actorflow {

class SyncAccumulator {
 public:
  // A step's averaged gradient (complete, or closed short: over the contributions it got): `dense` (float32, the variable's shape) or `rows`
  // (each row divided by the number of contributions that had it).
  struct Average {
    int64_t step = 0;
    bool sparse = false;
    Tensor dense;
    SparseRows rows;
    int64_t count = 0;  // the contributions averaged
  };
  // What add() did with a contribution.
  struct Added {
    int64_t step = -1;      // the step it counts for; -1: stale, dropped
    bool first = false;     // the first contribution of its step (a new accumulation began)
    bool complete = false;  // the step has replicas_to_aggregate contributions: take_average() now
    // Deadline mode only: the step under way when this contribution of a later step came, closed
    // short (its average over what it had, counted as short; apply it first). The contribution
    // then counts for its own step (the accumulator realigned to it).
    std::optional<Average> passed;
  };

  // Adds one contribution of `c`'s kind for `local_step`: `dense` (the gradient, checked by the
  // caller; ignored for an increment) or `sparse` (its rows with duplicates summed; moved from).
  // Errors (nothing changes): OutOfRange while closed (`closed_why` and the step not applied);
  // InvalidArgument for a local_step outside [0, 2^62], an optimizer or a dense/sparse kind other
  // than the step's earlier contributions'. `what` names the method in errors.
  Result<Added> add(const vcall::SyncContribution& c, int64_t local_step, const Tensor& dense, SparseRows* sparse,
                    const std::string& what);
  // The average of the complete step, and the step advances by one (its gradients forgotten).
  // Precondition: add() reported complete (or count() > 0).
  Average take_average();
  // A step that did not fill by its deadline: the average over the count() >= 1 contributions it
  // got (as take_average, each row of a sparse step over the contributions that had it); counted
  // as a short step (stats()[6]) and the step advances by one. Precondition: count() > 0.
  Average take_short();
  // Records the outcome of applying a taken average (counts applied updates).
  void applied(bool ok) { if (ok) ++applied_; }

  // Forgets the current step's gradients (a timeout, a restart); the step stays.
  void clear();
  // After a restart in place: forgets the gradients and the alignment (the next contribution's
  // step is taken) and starts a new generation.
  void restart();
  // A new model (assign, restore): forgets everything but the counters and re-opens.
  void reset();
  // Closes with `why` (new generation, gradients forgotten). Contributions then fail.
  void close(const std::string& why);
  // A replica ran its finish op; closes when fewer than `replicas` of `total` are left. Returns
  // true when this call closed it. Overflow-safe for any attribute values.
  bool leave(int64_t total, int64_t replicas);

  // Whether an assign must reset this accumulator (it aligned, closed or counted a leave).
  bool engaged() const { return aligned_ || closed_ || left_ > 0; }
  bool closed() const { return closed_; }
  // Why it closed (empty while open).
  const std::string& closed_why() const { return closed_why_; }
  int64_t step() const { return step_; }
  int64_t count() const { return count_; }
  // Names the current accumulation (a timer checks that its own is still under way).
  int64_t generation() const { return generation_; }
  // Stale contributions dropped and steps closed short so far.
  int64_t stale() const { return stale_; }
  int64_t short_steps() const { return short_; }
  // [step, applied, stale, realigned, left, closed, short] (op SyncAccumulatorControl "stats").
  static constexpr size_t kStats = 7;
  std::array<int64_t, kStats> stats() const;

 private:
  int64_t step_ = 0;      // the global step the accumulator collects for
  bool aligned_ = false;  // step_ was taken from a contribution (the first after a reset)
  Tensor sum_;            // dense: the gradients' sum
  int64_t count_ = 0;
  std::string opt_;       // the optimizer of the step's first contribution
  bool sparse_ = false;
  std::vector<int64_t> rows_;       // sparse: the rows seen, their summed gradients,
  std::vector<float> row_sum_;      // how many contributions had each
  std::vector<int64_t> row_count_;
  std::unordered_map<int64_t, size_t> row_at_;  // where each sparse row sits in rows_
  int64_t generation_ = 0;
  bool closed_ = false;
  std::string closed_why_;
  int64_t left_ = 0;
  int64_t applied_ = 0, stale_ = 0, realigned_ = 0, short_ = 0;
};

}  // namespace actorflow
