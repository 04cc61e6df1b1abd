// The waits of a synchronous accumulator (SyncReplicasOptimizer's, in a variable actor;
// docs/architecture/variables.md): while runs wait for a step to complete, one registered wait
// (core/waits.h, kind "sync-contributions") per replica whose gradient for that step has not
// come, on that replica's task. Which replicas exist is learnt from the contributions
// themselves (the task each came from, ResourceCall::caller_task, set by the device actor that
// ran the contributing step): a replica that has contributed to any step so far and not to this one is
// missing. Before every replica has contributed once, the wait names how many are missing
// without naming them (on no task). Not thread-safe: one actor owns it.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/waits.h"

namespace actorflow {

class SyncWaits {
 public:
  // At most this many replicas are remembered (a peer names its own task: bounded).
  static constexpr size_t kMaxReplicas = 1024;

  // A contribution from `caller` ("" when unknown) counted for `step`, which aggregates
  // `replicas` gradients.
  void contributed(int64_t step, const std::string& caller, int64_t replicas) {
    if (step != step_) {
      step_ = step;
      from_.clear();
    }
    replicas_ = replicas;
    if (caller.empty()) return;
    from_.insert(caller);
    if (known_.size() < kMaxReplicas) known_.insert(caller);
  }

  // For a report on the accumulator's `step`: " (from A, B); missing C, D", or " (from A); N more
  // expected from replicas not seen yet" before every replica has contributed once; "" when no
  // contribution to `step` was recorded.
  std::string who(int64_t step) const {
    if (step != step_ || from_.empty()) return "";
    std::string out;
    for (const auto& t : from_) out += (out.empty() ? " (from " : ", ") + t;
    out += ")";
    std::string missing;
    for (const auto& t : known_)
      if (!from_.count(t)) missing += (missing.empty() ? "; missing " : ", ") + t;
    if (missing.empty())
      return out + "; " + std::to_string(replicas_ - static_cast<int64_t>(from_.size())) +
             " more expected from replicas not seen yet";
    return out + missing;
  }

  // Brings the registered waits in line with the accumulator: `var` collecting for `step` with
  // `count` gradients, `waiting` runs held until it completes.
  void refresh(const std::string& var, int64_t step, int64_t count, bool waiting) {
    if (!waiting || count == 0 || step != step_) {
      waits_.clear();
      shown_.clear();
      if (count == 0 || step != step_) from_.clear();
      return;
    }
    std::vector<std::string> missing;
    for (const auto& t : known_)
      if (!from_.count(t)) missing.push_back(t);
    const std::string head = "variable '" + var + "': step " + std::to_string(step) + " has " + std::to_string(count) +
                             " of " + std::to_string(replicas_) + " gradients";
    std::string from;
    for (const auto& t : from_) from += (from.empty() ? " (from " : ", ") + t;
    if (!from.empty()) from += ")";
    std::string shown = head + from + "|";
    for (const auto& m : missing) shown += m + ",";
    if (shown == shown_) return;
    shown_ = shown;
    waits_.clear();
    if (missing.empty()) {
      waits_.emplace_back("sync-contributions",
                          head + from + "; " + std::to_string(replicas_ - count) + " more expected from replicas not seen yet",
                          "");
      return;
    }
    for (const auto& m : missing)
      waits_.emplace_back("sync-contributions", head + from + "; missing the gradient of " + m, m);
  }

 private:
  int64_t step_ = -1;
  int64_t replicas_ = 0;
  std::set<std::string> from_;   // contributors to step_
  std::set<std::string> known_;  // every contributor seen
  std::string shown_;            // what the current waits say
  std::vector<WaitHandle> waits_;
};

}  // namespace actorflow
