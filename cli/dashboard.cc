// `actorflow dashboard`: a live page of a running cluster (cli/commands.h, docs/architecture.md "Dashboard").
//
// The main thread polls the cluster every interval with the same probe `actorflow status` uses
// (cli/cluster_probe.h), appends to bounded time series, derives events from what changed
// between polls, and renders one JSON document. The HTTP server (net/metrics_http.h, its own
// threads) serves that document at /api/state, the page (cli/dashboard_page.h) at / and Chart.js
// from the Debian package libjs-chart.js at /chart.js: nothing is fetched from the internet.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <deque>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "cli/cluster_probe.h"
#include "cli/commands.h"
#include "cli/dashboard_page.h"
#include "net/metrics_http.h"

namespace actorflow {
namespace cli {
namespace {

constexpr size_t kMaxPoints = 600;  // per series: 10 minutes at the default interval
constexpr size_t kMaxEvents = 500;

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

double get(const std::map<std::string, double>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? NAN : it->second;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

std::string wall_clock() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char b[16];
  std::strftime(b, sizeof b, "%H:%M:%S", &tm);
  return b;
}

// Strict decimal port: 0..65535 (0 = any free port, printed).
Result<uint16_t> parse_port(const std::string& s) {
  if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos)
    return InvalidArgument("--port must be a number in 0..65535, got '" + s + "'");
  const long v = std::stol(s);
  if (v > 65535) return InvalidArgument("--port must be a number in 0..65535, got " + s);
  return static_cast<uint16_t>(v);
}

// What the page shows, updated by the polling thread, read by the HTTP threads (under mu).
class DashboardState {
 public:
  explicit DashboardState(std::string cluster_name) : cluster_(std::move(cluster_name)) {}

  // Folds in one poll taken `t` seconds after the start.
  void update(const std::vector<TaskRow>& rows, double t) {
    std::lock_guard<std::mutex> l(mu_);
    double max_step = NAN;
    int up = 0;
    for (const auto& r : rows) {
      up += r.up ? 1 : 0;
      observe(r, t);
      if (!std::isnan(r.global_step)) max_step = std::isnan(max_step) ? r.global_step : std::max(max_step, r.global_step);
      add("global_step", r.task, t, r.global_step);
      add("steps_per_sec", r.task, t, r.steps_per_sec);
      add("loss", r.task, t, get(r.summaries, "loss"));
      add("accuracy", r.task, t, get(r.summaries, "accuracy"));
      add("cpu_percent", r.task, t, r.cpu_pct);
      add("net_in", r.task, t, r.net_in);
      add("net_out", r.task, t, r.net_out);
    }
    // The cluster's training rate: the global step's growth between polls.
    if (!std::isnan(max_step) && !std::isnan(last_max_step_) && t > last_t_ && max_step >= last_max_step_)
      add("steps_per_sec", "global step", t, (max_step - last_max_step_) / (t - last_t_));
    if (!std::isnan(max_step)) {
      last_max_step_ = max_step;
      last_t_ = t;
    }
    if (first_) {
      event(t, "", "start", "dashboard started: " + std::to_string(up) + "/" + std::to_string(rows.size()) + " tasks up");
      first_ = false;
    }
    json_ = render(rows, t, max_step, up);
  }

  // The document of /api/state (a copy: the caller sends it while the next poll goes on).
  std::string json() const {
    std::lock_guard<std::mutex> l(mu_);
    return json_.empty() ? "{\"cluster\": " + json_str(cluster_) + ", \"tasks\": [], \"series\": {}, \"events\": []}"
                         : json_;
  }

 private:
  struct Seen {
    bool known = false, up = false;
    double start = NAN;                    // process_start_time_seconds of the process last scraped
    std::map<std::string, double> counts;  // counter values at the last scrape of that process
  };
  struct Event {
    double t;
    std::string wall, task, kind, text;
  };

  void add(const std::string& chart, const std::string& series, double t, double v) {
    if (std::isnan(v) || std::isinf(v)) return;
    auto& pts = series_[chart][series];
    pts.emplace_back(t, v);
    while (pts.size() > kMaxPoints) pts.pop_front();
  }

  void event(double t, const std::string& task, const std::string& kind, const std::string& text) {
    events_.push_back(Event{t, wall_clock(), task, kind, text});
    while (events_.size() > kMaxEvents) events_.pop_front();
  }

  // Events from what changed since the previous poll of this task: up/down, a new process
  // (restart), and counter growth (actor failures, faults, checkpoints, restores, rollbacks).
  void observe(const TaskRow& r, double t) {
    Seen& s = seen_[r.task];
    if (!s.known || s.up != r.up) {
      if (!r.up) event(t, r.task, "down", r.task + " is down: " + r.why);
      else if (s.known) event(t, r.task, "up", r.task + " is up again");
    }
    s.up = r.up;
    if (!r.measured) {
      s.known = true;
      return;
    }
    const double start = get(r.families, "process_start_time_seconds");
    std::map<std::string, double> counts = {
        {"failures", get(r.families, "actorflow_actor_failures_total")},
        {"saved", get(r.families, "actorflow_checkpoints_saved_total")},
        {"restores", get(r.families, "actorflow_checkpoint_restores_total")},
        {"rollbacks", get(r.families, "actorflow_rollbacks_total")},
        {"rolled", get(r.families, "actorflow_rolled_back_steps_total")}};
    for (const auto& [kind, n] : r.faults_by_kind) counts["fault:" + kind] = n;
    for (auto& [k, v] : counts)
      if (std::isnan(v)) v = 0;
    const bool restarted = !std::isnan(s.start) && start != s.start;
    if (restarted) event(t, r.task, "restart", r.task + " restarted (a new process)");
    if (s.known && !std::isnan(s.start)) {
      // Against the previous scrape of the same process, or zero for a new one.
      auto before = [&](const std::string& k) {
        if (restarted) return 0.0;
        auto it = s.counts.find(k);
        return it == s.counts.end() ? 0.0 : it->second;
      };
      auto grew = [&](const std::string& k) { return counts[k] - before(k); };
      if (grew("failures") > 0)
        event(t, r.task, "failure",
              r.task + ": " + std::to_string(static_cast<int64_t>(grew("failures"))) + " actor failure(s), restarted in place");
      for (const auto& [k, v] : counts)
        if (k.rfind("fault:", 0) == 0 && grew(k) > 0)
          event(t, r.task, "fault", r.task + ": fault injected (" + k.substr(6) + ")");
      if (grew("saved") > 0) {
        const double step = get(r.families, "actorflow_checkpoint_last_step");
        event(t, r.task, "checkpoint",
              r.task + ": checkpoint saved" +
                  (std::isnan(step) ? std::string() : " at global step " + std::to_string(static_cast<int64_t>(step))));
      }
      if (grew("restores") > 0) event(t, r.task, "restore", r.task + ": model restored from a checkpoint");
      if (grew("rollbacks") > 0)
        event(t, r.task, "rollback",
              r.task + ": parameter server restored from a checkpoint; " +
                  std::to_string(static_cast<int64_t>(grew("rolled"))) + " global steps rolled back");
    }
    s.known = true;
    s.start = start;
    s.counts = std::move(counts);
  }

  std::string render(const std::vector<TaskRow>& rows, double t, double max_step, int up) const {
    std::ostringstream o;
    o << "{\"cluster\": " << json_str(cluster_) << ", \"t\": " << json_num(t) << ", \"time\": " << json_str(wall_clock())
      << ", \"global_step\": " << json_num(max_step) << ", \"up\": " << up << ", \"total\": " << rows.size()
      << ", \"tasks\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const TaskRow& r = rows[i];
      o << (i ? ", " : "") << "{\"task\": " << json_str(r.task) << ", \"address\": " << json_str(r.address)
        << ", \"role\": " << json_str(r.role) << ", \"state\": " << json_str(r.up ? "up" : "down")
        << ", \"why\": " << json_str(r.up ? r.metrics_error : r.why) << ", \"devices\": " << json_str(r.devices)
        << ", \"global_step\": " << json_num(r.global_step) << ", \"steps_per_sec\": " << json_num(r.steps_per_sec)
        << ", \"cpu_percent\": " << json_num(r.cpu_pct) << ", \"rss_bytes\": " << json_num(r.rss)
        << ", \"net_in_bytes_per_sec\": " << json_num(r.net_in) << ", \"net_out_bytes_per_sec\": " << json_num(r.net_out)
        << ", \"actor_failures\": " << json_num(r.failures) << ", \"uptime_secs\": " << json_num(r.uptime)
        << ", \"heartbeat_rtt_ms\": " << json_num(r.hb_rtt_ms) << ", \"loss\": " << json_num(get(r.summaries, "loss"))
        << ", \"accuracy\": " << json_num(get(r.summaries, "accuracy")) << "}";
    }
    o << "], \"series\": {";
    bool first_chart = true;
    for (const auto& [chart, by_series] : series_) {
      o << (first_chart ? "" : ", ") << json_str(chart) << ": {";
      first_chart = false;
      bool first_series = true;
      for (const auto& [name, pts] : by_series) {
        o << (first_series ? "" : ", ") << json_str(name) << ": [";
        first_series = false;
        for (size_t i = 0; i < pts.size(); ++i) o << (i ? "," : "") << "[" << json_num(pts[i].first) << "," << json_num(pts[i].second) << "]";
        o << "]";
      }
      o << "}";
    }
    o << "}, \"events\": [";
    for (size_t i = 0; i < events_.size(); ++i) {
      const Event& e = events_[i];
      o << (i ? ", " : "") << "{\"t\": " << json_num(e.t) << ", \"time\": " << json_str(e.wall)
        << ", \"task\": " << json_str(e.task) << ", \"kind\": " << json_str(e.kind) << ", \"text\": " << json_str(e.text)
        << "}";
    }
    o << "]}";
    return o.str();
  }

  const std::string cluster_;
  mutable std::mutex mu_;
  std::string json_;
  bool first_ = true;
  double last_max_step_ = NAN, last_t_ = NAN;
  std::map<std::string, Seen> seen_;
  std::map<std::string, std::map<std::string, std::deque<std::pair<double, double>>>> series_;
  std::deque<Event> events_;
};

}  // namespace

int run_dashboard(const DashboardOptions& o) {
  const char* me = "actorflow dashboard: ";
  auto port = parse_port(o.port);
  if (!port.ok()) {
    std::cerr << me << port.status().message() << "\n";
    return 2;
  }
  if (o.interval_ms < 100 || o.interval_ms > 3600000) {
    std::cerr << me << "--interval-ms must be in 100..3600000, got " << o.interval_ms << "\n";
    return 2;
  }
  // Chart.js from the Debian package, read once: the page works without the internet.
  std::vector<std::string> candidates = {o.chart_js};
  if (o.chart_js.empty())
    candidates = {"/usr/share/javascript/chart.js/chart.umd.min.js", "/usr/share/javascript/chart.js/chart.min.js",
                  "/usr/share/javascript/chart.js/chart.umd.js", "/usr/share/javascript/chart.js/chart.js"};
  std::string chart_js;
  for (const auto& c : candidates) {
    std::ifstream in(c, std::ios::binary);
    if (!in) continue;
    chart_js.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!chart_js.empty()) break;
  }
  if (chart_js.empty()) {
    std::cerr << me << "cannot read Chart.js from " << (o.chart_js.empty() ? candidates[1] : o.chart_js)
              << " (install the Debian package libjs-chart.js, scripts/setup.sh, or pass --chart-js FILE)\n";
    return 2;
  }
  auto probe = ClusterProbe::create(o.cluster, "_dashboard", std::chrono::milliseconds(o.timeout_ms));
  if (!probe.ok()) {
    std::cerr << me << probe.status().message() << "\n";
    return 2;
  }
  // Loopback: anyone on this host may look (as with `actorflow status`, which needs the cluster
  // file). Elsewhere: the cluster secret, as a Bearer header or ?token=.
  const bool open = is_loopback(o.bind);
  if (!open && (*probe)->secret().empty()) {
    std::cerr << me << "--bind " << o.bind
              << " is not a loopback address and the cluster has no secret to protect the page with; set "
                 "[cluster] secret_file or bind 127.0.0.1 (and reach it through an SSH tunnel)\n";
    return 2;
  }
  DashboardState state(o.cluster);
  net::MetricsHttpOptions ho;
  ho.host = o.bind;
  ho.port = *port;
  ho.secret = open ? "" : (*probe)->secret();
  ho.token_in_query = true;
  net::HttpRoute page{"text/html; charset=utf-8", false, [] { return std::string(kDashboardPage); }};
  ho.routes["/"] = page;
  ho.routes["/index.html"] = page;
  ho.routes["/chart.js"] = net::HttpRoute{"text/javascript; charset=utf-8", false, [chart_js] { return chart_js; }};
  ho.routes["/api/state"] = net::HttpRoute{"application/json", true, [&state] { return state.json(); }};
  auto server = net::MetricsHttpServer::start(std::move(ho));
  if (!server.ok()) {
    std::cerr << me << "cannot serve on " << o.bind << ":" << *port << ": " << server.status().message() << "\n";
    return 2;
  }
  const std::string host = o.bind.find(':') != std::string::npos && o.bind.front() != '[' ? "[" + o.bind + "]" : o.bind;
  std::cout << "actorflow dashboard: serving http://" << host << ":" << (*server)->port() << "/"
            << (open ? "" : "?token=<cluster secret>") << " for " << o.cluster << " (Ctrl-C to stop)" << std::endl;
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  const auto t0 = std::chrono::steady_clock::now();
  const auto interval = std::chrono::milliseconds(o.interval_ms);
  (*probe)->prime();  // the first samples: rates come from the next poll, one interval later
  auto next = std::chrono::steady_clock::now() + interval;
  while (!g_stop) {
    // (A poll has no event to wait on: sleep in short slices so a signal ends the wait at once.)
    while (!g_stop && std::chrono::steady_clock::now() < next) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (g_stop) break;
    next = std::chrono::steady_clock::now() + interval;
    auto rows = (*probe)->poll();
    state.update(rows, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::cout << "actorflow dashboard: stopped" << std::endl;
  return 0;
}

}  // namespace cli
}  // namespace actorflow
