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
// Errors: NotFound for unknown feed/fetch/target names ("fetch 'x': no node named 'x'"),
// InvalidArgument for a tensor fed twice, or a fetch of an op with no outputs.
Result<Graph> rewrite_for_run(const Graph& graph, const RunSignature& sig);

}  // namespace actorflow
