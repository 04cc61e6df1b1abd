// Training throughput of the seed CNN: one worker next to PyTorch (same model, batch and
// optimizer, one thread, measured in the same run by bench/torch_cnn.py with Debian's
// python3-torch; skipped with a message when it is not installed), and the aggregate images/s
// of 1, 2 and 3 workers with one ps, all tasks in this process on loopback.
//   build/bench/training [steps_per_worker=60]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <thread>

#include "actorflow/actorflow.h"
#include "core/logging.h"
#include "models/mnist_cnn.h"
#include "net/port_reservation.h"

namespace af = actorflow;

namespace {

// A loopback port reserved for this process (net/port_reservation.h), or 0 (the cluster file
// check then reports the bad address).
int free_port() {
  auto p = af::net::reserve_port_for_process();
  return p.ok() ? *p : 0;
}

// Aggregate images/s of `workers` workers each doing `steps` local steps.
double run_cluster(int workers, int64_t steps) {
  std::map<std::string, std::vector<std::string>> jobs;
  jobs["ps"] = {"localhost:" + std::to_string(free_port())};
  for (int i = 0; i < workers; ++i) jobs["worker"].push_back("localhost:" + std::to_string(free_port()));
  auto cluster = af::ClusterSpec::from_jobs(jobs);
  auto ps = af::Server::create(*cluster, af::TaskId{"ps", 0});
  if (!ps.ok()) { std::cerr << ps.status() << "\n"; return 0; }
  std::vector<std::unique_ptr<af::Server>> servers;
  for (int i = 0; i < workers; ++i) servers.push_back(std::move(*af::Server::create(*cluster, af::TaskId{"worker", i})));
  std::vector<double> ips(static_cast<size_t>(workers), 0);
  std::vector<std::thread> th;
  for (int i = 0; i < workers; ++i) {
    th.emplace_back([&, i] {
      af::CnnOptions mo;
      mo.worker_device = "/job:worker/task:" + std::to_string(i);
      af::CnnTrainOptions to;
      to.steps = steps * workers;  // global steps: each worker does about `steps`
      to.print_every = 0;
      to.task_index = i;
      to.is_chief = i == 0;
      to.out = [](const std::string&) {};
      auto r = af::train_mnist_cnn_worker(*servers[static_cast<size_t>(i)], mo, to);
      if (r.ok()) ips[static_cast<size_t>(i)] = r->images_per_sec;
      else std::cerr << "worker " << i << ": " << r.status() << "\n";
    });
  }
  for (auto& t : th) t.join();
  double sum = 0;
  for (double v : ips) sum += v;
  return sum;
}

double torch_images_per_sec(int steps) {
  if (access("/usr/bin/python3", X_OK) != 0) return -1;
  const std::string cmd = "/usr/bin/python3 " + std::string(AF_SOURCE_DIR) + "/bench/torch_cnn.py --bench-steps " +
                          std::to_string(steps) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char line[512];
  double v = -1;
  while (fgets(line, sizeof line, p)) {
    if (std::sscanf(line, "torch_images_per_sec %lf", &v) == 1) break;
    if (std::string(line).find("No module named 'torch'") != std::string::npos) v = -2;
  }
  pclose(p);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 60;
  setenv("AF_MIN_LOG_LEVEL", "1", 0);
  af::set_min_log_level(af::LogLevel::WARNING);
  std::printf("seed CNN, batch 50, Adam; %lld steps per worker; oneDNN one thread per kernel\n",
              static_cast<long long>(steps));
  const double torch = torch_images_per_sec(static_cast<int>(steps));
  double one = 0;
  for (int w = 1; w <= 3; ++w) {
    const double ips = run_cluster(w, steps);
    if (w == 1) one = ips;
    std::printf("workers %d (1 ps): %8.1f images/s aggregate  (%.2fx one worker)\n", w, ips, one > 0 ? ips / one : 0);
  }
  if (torch > 0)
    std::printf("PyTorch one thread: %8.1f images/s; actorflow one worker / PyTorch = %.2f\n", torch, one / torch);
  else
    std::printf("PyTorch baseline skipped: /usr/bin/python3 with python3-torch is not installed\n");
  return 0;
}
