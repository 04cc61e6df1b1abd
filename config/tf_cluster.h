// Clusters given the way TensorFlow programs give them, beside actorflow's TOML cluster files:
//   - TF_CONFIG-style JSON (seed 000): {"cluster": {"worker": ["host:port", ...], "ps": [...]},
//     "task": {"type": "worker", "index": 0}} ("task" optional);
//   - seed 002's flags: --ps_hosts=h:p,h:p --worker_hosts=h:p,... (comma-separated, task i at i).
// Both give a ClusterSpec as ClusterSpec::from_jobs does (default options; the secret from
// ACTORFLOW_SECRET; non-loopback addresses need one). Thread-safe (pure functions).
#pragma once

#include <optional>
#include <string>

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

}  // namespace actorflow
