// Supervision: actors restarted in place after exceptions with a restart
// budget (one_for_one, max_restarts within restart_window_secs), and the chief's supervisor
// watching every task of the cluster (a dead task at once, a silent one within peer_timeout).
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "actorflow/embedding.h"
#include "actors/faults.h"
#include "actors/restart.h"
#include "actors/supervisor.h"
#include "graph/ops_variables.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::ChildProcess;
using testing::free_port;
using testing::TempDir;

class RestartTest : public ::testing::Test {
 protected:
  void SetUp() override { FaultInjector::global().clear(); }
  void TearDown() override { FaultInjector::global().clear(); }
  // A local server whose actors restart in place at most `max_restarts` times within 60 s.
  static Result<std::unique_ptr<Server>> server_with_budget(int max_restarts) {
    LocalServerOptions o;
    o.max_restarts = max_restarts;
    o.restart_window_secs = 60;
    return Server::local(o);
  }
};

TEST_F(RestartTest, DeviceActorRestartsInPlaceUntilTheBudgetIsSpent) {
  auto server = server_with_budget(2);
  ASSERT_TRUE(server.ok()) << server.status();
  Scope root = Scope::root();
  auto a = ops::placeholder(root, DType::kFloat32, Shape{}, "a");
  auto b = ops::add(root.with_op_name("b"), a, a);
  Session sess(root, (*server)->target());
  const FeedDict feed = {{a, Tensor::scalar<float>(1.5f)}};
  const int64_t before = restarts_total();
  for (int i = 1; i <= 2; ++i) {
    ASSERT_TRUE(FaultInjector::global().add(Fault::throw_in("localhost/0", "device")).ok());
    auto bad = sess.run(feed, {b});
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), Code::kAborted) << bad.status();  // retryable
    EXPECT_NE(bad.status().message().find("the actor restarted in place"), std::string::npos) << bad.status();
    auto good = sess.run(feed, {b});  // the same actor, partitions kept, runs the next step
    ASSERT_TRUE(good.ok()) << "after restart " << i << ": " << good.status();
    EXPECT_EQ(good->at(0).data<float>()[0], 3.0f);
  }
  EXPECT_EQ(restarts_total() - before, 2);
  // The third failure within the window exceeds max_restarts = 2: the actor gives up, and says
  // which device (hence task) failed how often.
  ASSERT_TRUE(FaultInjector::global().add(Fault::throw_in("localhost/0", "device")).ok());
  auto bad = sess.run(feed, {b});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInternal) << bad.status();
  EXPECT_NE(bad.status().message().find("/job:localhost/replica:0/task:0/device:CPU:0 (device actor) failed 3 times "
                                        "within 60 s (max_restarts = 2); giving up"),
            std::string::npos)
      << bad.status();
  auto after = sess.run(feed, {b});  // and keeps saying so instead of running more steps
  ASSERT_FALSE(after.ok());
  EXPECT_NE(after.status().message().find("failed 3 times"), std::string::npos) << after.status();
}

// Each Server has its own restart budget: two in one process (as the demo runs three) do not
// overwrite each other's, whichever was made last.
TEST_F(RestartTest, EachServerKeepsItsOwnRestartBudget) {
  auto strict = server_with_budget(0);
  ASSERT_TRUE(strict.ok()) << strict.status();
  auto lenient = server_with_budget(3);
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  Scope root = Scope::root();
  auto a = ops::placeholder(root, DType::kFloat32, Shape{}, "a");
  auto b = ops::add(root.with_op_name("b"), a, a);
  const FeedDict feed = {{a, Tensor::scalar<float>(2.f)}};
  Session s_strict(root, (*strict)->target()), s_lenient(root, (*lenient)->target());
  ASSERT_TRUE(s_strict.run(feed, {b}).ok());
  ASSERT_TRUE(s_lenient.run(feed, {b}).ok());
  // The strict server's device gives up at its first exception...
  ASSERT_TRUE(FaultInjector::global().add(Fault::throw_in("localhost/0", "device")).ok());
  auto bad = s_strict.run(feed, {b});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInternal) << bad.status();
  EXPECT_NE(bad.status().message().find("(max_restarts = 0); giving up"), std::string::npos) << bad.status();
  // ... while the lenient one, made after it, restarts in place and goes on.
  ASSERT_TRUE(FaultInjector::global().add(Fault::throw_in("localhost/0", "device")).ok());
  auto retry = s_lenient.run(feed, {b});
  ASSERT_FALSE(retry.ok());
  EXPECT_EQ(retry.status().code(), Code::kAborted) << retry.status();
  auto good = s_lenient.run(feed, {b});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->at(0).data<float>()[0], 4.f);
  // Bad budgets are refused, naming the option.
  LocalServerOptions o;
  o.max_restarts = -1;
  auto refused = Server::local(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("max_restarts must be >= 0"), std::string::npos) << refused.status();
}

TEST_F(RestartTest, VariableActorKeepsItsValueAcrossARestartAndGivesUpPastTheBudget) {
  auto server = server_with_budget(1);
  ASSERT_TRUE(server.ok()) << server.status();
  Scope root = Scope::root();
  auto w = ops::variable(root.with_op_name("w"), Shape{}, DType::kFloat32);
  auto init = ops::assign(root.with_op_name("init"), w, ops::constant(root, Tensor::scalar<float>(5)));
  Session sess(root, (*server)->target());
  ASSERT_TRUE(sess.run({}, {}, {init}).ok());
  ASSERT_TRUE(FaultInjector::global().add(Fault::throw_in("localhost/0", "variable")).ok());
  auto bad = sess.run({w});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("variable 'w': exception in the variable actor: injected fault"),
            std::string::npos)
      << bad.status();
  EXPECT_NE(bad.status().message().find("restarted in place"), std::string::npos) << bad.status();
  auto good = sess.run({w});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->at(0).data<float>()[0], 5.f);  // the durable state survived the restart
  ASSERT_TRUE(FaultInjector::global().add(Fault::throw_in("localhost/0", "variable")).ok());
  auto spent = sess.run({w});
  ASSERT_FALSE(spent.ok());
  EXPECT_NE(spent.status().message().find("variable 'w' (variable actor) failed 2 times within 60 s (max_restarts = 1)"),
            std::string::npos)
      << spent.status();
}

TEST_F(RestartTest, BudgetForgetsFailuresOutsideTheWindow) {
  RestartBudget b(RestartPolicy{1, 0.05});
  EXPECT_TRUE(b.record_failure("x", "first").ok());
  EXPECT_FALSE(b.record_failure("x", "second, within 50 ms").ok());
  const auto until = std::chrono::steady_clock::now() + 60ms;
  while (std::chrono::steady_clock::now() < until) std::this_thread::yield();  // let the window pass
  EXPECT_TRUE(b.record_failure("x", "third, after the window").ok());
  EXPECT_EQ(b.recent(), 1);
}

// Polls `cond` (a condition on the supervisor's state, not a timing guess) up to `bound`;
// returns how long it took, or -1.
template <typename F>
double seconds_until(F cond, std::chrono::milliseconds bound) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < bound) {
    if (cond()) return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::this_thread::sleep_for(5ms);
  }
  return -1;
}

TEST(ChiefSupervisorTest, DetectsDeadAndSilentTasksAndTheirReturn) {
  TempDir dir;
  const int host = free_port(), w0 = free_port(), w1 = free_port();
  const std::string file = dir.write(
      "c.toml", "[jobs]\nhost = [\"localhost:" + std::to_string(host) + "\"]\nworker = [\"localhost:" +
                    std::to_string(w0) + "\", \"localhost:" + std::to_string(w1) +
                    "\"]\n[server]\nheartbeat_interval_ms = 250\npeer_timeout_ms = 1500\n[supervisor]\nchief = \"host/0\"\n");
  auto start_worker = [&](int i) {
    auto p = ChildProcess::start({binary("actorflow"), "node", "--cluster", file, "--job", "worker", "--task",
                                  std::to_string(i)});
    EXPECT_TRUE(p->wait_for_output("serving", 30s)) << p->output();
    return p;
  };
  auto worker0 = start_worker(0);
  auto worker1 = start_worker(1);
  auto cluster = ClusterSpec::from_file(file);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto server = Server::create(*cluster, TaskId{"host", 0});
  ASSERT_TRUE(server.ok()) << server.status();
  Scope root = Scope::root();
  auto v = ops::variable(root.with_op_name("v").with_device("/job:host/task:0"), Shape{}, DType::kFloat32);
  auto init = ops::no_op(root, {ops::assign(root.with_op_name("v/init"), v, ops::constant(root, Tensor::scalar<float>(1)))},
                         "init");
  SupervisorConfig sc;
  sc.is_chief = true;
  sc.init_op = init;
  sc.task_name = "host/0";
  Supervisor sv(root, sc);
  auto sess = sv.managed_session((*server)->target());
  ASSERT_TRUE(sess.ok()) << sess.status();
  auto health = [&](const std::string& task) {
    for (const auto& h : sv.task_health())
      if (h.task == task) return h;
    return TaskHealth{};
  };
  const std::string t0 = "/job:worker/replica:0/task:0", t1 = "/job:worker/replica:0/task:1";
  ASSERT_EQ(sv.task_health().size(), 2u);
  ASSERT_GE(seconds_until([&] { return health(t0).up && health(t1).up; }, 30s), 0) << "the chief never saw both workers";

  // A dead worker (closed connection): the bound asked for is 1 s.
  worker0->signal(SIGKILL);
  const double dead = seconds_until([&] { return !health(t0).up; }, 10s);
  ASSERT_GE(dead, 0) << "a killed worker was never noticed";
  std::printf("dead worker detected after %.3f s\n", dead);
  EXPECT_EQ(health(t0).times_down, 1);
  EXPECT_TRUE(health(t1).up) << "one_for_one: the other worker is untouched";
  // It comes back: the supervisor reconnects and counts the outage.
  worker0->wait(10s);
  worker0 = start_worker(0);
  ASSERT_GE(seconds_until([&] { return health(t0).up; }, 30s), 0) << "the restarted worker was never seen again";
  EXPECT_GT(health(t0).down_secs, 0);

  // A silent worker (stopped, connection open): detected by heartbeats within peer_timeout.
  worker1->signal(SIGSTOP);
  const double silent = seconds_until([&] { return !health(t1).up; }, 15s);
  worker1->signal(SIGCONT);
  ASSERT_GE(silent, 0) << "a stopped worker was never noticed";
  std::printf("silent worker detected after %.3f s (peer_timeout 1.5 s)\n", silent);
  ASSERT_GE(seconds_until([&] { return health(t1).up; }, 30s), 0) << "the resumed worker was never seen again";
  EXPECT_EQ(health(t1).times_down, 1);
  EXPECT_TRUE(sv.stop().ok());
}

}  // namespace
}  // namespace actorflow
