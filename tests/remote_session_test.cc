// Remote client sessions (actors/client_sessions.h, actors/remote_client.h): this test process is
// not a task of the cluster file; `actorflow node` processes are. It trains a variable on the
// cluster's parameter server through a worker's master and checks every value by hand; a client
// with the wrong secret, no cluster file or an address the file lacks is refused with a Status
// naming why; a task that stops answering fails the run in flight within its heartbeat timeout;
// a task that restarts gets the graph again, and the session goes on.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <future>

#include "actorflow/actorflow.h"
#include "actorflow/train.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using testing::binary;
using testing::ChildProcess;
using testing::free_port;
using testing::TempDir;
using namespace std::chrono_literals;

struct RemoteCluster {
  TempDir dir;
  int ps = free_port(), w0 = free_port();
  std::string file;

  RemoteCluster() {
    dir.write("secret", "right-secret-0123456789");
    ::chmod((dir.path() + "/secret").c_str(), 0600);
    file = dir.write("cluster.toml", config("secret"));
  }
  std::string config(const std::string& secret_file) const {
    return "[cluster]\nname = \"remote\"\nsecret_file = \"" + secret_file + "\"\n[jobs]\nps = [\"localhost:" +
           std::to_string(ps) + "\"]\nworker = [\"localhost:" + std::to_string(w0) +
           "\"]\n[server]\nheartbeat_interval_ms = 200\npeer_timeout_ms = 1500\n";
  }
  std::string target() const { return "actorflow://localhost:" + std::to_string(w0); }
  std::unique_ptr<ChildProcess> node(const std::string& job) const {
    return ChildProcess::start({binary("actorflow"), "node", "--cluster", file, "--job", job, "--task", "0"});
  }
};

::testing::AssertionResult started(ChildProcess* p) {
  if (!p) return ::testing::AssertionFailure() << "the process did not start";
  return p->wait_for_output("serving", 20s);
}

// w = [1, 1] on the ps, loss = sum(w * x) on the worker, plain gradient descent (lr 0.5).
struct Model {
  Scope root = Scope::root();
  Output w, x, loss, gs, train_op, init;
  Model() {
    Scope ps = root.with_device("/job:ps/task:0"), worker = root.with_device("/job:worker/task:0");
    w = train::get_variable(ps, "w", Shape{2}, DType::kFloat32, train::constant_initializer(1));
    gs = train::get_or_create_global_step(ps);
    x = ops::placeholder(worker, DType::kFloat32, Shape{2}, "x");
    loss = ops::reduce_sum(worker, ops::mul(worker, w, x));
    train_op = *train::GradientDescentOptimizer(0.5f).minimize(worker, loss, gs);
    init = *train::global_variables_initializer(root);
  }
};

TEST(RemoteSessionTest, AClientOutsideTheClusterTrainsOnItsDevices) {
  RemoteCluster c;
  auto ps = c.node("ps");
  auto w0 = c.node("worker");
  ASSERT_TRUE(started(ps.get())) << ps->output();
  ASSERT_TRUE(started(w0.get())) << w0->output();
  Model m;
  Session sess(m.root, c.target(), SessionOptions().cluster_file(c.file).timeout(30s));
  ASSERT_TRUE(sess.status().ok()) << sess.status();
  ASSERT_TRUE(sess.run({}, {}, {m.init}).ok());
  const Tensor x = Tensor::from_vector<float>({2, 4}, {2});
  // loss = 1*2 + 1*4 = 6; then w = 1 - 0.5 * [2, 4] = [0, -1] and the step is 1.
  auto r = sess.run({{m.x, x}}, {m.loss}, {m.train_op});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ((*r)[0].data<float>()[0], 6.f);
  auto v = sess.run({m.w, m.gs});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FLOAT_EQ((*v)[0].data<float>()[0], 0.f);
  EXPECT_FLOAT_EQ((*v)[0].data<float>()[1], -1.f);
  EXPECT_EQ((*v)[1].data<int64_t>()[0], 1);
  // The second step sees the first's update: loss = 0*2 + -1*4 = -4.
  r = sess.run({{m.x, x}}, {m.loss}, {m.train_op});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ((*r)[0].data<float>()[0], -4.f);
  // The graph grows after the first runs: the task gets the new version.
  auto z = ops::add(m.root.with_device("/job:worker/task:0"), m.w, 10.f);
  auto zr = sess.run({z});
  ASSERT_TRUE(zr.ok()) << zr.status();
  EXPECT_EQ((*zr)[0].to_string(), "[9. 7.]");  // w = [0, -1] - 0.5 * [2, 4] = [-1, -3]
  // A bad feed is the task's error, returned as a Status.
  auto bad = sess.run({{m.x, Tensor::from_vector<float>({1, 2, 3}, {3})}}, {m.loss});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument) << bad.status();
  // A second client session on the same task sees the same variables.
  Session other(m.root, c.target(), SessionOptions().cluster_file(c.file).timeout(30s));
  auto w = other.run({m.w});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FLOAT_EQ((*w)[0].data<float>()[1], -3.f);
  // The task logged the client by its tool name, never a task of the cluster.
  EXPECT_NE(w0->output().find("/job:_client/replica:0/task:0') authenticated"), std::string::npos) << w0->output();
}

TEST(RemoteSessionTest, RefusedWithoutTheSecretTheClusterFileOrAKnownAddress) {
  RemoteCluster c;
  auto w0 = c.node("worker");
  ASSERT_TRUE(started(w0.get())) << w0->output();
  Model m;
  // The same cluster file with another secret: the task refuses the handshake.
  c.dir.write("wrong", "wrong-secret-0123456789");
  ::chmod((c.dir.path() + "/wrong").c_str(), 0600);
  const std::string wrong = c.dir.write("wrong.toml", c.config("wrong"));
  Session intruder(m.root, c.target(), SessionOptions().cluster_file(wrong).timeout(10s));
  ASSERT_TRUE(intruder.status().ok()) << intruder.status();
  auto r = intruder.run({m.w});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnauthenticated) << r.status();
  EXPECT_NE(r.status().message().find("secrets differ"), std::string::npos) << r.status();
  EXPECT_EQ(r.status().message().find("right-secret-0123456789"), std::string::npos) << r.status();
  // No cluster file at all (and none in the environment).
  ASSERT_EQ(std::getenv("ACTORFLOW_CLUSTER"), nullptr);
  Session bare(m.root, c.target());
  EXPECT_EQ(bare.status().code(), Code::kFailedPrecondition) << bare.status();
  EXPECT_NE(bare.status().message().find("cluster file"), std::string::npos) << bare.status();
  EXPECT_EQ(bare.run({m.w}).status().code(), Code::kFailedPrecondition);
  // An address the cluster file does not have.
  Session elsewhere(m.root, "actorflow://localhost:1", SessionOptions().cluster_file(c.file));
  EXPECT_EQ(elsewhere.status().code(), Code::kNotFound) << elsewhere.status();
  EXPECT_NE(elsewhere.status().message().find("localhost:1"), std::string::npos) << elsewhere.status();
  Session malformed(m.root, "actorflow://nohost", SessionOptions().cluster_file(c.file));
  EXPECT_EQ(malformed.status().code(), Code::kInvalidArgument) << malformed.status();
  // The task still serves a client with the secret.
  Scope small = Scope::root();  // only the worker (this cluster's ps is not running)
  auto k = ops::mul(small.with_device("/job:worker/task:0"), ops::constant(small, {3.f}, {1}), 2.f);
  Session good(small, c.target(), SessionOptions().cluster_file(c.file).timeout(10s));
  auto ok = good.run({k});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_FLOAT_EQ((*ok)[0].data<float>()[0], 6.f);
  EXPECT_TRUE(w0->running());
}

TEST(RemoteSessionTest, ASilentTaskFailsTheRunWithinTheHeartbeatTimeoutAndARestartedOneGetsTheGraphAgain) {
  RemoteCluster c;
  auto ps = c.node("ps");
  auto w0 = c.node("worker");
  ASSERT_TRUE(started(ps.get())) << ps->output();
  ASSERT_TRUE(started(w0.get())) << w0->output();
  Model m;
  Session sess(m.root, c.target(), SessionOptions().cluster_file(c.file));  // no step timeout
  ASSERT_TRUE(sess.run({}, {}, {m.init}).ok());
  const Tensor x = Tensor::from_vector<float>({2, 4}, {2});
  ASSERT_TRUE(sess.run({{m.x, x}}, {m.loss}, {m.train_op}).ok());
  // The worker stops answering (SIGSTOP): with no step timeout, only liveness can end the run.
  w0->signal(SIGSTOP);
  ASSERT_TRUE(w0->wait_stopped(10s));
  auto pending = std::async(std::launch::async, [&] { return sess.run({{m.x, x}}, {m.loss}, {m.train_op}); });
  // peer_timeout_ms = 1500: the run must end well within 20 s.
  ASSERT_EQ(pending.wait_for(20s), std::future_status::ready) << "the run hung on a silent task";
  auto r = pending.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("/job:worker/replica:0/task:0"), std::string::npos) << r.status();
  // Replace the worker with a fresh process on the same port: it holds no client sessions, so the
  // client sends the graph again; the variables live on the ps and kept their values.
  w0.reset();  // SIGKILL
  auto w0b = c.node("worker");
  ASSERT_TRUE(started(w0b.get())) << w0b->output();
  auto v = sess.run({m.w, m.gs});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FLOAT_EQ((*v)[0].data<float>()[0], 0.f);
  EXPECT_FLOAT_EQ((*v)[0].data<float>()[1], -1.f);
  EXPECT_EQ((*v)[1].data<int64_t>()[0], 1);
}

}  // namespace
}  // namespace actorflow
