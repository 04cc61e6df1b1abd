// Seed 002: the MNIST CNN trained between-graph by 1 ps + N workers, each a separate process
// started with the same cluster file (by hand or `actorflow up --cluster F -- build/samples/distributed_cnn`):
//   build/samples/distributed_cnn --cluster F --job ps --task 0
//   build/samples/distributed_cnn --cluster F --job worker --task 0 [--steps 5000] [--sync] [--data DIR]
// or with seed 002's own flags, or a TF_CONFIG-style JSON file (seed 000) instead of the TOML file:
//   build/samples/distributed_cnn --ps_hosts=127.0.0.1:2222 --worker_hosts=127.0.0.1:2223,127.0.0.1:2224 --job_name=worker --task_index=0
//   build/samples/distributed_cnn --cluster tf_config.json     (its "task" names the task)
// Workers print `Worker : 1, Step: 4400, Accuracy (batch): 0.98` and end with `Test-Accuracy: 0.91`
// (and, with --sync, `Stale-Gradients: N` and `Short-Steps: N`).
#include <CLI/CLI.hpp>

#include <csignal>
#include <iostream>

#include "actorflow/actorflow.h"
#include "actorflow/cluster_options.h"  // [supervisor] options
#include "config/tf_cluster.h"
#include "core/crash_trace.h"
#include "core/hang_report.h"
#include "models/mnist_cnn.h"

namespace af = actorflow;

int main(int argc, char** argv) {
  CLI::App app{"seed 002: distributed MNIST CNN"};
  std::string cluster_file, job, data = "/usr/share/datasets/fashion-mnist", logdir, worker_device = "cpu";
  int task = 0, print_every = 100, replicas = 0;
  int64_t steps = 5000;
  float lr = 1e-4f;
  bool sync = false;
  double save_secs = -1, step_timeout = 0, sync_timeout = 60;
  int64_t sync_deadline_ms = -1;
  int hidden = 500, conv1 = 32, conv2 = 64;
  bool partition_fc = false;
  uint64_t seed = 1;
  // The cluster: a TOML cluster file, a TF_CONFIG-style JSON file (seed 000), or seed 002's flags.
  std::string ps_hosts, worker_hosts, job_name;
  int task_index = -1;
  app.add_option("--cluster", cluster_file, "cluster file: TOML, or TF_CONFIG-style JSON (*.json)");
  app.add_option("--job", job, "ps or worker");
  app.add_option("--task", task, "task index");
  app.add_option("--ps_hosts", ps_hosts, "seed 002: comma-separated host:port list of the ps job");
  app.add_option("--worker_hosts", worker_hosts, "seed 002: comma-separated host:port list of the worker job");
  app.add_option("--job_name", job_name, "seed 002: ps or worker");
  app.add_option("--task_index", task_index, "seed 002: index of the task within its job");
  app.add_option("--steps", steps, "global steps to train");
  app.add_option("--data", data, "directory with MNIST-format IDX files");
  app.add_option("--learning-rate", lr, "Adam learning rate");
  app.add_flag("--sync", sync, "synchronous replicas (SyncReplicasOptimizer)");
  app.add_option("--replicas-to-aggregate", replicas, "sync: gradients averaged per step (default: all workers)");
  app.add_option("--print-every", print_every, "progress line every N local steps");
  app.add_option("--logdir", logdir, "checkpoints and summaries (default: [supervisor] logdir)");
  app.add_option("--save-checkpoint-secs", save_secs, "checkpoint period (default: [supervisor])");
  app.add_option("--worker-device", worker_device, "cpu or gpu");
  app.add_option("--hidden", hidden, "width of the fully connected layer (seed: 500)")->check(CLI::Range(1, 100000));
  app.add_flag("--partition-fc", partition_fc,
               "partition the fully connected weight over the ps tasks (one row shard per ps)");
  app.add_option("--conv1", conv1, "channels of the first convolution (seed: 32)")->check(CLI::Range(1, 4096));
  app.add_option("--conv2", conv2, "channels of the second convolution (seed: 64)")->check(CLI::Range(1, 4096));
  app.add_option("--sync-timeout-secs", sync_timeout,
                 "sync: fail a step whose replicas do not all arrive within this many seconds")
      ->check(CLI::Range(0.001, 86400.0));
  app.add_option("--sync-deadline-ms", sync_deadline_ms,
                 "sync: close a step that has not all its gradients this long after its first short, with the "
                 "average of those it got (0 = none; default: [supervisor] sync_deadline_ms)")
      ->check(CLI::Range(int64_t{0}, int64_t{86400} * 1000));
  app.add_option("--seed", seed, "initializer and shuffle seed");
  std::string graph_def;
  app.add_option("--graph-def", graph_def,
                 "train this TensorFlow GraphDef (.pb/.pbtxt) of the seed CNN instead of building the model "
                 "(tests/data/tf_graph/make_seed_cnn.py writes one)");
  app.add_option("--step-timeout-secs", step_timeout,
                 "fail (and recover from) a step that takes longer than this; 0 = wait forever")
      ->check(CLI::Range(0.0, 86400.0));
  CLI11_PARSE(app, argc, argv);

  if (!job_name.empty()) job = job_name;
  if (task_index >= 0) task = task_index;
  af::Result<af::ClusterSpec> cluster = af::InvalidArgument("give --cluster F, or --ps_hosts/--worker_hosts");
  const bool host_flags = !ps_hosts.empty() || !worker_hosts.empty();
  if (host_flags && !cluster_file.empty()) {
    std::cerr << "distributed_cnn: give either --cluster or --ps_hosts/--worker_hosts, not both\n";
    return 2;
  }
  if (host_flags) {
    cluster = af::cluster_from_host_flags(ps_hosts, worker_hosts);
  } else if (!cluster_file.empty()) {
    auto tf = af::cluster_from_any_file(cluster_file);
    if (tf.ok()) {
      cluster = std::move(tf->cluster);
      if (tf->task && job.empty()) {
        job = tf->task->job;
        task = tf->task->index;
      }
    } else {
      cluster = tf.status();
    }
  }
  if (!cluster.ok()) {
    std::cerr << "distributed_cnn: " << cluster.status().message() << "\n";
    return 2;
  }
  if (job.empty()) {
    std::cerr << "distributed_cnn: which task is this? give --job and --task (or --job_name and --task_index)\n";
    return 2;
  }
  af::TaskId me{job, task};
  af::Status valid = cluster->validate_task(me);
  if (!valid.ok()) {
    std::cerr << "distributed_cnn: " << valid.message() << "\n";
    return 2;
  }
  if (worker_device != "cpu" && worker_device != "gpu") {
    std::cerr << "distributed_cnn: --worker-device must be cpu or gpu, not '" << worker_device << "'\n";
    return 2;
  }
  if (job == "ps") {  // server.join(): serve until SIGINT/SIGTERM
    af::Status st = af::serve_until_signal(*cluster, me);
    if (!st.ok()) std::cerr << "distributed_cnn: " << st.message() << "\n";
    return st.ok() ? 0 : 1;
  }
  auto server = af::Server::create(*cluster, me);
  if (!server.ok()) {
    std::cerr << "distributed_cnn: " << server.status().message() << "\n";
    return 1;
  }
  // SIGUSR1: this task's hang report on stderr (docs/architecture/diagnosis.md).
  const std::string me_name = me.device_prefix();
  auto dump = af::DumpOnSignal::install(SIGUSR1, [me_name] { return me_name; });
  if (!dump.ok()) std::cerr << "distributed_cnn: no hang report on SIGUSR1: " << dump.status().message() << "\n";
  // A crash: this task and the crashing thread's stack on stderr (core/crash_trace.h).
  if (af::Status st = af::install_crash_backtrace(me_name); !st.ok())
    std::cerr << "distributed_cnn: no backtrace on a crash: " << st.message() << "\n";
  const int workers = cluster->num_tasks("worker");
  af::CnnOptions mo;
  mo.learning_rate = lr;
  mo.sync = sync;
  mo.replicas_to_aggregate = replicas > 0 ? replicas : workers;
  mo.total_replicas = workers;
  mo.worker_device = "/job:worker/task:" + std::to_string(task) + (worker_device == "gpu" ? "/device:GPU:0" : "");
  mo.num_ps = cluster->num_tasks("ps");
  mo.hidden = hidden;
  mo.partition_fc = partition_fc;
  mo.sync_timeout_secs = sync_timeout;
  mo.sync_deadline_secs =
      static_cast<double>(sync_deadline_ms >= 0 ? sync_deadline_ms : cluster->supervisor().sync_deadline_ms) / 1000.0;
  mo.conv1_channels = conv1;
  mo.conv2_channels = conv2;
  mo.seed = seed;
  mo.graph_def = graph_def;
  af::CnnTrainOptions to;
  to.data_dir = data;
  to.steps = steps;
  to.print_every = print_every;
  to.logdir = logdir.empty() ? cluster->supervisor().logdir : logdir;
  to.save_checkpoint_secs = save_secs >= 0 ? save_secs : cluster->supervisor().save_checkpoint_secs;
  to.keep_checkpoints = cluster->supervisor().keep_checkpoints;
  to.tensorflow_checkpoints = cluster->supervisor().tensorflow_checkpoints;
  to.ready_timeout_secs = cluster->supervisor().ready_timeout_secs;
  to.save_summaries_secs = cluster->supervisor().save_summaries_secs;
  to.task_index = task;
  to.num_workers = workers;
  to.is_chief = cluster->supervisor().chief == me;
  to.seed = seed;
  to.step_timeout_secs = step_timeout;
  auto r = af::train_mnist_cnn_worker(**server, mo, to);
  if (!r.ok()) std::cerr << "distributed_cnn: worker " << task << ": " << r.status() << "\n";
  af::destroy_server_bounded(std::move(*server), std::chrono::seconds(10), r.ok() ? 0 : 1, r.ok() ? 0 : 1);
  return r.ok() ? 0 : 1;
}
