#include "runtime/step_plan.h"

#include "graph/fusion.h"
#include "graph/mixed_precision.h"

namespace actorflow {
namespace {

// The partition's feeds and fetches, and whether it only forwards feeds (_Arg -> _Send only,
// no control edges).
void describe(const Graph& pg, PartitionPlan* p) {
  for (int i = 0; i < pg.num_nodes(); ++i) {
    const Node* n = pg.node(i);
    if (n->op == "_Arg") p->arg_indices.push_back(static_cast<int>(n->attrs.get_or<int64_t>("index", 0)));
    if (n->op == "_Retval") p->retval_indices.push_back(static_cast<int>(n->attrs.get_or<int64_t>("index", 0)));
  }
  p->forwarder = pg.num_nodes() > 0;
  for (int i = 0; i < pg.num_nodes() && p->forwarder; ++i) {
    const Node* n = pg.node(i);
    if (!n->control_inputs.empty()) p->forwarder = false;
    else if (n->op == "_Send" && n->inputs.size() == 1 && pg.node(n->inputs[0].node)->op == "_Arg") {
      // The key as the partitioner built it, parsed once per plan; a custom key that is no
      // RendezvousKey leaves the feed to the partition itself (not a forwarder).
      auto key = RendezvousKey::parse(n->attrs.get_or<std::string>("tensor_name", ""));
      if (!key.ok()) p->forwarder = false;
      else
        p->forwards.push_back(
            FeedForward{static_cast<int>(pg.node(n->inputs[0].node)->attrs.get_or<int64_t>("index", 0)), std::move(*key)});
    } else if (n->op != "_Arg") {
      p->forwarder = false;
    }
  }
  if (!p->forwarder) p->forwards.clear();
}

}  // namespace

Result<StepPlan> plan_step(const Graph& graph, const RunSignature& sig, const std::vector<AvailableDevice>& devices,
                           const PlacerOptions& placer, const PartitionOptions& partition) {
  AF_ASSIGN_OR_RETURN(Graph g, rewrite_for_run(graph, sig));
  StepPlan plan;
  AF_ASSIGN_OR_RETURN(plan.placement_log, place_graph(g, devices, placer));
  if (placer.fuse_kernels) {  // one pass over an activation instead of two or three (graph/fusion.h)
    AF_ASSIGN_OR_RETURN(Graph fused, fuse_cpu_kernels(g));
    g = std::move(fused);
  }
  if (placer.mixed_bfloat16) mark_mixed_bfloat16(g);  // bfloat16 operands (graph/mixed_precision.h)
  plan.num_fetches = sig.fetches.size();
  plan.feed_names = sig.feeds;
  plan.arg_types.assign(sig.feeds.size(), DType::kInvalid);
  plan.arg_shapes.assign(sig.feeds.size(), Shape::unknown());
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node* n = g.node(i);
    if (n->op != "_Arg") continue;
    const auto idx = static_cast<size_t>(n->attrs.get_or<int64_t>("index", 0));
    if (idx >= plan.arg_types.size()) return Internal("_Arg '" + n->name + "' has index " + std::to_string(idx));
    plan.arg_types[idx] = n->output_types[0];
    plan.arg_shapes[idx] = n->output_shapes[0];
  }
  AF_ASSIGN_OR_RETURN(auto parts, partition_graph(g, partition));
  for (auto& [dev, pg] : parts) {
    PartitionPlan p;
    p.device = dev;
    describe(pg, &p);
    p.graph = std::make_shared<const Graph>(std::move(pg));
    plan.partitions.push_back(std::move(p));
  }
  return plan;
}

}  // namespace actorflow
