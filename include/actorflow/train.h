// The training API, after TensorFlow 1.x's tf.train: variables collected per graph, their
// initializers, the global step, and optimizers that build one update op per variable.
//
//   #include <actorflow/train.h>
//   namespace af = actorflow;
//   af::Scope root = af::Scope::root();
//   af::Scope ps = root.with_device("/job:ps/task:0"), worker = root.with_device("/job:worker/task:0");
//   auto w = af::train::get_variable(ps, "w", {784, 10});        // glorot_uniform, trainable
//   auto gs = af::train::get_or_create_global_step(ps);          // int64, not trainable
//   ... loss ...
//   auto train_op = af::train::AdamOptimizer(1e-4f).minimize(worker, loss, gs);  // Result<Output>
//   auto init = af::train::global_variables_initializer(root);                  // Result<Output>
//   af::Session sess(root, server.target());
//   sess.run({}, {}, {*init});
//   for (...) sess.run(feeds, {loss}, {*train_op});
//
// Everything here builds graph nodes: like the ops:: builders it is not thread-safe (build a
// graph from one thread) and includes no CAF header. Every returned Output points into the
// scope's graph and stays valid as long as that graph lives (the Scope or a Session holds it).
//
// Where things run: each update op is requested on its variable's device (the variable's
// parameter server), so the update and the optimizer's slots (momentum accumulator, Adam m/v,
// Adagrad accumulator, RMSProp ms/mom) live in the variable's actor there; a worker sends a
// gradient, never a value. The optimizer's hyper-parameter constants are built once per
// apply_gradients and per variable device, on that device. Gradient ops go where gradients()
// puts them (next to the forward ops, see graph/gradients.h).
//
// Errors: functions returning Result<> report what is wrong and where ("Adam.minimize: no
// variables to optimize", "apply_gradients: 'x' is a Const, not a variable"); they return the
// scope's first error when the graph was already broken. Functions returning Output record the
// error in the scope (scope.ok() / Session::run report it) and return an invalid Output, as the
// ops:: builders do. Nothing here throws or aborts on bad input.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "graph/ops_variables.h"
#include "graph/scope.h"

#include "actorflow/saver.h"       // train::Saver, train::latest_checkpoint
#include "actorflow/supervisor.h"  // Supervisor (tf.train.Supervisor)

namespace actorflow {
namespace train {

// ---- initializers ----------------------------------------------------------------------
// Builds, in scope `s`, the op computing a variable's initial value of `shape`/`dtype`.
// Copyable and stateless; may be called from any thread on distinct graphs.
using Initializer = std::function<Output(const Scope& s, const Shape& shape, DType dtype)>;
// tf.zeros_initializer: any dtype.
Initializer zeros_initializer();
// tf.constant_initializer(value): any numeric dtype (value is converted).
Initializer constant_initializer(double value);
// tf.random_uniform_initializer / tf.truncated_normal_initializer / tf.glorot_uniform_initializer:
// float32 only (another dtype fails the initializer's Assign with a dtype error naming the
// variable). Seeded: the same seed gives the same values on every run (graph/ops_variables.h).
Initializer random_uniform_initializer(float minval, float maxval, uint64_t seed);
Initializer truncated_normal_initializer(float mean, float stddev, uint64_t seed);
Initializer glorot_uniform_initializer(uint64_t seed);

// ---- variables and their collections ---------------------------------------------------
// tf.get_variable without reuse: creates variable `name` (under s's name prefix, on s's device)
// of `shape`/`dtype`, builds its initializer op `<name>/Assign` of `initializer`'s value (built
// as `<name>/Initializer` in s, without s's control dependencies) and records it, so
// global_variables_initializer runs it. The default initializer is glorot_uniform seeded from a
// hash (FNV-1a) of the variable's full name for float32 (each variable gets its own values, the
// same in every run and process), zeros for other dtypes. `trainable` false keeps it out of
// trainable_variables. Returns the variable's Output (reading it gives its value). AlreadyExists
// in the scope when the name is taken (no reuse, no renaming: a variable's name is its identity on
// the parameter server); other errors as the ops:: builders report them.
Output get_variable(const Scope& s, const std::string& name, const Shape& shape, DType dtype = DType::kFloat32,
                    const Initializer& initializer = {}, bool trainable = true);
// Gives `var` (a VariableV2 Output, e.g. from ops::variable) the initializer var = value: builds
// ops::assign(s, var, value) and records it as the variable's initializer, replacing any
// earlier record. Returns the Assign's Output (invalid, with the error in s, when var is not a
// variable or value does not match it).
Output set_initial_value(const Scope& s, const Output& var, Input value);

// ---- partitioned variables -------------------------------------------------------------
// How many shards (along dim 0) a variable of `shape`/`dtype` is split into: >= 1, at most
// shape[0]. Copyable and stateless.
using Partitioner = std::function<Result<int64_t>(const Shape& shape, DType dtype)>;
// tf.fixed_size_partitioner(num_shards): num_shards shards (fewer when the variable has fewer
// rows). num_shards < 1 is InvalidArgument from get_partitioned_variable.
Partitioner fixed_size_partitioner(int64_t num_shards);
// tf.min_max_variable_partitioner: as many shards as keep each at least `min_slice_size` bytes,
// at most `max_partitions` (and at most shape[0]); at least one.
Partitioner min_max_variable_partitioner(int64_t max_partitions, int64_t min_slice_size = 256 << 10);
// Where each shard lives: the scope to create shard `shard_shape`/`dtype` in (e.g. a
// ReplicaDeviceSetter's for_variable, which spreads shards round robin or by bytes over the ps
// tasks). Called once per shard, in order.
using ShardPlacement = std::function<Scope(const Scope& s, const Shape& shard_shape, DType dtype)>;

// A variable split by rows into shard variables, as tf's PartitionedVariable: one logical
// variable of `shape` whose rows [offsets[i], offsets[i] + shards[i].shape()[0]) are shard i.
// A value type; its Outputs point into the graph it was built in.
struct PartitionedVariable {
  std::string name;             // the logical variable's full name ("emb")
  Shape shape;                  // the logical shape
  DType dtype = DType::kFloat32;
  std::vector<Output> shards;   // "emb/part_0", "emb/part_1", ... (VariableV2)
  std::vector<int64_t> offsets; // first row of each shard
};

// tf.get_variable(name, shape, partitioner=...): creates the shard variables "<name>/part_<i>"
// (under s's name prefix), shard i of TensorFlow's layout (rows / n rows each, the first rows % n
// shards one more), each on the device `place` picks (default: s's device) with its own
// initializer. Every shard records the logical variable (its name, shape and offset) so that a
// Saver or the Supervisor saves them as one tensor of the full shape under the logical name, and
// restores it into whatever shards the reading graph has. Initial values: `initializer` called
// per shard with the shard's shape; the default for float32 is glorot_uniform with the limit of
// the full shape (as TF computes it), seeded per shard, zeros for other dtypes. `trainable` as
// get_variable. Errors (InvalidArgument / AlreadyExists naming the variable): an empty name, a
// rank-0 or unknown shape, a partitioner error or a count outside [1, shape[0]], a taken name.
Result<PartitionedVariable> get_partitioned_variable(const Scope& s, const std::string& name, const Shape& shape,
                                                     const Partitioner& partitioner, DType dtype = DType::kFloat32,
                                                     const Initializer& initializer = {}, bool trainable = true,
                                                     const ShardPlacement& place = {});
// embedding_lookup on a partitioned variable: ops::embedding_lookup(s, v.shards, ids, strategy)
// (graph/ops.h: each id goes only to its shard; "mod" or "div" as TensorFlow's).
Output embedding_lookup(const Scope& s, const PartitionedVariable& v, Input ids, const std::string& strategy = "mod");

// tf.global_variables(scope) / tf.trainable_variables(scope): every variable of s's graph built
// with ops::variable (so also get_variable and get_or_create_global_step) whose name lies under
// s's name prefix (every variable at a root scope), in creation order; trainable_variables only
// those created trainable. A snapshot: variables created later are not added to it.
std::vector<Output> global_variables(const Scope& s);
std::vector<Output> trainable_variables(const Scope& s);

// tf.variables_initializer(var_list): one NoOp named "init" (made unique) in s, without s's
// control dependencies, whose control inputs are the recorded initializers of `var_list`.
// Running it initialises them all (in any order). InvalidArgument when an entry is not a
// variable; FailedPrecondition naming every variable without an initializer (build it with
// get_variable or give it one with set_initial_value). An empty list gives a NoOp that does
// nothing.
Result<Output> variables_initializer(const Scope& s, const std::vector<Output>& var_list);
// tf.global_variables_initializer(): variables_initializer(s, global_variables(s)).
Result<Output> global_variables_initializer(const Scope& s);

// tf.train.get_or_create_global_step: the graph's global step, an int64 scalar non-trainable
// variable, created as "global_step" (under s's prefix, on s's device) with initializer 0 when
// the graph has none. An existing one is a variable built by ops::global_step or this function,
// or any variable named "global_step"; if it has no initializer, the 0 initializer is attached.
// Returns the variable (invalid, with the error in s, when the scope is broken).
Output get_or_create_global_step(const Scope& s);
// tf.train.get_global_step: the existing global step as above, or an invalid Output (no error).
Output get_global_step(const Scope& s);

// ---- optimizers ------------------------------------------------------------------------
// (gradient, variable). The gradient is an invalid Output when the loss does not depend on the
// variable (TensorFlow's None); apply_gradients skips such pairs.
using GradAndVar = std::pair<Output, Output>;

// tf.train.Optimizer. An optimizer object holds only its hyper-parameters: it is immutable
// after construction, may be used for any number of graphs and from several threads at once
// on distinct graphs. The per-variable state (slots) lives in the variable actors, one set per
// variable and update kind: two optimizers of the same kind applied to one variable share it.
class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // The name of the ops' sub-scope: "GradientDescent", "Momentum", "Adam", "Adagrad", "RMSProp".
  const std::string& name() const { return name_; }

  // The gradients of `loss` (summed over its elements) with respect to `var_list`, default
  // every trainable variable of the graph, in that order. Gradient ops are built by
  // gradients() in s. Errors: an invalid loss; an entry that is not a variable; a variable that
  // is not float32 (the update kernels need float32); an empty default list ("no variables to
  // optimize"); gradients() errors (an op without a gradient between them).
  Result<std::vector<GradAndVar>> compute_gradients(const Scope& s, const Output& loss,
                                                    const std::vector<Output>& var_list = {}) const;

  // One op that applies every pair's update (pairs without a gradient are skipped), each
  // requested on its variable's device. A sparse gradient (ops::indexed_slices, e.g. of an
  // embedding lookup) is applied row by row where the optimizer has a sparse form (gradient
  // descent, momentum, Adagrad, RMSProp, FTRL, and Adam lazily: the slots of absent rows stay as
  // they are), so only the rows travel; with `global_step` (a scalar variable: int64, int32, or
  // float32/float64 as TensorFlow 1.x programs often make it, counted by adding 1.0) the op
  // returned is global_step += 1 with control dependencies on all the updates (so the step
  // advances exactly once per run, after the updates, as TF does) and outputs the new step;
  // without, a NoOp grouping the updates. Ops live under the sub-scope name() of s. Errors:
  // an entry that is not a variable or not float32, a variable twice, no gradient at all,
  // a global_step that is not such a scalar variable, invalid hyper-parameters.
  Result<Output> apply_gradients(const Scope& s, const std::vector<GradAndVar>& grads_and_vars,
                                 const Output& global_step = Output()) const;

  // compute_gradients then apply_gradients.
  Result<Output> minimize(const Scope& s, const Output& loss, const Output& global_step = Output(),
                          const std::vector<Output>& var_list = {}) const;

 protected:
  // `hyper`: the hyper-parameters (name, value), built as float32 constants of those names in
  // this order and handed to apply_dense.
  Optimizer(std::string name, std::vector<std::pair<std::string, float>> hyper)
      : name_(std::move(name)), hyper_(std::move(hyper)) {}
  // OK or InvalidArgument naming the bad hyper-parameter.
  virtual Status validate() const { return Status::OK(); }
  // What a variable's synchronous accumulator applies to each averaged gradient when this
  // optimizer is wrapped in a SyncReplicasOptimizer: the update kind ("sgd", "momentum", "adam",
  // "adagrad", "rmsprop") and its hyper-parameters (the replica counts are filled in there). The
  // default has an empty kind: a SyncReplicasOptimizer around it reports Unimplemented.
  virtual ops::SyncOptions sync_update() const;
  // The value of hyper-parameter `i` as given to the constructor (i < their count).
  float hyper_value(size_t i) const { return hyper_[i].second; }
  // Builds the update op of `var` with `grad` in `s` (named "update_<var>"); `hyper` are the
  // constants of the hyper-parameters on the variable's device. Errors go to s.
  virtual Output apply_dense(const Scope& s, const std::vector<Output>& hyper, const Output& grad,
                             const Output& var) const = 0;
  // Builds the update of `var` with a sparse gradient: rows `values` for its rows `indices` (the
  // inputs of an ops::indexed_slices gradient, e.g. an embedding lookup's), updating only those
  // rows and their slots on the variable's task. An invalid Output (the default) means "no sparse
  // form": apply_gradients then applies the dense tensor. Errors go to s.
  virtual Output apply_sparse(const Scope& s, const std::vector<Output>& hyper, const Output& indices,
                              const Output& values, const Output& var) const {
    (void)s; (void)hyper; (void)indices; (void)values; (void)var;
    return Output();
  }

 private:
  // The hyper-parameter constants in `s` (on one variable device).
  std::vector<Output> prepare(const Scope& s) const;
  friend class SyncReplicasOptimizer;

  std::string name_;
  std::vector<std::pair<std::string, float>> hyper_;
};

// var -= learning_rate * grad.
class GradientDescentOptimizer : public Optimizer {
 public:
  explicit GradientDescentOptimizer(float learning_rate);

 protected:
  Output apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g, const Output& v) const override;
  Output apply_sparse(const Scope& s, const std::vector<Output>& h, const Output& indices, const Output& values,
                      const Output& v) const override;
  ops::SyncOptions sync_update() const override;
};

// accum = momentum * accum + grad; var -= learning_rate * accum (accum starts at 0).
class MomentumOptimizer : public Optimizer {
 public:
  MomentumOptimizer(float learning_rate, float momentum);

 protected:
  Output apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g, const Output& v) const override;
  Output apply_sparse(const Scope& s, const std::vector<Output>& h, const Output& indices, const Output& values,
                      const Output& v) const override;
  ops::SyncOptions sync_update() const override;
};

// Adam (Kingma and Ba) with TF 1.x's bias correction: for the variable's t-th update,
// lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t); m = beta1 m + (1 - beta1) g;
// v = beta2 v + (1 - beta2) g^2; var -= lr_t * m / (sqrt(v) + epsilon). t counts the variable's
// own Adam updates (TF counts apply_gradients runs; the same when every run updates every
// variable, which minimize does).
class AdamOptimizer : public Optimizer {
 public:
  explicit AdamOptimizer(float learning_rate = 0.001f, float beta1 = 0.9f, float beta2 = 0.999f,
                         float epsilon = 1e-8f);

 protected:
  Output apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g, const Output& v) const override;
  Output apply_sparse(const Scope& s, const std::vector<Output>& h, const Output& indices, const Output& values,
                      const Output& v) const override;
  ops::SyncOptions sync_update() const override;
};

// accum += grad^2; var -= learning_rate * grad / sqrt(accum); accum starts at
// initial_accumulator_value, which must be > 0 (apply_gradients checks).
class AdagradOptimizer : public Optimizer {
 public:
  explicit AdagradOptimizer(float learning_rate, float initial_accumulator_value = 0.1f);

 protected:
  Output apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g, const Output& v) const override;
  Output apply_sparse(const Scope& s, const std::vector<Output>& h, const Output& indices, const Output& values,
                      const Output& v) const override;
  ops::SyncOptions sync_update() const override;
  Status validate() const override;

 private:
  float initial_accumulator_value_;
};

// TF 1.x RMSProp (uncentered): ms = decay * ms + (1 - decay) * grad^2;
// mom = momentum * mom + learning_rate * grad / sqrt(ms + epsilon); var -= mom. As in TF 1.x,
// ms starts at 1 and mom at 0. A sparse gradient updates its rows' ms, mom and values only (TF's
// SparseApplyRMSProp).
class RMSPropOptimizer : public Optimizer {
 public:
  explicit RMSPropOptimizer(float learning_rate, float decay = 0.9f, float momentum = 0.0f,
                            float epsilon = 1e-10f);

 protected:
  Output apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g, const Output& v) const override;
  Output apply_sparse(const Scope& s, const std::vector<Output>& h, const Output& indices, const Output& values,
                      const Output& v) const override;
  ops::SyncOptions sync_update() const override;
};

// tf.train.FtrlOptimizer (FTRL-Proximal, the optimizer of wide-and-deep models), with
// p = -learning_rate_power: accum' = accum + grad^2;
// linear += grad' - (accum'^p - accum^p) / learning_rate * var (grad' = grad + 2 * l2_shrinkage * var);
// var = |linear| > l1 ? (sign(linear) * l1 - linear) / (accum'^p / learning_rate + 2 * l2) : 0.
// accum starts at initial_accumulator_value, linear at 0. Sparse gradients update their rows only.
// apply_gradients checks learning_rate > 0, learning_rate_power <= 0, the others >= 0.
class FtrlOptimizer : public Optimizer {
 public:
  explicit FtrlOptimizer(float learning_rate, float learning_rate_power = -0.5f,
                         float initial_accumulator_value = 0.1f, float l1_regularization_strength = 0.0f,
                         float l2_regularization_strength = 0.0f, float l2_shrinkage_regularization_strength = 0.0f);

 protected:
  Output apply_dense(const Scope& s, const std::vector<Output>& h, const Output& g, const Output& v) const override;
  Output apply_sparse(const Scope& s, const std::vector<Output>& h, const Output& indices, const Output& values,
                      const Output& v) const override;
  Status validate() const override;

 private:
  float initial_accumulator_value_;
  float l2_shrinkage_;
};

// tf.train.SyncReplicasOptimizer: synchronous data-parallel training around any optimizer above.
//
// Each replica's gradient of a variable goes to that variable's accumulator (in its variable
// actor, on its ps) tagged with the step it was computed at: the global step as the same run
// reads it (no token queue: the run itself waits until its step is done, so its next run reads
// the next step). Once `replicas_to_aggregate` gradients of the accumulator's step have arrived it
// applies their average once, with the wrapped optimizer's update (slots as that optimizer's),
// and releases the runs waiting on it; the global step's own accumulator adds 1 the same way.
//   - Stale gradients (of an earlier step than the accumulator's) are dropped at once and counted
//     (accumulator_stats); `total_num_replicas` > replicas_to_aggregate gives backup workers: the
//     slowest gradients of each step are the stale ones.
//   - A step that fails at one accumulator (its timeout passes: DeadlineExceeded to the waiting
//     runs; its actor restarts: Aborted) applies nothing there, and that accumulator realigns to
//     the step of the next gradient it gets: no accumulator lags behind the global step, so a
//     failure never turns into a livelock. Accumulators are independent (as TensorFlow's): each
//     applies at most one averaged update per step; a step that failed at one variable may have
//     applied at another.
//   - The sync deadline (`deadline_secs` > 0, [supervisor] sync_deadline_ms for the samples):
//     a step that has at least one gradient but fewer than replicas_to_aggregate when the
//     deadline passes (counted from its first gradient at each accumulator) closes short: the
//     average over the gradients it got is applied, the global step advances by one and the
//     waiting runs go on; the missing replicas' gradients arrive stale and are dropped. The
//     global step's accumulator logs a WARNING naming the step and the missing replicas (at most
//     one per 10 s) and counts actorflow_sync_short_steps_total; stale gradients count
//     actorflow_sync_stale_gradients_total (both on the global step's ps). Without a deadline a
//     step waits for all of them (up to timeout_secs, then fails), as TensorFlow's does.
//   - Each replica runs finish_op() once when it stops training. Once fewer than
//     replicas_to_aggregate replicas are left, every accumulator closes: the runs waiting there and
//     every later one fail with OutOfRange (TensorFlow's "queue closed", the loop's signal to
//     stop), so nobody waits for a gradient that will never come. close_op() closes at once (the
//     chief ends training). Assigning or restoring a variable re-opens its accumulator.
//
// Not thread-safe: apply_gradients records the variables it updates (for finish_op, close_op);
// build with one thread. The object holds no reference to `opt` (its update is copied).
class SyncReplicasOptimizer {
 public:
  // `total_num_replicas` <= 0 means replicas_to_aggregate. A gradient step that does not fill
  // within `timeout_secs` fails its waiting runs (DeadlineExceeded). `deadline_secs` > 0 (and
  // below timeout_secs) closes a step that did not fill in that time short instead (see above);
  // 0: no deadline. Bad arguments are reported by apply_gradients.
  SyncReplicasOptimizer(const Optimizer& opt, int replicas_to_aggregate, int total_num_replicas = 0,
                        double timeout_secs = 60, double deadline_secs = 0);

  // As Optimizer::compute_gradients.
  Result<std::vector<GradAndVar>> compute_gradients(const Scope& s, const Output& loss,
                                                    const std::vector<Output>& var_list = {}) const;
  // One op (a NoOp named "train" under the sub-scope "SyncReplicas_<name>") that contributes every
  // pair's gradient and 1 to the global step (an int64 scalar variable, required) for the step
  // this run reads, and completes when each of those steps is done (or the contribution was
  // dropped as stale). A sparse gradient (ops::indexed_slices, e.g. an embedding lookup's) is
  // contributed as its rows and aggregated by index: each row is averaged over the replicas whose
  // gradient had it (TensorFlow's SparseConditionalAccumulator) and only those rows are updated,
  // with the wrapped optimizer's sparse form (SGD, momentum, lazy Adam, Adagrad; RMSProp applies
  // the dense tensor). Errors as Optimizer::apply_gradients, plus: no global step, a bad
  // replica count or timeout, an optimizer without a synchronous form (Unimplemented), a second
  // call on the same object (FailedPrecondition).
  Result<Output> apply_gradients(const Scope& s, const std::vector<GradAndVar>& grads_and_vars,
                                 const Output& global_step);
  // compute_gradients then apply_gradients.
  Result<Output> minimize(const Scope& s, const Output& loss, const Output& global_step,
                          const std::vector<Output>& var_list = {});
  // The op a replica runs once when it stops training (see above). FailedPrecondition before
  // apply_gradients.
  Result<Output> finish_op(const Scope& s) const;
  // The op that closes every accumulator now. FailedPrecondition before apply_gradients.
  Result<Output> close_op(const Scope& s) const;
  // int64 [7] of `var`'s accumulator: the step it collects for, averaged updates applied, stale
  // gradients dropped, realignments to a later step, replicas that finished, closed (0/1), steps
  // closed short at the deadline. For the global step: stale and short count replica steps.
  Result<Output> accumulator_stats(const Scope& s, const Output& var) const;

 private:
  Result<Output> control_op(const Scope& s, const std::string& action) const;

  std::string name_;
  ops::SyncOptions update_;
  Status valid_;
  std::vector<Output> applied_;  // the variables apply_gradients updates, the global step last
};

}  // namespace train
}  // namespace actorflow
