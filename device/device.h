// Device: one compute device of a task (a CPU or a GPU), its allocator and the host<->device
// copies. Kernels find their device through OpKernelContext.
//
// A Device is owned by the process's device set (the node actor); device actors borrow it.
// Methods are thread-safe unless noted.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/device_spec.h"
#include "tensor/allocator.h"
#include "tensor/tensor.h"
#include "device/device_options.h"

namespace actorflow {

struct DeviceAttributes {
  std::string name;          // canonical full name "/job:worker/replica:0/task:1/device:CPU:0"
  std::string type;          // "CPU" or "GPU"
  int index = 0;             // index within the type on this task
  int64_t memory_limit = 0;  // bytes; 0 = unlimited (host)
  std::string description;   // e.g. "device: 0, name: NVIDIA A100, pci bus id: 0000:02:00.0"
};

class Device {
 public:
  explicit Device(DeviceAttributes attrs) : attrs_(std::move(attrs)) {}
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceAttributes& attributes() const { return attrs_; }
  const std::string& name() const { return attrs_.name; }
  const std::string& type() const { return attrs_.type; }

  // The allocator for tensors that live on this device. Owned by the device.
  virtual Allocator* allocator() = 0;
  // A host copy of `t` (t itself when already on the host).
  virtual Result<Tensor> copy_to_host(const Tensor& t) { return t; }
  // A copy of host tensor `t` in this device's memory (t itself for CPU devices).
  virtual Result<Tensor> copy_from_host(const Tensor& t) { return t; }
  // Waits for all queued work on the device. OK for CPU devices.
  virtual Status sync() { return Status::OK(); }

 private:
  DeviceAttributes attrs_;
};

// A host CPU device named `full_name` (canonical), using cpu_host_pool() (tensor/pooling_allocator.h: large blocks are reused).
std::unique_ptr<Device> make_cpu_device(const std::string& full_name, int index);

// Factories for other device types register here (GPU devices when built with CUDA).
// Each returns the devices of its type visible to this process for the given task prefix
// ("/job:worker/replica:0/task:1"). Thread-safe after start-up.
// What to create: device/device_options.h.
using DeviceEnumerationOptions = DeviceOptions;
// Creates every device of this process: cpu_devices CPU devices and, when built with CUDA
// and GPUs are visible, one device per GPU. Never fails for lack of GPUs.
Result<std::vector<std::unique_ptr<Device>>> create_devices(const std::string& task_prefix,
                                                              const DeviceEnumerationOptions& opts);

}  // namespace actorflow
