// Subcommands of the actorflow binary. Each returns the process exit code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace actorflow {
class ClusterSpec;
class Status;
struct FaultPlan;
namespace cli {

// Reads the cluster file named by --cluster (InvalidArgument when none was given). Defined in
// cli/node.cc; every subcommand that takes --cluster uses it.
Result<ClusterSpec> load_cluster(const std::string& path);

struct DemoOptions {
  int64_t steps = 0;    // 0 = the demo's default
  int workers = 2;
  float learning_rate = 1e-3f;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
};
// `actorflow demo`: the main job on an embedded local cluster.
int run_demo(const DemoOptions& opts);

struct NodeOptions {
  std::string cluster;
  std::string job;
  int task = 0;
  std::string plan;  // fault plan (TOML) loaded for this task once it serves; "" = none
};
// `actorflow node`: serve one task until SIGINT/SIGTERM.
int run_node(const NodeOptions& opts);

struct StatusOptions {
  std::string cluster;
  int timeout_ms = 2000;   // how long to try each task
  bool json = false;       // one JSON document instead of the table
  bool watch = false;      // redraw every interval until SIGINT/SIGTERM
  int interval_ms = 1000;  // between the two scrapes a rate needs, and between redraws
  bool waits = false;      // per task its registered waits (GET /waits) instead of the table
  bool dump = false;       // per task its hang report (GET /dump) instead of the table
  int min_age_ms = 1000;   // with waits: only waits at least this old (0: all)
};
struct UpOptions {
  std::string cluster;
  std::vector<std::string> program;  // empty: `actorflow node` per task
  std::string plan;  // fault plan passed to each `actorflow node` child's first start; "" = none
};
// `actorflow up`: run and supervise every local task. Exit 0 when every task finished
// normally or on SIGINT/SIGTERM; 1 when a task failed more than max_restarts times.
int run_up(const UpOptions& opts);

// `actorflow status`: per task its role (chief, ps, worker), state (up or down, with why), devices,
// and — for tasks with a [server] metrics_port — global step, steps/s, CPU %, RSS, data-plane
// in/out rates, actor failures, uptime and heartbeat round trip, from two scrapes of its /metrics
// `interval_ms` apart (cli/status.cc). A table, or `--json`; `--watch` redraws in place every
// interval until SIGINT/SIGTERM (exit 0). Exit 0 when all tasks are up, 3 when some are down, 2 on
// a bad cluster file.
// `--waits` instead prints, per task, each registered wait at least `min_age_ms` old (kind, the
// task waited on, age, what) and then where the chains of waits end ("waits end at": the tasks
// waited on that wait for no other task, or whose waits cannot be read); `--json` gives the same
// as one document. `--dump` prints each task's hang report. Both read the task's metrics endpoint
// (GET /waits, GET /dump) behind the same proof as /metrics; a task without a metrics_port is
// named as such. Exit 0 when every task answered, 3 when some did not, 2 on a bad cluster file
// (docs/architecture/diagnosis.md).
int run_status(const StatusOptions& opts);

struct DashboardOptions {
  std::string cluster;
  std::string port = "8088";      // text, checked by run_dashboard: 0..65535 (0 = any free port)
  std::string bind = "127.0.0.1"; // address the page is served on
  int interval_ms = 1000;         // between polls of the cluster
  int timeout_ms = 2000;          // how long to try each task per poll
  std::string chart_js;           // Chart.js file; "" = the Debian package's (libjs-chart.js)
  std::string token_file;         // off loopback: where to write the login token ("" = print it)
};
// `actorflow dashboard`: serves a live page of the cluster (cli/dashboard.cc; docs/architecture/metrics.md,
// "Dashboard"): the tasks table of `status`, charts of loss, accuracy, steps/s, global step, CPU and network per
// task, and an event log (down/up, restarts, actor failures, faults, checkpoints, restores,
// rollbacks), all from /api/state, polled every interval and kept for the last 600 points per
// series and 500 events. Serves until SIGINT/SIGTERM (exit 0). Exit 2 for a bad cluster file,
// port or interval, a port that cannot be bound, a missing Chart.js, or a token file that cannot
// be written. Off loopback /api/state needs a session: a fresh random login token (never the
// cluster secret), printed or written to --token-file, opens /login?token=<t> once, which sets an
// HttpOnly session cookie; scripts may send "Authorization: Bearer <t>".
int run_dashboard(const DashboardOptions& opts);

struct CertsOptions {
  std::string cluster;
  std::string out;     // directory for ca.crt/.key and one .crt/.key per task plus client
  bool force = false;  // replace existing files
};
// `actorflow certs`: creates a cluster CA and a certificate/key per task (its host in
// subjectAltName) and one for tools ("client"), every file mode 0600 (net/certs.h). Exit 0; 2
// for a bad cluster file or existing files without --force; 1 for I/O errors.
int run_certs(const CertsOptions& opts);

struct K8sOptions {
  std::string cluster;
  std::string image;               // container image with actorflow (and the samples) on PATH
  std::string ns = "default";      // metadata.namespace of every object
  std::string out;                 // directory for one file per object plus cluster.toml; "" = stdout
  std::string format = "yaml";     // "yaml" (documents separated by ---) or "json" (one v1 List)
  std::vector<std::string> programs;  // "JOB=COMMAND": that job's pods run COMMAND --cluster F --job J
                                      // --task N instead of `actorflow node`
  bool no_secret = false;          // emit no Secret (create each <name>-<job>-<i>-secret yourself);
                                   // pods still mount them
  bool tools = false;              // also a tools Pod <name>-tools and its Secret <name>-tools
};
// `actorflow k8s`: Kubernetes manifests for the cluster file (docs/kubernetes.md): a ConfigMap
// <name>-cluster with the cluster file rewritten to the pods' DNS names
// (<name>-<job>-<i>-0.<name>-<job>.<ns>.svc.cluster.local:<port>, bind 0.0.0.0, one metrics_port
// per job, 9100 unless set); per task a Secret <name>-<job>-<i>-secret holding only what that
// task's pod needs (its own certificate and key, ca.crt, the secret file, the scrape token) and a
// StatefulSet <name>-<job>-<i> of one pod that mounts it; per job a headless Service <name>-<job>;
// with TLS a Secret <name>-client (ca.crt, client.crt/.key) that no pod mounts. With `tools` a
// Pod <name>-tools (`sleep infinity`, for `kubectl exec <name>-tools -- actorflow status --cluster
// /etc/actorflow/cluster.toml`) that mounts the ConfigMap's cluster file and its own Secret
// <name>-tools: what a tool needs and nothing of a task (ca.crt, client.crt/.key with TLS, the
// secret file, the scrape token); no task's pod mounts it. Never ca.key nor the operator's key. Deterministic output. Exit 0; 2 for a bad cluster file or options, missing
// secret/TLS files, a job the generated form cannot run (sparse task indices, tasks of a job with
// different metrics ports, StatefulSet names over 52 characters, no secret nor TLS); 1 when --out
// cannot be written. Not thread-safe (writes stdout/stderr and files).
int run_k8s(const K8sOptions& opts);

struct ChaosOptions {
  std::string cluster;
  std::string plan;      // fault plan (TOML); required unless clear
  bool clear = false;    // remove every fault from every task instead
  int timeout_ms = 5000; // how long to try each task
};
// `actorflow chaos`: sends a fault plan to every task of a running cluster, which loads the
// faults it takes part in. Prints what each task applied. Exit 0 when every task took it, 1
// naming the tasks that could not be reached or refused, 2 for a bad cluster file or plan.
int run_chaos(const ChaosOptions& opts);
// check_plan_tasks (every task a plan names is in the cluster) is in actors/faults.h.

struct CkptOptions {
  std::string path;                  // list: a directory; show, convert: one checkpoint
  std::string prefix = "model.ckpt"; // list: the checkpoints' file name prefix
  bool json = false;                 // machine-readable output (one JSON document on stdout)
  std::string out;                   // convert: the checkpoint to write
  std::string to;                    // convert: "tensorflow" or "actorflow"; "" = the other one
};
// Checkpoints are actorflow's files or TensorFlow's V2 checkpoints (named by their prefix, the
// path without ".index"; a path ending in ".index" is accepted too).
// `actorflow ckpt list DIR`: every "<prefix>-<step>" checkpoint of DIR in either format, newest
// (highest step) first, with its format, global step, number of variables, size in bytes, number
// of data files (TensorFlow's; "-" for actorflow's one file) and checksum state (ok, or BAD with the reason on stderr). Exit 0 when every one reads back whole;
// 1 when one is unreadable or DIR holds none; 2 when DIR does not exist or is not a directory.
int run_ckpt_list(const CkptOptions& opts);
// `actorflow ckpt show CKPT`: the format, global step, checksum state and every variable (name,
// dtype, shape, elements, the values of small ones, min/max/mean of larger ones); for TensorFlow's
// format also the number of data files and each partitioned tensor's slices ("3: 0,3:0,3 ...",
// TensorFlow's "start,length" per dimension; "-" for a tensor stored whole). Exit 0; 1 when
// the checkpoint is corrupt, truncated, not a checkpoint or of a newer format (the reason names
// it); 2 when it does not exist or is not a regular file.
int run_ckpt_show(const CkptOptions& opts);
// `actorflow ckpt convert SRC DST [--to tensorflow|actorflow]`: reads SRC in either format and
// writes DST in the other (or --to's), crash-safely, with the names of data/tf/tf_checkpoint_data.h
// (optimizer slots and the global step included). Refuses to replace an existing DST. Exit 0;
// 1 when SRC is unreadable or DST cannot be written (nothing is left at DST); 2 when SRC does
// not exist, DST exists or --to is unknown.
int run_ckpt_convert(const CkptOptions& opts);

}  // namespace cli
}  // namespace actorflow
