// Kernel fusion (graph/fusion.h): which chains the rewrite fuses and which it must leave alone,
// hand-computed values through the fused kernels, and a small CNN's loss and gradients through a
// session with fusion on against the same session with it off.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "actorflow/actorflow.h"
#include "core/metrics.h"
#include "graph/fusion.h"
#include "graph/gradients.h"
#include "graph/ops.h"
#include "graph/ops_nn_grad.h"
#include "tests/util/eval.h"

namespace actorflow {
namespace {

constexpr char kCpu[] = "/job:localhost/replica:0/task:0/device:CPU:0";
constexpr char kGpu[] = "/job:localhost/replica:0/task:0/device:GPU:0";

// Every node of `g` assigned to `device`, as the placer would leave it.
void assign_all(Graph& g, const std::string& device) {
  for (int i = 0; i < g.num_nodes(); ++i) g.node(i)->assigned_device = device;
}

using testing::random_tensor;

const std::vector<int64_t> kOnes{1, 1, 1, 1};

TEST(FusionTest, FusesConvBiasReluMatMulBiasAndMaxPoolGradReluGrad) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{2, 6, 6, 3}, "x");
  auto f = ops::placeholder(root, DType::kFloat32, Shape{3, 3, 3, 4}, "f");
  auto b = ops::placeholder(root, DType::kFloat32, Shape{4}, "b");
  auto conv = ops::conv2d(root.with_op_name("conv"), x, f, kOnes, "SAME");
  auto biased = ops::bias_add(root.with_op_name("biased"), conv, b);
  auto y = ops::relu(root.with_op_name("y"), biased);
  auto pooled = ops::max_pool(root.with_op_name("pool"), y, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  auto dp = ops::placeholder(root, DType::kFloat32, Shape{2, 3, 3, 4}, "dp");
  auto dy = ops::max_pool_grad(root.with_op_name("dy"), y, pooled, dp, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  ops::relu_grad(root.with_op_name("dconv"), dy, y);
  auto a = ops::placeholder(root, DType::kFloat32, Shape{2, 5}, "a");
  auto w = ops::placeholder(root, DType::kFloat32, Shape{5, 4}, "w");
  auto mm = ops::matmul(root.with_op_name("mm"), a, w);
  ops::bias_add(root.with_op_name("logits"), mm, b);
  ASSERT_TRUE(root.ok()) << root.status();
  Graph g = *root.graph();
  assign_all(g, kCpu);

  FusionStats st;
  auto fused = fuse_cpu_kernels(g, &st);
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(st.conv_bias, 1);
  EXPECT_EQ(st.matmul_bias, 1);
  EXPECT_EQ(st.relu, 1);
  EXPECT_EQ(st.max_pool_grad, 1);
  EXPECT_EQ(fused->num_nodes(), g.num_nodes() - 4);  // conv, biased, mm and dy absorbed
  for (const char* gone : {"conv", "biased", "mm", "dy"}) EXPECT_EQ(fused->find(gone), nullptr) << gone;

  // The fused nodes keep the chains' last names, take the first node's inputs (plus the bias)
  // and attributes, and feed the same consumers.
  const Node* fy = fused->find("y");
  ASSERT_NE(fy, nullptr);
  EXPECT_EQ(fy->op, "_FusedConv2D");
  ASSERT_EQ(fy->inputs.size(), 3u);
  EXPECT_EQ(fused->node(fy->inputs[0].node)->name, "x");
  EXPECT_EQ(fused->node(fy->inputs[1].node)->name, "f");
  EXPECT_EQ(fused->node(fy->inputs[2].node)->name, "b");
  EXPECT_TRUE(fy->attrs.get_or<bool>(kFusedReluAttr, false));
  EXPECT_EQ(fy->attrs.get_or<std::string>("padding", ""), "SAME");
  EXPECT_EQ(fy->assigned_device, kCpu);
  EXPECT_EQ(fy->output_shapes[0], (Shape{2, 6, 6, 4}));
  EXPECT_EQ(fused->node(fused->find("pool")->inputs[0].node), fy);

  const Node* fl = fused->find("logits");
  ASSERT_NE(fl, nullptr);
  EXPECT_EQ(fl->op, "_FusedMatMul");
  EXPECT_FALSE(fl->attrs.get_or<bool>(kFusedReluAttr, true));
  ASSERT_EQ(fl->inputs.size(), 3u);
  EXPECT_EQ(fused->node(fl->inputs[1].node)->name, "w");

  const Node* fd = fused->find("dconv");
  ASSERT_NE(fd, nullptr);
  EXPECT_EQ(fd->op, "_FusedMaxPoolGrad");
  ASSERT_EQ(fd->inputs.size(), 3u);
  EXPECT_EQ(fused->node(fd->inputs[0].node), fy);
  EXPECT_EQ(fused->node(fd->inputs[1].node)->name, "pool");
  EXPECT_EQ(fused->node(fd->inputs[2].node)->name, "dp");
  EXPECT_TRUE(fused->topological_order().ok());
}

TEST(FusionTest, LeavesChainsWhoseIntermediatesAreNeededElsewhere) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{1, 4, 4, 2}, "x");
  auto f = ops::placeholder(root, DType::kFloat32, Shape{1, 1, 2, 2}, "f");
  auto b = ops::placeholder(root, DType::kFloat32, Shape{2}, "b");
  // 1. The bias-added value is also read by another op: conv + bias fuse, the ReLU stays.
  auto c1 = ops::conv2d(root.with_op_name("c1"), x, f, kOnes, "SAME");
  auto b1 = ops::bias_add(root.with_op_name("b1"), c1, b);
  ops::relu(root.with_op_name("r1"), b1);
  ops::square(root.with_op_name("sq1"), b1);
  // 2. The convolution's output is read twice: nothing fuses.
  auto c2 = ops::conv2d(root.with_op_name("c2"), x, f, kOnes, "SAME");
  ops::bias_add(root.with_op_name("b2"), c2, b);
  ops::square(root.with_op_name("sq2"), c2);
  // 3. Something must run after the convolution (a control edge): nothing fuses.
  auto c3 = ops::conv2d(root.with_op_name("c3"), x, f, kOnes, "SAME");
  ops::bias_add(root.with_op_name("b3"), c3, b);
  ops::square(root.with_op_name("sq3").with_control_dependencies({c3}), x);
  // 4. ReluGrad masks with a tensor other than the pooled input: MaxPoolGrad stays.
  auto y = ops::relu(root.with_op_name("y"), x);
  auto p = ops::max_pool(root.with_op_name("p"), y, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  auto dy = ops::max_pool_grad(root.with_op_name("dy"), y, p, p, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  ops::relu_grad(root.with_op_name("dx"), dy, x);
  ASSERT_TRUE(root.ok()) << root.status();
  Graph g = *root.graph();
  assign_all(g, kCpu);
  FusionStats st;
  auto fused = fuse_cpu_kernels(g, &st);
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(st.conv_bias, 1);
  EXPECT_EQ(st.relu, 0);
  EXPECT_EQ(st.max_pool_grad, 0);
  ASSERT_NE(fused->find("b1"), nullptr);
  EXPECT_EQ(fused->find("b1")->op, "_FusedConv2D");
  EXPECT_EQ(fused->find("r1")->op, "Relu");
  EXPECT_EQ(fused->node(fused->find("sq1")->inputs[0].node)->name, "b1");
  for (const char* kept : {"c2", "b2", "c3", "b3", "dy", "dx"}) ASSERT_NE(fused->find(kept), nullptr) << kept;
  EXPECT_EQ(fused->find("c3")->op, "Conv2D");
  EXPECT_EQ(fused->find("dy")->op, "MaxPoolGrad");
  // The control edge survives the renumbering.
  const Node* sq3 = fused->find("sq3");
  ASSERT_EQ(sq3->control_inputs.size(), 1u);
  EXPECT_EQ(fused->node(sq3->control_inputs[0])->name, "c3");

  // Not on a CPU device, or across devices: nothing fuses.
  Graph on_gpu = *root.graph();
  assign_all(on_gpu, kGpu);
  FusionStats none;
  ASSERT_TRUE(fuse_cpu_kernels(on_gpu, &none).ok());
  EXPECT_EQ(none.conv_bias + none.matmul_bias + none.max_pool_grad, 0);
  Graph split = *root.graph();
  assign_all(split, kCpu);
  split.find("b1")->assigned_device = "/job:localhost/replica:0/task:0/device:CPU:1";
  FusionStats st2;
  ASSERT_TRUE(fuse_cpu_kernels(split, &st2).ok());
  EXPECT_EQ(st2.conv_bias, 0);
}

TEST(FusionTest, ControlInputsOfEveryMemberMoveToTheFusedNode) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{2, 3}, "x");
  auto w = ops::placeholder(root, DType::kFloat32, Shape{3, 2}, "w");
  auto b = ops::placeholder(root, DType::kFloat32, Shape{2}, "b");
  auto before1 = ops::square(root.with_op_name("before1"), x);
  auto before2 = ops::square(root.with_op_name("before2"), w);
  auto mm = ops::matmul(root.with_op_name("mm").with_control_dependencies({before1}), x, w);
  auto ba = ops::bias_add(root.with_op_name("ba").with_control_dependencies({before2}), mm, b);
  auto r = ops::relu(root.with_op_name("r").with_control_dependencies({before1}), ba);
  ops::square(root.with_op_name("after").with_control_dependencies({r}), x);
  ASSERT_TRUE(root.ok()) << root.status();
  Graph g = *root.graph();
  assign_all(g, kCpu);
  auto fused = fuse_cpu_kernels(g);
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Node* fr = fused->find("r");
  ASSERT_NE(fr, nullptr);
  EXPECT_EQ(fr->op, "_FusedMatMul");
  std::vector<std::string> ctrl;
  for (int c : fr->control_inputs) ctrl.push_back(fused->node(c)->name);
  EXPECT_EQ(ctrl, (std::vector<std::string>{"before1", "before2"}));
  const Node* after = fused->find("after");
  ASSERT_EQ(after->control_inputs.size(), 1u);
  EXPECT_EQ(fused->node(after->control_inputs[0]), fr);
}

TEST(FusionTest, FusedKernelsByHand) {
  // 1x1 convolution of [1, -2, 0.5] (one row, depth 1) with filter 3 and bias 1:
  // 3x + 1 = [4, -5, 2.5]; ReLU: [4, 0, 2.5].
  Scope root = Scope::root();
  auto x = ops::constant(root, {1.f, -2.f, 0.5f}, {1, 1, 3, 1}, "x");
  auto f = ops::constant(root, {3.f}, {1, 1, 1, 1}, "f");
  auto b = ops::constant(root, {1.f}, {1}, "b");
  auto conv = NodeBuilder(root.with_op_name("fc"), "_FusedConv2D")
                  .input(x)
                  .input(f)
                  .input(b)
                  .attr("strides", kOnes)
                  .attr("padding", std::string("SAME"))
                  .attr(kFusedReluAttr, true)
                  .output();
  // [[1, 2], [-3, 1]] x [[1, 0], [0, -1]] = [[1, -2], [-3, -1]]; + [0.5, 0.5]; no ReLU.
  auto a = ops::constant(root, {1.f, 2.f, -3.f, 1.f}, {2, 2}, "a");
  auto w = ops::constant(root, {1.f, 0.f, 0.f, -1.f}, {2, 2}, "w");
  auto hb = ops::constant(root, {0.5f, 0.5f}, {2}, "hb");
  auto mm = NodeBuilder(root.with_op_name("fm"), "_FusedMatMul").input(a).input(w).input(hb).output();
  auto mm_relu =
      NodeBuilder(root.with_op_name("fmr"), "_FusedMatMul").input(a).input(w).input(hb).attr(kFusedReluAttr, true).output();
  // Max pooling 2x2 of [[1, -4], [-1, -2]] (max 1 at 0) and [[-1, -4], [-3, -2]] (max -1 at 0):
  // MaxPoolGrad routes each window's gradient to its max; the ReluGrad keeps it only where the
  // max is > 0: [7, 0, 0, 0] for gradient 7, [0, 0, 0, 0] for gradient 9.
  auto px = ops::constant(root, {1.f, -4.f, -1.f, -2.f, -1.f, -4.f, -3.f, -2.f}, {2, 2, 2, 1}, "px");
  auto pooled = ops::max_pool(root, px, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  auto g = ops::constant(root, {7.f, 9.f}, {2, 1, 1, 1}, "g");
  auto pg = NodeBuilder(root.with_op_name("fp"), "_FusedMaxPoolGrad")
                .input(px)
                .input(pooled)
                .input(g)
                .attr("ksize", std::vector<int64_t>{1, 2, 2, 1})
                .attr("strides", std::vector<int64_t>{1, 2, 2, 1})
                .attr("padding", std::string("VALID"))
                .output();
  // An empty inner dimension: each row is the bias, then the ReLU: [[1, 0], [1, 0]].
  auto a0 = ops::constant(root, Tensor(DType::kFloat32, Shape{2, 0}), "a0");
  auto w0 = ops::constant(root, Tensor(DType::kFloat32, Shape{0, 2}), "w0");
  auto b0 = ops::constant(root, {1.f, -1.f}, {2}, "b0");
  auto mm_empty =
      NodeBuilder(root.with_op_name("fme"), "_FusedMatMul").input(a0).input(w0).input(b0).attr(kFusedReluAttr, true).output();
  ASSERT_TRUE(root.ok()) << root.status();
  auto out = testing::eval_all(root, {conv, mm, mm_relu, pg, mm_empty});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(testing::vals<float>((*out)[4]), (std::vector<float>{1.f, 0.f, 1.f, 0.f}));
  EXPECT_EQ(testing::vals<float>((*out)[0]), (std::vector<float>{4.f, 0.f, 2.5f}));
  EXPECT_EQ(testing::vals<float>((*out)[1]), (std::vector<float>{1.5f, -1.5f, -2.5f, -0.5f}));
  EXPECT_EQ(testing::vals<float>((*out)[2]), (std::vector<float>{1.5f, 0.f, 0.f, 0.f}));
  EXPECT_EQ(testing::vals<float>((*out)[3]), (std::vector<float>{7.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}));
}

TEST(FusionTest, BadBiasIsAnErrorNamingTheOp) {
  Scope root = Scope::root();
  auto x = ops::constant(root, {1.f, 2.f}, {1, 1, 2, 1}, "x");
  auto f = ops::constant(root, {1.f, 1.f}, {1, 1, 1, 2}, "f");
  auto b = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "b");
  auto conv = NodeBuilder(root.with_op_name("fused_conv"), "_FusedConv2D")
                  .input(x)
                  .input(f)
                  .input(b)
                  .attr("strides", kOnes)
                  .attr("padding", std::string("SAME"))
                  .output();
  ASSERT_TRUE(root.ok()) << root.status();
  auto r = testing::eval(root, conv, {{"b", Tensor::from_vector<float>({1.f, 2.f, 3.f}, Shape{3})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fused_conv"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("bias of size 3"), std::string::npos) << r.status();
}

// A small CNN: conv(SAME) + bias + ReLU, 2x2 max pooling, a dense layer + bias + ReLU, logits +
// bias, softmax cross-entropy. Returns the loss and its gradients for every parameter and the
// input, run by a session with fusion as `fuse` says; `calls` receives how many kernel calls of
// each fused op the run made.
std::vector<Tensor> cnn_loss_and_gradients(bool fuse, std::map<std::string, int64_t>* calls) {
  Scope root = Scope::root();
  auto x = ops::constant(root, random_tensor(Shape{3, 8, 8, 2}, 1), "x");
  auto f = ops::constant(root, random_tensor(Shape{3, 3, 2, 4}, 2), "f");
  auto fb = ops::constant(root, random_tensor(Shape{4}, 3), "fb");
  auto w1 = ops::constant(root, random_tensor(Shape{64, 6}, 4), "w1");
  auto b1 = ops::constant(root, random_tensor(Shape{6}, 5), "b1");
  auto w2 = ops::constant(root, random_tensor(Shape{6, 3}, 6), "w2");
  auto b2 = ops::constant(root, random_tensor(Shape{3}, 7), "b2");
  Tensor labels(DType::kFloat32, Shape{3, 3});
  for (int i = 0; i < 3; ++i) labels.data<float>()[i * 3 + i] = 1;
  auto y = ops::relu(root, ops::bias_add(root, ops::conv2d(root, x, f, kOnes, "SAME"), fb));
  auto p = ops::max_pool(root, y, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  auto h = ops::relu(root, ops::bias_add(root, ops::matmul(root, ops::reshape(root, p, {3, 64}), w1), b1));
  auto logits = ops::bias_add(root, ops::matmul(root, h, w2), b2);
  auto loss = ops::reduce_sum(root, ops::softmax_cross_entropy_with_logits(root, logits, ops::constant(root, labels))[0]);
  auto grads = gradients(root, {loss}, {x, f, fb, w1, b1, w2, b2});
  EXPECT_TRUE(grads.ok()) << grads.status();
  if (!grads.ok()) return {};
  std::vector<Output> fetch{loss};
  fetch.insert(fetch.end(), grads->begin(), grads->end());
  const char* fused_ops[] = {"_FusedConv2D", "_FusedMatMul", "_FusedMaxPoolGrad"};
  std::map<std::string, int64_t> before;
  for (const char* op : fused_ops)
    before[op] = Metrics::global().counter_value("actorflow_kernel_calls_total", {{"op", op}});
  Session sess(root, "", SessionOptions().fuse_kernels(fuse));
  auto out = sess.run(fetch);
  EXPECT_TRUE(out.ok()) << out.status();
  for (const char* op : fused_ops)
    (*calls)[op] = Metrics::global().counter_value("actorflow_kernel_calls_total", {{"op", op}}) - before[op];
  return out.ok() ? *out : std::vector<Tensor>{};
}

TEST(FusionTest, SessionResultsEqualTheUnfusedGraphs) {
  EXPECT_TRUE(SessionOptions().fuse_kernels());
  std::map<std::string, int64_t> fused_calls, plain_calls;
  const std::vector<Tensor> fused = cnn_loss_and_gradients(true, &fused_calls);
  const std::vector<Tensor> plain = cnn_loss_and_gradients(false, &plain_calls);
  // The fused session ran the fused kernels (conv, both dense layers, the pooling gradient);
  // the other none.
  EXPECT_EQ(fused_calls["_FusedConv2D"], 1);
  EXPECT_EQ(fused_calls["_FusedMatMul"], 2);
  EXPECT_EQ(fused_calls["_FusedMaxPoolGrad"], 1);
  for (const auto& [op, n] : plain_calls) EXPECT_EQ(n, 0) << op;
  ASSERT_EQ(fused.size(), 8u);
  ASSERT_EQ(plain.size(), 8u);
  const char* names[] = {"loss", "dx", "df", "dfb", "dw1", "db1", "dw2", "db2"};
  for (size_t i = 0; i < fused.size(); ++i) {
    ASSERT_EQ(fused[i].shape(), plain[i].shape()) << names[i];
    double worst = 0;
    for (int64_t j = 0; j < fused[i].num_elements(); ++j) {
      const double a = fused[i].data<float>()[j], b = plain[i].data<float>()[j];
      ASSERT_TRUE(std::isfinite(a)) << names[i];
      worst = std::max(worst, std::fabs(a - b) / std::max(1.0, std::fabs(b)));
    }
    EXPECT_LT(worst, 1e-5) << names[i];
  }
  // Not all zero: the gradients carry information through the fused ReLUs and pooling.
  double sum = 0;
  for (int64_t j = 0; j < fused[2].num_elements(); ++j) sum += std::fabs(fused[2].data<float>()[j]);
  EXPECT_GT(sum, 1e-3);
}

}  // namespace
}  // namespace actorflow
