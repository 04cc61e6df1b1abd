// Cluster files: TOML -> ClusterSpec, ServerOptions, SupervisorOptions.
//
// A ClusterSpec names every task of a cluster (job name + index) and its "host:port" address, like
// TensorFlow's tf.train.ClusterSpec, plus the per-task server options ([server] merged with
// [tasks."job/N"]), the supervisor options and the cluster secret. The file format and every key
// with its default are documented in docs/cluster-file.md.
//
// Every mistake in a file is reported as an InvalidArgument Status whose message lines read
// "<file>:<line>:<column>: <key path>: <what is wrong>" (all mistakes found, one per line, in file
// order). The secret's bytes never appear in any message or log line.
//
// Thread-safety: a ClusterSpec is immutable after construction; its const methods may be called from
// any number of threads at once. This module never includes CAF headers.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "device/device_options.h"

namespace actorflow {

// The environment variable that supplies the cluster secret when the file names no secret_file.
inline constexpr const char* kSecretEnvVar = "ACTORFLOW_SECRET";

// One task of a cluster: a job name and an index in that job.
struct TaskId {
  std::string job;
  int index = 0;

  TaskId() = default;
  TaskId(std::string j, int i) : job(std::move(j)), index(i) {}

  // "worker/1".
  std::string to_string() const;
  // "/job:worker/replica:0/task:1", the prefix of this task's device names.
  std::string device_prefix() const;
  // Parses "worker/1", "/job:worker/task:1" or "/job:worker/replica:0/task:1". The job name must
  // match [A-Za-z][A-Za-z0-9_]* and the index be a non-negative decimal integer; otherwise an
  // InvalidArgument naming the string and what is wrong.
  static Result<TaskId> parse(const std::string& s);

  bool operator==(const TaskId& o) const { return index == o.index && job == o.job; }
  bool operator!=(const TaskId& o) const { return !(*this == o); }
  // Orders by job name, then index (so maps iterate job by job, task by task).
  bool operator<(const TaskId& o) const { return job != o.job ? job < o.job : index < o.index; }
};

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

  bool operator==(const SupervisorOptions& o) const;
  bool operator!=(const SupervisorOptions& o) const { return !(*this == o); }
};

// The description of a cluster: jobs, their tasks' addresses, options and the secret.
class ClusterSpec {
 public:
  // An empty cluster (no jobs). Useful only as a placeholder to assign to.
  ClusterSpec() = default;

  // Reads and validates a cluster file. NotFound if the file cannot be opened (with the OS reason);
  // InvalidArgument listing every mistake as "path:line:col: key: what" otherwise. secret_file is
  // resolved relative to the directory of `path`.
  static Result<ClusterSpec> from_file(const std::string& path);
  // Same as from_file for TOML text already in memory; `source_name` is used in messages and its
  // directory (if it has one, else the working directory) resolves a relative secret_file.
  static Result<ClusterSpec> from_string(const std::string& toml, const std::string& source_name);
  // Like tf.train.ClusterSpec(dict): each job's list of "host:port", task i at position i. All
  // options take their defaults; the secret comes from ACTORFLOW_SECRET. InvalidArgument on a bad
  // job name, empty job, malformed or duplicate address, or a non-loopback address without secret.
  static Result<ClusterSpec> from_jobs(const std::map<std::string, std::vector<std::string>>& jobs);
  // Like from_jobs with explicit (possibly sparse) task indices per job.
  static Result<ClusterSpec> from_sparse_jobs(
      const std::map<std::string, std::map<int, std::string>>& jobs);

  // [cluster] name ("default" when unset).
  const std::string& name() const { return name_; }
  // Job names, sorted.
  std::vector<std::string> jobs() const;
  // Number of tasks of `job` (the count of defined indices; the sparse form may have gaps); 0 for
  // an unknown job.
  int num_tasks(const std::string& job) const;
  // The task indices of `job`, ascending; empty for an unknown job.
  std::vector<int> task_indices(const std::string& job) const;
  // The canonical "host:port" of task `t` ("[::1]:2222" for IPv6; host lower-cased). NotFound
  // naming the job/task and listing the jobs or indices that exist.
  Result<std::string> task_address(const TaskId& t) const;
  // OK if `t` is a task of this cluster, else the NotFound a command line reports for
  // --job/--task values the file lacks (with the file position of the job, when known).
  Status validate_task(const TaskId& t) const;
  // Every task, ordered by job name then index.
  std::vector<TaskId> all_tasks() const;
  // The options of task `t`: defaults, then [server], then [tasks."job/N"]. For a task that is not
  // in the cluster, the [server] options.
  ServerOptions server_options(const TaskId& t) const;
  // The [supervisor] options (chief is always an existing task of a non-empty cluster).
  const SupervisorOptions& supervisor() const { return supervisor_; }

  // Hex SHA-256 (64 lowercase digits) of canonical_form(): equal for equivalent files (whitespace,
  // comments, key order, list vs sparse form, where an option is set) on every machine; differs when
  // a name, address or option differs. Never depends on the secret.
  std::string fingerprint() const;
  // The text that fingerprint() hashes: one line per fact, for diagnosing fingerprint mismatches.
  // Contains no secret.
  std::string canonical_form() const;

  // True if every address's host is localhost, 127.0.0.0/8 or ::1 (true for an empty cluster).
  bool all_loopback() const;
  // The secret bytes ("" if none). Never log or print them.
  const std::string& secret() const { return secret_; }
  // Where the secret came from, for messages: the secret file's path, "ACTORFLOW_SECRET", or "".
  const std::string& secret_origin() const { return secret_origin_; }
  // [cluster] metrics_token_file's token ("" if none): the read-only Bearer credential of the tasks'
  // GET /metrics for Prometheus (net/metrics_http.h); never the secret. Never log or print it.
  const std::string& metrics_token() const { return metrics_token_; }
  // True when [cluster] tls_dir is set: both planes run TLS 1.3 with mutual authentication
  // (net/tls.h), and the cluster needs no secret even at non-loopback addresses.
  bool tls() const { return !tls_dir_.empty(); }
  // [cluster] tls_dir resolved against the cluster file's directory ("" when TLS is off). It
  // holds ca.crt and one <job>-<task>.crt/.key per task, as `actorflow certs` writes them
  // (net/certs.h); files are checked when a task or tool loads them, not here.
  const std::string& tls_dir() const { return tls_dir_; }
  // The file path or source name this spec was read from ("<jobs>" for from_jobs).
  const std::string& source() const { return source_; }

 private:
  friend class ClusterFileReader;
  struct Position {
    int line = 0;
    int column = 0;
  };

  // "source:line:col: " or "source: " when the position is unknown.
  std::string where(const Position& p) const;
  // Fills supervisor_.chief when the file does not set it: worker/0 if it exists, else the first
  // task of the first job other than "ps", else the first task.
  void choose_default_chief();

  std::string name_ = "default";
  std::string source_;
  std::map<std::string, std::map<int, std::string>> jobs_;  // job -> index -> canonical address
  std::map<std::string, Position> job_positions_;           // where each job is defined
  Position jobs_position_;                                   // where [jobs] is
  ServerOptions server_defaults_;
  std::map<TaskId, ServerOptions> task_options_;  // tasks with [tasks."job/N"] overrides
  SupervisorOptions supervisor_;
  std::string secret_;
  std::string secret_origin_;
  std::string tls_dir_;
  std::string metrics_token_;
};

// Splits "host:port" (IPv6 as "[::1]:2222") into a lower-cased host (without brackets) and a port.
// InvalidArgument "malformed address '<addr>': <what>" (empty host, missing port, port out of range
// 1..65535, bad characters, IPv6 without brackets).
Result<std::pair<std::string, int>> parse_address(const std::string& addr);

// "host:port", bracketing IPv6 hosts: the inverse of parse_address.
std::string format_address(const std::string& host, int port);

// True if `name` can be a job name: [A-Za-z][A-Za-z0-9_]* (it appears in "/job:NAME/task:N").
bool is_valid_job_name(const std::string& name);

// True for "localhost", IPv4 127.0.0.0/8, "::1" (and ::ffff:127.x.y.z). `host` as parse_address
// returns it (no brackets).
bool is_loopback_host(const std::string& host);

}  // namespace actorflow

namespace std {
template <>
struct hash<actorflow::TaskId> {
  size_t operator()(const actorflow::TaskId& t) const noexcept {
    return hash<string>()(t.job) * 31u + hash<int>()(t.index);
  }
};
}  // namespace std
