#include <gtest/gtest.h>

#include <stdexcept>

#include "device/executor.h"
#include "graph/ops.h"
#include "graph/ops_variables.h"
#include "tests/util/partition_nodes.h"

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

// Partition-style nodes as the master's partitioner inserts them (runtime/partition.cc).
using testutil::recv_node;
using testutil::retval_node;
using testutil::send_node;

const char* const kCpu0 = "/job:w/replica:0/task:0/device:CPU:0";
const char* const kCpu1 = "/job:w/replica:0/task:0/device:CPU:1";

class SyncThrowingKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext&) override { throw std::runtime_error("never run"); }
};
class NeverDoneAsyncKernel : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;
  void compute_async(std::shared_ptr<OpKernelContext>, DoneCallback) override {}
};

TEST(ExecutorTest, RecvAddRetvalIsSelfContainedWithItsRecvKey) {
  const std::string key = std::string(kCpu1) + ";" + kCpu0 + ";x:0";
  Scope root = Scope::root();
  auto r = recv_node(root, "r", key, DType::kFloat32, Shape{2});
  auto sum = ops::add(root.with_op_name("sum"), r, ops::constant(root, {10, 20}, {2}, "c"));
  ASSERT_NE(retval_node(root, "ret", sum, 0), nullptr);
  ASSERT_TRUE(root.ok()) << root.status();
  auto dev = make_cpu_device(kCpu0, 0);
  auto ex = Executor::create(std::make_shared<const Graph>(*root.graph()), dev.get());
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE((*ex)->self_contained());
  EXPECT_EQ((*ex)->recv_keys(), std::vector<std::string>{key});
  EXPECT_EQ((*ex)->num_args(), 0);
  EXPECT_EQ((*ex)->num_retvals(), 1);
  // Given its _Recv tensor up front, a single run() ends the step.
  StepExecution step(*ex, 3, {}, nullptr);
  step.deliver(key, Tensor::from_vector<float>({1.5f, 2.5f}, {2}));
  step.run();
  ASSERT_TRUE(step.done());
  ASSERT_TRUE(step.status().ok()) << step.status();
  EXPECT_EQ(step.retvals()[0].to_string(), "[11.5 22.5]");
}

TEST(ExecutorTest, RecvKeysAreInNodeOrderAndConstOnlyGraphHasNone) {
  Scope root = Scope::root();
  auto b = recv_node(root, "rb", "k_b", DType::kFloat32, Shape{1});
  auto a = recv_node(root, "ra", "k_a", DType::kFloat32, Shape{1});
  auto c = recv_node(root, "rc", "k_c", DType::kFloat32, Shape{1});
  ASSERT_NE(retval_node(root, "ret", ops::add_n(root, {a, b, c}), 0), nullptr);
  ASSERT_TRUE(root.ok()) << root.status();
  auto dev = make_cpu_device(kCpu0, 0);
  auto ex = Executor::create(std::make_shared<const Graph>(*root.graph()), dev.get());
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ((*ex)->recv_keys(), (std::vector<std::string>{"k_b", "k_a", "k_c"}));
  EXPECT_TRUE((*ex)->self_contained());

  Scope root2 = Scope::root();
  ASSERT_NE(retval_node(root2, "ret", ops::constant(root2, {1}, {1}, "c"), 0), nullptr);
  ASSERT_TRUE(root2.ok()) << root2.status();
  auto ex2 = Executor::create(std::make_shared<const Graph>(*root2.graph()), dev.get());
  ASSERT_TRUE(ex2.ok()) << ex2.status();
  EXPECT_TRUE((*ex2)->recv_keys().empty());
  EXPECT_TRUE((*ex2)->self_contained());
}

TEST(ExecutorTest, PartitionWithSendIsNotSelfContained) {
  const std::string in_key = std::string(kCpu1) + ";" + kCpu0 + ";x:0";
  const std::string out_key = std::string(kCpu0) + ";" + kCpu1 + ";sum:0";
  Scope root = Scope::root();
  auto r = recv_node(root, "r", in_key, DType::kFloat32, Shape{2});
  auto sum = ops::add(root.with_op_name("sum"), r, ops::constant(root, {10, 20}, {2}, "c"));
  ASSERT_NE(send_node(root, "send", sum, out_key), nullptr);
  ASSERT_TRUE(root.ok()) << root.status();
  auto dev = make_cpu_device(kCpu0, 0);
  auto ex = Executor::create(std::make_shared<const Graph>(*root.graph()), dev.get());
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_FALSE((*ex)->self_contained());
  // recv_keys lists only the _Recvs, never the _Send's key.
  EXPECT_EQ((*ex)->recv_keys(), std::vector<std::string>{in_key});

  // A _Send alone (no _Recv) is not self-contained either.
  Scope root2 = Scope::root();
  ASSERT_NE(send_node(root2, "send", ops::constant(root2, {1}, {1}, "c"), out_key), nullptr);
  ASSERT_TRUE(root2.ok()) << root2.status();
  auto ex2 = Executor::create(std::make_shared<const Graph>(*root2.graph()), dev.get());
  ASSERT_TRUE(ex2.ok()) << ex2.status();
  EXPECT_FALSE((*ex2)->self_contained());
  EXPECT_TRUE((*ex2)->recv_keys().empty());
}

TEST(ExecutorTest, VariableOpsAreAsyncSoNotSelfContained) {
  auto dev = make_cpu_device(kCpu0, 0);
  {
    Scope root = Scope::root();
    auto v = ops::variable(root.with_op_name("v"), Shape{2}, DType::kFloat32);
    ASSERT_NE(retval_node(root, "ret", v, 0), nullptr);
    ASSERT_TRUE(root.ok()) << root.status();
    auto ex = Executor::create(std::make_shared<const Graph>(*root.graph()), dev.get());
    ASSERT_TRUE(ex.ok()) << ex.status();
    EXPECT_FALSE((*ex)->self_contained());
    EXPECT_TRUE((*ex)->recv_keys().empty());
  }
  {
    // Assign alone makes it async: VariableV2 is overridden by a synchronous kernel here, so
    // the Assign (a variable call) is the only AsyncOpKernel. Its _Recv key is still listed.
    Scope root = Scope::root();
    auto v = ops::variable(root.with_op_name("v"), Shape{2}, DType::kFloat32);
    auto r = recv_node(root, "r", "k", DType::kFloat32, Shape{2});
    auto a = ops::assign(root.with_op_name("assign"), v, r);
    ASSERT_NE(retval_node(root, "ret", a, 0), nullptr);
    ASSERT_TRUE(root.ok()) << root.status();
    auto ex = Executor::create(std::make_shared<const Graph>(*root.graph()), dev.get(),
                               [](const Node& n) -> Result<std::unique_ptr<OpKernel>> {
                                 if (n.op == "VariableV2") return std::unique_ptr<OpKernel>(new SyncThrowingKernel(n));
                                 return std::unique_ptr<OpKernel>();
                               });
    ASSERT_TRUE(ex.ok()) << ex.status();
    EXPECT_FALSE((*ex)->self_contained());
    EXPECT_EQ((*ex)->recv_keys(), std::vector<std::string>{"k"});
  }
}

TEST(ExecutorTest, KernelOverridesDecideSelfContainment) {
  Scope root = Scope::root();
  auto r = recv_node(root, "r", "k", DType::kFloat32, Shape{2});
  auto id = ops::identity(root.with_op_name("id"), r);
  ASSERT_NE(retval_node(root, "ret", id, 0), nullptr);
  ASSERT_TRUE(root.ok()) << root.status();
  auto g = std::make_shared<const Graph>(*root.graph());
  auto dev = make_cpu_device(kCpu0, 0);
  // An asynchronous override makes it not self-contained ...
  auto async_ex = Executor::create(g, dev.get(), [](const Node& n) -> Result<std::unique_ptr<OpKernel>> {
    if (n.name == "id") return std::unique_ptr<OpKernel>(new NeverDoneAsyncKernel(n));
    return std::unique_ptr<OpKernel>();
  });
  ASSERT_TRUE(async_ex.ok()) << async_ex.status();
  EXPECT_FALSE((*async_ex)->self_contained());
  // ... a synchronous one keeps it self-contained.
  auto sync_ex = Executor::create(g, dev.get(), [](const Node& n) -> Result<std::unique_ptr<OpKernel>> {
    if (n.name == "id") return std::unique_ptr<OpKernel>(new SyncThrowingKernel(n));
    return std::unique_ptr<OpKernel>();
  });
  ASSERT_TRUE(sync_ex.ok()) << sync_ex.status();
  EXPECT_TRUE((*sync_ex)->self_contained());
  EXPECT_EQ((*sync_ex)->recv_keys(), std::vector<std::string>{"k"});
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
