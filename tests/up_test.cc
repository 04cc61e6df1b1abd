// `actorflow up`: starts every local task, restarts one killed with SIGKILL, gives up past
// max_restarts, and leaves no process behind on SIGTERM.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "net/socket.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::ChildProcess;
using testing::free_port;
using testing::TempDir;

// pids of live `actorflow node` processes whose command line mentions `needle`.
std::vector<int> node_pids(const std::string& needle) {
  std::vector<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (auto& c : cmd) if (c == '\0') c = ' ';
    std::ifstream s(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(s)), std::istreambuf_iterator<char>());
    const bool zombie = stat.find(") Z ") != std::string::npos;
    if (!zombie && cmd.find(" node ") != std::string::npos && cmd.find(needle) != std::string::npos)
      out.push_back(std::stoi(name));
  }
  return out;
}

TEST(UpTest, StartsRestartsAndStopsEverything) {
  TempDir dir;
  const std::string file = dir.write("c.toml", "[jobs]\nworker = [\"localhost:" + std::to_string(free_port()) +
                                                   "\", \"localhost:" + std::to_string(free_port()) +
                                                   "\"]\n[supervisor]\nmax_restarts = 5\n");
  auto up = ChildProcess::start({binary("actorflow"), "up", "--cluster", file});
  ASSERT_TRUE(up->wait_for_output("started worker/1", 20s)) << up->output();
  ASSERT_TRUE(up->wait_for_output("Started server for /job:worker/replica:0/task:1", 20s)) << up->output();
  ASSERT_TRUE(up->wait_for_output("Started server for /job:worker/replica:0/task:0", 20s)) << up->output();
  auto pids = node_pids(file);
  ASSERT_EQ(pids.size(), 2u);
  kill(pids[0], SIGKILL);
  ASSERT_TRUE(up->wait_for_output("restarted worker/", 20s)) << up->output();
  EXPECT_NE(up->output().find("killed by signal 9"), std::string::npos) << up->output();
  up->signal(SIGTERM);
  EXPECT_EQ(up->wait(20s), 0) << up->output();
  EXPECT_TRUE(node_pids(file).empty()) << "processes left behind";
}

TEST(UpTest, GivesUpPastMaxRestarts) {
  TempDir dir;
  // A program that always fails: restarted max_restarts times, then up exits 1 naming the task.
  const std::string file = dir.write("c.toml", "[jobs]\nworker = [\"localhost:" + std::to_string(free_port()) +
                                                   "\"]\n[supervisor]\nmax_restarts = 2\nrestart_window_secs = 60\n");
  auto up = ChildProcess::start({binary("actorflow"), "up", "--cluster", file, "--", "/bin/false"});
  EXPECT_EQ(up->wait(60s), 1) << up->output();
  EXPECT_NE(up->output().find("worker/0 failed (exit code 1) 3 times within 60 s; max_restarts = 2"),
            std::string::npos)
      << up->output();
}

TEST(UpTest, ATakenPortFailsTheWaitAtOnceNamingIt) {
  TempDir dir;
  // Someone else listens on worker/0's port: the task cannot listen, and a test waiting for it to
  // serve must fail at once with that reason instead of waiting out its timeout.
  const int port = free_port();
  auto squatter = net::listen_tcp("127.0.0.1", static_cast<uint16_t>(port));
  ASSERT_TRUE(squatter.ok()) << squatter.status();
  const std::string file = dir.write("c.toml", "[jobs]\nworker = [\"localhost:" + std::to_string(port) +
                                                   "\"]\n[supervisor]\nmax_restarts = 5\n");
  auto up = ChildProcess::start({binary("actorflow"), "up", "--cluster", file});
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = up->await_output("Started server for /job:worker/replica:0/task:0", 120s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s) << st;
  EXPECT_EQ(st.code(), Code::kAborted) << st << "\n" << up->output();
  EXPECT_NE(st.message().find("cannot listen"), std::string::npos) << st;
  up->signal(SIGTERM);
  EXPECT_NE(up->wait(20s), -1) << up->output();
}

TEST(UpTest, ProgramPerTaskGetsItsFlagsAndParameterServersStopWhenWorkersFinish) {
  TempDir dir;
  const std::string file = dir.write("c.toml", "[jobs]\nps = [\"localhost:" + std::to_string(free_port()) +
                                                   "\"]\nworker = [\"localhost:" + std::to_string(free_port()) +
                                                   "\"]\n");
  // Each task prints its flags. The ps then serves "forever" (like a real ps); the worker waits
  // until the ps has started (its marker file), then finishes: `up` must stop the ps and exit 0.
  const std::string marker = dir.path() + "/ps-started";
  const std::string script =
      "echo hello \"$@\"; case \"$*\" in *'--job ps'*) touch " + marker + "; exec sleep 120;; esac; "
      "for i in $(seq 300); do [ -f " + marker + " ] && exit 0; sleep 0.1; done; exit 3";
  auto up = ChildProcess::start({binary("actorflow"), "up", "--cluster", file, "--", "/bin/sh", "-c", script, "sh"});
  EXPECT_EQ(up->wait(60s), 0) << up->output();
  EXPECT_NE(up->output().find("hello --cluster " + file + " --job ps --task 0"), std::string::npos) << up->output();
  EXPECT_NE(up->output().find("hello --cluster " + file + " --job worker --task 0"), std::string::npos) << up->output();
  EXPECT_NE(up->output().find("every worker finished; stopping the parameter servers"), std::string::npos)
      << up->output();
}

// Every worker of a training program fails past max_restarts (a model it cannot load) while the
// ps serves forever: `up` gives up on the workers, stops the ps and exits 1 instead of waiting
// for a job nobody is left to run (it once waited forever beside the lone ps).
TEST(UpTest, WhenEveryWorkerIsGivenUpOnTheParameterServersStopAndUpFails) {
  TempDir dir;
  const std::string file = dir.write("c.toml", "[jobs]\nps = [\"localhost:" + std::to_string(free_port()) +
                                                   "\"]\nworker = [\"localhost:" + std::to_string(free_port()) +
                                                   "\", \"localhost:" + std::to_string(free_port()) +
                                                   "\"]\n[supervisor]\nmax_restarts = 1\nrestart_window_secs = 60\n");
  const std::string script = "case \"$*\" in *'--job ps'*) exec sleep 120;; esac; echo cannot load the model >&2; exit 1";
  auto up = ChildProcess::start({binary("actorflow"), "up", "--cluster", file, "--", "/bin/sh", "-c", script, "sh"});
  EXPECT_EQ(up->wait(60s), 1) << up->output();
  for (const char* part : {"worker/0 failed (exit code 1) 2 times", "worker/1 failed (exit code 1) 2 times",
                           "no worker is left running (given up on past max_restarts); stopping the parameter servers"})
    EXPECT_NE(up->output().find(part), std::string::npos) << part << "\n" << up->output();
}

// `up --plan P -- PROGRAM` fault-tests a user's own training program the way it runs: the plan
// reaches each task's first start (ACTORFLOW_FAULT_PLAN, loaded by Server::create), worker/1 is
// killed at global step 100, `up` restarts it clean, and training finishes.
TEST(UpTest, PlanAppliesToAUsersProgram) {
  TempDir dir;
  const std::string file =
      dir.write("c.toml", "[jobs]\nps = [\"localhost:" + std::to_string(free_port()) + "\"]\nworker = [\"localhost:" +
                              std::to_string(free_port()) + "\", \"localhost:" + std::to_string(free_port()) +
                              "\"]\n[supervisor]\nlogdir = \"" + dir.path() + "/logs\"\nsave_checkpoint_secs = 0\n");
  const std::string plan =
      dir.write("plan.toml", "seed = 5\n[[fault]]\nkind = \"kill\"\ntask = \"worker/1\"\nat_step = 100\n");
  auto up = ChildProcess::start({binary("actorflow"), "up", "--cluster", file, "--plan", plan, "--",
                                 binary("samples/distributed_cnn"), "--steps", "300", "--print-every", "50",
                                 // the scenario suite's small model: the test is about `up`, not training
                                 "--conv1", "8", "--conv2", "16", "--hidden", "64"});
  // A hang guard below ctest's 300 s, not a speed bound: under ASan, beside another test's
  // cluster on two cores, the job with the full-size model once took all of 240 s.
  auto code = up->await_exit(280s);
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << up->output();
  EXPECT_EQ(*code, 0) << up->output();
  const std::string out = up->output();
  EXPECT_NE(out.find("fault(s) for worker/1"), std::string::npos) << out;
  EXPECT_NE(out.find("fault injected: kill worker/1"), std::string::npos) << out;
  EXPECT_NE(out.find("worker/1 died (killed by signal 9"), std::string::npos) << out;
  EXPECT_NE(out.find("restarted worker/1"), std::string::npos) << out;
  // The restart runs clean: one kill only.
  EXPECT_EQ(out.find("fault injected: kill worker/1"), out.rfind("fault injected: kill worker/1")) << out;
}

// A plan the environment names that cannot be read stops the program with the variable named.
TEST(UpTest, UnreadablePlanInTheEnvironmentIsAnError) {
  TempDir dir;
  const std::string file = dir.write("c.toml", "[jobs]\nworker = [\"localhost:" + std::to_string(free_port()) + "\"]\n");
  auto p = ChildProcess::start({binary("samples/distributed_cnn"), "--steps", "1", "--cluster", file, "--job", "worker",
                                "--task", "0"},
                               {{"ACTORFLOW_FAULT_PLAN", dir.path() + "/missing.toml"}});
  auto code = p->await_exit(60s);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_NE(*code, 0) << p->output();
  EXPECT_NE(p->output().find("ACTORFLOW_FAULT_PLAN=" + dir.path() + "/missing.toml"), std::string::npos)
      << p->output();
}

}  // namespace
}  // namespace actorflow
