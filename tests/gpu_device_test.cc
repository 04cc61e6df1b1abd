// GPU device options and enumeration. Runs everywhere: without a visible GPU (or in a
// CPU-only build) create_devices yields CPU devices only; the tests that need a GPU skip
// with the reason.
#include <gtest/gtest.h>

#include <cstdlib>

#include "device/device.h"
#include "device/gpu_options.h"

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

}  // namespace
}  // namespace actorflow
