// The CUDA device factory called by create_devices() (device/device.cc) in CUDA builds.
// This header includes no CUDA headers; the GPU device class itself is in gpu_device.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "device/device.h"

namespace actorflow {

// One GpuDevice per GPU visible to this process, named task_prefix + "/device:GPU:<i>",
// after TensorFlow: CUDA_VISIBLE_DEVICES applies first, then opts.visible_devices picks and
// orders the remaining CUDA ordinals ("1,0" makes CUDA device 1 /device:GPU:0). Each device
// gets a BFC allocator limited by opts.gpu_memory_fraction and opts.allow_growth (see
// gpu_options.h). Returns an empty vector, not an error, when the driver reports no GPU or
// is missing or too old (one INFO line says why). Errors: InvalidArgument for a
// visible_devices entry that does not exist while GPUs do; ResourceExhausted when the
// memory cannot be reserved up front; Internal for a failing CUDA call (naming it).
// The caller owns the devices. Call from one thread at start-up.
Result<std::vector<std::unique_ptr<Device>>> create_cuda_devices(const std::string& task_prefix,
                                                                 const DeviceEnumerationOptions& opts);

// The number of CUDA GPUs visible to this process (after CUDA_VISIBLE_DEVICES); 0 with
// `why` set (e.g. "CUDA driver version is insufficient for CUDA runtime version") when there
// are none. For tests and benchmarks that skip without a GPU. Thread-safe.
int cuda_device_count(std::string* why);

// Registers every GPU kernel (device type "GPU"). Registered as the CUDA backend's kernels by
// device/cuda/cuda_backend.cc (register_device_backend). Start-up only.
class KernelRegistry;
void register_gpu_kernels(KernelRegistry& r);

}  // namespace actorflow
