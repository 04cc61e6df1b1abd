// Shared scaffolding of the GPU kernels (device/cuda/*.cu): the GpuOpKernel base class that
// finds the GpuDevice, makes it current and names the op in every error, launch-size
// helpers, and dtype dispatch for the types the GPU kernels support.
//
// Thread-safety: as OpKernel (a kernel instance is never run concurrently with itself); the
// helpers are pure.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/gpu_device.h"
#include "device/kernel.h"

namespace actorflow {

// Base of every GPU kernel. compute() resolves the context's device as a GpuDevice, makes it
// current, runs compute_gpu() and prefixes "<Op> '<name>': " to an error that lacks it.
// Kernels queue work on dev.stream() and do not wait for it.
class GpuOpKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) final;

 protected:
  virtual Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) = 0;
};

// A factory for a GpuOpKernel subclass K with constructor (const Node&).
template <typename K>
KernelFactory gpu_factory() {
  return [](const Node& n) -> Result<std::unique_ptr<OpKernel>> { return std::unique_ptr<OpKernel>(new K(n)); };
}

// Threads per block and the number of blocks for a grid-stride loop over `n` elements.
constexpr int kThreadsPerBlock = 256;
inline unsigned int num_blocks(int64_t n) {
  const int64_t b = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min<int64_t>(b, 65535)));
}

// Maximum rank handled by the strided kernels (broadcasting, reductions, transposes).
constexpr int kMaxDims = 8;

// Dims and strides passed by value to kernels.
struct Dims {
  int rank = 0;
  int64_t d[kMaxDims] = {0};
};

// "unsupported dtype X on GPU" naming the op's input.
inline Status unsupported_dtype(OpKernelContext& ctx, DType t, const char* which = "input") {
  return ctx.error(Code::kUnimplemented, std::string("no GPU kernel for ") + which + " dtype " + dtype_name(t));
}

// Calls f(T{}) for float, double, int32 and int64; Unimplemented (naming the op) otherwise.
template <typename F>
Status dispatch_numeric(OpKernelContext& ctx, DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt64: return f(int64_t{});
    default: return unsupported_dtype(ctx, t);
  }
}
// Calls f(T{}) for float and double; Unimplemented otherwise.
template <typename F>
Status dispatch_floating(OpKernelContext& ctx, DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    default: return unsupported_dtype(ctx, t);
  }
}
// Calls f(T{}) for every dtype (bool as bool, uint8 as uint8_t).
template <typename F>
Status dispatch_all(OpKernelContext& ctx, DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt64: return f(int64_t{});
    case DType::kUInt8: return f(uint8_t{});
    case DType::kBool: return f(bool{});
    default: return unsupported_dtype(ctx, t);
  }
}

// Host copy of a (small) tensor that may live on the device, e.g. Conv2DBackpropInput's
// input_sizes. Waits for the stream.
Result<std::vector<int64_t>> read_int_vector(OpKernelContext& ctx, const Tensor& t);

// Registration hooks of the kernel families, called by register_gpu_kernels().
void register_gpu_elementwise_kernels(KernelRegistry& r);  // elementwise_kernels.cu
void register_gpu_reduction_kernels(KernelRegistry& r);    // reduction_kernels.cu
void register_gpu_nn_kernels(KernelRegistry& r);           // nn_kernels.cu
void register_gpu_array_kernels(KernelRegistry& r);        // array_kernels.cu

}  // namespace actorflow
