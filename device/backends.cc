#include "device/backends.h"

#ifdef AF_WITH_CUDA
#include "device/cuda/cuda_device.h"
#endif

namespace actorflow {

void register_backend_kernels(KernelRegistry& r) {
  register_cpu_math_kernels(r);
  register_cpu_array_kernels(r);
  register_cpu_nn_kernels(r);
  register_cpu_nn_grad_kernels(r);
  register_cpu_variable_kernels(r);
  register_cpu_indexing_kernels(r);
  register_cpu_io_kernels(r);
#ifdef AF_WITH_CUDA
  register_gpu_kernels(r);
#endif
}

Result<std::vector<std::unique_ptr<Device>>> create_backend_devices(const std::string& task_prefix,
                                                                      const DeviceEnumerationOptions& opts) {
  std::vector<std::unique_ptr<Device>> out;
  for (int i = 0; i < opts.cpu_devices; ++i)
    out.push_back(make_cpu_device(task_prefix + "/device:CPU:" + std::to_string(i), i));
#ifdef AF_WITH_CUDA
  AF_ASSIGN_OR_RETURN(auto gpus, create_cuda_devices(task_prefix, opts));
  for (auto& g : gpus) out.push_back(std::move(g));
#endif
  return out;
}

}  // namespace actorflow
