// Variables, their updates, initializers and random ops.
//
// A variable is a node `VariableV2` whose output is the variable's current value. The value
// lives in a variable actor of the task the node is placed on (actors/variable_actor.cc),
// shared by name (attr shared_name, default the node name) across sessions and processes —
// TensorFlow's resource container. The builders of the ops that change a variable take the
// variable's Output to learn its name, dtype, shape and device, but the op does not consume the
// variable's value (no data edge: that would read the variable before assigning it); it carries
// attr var_name so its kernel knows which actor to call, and is requested on the variable's
// device. Optimizer updates run on the variable actor: a worker sends a gradient, never a whole
// new value. Builders report errors through the scope's status and return an invalid Output.
#pragma once

#include <cstdint>
#include <string>

#include "graph/ops.h"

namespace actorflow {
namespace ops {

// A variable of `shape`/`dtype` named by the scope (with_op_name) or "Variable". Every variable
// is recorded in its graph's variable collections (graph order = creation order; see
// <actorflow/train.h>: train::global_variables / trainable_variables): `trainable` false keeps it
// out of trainable_variables (a global step, a counter), as tf.Variable(trainable=False). The
// records are attrs of the VariableV2 node ("_trainable", and "_initializer" once train::
// attaches one), so they survive graph copies and GraphDef.
Output variable(const Scope& s, const Shape& shape, DType dtype, bool trainable = true);
// Where a shard of a partitioned variable (train::get_partitioned_variable) belongs: the
// logical variable's full name and shape, and the shard's first row in it. Recorded as attrs of
// the shard's VariableV2 node ("_partition_of", "_partition_shape", "_partition_offset"), so it
// travels with graph copies; checkpoints save the shards as that one logical tensor.
struct PartitionRecord {
  std::string logical;
  Shape full_shape;
  int64_t offset = 0;
};
// Records `r` on variable node `n` (not thread-safe, like every graph change).
void set_partition_record(Node* n, const PartitionRecord& r);
// The record of `n`, or false when n is not a shard. Pure.
bool partition_record(const Node& n, PartitionRecord* r);
// var = value; outputs the new value.
Output assign(const Scope& s, Input var, Input value);
// var += delta; outputs the new value.
Output assign_add(const Scope& s, Input var, Input delta);
// Row updates of a variable of rank >= 1 on the variable's own task (the rows travel, not the
// variable): var[indices[i]] += updates[i] (duplicates add up) / var[indices[i]] = updates[i]
// (for duplicate indices the last wins). `updates` is indices.shape + var.shape[1:]. Outputs the
// updated rows (updates' shape) — not the whole variable, unlike TensorFlow's ref output. An
// index outside [0, rows) fails the step naming the variable and changes nothing.
Output scatter_add(const Scope& s, Input var, Input indices, Input updates);
Output scatter_update(const Scope& s, Input var, Input indices, Input updates);
// bool scalar: has the variable been assigned yet?
Output is_variable_initialized(const Scope& s, Input var);
// var -= lr * grad. Outputs the new value.
Output apply_gradient_descent(const Scope& s, Input var, Input lr, Input grad);
// accum = momentum * accum + grad; var -= lr * accum (slot kept by the variable actor).
Output apply_momentum(const Scope& s, Input var, Input lr, Input grad, Input momentum);
// Adam with bias correction (m, v and the step count kept by the variable actor).
Output apply_adam(const Scope& s, Input var, Input lr, Input beta1, Input beta2, Input epsilon, Input grad);
// Adagrad (TF ApplyAdagrad): accum += grad^2; var -= lr * grad / sqrt(accum). The accumulator is
// kept by the variable actor and starts at `initial_accumulator_value` (> 0; TF's default 0.1)
// on the first update. Outputs the new value.
Output apply_adagrad(const Scope& s, Input var, Input lr, Input grad, float initial_accumulator_value = 0.1f);
// Sparse forms (a gradient that is rows `values` for rows `indices` of the variable, e.g. an
// ops::indexed_slices' inputs): the variable actor sums the rows of duplicate indices first, then
// updates only those rows and their slots, TensorFlow's SparseApply* semantics: SGD and Adagrad as
// dense; Momentum decays and adds only the rows present; Adam is lazy (TF's LazyAdamOptimizer: m
// and v of absent rows are not decayed; the step count t advances once per update). Every index is
// checked first (out of range: InvalidArgument naming the variable; nothing changes). The slots
// are the dense updates' own. Outputs the number of distinct rows updated (int64 scalar).
Output sparse_apply_gradient_descent(const Scope& s, Input var, Input lr, Input indices, Input values);
Output sparse_apply_momentum(const Scope& s, Input var, Input lr, Input indices, Input values, Input momentum);
Output sparse_apply_adam(const Scope& s, Input var, Input lr, Input beta1, Input beta2, Input epsilon, Input indices,
                         Input values);
Output sparse_apply_adagrad(const Scope& s, Input var, Input lr, Input indices, Input values,
                            float initial_accumulator_value = 0.1f);
// RMSProp (TF ApplyRMSProp, uncentered): ms = decay*ms + (1-decay)*grad^2;
// mom = momentum*mom + lr*grad/sqrt(ms + epsilon); var -= mom. The slots ms (starting at 1, as
// TF 1.x's RMSPropOptimizer creates it) and mom (starting at 0) are kept by the variable actor.
// Outputs the new value.
Output apply_rms_prop(const Scope& s, Input var, Input lr, Input decay, Input momentum, Input epsilon, Input grad);
// FTRL-Proximal (TF ApplyFtrl / ApplyFtrlV2, the optimizer of wide-and-deep models), with
// p = -lr_power: g' = grad + 2 l2_shrinkage var; accum' = accum + grad^2;
// linear += g' - (accum'^p - accum^p) / lr * var;
// var = |linear| > l1 ? (sign(linear) l1 - linear) / (accum'^p / lr + 2 l2) : 0; accum = accum'.
// The slots accum (starting at initial_accumulator_value >= 0) and linear (starting at 0) are
// kept by the variable actor. lr > 0, l1 >= 0, l2 >= 0, lr_power <= 0 (checked when it runs).
// Outputs the new value.
Output apply_ftrl(const Scope& s, Input var, Input lr, Input l1, Input l2, Input lr_power, Input grad,
                  float initial_accumulator_value = 0.1f, float l2_shrinkage = 0.0f);
// Its sparse form (TF SparseApplyFtrl): as the other sparse updates above, only the rows present
// and their slots.
Output sparse_apply_ftrl(const Scope& s, Input var, Input lr, Input l1, Input l2, Input lr_power, Input indices,
                         Input values, float initial_accumulator_value = 0.1f, float l2_shrinkage = 0.0f);
// Its sparse form (TF SparseApplyRMSProp): only the rows present and their ms and mom change.
Output sparse_apply_rms_prop(const Scope& s, Input var, Input lr, Input decay, Input momentum, Input epsilon,
                             Input indices, Input values);
// SyncReplicasOptimizer's contribution of one replica for global step `local_step`: the variable's
// accumulator averages `replicas_to_aggregate` gradients of the current step, applies Adam once and
// releases the waiting replicas; stale gradients (local_step below the current step) and gradients
// beyond replicas_to_aggregate for a step are dropped. Outputs the step the update applied to (or -1
// when this gradient was dropped). `total_replicas` > replicas_to_aggregate gives backup workers.
Output apply_adam_sync(const Scope& s, Input var, Input grad, Input local_step, float lr,
                       int replicas_to_aggregate, int total_replicas);
// The global step's part in synchronous training: var += 1 once per aggregated step.
Output increment_sync(const Scope& s, Input var, Input local_step, int replicas_to_aggregate, int total_replicas);
// The same for plain SGD.
Output apply_sgd_sync(const Scope& s, Input var, Input grad, Input local_step, float lr,
                      int replicas_to_aggregate, int total_replicas);

// What a synchronous update applies once its step is complete (SyncReplicasOptimizer's options).
struct SyncOptions {
  // "sgd", "momentum", "adam", "adagrad", "rmsprop", or "increment" (var += 1; the global step)
  std::string optimizer = "sgd";
  float lr = 0.01f;
  float momentum = 0.9f;                              // "momentum"
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // "adam" (epsilon also "rmsprop")
  float decay = 0.9f;                                   // "rmsprop" (with momentum, epsilon)
  float initial_accumulator_value = 0.1f;               // "adagrad"
  int replicas_to_aggregate = 1;  // gradients averaged per step
  int total_num_replicas = 1;     // workers; more than replicas_to_aggregate gives backup workers
  double timeout_secs = 60;       // a step that does not fill in time fails its waiting workers
  // The sync deadline (0 = none; else in (0, timeout_secs)): a step that has at least one
  // gradient but fewer than replicas_to_aggregate this long after its first closes short: the
  // average over the gradients it got is applied, the step advances and its waiting workers go
  // on; their late gradients are stale (dropped, counted). docs/architecture/variables.md.
  double deadline_secs = 0;
  // true: the op completes when its step is applied (or the contribution was dropped), failing
  // after timeout_secs; false: it completes as soon as the contribution is accepted, outputting
  // the step it counts for (SyncReplicasOptimizer's variable updates; its global-step increment
  // waits and is the replicas' barrier).
  bool wait = true;
};
// The general form of the *_sync builders above: op ApplyGradientSync with `o` as attrs. `grad`
// is ignored (any scalar) for "increment". Outputs the int64 step the update applied to, or -1.
Output apply_gradient_sync(const Scope& s, Input var, Input grad, Input local_step, const SyncOptions& o);
// The same for a sparse gradient (rows `values` for rows `indices` of the variable, e.g. an
// ops::indexed_slices' inputs): the accumulator sums the contributions' rows by index (a
// contribution's duplicate indices first), and when the step is complete divides each row by the
// number of contributions that had it (TensorFlow's SparseConditionalAccumulator, MEAN) and
// applies the sparse form of o.optimizer ("sgd", "momentum", "adam" lazily, "adagrad", "rmsprop")
// to those rows only. Errors as apply_gradient_sync, plus an optimizer without a sparse form.
Output sparse_apply_gradient_sync(const Scope& s, Input var, Input indices, Input values, Input local_step,
                                  const SyncOptions& o);

// The optimizer slots of `var` (momentum; Adam m, v and step count; Adagrad accumulator; RMSProp
// ms and mom) as one uint8 vector, empty when no optimizer has updated it yet (op VariableSlots,
// on the variable's device; the encoding is actors/variable_actor.h's). For checkpoints.
Output variable_slots(const Scope& s, Input var);
// Replaces `var`'s slots by those of a VariableSlots blob (op RestoreVariableSlots, on the
// variable's device); an empty blob clears them. The run fails with InvalidArgument naming the
// variable when the blob is malformed or its slots do not match the variable's dtype and shape.
// Outputs the blob.
Output restore_variable_slots(const Scope& s, Input var, Input slots);

// The synchronous accumulator of `var` (op SyncAccumulatorControl, on the variable's device):
//   "leave": a replica stops training (SyncReplicasOptimizer::finish_op); once fewer than
//            `replicas_to_aggregate` of `total_num_replicas` replicas are left, the accumulator
//            closes: waiting and later contributions fail with OutOfRange instead of waiting
//            for gradients that will never come. Outputs the accumulator's step (int64 scalar).
//   "close": closes it now (the chief ends training). Outputs the step.
//   "stats": int64 [7]: the step it collects for, aggregated updates applied, stale gradients
//            dropped, realignments to a later step, replicas that left, closed (0/1), steps
//            closed short at the sync deadline.
// An assign or restore of the variable (a new or restored model) re-opens it and forgets leaves.
Output sync_accumulator_control(const Scope& s, Input var, const std::string& action, int replicas_to_aggregate = 1,
                                int total_num_replicas = 1);

// tf.train.get_or_create_global_step's variable: an int64 scalar, non-trainable variable named
// "global_step" (under the scope's name prefix). Initialise it with
// assign(s, gs, Tensor::scalar<int64_t>(0)), or use train::get_or_create_global_step, which
// also attaches that initializer and returns the graph's existing global step if there is one.
Output global_step(const Scope& s);

// ---- initializers and random ops (seeded: the same seed gives the same values) ----------
// A tensor of `shape` filled with 0 or with `value` (converted to `dtype`): tf.zeros_initializer,
// tf.constant_initializer.
Output zeros(const Scope& s, const Shape& shape, DType dtype);
Output fill(const Scope& s, const Shape& shape, float value, DType dtype = DType::kFloat32);
// The values depend only on (seed, seed2): every run of the op gives the same values, and two
// ops with the same seeds and shape give the same values (give each initializer its own seed).
Output random_uniform(const Scope& s, const Shape& shape, float minval, float maxval, uint64_t seed,
                      uint64_t seed2 = 0);
// Normal(mean, stddev) values redrawn until within 2 stddev (tf.truncated_normal).
Output truncated_normal(const Scope& s, const Shape& shape, float mean, float stddev, uint64_t seed,
                        uint64_t seed2 = 0);
// Uniform(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)) (Xavier/Glorot; conv filters
// [h, w, in, out] use fan_in = h*w*in, fan_out = h*w*out).
Output glorot_uniform(const Scope& s, const Shape& shape, uint64_t seed, uint64_t seed2 = 0);
// glorot_uniform's bound for a variable of `shape`: sqrt(6 / (fan_in + fan_out)), with TF's fans
// (rank 1: dim 0 both; rank 2: the dims; higher: receptive field times the last two dims). Pure.
float glorot_limit(const Shape& shape);

}  // namespace ops
}  // namespace actorflow
