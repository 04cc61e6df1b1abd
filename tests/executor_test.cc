#include <gtest/gtest.h>

#include "device/executor.h"
#include "graph/ops.h"

namespace actorflow {
namespace {

TEST(ExecutorTest, ConstIdentityAndFeeds) {
  Scope root = Scope::root();
  auto a = ops::constant(root, {1, 2, 3, 4}, {2, 2}, "a");
  auto b = ops::identity(root.with_op_name("b"), a);
  (void)b;
  auto p = ops::placeholder(root, DType::kFloat32, Shape{-1, 2}, "p");
  auto q = ops::identity(root.with_op_name("q"), p);
  (void)q;
  ASSERT_TRUE(root.ok()) << root.status();
  auto dev = make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0);
  auto out = run_local(*root.graph(), {"b", "q"}, {{"p", Tensor::from_vector<float>({5, 6}, {1, 2})}}, dev.get());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].to_string(), "[[1. 2.]\n [3. 4.]]");
  EXPECT_EQ((*out)[1].to_string(), "[[5. 6.]]");
  // Feeding a constant overrides it.
  auto out2 = run_local(*root.graph(), {"b"}, {{"a", Tensor::from_vector<float>({9, 9, 9, 9}, {2, 2})}}, dev.get());
  ASSERT_TRUE(out2.ok()) << out2.status();
  EXPECT_EQ((*out2)[0].to_string(), "[[9. 9.]\n [9. 9.]]");
}

TEST(ExecutorTest, BadFeedsAndFetchesNamed) {
  Scope root = Scope::root();
  auto p = ops::placeholder(root, DType::kFloat32, Shape{-1, 2}, "p");
  ops::identity(root.with_op_name("q"), p);
  auto dev = make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0);
  auto r1 = run_local(*root.graph(), {"nope"}, {}, dev.get());
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find("fetch 'nope'"), std::string::npos) << r1.status();
  auto r2 = run_local(*root.graph(), {"q"}, {{"p", Tensor::from_vector<int32_t>({1, 2}, {1, 2})}}, dev.get());
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("feed 'p'"), std::string::npos) << r2.status();
  EXPECT_NE(r2.status().message().find("expected float32, got int32"), std::string::npos) << r2.status();
  auto r3 = run_local(*root.graph(), {"q"}, {{"p", Tensor::from_vector<float>({1, 2, 3}, {1, 3})}}, dev.get());
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().message().find("expected shape [?,2], got [1,3]"), std::string::npos) << r3.status();
}

TEST(ExecutorTest, RecvParksUntilDelivered) {
  Graph g;
  Node recv;
  recv.name = "r";
  recv.op = "_Recv";
  recv.attrs.set("tensor_name", std::string("edge_x"));
  recv.attrs.set("dtype", DType::kFloat32);
  recv.output_types = {DType::kFloat32};
  recv.output_shapes = {Shape{2}};
  Node* rn = *g.add_node(recv);
  Node ret;
  ret.name = "ret";
  ret.op = "_Retval";
  ret.inputs = {Endpoint{rn->id, 0}};
  ret.attrs.set("index", int64_t{0});
  ASSERT_TRUE(g.add_node(ret).ok());
  auto dev = make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0);
  auto ex = Executor::create(std::make_shared<const Graph>(g), dev.get());
  ASSERT_TRUE(ex.ok()) << ex.status();
  StepExecution step(*ex, 7, {}, nullptr);
  step.run();
  EXPECT_FALSE(step.done());
  ASSERT_EQ(step.waiting_for().size(), 1u);
  EXPECT_EQ(step.waiting_for()[0], "edge_x");
  step.deliver("edge_x", Tensor::from_vector<float>({1.5f, 2.5f}, {2}));
  step.run();
  ASSERT_TRUE(step.done());
  ASSERT_TRUE(step.status().ok());
  EXPECT_EQ(step.retvals()[0].to_string(), "[1.5 2.5]");
}

TEST(ScopeTest, NamesAndErrors) {
  Scope root = Scope::root();
  auto a = ops::constant(root, {1}, {1}, "a");
  auto a2 = ops::constant(root, {1}, {1}, "a");
  EXPECT_EQ(a.name(), "a");
  EXPECT_EQ(a2.name(), "a_1");
  Scope sub = root.new_sub_scope("tower");
  auto c = ops::identity(sub, a);
  EXPECT_EQ(c.name(), "tower/Identity");
  auto bad = ops::constant(root, {1, 2, 3}, {2, 2}, "bad");
  EXPECT_FALSE(bad.valid());
  EXPECT_FALSE(root.ok());
  EXPECT_NE(root.status().message().find("3 values do not fill shape [2,2]"), std::string::npos) << root.status();
}

}  // namespace
}  // namespace actorflow
