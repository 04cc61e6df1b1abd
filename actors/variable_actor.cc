#include "core/metrics.h"
#include "actors/variable_actor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <type_traits>
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
#include "core/step_trace.h"
#include "core/waits.h"
#include "device/device.h"
#include "device/optimizers.h"
#include "device/variable_call.h"
#include "runtime/sync_accumulator.h"

namespace actorflow {
namespace {

using sync_check_atom = caf::atom_constant<caf::atom("synccheck")>;
using sync_deadline_atom = caf::atom_constant<caf::atom("syncdline")>;
// The variable actor's interface with its private timers: the step timeout (generation, replicas,
// timeout secs) and the sync deadline (generation).
using var_impl_t = variable_actor_t::extend<caf::reacts_to<sync_check_atom, int64_t, int64_t, double>,
                                            caf::reacts_to<sync_deadline_atom, int64_t>>;

class VarCell;

// Bugs planted on purpose, for the history checker's own test (tests/history_test.cc, "the checker
// is checked"): a ps node started with AF_TEST_PLANTED_BUG set to one of these names misbehaves
// in that one way, and says so in a WARNING at its first replicated update. Never set
// outside that test; unset (or any other value) changes nothing. Read once.
//   ack_without_backup    a primary acknowledges an update without forwarding it to its backup
//                         (only whole states still go), so a failover loses acknowledged updates;
//   backup_applies_twice  a backup applies each replicated row update twice.
enum class PlantedBug { kNone, kAckWithoutBackup, kBackupAppliesTwice };
PlantedBug planted_bug() {
  static const PlantedBug bug = [] {
    const char* e = std::getenv("AF_TEST_PLANTED_BUG");
    const std::string v = e ? e : "";
    const PlantedBug b = v == "ack_without_backup"     ? PlantedBug::kAckWithoutBackup
                         : v == "backup_applies_twice" ? PlantedBug::kBackupAppliesTwice
                                                       : PlantedBug::kNone;
    if (b != PlantedBug::kNone)
      AF_LOG(WARNING) << "AF_TEST_PLANTED_BUG=" << v << ": this node replicates wrongly on purpose (a test of the history checker)";
    return b;
  }();
  return bug;
}

struct VarState {
  std::string var;
  DType dtype = DType::kInvalid;
  Shape shape;
  Tensor value;              // uninitialized until the first assign
  int64_t version = 0;
  // The optimizer slots by id and Adam's step count (device/optimizers.h: which optimizer has
  // which slots and how they start).
  OptimizerState opt;
  // Where the value and the slots above live: null = host memory; a GPU once a kernel on it
  // wrote the variable (device_call below). The host-only state (the accumulator) stays on the host.
  Device* home = nullptr;
  // Synchronous replicas: the accumulator (runtime/sync_accumulator.h), the replies held until
  // its step completes, and when that step's first gradient came.
  SyncAccumulator sync;
  std::vector<caf::response_promise> sync_waiting;
  // Traced steps among the waiting contributions (core/step_trace.h): each gets a "sync_wait"
  // event when the replies are released.
  struct TracedWait {
    std::shared_ptr<StepTrace> trace;
    int64_t since_ns = 0;
    int64_t step = 0;  // the accumulator's step it counts for
    std::string task, caller;
  };
  std::vector<TracedWait> sync_traced;
  SyncWaits sync_waits;  // what the waiting runs wait for (actors/sync_waits.h)
  std::chrono::steady_clock::time_point sync_first;
  // The options of the current step's first contribution (what a step closed short applies).
  vcall::SyncContribution sync_call;
  // Short steps' WARNINGs: at most one per kShortLogEvery; the ones left out are counted.
  std::chrono::steady_clock::time_point short_logged;
  int64_t short_unlogged = 0;
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
  // The inline part (VarCell below), which serves some calls on the callers' threads. The last
  // member, so the first destroyed: it stops serving before the rest of the state goes.
  struct CellLink {
    std::shared_ptr<VarCell> cell;
    CellLink() = default;
    CellLink(const CellLink&) = delete;
    CellLink& operator=(const CellLink&) = delete;
    ~CellLink();
  } link;
  static constexpr const char* name = "variable";
};
using VarActor = var_impl_t::stateful_base<VarState>;

// A variable's inline part (actors/resources.h): a read, or an update of a small variable in
// host memory, served on the caller's thread (the device actor's: the kernel's call and its
// answer skip two mailbox hops) under `mu`, which the actor also holds while it handles any
// message, so a variable's calls still never interleave; a call that finds `mu` held goes to the
// actor instead of waiting. The rest goes to the actor: synchronous
// contributions and their control (their answers are held), checkpoint slots, replicated
// variables (their updates reach the backup first), a variable living in a GPU's memory or a
// call from a GPU kernel, updates of variables over kInlineUpdateBytes (their math would hold
// the device actor's thread, where the actor's own thread lets the next step go on), and any
// call once the actor is past its restart budget or gone.
class VarCell final : public InlineResource {
 public:
  // Updates of variables up to this size (value or arguments) are served inline: the seed CNN's
  // biases, first convolution, last layer and global_step are; its 200 KiB and 12.8 MiB weights
  // are not.
  static constexpr size_t kInlineUpdateBytes = 64 * 1024;

  explicit VarCell(bool replicated) : replicated_(replicated) {}
  std::optional<Result<std::vector<Tensor>>> try_call(const ResourceCall& call) override;

  std::mutex mu;
  VarState* st = nullptr;  // guarded by mu: the actor's state while the actor lives

 private:
  const bool replicated_;  // the variable is replicated: nothing is served inline
};

VarState::CellLink::~CellLink() {
  if (!cell) return;
  std::lock_guard<std::mutex> l(cell->mu);
  cell->st = nullptr;
}

Status err(const VarState& st, Code code, const std::string& msg) {
  return Status(code, "variable '" + st.var + "': " + msg);
}
Status err(const VarState& st, const Status& s) { return s.with_prefix("variable '" + st.var + "'"); }

// Learns dtype/shape from the caller's declaration on first use; checks them afterwards.
Status check_declared(VarState& st, const VariableOp& op) {
  const DType t = op.dtype;
  const Shape& s = op.shape;
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
  if (!st.value.is_initialized())
    return err(st, Code::kFailedPrecondition, "is not initialized").with_detail(Uninitialized{st.var});
  return Status::OK();
}

Status require_float(const VarState& st) {
  if (st.dtype != DType::kFloat32) return err(st, Code::kUnimplemented, "optimizer updates need a float32 variable");
  return Status::OK();
}

// One dense optimizer update of the float32 host value (device/optimizers.h). In place when the
// value's buffer is this actor's alone; otherwise the new value is written into a fresh buffer in
// the same pass (a reader's snapshot stays intact).
Status dense_update(VarState& st, Optimizer opt, const OptimizerHyper& h, const Tensor& g) {
  AF_RETURN_IF_ERROR(require_float(st));
  Status s = apply_dense(opt, h, st.value, exclusively_held(st.value), st.opt, g);
  return s.ok() ? s : err(st, s);
}

// A float32 tensor like the value, every element `v` (a slot's initial value).
Tensor filled_like(const Tensor& t, float v) {
  Tensor out = zeros_like(t);
  float* d = out.data<float>();
  std::fill(d, d + out.num_elements(), v);
  return out;
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
  int64_t row = 1;
  for (int i = 1; i < st.shape.rank(); ++i) row *= st.shape.dim(i);
  AF_ASSIGN_OR_RETURN(const std::vector<int64_t> rows_at, row_indices(st, ids, what));
  return sum_sparse_rows(rows_at, values.data<float>(), row);
}

// The sparse form of `opt` on the rows of `sr` (device/optimizers.h: TensorFlow's SparseApply*
// semantics, the slots of absent rows stay as they are).
Status sparse_update(VarState& st, Optimizer opt, const OptimizerHyper& h, const SparseRows& sr,
                     const std::string& what) {
  Status s = apply_sparse(opt, h, writable_value(st), st.opt, sr, what);
  return s.ok() ? s : err(st, s);
}

std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

// Fault injection: the global step variable reports its value (at_step faults).
void observe_global_step(const VarState& st) {
  if (FaultInjector::global().armed() && is_global_step_name(st.var) && st.value.is_initialized() &&
      st.value.on_host() && st.value.dtype() == DType::kInt64 && st.value.num_elements() == 1)
    FaultInjector::global().on_global_step(st.value.data<int64_t>()[0]);
}

// Metrics (core/metrics.h): updates this task's variables applied, and how long synchronous
// steps waited for their replicas.
void count_update() {
  static Counter& updates = Metrics::global().counter(
      "actorflow_variable_updates_total", "Updates (optimizer steps, assign_add, scatters) applied to this task's variables.");
  updates.inc();
}

// Answers the replies held for the current accumulation with `answer(rp)` (a step number or an
// error). `contributions`: how many gradients the accumulation had (its traced waits say so).
template <class Answer>
void release_waiting(VarState& st, int64_t contributions, Answer&& answer) {
  auto waiting = std::move(st.sync_waiting);
  st.sync_waiting.clear();
  for (auto& w : st.sync_traced) {
    TraceEvent e;
    e.task = w.task;
    e.track = "variable " + st.var;
    e.name = st.var;
    e.kind = "sync_wait";
    e.op = "sync accumulator";
    e.start_ns = w.since_ns;
    e.end_ns = trace_clock_ns();
    e.nums = {{"accumulator_step", w.step}, {"contributions", contributions}};
    e.texts = {{"caller", w.caller}};
    w.trace->add(std::move(e));
  }
  st.sync_traced.clear();
  for (auto& rp : waiting) answer(rp);
}

// The task whose process runs `call` (the trace's process of a variable event).
std::string trace_task(const ResourceCall& call) {
  if (call.device) {
    const std::string& d = call.device->name();
    const size_t at = d.find("/device:");
    return at == std::string::npos ? d : d.substr(0, at);
  }
  return WaitRegistry::global().task();
}

// Ends the current accumulation without applying it: the waiting workers get -1 (their gradient
// was dropped, as a stale one is) and the accumulator forgets its step, so it aligns with the
// local step of the next contribution. Called when the variable is assigned or restored (for
// example a checkpoint rolls the model and the global step back).
void reset_sync(VarState& st) {
  const int64_t had = st.sync.count();
  st.sync.reset();
  release_waiting(st, had, [](caf::response_promise& rp) { rp.deliver(one(Tensor::scalar<int64_t>(-1))); });
}

// Ends synchronous training at this variable: the waiting contributions and every later one fail
// with OutOfRange (TensorFlow's "queue closed": the training loop's signal to stop), so nobody
// waits for a gradient that will never come. Undone by an assign or restore (reset_sync).
void fail_waiting_closed(VarState& st, const std::string& why) {
  const Status s = err(st, Code::kOutOfRange, why);
  release_waiting(st, st.sync.count(), [&](caf::response_promise& rp) { rp.deliver(to_caf_error(s)); });
}

// Metrics of synchronous steps (core/metrics.h), counted where contributions wait (wait = true:
// SyncReplicasOptimizer's global step, the replicas' barrier), so each counts replica steps, not
// variables: replicas' step gradients dropped as stale, and steps closed short at the deadline.
Counter& stale_gradients_metric() {
  static Counter& c = Metrics::global().counter(
      "actorflow_sync_stale_gradients_total",
      "Replicas' step gradients dropped as stale by synchronous training (their step was already applied).");
  return c;
}
Counter& short_steps_metric() {
  static Counter& c = Metrics::global().counter(
      "actorflow_sync_short_steps_total",
      "Synchronous steps closed short at the sync deadline with fewer than replicas_to_aggregate gradients.");
  return c;
}

// Applies a taken average of `c`'s kind (once), releases everyone waiting with its step.
// Runs inside handle_call (or the deadline timer), under a ScopedFlushDenormal.
void apply_sync_average(VarState& st, const vcall::SyncContribution& c, SyncAccumulator::Average avg) {
  Status s;
  if (c.increment) {
    Tensor one_t(st.dtype, st.shape);
    dispatch_dtype(st.dtype, [&](auto zero) {
      using T = decltype(zero);
      if constexpr (!std::is_same_v<T, bool>) one_t.data<T>()[0] = T(1);
      return 0;
    });
    s = assign_add(st, one_t);
  } else if (avg.sparse) {
    // Each row's mean over the contributions that had it, applied to those rows only.
    s = sparse_update(st, c.opt, c.hyper, avg.rows, "apply_sync");
  } else {
    s = dense_update(st, c.opt, c.hyper, avg.dense);
  }
  ++st.version;
  st.sync.applied(s.ok());
  if (s.ok()) {
    if (!c.increment) count_update();
    static Histogram& waited = Metrics::global().histogram(
        "actorflow_sync_wait_seconds",
        "From a synchronous step's first gradient to its update, per variable and step, in seconds.");
    waited.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - st.sync_first).count());
  }
  observe_global_step(st);
  release_waiting(st, avg.count, [&](caf::response_promise& rp) {
    if (s.ok()) rp.deliver(one(Tensor::scalar<int64_t>(avg.step)));
    else rp.deliver(to_caf_error(s));
  });
}

// Finishes the current sync step: average, apply once, release everyone.
void finish_sync_step(VarState& st, const vcall::SyncContribution& c) {
  apply_sync_average(st, c, st.sync.take_average());
}

constexpr auto kShortLogEvery = std::chrono::seconds(10);

// A step of the barrier (wait = true) closed short: counted, and a WARNING naming the step, what
// it had and the missing replicas (at most one per kShortLogEvery; the others are counted in the
// next). `why`: "at its deadline of 0.5 s", ...
void report_short_step(VarState& st, const SyncAccumulator::Average& avg, const std::string& why) {
  short_steps_metric().inc();
  const auto now = std::chrono::steady_clock::now();
  if (st.short_unlogged > 0 && now - st.short_logged < kShortLogEvery) {
    ++st.short_unlogged;
    return;
  }
  const int64_t before = st.short_unlogged > 0 ? st.short_unlogged - 1 : 0;
  AF_LOG(WARNING) << "variable '" << st.var << "': synchronous step " << avg.step << " closed short " << why << " with "
                  << avg.count << " of " << st.sync_call.replicas << " gradients" << st.sync_waits.who(avg.step)
                  << (before > 0 ? "; " + std::to_string(before) + " more steps closed short since the last report" : "");
  st.short_logged = now;
  st.short_unlogged = 1;
}

// Closes the current step short (count() > 0): the average over what it got is applied and the
// waiting workers are released with the step; reported when this accumulator is the barrier.
void close_short(VarState& st, SyncAccumulator::Average avg, const std::string& why) {
  const vcall::SyncContribution c = st.sync_call;
  if (c.wait) report_short_step(st, avg, why);
  apply_sync_average(st, c, std::move(avg));
}

// ---- slots in checkpoints (ops VariableSlots / RestoreVariableSlots) --------------------------
// The blob's format is data/variable_slots.h's, the ids device/slot_ids.h's.
Tensor encode_slots(VarState& st) {
  VariableSlotSet set;
  set.adam_t = st.opt.steps;
  set.slot = st.opt.slot;
  Result<Tensor> blob = encode_variable_slots(set, st.value.bytes());
  if (!blob.ok()) throw std::bad_alloc();  // only allocation fails: every slot has the value's shape
  return std::move(*blob);
}

// Replaces the slots by those of `blob` (checked completely before anything changes).
Status decode_slots(VarState& st, const Tensor& blob) {
  const bool set = st.value.is_initialized();
  Result<VariableSlotSet> slots =
      decode_variable_slots(blob, set ? st.value.dtype() : st.dtype, set ? st.value.shape() : st.shape);
  if (!slots.ok()) return err(st, slots.status());
  st.opt.slot = std::move(slots->slot);
  st.opt.steps = slots->adam_t;
  return Status::OK();
}

// The value and every slot (what moves between memories and what a whole state carries).
std::vector<Tensor*> state_tensors(VarState& st) {
  std::vector<Tensor*> out{&st.value};
  for (size_t id = 1; id < st.opt.slot.size(); ++id) out.push_back(&st.opt.slot[id]);
  return out;
}

// The hyper-parameters of an optimizer call: the attribute-given ones, then each scalar input of
// `roles` read with `scalar(i)`. The gradient's (kGrad, or kIndices and kValues) positions are
// returned in *grad_at (the first of the two for a sparse call).
template <class Scalar>
Result<OptimizerHyper> call_hyper(const VarState& st, const std::string& what, const std::vector<ArgRole>& roles,
                                  const OptimizerHyper& attr_hyper, size_t nargs, Scalar&& scalar, size_t* grad_at) {
  if (nargs != roles.size())
    return err(st, Code::kInvalidArgument, what + " takes " + std::to_string(roles.size()) + " inputs");
  OptimizerHyper h = attr_hyper;
  for (size_t i = 0; i < roles.size(); ++i) {
    if (roles[i] == ArgRole::kGrad || roles[i] == ArgRole::kIndices) {
      *grad_at = i;
      continue;
    }
    if (roles[i] == ArgRole::kValues) continue;
    AF_ASSIGN_OR_RETURN(double v, scalar(i));
    set_hyper(h, roles[i], v);
  }
  return h;
}

// ---- values in a GPU's memory -------------------------------------------------------------------
// A variable whose kernels run on a GPU keeps its value and optimizer slots in that GPU's memory:
// read, assign/restore, is_initialized and the dense optimizer updates with a device form
// (OptimizerSpec::device_form) called from a kernel on that GPU run there (Device::duplicate,
// Device::apply_dense_update) without a host copy. Every other call runs on the host: the value
// and the slots move to host memory first (they return with the next device-side write), a GPU
// caller's arguments are copied to the host, and the kernel copies the reply to its device.
// A read from elsewhere gets a copy and leaves the variable where it is. Replicated variables
// ([supervisor] ps_replicas = 2) always stay on the host.

// The device memory a call's tensors live in: its kernel's device, unless that is host memory.
Device* device_of(const ResourceCall& c) {
  return c.device && !c.device->allocator()->host_accessible() ? c.device : nullptr;
}

// The calls served in a GPU's memory for a kernel on that GPU.
bool device_method(const VariableCall& c) {
  if (auto* d = std::get_if<vcall::ApplyDense>(&c)) return optimizer_spec(d->opt).device_form;
  return std::holds_alternative<vcall::Read>(c) || std::holds_alternative<vcall::IsInitialized>(c) ||
         std::holds_alternative<vcall::Assign>(c);
}

// The calls that leave the value where it lives (read and save copy it to the host).
bool leaves_value_in_place(const VariableCall& c) {
  return std::holds_alternative<vcall::Read>(c) || std::holds_alternative<vcall::IsInitialized>(c);
}

std::string memory_name(const Device* d) { return d ? d->name() : std::string("host memory"); }

// Moves the value and the slots to `to` (null: host memory). Nothing changes on an error.
Status move_state(VarState& st, Device* to) {
  if (st.home == to) return Status::OK();
  const std::vector<Tensor*> ts = state_tensors(st);
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

// Dense optimizer updates applied in a GPU's memory (the variable test checks they ran there).
void count_device_update() {
  static Counter& updates = Metrics::global().counter(
      "actorflow_variable_device_updates_total",
      "Dense optimizer updates applied to this task's variables in a GPU's memory (Device::apply_dense_update).");
  updates.inc();
}

// A dense update `d` from a kernel on GPU `dev` served in `dev`'s memory (device_method; no
// replication).
Status dense_update_on_device(VarState& st, Device* dev, const ResourceCall& call, const vcall::ApplyDense& d) {
  const OptimizerSpec& spec = optimizer_spec(d.opt);
  const auto& args = call.args;
  size_t grad_at = 0;
  AF_ASSIGN_OR_RETURN(OptimizerHyper h,
                      call_hyper(st, call.method(), spec.dense_args, d.attr_hyper, args.size(),
                                 [&](size_t i) { return scalar_arg(st, dev, args, i); }, &grad_at));
  AF_RETURN_IF_ERROR(require_init(st));
  AF_RETURN_IF_ERROR(require_float(st));
  AF_RETURN_IF_ERROR(check_like(st, args[grad_at], "the gradient"));
  Result<Tensor> g = dev->copy_from_host(args[grad_at]);  // as is when already on dev
  if (!g.ok()) return err(st, g.status().code(), "the gradient: " + g.status().message());
  AF_RETURN_IF_ERROR(move_state(st, dev));
  // Slots, created as on the host (OptimizerSpec::slots), in the device's memory.
  Tensor* s[2] = {nullptr, nullptr};
  for (size_t i = 0; i < spec.slots.size() && i < 2; ++i) {
    Tensor& slot = st.opt.at(spec.slots[i].id);
    if (!slot.is_initialized()) {
      const float fill = slot_init(spec.slots[i], h);
      Result<Tensor> made = dev->copy_from_host(fill == 0.f ? zeros_like(st.value) : filled_like(st.value, fill));
      if (!made.ok()) return err(st, made.status());
      slot = std::move(*made);
    }
    s[i] = &slot;
  }
  // Copy-on-write, as writable_value: a reader still holding the value keeps what it read.
  if (!exclusively_held(st.value)) {
    Result<Tensor> own = dev->duplicate(st.value);
    if (!own.ok()) return err(st, own.status());
    st.value = std::move(*own);
  }
  const int64_t step = spec.counts_steps ? st.opt.steps + 1 : 0;
  DenseUpdate u;
  if (!device_update(d.opt, h, step, &u))
    return err(st, Code::kInternal, call.method() + " has no device form");  // device_method said it has
  Status applied = dev->apply_dense_update(u, st.value, s[0], s[1], *g);
  if (!applied.ok()) return err(st, applied);
  if (spec.counts_steps) st.opt.steps = step;
  count_device_update();
  return Status::OK();
}

caf::result<std::vector<Tensor>> device_call(VarActor* self, const ResourceCall& call, Device* dev) {
  ScopedFlushDenormal flush;  // as handle_call (the host-side copies of slots)
  auto& st = self->state;
  const auto& args = call.args;
  auto fail = [](const Status& s) -> caf::result<std::vector<Tensor>> { return to_caf_error(s); };
  Status decl = check_declared(st, *call.op);
  if (!decl.ok()) return fail(decl);
  const VariableCall& vc = call.op->call;
  // A host scalar: the kernel copies it to its device.
  if (std::holds_alternative<vcall::IsInitialized>(vc)) return one(Tensor::scalar<bool>(st.value.is_initialized()));
  if (std::holds_alternative<vcall::Read>(vc)) {
    Status s = require_init(st);
    if (!s.ok()) return fail(s);
    if (st.home == dev) return one(st.value);
    // Held elsewhere: a copy in the caller's memory; the variable stays where it is.
    Result<Tensor> h = st.home ? st.home->copy_to_host(st.value) : Result<Tensor>(st.value);
    Result<Tensor> d = h.ok() ? dev->copy_from_host(*h) : h;
    if (!d.ok()) return fail(err(st, d.status()));
    return one(std::move(*d));
  }
  if (std::holds_alternative<vcall::Assign>(vc)) {
    if (args.size() != 1) return fail(err(st, Code::kInvalidArgument, "assign takes one value"));
    if (st.dtype == DType::kInvalid) {
      st.dtype = args[0].dtype();
      st.shape = args[0].shape();
    }
    Status s = check_like(st, args[0], "the assigned value");
    if (s.ok()) s = move_state(st, dev);
    if (!s.ok()) return fail(s);
    Result<Tensor> v = dev->duplicate(args[0]);  // a private copy, as on the host
    if (!v.ok()) return fail(err(st, v.status()));
    st.value = std::move(*v);
    ++st.version;
    if (st.sync.engaged()) reset_sync(st);
    return one(st.value);
  }
  Status s = dense_update_on_device(st, dev, call, std::get<vcall::ApplyDense>(vc));
  if (!s.ok()) return fail(s);
  count_update();
  ++st.version;
  return one(st.value);
}

// ---- the calls on the host, one handler per VariableCall alternative ----------------------------
using CallResult = caf::result<std::vector<Tensor>>;

CallResult fail(const Status& s) { return to_caf_error(s); }

// After an update: counted, versioned, the global step observed; the reply is the new value.
CallResult updated(VarState& st, const Status& s) {
  if (!s.ok()) return fail(s);
  count_update();
  ++st.version;
  observe_global_step(st);
  return one(st.value);
}

// Serves one decoded call on the host. Holds the actor, the call and its arguments.
struct HostCall {
  VarActor* self;
  VarState& st;
  const std::vector<Tensor>& args;
  const std::string& m;  // the method name, for messages
  const std::string& caller;  // the task whose step made the call (ResourceCall::caller_task)
  std::shared_ptr<StepTrace> trace;  // the call's step's trace when it is traced, else null
  std::string task;                  // traced: this process's task (trace_task)
  // A call replicated from the primary (ResourceCall::replica): a held synchronous contribution
  // is the primary's to release, so the backup only counts it (never waits).
  bool replica = false;

  CallResult operator()(const vcall::Read&) {
    Status s = require_init(st);
    if (!s.ok()) return fail(s);
    if (st.home) {  // the value lives on a GPU: a host copy, the variable stays there
      auto h = st.home->copy_to_host(st.value);
      if (!h.ok()) return fail(err(st, h.status()));
      return one(std::move(*h));
    }
    return one(st.value);
  }
  CallResult operator()(const vcall::IsInitialized&) { return one(Tensor::scalar<bool>(st.value.is_initialized())); }
  CallResult operator()(const vcall::SaveSlots&) { return one(encode_slots(st)); }
  CallResult operator()(const vcall::RestoreSlots&) {
    if (args.size() != 1) return fail(err(st, Code::kInvalidArgument, "restore_slots takes one blob"));
    Status s = decode_slots(st, args[0]);
    if (!s.ok()) return fail(s);
    return one(args[0]);
  }
  CallResult operator()(const vcall::SyncState&) {  // a primary's whole state (value, slot blob), on its backup only
    if (args.size() != 2) return fail(err(st, Code::kInvalidArgument, "sync_state takes a value and a slot blob"));
    st.dtype = args[0].dtype();
    st.shape = args[0].shape();
    st.value = args[0];  // shares the received buffer: the next update copies it first if still shared
    ++st.version;
    Status s = decode_slots(st, args[1]);
    if (!s.ok()) return fail(s);
    observe_global_step(st);
    if (st.sync.engaged()) reset_sync(st);
    return one(st.value);
  }
  CallResult operator()(const vcall::Assign&) {
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
    if (st.sync.engaged()) reset_sync(st);
    return one(st.value);
  }
  CallResult operator()(const vcall::AssignAdd&) {
    if (Status s = require_init(st); !s.ok()) return fail(s);
    if (args.size() != 1) return fail(err(st, Code::kInvalidArgument, "assign_add takes one delta"));
    Status s = check_like(st, args[0], "the delta");
    if (s.ok()) s = assign_add(st, args[0]);
    return updated(st, s);
  }
  CallResult operator()(const vcall::Scatter& c) {
    if (Status s = require_init(st); !s.ok()) return fail(s);
    if (args.size() != 2) return fail(err(st, Code::kInvalidArgument, m + " takes indices and updates"));
    auto rows = scatter(st, args[0], args[1], c.add);
    if (!rows.ok()) return fail(rows.status());
    count_update();
    ++st.version;
    observe_global_step(st);
    return one(std::move(*rows));
  }
  CallResult operator()(const vcall::ApplyDense& c) {
    if (Status s = require_init(st); !s.ok()) return fail(s);
    size_t grad_at = 0;
    auto h = call_hyper(st, m, optimizer_spec(c.opt).dense_args, c.attr_hyper, args.size(),
                        [&](size_t i) -> Result<double> { return scalar_of(args[i]); }, &grad_at);
    if (!h.ok()) return fail(h.status());
    Status s = check_like(st, args[grad_at], "the gradient");
    if (s.ok()) s = dense_update(st, c.opt, *h, args[grad_at]);
    return updated(st, s);
  }
  CallResult operator()(const vcall::ApplySparse& c) {
    if (Status s = require_init(st); !s.ok()) return fail(s);
    size_t ids_at = 0;
    auto h = call_hyper(st, m, optimizer_spec(c.opt).sparse_args, c.attr_hyper, args.size(),
                        [&](size_t i) -> Result<double> { return scalar_of(args[i]); }, &ids_at);
    if (!h.ok()) return fail(h.status());
    auto sr = sparse_rows(st, args[ids_at], args[ids_at + 1], m);
    if (!sr.ok()) return fail(sr.status());
    Status applied = sparse_update(st, c.opt, *h, *sr, m);
    if (!applied.ok()) return fail(applied);
    count_update();
    ++st.version;
    observe_global_step(st);
    return one(Tensor::scalar<int64_t>(static_cast<int64_t>(sr->rows.size())));
  }
  CallResult operator()(const vcall::SyncContribution& c) {
    if (Status s = require_init(st); !s.ok()) return fail(s);
    if (args.size() != (c.sparse ? 3u : 2u))
      return fail(err(st, Code::kInvalidArgument,
                      m + (c.sparse ? " takes indices, values and local_step" : " takes grad and local_step")));
    // Summing gradients needs float32 values; an increment needs an element to add to.
    if (!c.increment) {
      if (Status s = require_float(st); !s.ok()) return fail(s);
    } else if (st.dtype == DType::kBool || st.shape.num_elements() < 1) {
      return fail(err(st, Code::kInvalidArgument, m + ": 'increment' needs a numeric variable with an element"));
    }
    Result<SparseRows> contribution = SparseRows{};
    if (c.sparse) {
      contribution = sparse_rows(st, args[0], args[1], m);
      if (!contribution.ok()) return fail(contribution.status());
    } else if (!c.increment) {
      if (Status s = check_like(st, args[0], "the gradient"); !s.ok()) return fail(s);
    }
    const Tensor& step_t = args[c.sparse ? 2 : 1];
    if (step_t.dtype() != DType::kInt64 || step_t.num_elements() != 1)
      return fail(err(st, Code::kInvalidArgument,
                      m + ": local_step must be an int64 scalar, got " + std::string(dtype_name(step_t.dtype())) + " " +
                          step_t.shape().to_string()));
    auto added = st.sync.add(c, step_t.data<int64_t>()[0], args[0], &*contribution, m);
    if (!added.ok()) return fail(err(st, added.status()));
    if (added->step < 0) {  // stale: dropped and counted
      if (c.wait && !replica) stale_gradients_metric().inc();  // once, on the primary
      return one(Tensor::scalar<int64_t>(-1));
    }
    // Deadline mode: this gradient of a later step closed the step under way short.
    if (added->passed)
      close_short(st, std::move(*added->passed),
                  "(a gradient of step " + std::to_string(added->step) + " arrived from " +
                      (caller.empty() ? std::string("a replica") : caller) + ")");
    // wait = false (SyncReplicasOptimizer's variable updates): the contribution is accepted and
    // answered at once with the step it counts for; only the global step's increment (wait =
    // true) holds the replicas until the step is complete. So a replica never waits at one
    // variable while the other waits at another (the livelock after a partition), and a
    // partial accumulation without waiters needs no timeout: it completes with the next
    // contributions.
    const bool wait = c.wait && !replica;
    if (added->first) {
      st.sync_first = std::chrono::steady_clock::now();
      st.sync_call = c;
      if (wait) {  // the barrier's counters show (at 0) from its first step on: `actorflow status`
        (void)stale_gradients_metric();
        (void)short_steps_metric();
      }
      if (c.deadline_secs > 0)
        self->delayed_send(self, std::chrono::microseconds(static_cast<int64_t>(c.deadline_secs * 1e6)),
                           sync_deadline_atom::value, st.sync.generation());
      if (wait)
        self->delayed_send(self, std::chrono::milliseconds(static_cast<int64_t>(c.timeout_secs * 1000)),
                           sync_check_atom::value, st.sync.generation(), c.replicas, c.timeout_secs);
    }
    st.sync_waits.contributed(added->step, caller, c.replicas);
    if (wait) {
      st.sync_waiting.push_back(self->make_response_promise());
      if (trace) st.sync_traced.push_back({trace, trace_clock_ns(), added->step, task, caller});
    }
    if (added->complete) finish_sync_step(st, c);
    if (!wait) return one(Tensor::scalar<int64_t>(added->step));
    return caf::delegated<std::vector<Tensor>>();
  }
  CallResult operator()(const vcall::SyncControl& c) {
    if (Status s = require_init(st); !s.ok()) return fail(s);
    switch (c.action) {
      case vcall::SyncControl::Action::kLeave:
        if (st.sync.leave(c.total, c.replicas)) fail_waiting_closed(st, st.sync.closed_why());
        return one(Tensor::scalar<int64_t>(st.sync.step()));
      case vcall::SyncControl::Action::kClose:
        if (!st.sync.closed()) {
          const std::string why = "synchronous training was closed at step " + std::to_string(st.sync.step());
          st.sync.close(why);
          fail_waiting_closed(st, why);
        }
        return one(Tensor::scalar<int64_t>(st.sync.step()));
      case vcall::SyncControl::Action::kStats: break;
    }
    Tensor t(DType::kInt64, Shape{static_cast<int64_t>(SyncAccumulator::kStats)});
    const auto stats = st.sync.stats();
    std::copy(stats.begin(), stats.end(), t.data<int64_t>());
    return one(t);
  }
};

// One request to the variable (see the handler). May throw (a kernel bug, bad_alloc, an
// injected fault): the caller restarts the actor in place.
caf::result<std::vector<Tensor>> handle_call(VarActor* self, const ResourceCallPtr& call) {
  // Every update below runs with denormals flushed to zero, as TensorFlow's kernels do: a
  // denormal slot value (Adam's m decaying where gradients are 0) costs ~40x per element
  // otherwise (core/denormal.h).
  ScopedFlushDenormal flush;
  auto& st = self->state;
  Status decl = check_declared(st, *call->op);
  if (!decl.ok()) return fail(decl);
  auto trace = step_trace(call->step_id);
  return std::visit(HostCall{self, st, call->args, call->method(), call->caller_task, trace,
                             trace ? trace_task(*call) : std::string(), call->replica.has_value()},
                    call->op->call);
}

// After an exception: fail the pending synchronous contributions (their workers retry), keep
// the value and optimizer slots (the durable state), and count the restart. Returns the error
// for the request that threw.
Status restart_in_place(VarState& st, const std::string& what) {
  const std::string who = "variable '" + st.var + "' (variable actor)";
  Status budget = st.restarts.record_failure(who, what);
  Status why = budget.ok() ? Aborted("variable '" + st.var + "': exception in the variable actor: " + what +
                                     "; the actor restarted in place")
                           : budget;
  const int64_t had = st.sync.count();
  st.sync.restart();
  release_waiting(st, had, [&](caf::response_promise& rp) { rp.deliver(to_caf_error(why)); });
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
size_t state_bytes(VarState& st) {
  size_t b = 0;
  for (const Tensor* t : state_tensors(st))
    if (t->is_initialized()) b += t->bytes();
  return b;
}

size_t call_bytes(const ResourceCall& c) {
  size_t b = 0;
  for (const Tensor& t : c.args)
    if (t.is_initialized()) b += t.bytes();
  return b;
}

// Holds `call` unapplied on a backup when it is a replicated dense update (true: acknowledge it
// now); false when it must run now.
bool defer_on_backup(VarActor* self, const ResourceCallPtr& call) {
  auto& st = self->state;
  if (!st.rep || !call->replica || !is_dense_update(call->op->call)) return false;
  const size_t bytes = call_bytes(*call);
  if (!st.value.is_initialized() || st.deferred.size() >= kMaxDeferred ||
      st.deferred_bytes + bytes > kMaxDeferredStates * state_bytes(st))
    return false;
  st.backup_role = true;
  st.primary = call->replica->primary_task;
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
  if (std::holds_alternative<vcall::SyncState>(call.op->call) && call.replica) return;
  for (const auto& c : held) {
    caf::result<std::vector<Tensor>> r = handle_call(self, c);
    // The primary applied the same call to the same state, so this cannot fail short of a bug.
    if (r.flag == caf::rt_error) {
      AF_LOG(ERROR) << "variable '" << st.var << "': a held update (" << c->method() << ") failed on the backup: "
                    << caf::to_string(r.err);
    }
  }
}

// A direct (not replicated) update reaching a backup copy: while the copy's primary is alive the
// caller has not failed over (it started after the failover, or noticed a failure the ps tasks
// did not): refused with Unavailable carrying the typed detail ServedBy{this task, primary}
// (core/status.h), so the caller's process refreshes its routes. With the primary gone, the copy takes over
// (promotion) and the update proceeds. Reads are never refused: a backup holds every
// acknowledged update.
std::optional<Status> backup_refuses(VarActor* self, const ResourceCall& call) {
  auto& st = self->state;
  if (!st.backup_role || call.replica) return std::nullopt;
  if (!st.primary.empty() && st.rep->primary_alive(st.primary))
    return Unavailable("variable '" + st.var + "' on " + st.rep->own_task() + " is a backup copy; its primary " +
                       st.primary + " serves updates")
        .with_detail(ServedBy{st.rep->own_task(), st.primary});
  st.backup_role = false;
  st.synced_epoch = 0;
  AF_LOG(WARNING) << "variable '" << st.var << "': its backup copy serves as the primary now (its primary "
                  << (st.primary.empty() ? std::string("?") : st.primary) << " is gone)";
  return std::nullopt;
}

// With the backup's data plane known, the call's large host tensors (kReplicaDataMinBytes and
// up, kReplicaDataMaxCallBytes in all) go over the data plane (fewer copies than the control
// plane: written from the tensor's buffer, read into a fresh one) ahead of the call, which
// carries uninitialised tensors in their places and names the frames (ReplicaCall::data_count,
// data_key).
struct SentAhead {
  uint64_t epoch = 0;         // the backup connection they went to
  std::vector<size_t> moved;  // the arguments sent
  std::string key;            // the call key of their frames
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
  out.key = st.rep->instance() + "|" + st.var + "|" + std::to_string(++st.next_data_call);
  for (const auto& m : moved) out.moved.push_back(m.first);
  st.rep->send_tensors(b.epoch, out.key, std::move(moved));
  return out;
}

// Takes the tensors `ahead` sent out of the call's arguments and names their frames in it.
void mark_sent_ahead(const SentAhead& ahead, ReplicaCall& rc) {
  for (size_t i : ahead.moved) rc.args[i] = Tensor();
  rc.data_count = static_cast<uint32_t>(ahead.moved.size());
  rc.data_key = ahead.key;
}

// Whether a dense update `call` goes to the backup as the whole state rather than as itself
// (see kSyncEvery). Pure.
bool whole_state_due(VarState& st, const ResourceCall& call) {
  return st.dense_since_sync + 1 >= kSyncEvery ||
         st.dense_bytes_since_sync + call_bytes(call) >= kHeldStates * state_bytes(st);
}

// Before a primary applies `call`: when it will go to the connected backup as itself (not as
// the whole state), its large tensors are sent now, so that their trip overlaps the local
// update instead of following it. Nullopt when nothing went.
std::optional<SentAhead> send_call_early(VarActor* self, const ResourceCall& call) {
  auto& st = self->state;
  if (call.replica || !st.value.is_initialized()) return std::nullopt;
  const PsReplicator::Backup b = st.rep->backup();
  if (!b.node || st.synced_epoch != b.epoch) return std::nullopt;
  if (is_dense_update(call.op->call) && whole_state_due(st, call)) return std::nullopt;
  return send_ahead(self, b, call.args);
}

// Replication of a mutating call whose local outcome is `r` (actors/ps_replication.h). A call
// that came from a primary (ResourceCall::replica) makes this copy a backup and is answered as it
// is. A call from a kernel on a copy that was a backup promotes it (its primary's task failed
// over to this one). A primary with a connected backup sends it the call (or, first after a
// new connection, its whole state) and answers only once the backup acknowledged; without a
// backup (none connected, or the call to it failed: the backup is down) it answers alone. A
// failed local call is not replicated.
caf::result<std::vector<Tensor>> replicate(VarActor* self, const ResourceCallPtr& call,
                                           caf::result<std::vector<Tensor>> r, const std::optional<SentAhead>& early) {
  auto& st = self->state;
  if (call->replica) {
    st.backup_role = true;
    st.primary = call->replica->primary_task;
    // The primary only waits for the acknowledgement: an update's usual reply (the whole updated
    // variable) would cross the control plane back for nothing.
    if (r.flag == caf::rt_value) return std::vector<Tensor>{};
    return r;
  }
  if (r.flag == caf::rt_error) return r;
  const PsReplicator::Backup b = st.rep->backup();
  if (!b.node) return r;  // no backup connected: the primary serves alone
  if (!st.value.is_initialized()) return r;  // nothing to copy yet
  ReplicaCall rc;
  rc.var = st.var;
  rc.method = call->method();
  rc.args = call->args;
  AttrMap attr_map = call->attrs();
  const bool dense = is_dense_update(call->op->call);
  if (st.synced_epoch != b.epoch) {
    // The backup (re)connected since this variable's last full copy: it may hold nothing or an
    // old state, so it gets the whole state (value and slots) instead of the call.
    rc.method = "sync_state";
    rc.args = {st.value, encode_slots(st)};
    attr_map = AttrMap();
    st.synced_epoch = b.epoch;
    st.dense_since_sync = 0;
    st.dense_bytes_since_sync = 0;
  } else if (dense && whole_state_due(st, *call)) {
    // The backup holds the dense updates since the last whole state unapplied: this one goes
    // as the whole state after it, which replaces them there (see kSyncEvery).
    rc.method = "sync_state";
    rc.args = {st.value, encode_slots(st)};
    attr_map = AttrMap();
    st.dense_since_sync = 0;
    st.dense_bytes_since_sync = 0;
  } else if (dense) {
    ++st.dense_since_sync;
    st.dense_bytes_since_sync += call_bytes(*call);
  }
  // Tensors of the call sent before it was applied go with this call only when it goes as
  // itself to the same connection (the local update can change what is due: they then expire
  // unclaimed in the backup's inbox).
  if (early && early->epoch == b.epoch && rc.method == call->method()) {
    mark_sent_ahead(*early, rc);
  } else if (auto ahead = send_ahead(self, b, rc.args)) {
    mark_sent_ahead(*ahead, rc);
  }
  rc.attrs = encode_call_attrs(attr_map);
  if (planted_bug() == PlantedBug::kAckWithoutBackup && rc.method != "sync_state") return r;
  if (r.flag == caf::rt_delegated) {
    // A held synchronous contribution: its reply goes out when the step completes (the
    // backup counts the same contributions in the same order; see docs/architecture/ps-replication.md).
    self->request(b.node, st.rep->timeout(), replicate_atom::value, std::move(rc))
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
  self->request(b.node, st.rep->timeout(), replicate_atom::value, std::move(rc))
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

// A traced step's call (core/step_trace.h): one "variable" event from the handler's start to
// its end, with how long the call queued before it (ResourceCall::sent_ns). Inert when null.
struct TraceCall {
  std::shared_ptr<StepTrace> trace;
  const ResourceCall* call;
  const std::string& var;
  int64_t start_ns = trace ? trace_clock_ns() : 0;
  ~TraceCall() {
    if (!trace) return;
    TraceEvent e;
    e.task = trace_task(*call);
    e.track = "variable " + var;
    e.name = var;
    e.kind = "variable";
    e.op = call->op ? call->method() : std::string("?");
    e.start_ns = start_ns;
    e.end_ns = trace_clock_ns();
    if (call->sent_ns > 0) e.nums.emplace_back("queued_ns", std::max<int64_t>(0, start_ns - call->sent_ns));
    int64_t bytes = 0;
    for (const auto& a : call->args) bytes += static_cast<int64_t>(a.bytes());
    e.nums.emplace_back("arg_bytes", bytes);
    e.texts = {{"caller", call->caller_task}};
    trace->add(std::move(e));
  }
};

// On leaving a handler: the accumulator's registered waits follow its state (actors/sync_waits.h).
struct RefreshSyncWaits {
  VarState& st;
  ~RefreshSyncWaits() { st.sync_waits.refresh(st.var, st.sync.step(), st.sync.count(), !st.sync_waiting.empty()); }
};

// Which calls the inline part may take, by kind (VarCell says why the others may not).
bool inline_read(const VariableCall& c) {
  return std::holds_alternative<vcall::Read>(c) || std::holds_alternative<vcall::IsInitialized>(c);
}
bool inline_update(const VariableCall& c) {
  return std::holds_alternative<vcall::ApplyDense>(c) || std::holds_alternative<vcall::ApplySparse>(c) ||
         std::holds_alternative<vcall::Assign>(c) || std::holds_alternative<vcall::AssignAdd>(c) ||
         std::holds_alternative<vcall::Scatter>(c);
}

std::optional<Result<std::vector<Tensor>>> VarCell::try_call(const ResourceCall& call) {
  if (replicated_ || !call.op || call.replica || device_of(call)) return std::nullopt;
  const bool read = inline_read(call.op->call);
  if (!read && !inline_update(call.op->call)) return std::nullopt;
  // Never wait for the actor: while it holds the variable (a large update, a checkpoint read)
  // the call goes to its mailbox, as without this path, instead of stalling the device actor's
  // thread and every other kernel of its steps behind that work.
  std::unique_lock<std::mutex> l(mu, std::try_to_lock);
  if (!l.owns_lock()) return std::nullopt;
  if (!st) return std::nullopt;  // the actor is gone: it answers (or its absence does)
  VarState& vs = *st;
  // The actor answers past its restart budget, moves a GPU-resident value, and owns the
  // synchronous accumulator's held answers (an assign resets them).
  if (!vs.failed.ok() || vs.home || vs.sync.engaged() || !vs.sync_waiting.empty()) return std::nullopt;
  if (!read) {
    size_t bytes = vs.value.is_initialized() ? vs.value.bytes() : 0;
    for (const Tensor& a : call.args)
      if (a.is_initialized()) bytes = std::max(bytes, a.bytes());
    if (bytes > kInlineUpdateBytes) return std::nullopt;
  }
  const TraceCall traced{step_trace(call.step_id), &call, vs.var};
  std::optional<CallResult> r;
  try {
    FaultInjector::global().maybe_throw("variable", "");  // as the actor's handler
    ScopedFlushDenormal flush;                             // as handle_call
    Status decl = check_declared(vs, *call.op);
    if (!decl.ok()) return Result<std::vector<Tensor>>(decl);
    // No actor: none of these calls makes a promise or sends (HostCall uses self for the
    // synchronous contributions only).
    r.emplace(std::visit(HostCall{nullptr, vs, call.args, call.method(), call.caller_task, traced.trace,
                                  traced.trace ? trace_task(call) : std::string(), false},
                         call.op->call));
  } catch (const std::exception& e) {
    return Result<std::vector<Tensor>>(restart_in_place(vs, e.what()));
  }
  // The answer as the kernel would get it from the actor (DeviceResourceEnv::call).
  if (r->flag == caf::rt_error) return Result<std::vector<Tensor>>(from_caf_error(r->err, "resource"));
  if (r->flag != caf::rt_value || !r->value.match_elements<std::vector<Tensor>>())
    return Result<std::vector<Tensor>>(Internal("variable '" + vs.var + "': an inline call gave no value"));
  return Result<std::vector<Tensor>>(r->value.get_as<std::vector<Tensor>>(0));
}

var_impl_t::behavior_type variable_actor(VarActor* self, std::string name, RestartPolicy restarts,
                                         std::shared_ptr<PsReplicator> rep, std::shared_ptr<VarCell> cell) {
  self->state.var = std::move(name);
  self->state.restarts = RestartBudget(restarts);
  self->state.rep = std::move(rep);
  if (cell) {
    std::lock_guard<std::mutex> l(cell->mu);
    cell->st = &self->state;
    self->state.link.cell = cell;
  }
  // Every handler holds the inline part's lock while it touches the state (VarCell).
  auto locked = [self] {
    return self->state.link.cell ? std::unique_lock<std::mutex>(self->state.link.cell->mu) : std::unique_lock<std::mutex>();
  };
  ignore_remote_exits(self, "variable actor " + self->state.var);
  // The monitored backup's node actor is gone (its connection closed): every update waiting for
  // its acknowledgement is held by every live copy, so it is answered now; the backup gets the
  // whole state again once it is back (as when a replicated call fails).
  self->set_down_handler([self, locked](caf::down_msg& dm) {
    const auto lock = locked();
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
        const auto lock = locked();
        const RefreshSyncWaits refresh{self->state};
        const TraceCall traced{step_trace(call->step_id), call.get(), self->state.var};
        // Past its restart budget the actor answers every request with that error.
        if (!self->state.failed.ok()) return to_caf_error(self->state.failed);
        // An exception (an injected `throw` fault for actor "variable", or a real one) fails
        // this request and restarts the actor in place (CAF 0.17 would stop the actor).
        try {
          FaultInjector::global().maybe_throw("variable", "");
          // A kernel on a GPU: served in the GPU's memory where it can be (see device_call),
          // otherwise on the host with its arguments copied there.
          Device* dev = device_of(*call);
          if (!call->op) return to_caf_error(err(self->state, Code::kInvalidArgument, "a call without a method"));
          if (dev && !self->state.rep && device_method(call->op->call)) return device_call(self, *call, dev);
          if (self->state.home && !leaves_value_in_place(call->op->call)) {
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
          if (!self->state.rep || !mutates(c->op->call)) return handle_call(self, c);
          if (c->replica && planted_bug() == PlantedBug::kBackupAppliesTwice &&
              std::holds_alternative<vcall::Scatter>(c->op->call))
            (void)handle_call(self, c);
          if (auto refused = backup_refuses(self, *c)) return to_caf_error(*refused);
          const std::optional<SentAhead> early = send_call_early(self, *c);
          return replicate(self, c, handle_call(self, c), early);
        } catch (const std::exception& e) {
          return to_caf_error(restart_in_place(self->state, e.what()));
        }
      },
      [=](sync_check_atom, int64_t generation, int64_t replicas, double timeout) {
        const auto lock = locked();
        auto& st = self->state;
        const RefreshSyncWaits refresh{st};
        // That accumulation completed (or was reset) and another may be under way.
        if (st.sync.generation() != generation || st.sync.count() == 0) return;
        Status s = err(st, Code::kDeadlineExceeded,
                       "synchronous step " + std::to_string(st.sync.step()) + ": only " + std::to_string(st.sync.count()) +
                           " of " + std::to_string(replicas) + " gradients arrived within " + std::to_string(timeout) + " s");
        AF_LOG(WARNING) << s.message();
        const int64_t had = st.sync.count();
        st.sync.clear();
        release_waiting(st, had, [&](caf::response_promise& rp) { rp.deliver(to_caf_error(s)); });
      },
      [=](sync_deadline_atom, int64_t generation) {
        const auto lock = locked();
        auto& st = self->state;
        const RefreshSyncWaits refresh{st};
        // That accumulation completed (or was reset, restarted, closed) before its deadline.
        if (st.sync.generation() != generation || st.sync.count() == 0 || st.sync.closed()) return;
        ScopedFlushDenormal flush;  // as handle_call's updates
        try {
          char secs[32];
          std::snprintf(secs, sizeof secs, "%g", st.sync_call.deadline_secs);
          close_short(st, st.sync.take_short(), std::string("at its deadline of ") + secs + " s");
        } catch (const std::exception& e) {
          restart_in_place(st, e.what());
        }
      },
  };
}

}  // namespace

variable_actor_t spawn_variable_actor(caf::actor_system& sys, const std::string& name, RestartPolicy restarts,
                                      std::shared_ptr<PsReplicator> replicator) {
  return sys.spawn(variable_actor, name, restarts, std::move(replicator), std::shared_ptr<VarCell>());
}

ResourceFactory variable_actor_factory(RestartPolicy restarts, std::shared_ptr<PsReplicator> replicator) {
  return [restarts, replicator](caf::actor_system& sys, const std::string& name) {
    auto cell = std::make_shared<VarCell>(replicator != nullptr);
    variable_actor_t a = sys.spawn(variable_actor, name, restarts, replicator, cell);
    return Resource(std::move(a), std::move(cell));
  };
}

}  // namespace actorflow
