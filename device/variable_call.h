// What a call on a variable actor asks for, as a type: a VariableCall is decoded once from a
// method name and the op's attributes (when a variable kernel is constructed, or when a
// replicated call arrives on a backup), so the variable actor dispatches with std::visit and
// never compares strings or reads attributes per step. The method name and the attributes stay
// beside the decoded call (VariableOp) because a replicated call travels as them
// (actors/ps_replication.h).
//
// The tensors of a call (ResourceCall::args, device/kernel.h) are filled per step; their order
// per alternative is given below. Pure data and pure functions; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <variant>

#include "core/status.h"
#include "device/optimizers.h"
#include "graph/graph.h"

namespace actorflow {
namespace vcall {

// "read" / "save" () -> the value.
struct Read {
  bool save = false;
};
// "is_initialized" () -> bool scalar.
struct IsInitialized {};
// "assign" / "restore" (value) -> the value.
struct Assign {
  bool restore = false;
};
// "assign_add" (delta) -> the value.
struct AssignAdd {};
// "scatter_add" / "scatter_update" (indices, updates) -> the updated rows.
struct Scatter {
  bool add = false;
};
// A dense optimizer update: the spec's dense method, args in OptimizerSpec::dense_args' order ->
// the new value. `attr_hyper` holds the hyper-parameters that are attributes
// (initial_accumulator_value); the others are the call's scalar inputs.
struct ApplyDense {
  Optimizer opt = Optimizer::kSgd;
  OptimizerHyper attr_hyper;
};
// A sparse optimizer update: the spec's sparse method, args in OptimizerSpec::sparse_args' order
// -> int64 count of distinct rows updated.
struct ApplySparse {
  Optimizer opt = Optimizer::kSgd;
  OptimizerHyper attr_hyper;
};
// "apply_sync" (grad, local_step) / "sparse_apply_sync" (indices, values, local_step): one
// replica's contribution to the SyncReplicas accumulator (runtime/sync_accumulator.h) -> the step
// it counts for or applied to, -1 when dropped.
struct SyncContribution {
  bool sparse = false;
  bool increment = false;  // optimizer "increment": var += 1 once per step (the global step)
  Optimizer opt = Optimizer::kSgd;
  OptimizerHyper hyper;       // all from attributes
  int64_t replicas = 1;       // replicas_to_aggregate
  double timeout_secs = 60;   // sync_timeout_secs, clamped to [0, 86400]
  // sync_deadline_secs, clamped to [0, 86400]: 0 = none; otherwise a step with at least one
  // contribution closes short this long after its first (runtime/sync_accumulator.h).
  double deadline_secs = 0;
  bool wait = true;
  const char* optimizer_name() const { return increment ? "increment" : optimizer_spec(opt).name; }
};
// "sync_control" () attrs action ("stats" | "leave" | "close") -> int64 (step, or the stats vector).
struct SyncControl {
  enum class Action { kStats, kLeave, kClose };
  Action action = Action::kStats;
  int64_t replicas = 1;  // replicas_to_aggregate
  int64_t total = 1;     // total_num_replicas (default: replicas)
};
// "save_slots" () -> uint8 blob; "restore_slots" (blob) -> blob.
struct SaveSlots {};
struct RestoreSlots {};
// "sync_state" (value, slot blob) -> value: a primary's whole state, on its backup.
struct SyncState {};

}  // namespace vcall

using VariableCall =
    std::variant<vcall::Read, vcall::IsInitialized, vcall::Assign, vcall::AssignAdd, vcall::Scatter, vcall::ApplyDense,
                 vcall::ApplySparse, vcall::SyncContribution, vcall::SyncControl, vcall::SaveSlots,
                 vcall::RestoreSlots, vcall::SyncState>;

// A decoded call with what it was decoded from. Immutable once made; shared by every call of a
// kernel (ResourceCall::op).
struct VariableOp {
  std::string method;  // the wire name: "read", "apply_adam", ...
  AttrMap attrs;       // the attributes it was decoded from (travel with a replicated call)
  VariableCall call;
  DType dtype = DType::kInvalid;     // attr dtype: the variable's declared dtype (kInvalid: none)
  Shape shape = Shape::unknown();    // attr shape: its declared shape
};

// Decodes `method` with `attrs`. InvalidArgument naming the method for an unknown method, an
// unknown synchronous optimizer, a sparse sync contribution of an optimizer without a sparse
// form, an unknown sync_control action, or an invalid attribute-given hyper-parameter.
Result<std::shared_ptr<const VariableOp>> decode_variable_op(const std::string& method, AttrMap attrs);

// The method names decode_variable_op takes, each once (for kernel registration and tests).
std::vector<std::string> variable_methods();

// Whether the call changes the variable's state (and so is replicated to a backup ps): false
// for reads, save, is_initialized, save_slots and sync_control "stats".
bool mutates(const VariableCall& c);
// Whether the call is a dense optimizer update (one pass over the whole variable and its slots;
// a backup defers these, actors/variable_actor.cc).
bool is_dense_update(const VariableCall& c);

}  // namespace actorflow
