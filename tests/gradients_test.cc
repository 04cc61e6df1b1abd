// Every gradient function against central finite differences (float32), with static and
// partially unknown shapes, plus path handling, placement and errors of gradients().
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "device/executor.h"
#include "graph/gradients.h"
#include "graph/ops.h"
#include "tests/util/eval.h"
#include "graph/ops_nn_grad.h"
#include "graph/ops_variables.h"

namespace actorflow {
namespace {

using testing::random_tensor;

// Values (i * 7 mod n) * step + offset: distinct and well apart, so Max/MaxPool have no near-ties.
Tensor spread_tensor(const Shape& s, float step = 0.1f, float offset = -1.f) {
  Tensor t(DType::kFloat32, s);
  const int64_t n = t.num_elements();
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>((i * 7) % n) * step + offset;
  return t;
}

std::unique_ptr<Device> cpu() { return make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0); }

// What the placeholders standing for the inputs know statically.
enum class Known { kAll, kBatch, kDims, kNothing };

Shape placeholder_shape(const Shape& s, Known k) {
  if (k == Known::kNothing) return Shape::unknown();
  std::vector<int64_t> d = s.dims();
  for (size_t i = 0; i < d.size(); ++i)
    if (k == Known::kDims || (k == Known::kBatch && i == 0)) d[i] = -1;
  return Shape(d);
}

// The static shape of a gradient must agree with its x: same rank and the same value for every
// dim the x knows.
void expect_static_shape(const Shape& grad, const Shape& x) {
  if (x.unknown_rank()) return;
  ASSERT_FALSE(grad.unknown_rank()) << "gradient shape unknown for x " << x.to_string();
  ASSERT_EQ(grad.rank(), x.rank()) << grad.to_string() << " vs " << x.to_string();
  for (int i = 0; i < x.rank(); ++i)
    if (x.dim(i) >= 0) {
      EXPECT_EQ(grad.dim(i), x.dim(i)) << grad.to_string() << " vs " << x.to_string();
    }
}

// Compares the analytic gradients `grads` of scalar `loss` with respect to the fed tensors
// `xs` against central differences of `loss`, element by element.
void compare_with_numeric(const Graph& g, const Output& loss, const std::vector<Output>& xs,
                          const std::vector<Output>& grads, const std::map<std::string, Tensor>& feeds,
                          double rtol = 1e-2, double atol = 2e-3, float eps = 1e-2f) {
  auto dev = cpu();
  std::vector<std::string> fetches;
  for (const auto& gr : grads) {
    ASSERT_TRUE(gr.valid());
    fetches.push_back(gr.name());
  }
  auto analytic = run_local(g, fetches, feeds, dev.get());
  ASSERT_TRUE(analytic.ok()) << analytic.status();
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = feeds.at(xs[i].name());
    ASSERT_EQ((*analytic)[i].shape(), x.shape()) << "gradient " << i;
    for (int64_t k = 0; k < x.num_elements(); ++k) {
      auto eval = [&](float delta) {
        auto f2 = feeds;
        Tensor t = x.deep_copy();
        t.data<float>()[k] += delta;
        f2[xs[i].name()] = t;
        auto r = run_local(g, {loss.name()}, f2, dev.get());
        EXPECT_TRUE(r.ok()) << r.status();
        return r.ok() ? static_cast<double>((*r)[0].data<float>()[0]) : 0.0;
      };
      const double numeric = (eval(eps) - eval(-eps)) / (2.0 * eps);
      const double got = (*analytic)[i].data<float>()[k];
      EXPECT_NEAR(got, numeric, atol + rtol * std::fabs(numeric)) << "input " << i << " element " << k;
    }
  }
}

using Builder = std::function<Output(const Scope&, const std::vector<Output>&)>;

struct CheckOptions {
  Known known = Known::kAll;
  double rtol = 1e-2, atol = 2e-3;
  float eps = 1e-2f;
};

// Checks d(sum(w * f(xs)))/d(xs) with a fixed random w: analytic (gradients + run_local)
// against numeric, and the gradients' static shapes against the placeholders'.
void check_gradient(const std::string& what, const std::vector<Tensor>& inputs, const Builder& f,
                    CheckOptions opt = {}) {
  SCOPED_TRACE(what);
  Scope root = Scope::root();
  std::vector<Output> xs;
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    xs.push_back(ops::placeholder(root, DType::kFloat32, placeholder_shape(inputs[i].shape(), opt.known),
                                  "x" + std::to_string(i)));
    feeds[xs.back().name()] = inputs[i];
  }
  Output y = f(root, xs);
  ASSERT_TRUE(root.ok()) << root.status();
  ASSERT_TRUE(y.valid());
  // w takes y's run-time shape (y's static shape may be partly unknown).
  auto dev = cpu();
  auto yv = run_local(*root.graph(), {y.name()}, feeds, dev.get());
  ASSERT_TRUE(yv.ok()) << yv.status();
  Output w = ops::placeholder(root, DType::kFloat32, y.shape(), "w");
  feeds["w"] = random_tensor((*yv)[0].shape(), 99, 0.5f, 1.5f);
  Output loss = ops::reduce_sum(root, ops::mul(root, y, w));
  auto grads = gradients(root, {loss}, xs);
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(grads->size(), xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_TRUE((*grads)[i].valid()) << "no gradient for input " << i;
    expect_static_shape((*grads)[i].shape(), xs[i].shape());
  }
  compare_with_numeric(*root.graph(), loss, xs, *grads, feeds, opt.rtol, opt.atol, opt.eps);
}

// The same check with the placeholders knowing everything, the batch dim only unknown, and
// every dim unknown.
void check_gradient_all_shapes(const std::string& what, const std::vector<Tensor>& inputs, const Builder& f,
                               CheckOptions opt = {}) {
  for (Known k : {Known::kAll, Known::kBatch, Known::kDims}) {
    opt.known = k;
    check_gradient(what + (k == Known::kAll ? "" : k == Known::kBatch ? " (batch unknown)" : " (dims unknown)"),
                   inputs, f, opt);
  }
}

using Xs = std::vector<Output>;

TEST(GradientsTest, ElementwiseAndBroadcasting) {
  auto a = random_tensor({2, 3}, 1), b = random_tensor({3}, 2), c = random_tensor({2, 1}, 3), d = random_tensor({1, 3}, 4);
  auto pos = random_tensor({2, 3}, 5, 0.5f, 2.f);
  auto scalar = Tensor::scalar<float>(0.7f);
  auto add = [](const Scope& s, const Xs& x) { return ops::add(s, x[0], x[1]); };
  auto sub = [](const Scope& s, const Xs& x) { return ops::sub(s, x[0], x[1]); };
  auto mul = [](const Scope& s, const Xs& x) { return ops::mul(s, x[0], x[1]); };
  auto div = [](const Scope& s, const Xs& x) { return ops::div(s, x[0], x[1]); };
  auto maximum = [](const Scope& s, const Xs& x) { return ops::maximum(s, x[0], x[1]); };
  check_gradient_all_shapes("add [2,3]+[3]", {a, b}, add);
  check_gradient_all_shapes("add [3]+[2,3]", {b, a}, add);
  check_gradient_all_shapes("add [2,3]+[]", {a, scalar}, add);
  check_gradient_all_shapes("sub [2,3]-[3]", {a, b}, sub);
  check_gradient_all_shapes("sub []-[2,3]", {scalar, a}, sub);
  check_gradient_all_shapes("mul [2,1]*[1,3]", {c, d}, mul);
  check_gradient_all_shapes("mul [2,3]*[]", {a, scalar}, mul);
  check_gradient_all_shapes("div [2,3]/[2,3]", {a, pos}, div);
  check_gradient_all_shapes("div [2,1]/[1,3]", {c, random_tensor({1, 3}, 7, 0.5f, 2.f)}, div);
  check_gradient_all_shapes("div []/[2,3]", {scalar, pos}, div);
  check_gradient("scalar literal mul", {a}, [](const Scope& s, const Xs& x) { return ops::mul(s, x[0], 3.f); });
  check_gradient_all_shapes("maximum", {a, random_tensor({2, 3}, 6)}, maximum);
  check_gradient_all_shapes("maximum [2,3] vs [3]", {a, b}, maximum);
  check_gradient_all_shapes("neg", {a}, [](const Scope& s, const Xs& x) { return ops::neg(s, x[0]); });
  check_gradient_all_shapes("square", {a}, [](const Scope& s, const Xs& x) { return ops::square(s, x[0]); });
  check_gradient_all_shapes("log", {pos}, [](const Scope& s, const Xs& x) { return ops::log(s, x[0]); });
  check_gradient_all_shapes("exp", {a}, [](const Scope& s, const Xs& x) { return ops::exp(s, x[0]); });
  check_gradient_all_shapes("sqrt", {pos}, [](const Scope& s, const Xs& x) { return ops::sqrt(s, x[0]); });
  check_gradient_all_shapes("add_n", {a, pos, a}, [](const Scope& s, const Xs& x) { return ops::add_n(s, x); });
  check_gradient("add_n same input twice", {a}, [](const Scope& s, const Xs& x) {
    return ops::add_n(s, {x[0], x[0], ops::square(s, x[0])});
  });
  check_gradient_all_shapes("identity", {a}, [](const Scope& s, const Xs& x) { return ops::identity(s, x[0]); });
  check_gradient("cast f32->f32", {a}, [](const Scope& s, const Xs& x) { return ops::cast(s, x[0], DType::kFloat32); });
  check_gradient("cast through f64", {a}, [](const Scope& s, const Xs& x) {
    return ops::cast(s, ops::square(s, ops::cast(s, x[0], DType::kFloat64)), DType::kFloat32);
  });
  // Select: gradient to x where cond holds, to y elsewhere; none to cond.
  Tensor cond(DType::kBool, Shape{2, 3});
  for (int i = 0; i < 6; ++i) cond.data<bool>()[i] = i % 2 == 0;
  check_gradient_all_shapes("select", {a, pos}, [&](const Scope& s, const Xs& x) {
    return ops::select(s, ops::constant(s, cond), x[0], x[1]);
  });
  check_gradient("select scalar y", {a, scalar}, [&](const Scope& s, const Xs& x) {
    return ops::select(s, ops::constant(s, cond), x[0], x[1]);
  });
  check_gradient("select cond from x", {a}, [](const Scope& s, const Xs& x) {
    return ops::select(s, ops::greater(s, x[0], 0.f), ops::square(s, x[0]), ops::neg(s, x[0]));
  });
  // SumToShape: the sum's gradient is broadcast back.
  check_gradient_all_shapes("sum_to_shape", {a, b}, [](const Scope& s, const Xs& x) {
    return ops::mul(s, ops::sum_to_shape_of(s, x[0], x[1]), x[1]);
  });
  // ZerosLike/OnesLike carry no gradient; the other path does.
  check_gradient("ones_like", {a}, [](const Scope& s, const Xs& x) {
    return ops::add(s, ops::ones_like(s, x[0]), ops::mul(s, ops::zeros_like(s, x[0]), x[0]));
  });
}

// The indexing and activation ops of graph/ops_indexing.cc (embedding-style models).
TEST(GradientsTest, IndexingAndActivations) {
  auto a = random_tensor({4, 3}, 11), b = random_tensor({2, 3}, 12), c = random_tensor({4, 2}, 13);
  auto ids = Tensor::from_vector<int64_t>({3, 0, 3, 1, 2}, {5});  // row 3 twice, row 0 once...
  auto ids32 = Tensor::from_vector<int32_t>({1, 1, 0, 2}, {2, 2});
  check_gradient_all_shapes("gather", {a}, [&](const Scope& s, const Xs& x) {
    return ops::gather(s, x[0], ops::constant(s, ids));
  });
  check_gradient_all_shapes("gather int32 ids [2,2]", {a}, [&](const Scope& s, const Xs& x) {
    return ops::embedding_lookup(s, x[0], ops::constant(s, ids32));
  });
  auto seg = Tensor::from_vector<int32_t>({2, 0, -1, 2}, {4});  // -1 dropped
  check_gradient_all_shapes("unsorted_segment_sum", {a}, [&](const Scope& s, const Xs& x) {
    return ops::unsorted_segment_sum(s, x[0], ops::constant(s, seg), int64_t{3});
  });
  check_gradient_all_shapes("concat axis 0", {a, b}, [](const Scope& s, const Xs& x) {
    return ops::concat(s, {x[0], x[1]}, 0);
  });
  check_gradient_all_shapes("concat axis -1", {a, c, a}, [](const Scope& s, const Xs& x) {
    return ops::concat(s, {x[0], x[1], x[2]}, -1);
  });
  check_gradient_all_shapes("slice", {a}, [](const Scope& s, const Xs& x) { return ops::slice(s, x[0], {1, 1}, {2, -1}); });
  check_gradient_all_shapes("sigmoid", {a}, [](const Scope& s, const Xs& x) { return ops::sigmoid(s, x[0]); });
  check_gradient_all_shapes("tanh", {a}, [](const Scope& s, const Xs& x) { return ops::tanh(s, x[0]); });
  check_gradient_all_shapes("l2_loss", {a}, [](const Scope& s, const Xs& x) { return ops::l2_loss(s, x[0]); });
  check_gradient_all_shapes("split, both parts used", {a}, [](const Scope& s, const Xs& x) {
    auto p = ops::split(s, x[0], 3, 1);
    return ops::add(s, ops::mul(s, p[0], 2.f), ops::square(s, p[2]));  // p[1] does not reach the loss
  });
  check_gradient_all_shapes("stack", {a, a, random_tensor({4, 3}, 14)}, [](const Scope& s, const Xs& x) {
    return ops::stack(s, {x[0], ops::square(s, x[1]), x[2]}, 1);
  });
  check_gradient_all_shapes("dropout", {a}, [](const Scope& s, const Xs& x) { return ops::dropout(s, x[0], 0.4, 7); });
  auto labels = Tensor::from_vector<int32_t>({2, 0, 1, 2}, {4});
  check_gradient("sparse xent", {a}, [&](const Scope& s, const Xs& x) {
    return ops::sparse_softmax_cross_entropy_with_logits(s, x[0], ops::constant(s, labels))[0];
  });
  auto img = random_tensor({2, 5, 4, 3}, 15);
  for (const char* pad : {"VALID", "SAME"}) {
    check_gradient_all_shapes(std::string("avg_pool ") + pad, {img}, [&](const Scope& s, const Xs& x) {
      return ops::avg_pool(s, x[0], {1, 2, 3, 1}, {1, 2, 2, 1}, pad);
    });
  }
}

TEST(GradientsTest, ReductionsAndShapes) {
  Tensor a = spread_tensor({2, 3, 4});
  for (bool keep : {false, true}) {
    for (std::vector<int64_t> axes : {std::vector<int64_t>{}, {0}, {1}, {2}, {0, 2}, {-1}, {-3, 1}}) {
      const std::string tag = " axes " + std::to_string(axes.size()) + (keep ? " keep" : "");
      check_gradient_all_shapes("sum" + tag, {a}, [&](const Scope& s, const Xs& x) {
        return ops::reduce_sum(s, x[0], axes, keep);
      });
      check_gradient_all_shapes("mean" + tag, {a}, [&](const Scope& s, const Xs& x) {
        return ops::reduce_mean(s, x[0], axes, keep);
      });
      check_gradient_all_shapes("max" + tag, {a}, [&](const Scope& s, const Xs& x) {
        return ops::reduce_max(s, x[0], axes, keep);
      });
    }
  }
  // Unknown rank: the reductions still differentiate (run-time shapes throughout).
  for (std::vector<int64_t> axes : {std::vector<int64_t>{}, {1}, {-1, 0}}) {
    CheckOptions o;
    o.known = Known::kNothing;
    check_gradient("sum unknown rank", {a}, [&](const Scope& s, const Xs& x) { return ops::reduce_sum(s, x[0], axes); }, o);
    check_gradient("mean unknown rank", {a}, [&](const Scope& s, const Xs& x) { return ops::reduce_mean(s, x[0], axes); }, o);
    check_gradient("max unknown rank", {a}, [&](const Scope& s, const Xs& x) { return ops::reduce_max(s, x[0], axes); }, o);
  }
  check_gradient_all_shapes("reshape", {a}, [](const Scope& s, const Xs& x) { return ops::reshape(s, x[0], {4, -1}); });
  check_gradient_all_shapes("reshape flat", {a}, [](const Scope& s, const Xs& x) { return ops::reshape(s, x[0], {-1}); });
  check_gradient_all_shapes("transpose", {a}, [](const Scope& s, const Xs& x) {
    return ops::transpose(s, x[0], {2, 0, 1});
  });
  check_gradient_all_shapes("expand_dims", {a}, [](const Scope& s, const Xs& x) {
    return ops::expand_dims(s, x[0], {0, -1});
  });
  check_gradient_all_shapes("reshape_like", {a, random_tensor({4, 6}, 30)}, [](const Scope& s, const Xs& x) {
    return ops::mul(s, ops::reshape_like(s, x[0], x[1]), x[1]);
  });
}

TEST(GradientsTest, Max) {
  // Ties split the gradient evenly, as TensorFlow does: d max(x)/dx = mask / count.
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{2, 3}, "x");
  auto g = gradients(root, {ops::reduce_max(root, x, {1})}, {x});
  ASSERT_TRUE(g.ok()) << g.status();
  auto dev = cpu();
  auto r = run_local(*root.graph(), {(*g)[0].name()},
                     {{"x", Tensor::from_vector<float>({1, 5, 5, 2, 2, 2}, {2, 3})}}, dev.get());
  ASSERT_TRUE(r.ok()) << r.status();
  const float third = 1.f / 3;
  const std::vector<float> expect{0, 0.5f, 0.5f, third, third, third};
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ((*r)[0].data<float>()[i], expect[static_cast<size_t>(i)]) << i;
  // Maximum's ties go to x (TensorFlow's x >= y).
  auto y = ops::placeholder(root, DType::kFloat32, Shape{2, 3}, "y");
  auto gm = gradients(root, {ops::reduce_sum(root, ops::maximum(root, x, y))}, {x, y});
  ASSERT_TRUE(gm.ok()) << gm.status();
  auto rm = run_local(*root.graph(), {(*gm)[0].name(), (*gm)[1].name()},
                      {{"x", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
                       {"y", Tensor::from_vector<float>({1, 3, 2, 4, 6, 5}, {2, 3})}},
                      dev.get());
  ASSERT_TRUE(rm.ok()) << rm.status();
  EXPECT_EQ((*rm)[0].to_string(), "[[1. 0. 1.]\n [1. 0. 1.]]");
  EXPECT_EQ((*rm)[1].to_string(), "[[0. 1. 0.]\n [0. 1. 0.]]");
}

TEST(GradientsTest, NeuralNetworkOps) {
  auto a = random_tensor({3, 4}, 8), b = random_tensor({4, 2}, 9);
  check_gradient_all_shapes("matmul", {a, b}, [](const Scope& s, const Xs& x) { return ops::matmul(s, x[0], x[1]); });
  check_gradient_all_shapes("matmul ta", {random_tensor({4, 3}, 10), b}, [](const Scope& s, const Xs& x) {
    return ops::matmul(s, x[0], x[1], {true, false});
  });
  check_gradient_all_shapes("matmul tb", {a, random_tensor({2, 4}, 11)}, [](const Scope& s, const Xs& x) {
    return ops::matmul(s, x[0], x[1], {false, true});
  });
  check_gradient_all_shapes("matmul ta tb", {random_tensor({4, 3}, 12), random_tensor({2, 4}, 13)},
                            [](const Scope& s, const Xs& x) { return ops::matmul(s, x[0], x[1], {true, true}); });
  // Keep values away from the kink at 0.
  Tensor r = random_tensor({2, 5}, 14);
  for (int i = 0; i < 10; ++i) r.data<float>()[i] += r.data<float>()[i] > 0 ? 0.2f : -0.2f;
  check_gradient_all_shapes("relu", {r}, [](const Scope& s, const Xs& x) { return ops::relu(s, x[0]); });
  check_gradient_all_shapes("bias_add", {a, random_tensor({4}, 15)}, [](const Scope& s, const Xs& x) {
    return ops::bias_add(s, x[0], x[1]);
  });
  check_gradient("bias_add rank 4", {random_tensor({2, 2, 3, 4}, 16), random_tensor({4}, 17)},
                 [](const Scope& s, const Xs& x) { return ops::bias_add(s, x[0], x[1]); });
  check_gradient_all_shapes("softmax", {a}, [](const Scope& s, const Xs& x) { return ops::softmax(s, x[0]); });
  Tensor labels(DType::kFloat32, Shape{3, 4});
  for (int i = 0; i < 3; ++i) labels.data<float>()[i * 4 + i] = 1;
  check_gradient_all_shapes("xent loss wrt logits", {a}, [&](const Scope& s, const Xs& x) {
    return ops::softmax_cross_entropy_with_logits(s, x[0], ops::constant(s, labels))[0];
  });
  // Soft labels get TensorFlow's gradient -log_softmax(logits) * dloss.
  // (Labels are distributions: TensorFlow's logits gradient softmax - labels assumes rows sum to 1.)
  Tensor soft = random_tensor({3, 4}, 18, 0.1f, 1.f);
  for (int i = 0; i < 3; ++i) {
    float row = 0;
    for (int j = 0; j < 4; ++j) row += soft.data<float>()[i * 4 + j];
    for (int j = 0; j < 4; ++j) soft.data<float>()[i * 4 + j] /= row;
  }
  check_gradient_all_shapes("xent loss wrt logits and labels", {a, soft}, [](const Scope& s, const Xs& x) {
    return ops::softmax_cross_entropy_with_logits(s, x[0], x[1])[0];
  });
  check_gradient_all_shapes("xent backprop output", {a, soft}, [](const Scope& s, const Xs& x) {
    return ops::softmax_cross_entropy_with_logits(s, x[0], x[1])[1];
  });
  check_gradient("xent both outputs", {a, soft}, [](const Scope& s, const Xs& x) {
    auto outs = ops::softmax_cross_entropy_with_logits(s, x[0], x[1]);
    return ops::add(s, ops::reduce_sum(s, outs[1]), ops::reduce_sum(s, ops::square(s, outs[0])));
  });
  for (const char* pad : {"SAME", "VALID"}) {
    for (int64_t st : {1, 2}) {
      CheckOptions o;
      o.rtol = 2e-2;
      o.atol = 5e-3;
      for (Known k : {Known::kAll, Known::kBatch}) {
        o.known = k;
        check_gradient(std::string("conv2d ") + pad + " stride " + std::to_string(st) +
                           (k == Known::kBatch ? " (batch unknown)" : ""),
                       {random_tensor({2, 5, 5, 2}, 16), random_tensor({3, 3, 2, 3}, 17)},
                       [&](const Scope& s, const Xs& x) {
                         // The filter of a model is a variable of known shape.
                         return ops::conv2d(s, x[0], ops::reshape(s, x[1], {3, 3, 2, 3}), {1, st, st, 1}, pad);
                       },
                       o);
      }
    }
  }
  // Distinct values so each pool window has a clear maximum.
  Tensor p = spread_tensor({2, 5, 5, 2}, 0.05f, 0.f);
  for (const char* pad : {"SAME", "VALID"}) {
    for (int64_t st : {1, 2}) {
      check_gradient_all_shapes(std::string("max_pool ") + pad + " stride " + std::to_string(st), {p},
                                [&](const Scope& s, const Xs& x) {
                                  return ops::max_pool(s, x[0], {1, 2, 2, 1}, {1, st, st, 1}, pad);
                                });
      check_gradient(std::string("max_pool 3x3 ") + pad, {p}, [&](const Scope& s, const Xs& x) {
        return ops::max_pool(s, x[0], {1, 3, 3, 1}, {1, st, st, 1}, pad);
      });
    }
  }
}

// The gradient ops themselves are differentiable (second-order gradients).
TEST(GradientsTest, GradientOps) {
  Tensor f = random_tensor({2, 5}, 40);
  for (int i = 0; i < 10; ++i) f.data<float>()[i] += f.data<float>()[i] > 0 ? 0.2f : -0.2f;
  const Tensor features = f;
  check_gradient_all_shapes("relu_grad", {random_tensor({2, 5}, 41)}, [&](const Scope& s, const Xs& x) {
    return ops::relu_grad(s, x[0], ops::constant(s, features));
  });
  check_gradient_all_shapes("bias_add_grad", {random_tensor({3, 4}, 42)}, [](const Scope& s, const Xs& x) {
    return ops::bias_add_grad(s, x[0]);
  });
  CheckOptions o;
  o.rtol = 2e-2;
  o.atol = 5e-3;
  for (const char* pad : {"SAME", "VALID"}) {
    for (int64_t st : {1, 2}) {
      const std::vector<int64_t> strides{1, st, st, 1};
      const Shape in{2, 5, 5, 2};
      const int64_t out = std::string(pad) == "SAME" ? (5 + st - 1) / st : (5 - 3) / st + 1;
      const std::string tag = std::string(pad) + " stride " + std::to_string(st);
      check_gradient("conv2d_backprop_input " + tag, {random_tensor({3, 3, 2, 3}, 43), random_tensor({2, out, out, 3}, 44)},
                     [&](const Scope& s, const Xs& x) {
                       return ops::conv2d_backprop_input(s, Input({2, 5, 5, 2}), ops::reshape(s, x[0], {3, 3, 2, 3}),
                                                         x[1], strides, pad);
                     },
                     o);
      check_gradient("conv2d_backprop_filter " + tag, {random_tensor(in, 45), random_tensor({2, out, out, 3}, 46)},
                     [&](const Scope& s, const Xs& x) {
                       return ops::conv2d_backprop_filter(s, x[0], {3, 3, 2, 3}, x[1], strides, pad);
                     },
                     o);
      const Tensor orig = spread_tensor(in, 0.05f, 0.f);
      const int64_t pout = std::string(pad) == "SAME" ? (5 + st - 1) / st : (5 - 2) / st + 1;
      check_gradient("max_pool_grad " + tag, {random_tensor({2, pout, pout, 2}, 47)}, [&](const Scope& s, const Xs& x) {
        Output xi = ops::constant(s, orig);
        Output yo = ops::max_pool(s, xi, {1, 2, 2, 1}, strides, pad);
        return ops::max_pool_grad(s, xi, yo, x[0], {1, 2, 2, 1}, strides, pad);
      });
      check_gradient("max_pool_grad_grad " + tag, {random_tensor(in, 48)}, [&](const Scope& s, const Xs& x) {
        Output xi = ops::constant(s, orig);
        Output yo = ops::max_pool(s, xi, {1, 2, 2, 1}, strides, pad);
        return ops::max_pool_grad_grad(s, xi, yo, x[0], {1, 2, 2, 1}, strides, pad);
      });
    }
  }
  // A true second derivative: f(x) = d/dx sum(x^3) = 3x^2, differentiated again.
  check_gradient("second derivative of x^3", {random_tensor({2, 3}, 49)}, [](const Scope& s, const Xs& x) {
    auto g = gradients(s, {ops::reduce_sum(s, ops::mul(s, ops::mul(s, x[0], x[0]), x[0]))}, {x[0]});
    return g.ok() ? (*g)[0] : Output();
  });
  // Through a small CNN's backward pass: d/dx of (d loss / d input) goes through ReluGrad,
  // MaxPoolGrad, Conv2DBackpropInput and friends.
  const Tensor filt = random_tensor({3, 3, 1, 2}, 50);
  Tensor img = random_tensor({1, 4, 4, 1}, 51);
  check_gradient("gradient of a small CNN's input gradient", {img}, [&](const Scope& s, const Xs& x) {
    Output h = ops::conv2d(s, x[0], ops::constant(s, filt), {1, 1, 1, 1}, "SAME");
    Output pooled = ops::max_pool(s, ops::square(s, h), {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
    auto g = gradients(s, {ops::reduce_sum(s, ops::square(s, pooled))}, {x[0]});
    return g.ok() ? (*g)[0] : Output();
  }, o);
}

TEST(GradientsTest, TwoLayerMlpEndToEndWithUnknownBatch) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{-1, 4}, "x");
  auto labels = ops::placeholder(root, DType::kFloat32, Shape{-1, 3}, "labels");
  auto w1 = ops::placeholder(root, DType::kFloat32, Shape{4, 6}, "w1");
  auto b1 = ops::placeholder(root, DType::kFloat32, Shape{6}, "b1");
  auto w2 = ops::placeholder(root, DType::kFloat32, Shape{6, 3}, "w2");
  auto b2 = ops::placeholder(root, DType::kFloat32, Shape{3}, "b2");
  auto pre_activation = ops::bias_add(root, ops::matmul(root, x, w1), b1);
  auto hidden = ops::relu(root, pre_activation);
  auto logits = ops::bias_add(root, ops::matmul(root, hidden, w2), b2);
  auto loss = ops::reduce_mean(root, ops::softmax_cross_entropy_with_logits(root, logits, labels)[0]);
  const std::vector<Output> params{w1, b1, w2, b2, x};
  auto g = gradients(root, {loss}, params);
  ASSERT_TRUE(g.ok()) << g.status();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ((*g)[i].shape(), params[i].shape()) << i;
  Tensor lv(DType::kFloat32, Shape{5, 3});
  for (int i = 0; i < 5; ++i) lv.data<float>()[i * 3 + i % 3] = 1;
  std::map<std::string, Tensor> feeds{{"x", random_tensor({5, 4}, 20)},  {"labels", lv},
                                      {"w1", random_tensor({4, 6}, 21)}, {"b1", random_tensor({6}, 22)},
                                      {"w2", random_tensor({6, 3}, 23)}, {"b2", random_tensor({3}, 24)}};
  // Keep the hidden pre-activations away from relu's kink so finite differences are exact: a
  // step of 1e-2 in one input moves a pre-activation by at most 1e-2 * max|value| <= 1e-2.
  auto dev = cpu();
  auto pre = run_local(*root.graph(), {pre_activation.name()}, feeds, dev.get());
  ASSERT_TRUE(pre.ok()) << pre.status();
  float closest = 1e9f;
  for (int64_t i = 0; i < (*pre)[0].num_elements(); ++i) closest = std::min(closest, std::fabs((*pre)[0].data<float>()[i]));
  ASSERT_GT(closest, 0.011f) << "choose other seeds: a pre-activation lies near relu's kink";
  compare_with_numeric(*root.graph(), loss, params, *g, feeds, 1e-2, 1e-3);
  // The same graph runs with another batch size.
  feeds["x"] = random_tensor({2, 4}, 25);
  Tensor l2(DType::kFloat32, Shape{2, 3});
  l2.data<float>()[0] = l2.data<float>()[5] = 1;
  feeds["labels"] = l2;
  auto r = run_local(*root.graph(), {(*g)[0].name(), (*g)[4].name()}, feeds, dev.get());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), Shape({4, 6}));
  EXPECT_EQ((*r)[1].shape(), Shape({2, 4}));
}

TEST(GradientsTest, PathHandling) {
  Scope root = Scope::root();
  auto dev = cpu();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{3}, "x");
  auto z = ops::placeholder(root, DType::kFloat32, Shape{3}, "z");
  const std::map<std::string, Tensor> feeds{{"x", Tensor::from_vector<float>({1, 2, 3}, {3})},
                                            {"z", Tensor::from_vector<float>({4, 5, 6}, {3})}};
  auto value = [&](const Output& o) {
    auto r = run_local(*root.graph(), {o.name()}, feeds, dev.get());
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? (*r)[0].to_string() : std::string("error");
  };
  auto y1 = ops::reduce_sum(root, ops::square(root, x));
  // Unconnected x gets an invalid Output, or zeros when asked.
  auto g = gradients(root, {y1}, {x, z});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE((*g)[0].valid());
  EXPECT_FALSE((*g)[1].valid());
  EXPECT_EQ(value((*g)[0]), "[2. 4. 6.]");
  auto gz = gradients(root, {y1}, {x, z}, {}, true);
  ASSERT_TRUE(gz.ok());
  ASSERT_TRUE((*gz)[1].valid());
  EXPECT_EQ((*gz)[1].shape(), Shape({3}));
  EXPECT_EQ(value((*gz)[1]), "[0. 0. 0.]");
  // StopGradient blocks its path only: d/dx [x*x + stop(x)*x] = 2x + x.
  auto y2 = ops::reduce_sum(root, ops::stop_gradient(root, ops::mul(root, x, 5.f)));
  auto gs = gradients(root, {y2}, {x});
  ASSERT_TRUE(gs.ok()) << gs.status();
  EXPECT_FALSE((*gs)[0].valid());
  auto y3 = ops::reduce_sum(root, ops::add(root, ops::mul(root, x, x), ops::mul(root, ops::stop_gradient(root, x), x)));
  auto g3 = gradients(root, {y3}, {x});
  ASSERT_TRUE(g3.ok()) << g3.status();
  EXPECT_EQ(value((*g3)[0]), "[3. 6. 9.]");
  // Multiple ys with grad_ys: d(2*y1 + 3*y1) = 5 * 2x.
  auto gm = gradients(root, {y1, y1}, {x}, {ops::constant(root, Tensor::scalar<float>(2.f)),
                                            ops::constant(root, Tensor::scalar<float>(3.f))});
  ASSERT_TRUE(gm.ok()) << gm.status();
  EXPECT_EQ(value((*gm)[0]), "[10. 20. 30.]");
  // Non-scalar ys weighted by grad_ys: d <v, x*z> / dx = v * z; d/dz = v * x; plus d y1/dx = 2x.
  auto xz = ops::mul(root, x, z);
  auto gv = gradients(root, {xz, y1}, {x, z}, {ops::constant(root, {1.f, 0.f, -1.f}, Shape{3}),
                                                ops::constant(root, Tensor::scalar<float>(1.f))});
  ASSERT_TRUE(gv.ok()) << gv.status();
  EXPECT_EQ(value((*gv)[0]), "[6. 4. 0.]");
  EXPECT_EQ(value((*gv)[1]), "[ 1.  0. -3.]");
  // A y that is also an x: d y / d y = 1.
  auto gself = gradients(root, {y1}, {y1, x});
  ASSERT_TRUE(gself.ok()) << gself.status();
  EXPECT_EQ(value((*gself)[0]), "1.");
  // xs along one chain: the gradient of the intermediate and of the input.
  auto sq = ops::square(root, x);
  auto gc = gradients(root, {ops::reduce_sum(root, ops::mul(root, sq, 3.f))}, {sq, x});
  ASSERT_TRUE(gc.ok()) << gc.status();
  EXPECT_EQ(value((*gc)[0]), "[3. 3. 3.]");
  EXPECT_EQ(value((*gc)[1]), "[ 6. 12. 18.]");
  // Integer paths end quietly: ArgMax -> OneHot is a mask with no gradient, x's other path has one.
  auto x2 = ops::reshape(root, x, {1, 3});
  auto mask = ops::one_hot(root, ops::argmax(root, x2, 1), 3);
  auto gi = gradients(root, {ops::reduce_sum(root, ops::mul(root, mask, x2))}, {x});
  ASSERT_TRUE(gi.ok()) << gi.status();
  EXPECT_EQ(value((*gi)[0]), "[0. 0. 1.]");
  auto am = ops::cast(root, ops::argmax(root, x2, 1), DType::kFloat32);
  auto gn = gradients(root, {ops::reduce_sum(root, am)}, {x});
  ASSERT_TRUE(gn.ok()) << gn.status();
  EXPECT_FALSE((*gn)[0].valid());
}

TEST(GradientsTest, Errors) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{3}, "x");
  auto y = ops::reduce_sum(root, ops::square(root, x));
  // A float op without a gradient on the path is named.
  auto v = ops::variable(root.with_op_name("v"), Shape{3}, DType::kFloat32);
  auto aa = ops::assign_add(root.with_op_name("aa"), v, ops::mul(root, x, 2.f));
  auto ge = gradients(root, {ops::reduce_sum(root, aa)}, {x});
  ASSERT_FALSE(ge.ok());
  EXPECT_NE(ge.status().message().find("gradients: AssignAdd 'aa' has no gradient but lies between the ys and xs"),
            std::string::npos)
      << ge.status();
  // grad_ys: wrong count, wrong dtype.
  auto bad_count = gradients(root, {y}, {x}, {ops::constant(root, Tensor::scalar<float>(1.f)),
                                             ops::constant(root, Tensor::scalar<float>(1.f))});
  EXPECT_FALSE(bad_count.ok());
  auto bad_type = gradients(root, {y}, {x}, {ops::constant(root, Tensor::scalar<int32_t>(1))});
  ASSERT_FALSE(bad_type.ok());
  EXPECT_NE(bad_type.status().message().find("dtype int32"), std::string::npos) << bad_type.status();
  // Invalid Outputs and Outputs of another graph.
  EXPECT_FALSE(gradients(root, {Output()}, {x}).ok());
  EXPECT_FALSE(gradients(root, {y}, {Output()}).ok());
  Scope other = Scope::root();
  auto ox = ops::placeholder(other, DType::kFloat32, Shape{3}, "ox");
  auto foreign = gradients(root, {y}, {ox});
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("another graph"), std::string::npos) << foreign.status();
  EXPECT_TRUE(root.ok()) << root.status();
}

// The small ops the gradients use: ExpandDims, ReshapeLike, EnsureShape, MaxPoolGradGrad.
TEST(GradientsTest, SupportOps) {
  Scope root = Scope::root();
  auto dev = cpu();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{-1, 3}, "x");
  const Tensor xv = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto e = ops::expand_dims(root, x, {0, -1});
  EXPECT_EQ(e.shape(), Shape({1, -1, 3, 1}));
  auto e2 = ops::expand_dims(root, x, {1});
  EXPECT_EQ(e2.shape(), Shape({-1, 1, 3}));
  EXPECT_EQ(ops::expand_dims(root, ops::placeholder(root, DType::kFloat32), {0}).shape(), Shape::unknown());
  auto like = ops::placeholder(root, DType::kFloat32, Shape{3, -1}, "like");
  auto rl = ops::reshape_like(root, x, like);
  EXPECT_EQ(rl.shape(), Shape({3, -1}));
  auto es = ops::ensure_shape(root, x, Shape{2, -1});
  EXPECT_EQ(es.shape(), Shape({2, 3}));
  ASSERT_TRUE(root.ok()) << root.status();
  auto r = run_local(*root.graph(), {e.name(), e2.name(), rl.name(), es.name()},
                     {{"x", xv}, {"like", Tensor(DType::kFloat32, Shape{3, 2})}}, dev.get());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), Shape({1, 2, 3, 1}));
  EXPECT_EQ((*r)[1].shape(), Shape({2, 1, 3}));
  EXPECT_EQ((*r)[2].shape(), Shape({3, 2}));
  EXPECT_EQ((*r)[2].data<float>()[5], 6.f);
  EXPECT_EQ((*r)[3].shape(), Shape({2, 3}));
  // Run-time mismatches name the op.
  auto bad = run_local(*root.graph(), {rl.name()}, {{"x", xv}, {"like", Tensor(DType::kFloat32, Shape{3, 3})}},
                       dev.get());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ReshapeLike"), std::string::npos) << bad.status();
  auto bad2 = run_local(*root.graph(), {es.name()}, {{"x", Tensor(DType::kFloat32, Shape{4, 3})}}, dev.get());
  ASSERT_FALSE(bad2.ok());
  EXPECT_NE(bad2.status().message().find("EnsureShape"), std::string::npos) << bad2.status();
  // Static mismatches are construction errors.
  {
    Scope s = Scope::root();
    ops::expand_dims(s, ops::placeholder(s, DType::kFloat32, Shape{2}), {0, -3});  // both are axis 0
    EXPECT_FALSE(s.ok());
  }
  {
    Scope s = Scope::root();
    ops::reshape_like(s, ops::placeholder(s, DType::kFloat32, Shape{2, 3}),
                      ops::placeholder(s, DType::kFloat32, Shape{5}));
    EXPECT_FALSE(s.ok());
  }
  {
    Scope s = Scope::root();
    ops::ensure_shape(s, ops::placeholder(s, DType::kFloat32, Shape{2, 3}), Shape{3, -1});
    EXPECT_FALSE(s.ok());
  }
  // MaxPoolGradGrad picks grad at each window's first maximum: 1x4x4x1 input, 2x2 windows.
  Scope s = Scope::root();
  auto in = ops::constant(s, {1, 9, 2, 3,  //
                              4, 5, 8, 8,  //
                              7, 6, 0, 1,  //
                              6, 7, 2, 1},
                          Shape{1, 4, 4, 1});
  auto pooled = ops::max_pool(s, in, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  std::vector<float> gv(16);
  for (int i = 0; i < 16; ++i) gv[static_cast<size_t>(i)] = static_cast<float>(i) * 10;
  auto gg = ops::max_pool_grad_grad(s, in, pooled, ops::constant(s, gv, Shape{1, 4, 4, 1}), {1, 2, 2, 1},
                                    {1, 2, 2, 1}, "VALID");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(gg.shape(), Shape({1, 2, 2, 1}));
  auto rg = run_local(*s.graph(), {gg.name()}, {}, dev.get());
  ASSERT_TRUE(rg.ok()) << rg.status();
  // Maxima: 9 at 1, 8 at 6 (first of the tie 8, 8), 7 at 8 (first of the tie 7, 7), 2 at 14.
  const std::vector<float> expect{10, 60, 80, 140};
  for (int i = 0; i < 4; ++i) EXPECT_EQ((*rg)[0].data<float>()[i], expect[static_cast<size_t>(i)]) << i;
}

TEST(GradientsTest, GradientOpsFollowTheirForwardOpsDevice) {
  Scope root = Scope::root();
  Scope ps = root.with_device("/job:ps/task:0/device:CPU:0");
  Scope w0 = root.with_device("/job:worker/task:0/device:CPU:0");
  Scope w1 = root.with_device("/job:worker/task:1/device:CPU:0");
  auto v = ops::variable(ps.with_op_name("v"), Shape{3, 3}, DType::kFloat32);
  auto b = ops::variable(ps.with_op_name("b"), Shape{3}, DType::kFloat32);
  auto x = ops::placeholder(w0, DType::kFloat32, Shape{-1, 3}, "x");
  // v is read twice on worker 0 (its gradients are summed there) and b once on worker 1.
  auto h = ops::relu(w0, ops::add(w0, ops::matmul(w0, x, v), ops::matmul(w0, ops::square(w0, x), v)));
  auto out = ops::bias_add(w1, h, b);
  auto loss = ops::reduce_mean(w1, ops::square(w1, out));
  auto g = gradients(root, {loss}, {v, b});
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string d0 = "/job:worker/task:0/device:CPU:0", d1 = "/job:worker/task:1/device:CPU:0";
  EXPECT_EQ((*g)[0].node()->op, "AddN");
  EXPECT_EQ((*g)[0].node()->requested_device, d0);
  EXPECT_EQ((*g)[1].node()->requested_device, d1);
  int grad_ops = 0;
  const Graph& graph = *root.graph();
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const Node* n = graph.node(id);
    if (n->name.rfind("gradients/", 0) != 0) continue;
    ++grad_ops;
    EXPECT_EQ(n->requested_device.find("/job:ps"), std::string::npos) << n->name << " on " << n->requested_device;
    EXPECT_TRUE(n->requested_device == d0 || n->requested_device == d1) << n->name << " on " << n->requested_device;
  }
  EXPECT_GT(grad_ops, 8);
  // The gradient of a worker-1 op (BiasAdd) stays on worker 1, of a worker-0 op (Relu) on worker 0.
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const Node* n = graph.node(id);
    if (n->name.rfind("gradients/", 0) != 0) continue;
    if (n->op == "BiasAddGrad") {
      EXPECT_EQ(n->requested_device, d1);
    }
    if (n->op == "ReluGrad") {
      EXPECT_EQ(n->requested_device, d0);
    }
  }
  // Ops with no device take the scope's of the gradients() call.
  auto p = ops::placeholder(root, DType::kFloat32, Shape{2}, "p");
  auto gp = gradients(root.with_device(d1), {ops::reduce_sum(root, ops::exp(root, p))}, {p});
  ASSERT_TRUE(gp.ok()) << gp.status();
  EXPECT_EQ((*gp)[0].node()->requested_device, d1);
}

}  // namespace
}  // namespace actorflow
