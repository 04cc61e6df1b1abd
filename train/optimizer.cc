// Optimizers (include/actorflow/train.h): gradients from graph/gradients.h, one update op per
// variable from graph/ops_variables.h (requested on the variable's device; the variable actor
// runs the update and keeps the slots).
#include <map>
#include <set>
#include <string>
#include <vector>

#include "actorflow/train.h"
#include "graph/gradients.h"
#include "train/collections.h"
#include "graph/ops.h"
#include "graph/ops_variables.h"
#include "graph/op_kinds.h"

namespace actorflow {
namespace train {
namespace {

// The variable node behind `v`, or an error "<what>: ..." naming what `v` is instead.
Result<Node*> variable_node(const Output& v, const std::string& what) {
  if (!v.valid()) return InvalidArgument(what + ": a variable is an invalid Output (an earlier op failed to build)");
  Node* n = v.node();
  if (!is_variable_op(n->op)) return InvalidArgument(what + ": '" + n->name + "' is a " + n->op + ", not a variable");
  if (v.index() != 0) return InvalidArgument(what + ": '" + v.name() + "' is not a variable's value");
  return n;
}

Status require_float(const Node& n, const std::string& what) {
  if (n.output_types[0] != DType::kFloat32)
    return InvalidArgument(what + ": variable '" + n.name + "' is " + dtype_name(n.output_types[0]) +
                           "; optimizers update float32 variables (create it with trainable = false)");
  return Status::OK();
}

std::string names_of(const std::vector<Output>& vars) {
  std::string out;
  for (const auto& v : vars) out += (out.empty() ? "" : ", ") + v.name();
  return "[" + out + "]";
}

// `s` without control dependencies, requesting exactly `device` (a variable's request), not
// `device` merged over s's own as with_device does.
Scope on_device(const Scope& s, const std::string& device) {
  return s.with_no_control_dependencies().with_device("").with_device(device);
}

Result<std::vector<GradAndVar>> gradients_of(const std::string& name, const Scope& s, const Output& loss,
                                             const std::vector<Output>& var_list);

}  // namespace

Result<std::vector<GradAndVar>> Optimizer::compute_gradients(const Scope& s, const Output& loss,
                                                             const std::vector<Output>& var_list) const {
  return gradients_of(name_, s, loss, var_list);
}

namespace {

Result<std::vector<GradAndVar>> gradients_of(const std::string& name, const Scope& s, const Output& loss,
                                             const std::vector<Output>& var_list) {
  const std::string what = name + ".compute_gradients";
  AF_RETURN_IF_ERROR(s.status());
  if (!loss.valid()) return InvalidArgument(what + ": the loss is an invalid Output (an earlier op failed to build)");
  if (!dtype_is_floating(loss.dtype()))
    return InvalidArgument(what + ": the loss '" + loss.name() + "' is " + dtype_name(loss.dtype()) +
                           ", gradients need a float loss");
  std::vector<Output> vars = var_list;
  if (vars.empty()) {
    // Every trainable variable of the graph, whatever s's name prefix (TF's default var_list).
    vars = graph_variables(*s.graph(), "", /*trainable_only=*/true);
    if (vars.empty()) return InvalidArgument(what + ": no variables to optimize (the graph has no trainable variables)");
  }
  std::set<const Node*> seen;
  for (const Output& v : vars) {
    AF_ASSIGN_OR_RETURN(Node * n, variable_node(v, what));
    AF_RETURN_IF_ERROR(require_float(*n, what));
    if (!seen.insert(n).second) return InvalidArgument(what + ": variable '" + n->name + "' is listed twice");
  }
  auto grads = gradients(s, {loss}, vars);
  if (!grads.ok()) return grads.status().with_prefix(what);
  std::vector<GradAndVar> out;
  for (size_t i = 0; i < vars.size(); ++i) out.emplace_back((*grads)[i], vars[i]);
  return out;
}

// The pairs of grads_and_vars that have a gradient, after checking every variable (a variable,
// float32, listed once) and that one has a gradient; errors start with `what`.
Result<std::vector<GradAndVar>> pairs_to_apply(const std::vector<GradAndVar>& grads_and_vars, const std::string& what) {
  std::set<const Node*> seen;
  std::vector<Output> all_vars;
  std::vector<GradAndVar> todo;
  for (const auto& gv : grads_and_vars) {
    AF_ASSIGN_OR_RETURN(Node * n, variable_node(gv.second, what));
    AF_RETURN_IF_ERROR(require_float(*n, what));
    if (!seen.insert(n).second) return InvalidArgument(what + ": variable '" + n->name + "' is listed twice");
    all_vars.push_back(gv.second);
    if (gv.first.valid()) todo.push_back(gv);
  }
  if (todo.empty())
    return InvalidArgument(what + ": no gradients provided for any variable " + names_of(all_vars) +
                           " (the loss depends on none of them)");
  return todo;
}

// The global step's node: an int64, int32, float32 or float64 scalar variable (TensorFlow 1.x
// programs often make it a float: get_variable('global_step', [], trainable=False)); errors
// start with `what`.
Result<Node*> global_step_node(const Output& global_step, const std::string& what) {
  AF_ASSIGN_OR_RETURN(Node * gs, variable_node(global_step, what));
  const DType t = gs->output_types[0];
  if ((t != DType::kInt64 && t != DType::kInt32 && t != DType::kFloat32 && t != DType::kFloat64) ||
      gs->output_shapes[0].rank() != 0)
    return InvalidArgument(what + ": global_step '" + gs->name +
                           "' must be an int64, int32, float32 or float64 scalar variable, is " + dtype_name(t) + " " +
                           gs->output_shapes[0].to_string());
  return gs;
}

}  // namespace

Result<Output> Optimizer::apply_gradients(const Scope& s, const std::vector<GradAndVar>& grads_and_vars,
                                          const Output& global_step) const {
  const std::string what = name_ + ".apply_gradients";
  AF_RETURN_IF_ERROR(s.status());
  AF_RETURN_IF_ERROR(validate().with_prefix(what));
  AF_ASSIGN_OR_RETURN(std::vector<GradAndVar> todo, pairs_to_apply(grads_and_vars, what));
  Node* gs = nullptr;
  if (global_step.valid()) {
    AF_ASSIGN_OR_RETURN(gs, global_step_node(global_step, what));
  }

  Scope os = s.new_sub_scope(name_);
  std::map<std::string, std::vector<Output>> hyper_by_device;
  std::vector<Output> updates;
  for (const auto& [grad, var] : todo) {
    const std::string& dev = var.node()->requested_device;
    auto it = hyper_by_device.find(dev);
    if (it == hyper_by_device.end())
      it = hyper_by_device.emplace(dev, prepare(on_device(os, dev))).first;
    const Scope us = os.with_op_name("update_" + var.node()->name);
    Output u;
    if (ops::is_indexed_slices(grad)) {
      // A sparse gradient: only its rows travel to the variable's task and are updated there.
      u = apply_sparse(us, it->second, input_of(s, *grad.node(), 0), input_of(s, *grad.node(), 1), var);
    }
    if (!u.valid() && s.status().ok()) u = apply_dense(us, it->second, grad, var);
    if (!u.valid())
      return s.status().ok() ? Internal(what + ": no update op for '" + var.name() + "'") : s.status().with_prefix(what);
    updates.push_back(u);
  }
  if (!gs) {
    Output op = ops::no_op(os, updates, "apply");
    if (!op.valid()) return s.status();
    return op;
  }
  Scope gs_dev = on_device(os, gs->requested_device);
  const DType gt = gs->output_types[0];
  Tensor one = gt == DType::kInt64   ? Tensor::scalar<int64_t>(1)
               : gt == DType::kInt32 ? Tensor::scalar<int32_t>(1)
               : gt == DType::kFloat32 ? Tensor::scalar<float>(1.f)
                                       : Tensor::scalar<double>(1.0);
  Output delta = ops::constant(gs_dev, one, "one");
  Output inc = ops::assign_add(os.with_control_dependencies(updates).with_op_name("increment_global_step"),
                               Output(gs, 0), delta);
  if (!inc.valid()) return s.status();
  return inc;
}

Result<Output> Optimizer::minimize(const Scope& s, const Output& loss, const Output& global_step,
                                   const std::vector<Output>& var_list) const {
  AF_ASSIGN_OR_RETURN(auto gv, compute_gradients(s, loss, var_list));
  return apply_gradients(s, gv, global_step);
}

std::vector<Output> Optimizer::prepare(const Scope& s) const {
  std::vector<Output> out;
  for (const auto& [name, value] : hyper_) out.push_back(ops::constant(s, Tensor::scalar<float>(value), name));
  return out;
}

// ---- the optimizers: hyper-parameters in the order their apply_dense reads them ----------

GradientDescentOptimizer::GradientDescentOptimizer(float learning_rate)
    : Optimizer("GradientDescent", {{"learning_rate", learning_rate}}) {}

Output GradientDescentOptimizer::apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g,
                                             const Output& v) const {
  return ops::apply_gradient_descent(s, v, h[0], g);
}

MomentumOptimizer::MomentumOptimizer(float learning_rate, float momentum)
    : Optimizer("Momentum", {{"learning_rate", learning_rate}, {"momentum", momentum}}) {}

Output GradientDescentOptimizer::apply_sparse(const Scope& s, const std::vector<Output>& h, const Output& indices,
                                              const Output& values, const Output& v) const {
  return ops::sparse_apply_gradient_descent(s, v, h[0], indices, values);
}

Output MomentumOptimizer::apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g,
                                      const Output& v) const {
  return ops::apply_momentum(s, v, h[0], g, h[1]);
}

Output MomentumOptimizer::apply_sparse(const Scope& s, const std::vector<Output>& h, const Output& indices,
                                       const Output& values, const Output& v) const {
  return ops::sparse_apply_momentum(s, v, h[0], indices, values, h[1]);
}

AdamOptimizer::AdamOptimizer(float learning_rate, float beta1, float beta2, float epsilon)
    : Optimizer("Adam", {{"learning_rate", learning_rate}, {"beta1", beta1}, {"beta2", beta2}, {"epsilon", epsilon}}) {}

Output AdamOptimizer::apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g,
                                  const Output& v) const {
  return ops::apply_adam(s, v, h[0], h[1], h[2], h[3], g);
}

Output AdamOptimizer::apply_sparse(const Scope& s, const std::vector<Output>& h, const Output& indices,
                                   const Output& values, const Output& v) const {
  return ops::sparse_apply_adam(s, v, h[0], h[1], h[2], h[3], indices, values);
}

AdagradOptimizer::AdagradOptimizer(float learning_rate, float initial_accumulator_value)
    : Optimizer("Adagrad", {{"learning_rate", learning_rate}}), initial_accumulator_value_(initial_accumulator_value) {}

Status AdagradOptimizer::validate() const {
  if (!(initial_accumulator_value_ > 0))
    return InvalidArgument("initial_accumulator_value must be > 0, got " + std::to_string(initial_accumulator_value_));
  return Status::OK();
}

Output AdagradOptimizer::apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g,
                                     const Output& v) const {
  return ops::apply_adagrad(s, v, h[0], g, initial_accumulator_value_);
}

Output AdagradOptimizer::apply_sparse(const Scope& s, const std::vector<Output>& h, const Output& indices,
                                      const Output& values, const Output& v) const {
  return ops::sparse_apply_adagrad(s, v, h[0], indices, values, initial_accumulator_value_);
}

RMSPropOptimizer::RMSPropOptimizer(float learning_rate, float decay, float momentum, float epsilon)
    : Optimizer("RMSProp",
                {{"learning_rate", learning_rate}, {"decay", decay}, {"momentum", momentum}, {"epsilon", epsilon}}) {}

Output RMSPropOptimizer::apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g,
                                     const Output& v) const {
  return ops::apply_rms_prop(s, v, h[0], h[1], h[2], h[3], g);
}

Output RMSPropOptimizer::apply_sparse(const Scope& s, const std::vector<Output>& h, const Output& indices,
                                      const Output& values, const Output& v) const {
  return ops::sparse_apply_rms_prop(s, v, h[0], h[1], h[2], h[3], indices, values);
}

FtrlOptimizer::FtrlOptimizer(float learning_rate, float learning_rate_power, float initial_accumulator_value,
                             float l1_regularization_strength, float l2_regularization_strength,
                             float l2_shrinkage_regularization_strength)
    : Optimizer("Ftrl", {{"learning_rate", learning_rate},
                         {"l1", l1_regularization_strength},
                         {"l2", l2_regularization_strength},
                         {"learning_rate_power", learning_rate_power}}),
      initial_accumulator_value_(initial_accumulator_value),
      l2_shrinkage_(l2_shrinkage_regularization_strength) {}

Status FtrlOptimizer::validate() const {
  auto bad = [](const char* what, const char* rule, float v) {
    return InvalidArgument(std::string(what) + " must be " + rule + ", got " + std::to_string(v));
  };
  if (!(hyper_value(0) > 0)) return bad("learning_rate", "> 0", hyper_value(0));
  if (!(hyper_value(1) >= 0)) return bad("l1_regularization_strength", ">= 0", hyper_value(1));
  if (!(hyper_value(2) >= 0)) return bad("l2_regularization_strength", ">= 0", hyper_value(2));
  if (!(hyper_value(3) <= 0)) return bad("learning_rate_power", "<= 0", hyper_value(3));
  if (!(initial_accumulator_value_ >= 0)) return bad("initial_accumulator_value", ">= 0", initial_accumulator_value_);
  if (!(l2_shrinkage_ >= 0)) return bad("l2_shrinkage_regularization_strength", ">= 0", l2_shrinkage_);
  return Status::OK();
}

Output FtrlOptimizer::apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g, const Output& v) const {
  return ops::apply_ftrl(s, v, h[0], h[1], h[2], h[3], g, initial_accumulator_value_, l2_shrinkage_);
}

Output FtrlOptimizer::apply_sparse(const Scope& s, const std::vector<Output>& h, const Output& indices,
                                   const Output& values, const Output& v) const {
  return ops::sparse_apply_ftrl(s, v, h[0], h[1], h[2], h[3], indices, values, initial_accumulator_value_,
                                l2_shrinkage_);
}

// ---- the synchronous form of each update ---------------------------------------------------

ops::SyncOptions Optimizer::sync_update() const {
  ops::SyncOptions o;
  o.optimizer.clear();  // none: SyncReplicasOptimizer refuses this optimizer
  return o;
}

ops::SyncOptions GradientDescentOptimizer::sync_update() const {
  ops::SyncOptions o;
  o.optimizer = "sgd";
  o.lr = hyper_value(0);
  return o;
}

ops::SyncOptions MomentumOptimizer::sync_update() const {
  ops::SyncOptions o;
  o.optimizer = "momentum";
  o.lr = hyper_value(0);
  o.momentum = hyper_value(1);
  return o;
}

ops::SyncOptions AdamOptimizer::sync_update() const {
  ops::SyncOptions o;
  o.optimizer = "adam";
  o.lr = hyper_value(0);
  o.beta1 = hyper_value(1);
  o.beta2 = hyper_value(2);
  o.epsilon = hyper_value(3);
  return o;
}

ops::SyncOptions AdagradOptimizer::sync_update() const {
  ops::SyncOptions o;
  o.optimizer = "adagrad";
  o.lr = hyper_value(0);
  o.initial_accumulator_value = initial_accumulator_value_;
  return o;
}

ops::SyncOptions RMSPropOptimizer::sync_update() const {
  ops::SyncOptions o;
  o.optimizer = "rmsprop";
  o.lr = hyper_value(0);
  o.decay = hyper_value(1);
  o.momentum = hyper_value(2);
  o.epsilon = hyper_value(3);
  return o;
}

// ---- SyncReplicasOptimizer -------------------------------------------------------------------

SyncReplicasOptimizer::SyncReplicasOptimizer(const Optimizer& opt, int replicas_to_aggregate, int total_num_replicas,
                                             double timeout_secs, double deadline_secs)
    : name_("SyncReplicas_" + opt.name()), update_(opt.sync_update()), valid_(opt.validate()) {
  update_.replicas_to_aggregate = replicas_to_aggregate;
  update_.total_num_replicas = total_num_replicas > 0 ? total_num_replicas : replicas_to_aggregate;
  update_.timeout_secs = timeout_secs;
  update_.deadline_secs = deadline_secs;
  if (valid_.ok() && update_.optimizer.empty())
    valid_ = Unimplemented(opt.name() + " has no synchronous form (sync_update)");
  if (valid_.ok() && (replicas_to_aggregate < 1 || update_.total_num_replicas < replicas_to_aggregate))
    valid_ = InvalidArgument("need 1 <= replicas_to_aggregate (" + std::to_string(replicas_to_aggregate) +
                             ") <= total_num_replicas (" + std::to_string(update_.total_num_replicas) + ")");
  if (valid_.ok() && !(timeout_secs > 0))
    valid_ = InvalidArgument("timeout_secs must be > 0, got " + std::to_string(timeout_secs));
  if (valid_.ok() && !(deadline_secs >= 0 && deadline_secs < timeout_secs))
    valid_ = InvalidArgument("deadline_secs must be 0 (none) or in (0, timeout_secs = " + std::to_string(timeout_secs) +
                             "), got " + std::to_string(deadline_secs));
}

Result<std::vector<GradAndVar>> SyncReplicasOptimizer::compute_gradients(const Scope& s, const Output& loss,
                                                                         const std::vector<Output>& var_list) const {
  return gradients_of(name_, s, loss, var_list);
}

Result<Output> SyncReplicasOptimizer::apply_gradients(const Scope& s, const std::vector<GradAndVar>& grads_and_vars,
                                                      const Output& global_step) {
  const std::string what = name_ + ".apply_gradients";
  AF_RETURN_IF_ERROR(s.status());
  AF_RETURN_IF_ERROR(valid_.with_prefix(what));
  if (!applied_.empty()) return FailedPrecondition(what + ": apply_gradients was already called on this optimizer");
  AF_ASSIGN_OR_RETURN(std::vector<GradAndVar> todo, pairs_to_apply(grads_and_vars, what));
  if (!global_step.valid())
    return InvalidArgument(what + ": synchronous training needs the global step (it numbers the steps)");
  AF_ASSIGN_OR_RETURN(Node * gs, global_step_node(global_step, what));
  if (gs->output_types[0] != DType::kInt64)
    return InvalidArgument(what + ": global_step '" + gs->name + "' must be int64 for synchronous training");
  Scope os = s.new_sub_scope(name_);
  // The local step: the global step as this run reads it (once per run, on its ps).
  const Output local_step(gs, 0);
  std::vector<Output> updates;
  ops::SyncOptions accept = update_;
  accept.wait = false;  // accepted at once; the increment below is the barrier
  for (const auto& [grad, var] : todo) {
    Scope vs = on_device(os, var.node()->requested_device).with_op_name("update_" + var.node()->name);
    const std::string& kind = accept.optimizer;
    const bool sparse_form = kind == "sgd" || kind == "momentum" || kind == "adam" || kind == "adagrad";
    // A sparse gradient (an embedding lookup's) travels as its rows and is aggregated by index.
    Output u = ops::is_indexed_slices(grad) && sparse_form
                   ? ops::sparse_apply_gradient_sync(vs, var, input_of(s, *grad.node(), 0), input_of(s, *grad.node(), 1),
                                                     local_step, accept)
                   : ops::apply_gradient_sync(vs, var, grad, local_step, accept);
    if (!u.valid())
      return s.status().ok() ? Internal(what + ": no update op for '" + var.name() + "'") : s.status().with_prefix(what);
    updates.push_back(u);
    applied_.push_back(var);
  }
  ops::SyncOptions inc = update_;
  inc.optimizer = "increment";
  inc.wait = true;
  Scope gs_dev = on_device(os, gs->requested_device);
  // After every gradient of this replica was accepted: the step completes when
  // replicas_to_aggregate replicas got here, and by then each variable has applied it.
  Output step = ops::apply_gradient_sync(gs_dev.with_control_dependencies(updates).with_op_name("increment_global_step"),
                                         local_step, ops::constant(gs_dev, Tensor::scalar<int64_t>(1), "one"),
                                         local_step, inc);
  if (!step.valid()) return s.status().with_prefix(what);
  applied_.push_back(local_step);
  Output train = ops::no_op(os, {step}, "train");
  if (!train.valid()) return s.status();
  return train;
}

Result<Output> SyncReplicasOptimizer::minimize(const Scope& s, const Output& loss, const Output& global_step,
                                               const std::vector<Output>& var_list) {
  AF_ASSIGN_OR_RETURN(auto gv, compute_gradients(s, loss, var_list));
  return apply_gradients(s, gv, global_step);
}

Result<Output> SyncReplicasOptimizer::control_op(const Scope& s, const std::string& action) const {
  const std::string what = name_ + "." + (action == "leave" ? "finish_op" : action + "_op");
  AF_RETURN_IF_ERROR(s.status());
  if (applied_.empty()) return FailedPrecondition(what + ": call apply_gradients (or minimize) first");
  Scope os = s.new_sub_scope(name_);
  std::vector<Output> ops_;
  for (const Output& var : applied_) {
    Scope vs = on_device(os, var.node()->requested_device).with_op_name(action + "_" + var.node()->name);
    Output c = ops::sync_accumulator_control(vs, var, action, update_.replicas_to_aggregate, update_.total_num_replicas);
    if (!c.valid()) return s.status().with_prefix(what);
    ops_.push_back(c);
  }
  Output op = ops::no_op(os, ops_, action);
  if (!op.valid()) return s.status();
  return op;
}

Result<Output> SyncReplicasOptimizer::finish_op(const Scope& s) const { return control_op(s, "leave"); }
Result<Output> SyncReplicasOptimizer::close_op(const Scope& s) const { return control_op(s, "close"); }

Result<Output> SyncReplicasOptimizer::accumulator_stats(const Scope& s, const Output& var) const {
  const std::string what = name_ + ".accumulator_stats";
  AF_RETURN_IF_ERROR(s.status());
  AF_ASSIGN_OR_RETURN(Node * n, variable_node(var, what));
  Scope vs = on_device(s, n->requested_device).with_op_name("sync_stats_" + n->name);
  Output c = ops::sync_accumulator_control(vs, var, "stats", update_.replicas_to_aggregate, update_.total_num_replicas);
  if (!c.valid()) return s.status().with_prefix(what);
  return c;
}

}  // namespace train
}  // namespace actorflow
