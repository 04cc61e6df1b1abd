// Every device backend this build has, named in one place (device/backends.cc): the host CPU
// always, and CUDA GPUs when built with CUDA (AF_WITH_CUDA). The rest of device/ reaches a
// backend only through these two functions, so adding a backend changes backends.cc alone.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "device/device.h"
#include "device/kernel.h"

namespace actorflow {

// Registers the kernels of every backend into `r`: the CPU families (math, array, nn, nn
// gradients, variables) and, when built with CUDA, every GPU kernel. Device-independent kernels
// (register_core_kernels) are not a backend's and are not registered here.
void register_backend_kernels(KernelRegistry& r);

// Creates the devices of every backend for the task `task_prefix`
// ("/job:worker/replica:0/task:1"): opts.cpu_devices CPU devices, then, when built with CUDA
// and GPUs are visible, one device per GPU. `opts` must already be valid (create_devices checks
// it). Errors are the GPU backend's (e.g. a visible_devices entry naming a missing GPU); never
// fails for lack of GPUs.
Result<std::vector<std::unique_ptr<Device>>> create_backend_devices(const std::string& task_prefix,
                                                                      const DeviceEnumerationOptions& opts);

}  // namespace actorflow
