// Device backends: the host CPU always, and each backend library linked into the program (the
// CUDA backend, af_cuda, is the CMake component actorflow::cuda, linked only by programs that
// want GPUs) registered here, as TensorFlow's pluggable devices. The rest of device/ reaches a
// backend only through register_backend_kernels and create_backend_devices.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "device/device.h"
#include "device/kernel.h"

namespace actorflow {

// What a backend library provides. Copyable.
struct DeviceBackend {
  std::string name;  // "CUDA"
  // Registers the backend's kernels (a device type of its own, e.g. "GPU").
  std::function<void(KernelRegistry&)> register_kernels;
  // The backend's devices for the task `task_prefix`: none when its hardware is absent (never an
  // error for that); errors for bad options naming them.
  std::function<Result<std::vector<std::unique_ptr<Device>>>(const std::string& task_prefix,
                                                             const DeviceEnumerationOptions& opts)>
      create_devices;
};

// Adds `backend` to this process's backends. For a backend library's registrar, which runs during
// static initialization: kernels registered into a registry built before the call are not added
// to it. A second backend of the same name is ignored. Returns true (so a registrar can be a
// const bool initializer). Thread-safe.
bool register_device_backend(DeviceBackend backend);

// The names of the registered backends, in registration order ("CPU" is not one: it is always
// there). Thread-safe.
std::vector<std::string> device_backend_names();

// Registers the kernels of every backend into `r`: the CPU families (math, array, nn, nn
// gradients, variables, indexing, io), then each registered backend's. Device-independent
// kernels (register_core_kernels) are not a backend's and are not registered here.
void register_backend_kernels(KernelRegistry& r);

// Creates the devices of every backend for the task `task_prefix`
// ("/job:worker/replica:0/task:1"): opts.cpu_devices CPU devices, then each registered backend's
// (the CUDA backend: one device per visible GPU). `opts` must already be valid (create_devices
// checks it). Errors are a backend's (e.g. a visible_devices entry naming a missing GPU); never
// fails for lack of GPUs.
Result<std::vector<std::unique_ptr<Device>>> create_backend_devices(const std::string& task_prefix,
                                                                      const DeviceEnumerationOptions& opts);

}  // namespace actorflow
