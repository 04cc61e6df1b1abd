// Multi-host for real: seed 002's CNN across "hosts" that are network namespaces on
// one bridge (scripts/netns-cluster.sh), each host running `actorflow up` for its own tasks: the
// parameter server on host 0 (10.213.0.1), worker/i on host i+1. TLS on and a cluster secret.
// The faults are real ones: a host's link taken down (every packet, both planes and heartbeats),
// every process of a host SIGKILLed, the ps host's bandwidth capped with tc's tbf. Each run must
// end like a scenario-suite run (tests/util/scenario.h: finish, accuracy bound, global_step
// monotonic except logged ps restores, checkpoints readable, no process left) and prints a
// "MULTIHOST name: {...}" line with detection and recovery times measured from the log lines'
// timestamps (docs/reliability.md).
//
// The tests skip, saying why, when the runner is not root or cannot create network namespaces;
// otherwise they run and fail on real problems.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <numeric>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>
#include <tuple>

#include "tests/util/process.h"
#include "tests/util/scenario.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::ChildProcess;
using testing::contains;
using testing::expect_scenario_outcome;
using testing::free_port;
using testing::lines_of;
using testing::log_stamp_now;
using testing::measure;
using testing::Outcome;
using testing::report;
using testing::SharedLog;
using testing::TempDir;
using testing::TrainingBounds;
using testing::trouble;

constexpr int kWorkers = 3;
constexpr int kHosts = kWorkers + 1;  // host 0: ps/0; host i: worker/i-1
constexpr int kSteps = 1500;
// Fault-free, 1500 steps: accuracy 0.86-0.88, loss 0.32-0.39 across hosts and on loopback; the
// 1000-step runs under a bandwidth cap 0.85 and 0.40; the faults cost up to ~0.02.
constexpr double kMinAccuracy = 0.72;
constexpr double kMaxLoss = 0.8;
// Async training is not deterministic (which worker's gradient lands first changes): the
// cross-host run's mean accuracy must be within this of the loopback run's.
constexpr double kSameAccuracy = 0.05;

std::string script() { return std::string(AF_SOURCE_DIR) + "/scripts/netns-cluster.sh"; }

// Runs scripts/netns-cluster.sh ARGS --owner <this process>; its exit status and output.
std::pair<int, std::string> run_script(std::vector<std::string> args, std::chrono::milliseconds timeout = 30s) {
  args.insert(args.begin(), {"/bin/bash", script()});
  args.push_back("--owner");
  args.push_back(std::to_string(getpid()));
  auto p = ChildProcess::start(args, {}, {});
  if (!p) return {-1, "cannot start " + script()};
  const int rc = p->wait(timeout);
  return {rc, p->output()};
}

// kHosts network namespaces on a bridge, removed (with every process in them) by the destructor.
class NetnsCluster {
 public:
  // The cluster, or nullptr with `skip` set to why namespaces are not available here (not root,
  // or the script's exit status 77); any other failure is a test failure (and nullptr).
  static std::unique_ptr<NetnsCluster> create(int hosts, std::string* skip) {
    if (geteuid() != 0) {
      *skip = "network namespaces need root (running as uid " + std::to_string(geteuid()) + ")";
      return nullptr;
    }
    std::unique_ptr<NetnsCluster> c(new NetnsCluster());
    auto [rc, out] = run_script({"up", std::to_string(hosts)});
    if (rc == 77) {
      *skip = out;
      c->up_ = false;
      return nullptr;
    }
    EXPECT_EQ(rc, 0) << out;
    if (rc != 0) return nullptr;
    for (const auto& l : lines_of(out)) {
      std::istringstream in(l);
      int i;
      std::string ns, addr;
      if (in >> i >> ns >> addr) c->addr_.push_back(addr);
    }
    EXPECT_EQ(static_cast<int>(c->addr_.size()), hosts) << out;
    if (static_cast<int>(c->addr_.size()) != hosts) return nullptr;
    return c;
  }
  ~NetnsCluster() {
    if (!up_) return;
    auto [rc, out] = run_script({"down"}, 60s);
    EXPECT_EQ(rc, 0) << "netns-cluster.sh down: " << out;
  }
  const std::string& addr(int host) const { return addr_[host]; }
  // Runs `netns-cluster.sh ARGS` for this cluster; fails the test when it fails.
  void script(const std::vector<std::string>& args) const {
    auto [rc, out] = run_script(args);
    EXPECT_EQ(rc, 0) << "netns-cluster.sh " << ::testing::PrintToString(args) << ": " << out;
  }
  // argv running `argv` inside host `host`.
  std::vector<std::string> in_host(int host, const std::vector<std::string>& argv) const {
    std::vector<std::string> r = {"/bin/bash", ::actorflow::script(), "exec", std::to_string(host), "--owner",
                                  std::to_string(getpid()), "--"};
    r.insert(r.end(), argv.begin(), argv.end());
    return r;
  }

 private:
  NetnsCluster() = default;
  bool up_ = true;
  std::vector<std::string> addr_;
};

// The cluster directory of a run: cluster file (TLS and a secret), certificates, secret.
std::string write_cluster(const TempDir& dir, const std::vector<std::string>& addresses) {
  const std::string logdir = dir.file("logs");
  std::string jobs = "[jobs]\nps = [\"" + addresses[0] + "\"]\nworker = [";
  for (int w = 0; w < kWorkers; ++w) jobs += std::string(w ? ", " : "") + "\"" + addresses[w + 1] + "\"";
  jobs += "]\n";
  const std::string supervisor = "[supervisor]\nlogdir = \"" + logdir +
                                 "\"\nsave_checkpoint_secs = 0.5\nmax_restarts = 5\nrestart_window_secs = 60\n";
  dir.write("cluster.key", "multihost-test-secret-" + std::to_string(getpid()) + "\n");
  chmod(dir.file("cluster.key").c_str(), 0600);
  // Certificates first (from a file without tls_dir), then the cluster file that uses them.
  const std::string plain = dir.write("plain.toml", "[cluster]\nsecret_file = \"cluster.key\"\n" + jobs);
  auto certs = ChildProcess::start({binary("actorflow"), "certs", "--cluster", plain, "--out", dir.file("certs")});
  EXPECT_TRUE(certs && certs->wait(30s) == 0) << (certs ? certs->output() : "");
  return dir.write("cluster.toml", "[cluster]\nname = \"multihost\"\nsecret_file = \"cluster.key\"\ntls_dir = \"certs\"\n" +
                                       jobs + supervisor);
}

// The training program's arguments. A step that takes longer than `step_timeout` is taken for a
// lost message and retried (5 s; in a fault-free run scaled by the build's slowdown, so a
// sanitized build's slow steps are not counted as failures: testing::slowdown()).
std::vector<std::string> training_program(int steps, const std::vector<std::string>& extra,
                                          const std::string& step_timeout = "5") {
  std::vector<std::string> a = {binary("samples/distributed_cnn"), "--steps", std::to_string(steps), "--print-every",
                                "10", "--learning-rate", "2e-3", "--conv1", "8", "--conv2", "16", "--hidden", "64",
                                "--step-timeout-secs", step_timeout, "--seed", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// With AF_MULTIHOST_OUT=DIR set, the run's whole output goes to DIR/<name>.log (for reading the
// lines behind the figures); the failure-related lines are printed either way.
void keep_output(const Outcome& o) {
  const std::string t = trouble(o.out);
  if (!t.empty()) std::printf("%s: what went wrong (and was recovered from):\n%s", o.name.c_str(), t.c_str());
  const char* d = std::getenv("AF_MULTIHOST_OUT");
  if (d == nullptr) return;
  std::string file = o.name;
  for (char& ch : file)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  std::ofstream(std::string(d) + "/" + file + ".log") << o.out;
}

// A fault applied while the job trains; returns the moment it began (log_stamp_now()) or -1.
// It may restart a host's `up` through `restart_host`.
struct Fault {
  std::function<double(const NetnsCluster&, const std::function<void(int)>& restart_host)> apply;
};

struct RunOptions {
  std::vector<std::string> extra_args;  // for the training program
  int steps = kSteps;
  std::optional<Fault> fault;
  std::string shape_ps;                 // tc rate for the ps host for the whole run ("" = none)
  bool check_bound_addresses = false;   // `ss` in each host: every listening port on its own address
  // Run once training has started, with the run's directory (cluster.toml, certs, cluster.key).
  std::function<void(const NetnsCluster&, const TempDir&)> while_training;
};

// Every listening TCP socket in host `host` is bound to `addr` (none to all interfaces or
// loopback), and there is at least one (the control plane) on `port`, one more (the data plane).
void expect_bound_to_own_address(const NetnsCluster& c, int host, const std::string& addr) {
  auto ss = ChildProcess::start(c.in_host(host, {"ss", "-ltnH"}), {}, {});
  ASSERT_TRUE(ss);
  ASSERT_EQ(ss->wait(20s), 0) << ss->output();
  const auto lines = lines_of(ss->output());
  int listening = 0;
  static const std::regex local_re("^LISTEN\\s+\\S+\\s+\\S+\\s+(\\S+):([0-9]+)\\s");
  std::smatch m;
  for (const auto& l : lines) {
    if (!std::regex_search(l, m, local_re)) continue;
    ++listening;
    EXPECT_EQ(m[1].str(), addr) << "host " << host << " listens on " << m[1] << ":" << m[2] << ", not only on its own "
                                << addr << "\n" << ss->output();
  }
  EXPECT_GE(listening, 2) << "host " << host << ": the control and data planes must listen\n" << ss->output();
  std::printf("host %d (%s) listens on:\n%s", host, addr.c_str(), ss->output().c_str());
}

// The job across the namespaces' hosts, with `opts`; checks everything a scenario run promises.
Outcome run_multihost(const NetnsCluster& c, const std::string& name, const RunOptions& opts) {
  Outcome o;
  o.name = name;
  TempDir dir;
  std::vector<std::string> addresses;
  for (int h = 0; h < kHosts; ++h) addresses.push_back(c.addr(h) + ":2222");
  const std::string file = write_cluster(dir, addresses);
  if (!opts.shape_ps.empty()) c.script({"shape", "0", opts.shape_ps});
  auto log = std::make_shared<SharedLog>();
  std::vector<std::string> up = {binary("actorflow"), "up", "--cluster", file, "--"};
  const auto program = training_program(opts.steps, opts.extra_args,
                                        opts.fault || !opts.shape_ps.empty() ? "5" : testing::scaled_secs(5));
  up.insert(up.end(), program.begin(), program.end());
  std::vector<std::unique_ptr<ChildProcess>> hosts(kHosts), gone;  // gone: a killed host's `up`
  const auto t0 = std::chrono::steady_clock::now();
  auto start_host = [&](int h) {
    if (hosts[h]) gone.push_back(std::move(hosts[h]));
    hosts[h] = ChildProcess::start(c.in_host(h, up), {}, testing::default_fail_fast_lines(), log);
  };
  for (int h = 0; h < kHosts; ++h) start_host(h);
  for (const auto& h : hosts)
    if (!h) return o;
  double fault_t = -1;
  // The chief prints a progress line every 10 of its steps; 20 of them: ~600 global steps.
  Status started = hosts[1]->await_output("Worker : 0, Step: ", 120s, opts.fault ? 20 : 1);
  EXPECT_TRUE(started.ok()) << name << ": " << started << "\n" << log->text();
  if (started.ok() && opts.check_bound_addresses)
    for (int h = 0; h < kHosts; ++h) expect_bound_to_own_address(c, h, c.addr(h));
  if (started.ok() && opts.while_training) opts.while_training(c, dir);
  if (started.ok() && opts.fault) fault_t = opts.fault->apply(c, start_host);
  // The worker hosts' `up` exit once their worker finished; 200 s stays below ctest's 300 s.
  const auto deadline = std::chrono::steady_clock::now() + 200s;
  o.up_exit = 0;
  for (int h = 1; h < kHosts && started.ok(); ++h) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const Result<int> ended = hosts[h]->await_exit(std::max(left, std::chrono::milliseconds(1)));
    if (!ended.ok()) {
      ADD_FAILURE() << name << ": host " << h << ": " << ended.status();
      o.up_exit = -1;
      break;
    }
    if (*ended != 0 && o.up_exit == 0) o.up_exit = *ended;
  }
  // The ps host serves until told to stop, like a parameter server machine.
  for (int h = 0; h < kHosts; ++h) hosts[h]->signal(SIGTERM);
  for (int h = 0; h < kHosts; ++h) {
    const int rc = hosts[h]->wait(30s);
    if (rc != 0 && o.up_exit == 0) o.up_exit = rc;
  }
  o.wall_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!opts.shape_ps.empty()) c.script({"unshape", "0"});
  hosts.clear();
  gone.clear();
  o.out = log->text();
  measure(o, fault_t);
  expect_scenario_outcome(o, TrainingBounds{kWorkers, kMinAccuracy, kMaxLoss}, dir.file("logs"), dir.path());
  report(o, "MULTIHOST");
  keep_output(o);
  return o;
}

// The same job on loopback under one `actorflow up` (the reference for accuracy).
Outcome run_loopback(const std::string& name, const RunOptions& opts) {
  Outcome o;
  o.name = name;
  TempDir dir;
  std::vector<std::string> addresses;
  for (int h = 0; h < kHosts; ++h) addresses.push_back("localhost:" + std::to_string(free_port()));
  const std::string file = write_cluster(dir, addresses);
  std::vector<std::string> argv = {binary("actorflow"), "up", "--cluster", file, "--"};
  const auto program = training_program(opts.steps, opts.extra_args,
                                        opts.fault || !opts.shape_ps.empty() ? "5" : testing::scaled_secs(5));
  argv.insert(argv.end(), program.begin(), program.end());
  const auto t0 = std::chrono::steady_clock::now();
  auto up = ChildProcess::start(argv);
  if (!up) return o;
  const Result<int> ended = up->await_exit(200s);
  o.wall_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ended.ok()) {
    o.up_exit = *ended;
  } else {
    ADD_FAILURE() << name << ": " << ended.status();
    up->signal(SIGTERM);
    up->wait(30s);
  }
  o.out = up->output();
  measure(o);
  expect_scenario_outcome(o, TrainingBounds{kWorkers, kMinAccuracy, kMaxLoss}, dir.file("logs"), dir.path());
  report(o, "MULTIHOST");
  keep_output(o);
  return o;
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

#define MULTIHOST_CLUSTER(c)                                \
  std::string skip_reason;                                  \
  auto c = NetnsCluster::create(kHosts, &skip_reason);      \
  if (!c && !skip_reason.empty()) GTEST_SKIP() << skip_reason; \
  ASSERT_TRUE(c)

// `actorflow status --json` run in host 1 with cluster file `file`: its exit status and how many
// tasks it found up.
std::pair<int, int> status_from_host1(const NetnsCluster& c, const std::string& file, std::string* out) {
  auto st = ChildProcess::start(
      c.in_host(1, {binary("actorflow"), "status", "--cluster", file, "--json", "--timeout-ms", "2000"}), {}, {});
  if (!st) return {-1, -1};
  const int rc = st->wait(60s);
  *out = st->output();
  static const std::regex up_re("\"up\": ([0-9]+), \"total\"");
  std::smatch m;
  return {rc, std::regex_search(*out, m, up_re) ? std::stoi(m[1]) : -1};
}

// While the job runs, from worker/0's host: a client with the cluster's CA certificate and secret
// reaches every task; one without TLS (the right secret) and one with TLS but the wrong secret
// reach none.
void expect_tls_and_secret_required(const NetnsCluster& c, const TempDir& dir) {
  std::string cluster;
  {
    std::ifstream in(dir.file("cluster.toml"));
    std::stringstream ss;
    ss << in.rdbuf();
    cluster = ss.str();
  }
  std::string out;
  auto [rc, up] = status_from_host1(c, dir.file("cluster.toml"), &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(up, kHosts) << out;
  std::string no_tls = cluster;
  no_tls.replace(no_tls.find("tls_dir = \"certs\"\n"), 17, "");
  std::tie(rc, up) = status_from_host1(c, dir.write("no-tls.toml", no_tls), &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_EQ(up, 0) << "a client without TLS reached a task\n" << out;
  dir.write("wrong.key", "not-the-cluster-secret\n");
  chmod(dir.file("wrong.key").c_str(), 0600);
  std::string wrong = cluster;
  wrong.replace(wrong.find("cluster.key"), 11, "wrong.key");
  std::tie(rc, up) = status_from_host1(c, dir.write("wrong-secret.toml", wrong), &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_EQ(up, 0) << "a client with the cluster's certificates but the wrong secret reached a task\n" << out;
}

// Seed 002 across hosts, asynchronous: TLS and a secret (both required of a client), every port
// on its host's own address, the same accuracy as the same job on loopback.
TEST(MultiHostTest, Seed002AsyncAcrossHostsMatchesLoopback) {
  MULTIHOST_CLUSTER(c);
  RunOptions opts;
  opts.check_bound_addresses = true;
  opts.while_training = expect_tls_and_secret_required;
  auto across = run_multihost(*c, "seed 002 async across 4 hosts", opts);
  EXPECT_FALSE(contains(across.out, "step failed")) << trouble(across.out);
  auto loop = run_loopback("seed 002 async on loopback", opts);
  EXPECT_LE(std::fabs(mean(across.accuracy) - mean(loop.accuracy)), kSameAccuracy)
      << "across hosts " << mean(across.accuracy) << ", loopback " << mean(loop.accuracy);
  // A non-loopback cluster without TLS or a secret is refused before anything starts.
  TempDir dir;
  const std::string bare = dir.write("bare.toml", "[jobs]\nps = [\"" + c->addr(0) + ":2222\"]\nworker = [\"" +
                                                      c->addr(1) + ":2222\"]\n");
  auto up = ChildProcess::start(c->in_host(0, {binary("actorflow"), "up", "--cluster", bare}), {}, {});
  ASSERT_TRUE(up);
  EXPECT_EQ(up->wait(30s), 2) << up->output();
  EXPECT_TRUE(contains(up->output(), "needs a secret")) << up->output();
}

TEST(MultiHostTest, Seed002SyncAcrossHostsMatchesLoopback) {
  MULTIHOST_CLUSTER(c);
  RunOptions opts;
  opts.extra_args = {"--sync", "--sync-timeout-secs", "10"};
  opts.steps = 600;
  auto across = run_multihost(*c, "seed 002 sync across 4 hosts", opts);
  EXPECT_FALSE(contains(across.out, "step failed")) << trouble(across.out);
  auto loop = run_loopback("seed 002 sync on loopback", opts);
  // Synchronous training aggregates every replica's gradient each step: the same model.
  EXPECT_LE(std::fabs(mean(across.accuracy) - mean(loop.accuracy)), kSameAccuracy)
      << "across hosts " << mean(across.accuracy) << ", loopback " << mean(loop.accuracy);
}

// A true partition: worker/1's host loses its link for 5 s (everything: both planes and the
// heartbeats). The chief notices it as a silent task; worker/1's steps fail; once the link is
// back, worker/1 goes on training.
TEST(MultiHostTest, WorkerHostLinkDownFor5s) {
  MULTIHOST_CLUSTER(c);
  RunOptions opts;
  opts.fault = Fault{[](const NetnsCluster& c, const std::function<void(int)>&) {
                       const double t = log_stamp_now();
                       c.script({"link", "2", "down"});
                       std::this_thread::sleep_for(5s);  // the fault's duration
                       c.script({"link", "2", "up"});
                       return t;
                     }};
  auto o = run_multihost(*c, "worker/1's host link down 5 s", opts);
  EXPECT_GE(o.detection_secs, 0) << "nobody noticed worker/1's host was cut off\n" << trouble(o.out);
  EXPECT_EQ(o.rolled_back, 0) << "a worker's partition must not roll the model back";
}

// The parameter server's host loses its link for 5 s: every worker's steps fail, the workers
// wait for the model, and training resumes once the link is back.
TEST(MultiHostTest, ParameterServerHostLinkDownFor5s) {
  MULTIHOST_CLUSTER(c);
  RunOptions opts;
  opts.fault = Fault{[](const NetnsCluster& c, const std::function<void(int)>&) {
                       const double t = log_stamp_now();
                       c.script({"link", "0", "down"});
                       std::this_thread::sleep_for(5s);  // the fault's duration
                       c.script({"link", "0", "up"});
                       return t;
                     }};
  auto o = run_multihost(*c, "ps host link down 5 s", opts);
  EXPECT_GE(o.detection_secs, 0) << "nobody noticed the ps host was cut off\n" << trouble(o.out);
  EXPECT_GE(o.recovery_secs, 0) << trouble(o.out);
}

// The parameter server's whole host dies (every process in its namespace SIGKILLed, `up`
// included) and comes back (its `up` started again, as a rebooted machine's service would): the
// chief restores the newest checkpoint into the new ps and every worker resumes.
TEST(MultiHostTest, ParameterServerHostKilledAndRestarted) {
  MULTIHOST_CLUSTER(c);
  RunOptions opts;
  opts.fault = Fault{[](const NetnsCluster& c, const std::function<void(int)>& restart_host) {
                       const double t = log_stamp_now();
                       c.script({"kill", "0"});
                       restart_host(0);
                       return t;
                     }};
  auto o = run_multihost(*c, "ps host killed (every process), restarted", opts);
  EXPECT_TRUE(contains(o.out, "global steps rolled back")) << trouble(o.out);
  EXPECT_GE(o.detection_secs, 0) << trouble(o.out);
  EXPECT_GE(o.recovery_secs, 0) << trouble(o.out);
}

// The parameter server's host loses power: its link goes first, so no FIN or RST reaches anyone
// (the peers see silence, not a closed connection), every process dies, and 5 s later the host
// is back (link up, `up` started again) at the same address with an empty parameter server,
// while the peers may still hold the old host's half-open connections.
TEST(MultiHostTest, ParameterServerHostPowerLoss) {
  MULTIHOST_CLUSTER(c);
  RunOptions opts;
  opts.fault = Fault{[](const NetnsCluster& c, const std::function<void(int)>& restart_host) {
                       const double t = log_stamp_now();
                       c.script({"link", "0", "down"});
                       c.script({"kill", "0"});
                       std::this_thread::sleep_for(5s);  // the fault's duration
                       c.script({"link", "0", "up"});
                       restart_host(0);
                       return t;
                     }};
  auto o = run_multihost(*c, "ps host power loss 5 s (link down, every process killed)", opts);
  EXPECT_TRUE(contains(o.out, "global steps rolled back")) << trouble(o.out);
  EXPECT_GE(o.detection_secs, 0) << trouble(o.out);
  EXPECT_GE(o.recovery_secs, 0) << trouble(o.out);
}

// The ps host's bandwidth capped (both directions, tbf) for the whole run.
TEST(MultiHostTest, ParameterServerHostAt1Gbit) {
  MULTIHOST_CLUSTER(c);
  RunOptions opts;
  opts.shape_ps = "1gbit";
  opts.steps = 1000;
  auto o = run_multihost(*c, "ps host capped to 1 Gbit/s", opts);
  EXPECT_FALSE(contains(o.out, "step failed")) << trouble(o.out);
}

TEST(MultiHostTest, ParameterServerHostAt100Mbit) {
  MULTIHOST_CLUSTER(c);
  RunOptions opts;
  opts.shape_ps = "100mbit";
  opts.steps = 1000;
  auto o = run_multihost(*c, "ps host capped to 100 Mbit/s", opts);
  EXPECT_FALSE(contains(o.out, "step failed")) << trouble(o.out);
}

}  // namespace
}  // namespace actorflow
