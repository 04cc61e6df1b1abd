// Clusters given the way TensorFlow programs give them, beside actorflow's TOML cluster files:
//   - TF_CONFIG-style JSON (seed 000): {"cluster": {"worker": ["host:port", ...], "ps": [...]},
//     "task": {"type": "worker", "index": 0}} ("task" optional);
//   - seed 002's flags: --ps_hosts=h:p,h:p --worker_hosts=h:p,... (comma-separated, task i at i).
// Both give a ClusterSpec as ClusterSpec::from_jobs does (default options; the secret from
// ACTORFLOW_SECRET; non-loopback addresses need one). Thread-safe (pure functions).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/cluster.h"
#include "core/status.h"

namespace actorflow {

struct TfClusterConfig {
  ClusterSpec cluster;
  std::optional<TaskId> task;  // from "task", when the JSON has one
};

// Parses TF_CONFIG-style JSON text read from `source` (named in errors). InvalidArgument naming
// `source` and the JSON path of the mistake ("cluster.worker[1]: expected a "host:port" string"),
// and anything from_jobs refuses; a "task" that names a job or index the cluster lacks is an error.
Result<TfClusterConfig> cluster_from_tf_config(const std::string& json_text, const std::string& source);

// Reads `path` (a regular file below 1 MiB) and parses it as above. NotFound / InvalidArgument
// naming the file.
Result<TfClusterConfig> cluster_from_tf_config_file(const std::string& path);

// A cluster file of either kind: TF_CONFIG-style JSON when `path` ends in ".json" (its "task",
// if any, in .task), else the TOML cluster file (ClusterSpec::from_file; .task empty). Errors as
// those readers report them, naming the file.
Result<TfClusterConfig> cluster_from_any_file(const std::string& path);

// Seed 002's --ps_hosts / --worker_hosts: each a comma-separated list of "host:port" (empty: no
// such job). InvalidArgument naming the flag for an empty entry, or when both are empty.
Result<ClusterSpec> cluster_from_host_flags(const std::string& ps_hosts, const std::string& worker_hosts);

// The cluster and the task a program runs as, from its command line the ways TensorFlow programs
// and actorflow's samples take them:
//   --cluster FILE --job J --task N          (FILE: a TOML cluster file, or TF_CONFIG-style JSON
//                                             whose "task" may stand for --job/--task)
//   --ps_hosts=h:p,... --worker_hosts=h:p,... --job_name=J --task_index=N   (seed 002)
//   neither: the TF_CONFIG text `tf_config` (the environment variable's value; "" = unset)
// Each flag as "--flag value" or "--flag=value"; --job/--job_name and --task/--task_index are
// synonyms. The flags are taken out of `args`; everything else stays, in order, in `rest`.
struct ClusterTask {
  ClusterSpec cluster;
  TaskId task;
  std::vector<std::string> rest;  // the arguments that are not these flags
};
// InvalidArgument naming the flag: a flag without its value, a task index that is not a number,
// --cluster given with host flags, no cluster at all, no task, a task the cluster lacks
// (ClusterSpec::validate_task); and the readers' errors naming the file. Pure.
Result<ClusterTask> cluster_task_from_args(const std::vector<std::string>& args, const std::string& tf_config = "");
// As above for main's (argc, argv) (argv[0] is skipped) and the process's TF_CONFIG.
Result<ClusterTask> cluster_task_from_args(int argc, const char* const* argv);

}  // namespace actorflow
