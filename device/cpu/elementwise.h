// Loop building blocks for the CPU elementwise, reduction and array kernels.
//
// The loops are written so that GCC/Clang auto-vectorise them at -O2: the work is split into
// blocks of a compile-time size (which the cheap vectoriser cost model accepts) plus a scalar
// tail, pointers are __restrict, and the per-element work is a functor from device/functors.h.
// Everything here is header-only and stateless; thread-safe.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/status.h"
#include "device/functors.h"
#include "device/kernel.h"
#include "tensor/types.h"

namespace actorflow {
namespace cpu {

// Elements per vectorised block (a multiple of every SIMD width we target).
constexpr int64_t kBlock = 32;

// ---- dtype dispatch ----------------------------------------------------------------------
// The element types a kernel supports, for dispatch().
template <class... Ts> struct TypeList {};
using NumericTypes = TypeList<float, double, int32_t, int64_t>;
using FloatTypes = TypeList<float, double>;
using AllTypes = TypeList<float, double, int32_t, int64_t, uint8_t, bool>;

// Calls f(T{}) for the T in `Ts` whose DType is `t` and returns its Status; InvalidArgument
// "<Op> '<name>': unsupported dtype bool" when `t` is not in the list.
template <class... Ts, class F>
Status dispatch(TypeList<Ts...>, DType t, const OpKernelContext& ctx, F&& f) {
  Status s = ctx.invalid_argument(std::string("unsupported dtype ") + dtype_name(t));
  (void)((DTypeOf<Ts>::value == t ? (s = f(Ts{}), true) : false) || ...);
  return s;
}

// ---- flat loops --------------------------------------------------------------------------
// o[i] = f(a[i])
template <class T, class O, class F>
inline void unary_loop(const T* __restrict a, O* __restrict o, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    for (int64_t j = 0; j < kBlock; ++j) o[i + j] = f(a[i + j]);
  for (; i < n; ++i) o[i] = f(a[i]);
}

// o[i] = f(a[i], b[i])
template <class T, class O, class F>
inline void binary_loop(const T* __restrict a, const T* __restrict b, O* __restrict o, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    for (int64_t j = 0; j < kBlock; ++j) o[i + j] = f(a[i + j], b[i + j]);
  for (; i < n; ++i) o[i] = f(a[i], b[i]);
}

// o[i] = f(a, b[i])
template <class T, class O, class F>
inline void binary_loop_scalar_a(T a, const T* __restrict b, O* __restrict o, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    for (int64_t j = 0; j < kBlock; ++j) o[i + j] = f(a, b[i + j]);
  for (; i < n; ++i) o[i] = f(a, b[i]);
}

// o[i] = f(a[i], b)
template <class T, class O, class F>
inline void binary_loop_scalar_b(const T* __restrict a, T b, O* __restrict o, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    for (int64_t j = 0; j < kBlock; ++j) o[i + j] = f(a[i + j], b);
  for (; i < n; ++i) o[i] = f(a[i], b);
}

// o[i] = f(o[i], a[i])
template <class T, class F>
inline void accumulate_loop(T* __restrict o, const T* __restrict a, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    for (int64_t j = 0; j < kBlock; ++j) o[i + j] = f(o[i + j], a[i + j]);
  for (; i < n; ++i) o[i] = f(o[i], a[i]);
}

// o[i] = f(o[i])
template <class T, class F>
inline void inplace_loop(T* __restrict o, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    for (int64_t j = 0; j < kBlock; ++j) o[i + j] = f(o[i + j]);
  for (; i < n; ++i) o[i] = f(o[i]);
}

// o[i] = v
template <class T>
inline void fill_loop(T* __restrict o, int64_t n, T v) {
  for (int64_t i = 0; i < n; ++i) o[i] = v;
}

// ---- broadcasting ------------------------------------------------------------------------
// A broadcast of two inputs to an output shape, with size-1 output dims dropped and adjacent
// dims merged wherever both inputs stay linear across them. Strides are in elements; a
// stride of 0 repeats the input along that dim. The innermost stride is 0 or 1.
struct BroadcastPlan {
  std::vector<int64_t> dims;
  std::vector<int64_t> stride_a, stride_b;
};

// Precondition: `out` is the broadcast of `a` and `b` (all fully defined).
BroadcastPlan make_broadcast_plan(const Shape& a, const Shape& b, const Shape& out);

// o = f(a, b) over a plan from make_broadcast_plan (o is contiguous in the output shape).
template <class T, class O, class F>
void broadcast_binary(const T* a, const T* b, O* o, const BroadcastPlan& p, F f) {
  const int r = static_cast<int>(p.dims.size());
  if (r == 0) {
    o[0] = f(a[0], b[0]);
    return;
  }
  const int64_t inner = p.dims[static_cast<size_t>(r - 1)];
  const bool ia = p.stride_a[static_cast<size_t>(r - 1)] != 0;
  const bool ib = p.stride_b[static_cast<size_t>(r - 1)] != 0;
  int64_t outer = 1;
  for (int d = 0; d < r - 1; ++d) outer *= p.dims[static_cast<size_t>(d)];
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t oa = 0, ob = 0;
  for (int64_t k = 0; k < outer; ++k) {
    O* op = o + k * inner;
    if (ia && ib) binary_loop(a + oa, b + ob, op, inner, f);
    else if (ib) binary_loop_scalar_a(a[oa], b + ob, op, inner, f);
    else if (ia) binary_loop_scalar_b(a + oa, b[ob], op, inner, f);
    else fill_loop(op, inner, static_cast<O>(f(a[oa], b[ob])));
    for (int d = r - 2; d >= 0; --d) {
      const size_t du = static_cast<size_t>(d);
      if (++idx[du] < p.dims[du]) {
        oa += p.stride_a[du];
        ob += p.stride_b[du];
        break;
      }
      oa -= p.stride_a[du] * (p.dims[du] - 1);
      ob -= p.stride_b[du] * (p.dims[du] - 1);
      idx[du] = 0;
    }
  }
}

// ---- reductions --------------------------------------------------------------------------
// Combines n contiguous values with reducer r, using kBlock independent accumulators so the
// loop vectorises (the summation order therefore differs from a left fold).
template <class T, class R>
inline T reduce_contiguous(const T* __restrict x, int64_t n, R r) {
  T acc[kBlock];
  for (int64_t j = 0; j < kBlock; ++j) acc[j] = R::template identity<T>();
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    for (int64_t j = 0; j < kBlock; ++j) acc[j] = r(acc[j], x[i + j]);
  T s = R::template identity<T>();
  for (; i < n; ++i) s = r(s, x[i]);
  for (int64_t w = kBlock / 2; w >= 1; w /= 2)  // pairwise tree over the lanes
    for (int64_t j = 0; j < w; ++j) acc[j] = r(acc[j], acc[j + w]);
  return r(acc[0], s);
}

// x viewed as [A, N, B]; out[a, b] = reduce over n of x[a, n, b]. out has A*B elements and
// does not alias x.
template <class T, class R>
void reduce_middle(const T* x, T* out, int64_t A, int64_t N, int64_t B, R r) {
  if (B == 1) {
    for (int64_t a = 0; a < A; ++a) out[a] = reduce_contiguous(x + a * N, N, r);
    return;
  }
  for (int64_t a = 0; a < A; ++a) {
    T* o = out + a * B;
    if (N == 0) {
      fill_loop(o, B, R::template identity<T>());
      continue;
    }
    const T* xa = x + a * N * B;
    std::memcpy(o, xa, static_cast<size_t>(B) * sizeof(T));
    for (int64_t n = 1; n < N; ++n) accumulate_loop(o, xa + n * B, B, r);
  }
}

// The input shape `dims` with mask `reduce` simplified: size-1 dims dropped and adjacent dims
// of the same kind merged. Returns (size, reduced) groups, outermost first.
std::vector<std::pair<int64_t, bool>> reduction_groups(const std::vector<int64_t>& dims,
                                                       const std::vector<bool>& reduce);

// Reduces x (shape `dims`, fully known) over the dims where `reduce_mask` is true, writing
// the kept dims in order to `out` (which holds their product). Innermost and outermost
// reductions take one contiguous pass; other patterns one pass per reduced group.
template <class T, class R>
void reduce(const T* x, const std::vector<int64_t>& dims, const std::vector<bool>& reduce_mask, T* out, R r) {
  int64_t out_n = 1, in_n = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    in_n *= dims[i];
    if (!reduce_mask[i]) out_n *= dims[i];
  }
  if (in_n == 0) {
    fill_loop(out, out_n, R::template identity<T>());
    return;
  }
  auto groups = reduction_groups(dims, reduce_mask);
  int num_reduced = 0;
  for (const auto& g : groups) num_reduced += g.second ? 1 : 0;
  if (num_reduced == 0) {
    std::memcpy(out, x, static_cast<size_t>(in_n) * sizeof(T));
    return;
  }
  // One pass per reduced group, innermost first; intermediates in host vectors.
  std::vector<T> buf[2];
  const T* src = x;
  int pass = 0;
  for (int gi = static_cast<int>(groups.size()) - 1; gi >= 0; --gi) {
    if (!groups[static_cast<size_t>(gi)].second) continue;
    int64_t A = 1, B = 1;
    for (int k = 0; k < gi; ++k) A *= groups[static_cast<size_t>(k)].first;
    for (size_t k = static_cast<size_t>(gi) + 1; k < groups.size(); ++k) B *= groups[k].first;
    const int64_t N = groups[static_cast<size_t>(gi)].first;
    ++pass;
    T* dst;
    if (pass == num_reduced) {
      dst = out;
    } else {
      auto& v = buf[pass % 2];
      v.resize(static_cast<size_t>(A * B));
      dst = v.data();
    }
    reduce_middle(src, dst, A, N, B, r);
    src = dst;
    groups[static_cast<size_t>(gi)].first = 1;  // reduced away; later passes see size 1
  }
}

}  // namespace cpu
}  // namespace actorflow
