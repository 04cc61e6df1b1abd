// Shape helpers shared by the shape functions (graph/ops_*.cc) and the kernels (device/):
// NumPy broadcasting, merging of partially known shapes, reduction axes.
//
// All functions are pure; thread-safe. Error messages carry no op name: callers prefix
// "<Op> '<name>': " (the shape-function machinery and OpKernelContext::error do).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/graph.h"
#include "tensor/types.h"

namespace actorflow {

// The NumPy broadcast of `a` and `b`: dims aligned from the right; equal dims stay, a 1
// stretches to the other. Unknown dims (-1) broadcast optimistically (an unknown against 1
// stays unknown, against n > 1 becomes n; the kernel checks at run time). An unknown rank
// gives Shape::unknown(). InvalidArgument "incompatible shapes [2,3] and [4]" otherwise.
Result<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// The most specific shape compatible with both `a` and `b` (known dims win, an unknown rank
// takes the other's). InvalidArgument "shapes [2,3] and [3] are not compatible" otherwise.
Result<Shape> merge_shapes(const Shape& a, const Shape& b);

// Normalises reduction `axes` (negative counts from the end; empty = all) for an input of
// `rank`: returns a per-dimension mask, true where reduced. InvalidArgument
// "axis 2 is out of range for an input of rank 2" or "axis 1 is listed twice".
Result<std::vector<bool>> reduction_mask(const std::vector<int64_t>& axes, int rank);

// `in` with the masked dims removed (or set to 1 when keep_dims). Precondition: known rank,
// mask.size() == in.rank().
Shape reduced_shape(const Shape& in, const std::vector<bool>& mask, bool keep_dims);

// Normalises a single axis for `rank` (negative counts from the end); InvalidArgument
// "axis 3 is out of range for an input of rank 2" when it is not in [-rank, rank).
Result<int> normalize_axis(int64_t axis, int rank);

// OK when `s` (maybe partially known) can describe a tensor: an unknown rank, or a rank of at
// most kMaxTensorRank whose dims are all >= -1 (-1 = unknown) and whose known non-zero dims
// multiply to at most kMaxTensorElements. InvalidArgument "shape [4611686018427387905,4] has more
// than 2^60 elements" otherwise. Every output shape a shape function declares passes this
// (graph/scope.cc infer_node_shapes), and so does every shape a GraphDef declares.
Status check_static_shape(const Shape& s);

// The most outputs one node may have (Split's num_split, DynamicPartition's num_partitions).
constexpr int64_t kMaxOpOutputs = 1 << 14;

// "[1,-1,3]": a list of ints as written in attributes (unknown dims keep their -1).
std::string int_list_to_string(const std::vector<int64_t>& v);

// ---- dtype and attribute checks for shape functions -------------------------------------
using DTypes = std::vector<DType>;
// float32, float64, int32, int64.
const DTypes& numeric_types();
// float32, float64.
const DTypes& floating_types();
// Every valid dtype.
const DTypes& all_types();

// OK when `t` is in `allowed`, else InvalidArgument
// "unsupported dtype bool (expects float32, float64, int32 or int64)"; `what` (e.g. "DstT")
// is named after the dtype when given.
Status check_dtype(DType t, const DTypes& allowed, const std::string& what = "");
// OK when a == b, else InvalidArgument "dtype mismatch float32 vs int32".
Status check_same_dtype(DType a, DType b);

// Value of attribute `name`; `dflt` when absent; InvalidArgument when present with another type.
template <typename T>
Result<T> attr_or(const AttrMap& m, const std::string& name, T dflt) {
  if (!m.has(name)) return dflt;
  return m.get<T>(name);
}

}  // namespace actorflow
