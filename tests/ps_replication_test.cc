// Replicated parameter servers ([supervisor] ps_replicas = 2, actors/ps_replication.h): a
// primary's updates are held by its backup before they are acknowledged; the backup's copy
// serves (and is promoted) when the primary's task dies; the returning task gets the whole state
// back from the acting primary.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <thread>

#include "actorflow/embedding.h"
#include "actorflow/server.h"
#include "actors/membership.h"
#include "actors/node_actor.h"
#include "actors/ps_replication.h"
#include "actors/resources.h"
#include "actors/variable_actor.h"
#include "device/kernel.h"
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

net::TensorMessage replica_frame(size_t i, size_t n, const std::string& key, float v, int64_t elems = 4) {
  net::TensorMessage m;
  m.key = ReplicaInbox::frame_key(i, n, key);
  m.tensor = Tensor(DType::kFloat32, Shape{elems});
  for (int64_t k = 0; k < elems; ++k) m.tensor.data<float>()[k] = v;
  return m;
}

TEST(ReplicaInboxTest, HoldsACallsTensorsUntilTakenAndSaysWhenTheyAreAllThere) {
  ReplicaInbox inbox(1 << 20, std::chrono::milliseconds(60000));
  EXPECT_TRUE(ReplicaInbox::is_replica_frame(replica_frame(0, 1, "k", 0.f)));
  net::TensorMessage rendezvous;
  rendezvous.key = "/job:ps/replica:0/task:0/device:CPU:0;x";
  EXPECT_FALSE(ReplicaInbox::is_replica_frame(rendezvous));
  // Arguments 3 and 1 of a call that moved two, the last one first; the call key may hold ';'.
  const std::string key = "abc|w;x|7";
  int ready = 0;
  inbox.notify(key, [&] { ++ready; });
  inbox.put(replica_frame(3, 2, key, 3.f));
  std::vector<std::pair<size_t, Tensor>> got;
  EXPECT_FALSE(inbox.take(key, 2, &got));
  EXPECT_EQ(ready, 0);
  inbox.put(replica_frame(1, 2, key, 1.f));
  EXPECT_EQ(ready, 1);
  EXPECT_EQ(inbox.held_bytes(), 32u);
  EXPECT_FALSE(inbox.take(key, 3, &got));  // the call says 3: not this one
  ASSERT_TRUE(inbox.take(key, 2, &got));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, 3u);
  EXPECT_EQ(got[0].second.data<float>()[0], 3.f);
  EXPECT_EQ(got[1].first, 1u);
  EXPECT_EQ(got[1].second.data<float>()[2], 1.f);
  EXPECT_EQ(inbox.held_bytes(), 0u);
  EXPECT_EQ(inbox.held_calls(), 0u);
  // Asked after they are all there: the callback runs at once.
  inbox.put(replica_frame(0, 1, "k2", 5.f));
  inbox.notify("k2", [&] { ++ready; });
  EXPECT_EQ(ready, 2);
  inbox.forget("k2");
  EXPECT_EQ(inbox.held_bytes(), 0u);
  EXPECT_EQ(inbox.held_calls(), 0u);
}

TEST(ReplicaInboxTest, DropsMalformedFramesAndBoundsItsMemory) {
  ReplicaInbox inbox(100, std::chrono::milliseconds(60000));
  auto keyed = [](const std::string& k) {
    net::TensorMessage m = replica_frame(0, 1, "x", 1.f);
    m.key = k;
    return m;
  };
  for (const char* k : {"!replica;", "!replica;0;", "!replica;0;1;", "!replica;a;1;k", "!replica;0;0;k",
                        "!replica;64;65;k", "!replica;0;65;k", "!replica;99999999;1;k", "!replica;-1;1;k"})
    inbox.put(keyed(k));
  EXPECT_EQ(inbox.held_calls(), 0u);
  EXPECT_EQ(inbox.held_bytes(), 0u);
  net::TensorMessage err = replica_frame(0, 1, "e", 1.f);
  err.status_error = "boom";
  inbox.put(err);
  EXPECT_EQ(inbox.held_calls(), 0u);
  // A repeated index and a count that disagrees with the call's first frame are dropped.
  inbox.put(replica_frame(0, 2, "c", 1.f));
  inbox.put(replica_frame(0, 2, "c", 9.f));
  inbox.put(replica_frame(1, 3, "c", 9.f));
  std::vector<std::pair<size_t, Tensor>> got;
  EXPECT_FALSE(inbox.take("c", 2, &got));
  EXPECT_EQ(inbox.held_bytes(), 16u);
  // Past max_bytes (100): 16 + 64 fits, 32 more does not.
  inbox.put(replica_frame(1, 2, "c", 2.f, 16));
  inbox.put(replica_frame(0, 1, "d", 3.f, 8));
  EXPECT_EQ(inbox.held_bytes(), 80u);
  EXPECT_FALSE(inbox.take("d", 1, &got));
  ASSERT_TRUE(inbox.take("c", 2, &got));
  EXPECT_EQ(got[0].second.data<float>()[0], 1.f);
  EXPECT_EQ(got[1].second.shape(), Shape{16});
  EXPECT_EQ(inbox.held_bytes(), 0u);
}

TEST(ReplicaInboxTest, TensorsNobodyTakesExpire) {
  ReplicaInbox inbox(1 << 20, std::chrono::milliseconds(0));
  inbox.put(replica_frame(0, 2, "old", 1.f));
  EXPECT_EQ(inbox.held_calls(), 1u);
  // The next frame finds the first older than the ttl (0 ms) and drops it.
  inbox.put(replica_frame(0, 1, "new", 1.f));
  std::vector<std::pair<size_t, Tensor>> got;
  EXPECT_EQ(inbox.held_calls(), 1u);
  EXPECT_TRUE(inbox.take("new", 1, &got));
  EXPECT_EQ(inbox.held_bytes(), 0u);
}

Tensor filled(int64_t n, float v) {
  Tensor t(DType::kFloat32, Shape{n});
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = v;
  return t;
}

// A backup's node actor (in process, with its inbox) gets a primary's two calls before the first
// one's data-plane tensor: the second, which carries its tensor, must wait behind the first.
// Applied out of order, assign(5) after assign_add(1) would leave 5, not 6.
TEST(ReplicaInboxTest, ABackupAppliesAPrimarysCallsInTheirOrderWhateverArrivesFirst) {
  caf::actor_system_config cfg;
  Server::configure(cfg);
  caf::actor_system sys{cfg};
  auto resources = std::make_shared<ResourceManager>(sys, variable_actor_factory(RestartPolicy{}, nullptr));
  auto inbox = std::make_shared<ReplicaInbox>(1 << 20, std::chrono::milliseconds(60000));
  NodeActorConfig nc;
  nc.task = "/job:ps/replica:0/task:1";
  nc.resources = resources;
  nc.replica_inbox = inbox;
  nc.shutdown_token = "test-token";
  node_actor_t node = spawn_node_actor(sys, nc);
  {
    caf::scoped_actor self{sys};
    AttrMap ahead;
    ahead.set(kReplicaDataAttr, std::string("1;primary|w|1"));
    self->send(node, replicate_atom::value, std::string("w"), std::string("assign"), TensorList{Tensor()},
               encode_call_attrs(ahead));
    self->send(node, replicate_atom::value, std::string("w"), std::string("assign_add"), TensorList{filled(8, 1.f)},
               encode_call_attrs(AttrMap()));
    // A bad data attribute is refused, naming it.
    AttrMap bad;
    bad.set(kReplicaDataAttr, std::string("x;k"));
    std::string refused;
    self->request(node, std::chrono::seconds(10), replicate_atom::value, std::string("v"), std::string("assign"),
                  TensorList{Tensor()}, encode_call_attrs(bad))
        .receive([&](const TensorList&) { refused = "answered"; },
                 [&](const caf::error& e) { refused = caf::to_string(e); });
    EXPECT_NE(refused.find(kReplicaDataAttr), std::string::npos) << refused;
    // Now the first call's tensor arrives over the data plane: both calls are applied, in order.
    net::TensorMessage m;
    m.key = ReplicaInbox::frame_key(0, 1, "primary|w|1");
    m.tensor = filled(8, 5.f);
    inbox->put(m);
    int answered = 0;
    for (int i = 0; i < 2; ++i)
      self->receive([&](const TensorList&) { ++answered; },
                    [&](const caf::error& e) { ADD_FAILURE() << caf::to_string(e); },
                    caf::after(std::chrono::seconds(10)) >> [&] { ADD_FAILURE() << "no answer"; });
    EXPECT_EQ(answered, 2);
    EXPECT_EQ(inbox->held_calls(), 0u);
    auto w = resources->find("w");
    ASSERT_TRUE(w);
    auto read = std::make_shared<ResourceCall>();
    read->resource = "w";
    read->method = "read";
    Tensor value;
    self->request(w, std::chrono::seconds(10), resource_atom::value, ResourceCallPtr(read))
        .receive([&](const TensorList& v) { value = v.empty() ? Tensor() : v[0]; },
                 [&](const caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    ASSERT_TRUE(value.is_initialized());
    for (int i = 0; i < 8; ++i) EXPECT_EQ(value.data<float>()[i], 6.f) << i;
    self->send(node, shutdown_atom::value, std::string("test-token"));
  }
  resources->close();
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
}

// The variable "w" of `n` floats as seen on one ps task: its value, its slots, an Adam update
// and an increment.
struct View {
  Scope root = Scope::root();
  Output w, slots, adam, add;
  explicit View(const std::string& ps, int64_t n = 4) {
    Scope s = root.with_device(ps);
    w = ops::variable(s.with_op_name("w"), Shape{n}, DType::kFloat32);
    slots = ops::variable_slots(s.with_op_name("w_slots"), w);
    auto c = [&](float v) { return ops::constant(s, Tensor::scalar<float>(v)); };
    Tensor g(DType::kFloat32, Shape{n});
    for (int64_t i = 0; i < n; ++i) g.data<float>()[i] = 0.25f * static_cast<float>(i % 7 + 1);
    adam = ops::apply_adam(s.with_op_name("w_adam"), w, c(0.01f), c(0.9f), c(0.999f), c(1e-8f), ops::constant(s, g));
    Tensor one(DType::kFloat32, Shape{n});
    for (int64_t i = 0; i < n; ++i) one.data<float>()[i] = 1.f;
    add = ops::assign_add(s.with_op_name("w_add"), w, ops::constant(s, one));
  }
};

// A cluster of `hosts` in-process "host" tasks (host/0 the chief) and 2 replicated ps tasks
// (`actorflow node` processes, each the other's backup), with a short peer timeout.
struct ReplicatedCluster {
  TempDir dir;
  std::string file;
  explicit ReplicatedCluster(int hosts) {
    std::string h;
    for (int i = 0; i < hosts; ++i) h += std::string(i ? ", " : "") + "\"localhost:" + std::to_string(free_port()) + "\"";
    file = dir.write("c.toml", "[jobs]\nhost = [" + h + "]\nps = [\"localhost:" + std::to_string(free_port()) +
                                   "\", \"localhost:" + std::to_string(free_port()) +
                                   "\"]\n[server]\nheartbeat_interval_ms = 250\npeer_timeout_ms = 1500\n[supervisor]\n"
                                   "chief = \"host/0\"\nps_replicas = 2\n");
  }
  // Starts ps task `i` and waits until it serves.
  std::unique_ptr<ChildProcess> start_ps(int i) const {
    auto p = ChildProcess::start({binary("actorflow"), "node", "--cluster", file, "--job", "ps", "--task", std::to_string(i)});
    EXPECT_TRUE(p && p->wait_for_output("serving", 30s)) << (p ? p->output() : "not started");
    return p;
  }
};

// Acknowledged updates of an `n`-float variable are on the backup, which serves them once the
// primary dies and gives the returning task the whole state. With `data_plane`, the variable is
// large enough (kReplicaDataMinBytes) that the updates' tensors and the whole states go over
// the data plane, which both directions must say they use.
void acknowledged_updates_survive(int64_t n, bool data_plane) {
  ReplicatedCluster rc(2);
  const std::string& file = rc.file;
  auto start_ps = [&](int i) { return rc.start_ps(i); };
  auto ps0 = start_ps(0);
  auto ps1 = start_ps(1);
  // Task 0 serves alone until it reaches its backup (a cluster starting up): wait for that.
  ASSERT_TRUE(ps0->wait_for_output("backup /job:ps/replica:0/task:1 connected", 30s)) << ps0->output();
  auto cluster = ClusterSpec::from_file(file);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto server = Server::create(*cluster, TaskId{"host", 0});
  ASSERT_TRUE(server.ok()) << server.status();

  View primary("/job:ps/task:0", n), backup("/job:ps/task:1", n);
  Session a(primary.root, (*server)->target());
  Session b(backup.root, (*server)->target());
  Tensor init(DType::kFloat32, Shape{n});
  for (int64_t i = 0; i < n; ++i) init.data<float>()[i] = static_cast<float>(i % 11);
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
  // Dense updates with nothing read from the backup between them: it holds them unapplied and
  // takes the primary's whole state now and then (variable_actor.cc, kSyncEvery and kHeldStates:
  // here every 6th, by bytes); 19 leave some held past the last whole state, which the reads below must
  // include.
  for (int i = 0; i < 19; ++i) {
    auto up = a.run({primary.adam});
    ASSERT_TRUE(up.ok()) << up.status();
  }
  auto last = a.run({primary.w, primary.slots});
  ASSERT_TRUE(last.ok());
  const char* kOverDataPlane = "tensors of replicated calls arrive over the data plane";
  // Every update above was acknowledged, so its tensors have reached the backup (whose log the
  // test reads through a pipe: waited for).
  if (data_plane) EXPECT_TRUE(ps1->wait_for_output(kOverDataPlane, 10s)) << ps1->output();
  else EXPECT_EQ(ps1->output().find(kOverDataPlane), std::string::npos) << ps1->output();

  // The primary's task dies: its backup holds every acknowledged update and serves them.
  ps0->signal(SIGKILL);
  ps0->wait(10s);
  auto kept = b.run({backup.w, backup.slots});
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(same_bytes((*last)[0], (*kept)[0]));
  EXPECT_TRUE(same_bytes((*last)[1], (*kept)[1]));
  // Updated there, the backup copy becomes the primary (its backup, task 0, is down: alone).
  auto promoted = b.run({backup.add});
  ASSERT_TRUE(promoted.ok()) << promoted.status();

  // Task 0 returns empty; once task 1 has reconnected to it, the acting primary's next update
  // gives it the whole state. Read there directly by a process that started after the failover
  // (host/1: task 0 not aliased to task 1), the copy equals the acting primary's.
  ps0 = start_ps(0);
  ASSERT_TRUE(ps1->wait_for_output("backup /job:ps/replica:0/task:0 connected (epoch 2)", 30s)) << ps1->output();
  auto up = b.run({backup.adam});
  ASSERT_TRUE(up.ok()) << up.status();
  auto bv = b.run({backup.w, backup.slots});
  ASSERT_TRUE(bv.ok()) << bv.status();
  auto late = Server::create(*cluster, TaskId{"host", 1});
  ASSERT_TRUE(late.ok()) << late.status();
  Session c(primary.root, (*late)->target());
  auto pv = c.run({primary.w, primary.slots});
  ASSERT_TRUE(pv.ok()) << "task 0 never got the state back: " << pv.status();
  EXPECT_TRUE(same_bytes((*pv)[0], (*bv)[0]));
  EXPECT_TRUE(same_bytes((*pv)[1], (*bv)[1]));
  if (data_plane) EXPECT_TRUE(ps0->wait_for_output(kOverDataPlane, 10s)) << ps0->output();
  else EXPECT_EQ(ps0->output().find(kOverDataPlane), std::string::npos) << ps0->output();
  (*late)->stop();
  (*server)->stop();
}

// A cluster member sends a ps task's data plane replica frames no primary sent: malformed keys,
// out-of-range indices and counts, counts that disagree, error frames, and a flood of calls that
// never come. The node drops them (its inbox bounded and expiring), keeps serving, and a member
// with the wrong secret cannot even deliver one.
TEST(PsReplicationTest, ForgedReplicaFramesAreDroppedAndTheNodeServesOn) {
  ReplicatedCluster rc(1);
  auto ps1 = rc.start_ps(1);
  auto cluster = ClusterSpec::from_file(rc.file);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  caf::actor_system_config cfg;
  Server::configure(cfg);
  caf::actor_system sys{cfg};
  MembershipConfig mc;
  mc.self_task = "/job:host/replica:0/task:0";
  mc.fingerprint = cluster->fingerprint();
  Membership m(sys, mc);
  auto addr = cluster->task_address(TaskId{"ps", 1});
  ASSERT_TRUE(addr.ok());
  auto peer = m.ensure("/job:ps/replica:0/task:1", *addr, 10s);
  ASSERT_TRUE(peer.ok()) << peer.status();
  net::TransportOptions o;
  o.cluster_fingerprint = cluster->fingerprint();
  o.task_name = "host/0";
  {
    net::TransportOptions wrong = o;
    wrong.secret = "not-the-cluster-secret";
    net::TensorClient stranger(wrong);
    EXPECT_FALSE(stranger.send(peer->data_addr, replica_frame(0, 1, "x", 1.f)).ok());
  }
  net::TensorClient c(o);
  std::vector<net::TensorMessage> forged;
  for (const char* k : {"!replica;", "!replica;0;0;k", "!replica;64;65;k", "!replica;99999999;1;k", "!replica;0;1;"}) {
    net::TensorMessage f = replica_frame(0, 1, "x", 1.f);
    f.key = k;
    forged.push_back(f);
  }
  forged.push_back(replica_frame(0, 2, "c", 1.f));
  forged.push_back(replica_frame(0, 2, "c", 1.f));  // repeated index
  forged.push_back(replica_frame(1, 3, "c", 1.f));  // count disagrees
  ASSERT_TRUE(c.send_batch(peer->data_addr, forged).ok());
  // A flood: 2000 calls whose BASP message never comes (64 MB held at most, dropped by expiry).
  for (int i = 0; i < 2000; i += 100) {
    std::vector<net::TensorMessage> flood;
    for (int k = i; k < i + 100; ++k) flood.push_back(replica_frame(0, 2, "flood|" + std::to_string(k), 2.f, 8192));
    ASSERT_TRUE(c.send_batch(peer->data_addr, flood).ok());
  }
  // Still serving: the node actor answers a member, and the data plane takes a frame.
  caf::scoped_actor self{sys};
  std::string task;
  self->request(peer->node, 10s, ping_atom::value)
      .receive([&](std::string& t) { task = t; }, [&](caf::error& e) { task = caf::to_string(e); });
  EXPECT_EQ(task, "/job:ps/replica:0/task:1");
  EXPECT_TRUE(c.send(peer->data_addr, replica_frame(0, 1, "after", 3.f)).ok());
  EXPECT_TRUE(ps1->running()) << ps1->output();
  EXPECT_TRUE(ps1->wait_for_output("dropped a replica frame of call c", 10s)) << ps1->output();
  EXPECT_NE(ps1->output().find("dropped a malformed replica frame"), std::string::npos) << ps1->output();
}

TEST(PsReplicationTest, AcknowledgedUpdatesAreOnTheBackupAndSurviveThePrimary) {
  acknowledged_updates_survive(4, /*data_plane=*/false);
}

TEST(PsReplicationTest, LargeUpdatesGoOverTheDataPlaneAndSurviveThePrimary) {
  acknowledged_updates_survive(8192, /*data_plane=*/true);
}

// Counts the updates of a job whose variables live on two ps tasks, each the other's backup.
struct Counter2 {
  Scope root = Scope::root();
  Output a, b, add, read;
  Counter2() {
    Scope s0 = root.with_device("/job:ps/task:0"), s1 = root.with_device("/job:ps/task:1");
    a = ops::variable(s0.with_op_name("a"), Shape{}, DType::kFloat32);
    b = ops::variable(s1.with_op_name("b"), Shape{}, DType::kFloat32);
    auto one0 = ops::constant(s0, Tensor::scalar<float>(1.f));
    auto one1 = ops::constant(s1, Tensor::scalar<float>(1.f));
    auto inc_a = ops::assign_add(s0.with_op_name("a_add"), a, one0);
    auto inc_b = ops::assign_add(s1.with_op_name("b_add"), b, one1);
    add = ops::add_n(root.with_op_name("both"), {inc_a, inc_b});
    read = ops::add_n(root.with_op_name("sum"), {ops::identity(s0, a), ops::identity(s1, b)});
  }
  Output init(float v) {
    auto ia = ops::assign(root.with_device("/job:ps/task:0"), a, ops::constant(root.with_device("/job:ps/task:0"), Tensor::scalar<float>(v)));
    auto ib = ops::assign(root.with_device("/job:ps/task:1"), b, ops::constant(root.with_device("/job:ps/task:1"), Tensor::scalar<float>(v)));
    return ops::add_n(root.with_op_name("init"), {ia, ib});
  }
};

TEST(PsReplicationTest, AWorkerFailsOverToTheBackupAndANewcomerIsRedirected) {
  ReplicatedCluster rc(2);
  const std::string& file = rc.file;
  auto start_ps = [&](int i) { return rc.start_ps(i); };
  auto ps0 = start_ps(0);
  auto ps1 = start_ps(1);
  ASSERT_TRUE(ps0->wait_for_output("backup /job:ps/replica:0/task:1 connected", 30s)) << ps0->output();
  ASSERT_TRUE(ps1->wait_for_output("backup /job:ps/replica:0/task:0 connected", 30s)) << ps1->output();
  auto cluster = ClusterSpec::from_file(file);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto server = Server::create(*cluster, TaskId{"host", 0});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NE((*server)->ps_serving(), nullptr);

  Counter2 m;
  auto init = m.init(0.f);
  Session sess(m.root, (*server)->target());
  ASSERT_TRUE(sess.run({init}).ok());
  // Every run that answered OK is an acknowledged update of both variables.
  int64_t acked = 0, failed = 0;
  auto step = [&] {
    auto r = sess.run({m.add});
    r.ok() ? ++acked : ++failed;
    return r.status();
  };
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(step().ok());

  // ps/0 dies. The run that involved it fails (at most one: the one in flight when the
  // connection closed); from then on ps/0's variable is served by its backup on ps/1, with
  // every acknowledged update: no restore, no rollback.
  ps0->signal(SIGKILL);
  ps0->wait(10s);
  Status first = step();
  int64_t ok_after = 0;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (ok_after < 30 && std::chrono::steady_clock::now() < deadline) {
    if (step().ok()) ++ok_after;
  }
  EXPECT_EQ(ok_after, 30) << "no failover; the first run after the kill: " << first;
  const auto aliases = (*server)->ps_serving()->aliases();
  ASSERT_EQ(aliases.size(), 1u);
  EXPECT_EQ(aliases.begin()->first, "/job:ps/replica:0/task:0");
  EXPECT_EQ(aliases.begin()->second, "/job:ps/replica:0/task:1");
  auto sum = sess.run({m.read});
  ASSERT_TRUE(sum.ok()) << sum.status();
  // a and b each hold every acknowledged update; an update applied but not answered (the one
  // in flight at the kill) may be there too (at-least-once, as a retried step).
  const float total = sum->at(0).data<float>()[0];
  EXPECT_GE(total, 2.f * static_cast<float>(acked));
  EXPECT_LE(total, 2.f * static_cast<float>(acked + failed));
  EXPECT_LE(failed, 3) << "failover took more than a few failed runs";

  // ps/0 returns empty and becomes the backup of both variables (the acting primary sends it the
  // whole state). A process that starts now routes ps/0's variables to ps/0, is refused there
  // with the name of the primary, and follows it: one failed run, then its updates count.
  ps0 = start_ps(0);
  auto newcomer = Server::create(*cluster, TaskId{"host", 1});
  ASSERT_TRUE(newcomer.ok()) << newcomer.status();
  Counter2 m2;
  Session late(m2.root, (*newcomer)->target());
  // The acting primary's updates resynchronise ps/0 once its replicator reaches the new process
  // (it may first retry the dead one): until then ps/0 holds no copy of `a`, which the newcomer,
  // reading through ps/0 (reads of a backup copy are served), sees as uninitialized.
  Status synced = Unavailable("not tried");
  for (const auto deadline = std::chrono::steady_clock::now() + 30s;
       !synced.ok() && std::chrono::steady_clock::now() < deadline;) {
    ASSERT_TRUE(step().ok());
    synced = late.run({m2.read}).status();
    if (!synced.ok()) std::this_thread::sleep_for(50ms);  // the replicator reconnects in the background
  }
  ASSERT_TRUE(synced.ok()) << "ps/0 never got the state back: " << synced;
  auto refused = late.run({m2.add});
  ASSERT_FALSE(refused.ok()) << "a backup copy took an update while its primary is alive";
  EXPECT_NE(refused.status().message().find("is a backup copy"), std::string::npos) << refused.status();
  auto accepted = late.run({m2.add});
  EXPECT_TRUE(accepted.ok()) << accepted.status();
  auto both = late.run({m2.read});
  auto mine = sess.run({m.read});
  ASSERT_TRUE(both.ok() && mine.ok()) << both.status() << " " << mine.status();
  EXPECT_EQ(both->at(0).data<float>()[0], mine->at(0).data<float>()[0]) << "two primaries";
  (*newcomer)->stop();
  (*server)->stop();
}

}  // namespace
}  // namespace actorflow
