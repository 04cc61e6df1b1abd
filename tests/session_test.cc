// Local sessions on actors: placement across two CPU devices, feeds, fetches, concurrent
// steps and every bad input named by the error.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <set>
#include <thread>

#include "actors/master_actor.h"
#include "actors/resources.h"
#include "actors/server.h"
#include "actors/session.h"
#include "graph/ops.h"
#include "graph/ops_variables.h"
#include "actors/server_runtime.h"

namespace actorflow {
namespace {

std::unique_ptr<Server> two_cpu_server() {
  LocalServerOptions o;
  o.cpu_devices = 2;
  auto s = Server::local(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

TEST(SessionTest, SeedMatmulAcrossDevices) {
  auto server = two_cpu_server();
  Scope root = Scope::root();
  auto d0 = root.with_device("/cpu:0");
  auto a = ops::constant(d0, {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
  auto b = ops::constant(d0, {1, 2, 3, 4, 5, 6}, {3, 2}, "b");
  auto c = ops::matmul(d0, a, b);
  auto d1 = root.with_device("/cpu:1");
  auto c1 = ops::matmul(d1, a, b);
  auto sum = ops::add_n(root.with_device("/cpu:0"), {c, c1});
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  auto out = sess.run({c, sum});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].to_string(), "[[22. 28.]\n [49. 64.]]");
  EXPECT_EQ((*out)[1].to_string(), "[[ 44.  56.]\n [ 98. 128.]]");
}

// A tensor fetched twice, also by its two names ("x" and "x:0"), and one from the other device:
// each place gets the value, and the step ran once (the counter variable moved by one).
TEST(SessionTest, DuplicateFetchesGetTheValueAtEachPlace) {
  auto server = two_cpu_server();
  Scope root = Scope::root();
  auto d1 = root.with_device("/cpu:1");
  auto v = ops::variable(d1.with_op_name("v"), Shape{}, DType::kFloat32);
  auto init = ops::assign(d1, v, 0.f);
  auto bump = ops::assign_add(d1, v, 1.f);
  auto twice = ops::mul(root.with_device("/cpu:0"), bump, 2.f);
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({init}).ok());
  auto out = sess.run({bump, twice, bump, twice});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 4u);
  EXPECT_EQ((*out)[0].data<float>()[0], 1.f);
  EXPECT_EQ((*out)[1].data<float>()[0], 2.f);
  EXPECT_EQ((*out)[2].data<float>()[0], 1.f);
  EXPECT_EQ((*out)[3].data<float>()[0], 2.f);
  auto named = sess.run_by_name({}, {bump.node()->name, bump.node()->name + ":0"});
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ((*named)[0].data<float>()[0], 2.f);
  EXPECT_EQ((*named)[1].data<float>()[0], 2.f);
}

TEST(SessionTest, FeedsAndConcurrentSteps) {
  auto server = two_cpu_server();
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{-1, 2}, "x");
  auto y = ops::identity(root.with_device("/cpu:1").with_op_name("y"), x);
  auto z = ops::add(root.with_op_name("z"), y, 1.f);
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  constexpr int kThreads = 4, kSteps = 50;
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kSteps; ++i) {
        float v = static_cast<float>(t * 1000 + i);
        auto out = sess.run({{x, Tensor::from_vector<float>({v, -v}, {1, 2})}}, {z});
        if (out.ok() && (*out)[0].data<float>()[0] == v + 1 && (*out)[0].data<float>()[1] == -v + 1) ++good;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(good.load(), kThreads * kSteps);
}

TEST(SessionTest, BadInputsAreNamedAndServerKeepsServing) {
  auto server = two_cpu_server();
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{2}, "x");
  auto y = ops::identity(root.with_op_name("y"), x);
  ASSERT_TRUE(root.ok());
  Session sess(root, server->target());
  auto r1 = sess.run({{x, Tensor::from_vector<int32_t>({1, 2}, {2})}}, {y});
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find("feed 'x': expected float32, got int32"), std::string::npos) << r1.status();
  auto r2 = sess.run({{x, Tensor::from_vector<float>({1, 2, 3}, {3})}}, {y});
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("feed 'x': expected shape [2], got [3]"), std::string::npos) << r2.status();
  auto r3 = sess.run_by_name({}, {"nope"});
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().message().find("fetch 'nope'"), std::string::npos) << r3.status();
  // A placeholder that is not fed: the error names it.
  auto r4 = sess.run({y});
  ASSERT_FALSE(r4.ok());
  EXPECT_NE(r4.status().message().find("'x'"), std::string::npos) << r4.status();
  // Names are checked when the step is prepared: an output index past INT_MAX (it threw from
  // std::stoi), an output the node does not have, a target nobody defined.
  auto r5 = sess.run_by_name({}, {"y:99999999999"});
  ASSERT_FALSE(r5.ok());
  EXPECT_EQ(r5.status().code(), Code::kInvalidArgument) << r5.status();
  EXPECT_NE(r5.status().message().find("fetch 'y:99999999999'"), std::string::npos) << r5.status();
  auto r6 = sess.prepare({}, {"y:1"}, {});
  ASSERT_FALSE(r6.ok());
  EXPECT_NE(r6.status().message().find("fetch 'y:1': node 'y' (Identity) has 1 outputs"), std::string::npos)
      << r6.status();
  auto r7 = sess.prepare({}, {"y"}, {"train"});
  ASSERT_FALSE(r7.ok());
  EXPECT_EQ(r7.status().code(), Code::kNotFound) << r7.status();
  EXPECT_NE(r7.status().message().find("target 'train'"), std::string::npos) << r7.status();
  auto ok = sess.run({{x, Tensor::from_vector<float>({1, 2}, {2})}}, {y});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].to_string(), "[1. 2.]");
}

TEST(SessionTest, KernelFailureIsNamed) {
  auto server = two_cpu_server();
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape::unknown(), "x");
  auto w = ops::constant(root, {1, 2, 3, 4}, {2, 2}, "w");
  auto m = ops::matmul(root.with_op_name("mm"), x, w);
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  auto r = sess.run({{x, Tensor::from_vector<float>({1, 2, 3}, {1, 3})}}, {m});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("MatMul 'mm'"), std::string::npos) << r.status();
  auto ok = sess.run({{x, Tensor::from_vector<float>({1, 1}, {1, 2})}}, {m});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].to_string(), "[[4. 6.]]");
}

// Server::stop closes the task's resource container for good: a kernel still running then (a
// partition of a failed step on another device, before its abort arrives) gets Cancelled
// instead of spawning a resource actor that nothing stops, which ~Server's wait for every actor
// would wait for forever.
TEST(SessionTest, StoppedServerSpawnsNoResourceActor) {
  auto server = two_cpu_server();
  const std::shared_ptr<ResourceManager> rm = ServerRuntime(*server).resources();
  ASSERT_TRUE(rm);
  auto before = rm->get_or_create("v");
  ASSERT_TRUE(before.ok()) << before.status();
  server->stop();
  EXPECT_TRUE(rm->closed());
  EXPECT_TRUE(rm->all().empty());  // "v" was stopped with the task
  auto after = rm->get_or_create("w");
  if (after.ok()) caf::anon_send_exit(*after, caf::exit_reason::kill);  // so a failure cannot hang ~Server
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), Code::kCancelled) << after.status();
  EXPECT_NE(after.status().message().find("resource 'w'"), std::string::npos) << after.status();
  EXPECT_TRUE(rm->all().empty());
  server.reset();  // returns: every actor of the task ended
}

TEST(SessionTest, UnknownTarget) {
  Scope root = Scope::root();
  Session sess(root, "local://does-not-exist");
  EXPECT_EQ(sess.status().code(), Code::kNotFound);
  // A ported TensorFlow program's target is told what actorflow takes instead.
  Session grpc(root, "grpc://localhost:2222");
  EXPECT_EQ(grpc.status().code(), Code::kNotFound);
  for (const char* part : {"grpc://localhost:2222", "actorflow://host:port", "cluster_file"})
    EXPECT_NE(grpc.status().message().find(part), std::string::npos) << part << ": " << grpc.status();
}

// Partition handles name partitions on devices several processes' masters share (every
// worker's on the ps devices): they carry the task and a random nonce, so two masters never give
// out the same one, even two of one task (a restarted task). They were the address of the
// master's state: alike in two processes with alike heaps (ASan's allocator), and the chief's
// registration then replaced worker/1's partition on the ps.
TEST(SessionTest, PartitionHandlesDifferAcrossMastersOfOneTask) {
  const std::string task = "/job:worker/replica:0/task:1";
  std::set<std::string> seen;
  for (int i = 0; i < 64; ++i) {
    const std::string p = partition_handle_prefix(task);
    EXPECT_EQ(p.rfind("m" + task + ".", 0), 0u) << p;
    EXPECT_EQ(p.size(), 1 + task.size() + 1 + 16) << p;
    EXPECT_TRUE(seen.insert(p).second) << "two masters of one task got " << p;
  }
  EXPECT_NE(partition_handle_prefix("/job:worker/replica:0/task:0").find("task:0."), std::string::npos);
}

// destroy_server_bounded, when CAF's teardown waits on a finished detached actor whose last
// reference is never released (here: a handle leaked on purpose; in the wild about once in 40 TLS
// cluster runs under ASan, cause open): every actor of the server ended, so the process ends with
// the "actors ended" code and a WARNING saying so, after the bound.
// Destroying a Server whose Sessions live: every order ends in errors, never a crash or a hang.
// (A Session holds the server by pointer; each of its calls enters the server's gate, which the
// server closes when it stops, cancelling what the calls inside wait for: actors/server_gate.h.)

// A graph worth a few milliseconds per step, so that a destroying thread meets steps in flight.
struct BusyGraph {
  Scope root = Scope::root();
  Output out;
  BusyGraph() {
    auto x = ops::constant(root, std::vector<float>(256 * 256, 0.5f), {256, 256}, "x");
    Output y = x;
    for (int i = 0; i < 8; ++i) y = ops::matmul(root.with_device(i % 2 ? "/cpu:1" : "/cpu:0"), y, x);
    out = ops::reduce_sum(root, y);
  }
};

TEST(SessionTest, DestroyedServerFailsLaterRunsWithCancelled) {
  auto server = two_cpu_server();
  BusyGraph g;
  ASSERT_TRUE(g.root.ok()) << g.root.status();
  const std::string target = server->target();
  Session sess(g.root, target);
  ASSERT_TRUE(sess.run({g.out}).ok());
  server.reset();
  for (int i = 0; i < 3; ++i) {
    auto r = sess.run({g.out});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kCancelled) << r.status();
    EXPECT_NE(r.status().message().find(target), std::string::npos) << r.status();
  }
  auto p = sess.prepare({}, {g.out.name()});
  EXPECT_EQ(p.status().code(), Code::kCancelled) << p.status();
  EXPECT_FALSE(sess.master());
  // A session made after the server is gone reports it at construction.
  Session late(g.root, target);
  EXPECT_EQ(late.status().code(), Code::kNotFound) << late.status();
}

// Threads inside run() while the server is destroyed: each run returns (an error, or its
// result if it finished first), ~Server returns, in every one of many repetitions.
TEST(SessionTest, DestroyingAServerWhileOtherThreadsRunStepsAnswersThem) {
  for (int rep = 0; rep < 12; ++rep) {
    SCOPED_TRACE(rep);
    auto server = two_cpu_server();
    BusyGraph g;
    Session sess(g.root, server->target());
    ASSERT_TRUE(sess.run({g.out}).ok());
    constexpr int kThreads = 3;
    std::atomic<int> steps{0};
    std::vector<std::future<Status>> last(kThreads);
    for (int t = 0; t < kThreads; ++t)
      last[t] = std::async(std::launch::async, [&] {
        for (;;) {
          auto r = sess.run({g.out});
          if (!r.ok()) return r.status();
          steps.fetch_add(1);
        }
      });
    while (steps.load() < 2 * kThreads + rep) std::this_thread::yield();  // steps are flowing
    auto destroyed = std::async(std::launch::async, [&] { server.reset(); });
    ASSERT_EQ(destroyed.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "~Server hangs";
    for (auto& f : last) {
      ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "a run hangs";
      const Status st = f.get();
      EXPECT_TRUE(st.code() == Code::kCancelled || st.code() == Code::kUnavailable) << st;
    }
  }
}

TEST(SessionDeathTest, BoundedShutdownAfterEveryActorEndedExitsWithItsCode) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto server = two_cpu_server();
        auto leaked = new caf::actor(server->system().spawn<caf::detached>([](caf::event_based_actor* self) {
          self->quit();
          return caf::behavior{};
        }));
        (void)leaked;
        destroy_server_bounded(std::move(server), std::chrono::milliseconds(1000), 3, 0);
        std::exit(5);  // not reached: the actor system's teardown never finishes
      },
      testing::ExitedWithCode(0), "every actor ended, but CAF's actor-system teardown still waits");
}

// And when an actor of the server never ends (a stuck kernel or peer): the timeout code and an ERROR.
TEST(SessionDeathTest, BoundedShutdownWithAStuckActorExitsWithTheTimeoutCode) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto server = two_cpu_server();
        // A detached actor that ignores the exit: it blocks its own thread for good.
        server->system().spawn<caf::detached>([](caf::event_based_actor*) {
          for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
          return caf::behavior{};
        });
        destroy_server_bounded(std::move(server), std::chrono::milliseconds(1000), 3, 0);
        std::exit(5);
      },
      testing::ExitedWithCode(3), "shutdown took longer than 1000 ms");
}

}  // namespace
}  // namespace actorflow
