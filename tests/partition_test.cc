// The partitioner: one graph per device, a _Send/_Recv pair per (endpoint, destination
// device), control edges through a dummy scalar, and partitions that really execute on two
// CPU devices with the tensors moved between the steps by hand.
#include <gtest/gtest.h>

#include <deque>

#include "device/executor.h"
#include "graph/ops.h"
#include "runtime/partition.h"
#include "runtime/placer.h"
#include "graph/subgraph.h"
#include "runtime/step_plan.h"

namespace actorflow {
namespace {

const char* kCpu0 = "/job:localhost/replica:0/task:0/device:CPU:0";
const char* kCpu1 = "/job:localhost/replica:0/task:0/device:CPU:1";
const char* kCpu2 = "/job:localhost/replica:0/task:0/device:CPU:2";

std::vector<AvailableDevice> cpus() { return {{kCpu0, "CPU"}, {kCpu1, "CPU"}, {kCpu2, "CPU"}}; }

Status place(Graph& g) {
  PlacerOptions opts;
  opts.default_device = kCpu0;
  return place_graph(g, cpus(), opts).status();
}

std::vector<const Node*> nodes_of(const Graph& g, const std::string& op) {
  std::vector<const Node*> out;
  for (int id = 0; id < g.num_nodes(); ++id)
    if (g.node(id)->op == op) out.push_back(g.node(id));
  return out;
}

TEST(PartitionTest, OnePairPerEndpointAndDestinationDevice) {
  Scope root = Scope::root();
  auto a = ops::constant(root.with_device("/cpu:0"), {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
  auto on1 = root.with_device("/cpu:1");
  auto c = ops::identity(on1.with_op_name("c"), a);
  ops::identity(on1.with_op_name("d"), a);                      // same endpoint, same device: shares c's _Recv
  ops::identity(root.with_device("/cpu:2").with_op_name("e"), a);  // another device: its own pair
  ops::identity(root.with_device("/cpu:0").with_op_name("f"), c);  // back to CPU:0
  ops::identity(root.with_device("/cpu:0").with_op_name("local"), a);
  ASSERT_TRUE(root.ok()) << root.status();
  Graph g = *root.graph();
  ASSERT_TRUE(place(g).ok());
  auto parts = partition_graph(g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 3u);
  const Graph& p0 = parts->at(kCpu0);
  const Graph& p1 = parts->at(kCpu1);
  const Graph& p2 = parts->at(kCpu2);

  // Original nodes keep their names and stay in order ahead of the inserted ones.
  EXPECT_EQ(p0.node(0)->name, "a");
  EXPECT_EQ(p0.node(1)->name, "f");
  EXPECT_EQ(p0.node(2)->name, "local");
  EXPECT_EQ(p1.node(0)->name, "c");
  EXPECT_EQ(p1.node(1)->name, "d");
  EXPECT_EQ(p2.node(0)->name, "e");
  EXPECT_EQ(p0.find("local")->inputs[0].node, p0.find("a")->id);

  // CPU:0 sends a:0 twice (to CPU:1 and CPU:2) and receives c:0 once.
  auto sends0 = nodes_of(p0, "_Send");
  ASSERT_EQ(sends0.size(), 2u);
  EXPECT_EQ(nodes_of(p0, "_Recv").size(), 1u);
  const Node* s01 = p0.find("_send_a_0_to_job_localhost_replica_0_task_0_device_CPU_1");
  ASSERT_NE(s01, nullptr);
  EXPECT_EQ(s01->inputs.size(), 1u);
  EXPECT_EQ(s01->inputs[0].node, p0.find("a")->id);
  EXPECT_EQ(s01->assigned_device, kCpu0);
  EXPECT_EQ(s01->attrs.get_or<std::string>("tensor_name", ""), std::string(kCpu0) + ";" + kCpu1 + ";a:0");
  EXPECT_EQ(s01->attrs.get_or<std::string>("send_device", ""), kCpu0);
  EXPECT_EQ(s01->attrs.get_or<std::string>("recv_device", ""), kCpu1);
  EXPECT_EQ(s01->attrs.get_or<bool>("client_terminated", true), false);
  EXPECT_EQ(s01->num_outputs(), 0);

  // CPU:1 has exactly one _Recv for a:0 feeding both c and d.
  auto recvs1 = nodes_of(p1, "_Recv");
  ASSERT_EQ(recvs1.size(), 1u);
  const Node* r1 = recvs1[0];
  EXPECT_EQ(r1->name, "_recv_a_0_from_job_localhost_replica_0_task_0_device_CPU_0");
  EXPECT_EQ(r1->assigned_device, kCpu1);
  EXPECT_EQ(r1->attrs.get_or<std::string>("tensor_name", ""), std::string(kCpu0) + ";" + kCpu1 + ";a:0");
  EXPECT_EQ(r1->attrs.get_or<std::string>("send_device", ""), kCpu0);
  EXPECT_EQ(r1->attrs.get_or<std::string>("recv_device", ""), kCpu1);
  EXPECT_EQ(r1->attrs.get_or<DType>("dtype", DType::kInvalid), DType::kFloat32);
  EXPECT_EQ(r1->attrs.get_or<Shape>("shape", Shape::unknown()), (Shape{2, 3}));
  EXPECT_EQ(r1->output_types, std::vector<DType>{DType::kFloat32});
  EXPECT_EQ(r1->output_shapes, std::vector<Shape>{Shape({2, 3})});
  EXPECT_EQ(p1.find("c")->inputs[0].node, r1->id);
  EXPECT_EQ(p1.find("d")->inputs[0].node, r1->id);
  // c:0 goes back to CPU:0.
  ASSERT_EQ(nodes_of(p1, "_Send").size(), 1u);
  EXPECT_EQ(nodes_of(p1, "_Send")[0]->attrs.get_or<std::string>("tensor_name", ""),
            std::string(kCpu1) + ";" + kCpu0 + ";c:0");
  EXPECT_EQ(p0.find("f")->inputs[0].node, nodes_of(p0, "_Recv")[0]->id);
  // CPU:2 receives a:0 with its own key.
  ASSERT_EQ(nodes_of(p2, "_Recv").size(), 1u);
  EXPECT_EQ(nodes_of(p2, "_Recv")[0]->attrs.get_or<std::string>("tensor_name", ""),
            std::string(kCpu0) + ";" + kCpu2 + ";a:0");
  EXPECT_TRUE(nodes_of(p2, "_Send").empty());
}

TEST(PartitionTest, ControlEdgesBecomeADummyScalarPair) {
  Scope root = Scope::root();
  auto x = ops::no_op(root.with_device("/cpu:0"), {}, "x");
  auto k = ops::constant(root.with_device("/cpu:1"), {7}, {1}, "k");
  ops::identity(root.with_device("/cpu:1").with_control_dependencies({x}).with_op_name("y"), k);
  ops::identity(root.with_device("/cpu:1").with_control_dependencies({x, k}).with_op_name("z"), k);
  ASSERT_TRUE(root.ok()) << root.status();
  Graph g = *root.graph();
  ASSERT_TRUE(place(g).ok());
  PartitionOptions opts;
  opts.key_fn = [](const std::string& s, const std::string& d, const std::string& e) {
    return "K(" + s.substr(s.size() - 1) + "->" + d.substr(d.size() - 1) + "," + e + ")";
  };
  auto parts = partition_graph(g, opts);
  ASSERT_TRUE(parts.ok()) << parts.status();
  const Graph& p0 = parts->at(kCpu0);
  const Graph& p1 = parts->at(kCpu1);
  // CPU:0: x, the dummy scalar depending on x, and one _Send of it.
  const Node* dummy = p0.find("_ctrl_x");
  ASSERT_NE(dummy, nullptr);
  EXPECT_EQ(dummy->op, "Const");
  EXPECT_EQ(dummy->control_inputs, std::vector<int>{p0.find("x")->id});
  EXPECT_EQ(dummy->output_shapes, std::vector<Shape>{Shape{}});
  auto sends = nodes_of(p0, "_Send");
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0]->inputs[0].node, dummy->id);
  EXPECT_EQ(sends[0]->attrs.get_or<std::string>("tensor_name", ""), "K(0->1,^x)");
  // CPU:1: one _Recv, a control input of both y and z; z's local control edge on k stays.
  auto recvs = nodes_of(p1, "_Recv");
  ASSERT_EQ(recvs.size(), 1u);
  EXPECT_EQ(recvs[0]->attrs.get_or<std::string>("tensor_name", ""), "K(0->1,^x)");
  EXPECT_EQ(p1.find("y")->control_inputs, std::vector<int>{recvs[0]->id});
  EXPECT_EQ(p1.find("z")->control_inputs, (std::vector<int>{recvs[0]->id, p1.find("k")->id}));
}

TEST(PartitionTest, ErrorsNameTheNode) {
  Scope root = Scope::root();
  ops::constant(root, {1}, {1}, "a");
  auto r = partition_graph(*root.graph());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Const 'a' has no assigned device"), std::string::npos) << r.status();

  Scope r2 = Scope::root();
  auto a = ops::constant(r2, {1}, {1}, "a");
  PartitionOptions same_key;
  same_key.key_fn = [](const std::string&, const std::string&, const std::string&) { return std::string("k"); };
  ops::identity(r2.with_device("/cpu:1").with_op_name("c"), a);
  ops::identity(r2.with_device("/cpu:2").with_op_name("d"), a);
  Graph g2 = *r2.graph();
  ASSERT_TRUE(place(g2).ok());
  auto dup = partition_graph(g2, same_key);
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("key 'k' for two different edges"), std::string::npos) << dup.status();
}

// Runs every partition of `parts` on its own CPU device with StepExecution, routing each
// _Send's tensor to the step whose partition has the matching _Recv key. Returns the
// retvals of all partitions merged by index.
Result<std::map<int, Tensor>> run_partitions(const std::map<std::string, Graph>& parts) {
  struct Part {
    std::unique_ptr<Device> device;
    std::shared_ptr<const Executor> ex;
    std::unique_ptr<StepExecution> step;
    std::vector<int> retval_index;  // retval slot -> global fetch index
  };
  std::map<std::string, Part> run;
  std::map<std::string, std::string> recv_owner;  // key -> device
  std::deque<std::pair<std::string, Tensor>> wire;
  int idx = 0;
  for (const auto& [name, graph] : parts) {
    Part& p = run[name];
    p.device = make_cpu_device(name, idx++);
    AF_ASSIGN_OR_RETURN(p.ex, Executor::create(std::make_shared<const Graph>(graph), p.device.get()));
    for (int id = 0; id < graph.num_nodes(); ++id) {
      const Node* n = graph.node(id);
      if (n->op == "_Recv") recv_owner[n->attrs.get_or<std::string>("tensor_name", "")] = name;
    }
    p.step = std::make_unique<StepExecution>(p.ex, 42, std::vector<Tensor>{}, [&wire](const RendezvousKey& key,
                                                                                     const Tensor& t) {
      wire.emplace_back(key.wire(), t);
      return Status::OK();
    });
  }
  // Bounded: every round either delivers a tensor or finishes; far fewer rounds are needed.
  for (int round = 0; round < 1000; ++round) {
    for (auto& [name, p] : run) p.step->run();
    for (auto& [name, p] : run)
      if (!p.step->status().ok()) return p.step->status().with_prefix(name);
    if (wire.empty()) break;
    while (!wire.empty()) {
      auto [key, t] = std::move(wire.front());
      wire.pop_front();
      auto it = recv_owner.find(key);
      if (it == recv_owner.end()) return Internal("no _Recv for key " + key);
      run[it->second].step->deliver(key, std::move(t));
    }
  }
  std::map<int, Tensor> out;
  for (auto& [name, p] : run) {
    if (!p.step->done()) return Internal(name + " did not finish");
    const Graph& graph = p.ex->graph();
    for (int id = 0; id < graph.num_nodes(); ++id) {
      const Node* n = graph.node(id);
      if (n->op != "_Retval") continue;
      int index = static_cast<int>(n->attrs.get_or<int64_t>("index", -1));
      out[index] = p.step->retvals()[static_cast<size_t>(index)];
    }
  }
  return out;
}

TEST(PartitionTest, PartitionsExecuteAcrossTwoCpuDevices) {
  Scope root = Scope::root();
  auto a = ops::constant(root.with_device("/cpu:0"), {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
  auto b = ops::identity(root.with_device("/cpu:1").with_op_name("b"), a);
  auto c = ops::identity(root.with_device("/cpu:0").with_op_name("c"), b);
  auto done = ops::no_op(root.with_device("/cpu:0"), {c}, "done");
  ops::identity(root.with_device("/cpu:1").with_control_dependencies({done}).with_op_name("after"), b);
  ASSERT_TRUE(root.ok()) << root.status();
  RunSignature sig;
  sig.fetches = {"c", "b", "after"};
  auto g = rewrite_for_run(*root.graph(), sig);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(place(*g).ok());
  auto parts = partition_graph(*g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 2u);
  auto out = run_partitions(*parts);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_EQ(out->at(0).to_string(), "[[1. 2. 3.]\n [4. 5. 6.]]");
  EXPECT_EQ(out->at(1).to_string(), "[[1. 2. 3.]\n [4. 5. 6.]]");
  EXPECT_EQ(out->at(2).to_string(), "[[1. 2. 3.]\n [4. 5. 6.]]");
}

TEST(PartitionTest, SeedMatMulAcrossTwoCpuDevices) {
  ASSERT_TRUE(OpRegistry::global().lookup("MatMul").ok() && KernelRegistry::global().has("MatMul", "CPU"))
      << "MatMul and its CPU kernel must be registered";
  Scope root = Scope::root();
  auto a = ops::constant(root.with_device("/cpu:0"), {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
  auto b = ops::constant(root.with_device("/cpu:1"), {1, 2, 3, 4, 5, 6}, {3, 2}, "b");
  NodeBuilder(root.with_device("/cpu:1"), "MatMul")
      .input(a)
      .input(b)
      .attr("transpose_a", false)
      .attr("transpose_b", false)
      .finalize();
  ASSERT_TRUE(root.ok()) << root.status();
  RunSignature sig;
  sig.fetches = {"MatMul"};
  auto g = rewrite_for_run(*root.graph(), sig);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(place(*g).ok());
  auto parts = partition_graph(*g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  auto out = run_partitions(*parts);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at(0).to_string(), "[[22. 28.]\n [49. 64.]]");
}

// TensorFlow's gradient `tuple`: `gate` (a NoOp) waits for both gradients of an op; `used` reads
// one of them after the gate, the other (`unread`, a MatMul nobody reads or fetches, on the other
// device) is only waited for. The rewrite runs `unread` as a NoOp waiting for its inputs'
// producers (the order kept, the kernel skipped); the step still gives `used`'s value. Fetched,
// or read by a fetched node, or as a target, it stays a MatMul; an op that is not pure compute
// (an Identity here) is never turned into a NoOp.
TEST(PartitionTest, AComputationOnlyWaitedForRunsAsANoOpWaitingForItsInputs) {
  Scope root = Scope::root();
  auto a = ops::constant(root.with_device("/cpu:0"), {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
  auto b = ops::constant(root.with_device("/cpu:1"), {1, 2, 3, 4, 5, 6}, {3, 2}, "b");
  auto grad = ops::matmul(root.with_device("/cpu:0").with_op_name("grad"), a, b);
  auto unread = ops::matmul(root.with_device("/cpu:1").with_op_name("unread"), a, b);
  auto copy = ops::identity(root.with_device("/cpu:1").with_op_name("copy"), a);
  auto gate = ops::no_op(root.with_device("/cpu:0"), {grad, unread, copy}, "gate");
  ops::identity(root.with_device("/cpu:0").with_control_dependencies({gate}).with_op_name("used"), grad);
  ASSERT_TRUE(root.ok()) << root.status();
  {
    RunSignature sig;
    sig.fetches = {"used"};
    auto g = rewrite_for_run(*root.graph(), sig);
    ASSERT_TRUE(g.ok()) << g.status();
    const Node* n = g->find("unread");
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->op, "NoOp");
    EXPECT_TRUE(n->inputs.empty());
    EXPECT_EQ(n->num_outputs(), 0);
    EXPECT_EQ(n->control_inputs, (std::vector<int>{g->find("a")->id, g->find("b")->id}));
    EXPECT_EQ(g->find("grad")->op, "MatMul");
    EXPECT_EQ(g->find("copy")->op, "Identity");
    ASSERT_TRUE(place(*g).ok());
    auto parts = partition_graph(*g);
    ASSERT_TRUE(parts.ok()) << parts.status();
    auto out = run_partitions(*parts);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->at(0).to_string(), "[[22. 28.]\n [49. 64.]]");
  }
  for (const auto& [fetches, targets] : std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>>{
           {{"used", "unread"}, {}}, {{"used"}, {"unread"}}}) {
    RunSignature sig;
    sig.fetches = fetches;
    sig.targets = targets;
    auto g = rewrite_for_run(*root.graph(), sig);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->find("unread")->op, "MatMul");
  }
}

}  // namespace
}  // namespace actorflow

namespace actorflow {
namespace {

// plan_step (runtime/step_plan.h): what each partition takes and gives, which one only forwards
// a feed, the feeds' declared types, and the placement log when asked; errors name the cause.
TEST(StepPlanTest, PartitionsKnowTheirFeedsFetchesAndForwarders) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root.with_device("/cpu:0"), DType::kFloat32, Shape{2}, "x");
  auto y = ops::placeholder(root.with_device("/cpu:2"), DType::kFloat32, Shape{-1}, "y");
  ops::add(root.with_device("/cpu:1").with_op_name("s"), x, 1.f);  // x crosses 0 -> 1
  ops::mul(root.with_device("/cpu:2").with_op_name("t"), y, 2.f);
  ASSERT_TRUE(root.ok()) << root.status();
  RunSignature sig;
  sig.feeds = {"x", "y"};
  sig.fetches = {"t", "s"};
  PlacerOptions opts;
  opts.default_device = kCpu0;
  opts.log_device_placement = true;
  auto plan = plan_step(*root.graph(), sig, cpus(), opts);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_fetches, 2u);
  EXPECT_EQ(plan->feed_names, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(plan->arg_types, (std::vector<DType>{DType::kFloat32, DType::kFloat32}));
  EXPECT_EQ(plan->arg_shapes[0], Shape{2});
  EXPECT_FALSE(plan->placement_log.empty());
  ASSERT_EQ(plan->partitions.size(), 3u);
  std::map<std::string, const PartitionPlan*> by;
  for (const auto& p : plan->partitions) by[p.device] = &p;
  ASSERT_TRUE(by.count(kCpu0) && by.count(kCpu1) && by.count(kCpu2));
  // cpu:0 takes feed 0 and only sends it on to cpu:1: a forwarder.
  EXPECT_EQ(by[kCpu0]->arg_indices, std::vector<int>{0});
  EXPECT_TRUE(by[kCpu0]->retval_indices.empty());
  EXPECT_TRUE(by[kCpu0]->forwarder);
  ASSERT_EQ(by[kCpu0]->forwards.size(), 1u);
  EXPECT_EQ(by[kCpu0]->forwards[0].arg, 0);
  EXPECT_EQ(by[kCpu0]->forwards[0].key.dst_device(), kCpu1) << by[kCpu0]->forwards[0].key.wire();
  // cpu:1 computes s (fetch 1); cpu:2 takes feed 1 and computes t (fetch 0).
  EXPECT_TRUE(by[kCpu1]->arg_indices.empty());
  EXPECT_EQ(by[kCpu1]->retval_indices, std::vector<int>{1});
  EXPECT_FALSE(by[kCpu1]->forwarder);
  EXPECT_EQ(by[kCpu2]->arg_indices, std::vector<int>{1});
  EXPECT_EQ(by[kCpu2]->retval_indices, std::vector<int>{0});
  EXPECT_FALSE(by[kCpu2]->forwarder);
  // A fetch the graph lacks.
  sig.fetches = {"nope"};
  auto bad = plan_step(*root.graph(), sig, cpus(), opts);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nope"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace actorflow
