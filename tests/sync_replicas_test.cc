// train::SyncReplicasOptimizer and the synchronous accumulators behind it (the variable actor's
// "apply_sync" and "sync_control"): averaged updates against hand-computed values for each
// wrapped optimizer, replicas that finish without waiting for gradients that will never come
// (the 60 s stall of distributed_cnn --sync --replicas-to-aggregate 2 with 3 workers), no
// variable drifting from the global step, stale gradients dropped and counted, an accumulator
// whose step timed out realigning instead of lagging forever (the livelock under ASan), closing
// and re-opening, and errors as Status values.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>

#include "actorflow/actorflow.h"
#include "core/metrics.h"
#include "tests/util/local_server.h"
#include "tests/util/process.h"
#include "actorflow/train.h"
#include "graph/ops_variables.h"
#include "core/step_trace.h"
#include "core/waits.h"

namespace actorflow {
namespace {

namespace train = actorflow::train;
using namespace std::chrono_literals;

std::unique_ptr<Server> server2() { return testing::two_device_server(); }

using testing::vec;

// One replica's graph (between-graph replication: each replica builds its own, the variables
// are shared by name on the "ps", /cpu:1): w = [1] (and b = [0] when `with_b`), loss =
// sum(w * x) (+ sum(b * 3)), so the gradient of w is the fed x and that of b is 3.
struct Replica {
  Scope root = Scope::root();
  Output w, b, gs, x, train_op, finish, init;
  std::unique_ptr<train::SyncReplicasOptimizer> opt;
  Status built;

  Replica(const train::Optimizer& base, int replicas, int total, bool with_b, double timeout_secs = 30,
          double deadline_secs = 0) {
    Scope ps = root.with_device("/cpu:1"), worker = root.with_device("/cpu:0");
    w = train::get_variable(ps, "w", Shape{1}, DType::kFloat32,
                            [](const Scope& s, const Shape&, DType) { return ops::constant(s, vec({1})); });
    gs = train::get_or_create_global_step(ps);
    x = ops::placeholder(worker, DType::kFloat32, Shape{1}, "x");
    Output loss = ops::reduce_sum(worker, ops::mul(worker, w, x));
    if (with_b) {
      b = train::get_variable(ps, "b", Shape{1}, DType::kFloat32, train::zeros_initializer());
      loss = ops::add(worker, loss, ops::reduce_sum(worker, ops::mul(worker, b, ops::constant(worker, vec({3})))));
    }
    opt = std::make_unique<train::SyncReplicasOptimizer>(base, replicas, total, timeout_secs, deadline_secs);
    auto t = opt->minimize(worker, loss, gs);
    if (!t.ok()) {
      built = t.status();
      return;
    }
    train_op = *t;
    auto f = opt->finish_op(worker);
    auto i = train::global_variables_initializer(root);
    built = !f.ok() ? f.status() : !i.ok() ? i.status() : root.status();
    if (built.ok()) {
      finish = *f;
      init = *i;
    }
  }
};

// Two replicas of 2 aggregated run one step at once with gradients 1 and 3 (average 2); returns
// w afterwards. The global step read by both runs is 0.
float one_averaged_step(const train::Optimizer& base) {
  auto server = server2();
  Replica a(base, 2, 2, false), b(base, 2, 2, false);
  EXPECT_TRUE(a.built.ok()) << a.built;
  EXPECT_TRUE(b.built.ok()) << b.built;
  if (!a.built.ok() || !b.built.ok()) return NAN;
  Session sa(a.root, server->target()), sb(b.root, server->target());
  EXPECT_TRUE(sa.run({}, {}, {a.init}).ok());
  Result<std::vector<Tensor>> ra = Internal("unset");
  std::thread t([&] { ra = sa.run({{a.x, vec({1})}}, {a.gs}, {a.train_op}); });
  auto rb = sb.run({{b.x, vec({3})}}, {b.gs}, {b.train_op});
  t.join();
  EXPECT_TRUE(ra.ok()) << ra.status();
  EXPECT_TRUE(rb.ok()) << rb.status();
  if (!ra.ok() || !rb.ok()) return NAN;
  EXPECT_EQ((*ra)[0].data<int64_t>()[0], 0);  // the step both gradients were computed at
  auto after = sa.run({a.w, a.gs});
  EXPECT_TRUE(after.ok()) << after.status();
  if (!after.ok()) return NAN;
  EXPECT_EQ((*after)[1].data<int64_t>()[0], 1) << "the global step advances once per aggregated step";
  return (*after)[0].data<float>()[0];
}

TEST(SyncReplicasTest, EachWrappedOptimizerAppliesTheAverageOnce) {
  // The average gradient is g = (1 + 3) / 2 = 2, applied once to w = 1, lr 0.1.
  // SGD: w = 1 - 0.1 * 2 = 0.8.
  EXPECT_NEAR(one_averaged_step(train::GradientDescentOptimizer(0.1f)), 0.8f, 1e-6);
  // Momentum 0.9: a = 2; w = 1 - 0.1 * 2 = 0.8.
  EXPECT_NEAR(one_averaged_step(train::MomentumOptimizer(0.1f, 0.9f)), 0.8f, 1e-6);
  // Adam, t = 1: m = 0.1 * 2 = 0.2, v = 0.001 * 4 = 0.004, lr_t = 0.1 * sqrt(0.001) / 0.1 =
  // 0.0316228; w = 1 - 0.0316228 * 0.2 / (0.0632456 + 1e-8) = 1 - 0.1 = 0.9.
  EXPECT_NEAR(one_averaged_step(train::AdamOptimizer(0.1f)), 0.9f, 1e-5);
  // Adagrad: accum = 0.1 + 4 = 4.1; w = 1 - 0.1 * 2 / sqrt(4.1) = 1 - 0.0987730 = 0.901227.
  EXPECT_NEAR(one_averaged_step(train::AdagradOptimizer(0.1f)), 0.901227f, 1e-5);
  // RMSProp (ms from 1): ms = 0.9 + 0.1 * 4 = 1.3; mom = 0.1 * 2 / sqrt(1.3) = 0.175412;
  // w = 1 - 0.175412 = 0.824588.
  EXPECT_NEAR(one_averaged_step(train::RMSPropOptimizer(0.1f)), 0.824588f, 1e-5);
}

// distributed_cnn --sync --replicas-to-aggregate 2 with 3 workers used to stall its chief 60 s at
// the end ("synchronous step 601: only 1 of 2 gradients arrived within 60 s"): a worker that
// started one more step after the others had stopped waited for a gradient that never came. Here
// three replicas each train until the step they computed at reaches kSteps - 1, then run
// finish_op; with a 60 s step timeout, all must be done well before it. Every variable applied
// exactly one averaged update per global step (no drift between weights and the global step).
TEST(SyncReplicasTest, ThreeReplicasTwoAggregatedFinishWithoutWaitingAndNothingDrifts) {
  constexpr int64_t kSteps = 60;
  auto server = server2();
  train::GradientDescentOptimizer sgd(1.f);
  std::vector<std::unique_ptr<Replica>> reps;
  for (int i = 0; i < 3; ++i) {
    reps.push_back(std::make_unique<Replica>(sgd, 2, 3, true, /*timeout_secs=*/60));
    ASSERT_TRUE(reps.back()->built.ok()) << reps.back()->built;
  }
  {
    Session chief(reps[0]->root, server->target());
    ASSERT_TRUE(chief.run({}, {}, {reps[0]->init}).ok());
  }
  std::atomic<int> out_of_range{0};
  std::vector<Status> status(3);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> th;
  for (int i = 0; i < 3; ++i) {
    th.emplace_back([&, i] {
      Replica& r = *reps[static_cast<size_t>(i)];
      Session sess(r.root, server->target());
      for (int64_t step = 0; step < kSteps;) {
        auto res = sess.run({{r.x, vec({1})}}, {r.gs}, {r.train_op});
        if (!res.ok()) {
          if (res.status().code() == Code::kOutOfRange) {
            ++out_of_range;  // the others finished: this replica's last step can never fill
            break;
          }
          status[static_cast<size_t>(i)] = res.status();
          return;
        }
        step = (*res)[0].data<int64_t>()[0] + 1;
      }
      auto f = sess.run({}, {}, {r.finish});
      if (!f.ok()) status[static_cast<size_t>(i)] = f.status();
    });
  }
  for (auto& t : th) t.join();
  const auto took = std::chrono::steady_clock::now() - t0;
  for (const Status& s : status) ASSERT_TRUE(s.ok()) << s;
  EXPECT_LT(took, 30s) << "a replica waited for a step that could not fill";
  Replica& r = *reps[0];
  Session sess(r.root, server->target());
  auto end = sess.run({r.w, r.b, r.gs});
  ASSERT_TRUE(end.ok()) << end.status();
  const int64_t g = (*end)[2].data<int64_t>()[0];
  EXPECT_GE(g, kSteps);
  // Each averaged update moved w by -1 (gradient x = 1) and b by -3: exactly g of each.
  EXPECT_EQ((*end)[0].data<float>()[0], 1.f - static_cast<float>(g));
  EXPECT_EQ((*end)[1].data<float>()[0], -3.f * static_cast<float>(g));
  for (const Output& v : {r.w, r.b, r.gs}) {
    auto st = r.opt->accumulator_stats(r.root, v);
    ASSERT_TRUE(st.ok()) << st.status();
    auto s = sess.run({*st});
    ASSERT_TRUE(s.ok()) << s.status();
    const int64_t* p = (*s)[0].data<int64_t>();
    EXPECT_EQ(p[1], g) << v.name() << ": averaged updates applied";
    EXPECT_EQ(p[4], 3) << v.name() << ": replicas that finished";
    EXPECT_EQ(p[5], 1) << v.name() << ": closed once fewer than 2 replicas were left";
    EXPECT_EQ(p[3], 0) << v.name() << ": no realignment without a failure";
  }
}

// One variable "w" = [0] on the "ps" and its accumulator fed directly: a fed gradient and local
// step (ops of graph/ops_variables.h), with its stats.
struct FedAccumulator {
  std::unique_ptr<Server> server = server2();
  Scope root = Scope::root();
  Output w, init, grad, local, apply, stats;
  std::unique_ptr<Session> sess;

  FedAccumulator(int replicas, int total, double timeout_secs = 30, double deadline_secs = 0) {
    w = ops::variable(root.with_device("/cpu:1").with_op_name("w"), Shape{1}, DType::kFloat32);
    init = ops::assign(root, w, vec({0}));
    grad = ops::placeholder(root, DType::kFloat32, Shape{1}, "grad");
    local = ops::placeholder(root, DType::kInt64, Shape{}, "local_step");
    ops::SyncOptions o;
    o.lr = 1.f;
    o.replicas_to_aggregate = replicas;
    o.total_num_replicas = total;
    o.timeout_secs = timeout_secs;
    o.deadline_secs = deadline_secs;
    apply = ops::apply_gradient_sync(root, w, grad, local, o);
    stats = ops::sync_accumulator_control(root, w, "stats", replicas, total);
    sess = std::make_unique<Session>(root, server->target());
  }
  Result<std::vector<Tensor>> contribute(float g, int64_t step) {
    return sess->run({{grad, vec({g})}, {local, Tensor::scalar<int64_t>(step)}}, {apply});
  }
  std::vector<int64_t> stat() {
    auto r = sess->run({stats});
    EXPECT_TRUE(r.ok()) << r.status();
    std::vector<int64_t> v(7, -9);
    if (r.ok()) std::copy((*r)[0].data<int64_t>(), (*r)[0].data<int64_t>() + 7, v.begin());
    return v;
  }
  float value() { return (*sess->run({w}))[0].data<float>()[0]; }
};

// The accumulator's rules, step by step, with fed local steps.
TEST(SyncReplicasTest, StaleDroppedAndCountedLaterStepRealignsLeavingCloses) {
  FedAccumulator acc(2, 3);
  Output leave = ops::sync_accumulator_control(acc.root, acc.w, "leave", 2, 3);
  ASSERT_TRUE(acc.root.ok()) << acc.root.status();
  ASSERT_TRUE(acc.sess->run({}, {}, {acc.init}).ok());
  auto contribute = [&](float g, int64_t step) { return acc.contribute(g, step); };
  auto stat = [&] { return acc.stat(); };
  Session& sess = *acc.sess;
  const Output& w = acc.w;
  const Output& init = acc.init;
  // Step 0 from two replicas (1 and 3: average 2), then the backup's late gradient of step 0.
  Result<std::vector<Tensor>> r1 = Internal("unset");
  std::thread t([&] { r1 = contribute(1, 0); });
  auto r2 = contribute(3, 0);
  t.join();
  ASSERT_TRUE(r1.ok() && r2.ok()) << r1.status() << " " << r2.status();
  auto late = contribute(100, 0);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ((*late)[0].data<int64_t>()[0], -1);
  EXPECT_EQ(stat(), (std::vector<int64_t>{1, 1, 1, 0, 0, 0, 0}));  // step 1, 1 applied, 1 stale
  EXPECT_EQ((*sess.run({w}))[0].data<float>()[0], -2.f);
  // Nothing collected and a gradient of step 5 arrives (the others moved on while this
  // accumulator's steps failed): it realigns to 5 instead of counting it for step 1.
  Result<std::vector<Tensor>> r3 = Internal("unset");
  std::thread t3([&] { r3 = contribute(2, 5); });
  auto r4 = contribute(4, 5);
  t3.join();
  ASSERT_TRUE(r3.ok() && r4.ok()) << r3.status() << " " << r4.status();
  EXPECT_EQ((*r4)[0].data<int64_t>()[0], 5);
  EXPECT_EQ(stat(), (std::vector<int64_t>{6, 2, 1, 1, 0, 0, 0}));
  EXPECT_EQ((*sess.run({w}))[0].data<float>()[0], -5.f);
  // One replica finishes: 2 of 3 left, still enough. A second: 1 left, fewer than 2: closed.
  ASSERT_TRUE(sess.run({leave}).ok());
  EXPECT_EQ(stat()[5], 0);
  // A contribution waiting when the accumulator closes fails at once (no 30 s wait).
  Result<std::vector<Tensor>> waiting = Internal("unset");
  std::thread tw([&] { waiting = contribute(1, 6); });
  // Closing while it may or may not have arrived yet: either way it ends with OutOfRange.
  ASSERT_TRUE(sess.run({leave}).ok());
  tw.join();
  ASSERT_FALSE(waiting.ok());
  EXPECT_EQ(waiting.status().code(), Code::kOutOfRange) << waiting.status();
  EXPECT_NE(waiting.status().message().find("2 of 3 replicas finished"), std::string::npos) << waiting.status();
  EXPECT_EQ(stat()[5], 1);
  auto after = contribute(1, 6);
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), Code::kOutOfRange);
  EXPECT_EQ((*sess.run({w}))[0].data<float>()[0], -5.f) << "nothing applied after the close";
  // Assigning the variable (a new model, or a restored checkpoint) re-opens it.
  ASSERT_TRUE(sess.run({}, {}, {init}).ok());
  EXPECT_EQ(stat()[5], 0);
  EXPECT_EQ(stat()[4], 0);
}

// The ASan livelock of ScenarioTest.SyncWithoutABackupReportsAnUnreachableWorkerWithinTheTimeout:
// a step timed out at one variable (conv weights at sync step 23) while the global step went on
// (24); the accumulator then counted every later gradient for its old step and stayed one step
// behind, waiting for gradients that never matched. Now it realigns.
TEST(SyncReplicasTest, AnAccumulatorWhoseStepTimedOutRealignsInsteadOfLagging) {
  FedAccumulator acc(2, 2, /*timeout_secs=*/0.2);
  ASSERT_TRUE(acc.root.ok()) << acc.root.status();
  ASSERT_TRUE(acc.sess->run({}, {}, {acc.init}).ok());
  auto contribute = [&](float g, int64_t step) { return acc.contribute(g, step); };
  // Step 23: only one gradient arrives (the other replica was cut off): the step times out.
  auto alone = contribute(1, 23);
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), Code::kDeadlineExceeded) << alone.status();
  // The replicas go on at step 24 (the global step advanced elsewhere): both gradients count for
  // 24, and the accumulator's next step is 25.
  Result<std::vector<Tensor>> r1 = Internal("unset");
  std::thread t([&] { r1 = contribute(2, 24); });
  auto r2 = contribute(4, 24);
  t.join();
  ASSERT_TRUE(r1.ok() && r2.ok()) << r1.status() << " " << r2.status();
  EXPECT_EQ((*r1)[0].data<int64_t>()[0], 24);
  EXPECT_EQ((*r2)[0].data<int64_t>()[0], 24);
  const std::vector<int64_t> st = acc.stat();
  EXPECT_EQ(st[0], 25);
  EXPECT_EQ(st[1], 1);  // only step 24 applied
  EXPECT_EQ(st[3], 1);  // one realignment
  EXPECT_EQ(acc.value(), -3.f);
}

// The sync deadline in the variable actor: a step with 1 of 2 gradients closes short when its
// deadline passes (the run that waits goes on with the step), the update is that one gradient,
// the late replica's gradient of the step is stale, and both are counted (stats and metrics).
TEST(SyncReplicasTest, WithADeadlineAStepMissingAReplicaClosesShortAndItsLateGradientIsStale) {
  constexpr double kDeadline = 0.3;
  FedAccumulator acc(2, 2, /*timeout_secs=*/30, kDeadline);
  ASSERT_TRUE(acc.root.ok()) << acc.root.status();
  ASSERT_TRUE(acc.sess->run({}, {}, {acc.init}).ok());
  Metrics& m = Metrics::global();
  const int64_t short0 = m.counter_value("actorflow_sync_short_steps_total");
  const int64_t stale0 = m.counter_value("actorflow_sync_stale_gradients_total");
  const auto t0 = std::chrono::steady_clock::now();
  auto alone = acc.contribute(2, 7);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ((*alone)[0].data<int64_t>()[0], 7);  // released with its step, which was applied
  EXPECT_GE(took, std::chrono::milliseconds(static_cast<int64_t>(kDeadline * 1000)));  // not before the deadline
  EXPECT_LT(took, 20s);
  EXPECT_EQ(acc.value(), -2.f);  // 0 - 1 x (2 / 1): the average over the one gradient that came
  auto late = acc.contribute(100, 7);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ((*late)[0].data<int64_t>()[0], -1);
  EXPECT_EQ(acc.value(), -2.f);
  // step 8, 1 applied, 1 stale, no realignment, none left, open, 1 short.
  EXPECT_EQ(acc.stat(), (std::vector<int64_t>{8, 1, 1, 0, 0, 0, 1}));
  EXPECT_EQ(m.counter_value("actorflow_sync_short_steps_total"), short0 + 1);
  EXPECT_EQ(m.counter_value("actorflow_sync_stale_gradients_total"), stale0 + 1);
  // Both gradients in time: a full step, nothing short. (2 + 4) / 2 = 3.
  Result<std::vector<Tensor>> r1 = Internal("unset");
  std::thread t([&] { r1 = acc.contribute(2, 8); });
  auto r2 = acc.contribute(4, 8);
  t.join();
  ASSERT_TRUE(r1.ok() && r2.ok()) << r1.status() << " " << r2.status();
  EXPECT_EQ(acc.value(), -5.f);
  EXPECT_EQ(acc.stat(), (std::vector<int64_t>{9, 2, 1, 0, 0, 0, 1}));
  EXPECT_EQ(m.counter_value("actorflow_sync_short_steps_total"), short0 + 1);
}

// SyncReplicasOptimizer with a deadline: one replica of two trains alone; every step closes short
// at each accumulator (w, b and the global step) with that replica's gradient alone, and no
// variable drifts from the global step.
TEST(SyncReplicasTest, WithADeadlineOneReplicaAloneTrainsAndEveryAccumulatorClosesShort) {
  constexpr double kDeadline = 0.2;
  auto server = server2();
  train::GradientDescentOptimizer sgd(1.f);
  Replica a(sgd, 2, 2, true, /*timeout_secs=*/30, kDeadline);
  ASSERT_TRUE(a.built.ok()) << a.built;
  Session sess(a.root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {a.init}).ok());
  for (int64_t step = 0; step < 3; ++step) {
    auto r = sess.run({{a.x, vec({2})}}, {a.gs}, {a.train_op});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)[0].data<int64_t>()[0], step);
  }
  auto end = sess.run({a.w, a.b, a.gs});
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ((*end)[2].data<int64_t>()[0], 3);
  EXPECT_EQ((*end)[0].data<float>()[0], 1.f - 3 * 2.f);  // w's gradient is x = 2, three times
  EXPECT_EQ((*end)[1].data<float>()[0], -3 * 3.f);       // b's is 3
  for (const Output& v : {a.w, a.b, a.gs}) {
    auto st = a.opt->accumulator_stats(a.root, v);
    ASSERT_TRUE(st.ok()) << st.status();
    auto s = sess.run({*st});
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ((*s)[0].num_elements(), 7);
    const int64_t* p = (*s)[0].data<int64_t>();
    EXPECT_EQ(p[0], 3) << v.name() << ": step";
    EXPECT_EQ(p[1], 3) << v.name() << ": applied";
    EXPECT_EQ(p[6], 3) << v.name() << ": closed short";
  }
}

// One replica of an embedding model: table [4, 2] on the ps (/cpu:1), rows (0,1) (10,11) (20,21)
// (30,31), looked up with fed ids on /cpu:0; loss = sum(weights * rows), so the gradient of row r
// is the sum of the weight rows whose id is r (a sparse value).
struct SparseReplica {
  Scope root = Scope::root();
  Output table, gs, ids, weights, train_op, init;
  std::unique_ptr<train::SyncReplicasOptimizer> opt;
  Status built;
  explicit SparseReplica(const train::Optimizer& base) {
    Scope ps = root.with_device("/cpu:1"), worker = root.with_device("/cpu:0");
    Tensor t0 = Tensor::from_vector<float>({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2});
    table = train::get_variable(ps, "table", Shape{4, 2}, DType::kFloat32,
                                [t0](const Scope& s, const Shape&, DType) { return ops::constant(s, t0); });
    gs = train::get_or_create_global_step(ps);
    ids = ops::placeholder(worker, DType::kInt64, Shape{-1}, "ids");
    weights = ops::placeholder(worker, DType::kFloat32, Shape{-1, 2}, "weights");
    Output loss = ops::reduce_sum(worker, ops::mul(worker, weights, ops::embedding_lookup(worker, table, ids)));
    opt = std::make_unique<train::SyncReplicasOptimizer>(base, 2, 2, 30);
    auto t = opt->minimize(worker, loss, gs);
    auto i = train::global_variables_initializer(root);
    built = !t.ok() ? t.status() : !i.ok() ? i.status() : root.status();
    if (built.ok()) {
      train_op = *t;
      init = *i;
    }
  }
};

// Replica A looks up ids 1, 3 with weights (1,1), (2,2); replica B ids 3, 3 with (4,4), (6,6).
// Row 1's gradient comes from A only: (1,1); row 3's from both: (2,2) and (4+6, 4+6) = (10,10).
// Averaged by index (over the replicas that had the row, as TF's SparseConditionalAccumulator):
// row 1 (1,1), row 3 (6,6); rows 0 and 2 are untouched. Returns the table afterwards.
std::vector<float> one_sparse_step(const train::Optimizer& base) {
  auto server = server2();
  SparseReplica a(base), b(base);
  EXPECT_TRUE(a.built.ok()) << a.built;
  EXPECT_TRUE(b.built.ok()) << b.built;
  if (!a.built.ok() || !b.built.ok()) return {};
  // The table's update is the sparse synchronous op: only rows travel and are aggregated.
  int sparse = 0, dense = 0;
  const Graph& g = *a.root.graph();
  for (int i = 0; i < g.num_nodes(); ++i) {
    sparse += g.node(i)->op == "SparseApplyGradientSync";
    dense += g.node(i)->op == "ApplyGradientSync" && g.node(i)->attrs.get_or<std::string>("var_name", "") == "table";
  }
  EXPECT_EQ(sparse, 1);
  EXPECT_EQ(dense, 0);
  Session sa(a.root, server->target()), sb(b.root, server->target());
  EXPECT_TRUE(sa.run({}, {}, {a.init}).ok());
  Result<std::vector<Tensor>> ra = Internal("unset");
  std::thread t([&] {
    ra = sa.run({{a.ids, Tensor::from_vector<int64_t>({1, 3}, {2})},
                 {a.weights, Tensor::from_vector<float>({1, 1, 2, 2}, {2, 2})}},
                {}, {a.train_op});
  });
  auto rb = sb.run({{b.ids, Tensor::from_vector<int64_t>({3, 3}, {2})},
                    {b.weights, Tensor::from_vector<float>({4, 4, 6, 6}, {2, 2})}},
                   {}, {b.train_op});
  t.join();
  EXPECT_TRUE(ra.ok()) << ra.status();
  EXPECT_TRUE(rb.ok()) << rb.status();
  auto after = sa.run({a.table, a.gs});
  EXPECT_TRUE(after.ok()) << after.status();
  if (!after.ok()) return {};
  EXPECT_EQ((*after)[1].data<int64_t>()[0], 1);
  return std::vector<float>((*after)[0].data<float>(), (*after)[0].data<float>() + 8);
}

// A traced step of a replica whose gradient waits at the global step's accumulator for the other
// replica's: the trace holds that wait as one "sync_wait" event on the global step, from before
// the other replica's run began until after it (the process's own clock: no alignment), for
// accumulator step 0 with both contributions counted.
TEST(SyncReplicasTest, ATracedStepShowsItsWaitAtTheAccumulatorForTheOtherReplica) {
  auto server = server2();
  train::GradientDescentOptimizer sgd(0.1f);
  Replica a(sgd, 2, 2, false), b(sgd, 2, 2, false);
  ASSERT_TRUE(a.built.ok()) << a.built;
  ASSERT_TRUE(b.built.ok()) << b.built;
  Session sa(a.root, server->target()), sb(b.root, server->target());
  ASSERT_TRUE(sa.run({}, {}, {a.init}).ok());
  RunOptions traced;
  traced.trace_level = RunOptions::TraceLevel::kFullTrace;
  RunMetadata md;
  Result<std::vector<Tensor>> ra = Internal("unset");
  std::thread t([&] { ra = sa.run(traced, {{a.x, vec({1})}}, {a.gs}, {a.train_op}, &md); });
  // The traced run waits for the other replica's gradient (the registered wait says so).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(static_cast<int64_t>(30 * testing::slowdown()));
  bool waiting = false;
  while (!waiting && std::chrono::steady_clock::now() < deadline) {
    for (const auto& w : WaitRegistry::global().snapshot()) waiting = waiting || w.kind == "sync-contributions";
    if (!waiting) std::this_thread::yield();
  }
  ASSERT_TRUE(waiting) << "the traced replica never waited at the accumulator";
  const int64_t before_b = trace_clock_ns();
  auto rb = sb.run({{b.x, vec({3})}}, {b.gs}, {b.train_op});
  const int64_t after_b = trace_clock_ns();
  t.join();
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE(rb.ok()) << rb.status();
  std::vector<TraceEvent> waits;
  for (const auto& e : md.step_stats.events)
    if (e.kind == "sync_wait") waits.push_back(e);
  ASSERT_EQ(waits.size(), 1u) << "events: " << md.step_stats.events.size();
  const TraceEvent& w = waits[0];
  EXPECT_NE(w.name.find("global_step"), std::string::npos) << w.name;
  EXPECT_EQ(w.num("accumulator_step"), 0);
  EXPECT_EQ(w.num("contributions"), 2);
  EXPECT_LE(w.start_ns, before_b) << "the wait began after the other replica's run did";
  EXPECT_GE(w.end_ns, before_b);
  EXPECT_LE(w.end_ns, after_b) << "the wait ended after the other replica's run returned";
  // The untraced replica's run recorded nothing.
  EXPECT_EQ(StepTraces::global().armed(), 0u);
}

TEST(SyncReplicasTest, SparseGradientsAreAggregatedByIndexAndUpdateOnlyTheirRows) {
  {  // SGD, lr 0.5: row 1 -= 0.5 (1,1); row 3 -= 0.5 (6,6).
    auto w = one_sparse_step(train::GradientDescentOptimizer(0.5f));
    EXPECT_EQ(w, (std::vector<float>{0, 1, 9.5f, 10.5f, 20, 21, 27, 28}));
  }
  {  // Adagrad, lr 0.5, accumulators from 0.1: row 1: 0.1 + 1 = 1.1; row 3: 0.1 + 36 = 36.1.
    auto w = one_sparse_step(train::AdagradOptimizer(0.5f, 0.1f));
    ASSERT_EQ(w.size(), 8u);
    EXPECT_NEAR(w[2], 10 - 0.5 / std::sqrt(1.1), 1e-5);
    EXPECT_NEAR(w[3], 11 - 0.5 / std::sqrt(1.1), 1e-5);
    EXPECT_NEAR(w[6], 30 - 3 / std::sqrt(36.1), 1e-5);
    EXPECT_NEAR(w[7], 31 - 3 / std::sqrt(36.1), 1e-5);
    EXPECT_EQ(w[0], 0.f);
    EXPECT_EQ(w[4], 20.f);
  }
}

TEST(SyncReplicasTest, ErrorsAreStatusesNamingTheCause) {
  Scope root = Scope::root();
  Output w = train::get_variable(root, "w", Shape{1});
  Output x = ops::placeholder(root, DType::kFloat32, Shape{1}, "x");
  Output loss = ops::reduce_sum(root, ops::mul(root, w, x));
  Output gs = train::get_or_create_global_step(root);
  Output gs32 = train::get_variable(root, "gs32", Shape{}, DType::kInt32, train::zeros_initializer(), false);
  {
    train::SyncReplicasOptimizer opt(train::GradientDescentOptimizer(0.1f), 2, 3);
    auto none = opt.finish_op(root);
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.status().code(), Code::kFailedPrecondition);
    auto no_gs = opt.minimize(root, loss, Output());
    ASSERT_FALSE(no_gs.ok());
    EXPECT_NE(no_gs.status().message().find("needs the global step"), std::string::npos) << no_gs.status();
    auto int32_gs = opt.minimize(root, loss, gs32);
    ASSERT_FALSE(int32_gs.ok());
    EXPECT_NE(int32_gs.status().message().find("must be int64"), std::string::npos) << int32_gs.status();
    ASSERT_TRUE(opt.minimize(root, loss, gs).ok());
    auto twice = opt.minimize(root, loss, gs);
    ASSERT_FALSE(twice.ok());
    EXPECT_EQ(twice.status().code(), Code::kFailedPrecondition);
    EXPECT_TRUE(opt.finish_op(root).ok());
    EXPECT_TRUE(opt.close_op(root).ok());
  }
  {
    train::SyncReplicasOptimizer opt(train::AdamOptimizer(), 3, 2);
    auto bad = opt.minimize(root, loss, gs);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("replicas_to_aggregate (3) <= total_num_replicas (2)"), std::string::npos)
        << bad.status();
  }
  {
    train::SyncReplicasOptimizer opt(train::GradientDescentOptimizer(0.1f), 1, 1, 0.0);
    auto bad = opt.minimize(root, loss, gs);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("timeout_secs must be > 0"), std::string::npos) << bad.status();
  }
  for (double deadline : {-1.0, 30.0, 45.0}) {
    train::SyncReplicasOptimizer opt(train::GradientDescentOptimizer(0.1f), 2, 2, 30.0, deadline);
    auto bad = opt.minimize(root, loss, gs);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("deadline_secs must be 0 (none) or in (0, timeout_secs = 30"),
              std::string::npos)
        << bad.status();
  }
  {
    ops::SyncOptions o;
    o.timeout_secs = 1;
    o.deadline_secs = 2;
    Scope s2 = Scope::root();
    Output v = ops::variable(s2.with_op_name("v"), Shape{1}, DType::kFloat32);
    Output step = ops::placeholder(s2, DType::kInt64, Shape{}, "step");
    EXPECT_FALSE(ops::apply_gradient_sync(s2, v, ops::constant(s2, vec({1})), step, o).valid());
    EXPECT_NE(s2.status().message().find("ApplyGradientSync for variable 'v': deadline_secs (2.000000) must be 0"),
              std::string::npos)
        << s2.status();
  }
}

}  // namespace
}  // namespace actorflow
