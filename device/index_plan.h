// Index plans for strided kernels: NumPy broadcasting of two operands and reductions over a
// set of axes, with adjacent dimensions of the same kind collapsed so the kernels do as
// little index arithmetic as possible. The plans are plain structs passed by value to CUDA
// kernels; the offset functions compile for host and device, so the host tests check exactly
// the arithmetic the GPU kernels run.
//
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "device/functors.h"  // AF_HOST_DEVICE
#include "tensor/types.h"

namespace actorflow {

// Most dimensions a plan holds after collapsing.
constexpr int kMaxPlanDims = 8;

// out[i] = f(a[a_offset(i)], b[b_offset(i)]) over the row-major output.
struct BroadcastPlan {
  int rank = 0;
  int64_t out[kMaxPlanDims] = {0};       // collapsed output dims
  int64_t a_stride[kMaxPlanDims] = {0};  // 0 where a is broadcast
  int64_t b_stride[kMaxPlanDims] = {0};
};

// The collapsed plan for a (op) b, both fully known. InvalidArgument "incompatible shapes
// [2,3] and [4]" (graph/shape_util.h broadcast_shapes); Unimplemented when more than
// kMaxPlanDims dimensions remain after collapsing.
Result<BroadcastPlan> make_broadcast_plan(const Shape& a, const Shape& b);

// The offsets into a and b of output element i.
AF_HOST_DEVICE inline void broadcast_offsets(const BroadcastPlan& p, int64_t i, int64_t* a_off, int64_t* b_off) {
  int64_t ai = 0, bi = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    const int64_t c = i % p.out[d];
    i /= p.out[d];
    ai += c * p.a_stride[d];
    bi += c * p.b_stride[d];
  }
  *a_off = ai;
  *b_off = bi;
}

// A reduction of a row-major tensor: output element o (row-major over the kept dims) combines
// the input elements at offset(o, r) for r in [0, num_reduce).
struct ReducePlan {
  int64_t num_out = 1;
  int64_t num_reduce = 1;
  int kept_rank = 0;
  int64_t kept_size[kMaxPlanDims] = {0};
  int64_t kept_stride[kMaxPlanDims] = {0};
  int red_rank = 0;
  int64_t red_size[kMaxPlanDims] = {0};
  int64_t red_stride[kMaxPlanDims] = {0};
};

// The collapsed plan for reducing `in` (fully known) over the dims where mask is true (a mask
// from graph/shape_util.h reduction_mask). Precondition: mask.size() == in.rank().
// Unimplemented beyond kMaxPlanDims groups.
Result<ReducePlan> make_reduce_plan(const Shape& in, const std::vector<bool>& mask);

// Input offset of element r of the reduction for output o.
AF_HOST_DEVICE inline int64_t reduce_offset(const ReducePlan& p, int64_t o, int64_t r) {
  int64_t off = 0;
  for (int d = p.kept_rank - 1; d >= 0; --d) {
    off += (o % p.kept_size[d]) * p.kept_stride[d];
    o /= p.kept_size[d];
  }
  for (int d = p.red_rank - 1; d >= 0; --d) {
    off += (r % p.red_size[d]) * p.red_stride[d];
    r /= p.red_size[d];
  }
  return off;
}

// A permutation of a row-major tensor: out[i] = in[transpose_offset(p, i)]. Size-1 dims are
// dropped and output axes that are consecutive input axes merged.
struct TransposePlan {
  int rank = 0;
  int64_t out[kMaxPlanDims] = {0};        // collapsed output dims
  int64_t in_stride[kMaxPlanDims] = {0};  // input stride of each collapsed output dim
};

// The plan for transposing `in` (fully known) by `perm` (output axis -> input axis).
// InvalidArgument when perm is not a permutation of 0..rank-1; Unimplemented beyond
// kMaxPlanDims collapsed dims.
Result<TransposePlan> make_transpose_plan(const Shape& in, const std::vector<int64_t>& perm);

AF_HOST_DEVICE inline int64_t transpose_offset(const TransposePlan& p, int64_t i) {
  int64_t off = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    off += (i % p.out[d]) * p.in_stride[d];
    i /= p.out[d];
  }
  return off;
}

}  // namespace actorflow
