// Reverse-mode automatic differentiation over graphs: tf.gradients.
#pragma once

#include <vector>

#include "core/status.h"
#include "graph/scope.h"

namespace actorflow {

// Adds to `scope`'s graph the ops computing d(sum_i <grad_ys[i], ys[i]>)/d(xs[j]) and returns
// one Output per x. grad_ys empty = ones_like(y) for every y. An x that no y depends on gets an
// invalid Output, or zeros_like(x) with `zeros_for_unconnected`.
//
// Paths: gradients flow only along floating-point edges; integer and bool edges (ArgMax, Shape,
// comparisons, Select's condition, Cast to an integer) end a path quietly, as does StopGradient.
// Several gradients reaching one tensor are summed with AddN; when all of them are sparse
// (ops::indexed_slices, the gradient of a gather of a tensor whose rows' shape is known), the sum
// stays sparse (their indices and rows concatenated).
//
// Placement: gradient ops live under "gradients/" and request the device of the forward op
// they differentiate (its requested device, else its assigned one; the scope's device when the
// op has none), so a worker's gradient compute stays on the worker next to its forward pass.
// The sum of the gradients of a variable (any source, stateful or colocated node, e.g. a
// variable's read) is placed with its consumers' gradient ops, never on the parameter server.
//
// Errors: invalid or foreign ys/xs, grad_ys of the wrong count or dtype, and a float op with no
// gradient function on a path: "gradients: Assign 'a' has no gradient but lies between the ys
// and xs". A failing gradient function is named: "gradients: gradient of Conv2D 'c': ...".
// Not thread-safe (graph construction).
Result<std::vector<Output>> gradients(const Scope& scope, const std::vector<Output>& ys, const std::vector<Output>& xs,
                                      const std::vector<Output>& grad_ys = {}, bool zeros_for_unconnected = false);

}  // namespace actorflow
