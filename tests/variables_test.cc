// Variables as actors on a local server: initializers, reads, assigns, optimizer updates
// against hand-computed values, atomic concurrent updates, sharing by name across sessions,
// and synchronous-replica accumulation.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "actorflow/actorflow.h"
#include "graph/ops_variables.h"

namespace actorflow {
namespace {

std::unique_ptr<Server> server2() {
  LocalServerOptions o;
  o.cpu_devices = 2;
  return std::move(*Server::local(o));
}

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

}  // namespace
}  // namespace actorflow

#include "graph/replica_device_setter.h"

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
}  // namespace
}  // namespace actorflow
