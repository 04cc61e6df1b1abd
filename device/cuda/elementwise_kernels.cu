// Elementwise GPU kernels: binary ops with NumPy broadcasting (Add, Sub, Mul, Div, Maximum,
// Equal, Greater), unary ops (Neg, Square, Log, Exp, Sqrt, Relu), ReluGrad, Select, AddN,
// BiasAdd and Cast. The per-element math is the functors of device/functors.h, the same the
// CPU kernels use.
#include <string>
#include <vector>

#include "device/cuda/gpu_kernel.h"
#include "device/functors.h"
#include "device/index_plan.h"
#include "graph/shape_util.h"

namespace actorflow {
namespace {

using namespace functors;  // NOLINT: the functor names read better unqualified here

// ---- device kernels -------------------------------------------------------------------------

template <class T, class Out, class F>
__global__ void binary_same_kernel(const T* a, const T* b, Out* out, int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[i] = f(a[i], b[i]);
}

template <class T, class Out, class F>
__global__ void binary_scalar_a_kernel(const T* a, const T* b, Out* out, int64_t n, F f) {
  const T av = *a;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[i] = f(av, b[i]);
}

template <class T, class Out, class F>
__global__ void binary_scalar_b_kernel(const T* a, const T* b, Out* out, int64_t n, F f) {
  const T bv = *b;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[i] = f(a[i], bv);
}

template <class T, class Out, class F>
__global__ void binary_bcast_kernel(const T* a, const T* b, Out* out, int64_t n, BroadcastPlan p, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    int64_t ai, bi;
    broadcast_offsets(p, i, &ai, &bi);
    out[i] = f(a[ai], b[bi]);
  }
}

template <class T, class Out, class F>
__global__ void unary_kernel(const T* a, Out* out, int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[i] = f(a[i]);
}

template <class T>
__global__ void select_kernel(const bool* c, const T* x, const T* y, T* out, int64_t n, bool c_scalar, bool x_scalar,
                              bool y_scalar) {
  SelectF f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[i] = f(c[c_scalar ? 0 : i], x[x_scalar ? 0 : i], y[y_scalar ? 0 : i]);
}

template <class T>
__global__ void bias_add_kernel(const T* x, const T* bias, T* out, int64_t n, int64_t c) {
  AddF f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[i] = f(x[i], bias[i % c]);
}

// ---- launchers --------------------------------------------------------------------------------

template <class T, class Out, class F>
Status launch_binary(GpuDevice& dev, const Tensor& a, const Tensor& b, Tensor* out, F f, const char* what) {
  const int64_t n = out->num_elements();
  if (n == 0) return Status::OK();
  const T* ap = a.data<T>();
  const T* bp = b.data<T>();
  Out* op = out->data<Out>();
  const unsigned blocks = num_blocks(n);
  if (a.shape() == b.shape()) {
    binary_same_kernel<T, Out, F><<<blocks, kThreadsPerBlock, 0, dev.stream()>>>(ap, bp, op, n, f);
  } else if (a.num_elements() == 1) {
    binary_scalar_a_kernel<T, Out, F><<<blocks, kThreadsPerBlock, 0, dev.stream()>>>(ap, bp, op, n, f);
  } else if (b.num_elements() == 1) {
    binary_scalar_b_kernel<T, Out, F><<<blocks, kThreadsPerBlock, 0, dev.stream()>>>(ap, bp, op, n, f);
  } else {
    AF_ASSIGN_OR_RETURN(BroadcastPlan plan, make_broadcast_plan(a.shape(), b.shape()));
    binary_bcast_kernel<T, Out, F><<<blocks, kThreadsPerBlock, 0, dev.stream()>>>(ap, bp, op, n, plan, f);
  }
  return cuda_launch_status(what);
}

template <class T, class Out, class F>
Status launch_unary(GpuDevice& dev, const Tensor& a, Tensor* out, F f, const char* what) {
  const int64_t n = out->num_elements();
  if (n == 0) return Status::OK();
  unary_kernel<T, Out, F><<<num_blocks(n), kThreadsPerBlock, 0, dev.stream()>>>(a.data<T>(), out->data<Out>(), n, f);
  return cuda_launch_status(what);
}

// ---- kernels ------------------------------------------------------------------------------------

enum class Types { kNumeric, kAll, kFloating };

template <class F, Types kTypes, bool kBoolOut>
class BinaryKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.dtype() != b.dtype())
      return InvalidArgument(std::string("dtype mismatch ") + dtype_name(a.dtype()) + " vs " + dtype_name(b.dtype()));
    AF_ASSIGN_OR_RETURN(Shape out_shape, broadcast_shapes(a.shape(), b.shape()));
    const DType out_type = kBoolOut ? DType::kBool : a.dtype();
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, out_type, out_shape));
    auto body = [&](auto tag) -> Status {
      using T = decltype(tag);
      using Out = std::conditional_t<kBoolOut, bool, T>;
      return launch_binary<T, Out>(dev, a, b, out, F(), "binary elementwise kernel");
    };
    if constexpr (kTypes == Types::kAll) return dispatch_all(ctx, a.dtype(), body);
    else if constexpr (kTypes == Types::kFloating) return dispatch_floating(ctx, a.dtype(), body);
    else return dispatch_numeric(ctx, a.dtype(), body);
  }
};

template <class F, Types kTypes>
class UnaryKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Tensor& a = ctx.input(0);
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, a.dtype(), a.shape()));
    auto body = [&](auto tag) -> Status {
      using T = decltype(tag);
      return launch_unary<T, T>(dev, a, out, F(), "unary elementwise kernel");
    };
    if constexpr (kTypes == Types::kFloating) return dispatch_floating(ctx, a.dtype(), body);
    else return dispatch_numeric(ctx, a.dtype(), body);
  }
};

// ReluGrad(gradients, features): same shapes.
class ReluGradKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Tensor& g = ctx.input(0);
    const Tensor& f = ctx.input(1);
    if (g.shape() != f.shape())
      return InvalidArgument("gradients " + g.shape().to_string() + " and features " + f.shape().to_string() +
                             " must have the same shape");
    if (g.dtype() != f.dtype()) return InvalidArgument("gradients and features must have the same dtype");
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, g.dtype(), g.shape()));
    return dispatch_floating(ctx, g.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      return launch_binary<T, T>(dev, g, f, out, ReluGradF(), "ReluGrad kernel");
    });
  }
};

// Select(cond, x, y): each operand a scalar or of the output shape.
class SelectKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Tensor& c = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& y = ctx.input(2);
    if (c.dtype() != DType::kBool) return InvalidArgument("condition must be bool");
    if (x.dtype() != y.dtype()) return InvalidArgument("x and y must have the same dtype");
    Shape shape;
    bool any = false;
    for (const Tensor* t : {&x, &y, &c}) {
      if (t->shape().rank() == 0) continue;
      if (any && t->shape() != shape)
        return InvalidArgument("condition, x and y must be scalars or of one shape, got " + c.shape().to_string() +
                               ", " + x.shape().to_string() + " and " + y.shape().to_string());
      shape = t->shape();
      any = true;
    }
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), shape));
    const int64_t n = out->num_elements();
    if (n == 0) return Status::OK();
    return dispatch_all(ctx, x.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      select_kernel<T><<<num_blocks(n), kThreadsPerBlock, 0, dev.stream()>>>(
          c.data<bool>(), x.data<T>(), y.data<T>(), out->data<T>(), n, c.shape().rank() == 0, x.shape().rank() == 0,
          y.shape().rank() == 0);
      return cuda_launch_status("Select kernel");
    });
  }
};

// AddN: the elementwise sum of N same-shaped inputs (first copied, the rest added in place).
class AddNKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    if (ctx.num_inputs() < 1) return InvalidArgument("AddN needs at least one input");
    const Tensor& x0 = ctx.input(0);
    for (int i = 1; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i).dtype() != x0.dtype() || ctx.input(i).shape() != x0.shape())
        return InvalidArgument("input " + std::to_string(i) + " is " + ctx.input(i).debug_string() +
                               ", expected the dtype and shape of input 0 " + x0.debug_string());
    }
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x0.dtype(), x0.shape()));
    if (out->num_elements() == 0) return Status::OK();
    return dispatch_numeric(ctx, x0.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      if (ctx.num_inputs() == 1) {
        AF_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(out->raw_data(), x0.raw_data(), x0.bytes(), cudaMemcpyDeviceToDevice, dev.stream()));
        return Status::OK();
      }
      AF_RETURN_IF_ERROR((launch_binary<T, T>(dev, x0, ctx.input(1), out, AddF(), "AddN kernel")));
      for (int i = 2; i < ctx.num_inputs(); ++i)
        AF_RETURN_IF_ERROR((launch_binary<T, T>(dev, *out, ctx.input(i), out, AddF(), "AddN kernel")));
      return Status::OK();
    });
  }
};

// BiasAdd(value, bias): bias over the last dimension.
class BiasAddKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Tensor& x = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (x.shape().rank() < 1 || b.shape().rank() != 1 || b.shape().dim(0) != x.shape().dim(x.shape().rank() - 1))
      return InvalidArgument("bias " + b.shape().to_string() + " does not match the last dimension of value " +
                             x.shape().to_string());
    if (x.dtype() != b.dtype()) return InvalidArgument("value and bias must have the same dtype");
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), x.shape()));
    const int64_t n = x.num_elements(), c = b.num_elements();
    if (n == 0) return Status::OK();
    return dispatch_floating(ctx, x.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      bias_add_kernel<T><<<num_blocks(n), kThreadsPerBlock, 0, dev.stream()>>>(x.data<T>(), b.data<T>(),
                                                                                out->data<T>(), n, c);
      return cuda_launch_status("BiasAdd kernel");
    });
  }
};

// Cast: attr DstT; every dtype to every dtype.
class CastKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    AF_ASSIGN_OR_RETURN(DType to, ctx.attrs().get<DType>("DstT"));
    const Tensor& x = ctx.input(0);
    if (x.dtype() == to) {
      ctx.set_output(0, x);
      return Status::OK();
    }
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, to, x.shape()));
    return dispatch_all(ctx, x.dtype(), [&](auto from_tag) -> Status {
      using From = decltype(from_tag);
      return dispatch_all(ctx, to, [&](auto to_tag) -> Status {
        using To = decltype(to_tag);
        return launch_unary<From, To>(dev, x, out, CastF<To>(), "Cast kernel");
      });
    });
  }
};

}  // namespace

void register_gpu_elementwise_kernels(KernelRegistry& r) {
  r.add("Add", "GPU", gpu_factory<BinaryKernel<AddF, Types::kNumeric, false>>());
  r.add("Sub", "GPU", gpu_factory<BinaryKernel<SubF, Types::kNumeric, false>>());
  r.add("Mul", "GPU", gpu_factory<BinaryKernel<MulF, Types::kNumeric, false>>());
  r.add("Div", "GPU", gpu_factory<BinaryKernel<DivF, Types::kNumeric, false>>());
  r.add("Maximum", "GPU", gpu_factory<BinaryKernel<MaximumF, Types::kNumeric, false>>());
  r.add("Equal", "GPU", gpu_factory<BinaryKernel<EqualF, Types::kAll, true>>());
  r.add("Greater", "GPU", gpu_factory<BinaryKernel<GreaterF, Types::kNumeric, true>>());
  r.add("Neg", "GPU", gpu_factory<UnaryKernel<NegF, Types::kNumeric>>());
  r.add("Square", "GPU", gpu_factory<UnaryKernel<SquareF, Types::kNumeric>>());
  r.add("Log", "GPU", gpu_factory<UnaryKernel<LogF, Types::kFloating>>());
  r.add("Exp", "GPU", gpu_factory<UnaryKernel<ExpF, Types::kFloating>>());
  r.add("Sqrt", "GPU", gpu_factory<UnaryKernel<SqrtF, Types::kFloating>>());
  r.add("Relu", "GPU", gpu_factory<UnaryKernel<ReluF, Types::kFloating>>());
  r.add("ReluGrad", "GPU", gpu_factory<ReluGradKernel>());
  r.add("Select", "GPU", gpu_factory<SelectKernel>());
  r.add("AddN", "GPU", gpu_factory<AddNKernel>());
  r.add("BiasAdd", "GPU", gpu_factory<BiasAddKernel>());
  r.add("Cast", "GPU", gpu_factory<CastKernel>());
}

}  // namespace actorflow
