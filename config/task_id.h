// A task of a cluster (TaskId: job name and index) and the address helpers every part of a cluster
// uses: parse_address, format_address, is_valid_job_name, is_loopback_host.
//
// Small and stable on purpose: code that names tasks includes this header, not the cluster file's
// options (config/cluster_spec.h) nor the ClusterSpec class (config/cluster.h).
//
// Thread-safety: TaskId is a plain value type; the functions are pure and thread-safe. This module
// never includes CAF headers.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>

#include "core/status.h"

namespace actorflow {

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
