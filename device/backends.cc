#include "device/backends.h"

#include <mutex>
#include <utility>

namespace actorflow {
namespace {

struct Backends {
  std::mutex mu;
  std::vector<DeviceBackend> list;
};

// A function-local static: registrars of other translation units may run before any static of
// this one is initialised.
Backends& backends() {
  static Backends* b = new Backends();  // never destroyed: registrars and users may outlive statics
  return *b;
}

std::vector<DeviceBackend> snapshot() {
  Backends& b = backends();
  std::lock_guard<std::mutex> lock(b.mu);
  return b.list;
}

}  // namespace

bool register_device_backend(DeviceBackend backend) {
  Backends& b = backends();
  std::lock_guard<std::mutex> lock(b.mu);
  for (const auto& have : b.list)
    if (have.name == backend.name) return true;
  b.list.push_back(std::move(backend));
  return true;
}

std::vector<std::string> device_backend_names() {
  std::vector<std::string> names;
  for (const auto& b : snapshot()) names.push_back(b.name);
  return names;
}

void register_backend_kernels(KernelRegistry& r) {
  register_cpu_math_kernels(r);
  register_cpu_array_kernels(r);
  register_cpu_nn_kernels(r);
  register_cpu_nn_grad_kernels(r);
  register_cpu_variable_kernels(r);
  register_cpu_indexing_kernels(r);
  register_cpu_io_kernels(r);
  for (const auto& b : snapshot())
    if (b.register_kernels) b.register_kernels(r);
}

Result<std::vector<std::unique_ptr<Device>>> create_backend_devices(const std::string& task_prefix,
                                                                      const DeviceEnumerationOptions& opts) {
  std::vector<std::unique_ptr<Device>> out;
  for (int i = 0; i < opts.cpu_devices; ++i)
    out.push_back(make_cpu_device(task_prefix + "/device:CPU:" + std::to_string(i), i));
  for (const auto& b : snapshot()) {
    if (!b.create_devices) continue;
    AF_ASSIGN_OR_RETURN(auto more, b.create_devices(task_prefix, opts));
    for (auto& d : more) out.push_back(std::move(d));
  }
  return out;
}

}  // namespace actorflow
