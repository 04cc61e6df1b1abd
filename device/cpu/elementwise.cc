#include "device/cpu/elementwise.h"

namespace actorflow {
namespace cpu {

BroadcastPlan make_broadcast_plan(const Shape& a, const Shape& b, const Shape& out) {
  const int r = out.rank();
  // Row-major strides of an input, aligned to the output's dims; 0 where it broadcasts.
  auto aligned_strides = [r](const Shape& s) {
    std::vector<int64_t> st(static_cast<size_t>(r), 0);
    int64_t acc = 1;
    for (int i = s.rank() - 1; i >= 0; --i) {
      const int o = r - s.rank() + i;
      st[static_cast<size_t>(o)] = s.dim(i) == 1 ? 0 : acc;
      acc *= s.dim(i);
    }
    return st;
  };
  const auto sa = aligned_strides(a), sb = aligned_strides(b);
  BroadcastPlan p;
  for (int i = 0; i < r; ++i) {
    const int64_t d = out.dim(i);
    if (d == 1) continue;
    const int64_t da = sa[static_cast<size_t>(i)], db = sb[static_cast<size_t>(i)];
    if (!p.dims.empty() && p.stride_a.back() == da * d && p.stride_b.back() == db * d) {
      // The previous (outer) dim continues linearly into this one for both inputs: merge.
      p.dims.back() *= d;
      p.stride_a.back() = da;
      p.stride_b.back() = db;
      continue;
    }
    p.dims.push_back(d);
    p.stride_a.push_back(da);
    p.stride_b.push_back(db);
  }
  return p;
}

std::vector<std::pair<int64_t, bool>> reduction_groups(const std::vector<int64_t>& dims,
                                                       const std::vector<bool>& reduce) {
  std::vector<std::pair<int64_t, bool>> g;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    if (!g.empty() && g.back().second == reduce[i]) g.back().first *= dims[i];
    else g.emplace_back(dims[i], reduce[i]);
  }
  return g;
}

}  // namespace cpu
}  // namespace actorflow
