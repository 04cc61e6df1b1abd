// tf.compat.v1.layers (include/actorflow/layers.h): compositions of ops:: builders and
// train::get_variable. Nothing here has a kernel or a gradient of its own: every layer is made
// of ops whose gradients graph/grads.cc defines (checked by finite differences in
// tests/layers_test.cc), so gradients(), placement and the optimizers treat a layer's nodes as
// any others.
#include "actorflow/layers.h"

#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "graph/ops_variables.h"
#include "train/collections.h"

namespace actorflow {
namespace layers {
namespace {

// Marks an op as a member of the UPDATE_OPS collection (a node attribute, so the record travels
// with graph copies, as train/variables.cc's "_trainable").
constexpr const char* kUpdateOp = "_update_op";

// The layer's name scope: `name`, or `kind` made unique in the graph. An explicit name already
// taken is AlreadyExists (its variables would collide). Empty with the error recorded.
std::optional<Scope> layer_scope(const Scope& s, const std::string& name, const char* kind) {
  if (!s.ok()) return std::nullopt;
  if (name.empty()) return s.new_sub_scope(kind);
  if (name.find('/') != std::string::npos || name.find(':') != std::string::npos) {
    s.update_status(InvalidArgument(std::string(kind) + " '" + name + "': a layer's name may not contain '/' or ':'"));
    return std::nullopt;
  }
  Scope out = s.new_sub_scope(name);
  if (out.name_prefix() != s.name_prefix() + name + "/") {
    s.update_status(AlreadyExists(std::string(kind) + " '" + s.name_prefix() + name +
                                  "': the name is already used in this graph; a layer's variables are named "
                                  "after it, so give each layer its own name (or none)"));
    return std::nullopt;
  }
  return out;
}

// "<kind> '<scope>'" for error messages.
std::string where(const char* kind, const Scope& ls) {
  std::string n = ls.name_prefix();
  if (!n.empty()) n.pop_back();
  return std::string(kind) + " '" + n + "'";
}

// A layer's beginning: its scope, its input in that scope, and "<kind> '<scope>'" for errors.
struct Layer {
  Scope scope;
  Output in;
  std::string where;
};
// Empty with the error recorded when the name is taken or the input is invalid.
std::optional<Layer> begin_layer(const Scope& s, const std::string& name, const char* kind, const Input& x) {
  std::optional<Scope> ls = layer_scope(s, name, kind);
  if (!ls) return std::nullopt;
  Output in = ls->as_output(x);
  if (!in.valid()) return std::nullopt;
  return Layer{*ls, in, where(kind, *ls)};
}

Output fail(const Scope& ls, const std::string& what) {
  ls.update_status(InvalidArgument(what));
  return Output();
}

// "VALID" / "SAME" from either case; empty on anything else.
std::string padding_attr(const std::string& p) {
  std::string u;
  for (char c : p) u.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return u == "VALID" || u == "SAME" ? u : std::string();
}

// What a layer's `training` argument says: 1 / 0 for a constant true / false (decided when
// built), -1 for a bool scalar Output (decided at each run; *flag is set to it). Records the
// error and returns -2 when it is not a bool scalar.
int training_mode(const Scope& ls, const std::string& w, const Input& training, Output* flag) {
  if (!training.is_output()) {
    const Tensor& t = training.tensor();
    if (t.dtype() == DType::kBool && t.num_elements() == 1) return t.data<bool>()[0] ? 1 : 0;
    ls.update_status(InvalidArgument(w + ": training must be a bool scalar, got a constant of " +
                                     dtype_name(t.dtype()) + " " + t.shape().to_string()));
    return -2;
  }
  const Output& o = training.output();
  if (!o.valid()) return -2;
  if (o.dtype() != DType::kBool || (!o.shape().unknown_rank() && o.shape().rank() != 0)) {
    ls.update_status(InvalidArgument(w + ": training must be a bool scalar, got '" + o.name() + "' of " +
                                     dtype_name(o.dtype()) + " " + o.shape().to_string()));
    return -2;
  }
  *flag = o;
  return -1;
}

bool positive(const std::array<int64_t, 2>& v) { return v[0] >= 1 && v[1] >= 1; }

std::string pair_str(const std::array<int64_t, 2>& v) {
  return "[" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + "]";
}

// A dropout seed from the layer's scope (train::name_seed, kept non-negative).
int64_t layer_seed(const Scope& ls) {
  return static_cast<int64_t>(train::name_seed(ls.name_prefix()) & 0x7fffffffffffffffull);
}

// Adds the bias variable (if wanted) and the activation to y, in the layer's scope.
Output finish(const Scope& ls, Output y, int64_t units, DType dtype, const Activation& activation,
              const LayerOptions& o) {
  if (o.use_bias) {
    Output bias = train::get_variable(ls, "bias", Shape{units}, dtype,
                                      o.bias_initializer ? o.bias_initializer : train::zeros_initializer(),
                                      o.trainable);
    y = ops::bias_add(ls, y, bias);
  }
  if (activation && y.valid()) y = activation(ls, y);
  return y;
}

Output pool(const Scope& s, Input x, std::array<int64_t, 2> size, std::array<int64_t, 2> strides,
            const std::string& padding, const std::string& name, bool max) {
  const char* kind = max ? "max_pooling2d" : "average_pooling2d";
  std::optional<Layer> layer = begin_layer(s, name, kind, x);
  if (!layer) return Output();
  const Scope& ls = layer->scope;
  const Output& in = layer->in;
  const std::string& w = layer->where;
  if (in.shape().unknown_rank() || in.shape().rank() != 4)
    return fail(ls, w + ": needs an NHWC input of rank 4, got " + in.shape().to_string());
  if (!positive(size) || !positive(strides))
    return fail(ls, w + ": pool_size and strides must be >= 1, got " + pair_str(size) + " and " + pair_str(strides));
  const std::string pad = padding_attr(padding);
  if (pad.empty()) return fail(ls, w + ": padding must be \"valid\" or \"same\", got \"" + padding + "\"");
  const std::vector<int64_t> k{1, size[0], size[1], 1}, st{1, strides[0], strides[1], 1};
  return max ? ops::max_pool(ls, in, k, st, pad) : ops::avg_pool(ls, in, k, st, pad);
}

}  // namespace

Output dense(const Scope& s, Input x, int64_t units, const Activation& activation, const LayerOptions& o) {
  std::optional<Layer> layer = begin_layer(s, o.name, "dense", x);
  if (!layer) return Output();
  const Scope& ls = layer->scope;
  const Output& in = layer->in;
  const std::string& w = layer->where;
  if (units < 1) return fail(ls, w + ": units must be >= 1, got " + std::to_string(units));
  const Shape& shape = in.shape();
  if (shape.unknown_rank() || shape.rank() < 2 || shape.dim(shape.rank() - 1) < 0)
    return fail(ls, w + ": needs an input of rank >= 2 whose last dimension is known, got " + shape.to_string());
  const int rank = shape.rank();
  const int64_t in_dim = shape.dim(rank - 1);
  std::vector<int64_t> out_dims{-1};  // rank > 2: [-1, d1, .., units]
  for (int i = 1; i + 1 < rank; ++i) {
    if (shape.dim(i) < 0)
      return fail(ls, w + ": the dimensions between the first and the last must be known, got " + shape.to_string());
    out_dims.push_back(shape.dim(i));
  }
  out_dims.push_back(units);
  Output kernel;
  if (o.kernel_partitioner) {
    Result<train::PartitionedVariable> pv = train::get_partitioned_variable(
        ls, "kernel", Shape{in_dim, units}, o.kernel_partitioner, in.dtype(), o.kernel_initializer, o.trainable);
    if (!pv.ok()) return fail(ls, w + ": " + pv.status().message());
    kernel = pv->shards.size() == 1 ? pv->shards[0] : ops::concat(ls, pv->shards, 0);
  } else {
    kernel = train::get_variable(ls, "kernel", Shape{in_dim, units}, in.dtype(), o.kernel_initializer, o.trainable);
  }
  Output flat = rank == 2 ? in : ops::reshape(ls, in, {-1, in_dim});
  // The activation is elementwise, so it may run before the reshape back.
  Output y = finish(ls, ops::matmul(ls, flat, kernel), units, in.dtype(), activation, o);
  return rank > 2 ? ops::reshape(ls, y, out_dims) : y;
}

Output conv2d(const Scope& s, Input x, int64_t filters, std::array<int64_t, 2> kernel_size,
              std::array<int64_t, 2> strides, const std::string& padding, const Activation& activation,
              const LayerOptions& o) {
  std::optional<Layer> layer = begin_layer(s, o.name, "conv2d", x);
  if (!layer) return Output();
  const Scope& ls = layer->scope;
  const Output& in = layer->in;
  const std::string& w = layer->where;
  const Shape& shape = in.shape();
  if (shape.unknown_rank() || shape.rank() != 4 || shape.dim(3) < 0)
    return fail(ls, w + ": needs an NHWC input of rank 4 whose channels are known, got " + shape.to_string());
  if (filters < 1) return fail(ls, w + ": filters must be >= 1, got " + std::to_string(filters));
  if (!positive(kernel_size) || !positive(strides))
    return fail(ls, w + ": kernel_size and strides must be >= 1, got " + pair_str(kernel_size) + " and " +
                        pair_str(strides));
  const std::string pad = padding_attr(padding);
  if (pad.empty()) return fail(ls, w + ": padding must be \"valid\" or \"same\", got \"" + padding + "\"");
  Output kernel = train::get_variable(ls, "kernel", Shape{kernel_size[0], kernel_size[1], shape.dim(3), filters},
                                      in.dtype(), o.kernel_initializer, o.trainable);
  Output y = ops::conv2d(ls, in, kernel, {1, strides[0], strides[1], 1}, pad);
  return finish(ls, y, filters, in.dtype(), activation, o);
}

Output max_pooling2d(const Scope& s, Input x, std::array<int64_t, 2> pool_size, std::array<int64_t, 2> strides,
                     const std::string& padding, const std::string& name) {
  return pool(s, x, pool_size, strides, padding, name, true);
}

Output average_pooling2d(const Scope& s, Input x, std::array<int64_t, 2> pool_size, std::array<int64_t, 2> strides,
                         const std::string& padding, const std::string& name) {
  return pool(s, x, pool_size, strides, padding, name, false);
}

Output flatten(const Scope& s, Input x, const std::string& name) {
  std::optional<Layer> layer = begin_layer(s, name, "flatten", x);
  if (!layer) return Output();
  const Scope& ls = layer->scope;
  const Output& in = layer->in;
  const std::string& w = layer->where;
  const Shape& shape = in.shape();
  if (shape.unknown_rank() || shape.rank() < 1)
    return fail(ls, w + ": needs an input of rank >= 1 with a known rank, got " + shape.to_string());
  int64_t n = 1;
  for (int i = 1; i < shape.rank(); ++i) {
    if (shape.dim(i) < 0)
      return fail(ls, w + ": the dimensions after the first must be known, got " + shape.to_string());
    n *= shape.dim(i);
  }
  return ops::reshape(ls, in, {-1, n});
}

Output dropout(const Scope& s, Input x, double rate, Input training, int64_t seed, const std::string& name) {
  std::optional<Layer> layer = begin_layer(s, name, "dropout", x);
  if (!layer) return Output();
  const Scope& ls = layer->scope;
  const Output& in = layer->in;
  const std::string& w = layer->where;
  if (!(rate >= 0.0 && rate < 1.0)) return fail(ls, w + ": rate must be in [0, 1), got " + std::to_string(rate));
  Output flag;
  const int mode = training_mode(ls, w, training, &flag);
  if (mode == -2) return Output();
  if (mode == 0) return ops::identity(ls, in);
  Output dropped = ops::dropout(ls, in, rate, seed != 0 ? seed : layer_seed(ls));
  return mode == 1 ? dropped : ops::select(ls, flag, dropped, in);
}

Output batch_normalization(const Scope& s, Input x, Input training, const BatchNormOptions& o) {
  std::optional<Layer> layer = begin_layer(s, o.name, "batch_normalization", x);
  if (!layer) return Output();
  const Scope& ls = layer->scope;
  const Output& in = layer->in;
  const std::string& w = layer->where;
  Output flag;
  const int mode = training_mode(ls, w, training, &flag);
  if (mode == -2) return Output();
  const Shape& shape = in.shape();
  if (shape.unknown_rank() || shape.rank() < 2)
    return fail(ls, w + ": needs an input of known rank >= 2 (a batch and features), got " + shape.to_string());
  const int rank = shape.rank();
  const int64_t axis = o.axis < 0 ? o.axis + rank : o.axis;
  if (axis < 0 || axis >= rank)
    return fail(ls, w + ": axis " + std::to_string(o.axis) + " is outside an input of rank " + std::to_string(rank));
  const int64_t c = shape.dim(static_cast<int>(axis));
  if (c < 0)
    return fail(ls, w + ": the features dimension (axis " + std::to_string(o.axis) + ") must be known, got " +
                        shape.to_string());
  if (!(o.momentum >= 0.0 && o.momentum <= 1.0))
    return fail(ls, w + ": momentum must be in [0, 1], got " + std::to_string(o.momentum));
  if (!(o.epsilon > 0.0)) return fail(ls, w + ": epsilon must be > 0, got " + std::to_string(o.epsilon));
  const DType dt = in.dtype();
  Output gamma, beta;
  if (o.scale) gamma = train::get_variable(ls, "gamma", Shape{c}, dt, train::constant_initializer(1.0), o.trainable);
  if (o.center) beta = train::get_variable(ls, "beta", Shape{c}, dt, train::zeros_initializer(), o.trainable);
  Output moving_mean = train::get_variable(ls, "moving_mean", Shape{c}, dt, train::zeros_initializer(), false);
  Output moving_var = train::get_variable(ls, "moving_variance", Shape{c}, dt, train::constant_initializer(1.0), false);
  if (!ls.ok()) return Output();

  // Per-feature values [C] broadcast against x: as they are when the features are the last axis,
  // else reshaped to [1, .., C, .., 1].
  std::vector<int64_t> bdims(static_cast<size_t>(rank), 1);
  bdims[static_cast<size_t>(axis)] = c;
  auto bcast = [&](const Output& v) { return axis == rank - 1 ? v : ops::reshape(ls, v, bdims); };
  std::vector<int64_t> reduce_axes;
  for (int64_t i = 0; i < rank; ++i)
    if (i != axis) reduce_axes.push_back(i);

  Output mean = moving_mean, var = moving_var;
  if (mode != 0) {
    Output batch_mean = ops::reduce_mean(ls, in, reduce_axes);
    Output batch_var = ops::reduce_mean(ls, ops::square(ls, ops::sub(ls, in, bcast(batch_mean))), reduce_axes);
    mean = mode == 1 ? batch_mean : ops::select(ls, flag, batch_mean, moving_mean);
    var = mode == 1 ? batch_var : ops::select(ls, flag, batch_var, moving_var);
    // moving += (batch - moving) * decay on the variable's device; decay is 1 - momentum when
    // training and 0 (no change) when a run-time flag says not.
    const float train_decay = static_cast<float>(1.0 - o.momentum);
    Output decay = mode == 1 ? ls.as_output(train_decay) : ops::select(ls, flag, train_decay, 0.0f);
    for (auto [moving, batch] : {std::pair<Output, Output>{moving_mean, batch_mean}, {moving_var, batch_var}}) {
      Output update = ops::assign_add(ls, moving, ops::mul(ls, ops::sub(ls, batch, moving), decay));
      if (update.valid()) update.node()->attrs.set(kUpdateOp, true);
    }
  }
  Output y = ops::div(ls, ops::sub(ls, in, bcast(mean)),
                      bcast(ops::sqrt(ls, ops::add(ls, var, static_cast<float>(o.epsilon)))));
  if (o.scale) y = ops::mul(ls, y, bcast(gamma));
  if (o.center) y = ops::add(ls, y, bcast(beta));
  return y;
}

std::vector<Output> update_ops(const Scope& s) {
  std::vector<Output> out;
  Graph* g = s.graph();
  const std::string& prefix = s.name_prefix();
  for (int i = 0; i < g->num_nodes(); ++i) {
    Node* n = g->node(i);
    if (n->attrs.get_or<bool>(kUpdateOp, false) && n->name.compare(0, prefix.size(), prefix) == 0)
      out.emplace_back(n, 0);
  }
  return out;
}

}  // namespace layers
}  // namespace actorflow
