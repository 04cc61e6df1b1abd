// <actorflow/layers.h> on a local server: each layer's values against a hand computation, its
// variables' names and collections, the gradients of a network of every layer against central
// finite differences (through the session, the variables fed), batch normalization's update ops,
// a run-time training flag, placement under a device function, and the errors naming the layer.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "actorflow/actorflow.h"
#include "tests/util/eval.h"
#include "tests/util/local_server.h"

namespace actorflow {
namespace {

namespace layers = actorflow::layers;
namespace train = actorflow::train;
using testing::random_tensor;
using testing::vals;

// An initializer giving exactly `t`.
train::Initializer given(const Tensor& t) {
  return [t](const Scope& s, const Shape&, DType) { return ops::constant(s, t); };
}

Tensor tensor(std::vector<float> v, const Shape& shape) { return Tensor::from_vector<float>(v, shape); }

std::vector<std::string> names(const std::vector<Output>& outs) {
  std::vector<std::string> n;
  for (const auto& o : outs) n.push_back(o.name());
  return n;
}

TEST(TfLayersTest, DenseIsXTimesKernelPlusBiasAndNamesItsVariablesAsTensorFlowDoes) {
  auto server = testing::two_device_server();
  Scope root = Scope::root();
  Output x = ops::placeholder(root, DType::kFloat32, Shape{-1, 3}, "x");
  layers::LayerOptions o;
  o.kernel_initializer = given(tensor({1, -1, 2, 0, 0.5f, 1}, Shape{3, 2}));
  o.bias_initializer = given(tensor({0.25f, -3}, Shape{2}));
  Output y = layers::dense(root, x, 2, ops::relu, o);
  Output z = layers::dense(root, y, 4);                   // the default name again: "dense_1"
  layers::LayerOptions named;
  named.name = "pred";
  named.use_bias = false;
  Output p = layers::dense(root, z, 1, {}, named);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(names(train::trainable_variables(root)),
            (std::vector<std::string>{"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias", "pred/kernel"}));
  EXPECT_EQ(y.node()->name, "dense/Relu");
  EXPECT_EQ(p.shape(), (Shape{-1, 1}));

  auto init = train::global_variables_initializer(root);
  ASSERT_TRUE(init.ok()) << init.status();
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
  // x = [[1, 2, 3], [-1, 0, 1]]: x.W = [[1 + 4 + 1.5, -1 + 0 + 3], [-1 + 0 + 0.5, 1 + 0 + 1]]
  //   = [[6.5, 2], [-0.5, 2]]; + b = [[6.75, -1], [-0.25, -1]]; relu = [[6.75, 0], [0, 0]].
  auto r = sess.run({{x, tensor({1, 2, 3, -1, 0, 1}, Shape{2, 3})}}, {y, p}, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(vals<float>((*r)[0]), (std::vector<float>{6.75f, 0, 0, 0}));
  EXPECT_EQ((*r)[1].shape(), (Shape{2, 1}));

  // An explicit name used twice: its variables would collide.
  layers::dense(root, z, 1, {}, named);
  EXPECT_EQ(root.status().code(), Code::kAlreadyExists);
  EXPECT_NE(root.status().message().find("dense 'pred'"), std::string::npos) << root.status();
}

TEST(TfLayersTest, DenseOnRankThreeAppliesTheKernelToTheLastDimension) {
  auto server = testing::two_device_server();
  Scope root = Scope::root();
  Output x = ops::placeholder(root, DType::kFloat32, Shape{-1, 2, 3}, "x");
  layers::LayerOptions o;
  o.kernel_initializer = given(tensor({1, 0, 0, 1, 1, 1}, Shape{3, 2}));
  Output y = layers::dense(root, x, 2, {}, o);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(y.shape(), (Shape{-1, 2, 2}));
  auto init = train::global_variables_initializer(root);
  ASSERT_TRUE(init.ok());
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
  auto r = sess.run({{x, tensor({1, 2, 3, 4, 5, 6}, Shape{1, 2, 3})}}, {y}, {});
  ASSERT_TRUE(r.ok()) << r.status();
  // Rows [1, 2, 3] and [4, 5, 6] times [[1, 0], [0, 1], [1, 1]]: [4, 5] and [10, 11].
  EXPECT_EQ((*r)[0].shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(vals<float>((*r)[0]), (std::vector<float>{4, 5, 10, 11}));
}

TEST(TfLayersTest, ConvolutionPoolingAndFlattenMatchAHandComputation) {
  auto server = testing::two_device_server();
  Scope root = Scope::root();
  // x: one 4x4 single-channel image 0..15, row-major.
  std::vector<float> xv(16);
  for (int i = 0; i < 16; ++i) xv[static_cast<size_t>(i)] = static_cast<float>(i);
  Output x = ops::placeholder(root, DType::kFloat32, Shape{-1, 4, 4, 1}, "x");
  layers::LayerOptions o;
  o.kernel_initializer = train::constant_initializer(1.0);  // a 2x2 box sum
  o.bias_initializer = train::constant_initializer(0.5);
  Output conv = layers::conv2d(root, x, 1, {2, 2}, {1, 1}, "VALID", {}, o);
  Output same = layers::conv2d(root, x, 2, {3, 3}, {2, 2}, "same");
  Output maxp = layers::max_pooling2d(root, x, {2, 2}, {2, 2});
  Output avgp = layers::average_pooling2d(root, x, {3, 3}, {1, 1}, "same");
  Output flat = layers::flatten(root, conv);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(conv.shape(), (Shape{-1, 3, 3, 1}));
  EXPECT_EQ(same.shape(), (Shape{-1, 2, 2, 2}));
  EXPECT_EQ(flat.shape(), (Shape{-1, 9}));
  EXPECT_EQ(names(train::trainable_variables(root)),
            (std::vector<std::string>{"conv2d/kernel", "conv2d/bias", "conv2d_1/kernel", "conv2d_1/bias"}));
  auto init = train::global_variables_initializer(root);
  ASSERT_TRUE(init.ok());
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
  auto r = sess.run({{x, tensor(xv, Shape{1, 4, 4, 1})}}, {flat, maxp, avgp}, {});
  ASSERT_TRUE(r.ok()) << r.status();
  // Box sums of x[i][j] = 4i + j over 2x2 windows: 4 * (4i + j) + 10, plus the bias 0.5.
  std::vector<float> want;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) want.push_back(4.f * static_cast<float>(4 * i + j) + 10.f + 0.5f);
  EXPECT_EQ(vals<float>((*r)[0]), want);
  EXPECT_EQ(vals<float>((*r)[1]), (std::vector<float>{5, 7, 13, 15}));
  // SAME 3x3 average at the corner (0,0) covers x[0..1][0..1] = {0, 1, 4, 5}: 2.5; at (1,1)
  // the full window around 5: mean of 0,1,2,4,5,6,8,9,10 = 5.
  const auto avg = vals<float>((*r)[2]);
  EXPECT_FLOAT_EQ(avg[0], 2.5f);
  EXPECT_FLOAT_EQ(avg[5], 5.f);
}

// The gradients of a network built from every layer with a kernel, batch normalization in
// training mode and both poolings, against central differences of the loss, for the input and
// every trainable variable (their values fed, so each difference is one run).
TEST(TfLayersTest, GradientsOfANetworkOfEveryLayerMatchFiniteDifferences) {
  auto server = testing::two_device_server();
  Scope root = Scope::root();
  Output x = ops::placeholder(root, DType::kFloat32, Shape{-1, 5, 5, 2}, "x");
  Output net = layers::conv2d(root, x, 3, {3, 3}, {1, 1}, "same", ops::tanh);
  net = layers::batch_normalization(root, net, true);
  net = layers::average_pooling2d(root, net, {2, 2}, {2, 2});
  net = layers::flatten(root, net);                        // [-1, 12]
  net = layers::dense(root, net, 4, ops::sigmoid);
  net = layers::dense(root, net, 3);
  Output loss = ops::reduce_sum(root, ops::square(root, net));
  std::vector<Output> xs{x};
  for (const Output& v : train::trainable_variables(root)) xs.push_back(v);
  ASSERT_EQ(xs.size(), 9u);  // x, conv kernel/bias, gamma, beta, two dense kernels and biases
  auto grads = gradients(root, {loss}, xs);
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_TRUE(root.ok()) << root.status();

  FeedDict feeds;
  uint32_t seed = 1;
  for (const Output& v : xs) {
    Shape sh = v.shape();
    if (v.name() == "x") sh = Shape{2, 5, 5, 2};
    feeds.emplace_back(v, random_tensor(sh, seed++, -1.f, 1.f));
  }
  Session sess(root, server->target());
  auto analytic = sess.run(feeds, *grads, {});
  ASSERT_TRUE(analytic.ok()) << analytic.status();
  auto loss_at = [&](const FeedDict& f) {
    auto r = sess.run(f, {loss}, {});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? static_cast<double>((*r)[0].data<float>()[0]) : 0.0;
  };
  const float eps = 1e-2f;
  int checked = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor base = feeds[i].second;
    ASSERT_EQ((*analytic)[i].shape(), base.shape()) << xs[i].name();
    for (int64_t k = 0; k < base.num_elements(); ++k) {
      FeedDict f = feeds;
      Tensor plus = base.deep_copy(), minus = base.deep_copy();
      plus.data<float>()[k] += eps;
      minus.data<float>()[k] -= eps;
      f[i].second = plus;
      const double lp = loss_at(f);
      f[i].second = minus;
      const double lm = loss_at(f);
      const double numeric = (lp - lm) / (2.0 * eps);
      const double got = (*analytic)[i].data<float>()[k];
      EXPECT_NEAR(got, numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << xs[i].name() << " element " << k;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 100 + 54 + 3 + 3 + 3 + 48 + 4 + 12 + 3);
}

TEST(TfLayersTest, MaxPoolingGradientMatchesFiniteDifferences) {
  auto server = testing::two_device_server();
  Scope root = Scope::root();
  Output x = ops::placeholder(root, DType::kFloat32, Shape{1, 4, 4, 1}, "x");
  Output y = layers::max_pooling2d(root, x, {2, 2}, {1, 1}, "same");
  Output loss = ops::reduce_sum(root, ops::square(root, y));
  auto g = gradients(root, {loss}, {x});
  ASSERT_TRUE(g.ok()) << g.status();
  // Distinct values 0.1 apart (a difference of eps = 0.01 never changes a window's maximum).
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[static_cast<size_t>(i)] = static_cast<float>((i * 7) % 16) * 0.1f - 0.8f;
  Session sess(root, server->target());
  auto analytic = sess.run({{x, tensor(v, Shape{1, 4, 4, 1})}}, {(*g)[0]}, {});
  ASSERT_TRUE(analytic.ok()) << analytic.status();
  for (int k = 0; k < 16; ++k) {
    auto at = [&](float d) {
      std::vector<float> w = v;
      w[static_cast<size_t>(k)] += d;
      auto r = sess.run({{x, tensor(w, Shape{1, 4, 4, 1})}}, {loss}, {});
      EXPECT_TRUE(r.ok());
      return r.ok() ? static_cast<double>((*r)[0].data<float>()[0]) : 0.0;
    };
    const double numeric = (at(1e-2f) - at(-1e-2f)) / 2e-2;
    EXPECT_NEAR((*analytic)[0].data<float>()[k], numeric, 2e-3 + 1e-2 * std::fabs(numeric)) << k;
  }
}

TEST(TfLayersTest, BatchNormalizationNormalizesAndItsUpdateOpsMoveTheMovingStatistics) {
  auto server = testing::two_device_server();
  Scope root = Scope::root();
  Output x = ops::placeholder(root, DType::kFloat32, Shape{-1, 2}, "x");
  Output training = ops::placeholder_with_default(root, false, "training");
  layers::BatchNormOptions o;
  o.momentum = 0.9;
  o.epsilon = 1e-3;
  Output y = layers::batch_normalization(root, x, training, o);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(names(train::trainable_variables(root)),
            (std::vector<std::string>{"batch_normalization/gamma", "batch_normalization/beta"}));
  EXPECT_EQ(names(train::global_variables(root)),
            (std::vector<std::string>{"batch_normalization/gamma", "batch_normalization/beta",
                                      "batch_normalization/moving_mean", "batch_normalization/moving_variance"}));
  const auto updates = layers::update_ops(root);
  ASSERT_EQ(updates.size(), 2u);
  auto init = train::global_variables_initializer(root);
  ASSERT_TRUE(init.ok());
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {*init}).ok());

  // Columns {1, 2, 3, 6} (mean 3, biased variance (4 + 1 + 0 + 9) / 4 = 3.5) and {0, 0, 4, 4}
  // (mean 2, variance 4).
  const Tensor xv = tensor({1, 0, 2, 0, 3, 4, 6, 4}, Shape{4, 2});
  auto r = sess.run({{x, xv}, {training, Tensor::scalar<bool>(true)}}, {y}, updates);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto got = vals<float>((*r)[0]);
  const double m[2] = {3, 2}, var[2] = {3.5, 4};
  const auto xs = vals<float>(xv);
  for (int i = 0; i < 8; ++i)
    EXPECT_NEAR(got[static_cast<size_t>(i)], (xs[static_cast<size_t>(i)] - m[i % 2]) / std::sqrt(var[i % 2] + 1e-3), 1e-5)
        << i;
  // After one update: moving_mean = 0 + (m - 0) * 0.1, moving_variance = 1 + (var - 1) * 0.1.
  auto moving = sess.run({train::global_variables(root)[2], train::global_variables(root)[3]});
  ASSERT_TRUE(moving.ok()) << moving.status();
  EXPECT_NEAR(vals<float>((*moving)[0])[0], 0.3, 1e-6);
  EXPECT_NEAR(vals<float>((*moving)[0])[1], 0.2, 1e-6);
  EXPECT_NEAR(vals<float>((*moving)[1])[0], 1.25, 1e-6);
  EXPECT_NEAR(vals<float>((*moving)[1])[1], 1.3, 1e-6);

  // Not training (the flag's default): the moving statistics normalise, and the update ops
  // leave them as they are.
  auto e = sess.run({{x, xv}}, {y}, updates);
  ASSERT_TRUE(e.ok()) << e.status();
  const auto eval = vals<float>((*e)[0]);
  const double mm[2] = {0.3, 0.2}, mv[2] = {1.25, 1.3};
  for (int i = 0; i < 8; ++i)
    EXPECT_NEAR(eval[static_cast<size_t>(i)], (xs[static_cast<size_t>(i)] - mm[i % 2]) / std::sqrt(mv[i % 2] + 1e-3), 1e-5)
        << i;
  auto still = sess.run({train::global_variables(root)[2]});
  ASSERT_TRUE(still.ok());
  EXPECT_NEAR(vals<float>((*still)[0])[0], 0.3, 1e-6);
}

TEST(TfLayersTest, DropoutKeepsOrScalesEachElementWhenTrainingAndPassesXOtherwise) {
  auto server = testing::two_device_server();
  Scope root = Scope::root();
  Output x = ops::placeholder(root, DType::kFloat32, Shape{-1, 1000}, "x");
  Output training = ops::placeholder_with_default(root, false, "training");
  Output y = layers::dropout(root, x, 0.25, training);
  Output dx = (*gradients(root, {ops::reduce_sum(root, y)}, {x}))[0];
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  const Tensor ones = Tensor::from_vector<float>(std::vector<float>(1000, 1.f), {1, 1000});
  auto off = sess.run({{x, ones}}, {y}, {});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(vals<float>((*off)[0]), vals<float>(ones));
  auto on = sess.run({{x, ones}, {training, Tensor::scalar<bool>(true)}}, {y, dx}, {});
  ASSERT_TRUE(on.ok()) << on.status();
  int kept = 0;
  const auto yv = vals<float>((*on)[0]), gv = vals<float>((*on)[1]);
  for (size_t i = 0; i < yv.size(); ++i) {
    ASSERT_TRUE(yv[i] == 0.f || std::fabs(yv[i] - 1.f / 0.75f) < 1e-6) << yv[i];
    EXPECT_EQ(gv[i], yv[i]) << i;  // d(sum y)/dx = the mask scaled, which is y for x = 1
    kept += yv[i] != 0.f;
  }
  EXPECT_GT(kept, 650);  // 750 expected; a binomial(1000, 0.75) is outside [650, 850] with p < 1e-12
  EXPECT_LT(kept, 850);
}

TEST(TfLayersTest, UnderAReplicaDeviceSetterTheVariablesGoToThePsAndTheLayersRunOnTheWorker) {
  ReplicaDeviceSetter setter(2, "/job:worker/task:0");
  Scope root = Scope::root().with_device_function(setter.device_function());
  Output x = ops::placeholder(root, DType::kFloat32, Shape{-1, 8, 8, 1}, "x");
  Output net = layers::conv2d(root, x, 4, {3, 3}, {1, 1}, "same", ops::relu);
  net = layers::batch_normalization(root, net, true);
  net = layers::dense(root, layers::flatten(root, net), 10);
  ASSERT_TRUE(root.ok()) << root.status();
  for (const Output& v : train::global_variables(root))
    EXPECT_EQ(v.node()->requested_device.rfind("/job:ps/task:", 0), 0u) << v.name() << " " << v.node()->requested_device;
  EXPECT_EQ(net.node()->requested_device.rfind("/job:worker/task:0", 0), 0u) << net.node()->requested_device;
  for (const Output& u : layers::update_ops(root))
    EXPECT_EQ(u.node()->requested_device.rfind("/job:ps/task:", 0), 0u) << u.name();
}

// A partitioned kernel: its row shards spread over the ps tasks by the device function, saved as
// one variable, and the layer's value that of the whole kernel.
TEST(TfLayersTest, ADenseKernelPartitionedOverTwoParameterServersGivesTheWholeKernelsValue) {
  auto server = testing::two_device_server();
  Scope root = Scope::root();
  Output x = ops::placeholder(root.with_device("/cpu:0"), DType::kFloat32, Shape{-1, 3}, "x");
  int next = 0;
  // Variables alternate between /cpu:1 and /cpu:0 (two "ps"), the rest on /cpu:0.
  Scope placed = root.with_device_function([&next](const Graph&, const Node& n) -> std::string {
    if (n.op != "VariableV2") return "/cpu:0";
    return (next++ % 2) == 0 ? "/cpu:1" : "/cpu:0";
  });
  layers::LayerOptions o;
  o.kernel_partitioner = train::fixed_size_partitioner(2);
  o.kernel_initializer = [](const Scope& s, const Shape& shape, DType) {
    // Shard rows {2, 1}: the first shard [[1, 2], [3, 4]], the second [[5, 6]].
    return shape.dim(0) == 2 ? ops::constant(s, {1, 2, 3, 4}, {2, 2}) : ops::constant(s, {5, 6}, {1, 2});
  };
  Output y = layers::dense(placed, x, 2, {}, o);
  ASSERT_TRUE(root.ok()) << root.status();
  const auto vars = train::trainable_variables(root);
  ASSERT_EQ(names(vars), (std::vector<std::string>{"dense/kernel/part_0", "dense/kernel/part_1", "dense/bias"}));
  EXPECT_EQ(vars[0].node()->requested_device, "/cpu:1");
  EXPECT_EQ(vars[1].node()->requested_device, "/cpu:0");
  auto init = train::global_variables_initializer(root);
  ASSERT_TRUE(init.ok());
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
  auto r = sess.run({{x, tensor({1, 1, 1, 1, 0, -1}, Shape{2, 3})}}, {y}, {});
  ASSERT_TRUE(r.ok()) << r.status();
  // [1, 1, 1] . [[1, 2], [3, 4], [5, 6]] = [9, 12]; [1, 0, -1] . K = [-4, -4].
  EXPECT_EQ(vals<float>((*r)[0]), (std::vector<float>{9, 12, -4, -4}));
}

TEST(TfLayersTest, BadInputsAreRefusedNamingTheLayer) {
  struct Case {
    std::function<void(const Scope&)> build;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](const Scope& s) { layers::conv2d(s, ops::placeholder(s, DType::kFloat32, Shape{-1, 28, 28}), 8, {3, 3}); },
       "conv2d 'conv2d': needs an NHWC input of rank 4"},
      {[](const Scope& s) { layers::conv2d(s, ops::placeholder(s, DType::kFloat32, Shape{-1, 28, 28, -1}), 8, {3, 3}); },
       "whose channels are known"},
      {[](const Scope& s) {
         layers::conv2d(s, ops::placeholder(s, DType::kFloat32, Shape{-1, 28, 28, 1}), 8, {3, 3}, {1, 1}, "full");
       },
       "padding must be \"valid\" or \"same\", got \"full\""},
      {[](const Scope& s) { layers::conv2d(s, ops::placeholder(s, DType::kFloat32, Shape{-1, 28, 28, 1}), 0, {3, 3}); },
       "filters must be >= 1"},
      {[](const Scope& s) {
         layers::max_pooling2d(s, ops::placeholder(s, DType::kFloat32, Shape{-1, 28, 28, 1}), {2, 0}, {2, 2});
       },
       "max_pooling2d 'max_pooling2d': pool_size and strides must be >= 1"},
      {[](const Scope& s) { layers::flatten(s, ops::placeholder(s, DType::kFloat32, Shape{-1, -1, 4})); },
       "flatten 'flatten': the dimensions after the first must be known"},
      {[](const Scope& s) { layers::dense(s, ops::placeholder(s, DType::kFloat32, Shape{-1, -1}), 4); },
       "dense 'dense': needs an input of rank >= 2 whose last dimension is known"},
      {[](const Scope& s) { layers::dense(s, ops::placeholder(s, DType::kFloat32, Shape{-1, 3}), 0); },
       "units must be >= 1"},
      {[](const Scope& s) { layers::dropout(s, ops::placeholder(s, DType::kFloat32, Shape{-1, 3}), 1.0, true); },
       "dropout 'dropout': rate must be in [0, 1)"},
      {[](const Scope& s) {
         layers::dropout(s, ops::placeholder(s, DType::kFloat32, Shape{-1, 3}), 0.5,
                         ops::placeholder(s, DType::kFloat32, Shape{}, "flag"));
       },
       "training must be a bool scalar, got 'flag' of float32"},
      {[](const Scope& s) {
         layers::batch_normalization(s, ops::placeholder(s, DType::kFloat32, Shape{-1, -1}), true);
       },
       "batch_normalization 'batch_normalization': the features dimension (axis -1) must be known"},
      {[](const Scope& s) {
         layers::LayerOptions o;
         o.name = "a/b";
         layers::dense(s, ops::placeholder(s, DType::kFloat32, Shape{-1, 3}), 2, {}, o);
       },
       "may not contain '/'"},
  };
  for (const auto& c : cases) {
    Scope root = Scope::root();
    c.build(root);
    ASSERT_FALSE(root.ok()) << c.want;
    EXPECT_NE(root.status().message().find(c.want), std::string::npos) << root.status();
  }
}

}  // namespace
}  // namespace actorflow
