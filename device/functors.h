// Per-element functors shared by the CPU kernels (device/cpu/) and the CUDA kernels
// (device/cuda/). Each is a stateless struct whose call operator is a template over the
// element type and compiles for host and device (AF_HOST_DEVICE). Keep this header to
// per-element math: no loops, no allocation, no CAF, no oneDNN, no std:: library calls that
// are unavailable in device code (use the af_* wrappers below).
//
// Thread-safety: all functors are stateless and may be used concurrently.
#pragma once

#include <math.h>

#include <cstdint>

#ifdef __CUDACC__
#define AF_HOST_DEVICE __host__ __device__
#else
#define AF_HOST_DEVICE
#endif

namespace actorflow {
namespace functors {

// ---- math wrappers that resolve to the right host/device function per type -------------
AF_HOST_DEVICE inline float af_log(float x) { return ::logf(x); }
AF_HOST_DEVICE inline double af_log(double x) { return ::log(x); }
AF_HOST_DEVICE inline float af_exp(float x) { return ::expf(x); }
AF_HOST_DEVICE inline double af_exp(double x) { return ::exp(x); }
AF_HOST_DEVICE inline float af_sqrt(float x) { return ::sqrtf(x); }
AF_HOST_DEVICE inline double af_sqrt(double x) { return ::sqrt(x); }

// True for NaN; false (and free) for integers.
template <class T>
AF_HOST_DEVICE inline bool af_isnan(T x) { return x != x; }  // NOLINT: NaN test

// The identity of max: -infinity for floating types, the lowest value for integers.
template <class T> AF_HOST_DEVICE inline T af_lowest();
template <> AF_HOST_DEVICE inline float af_lowest<float>() { return -INFINITY; }
template <> AF_HOST_DEVICE inline double af_lowest<double>() { return -static_cast<double>(INFINITY); }
template <> AF_HOST_DEVICE inline int32_t af_lowest<int32_t>() { return INT32_MIN; }
template <> AF_HOST_DEVICE inline int64_t af_lowest<int64_t>() { return INT64_MIN; }
template <> AF_HOST_DEVICE inline uint8_t af_lowest<uint8_t>() { return 0; }

// Division that never traps: truncates toward zero for integers like C++; integer x/0 gives
// 0 (the CPU kernel reports division by zero before computing) and INT_MIN/-1 wraps.
template <class T>
AF_HOST_DEVICE inline T af_div(T a, T b) { return a / b; }
template <> AF_HOST_DEVICE inline int32_t af_div<int32_t>(int32_t a, int32_t b) {
  return b == 0 ? 0 : b == -1 ? static_cast<int32_t>(0u - static_cast<uint32_t>(a)) : a / b;
}
template <> AF_HOST_DEVICE inline int64_t af_div<int64_t>(int64_t a, int64_t b) {
  return b == 0 ? 0 : b == -1 ? static_cast<int64_t>(0ull - static_cast<uint64_t>(a)) : a / b;
}

// ---- binary ------------------------------------------------------------------------------
struct AddF {
  template <class T> AF_HOST_DEVICE T operator()(T a, T b) const { return a + b; }
};
struct SubF {
  template <class T> AF_HOST_DEVICE T operator()(T a, T b) const { return a - b; }
};
struct MulF {
  template <class T> AF_HOST_DEVICE T operator()(T a, T b) const { return a * b; }
};
struct DivF {
  template <class T> AF_HOST_DEVICE T operator()(T a, T b) const { return af_div(a, b); }
};
// max(a, b); a NaN in either operand gives NaN (as TensorFlow's Maximum does).
struct MaximumF {
  template <class T> AF_HOST_DEVICE T operator()(T a, T b) const { return (a > b || af_isnan(a)) ? a : b; }
};
struct EqualF {
  template <class T> AF_HOST_DEVICE bool operator()(T a, T b) const { return a == b; }
};
struct GreaterF {
  template <class T> AF_HOST_DEVICE bool operator()(T a, T b) const { return a > b; }
};

// ---- unary -------------------------------------------------------------------------------
struct NegF {
  template <class T> AF_HOST_DEVICE T operator()(T a) const { return -a; }
};
struct SquareF {
  template <class T> AF_HOST_DEVICE T operator()(T a) const { return a * a; }
};
struct LogF {
  template <class T> AF_HOST_DEVICE T operator()(T a) const { return af_log(a); }
};
struct ExpF {
  template <class T> AF_HOST_DEVICE T operator()(T a) const { return af_exp(a); }
};
struct SqrtF {
  template <class T> AF_HOST_DEVICE T operator()(T a) const { return af_sqrt(a); }
};
// static_cast to To: float -> int truncates toward zero, x -> bool is x != 0.
template <class To>
struct CastF {
  template <class From> AF_HOST_DEVICE To operator()(From a) const { return static_cast<To>(a); }
};

// ---- ternary -----------------------------------------------------------------------------
struct SelectF {
  template <class T> AF_HOST_DEVICE T operator()(bool c, T a, T b) const { return c ? a : b; }
};

// ---- reducers: identity() and an associative, commutative combine ------------------------
struct SumReducer {
  template <class T> AF_HOST_DEVICE static T identity() { return T(0); }
  template <class T> AF_HOST_DEVICE T operator()(T a, T b) const { return a + b; }
};
struct MaxReducer {
  template <class T> AF_HOST_DEVICE static T identity() { return af_lowest<T>(); }
  template <class T> AF_HOST_DEVICE T operator()(T a, T b) const { return MaximumF()(a, b); }
};

}  // namespace functors
}  // namespace actorflow
