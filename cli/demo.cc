#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <iostream>
#include <mutex>
#include <thread>

#include "actorflow/actorflow.h"
#include "cli/commands.h"
#include "models/mnist_cnn.h"
#include "net/port_reservation.h"

namespace actorflow {
namespace cli {
namespace {

// A loopback port reserved for this process (net/port_reservation.h), or 0 (the cluster file
// check then reports the bad address).
int pick_free_port() {
  auto p = net::reserve_port_for_process();
  return p.ok() ? *p : 0;
}

}  // namespace

// The main job: seed 002's CNN trained on Fashion-MNIST by a local cluster (1 ps and N
// workers, each task a Server with its own actor system, talking over loopback), with the
// seed's progress lines and the final test accuracy.
int run_demo(const DemoOptions& o) {
  const int workers = std::max(1, std::min(3, o.workers));
  const int64_t steps = o.steps > 0 ? o.steps : 1500;
  std::map<std::string, std::vector<std::string>> jobs;
  jobs["ps"] = {"localhost:" + std::to_string(pick_free_port())};
  for (int i = 0; i < workers; ++i) jobs["worker"].push_back("localhost:" + std::to_string(pick_free_port()));
  auto cluster = ClusterSpec::from_jobs(jobs);
  if (!cluster.ok()) {
    std::cerr << "actorflow demo: " << cluster.status().message() << "\n";
    return 1;
  }
  std::cout << "actorflow demo: seed 002's CNN on Fashion-MNIST, 1 ps + " << workers << " workers on loopback, "
            << steps << " global steps (Adam, lr " << o.learning_rate << ", batch 50)" << std::endl;
  auto ps = Server::create(*cluster, TaskId{"ps", 0});
  if (!ps.ok()) {
    std::cerr << "actorflow demo: " << ps.status().message() << "\n";
    return 1;
  }
  std::vector<std::unique_ptr<Server>> servers;
  for (int i = 0; i < workers; ++i) {
    auto s = Server::create(*cluster, TaskId{"worker", i});
    if (!s.ok()) {
      std::cerr << "actorflow demo: " << s.status().message() << "\n";
      return 1;
    }
    servers.push_back(std::move(*s));
  }
  std::mutex out_mu;
  std::vector<Result<CnnTrainResult>> results(static_cast<size_t>(workers), Internal("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < workers; ++i) {
    threads.emplace_back([&, i] {
      CnnOptions mo;
      mo.learning_rate = o.learning_rate;
      mo.worker_device = "/job:worker/task:" + std::to_string(i);
      mo.num_ps = 1;
      CnnTrainOptions to;
      to.data_dir = o.data_dir;
      to.steps = steps;
      to.print_every = 100;
      to.task_index = i;
      to.num_workers = workers;
      to.is_chief = i == 0;
      to.seed = 1;
      to.out = [&](const std::string& line) {
        std::lock_guard<std::mutex> l(out_mu);
        std::cout << line << std::endl;
      };
      results[static_cast<size_t>(i)] = train_mnist_cnn_worker(*servers[static_cast<size_t>(i)], mo, to);
    });
  }
  for (auto& t : threads) t.join();
  int rc = 0;
  for (int i = 0; i < workers; ++i) {
    if (!results[static_cast<size_t>(i)].ok()) {
      std::cerr << "actorflow demo: worker " << i << ": " << results[static_cast<size_t>(i)].status() << "\n";
      rc = 1;
    }
  }
  if (rc == 0) {
    double ips = 0;
    for (auto& r : results) ips += r->images_per_sec;
    std::cout << "Final global step " << results[0]->final_global_step << ", test accuracy "
              << results[0]->test_accuracy << ", " << static_cast<int>(ips) << " images/s over " << workers
              << " workers" << std::endl;
  }
  return rc;
}

}  // namespace cli
}  // namespace actorflow
