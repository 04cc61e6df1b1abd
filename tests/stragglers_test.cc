// Stragglers in synchronous training, on real multi-process jobs (samples/distributed_cnn --sync,
// 1 ps + N workers on loopback, ports picked free): a SIGSTOPped worker without a backup and a
// sync deadline (docs/architecture/variables.md, "Stragglers"): the other worker's steps keep
// completing, none takes longer than the deadline plus a margin, the ps logs a WARNING naming the
// stopped worker and counts short steps, `actorflow status` shows the counters, and once the
// worker is continued its late gradients are counted as stale; and a worker slowed 5x by a fault
// plan with one backup worker: its gradients are stale, counted in every worker's summary.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/util/process.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::ChildProcess;
using testing::free_port;

const char* kW1 = "/job:worker/replica:0/task:1";

// 1 ps + `workers` synchronous workers of a tiny seed CNN aggregating `replicas` gradients a step,
// each task with a metrics port. `supervisor` is extra [supervisor] TOML; `plan` a fault plan's
// TOML given to every task (ACTORFLOW_FAULT_PLAN; "" = none). Peers are declared down only after
// 60 s without heartbeats, so a SIGSTOPped worker stays a member (its run in flight on the ps
// stays too) and its gradients arrive late when it is continued.
struct StragglerJob {
  testing::TempDir dir;
  std::string file;
  std::unique_ptr<ChildProcess> ps;
  std::vector<std::unique_ptr<ChildProcess>> w;
  StragglerJob(int workers, int replicas, const std::string& supervisor, const std::string& plan, int64_t steps) {
    std::string text = "[jobs]\nps = [\"localhost:" + std::to_string(free_port()) + "\"]\nworker = [";
    for (int i = 0; i < workers; ++i) text += std::string(i ? ", " : "") + "\"localhost:" + std::to_string(free_port()) + "\"";
    text += "]\n[server]\npeer_timeout_ms = 60000\n[supervisor]\nsave_checkpoint_secs = 0\nlogdir = \"" + dir.path() +
            "/logs\"\n" + supervisor;
    text += "[tasks.\"ps/0\"]\nmetrics_port = " + std::to_string(free_port()) + "\n";
    for (int i = 0; i < workers; ++i)
      text += "[tasks.\"worker/" + std::to_string(i) + "\"]\nmetrics_port = " + std::to_string(free_port()) + "\n";
    file = dir.write("cluster.toml", text);
    std::map<std::string, std::string> env;
    if (!plan.empty()) env["ACTORFLOW_FAULT_PLAN"] = dir.write("plan.toml", plan);
    auto task = [&](const std::string& job, int index) {
      std::vector<std::string> argv{binary("samples/distributed_cnn"), "--cluster", file, "--job", job,
                                    "--task", std::to_string(index)};
      if (job == "worker")
        for (const std::string& a : {std::string("--sync"), std::string("--replicas-to-aggregate"), std::to_string(replicas),
                                     std::string("--steps"), std::to_string(steps), std::string("--print-every"),
                                     std::string("1"), std::string("--conv1"), std::string("4"), std::string("--conv2"),
                                     std::string("8"), std::string("--hidden"), std::string("16"),
                                     std::string("--sync-timeout-secs"), std::string("600")})
          argv.push_back(a);
      return ChildProcess::start(argv, env);
    };
    ps = task("ps", 0);
    for (int i = 0; i < workers; ++i) w.push_back(task("worker", i));
  }
  ~StragglerJob() {
    for (auto& p : w)
      if (p) p->signal(SIGCONT);
    for (auto& p : w)
      if (p) p->signal(SIGTERM);
    if (ps) ps->signal(SIGTERM);
    for (auto& p : w)
      if (p) p->wait(30s);
    if (ps) ps->wait(30s);
  }
  std::string outputs() const {
    std::string o = "---- ps/0\n" + (ps ? ps->output() : "");
    for (size_t i = 0; i < w.size(); ++i) o += "---- worker/" + std::to_string(i) + "\n" + (w[i] ? w[i]->output() : "");
    return o;
  }
  // `actorflow status --json`: the task objects by task name ("ps/0"); empty when it did not parse.
  std::map<std::string, nlohmann::json> status() {
    auto st = ChildProcess::start({binary("actorflow"), "status", "--cluster", file, "--json", "--timeout-ms", "1500",
                                   "--interval-ms", "100"},
                                  {}, {});
    std::map<std::string, nlohmann::json> out;
    if (!st) return out;
    st->wait(60s);
    const nlohmann::json j = nlohmann::json::parse(st->output(), nullptr, false);
    if (j.is_discarded() || !j.contains("tasks")) return out;
    for (const auto& t : j["tasks"]) out[t["task"].get<std::string>()] = t;
    return out;
  }
  // ps/0's counter `field` of `status --json` ("sync_short_steps", "sync_stale_gradients"); -1
  // when not shown.
  double ps_counter(const std::string& field) {
    auto s = status();
    auto it = s.find("ps/0");
    if (it == s.end() || !it->second.contains(field) || !it->second[field].is_number()) return -1;
    return it->second[field].get<double>();
  }
};

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The number after `key` on its last line in `text` ("Stale-Gradients: "); -1 when absent.
int64_t last_value(const std::string& text, const std::string& key) {
  const size_t at = text.rfind(key);
  if (at == std::string::npos) return -1;
  return std::stoll(text.substr(at + key.size()));
}

TEST(StragglersTest, AStoppedWorkerWithoutABackupStallsNoStepPastTheDeadlineAndIsReported) {
  constexpr int kDeadlineMs = 1000;
  StragglerJob job(2, 2, "sync_deadline_ms = " + std::to_string(kDeadlineMs) + "\n", "", 100000);
  ASSERT_TRUE(job.ps && job.w[0] && job.w[1]);
  ASSERT_TRUE(job.w[0]->await_output("Step: ", 180s, 3).ok()) << job.outputs();
  ASSERT_TRUE(job.w[1]->await_output("Step: ", 180s, 3).ok()) << job.outputs();
  // Healthy so far: every step had both gradients.
  EXPECT_EQ(job.ps_counter("sync_short_steps"), 0) << job.outputs();

  // Stop worker/1 in the middle of a step: the ps's part of its step has read the global step and
  // waits for its gradients (a "tensor" wait on worker/1). A stop that lands between its steps
  // (or after it contributed) leaves nothing late: continue it and stop it again.
  bool mid_step = false;
  std::string waits;
  for (int attempt = 0; attempt < 20 && !mid_step; ++attempt) {
    const int w1_steps = static_cast<int>(count(job.w[1]->output(), "Step: "));
    job.w[1]->signal(SIGSTOP);
    ASSERT_TRUE(job.w[1]->wait_stopped(10s));
    auto st = ChildProcess::start({binary("actorflow"), "status", "--cluster", job.file, "--waits", "--json",
                                   "--min-age-ms", "0", "--timeout-ms", "1500"},
                                  {}, {});
    ASSERT_TRUE(st);
    st->wait(60s);
    waits = st->output();
    const nlohmann::json j = nlohmann::json::parse(waits, nullptr, false);
    if (!j.is_discarded() && j.contains("tasks"))
      for (const auto& t : j["tasks"])
        if (t["task"].get<std::string>().find("job:ps") != std::string::npos)
          for (const auto& w : t["waits"]) mid_step = mid_step || (w["kind"] == "tensor" && w["on"] == kW1);
    if (mid_step) break;
    job.w[1]->signal(SIGCONT);
    ASSERT_TRUE(job.w[1]->await_output("Step: ", 60s, w1_steps + 1).ok()) << job.outputs();
  }
  ASSERT_TRUE(mid_step) << "worker/1 was never stopped in the middle of a step; the last waits:\n" << waits;
  const int w1_steps = static_cast<int>(count(job.w[1]->output(), "Step: "));

  // worker/0 goes on: each of its next steps closes short at the deadline, none takes longer than
  // the deadline plus a margin.
  const auto bound = std::chrono::milliseconds(kDeadlineMs) +
                     std::chrono::milliseconds(static_cast<int64_t>(2000 * testing::slowdown()));
  const int from = static_cast<int>(count(job.w[0]->output(), "Step: "));
  auto last = std::chrono::steady_clock::now();
  for (int k = 1; k <= 4; ++k) {
    ASSERT_TRUE(job.w[0]->await_output("Step: ", 60s, from + k).ok()) << job.outputs();
    const auto now = std::chrono::steady_clock::now();
    EXPECT_LT(now - last, bound) << "step " << k << " after the stop took "
                                 << std::chrono::duration<double>(now - last).count() << " s";
    last = now;
  }
  // The ps reports it: a WARNING naming the step and the stopped worker, and the counter.
  ASSERT_TRUE(job.ps->await_output("closed short at its deadline of 1 s with 1 of 2 gradients", 30s).ok())
      << job.outputs();
  EXPECT_NE(job.ps->output().find("missing " + std::string(kW1)), std::string::npos) << job.ps->output();
  EXPECT_GE(job.ps_counter("sync_short_steps"), 3) << job.outputs();
  EXPECT_EQ(job.ps_counter("sync_stale_gradients"), 0) << job.outputs();
  // Continued, worker/1 sends the gradients of the step it was computing: stale by now, dropped
  // and counted; it then trains on with the others.
  job.w[1]->signal(SIGCONT);
  ASSERT_TRUE(job.w[1]->await_output("Step: ", 60s, w1_steps + 2).ok()) << job.outputs();
  EXPECT_GE(job.ps_counter("sync_stale_gradients"), 1) << job.outputs();
  // `actorflow status` (the table) shows the counters on the ps, "-" on the workers.
  auto st = ChildProcess::start({binary("actorflow"), "status", "--cluster", job.file, "--timeout-ms", "1500",
                                 "--interval-ms", "100"},
                                {}, {});
  ASSERT_TRUE(st);
  st->wait(60s);
  const std::string table = st->output();
  EXPECT_NE(table.find("FAIL  STALE  SHORT  UPTIME"), std::string::npos) << table;
  auto tasks = job.status();
  ASSERT_TRUE(tasks.count("worker/0")) << table;
  EXPECT_TRUE(tasks["worker/0"]["sync_short_steps"].is_null()) << tasks["worker/0"];
  // Each metric on the ps's /metrics endpoint is what status read (status sums the family).
  EXPECT_GE(tasks["ps/0"]["sync_short_steps"].get<double>(), 3);
}

TEST(StragglersTest, ASlowWorkerWithABackupHasItsGradientsCountedStaleInEverySummary) {
  // 3 workers, 2 aggregated (one backup), worker/2 slowed 5x: each step fills with the two fast
  // workers' gradients; worker/2's arrive after its step was applied and are dropped. No deadline:
  // no step closes short.
  StragglerJob job(3, 2, "", "seed = 1\n[[fault]]\nkind = \"slow\"\ntask = \"worker/2\"\nfactor = 5\n", 40);
  ASSERT_TRUE(job.ps && job.w[0] && job.w[1] && job.w[2]);
  for (auto& p : job.w) ASSERT_EQ(p->wait(300s), 0) << job.outputs();
  for (size_t i = 0; i < job.w.size(); ++i) {
    const std::string out = job.w[i]->output();
    const int64_t stale = last_value(out, "Stale-Gradients: ");
    EXPECT_GE(stale, 1) << "worker/" << i << "\n" << out;
    EXPECT_EQ(last_value(out, "Short-Steps: "), 0) << "worker/" << i << "\n" << out;
    EXPECT_GE(last_value(out, "Global-Step: "), 40) << out;
  }
}

}  // namespace
}  // namespace actorflow
