// Layers, after TensorFlow 1.x's tf.compat.v1.layers: each call creates its variables through
// train::get_variable (so a device function such as a ReplicaDeviceSetter's places them on the
// parameter servers, global_variables_initializer initialises them, Saver and checkpoints keep
// them) and builds its computation in a name scope of its own.
//
//   #include <actorflow/layers.h>
//   namespace af = actorflow;
//   auto net = af::ops::reshape(root, x, {-1, 28, 28, 1});
//   net = af::layers::conv2d(root, net, 32, {5, 5}, {1, 1}, "same", af::ops::relu);
//   net = af::layers::max_pooling2d(root, net, {2, 2}, {2, 2});
//   net = af::layers::flatten(root, net);
//   net = af::layers::dense(root, net, 1024, af::ops::relu);
//   auto logits = af::layers::dense(root, net, 10);
//
// Names: a layer's scope is its `name` (the default is the layer's kind: "dense", "conv2d",
// "batch_normalization", ...), made unique in the graph as TensorFlow does ("dense", "dense_1",
// ...), under the caller's name prefix. Its variables are "<scope>/kernel", "<scope>/bias",
// "<scope>/gamma", "<scope>/beta", "<scope>/moving_mean", "<scope>/moving_variance", as
// TensorFlow names them, so a TensorFlow 1.x checkpoint of the same model matches name for name.
// An explicit `name` already used in the graph is an AlreadyExists error (a layer's variables
// are named after it; there is no variable reuse).
//
// Errors: as the ops:: builders, a layer returns an invalid Output and records
// "<layer> '<scope>': <why>" in the scope (an input of the wrong rank, a dimension the layer
// needs that is not known when the graph is built, bad padding, pool or stride sizes); later
// builders on the graph then do nothing; scope.ok() / Session::run report it. Nothing throws.
//
// Thread-safety: graph construction, not thread-safe (build a graph from one thread). Every
// returned Output points into the scope's graph. Brings no CAF header.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "actorflow/train.h"
#include "graph/ops.h"
#include "graph/scope.h"

namespace actorflow {
namespace layers {

// An activation applied to a layer's output, e.g. ops::relu, ops::sigmoid, ops::tanh; an
// empty function is linear (TensorFlow's activation=None).
using Activation = std::function<Output(const Scope& s, Input x)>;

// What dense and conv2d take beyond TensorFlow's positional arguments. Set what differs.
struct LayerOptions {
  bool use_bias = true;
  train::Initializer kernel_initializer;   // empty: glorot_uniform seeded by the variable's name
  train::Initializer bias_initializer;     // empty: zeros
  bool trainable = true;                   // false keeps the variables out of trainable_variables
  std::string name;                        // empty: the layer's kind ("dense", "conv2d")
  // dense only: split the kernel by rows into shard variables "<scope>/kernel/part_<i>"
  // (train::get_partitioned_variable, as a variable_scope's partitioner), each placed on its own
  // by the scope's device function, concatenated where the layer runs. Empty: one variable.
  train::Partitioner kernel_partitioner;
};

// tf.layers.dense: activation(x . kernel + bias), kernel [in, units] with `in` x's last
// dimension (known when the graph is built). x of rank 2, or higher (the kernel applies to the
// last dimension: [.., in] -> [.., units]; the dimensions between the first and the last must
// be known). units >= 1.
Output dense(const Scope& s, Input x, int64_t units, const Activation& activation = {},
             const LayerOptions& options = {});

// tf.layers.conv2d on NHWC input x (rank 4, channels known): kernel [kh, kw, channels, filters],
// strides {sh, sw}, padding "valid" or "same" (either case; TensorFlow's windows), then bias and
// activation. filters >= 1, sizes and strides >= 1.
Output conv2d(const Scope& s, Input x, int64_t filters, std::array<int64_t, 2> kernel_size,
              std::array<int64_t, 2> strides = {1, 1}, const std::string& padding = "valid",
              const Activation& activation = {}, const LayerOptions& options = {});

// tf.layers.max_pooling2d / average_pooling2d on NHWC input (rank 4): pool_size and strides
// >= 1, padding "valid" or "same". An average over a SAME window counts only the input
// elements it covers, as TensorFlow's. `name` empty: "max_pooling2d" / "average_pooling2d".
Output max_pooling2d(const Scope& s, Input x, std::array<int64_t, 2> pool_size, std::array<int64_t, 2> strides,
                     const std::string& padding = "valid", const std::string& name = "");
Output average_pooling2d(const Scope& s, Input x, std::array<int64_t, 2> pool_size,
                         std::array<int64_t, 2> strides, const std::string& padding = "valid",
                         const std::string& name = "");

// tf.layers.flatten: [batch, d1, d2, ...] -> [batch, d1 * d2 * ...]. The dimensions after the
// first must be known when the graph is built; the batch may be unknown. Rank 1 gives [batch, 1].
Output flatten(const Scope& s, Input x, const std::string& name = "");

// `training` (dropout, batch_normalization): a bool scalar. A constant (true / false) decides
// when the graph is built; an Output (e.g. ops::placeholder_with_default(s, false, "training"),
// fed true for the training steps) decides at each run, so one graph trains and evaluates with
// the same variables, as TensorFlow's `training=` tensor. Both branches are then built.

// tf.layers.dropout: when training, each element is zeroed with probability rate (in [0, 1))
// and the rest scaled by 1 / (1 - rate), a new mask each run drawn from `seed` (0: a seed made
// from the layer's name, the same in every process); otherwise x itself.
Output dropout(const Scope& s, Input x, double rate, Input training, int64_t seed = 0, const std::string& name = "");

struct BatchNormOptions {
  int64_t axis = -1;        // the features axis (negative counts from the end)
  double momentum = 0.99;   // moving = moving * momentum + batch * (1 - momentum)
  double epsilon = 1e-3;
  bool center = true;       // beta
  bool scale = true;        // gamma
  bool trainable = true;    // gamma and beta trainable (the moving statistics never are)
  std::string name;         // empty: "batch_normalization"
};

// tf.layers.batch_normalization: y = gamma * (x - mean) / sqrt(var + epsilon) + beta per feature
// along `axis` (x's dimension there known). When training, mean and var are the batch's (over
// every other axis; the biased variance, as tf.nn.moments); otherwise the variables
// "moving_mean" and "moving_variance". Two update ops are recorded that move the moving
// statistics towards the batch's by (1 - momentum) when training (and leave them when not): run
// them with the training step (update_ops below, TensorFlow's UPDATE_OPS collection). A constant
// `training` false records none.
Output batch_normalization(const Scope& s, Input x, Input training, const BatchNormOptions& options = {});

// tf.get_collection(tf.GraphKeys.UPDATE_OPS): the update ops recorded by the layers (batch
// normalization's moving averages) whose names lie under s's name prefix (all at a root scope),
// in creation order. A snapshot: make the train op wait for them, as in TensorFlow,
//   auto train_op = opt.minimize(s.with_control_dependencies(layers::update_ops(s)), loss, gs);
std::vector<Output> update_ops(const Scope& s);

}  // namespace layers
}  // namespace actorflow
