// The variable actor: one variable of the parameter server. It holds the value, a version,
// the optimizer slots (momentum accumulator; Adam m, v and step count; Adagrad accumulator;
// RMSProp ms and mom) and, in synchronous
// training, the accumulator of the current global step. Every message is handled atomically
// (it is an actor), so concurrent workers' updates never interleave.
//
// Message interface (variable_actor_t in actors/interfaces.h):
//   (resource_atom, ResourceCallPtr) -> std::vector<Tensor>{result}, methods:
//   read, assign(value), assign_add(delta), is_initialized -> bool scalar,
//   scatter_add(indices, updates), scatter_update(indices, updates) -> the updated rows (every
//     index checked first: an out-of-range one changes nothing and names itself),
//   apply_sgd(lr, grad), apply_momentum(lr, grad, momentum), apply_adam(lr, b1, b2, eps, grad),
//   apply_adagrad(lr, grad) attr initial_accumulator_value (the slot's start, default 0.1),
//   apply_rms_prop(lr, decay, momentum, epsilon, grad), apply_ftrl(lr, l1, l2, lr_power, grad) attrs
//     initial_accumulator_value, l2_shrinkage -> the new value (host tensor);
//   sparse_apply_sgd(lr, indices, rows), sparse_apply_momentum(lr, indices, rows, momentum),
//     sparse_apply_adam(lr, b1, b2, eps, indices, rows) (lazy), sparse_apply_adagrad(lr, indices,
//     rows), sparse_apply_rms_prop(lr, decay, momentum, epsilon, indices, rows), sparse_apply_ftrl(lr,
//     l1, l2, lr_power, indices, rows) -> int64 count of distinct rows updated (rows of duplicate
//     indices summed first). Each call arrives decoded (ResourceCall::op, device/variable_call.h);
//     the optimizers are device/optimizers.h's;
//   apply_sync(grad, local_step) attrs optimizer ("sgd"|"momentum"|"adam"|"increment"), lr,
//     momentum, beta1, beta2, epsilon, replicas_to_aggregate, total_num_replicas,
//     sync_timeout_secs, sync_deadline_secs -> int64 step the update applied to, or -1 when the gradient was dropped
//     (local_step below the accumulator's step, or an extra one of a backup worker). The reply is
//     held until replicas_to_aggregate gradients of the step have arrived; then their average is
//     applied once and the waiting workers are released together. A step that does not fill within
//     sync_timeout_secs (default 60) fails its waiting workers with DeadlineExceeded naming how
//     many arrived. With sync_deadline_secs > 0 a step that has not filled that long after its
//     first gradient closes short instead: the average over the gradients it got is applied and
//     its waiting workers are released with the step (runtime/sync_accumulator.h; counted in
//     stats and, for waiting contributions, actorflow_sync_short_steps_total). The accumulator
//     starts at the local step of its first contribution.
//   save -> value; restore(value) (same as assign). An assign/restore drops a pending
//     accumulation (its workers get -1) and lets the accumulator re-align with the next local step.
//   save_slots -> uint8 blob of every slot and Adam's step count (empty: none yet);
//   restore_slots(blob) -> blob: replaces the slots, checked whole first (an empty blob clears them).
//   sync_state(value, slot blob) -> value: a primary's whole state, sent to its backup copy
//     (replication, actors/ps_replication.h).
// With a replicator, every mutating call is replicated to the backup ps before it is answered
// (actors/ps_replication.h): the answer then means both copies hold the update.
// Slots are created on a variable's first update of that kind and kept across assign/restore
// and in-place restarts. Checkpoints carry them (actors/variable_checkpoint.h), so a parameter
// server restored from a checkpoint goes on with the optimizer's state, as TF's Saver does.
// Errors name the variable: "variable 'w' is not initialized", shape/dtype mismatches.
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <string>

#include "actors/resources.h"
#include "actors/restart.h"

namespace actorflow {

class PsReplicator;

// Spawns the actor of variable `name` in `sys`; `restarts` bounds its in-place restarts after
// exceptions; `replicator` (null: none) is its task's link to the backup ps when the cluster
// runs with [supervisor] ps_replicas = 2 (actors/ps_replication.h). The caller owns the
// returned handle. Thread-safe.
variable_actor_t spawn_variable_actor(caf::actor_system& sys, const std::string& name,
                                      RestartPolicy restarts = RestartPolicy{},
                                      std::shared_ptr<PsReplicator> replicator = nullptr);

// The ResourceFactory a task's ResourceManager uses: variable actors with `restarts` (its
// Server's [supervisor] budget) and `replicator`. Pure; the factory is thread-safe.
ResourceFactory variable_actor_factory(RestartPolicy restarts, std::shared_ptr<PsReplicator> replicator = nullptr);

}  // namespace actorflow
