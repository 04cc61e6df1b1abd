// Reverse-mode automatic differentiation over graphs: tf.gradients.
#pragma once

#include <vector>

#include "core/status.h"
#include "graph/scope.h"

namespace actorflow {

// Adds to `scope`'s graph the ops computing d(sum_i <grad_ys[i], ys[i]>)/d(xs[j]) and returns
// one Output per x. grad_ys empty = ones_like(y) for every y. An x that no y depends on gets an
// invalid Output, or zeros_like(x) with `zeros_for_unconnected`. Gradient ops live under
// "gradients/" and are placed on the device of the forward op they differentiate (so gradient
// compute of a worker's model stays on the worker, next to its forward pass). Errors name the
// op that has no gradient on the path: "gradients: ArgMax 'am' has no gradient but lies between
// the ys and xs". Not thread-safe (graph construction).
Result<std::vector<Output>> gradients(const Scope& scope, const std::vector<Output>& ys, const std::vector<Output>& xs,
                                      const std::vector<Output>& grad_ys = {}, bool zeros_for_unconnected = false);

}  // namespace actorflow
