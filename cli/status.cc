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

#include "actorflow/embedding.h"
#include "cli/commands.h"
#include "core/metrics.h"
#include "net/metrics_http.h"

namespace actorflow {
namespace cli {
namespace {

struct Sample {
  std::map<std::string, double> m;
  std::chrono::steady_clock::time_point at;
};

struct Row {
  std::string task, address, role, state = "DOWN", why, devices;
  bool up = false;
  bool measured = false;
  std::string metrics_error;
  double global_step = NAN, steps_per_sec = NAN, cpu_pct = NAN, rss = NAN, net_in = NAN, net_out = NAN,
         failures = NAN, uptime = NAN, hb_rtt_ms = NAN;
};

double get(const Sample& s, const std::string& k) {
  auto it = s.m.find(k);
  return it == s.m.end() ? NAN : it->second;
}

double rate(const Sample& a, const Sample& b, const std::string& k) {
  const double dt = std::chrono::duration<double>(b.at - a.at).count();
  const double va = get(a, k), vb = get(b, k);
  if (dt <= 0 || std::isnan(vb)) return NAN;
  return ((std::isnan(va) ? 0 : vb - va)) / dt;
}

std::string human_bytes(double b) {
  if (std::isnan(b)) return "-";
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char o[32];
  std::snprintf(o, sizeof o, u == 0 ? "%.0f%s" : "%.1f%s", b, unit[u]);
  return o;
}

std::string fmt(double v, const char* f) {
  if (std::isnan(v)) return "-";
  char o[32];
  std::snprintf(o, sizeof o, f, v);
  return o;
}

std::string json_num(double v) {
  if (std::isnan(v) || std::isinf(v)) return "null";
  char o[40];
  std::snprintf(o, sizeof o, "%.6g", v);
  return o;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else o += c;
  }
  return o + "\"";
}

// Columns sized to their widest cell, two spaces apart; the reason a task is down (or could not be
// measured) follows its row.
std::string render_table(const std::vector<Row>& rows) {
  std::vector<std::vector<std::string>> cells{{"TASK", "ADDRESS", "ROLE", "STATE", "STEP", "STEPS/S", "CPU%", "RSS",
                                               "NET-IN/S", "NET-OUT/S", "FAIL", "UPTIME", "HB-MS", "DEVICES"}};
  int up = 0;
  for (const auto& r : rows) {
    up += r.up ? 1 : 0;
    cells.push_back({r.task, r.address, r.role, r.state, fmt(r.global_step, "%.0f"), fmt(r.steps_per_sec, "%.1f"),
                     fmt(r.cpu_pct, "%.0f"), human_bytes(r.rss), human_bytes(r.net_in), human_bytes(r.net_out),
                     fmt(r.failures, "%.0f"), fmt(r.uptime, "%.0fs"), fmt(r.hb_rtt_ms, "%.2f"),
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
      if (!r.up) o << "  (" << r.why << ")";
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
      << ", \"heartbeat_rtt_ms\": " << json_num(r.hb_rtt_ms) << "}";
  }
  o << "], \"up\": " << up << ", \"total\": " << rows.size() << "}\n";
  return o.str();
}

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

}  // namespace

int run_status(const StatusOptions& o) {
  auto cluster = load_cluster(o.cluster);
  if (!cluster.ok()) {
    std::cerr << "actorflow status: " << cluster.status().message() << "\n";
    return 2;
  }
  if (o.interval_ms < 10 || o.interval_ms > 3600000) {
    std::cerr << "actorflow status: --interval-ms must be in 10..3600000, got " << o.interval_ms << "\n";
    return 2;
  }
  caf::actor_system_config cfg;
  Server::configure(cfg);
  caf::actor_system sys{cfg};
  auto mc = tool_membership_config(*cluster, "_status");
  if (!mc.ok()) {
    std::cerr << "actorflow status: " << mc.status().message() << "\n";
    return 2;
  }
  Membership m(sys, *mc);
  const auto tasks = cluster->all_tasks();
  const auto interval = std::chrono::milliseconds(o.interval_ms);
  const auto timeout = std::chrono::milliseconds(o.timeout_ms);
  std::map<std::string, Sample> last;  // the previous scrape of each task
  auto scrape = [&](const TaskId& t) -> Result<Sample> {
    const ServerOptions so = cluster->server_options(t);
    auto addr = cluster->task_address(t);
    AF_RETURN_IF_ERROR(addr.status());
    std::string host = addr->substr(0, addr->rfind(':'));
    if (host == "localhost") host = "127.0.0.1";
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    AF_ASSIGN_OR_RETURN(std::string text, net::scrape_metrics(host, static_cast<uint16_t>(so.metrics_port), mc->secret,
                                                             mc->tls, timeout));
    return Sample{net::sum_by_family(text), std::chrono::steady_clock::now()};
  };
  auto measure_all = [&] {
    for (const auto& t : tasks)
      if (cluster->server_options(t).metrics_port > 0) {
        auto s = scrape(t);
        if (s.ok()) last[t.to_string()] = std::move(*s);
      }
  };
  auto table = [&]() {
    std::vector<Row> rows;
    for (const auto& t : tasks) {
      Row r;
      r.task = t.to_string();
      auto addr = cluster->task_address(t);
      r.address = addr.ok() ? *addr : "?";
      r.role = t == cluster->supervisor().chief ? "chief" : t.job;
      auto p = addr.ok() ? m.ensure(t.device_prefix(), *addr, timeout) : Result<PeerInfo>(addr.status());
      if (!p.ok()) {
        r.why = p.status().message();
        rows.push_back(r);
        continue;
      }
      r.up = true;
      r.state = "UP";
      for (const auto& d : p->devices) r.devices += (r.devices.empty() ? "" : " ") + d.name.substr(d.name.find("/device:") + 1);
      if (cluster->server_options(t).metrics_port > 0) {
        auto now = scrape(t);
        if (!now.ok()) {
          r.metrics_error = now.status().message();
        } else {
          r.measured = true;
          auto prev = last.find(t.to_string());
          const Sample& a = prev != last.end() ? prev->second : *now;
          r.global_step = get(*now, "actorflow_global_step");
          r.rss = get(*now, "process_resident_memory_bytes");
          r.failures = get(*now, "actorflow_actor_failures_total");
          if (std::isnan(r.failures)) r.failures = 0;
          const double start = get(*now, "process_start_time_seconds");
          r.uptime = std::isnan(start) ? NAN
                                       : static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                 std::chrono::system_clock::now().time_since_epoch())
                                                                 .count()) / 1000.0 - start;
          const double hb_n = get(*now, "actorflow_heartbeat_rtt_seconds_count");
          if (hb_n > 0) r.hb_rtt_ms = 1000 * get(*now, "actorflow_heartbeat_rtt_seconds_sum") / hb_n;
          if (prev != last.end()) {
            r.steps_per_sec = rate(a, *now, "actorflow_session_runs_total");
            r.cpu_pct = 100 * rate(a, *now, "process_cpu_seconds_total");
            r.net_in = rate(a, *now, "actorflow_data_plane_received_bytes_total");
            r.net_out = rate(a, *now, "actorflow_data_plane_sent_bytes_total");
          }
          last[t.to_string()] = std::move(*now);
        }
      }
      rows.push_back(r);
    }
    return rows;
  };
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
    return ups == static_cast<int>(tasks.size()) ? 0 : 3;
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
