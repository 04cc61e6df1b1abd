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
#include "graph/placer.h"

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

}  // namespace

Result<std::vector<GradAndVar>> Optimizer::compute_gradients(const Scope& s, const Output& loss,
                                                             const std::vector<Output>& var_list) const {
  const std::string what = name_ + ".compute_gradients";
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

Result<Output> Optimizer::apply_gradients(const Scope& s, const std::vector<GradAndVar>& grads_and_vars,
                                          const Output& global_step) const {
  const std::string what = name_ + ".apply_gradients";
  AF_RETURN_IF_ERROR(s.status());
  AF_RETURN_IF_ERROR(validate().with_prefix(what));
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
  Node* gs = nullptr;
  if (global_step.valid()) {
    AF_ASSIGN_OR_RETURN(gs, variable_node(global_step, what));
    const DType t = gs->output_types[0];
    if ((t != DType::kInt64 && t != DType::kInt32) || gs->output_shapes[0].rank() != 0)
      return InvalidArgument(what + ": global_step '" + gs->name + "' must be an int64 or int32 scalar variable, is " +
                             dtype_name(t) + " " + gs->output_shapes[0].to_string());
  }

  Scope os = s.new_sub_scope(name_);
  std::map<std::string, std::vector<Output>> hyper_by_device;
  std::vector<Output> updates;
  for (const auto& [grad, var] : todo) {
    const std::string& dev = var.node()->requested_device;
    auto it = hyper_by_device.find(dev);
    if (it == hyper_by_device.end())
      it = hyper_by_device.emplace(dev, prepare(on_device(os, dev))).first;
    Output u = apply_dense(os.with_op_name("update_" + var.node()->name), it->second, grad, var);
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
  Tensor one = gs->output_types[0] == DType::kInt64 ? Tensor::scalar<int64_t>(1) : Tensor::scalar<int32_t>(1);
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

Output MomentumOptimizer::apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g,
                                      const Output& v) const {
  return ops::apply_momentum(s, v, h[0], g, h[1]);
}

AdamOptimizer::AdamOptimizer(float learning_rate, float beta1, float beta2, float epsilon)
    : Optimizer("Adam", {{"learning_rate", learning_rate}, {"beta1", beta1}, {"beta2", beta2}, {"epsilon", epsilon}}) {}

Output AdamOptimizer::apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g,
                                  const Output& v) const {
  return ops::apply_adam(s, v, h[0], h[1], h[2], h[3], g);
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

RMSPropOptimizer::RMSPropOptimizer(float learning_rate, float decay, float momentum, float epsilon)
    : Optimizer("RMSProp",
                {{"learning_rate", learning_rate}, {"decay", decay}, {"momentum", momentum}, {"epsilon", epsilon}}) {}

Output RMSPropOptimizer::apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g,
                                     const Output& v) const {
  return ops::apply_rms_prop(s, v, h[0], h[1], h[2], h[3], g);
}

}  // namespace train
}  // namespace actorflow
