// GPU device options and enumeration. Runs everywhere: without a visible GPU (or in a
// CPU-only build) create_devices yields CPU devices only; the tests that need a GPU skip
// with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "device/bfc_allocator.h"
#include "device/device.h"
#include "device/functors.h"
#include "device/gpu_options.h"
#include "device/kernel.h"
#include "actorflow/actorflow.h"
#include "actorflow/train.h"
#include "core/metrics.h"

#ifdef AF_WITH_CUDA
#include "device/cuda/cuda_device.h"
#include "device/cuda/gpu_device.h"
#include "device/cuda/optimizer_kernels.h"
#endif

namespace actorflow {
namespace {

const char* kTask = "/job:worker/replica:0/task:0";

TEST(VisibleDevicesTest, ParsesLists) {
  EXPECT_EQ(*parse_visible_devices(""), std::vector<int>{});
  EXPECT_EQ(*parse_visible_devices("  "), std::vector<int>{});
  EXPECT_EQ(*parse_visible_devices("0"), std::vector<int>{0});
  EXPECT_EQ(*parse_visible_devices("1,0"), (std::vector<int>{1, 0}));
  EXPECT_EQ(*parse_visible_devices(" 2 , 0,1 "), (std::vector<int>{2, 0, 1}));
}

TEST(VisibleDevicesTest, SyntaxErrorsNameTheEntry) {
  auto r = parse_visible_devices("0,x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "visible_devices '0,x': 'x' is not a GPU index");
  r = parse_visible_devices("-1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "visible_devices '-1': '-1' is not a GPU index");
  r = parse_visible_devices("0,,1");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("empty entry"), std::string::npos) << r.status();
  r = parse_visible_devices("1,1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "visible_devices '1,1': GPU 1 is listed twice");
  r = parse_visible_devices("/gpu:0");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "visible_devices '/gpu:0': '/gpu:0' is not a GPU index");
}

TEST(VisibleDevicesTest, RemapsOnTopOfCudaOrdinals) {
  EXPECT_EQ(*resolve_visible_devices("", 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(*resolve_visible_devices("", 0), std::vector<int>{});
  // "1,0": CUDA device 1 becomes /device:GPU:0 and CUDA device 0 /device:GPU:1.
  EXPECT_EQ(*resolve_visible_devices("1,0", 2), (std::vector<int>{1, 0}));
  EXPECT_EQ(*resolve_visible_devices("2", 4), std::vector<int>{2});
  auto r = resolve_visible_devices("0,3", 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("visible_devices '0,3': GPU 3 does not exist; 2 GPU(s) are visible"),
            std::string::npos)
      << r.status();
}

TEST(GpuMemoryLimitTest, FractionIsAShareOfTotalMemory) {
  const int64_t GiB = int64_t{1} << 30;
  EXPECT_EQ(gpu_memory_limit(0.5, 16 * GiB, 15 * GiB), 8 * GiB);
  EXPECT_EQ(gpu_memory_limit(0.2, 10 * GiB, 1 * GiB), 2 * GiB);  // may exceed free: growth decides
  EXPECT_EQ(gpu_memory_limit(0.3, 1000, 1000) % 256, 0);          // rounded down to 256
  EXPECT_EQ(gpu_memory_limit(0.3, 1000, 1000), 256);
}

TEST(GpuMemoryLimitTest, ZeroFractionTakesFreeMemoryLessAReserve) {
  const int64_t GiB = int64_t{1} << 30, MiB = int64_t{1} << 20;
  // 5% of 10 GiB = 512 MiB reserve (more than the 64 MiB floor).
  EXPECT_EQ(gpu_memory_limit(0.0, 16 * GiB, 10 * GiB), 10 * GiB - 512 * MiB);
  // 64 MiB floor on a nearly full device.
  EXPECT_EQ(gpu_memory_limit(0.0, 16 * GiB, 256 * MiB), 192 * MiB);
  // Less free than the reserve: half of what is free.
  EXPECT_EQ(gpu_memory_limit(0.0, 16 * GiB, 32 * MiB), 16 * MiB);
}

TEST(GpuOptionsTest, Validation) {
  DeviceEnumerationOptions o;
  EXPECT_TRUE(validate_gpu_options(o).ok());
  o.gpu_memory_fraction = 1.5;
  Status s = validate_gpu_options(o);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("gpu_memory_fraction must be in [0, 1]"), std::string::npos) << s;
  o.gpu_memory_fraction = -0.1;
  EXPECT_FALSE(validate_gpu_options(o).ok());
  o.gpu_memory_fraction = 0.4;
  o.visible_devices = "0,x";
  EXPECT_EQ(validate_gpu_options(o).message(), "visible_devices '0,x': 'x' is not a GPU index");
}

TEST(CreateDevicesTest, BadVisibleDevicesFailInEveryBuild) {
  DeviceEnumerationOptions o;
  o.visible_devices = "0,x";
  auto d = create_devices(kTask, o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), "visible_devices '0,x': 'x' is not a GPU index");
}

// The number of CUDA GPUs create_devices found, or -1 with `why` when there are none.
int count_gpus(const std::vector<std::unique_ptr<Device>>& devs) {
  int n = 0;
  for (auto& d : devs) n += d->type() == "GPU";
  return n;
}

TEST(CreateDevicesTest, WithoutGpusYieldsCpusOnlyAndNoError) {
  DeviceEnumerationOptions o;
  o.cpu_devices = 2;
  o.visible_devices = "0";  // naming a GPU that is absent is not an error (cluster defaults)
  o.gpu_memory_fraction = 0.2;
  auto d = create_devices(kTask, o);
  ASSERT_TRUE(d.ok()) << d.status();
  if (count_gpus(*d) > 0) GTEST_SKIP() << "a CUDA GPU is visible; this test covers machines without one";
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[0]->name(), std::string(kTask) + "/device:CPU:0");
  EXPECT_EQ((*d)[1]->name(), std::string(kTask) + "/device:CPU:1");
  EXPECT_EQ((*d)[1]->attributes().index, 1);
}


// A host device whose allocator is a small BFC allocator: out-of-memory messages must name
// the op, the request and the cap.
class SmallHostDevice final : public Device {
 public:
  explicit SmallHostDevice(std::unique_ptr<BFCAllocator> a)
      : Device(DeviceAttributes{"/job:w/replica:0/task:0/device:CPU:7", "CPU", 7, 4096, "test"}), a_(std::move(a)) {}
  Allocator* allocator() override { return a_.get(); }

 private:
  std::unique_ptr<BFCAllocator> a_;
};

TEST(AllocateOutputTest, OutOfMemoryNamesOpRequestAndCap) {
  BFCOptions o;
  o.memory_limit = 4096;
  o.allow_growth = false;
  auto a = BFCAllocator::create(std::make_unique<HostSubAllocator>(), "gpu_0_bfc", o);
  ASSERT_TRUE(a.ok()) << a.status();
  SmallHostDevice dev(std::move(*a));
  Node n;
  n.name = "big";
  n.op = "MatMul";
  n.output_types = {DType::kFloat32};
  OpKernelContext ctx(n, &dev, {}, 1);
  auto small = ctx.allocate_output(0, DType::kFloat32, Shape{16, 16});  // 1 KiB fits
  ASSERT_TRUE(small.ok()) << small.status();
  auto r = ctx.allocate_output(0, DType::kFloat32, Shape{1000, 1000});
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_EQ(r.status().code(), Code::kResourceExhausted);
  EXPECT_EQ(m.rfind("MatMul 'big': ", 0), 0u) << m;
  EXPECT_NE(m.find("4000000 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("[1000,1000]"), std::string::npos) << m;
  EXPECT_NE(m.find("gpu_0_bfc"), std::string::npos) << m;
  EXPECT_NE(m.find("memory limit 4096 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("device:CPU:7"), std::string::npos) << m;
}

// True when a CUDA GPU is visible (`why` says why not).
bool gpu_visible(std::string* why) {
#ifdef AF_WITH_CUDA
  return cuda_device_count(why) > 0;
#else
  *why = "built without CUDA (AF_ENABLE_CUDA=OFF or nvcc not found)";
  return false;
#endif
}

Tensor random_floats(const Shape& s, std::mt19937* rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Tensor t(DType::kFloat32, s);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = u(*rng);
  return t;
}

// ---- variables on a GPU ----------------------------------------------------------------------

// Dense optimizer updates applied in a GPU's memory so far (actors/variable_actor.cc).
int64_t device_updates() {
  return Metrics::global()
      .counter("actorflow_variable_device_updates_total",
               "Dense optimizer updates applied to this task's variables in a GPU's memory (Device::apply_dense_update).")
      .value();
}

struct Trained {
  std::vector<std::vector<float>> w, b;  // after each step
  int64_t device_updates = 0;            // updates that ran in GPU memory
};

// Variables w [4, 3] (constant initializer) and b [3] (the default glorot initializer, seeded) on
// `var_device`, trained by `opt` for 4 steps on y = x w + b with the loss and the gradients on
// /cpu:0, soft placement off (so the variables' ops must have kernels where they are placed).
Result<Trained> train_variables(const std::string& var_device, const train::Optimizer& opt) {
  LocalServerOptions so;
  so.gpu_memory_fraction = 0.1;
  so.allow_growth = true;
  AF_ASSIGN_OR_RETURN(std::unique_ptr<Server> server, Server::local(so));
  Scope root = Scope::root();
  Scope vs = root.with_device(var_device), cpu = root.with_device("/cpu:0");
  Tensor w0 = Tensor::from_vector<float>({0.5f, -0.25f, 1, 0.75f, -1, 0.125f, 0.3f, 0.2f, -0.6f, 0.9f, -0.4f, 0.05f}, Shape{4, 3});
  Output w = train::get_variable(vs, "w", Shape{4, 3}, DType::kFloat32,
                                 [&](const Scope& s, const Shape&, DType) { return ops::constant(s, w0); });
  Output b = train::get_variable(vs, "b", Shape{3}, DType::kFloat32, train::glorot_uniform_initializer(7));
  Output x = ops::placeholder(cpu, DType::kFloat32, Shape{5, 4}, "x");
  Output t = ops::placeholder(cpu, DType::kFloat32, Shape{5, 3}, "t");
  Output y = ops::add(cpu, ops::matmul(cpu, x, w), b);
  Output loss = ops::reduce_mean(cpu, ops::square(cpu, ops::sub(cpu, y, t)));
  AF_ASSIGN_OR_RETURN(Output step, opt.minimize(cpu, loss));
  AF_ASSIGN_OR_RETURN(Output init, train::global_variables_initializer(root));
  Session sess(root, server->target(), SessionOptions{}.allow_soft_placement(false));
  AF_RETURN_IF_ERROR(sess.run({}, {}, {init}).status());
  std::mt19937 rng(3);
  Trained out;
  const int64_t before = device_updates();
  for (int i = 0; i < 4; ++i) {
    AF_RETURN_IF_ERROR(sess.run({{x, random_floats(Shape{5, 4}, &rng)}, {t, random_floats(Shape{5, 3}, &rng)}}, {},
                                {step})
                           .status());
    AF_ASSIGN_OR_RETURN(auto v, sess.run({w, b}));
    out.w.push_back(std::vector<float>(v[0].data<float>(), v[0].data<float>() + v[0].num_elements()));
    out.b.push_back(std::vector<float>(v[1].data<float>(), v[1].data<float>() + v[1].num_elements()));
  }
  out.device_updates = device_updates() - before;
  return out;
}

void expect_same_training(const Trained& gpu, const Trained& cpu) {
  ASSERT_EQ(gpu.w.size(), cpu.w.size());
  for (size_t s = 0; s < cpu.w.size(); ++s) {
    for (size_t i = 0; i < cpu.w[s].size(); ++i)
      EXPECT_NEAR(gpu.w[s][i], cpu.w[s][i], 1e-5f * std::max(1.f, std::fabs(cpu.w[s][i]))) << "w, step " << s + 1 << ", element " << i;
    for (size_t i = 0; i < cpu.b[s].size(); ++i)
      EXPECT_NEAR(gpu.b[s][i], cpu.b[s][i], 1e-5f * std::max(1.f, std::fabs(cpu.b[s][i]))) << "b, step " << s + 1 << ", element " << i;
  }
  EXPECT_NE(cpu.w.front(), cpu.w.back()) << "training changed nothing: the comparison would prove nothing";
  EXPECT_EQ(cpu.device_updates, 0);
  EXPECT_EQ(gpu.device_updates, 2 * 4) << "every update of w and b should have run in the GPU's memory";
}

// Runs here too: the CPU half of the comparisons below trains, and nothing runs in GPU memory.
TEST(VariableTrainingTest, TheCpuReferenceTrains) {
  auto cpu = train_variables("/device:CPU:0", train::AdamOptimizer(0.05f));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_EQ(cpu->w.size(), 4u);
  EXPECT_NE(cpu->w.front(), cpu->w.back());
  EXPECT_NE(cpu->b.front(), cpu->b.back());
  EXPECT_EQ(cpu->device_updates, 0);
}

class GpuVariableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!gpu_visible(&why)) GTEST_SKIP() << "no CUDA GPU visible: " << why;
  }
};

TEST_F(GpuVariableTest, SgdOnTheGpuEqualsTheCpu) {
  auto gpu = train_variables("/device:GPU:0", train::GradientDescentOptimizer(0.1f));
  auto cpu = train_variables("/device:CPU:0", train::GradientDescentOptimizer(0.1f));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  expect_same_training(*gpu, *cpu);
}

TEST_F(GpuVariableTest, AdamOnTheGpuEqualsTheCpu) {
  auto gpu = train_variables("/device:GPU:0", train::AdamOptimizer(0.05f));
  auto cpu = train_variables("/device:CPU:0", train::AdamOptimizer(0.05f));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  expect_same_training(*gpu, *cpu);
}

TEST_F(GpuVariableTest, MomentumRmsPropAndAdagradOnTheGpuEqualTheCpu) {
  for (int k = 0; k < 3; ++k) {
    auto make = [k]() -> std::unique_ptr<train::Optimizer> {
      if (k == 0) return std::make_unique<train::MomentumOptimizer>(0.05f, 0.9f);
      if (k == 1) return std::make_unique<train::RMSPropOptimizer>(0.01f);
      return std::make_unique<train::AdagradOptimizer>(0.1f);
    };
    auto gpu = train_variables("/device:GPU:0", *make());
    auto cpu = train_variables("/device:CPU:0", *make());
    ASSERT_TRUE(gpu.ok()) << "optimizer " << k << ": " << gpu.status();
    ASSERT_TRUE(cpu.ok()) << "optimizer " << k << ": " << cpu.status();
    SCOPED_TRACE("optimizer " + std::to_string(k));
    expect_same_training(*gpu, *cpu);
  }
}

// ---- tests that need a GPU ---------------------------------------------------------------

#ifdef AF_WITH_CUDA

// Skips the test when no GPU is visible; otherwise creates the task's devices.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA GPU visible: " << why;
    DeviceEnumerationOptions o;
    o.gpu_memory_fraction = 0.3;
    o.allow_growth = true;
    auto d = create_devices(kTask, o);
    ASSERT_TRUE(d.ok()) << d.status();
    devices_ = std::move(*d);
    for (auto& dev : devices_)
      if (dev->type() == "GPU" && !gpu_) gpu_ = static_cast<GpuDevice*>(dev.get());
    ASSERT_NE(gpu_, nullptr);
    cpu_ = devices_[0].get();
  }

  // Runs one op on `dev` with host inputs; returns host outputs.
  Result<std::vector<Tensor>> run(Device* dev, const std::string& op, const AttrMap& attrs,
                                  const std::vector<Tensor>& inputs, int num_outputs = 1) {
    Node n;
    n.name = "t";
    n.op = op;
    n.attrs = attrs;
    n.output_types.assign(static_cast<size_t>(num_outputs), DType::kFloat32);
    n.inputs.resize(inputs.size());  // the registry checks the op's input count
    AF_ASSIGN_OR_RETURN(auto kernel, KernelRegistry::global().create(n, dev->type()));
    std::vector<Tensor> in;
    for (const Tensor& t : inputs) {
      AF_ASSIGN_OR_RETURN(Tensor d, dev->copy_from_host(t));
      in.push_back(d);
    }
    OpKernelContext ctx(n, dev, in, 1);
    AF_RETURN_IF_ERROR(kernel->compute(ctx));
    std::vector<Tensor> out;
    for (Tensor& t : ctx.outputs()) {
      AF_ASSIGN_OR_RETURN(Tensor h, dev->copy_to_host(t));
      out.push_back(h);
    }
    return out;
  }
  Result<Tensor> run1(const std::string& op, const AttrMap& attrs, const std::vector<Tensor>& inputs) {
    AF_ASSIGN_OR_RETURN(auto v, run(gpu_, op, attrs, inputs));
    return v[0];
  }

  std::vector<std::unique_ptr<Device>> devices_;
  GpuDevice* gpu_ = nullptr;
  Device* cpu_ = nullptr;
};

Tensor F(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector<float>(v, s); }

void expect_near(const Tensor& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.dtype(), DType::kFloat32);
  ASSERT_EQ(got.num_elements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got.data<float>()[i], want[i], tol) << "element " << i;
}

Tensor random_tensor(const Shape& s, std::mt19937* rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Tensor t(DType::kFloat32, s);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = u(*rng);
  return t;
}

TEST_F(GpuTest, DeviceAttributesAndMemoryOptions) {
  const DeviceAttributes& a = gpu_->attributes();
  EXPECT_EQ(a.name, std::string(kTask) + "/device:GPU:0");
  EXPECT_EQ(a.type, "GPU");
  EXPECT_EQ(a.description.rfind("device: ", 0), 0u) << a.description;
  EXPECT_NE(a.description.find(", name: "), std::string::npos);
  EXPECT_NE(a.description.find(", pci bus id: "), std::string::npos);
  EXPECT_EQ(a.memory_limit, gpu_memory_limit(0.3, gpu_->info().total_bytes, gpu_->info().free_bytes));
  EXPECT_FALSE(gpu_->allocator()->host_accessible());
  EXPECT_EQ(gpu_->bfc()->bfc_stats().bytes_reserved, 0);  // allow_growth: nothing reserved yet
}

TEST_F(GpuTest, ReserveUpFrontTakesTheFraction) {
  DeviceEnumerationOptions o;
  o.gpu_memory_fraction = 0.05;
  o.allow_growth = false;
  devices_.clear();  // release the fixture's GPU memory first
  gpu_ = nullptr;
  auto d = create_devices(kTask, o);
  ASSERT_TRUE(d.ok()) << d.status();
  auto* g = static_cast<GpuDevice*>((*d)[1].get());
  EXPECT_EQ(g->bfc()->bfc_stats().bytes_reserved, g->attributes().memory_limit);
}

TEST_F(GpuTest, VisibleDevicesRemapAndErrors) {
  std::string why;
  const int n = cuda_device_count(&why);
  DeviceEnumerationOptions o;
  o.gpu_memory_fraction = 0.05;
  o.allow_growth = true;
  o.visible_devices = "0," + std::to_string(n);  // one past the last GPU
  auto bad = create_devices(kTask, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("GPU " + std::to_string(n) + " does not exist"), std::string::npos)
      << bad.status();
  if (n < 2) GTEST_SKIP() << "remapping needs 2 GPUs, " << n << " visible";
  o.visible_devices = "1,0";
  auto d = create_devices(kTask, o);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 3u);
  auto* g0 = static_cast<GpuDevice*>((*d)[1].get());
  EXPECT_EQ(g0->name(), std::string(kTask) + "/device:GPU:0");
  EXPECT_EQ(g0->ordinal(), 1);
  EXPECT_EQ(g0->attributes().description.rfind("device: 1,", 0), 0u);
}

TEST_F(GpuTest, CopiesRoundTripThroughStaging) {
  std::mt19937 rng(1);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{5} << 20}) {  // 5M floats > staging buffer
    Tensor h = random_tensor(Shape{n}, &rng);
    auto d = gpu_->copy_from_host(h);
    ASSERT_TRUE(d.ok()) << d.status();
    if (n > 0) {
      EXPECT_FALSE(d->on_host());
    }
    auto back = gpu_->copy_to_host(*d);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(back->on_host());
    EXPECT_TRUE(back->equals(h)) << "n = " << n;
  }
}

TEST_F(GpuTest, OutOfMemoryIsAnErrorNamingTheCap) {
  const int64_t too_many = gpu_->attributes().memory_limit / 4 + 1024;  // floats beyond the limit
  Node n;
  n.name = "huge";
  n.op = "Relu";
  n.output_types = {DType::kFloat32};
  OpKernelContext ctx(n, gpu_, {}, 1);
  auto r = ctx.allocate_output(0, DType::kFloat32, Shape{too_many});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kResourceExhausted);
  EXPECT_NE(r.status().message().find("memory limit " + std::to_string(gpu_->attributes().memory_limit)),
            std::string::npos)
      << r.status();
}

TEST_F(GpuTest, MatMul) {
  Tensor a = F({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Tensor b = F({1, 2, 3, 4, 5, 6}, Shape{3, 2});
  auto c = run1("MatMul", {}, {a, b});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->shape(), (Shape{2, 2}));
  expect_near(*c, {22, 28, 49, 64});
  AttrMap t;
  t.set("transpose_a", true);
  t.set("transpose_b", true);
  // a^T (3x2) x b^T (2x3) = (b a)^T: b a = [[9,12,15],[19,26,33],[29,40,51]]
  auto d = run1("MatMul", t, {a, b});
  ASSERT_TRUE(d.ok()) << d.status();
  expect_near(*d, {9, 19, 29, 12, 26, 40, 15, 33, 51});
  auto bad = run1("MatMul", {}, {a, a});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("MatMul 't': ", 0), 0u) << bad.status();
}

TEST_F(GpuTest, ElementwiseWithBroadcasting) {
  Tensor x = F({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Tensor row = F({10, 20, 30}, Shape{3});
  Tensor col = F({100, 200}, Shape{2, 1});
  auto s = run1("Add", {}, {x, row});
  ASSERT_TRUE(s.ok()) << s.status();
  expect_near(*s, {11, 22, 33, 14, 25, 36});
  auto m = run1("Mul", {}, {col, x});
  ASSERT_TRUE(m.ok()) << m.status();
  expect_near(*m, {100, 200, 300, 800, 1000, 1200});
  auto sub = run1("Sub", {}, {x, Tensor::scalar(1.0f)});
  ASSERT_TRUE(sub.ok()) << sub.status();
  expect_near(*sub, {0, 1, 2, 3, 4, 5});
  auto eq = run(gpu_, "Equal", {}, {x, F({1, 0, 3, 0, 5, 0}, Shape{2, 3})});
  ASSERT_TRUE(eq.ok()) << eq.status();
  ASSERT_EQ((*eq)[0].dtype(), DType::kBool);
  std::vector<bool> want = {true, false, true, false, true, false};
  for (int i = 0; i < 6; ++i) EXPECT_EQ((*eq)[0].data<bool>()[i], want[static_cast<size_t>(i)]);
  auto relu = run1("Relu", {}, {F({-1, 0, 2}, Shape{3})});
  ASSERT_TRUE(relu.ok());
  expect_near(*relu, {0, 0, 2});
  auto rg = run1("ReluGrad", {}, {F({5, 6, 7}, Shape{3}), F({-1, 0, 2}, Shape{3})});
  ASSERT_TRUE(rg.ok());
  expect_near(*rg, {0, 0, 7});
  auto addn = run1("AddN", {}, {x, x, x});
  ASSERT_TRUE(addn.ok());
  expect_near(*addn, {3, 6, 9, 12, 15, 18});
  auto bias = run1("BiasAdd", {}, {x, row});
  ASSERT_TRUE(bias.ok());
  expect_near(*bias, {11, 22, 33, 14, 25, 36});
  AttrMap cast;
  cast.set("DstT", DType::kInt32);
  auto ci = run(gpu_, "Cast", cast, {F({-2.7f, 3.9f}, Shape{2})});
  ASSERT_TRUE(ci.ok()) << ci.status();
  EXPECT_EQ((*ci)[0].data<int32_t>()[0], -2);
  EXPECT_EQ((*ci)[0].data<int32_t>()[1], 3);
  AttrMap rs;
  rs.set("shape", std::vector<int64_t>{3, -1});
  auto r = run1("Reshape", rs, {x});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (Shape{3, 2}));
}

TEST_F(GpuTest, ArrayOps) {
  Tensor x = F({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  auto sh = run(gpu_, "Shape", {}, {x});
  ASSERT_TRUE(sh.ok()) << sh.status();
  ASSERT_EQ((*sh)[0].dtype(), DType::kInt64);
  EXPECT_EQ((*sh)[0].data<int64_t>()[0], 2);
  EXPECT_EQ((*sh)[0].data<int64_t>()[1], 3);
  auto z = run1("ZerosLike", {}, {x});
  ASSERT_TRUE(z.ok());
  expect_near(*z, {0, 0, 0, 0, 0, 0});
  auto o = run1("OnesLike", {}, {x});
  ASSERT_TRUE(o.ok());
  expect_near(*o, {1, 1, 1, 1, 1, 1});
  AttrMap perm;
  perm.set("perm", std::vector<int64_t>{1, 0});
  auto t = run1("Transpose", perm, {x});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape(), (Shape{3, 2}));
  expect_near(*t, {1, 4, 2, 5, 3, 6});
  AttrMap oh;
  oh.set("depth", int64_t{3});
  oh.set("on_value", 1.0);
  oh.set("off_value", 0.0);
  auto h = run1("OneHot", oh, {Tensor::from_vector<int64_t>({2, 0, 5}, Shape{3})});
  ASSERT_TRUE(h.ok()) << h.status();
  expect_near(*h, {0, 0, 1, 1, 0, 0, 0, 0, 0});  // 5 is out of range: a row of off_value
  auto st = run1("SumToShape", {}, {x, Tensor(DType::kFloat32, Shape{3})});
  ASSERT_TRUE(st.ok()) << st.status();
  expect_near(*st, {5, 7, 9});
}

TEST_F(GpuTest, Reductions) {
  Tensor x = F({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  AttrMap a0;
  a0.set("axes", std::vector<int64_t>{0});
  auto s0 = run1("Sum", a0, {x});
  ASSERT_TRUE(s0.ok()) << s0.status();
  expect_near(*s0, {5, 7, 9});
  AttrMap a1;
  a1.set("axes", std::vector<int64_t>{1});
  a1.set("keep_dims", true);
  auto m1 = run1("Mean", a1, {x});
  ASSERT_TRUE(m1.ok());
  EXPECT_EQ(m1->shape(), (Shape{2, 1}));
  expect_near(*m1, {2, 5});
  auto mx = run1("Max", {}, {x});
  ASSERT_TRUE(mx.ok());
  expect_near(*mx, {6});
  AttrMap ax;
  ax.set("axis", int64_t{1});
  auto am = run(gpu_, "ArgMax", ax, {F({1, 9, 3, 7, 2, 7}, Shape{2, 3})});
  ASSERT_TRUE(am.ok());
  EXPECT_EQ((*am)[0].data<int64_t>()[0], 1);
  EXPECT_EQ((*am)[0].data<int64_t>()[1], 0);
  auto bg = run1("BiasAddGrad", {}, {x});
  ASSERT_TRUE(bg.ok());
  expect_near(*bg, {5, 7, 9});
  // A long reduction takes the block-per-output path.
  std::vector<float> ones(100000, 0.5f);
  auto big = run1("Sum", {}, {F(ones, Shape{100000})});
  ASSERT_TRUE(big.ok());
  expect_near(*big, {50000}, 1e-1f);
}

TEST_F(GpuTest, SoftmaxAndCrossEntropy) {
  Tensor logits = F({1, 2, 3, 1, 1, 1}, Shape{2, 3});
  auto sm = run1("Softmax", {}, {logits});
  ASSERT_TRUE(sm.ok()) << sm.status();
  const float e1 = std::exp(1.f), e2 = std::exp(2.f), e3 = std::exp(3.f), z = e1 + e2 + e3;
  expect_near(*sm, {e1 / z, e2 / z, e3 / z, 1.f / 3, 1.f / 3, 1.f / 3});
  Tensor labels = F({0, 0, 1, 1, 0, 0}, Shape{2, 3});
  auto x = run(gpu_, "SoftmaxCrossEntropyWithLogits", {}, {logits, labels}, 2);
  ASSERT_TRUE(x.ok()) << x.status();
  expect_near((*x)[0], {std::log(z) - 3.f, std::log(3.f)});
  expect_near((*x)[1], {e1 / z, e2 / z, e3 / z - 1, 1.f / 3 - 1, 1.f / 3, 1.f / 3});
}

TEST_F(GpuTest, ConvolutionAndPooling) {
  // 1x3x3x1 input 1..9, 2x2x1x1 filter of ones: VALID sums each 2x2 window.
  Tensor in = F({1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape{1, 3, 3, 1});
  Tensor f = F({1, 1, 1, 1}, Shape{2, 2, 1, 1});
  AttrMap valid;
  valid.set("strides", std::vector<int64_t>{1, 1, 1, 1});
  valid.set("padding", std::string("VALID"));
  auto y = run1("Conv2D", valid, {in, f});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{1, 2, 2, 1}));
  expect_near(*y, {12, 16, 24, 28});
  // SAME with stride 1 and a 2x2 window pads one row/column after (asymmetric).
  AttrMap same = valid;
  same.set("padding", std::string("SAME"));
  auto ys = run1("Conv2D", same, {in, f});
  ASSERT_TRUE(ys.ok()) << ys.status();
  expect_near(*ys, {12, 16, 9, 24, 28, 15, 15, 17, 9});
  AttrMap pool;
  pool.set("ksize", std::vector<int64_t>{1, 2, 2, 1});
  pool.set("strides", std::vector<int64_t>{1, 2, 2, 1});
  pool.set("padding", std::string("SAME"));
  auto p = run1("MaxPool", pool, {in});
  ASSERT_TRUE(p.ok()) << p.status();
  expect_near(*p, {5, 6, 8, 9});
  auto pg = run1("MaxPoolGrad", pool, {in, *p, F({1, 2, 3, 4}, Shape{1, 2, 2, 1})});
  ASSERT_TRUE(pg.ok()) << pg.status();
  expect_near(*pg, {0, 0, 0, 0, 1, 2, 0, 3, 4});
}

// Every GPU kernel against the CPU kernel of the same op on random data, where both exist.
TEST_F(GpuTest, MatchesCpuKernelsOnRandomData) {
  std::mt19937 rng(42);
  auto conv = [] {
    AttrMap a;
    a.set("strides", std::vector<int64_t>{1, 2, 2, 1});
    a.set("padding", std::string("SAME"));
    return a;
  }();
  AttrMap filt = conv;
  filt.set("filter_sizes", std::vector<int64_t>{3, 3, 4, 8});
  AttrMap pool = conv;
  pool.set("ksize", std::vector<int64_t>{1, 3, 3, 1});
  AttrMap perm;
  perm.set("perm", std::vector<int64_t>{2, 0, 3, 1});
  AttrMap axes;
  axes.set("axes", std::vector<int64_t>{0, 2});
  Tensor x = random_tensor(Shape{2, 9, 9, 4}, &rng);
  Tensor w = random_tensor(Shape{3, 3, 4, 8}, &rng);
  Tensor dy = random_tensor(Shape{2, 5, 5, 8}, &rng);
  Tensor sizes = Tensor::from_vector<int32_t>({2, 9, 9, 4}, Shape{4});
  struct Case {
    std::string op;
    AttrMap attrs;
    std::vector<Tensor> in;
    int outs;
  };
  std::vector<Case> cases = {
      {"MatMul", {}, {random_tensor(Shape{33, 17}, &rng), random_tensor(Shape{17, 9}, &rng)}, 1},
      {"Add", {}, {random_tensor(Shape{4, 1, 6}, &rng), random_tensor(Shape{5, 1}, &rng)}, 1},
      {"Maximum", {}, {random_tensor(Shape{7, 3}, &rng), random_tensor(Shape{7, 3}, &rng)}, 1},
      {"Exp", {}, {random_tensor(Shape{100}, &rng)}, 1},
      {"Conv2D", conv, {x, w}, 1},
      {"Conv2DBackpropInput", conv, {sizes, w, dy}, 1},
      {"Conv2DBackpropFilter", filt, {x, dy}, 1},
      {"MaxPool", pool, {x}, 1},
      {"Softmax", {}, {random_tensor(Shape{5, 11}, &rng)}, 1},
      {"SoftmaxCrossEntropyWithLogits", {}, {random_tensor(Shape{5, 11}, &rng), random_tensor(Shape{5, 11}, &rng)}, 2},
      {"MaxPoolGrad", pool, {x, Tensor(), random_tensor(Shape{2, 5, 5, 4}, &rng)}, 1},  // orig_output below
      {"Transpose", perm, {random_tensor(Shape{3, 4, 5, 6}, &rng)}, 1},
      {"SumToShape", {}, {random_tensor(Shape{4, 3, 5}, &rng), Tensor(DType::kFloat32, Shape{3, 1})}, 1},
      {"BiasAddGrad", {}, {random_tensor(Shape{6, 7, 8}, &rng)}, 1},
      {"Mean", axes, {random_tensor(Shape{6, 7, 8}, &rng)}, 1},
  };
  {
    auto pooled = run(cpu_, "MaxPool", pool, {x});
    ASSERT_TRUE(pooled.ok()) << pooled.status();
    for (Case& c : cases)
      if (c.op == "MaxPoolGrad") c.in[1] = (*pooled)[0];
  }
  int compared = 0;
  for (const Case& c : cases) {
    if (!KernelRegistry::global().has(c.op, "CPU")) continue;
    auto g = run(gpu_, c.op, c.attrs, c.in, c.outs);
    auto h = run(cpu_, c.op, c.attrs, c.in, c.outs);
    ASSERT_TRUE(g.ok()) << c.op << ": " << g.status();
    ASSERT_TRUE(h.ok()) << c.op << ": " << h.status();
    for (int o = 0; o < c.outs; ++o) {
      const Tensor& gt = (*g)[static_cast<size_t>(o)];
      const Tensor& ht = (*h)[static_cast<size_t>(o)];
      ASSERT_EQ(gt.shape(), ht.shape()) << c.op;
      for (int64_t i = 0; i < gt.num_elements(); ++i)
        ASSERT_NEAR(gt.data<float>()[i], ht.data<float>()[i], 2e-3f) << c.op << " output " << o << " element " << i;
    }
    ++compared;
  }
  EXPECT_GT(compared, 0) << "no op had a CPU kernel to compare the GPU kernel with";
}

TEST_F(GpuTest, OptimizerUpdatesMatchTheFunctors) {
  std::vector<float> w0 = {1.f, -2.f, 0.5f}, g0 = {0.5f, 0.25f, -1.f};
  auto dev_t = [&](const std::vector<float>& v) { return *gpu_->copy_from_host(F(v, Shape{3})); };
  Tensor w = dev_t(w0), g = dev_t(g0), a = dev_t({0, 0, 0}), m = dev_t({0, 0, 0}), v = dev_t({0, 0, 0});
  ASSERT_TRUE(gpu_apply_sgd(*gpu_, w, g, 0.1).ok());
  auto hw = gpu_->copy_to_host(w);
  expect_near(*hw, {0.95f, -2.025f, 0.6f});
  Tensor w2 = dev_t(w0);
  ASSERT_TRUE(gpu_apply_momentum(*gpu_, w2, a, g, 0.1, 0.9, false).ok());
  ASSERT_TRUE(gpu_apply_momentum(*gpu_, w2, a, g, 0.1, 0.9, false).ok());
  std::vector<float> want(3);
  for (int i = 0; i < 3; ++i) {
    functors::MomentumUpdateF<float> f{0.1f, 0.9f, false};
    float ww = w0[static_cast<size_t>(i)], aa = 0;
    f(ww, aa, g0[static_cast<size_t>(i)]);
    f(ww, aa, g0[static_cast<size_t>(i)]);
    want[static_cast<size_t>(i)] = ww;
  }
  expect_near(*gpu_->copy_to_host(w2), want);
  Tensor w3 = dev_t(w0);
  ASSERT_TRUE(gpu_apply_adam(*gpu_, w3, m, v, g, 0.001, 0.9, 0.999, 1e-8, 1).ok());
  for (int i = 0; i < 3; ++i) {
    auto f = functors::AdamUpdateF<float>::make(0.001f, 0.9f, 0.999f, 1e-8f, 1);
    float ww = w0[static_cast<size_t>(i)], mm = 0, vv = 0;
    f(ww, mm, vv, g0[static_cast<size_t>(i)]);
    want[static_cast<size_t>(i)] = ww;
  }
  expect_near(*gpu_->copy_to_host(w3), want, 1e-6f);
  Tensor w4 = dev_t(w0), accum = dev_t({0.1f, 0.1f, 0.1f});
  ASSERT_TRUE(gpu_apply_adagrad(*gpu_, w4, accum, g, 0.1).ok());
  ASSERT_TRUE(gpu_apply_adagrad(*gpu_, w4, accum, g, 0.1).ok());
  for (int i = 0; i < 3; ++i) {
    functors::AdagradUpdateF<float> f{0.1f};
    float ww = w0[static_cast<size_t>(i)], aa = 0.1f;
    f(ww, aa, g0[static_cast<size_t>(i)]);
    f(ww, aa, g0[static_cast<size_t>(i)]);
    want[static_cast<size_t>(i)] = ww;
  }
  expect_near(*gpu_->copy_to_host(w4), want, 1e-6f);
  Tensor w5 = dev_t(w0), ms = dev_t({1, 1, 1}), mom = dev_t({0, 0, 0});
  ASSERT_TRUE(gpu_apply_rms_prop(*gpu_, w5, ms, mom, g, 0.01, 0.9, 0.5, 1e-10).ok());
  ASSERT_TRUE(gpu_apply_rms_prop(*gpu_, w5, ms, mom, g, 0.01, 0.9, 0.5, 1e-10).ok());
  for (int i = 0; i < 3; ++i) {
    functors::RmsPropUpdateF<float> f{0.01f, 0.9f, 0.5f, 1e-10f};
    float ww = w0[static_cast<size_t>(i)], mm = 1, oo = 0;
    f(ww, mm, oo, g0[static_cast<size_t>(i)]);
    f(ww, mm, oo, g0[static_cast<size_t>(i)]);
    want[static_cast<size_t>(i)] = ww;
  }
  expect_near(*gpu_->copy_to_host(w5), want, 1e-6f);
  Tensor host_w = F(w0, Shape{3});
  Status s = gpu_apply_sgd(*gpu_, host_w, g, 0.1);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s;
}

#else

TEST(GpuTest, SkippedInCpuOnlyBuild) {
  GTEST_SKIP() << "no CUDA GPU visible: built without CUDA (AF_ENABLE_CUDA=OFF or nvcc not found)";
}

#endif  // AF_WITH_CUDA

}  // namespace
}  // namespace actorflow
