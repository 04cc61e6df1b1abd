// The placer: explicit and partial requests, the default device, colocation groups
// (colocate_with, variable consumers, _Retval), soft placement and its log line, the
// errors without it, and TensorFlow's placement log format.
#include <gtest/gtest.h>

#include "device/kernel.h"
#include "graph/ops.h"
#include "runtime/placer.h"
#include "graph/subgraph.h"

namespace actorflow {
namespace {

const char* kCpu0 = "/job:localhost/replica:0/task:0/device:CPU:0";
const char* kCpu1 = "/job:localhost/replica:0/task:0/device:CPU:1";
const char* kGpu0 = "/job:localhost/replica:0/task:0/device:GPU:0";
const char* kGpu1 = "/job:localhost/replica:0/task:0/device:GPU:1";

class ForwardKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    if (ctx.num_inputs() > 0) ctx.set_output(0, ctx.release_input(0));
    return Status::OK();
  }
};

// Test-only ops, registered unless a real definition exists already: a variable, an
// Assign, a MatMul (for the seed's log line) and an op with only a CPU kernel.
void register_test_ops() {
  static bool done = [] {
    OpRegistry& ops = OpRegistry::global();
    KernelRegistry& kernels = KernelRegistry::global();
    auto first_input = [](InferenceContext& c) -> Status {
      c.set_output(0, c.input_type(0), c.input_shape(0));
      return Status::OK();
    };
    if (!ops.lookup("VariableV2").ok()) {
      ops.add({"VariableV2", 0, [](InferenceContext& c) -> Status {
                 AF_ASSIGN_OR_RETURN(DType t, c.attrs().get<DType>("dtype"));
                 c.set_output(0, t, c.attrs().get_or<Shape>("shape", Shape::unknown()));
                 return Status::OK();
               }, nullptr, true, true});
      kernels.add("VariableV2", "CPU", simple_factory<ForwardKernel>());
      kernels.add("VariableV2", "GPU", simple_factory<ForwardKernel>());
    }
    if (!ops.lookup("AssignSub").ok()) {
      ops.add({"AssignSub", 2, first_input, nullptr, true});
      kernels.add("AssignSub", "CPU", simple_factory<ForwardKernel>());
    }
    if (!ops.lookup("MatMul").ok()) {
      ops.add({"MatMul", 2, [](InferenceContext& c) -> Status {
                 c.set_output(0, c.input_type(0), Shape{c.input_shape(0).dim(0), c.input_shape(1).dim(1)});
                 return Status::OK();
               }});
      kernels.add("MatMul", "CPU", simple_factory<ForwardKernel>());
    }
    ops.add({"CpuOnlyOp", 1, first_input});
    kernels.add("CpuOnlyOp", "CPU", simple_factory<ForwardKernel>());
    return true;
  }();
  (void)done;
}

class PlacerTest : public ::testing::Test {
 protected:
  void SetUp() override { register_test_ops(); }
};

std::vector<AvailableDevice> local_cpus() { return {{kCpu0, "CPU"}, {kCpu1, "CPU"}}; }
// Placer options that ask the kernel registry (as the master does) which kernels exist.
PlacerOptions with_registry_kernels() {
  PlacerOptions o;
  o.has_kernel = [](const std::string& op, const std::string& type) { return KernelRegistry::global().has(op, type); };
  return o;
}

std::vector<AvailableDevice> local_with_gpus() { return {{kCpu0, "CPU"}, {kGpu0, "GPU"}, {kGpu1, "GPU"}}; }
std::vector<AvailableDevice> cluster() {
  return {{"/job:ps/replica:0/task:0/device:CPU:0", "CPU"},
          {"/job:worker/replica:0/task:0/device:CPU:0", "CPU"},
          {"/job:worker/replica:0/task:0/device:GPU:0", "GPU"},
          {"/job:worker/replica:0/task:1/device:CPU:0", "CPU"}};
}

Output variable(const Scope& s, const std::string& name) {
  return NodeBuilder(s.with_op_name(name), "VariableV2")
      .attr("dtype", DType::kFloat32)
      .attr("shape", Shape{2})
      .output();
}

std::string dev(const Graph& g, const std::string& name) {
  const Node* n = g.find(name);
  return n ? n->assigned_device : "<no node " + name + ">";
}

TEST_F(PlacerTest, SeedLogLinesInTensorFlowFormat) {
  Scope root = Scope::root();
  auto a = ops::constant(root, {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
  auto b = ops::constant(root, {1, 2, 3, 4, 5, 6}, {3, 2}, "b");
  NodeBuilder(root, "MatMul").input(a).input(b).attr("transpose_a", false).attr("transpose_b", false).finalize();
  ASSERT_TRUE(root.ok()) << root.status();
  PlacerOptions opts = with_registry_kernels();
  opts.log_device_placement = true;
  opts.default_device = kCpu0;
  ::testing::internal::CaptureStderr();
  auto lines = place_graph(*root.graph(), local_cpus(), opts);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(lines.ok()) << lines.status();
  const std::vector<std::string> want = {
      "a: (Const): /job:localhost/replica:0/task:0/device:CPU:0",
      "b: (Const): /job:localhost/replica:0/task:0/device:CPU:0",
      "MatMul: (MatMul): /job:localhost/replica:0/task:0/device:CPU:0",
  };
  EXPECT_EQ(*lines, want);
  for (const auto& l : want) EXPECT_NE(err.find("] " + l + "\n"), std::string::npos) << err;
  EXPECT_EQ(dev(*root.graph(), "MatMul"), kCpu0);

  // Without log_device_placement nothing is printed, the lines are still returned.
  Scope r2 = Scope::root();
  ops::constant(r2, {1}, {1}, "a");
  opts.log_device_placement = false;
  ::testing::internal::CaptureStderr();
  auto quiet = place_graph(*r2.graph(), local_cpus(), opts);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(quiet.ok());
  EXPECT_EQ(quiet->size(), 1u);
}

TEST_F(PlacerTest, UnconstrainedNodesPreferGpuLikeTensorFlowWhenTheDefaultHasNoType) {
  // The seed's first run: no tf.device, a GPU present -> Const and Identity land on GPU:0.
  Scope root = Scope::root();
  auto a = ops::constant(root, {1, 2}, {2}, "a");
  ops::identity(root.with_op_name("i"), a);
  NodeBuilder(root.with_op_name("cpu_only"), "CpuOnlyOp").input(a).finalize();
  ASSERT_TRUE(root.ok()) << root.status();
  PlacerOptions opts = with_registry_kernels();
  opts.default_device = "/job:localhost/replica:0/task:0";
  auto lines = place_graph(*root.graph(), local_with_gpus(), opts);
  ASSERT_TRUE(lines.ok()) << lines.status();
  EXPECT_EQ(dev(*root.graph(), "a"), kGpu0);
  EXPECT_EQ(dev(*root.graph(), "i"), kGpu0);
  EXPECT_EQ(dev(*root.graph(), "cpu_only"), kCpu0);  // no GPU kernel: the next type, silently
}

TEST_F(PlacerTest, ExplicitRequestsAreHonoured) {
  Scope root = Scope::root();
  auto a = ops::constant(root.with_device("/gpu:1"), {1}, {1}, "a");
  ops::identity(root.with_device("/cpu:0").with_op_name("b"), a);
  ops::identity(root.with_device(kGpu0).with_op_name("c"), a);
  ops::identity(root.with_device("/device:GPU:*").with_op_name("d"), a);
  ops::identity(root.with_op_name("e"), a);
  ASSERT_TRUE(root.ok()) << root.status();
  PlacerOptions opts = with_registry_kernels();
  opts.default_device = kCpu0;
  auto lines = place_graph(*root.graph(), local_with_gpus(), opts);
  ASSERT_TRUE(lines.ok()) << lines.status();
  const Graph& g = *root.graph();
  EXPECT_EQ(dev(g, "a"), kGpu1);
  EXPECT_EQ(dev(g, "b"), kCpu0);
  EXPECT_EQ(dev(g, "c"), kGpu0);
  EXPECT_EQ(dev(g, "d"), kGpu0);  // any GPU: the lowest index
  EXPECT_EQ(dev(g, "e"), kCpu0);  // unconstrained: the default device
  EXPECT_EQ((*lines)[0], std::string("a: (Const): ") + kGpu1);
}

TEST_F(PlacerTest, PartialSpecsAreFilledFromTheDefaultDevice) {
  Scope root = Scope::root();
  auto x = ops::constant(root, {1}, {1}, "x");
  ops::identity(root.with_device("/task:1").with_op_name("t1"), x);
  ops::identity(root.with_device("/gpu:0").with_op_name("g"), x);
  ops::identity(root.with_device("/job:ps").with_op_name("p"), x);
  ops::identity(root.with_device("/job:worker/task:1").with_op_name("w1"), x);
  ops::identity(root.with_device("/job:worker").with_device("/cpu:0").with_op_name("nested"), x);
  ASSERT_TRUE(root.ok()) << root.status();
  PlacerOptions opts = with_registry_kernels();
  opts.default_device = "/job:worker/replica:0/task:0/device:CPU:0";
  auto lines = place_graph(*root.graph(), cluster(), opts);
  ASSERT_TRUE(lines.ok()) << lines.status();
  const Graph& g = *root.graph();
  EXPECT_EQ(dev(g, "x"), "/job:worker/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(dev(g, "t1"), "/job:worker/replica:0/task:1/device:CPU:0");
  EXPECT_EQ(dev(g, "g"), "/job:worker/replica:0/task:0/device:GPU:0");
  EXPECT_EQ(dev(g, "p"), "/job:ps/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(dev(g, "w1"), "/job:worker/replica:0/task:1/device:CPU:0");
  EXPECT_EQ(dev(g, "nested"), "/job:worker/replica:0/task:0/device:CPU:0");
}

TEST_F(PlacerTest, ColocateWithPlacesTheGroupTogether) {
  Scope root = Scope::root();
  auto a = ops::constant(root.with_device("/job:ps/task:0"), {1}, {1}, "a");
  // b asks for nothing but must share a's device; c asks for a compatible GPU-less spec.
  ops::identity(root.colocate_with(a).with_op_name("b"), a);
  ops::identity(root.colocate_with(a).with_device("/cpu:0").with_op_name("c"), a);
  ops::identity(root.with_op_name("free"), a);
  ASSERT_TRUE(root.ok()) << root.status();
  PlacerOptions opts = with_registry_kernels();
  opts.default_device = "/job:worker/replica:0/task:0/device:CPU:0";
  auto lines = place_graph(*root.graph(), cluster(), opts);
  ASSERT_TRUE(lines.ok()) << lines.status();
  const Graph& g = *root.graph();
  EXPECT_EQ(dev(g, "a"), "/job:ps/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(dev(g, "b"), "/job:ps/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(dev(g, "c"), "/job:ps/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(dev(g, "free"), "/job:worker/replica:0/task:0/device:CPU:0");
}

TEST_F(PlacerTest, ConflictingColocationRequestsAreAnErrorNamingBothNodes) {
  Scope root = Scope::root();
  auto a = ops::constant(root.with_device("/job:ps/task:0"), {1}, {1}, "a");
  ops::identity(root.colocate_with(a).with_device("/job:worker/task:1").with_op_name("c"), a);
  ASSERT_TRUE(root.ok());
  PlacerOptions opts = with_registry_kernels();  // soft placement does not resolve a job conflict
  opts.default_device = "/job:worker/replica:0/task:0/device:CPU:0";
  auto r = place_graph(*root.graph(), cluster(), opts);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  const std::string m = r.status().message();
  EXPECT_NE(m.find("Cannot colocate nodes 'a' (Const) and 'c' (Identity)"), std::string::npos) << m;
  EXPECT_NE(m.find("different jobs (/job:ps/task:0 vs /job:worker/task:1)"), std::string::npos) << m;
  // On error the graph is untouched.
  EXPECT_EQ(dev(*root.graph(), "a"), "");
}

TEST_F(PlacerTest, DeviceTypeConflictInAGroupNeedsSoftPlacement) {
  Scope root = Scope::root();
  auto a = ops::constant(root.with_device("/gpu:0"), {1}, {1}, "a");
  ops::identity(root.colocate_with(a).with_device("/cpu:0").with_op_name("b"), a);
  ASSERT_TRUE(root.ok());
  PlacerOptions hard = with_registry_kernels();
  hard.allow_soft_placement = false;
  hard.default_device = kCpu0;
  Graph g1 = *root.graph();
  auto r = place_graph(g1, local_with_gpus(), hard);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Cannot colocate nodes 'a' (Const) and 'b' (Identity)"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("different device types (/device:GPU:0 vs /device:CPU:0)"), std::string::npos)
      << r.status();

  PlacerOptions soft = with_registry_kernels();
  soft.default_device = kCpu0;
  Graph g2 = *root.graph();
  ::testing::internal::CaptureStderr();
  auto ok = place_graph(g2, local_with_gpus(), soft);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(dev(g2, "a"), dev(g2, "b"));
  EXPECT_EQ(dev(g2, "a"), kCpu0);
  EXPECT_NE(err.find("W "), std::string::npos) << err;
  EXPECT_NE(err.find("soft placement ignores the device type"), std::string::npos) << err;
}

TEST_F(PlacerTest, VariableConsumersAreColocatedWithTheVariable) {
  Scope root = Scope::root();
  auto v = variable(root.with_device("/job:ps/task:0"), "v");
  auto init = ops::constant(root, {1, 2}, {2}, "init");
  // Assign is built in the worker's default scope but must run where v lives.
  NodeBuilder(root.with_op_name("assign"), "AssignSub").input(v).input(init).finalize();
  // A plain reader is not a ref consumer: it stays on the default device.
  ops::identity(root.with_op_name("read"), v);
  ASSERT_TRUE(root.ok()) << root.status();
  PlacerOptions opts = with_registry_kernels();
  opts.default_device = "/job:worker/replica:0/task:0/device:CPU:0";
  auto lines = place_graph(*root.graph(), cluster(), opts);
  ASSERT_TRUE(lines.ok()) << lines.status();
  const Graph& g = *root.graph();
  EXPECT_EQ(dev(g, "v"), "/job:ps/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(dev(g, "assign"), "/job:ps/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(dev(g, "init"), "/job:worker/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(dev(g, "read"), "/job:worker/replica:0/task:0/device:CPU:0");
  EXPECT_TRUE(is_variable_op("VariableV2"));
  EXPECT_TRUE(is_ref_consumer_op("ApplyGradientDescent"));
  EXPECT_TRUE(is_ref_consumer_op("ResourceApplyAdam"));
  EXPECT_FALSE(is_ref_consumer_op("MatMul"));
}

TEST_F(PlacerTest, TaskAliasesMoveAFailedOverTasksOpsToItsBackup) {
  Scope root = Scope::root();
  auto v = variable(root.with_device("/job:ps/task:0"), "v");
  auto w = variable(root.with_device("/job:ps/replica:0/task:1/device:CPU:0"), "w");
  auto init = ops::constant(root, {1, 2}, {2}, "init");
  NodeBuilder(root.with_op_name("assign"), "AssignSub").input(v).input(init).finalize();
  (void)w;
  ASSERT_TRUE(root.ok()) << root.status();
  std::vector<AvailableDevice> devs = cluster();
  devs.push_back({"/job:ps/replica:0/task:1/device:CPU:0", "CPU"});
  PlacerOptions opts = with_registry_kernels();
  opts.default_device = "/job:worker/replica:0/task:0/device:CPU:0";
  // ps/0 failed over to ps/1: its variable and the variable's consumer go there; ps/1's own
  // variable and the worker's op stay; an alias for a task nobody names changes nothing.
  opts.task_aliases = {{"/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"},
                       {"/job:ps/replica:0/task:7", "/job:ps/replica:0/task:0"}};
  auto lines = place_graph(*root.graph(), devs, opts);
  ASSERT_TRUE(lines.ok()) << lines.status();
  const Graph& g = *root.graph();
  EXPECT_EQ(dev(g, "v"), "/job:ps/replica:0/task:1/device:CPU:0");
  EXPECT_EQ(dev(g, "assign"), "/job:ps/replica:0/task:1/device:CPU:0");
  EXPECT_EQ(dev(g, "w"), "/job:ps/replica:0/task:1/device:CPU:0");
  EXPECT_EQ(dev(g, "init"), "/job:worker/replica:0/task:0/device:CPU:0");

  // apply_task_aliases itself: the device part is kept, a different replica is not matched,
  // malformed entries are skipped.
  auto spec = DeviceSpec::parse("/job:ps/task:0/device:CPU:0");
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(apply_task_aliases(*spec, {{"garbage", "x"}, {"/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"}}));
  EXPECT_EQ(spec->to_string(), "/job:ps/replica:0/task:1/device:CPU:0");
  auto other = DeviceSpec::parse("/job:ps/replica:2/task:0");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(apply_task_aliases(*other, {{"/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"}}));
  auto no_task = DeviceSpec::parse("/job:ps");
  ASSERT_TRUE(no_task.ok());
  EXPECT_FALSE(apply_task_aliases(*no_task, {{"/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"}}));
  EXPECT_FALSE(apply_task_aliases(*spec, {{"/job:ps/replica:0/task:1", "not a device"}}));
}

TEST_F(PlacerTest, ArgAndRetvalFollowWhatTheyCarry) {
  Scope root = Scope::root();
  auto p = ops::placeholder(root.with_device("/job:worker/task:1"), DType::kFloat32, Shape{2}, "p");
  ops::constant(root.with_device("/job:ps"), {1, 2}, {2}, "a");
  ops::identity(root.with_device("/job:worker/task:0").with_op_name("q"), p);
  ASSERT_TRUE(root.ok());
  RunSignature sig;
  sig.feeds = {"p"};
  sig.fetches = {"a", "q"};
  auto rewritten = rewrite_for_run(*root.graph(), sig);
  ASSERT_TRUE(rewritten.ok()) << rewritten.status();
  Graph g = std::move(*rewritten);
  PlacerOptions opts = with_registry_kernels();
  opts.default_device = "/job:worker/replica:0/task:0/device:CPU:0";
  auto lines = place_graph(g, cluster(), opts);
  ASSERT_TRUE(lines.ok()) << lines.status();
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node* n = g.node(id);
    if (n->op == "_Retval") {
      EXPECT_EQ(n->assigned_device, g.node(n->inputs[0].node)->assigned_device) << n->name;
    } else if (n->op == "_Arg") {
      EXPECT_EQ(n->assigned_device, "/job:worker/replica:0/task:1/device:CPU:0") << n->name;
    }
  }
  EXPECT_EQ(dev(g, "a"), "/job:ps/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(dev(g, "q"), "/job:worker/replica:0/task:0/device:CPU:0");
}

TEST_F(PlacerTest, SoftPlacementFallsBackToTheCpuWithALogLine) {
  Scope root = Scope::root();
  auto a = ops::constant(root.with_device("/gpu:0"), {1}, {1}, "a");
  NodeBuilder(root.with_device("/gpu:0").with_op_name("x"), "CpuOnlyOp").input(a).finalize();
  ASSERT_TRUE(root.ok());
  PlacerOptions opts = with_registry_kernels();
  opts.default_device = kCpu0;
  // CPU-only task: the GPU does not exist.
  {
    Graph g = *root.graph();
    ::testing::internal::CaptureStderr();
    auto r = place_graph(g, local_cpus(), opts);
    const std::string err = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(dev(g, "a"), kCpu0);
    EXPECT_NE(err.find("Node 'a' requested /job:localhost/replica:0/task:0/device:GPU:0 which does not exist; "
                       "soft placement put it on /job:localhost/replica:0/task:0/device:CPU:0"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("W "), std::string::npos) << err;
  }
  // A GPU exists but has no kernel for CpuOnlyOp: x goes to the CPU, a stays on the GPU.
  {
    Graph g = *root.graph();
    ::testing::internal::CaptureStderr();
    auto r = place_graph(g, local_with_gpus(), opts);
    const std::string err = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(dev(g, "a"), kGpu0);
    EXPECT_EQ(dev(g, "x"), kCpu0);
    EXPECT_NE(err.find("Node 'x' requested /job:localhost/replica:0/task:0/device:GPU:0 which has no GPU kernel for "
                       "CpuOnlyOp; soft placement put it on /job:localhost/replica:0/task:0/device:CPU:0"),
              std::string::npos)
        << err;
  }
  // A missing GPU index falls back to an existing GPU first.
  {
    Scope r3 = Scope::root();
    ops::constant(r3.with_device("/gpu:7"), {1}, {1}, "big");
    Graph g = *r3.graph();
    ::testing::internal::CaptureStderr();
    auto r = place_graph(g, local_with_gpus(), opts);
    ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(dev(g, "big"), kGpu0);
  }
}

TEST_F(PlacerTest, WithoutSoftPlacementAMissingDeviceIsAnErrorListingDevices) {
  Scope root = Scope::root();
  ops::constant(root.with_device("/gpu:0"), {1}, {1}, "a");
  ASSERT_TRUE(root.ok());
  PlacerOptions opts = with_registry_kernels();
  opts.allow_soft_placement = false;
  opts.default_device = kCpu0;
  auto r = place_graph(*root.graph(), local_cpus(), opts);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find(
                "Cannot assign a device for operation 'a' (Const): Operation was explicitly assigned to "
                "/device:GPU:0 but available devices are [ /job:localhost/replica:0/task:0/device:CPU:0, "
                "/job:localhost/replica:0/task:0/device:CPU:1 ]"),
            std::string::npos)
      << r.status();
  EXPECT_EQ(dev(*root.graph(), "a"), "");

  // A GPU without the kernel: the kernel is named.
  Scope r2 = Scope::root();
  auto c = ops::constant(r2, {1}, {1}, "c");
  NodeBuilder(r2.with_device("/gpu:0").with_op_name("x"), "CpuOnlyOp").input(c).finalize();
  auto r3 = place_graph(*r2.graph(), local_with_gpus(), opts);
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().message().find("Cannot assign a device for operation 'x' (CpuOnlyOp): Could not satisfy "
                                       "explicit device specification '/device:GPU:0' because no supported kernel "
                                       "for GPU devices is available"),
            std::string::npos)
      << r3.status();
}

TEST_F(PlacerTest, UnknownTaskOrJobIsAnErrorEvenWithSoftPlacement) {
  PlacerOptions opts = with_registry_kernels();
  opts.default_device = "/job:worker/replica:0/task:0/device:CPU:0";
  for (const char* spec : {"/job:worker/task:5", "/job:chief", "/job:ps/replica:1"}) {
    Scope root = Scope::root();
    ops::constant(root.with_device(spec), {1}, {1}, "x");
    auto r = place_graph(*root.graph(), cluster(), opts);
    ASSERT_FALSE(r.ok()) << spec;
    const std::string m = r.status().message();
    EXPECT_NE(m.find("operation 'x' (Const)"), std::string::npos) << m;
    EXPECT_NE(m.find(std::string("requests ") + spec), std::string::npos) << m;
    EXPECT_NE(m.find("the cluster has no task"), std::string::npos) << m;
    EXPECT_NE(m.find("/job:ps/replica:0/task:0, /job:worker/replica:0/task:0, /job:worker/replica:0/task:1"),
              std::string::npos)
        << m;
  }
}

TEST_F(PlacerTest, MalformedRequestsAndDeviceListsAreNamed) {
  Scope root = Scope::root();
  ops::constant(root.with_device("/gpu:x"), {1}, {1}, "bad");
  auto r = place_graph(*root.graph(), local_cpus(), PlacerOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("operation 'bad' (Const): malformed device '/gpu:x': device index 'x'"),
            std::string::npos)
      << r.status();

  Scope ok = Scope::root();
  ops::constant(ok, {1}, {1}, "a");
  EXPECT_FALSE(place_graph(*ok.graph(), {}, PlacerOptions{}).ok());
  auto partial = place_graph(*ok.graph(), {{"/cpu:0", "CPU"}}, PlacerOptions{});
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().message().find("'/cpu:0' is not a full name"), std::string::npos) << partial.status();
  auto dup = place_graph(*ok.graph(), {{kCpu0, "CPU"}, {kCpu0, "CPU"}}, PlacerOptions{});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("listed twice"), std::string::npos) << dup.status();
  auto bad_type = place_graph(*ok.graph(), {{kCpu0, "GPU"}}, PlacerOptions{});
  EXPECT_FALSE(bad_type.ok());
  PlacerOptions bad_default = with_registry_kernels();
  bad_default.default_device = "/job:";
  EXPECT_FALSE(place_graph(*ok.graph(), local_cpus(), bad_default).ok());
}

TEST_F(PlacerTest, WithoutADefaultUnconstrainedNodesFollowTheirFirstInput) {
  Scope root = Scope::root();
  auto a = ops::constant(root.with_device("/cpu:1"), {1}, {1}, "a");
  auto b = ops::identity(root.with_op_name("b"), a);
  ops::identity(root.with_op_name("c"), b);
  ops::constant(root, {1}, {1}, "lone");
  ASSERT_TRUE(root.ok());
  auto r = place_graph(*root.graph(), local_cpus(), PlacerOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(dev(*root.graph(), "a"), kCpu1);
  EXPECT_EQ(dev(*root.graph(), "b"), kCpu1);
  EXPECT_EQ(dev(*root.graph(), "c"), kCpu1);
  EXPECT_EQ(dev(*root.graph(), "lone"), kCpu0);  // nothing to follow: the first device
}

TEST_F(PlacerTest, AnAssignedDeviceIsKept) {
  Scope root = Scope::root();
  ops::constant(root, {1}, {1}, "a");
  Graph g = *root.graph();
  g.find("a")->assigned_device = kCpu1;
  PlacerOptions opts = with_registry_kernels();
  opts.default_device = kCpu0;
  auto r = place_graph(g, local_cpus(), opts);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(dev(g, "a"), kCpu1);
}

}  // namespace
}  // namespace actorflow
