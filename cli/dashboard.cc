// `actorflow dashboard`: a live page of a running cluster (cli/commands.h, docs/architecture/metrics.md "Dashboard").
//
// The main thread polls the cluster every interval with the same probe `actorflow status` uses
// (cli/cluster_probe.h), appends to bounded time series, derives events from what changed
// between polls, and renders one JSON document. The HTTP server (net/metrics_http.h, its own
// threads) serves that document at /api/state, the page (cli/dashboard_page.h) at / and Chart.js
// from the Debian package libjs-chart.js at /chart.js: nothing is fetched from the internet.
#include <fcntl.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "actors/auth.h"
#include "cli/cluster_probe.h"
#include "cli/commands.h"
#include "cli/waits_view.h"
#include "cli/dashboard_page.h"
#include "core/private_file.h"
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

  // The waits' document (render_waits_json) that the next update() puts in /api/state as "waits".
  void set_waits(std::string json) {
    std::lock_guard<std::mutex> l(mu_);
    while (!json.empty() && json.back() == '\n') json.pop_back();
    waits_ = std::move(json);
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
        << ", \"why\": " << json_str(r.up ? r.metrics_error : r.why + (r.metrics_error.empty() ? "" : "; metrics: " + r.metrics_error)) << ", \"devices\": " << json_str(r.devices)
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
    o << "], \"waits\": " << (waits_.empty() ? "null" : waits_) << "}";
    return o.str();
  }

  const std::string cluster_;
  mutable std::mutex mu_;
  std::string json_;
  std::string waits_;  // guarded by mu_
  bool first_ = true;
  double last_max_step_ = NAN, last_t_ = NAN;
  std::map<std::string, Seen> seen_;
  std::map<std::string, std::map<std::string, std::deque<std::pair<double, double>>>> series_;
  std::deque<Event> events_;
};

// Who may read /api/state off loopback (docs/security.md, "Metrics and dashboard"): whoever
// logged in with this run's login token (random, never the cluster secret) holds a session
// cookie; scripts may send the token as a Bearer header. At most 64 sessions (the oldest is
// dropped), each for 12 hours. Thread-safe: the HTTP threads call it concurrently.
class DashboardAccess {
 public:
  explicit DashboardAccess(std::string token) : token_(std::move(token)) {}

  // /login?token=<t>: a 303 to the page with a fresh session cookie, or 401 for a wrong token.
  net::HttpResponse login(const net::HttpRequest& req) {
    net::HttpResponse r;
    if (!same(query_param(req.query, "token"), token_)) {
      r.code = 401;
      r.reason = "Unauthorized";
      r.body = "wrong or missing token: open the login address `actorflow dashboard` printed or wrote\n";
      return r;
    }
    const std::string sid = random_nonce();
    {
      std::lock_guard<std::mutex> l(mu_);
      const auto now = std::chrono::steady_clock::now();
      for (auto it = sessions_.begin(); it != sessions_.end();) it = now >= it->second ? sessions_.erase(it) : std::next(it);
      while (sessions_.size() >= kMaxSessions) {
        auto oldest = sessions_.begin();
        for (auto it = sessions_.begin(); it != sessions_.end(); ++it)
          if (it->second < oldest->second) oldest = it;
        sessions_.erase(oldest);
      }
      sessions_[sid] = now + kLifetime;
    }
    r.code = 303;
    r.reason = "See Other";
    r.headers = "Location: /\r\nSet-Cookie: af_session=" + sid + "; HttpOnly; SameSite=Strict; Path=/; Max-Age=" +
                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kLifetime).count()) + "\r\n";
    r.body = "logged in\n";
    return r;
  }

  // True when the request carries a live session cookie or "Authorization: Bearer <token>".
  bool allows(const std::string& head) {
    const std::string auth = net::http_header(head, "authorization");
    if (auth.rfind("Bearer ", 0) == 0 && same(auth.substr(7), token_)) return true;
    const std::string cookies = net::http_header(head, "cookie");
    for (size_t p = 0; p < cookies.size();) {
      size_t semi = cookies.find(';', p);
      if (semi == std::string::npos) semi = cookies.size();
      std::string kv = cookies.substr(p, semi - p);
      kv.erase(0, kv.find_first_not_of(' '));
      if (kv.rfind("af_session=", 0) == 0) {
        std::lock_guard<std::mutex> l(mu_);
        auto it = sessions_.find(kv.substr(11));
        if (it != sessions_.end() && std::chrono::steady_clock::now() < it->second) return true;
      }
      p = semi + 1;
    }
    return false;
  }

 private:
  static constexpr size_t kMaxSessions = 64;
  static constexpr std::chrono::hours kLifetime{12};

  static bool same(const std::string& a, const std::string& b) {
    return !b.empty() && a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), b.size()) == 0;
  }
  // The value of `name` among a query's &-separated parameters ("" when absent; not URL-decoded:
  // tokens are hex).
  static std::string query_param(const std::string& query, const std::string& name) {
    for (size_t p = 0; p <= query.size();) {
      size_t amp = query.find('&', p);
      if (amp == std::string::npos) amp = query.size();
      const std::string kv = query.substr(p, amp - p);
      if (kv.compare(0, name.size() + 1, name + "=") == 0) return kv.substr(name.size() + 1);
      p = amp + 1;
    }
    return "";
  }

  const std::string token_;
  std::mutex mu_;
  std::map<std::string, std::chrono::steady_clock::time_point> sessions_;  // id -> expiry
};

// Writes `token` to `path` with mode 0600 from its creation on (core/private_file.h; a symbolic
// link there is replaced, not followed).
Status write_token_file(const std::string& path, const std::string& token) {
  Status s = write_private_file(path, token + "\n");
  return s.ok() ? s : s.with_prefix("cannot write the token file " + path);
}

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
  // file). Elsewhere: a session from this run's own login token; the cluster secret never leaves
  // this process (it only proves this tool to the tasks' metrics endpoints).
  const bool open = is_loopback(o.bind);
  const std::string token = open ? std::string() : random_nonce();
  if (!open && !o.token_file.empty()) {
    Status st = write_token_file(o.token_file, token);
    if (!st.ok()) {
      std::cerr << me << st.message() << "\n";
      return 2;
    }
  }
  DashboardState state(o.cluster);
  auto access = std::make_shared<DashboardAccess>(token);
  net::MetricsHttpOptions ho;
  ho.host = o.bind;
  ho.port = *port;
  net::HttpRoute page{"text/html; charset=utf-8", false, [] { return std::string(kDashboardPage); }, nullptr};
  ho.routes["/"] = page;
  ho.routes["/index.html"] = page;
  ho.routes["/chart.js"] = net::HttpRoute{"text/javascript; charset=utf-8", false, [chart_js] { return chart_js; }, nullptr};
  net::HttpRoute api{"application/json", false, [&state] { return state.json(); }, nullptr};
  if (!open) {
    api.handle = [&state, access](const net::HttpRequest& req) {
      net::HttpResponse r;
      if (!access->allows(req.head)) {
        r.code = 401;
        r.reason = "Unauthorized";
        r.body = "log in first: /login?token=<the token `actorflow dashboard` printed or wrote>\n";
        return r;
      }
      r.content_type = "application/json";
      r.headers = "Cache-Control: no-store\r\n";
      r.body = state.json();
      return r;
    };
    net::HttpRoute login;
    login.handle = [access](const net::HttpRequest& req) { return access->login(req); };
    ho.routes["/login"] = login;
  }
  ho.routes["/api/state"] = api;
  auto server = net::MetricsHttpServer::start(std::move(ho));
  if (!server.ok()) {
    std::cerr << me << "cannot serve on " << o.bind << ":" << *port << ": " << server.status().message() << "\n";
    return 2;
  }
  const std::string host = o.bind.find(':') != std::string::npos && o.bind.front() != '[' ? "[" + o.bind + "]" : o.bind;
  const std::string base = "http://" + host + ":" + std::to_string((*server)->port()) + "/";
  std::cout << "actorflow dashboard: serving " << base << " for " << o.cluster << " (Ctrl-C to stop)" << std::endl;
  if (!open) {
    std::cout << "actorflow dashboard: log in once at " << base << "login?token="
              << (o.token_file.empty() ? token : "<the token in " + o.token_file + ">")
              << " (this dashboard's own token for this run, not the cluster secret; plain HTTP: prefer an SSH tunnel)"
              << std::endl;
  }
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
    // The tasks' waits of at least a second (GET /waits; docs/architecture/diagnosis.md).
    state.set_waits(render_waits_json(parse_task_waits((*probe)->fetch_all("/waits"), 1.0)));
    state.update(rows, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::cout << "actorflow dashboard: stopped" << std::endl;
  return 0;
}

}  // namespace cli
}  // namespace actorflow
