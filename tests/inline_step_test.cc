// Inline steps: InlinePartitions (the registry of partitions a data-plane reader thread may run
// itself), try_run_inline (one step on the calling thread, only when nothing has to wait), and
// the device actor's side: publishing self-contained CPU partitions at registration, withdrawing
// them on deregistration and when the actor ends, and holding the gate while it runs kernels.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "actors/device_actor.h"
#include "actors/faults.h"
#include "actors/restart.h"
#include "actors/server.h"
#include "graph/ops.h"
#include "graph/ops_variables.h"
#include "tests/util/partition_nodes.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;

const std::string kCpu0 = "/job:w/replica:0/task:0/device:CPU:0";
const std::string kCpu1 = "/job:w/replica:0/task:0/device:CPU:1";
const std::string kCpu10 = "/job:w/replica:0/task:0/device:CPU:10";

// Partition-style nodes as the master's partitioner inserts them (runtime/partition.cc).
using testutil::recv_node;
using testutil::retval_node;
using testutil::send_node;

// The edge from CPU:1 into CPU:0 that the partitions below receive.
std::string in_key() { return make_rendezvous_key(kCpu1, kCpu0, "x:0"); }

// _Recv(float[2]) -> Add(Const [10, 20]) -> _Retval 0: self-contained.
std::shared_ptr<const Graph> recv_add_graph() {
  Scope root = Scope::root();
  auto r = recv_node(root, "r", in_key(), DType::kFloat32, Shape{2});
  auto sum = ops::add(root.with_op_name("sum"), r, ops::constant(root, {10, 20}, {2}, "c"));
  retval_node(root, "ret", sum, 0);
  EXPECT_TRUE(root.ok()) << root.status();
  return std::make_shared<const Graph>(*root.graph());
}

// Const [6, 8] / _Recv(int32[2]) -> _Retval 0: an int32 Div, which fails on a zero divisor.
std::shared_ptr<const Graph> recv_div_graph() {
  Scope root = Scope::root();
  auto r = recv_node(root, "r", in_key(), DType::kInt32, Shape{2});
  auto q = ops::div(root.with_op_name("q"), ops::constant(root, Tensor::from_vector<int32_t>({6, 8}, {2}), "n"), r);
  retval_node(root, "ret", q, 0);
  EXPECT_TRUE(root.ok()) << root.status();
  return std::make_shared<const Graph>(*root.graph());
}

// _Recv -> Add -> _Send: not self-contained.
std::shared_ptr<const Graph> recv_add_send_graph() {
  Scope root = Scope::root();
  auto r = recv_node(root, "r", in_key(), DType::kFloat32, Shape{2});
  auto sum = ops::add(root.with_op_name("sum"), r, ops::constant(root, {10, 20}, {2}, "c"));
  send_node(root, "send", sum, make_rendezvous_key(kCpu0, kCpu1, "sum:0"));
  EXPECT_TRUE(root.ok()) << root.status();
  return std::make_shared<const Graph>(*root.graph());
}

// _Arg 0 -> Add -> _Retval 0: self-contained, but takes an argument.
std::shared_ptr<const Graph> arg_add_graph() {
  Scope root = Scope::root();
  auto a = NodeBuilder(root.with_op_name("arg"), "_Arg")
               .attr("index", int64_t{0})
               .attr("dtype", DType::kFloat32)
               .attr("shape", Shape{2})
               .output();
  auto sum = ops::add(root.with_op_name("sum"), a, ops::constant(root, {10, 20}, {2}, "c"));
  retval_node(root, "ret", sum, 0);
  EXPECT_TRUE(root.ok()) << root.status();
  return std::make_shared<const Graph>(*root.graph());
}

// VariableV2 -> _Retval: an asynchronous kernel, not self-contained.
std::shared_ptr<const Graph> variable_graph() {
  Scope root = Scope::root();
  auto v = ops::variable(root.with_op_name("v"), Shape{2}, DType::kFloat32);
  retval_node(root, "ret", v, 0);
  EXPECT_TRUE(root.ok()) << root.status();
  return std::make_shared<const Graph>(*root.graph());
}

InlinePartitions::Entry make_entry(std::shared_ptr<const Graph> g, Device* dev,
                                   Executor::KernelOverride override_fn = nullptr) {
  auto ex = Executor::create(std::move(g), dev, std::move(override_fn));
  EXPECT_TRUE(ex.ok()) << ex.status();
  return InlinePartitions::Entry{ex.ok() ? *ex : nullptr, std::make_shared<DeviceGate>()};
}

std::vector<float> floats(const Tensor& t) {
  const float* d = t.data<float>();
  return std::vector<float>(d, d + t.num_elements());
}

// ---- InlinePartitions ---------------------------------------------------------------------

TEST(InlinePartitionsTest, PublishFindReplaceWithdraw) {
  auto dev = make_cpu_device(kCpu0, 0);
  InlinePartitions inl;
  EXPECT_FALSE(inl.find(kCpu0, "a").has_value());

  auto e1 = make_entry(recv_add_graph(), dev.get());
  auto e2 = make_entry(recv_add_graph(), dev.get());
  inl.publish(kCpu0, "a", e1);
  auto f = inl.find(kCpu0, "a");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->exec, e1.exec);
  EXPECT_EQ(f->gate, e1.gate);
  // Keyed by (device, handle): neither alone matches.
  EXPECT_FALSE(inl.find(kCpu1, "a").has_value());
  EXPECT_FALSE(inl.find(kCpu0, "b").has_value());

  // Publishing again replaces.
  inl.publish(kCpu0, "a", e2);
  f = inl.find(kCpu0, "a");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->exec, e2.exec);
  EXPECT_EQ(f->gate, e2.gate);

  inl.publish(kCpu0, "b", e1);
  inl.withdraw(kCpu0, "a");
  EXPECT_FALSE(inl.find(kCpu0, "a").has_value());
  ASSERT_TRUE(inl.find(kCpu0, "b").has_value());
  EXPECT_EQ(inl.find(kCpu0, "b")->exec, e1.exec);
  // Withdrawing what is not there is harmless, also for another device's handle.
  inl.withdraw(kCpu0, "a");
  inl.withdraw(kCpu1, "b");
  EXPECT_TRUE(inl.find(kCpu0, "b").has_value());
  inl.withdraw(kCpu0, "b");
  EXPECT_FALSE(inl.find(kCpu0, "b").has_value());
}

TEST(InlinePartitionsTest, WithdrawDeviceRemovesOnlyThatDevice) {
  auto dev = make_cpu_device(kCpu0, 0);
  auto e = make_entry(recv_add_graph(), dev.get());
  InlinePartitions inl;
  inl.publish(kCpu0, "", e);
  inl.publish(kCpu0, "a", e);
  inl.publish(kCpu0, "z", e);
  inl.publish(kCpu1, "a", e);
  inl.publish(kCpu1, "b", e);
  inl.publish(kCpu10, "a", e);  // a name that extends CPU:1's
  inl.withdraw_device(kCpu1);
  EXPECT_FALSE(inl.find(kCpu1, "a").has_value());
  EXPECT_FALSE(inl.find(kCpu1, "b").has_value());
  EXPECT_TRUE(inl.find(kCpu0, "").has_value());
  EXPECT_TRUE(inl.find(kCpu0, "a").has_value());
  EXPECT_TRUE(inl.find(kCpu0, "z").has_value());
  EXPECT_TRUE(inl.find(kCpu10, "a").has_value());
  // A device with nothing published: no-op.
  inl.withdraw_device("/job:w/replica:0/task:0/device:CPU:7");
  EXPECT_TRUE(inl.find(kCpu0, "a").has_value());
  inl.withdraw_device(kCpu0);
  EXPECT_FALSE(inl.find(kCpu0, "").has_value());
  EXPECT_FALSE(inl.find(kCpu0, "a").has_value());
  EXPECT_FALSE(inl.find(kCpu0, "z").has_value());
  EXPECT_TRUE(inl.find(kCpu10, "a").has_value());
  inl.withdraw_device(kCpu10);
  EXPECT_FALSE(inl.find(kCpu10, "a").has_value());
}

TEST(InlinePartitionsTest, ConcurrentPublishFindWithdraw) {
  auto dev = make_cpu_device(kCpu0, 0);
  auto e = make_entry(recv_add_graph(), dev.get());
  InlinePartitions inl;
  inl.publish(kCpu1, "stable", e);
  std::atomic<int> lost{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      // Each thread owns one device (CPU:0 / CPU:10); neither may disturb CPU:1's entry.
      const std::string& d = t == 0 ? kCpu0 : kCpu10;
      for (int i = 0; i < 2000; ++i) {
        const std::string h = "h" + std::to_string(i % 3);
        inl.publish(d, h, e);
        if (!inl.find(d, h)) ++lost;  // only this thread withdraws d's entries
        if (!inl.find(kCpu1, "stable")) ++lost;
        if (i % 2) inl.withdraw(d, h);
        else inl.withdraw_device(d);
        if (inl.find(d, h)) ++lost;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(lost.load(), 0);
  EXPECT_TRUE(inl.find(kCpu1, "stable").has_value());
}

// ---- try_run_inline -----------------------------------------------------------------------

TEST(TryRunInlineTest, RunsTheStepWhenEveryRecvTensorCame) {
  auto dev = make_cpu_device(kCpu0, 0);
  auto e = make_entry(recv_add_graph(), dev.get());
  std::vector<std::string> keys{in_key()};
  std::vector<Tensor> tensors{Tensor::from_vector<float>({1.5f, 2.5f}, {2})};
  auto r = try_run_inline(e, kCpu0, 11, keys, tensors);
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->first.ok()) << r->first;
  ASSERT_EQ(r->second.size(), 1u);
  EXPECT_EQ(r->second[0].shape(), Shape({2}));
  EXPECT_EQ(floats(r->second[0]), (std::vector<float>{11.5f, 22.5f}));
  // The tensors were consumed (moved into the step).
  EXPECT_EQ(tensors[0].raw_data(), nullptr);
  // The gate is free again (try_lock from this thread, which does not own it).
  {
    std::unique_lock<std::mutex> l(e.gate->mu, std::try_to_lock);
    EXPECT_TRUE(l.owns_lock());
  }

  // Extra keys are fine, in any order; the same entry runs again with another step id.
  std::vector<std::string> keys2{"unrelated;key;0", in_key()};
  std::vector<Tensor> tensors2{Tensor::from_vector<float>({7, 7}, {2}),
                               Tensor::from_vector<float>({-10, 0.25f}, {2})};
  auto r2 = try_run_inline(e, kCpu0, 12, keys2, tensors2);
  ASSERT_TRUE(r2.has_value());
  ASSERT_TRUE(r2->first.ok()) << r2->first;
  ASSERT_EQ(r2->second.size(), 1u);
  EXPECT_EQ(floats(r2->second[0]), (std::vector<float>{0.f, 20.25f}));
}

TEST(TryRunInlineTest, PartitionWithoutRecvRunsWithNoTensors) {
  auto dev = make_cpu_device(kCpu0, 0);
  Scope root = Scope::root();
  auto sum = ops::add(root.with_op_name("sum"), ops::constant(root, {1, 2}, {2}, "a"),
                      ops::constant(root, {3, 5}, {2}, "b"));
  retval_node(root, "ret", sum, 0);
  ASSERT_TRUE(root.ok()) << root.status();
  auto e = make_entry(std::make_shared<const Graph>(*root.graph()), dev.get());
  std::vector<std::string> keys;
  std::vector<Tensor> tensors;
  auto r = try_run_inline(e, kCpu0, 1, keys, tensors);
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->first.ok()) << r->first;
  ASSERT_EQ(r->second.size(), 1u);
  EXPECT_EQ(floats(r->second[0]), (std::vector<float>{4.f, 7.f}));
}

TEST(TryRunInlineTest, MissingRecvKeyDoesNothing) {
  auto dev = make_cpu_device(kCpu0, 0);
  auto e = make_entry(recv_add_graph(), dev.get());
  const Tensor original = Tensor::from_vector<float>({1, 2}, {2});
  std::vector<std::string> keys{make_rendezvous_key(kCpu1, kCpu0, "other:0")};
  std::vector<Tensor> tensors{original};
  auto r = try_run_inline(e, kCpu0, 1, keys, tensors);
  EXPECT_FALSE(r.has_value());
  ASSERT_EQ(tensors.size(), 1u);
  EXPECT_TRUE(tensors[0].shares_buffer_with(original));
  EXPECT_EQ(keys, std::vector<std::string>{make_rendezvous_key(kCpu1, kCpu0, "other:0")});

  // No tensors at all.
  std::vector<std::string> no_keys;
  std::vector<Tensor> no_tensors;
  EXPECT_FALSE(try_run_inline(e, kCpu0, 2, no_keys, no_tensors).has_value());

  // keys and tensors of different lengths.
  std::vector<std::string> keys3{in_key(), "extra"};
  std::vector<Tensor> tensors3{original};
  EXPECT_FALSE(try_run_inline(e, kCpu0, 3, keys3, tensors3).has_value());
  EXPECT_TRUE(tensors3[0].shares_buffer_with(original));

  // An empty entry (no executor / no gate).
  std::vector<std::string> keys4{in_key()};
  std::vector<Tensor> tensors4{original};
  EXPECT_FALSE(try_run_inline(InlinePartitions::Entry{}, kCpu0, 4, keys4, tensors4).has_value());
  EXPECT_FALSE(try_run_inline(InlinePartitions::Entry{e.exec, nullptr}, kCpu0, 4, keys4, tensors4).has_value());
  EXPECT_TRUE(tensors4[0].shares_buffer_with(original));
}

TEST(TryRunInlineTest, GateHeldByAnotherThreadDoesNothing) {
  auto dev = make_cpu_device(kCpu0, 0);
  auto e = make_entry(recv_add_graph(), dev.get());
  const Tensor original = Tensor::from_vector<float>({1, 2}, {2});
  std::vector<std::string> keys{in_key()};
  std::vector<Tensor> tensors{original};
  std::optional<std::pair<Status, std::vector<Tensor>>> r;
  {
    std::lock_guard<std::mutex> held(e.gate->mu);  // as the device actor holds it while running kernels
    std::thread other([&] { r = try_run_inline(e, kCpu0, 1, keys, tensors); });
    other.join();
  }
  EXPECT_FALSE(r.has_value());
  EXPECT_TRUE(tensors[0].shares_buffer_with(original));
  // Once released, the same call runs.
  std::thread other([&] { r = try_run_inline(e, kCpu0, 1, keys, tensors); });
  other.join();
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->first.ok()) << r->first;
  EXPECT_EQ(floats(r->second[0]), (std::vector<float>{11.f, 22.f}));
}

TEST(TryRunInlineTest, ClosedGateDoesNothing) {
  auto dev = make_cpu_device(kCpu0, 0);
  auto e = make_entry(recv_add_graph(), dev.get());
  {
    std::lock_guard<std::mutex> l(e.gate->mu);
    e.gate->open = false;
  }
  const Tensor original = Tensor::from_vector<float>({1, 2}, {2});
  std::vector<std::string> keys{in_key()};
  std::vector<Tensor> tensors{original};
  EXPECT_FALSE(try_run_inline(e, kCpu0, 1, keys, tensors).has_value());
  EXPECT_TRUE(tensors[0].shares_buffer_with(original));
  // The failed attempt released the gate.
  std::unique_lock<std::mutex> l(e.gate->mu, std::try_to_lock);
  EXPECT_TRUE(l.owns_lock());
}

TEST(TryRunInlineTest, KernelErrorIsTheStepsStatus) {
  auto dev = make_cpu_device(kCpu0, 0);
  auto e = make_entry(recv_div_graph(), dev.get());
  std::vector<std::string> keys{in_key()};
  std::vector<Tensor> tensors{Tensor::from_vector<int32_t>({2, 0}, {2})};
  auto r = try_run_inline(e, kCpu0, 5, keys, tensors);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first.code(), Code::kInvalidArgument) << r->first;
  EXPECT_NE(r->first.message().find("integer division by zero"), std::string::npos) << r->first;
  EXPECT_NE(r->first.message().find("'q'"), std::string::npos) << r->first;
  EXPECT_TRUE(r->second.empty());
  // The gate was released and a good step runs.
  std::vector<Tensor> good{Tensor::from_vector<int32_t>({2, 4}, {2})};
  auto r2 = try_run_inline(e, kCpu0, 6, keys, good);
  ASSERT_TRUE(r2.has_value());
  ASSERT_TRUE(r2->first.ok()) << r2->first;
  ASSERT_EQ(r2->second.size(), 1u);
  ASSERT_EQ(r2->second[0].dtype(), DType::kInt32);
  EXPECT_EQ(r2->second[0].data<int32_t>()[0], 3);
  EXPECT_EQ(r2->second[0].data<int32_t>()[1], 2);
}

class ThrowingKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext&) override { throw std::runtime_error("kaboom in the kernel"); }
};

// A kernel's exception is caught by StepExecution (as on the device actor's path) and fails the
// step with Internal naming the node; it does not escape to the calling reader thread.
TEST(TryRunInlineTest, KernelExceptionIsAnInternalStepError) {
  auto dev = make_cpu_device(kCpu0, 0);
  auto e = make_entry(recv_add_graph(), dev.get(), [](const Node& n) -> Result<std::unique_ptr<OpKernel>> {
    if (n.name == "sum") return std::unique_ptr<OpKernel>(new ThrowingKernel(n));
    return std::unique_ptr<OpKernel>();
  });
  ASSERT_TRUE(e.exec->self_contained());
  std::vector<std::string> keys{in_key()};
  std::vector<Tensor> tensors{Tensor::from_vector<float>({1, 2}, {2})};
  auto r = try_run_inline(e, kCpu0, 5, keys, tensors);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first.code(), Code::kInternal) << r->first;
  EXPECT_NE(r->first.message().find("Add 'sum'"), std::string::npos) << r->first;
  EXPECT_NE(r->first.message().find("kaboom in the kernel"), std::string::npos) << r->first;
  EXPECT_TRUE(r->second.empty());
  // The gate was released (and stays open: one exception does not close the device).
  std::unique_lock<std::mutex> l(e.gate->mu, std::try_to_lock);
  EXPECT_TRUE(l.owns_lock());
  EXPECT_TRUE(e.gate->open);
}

// ---- the device actor's side ------------------------------------------------------------------

class InlineRouter : public DeviceRouter {
 public:
  Status route(int64_t, const std::string& key, const Tensor&) override {
    return Unavailable("test router routes nothing ('" + key + "')");
  }
  InlinePartitions* inline_partitions() override { return &inl; }
  InlinePartitions inl;
};

class NoInlineRouter : public DeviceRouter {
 public:
  Status route(int64_t, const std::string&, const Tensor&) override { return Unavailable("no"); }
};

// One CPU device actor in its own actor system. The device outlives the system (declared first).
struct DeviceActorFixture {
  explicit DeviceActorFixture(std::shared_ptr<DeviceRouter> r, KernelOverrideFn override_fn = nullptr,
                              RestartPolicy restarts = RestartPolicy{})
      : device(make_cpu_device(kCpu0, 0)), sys(configured(cfg)), router(std::move(r)) {
    actor = spawn_device_actor(sys, device.get(), router, nullptr, std::move(override_fn), restarts);
  }
  ~DeviceActorFixture() {
    if (actor) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  }
  static caf::actor_system_config& configured(caf::actor_system_config& c) {
    Server::configure(c);
    return c;
  }
  // Registers `g` as `handle`; the error as a Status.
  Status register_graph(const std::string& handle, GraphPtr g) {
    caf::scoped_actor self{sys};
    Status out = Internal("no reply");
    self->request(actor, std::chrono::seconds(30), register_atom::value, handle, std::move(g))
        .receive([&](bool ok) { out = ok ? Status::OK() : Internal("register replied false"); },
                 [&](caf::error& e) { out = from_caf_error(e, "register"); });
    return out;
  }
  Result<bool> deregister(const std::string& handle) {
    caf::scoped_actor self{sys};
    Result<bool> out = Internal("no reply");
    self->request(actor, std::chrono::seconds(30), deregister_atom::value, handle)
        .receive([&](bool erased) { out = erased; }, [&](caf::error& e) { out = from_caf_error(e, "deregister"); });
    return out;
  }
  Result<std::vector<Tensor>> run(const std::string& handle, int64_t step_id) {
    caf::scoped_actor self{sys};
    Result<std::vector<Tensor>> out = Internal("no reply");
    self->request(actor, std::chrono::seconds(30), run_atom::value, handle, step_id, std::vector<Tensor>{})
        .receive([&](std::vector<Tensor>& v) { out = std::move(v); },
                 [&](caf::error& e) { out = from_caf_error(e, "run"); });
    return out;
  }
  // Stops the actor and waits (bounded) for its down message.
  bool stop() {
    caf::scoped_actor self{sys};
    self->monitor(actor);
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    bool down = false;
    self->receive([&](caf::down_msg&) { down = true; }, caf::after(std::chrono::seconds(30)) >> [] {});
    actor = device_actor_t();
    return down;
  }

  std::unique_ptr<Device> device;
  caf::actor_system_config cfg;
  caf::actor_system sys;
  std::shared_ptr<DeviceRouter> router;
  device_actor_t actor;
};

// Polls `pred` until it holds or `limit` passes (for effects of the actor's exit hooks, which
// CAF may run after the down message went out). Returns pred's last value.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 30000ms) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return pred();
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

bool gate_open(const std::shared_ptr<DeviceGate>& g) {
  std::lock_guard<std::mutex> l(g->mu);
  return g->open;
}

TEST(DeviceActorInlineTest, PublishesOnlySelfContainedArgFreeCpuPartitions) {
  auto router = std::make_shared<InlineRouter>();
  DeviceActorFixture f(router);
  ASSERT_TRUE(f.register_graph("self", recv_add_graph()).ok());
  auto e = router->inl.find(kCpu0, "self");
  ASSERT_TRUE(e.has_value());
  ASSERT_NE(e->exec, nullptr);
  ASSERT_NE(e->gate, nullptr);
  EXPECT_TRUE(e->exec->self_contained());
  EXPECT_EQ(e->exec->recv_keys(), std::vector<std::string>{in_key()});
  EXPECT_EQ(e->exec->device(), f.device.get());
  EXPECT_TRUE(gate_open(e->gate));
  // The published entry runs inline, on this thread.
  std::vector<std::string> keys{in_key()};
  std::vector<Tensor> tensors{Tensor::from_vector<float>({1.5f, 2.5f}, {2})};
  auto r = try_run_inline(*e, kCpu0, 1, keys, tensors);
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->first.ok()) << r->first;
  EXPECT_EQ(floats(r->second[0]), (std::vector<float>{11.5f, 22.5f}));

  // Not published: a _Send, an _Arg, an asynchronous (variable) kernel.
  ASSERT_TRUE(f.register_graph("send", recv_add_send_graph()).ok());
  EXPECT_FALSE(router->inl.find(kCpu0, "send").has_value());
  ASSERT_TRUE(f.register_graph("arg", arg_add_graph()).ok());
  EXPECT_FALSE(router->inl.find(kCpu0, "arg").has_value());
  ASSERT_TRUE(f.register_graph("var", variable_graph()).ok());
  EXPECT_FALSE(router->inl.find(kCpu0, "var").has_value());

  // Every partition of one device shares its gate.
  ASSERT_TRUE(f.register_graph("self2", recv_div_graph()).ok());
  auto e2 = router->inl.find(kCpu0, "self2");
  ASSERT_TRUE(e2.has_value());
  EXPECT_EQ(e2->gate, e->gate);
  EXPECT_NE(e2->exec, e->exec);

  // Re-registering a handle with a partition that is not self-contained withdraws it.
  ASSERT_TRUE(f.register_graph("self2", recv_add_send_graph()).ok());
  EXPECT_FALSE(router->inl.find(kCpu0, "self2").has_value());
  EXPECT_TRUE(router->inl.find(kCpu0, "self").has_value());
  // And re-registering it self-contained publishes the new executor.
  ASSERT_TRUE(f.register_graph("self2", recv_add_graph()).ok());
  auto e3 = router->inl.find(kCpu0, "self2");
  ASSERT_TRUE(e3.has_value());
  EXPECT_NE(e3->exec, e2->exec);
}

TEST(DeviceActorInlineTest, DeregisterWithdraws) {
  auto router = std::make_shared<InlineRouter>();
  DeviceActorFixture f(router);
  ASSERT_TRUE(f.register_graph("a", recv_add_graph()).ok());
  ASSERT_TRUE(f.register_graph("b", recv_add_graph()).ok());
  ASSERT_TRUE(router->inl.find(kCpu0, "a").has_value());
  auto erased = f.deregister("a");
  ASSERT_TRUE(erased.ok()) << erased.status();
  EXPECT_TRUE(*erased);
  EXPECT_FALSE(router->inl.find(kCpu0, "a").has_value());
  EXPECT_TRUE(router->inl.find(kCpu0, "b").has_value());
  // Deregistering an unknown handle replies false and leaves the rest.
  auto again = f.deregister("a");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again);
  EXPECT_TRUE(router->inl.find(kCpu0, "b").has_value());
}

TEST(DeviceActorInlineTest, EndingActorClosesGateAndWithdrawsItsDevice) {
  auto router = std::make_shared<InlineRouter>();
  // Another device's entry must survive this actor's end.
  auto other_dev = make_cpu_device(kCpu1, 1);
  auto other = make_entry(recv_add_graph(), other_dev.get());
  router->inl.publish(kCpu1, "a", other);
  DeviceActorFixture f(router);
  ASSERT_TRUE(f.register_graph("a", recv_add_graph()).ok());
  ASSERT_TRUE(f.register_graph("b", recv_add_graph()).ok());
  auto e = router->inl.find(kCpu0, "a");
  ASSERT_TRUE(e.has_value());
  ASSERT_TRUE(gate_open(e->gate));

  ASSERT_TRUE(f.stop());
  EXPECT_TRUE(eventually([&] { return !gate_open(e->gate); }));
  EXPECT_TRUE(eventually([&] { return !router->inl.find(kCpu0, "a") && !router->inl.find(kCpu0, "b"); }));
  EXPECT_TRUE(router->inl.find(kCpu1, "a").has_value());
  // An entry a reader thread still holds no longer runs.
  const Tensor original = Tensor::from_vector<float>({1, 2}, {2});
  std::vector<std::string> keys{in_key()};
  std::vector<Tensor> tensors{original};
  EXPECT_FALSE(try_run_inline(*e, kCpu0, 9, keys, tensors).has_value());
  EXPECT_TRUE(tensors[0].shares_buffer_with(original));
}

TEST(DeviceActorInlineTest, RouterWithoutInlinePartitionsStillRegisters) {
  auto router = std::make_shared<NoInlineRouter>();
  DeviceActorFixture f(router);
  ASSERT_EQ(router->inline_partitions(), nullptr);
  ASSERT_TRUE(f.register_graph("c", [] {
                 Scope root = Scope::root();
                 retval_node(root, "ret", ops::constant(root, {4, 5}, {2}, "c"), 0);
                 return std::make_shared<const Graph>(*root.graph());
               }()).ok());
  auto out = f.run("c", 1);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ(floats((*out)[0]), (std::vector<float>{4.f, 5.f}));
  auto erased = f.deregister("c");
  ASSERT_TRUE(erased.ok()) << erased.status();
  EXPECT_TRUE(*erased);
  ASSERT_TRUE(f.stop());
}

TEST(DeviceActorInlineTest, FailingPastTheRestartBudgetClosesTheGate) {
  // No restarts allowed: the first exception in the device actor fails it for good.
  struct Restore {
    ~Restore() { FaultInjector::global().clear(); }
  } restore;
  RestartPolicy none;
  none.max_restarts = 0;

  auto router = std::make_shared<InlineRouter>();
  DeviceActorFixture f(router, nullptr, none);
  ASSERT_TRUE(f.register_graph("a", recv_add_graph()).ok());
  auto e = router->inl.find(kCpu0, "a");
  ASSERT_TRUE(e.has_value());
  ASSERT_TRUE(gate_open(e->gate));

  ASSERT_TRUE(FaultInjector::global().add(Fault::throw_in("/job:w/replica:0/task:0", "device")).ok());
  auto out = f.run("a", 1);  // throws in the handler: the actor gives up
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("injected fault"), std::string::npos) << out.status();
  FaultInjector::global().clear();
  // The reply came after the gate was closed (same handler, under the gate's lock).
  EXPECT_FALSE(gate_open(e->gate));
  std::vector<std::string> keys{in_key()};
  const Tensor original = Tensor::from_vector<float>({1, 2}, {2});
  std::vector<Tensor> tensors{original};
  EXPECT_FALSE(try_run_inline(*e, kCpu0, 2, keys, tensors).has_value());
  EXPECT_TRUE(tensors[0].shares_buffer_with(original));
  // The actor still answers, with the budget's error.
  auto again = f.run("a", 3);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("max_restarts = 0"), std::string::npos) << again.status();
}

// Blocks the first compute() until released (bounded), then passes its input through.
struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, released = false;
  std::atomic<bool> first{true};
  void release() {
    std::lock_guard<std::mutex> l(mu);
    released = true;
    cv.notify_all();
  }
};

class BlockOnceKernel : public OpKernel {
 public:
  BlockOnceKernel(const Node& n, std::shared_ptr<Latch> latch) : OpKernel(n), latch_(std::move(latch)) {}
  Status compute(OpKernelContext& ctx) override {
    if (latch_->first.exchange(false)) {
      std::unique_lock<std::mutex> l(latch_->mu);
      latch_->entered = true;
      latch_->cv.notify_all();
      if (!latch_->cv.wait_for(l, std::chrono::seconds(30), [&] { return latch_->released; }))
        return Internal("latch never released");
    }
    ctx.set_output(0, ctx.input(0));
    return Status::OK();
  }

 private:
  std::shared_ptr<Latch> latch_;
};

TEST(DeviceActorInlineTest, ActorHoldsTheGateWhileRunningKernels) {
  auto latch = std::make_shared<Latch>();
  auto router = std::make_shared<InlineRouter>();
  DeviceActorFixture f(router, [latch](const Node& n) -> Result<std::unique_ptr<OpKernel>> {
    if (n.name == "block") return std::unique_ptr<OpKernel>(new BlockOnceKernel(n, latch));
    return std::unique_ptr<OpKernel>();
  });
  // Const [3, 4] -> Identity 'block' -> _Retval: self-contained, no _Recv, no _Arg.
  Scope root = Scope::root();
  auto id = ops::identity(root.with_op_name("block"), ops::constant(root, {3, 4}, {2}, "c"));
  retval_node(root, "ret", id, 0);
  ASSERT_TRUE(root.ok()) << root.status();
  ASSERT_TRUE(f.register_graph("blk", std::make_shared<const Graph>(*root.graph())).ok());
  auto e = router->inl.find(kCpu0, "blk");
  ASSERT_TRUE(e.has_value());

  // Whatever happens below, never leave the actor blocked.
  struct Releaser {
    Latch& l;
    ~Releaser() { l.release(); }
  } releaser{*latch};

  Result<std::vector<Tensor>> actor_out = Internal("not run");
  std::thread runner([&] { actor_out = f.run("blk", 1); });
  bool entered;
  {
    std::unique_lock<std::mutex> l(latch->mu);
    entered = latch->cv.wait_for(l, std::chrono::seconds(30), [&] { return latch->entered; });
  }
  std::optional<std::pair<Status, std::vector<Tensor>>> while_busy;
  if (entered) {
    std::vector<std::string> keys;
    std::vector<Tensor> tensors;
    while_busy = try_run_inline(*e, kCpu0, 2, keys, tensors);
  }
  latch->release();
  runner.join();
  ASSERT_TRUE(entered) << "the device actor never ran the blocking kernel";
  EXPECT_FALSE(while_busy.has_value()) << "an inline step ran while the device actor ran kernels";
  ASSERT_TRUE(actor_out.ok()) << actor_out.status();
  EXPECT_EQ(floats((*actor_out)[0]), (std::vector<float>{3.f, 4.f}));

  // Idle again: the inline step runs.
  std::vector<std::string> keys;
  std::vector<Tensor> tensors;
  auto r = try_run_inline(*e, kCpu0, 3, keys, tensors);
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->first.ok()) << r->first;
  EXPECT_EQ(floats(r->second[0]), (std::vector<float>{3.f, 4.f}));
}

}  // namespace
}  // namespace actorflow
