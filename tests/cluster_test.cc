// Multi-process clusters on 127.0.0.1: seed 000 across three processes, start-order
// permutations, authentication, a task killed mid-step, a silent (SIGSTOPped) task.
#include <gtest/gtest.h>

#include <future>

#include <regex>
#include <sstream>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include <caf/io/all.hpp>

#include "actorflow/embedding.h"
#include "actors/auth.h"
#include "actors/control_plane.h"
#include "actors/faults.h"
#include "actors/node_actor.h"
#include "actors/server.h"
#include "graph/ops_variables.h"
#include "tests/util/process.h"
#include "actors/router.h"
#include "actors/server_runtime.h"
#include "config/cluster_spec.h"  // the cluster file's options

namespace actorflow {
namespace {

using testing::binary;
using testing::ChildProcess;
using testing::free_port;
using testing::TempDir;
using namespace std::chrono_literals;

struct Cluster {
  TempDir dir;
  int host_port = free_port(), w0 = free_port(), w1 = free_port();
  std::string file;

  explicit Cluster(const std::string& extra = "", int connect_timeout_ms = 20000, int peer_timeout_ms = 1500) {
    file = dir.write("cluster.toml", "[cluster]\nname = \"test\"\n" + extra + "\n[jobs]\nhost = [\"localhost:" +
                                         std::to_string(host_port) + "\"]\nworker = [\"localhost:" +
                                         std::to_string(w0) + "\", \"localhost:" + std::to_string(w1) + "\"]\n" +
                                         "\n[server]\nconnect_timeout_ms = " + std::to_string(connect_timeout_ms) +
                                         "\nheartbeat_interval_ms = 200\npeer_timeout_ms = " +
                                         std::to_string(peer_timeout_ms) + "\n");
  }
  std::unique_ptr<ChildProcess> node(const std::string& job, int task,
                                     const std::map<std::string, std::string>& env = {}) {
    auto p = ChildProcess::start({binary("actorflow"), "node", "--cluster", file, "--job", job, "--task",
                                  std::to_string(task)},
                                 env);
    return p;
  }
};

// Success once `p` serves; fails at once, saying why, when it exits or cannot listen first.
::testing::AssertionResult started(ChildProcess* p) {
  if (!p) return ::testing::AssertionFailure() << "the process did not start";
  return p->wait_for_output("serving", 20s);
}

// Workers 0 and 1 of a Cluster as `actorflow node` processes.
struct Workers {
  std::unique_ptr<ChildProcess> w0, w1;
  // Starts both; fails, saying which and why, when one does not serve.
  ::testing::AssertionResult start(Cluster& c) {
    w0 = c.node("worker", 0);
    w1 = c.node("worker", 1);
    auto a = started(w0.get());
    if (!a) return a << "\nworker 0: " << w0->output();
    auto b = started(w1.get());
    if (!b) return b << "\nworker 1: " << w1->output();
    return ::testing::AssertionSuccess();
  }
};

// How a client without the cluster secret tries the node's port.
enum class Intruder { kPlainCaf, kWrongSecret, kNoSecret };

// Connects a fresh CAF node (its own actor system) to the node on 127.0.0.1:`port` as `how` and
// returns what it got: an error (the expected outcome) or "connected".
std::string intruder_connects(int port, const std::string& fingerprint, Intruder how) {
  caf::actor_system_config cfg;
  Server::configure(cfg);
  caf::actor_system sys{cfg};
  if (how == Intruder::kPlainCaf) {
    // CAF's own handshake straight away, as any CAF program would.
    auto node = sys.middleman().remote_actor("127.0.0.1", static_cast<uint16_t>(port));
    return node ? "connected" : "refused: " + sys.render(node.error());
  }
  net::HandshakeConfig hs;
  hs.fingerprint = fingerprint;
  hs.secret = how == Intruder::kWrongSecret ? "wrong-secret-0123456789" : "";
  hs.task_name = "/job:intruder/task:0";
  auto node = connect_control_plane(sys, "127.0.0.1", static_cast<uint16_t>(port), hs, 10s);
  return node.ok() ? "connected" : "refused: " + node.status().to_string();
}

TEST(ClusterTest, Seed000AcrossThreeProcesses) {
  Cluster c;
  Workers workers;
  ASSERT_TRUE(workers.start(c));
  auto host = ChildProcess::start({binary("samples/remote_matmul"), "--cluster", c.file, "--job", "host", "--task", "0"});
  ASSERT_EQ(host->wait(60s), 0) << host->output();
  const std::string out = host->output();
  // The values TensorFlow (NumPy) prints for matmul(a,b) + log(100 + c).
  EXPECT_NE(out.find("[[26.80402  32.85203 ]\n [54.003944 69.09987 ]]"), std::string::npos) << out;
  // log_device_placement shows the remote devices.
  EXPECT_NE(out.find("MatMul: (MatMul): /job:worker/replica:0/task:0/device:CPU:0"), std::string::npos) << out;
  EXPECT_NE(out.find("/job:worker/replica:0/task:1/device:CPU:0"), std::string::npos) << out;
}

// Seed 000 as its client really is (samples/remote_session): a process that is no task of the
// cluster file runs the graph on worker 0, whose master places it on both workers.
TEST(ClusterTest, Seed000FromAClientOutsideTheCluster) {
  Cluster c;
  Workers workers;
  ASSERT_TRUE(workers.start(c));
  auto client = ChildProcess::start({binary("samples/remote_session"), "--cluster", c.file});
  ASSERT_EQ(client->wait(60s), 0) << client->output();
  EXPECT_NE(client->output().find("[[26.80402  32.85203 ]\n [54.003944 69.09987 ]]"), std::string::npos)
      << client->output();
  // Worker 0 placed it (the client has no devices) and saw the client as a tool, not a task.
  EXPECT_NE(workers.w0->output().find("'/job:_client/replica:0/task:0') authenticated"), std::string::npos) << workers.w0->output();
  // A target that is no task of the file is refused with exit code 2, naming it.
  auto stray = ChildProcess::start({binary("samples/remote_session"), "--cluster", c.file, "--target",
                                    "actorflow://localhost:1"});
  EXPECT_EQ(stray->wait(30s), 2) << stray->output();
  EXPECT_NE(stray->output().find("no task of cluster file"), std::string::npos) << stray->output();
}

TEST(ClusterTest, HostStartsBeforeWorkers) {
  Cluster c;
  // The host waits (bounded, logged) for workers that come up later.
  auto host = ChildProcess::start({binary("samples/remote_matmul"), "--cluster", c.file, "--job", "host", "--task", "0",
                                   "--no-log-device-placement"});
  ASSERT_TRUE(host->wait_for_output("waiting for task", 20s)) << host->output();
  auto w1 = c.node("worker", 1);
  ASSERT_TRUE(started(w1.get())) << w1->output();
  auto w0 = c.node("worker", 0);
  ASSERT_TRUE(started(w0.get())) << w0->output();
  ASSERT_EQ(host->wait(60s), 0) << host->output();
  EXPECT_NE(host->output().find("[[26.80402  32.85203 ]"), std::string::npos) << host->output();
}

TEST(ClusterTest, TaskThatNeverComesIsNamed) {
  Cluster c("", 1500);
  auto w0 = c.node("worker", 0);
  ASSERT_TRUE(started(w0.get())) << w0->output();
  auto host = ChildProcess::start({binary("samples/remote_matmul"), "--cluster", c.file, "--job", "host", "--task", "0"});
  EXPECT_EQ(host->wait(60s), 1) << host->output();
  EXPECT_NE(host->output().find("task /job:worker/replica:0/task:1 at localhost:" + std::to_string(c.w1) +
                                " never answered"),
            std::string::npos)
      << host->output();
}

// Opens a raw TCP connection to 127.0.0.1:`port`, writes `garbage` (may be empty), then reads
// whatever comes until the peer closes. True when it closed within `bound`.
bool raw_client_closed_within(int port, const std::string& garbage, std::chrono::milliseconds bound) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool closed = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      (garbage.empty() || ::send(fd, garbage.data(), garbage.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(garbage.size()))) {
    const auto end = std::chrono::steady_clock::now() + bound;
    char buf[512];
    while (!closed) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      ssize_t r = ::recv(fd, buf, sizeof buf, 0);
      if (r <= 0) closed = true;  // EOF or reset
    }
  }
  ::close(fd);
  return closed;
}

TEST(ClusterTest, WrongSecretIsRejectedAndBothEndsSurvive) {
  Cluster c;
  auto w0 = c.node("worker", 0, {{"ACTORFLOW_SECRET", "right-secret-0123456789"}});
  auto w1 = c.node("worker", 1, {{"ACTORFLOW_SECRET", "right-secret-0123456789"}});
  ASSERT_TRUE(started(w0.get())) << w0->output();
  ASSERT_TRUE(started(w1.get())) << w1->output();
  for (const char* secret : {"wrong-secret-0123456789", ""}) {
    std::map<std::string, std::string> env;
    if (*secret) env["ACTORFLOW_SECRET"] = secret;
    auto host = ChildProcess::start({binary("samples/remote_matmul"), "--cluster", c.file, "--job", "host", "--task", "0"},
                                    env);
    EXPECT_EQ(host->wait(60s), 1) << host->output();
    EXPECT_EQ(host->output().find("[[26.8"), std::string::npos) << host->output();
    EXPECT_TRUE(host->output().find("secret") != std::string::npos) << host->output();
    EXPECT_EQ(host->output().find("right-secret-0123456789"), std::string::npos) << "secret leaked: " << host->output();
  }
  // Nothing reaches CAF on the node's port without the handshake: a plain CAF client, and
  // clients with a wrong or no secret, are refused before any actor sees them.
  {
    auto spec = ClusterSpec::from_file(c.file);
    ASSERT_TRUE(spec.ok()) << spec.status();
    for (Intruder how : {Intruder::kPlainCaf, Intruder::kWrongSecret, Intruder::kNoSecret}) {
      const std::string got = intruder_connects(c.w0, spec->fingerprint(), how);
      EXPECT_EQ(got.rfind("refused", 0), 0u) << "intruder " << static_cast<int>(how) << ": " << got;
      if (how == Intruder::kWrongSecret) {
        EXPECT_NE(got.find("secrets differ"), std::string::npos) << got;
      }
      if (how == Intruder::kNoSecret) {
        EXPECT_NE(got.find("requires a cluster secret"), std::string::npos) << got;
      }
    }
    EXPECT_TRUE(w0->wait_for_output("proof does not match the cluster secret", 10s)) << w0->output();
  }
  EXPECT_EQ(w0->output().find("right-secret-0123456789"), std::string::npos);
  EXPECT_EQ(w0->output().find("wrong-secret-0123456789"), std::string::npos);
  // TCP clients of the node's port that never complete the handshake (silent, or garbage) are
  // closed within the handshake deadline (max(peer_timeout_ms, 1 s) = 1500 ms here).
  EXPECT_TRUE(raw_client_closed_within(c.w0, "", 15s)) << w0->output();
  EXPECT_TRUE(raw_client_closed_within(c.w0, std::string(64, '\x7f'), 15s)) << w0->output();
  EXPECT_TRUE(w0->wait_for_output("no handshake within 1500 ms", 10s)) << w0->output();
  EXPECT_TRUE(w0->running());
  EXPECT_TRUE(w1->running());
  // A host with the right secret still gets served.
  auto good = ChildProcess::start({binary("samples/remote_matmul"), "--cluster", c.file, "--job", "host", "--task", "0"},
                                  {{"ACTORFLOW_SECRET", "right-secret-0123456789"}});
  ASSERT_EQ(good->wait(60s), 0) << good->output();
  EXPECT_NE(good->output().find("[[26.80402  32.85203 ]"), std::string::npos) << good->output();
}

TEST(ClusterTest, SigtermStopsANodeCleanly) {
  Cluster c;
  auto w0 = c.node("worker", 0);
  ASSERT_TRUE(started(w0.get())) << w0->output();
  w0->signal(SIGTERM);
  EXPECT_EQ(w0->wait(15s), 0) << w0->output();
}

TEST(ClusterTest, AddressInUseIsAClearError) {
  Cluster c;
  auto w0 = c.node("worker", 0);
  ASSERT_TRUE(started(w0.get())) << w0->output();
  auto again = c.node("worker", 0);
  EXPECT_EQ(again->wait(30s), 1) << again->output();
  EXPECT_NE(again->output().find("already in use"), std::string::npos) << again->output();
}

TEST(ClusterTest, UnknownTaskOnCommandLine) {
  Cluster c;
  auto p = c.node("worker", 7);
  EXPECT_EQ(p->wait(30s), 2) << p->output();
  EXPECT_NE(p->output().find("worker"), std::string::npos) << p->output();
}

// In-process host: the session survives a worker killed mid-step and recovers when it is back.
class HostFixture {
 public:
  explicit HostFixture(Cluster& c) {
    auto spec = ClusterSpec::from_file(c.file);
    EXPECT_TRUE(spec.ok()) << spec.status();
    auto s = Server::create(*spec, TaskId{"host", 0});
    EXPECT_TRUE(s.ok()) << s.status();
    server = std::move(*s);
  }
  std::unique_ptr<Server> server;
};

TEST(ClusterTest, KilledWorkerFailsTheStepAndSessionRecovers) {
  Cluster c;
  Workers workers;
  ASSERT_TRUE(workers.start(c));
  HostFixture h(c);
  Scope root = Scope::root();
  // x is fed on the host and flows host -> worker 1 -> worker 0 -> host.
  auto x = ops::placeholder(root.with_device("/job:host/task:0"), DType::kFloat32, Shape{2}, "x");
  auto y = ops::add(root.with_device("/job:worker/task:1"), x, 1.f);
  auto z = ops::add(root.with_device("/job:worker/task:0"), y, 1.f);
  Session sess(root, h.server->target(), SessionOptions{});
  auto feed = Tensor::from_vector<float>({1, 2}, {2});
  auto ok = sess.run({{x, feed}}, {z});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].to_string(), "[3. 4.]");
  // Kill worker 1 while steps run continuously: the step in flight fails naming the task.
  std::atomic<bool> stop{false};
  Status first_error;
  std::thread runner([&] {
    while (!stop) {
      auto r = sess.run({{x, feed}}, {z});
      if (!r.ok()) {
        first_error = r.status();
        return;
      }
    }
  });
  std::this_thread::sleep_for(200ms);  // let steps run before the fault (not synchronisation)
  workers.w1->signal(SIGKILL);
  workers.w1->wait(10s);
  runner.join();
  stop = true;
  EXPECT_GT(ServerRuntime(*h.server).direct_steps()->steps_run(), 0u);  // the steps in flight went direct
  EXPECT_FALSE(first_error.ok());
  EXPECT_NE(first_error.message().find("/job:worker/replica:0/task:1"), std::string::npos) << first_error;
  // Bring it back: the same session works again.
  auto w1b = c.node("worker", 1);
  ASSERT_TRUE(started(w1b.get())) << w1b->output();
  auto again = sess.run({{x, feed}}, {z});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)[0].to_string(), "[3. 4.]");
}

TEST(ClusterTest, SilentWorkerIsDetectedByHeartbeats) {
  Cluster c;
  Workers workers;
  ASSERT_TRUE(workers.start(c));
  HostFixture h(c);
  Scope root = Scope::root();
  auto x = ops::placeholder(root.with_device("/job:host/task:0"), DType::kFloat32, Shape{2}, "x");
  auto y = ops::add(root.with_device("/job:worker/task:1"), x, 1.f);
  Session sess(root, h.server->target(), SessionOptions{});
  auto feed = Tensor::from_vector<float>({1, 2}, {2});
  ASSERT_TRUE(sess.run({{x, feed}}, {y}).ok());
  workers.w1->signal(SIGSTOP);  // alive but silent: no closed connection
  ASSERT_TRUE(workers.w1->wait_stopped(5s));  // stopped before the step is sent
  const auto t0 = std::chrono::steady_clock::now();
  auto r = sess.run({{x, feed}}, {y});
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/job:worker/replica:0/task:1"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("heartbeat"), std::string::npos) << r.status();
  EXPECT_LT(took, 10s);
  workers.w1->signal(SIGCONT);
}

}  // namespace
}  // namespace actorflow

namespace actorflow {
namespace {
TEST(ClusterTest, StatusShowsUpAndDownTasks) {
  Cluster c;
  Workers workers;
  ASSERT_TRUE(workers.start(c));
  auto st = ChildProcess::start({binary("actorflow"), "status", "--cluster", c.file, "--timeout-ms", "500"});
  EXPECT_EQ(st->wait(60s), 3) << st->output();  // host/0 is not running
  const std::string out = st->output();
  // The row of each task: its name, address, role, state (and devices, or why it is down).
  auto row = [&](const std::string& task) {
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);)
      if (l.rfind(task + " ", 0) == 0) return l;
    return std::string();
  };
  const std::regex w0("^worker/0 +localhost:" + std::to_string(c.w0) + " +chief +UP .* device:CPU:0$");
  EXPECT_TRUE(std::regex_search(row("worker/0"), w0)) << out;
  EXPECT_TRUE(std::regex_search(row("worker/1"), std::regex("^worker/1 +localhost:" + std::to_string(c.w1) + " +worker +UP ")))
      << out;
  EXPECT_TRUE(std::regex_search(row("host/0"), std::regex("^host/0 +localhost:" + std::to_string(c.host_port) +
                                                          " +host +DOWN .*\\(.*\\)$")))
      << out;
  EXPECT_NE(out.find("2/3 tasks up"), std::string::npos) << out;
}
}  // namespace
}  // namespace actorflow

namespace actorflow {
namespace {

// Runs of a remote partition without arguments go over the data plane once a connection to
// that task is open (the first step's tensor opens it): values, fetches from the remote
// partition, a kernel error there (code and op kept), and the session staying usable.
TEST(ClusterTest, ConcurrentDirectStepsGetTheirOwnResults) {
  Cluster c;
  Workers workers;
  ASSERT_TRUE(workers.start(c));
  HostFixture h(c);
  Scope root = Scope::root();
  // Two remote partitions per step: x goes to worker 1, worker 0 fetches from there.
  auto x = ops::placeholder(root.with_device("/job:host/task:0"), DType::kFloat32, Shape{2}, "x");
  auto y = ops::mul(root.with_device("/job:worker/task:1"), x, 2.f);
  auto z = ops::add(root.with_device("/job:worker/task:0"), y, 1.f);
  Session sess(root, h.server->target(), SessionOptions{});
  ASSERT_TRUE(sess.run({{x, Tensor::from_vector<float>({0, 0}, {2})}}, {z, y}).ok());
  constexpr int kThreads = 4, kSteps = 100;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kSteps && errors[static_cast<size_t>(t)].empty(); ++i) {
        const float v = static_cast<float>(t * 1000 + i);
        auto r = sess.run({{x, Tensor::from_vector<float>({v, -v}, {2})}}, {z, y});
        if (!r.ok()) errors[static_cast<size_t>(t)] = r.status().to_string();
        else if ((*r)[0].data<float>()[0] != 2 * v + 1 || (*r)[0].data<float>()[1] != -2 * v + 1 ||
                 (*r)[1].data<float>()[0] != 2 * v)
          errors[static_cast<size_t>(t)] = "step " + std::to_string(i) + " of thread " + std::to_string(t) +
                                           " got " + (*r)[0].to_string() + " " + (*r)[1].to_string();
      }
    });
  for (auto& th : threads) th.join();
  for (const auto& e : errors) EXPECT_TRUE(e.empty()) << e;
  EXPECT_GE(ServerRuntime(*h.server).direct_steps()->steps_run(), static_cast<uint64_t>(kThreads * kSteps));
}

// A step whose run request never reached its task (lost on the way: a drop fault on the
// receiving task) ends about a second later, not at its deadline: the waiting step asks the
// task, which answers that it does not run the step (net/wire.h: query, state). Heartbeats are
// dropped too, so the peer timeout is made long: only the answer can end the step early.
TEST(ClusterTest, ALiveTaskThatNeverGotAStepSaysSoAtOnce) {
  Cluster c("", 20000, /*peer_timeout_ms=*/120000);
  Workers workers;  // `actorflow chaos` reaches every task of the file
  ASSERT_TRUE(workers.start(c));
  HostFixture h(c);
  Scope root = Scope::root();
  auto host = root.with_device("/job:host/task:0");
  auto x = ops::placeholder(host, DType::kInt32, Shape{2}, "x");
  auto q = ops::mul(root.with_device("/job:worker/task:0").with_op_name("q"), x, 3);
  Session sess(root, h.server->target(), SessionOptions{}.timeout(std::chrono::seconds(90)));
  for (int i = 0; i < 3; ++i) {
    auto r = sess.run({{x, Tensor::from_vector<int32_t>({i, 1}, {2})}}, {q});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ((*r)[0].data<int32_t>()[0], 3 * i);
  }
  ASSERT_GE(ServerRuntime(*h.server).direct_steps()->steps_run(), 2u);
  auto chaos = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {binary("actorflow"), "chaos", "--cluster", c.file};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = ChildProcess::start(argv);
    const int code = p ? p->wait(60s) : -1;
    EXPECT_EQ(code, 0) << (p ? p->output() : std::string("chaos did not start"));
    return code;
  };
  // Drops every data-plane frame from host/0 at `dst` (a plan on the receiving task), runs one
  // step of `fetch`, which must fail at once naming `dst`, clears the fault, and checks the next
  // step returns `after` (fed {7, 1}).
  auto lost_step_is_named = [&](const std::string& dst, const Output& fetch, int32_t after) {
    const std::string plan =
        c.dir.write("drop.toml", "seed = 1\n[[fault]]\nkind = \"drop\"\nsrc = \"host/0\"\ndst = \"" + dst + "\"\n");
    ASSERT_EQ(chaos({"--plan", plan}), 0);
    const auto t0 = std::chrono::steady_clock::now();
    auto lost = sess.run({{x, Tensor::from_vector<int32_t>({5, 5}, {2})}}, {fetch});
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(lost.ok());
    EXPECT_EQ(lost.status().code(), Code::kAborted) << lost.status();
    const std::string task = "/job:worker/replica:0/task:" + dst.substr(dst.find('/') + 1);
    EXPECT_NE(lost.status().message().find(task + " is alive but does not run it"), std::string::npos) << lost.status();
    EXPECT_LT(secs, 45.0) << "the step waited for its deadline instead of the task's answer";
    ASSERT_EQ(chaos({"--clear"}), 0);
    auto again = sess.run({{x, Tensor::from_vector<int32_t>({7, 1}, {2})}}, {fetch});
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ((*again)[0].data<int32_t>()[0], after);
  };
  lost_step_is_named("worker/0", q, 21);

  // Two remote partitions (outcomes come through the reader threads): worker 1 never gets its
  // run request, worker 0 runs its part and waits for worker 1's tensor. Worker 1 says so.
  auto y = ops::mul(root.with_device("/job:worker/task:1").with_op_name("y"), x, 2);
  auto z = ops::add(root.with_device("/job:worker/task:0").with_op_name("z"), y, 1);
  for (int i = 0; i < 3; ++i) {
    auto r = sess.run({{x, Tensor::from_vector<int32_t>({i, 1}, {2})}}, {z});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ((*r)[0].data<int32_t>()[0], 2 * i + 1);
  }
  lost_step_is_named("worker/1", z, 15);
}

// The host's server destroyed while one thread waits in a direct step (its worker is stopped:
// alive and silent) and another connects to a task that never comes: both calls return
// Cancelled naming the server, and ~Server returns; the session answers Cancelled afterwards.
TEST(ClusterTest, DestroyingTheServerEndsStepsAndConnectionsInFlight) {
  Cluster c;  // worker/1 is never started
  auto w0 = c.node("worker", 0);
  ASSERT_TRUE(started(w0.get())) << w0->output();
  HostFixture h(c);
  const std::string target = h.server->target();
  Scope root = Scope::root();
  auto x = ops::placeholder(root.with_device("/job:host/task:0"), DType::kInt32, Shape{2}, "x");
  auto q = ops::mul(root.with_device("/job:worker/task:0").with_op_name("q"), x, 3);
  Session sess(root, target, SessionOptions{}.timeout(std::chrono::seconds(120)));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(sess.run({{x, Tensor::from_vector<int32_t>({i, 1}, {2})}}, {q}).ok());
  Scope other = Scope::root();
  auto never = ops::add(other.with_device("/job:worker/task:1"), ops::constant(other, {1.f}, {1}), 1.f);
  Session sess2(other, target, SessionOptions{}.timeout(std::chrono::seconds(120)));

  const uint64_t direct_before = ServerRuntime(*h.server).direct_steps()->steps_run();
  w0->signal(SIGSTOP);
  ASSERT_TRUE(w0->wait_stopped(5s));
  auto stuck = std::async(std::launch::async, [&] { return sess.run({{x, Tensor::from_vector<int32_t>({5, 5}, {2})}}, {q}).status(); });
  auto connecting = std::async(std::launch::async, [&] { return sess2.run({never}).status(); });
  while (ServerRuntime(*h.server).direct_steps()->steps_run() == direct_before) std::this_thread::yield();  // the step waits
  auto destroyed = std::async(std::launch::async, [&] { h.server.reset(); });
  const bool ended = destroyed.wait_for(30s) == std::future_status::ready;
  w0->signal(SIGCONT);
  ASSERT_TRUE(ended) << "~Server hangs";
  ASSERT_EQ(stuck.wait_for(30s), std::future_status::ready);
  ASSERT_EQ(connecting.wait_for(30s), std::future_status::ready);
  const Status a = stuck.get(), b = connecting.get();
  EXPECT_EQ(a.code(), Code::kCancelled) << a;
  EXPECT_NE(a.message().find(target), std::string::npos) << a;
  EXPECT_EQ(b.code(), Code::kCancelled) << b;
  auto after = sess.run({{x, Tensor::from_vector<int32_t>({1, 1}, {2})}}, {q});
  EXPECT_EQ(after.status().code(), Code::kCancelled) << after.status();
}

TEST(ClusterTest, StepsDispatchedOverTheDataPlane) {
  Cluster c;
  auto w0 = c.node("worker", 0);
  ASSERT_TRUE(started(w0.get())) << w0->output();
  HostFixture h(c);
  Scope root = Scope::root();
  auto host = root.with_device("/job:host/task:0");
  auto x = ops::placeholder(host, DType::kInt32, Shape{2}, "x");
  auto d = ops::placeholder(host, DType::kInt32, Shape{}, "d");
  auto q = ops::div(root.with_device("/job:worker/task:0").with_op_name("q"), x, d);
  Session sess(root, h.server->target(), SessionOptions{});
  for (int i = 0; i < 50; ++i) {
    auto r = sess.run({{x, Tensor::from_vector<int32_t>({6 * i, -4 * i}, {2})}, {d, Tensor::scalar<int32_t>(2)}}, {q});
    ASSERT_TRUE(r.ok()) << "step " << i << ": " << r.status();
    ASSERT_EQ((*r)[0].data<int32_t>()[0], 3 * i);
    ASSERT_EQ((*r)[0].data<int32_t>()[1], -2 * i);
  }
  // After the first step (placement, registration) the host's partition only forwards feeds:
  // the steps went direct (actors/direct_step.h), from this thread over the data plane.
  EXPECT_GE(ServerRuntime(*h.server).direct_steps()->steps_run(), 45u);
  const uint64_t direct_before = ServerRuntime(*h.server).direct_steps()->steps_run();
  auto bad = sess.run({{x, Tensor::from_vector<int32_t>({1, 2}, {2})}, {d, Tensor::scalar<int32_t>(0)}}, {q});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument) << bad.status();
  EXPECT_NE(bad.status().message().find("integer division by zero"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("'q'"), std::string::npos) << bad.status();
  EXPECT_GT(ServerRuntime(*h.server).direct_steps()->steps_run(), direct_before);  // the error came back directly
  auto again = sess.run({{x, Tensor::from_vector<int32_t>({9, 7}, {2})}, {d, Tensor::scalar<int32_t>(3)}}, {q});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)[0].data<int32_t>()[0], 3);
  EXPECT_EQ((*again)[0].data<int32_t>()[1], 2);
  // A feed of the wrong type is rejected before anything is sent.
  auto wrong = sess.run({{x, Tensor::from_vector<float>({1, 2}, {2})}, {d, Tensor::scalar<int32_t>(3)}}, {q});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), Code::kInvalidArgument) << wrong.status();
  EXPECT_NE(wrong.status().message().find("feed 'x'"), std::string::npos) << wrong.status();
  // A step timeout applies to direct steps: the worker is stopped (alive, silent), the step
  // ends with DeadlineExceeded naming the worker's device long before heartbeats would matter.
  SessionOptions timed;
  timed.timeout(std::chrono::milliseconds(400));
  Session tsess(root, h.server->target(), timed);
  ASSERT_TRUE(tsess.run({{x, Tensor::from_vector<int32_t>({4, 4}, {2})}, {d, Tensor::scalar<int32_t>(2)}}, {q}).ok());
  ASSERT_TRUE(tsess.run({{x, Tensor::from_vector<int32_t>({4, 4}, {2})}, {d, Tensor::scalar<int32_t>(2)}}, {q}).ok());
  const uint64_t before_stop = ServerRuntime(*h.server).direct_steps()->steps_run();
  w0->signal(SIGSTOP);
  ASSERT_TRUE(w0->wait_stopped(5s));
  auto late = tsess.run({{x, Tensor::from_vector<int32_t>({4, 4}, {2})}, {d, Tensor::scalar<int32_t>(2)}}, {q});
  w0->signal(SIGCONT);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(ServerRuntime(*h.server).direct_steps()->steps_run(), before_stop + 1);
  EXPECT_NE(late.status().message().find("/job:worker/replica:0/task:0"), std::string::npos) << late.status();
  // The worker resumes and answers the abandoned step on the shared connection; later steps
  // are not confused by that late reply.
  for (int i = 0; i < 5; ++i) {
    auto r = sess.run({{x, Tensor::from_vector<int32_t>({10 * i, 5}, {2})}, {d, Tensor::scalar<int32_t>(5)}}, {q});
    ASSERT_TRUE(r.ok()) << "after SIGCONT, step " << i << ": " << r.status();
    EXPECT_EQ((*r)[0].data<int32_t>()[0], 2 * i);
    EXPECT_EQ((*r)[0].data<int32_t>()[1], 1);
  }
  // The timed-out step's abort reached the worker as a message from this authenticated node
  // (the worker drops anonymous ones).
  EXPECT_EQ(w0->output().find("rejected anonymous abort"), std::string::npos) << w0->output();
}

// A remote partition that is self-contained (synchronous kernels, no _Send) and gets every
// _Recv tensor with its run request runs on the worker's data-plane reader thread; one that
// calls a variable (asynchronous kernel) goes to the device actor. Both give the same values.
TEST(ClusterTest, SelfContainedStepsRunOnTheWorkersReaderThread) {
  Cluster c;
  auto spec = ClusterSpec::from_file(c.file);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto worker = Server::create(*spec, TaskId{"worker", 0});  // in this process, to read its counters
  ASSERT_TRUE(worker.ok()) << worker.status();
  HostFixture h(c);
  Scope root = Scope::root();
  auto wdev = root.with_device("/job:worker/task:0");
  auto x = ops::placeholder(root.with_device("/job:host/task:0"), DType::kFloat32, Shape{2}, "x");
  auto y = ops::mul(wdev, x, 3.f);
  Session sess(root, h.server->target(), SessionOptions{});
  const uint64_t inline_before = ServerRuntime(**worker).router()->inline_steps_run();
  for (int i = 0; i < 40; ++i) {
    const float v = static_cast<float>(i);
    auto r = sess.run({{x, Tensor::from_vector<float>({v, 1 - v}, {2})}}, {y});
    ASSERT_TRUE(r.ok()) << "step " << i << ": " << r.status();
    ASSERT_EQ((*r)[0].data<float>()[0], 3 * v);
    ASSERT_EQ((*r)[0].data<float>()[1], 3 * (1 - v));
  }
  // The first step opens the connection through the master; the others run direct and, the
  // device being idle, inline.
  EXPECT_GE(ServerRuntime(**worker).router()->inline_steps_run(), inline_before + 30);

  // A variable on the worker: its partition is not self-contained, the device actor runs it.
  Scope root2 = Scope::root();
  auto wdev2 = root2.with_device("/job:worker/task:0");
  auto x2 = ops::placeholder(root2.with_device("/job:host/task:0"), DType::kFloat32, Shape{}, "x2");
  auto v = ops::variable(wdev2.with_op_name("v"), Shape{}, DType::kFloat32);
  auto init = ops::assign(wdev2, v, ops::constant(wdev2, Tensor::scalar<float>(0)));
  auto inc = ops::assign_add(wdev2, v, x2);
  Session sess2(root2, h.server->target(), SessionOptions{});
  ASSERT_TRUE(sess2.run({}, {}, {init}).ok());
  const uint64_t inline_mid = ServerRuntime(**worker).router()->inline_steps_run();
  float expect = 0;
  for (int i = 1; i <= 20; ++i) {
    expect += static_cast<float>(i);
    auto r = sess2.run({{x2, Tensor::scalar<float>(static_cast<float>(i))}}, {inc});
    ASSERT_TRUE(r.ok()) << "step " << i << ": " << r.status();
    ASSERT_EQ((*r)[0].data<float>()[0], expect);
  }
  EXPECT_EQ(ServerRuntime(**worker).router()->inline_steps_run(), inline_mid);
}

// Fault injection tests the program users run: with faults armed, steps still go direct over
// the data plane and run inline on the worker's reader thread, exactly as without, and a link
// fault on that path acts there (faults never change the step path). The host and worker/0 share this process's injector.
TEST(ClusterTest, AFaultArmedJobTakesTheSameStepPathAsAnUnarmedOne) {
  Cluster c;
  auto spec = ClusterSpec::from_file(c.file);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto worker = Server::create(*spec, TaskId{"worker", 0});
  ASSERT_TRUE(worker.ok()) << worker.status();
  HostFixture h(c);
  Scope root = Scope::root();
  auto x = ops::placeholder(root.with_device("/job:host/task:0"), DType::kFloat32, Shape{2}, "x");
  auto y = ops::mul(root.with_device("/job:worker/task:0"), x, 3.f);
  Session sess(root, h.server->target(), SessionOptions{});
  struct Path {
    uint64_t direct = 0, inline_runs = 0;
  };
  auto run_steps = [&](int n, int first) {
    const uint64_t d0 = ServerRuntime(*h.server).direct_steps()->steps_run(), i0 = ServerRuntime(**worker).router()->inline_steps_run();
    for (int i = first; i < first + n; ++i) {
      const float v = static_cast<float>(i);
      auto r = sess.run({{x, Tensor::from_vector<float>({v, 1 - v}, {2})}}, {y});
      EXPECT_TRUE(r.ok()) << "step " << i << ": " << r.status();
      if (!r.ok()) break;
      EXPECT_EQ((*r)[0].data<float>()[0], 3 * v);
      EXPECT_EQ((*r)[0].data<float>()[1], 3 * (1 - v));
    }
    return Path{ServerRuntime(*h.server).direct_steps()->steps_run() - d0, ServerRuntime(**worker).router()->inline_steps_run() - i0};
  };
  ASSERT_TRUE(sess.run({{x, Tensor::from_vector<float>({0, 0}, {2})}}, {y}).ok());  // opens the connection
  const Path unarmed = run_steps(30, 1);
  EXPECT_EQ(unarmed.direct, 30u);
  EXPECT_GE(unarmed.inline_runs, 25u);

  // Armed, on a link this job does not use: the same path.
  FaultInjector::global().set_kill_handler_for_testing([](const std::string&) {});
  ASSERT_TRUE(FaultInjector::global().add(Fault::drop("worker/1", "host/0")).ok());
  ASSERT_TRUE(FaultInjector::global().add(Fault::kill_at_step("worker/1", 1000000)).ok());
  ASSERT_TRUE(FaultInjector::global().armed());
  const Path armed = run_steps(30, 100);
  EXPECT_EQ(armed.direct, unarmed.direct);
  EXPECT_GE(armed.inline_runs, 25u);

  // A delay on the link the steps take acts on that same path: slower, still direct and inline.
  ASSERT_TRUE(FaultInjector::global().add(Fault::delay("host/0", "worker/0", 20)).ok());
  const int64_t delayed_before = FaultInjector::global().stats().delayed;
  const auto t0 = std::chrono::steady_clock::now();
  const Path delayed = run_steps(5, 200);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 5 * 20ms);
  EXPECT_EQ(delayed.direct, 5u);
  EXPECT_GE(delayed.inline_runs, 4u);
  EXPECT_GE(FaultInjector::global().stats().delayed - delayed_before, 5);
  FaultInjector::global().clear();
  FaultInjector::global().set_kill_handler_for_testing(nullptr);
}

// Steps whose only remote partition is on one task get their outcome back on the request's
// connection, read by the waiting threads themselves (one reads, the others sleep): threads
// sharing that connection each get their own values; a worker killed under them fails every
// waiting step naming the task (no hang), and the session recovers once it is back.
TEST(ClusterTest, ThreadsSharingARequestConnection) {
  Cluster c;
  auto w0 = c.node("worker", 0);
  ASSERT_TRUE(started(w0.get())) << w0->output();
  HostFixture h(c);
  Scope root = Scope::root();
  auto x = ops::placeholder(root.with_device("/job:host/task:0"), DType::kFloat32, Shape{2}, "x");
  auto y = ops::mul(root.with_device("/job:worker/task:0"), x, 3.f);
  Session sess(root, h.server->target(), SessionOptions{});
  ASSERT_TRUE(sess.run({{x, Tensor::from_vector<float>({0, 0}, {2})}}, {y}).ok());
  constexpr int kThreads = 4, kSteps = 150;
  const uint64_t direct_before = ServerRuntime(*h.server).direct_steps()->steps_run();
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kSteps && errors[static_cast<size_t>(t)].empty(); ++i) {
        const float v = static_cast<float>(t * 1000 + i);
        auto r = sess.run({{x, Tensor::from_vector<float>({v, -v}, {2})}}, {y});
        if (!r.ok()) errors[static_cast<size_t>(t)] = r.status().to_string();
        else if ((*r)[0].data<float>()[0] != 3 * v || (*r)[0].data<float>()[1] != -3 * v)
          errors[static_cast<size_t>(t)] = "step " + std::to_string(i) + " of thread " + std::to_string(t) + " got " +
                                           (*r)[0].to_string();
      }
    });
  for (auto& th : threads) th.join();
  for (const auto& e : errors) EXPECT_TRUE(e.empty()) << e;
  EXPECT_GE(ServerRuntime(*h.server).direct_steps()->steps_run(), direct_before + kThreads * kSteps);

  // Kill the worker while every thread has steps in flight: each thread's step ends in an
  // error naming the task.
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;  // threads that completed a step in this phase (or already failed)
  auto count = [&] {
    std::lock_guard<std::mutex> l(mu);
    ++running;
    cv.notify_all();
  };
  std::vector<Status> first_error(kThreads);
  threads.clear();
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      bool counted = false;
      while (true) {
        auto r = sess.run({{x, Tensor::from_vector<float>({1, 2}, {2})}}, {y});
        if (!r.ok()) {
          first_error[static_cast<size_t>(t)] = r.status();
          break;
        }
        if (!counted) {
          counted = true;
          count();
        }
      }
      if (!counted) count();
    });
  {
    std::unique_lock<std::mutex> l(mu);
    EXPECT_TRUE(cv.wait_for(l, 30s, [&] { return running == kThreads; }));
  }
  w0->signal(SIGKILL);
  w0->wait(10s);
  for (auto& th : threads) th.join();
  for (const auto& e : first_error) {
    EXPECT_FALSE(e.ok());
    EXPECT_NE(e.message().find("/job:worker/replica:0/task:0"), std::string::npos) << e;
  }
  auto w0b = c.node("worker", 0);
  ASSERT_TRUE(started(w0b.get())) << w0b->output();
  auto again = sess.run({{x, Tensor::from_vector<float>({1, 2}, {2})}}, {y});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)[0].to_string(), "[3. 6.]");
}

}  // namespace
}  // namespace actorflow

namespace actorflow {
namespace {

// The cluster file's [server] placement policy applies to every session on the task: with
// allow_soft_placement = false an op asking for a GPU the task lacks fails even though the
// session (by default) allows soft placement; with the default it falls back to the CPU.
TEST(ClusterTest, TheClusterFilesPlacementPolicyAppliesToEverySession) {
  for (bool soft : {false, true}) {
    const std::string toml = "[jobs]\nworker = [\"127.0.0.1:" + std::to_string(testing::free_port()) +
                             "\"]\n[server]\nallow_soft_placement = " + (soft ? "true" : "false") + "\n";
    auto spec = ClusterSpec::from_string(toml, "policy.toml");
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto server = Server::create(*spec, TaskId{"worker", 0});
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_EQ(ServerRuntime(**server).server_options().allow_soft_placement, soft);
    Scope root = Scope::root();
    auto y = ops::add(root.with_device("/job:worker/task:0/device:GPU:7"), ops::constant(root, Tensor::scalar<float>(1.f)),
                      ops::constant(root, Tensor::scalar<float>(2.f)));
    Session sess(root, (*server)->target());
    auto r = sess.run({y});
    if (soft) {
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->at(0).data<float>()[0], 3.f);
    } else {
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.status().message().find("GPU"), std::string::npos) << r.status();
    }
  }
}

}  // namespace
}  // namespace actorflow
