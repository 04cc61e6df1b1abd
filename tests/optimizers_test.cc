// The training API of <actorflow/train.h> on a local server: every optimizer's updates over
// three steps of fed gradients against values worked out by hand, minimize on a small quadratic,
// the global step, variable collections and initializers, placement of the updates on their
// variable's device, slots kept across an assign, and errors as Status values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>

#include "actorflow/actorflow.h"
#include "tests/util/eval.h"
#include "tests/util/local_server.h"
#include "tests/util/process.h"
#include "actorflow/train.h"
#include "graph/ops_variables.h"
#include "runtime/placer.h"

namespace actorflow {
namespace {

namespace train = actorflow::train;

std::unique_ptr<Server> server2() { return testing::two_device_server(); }

using testing::vec;

// A variable "w" = [1, -1] on /cpu:1 (the "ps"), a fed gradient on /cpu:0 (the "worker") and
// `opt`'s apply_gradients; runs three steps with the gradients G1 = [0.5, -2], G2 = [1, 1],
// G3 = [-0.5, 0.25] and returns w after each step.
std::vector<std::vector<float>> three_steps(const train::Optimizer& opt) {
  auto server = server2();
  Scope root = Scope::root();
  Scope ps = root.with_device("/cpu:1"), worker = root.with_device("/cpu:0");
  Tensor w0 = vec({1, -1});
  Output w = train::get_variable(ps, "w", Shape{2}, DType::kFloat32,
                                 [&](const Scope& s, const Shape&, DType) { return ops::constant(s, w0); });
  Output g = ops::placeholder(worker, DType::kFloat32, Shape{2}, "g");
  auto update = opt.apply_gradients(worker, {{g, w}});
  auto init = train::global_variables_initializer(root);
  EXPECT_TRUE(update.ok()) << update.status();
  EXPECT_TRUE(init.ok()) << init.status();
  if (!update.ok() || !init.ok()) return {};
  Session sess(root, server->target());
  EXPECT_TRUE(sess.run({}, {}, {*init}).ok());
  std::vector<std::vector<float>> out;
  for (const Tensor& gv : {vec({0.5f, -2}), vec({1, 1}), vec({-0.5f, 0.25f})}) {
    auto r = sess.run({{g, gv}}, {}, {*update});
    EXPECT_TRUE(r.ok()) << r.status();
    auto v = sess.run({w});
    EXPECT_TRUE(v.ok()) << v.status();
    if (!r.ok() || !v.ok()) return out;
    out.push_back({(*v)[0].data<float>()[0], (*v)[0].data<float>()[1]});
  }
  return out;
}

void expect_steps(const std::vector<std::vector<float>>& got, const std::vector<std::vector<double>>& want,
                  double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t t = 0; t < want.size(); ++t)
    for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(got[t][i], want[t][i], tol) << "step " << t + 1 << " element " << i;
}

TEST(OptimizersTest, GradientDescentMatchesHandValues) {
  // lr 0.1: w -= 0.1 g.
  //   step 1: [1 - 0.05, -1 + 0.2]     = [0.95, -0.8]
  //   step 2: [0.95 - 0.1, -0.8 - 0.1] = [0.85, -0.9]
  //   step 3: [0.85 + 0.05, -0.9 - 0.025] = [0.9, -0.925]
  expect_steps(three_steps(train::GradientDescentOptimizer(0.1f)), {{0.95, -0.8}, {0.85, -0.9}, {0.9, -0.925}}, 1e-6);
}

TEST(OptimizersTest, MomentumMatchesHandValues) {
  // lr 0.1, momentum 0.9: a = 0.9 a + g; w -= 0.1 a.
  //   step 1: a = [0.5, -2];                           w = [0.95, -0.8]
  //   step 2: a = [0.45 + 1, -1.8 + 1] = [1.45, -0.8];   w = [0.95 - 0.145, -0.8 + 0.08] = [0.805, -0.72]
  //   step 3: a = [1.305 - 0.5, -0.72 + 0.25] = [0.805, -0.47]; w = [0.805 - 0.0805, -0.72 + 0.047]
  expect_steps(three_steps(train::MomentumOptimizer(0.1f, 0.9f)), {{0.95, -0.8}, {0.805, -0.72}, {0.7245, -0.673}},
               1e-6);
}

TEST(OptimizersTest, AdamMatchesHandValues) {
  // lr 0.01, beta1 0.9, beta2 0.999, eps 1e-8; m = 0.9 m + 0.1 g; v = 0.999 v + 0.001 g^2;
  // lr_t = 0.01 sqrt(1 - 0.999^t) / (1 - 0.9^t); w -= lr_t m / (sqrt(v) + 1e-8).
  // lr_1 = 0.01 * 0.0316227766 / 0.1 = 0.00316227766; lr_2 = 0.01 * sqrt(0.001999) / 0.19 = 0.00235316725;
  // lr_3 = 0.01 * sqrt(0.002997001) / 0.271 = 0.00202010597.
  // Element 0 (g = 0.5, 1, -0.5):
  //   t1: m = 0.05, v = 0.00025;   w = 1 - 0.00316227766 * 0.05 / 0.0158113883 = 0.99000000632
  //   t2: m = 0.045 + 0.1 = 0.145, v = 0.00024975 + 0.001 = 0.00124975;
  //       w = 0.99000000632 - 0.00235316725 * 0.145 / 0.0353518033 = 0.98034818880
  //   t3: m = 0.1305 - 0.05 = 0.0805, v = 0.00124850025 + 0.00025 = 0.00149850025;
  //       w = 0.98034818880 - 0.00202010597 * 0.0805 / 0.0387104669 = 0.97614729685
  // Element 1 (g = -2, 1, 0.25):
  //   t1: m = -0.2, v = 0.004;     w = -1 + 0.00316227766 * 0.2 / 0.0632455532 = -0.99000000158
  //   t2: m = -0.18 + 0.1 = -0.08, v = 0.003996 + 0.001 = 0.004996;
  //       w = -0.99000000158 + 0.00235316725 * 0.08 / 0.0706823882 = -0.98733663156
  //   t3: m = -0.072 + 0.025 = -0.047, v = 0.004991004 + 0.0000625 = 0.005053504;
  //       w = -0.98733663156 + 0.00202010597 * 0.047 / 0.0710880018 = -0.98600103392
  expect_steps(three_steps(train::AdamOptimizer(0.01f)),
               {{0.99000000632, -0.99000000158}, {0.98034818880, -0.98733663156}, {0.97614729685, -0.98600103392}},
               2e-6);
}

TEST(OptimizersTest, AdagradMatchesHandValues) {
  // lr 0.1, accumulator from 0.1: a += g^2; w -= 0.1 g / sqrt(a).
  // Element 0: a = 0.35, 1.35, 1.6
  //   w = 1 - 0.05 / sqrt(0.35) = 1 - 0.0845154255 = 0.9154845745
  //   w = 0.9154845745 - 0.1 / sqrt(1.35) = 0.9154845745 - 0.0860662966 = 0.8294182779
  //   w = 0.8294182779 + 0.05 / sqrt(1.6) = 0.8294182779 + 0.0395284708 = 0.8689467487
  // Element 1: a = 4.1, 5.1, 5.1625
  //   w = -1 + 0.2 / sqrt(4.1) = -1 + 0.0987729597 = -0.9012270403
  //   w = -0.9012270403 - 0.1 / sqrt(5.1) = -0.9012270403 - 0.0442807443 = -0.9455077846
  //   w = -0.9455077846 - 0.025 / sqrt(5.1625) = -0.9455077846 - 0.0110029712 = -0.9565107558
  expect_steps(three_steps(train::AdagradOptimizer(0.1f)),
               {{0.9154845745, -0.9012270403}, {0.8294182779, -0.9455077846}, {0.8689467487, -0.9565107558}}, 1e-6);
}

TEST(OptimizersTest, RMSPropMatchesHandValues) {
  // lr 0.01, decay 0.9, momentum 0.5, eps 1e-10, ms from 1 and mom from 0 (TF 1.x):
  //   ms = 0.9 ms + 0.1 g^2; mom = 0.5 mom + 0.01 g / sqrt(ms + eps); w -= mom.
  // Element 0 (g = 0.5, 1, -0.5):
  //   ms = 0.9 + 0.025 = 0.925;   mom = 0.005 / 0.9617692031 = 0.0051987524;  w = 0.9948012476
  //   ms = 0.8325 + 0.1 = 0.9325; mom = 0.0025993762 + 0.01 / 0.9656603958 = 0.0129549837; w = 0.9818462639
  //   ms = 0.83925 + 0.025 = 0.86425; mom = 0.0064774918 - 0.005 / 0.9296504719 = 0.0010991264;
  //   w = 0.9807471375
  // Element 1 (g = -2, 1, 0.25):
  //   ms = 0.9 + 0.4 = 1.3;   mom = -0.02 / 1.1401754251 = -0.0175411604;  w = -0.9824588396
  //   ms = 1.17 + 0.1 = 1.27; mom = -0.0087705802 + 0.01 / 1.1269427671 = 0.0001029849; w = -0.9825618245
  //   ms = 1.143 + 0.00625 = 1.14925; mom = 0.0000514925 + 0.0025 / 1.0720307831 = 0.0023835150;
  //   w = -0.9849453396
  expect_steps(three_steps(train::RMSPropOptimizer(0.01f, 0.9f, 0.5f)),
               {{0.9948012476, -0.9824588396}, {0.9818462639, -0.9825618245}, {0.9807471375, -0.9849453396}}, 1e-6);
}

TEST(OptimizersTest, FtrlMatchesHandValues) {
  // lr 0.1, lr_power -0.5, accumulator from 0.1, l1 0.01, l2 0.05 (tests/optimizer_math_test.cc
  // works the same three steps out by hand): a' = a + g^2;
  // linear += g - (sqrt(a') - sqrt(a)) / 0.1 * w; w = (sign(linear) 0.01 - linear) / (sqrt(a') / 0.1 + 0.1).
  // Element 0, step 1: linear = 0.5 - 2.7538021229 = -2.2538021229; w = 2.2438021229 / 6.0160797831.
  expect_steps(three_steps(train::FtrlOptimizer(0.1f, -0.5f, 0.1f, 0.01f, 0.05f)),
               {{0.3729674811, -0.7409003675}, {0.2876356044, -0.7849858978}, {0.3268540263, -0.7959406551}}, 1e-5);
}

// loss = sum((w - t)^2), w = [1, 2], t = [3, -1]: loss0 = 4 + 9 = 13, dloss/dw = 2 (w - t) = [-4, 6].
struct Quadratic {
  std::unique_ptr<Server> server = server2();
  Scope root = Scope::root();
  Output w, loss, gs;
  Quadratic() {
    Scope ps = root.with_device("/cpu:1"), worker = root.with_device("/cpu:0");
    Tensor w0 = vec({1, 2});
    w = train::get_variable(ps, "w", Shape{2}, DType::kFloat32,
                            [&](const Scope& s, const Shape&, DType) { return ops::constant(s, w0); });
    gs = train::get_or_create_global_step(ps);
    loss = ops::reduce_sum(worker, ops::square(worker, ops::sub(worker, w, vec({3, -1}))));
  }
};

void expect_minimize(const train::Optimizer& opt, double w1_0, double w1_1) {
  Quadratic q;
  auto train_op = opt.minimize(q.root.with_device("/cpu:0"), q.loss, q.gs);
  ASSERT_TRUE(train_op.ok()) << train_op.status();
  auto init = train::global_variables_initializer(q.root);
  ASSERT_TRUE(init.ok()) << init.status();
  Session sess(q.root, q.server->target());
  ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
  std::vector<double> losses;
  for (int step = 1; step <= 5; ++step) {
    auto r = sess.run({}, {q.loss}, {*train_op});  // the loss before this step's update
    ASSERT_TRUE(r.ok()) << r.status();
    losses.push_back((*r)[0].data<float>()[0]);
    if (step == 1) {
      auto w = sess.run({q.w, q.gs});
      ASSERT_TRUE(w.ok()) << w.status();
      EXPECT_NEAR((*w)[0].data<float>()[0], w1_0, 1e-5) << opt.name();
      EXPECT_NEAR((*w)[0].data<float>()[1], w1_1, 1e-5) << opt.name();
      EXPECT_EQ((*w)[1].data<int64_t>()[0], 1) << opt.name();
    }
  }
  auto last = sess.run({q.loss, q.gs});
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_NEAR(losses[0], 13.0, 1e-5);
  EXPECT_LT(losses[1], losses[0]) << opt.name();
  EXPECT_LT((*last)[0].data<float>()[0], losses[1]) << opt.name();
  EXPECT_EQ((*last)[1].data<int64_t>()[0], 5) << opt.name();
}

TEST(OptimizersTest, MinimizeDecreasesAQuadraticAndMatchesStepOne) {
  // SGD lr 0.1: w = [1 + 0.4, 2 - 0.6] = [1.4, 1.4] (loss 2.56 + 5.76 = 8.32).
  expect_minimize(train::GradientDescentOptimizer(0.1f), 1.4, 1.4);
  // Momentum: the first accumulator is the gradient itself, so step 1 equals SGD's.
  expect_minimize(train::MomentumOptimizer(0.1f, 0.9f), 1.4, 1.4);
  // Adam step 1 moves each weight by lr * g / (|g| + eps / sqrt(1 - beta2)) = 0.1 (to 1e-7).
  expect_minimize(train::AdamOptimizer(0.1f), 1.1, 1.9);
  // Adagrad: a = 0.1 + 16 = 16.1, w = 1 + 0.4 / 4.0124805 = 1.0996890;
  //          a = 0.1 + 36 = 36.1, w = 2 - 0.6 / 6.0083276 = 1.9001386.
  expect_minimize(train::AdagradOptimizer(0.1f), 1.0996890, 1.9001386);
  // RMSProp (momentum 0): ms = 0.9 + 1.6 = 2.5, w = 1 + 0.4 / 1.5811388 = 1.2529822;
  //                       ms = 0.9 + 3.6 = 4.5, w = 2 - 0.6 / 2.1213203 = 1.7171573.
  expect_minimize(train::RMSPropOptimizer(0.1f), 1.2529822, 1.7171573);
}

// TensorFlow 1.x programs often make the global step a float (the seed's
// get_variable('global_step', [], initializer=constant_initializer(0), trainable=False)): it is
// counted by adding 1.0, and a Saver names the checkpoint by it.
TEST(OptimizersTest, AFloatGlobalStepCountsAndNamesCheckpoints) {
  auto server = server2();
  Scope root = Scope::root();
  Output w = train::get_variable(root, "w", Shape{}, DType::kFloat32, train::zeros_initializer());
  Output gs = train::get_variable(root, "global_step", Shape{}, DType::kFloat32, train::zeros_initializer(),
                                  /*trainable=*/false);
  auto op = train::GradientDescentOptimizer(1.f).apply_gradients(root, {{ops::constant(root, Tensor::scalar<float>(1.f)), w}}, gs);
  ASSERT_TRUE(op.ok()) << op.status();
  auto init = train::global_variables_initializer(root);
  ASSERT_TRUE(init.ok()) << init.status();
  train::Saver saver(root);
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
  for (int step = 1; step <= 3; ++step) {
    auto r = sess.run({*op});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ((*r)[0].dtype(), DType::kFloat32);
    EXPECT_EQ((*r)[0].data<float>()[0], static_cast<float>(step));
  }
  testing::TempDir dir;
  auto path = saver.save(sess, dir.path() + "/model", gs);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_NE(path->find("model-3"), std::string::npos) << *path;
}

TEST(OptimizersTest, GlobalStepAdvancesExactlyOncePerRun) {
  auto server = server2();
  Scope root = Scope::root();
  // Two variables on two devices; the global step on a third place (/cpu:0 with a).
  Output a = train::get_variable(root.with_device("/cpu:0"), "a", Shape{}, DType::kFloat32, train::zeros_initializer());
  Output b = train::get_variable(root.with_device("/cpu:1"), "b", Shape{3}, DType::kFloat32, train::zeros_initializer());
  Output gs = train::get_or_create_global_step(root.with_device("/cpu:0"));
  train::GradientDescentOptimizer sgd(1.f);
  auto op = sgd.apply_gradients(root, {{ops::constant(root, Tensor::scalar<float>(1.f)), a},
                                       {ops::constant(root, vec({1, 2, 3})), b}},
                                gs);
  ASSERT_TRUE(op.ok()) << op.status();
  // The op is the increment, and it runs after both updates.
  EXPECT_EQ(op->node()->op, "AssignAdd");
  EXPECT_EQ(op->node()->control_inputs.size(), 2u);
  auto no_step = sgd.apply_gradients(root, {{ops::constant(root, Tensor::scalar<float>(1.f)), a}});
  ASSERT_TRUE(no_step.ok()) << no_step.status();
  EXPECT_EQ(no_step->node()->op, "NoOp");
  auto init = train::global_variables_initializer(root);
  ASSERT_TRUE(init.ok()) << init.status();
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
  for (int64_t step = 1; step <= 3; ++step) {
    auto r = sess.run({*op});  // fetching the op gives the new step
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)[0].data<int64_t>()[0], step);
  }
  ASSERT_TRUE(sess.run({}, {}, {*no_step}).ok());  // updates a, leaves the step alone
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&] {
      for (int i = 0; i < 25; ++i) EXPECT_TRUE(sess.run({}, {}, {*op}).ok());
    });
  for (auto& x : th) x.join();
  auto r = sess.run({gs, a, b});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].data<int64_t>()[0], 103);  // 3 + 4 * 25 runs, one increment each
  EXPECT_EQ((*r)[1].data<float>()[0], -104.f);  // 103 runs with the step + 1 without, lr 1, g 1
  EXPECT_EQ((*r)[2].data<float>()[2], -309.f);  // 103 * 3
}

TEST(OptimizersTest, CollectionsListVariablesInCreationOrder) {
  Scope root = Scope::root();
  EXPECT_FALSE(train::get_global_step(root).valid());
  Output w = train::get_variable(root, "w", Shape{2, 2});
  train::get_variable(root, "b", Shape{2}, DType::kFloat32, train::zeros_initializer());
  Output gs = train::get_or_create_global_step(root);
  ops::variable(root.with_op_name("counter"), Shape{}, DType::kInt32, /*trainable=*/false);
  Scope layer2 = root.new_sub_scope("layer2");
  train::get_variable(layer2, "w", Shape{2});
  ops::add(root, w, w);  // not a variable
  ASSERT_TRUE(root.ok()) << root.status();
  auto names = [](const std::vector<Output>& vs) {
    std::vector<std::string> out;
    for (const auto& v : vs) out.push_back(v.name());
    return out;
  };
  EXPECT_EQ(names(train::global_variables(root)),
            (std::vector<std::string>{"w", "b", "global_step", "counter", "layer2/w"}));
  EXPECT_EQ(names(train::trainable_variables(root)), (std::vector<std::string>{"w", "b", "layer2/w"}));
  EXPECT_EQ(names(train::global_variables(layer2)), (std::vector<std::string>{"layer2/w"}));
  EXPECT_EQ(train::get_or_create_global_step(root).node(), gs.node());  // found, not made again
  EXPECT_EQ(train::get_global_step(layer2).node(), gs.node());
  EXPECT_EQ(gs.dtype(), DType::kInt64);
  // A second variable of the same name is an error, not a silent "w_1".
  EXPECT_FALSE(train::get_variable(root, "w", Shape{2}).valid());
  EXPECT_EQ(root.status().code(), Code::kAlreadyExists) << root.status();
  EXPECT_NE(root.status().message().find("variable 'w' already exists"), std::string::npos) << root.status();
}

TEST(OptimizersTest, GlobalVariablesInitializerInitialisesAll) {
  auto server = server2();
  Scope root = Scope::root();
  Scope ps = root.with_device("/cpu:1");
  Output z = train::get_variable(ps, "z", Shape{2}, DType::kFloat32, train::zeros_initializer());
  Output c = train::get_variable(ps, "c", Shape{2, 2}, DType::kFloat32, train::constant_initializer(2.5));
  Output g = train::get_variable(ps, "g", Shape{20, 10});  // default: glorot_uniform seeded by name
  Output n = train::get_variable(ps, "n", Shape{3}, DType::kInt64, train::constant_initializer(7));
  Output legacy = ops::variable(ps.with_op_name("legacy"), Shape{2}, DType::kFloat32);
  train::set_initial_value(root, legacy, vec({4, 5}));
  Output gs = train::get_or_create_global_step(ps);
  auto init = train::global_variables_initializer(root);
  ASSERT_TRUE(init.ok()) << init.status();
  EXPECT_EQ(init->node()->control_inputs.size(), 6u);
  std::vector<Output> inited;
  for (const Output& v : train::global_variables(root)) inited.push_back(ops::is_variable_initialized(root, v));
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  auto before = sess.run(inited);
  ASSERT_TRUE(before.ok()) << before.status();
  for (const Tensor& t : *before) EXPECT_FALSE(t.data<bool>()[0]);
  ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
  auto after = sess.run(inited);
  ASSERT_TRUE(after.ok()) << after.status();
  for (const Tensor& t : *after) EXPECT_TRUE(t.data<bool>()[0]);
  auto r = sess.run({z, c, g, n, legacy, gs});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].to_string(), "[0. 0.]");
  EXPECT_EQ((*r)[1].to_string(), "[[2.5 2.5]\n [2.5 2.5]]");
  const float limit = std::sqrt(6.f / 30.f);  // glorot: sqrt(6 / (fan_in + fan_out))
  float mx = 0;
  for (int i = 0; i < 200; ++i) mx = std::max(mx, std::fabs((*r)[2].data<float>()[i]));
  EXPECT_LE(mx, limit);
  EXPECT_GT(mx, 0.5f * limit);
  EXPECT_EQ((*r)[3].data<int64_t>()[2], 7);
  EXPECT_EQ((*r)[4].to_string(), "[4. 5.]");
  EXPECT_EQ((*r)[5].data<int64_t>()[0], 0);

  // The same graph built again gives the same glorot values (seeded by the variable's name).
  Scope same = Scope::root();
  train::get_variable(same, "g", Shape{20, 10});
  // Reading the initial value op directly (not the variable: it is shared by name on the server).
  Node* value_node = same.graph()->find("g/Initializer");
  ASSERT_NE(value_node, nullptr);
  Session s3(same, server->target());
  auto v3 = s3.run({Output(value_node, 0)});
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_TRUE((*v3)[0].equals((*r)[2]));

  // A variable without a recorded initializer is named, not skipped.
  Scope bare = Scope::root();
  ops::variable(bare.with_op_name("orphan"), Shape{1}, DType::kFloat32);
  train::get_variable(bare, "fine", Shape{1});
  auto bad = train::global_variables_initializer(bare);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(bad.status().message().find("no initializer recorded for variable(s) 'orphan'"), std::string::npos)
      << bad.status();
}

TEST(OptimizersTest, SlotsSurviveAnAssignOfTheVariable) {
  auto server = server2();
  Scope root = Scope::root();
  Output w = train::get_variable(root.with_device("/cpu:1"), "w", Shape{1}, DType::kFloat32,
                                 train::constant_initializer(1.0));
  auto op = train::AdagradOptimizer(0.1f).apply_gradients(root, {{ops::constant(root, vec({2})), w}});
  auto init = train::global_variables_initializer(root);
  ASSERT_TRUE(op.ok()) << op.status();
  ASSERT_TRUE(init.ok()) << init.status();
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
  ASSERT_TRUE(sess.run({}, {}, {*op}).ok());  // a = 0.1 + 4 = 4.1
  ASSERT_TRUE(sess.run({}, {}, {*init}).ok());  // w = 1 again (as a checkpoint restore does)
  ASSERT_TRUE(sess.run({}, {}, {*op}).ok());  // a = 8.1: the accumulator was kept
  auto r = sess.run({w});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR((*r)[0].data<float>()[0], 1 - 0.2 / std::sqrt(8.1), 1e-6);  // 0.92972740, not 1 - 0.2 / sqrt(4.1)
}

TEST(OptimizersTest, UpdatesArePlacedOnTheirVariablesDevice) {
  auto server = server2();  // registers the kernels the placer looks up
  Scope root = Scope::root();
  Scope ps0 = root.with_device("/job:ps/task:0"), ps1 = root.with_device("/job:ps/task:1");
  Scope worker = root.with_device("/job:worker/task:0");
  Output w = train::get_variable(ps0, "w", Shape{2});
  Output b = train::get_variable(ps1, "b", Shape{2});
  Output gs = train::get_or_create_global_step(ps1);
  Output loss = ops::reduce_sum(worker, ops::square(worker, ops::add(worker, w, b)));
  std::vector<std::unique_ptr<train::Optimizer>> opts;
  opts.push_back(std::make_unique<train::GradientDescentOptimizer>(0.1f));
  opts.push_back(std::make_unique<train::MomentumOptimizer>(0.1f, 0.9f));
  opts.push_back(std::make_unique<train::AdamOptimizer>());
  opts.push_back(std::make_unique<train::AdagradOptimizer>(0.1f));
  opts.push_back(std::make_unique<train::RMSPropOptimizer>(0.1f));
  for (const auto& opt : opts) {
    auto op = opt->minimize(worker, loss, gs);
    ASSERT_TRUE(op.ok()) << opt->name() << ": " << op.status();
  }
  Graph g = *root.graph();
  PlacerOptions po;
  po.default_device = "/job:worker/replica:0/task:0/device:CPU:0";
  auto placed = place_graph(g,
                            {{"/job:ps/replica:0/task:0/device:CPU:0", "CPU"},
                             {"/job:ps/replica:0/task:1/device:CPU:0", "CPU"},
                             {"/job:worker/replica:0/task:0/device:CPU:0", "CPU"}},
                            po);
  ASSERT_TRUE(placed.ok()) << placed.status();
  const std::string p0 = "/job:ps/replica:0/task:0/device:CPU:0", p1 = "/job:ps/replica:0/task:1/device:CPU:0";
  int updates = 0;
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node* n = g.node(i);
    if (n->op.rfind("Apply", 0) == 0 || n->op == "AssignAdd") {
      ++updates;
      const std::string var = n->attrs.get_or<std::string>("var_name", "");
      EXPECT_EQ(n->assigned_device, var == "w" ? p0 : p1) << n->name << " updates " << var;
      // Its hyper-parameters are on the same device: nothing but the gradient crosses.
      int consts = 0;
      for (const Endpoint& e : n->inputs) {
        if (g.node(e.node)->op != "Const") continue;
        ++consts;
        EXPECT_EQ(g.node(e.node)->assigned_device, n->assigned_device) << n->name;
      }
      EXPECT_EQ(consts, static_cast<int>(n->inputs.size()) - (n->op == "AssignAdd" ? 0 : 1)) << n->name;
    }
    if (n->name.rfind("gradients", 0) == 0) {
      EXPECT_EQ(n->assigned_device, "/job:worker/replica:0/task:0/device:CPU:0") << n->name;
    }
  }
  EXPECT_EQ(updates, 5 * 3);  // per optimizer: w, b and the global step
  EXPECT_EQ(g.find("Adam/update_w")->op, "ApplyAdam");
  EXPECT_EQ(g.find("RMSProp/update_b")->op, "ApplyRMSProp");
}

TEST(OptimizersTest, ErrorsAreStatusesNamingTheCause) {
  auto has = [](const Status& s, const std::string& what) {
    return s.message().find(what) != std::string::npos;
  };
  train::GradientDescentOptimizer sgd(0.1f);
  {  // Nothing to train: only a non-trainable global step.
    Scope root = Scope::root();
    Output gs = train::get_or_create_global_step(root);
    Output loss = ops::reduce_sum(root, ops::cast(root, gs, DType::kFloat32));
    auto r = sgd.minimize(root, loss, gs);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_TRUE(has(r.status(), "GradientDescent.compute_gradients: no variables to optimize")) << r.status();
  }
  {  // Not a variable, in var_list and in grads_and_vars.
    Scope root = Scope::root();
    Output w = train::get_variable(root, "w", Shape{2});
    Output c = ops::constant(root, vec({1, 2}), "c");
    Output loss = ops::reduce_sum(root, ops::mul(root, w, c));
    auto r = sgd.minimize(root, loss, Output(), {w, c});
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(has(r.status(), "'c' is a Const, not a variable")) << r.status();
    auto a = sgd.apply_gradients(root, {{c, c}});
    ASSERT_FALSE(a.ok());
    EXPECT_TRUE(has(a.status(), "GradientDescent.apply_gradients: 'c' is a Const, not a variable")) << a.status();
    auto twice = sgd.apply_gradients(root, {{c, w}, {c, w}});
    ASSERT_FALSE(twice.ok());
    EXPECT_TRUE(has(twice.status(), "variable 'w' is listed twice")) << twice.status();
    // A loss that does not depend on w: no gradient anywhere.
    Output other = ops::reduce_sum(root, c);
    auto none = sgd.minimize(root, other);
    ASSERT_FALSE(none.ok());
    EXPECT_TRUE(has(none.status(), "no gradients provided for any variable [w]")) << none.status();
    // An invalid loss, an int global step.
    EXPECT_FALSE(sgd.minimize(root, Output()).ok());
    Output counter = ops::variable(root.with_op_name("counter"), Shape{2}, DType::kFloat32, false);
    auto bad_gs = sgd.minimize(root, loss, counter);
    ASSERT_FALSE(bad_gs.ok());
    EXPECT_TRUE(has(bad_gs.status(), "global_step 'counter' must be an int64, int32, float32 or float64 scalar variable"))
        << bad_gs.status();
    EXPECT_TRUE(root.ok()) << root.status();  // none of these broke the graph
  }
  {  // An integer variable cannot be trained; a bad Adagrad hyper-parameter.
    Scope root = Scope::root();
    Output n = train::get_variable(root, "n", Shape{2}, DType::kInt64);
    auto r = sgd.apply_gradients(root, {{ops::constant(root, Tensor::from_vector<int64_t>({1, 1}, {2})), n}});
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(has(r.status(), "variable 'n' is int64; optimizers update float32 variables")) << r.status();
    Output w = train::get_variable(root, "w", Shape{2});
    auto ada = train::AdagradOptimizer(0.1f, 0.f).apply_gradients(root, {{ops::constant(root, vec({1, 1})), w}});
    ASSERT_FALSE(ada.ok());
    EXPECT_TRUE(has(ada.status(), "Adagrad.apply_gradients: initial_accumulator_value must be > 0")) << ada.status();
    auto ftrl = train::FtrlOptimizer(0.1f, 0.5f).apply_gradients(root, {{ops::constant(root, vec({1, 1})), w}});
    ASSERT_FALSE(ftrl.ok());
    EXPECT_TRUE(has(ftrl.status(), "Ftrl.apply_gradients: learning_rate_power must be <= 0")) << ftrl.status();
  }
  {  // A gradient of the wrong shape fails the update op's shape function, naming the variable.
    Scope root = Scope::root();
    Output w = train::get_variable(root, "w", Shape{2});
    auto r = train::RMSPropOptimizer(0.1f).apply_gradients(root, {{ops::constant(root, vec({1, 2, 3})), w}});
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(has(r.status(), "ApplyRMSProp 'RMSProp/update_w': gradient has shape [3] but variable 'w' has shape [2]"))
        << r.status();
    // The scope keeps the error: later builders and Session::run report it.
    EXPECT_FALSE(root.ok());
    auto again = sgd.minimize(root, ops::reduce_sum(root, w));
    EXPECT_FALSE(again.ok());
  }
}

}  // namespace
}  // namespace actorflow

namespace actorflow {
namespace {

namespace train = actorflow::train;

// An embedding table "table" [4, 2] on /cpu:1 (the ps), rows (0,1) (10,11) (20,21) (30,31), looked
// up on /cpu:0 (the worker) with fed ids; loss = sum(weights * rows), so the gradient of row r is
// the sum of the fed weight rows whose id is r.
struct EmbeddingModel {
  std::unique_ptr<Server> server = testing::two_device_server();
  Scope root = Scope::root();
  Output table, ids, weights, loss;
  explicit EmbeddingModel() {
    Scope ps = root.with_device("/cpu:1"), worker = root.with_device("/cpu:0");
    Tensor t0 = Tensor::from_vector<float>({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2});
    table = train::get_variable(ps, "table", Shape{4, 2}, DType::kFloat32,
                                [&](const Scope& s, const Shape&, DType) { return ops::constant(s, t0); });
    ids = ops::placeholder(worker, DType::kInt64, Shape{-1}, "ids");
    weights = ops::placeholder(worker, DType::kFloat32, Shape{-1, 2}, "weights");
    loss = ops::reduce_sum(worker, ops::mul(worker, weights, ops::embedding_lookup(worker, table, ids)));
  }
  std::vector<float> rows(Session& sess) {
    auto r = sess.run({table});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? testing::vals<float>((*r)[0]) : std::vector<float>{};
  }
};

int count_ops(const Graph& g, const std::string& op) {
  int n = 0;
  for (int i = 0; i < g.num_nodes(); ++i) n += g.node(i)->op == op;
  return n;
}

TEST(SparseGradientsTest, AnEmbeddingLookupsGradientIsSparseAndSgdUpdatesOnlyItsRows) {
  EmbeddingModel m;
  train::GradientDescentOptimizer sgd(0.5f);
  auto gv = sgd.compute_gradients(m.root, m.loss, {m.table});
  ASSERT_TRUE(gv.ok()) << gv.status();
  ASSERT_TRUE(ops::is_indexed_slices((*gv)[0].first)) << (*gv)[0].first.node()->op;
  auto update = sgd.apply_gradients(m.root, *gv);
  auto init = train::global_variables_initializer(m.root);
  ASSERT_TRUE(update.ok() && init.ok()) << update.status() << init.status();
  // The update is the sparse op and nothing consumes the dense form of the gradient.
  const Graph& g = *m.root.graph();
  EXPECT_EQ(count_ops(g, "SparseApplyGradientDescent"), 1);
  EXPECT_EQ(count_ops(g, "ApplyGradientDescent"), 0);
  const Node* slices = (*gv)[0].first.node();
  for (int i = 0; i < g.num_nodes(); ++i)
    for (const auto& in : g.node(i)->inputs) EXPECT_NE(in.node, slices->id) << g.node(i)->name << " densifies it";
  // The lookup is colocated with the table (the ps): only ids and rows cross.
  for (int i = 0; i < g.num_nodes(); ++i)
    if (g.node(i)->op == "Gather") {
      EXPECT_FALSE(g.node(i)->colocate_with.empty()) << g.node(i)->name;
    }
  Session sess(m.root, m.server->target());
  ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
  // ids 3, 1, 3: row 3's gradient is (1,1) + (4,4) (duplicates summed), row 1's (2,2).
  auto r = sess.run({{m.ids, Tensor::from_vector<int64_t>({3, 1, 3}, {3})},
                     {m.weights, Tensor::from_vector<float>({1, 1, 2, 2, 4, 4}, {3, 2})}},
                    {}, {*update});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(m.rows(sess), (std::vector<float>{0, 1, 9, 10, 20, 21, 27.5f, 28.5f}));
}

TEST(SparseGradientsTest, LazyAdamLeavesAbsentRowsAndTheirSlotsAlone) {
  EmbeddingModel m;
  train::AdamOptimizer adam(0.01f);
  auto update = adam.minimize(m.root, m.loss, Output(), {m.table});
  auto init = train::global_variables_initializer(m.root);
  ASSERT_TRUE(update.ok() && init.ok()) << update.status() << init.status();
  EXPECT_EQ(count_ops(*m.root.graph(), "SparseApplyAdam"), 1);
  Session sess(m.root, m.server->target());
  ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
  auto step = [&](int64_t id, float w) {
    auto r = sess.run({{m.ids, Tensor::from_vector<int64_t>({id}, {1})}, {m.weights, Tensor::from_vector<float>({w, -w}, {1, 2})}},
                      {}, {*update});
    ASSERT_TRUE(r.ok()) << r.status();
  };
  step(1, 2.f);
  // t = 1: m = 0.1 g, v = 0.001 g^2, lr_1 = 0.01 sqrt(0.001) / 0.1, so each element moves by
  // lr_1 * m / (sqrt(v) + 1e-8) = 0.01 (less 3e-9) against the sign of its gradient.
  auto after1 = m.rows(sess);
  EXPECT_NEAR(after1[2], 10 - 0.01, 1e-6);
  EXPECT_NEAR(after1[3], 11 + 0.01, 1e-6);
  step(2, 1.f);
  auto after2 = m.rows(sess);
  // Row 1 was absent from step 2: lazy Adam does not move it (dense Adam would, by its m).
  EXPECT_EQ(after2[2], after1[2]);
  EXPECT_EQ(after2[3], after1[3]);
  // Row 2 takes its first update with t = 2: m = 0.1 g, v = 0.001 g^2,
  // lr_2 = 0.01 sqrt(1 - 0.999^2) / (1 - 0.9^2) = 0.00235316725; move = lr_2 * 0.1 / sqrt(0.001) = 0.0074413.
  EXPECT_NEAR(after2[4], 20 - 0.0074413, 1e-6);
  EXPECT_NEAR(after2[5], 21 + 0.0074413, 1e-6);
  EXPECT_EQ(after2[0], 0.f);
  EXPECT_EQ(after2[6], 30.f);
}

TEST(SparseGradientsTest, AdagradAndMomentumUpdateTheRowsPresentAsTheirDenseForms) {
  for (int which = 0; which < 2; ++which) {
    SCOPED_TRACE(which == 0 ? "adagrad" : "momentum");
    EmbeddingModel m;
    train::AdagradOptimizer adagrad(0.1f, 0.1f);
    train::MomentumOptimizer momentum(0.1f, 0.9f);
    const train::Optimizer& opt = which == 0 ? static_cast<const train::Optimizer&>(adagrad) : momentum;
    auto update = opt.minimize(m.root, m.loss, Output(), {m.table});
    auto init = train::global_variables_initializer(m.root);
    ASSERT_TRUE(update.ok() && init.ok()) << update.status() << init.status();
    Session sess(m.root, m.server->target());
    ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
    for (int s = 0; s < 2; ++s) {
      auto r = sess.run({{m.ids, Tensor::from_vector<int64_t>({0, 0}, {2})},
                         {m.weights, Tensor::from_vector<float>({1, 2, 1, 2}, {2, 2})}},
                        {}, {*update});
      ASSERT_TRUE(r.ok()) << r.status();
    }
    auto rows = m.rows(sess);
    // Row 0's gradient is (2, 4) twice (the two duplicate ids summed).
    if (which == 0) {
      // accum 0.1 + 4 = 4.1, then 8.1: w -= 0.1 g / sqrt(accum).
      EXPECT_NEAR(rows[0], 0 - 0.2 / std::sqrt(4.1) - 0.2 / std::sqrt(8.1), 1e-5);
      EXPECT_NEAR(rows[1], 1 - 0.4 / std::sqrt(16.1) - 0.4 / std::sqrt(32.1), 1e-5);
    } else {
      // a = g, then 0.9 g + g = 1.9 g: w -= 0.1 (g + 1.9 g) = 0.29 g.
      EXPECT_NEAR(rows[0], 0 - 0.29 * 2, 1e-5);
      EXPECT_NEAR(rows[1], 1 - 0.29 * 4, 1e-5);
    }
    EXPECT_EQ(std::vector<float>(rows.begin() + 2, rows.end()), (std::vector<float>{10, 11, 20, 21, 30, 31}));
  }
}

}  // namespace
}  // namespace actorflow
