// What a process asks of its devices, as plain data with no dependency: the one declaration the
// cluster file's [server] options (config/cluster_spec.h), LocalServerOptions
// (include/actorflow/server.h) and device creation (device/device.h) share. config/ sits below
// device/ and includes only this header of it (an exception listed in scripts/check-layers.py).
#pragma once

#include <string>

namespace actorflow {

struct DeviceOptions {
  int cpu_devices = 1;               // number of /device:CPU:N devices (>= 1)
  std::string visible_devices;       // GPUs (TF visible_device_list, e.g. "0,1"); "" = all
  double gpu_memory_fraction = 0.0;  // 0 = no cap; else fraction of each GPU's memory (TF semantics)
  bool allow_growth = false;         // allocate GPU memory on demand instead of up front
};

}  // namespace actorflow
