// bfloat16 mixed precision (graph/mixed_precision.h): marked MatMul and convolution kernels
// against references computed on operands rounded to bfloat16 by hand (round to nearest even),
// the depth rule that keeps shallow convolutions float32, and the session option end to end on
// values whose float32 and bfloat16 products differ exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "actorflow/actorflow.h"
#include "device/cpu/nn_kernels.h"
#include "graph/mixed_precision.h"
#include "graph/ops.h"
#include "graph/ops_nn_grad.h"
#include "tests/util/eval.h"

namespace actorflow {
namespace {

// `x` rounded to the nearest bfloat16 (ties to even), as a float: what oneDNN's conversion does.
float to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

using testing::random_tensor;

Tensor rounded(const Tensor& t) {
  Tensor r(DType::kFloat32, t.shape());
  for (int64_t i = 0; i < t.num_elements(); ++i) r.data<float>()[i] = to_bf16(t.data<float>()[i]);
  return r;
}

// The largest |a - b| relative to max(1, |b|).
double max_rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double m = 0;
  for (int64_t i = 0; i < a.num_elements() && i < b.num_elements(); ++i) {
    const double want = b.data<float>()[i];
    m = std::max(m, std::fabs(a.data<float>()[i] - want) / std::max(1.0, std::fabs(want)));
  }
  return m;
}

// Builds one op over placeholders fed `inputs` and runs it on the CPU device, with the graph
// marked for bfloat16 when `bf16`.
using BuildFn = std::function<Output(const Scope&, const std::vector<Output>&)>;
Tensor eval(const BuildFn& build, const std::vector<Tensor>& inputs, bool bf16) {
  Scope root = Scope::root();
  std::vector<Output> ph;
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "p" + std::to_string(i);
    ph.push_back(ops::placeholder(root, inputs[i].dtype(), inputs[i].shape(), name));
    feeds[name] = inputs[i];
  }
  Output out = build(root, ph);
  if (bf16) {
    EXPECT_EQ(mark_mixed_bfloat16(*root.graph()), 1);
  }
  auto r = testing::eval(root, out, feeds);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : Tensor();
}

// Runs `build` float32 on the given operands, float32 on the operands rounded to bfloat16, and
// marked on the given operands. With native bfloat16 the marked result must equal the second
// (float32 accumulation of the same products) and differ from the first; without it, equal the
// first. `takes_bf16` false: an op the depth rule keeps float32.
void check(const std::string& what, const BuildFn& build, const std::vector<Tensor>& in,
           const std::vector<bool>& round_input, bool takes_bf16 = true) {
  std::vector<Tensor> in_rounded;
  for (size_t i = 0; i < in.size(); ++i) in_rounded.push_back(round_input[i] ? rounded(in[i]) : in[i]);
  const Tensor f32 = eval(build, in, false);
  const Tensor f32_of_rounded = eval(build, in_rounded, false);
  const Tensor marked = eval(build, in, true);
  ASSERT_EQ(marked.shape(), f32.shape()) << what;
  const double to_rounded = max_rel_diff(marked, f32_of_rounded), to_f32 = max_rel_diff(marked, f32);
  if (cpu_has_native_bfloat16() && takes_bf16) {
    EXPECT_LT(to_rounded, 1e-4) << what << ": not the float32 sum of bfloat16 products";
    EXPECT_GT(to_f32, 1e-3) << what << ": the operands were not rounded to bfloat16";
  } else {
    EXPECT_LT(to_f32, 1e-5) << what << ": should have computed in float32";
    EXPECT_GT(max_rel_diff(f32_of_rounded, f32), 1e-3) << what << ": the test's operands round to themselves";
  }
}

TEST(MixedPrecisionTest, MarksOnlyTheOpsWhoseKernelsTakeIt) {
  Scope root = Scope::root();
  auto a = ops::placeholder(root, DType::kFloat32, Shape{2, 3}, "a");
  auto b = ops::placeholder(root, DType::kFloat32, Shape{3, 4}, "b");
  auto c = ops::matmul(root.with_op_name("c"), a, b);
  ops::relu(root.with_op_name("r"), c);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(mark_mixed_bfloat16(*root.graph()), 1);
  EXPECT_TRUE(root.graph()->find("c")->attrs.get_or<bool>(kMixedBfloat16Attr, false));
  EXPECT_FALSE(root.graph()->find("r")->attrs.has(kMixedBfloat16Attr));
  for (const char* op : {"MatMul", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"})
    EXPECT_TRUE(takes_mixed_bfloat16(op)) << op;
  for (const char* op : {"Relu", "BiasAdd", "MaxPool", "ApplyAdam", "AddN"}) EXPECT_FALSE(takes_mixed_bfloat16(op)) << op;
}

TEST(MixedPrecisionTest, MatMulAndItsTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Shape as = ta ? Shape{37, 19} : Shape{19, 37}, bs = tb ? Shape{23, 37} : Shape{37, 23};
      check("MatMul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
            [&](const Scope& s, const std::vector<Output>& in) {
              return ops::matmul(s, in[0], in[1], ops::MatMulAttrs{ta, tb});
            },
            {random_tensor(as, 1), random_tensor(bs, 2)}, {true, true});
    }
}

TEST(MixedPrecisionTest, MatMulsWithASmallDimensionStayFloat32) {
  // A classifier's last layer (500 -> 10) and both its gradients: every product has a dimension
  // below 16 (kBf16MinMatMulDim), so all three stay float32 when marked.
  const Tensor x = random_tensor(Shape{50, 500}, 21), w = random_tensor(Shape{500, 10}, 22);
  const Tensor dy = random_tensor(Shape{50, 10}, 23);
  check("logits", [](const Scope& s, const std::vector<Output>& in) { return ops::matmul(s, in[0], in[1]); }, {x, w},
        {true, true}, /*takes_bf16=*/false);
  check("logits input gradient",
        [](const Scope& s, const std::vector<Output>& in) { return ops::matmul(s, in[0], in[1], {false, true}); },
        {dy, w}, {true, true}, /*takes_bf16=*/false);
  check("logits weight gradient",
        [](const Scope& s, const std::vector<Output>& in) { return ops::matmul(s, in[0], in[1], {true, false}); },
        {x, dy}, {true, true}, /*takes_bf16=*/false);
}

TEST(MixedPrecisionTest, ConvolutionForwardAndBothGradients) {
  const std::vector<int64_t> s1{1, 1, 1, 1};
  const Tensor x = random_tensor(Shape{2, 9, 9, 32}, 3), f = random_tensor(Shape{3, 3, 32, 16}, 4);
  const Tensor dy = random_tensor(Shape{2, 9, 9, 16}, 5);
  check("Conv2D", [&](const Scope& s, const std::vector<Output>& in) { return ops::conv2d(s, in[0], in[1], s1, "SAME"); },
        {x, f}, {true, true});
  const Tensor sizes = Tensor::from_vector<int32_t>({2, 9, 9, 32}, Shape{4});
  check("Conv2DBackpropInput",
        [&](const Scope& s, const std::vector<Output>& in) {
          return ops::conv2d_backprop_input(s, in[0], in[1], in[2], s1, "SAME");
        },
        {sizes, f, dy}, {false, true, true});
  check("Conv2DBackpropFilter",
        [&](const Scope& s, const std::vector<Output>& in) {
          return ops::conv2d_backprop_filter(s, in[0], {3, 3, 32, 16}, in[1], s1, "SAME");
        },
        {x, dy}, {true, true});
}

TEST(MixedPrecisionTest, ShallowConvolutionsStayFloat32ExceptTheInputGradient) {
  // Input depth 1 (the seed's first layer): the forward and filter-gradient convolutions stay
  // float32 (kBf16MinInputDepth); the input gradient still takes bfloat16.
  const std::vector<int64_t> s1{1, 1, 1, 1};
  const Tensor x = random_tensor(Shape{2, 12, 12, 1}, 6), f = random_tensor(Shape{5, 5, 1, 32}, 7);
  const Tensor dy = random_tensor(Shape{2, 12, 12, 32}, 8);
  check("Conv2D depth 1",
        [&](const Scope& s, const std::vector<Output>& in) { return ops::conv2d(s, in[0], in[1], s1, "SAME"); }, {x, f},
        {true, true}, /*takes_bf16=*/false);
  check("Conv2DBackpropFilter depth 1",
        [&](const Scope& s, const std::vector<Output>& in) {
          return ops::conv2d_backprop_filter(s, in[0], {5, 5, 1, 32}, in[1], s1, "SAME");
        },
        {x, dy}, {true, true}, /*takes_bf16=*/false);
  const Tensor sizes = Tensor::from_vector<int32_t>({2, 12, 12, 1}, Shape{4});
  check("Conv2DBackpropInput depth 1",
        [&](const Scope& s, const std::vector<Output>& in) {
          return ops::conv2d_backprop_input(s, in[0], in[1], in[2], s1, "SAME");
        },
        {sizes, f, dy}, {false, true, true});
}

TEST(MixedPrecisionTest, SessionOptionMarksEachStepsGraph) {
  // 1 + 2^-9 is 1 in bfloat16 (7 stored mantissa bits): the product is 3 with bfloat16 operands
  // and 3.005859375 in float32. Only the session with the option rounds; relu (not a marked op)
  // passes the product through unchanged.
  // 16x16 operands, zero but for [0][0] (a smaller product stays float32: kBf16MinMatMulDim).
  Scope root = Scope::root();
  std::vector<float> av(256, 0.f), bv(256, 0.f);
  av[0] = 1.0f + 1.0f / 512;
  bv[0] = 3.0f;
  auto a = ops::constant(root, av, {16, 16}, "a");
  auto b = ops::constant(root, bv, {16, 16}, "b");
  auto c = ops::relu(root.with_op_name("c"), ops::matmul(root.with_op_name("mm"), a, b));
  ASSERT_TRUE(root.ok()) << root.status();
  const float want_bf16 = cpu_has_native_bfloat16() ? 3.0f : 3.005859375f;
  {
    Session plain(root);
    auto out = plain.run({c});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)[0].data<float>()[0], 3.005859375f);
  }
  {
    EXPECT_FALSE(SessionOptions().mixed_bfloat16());
    Session mixed(root, "", SessionOptions().mixed_bfloat16(true));
    auto out = mixed.run({c});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)[0].data<float>()[0], want_bf16);
  }
  // The client's graph itself is not marked (each step's placed copy is).
  EXPECT_FALSE(root.graph()->find("mm")->attrs.has(kMixedBfloat16Attr));
}

}  // namespace
}  // namespace actorflow
