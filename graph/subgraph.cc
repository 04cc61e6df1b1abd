#include "graph/subgraph.h"

#include <algorithm>

#include "graph/op_kinds.h"

#include <map>
#include <set>

namespace actorflow {

Result<Graph> rewrite_for_run(const Graph& g, const RunSignature& sig) {
  // Resolve names.
  std::map<Endpoint, int> fed;  // endpoint -> feed index
  for (size_t i = 0; i < sig.feeds.size(); ++i) {
    auto e = g.parse_endpoint(sig.feeds[i]);
    if (!e.ok()) return e.status().with_prefix("feed '" + sig.feeds[i] + "'");
    if (fed.count(*e)) return InvalidArgument("feed '" + sig.feeds[i] + "' is fed twice");
    fed[*e] = static_cast<int>(i);
  }
  std::vector<Endpoint> fetch_eps;
  for (const auto& f : sig.fetches) {
    auto e = g.parse_endpoint(f);
    if (!e.ok()) return e.status().with_prefix("fetch '" + f + "'");
    fetch_eps.push_back(*e);
  }
  std::vector<int> target_ids;
  for (const auto& t : sig.targets) {
    const Node* n = g.find(t);
    if (!n) return NotFound("target '" + t + "': no node named '" + t + "' in the graph");
    target_ids.push_back(n->id);
  }

  // Nodes whose every output used is fed are not needed (unless a target).
  // Walk backwards from fetches and targets; a fed endpoint stops the walk along that edge.
  std::vector<char> needed(static_cast<size_t>(g.num_nodes()), 0);
  std::vector<int> stack;
  auto visit = [&](int id) {
    if (!needed[static_cast<size_t>(id)]) { needed[static_cast<size_t>(id)] = 1; stack.push_back(id); }
  };
  for (const auto& e : fetch_eps)
    if (!fed.count(e)) visit(e.node);
  for (int t : target_ids) visit(t);
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    const Node* n = g.node(id);
    for (const auto& in : n->inputs)
      if (!fed.count(in)) visit(in.node);
    for (int c : n->control_inputs) visit(c);
  }

  // Needed nodes whose outputs nobody reads, run as NoOps (the header's contract). In reverse
  // topological order every consumer of a node is decided before the node itself, so a
  // producer read only by nodes turned into NoOps is turned into one too.
  auto order = g.topological_order();
  if (!order.ok()) return order.status();
  std::vector<char> read(static_cast<size_t>(g.num_nodes()), 0), as_noop(static_cast<size_t>(g.num_nodes()), 0);
  for (const auto& e : fetch_eps) read[static_cast<size_t>(e.node)] = 1;
  for (int t : target_ids) read[static_cast<size_t>(t)] = 1;
  for (auto it = order->rbegin(); it != order->rend(); ++it) {
    const int id = *it;
    if (!needed[static_cast<size_t>(id)]) continue;
    const Node* n = g.node(id);
    if (!read[static_cast<size_t>(id)] && is_pure_compute_op(n->op)) {
      as_noop[static_cast<size_t>(id)] = 1;
      continue;
    }
    for (const auto& in : n->inputs)
      if (!fed.count(in)) read[static_cast<size_t>(in.node)] = 1;
  }

  Graph out;
  std::vector<int> new_id(static_cast<size_t>(g.num_nodes()), -1);
  std::map<Endpoint, int> arg_node;  // fed endpoint -> new _Arg node id
  // Args first, so their ids are known.
  for (const auto& [ep, idx] : fed) {
    const Node* src = g.node(ep.node);
    Node arg;
    arg.name = "_arg_" + src->name + "_" + std::to_string(ep.index) + "_" + std::to_string(idx);
    arg.op = "_Arg";
    arg.requested_device = src->requested_device;
    arg.assigned_device = src->assigned_device;
    arg.colocate_with = {src->name};
    arg.attrs.set("index", static_cast<int64_t>(idx));
    arg.attrs.set("dtype", src->output_types[static_cast<size_t>(ep.index)]);
    arg.attrs.set("shape", src->output_shapes[static_cast<size_t>(ep.index)]);
    arg.attrs.set("feed_name", sig.feeds[static_cast<size_t>(idx)]);
    arg.output_types = {src->output_types[static_cast<size_t>(ep.index)]};
    arg.output_shapes = {src->output_shapes[static_cast<size_t>(ep.index)]};
    AF_ASSIGN_OR_RETURN(Node * a, out.add_node(std::move(arg)));
    arg_node[ep] = a->id;
  }
  for (int id : *order) {
    if (!needed[static_cast<size_t>(id)]) continue;
    Node n = *g.node(id);
    if (as_noop[static_cast<size_t>(id)]) {
      for (const auto& in : n.inputs)
        if (!fed.count(in) &&
            std::find(n.control_inputs.begin(), n.control_inputs.end(), in.node) == n.control_inputs.end())
          n.control_inputs.push_back(in.node);
      n.inputs.clear();
      n.op = "NoOp";
      n.attrs = AttrMap();
      n.output_types.clear();
      n.output_shapes.clear();
    }
    // A fed node that is still needed (e.g. as a target) keeps running; consumers read the feed.
    for (auto& in : n.inputs) {
      auto it = arg_node.find(in);
      if (it != arg_node.end()) in = Endpoint{it->second, 0};
      else in = Endpoint{new_id[static_cast<size_t>(in.node)], in.index};
    }
    std::vector<int> ctrl;
    for (int c : n.control_inputs) ctrl.push_back(new_id[static_cast<size_t>(c)]);
    n.control_inputs = ctrl;
    AF_ASSIGN_OR_RETURN(Node * added, out.add_node(std::move(n)));
    new_id[static_cast<size_t>(id)] = added->id;
  }
  for (size_t j = 0; j < fetch_eps.size(); ++j) {
    const Endpoint& e = fetch_eps[j];
    const Node* src = g.node(e.node);
    Endpoint src_new;
    auto it = arg_node.find(e);
    if (it != arg_node.end()) src_new = Endpoint{it->second, 0};
    else src_new = Endpoint{new_id[static_cast<size_t>(e.node)], e.index};
    const Node* producer = out.node(src_new.node);
    Node ret;
    ret.name = "_retval_" + src->name + "_" + std::to_string(e.index) + "_" + std::to_string(j);
    ret.op = "_Retval";
    ret.inputs = {src_new};
    ret.requested_device = producer->requested_device;
    ret.assigned_device = producer->assigned_device;
    ret.colocate_with = {producer->name};
    ret.attrs.set("index", static_cast<int64_t>(j));
    ret.attrs.set("fetch_name", sig.fetches[j]);
    AF_RETURN_IF_ERROR(out.add_node(std::move(ret)).status());
  }
  return out;
}

}  // namespace actorflow
