#include "tests/util/history.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <sstream>

namespace actorflow::testing {

History::History() : start_(std::chrono::steady_clock::now()) {}

History::History(History&& other) noexcept {
  std::lock_guard<std::mutex> l(other.mu_);
  start_ = other.start_;
  ops_ = std::move(other.ops_);
  errors_ = other.errors_;
}

int64_t History::invoke(int writer) {
  std::lock_guard<std::mutex> l(mu_);
  HistoryOp op;
  op.id = static_cast<int64_t>(ops_.size());
  op.writer = writer;
  op.invoked_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_).count();
  ops_.push_back(op);
  return op.id;
}

void History::complete(int64_t id, OpOutcome outcome, int64_t step) {
  const int64_t now =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_).count();
  std::lock_guard<std::mutex> l(mu_);
  if (id < 0 || id >= static_cast<int64_t>(ops_.size()) || ops_[static_cast<size_t>(id)].outcome != OpOutcome::kPending ||
      outcome == OpOutcome::kPending) {
    ++errors_;
    return;
  }
  HistoryOp& op = ops_[static_cast<size_t>(id)];
  op.outcome = outcome;
  op.step = outcome == OpOutcome::kAcknowledged ? step : -1;
  op.completed_us = now;
}

std::vector<HistoryOp> History::ops() const {
  std::lock_guard<std::mutex> l(mu_);
  return ops_;
}

int64_t History::invoked() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int64_t>(ops_.size());
}

int64_t History::acknowledged() const {
  std::lock_guard<std::mutex> l(mu_);
  return std::count_if(ops_.begin(), ops_.end(), [](const HistoryOp& o) { return o.outcome == OpOutcome::kAcknowledged; });
}

int64_t History::failed() const {
  std::lock_guard<std::mutex> l(mu_);
  return std::count_if(ops_.begin(), ops_.end(), [](const HistoryOp& o) { return o.outcome == OpOutcome::kFailed; });
}

int64_t History::errors() const {
  std::lock_guard<std::mutex> l(mu_);
  return errors_;
}

namespace {

const char* outcome_name(OpOutcome o) {
  switch (o) {
    case OpOutcome::kAcknowledged: return "ok";
    case OpOutcome::kFailed: return "failed";
    case OpOutcome::kPending: break;
  }
  return "pending";
}

}  // namespace

std::string History::to_text() const {
  std::ostringstream out;
  for (const HistoryOp& op : ops())
    out << op.id << ' ' << op.writer << ' ' << outcome_name(op.outcome) << ' ' << op.step << ' ' << op.invoked_us << ' '
        << op.completed_us << '\n';
  return out.str();
}

Result<History> History::from_text(const std::string& text) {
  History h;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    std::istringstream ls(line);
    HistoryOp op;
    std::string outcome, extra;
    if (!(ls >> op.id >> op.writer >> outcome >> op.step >> op.invoked_us >> op.completed_us) || (ls >> extra)) {
      return InvalidArgument("history line " + std::to_string(line_no) +
                                     ": expected 'id writer outcome step invoked_us completed_us', got '" +
                                     line.substr(0, 120) + "'");
    }
    if (op.id != static_cast<int64_t>(h.ops_.size()))
      return InvalidArgument("history line " + std::to_string(line_no) + ": id " + std::to_string(op.id) +
                                     " where " + std::to_string(h.ops_.size()) + " was due (ids are dense from 0)");
    if (outcome == "ok") op.outcome = OpOutcome::kAcknowledged;
    else if (outcome == "failed") op.outcome = OpOutcome::kFailed;
    else if (outcome == "pending") op.outcome = OpOutcome::kPending;
    else
      return InvalidArgument("history line " + std::to_string(line_no) + ": outcome '" + outcome.substr(0, 40) +
                                     "' is none of ok, failed, pending");
    h.ops_.push_back(op);
  }
  return h;
}

const char* violation_name(ViolationKind k) {
  switch (k) {
    case ViolationKind::kLost: return "lost";
    case ViolationKind::kAppliedTwice: return "applied twice";
    case ViolationKind::kPhantom: return "phantom";
    case ViolationKind::kBadMark: return "bad mark";
    case ViolationKind::kDuplicateStep: return "duplicate step";
    case ViolationKind::kNotMonotonic: return "not monotonic";
    case ViolationKind::kCounterRange: return "counter out of range";
    case ViolationKind::kHistoryMisuse: return "history misuse";
  }
  return "?";
}

std::string CheckReport::to_string(size_t max_lines) const {
  std::ostringstream out;
  out << "history: " << invoked << " operations, " << acknowledged << " acknowledged, " << failed << " failed, "
      << pending << " pending; indeterminate ones applied: " << indeterminate_applied << "; "
      << violations.size() << " violation(s)";
  for (size_t i = 0; i < violations.size() && i < max_lines; ++i)
    out << "\n  " << violation_name(violations[i].kind) << ": " << violations[i].what;
  if (violations.size() > max_lines) out << "\n  ... and " << violations.size() - max_lines << " more";
  return out.str();
}

CheckReport check_history(const History& history, const FinalState& state) {
  CheckReport r;
  const std::vector<HistoryOp> ops = history.ops();
  r.invoked = static_cast<int64_t>(ops.size());
  for (const HistoryOp& op : ops) {
    if (op.outcome == OpOutcome::kAcknowledged) ++r.acknowledged;
    else if (op.outcome == OpOutcome::kFailed) ++r.failed;
    else ++r.pending;
  }
  auto add = [&](ViolationKind k, int64_t id, std::string what) { r.violations.push_back({k, id, std::move(what)}); };
  if (history.errors() > 0)
    add(ViolationKind::kHistoryMisuse, -1, std::to_string(history.errors()) + " completion(s) of unknown or completed ids");

  // Marks: how often each operation was applied on each ps task's variable.
  for (const auto& [task, marks] : state.marks) {
    for (size_t k = 0; k < marks.size(); ++k) {
      const float m = marks[k];
      const auto id = static_cast<int64_t>(k);
      if (!std::isfinite(m) || m < 0 || m != std::floor(m)) {
        add(ViolationKind::kBadMark, id, task + ": mark " + std::to_string(k) + " is " + std::to_string(m));
        continue;
      }
      const auto times = static_cast<int64_t>(m);
      if (id >= r.invoked) {
        if (times != 0)
          add(ViolationKind::kPhantom, id, task + ": operation " + std::to_string(k) + " was never invoked but applied " +
                                               std::to_string(times) + " time(s)");
        continue;
      }
      const HistoryOp& op = ops[k];
      if (times >= 2)
        add(ViolationKind::kAppliedTwice, id, task + ": operation " + std::to_string(k) + " (writer " +
                                                  std::to_string(op.writer) + ", " + outcome_name(op.outcome) +
                                                  ") applied " + std::to_string(times) + " times");
      if (op.outcome == OpOutcome::kAcknowledged && times == 0)
        add(ViolationKind::kLost, id, task + ": acknowledged operation " + std::to_string(k) + " (writer " +
                                          std::to_string(op.writer) + ", step " + std::to_string(op.step) +
                                          ") is not in the final state");
      if (op.outcome != OpOutcome::kAcknowledged && times >= 1) ++r.indeterminate_applied;
    }
    if (static_cast<int64_t>(marks.size()) < r.invoked)
      add(ViolationKind::kBadMark, -1, task + ": " + std::to_string(marks.size()) + " marks for " +
                                           std::to_string(r.invoked) + " operations (the model is too small)");
  }

  // Counter values: distinct, and in real-time order.
  std::vector<const HistoryOp*> acked;
  for (const HistoryOp& op : ops)
    if (op.outcome == OpOutcome::kAcknowledged) acked.push_back(&op);
  std::map<int64_t, const HistoryOp*> by_step;
  for (const HistoryOp* op : acked) {
    auto [it, fresh] = by_step.emplace(op->step, op);
    if (!fresh)
      add(ViolationKind::kDuplicateStep, op->id, "operations " + std::to_string(it->second->id) + " and " +
                                                     std::to_string(op->id) + " both saw step " +
                                                     std::to_string(op->step) + " (two copies took writes)");
  }
  // For each acknowledged operation B, every acknowledged A that completed before B was invoked
  // must have seen a smaller value: sorted by completion, a running maximum of the values of those
  // completed before B's invocation.
  std::vector<const HistoryOp*> by_completion = acked;
  std::sort(by_completion.begin(), by_completion.end(),
            [](const HistoryOp* a, const HistoryOp* b) { return a->completed_us < b->completed_us; });
  std::vector<const HistoryOp*> by_invocation = acked;
  std::sort(by_invocation.begin(), by_invocation.end(),
            [](const HistoryOp* a, const HistoryOp* b) { return a->invoked_us < b->invoked_us; });
  size_t next = 0;
  const HistoryOp* max_before = nullptr;
  for (const HistoryOp* b : by_invocation) {
    while (next < by_completion.size() && by_completion[next]->completed_us < b->invoked_us) {
      if (!max_before || by_completion[next]->step > max_before->step) max_before = by_completion[next];
      ++next;
    }
    if (max_before && max_before->step >= b->step)
      add(ViolationKind::kNotMonotonic, b->id, "operation " + std::to_string(b->id) + " saw step " +
                                                   std::to_string(b->step) + " after operation " +
                                                   std::to_string(max_before->id) + " had completed with step " +
                                                   std::to_string(max_before->step));
  }

  const int64_t lo = r.acknowledged, hi = r.acknowledged + r.failed + r.pending;
  if (state.counter < lo || state.counter > hi)
    add(ViolationKind::kCounterRange, -1, "final counter " + std::to_string(state.counter) + " outside [" +
                                              std::to_string(lo) + ", " + std::to_string(hi) + "]");
  if (!by_step.empty() && by_step.rbegin()->first > state.counter)
    add(ViolationKind::kCounterRange, by_step.rbegin()->second->id,
        "final counter " + std::to_string(state.counter) + " below the step " + std::to_string(by_step.rbegin()->first) +
            " an acknowledged operation saw (a rollback)");
  return r;
}

std::vector<ScheduledFault> make_schedule(uint64_t seed, int ps_tasks, int faults, int64_t max_pause_ms) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::vector<ScheduledFault> out;
  for (int i = 0; i < faults; ++i) {
    ScheduledFault f;
    f.kind = uniform(0, 1) == 0 ? ScheduledFault::kKill : ScheduledFault::kPause;
    f.task = static_cast<int>(uniform(0, std::max(ps_tasks, 1) - 1));
    f.after_ms = uniform(300, 1500);
    f.down_ms = f.kind == ScheduledFault::kKill ? uniform(0, 1000) : uniform(50, std::max<int64_t>(max_pause_ms, 50));
    out.push_back(f);
  }
  return out;
}

std::string describe_schedule(const std::vector<ScheduledFault>& schedule) {
  std::ostringstream out;
  for (const ScheduledFault& f : schedule)
    out << (f.kind == ScheduledFault::kKill ? "kill" : "pause") << " ps/" << f.task << " " << f.after_ms
        << " ms after the last recovery, down " << f.down_ms << " ms\n";
  return out.str();
}

}  // namespace actorflow::testing
