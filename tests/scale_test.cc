// The control plane's per-task cost stays flat (docs/scale.md): in a cluster of
// 16 workers and 2 ps, a worker holds connections only to the ps tasks its graph names and to the
// chief (whose supervisor watches every task), the chief to every other task, a ps to every other
// task (the workers whose graphs name it, the chief, the other ps of those graphs); no worker talks
// to another. A change that made every task connect to every other
// (O(N^2) connections and heartbeats) fails here. The connections are the kernel's (/proc,
// net/proc_sockets.h), not what the code believes it holds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "actorflow/actorflow.h"
#include "core/metrics.h"
#include "net/proc_sockets.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using testing::binary;
using testing::ChildProcess;
using testing::free_port;
using testing::TempDir;
using namespace std::chrono_literals;

constexpr int kWorkers = 16;
constexpr int kPs = 2;

std::string addresses(const std::vector<int>& ports) {
  std::string s;
  for (size_t i = 0; i < ports.size(); ++i) s += (i ? ", \"127.0.0.1:" : "\"127.0.0.1:") + std::to_string(ports[i]) + "\"";
  return s;
}

TEST(ScaleTest, WorkersConnectOnlyToTheParameterServersAndTheChief) {
  TempDir dir;
  std::vector<int> ps_ports, w_ports;
  for (int i = 0; i < kPs; ++i) ps_ports.push_back(free_port());
  for (int i = 0; i < kWorkers; ++i) w_ports.push_back(free_port());
  const std::string file = dir.write("cluster.toml", "[jobs]\nps = [" + addresses(ps_ports) + "]\nworker = [" +
                                                         addresses(w_ports) + "]\n");
  // Every task but the chief (worker 0, this process) is an `actorflow node`.
  std::vector<std::unique_ptr<ChildProcess>> ps, workers;
  auto node = [&](const std::string& job, int task) {
    return ChildProcess::start({binary("actorflow"), "node", "--cluster", file, "--job", job, "--task",
                                std::to_string(task)});
  };
  for (int k = 0; k < kPs; ++k) ps.push_back(node("ps", k));
  for (int i = 1; i < kWorkers; ++i) workers.push_back(node("worker", i));
  for (auto& p : ps) {
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(p->wait_for_output("serving", 60s)) << p->output();
  }
  for (auto& w : workers) {
    ASSERT_NE(w, nullptr);
    ASSERT_TRUE(w->wait_for_output("serving", 60s)) << w->output();
  }
  auto cluster = ClusterSpec::from_file(file);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto chief = Server::create(*cluster, TaskId{"worker", 0});
  ASSERT_TRUE(chief.ok()) << chief.status();

  // The model of bench/scale.cc: one scalar per ps, a step adds 1 to each.
  Scope root = Scope::root();
  std::vector<Output> vars, inits, adds;
  for (int k = 0; k < kPs; ++k) {
    Scope s = root.with_device("/job:ps/task:" + std::to_string(k));
    auto v = ops::variable(s.with_op_name("v" + std::to_string(k)), Shape{}, DType::kFloat32, false);
    vars.push_back(v);
    inits.push_back(ops::assign(s, v, ops::constant(s, Tensor::scalar<float>(0.f))));
    adds.push_back(ops::assign_add(s, v, ops::constant(s, Tensor::scalar<float>(1.f))));
  }
  auto init = ops::no_op(root, inits, "init");
  auto step = ops::no_op(root, adds, "step");
  SupervisorConfig sc;
  sc.is_chief = true;
  sc.init_op = init;
  sc.save_checkpoint_secs = 0;
  sc.save_summaries_secs = 0;
  sc.monitor_tasks = true;
  Supervisor sv(root, sc);
  auto sess = sv.managed_session((*chief)->target());
  ASSERT_TRUE(sess.ok()) << sess.status();
  ASSERT_TRUE((*sess)->run({}, {}, {step}).ok());
  // Every other worker runs one step on its own master (a remote session from here), so its
  // membership connects to the ps tasks its graph names.
  for (int i = 1; i < kWorkers; ++i) {
    Session remote(root, "actorflow://127.0.0.1:" + std::to_string(w_ports[i]),
                   SessionOptions().cluster_file(file).timeout(60s));
    auto r = remote.run({}, {}, {step});
    ASSERT_TRUE(r.ok()) << "worker " << i << ": " << r.status();
  }
  auto total = (*sess)->run(vars);
  ASSERT_TRUE(total.ok()) << total.status();
  for (int k = 0; k < kPs; ++k) EXPECT_EQ((*total)[k].data<float>()[0], static_cast<float>(kWorkers)) << "ps " << k;

  // The chief's supervisor watches every task: wait (bounded) until it holds all of them.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  auto all_up = [&] {
    auto h = sv.task_health();
    if (static_cast<int>(h.size()) != kWorkers + kPs - 1) return false;
    for (const auto& t : h)
      if (!t.up) return false;
    return true;
  };
  while (!all_up()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the chief's supervisor never saw every task up";
    std::this_thread::sleep_for(20ms);  // the supervisor's monitor loop has no event to wait on
  }
  EXPECT_GT(Metrics::global().counter_value("actorflow_heartbeats_sent_total"), 0);

  std::vector<pid_t> pids{getpid()};
  std::map<pid_t, std::string> name{{getpid(), "chief"}};
  std::set<pid_t> ps_pids, worker_pids;
  for (int k = 0; k < kPs; ++k) {
    pids.push_back(ps[k]->pid());
    ps_pids.insert(ps[k]->pid());
    name[ps[k]->pid()] = "ps " + std::to_string(k);
  }
  for (int i = 1; i < kWorkers; ++i) {
    const pid_t p = workers[i - 1]->pid();
    pids.push_back(p);
    worker_pids.insert(p);
    name[p] = "worker " + std::to_string(i);
  }
  auto conns = net::tcp_connections(pids);
  ASSERT_TRUE(conns.ok()) << conns.status();
  auto names = [&](const std::set<pid_t>& s) {
    std::string o;
    for (pid_t p : s) o += name[p] + "; ";
    return o;
  };
  // The chief: every other task.
  EXPECT_EQ((*conns)[getpid()].peers.size(), static_cast<size_t>(kWorkers + kPs - 1))
      << names((*conns)[getpid()].peers);
  // A worker: exactly the ps tasks and the chief, and a bounded number of sockets for them
  // (a control-plane and a data-plane connection per peer, either direction).
  std::set<pid_t> expected = ps_pids;
  expected.insert(getpid());
  for (pid_t w : worker_pids) {
    const auto& c = (*conns)[w];
    EXPECT_EQ(c.peers, expected) << name[w] << " holds connections to: " << names(c.peers);
    EXPECT_LE(c.sockets, 4 * (kPs + 1)) << name[w];
  }
  // A ps: the workers and the chief (each worker's session), and the other ps tasks: the tasks
  // of one graph are told about each other and connect (ServerRuntime::cluster_devices_for), so the ps
  // tasks of a graph form a clique, P^2 in the number of ps and independent of the workers.
  for (pid_t p : ps_pids) {
    std::set<pid_t> others(pids.begin(), pids.end());
    others.erase(p);
    EXPECT_EQ((*conns)[p].peers, others) << name[p] << ": " << names((*conns)[p].peers);
  }

  ASSERT_TRUE(sv.stop().ok());
  sess->reset();
}

}  // namespace
}  // namespace actorflow
