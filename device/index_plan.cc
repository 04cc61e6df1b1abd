#include "device/index_plan.h"

#include <string>

#include "graph/shape_util.h"

namespace actorflow {

Result<BroadcastPlan> make_broadcast_plan(const Shape& a, const Shape& b) {
  AF_ASSIGN_OR_RETURN(Shape out, broadcast_shapes(a, b));
  const int rank = out.rank();
  // Per output dim: size and whether a / b are broadcast along it. Dims of size 1 vanish.
  struct D {
    int64_t size;
    bool a_bc, b_bc;
  };
  std::vector<D> ds;
  for (int i = 0; i < rank; ++i) {
    const int64_t n = out.dim(i);
    if (n == 1) continue;
    const int ia = a.rank() - rank + i, ib = b.rank() - rank + i;
    const bool a_bc = ia < 0 || a.dim(ia) == 1;
    const bool b_bc = ib < 0 || b.dim(ib) == 1;
    if (!ds.empty() && ds.back().a_bc == a_bc && ds.back().b_bc == b_bc)
      ds.back().size *= n;  // same kind as the previous dim: one linear dim
    else
      ds.push_back({n, a_bc, b_bc});
  }
  if (static_cast<int>(ds.size()) > kMaxPlanDims)
    return Unimplemented("broadcasting " + a.to_string() + " with " + b.to_string() + " needs " +
                         std::to_string(ds.size()) + " strided dimensions; at most " + std::to_string(kMaxPlanDims) +
                         " are supported");
  BroadcastPlan p;
  p.rank = static_cast<int>(ds.size());
  int64_t sa = 1, sb = 1;
  for (int d = p.rank - 1; d >= 0; --d) {
    const D& x = ds[static_cast<size_t>(d)];
    p.out[d] = x.size;
    p.a_stride[d] = x.a_bc ? 0 : sa;
    p.b_stride[d] = x.b_bc ? 0 : sb;
    if (!x.a_bc) sa *= x.size;
    if (!x.b_bc) sb *= x.size;
  }
  return p;
}

Result<ReducePlan> make_reduce_plan(const Shape& in, const std::vector<bool>& mask) {
  // Row-major strides, then groups of adjacent dims of the same kind (size-1 dims vanish).
  const int rank = in.rank();
  std::vector<int64_t> stride(static_cast<size_t>(rank));
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    stride[static_cast<size_t>(i)] = s;
    s *= in.dim(i);
  }
  struct G {
    int64_t size, stride;
    bool reduced;
  };
  std::vector<G> gs;
  for (int i = 0; i < rank; ++i) {
    const int64_t n = in.dim(i);
    const bool red = mask[static_cast<size_t>(i)];
    if (n == 1) continue;
    if (!gs.empty() && gs.back().reduced == red) {
      // Contiguous with the previous dim of the same kind: merge (the stride of the merged
      // group is that of its innermost dim).
      gs.back().size *= n;
      gs.back().stride = stride[static_cast<size_t>(i)];
    } else {
      gs.push_back({n, stride[static_cast<size_t>(i)], red});
    }
  }
  ReducePlan p;
  for (const G& g : gs) {
    if (g.reduced) {
      if (p.red_rank == kMaxPlanDims) return Unimplemented("reduction over too many separate axis groups");
      p.red_size[p.red_rank] = g.size;
      p.red_stride[p.red_rank] = g.stride;
      p.red_rank++;
      p.num_reduce *= g.size;
    } else {
      if (p.kept_rank == kMaxPlanDims) return Unimplemented("reduction keeping too many separate axis groups");
      p.kept_size[p.kept_rank] = g.size;
      p.kept_stride[p.kept_rank] = g.stride;
      p.kept_rank++;
      p.num_out *= g.size;
    }
  }
  // A zero-sized dim makes num_out or num_reduce 0; kernels then write identities or nothing.
  return p;
}

Result<TransposePlan> make_transpose_plan(const Shape& in, const std::vector<int64_t>& perm) {
  const int rank = in.rank();
  std::string ps = "[";
  for (size_t i = 0; i < perm.size(); ++i) ps += (i ? "," : "") + std::to_string(perm[i]);
  ps += "]";
  if (static_cast<int>(perm.size()) != rank)
    return InvalidArgument("perm " + ps + " has " + std::to_string(perm.size()) + " entries but the input " +
                           in.to_string() + " has rank " + std::to_string(rank));
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[static_cast<size_t>(p)])
      return InvalidArgument("perm " + ps + " is not a permutation of 0.." + std::to_string(rank - 1));
    seen[static_cast<size_t>(p)] = true;
  }
  std::vector<int64_t> stride(static_cast<size_t>(rank));
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    stride[static_cast<size_t>(i)] = s;
    s *= in.dim(i);
  }
  // Output axes in order, skipping size-1 input dims; merge an axis into the previous one
  // when it is the next non-trivial input axis after it (then the two are contiguous).
  auto next_nontrivial = [&](int64_t a) {
    int64_t b = a + 1;
    while (b < rank && in.dim(static_cast<int>(b)) == 1) ++b;
    return b;
  };
  struct D {
    int64_t size, stride, last_axis;
  };
  std::vector<D> ds;
  for (int64_t a : perm) {
    const int64_t n = in.dim(static_cast<int>(a));
    if (n == 1) continue;
    if (!ds.empty() && next_nontrivial(ds.back().last_axis) == a) {
      ds.back().size *= n;
      ds.back().stride = stride[static_cast<size_t>(a)];
      ds.back().last_axis = a;
    } else {
      ds.push_back({n, stride[static_cast<size_t>(a)], a});
    }
  }
  if (static_cast<int>(ds.size()) > kMaxPlanDims)
    return Unimplemented("transposing " + in.to_string() + " by " + ps + " needs " + std::to_string(ds.size()) +
                         " strided dimensions; at most " + std::to_string(kMaxPlanDims) + " are supported");
  TransposePlan p;
  p.rank = static_cast<int>(ds.size());
  for (int d = 0; d < p.rank; ++d) {
    p.out[d] = ds[static_cast<size_t>(d)].size;
    p.in_stride[d] = ds[static_cast<size_t>(d)].stride;
  }
  return p;
}

}  // namespace actorflow
