// Fault scenario: the parameter server is SIGKILLed mid-training under `actorflow up`; up restarts
// it, the chief restores the variables from the newest checkpoint (logging the rolled-back steps),
// the other worker waits, and both finish training with a sane accuracy. No process is left behind.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/util/process.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::ChildProcess;
using testing::free_port;
using testing::TempDir;

// A process of this run whose command line has both needles and is not `actorflow up`, or -1.
int pid_of(const std::string& needle_a, const std::string& needle_b) {
  for (int pid : testing::processes_with({needle_a, needle_b})) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cmd.find(std::string("actorflow") + '\0' + "up" + '\0') == std::string::npos) return pid;
  }
  return -1;
}

TEST(RecoveryTest, ParameterServerKilledMidTrainingIsRestoredFromCheckpoint) {
  TempDir dir;
  const std::string file = dir.write(
      "c.toml", "[jobs]\nps = [\"localhost:" + std::to_string(free_port()) + "\"]\nworker = [\"localhost:" +
                    std::to_string(free_port()) + "\", \"localhost:" + std::to_string(free_port()) +
                    "\"]\n[supervisor]\nlogdir = \"" + dir.path() + "/logs\"\nsave_checkpoint_secs = 1\n");
  auto up = ChildProcess::start({binary("actorflow"), "up", "--cluster", file, "--", binary("samples/distributed_cnn"),
                                 "--steps", "300", "--print-every", "10", "--learning-rate", "1e-3"});
  // Train a while, with at least one checkpoint written.
  ASSERT_TRUE(up->wait_for_output("saved checkpoint", 120s)) << up->output();
  ASSERT_TRUE(up->wait_for_output("Step: 1", 60s)) << up->output();
  const int ps = pid_of(file, "--job ps");
  ASSERT_GT(ps, 0);
  kill(ps, SIGKILL);
  ASSERT_TRUE(up->wait_for_output("restarted ps/0", 60s)) << up->output();
  ASSERT_TRUE(up->wait_for_output("global steps rolled back", 120s)) << up->output();
  // Both workers finish.
  ASSERT_TRUE(up->wait_for_output("Test-Accuracy: ", 300s, 2)) << up->output();
  const std::string out = up->output();
  std::smatch m;
  std::string rest = out;
  int finished = 0;
  while (std::regex_search(rest, m, std::regex("Test-Accuracy: ([0-9.]+)"))) {
    EXPECT_GT(std::stod(m[1]), 0.6) << out;
    ++finished;
    rest = m.suffix();
  }
  EXPECT_EQ(finished, 2) << out;
  up->signal(SIGTERM);
  EXPECT_EQ(up->wait(30s), 0) << up->output();
  EXPECT_EQ(pid_of("distributed_cnn", file), -1) << "a process was left behind";
}

}  // namespace
}  // namespace actorflow
