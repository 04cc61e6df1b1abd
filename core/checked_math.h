// Overflow-checked integer arithmetic: the one place where sizes, shapes, offsets and strides
// computed from numbers a peer chose (shapes, attributes, index tensors) are multiplied and added.
//
// Every function is pure, header-only and thread-safe. The checked_* forms never invoke undefined
// behaviour: they return false (and leave *out unspecified) when the exact result does not fit the
// result type, true with the exact result otherwise. The *_or_error forms return the same as a
// Result: InvalidArgument "<what>: <a> * <b> overflows int64" on overflow.
//
// Rules for callers (docs/security.md, "Checked arithmetic"): any product or sum of two numbers
// of which at least one comes from outside (a tensor's dims, an attribute, an input's values) goes
// through these helpers, unless both are already bounded by a validated tensor (a product of dims
// of one valid tensor never overflows: Shape::checked_num_elements).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "core/status.h"

namespace actorflow {

// *out = a * b; false when the product does not fit in int64.
inline bool checked_mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
// *out = a + b; false when the sum does not fit in int64.
inline bool checked_add(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }
// *out = a - b; false when the difference does not fit in int64.
inline bool checked_sub(int64_t a, int64_t b, int64_t* out) { return !__builtin_sub_overflow(a, b, out); }
// *out = a * b in size_t (byte counts); false on overflow.
inline bool checked_mul_size(size_t a, size_t b, size_t* out) { return !__builtin_mul_overflow(a, b, out); }
// *out = a + b in size_t (byte counts); false on overflow.
inline bool checked_add_size(size_t a, size_t b, size_t* out) { return !__builtin_add_overflow(a, b, out); }

// The product of dims[0..n), every one >= 0: 0 when any dim is 0 (however large the others),
// else the exact product. False when a dim is negative or the product of the non-zero dims does
// not fit in int64.
inline bool checked_dims_product(const int64_t* dims, size_t n, int64_t* out) {
  bool zero = false;
  for (size_t i = 0; i < n; ++i) {
    if (dims[i] < 0) return false;
    zero = zero || dims[i] == 0;
  }
  if (zero) {
    *out = 0;
    return true;
  }
  int64_t p = 1;
  for (size_t i = 0; i < n; ++i)
    if (!checked_mul(p, dims[i], &p)) return false;
  *out = p;
  return true;
}

// a * b, or InvalidArgument naming `what` when it overflows int64.
inline Result<int64_t> mul_or_error(int64_t a, int64_t b, const std::string& what) {
  int64_t r;
  if (!checked_mul(a, b, &r))
    return InvalidArgument(what + ": " + std::to_string(a) + " * " + std::to_string(b) + " overflows int64");
  return r;
}

// a + b, or InvalidArgument naming `what` when it overflows int64.
inline Result<int64_t> add_or_error(int64_t a, int64_t b, const std::string& what) {
  int64_t r;
  if (!checked_add(a, b, &r))
    return InvalidArgument(what + ": " + std::to_string(a) + " + " + std::to_string(b) + " overflows int64");
  return r;
}

// Rounds `n` up to a multiple of `align` (a power of two, > 0); false when that overflows.
inline bool checked_round_up(size_t n, size_t align, size_t* out) {
  size_t t;
  if (!checked_add_size(n, align - 1, &t)) return false;
  *out = t & ~(align - 1);
  return true;
}

// `v` converted to arithmetic type T without undefined behaviour: to an integer type NaN gives 0
// and values outside T's range the nearest end of it (C++ leaves those conversions undefined);
// to bool v != 0; to a floating type the usual rounding.
template <class T>
inline T saturating_cast(double v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else if constexpr (std::is_integral_v<T>) {
    if (v != v) return T(0);  // NOLINT: NaN test
    // The bounds as doubles: lowest() is exact; max() rounds up to 2^k, so >= means "beyond".
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return static_cast<T>(v);
  }
}

}  // namespace actorflow
