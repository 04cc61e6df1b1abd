// Array ops: Reshape, Shape, ZerosLike, OnesLike, Transpose, SumToShape, OneHot, ExpandDims,
// ReshapeLike, EnsureShape — shape
// functions (register_array_ops) and the ops:: builders declared in graph/ops.h.
#include "core/checked_math.h"
#include "graph/op_registry.h"
#include "graph/ops.h"
#include "graph/shape_util.h"

namespace actorflow {

namespace {

// Reshape: attr `shape` with at most one -1. The -1 is resolved here when the input's
// element count is known, else left unknown (resolved by the kernel).
Status reshape_shape(InferenceContext& c) {
  AF_ASSIGN_OR_RETURN(auto target, c.attrs().get<std::vector<int64_t>>("shape"));
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (infer >= 0) return InvalidArgument("target shape " + int_list_to_string(target) + " has more than one -1");
      infer = static_cast<int>(i);
    } else if (target[i] < 0) {
      return InvalidArgument("target shape " + int_list_to_string(target) + " has a negative dimension");
    } else if (!checked_mul(known, target[i], &known) || known > kMaxTensorElements) {
      return InvalidArgument("target shape " + int_list_to_string(target) + " has more than 2^60 elements");
    }
  }
  if (target.size() > static_cast<size_t>(kMaxTensorRank))
    return InvalidArgument("target shape has " + std::to_string(target.size()) + " dimensions, more than " +
                           std::to_string(kMaxTensorRank));
  const Shape& in = c.input_shape(0);
  const int64_t n = in.num_elements();
  std::vector<int64_t> out = target;
  if (n >= 0) {
    if (infer >= 0) {
      if (known == 0 || n % known != 0)
        return InvalidArgument("cannot reshape " + in.to_string() + " (" + std::to_string(n) + " elements) into " +
                               int_list_to_string(target));
      out[static_cast<size_t>(infer)] = n / known;
    } else if (known != n) {
      return InvalidArgument("cannot reshape " + in.to_string() + " (" + std::to_string(n) + " elements) into " +
                             int_list_to_string(target) + " (" + std::to_string(known) + " elements)");
    }
  } else if (!in.unknown_rank() && infer < 0 && known > 0) {
    // Partially known input: the known dims must divide the target's element count.
    int64_t part = 1;
    for (int64_t d : in.dims())
      if (d >= 0 && !checked_mul(part, d, &part))
        return InvalidArgument("input shape " + in.to_string() + " has more than 2^63 elements");
    if (part > 0 && known % part != 0)
      return InvalidArgument("cannot reshape " + in.to_string() + " into " + int_list_to_string(target) + " (" +
                             std::to_string(known) + " elements is not a multiple of " + std::to_string(part) + ")");
  }
  c.set_output(0, c.input_type(0), Shape(std::move(out)));
  return Status::OK();
}

Status shape_shape(InferenceContext& c) {
  const Shape& in = c.input_shape(0);
  c.set_output(0, DType::kInt64, in.unknown_rank() ? Shape{-1} : Shape{in.rank()});
  return Status::OK();
}

Status like_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), all_types()));
  c.set_output(0, c.input_type(0), c.input_shape(0));
  return Status::OK();
}

Status transpose_shape(InferenceContext& c) {
  AF_ASSIGN_OR_RETURN(auto perm, c.attrs().get<std::vector<int64_t>>("perm"));
  const Shape& in = c.input_shape(0);
  const int n = static_cast<int>(perm.size());
  if (!in.unknown_rank() && in.rank() != n)
    return InvalidArgument("perm " + int_list_to_string(perm) + " has " + std::to_string(n) +
                           " entries but the input has rank " + std::to_string(in.rank()));
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= n || seen[static_cast<size_t>(p)])
      return InvalidArgument("perm " + int_list_to_string(perm) + " is not a permutation of 0.." +
                             std::to_string(n - 1));
    seen[static_cast<size_t>(p)] = true;
  }
  std::vector<int64_t> out(static_cast<size_t>(n), -1);
  if (!in.unknown_rank())
    for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = in.dim(static_cast<int>(perm[static_cast<size_t>(i)]));
  c.set_output(0, c.input_type(0), Shape(std::move(out)));
  return Status::OK();
}

// SumToShape(x, like): x summed over the dims that broadcasting added or stretched so the
// result has like's shape. Checked statically where dims are known, again at run time.
Status sum_to_shape_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), numeric_types()));
  const Shape& x = c.input_shape(0);
  const Shape& like = c.input_shape(1);
  if (!x.unknown_rank() && !like.unknown_rank()) {
    const int rx = x.rank(), rl = like.rank();
    for (int i = 0; i < rl; ++i) {
      const int ix = rx - rl + i;
      const int64_t dl = like.dim(i);
      const int64_t dx = ix >= 0 ? x.dim(ix) : 1;
      if (dl < 0 || dx < 0 || dl == 1 || dl == dx) continue;
      return InvalidArgument("cannot sum " + x.to_string() + " down to shape " + like.to_string());
    }
  }
  c.set_output(0, c.input_type(0), like);
  return Status::OK();
}

// ExpandDims(x), attr axes: x with size-1 dims inserted at `axes` of the output (rank
// x.rank + axes.size(); negative axes count from the output's end).
Status expand_dims_shape(InferenceContext& c) {
  AF_ASSIGN_OR_RETURN(auto axes, c.attrs().get<std::vector<int64_t>>("axes"));
  const Shape& in = c.input_shape(0);
  if (in.unknown_rank()) {
    c.set_output(0, c.input_type(0), Shape::unknown());
    return Status::OK();
  }
  if (axes.empty()) return InvalidArgument("axes must not be empty");
  if (axes.size() > static_cast<size_t>(kMaxTensorRank))
    return InvalidArgument(std::to_string(axes.size()) + " axes make a rank over " + std::to_string(kMaxTensorRank));
  const int rank = in.rank() + static_cast<int>(axes.size());
  AF_ASSIGN_OR_RETURN(auto mask, reduction_mask(axes, rank));
  std::vector<int64_t> out;
  int next = 0;
  for (int i = 0; i < rank; ++i) out.push_back(mask[static_cast<size_t>(i)] ? 1 : in.dim(next++));
  c.set_output(0, c.input_type(0), Shape(std::move(out)));
  return Status::OK();
}

// ReshapeLike(x, like): x's elements in like's shape (equal element counts, checked where known).
Status reshape_like_shape(InferenceContext& c) {
  const int64_t nx = c.input_shape(0).num_elements(), nl = c.input_shape(1).num_elements();
  if (nx >= 0 && nl >= 0 && nx != nl)
    return InvalidArgument("cannot reshape " + c.input_shape(0).to_string() + " (" + std::to_string(nx) +
                           " elements) like " + c.input_shape(1).to_string() + " (" + std::to_string(nl) +
                           " elements)");
  c.set_output(0, c.input_type(0), c.input_shape(1));
  return Status::OK();
}

// EnsureShape(x), attr shape (may hold -1 or be unknown): x, whose static shape becomes the
// merge of both; incompatible shapes are an error.
Status ensure_shape_shape(InferenceContext& c) {
  AF_ASSIGN_OR_RETURN(Shape want, c.attrs().get<Shape>("shape"));
  auto merged = merge_shapes(c.input_shape(0), want);
  if (!merged.ok())
    return InvalidArgument("input shape " + c.input_shape(0).to_string() + " is not compatible with " +
                           want.to_string());
  c.set_output(0, c.input_type(0), *merged);
  return Status::OK();
}

Status one_hot_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), {DType::kInt32, DType::kInt64}, "indices"));
  AF_ASSIGN_OR_RETURN(int64_t depth, c.attrs().get<int64_t>("depth"));
  if (depth < 0) return InvalidArgument("depth must be >= 0, got " + std::to_string(depth));
  AF_ASSIGN_OR_RETURN(int64_t axis, attr_or<int64_t>(c.attrs(), "axis", -1));
  if (axis != -1) return InvalidArgument("only axis -1 is supported, got " + std::to_string(axis));
  const Shape& in = c.input_shape(0);
  if (in.unknown_rank()) {
    c.set_output(0, DType::kFloat32, Shape::unknown());
    return Status::OK();
  }
  std::vector<int64_t> out = in.dims();
  out.push_back(depth);
  c.set_output(0, DType::kFloat32, Shape(std::move(out)));
  return Status::OK();
}

}  // namespace

void register_array_ops(OpRegistry& r) {
  r.add(op_def("Reshape", 1, reshape_shape));
  r.add(op_def("Shape", 1, shape_shape));
  r.add(op_def("ZerosLike", 1, like_shape));
  r.add(op_def("OnesLike", 1, like_shape));
  r.add(op_def("Transpose", 1, transpose_shape));
  r.add(op_def("SumToShape", 2, sum_to_shape_shape));
  r.add(op_def("OneHot", 1, one_hot_shape));
  r.add(op_def("ExpandDims", 1, expand_dims_shape));
  r.add(op_def("ReshapeLike", 2, reshape_like_shape));
  r.add(op_def("EnsureShape", 1, ensure_shape_shape));
}

namespace ops {

Output reshape(const Scope& s, Input x, const std::vector<int64_t>& shape) {
  return NodeBuilder(s, "Reshape").input(x).attr("shape", shape).output();
}

Output shape_of(const Scope& s, Input x) { return NodeBuilder(s, "Shape").input(x).output(); }

Output zeros_like(const Scope& s, Input x) { return NodeBuilder(s, "ZerosLike").input(x).output(); }

Output ones_like(const Scope& s, Input x) { return NodeBuilder(s, "OnesLike").input(x).output(); }

Output transpose(const Scope& s, Input x, const std::vector<int64_t>& perm) {
  return NodeBuilder(s, "Transpose").input(x).attr("perm", perm).output();
}

Output sum_to_shape_of(const Scope& s, Input x, Input like) {
  return NodeBuilder(s, "SumToShape").input(x).input(like).output();
}

Output one_hot(const Scope& s, Input indices, int64_t depth, float on, float off) {
  return NodeBuilder(s, "OneHot")
      .input(indices)
      .attr("depth", depth)
      .attr("on_value", static_cast<double>(on))
      .attr("off_value", static_cast<double>(off))
      .attr("axis", int64_t{-1})
      .output();
}

Output expand_dims(const Scope& s, Input x, const std::vector<int64_t>& axes) {
  return NodeBuilder(s, "ExpandDims").input(x).attr("axes", axes).output();
}

Output reshape_like(const Scope& s, Input x, Input like) {
  return NodeBuilder(s, "ReshapeLike").input(x).input(like).output();
}

Output ensure_shape(const Scope& s, Input x, const Shape& shape) {
  return NodeBuilder(s, "EnsureShape").input(x).attr("shape", shape).output();
}

}  // namespace ops
}  // namespace actorflow
