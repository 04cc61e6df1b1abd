#include "graph/gradients.h"

#include <map>
#include <set>

#include "graph/op_registry.h"
#include "graph/ops.h"

namespace actorflow {

Result<std::vector<Output>> gradients(const Scope& scope, const std::vector<Output>& ys, const std::vector<Output>& xs,
                                      const std::vector<Output>& grad_ys, bool zeros_for_unconnected) {
  AF_RETURN_IF_ERROR(scope.status());
  if (!grad_ys.empty() && grad_ys.size() != ys.size())
    return InvalidArgument("gradients: " + std::to_string(grad_ys.size()) + " grad_ys for " +
                           std::to_string(ys.size()) + " ys");
  Graph* g = scope.graph();
  for (const auto& o : ys)
    if (!o.valid()) return InvalidArgument("gradients: a y is an invalid Output");
  for (const auto& o : xs)
    if (!o.valid()) return InvalidArgument("gradients: an x is an invalid Output");
  const int n = g->num_nodes();
  // Nodes reachable from the xs (forward) and reaching the ys (backward): the path.
  auto cons = g->consumers();
  std::vector<char> from_x(static_cast<size_t>(n), 0), to_y(static_cast<size_t>(n), 0);
  std::vector<int> stack;
  for (const auto& x : xs)
    if (!from_x[static_cast<size_t>(x.node()->id)]) { from_x[static_cast<size_t>(x.node()->id)] = 1; stack.push_back(x.node()->id); }
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    for (int c : cons[static_cast<size_t>(id)]) {
      // Only data edges carry gradients.
      bool data = false;
      for (const auto& in : g->node(c)->inputs) data |= in.node == id;
      if (data && !from_x[static_cast<size_t>(c)]) { from_x[static_cast<size_t>(c)] = 1; stack.push_back(c); }
    }
  }
  for (const auto& y : ys)
    if (!to_y[static_cast<size_t>(y.node()->id)]) { to_y[static_cast<size_t>(y.node()->id)] = 1; stack.push_back(y.node()->id); }
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    for (const auto& in : g->node(id)->inputs)
      if (!to_y[static_cast<size_t>(in.node)]) { to_y[static_cast<size_t>(in.node)] = 1; stack.push_back(in.node); }
  }
  Scope gs = scope.with_no_control_dependencies().new_sub_scope("gradients");
  std::map<Endpoint, std::vector<Output>> pending;
  for (size_t i = 0; i < ys.size(); ++i) {
    Output gy = grad_ys.empty() ? ops::ones_like(gs.with_device(ys[i].node()->requested_device), ys[i]) : grad_ys[i];
    pending[ys[i].endpoint()].push_back(gy);
  }
  auto sum_of = [&](const Scope& s, std::vector<Output>& v) -> Output {
    if (v.empty()) return Output();
    if (v.size() == 1) return v[0];
    return ops::add_n(s, v);
  };
  std::map<Endpoint, Output> final_grads;
  std::set<Endpoint> wanted;
  for (const auto& x : xs) wanted.insert(x.endpoint());
  AF_ASSIGN_OR_RETURN(auto order, g->topological_order());
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int id = *it;
    if (id >= n) continue;  // gradient ops added during this call
    if (!from_x[static_cast<size_t>(id)] || !to_y[static_cast<size_t>(id)]) continue;
    Node* node = g->node(id);
    Scope ns = gs.with_device(node->requested_device);
    std::vector<Output> grad_outputs(static_cast<size_t>(node->num_outputs()));
    bool any = false;
    for (int o = 0; o < node->num_outputs(); ++o) {
      Endpoint e{id, o};
      auto p = pending.find(e);
      if (p == pending.end()) continue;
      grad_outputs[static_cast<size_t>(o)] = sum_of(ns, p->second);
      any = true;
      if (wanted.count(e)) final_grads[e] = grad_outputs[static_cast<size_t>(o)];
    }
    if (!any) continue;
    if (node->inputs.empty()) continue;  // a source (variable, constant, placeholder)
    if (node->op == "StopGradient") continue;  // blocks the path
    // Does any input lie on the path?
    bool needs = false;
    for (const auto& in : node->inputs) needs |= from_x[static_cast<size_t>(in.node)] != 0;
    if (!needs) continue;
    auto def = OpRegistry::global().lookup(node->op);
    if (!def.ok() || !(*def)->grad)
      return InvalidArgument("gradients: " + node->op + " '" + node->name +
                             "' has no gradient but lies between the ys and xs");
    std::vector<Output> grad_inputs;
    AF_RETURN_IF_ERROR((*def)->grad(ns, *node, grad_outputs, &grad_inputs));
    AF_RETURN_IF_ERROR(scope.status());
    for (size_t i = 0; i < node->inputs.size() && i < grad_inputs.size(); ++i) {
      if (!grad_inputs[i].valid()) continue;
      const Endpoint& in = node->inputs[i];
      if (!from_x[static_cast<size_t>(in.node)]) continue;
      if (!dtype_is_floating(g->node(in.node)->output_types[static_cast<size_t>(in.index)])) continue;
      pending[in].push_back(grad_inputs[i]);
    }
  }
  std::vector<Output> out;
  for (const auto& x : xs) {
    auto f = final_grads.find(x.endpoint());
    if (f != final_grads.end()) {
      out.push_back(f->second);
    } else {
      // x may be a y itself or only reached without passing a processed node.
      auto p = pending.find(x.endpoint());
      if (p != pending.end()) out.push_back(sum_of(gs.with_device(x.node()->requested_device), p->second));
      else out.push_back(zeros_for_unconnected ? ops::zeros_like(gs, x) : Output());
    }
  }
  AF_RETURN_IF_ERROR(scope.status());
  return out;
}

}  // namespace actorflow
