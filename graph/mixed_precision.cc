#include "graph/mixed_precision.h"

#include "graph/graph.h"

namespace actorflow {

bool takes_mixed_bfloat16(const std::string& op) {
  return op == "MatMul" || op == "Conv2D" || op == "Conv2DBackpropInput" || op == "Conv2DBackpropFilter" ||
         op == "_FusedMatMul" || op == "_FusedConv2D";  // graph/fusion.h
}

int mark_mixed_bfloat16(Graph& g) {
  int marked = 0;
  for (int i = 0; i < g.num_nodes(); ++i) {
    Node* n = g.node(i);
    if (!n || !takes_mixed_bfloat16(n->op)) continue;
    n->attrs.set(kMixedBfloat16Attr, true);
    ++marked;
  }
  return marked;
}

}  // namespace actorflow
