#include "core/metrics.h"
#include "actors/variable_actor.h"

#include <chrono>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "actors/messages.h"
#include "core/checked_math.h"
#include "core/denormal.h"
#include "data/variable_slots.h"
#include "actors/ps_replication.h"
#include "actors/resources.h"
#include "actors/faults.h"
#include "tensor/pooling_allocator.h"
#include "actors/restart.h"
#include "actors/sync_waits.h"
#include "core/logging.h"
#include "device/device.h"
#include "device/functors.h"

namespace actorflow {
namespace {

using sync_check_atom = caf::atom_constant<caf::atom("synccheck")>;
// The variable actor's interface with its private timer: (generation, replicas, timeout secs).
using var_impl_t = variable_actor_t::extend<caf::reacts_to<sync_check_atom, int64_t, int64_t, double>>;

struct VarState {
  std::string var;
  DType dtype = DType::kInvalid;
  Shape shape;
  Tensor value;              // uninitialized until the first assign
  int64_t version = 0;
  Tensor momentum;           // ApplyMomentum slot
  Tensor adam_m, adam_v;     // ApplyAdam slots
  int64_t adam_t = 0;
  Tensor adagrad_accum;      // ApplyAdagrad slot (starts at initial_accumulator_value)
  Tensor rms_ms, rms_mom;    // ApplyRMSProp slots (ms starts at 1, mom at 0: TF 1.x)
  // Where the value and the slots above live: null = host memory; a GPU once a kernel on it
  // wrote the variable (device_call below). The host-only state (sync_sum, ...) stays on the host.
  Device* home = nullptr;
  // Synchronous replicas.
  int64_t sync_step = 0;     // the global step the accumulator collects for
  bool sync_aligned = false; // sync_step was taken from a contribution (the first after a reset)
  Tensor sync_sum;
  int64_t sync_count = 0;
  std::string sync_opt;      // the optimizer of the step's first contribution (all must agree)
  // A sparse step's accumulation (sparse_apply_sync): the rows seen, their summed gradients, how
  // many contributions had each, and where each row sits in them.
  bool sync_sparse = false;
  std::vector<int64_t> sync_rows;
  std::vector<float> sync_row_sum;
  std::vector<int64_t> sync_row_count;
  std::unordered_map<int64_t, size_t> sync_row_at;
  int64_t sync_generation = 0;  // counts accumulations started: names the one a timer belongs to
  std::vector<caf::response_promise> sync_waiting;
  SyncWaits sync_waits;  // what the waiting runs wait for (actors/sync_waits.h)
  std::chrono::steady_clock::time_point sync_first;
  bool sync_closed = false;      // every replica left, or the chief closed it: contributions fail
  std::string sync_closed_why;
  int64_t sync_left = 0;         // replicas that ran their finish op (SyncReplicasOptimizer)
  // Counters (SyncAccumulatorControl "stats"): aggregated updates applied, stale gradients
  // dropped, realignments to a later step.
  int64_t sync_applied = 0, sync_stale = 0, sync_realigned = 0;
  RestartBudget restarts;    // in-place restarts after exceptions
  Status failed;             // set when the restart budget is spent
  // Replication ([supervisor] ps_replicas = 2, actors/ps_replication.h). `rep` is null without it.
  std::shared_ptr<PsReplicator> rep;
  bool backup_role = false;  // this copy has taken replicated calls: it is a backup
  std::string primary;       // the task its replicated calls came from (backup_role only)
  // Updates applied here and sent to the backup, not yet acknowledged by it: their callers wait.
  // The backup's node actor is monitored, so when its connection closes they are answered at
  // once (the view "primary alone") instead of at the request timeout.
  struct PendingAck {
    caf::typed_response_promise<std::vector<Tensor>> rp;
    std::vector<Tensor> value;
  };
  std::map<uint64_t, PendingAck> pending_acks;
  uint64_t next_ack = 0;
  uint64_t next_data_call = 0;  // numbers the calls whose tensors go over the data plane
  caf::actor_addr watched_backup;  // the backup node actor monitored (null: none)
  uint64_t watched_epoch = 0;
  uint64_t synced_epoch = 0; // the backup connection its whole state last went out on (0: none)
  // Deferred dense updates (see kSyncEvery): on a backup, the replicated dense optimizer calls
  // held, in order, but not applied yet; on a primary, the dense updates replicated as calls
  // since its whole state last went to the backup.
  std::vector<ResourceCallPtr> deferred;
  size_t deferred_bytes = 0;      // the tensor bytes of `deferred`
  int dense_since_sync = 0;
  size_t dense_bytes_since_sync = 0;
  static constexpr const char* name = "variable";
};
using VarActor = var_impl_t::stateful_base<VarState>;

Status err(const VarState& st, Code code, const std::string& msg) {
  return Status(code, "variable '" + st.var + "': " + msg);
}

// Learns dtype/shape from the caller's attrs on first use; checks them afterwards.
Status check_declared(VarState& st, const AttrMap& attrs) {
  const DType t = attrs.get_or<DType>("dtype", DType::kInvalid);
  const Shape s = attrs.get_or<Shape>("shape", Shape::unknown());
  if (st.dtype == DType::kInvalid) {
    if (t == DType::kInvalid || !s.fully_defined()) return Status::OK();
    if (!s.valid_for_tensor())
      return err(st, Code::kInvalidArgument, "declared with shape " + s.to_string() + ", which no tensor can have");
    st.dtype = t;
    st.shape = s;
    return Status::OK();
  }
  if (t != DType::kInvalid && t != st.dtype)
    return err(st, Code::kInvalidArgument, std::string("declared as ") + dtype_name(t) + " but holds " +
                                               dtype_name(st.dtype));
  if (!s.unknown_rank() && s.fully_defined() && s != st.shape)
    return err(st, Code::kInvalidArgument, "declared with shape " + s.to_string() + " but has shape " +
                                               st.shape.to_string());
  return Status::OK();
}

Status check_like(const VarState& st, const Tensor& t, const char* what) {
  if (!t.is_initialized()) return err(st, Code::kInvalidArgument, std::string(what) + " is empty");
  if (st.dtype != DType::kInvalid && t.dtype() != st.dtype)
    return err(st, Code::kInvalidArgument, std::string(what) + " is " + dtype_name(t.dtype()) + ", the variable is " +
                                               dtype_name(st.dtype));
  if (st.dtype != DType::kInvalid && t.shape() != st.shape)
    return err(st, Code::kInvalidArgument, std::string(what) + " has shape " + t.shape().to_string() +
                                               ", the variable has shape " + st.shape.to_string());
  return Status::OK();
}

// True when no one but this actor holds `t`'s buffer, ordered after every access of the holders
// that have let it go: then the caller may write it in place. use_count() alone is a relaxed
// load, which does not order this actor's writes after a reader's last reads on another thread
// (a read's reply sent by a device actor's thread, then dropped): ThreadSanitizer reported the
// in-place Adam update racing with write_all() of the previous read in multi-process training.
// Copying the shared_ptr increments the count with an acq_rel read-modify-write (libstdc++'s
// __atomic_add, ext/atomicity.h), which synchronises with every holder's release decrement; the
// count read after it is then the owner plus this probe when nobody else holds the buffer.
bool exclusively_held(const Tensor& t) {
  const std::shared_ptr<Buffer> probe = t.buffer();
  return probe.use_count() <= 2;
}

// The value, made private (copy-on-write) so an update never changes a tensor a reader holds.
Tensor& writable_value(VarState& st) {
  if (!exclusively_held(st.value)) st.value = st.value.deep_copy();
  return st.value;
}

// The first element of a hyper-parameter tensor as a double; NaN when it has none (a peer's
// graph may pass an empty tensor where the shape function wanted a scalar: nothing is read past it).
double scalar_of(const Tensor& t) {
  if (!t.is_initialized() || t.num_elements() < 1) return std::numeric_limits<double>::quiet_NaN();
  switch (t.dtype()) {
    case DType::kFloat64: return t.data<double>()[0];
    case DType::kInt32: return t.data<int32_t>()[0];
    case DType::kInt64: return static_cast<double>(t.data<int64_t>()[0]);
    case DType::kUInt8: return t.data<uint8_t>()[0];
    case DType::kBool: return t.data<bool>()[0] ? 1.0 : 0.0;
    default: return t.data<float>()[0];
  }
}

Tensor zeros_like(const Tensor& t) { return Tensor(t.dtype(), t.shape()); }

Status require_init(const VarState& st) {
  if (!st.value.is_initialized()) return err(st, Code::kFailedPrecondition, "is not initialized");
  return Status::OK();
}

Status require_float(const VarState& st) {
  if (st.dtype != DType::kFloat32) return err(st, Code::kUnimplemented, "optimizer updates need a float32 variable");
  return Status::OK();
}

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

// One dense optimizer update w <- f(w, slots..., g) over the whole float32 value. In place when
// the value's buffer is this actor's alone; otherwise (a reader still holds the last value: a
// read's reply being sent, an update's output not yet dropped) the new value is written into a
// fresh buffer from the host pool in the same pass and becomes the value: the reader's snapshot
// stays intact and no whole-variable copy precedes the update (copy-then-update was two passes).
template <class F, class... S>
Status dense_update(VarState& st, const F& f_in, const Tensor& g, S*... slots) {
  const int64_t n = g.num_elements();
  const float* __restrict gd = g.data<float>();
  const F f = f_in;
  if (exclusively_held(st.value)) {
    update_loop(n, f, st.value.data<float>(), slots..., gd);
    return Status::OK();
  }
  auto fresh = Tensor::allocate(cpu_host_pool(), st.value.dtype(), st.value.shape());
  if (!fresh.ok()) return err(st, Code::kResourceExhausted, fresh.status().message());
  const float* __restrict src = st.value.data<float>();
  float* __restrict dst = fresh->data<float>();
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) {
    float v = src[i];
    f(v, slots[i]..., gd[i]);
    dst[i] = v;
  }
  st.value = std::move(*fresh);
  return Status::OK();
}

Status apply_sgd(VarState& st, float lr, const Tensor& g) {
  AF_RETURN_IF_ERROR(require_float(st));
  return dense_update(st, functors::SgdUpdateF<float>{lr}, g);
}

Status apply_momentum(VarState& st, float lr, const Tensor& g, float momentum) {
  AF_RETURN_IF_ERROR(require_float(st));
  if (!st.momentum.is_initialized()) st.momentum = zeros_like(st.value);
  return dense_update(st, functors::MomentumUpdateF<float>{lr, momentum}, g, st.momentum.data<float>());
}

// Adam's m and v, zeros like the value, created on the variable's first Adam update (dense or
// sparse: both share them).
void ensure_adam_slots(VarState& st) {
  if (st.adam_m.is_initialized()) return;
  st.adam_m = zeros_like(st.value);
  st.adam_v = zeros_like(st.value);
}

Status apply_adam(VarState& st, float lr, float b1, float b2, float eps, const Tensor& g) {
  AF_RETURN_IF_ERROR(require_float(st));
  ensure_adam_slots(st);
  ++st.adam_t;
  return dense_update(st, functors::AdamUpdateF<float>::make(lr, b1, b2, eps, st.adam_t), g,
                      st.adam_m.data<float>(), st.adam_v.data<float>());
}

// A float32 tensor like the value, every element `v` (a slot's initial value).
Tensor filled_like(const Tensor& t, float v) {
  Tensor out = zeros_like(t);
  float* d = out.data<float>();
  std::fill(d, d + out.num_elements(), v);
  return out;
}

Status apply_adagrad(VarState& st, float lr, const Tensor& g, float initial_accumulator_value) {
  AF_RETURN_IF_ERROR(require_float(st));
  if (!(initial_accumulator_value > 0))
    return err(st, Code::kInvalidArgument, "apply_adagrad: initial_accumulator_value must be > 0");
  if (!st.adagrad_accum.is_initialized()) st.adagrad_accum = filled_like(st.value, initial_accumulator_value);
  return dense_update(st, functors::AdagradUpdateF<float>{lr}, g, st.adagrad_accum.data<float>());
}

Status apply_rms_prop(VarState& st, float lr, float decay, float momentum, float eps, const Tensor& g) {
  AF_RETURN_IF_ERROR(require_float(st));
  if (!st.rms_ms.is_initialized()) {
    st.rms_ms = filled_like(st.value, 1.f);
    st.rms_mom = zeros_like(st.value);
  }
  return dense_update(st, functors::RmsPropUpdateF<float>{lr, decay, momentum, eps}, g, st.rms_ms.data<float>(),
                      st.rms_mom.data<float>());
}

Status assign_add(VarState& st, const Tensor& d) {
  Tensor& w = writable_value(st);
  dispatch_dtype(st.dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, bool>) {
      T* wd = w.data<T>();
      const T* dd = d.data<T>();
      for (int64_t i = 0, n = d.num_elements(); i < n; ++i) wd[i] = static_cast<T>(wd[i] + dd[i]);
    }
    return 0;
  });
  return Status::OK();
}

// The rows `ids` (int32 or int64, any shape) name, each checked against the variable's first
// dim; `what` names the method in errors.
Result<std::vector<int64_t>> row_indices(const VarState& st, const Tensor& ids, const std::string& what) {
  std::vector<int64_t> rows(static_cast<size_t>(ids.num_elements()));
  if (ids.dtype() == DType::kInt32) {
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = ids.data<int32_t>()[i];
  } else if (ids.dtype() == DType::kInt64) {
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = ids.data<int64_t>()[i];
  } else {
    return err(st, Code::kInvalidArgument, what + ": indices must be int32 or int64");
  }
  const int64_t n = st.shape.dim(0);
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i] < 0 || rows[i] >= n)
      return err(st, Code::kInvalidArgument, what + ": indices[" + std::to_string(i) + "] = " + std::to_string(rows[i]) +
                                                 " is not in [0, " + std::to_string(n) + ")");
  return rows;
}

// scatter_add (add) / scatter_update of rows `ids` with `upd` (ids.shape + the rows' shape).
// Every index is checked before anything changes. Returns the updated rows.
Result<Tensor> scatter(VarState& st, const Tensor& ids, const Tensor& upd, bool add) {
  const char* what = add ? "scatter_add" : "scatter_update";
  if (st.shape.rank() < 1) return err(st, Code::kInvalidArgument, std::string(what) + ": the variable is a scalar");
  if (upd.dtype() != st.dtype)
    return err(st, Code::kInvalidArgument, std::string(what) + ": updates are " + dtype_name(upd.dtype()) +
                                               ", the variable is " + dtype_name(st.dtype));
  std::vector<int64_t> want = ids.shape().dims();
  for (int i = 1; i < st.shape.rank(); ++i) want.push_back(st.shape.dim(i));
  if (upd.shape() != Shape(want))
    return err(st, Code::kInvalidArgument, std::string(what) + ": updates " + upd.shape().to_string() +
                                               " must have shape " + Shape(want).to_string());
  AF_ASSIGN_OR_RETURN(const std::vector<int64_t> rows_at, row_indices(st, ids, what));
  int64_t row_elems = 1;
  for (int i = 1; i < st.shape.rank(); ++i) row_elems *= st.shape.dim(i);
  Tensor& w = writable_value(st);
  Tensor out(st.dtype, upd.shape());
  const size_t es = dtype_size(st.dtype), row_bytes = static_cast<size_t>(row_elems) * es;
  char* wb = static_cast<char*>(w.raw_data());
  const char* ub = static_cast<const char*>(upd.raw_data());
  if (add) {
    dispatch_dtype(st.dtype, [&](auto zero) {
      using T = decltype(zero);
      if constexpr (!std::is_same_v<T, bool>) {
        T* wd = w.data<T>();
        const T* ud = upd.data<T>();
        for (size_t i = 0; i < rows_at.size(); ++i) {
          T* row = wd + rows_at[i] * row_elems;
          const T* u = ud + static_cast<int64_t>(i) * row_elems;
          for (int64_t k = 0; k < row_elems; ++k) row[k] = static_cast<T>(row[k] + u[k]);
        }
      }
      return 0;
    });
  } else {
    for (size_t i = 0; i < rows_at.size(); ++i)
      if (row_bytes) std::memcpy(wb + static_cast<size_t>(rows_at[i]) * row_bytes, ub + i * row_bytes, row_bytes);
  }
  char* ob = static_cast<char*>(out.raw_data());
  for (size_t i = 0; i < rows_at.size(); ++i)
    if (row_bytes) std::memcpy(ob + i * row_bytes, wb + static_cast<size_t>(rows_at[i]) * row_bytes, row_bytes);
  return out;
}

// A sparse gradient with the rows of duplicate indices summed: the distinct rows in order of
// first appearance and their float32 gradient rows, `row` elements each.
struct SparseRows {
  std::vector<int64_t> rows;
  std::vector<float> grad;
  int64_t row = 0;
};

// Checks (indices, values) against the variable (float32, rank >= 1, every index in range,
// values [n] + the rows' shape) and sums duplicates. `what` names the method in errors.
Result<SparseRows> sparse_rows(const VarState& st, const Tensor& ids, const Tensor& values, const std::string& what) {
  AF_RETURN_IF_ERROR(require_float(st));
  if (st.shape.rank() < 1) return err(st, Code::kInvalidArgument, what + ": the variable is a scalar");
  if (ids.shape().rank() != 1)
    return err(st, Code::kInvalidArgument, what + ": indices must be a vector, got " + ids.shape().to_string());
  std::vector<int64_t> want{ids.shape().dim(0)};
  for (int i = 1; i < st.shape.rank(); ++i) want.push_back(st.shape.dim(i));
  if (values.dtype() != DType::kFloat32 || values.shape() != Shape(want))
    return err(st, Code::kInvalidArgument, what + ": the gradient's rows are " + dtype_name(values.dtype()) + " " +
                                               values.shape().to_string() + ", expected float32 " + Shape(want).to_string());
  SparseRows out;
  out.row = 1;
  for (int i = 1; i < st.shape.rank(); ++i) out.row *= st.shape.dim(i);
  AF_ASSIGN_OR_RETURN(const std::vector<int64_t> rows_at, row_indices(st, ids, what));
  std::unordered_map<int64_t, size_t> slot;
  const float* v = values.data<float>();
  for (size_t j = 0; j < rows_at.size(); ++j) {
    const int64_t r = rows_at[j], i = static_cast<int64_t>(j);
    auto [it, fresh] = slot.emplace(r, out.rows.size());
    if (fresh) {
      out.rows.push_back(r);
      out.grad.insert(out.grad.end(), v + i * out.row, v + (i + 1) * out.row);
    } else {
      float* g = out.grad.data() + it->second * static_cast<size_t>(out.row);
      for (int64_t k = 0; k < out.row; ++k) g[k] += v[i * out.row + k];
    }
  }
  return out;
}

// Applies `update(offset of the element in the variable, gradient element)` to every element of
// the rows of `sr`.
template <class F>
void for_each_sparse_element(const SparseRows& sr, F&& update) {
  for (size_t j = 0; j < sr.rows.size(); ++j)
    for (int64_t k = 0; k < sr.row; ++k)
      update(sr.rows[j] * sr.row + k, sr.grad[j * static_cast<size_t>(sr.row) + k]);
}

// The hyper-parameters of a sparse update.
struct SparseHyper {
  float lr = 0, momentum = 0.9f, beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f, initial_accumulator = 0.1f;
};

// Applies the sparse form of `kind` ("sgd", "momentum", "adam" (lazy), "adagrad") to the rows of
// `sr`: TensorFlow's SparseApply* semantics (the slots of absent rows stay as they are).
Status apply_sparse_update(VarState& st, const std::string& kind, const SparseHyper& h, const SparseRows& sr) {
  if (kind == "sgd") {
    float* __restrict w = writable_value(st).data<float>();
    functors::SgdUpdateF<float> f{h.lr};
    for_each_sparse_element(sr, [&](int64_t at, float g) { f(w[at], g); });
  } else if (kind == "momentum") {
    if (!st.momentum.is_initialized()) st.momentum = zeros_like(st.value);
    float* __restrict w = writable_value(st).data<float>();
    float* a = st.momentum.data<float>();
    functors::MomentumUpdateF<float> f{h.lr, h.momentum};
    for_each_sparse_element(sr, [&](int64_t at, float g) { f(w[at], a[at], g); });
  } else if (kind == "adam") {
    ensure_adam_slots(st);
    ++st.adam_t;
    float* __restrict w = writable_value(st).data<float>();
    float* mm = st.adam_m.data<float>();
    float* vv = st.adam_v.data<float>();
    auto f = functors::AdamUpdateF<float>::make(h.lr, h.beta1, h.beta2, h.epsilon, st.adam_t);
    for_each_sparse_element(sr, [&](int64_t at, float g) { f(w[at], mm[at], vv[at], g); });
  } else if (kind == "adagrad") {
    if (!(h.initial_accumulator > 0))
      return err(st, Code::kInvalidArgument, "initial_accumulator_value must be > 0");
    if (!st.adagrad_accum.is_initialized()) st.adagrad_accum = filled_like(st.value, h.initial_accumulator);
    float* __restrict w = writable_value(st).data<float>();
    float* a = st.adagrad_accum.data<float>();
    functors::AdagradUpdateF<float> f{h.lr};
    for_each_sparse_element(sr, [&](int64_t at, float g) { f(w[at], a[at], g); });
  } else {
    return err(st, Code::kInvalidArgument, "no sparse form of optimizer '" + kind + "'");
  }
  return Status::OK();
}

std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

// Fault injection: the global step variable reports its value (at_step faults).
void observe_global_step(const VarState& st) {
  if (FaultInjector::global().armed() && is_global_step_name(st.var) && st.value.is_initialized() &&
      st.value.on_host() && st.value.dtype() == DType::kInt64 && st.value.num_elements() == 1)
    FaultInjector::global().on_global_step(st.value.data<int64_t>()[0]);
}

float attr_f(const AttrMap& attrs, const char* name, double dflt) {
  return static_cast<float>(attrs.get_or<double>(name, dflt));
}

// Metrics (core/metrics.h): updates this task's variables applied, and how long synchronous
// steps waited for their replicas.
void count_update() {
  static Counter& updates = Metrics::global().counter(
      "actorflow_variable_updates_total", "Updates (optimizer steps, assign_add, scatters) applied to this task's variables.");
  updates.inc();
}

// Forgets the current step's gradients (dense or sparse).
void clear_sync_accumulation(VarState& st) {
  st.sync_sum = Tensor();
  st.sync_count = 0;
  st.sync_opt.clear();
  st.sync_sparse = false;
  st.sync_rows.clear();
  st.sync_row_sum.clear();
  st.sync_row_count.clear();
  st.sync_row_at.clear();
}

// Ends the current accumulation without applying it: the waiting workers get -1 (their gradient
// was dropped, as a stale one is) and the accumulator forgets its step, so it aligns with the
// local step of the next contribution. Called when the variable is assigned or restored (for
// example a checkpoint rolls the model and the global step back).
void reset_sync(VarState& st) {
  auto waiting = std::move(st.sync_waiting);
  st.sync_waiting.clear();
  clear_sync_accumulation(st);
  st.sync_step = 0;
  st.sync_aligned = false;
  st.sync_closed = false;  // a new (or restored) model: replicas join again
  st.sync_closed_why.clear();
  st.sync_left = 0;
  for (auto& rp : waiting) rp.deliver(one(Tensor::scalar<int64_t>(-1)));
}

// Ends synchronous training at this variable: the waiting contributions and every later one fail
// with OutOfRange (TensorFlow's "queue closed": the training loop's signal to stop), so nobody
// waits for a gradient that will never come. Undone by an assign or restore (reset_sync).
void close_sync(VarState& st, const std::string& why) {
  st.sync_closed = true;
  st.sync_closed_why = why;
  auto waiting = std::move(st.sync_waiting);
  st.sync_waiting.clear();
  clear_sync_accumulation(st);
  ++st.sync_generation;
  const Status s = err(st, Code::kOutOfRange, why);
  for (auto& rp : waiting) rp.deliver(to_caf_error(s));
}

// Finishes the current sync step: average, apply once, release everyone.
// Runs inside handle_call, under its ScopedFlushDenormal.
void finish_sync_step(VarState& st, const AttrMap& attrs) {
  const std::string opt = attrs.get_or<std::string>("optimizer", "adam");
  const float lr = attr_f(attrs, "lr", 1e-4);
  Status s;
  if (opt == "increment") {
    Tensor one_t(st.dtype, st.shape);
    dispatch_dtype(st.dtype, [&](auto zero) {
      using T = decltype(zero);
      if constexpr (!std::is_same_v<T, bool>) one_t.data<T>()[0] = T(1);
      return 0;
    });
    s = assign_add(st, one_t);
  } else if (st.sync_sparse) {
    // Each row's mean over the contributions that had it, applied to those rows only.
    SparseRows sr;
    sr.rows = std::move(st.sync_rows);
    sr.grad = std::move(st.sync_row_sum);
    sr.row = sr.rows.empty() ? 0 : static_cast<int64_t>(sr.grad.size() / sr.rows.size());
    for (size_t j = 0; j < sr.rows.size(); ++j) {
      const float inv = 1.f / static_cast<float>(st.sync_row_count[j]);
      for (int64_t k = 0; k < sr.row; ++k) sr.grad[j * static_cast<size_t>(sr.row) + k] *= inv;
    }
    SparseHyper h;
    h.lr = lr;
    h.momentum = attr_f(attrs, "momentum", 0.9);
    h.beta1 = attr_f(attrs, "beta1", 0.9);
    h.beta2 = attr_f(attrs, "beta2", 0.999);
    h.epsilon = attr_f(attrs, "epsilon", 1e-8);
    h.initial_accumulator = attr_f(attrs, "initial_accumulator_value", 0.1);
    s = apply_sparse_update(st, opt, h, sr);
  } else {
    float* sum = st.sync_sum.data<float>();
    const float inv = 1.f / static_cast<float>(st.sync_count);
    for (int64_t i = 0, n = st.sync_sum.num_elements(); i < n; ++i) sum[i] *= inv;
    if (opt == "sgd") {
      s = apply_sgd(st, lr, st.sync_sum);
    } else if (opt == "momentum") {
      s = apply_momentum(st, lr, st.sync_sum, attr_f(attrs, "momentum", 0.9));
    } else if (opt == "adam") {
      s = apply_adam(st, lr, attr_f(attrs, "beta1", 0.9), attr_f(attrs, "beta2", 0.999),
                     attr_f(attrs, "epsilon", 1e-8), st.sync_sum);
    } else if (opt == "adagrad") {
      s = apply_adagrad(st, lr, st.sync_sum, attr_f(attrs, "initial_accumulator_value", 0.1));
    } else if (opt == "rmsprop") {
      s = apply_rms_prop(st, lr, attr_f(attrs, "decay", 0.9), attr_f(attrs, "momentum", 0.0),
                         attr_f(attrs, "epsilon", 1e-10), st.sync_sum);
    } else {
      s = err(st, Code::kInvalidArgument, "unknown synchronous optimizer '" + opt + "'");
    }
  }
  ++st.version;
  if (s.ok()) {
    ++st.sync_applied;
    if (opt != "increment") count_update();
    static Histogram& waited = Metrics::global().histogram(
        "actorflow_sync_wait_seconds",
        "From a synchronous step's first gradient to its update, per variable and step, in seconds.");
    waited.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - st.sync_first).count());
  }
  const int64_t applied = st.sync_step;
  ++st.sync_step;
  clear_sync_accumulation(st);
  observe_global_step(st);
  auto waiting = std::move(st.sync_waiting);
  st.sync_waiting.clear();
  for (auto& rp : waiting) {
    if (s.ok()) rp.deliver(one(Tensor::scalar<int64_t>(applied)));
    else rp.deliver(to_caf_error(s));
  }
}

// ---- slots in checkpoints (ops VariableSlots / RestoreVariableSlots) --------------------------
// The blob's format is data/variable_slots.h's; ids map to VarState's members here.
Tensor* slot_by_id(VarState& st, uint8_t id) {
  switch (static_cast<SlotId>(id)) {
    case SlotId::kMomentum: return &st.momentum;
    case SlotId::kAdamM: return &st.adam_m;
    case SlotId::kAdamV: return &st.adam_v;
    case SlotId::kAdagradAccum: return &st.adagrad_accum;
    case SlotId::kRmsMs: return &st.rms_ms;
    case SlotId::kRmsMom: return &st.rms_mom;
  }
  return nullptr;
}

Tensor encode_slots(VarState& st) {
  VariableSlotSet set;
  set.adam_t = st.adam_t;
  for (uint8_t id = 1; id <= kNumSlotIds; ++id) set.slot[id] = *slot_by_id(st, id);
  Result<Tensor> blob = encode_variable_slots(set, st.value.bytes());
  if (!blob.ok()) throw std::bad_alloc();  // only allocation fails: every slot has the value's shape
  return std::move(*blob);
}

// Replaces the slots by those of `blob` (checked completely before anything changes).
Status decode_slots(VarState& st, const Tensor& blob) {
  const bool set = st.value.is_initialized();
  Result<VariableSlotSet> slots =
      decode_variable_slots(blob, set ? st.value.dtype() : st.dtype, set ? st.value.shape() : st.shape);
  if (!slots.ok()) return err(st, slots.status().code(), slots.status().message());
  for (uint8_t id = 1; id <= kNumSlotIds; ++id) *slot_by_id(st, id) = std::move(slots->slot[id]);
  st.adam_t = slots->adam_t;
  return Status::OK();
}

// ---- values in a GPU's memory -------------------------------------------------------------------
// A variable whose kernels run on a GPU keeps its value and optimizer slots in that GPU's memory:
// read, assign/restore, is_initialized and the dense optimizer updates (apply_sgd, _momentum,
// _adam, _adagrad, _rms_prop) called from a kernel on that GPU run there (Device::duplicate,
// Device::apply_dense_update) without a host copy. Every other call runs on the host: the value
// and the slots move to host memory first (they return with the next device-side write), a GPU
// caller's arguments are copied to the host, and the kernel copies the reply to its device.
// A read from elsewhere gets a copy and leaves the variable where it is. Replicated variables
// ([supervisor] ps_replicas = 2) always stay on the host.

bool dense_optimizer_call(const std::string& m);

// The device memory a call's tensors live in: its kernel's device, unless that is host memory.
Device* device_of(const ResourceCall& c) {
  return c.device && !c.device->allocator()->host_accessible() ? c.device : nullptr;
}

// The methods served in a GPU's memory for a kernel on that GPU.
bool device_method(const std::string& m) {
  return m == "read" || m == "save" || m == "is_initialized" || m == "assign" || m == "restore" ||
         dense_optimizer_call(m);
}

// The methods that leave the value where it lives (read and save copy it to the host).
bool leaves_value_in_place(const std::string& m) { return m == "read" || m == "save" || m == "is_initialized"; }

std::string memory_name(const Device* d) { return d ? d->name() : std::string("host memory"); }

// Moves the value and the slots to `to` (null: host memory). Nothing changes on an error.
Status move_state(VarState& st, Device* to) {
  if (st.home == to) return Status::OK();
  Tensor* const ts[] = {&st.value, &st.momentum, &st.adam_m, &st.adam_v, &st.adagrad_accum, &st.rms_ms, &st.rms_mom};
  std::vector<Tensor> moved;
  for (Tensor* t : ts) {
    if (!t->is_initialized()) {
      moved.emplace_back();
      continue;
    }
    Result<Tensor> host = st.home ? st.home->copy_to_host(*t) : Result<Tensor>(*t);
    Result<Tensor> there = !host.ok() ? host : to ? to->copy_from_host(*host) : host;
    if (!there.ok())
      return err(st, there.status().code(), "moving from " + memory_name(st.home) + " to " + memory_name(to) + ": " +
                                                there.status().message());
    moved.push_back(std::move(*there));
  }
  for (size_t i = 0; i < moved.size(); ++i)
    if (moved[i].is_initialized()) *ts[i] = std::move(moved[i]);
  st.home = to;
  return Status::OK();
}

// `call` with its arguments copied from `dev` to the host.
Result<ResourceCallPtr> host_call(const ResourceCall& call, Device* dev) {
  auto c = std::make_shared<ResourceCall>(call);
  for (Tensor& t : c->args) {
    if (!t.is_initialized()) continue;
    AF_ASSIGN_OR_RETURN(t, dev->copy_to_host(t));
  }
  c->device = nullptr;
  return ResourceCallPtr(std::move(c));
}

// A hyper-parameter argument (lr, beta1, ...) of a call from `dev`, read on the host.
Result<double> scalar_arg(const VarState& st, Device* dev, const std::vector<Tensor>& args, size_t i) {
  if (i >= args.size() || !args[i].is_initialized() || args[i].num_elements() < 1)
    return err(st, Code::kInvalidArgument, "argument " + std::to_string(i) + " must be a scalar");
  AF_ASSIGN_OR_RETURN(Tensor h, dev->copy_to_host(args[i]));
  return scalar_of(h);
}

// A slot (zeros, or `fill` everywhere) like the value, in `dev`'s memory.
Result<Tensor> device_slot(Device* dev, const Tensor& like, float fill) {
  return dev->copy_from_host(fill == 0.f ? zeros_like(like) : filled_like(like, fill));
}

// Dense optimizer updates applied in a GPU's memory (the variable test checks they ran there).
void count_device_update() {
  static Counter& updates = Metrics::global().counter(
      "actorflow_variable_device_updates_total",
      "Dense optimizer updates applied to this task's variables in a GPU's memory (Device::apply_dense_update).");
  updates.inc();
}

// A call from a kernel on GPU `dev` served in `dev`'s memory (device_method; no replication).
Status dense_update_on_device(VarState& st, Device* dev, const ResourceCall& call) {
  const std::string& m = call.method;
  const auto& args = call.args;
  const size_t want = m == "apply_adam" || m == "apply_rms_prop" ? 5 : m == "apply_momentum" ? 3 : 2;
  if (args.size() != want) return err(st, Code::kInvalidArgument, m + " takes " + std::to_string(want) + " inputs");
  AF_RETURN_IF_ERROR(require_init(st));
  AF_RETURN_IF_ERROR(require_float(st));
  DenseUpdate u;
  AF_ASSIGN_OR_RETURN(u.lr, scalar_arg(st, dev, args, 0));
  size_t grad_at = 1;
  if (m == "apply_sgd") {
    u.kind = DenseUpdate::Kind::kSgd;
  } else if (m == "apply_momentum") {
    u.kind = DenseUpdate::Kind::kMomentum;
    AF_ASSIGN_OR_RETURN(u.momentum, scalar_arg(st, dev, args, 2));
  } else if (m == "apply_adam") {
    u.kind = DenseUpdate::Kind::kAdam;
    AF_ASSIGN_OR_RETURN(u.beta1, scalar_arg(st, dev, args, 1));
    AF_ASSIGN_OR_RETURN(u.beta2, scalar_arg(st, dev, args, 2));
    AF_ASSIGN_OR_RETURN(u.epsilon, scalar_arg(st, dev, args, 3));
    grad_at = 4;
  } else if (m == "apply_adagrad") {
    u.kind = DenseUpdate::Kind::kAdagrad;
  } else {  // apply_rms_prop
    u.kind = DenseUpdate::Kind::kRmsProp;
    AF_ASSIGN_OR_RETURN(u.decay, scalar_arg(st, dev, args, 1));
    AF_ASSIGN_OR_RETURN(u.momentum, scalar_arg(st, dev, args, 2));
    AF_ASSIGN_OR_RETURN(u.epsilon, scalar_arg(st, dev, args, 3));
    grad_at = 4;
  }
  AF_RETURN_IF_ERROR(check_like(st, args[grad_at], "the gradient"));
  Result<Tensor> g = dev->copy_from_host(args[grad_at]);  // as is when already on dev
  if (!g.ok()) return err(st, g.status().code(), "the gradient: " + g.status().message());
  const float init_accum = attr_f(call.attrs, "initial_accumulator_value", 0.1);
  if (u.kind == DenseUpdate::Kind::kAdagrad && !(init_accum > 0))
    return err(st, Code::kInvalidArgument, "apply_adagrad: initial_accumulator_value must be > 0");
  AF_RETURN_IF_ERROR(move_state(st, dev));
  // Slots, created as on the host (zeros; Adagrad's accumulator at its initial value; RMSProp's
  // ms at 1), in the device's memory.
  auto ensure = [&](Tensor& slot, float fill) -> Status {
    if (slot.is_initialized()) return Status::OK();
    AF_ASSIGN_OR_RETURN(slot, device_slot(dev, st.value, fill));
    return Status::OK();
  };
  Tensor* s1 = nullptr;
  Tensor* s2 = nullptr;
  switch (u.kind) {
    case DenseUpdate::Kind::kSgd: break;
    case DenseUpdate::Kind::kMomentum:
      AF_RETURN_IF_ERROR(ensure(st.momentum, 0.f));
      s1 = &st.momentum;
      break;
    case DenseUpdate::Kind::kAdam:
      AF_RETURN_IF_ERROR(ensure(st.adam_m, 0.f));
      AF_RETURN_IF_ERROR(ensure(st.adam_v, 0.f));
      s1 = &st.adam_m;
      s2 = &st.adam_v;
      break;
    case DenseUpdate::Kind::kAdagrad:
      AF_RETURN_IF_ERROR(ensure(st.adagrad_accum, init_accum));
      s1 = &st.adagrad_accum;
      break;
    case DenseUpdate::Kind::kRmsProp:
      AF_RETURN_IF_ERROR(ensure(st.rms_ms, 1.f));
      AF_RETURN_IF_ERROR(ensure(st.rms_mom, 0.f));
      s1 = &st.rms_ms;
      s2 = &st.rms_mom;
      break;
  }
  // Copy-on-write, as writable_value: a reader still holding the value keeps what it read.
  if (!exclusively_held(st.value)) {
    Result<Tensor> own = dev->duplicate(st.value);
    if (!own.ok()) return err(st, own.status().code(), own.status().message());
    st.value = std::move(*own);
  }
  if (u.kind == DenseUpdate::Kind::kAdam) u.adam_t = st.adam_t + 1;
  Status s = dev->apply_dense_update(u, st.value, s1, s2, *g);
  if (!s.ok()) return err(st, s.code(), s.message());
  if (u.kind == DenseUpdate::Kind::kAdam) st.adam_t = u.adam_t;
  count_device_update();
  return Status::OK();
}

caf::result<std::vector<Tensor>> device_call(VarActor* self, const ResourceCall& call, Device* dev) {
  ScopedFlushDenormal flush;  // as handle_call (the host-side copies of slots)
  auto& st = self->state;
  const std::string& m = call.method;
  const auto& args = call.args;
  auto fail = [](const Status& s) -> caf::result<std::vector<Tensor>> { return to_caf_error(s); };
  Status decl = check_declared(st, call.attrs);
  if (!decl.ok()) return fail(decl);
  // A host scalar: the kernel copies it to its device.
  if (m == "is_initialized") return one(Tensor::scalar<bool>(st.value.is_initialized()));
  if (m == "read" || m == "save") {
    Status s = require_init(st);
    if (!s.ok()) return fail(s);
    if (st.home == dev) return one(st.value);
    // Held elsewhere: a copy in the caller's memory; the variable stays where it is.
    Result<Tensor> h = st.home ? st.home->copy_to_host(st.value) : Result<Tensor>(st.value);
    Result<Tensor> d = h.ok() ? dev->copy_from_host(*h) : h;
    if (!d.ok()) return fail(err(st, d.status().code(), d.status().message()));
    return one(std::move(*d));
  }
  if (m == "assign" || m == "restore") {
    if (args.size() != 1) return fail(err(st, Code::kInvalidArgument, "assign takes one value"));
    if (st.dtype == DType::kInvalid) {
      st.dtype = args[0].dtype();
      st.shape = args[0].shape();
    }
    Status s = check_like(st, args[0], "the assigned value");
    if (s.ok()) s = move_state(st, dev);
    if (!s.ok()) return fail(s);
    Result<Tensor> v = dev->duplicate(args[0]);  // a private copy, as on the host
    if (!v.ok()) return fail(err(st, v.status().code(), v.status().message()));
    st.value = std::move(*v);
    ++st.version;
    if (st.sync_aligned || st.sync_closed || st.sync_left > 0) reset_sync(st);
    return one(st.value);
  }
  Status s = dense_update_on_device(st, dev, call);
  if (!s.ok()) return fail(s);
  count_update();
  ++st.version;
  return one(st.value);
}

// One request to the variable (see the handler). May throw (a kernel bug, bad_alloc, an
// injected fault): the caller restarts the actor in place.
caf::result<std::vector<Tensor>> handle_call(VarActor* self, const ResourceCallPtr& call) {
  // Every update below runs with denormals flushed to zero, as TensorFlow's kernels do: a
  // denormal slot value (Adam's m decaying where gradients are 0) costs ~40x per element
  // otherwise (core/denormal.h).
  ScopedFlushDenormal flush;
  auto& st = self->state;
  const std::string& m = call->method;
  const auto& args = call->args;
  auto fail = [](const Status& s) -> caf::result<std::vector<Tensor>> { return to_caf_error(s); };
  Status decl = check_declared(st, call->attrs);
  if (!decl.ok()) return fail(decl);
  if (m == "read" || m == "save") {
    Status s = require_init(st);
    if (!s.ok()) return fail(s);
    if (st.home) {  // the value lives on a GPU: a host copy, the variable stays there
      auto h = st.home->copy_to_host(st.value);
      if (!h.ok()) return fail(err(st, h.status().code(), h.status().message()));
      return one(std::move(*h));
    }
    return one(st.value);
  }
  if (m == "is_initialized") return one(Tensor::scalar<bool>(st.value.is_initialized()));
  if (m == "save_slots") return one(encode_slots(st));
  if (m == "restore_slots") {
    if (args.size() != 1) return fail(err(st, Code::kInvalidArgument, "restore_slots takes one blob"));
    Status s = decode_slots(st, args[0]);
    if (!s.ok()) return fail(s);
    return one(args[0]);
  }
  if (m == "sync_state") {  // a primary's whole state (value, slot blob), on its backup only
    if (args.size() != 2) return fail(err(st, Code::kInvalidArgument, "sync_state takes a value and a slot blob"));
    st.dtype = args[0].dtype();
    st.shape = args[0].shape();
    st.value = args[0];  // shares the received buffer: the next update copies it first if still shared
    ++st.version;
    Status s = decode_slots(st, args[1]);
    if (!s.ok()) return fail(s);
    observe_global_step(st);
    if (st.sync_aligned || st.sync_closed || st.sync_left > 0) reset_sync(st);
    return one(st.value);
  }
  if (m == "assign" || m == "restore") {
    if (args.size() != 1) return fail(err(st, Code::kInvalidArgument, "assign takes one value"));
    if (st.dtype == DType::kInvalid) {
      st.dtype = args[0].dtype();
      st.shape = args[0].shape();
    }
    Status s = check_like(st, args[0], "the assigned value");
    if (!s.ok()) return fail(s);
    st.value = args[0].deep_copy();
    ++st.version;
    observe_global_step(st);
    if (st.sync_aligned || st.sync_closed || st.sync_left > 0) reset_sync(st);
    return one(st.value);
  }
  Status s = require_init(st);
  if (!s.ok()) return fail(s);
  if (m == "scatter_add" || m == "scatter_update") {
    if (args.size() != 2) return fail(err(st, Code::kInvalidArgument, m + " takes indices and updates"));
    auto rows = scatter(st, args[0], args[1], m == "scatter_add");
    if (!rows.ok()) return fail(rows.status());
    count_update();
    ++st.version;
    observe_global_step(st);
    return one(std::move(*rows));
  }
  if (m.rfind("sparse_apply_", 0) == 0 && m != "sparse_apply_sync") {
    const size_t want = m == "sparse_apply_adam" ? 6 : m == "sparse_apply_momentum" ? 4 : 3;
    if (args.size() != want)
      return fail(err(st, Code::kInvalidArgument, m + " takes " + std::to_string(want) + " inputs"));
    const size_t ids_at = m == "sparse_apply_adam" ? 4 : 1;
    auto sr = sparse_rows(st, args[ids_at], args[ids_at + 1], m);
    if (!sr.ok()) return fail(sr.status());
    SparseHyper h;
    h.lr = static_cast<float>(scalar_of(args[0]));
    std::string kind;
    if (m == "sparse_apply_sgd") {
      kind = "sgd";
    } else if (m == "sparse_apply_momentum") {
      kind = "momentum";
      h.momentum = static_cast<float>(scalar_of(args[3]));
    } else if (m == "sparse_apply_adam") {
      kind = "adam";
      h.beta1 = static_cast<float>(scalar_of(args[1]));
      h.beta2 = static_cast<float>(scalar_of(args[2]));
      h.epsilon = static_cast<float>(scalar_of(args[3]));
    } else if (m == "sparse_apply_adagrad") {
      kind = "adagrad";
      h.initial_accumulator = static_cast<float>(call->attrs.get_or<double>("initial_accumulator_value", 0.1));
      if (!(h.initial_accumulator > 0))
        return fail(err(st, Code::kInvalidArgument, m + ": initial_accumulator_value must be > 0"));
    } else {
      return fail(err(st, Code::kInvalidArgument, "unknown method '" + m + "'"));
    }
    Status applied = apply_sparse_update(st, kind, h, *sr);
    if (!applied.ok()) return fail(applied);
    count_update();
    ++st.version;
    observe_global_step(st);
    return one(Tensor::scalar<int64_t>(static_cast<int64_t>(sr->rows.size())));
  }
  if (m == "assign_add") {
    if (args.size() != 1) return fail(err(st, Code::kInvalidArgument, "assign_add takes one delta"));
    s = check_like(st, args[0], "the delta");
    if (s.ok()) s = assign_add(st, args[0]);
  } else if (m == "apply_sgd") {
    if (args.size() != 2) return fail(err(st, Code::kInvalidArgument, "apply_sgd takes lr and grad"));
    s = check_like(st, args[1], "the gradient");
    if (s.ok()) s = apply_sgd(st, static_cast<float>(scalar_of(args[0])), args[1]);
  } else if (m == "apply_momentum") {
    if (args.size() != 3) return fail(err(st, Code::kInvalidArgument, "apply_momentum takes lr, grad, momentum"));
    s = check_like(st, args[1], "the gradient");
    if (s.ok())
      s = apply_momentum(st, static_cast<float>(scalar_of(args[0])), args[1], static_cast<float>(scalar_of(args[2])));
  } else if (m == "apply_adam") {
    if (args.size() != 5) return fail(err(st, Code::kInvalidArgument, "apply_adam takes lr, b1, b2, eps, grad"));
    s = check_like(st, args[4], "the gradient");
    if (s.ok())
      s = apply_adam(st, static_cast<float>(scalar_of(args[0])), static_cast<float>(scalar_of(args[1])),
                     static_cast<float>(scalar_of(args[2])), static_cast<float>(scalar_of(args[3])), args[4]);
  } else if (m == "apply_adagrad") {
    if (args.size() != 2) return fail(err(st, Code::kInvalidArgument, "apply_adagrad takes lr and grad"));
    s = check_like(st, args[1], "the gradient");
    if (s.ok())
      s = apply_adagrad(st, static_cast<float>(scalar_of(args[0])), args[1],
                        attr_f(call->attrs, "initial_accumulator_value", 0.1));
  } else if (m == "apply_rms_prop") {
    if (args.size() != 5)
      return fail(err(st, Code::kInvalidArgument, "apply_rms_prop takes lr, decay, momentum, epsilon, grad"));
    s = check_like(st, args[4], "the gradient");
    if (s.ok())
      s = apply_rms_prop(st, static_cast<float>(scalar_of(args[0])), static_cast<float>(scalar_of(args[1])),
                         static_cast<float>(scalar_of(args[2])), static_cast<float>(scalar_of(args[3])), args[4]);
  } else if (m == "apply_sync" || m == "sparse_apply_sync") {
    const bool sparse = m == "sparse_apply_sync";
    if (args.size() != (sparse ? 3u : 2u))
      return fail(err(st, Code::kInvalidArgument,
                      m + (sparse ? " takes indices, values and local_step" : " takes grad and local_step")));
    const std::string opt = call->attrs.get_or<std::string>("optimizer", "adam");
    // Summing gradients needs float32 values; an increment needs an element to add to.
    if (opt != "increment") {
      s = require_float(st);
      if (!s.ok()) return fail(s);
    } else if (st.dtype == DType::kBool || st.shape.num_elements() < 1) {
      return fail(err(st, Code::kInvalidArgument, m + ": 'increment' needs a numeric variable with an element"));
    }
    if (st.sync_count > 0 && opt != st.sync_opt)
      return fail(err(st, Code::kInvalidArgument,
                      m + ": optimizer '" + opt + "' for step " + std::to_string(st.sync_step) +
                          ", whose other contributions use '" + st.sync_opt + "'"));
    Result<SparseRows> contribution = SparseRows{};
    if (sparse) {
      contribution = sparse_rows(st, args[0], args[1], m);
      if (!contribution.ok()) return fail(contribution.status());
      if (opt != "sgd" && opt != "momentum" && opt != "adam" && opt != "adagrad")
        return fail(err(st, Code::kInvalidArgument, m + ": no sparse form of optimizer '" + opt + "'"));
    } else if (opt != "increment") {
      s = check_like(st, args[0], "the gradient");
      if (!s.ok()) return fail(s);
    }
    const Tensor& step_t = args[sparse ? 2 : 1];
    if (step_t.dtype() != DType::kInt64 || step_t.num_elements() != 1)
      return fail(err(st, Code::kInvalidArgument,
                      m + ": local_step must be an int64 scalar, got " + std::string(dtype_name(step_t.dtype())) + " " +
                          step_t.shape().to_string()));
    const int64_t local_step = step_t.data<int64_t>()[0];
    // A step number, counted up from here: never negative nor near the end of int64.
    if (local_step < 0 || local_step > (int64_t{1} << 62))
      return fail(err(st, Code::kInvalidArgument, m + ": local_step " + std::to_string(local_step) + " is not in [0, 2^62]"));
    const int64_t replicas = call->attrs.get_or<int64_t>("replicas_to_aggregate", 1);
    if (st.sync_closed)
      return fail(err(st, Code::kOutOfRange,
                      st.sync_closed_why + "; the gradient of step " + std::to_string(local_step) + " was not applied"));
    if (!st.sync_aligned) {  // the first contribution: start at its step (the global step)
      st.sync_step = local_step;
      st.sync_aligned = true;
    }
    if (local_step < st.sync_step) {  // stale: dropped and counted
      ++st.sync_stale;
      return one(Tensor::scalar<int64_t>(-1));
    }
    // A contribution of a later step than the accumulator's: with nothing collected yet, the
    // accumulator is behind (its last step failed here, by a timeout or a restart, while the
    // global step went on), so it realigns to the contribution's step and never lags. With
    // gradients already collected it counts for the current step (a replica that started its
    // next step early, a benign race: the step still aggregates replicas_to_aggregate fresh
    // gradients, as TensorFlow's accumulators accept local_step >= their step).
    if (local_step > st.sync_step && st.sync_count == 0) {
      st.sync_step = local_step;
      ++st.sync_realigned;
    }
    // wait = false (SyncReplicasOptimizer's variable updates): the contribution is accepted and
    // answered at once with the step it counts for; only the global step's increment (wait =
    // true) holds the replicas until the step is complete. So a replica never waits at one
    // variable while the other waits at another (the livelock after a partition), and a
    // partial accumulation without waiters needs no timeout: it completes with the next
    // contributions.
    const bool wait = call->attrs.get_or<bool>("wait", true);
    if (st.sync_count > 0 && st.sync_sparse != sparse)
      return fail(err(st, Code::kInvalidArgument,
                      m + ": a " + (sparse ? "sparse" : "dense") + " gradient for step " + std::to_string(st.sync_step) +
                          ", whose other contributions are " + (sparse ? "dense" : "sparse")));
    if (sparse) {
      // Sum the contribution's rows into the step's, counting the contributions per row.
      st.sync_sparse = true;
      const SparseRows& c = *contribution;
      for (size_t j = 0; j < c.rows.size(); ++j) {
        auto [it, fresh] = st.sync_row_at.emplace(c.rows[j], st.sync_rows.size());
        const float* g = c.grad.data() + j * static_cast<size_t>(c.row);
        if (fresh) {
          st.sync_rows.push_back(c.rows[j]);
          st.sync_row_sum.insert(st.sync_row_sum.end(), g, g + c.row);
          st.sync_row_count.push_back(1);
        } else {
          float* acc = st.sync_row_sum.data() + it->second * static_cast<size_t>(c.row);
          for (int64_t k = 0; k < c.row; ++k) acc[k] += g[k];
          ++st.sync_row_count[it->second];
        }
      }
    }
    if (st.sync_count == 0) {
      st.sync_opt = opt;
      st.sync_first = std::chrono::steady_clock::now();
      if (opt != "increment" && !sparse) st.sync_sum = args[0].deep_copy();
      ++st.sync_generation;
      if (wait) {
        // A peer's attribute: NaN, negative or huge timeouts become 0 s or a day (no undefined
        // double -> integer conversion).
        double timeout = call->attrs.get_or<double>("sync_timeout_secs", 60.0);
        timeout = timeout >= 0 ? std::min(timeout, 86400.0) : 0.0;
        self->delayed_send(self, std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000)),
                           sync_check_atom::value, st.sync_generation, replicas, timeout);
      }
    } else if (opt != "increment" && !sparse) {
      float* sum = st.sync_sum.data<float>();
      const float* g = args[0].data<float>();
      for (int64_t i = 0, n = args[0].num_elements(); i < n; ++i) sum[i] += g[i];
    }
    ++st.sync_count;
    st.sync_waits.contributed(st.sync_step, call->attrs.get_or<std::string>(kSyncCallerAttr, ""), replicas);
    const int64_t counted_for = st.sync_step;
    if (wait) st.sync_waiting.push_back(self->make_response_promise());
    if (st.sync_count >= replicas) finish_sync_step(st, call->attrs);
    if (!wait) return one(Tensor::scalar<int64_t>(counted_for));
    return caf::delegated<std::vector<Tensor>>();
  } else if (m == "sync_control") {
    const std::string action = call->attrs.get_or<std::string>("action", "stats");
    const int64_t replicas = call->attrs.get_or<int64_t>("replicas_to_aggregate", 1);
    const int64_t total = call->attrs.get_or<int64_t>("total_num_replicas", replicas);
    if (action == "leave") {
      ++st.sync_left;
      int64_t remaining = 0;  // total and replicas are a peer's attributes: no overflowing subtraction
      if (!checked_sub(total, st.sync_left, &remaining)) remaining = total < 0 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
      if (!st.sync_closed && remaining < replicas)
        close_sync(st, "synchronous training ended: " + std::to_string(st.sync_left) + " of " +
                           std::to_string(total) + " replicas finished, fewer than the " +
                           std::to_string(replicas) + " a step aggregates are left");
      return one(Tensor::scalar<int64_t>(st.sync_step));
    }
    if (action == "close") {
      if (!st.sync_closed) close_sync(st, "synchronous training was closed at step " + std::to_string(st.sync_step));
      return one(Tensor::scalar<int64_t>(st.sync_step));
    }
    if (action != "stats") return fail(err(st, Code::kInvalidArgument, "unknown sync_control action '" + action + "'"));
    Tensor t(DType::kInt64, Shape{6});
    int64_t* p = t.data<int64_t>();
    p[0] = st.sync_step;
    p[1] = st.sync_applied;
    p[2] = st.sync_stale;
    p[3] = st.sync_realigned;
    p[4] = st.sync_left;
    p[5] = st.sync_closed ? 1 : 0;
    return one(t);
  } else {
    return fail(err(st, Code::kInvalidArgument, "unknown method '" + m + "'"));
  }
  if (!s.ok()) return fail(s);
  count_update();
  ++st.version;
  observe_global_step(st);
  return one(st.value);
}

// After an exception: fail the pending synchronous contributions (their workers retry), keep
// the value and optimizer slots (the durable state), and count the restart. Returns the error
// for the request that threw.
Status restart_in_place(VarActor* self, const std::string& what) {
  auto& st = self->state;
  const std::string who = "variable '" + st.var + "' (variable actor)";
  Status budget = st.restarts.record_failure(who, what);
  Status why = budget.ok() ? Aborted("variable '" + st.var + "': exception in the variable actor: " + what +
                                     "; the actor restarted in place")
                           : budget;
  auto waiting = std::move(st.sync_waiting);
  st.sync_waiting.clear();
  clear_sync_accumulation(st);
  st.sync_aligned = false;
  ++st.sync_generation;
  for (auto& rp : waiting) rp.deliver(to_caf_error(why));
  if (!budget.ok()) st.failed = budget;
  return why;
}

// A backup does not apply the dense optimizer updates it is sent (apply_sgd, _momentum, _adam,
// _adagrad, _rms_prop: each rewrites the whole variable and its slots, several passes over
// memory): it holds each call, in order, and acknowledges it. Every kSyncEvery-th dense update the
// primary sends its whole state (value and slots, after that update) instead of the call, or
// sooner once the calls since the last whole state carry kHeldStates times the whole state's
// bytes (so a backup holds at most a few times its variable's own memory: 12 Adam gradients,
// 4 SGD ones); the backup replaces its state with it and drops the calls it held, which the state
// includes.
// Any other call on the backup (a read, a checkpoint save, a sparse or synchronous update, the
// first update after a failover that promotes it) first applies the held calls, so whatever is
// read or served from the copy includes every acknowledged update. Measured on the seed CNN
// with 2 workers on 2 cores (bench/replication_cost.py): the backup's Adam pass over the 6.5 MB
// of variables was the largest part of the replication cost (docs/benchmarks.md).
constexpr int kSyncEvery = 16;
constexpr size_t kHeldStates = 4;
// A backup holds at most twice that (past it, it applies), whatever its primary sends.
constexpr size_t kMaxDeferred = 2 * kSyncEvery;
constexpr size_t kMaxDeferredStates = 2 * kHeldStates;

// The bytes of the variable's value and slots: what a whole state carries.
size_t state_bytes(const VarState& st) {
  size_t b = 0;
  for (const Tensor* t : {&st.value, &st.momentum, &st.adam_m, &st.adam_v, &st.adagrad_accum, &st.rms_ms, &st.rms_mom})
    if (t->is_initialized()) b += t->bytes();
  return b;
}

size_t call_bytes(const ResourceCall& c) {
  size_t b = 0;
  for (const Tensor& t : c.args)
    if (t.is_initialized()) b += t.bytes();
  return b;
}

bool dense_optimizer_call(const std::string& m) {
  return m == "apply_sgd" || m == "apply_momentum" || m == "apply_adam" || m == "apply_adagrad" ||
         m == "apply_rms_prop";
}

// Holds `call` unapplied on a backup when it is a replicated dense update (true: acknowledge it
// now); false when it must run now.
bool defer_on_backup(VarActor* self, const ResourceCallPtr& call) {
  auto& st = self->state;
  if (!st.rep || !call->attrs.get_or<bool>(kReplicaCallAttr, false) || !dense_optimizer_call(call->method)) return false;
  const size_t bytes = call_bytes(*call);
  if (!st.value.is_initialized() || st.deferred.size() >= kMaxDeferred ||
      st.deferred_bytes + bytes > kMaxDeferredStates * state_bytes(st))
    return false;
  st.backup_role = true;
  st.primary = call->attrs.get_or<std::string>(kReplicaFromAttr, "");
  st.deferred.push_back(call);
  st.deferred_bytes += bytes;
  return true;
}

// Applies the dense updates a backup holds, in order (before any other call), or drops them when
// `call` is the primary's whole state, which includes them.
void apply_deferred(VarActor* self, const ResourceCall& call) {
  ScopedFlushDenormal flush;  // as handle_call
  auto& st = self->state;
  if (st.deferred.empty()) return;
  auto held = std::move(st.deferred);
  st.deferred.clear();
  st.deferred_bytes = 0;
  if (call.method == "sync_state" && call.attrs.get_or<bool>(kReplicaCallAttr, false)) return;
  for (const auto& c : held) {
    caf::result<std::vector<Tensor>> r = handle_call(self, c);
    // The primary applied the same call to the same state, so this cannot fail short of a bug.
    if (r.flag == caf::rt_error) {
      AF_LOG(ERROR) << "variable '" << st.var << "': a held update (" << c->method << ") failed on the backup: "
                    << caf::to_string(r.err);
    }
  }
}

// A direct (not replicated) update reaching a backup copy: while the copy's primary is alive the
// caller has not failed over (it started after the failover, or noticed a failure the ps tasks
// did not): refused with Unavailable carrying the served_by marker, so the caller's process
// routes this task's variables to the primary. With the primary gone, the copy takes over
// (promotion) and the update proceeds. Reads are never refused: a backup holds every
// acknowledged update.
std::optional<Status> backup_refuses(VarActor* self, const ResourceCall& call) {
  auto& st = self->state;
  if (!st.backup_role || call.attrs.get_or<bool>(kReplicaCallAttr, false)) return std::nullopt;
  if (!st.primary.empty() && st.rep->primary_alive(st.primary))
    return Status(Code::kUnavailable, "variable '" + st.var + "' on " + st.rep->own_task() + " is a backup copy; its primary " +
                                          st.primary + " serves updates " + served_by_marker(st.rep->own_task(), st.primary));
  st.backup_role = false;
  st.synced_epoch = 0;
  AF_LOG(WARNING) << "variable '" << st.var << "': its backup copy serves as the primary now (its primary "
                  << (st.primary.empty() ? std::string("?") : st.primary) << " is gone)";
  return std::nullopt;
}

// With the backup's data plane known, the call's large host tensors (kReplicaDataMinBytes and
// up, kReplicaDataMaxCallBytes in all) go over the data plane (fewer copies than the control
// plane: written from the tensor's buffer, read into a fresh one) ahead of the call, which
// carries uninitialised tensors in their places and kReplicaDataAttr naming the frames.
struct SentAhead {
  uint64_t epoch = 0;         // the backup connection they went to
  std::vector<size_t> moved;  // the arguments sent
  std::string attr;           // the call's kReplicaDataAttr
};

// Queues the large tensors of `args` for the backup `b`; nullopt when none qualify or the
// backup's data plane is unknown. The tensors are shared, not copied, until the replicator's
// thread has written them: a whole state's value is safe because an update writes the value in
// place only when nobody else holds its buffer (writable_value copies it first), and the slots
// go as encode_slots' copy.
std::optional<SentAhead> send_ahead(VarActor* self, const PsReplicator::Backup& b, const std::vector<Tensor>& args) {
  auto& st = self->state;
  if (b.data_addr.empty()) return std::nullopt;
  std::vector<std::pair<size_t, Tensor>> moved;
  size_t bytes = 0;
  for (size_t i = 0; i < args.size() && i < ReplicaInbox::kMaxArgs; ++i) {
    const Tensor& t = args[i];
    if (!t.is_initialized() || !t.on_host() || t.bytes() < kReplicaDataMinBytes) continue;
    moved.emplace_back(i, t);
    bytes += t.bytes();
  }
  if (moved.empty() || bytes > kReplicaDataMaxCallBytes) return std::nullopt;
  SentAhead out;
  out.epoch = b.epoch;
  const std::string key = st.rep->instance() + "|" + st.var + "|" + std::to_string(++st.next_data_call);
  out.attr = ReplicaInbox::data_attr(moved.size(), key);
  for (const auto& m : moved) out.moved.push_back(m.first);
  st.rep->send_tensors(b.epoch, key, std::move(moved));
  return out;
}

// Takes the tensors `ahead` sent out of the call's `args` and names them in `attrs`.
void mark_sent_ahead(const SentAhead& ahead, std::vector<Tensor>& args, AttrMap& attrs) {
  for (size_t i : ahead.moved) args[i] = Tensor();
  attrs.set(kReplicaDataAttr, ahead.attr);
}

// Whether a dense update `call` goes to the backup as the whole state rather than as itself
// (see kSyncEvery). Pure.
bool whole_state_due(const VarState& st, const ResourceCall& call) {
  return st.dense_since_sync + 1 >= kSyncEvery ||
         st.dense_bytes_since_sync + call_bytes(call) >= kHeldStates * state_bytes(st);
}

// Before a primary applies `call`: when it will go to the connected backup as itself (not as
// the whole state), its large tensors are sent now, so that their trip overlaps the local
// update instead of following it. Nullopt when nothing went.
std::optional<SentAhead> send_call_early(VarActor* self, const ResourceCall& call) {
  auto& st = self->state;
  if (call.attrs.get_or<bool>(kReplicaCallAttr, false) || !st.value.is_initialized()) return std::nullopt;
  const PsReplicator::Backup b = st.rep->backup();
  if (!b.node || st.synced_epoch != b.epoch) return std::nullopt;
  if (dense_optimizer_call(call.method) && whole_state_due(st, call)) return std::nullopt;
  return send_ahead(self, b, call.args);
}

// Replication of a mutating call whose local outcome is `r` (actors/ps_replication.h). A call
// that came from a primary (kReplicaCallAttr) makes this copy a backup and is answered as it
// is. A call from a kernel on a copy that was a backup promotes it (its primary's task failed
// over to this one). A primary with a connected backup sends it the call (or, first after a
// new connection, its whole state) and answers only once the backup acknowledged; without a
// backup (none connected, or the call to it failed: the backup is down) it answers alone. A
// failed local call is not replicated.
caf::result<std::vector<Tensor>> replicate(VarActor* self, const ResourceCallPtr& call,
                                           caf::result<std::vector<Tensor>> r, const std::optional<SentAhead>& early) {
  auto& st = self->state;
  if (call->attrs.get_or<bool>(kReplicaCallAttr, false)) {
    st.backup_role = true;
    st.primary = call->attrs.get_or<std::string>(kReplicaFromAttr, "");
    // The primary only waits for the acknowledgement: an update's usual reply (the whole updated
    // variable) would cross the control plane back for nothing.
    if (r.flag == caf::rt_value) return std::vector<Tensor>{};
    return r;
  }
  if (r.flag == caf::rt_error) return r;
  const PsReplicator::Backup b = st.rep->backup();
  if (!b.node) return r;  // no backup connected: the primary serves alone
  if (!st.value.is_initialized()) return r;  // nothing to copy yet
  std::string method = call->method;
  std::vector<Tensor> args = call->args;
  AttrMap attr_map = call->attrs;
  if (st.synced_epoch != b.epoch) {
    // The backup (re)connected since this variable's last full copy: it may hold nothing or an
    // old state, so it gets the whole state (value and slots) instead of the call.
    method = "sync_state";
    args = {st.value, encode_slots(st)};
    attr_map = AttrMap();
    st.synced_epoch = b.epoch;
    st.dense_since_sync = 0;
    st.dense_bytes_since_sync = 0;
  } else if (dense_optimizer_call(method) && whole_state_due(st, *call)) {
    // The backup holds the dense updates since the last whole state unapplied: this one goes
    // as the whole state after it, which replaces them there (see kSyncEvery).
    method = "sync_state";
    args = {st.value, encode_slots(st)};
    attr_map = AttrMap();
    st.dense_since_sync = 0;
    st.dense_bytes_since_sync = 0;
  } else if (dense_optimizer_call(method)) {
    ++st.dense_since_sync;
    st.dense_bytes_since_sync += call_bytes(*call);
  }
  // Tensors of the call sent before it was applied go with this call only when it goes as
  // itself to the same connection (the local update can change what is due: they then expire
  // unclaimed in the backup's inbox).
  if (early && early->epoch == b.epoch && method == call->method) {
    mark_sent_ahead(*early, args, attr_map);
  } else if (auto ahead = send_ahead(self, b, args)) {
    mark_sent_ahead(*ahead, args, attr_map);
  }
  const std::string attrs = encode_call_attrs(attr_map);
  if (r.flag == caf::rt_delegated) {
    // A held synchronous contribution: its reply goes out when the step completes (the
    // backup counts the same contributions in the same order; see docs/architecture/ps-replication.md).
    self->request(b.node, st.rep->timeout(), replicate_atom::value, st.var, method, std::move(args), attrs)
        .then([](const std::vector<Tensor>&) {},
              [self, epoch = b.epoch](const caf::error& e) {
                self->state.rep->backup_failed(epoch, caf::to_string(e));
              });
    return r;
  }
  const caf::actor_addr backup_addr = caf::actor_cast<caf::actor_addr>(b.node);
  if (st.watched_backup != backup_addr) {
    self->monitor(b.node);
    st.watched_backup = backup_addr;
  }
  st.watched_epoch = b.epoch;
  const uint64_t id = ++st.next_ack;
  st.pending_acks.emplace(id, VarState::PendingAck{self->make_response_promise<std::vector<Tensor>>(),
                                                   r.value.get_as<std::vector<Tensor>>(0)});
  auto settle = [self, id] {
    auto& s = self->state;
    auto it = s.pending_acks.find(id);
    if (it == s.pending_acks.end()) return;  // answered already (the backup went down)
    it->second.rp.deliver(std::move(it->second.value));
    s.pending_acks.erase(it);
  };
  self->request(b.node, st.rep->timeout(), replicate_atom::value, st.var, method, std::move(args), attrs)
      .then([settle](const std::vector<Tensor>&) { settle(); },
            [self, settle, epoch = b.epoch](const caf::error& e) {
              // The backup is gone (its connection closed, or it did not answer within the peer
              // timeout: what Membership calls down). The view changes to "primary alone": the
              // update is held by every live copy, so it is acknowledged; the backup gets the
              // whole state again once it is back.
              auto& s = self->state;
              const Status why = from_caf_error(e, s.rep->backup_task());
              s.rep->backup_failed(epoch, why.message());
              s.synced_epoch = 0;
              settle();
            });
  return st.pending_acks.at(id).rp;
}

// On leaving a handler: the accumulator's registered waits follow its state (actors/sync_waits.h).
struct RefreshSyncWaits {
  VarState& st;
  ~RefreshSyncWaits() { st.sync_waits.refresh(st.var, st.sync_step, st.sync_count, !st.sync_waiting.empty()); }
};

var_impl_t::behavior_type variable_actor(VarActor* self, std::string name, RestartPolicy restarts,
                                         std::shared_ptr<PsReplicator> rep) {
  self->state.var = std::move(name);
  self->state.restarts = RestartBudget(restarts);
  self->state.rep = std::move(rep);
  ignore_remote_exits(self, "variable actor " + self->state.var);
  // The monitored backup's node actor is gone (its connection closed): every update waiting for
  // its acknowledgement is held by every live copy, so it is answered now; the backup gets the
  // whole state again once it is back (as when a replicated call fails).
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (!st.rep || dm.source != st.watched_backup) return;
    st.watched_backup = caf::actor_addr();
    st.rep->backup_failed(st.watched_epoch, "its connection closed (" + caf::to_string(dm.reason) + ")");
    st.synced_epoch = 0;
    auto pending = std::move(st.pending_acks);
    st.pending_acks.clear();
    for (auto& [id, p] : pending) p.rp.deliver(std::move(p.value));
  });
  return {
      [=](resource_atom, const ResourceCallPtr& call) -> caf::result<std::vector<Tensor>> {
        const RefreshSyncWaits refresh{self->state};
        // Past its restart budget the actor answers every request with that error.
        if (!self->state.failed.ok()) return to_caf_error(self->state.failed);
        // An exception (an injected `throw` fault for actor "variable", or a real one) fails
        // this request and restarts the actor in place (CAF 0.17 would stop the actor).
        try {
          FaultInjector::global().maybe_throw("variable", "");
          // A kernel on a GPU: served in the GPU's memory where it can be (see device_call),
          // otherwise on the host with its arguments copied there.
          Device* dev = device_of(*call);
          if (dev && !self->state.rep && device_method(call->method)) return device_call(self, *call, dev);
          if (self->state.home && !leaves_value_in_place(call->method)) {
            Status moved = move_state(self->state, nullptr);
            if (!moved.ok()) return to_caf_error(moved);
          }
          ResourceCallPtr c = call;
          if (dev) {
            auto h = host_call(*call, dev);
            if (!h.ok()) return to_caf_error(err(self->state, h.status().code(), h.status().message()));
            c = std::move(*h);
          }
          if (defer_on_backup(self, c)) return std::vector<Tensor>{};
          apply_deferred(self, *c);
          if (!self->state.rep || !replicated_method(c->method, c->attrs)) return handle_call(self, c);
          if (auto refused = backup_refuses(self, *c)) return to_caf_error(*refused);
          const std::optional<SentAhead> early = send_call_early(self, *c);
          return replicate(self, c, handle_call(self, c), early);
        } catch (const std::exception& e) {
          return to_caf_error(restart_in_place(self, e.what()));
        }
      },
      [=](sync_check_atom, int64_t generation, int64_t replicas, double timeout) {
        auto& st = self->state;
        const RefreshSyncWaits refresh{st};
        // That accumulation completed (or was reset) and another may be under way.
        if (st.sync_generation != generation || st.sync_count == 0) return;
        Status s = err(st, Code::kDeadlineExceeded,
                       "synchronous step " + std::to_string(st.sync_step) + ": only " + std::to_string(st.sync_count) + " of " +
                           std::to_string(replicas) + " gradients arrived within " + std::to_string(timeout) + " s");
        AF_LOG(WARNING) << s.message();
        auto waiting = std::move(st.sync_waiting);
        st.sync_waiting.clear();
        clear_sync_accumulation(st);
        for (auto& rp : waiting) rp.deliver(to_caf_error(s));
      },
  };
}

}  // namespace

variable_actor_t spawn_variable_actor(caf::actor_system& sys, const std::string& name, RestartPolicy restarts,
                                      std::shared_ptr<PsReplicator> replicator) {
  return sys.spawn(variable_actor, name, restarts, std::move(replicator));
}

ResourceFactory variable_actor_factory(RestartPolicy restarts, std::shared_ptr<PsReplicator> replicator) {
  return [restarts, replicator](caf::actor_system& sys, const std::string& name) {
    return spawn_variable_actor(sys, name, restarts, replicator);
  };
}

}  // namespace actorflow
