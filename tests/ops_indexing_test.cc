// Indexing and activation ops (graph/ops_indexing.cc): Gather/embedding_lookup,
// UnsortedSegmentSum, Concat, Slice, Sigmoid, Tanh, L2Loss — hand-computed values, inferred static
// shapes, and construction-time and run-time errors naming the op. Gradients are checked by
// finite differences in tests/gradients_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "actorflow/actorflow.h"
#include "device/executor.h"
#include "graph/ops.h"
#include "tests/util/eval.h"
#include "tests/util/local_server.h"

namespace actorflow {
namespace {

using testing::cpu;
using testing::eval;
using testing::vals;

// [[0 1 2] [10 11 12] [20 21 22] [30 31 32]]
Tensor table() {
  Tensor t(DType::kFloat32, Shape{4, 3});
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) t.data<float>()[r * 3 + c] = static_cast<float>(10 * r + c);
  return t;
}

TEST(OpsIndexingTest, GatherPicksRowsInOrderForEitherIdType) {
  Scope root = Scope::root();
  auto p = ops::constant(root, table());
  auto g64 = ops::gather(root, p, ops::constant(root, Tensor::from_vector<int64_t>({3, 0, 3}, {3})));
  auto g32 = ops::embedding_lookup(root, p, ops::constant(root, Tensor::from_vector<int32_t>({2, 1, 0, 2}, {2, 2})));
  EXPECT_EQ(g64.shape(), (Shape{3, 3}));
  EXPECT_EQ(g32.shape(), (Shape{2, 2, 3}));
  auto a = eval(root, g64);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(vals<float>(*a), (std::vector<float>{30, 31, 32, 0, 1, 2, 30, 31, 32}));
  auto b = eval(root, g32);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(vals<float>(*b), (std::vector<float>{20, 21, 22, 10, 11, 12, 0, 1, 2, 20, 21, 22}));
}

TEST(OpsIndexingTest, GatherOutOfRangeIdIsAnErrorNamingTheOp) {
  for (int64_t bad : {4, -1, 1000000}) {
    Scope root = Scope::root();
    auto g = ops::gather(root.with_op_name("lookup"), ops::constant(root, table()),
                         ops::constant(root, Tensor::from_vector<int64_t>({0, bad}, {2})));
    auto r = eval(root, g);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("lookup"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("indices[1] = " + std::to_string(bad) + " is not in [0, 4)"), std::string::npos)
        << r.status();
  }
  Scope root = Scope::root();
  ops::gather(root, ops::constant(root, table()), ops::constant(root, Tensor::from_vector<float>({1.f}, {1})));
  EXPECT_FALSE(root.ok());  // float ids are refused when the graph is built
  EXPECT_NE(root.status().message().find("indices"), std::string::npos) << root.status();
}

TEST(OpsIndexingTest, GatherDropNegativesGivesZeroRows) {
  Scope root = Scope::root();
  auto g = ops::gather(root, ops::constant(root, table()), ops::constant(root, Tensor::from_vector<int32_t>({-1, 1}, {2})),
                       /*drop_negatives=*/true);
  auto r = eval(root, g);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(vals<float>(*r), (std::vector<float>{0, 0, 0, 10, 11, 12}));
}

TEST(OpsIndexingTest, UnsortedSegmentSumAddsRowsAndDropsNegativeIds) {
  Scope root = Scope::root();
  auto ids = ops::constant(root, Tensor::from_vector<int64_t>({2, 0, -1, 2}, {4}));
  auto s = ops::unsorted_segment_sum(root, ops::constant(root, table()), ids, int64_t{3});
  EXPECT_EQ(s.shape(), (Shape{3, 3}));
  auto r = eval(root, s);
  ASSERT_TRUE(r.ok()) << r.status();
  // segment 0 = row 1; segment 1 = nothing; segment 2 = rows 0 and 3; row 2 dropped.
  EXPECT_EQ(vals<float>(*r), (std::vector<float>{10, 11, 12, 0, 0, 0, 30, 32, 34}));
  // Element-wise ids over a [2, 2] int32 data tensor.
  Scope r2 = Scope::root();
  auto d = ops::constant(r2, Tensor::from_vector<int32_t>({1, 2, 3, 4}, {2, 2}));
  auto s2 = ops::unsorted_segment_sum(r2, d, ops::constant(r2, Tensor::from_vector<int32_t>({1, 1, 0, 1}, {2, 2})), int64_t{2});
  auto v = eval(r2, s2);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(vals<int32_t>(*v), (std::vector<int32_t>{3, 7}));
  // An id at or past num_segments fails the step naming the op.
  Scope r3 = Scope::root();
  auto s3 = ops::unsorted_segment_sum(r3.with_op_name("segsum"), ops::constant(r3, table()),
                                      ops::constant(r3, Tensor::from_vector<int64_t>({0, 1, 2, 3}, {4})), int64_t{3});
  auto e = eval(r3, s3);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("segsum"), std::string::npos) << e.status();
  EXPECT_NE(e.status().message().find("segment_ids[3] = 3 is not below num_segments 3"), std::string::npos) << e.status();
}

TEST(OpsIndexingTest, ConcatAlongEachAxis) {
  Scope root = Scope::root();
  auto a = ops::constant(root, Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}));
  auto b = ops::constant(root, Tensor::from_vector<float>({5, 6}, {1, 2}));
  auto c = ops::constant(root, Tensor::from_vector<float>({7, 8}, {2, 1}));
  auto rows = ops::concat(root, {a, b}, 0);
  auto cols = ops::concat(root, {a, c}, -1);
  EXPECT_EQ(rows.shape(), (Shape{3, 2}));
  EXPECT_EQ(cols.shape(), (Shape{2, 3}));
  auto r = eval(root, rows);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(vals<float>(*r), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  auto k = eval(root, cols);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(vals<float>(*k), (std::vector<float>{1, 2, 7, 3, 4, 8}));
  // Shapes that do not line up are refused when the graph is built, naming the value.
  Scope bad = Scope::root();
  ops::concat(bad, {ops::constant(bad, Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2})),
                    ops::constant(bad, Tensor::from_vector<float>({5, 6, 7}, {1, 3}))},
              0);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("values[1]"), std::string::npos) << bad.status();
  // ... and when they are known only at run time.
  Scope late = Scope::root();
  auto x = ops::placeholder(late, DType::kFloat32, Shape::unknown(), "x");
  auto y = ops::concat(late.with_op_name("cat"), {x, ops::constant(late, Tensor::from_vector<float>({1, 2}, {1, 2}))}, 0);
  auto e = eval(late, y, {{"x", Tensor::from_vector<float>({1, 2, 3}, {1, 3})}});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("cat"), std::string::npos) << e.status();
}

TEST(OpsIndexingTest, SliceTakesTheBoxAndChecksItFits) {
  Scope root = Scope::root();
  auto x = ops::constant(root, table());
  auto s = ops::slice(root, x, {1, 1}, {2, -1});
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  auto r = eval(root, s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(vals<float>(*r), (std::vector<float>{11, 12, 21, 22}));
  auto g = ops::slice_grad(root, s, x, {1, 1}, {2, -1});
  auto gr = eval(root, g);
  ASSERT_TRUE(gr.ok()) << gr.status();
  EXPECT_EQ(vals<float>(*gr), (std::vector<float>{0, 0, 0, 0, 11, 12, 0, 21, 22, 0, 0, 0}));
  Scope bad = Scope::root();
  ops::slice(bad, ops::constant(bad, table()), {3, 0}, {2, 3});
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("does not fit"), std::string::npos) << bad.status();
  Scope late = Scope::root();
  auto p = ops::placeholder(late, DType::kFloat32, Shape::unknown(), "p");
  auto e = eval(late, ops::slice(late.with_op_name("cut"), p, {0, 2}, {1, 2}), {{"p", table()}});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("cut"), std::string::npos) << e.status();
}

// A security review's attack: a 4-element tensor reshaped into [2^62+1, 4] (the element counts agreed
// modulo 2^64), then sliced. Refused by Reshape's shape function, and by its kernel when the
// input's shape is only known at run time; slice bounds whose sum overflows are refused too.
TEST(OpsIndexingTest, ReshapeIntoAWrappingShapeAndOverflowingSliceBoundsAreRefused) {
  const int64_t huge = (int64_t{1} << 62) + 1;
  const int64_t max = std::numeric_limits<int64_t>::max();
  Scope root = Scope::root();
  auto four = ops::constant(root, Tensor::from_vector<float>({1, 2, 3, 4}, {4}));
  ops::reshape(root.with_op_name("wrap"), four, {huge, 4});
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().code(), Code::kInvalidArgument);
  EXPECT_NE(root.status().message().find("Reshape 'wrap'"), std::string::npos) << root.status();

  Scope late = Scope::root();
  auto p = ops::placeholder(late, DType::kFloat32, Shape::unknown(), "p");
  auto r = eval(late, ops::slice(late, ops::reshape(late.with_op_name("wrap"), p, {huge, 4}), {huge - 1, 0}, {1, 4}),
                {{"p", Tensor::from_vector<float>({1, 2, 3, 4}, {4})}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("Reshape 'wrap'"), std::string::npos) << r.status();

  for (const auto& [begin, size] : std::vector<std::pair<int64_t, int64_t>>{{1, max}, {max, 1}, {2, max - 1}}) {
    Scope s = Scope::root();
    auto x = ops::placeholder(s, DType::kFloat32, Shape::unknown(), "x");
    auto e = eval(s, ops::slice(s.with_op_name("cut"), x, {0, begin}, {1, size}), {{"x", table()}});
    ASSERT_FALSE(e.ok()) << begin << " " << size;
    EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
    EXPECT_NE(e.status().message().find("Slice 'cut'"), std::string::npos) << e.status();
    Scope g = Scope::root();
    auto dy = ops::placeholder(g, DType::kFloat32, Shape::unknown(), "dy");
    auto xx = ops::placeholder(g, DType::kFloat32, Shape::unknown(), "x");
    auto eg = eval(g, ops::slice_grad(g.with_op_name("back"), dy, xx, {0, begin}, {1, size}),
                   {{"dy", Tensor::from_vector<float>({1}, {1, 1})}, {"x", table()}});
    ASSERT_FALSE(eg.ok());
    EXPECT_NE(eg.status().message().find("SliceGrad 'back'"), std::string::npos) << eg.status();
    // Statically known: the shape function refuses it.
    Scope st = Scope::root();
    ops::slice(st.with_op_name("cut"), ops::constant(st, table()), {0, begin}, {1, size});
    EXPECT_FALSE(st.ok());
  }
}

TEST(OpsIndexingTest, SigmoidTanhAndL2LossAgainstTheFormulas) {
  const std::vector<float> xs{-30.f, -2.f, -0.5f, 0.f, 0.5f, 2.f, 30.f};
  Scope root = Scope::root();
  auto x = ops::constant(root, Tensor::from_vector<float>(xs, {7}));
  auto sg = eval(root, ops::sigmoid(root, x));
  auto th = eval(root, ops::tanh(root, x));
  auto l2 = eval(root, ops::l2_loss(root, x));
  ASSERT_TRUE(sg.ok() && th.ok() && l2.ok());
  double sq = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(sg->data<float>()[i], 1.0 / (1.0 + std::exp(-static_cast<double>(xs[i]))), 1e-6) << xs[i];
    EXPECT_NEAR(th->data<float>()[i], std::tanh(static_cast<double>(xs[i])), 1e-6) << xs[i];
    sq += static_cast<double>(xs[i]) * xs[i];
  }
  EXPECT_EQ(l2->shape(), Shape{});
  EXPECT_NEAR(l2->data<float>()[0], sq / 2, 1e-3);
  Scope bad = Scope::root();
  ops::sigmoid(bad, ops::constant(bad, Tensor::from_vector<int32_t>({1}, {1})));
  EXPECT_FALSE(bad.ok());  // floating types only
}

TEST(OpsIndexingTest, SplitAndStack) {
  Scope root = Scope::root();
  auto x = ops::constant(root, table());  // [4, 3]
  auto rows = ops::split(root, x, 2, 0);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].shape(), (Shape{2, 3}));
  auto r1 = eval(root, rows[1]);
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(vals<float>(*r1), (std::vector<float>{20, 21, 22, 30, 31, 32}));
  auto cols = ops::split(root, x, 3, -1);
  auto c2 = eval(root, cols[2]);
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_EQ(c2->shape(), (Shape{4, 1}));
  EXPECT_EQ(vals<float>(*c2), (std::vector<float>{2, 12, 22, 32}));
  auto st = ops::stack(root, {rows[0], rows[1]}, 1);  // [2, 2, 3]
  EXPECT_EQ(st.shape(), (Shape{2, 2, 3}));
  auto sv = eval(root, st);
  ASSERT_TRUE(sv.ok()) << sv.status();
  EXPECT_EQ(vals<float>(*sv), (std::vector<float>{0, 1, 2, 20, 21, 22, 10, 11, 12, 30, 31, 32}));
  Scope bad = Scope::root();
  ops::split(bad, ops::constant(bad, table()), 3, 0);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("does not split into 3 equal parts"), std::string::npos) << bad.status();
}

TEST(OpsIndexingTest, DropoutIsSeededScaledAndFreshEachRun) {
  Tensor ones(DType::kFloat32, Shape{10000});
  for (int i = 0; i < 10000; ++i) ones.data<float>()[i] = 1.f;
  Scope root = Scope::root();
  auto y = ops::dropout(root, ops::constant(root, ones), 0.25, 42);
  auto r = eval(root, y);
  ASSERT_TRUE(r.ok()) << r.status();
  int kept = 0;
  for (float v : vals<float>(*r)) {
    ASSERT_TRUE(v == 0.f || std::fabs(v - 1.f / 0.75f) < 1e-6f) << v;
    kept += v != 0.f;
  }
  // 7500 expected; the binomial's standard deviation is about 43.
  EXPECT_NEAR(kept, 7500, 300);
  // The same seed gives the same first mask in another graph; another seed a different one.
  auto again = [&](int64_t seed) {
    Scope s2 = Scope::root();
    auto y2 = ops::dropout(s2, ops::constant(s2, ones), 0.25, seed);
    auto t = eval(s2, y2);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? vals<float>(*t) : std::vector<float>{};
  };
  EXPECT_EQ(again(42), vals<float>(*r));
  EXPECT_NE(again(43), vals<float>(*r));
  // One session runs the same node again: a new mask each run, the same sequence in a new session.
  auto server = testing::two_device_server();
  auto runs = [&](int n) {
    Scope s3 = Scope::root();
    auto y3 = ops::dropout(s3, ops::constant(s3, ones), 0.25, 42);
    Session sess(s3, server->target());
    std::vector<std::vector<float>> out;
    for (int i = 0; i < n; ++i) {
      auto t = sess.run({y3});
      EXPECT_TRUE(t.ok()) << t.status();
      if (t.ok()) out.push_back(vals<float>((*t)[0]));
    }
    return out;
  };
  auto first = runs(2), second = runs(2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_NE(first[0], first[1]);
  EXPECT_EQ(first, second);
  EXPECT_EQ(first[0], vals<float>(*r));
  Scope bad = Scope::root();
  ops::dropout(bad, ops::constant(bad, ones), 1.0, 1);
  EXPECT_FALSE(bad.ok());
}

TEST(OpsIndexingTest, SparseSoftmaxCrossEntropyMatchesTheDenseOp) {
  Scope root = Scope::root();
  auto logits = ops::constant(root, Tensor::from_vector<float>({1, 2, 3, 0.5f, -1, 4}, {2, 3}));
  auto sparse = ops::sparse_softmax_cross_entropy_with_logits(
      root, logits, ops::constant(root, Tensor::from_vector<int64_t>({2, 0}, {2})));
  auto dense = ops::softmax_cross_entropy_with_logits(
      root, logits, ops::constant(root, Tensor::from_vector<float>({0, 0, 1, 1, 0, 0}, {2, 3})));
  for (int o = 0; o < 2; ++o) {
    auto a = eval(root, sparse[static_cast<size_t>(o)]);
    auto b = eval(root, dense[static_cast<size_t>(o)]);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->shape(), b->shape());
    for (int64_t i = 0; i < a->num_elements(); ++i) EXPECT_NEAR(a->data<float>()[i], b->data<float>()[i], 1e-5) << o;
  }
  // loss[0] = log(e^1 + e^2 + e^3) - 3, by hand.
  auto l = eval(root, sparse[0]);
  EXPECT_NEAR(l->data<float>()[0], std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0, 1e-5);
  Scope bad = Scope::root();
  auto x = ops::sparse_softmax_cross_entropy_with_logits(
      bad.with_op_name("xent"), ops::constant(bad, Tensor::from_vector<float>({1, 2}, {1, 2})),
      ops::constant(bad, Tensor::from_vector<int32_t>({2}, {1})));
  auto e = eval(bad, x[0]);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("xent"), std::string::npos) << e.status();
  EXPECT_NE(e.status().message().find("labels[0] = 2 is not in [0, 2)"), std::string::npos) << e.status();
}

TEST(OpsIndexingTest, AvgPoolExcludesSamePadding) {
  // One 3x3 channel 1..9; 2x2 windows, stride 2.
  Scope root = Scope::root();
  auto x = ops::constant(root, Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 3, 3, 1}));
  auto valid = ops::avg_pool(root, x, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  auto same = ops::avg_pool(root, x, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");
  EXPECT_EQ(valid.shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(same.shape(), (Shape{1, 2, 2, 1}));
  auto v = eval(root, valid);
  auto s = eval(root, same);
  ASSERT_TRUE(v.ok() && s.ok());
  EXPECT_EQ(vals<float>(*v), (std::vector<float>{3}));  // (1+2+4+5)/4
  // SAME pads at the end only here: windows {1,2,4,5}, {3,6}, {7,8}, {9} averaged over what they cover.
  EXPECT_EQ(vals<float>(*s), (std::vector<float>{3, 4.5f, 7.5f, 9}));
  auto g = eval(root, ops::avg_pool_grad(root, x, ops::constant(root, Tensor::from_vector<float>({4, 2, 2, 1}, {1, 2, 2, 1})),
                                         {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(vals<float>(*g), (std::vector<float>{1, 1, 1, 1, 1, 1, 1, 1, 1}));
}

}  // namespace
}  // namespace actorflow
