// Variables as actors on a local server: initializers, reads, assigns, optimizer updates
// against hand-computed values, atomic concurrent updates, sharing by name across sessions,
// and synchronous-replica accumulation.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <thread>

#include "actorflow/actorflow.h"
#include "tests/util/local_server.h"
#include "graph/ops_variables.h"

namespace actorflow {
namespace {

std::unique_ptr<Server> server2() { return testing::two_device_server(); }

TEST(VariablesTest, InitializeReadAssignAndErrors) {
  auto server = server2();
  Scope root = Scope::root();
  Scope ps = root.with_device("/cpu:1");
  auto w = ops::variable(ps.with_op_name("w"), Shape{2, 2}, DType::kFloat32);
  auto z = ops::assign(root, w, ops::zeros(root, Shape{2, 2}, DType::kFloat32));
  auto c = ops::assign(root, w, Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}));
  auto inited = ops::is_variable_initialized(root, w);
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  auto r0 = sess.run({w});
  ASSERT_FALSE(r0.ok());
  EXPECT_NE(r0.status().message().find("variable 'w': is not initialized"), std::string::npos) << r0.status();
  auto i0 = sess.run({inited});
  ASSERT_TRUE(i0.ok()) << i0.status();
  EXPECT_FALSE((*i0)[0].data<bool>()[0]);
  ASSERT_TRUE(sess.run({}, {}, {z}).ok());
  EXPECT_EQ((*sess.run({w}))[0].to_string(), "[[0. 0.]\n [0. 0.]]");
  ASSERT_TRUE(sess.run({}, {}, {c}).ok());
  EXPECT_EQ((*sess.run({w}))[0].to_string(), "[[1. 2.]\n [3. 4.]]");
  EXPECT_TRUE((*sess.run({inited}))[0].data<bool>()[0]);
  // A shape mismatch is caught at construction, naming the variable.
  ops::assign(root, w, Tensor::from_vector<float>({1, 2, 3}, {3}));
  EXPECT_FALSE(root.ok());
  EXPECT_NE(root.status().message().find("variable 'w' has shape [2,2]"), std::string::npos) << root.status();
}

// Row updates on the variable's task: duplicates add up (scatter_add), the last wins
// (scatter_update), the output is the updated rows, and a bad index changes nothing.
TEST(VariablesTest, ScatterAddAndUpdateChangeOnlyTheirRows) {
  auto server = server2();
  Scope root = Scope::root();
  Scope ps = root.with_device("/cpu:1");
  auto w = ops::variable(ps.with_op_name("table"), Shape{4, 2}, DType::kFloat32);
  auto init = ops::assign(root, w, Tensor::from_vector<float>({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2}));
  auto ids = ops::placeholder(root, DType::kInt64, Shape{-1}, "ids");
  auto upd = ops::placeholder(root, DType::kFloat32, Shape{-1, 2}, "upd");
  auto add = ops::scatter_add(root, w, ids, upd);
  auto set = ops::scatter_update(root, w, ids, upd);
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {init}).ok());
  auto r = sess.run({{ids, Tensor::from_vector<int64_t>({3, 1, 3}, {3})},
                     {upd, Tensor::from_vector<float>({1, 1, 2, 2, 4, 4}, {3, 2})}},
                    {add});
  ASSERT_TRUE(r.ok()) << r.status();
  // Row 3 got 1 + 4, row 1 got 2; the output holds the rows after the whole update.
  EXPECT_EQ((*r)[0].to_string(), "[[35. 36.]\n [12. 13.]\n [35. 36.]]");
  EXPECT_EQ((*sess.run({w}))[0].to_string(), "[[ 0.  1.]\n [12. 13.]\n [20. 21.]\n [35. 36.]]");
  auto u = sess.run({{ids, Tensor::from_vector<int64_t>({0, 0}, {2})},
                     {upd, Tensor::from_vector<float>({7, 7, 9, 9}, {2, 2})}},
                    {set});
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ((*sess.run({w}))[0].to_string(), "[[ 9.  9.]\n [12. 13.]\n [20. 21.]\n [35. 36.]]");
  // An index out of range fails the step naming the variable and the index; nothing changed.
  auto bad = sess.run({{ids, Tensor::from_vector<int64_t>({2, 4}, {2})},
                       {upd, Tensor::from_vector<float>({1, 1, 1, 1}, {2, 2})}},
                      {add});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("variable 'table': scatter_add: indices[1] = 4 is not in [0, 4)"),
            std::string::npos)
      << bad.status();
  EXPECT_EQ((*sess.run({w}))[0].to_string(), "[[ 9.  9.]\n [12. 13.]\n [20. 21.]\n [35. 36.]]");
  // Updates of the wrong row shape are refused when the graph is built.
  ops::scatter_add(root, w, ids, Tensor::from_vector<float>({1, 2, 3}, {1, 3}));
  EXPECT_FALSE(root.ok());
  EXPECT_NE(root.status().message().find("updates [1,3] must be indices' shape"), std::string::npos) << root.status();
}

TEST(VariablesTest, SharedByNameAcrossSessions) {
  auto server = server2();
  Scope a = Scope::root();
  auto wa = ops::variable(a.with_device("/cpu:1").with_op_name("shared"), Shape{1}, DType::kFloat32);
  auto set = ops::assign(a, wa, Tensor::from_vector<float>({42}, {1}));
  Session sa(a, server->target());
  ASSERT_TRUE(sa.run({}, {}, {set}).ok());
  Scope b = Scope::root();  // another client's graph, same variable name
  auto wb = ops::variable(b.with_device("/cpu:1").with_op_name("shared"), Shape{1}, DType::kFloat32);
  Session sb(b, server->target());
  auto r = sb.run({wb});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].data<float>()[0], 42.f);
}

TEST(VariablesTest, OptimizerUpdatesMatchHandComputedValues) {
  auto server = server2();
  Scope root = Scope::root();
  Scope ps = root.with_device("/cpu:1");
  auto w1 = ops::variable(ps.with_op_name("sgd"), Shape{2}, DType::kFloat32);
  auto w2 = ops::variable(ps.with_op_name("mom"), Shape{2}, DType::kFloat32);
  auto w3 = ops::variable(ps.with_op_name("adam"), Shape{2}, DType::kFloat32);
  Tensor init = Tensor::from_vector<float>({1, -1}, {2});
  auto init_op = ops::no_op(root, {ops::assign(root, w1, init), ops::assign(root, w2, init), ops::assign(root, w3, init)});
  Tensor g = Tensor::from_vector<float>({0.5f, -2}, {2});
  auto u1 = ops::apply_gradient_descent(root, w1, 0.1f, g);
  auto u2 = ops::apply_momentum(root, w2, 0.1f, g, 0.9f);
  auto u3 = ops::apply_adam(root, w3, 0.01f, 0.9f, 0.999f, 1e-8f, g);
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {init_op}).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(sess.run({}, {}, {u1, u2, u3}).ok());
  auto r = sess.run({w1, w2, w3});
  ASSERT_TRUE(r.ok()) << r.status();
  // SGD: w = 1 - 3 * 0.1 * 0.5 = 0.85; -1 + 3 * 0.2 = -0.4
  EXPECT_NEAR((*r)[0].data<float>()[0], 0.85f, 1e-6);
  EXPECT_NEAR((*r)[0].data<float>()[1], -0.4f, 1e-6);
  // Momentum: a = g, 1.9g, 2.71g; w -= 0.1 * (1 + 1.9 + 2.71) g = 0.561 g
  EXPECT_NEAR((*r)[1].data<float>()[0], 1 - 0.561f * 0.5f, 1e-5);
  EXPECT_NEAR((*r)[1].data<float>()[1], -1 + 0.561f * 2, 1e-5);
  // Adam with a constant gradient moves each weight by ~lr per step against the gradient's sign.
  double w = 1, m = 0, v = 0;
  for (int t = 1; t <= 3; ++t) {
    m = m + (0.5 - m) * 0.1;
    v = v + (0.25 - v) * 0.001;
    double lr_t = 0.01 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
    w -= lr_t * m / (std::sqrt(v) + 1e-8);
  }
  EXPECT_NEAR((*r)[2].data<float>()[0], w, 1e-5);
  EXPECT_NEAR((*r)[2].data<float>()[0], 0.97f, 1e-4);
}

// A value a reader holds is a snapshot: every dense update after the read (SGD, Momentum, Adam,
// Adagrad, RMSProp) leaves the reader's tensor as it was, and the variable still gets exactly the
// update (out of place while the reader holds the buffer, in place once it let go; both paths
// checked against the same hand-computed sequence).
TEST(VariablesTest, AHeldReadIsASnapshotAndUpdatesAfterItAreExact) {
  auto server = server2();
  Scope root = Scope::root();
  Scope ps = root.with_device("/cpu:1");
  const int64_t n = 1 << 19;  // 2 MiB: large enough for the host pool's blocks
  Tensor init = Tensor(DType::kFloat32, Shape{n});
  for (int64_t i = 0; i < n; ++i) init.data<float>()[i] = static_cast<float>(i % 7) - 3.f;
  Tensor g = Tensor(DType::kFloat32, Shape{n});
  for (int64_t i = 0; i < n; ++i) g.data<float>()[i] = 0.25f * static_cast<float>(i % 5) - 0.5f;
  const char* names[] = {"sgd", "momentum", "adam", "adagrad", "rmsprop"};
  std::vector<Output> vars, updates, inits;
  for (const char* name : names) {
    auto w = ops::variable(ps.with_op_name(name), Shape{n}, DType::kFloat32);
    vars.push_back(w);
    inits.push_back(ops::assign(root, w, init));
  }
  updates.push_back(ops::apply_gradient_descent(ps, vars[0], 0.5f, g));
  updates.push_back(ops::apply_momentum(ps, vars[1], 0.5f, g, 0.9f));
  updates.push_back(ops::apply_adam(ps, vars[2], 0.5f, 0.9f, 0.999f, 1e-8f, g));
  updates.push_back(ops::apply_adagrad(ps, vars[3], 0.5f, g));
  updates.push_back(ops::apply_rms_prop(ps, vars[4], 0.5f, 0.9f, 0.5f, 1e-8f, g));
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, inits).ok());
  // The reference: the same updates on host copies (the functors' formulas, written out).
  std::vector<std::vector<double>> w(5, std::vector<double>(static_cast<size_t>(n))), s1 = w, s2 = w;
  for (int k = 0; k < 5; ++k)
    for (int64_t i = 0; i < n; ++i) {
      w[k][i] = init.data<float>()[i];
      s1[k][i] = k == 3 ? 0.1 : k == 4 ? 1.0 : 0.0;
    }
  for (int step = 1; step <= 4; ++step) {
    auto held = sess.run(vars);  // held across the next update on odd steps only
    ASSERT_TRUE(held.ok()) << held.status();
    std::vector<Tensor> before;
    for (auto& t : *held) before.push_back(t.deep_copy());
    if (step % 2 == 0) held = Result<std::vector<Tensor>>(std::vector<Tensor>{});
    ASSERT_TRUE(sess.run({}, {}, updates).ok());
    for (int64_t i = 0; i < n; ++i) {
      const double gi = g.data<float>()[i];
      w[0][i] -= 0.5 * gi;
      s1[1][i] = 0.9 * s1[1][i] + gi;
      w[1][i] -= 0.5 * s1[1][i];
      s1[2][i] += (gi - s1[2][i]) * 0.1;
      s2[2][i] += (gi * gi - s2[2][i]) * 0.001;
      w[2][i] -= 0.5 * std::sqrt(1 - std::pow(0.999, step)) / (1 - std::pow(0.9, step)) * s1[2][i] /
                 (std::sqrt(s2[2][i]) + 1e-8);
      s1[3][i] += gi * gi;
      w[3][i] -= 0.5 * gi / std::sqrt(s1[3][i]);
      s1[4][i] = 0.9 * s1[4][i] + 0.1 * gi * gi;
      s2[4][i] = 0.5 * s2[4][i] + 0.5 * gi / std::sqrt(s1[4][i] + 1e-8);
      w[4][i] -= s2[4][i];
    }
    if (step % 2 == 1) {
      for (int k = 0; k < 5; ++k)
        for (int64_t i = 0; i < n; i += 997)
          ASSERT_EQ((*held)[static_cast<size_t>(k)].data<float>()[i], before[static_cast<size_t>(k)].data<float>()[i])
              << names[k] << " changed a reader's snapshot at " << i << " (step " << step << ")";
    }
    auto now = sess.run(vars);
    ASSERT_TRUE(now.ok()) << now.status();
    for (int k = 0; k < 5; ++k)
      for (int64_t i = 0; i < n; i += 101)
        ASSERT_NEAR((*now)[static_cast<size_t>(k)].data<float>()[i], w[k][i], 1e-4 * (1 + std::fabs(w[k][i])))
            << names[k] << " at " << i << " after step " << step;
  }
}

TEST(VariablesTest, ConcurrentUpdatesAreAtomic) {
  auto server = server2();
  Scope root = Scope::root();
  auto w = ops::variable(root.with_device("/cpu:1").with_op_name("counter"), Shape{}, DType::kFloat32);
  auto init = ops::assign(root, w, 0.f);
  auto step = ops::apply_gradient_descent(root.with_device("/cpu:0"), w, 1.f, 1.f);
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {init}).ok());
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&] {
      for (int i = 0; i < 100; ++i) EXPECT_TRUE(sess.run({}, {}, {step}).ok());
    });
  for (auto& x : th) x.join();
  EXPECT_EQ((*sess.run({w}))[0].data<float>()[0], -400.f);
}

TEST(VariablesTest, InitializersAreSeededAndBounded) {
  auto server = server2();
  Scope root = Scope::root();
  auto a = ops::truncated_normal(root, Shape{1000}, 0.f, 0.5f, 7);
  auto b = ops::truncated_normal(root, Shape{1000}, 0.f, 0.5f, 7);
  auto g = ops::glorot_uniform(root, Shape{100, 50}, 3);
  Session sess(root, server->target());
  auto r = sess.run({a, b, g});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)[0].equals((*r)[1]));  // same seed, same values
  double mean = 0;
  for (int i = 0; i < 1000; ++i) {
    float x = (*r)[0].data<float>()[i];
    EXPECT_LE(std::fabs(x), 1.0f + 1e-6f);
    mean += x;
  }
  EXPECT_NEAR(mean / 1000, 0, 0.05);
  const float limit = std::sqrt(6.f / 150.f);
  float mx = 0;
  for (int i = 0; i < 5000; ++i) mx = std::max(mx, std::fabs((*r)[2].data<float>()[i]));
  EXPECT_LE(mx, limit);
  EXPECT_GT(mx, 0.9f * limit);
}

TEST(VariablesTest, SyncReplicasApplyOncePerStepAndDropStale) {
  auto server = server2();
  Scope root = Scope::root();
  auto w = ops::variable(root.with_device("/cpu:1").with_op_name("w"), Shape{1}, DType::kFloat32);
  auto init = ops::assign(root, w, Tensor::from_vector<float>({0}, {1}));
  auto grad = ops::placeholder(root, DType::kFloat32, Shape{1}, "grad");
  auto local = ops::placeholder(root, DType::kInt64, Shape{}, "local_step");
  // 3 replicas, 2 aggregated: one backup worker.
  auto apply = ops::apply_sgd_sync(root, w, grad, local, 1.f, 2, 3);
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {init}).ok());
  auto contribute = [&](float g, int64_t step) {
    return sess.run({{grad, Tensor::from_vector<float>({g}, {1})}, {local, Tensor::scalar<int64_t>(step)}}, {apply});
  };
  // Step 0: two workers contribute 1 and 3 -> average 2 applied once: w = -2. Both released.
  Result<std::vector<Tensor>> r1 = Internal("unset");
  std::thread t1([&] { r1 = contribute(1, 0); });
  auto r2 = contribute(3, 0);
  t1.join();
  ASSERT_TRUE(r1.ok() && r2.ok()) << r1.status() << " " << r2.status();
  EXPECT_EQ((*r1)[0].data<int64_t>()[0], 0);
  EXPECT_EQ((*r2)[0].data<int64_t>()[0], 0);
  EXPECT_EQ((*sess.run({w}))[0].data<float>()[0], -2.f);
  // The backup worker's gradient for step 0 arrives late: stale, dropped at once.
  auto late = contribute(100, 0);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ((*late)[0].data<int64_t>()[0], -1);
  EXPECT_EQ((*sess.run({w}))[0].data<float>()[0], -2.f);
}

TEST(VariablesTest, ConstantInitializersGlobalStepAndRuntimeMismatches) {
  auto server = server2();
  Scope root = Scope::root();
  Scope ps = root.with_device("/cpu:1");
  auto w = ops::variable(ps.with_op_name("w"), Shape{2, 3}, DType::kFloat32);
  auto gs = ops::global_step(ps);
  auto init = ops::no_op(root, {ops::assign(root, w, ops::fill(root, Shape{2, 3}, 0.25f)),
                                ops::assign(root, gs, ops::zeros(root, Shape{}, DType::kInt64))});
  auto bump = ops::assign_add(root, gs, Tensor::scalar<int64_t>(5));
  // Placeholders of unknown shape/dtype-checked at run time only: the variable actor checks.
  auto value = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "value");
  auto set = ops::assign(root, w, value);
  auto grad = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "grad");
  auto sgd = ops::apply_gradient_descent(root, w, 0.5f, grad);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(gs.node()->name, "global_step");
  EXPECT_EQ(gs.node()->requested_device, "/cpu:1");
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {init}).ok());
  ASSERT_TRUE(sess.run({}, {}, {bump}).ok());
  auto r = sess.run({w, gs});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)[0].equals(Tensor::from_vector<float>({.25f, .25f, .25f, .25f, .25f, .25f}, {2, 3})));
  EXPECT_EQ((*r)[1].dtype(), DType::kInt64);
  EXPECT_EQ((*r)[1].data<int64_t>()[0], 5);
  auto bad = sess.run({{value, Tensor::from_vector<float>({1, 2, 3}, {3})}}, {set});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("variable 'w': the assigned value has shape [3], the variable has shape [2,3]"),
            std::string::npos)
      << bad.status();
  auto bad_grad = sess.run({{grad, Tensor::from_vector<float>({1, 2}, {2, 1})}}, {sgd});
  ASSERT_FALSE(bad_grad.ok());
  EXPECT_NE(bad_grad.status().message().find("variable 'w': the gradient has shape [2,1], the variable has shape [2,3]"),
            std::string::npos)
      << bad_grad.status();
  // The failed updates left the value alone; a good one applies.
  auto ok = sess.run({{grad, Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})}}, {sgd});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE((*ok)[0].equals(Tensor::from_vector<float>({-.25f, -.75f, -1.25f, -1.75f, -2.25f, -2.75f}, {2, 3})));
}

TEST(VariablesTest, RandomOpsDependOnlyOnTheirSeeds) {
  auto server = server2();
  Scope root = Scope::root();
  auto a = ops::random_uniform(root, Shape{64}, -1.f, 1.f, 5);
  auto b = ops::random_uniform(root, Shape{64}, -1.f, 1.f, 5, 1);  // other seed2
  auto c = ops::random_uniform(root, Shape{64}, -1.f, 1.f, 6);
  auto t = ops::truncated_normal(root, Shape{4000}, 3.f, 2.f, 9, 4);
  Session sess(root, server->target());
  auto r1 = sess.run({a, b, c, t});
  auto r2 = sess.run({a, b, c, t});
  ASSERT_TRUE(r1.ok() && r2.ok());
  for (int i = 0; i < 4; ++i) EXPECT_TRUE((*r1)[i].equals((*r2)[i])) << i;  // every run the same
  EXPECT_FALSE((*r1)[0].equals((*r1)[1]));
  EXPECT_FALSE((*r1)[0].equals((*r1)[2]));
  double mean = 0, sq = 0;
  for (int i = 0; i < 4000; ++i) {
    const double x = (*r1)[3].data<float>()[i];
    EXPECT_GE(x, 3 - 4.0);  // within 2 stddev of the mean
    EXPECT_LE(x, 3 + 4.0);
    mean += x;
    sq += (x - 3) * (x - 3);
  }
  EXPECT_NEAR(mean / 4000, 3.0, 0.1);
  // A normal truncated at 2 sigma has stddev 0.8796 sigma.
  EXPECT_NEAR(std::sqrt(sq / 4000), 0.8796 * 2, 0.08);
}

// One between-graph replica: its own graph and Session on the shared server. Runs sync steps
// until the global step reaches `steps`; records the step each accepted contribution applied to.
struct SyncWorker {
  std::vector<int64_t> w_steps, gs_steps;
  int dropped = 0;
  Status status;
  void run(Server& server, int64_t steps, int replicas, int total) {
    Scope root = Scope::root();
    Scope ps = root.with_device("/cpu:1");
    auto w = ops::variable(ps.with_op_name("w"), Shape{2}, DType::kFloat32);
    auto gs = ops::global_step(ps);
    ops::SyncOptions o;
    o.lr = 1.f;
    o.replicas_to_aggregate = replicas;
    o.total_num_replicas = total;
    o.timeout_secs = 30;  // bounded: a lost release fails the test instead of hanging it
    // The local step is the global step the worker read before computing its gradient (TF's
    // local_step); reading it inside the update's own run could see the step after the last one.
    auto local = ops::placeholder(root, DType::kInt64, Shape{}, "local_step");
    auto apply = ops::apply_gradient_sync(root, w, Tensor::from_vector<float>({1, 2}, {2}), local, o);
    o.optimizer = "increment";
    auto inc = ops::apply_gradient_sync(root, gs, Tensor::scalar<int64_t>(1), local, o);
    if (!root.ok()) {
      status = root.status();
      return;
    }
    Session sess(root, server.target());
    for (int guard = 0; guard < 10000; ++guard) {
      auto g = sess.run({gs});
      if (!g.ok()) {
        status = g.status();
        return;
      }
      if ((*g)[0].data<int64_t>()[0] >= steps) return;
      auto r = sess.run({{local, (*g)[0]}}, {apply, inc});
      if (!r.ok()) {
        status = r.status();
        return;
      }
      const int64_t ws = (*r)[0].data<int64_t>()[0], gss = (*r)[1].data<int64_t>()[0];
      if (ws >= 0) w_steps.push_back(ws);
      if (gss >= 0) gs_steps.push_back(gss);
      if (ws < 0 || gss < 0) ++dropped;
    }
    status = Internal("worker did not finish");
  }
};

// Runs `workers` replicas (of `total`) to `steps` global steps and checks that every step was
// aggregated from exactly `replicas` contributions, applied once.
void run_sync_training(int workers, int replicas, int total, int64_t steps) {
  auto server = server2();
  {
    Scope root = Scope::root();
    Scope ps = root.with_device("/cpu:1");
    auto w = ops::variable(ps.with_op_name("w"), Shape{2}, DType::kFloat32);
    auto gs = ops::global_step(ps);
    auto init = ops::no_op(root, {ops::assign(root, w, ops::zeros(root, Shape{2}, DType::kFloat32)),
                                  ops::assign(root, gs, Tensor::scalar<int64_t>(0))});
    ASSERT_TRUE(root.ok()) << root.status();
    Session chief(root, server->target());
    ASSERT_TRUE(chief.run({}, {}, {init}).ok());
  }
  std::vector<SyncWorker> ws(static_cast<size_t>(workers));
  std::vector<std::thread> th;
  for (auto& w : ws) th.emplace_back([&] { w.run(*server, steps, replicas, total); });
  for (auto& t : th) t.join();
  std::map<int64_t, int> w_count, gs_count;
  int dropped = 0;
  for (auto& w : ws) {
    ASSERT_TRUE(w.status.ok()) << w.status;
    for (int64_t s : w.w_steps) ++w_count[s];
    for (int64_t s : w.gs_steps) ++gs_count[s];
    dropped += w.dropped;
  }
  for (int64_t s = 0; s < steps; ++s) {
    EXPECT_EQ(w_count[s], replicas) << "step " << s;
    EXPECT_EQ(gs_count[s], replicas) << "step " << s;
  }
  EXPECT_EQ(static_cast<int64_t>(w_count.size()), steps);
  EXPECT_EQ(static_cast<int64_t>(gs_count.size()), steps);
  if (workers == replicas) { EXPECT_EQ(dropped, 0); }
  Scope root = Scope::root();
  auto w = ops::variable(root.with_device("/cpu:1").with_op_name("w"), Shape{2}, DType::kFloat32);
  auto gs = ops::global_step(root.with_device("/cpu:1"));
  Session sess(root, server->target());
  auto r = sess.run({w, gs});
  ASSERT_TRUE(r.ok()) << r.status();
  // Every worker sends gradient [1, 2], so each aggregated update moves w by exactly -[1, 2].
  EXPECT_EQ((*r)[0].data<float>()[0], -1.f * static_cast<float>(steps));
  EXPECT_EQ((*r)[0].data<float>()[1], -2.f * static_cast<float>(steps));
  EXPECT_EQ((*r)[1].data<int64_t>()[0], steps);
}

TEST(VariablesTest, SyncReplicasThreeWorkersTwoAggregated) { run_sync_training(3, 2, 3, 30); }

TEST(VariablesTest, SyncReplicasGoOnWhenABackupWorkerIsGone) { run_sync_training(2, 2, 3, 20); }

TEST(VariablesTest, SyncReplicasAllAggregated) { run_sync_training(3, 3, 3, 15); }

TEST(VariablesTest, SyncStepTimesOutNamingTheVariableThenRecovers) {
  auto server = server2();
  Scope root = Scope::root();
  auto w = ops::variable(root.with_device("/cpu:1").with_op_name("slow"), Shape{1}, DType::kFloat32);
  auto init = ops::assign(root, w, Tensor::from_vector<float>({0}, {1}));
  auto grad = ops::placeholder(root, DType::kFloat32, Shape{1}, "grad");
  auto local = ops::placeholder(root, DType::kInt64, Shape{}, "local_step");
  ops::SyncOptions o;
  o.optimizer = "momentum";
  o.lr = 0.1f;
  o.momentum = 0.9f;
  o.replicas_to_aggregate = 2;
  o.total_num_replicas = 2;
  o.timeout_secs = 0.3;
  auto apply = ops::apply_gradient_sync(root, w, grad, local, o);
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {init}).ok());
  auto contribute = [&](float g, int64_t step) {
    return sess.run({{grad, Tensor::from_vector<float>({g}, {1})}, {local, Tensor::scalar<int64_t>(step)}}, {apply});
  };
  // The other replica never comes: the step fails after the timeout, naming the variable.
  auto alone = contribute(1, 0);
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), Code::kDeadlineExceeded);
  EXPECT_NE(alone.status().message().find("variable 'slow': synchronous step 0: only 1 of 2"), std::string::npos)
      << alone.status();
  EXPECT_EQ((*sess.run({w}))[0].data<float>()[0], 0.f);  // nothing applied
  // Both replicas now: momentum over the averages 2 and 2: accum 2 then 3.8; w = -0.1 * 5.8.
  for (int64_t step = 0; step < 2; ++step) {
    Result<std::vector<Tensor>> r1 = Internal("unset");
    std::thread t1([&] { r1 = contribute(1, step); });
    auto r2 = contribute(3, step);
    t1.join();
    ASSERT_TRUE(r1.ok() && r2.ok()) << r1.status() << " " << r2.status();
    EXPECT_EQ((*r1)[0].data<int64_t>()[0], step);
    EXPECT_EQ((*r2)[0].data<int64_t>()[0], step);
  }
  EXPECT_NEAR((*sess.run({w}))[0].data<float>()[0], -0.58f, 1e-6);
}

TEST(VariablesTest, AssignResetsTheSyncAccumulator) {
  auto server = server2();
  Scope root = Scope::root();
  auto w = ops::variable(root.with_device("/cpu:1").with_op_name("w"), Shape{1}, DType::kFloat32);
  auto restore = ops::assign(root, w, Tensor::from_vector<float>({10}, {1}));
  auto local = ops::placeholder(root, DType::kInt64, Shape{}, "local_step");
  auto apply = ops::apply_sgd_sync(root, w, Tensor::from_vector<float>({1}, {1}), local, 1.f, 1, 1);
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {restore}).ok());
  auto at = [&](int64_t step) {
    auto r = sess.run({{local, Tensor::scalar<int64_t>(step)}}, {apply});
    return r.ok() ? (*r)[0].data<int64_t>()[0] : -100;
  };
  EXPECT_EQ(at(7), 7);   // the accumulator aligns with the first local step
  EXPECT_EQ(at(8), 8);
  EXPECT_EQ(at(3), -1);  // stale
  // Computed later than the current step with nothing collected: the accumulator was behind (its
  // steps failed here while the global step went on) and realigns to it instead of lagging.
  EXPECT_EQ(at(20), 20);
  EXPECT_EQ((*sess.run({w}))[0].data<float>()[0], 7.f);
  // A restore rolls the model back (say to a checkpoint of step 3): step 3 is current again.
  ASSERT_TRUE(sess.run({}, {}, {restore}).ok());
  EXPECT_EQ(at(3), 3);
  EXPECT_EQ((*sess.run({w}))[0].data<float>()[0], 9.f);
  EXPECT_EQ(at(2), -1);
}

TEST(VariablesTest, SyncBuilderRejectsBadOptions) {
  Scope root = Scope::root();
  auto w = ops::variable(root.with_op_name("w"), Shape{1}, DType::kFloat32);
  ops::SyncOptions o;
  o.replicas_to_aggregate = 3;
  o.total_num_replicas = 2;
  ops::apply_gradient_sync(root, w, Tensor::from_vector<float>({1}, {1}), Tensor::scalar<int64_t>(0), o);
  ASSERT_FALSE(root.ok());
  EXPECT_NE(root.status().message().find("variable 'w': need 1 <= replicas_to_aggregate (3) <= total_num_replicas (2)"),
            std::string::npos)
      << root.status();
  Scope r2 = Scope::root();
  auto w2 = ops::variable(r2.with_op_name("w"), Shape{1}, DType::kFloat32);
  ops::SyncOptions o2;
  o2.optimizer = "adadelta";
  ops::apply_gradient_sync(r2, w2, Tensor::from_vector<float>({1}, {1}), Tensor::scalar<int64_t>(0), o2);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("unknown optimizer 'adadelta'"), std::string::npos) << r2.status();
}

}  // namespace
}  // namespace actorflow

#include "graph/op_kinds.h"
#include "graph/replica_device_setter.h"
#include "runtime/placer.h"

namespace actorflow {
namespace {
TEST(ReplicaDeviceSetterTest, RoundRobinAndGreedyByBytes) {
  Scope root = Scope::root();
  ReplicaDeviceSetter rr(2, "/job:worker/task:1");
  EXPECT_EQ(rr.for_variable(root, Shape{10}, DType::kFloat32).device(), "/job:ps/task:0");
  EXPECT_EQ(rr.for_variable(root, Shape{10}, DType::kFloat32).device(), "/job:ps/task:1");
  EXPECT_EQ(rr.for_variable(root, Shape{10}, DType::kFloat32).device(), "/job:ps/task:0");
  EXPECT_EQ(rr.for_ops(root).device(), "/job:worker/task:1");
  ReplicaDeviceSetter greedy(2, "/job:worker/task:0", ReplicaDeviceSetter::Strategy::kGreedyByBytes);
  EXPECT_EQ(greedy.for_variable(root, Shape{1000}, DType::kFloat32).device(), "/job:ps/task:0");  // 4000 B on 0
  EXPECT_EQ(greedy.for_variable(root, Shape{10}, DType::kFloat32).device(), "/job:ps/task:1");    // 40 B on 1
  EXPECT_EQ(greedy.for_variable(root, Shape{10}, DType::kFloat32).device(), "/job:ps/task:1");    // 80 B on 1
  EXPECT_EQ(greedy.bytes_per_task(), (std::vector<int64_t>{4000, 80}));
  ReplicaDeviceSetter none(0, "/job:worker/task:0");
  EXPECT_EQ(none.for_variable(root, Shape{1}, DType::kFloat32).device(), "/job:worker/task:0");
}

// `with tf.device(tf.train.replica_device_setter(ps_tasks=2, worker_device=...))` in one scope:
// every variable (the model's and the global step) goes round robin to the ps tasks, its
// initializer's Assign and its optimizer update to its variable's task, every other op to the
// worker; a with_device inside merges over the function's answer; colocate_with sets it aside.
// Placed on a cluster's devices, nothing needs a per-variable scope.
TEST(ReplicaDeviceSetterTest, AsADeviceFunctionOnAScopeItPlacesVariablesOnThePsAndTheRestOnTheWorker) {
  Scope root = Scope::root();
  ReplicaDeviceSetter setter(2, "/job:worker/task:1");
  Scope s = root.with_device("/job:chief").with_device_function(setter.device_function());
  Output w1 = train::get_variable(s, "w1", Shape{3, 2});
  Output w2 = train::get_variable(s, "w2", Shape{2});
  Output gs = train::get_or_create_global_step(s);
  Output x = ops::placeholder(s, DType::kFloat32, Shape{4, 3}, "x");
  Output y = ops::add(s.with_op_name("y"), ops::matmul(s.with_op_name("mm"), x, w1), w2);
  ops::identity(s.with_device("/task:0").with_op_name("on_task0"), y);
  Output loss = ops::reduce_sum(s.with_op_name("loss"), y);
  auto train_op = train::GradientDescentOptimizer(0.1f).minimize(s, loss, gs);
  ASSERT_TRUE(train_op.ok()) << train_op.status();
  auto init = train::global_variables_initializer(s);
  ASSERT_TRUE(init.ok()) << init.status();
  ASSERT_TRUE(root.ok()) << root.status();
  const Graph& g = *root.graph();
  EXPECT_EQ(g.find("w1")->requested_device, "/job:ps/task:0");
  EXPECT_EQ(g.find("w2")->requested_device, "/job:ps/task:1");
  EXPECT_EQ(gs.node()->requested_device, "/job:ps/task:0");
  EXPECT_EQ(g.find("mm")->requested_device, "/job:worker/task:1");
  EXPECT_EQ(g.find("y")->requested_device, "/job:worker/task:1");
  EXPECT_EQ(g.find("on_task0")->requested_device, "/job:worker/task:0");
  int in_place = 0;
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node* n = g.node(i);
    if (!is_ref_consumer_op(n->op)) continue;
    const Node* v = g.find(n->attrs.get_or<std::string>("var_name", ""));
    if (!v && !n->inputs.empty()) v = g.node(n->inputs[0].node);
    if (!v || !is_variable_op(v->op)) continue;
    EXPECT_EQ(n->requested_device, v->requested_device) << n->name << " (" << n->op << ") of " << v->name;
    ++in_place;
  }
  EXPECT_GE(in_place, 3 + 3);  // each variable's initializer and update (the step's AssignAdd)
  EXPECT_EQ(ops::identity(s.colocate_with(w2).with_op_name("near_w2"), w2).node()->requested_device, "");
  EXPECT_EQ(setter.bytes_per_task(), (std::vector<int64_t>{6 * 4 + 8, 2 * 4}));
  Graph placed = g;
  PlacerOptions po;
  auto st = place_graph(placed,
                        {{"/job:ps/replica:0/task:0/device:CPU:0", "CPU"},
                         {"/job:ps/replica:0/task:1/device:CPU:0", "CPU"},
                         {"/job:worker/replica:0/task:0/device:CPU:0", "CPU"},
                         {"/job:worker/replica:0/task:1/device:CPU:0", "CPU"}},
                        po);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(placed.find("w2")->assigned_device, "/job:ps/replica:0/task:1/device:CPU:0");
  EXPECT_EQ(placed.find("mm")->assigned_device, "/job:worker/replica:0/task:1/device:CPU:0");
}
}  // namespace
}  // namespace actorflow
