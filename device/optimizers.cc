#include "device/optimizers.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "device/functors.h"
#include "tensor/pooling_allocator.h"

namespace actorflow {
namespace {

using R = ArgRole;

// Applies `f` elementwise over n elements of the given arrays (w first, then the slots, then
// the gradient last). The arrays never alias; the functor is copied to a local so its members
// stay in registers and the loop vectorises (the per-element call through a functor in memory
// did not).
template <class F, class... P>
inline void update_loop(int64_t n, const F& f_in, P* __restrict... p) {
  const F f = f_in;
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) f(p[i]...);
}

// w_out = f(w_in, slots..., g) over n elements; in place when w_in == w_out (one pass either
// way: no whole-variable copy precedes a copy-on-write update).
template <class F, class... S>
void dense_loop(int64_t n, const F& f_in, const float* w_in, float* w_out, const float* g, S*... slots) {
  const F f = f_in;
  if (w_in == w_out) {
    update_loop(n, f, w_out, slots..., g);
    return;
  }
  const float* __restrict src = w_in;
  float* __restrict dst = w_out;
  const float* __restrict gd = g;
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) {
    float v = src[i];
    f(v, slots[i]..., gd[i]);
    dst[i] = v;
  }
}

// FTRL-Proximal (TensorFlow's ApplyFtrlV2; ApplyFtrl when l2_shrinkage is 0), with
// p = -lr_power:
//   g' = g + 2 * l2_shrinkage * w;  a' = a + g^2
//   linear += g' - (a'^p - a^p) / lr * w
//   w = |linear| > l1 ? (sign(linear) * l1 - linear) / (a'^p / lr + 2 * l2) : 0;  a = a'
// (sqrt for the usual lr_power -0.5).
struct FtrlUpdateF {
  float lr, l1, l2, l2_shrinkage, lr_power;
  float power(float x) const { return lr_power == -0.5f ? std::sqrt(x) : std::pow(x, -lr_power); }
  void operator()(float& w, float& accum, float& linear, float g) const {
    const float g_shrunk = g + 2 * l2_shrinkage * w;
    const float new_accum = accum + g * g;
    const float new_power = power(new_accum);
    linear += g_shrunk - (new_power - power(accum)) / lr * w;
    const float quadratic = new_power / lr + 2 * l2;
    w = std::fabs(linear) > l1 ? ((linear > 0 ? l1 : -l1) - linear) / quadratic : 0.f;
    accum = new_accum;
  }
};

// Calls `use(functor, slot pointers...)` with the per-element update of `opt` for update number
// `step` and the slots of st in the spec's order.
template <class Use>
void with_update(Optimizer opt, const OptimizerHyper& h, int64_t step, OptimizerState& st, Use&& use) {
  auto p = [&](SlotId id) { return st.at(id).data<float>(); };
  switch (opt) {
    case Optimizer::kSgd: use(functors::SgdUpdateF<float>{h.lr}); return;
    case Optimizer::kMomentum:
      use(functors::MomentumUpdateF<float>{h.lr, h.momentum}, p(SlotId::kMomentum));
      return;
    case Optimizer::kAdam:
      use(functors::AdamUpdateF<float>::make(h.lr, h.beta1, h.beta2, h.epsilon, step), p(SlotId::kAdamM),
          p(SlotId::kAdamV));
      return;
    case Optimizer::kAdagrad: use(functors::AdagradUpdateF<float>{h.lr}, p(SlotId::kAdagradAccum)); return;
    case Optimizer::kRmsProp:
      use(functors::RmsPropUpdateF<float>{h.lr, h.decay, h.momentum, h.epsilon}, p(SlotId::kRmsMs),
          p(SlotId::kRmsMom));
      return;
    case Optimizer::kFtrl:
      use(FtrlUpdateF{h.lr, h.l1, h.l2, h.l2_shrinkage, h.lr_power}, p(SlotId::kFtrlAccum), p(SlotId::kFtrlLinear));
      return;
  }
}

}  // namespace

const std::vector<OptimizerSpec>& optimizer_specs() {
  static const std::vector<OptimizerSpec> specs = {
      {Optimizer::kSgd, "sgd", "ApplyGradientDescent", "apply_sgd", "SparseApplyGradientDescent", "sparse_apply_sgd",
       {R::kLr, R::kGrad}, {R::kLr, R::kIndices, R::kValues}, {}, false, true},
      {Optimizer::kMomentum, "momentum", "ApplyMomentum", "apply_momentum", "SparseApplyMomentum",
       "sparse_apply_momentum", {R::kLr, R::kGrad, R::kMomentum}, {R::kLr, R::kIndices, R::kValues, R::kMomentum},
       {{SlotId::kMomentum, 0.f}}, false, true},
      {Optimizer::kAdam, "adam", "ApplyAdam", "apply_adam", "SparseApplyAdam", "sparse_apply_adam",
       {R::kLr, R::kBeta1, R::kBeta2, R::kEpsilon, R::kGrad},
       {R::kLr, R::kBeta1, R::kBeta2, R::kEpsilon, R::kIndices, R::kValues},
       {{SlotId::kAdamM, 0.f}, {SlotId::kAdamV, 0.f}}, true, true},
      {Optimizer::kAdagrad, "adagrad", "ApplyAdagrad", "apply_adagrad", "SparseApplyAdagrad", "sparse_apply_adagrad",
       {R::kLr, R::kGrad}, {R::kLr, R::kIndices, R::kValues}, {{SlotId::kAdagradAccum, 0.f, true}}, false, true},
      // ms starts at 1, mom at 0 (TF 1.x's RMSPropOptimizer).
      {Optimizer::kRmsProp, "rmsprop", "ApplyRMSProp", "apply_rms_prop", "SparseApplyRMSProp", "sparse_apply_rms_prop",
       {R::kLr, R::kDecay, R::kMomentum, R::kEpsilon, R::kGrad},
       {R::kLr, R::kDecay, R::kMomentum, R::kEpsilon, R::kIndices, R::kValues},
       {{SlotId::kRmsMs, 1.f}, {SlotId::kRmsMom, 0.f}}, false, true},
      // The accumulator starts at initial_accumulator_value, linear at 0 (TF's FtrlOptimizer).
      {Optimizer::kFtrl, "ftrl", "ApplyFtrl", "apply_ftrl", "SparseApplyFtrl", "sparse_apply_ftrl",
       {R::kLr, R::kL1, R::kL2, R::kLrPower, R::kGrad}, {R::kLr, R::kL1, R::kL2, R::kLrPower, R::kIndices, R::kValues},
       {{SlotId::kFtrlAccum, 0.f, true}, {SlotId::kFtrlLinear, 0.f}}, false, false},
  };
  return specs;
}

const OptimizerSpec& optimizer_spec(Optimizer opt) { return optimizer_specs()[static_cast<size_t>(opt)]; }

const OptimizerSpec* find_optimizer(const std::string& name) {
  for (const OptimizerSpec& s : optimizer_specs())
    if (name == s.name) return &s;
  return nullptr;
}

OptimizerHyper hyper_from_attrs(Optimizer opt, const AttrMap& a, bool sync) {
  auto f = [&](const char* name, double dflt) { return static_cast<float>(a.get_or<double>(name, dflt)); };
  OptimizerHyper h;
  h.initial_accumulator = f("initial_accumulator_value", 0.1);
  h.l2_shrinkage = f("l2_shrinkage", 0.0);
  if (!sync) return h;
  h.l1 = f("l1", 0.0);
  h.l2 = f("l2", 0.0);
  h.lr_power = f("lr_power", -0.5);
  const bool rms = opt == Optimizer::kRmsProp;
  h.lr = f("lr", 1e-4);
  h.momentum = f("momentum", rms ? 0.0 : 0.9);
  h.beta1 = f("beta1", 0.9);
  h.beta2 = f("beta2", 0.999);
  h.epsilon = f("epsilon", rms ? 1e-10 : 1e-8);
  h.decay = f("decay", 0.9);
  return h;
}

void set_hyper(OptimizerHyper& h, ArgRole role, double v) {
  const float f = static_cast<float>(v);
  switch (role) {
    case R::kLr: h.lr = f; break;
    case R::kMomentum: h.momentum = f; break;
    case R::kBeta1: h.beta1 = f; break;
    case R::kBeta2: h.beta2 = f; break;
    case R::kEpsilon: h.epsilon = f; break;
    case R::kDecay: h.decay = f; break;
    case R::kL1: h.l1 = f; break;
    case R::kL2: h.l2 = f; break;
    case R::kLrPower: h.lr_power = f; break;
    case R::kGrad:
    case R::kIndices:
    case R::kValues: break;
  }
}

Status check_hyper(Optimizer opt, const OptimizerHyper& h, const std::string& what) {
  if (opt == Optimizer::kAdagrad && !(h.initial_accumulator > 0))
    return InvalidArgument(what + ": initial_accumulator_value must be > 0");
  if (opt == Optimizer::kFtrl) {
    if (!(h.initial_accumulator >= 0)) return InvalidArgument(what + ": initial_accumulator_value must be >= 0");
    if (!(h.l2_shrinkage >= 0)) return InvalidArgument(what + ": l2_shrinkage must be >= 0");
  }
  return Status::OK();
}

// The hyper-parameters that are inputs, checked when an update runs (TensorFlow's ApplyFtrl
// checks the same).
static Status check_inputs(Optimizer opt, const OptimizerHyper& h) {
  if (opt != Optimizer::kFtrl) return Status::OK();
  if (!(h.lr > 0)) return InvalidArgument("ftrl: learning rate must be > 0, got " + std::to_string(h.lr));
  if (!(h.l1 >= 0)) return InvalidArgument("ftrl: l1 must be >= 0, got " + std::to_string(h.l1));
  if (!(h.l2 >= 0)) return InvalidArgument("ftrl: l2 must be >= 0, got " + std::to_string(h.l2));
  if (!(h.lr_power <= 0)) return InvalidArgument("ftrl: lr_power must be <= 0, got " + std::to_string(h.lr_power));
  return check_hyper(opt, h, "ftrl");
}

float slot_init(const SlotSpec& s, const OptimizerHyper& h) { return s.from_accumulator ? h.initial_accumulator : s.init; }

void ensure_slots(Optimizer opt, const OptimizerHyper& h, const Tensor& value, OptimizerState& st) {
  for (const SlotSpec& s : optimizer_spec(opt).slots) {
    Tensor& t = st.at(s.id);
    if (t.is_initialized()) continue;
    t = Tensor(value.dtype(), value.shape());  // zeros
    const float v = slot_init(s, h);
    if (v != 0.f) std::fill(t.data<float>(), t.data<float>() + t.num_elements(), v);
  }
}

Status apply_dense(Optimizer opt, const OptimizerHyper& h, Tensor& value, bool in_place, OptimizerState& st,
                   const Tensor& g) {
  AF_RETURN_IF_ERROR(check_inputs(opt, h));
  Tensor fresh;
  if (!in_place) {
    auto t = Tensor::allocate(cpu_host_pool(), value.dtype(), value.shape());
    if (!t.ok()) return t.status();
    fresh = std::move(*t);
  }
  ensure_slots(opt, h, value, st);
  if (optimizer_spec(opt).counts_steps) ++st.steps;
  const int64_t n = g.num_elements();
  const float* w_in = value.data<float>();
  float* w_out = in_place ? value.data<float>() : fresh.data<float>();
  with_update(opt, h, st.steps, st, [&](const auto& f, auto*... slots) {
    dense_loop(n, f, w_in, w_out, g.data<float>(), slots...);
  });
  if (!in_place) value = std::move(fresh);
  return Status::OK();
}

SparseRows sum_sparse_rows(const std::vector<int64_t>& rows_at, const float* v, int64_t row) {
  SparseRows out;
  out.row = row;
  std::unordered_map<int64_t, size_t> slot;
  for (size_t j = 0; j < rows_at.size(); ++j) {
    const int64_t r = rows_at[j], i = static_cast<int64_t>(j);
    auto [it, fresh] = slot.emplace(r, out.rows.size());
    if (fresh) {
      out.rows.push_back(r);
      out.grad.insert(out.grad.end(), v + i * row, v + (i + 1) * row);
    } else {
      float* g = out.grad.data() + it->second * static_cast<size_t>(row);
      for (int64_t k = 0; k < row; ++k) g[k] += v[i * row + k];
    }
  }
  return out;
}

Status apply_sparse(Optimizer opt, const OptimizerHyper& h, Tensor& value, OptimizerState& st, const SparseRows& sr,
                    const std::string& what) {
  const OptimizerSpec& spec = optimizer_spec(opt);
  if (!spec.sparse_method)
    return InvalidArgument(what + ": no sparse form of optimizer '" + std::string(spec.name) + "'");
  AF_RETURN_IF_ERROR(check_inputs(opt, h));
  ensure_slots(opt, h, value, st);
  if (spec.counts_steps) ++st.steps;
  float* w = value.data<float>();
  with_update(opt, h, st.steps, st, [&](const auto& f, auto*... slots) {
    for (size_t j = 0; j < sr.rows.size(); ++j)
      for (int64_t k = 0; k < sr.row; ++k) {
        const int64_t at = sr.rows[j] * sr.row + k;
        f(w[at], slots[at]..., sr.grad[j * static_cast<size_t>(sr.row) + k]);
      }
  });
  return Status::OK();
}

bool device_update(Optimizer opt, const OptimizerHyper& h, int64_t step, DenseUpdate* out) {
  DenseUpdate u;
  u.lr = h.lr;
  switch (opt) {
    case Optimizer::kSgd: u.kind = DenseUpdate::Kind::kSgd; break;
    case Optimizer::kMomentum:
      u.kind = DenseUpdate::Kind::kMomentum;
      u.momentum = h.momentum;
      break;
    case Optimizer::kAdam:
      u.kind = DenseUpdate::Kind::kAdam;
      u.beta1 = h.beta1;
      u.beta2 = h.beta2;
      u.epsilon = h.epsilon;
      u.adam_t = step;
      break;
    case Optimizer::kAdagrad: u.kind = DenseUpdate::Kind::kAdagrad; break;
    case Optimizer::kRmsProp:
      u.kind = DenseUpdate::Kind::kRmsProp;
      u.decay = h.decay;
      u.momentum = h.momentum;
      u.epsilon = h.epsilon;
      break;
    default: return false;
  }
  if (!optimizer_spec(opt).device_form) return false;
  *out = u;
  return true;
}

}  // namespace actorflow
