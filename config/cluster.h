// ClusterSpec: the description of a cluster (tf.train.ClusterSpec): its jobs, the address of each
// task, the cluster secret and TLS directory, read from a cluster file (TOML) or built from a job
// list. The file format and every key with its default are documented in docs/cluster-file.md.
//
// The options a cluster file sets for servers and the supervisor (ServerOptions,
// SupervisorOptions) are only forward-declared here; config/cluster_spec.h defines them. Code that
// names clusters and tasks includes this header; code that reads options includes
// config/cluster_spec.h, so adding an option recompiles only that code.
//
// Every mistake in a file is reported as an InvalidArgument Status whose message lines read
// "<file>:<line>:<column>: <key path>: <what is wrong>" (all mistakes found, one per line, in file
// order). The secret's bytes never appear in any message or log line.
//
// Thread-safety: a ClusterSpec is immutable after construction; its const methods may be called from
// any number of threads at once. This module never includes CAF headers.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/task_id.h"
#include "core/status.h"

namespace actorflow {

// The environment variable that supplies the cluster secret when the file names no secret_file.
inline constexpr const char* kSecretEnvVar = "ACTORFLOW_SECRET";

struct ServerOptions;      // config/cluster_spec.h
struct SupervisorOptions;  // config/cluster_spec.h

// The description of a cluster: jobs, their tasks' addresses, options and the secret.
class ClusterSpec {
 public:
  // An empty cluster (no jobs; default options). Useful only as a placeholder to assign to.
  ClusterSpec();
  // Copies share the (immutable) options. A moved-from ClusterSpec stays a valid copy (there is
  // no move constructor: moves copy, which is cheap).
  ClusterSpec(const ClusterSpec&) = default;
  ClusterSpec& operator=(const ClusterSpec&) = default;

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
  // in the cluster, the [server] options. Using the result needs config/cluster_spec.h.
  ServerOptions server_options(const TaskId& t) const;
  // The [supervisor] options (chief is always an existing task of a non-empty cluster). Valid for
  // the life of this ClusterSpec. Using the result needs config/cluster_spec.h.
  const SupervisorOptions& supervisor() const;

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
  // The [server], [tasks."job/N"] and [supervisor] options (defined in config/cluster_spec.h, so
  // that a new option recompiles only the code that reads options). Never null; shared by copies.
  struct Options;
  std::shared_ptr<Options> options_;
  std::string secret_;
  std::string secret_origin_;
  std::string tls_dir_;
  std::string metrics_token_;
};

}  // namespace actorflow
