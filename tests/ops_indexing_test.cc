// Indexing and activation ops (graph/ops_indexing.cc): Gather/embedding_lookup,
// UnsortedSegmentSum, Concat, Slice, Sigmoid, Tanh, L2Loss — hand-computed values, inferred static
// shapes, and construction-time and run-time errors naming the op. Gradients are checked by
// finite differences in tests/gradients_test.cc.
#include <gtest/gtest.h>

#include <cmath>

#include "device/executor.h"
#include "graph/ops.h"

namespace actorflow {
namespace {

Device* cpu() {
  static auto dev = make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0);
  return dev.get();
}

Result<Tensor> eval(const Scope& s, const Output& o, const std::map<std::string, Tensor>& feeds = {}) {
  if (!s.ok()) return s.status();
  auto r = run_local(*s.graph(), {o.name()}, feeds, cpu());
  if (!r.ok()) return r.status();
  return (*r)[0];
}

template <class T>
std::vector<T> vals(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.num_elements());
}

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
  auto g = ops::gather(root, ops::constant(root, table()), ops::constant(root, Tensor::from_vector<float>({1.f}, {1})));
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

}  // namespace
}  // namespace actorflow
