#include "device/cuda/gpu_kernel.h"

#include "device/cuda/cuda_device.h"
#include "device/cuda/gpu_profile.h"

namespace actorflow {

Status GpuOpKernel::compute(OpKernelContext& ctx) {
  auto* dev = dynamic_cast<GpuDevice*>(ctx.device());
  if (!dev) return ctx.error(Code::kInternal, "GPU kernel run on non-GPU device " + ctx.device()->name());
  Status s = dev->activate();
  if (s.ok()) {
    GpuProfiler& prof = GpuProfiler::global();
    const GpuProfiler::Mark mark = prof.begin(dev->stream());
    s = compute_gpu(ctx, *dev);
    prof.end(mark, node().op, /*copy=*/false);
  }
  if (s.ok()) return s;
  const std::string prefix = node().op + " '" + node().name + "': ";
  if (s.message().compare(0, prefix.size(), prefix) == 0) return s;
  return Status(s.code(), prefix + s.message());
}

Result<std::vector<int64_t>> read_int_vector(OpKernelContext& ctx, const Tensor& t) {
  AF_ASSIGN_OR_RETURN(Tensor h, ctx.device()->copy_to_host(t));
  std::vector<int64_t> v;
  if (h.dtype() == DType::kInt32) {
    for (int64_t i = 0; i < h.num_elements(); ++i) v.push_back(h.data<int32_t>()[i]);
  } else if (h.dtype() == DType::kInt64) {
    for (int64_t i = 0; i < h.num_elements(); ++i) v.push_back(h.data<int64_t>()[i]);
  } else {
    return InvalidArgument(std::string("expected an int32 or int64 tensor, got ") + dtype_name(h.dtype()));
  }
  return v;
}

void register_gpu_kernels(KernelRegistry& r) {
  register_gpu_array_kernels(r);
  register_gpu_elementwise_kernels(r);
  register_gpu_reduction_kernels(r);
  register_gpu_nn_kernels(r);
  // Variables on a GPU: the variable actor keeps their value in the GPU's memory and runs the
  // dense optimizer updates there (Device::apply_dense_update, optimizer_kernels.cu).
  register_variable_kernels(r, "GPU");
}

}  // namespace actorflow
