#include "runtime/sync_accumulator.h"

#include <limits>

#include "core/checked_math.h"

namespace actorflow {

Result<SyncAccumulator::Added> SyncAccumulator::add(const vcall::SyncContribution& c, int64_t local_step,
                                                    const Tensor& dense, SparseRows* sparse, const std::string& what) {
  const std::string opt = c.optimizer_name();
  if (count_ > 0 && opt != opt_)
    return InvalidArgument(what + ": optimizer '" + opt + "' for step " + std::to_string(step_) +
                           ", whose other contributions use '" + opt_ + "'");
  // A step number, counted up from here: never negative nor near the end of int64.
  if (local_step < 0 || local_step > (int64_t{1} << 62))
    return InvalidArgument(what + ": local_step " + std::to_string(local_step) + " is not in [0, 2^62]");
  if (closed_)
    return OutOfRange(closed_why_ + "; the gradient of step " + std::to_string(local_step) + " was not applied");
  if (count_ > 0 && sparse_ != c.sparse)
    return InvalidArgument(what + ": a " + (c.sparse ? "sparse" : "dense") + " gradient for step " +
                           std::to_string(step_) + ", whose other contributions are " + (c.sparse ? "dense" : "sparse"));
  Added out;
  if (!aligned_) {  // the first contribution: start at its step (the global step)
    step_ = local_step;
    aligned_ = true;
  }
  if (local_step < step_) {  // stale: dropped and counted
    ++stale_;
    return out;
  }
  // A contribution of a later step than the accumulator's: with nothing collected yet, the
  // accumulator is behind (its last step failed here, by a timeout or a restart, while the
  // global step went on), so it realigns to the contribution's step and never lags. With
  // gradients already collected it counts for the current step (a replica that started its
  // next step early, a benign race: the step still aggregates replicas_to_aggregate fresh
  // gradients, as TensorFlow's accumulators accept local_step >= their step).
  // Deadline mode: a contribution of a later step while this step collects means the job has
  // passed this step (its barrier closed it short, or completed it without this accumulator's
  // missing contributions): it closes short here too, so no accumulator lags the global step.
  if (c.deadline_secs > 0 && local_step > step_ && count_ > 0) out.passed = take_short();
  if (local_step > step_ && count_ == 0) {
    step_ = local_step;
    ++realigned_;
  }
  if (c.sparse) {
    // Sum the contribution's rows into the step's, counting the contributions per row.
    sparse_ = true;
    for (size_t j = 0; j < sparse->rows.size(); ++j) {
      auto [it, fresh] = row_at_.emplace(sparse->rows[j], rows_.size());
      const float* g = sparse->grad.data() + j * static_cast<size_t>(sparse->row);
      if (fresh) {
        rows_.push_back(sparse->rows[j]);
        row_sum_.insert(row_sum_.end(), g, g + sparse->row);
        row_count_.push_back(1);
      } else {
        float* acc = row_sum_.data() + it->second * static_cast<size_t>(sparse->row);
        for (int64_t k = 0; k < sparse->row; ++k) acc[k] += g[k];
        ++row_count_[it->second];
      }
    }
  }
  if (count_ == 0) {
    opt_ = opt;
    out.first = true;
    if (!c.increment && !c.sparse) sum_ = dense.deep_copy();
    ++generation_;
  } else if (!c.increment && !c.sparse) {
    float* sum = sum_.data<float>();
    const float* g = dense.data<float>();
    for (int64_t i = 0, n = dense.num_elements(); i < n; ++i) sum[i] += g[i];
  }
  ++count_;
  out.step = step_;
  out.complete = count_ >= c.replicas;
  return out;
}

SyncAccumulator::Average SyncAccumulator::take_short() {
  ++short_;
  return take_average();
}

SyncAccumulator::Average SyncAccumulator::take_average() {
  Average a;
  a.step = step_;
  a.count = count_;
  a.sparse = sparse_;
  if (sparse_) {
    // Each row's mean over the contributions that had it.
    a.rows.rows = std::move(rows_);
    a.rows.grad = std::move(row_sum_);
    a.rows.row = a.rows.rows.empty() ? 0 : static_cast<int64_t>(a.rows.grad.size() / a.rows.rows.size());
    for (size_t j = 0; j < a.rows.rows.size(); ++j) {
      const float inv = 1.f / static_cast<float>(row_count_[j]);
      for (int64_t k = 0; k < a.rows.row; ++k) a.rows.grad[j * static_cast<size_t>(a.rows.row) + k] *= inv;
    }
  } else if (sum_.is_initialized() && count_ > 0) {
    float* sum = sum_.data<float>();
    const float inv = 1.f / static_cast<float>(count_);
    for (int64_t i = 0, n = sum_.num_elements(); i < n; ++i) sum[i] *= inv;
    a.dense = std::move(sum_);
  }
  ++step_;
  clear();
  return a;
}

void SyncAccumulator::clear() {
  sum_ = Tensor();
  count_ = 0;
  opt_.clear();
  sparse_ = false;
  rows_.clear();
  row_sum_.clear();
  row_count_.clear();
  row_at_.clear();
}

void SyncAccumulator::restart() {
  clear();
  aligned_ = false;
  ++generation_;
}

void SyncAccumulator::reset() {
  clear();
  step_ = 0;
  aligned_ = false;
  closed_ = false;  // a new (or restored) model: replicas join again
  closed_why_.clear();
  left_ = 0;
}

void SyncAccumulator::close(const std::string& why) {
  closed_ = true;
  closed_why_ = why;
  clear();
  ++generation_;
}

bool SyncAccumulator::leave(int64_t total, int64_t replicas) {
  ++left_;
  int64_t remaining = 0;  // total and replicas are a peer's attributes: no overflowing subtraction
  if (!checked_sub(total, left_, &remaining))
    remaining = total < 0 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
  if (closed_ || remaining >= replicas) return false;
  close("synchronous training ended: " + std::to_string(left_) + " of " + std::to_string(total) +
        " replicas finished, fewer than the " + std::to_string(replicas) + " a step aggregates are left");
  return true;
}

std::array<int64_t, SyncAccumulator::kStats> SyncAccumulator::stats() const {
  return {step_, applied_, stale_, realigned_, left_, closed_ ? 1 : 0, short_};
}

}  // namespace actorflow
