// Every kernel registered for the GPU against the CPU kernel of the same op, on fresh random data,
// per dtype (after ggml's test-backend-ops). The walk is driven by the kernel registry: a GPU
// kernel without a case here fails GpuBackendOpsTest.EveryGpuKernelHasACase, on machines without
// a GPU too. For each case and each dtype it lists, the node is built through the op's shape
// function, the GPU and the CPU kernel run on the same inputs and the outputs must agree within
// the dtype's tolerance (NaN or Inf never passes); every dtype a case does not list must be
// refused by the GPU kernel (so a kernel that starts accepting a dtype needs a comparison).
// Variable ops run as short sequences on fresh variables of a real variable actor, once from the
// GPU and once from the CPU.
//
// Without a visible GPU the comparisons skip with "no CUDA GPU visible: <why>"; the case table
// itself is still checked here by running every case on the CPU (CasesRunOnTheCpu).
// The data is random per run; the seed is printed with every failure (AF_TEST_SEED=<n> repeats it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "device/device.h"
#include "device/kernel.h"
#include "graph/op_registry.h"
#include "tests/util/kernel_run.h"

#ifdef AF_WITH_CUDA
#include "device/cuda/cuda_device.h"
#endif

namespace actorflow {
namespace {

// ---- the case table --------------------------------------------------------------------------------

constexpr DType kT = DType::kInvalid;  // an input (or variable) of the dtype under test
const std::vector<DType> kAllTypes = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                      DType::kInt64,   DType::kUInt8,   DType::kBool};
const std::vector<DType> kNumeric = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64};
const std::vector<DType> kFloating = {DType::kFloat32, DType::kFloat64};

// How an input's values are drawn (per dtype: floats in [lo, hi]; integers in [lo, hi] rounded;
// uint8 in [0, 20] unless lo >= 0; bool fair coins).
enum class Gen {
  kUniform,     // [lo, hi]
  kAwayFromZero,  // [lo, hi] with a random sign (lo > 0): divisors
  kBool,        // fair coins (the input's dtype is bool whatever T is)
  kFixed,       // `fixed` as given
  kStep,        // int64 scalar: the repetition number of the step (variable sequences)
};

struct In {
  Shape shape;
  DType dtype = kT;
  Gen gen = Gen::kUniform;
  double lo = -1, hi = 1;
  Tensor fixed;
  bool constant = false;  // the shape function sees the value (as for a Const input)
};

In t_in(Shape s, double lo = -1, double hi = 1) {
  In i;
  i.shape = std::move(s);
  i.lo = lo;
  i.hi = hi;
  return i;
}
In away_in(Shape s, double lo, double hi) {
  In i = t_in(std::move(s), lo, hi);
  i.gen = Gen::kAwayFromZero;
  return i;
}
In typed_in(Shape s, DType d, double lo = -1, double hi = 1) {
  In i = t_in(std::move(s), lo, hi);
  i.dtype = d;
  return i;
}
In bool_in(Shape s) {
  In i = t_in(std::move(s));
  i.dtype = DType::kBool;
  i.gen = Gen::kBool;
  return i;
}
In fixed_in(Tensor t, bool constant = false) {
  In i;
  i.shape = t.shape();
  i.dtype = t.dtype();
  i.gen = Gen::kFixed;
  i.fixed = std::move(t);
  i.constant = constant;
  return i;
}
In scalar_f32(float v) { return fixed_in(Tensor::scalar<float>(v)); }
In step_in() {
  In i;
  i.shape = Shape{};
  i.dtype = DType::kInt64;
  i.gen = Gen::kStep;
  return i;
}

// One kernel run of a variable sequence.
struct Step {
  std::string op;
  AttrMap attrs;
  std::vector<In> inputs;
};

struct OpCase {
  std::string op;
  std::string label;  // tells cases of one op apart ("" for the first)
  AttrMap attrs;
  std::vector<In> inputs;
  std::vector<DType> dtypes;  // the dtypes compared
  // Attributes that depend on the dtype under test (Fill's dtype, a variable's dtype).
  std::function<void(AttrMap&, DType)> typed_attrs;
  // Post-processing of the drawn host inputs (MaxPoolGrad's orig_output, Xent's labels).
  std::function<Status(std::vector<Tensor>&)> prepare;
  bool tf32 = false;          // float32 may run on TF32 tensor cores (cuDNN's default math)
  // Dtypes the CPU kernel lacks (float64 for the oneDNN kernels): the data is drawn in float32,
  // widened for the GPU, and the GPU's result is compared with the CPU's float32 result.
  std::set<DType> f32_reference;
  bool probe = true;          // every dtype not listed must be refused by the GPU kernel
  std::string no_probe_why;   // why not (the op has no dtype to vary)
  bool expect_error = false;  // both kernels fail, with the same message (Placeholder)
  // Variable ops: a sequence on a fresh variable of shape var_shape and the dtype under test:
  // `before`, the op `repeat` times, `after`; every step's output is compared.
  bool variable = false;
  Shape var_shape;
  std::vector<Step> before, after;
  int repeat = 1;

  std::string name() const { return label.empty() ? op : op + "_" + label; }
};

AttrMap attrs_of(std::initializer_list<std::pair<const char*, AttrValue>> kv) {
  AttrMap a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

OpCase simple(std::string op, std::vector<In> in, std::vector<DType> dtypes, AttrMap attrs = {}) {
  OpCase c;
  c.op = std::move(op);
  c.inputs = std::move(in);
  c.dtypes = std::move(dtypes);
  c.attrs = std::move(attrs);
  return c;
}

// An actorflow slot blob (actors/variable_actor.cc) with one momentum slot (id 1) of `values`.
Tensor momentum_slot_blob(const std::vector<float>& values) {
  std::vector<uint8_t> b = {'A', 'F', 'S', 'L', 'O', 'T', 'S', '1'};
  for (int i = 0; i < 8; ++i) b.push_back(0);  // adam_t = 0
  b.push_back(1);                              // one slot
  for (int i = 0; i < 3; ++i) b.push_back(0);
  b.push_back(1);  // momentum
  const size_t at = b.size();
  b.resize(at + values.size() * sizeof(float));
  std::memcpy(b.data() + at, values.data(), values.size() * sizeof(float));
  return Tensor::from_vector<uint8_t>(b, Shape{static_cast<int64_t>(b.size())});
}

OpCase variable_case(std::string op, std::vector<In> in, std::vector<DType> dtypes, Shape var_shape,
                     std::vector<Step> before, int repeat = 1, std::vector<Step> after = {}, AttrMap attrs = {}) {
  OpCase c = simple(std::move(op), std::move(in), std::move(dtypes), std::move(attrs));
  c.variable = true;
  c.var_shape = std::move(var_shape);
  c.before = std::move(before);
  c.after = std::move(after);
  c.repeat = repeat;
  return c;
}

// The table: at least one case for every op with a GPU kernel.
const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> table = [] {
    std::vector<OpCase> v;
    const Shape m{7, 9};
    // Core ops (device-independent kernels registered for every device).
    {
      OpCase c = simple("Const", {}, kAllTypes);
      c.typed_attrs = [](AttrMap& a, DType t) {
        std::mt19937 rng(5);
        Tensor x(t, Shape{3, 4});
        for (int64_t i = 0; i < x.num_elements(); ++i)
          dispatch_dtype(t, [&](auto zero) {
            using E = decltype(zero);
            x.data<E>()[i] = static_cast<E>(static_cast<int>(rng() % 7));
            return 0;
          });
        a.set("value", x);
      };
      v.push_back(c);
    }
    v.push_back(simple("Identity", {t_in(m)}, kAllTypes));
    v.push_back(simple("StopGradient", {t_in(m)}, kAllTypes));
    {
      OpCase c = simple("NoOp", {}, {DType::kFloat32});
      c.probe = false;
      c.no_probe_why = "NoOp has no inputs or outputs";
      v.push_back(c);
    }
    {
      OpCase c = simple("Placeholder", {}, kAllTypes, attrs_of({{"shape", Shape{2, 3}}}));
      c.typed_attrs = [](AttrMap& a, DType t) { a.set("dtype", t); };
      c.expect_error = true;
      c.probe = false;
      c.no_probe_why = "a Placeholder always fails (it must be fed)";
      v.push_back(c);
    }
    v.push_back(simple("ExpandDims", {t_in(m)}, kAllTypes, attrs_of({{"axes", std::vector<int64_t>{1}}})));
    v.push_back(simple("ReshapeLike", {t_in(Shape{6, 4}), t_in(Shape{3, 8})}, kAllTypes));
    v.push_back(simple("EnsureShape", {t_in(m)}, kAllTypes, attrs_of({{"shape", Shape{7, 9}}})));
    // Elementwise.
    const Shape a3{4, 1, 6}, b3{5, 1};
    for (const char* op : {"Add", "Sub", "Mul", "Maximum"}) {
      v.push_back(simple(op, {t_in(a3, -10, 10), t_in(b3, -10, 10)}, kNumeric));
      OpCase same = simple(op, {t_in(m, -10, 10), t_in(m, -10, 10)}, kNumeric);
      same.label = "same_shape";
      v.push_back(same);
      OpCase sc = simple(op, {t_in(m, -10, 10), t_in(Shape{}, -10, 10)}, kNumeric);
      sc.label = "scalar";
      v.push_back(sc);
    }
    v.push_back(simple("Div", {t_in(a3, -10, 10), away_in(b3, 1, 10)}, kNumeric));
    v.push_back(simple("Greater", {t_in(a3, -10, 10), t_in(b3, -10, 10)}, kNumeric));
    v.push_back(simple("Equal", {t_in(a3, -3, 3), t_in(b3, -3, 3)}, kAllTypes));
    v.push_back(simple("Neg", {t_in(m, -10, 10)}, kNumeric));
    v.push_back(simple("Square", {t_in(m, -10, 10)}, kNumeric));
    v.push_back(simple("Log", {t_in(m, 0.05, 20)}, kFloating));
    v.push_back(simple("Exp", {t_in(m, -5, 5)}, kFloating));
    v.push_back(simple("Sqrt", {t_in(m, 0, 20)}, kFloating));
    v.push_back(simple("Relu", {t_in(m)}, kFloating));
    v.push_back(simple("ReluGrad", {t_in(m), t_in(m)}, kFloating));
    v.push_back(simple("Select", {bool_in(m), t_in(m, -5, 5), t_in(m, -5, 5)}, kAllTypes));
    {
      OpCase c = simple("Select", {bool_in(Shape{}), t_in(m, -5, 5), t_in(m, -5, 5)}, kAllTypes);
      c.label = "scalar_condition";
      v.push_back(c);
    }
    v.push_back(simple("AddN", {t_in(m, -10, 10), t_in(m, -10, 10), t_in(m, -10, 10)}, kNumeric));
    {
      OpCase c = simple("AddN", {t_in(m, -10, 10)}, kNumeric);
      c.label = "one_input";
      v.push_back(c);
    }
    v.push_back(simple("BiasAdd", {t_in(Shape{3, 5, 6}), t_in(Shape{6})}, kFloating));
    for (DType to : kAllTypes) {
      OpCase c = simple("Cast", {t_in(m, 0, 200)}, kAllTypes, attrs_of({{"DstT", to}}));
      c.label = std::string("to_") + dtype_name(to);
      v.push_back(c);
    }
    // Array ops.
    v.push_back(simple("Reshape", {t_in(Shape{4, 6})}, kAllTypes, attrs_of({{"shape", std::vector<int64_t>{3, -1}}})));
    v.push_back(simple("Shape", {t_in(Shape{2, 3, 5})}, kAllTypes));
    v.push_back(simple("ZerosLike", {t_in(m)}, kAllTypes));
    v.push_back(simple("OnesLike", {t_in(m)}, kAllTypes));
    v.push_back(simple("Transpose", {t_in(Shape{3, 4, 5, 6}, -9, 9)}, kAllTypes,
                       attrs_of({{"perm", std::vector<int64_t>{2, 0, 3, 1}}})));
    v.push_back(simple("OneHot", {t_in(Shape{4, 5}, -1, 6)}, {DType::kInt32, DType::kInt64},
                       attrs_of({{"depth", int64_t{6}}, {"on_value", 2.0}, {"off_value", -0.5}})));
    // Reductions.
    const AttrMap axes02 = attrs_of({{"axes", std::vector<int64_t>{0, 2}}});
    const AttrMap axis1_keep = attrs_of({{"axes", std::vector<int64_t>{1}}, {"keep_dims", true}});
    for (const char* op : {"Sum", "Mean", "Max"}) {
      v.push_back(simple(op, {t_in(Shape{6, 7, 8}, -10, 10)}, kNumeric, axes02));
      OpCase k = simple(op, {t_in(Shape{5, 9}, -10, 10)}, kNumeric, axis1_keep);
      k.label = "keep_dims";
      v.push_back(k);
      // The block-per-output path; positive data, so that a sum never cancels to near zero (its
      // rounding in another order would then be large against the result).
      OpCase all = simple(op, {t_in(Shape{3000}, 0, 10)}, kNumeric);
      all.label = "all";
      v.push_back(all);
    }
    v.push_back(simple("BiasAddGrad", {t_in(Shape{6, 7, 8})}, kFloating));
    v.push_back(simple("ArgMax", {t_in(Shape{5, 7, 3}, -10, 10)}, kNumeric, attrs_of({{"axis", int64_t{1}}})));
    v.push_back(simple("SumToShape", {t_in(Shape{4, 3, 5}, -10, 10), t_in(Shape{3, 1})}, kNumeric));
    // Neural-network ops (the seed CNN's shapes, scaled down, and an asymmetric SAME padding).
    const AttrMap conv = attrs_of({{"strides", std::vector<int64_t>{1, 2, 2, 1}}, {"padding", std::string("SAME")}});
    const AttrMap conv_valid =
        attrs_of({{"strides", std::vector<int64_t>{1, 1, 1, 1}}, {"padding", std::string("VALID")}});
    {
      OpCase c = simple("MatMul", {t_in(Shape{33, 17}), t_in(Shape{17, 9})}, kFloating);
      c.tf32 = true;
      v.push_back(c);
      OpCase t = simple("MatMul", {t_in(Shape{17, 33}), t_in(Shape{9, 17})}, kFloating,
                        attrs_of({{"transpose_a", true}, {"transpose_b", true}}));
      t.label = "transposed";
      t.tf32 = true;
      v.push_back(t);
    }
    {
      OpCase c = simple("Conv2D", {t_in(Shape{2, 9, 9, 4}), t_in(Shape{3, 3, 4, 8})}, kFloating, conv);
      c.tf32 = true;
      v.push_back(c);
      OpCase s = simple("Conv2D", {t_in(Shape{3, 14, 14, 2}), t_in(Shape{5, 5, 2, 6})}, kFloating,
                        attrs_of({{"strides", std::vector<int64_t>{1, 1, 1, 1}}, {"padding", std::string("SAME")}}));
      s.label = "seed_5x5";
      s.tf32 = true;
      v.push_back(s);
      OpCase va = simple("Conv2D", {t_in(Shape{2, 8, 7, 3}), t_in(Shape{2, 2, 3, 5})}, kFloating, conv_valid);
      va.label = "valid_even";
      va.tf32 = true;
      v.push_back(va);
    }
    {
      OpCase c = simple("Conv2DBackpropInput",
                        {fixed_in(Tensor::from_vector<int32_t>({2, 9, 9, 4}, Shape{4}), true), t_in(Shape{3, 3, 4, 8}),
                         t_in(Shape{2, 5, 5, 8})},
                        kFloating, conv);
      c.tf32 = true;
      v.push_back(c);
    }
    {
      AttrMap f = conv;
      f.set("filter_sizes", std::vector<int64_t>{3, 3, 4, 8});
      OpCase c = simple("Conv2DBackpropFilter", {t_in(Shape{2, 9, 9, 4}), t_in(Shape{2, 5, 5, 8})}, kFloating, f);
      c.tf32 = true;
      v.push_back(c);
    }
    AttrMap pool = conv;
    pool.set("ksize", std::vector<int64_t>{1, 3, 3, 1});
    v.push_back(simple("MaxPool", {t_in(Shape{2, 9, 9, 4})}, kFloating, pool));
    {
      OpCase c = simple("MaxPoolGrad", {t_in(Shape{2, 9, 9, 4}), t_in(Shape{2, 5, 5, 4}), t_in(Shape{2, 5, 5, 4})},
                        kFloating, pool);
      // orig_output = MaxPool(x), computed by the CPU kernel.
      c.prepare = [pool](std::vector<Tensor>& in) -> Status {
        Node n;
        n.name = "orig";
        n.op = "MaxPool";
        n.inputs.resize(1);
        n.attrs = pool;
        n.output_types = {in[0].dtype()};
        auto dev = make_cpu_device("/job:t/replica:0/task:0/device:CPU:0", 0);
        AF_ASSIGN_OR_RETURN(auto k, KernelRegistry::global().create(n, "CPU"));
        OpKernelContext ctx(n, dev.get(), {in[0]}, 1);
        AF_RETURN_IF_ERROR(k->compute(ctx));
        in[1] = ctx.outputs()[0];
        return Status::OK();
      };
      v.push_back(c);
    }
    v.push_back(simple("Softmax", {t_in(Shape{5, 11}, -5, 5)}, kFloating));
    {
      OpCase c = simple("SoftmaxCrossEntropyWithLogits", {t_in(Shape{5, 11}, -5, 5), t_in(Shape{5, 11}, 0, 1)},
                        kFloating);
      c.prepare = [](std::vector<Tensor>& in) -> Status {  // labels: each row a distribution
        Tensor& l = in[1];
        return dispatch_dtype(l.dtype(), [&](auto zero) -> Status {
          using E = decltype(zero);
          if constexpr (std::is_floating_point_v<E>) {
            const int64_t rows = l.shape().dim(0), cols = l.shape().dim(1);
            for (int64_t r = 0; r < rows; ++r) {
              E sum = 0;
              for (int64_t k = 0; k < cols; ++k) sum += l.data<E>()[r * cols + k];
              for (int64_t k = 0; k < cols; ++k) l.data<E>()[r * cols + k] /= sum;
            }
          }
          return Status::OK();
        });
      };
      v.push_back(c);
    }
    // Initializers (computed on the host for the GPU).
    {
      OpCase c = simple("Fill", {}, kAllTypes, attrs_of({{"shape", Shape{3, 4}}, {"value", 1.0}}));
      c.typed_attrs = [](AttrMap& a, DType t) { a.set("dtype", t); };
      c.probe = false;
      c.no_probe_why = "Fill's dtype is an attribute; every dtype is compared";
      v.push_back(c);
    }
    for (const char* op : {"RandomUniform", "TruncatedNormal"}) {
      OpCase c = simple(op, {}, {DType::kFloat32},
                        attrs_of({{"shape", Shape{64}}, {"seed", int64_t{7}}, {"seed2", int64_t{3}}}));
      c.probe = false;
      c.no_probe_why = "the random ops produce float32 only";
      v.push_back(c);
    }
    // Variable ops: sequences on a fresh variable (a real variable actor).
    const Shape vs{6, 5};
    const Step assign{"Assign", {}, {t_in(vs, -3, 3)}};
    const Step read{"VariableV2", {}, {}};
    const In lr = scalar_f32(0.05f);
    v.push_back(variable_case("VariableV2", {}, kAllTypes, vs, {assign}, 2));
    v.push_back(variable_case("Assign", {t_in(vs, -3, 3)}, kAllTypes, vs, {}, 2, {read}));
    v.push_back(variable_case("AssignAdd", {t_in(vs, -3, 3)}, kAllTypes, vs, {assign}, 2, {read}));
    v.push_back(variable_case("IsVariableInitialized", {}, kAllTypes, vs, {}, 1,
                              {assign, Step{"IsVariableInitialized", {}, {}}}));
    for (const char* op : {"ScatterAdd", "ScatterUpdate"}) {
      v.push_back(variable_case(op, {typed_in(Shape{4}, DType::kInt64, 0, 5.99), t_in(Shape{4, 5}, -3, 3)}, kAllTypes,
                                vs, {assign}, 2, {read}));
    }
    const In ids = typed_in(Shape{7}, DType::kInt64, 0, 5.99);  // duplicates likely
    const In rows = t_in(Shape{7, 5});
    v.push_back(variable_case("SparseApplyGradientDescent", {lr, ids, rows}, {DType::kFloat32}, vs, {assign}, 3, {read}));
    v.push_back(variable_case("SparseApplyMomentum", {lr, ids, rows, scalar_f32(0.9f)}, {DType::kFloat32}, vs,
                              {assign}, 3, {read}));
    v.push_back(variable_case("SparseApplyAdam",
                              {lr, scalar_f32(0.9f), scalar_f32(0.999f), scalar_f32(1e-7f), ids, rows},
                              {DType::kFloat32}, vs, {assign}, 3, {read}));
    v.push_back(variable_case("SparseApplyAdagrad", {lr, ids, rows}, {DType::kFloat32}, vs, {assign}, 3, {read},
                              attrs_of({{"initial_accumulator_value", 0.1}})));
    v.push_back(variable_case("SparseApplyRMSProp", {lr, scalar_f32(0.9f), scalar_f32(0.5f), scalar_f32(1e-6f), ids, rows},
                              {DType::kFloat32}, vs, {assign}, 3, {read}));
    v.push_back(variable_case("SparseApplyFtrl", {lr, scalar_f32(0.01f), scalar_f32(0.02f), scalar_f32(-0.5f), ids, rows},
                              {DType::kFloat32}, vs, {assign}, 3, {read}, attrs_of({{"initial_accumulator_value", 0.1}})));
    const In grad = t_in(vs);
    v.push_back(variable_case("ApplyGradientDescent", {lr, grad}, {DType::kFloat32}, vs, {assign}, 3, {read}));
    v.push_back(variable_case("ApplyMomentum", {lr, grad, scalar_f32(0.9f)}, {DType::kFloat32}, vs, {assign}, 3, {read}));
    v.push_back(variable_case("ApplyAdam", {lr, scalar_f32(0.9f), scalar_f32(0.999f), scalar_f32(1e-7f), grad},
                              {DType::kFloat32}, vs, {assign}, 3, {read}));
    v.push_back(variable_case("ApplyAdagrad", {lr, grad}, {DType::kFloat32}, vs, {assign}, 3, {read},
                              attrs_of({{"initial_accumulator_value", 0.1}})));
    v.push_back(variable_case("ApplyRMSProp", {lr, scalar_f32(0.9f), scalar_f32(0.5f), scalar_f32(1e-6f), grad},
                              {DType::kFloat32}, vs, {assign}, 3, {read}));
    v.push_back(variable_case("ApplyFtrl", {lr, scalar_f32(0.01f), scalar_f32(0.02f), scalar_f32(-0.5f), grad},
                              {DType::kFloat32}, vs, {assign}, 3, {read}, attrs_of({{"initial_accumulator_value", 0.1}})));
    const AttrMap sync = attrs_of({{"optimizer", std::string("sgd")},
                                   {"lr", 0.1},
                                   {"replicas_to_aggregate", int64_t{1}},
                                   {"total_num_replicas", int64_t{1}},
                                   {"wait", false}});
    for (const char* op : {"ApplyGradientSync", "SparseApplyGradientSync"}) {
      std::vector<In> in = std::string(op) == "ApplyGradientSync" ? std::vector<In>{grad, step_in()}
                                                                    : std::vector<In>{ids, rows, step_in()};
      OpCase c = variable_case(op, in, {DType::kFloat32}, vs, {assign}, 3, {read}, sync);
      c.probe = false;
      c.no_probe_why =
          "the synchronous accumulator runs on the host for every device and answers with the step whatever the "
          "dtype; optimizers update float32 variables";
      v.push_back(c);
    }
    {
      Step contribution{"ApplyGradientSync", sync, {grad, step_in()}};
      OpCase c = variable_case("SyncAccumulatorControl", {}, {DType::kFloat32}, vs, {assign, contribution}, 1, {},
                               attrs_of({{"action", std::string("stats")}}));
      c.probe = false;
      c.no_probe_why = "the accumulator's statistics do not depend on the variable's dtype";
      v.push_back(c);
    }
    {
      // After one momentum step the accumulator equals the gradient exactly on both devices.
      Step momentum{"ApplyMomentum", {}, {lr, grad, scalar_f32(0.9f)}};
      OpCase c = variable_case("VariableSlots", {}, {DType::kFloat32}, vs, {assign, momentum}, 1, {read});
      c.probe = false;
      c.no_probe_why = "the slot blob is bytes whatever the dtype";
      v.push_back(c);
    }
    {
      std::vector<float> slot(static_cast<size_t>(vs.num_elements()));
      for (size_t i = 0; i < slot.size(); ++i) slot[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
      Step momentum{"ApplyMomentum", {}, {lr, grad, scalar_f32(0.9f)}};
      OpCase c = variable_case("RestoreVariableSlots", {fixed_in(momentum_slot_blob(slot))}, {DType::kFloat32}, vs,
                               {assign}, 1, {momentum, read});
      c.probe = false;
      c.no_probe_why = "the slot blob is bytes whatever the dtype";
      v.push_back(c);
    }
    // The CPU kernels of these ops are float32 only (oneDNN, or written for float32).
    const std::set<std::string> cpu_f32_only = {"Relu",    "ReluGrad", "BiasAdd",  "BiasAddGrad",
                                                "MatMul",  "Conv2D",   "Conv2DBackpropInput",
                                                "Conv2DBackpropFilter", "MaxPool", "MaxPoolGrad",
                                                "Softmax", "SoftmaxCrossEntropyWithLogits"};
    for (OpCase& c : v)
      if (cpu_f32_only.count(c.op)) c.f32_reference = {DType::kFloat64};
    return v;
  }();
  return table;
}

std::vector<std::string> case_names() {
  std::vector<std::string> out;
  for (const auto& c : cases()) out.push_back(c.name());
  return out;
}

const OpCase* find_case(const std::string& name) {
  for (const auto& c : cases())
    if (c.name() == name) return &c;
  return nullptr;
}

// ---- running a case ------------------------------------------------------------------------------------

uint64_t base_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("AF_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(s, nullptr, 10));
    return static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}();
  }();
  return seed;
}

DType resolve(DType d, DType t) { return d == kT ? t : d; }

// The host value of input `in` for dtype `t`.
Tensor draw(const In& in, DType t, int step, std::mt19937_64& rng) {
  const DType d = resolve(in.dtype, t);
  if (in.gen == Gen::kFixed) return in.fixed;
  if (in.gen == Gen::kStep) return Tensor::scalar<int64_t>(step);
  Tensor x(d, in.shape);
  std::uniform_real_distribution<double> u(in.lo, in.hi);
  std::bernoulli_distribution coin(0.5);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    double v = u(rng);
    if (in.gen == Gen::kAwayFromZero && coin(rng)) v = -v;
    switch (d) {
      case DType::kFloat32: x.data<float>()[i] = static_cast<float>(v); break;
      case DType::kFloat64: x.data<double>()[i] = v; break;
      case DType::kInt32: x.data<int32_t>()[i] = static_cast<int32_t>(std::floor(v)); break;
      case DType::kInt64: x.data<int64_t>()[i] = static_cast<int64_t>(std::floor(v)); break;
      case DType::kUInt8: {
        const double lo = in.lo >= 0 ? in.lo : 0, hi = in.lo >= 0 ? in.hi : 20;
        x.data<uint8_t>()[i] = static_cast<uint8_t>(lo + (hi - lo) * (v - in.lo) / (in.hi - in.lo));
        break;
      }
      case DType::kBool: x.data<bool>()[i] = coin(rng); break;
      default: break;
    }
  }
  // Integers drawn for divisors must not be 0.
  if (in.gen == Gen::kAwayFromZero && (d == DType::kInt32 || d == DType::kInt64))
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      if (d == DType::kInt32 && x.data<int32_t>()[i] == 0) x.data<int32_t>()[i] = 1;
      if (d == DType::kInt64 && x.data<int64_t>()[i] == 0) x.data<int64_t>()[i] = 1;
    }
  return x;
}

// The node of `op` for these inputs, its outputs inferred by the op's shape function.
Result<Node> make_node(const std::string& op, const AttrMap& attrs, const std::vector<Tensor>& in,
                       const std::vector<bool>& constant) {
  Node n;
  n.name = "op";
  n.op = op;
  n.inputs.resize(in.size());  // the registry checks the op's input count
  n.attrs = attrs;
  AF_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::global().lookup(op));
  std::vector<DType> types;
  std::vector<Shape> shapes;
  std::vector<const Tensor*> values;
  for (size_t i = 0; i < in.size(); ++i) {
    types.push_back(in[i].dtype());
    shapes.push_back(in[i].shape());
    values.push_back(i < constant.size() && constant[i] ? &in[i] : nullptr);
  }
  InferenceContext ctx(n, types, shapes, values);
  if (def->shape_fn) AF_RETURN_IF_ERROR(def->shape_fn(ctx).with_prefix(op));
  n.output_types = ctx.out_types;
  n.output_shapes = ctx.out_shapes;
  return n;
}

using testing::ActorResources;
using testing::run_node;

// One kernel run of a case: its node and host inputs.
struct Run {
  Node node;
  std::vector<Tensor> inputs;
  std::string what;  // "step 3 (ApplyAdam)"
};

// `x` converted to dtype `to` (float32 <-> float64; other dtypes unchanged).
Tensor cast_float(const Tensor& x, DType to) {
  if (x.dtype() == to || !dtype_is_floating(x.dtype()) || !dtype_is_floating(to)) return x;
  Tensor y(to, x.shape());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    if (to == DType::kFloat64) y.data<double>()[i] = x.data<float>()[i];
    else y.data<float>()[i] = static_cast<float>(x.data<double>()[i]);
  }
  return y;
}

// The dtype case `c` draws its data in for dtype `t`: float32 for a CPU-less dtype.
DType draw_type(const OpCase& c, DType t) { return c.f32_reference.count(t) ? DType::kFloat32 : t; }

// The runs of case `c` for dtype `t` (one for an op; the sequence for a variable op, whose
// variable is named `var`). Inputs are drawn from `rng` in draw_type(c, t); `as_drawn` builds the
// runs in that dtype (the CPU's reference for a CPU-less dtype), otherwise the drawn inputs of the
// dtype under test are widened to `t`.
Result<std::vector<Run>> plan_runs(const OpCase& c, DType t, const std::string& var, std::mt19937_64& rng,
                                   bool as_drawn = false) {
  const DType dt = draw_type(c, t);
  const DType run_t = as_drawn ? dt : t;
  std::vector<Step> steps = c.before;
  for (int i = 0; i < c.repeat; ++i) steps.push_back(Step{c.op, c.attrs, c.inputs});
  steps.insert(steps.end(), c.after.begin(), c.after.end());
  if (!c.variable) steps = {Step{c.op, c.attrs, c.inputs}};
  std::vector<Run> runs;
  int step_no = 0;
  for (const Step& s : steps) {
    Run r;
    AttrMap attrs = s.attrs;
    if (c.typed_attrs) c.typed_attrs(attrs, run_t);
    if (c.variable) {
      attrs.set("var_name", var);
      attrs.set("dtype", run_t);
      attrs.set("shape", c.var_shape);
    }
    std::vector<bool> constant;
    for (const In& in : s.inputs) {
      r.inputs.push_back(draw(in, dt, step_no, rng));
      constant.push_back(in.constant);
    }
    if (s.op == c.op && c.prepare) AF_RETURN_IF_ERROR(c.prepare(r.inputs));
    for (size_t i = 0; i < s.inputs.size(); ++i)
      if (s.inputs[i].dtype == kT) r.inputs[i] = cast_float(r.inputs[i], run_t);
    AF_ASSIGN_OR_RETURN(r.node, make_node(s.op, attrs, r.inputs, constant));
    r.what = "step " + std::to_string(step_no) + " (" + s.op + ")";
    runs.push_back(std::move(r));
    ++step_no;
  }
  return runs;
}

// ---- comparing -----------------------------------------------------------------------------------------

// The relative tolerance for dtype `t` (0: exact). Errors are measured against
// max(|cpu value|, RMS of the CPU output), so near-zero elements of a sum do not count alone.
double tolerance(DType t, bool tf32) {
  switch (t) {
    case DType::kFloat32: return tf32 ? 2e-2 : 2e-5;
    case DType::kFloat64: return 1e-10;
    default: return 0;
  }
}

double value_at(const Tensor& x, int64_t i) {
  return dispatch_dtype(x.dtype(), [&](auto zero) -> double {
    using E = decltype(zero);
    return static_cast<double>(x.data<E>()[i]);
  });
}

// OK when `gpu` matches `cpu`; otherwise says where and by how much.
Status compare(const Tensor& gpu, const Tensor& cpu, double rtol) {
  if (gpu.dtype() != cpu.dtype())
    return Internal(std::string("dtype ") + dtype_name(gpu.dtype()) + " vs the CPU's " + dtype_name(cpu.dtype()));
  if (gpu.shape() != cpu.shape())
    return Internal("shape " + gpu.shape().to_string() + " vs the CPU's " + cpu.shape().to_string());
  const int64_t n = cpu.num_elements();
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double c = value_at(cpu, i), g = value_at(gpu, i);
    if (!std::isfinite(c) || !std::isfinite(g))
      return Internal("element " + std::to_string(i) + " is not finite: GPU " + std::to_string(g) + ", CPU " +
                      std::to_string(c));
    ss += c * c;
  }
  const double rms = n ? std::sqrt(ss / static_cast<double>(n)) : 0;
  double worst = 0;
  int64_t worst_at = -1;
  for (int64_t i = 0; i < n; ++i) {
    const double c = value_at(cpu, i), g = value_at(gpu, i);
    const double err = std::fabs(g - c);
    if (rtol == 0) {
      if (g != c)
        return Internal("element " + std::to_string(i) + ": GPU " + std::to_string(g) + " != CPU " + std::to_string(c));
      continue;
    }
    const double rel = err / std::max({std::fabs(c), rms, 1e-30});
    if (rel > worst) {
      worst = rel;
      worst_at = i;
    }
  }
  if (worst > rtol)
    return Internal("element " + std::to_string(worst_at) + ": GPU " + std::to_string(value_at(gpu, worst_at)) +
                    " vs CPU " + std::to_string(value_at(cpu, worst_at)) + ", relative error " + std::to_string(worst) +
                    " > " + std::to_string(rtol));
  return Status::OK();
}

// Runs case `c` for dtype `t` on `dev` (the CPU device `cpu` gives the reference unless null):
// every run's outputs compared. `seed` draws the inputs; `var` prefixes the variable names.
Status run_case(const OpCase& c, DType t, Device* dev, Device* cpu, ActorResources* res, uint64_t seed,
                const std::string& var) {
  std::mt19937_64 rng(seed);
  // Without a reference device (checking the table on the CPU) the runs are the reference's.
  AF_ASSIGN_OR_RETURN(std::vector<Run> runs, plan_runs(c, t, var + "_" + dev->type(), rng, /*as_drawn=*/cpu == nullptr));
  std::vector<Run> ref_runs;
  if (cpu) {
    std::mt19937_64 rng2(seed);
    AF_ASSIGN_OR_RETURN(ref_runs, plan_runs(c, t, var + "_ref", rng2, /*as_drawn=*/true));
  }
  const bool widened = draw_type(c, t) != t;
  for (size_t i = 0; i < runs.size(); ++i) {
    auto got = run_node(runs[i].node, dev, runs[i].inputs, res);
    if (!cpu) {  // checking the table: the run succeeds with finite outputs
      if (!got.ok()) return got.status().with_prefix(runs[i].what);
      for (const Tensor& o : *got) AF_RETURN_IF_ERROR(compare(o, o, 0).with_prefix(runs[i].what));
      continue;
    }
    auto want = run_node(ref_runs[i].node, cpu, ref_runs[i].inputs, res);
    if (c.expect_error && i + 1 == runs.size()) {
      if (got.ok() || want.ok()) return Internal(runs[i].what + ": expected both kernels to fail");
      if (got.status().message() != want.status().message())
        return Internal(runs[i].what + ": GPU error '" + got.status().message() + "' vs CPU error '" +
                        want.status().message() + "'");
      continue;
    }
    if (!want.ok()) return want.status().with_prefix(runs[i].what + " on the CPU");
    if (!got.ok()) return got.status().with_prefix(runs[i].what + " on " + dev->type());
    if (got->size() != want->size()) return Internal(runs[i].what + ": output counts differ");
    for (size_t o = 0; o < got->size(); ++o) {
      const Tensor& w = (*want)[o];
      // A widened dtype: the GPU's exact result against the CPU's float32 one.
      const Tensor g = widened ? cast_float((*got)[o], w.dtype()) : (*got)[o];
      const double rtol = widened && dtype_is_floating(w.dtype()) ? 1e-4 : tolerance(w.dtype(), c.tf32);
      AF_RETURN_IF_ERROR(compare(g, w, rtol).with_prefix(runs[i].what + " output " + std::to_string(o)));
    }
  }
  return Status::OK();
}

// True when the GPU kernel of `c` refuses dtype `t` (node construction, a kernel error).
bool refuses(const OpCase& c, DType t, Device* dev, ActorResources* res, uint64_t seed, const std::string& var) {
  std::mt19937_64 rng(seed);
  auto runs = plan_runs(c, t, var + "_probe_" + dev->type(), rng);
  if (!runs.ok()) return true;
  for (size_t i = 0; i < runs->size(); ++i) {
    // A failing setup step (an Assign of that dtype) refuses as well as the op itself.
    if (!run_node((*runs)[i].node, dev, (*runs)[i].inputs, res).ok()) return true;
  }
  return false;
}

// ---- the tests -------------------------------------------------------------------------------------------

using ActorSystem = testing::TestActorSystem;

TEST(GpuBackendOpsTest, RegistryListsEveryRegistrationOnceSorted) {
  KernelRegistry r;
  auto f = [](const Node&) -> Result<std::unique_ptr<OpKernel>> { return Unimplemented("test"); };
  r.add("MatMul", "GPU", f);
  r.add("Add", "CPU", f);
  r.add("MatMul", "CPU", f);
  r.add("Add", "CPU", f);  // replaces
  const std::vector<std::pair<std::string, std::string>> want = {{"Add", "CPU"}, {"MatMul", "CPU"}, {"MatMul", "GPU"}};
  EXPECT_EQ(r.registered(), want);
  EXPECT_TRUE(KernelRegistry().registered().empty());
}

// Runs everywhere: a GPU kernel without a case fails here, before any GPU sees it.
TEST(GpuBackendOpsTest, EveryGpuKernelHasACase) {
  std::set<std::string> gpu_ops;
  for (const auto& [op, dev] : KernelRegistry::global().registered())
    if (dev == "GPU") gpu_ops.insert(op);
  std::set<std::string> covered;
  for (const auto& c : cases()) covered.insert(c.op);
  for (const auto& op : gpu_ops)
    EXPECT_TRUE(covered.count(op)) << "the GPU kernel of " << op
                                   << " has no case in tests/gpu_backend_ops_test.cc: add one that compares it with "
                                      "the CPU kernel";
#ifdef AF_WITH_CUDA
  for (const auto& op : covered) EXPECT_TRUE(gpu_ops.count(op)) << "case for " << op << ", which has no GPU kernel";
  EXPECT_GE(gpu_ops.size(), 60u) << "fewer GPU kernels than expected: is the GPU backend registered?";
#else
  // Without CUDA only the device-independent kernels (register_core_kernels, and the variable
  // ops, which run on the variable actors) are registered for GPU; each still has its case.
  EXPECT_FALSE(gpu_ops.count("MatMul")) << "a CUDA kernel registered in a build without CUDA";
#endif
  // And each compared dtype has a CPU kernel to compare with (all the comparisons need).
  for (const auto& c : cases()) EXPECT_TRUE(KernelRegistry::global().has(c.op, "CPU")) << c.op << " has no CPU kernel";
}

// Runs everywhere: every case's node builds and its CPU kernel runs on the drawn data, every
// output finite, for each listed dtype. So the table is sound before a GPU runs it.
TEST(GpuBackendOpsTest, CasesRunOnTheCpu) {
  ActorSystem as;
  ActorResources res(as.sys);
  auto cpu = make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0);
  const uint64_t seed = base_seed();
  SCOPED_TRACE("AF_TEST_SEED=" + std::to_string(seed));
  int n = 0;
  for (const auto& c : cases()) {
    for (DType t : c.dtypes) {
      Status s = run_case(c, t, cpu.get(), nullptr, &res, seed + static_cast<uint64_t>(n), "cpu_" + c.name() + "_" +
                                                                                        dtype_name(t));
      if (c.expect_error) {
        EXPECT_FALSE(s.ok()) << c.name() << " " << dtype_name(t) << ": expected the kernel to fail";
      } else {
        EXPECT_TRUE(s.ok()) << c.name() << " " << dtype_name(t) << ": " << s;
      }
      ++n;
    }
  }
  EXPECT_GT(n, 100);
}

// Runs everywhere: the comparison itself, with the CPU as the device under test (every case
// and dtype the CPU has), must pass; and compare() must catch what it is there to catch.
TEST(GpuBackendOpsTest, TheComparisonPassesTheCpuAgainstItself) {
  ActorSystem as;
  ActorResources res(as.sys);
  auto cpu = make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0);
  const uint64_t seed = base_seed();
  SCOPED_TRACE("AF_TEST_SEED=" + std::to_string(seed));
  for (const auto& c : cases())
    for (DType t : c.dtypes) {
      if (draw_type(c, t) != t) continue;  // the CPU lacks it
      Status s = run_case(c, t, cpu.get(), cpu.get(), &res, seed, "self_" + c.name() + "_" + dtype_name(t));
      EXPECT_TRUE(s.ok()) << c.name() << " " << dtype_name(t) << ": " << s;
    }
}

TEST(GpuBackendOpsTest, CompareCatchesDifferencesNaNAndShapes) {
  const Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{4});
  EXPECT_TRUE(compare(a, a, 2e-5).ok());
  const Tensor b = Tensor::from_vector<float>({1, 2, 3.01f, 4}, Shape{4});
  Status s = compare(b, a, 2e-5);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("element 2"), std::string::npos) << s;
  EXPECT_TRUE(compare(b, a, 1e-2).ok());
  const Tensor nan = Tensor::from_vector<float>({1, 2, std::nanf(""), 4}, Shape{4});
  EXPECT_FALSE(compare(nan, nan, 1).ok()) << "NaN never passes, not even against itself";
  EXPECT_FALSE(compare(a, Tensor::from_vector<float>({1, 2, 3, 4}, Shape{2, 2}), 1).ok());
  EXPECT_FALSE(compare(Tensor::from_vector<int32_t>({1, 2}, Shape{2}), Tensor::from_vector<int32_t>({1, 3}, Shape{2}), 0)
                   .ok());
  // Near-zero elements are measured against the output's RMS, not their own size.
  EXPECT_TRUE(compare(Tensor::from_vector<float>({1e-9f, 1}, Shape{2}), Tensor::from_vector<float>({0, 1}, Shape{2}),
                      2e-5)
                  .ok());
}

// One test per case: the GPU kernel against the CPU kernel, every listed dtype; every other
// dtype refused by the GPU kernel.
class GpuVsCpu : public ::testing::TestWithParam<std::string> {
 protected:
  // The devices and the actor system are the suite's: created once (a GPU device's cuBLAS and
  // cuDNN handles take a while), released after the last case.
  static void SetUpTestSuite() {
#ifdef AF_WITH_CUDA
    if (cuda_device_count(&why_) == 0) return;
    DeviceEnumerationOptions o;
    o.gpu_memory_fraction = 0.2;
    o.allow_growth = true;
    auto d = create_devices("/job:localhost/replica:0/task:0", o);
    if (!d.ok()) {
      why_ = "creating the devices failed: " + d.status().to_string();
      failed_ = true;
      return;
    }
    devices_ = new std::vector<std::unique_ptr<Device>>(std::move(*d));
    actors_ = new ActorSystem();
#else
    why_ = "built without CUDA (AF_ENABLE_CUDA=OFF or nvcc not found)";
#endif
  }
  static void TearDownTestSuite() {
    delete actors_;  // the variable actors (holding device tensors) end before the devices
    actors_ = nullptr;
    delete devices_;
    devices_ = nullptr;
  }
  void SetUp() override {
    ASSERT_FALSE(failed_) << why_;
    if (!devices_) GTEST_SKIP() << "no CUDA GPU visible: " << why_;
    for (auto& dev : *devices_)
      if (dev->type() == "GPU" && !gpu_) gpu_ = dev.get();
    if (!gpu_) GTEST_SKIP() << "no CUDA GPU visible: create_devices made none";
    cpu_ = (*devices_)[0].get();
  }
  static std::vector<std::unique_ptr<Device>>* devices_;
  static ActorSystem* actors_;
  static std::string why_;
  static bool failed_;
  Device* gpu_ = nullptr;
  Device* cpu_ = nullptr;
};
std::vector<std::unique_ptr<Device>>* GpuVsCpu::devices_ = nullptr;
ActorSystem* GpuVsCpu::actors_ = nullptr;
std::string GpuVsCpu::why_;
bool GpuVsCpu::failed_ = false;

TEST_P(GpuVsCpu, Matches) {
  const OpCase* c = find_case(GetParam());
  ASSERT_NE(c, nullptr);
  ActorResources res(actors_->sys);  // its variable actors end with the case
  const uint64_t seed = base_seed() ^ std::hash<std::string>{}(c->name());
  SCOPED_TRACE("AF_TEST_SEED=" + std::to_string(base_seed()));
  for (DType t : c->dtypes) {
    Status s = run_case(*c, t, gpu_, cpu_, &res, seed + static_cast<uint64_t>(t), c->name() + "_" + dtype_name(t));
    EXPECT_TRUE(s.ok()) << c->name() << " " << dtype_name(t) << ": " << s;
  }
  if (c->probe) {
    for (DType t : kAllTypes) {
      if (std::find(c->dtypes.begin(), c->dtypes.end(), t) != c->dtypes.end()) continue;
      EXPECT_TRUE(refuses(*c, t, gpu_, &res, seed, c->name() + "_" + dtype_name(t)))
          << "the GPU kernel of " << c->op << " accepts " << dtype_name(t)
          << ", which its case does not compare with the CPU: list the dtype in the case";
    }
  } else {
    RecordProperty("no_probe", c->no_probe_why);
  }
}

std::string param_name(const ::testing::TestParamInfo<std::string>& i) { return i.param; }

INSTANTIATE_TEST_SUITE_P(GpuBackendOps, GpuVsCpu, ::testing::ValuesIn(case_names()), param_name);

}  // namespace
}  // namespace actorflow
