// Array GPU kernels: Reshape (buffer alias), Shape, ZerosLike, OnesLike, Transpose and
// OneHot. Semantics follow the CPU kernels (device/cpu/array_kernels.cc).
#include <string>
#include <vector>

#include "device/cuda/gpu_kernel.h"
#include "device/index_plan.h"
#include "graph/shape_util.h"

namespace actorflow {
namespace {

template <class T>
__global__ void fill_kernel(T* out, int64_t n, T v) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[i] = v;
}

__global__ void dims_kernel(Dims d, int64_t* out) {
  if (threadIdx.x == 0 && blockIdx.x == 0)
    for (int i = 0; i < d.rank; ++i) out[i] = d.d[i];
}

template <class E>
__global__ void transpose_kernel(const E* in, E* out, int64_t n, TransposePlan p) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[i] = in[transpose_offset(p, i)];
}

template <class I>
__global__ void one_hot_kernel(const I* idx, float* out, int64_t n, int64_t depth, float on) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t v = static_cast<int64_t>(idx[i]);
    if (v >= 0 && v < depth) out[i * depth + v] = on;
  }
}

template <class T>
Status fill(GpuDevice& dev, Tensor* out, T v) {
  const int64_t n = out->num_elements();
  if (n == 0) return Status::OK();
  fill_kernel<T><<<num_blocks(n), kThreadsPerBlock, 0, dev.stream()>>>(out->data<T>(), n, v);
  return cuda_launch_status("fill kernel");
}

// Reshape forwards the device buffer under the target shape (attr `shape`, one -1 resolved
// from the element count): no copy, no kernel launch.
class ReshapeKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice&) override {
    AF_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ctx.attrs().get<std::vector<int64_t>>("shape"));
    const std::vector<int64_t> target = dims;
    const Tensor& x = ctx.input(0);
    const int64_t n = x.num_elements();
    int infer = -1;
    int64_t known = 1;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] == -1 && infer < 0)
        infer = static_cast<int>(i);
      else if (dims[i] < 0)
        return InvalidArgument("invalid target shape " + int_list_to_string(target));
      else
        known *= dims[i];
    }
    auto bad = [&] {
      return InvalidArgument("cannot reshape " + x.shape().to_string() + " (" + std::to_string(n) +
                             " elements) into " + int_list_to_string(target));
    };
    if (infer >= 0) {
      if (known == 0 || n % known != 0) return bad();
      dims[static_cast<size_t>(infer)] = n / known;
    } else if (known != n) {
      return bad();
    }
    AF_ASSIGN_OR_RETURN(Tensor y, x.reshaped(Shape(std::move(dims))));
    ctx.set_output(0, std::move(y));
    return Status::OK();
  }
};

// Shape: x's dims as an int64 vector in device memory.
class ShapeKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Shape& s = ctx.input(0).shape();
    if (s.rank() > kMaxDims) return Unimplemented("Shape of a tensor of rank > " + std::to_string(kMaxDims));
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kInt64, Shape{s.rank()}));
    if (s.rank() == 0) return Status::OK();
    Dims d;
    d.rank = s.rank();
    for (int i = 0; i < s.rank(); ++i) d.d[i] = s.dim(i);
    dims_kernel<<<1, 1, 0, dev.stream()>>>(d, out->data<int64_t>());
    return cuda_launch_status("Shape kernel");
  }
};

template <int kValue>
class FillLikeKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Tensor& x = ctx.input(0);
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), x.shape()));
    return dispatch_all(ctx, x.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      return fill<T>(dev, out, static_cast<T>(kValue));
    });
  }
};

class TransposeKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    AF_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ctx.attrs().get<std::vector<int64_t>>("perm"));
    const Tensor& x = ctx.input(0);
    AF_ASSIGN_OR_RETURN(TransposePlan plan, make_transpose_plan(x.shape(), perm));
    std::vector<int64_t> out_dims;
    for (int64_t p : perm) out_dims.push_back(x.shape().dim(static_cast<int>(p)));
    const Shape out_shape(out_dims);
    // Collapsed to at most one run (stride 1): the bytes keep their order, share the buffer.
    if (plan.rank <= 1 || x.num_elements() == 0) {
      AF_ASSIGN_OR_RETURN(Tensor y, x.reshaped(out_shape));
      ctx.set_output(0, std::move(y));
      return Status::OK();
    }
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), out_shape));
    const int64_t n = x.num_elements();
    const unsigned blocks = num_blocks(n);
    switch (dtype_size(x.dtype())) {
      case 1:
        transpose_kernel<uint8_t><<<blocks, kThreadsPerBlock, 0, dev.stream()>>>(
            static_cast<const uint8_t*>(x.raw_data()), static_cast<uint8_t*>(out->raw_data()), n, plan);
        break;
      case 4:
        transpose_kernel<uint32_t><<<blocks, kThreadsPerBlock, 0, dev.stream()>>>(
            static_cast<const uint32_t*>(x.raw_data()), static_cast<uint32_t*>(out->raw_data()), n, plan);
        break;
      case 8:
        transpose_kernel<uint64_t><<<blocks, kThreadsPerBlock, 0, dev.stream()>>>(
            static_cast<const uint64_t*>(x.raw_data()), static_cast<uint64_t*>(out->raw_data()), n, plan);
        break;
      default:
        return unsupported_dtype(ctx, x.dtype());
    }
    return cuda_launch_status("Transpose kernel");
  }
};

// OneHot(indices) -> float32 [..., depth]; indices outside [0, depth) give a row of off_value.
class OneHotKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    AF_ASSIGN_OR_RETURN(int64_t depth, ctx.attrs().get<int64_t>("depth"));
    if (depth < 0) return InvalidArgument("depth must be >= 0, got " + std::to_string(depth));
    const float on = static_cast<float>(ctx.attrs().get_or<double>("on_value", 1.0));
    const float off = static_cast<float>(ctx.attrs().get_or<double>("off_value", 0.0));
    const Tensor& idx = ctx.input(0);
    std::vector<int64_t> dims = idx.shape().dims();
    dims.push_back(depth);
    if (idx.dtype() != DType::kInt32 && idx.dtype() != DType::kInt64) return unsupported_dtype(ctx, idx.dtype());
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, Shape(dims)));
    AF_RETURN_IF_ERROR(fill<float>(dev, out, off));
    const int64_t n = idx.num_elements();
    if (n == 0 || depth == 0) return Status::OK();
    if (idx.dtype() == DType::kInt32)
      one_hot_kernel<int32_t><<<num_blocks(n), kThreadsPerBlock, 0, dev.stream()>>>(idx.data<int32_t>(),
                                                                                    out->data<float>(), n, depth, on);
    else
      one_hot_kernel<int64_t><<<num_blocks(n), kThreadsPerBlock, 0, dev.stream()>>>(idx.data<int64_t>(),
                                                                                    out->data<float>(), n, depth, on);
    return cuda_launch_status("OneHot kernel");
  }
};

}  // namespace

void register_gpu_array_kernels(KernelRegistry& r) {
  r.add("Reshape", "GPU", gpu_factory<ReshapeKernel>());
  r.add("Shape", "GPU", gpu_factory<ShapeKernel>());
  r.add("ZerosLike", "GPU", gpu_factory<FillLikeKernel<0>>());
  r.add("OnesLike", "GPU", gpu_factory<FillLikeKernel<1>>());
  r.add("Transpose", "GPU", gpu_factory<TransposeKernel>());
  r.add("OneHot", "GPU", gpu_factory<OneHotKernel>());
}

}  // namespace actorflow
