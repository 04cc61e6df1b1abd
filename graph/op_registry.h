// The op registry: for each op type its shape function (run when a node is added, so
// bad graphs fail at construction) and its gradient function (used by gradients()).
//
// The global registry is filled once, on first use, by register_all_ops(); after that it
// is read-only and safe to use from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "graph/graph.h"

namespace actorflow {

class Scope;
class Output;

// What a shape function sees: the node (attrs), its input dtypes and shapes, and the values of
// inputs that are constants (so Reshape can read its target shape). Single-threaded use.
class InferenceContext {
 public:
  InferenceContext(const Node& node, std::vector<DType> input_types, std::vector<Shape> input_shapes,
                   std::vector<const Tensor*> input_values)
      : node_(node), in_types_(std::move(input_types)), in_shapes_(std::move(input_shapes)),
        in_values_(std::move(input_values)) {}

  const Node& node() const { return node_; }
  const AttrMap& attrs() const { return node_.attrs; }
  int num_inputs() const { return static_cast<int>(in_types_.size()); }
  DType input_type(int i) const { return in_types_[static_cast<size_t>(i)]; }
  const Shape& input_shape(int i) const { return in_shapes_[static_cast<size_t>(i)]; }
  // Non-null when input i is produced by a Const node; the tensor is owned by the graph.
  const Tensor* input_value(int i) const { return in_values_[static_cast<size_t>(i)]; }

  // Declares output i (outputs are added in order; i may equal the current count).
  void set_output(int i, DType type, Shape shape) {
    if (static_cast<size_t>(i) >= out_types.size()) {
      out_types.resize(static_cast<size_t>(i) + 1, DType::kInvalid);
      out_shapes.resize(static_cast<size_t>(i) + 1);
    }
    out_types[static_cast<size_t>(i)] = type;
    out_shapes[static_cast<size_t>(i)] = std::move(shape);
  }

  std::vector<DType> out_types;
  std::vector<Shape> out_shapes;

 private:
  const Node& node_;
  std::vector<DType> in_types_;
  std::vector<Shape> in_shapes_;
  std::vector<const Tensor*> in_values_;
};

// Computes output dtypes/shapes or returns an error describing the problem (without the op
// name: the caller prefixes "<Op> '<name>': ").
using ShapeFn = std::function<Status(InferenceContext&)>;

// Adds the gradient ops of `op` to `scope`. grad_outputs[i] is dL/d(output i) (may be an
// invalid Output when that output does not reach the loss). Fills grad_inputs (one per data
// input; invalid Output for inputs with no gradient).
using GradFn = std::function<Status(const Scope& scope, const Node& op, const std::vector<Output>& grad_outputs,
                                    std::vector<Output>* grad_inputs)>;

// Registered as {name, num_inputs, shape_fn[, grad, ...]}: every member after the first three has a
// default member initializer, so an omitted one is empty/false.
struct OpDef {
  std::string name;
  int num_inputs = -1;   // exact data input count, or -1 for variadic (the shape fn checks)
  ShapeFn shape_fn;
  GradFn grad{};         // empty = not differentiable
  bool stateful = false; // never constant-folded or deduplicated (Variable, Placeholder, random ops)
  bool is_source = false;  // no inputs, e.g. Const
  // Reads or writes files of the machine it runs on (TensorFlow's Save, Restore, ReadFile, ...):
  // a remote client's graph may not hold it (ClientSessions::run; docs/security.md "Roles").
  // SaveV2 and RestoreV2 (graph/ops_io.cc, what an imported TensorFlow graph's Saver runs) do;
  // actorflow's own Saver writes and reads in the process that calls it (train/session/saver.cc),
  // moving variables as tensors (VariableSlots, RestoreVariableSlots). An op that touches files
  // must set this.
  bool touches_files = false;
};

// The definition of an op with a shape function and nothing else: no gradient (gradients are
// set apart, OpRegistry::set_grad), not stateful, not a source. Returns it by value; pure.
inline OpDef op_def(std::string name, int num_inputs, ShapeFn fn) {
  OpDef d;
  d.name = std::move(name);
  d.num_inputs = num_inputs;
  d.shape_fn = std::move(fn);
  return d;
}

class OpRegistry {
 public:
  // The process-wide registry with every built-in op. Thread-safe after the first call.
  static OpRegistry& global();

  // Adds or replaces an op definition. Not thread-safe: call during start-up only.
  void add(OpDef def);
  // Sets the gradient of an already registered op (gradients live apart from op definitions).
  Status set_grad(const std::string& op, GradFn grad);
  // The definition of `op`, or NotFound listing nothing but the name.
  Result<const OpDef*> lookup(const std::string& op) const;
  std::vector<std::string> op_names() const;

 private:
  std::map<std::string, OpDef> ops_;
};

// Registration hooks, one per op family; register_all_ops calls each. Defined in the
// graph/ops_*.cc files.
void register_core_ops(OpRegistry& r);       // Const, Placeholder, Identity, NoOp, _Arg, _Retval, _Send, _Recv
void register_math_ops(OpRegistry& r);       // elementwise math, Cast, Select, Sum/Mean/Max, ArgMax
void register_array_ops(OpRegistry& r);      // Reshape, Shape, ZerosLike, OnesLike, Transpose, SumToShape, OneHot
void register_nn_ops(OpRegistry& r);         // MatMul, Conv2D, MaxPool, Relu, BiasAdd, Softmax, Xent + backward ops
void register_variable_ops(OpRegistry& r);   // graph/ops_variables.cc
void register_indexing_ops(OpRegistry& r);   // Gather, UnsortedSegmentSum, Concat, Slice, Sigmoid, Tanh, L2Loss (+ gradients)
void register_io_ops(OpRegistry& r);         // SaveV2, RestoreV2 (graph/ops_io.cc; they touch files)
void register_gradients(OpRegistry& r);      // graph/grads.cc
void register_all_ops(OpRegistry& r);

}  // namespace actorflow
