#include "device/device.h"

#include "device/backends.h"
#include "device/gpu_options.h"
#include "tensor/pooling_allocator.h"

namespace actorflow {
namespace {
class CpuDevice final : public Device {
 public:
  CpuDevice(const std::string& name, int index)
      : Device(DeviceAttributes{name, "CPU", index, 0, "host CPU"}) {}
  Allocator* allocator() override { return cpu_host_pool(); }
};
}  // namespace

std::unique_ptr<Device> make_cpu_device(const std::string& full_name, int index) {
  return std::make_unique<CpuDevice>(full_name, index);
}

Result<std::vector<std::unique_ptr<Device>>> create_devices(const std::string& task_prefix,
                                                              const DeviceEnumerationOptions& opts) {
  if (opts.cpu_devices < 1)
    return InvalidArgument("cpu_devices must be at least 1, got " + std::to_string(opts.cpu_devices));
  // GPU options are checked in every build, so a bad cluster file fails the same everywhere.
  AF_RETURN_IF_ERROR(validate_gpu_options(opts));
  return create_backend_devices(task_prefix, opts);
}

}  // namespace actorflow
