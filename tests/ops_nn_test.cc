// Neural-network ops: shape inference, construction errors, CPU kernels against hand values
// and naive reference loops, backward kernels against central finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "device/cpu/dnnl_primitive_cache.h"
#include "device/cpu/nn_kernels.h"
#include "device/executor.h"
#include "graph/ops.h"
#include "tests/util/eval.h"
#include "graph/ops_nn_grad.h"

namespace actorflow {
namespace {

Device* cpu() {
  static auto dev = make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0);
  return dev.get();
}

using testing::random_tensor;

// Distinct values (a shuffled ramp with gaps of 0.01) so max pooling has no ties.
Tensor distinct_tensor(const Shape& s, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(s.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>(i) - 0.005f * static_cast<float>(v.size());
  std::mt19937 gen(seed);
  std::shuffle(v.begin(), v.end(), gen);
  return Tensor::from_vector<float>(v, s);
}

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements()); }

// Runs `fetches` of the scope's graph with `feeds`; fails the test on error.
std::vector<Tensor> run(const Scope& root, const std::vector<std::string>& fetches,
                        const std::map<std::string, Tensor>& feeds = {}) {
  EXPECT_TRUE(root.ok()) << root.status();
  auto out = run_local(*root.graph(), fetches, feeds, cpu());
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  return *out;
}

// Builds `op` over placeholders p0..pn (fully shaped after `inputs`), runs it and returns its
// outputs. The graph is built once per call.
using BuildFn = std::function<std::vector<Output>(const Scope&, const std::vector<Output>&)>;
std::vector<Tensor> eval(const BuildFn& op, const std::vector<Tensor>& inputs) {
  Scope root = Scope::root();
  std::vector<Output> ph;
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "p" + std::to_string(i);
    ph.push_back(ops::placeholder(root, inputs[i].dtype(), inputs[i].shape(), name));
    feeds[name] = inputs[i];
  }
  std::vector<Output> outs = op(root, ph);
  std::vector<std::string> fetches;
  for (const auto& o : outs) {
    EXPECT_TRUE(o.valid()) << root.status();
    if (!o.valid()) return {};
    fetches.push_back(o.name());
  }
  return run(root, fetches, feeds);
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.f, std::fabs(want[i]))) << what << " at element " << i;
}

// Expects that building fails with exactly `message` recorded in the scope.
void expect_build_error(const std::function<Output(const Scope&)>& build, const std::string& message) {
  Scope root = Scope::root();
  Output o = build(root);
  EXPECT_FALSE(o.valid());
  EXPECT_FALSE(root.ok());
  EXPECT_EQ(root.status().message(), message);
}

// ---- naive references --------------------------------------------------------------------

struct Win { int64_t out, before; };
// TensorFlow's rules written out independently of graph/ops_nn_util.h.
Win ref_window(int64_t in, int64_t k, int64_t s, bool same) {
  if (!same) return {(in - k + s) / s, 0};
  const int64_t out = (in + s - 1) / s;
  const int64_t total = std::max<int64_t>((out - 1) * s + k - in, 0);
  return {out, total / 2};
}

// NHWC x HWIO -> NHWC, double accumulation.
Tensor conv2d_ref(const Tensor& x, const Tensor& f, int64_t sh, int64_t sw, bool same) {
  const int64_t n = x.shape().dim(0), h = x.shape().dim(1), w = x.shape().dim(2), c = x.shape().dim(3);
  const int64_t kh = f.shape().dim(0), kw = f.shape().dim(1), o = f.shape().dim(3);
  const Win wh = ref_window(h, kh, sh, same), ww = ref_window(w, kw, sw, same);
  Tensor y(DType::kFloat32, Shape{n, wh.out, ww.out, o});
  const float* xp = x.data<float>();
  const float* fp = f.data<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < wh.out; ++i)
      for (int64_t j = 0; j < ww.out; ++j)
        for (int64_t oc = 0; oc < o; ++oc) {
          double acc = 0;
          for (int64_t di = 0; di < kh; ++di)
            for (int64_t dj = 0; dj < kw; ++dj) {
              const int64_t ii = i * sh + di - wh.before, jj = j * sw + dj - ww.before;
              if (ii < 0 || ii >= h || jj < 0 || jj >= w) continue;
              for (int64_t ic = 0; ic < c; ++ic)
                acc += static_cast<double>(xp[((b * h + ii) * w + jj) * c + ic]) *
                       fp[((di * kw + dj) * c + ic) * o + oc];
            }
          y.data<float>()[((b * wh.out + i) * ww.out + j) * o + oc] = static_cast<float>(acc);
        }
  return y;
}

Tensor max_pool_ref(const Tensor& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw, bool same) {
  const int64_t n = x.shape().dim(0), h = x.shape().dim(1), w = x.shape().dim(2), c = x.shape().dim(3);
  const Win wh = ref_window(h, kh, sh, same), ww = ref_window(w, kw, sw, same);
  Tensor y(DType::kFloat32, Shape{n, wh.out, ww.out, c});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < wh.out; ++i)
      for (int64_t j = 0; j < ww.out; ++j)
        for (int64_t ch = 0; ch < c; ++ch) {
          float m = -INFINITY;
          for (int64_t di = 0; di < kh; ++di)
            for (int64_t dj = 0; dj < kw; ++dj) {
              const int64_t ii = i * sh + di - wh.before, jj = j * sw + dj - ww.before;
              if (ii < 0 || ii >= h || jj < 0 || jj >= w) continue;
              m = std::max(m, x.data<float>()[((b * h + ii) * w + jj) * c + ch]);
            }
          y.data<float>()[((b * wh.out + i) * ww.out + j) * c + ch] = m;
        }
  return y;
}

// Central differences of L(x) = sum(forward(x) * weights) with respect to every element of
// inputs[wrt]; compares with `analytic` (same shape as inputs[wrt]).
void check_gradient(const BuildFn& forward, std::vector<Tensor> inputs, size_t wrt, const Tensor& weights,
                    const Tensor& analytic, float eps, const std::string& what) {
  Scope root = Scope::root();
  std::vector<Output> ph;
  std::vector<std::string> names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    names.push_back("p" + std::to_string(i));
    ph.push_back(ops::placeholder(root, inputs[i].dtype(), inputs[i].shape(), names.back()));
  }
  Output y = forward(root, ph)[0];
  ASSERT_TRUE(root.ok()) << root.status();
  auto loss = [&](const Tensor& x) {
    std::map<std::string, Tensor> feeds;
    for (size_t i = 0; i < inputs.size(); ++i) feeds[names[i]] = i == wrt ? x : inputs[i];
    auto out = run_local(*root.graph(), {y.name()}, feeds, cpu());
    EXPECT_TRUE(out.ok()) << out.status();
    double l = 0;
    for (int64_t i = 0; i < (*out)[0].num_elements(); ++i)
      l += static_cast<double>((*out)[0].data<float>()[i]) * weights.data<float>()[i];
    return l;
  };
  const Tensor& x0 = inputs[wrt];
  ASSERT_EQ(analytic.shape(), x0.shape()) << what;
  double max_err = 0;
  for (int64_t i = 0; i < x0.num_elements(); ++i) {
    Tensor xp = x0.deep_copy(), xm = x0.deep_copy();
    xp.data<float>()[i] += eps;
    xm.data<float>()[i] -= eps;
    // The perturbation actually applied (float rounding of x +- eps).
    const double h = static_cast<double>(xp.data<float>()[i]) - xm.data<float>()[i];
    const double numeric = (loss(xp) - loss(xm)) / h;
    const double a = analytic.data<float>()[i];
    const double err = std::fabs(numeric - a) / std::max(1.0, std::fabs(a));
    max_err = std::max(max_err, err);
    ASSERT_LT(err, 1e-2) << what << ": element " << i << " numeric " << numeric << " analytic " << a;
  }
  SUCCEED() << what << " max relative error " << max_err;
}

const std::vector<int64_t> k1111{1, 1, 1, 1};

// ---- MatMul ------------------------------------------------------------------------------

TEST(MatMulTest, HandValuesAndTransposes) {
  Scope root = Scope::root();
  auto a = ops::constant(root, {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
  auto b = ops::constant(root, {1, 2, 3, 4, 5, 6}, {3, 2}, "b");
  auto at = ops::constant(root, {1, 4, 2, 5, 3, 6}, {3, 2}, "at");
  auto bt = ops::constant(root, {1, 3, 5, 2, 4, 6}, {2, 3}, "bt");
  auto c = ops::matmul(root.with_op_name("c"), a, b);
  ops::matmul(root.with_op_name("c_ta"), at, b, {true, false});
  ops::matmul(root.with_op_name("c_tb"), a, bt, {false, true});
  ops::matmul(root.with_op_name("c_tt"), at, bt, {true, true});
  auto outer = ops::matmul(root.with_op_name("outer"), a, b, {true, true});  // [3,2]x[2,3]^T... = a^T b^T: [3,3]
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
  EXPECT_EQ(outer.shape(), (Shape{3, 3}));
  auto out = run(root, {"c", "c_ta", "c_tb", "c_tt", "outer"});
  ASSERT_EQ(out.size(), 5u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[static_cast<size_t>(i)].to_string(), "[[22. 28.]\n [49. 64.]]") << i;
  // a^T b^T = (b a)^T; b a = [[9,12,15],[19,26,33],[29,40,51]].
  EXPECT_EQ(values(out[4]), (std::vector<float>{9, 19, 29, 12, 26, 40, 15, 33, 51}));
}

TEST(MatMulTest, AgainstNaiveLoopOddSizes) {
  for (auto [m, k, n] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {7, 13, 5}, {64, 33, 17}, {3, 200, 129}}) {
    Tensor a = random_tensor(Shape{m, k}, 1), b = random_tensor(Shape{k, n}, 2);
    auto out = eval([](const Scope& s, const std::vector<Output>& in) { return std::vector<Output>{ops::matmul(s, in[0], in[1])}; },
                    {a, b});
    ASSERT_EQ(out.size(), 1u);
    std::vector<float> want(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += static_cast<double>(a.data<float>()[i * k + p]) * b.data<float>()[p * n + j];
        want[static_cast<size_t>(i * n + j)] = static_cast<float>(acc);
      }
    expect_near(values(out[0]), want, 1e-4f, "matmul " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n));
  }
}

TEST(MatMulTest, ShapesAndErrors) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{-1, 784}, "x");
  auto w = ops::placeholder(root, DType::kFloat32, Shape{784, 500}, "w");
  EXPECT_EQ(ops::matmul(root, x, w).shape(), (Shape{-1, 500}));
  EXPECT_EQ(ops::matmul(root, w, x, {true, true}).shape(), (Shape{500, -1}));
  auto u = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "u");
  EXPECT_EQ(ops::matmul(root, u, w).shape(), (Shape{-1, 500}));
  ASSERT_TRUE(root.ok()) << root.status();

  expect_build_error([](const Scope& s) {
    auto a = ops::constant(s, {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
    auto b = ops::constant(s, {1, 2, 3, 4}, {2, 2}, "b");
    return ops::matmul(s.with_op_name("c"), a, b);
  }, "MatMul 'c': inner dimensions 3 and 2 differ");
}

TEST(MatMulTest, MoreErrors) {
  {
    Scope root = Scope::root();
    auto a = ops::constant(root, {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
    auto ok = ops::matmul(root.with_op_name("c"), a, a, {false, true});
    EXPECT_TRUE(ok.valid());
    EXPECT_EQ(ok.shape(), (Shape{2, 2}));
  }
  expect_build_error([](const Scope& s) {
    auto a = ops::constant(s, {1}, {2, 3, 1}, "a");
    auto b = ops::constant(s, {1}, {3, 2}, "b");
    return ops::matmul(s.with_op_name("c"), a, b);
  }, "MatMul 'c': a must be rank 2, got shape [2,3,1]");
  expect_build_error([](const Scope& s) {
    auto a = ops::constant(s, {1}, {2, 3}, "a");
    auto b = ops::constant(s, Tensor::from_vector<int32_t>({1, 2, 3}, Shape{3, 1}), "b");
    return ops::matmul(s.with_op_name("c"), a, b);
  }, "MatMul 'c': a is float32 but b is int32");
  // Run-time mismatch through placeholders of unknown shape.
  Scope root = Scope::root();
  auto p = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "p");
  auto q = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "q");
  ops::matmul(root.with_op_name("c"), p, q);
  auto r = run_local(*root.graph(), {"c"}, {{"p", random_tensor(Shape{2, 3}, 1)}, {"q", random_tensor(Shape{2, 2}, 2)}}, cpu());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "MatMul 'c': inner dimensions 3 and 2 differ");
  // float64 has a shape function but no CPU kernel path.
  Scope r2 = Scope::root();
  auto d = ops::placeholder(r2, DType::kFloat64, Shape{1, 1}, "d");
  ops::matmul(r2.with_op_name("m"), d, d);
  Tensor one(DType::kFloat64, Shape{1, 1});
  auto r3 = run_local(*r2.graph(), {"m"}, {{"d", one}}, cpu());
  ASSERT_FALSE(r3.ok());
  EXPECT_EQ(r3.status().message(), "MatMul 'm': CPU kernel supports float32 only, but a is float64");
}

// ---- Relu, BiasAdd -----------------------------------------------------------------------

TEST(ElementwiseNnTest, ReluBiasAddHandValues) {
  Scope root = Scope::root();
  auto x = ops::constant(root, {-1, 0, 2, -3.5f, 4, NAN}, {2, 3}, "x");
  ops::relu(root.with_op_name("r"), x);
  auto v = ops::constant(root, {1, 2, 3, 4}, {2, 2}, "v");
  auto b = ops::constant(root, {10, 20}, {2}, "b");
  auto ba = ops::bias_add(root.with_op_name("ba"), v, b);
  EXPECT_EQ(ba.shape(), (Shape{2, 2}));
  ops::bias_add_grad(root.with_op_name("bg"), v);
  auto g = ops::constant(root, {1, 2, 3, 4, 5, 6}, {2, 3}, "g");
  ops::relu_grad(root.with_op_name("rg"), g, x);
  auto out = run(root, {"r", "ba", "bg", "rg"});
  ASSERT_EQ(out.size(), 4u);
  auto r = values(out[0]);
  EXPECT_EQ(std::vector<float>(r.begin(), r.begin() + 5), (std::vector<float>{0, 0, 2, 0, 4}));
  EXPECT_TRUE(std::isnan(r[5]));
  EXPECT_EQ(out[1].to_string(), "[[11. 22.]\n [13. 24.]]");
  EXPECT_EQ(out[2].to_string(), "[4. 6.]");
  EXPECT_EQ(values(out[3]), (std::vector<float>{0, 0, 3, 0, 5, 0}));
}

TEST(ElementwiseNnTest, BiasAddRank4AndLongRows) {
  Tensor v = random_tensor(Shape{3, 5, 7, 37}, 3);
  Tensor b = random_tensor(Shape{37}, 4);
  auto out = eval([](const Scope& s, const std::vector<Output>& in) {
    return std::vector<Output>{ops::bias_add(s, in[0], in[1]), ops::bias_add_grad(s, in[0])};
  }, {v, b});
  ASSERT_EQ(out.size(), 2u);
  std::vector<float> want(values(v));
  std::vector<double> sums(37, 0.0);
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] += b.data<float>()[i % 37];
    sums[i % 37] += v.data<float>()[i];
  }
  expect_near(values(out[0]), want, 1e-6f, "bias_add");
  expect_near(values(out[1]), std::vector<float>(sums.begin(), sums.end()), 1e-4f, "bias_add_grad");
}

TEST(ElementwiseNnTest, ShapesAndErrors) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{-1, 14, 14, 64}, "x");
  auto bias = ops::placeholder(root, DType::kFloat32, Shape{64}, "bias");
  EXPECT_EQ(ops::relu(root, x).shape(), (Shape{-1, 14, 14, 64}));
  EXPECT_EQ(ops::bias_add(root, x, bias).shape(), (Shape{-1, 14, 14, 64}));
  EXPECT_EQ(ops::bias_add_grad(root, x).shape(), (Shape{64}));
  EXPECT_EQ(ops::relu_grad(root, x, x).shape(), (Shape{-1, 14, 14, 64}));
  auto y = ops::placeholder(root, DType::kFloat32, Shape{-1, -1}, "y");
  EXPECT_EQ(ops::bias_add(root, y, bias).shape(), (Shape{-1, 64}));
  ASSERT_TRUE(root.ok()) << root.status();

  expect_build_error([](const Scope& s) {
    auto v = ops::constant(s, {1}, {2, 3}, "v");
    auto b = ops::constant(s, {1}, {4}, "b");
    return ops::bias_add(s.with_op_name("ba"), v, b);
  }, "BiasAdd 'ba': bias of size 4 does not match the last dimension 3 of value [2,3]");
  expect_build_error([](const Scope& s) {
    auto v = ops::constant(s, {1}, {3}, "v");
    auto b = ops::constant(s, {1}, {3}, "b");
    return ops::bias_add(s.with_op_name("ba"), v, b);
  }, "BiasAdd 'ba': value must be at least rank 2, got shape [3]");
  expect_build_error([](const Scope& s) {
    auto v = ops::constant(s, {1}, {2, 3}, "v");
    auto b = ops::constant(s, {1}, {1, 3}, "b");
    return ops::bias_add(s.with_op_name("ba"), v, b);
  }, "BiasAdd 'ba': bias must be rank 1, got shape [1,3]");
  expect_build_error([](const Scope& s) {
    auto g = ops::constant(s, {1}, {2, 3}, "g");
    auto f = ops::constant(s, {1}, {3, 2}, "f");
    return ops::relu_grad(s.with_op_name("rg"), g, f);
  }, "ReluGrad 'rg': gradients [2,3] and features [3,2] must have the same shape");
  expect_build_error([](const Scope& s) {
    auto i = ops::constant(s, Tensor::from_vector<int32_t>({1, 2}, Shape{2}), "i");
    return ops::relu(s.with_op_name("r"), i);
  }, "Relu 'r': features must be float32 or float64, got int32");
  expect_build_error([](const Scope& s) {
    auto g = ops::constant(s, {1}, {3}, "g");
    return ops::bias_add_grad(s.with_op_name("bg"), g);
  }, "BiasAddGrad 'bg': out_backprop must be at least rank 2, got shape [3]");
}

// ---- Softmax, SoftmaxCrossEntropyWithLogits ------------------------------------------------

TEST(SoftmaxTest, HandValues) {
  Scope root = Scope::root();
  auto logits = ops::constant(root, {1, 2, 3, 1000, 1000, 1000}, {2, 3}, "logits");
  auto labels = ops::constant(root, {0, 0, 1, 0.5f, 0.5f, 0}, {2, 3}, "labels");
  auto sm = ops::softmax(root.with_op_name("sm"), logits);
  auto xent = ops::softmax_cross_entropy_with_logits(root.with_op_name("xent"), logits, labels);
  ASSERT_EQ(xent.size(), 2u);
  EXPECT_EQ(sm.shape(), (Shape{2, 3}));
  EXPECT_EQ(xent[0].shape(), (Shape{2}));
  EXPECT_EQ(xent[1].shape(), (Shape{2, 3}));
  EXPECT_EQ(xent[1].name(), "xent:1");
  auto out = run(root, {"sm", "xent", "xent:1"});
  ASSERT_EQ(out.size(), 3u);
  const float third = 1.f / 3;
  expect_near(values(out[0]), {0.09003057f, 0.24472847f, 0.66524096f, third, third, third}, 1e-6f, "softmax");
  // Row 0: -log(0.66524096); row 1: log(3) (labels sum to one over equal probabilities).
  expect_near(values(out[1]), {0.40760596f, 1.09861229f}, 1e-6f, "loss");
  expect_near(values(out[2]), {0.09003057f, 0.24472847f, -0.33475904f, third - 0.5f, third - 0.5f, third}, 1e-6f,
              "backprop");
}

// tf.nn's Python form: labels first, the loss only. Swapped logits and labels would give other
// numbers (the labels row {0, 0, 1} read as logits).
TEST(SoftmaxTest, NnFormsTakeTensorFlowsArgumentOrderAndGiveTheLossOnly) {
  Scope root = Scope::root();
  auto logits = ops::constant(root, {1, 2, 3, 1000, 1000, 1000}, {2, 3}, "logits");
  auto labels = ops::constant(root, {0, 0, 1, 0.5f, 0.5f, 0}, {2, 3}, "labels");
  auto ids = ops::constant(root, Tensor::from_vector<int32_t>({2, 0}, Shape{2}), "ids");
  Output loss = nn::softmax_cross_entropy_with_logits(root.with_op_name("loss"), labels, logits);
  Output sparse = nn::sparse_softmax_cross_entropy_with_logits(root.with_op_name("sparse"), ids, logits);
  EXPECT_EQ(loss.shape(), (Shape{2}));
  EXPECT_EQ(sparse.shape(), (Shape{2}));
  auto out = run(root, {"loss", "sparse"});
  ASSERT_EQ(out.size(), 2u);
  expect_near(values(out[0]), {0.40760596f, 1.09861229f}, 1e-6f, "loss");
  expect_near(values(out[1]), {0.40760596f, 1.09861229f}, 1e-6f, "sparse loss");  // row 1: log(3) again
}

TEST(SoftmaxTest, Rank3AndBackpropIsLossGradient) {
  Tensor x = random_tensor(Shape{2, 3, 5}, 5, -3, 3);
  auto out = eval([](const Scope& s, const std::vector<Output>& in) { return std::vector<Output>{ops::softmax(s, in[0])}; }, {x});
  ASSERT_EQ(out.size(), 1u);
  for (int r = 0; r < 6; ++r) {
    double sum = 0;
    for (int j = 0; j < 5; ++j) sum += std::exp(static_cast<double>(x.data<float>()[r * 5 + j]));
    for (int j = 0; j < 5; ++j)
      EXPECT_NEAR(out[0].data<float>()[r * 5 + j], std::exp(static_cast<double>(x.data<float>()[r * 5 + j])) / sum, 1e-6);
  }
  // backprop == d(loss)/d(logits): finite differences of sum(loss * w) give sum_b w_b backprop_b.
  Tensor logits = random_tensor(Shape{4, 6}, 6, -2, 2);
  // backprop is the gradient for label rows that sum to one (TensorFlow's definition).
  Tensor labels = random_tensor(Shape{4, 6}, 7, 0, 1);
  for (int r = 0; r < 4; ++r) {
    float sum = 0;
    for (int j = 0; j < 6; ++j) sum += labels.data<float>()[r * 6 + j];
    for (int j = 0; j < 6; ++j) labels.data<float>()[r * 6 + j] /= sum;
  }
  Tensor w = random_tensor(Shape{4}, 8);
  auto xo = eval([](const Scope& s, const std::vector<Output>& in) {
    return ops::softmax_cross_entropy_with_logits(s, in[0], in[1]);
  }, {logits, labels});
  ASSERT_EQ(xo.size(), 2u);
  Tensor analytic(DType::kFloat32, Shape{4, 6});
  for (int i = 0; i < 24; ++i) analytic.data<float>()[i] = xo[1].data<float>()[i] * w.data<float>()[i / 6];
  check_gradient([](const Scope& s, const std::vector<Output>& in) {
    return std::vector<Output>{ops::softmax_cross_entropy_with_logits(s, in[0], in[1])[0]};
  }, {logits, labels}, 0, w, analytic, 1e-2f, "xent backprop");
}

TEST(SoftmaxTest, ShapesAndErrors) {
  Scope root = Scope::root();
  auto y = ops::placeholder(root, DType::kFloat32, Shape{-1, 10}, "y");
  auto l = ops::placeholder(root, DType::kFloat32, Shape{50, -1}, "l");
  auto x = ops::softmax_cross_entropy_with_logits(root, y, l);
  EXPECT_EQ(x[0].shape(), (Shape{50}));
  EXPECT_EQ(x[1].shape(), (Shape{50, 10}));
  EXPECT_EQ(ops::softmax(root, y).shape(), (Shape{-1, 10}));
  ASSERT_TRUE(root.ok()) << root.status();
  expect_build_error([](const Scope& s) {
    auto a = ops::constant(s, {1}, {2, 3}, "a");
    auto b = ops::constant(s, {1}, {2, 4}, "b");
    return ops::softmax_cross_entropy_with_logits(s.with_op_name("xent"), a, b)[0];
  }, "SoftmaxCrossEntropyWithLogits 'xent': logits [2,3] and labels [2,4] must have the same shape");
  expect_build_error([](const Scope& s) {
    auto a = ops::constant(s, {1}, {6}, "a");
    return ops::softmax_cross_entropy_with_logits(s.with_op_name("xent"), a, a)[0];
  }, "SoftmaxCrossEntropyWithLogits 'xent': logits must be rank 2, got shape [6]");
  expect_build_error([](const Scope& s) {
    auto a = ops::constant(s, Tensor::scalar<float>(1), "a");
    return ops::softmax(s.with_op_name("sm"), a);
  }, "Softmax 'sm': logits must be at least rank 1, got shape []");
}

// ---- Conv2D ------------------------------------------------------------------------------

TEST(Conv2DTest, HandValuesSameIsPaddedAfter) {
  Scope root = Scope::root();
  auto x = ops::constant(root, {1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 3, 3, 1}, "x");
  auto f = ops::constant(root, {1, 0, 0, 1}, {2, 2, 1, 1}, "f");
  auto v = ops::conv2d(root.with_op_name("valid"), x, f, k1111, "VALID");
  auto s = ops::conv2d(root.with_op_name("same"), x, f, k1111, "SAME");
  EXPECT_EQ(v.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_EQ(s.shape(), (Shape{1, 3, 3, 1}));
  auto out = run(root, {"valid", "same"});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(values(out[0]), (std::vector<float>{6, 8, 12, 14}));
  // pad_total = 1: TensorFlow puts it after (bottom/right).
  EXPECT_EQ(values(out[1]), (std::vector<float>{6, 8, 3, 12, 14, 6, 7, 8, 9}));
}

struct ConvCase {
  Shape input, filter;
  int64_t stride;
  const char* padding;
};

std::vector<ConvCase> conv_cases() {
  return {
      {Shape{2, 7, 7, 1}, Shape{3, 3, 1, 4}, 1, "SAME"},
      {Shape{2, 7, 7, 1}, Shape{3, 3, 1, 4}, 1, "VALID"},
      {Shape{1, 8, 9, 3}, Shape{3, 2, 3, 5}, 2, "SAME"},
      {Shape{1, 8, 9, 3}, Shape{3, 2, 3, 5}, 2, "VALID"},
      {Shape{3, 6, 6, 16}, Shape{5, 5, 16, 8}, 1, "SAME"},
      {Shape{2, 9, 7, 8}, Shape{4, 4, 8, 16}, 2, "SAME"},
      {Shape{2, 9, 7, 32}, Shape{1, 1, 32, 17}, 2, "VALID"},
      {Shape{2, 14, 14, 32}, Shape{5, 5, 32, 64}, 1, "SAME"},  // the seed CNN's second layer
  };
}

std::string conv_name(const ConvCase& c) {
  return "input " + c.input.to_string() + " filter " + c.filter.to_string() + " stride " + std::to_string(c.stride) +
         " " + c.padding;
}

BuildFn conv_fn(const ConvCase& c) {
  return [c](const Scope& s, const std::vector<Output>& in) {
    return std::vector<Output>{ops::conv2d(s, in[0], in[1], {1, c.stride, c.stride, 1}, c.padding)};
  };
}

TEST(Conv2DTest, AgainstNaiveLoop) {
  uint32_t seed = 10;
  for (const ConvCase& c : conv_cases()) {
    Tensor x = random_tensor(c.input, seed++), f = random_tensor(c.filter, seed++);
    auto out = eval(conv_fn(c), {x, f});
    ASSERT_EQ(out.size(), 1u) << conv_name(c);
    Tensor want = conv2d_ref(x, f, c.stride, c.stride, std::string(c.padding) == "SAME");
    ASSERT_EQ(out[0].shape(), want.shape()) << conv_name(c);
    expect_near(values(out[0]), values(want), 1e-4f, conv_name(c));
  }
}

TEST(Conv2DTest, BatchChangesBetweenRuns) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{-1, 6, 6, 3}, "x");
  auto f = ops::constant(root, random_tensor(Shape{3, 3, 3, 4}, 3), "f");
  auto y = ops::conv2d(root.with_op_name("y"), x, f, {1, 2, 2, 1}, "SAME");
  EXPECT_EQ(y.shape(), (Shape{-1, 3, 3, 4}));
  ASSERT_TRUE(root.ok()) << root.status();
  for (int64_t batch : {2, 5, 2, 1}) {
    Tensor xv = random_tensor(Shape{batch, 6, 6, 3}, static_cast<uint32_t>(batch));
    auto out = run(root, {"y"}, {{"x", xv}});
    ASSERT_EQ(out.size(), 1u);
    Tensor want = conv2d_ref(xv, root.graph()->find("f")->attrs.get_or<Tensor>("value", Tensor()), 2, 2, true);
    expect_near(values(out[0]), values(want), 1e-4f, "batch " + std::to_string(batch));
  }
}

TEST(Conv2DTest, IntraOpThreadsSettingKeepsResults) {
  const int saved = intra_op_threads();
  ConvCase c{Shape{2, 14, 14, 32}, Shape{5, 5, 32, 64}, 1, "SAME"};
  Tensor x = random_tensor(c.input, 7), f = random_tensor(c.filter, 8);
  Tensor want = conv2d_ref(x, f, 1, 1, true);
  for (int n : {2, 0, 1}) {
    set_intra_op_threads(n);
    EXPECT_EQ(intra_op_threads(), n);
    auto out = eval(conv_fn(c), {x, f});
    ASSERT_EQ(out.size(), 1u);
    expect_near(values(out[0]), values(want), 1e-4f, "threads " + std::to_string(n));
  }
  set_intra_op_threads(-3);
  EXPECT_EQ(intra_op_threads(), 0);
  set_intra_op_threads(saved);
}

TEST(Conv2DTest, Shapes) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{-1, 28, 28, 1}, "x");
  auto f1 = ops::placeholder(root, DType::kFloat32, Shape{5, 5, 1, 32}, "f1");
  EXPECT_EQ(ops::conv2d(root, x, f1, k1111, "SAME").shape(), (Shape{-1, 28, 28, 32}));
  EXPECT_EQ(ops::conv2d(root, x, f1, k1111, "VALID").shape(), (Shape{-1, 24, 24, 32}));
  auto h = ops::placeholder(root, DType::kFloat32, Shape{50, 14, 14, 32}, "h");
  auto f2 = ops::placeholder(root, DType::kFloat32, Shape{5, 5, 32, 64}, "f2");
  EXPECT_EQ(ops::conv2d(root, h, f2, {1, 2, 2, 1}, "SAME").shape(), (Shape{50, 7, 7, 64}));
  EXPECT_EQ(ops::conv2d(root, h, f2, {1, 2, 2, 1}, "VALID").shape(), (Shape{50, 5, 5, 64}));
  EXPECT_EQ(ops::conv2d(root, h, f2, {1, 3, 1, 1}, "SAME").shape(), (Shape{50, 5, 14, 64}));
  auto uf = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "uf");
  EXPECT_EQ(ops::conv2d(root, h, uf, k1111, "SAME").shape(), (Shape{50, -1, -1, -1}));
  auto hw = ops::placeholder(root, DType::kFloat32, Shape{-1, -1, 14, 32}, "hw");
  EXPECT_EQ(ops::conv2d(root, hw, f2, k1111, "VALID").shape(), (Shape{-1, -1, 10, 64}));
  ASSERT_TRUE(root.ok()) << root.status();
}

TEST(Conv2DTest, Errors) {
  auto conv = [](std::vector<int64_t> in, std::vector<int64_t> filt, std::vector<int64_t> strides, std::string pad) {
    return [=](const Scope& s) {
      auto x = ops::placeholder(s, DType::kFloat32, Shape(in), "x");
      auto f = ops::placeholder(s, DType::kFloat32, Shape(filt), "f");
      return ops::conv2d(s.with_op_name("conv"), x, f, strides, pad);
    };
  };
  expect_build_error(conv({1, 5, 5, 3}, {3, 3, 3, 4}, k1111, "FULL"),
                     "Conv2D 'conv': padding must be \"SAME\" or \"VALID\", got \"FULL\"");
  expect_build_error(conv({1, 5, 5, 3}, {3, 3, 2, 4}, k1111, "SAME"),
                     "Conv2D 'conv': input depth 3 does not match the filter's input depth 2 (input [1,5,5,3], "
                     "filter [3,3,2,4])");
  expect_build_error(conv({5, 5, 3}, {3, 3, 3, 4}, k1111, "SAME"),
                     "Conv2D 'conv': input must be rank 4, got shape [5,5,3]");
  expect_build_error(conv({1, 5, 5, 3}, {3, 3, 3}, k1111, "SAME"),
                     "Conv2D 'conv': filter must be rank 4, got shape [3,3,3]");
  expect_build_error(conv({1, 5, 5, 3}, {3, 3, 3, 4}, {1, 1, 1}, "SAME"),
                     "Conv2D 'conv': attribute 'strides' must have 4 elements {1, h, w, 1}, got 3");
  expect_build_error(conv({1, 5, 5, 3}, {3, 3, 3, 4}, {2, 1, 1, 1}, "SAME"),
                     "Conv2D 'conv': attribute 'strides' must be 1 in the batch and depth dimensions, got {2, 1, 1, 1}");
  expect_build_error(conv({1, 5, 5, 3}, {3, 3, 3, 4}, {1, 0, 1, 1}, "SAME"),
                     "Conv2D 'conv': attribute 'strides' must be positive, got {1, 0, 1, 1}");
  expect_build_error(conv({1, 2, 5, 3}, {3, 3, 3, 4}, k1111, "VALID"),
                     "Conv2D 'conv': window height 3 exceeds the input height 2 with VALID padding");
  // The same mismatch caught by the kernel when shapes are only known at run time.
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "x");
  auto f = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "f");
  ops::conv2d(root.with_op_name("conv"), x, f, k1111, "SAME");
  auto r = run_local(*root.graph(), {"conv"},
                     {{"x", random_tensor(Shape{1, 4, 4, 3}, 1)}, {"f", random_tensor(Shape{2, 2, 2, 1}, 2)}}, cpu());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "Conv2D 'conv': input depth 3 does not match the filter's input depth 2 (input [1,4,4,3], filter [2,2,2,1])");
  auto r2 = run_local(*root.graph(), {"conv"},
                      {{"x", random_tensor(Shape{4, 4, 3}, 1)}, {"f", random_tensor(Shape{2, 2, 3, 1}, 2)}}, cpu());
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().message(), "Conv2D 'conv': input must be rank 4 (NHWC), got shape [4,4,3]");
}

// ---- MaxPool -----------------------------------------------------------------------------

TEST(MaxPoolTest, HandValues) {
  Scope root = Scope::root();
  std::vector<float> ramp(16);
  for (int i = 0; i < 16; ++i) ramp[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  auto x = ops::constant(root, ramp, {1, 4, 4, 1}, "x");
  auto p = ops::max_pool(root.with_op_name("p"), x, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  auto q = ops::max_pool(root.with_op_name("q"), x, {1, 3, 3, 1}, {1, 2, 2, 1}, "SAME");
  EXPECT_EQ(p.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_EQ(q.shape(), (Shape{1, 2, 2, 1}));
  auto neg = ops::constant(root, {-5, -4, -3, -2}, {1, 2, 2, 1}, "neg");
  // Padding never wins a max, even over negative values.
  ops::max_pool(root.with_op_name("n"), neg, {1, 3, 3, 1}, k1111, "SAME");
  auto out = run(root, {"p", "q", "n"});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(values(out[0]), (std::vector<float>{6, 8, 14, 16}));
  // SAME, 3x3 window, stride 2 on 4: out 2, pad_total 1 after: windows rows {0..2},{2..3}.
  EXPECT_EQ(values(out[1]), (std::vector<float>{11, 12, 15, 16}));
  EXPECT_EQ(values(out[2]), (std::vector<float>{-2, -2, -2, -2}));
}

struct PoolCase {
  Shape input;
  int64_t k, s;
  const char* padding;
};

std::vector<PoolCase> pool_cases() {
  return {{Shape{2, 28, 28, 32}, 2, 2, "SAME"}, {Shape{1, 7, 7, 3}, 2, 2, "SAME"}, {Shape{1, 7, 7, 3}, 2, 2, "VALID"},
          {Shape{2, 9, 8, 5}, 3, 2, "SAME"},    {Shape{2, 9, 8, 5}, 3, 1, "VALID"}, {Shape{1, 5, 5, 17}, 3, 3, "SAME"}};
}

BuildFn pool_fn(const PoolCase& c) {
  return [c](const Scope& s, const std::vector<Output>& in) {
    return std::vector<Output>{ops::max_pool(s, in[0], {1, c.k, c.k, 1}, {1, c.s, c.s, 1}, c.padding)};
  };
}

TEST(MaxPoolTest, AgainstNaiveLoop) {
  uint32_t seed = 100;
  for (const PoolCase& c : pool_cases()) {
    Tensor x = random_tensor(c.input, seed++);
    auto out = eval(pool_fn(c), {x});
    ASSERT_EQ(out.size(), 1u);
    Tensor want = max_pool_ref(x, c.k, c.k, c.s, c.s, std::string(c.padding) == "SAME");
    ASSERT_EQ(out[0].shape(), want.shape()) << c.input.to_string();
    EXPECT_EQ(values(out[0]), values(want)) << c.input.to_string() << " k" << c.k << " s" << c.s << " " << c.padding;
  }
}

TEST(MaxPoolTest, ShapesAndErrors) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{-1, 28, 28, 32}, "x");
  EXPECT_EQ(ops::max_pool(root, x, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME").shape(), (Shape{-1, 14, 14, 32}));
  auto y = ops::placeholder(root, DType::kFloat32, Shape{-1, 7, 7, 64}, "y");
  EXPECT_EQ(ops::max_pool(root, y, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME").shape(), (Shape{-1, 4, 4, 64}));
  EXPECT_EQ(ops::max_pool(root, y, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID").shape(), (Shape{-1, 3, 3, 64}));
  ASSERT_TRUE(root.ok()) << root.status();
  auto pool = [](std::vector<int64_t> in, std::vector<int64_t> k, std::vector<int64_t> s, std::string pad) {
    return [=](const Scope& sc) {
      auto xx = ops::placeholder(sc, DType::kFloat32, Shape(in), "x");
      return ops::max_pool(sc.with_op_name("pool"), xx, k, s, pad);
    };
  };
  expect_build_error(pool({1, 4, 4, 1}, {1, 2, 2, 1}, {1, 2, 2, 1}, "same"),
                     "MaxPool 'pool': padding must be \"SAME\" or \"VALID\", got \"same\"");
  expect_build_error(pool({4, 4, 1}, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME"),
                     "MaxPool 'pool': input must be rank 4, got shape [4,4,1]");
  expect_build_error(pool({1, 4, 4, 1}, {2, 2}, {1, 2, 2, 1}, "SAME"),
                     "MaxPool 'pool': attribute 'ksize' must have 4 elements {1, h, w, 1}, got 2");
  expect_build_error(pool({1, 4, 4, 1}, {1, 2, 2, 2}, {1, 2, 2, 1}, "SAME"),
                     "MaxPool 'pool': attribute 'ksize' must be 1 in the batch and depth dimensions, got {1, 2, 2, 2}");
  expect_build_error(pool({1, 4, 1, 1}, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID"),
                     "MaxPool 'pool': window width 2 exceeds the input width 1 with VALID padding");
}

// ---- backward ops ------------------------------------------------------------------------

TEST(BackwardTest, ReluGradMatchesFiniteDifferences) {
  // Features away from the kink at 0 so +-eps never crosses it.
  Tensor x = random_tensor(Shape{3, 7}, 20, 0.05f, 1.f);
  for (int64_t i = 0; i < x.num_elements(); i += 2) x.data<float>()[i] = -x.data<float>()[i];
  Tensor w = random_tensor(Shape{3, 7}, 21);
  auto g = eval([](const Scope& s, const std::vector<Output>& in) { return std::vector<Output>{ops::relu_grad(s, in[0], in[1])}; },
                {w, x});
  ASSERT_EQ(g.size(), 1u);
  check_gradient([](const Scope& s, const std::vector<Output>& in) { return std::vector<Output>{ops::relu(s, in[0])}; },
                 {x}, 0, w, g[0], 1e-2f, "relu");
}

TEST(BackwardTest, BiasAddGradMatchesFiniteDifferences) {
  Tensor v = random_tensor(Shape{2, 3, 4, 5}, 22), b = random_tensor(Shape{5}, 23), w = random_tensor(Shape{2, 3, 4, 5}, 24);
  auto g = eval([](const Scope& s, const std::vector<Output>& in) { return std::vector<Output>{ops::bias_add_grad(s, in[0])}; },
                {w});
  ASSERT_EQ(g.size(), 1u);
  check_gradient([](const Scope& s, const std::vector<Output>& in) { return std::vector<Output>{ops::bias_add(s, in[0], in[1])}; },
                 {v, b}, 1, w, g[0], 1e-2f, "bias_add");
}

TEST(BackwardTest, Conv2DBackpropMatchesFiniteDifferences) {
  const std::vector<ConvCase> cases = {
      {Shape{2, 5, 5, 2}, Shape{3, 3, 2, 3}, 1, "SAME"},
      {Shape{1, 6, 5, 3}, Shape{3, 2, 3, 2}, 2, "SAME"},
      {Shape{2, 6, 6, 1}, Shape{2, 3, 1, 4}, 2, "VALID"},
      {Shape{1, 4, 4, 4}, Shape{1, 1, 4, 3}, 1, "VALID"},
      {Shape{1, 7, 7, 16}, Shape{3, 3, 16, 2}, 2, "SAME"},
  };
  uint32_t seed = 30;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(conv_name(c));
    Tensor x = random_tensor(c.input, seed++), f = random_tensor(c.filter, seed++);
    Tensor y = conv2d_ref(x, f, c.stride, c.stride, std::string(c.padding) == "SAME");
    Tensor w = random_tensor(y.shape(), seed++);
    const std::vector<int64_t> strides{1, c.stride, c.stride, 1};
    const std::vector<int64_t> fs = c.filter.dims();
    std::vector<int32_t> in_sizes(c.input.dims().begin(), c.input.dims().end());
    Tensor sizes = Tensor::from_vector<int32_t>(in_sizes, Shape{4});
    auto g = eval([&](const Scope& s, const std::vector<Output>& in) {
      auto dx = ops::conv2d_backprop_input(s, in[0], in[1], in[2], strides, c.padding);
      auto dx_const = ops::conv2d_backprop_input(s, sizes, in[1], in[2], strides, c.padding);
      auto df = ops::conv2d_backprop_filter(s, in[3], fs, in[2], strides, c.padding);
      EXPECT_EQ(dx.shape(), (Shape{c.input.dim(0), -1, -1, c.input.dim(3)}));
      EXPECT_EQ(dx_const.shape(), c.input);
      EXPECT_EQ(df.shape(), c.filter);
      return std::vector<Output>{dx, dx_const, df};
    }, {sizes, f, w, x});
    ASSERT_EQ(g.size(), 3u);
    EXPECT_EQ(values(g[0]), values(g[1]));
    check_gradient(conv_fn(c), {x, f}, 0, w, g[0], 1e-2f, "conv2d d/dinput");
    check_gradient(conv_fn(c), {x, f}, 1, w, g[2], 1e-2f, "conv2d d/dfilter");
  }
}

TEST(BackwardTest, Conv2DBackpropSeedLayerAgainstReference) {
  // The seed's second layer at batch 4: analytic gradients against the naive adjoint loops
  // (finite differences over 25k elements would be slow; the small cases above cover the rule).
  Tensor x = random_tensor(Shape{4, 14, 14, 32}, 40), f = random_tensor(Shape{5, 5, 32, 64}, 41);
  Tensor dy = random_tensor(Shape{4, 14, 14, 64}, 42);
  auto g = eval([](const Scope& s, const std::vector<Output>& in) {
    return std::vector<Output>{
        ops::conv2d_backprop_input(s, Input({4, 14, 14, 32}), in[0], in[1], k1111, "SAME"),
        ops::conv2d_backprop_filter(s, in[2], {5, 5, 32, 64}, in[1], k1111, "SAME")};
  }, {f, dy, x});
  ASSERT_EQ(g.size(), 2u);
  std::vector<double> dx(static_cast<size_t>(x.num_elements()), 0.0), df(static_cast<size_t>(f.num_elements()), 0.0);
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t i = 0; i < 14; ++i)
      for (int64_t j = 0; j < 14; ++j)
        for (int64_t di = 0; di < 5; ++di)
          for (int64_t dj = 0; dj < 5; ++dj) {
            const int64_t ii = i + di - 2, jj = j + dj - 2;
            if (ii < 0 || ii >= 14 || jj < 0 || jj >= 14) continue;
            const float* dyp = dy.data<float>() + ((b * 14 + i) * 14 + j) * 64;
            const float* xp = x.data<float>() + ((b * 14 + ii) * 14 + jj) * 32;
            for (int64_t ic = 0; ic < 32; ++ic)
              for (int64_t oc = 0; oc < 64; ++oc) {
                const size_t fi = static_cast<size_t>(((di * 5 + dj) * 32 + ic) * 64 + oc);
                dx[static_cast<size_t>(((b * 14 + ii) * 14 + jj) * 32 + ic)] += static_cast<double>(dyp[oc]) * f.data<float>()[fi];
                df[fi] += static_cast<double>(dyp[oc]) * xp[ic];
              }
          }
  expect_near(values(g[0]), std::vector<float>(dx.begin(), dx.end()), 1e-4f, "dx");
  expect_near(values(g[1]), std::vector<float>(df.begin(), df.end()), 1e-4f, "df");
}

TEST(BackwardTest, MaxPoolGradMatchesFiniteDifferences) {
  uint32_t seed = 50;
  for (const PoolCase& c : std::vector<PoolCase>{{Shape{2, 4, 4, 3}, 2, 2, "SAME"},
                                                 {Shape{1, 5, 5, 2}, 2, 2, "SAME"},
                                                 {Shape{1, 7, 6, 2}, 3, 2, "VALID"},
                                                 {Shape{1, 5, 7, 2}, 2, 2, "VALID"},  // a row and a column no window covers
                                                 {Shape{2, 5, 4, 3}, 3, 1, "SAME"}}) {
    SCOPED_TRACE(c.input.to_string() + " k" + std::to_string(c.k) + " s" + std::to_string(c.s) + " " + c.padding);
    Tensor x = distinct_tensor(c.input, seed++);
    Tensor y = max_pool_ref(x, c.k, c.k, c.s, c.s, std::string(c.padding) == "SAME");
    Tensor w = random_tensor(y.shape(), seed++);
    auto g = eval([&](const Scope& s, const std::vector<Output>& in) {
      auto pooled = ops::max_pool(s, in[0], {1, c.k, c.k, 1}, {1, c.s, c.s, 1}, c.padding);
      auto dx = ops::max_pool_grad(s, in[0], pooled, in[1], {1, c.k, c.k, 1}, {1, c.s, c.s, 1}, c.padding);
      EXPECT_EQ(dx.shape(), c.input);
      return std::vector<Output>{dx};
    }, {x, w});
    ASSERT_EQ(g.size(), 1u);
    check_gradient(pool_fn(c), {x}, 0, w, g[0], 1e-3f, "max_pool");
  }
}

TEST(BackwardTest, MaxPoolGradTiesGoToTheFirstMaximum) {
  Scope root = Scope::root();
  auto x = ops::constant(root, {1, 1, 3, 1, 1, 0, 3, 3}, {1, 2, 4, 1}, "x");
  auto y = ops::max_pool(root.with_op_name("y"), x, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  auto g = ops::constant(root, {5, 7}, {1, 1, 2, 1}, "g");
  ops::max_pool_grad(root.with_op_name("dx"), x, y, g, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  auto out = run(root, {"dx"});
  ASSERT_EQ(out.size(), 1u);
  // Windows {1,1 / 1,0} and {3,1 / 3,3}: ties go to the row-major first maximum.
  EXPECT_EQ(values(out[0]), (std::vector<float>{5, 0, 7, 0, 0, 0, 0, 0}));
}

TEST(BackwardTest, ShapesAndErrors) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{-1, 14, 14, 32}, "x");
  auto f = ops::placeholder(root, DType::kFloat32, Shape{5, 5, 32, 64}, "f");
  auto dy = ops::placeholder(root, DType::kFloat32, Shape{-1, 14, 14, 64}, "dy");
  auto sizes = ops::placeholder(root, DType::kInt64, Shape{4}, "sizes");
  EXPECT_EQ(ops::conv2d_backprop_input(root, sizes, f, dy, k1111, "SAME").shape(), (Shape{-1, -1, -1, 32}));
  EXPECT_EQ(ops::conv2d_backprop_input(root, Input({50, 14, 14, 32}), f, dy, k1111, "SAME").shape(),
            (Shape{50, 14, 14, 32}));
  EXPECT_EQ(ops::conv2d_backprop_filter(root, x, {5, 5, 32, 64}, dy, k1111, "SAME").shape(), (Shape{5, 5, 32, 64}));
  auto p = ops::placeholder(root, DType::kFloat32, Shape{-1, 7, 7, 64}, "p");
  auto pooled = ops::placeholder(root, DType::kFloat32, Shape{-1, 4, 4, 64}, "pooled");
  EXPECT_EQ(ops::max_pool_grad(root, p, pooled, pooled, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME").shape(),
            (Shape{-1, 7, 7, 64}));
  ASSERT_TRUE(root.ok()) << root.status();

  auto setup = [](const Scope& s) {
    ops::placeholder(s, DType::kFloat32, Shape{2, 8, 8, 3}, "x");
    ops::placeholder(s, DType::kFloat32, Shape{3, 3, 3, 4}, "f");
    ops::placeholder(s, DType::kFloat32, Shape{2, 8, 8, 4}, "dy");
  };
  auto get = [](const Scope& s, const char* n) { return Output(s.graph()->find(n)); };
  expect_build_error([&](const Scope& s) {
    setup(s);
    return ops::conv2d_backprop_input(s.with_op_name("bi"), Input({2, 8, 8, 3}), get(s, "f"), get(s, "dy"),
                                      {1, 2, 2, 1}, "SAME");
  }, "Conv2DBackpropInput 'bi': out_backprop [2,8,8,4] does not match the convolution output [2,4,4,4] of input "
     "[2,8,8,3] and filter [3,3,3,4]");
  expect_build_error([&](const Scope& s) {
    setup(s);
    return ops::conv2d_backprop_input(s.with_op_name("bi"), Input({2, 8, 3}), get(s, "f"), get(s, "dy"), k1111, "SAME");
  }, "Conv2DBackpropInput 'bi': input_sizes must be a 4-element vector, got shape [3]");
  expect_build_error([&](const Scope& s) {
    setup(s);
    return ops::conv2d_backprop_input(s.with_op_name("bi"), get(s, "f"), get(s, "f"), get(s, "dy"), k1111, "SAME");
  }, "Conv2DBackpropInput 'bi': input_sizes must be int32 or int64, got float32");
  expect_build_error([&](const Scope& s) {
    setup(s);
    return ops::conv2d_backprop_filter(s.with_op_name("bf"), get(s, "x"), {3, 3, 2, 4}, get(s, "dy"), k1111, "SAME");
  }, "Conv2DBackpropFilter 'bf': input depth 3 does not match the filter's input depth 2 (input [2,8,8,3], filter "
     "[3,3,2,4])");
  expect_build_error([&](const Scope& s) {
    setup(s);
    return ops::conv2d_backprop_filter(s.with_op_name("bf"), get(s, "x"), {3, 3, 3}, get(s, "dy"), k1111, "SAME");
  }, "Conv2DBackpropFilter 'bf': filter_sizes must have 4 elements, got [3,3,3]");
  expect_build_error([&](const Scope& s) {
    setup(s);
    return ops::conv2d_backprop_filter(s.with_op_name("bf"), get(s, "x"), {3, 3, 3, 4}, get(s, "dy"), k1111, "BAD");
  }, "Conv2DBackpropFilter 'bf': padding must be \"SAME\" or \"VALID\", got \"BAD\"");
  expect_build_error([&](const Scope& s) {
    setup(s);
    return ops::max_pool_grad(s.with_op_name("mg"), get(s, "x"), get(s, "x"), get(s, "x"), {1, 2, 2, 1},
                              {1, 2, 2, 1}, "SAME");
  }, "MaxPoolGrad 'mg': orig_output [2,8,8,3] does not match the pooled shape [2,4,4,3]");

  // Run-time checks of the kernels when the graph could not know the shapes.
  Scope r = Scope::root();
  auto us = ops::placeholder(r, DType::kInt32, Shape{4}, "us");
  auto uf = ops::placeholder(r, DType::kFloat32, Shape::unknown(), "uf");
  auto ud = ops::placeholder(r, DType::kFloat32, Shape::unknown(), "ud");
  ops::conv2d_backprop_input(r.with_op_name("bi"), us, uf, ud, k1111, "VALID");
  auto res = run_local(*r.graph(), {"bi"},
                       {{"us", Tensor::from_vector<int32_t>({1, 4, 4, 2}, Shape{4})},
                        {"uf", random_tensor(Shape{2, 2, 2, 3}, 1)},
                        {"ud", random_tensor(Shape{1, 4, 4, 3}, 2)}},
                       cpu());
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().message(), "Conv2DBackpropInput 'bi': out_backprop [1,4,4,3] does not match the convolution "
                                    "output [1,3,3,3] of input [1,4,4,2] and filter [2,2,2,3]");
}

// ---- the oneDNN kernels' primitive cache ------------------------------------------------

TEST(DnnlPrimitiveCacheTest, BuildsOncePerKeyAndDropsEveryEntryWhenFull) {
  DnnlPrimitiveCache<int, std::string, 2> cache;
  int built = 0;
  auto get = [&](int key) {
    return cache.with(key, [&] { ++built; return std::to_string(key); }, [](std::string& e) { return e; });
  };
  EXPECT_EQ(get(1), "1");
  EXPECT_EQ(get(1), "1");
  EXPECT_EQ(built, 1);
  EXPECT_EQ(get(2), "2");
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(get(3), "3");  // full: drops 1 and 2
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(get(1), "1");
  EXPECT_EQ(built, 4);
}

TEST(DnnlPrimitiveCacheTest, AThrowingMakeLeavesNoEntry) {
  DnnlPrimitiveCache<int, int> cache;
  EXPECT_THROW(cache.with(7, []() -> int { throw std::runtime_error("no"); }, [](int& e) { return e; }),
               std::runtime_error);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.with(7, [] { return 5; }, [](int& e) { return e; }), 5);
}

TEST(DnnlPrimitiveCacheTest, ConcurrentCallsOnOneCacheRunOneAtATime) {
  DnnlPrimitiveCache<int, int> cache;
  int inside = 0, most_inside = 0, total = 0;  // guarded by the cache
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i)
        cache.with((t + i) % 3, [] { return 0; }, [&](int& e) {
          most_inside = std::max(most_inside, ++inside);
          ++e;
          ++total;
          --inside;
          return 0;
        });
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(most_inside, 1);
  EXPECT_EQ(total, 800);
}

}  // namespace
}  // namespace actorflow
