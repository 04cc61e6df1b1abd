#include "graph/scope.h"

#include "graph/device_spec.h"
#include "graph/shape_util.h"

namespace actorflow {

Output input_of(const Scope& s, const Node& n, int i) {
  const Endpoint& e = n.inputs[static_cast<size_t>(i)];
  return Output(s.graph()->node(e.node), e.index);
}

Output output_of(const Scope& s, const Node& n, int i) { return Output(s.graph()->node(n.id), i); }

std::string Output::name() const {
  if (!node_) return "<invalid>";
  return index_ == 0 ? node_->name : node_->name + ":" + std::to_string(index_);
}

Scope Scope::root() {
  Scope s;
  s.graph_ = std::make_shared<Graph>();
  s.status_ = std::make_shared<Status>();
  return s;
}

Scope Scope::with_device(const std::string& device) const {
  Scope s = *this;
  if (device_.empty() || device.empty()) {
    s.device_ = device;
    return s;
  }
  // Nesting: the inner spec's set fields override the outer's.
  auto outer = DeviceSpec::parse(device_);
  auto inner = DeviceSpec::parse(device);
  if (outer.ok() && inner.ok()) {
    DeviceSpec merged = *outer;
    merged.merge_from(*inner);
    s.device_ = merged.to_string();
  } else {
    s.device_ = device;  // the placer reports the malformed spec with the op name
  }
  return s;
}

Scope Scope::with_op_name(const std::string& name) const {
  Scope s = *this;
  s.op_name_ = name;
  return s;
}

Scope Scope::new_sub_scope(const std::string& name) const {
  Scope s = *this;
  s.op_name_.clear();
  if (name.empty()) return s;
  std::string full = graph_->unique_name(prefix_ + name);
  s.prefix_ = full + "/";
  return s;
}

Scope Scope::with_control_dependencies(const std::vector<Output>& deps) const {
  Scope s = *this;
  for (const auto& d : deps) {
    if (!d.valid()) {
      update_status(InvalidArgument("with_control_dependencies: invalid Output (an earlier op failed)"));
      continue;
    }
    s.control_deps_.push_back(d.node()->id);
  }
  return s;
}

Scope Scope::with_no_control_dependencies() const {
  Scope s = *this;
  s.control_deps_.clear();
  return s;
}

Scope Scope::colocate_with(const Output& o) const {
  Scope s = *this;
  if (o.valid()) {
    s.colocate_.push_back(o.node()->name);
    s.device_.clear();
    s.device_fn_.reset();
  }
  return s;
}

Scope Scope::with_device_function(DeviceFunction fn) const {
  Scope s = *this;
  s.device_.clear();
  s.device_fn_ = fn ? std::make_shared<const DeviceFunction>(std::move(fn)) : nullptr;
  return s;
}

void Scope::update_status(const Status& st) const {
  if (status_->ok() && !st.ok()) *status_ = st;
}

std::string Scope::unique_name(const std::string& default_name) const {
  const std::string& base = op_name_.empty() ? default_name : op_name_;
  return graph_->unique_name(prefix_ + base);
}

Output Scope::as_output(const Input& in) const {
  if (in.is_output()) return in.output();
  const Tensor& t = in.tensor();
  return NodeBuilder(with_op_name(""), "Const", "Const")
      .attr("value", t)
      .attr("dtype", t.dtype())
      .output();
}

NodeBuilder::NodeBuilder(const Scope& scope, const std::string& op_type, const std::string& default_name)
    : scope_(scope), op_(op_type), name_(default_name.empty() ? op_type : default_name) {}

NodeBuilder& NodeBuilder::input(const Input& in) {
  Output o = scope_.with_op_name("").as_output(in);
  if (!o.valid()) bad_input_ = true;
  inputs_.push_back(o);
  return *this;
}

NodeBuilder& NodeBuilder::inputs(const std::vector<Output>& ins) {
  for (const auto& o : ins) {
    if (!o.valid()) bad_input_ = true;
    inputs_.push_back(o);
  }
  return *this;
}

NodeBuilder& NodeBuilder::attr(const std::string& name, AttrValue value) {
  attrs_.set(name, std::move(value));
  return *this;
}

NodeBuilder& NodeBuilder::control_input(const Output& dep) {
  if (!dep.valid()) bad_input_ = true;
  else control_.push_back(dep.node()->id);
  return *this;
}

NodeBuilder& NodeBuilder::device(const std::string& device) {
  device_ = device;
  device_set_ = true;
  return *this;
}

Status infer_node_shapes(const Graph& graph, Node& node) {
  const std::string where = node.op + " '" + node.name + "'";
  auto def = OpRegistry::global().lookup(node.op);
  if (!def.ok()) return def.status().with_prefix(where);
  if ((*def)->num_inputs >= 0 && static_cast<int>(node.inputs.size()) != (*def)->num_inputs)
    return InvalidArgument(where + ": expects " + std::to_string((*def)->num_inputs) + " inputs, got " +
                           std::to_string(node.inputs.size()));
  std::vector<DType> types;
  std::vector<Shape> shapes;
  std::vector<const Tensor*> values;
  for (const auto& e : node.inputs) {
    if (e.node < 0 || e.node >= graph.num_nodes())
      return InvalidArgument(where + ": input refers to a node outside the graph");
    const Node* in = graph.node(e.node);
    if (e.index >= in->num_outputs())
      return InvalidArgument(where + ": input " + in->name + ":" + std::to_string(e.index) + " does not exist");
    types.push_back(in->output_types[static_cast<size_t>(e.index)]);
    shapes.push_back(in->output_shapes[static_cast<size_t>(e.index)]);
    const Tensor* v = nullptr;
    if (in->op == "Const") {
      auto it = in->attrs.all().find("value");
      if (it != in->attrs.all().end()) v = std::get_if<Tensor>(&it->second);
    }
    values.push_back(v);
  }
  InferenceContext ctx(node, std::move(types), std::move(shapes), std::move(values));
  if ((*def)->shape_fn) {
    Status s = (*def)->shape_fn(ctx);
    // A node its shape function refuses is an invalid argument, whatever the function's own
    // code (a missing attribute comes back NotFound from AttrMap::get).
    if (!s.ok() && s.code() != Code::kInvalidArgument && s.code() != Code::kUnimplemented)
      s = InvalidArgument(s.message());
    if (!s.ok()) return s.with_prefix(where);
  }
  // What any shape function declares must be able to describe a tensor (no wrapped or
  // unallocatable element counts travel on to consumers and kernels).
  for (size_t i = 0; i < ctx.out_shapes.size(); ++i) {
    Status s = check_static_shape(ctx.out_shapes[i]);
    if (!s.ok()) return InvalidArgument(where + ": output " + std::to_string(i) + ": " + s.message());
  }
  node.output_types = std::move(ctx.out_types);
  node.output_shapes = std::move(ctx.out_shapes);
  return Status::OK();
}

Status infer_graph_shapes(Graph& graph) {
  AF_ASSIGN_OR_RETURN(std::vector<int> order, graph.topological_order());
  for (int id : order) AF_RETURN_IF_ERROR(infer_node_shapes(graph, *graph.node(id)));
  return Status::OK();
}

Node* NodeBuilder::finalize() {
  if (finalized_) return result_;
  finalized_ = true;
  if (!scope_.ok()) return nullptr;
  Graph* g = scope_.graph();
  Node node;
  node.op = op_;
  node.name = scope_.unique_name(name_);
  const std::string where = op_ + " '" + node.name + "'";
  if (bad_input_) {
    scope_.update_status(InvalidArgument(where + ": an input is invalid (an earlier op failed to build)"));
    return nullptr;
  }
  for (const auto& o : inputs_) {
    if (o.node()->id >= g->num_nodes() || g->node(o.node()->id) != o.node()) {
      scope_.update_status(InvalidArgument(where + ": input '" + o.name() + "' belongs to another graph"));
      return nullptr;
    }
    node.inputs.push_back(o.endpoint());
  }
  node.control_inputs = scope_.control_deps();
  node.control_inputs.insert(node.control_inputs.end(), control_.begin(), control_.end());
  node.requested_device = device_set_ ? device_ : scope_.device();
  node.colocate_with = scope_.colocation();
  node.attrs = attrs_;
  if (!device_set_ && scope_.device_function()) {
    // The function's answer, with the fields a with_device inside it set merged over it.
    std::string chosen = (*scope_.device_function())(*g, node);
    if (!node.requested_device.empty() && !chosen.empty()) {
      auto outer = DeviceSpec::parse(chosen);
      auto inner = DeviceSpec::parse(node.requested_device);
      if (outer.ok() && inner.ok()) {
        outer->merge_from(*inner);
        chosen = outer->to_string();
      } else {
        chosen = node.requested_device;  // the placer reports the malformed spec with the op name
      }
    } else if (chosen.empty()) {
      chosen = node.requested_device;
    }
    node.requested_device = chosen;
  }
  Status s = infer_node_shapes(*g, node);
  if (!s.ok()) {
    scope_.update_status(s);
    return nullptr;
  }
  auto added = g->add_node(std::move(node));
  if (!added.ok()) {
    scope_.update_status(added.status().with_prefix(where));
    return nullptr;
  }
  result_ = *added;
  return result_;
}

}  // namespace actorflow
