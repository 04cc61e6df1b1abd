// Replicated parameter servers ([supervisor] ps_replicas = 2, actors/ps_replication.h): a
// primary's updates are held by its backup before they are acknowledged; the backup's copy
// serves (and is promoted) when the primary's task dies; the returning task gets the whole state
// back from the acting primary.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <thread>

#include "actorflow/embedding.h"
#include "actors/ps_replication.h"
#include "graph/ops_variables.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::ChildProcess;
using testing::free_port;
using testing::TempDir;

TEST(PsReplicationTest, CallAttributesRoundTrip) {
  AttrMap a;
  a.set("i", int64_t{-7});
  a.set("d", 0.1);
  a.set("b", true);
  a.set("s", std::string("adam"));
  a.set("t", DType::kFloat32);
  a.set("h", Shape{3, 4});
  a.set("u", Shape::unknown());
  a.set("I", std::vector<int64_t>{1, 2});
  a.set("S", std::vector<std::string>{"x", ""});
  auto back = decode_call_attrs(encode_call_attrs(a));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == a);
  std::string bad = encode_call_attrs(a);
  bad.resize(bad.size() - 3);
  EXPECT_FALSE(decode_call_attrs(bad).ok());
  EXPECT_TRUE(replicated_method("apply_adam", AttrMap{}));
  EXPECT_FALSE(replicated_method("read", AttrMap{}));
  EXPECT_FALSE(replicated_method("sync_control", AttrMap{}));
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
}

// The variable "w" as seen on one ps task: its value, its slots, an Adam update and an increment.
struct View {
  Scope root = Scope::root();
  Output w, slots, adam, add;
  explicit View(const std::string& ps) {
    Scope s = root.with_device(ps);
    w = ops::variable(s.with_op_name("w"), Shape{4}, DType::kFloat32);
    slots = ops::variable_slots(s.with_op_name("w_slots"), w);
    auto c = [&](float v) { return ops::constant(s, Tensor::scalar<float>(v)); };
    Tensor g(DType::kFloat32, Shape{4});
    for (int i = 0; i < 4; ++i) g.data<float>()[i] = 0.25f * static_cast<float>(i + 1);
    adam = ops::apply_adam(s.with_op_name("w_adam"), w, c(0.01f), c(0.9f), c(0.999f), c(1e-8f), ops::constant(s, g));
    Tensor one(DType::kFloat32, Shape{4});
    for (int i = 0; i < 4; ++i) one.data<float>()[i] = 1.f;
    add = ops::assign_add(s.with_op_name("w_add"), w, ops::constant(s, one));
  }
};

TEST(PsReplicationTest, AcknowledgedUpdatesAreOnTheBackupAndSurviveThePrimary) {
  TempDir dir;
  const int host = free_port(), p0 = free_port(), p1 = free_port();
  const std::string file = dir.write(
      "c.toml", "[jobs]\nhost = [\"localhost:" + std::to_string(host) + "\"]\nps = [\"localhost:" + std::to_string(p0) +
                    "\", \"localhost:" + std::to_string(p1) +
                    "\"]\n[server]\nheartbeat_interval_ms = 250\npeer_timeout_ms = 1500\n[supervisor]\nchief = "
                    "\"host/0\"\nps_replicas = 2\n");
  auto start_ps = [&](int i) {
    auto p = ChildProcess::start({binary("actorflow"), "node", "--cluster", file, "--job", "ps", "--task", std::to_string(i)});
    EXPECT_TRUE(p->wait_for_output("serving", 30s)) << p->output();
    return p;
  };
  auto ps0 = start_ps(0);
  auto ps1 = start_ps(1);
  // Task 0 serves alone until it reaches its backup (a cluster starting up): wait for that.
  ASSERT_TRUE(ps0->wait_for_output("backup /job:ps/replica:0/task:1 connected", 30s)) << ps0->output();
  auto cluster = ClusterSpec::from_file(file);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto server = Server::create(*cluster, TaskId{"host", 0});
  ASSERT_TRUE(server.ok()) << server.status();

  View primary("/job:ps/task:0"), backup("/job:ps/task:1");
  Session a(primary.root, (*server)->target());
  Session b(backup.root, (*server)->target());
  Tensor init(DType::kFloat32, Shape{4});
  for (int i = 0; i < 4; ++i) init.data<float>()[i] = static_cast<float>(i);
  auto init_op = ops::assign(primary.root.with_op_name("w_init").with_device("/job:ps/task:0"), primary.w,
                             ops::constant(primary.root.with_device("/job:ps/task:0"), init));
  ASSERT_TRUE(a.run({init_op}).ok());
  // Every acknowledged update is on the backup already: no wait between the two.
  for (int i = 0; i < 20; ++i) {
    auto up = a.run({i % 2 ? primary.adam : primary.add});
    ASSERT_TRUE(up.ok()) << up.status();
    auto pv = a.run({primary.w, primary.slots});
    auto bv = b.run({backup.w, backup.slots});
    ASSERT_TRUE(pv.ok() && bv.ok()) << pv.status() << " " << bv.status();
    EXPECT_TRUE(same_bytes((*pv)[0], (*bv)[0])) << "value differs after update " << i;
    EXPECT_TRUE(same_bytes((*pv)[1], (*bv)[1])) << "slots differ after update " << i;
  }
  auto last = a.run({primary.w});
  ASSERT_TRUE(last.ok());

  // The primary's task dies: its backup holds every acknowledged update and serves them.
  ps0->signal(SIGKILL);
  ps0->wait(10s);
  auto kept = b.run({backup.w});
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(same_bytes((*last)[0], (*kept)[0]));
  // Updated there, the backup copy becomes the primary (its backup, task 0, is down: alone).
  auto promoted = b.run({backup.add});
  ASSERT_TRUE(promoted.ok()) << promoted.status();

  // Task 0 returns empty; the acting primary's next update gives it the whole state.
  ps0 = start_ps(0);
  bool resynced = false;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!resynced && std::chrono::steady_clock::now() < deadline) {
    auto up = b.run({backup.adam});
    ASSERT_TRUE(up.ok()) << up.status();
    auto bv = b.run({backup.w, backup.slots});
    ASSERT_TRUE(bv.ok()) << bv.status();
    auto pv = a.run({primary.w, primary.slots});
    if (pv.ok()) {
      EXPECT_TRUE(same_bytes((*pv)[0], (*bv)[0]));
      EXPECT_TRUE(same_bytes((*pv)[1], (*bv)[1]));
      resynced = true;
    } else {
      std::this_thread::sleep_for(100ms);  // task 0 not reconnected by task 1 yet
    }
  }
  EXPECT_TRUE(resynced) << "task 0 never got the state back";
  (*server)->stop();
}

}  // namespace
}  // namespace actorflow
