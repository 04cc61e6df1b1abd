// Finding why a job waits (docs/architecture/diagnosis.md), on real jobs: a synchronous job
// (samples/distributed_cnn --sync, 1 ps + 2 workers, no backup worker) whose worker/1 is
// SIGSTOPped, and one whose worker/1 is partitioned away by a fault plan. `actorflow status
// --waits` and `--dump` (the real binary) must name worker/1 as the task the job waits on.
#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/util/process.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::ChildProcess;
using testing::free_port;

const char* kW1 = "/job:worker/replica:0/task:1";

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The part of `status --dump` or `--waits` output about `task`: from its header to the next.
std::string section(const std::string& out, const std::string& header, const std::string& next_prefix) {
  const size_t at = out.find(header);
  if (at == std::string::npos) return "";
  const size_t end = out.find(next_prefix, at + header.size());
  return out.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// The age in seconds of the oldest wait line of a hang report ("  12.3 s  <kind>  on <task>  <what>")
// that contains `needle`; -1 when none does.
double held_for(const std::string& report, const std::string& needle) {
  double oldest = -1;
  const std::regex line_re("\n  ([0-9.]+) s  ([^\n]*)");
  for (std::sregex_iterator it(report.begin(), report.end(), line_re), end; it != end; ++it)
    if ((*it)[2].str().find(needle) != std::string::npos) oldest = std::max(oldest, std::stod((*it)[1]));
  return oldest;
}

// 1 ps + 2 synchronous workers (2 of 2 gradients a step: no backup), each task with a metrics
// port, started task by task so that the test holds each process.
struct SyncJob {
  testing::TempDir dir;
  std::string file;
  std::unique_ptr<ChildProcess> ps, w0, w1;
  SyncJob() {
    std::string text = "[jobs]\nps = [\"localhost:" + std::to_string(free_port()) + "\"]\nworker = [\"localhost:" +
                       std::to_string(free_port()) + "\", \"localhost:" + std::to_string(free_port()) + "\"]\n";
    for (const char* t : {"ps/0", "worker/0", "worker/1"})
      text += "[tasks.\"" + std::string(t) + "\"]\nmetrics_port = " + std::to_string(free_port()) + "\n";
    file = dir.write("cluster.toml", text);
    const std::map<std::string, std::string> env{{"AF_WAIT_LOG_SECS", "2"}};
    auto task = [&](const std::string& job, int index) {
      std::vector<std::string> argv{binary("samples/distributed_cnn"), "--cluster", file, "--job", job,
                                    "--task", std::to_string(index)};
      if (job == "worker")
        for (const char* a : {"--sync", "--steps", "100000", "--print-every", "5", "--conv1", "4", "--conv2", "8",
                              "--hidden", "16", "--sync-timeout-secs", "600"})
          argv.push_back(a);
      return ChildProcess::start(argv, env);
    };
    ps = task("ps", 0);
    w0 = task("worker", 0);
    w1 = task("worker", 1);
  }
  ~SyncJob() {
    if (w1) w1->signal(SIGCONT);
    for (auto* p : {&w0, &w1, &ps})
      if (*p) (*p)->signal(SIGTERM);
    for (auto* p : {&w0, &w1, &ps})
      if (*p) (*p)->wait(30s);
  }
  bool training() {
    return ps && w0 && w1 && w0->await_output("Step: ", 180s, 2).ok() && w1->await_output("Step: ", 180s, 2).ok();
  }
  // `actorflow status` with `args`: (exit code, output).
  std::pair<int, std::string> status(const std::vector<std::string>& args) {
    std::vector<std::string> argv{binary("actorflow"), "status", "--cluster", file, "--timeout-ms", "1500"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto st = ChildProcess::start(argv, {}, {});
    if (!st) return {-1, ""};
    const int rc = st->wait(60s);
    return {rc, st->output()};
  }
};

TEST(DiagnosisTest, ASyncJobWithAStoppedWorkerWaitsOnExactlyThatWorker) {
  SyncJob job;
  ASSERT_TRUE(job.training()) << job.w0->output() << job.w1->output() << job.ps->output();
  job.w1->signal(SIGSTOP);
  ASSERT_TRUE(job.w1->wait_stopped(10s));
  // The ps's accumulator of the global step holds worker/0's run for worker/1's gradient; each
  // look takes at least the stopped task's timeout, so the loop needs no sleep.
  std::pair<int, std::string> out;
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (std::chrono::steady_clock::now() < deadline) {
    out = job.status({"--waits"});
    if (out.second.find("missing the gradient of " + std::string(kW1)) != std::string::npos &&
        out.second.find("waits end at:") != std::string::npos)
      break;
  }
  const std::string& text = out.second;
  EXPECT_EQ(out.first, 3) << text;  // worker/1 did not answer
  // Exactly worker/1 is where the waits end.
  EXPECT_NE(text.find("\nwaits end at: " + std::string(kW1) + "\n"), std::string::npos) << text;
  const std::string ps = section(text, "/job:ps/replica:0/task:0: ", "\n/job:");
  EXPECT_NE(ps.find("sync-contributions  worker/1  "), std::string::npos) << text;
  EXPECT_NE(ps.find("missing the gradient of " + std::string(kW1)), std::string::npos) << text;
  EXPECT_NE(text.find(std::string(kW1) + ": waits unknown ("), std::string::npos) << text;
  // worker/0 waits on the ps (its step's partition there), which waits on worker/1.
  const std::string w0 = section(text, "/job:worker/replica:0/task:0: ", "\n/job:");
  EXPECT_NE(w0.find("the partition on /job:ps/replica:0/task:0/device:CPU:0 has not reported"), std::string::npos) << text;

  // The same as JSON: worker/1 and nobody else is where the waits end.
  auto js = job.status({"--waits", "--json"});
  const nlohmann::json j = nlohmann::json::parse(js.second, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << js.second;
  EXPECT_EQ(j["waits_end_at"], nlohmann::json::array({kW1})) << js.second;

  // Past the ps's threshold (AF_WAIT_LOG_SECS = 2) the wait was logged, once, with the same facts.
  ASSERT_TRUE(job.ps->await_output("for sync-contributions on " + std::string(kW1), 30s).ok()) << job.ps->output();
  // Let it last three thresholds more (the watcher checks every half second), then count again.
  double age = 0;
  const auto later = std::chrono::steady_clock::now() + 60s;
  while (age < 8 && std::chrono::steady_clock::now() < later) {
    auto again = job.status({"--waits", "--json"});
    const nlohmann::json a = nlohmann::json::parse(again.second, nullptr, false);
    if (a.is_discarded()) continue;
    for (const auto& t : a["tasks"])
      for (const auto& w : t["waits"])
        if (w["kind"] == "sync-contributions" && w["on"] == kW1) age = std::max(age, w["age_secs"].get<double>());
  }
  EXPECT_GE(age, 8);
  EXPECT_EQ(count(job.ps->output(), "for sync-contributions on " + std::string(kW1)), 1u) << job.ps->output();

  // SIGUSR1: the ps writes its hang report, which names the wait.
  job.ps->signal(SIGUSR1);
  ASSERT_TRUE(job.ps->await_output("hang report requested by signal", 30s).ok()) << job.ps->output();
  ASSERT_TRUE(job.ps->await_output("sync-contributions  on " + std::string(kW1), 30s).ok()) << job.ps->output();
}

TEST(DiagnosisTest, APartitionedSyncJobsHangReportNamesThePartitionedTask) {
  SyncJob job;
  ASSERT_TRUE(job.training()) << job.w0->output() << job.w1->output() << job.ps->output();
  const std::string plan = job.dir.write("plan.toml",
                                         "seed = 1\n[[fault]]\nkind = \"partition\"\ntasks_a = [\"worker/1\"]\n"
                                         "tasks_b = [\"ps/0\", \"worker/0\"]\nduration_secs = 600\n");
  auto chaos = ChildProcess::start({binary("actorflow"), "chaos", "--cluster", job.file, "--plan", plan}, {}, {});
  ASSERT_TRUE(chaos);
  ASSERT_EQ(chaos->wait(60s), 0) << chaos->output();
  std::pair<int, std::string> out;
  std::string ps;
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (std::chrono::steady_clock::now() < deadline) {
    out = job.status({"--dump"});
    ps = section(out.second, "==== /job:ps/replica:0/task:0\n", "\n==== ");
    if (held_for(ps, "sync-contributions  on " + std::string(kW1)) >= 5) break;
    std::this_thread::sleep_for(500ms);  // the job's state moves with time: look again shortly
  }
  // Not a passing wait of a healthy step: it lasts.
  EXPECT_GE(held_for(ps, "sync-contributions  on " + std::string(kW1)), 5) << out.second;
  EXPECT_EQ(out.first, 0) << out.second;  // every task answered: a partition leaves the endpoints up
  EXPECT_NE(ps.find("sync-contributions  on " + std::string(kW1)), std::string::npos) << out.second;
  EXPECT_NE(ps.find("missing the gradient of " + std::string(kW1)), std::string::npos) << out.second;
  // Every task's report has its threads and what its actors report.
  for (const char* t : {"/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0", kW1}) {
    const std::string s = section(out.second, "==== " + std::string(t) + "\n", "\n==== ");
    EXPECT_NE(s.find("hang report of " + std::string(t)), std::string::npos) << out.second;
    EXPECT_NE(s.find("== threads\n"), std::string::npos) << s;
    EXPECT_NE(s.find("-- device " + std::string(t) + "/device:CPU:0\nsteps in flight: "), std::string::npos) << s;
    EXPECT_NE(s.find("-- master " + std::string(t) + "\nruns in flight: "), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace actorflow
