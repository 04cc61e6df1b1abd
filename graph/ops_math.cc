// Elementwise math, reductions and ArgMax: shape functions (register_math_ops) and the
// ops:: builders declared in graph/ops.h.
#include <cstring>

#include "graph/op_registry.h"
#include "graph/ops.h"
#include "graph/shape_util.h"

namespace actorflow {
namespace {

// Binary broadcasting op: both inputs of one dtype from `allowed`; output dtype is the input
// dtype, or bool for comparisons.
ShapeFn binary_shape(const DTypes& allowed, bool bool_out) {
  return [allowed, bool_out](InferenceContext& c) -> Status {
    AF_RETURN_IF_ERROR(check_same_dtype(c.input_type(0), c.input_type(1)));
    AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), allowed));
    AF_ASSIGN_OR_RETURN(Shape out, broadcast_shapes(c.input_shape(0), c.input_shape(1)));
    c.set_output(0, bool_out ? DType::kBool : c.input_type(0), std::move(out));
    return Status::OK();
  };
}

ShapeFn unary_shape(const DTypes& allowed) {
  return [allowed](InferenceContext& c) -> Status {
    AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), allowed));
    c.set_output(0, c.input_type(0), c.input_shape(0));
    return Status::OK();
  };
}

// Sum, Mean, Max: attrs axes (empty = all) and keep_dims.
Status reduction_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), numeric_types()));
  AF_ASSIGN_OR_RETURN(auto axes, attr_or<std::vector<int64_t>>(c.attrs(), "axes", {}));
  AF_ASSIGN_OR_RETURN(bool keep, attr_or<bool>(c.attrs(), "keep_dims", false));
  const Shape& in = c.input_shape(0);
  if (in.unknown_rank()) {
    // Reducing every axis without keep_dims gives a scalar whatever the rank.
    c.set_output(0, c.input_type(0), axes.empty() && !keep ? Shape{} : Shape::unknown());
    return Status::OK();
  }
  AF_ASSIGN_OR_RETURN(auto mask, reduction_mask(axes, in.rank()));
  c.set_output(0, c.input_type(0), reduced_shape(in, mask, keep));
  return Status::OK();
}

Status argmax_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), numeric_types()));
  AF_ASSIGN_OR_RETURN(int64_t axis, c.attrs().get<int64_t>("axis"));
  const Shape& in = c.input_shape(0);
  if (in.unknown_rank()) {
    c.set_output(0, DType::kInt64, Shape::unknown());
    return Status::OK();
  }
  if (in.rank() == 0) return InvalidArgument("ArgMax needs an input of rank >= 1, got a scalar");
  AF_ASSIGN_OR_RETURN(int ax, normalize_axis(axis, in.rank()));
  std::vector<bool> mask(static_cast<size_t>(in.rank()), false);
  mask[static_cast<size_t>(ax)] = true;
  c.set_output(0, DType::kInt64, reduced_shape(in, mask, false));
  return Status::OK();
}

Status addn_shape(InferenceContext& c) {
  if (c.num_inputs() < 1) return InvalidArgument("AddN needs at least one input");
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), numeric_types()));
  Shape s = c.input_shape(0);
  for (int i = 1; i < c.num_inputs(); ++i) {
    if (c.input_type(i) != c.input_type(0))
      return InvalidArgument("dtype mismatch " + std::string(dtype_name(c.input_type(0))) + " vs " +
                             dtype_name(c.input_type(i)) + " (input " + std::to_string(i) + ")");
    auto m = merge_shapes(s, c.input_shape(i));
    if (!m.ok())
      return InvalidArgument("input " + std::to_string(i) + " has shape " + c.input_shape(i).to_string() +
                             ", expected " + s.to_string() + " like input 0");
    s = *m;
  }
  c.set_output(0, c.input_type(0), s);
  return Status::OK();
}

Status cast_shape(InferenceContext& c) {
  AF_ASSIGN_OR_RETURN(DType to, c.attrs().get<DType>("DstT"));
  AF_RETURN_IF_ERROR(check_dtype(to, all_types(), "DstT"));
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), all_types()));
  c.set_output(0, to, c.input_shape(0));
  return Status::OK();
}

// Select(cond, x, y): cond is bool; x and y share a dtype. Each of cond, x and y is either a
// scalar or of the output shape (the shape of the non-scalar operands, which must agree).
Status select_shape(InferenceContext& c) {
  if (c.input_type(0) != DType::kBool)
    return InvalidArgument(std::string("condition must be bool, got ") + dtype_name(c.input_type(0)));
  AF_RETURN_IF_ERROR(check_same_dtype(c.input_type(1), c.input_type(2)));
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(1), all_types()));
  auto is_scalar = [&](int i) { return !c.input_shape(i).unknown_rank() && c.input_shape(i).rank() == 0; };
  Shape out = Shape::unknown();
  bool any = false;
  for (int i : {1, 2}) {
    if (is_scalar(i)) continue;
    auto m = merge_shapes(out, c.input_shape(i));
    if (!m.ok())
      return InvalidArgument("x and y must have the same shape (or be scalars), got " + c.input_shape(1).to_string() +
                             " and " + c.input_shape(2).to_string());
    out = *m;
    any = true;
  }
  if (!is_scalar(0)) {
    auto m = merge_shapes(out, c.input_shape(0));
    if (!m.ok())
      return InvalidArgument("condition shape " + c.input_shape(0).to_string() +
                             " must be a scalar or equal the shape of x and y " + out.to_string());
    out = *m;
    any = true;
  }
  c.set_output(0, c.input_type(1), any ? out : Shape{});
  return Status::OK();
}

// A copy of literal tensor `t` converted to `to` when every value converts exactly;
// otherwise `t` unchanged (the shape function then reports the dtype mismatch).
Tensor convert_literal(const Tensor& t, DType to) {
  if (t.dtype() == to || !t.is_initialized() || t.dtype() == DType::kBool || to == DType::kBool ||
      to == DType::kUInt8 || t.dtype() == DType::kUInt8)
    return t;
  Tensor out(to, t.shape());
  bool exact = true;
  const int64_t n = t.num_elements();
  dispatch_dtype(t.dtype(), [&](auto src_tag) {
    using S = decltype(src_tag);
    const S* s = t.data<S>();
    dispatch_dtype(to, [&](auto dst_tag) {
      using D = decltype(dst_tag);
      D* d = out.data<D>();
      for (int64_t i = 0; i < n; ++i) {
        const double v = static_cast<double>(s[i]);
        if (v != v) {  // NaN converts exactly only to a floating type
          exact = exact && dtype_is_floating(to);
          d[i] = static_cast<D>(s[i]);
          continue;
        }
        if (!dtype_is_floating(to) && (v < -9.2e18 || v > 9.2e18)) {
          exact = false;
          continue;
        }
        d[i] = static_cast<D>(s[i]);
        exact = exact && static_cast<double>(d[i]) == v;
      }
      return 0;
    });
    return 0;
  });
  return exact ? out : t;
}

// TensorFlow converts a Python literal to the dtype of the tensor it meets; we do the same
// for C++ literals (e.g. mul(s, int64_tensor, 2)) when the conversion is exact.
Input adapt_literal(const Input& lit, const Input& other) {
  if (lit.is_output() || !other.is_output() || !other.output().valid()) return lit;
  return Input(convert_literal(lit.tensor(), other.output().dtype()));
}

Output binary(const Scope& s, const char* op, const Input& x, const Input& y) {
  return NodeBuilder(s, op).input(adapt_literal(x, y)).input(adapt_literal(y, x)).output();
}

Output unary(const Scope& s, const char* op, const Input& x) { return NodeBuilder(s, op).input(x).output(); }

Output reduction(const Scope& s, const char* op, const Input& x, const std::vector<int64_t>& axes, bool keep) {
  return NodeBuilder(s, op).input(x).attr("axes", axes).attr("keep_dims", keep).output();
}

}  // namespace

void register_math_ops(OpRegistry& r) {
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Maximum"})
    r.add(op_def(op, 2, binary_shape(numeric_types(), false)));
  r.add(op_def("Equal", 2, binary_shape(all_types(), true)));
  r.add(op_def("Greater", 2, binary_shape(numeric_types(), true)));
  for (const char* op : {"Neg", "Square"}) r.add(op_def(op, 1, unary_shape(numeric_types())));
  for (const char* op : {"Log", "Exp", "Sqrt"}) r.add(op_def(op, 1, unary_shape(floating_types())));
  r.add(op_def("AddN", -1, addn_shape));
  r.add(op_def("Cast", 1, cast_shape));
  r.add(op_def("Select", 3, select_shape));
  for (const char* op : {"Sum", "Mean", "Max"}) r.add(op_def(op, 1, reduction_shape));
  r.add(op_def("ArgMax", 1, argmax_shape));
}

namespace ops {

Output add(const Scope& s, Input x, Input y) { return binary(s, "Add", x, y); }
Output sub(const Scope& s, Input x, Input y) { return binary(s, "Sub", x, y); }
Output mul(const Scope& s, Input x, Input y) { return binary(s, "Mul", x, y); }
Output div(const Scope& s, Input x, Input y) { return binary(s, "Div", x, y); }
Output maximum(const Scope& s, Input x, Input y) { return binary(s, "Maximum", x, y); }
Output equal(const Scope& s, Input x, Input y) { return binary(s, "Equal", x, y); }
Output greater(const Scope& s, Input x, Input y) { return binary(s, "Greater", x, y); }

Output neg(const Scope& s, Input x) { return unary(s, "Neg", x); }
Output log(const Scope& s, Input x) { return unary(s, "Log", x); }
Output exp(const Scope& s, Input x) { return unary(s, "Exp", x); }
Output square(const Scope& s, Input x) { return unary(s, "Square", x); }
Output sqrt(const Scope& s, Input x) { return unary(s, "Sqrt", x); }

Output add_n(const Scope& s, const std::vector<Output>& xs) { return NodeBuilder(s, "AddN").inputs(xs).output(); }

Output cast(const Scope& s, Input x, DType to) {
  return NodeBuilder(s, "Cast").input(x).attr("DstT", to).output();
}

Output select(const Scope& s, Input cond, Input x, Input y) {
  return NodeBuilder(s, "Select").input(cond).input(adapt_literal(x, y)).input(adapt_literal(y, x)).output();
}

Output reduce_sum(const Scope& s, Input x, const std::vector<int64_t>& axes, bool keep_dims) {
  return reduction(s, "Sum", x, axes, keep_dims);
}
Output reduce_mean(const Scope& s, Input x, const std::vector<int64_t>& axes, bool keep_dims) {
  return reduction(s, "Mean", x, axes, keep_dims);
}
Output reduce_max(const Scope& s, Input x, const std::vector<int64_t>& axes, bool keep_dims) {
  return reduction(s, "Max", x, axes, keep_dims);
}

Output argmax(const Scope& s, Input x, int64_t axis) {
  return NodeBuilder(s, "ArgMax").input(x).attr("axis", axis).output();
}

}  // namespace ops
}  // namespace actorflow
