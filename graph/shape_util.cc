#include "graph/shape_util.h"

#include <algorithm>

#include "core/checked_math.h"

namespace actorflow {

Result<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  if (a.unknown_rank() || b.unknown_rank()) return Shape::unknown();
  const int ra = a.rank(), rb = b.rank();
  const int r = std::max(ra, rb);
  std::vector<int64_t> out(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    const int ia = ra - r + i, ib = rb - r + i;
    const int64_t da = ia >= 0 ? a.dim(ia) : 1;
    const int64_t db = ib >= 0 ? b.dim(ib) : 1;
    int64_t d;
    if (da == db) {
      d = da;
    } else if (da == 1) {
      d = db;
    } else if (db == 1) {
      d = da;
    } else if (da < 0) {
      d = db;  // unknown vs known n != 1: must be n (or 1) at run time
    } else if (db < 0) {
      d = da;
    } else {
      return InvalidArgument("incompatible shapes " + a.to_string() + " and " + b.to_string());
    }
    out[static_cast<size_t>(i)] = d;
  }
  return Shape(std::move(out));
}

Result<Shape> merge_shapes(const Shape& a, const Shape& b) {
  if (a.unknown_rank()) return b;
  if (b.unknown_rank()) return a;
  if (a.rank() != b.rank())
    return InvalidArgument("shapes " + a.to_string() + " and " + b.to_string() + " are not compatible");
  std::vector<int64_t> out(static_cast<size_t>(a.rank()));
  for (int i = 0; i < a.rank(); ++i) {
    const int64_t da = a.dim(i), db = b.dim(i);
    if (da >= 0 && db >= 0 && da != db)
      return InvalidArgument("shapes " + a.to_string() + " and " + b.to_string() + " are not compatible");
    out[static_cast<size_t>(i)] = da >= 0 ? da : db;
  }
  return Shape(std::move(out));
}

Result<int> normalize_axis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank)
    return InvalidArgument("axis " + std::to_string(axis) + " is out of range for an input of rank " +
                           std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

Result<std::vector<bool>> reduction_mask(const std::vector<int64_t>& axes, int rank) {
  std::vector<bool> mask(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) {
    AF_ASSIGN_OR_RETURN(int ax, normalize_axis(a, rank));
    if (mask[static_cast<size_t>(ax)])
      return InvalidArgument("axis " + std::to_string(a) + " is listed twice in axes " + int_list_to_string(axes));
    mask[static_cast<size_t>(ax)] = true;
  }
  return mask;
}

Shape reduced_shape(const Shape& in, const std::vector<bool>& mask, bool keep_dims) {
  std::vector<int64_t> out;
  for (int i = 0; i < in.rank(); ++i) {
    if (!mask[static_cast<size_t>(i)]) out.push_back(in.dim(i));
    else if (keep_dims) out.push_back(1);
  }
  return Shape(std::move(out));
}

Status check_static_shape(const Shape& s) {
  if (s.unknown_rank()) return Status::OK();
  if (s.rank() > kMaxTensorRank)
    return InvalidArgument("shape of rank " + std::to_string(s.rank()) + " has more than " +
                           std::to_string(kMaxTensorRank) + " dimensions");
  int64_t p = 1;
  for (int64_t d : s.dims()) {
    if (d < -1) return InvalidArgument("shape " + int_list_to_string(s.dims()) + " has a negative dimension");
    if (d <= 0) continue;
    if (!checked_mul(p, d, &p) || p > kMaxTensorElements)
      return InvalidArgument("shape " + s.to_string() + " has more than 2^60 elements");
  }
  return Status::OK();
}

std::string int_list_to_string(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

// Function-local statics: op registration may run during another file's static initialisation.
const DTypes& numeric_types() {
  static const DTypes v = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64};
  return v;
}

const DTypes& floating_types() {
  static const DTypes v = {DType::kFloat32, DType::kFloat64};
  return v;
}

const DTypes& all_types() {
  static const DTypes v = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                           DType::kInt64,   DType::kUInt8,   DType::kBool};
  return v;
}

Status check_dtype(DType t, const DTypes& allowed, const std::string& what) {
  for (DType a : allowed)
    if (a == t) return Status::OK();
  std::string list;
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (i) list += (i + 1 == allowed.size()) ? " or " : ", ";
    list += dtype_name(allowed[i]);
  }
  return InvalidArgument("unsupported dtype " + std::string(dtype_name(t)) + (what.empty() ? "" : " for " + what) +
                         " (expects " + list + ")");
}

Status check_same_dtype(DType a, DType b) {
  if (a != b) return InvalidArgument(std::string("dtype mismatch ") + dtype_name(a) + " vs " + dtype_name(b));
  return Status::OK();
}

}  // namespace actorflow
