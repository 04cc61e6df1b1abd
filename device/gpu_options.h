// GPU options that need no GPU to check: TensorFlow's visible_device_list ("1,0": virtual
// GPU 0 is CUDA device 1) and the memory limit a GPU device's allocator gets from
// gpu_memory_fraction. Used by the CUDA device factory and validated in every build, so a
// bad cluster file is reported the same on machines with and without GPUs.
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "device/device.h"

namespace actorflow {

// Parses a visible-device list: "" -> {} (meaning all GPUs), "1,0" -> {1, 0}. Spaces around
// entries are allowed. InvalidArgument on bad syntax, e.g.
// "visible_devices '0,x': 'x' is not a GPU index", or on an index listed twice.
Result<std::vector<int>> parse_visible_devices(const std::string& spec);

// The CUDA device ordinals (as seen under CUDA_VISIBLE_DEVICES) that become /device:GPU:0,
// /device:GPU:1, ... for `spec` when `num_cuda_devices` GPUs are visible: all of them in
// order for "", else the listed ones in the listed order. InvalidArgument naming the index
// and the visible count when an entry does not exist.
Result<std::vector<int>> resolve_visible_devices(const std::string& spec, int num_cuda_devices);

// Checks the GPU fields of `opts` without touching a GPU: visible_devices syntax and
// 0 <= gpu_memory_fraction <= 1.
Status validate_gpu_options(const DeviceEnumerationOptions& opts);

// The byte limit of one GPU's allocator: total_bytes * fraction when fraction > 0 (TF's
// per_process_gpu_memory_fraction is a share of the total), otherwise the free memory less a
// reserve for the driver and other libraries (max(64 MiB, 5% of free)). Rounded down to
// 256 bytes; at least 256 when any memory is free. Precondition: validated fraction.
int64_t gpu_memory_limit(double fraction, int64_t total_bytes, int64_t free_bytes);

}  // namespace actorflow
