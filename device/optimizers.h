// The optimizers a variable applies, in one place: which there are (Optimizer), their
// hyper-parameters (OptimizerHyper), the inputs of their ops (OptimizerSpec: graph op, variable
// method, the role of each input), their slots (which SlotIds, initial values), and their dense
// and sparse updates on float32 host memory. The variable actor (actors/variable_actor.cc), the
// SyncReplicas accumulator (runtime/sync_accumulator.h), replication (actors/ps_replication.cc)
// and the variable kernels (device/cpu/variable_kernels.cc) all go through this module; adding an
// optimizer is a row of its table and a case of its math here (docs/architecture/variables.md,
// "Optimizers in one module").
//
// The per-element updates of the optimizers with a GPU form are device/functors.h's (shared with
// the GPU kernels: DenseUpdate). Every function is pure or writes only what it is given;
// thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "device/device.h"
#include "device/slot_ids.h"
#include "graph/graph.h"
#include "tensor/tensor.h"

namespace actorflow {

enum class Optimizer : uint8_t { kSgd, kMomentum, kAdam, kAdagrad, kRmsProp, kFtrl };

// Every optimizer's hyper-parameters (each optimizer reads its own; the rest are ignored). The
// defaults are those of a synchronous update whose attrs leave them out.
struct OptimizerHyper {
  float lr = 0;
  float momentum = 0.9f;                                // kMomentum, kRmsProp
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // kAdam (epsilon also kRmsProp)
  float decay = 0.9f;                                   // kRmsProp
  float initial_accumulator = 0.1f;                     // kAdagrad (> 0), kFtrl (>= 0): the accumulator's start
  float l1 = 0, l2 = 0, lr_power = -0.5f;               // kFtrl: regularization, learning rate power (<= 0)
  float l2_shrinkage = 0;                               // kFtrl (V2): L2 shrinkage of the gradient, >= 0
};

// What an input of an optimizer op is.
enum class ArgRole : uint8_t { kLr, kMomentum, kBeta1, kBeta2, kEpsilon, kDecay, kL1, kL2, kLrPower, kGrad, kIndices, kValues };

// One slot of an optimizer: its id and its initial value (`init`, or the hyper-parameter
// initial_accumulator where from_accumulator).
struct SlotSpec {
  SlotId id;
  float init = 0;
  bool from_accumulator = false;
};

// An optimizer's row of the table.
struct OptimizerSpec {
  Optimizer kind;
  const char* name;           // as SyncOptions names it: "sgd", "momentum", "adam", "adagrad", "rmsprop", "ftrl"
  const char* dense_op;       // "ApplyAdam"
  const char* dense_method;   // the variable actor's method, the replicated call's name: "apply_adam"
  const char* sparse_op;      // "SparseApplyAdam"; null: no sparse form
  const char* sparse_method;  // "sparse_apply_adam"; null: no sparse form
  std::vector<ArgRole> dense_args;   // the dense op's inputs, in order (one kGrad)
  std::vector<ArgRole> sparse_args;  // the sparse op's inputs, in order (kIndices, kValues)
  std::vector<SlotSpec> slots;       // at most two, in the order the updates take them
  bool counts_steps = false;         // keeps a step count (Adam's t, bias correction)
  bool device_form = false;          // has a DenseUpdate (applied in a GPU's memory)
};

// Every optimizer's row, in the enum's order. Built once; thread-safe.
const std::vector<OptimizerSpec>& optimizer_specs();
// The row of `opt`.
const OptimizerSpec& optimizer_spec(Optimizer opt);
// The row named `name` (OptimizerSpec::name), or null.
const OptimizerSpec* find_optimizer(const std::string& name);

// The hyper-parameters an op of `opt` gives as attributes: with `sync` (ApplyGradientSync and
// its sparse form) all of them, absent ones at the accumulator's defaults (RMSProp's momentum 0
// and epsilon 1e-10, lr 1e-4); otherwise (Apply*/SparseApply*, whose other hyper-parameters are
// inputs) only initial_accumulator_value and l2_shrinkage.
OptimizerHyper hyper_from_attrs(Optimizer opt, const AttrMap& attrs, bool sync);
// Sets the hyper-parameter of `role` (no-op for kGrad, kIndices, kValues).
void set_hyper(OptimizerHyper& h, ArgRole role, double v);
// OK, or InvalidArgument "<what>: <hyper-parameter> must be ..." for values the update cannot
// take (Adagrad's initial_accumulator_value <= 0; FTRL's lr <= 0, l1, l2, l2_shrinkage or
// initial_accumulator_value < 0, lr_power > 0). apply_dense and apply_sparse check it too.
Status check_hyper(Optimizer opt, const OptimizerHyper& h, const std::string& what);

// A variable's optimizer state: the slots by id (slot[0] unused; uninitialised when absent: a
// slot is created on the variable's first update that needs it) and the step count of the
// optimizers that count steps. Owned by the variable actor; not thread-safe.
struct OptimizerState {
  std::array<Tensor, kNumSlotIds + 1> slot;
  int64_t steps = 0;
  Tensor& at(SlotId id) { return slot[static_cast<size_t>(id)]; }
  const Tensor& at(SlotId id) const { return slot[static_cast<size_t>(id)]; }
};

// The initial value of slot `s` with hyper-parameters `h`.
float slot_init(const SlotSpec& s, const OptimizerHyper& h);
// Creates the slots of `opt` that `st` lacks: float32 host tensors like `value`, filled with
// their initial values.
void ensure_slots(Optimizer opt, const OptimizerHyper& h, const Tensor& value, OptimizerState& st);

// One dense update of `opt` of the float32 host tensor `value` with gradient `g` (same shape;
// the caller checked both): creates missing slots, advances the step count where the optimizer
// counts steps, then updates every element. `in_place`: the caller holds value's buffer alone, so
// it is written where it is; otherwise the new value is written into a fresh host buffer that
// replaces `value` (a reader's snapshot stays intact). ResourceExhausted when that buffer cannot
// be allocated (nothing changes then).
Status apply_dense(Optimizer opt, const OptimizerHyper& h, Tensor& value, bool in_place, OptimizerState& st,
                   const Tensor& g);

// A sparse gradient with the rows of duplicate indices summed: the distinct rows in order of
// first appearance and their float32 gradient rows, `row` elements each.
struct SparseRows {
  std::vector<int64_t> rows;
  std::vector<float> grad;
  int64_t row = 0;
};
// `rows_at[j]` is the row of values' j-th row (`row` floats each, values holding
// rows_at.size() * row); sums the rows of duplicate indices. The caller checked the indices.
SparseRows sum_sparse_rows(const std::vector<int64_t>& rows_at, const float* values, int64_t row);

// The sparse update of `opt` (TensorFlow's SparseApply* semantics: only the rows of `sr` and their
// slots change; Adam is lazy and advances its step count once) of the float32 host tensor
// `value`, which the caller made writable. Creates missing slots like `value`. InvalidArgument
// "<what>: no sparse form of optimizer ..." for an optimizer without one.
Status apply_sparse(Optimizer opt, const OptimizerHyper& h, Tensor& value, OptimizerState& st, const SparseRows& sr,
                    const std::string& what);

// The DenseUpdate of `opt` for update number `step` (the state's steps after this update where
// the optimizer counts steps), applied in a GPU's memory; false when `opt` has no device form.
bool device_update(Optimizer opt, const OptimizerHyper& h, int64_t step, DenseUpdate* out);

}  // namespace actorflow
