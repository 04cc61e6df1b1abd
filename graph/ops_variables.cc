#include "graph/ops_variables.h"

#include <cmath>
#include <vector>

#include "graph/op_registry.h"

namespace actorflow {
namespace {

Status var_shape_fn(InferenceContext& c) {
  AF_ASSIGN_OR_RETURN(DType t, c.attrs().get<DType>("dtype"));
  AF_ASSIGN_OR_RETURN(Shape s, c.attrs().get<Shape>("shape"));
  if (!s.fully_defined()) return InvalidArgument("variable shape " + s.to_string() + " must be fully defined");
  c.set_output(0, t, s);
  return Status::OK();
}

// Ops that write a variable: output the variable's new value (dtype/shape attrs of the var).
Status write_shape_fn(InferenceContext& c) {
  AF_ASSIGN_OR_RETURN(DType t, c.attrs().get<DType>("dtype"));
  AF_ASSIGN_OR_RETURN(Shape s, c.attrs().get<Shape>("shape"));
  c.set_output(0, t, s);
  return Status::OK();
}

Status check_value(InferenceContext& c, int i, const char* what) {
  AF_ASSIGN_OR_RETURN(DType t, c.attrs().get<DType>("dtype"));
  AF_ASSIGN_OR_RETURN(Shape s, c.attrs().get<Shape>("shape"));
  const std::string var = c.attrs().get_or<std::string>("var_name", "?");
  if (c.input_type(i) != t)
    return InvalidArgument(std::string(what) + " is " + dtype_name(c.input_type(i)) + " but variable '" + var +
                           "' is " + dtype_name(t));
  if (!c.input_shape(i).compatible_with(s))
    return InvalidArgument(std::string(what) + " has shape " + c.input_shape(i).to_string() + " but variable '" + var +
                           "' has shape " + s.to_string());
  return Status::OK();
}

Status scalar_float(InferenceContext& c, int i, const char* what) {
  if (!dtype_is_floating(c.input_type(i))) return InvalidArgument(std::string(what) + " must be a float scalar");
  const Shape& s = c.input_shape(i);
  if (!s.unknown_rank() && s.num_elements() != 1 && s.fully_defined())
    return InvalidArgument(std::string(what) + " must be a scalar, got shape " + s.to_string());
  return Status::OK();
}

// The input named kGrad of an Apply* op is the gradient (the variable's dtype and shape).
constexpr const char* kGrad = "gradient";

// Shape function of an optimizer update: inputs named `inputs` in order, each a float scalar
// hyper-parameter except the gradient; outputs the variable's new value.
ShapeFn apply_shape_fn(std::vector<const char*> inputs) {
  return [inputs](InferenceContext& c) -> Status {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int idx = static_cast<int>(i);
      AF_RETURN_IF_ERROR(std::string(inputs[i]) == kGrad ? check_value(c, idx, kGrad) : scalar_float(c, idx, inputs[i]));
    }
    return write_shape_fn(c);
  };
}

Status random_shape_fn(InferenceContext& c) {
  AF_ASSIGN_OR_RETURN(Shape s, c.attrs().get<Shape>("shape"));
  if (!s.fully_defined()) return InvalidArgument("shape " + s.to_string() + " must be fully defined");
  c.set_output(0, c.attrs().get_or<DType>("dtype", DType::kFloat32), s);
  return Status::OK();
}

// ScatterAdd/ScatterUpdate(var, indices, updates): updates are indices.shape + var.shape[1:]
// of the variable's dtype; the output is the updated rows (updates' shape).
Status scatter_shape_fn(InferenceContext& c) {
  AF_ASSIGN_OR_RETURN(DType t, c.attrs().get<DType>("dtype"));
  AF_ASSIGN_OR_RETURN(Shape vs, c.attrs().get<Shape>("shape"));
  const std::string var = c.attrs().get_or<std::string>("var_name", "?");
  if (c.input_type(0) != DType::kInt32 && c.input_type(0) != DType::kInt64)
    return InvalidArgument("indices must be int32 or int64, got " + std::string(dtype_name(c.input_type(0))));
  if (c.input_type(1) != t)
    return InvalidArgument("updates are " + std::string(dtype_name(c.input_type(1))) + " but variable '" + var + "' is " +
                           dtype_name(t));
  if (!vs.unknown_rank() && vs.rank() < 1) return InvalidArgument("variable '" + var + "' is a scalar: no rows to scatter to");
  const Shape& ids = c.input_shape(0);
  if (!ids.unknown_rank() && !vs.unknown_rank()) {
    std::vector<int64_t> want = ids.dims();
    for (int i = 1; i < vs.rank(); ++i) want.push_back(vs.dim(i));
    if (!c.input_shape(1).compatible_with(Shape(want)))
      return InvalidArgument("updates " + c.input_shape(1).to_string() + " must be indices' shape + the rows' shape " +
                             Shape(want).to_string() + " of variable '" + var + "'");
  }
  c.set_output(0, t, c.input_shape(1));
  return Status::OK();
}

// SparseApply*(var; hyper-parameters..., indices, values): float scalars for the names in
// `scalars` (in order), then indices [n] int and values [n] + the variable's rows. Outputs the
// number of distinct rows updated (int64 scalar).
ShapeFn sparse_apply_shape_fn(std::vector<const char*> scalars, size_t ids_at) {
  return [scalars, ids_at](InferenceContext& c) -> Status {
    for (size_t i = 0; i < scalars.size(); ++i) {
      const int idx = static_cast<int>(i < ids_at ? i : i + 2);
      AF_RETURN_IF_ERROR(scalar_float(c, idx, scalars[i]));
    }
    AF_ASSIGN_OR_RETURN(DType t, c.attrs().get<DType>("dtype"));
    AF_ASSIGN_OR_RETURN(Shape vs, c.attrs().get<Shape>("shape"));
    const std::string var = c.attrs().get_or<std::string>("var_name", "?");
    const int ids = static_cast<int>(ids_at), vals = ids + 1;
    if (c.input_type(ids) != DType::kInt32 && c.input_type(ids) != DType::kInt64)
      return InvalidArgument("indices must be int32 or int64, got " + std::string(dtype_name(c.input_type(ids))));
    if (!c.input_shape(ids).unknown_rank() && c.input_shape(ids).rank() != 1)
      return InvalidArgument("indices must be a vector, got " + c.input_shape(ids).to_string());
    if (c.input_type(vals) != t)
      return InvalidArgument("the gradient's rows are " + std::string(dtype_name(c.input_type(vals))) + " but variable '" +
                             var + "' is " + dtype_name(t));
    if (!vs.unknown_rank()) {
      if (vs.rank() < 1) return InvalidArgument("variable '" + var + "' is a scalar: no rows to update");
      std::vector<int64_t> want{-1};
      for (int i = 1; i < vs.rank(); ++i) want.push_back(vs.dim(i));
      if (!c.input_shape(vals).compatible_with(Shape(want)))
        return InvalidArgument("the gradient's rows " + c.input_shape(vals).to_string() + " are not rows " +
                               Shape(want).to_string() + " of variable '" + var + "'");
    }
    c.set_output(0, DType::kInt64, Shape{});
    return Status::OK();
  };
}

}  // namespace

void register_variable_ops(OpRegistry& r) {
  r.add({"SparseApplyGradientDescent", 3, sparse_apply_shape_fn({"learning rate"}, 1), nullptr, true});
  r.add({"SparseApplyMomentum", 4, sparse_apply_shape_fn({"learning rate", "momentum"}, 1), nullptr, true});
  r.add({"SparseApplyAdam", 6, sparse_apply_shape_fn({"learning rate", "beta1", "beta2", "epsilon"}, 4), nullptr, true});
  r.add({"SparseApplyAdagrad", 3, sparse_apply_shape_fn({"learning rate"}, 1), nullptr, true});
  r.add({"ScatterAdd", 2, scatter_shape_fn, nullptr, true});
  r.add({"ScatterUpdate", 2, scatter_shape_fn, nullptr, true});
  r.add({"VariableV2", 0, var_shape_fn, nullptr, true, true});
  r.add({"Assign", 1, [](InferenceContext& c) -> Status {
           AF_RETURN_IF_ERROR(check_value(c, 0, "value"));
           return write_shape_fn(c);
         }, nullptr, true});
  r.add({"AssignAdd", 1, [](InferenceContext& c) -> Status {
           AF_RETURN_IF_ERROR(check_value(c, 0, "delta"));
           return write_shape_fn(c);
         }, nullptr, true});
  r.add({"IsVariableInitialized", 0, [](InferenceContext& c) -> Status {
           c.set_output(0, DType::kBool, Shape{});
           return Status::OK();
         }, nullptr, true, true});
  r.add({"ApplyGradientDescent", 2, apply_shape_fn({"learning rate", kGrad}), nullptr, true});
  r.add({"ApplyMomentum", 3, apply_shape_fn({"learning rate", kGrad, "momentum"}), nullptr, true});
  r.add({"ApplyAdam", 5, apply_shape_fn({"learning rate", "beta1", "beta2", "epsilon", kGrad}), nullptr, true});
  r.add({"ApplyAdagrad", 2, [](InferenceContext& c) -> Status {
           if (!(c.attrs().get_or<double>("initial_accumulator_value", 0.1) > 0))
             return InvalidArgument("initial_accumulator_value must be > 0");
           return apply_shape_fn({"learning rate", kGrad})(c);
         }, nullptr, true});
  r.add({"ApplyFtrl", 5, apply_shape_fn({"learning rate", "l1", "l2", "lr_power", kGrad}), nullptr, true});
  r.add({"SparseApplyFtrl", 6, sparse_apply_shape_fn({"learning rate", "l1", "l2", "lr_power"}, 4), nullptr, true});
  r.add({"SparseApplyRMSProp", 6, sparse_apply_shape_fn({"learning rate", "decay", "momentum", "epsilon"}, 4), nullptr,
         true});
  r.add({"ApplyRMSProp", 5, apply_shape_fn({"learning rate", "decay", "momentum", "epsilon", kGrad}), nullptr, true});
  r.add({"ApplyGradientSync", 2, [](InferenceContext& c) -> Status {
           if (c.attrs().get_or<std::string>("optimizer", "adam") != "increment")
             AF_RETURN_IF_ERROR(check_value(c, 0, "gradient"));
           if (c.input_type(1) != DType::kInt64) return InvalidArgument("local_step must be int64");
           if (!c.input_shape(1).unknown_rank() && c.input_shape(1).fully_defined() &&
               c.input_shape(1).num_elements() != 1)
             return InvalidArgument("local_step must be a scalar, got shape " + c.input_shape(1).to_string());
           c.set_output(0, DType::kInt64, Shape{});
           return Status::OK();
         }, nullptr, true});
  r.add({"SparseApplyGradientSync", 3, [](InferenceContext& c) -> Status {
           AF_RETURN_IF_ERROR(sparse_apply_shape_fn({}, 0)(c));
           if (c.input_type(2) != DType::kInt64) return InvalidArgument("local_step must be int64");
           if (!c.input_shape(2).unknown_rank() && c.input_shape(2).fully_defined() &&
               c.input_shape(2).num_elements() != 1)
             return InvalidArgument("local_step must be a scalar, got shape " + c.input_shape(2).to_string());
           c.set_output(0, DType::kInt64, Shape{});
           return Status::OK();
         }, nullptr, true});
  r.add({"SyncAccumulatorControl", 0, [](InferenceContext& c) -> Status {
           const std::string action = c.attrs().get_or<std::string>("action", "stats");
           if (action == "stats") c.set_output(0, DType::kInt64, Shape{7});
           else if (action == "leave" || action == "close") c.set_output(0, DType::kInt64, Shape{});
           else return InvalidArgument("unknown action '" + action + "' (leave, close, stats)");
           return Status::OK();
         }, nullptr, true});
  // A variable's optimizer slots as one uint8 blob (actors/variable_actor.h), and back.
  r.add({"VariableSlots", 0, [](InferenceContext& c) -> Status {
           c.set_output(0, DType::kUInt8, Shape{-1});
           return Status::OK();
         }, nullptr, true, true});
  r.add({"RestoreVariableSlots", 1, [](InferenceContext& c) -> Status {
           if (c.input_type(0) != DType::kUInt8) return InvalidArgument("slots must be uint8");
           c.set_output(0, DType::kUInt8, Shape{-1});
           return Status::OK();
         }, nullptr, true});
  r.add({"Fill", 0, random_shape_fn, nullptr, false, true});
  r.add({"RandomUniform", 0, random_shape_fn, nullptr, true, true});
  r.add({"TruncatedNormal", 0, random_shape_fn, nullptr, true, true});
}

namespace ops {

void set_partition_record(Node* n, const PartitionRecord& r) {
  n->attrs.set("_partition_of", r.logical);
  n->attrs.set("_partition_shape", r.full_shape);
  n->attrs.set("_partition_offset", r.offset);
}

bool partition_record(const Node& n, PartitionRecord* r) {
  const std::string of = n.attrs.get_or<std::string>("_partition_of", "");
  if (of.empty()) return false;
  r->logical = of;
  r->full_shape = n.attrs.get_or<Shape>("_partition_shape", Shape::unknown());
  r->offset = n.attrs.get_or<int64_t>("_partition_offset", 0);
  return true;
}

}  // namespace ops

namespace ops {
namespace {

// The variable behind `var` (a VariableV2 output), or null with a scope error.
Node* var_node(const Scope& s, const Input& var, const char* op) {
  if (!var.is_output() || !var.output().valid()) {
    s.update_status(InvalidArgument(std::string(op) + ": the variable input is not a valid Output"));
    return nullptr;
  }
  Node* n = var.output().node();
  if (n->op != "VariableV2") {
    s.update_status(InvalidArgument(std::string(op) + ": input '" + n->name + "' is a " + n->op +
                                    ", not a variable"));
    return nullptr;
  }
  return n;
}

// A builder for an op acting on variable `v`: placed on the variable's device (an explicit
// request rather than colocate_with, so the op's own constant inputs stay in the caller's scope).
NodeBuilder var_builder(const Scope& s, Node* v, const std::string& op) {
  NodeBuilder b(s, op);
  b.device(v->requested_device);
  b.attr("var_name", v->attrs.get_or<std::string>("shared_name", v->name));
  b.attr("dtype", v->output_types[0]);
  b.attr("shape", v->output_shapes[0]);
  return b;
}

}  // namespace

Output variable(const Scope& s, const Shape& shape, DType dtype, bool trainable) {
  Node* n = NodeBuilder(s, "VariableV2", "Variable")
                .attr("dtype", dtype)
                .attr("shape", shape)
                .attr("_trainable", trainable)
                .finalize();
  if (!n) return Output();
  n->attrs.set("shared_name", n->name);
  return Output(n, 0);
}

Output assign(const Scope& s, Input var, Input value) {
  Node* v = var_node(s, var, "Assign");
  if (!v) return Output();
  return var_builder(s, v, "Assign").input(value).output();
}

Output assign_add(const Scope& s, Input var, Input delta) {
  Node* v = var_node(s, var, "AssignAdd");
  if (!v) return Output();
  return var_builder(s, v, "AssignAdd").input(delta).output();
}

Output scatter_add(const Scope& s, Input var, Input indices, Input updates) {
  Node* v = var_node(s, var, "ScatterAdd");
  if (!v) return Output();
  return var_builder(s, v, "ScatterAdd").input(indices).input(updates).output();
}

Output scatter_update(const Scope& s, Input var, Input indices, Input updates) {
  Node* v = var_node(s, var, "ScatterUpdate");
  if (!v) return Output();
  return var_builder(s, v, "ScatterUpdate").input(indices).input(updates).output();
}

Output is_variable_initialized(const Scope& s, Input var) {
  Node* v = var_node(s, var, "IsVariableInitialized");
  if (!v) return Output();
  return var_builder(s, v, "IsVariableInitialized").output();
}

Output apply_gradient_descent(const Scope& s, Input var, Input lr, Input grad) {
  Node* v = var_node(s, var, "ApplyGradientDescent");
  if (!v) return Output();
  return var_builder(s, v, "ApplyGradientDescent").input(lr).input(grad).output();
}

Output apply_momentum(const Scope& s, Input var, Input lr, Input grad, Input momentum) {
  Node* v = var_node(s, var, "ApplyMomentum");
  if (!v) return Output();
  return var_builder(s, v, "ApplyMomentum").input(lr).input(grad).input(momentum).output();
}

Output apply_adam(const Scope& s, Input var, Input lr, Input beta1, Input beta2, Input epsilon, Input grad) {
  Node* v = var_node(s, var, "ApplyAdam");
  if (!v) return Output();
  return var_builder(s, v, "ApplyAdam").input(lr).input(beta1).input(beta2).input(epsilon).input(grad).output();
}

Output apply_adagrad(const Scope& s, Input var, Input lr, Input grad, float initial_accumulator_value) {
  Node* v = var_node(s, var, "ApplyAdagrad");
  if (!v) return Output();
  return var_builder(s, v, "ApplyAdagrad")
      .input(lr)
      .input(grad)
      .attr("initial_accumulator_value", static_cast<double>(initial_accumulator_value))
      .output();
}

Output apply_rms_prop(const Scope& s, Input var, Input lr, Input decay, Input momentum, Input epsilon, Input grad) {
  Node* v = var_node(s, var, "ApplyRMSProp");
  if (!v) return Output();
  return var_builder(s, v, "ApplyRMSProp").input(lr).input(decay).input(momentum).input(epsilon).input(grad).output();
}

Output apply_ftrl(const Scope& s, Input var, Input lr, Input l1, Input l2, Input lr_power, Input grad,
                  float initial_accumulator_value, float l2_shrinkage) {
  Node* v = var_node(s, var, "ApplyFtrl");
  if (!v) return Output();
  return var_builder(s, v, "ApplyFtrl")
      .input(lr)
      .input(l1)
      .input(l2)
      .input(lr_power)
      .input(grad)
      .attr("initial_accumulator_value", static_cast<double>(initial_accumulator_value))
      .attr("l2_shrinkage", static_cast<double>(l2_shrinkage))
      .output();
}

Output sparse_apply_ftrl(const Scope& s, Input var, Input lr, Input l1, Input l2, Input lr_power, Input indices,
                         Input values, float initial_accumulator_value, float l2_shrinkage) {
  Node* v = var_node(s, var, "SparseApplyFtrl");
  if (!v) return Output();
  return var_builder(s, v, "SparseApplyFtrl")
      .input(lr)
      .input(l1)
      .input(l2)
      .input(lr_power)
      .input(indices)
      .input(values)
      .attr("initial_accumulator_value", static_cast<double>(initial_accumulator_value))
      .attr("l2_shrinkage", static_cast<double>(l2_shrinkage))
      .output();
}

Output sparse_apply_rms_prop(const Scope& s, Input var, Input lr, Input decay, Input momentum, Input epsilon,
                             Input indices, Input values) {
  Node* v = var_node(s, var, "SparseApplyRMSProp");
  if (!v) return Output();
  return var_builder(s, v, "SparseApplyRMSProp")
      .input(lr)
      .input(decay)
      .input(momentum)
      .input(epsilon)
      .input(indices)
      .input(values)
      .output();
}

Output sparse_apply_gradient_descent(const Scope& s, Input var, Input lr, Input indices, Input values) {
  Node* v = var_node(s, var, "SparseApplyGradientDescent");
  if (!v) return Output();
  return var_builder(s, v, "SparseApplyGradientDescent").input(lr).input(indices).input(values).output();
}

Output sparse_apply_momentum(const Scope& s, Input var, Input lr, Input indices, Input values, Input momentum) {
  Node* v = var_node(s, var, "SparseApplyMomentum");
  if (!v) return Output();
  return var_builder(s, v, "SparseApplyMomentum").input(lr).input(indices).input(values).input(momentum).output();
}

Output sparse_apply_adam(const Scope& s, Input var, Input lr, Input beta1, Input beta2, Input epsilon, Input indices,
                         Input values) {
  Node* v = var_node(s, var, "SparseApplyAdam");
  if (!v) return Output();
  return var_builder(s, v, "SparseApplyAdam")
      .input(lr)
      .input(beta1)
      .input(beta2)
      .input(epsilon)
      .input(indices)
      .input(values)
      .output();
}

Output sparse_apply_adagrad(const Scope& s, Input var, Input lr, Input indices, Input values,
                            float initial_accumulator_value) {
  Node* v = var_node(s, var, "SparseApplyAdagrad");
  if (!v) return Output();
  return var_builder(s, v, "SparseApplyAdagrad")
      .input(lr)
      .input(indices)
      .input(values)
      .attr("initial_accumulator_value", static_cast<double>(initial_accumulator_value))
      .output();
}

namespace {

// The node of a synchronous update of `op` ("ApplyGradientSync" or "SparseApplyGradientSync")
// with o's attributes, after checking them; nullptr (error in s) when they are bad. `sparse`
// refuses the optimizers without a sparse form.
Node* sync_update_node(const Scope& s, Input var, const std::vector<Input>& inputs, const SyncOptions& o,
                       const std::string& op, bool sparse) {
  Node* v = var_node(s, var, op.c_str());
  if (!v) return nullptr;
  const int replicas = o.replicas_to_aggregate, total = o.total_num_replicas;
  if (replicas < 1 || total < replicas) {
    s.update_status(InvalidArgument(op + " for variable '" + v->name + "': need 1 <= replicas_to_aggregate (" +
                                    std::to_string(replicas) + ") <= total_num_replicas (" + std::to_string(total) + ")"));
    return nullptr;
  }
  const bool known = o.optimizer == "sgd" || o.optimizer == "momentum" || o.optimizer == "adam" ||
                     o.optimizer == "adagrad" || (!sparse && (o.optimizer == "rmsprop" || o.optimizer == "increment"));
  if (!known) {
    s.update_status(InvalidArgument(op + " for variable '" + v->name + "': unknown optimizer '" + o.optimizer + "' (" +
                                    (sparse ? "sgd, momentum, adam, adagrad" : "sgd, momentum, adam, adagrad, rmsprop, increment") +
                                    ")"));
    return nullptr;
  }
  if (!(o.timeout_secs > 0)) {
    s.update_status(InvalidArgument(op + " for variable '" + v->name + "': timeout_secs must be > 0"));
    return nullptr;
  }
  if (!(o.deadline_secs >= 0 && o.deadline_secs < o.timeout_secs)) {
    s.update_status(InvalidArgument(op + " for variable '" + v->name + "': deadline_secs (" +
                                    std::to_string(o.deadline_secs) + ") must be 0 (none) or in (0, timeout_secs = " +
                                    std::to_string(o.timeout_secs) + ")"));
    return nullptr;
  }
  NodeBuilder b = var_builder(s, v, op);
  for (const auto& in : inputs) b.input(in);
  Output out = b.attr("optimizer", o.optimizer)
                   .attr("lr", static_cast<double>(o.lr))
                   .attr("momentum", static_cast<double>(o.momentum))
                   .attr("beta1", static_cast<double>(o.beta1))
                   .attr("beta2", static_cast<double>(o.beta2))
                   .attr("epsilon", static_cast<double>(o.epsilon))
                   .attr("decay", static_cast<double>(o.decay))
                   .attr("initial_accumulator_value", static_cast<double>(o.initial_accumulator_value))
                   .attr("replicas_to_aggregate", static_cast<int64_t>(replicas))
                   .attr("total_num_replicas", static_cast<int64_t>(total))
                   .attr("sync_timeout_secs", o.timeout_secs)
                   .attr("sync_deadline_secs", o.deadline_secs)
                   .attr("wait", o.wait)
                   .output();
  return out.valid() ? out.node() : nullptr;
}

}  // namespace

Output apply_gradient_sync(const Scope& s, Input var, Input grad, Input local_step, const SyncOptions& o) {
  Node* n = sync_update_node(s, var, {grad, local_step}, o, "ApplyGradientSync", false);
  return n ? Output(n, 0) : Output();
}

Output sparse_apply_gradient_sync(const Scope& s, Input var, Input indices, Input values, Input local_step,
                                  const SyncOptions& o) {
  Node* n = sync_update_node(s, var, {indices, values, local_step}, o, "SparseApplyGradientSync", true);
  return n ? Output(n, 0) : Output();
}

Output variable_slots(const Scope& s, Input var) {
  Node* v = var_node(s, var, "VariableSlots");
  if (!v) return Output();
  return var_builder(s, v, "VariableSlots").output();
}

Output restore_variable_slots(const Scope& s, Input var, Input slots) {
  Node* v = var_node(s, var, "RestoreVariableSlots");
  if (!v) return Output();
  return var_builder(s, v, "RestoreVariableSlots").input(slots).output();
}

Output sync_accumulator_control(const Scope& s, Input var, const std::string& action, int replicas_to_aggregate,
                                int total_num_replicas) {
  Node* v = var_node(s, var, "SyncAccumulatorControl");
  if (!v) return Output();
  if (action != "leave" && action != "close" && action != "stats") {
    s.update_status(InvalidArgument("SyncAccumulatorControl for variable '" + v->name + "': unknown action '" +
                                    action + "' (leave, close, stats)"));
    return Output();
  }
  return var_builder(s, v, "SyncAccumulatorControl")
      .attr("action", action)
      .attr("replicas_to_aggregate", static_cast<int64_t>(replicas_to_aggregate))
      .attr("total_num_replicas", static_cast<int64_t>(total_num_replicas))
      .output();
}

namespace {
SyncOptions sync_options(const std::string& optimizer, float lr, int replicas, int total) {
  SyncOptions o;
  o.optimizer = optimizer;
  o.lr = lr;
  o.replicas_to_aggregate = replicas;
  o.total_num_replicas = total;
  return o;
}
}  // namespace

Output apply_adam_sync(const Scope& s, Input var, Input grad, Input local_step, float lr, int replicas, int total) {
  return apply_gradient_sync(s, var, grad, local_step, sync_options("adam", lr, replicas, total));
}

Output increment_sync(const Scope& s, Input var, Input local_step, int replicas, int total) {
  return apply_gradient_sync(s, var, Tensor::scalar<int64_t>(1), local_step,
                             sync_options("increment", 0.f, replicas, total));
}

Output apply_sgd_sync(const Scope& s, Input var, Input grad, Input local_step, float lr, int replicas, int total) {
  return apply_gradient_sync(s, var, grad, local_step, sync_options("sgd", lr, replicas, total));
}

Output global_step(const Scope& s) {
  Output gs = variable(s.with_op_name("global_step"), Shape{}, DType::kInt64, /*trainable=*/false);
  if (gs.valid()) gs.node()->attrs.set("_global_step", true);  // found by train::get_global_step
  return gs;
}

Output zeros(const Scope& s, const Shape& shape, DType dtype) {
  return NodeBuilder(s, "Fill").attr("shape", shape).attr("dtype", dtype).attr("value", 0.0).output();
}

Output fill(const Scope& s, const Shape& shape, float value, DType dtype) {
  return NodeBuilder(s, "Fill")
      .attr("shape", shape)
      .attr("dtype", dtype)
      .attr("value", static_cast<double>(value))
      .output();
}

Output random_uniform(const Scope& s, const Shape& shape, float minval, float maxval, uint64_t seed,
                      uint64_t seed2) {
  return NodeBuilder(s, "RandomUniform")
      .attr("shape", shape)
      .attr("minval", static_cast<double>(minval))
      .attr("maxval", static_cast<double>(maxval))
      .attr("seed", static_cast<int64_t>(seed))
      .attr("seed2", static_cast<int64_t>(seed2))
      .output();
}

Output truncated_normal(const Scope& s, const Shape& shape, float mean, float stddev, uint64_t seed,
                        uint64_t seed2) {
  return NodeBuilder(s, "TruncatedNormal")
      .attr("shape", shape)
      .attr("mean", static_cast<double>(mean))
      .attr("stddev", static_cast<double>(stddev))
      .attr("seed", static_cast<int64_t>(seed))
      .attr("seed2", static_cast<int64_t>(seed2))
      .output();
}

float glorot_limit(const Shape& shape) {
  double fan_in = 1, fan_out = 1;
  if (shape.rank() == 2) {
    fan_in = static_cast<double>(shape.dim(0));
    fan_out = static_cast<double>(shape.dim(1));
  } else if (shape.rank() >= 3) {
    double receptive = 1;
    for (int i = 0; i < shape.rank() - 2; ++i) receptive *= static_cast<double>(shape.dim(i));
    fan_in = receptive * static_cast<double>(shape.dim(shape.rank() - 2));
    fan_out = receptive * static_cast<double>(shape.dim(shape.rank() - 1));
  } else if (shape.rank() == 1) {
    fan_in = fan_out = static_cast<double>(shape.dim(0));
  }
  return static_cast<float>(std::sqrt(6.0 / (fan_in + fan_out)));
}

Output glorot_uniform(const Scope& s, const Shape& shape, uint64_t seed, uint64_t seed2) {
  const float limit = glorot_limit(shape);
  return random_uniform(s, shape, -limit, limit, seed, seed2);
}

}  // namespace ops
}  // namespace actorflow
