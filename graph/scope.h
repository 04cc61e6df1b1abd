// Scope, Output, Input and NodeBuilder: the graph-construction API, shaped like
// TensorFlow's C++ client API (tensorflow/cc/framework/scope.h, ops.h).
//
// A Scope is a cheap, copyable handle on a shared Graph plus construction context: device,
// name prefix, control dependencies, colocation. Scopes derived from one root share the
// graph and the error status: the first construction error is kept and every later
// builder call on any derived scope is a no-op returning an invalid Output. Check
// `scope.ok()` / `scope.status()` (Session::run also reports it). Not thread-safe: build a
// graph from one thread.
#pragma once

#include <initializer_list>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/op_registry.h"

namespace actorflow {

// A handle on output `index` of a node in a graph. Invalid (node()==nullptr) after a failed build.
class Output {
 public:
  Output() = default;
  Output(Node* node, int index = 0) : node_(node), index_(index) {}  // NOLINT

  bool valid() const { return node_ != nullptr; }
  Node* node() const { return node_; }
  int index() const { return index_; }
  // Precondition for the following: valid().
  DType dtype() const { return node_->output_types[static_cast<size_t>(index_)]; }
  const Shape& shape() const { return node_->output_shapes[static_cast<size_t>(index_)]; }
  // "name" for output 0, "name:i" otherwise (the name to fetch or feed it by).
  std::string name() const;
  Endpoint endpoint() const { return Endpoint{node_ ? node_->id : -1, index_}; }

 private:
  Node* node_ = nullptr;
  int index_ = 0;
};

// What a builder function accepts: an Output, or a value that becomes a Const node in the
// builder's scope (scalar, 1-D list or Tensor), as in TensorFlow's `Input`.
class Input {
 public:
  Input(const Output& o) : output_(o), is_output_(true) {}  // NOLINT
  Input(Node* n) : output_(n, 0), is_output_(true) {}       // NOLINT
  Input(float v) : tensor_(Tensor::scalar<float>(v)) {}    // NOLINT
  Input(double v) : tensor_(Tensor::scalar<float>(static_cast<float>(v))) {}  // NOLINT: TF default float
  Input(int32_t v) : tensor_(Tensor::scalar<int32_t>(v)) {}  // NOLINT
  Input(int64_t v) : tensor_(Tensor::scalar<int64_t>(v)) {}  // NOLINT
  Input(bool v) : tensor_(Tensor::scalar<bool>(v)) {}        // NOLINT
  Input(std::initializer_list<float> v)                      // NOLINT
      : tensor_(Tensor::from_vector<float>(std::vector<float>(v), Shape{static_cast<int64_t>(v.size())})) {}
  Input(std::initializer_list<int32_t> v)                    // NOLINT
      : tensor_(Tensor::from_vector<int32_t>(std::vector<int32_t>(v), Shape{static_cast<int64_t>(v.size())})) {}
  Input(const Tensor& t) : tensor_(t) {}                     // NOLINT

  bool is_output() const { return is_output_; }
  const Output& output() const { return output_; }
  const Tensor& tensor() const { return tensor_; }

 private:
  Output output_;
  Tensor tensor_;
  bool is_output_ = false;
};

// Chooses the device a new node requests, as TensorFlow's `with tf.device(function)`: called
// with the graph and the node about to be added (its op, name, inputs and attributes set),
// returns a device spec ("" = none).
using DeviceFunction = std::function<std::string(const Graph& graph, const Node& node)>;

class Scope {
 public:
  // A root scope on a new, empty graph.
  static Scope root();

  // A copy whose ops request `device` (any DeviceSpec form, e.g. "/job:worker/task:1",
  // "/gpu:0"). Replaces the enclosing device, as tf.device does for a full spec; a partial
  // spec is merged over the enclosing one (TensorFlow's nesting rule).
  Scope with_device(const std::string& device) const;
  // A copy whose new ops request what `fn` returns for them (e.g.
  // ReplicaDeviceSetter::device_function(): variables on the ps tasks, the rest on the worker).
  // It replaces the enclosing device and device function; a with_device inside it merges its
  // set fields over fn's answer; colocate_with sets both aside. A null fn removes the function.
  Scope with_device_function(DeviceFunction fn) const;
  const DeviceFunction* device_function() const { return device_fn_.get(); }
  // A copy whose next op gets exactly `name` under the current prefix (made unique with
  // "_1", "_2" if taken).
  Scope with_op_name(const std::string& name) const;
  // A copy that prefixes op names with "name/" (the sub-scope name itself is made unique).
  Scope new_sub_scope(const std::string& name) const;
  // A copy whose ops also depend on `deps` (control edges).
  Scope with_control_dependencies(const std::vector<Output>& deps) const;
  // A copy with no control dependencies.
  Scope with_no_control_dependencies() const;
  // A copy whose ops must be placed on the same device as `o`'s node. As in TensorFlow, the
  // scope's device request is set aside (a worker scope colocating with a ps variable does not
  // request a second device); with_device after it requests one again.
  Scope colocate_with(const Output& o) const;

  bool ok() const { return status_->ok(); }
  Status status() const { return *status_; }
  // Records `s` if no error was recorded before. Safe on any copy.
  void update_status(const Status& s) const;

  Graph* graph() const { return graph_.get(); }
  std::shared_ptr<Graph> graph_ptr() const { return graph_; }
  const std::string& device() const { return device_; }
  const std::string& name_prefix() const { return prefix_; }
  const std::vector<int>& control_deps() const { return control_deps_; }
  const std::vector<std::string>& colocation() const { return colocate_; }

  // The unique node name the next op of type `default_name` gets in this scope.
  std::string unique_name(const std::string& default_name) const;
  // Returns in.output() or a new Const node for in.tensor() in this scope.
  Output as_output(const Input& in) const;

 private:
  Scope() = default;
  std::shared_ptr<Graph> graph_;
  std::shared_ptr<Status> status_;
  std::string device_;
  std::shared_ptr<const DeviceFunction> device_fn_;  // null: none
  std::string prefix_;
  std::string op_name_;
  std::vector<int> control_deps_;
  std::vector<std::string> colocate_;
};

// Adds one node to a scope's graph. Used by every ops:: builder:
//   Node* n = NodeBuilder(scope, "MatMul").input(a).input(b).attr("transpose_a", false).finalize();
// finalize() checks the op exists, all inputs are valid outputs of the same graph, applies
// the scope's device, control deps and colocation, and runs the shape function. On any
// error it records "<Op> '<name>': <message>" in the scope and returns nullptr.
class NodeBuilder {
 public:
  NodeBuilder(const Scope& scope, const std::string& op_type, const std::string& default_name = "");
  NodeBuilder& input(const Input& in);
  NodeBuilder& inputs(const std::vector<Output>& ins);
  NodeBuilder& attr(const std::string& name, AttrValue value);
  NodeBuilder& control_input(const Output& dep);
  // Overrides the scope's device for this node.
  NodeBuilder& device(const std::string& device);
  Node* finalize();
  // finalize() and return output i (invalid Output on error).
  Output output(int i = 0) { Node* n = finalize(); return n ? Output(n, i) : Output(); }

 private:
  Scope scope_;
  std::string op_;
  std::string name_;
  std::vector<Output> inputs_;
  std::vector<int> control_;
  std::string device_;
  bool device_set_ = false;
  AttrMap attrs_;
  bool bad_input_ = false;
  bool finalized_ = false;
  Node* result_ = nullptr;
};

// Runs the registered shape function of `node` given the graph (inputs must already exist
// in `graph`) and stores output types/shapes in the node. Used by NodeBuilder and by
// deserialisation. Errors are prefixed "<Op> '<name>': ".
Status infer_node_shapes(const Graph& graph, Node& node);

// Runs infer_node_shapes on every node of `graph` in topological order, replacing the output
// types and shapes the nodes declared: a graph that came from a peer (a client's GraphDef) then
// holds only what the shape functions computed, and every shape function has validated its
// node. InvalidArgument naming the first op whose shape function refuses it (or the cycle).
Status infer_graph_shapes(Graph& graph);

// The Output feeding input `i` of `n`, and output `i` of `n`, in `s`'s graph (gradient functions
// and optimizers read nodes this way). Preconditions: `n` is a node of that graph, i in range.
Output input_of(const Scope& s, const Node& n, int i);
Output output_of(const Scope& s, const Node& n, int i = 0);

}  // namespace actorflow
