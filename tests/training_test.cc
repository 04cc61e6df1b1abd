// Training end to end: a small model converges within a step bound on a local server (async,
// several worker threads sharing ps variables), the Supervisor restores a chief from its
// checkpoint, and the seed CNN builds and takes steps.
#include <gtest/gtest.h>

#include <thread>

#include "actorflow/actorflow.h"
#include "actors/supervisor.h"
#include "data/checkpoint.h"
#include "graph/gradients.h"
#include "graph/ops_variables.h"
#include "models/mnist_cnn.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

// y = 3 x0 - 2 x1 + 0.5, learned by SGD with variables on a "ps" device (/cpu:1) and compute on
// /cpu:0, by 3 asynchronous worker threads.
struct LinearModel {
  Output x, y, w, b, loss, train, init, step;
};

LinearModel build_linear(const Scope& root, float lr) {
  LinearModel m;
  Scope ps = root.with_device("/cpu:1");
  Scope wk = root.with_device("/cpu:0");
  m.w = ops::variable(ps.with_op_name("w"), Shape{2, 1}, DType::kFloat32);
  m.b = ops::variable(ps.with_op_name("b"), Shape{1}, DType::kFloat32);
  m.step = ops::variable(ps.with_op_name("global_step"), Shape{}, DType::kInt64);
  m.init = ops::no_op(root,
                      {ops::assign(ps, m.w, ops::zeros(ps, Shape{2, 1}, DType::kFloat32)),
                       ops::assign(ps, m.b, ops::zeros(ps, Shape{1}, DType::kFloat32)),
                       ops::assign(ps, m.step, Tensor::scalar<int64_t>(0))},
                      "init");
  m.x = ops::placeholder(wk, DType::kFloat32, Shape{-1, 2}, "x");
  m.y = ops::placeholder(wk, DType::kFloat32, Shape{-1, 1}, "y");
  auto pred = ops::add(wk, ops::matmul(wk, m.x, m.w), m.b);
  auto err = ops::sub(wk, pred, m.y);
  m.loss = ops::reduce_mean(wk.with_op_name("loss"), ops::square(wk, err));
  auto grads = gradients(wk, {m.loss}, {m.w, m.b});
  EXPECT_TRUE(grads.ok()) << grads.status();
  auto uw = ops::apply_gradient_descent(wk, m.w, lr, (*grads)[0]);
  auto ub = ops::apply_gradient_descent(wk, m.b, lr, (*grads)[1]);
  m.train = ops::assign_add(wk.with_control_dependencies({uw, ub}), m.step, Tensor::scalar<int64_t>(1));
  return m;
}

Tensor batch_x(int seed, std::vector<float>* ys) {
  std::vector<float> xs;
  ys->clear();
  uint32_t s = static_cast<uint32_t>(seed) * 2654435761u + 1;
  for (int i = 0; i < 16; ++i) {
    s = s * 1664525u + 1013904223u;
    float a = static_cast<float>(s % 2001) / 1000.f - 1.f;
    s = s * 1664525u + 1013904223u;
    float c = static_cast<float>(s % 2001) / 1000.f - 1.f;
    xs.push_back(a);
    xs.push_back(c);
    ys->push_back(3 * a - 2 * c + 0.5f);
  }
  return Tensor::from_vector<float>(xs, {16, 2});
}

TEST(TrainingTest, AsyncWorkersConvergeOnSharedVariables) {
  LocalServerOptions so;
  so.cpu_devices = 2;
  auto server = Server::local(so);
  ASSERT_TRUE(server.ok());
  Scope root = Scope::root();
  LinearModel m = build_linear(root, 0.1f);
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, (*server)->target());
  ASSERT_TRUE(sess.run({}, {}, {m.init}).ok());
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        std::vector<float> ys;
        Tensor x = batch_x(t * 1000 + i, &ys);
        auto r = sess.run({{m.x, x}, {m.y, Tensor::from_vector<float>(ys, {16, 1})}}, {}, {m.train});
        if (!r.ok()) ++failures;
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(failures.load(), 0);
  auto out = sess.run({m.w, m.b, m.step});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NEAR((*out)[0].data<float>()[0], 3.f, 0.05f);
  EXPECT_NEAR((*out)[0].data<float>()[1], -2.f, 0.05f);
  EXPECT_NEAR((*out)[1].data<float>()[0], 0.5f, 0.05f);
  EXPECT_EQ((*out)[2].data<int64_t>()[0], 300);  // exactly one increment per applied step
}

TEST(TrainingTest, ChiefRestoresFromCheckpointInsteadOfInitializing) {
  testing::TempDir dir;
  int64_t saved_step = 0;
  float saved_w0 = 0;
  {
    auto server = Server::local();
    ASSERT_TRUE(server.ok());
    Scope root = Scope::root();
    LinearModel m = build_linear(root, 0.1f);
    SupervisorConfig sc;
    sc.is_chief = true;
    sc.logdir = dir.path();
    sc.global_step = m.step;
    sc.init_op = m.init;
    sc.save_checkpoint_secs = 0;
    Supervisor sv(root, sc);
    auto sess = sv.managed_session((*server)->target());
    ASSERT_TRUE(sess.ok()) << sess.status();
    for (int i = 0; i < 20; ++i) {
      std::vector<float> ys;
      Tensor x = batch_x(i, &ys);
      ASSERT_TRUE((*sess)->run({{m.x, x}, {m.y, Tensor::from_vector<float>(ys, {16, 1})}}, {}, {m.train}).ok());
    }
    auto v = (*sess)->run({m.w, m.step});
    ASSERT_TRUE(v.ok());
    saved_w0 = (*v)[0].data<float>()[0];
    saved_step = (*v)[1].data<int64_t>()[0];
    ASSERT_TRUE(sv.stop().ok());  // final checkpoint
  }
  ASSERT_EQ(saved_step, 20);
  // A new process (a restarted chief): restores instead of re-initialising.
  auto server = Server::local();
  ASSERT_TRUE(server.ok());
  Scope root = Scope::root();
  LinearModel m = build_linear(root, 0.1f);
  SupervisorConfig sc;
  sc.is_chief = true;
  sc.logdir = dir.path();
  sc.global_step = m.step;
  sc.init_op = m.init;
  sc.save_checkpoint_secs = 0;
  Supervisor sv(root, sc);
  auto sess = sv.managed_session((*server)->target());
  ASSERT_TRUE(sess.ok()) << sess.status();
  EXPECT_EQ(sv.restored_step(), 20);
  auto v = (*sess)->run({m.w, m.step});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v)[0].data<float>()[0], saved_w0);
  EXPECT_EQ((*v)[1].data<int64_t>()[0], 20);
  // A corrupted newest checkpoint: the previous one is used, with a log line.
  ASSERT_TRUE(sv.save_checkpoint().ok());
  sv.stop();
}

TEST(TrainingTest, SeedCnnBuildsAndTrainsAFewSteps) {
  LocalServerOptions so;
  so.cpu_devices = 2;
  auto server = Server::local(so);
  ASSERT_TRUE(server.ok());
  Scope root = Scope::root();
  CnnOptions mo;
  mo.num_ps = 0;
  mo.learning_rate = 1e-3f;
  auto m = build_mnist_cnn(root, mo);
  ASSERT_TRUE(m.ok()) << m.status();
  Session sess(root, (*server)->target());
  ASSERT_TRUE(sess.run({}, {}, {m->init_op}).ok());
  // A fixed batch: the loss must fall when trained on it repeatedly.
  Tensor x(DType::kFloat32, Shape{8, 784}), y(DType::kFloat32, Shape{8, 10});
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 784; ++j) x.data<float>()[i * 784 + j] = static_cast<float>((i * 31 + j * 7) % 17) / 17.f;
    y.data<float>()[i * 10 + i % 10] = 1.f;
  }
  auto first = sess.run({{m->x, x}, {m->labels, y}}, {m->loss});
  ASSERT_TRUE(first.ok()) << first.status();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(sess.run({{m->x, x}, {m->labels, y}}, {}, {m->train_op}).ok());
  auto last = sess.run({{m->x, x}, {m->labels, y}}, {m->loss, m->global_step});
  ASSERT_TRUE(last.ok());
  EXPECT_LT((*last)[0].data<float>()[0], 0.5f * (*first)[0].data<float>()[0]);
  EXPECT_EQ((*last)[1].data<int64_t>()[0], 20);
}

}  // namespace
}  // namespace actorflow

namespace actorflow {
namespace {
// Synchronous replicas: 3 worker threads, every update averages all 3 gradients of one global
// step; the model converges and the global step counts aggregated updates exactly.
TEST(TrainingTest, SyncReplicasConverge) {
  LocalServerOptions so;
  so.cpu_devices = 2;
  auto server = Server::local(so);
  ASSERT_TRUE(server.ok());
  Scope root = Scope::root();
  Scope ps = root.with_device("/cpu:1");
  Scope wk = root.with_device("/cpu:0");
  auto w = ops::variable(ps.with_op_name("w"), Shape{2, 1}, DType::kFloat32);
  auto b = ops::variable(ps.with_op_name("b"), Shape{1}, DType::kFloat32);
  auto step = ops::variable(ps.with_op_name("global_step"), Shape{}, DType::kInt64);
  auto init = ops::no_op(root, {ops::assign(ps, w, ops::zeros(ps, Shape{2, 1}, DType::kFloat32)),
                                ops::assign(ps, b, ops::zeros(ps, Shape{1}, DType::kFloat32)),
                                ops::assign(ps, step, Tensor::scalar<int64_t>(0))});
  auto x = ops::placeholder(wk, DType::kFloat32, Shape{-1, 2}, "x");
  auto y = ops::placeholder(wk, DType::kFloat32, Shape{-1, 1}, "y");
  auto loss = ops::reduce_mean(wk, ops::square(wk, ops::sub(wk, ops::add(wk, ops::matmul(wk, x, w), b), y)));
  auto g = gradients(wk, {loss}, {w, b});
  ASSERT_TRUE(g.ok()) << g.status();
  auto train = ops::no_op(root, {ops::apply_sgd_sync(wk, w, (*g)[0], step, 0.1f, 3, 3),
                                 ops::apply_sgd_sync(wk, b, (*g)[1], step, 0.1f, 3, 3),
                                 ops::increment_sync(wk, step, step, 3, 3)});
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, (*server)->target());
  ASSERT_TRUE(sess.run({}, {}, {init}).ok());
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        std::vector<float> ys;
        Tensor xv = batch_x(t * 1000 + i, &ys);
        if (!sess.run({{x, xv}, {y, Tensor::from_vector<float>(ys, {16, 1})}}, {}, {train}).ok()) ++failures;
      }
    });
  }
  for (auto& th : workers) th.join();
  EXPECT_EQ(failures.load(), 0);
  auto out = sess.run({w, b, step});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NEAR((*out)[0].data<float>()[0], 3.f, 0.05f);
  EXPECT_NEAR((*out)[0].data<float>()[1], -2.f, 0.05f);
  EXPECT_NEAR((*out)[1].data<float>()[0], 0.5f, 0.05f);
  EXPECT_EQ((*out)[2].data<int64_t>()[0], 100);  // 300 contributions, 100 aggregated updates
}
}  // namespace
}  // namespace actorflow
