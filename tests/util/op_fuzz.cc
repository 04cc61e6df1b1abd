// The op fuzzer's cases (tests/util/op_fuzz.h): hostile values, one maker of plausible cases per
// op, and the catalogue of mutations.
#include "tests/util/op_fuzz.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "graph/fusion.h"
#include "graph/mixed_precision.h"
#include "graph/ops_nn_util.h"

namespace actorflow {
namespace testing {
namespace {

using Rng = std::mt19937_64;
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();

// ---- random and hostile values ------------------------------------------------------------

int64_t uni(Rng& r, int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(r() % static_cast<uint64_t>(hi - lo + 1)); }
bool chance(Rng& r, int percent) { return static_cast<int>(r() % 100) < percent; }
template <class T>
const T& one_of(Rng& r, const std::vector<T>& v) {
  return v[r() % v.size()];
}

// Integers that break naive arithmetic: sign changes, int32 and int64 ends, products that wrap.
int64_t hostile_int(Rng& r) {
  static const std::vector<int64_t> v = {0, 1, -1, 2, 3, 4, -2, 7, 1000, 1 << 20, int64_t{1} << 31,
                                         (int64_t{1} << 31) - 1, -(int64_t{1} << 31), int64_t{1} << 32,
                                         int64_t{1} << 59, int64_t{1} << 60, (int64_t{1} << 62) + 1,
                                         -(int64_t{1} << 62), kI64Max, kI64Min, kI64Max - 1, kI64Min + 1};
  return chance(r, 30) ? uni(r, -3, 8) : one_of(r, v);
}

double hostile_double(Rng& r) {
  static const std::vector<double> v = {0.0, -0.0, 1.0, -1.0, 0.5, 0.999999, 1.0, 1e-30, 1e30, 1e300, -1e300,
                                        std::nan(""), INFINITY, -INFINITY, 9.3e18, -9.3e18, 4294967296.0};
  return chance(r, 30) ? static_cast<double>(uni(r, -4, 4)) * 0.25 : one_of(r, v);
}

std::vector<int64_t> hostile_list(Rng& r) {
  const size_t n = chance(r, 5) ? 33 : static_cast<size_t>(uni(r, 0, 5));
  std::vector<int64_t> out(n);
  for (auto& x : out) x = hostile_int(r);
  return out;
}

// A declared (static) shape for a shape function: anything at all, including dims no tensor
// can have.
Shape hostile_shape(Rng& r) {
  switch (r() % 6) {
    case 0: return Shape::unknown();
    case 1: return Shape{(int64_t{1} << 62) + 1, 4};
    case 2: return Shape(std::vector<int64_t>(static_cast<size_t>(one_of<int64_t>(r, {8, 33, 255, 300})), 1));
    default: {
      std::vector<int64_t> d(static_cast<size_t>(uni(r, 0, 5)));
      for (auto& x : d) x = chance(r, 50) ? uni(r, -2, 5) : hostile_int(r);
      return Shape(d);
    }
  }
}

DType any_dtype(Rng& r) {
  static const std::vector<DType> v = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                       DType::kInt64,   DType::kUInt8,   DType::kBool};
  return one_of(r, v);
}

// A shape a real tensor can have, with few elements: small dims, ranks 0, 8 and 33, and zero-element
// shapes whose other dims are huge (they cost no bytes, so a peer can send them freely).
Shape tensor_shape(Rng& r) {
  switch (r() % 10) {
    case 0: return Shape{};
    case 1: return Shape{0, int64_t{1} << uni(r, 20, 60)};
    case 2: return Shape{int64_t{1} << uni(r, 20, 30), 0, int64_t{1} << uni(r, 20, 30)};
    case 3: {
      std::vector<int64_t> d(8);
      for (auto& x : d) x = uni(r, 1, 2);
      return Shape(d);
    }
    case 4: return Shape(std::vector<int64_t>(33, 1));
    default: {
      std::vector<int64_t> d(static_cast<size_t>(uni(r, 1, 4)));
      for (auto& x : d) x = uni(r, 0, 5);
      return Shape(d);
    }
  }
}

// Small dims for a plausible case.
Shape small_shape(Rng& r, int rank, int64_t lo = 1, int64_t hi = 4) {
  std::vector<int64_t> d(static_cast<size_t>(rank));
  for (auto& x : d) x = uni(r, lo, hi);
  return Shape(d);
}

// A tensor of `t` and `s` (a valid tensor shape) with plausible values, some hostile. Integer
// values lie in [lo, hi] unless `hostile_ints`.
Tensor make_tensor(Rng& r, DType t, const Shape& s, int64_t lo = -2, int64_t hi = 6, bool hostile_ints = false) {
  Tensor x(t, s);
  const int64_t n = x.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::kFloat32: x.data<float>()[i] = static_cast<float>(chance(r, 5) ? hostile_double(r) : uni(r, -40, 40) * 0.1); break;
      case DType::kFloat64: x.data<double>()[i] = chance(r, 5) ? hostile_double(r) : uni(r, -40, 40) * 0.1; break;
      case DType::kInt32:
        x.data<int32_t>()[i] = static_cast<int32_t>(hostile_ints && chance(r, 30) ? hostile_int(r) : uni(r, lo, hi));
        break;
      case DType::kInt64: x.data<int64_t>()[i] = hostile_ints && chance(r, 30) ? hostile_int(r) : uni(r, lo, hi); break;
      case DType::kUInt8: x.data<uint8_t>()[i] = static_cast<uint8_t>(r()); break;
      case DType::kBool: x.data<bool>()[i] = (r() & 1) != 0; break;
      default: break;
    }
  }
  return x;
}

Tensor ints(DType t, const std::vector<int64_t>& v, const Shape& s) {
  Tensor x(t, s);
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kInt32) x.data<int32_t>()[i] = static_cast<int32_t>(v[i]);
    else x.data<int64_t>()[i] = v[i];
  }
  return x;
}

Tensor f32(Rng& r, const Shape& s) { return make_tensor(r, DType::kFloat32, s); }

// ---- a case -------------------------------------------------------------------------------

using Case = FuzzCase;

void add(Case& c, Tensor t, bool constant = false) {
  c.inputs.push_back(std::move(t));
  c.is_const.push_back(constant);
}

template <class V>
void attr(Case& c, const std::string& name, V v) {
  c.attrs.set(name, AttrValue(std::move(v)));
  c.attr_names.push_back(name);
}

using Maker = std::function<void(Rng&, Case&)>;

struct OpSpec {
  Maker make;
  bool kernel = true;  // false: runtime ops the executor itself runs (_Arg, _Retval, _Send, _Recv)
};

// ---- plausible cases, one maker per op ----------------------------------------------------

const std::vector<DType> kNumeric = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64};
const std::vector<DType> kFloats = {DType::kFloat32, DType::kFloat64};
const std::vector<DType> kIndex = {DType::kInt32, DType::kInt64};

// A shape `s` broadcasts against: s itself, some dims set to 1, a suffix, or a scalar.
Shape broadcast_partner(Rng& r, const Shape& s) {
  std::vector<int64_t> d = s.dims();
  switch (r() % 4) {
    case 0: return s;
    case 1:
      for (auto& x : d)
        if (chance(r, 50)) x = 1;
      return Shape(d);
    case 2: return Shape(std::vector<int64_t>(d.begin() + static_cast<long>(d.empty() ? 0 : r() % (d.size() + 1)), d.end()));
    default: return Shape{};
  }
}

Maker unary(const std::vector<DType>& types) {
  return [types](Rng& r, Case& c) { add(c, make_tensor(r, one_of(r, types), small_shape(r, static_cast<int>(uni(r, 0, 3))))); };
}

Maker binary(const std::vector<DType>& types) {
  return [types](Rng& r, Case& c) {
    const DType t = one_of(r, types);
    Shape a = small_shape(r, static_cast<int>(uni(r, 0, 3)));
    Shape b = broadcast_partner(r, a);
    if (chance(r, 50)) std::swap(a, b);
    add(c, make_tensor(r, t, a, -3, 5, true), chance(r, 30));
    add(c, make_tensor(r, t, b, -3, 5, true), chance(r, 30));
  };
}

Maker reduction() {
  return [](Rng& r, Case& c) {
    const Shape s = small_shape(r, static_cast<int>(uni(r, 0, 4)), 0, 3);
    add(c, make_tensor(r, one_of(r, kNumeric), s, -3, 5, true));
    std::vector<int64_t> axes;
    for (int i = 0; i < s.rank(); ++i)
      if (chance(r, 40)) axes.push_back(chance(r, 30) ? i - s.rank() : i);
    attr(c, "axes", axes);
    attr(c, "keep_dims", chance(r, 50));
  };
}

// NHWC input and a (ksize, strides, padding) window over it.
void window_attrs(Rng& r, Case& c, bool ksize) {
  const int64_t kh = uni(r, 1, 3), kw = uni(r, 1, 3);
  if (ksize) attr(c, "ksize", std::vector<int64_t>{1, kh, kw, 1});
  attr(c, "strides", std::vector<int64_t>{1, uni(r, 1, 3), uni(r, 1, 3), 1});
  attr(c, "padding", std::string(chance(r, 50) ? "SAME" : "VALID"));
}

// The pooled (or convolved) NHWC shape of `in` under c's attrs, or `in` itself when they do not fit.
Shape window_out(const Case& c, const Shape& in, int64_t kh, int64_t kw, int64_t channels) {
  auto strides = c.attrs.get<std::vector<int64_t>>("strides");
  auto pad = parse_padding(c.attrs);
  if (!strides.ok() || strides->size() != 4 || !pad.ok() || in.rank() != 4) return in;
  auto h = compute_window(in.dim(1), kh, (*strides)[1], *pad, "h");
  auto w = compute_window(in.dim(2), kw, (*strides)[2], *pad, "w");
  if (!h.ok() || !w.ok()) return in;
  return Shape{in.dim(0), h->out, w->out, channels};
}

Maker pool(bool grad_of_avg, int pool_grad) {  // pool_grad: 0 forward, 1 MaxPoolGrad, 2 MaxPoolGradGrad
  return [grad_of_avg, pool_grad](Rng& r, Case& c) {
    const Shape in = small_shape(r, 4, 1, 5);
    window_attrs(r, c, true);
    auto k = *c.attrs.get<std::vector<int64_t>>("ksize");
    const Shape out = window_out(c, in, k[1], k[2], in.dim(3));
    const DType t = chance(r, 80) ? DType::kFloat32 : DType::kFloat64;
    add(c, make_tensor(r, t, in));
    if (grad_of_avg) {
      add(c, make_tensor(r, t, out));
    } else if (pool_grad == 1) {
      add(c, make_tensor(r, t, out));
      add(c, make_tensor(r, t, out));
    } else if (pool_grad == 2) {
      add(c, make_tensor(r, t, out));
      add(c, make_tensor(r, t, in));
    }
  };
}

Maker conv(int which, bool fused) {  // 0 Conv2D, 1 BackpropInput, 2 BackpropFilter
  return [which, fused](Rng& r, Case& c) {
    const Shape in = small_shape(r, 4, 1, 5);
    const Shape f{uni(r, 1, 3), uni(r, 1, 3), in.dim(3), uni(r, 1, 3)};
    window_attrs(r, c, false);
    const Shape out = window_out(c, in, f.dim(0), f.dim(1), f.dim(3));
    if (which == 0) {
      add(c, f32(r, in));
      add(c, f32(r, f));
      if (fused) {
        add(c, f32(r, Shape{f.dim(3)}));
        attr(c, kFusedReluAttr, chance(r, 50));
      }
    } else if (which == 1) {
      const DType t = one_of(r, kIndex);
      add(c, ints(t, in.dims(), Shape{4}), chance(r, 70));
      add(c, f32(r, f));
      add(c, f32(r, out));
    } else {
      add(c, f32(r, in));
      add(c, f32(r, out));
      attr(c, "filter_sizes", f.dims());
    }
    if (chance(r, 10)) attr(c, kMixedBfloat16Attr, true);
  };
}

// The variables the variable ops act on: a few names, so state carries over from case to case.
void var_attrs(Rng& r, Case& c, const Shape& s, DType t = DType::kFloat32) {
  attr(c, "var_name", std::string("v") + std::to_string(r() % 4));
  attr(c, "dtype", t);
  attr(c, "shape", s);
}
const Shape kVarShape{4, 3};

Tensor scalar_f(Rng& r) { return Tensor::scalar<float>(static_cast<float>(chance(r, 20) ? hostile_double(r) : 0.01 * uni(r, 0, 10))); }

Maker apply_op(int scalars_before, int scalars_after) {
  return [scalars_before, scalars_after](Rng& r, Case& c) {
    var_attrs(r, c, kVarShape);
    for (int i = 0; i < scalars_before; ++i) add(c, scalar_f(r));
    add(c, f32(r, kVarShape));
    for (int i = 0; i < scalars_after; ++i) add(c, scalar_f(r));
    if (chance(r, 30)) attr(c, "initial_accumulator_value", hostile_double(r));
    if (chance(r, 20)) attr(c, "use_nesterov", chance(r, 50));
  };
}

Maker sparse_apply_op(int scalars_before, int scalars_after) {
  return [scalars_before, scalars_after](Rng& r, Case& c) {
    var_attrs(r, c, kVarShape);
    const int64_t n = uni(r, 0, 5);
    for (int i = 0; i < scalars_before; ++i) add(c, scalar_f(r));
    add(c, make_tensor(r, one_of(r, kIndex), Shape{n}, -1, 4, true));
    add(c, f32(r, Shape{n, 3}));
    for (int i = 0; i < scalars_after; ++i) add(c, scalar_f(r));
  };
}

// Every op this test knows, with a maker of plausible cases. Kept in step with the registries by
// the Coverage test below.
const std::map<std::string, OpSpec>& specs() {
  static const auto* m = new std::map<std::string, OpSpec>{
      // ---- core
      {"Const", {[](Rng& r, Case& c) {
         Tensor v = make_tensor(r, any_dtype(r), tensor_shape(r));
         attr(c, "dtype", v.dtype());
         attr(c, "value", v);
       }}},
      {"Placeholder", {[](Rng& r, Case& c) {
         attr(c, "dtype", any_dtype(r));
         attr(c, "shape", chance(r, 50) ? Shape::unknown() : tensor_shape(r));
       }}},
      {"Identity", {unary({DType::kFloat32, DType::kInt64, DType::kBool})}},
      {"StopGradient", {unary({DType::kFloat32, DType::kInt32})}},
      {"NoOp", {[](Rng&, Case&) {}}},
      {"_Arg", {[](Rng& r, Case& c) {
         attr(c, "dtype", any_dtype(r));
         attr(c, "shape", tensor_shape(r));
         attr(c, "index", int64_t{0});
       }, false}},
      {"_Retval", {[](Rng& r, Case& c) {
         add(c, f32(r, small_shape(r, 2)));
         attr(c, "index", int64_t{0});
       }, false}},
      {"_Send", {[](Rng& r, Case& c) {
         add(c, f32(r, small_shape(r, 1)));
         attr(c, "tensor_name", std::string("a;b;c"));
       }, false}},
      {"_Recv", {[](Rng& r, Case& c) {
         attr(c, "dtype", any_dtype(r));
         attr(c, "shape", tensor_shape(r));
         attr(c, "tensor_name", std::string("a;b;c"));
       }, false}},
      // ---- math
      {"Add", {binary(kNumeric)}},
      {"Sub", {binary(kNumeric)}},
      {"Mul", {binary(kNumeric)}},
      {"Div", {binary(kNumeric)}},
      {"Maximum", {binary(kNumeric)}},
      {"Equal", {binary({DType::kFloat32, DType::kInt32, DType::kUInt8, DType::kBool})}},
      {"Greater", {binary(kNumeric)}},
      {"Neg", {unary(kNumeric)}},
      {"Square", {unary(kNumeric)}},
      {"Log", {unary(kFloats)}},
      {"Exp", {unary(kFloats)}},
      {"Sqrt", {unary(kFloats)}},
      {"AddN", {[](Rng& r, Case& c) {
         const DType t = one_of(r, kNumeric);
         const Shape s = small_shape(r, static_cast<int>(uni(r, 0, 3)));
         for (int64_t i = 0, n = uni(r, 1, 4); i < n; ++i) add(c, make_tensor(r, t, s, -3, 3, true));
       }}},
      {"Cast", {[](Rng& r, Case& c) {
         add(c, make_tensor(r, any_dtype(r), small_shape(r, 2), -3, 3, true));
         attr(c, "DstT", any_dtype(r));
       }}},
      {"Select", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, static_cast<int>(uni(r, 0, 3)));
         const DType t = any_dtype(r);
         add(c, make_tensor(r, DType::kBool, chance(r, 30) ? Shape{} : s));
         add(c, make_tensor(r, t, chance(r, 20) ? Shape{} : s));
         add(c, make_tensor(r, t, chance(r, 20) ? Shape{} : s));
       }}},
      {"Sum", {reduction()}},
      {"Mean", {reduction()}},
      {"Max", {reduction()}},
      {"ArgMax", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, static_cast<int>(uni(r, 1, 3)), 0, 3);
         add(c, make_tensor(r, one_of(r, kNumeric), s));
         attr(c, "axis", uni(r, -s.rank(), s.rank() - 1));
       }}},
      // ---- array
      {"Reshape", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, static_cast<int>(uni(r, 0, 3)));
         add(c, make_tensor(r, any_dtype(r), s));
         std::vector<int64_t> target = s.dims();
         std::shuffle(target.begin(), target.end(), r);
         if (!target.empty() && chance(r, 40)) target[r() % target.size()] = -1;
         if (chance(r, 10)) target = {(int64_t{1} << 62) + 1, 4};  // the attack's shape (docs/security.md)
         attr(c, "shape", target);
       }}},
      {"Shape", {unary({DType::kFloat32, DType::kBool})}},
      {"ZerosLike", {unary({DType::kFloat32, DType::kInt64, DType::kUInt8, DType::kBool})}},
      {"OnesLike", {unary({DType::kFloat64, DType::kInt32, DType::kBool})}},
      {"Transpose", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, static_cast<int>(uni(r, 0, 5)), 1, 3);
         add(c, make_tensor(r, any_dtype(r), s));
         std::vector<int64_t> perm(static_cast<size_t>(s.rank()));
         for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
         std::shuffle(perm.begin(), perm.end(), r);
         attr(c, "perm", perm);
       }}},
      {"SumToShape", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, static_cast<int>(uni(r, 0, 3)));
         Shape like = broadcast_partner(r, s);
         const DType t = one_of(r, kNumeric);
         add(c, make_tensor(r, t, s, -3, 3, true));
         add(c, make_tensor(r, t, like));
       }}},
      {"OneHot", {[](Rng& r, Case& c) {
         add(c, make_tensor(r, one_of(r, kIndex), small_shape(r, static_cast<int>(uni(r, 0, 2))), -1, 5, true));
         attr(c, "depth", uni(r, 0, 5));
         attr(c, "on_value", 1.0);
         attr(c, "off_value", 0.0);
         attr(c, "axis", int64_t{-1});
       }}},
      {"ExpandDims", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, static_cast<int>(uni(r, 0, 3)));
         add(c, make_tensor(r, any_dtype(r), s));
         attr(c, "axes", std::vector<int64_t>{uni(r, -s.rank() - 1, s.rank())});
       }}},
      {"ReshapeLike", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, 2);
         add(c, make_tensor(r, any_dtype(r), s));
         add(c, make_tensor(r, DType::kFloat32, Shape{s.dim(1), s.dim(0)}));
       }}},
      {"EnsureShape", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, 2);
         add(c, make_tensor(r, any_dtype(r), s));
         attr(c, "shape", chance(r, 50) ? s : Shape{-1, s.dim(1)});
       }}},
      // ---- nn
      {"MatMul", {[](Rng& r, Case& c) {
         const int64_t m = uni(r, 0, 4), k = uni(r, 0, 4), n = uni(r, 0, 4);
         const bool ta = chance(r, 50), tb = chance(r, 50);
         add(c, f32(r, ta ? Shape{k, m} : Shape{m, k}));
         add(c, f32(r, tb ? Shape{n, k} : Shape{k, n}));
         attr(c, "transpose_a", ta);
         attr(c, "transpose_b", tb);
         if (chance(r, 10)) attr(c, kMixedBfloat16Attr, true);
       }}},
      {"_FusedMatMul", {[](Rng& r, Case& c) {
         const int64_t m = uni(r, 0, 4), k = uni(r, 0, 4), n = uni(r, 0, 4);
         add(c, f32(r, Shape{m, k}));
         add(c, f32(r, Shape{k, n}));
         add(c, f32(r, Shape{n}));
         attr(c, "transpose_a", false);
         attr(c, "transpose_b", false);
         attr(c, kFusedReluAttr, chance(r, 50));
       }}},
      {"Relu", {unary({DType::kFloat32})}},
      {"BiasAdd", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, static_cast<int>(uni(r, 2, 4)));
         add(c, f32(r, s));
         add(c, f32(r, Shape{s.dim(s.rank() - 1)}));
       }}},
      {"Conv2D", {conv(0, false)}},
      {"_FusedConv2D", {conv(0, true)}},
      {"Conv2DBackpropInput", {conv(1, false)}},
      {"Conv2DBackpropFilter", {conv(2, false)}},
      {"MaxPool", {pool(false, 0)}},
      {"AvgPool", {pool(false, 0)}},
      {"AvgPoolGrad", {pool(true, 0)}},
      {"MaxPoolGrad", {pool(false, 1)}},
      {"_FusedMaxPoolGrad", {pool(false, 1)}},
      {"MaxPoolGradGrad", {pool(false, 2)}},
      {"Softmax", {unary({DType::kFloat32})}},
      {"SoftmaxCrossEntropyWithLogits", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, 2, 0, 4);
         add(c, f32(r, s));
         add(c, f32(r, s));
       }}},
      {"ReluGrad", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, static_cast<int>(uni(r, 0, 3)));
         add(c, f32(r, s));
         add(c, f32(r, s));
       }}},
      {"BiasAddGrad", {[](Rng& r, Case& c) { add(c, f32(r, small_shape(r, static_cast<int>(uni(r, 2, 3)), 0, 4))); }}},
      // ---- indexing
      {"Gather", {[](Rng& r, Case& c) {
         const Shape p = small_shape(r, static_cast<int>(uni(r, 1, 3)), 0, 4);
         add(c, make_tensor(r, any_dtype(r), p));
         add(c, make_tensor(r, one_of(r, kIndex), small_shape(r, static_cast<int>(uni(r, 0, 2))), -1, p.dim(0), true),
             chance(r, 50));
         if (chance(r, 30)) attr(c, "drop_negatives", true);
       }}},
      {"UnsortedSegmentSum", {[](Rng& r, Case& c) {
         const Shape d = small_shape(r, static_cast<int>(uni(r, 1, 3)));
         add(c, make_tensor(r, one_of(r, kNumeric), d, -3, 3, true));
         add(c, make_tensor(r, one_of(r, kIndex), Shape{d.dim(0)}, -1, 4, true));
         add(c, ints(one_of(r, kIndex), {chance(r, 80) ? uni(r, 0, 5) : hostile_int(r)}, Shape{}), chance(r, 70));
       }}},
      {"Concat", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, static_cast<int>(uni(r, 1, 3)), 0, 3);
         const int64_t axis = uni(r, -s.rank(), s.rank() - 1);
         const DType t = any_dtype(r);
         for (int64_t i = 0, n = uni(r, 1, 4); i < n; ++i) {
           std::vector<int64_t> d = s.dims();
           d[static_cast<size_t>(axis < 0 ? axis + s.rank() : axis)] = uni(r, 0, 3);
           add(c, make_tensor(r, t, Shape(d)));
         }
         attr(c, "axis", axis);
       }}},
      {"ConcatPart", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, 2, 1, 3);
         const int64_t n = uni(r, 1, 3);
         add(c, f32(r, Shape{s.dim(0) * n, s.dim(1)}));
         for (int64_t i = 0; i < n; ++i) add(c, f32(r, s));
         attr(c, "axis", int64_t{0});
         attr(c, "index", uni(r, 0, n - 1));
       }}},
      {"Slice", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, static_cast<int>(uni(r, 0, 3)), 0, 4);
         add(c, make_tensor(r, any_dtype(r), s));
         std::vector<int64_t> begin, size;
         for (int64_t d : s.dims()) {
           begin.push_back(uni(r, 0, d));
           size.push_back(chance(r, 30) ? -1 : uni(r, 0, d - begin.back()));
         }
         attr(c, "begin", begin);
         attr(c, "size", size);
       }}},
      {"SliceGrad", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, static_cast<int>(uni(r, 1, 3)), 0, 4);
         std::vector<int64_t> begin, size;
         for (int64_t d : s.dims()) {
           begin.push_back(uni(r, 0, d));
           size.push_back(uni(r, 0, d - begin.back()));
         }
         add(c, f32(r, Shape(size)));
         add(c, f32(r, s));
         attr(c, "begin", begin);
         attr(c, "size", size);
       }}},
      {"Sigmoid", {unary(kFloats)}},
      {"Tanh", {unary(kFloats)}},
      {"L2Loss", {unary(kFloats)}},
      {"IndexedSlices", {[](Rng& r, Case& c) {
         const int64_t n = uni(r, 0, 4), rows = uni(r, 1, 5), cols = uni(r, 1, 3);
         add(c, make_tensor(r, one_of(r, kIndex), Shape{n}, -1, rows, true));
         add(c, f32(r, Shape{n, cols}));
         add(c, ints(DType::kInt64, {rows, cols}, Shape{2}), chance(r, 50));
         attr(c, "shape", Shape{rows, cols});
       }}},
      {"Split", {[](Rng& r, Case& c) {
         const int64_t parts = uni(r, 1, 3);
         Shape s = small_shape(r, static_cast<int>(uni(r, 1, 3)));
         const int64_t axis = uni(r, 0, s.rank() - 1);
         std::vector<int64_t> d = s.dims();
         d[static_cast<size_t>(axis)] *= parts;
         add(c, make_tensor(r, any_dtype(r), Shape(d)));
         attr(c, "axis", axis);
         attr(c, "num_split", parts);
       }}},
      {"Dropout", {[](Rng& r, Case& c) {
         add(c, make_tensor(r, one_of(r, kFloats), small_shape(r, 2)));
         attr(c, "rate", 0.25 * static_cast<double>(uni(r, 0, 3)));
         attr(c, "seed", hostile_int(r));
       }}},
      {"SparseSoftmaxCrossEntropyWithLogits", {[](Rng& r, Case& c) {
         const Shape s = small_shape(r, 2, 0, 4);
         add(c, f32(r, s));
         add(c, make_tensor(r, one_of(r, kIndex), Shape{s.dim(0)}, -1, s.dim(1), true));
       }}},
      {"DynamicPartition", {[](Rng& r, Case& c) {
         const int64_t n = uni(r, 1, 3);
         const Shape d = small_shape(r, static_cast<int>(uni(r, 1, 3)), 0, 4);
         add(c, make_tensor(r, any_dtype(r), d));
         add(c, make_tensor(r, DType::kInt32, Shape{d.dim(0)}, 0, n - 1, true));
         attr(c, "num_partitions", n);
       }}},
      {"DynamicStitch", {[](Rng& r, Case& c) {
         const int64_t n = uni(r, 1, 3);
         const DType t = any_dtype(r);
         std::vector<Tensor> data;
         for (int64_t i = 0; i < n; ++i) {
           const int64_t k = uni(r, 0, 3);
           add(c, make_tensor(r, DType::kInt32, Shape{k}, 0, 5, true));
           data.push_back(make_tensor(r, t, Shape{k, 2}));
         }
         for (auto& d : data) add(c, d);
       }}},
      {"PartitionIds", {[](Rng& r, Case& c) {
         const int64_t shards = uni(r, 1, 3), rows = shards + uni(r, 0, 6);
         add(c, make_tensor(r, one_of(r, kIndex), Shape{uni(r, 0, 5)}, 0, rows - 1, true));
         attr(c, "num_shards", shards);
         attr(c, "num_rows", chance(r, 10) ? kI64Max : rows);
         attr(c, "strategy", std::string(chance(r, 50) ? "mod" : "div"));
       }}},
      // ---- variables (their kernels call the task's variable actors) and initializers
      {"VariableV2", {[](Rng& r, Case& c) { var_attrs(r, c, kVarShape); }}},
      {"Assign", {[](Rng& r, Case& c) {
         var_attrs(r, c, kVarShape);
         add(c, f32(r, kVarShape));
       }}},
      {"AssignAdd", {[](Rng& r, Case& c) {
         var_attrs(r, c, kVarShape);
         add(c, f32(r, kVarShape));
       }}},
      {"IsVariableInitialized", {[](Rng& r, Case& c) { var_attrs(r, c, kVarShape); }}},
      {"ScatterAdd", {[](Rng& r, Case& c) {
         var_attrs(r, c, kVarShape);
         const Shape ids = small_shape(r, static_cast<int>(uni(r, 0, 2)), 0, 3);
         std::vector<int64_t> u = ids.dims();
         u.push_back(3);
         add(c, make_tensor(r, one_of(r, kIndex), ids, -1, 4, true));
         add(c, f32(r, Shape(u)));
       }}},
      {"ScatterUpdate", {[](Rng& r, Case& c) {
         var_attrs(r, c, kVarShape);
         const int64_t n = uni(r, 0, 3);
         add(c, make_tensor(r, one_of(r, kIndex), Shape{n}, -1, 4, true));
         add(c, f32(r, Shape{n, 3}));
       }}},
      {"ApplyGradientDescent", {apply_op(1, 0)}},
      {"ApplyMomentum", {apply_op(1, 1)}},
      {"ApplyAdam", {apply_op(4, 0)}},
      {"ApplyAdagrad", {apply_op(1, 0)}},
      {"ApplyRMSProp", {apply_op(4, 0)}},
      {"ApplyFtrl", {apply_op(4, 0)}},
      {"SparseApplyGradientDescent", {sparse_apply_op(1, 0)}},
      {"SparseApplyMomentum", {sparse_apply_op(1, 1)}},
      {"SparseApplyAdam", {sparse_apply_op(4, 0)}},
      {"SparseApplyAdagrad", {sparse_apply_op(1, 0)}},
      {"SparseApplyRMSProp", {sparse_apply_op(4, 0)}},
      {"SparseApplyFtrl", {sparse_apply_op(4, 0)}},
      {"ApplyGradientSync", {[](Rng& r, Case& c) {
         var_attrs(r, c, kVarShape);
         add(c, f32(r, kVarShape));
         add(c, Tensor::scalar<int64_t>(chance(r, 70) ? uni(r, 0, 5) : hostile_int(r)));
         attr(c, "optimizer", std::string(one_of<std::string>(r, {"sgd", "adam", "momentum", "increment", "bogus"})));
         attr(c, "replicas_to_aggregate", uni(r, 1, 3));
         attr(c, "wait", false);  // a waiting contribution holds its answer for the other replicas
       }}},
      {"SparseApplyGradientSync", {[](Rng& r, Case& c) {
         var_attrs(r, c, kVarShape);
         const int64_t n = uni(r, 0, 4);
         add(c, make_tensor(r, one_of(r, kIndex), Shape{n}, -1, 4, true));
         add(c, f32(r, Shape{n, 3}));
         add(c, Tensor::scalar<int64_t>(chance(r, 70) ? uni(r, 0, 5) : hostile_int(r)));
         attr(c, "optimizer", std::string(one_of<std::string>(r, {"sgd", "adam", "adagrad", "rmsprop"})));
         attr(c, "replicas_to_aggregate", uni(r, 1, 3));
         attr(c, "wait", false);
       }}},
      {"SyncAccumulatorControl", {[](Rng& r, Case& c) {
         var_attrs(r, c, kVarShape);
         attr(c, "action", std::string(one_of<std::string>(r, {"stats", "stats", "leave", "close", "bogus"})));
         attr(c, "replicas_to_aggregate", hostile_int(r));
         attr(c, "total_num_replicas", hostile_int(r));
       }}},
      {"VariableSlots", {[](Rng& r, Case& c) { var_attrs(r, c, kVarShape); }}},
      {"RestoreVariableSlots", {[](Rng& r, Case& c) {
         var_attrs(r, c, kVarShape);
         add(c, make_tensor(r, DType::kUInt8, Shape{chance(r, 30) ? 0 : uni(r, 1, 64)}));
       }}},
      // ---- checkpoint files (the prefix is set to a file of fuzz_checkpoint_dir() in make_fuzz_case)
      {"SaveV2", {[](Rng& r, Case& c) {
         add(c, Tensor(DType::kUInt8, Shape{1}));
         const bool slots = chance(r, 40);
         const int n = slots ? 2 : static_cast<int>(uni(r, 1, 3));
         std::vector<std::string> names;
         const Shape s = small_shape(r, static_cast<int>(uni(r, 0, 2)));
         for (int i = 0; i < n; ++i) {
           names.push_back(slots ? (i == 0 ? "w" : "w/Adam") : std::string(1, static_cast<char>('a' + i)));
           add(c, make_tensor(r, slots ? DType::kFloat32 : one_of<DType>(r, {DType::kFloat32, DType::kInt64, DType::kBool}), slots ? s : tensor_shape(r)));
         }
         attr(c, "tensor_names", names);
         if (slots) {
           attr(c, "slot_of", std::vector<int64_t>{-1, 0});
           attr(c, "slot_id", std::vector<int64_t>{0, uni(r, 1, 8)});
           add(c, make_tensor(r, DType::kUInt8, Shape{chance(r, 50) ? 0 : uni(r, 1, 64)}));
         }
       }}},
      {"RestoreV2", {[](Rng& r, Case& c) {
         add(c, Tensor(DType::kUInt8, Shape{1}));
         const bool slots = chance(r, 40);
         std::vector<std::string> names = slots ? std::vector<std::string>{"w", "w/Adam"} : std::vector<std::string>{"a", "b"};
         if (!slots && chance(r, 50)) names.pop_back();
         std::vector<std::string> dtypes;
         for (size_t i = 0; i < names.size(); ++i) dtypes.push_back(one_of<std::string>(r, {"float32", "int64", "bool"}));
         attr(c, "tensor_names", names);
         attr(c, "dtypes", dtypes);
         if (slots) {
           attr(c, "slot_of", std::vector<int64_t>{-1, 0});
           attr(c, "slot_id", std::vector<int64_t>{0, uni(r, 1, 8)});
         }
       }}},
      // ---- a sharded Saver's string ops (uint8 vectors of bytes; graph/string_ops.h)
      {"StringJoin", {[](Rng& r, Case& c) {
         const int n = static_cast<int>(uni(r, 1, 3));
         for (int i = 0; i < n; ++i) add(c, make_tensor(r, DType::kUInt8, Shape{uni(r, 0, 12)}));
         attr(c, "separator", std::string(one_of<std::string>(r, {"", "/", std::string(1, '\0'), std::string(70000, 'x')})));
         if (chance(r, 50)) attr(c, "vector", chance(r, 50));
       }}},
      {"RegexFullMatch", {[](Rng& r, Case& c) {
         add(c, make_tensor(r, DType::kUInt8, Shape{uni(r, 0, 12)}));
         attr(c, "pattern", std::string(one_of<std::string>(r, {"^s3://.*", "abc", ".*", "(a*)*b", "^", "[", "x$", ""})));
       }}},
      {"StringSelect", {[](Rng& r, Case& c) {
         add(c, Tensor::scalar<bool>(chance(r, 50)));
         add(c, make_tensor(r, DType::kUInt8, Shape{uni(r, 0, 8)}));
         add(c, make_tensor(r, DType::kUInt8, Shape{uni(r, 0, 8)}));
       }}},
      {"ShardedFilename", {[](Rng& r, Case& c) {
         add(c, make_tensor(r, DType::kUInt8, Shape{uni(r, 0, 8)}));
         add(c, Tensor::scalar<int32_t>(static_cast<int32_t>(chance(r, 70) ? uni(r, 0, 3) : hostile_int(r))));
         add(c, Tensor::scalar<int32_t>(static_cast<int32_t>(chance(r, 70) ? uni(r, 1, 3) : hostile_int(r))));
       }}},
      // (its prefixes and destination are set to files of fuzz_checkpoint_dir() in make_fuzz_case)
      {"MergeV2Checkpoints", {[](Rng& r, Case& c) {
         add(c, Tensor(DType::kUInt8, Shape{1}));
         add(c, Tensor(DType::kUInt8, Shape{1}));
         if (chance(r, 50)) attr(c, "delete_old_dirs", chance(r, 50));
         if (chance(r, 50)) attr(c, "allow_missing_files", chance(r, 50));
       }}},
      {"Fill", {[](Rng& r, Case& c) {
         attr(c, "dtype", any_dtype(r));
         attr(c, "shape", small_shape(r, static_cast<int>(uni(r, 0, 3))));
         attr(c, "value", hostile_double(r));
       }}},
      {"RandomUniform", {[](Rng& r, Case& c) {
         attr(c, "shape", small_shape(r, 2));
         attr(c, "seed", hostile_int(r));
         attr(c, "minval", hostile_double(r));
         attr(c, "maxval", hostile_double(r));
       }}},
      {"TruncatedNormal", {[](Rng& r, Case& c) {
         attr(c, "shape", small_shape(r, 2));
         attr(c, "seed", hostile_int(r));
         attr(c, "mean", hostile_double(r));
         attr(c, "stddev", hostile_double(r));
       }}},
  };
  return *m;
}

// ---- hostile mutations --------------------------------------------------------------------

// A value of a random attribute type: the wrong type for most attributes.
AttrValue any_attr_value(Rng& r) {
  switch (r() % 9) {
    case 0: return AttrValue(hostile_int(r));
    case 1: return AttrValue(hostile_double(r));
    case 2: return AttrValue(chance(r, 50));
    case 3: return AttrValue(std::string(one_of<std::string>(r, {"", "SAME", "VALID", "mod", "\xff\xfe", std::string(300, 'x')})));
    case 4: return AttrValue(any_dtype(r));
    case 5: return AttrValue(hostile_shape(r));
    case 6: return AttrValue(hostile_list(r));
    case 7: return AttrValue(std::vector<std::string>{"a", ""});
    default: return AttrValue(make_tensor(r, any_dtype(r), tensor_shape(r)));
  }
}

// `v` changed within its type: hostile numbers, lists, strings and shapes.
AttrValue mutate_attr(Rng& r, const AttrValue& v) {
  if (std::holds_alternative<int64_t>(v)) return AttrValue(hostile_int(r));
  if (std::holds_alternative<double>(v)) return AttrValue(hostile_double(r));
  if (std::holds_alternative<bool>(v)) return AttrValue(!std::get<bool>(v));
  if (std::holds_alternative<Shape>(v)) return AttrValue(hostile_shape(r));
  if (std::holds_alternative<DType>(v)) return AttrValue(chance(r, 20) ? DType::kInvalid : any_dtype(r));
  if (auto* l = std::get_if<std::vector<int64_t>>(&v)) {
    std::vector<int64_t> out = *l;
    if (out.empty() || chance(r, 30)) return AttrValue(hostile_list(r));
    out[r() % out.size()] = hostile_int(r);
    if (chance(r, 30)) out[r() % out.size()] = one_of<int64_t>(r, {kI64Max, kI64Max - 1, kI64Min, (int64_t{1} << 62) + 1});
    if (chance(r, 20)) out.push_back(hostile_int(r));
    if (chance(r, 20)) out.pop_back();
    return AttrValue(out);
  }
  if (std::holds_alternative<std::string>(v))
    return AttrValue(std::string(one_of<std::string>(r, {"", "FULL", "same", "div", "mod", "\x01", std::string(1000, 'a')})));
  return any_attr_value(r);
}

// One to three mutations of `c` (the op's own plausible case).
void corrupt(Rng& r, Case& c, const std::string& op) {
  const int n = static_cast<int>(uni(r, 1, 3));
  for (int k = 0; k < n; ++k) {
    const size_t ni = c.inputs.size();
    switch (r() % 14) {
      case 0:
      case 1:
      case 12:
      case 13:  // an attribute changed within its type (the most productive)
        if (!c.attr_names.empty()) {
          const std::string& a = one_of(r, c.attr_names);
          auto it = c.attrs.all().find(a);
          if (it != c.attrs.all().end() && a != "var_name") {
            c.attrs.set(a, mutate_attr(r, it->second));
            c.notes.push_back("attr " + a + " mutated");
          }
        }
        break;
      case 2:  // an attribute of the wrong type, or missing
        if (!c.attr_names.empty()) {
          const std::string& a = one_of(r, c.attr_names);
          if (a == "var_name") break;
          if (chance(r, 50)) c.attrs.erase(a);
          else c.attrs.set(a, any_attr_value(r));
          c.notes.push_back("attr " + a + " replaced or dropped");
        }
        break;
      case 3:  // an input replaced by a tensor of another dtype and shape
        if (ni) {
          const size_t i = r() % ni;
          c.inputs[i] = make_tensor(r, any_dtype(r), tensor_shape(r), -3, 8, true);
          c.notes.push_back("input " + std::to_string(i) + " replaced");
        }
        break;
      case 4:  // the same shape in another dtype
        if (ni) {
          const size_t i = r() % ni;
          c.inputs[i] = make_tensor(r, any_dtype(r), c.inputs[i].shape(), -3, 8, true);
          c.notes.push_back("input " + std::to_string(i) + " dtype changed");
        }
        break;
      case 5:  // integer values that are hostile as indices, counts and sizes
        if (ni) {
          const size_t i = r() % ni;
          const Tensor& t = c.inputs[i];
          if (t.dtype() == DType::kInt32 || t.dtype() == DType::kInt64) {
            Tensor h = make_tensor(r, t.dtype(), t.shape(), -3, 8, true);
            for (int64_t e = 0; e < h.num_elements(); ++e) {
              if (!chance(r, 50)) continue;
              if (t.dtype() == DType::kInt32) h.data<int32_t>()[e] = static_cast<int32_t>(hostile_int(r));
              else h.data<int64_t>()[e] = hostile_int(r);
            }
            c.inputs[i] = h;
            c.notes.push_back("input " + std::to_string(i) + " hostile values");
          }
        }
        break;
      case 6:  // the shape function is told a shape the tensor does not have
        if (ni) {
          const size_t i = r() % ni;
          c.declared.resize(ni, Shape::unknown());
          for (size_t j = 0; j < ni; ++j)
            if (c.declared[j].unknown_rank() && j != i) c.declared[j] = c.inputs[j].shape();
          c.declared[i] = hostile_shape(r);
          c.notes.push_back("input " + std::to_string(i) + " declared " + c.declared[i].to_string());
        }
        break;
      case 7:  // an input that is (or is not) a constant
        if (ni) {
          const size_t i = r() % ni;
          c.is_const[i] = !c.is_const[i];
        }
        break;
      case 8:  // an input dropped or one too many
        if (ni && chance(r, 50)) {
          c.inputs.pop_back();
          c.is_const.pop_back();
          c.notes.push_back("last input dropped");
        } else {
          add(c, make_tensor(r, any_dtype(r), tensor_shape(r)));
          c.notes.push_back("input added");
        }
        break;
      case 9:  // an unrelated attribute the op does not read
        c.attrs.set(one_of<std::string>(r, {"T", "_class", "N", "value", "shape", "axis"}), any_attr_value(r));
        c.notes.push_back("extra attr");
        break;
      case 10:  // an input of rank 33 or a zero-element shape with huge dims
        if (ni) {
          const size_t i = r() % ni;
          c.inputs[i] = make_tensor(r, c.inputs[i].dtype(), chance(r, 50) ? Shape(std::vector<int64_t>(33, 1))
                                                                            : Shape{0, int64_t{1} << 59, 2});
          c.notes.push_back("input " + std::to_string(i) + " rank 33 or empty huge");
        }
        break;
      default:  // an uninitialised input (a Tensor() from a feed or a peer)
        if (ni && chance(r, 20)) {
          const size_t i = r() % ni;
          c.inputs[i] = Tensor();
          c.notes.push_back("input " + std::to_string(i) + " uninitialised");
        }
        break;
    }
  }
  (void)op;
}

}  // namespace

std::string FuzzCase::describe() const {
  std::string s = "case " + std::to_string(index) + " " + op + " (";
  for (size_t i = 0; i < notes.size(); ++i) s += (i ? ", " : "") + notes[i];
  return s + ")";
}

const std::vector<std::string>& fuzz_ops() {
  static const auto* v = [] {
    auto* out = new std::vector<std::string>();
    for (const auto& [op, spec] : specs()) out->push_back(op);
    return out;
  }();
  return *v;
}

bool fuzz_op_has_kernel(const std::string& op) {
  auto it = specs().find(op);
  return it != specs().end() && it->second.kernel;
}

uint64_t fuzz_case_seed(uint64_t seed, uint64_t k) {
  uint64_t z = seed + (k + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

FuzzCase make_fuzz_case(uint64_t seed, uint64_t k) {
  Rng r(fuzz_case_seed(seed, k));
  FuzzCase c;
  c.index = k;
  c.op = fuzz_ops()[k % fuzz_ops().size()];  // round robin: every op gets its share
  specs().at(c.op).make(r, c);
  if (chance(r, 60)) corrupt(r, c, c.op);
  // A waiting synchronous contribution holds its answer until the other replicas' arrive (the
  // variable actor's own timeout, 60 s): the fuzzer's contributions never wait.
  if (c.op == "ApplyGradientSync" || c.op == "SparseApplyGradientSync") c.attrs.set("wait", false);
  // The checkpoint ops touch only files of the fuzzer's own directory.
  if ((c.op == "SaveV2" || c.op == "RestoreV2") && !c.inputs.empty() && c.inputs[0].is_initialized() &&
      c.inputs[0].dtype() == DType::kUInt8) {
    const std::string path = fuzz_checkpoint_dir() + "/ck" + std::to_string(r() % 4);
    Tensor p(DType::kUInt8, Shape{static_cast<int64_t>(path.size())});
    std::memcpy(p.raw_data(), path.data(), path.size());
    c.inputs[0] = p;
  }
  if (c.op == "MergeV2Checkpoints") {
    auto bytes = [](const std::string& v) {
      Tensor t(DType::kUInt8, Shape{static_cast<int64_t>(v.size())});
      if (!v.empty()) std::memcpy(t.raw_data(), v.data(), v.size());
      return t;
    };
    const std::string dir = fuzz_checkpoint_dir() + "/ck";
    std::string list;
    const int n = static_cast<int>(r() % 3);
    for (int i = 0; i < n; ++i) list += dir + std::to_string(r() % 4) + std::string(1, '\0');
    if (c.inputs.size() > 0 && chance(r, 80)) c.inputs[0] = bytes(list);
    if (c.inputs.size() > 1 && chance(r, 80)) c.inputs[1] = bytes(dir + std::to_string(r() % 4));
    // Whatever the mutations left: only uint8 inputs naming files of the fuzzer's directory run.
    for (Tensor& t : c.inputs)
      if (t.is_initialized() && t.dtype() == DType::kUInt8) {
        const std::string v(reinterpret_cast<const char*>(t.raw_data()), static_cast<size_t>(t.num_elements()));
        bool ours = true;
        for (size_t at = 0; at < v.size();) {
          const size_t end = std::min(v.find('\0', at), v.size());
          ours = ours && v.compare(at, dir.size(), dir) == 0 && v.find('/', at + dir.size()) >= end;
          at = end + 1;
        }
        if (!ours) t = bytes(dir + "0");
      }
  }
  return c;
}

const std::string& fuzz_checkpoint_dir() {
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto* d = new std::string(std::string(tmp && *tmp ? tmp : "/tmp") + "/af_op_fuzz_" + std::to_string(::getpid()));
    ::mkdir(d->c_str(), 0700);
    return d;
  }();
  return *dir;
}

Graph fuzz_graph(const FuzzCase& c, bool with_op, int outputs) {
  Graph g;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Tensor& t = c.inputs[i];
    Node in;
    in.name = "in" + std::to_string(i);
    const Shape declared = i < c.declared.size() ? c.declared[i] : t.shape();
    const DType dt = t.is_initialized() ? t.dtype() : DType::kFloat32;
    if (c.is_const[i] && t.is_initialized()) {
      in.op = "Const";
      in.attrs.set("value", t);
      in.attrs.set("dtype", dt);
    } else {
      in.op = "Placeholder";
      in.attrs.set("dtype", dt);
      in.attrs.set("shape", declared);
    }
    in.output_types = {dt};
    in.output_shapes = {declared};
    (void)g.add_node(std::move(in));
  }
  if (with_op) {
    Node n = fuzz_node(c);
    n.output_types.assign(static_cast<size_t>(outputs), DType::kFloat32);
    n.output_shapes.assign(static_cast<size_t>(outputs), Shape::unknown());
    (void)g.add_node(std::move(n));
  }
  return g;
}

Node fuzz_node(const FuzzCase& c) {
  Node n;
  n.op = c.op;
  n.name = "fuzz";
  n.attrs = c.attrs;
  for (size_t i = 0; i < c.inputs.size(); ++i) n.inputs.push_back(Endpoint{static_cast<int>(i), 0});
  return n;
}

bool acceptable_refusal(const Status& s, const std::string& who) {
  if (s.message().find(who) == std::string::npos) return false;
  switch (s.code()) {
    case Code::kInvalidArgument:
    case Code::kResourceExhausted:
    case Code::kUnimplemented:
    case Code::kFailedPrecondition:
    case Code::kOutOfRange:
    case Code::kNotFound:
      return true;
    default:
      return false;
  }
}

}  // namespace testing
}  // namespace actorflow
