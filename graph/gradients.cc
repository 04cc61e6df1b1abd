#include "graph/gradients.h"

#include <map>
#include <set>

#include "graph/op_registry.h"
#include "graph/ops.h"

namespace actorflow {

namespace {

// The device a node asked for, or where the placer put it.
const std::string& device_of(const Node& n) {
  return n.requested_device.empty() ? n.assigned_device : n.requested_device;
}

// `s` placed on `device` (kept as is when the device is empty: then the caller's scope decides).
Scope on_device(const Scope& s, const std::string& device) { return device.empty() ? s : s.with_device(device); }

// True for nodes whose incoming gradients must not be summed where the node lives: sources
// (variables, placeholders, constants), stateful ops and nodes colocated with another (a
// variable's read). Their sum is placed with the consumers' gradient ops, so a worker's
// gradient never detours through the parameter server that holds the variable.
bool aggregate_at_consumer(const Node& n) {
  if (n.inputs.empty() || !n.colocate_with.empty()) return true;
  auto def = OpRegistry::global().lookup(n.op);
  return def.ok() && (*def)->stateful;
}

// True when `o` is a node of `g` (not of another graph).
bool in_graph(const Graph* g, const Output& o) {
  const int id = o.node()->id;
  return id >= 0 && id < g->num_nodes() && g->node(id) == o.node();
}

// True when `a` knows a dim (or the rank) that `b` does not.
bool knows_more(const Shape& a, const Shape& b) {
  if (a.unknown_rank()) return false;
  if (b.unknown_rank()) return true;
  if (a.rank() != b.rank()) return false;
  for (int i = 0; i < a.rank(); ++i)
    if (a.dim(i) >= 0 && b.dim(i) < 0) return true;
  return false;
}

}  // namespace

Result<std::vector<Output>> gradients(const Scope& scope, const std::vector<Output>& ys, const std::vector<Output>& xs,
                                      const std::vector<Output>& grad_ys, bool zeros_for_unconnected) {
  AF_RETURN_IF_ERROR(scope.status());
  if (!grad_ys.empty() && grad_ys.size() != ys.size())
    return InvalidArgument("gradients: " + std::to_string(grad_ys.size()) + " grad_ys for " +
                           std::to_string(ys.size()) + " ys");
  Graph* g = scope.graph();
  for (size_t i = 0; i < ys.size(); ++i) {
    if (!ys[i].valid()) return InvalidArgument("gradients: y " + std::to_string(i) + " is an invalid Output");
    if (!in_graph(g, ys[i]))
      return InvalidArgument("gradients: y '" + ys[i].name() + "' belongs to another graph than the scope");
    if (!grad_ys.empty()) {
      if (!grad_ys[i].valid())
        return InvalidArgument("gradients: grad_y " + std::to_string(i) + " (for '" + ys[i].name() +
                               "') is an invalid Output");
      if (grad_ys[i].dtype() != ys[i].dtype())
        return InvalidArgument("gradients: grad_y '" + grad_ys[i].name() + "' has dtype " +
                               dtype_name(grad_ys[i].dtype()) + " but y '" + ys[i].name() + "' has " +
                               dtype_name(ys[i].dtype()));
    }
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].valid()) return InvalidArgument("gradients: x " + std::to_string(i) + " is an invalid Output");
    if (!in_graph(g, xs[i]))
      return InvalidArgument("gradients: x '" + xs[i].name() + "' belongs to another graph than the scope");
  }
  const int n = g->num_nodes();
  AF_ASSIGN_OR_RETURN(auto order, g->topological_order());

  // Forward pass: the endpoints that depend on an x through floating-point edges ("live").
  // Integer and bool edges (ArgMax, Shape, comparisons, Cast to int) carry no gradient.
  std::set<Endpoint> live;
  for (const auto& x : xs) live.insert(x.endpoint());
  std::vector<char> reached(static_cast<size_t>(n), 0);
  for (int id : order) {
    const Node* node = g->node(id);
    bool r = false;
    for (const auto& in : node->inputs) r = r || live.count(in) != 0;
    if (!r) continue;
    reached[static_cast<size_t>(id)] = 1;
    if (node->op == "StopGradient") continue;  // nothing downstream depends on x differentiably
    for (int o = 0; o < node->num_outputs(); ++o)
      if (dtype_is_floating(node->output_types[static_cast<size_t>(o)])) live.insert(Endpoint{id, o});
  }

  Scope gs = scope.with_no_control_dependencies().new_sub_scope("gradients");
  // Gradients flowing into each live endpoint, summed when the endpoint's node is processed.
  std::map<Endpoint, std::vector<Output>> pending;
  for (size_t i = 0; i < ys.size(); ++i) {
    Output gy = grad_ys.empty() ? ops::ones_like(on_device(gs, device_of(*ys[i].node())), ys[i]) : grad_ys[i];
    pending[ys[i].endpoint()].push_back(gy);
  }
  auto sum_of = [&](const Scope& s, const std::vector<Output>& v) -> Output {
    if (v.size() == 1) return v[0];
    // Sparse gradients of one tensor (several gathers of a table) stay sparse: their rows are
    // concatenated, duplicates and all, as TensorFlow sums IndexedSlices.
    bool all_sparse = true;
    for (const auto& o : v) all_sparse = all_sparse && ops::is_indexed_slices(o);
    if (all_sparse) {
      std::vector<Output> ids, rows;
      for (const auto& o : v) {
        ids.push_back(input_of(s, *o.node(), 0));
        rows.push_back(input_of(s, *o.node(), 1));
      }
      const Node& first = *v[0].node();
      bool same_ids_type = true;
      for (const auto& i : ids) same_ids_type = same_ids_type && i.dtype() == ids[0].dtype();
      if (same_ids_type)
        return ops::indexed_slices(s, ops::concat(s, ids, 0), ops::concat(s, rows, 0),
                                   input_of(s, first, 2),
                                   first.attrs.get_or<Shape>("shape", Shape::unknown()));
    }
    return ops::add_n(s, v);
  };
  // The scope summing the gradients of `node`'s outputs.
  auto aggregation_scope = [&](const Node& node, const std::vector<Output>& contributions) {
    if (aggregate_at_consumer(node)) return on_device(gs, device_of(*contributions[0].node()));
    return on_device(gs, device_of(node));
  };
  std::map<Endpoint, Output> final_grads;
  std::set<Endpoint> wanted;
  for (const auto& x : xs) wanted.insert(x.endpoint());
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int id = *it;
    if (id >= n) continue;  // gradient ops added during this call
    Node* node = g->node(id);
    std::vector<Output> grad_outputs(static_cast<size_t>(node->num_outputs()));
    bool any = false;
    for (int o = 0; o < node->num_outputs(); ++o) {
      Endpoint e{id, o};
      auto p = pending.find(e);
      if (p == pending.end()) continue;
      grad_outputs[static_cast<size_t>(o)] = sum_of(aggregation_scope(*node, p->second), p->second);
      AF_RETURN_IF_ERROR(scope.status());
      any = true;
      if (wanted.count(e)) final_grads[e] = grad_outputs[static_cast<size_t>(o)];
    }
    if (!any || !reached[static_cast<size_t>(id)]) continue;  // a source, or no input depends on an x
    if (node->op == "StopGradient") continue;                  // blocks the path
    // Only float inputs that depend on an x need a gradient.
    bool needs = false;
    for (const auto& in : node->inputs) needs = needs || live.count(in) != 0;
    if (!needs) continue;
    auto def = OpRegistry::global().lookup(node->op);
    if (!def.ok() || !(*def)->grad)
      return InvalidArgument("gradients: " + node->op + " '" + node->name +
                             "' has no gradient but lies between the ys and xs");
    std::vector<Output> grad_inputs;
    Scope ns = on_device(gs, device_of(*node));
    Status st = (*def)->grad(ns, *node, grad_outputs, &grad_inputs);
    if (!st.ok())
      return Status(st.code(), "gradients: gradient of " + node->op + " '" + node->name + "': " + st.message());
    if (!scope.ok())
      return Status(scope.status().code(), "gradients: gradient of " + node->op + " '" + node->name +
                                               "': " + scope.status().message());
    for (size_t i = 0; i < node->inputs.size() && i < grad_inputs.size(); ++i) {
      const Endpoint& in = node->inputs[i];
      if (!grad_inputs[i].valid() || !live.count(in)) continue;
      pending[in].push_back(grad_inputs[i]);
    }
  }
  std::vector<Output> out;
  for (const auto& x : xs) {
    auto f = final_grads.find(x.endpoint());
    if (f != final_grads.end()) {
      // The static shape the gradient ops inferred can be less specific than x's (e.g. a matmul
      // operand's gradient when the other operand's dims are unknown): x's shape is the truth.
      Output gx = f->second;
      if (knows_more(x.shape(), gx.shape()) && x.shape().compatible_with(gx.shape()))
        gx = ops::ensure_shape(on_device(gs, device_of(*gx.node())), gx, x.shape());
      out.push_back(gx);
    } else {
      out.push_back(zeros_for_unconnected ? ops::zeros_like(gs, x) : Output());
    }
  }
  AF_RETURN_IF_ERROR(scope.status());
  return out;
}

}  // namespace actorflow
