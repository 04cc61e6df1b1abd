// Variables held in a device's memory (actors/variable_actor.cc, "values in a GPU's memory"),
// run here without a GPU: a stand-in device whose memory is host memory that says it is not
// (Allocator::host_accessible() false), with its own copies and dense updates (the functors of
// device/functors.h, as the GPU's optimizer kernels use them). The variable ops' kernels run on
// it as on a GPU, against real variable actors; the same sequences from the CPU device are the
// reference, and as both compute with the same functors on the host the results must be equal
// bit for bit. On a real GPU, GpuVariableTest (tests/gpu_device_test.cc) and the variable cases of
// tests/gpu_backend_ops_test.cc check the same with the CUDA kernels.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device/device.h"
#include "device/functors.h"
#include "device/kernel.h"
#include "graph/op_registry.h"
#include "tests/util/kernel_run.h"

namespace actorflow {
namespace {

using testing::ActorResources;
using testing::run_node;
using testing::TestActorSystem;

// Host memory that claims to be device memory.
class DeviceMemory final : public Allocator {
 public:
  std::string name() const override { return "standin_gpu_memory"; }
  void* allocate(size_t bytes, size_t alignment) override {
    in_use += static_cast<int64_t>(bytes);
    return cpu_allocator()->allocate(bytes, alignment);
  }
  void deallocate(void* ptr, size_t bytes) override {
    in_use -= static_cast<int64_t>(bytes);
    cpu_allocator()->deallocate(ptr, bytes);
  }
  bool host_accessible() const override { return false; }
  // Bytes. Atomic: Allocator's contract says allocate()/deallocate() are thread-safe, and the last
  // reference to a buffer can die on any thread (a CAF worker or multiplexer thread), so two
  // threads updated a plain counter at once (ThreadSanitizer, DenseUpdatesRunInTheDevicesMemory...).
  std::atomic<int64_t> in_use{0};
};

// A GPU stand-in: tensors in DeviceMemory, copies by memcpy, dense updates by the functors.
class StandInGpu final : public Device {
 public:
  StandInGpu() : Device(DeviceAttributes{"/job:localhost/replica:0/task:0/device:GPU:0", "GPU", 0, 0, "stand-in"}) {}
  Allocator* allocator() override { return &mem_; }
  bool mine(const Tensor& t) const { return t.is_initialized() && t.buffer()->allocator() == &mem_; }
  Result<Tensor> copy_to_host(const Tensor& t) override {
    if (!t.is_initialized() || t.on_host()) return t;
    if (!mine(t)) return InvalidArgument("copy_to_host of another device's tensor");
    Tensor h(t.dtype(), t.shape());
    std::memcpy(h.raw_data(), t.raw_data(), t.bytes());
    ++to_host;
    return h;
  }
  Result<Tensor> copy_from_host(const Tensor& t) override {
    if (!t.is_initialized()) return t;
    if (!t.on_host()) {
      if (mine(t)) return t;
      return InvalidArgument("copy_from_host of another device's tensor");
    }
    AF_ASSIGN_OR_RETURN(Tensor d, Tensor::allocate(&mem_, t.dtype(), t.shape()));
    std::memcpy(d.raw_data(), t.raw_data(), t.bytes());
    ++from_host;
    return d;
  }
  Result<Tensor> duplicate(const Tensor& t) override {
    if (t.on_host()) return copy_from_host(t);
    if (!mine(t)) return InvalidArgument("duplicate of another device's tensor");
    AF_ASSIGN_OR_RETURN(Tensor d, Tensor::allocate(&mem_, t.dtype(), t.shape()));
    std::memcpy(d.raw_data(), t.raw_data(), t.bytes());
    return d;
  }
  Status apply_dense_update(const DenseUpdate& u, Tensor& w, Tensor* s1, Tensor* s2, const Tensor& g) override {
    if (!mine(w) || !mine(g) || (s1 && !mine(*s1)) || (s2 && !mine(*s2)))
      return InvalidArgument("an operand of the update is not in the device's memory");
    if (w.dtype() != DType::kFloat32) return Unimplemented("float32 only");
    const auto f = [](double v) { return static_cast<float>(v); };
    float* wp = w.data<float>();
    const float* gp = g.data<float>();
    for (int64_t i = 0; i < w.num_elements(); ++i) {
      switch (u.kind) {
        case DenseUpdate::Kind::kSgd: functors::SgdUpdateF<float>{f(u.lr)}(wp[i], gp[i]); break;
        case DenseUpdate::Kind::kMomentum:
          functors::MomentumUpdateF<float>{f(u.lr), f(u.momentum), u.use_nesterov}(wp[i], s1->data<float>()[i], gp[i]);
          break;
        case DenseUpdate::Kind::kAdam:
          functors::AdamUpdateF<float>::make(f(u.lr), f(u.beta1), f(u.beta2), f(u.epsilon), u.adam_t)(
              wp[i], s1->data<float>()[i], s2->data<float>()[i], gp[i]);
          break;
        case DenseUpdate::Kind::kAdagrad:
          functors::AdagradUpdateF<float>{f(u.lr)}(wp[i], s1->data<float>()[i], gp[i]);
          break;
        case DenseUpdate::Kind::kRmsProp:
          functors::RmsPropUpdateF<float>{f(u.lr), f(u.decay), f(u.momentum), f(u.epsilon)}(
              wp[i], s1->data<float>()[i], s2->data<float>()[i], gp[i]);
          break;
      }
    }
    ++updates;
    return Status::OK();
  }
  int64_t bytes_in_use() const { return mem_.in_use; }
  int updates = 0, to_host = 0, from_host = 0;

 private:
  DeviceMemory mem_;
};

class DeviceVariablesTest : public ::testing::Test {
 protected:
  DeviceVariablesTest() : res_(as_.sys), cpu_(make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0)) {}

  // The node of `op` on variable `var` ([3, 4] float32 unless `dtype`) with these inputs.
  Node node(const std::string& op, const std::string& var, const std::vector<Tensor>& in, AttrMap attrs = {},
            DType dtype = DType::kFloat32) {
    attrs.set("var_name", var);
    attrs.set("dtype", dtype);
    attrs.set("shape", Shape{3, 4});
    Node n;
    n.name = op;
    n.op = op;
    n.inputs.resize(in.size());  // the registry checks the op's input count
    n.attrs = attrs;
    auto def = OpRegistry::global().lookup(op);
    EXPECT_TRUE(def.ok()) << def.status();
    std::vector<DType> types;
    std::vector<Shape> shapes;
    for (const Tensor& t : in) {
      types.push_back(t.dtype());
      shapes.push_back(t.shape());
    }
    InferenceContext ctx(n, types, shapes, std::vector<const Tensor*>(in.size(), nullptr));
    Status s = (*def)->shape_fn(ctx);
    EXPECT_TRUE(s.ok()) << op << ": " << s;
    n.output_types = ctx.out_types;
    n.output_shapes = ctx.out_shapes;
    return n;
  }
  // Runs `op` on variable `var` from `dev` (the CPU kernel class, which serves both); returns
  // output 0 as the kernel left it (in dev's memory).
  Result<Tensor> run(Device* dev, const std::string& op, const std::string& var, const std::vector<Tensor>& in,
                     AttrMap attrs = {}, DType dtype = DType::kFloat32) {
    AF_ASSIGN_OR_RETURN(auto out, run_node(node(op, var, in, attrs, dtype), dev, in, &res_, /*to_host=*/false, "CPU"));
    return out[0];
  }
  Tensor host(const Tensor& t) { return *gpu_.copy_to_host(t); }
  Tensor rnd(const Shape& s) {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    Tensor t(DType::kFloat32, s);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = u(rng_);
    return t;
  }
  static Tensor f32(float v) { return Tensor::scalar<float>(v); }

  TestActorSystem as_;
  ActorResources res_;
  std::unique_ptr<Device> cpu_;
  StandInGpu gpu_;
  std::mt19937 rng_{11};
};

struct Update {
  std::string op;
  std::vector<Tensor> hyper_before, hyper_after;  // the inputs before and after the gradient
};

std::vector<Update> updates() {
  auto s = [](float v) { return Tensor::scalar<float>(v); };
  return {{"ApplyGradientDescent", {s(0.1f)}, {}},
          {"ApplyMomentum", {s(0.1f)}, {s(0.9f)}},
          {"ApplyAdam", {s(0.05f), s(0.9f), s(0.999f), s(1e-7f)}, {}},
          {"ApplyAdagrad", {s(0.1f)}, {}},
          {"ApplyRMSProp", {s(0.01f), s(0.9f), s(0.5f), s(1e-6f)}, {}}};
}

std::vector<Tensor> with_grad(const Update& u, const Tensor& g) {
  std::vector<Tensor> in = u.hyper_before;
  in.push_back(g);
  in.insert(in.end(), u.hyper_after.begin(), u.hyper_after.end());
  return in;
}

TEST_F(DeviceVariablesTest, DenseUpdatesRunInTheDevicesMemoryAndEqualTheHosts) {
  for (const Update& u : updates()) {
    SCOPED_TRACE(u.op);
    const Tensor w0 = rnd(Shape{3, 4});
    const std::string dv = "d_" + u.op, hv = "h_" + u.op;
    auto a = run(&gpu_, "Assign", dv, {w0});
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_TRUE(gpu_.mine(*a)) << "the assigned value should live in the device's memory";
    ASSERT_TRUE(run(cpu_.get(), "Assign", hv, {w0}).ok());
    const int before = gpu_.updates;
    for (int step = 0; step < 3; ++step) {
      const Tensor g = rnd(Shape{3, 4});
      auto d = run(&gpu_, u.op, dv, with_grad(u, g));
      auto h = run(cpu_.get(), u.op, hv, with_grad(u, g));
      ASSERT_TRUE(d.ok()) << d.status();
      ASSERT_TRUE(h.ok()) << h.status();
      EXPECT_TRUE(gpu_.mine(*d));
      EXPECT_TRUE(host(*d).equals(*h)) << "step " << step;
    }
    EXPECT_EQ(gpu_.updates - before, 3) << "every update should have run on the device";
  }
}

TEST_F(DeviceVariablesTest, ReadsFromTheHostLeaveTheValueOnTheDevice) {
  const Tensor w0 = rnd(Shape{3, 4});
  ASSERT_TRUE(run(&gpu_, "Assign", "v", {w0}).ok());
  auto r1 = run(&gpu_, "VariableV2", "v", {});
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_TRUE(gpu_.mine(*r1));
  auto h = run(cpu_.get(), "VariableV2", "v", {});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(h->on_host());
  EXPECT_TRUE(h->equals(w0));
  auto r2 = run(&gpu_, "VariableV2", "v", {});
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(r2->raw_data(), r1->raw_data()) << "the value should still be the device's, not copied back";
  auto init = run(&gpu_, "IsVariableInitialized", "v", {});
  ASSERT_TRUE(init.ok()) << init.status();
  EXPECT_TRUE(gpu_.mine(*init)) << "a reply computed on the host is copied to the kernel's device";
  EXPECT_TRUE(host(*init).data<bool>()[0]);
}

TEST_F(DeviceVariablesTest, HostCallsMoveTheStateAndDeviceUpdatesBringItBackWithTheSlots) {
  const Tensor w0 = rnd(Shape{3, 4});
  const Update adam = updates()[2];
  ASSERT_TRUE(run(&gpu_, "Assign", "d", {w0}).ok());
  ASSERT_TRUE(run(cpu_.get(), "Assign", "h", {w0}).ok());
  const Tensor ids = Tensor::from_vector<int64_t>({2, 0}, Shape{2});
  for (int round = 0; round < 2; ++round) {
    for (int step = 0; step < 2; ++step) {
      const Tensor g = rnd(Shape{3, 4});
      ASSERT_TRUE(run(&gpu_, adam.op, "d", with_grad(adam, g)).ok());
      ASSERT_TRUE(run(cpu_.get(), adam.op, "h", with_grad(adam, g)).ok());
    }
    // A host-only method from the CPU moves value and slots (Adam's m, v and step) to the host.
    const Tensor rows = rnd(Shape{2, 4});
    auto sd = run(cpu_.get(), "ScatterAdd", "d", {ids, rows});
    auto sh = run(cpu_.get(), "ScatterAdd", "h", {ids, rows});
    ASSERT_TRUE(sd.ok()) << sd.status();
    ASSERT_TRUE(sh.ok()) << sh.status();
    EXPECT_TRUE(sd->equals(*sh));
    EXPECT_EQ(gpu_.bytes_in_use(), 0) << "the value and every slot should have moved to the host";
  }
  // Slots as a blob: VariableSlots from the device runs on the host, its reply in device memory.
  auto bd = run(&gpu_, "VariableSlots", "d", {});
  auto bh = run(cpu_.get(), "VariableSlots", "h", {});
  ASSERT_TRUE(bd.ok()) << bd.status();
  ASSERT_TRUE(bh.ok()) << bh.status();
  EXPECT_TRUE(gpu_.mine(*bd));
  EXPECT_TRUE(host(*bd).equals(*bh)) << "Adam's slots and step should have moved with the value";
  auto vd = run(&gpu_, "VariableV2", "d", {});
  auto vh = run(cpu_.get(), "VariableV2", "h", {});
  ASSERT_TRUE(vd.ok() && vh.ok());
  EXPECT_TRUE(host(*vd).equals(*vh));
}

TEST_F(DeviceVariablesTest, AReaderKeepsWhatItReadAcrossADeviceUpdate) {
  const Tensor w0 = rnd(Shape{3, 4});
  ASSERT_TRUE(run(&gpu_, "Assign", "v", {w0}).ok());
  auto held = run(&gpu_, "VariableV2", "v", {});
  ASSERT_TRUE(held.ok()) << held.status();
  const Update sgd = updates()[0];
  auto next = run(&gpu_, sgd.op, "v", with_grad(sgd, rnd(Shape{3, 4})));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(host(*held).equals(w0)) << "the update wrote into a value a reader still held";
  EXPECT_FALSE(host(*next).equals(w0));
}

TEST_F(DeviceVariablesTest, DeviceArgumentsOfHostMethodsAreCopiedToTheHost) {
  const Tensor w0 = rnd(Shape{3, 4});
  ASSERT_TRUE(run(&gpu_, "Assign", "v", {w0}).ok());
  const Tensor rows = rnd(Shape{1, 4});
  auto s = run(&gpu_, "ScatterUpdate", "v", {Tensor::from_vector<int64_t>({1}, Shape{1}), rows});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(gpu_.mine(*s));
  EXPECT_TRUE(host(*s).equals(rows));
  auto v = run(cpu_.get(), "VariableV2", "v", {});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(std::memcmp(v->data<float>() + 4, rows.data<float>(), 4 * sizeof(float)), 0);
}

TEST_F(DeviceVariablesTest, ErrorsNameTheVariable) {
  auto r = run(&gpu_, "VariableV2", "never", {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("variable 'never': is not initialized"), std::string::npos) << r.status();
  // A float64 variable on the device: the optimizers update float32 variables only.
  Tensor w64(DType::kFloat64, Shape{3, 4});
  { auto a = run(&gpu_, "Assign", "w64", {w64}, {}, DType::kFloat64); ASSERT_TRUE(a.ok()) << a.status(); }
  auto u = run(&gpu_, "ApplyGradientDescent", "w64", {f32(0.1f), w64}, {}, DType::kFloat64);
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("variable 'w64'"), std::string::npos) << u.status();
  EXPECT_NE(u.status().message().find("float32"), std::string::npos) << u.status();
}

}  // namespace
}  // namespace actorflow
