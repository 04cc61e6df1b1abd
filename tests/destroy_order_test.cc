// Destroying things in the "wrong" order is safe: a Server destroyed (or a node stopped) while a
// MonitoredTrainingSession, a Supervisor with its periodic saves, or a remote client is alive and
// busy answers each of them with an error within a bound, never hangs and never crashes; what was
// saved before stays readable. (A plain Session under a destroyed Server: SessionTest.Destroyed*.)
#include <gtest/gtest.h>

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "actorflow/actorflow.h"
#include "actorflow/monitored_session.h"
#include "actorflow/train.h"
#include "actors/server.h"
#include "actors/server_runtime.h"
#include "data/checkpoint.h"
#include "tests/util/local_server.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::ChildProcess;
using testing::free_port;
using testing::TempDir;
using testing::vec;

// Bound on every wait below: generous (ASan/TSan builds, a loaded machine), yet far below the
// defaults that a hang would show as (ready_timeout_secs 120, no step deadline).
const auto kBound = std::chrono::milliseconds(static_cast<int64_t>(60000 * testing::slowdown()));

// w = [1] on /cpu:1 (the "ps"), loss = sum(w * x) on /cpu:0, gradient descent with the global step.
struct Model {
  Scope root = Scope::root();
  Output w, x, loss, gs, train_op;
  Model() {
    Scope ps = root.with_device("/cpu:1"), worker = root.with_device("/cpu:0");
    w = train::get_variable(ps, "w", Shape{1}, DType::kFloat32, train::constant_initializer(1));
    gs = train::get_or_create_global_step(ps);
    x = ops::placeholder(worker, DType::kFloat32, Shape{1}, "x");
    loss = ops::reduce_sum(worker, ops::mul(worker, w, x));
    train_op = *train::GradientDescentOptimizer(0.01f).minimize(worker, loss, gs);
  }
};

// Runs `f` on another thread; false when it did not return within kBound (the thread is then
// left running: the test fails, and the process ends with it).
template <class F>
bool returns_in_time(F f) {
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  std::thread([f = std::move(f), done]() mutable {
    f();
    done->set_value();
  }).detach();
  return fut.wait_for(kBound) == std::future_status::ready;
}

// Every checkpoint the chief wrote before the server went away is whole and readable.
void expect_checkpoints_readable(const std::string& dir) {
  const auto paths = CheckpointManager(dir, 0).list();
  EXPECT_FALSE(paths.empty()) << "the chief saved no checkpoint into " << dir;
  for (const auto& p : paths) {
    auto data = read_checkpoint(p);
    EXPECT_TRUE(data.ok()) << p << ": " << data.status();
  }
}

// A chief's MonitoredTrainingSession trains on one thread, its Supervisor saving every 20 ms,
// when the server is destroyed: the step in flight (or the next) fails, close() and the
// destructor return, and the checkpoints written before are intact.
TEST(DestroyOrderTest, AServerDestroyedUnderATrainingMonitoredTrainingSession) {
  for (int rep = 0; rep < 3; ++rep) {
    SCOPED_TRACE(rep);
    auto server = testing::two_device_server();
    TempDir dir;
    Model m;
    train::MonitoredTrainingSession::Options o;
    o.master = server->target();
    o.checkpoint_dir = dir.path();
    o.save_checkpoint_secs = 0.02;
    o.ready_timeout_secs = 5;
    auto sess = train::MonitoredTrainingSession::create(m.root, o);
    ASSERT_TRUE(sess.ok()) << sess.status();
    std::atomic<int> steps{0};
    auto trainer = std::async(std::launch::async, [&]() -> Status {
      for (;;) {
        auto r = (*sess)->run({{m.x, vec({1})}}, {}, {m.train_op});
        if (!r.ok()) return r.status();
        steps.fetch_add(1);
      }
    });
    // Steps are flowing and the periodic saves have written at least one checkpoint.
    const auto deadline = std::chrono::steady_clock::now() + kBound;
    while ((steps.load() < 20 + 10 * rep || CheckpointManager(dir.path(), 0).list().empty()) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ASSERT_FALSE(CheckpointManager(dir.path(), 0).list().empty()) << "no periodic checkpoint within the bound";
    ASSERT_TRUE(returns_in_time([&] { server.reset(); })) << "~Server hangs under a training session";
    ASSERT_EQ(trainer.wait_for(kBound), std::future_status::ready) << "a run hangs after ~Server";
    const Status failed = trainer.get();
    EXPECT_FALSE(failed.ok());
    ASSERT_TRUE(returns_in_time([&] { (void)(*sess)->close(); })) << "close() hangs after ~Server";
    auto after = (*sess)->run({{m.x, vec({1})}}, {}, {m.train_op});
    EXPECT_FALSE(after.ok());
    ASSERT_TRUE(returns_in_time([&] { sess->reset(); })) << "~MonitoredTrainingSession hangs";
    expect_checkpoints_readable(dir.path());
  }
}

// A Supervisor whose chief saves every 20 ms outlives its server: the periodic saves fail
// (logged), stop() returns the failure of its final save instead of hanging, and the managed
// session answers with an error.
TEST(DestroyOrderTest, AServerDestroyedUnderASupervisorsPeriodicSaves) {
  auto server = testing::two_device_server();
  TempDir dir;
  Model m;
  SupervisorConfig cfg;
  cfg.is_chief = true;
  cfg.logdir = dir.path();
  cfg.global_step = m.gs;
  cfg.init_op = *train::global_variables_initializer(m.root);
  cfg.save_checkpoint_secs = 0.02;
  cfg.save_summaries_secs = 0.02;
  auto sv = std::make_unique<Supervisor>(m.root, cfg);
  auto sess = sv->managed_session(server->target());
  ASSERT_TRUE(sess.ok()) << sess.status();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE((*sess)->run({{m.x, vec({1})}}, {}, {m.train_op}).ok());
    sv->summary(i, {{"loss", 1.0 - i}});
  }
  ASSERT_TRUE(sv->save_checkpoint().ok());
  ASSERT_TRUE(returns_in_time([&] { server.reset(); })) << "~Server hangs under a Supervisor";
  EXPECT_FALSE((*sess)->run({{m.x, vec({1})}}, {}, {m.train_op}).ok());
  sv->summary(6, {{"loss", 0.5}});  // still safe: the summary file is the Supervisor's own
  Status stopped;
  ASSERT_TRUE(returns_in_time([&] { stopped = sv->stop(); })) << "Supervisor::stop hangs after ~Server";
  EXPECT_FALSE(stopped.ok()) << "the final checkpoint cannot have been saved without a server";
  ASSERT_TRUE(returns_in_time([&] {
    sess->reset();
    sv.reset();
  })) << "~Session or ~Supervisor hangs after ~Server";
  expect_checkpoints_readable(dir.path());
}

// ---- a remote client of `actorflow node` processes --------------------------------------------

struct NodeCluster {
  TempDir dir;
  int ps = free_port(), w0 = free_port();
  std::string file;
  NodeCluster() {
    dir.write("secret", "destroy-order-secret-0123456789");
    ::chmod((dir.path() + "/secret").c_str(), 0600);
    file = dir.write("cluster.toml", "[cluster]\nname = \"destroy\"\nsecret_file = \"secret\"\n[jobs]\nps = [\"localhost:" +
                                         std::to_string(ps) + "\"]\nworker = [\"localhost:" + std::to_string(w0) +
                                         "\"]\n[server]\nheartbeat_interval_ms = 200\npeer_timeout_ms = 1500\nconnect_timeout_ms = 3000\n");
  }
  std::string target() const { return "actorflow://localhost:" + std::to_string(w0); }
  std::unique_ptr<ChildProcess> node(const std::string& job) const {
    auto p = ChildProcess::start({binary("actorflow"), "node", "--cluster", file, "--job", job, "--task", "0"});
    if (p) {
      EXPECT_TRUE(p->wait_for_output("serving", 30s)) << p->output();
    }
    return p;
  }
};

// The remote model: w = [1, 1] on the ps, loss = sum(w * x) on the worker.
struct RemoteModel {
  Scope root = Scope::root();
  Output w, x, train_op, init;
  RemoteModel() {
    Scope ps = root.with_device("/job:ps/task:0"), worker = root.with_device("/job:worker/task:0");
    w = train::get_variable(ps, "w", Shape{2}, DType::kFloat32, train::constant_initializer(1));
    auto gs = train::get_or_create_global_step(ps);
    x = ops::placeholder(worker, DType::kFloat32, Shape{2}, "x");
    train_op = *train::GradientDescentOptimizer(0.01f).minimize(worker, ops::reduce_sum(worker, ops::mul(worker, w, x)), gs);
    init = *train::global_variables_initializer(root);
  }
};

// The chief's own task in this process (Server::create), the ps an `actorflow node`: the chief's
// Supervisor watches every task through the server's membership (its monitor thread) and saves
// every 20 ms when the server is destroyed under it. The monitor and the saves end with the
// server (the membership they used is gone with it), stop() returns an error, nothing hangs.
TEST(DestroyOrderTest, AClusterServerDestroyedUnderItsChiefsSupervisorAndTaskMonitor) {
  NodeCluster c;
  auto ps = c.node("ps");
  ASSERT_TRUE(ps);
  auto spec = ClusterSpec::from_file(c.file);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto server = Server::create(*spec, TaskId{"worker", 0});
  ASSERT_TRUE(server.ok()) << server.status();
  RemoteModel m;
  TempDir logdir;
  SupervisorConfig cfg;
  cfg.is_chief = true;
  cfg.logdir = logdir.path();
  cfg.init_op = m.init;
  cfg.save_checkpoint_secs = 0.02;
  auto sv = std::make_unique<Supervisor>(m.root, cfg);
  auto sess = sv->managed_session((*server)->target());
  ASSERT_TRUE(sess.ok()) << sess.status();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE((*sess)->run({{m.x, vec({1, 2})}}, {}, {m.train_op}).ok());
  const auto deadline = std::chrono::steady_clock::now() + kBound;
  while (CheckpointManager(logdir.path(), 0).list().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(sv->task_health().size(), 1u);  // the ps
  ASSERT_TRUE(returns_in_time([&] { server->reset(); })) << "~Server hangs under a chief's Supervisor";
  EXPECT_TRUE(sv->should_stop()) << "a Supervisor whose server is gone goes on as if training could";
  Status stopped;
  ASSERT_TRUE(returns_in_time([&] { stopped = sv->stop(); })) << "Supervisor::stop hangs after ~Server";
  EXPECT_EQ(stopped.code(), Code::kCancelled) << stopped;
  ASSERT_TRUE(returns_in_time([&] {
    sess->reset();
    sv.reset();
  }));
  expect_checkpoints_readable(logdir.path());
  EXPECT_TRUE(ps->running()) << ps->output();
}

// A node stopped by SIGTERM (its ~Server) while a remote client runs steps through it: the node
// exits 0 within 2 s of the signal (scaled for sanitizer builds), and the client's step in flight
// and every later one fail with an error instead of waiting — the session has no step deadline,
// so only the closed connection can end them.
TEST(DestroyOrderTest, ANodeStoppedUnderARemoteClientsStepsAnswersItAndExits) {
  NodeCluster c;
  auto ps = c.node("ps");
  auto w0 = c.node("worker");
  ASSERT_TRUE(ps && w0);
  RemoteModel m;
  Session sess(m.root, c.target(), SessionOptions().cluster_file(c.file));
  ASSERT_TRUE(sess.status().ok()) << sess.status();
  ASSERT_TRUE(sess.run({}, {}, {m.init}).ok());
  std::atomic<int> steps{0};
  auto client = std::async(std::launch::async, [&]() -> Status {
    for (;;) {
      auto r = sess.run({{m.x, vec({1, 2})}}, {}, {m.train_op});
      if (!r.ok()) return r.status();
      steps.fetch_add(1);
    }
  });
  while (steps.load() < 20) std::this_thread::yield();
  const auto signalled = std::chrono::steady_clock::now();
  w0->signal(SIGTERM);
  auto code = w0->await_exit(kBound);
  ASSERT_TRUE(code.ok()) << "the worker node did not exit after SIGTERM: " << code.status() << "\n" << w0->output();
  EXPECT_EQ(*code, 0) << w0->output();
  const auto stop_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - signalled).count();
  EXPECT_LT(stop_ms, 2000 * testing::slowdown()) << "the node took " << stop_ms << " ms to stop";
  ASSERT_EQ(client.wait_for(kBound), std::future_status::ready) << "the client's step hangs on a stopped node";
  const Status failed = client.get();
  EXPECT_FALSE(failed.ok());
  // A later step tries to reach the task for the cluster's connect_timeout_ms (3 s here: a
  // restarted task would be found again), then fails saying so.
  auto later = std::async(std::launch::async, [&] { return sess.run({{m.x, vec({1, 2})}}, {}, {m.train_op}).status(); });
  ASSERT_EQ(later.wait_for(kBound), std::future_status::ready) << "a later step hangs on a stopped node";
  const Status later_failed = later.get();
  EXPECT_EQ(later_failed.code(), Code::kUnavailable) << later_failed;
  EXPECT_NE(later_failed.message().find("/job:worker/replica:0/task:0"), std::string::npos) << later_failed;
  // The parameter server, whose peer went away mid-step, still stops cleanly.
  ps->signal(SIGTERM);
  auto ps_code = ps->await_exit(kBound);
  ASSERT_TRUE(ps_code.ok()) << ps_code.status() << "\n" << ps->output();
  EXPECT_EQ(*ps_code, 0) << ps->output();
}

// A parameter server whose device actor's exit notice reaches the middleman late still ends.
// The worker holds a proxy of the ps's device actor after steps, so CAF's BASP broker on the ps
// monitors it; the functor attached here runs before that monitor's notice is sent (CAF sends
// them newest first) and delays it by 300 ms, past the moment await_all_actors_done() returns
// (the actor unregistered before its notices). Without the release wait of ~Server
// (actors/detached_actors.h) the notice reached the stopped broker, which never read it, and
// the teardown waited for the device actor forever (as a ps of a soaked job did about once in
// 60 under ASan).
TEST(DestroyOrderTest, AParameterServerWhoseDeviceActorsExitNoticeArrivesLateStillEnds) {
  NodeCluster c;
  auto spec = ClusterSpec::from_file(c.file);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto ps = Server::create(*spec, TaskId{"ps", 0});
  ASSERT_TRUE(ps.ok()) << ps.status();
  auto worker = Server::create(*spec, TaskId{"worker", 0});
  ASSERT_TRUE(worker.ok()) << worker.status();
  RemoteModel m;
  {
    Session sess(m.root, (*worker)->target(), SessionOptions{});
    ASSERT_TRUE(sess.run({}, {}, {m.init}).ok());
    for (int i = 0; i < 5; ++i) {
      auto r = sess.run({{m.x, vec({1, 2})}}, {}, {m.train_op});
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }
  // The worker's process gets a proxy of the ps's device actor as a remote master does: a run
  // request through the ps's node actor is answered by the device actor itself (here with an
  // error: no such partition). The ping after it on the same connection returns once the ps's
  // broker handled the proxy's announcement, that is once it monitors the device actor.
  {
    auto devs = ServerRuntime(**worker).cluster_devices_for(*m.root.graph(), kBound, {});
    ASSERT_TRUE(devs.ok()) << devs.status();
    const DeviceInfo* ps_dev = nullptr;
    for (const auto& d : *devs)
      if (d.name.find("/job:ps/") != std::string::npos && d.node) ps_dev = &d;
    ASSERT_NE(ps_dev, nullptr);
    ScopedActor self{(*worker)->system()};
    bool answered = false;
    self->request(ps_dev->node, kBound, run_atom::value, ps_dev->name, std::string("no-such-partition"), int64_t{1},
                  std::vector<Tensor>{})
        .receive([&](std::vector<Tensor>&) { answered = true; }, [&](caf::error&) { answered = true; });
    ASSERT_TRUE(answered);
    std::string pong;
    self->request(ps_dev->node, kBound, ping_atom::value).receive([&](std::string& t) { pong = t; }, [](caf::error&) {});
    ASSERT_FALSE(pong.empty());
  }
  std::vector<caf::strong_actor_ptr> devices;
  for (const auto& d : ServerRuntime(**ps).devices()) devices.push_back(caf::actor_cast<caf::strong_actor_ptr>(d.actor));
  ASSERT_FALSE(devices.empty());
  for (auto& a : devices) {
    a->get()->attach_functor([](const caf::error&) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
  }
  devices.clear();  // the test holds no reference to them
  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(returns_in_time([&] { ps->reset(); })) << "~Server waits forever for a device actor";
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(ms, 5000 * testing::slowdown()) << "~Server took " << ms << " ms";
  ASSERT_TRUE(returns_in_time([&] { worker->reset(); }));
}

// The other way round: a remote client destroyed in the middle of its steps leaves the nodes
// serving; a new client goes on from the variables' values.
TEST(DestroyOrderTest, ARemoteClientDestroyedMidStepLeavesTheNodesServing) {
  NodeCluster c;
  auto ps = c.node("ps");
  auto w0 = c.node("worker");
  ASSERT_TRUE(ps && w0);
  {
    RemoteModel m;
    auto sess = std::make_unique<Session>(m.root, c.target(), SessionOptions().cluster_file(c.file));
    ASSERT_TRUE(sess->status().ok()) << sess->status();
    ASSERT_TRUE(sess->run({}, {}, {m.init}).ok());
    std::atomic<int> steps{0};
    std::atomic<bool> gone{false};
    auto client = std::async(std::launch::async, [&]() -> Status {
      for (;;) {
        auto r = sess->run({{m.x, vec({1, 2})}}, {}, {m.train_op});
        if (!r.ok() || gone.load()) return r.status();
        steps.fetch_add(1);
      }
    });
    while (steps.load() < 20) std::this_thread::yield();
    gone.store(true);
    ASSERT_EQ(client.wait_for(kBound), std::future_status::ready);
    EXPECT_TRUE(client.get().ok());
    ASSERT_TRUE(returns_in_time([&] { sess.reset(); })) << "~Session of a remote client hangs";
  }
  EXPECT_TRUE(w0->running()) << w0->output();
  EXPECT_TRUE(ps->running()) << ps->output();
  RemoteModel m;
  Session again(m.root, c.target(), SessionOptions().cluster_file(c.file).timeout(30s));
  ASSERT_TRUE(again.status().ok()) << again.status();
  auto w = again.run({m.w});
  ASSERT_TRUE(w.ok()) << w.status();
  const float w0v = (*w)[0].data<float>()[0], w1v = (*w)[0].data<float>()[1];
  EXPECT_LT(w0v, 1.0f);  // trained: every step moves w by -0.01 * x
  EXPECT_NEAR(1.0f - w1v, 2 * (1.0f - w0v), 1e-4f) << "the two coordinates moved 1:2 as x = [1, 2]";
  ASSERT_TRUE(again.run({{m.x, vec({1, 2})}}, {}, {m.train_op}).ok());
}

// ~Server returns only after every thread of its own actor system has exited, the destructors of
// its thread-local and pthread-key values included. CAF 0.17's detached actors sign off before
// their thread has exited; a program that returned from main() then ran its libraries' exit-time
// destructors beside those threads' key destructors: libcublas's freed a per-thread value the
// exiting thread freed again, the chief's "double free or corruption" at its end
// (docs/changelog.md, 2026-11-28). Here a detached actor's thread holds a pthread-key value whose
// destructor takes 300 ms: without the wait ~Server returns while it runs.
std::atomic<bool> g_probe_destructor_finished{false};
void slow_key_destructor(void*) {
  std::this_thread::sleep_for(300ms);  // the exiting thread's late work this test is about
  g_probe_destructor_finished.store(true);
}

TEST(DestroyOrderTest, TheServerReturnsAfterItsActorSystemsThreadsHaveExited) {
  pthread_key_t key;
  ASSERT_EQ(pthread_key_create(&key, slow_key_destructor), 0);
  {
    auto server = Server::local();
    ASSERT_TRUE(server.ok()) << server.status();
    std::promise<void> set;
    std::future<void> is_set = set.get_future();
    (*server)->system().spawn<caf::detached>([&set, key](caf::event_based_actor* self) -> caf::behavior {
      pthread_setspecific(key, &g_probe_destructor_finished);  // any non-null value
      set.set_value();
      self->quit();
      return {};
    });
    ASSERT_EQ(is_set.wait_for(10s), std::future_status::ready);
    const auto start = std::chrono::steady_clock::now();
    server->reset();
    EXPECT_TRUE(g_probe_destructor_finished.load())
        << "~Server returned while a thread of its actor system was still exiting";
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "the wait is bounded";
  }
  pthread_key_delete(key);
}

}  // namespace
}  // namespace actorflow
