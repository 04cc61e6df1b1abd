// CPU kernels for the elementwise math, reduction and ArgMax ops (graph/ops_math.cc).
// Every kernel re-checks run-time shapes (placeholders may have had unknown dims) and
// reports problems as "<Op> '<name>': <what>".
#include <type_traits>

#include "device/cpu/elementwise.h"
#include "device/functors.h"
#include "device/kernel.h"
#include "graph/shape_util.h"

namespace actorflow {
namespace {

using namespace functors;  // NOLINT: the kernels below are spelled in terms of the functors
using cpu::AllTypes;
using cpu::dispatch;
using cpu::FloatTypes;
using cpu::NumericTypes;

Status from_shape_error(const OpKernelContext& ctx, const Status& s) { return ctx.invalid_argument(s.message()); }

// Binary op with NumPy broadcasting. Output dtype is the functor's result type (bool for
// comparisons). Fast paths: equal shapes, either side a single element; otherwise a
// collapsed strided loop whose innermost dimension is contiguous.
template <class F, class Types>
class BinaryKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.dtype() != b.dtype())
      return ctx.invalid_argument(std::string("dtype mismatch ") + dtype_name(a.dtype()) + " vs " +
                                  dtype_name(b.dtype()));
    return dispatch(Types{}, a.dtype(), ctx, [&](auto tag) { return run<decltype(tag)>(ctx, a, b); });
  }

 private:
  template <class T>
  Status run(OpKernelContext& ctx, const Tensor& a, const Tensor& b) {
    using O = decltype(F()(T(), T()));
    Shape out_shape = a.shape();
    if (a.shape() != b.shape()) {
      auto s = broadcast_shapes(a.shape(), b.shape());
      if (!s.ok()) return from_shape_error(ctx, s.status());
      out_shape = *s;
    }
    if constexpr (std::is_same_v<F, DivF> && std::is_integral_v<T>) {
      const T* pb = b.data<T>();
      for (int64_t i = 0, n = b.num_elements(); i < n; ++i)
        if (pb[i] == 0) return ctx.invalid_argument("integer division by zero");
    }
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DTypeOf<O>::value, out_shape));
    const int64_t n = out->num_elements();
    if (n == 0) return Status::OK();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    O* po = out->data<O>();
    const int64_t na = a.num_elements(), nb = b.num_elements();
    if (na == n && nb == n && a.shape() == b.shape()) {
      cpu::binary_loop(pa, pb, po, n, F());
    } else if (na == 1 && nb == n) {
      cpu::binary_loop_scalar_a(pa[0], pb, po, n, F());
    } else if (nb == 1 && na == n) {
      cpu::binary_loop_scalar_b(pa, pb[0], po, n, F());
    } else {
      cpu::broadcast_binary(pa, pb, po, cpu::make_broadcast_plan(a.shape(), b.shape(), out_shape), F());
    }
    return Status::OK();
  }
};

template <class F, class Types>
class UnaryKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    return dispatch(Types{}, x.dtype(), ctx, [&](auto tag) -> Status {
      using T = decltype(tag);
      AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), x.shape()));
      cpu::unary_loop(x.data<T>(), out->data<T>(), x.num_elements(), F());
      return Status::OK();
    });
  }
};

class AddNKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    if (ctx.num_inputs() < 1) return ctx.invalid_argument("AddN needs at least one input");
    const Tensor& x0 = ctx.input(0);
    for (int i = 1; i < ctx.num_inputs(); ++i) {
      const Tensor& xi = ctx.input(i);
      if (xi.dtype() != x0.dtype())
        return ctx.invalid_argument(std::string("dtype mismatch ") + dtype_name(x0.dtype()) + " vs " +
                                    dtype_name(xi.dtype()) + " (input " + std::to_string(i) + ")");
      if (xi.shape() != x0.shape())
        return ctx.invalid_argument("input " + std::to_string(i) + " has shape " + xi.shape().to_string() +
                                    ", expected " + x0.shape().to_string() + " like input 0");
    }
    if (ctx.num_inputs() == 1) {
      ctx.set_output(0, ctx.input(0));
      return Status::OK();
    }
    return dispatch(NumericTypes{}, x0.dtype(), ctx, [&](auto tag) -> Status {
      using T = decltype(tag);
      AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x0.dtype(), x0.shape()));
      const int64_t n = x0.num_elements();
      T* o = out->data<T>();
      cpu::binary_loop(x0.data<T>(), ctx.input(1).data<T>(), o, n, AddF());
      for (int i = 2; i < ctx.num_inputs(); ++i) cpu::accumulate_loop(o, ctx.input(i).data<T>(), n, AddF());
      return Status::OK();
    });
  }
};

class CastKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    auto to = ctx.attrs().get<DType>("DstT");
    if (!to.ok()) return ctx.invalid_argument(to.status().message());
    const Tensor& x = ctx.input(0);
    if (x.dtype() == *to) {
      ctx.set_output(0, x);
      return Status::OK();
    }
    return dispatch(AllTypes{}, x.dtype(), ctx, [&](auto src_tag) -> Status {
      using S = decltype(src_tag);
      return dispatch(AllTypes{}, *to, ctx, [&](auto dst_tag) -> Status {
        using D = decltype(dst_tag);
        AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, *to, x.shape()));
        cpu::unary_loop(x.data<S>(), out->data<D>(), x.num_elements(), CastF<D>());
        return Status::OK();
      });
    });
  }
};

// out[i] = c[i] ? x[i] : y[i], where a *Scalar operand is read at index 0 throughout.
template <bool kCScalar, bool kXScalar, bool kYScalar, class T>
void select_loop(const bool* __restrict c, const T* __restrict x, const T* __restrict y, T* __restrict o, int64_t n) {
  auto at = [](auto* p, int64_t i, auto scalar) { return scalar ? p[0] : p[i]; };
  int64_t i = 0;
  for (; i + cpu::kBlock <= n; i += cpu::kBlock)
    for (int64_t j = 0; j < cpu::kBlock; ++j)
      o[i + j] = functors::SelectF()(at(c, i + j, std::bool_constant<kCScalar>()),
                                     at(x, i + j, std::bool_constant<kXScalar>()),
                                     at(y, i + j, std::bool_constant<kYScalar>()));
  for (; i < n; ++i)
    o[i] = functors::SelectF()(at(c, i, std::bool_constant<kCScalar>()), at(x, i, std::bool_constant<kXScalar>()),
                               at(y, i, std::bool_constant<kYScalar>()));
}

// Select(cond, x, y): each operand a scalar or of the common output shape.
class SelectKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& c = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& y = ctx.input(2);
    if (c.dtype() != DType::kBool)
      return ctx.invalid_argument(std::string("condition must be bool, got ") + dtype_name(c.dtype()));
    if (x.dtype() != y.dtype())
      return ctx.invalid_argument(std::string("dtype mismatch ") + dtype_name(x.dtype()) + " vs " +
                                  dtype_name(y.dtype()));
    const bool cs = c.shape().rank() == 0, xs = x.shape().rank() == 0, ys = y.shape().rank() == 0;
    if (!xs && !ys && x.shape() != y.shape())
      return ctx.invalid_argument("x and y must have the same shape (or be scalars), got " + x.shape().to_string() +
                                  " and " + y.shape().to_string());
    const Shape out_shape = !xs ? x.shape() : !ys ? y.shape() : c.shape();
    if (!cs && c.shape() != out_shape)
      return ctx.invalid_argument("condition shape " + c.shape().to_string() +
                                  " must be a scalar or equal the shape of x and y " + out_shape.to_string());
    if (cs) {  // forward the chosen operand when it already has the output shape
      const Tensor& chosen = *c.data<bool>() ? x : y;
      if (chosen.shape() == out_shape) {
        ctx.set_output(0, chosen);
        return Status::OK();
      }
    }
    return dispatch(AllTypes{}, x.dtype(), ctx, [&](auto tag) -> Status {
      using T = decltype(tag);
      AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), out_shape));
      const bool* pc = c.data<bool>();
      const T* px = x.data<T>();
      const T* py = y.data<T>();
      T* po = out->data<T>();
      const int64_t n = out->num_elements();
      const int mode = (cs ? 4 : 0) | (xs ? 2 : 0) | (ys ? 1 : 0);
      switch (mode) {
        case 0: select_loop<false, false, false>(pc, px, py, po, n); break;
        case 1: select_loop<false, false, true>(pc, px, py, po, n); break;
        case 2: select_loop<false, true, false>(pc, px, py, po, n); break;
        case 3: select_loop<false, true, true>(pc, px, py, po, n); break;
        case 4: select_loop<true, false, false>(pc, px, py, po, n); break;
        case 5: select_loop<true, false, true>(pc, px, py, po, n); break;
        case 6: select_loop<true, true, false>(pc, px, py, po, n); break;
        default: select_loop<true, true, true>(pc, px, py, po, n); break;
      }
      return Status::OK();
    });
  }
};

// Sum / Mean / Max over attr `axes` (empty = all) with attr `keep_dims`.
template <class R, bool kMean>
class ReduceKernel : public OpKernel {
 public:
  explicit ReduceKernel(const Node& n) : OpKernel(n) {
    auto axes = attr_or<std::vector<int64_t>>(n.attrs, "axes", {});
    auto keep = attr_or<bool>(n.attrs, "keep_dims", false);
    if (!axes.ok()) attr_status_ = axes.status();
    else axes_ = *axes;
    if (!keep.ok()) attr_status_ = keep.status();
    else keep_dims_ = *keep;
  }
  Status compute(OpKernelContext& ctx) override {
    if (!attr_status_.ok()) return ctx.invalid_argument(attr_status_.message());
    const Tensor& x = ctx.input(0);
    auto mask = reduction_mask(axes_, x.shape().rank());
    if (!mask.ok()) return ctx.invalid_argument(mask.status().message() + " " + x.shape().to_string());
    return dispatch(NumericTypes{}, x.dtype(), ctx, [&](auto tag) -> Status {
      using T = decltype(tag);
      AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), reduced_shape(x.shape(), *mask, keep_dims_)));
      T* o = out->data<T>();
      cpu::reduce(x.data<T>(), x.shape().dims(), *mask, o, R());
      if constexpr (kMean) {
        int64_t count = 1;
        for (int i = 0; i < x.shape().rank(); ++i)
          if ((*mask)[static_cast<size_t>(i)]) count *= x.shape().dim(i);
        // Mean of nothing: NaN for floating types (0/0), 0 for integers (no trap).
        if (count != 0 || std::is_floating_point_v<T>) {
          const T c = static_cast<T>(count);
          cpu::inplace_loop(o, out->num_elements(), [c](T v) { return DivF()(v, c); });
        }
      }
      return Status::OK();
    });
  }

 private:
  std::vector<int64_t> axes_;
  bool keep_dims_ = false;
  Status attr_status_;
};

// ArgMax over attr `axis`: the first index of the largest value (int64).
class ArgMaxKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    auto axis_attr = ctx.attrs().get<int64_t>("axis");
    if (!axis_attr.ok()) return ctx.invalid_argument(axis_attr.status().message());
    const Tensor& x = ctx.input(0);
    const Shape& s = x.shape();
    if (s.rank() == 0) return ctx.invalid_argument("ArgMax needs an input of rank >= 1, got a scalar");
    auto axis = normalize_axis(*axis_attr, s.rank());
    if (!axis.ok()) return ctx.invalid_argument(axis.status().message() + " " + s.to_string());
    const int64_t N = s.dim(*axis);
    int64_t A = 1, B = 1;
    for (int i = 0; i < *axis; ++i) A *= s.dim(i);
    for (int i = *axis + 1; i < s.rank(); ++i) B *= s.dim(i);
    std::vector<bool> mask(static_cast<size_t>(s.rank()), false);
    mask[static_cast<size_t>(*axis)] = true;
    const Shape out_shape = reduced_shape(s, mask, false);
    if (N == 0 && A * B > 0)
      return ctx.invalid_argument("cannot take the argmax of an empty dimension (axis " + std::to_string(*axis) +
                                  " of " + s.to_string() + ")");
    return dispatch(NumericTypes{}, x.dtype(), ctx, [&](auto tag) -> Status {
      using T = decltype(tag);
      AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kInt64, out_shape));
      argmax<T>(x.data<T>(), out->data<int64_t>(), A, N, B);
      return Status::OK();
    });
  }

 private:
  // x viewed as [A, N, B]; out[a, b] = first n maximising x[a, n, b]. NaN is never chosen
  // over a number (comparisons with NaN are false) unless it comes first.
  template <class T>
  static void argmax(const T* x, int64_t* out, int64_t A, int64_t N, int64_t B) {
    if (B == 1) {
      for (int64_t a = 0; a < A; ++a) {
        const T* row = x + a * N;
        T best = row[0];
        int64_t bi = 0;
        for (int64_t n = 1; n < N; ++n)
          if (row[n] > best) {
            best = row[n];
            bi = n;
          }
        out[a] = bi;
      }
      return;
    }
    std::vector<T> best(static_cast<size_t>(B));
    for (int64_t a = 0; a < A; ++a) {
      const T* xa = x + a * N * B;
      int64_t* __restrict o = out + a * B;
      T* __restrict bv = best.data();
      for (int64_t b = 0; b < B; ++b) {
        bv[b] = xa[b];
        o[b] = 0;
      }
      for (int64_t n = 1; n < N; ++n) {
        const T* __restrict row = xa + n * B;
        for (int64_t b = 0; b < B; ++b) {
          const bool gt = row[b] > bv[b];
          bv[b] = gt ? row[b] : bv[b];
          o[b] = gt ? n : o[b];
        }
      }
    }
  }
};

}  // namespace

void register_cpu_math_kernels(KernelRegistry& r) {
  r.add("Add", "CPU", simple_factory<BinaryKernel<AddF, NumericTypes>>());
  r.add("Sub", "CPU", simple_factory<BinaryKernel<SubF, NumericTypes>>());
  r.add("Mul", "CPU", simple_factory<BinaryKernel<MulF, NumericTypes>>());
  r.add("Div", "CPU", simple_factory<BinaryKernel<DivF, NumericTypes>>());
  r.add("Maximum", "CPU", simple_factory<BinaryKernel<MaximumF, NumericTypes>>());
  r.add("Equal", "CPU", simple_factory<BinaryKernel<EqualF, AllTypes>>());
  r.add("Greater", "CPU", simple_factory<BinaryKernel<GreaterF, NumericTypes>>());
  r.add("Neg", "CPU", simple_factory<UnaryKernel<NegF, NumericTypes>>());
  r.add("Square", "CPU", simple_factory<UnaryKernel<SquareF, NumericTypes>>());
  r.add("Log", "CPU", simple_factory<UnaryKernel<LogF, FloatTypes>>());
  r.add("Exp", "CPU", simple_factory<UnaryKernel<ExpF, FloatTypes>>());
  r.add("Sqrt", "CPU", simple_factory<UnaryKernel<SqrtF, FloatTypes>>());
  r.add("Sigmoid", "CPU", simple_factory<UnaryKernel<SigmoidF, FloatTypes>>());
  r.add("Tanh", "CPU", simple_factory<UnaryKernel<TanhF, FloatTypes>>());
  r.add("AddN", "CPU", simple_factory<AddNKernel>());
  r.add("Cast", "CPU", simple_factory<CastKernel>());
  r.add("Select", "CPU", simple_factory<SelectKernel>());
  r.add("Sum", "CPU", simple_factory<ReduceKernel<SumReducer, false>>());
  r.add("Mean", "CPU", simple_factory<ReduceKernel<SumReducer, true>>());
  r.add("Max", "CPU", simple_factory<ReduceKernel<MaxReducer, false>>());
  r.add("ArgMax", "CPU", simple_factory<ArgMaxKernel>());
}

}  // namespace actorflow
