// What `actorflow status` and `actorflow dashboard` know about a running cluster: one row per
// task from the authenticated control-plane handshake (up or down, devices) plus the task's own
// metrics endpoint (net/metrics_http.h) when the cluster file gives it a metrics_port. Rates
// (steps/s, CPU %, network) come from two successive scrapes of the same process.
#pragma once

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace actorflow {
class ClusterSpec;
struct TaskId;
namespace cli {

// One task at one poll. Numbers are NAN when unknown (down, no metrics_port, first scrape for
// rates). A plain value type.
struct TaskRow {
  std::string task, address, role, state = "DOWN", why, devices;
  bool up = false;
  bool measured = false;      // its /metrics answered this poll
  std::string metrics_error;  // why it did not (when up with a metrics_port; when down, only an
                              // endpoint on its metrics port that failed to prove it is the task)
  double global_step = NAN, steps_per_sec = NAN, cpu_pct = NAN, rss = NAN, net_in = NAN, net_out = NAN,
         failures = NAN, uptime = NAN, hb_rtt_ms = NAN;
  // Synchronous training on the task holding the global step (NAN elsewhere, and before its first
  // synchronous step): replica step gradients dropped as stale, steps closed short at the sync
  // deadline (actorflow_sync_stale_gradients_total, actorflow_sync_short_steps_total).
  double sync_stale = NAN, sync_short = NAN;
  // This scrape reduced by family (net::sum_by_family) and the summary scalars by tag
  // (actorflow_summary{tag=...}); empty when not measured.
  std::map<std::string, double> families;
  std::map<std::string, double> summaries;
  std::map<std::string, double> faults_by_kind;  // actorflow_faults_injected_total by kind
};

// Holds the control-plane membership of a tool (its own CAF actor system) and the previous
// scrape of each task. Not thread-safe: one thread polls.
class ClusterProbe {
 public:
  // Loads the cluster file and joins as tool job `tool` (e.g. "_status"). Errors: the cluster
  // file's (naming it and the line), the membership configuration's (secret or TLS files).
  static Result<std::unique_ptr<ClusterProbe>> create(const std::string& cluster_path, const std::string& tool,
                                                      std::chrono::milliseconds timeout);
  ~ClusterProbe();
  ClusterProbe(const ClusterProbe&) = delete;
  ClusterProbe& operator=(const ClusterProbe&) = delete;

  const ClusterSpec& cluster() const;
  size_t num_tasks() const;

  // Scrapes every measured task once without the control-plane handshake (the first samples
  // rates need); with a secret each endpoint still proves it is its task first.
  void prime();
  // One row per task, in the cluster's order: handshake (bounded by the timeout per task) and
  // scrape; rates against the previous scrape of the same task. Blocks up to about
  // timeout x tasks when tasks are down.
  std::vector<TaskRow> poll();

  // GET `path` ("/waits", "/dump") of every task's metrics endpoint, in the cluster's order:
  // (task name, body or error). No control-plane handshake; each endpoint proves it is its
  // task first, as for /metrics. A task without a metrics_port is FailedPrecondition saying so.
  // Blocks up to about timeout x tasks when tasks do not answer.
  std::vector<std::pair<std::string, Result<std::string>>> fetch_all(const std::string& path);

 private:
  struct Impl;
  explicit ClusterProbe(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "12.3MiB"-style bytes, "-" for NAN. Pure.
std::string human_bytes(double b);
// A JSON number (null for NAN and infinities) and a JSON string literal. Pure.
std::string json_num(double v);
std::string json_str(const std::string& s);

}  // namespace cli
}  // namespace actorflow
