#include "graph/fusion.h"

#include <algorithm>

#include "graph/device_spec.h"

namespace actorflow {
namespace {

bool on_cpu(const Node& n) {
  if (n.assigned_device.empty()) return false;
  auto d = DeviceSpec::parse(n.assigned_device);
  return d.ok() && d->type && *d->type == "CPU";
}

bool has_control(const Node& n, int id) {
  return std::find(n.control_inputs.begin(), n.control_inputs.end(), id) != n.control_inputs.end();
}

// A chain of nodes (ids, producer first) that becomes one node of op `op`.
struct Chain {
  std::vector<int> members;
  std::string op;
  bool relu = false;
};

class Fuser {
 public:
  explicit Fuser(const Graph& g) : g_(g), consumers_(g.consumers()) {}

  // The only consumer of `id`'s single output when that consumer reads it exactly once, as its
  // data input `input`, on the same device, and nothing else (data or control) depends on `id`.
  const Node* sole_consumer(int id, int input) const {
    const auto& cs = consumers_[static_cast<size_t>(id)];
    if (cs.size() != 1) return nullptr;
    const Node* c = g_.node(cs[0]);
    const Node* p = g_.node(id);
    if (c->assigned_device != p->assigned_device || has_control(*c, id)) return nullptr;
    if (static_cast<int>(c->inputs.size()) <= input || !(c->inputs[static_cast<size_t>(input)] == Endpoint{id, 0}))
      return nullptr;
    for (size_t i = 0; i < c->inputs.size(); ++i)
      if (static_cast<int>(i) != input && c->inputs[i].node == id) return nullptr;
    return c;
  }

  std::vector<Chain> find_chains(FusionStats* st) const {
    std::vector<Chain> chains;
    for (int i = 0; i < g_.num_nodes(); ++i) {
      const Node* n = g_.node(i);
      if (!on_cpu(*n) || n->num_outputs() != 1 || n->output_types[0] != DType::kFloat32) continue;
      if (n->op == "Conv2D" || n->op == "MatMul") {
        const Node* b = sole_consumer(i, 0);
        if (!b || b->op != "BiasAdd" || b->num_outputs() != 1) continue;
        Chain c{{i, b->id}, n->op == "Conv2D" ? "_FusedConv2D" : "_FusedMatMul", false};
        const Node* r = sole_consumer(b->id, 0);
        if (r && r->op == "Relu") {
          c.members.push_back(r->id);
          c.relu = true;
        }
        if (st) {
          ++(n->op == "Conv2D" ? st->conv_bias : st->matmul_bias);
          st->relu += c.relu ? 1 : 0;
        }
        chains.push_back(std::move(c));
      } else if (n->op == "MaxPoolGrad" && n->inputs.size() == 3) {
        const Node* r = sole_consumer(i, 0);
        if (!r || r->op != "ReluGrad" || r->inputs.size() != 2 || !(r->inputs[1] == n->inputs[0])) continue;
        if (st) ++st->max_pool_grad;
        chains.push_back(Chain{{i, r->id}, "_FusedMaxPoolGrad", true});
      }
    }
    return chains;
  }

 private:
  const Graph& g_;
  std::vector<std::vector<int>> consumers_;
};

}  // namespace

Result<Graph> fuse_cpu_kernels(const Graph& g, FusionStats* stats) {
  FusionStats local;
  Fuser fuser(g);
  const std::vector<Chain> chains = fuser.find_chains(&local);
  AF_ASSIGN_OR_RETURN(std::vector<int> order, g.topological_order());

  // For every absorbed node, the chain it belongs to; the chain's last node is where the fused
  // node goes in topological order (every producer of every member precedes it).
  std::vector<int> chain_of(static_cast<size_t>(g.num_nodes()), -1);
  for (size_t c = 0; c < chains.size(); ++c)
    for (int m : chains[c].members) chain_of[static_cast<size_t>(m)] = static_cast<int>(c);

  Graph out;
  std::vector<int> new_id(static_cast<size_t>(g.num_nodes()), -1);
  auto remap_inputs = [&](Node* n) {
    for (auto& in : n->inputs) in = Endpoint{new_id[static_cast<size_t>(in.node)], in.index};
  };
  // The new ids of `ids`, without those in `skip` and without repeats, in order.
  auto remap_controls = [&](const std::vector<int>& ids, const std::vector<int>& skip) {
    std::vector<int> ctrl;
    for (int c : ids) {
      if (std::find(skip.begin(), skip.end(), c) != skip.end()) continue;
      const int id = new_id[static_cast<size_t>(c)];
      if (std::find(ctrl.begin(), ctrl.end(), id) == ctrl.end()) ctrl.push_back(id);
    }
    return ctrl;
  };
  for (int id : order) {
    const int c = chain_of[static_cast<size_t>(id)];
    if (c < 0) {
      Node n = *g.node(id);
      remap_inputs(&n);
      n.control_inputs = remap_controls(n.control_inputs, {});
      AF_ASSIGN_OR_RETURN(Node * added, out.add_node(std::move(n)));
      new_id[static_cast<size_t>(id)] = added->id;
      continue;
    }
    const Chain& ch = chains[static_cast<size_t>(c)];
    if (id != ch.members.back()) continue;  // emitted with the chain's last node
    const Node& first = *g.node(ch.members.front());
    const Node& last = *g.node(id);
    Node f;
    f.name = last.name;
    f.op = ch.op;
    f.inputs = first.inputs;
    f.attrs = first.attrs;
    if (ch.op != "_FusedMaxPoolGrad") {
      f.inputs.push_back(g.node(ch.members[1])->inputs[1]);  // BiasAdd's bias
      f.attrs.set(kFusedReluAttr, ch.relu);
    }
    f.requested_device = first.requested_device;
    f.assigned_device = first.assigned_device;
    f.colocate_with = first.colocate_with;
    f.output_types = last.output_types;
    f.output_shapes = last.output_shapes;
    // Control inputs of every member, in order, without the members themselves.
    std::vector<int> ctrl;
    for (int m : ch.members)
      for (int ci : g.node(m)->control_inputs) ctrl.push_back(ci);
    remap_inputs(&f);
    f.control_inputs = remap_controls(ctrl, ch.members);
    AF_ASSIGN_OR_RETURN(Node * added, out.add_node(std::move(f)));
    new_id[static_cast<size_t>(id)] = added->id;
  }
  if (stats) *stats = local;
  return out;
}

}  // namespace actorflow
