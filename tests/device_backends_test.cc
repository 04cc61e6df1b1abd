// Device backends as components (device/backends.h): the CUDA component registers its backend
// before main() in a program that links it (this test links actorflow::cuda, as every test does),
// a registered backend's kernels and devices join the CPU's, and its errors are returned. The
// other half, a CPU-only program linking no CUDA library, is checked on the installed package by
// scripts/test-install.sh (InstallTest).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>

#include "device/backends.h"
#include "device/kernel.h"

namespace actorflow {
namespace {

bool has_name(const std::string& name) {
  const auto names = device_backend_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(DeviceBackendsTest, TheCudaComponentRegistersItsBackendAndGpuKernelsBeforeMain) {
#ifdef AF_WITH_CUDA
  EXPECT_TRUE(has_name("CUDA"));
  EXPECT_TRUE(KernelRegistry::global().has("MatMul", "GPU"));
  EXPECT_TRUE(KernelRegistry::global().has("Conv2D", "GPU"));
#else
  // A build without CUDA: the component is the CPU library alone.
  EXPECT_FALSE(has_name("CUDA"));
  EXPECT_FALSE(KernelRegistry::global().has("MatMul", "GPU"));
#endif
  EXPECT_TRUE(KernelRegistry::global().has("MatMul", "CPU"));
}

// A backend of its own: its kernels are registered with the CPU's, its devices follow the CPU
// devices, a second registration of its name is ignored, and its error is the creation's error.
// Process-wide, as the registration is: the backend outlives the test.
std::atomic<bool> fail_devices{false};
std::atomic<int> calls{0};

TEST(DeviceBackendsTest, ARegisteredBackendAddsItsKernelsAndDevicesAndItsErrorsAreReturned) {
  DeviceBackend fake;
  fake.name = "FAKE";
  fake.register_kernels = [](KernelRegistry& r) {
    r.add("Identity", "FAKE", [](const Node&) -> Result<std::unique_ptr<OpKernel>> {
      return Unimplemented("a test backend's kernel");
    });
  };
  fake.create_devices = [](const std::string& prefix, const DeviceEnumerationOptions&)
      -> Result<std::vector<std::unique_ptr<Device>>> {
    ++calls;
    if (fail_devices) return InvalidArgument("FAKE: visible_devices names a device that does not exist");
    std::vector<std::unique_ptr<Device>> out;
    out.push_back(make_cpu_device(prefix + "/device:CPU:7", 7));  // stands for the backend's device
    return out;
  };
  EXPECT_TRUE(register_device_backend(fake));
  DeviceBackend again = fake;
  again.create_devices = nullptr;
  EXPECT_TRUE(register_device_backend(again));  // ignored: the first FAKE stays
  const auto names = device_backend_names();
  EXPECT_EQ(std::count(names.begin(), names.end(), "FAKE"), 1);

  KernelRegistry r;
  register_backend_kernels(r);
  EXPECT_TRUE(r.has("Identity", "FAKE"));
  EXPECT_TRUE(r.has("MatMul", "CPU"));

  DeviceEnumerationOptions opts;
  opts.cpu_devices = 2;
  auto devices = create_backend_devices("/job:w/replica:0/task:0", opts);
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_GE(devices->size(), 3u);
  EXPECT_EQ((*devices)[0]->name(), "/job:w/replica:0/task:0/device:CPU:0");
  EXPECT_EQ((*devices)[1]->name(), "/job:w/replica:0/task:0/device:CPU:1");
  EXPECT_EQ(devices->back()->name(), "/job:w/replica:0/task:0/device:CPU:7");
  EXPECT_EQ(calls, 1);

  fail_devices = true;
  auto failed = create_backend_devices("/job:w/replica:0/task:0", opts);
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("FAKE: visible_devices"), std::string::npos) << failed.status();
  fail_devices = false;
}

}  // namespace
}  // namespace actorflow
