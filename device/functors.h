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
#include <cstring>
#include <type_traits>

#ifdef __CUDACC__
#define AF_HOST_DEVICE __host__ __device__
#else
#define AF_HOST_DEVICE
#endif

namespace actorflow {
namespace functors {

// ---- float exp/log for host loops -------------------------------------------------------
// libm calls keep a loop scalar; these are straight-line (branch-free) so loops over them
// vectorise. Cody-Waite range reduction plus Cephes minimax polynomials: within about 1 ulp
// of the correctly rounded result over the whole float range (tests/ops_math_test.cc
// checks a sweep), with IEEE special values (exp: +-inf, NaN, denormal results; log: 0,
// negatives, denormal inputs, +inf, NaN). Host only: device code uses the CUDA intrinsics.
namespace detail {

inline float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

inline float exp_f32(float x) {
  const bool nan = x != x;  // NOLINT: NaN test
  float xc = x > 88.8f ? 88.8f : x;  // beyond: +inf / 0 come out of the scaling below
  xc = xc < -104.f ? -104.f : xc;
  const float kShift = 12582912.f;  // 1.5 * 2^23: adding then subtracting rounds to nearest
  const float n = (xc * 1.44269504088896341f + kShift) - kShift;
  float r = xc - n * 0.693359375f;  // ln 2 split in a high part exact in float and a low part
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r * r + r + 1.0f;
  // 2^n as two normal factors, so results down to denormals and up to +inf are exact scalings.
  const int32_t k = static_cast<int32_t>(n);
  const int32_t k1 = k / 2, k2 = k - k / 2;
  const float s1 = bits_to_float(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = bits_to_float(static_cast<uint32_t>(k2 + 127) << 23);
  const float y = p * s1 * s2;
  return nan ? x : y;
}

inline float log_f32(float x) {
  // Classification uses integer tests on the bits: they never trap, so the compiler may
  // evaluate every path and select, which keeps loops over this function vectorisable.
  const uint32_t bx = float_to_bits(x);
  const uint32_t ax = bx & 0x7fffffffu;
  const bool tiny = ax < 0x00800000u;             // zero or denormal
  const float xs = x * (tiny ? 8388608.f : 1.f);  // 2^23 lifts denormals into the normal range
  const uint32_t b = float_to_bits(xs);
  int32_t e = static_cast<int32_t>((b >> 23) & 0xff) - (tiny ? 149 : 126);
  const uint32_t mant = b & 0x007fffffu;
  const bool small = mant < 0x003504f3u;          // mantissa m < sqrt(1/2)
  float m = bits_to_float(mant | 0x3f000000u);    // m in [0.5, 1), x = m * 2^e
  e = e - (small ? 1 : 0);
  m = m - 1.f + (small ? m : 0.f);                // m - 1 in [sqrt(1/2) - 1, sqrt(2) - 1)
  const float z = m * m;
  float y = 7.0376836292E-2f;
  y = y * m - 1.1514610310E-1f;
  y = y * m + 1.1676998740E-1f;
  y = y * m - 1.2420140846E-1f;
  y = y * m + 1.4249322787E-1f;
  y = y * m - 1.6668057665E-1f;
  y = y * m + 2.0000714765E-1f;
  y = y * m - 2.4999993993E-1f;
  y = y * m + 3.3333331174E-1f;
  y = y * m * z;
  const float fe = static_cast<float>(e);
  y = y + fe * -2.12194440e-4f;
  y = y - 0.5f * z;
  float res = m + y;
  res = res + fe * 0.693359375f;
  // Special inputs merged with bit masks (a chain of selects defeats the vectoriser):
  // log(0) = -inf, log(x < 0) = NaN, log(+inf) = +inf, log(NaN) = NaN.
  const uint32_t m_zero = 0u - static_cast<uint32_t>(ax == 0);
  const uint32_t neg = (bx >> 31) & static_cast<uint32_t>(ax != 0);
  const uint32_t m_neg = 0u - neg;
  const uint32_t m_keep = 0u - (static_cast<uint32_t>(ax >= 0x7f800000u) & (neg ^ 1u));
  uint32_t rb = float_to_bits(res);
  rb = (rb & ~m_zero) | (0xff800000u & m_zero);
  rb = (rb & ~m_neg) | (0x7fc00000u & m_neg);
  rb = (rb & ~m_keep) | (bx & m_keep);
  return bits_to_float(rb);
}

}  // namespace detail

// ---- math wrappers that resolve to the right host/device function per type -------------
AF_HOST_DEVICE inline float af_log(float x) {
#ifdef __CUDA_ARCH__
  return ::logf(x);
#else
  return detail::log_f32(x);
#endif
}
AF_HOST_DEVICE inline float af_exp(float x) {
#ifdef __CUDA_ARCH__
  return ::expf(x);
#else
  return detail::exp_f32(x);
#endif
}
AF_HOST_DEVICE inline double af_log(double x) { return ::log(x); }
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

// The largest value of an integer type (float -> integer casts saturate to it).
template <class T> AF_HOST_DEVICE inline T af_highest();
template <> AF_HOST_DEVICE inline int32_t af_highest<int32_t>() { return INT32_MAX; }
template <> AF_HOST_DEVICE inline int64_t af_highest<int64_t>() { return INT64_MAX; }
template <> AF_HOST_DEVICE inline uint8_t af_highest<uint8_t>() { return 255; }

// Signed integer arithmetic wraps (two's complement), as TensorFlow's integer ops do in
// practice; C++ leaves a signed overflow undefined, so it is done in the unsigned type. Other
// types compute as written.
template <class T>
struct WrapsOnOverflow : std::integral_constant<bool, std::is_integral<T>::value && std::is_signed<T>::value> {};
template <class T>
AF_HOST_DEVICE inline T af_add(T a, T b) {
  if constexpr (WrapsOnOverflow<T>::value) {
    using U = typename std::make_unsigned<T>::type;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <class T>
AF_HOST_DEVICE inline T af_sub(T a, T b) {
  if constexpr (WrapsOnOverflow<T>::value) {
    using U = typename std::make_unsigned<T>::type;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return a - b;
  }
}
template <class T>
AF_HOST_DEVICE inline T af_mul(T a, T b) {
  if constexpr (WrapsOnOverflow<T>::value) {
    using U = typename std::make_unsigned<T>::type;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

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
  template <class T> AF_HOST_DEVICE T operator()(T a, T b) const { return af_add(a, b); }
};
struct SubF {
  template <class T> AF_HOST_DEVICE T operator()(T a, T b) const { return af_sub(a, b); }
};
struct MulF {
  template <class T> AF_HOST_DEVICE T operator()(T a, T b) const { return af_mul(a, b); }
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
  template <class T> AF_HOST_DEVICE T operator()(T a) const { return af_sub(T(0), a); }
};
struct SquareF {
  template <class T> AF_HOST_DEVICE T operator()(T a) const { return af_mul(a, a); }
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
// 1 / (1 + e^-a) (graph/ops_indexing.cc's Sigmoid).
struct SigmoidF {
  template <class T> AF_HOST_DEVICE T operator()(T a) const { return T(1) / (T(1) + af_exp(-a)); }
};
struct TanhF {
  AF_HOST_DEVICE float operator()(float a) const { return ::tanhf(a); }
  AF_HOST_DEVICE double operator()(double a) const { return ::tanh(a); }
};
// static_cast to To: float -> int truncates toward zero, x -> bool is x != 0. A float outside
// the integer type's range saturates to its nearest end and NaN gives 0 (C++ leaves both
// undefined; the GPU's conversion instructions saturate the same way).
template <class To>
struct CastF {
  template <class From> AF_HOST_DEVICE To operator()(From a) const {
    if constexpr (std::is_floating_point<From>::value && std::is_integral<To>::value &&
                  !std::is_same<To, bool>::value) {
      if (a != a) return To(0);  // NOLINT: NaN test
      if (a <= static_cast<From>(af_lowest<To>())) return af_lowest<To>();
      if (a >= static_cast<From>(af_highest<To>())) return af_highest<To>();
    }
    return static_cast<To>(a);
  }
};

// ---- ternary -----------------------------------------------------------------------------
struct SelectF {
  template <class T> AF_HOST_DEVICE T operator()(bool c, T a, T b) const { return c ? a : b; }
};

// ---- reducers: identity() and an associative, commutative combine ------------------------
struct SumReducer {
  template <class T> AF_HOST_DEVICE static T identity() { return T(0); }
  template <class T> AF_HOST_DEVICE T operator()(T a, T b) const { return af_add(a, b); }
};
struct MaxReducer {
  template <class T> AF_HOST_DEVICE static T identity() { return af_lowest<T>(); }
  template <class T> AF_HOST_DEVICE T operator()(T a, T b) const { return MaximumF()(a, b); }
};

// ---- neural-network activations (device/cpu/nn_kernels.cc) ------------------------------
// max(x, 0); NaN stays NaN.
struct ReluF {
  template <class T> AF_HOST_DEVICE T operator()(T x) const { return x < T(0) ? T(0) : x; }
};
// Relu's gradient: g where the forward input x > 0, else 0.
struct ReluGradF {
  template <class T> AF_HOST_DEVICE T operator()(T g, T x) const { return x > T(0) ? g : T(0); }
};

// ---- optimizer updates: one element of a variable (w) and its slots, in place -------------
// Shared by the variable actors (CPU) and the GPU update kernels. Each is a small value type
// holding the hyper-parameters; operator() updates one element.

// Plain gradient descent (TF ApplyGradientDescent): w -= lr * g.
template <class T>
struct SgdUpdateF {
  T lr;
  AF_HOST_DEVICE void operator()(T& w, T g) const { w -= lr * g; }
};

// Momentum (TF ApplyMomentum): a = momentum * a + g; w -= lr * a. With use_nesterov:
// w -= lr * g + lr * momentum * a (with the updated a).
template <class T>
struct MomentumUpdateF {
  T lr;
  T momentum;
  bool use_nesterov = false;
  AF_HOST_DEVICE void operator()(T& w, T& a, T g) const {
    a = momentum * a + g;
    if (use_nesterov)
      w -= lr * g + lr * momentum * a;
    else
      w -= lr * a;
  }
};

// Adam with bias correction (TF ApplyAdam), for update number t >= 1:
//   lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
//   m = m + (g - m) * (1 - beta1);  v = v + (g^2 - v) * (1 - beta2)
//   w -= lr_t * m / (sqrt(v) + epsilon)
// Build with make() so lr_t is computed once per step.
template <class T>
struct AdamUpdateF {
  T lr_t;
  T beta1;
  T beta2;
  T epsilon;
  AF_HOST_DEVICE static AdamUpdateF make(T lr, T beta1, T beta2, T epsilon, int64_t t) {
    const double b1t = ::pow(static_cast<double>(beta1), static_cast<double>(t));
    const double b2t = ::pow(static_cast<double>(beta2), static_cast<double>(t));
    const double lr_t = static_cast<double>(lr) * ::sqrt(1.0 - b2t) / (1.0 - b1t);
    return AdamUpdateF{static_cast<T>(lr_t), beta1, beta2, epsilon};
  }
  AF_HOST_DEVICE void operator()(T& w, T& m, T& v, T g) const {
    m = m + (g - m) * (T(1) - beta1);
    v = v + (g * g - v) * (T(1) - beta2);
    w -= lr_t * m / (af_sqrt(v) + epsilon);
  }
};

// Adagrad (TF ApplyAdagrad, update_slots): a += g^2; w -= lr * g / sqrt(a). The accumulator
// starts at initial_accumulator_value (> 0), so the first step never divides by zero.
template <class T>
struct AdagradUpdateF {
  T lr;
  AF_HOST_DEVICE void operator()(T& w, T& a, T g) const {
    a += g * g;
    w -= lr * g / af_sqrt(a);
  }
};

// RMSProp (TF ApplyRMSProp, uncentered):
//   ms = decay * ms + (1 - decay) * g^2  (computed as ms + (g^2 - ms) * (1 - decay), as TF does)
//   mom = momentum * mom + lr * g / sqrt(ms + epsilon);  w -= mom
// TF 1.x starts ms at 1 and mom at 0 (the caller creates the slots).
template <class T>
struct RmsPropUpdateF {
  T lr;
  T decay;
  T momentum;
  T epsilon;
  AF_HOST_DEVICE void operator()(T& w, T& ms, T& mom, T g) const {
    ms = ms + (g * g - ms) * (T(1) - decay);
    mom = momentum * mom + lr * g / af_sqrt(ms + epsilon);
    w -= mom;
  }
};

}  // namespace functors
}  // namespace actorflow
