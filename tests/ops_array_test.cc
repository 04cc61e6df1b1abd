// Array ops: Reshape, Shape, ZerosLike, OnesLike, Transpose, SumToShape, OneHot — values,
// inferred static shapes, and construction-time and run-time errors naming the op.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "device/executor.h"
#include "device/kernel.h"
#include "graph/ops.h"
#include "tests/util/eval.h"

namespace actorflow {
namespace {

using testing::cpu;
using testing::eval;
using testing::vals;

// Runs `o`, checks its run-time shape against `shape` and returns its values.
template <class T>
std::vector<T> run(const Scope& s, const Output& o, const Shape& shape,
                   const std::map<std::string, Tensor>& feeds = {}) {
  auto t = eval(s, o, feeds);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  EXPECT_EQ(t->dtype(), DTypeOf<T>::value);
  EXPECT_EQ(t->shape(), shape);
  if (t->dtype() != DTypeOf<T>::value) return {};
  return vals<T>(*t);
}

Tensor f32(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector<float>(v, s); }

std::vector<float> iota(int64_t n, float start = 1.f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<float>(i);
  return v;
}

void expect_error(const Scope& s, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(s.ok()) << "expected a construction error";
  for (const auto& p : parts) EXPECT_NE(s.status().message().find(p), std::string::npos) << s.status();
}

void expect_error(const Status& st, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(st.ok()) << "expected an error";
  for (const auto& p : parts) EXPECT_NE(st.message().find(p), std::string::npos) << st;
}

// ---- Reshape ---------------------------------------------------------------------------------

TEST(ArrayOps, Reshape) {
  Scope root = Scope::root();
  auto x = ops::constant(root, iota(6), {2, 3}, "x");
  auto r = ops::reshape(root, x, {3, 2});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_EQ(run<float>(root, r, {3, 2}), iota(6));
  auto flat = ops::reshape(root, x, {-1});
  EXPECT_EQ(flat.shape(), (Shape{6}));
  EXPECT_EQ(run<float>(root, flat, {6}), iota(6));
  auto r3 = ops::reshape(root, x, {1, -1, 2});
  EXPECT_EQ(r3.shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(run<float>(root, r3, {1, 3, 2}), iota(6));
  auto sc = ops::reshape(root, ops::constant(root, {5}, {1, 1}, "one"), {});
  EXPECT_EQ(sc.shape(), Shape{});
  EXPECT_EQ(run<float>(root, sc, {}), (std::vector<float>{5}));
  auto i = ops::constant(root, Tensor::from_vector<int32_t>({1, 2, 3, 4}, {4}), "i");
  EXPECT_EQ(run<int32_t>(root, ops::reshape(root, i, {2, 2}), {2, 2}), (std::vector<int32_t>{1, 2, 3, 4}));
}

TEST(ArrayOps, ReshapeUnknownBatch) {
  Scope root = Scope::root();
  auto p = ops::placeholder(root, DType::kFloat32, Shape{-1, 2, 2, 1}, "p");
  auto r = ops::reshape(root, p, {-1, 4});
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(r.shape(), (Shape{-1, 4}));
  EXPECT_EQ(run<float>(root, r, {3, 4}, {{"p", f32(iota(12), {3, 2, 2, 1})}}), iota(12));
  auto r2 = ops::reshape(root, p, {2, 2});  // fine statically; checked again at run time
  EXPECT_EQ(r2.shape(), (Shape{2, 2}));
  auto u = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "u");
  EXPECT_EQ(ops::reshape(root, u, {-1, 3}).shape(), (Shape{-1, 3}));
  ASSERT_TRUE(root.ok()) << root.status();
}

TEST(ArrayOps, ReshapeErrors) {
  {
    Scope root = Scope::root();
    auto x = ops::constant(root, iota(6), {2, 3}, "x");
    ops::reshape(root.with_op_name("r"), x, {4, 2});
    expect_error(root, {"Reshape 'r': cannot reshape [2,3] (6 elements) into [4,2] (8 elements)"});
  }
  {
    Scope root = Scope::root();
    auto x = ops::constant(root, iota(6), {2, 3}, "x");
    ops::reshape(root.with_op_name("r"), x, {4, -1});
    expect_error(root, {"Reshape 'r': cannot reshape [2,3] (6 elements) into [4,-1]"});
  }
  {
    Scope root = Scope::root();
    auto x = ops::constant(root, iota(6), {2, 3}, "x");
    ops::reshape(root.with_op_name("r"), x, {-1, -1});
    expect_error(root, {"Reshape 'r': target shape [-1,-1] has more than one -1"});
  }
  {
    Scope root = Scope::root();
    auto x = ops::constant(root, iota(6), {2, 3}, "x");
    ops::reshape(root.with_op_name("r"), x, {-2, 3});
    expect_error(root, {"Reshape 'r': target shape [-2,3] has a negative dimension"});
  }
  {
    Scope root = Scope::root();
    auto p = ops::placeholder(root, DType::kFloat32, Shape{-1, 3}, "p");
    ops::reshape(root.with_op_name("r"), p, {4});
    expect_error(root, {"Reshape 'r': cannot reshape [?,3] into [4] (4 elements is not a multiple of 3)"});
  }
  {
    // Run-time mismatch through a placeholder with an unknown batch dim.
    Scope root = Scope::root();
    auto p = ops::placeholder(root, DType::kFloat32, Shape{-1, 3}, "p");
    auto r = ops::reshape(root.with_op_name("r"), p, {4, -1});
    ASSERT_TRUE(root.ok()) << root.status();
    auto res = eval(root, r, {{"p", f32(iota(9), {3, 3})}});
    expect_error(res.status(), {"Reshape 'r': cannot reshape [3,3] (9 elements) into [4,-1]"});
    auto r2 = ops::reshape(root.with_op_name("r2"), p, {2, 3});
    auto res2 = eval(root, r2, {{"p", f32(iota(9), {3, 3})}});
    expect_error(res2.status(), {"Reshape 'r2': cannot reshape [3,3] (9 elements) into [2,3]"});
  }
}

// ---- Shape, ZerosLike, OnesLike --------------------------------------------------------------

TEST(ArrayOps, ShapeOf) {
  Scope root = Scope::root();
  auto x = ops::constant(root, iota(6), {2, 3}, "x");
  auto s = ops::shape_of(root, x);
  EXPECT_EQ(s.dtype(), DType::kInt64);
  EXPECT_EQ(s.shape(), (Shape{2}));
  EXPECT_EQ(run<int64_t>(root, s, {2}), (std::vector<int64_t>{2, 3}));
  auto p = ops::placeholder(root, DType::kFloat32, Shape{-1, 4}, "p");
  auto sp = ops::shape_of(root, p);
  EXPECT_EQ(sp.shape(), (Shape{2}));
  EXPECT_EQ(run<int64_t>(root, sp, {2}, {{"p", f32(iota(20), {5, 4})}}), (std::vector<int64_t>{5, 4}));
  auto u = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "u");
  EXPECT_EQ(ops::shape_of(root, u).shape(), (Shape{-1}));
  EXPECT_EQ(run<int64_t>(root, ops::shape_of(root, 1.f), {0}), (std::vector<int64_t>{}));
}

TEST(ArrayOps, ZerosAndOnesLike) {
  Scope root = Scope::root();
  auto x = ops::constant(root, iota(6), {2, 3}, "x");
  auto z = ops::zeros_like(root, x);
  auto o = ops::ones_like(root, x);
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(o.dtype(), DType::kFloat32);
  EXPECT_EQ(run<float>(root, z, {2, 3}), std::vector<float>(6, 0.f));
  EXPECT_EQ(run<float>(root, o, {2, 3}), std::vector<float>(6, 1.f));
  auto i = ops::constant(root, Tensor::from_vector<int64_t>({7, 8}, {2}), "i");
  EXPECT_EQ(run<int64_t>(root, ops::ones_like(root, i), {2}), (std::vector<int64_t>{1, 1}));
  auto b = ops::constant(root, Tensor::from_vector<bool>({false, true, false}, {3}), "b");
  EXPECT_EQ(run<bool>(root, ops::ones_like(root, b), {3}), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(run<bool>(root, ops::zeros_like(root, b), {3}), (std::vector<bool>{false, false, false}));
  auto p = ops::placeholder(root, DType::kFloat64, Shape{-1}, "p");
  auto zp = ops::zeros_like(root, p);
  EXPECT_EQ(zp.shape(), (Shape{-1}));
  EXPECT_EQ(run<double>(root, zp, {3}, {{"p", Tensor::from_vector<double>({1, 2, 3}, {3})}}),
            (std::vector<double>{0, 0, 0}));
}

// ---- Transpose -------------------------------------------------------------------------------

TEST(ArrayOps, Transpose2D) {
  Scope root = Scope::root();
  auto x = ops::constant(root, iota(6), {2, 3}, "x");
  auto t = ops::transpose(root, x, {1, 0});
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(run<float>(root, t, {3, 2}), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(run<float>(root, ops::transpose(root, x, {0, 1}), {2, 3}), iota(6));
  auto i = ops::constant(root, Tensor::from_vector<int64_t>({1, 2, 3, 4}, {2, 2}), "i");
  EXPECT_EQ(run<int64_t>(root, ops::transpose(root, i, {1, 0}), {2, 2}), (std::vector<int64_t>{1, 3, 2, 4}));
  auto b = ops::constant(root, Tensor::from_vector<bool>({true, false, false, false}, {1, 4}), "b");
  EXPECT_EQ(run<bool>(root, ops::transpose(root, b, {1, 0}), {4, 1}), (std::vector<bool>{true, false, false, false}));
}

// Naive reference permutation.
std::vector<float> reference_transpose(const std::vector<float>& x, const Shape& s, const std::vector<int64_t>& perm) {
  const int r = s.rank();
  std::vector<int64_t> od(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) od[static_cast<size_t>(i)] = s.dim(static_cast<int>(perm[static_cast<size_t>(i)]));
  std::vector<float> out(x.size());
  std::vector<int64_t> oi(static_cast<size_t>(r)), ii(static_cast<size_t>(r));
  for (size_t k = 0; k < x.size(); ++k) {
    int64_t rem = static_cast<int64_t>(k);
    for (int i = r - 1; i >= 0; --i) {
      oi[static_cast<size_t>(i)] = rem % od[static_cast<size_t>(i)];
      rem /= od[static_cast<size_t>(i)];
    }
    for (int i = 0; i < r; ++i) ii[static_cast<size_t>(perm[static_cast<size_t>(i)])] = oi[static_cast<size_t>(i)];
    int64_t off = 0;
    for (int i = 0; i < r; ++i) off = off * s.dim(i) + ii[static_cast<size_t>(i)];
    out[k] = x[static_cast<size_t>(off)];
  }
  return out;
}

TEST(ArrayOps, TransposeEveryPermutationMatchesReference) {
  for (const Shape& s : {Shape{2, 3, 4, 5}, Shape{3, 1, 4, 2}, Shape{40, 1, 33, 2}}) {
    std::vector<int64_t> perm = {0, 1, 2, 3};
    const auto v = iota(s.num_elements());
    do {
      Scope root = Scope::root();
      auto x = ops::constant(root, v, s, "x");
      auto t = ops::transpose(root, x, perm);
      ASSERT_TRUE(root.ok()) << root.status();
      std::vector<int64_t> od;
      for (int64_t p : perm) od.push_back(s.dim(static_cast<int>(p)));
      EXPECT_EQ(t.shape(), Shape(od));
      EXPECT_EQ(run<float>(root, t, Shape(od)), reference_transpose(v, s, perm))
          << s.to_string() << " perm " << perm[0] << perm[1] << perm[2] << perm[3];
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}

TEST(ArrayOps, TransposeLargeTiled) {
  // 70 x 45: many 8x8 tiles with ragged edges.
  Scope root = Scope::root();
  const Shape s{70, 45};
  const auto v = iota(s.num_elements());
  auto x = ops::constant(root, v, s, "x");
  EXPECT_EQ(run<float>(root, ops::transpose(root, x, {1, 0}), {45, 70}), reference_transpose(v, s, {1, 0}));
}

TEST(ArrayOps, TransposeShapesAndErrors) {
  Scope root = Scope::root();
  auto p = ops::placeholder(root, DType::kFloat32, Shape{-1, 3, 5}, "p");
  EXPECT_EQ(ops::transpose(root, p, {2, 0, 1}).shape(), (Shape{5, -1, 3}));
  auto u = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "u");
  auto tu = ops::transpose(root.with_op_name("tu"), u, {1, 0});
  EXPECT_EQ(tu.shape(), (Shape{-1, -1}));
  ASSERT_TRUE(root.ok()) << root.status();
  auto r = eval(root, tu, {{"u", f32(iota(8), {2, 2, 2})}});
  expect_error(r.status(), {"Transpose 'tu': perm [1,0] has 2 entries but the input [2,2,2] has rank 3"});
  {
    Scope s = Scope::root();
    auto x = ops::constant(s, iota(6), {2, 3}, "x");
    ops::transpose(s.with_op_name("t"), x, {0, 0});
    expect_error(s, {"Transpose 't': perm [0,0] is not a permutation of 0..1"});
  }
  {
    Scope s = Scope::root();
    auto x = ops::constant(s, iota(6), {2, 3}, "x");
    ops::transpose(s.with_op_name("t"), x, {1, 0, 2});
    expect_error(s, {"Transpose 't': perm [1,0,2] has 3 entries but the input has rank 2"});
  }
}

// ---- SumToShape ------------------------------------------------------------------------------

TEST(ArrayOps, SumToShape) {
  Scope root = Scope::root();
  auto x = ops::constant(root, iota(6), {2, 3}, "x");  // [[1,2,3],[4,5,6]]
  struct Case { Shape like; std::vector<float> want; };
  const std::vector<Case> cases = {
      {{3}, {5, 7, 9}},  {{1, 3}, {5, 7, 9}}, {{2, 1}, {6, 15}}, {{}, {21}},
      {{1, 1}, {21}},    {{2, 3}, iota(6)},   {{1}, {21}},       {{1, 2, 3}, iota(6)},
  };
  for (const auto& c : cases) {
    auto like = ops::zeros_like(root, ops::constant(root, std::vector<float>(static_cast<size_t>(c.like.num_elements()), 0.f),
                                                    c.like, "like"));
    auto s = ops::sum_to_shape_of(root, x, like);
    ASSERT_TRUE(root.ok()) << root.status();
    EXPECT_EQ(s.shape(), c.like);
    EXPECT_EQ(run<float>(root, s, c.like), c.want) << c.like.to_string();
  }
  // A gradient-like use: [4,2,3] summed to [2,1] (leading axis and a stretched axis).
  auto g = ops::constant(root, iota(24), {4, 2, 3}, "g");
  auto like = ops::constant(root, {0, 0}, {2, 1}, "l21");
  // row sums: sum over b of (1..3 + 6b) and (4..6 + 6b) for b = 0..3.
  EXPECT_EQ(run<float>(root, ops::sum_to_shape_of(root, g, like), {2, 1}), (std::vector<float>{6 * 4 + 3 * 36,
                                                                                             15 * 4 + 3 * 36}));
  auto i = ops::constant(root, Tensor::from_vector<int32_t>({1, 2, 3, 4}, {2, 2}), "i");
  EXPECT_EQ(run<int32_t>(root, ops::sum_to_shape_of(root, i, ops::constant(root, {0, 0}, {2}, "l2")), {2}),
            (std::vector<int32_t>{4, 6}));
}

TEST(ArrayOps, SumToShapeUnknownStatically) {
  Scope root = Scope::root();
  auto g = ops::placeholder(root, DType::kFloat32, Shape{-1, 3}, "g");
  auto like = ops::placeholder(root, DType::kFloat32, Shape{3}, "like");
  auto s = ops::sum_to_shape_of(root.with_op_name("s"), g, like);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_EQ(run<float>(root, s, {3}, {{"g", f32(iota(6), {2, 3})}, {"like", f32({0, 0, 0}, {3})}}),
            (std::vector<float>{5, 7, 9}));
  auto like_u = ops::placeholder(root, DType::kFloat32, Shape{-1, 1}, "like_u");
  auto s2 = ops::sum_to_shape_of(root.with_op_name("s2"), g, like_u);
  EXPECT_EQ(s2.shape(), (Shape{-1, 1}));
  EXPECT_EQ(run<float>(root, s2, {2, 1}, {{"g", f32(iota(6), {2, 3})}, {"like_u", f32({0, 0}, {2, 1})}}),
            (std::vector<float>{6, 15}));
  // Run-time mismatch.
  auto gu = ops::placeholder(root, DType::kFloat32, Shape{-1, -1}, "gu");
  auto s3 = ops::sum_to_shape_of(root.with_op_name("s3"), gu, like);
  ASSERT_TRUE(root.ok()) << root.status();
  auto r = eval(root, s3, {{"gu", f32(iota(8), {2, 4})}, {"like", f32({0, 0, 0}, {3})}});
  expect_error(r.status(), {"SumToShape 's3': cannot sum [2,4] down to shape [3]"});
}

TEST(ArrayOps, SumToShapeErrors) {
  {
    Scope root = Scope::root();
    auto x = ops::constant(root, iota(6), {2, 3}, "x");
    auto like = ops::constant(root, iota(4), {4}, "like");
    ops::sum_to_shape_of(root.with_op_name("s"), x, like);
    expect_error(root, {"SumToShape 's': cannot sum [2,3] down to shape [4]"});
  }
  {
    Scope root = Scope::root();
    auto x = ops::constant(root, iota(3), {3}, "x");
    auto like = ops::constant(root, iota(6), {2, 3}, "like");
    ops::sum_to_shape_of(root.with_op_name("s"), x, like);
    expect_error(root, {"SumToShape 's': cannot sum [3] down to shape [2,3]"});
  }
  {
    Scope root = Scope::root();
    auto b = ops::constant(root, Tensor::from_vector<bool>({true}, {1}), "b");
    ops::sum_to_shape_of(root.with_op_name("s"), b, b);
    expect_error(root, {"SumToShape 's': unsupported dtype bool"});
  }
}

// ---- OneHot ----------------------------------------------------------------------------------

TEST(ArrayOps, OneHot) {
  Scope root = Scope::root();
  auto idx = ops::constant(root, Tensor::from_vector<int32_t>({0, 2, -1, 5}, {4}), "idx");
  auto oh = ops::one_hot(root, idx, 3);
  EXPECT_EQ(oh.dtype(), DType::kFloat32);
  EXPECT_EQ(oh.shape(), (Shape{4, 3}));
  EXPECT_EQ(run<float>(root, oh, {4, 3}), (std::vector<float>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}));
  auto idx64 = ops::constant(root, Tensor::from_vector<int64_t>({1, 0}, {2, 1}), "idx64");
  auto oh2 = ops::one_hot(root, idx64, 2, 5.f, -1.f);
  EXPECT_EQ(oh2.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(run<float>(root, oh2, {2, 1, 2}), (std::vector<float>{-1, 5, 5, -1}));
  auto p = ops::placeholder(root, DType::kInt64, Shape{-1}, "p");
  auto oh3 = ops::one_hot(root, p, 10);
  EXPECT_EQ(oh3.shape(), (Shape{-1, 10}));
  auto v = run<float>(root, oh3, {2, 10}, {{"p", Tensor::from_vector<int64_t>({9, 3}, {2})}});
  ASSERT_EQ(v.size(), 20u);
  EXPECT_EQ(std::accumulate(v.begin(), v.end(), 0.f), 2.f);
  EXPECT_EQ(v[9], 1.f);
  EXPECT_EQ(v[13], 1.f);
  ASSERT_TRUE(root.ok()) << root.status();
}

TEST(ArrayOps, OneHotErrors) {
  {
    Scope root = Scope::root();
    auto f = ops::constant(root, {1}, {1}, "f");
    ops::one_hot(root.with_op_name("oh"), f, 3);
    expect_error(root, {"OneHot 'oh': unsupported dtype float32 for indices (expects int32 or int64)"});
  }
  {
    Scope root = Scope::root();
    auto i = ops::constant(root, Tensor::from_vector<int32_t>({1}, {1}), "i");
    ops::one_hot(root.with_op_name("oh"), i, -2);
    expect_error(root, {"OneHot 'oh': depth must be >= 0, got -2"});
  }
}

// Output sizes a peer picks (OneHot's depth here) are capped by max_output_bytes(): refused with
// ResourceExhausted naming the op before anything is allocated; under the cap the same op runs.
TEST(ArrayOps, OutputsOverTheCapAreRefusedNamingTheOp) {
  Scope root = Scope::root();
  auto i = ops::constant(root, Tensor::from_vector<int32_t>({1, 0}, {2}), "i");
  auto huge = ops::one_hot(root.with_op_name("huge"), i, int64_t{1} << 40);  // 8 TiB of float32
  auto small = ops::one_hot(root.with_op_name("small"), i, 3);
  ASSERT_TRUE(root.ok()) << root.status();
  auto r = eval(root, huge);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kResourceExhausted) << r.status();
  EXPECT_NE(r.status().message().find("OneHot 'huge'"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("max_output_bytes"), std::string::npos) << r.status();
  set_max_output_bytes(16);  // 2 x 3 float32 = 24 bytes: over
  auto capped = eval(root, small);
  set_max_output_bytes(0);
  ASSERT_FALSE(capped.ok());
  EXPECT_EQ(capped.status().code(), Code::kResourceExhausted) << capped.status();
  auto ok = eval(root, small);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(vals<float>(*ok), (std::vector<float>{0, 1, 0, 1, 0, 0}));
}

}  // namespace
}  // namespace actorflow
