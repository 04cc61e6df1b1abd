// ops:: builder functions, after TensorFlow's C++ `ops::` namespace.
//
// Each adds one node to the scope's graph, infers its output shape at once and returns its
// Output. On a construction error (bad shapes, dtypes or attributes) the error
// "<Op> '<name>': <why>" is recorded in the scope and an invalid Output is returned; later
// builders on the same graph then do nothing. Name a node with scope.with_op_name("c").
// Not thread-safe (graph construction is single-threaded).
#pragma once

#include <string>
#include <vector>

#include "graph/scope.h"

namespace actorflow {
namespace ops {

// ---- core (graph/ops_core.cc + graph/ops_builders_core.cc) -------------------------------
// A constant of `shape` holding `values` (row-major; a single value is broadcast to the shape).
Output constant(const Scope& s, const std::vector<float>& values, const Shape& shape, const std::string& name = "");
Output constant(const Scope& s, const Tensor& value, const std::string& name = "");
// A value fed at run time. `shape` may have -1 dims or be Shape::unknown().
Output placeholder(const Scope& s, DType dtype, const Shape& shape = Shape::unknown(), const std::string& name = "");
Output identity(const Scope& s, Input x);
// tf.placeholder_with_default: `value` unless a value is fed for it (e.g. a training flag,
// placeholder_with_default(s, false, "training"), fed true for the training steps). An Identity
// node named `name` (default "PlaceholderWithDefault"): every tensor may be fed, so feeding it
// replaces `value` for that run, checked as any fed tensor is.
Output placeholder_with_default(const Scope& s, Input value, const std::string& name = "");
Output stop_gradient(const Scope& s, Input x);
// A node that does nothing; with control dependencies it groups ops (tf.group).
Output no_op(const Scope& s, const std::vector<Output>& control_deps = {}, const std::string& name = "");

// ---- elementwise math (graph/ops_math.cc); binary ops broadcast NumPy-style -------------
Output add(const Scope& s, Input x, Input y);
Output sub(const Scope& s, Input x, Input y);
Output mul(const Scope& s, Input x, Input y);
Output div(const Scope& s, Input x, Input y);
Output maximum(const Scope& s, Input x, Input y);
Output neg(const Scope& s, Input x);
Output log(const Scope& s, Input x);
Output exp(const Scope& s, Input x);
Output square(const Scope& s, Input x);
Output sqrt(const Scope& s, Input x);
Output add_n(const Scope& s, const std::vector<Output>& xs);
Output equal(const Scope& s, Input x, Input y);      // bool result
Output greater(const Scope& s, Input x, Input y);    // bool result
Output cast(const Scope& s, Input x, DType to);
// where(cond, x, y). cond, x and y each either a scalar or of one common shape.
Output select(const Scope& s, Input cond, Input x, Input y);

// ---- reductions and index ops (graph/ops_math.cc) ---------------------------------------
// Reduce over `axes` (negative counts from the end; empty = all axes).
Output reduce_sum(const Scope& s, Input x, const std::vector<int64_t>& axes = {}, bool keep_dims = false);
Output reduce_mean(const Scope& s, Input x, const std::vector<int64_t>& axes = {}, bool keep_dims = false);
Output reduce_max(const Scope& s, Input x, const std::vector<int64_t>& axes = {}, bool keep_dims = false);
// tf.argmax: the index of the largest value along `axis` (int64 result; the first on ties).
Output argmax(const Scope& s, Input x, int64_t axis);
[[deprecated("named argmax now, as tf.argmax")]] inline Output arg_max(const Scope& s, Input x, int64_t axis) {
  return argmax(s, x, axis);
}

// ---- array ops (graph/ops_array.cc) -----------------------------------------------------
// `shape` may contain one -1.
Output reshape(const Scope& s, Input x, const std::vector<int64_t>& shape);
// Output with x's shape as an int64 1-D tensor (needs a fully known shape at run time).
Output shape_of(const Scope& s, Input x);
Output zeros_like(const Scope& s, Input x);
Output ones_like(const Scope& s, Input x);
Output transpose(const Scope& s, Input x, const std::vector<int64_t>& perm);
// Sums `x` down to the shape of `like` (used by broadcasting gradients).
Output sum_to_shape_of(const Scope& s, Input x, Input like);
Output one_hot(const Scope& s, Input indices, int64_t depth, float on = 1.f, float off = 0.f);
// `x` with size-1 dims inserted at `axes` of the result (rank x.rank + axes.size(); negative
// axes count from the result's end), e.g. [2,3] with axes {0, -1} -> [1,2,3,1]. Works on any
// run-time shape (gradients of reductions use it). Shares x's buffer.
Output expand_dims(const Scope& s, Input x, const std::vector<int64_t>& axes);
// `x`'s elements in the run-time shape of `like` (element counts must match; like's values are
// not read). The static shape is like's. Shares x's buffer.
Output reshape_like(const Scope& s, Input x, Input like);
// `x` unchanged, its static shape merged with `shape` (-1 dims or Shape::unknown() allowed);
// the run-time shape is checked against `shape` (tf.ensure_shape). Shares x's buffer.
Output ensure_shape(const Scope& s, Input x, const Shape& shape);

// ---- neural-network ops (graph/ops_nn.cc) -----------------------------------------------
struct MatMulAttrs { bool transpose_a = false; bool transpose_b = false; };
Output matmul(const Scope& s, Input a, Input b, MatMulAttrs attrs = {});
Output relu(const Scope& s, Input x);
Output bias_add(const Scope& s, Input value, Input bias);  // bias over the last dim
// NHWC input, HWIO filter ([fh, fw, in, out]), strides {1, sh, sw, 1}, padding "SAME"/"VALID".
Output conv2d(const Scope& s, Input input, Input filter, const std::vector<int64_t>& strides,
              const std::string& padding);
// NHWC; ksize and strides are 4-vectors {1, kh, kw, 1}.
Output max_pool(const Scope& s, Input input, const std::vector<int64_t>& ksize,
                const std::vector<int64_t>& strides, const std::string& padding);
// Average pooling, NHWC, TensorFlow's windows; a SAME window's average counts only the input
// elements it covers (padding excluded), as TensorFlow's AvgPool does.
Output avg_pool(const Scope& s, Input input, const std::vector<int64_t>& ksize,
                const std::vector<int64_t>& strides, const std::string& padding);
// AvgPool's gradient: each window's grad spread evenly over the input elements it covers.
Output avg_pool_grad(const Scope& s, Input orig_input, Input grad, const std::vector<int64_t>& ksize,
                     const std::vector<int64_t>& strides, const std::string& padding);
Output softmax(const Scope& s, Input logits);  // over the last dim
// Returns {loss [batch], backprop [batch, classes]} as TensorFlow's op does.
std::vector<Output> softmax_cross_entropy_with_logits(const Scope& s, Input logits, Input labels);

// ---- indexing and activations (graph/ops_indexing.cc) -------------------------------------
// Rows of `params` (rank >= 1) picked by integer `indices` (int32/int64, any shape): the result
// is indices.shape + params.shape[1:]. An index outside [0, params.shape[0]) fails the step with
// InvalidArgument naming the op; with `drop_negatives`, negative indices give rows of zeros.
Output gather(const Scope& s, Input params, Input indices, bool drop_negatives = false);
// TensorFlow's embedding_lookup on one (unpartitioned) table: gather(params, ids) colocated with
// params (the ids go to the table's device and only the rows come back).
Output embedding_lookup(const Scope& s, Input params, Input ids);
// TensorFlow's embedding_lookup on a table split by rows into `shards` (in order; e.g.
// train::PartitionedVariable::shards): each id goes only to the shard that owns it and its row
// comes back to its place, so the result is ids.shape + rows' shape, as for one table. Strategy
// "mod": id i lives in shard i % n as its row i / n; "div": the shards hold consecutive id
// ranges. The shards must have statically known, equal row shapes and TensorFlow's layout (the
// first rows % n shards one row longer), which train::get_partitioned_variable gives; ids need
// a known rank and at most one unknown dim. Splitting and merging run in s (the worker), each
// shard's gather with its shard, so its gradient (a sparse value) goes to that shard only. One
// shard is embedding_lookup(s, shards[0], ids). Errors (recorded in s): a bad strategy or shard
// layout, ids of unknown shape; at run time an id outside [0, total rows) names the op.
Output embedding_lookup(const Scope& s, const std::vector<Output>& shards, Input ids, const std::string& strategy = "mod");
// tf.dynamic_partition: output i holds, in order, the slices data[j] whose partitions[j] (int32,
// a prefix of data's shape) equals i; a partition outside [0, num_partitions) fails the step.
// No gradient for data (its use here is routing integer ids).
std::vector<Output> dynamic_partition(const Scope& s, Input data, Input partitions, int64_t num_partitions);
// tf.dynamic_stitch: merged[indices[m][...]] = data[m][...] (indices int32, each a prefix of its
// data's shape; where two write one index the later wins); rows never written are zero. The
// result has max index + 1 rows.
Output dynamic_stitch(const Scope& s, const std::vector<Output>& indices, const std::vector<Output>& data);
// For ids (int32/int64) over `num_rows` rows split into `num_shards` shards as above: {the shard
// of each id (int32), its row in that shard (ids' dtype), its position 0..n-1 in ids (int32)},
// each of ids' shape; an id outside [0, num_rows) fails the step naming the op.
std::vector<Output> partition_ids(const Scope& s, Input ids, int64_t num_shards, int64_t num_rows,
                                  const std::string& strategy);
// Sums the slices of `data` into [num_segments] + data.shape[ids.rank:] by `segment_ids` (a prefix
// of data's shape, int32/int64). Negative ids are dropped; an id >= num_segments is an error.
// `num_segments`: an int32/int64 scalar or one-element tensor.
Output unsorted_segment_sum(const Scope& s, Input data, Input segment_ids, Input num_segments);
Output unsorted_segment_sum(const Scope& s, Input data, Input segment_ids, int64_t num_segments);
// Joins `values` (same dtype and rank, equal dims except `axis`, which may be negative) along
// `axis`.
Output concat(const Scope& s, const std::vector<Output>& values, int64_t axis);
// Concat's gradient: the part of `dy` that values[index] became (the values lend their shapes).
Output concat_part(const Scope& s, Input dy, const std::vector<Output>& values, int64_t axis, int64_t index);
// x[begin[i] : begin[i] + size[i]] in every dim i; size -1 takes the rest of that dim.
Output slice(const Scope& s, Input x, const std::vector<int64_t>& begin, const std::vector<int64_t>& size);
// Slice's gradient: zeros of x's shape with dy placed at `begin`.
Output slice_grad(const Scope& s, Input dy, Input x, const std::vector<int64_t>& begin,
                  const std::vector<int64_t>& size);
// A sparse value, TensorFlow's IndexedSlices: rows `values` ([n] + rows' shape) for the rows
// `indices` ([n], int32/int64; duplicates allowed) of a dense tensor of run-time shape
// `dense_shape` (int64 vector) and static shape `shape`. The node's output is that dense tensor
// (rows summed, absent rows zero), computed only when something consumes it; a gather's gradient
// is one, and optimizers read its inputs instead to update only those rows.
Output indexed_slices(const Scope& s, Input indices, Input values, Input dense_shape, const Shape& shape);
// True when `o` is the output of an IndexedSlices node (its inputs are indices, values, dense_shape).
bool is_indexed_slices(const Output& o);
Output sigmoid(const Scope& s, Input x);  // 1 / (1 + exp(-x)), floating types
Output tanh(const Scope& s, Input x);
Output l2_loss(const Scope& s, Input x);  // sum(x^2) / 2, a scalar
// `num_split` equal parts of x along `axis` (the dim must divide evenly).
std::vector<Output> split(const Scope& s, Input x, int64_t num_split, int64_t axis);
// values (same dtype and shape) stacked along a new dim `axis` (negative counts from the end of
// the result's dims).
Output stack(const Scope& s, const std::vector<Output>& values, int64_t axis = 0);
// Inverted dropout: each element is zeroed with probability `rate` (in [0, 1)) and the others
// scaled by 1 / (1 - rate). The masks are drawn from (seed, run number of this node, element):
// the same seed gives the same sequence of masks in every process; each run draws a new mask.
Output dropout(const Scope& s, Input x, double rate, int64_t seed);
// logits [batch, classes] float32, labels [batch] int32/int64 -> {loss [batch], backprop}.
// A label outside [0, classes) fails the step with InvalidArgument naming the op.
std::vector<Output> sparse_softmax_cross_entropy_with_logits(const Scope& s, Input logits, Input labels);

}  // namespace ops

// tf.nn's Python functions whose result differs from the raw op's that ops:: builds: arguments in
// TensorFlow's Python order (labels, then logits), one result.
namespace nn {
// tf.nn.softmax_cross_entropy_with_logits(labels=, logits=): the loss [batch] only (the raw op,
// ops::softmax_cross_entropy_with_logits(s, logits, labels), also gives the backprop). labels
// [batch, classes] (one-hot or probabilities), logits [batch, classes], float32.
Output softmax_cross_entropy_with_logits(const Scope& s, Input labels, Input logits);
// tf.nn.sparse_softmax_cross_entropy_with_logits(labels=, logits=): the loss [batch] only; labels
// [batch] int32/int64 class indices (one outside [0, classes) fails the step naming the op).
Output sparse_softmax_cross_entropy_with_logits(const Scope& s, Input labels, Input logits);
}  // namespace nn
}  // namespace actorflow
