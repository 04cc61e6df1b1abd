// Reduction GPU kernels: Sum, Mean, Max over axes (attrs axes, keep_dims), ArgMax (attr
// axis, int64 result) and BiasAddGrad (sum over all but the last dim). The combine step is
// the reducers of device/functors.h; the index arithmetic is device/index_plan.h.
#include <string>
#include <vector>

#include "device/cuda/gpu_kernel.h"
#include "device/functors.h"
#include "device/index_plan.h"
#include "graph/shape_util.h"

namespace actorflow {
namespace {

using functors::MaxReducer;
using functors::SumReducer;

// Mean divides the sum by the count (integer division for integer types, as TensorFlow);
// an empty mean is NaN for floating types and 0 for integers.
template <class T>
__device__ T finish(T acc, int64_t count, bool mean) {
  return mean ? acc / static_cast<T>(count) : acc;  // 0 / 0 = NaN for an empty float mean
}
template <>
__device__ int32_t finish<int32_t>(int32_t acc, int64_t count, bool mean) {
  return !mean ? acc : count == 0 ? 0 : static_cast<int32_t>(acc / count);
}
template <>
__device__ int64_t finish<int64_t>(int64_t acc, int64_t count, bool mean) {
  return !mean ? acc : count == 0 ? 0 : acc / count;
}

// One thread per output element: for many outputs with short reductions.
template <class T, class R>
__global__ void reduce_per_thread_kernel(const T* in, T* out, ReducePlan p, bool mean) {
  R red;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < p.num_out;
       o += int64_t{blockDim.x} * gridDim.x) {
    T acc = R::template identity<T>();
    for (int64_t r = 0; r < p.num_reduce; ++r) acc = red(acc, in[reduce_offset(p, o, r)]);
    out[o] = finish(acc, p.num_reduce, mean);
  }
}

// One block per output element: for long reductions (threads stride over the reduced
// elements, then a shared-memory tree).
template <class T, class R>
__global__ void reduce_per_block_kernel(const T* in, T* out, ReducePlan p, bool mean) {
  __shared__ __align__(16) unsigned char smem_raw[kThreadsPerBlock * sizeof(T)];
  T* smem = reinterpret_cast<T*>(smem_raw);
  R red;
  for (int64_t o = blockIdx.x; o < p.num_out; o += gridDim.x) {
    T acc = R::template identity<T>();
    for (int64_t r = threadIdx.x; r < p.num_reduce; r += blockDim.x) acc = red(acc, in[reduce_offset(p, o, r)]);
    smem[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) smem[threadIdx.x] = red(smem[threadIdx.x], smem[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) out[o] = finish(smem[0], p.num_reduce, mean);
    __syncthreads();
  }
}

template <class T, class R>
Status launch_reduce(GpuDevice& dev, const Tensor& in, const std::vector<bool>& mask, Tensor* out, bool mean) {
  AF_ASSIGN_OR_RETURN(ReducePlan p, make_reduce_plan(in.shape(), mask));
  if (p.num_out == 0) return Status::OK();
  if (p.num_reduce >= 2048 && p.num_out < 4096) {
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(p.num_out, 65535));
    reduce_per_block_kernel<T, R><<<blocks, kThreadsPerBlock, 0, dev.stream()>>>(in.data<T>(), out->data<T>(), p, mean);
  } else {
    reduce_per_thread_kernel<T, R><<<num_blocks(p.num_out), kThreadsPerBlock, 0, dev.stream()>>>(
        in.data<T>(), out->data<T>(), p, mean);
  }
  return cuda_launch_status("reduction kernel");
}

enum class Kind { kSum, kMean, kMax };

template <Kind kKind>
class ReduceKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const std::vector<int64_t> axes = ctx.attrs().get_or<std::vector<int64_t>>("axes", {});
    const bool keep = ctx.attrs().get_or<bool>("keep_dims", false);
    const Tensor& x = ctx.input(0);
    AF_ASSIGN_OR_RETURN(std::vector<bool> mask, reduction_mask(axes, x.shape().rank()));
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), reduced_shape(x.shape(), mask, keep)));
    return dispatch_numeric(ctx, x.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      if constexpr (kKind == Kind::kMax)
        return launch_reduce<T, MaxReducer>(dev, x, mask, out, false);
      else
        return launch_reduce<T, SumReducer>(dev, x, mask, out, kKind == Kind::kMean);
    });
  }
};

// BiasAddGrad(out_backprop): the sum over every dim but the last.
class BiasAddGradKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Tensor& g = ctx.input(0);
    const int rank = g.shape().rank();
    if (rank < 1) return InvalidArgument("out_backprop must have rank >= 1, got a scalar");
    std::vector<bool> mask(static_cast<size_t>(rank), true);
    mask.back() = false;
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, g.dtype(), Shape{g.shape().dim(rank - 1)}));
    return dispatch_floating(ctx, g.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      return launch_reduce<T, SumReducer>(dev, g, mask, out, false);
    });
  }
};

// SumToShape(x, like): sums x over the dims broadcasting added (leading) or stretched (like
// has 1 there), giving like's shape.
class SumToShapeKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Tensor& x = ctx.input(0);
    const Shape& target = ctx.input(1).shape();
    if (x.shape() == target) {
      ctx.set_output(0, x);
      return Status::OK();
    }
    const int rx = x.shape().rank(), rt = target.rank();
    for (int i = 0; i < rt; ++i) {
      const int ix = rx - rt + i;
      const int64_t dx = ix >= 0 ? x.shape().dim(ix) : 1;
      if (target.dim(i) != dx && target.dim(i) != 1)
        return InvalidArgument("cannot sum " + x.shape().to_string() + " down to shape " + target.to_string());
    }
    std::vector<bool> mask(static_cast<size_t>(rx), false);
    for (int ix = 0; ix < rx; ++ix) {
      const int it = ix - (rx - rt);
      mask[static_cast<size_t>(ix)] = it < 0 || (target.dim(it) == 1 && x.shape().dim(ix) != 1);
    }
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), target));
    return dispatch_numeric(ctx, x.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      return launch_reduce<T, SumReducer>(dev, x, mask, out, false);
    });
  }
};

// ArgMax over [outer, n, inner]: the first index of the largest value. As on the CPU, a NaN
// is never chosen over a number (comparisons with NaN are false) unless it comes first.
template <class T>
__global__ void argmax_kernel(const T* in, int64_t* out, int64_t outer, int64_t n, int64_t inner) {
  const int64_t total = outer * inner;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < total; o += int64_t{blockDim.x} * gridDim.x) {
    const int64_t i_out = o / inner, i_in = o % inner;
    const T* p = in + i_out * n * inner + i_in;
    int64_t best = 0;
    T best_v = p[0];
    for (int64_t k = 1; k < n; ++k) {
      const T v = p[k * inner];
      if (v > best_v) {
        best_v = v;
        best = k;
      }
    }
    out[o] = best;
  }
}

class ArgMaxKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    AF_ASSIGN_OR_RETURN(int64_t axis, ctx.attrs().get<int64_t>("axis"));
    const Tensor& x = ctx.input(0);
    const int rank = x.shape().rank();
    if (rank == 0) return InvalidArgument("ArgMax needs an input of rank >= 1, got a scalar");
    if (axis < -rank || axis >= rank)
      return InvalidArgument("axis " + std::to_string(axis) + " is out of range for an input of rank " +
                             std::to_string(rank));
    const int ax = static_cast<int>(axis < 0 ? axis + rank : axis);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; ++i) outer *= x.shape().dim(i);
    for (int i = ax + 1; i < rank; ++i) inner *= x.shape().dim(i);
    const int64_t n = x.shape().dim(ax);
    if (n == 0 && outer * inner > 0)
      return InvalidArgument("cannot take the argmax of an empty dimension (axis " + std::to_string(ax) + " of " +
                             x.shape().to_string() + ")");
    std::vector<bool> mask(static_cast<size_t>(rank), false);
    mask[static_cast<size_t>(ax)] = true;
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kInt64, reduced_shape(x.shape(), mask, false)));
    if (outer * inner == 0) return Status::OK();
    return dispatch_numeric(ctx, x.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      argmax_kernel<T><<<num_blocks(outer * inner), kThreadsPerBlock, 0, dev.stream()>>>(
          x.data<T>(), out->data<int64_t>(), outer, n, inner);
      return cuda_launch_status("ArgMax kernel");
    });
  }
};

}  // namespace

void register_gpu_reduction_kernels(KernelRegistry& r) {
  r.add("Sum", "GPU", gpu_factory<ReduceKernel<Kind::kSum>>());
  r.add("Mean", "GPU", gpu_factory<ReduceKernel<Kind::kMean>>());
  r.add("Max", "GPU", gpu_factory<ReduceKernel<Kind::kMax>>());
  r.add("BiasAddGrad", "GPU", gpu_factory<BiasAddGradKernel>());
  r.add("ArgMax", "GPU", gpu_factory<ArgMaxKernel>());
  r.add("SumToShape", "GPU", gpu_factory<SumToShapeKernel>());
}

}  // namespace actorflow
