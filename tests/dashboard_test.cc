// `actorflow dashboard`: the live cluster page, loaded in a real headless
// Chromium (Debian's, installed by scripts/setup.sh) while a job trains: the tasks table lists
// every task and the global step in the DOM grows between two loads; a screenshot is saved in the
// test's output directory; a killed parameter server shows as a restart, a restore and a
// rollback in the event log. Also: what the page serves and protects (/api/state behind a login
// off loopback, bad requests answered, not fatal), and bad options (exit 2 with a clear message).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "net/socket.h"
#include "tests/util/http.h"
#include "tests/util/measured_job.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::ChildProcess;

using testing::get;
using testing::has;
using testing::raw_http;

// The number after `"key": ` in a JSON text (the first one), or -1.
double json_number(const std::string& json, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\": ([0-9.e+-]+)");
  return std::regex_search(json, m, re) ? std::stod(m[1]) : -1;
}

// Where this test's screenshots go: $AF_TEST_OUTPUT_DIR, or <build>/test-output/DashboardTest.
std::string output_dir() {
  const char* env = std::getenv("AF_TEST_OUTPUT_DIR");
  const std::string dir = env && *env ? std::string(env) : std::string(AF_BINARY_DIR) + "/test-output/DashboardTest";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return dir;
}

// Runs Debian's chromium headless on `url` with `args` (e.g. --dump-dom), bounded; returns its
// output (stdout and stderr together).
struct Chromium {
  testing::TempDir profile;
  Result<std::string> run(const std::vector<std::string>& args, const std::string& url) {
    std::vector<std::string> argv = {"/usr/bin/chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
                                     "--disable-dev-shm-usage", "--no-first-run", "--user-data-dir=" + profile.path(),
                                     "--virtual-time-budget=4000"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back(url);
    auto p = ChildProcess::start(argv, {}, {});
    if (!p) return Internal("cannot start chromium");
    auto rc = p->await_exit(90s);
    if (!rc.ok()) return rc.status().with_prefix("chromium " + url + ": " + p->output());
    if (*rc != 0) return Internal("chromium exited " + std::to_string(*rc) + ": " + p->output());
    return p->output();
  }
};

// The global step the page shows (<b id="global-step">N</b>), or -1.
double dom_step(const std::string& dom) {
  std::smatch m;
  static const std::regex re("id=\"global-step\">([0-9]+)<");
  return std::regex_search(dom, m, re) ? std::stod(m[1]) : -1;
}

using testing::MeasuredJob;

// Polls GET /api/state (bounded by `timeout`) until `ok(json)`; returns the last document.
template <typename F>
std::string await_state(uint16_t port, std::chrono::milliseconds timeout, F ok) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string s;
  while (std::chrono::steady_clock::now() < deadline) {
    s = get(port, "/api/state");
    if (ok(s)) return s;
    std::this_thread::sleep_for(200ms);  // the dashboard updates once per interval: nothing to wait on
  }
  return s;
}

TEST(DashboardTest, AHeadlessChromiumShowsTheTasksAndAGrowingGlobalStep) {
  // chromium is a test dependency (scripts/setup.sh installs it): its absence is a failure.
  ASSERT_EQ(system("test -x /usr/bin/chromium"), 0) << "chromium is not installed (run scripts/setup.sh)";
  // Summaries every second and checkpoints every 2 s, for the curves and the event log.
  MeasuredJob job("logdir = \"@DIR@/logs\"\nsave_summaries_secs = 1\nsave_checkpoint_secs = 2\n");
  ASSERT_TRUE(job.up);
  ASSERT_TRUE(job.up->await_output("Step: ", 120s, 2).ok()) << job.up->output();
  const int port = testing::free_port();
  auto dash = ChildProcess::start({binary("actorflow"), "dashboard", "--cluster", job.file, "--port",
                                   std::to_string(port), "--interval-ms", "500"});
  ASSERT_TRUE(dash);
  ASSERT_TRUE(dash->wait_for_output("serving http://127.0.0.1:" + std::to_string(port) + "/", 30s)) << dash->output();
  const auto p = static_cast<uint16_t>(port);

  // The state has every task up with a step, the summaries' loss and accuracy, and a checkpoint event.
  const std::string state = await_state(p, 90s, [](const std::string& s) {
    return has(s, "\"up\": 3, \"total\": 3") && json_number(s, "global_step") > 0 && has(s, "\"loss\": {\"worker/0\": [[") &&
           has(s, "\"accuracy\": {\"worker/0\": [[") && has(s, "checkpoint saved at global step");
  });
  EXPECT_TRUE(has(state, "\"up\": 3, \"total\": 3")) << state.substr(0, 4000);
  EXPECT_TRUE(has(state, "\"loss\": {\"worker/0\": [[")) << state.substr(0, 4000);
  EXPECT_TRUE(has(state, "\"accuracy\": {\"worker/0\": [[")) << state.substr(0, 4000);
  EXPECT_TRUE(has(state, "\"cpu_percent\": {\"ps/0\": [[")) << state.substr(0, 4000);
  EXPECT_TRUE(has(state, "\"net_in\": {\"ps/0\": [[")) << state.substr(0, 4000);
  EXPECT_TRUE(has(state, "\"steps_per_sec\": {\"global step\": [[")) << state.substr(0, 4000);
  EXPECT_TRUE(has(state, "dashboard started: 3/3 tasks up")) << state.substr(0, 4000);
  EXPECT_TRUE(has(state, "\"kind\": \"checkpoint\", \"text\": \"worker/0: checkpoint saved at global step"))
      << state.substr(0, 4000);
  // Chart.js is served from the Debian package, not the internet.
  const std::string js = get(p, "/chart.js");
  EXPECT_TRUE(has(js, " 200 OK") && has(js, "Chart.js v")) << js.substr(0, 300);

  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
  Chromium chromium;
  auto dom1 = chromium.run({"--dump-dom"}, url);
  ASSERT_TRUE(dom1.ok()) << dom1.status();
  const double s1 = dom_step(*dom1);
  ASSERT_GT(s1, 0) << *dom1;
  for (const char* t : {"ps/0", "worker/0", "worker/1"})
    EXPECT_TRUE(has(*dom1, "data-task=\"" + std::string(t) + "\"")) << t << "\n" << *dom1;
  EXPECT_TRUE(has(*dom1, ">chief<")) << *dom1;
  EXPECT_TRUE(has(*dom1, ">UP<")) << *dom1;
  // No error shown: Chart.js loaded and /api/state was read (the error line is empty).
  EXPECT_TRUE(has(*dom1, "<div id=\"error\"></div>")) << *dom1;
  EXPECT_TRUE(has(*dom1, "dashboard started")) << *dom1;
  // Wait (bounded) until the dashboard knows a later step, then load the page again.
  (void)await_state(p, 60s, [&](const std::string& s) { return json_number(s, "global_step") > s1; });
  auto dom2 = chromium.run({"--dump-dom"}, url);
  ASSERT_TRUE(dom2.ok()) << dom2.status();
  const double s2 = dom_step(*dom2);
  EXPECT_GT(s2, s1) << *dom2;

  // The parameter server killed: `actorflow up` restarts it empty, the chief restores it from the
  // newest checkpoint, and the event log says so: a new process, a restore, a rollback.
  const auto pids = testing::processes_with({job.dir.path(), "--job ps", "--task 0"});
  ASSERT_EQ(pids.size(), 1u);
  ::kill(pids[0], SIGKILL);
  const std::string after = await_state(p, 90s, [](const std::string& s) {
    return has(s, "\"kind\": \"restart\", \"text\": \"ps/0 restarted") && has(s, "\"kind\": \"rollback\"") &&
           has(s, "\"up\": 3, \"total\": 3");
  });
  EXPECT_TRUE(has(after, "\"kind\": \"restart\", \"text\": \"ps/0 restarted (a new process)\"")) << after;
  EXPECT_TRUE(has(after, "\"kind\": \"restore\", \"text\": \"worker/0: model restored from a checkpoint\"")) << after;
  EXPECT_TRUE(has(after, "\"kind\": \"rollback\", \"text\": \"worker/0: parameter server restored from a checkpoint; "))
      << after;

  const std::string shot = output_dir() + "/dashboard.png";
  std::remove(shot.c_str());
  auto sc = chromium.run({"--screenshot=" + shot, "--window-size=1280,1400", "--hide-scrollbars"}, url);
  ASSERT_TRUE(sc.ok()) << sc.status();
  struct stat st {};
  ASSERT_EQ(stat(shot.c_str(), &st), 0) << "no screenshot at " << shot << "\n" << *sc;
  EXPECT_GT(st.st_size, 10000) << shot;
  std::cout << "dashboard screenshot: " << shot << "\n";

  dash->signal(SIGTERM);
  EXPECT_EQ(dash->wait(30s), 0) << dash->output();
}

// Off loopback the state needs a session opened with the dashboard's own login token (printed
// once; never the cluster secret, which is refused in every form and never printed); the page and
// Chart.js do not (they hold no data). Bad requests are answered and the dashboard keeps serving;
// tasks that are down show as down with why, in the table and the event log.
TEST(DashboardTest, OffLoopbackTheStateNeedsALoginAndBadRequestsAreAnswered) {
  testing::TempDir dir;
  const std::string secret_file = dir.write("secret", "dashboard-test-secret\n");
  chmod(secret_file.c_str(), 0600);
  const std::string file = dir.write("cluster.toml", "[cluster]\nsecret_file = \"" + secret_file +
                                                         "\"\n[jobs]\nworker = [\"localhost:" +
                                                         std::to_string(testing::free_port()) + "\"]\n");
  const int port = testing::free_port();
  auto dash = ChildProcess::start({binary("actorflow"), "dashboard", "--cluster", file, "--port", std::to_string(port),
                                   "--bind", "0.0.0.0", "--interval-ms", "200", "--timeout-ms", "300"});
  ASSERT_TRUE(dash);
  ASSERT_TRUE(dash->wait_for_output("login?token=", 30s)) << dash->output();
  std::smatch m;
  const std::string printed = dash->output();
  ASSERT_TRUE(std::regex_search(printed, m, std::regex("login\\?token=([0-9a-f]{64})"))) << printed;
  const std::string token = m[1];
  EXPECT_FALSE(has(printed, "dashboard-test-secret")) << printed;
  const auto p = static_cast<uint16_t>(port);
  EXPECT_TRUE(has(get(p, "/"), " 200 OK"));
  EXPECT_TRUE(has(get(p, "/chart.js"), " 200 OK"));
  EXPECT_TRUE(has(get(p, "/api/state"), " 401 Unauthorized"));
  EXPECT_TRUE(has(get(p, "/api/state?token=" + token), " 401 Unauthorized"));  // a token in the URL is no session
  EXPECT_TRUE(has(get(p, "/api/state", "Bearer wrong"), " 401 Unauthorized"));
  // The cluster secret is no credential here, in any form.
  EXPECT_TRUE(has(get(p, "/api/state?token=dashboard-test-secret"), " 401 Unauthorized"));
  EXPECT_TRUE(has(get(p, "/api/state", "Bearer dashboard-test-secret"), " 401 Unauthorized"));
  EXPECT_TRUE(has(get(p, "/login?token=dashboard-test-secret"), " 401 Unauthorized"));
  EXPECT_TRUE(has(raw_http(p, "GET /api/state HTTP/1.1\r\nCookie: af_session=" + std::string(64, '0') + "\r\n\r\n"),
                  " 401 Unauthorized"));
  // The login: a redirect to the page with an HttpOnly session cookie.
  const std::string login = get(p, "/login?token=" + token);
  EXPECT_TRUE(has(login, " 303 See Other") && has(login, "Location: /\r\n")) << login;
  ASSERT_TRUE(std::regex_search(login, m, std::regex("Set-Cookie: af_session=([0-9a-f]{64}); HttpOnly; SameSite=Strict")))
      << login;
  const std::string cookie = "Cookie: theme=dark; af_session=" + std::string(m[1]) + "\r\n";
  // Bad requests: garbage, a non-GET, an oversized head, a client that sends nothing.
  EXPECT_TRUE(has(raw_http(p, "hello\r\n\r\n"), " 400 "));
  EXPECT_TRUE(has(raw_http(p, "POST /api/state HTTP/1.1\r\n\r\n"), " 405 "));
  EXPECT_TRUE(has(raw_http(p, "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n"), " 400 "));
  EXPECT_TRUE(has(get(p, "/nope"), " 404 "));
  {
    auto idle = net::connect_tcp("127.0.0.1:" + std::to_string(port), 5s);
    ASSERT_TRUE(idle.ok());
    // An idle connection does not block the others (they are served on their own threads).
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(has(get(p, "/healthz"), " 200 OK"));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
  }
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  std::string s;
  while (std::chrono::steady_clock::now() < deadline) {
    s = raw_http(p, "GET /api/state HTTP/1.1\r\n" + cookie + "\r\n");
    if (has(s, "worker/0 is down")) break;
    std::this_thread::sleep_for(100ms);  // the dashboard updates once per interval
  }
  EXPECT_TRUE(has(s, " 200 OK")) << s;
  EXPECT_TRUE(has(s, "\"up\": 0, \"total\": 1")) << s;
  EXPECT_TRUE(has(s, "\"state\": \"down\"")) << s;
  EXPECT_TRUE(has(s, "\"kind\": \"down\", \"text\": \"worker/0 is down: ")) << s;
  EXPECT_TRUE(has(get(p, "/api/state", "Bearer " + token), " 200 OK"));  // scripts
  ASSERT_TRUE(dash->running()) << dash->output();
  dash->signal(SIGTERM);
  EXPECT_EQ(dash->wait(30s), 0) << dash->output();
  EXPECT_FALSE(has(dash->output(), "dashboard-test-secret")) << dash->output();
}

TEST(DashboardTest, BadOptionsExitTwoWithAClearMessage) {
  testing::TempDir dir;
  const std::string file =
      dir.write("cluster.toml", "[jobs]\nworker = [\"localhost:" + std::to_string(testing::free_port()) + "\"]\n");
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {binary("actorflow"), "dashboard"});
    auto c = ChildProcess::start(args, {}, {});
    const int rc = c ? c->wait(30s) : -1;
    return std::make_pair(rc, c ? c->output() : std::string());
  };
  auto r = run({"--cluster", dir.file("missing.toml")});
  EXPECT_EQ(r.first, 2) << r.second;
  EXPECT_TRUE(has(r.second, "missing.toml")) << r.second;
  for (const char* bad : {"70000", "abc", "-1", "8o80"}) {
    r = run({"--cluster", file, "--port", bad});
    EXPECT_EQ(r.first, 2) << bad << ": " << r.second;
    EXPECT_TRUE(has(r.second, "--port must be a number in 0..65535")) << bad << ": " << r.second;
  }
  // A port in use.
  const int busy = testing::free_port();
  auto l = net::listen_tcp("127.0.0.1", static_cast<uint16_t>(busy), 1);
  ASSERT_TRUE(l.ok()) << l.status();
  r = run({"--cluster", file, "--port", std::to_string(busy)});
  EXPECT_EQ(r.first, 2) << r.second;
  EXPECT_TRUE(has(r.second, "cannot serve on 127.0.0.1:" + std::to_string(busy))) << r.second;
  // Chart.js missing.
  r = run({"--cluster", file, "--port", "0", "--chart-js", dir.file("no-chart.js")});
  EXPECT_EQ(r.first, 2) << r.second;
  EXPECT_TRUE(has(r.second, "cannot read Chart.js from " + dir.file("no-chart.js"))) << r.second;
  // Off loopback with a token file that cannot be written.
  r = run({"--cluster", file, "--port", "0", "--bind", "0.0.0.0", "--token-file", dir.file("no/such/dir/token")});
  EXPECT_EQ(r.first, 2) << r.second;
  EXPECT_TRUE(has(r.second, "cannot write the token file " + dir.file("no/such/dir/token"))) << r.second;
  // A bad interval.
  r = run({"--cluster", file, "--port", "0", "--interval-ms", "5"});
  EXPECT_EQ(r.first, 2) << r.second;
  EXPECT_TRUE(has(r.second, "--interval-ms")) << r.second;
}

}  // namespace
}  // namespace actorflow
