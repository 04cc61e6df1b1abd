// The seed 002 CNN (TF-Slim: conv 5x5x32, max-pool 2x2, conv 5x5x64, max-pool 2x2, fc 500,
// fc 10; Glorot-uniform weights, zero biases; Adam) and the between-graph worker loop that
// trains it on MNIST-format data under a Supervisor. Shared by samples/distributed_cnn and
// `actorflow demo`. Brings no CAF header (a model needs only the public Server and Session).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/scope.h"

namespace actorflow {

class Server;  // <actorflow/server.h>

struct CnnOptions {
  float learning_rate = 1e-4f;
  bool sync = false;                 // SyncReplicasOptimizer semantics
  int replicas_to_aggregate = 0;     // sync: 0 = number of workers
  int total_replicas = 0;            // sync: 0 = number of workers
  double sync_timeout_secs = 60;     // sync: a step not filled in time fails its waiting workers
  // sync: the sync deadline (0 = none; else below sync_timeout_secs): a step not filled this long
  // after its first gradient closes short with the gradients it got (SyncReplicasOptimizer).
  double sync_deadline_secs = 0;
  std::string worker_device;         // e.g. "/job:worker/task:1" (+ "/device:GPU:0")
  int num_ps = 1;                    // variables are spread round-robin over /job:ps/task:K
  uint64_t seed = 1;                 // initializers
  int hidden = 500;                  // the fc layer's width
  int conv1_channels = 32;           // the seed's widths; smaller ones make a fast test model
  int conv2_channels = 64;
  // Partition the fully connected weight (96 % of the model's bytes) into num_ps row shards, one
  // per ps task (train::get_partitioned_variable), so every ps link carries a share of each step's
  // traffic instead of one link carrying nearly all of it. No effect with one ps.
  bool partition_fc = false;
  // A TensorFlow GraphDef file of the seed CNN's training graph to import instead of building the
  // model (docs/interop.md, "GraphDef import"; tests/data/tf_graph/make_seed_cnn.py writes one):
  // placeholders "x-input" [B, 784] and "y-input" [B, 10], "logits", "loss", targets "train" and
  // "init", a "global_step" variable. Its device strings are kept (replica_device_setter's
  // /job:ps/task:0); its other nodes are requested on worker_device. The optimizer and
  // learning rate are the graph's; sync and partition_fc do not apply.
  std::string graph_def;
};

struct CnnModel {
  Output x;            // float [?, 784] placeholder ("x-input")
  Output labels;       // float [?, 10] one-hot placeholder ("y-input")
  Output logits;
  Output loss;         // mean softmax cross-entropy
  Output accuracy;     // mean of argmax(logits) == argmax(labels)
  Output global_step;  // int64 scalar variable
  Output train_op;     // one optimizer update (async) or one contribution (sync)
  // sync: SyncReplicasOptimizer::finish_op, run once by each worker when it stops training.
  Output sync_finish_op;
  // sync: the global step's SyncReplicasOptimizer::accumulator_stats (int64 [7]).
  Output sync_stats;
  Output init_op;      // initializes every variable
};

// Builds the model in `root`'s graph. Errors name the op that failed to build.
Result<CnnModel> build_mnist_cnn(const Scope& root, const CnnOptions& opts);
// Imports opts.graph_def into `root`'s graph (its Saver subgraph, if any, left out) and adds the
// accuracy; sync_finish_op stays invalid. Errors: the import's (naming the file, node and op), or
// NotFound naming a tensor or target the model needs that the GraphDef lacks; InvalidArgument for
// sync or partition_fc.
Result<CnnModel> import_mnist_cnn(const Scope& root, const CnnOptions& opts);

struct CnnTrainOptions {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t steps = 5000;       // global steps
  int batch = 50;
  int print_every = 100;
  std::string logdir;         // checkpoints + summaries ("" = none)
  double save_checkpoint_secs = 60;
  int keep_checkpoints = 5;          // [supervisor] keep_checkpoints (0 keeps all)
  bool tensorflow_checkpoints = false;  // [supervisor] checkpoint_format = "tensorflow"
  double ready_timeout_secs = 120;   // [supervisor] ready_timeout_secs: non-chief wait for the model
  double save_summaries_secs = 10;   // [supervisor] save_summaries_secs (0: no steps/s summaries)
  int task_index = 0;
  int num_workers = 1;
  bool is_chief = false;
  uint64_t seed = 1;
  // Bound on one training step (0 = none): a step whose tensors a faulty link lost fails with
  // DeadlineExceeded after this long and the worker recovers instead of waiting forever.
  double step_timeout_secs = 0;
  // Called with each progress line (default: print to stdout).
  std::function<void(const std::string&)> out;
};

struct CnnTrainResult {
  int64_t final_global_step = 0;
  int64_t local_steps = 0;
  double test_accuracy = 0;
  double test_loss = 0;       // mean cross-entropy over the test set
  double images_per_sec = 0;  // this worker's training throughput
  // sync: the job's replica step gradients dropped as stale and steps closed short at the sync
  // deadline so far, as the global step's accumulator counted them (0 without --sync).
  int64_t stale_gradients = 0;
  int64_t short_steps = 0;
};

// The seed's worker: managed session, `Worker : N, Step: S, Accuracy (batch): A` lines, then
// `Test-Accuracy: A` and `Test-Loss: L`, then `Local-Steps: N` (its training runs that answered
// OK: each an acknowledged global-step increment) and `Global-Step: G` (read after its test
// evaluation), and in sync mode `Stale-Gradients: N` and `Short-Steps: N` (the job's, from the
// global step's accumulator). `server` is this worker's server (targeted by the session).
Result<CnnTrainResult> train_mnist_cnn_worker(Server& server, const CnnOptions& model_opts,
                                              const CnnTrainOptions& opts);

}  // namespace actorflow
