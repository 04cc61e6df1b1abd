// Variables, their updates, initializers and random ops.
//
// A variable is a node `VariableV2` whose output is the variable's current value. The value
// lives in a variable actor of the task the node is placed on (actors/variable_actor.cc),
// shared by name (attr shared_name, default the node name) across sessions and processes —
// TensorFlow's resource container. Every op that changes a variable takes the variable node as
// input 0 and is placed with it (the placer colocates such "ref consumers"), and carries attr
// var_name so its kernel knows which actor to call. Optimizer updates run on the variable
// actor: a worker sends a gradient, never a whole new value.
#pragma once

#include <cstdint>
#include <string>

#include "graph/ops.h"

namespace actorflow {
namespace ops {

// A variable of `shape`/`dtype` named by the scope (with_op_name) or "Variable".
Output variable(const Scope& s, const Shape& shape, DType dtype);
// var = value; outputs the new value.
Output assign(const Scope& s, Input var, Input value);
// var += delta; outputs the new value.
Output assign_add(const Scope& s, Input var, Input delta);
// bool scalar: has the variable been assigned yet?
Output is_variable_initialized(const Scope& s, Input var);
// var -= lr * grad. Outputs the new value.
Output apply_gradient_descent(const Scope& s, Input var, Input lr, Input grad);
// accum = momentum * accum + grad; var -= lr * accum (slot kept by the variable actor).
Output apply_momentum(const Scope& s, Input var, Input lr, Input grad, Input momentum);
// Adam with bias correction (m, v and the step count kept by the variable actor).
Output apply_adam(const Scope& s, Input var, Input lr, Input beta1, Input beta2, Input epsilon, Input grad);
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

// ---- initializers and random ops (seeded: the same seed gives the same values) ----------
Output zeros(const Scope& s, const Shape& shape, DType dtype);
Output fill(const Scope& s, const Shape& shape, float value);
Output random_uniform(const Scope& s, const Shape& shape, float minval, float maxval, uint64_t seed);
// Normal(mean, stddev) values redrawn until within 2 stddev (tf.truncated_normal).
Output truncated_normal(const Scope& s, const Shape& shape, float mean, float stddev, uint64_t seed);
// Uniform(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)) (Xavier/Glorot; conv filters
// [h, w, in, out] use fan_in = h*w*in, fan_out = h*w*out).
Output glorot_uniform(const Scope& s, const Shape& shape, uint64_t seed);

}  // namespace ops
}  // namespace actorflow
