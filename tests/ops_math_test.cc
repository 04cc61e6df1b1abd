// Elementwise math, reductions and ArgMax: values against hand-computed results (and naive
// reference loops for the strided broadcast/reduction paths), inferred static shapes, and
// every construction-time and run-time error with the op type and name in the message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "device/executor.h"
#include "device/functors.h"
#include "graph/ops.h"
#include "tests/util/eval.h"

namespace actorflow {
namespace {

using testing::cpu;
using testing::eval;
using testing::vals;

// The value of `o` as a vector of T; fails the test (returning {}) on error or wrong dtype.
template <class T>
std::vector<T> run(const Scope& s, const Output& o, const std::map<std::string, Tensor>& feeds = {}) {
  auto t = eval(s, o, feeds);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  EXPECT_EQ(t->dtype(), DTypeOf<T>::value);
  if (t->dtype() != DTypeOf<T>::value) return {};
  return vals<T>(*t);
}

Tensor f32(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector<float>(v, s); }
Tensor i32(const std::vector<int32_t>& v, const Shape& s) { return Tensor::from_vector<int32_t>(v, s); }

// Expects the scope to have failed with a message containing each of `parts`.
void expect_error(const Scope& s, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(s.ok()) << "expected a construction error";
  for (const auto& p : parts) EXPECT_NE(s.status().message().find(p), std::string::npos) << s.status();
}

void expect_error(const Status& st, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(st.ok()) << "expected an error";
  for (const auto& p : parts) EXPECT_NE(st.message().find(p), std::string::npos) << st;
}

// ---- binary ops ------------------------------------------------------------------------------

TEST(MathOps, AddBroadcastRowVector) {
  Scope root = Scope::root();
  auto a = ops::constant(root, {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
  auto b = ops::constant(root, {10, 20, 30}, {3}, "b");
  auto c = ops::add(root.with_op_name("c"), a, b);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(c.shape(), (Shape{2, 3}));
  EXPECT_EQ(run<float>(root, c), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  auto d = ops::add(root, b, a);  // commuted: broadcast on the left
  EXPECT_EQ(run<float>(root, d), (std::vector<float>{11, 22, 33, 14, 25, 36}));
}

TEST(MathOps, MulOuterBroadcast) {
  Scope root = Scope::root();
  auto a = ops::constant(root, {1, 2}, {2, 1}, "a");
  auto b = ops::constant(root, {10, 20, 30}, {1, 3}, "b");
  auto c = ops::mul(root, a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3}));
  EXPECT_EQ(run<float>(root, c), (std::vector<float>{10, 20, 30, 20, 40, 60}));
}

TEST(MathOps, ScalarOperands) {
  Scope root = Scope::root();
  auto x = ops::constant(root, {1, 2, 4, 8}, {2, 2}, "x");
  EXPECT_EQ(run<float>(root, ops::add(root, 100.f, x)), (std::vector<float>{101, 102, 104, 108}));
  EXPECT_EQ(run<float>(root, ops::sub(root, x, 1.f)), (std::vector<float>{0, 1, 3, 7}));
  EXPECT_EQ(run<float>(root, ops::sub(root, 1.f, x)), (std::vector<float>{0, -1, -3, -7}));
  EXPECT_EQ(run<float>(root, ops::div(root, 1.f, x)), (std::vector<float>{1, 0.5f, 0.25f, 0.125f}));
  EXPECT_EQ(run<float>(root, ops::div(root, x, 2.f)), (std::vector<float>{0.5f, 1, 2, 4}));
  EXPECT_EQ(run<float>(root, ops::maximum(root, x, 3.f)), (std::vector<float>{3, 3, 4, 8}));
  auto s = ops::mul(root, 3.f, 4.f);  // scalar * scalar
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(run<float>(root, s), (std::vector<float>{12}));
  // [1,1] with a scalar: every output dim is 1.
  auto one = ops::constant(root, {5}, {1, 1}, "one");
  auto t = ops::add(root, one, 2.f);
  EXPECT_EQ(t.shape(), (Shape{1, 1}));
  EXPECT_EQ(run<float>(root, t), (std::vector<float>{7}));
}

TEST(MathOps, LongVectorsUseBlocksAndTail) {
  // 100 elements: three full blocks of 32 plus a tail of 4, for each fast path.
  Scope root = Scope::root();
  std::vector<float> av(100), bv(100);
  for (int i = 0; i < 100; ++i) {
    av[static_cast<size_t>(i)] = static_cast<float>(i);
    bv[static_cast<size_t>(i)] = static_cast<float>(2 * i + 1);
  }
  auto a = ops::constant(root, av, {100}, "a");
  auto b = ops::constant(root, bv, {100}, "b");
  auto same = run<float>(root, ops::sub(root, b, a));
  auto left = run<float>(root, ops::mul(root, 2.f, a));
  auto right = run<float>(root, ops::maximum(root, a, 50.f));
  ASSERT_EQ(same.size(), 100u);
  ASSERT_EQ(left.size(), 100u);
  ASSERT_EQ(right.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(same[static_cast<size_t>(i)], static_cast<float>(i + 1));
    EXPECT_EQ(left[static_cast<size_t>(i)], static_cast<float>(2 * i));
    EXPECT_EQ(right[static_cast<size_t>(i)], static_cast<float>(std::max(i, 50)));
  }
}

TEST(MathOps, Maximum) {
  Scope root = Scope::root();
  auto a = ops::constant(root, {1, 5, -2, 0}, {4}, "a");
  auto b = ops::constant(root, {3, 2, -2, std::nanf("")}, {4}, "b");
  auto m = run<float>(root, ops::maximum(root, a, b));
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0], 3);
  EXPECT_EQ(m[1], 5);
  EXPECT_EQ(m[2], -2);
  EXPECT_TRUE(std::isnan(m[3]));  // NaN propagates
  auto m2 = run<float>(root, ops::maximum(root, b, a));
  ASSERT_EQ(m2.size(), 4u);
  EXPECT_TRUE(std::isnan(m2[3]));
}

TEST(MathOps, IntegerAndDoubleTypes) {
  Scope root = Scope::root();
  auto a = ops::constant(root, i32({7, -7, 6, 9}, {4}), "a");
  auto b = ops::constant(root, i32({2, 2, -4, 3}, {4}), "b");
  EXPECT_EQ(run<int32_t>(root, ops::div(root, a, b)), (std::vector<int32_t>{3, -3, -1, 3}));  // truncation
  EXPECT_EQ(run<int32_t>(root, ops::add(root, a, b)), (std::vector<int32_t>{9, -5, 2, 12}));
  EXPECT_EQ(run<int32_t>(root, ops::sub(root, a, b)), (std::vector<int32_t>{5, -9, 10, 6}));
  EXPECT_EQ(run<int32_t>(root, ops::mul(root, a, 3)), (std::vector<int32_t>{21, -21, 18, 27}));
  EXPECT_EQ(run<int32_t>(root, ops::maximum(root, a, b)), (std::vector<int32_t>{7, 2, 6, 9}));
  auto big = ops::constant(root, Tensor::from_vector<int64_t>({int64_t{1} << 40, -3}, {2}), "big");
  // The int32 literal 2 is converted to int64 to match (as TensorFlow converts literals).
  EXPECT_EQ(run<int64_t>(root, ops::mul(root, big, 2)), (std::vector<int64_t>{int64_t{1} << 41, -6}));
  auto d = ops::constant(root, Tensor::from_vector<double>({0.1, 0.2}, {2}), "d");
  auto dd = run<double>(root, ops::add(root, d, d));
  ASSERT_EQ(dd.size(), 2u);
  EXPECT_DOUBLE_EQ(dd[0], 0.2);
  EXPECT_DOUBLE_EQ(dd[1], 0.4);
  // INT_MIN / -1 must not trap.
  auto mn = ops::constant(root, i32({std::numeric_limits<int32_t>::min()}, {1}), "mn");
  EXPECT_EQ(run<int32_t>(root, ops::div(root, mn, -1)), (std::vector<int32_t>{std::numeric_limits<int32_t>::min()}));
}

TEST(MathOps, IntegerDivisionByZeroIsAnError) {
  Scope root = Scope::root();
  auto a = ops::constant(root, i32({1, 2}, {2}), "a");
  auto b = ops::constant(root, i32({1, 0}, {2}), "b");
  auto q = ops::div(root.with_op_name("q"), a, b);
  auto r = eval(root, q);
  expect_error(r.status(), {"Div 'q'", "integer division by zero"});
  // Floating division by zero follows IEEE.
  auto f = run<float>(root, ops::div(root, 1.f, ops::constant(root, {0}, {1}, "z")));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_TRUE(std::isinf(f[0]));
}

// Naive reference for a broadcasting binary op over fully known shapes.
std::vector<float> reference_broadcast(const std::vector<float>& a, const Shape& sa, const std::vector<float>& b,
                                       const Shape& sb, const Shape& out, const std::function<float(float, float)>& f) {
  const int r = out.rank();
  std::vector<float> o(static_cast<size_t>(out.num_elements()));
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  auto offset = [&](const Shape& s) {
    int64_t off = 0;
    for (int i = 0; i < s.rank(); ++i) {
      const int64_t oi = idx[static_cast<size_t>(r - s.rank() + i)];
      off = off * s.dim(i) + (s.dim(i) == 1 ? 0 : oi);
    }
    return off;
  };
  for (int64_t k = 0; k < out.num_elements(); ++k) {
    int64_t rem = k;
    for (int i = r - 1; i >= 0; --i) {
      idx[static_cast<size_t>(i)] = rem % out.dim(i);
      rem /= out.dim(i);
    }
    o[static_cast<size_t>(k)] = f(a[static_cast<size_t>(offset(sa))], b[static_cast<size_t>(offset(sb))]);
  }
  return o;
}

std::vector<float> iota(int64_t n, float start = 1.f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<float>(i);
  return v;
}

TEST(MathOps, GeneralBroadcastMatchesReference) {
  struct Case { Shape a, b, out; };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {3, 1}, {2, 3, 4}},       {{1, 3, 1}, {2, 1, 5}, {2, 3, 5}},
      {{4, 1, 3}, {4, 5, 1}, {4, 5, 3}},    {{2, 3, 4, 5}, {3, 1, 5}, {2, 3, 4, 5}},
      {{5}, {3, 1}, {3, 5}},                {{1}, {2, 2}, {2, 2}},
      {{2, 1, 2, 1}, {1, 3, 1, 40}, {2, 3, 2, 40}}, {{2, 2, 2}, {}, {2, 2, 2}},
      {{3, 1, 1}, {1, 1, 1}, {3, 1, 1}},    {{2, 37}, {2, 1}, {2, 37}},
  };
  for (const auto& c : cases) {
    Scope root = Scope::root();
    auto va = iota(c.a.num_elements());
    auto vb = iota(c.b.num_elements(), 100.f);
    auto a = ops::constant(root, va, c.a, "a");
    auto b = ops::constant(root, vb, c.b, "b");
    auto s = ops::sub(root, a, b);
    auto m = ops::mul(root, a, b);
    ASSERT_TRUE(root.ok()) << root.status();
    EXPECT_EQ(s.shape(), c.out) << c.a.to_string() << " - " << c.b.to_string();
    EXPECT_EQ(run<float>(root, s), reference_broadcast(va, c.a, vb, c.b, c.out, std::minus<float>()))
        << c.a.to_string() << " - " << c.b.to_string();
    EXPECT_EQ(run<float>(root, m), reference_broadcast(va, c.a, vb, c.b, c.out, std::multiplies<float>()))
        << c.a.to_string() << " * " << c.b.to_string();
  }
}

TEST(MathOps, EmptyTensors) {
  Scope root = Scope::root();
  auto a = ops::placeholder(root, DType::kFloat32, Shape{-1, 3}, "a");
  auto b = ops::constant(root, {1, 2, 3}, {3}, "b");
  auto c = ops::add(root, a, b);
  auto t = eval(root, c, {{"a", f32({}, {0, 3})}});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape(), (Shape{0, 3}));
}

TEST(MathOps, BinaryStaticShapes) {
  Scope root = Scope::root();
  auto p23 = ops::placeholder(root, DType::kFloat32, Shape{2, 3}, "p23");
  auto pq3 = ops::placeholder(root, DType::kFloat32, Shape{-1, 3}, "pq3");
  auto pq1 = ops::placeholder(root, DType::kFloat32, Shape{-1, 1}, "pq1");
  auto p14 = ops::placeholder(root, DType::kFloat32, Shape{1, 4}, "p14");
  auto p21 = ops::placeholder(root, DType::kFloat32, Shape{2, 1}, "p21");
  auto pq = ops::placeholder(root, DType::kFloat32, Shape{-1}, "pq");
  auto pu = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "pu");
  auto p3 = ops::placeholder(root, DType::kFloat32, Shape{3}, "p3");
  EXPECT_EQ(ops::add(root, p23, p3).shape(), (Shape{2, 3}));
  EXPECT_EQ(ops::add(root, pq3, p3).shape(), (Shape{-1, 3}));
  EXPECT_EQ(ops::mul(root, pq1, p14).shape(), (Shape{-1, 4}));
  EXPECT_EQ(ops::sub(root, p21, pq).shape(), (Shape{2, -1}));
  EXPECT_EQ(ops::div(root, pq, p23).shape(), (Shape{2, 3}));  // ? against 3 must be 3 (or 1)
  EXPECT_EQ(ops::maximum(root, pu, p23).shape(), Shape::unknown());
  EXPECT_EQ(ops::add(root, 1.f, p23).shape(), (Shape{2, 3}));
  auto eq = ops::equal(root, pq3, p3);
  EXPECT_EQ(eq.dtype(), DType::kBool);
  EXPECT_EQ(eq.shape(), (Shape{-1, 3}));
  auto gt = ops::greater(root, p21, p14);
  EXPECT_EQ(gt.dtype(), DType::kBool);
  EXPECT_EQ(gt.shape(), (Shape{2, 4}));
  EXPECT_EQ(ops::add(root, p23, p23).dtype(), DType::kFloat32);
  ASSERT_TRUE(root.ok()) << root.status();
}

TEST(MathOps, BinaryDtypeMismatch) {
  Scope root = Scope::root();
  auto a = ops::constant(root, {1, 2}, {2}, "a");
  auto b = ops::constant(root, i32({1, 2}, {2}), "b");
  auto c = ops::add(root.with_op_name("add"), a, b);
  EXPECT_FALSE(c.valid());
  expect_error(root, {"Add 'add': dtype mismatch float32 vs int32"});
}

TEST(MathOps, BinaryIncompatibleShapes) {
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Maximum", "Equal", "Greater"}) {
    Scope root = Scope::root();
    auto a = ops::constant(root, iota(6), {2, 3}, "a");
    auto b = ops::constant(root, iota(4), {4}, "b");
    Scope s = root.with_op_name("x");
    std::string o = op;
    if (o == "Add") ops::add(s, a, b);
    else if (o == "Sub") ops::sub(s, a, b);
    else if (o == "Mul") ops::mul(s, a, b);
    else if (o == "Div") ops::div(s, a, b);
    else if (o == "Maximum") ops::maximum(s, a, b);
    else if (o == "Equal") ops::equal(s, a, b);
    else ops::greater(s, a, b);
    expect_error(root, {o + " 'x': incompatible shapes [2,3] and [4]"});
  }
}

TEST(MathOps, BinaryUnsupportedDtype) {
  Scope root = Scope::root();
  auto t = ops::constant(root, Tensor::scalar<bool>(true), "t");
  ops::add(root.with_op_name("bad_add"), t, t);
  expect_error(root, {"Add 'bad_add'", "unsupported dtype bool"});
  Scope root2 = Scope::root();
  auto t2 = ops::constant(root2, Tensor::scalar<bool>(true), "t");
  ops::greater(root2.with_op_name("g"), t2, t2);
  expect_error(root2, {"Greater 'g'", "unsupported dtype bool"});
}

TEST(MathOps, RunTimeBroadcastMismatch) {
  Scope root = Scope::root();
  auto a = ops::placeholder(root, DType::kFloat32, Shape{-1, 3}, "a");
  auto b = ops::placeholder(root, DType::kFloat32, Shape{-1, 3}, "b");
  auto c = ops::add(root.with_op_name("add"), a, b);
  ASSERT_TRUE(root.ok()) << root.status();
  auto ok = run<float>(root, c, {{"a", f32(iota(6), {2, 3})}, {"b", f32(iota(3), {1, 3})}});
  EXPECT_EQ(ok, (std::vector<float>{2, 4, 6, 5, 7, 9}));
  auto r = eval(root, c, {{"a", f32(iota(6), {2, 3})}, {"b", f32(iota(12), {4, 3})}});
  expect_error(r.status(), {"Add 'add': incompatible shapes [2,3] and [4,3]"});
}

// ---- unary ops -----------------------------------------------------------------------------

TEST(MathOps, UnaryValues) {
  Scope root = Scope::root();
  auto x = ops::constant(root, {1, 4, 0.25f, 9}, {2, 2}, "x");
  EXPECT_EQ(run<float>(root, ops::neg(root, x)), (std::vector<float>{-1, -4, -0.25f, -9}));
  EXPECT_EQ(run<float>(root, ops::square(root, x)), (std::vector<float>{1, 16, 0.0625f, 81}));
  EXPECT_EQ(run<float>(root, ops::sqrt(root, x)), (std::vector<float>{1, 2, 0.5f, 3}));
  auto lg = run<float>(root, ops::log(root, x));
  auto ex = run<float>(root, ops::exp(root, x));
  ASSERT_EQ(lg.size(), 4u);
  ASSERT_EQ(ex.size(), 4u);
  const float in[4] = {1, 4, 0.25f, 9};
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(lg[static_cast<size_t>(i)], std::log(in[i]));
    EXPECT_FLOAT_EQ(ex[static_cast<size_t>(i)], std::exp(in[i]));
  }
  EXPECT_FLOAT_EQ(run<float>(root, ops::log(root, 1.f))[0], 0.f);
  auto special = run<float>(root, ops::log(root, ops::constant(root, {0, -1}, {2}, "sp")));
  ASSERT_EQ(special.size(), 2u);
  EXPECT_TRUE(std::isinf(special[0]) && special[0] < 0);
  EXPECT_TRUE(std::isnan(special[1]));
  auto i = ops::constant(root, i32({3, -4}, {2}), "i");
  EXPECT_EQ(run<int32_t>(root, ops::neg(root, i)), (std::vector<int32_t>{-3, 4}));
  EXPECT_EQ(run<int32_t>(root, ops::square(root, i)), (std::vector<int32_t>{9, 16}));
  auto d = ops::constant(root, Tensor::from_vector<double>({2.0}, {1}), "d");
  EXPECT_DOUBLE_EQ(run<double>(root, ops::sqrt(root, d))[0], std::sqrt(2.0));
  EXPECT_EQ(ops::exp(root, x).shape(), (Shape{2, 2}));
  auto pq = ops::placeholder(root, DType::kFloat32, Shape{-1, 5}, "pq");
  EXPECT_EQ(ops::neg(root, pq).shape(), (Shape{-1, 5}));
  ASSERT_TRUE(root.ok()) << root.status();
}

TEST(MathOps, UnaryBadDtype) {
  Scope root = Scope::root();
  auto i = ops::constant(root, i32({1}, {1}), "i");
  ops::log(root.with_op_name("l"), i);
  expect_error(root, {"Log 'l': unsupported dtype int32 (expects float32 or float64)"});
  Scope root2 = Scope::root();
  auto b = ops::constant(root2, Tensor::scalar<bool>(false), "b");
  ops::neg(root2.with_op_name("n"), b);
  expect_error(root2, {"Neg 'n': unsupported dtype bool"});
}

// ---- AddN ----------------------------------------------------------------------------------

TEST(MathOps, AddN) {
  Scope root = Scope::root();
  auto a = ops::constant(root, {1, 2, 3}, {3}, "a");
  auto b = ops::constant(root, {10, 20, 30}, {3}, "b");
  auto c = ops::constant(root, {100, 200, 300}, {3}, "c");
  auto s = ops::add_n(root, {a, b, c});
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_EQ(run<float>(root, s), (std::vector<float>{111, 222, 333}));
  EXPECT_EQ(run<float>(root, ops::add_n(root, {a})), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(run<float>(root, ops::add_n(root, {a, a})), (std::vector<float>{2, 4, 6}));
  auto p = ops::placeholder(root, DType::kFloat32, Shape{-1}, "p");
  EXPECT_EQ(ops::add_n(root, {p, a}).shape(), (Shape{3}));  // merged: the known dim wins
}

TEST(MathOps, AddNErrors) {
  {
    Scope root = Scope::root();
    ops::add_n(root.with_op_name("n0"), {});
    expect_error(root, {"AddN 'n0': AddN needs at least one input"});
  }
  {
    Scope root = Scope::root();
    auto a = ops::constant(root, {1, 2}, {2}, "a");
    auto b = ops::constant(root, i32({1, 2}, {2}), "b");
    ops::add_n(root.with_op_name("n1"), {a, b});
    expect_error(root, {"AddN 'n1': dtype mismatch float32 vs int32"});
  }
  {
    Scope root = Scope::root();
    auto a = ops::constant(root, {1, 2}, {2}, "a");
    auto b = ops::constant(root, {1, 2, 3}, {3}, "b");
    ops::add_n(root.with_op_name("n2"), {a, a, b});
    expect_error(root, {"AddN 'n2': input 2 has shape [3], expected [2] like input 0"});
  }
  {
    Scope root = Scope::root();
    auto a = ops::placeholder(root, DType::kFloat32, Shape{-1}, "a");
    auto b = ops::placeholder(root, DType::kFloat32, Shape{-1}, "b");
    auto s = ops::add_n(root.with_op_name("n3"), {a, b});
    auto r = eval(root, s, {{"a", f32({1, 2}, {2})}, {"b", f32({1, 2, 3}, {3})}});
    expect_error(r.status(), {"AddN 'n3': input 1 has shape [3], expected [2]"});
  }
}

// ---- comparisons, Cast, Select ---------------------------------------------------------------

TEST(MathOps, Comparisons) {
  Scope root = Scope::root();
  auto a = ops::constant(root, {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
  auto b = ops::constant(root, {2, 2, 5}, {3}, "b");
  EXPECT_EQ(run<bool>(root, ops::equal(root, a, b)), (std::vector<bool>{false, true, false, false, false, false}));
  EXPECT_EQ(run<bool>(root, ops::greater(root, a, b)), (std::vector<bool>{false, false, false, true, true, true}));
  EXPECT_EQ(run<bool>(root, ops::greater(root, 3.f, b)), (std::vector<bool>{true, true, false}));
  auto i = ops::constant(root, i32({1, 7}, {2}), "i");
  EXPECT_EQ(run<bool>(root, ops::equal(root, i, 7)), (std::vector<bool>{false, true}));
  auto t = ops::constant(root, Tensor::from_vector<bool>({true, false}, {2}), "t");
  EXPECT_EQ(run<bool>(root, ops::equal(root, t, true)), (std::vector<bool>{true, false}));
  auto i64 = ops::constant(root, Tensor::from_vector<int64_t>({5, -5}, {2}), "i64");
  EXPECT_EQ(run<bool>(root, ops::greater(root, i64, int64_t{0})), (std::vector<bool>{true, false}));
}

TEST(MathOps, Cast) {
  Scope root = Scope::root();
  auto f = ops::constant(root, {1.7f, -1.7f, 2.5f, -0.2f, 0.f}, {5}, "f");
  auto to_i = ops::cast(root, f, DType::kInt32);
  EXPECT_EQ(to_i.dtype(), DType::kInt32);
  EXPECT_EQ(to_i.shape(), (Shape{5}));
  EXPECT_EQ(run<int32_t>(root, to_i), (std::vector<int32_t>{1, -1, 2, 0, 0}));  // truncation toward zero
  EXPECT_EQ(run<int64_t>(root, ops::cast(root, f, DType::kInt64)), (std::vector<int64_t>{1, -1, 2, 0, 0}));
  EXPECT_EQ(run<bool>(root, ops::cast(root, f, DType::kBool)), (std::vector<bool>{true, true, true, true, false}));
  auto i = ops::constant(root, i32({3, -2}, {2}), "i");
  EXPECT_EQ(run<float>(root, ops::cast(root, i, DType::kFloat32)), (std::vector<float>{3, -2}));
  EXPECT_EQ(run<double>(root, ops::cast(root, i, DType::kFloat64)), (std::vector<double>{3, -2}));
  auto b = ops::constant(root, Tensor::from_vector<bool>({true, false}, {2}), "b");
  EXPECT_EQ(run<float>(root, ops::cast(root, b, DType::kFloat32)), (std::vector<float>{1, 0}));
  EXPECT_EQ(run<float>(root, ops::cast(root, f, DType::kFloat32)), (std::vector<float>{1.7f, -1.7f, 2.5f, -0.2f, 0.f}));
  auto u = ops::constant(root, Tensor::from_vector<uint8_t>({255, 1}, {2}), "u");
  EXPECT_EQ(run<int32_t>(root, ops::cast(root, u, DType::kInt32)), (std::vector<int32_t>{255, 1}));
  ASSERT_TRUE(root.ok()) << root.status();
  ops::cast(root.with_op_name("bad"), f, DType::kInvalid);
  expect_error(root, {"Cast 'bad'", "unsupported dtype invalid for DstT"});
}

TEST(MathOps, Select) {
  Scope root = Scope::root();
  auto c = ops::constant(root, Tensor::from_vector<bool>({true, false, true, false}, {2, 2}), "c");
  auto x = ops::constant(root, {1, 2, 3, 4}, {2, 2}, "x");
  auto y = ops::constant(root, {10, 20, 30, 40}, {2, 2}, "y");
  auto s = ops::select(root, c, x, y);
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_EQ(s.dtype(), DType::kFloat32);
  EXPECT_EQ(run<float>(root, s), (std::vector<float>{1, 20, 3, 40}));
  EXPECT_EQ(run<float>(root, ops::select(root, true, x, y)), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(run<float>(root, ops::select(root, false, x, y)), (std::vector<float>{10, 20, 30, 40}));
  // The mask of a comparison drives a select (the pattern of Maximum's gradient).
  auto g = ops::greater(root, x, 2.f);
  EXPECT_EQ(run<float>(root, ops::select(root, g, x, ops::zeros_like(root, x))), (std::vector<float>{0, 0, 3, 4}));
  auto ci = ops::constant(root, Tensor::from_vector<bool>({false, true}, {2}), "ci");
  auto xi = ops::constant(root, i32({1, 2}, {2}), "xi");
  EXPECT_EQ(run<int32_t>(root, ops::select(root, ci, xi, 7)), (std::vector<int32_t>{7, 2}));
  EXPECT_EQ(run<int32_t>(root, ops::select(root, ci, 5, xi)), (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(run<int32_t>(root, ops::select(root, ci, 5, 6)), (std::vector<int32_t>{6, 5}));
  EXPECT_EQ(run<int32_t>(root, ops::select(root, true, 5, xi)), (std::vector<int32_t>{5, 5}));
  auto sc = ops::select(root, false, 5, 6);
  EXPECT_EQ(sc.shape(), Shape{});
  EXPECT_EQ(run<int32_t>(root, sc), (std::vector<int32_t>{6}));
  // 40 elements: blocks plus tail.
  std::vector<bool> cv(40);
  std::vector<float> xv(40), expect(40);
  for (size_t k = 0; k < 40; ++k) {
    cv[k] = k % 3 == 0;
    xv[k] = static_cast<float>(k);
    expect[k] = cv[k] ? xv[k] : -1.f;
  }
  auto cl = ops::constant(root, Tensor::from_vector<bool>(cv, {40}), "cl");
  auto xl = ops::constant(root, xv, {40}, "xl");
  EXPECT_EQ(run<float>(root, ops::select(root, cl, xl, -1.f)), expect);
  auto pc = ops::placeholder(root, DType::kBool, Shape{-1, 2}, "pc");
  EXPECT_EQ(ops::select(root, pc, x, y).shape(), (Shape{2, 2}));
  ASSERT_TRUE(root.ok()) << root.status();
}

TEST(MathOps, SelectErrors) {
  {
    Scope root = Scope::root();
    auto x = ops::constant(root, {1, 2}, {2}, "x");
    ops::select(root.with_op_name("s"), x, x, x);
    expect_error(root, {"Select 's': condition must be bool, got float32"});
  }
  {
    Scope root = Scope::root();
    auto c = ops::constant(root, Tensor::from_vector<bool>({true, false}, {2}), "c");
    auto x = ops::constant(root, {1, 2}, {2}, "x");
    auto y = ops::constant(root, {1, 2, 3}, {3}, "y");
    ops::select(root.with_op_name("s"), c, x, y);
    expect_error(root, {"Select 's': x and y must have the same shape (or be scalars), got [2] and [3]"});
  }
  {
    Scope root = Scope::root();
    auto c = ops::constant(root, Tensor::from_vector<bool>({true, false, true}, {3}), "c");
    auto x = ops::constant(root, {1, 2}, {2}, "x");
    ops::select(root.with_op_name("s"), c, x, x);
    expect_error(root, {"Select 's': condition shape [3] must be a scalar or equal the shape of x and y [2]"});
  }
  {
    Scope root = Scope::root();
    auto c = ops::constant(root, Tensor::from_vector<bool>({true}, {1}), "c");
    auto x = ops::constant(root, {1}, {1}, "x");
    auto y = ops::constant(root, i32({1}, {1}), "y");
    ops::select(root.with_op_name("s"), c, x, y);
    expect_error(root, {"Select 's': dtype mismatch float32 vs int32"});
  }
  {
    Scope root = Scope::root();
    auto c = ops::placeholder(root, DType::kBool, Shape{-1}, "c");
    auto x = ops::placeholder(root, DType::kFloat32, Shape{-1}, "x");
    auto s = ops::select(root.with_op_name("s"), c, x, x);
    auto r = eval(root, s, {{"c", Tensor::from_vector<bool>({true}, {1})}, {"x", f32({1, 2}, {2})}});
    expect_error(r.status(), {"Select 's': condition shape [1] must be a scalar or equal the shape of x and y [2]"});
  }
}

// ---- reductions ----------------------------------------------------------------------------

TEST(MathOps, ReductionsOn2x3) {
  Scope root = Scope::root();
  auto x = ops::constant(root, {1, 2, 3, 4, 5, 6}, {2, 3}, "x");
  struct Case {
    std::vector<int64_t> axes;
    bool keep;
    Shape shape;
    std::vector<float> sum, mean, max;
  };
  const std::vector<Case> cases = {
      {{}, false, {}, {21}, {3.5f}, {6}},
      {{}, true, {1, 1}, {21}, {3.5f}, {6}},
      {{0, 1}, false, {}, {21}, {3.5f}, {6}},
      {{0}, false, {3}, {5, 7, 9}, {2.5f, 3.5f, 4.5f}, {4, 5, 6}},
      {{0}, true, {1, 3}, {5, 7, 9}, {2.5f, 3.5f, 4.5f}, {4, 5, 6}},
      {{1}, false, {2}, {6, 15}, {2, 5}, {3, 6}},
      {{1}, true, {2, 1}, {6, 15}, {2, 5}, {3, 6}},
      {{-1}, false, {2}, {6, 15}, {2, 5}, {3, 6}},
      {{-2}, true, {1, 3}, {5, 7, 9}, {2.5f, 3.5f, 4.5f}, {4, 5, 6}},
  };
  for (const auto& c : cases) {
    auto s = ops::reduce_sum(root, x, c.axes, c.keep);
    auto m = ops::reduce_mean(root, x, c.axes, c.keep);
    auto mx = ops::reduce_max(root, x, c.axes, c.keep);
    ASSERT_TRUE(root.ok()) << root.status();
    const std::string what = "axes " + std::to_string(c.axes.size()) + " keep " + std::to_string(c.keep);
    EXPECT_EQ(s.shape(), c.shape) << what;
    EXPECT_EQ(m.shape(), c.shape) << what;
    EXPECT_EQ(mx.shape(), c.shape) << what;
    auto sv = eval(root, s);
    ASSERT_TRUE(sv.ok()) << sv.status();
    EXPECT_EQ(sv->shape(), c.shape) << what;
    EXPECT_EQ(vals<float>(*sv), c.sum) << what;
    EXPECT_EQ(run<float>(root, m), c.mean) << what;
    EXPECT_EQ(run<float>(root, mx), c.max) << what;
  }
}

TEST(MathOps, ReductionsIntegerAndNegative) {
  Scope root = Scope::root();
  auto i = ops::constant(root, i32({1, 2, 4, 7}, {2, 2}), "i");
  EXPECT_EQ(run<int32_t>(root, ops::reduce_sum(root, i, {0})), (std::vector<int32_t>{5, 9}));
  EXPECT_EQ(run<int32_t>(root, ops::reduce_mean(root, i, {1})), (std::vector<int32_t>{1, 5}));  // 3/2, 11/2 truncated
  EXPECT_EQ(run<int32_t>(root, ops::reduce_max(root, i)), (std::vector<int32_t>{7}));
  auto n = ops::constant(root, {-5, -3, -9}, {3}, "n");
  EXPECT_EQ(run<float>(root, ops::reduce_max(root, n)), (std::vector<float>{-3}));
  auto i64 = ops::constant(root, Tensor::from_vector<int64_t>({int64_t{1} << 40, int64_t{1} << 40}, {2}), "i64");
  EXPECT_EQ(run<int64_t>(root, ops::reduce_sum(root, i64)), (std::vector<int64_t>{int64_t{1} << 41}));
  auto d = ops::constant(root, Tensor::from_vector<double>({0.5, 0.25}, {2}), "d");
  EXPECT_EQ(run<double>(root, ops::reduce_mean(root, d)), (std::vector<double>{0.375}));
}

TEST(MathOps, ReductionOfLongRowsAndEmpty) {
  Scope root = Scope::root();
  // 3 rows of 1000: exercises the vectorised contiguous path (blocks plus tail).
  std::vector<float> v(3000);
  for (int r = 0; r < 3; ++r)
    for (int k = 0; k < 1000; ++k) v[static_cast<size_t>(r * 1000 + k)] = static_cast<float>(k % 7 + r);
  auto x = ops::constant(root, v, {3, 1000}, "x");
  // sum over k of (k%7) for k < 1000 = 142 full cycles (21 each) + (0..5) = 2982 + 15 = 2997.
  EXPECT_EQ(run<float>(root, ops::reduce_sum(root, x, {1})), (std::vector<float>{2997, 3997, 4997}));
  EXPECT_EQ(run<float>(root, ops::reduce_max(root, x, {1})), (std::vector<float>{6, 7, 8}));
  auto p = ops::placeholder(root, DType::kFloat32, Shape{-1, 2}, "p");
  auto s = ops::reduce_sum(root, p, {0});
  auto mx = ops::reduce_max(root, p, {0});
  auto mean = ops::reduce_mean(root, p, {0});
  const std::map<std::string, Tensor> feeds = {{"p", f32({}, {0, 2})}};
  EXPECT_EQ(run<float>(root, s, feeds), (std::vector<float>{0, 0}));
  auto m = run<float>(root, mx, feeds);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_TRUE(std::isinf(m[0]) && m[0] < 0);
  auto me = run<float>(root, mean, feeds);
  ASSERT_EQ(me.size(), 2u);
  EXPECT_TRUE(std::isnan(me[0]));
}

// Naive reduction reference over a fully known shape.
std::vector<float> reference_reduce(const std::vector<float>& x, const Shape& s, const std::vector<bool>& mask,
                                    bool is_max) {
  const int r = s.rank();
  int64_t out_n = 1;
  for (int i = 0; i < r; ++i)
    if (!mask[static_cast<size_t>(i)]) out_n *= s.dim(i);
  std::vector<float> out(static_cast<size_t>(out_n), is_max ? -INFINITY : 0.f);
  for (int64_t k = 0; k < s.num_elements(); ++k) {
    int64_t rem = k, o = 0, scale = 1;
    for (int i = r - 1; i >= 0; --i) {
      const int64_t idx = rem % s.dim(i);
      rem /= s.dim(i);
      if (!mask[static_cast<size_t>(i)]) {
        o += idx * scale;
        scale *= s.dim(i);
      }
    }
    float& dst = out[static_cast<size_t>(o)];
    dst = is_max ? std::max(dst, x[static_cast<size_t>(k)]) : dst + x[static_cast<size_t>(k)];
  }
  return out;
}

TEST(MathOps, ReductionsOverEveryAxisSubsetMatchReference) {
  const Shape s{2, 3, 4, 5};
  std::vector<float> v(static_cast<size_t>(s.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37) % 101);  // exact small ints
  for (int bits = 1; bits < 16; ++bits) {
    std::vector<int64_t> axes;
    std::vector<bool> mask(4, false);
    for (int a = 0; a < 4; ++a)
      if (bits & (1 << a)) {
        axes.push_back(a);
        mask[static_cast<size_t>(a)] = true;
      }
    Scope root = Scope::root();
    auto x = ops::constant(root, v, s, "x");
    for (bool keep : {false, true}) {
      auto sum = ops::reduce_sum(root, x, axes, keep);
      auto mx = ops::reduce_max(root, x, axes, keep);
      ASSERT_TRUE(root.ok()) << root.status();
      EXPECT_EQ(run<float>(root, sum), reference_reduce(v, s, mask, false)) << "axes bits " << bits;
      EXPECT_EQ(run<float>(root, mx), reference_reduce(v, s, mask, true)) << "axes bits " << bits;
    }
  }
}

TEST(MathOps, ReductionStaticShapes) {
  Scope root = Scope::root();
  auto p = ops::placeholder(root, DType::kFloat32, Shape{-1, 784}, "p");
  EXPECT_EQ(ops::reduce_sum(root, p, {1}).shape(), (Shape{-1}));
  EXPECT_EQ(ops::reduce_mean(root, p, {0}, true).shape(), (Shape{1, 784}));
  EXPECT_EQ(ops::reduce_max(root, p).shape(), Shape{});
  auto u = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "u");
  EXPECT_EQ(ops::reduce_sum(root, u).shape(), Shape{});
  EXPECT_EQ(ops::reduce_sum(root, u, {}, true).shape(), Shape::unknown());
  EXPECT_EQ(ops::reduce_sum(root, u, {0}).shape(), Shape::unknown());
  EXPECT_EQ(ops::reduce_sum(root, p).dtype(), DType::kFloat32);
  ASSERT_TRUE(root.ok()) << root.status();
}

TEST(MathOps, ReductionErrors) {
  {
    Scope root = Scope::root();
    auto x = ops::constant(root, iota(6), {2, 3}, "x");
    ops::reduce_sum(root.with_op_name("s"), x, {2});
    expect_error(root, {"Sum 's': axis 2 is out of range for an input of rank 2"});
  }
  {
    Scope root = Scope::root();
    auto x = ops::constant(root, iota(6), {2, 3}, "x");
    ops::reduce_mean(root.with_op_name("m"), x, {-3});
    expect_error(root, {"Mean 'm': axis -3 is out of range for an input of rank 2"});
  }
  {
    Scope root = Scope::root();
    auto x = ops::constant(root, iota(6), {2, 3}, "x");
    ops::reduce_max(root.with_op_name("mx"), x, {1, -1});
    expect_error(root, {"Max 'mx': axis -1 is listed twice in axes [1,-1]"});
  }
  {
    Scope root = Scope::root();
    auto b = ops::constant(root, Tensor::from_vector<bool>({true}, {1}), "b");
    ops::reduce_sum(root.with_op_name("sb"), b);
    expect_error(root, {"Sum 'sb': unsupported dtype bool"});
  }
  {
    // Unknown rank at construction: the axis is checked at run time.
    Scope root = Scope::root();
    auto u = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "u");
    auto s = ops::reduce_sum(root.with_op_name("s"), u, {2});
    ASSERT_TRUE(root.ok()) << root.status();
    auto r = eval(root, s, {{"u", f32(iota(6), {2, 3})}});
    expect_error(r.status(), {"Sum 's': axis 2 is out of range for an input of rank 2"});
    EXPECT_EQ(run<float>(root, s, {{"u", f32(iota(8), {2, 2, 2})}}), (std::vector<float>{3, 7, 11, 15}));
  }
}

// ---- ArgMax ----------------------------------------------------------------------------------

TEST(MathOps, ArgMax) {
  Scope root = Scope::root();
  auto x = ops::constant(root, {1, 3, 3, 5, 2, 5}, {2, 3}, "x");
  auto a1 = ops::argmax(root, x, 1);
  EXPECT_EQ(a1.dtype(), DType::kInt64);
  EXPECT_EQ(a1.shape(), (Shape{2}));
  EXPECT_EQ(run<int64_t>(root, a1), (std::vector<int64_t>{1, 0}));  // ties -> first index
  auto a0 = ops::argmax(root, x, 0);
  EXPECT_EQ(a0.shape(), (Shape{3}));
  EXPECT_EQ(run<int64_t>(root, a0), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(run<int64_t>(root, ops::argmax(root, x, -1)), (std::vector<int64_t>{1, 0}));
  auto ties = ops::constant(root, {7, 7, 7, 7, 7, 7}, {3, 2}, "ties");
  EXPECT_EQ(run<int64_t>(root, ops::argmax(root, ties, 0)), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(run<int64_t>(root, ops::argmax(root, ties, 1)), (std::vector<int64_t>{0, 0, 0}));
  // [2,3,2] over the middle axis.
  auto m = ops::constant(root, {0, 9, 4, 1, 4, 9, 5, 5, 6, 5, 6, 5}, {2, 3, 2}, "m");
  auto am = ops::argmax(root, m, 1);
  EXPECT_EQ(am.shape(), (Shape{2, 2}));
  EXPECT_EQ(run<int64_t>(root, am), (std::vector<int64_t>{1, 0, 1, 0}));
  auto i = ops::constant(root, i32({-1, -7, 4}, {3}), "i");
  EXPECT_EQ(run<int64_t>(root, ops::argmax(root, i, 0)), (std::vector<int64_t>{2}));
  auto p = ops::placeholder(root, DType::kFloat32, Shape{-1, 10}, "p");
  EXPECT_EQ(ops::argmax(root, p, 1).shape(), (Shape{-1}));
  ASSERT_TRUE(root.ok()) << root.status();
}

TEST(MathOps, ArgMaxErrors) {
  {
    Scope root = Scope::root();
    auto x = ops::constant(root, iota(6), {2, 3}, "x");
    ops::argmax(root.with_op_name("am"), x, 2);
    expect_error(root, {"ArgMax 'am': axis 2 is out of range for an input of rank 2"});
  }
  {
    Scope root = Scope::root();
    ops::argmax(root.with_op_name("am"), 3.f, 0);
    expect_error(root, {"ArgMax 'am': ArgMax needs an input of rank >= 1"});
  }
  {
    Scope root = Scope::root();
    auto p = ops::placeholder(root, DType::kFloat32, Shape{2, -1}, "p");
    auto am = ops::argmax(root.with_op_name("am"), p, 1);
    auto r = eval(root, am, {{"p", f32({}, {2, 0})}});
    expect_error(r.status(), {"ArgMax 'am': cannot take the argmax of an empty dimension (axis 1 of [2,0])"});
  }
}

// ---- functors (shared with the CUDA kernels) -------------------------------------------------

TEST(Functors, HostValues) {
  using namespace functors;  // NOLINT
  EXPECT_EQ(AddF()(2, 3), 5);
  EXPECT_EQ(SubF()(2.5f, 3.f), -0.5f);
  EXPECT_EQ(MulF()(int64_t{4}, int64_t{5}), 20);
  EXPECT_EQ(DivF()(7, -2), -3);
  EXPECT_EQ(DivF()(7, 0), 0);  // never traps; the kernel reports the error
  EXPECT_EQ(DivF()(std::numeric_limits<int64_t>::min(), int64_t{-1}), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(MaximumF()(1.f, 2.f), 2.f);
  EXPECT_TRUE(std::isnan(MaximumF()(std::nanf(""), 2.f)));
  EXPECT_TRUE(std::isnan(MaximumF()(2.f, std::nanf(""))));
  EXPECT_TRUE(EqualF()(3, 3));
  EXPECT_FALSE(GreaterF()(3, 3));
  EXPECT_EQ(NegF()(2.f), -2.f);
  EXPECT_EQ(SquareF()(-3), 9);
  EXPECT_DOUBLE_EQ(LogF()(1.0), 0.0);
  EXPECT_DOUBLE_EQ(ExpF()(0.0), 1.0);
  EXPECT_FLOAT_EQ(SqrtF()(16.f), 4.f);
  EXPECT_EQ(CastF<int32_t>()(-2.9f), -2);
  EXPECT_EQ(CastF<bool>()(0.1f), true);
  EXPECT_EQ(SelectF()(false, 1, 2), 2);
  EXPECT_EQ(SumReducer::identity<float>(), 0.f);
  EXPECT_EQ(MaxReducer::identity<int32_t>(), std::numeric_limits<int32_t>::min());
  EXPECT_TRUE(std::isinf(MaxReducer::identity<double>()));
  EXPECT_EQ(MaxReducer()(3, 9), 9);
}

// Distance of `got` from the exact `want` in units of the float spacing at `want`.
double ulp_error(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : 1e30;
  const float wf = static_cast<float>(want);
  if (std::isinf(wf)) return got == wf ? 0 : 1e30;
  double ulp = std::fabs(static_cast<double>(std::nextafter(std::fabs(wf), INFINITY)) - std::fabs(wf));
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

TEST(Functors, FloatExpLogAccuracySweep) {
  // Every 1021st bit pattern: about 4.2 million floats of both signs, all exponents,
  // denormals, infinities and NaNs, against double-precision libm.
  double worst_exp = 0, worst_log = 0;
  float at_exp = 0, at_log = 0;
  for (uint64_t b = 0; b <= 0xffffffffull; b += 1021) {
    const uint32_t bits = static_cast<uint32_t>(b);
    float x;
    std::memcpy(&x, &bits, sizeof x);
    const double e = ulp_error(functors::ExpF()(x), std::exp(static_cast<double>(x)));
    const double l = ulp_error(functors::LogF()(x), std::log(static_cast<double>(x)));
    if (e > worst_exp) worst_exp = e, at_exp = x;
    if (l > worst_log) worst_log = l, at_log = x;
  }
  EXPECT_LE(worst_exp, 1.5) << "exp at " << at_exp;
  EXPECT_LE(worst_log, 1.5) << "log at " << at_log;
}

TEST(Functors, FloatExpLogSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  functors::ExpF ex;
  functors::LogF lg;
  EXPECT_EQ(ex(0.f), 1.f);
  EXPECT_EQ(ex(-inf), 0.f);
  EXPECT_EQ(ex(inf), inf);
  EXPECT_EQ(ex(89.f), inf);
  EXPECT_EQ(ex(-200.f), 0.f);
  EXPECT_TRUE(std::isnan(ex(nan)));
  EXPECT_GT(ex(-100.f), 0.f);  // a denormal, not flushed to zero
  EXPECT_FLOAT_EQ(ex(-100.f), std::exp(-100.f));
  EXPECT_FLOAT_EQ(ex(88.f), std::exp(88.f));
  EXPECT_EQ(lg(1.f), 0.f);
  EXPECT_EQ(lg(0.f), -inf);
  EXPECT_EQ(lg(-0.f), -inf);
  EXPECT_TRUE(std::isnan(lg(-1.f)));
  EXPECT_TRUE(std::isnan(lg(-inf)));
  EXPECT_TRUE(std::isnan(lg(nan)));
  EXPECT_EQ(lg(inf), inf);
  EXPECT_FLOAT_EQ(lg(std::numeric_limits<float>::denorm_min()), std::log(std::numeric_limits<float>::denorm_min()));
  EXPECT_FLOAT_EQ(lg(std::numeric_limits<float>::max()), std::log(std::numeric_limits<float>::max()));
}

}  // namespace
}  // namespace actorflow
