// Every gradient function against central finite differences (float32), plus path handling.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "device/executor.h"
#include "graph/gradients.h"
#include "graph/ops.h"
#include "graph/ops_nn_grad.h"

namespace actorflow {
namespace {

Tensor random_tensor(const Shape& s, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor t(DType::kFloat32, s);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

using Builder = std::function<Output(const Scope&, const std::vector<Output>&)>;

// Checks d(sum(w * f(xs)))/d(xs) analytically vs numerically.
void check_gradient(const std::string& what, const std::vector<Tensor>& inputs, const Builder& f, float tol = 2e-2f) {
  SCOPED_TRACE(what);
  Scope root = Scope::root();
  std::vector<Output> xs;
  for (size_t i = 0; i < inputs.size(); ++i)
    xs.push_back(ops::placeholder(root, DType::kFloat32, inputs[i].shape(), "x" + std::to_string(i)));
  Output y = f(root, xs);
  ASSERT_TRUE(root.ok()) << root.status();
  // Static shapes of the output are known here (inputs fully defined).
  Tensor w = random_tensor(y.shape().fully_defined() ? y.shape() : Shape{}, 99, 0.5f, 1.5f);
  Output loss = ops::reduce_sum(root, ops::mul(root, y, ops::constant(root, w)));
  auto grads = gradients(root, {loss}, xs);
  ASSERT_TRUE(grads.ok()) << grads.status();
  auto dev = make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0);
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds[xs[i].name()] = inputs[i];
  std::vector<std::string> fetches;
  for (const auto& g : *grads) {
    ASSERT_TRUE(g.valid());
    fetches.push_back(g.name());
  }
  auto analytic = run_local(*root.graph(), fetches, feeds, dev.get());
  ASSERT_TRUE(analytic.ok()) << analytic.status();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ((*analytic)[i].shape(), inputs[i].shape());
    for (int64_t k = 0; k < inputs[i].num_elements(); ++k) {
      const float eps = 1e-2f;
      auto eval = [&](float delta) {
        auto f2 = feeds;
        Tensor t = inputs[i].deep_copy();
        t.data<float>()[k] += delta;
        f2[xs[i].name()] = t;
        auto r = run_local(*root.graph(), {loss.name()}, f2, dev.get());
        EXPECT_TRUE(r.ok()) << r.status();
        return r.ok() ? static_cast<double>((*r)[0].data<float>()[0]) : 0.0;
      };
      const double numeric = (eval(eps) - eval(-eps)) / (2 * eps);
      const double got = (*analytic)[i].data<float>()[k];
      EXPECT_NEAR(got, numeric, tol * std::max(1.0, std::fabs(numeric))) << "input " << i << " element " << k;
    }
  }
}

TEST(GradientsTest, ElementwiseAndBroadcasting) {
  auto a = random_tensor({2, 3}, 1), b = random_tensor({3}, 2), c = random_tensor({2, 1}, 3), d = random_tensor({1, 3}, 4);
  auto pos = random_tensor({2, 3}, 5, 0.5f, 2.f);
  check_gradient("add", {a, b}, [](const Scope& s, const std::vector<Output>& x) { return ops::add(s, x[0], x[1]); });
  check_gradient("sub", {a, b}, [](const Scope& s, const std::vector<Output>& x) { return ops::sub(s, x[0], x[1]); });
  check_gradient("mul", {c, d}, [](const Scope& s, const std::vector<Output>& x) { return ops::mul(s, x[0], x[1]); });
  check_gradient("div", {a, pos}, [](const Scope& s, const std::vector<Output>& x) { return ops::div(s, x[0], x[1]); });
  check_gradient("scalar mul", {a}, [](const Scope& s, const std::vector<Output>& x) { return ops::mul(s, x[0], 3.f); });
  check_gradient("maximum", {a, random_tensor({2, 3}, 6)},
                 [](const Scope& s, const std::vector<Output>& x) { return ops::maximum(s, x[0], x[1]); });
  check_gradient("neg", {a}, [](const Scope& s, const std::vector<Output>& x) { return ops::neg(s, x[0]); });
  check_gradient("square", {a}, [](const Scope& s, const std::vector<Output>& x) { return ops::square(s, x[0]); });
  check_gradient("log", {pos}, [](const Scope& s, const std::vector<Output>& x) { return ops::log(s, x[0]); });
  check_gradient("exp", {a}, [](const Scope& s, const std::vector<Output>& x) { return ops::exp(s, x[0]); });
  check_gradient("sqrt", {pos}, [](const Scope& s, const std::vector<Output>& x) { return ops::sqrt(s, x[0]); });
  check_gradient("add_n", {a, a, a}, [](const Scope& s, const std::vector<Output>& x) { return ops::add_n(s, x); });
  check_gradient("identity", {a}, [](const Scope& s, const std::vector<Output>& x) { return ops::identity(s, x[0]); });
  check_gradient("cast", {a}, [](const Scope& s, const std::vector<Output>& x) {
    return ops::cast(s, x[0], DType::kFloat32);
  });
}

TEST(GradientsTest, ReductionsAndShapes) {
  // Well-separated values (a permutation scaled by 0.1), so Max has no near-ties.
  Tensor a(DType::kFloat32, Shape{2, 3, 4});
  for (int i = 0; i < 24; ++i) a.data<float>()[i] = static_cast<float>((i * 7) % 24) * 0.1f - 1.f;
  for (bool keep : {false, true}) {
    for (std::vector<int64_t> axes : {std::vector<int64_t>{}, {0}, {1}, {2}, {0, 2}, {-1}}) {
      check_gradient("sum", {a}, [&](const Scope& s, const std::vector<Output>& x) {
        return ops::reduce_sum(s, x[0], axes, keep);
      });
      check_gradient("mean", {a}, [&](const Scope& s, const std::vector<Output>& x) {
        return ops::reduce_mean(s, x[0], axes, keep);
      });
      check_gradient("max", {a}, [&](const Scope& s, const std::vector<Output>& x) {
        return ops::reduce_max(s, x[0], axes, keep);
      });
    }
  }
  check_gradient("reshape", {a}, [](const Scope& s, const std::vector<Output>& x) { return ops::reshape(s, x[0], {4, -1}); });
  check_gradient("transpose", {a}, [](const Scope& s, const std::vector<Output>& x) {
    return ops::transpose(s, x[0], {2, 0, 1});
  });
}

TEST(GradientsTest, NeuralNetworkOps) {
  auto a = random_tensor({3, 4}, 8), b = random_tensor({4, 2}, 9);
  check_gradient("matmul", {a, b}, [](const Scope& s, const std::vector<Output>& x) { return ops::matmul(s, x[0], x[1]); });
  check_gradient("matmul ta", {random_tensor({4, 3}, 10), b},
                 [](const Scope& s, const std::vector<Output>& x) { return ops::matmul(s, x[0], x[1], {true, false}); });
  check_gradient("matmul tb", {a, random_tensor({2, 4}, 11)},
                 [](const Scope& s, const std::vector<Output>& x) { return ops::matmul(s, x[0], x[1], {false, true}); });
  check_gradient("matmul ta tb", {random_tensor({4, 3}, 12), random_tensor({2, 4}, 13)},
                 [](const Scope& s, const std::vector<Output>& x) { return ops::matmul(s, x[0], x[1], {true, true}); });
  // Keep values away from the kink at 0.
  Tensor r = random_tensor({2, 5}, 14);
  for (int i = 0; i < 10; ++i) r.data<float>()[i] += r.data<float>()[i] > 0 ? 0.2f : -0.2f;
  check_gradient("relu", {r}, [](const Scope& s, const std::vector<Output>& x) { return ops::relu(s, x[0]); });
  check_gradient("bias_add", {a, random_tensor({4}, 15)},
                 [](const Scope& s, const std::vector<Output>& x) { return ops::bias_add(s, x[0], x[1]); });
  check_gradient("softmax", {a}, [](const Scope& s, const std::vector<Output>& x) { return ops::softmax(s, x[0]); });
  Tensor labels(DType::kFloat32, Shape{3, 4});
  for (int i = 0; i < 3; ++i) labels.data<float>()[i * 4 + i] = 1;
  check_gradient("xent", {a}, [&](const Scope& s, const std::vector<Output>& x) {
    return ops::softmax_cross_entropy_with_logits(s, x[0], ops::constant(s, labels))[0];
  });
  for (const char* pad : {"SAME", "VALID"}) {
    for (int64_t st : {1, 2}) {
      check_gradient(std::string("conv2d ") + pad, {random_tensor({2, 5, 5, 2}, 16), random_tensor({3, 3, 2, 3}, 17)},
                     [&](const Scope& s, const std::vector<Output>& x) {
                       return ops::conv2d(s, x[0], x[1], {1, st, st, 1}, pad);
                     }, 3e-2f);
    }
  }
  // Distinct values so each pool window has a clear maximum.
  Tensor p(DType::kFloat32, Shape{1, 4, 4, 2});
  for (int i = 0; i < 32; ++i) p.data<float>()[i] = static_cast<float>((i * 7) % 32) * 0.1f;
  check_gradient("max_pool", {p}, [](const Scope& s, const std::vector<Output>& x) {
    return ops::max_pool(s, x[0], {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  });
}

TEST(GradientsTest, UnknownBatchMlpEndToEnd) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{-1, 4}, "x");
  auto w = ops::placeholder(root, DType::kFloat32, Shape{4, 3}, "w");
  auto b = ops::placeholder(root, DType::kFloat32, Shape{3}, "b");
  Tensor labels(DType::kFloat32, Shape{5, 3});
  for (int i = 0; i < 5; ++i) labels.data<float>()[i * 3 + i % 3] = 1;
  auto logits = ops::bias_add(root, ops::matmul(root, x, w), b);
  auto loss = ops::reduce_mean(root, ops::softmax_cross_entropy_with_logits(root, logits, ops::constant(root, labels))[0]);
  auto g = gradients(root, {loss}, {w, b});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)[0].shape(), Shape({4, 3}));
  auto dev = make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0);
  Tensor xv = random_tensor({5, 4}, 20), wv = random_tensor({4, 3}, 21), bv = random_tensor({3}, 22);
  std::map<std::string, Tensor> feeds{{"x", xv}, {"w", wv}, {"b", bv}};
  auto an = run_local(*root.graph(), {(*g)[0].name(), (*g)[1].name()}, feeds, dev.get());
  ASSERT_TRUE(an.ok()) << an.status();
  for (int k = 0; k < 3; ++k) {
    auto f2 = feeds;
    Tensor bp = bv.deep_copy(), bm = bv.deep_copy();
    bp.data<float>()[k] += 1e-2f;
    bm.data<float>()[k] -= 1e-2f;
    f2["b"] = bp;
    double lp = (*run_local(*root.graph(), {loss.name()}, f2, dev.get()))[0].data<float>()[0];
    f2["b"] = bm;
    double lm = (*run_local(*root.graph(), {loss.name()}, f2, dev.get()))[0].data<float>()[0];
    EXPECT_NEAR((*an)[1].data<float>()[k], (lp - lm) / 2e-2, 1e-3);
  }
}

TEST(GradientsTest, PathHandling) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{3}, "x");
  auto z = ops::placeholder(root, DType::kFloat32, Shape{3}, "z");
  auto y1 = ops::reduce_sum(root, ops::square(root, x));
  auto y2 = ops::reduce_sum(root, ops::stop_gradient(root, ops::mul(root, x, 5.f)));
  // Unconnected x gets an invalid Output, or zeros when asked.
  auto g = gradients(root, {y1}, {x, z});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE((*g)[0].valid());
  EXPECT_FALSE((*g)[1].valid());
  auto gz = gradients(root, {y1}, {z}, {}, true);
  ASSERT_TRUE(gz.ok());
  EXPECT_TRUE((*gz)[0].valid());
  // StopGradient blocks the path.
  auto gs = gradients(root, {y2}, {x});
  ASSERT_TRUE(gs.ok()) << gs.status();
  EXPECT_FALSE((*gs)[0].valid());
  // Multiple ys with grad_ys: d(2*y1 + 3*y1) = 5 * 2x.
  auto gm = gradients(root, {y1, y1}, {x}, {ops::constant(root, Tensor::scalar<float>(2.f)),
                                            ops::constant(root, Tensor::scalar<float>(3.f))});
  ASSERT_TRUE(gm.ok()) << gm.status();
  auto dev = make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0);
  auto r = run_local(*root.graph(), {(*gm)[0].name()}, {{"x", Tensor::from_vector<float>({1, 2, 3}, {3})}}, dev.get());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].to_string(), "[10. 20. 30.]");
  // A float op without a gradient on the path is named.
  auto st = ops::sum_to_shape_of(root.with_op_name("sts"), x, z);
  auto ge = gradients(root, {ops::reduce_sum(root, st)}, {x});
  ASSERT_FALSE(ge.ok());
  EXPECT_NE(ge.status().message().find("SumToShape 'sts' has no gradient"), std::string::npos) << ge.status();
  // An integer output (ArgMax) ends the path quietly, as in TensorFlow (the gradient is None).
  auto am = ops::cast(root, ops::arg_max(root, ops::reshape(root, x, {1, 3}), 1), DType::kFloat32);
  auto gn = gradients(root, {ops::reduce_sum(root, am)}, {x});
  ASSERT_TRUE(gn.ok()) << gn.status();
  EXPECT_FALSE((*gn)[0].valid());
}

}  // namespace
}  // namespace actorflow
