// Rewrites a client graph for one Session::run signature: prunes to what the fetches and
// targets need, replaces fed tensors by _Arg nodes and adds a _Retval node per fetch.
// Pure function on graphs; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "graph/graph.h"

namespace actorflow {

struct RunSignature {
  std::vector<std::string> feeds;    // tensor names "node" / "node:i"
  std::vector<std::string> fetches;  // tensor names
  std::vector<std::string> targets;  // node names run for their side effects
};

// Returns the rewritten graph. Feed i becomes `_Arg` with attr index=i (placed where the fed
// node was requested); fetch j gets a `_Retval` with index=j placed with its producer.
// A needed node that only computes (is_pure_compute_op, graph/op_kinds.h) and whose outputs no
// needed node reads and no fetch names, but which some needed node waits for through a control
// input, becomes a NoOp waiting for its inputs' producers (control inputs in place of its data
// inputs): its result could not be seen, the order it imposed is kept, its kernel is not run.
// TensorFlow's gradients write such nodes (the gradient of a first layer's input, gated by the
// gradient `tuple` of its op) and TensorFlow's Grappler skips them the same way.
// Errors: NotFound for unknown feed/fetch/target names ("fetch 'x': no node named 'x'"),
// InvalidArgument for a tensor fed twice, or a fetch of an op with no outputs.
Result<Graph> rewrite_for_run(const Graph& graph, const RunSignature& sig);

}  // namespace actorflow
