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

// One dense optimizer update of a variable whose value lives in a device's memory
// (Device::apply_dense_update): the functors of device/functors.h, as TensorFlow's
// ApplyGradientDescent, ApplyMomentum, ApplyAdam, ApplyAdagrad and ApplyRMSProp compute them.
struct DenseUpdate {
  enum class Kind { kSgd, kMomentum, kAdam, kAdagrad, kRmsProp };
  Kind kind = Kind::kSgd;
  double lr = 0;
  double momentum = 0;          // kMomentum, kRmsProp
  bool use_nesterov = false;    // kMomentum
  double beta1 = 0, beta2 = 0;  // kAdam
  double epsilon = 0;           // kAdam, kRmsProp
  double decay = 0;             // kRmsProp
  int64_t adam_t = 0;           // kAdam: the number of this update, >= 1 (bias correction)
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
  // A copy of `t` with its own buffer in this device's memory: a host deep copy for CPU devices
  // (precondition there: t.on_host()); on a GPU, a device-to-device copy of a tensor of this
  // device, or a host-to-device copy of a host tensor (another device's tensor is an error).
  // Variables use it for copy-on-write of values that readers still hold.
  virtual Result<Tensor> duplicate(const Tensor& t) { return t.deep_copy(); }
  // Applies `u` in place to the variable value `w` with gradient `g` and the optimizer slots its
  // kind needs (s1: the momentum accumulator, Adam's m, Adagrad's accumulator or RMSProp's ms;
  // s2: Adam's v or RMSProp's mom; null where not needed), every tensor in this device's memory
  // with w's dtype and shape. Queued in order with the device's kernels, like a kernel's work.
  // Errors name the wrong operand. Unimplemented on devices without device-side updates (CPU
  // devices: variable actors update host values themselves).
  virtual Status apply_dense_update(const DenseUpdate& u, Tensor& w, Tensor* s1, Tensor* s2, const Tensor& g) {
    (void)u, (void)w, (void)s1, (void)s2, (void)g;
    return Unimplemented(name() + " has no device-side optimizer updates");
  }

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
