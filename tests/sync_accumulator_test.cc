// The SyncReplicas accumulator (runtime/sync_accumulator.h) on its own: averages worked out by
// hand (dense, sparse per row), stale and later-step contributions, mixing errors, closing by
// leave and close, what reset and restart forget, and the sync deadline's short steps (the
// average over the gradients that came, late gradients stale, a later step closing short).
#include <gtest/gtest.h>

#include <vector>

#include "runtime/sync_accumulator.h"

namespace actorflow {
namespace {

Tensor vec(std::vector<float> v) {
  Tensor t(DType::kFloat32, Shape{static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i];
  return t;
}

vcall::SyncContribution dense_sgd(int64_t replicas) {
  vcall::SyncContribution c;
  c.opt = Optimizer::kSgd;
  c.replicas = replicas;
  return c;
}

TEST(SyncAccumulatorTest, AveragesADenseStepOnceAndAdvances) {
  SyncAccumulator acc;
  const auto c = dense_sgd(3);
  auto a = acc.add(c, 7, vec({1, 2}), nullptr, "apply_sync");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->step, 7);  // aligned with its first contribution's local step
  EXPECT_TRUE(a->first);
  EXPECT_FALSE(a->complete);
  a = acc.add(c, 7, vec({3, -2}), nullptr, "apply_sync");
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->first);
  EXPECT_FALSE(a->complete);
  a = acc.add(c, 7, vec({-1, 6}), nullptr, "apply_sync");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->complete);
  // (1 + 3 - 1) / 3 = 1, (2 - 2 + 6) / 3 = 2.
  SyncAccumulator::Average avg = acc.take_average();
  EXPECT_EQ(avg.step, 7);
  EXPECT_FALSE(avg.sparse);
  ASSERT_TRUE(avg.dense.is_initialized());
  EXPECT_FLOAT_EQ(avg.dense.data<float>()[0], 1.f);
  EXPECT_FLOAT_EQ(avg.dense.data<float>()[1], 2.f);
  acc.applied(true);
  EXPECT_EQ(acc.step(), 8);
  EXPECT_EQ(acc.count(), 0);
  const auto s = acc.stats();
  EXPECT_EQ(s[0], 8);  // step
  EXPECT_EQ(s[1], 1);  // applied
}

TEST(SyncAccumulatorTest, StaleContributionsAreDroppedAndCountedLaterOnesRealignWhenEmpty) {
  SyncAccumulator acc;
  const auto c = dense_sgd(2);
  ASSERT_TRUE(acc.add(c, 5, vec({1}), nullptr, "apply_sync").ok());
  auto stale = acc.add(c, 4, vec({100}), nullptr, "apply_sync");
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(stale->step, -1);
  EXPECT_EQ(acc.count(), 1);  // the stale one added nothing
  // A later step with gradients already collected counts for the current step.
  auto early = acc.add(c, 6, vec({3}), nullptr, "apply_sync");
  ASSERT_TRUE(early.ok());
  EXPECT_EQ(early->step, 5);
  EXPECT_TRUE(early->complete);
  EXPECT_FLOAT_EQ(acc.take_average().dense.data<float>()[0], 2.f);
  // Now empty at step 6: a contribution of step 9 realigns it (it was behind).
  auto later = acc.add(c, 9, vec({1}), nullptr, "apply_sync");
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->step, 9);
  const auto s = acc.stats();
  EXPECT_EQ(s[2], 1);  // stale
  EXPECT_EQ(s[3], 1);  // realigned
}

TEST(SyncAccumulatorTest, SparseRowsAreAveragedOverTheContributionsThatHadThem) {
  SyncAccumulator acc;
  vcall::SyncContribution c = dense_sgd(2);
  c.sparse = true;
  // Rows of 2 elements. Contribution 1: row 0 = [1, 2], row 3 = [4, 4].
  SparseRows a = sum_sparse_rows({0, 3}, std::vector<float>{1, 2, 4, 4}.data(), 2);
  // Contribution 2: row 3 twice ([2, 0] + [0, 2] summed first) and row 1 = [6, 8].
  SparseRows b = sum_sparse_rows({3, 1, 3}, std::vector<float>{2, 0, 6, 8, 0, 2}.data(), 2);
  ASSERT_EQ(b.rows, (std::vector<int64_t>{3, 1}));
  ASSERT_TRUE(acc.add(c, 0, Tensor(), &a, "sparse_apply_sync").ok());
  auto done = acc.add(c, 0, Tensor(), &b, "sparse_apply_sync");
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(done->complete);
  SyncAccumulator::Average avg = acc.take_average();
  ASSERT_TRUE(avg.sparse);
  ASSERT_EQ(avg.rows.rows, (std::vector<int64_t>{0, 3, 1}));
  EXPECT_EQ(avg.rows.row, 2);
  // Row 0: only a had it: [1, 2]. Row 3: ([4, 4] + [2, 2]) / 2 = [3, 3]. Row 1: [6, 8].
  EXPECT_EQ(avg.rows.grad, (std::vector<float>{1, 2, 3, 3, 6, 8}));
}

TEST(SyncAccumulatorTest, MixingOptimizersKindsOrBadStepsIsAnErrorThatChangesNothing) {
  SyncAccumulator acc;
  auto c = dense_sgd(3);
  ASSERT_TRUE(acc.add(c, 2, vec({1}), nullptr, "apply_sync").ok());
  vcall::SyncContribution adam = c;
  adam.opt = Optimizer::kAdam;
  auto mixed = acc.add(adam, 2, vec({1}), nullptr, "apply_sync");
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("optimizer 'adam' for step 2, whose other contributions use 'sgd'"),
            std::string::npos)
      << mixed.status();
  vcall::SyncContribution sparse = c;
  sparse.sparse = true;
  SparseRows r = sum_sparse_rows({0}, std::vector<float>{1}.data(), 1);
  auto kinds = acc.add(sparse, 2, Tensor(), &r, "sparse_apply_sync");
  ASSERT_FALSE(kinds.ok());
  EXPECT_NE(kinds.status().message().find("a sparse gradient for step 2"), std::string::npos) << kinds.status();
  auto negative = acc.add(c, -1, vec({1}), nullptr, "apply_sync");
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(acc.count(), 1);
}

TEST(SyncAccumulatorTest, LeavingBelowTheQuorumClosesUntilAReset) {
  SyncAccumulator acc;
  const auto c = dense_sgd(2);
  ASSERT_TRUE(acc.add(c, 0, vec({1}), nullptr, "apply_sync").ok());
  const int64_t gen = acc.generation();
  EXPECT_FALSE(acc.leave(3, 2));  // 2 of 3 left: still a quorum
  EXPECT_TRUE(acc.leave(3, 2));   // 1 left
  EXPECT_TRUE(acc.closed());
  EXPECT_GT(acc.generation(), gen);  // the pending step's timer is void
  EXPECT_EQ(acc.count(), 0);
  EXPECT_NE(acc.closed_why().find("2 of 3 replicas finished"), std::string::npos) << acc.closed_why();
  auto refused = acc.add(c, 0, vec({1}), nullptr, "apply_sync");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kOutOfRange);
  EXPECT_FALSE(acc.leave(3, 2));  // already closed
  EXPECT_EQ(acc.stats()[4], 3);
  // Huge attribute values do not overflow.
  SyncAccumulator other;
  EXPECT_FALSE(other.leave(INT64_MIN, INT64_MIN));
  acc.reset();
  EXPECT_FALSE(acc.closed());
  EXPECT_FALSE(acc.engaged());
  auto again = acc.add(c, 40, vec({1}), nullptr, "apply_sync");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->step, 40);  // re-aligned with the next contribution
}

TEST(SyncAccumulatorTest, RestartForgetsTheGradientsAndTheAlignmentButNotTheCounters) {
  SyncAccumulator acc;
  const auto c = dense_sgd(2);
  ASSERT_TRUE(acc.add(c, 10, vec({1}), nullptr, "apply_sync").ok());
  ASSERT_TRUE(acc.add(c, 9, vec({1}), nullptr, "apply_sync").ok());  // stale
  acc.restart();
  EXPECT_EQ(acc.count(), 0);
  auto a = acc.add(c, 3, vec({1}), nullptr, "apply_sync");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->step, 3);
  EXPECT_EQ(acc.stats()[2], 1);
}

TEST(SyncAccumulatorTest, AnIncrementCountsWithoutAGradient) {
  SyncAccumulator acc;
  vcall::SyncContribution inc;
  inc.increment = true;
  inc.replicas = 2;
  ASSERT_TRUE(acc.add(inc, 0, Tensor(), nullptr, "apply_sync").ok());
  auto done = acc.add(inc, 0, Tensor(), nullptr, "apply_sync");
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->complete);
  SyncAccumulator::Average avg = acc.take_average();
  EXPECT_FALSE(avg.dense.is_initialized());
  EXPECT_EQ(acc.step(), 1);
}

// A step closed short at the deadline averages the gradients it got: 2 of 3 here.
TEST(SyncAccumulatorTest, AShortStepAveragesWhatCameAndItsLateGradientsAreStale) {
  SyncAccumulator acc;
  vcall::SyncContribution c = dense_sgd(3);
  c.deadline_secs = 0.5;
  ASSERT_TRUE(acc.add(c, 4, vec({1, 2}), nullptr, "apply_sync").ok());
  auto a = acc.add(c, 4, vec({3, -8}), nullptr, "apply_sync");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->complete);
  EXPECT_FALSE(a->passed.has_value());
  // The deadline passed with 2 of 3: (1 + 3) / 2 = 2, (2 - 8) / 2 = -3.
  SyncAccumulator::Average avg = acc.take_short();
  EXPECT_EQ(avg.step, 4);
  EXPECT_EQ(avg.count, 2);
  ASSERT_TRUE(avg.dense.is_initialized());
  EXPECT_FLOAT_EQ(avg.dense.data<float>()[0], 2.f);
  EXPECT_FLOAT_EQ(avg.dense.data<float>()[1], -3.f);
  acc.applied(true);
  EXPECT_EQ(acc.step(), 5);
  EXPECT_EQ(acc.count(), 0);
  // The third replica's gradient of step 4 comes late: stale, dropped and counted.
  auto late = acc.add(c, 4, vec({100, 100}), nullptr, "apply_sync");
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->step, -1);
  EXPECT_EQ(acc.count(), 0);
  // One gradient alone: its own value.
  ASSERT_TRUE(acc.add(c, 5, vec({-1, 7}), nullptr, "apply_sync").ok());
  avg = acc.take_short();
  EXPECT_EQ(avg.count, 1);
  EXPECT_FLOAT_EQ(avg.dense.data<float>()[0], -1.f);
  EXPECT_FLOAT_EQ(avg.dense.data<float>()[1], 7.f);
  acc.applied(true);
  const auto s = acc.stats();
  EXPECT_EQ(s[0], 6);  // step
  EXPECT_EQ(s[1], 2);  // applied
  EXPECT_EQ(s[2], 1);  // stale
  EXPECT_EQ(s[3], 0);  // realigned
  EXPECT_EQ(s[6], 2);  // short
}

// Sparse rows of a short step: each row over the contributions that had it.
TEST(SyncAccumulatorTest, AShortSparseStepAveragesEachRowOverItsContributions) {
  SyncAccumulator acc;
  vcall::SyncContribution c = dense_sgd(4);
  c.sparse = true;
  c.deadline_secs = 1;
  SparseRows a = sum_sparse_rows({2, 5}, std::vector<float>{1, 3}.data(), 1);
  SparseRows b = sum_sparse_rows({5}, std::vector<float>{7}.data(), 1);
  ASSERT_TRUE(acc.add(c, 0, Tensor(), &a, "sparse_apply_sync").ok());
  ASSERT_TRUE(acc.add(c, 0, Tensor(), &b, "sparse_apply_sync").ok());
  SyncAccumulator::Average avg = acc.take_short();
  ASSERT_TRUE(avg.sparse);
  ASSERT_EQ(avg.rows.rows, (std::vector<int64_t>{2, 5}));
  // Row 2: only a: 1. Row 5: (3 + 7) / 2 = 5.
  EXPECT_EQ(avg.rows.grad, (std::vector<float>{1, 5}));
  EXPECT_EQ(acc.stats()[6], 1);
}

// With a deadline, a gradient of a later step while a step collects means the job passed that
// step: it closes short at once (handed out as `passed`) and the gradient counts for its own
// step. Without a deadline the old rule holds: it counts for the current step.
TEST(SyncAccumulatorTest, ALaterStepClosesTheStepUnderWayShortOnlyWithADeadline) {
  SyncAccumulator acc;
  vcall::SyncContribution c = dense_sgd(2);
  c.deadline_secs = 2;
  ASSERT_TRUE(acc.add(c, 8, vec({6}), nullptr, "apply_sync").ok());
  auto next = acc.add(c, 9, vec({-4}), nullptr, "apply_sync");
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(next->passed.has_value());
  EXPECT_EQ(next->passed->step, 8);
  EXPECT_EQ(next->passed->count, 1);
  EXPECT_FLOAT_EQ(next->passed->dense.data<float>()[0], 6.f);
  EXPECT_EQ(next->step, 9);
  EXPECT_TRUE(next->first);
  EXPECT_FALSE(next->complete);
  EXPECT_EQ(acc.count(), 1);
  auto done = acc.add(c, 9, vec({2}), nullptr, "apply_sync");
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->complete);
  EXPECT_FLOAT_EQ(acc.take_average().dense.data<float>()[0], -1.f);  // (-4 + 2) / 2
  EXPECT_EQ(acc.stats()[6], 1);
  EXPECT_EQ(acc.stats()[3], 0);  // closing short is not a realignment

  // A gradient two steps later: closes short and realigns to its step.
  ASSERT_TRUE(acc.add(c, 10, vec({1}), nullptr, "apply_sync").ok());
  auto far = acc.add(c, 12, vec({5}), nullptr, "apply_sync");
  ASSERT_TRUE(far.ok());
  ASSERT_TRUE(far->passed.has_value());
  EXPECT_EQ(far->passed->step, 10);
  EXPECT_EQ(far->step, 12);
  EXPECT_EQ(acc.stats()[3], 1);

  // A bad contribution changes nothing, not even the step under way.
  vcall::SyncContribution other = c;
  other.opt = Optimizer::kAdam;
  EXPECT_FALSE(acc.add(other, 13, vec({1}), nullptr, "apply_sync").ok());
  EXPECT_EQ(acc.step(), 12);
  EXPECT_EQ(acc.count(), 1);

  // No deadline: the later step's gradient counts for the step under way.
  SyncAccumulator plain;
  const auto p = dense_sgd(2);
  ASSERT_TRUE(plain.add(p, 3, vec({1}), nullptr, "apply_sync").ok());
  auto early = plain.add(p, 4, vec({3}), nullptr, "apply_sync");
  ASSERT_TRUE(early.ok());
  EXPECT_FALSE(early->passed.has_value());
  EXPECT_EQ(early->step, 3);
  EXPECT_TRUE(early->complete);
  EXPECT_EQ(plain.stats()[6], 0);
}

}  // namespace
}  // namespace actorflow
