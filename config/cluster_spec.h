// Cluster files: the options they set. ServerOptions (a task's [server] options merged with its
// [tasks."job/N"] overrides) and SupervisorOptions ([supervisor]), as ClusterSpec (config/cluster.h,
// included here) returns them. The file format and every key with its default are documented in
// docs/cluster-file.md.
//
// This is the header a new cluster-file option changes: include it only where options are read
// (the cluster file reader, the server, the supervisor's tools, tests of the file); code that only
// names clusters and tasks includes config/cluster.h or config/task_id.h.
//
// Thread-safety: plain value types. This module never includes CAF headers.
#pragma once

#include <map>
#include <string>

#include "config/cluster.h"
#include "config/task_id.h"
#include "device/device_options.h"

namespace actorflow {

// Options of one task's server: [server] defaults merged with [tasks."job/N"] overrides. Values are
// validated when the file is read (ranges in docs/cluster-file.md).
// The device fields (cpu_devices, visible_devices, gpu_memory_fraction, allow_growth) are the
// base DeviceOptions, declared once in device/device_options.h.
struct ServerOptions : DeviceOptions {
  bool log_device_placement = false;  // log each node's device when a graph is placed
  bool allow_soft_placement = true;   // fall back to CPU when the requested device is missing
  // mixed_precision = "bfloat16": every session on the task computes MatMul and the convolutions
  // with bfloat16 operands (graph/mixed_precision.h); "float32" (the default) leaves it to each
  // session (SessionOptions::mixed_bfloat16).
  bool mixed_bfloat16 = false;
  int connect_timeout_ms = 30000;     // how long a task waits for peers it needs (bounded retry)
  int heartbeat_interval_ms = 500;    // liveness: how often a task tells peers it is alive
  int peer_timeout_ms = 3000;         // a peer silent for this long is considered down
  // The deadline of every step of a session on this task that sets none (SessionOptions::timeout
  // 0): a step without its outcome after this long ends DeadlineExceeded naming what it waited
  // for. Long enough for any honest step (10 min); a per-process choice, not in the fingerprint.
  double step_timeout_secs = 600;
  // Address both ports bind ("" = the task's own address from [jobs], never all interfaces);
  // e.g. "0.0.0.0" inside a container whose cluster file names a DNS name. Peers still dial
  // the [jobs] address. Not part of the fingerprint (a per-host choice).
  std::string bind;
  // The port of the task's metrics endpoint (Prometheus text on GET /metrics, net/metrics_http.h;
  // bound as the other ports, behind the same secret and TLS); 0 = off. Set it per task in
  // [tasks."job/N"] when tasks share a host. Not part of the fingerprint (a per-host choice).
  int metrics_port = 0;

  bool operator==(const ServerOptions& o) const;
  bool operator!=(const ServerOptions& o) const { return !(*this == o); }
};

// Options of the supervisor (the chief's duties), from [supervisor].
struct SupervisorOptions {
  TaskId chief{"worker", 0};          // the task that initialises, checkpoints and restarts
  std::string logdir = "./logs";      // checkpoints and summaries (relative to the working dir)
  double save_checkpoint_secs = 60;   // checkpoint period; 0 disables periodic checkpoints
  int keep_checkpoints = 5;           // newest checkpoints kept; 0 keeps all
  // checkpoint_format: "actorflow" (default, its msgpack file) or "tensorflow" (TensorFlow's V2
  // bundle, read by tf.train.Saver; data/tf/tf_checkpoint_data.h). Restores read both.
  bool tensorflow_checkpoints = false;
  int max_restarts = 5;               // restarts of failed tasks allowed within restart_window_secs
  double restart_window_secs = 60;    // the window of max_restarts (> 0)
  double ready_timeout_secs = 120;    // how long non-chief workers wait for the model to be ready
  double save_summaries_secs = 10;    // summary period; 0 disables summaries
  // Copies of each parameter-server variable (1 or 2). With 2, the variable actors of ps task p
  // replicate every update to ps task (p+1) % num_ps before acknowledging it (primary-backup,
  // docs/architecture/ps-replication.md "Replicated parameter servers"); the file must then have >= 2 ps tasks.
  int ps_replicas = 1;
  // Step traces (docs/tracing.md): every MonitoredTrainingSession of the cluster's tasks traces
  // one step in trace_every_steps (0: none) and writes it as Chrome trace JSON into trace_dir
  // ("" = <logdir>/traces) as timeline-<global step>.json (train::ProfilerHook).
  int trace_every_steps = 0;
  std::string trace_dir;
  // The sync deadline of synchronous training in milliseconds (0: none): a step of
  // SyncReplicasOptimizer that has at least one gradient closes short this long after its first
  // (docs/architecture/variables.md, "Stragglers"). Read by the programs that build the
  // optimizer (samples/distributed_cnn); must be below their step timeout.
  int sync_deadline_ms = 0;

  bool operator==(const SupervisorOptions& o) const;
  bool operator!=(const SupervisorOptions& o) const { return !(*this == o); }
};

// The options of a ClusterSpec (config/cluster.h), shared by its copies.
struct ClusterSpec::Options {
  ServerOptions server_defaults;
  std::map<TaskId, ServerOptions> task_options;  // tasks with [tasks."job/N"] overrides
  SupervisorOptions supervisor;
};

}  // namespace actorflow
