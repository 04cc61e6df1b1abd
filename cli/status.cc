// `actorflow status`: what every task of a cluster is doing (cli/commands.h).
//
// Reachability and devices come from the authenticated control-plane handshake (a tool
// membership, as `chaos` uses); everything measured comes from the task's own metrics endpoint
// (net/metrics_http.h) when the cluster file gives it a metrics_port. Rates (steps/s, CPU %,
// network) need two scrapes: the first table comes after one interval.
#include <signal.h>

#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/cluster_probe.h"
#include "cli/commands.h"
#include "cli/waits_view.h"

namespace actorflow {
namespace cli {
namespace {

using Row = TaskRow;

std::string fmt(double v, const char* f) {
  if (std::isnan(v)) return "-";
  char o[32];
  std::snprintf(o, sizeof o, f, v);
  return o;
}

// Columns sized to their widest cell, two spaces apart; the reason a task is down (or could not be
// measured) follows its row.
std::string render_table(const std::vector<Row>& rows) {
  std::vector<std::vector<std::string>> cells{{"TASK", "ADDRESS", "ROLE", "STATE", "STEP", "STEPS/S", "CPU%", "RSS",
                                               "NET-IN/S", "NET-OUT/S", "FAIL", "STALE", "SHORT", "UPTIME", "HB-MS",
                                               "DEVICES"}};
  int up = 0;
  for (const auto& r : rows) {
    up += r.up ? 1 : 0;
    cells.push_back({r.task, r.address, r.role, r.state, fmt(r.global_step, "%.0f"), fmt(r.steps_per_sec, "%.1f"),
                     fmt(r.cpu_pct, "%.0f"), human_bytes(r.rss), human_bytes(r.net_in), human_bytes(r.net_out),
                     fmt(r.failures, "%.0f"), fmt(r.sync_stale, "%.0f"), fmt(r.sync_short, "%.0f"),
                     fmt(r.uptime, "%.0fs"), fmt(r.hb_rtt_ms, "%.2f"),
                     r.devices.empty() ? "-" : r.devices});
  }
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& row : cells)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::ostringstream o;
  for (size_t i = 0; i < cells.size(); ++i) {
    std::string line;
    for (size_t c = 0; c < cells[i].size(); ++c) {
      line += cells[i][c];
      if (c + 1 < cells[i].size()) line += std::string(width[c] - cells[i][c].size() + 2, ' ');
    }
    o << line;
    if (i > 0) {
      const Row& r = rows[i - 1];
      if (!r.up) o << "  (" << r.why << (r.metrics_error.empty() ? "" : "; metrics: " + r.metrics_error) << ")";
      else if (!r.metrics_error.empty()) o << "  (metrics: " << r.metrics_error << ")";
    }
    o << "\n";
  }
  o << up << "/" << rows.size() << " tasks up\n";
  return o.str();
}

std::string render_json(const std::vector<Row>& rows) {
  std::ostringstream o;
  int up = 0;
  o << "{\"tasks\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    up += r.up ? 1 : 0;
    o << (i ? ", " : "") << "{\"task\": " << json_str(r.task) << ", \"address\": " << json_str(r.address)
      << ", \"role\": " << json_str(r.role) << ", \"state\": " << json_str(r.up ? "up" : "down")
      << ", \"why\": " << json_str(r.why) << ", \"devices\": " << json_str(r.devices)
      << ", \"measured\": " << (r.measured ? "true" : "false") << ", \"metrics_error\": " << json_str(r.metrics_error)
      << ", \"global_step\": " << json_num(r.global_step) << ", \"steps_per_sec\": " << json_num(r.steps_per_sec)
      << ", \"cpu_percent\": " << json_num(r.cpu_pct) << ", \"rss_bytes\": " << json_num(r.rss)
      << ", \"net_in_bytes_per_sec\": " << json_num(r.net_in) << ", \"net_out_bytes_per_sec\": " << json_num(r.net_out)
      << ", \"actor_failures\": " << json_num(r.failures) << ", \"uptime_secs\": " << json_num(r.uptime)
      << ", \"heartbeat_rtt_ms\": " << json_num(r.hb_rtt_ms) << ", \"sync_stale_gradients\": " << json_num(r.sync_stale)
      << ", \"sync_short_steps\": " << json_num(r.sync_short) << "}";
  }
  o << "], \"up\": " << up << ", \"total\": " << rows.size() << "}\n";
  return o.str();
}

// `--waits` and `--dump`: one read of every task's GET /waits or GET /dump (docs/architecture/diagnosis.md).
int show_waits_or_dump(ClusterProbe& probe, const StatusOptions& o) {
  auto answers = probe.fetch_all(o.waits ? "/waits" : "/dump");
  bool all = true;
  for (const auto& a : answers) all = all && a.second.ok();
  if (o.waits) {
    const auto tasks = parse_task_waits(answers, o.min_age_ms / 1000.0);
    std::cout << (o.json ? render_waits_json(tasks) : render_waits_text(tasks)) << std::flush;
    return all ? 0 : 3;
  }
  for (const auto& [task, body] : answers) {
    std::cout << "==== " << task << "\n";
    if (body.ok()) std::cout << *body;
    else std::cout << "no report: " << body.status().message() << "\n";
  }
  std::cout << std::flush;
  return all ? 0 : 3;
}

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

}  // namespace

int run_status(const StatusOptions& o) {
  if (o.interval_ms < 10 || o.interval_ms > 3600000) {
    std::cerr << "actorflow status: --interval-ms must be in 10..3600000, got " << o.interval_ms << "\n";
    return 2;
  }
  if (o.waits && o.dump) {
    std::cerr << "actorflow status: --waits and --dump are two views: give one\n";
    return 2;
  }
  auto probe = ClusterProbe::create(o.cluster, "_status", std::chrono::milliseconds(o.timeout_ms));
  if (!probe.ok()) {
    std::cerr << "actorflow status: " << probe.status().message() << "\n";
    return 2;
  }
  if (o.waits || o.dump) return show_waits_or_dump(**probe, o);
  const auto interval = std::chrono::milliseconds(o.interval_ms);
  const size_t total = (*probe)->num_tasks();
  auto table = [&] { return (*probe)->poll(); };
  auto measure_all = [&] { (*probe)->prime(); };
  int ups = 0;
  auto show = [&](bool redraw) {
    auto rows = table();
    ups = 0;
    for (const auto& r : rows) ups += r.up ? 1 : 0;
    const std::string text = o.json ? render_json(rows) : render_table(rows);
    if (redraw) std::cout << "\x1b[H\x1b[2J";  // home, clear: redraw in place
    std::cout << text << std::flush;
  };
  measure_all();  // the first samples; rates come from the next
  if (!o.watch) {
    std::this_thread::sleep_for(interval);  // the interval a rate is measured over
    show(false);
    return ups == static_cast<int>(total) ? 0 : 3;
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  while (!g_stop) {
    const auto next = std::chrono::steady_clock::now() + interval;
    while (!g_stop && std::chrono::steady_clock::now() < next) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (g_stop) break;
    show(!o.json);
  }
  return 0;
}

}  // namespace cli
}  // namespace actorflow
