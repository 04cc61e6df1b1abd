// Fault injection: plan parsing, seeded decisions, the FaultInjector hooks, and faults injected
// into multi-process clusters on 127.0.0.1 (drop, delay, duplicate, partition, chaos kill, slow,
// throw).
#include "actors/faults.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <future>
#include <set>
#include <thread>

#include "actorflow/embedding.h"
#include "actorflow/monitored_session.h"
#include "actorflow/train.h"
#include "data/checkpoint.h"
#include "graph/ops_variables.h"
#include "tests/util/process.h"
#include "actors/server_runtime.h"

namespace actorflow {
namespace {

using testing::binary;
using testing::ChildProcess;
using testing::free_port;
using testing::TempDir;
using namespace std::chrono_literals;

const char* kFullPlan = R"(seed = 7

[[fault]]
kind = "kill"
task = "worker/1"
at_step = 300

[[fault]]
kind = "throw"
task = "worker/0"
actor = "variable"
after_secs = 1.5

[[fault]]
kind = "drop"
src = "host/0"
dst = "worker/1"
probability = 0.3
duration_secs = 10

[[fault]]
kind = "delay"
dst = "ps/0"
delay_ms = 100
probability = 0.5
after_secs = 2
jitter_secs = 1

[[fault]]
kind = "duplicate"
src = "/job:worker/task:0"
probability = 1.0

[[fault]]
kind = "partition"
tasks_a = ["host/0", "worker/0"]
tasks_b = ["worker/1"]
after_secs = 3
duration_secs = 2

[[fault]]
kind = "slow"
task = "worker/1"
factor = 3
device = "cpu:0"

[[fault]]
kind = "corrupt_checkpoint"
task = "worker/0"
logdir = "/tmp/logs \"x\""
mode = "truncate"
at_step = 50
)";

// ---- plans ------------------------------------------------------------------------------

TEST(FaultPlanTest, ParsesEveryKind) {
  auto p = FaultPlan::parse(kFullPlan, "plan.toml");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->seed, 7u);
  ASSERT_EQ(p->faults.size(), 8u);
  const auto& f = p->faults;
  EXPECT_EQ(f[0].kind, FaultKind::kKill);
  EXPECT_EQ(f[0].task, "/job:worker/replica:0/task:1");
  EXPECT_EQ(*f[0].at_step, 300);
  EXPECT_EQ(f[0].line, 3);
  EXPECT_EQ(f[0].describe(), "kill worker/1 at step 300");
  EXPECT_EQ(f[1].kind, FaultKind::kThrow);
  EXPECT_EQ(f[1].actor, "variable");
  EXPECT_DOUBLE_EQ(*f[1].after_secs, 1.5);
  EXPECT_EQ(f[2].describe(), "drop host/0 -> worker/1 p=0.3 for 10 s");
  EXPECT_EQ(f[3].src, "");
  EXPECT_EQ(f[3].dst, "/job:ps/replica:0/task:0");
  EXPECT_EQ(f[3].delay_ms, 100);
  EXPECT_DOUBLE_EQ(f[3].jitter_secs, 1.0);
  EXPECT_EQ(f[4].src, "/job:worker/replica:0/task:0");
  EXPECT_EQ(f[5].describe(), "partition {host/0, worker/0} | {worker/1} after 3 s for 2 s");
  EXPECT_EQ(f[6].device, "CPU:0");
  EXPECT_DOUBLE_EQ(f[6].factor, 3.0);
  EXPECT_EQ(f[7].mode, "truncate");
  EXPECT_EQ(f[7].logdir, "/tmp/logs \"x\"");
  EXPECT_EQ(p->tasks(), (std::vector<std::string>{"/job:host/replica:0/task:0", "/job:ps/replica:0/task:0",
                                                  "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"}));
}

TEST(FaultPlanTest, RoundTripsThroughToml) {
  auto p = FaultPlan::parse(kFullPlan, "plan.toml");
  ASSERT_TRUE(p.ok()) << p.status();
  const std::string text = p->to_toml();
  auto q = FaultPlan::parse(text, "again.toml");
  ASSERT_TRUE(q.ok()) << q.status() << "\n" << text;
  EXPECT_EQ(q->seed, p->seed);
  ASSERT_EQ(q->faults.size(), p->faults.size());
  for (size_t i = 0; i < p->faults.size(); ++i) {
    const Fault &a = p->faults[i], &b = q->faults[i];
    EXPECT_EQ(a.describe(), b.describe()) << i;
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.task, b.task);
    EXPECT_EQ(a.tasks_a, b.tasks_a);
    EXPECT_EQ(a.tasks_b, b.tasks_b);
    EXPECT_EQ(a.src, b.src);
    EXPECT_EQ(a.dst, b.dst);
    EXPECT_EQ(a.at_step, b.at_step);
    EXPECT_EQ(a.after_secs, b.after_secs);
    EXPECT_EQ(a.duration_secs, b.duration_secs);
    EXPECT_EQ(a.jitter_secs, b.jitter_secs);
    EXPECT_EQ(a.probability, b.probability);
    EXPECT_EQ(a.delay_ms, b.delay_ms);
    EXPECT_EQ(a.factor, b.factor);
    EXPECT_EQ(a.device, b.device);
    EXPECT_EQ(a.actor, b.actor);
    EXPECT_EQ(a.mode, b.mode);
    EXPECT_EQ(a.logdir, b.logdir);
    EXPECT_EQ(p->start_secs(i), q->start_secs(i));
  }
  EXPECT_EQ(q->to_toml(), text);
}

// Each bad plan and the exact error line it must produce.
struct BadPlan {
  const char* text;
  const char* error;
};

TEST(FaultPlanTest, ErrorsNameFileLineColumnAndKey) {
  const std::vector<BadPlan> cases = {
      {"seed = 7\n[[fault]]\nkind = \"kil\"\ntask = \"worker/1\"\nat_step = 3\n",
       "p.toml:3:8: fault[0].kind: unknown kind 'kil' (did you mean 'kill'?)"},
      {"seed = 7\n[[fault]\n", "p.toml:2:"},
      {"[[fault]]\nkind = \"kill\"\ntask = \"worker/1\"\nat_step = 3\n", "p.toml:1:1: seed: missing"},
      {"seed = -1\n", "p.toml:1:8: seed: must be >= 0, got -1"},
      {"seed = 1\nsede = 2\n", "p.toml:2:1: sede: unknown key (did you mean 'seed'?)"},
      {"seed = 1\n[[fault]]\ntask = \"worker/1\"\n", "p.toml:2:1: fault[0].kind: missing"},
      {"seed = 1\n[[fault]]\nkind = \"drop\"\nsrc = \"host/0\"\nfactr = 3\n",
       "p.toml:5:1: fault[0].factr: unknown key"},
      {"seed = 1\n[[fault]]\nkind = \"kill\"\ntask = \"worker/1\"\nat_step = 3\nfactor = 3\n",
       "p.toml:6:1: fault[0].factor: does not apply to kind 'kill'"},
      {"seed = 1\n[[fault]]\nkind = \"kill\"\ntask = \"worker/1\"\nat_step = \"3\"\n",
       "p.toml:5:11: fault[0].at_step: expected an integer, got string"},
      {"seed = 1\n[[fault]]\nkind = \"drop\"\ndst = \"worker/1\"\nprobability = 1.5\n",
       "p.toml:5:15: fault[0].probability: must be in (0, 1]"},
      {"seed = 1\n[[fault]]\nkind = \"kill\"\ntask = \"worker/x\"\nat_step = 3\n",
       "p.toml:4:8: fault[0].task: bad task 'worker/x'"},
      {"seed = 1\n[[fault]]\nkind = \"kill\"\ntask = \"worker/1\"\nat_step = 3\nafter_secs = 1\n",
       "p.toml:5:11: fault[0].at_step: at_step and after_secs exclude each other"},
      {"seed = 1\n[[fault]]\nkind = \"kill\"\nat_step = 3\n", "p.toml:2:1: fault[0].task: required for kind 'kill'"},
      {"seed = 1\n[[fault]]\nkind = \"kill\"\ntask = \"worker/1\"\n",
       "p.toml:2:1: fault[0].at_step: kill needs at_step or after_secs"},
      {"seed = 1\n[[fault]]\nkind = \"partition\"\ntasks_a = [\"worker/0\"]\ntasks_b = [\"worker/0\"]\nduration_secs = 1\n",
       "p.toml:5:11: fault[0].tasks_b: task worker/0 is on both sides"},
      {"seed = 1\n[[fault]]\nkind = \"partition\"\ntasks_a = [\"worker/0\"]\ntasks_b = [\"worker/1\"]\n",
       "p.toml:2:1: fault[0].duration_secs: required for kind 'partition'"},
      {"seed = 1\n[[fault]]\nkind = \"corrupt_checkpoint\"\ntask = \"worker/0\"\nlogdir = \"d\"\nmode = \"shred\"\n",
       "p.toml:6:8: fault[0].mode: 'shred' is not a corruption mode (flip or truncate)"},
      {"seed = 1\n[[fault]]\nkind = \"throw\"\ntask = \"worker/0\"\nactor = \"master\"\n",
       "p.toml:5:9: fault[0].actor: 'master' is not an actor kind (device, variable or node)"},
      {"seed = 1\n[[fault]]\nkind = \"delay\"\nsrc = \"worker/0\"\n",
       "p.toml:2:1: fault[0].delay_ms: must be in 1..3600000"},
      // 1e10 s would overflow a nanosecond clock and fire at once.
      {"seed = 1\n[[fault]]\nkind = \"kill\"\ntask = \"worker/1\"\nafter_secs = 1e10\n",
       "p.toml:5:14: fault[0].after_secs: must be at most 1000000 s"},
      {"seed = 1\n[[fault]]\nkind = \"partition\"\ntasks_a = [\"worker/0\"]\ntasks_b = [\"worker/1\"]\n"
       "duration_secs = 1e7\n",
       "p.toml:6:17: fault[0].duration_secs: must be at most 1000000 s"},
      {"seed = 1\n[[fault]]\nkind = \"slow\"\ntask = \"worker/0\"\nfactor = 1\n",
       "p.toml:5:10: fault[0].factor: must be in (1, 1000]"},
      {"seed = 1\n[[fault]]\nkind = \"slow\"\ntask = \"worker/0\"\nfactor = 2\ndevice = \"tpu:0\"\n",
       "p.toml:6:10: fault[0].device: 'tpu:0' is not a device"},
      {"seed = 1\n[[fault]]\nkind = \"drop\"\nprobability = 0.5\n",
       "p.toml:2:1: fault[0].src: a link fault needs src or dst (or both)"},
      {"seed = 1\nfault = 3\n", "p.toml:2:9: fault: expected [[fault]] tables"},
      // The typed readers are config/toml_read.h's, shared with cluster files.
      {"seed = 1\n[[fault]]\nkind = \"kill\"\ntask = \"worker/1\"\nafter_secs = inf\n",
       "p.toml:5:14: fault[0].after_secs: must be a finite number, got inf"},
      {"seed = 1\n[[fault]]\nkind = \"kill\"\ntask = \"worker/1\"\nat_step = 1979-05-27\n",
       "p.toml:5:11: fault[0].at_step: expected an integer, got date"},
      {"seed = 1\n[[fault]]\nkind = \"KILL\"\ntask = \"worker/1\"\nat_step = 3\n",
       "p.toml:3:8: fault[0].kind: unknown kind 'KILL' (did you mean 'kill'?)"},
  };
  for (const auto& c : cases) {
    auto p = FaultPlan::parse(c.text, "p.toml");
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
    EXPECT_NE(p.status().message().find(c.error), std::string::npos)
        << "plan:\n" << c.text << "\nexpected: " << c.error << "\ngot: " << p.status().message();
  }
}

TEST(FaultPlanTest, EveryMistakeIsListedInFileOrder) {
  auto p = FaultPlan::parse("seed = 1\n[[fault]]\nkind = \"kil\"\n[[fault]]\nkind = \"drop\"\nsrc = \"a/b\"\n", "p.toml");
  ASSERT_FALSE(p.ok());
  const std::string m = p.status().message();
  const auto a = m.find("p.toml:3:8: fault[0].kind"), b = m.find("p.toml:6:7: fault[1].src");
  ASSERT_NE(a, std::string::npos) << m;
  ASSERT_NE(b, std::string::npos) << m;
  EXPECT_LT(a, b);
}

TEST(FaultPlanTest, MissingFileIsNamed) {
  auto p = FaultPlan::from_file("/nonexistent/plan.toml");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("/nonexistent/plan.toml"), std::string::npos);
}

std::string jitter_plan(uint64_t seed) {
  std::string t = "seed = " + std::to_string(seed) + "\n";
  for (int i = 0; i < 4; ++i)
    t += "[[fault]]\nkind = \"kill\"\ntask = \"worker/" + std::to_string(i) + "\"\nafter_secs = 10\njitter_secs = 5\n";
  t += "[[fault]]\nkind = \"kill\"\ntask = \"worker/9\"\nat_step = 4\n";
  return t;
}

TEST(FaultPlanTest, DerivedStartTimesFollowTheSeed) {
  auto a = FaultPlan::parse(jitter_plan(7)), b = FaultPlan::parse(jitter_plan(7)), c = FaultPlan::parse(jitter_plan(8));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::set<double> distinct;
  int differ = 0;
  for (size_t i = 0; i < 4; ++i) {
    const double t = *a->start_secs(i);
    EXPECT_EQ(t, *b->start_secs(i));  // same seed: same times, exactly
    EXPECT_GE(t, 10.0);
    EXPECT_LT(t, 15.0);
    distinct.insert(t);
    if (*c->start_secs(i) != t) ++differ;
  }
  EXPECT_EQ(distinct.size(), 4u);  // each fault has its own stream
  EXPECT_EQ(differ, 4);            // another seed moves them
  EXPECT_FALSE(a->start_secs(4).has_value());  // step-triggered
}

TEST(FaultPlanTest, InvolvesTheExecutingOrReceivingTask) {
  auto p = FaultPlan::parse(kFullPlan);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->involves(0, "worker/1"));
  EXPECT_FALSE(p->involves(0, "worker/0"));
  EXPECT_TRUE(p->involves(2, "/job:worker/replica:0/task:1"));  // receiver of host -> worker/1
  EXPECT_FALSE(p->involves(2, "host/0"));                       // the sender does not enforce it
  EXPECT_TRUE(p->involves(4, "ps/0"));                          // dst omitted: every receiver
  EXPECT_TRUE(p->involves(5, "host/0"));
  EXPECT_TRUE(p->involves(5, "worker/1"));
  EXPECT_FALSE(p->involves(5, "ps/0"));
}

TEST(FaultRngTest, StreamsAreReproducibleAndIndependent) {
  auto seq = [](uint64_t seed, uint64_t index) {
    FaultRng r = FaultRng::stream(seed, index, 0);
    std::vector<uint64_t> v;
    for (int i = 0; i < 8; ++i) v.push_back(r.next());
    return v;
  };
  EXPECT_EQ(seq(7, 0), seq(7, 0));
  EXPECT_NE(seq(7, 0), seq(8, 0));
  EXPECT_NE(seq(7, 0), seq(7, 1));
  FaultRng r = FaultRng::stream(7, 0, 0);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

TEST(FaultRngTest, GlobalStepNames) {
  EXPECT_TRUE(is_global_step_name("global_step"));
  EXPECT_TRUE(is_global_step_name("global_step:0"));
  EXPECT_TRUE(is_global_step_name("train/global_step"));
  EXPECT_FALSE(is_global_step_name("my_global_step"));
  EXPECT_FALSE(is_global_step_name("global_step:1"));
}

// ---- the injector ---------------------------------------------------------------------------

std::vector<bool> drops(FaultInjector& inj, int n) {
  std::vector<bool> v;
  for (int i = 0; i < n; ++i) v.push_back(inj.on_send("host/0", "worker/1").drop);
  return v;
}

TEST(FaultInjectorTest, DropProbabilityAndSeededSequence) {
  FaultInjector a, b, c;
  a.set_seed(7);
  b.set_seed(7);
  c.set_seed(8);
  for (auto* inj : {&a, &b, &c}) ASSERT_TRUE(inj->add(Fault::drop("host/0", "worker/1", 0.3)).ok());
  const auto da = drops(a, 10000), db = drops(b, 10000), dc = drops(c, 10000);
  const auto count = std::count(da.begin(), da.end(), true);
  // Binomial(10000, 0.3): sd = 45.8; +-300 is more than 6 sd.
  EXPECT_GT(count, 2700);
  EXPECT_LT(count, 3300);
  EXPECT_EQ(da, db);  // same seed: the same decisions in the same order
  EXPECT_NE(da, dc);
  EXPECT_EQ(a.stats().dropped, count);
  // Other links are untouched and draw nothing from the stream.
  EXPECT_FALSE(a.on_send("worker/1", "host/0").drop);
  EXPECT_FALSE(a.on_send("host/0", "worker/0").drop);
  EXPECT_FALSE(a.on_send("host/0", "host/0").drop);
  EXPECT_EQ(drops(a, 50), drops(b, 50));
}

TEST(FaultInjectorTest, LinkFaultsCombineAndMatchAnyTask) {
  FaultInjector inj;
  ASSERT_TRUE(inj.add(Fault::delay("", "worker/1", 40)).ok());
  ASSERT_TRUE(inj.add(Fault::delay("host/0", "worker/1", 90)).ok());
  ASSERT_TRUE(inj.add(Fault::duplicate("host/0", "")).ok());
  LinkDecision d = inj.on_send("/job:host/replica:0/task:0", "/job:worker/replica:0/task:1");
  EXPECT_FALSE(d.drop);
  EXPECT_EQ(d.delay_ms, 90);
  EXPECT_TRUE(d.duplicate);
  d = inj.on_receive("worker/0", "worker/1");
  EXPECT_EQ(d.delay_ms, 40);
  EXPECT_FALSE(d.duplicate);
  d = inj.on_receive("", "worker/1");  // unknown sender: only src-less faults apply
  EXPECT_EQ(d.delay_ms, 40);
  EXPECT_FALSE(inj.add(Fault::drop("host/0", "host/0")).ok());
  EXPECT_FALSE(inj.add(Fault::drop("nonsense", "")).ok());
  inj.clear();
  EXPECT_FALSE(inj.armed());
  EXPECT_EQ(inj.on_send("host/0", "worker/1").delay_ms, 0);
}

TEST(FaultInjectorTest, LoadedLinkFaultsActAtTheReceiverOnly) {
  auto plan = FaultPlan::parse("seed = 3\n[[fault]]\nkind = \"drop\"\nsrc = \"host/0\"\ndst = \"worker/1\"\n");
  ASSERT_TRUE(plan.ok());
  FaultInjector at_dst, at_src;
  auto l1 = at_dst.load(*plan, "/job:worker/replica:0/task:1");
  auto l2 = at_src.load(*plan, "host/0");
  ASSERT_TRUE(l1.ok() && l2.ok());
  EXPECT_EQ(l1->size(), 1u);
  EXPECT_EQ(l2->size(), 0u);
  EXPECT_FALSE(at_src.armed());
  EXPECT_FALSE(at_dst.on_send("host/0", "worker/1").drop);
  EXPECT_TRUE(at_dst.on_receive("host/0", "worker/1").drop);
  EXPECT_EQ(at_dst.seed(), 3u);
}

// Polls `pred` until it holds or `timeout` passes (bounded wait for a timed fault).
bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

TEST(FaultInjectorTest, PartitionDropsBothDirectionsThenHeals) {
  FaultInjector inj;
  ASSERT_TRUE(inj.add(Fault::partition({"host/0", "ps/0"}, {"worker/1"}, 0.3)).ok());
  EXPECT_TRUE(inj.on_send("host/0", "worker/1").drop);
  EXPECT_TRUE(inj.on_send("worker/1", "ps/0").drop);
  EXPECT_TRUE(inj.on_receive("worker/1", "host/0").drop);
  EXPECT_FALSE(inj.on_send("host/0", "ps/0").drop);  // same side
  EXPECT_FALSE(inj.on_send("worker/0", "worker/1").drop);  // not in the partition
  EXPECT_TRUE(eventually([&] { return !inj.on_send("host/0", "worker/1").drop; }, 10s));
  EXPECT_FALSE(inj.on_receive("worker/1", "host/0").drop);
}

TEST(FaultInjectorTest, DelayedStartFollowsAfterSecs) {
  FaultInjector inj;
  Fault f = Fault::drop("host/0", "worker/1");
  f.after_secs = 0.2;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(inj.add(f).ok());
  EXPECT_FALSE(inj.on_send("host/0", "worker/1").drop);
  EXPECT_TRUE(eventually([&] { return inj.on_send("host/0", "worker/1").drop; }, 10s));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 200ms);
}

TEST(FaultInjectorTest, KillAtStepAndAfterTime) {
  FaultInjector inj;
  std::mutex mu;
  std::vector<std::string> kills;
  inj.set_kill_handler_for_testing([&](const std::string& why) {
    std::lock_guard<std::mutex> l(mu);
    kills.push_back(why);
  });
  inj.set_seed(7);
  ASSERT_TRUE(inj.add(Fault::kill_at_step("worker/1", 300)).ok());
  inj.on_global_step(299);
  EXPECT_TRUE(kills.empty());
  inj.on_global_step(301);
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_NE(kills[0].find("fault injected: kill worker/1 at step 300 (observed step 301) (seed 7)"), std::string::npos)
      << kills[0];
  EXPECT_NE(kills[0].find("(seed 7)"), std::string::npos) << kills[0];
  inj.on_global_step(302);
  EXPECT_EQ(kills.size(), 1u);  // once
  EXPECT_EQ(inj.last_global_step(), 302);
  ASSERT_TRUE(inj.add(Fault::kill_after("worker/1", 0.05)).ok());
  EXPECT_TRUE(eventually([&] { std::lock_guard<std::mutex> l(mu); return kills.size() == 2; }, 10s));
  std::lock_guard<std::mutex> l(mu);
  EXPECT_NE(kills[1].find("kill worker/1 after 0.05 s at t=0.050 s"), std::string::npos) << kills[1];
  EXPECT_EQ(inj.stats().killed, 2);
}

TEST(FaultInjectorTest, SlowMatchesTaskAndDevice) {
  FaultInjector inj;
  ASSERT_TRUE(inj.add(Fault::slow("worker/1", 3, "CPU:1")).ok());
  EXPECT_EQ(inj.slow_factor("/job:worker/replica:0/task:1/device:CPU:1"), 3.0);
  EXPECT_EQ(inj.slow_factor("/job:worker/replica:0/task:1/device:CPU:0"), 1.0);
  EXPECT_EQ(inj.slow_factor("/job:worker/replica:0/task:0/device:CPU:1"), 1.0);
  ASSERT_TRUE(inj.add(Fault::slow("worker/0", 2)).ok());
  EXPECT_EQ(inj.slow_factor("/job:worker/replica:0/task:0/device:GPU:0"), 2.0);
}

TEST(FaultInjectorTest, ThrowIsOneShot) {
  FaultInjector inj;
  ASSERT_TRUE(inj.add(Fault::throw_in("worker/1", "device")).ok());
  EXPECT_NO_THROW(inj.maybe_throw("variable", ""));
  EXPECT_NO_THROW(inj.maybe_throw("device", "/job:worker/replica:0/task:0/device:CPU:0"));
  try {
    inj.maybe_throw("device", "/job:worker/replica:0/task:1/device:CPU:0");
    ADD_FAILURE() << "no exception";
  } catch (const InjectedFault& e) {
    EXPECT_NE(std::string(e.what()).find("/job:worker/replica:0/task:1/device:CPU:0"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(inj.maybe_throw("device", "/job:worker/replica:0/task:1/device:CPU:0"));
  EXPECT_EQ(inj.stats().thrown, 1);
}

TEST(FaultInjectorTest, ApplyDropsDuplicatesAndDelays) {
  FaultInjector inj;
  std::atomic<int> n{0};
  auto deliver = [&] {
    ++n;
    return Status::OK();
  };
  EXPECT_TRUE(inj.apply(LinkDecision{true, 0, false}, deliver).ok());
  EXPECT_EQ(n, 0);
  EXPECT_TRUE(inj.apply(LinkDecision{false, 0, true}, deliver).ok());
  EXPECT_EQ(n, 2);
  std::promise<std::chrono::steady_clock::time_point> done;
  const auto t0 = std::chrono::steady_clock::now();
  inj.apply(LinkDecision{false, 50, false}, [&] {
    done.set_value(std::chrono::steady_clock::now());
    return Status::OK();
  });
  auto fut = done.get_future();
  ASSERT_EQ(fut.wait_for(10s), std::future_status::ready);
  EXPECT_GE(fut.get() - t0, 50ms);
}

TEST(FaultInjectorTest, CorruptsTheNewestCheckpoint) {
  TempDir dir;
  CheckpointManager m(dir.path(), 3);
  CheckpointData d;
  d.variables["w"] = Tensor::from_vector<float>({1, 2, 3}, {3});
  for (int64_t s : {10, 20}) {
    d.global_step = s;
    ASSERT_TRUE(m.save(d).ok());
  }
  FaultInjector inj;
  ASSERT_TRUE(inj.add(Fault::corrupt_checkpoint("worker/0", dir.path(), "truncate")).ok());
  ASSERT_TRUE(eventually([&] { return inj.stats().corrupted == 1; }, 10s));
  // The corruption runs on the injector's thread right after it is counted: wait for its effect.
  ASSERT_TRUE(eventually([&] {
    CheckpointManager r(dir.path(), 3);
    auto got = r.restore_latest();
    return got.ok() && *got && (*got)->global_step == 10 && !r.last_restore_skipped().empty();
  }, 10s));
}

// ---- the global injector in a local server: the global step drives at_step faults ----------

class GlobalInjector : public ::testing::Test {
 protected:
  void TearDown() override {
    FaultInjector::global().clear();
    FaultInjector::global().set_kill_handler_for_testing(nullptr);
  }
};

TEST_F(GlobalInjector, GlobalStepFetchTriggersKill) {
  auto server = Server::local();
  ASSERT_TRUE(server.ok()) << server.status();
  Scope root = Scope::root();
  auto gs = ops::variable(root.with_op_name("global_step"), Shape{}, DType::kInt64);
  auto init = ops::assign(root.with_op_name("init"), gs, ops::constant(root, Tensor::scalar<int64_t>(0)));
  auto inc = ops::assign_add(root.with_op_name("inc"), gs, ops::constant(root, Tensor::scalar<int64_t>(1)));
  Session sess(root, (*server)->target());
  ASSERT_TRUE(sess.run({}, {}, {init}).ok());
  std::atomic<int> kills{0};
  FaultInjector::global().set_kill_handler_for_testing([&](const std::string&) { ++kills; });
  ASSERT_TRUE(FaultInjector::global().add(Fault::kill_at_step("localhost/0", 3)).ok());
  for (int i = 1; i <= 2; ++i) ASSERT_TRUE(sess.run({}, {}, {inc}).ok());
  EXPECT_EQ(kills, 0);
  ASSERT_TRUE(sess.run({}, {}, {inc}).ok());  // the variable actor sees 3
  EXPECT_EQ(kills, 1);
  auto v = sess.run({gs});  // the master sees 3 again: once only
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->at(0).data<int64_t>()[0], 3);
  EXPECT_EQ(FaultInjector::global().last_global_step(), 3);
  EXPECT_EQ(kills, 1);
}

TEST_F(GlobalInjector, ThrowInAVariableActorFailsOneRequest) {
  auto server = Server::local();
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
  auto good = sess.run({w});  // the variable kept its value
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->at(0).data<float>()[0], 5.f);
}

// ---- multi-process clusters -----------------------------------------------------------------

struct Cluster {
  TempDir dir;
  int host_port = free_port(), w0 = free_port(), w1 = free_port();
  std::string file;

  Cluster() {
    file = dir.write("cluster.toml", "[cluster]\nname = \"faults\"\n[jobs]\nhost = [\"localhost:" +
                                         std::to_string(host_port) + "\"]\nworker = [\"localhost:" +
                                         std::to_string(w0) + "\", \"localhost:" + std::to_string(w1) + "\"]\n" +
                                         "\n[server]\nconnect_timeout_ms = 20000\nheartbeat_interval_ms = 200\n"
                                         "peer_timeout_ms = 1500\n");
  }
  std::unique_ptr<ChildProcess> node(const std::string& job, int task, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {binary("actorflow"), "node", "--cluster", file, "--job", job, "--task",
                                     std::to_string(task)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return ChildProcess::start(argv);
  }
};

// Success once `p` serves; fails at once, saying why, when it exits or cannot listen first.
::testing::AssertionResult started(ChildProcess* p) {
  if (!p) return ::testing::AssertionFailure() << "the process did not start";
  return p->wait_for_output("serving", 20s);
}

const std::string kW1 = "/job:worker/replica:0/task:1";

// Two workers as child processes and an in-process host whose session runs
// x (fed on the host) -> y = x + 1 on worker 1 -> z = y + 1 on worker 0 -> host.
class ClusterFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    w0_ = c_.node("worker", 0);
    w1_ = c_.node("worker", 1);
    ASSERT_TRUE(started(w0_.get())) << w0_->output();
    ASSERT_TRUE(started(w1_.get())) << w1_->output();
    auto spec = ClusterSpec::from_file(c_.file);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto s = Server::create(*spec, TaskId{"host", 0});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    x_ = ops::placeholder(root_.with_device("/job:host/task:0"), DType::kFloat32, Shape{2}, "x");
    auto y = ops::add(root_.with_device("/job:worker/task:1"), x_, 1.f);
    z_ = ops::add(root_.with_device("/job:worker/task:0"), y, 1.f);
    sess_ = std::make_unique<Session>(root_, server_->target(), SessionOptions{});
    auto ok = step();
    ASSERT_TRUE(ok.ok()) << ok.status();
    ASSERT_EQ((*ok)[0].to_string(), "[3. 4.]");
  }
  void TearDown() override {
    FaultInjector::global().clear();
    sess_.reset();
    server_.reset();
  }
  Result<std::vector<Tensor>> step() { return sess_->run({{x_, Tensor::from_vector<float>({1, 2}, {2})}}, {z_}); }
  // Sends a plan to worker/1's node actor, as `actorflow chaos` does; returns what it loaded.
  std::vector<std::string> send_plan(const std::string& plan_toml) {
    auto p = ServerRuntime(*server_).membership()->ensure(kW1, "localhost:" + std::to_string(c_.w1));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return {};
    std::vector<std::string> out;
    caf::scoped_actor self{server_->system()};
    self->request(p->node, std::chrono::seconds(30), fault_atom::value, plan_toml)
        .receive([&](const std::vector<std::string>& loaded) { out = loaded; },
                 [&](caf::error& e) { ADD_FAILURE() << from_caf_error(e).message(); });
    return out;
  }

  Cluster c_;
  std::unique_ptr<ChildProcess> w0_, w1_;
  std::unique_ptr<Server> server_;
  Scope root_ = Scope::root();
  Output x_, z_;
  std::unique_ptr<Session> sess_;
};

TEST_F(ClusterFaults, DroppedLinkFailsTheStepNamingTheTaskThenClears) {
  ASSERT_TRUE(FaultInjector::global().add(Fault::drop("host/0", "worker/1", 1.0)).ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = step();
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(kW1), std::string::npos) << r.status();
  EXPECT_LT(took, 15s);  // heartbeats (peer_timeout 1.5 s) catch it; no step timeout is set
  EXPECT_GT(FaultInjector::global().stats().dropped, 0);
  FaultInjector::global().clear();
  auto again = step();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)[0].to_string(), "[3. 4.]");
}

TEST_F(ClusterFaults, DelayedLinkMakesStepsSlowerButCorrect) {
  ASSERT_TRUE(FaultInjector::global().add(Fault::delay("host/0", "worker/1", 100)).ok());
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = step();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)[0].to_string(), "[3. 4.]");
    // The tensor x cannot reach worker 1 earlier, so this lower bound holds by construction.
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms);
  }
  EXPECT_GE(FaultInjector::global().stats().delayed, 3);
}

TEST_F(ClusterFaults, DuplicatedTensorsAreIgnored) {
  // Every tensor host -> worker 1 is sent twice (the sending hook), and every tensor worker 0 ->
  // host is delivered twice (the receiving hook): h = z + 0 runs on the host.
  auto h = ops::add(root_.with_device("/job:host/task:0"), z_, 0.f);
  ASSERT_TRUE(FaultInjector::global().add(Fault::duplicate("host/0", "worker/1")).ok());
  ASSERT_TRUE(FaultInjector::global().add(Fault::duplicate("worker/0", "host/0")).ok());
  for (int i = 0; i < 20; ++i) {
    auto r = sess_->run({{x_, Tensor::from_vector<float>({float(i), 2}, {2})}}, {h});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)[0].data<float>()[0], float(i) + 2);
    EXPECT_EQ((*r)[0].data<float>()[1], 4.f);
  }
  EXPECT_GE(FaultInjector::global().stats().duplicated, 40);
}

TEST_F(ClusterFaults, PartitionFailsStepsThenHeals) {
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(FaultInjector::global().add(Fault::partition({"host/0"}, {"worker/1"}, 2.0)).ok());
  auto r = step();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(kW1), std::string::npos) << r.status();
  // Later steps succeed once the partition has healed (reconnecting waits for it, bounded).
  Result<std::vector<Tensor>> ok = Internal("no step succeeded");
  for (int i = 0; i < 10 && !ok.ok(); ++i) ok = step();
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].to_string(), "[3. 4.]");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 2s);  // nothing crossed the partition
}

TEST_F(ClusterFaults, PlanLoadedAtTheReceiverDropsItsIncomingLink) {
  // As `actorflow chaos` does: worker 1 loads a plan and enforces the host -> worker/1 link
  // itself (heartbeats and tensors from the host are dropped there) for 2 s.
  auto loaded = send_plan(
      "seed = 4\n[[fault]]\nkind = \"drop\"\nsrc = \"host/0\"\ndst = \"worker/1\"\nduration_secs = 2\n");
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0], "drop host/0 -> worker/1 p=1 for 2 s (starts at t=0.000 s)");
  EXPECT_EQ(FaultInjector::global().armed(), false);  // nothing in the host's own injector
  auto r = step();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(kW1), std::string::npos) << r.status();
  Result<std::vector<Tensor>> ok = Internal("no step succeeded");
  for (int i = 0; i < 10 && !ok.ok(); ++i) ok = step();
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].to_string(), "[3. 4.]");
  EXPECT_TRUE(w1_->wait_for_output("fault healed: drop host/0 -> worker/1", 10s)) << w1_->output();
}

TEST_F(ClusterFaults, SlowDeviceMakesStepsSlowerButCorrect) {
  // A compute-heavy partition on worker 1: four chained 384x384 matmuls.
  Scope root = Scope::root();
  auto a = ops::placeholder(root.with_device("/job:host/task:0"), DType::kFloat32, Shape{384, 384}, "a");
  auto w1 = root.with_device("/job:worker/task:1");
  Output m = a;
  for (int i = 0; i < 4; ++i) m = ops::matmul(w1, m, a);
  auto s = ops::reduce_sum(root.with_device("/job:host/task:0"), m);
  Session sess(root, server_->target());
  std::vector<float> vals(384 * 384);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = float((i * 7) % 11) / 110.f;
  auto feed = Tensor::from_vector<float>(vals, {384, 384});
  auto timed = [&](float* value) {
    auto best = std::chrono::steady_clock::duration::max();
    for (int i = 0; i < 5; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      auto r = sess.run({{a, feed}}, {s});
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return best;
      best = std::min(best, std::chrono::steady_clock::now() - t0);
      *value = (*r)[0].data<float>()[0];
    }
    return best;
  };
  float base_value = 0, slow_value = 0;
  const auto base = timed(&base_value);
  auto loaded = send_plan("seed = 5\n[[fault]]\nkind = \"slow\"\ntask = \"worker/1\"\nfactor = 3\n");
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0], "slow worker/1 by x3 (starts at t=0.000 s)");
  const auto slow = timed(&slow_value);
  EXPECT_EQ(slow_value, base_value);  // the same kernels on the same inputs
  // Timing is not asserted (tests never assert timing on a shared machine): the log line below
  // is the evidence the fault acted; the times are printed for a human.
  std::printf("fastest step: %.4f s unslowed, %.4f s slowed x3\n", std::chrono::duration<double>(base).count(),
              std::chrono::duration<double>(slow).count());
  EXPECT_TRUE(w1_->wait_for_output("fault injected: slow worker/1 by x3", 10s)) << w1_->output();
  EXPECT_TRUE(send_plan("").empty());  // clears
}

TEST_F(ClusterFaults, ThrowInADeviceActorFailsOneStep) {
  auto loaded = send_plan("seed = 9\n[[fault]]\nkind = \"throw\"\ntask = \"worker/1\"\nactor = \"device\"\n");
  ASSERT_EQ(loaded.size(), 1u);
  auto r = step();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(kW1), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("exception in the device actor: injected fault"), std::string::npos)
      << r.status();
  auto ok = step();
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].to_string(), "[3. 4.]");
  EXPECT_TRUE(w1_->running());
  EXPECT_TRUE(w1_->wait_for_output("fault injected: throwing", 10s)) << w1_->output();
}

TEST(ChaosTest, KillAfterTimeThroughTheCli) {
  Cluster c;
  auto host = c.node("host", 0);
  auto w0 = c.node("worker", 0);
  auto w1 = c.node("worker", 1);
  ASSERT_TRUE(started(host.get())) << host->output();
  ASSERT_TRUE(started(w0.get())) << w0->output();
  ASSERT_TRUE(started(w1.get())) << w1->output();
  const std::string plan = c.dir.write("kill.toml", "seed = 7\n[[fault]]\nkind = \"kill\"\ntask = \"worker/1\"\n"
                                                    "after_secs = 1\n");
  auto chaos = ChildProcess::start({binary("actorflow"), "chaos", "--cluster", c.file, "--plan", plan});
  ASSERT_EQ(chaos->wait(60s), 0) << chaos->output();
  const std::string out = chaos->output();
  EXPECT_NE(out.find("plan " + plan + " (seed 7): 1 fault(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("worker/1  applied 1 fault(s)\n    kill worker/1 after 1 s (starts at t=1.000 s)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("worker/0  nothing applies"), std::string::npos) << out;
  EXPECT_NE(out.find("host/0  nothing applies"), std::string::npos) << out;
  EXPECT_EQ(w1->wait(30s), 128 + SIGKILL) << w1->output();
  EXPECT_NE(w1->output().find("fault injected: kill worker/1 after 1 s at t=1.000 s (seed 7)"), std::string::npos)
      << w1->output();
  EXPECT_TRUE(w0->running());
  // A task that cannot be reached is named, with a non-zero exit.
  auto again = ChildProcess::start({binary("actorflow"), "chaos", "--cluster", c.file, "--clear", "--timeout-ms", "500"});
  EXPECT_EQ(again->wait(60s), 1) << again->output();
  EXPECT_NE(again->output().find("could not apply the plan to worker/1"), std::string::npos) << again->output();
  EXPECT_NE(again->output().find("worker/0  cleared"), std::string::npos) << again->output();
}

TEST(ChaosTest, BadPlansAreRejectedBeforeContactingTheCluster) {
  Cluster c;
  const std::string typo = c.dir.write("typo.toml", "seed = 7\n[[fault]]\nkind = \"kill\"\ntask = \"worker/5\"\n"
                                                    "after_secs = 1\n");
  auto chaos = ChildProcess::start({binary("actorflow"), "chaos", "--cluster", c.file, "--plan", typo});
  EXPECT_EQ(chaos->wait(60s), 2) << chaos->output();
  EXPECT_NE(chaos->output().find(typo + ":2:1: fault[0]: task worker/5 is not in cluster"), std::string::npos)
      << chaos->output();
  const std::string bad = c.dir.write("bad.toml", "seed = 7\n[[fault]]\nkind = \"nuke\"\n");
  auto node = c.node("worker", 0, {"--plan", bad});
  EXPECT_EQ(node->wait(60s), 2) << node->output();
  EXPECT_NE(node->output().find(bad + ":3:8: fault[0].kind: unknown kind 'nuke'"), std::string::npos)
      << node->output();
}

TEST(ChaosTest, NodeLoadsItsPartOfAPlanAtStart) {
  Cluster c;
  const std::string plan = c.dir.write("plan.toml",
                                       "seed = 11\n[[fault]]\nkind = \"kill\"\ntask = \"worker/1\"\nafter_secs = 0.5\n"
                                       "[[fault]]\nkind = \"drop\"\ndst = \"worker/0\"\nprobability = 0.5\n");
  auto w0 = c.node("worker", 0, {"--plan", plan});
  auto w1 = c.node("worker", 1, {"--plan", plan});
  ASSERT_TRUE(started(w0.get())) << w0->output();
  EXPECT_NE(w0->output().find("(seed 11): 1 fault(s) for worker/0\n  drop * -> worker/0 p=0.5"), std::string::npos)
      << w0->output();
  EXPECT_EQ(w1->wait(30s), 128 + SIGKILL) << w1->output();
  EXPECT_NE(w1->output().find("fault injected: kill worker/1 after 0.5 s at t=0.500 s (seed 11)"), std::string::npos)
      << w1->output();
}

TEST(ChaosTest, UpPassesThePlanToEachTasksFirstStart) {
  Cluster c;
  // Every address is local: up starts host/0, worker/0 and worker/1.
  const std::string plan = c.dir.write("plan.toml",
                                       "seed = 3\n[[fault]]\nkind = \"kill\"\ntask = \"worker/1\"\nafter_secs = 0.5\n");
  auto up = ChildProcess::start({binary("actorflow"), "up", "--cluster", c.file, "--plan", plan});
  // worker/1 is killed once by the plan, restarted without it, and then keeps serving.
  ASSERT_TRUE(up->wait_for_output("fault injected: kill worker/1", 30s)) << up->output();
  ASSERT_TRUE(up->wait_for_output("restarted worker/1", 30s)) << up->output();
  auto st = ChildProcess::start({binary("actorflow"), "status", "--cluster", c.file, "--timeout-ms", "20000"});
  EXPECT_EQ(st->wait(90s), 0) << st->output();
  up->signal(SIGTERM);
  EXPECT_EQ(up->wait(30s), 0) << up->output();
  const std::string out = up->output();
  size_t kills = 0;
  for (size_t p = out.find("fault injected: kill"); p != std::string::npos; p = out.find("fault injected: kill", p + 1))
    ++kills;
  EXPECT_EQ(kills, 1u) << out;
}

// The parameter server is killed after training ended, while the chief evaluates: the raw
// session's run fails with the lost task, but MonitoredTrainingSession::run_without_hooks waits
// for the restarted ps, restores the newest checkpoint (as a failed step would) and returns the
// restored values. Under `actorflow up` such an evaluation once ended every worker (exit 1), and
// up restarted them to train again from an old checkpoint.
TEST(TrainingFaults, AnEvaluationAfterTrainingOutlivesAKilledParameterServer) {
  TempDir dir;
  const std::string file = dir.write(
      "cluster.toml", "[jobs]\nps = [\"localhost:" + std::to_string(free_port()) + "\"]\nworker = [\"localhost:" +
                          std::to_string(free_port()) +
                          "\"]\n[server]\nconnect_timeout_ms = 20000\nheartbeat_interval_ms = 200\npeer_timeout_ms = 1500\n");
  auto start_ps = [&] {
    return ChildProcess::start({binary("actorflow"), "node", "--cluster", file, "--job", "ps", "--task", "0"});
  };
  auto ps = start_ps();
  ASSERT_TRUE(started(ps.get())) << ps->output();
  auto spec = ClusterSpec::from_file(file);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto server = Server::create(*spec, TaskId{"worker", 0});
  ASSERT_TRUE(server.ok()) << server.status();
  Scope root = Scope::root();
  Scope on_ps = root.with_device("/job:ps/task:0"), worker = root.with_device("/job:worker/task:0");
  Output w = train::get_variable(on_ps, "w", Shape{1}, DType::kFloat32, train::constant_initializer(1));
  Output gs = train::get_or_create_global_step(on_ps);
  Output x = ops::placeholder(worker, DType::kFloat32, Shape{1}, "x");
  auto train_op = train::GradientDescentOptimizer(0.1f).minimize(worker, ops::reduce_sum(worker, ops::mul(worker, w, x)), gs);
  ASSERT_TRUE(train_op.ok()) << train_op.status();
  train::MonitoredTrainingSession::Options o;
  o.master = (*server)->target();
  o.checkpoint_dir = dir.path() + "/logs";
  o.save_checkpoint_secs = 0;  // saved below, and at close
  o.ready_timeout_secs = 30;
  o.session.timeout(std::chrono::seconds(3));  // bounds the raw run below, which waits to reconnect
  o.hooks = {std::make_shared<train::StopAtStepHook>(0, 3)};
  auto sess = train::MonitoredTrainingSession::create(root, o);
  ASSERT_TRUE(sess.ok()) << sess.status();
  while (!(*sess)->should_stop()) ASSERT_TRUE((*sess)->run({{x, Tensor::from_vector<float>({2}, {1})}}, {}, {*train_op}).ok());
  ASSERT_TRUE((*sess)->supervisor().save_checkpoint().ok());  // w = 1 - 3 * 0.1 * 2 = 0.4, step 3
  ASSERT_EQ((*sess)->run({}, {w}).status().code(), Code::kFailedPrecondition) << "run() ends with training";

  ps->signal(SIGKILL);
  ps->wait(10s);
  auto raw = (*sess)->raw_session().run({w});
  EXPECT_FALSE(raw.ok()) << "the ps is gone";
  ps = start_ps();
  ASSERT_TRUE(started(ps.get())) << ps->output();
  auto eval = (*sess)->run_without_hooks({}, {w, gs});
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_NEAR((*eval)[0].data<float>()[0], 0.4f, 1e-6f);
  EXPECT_EQ((*eval)[1].data<int64_t>()[0], 3);
  ASSERT_TRUE((*sess)->close().ok());
  EXPECT_EQ((*sess)->run_without_hooks({}, {w}).status().code(), Code::kFailedPrecondition);
  sess->reset();
}

}  // namespace
}  // namespace actorflow
