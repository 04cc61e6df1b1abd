// Seed 000: a host and two workers. Start the workers with `actorflow node`, then run
//   build/samples/remote_matmul --cluster cluster.toml --job host --task 0
// Constants and a matmul run on /job:worker/task:0; matmul(a,b) + log(100 + c) on
// /job:worker/task:1; the host prints the result TensorFlow prints:
//   [[ 26.7...  32.8...]
//    [ 53.9...  68.3...]]
#include <CLI/CLI.hpp>

#include <iostream>

#include "actorflow/actorflow.h"

namespace af = actorflow;

int main(int argc, char** argv) {
  CLI::App app{"seed 000: distributed matmul across two workers"};
  std::string cluster_file, job = "host";
  int task = 0;
  bool log_placement = true;
  app.add_option("--cluster", cluster_file, "cluster file")->required();
  app.add_option("--job", job, "this process's job");
  app.add_option("--task", task, "this process's task index");
  app.add_flag("--log-device-placement,!--no-log-device-placement", log_placement, "print the placement");
  CLI11_PARSE(app, argc, argv);

  auto cluster = af::ClusterSpec::from_file(cluster_file);
  if (!cluster.ok()) {
    std::cerr << "remote_matmul: " << cluster.status().message() << "\n";
    return 2;
  }
  auto server = af::Server::create(*cluster, af::TaskId{job, task});
  if (!server.ok()) {
    std::cerr << "remote_matmul: " << server.status().message() << "\n";
    return 1;
  }
  af::Scope root = af::Scope::root();
  auto w0 = root.with_device("/job:worker/task:0");
  auto a = af::ops::constant(w0, {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
  auto b = af::ops::constant(w0, {1, 2, 3, 4, 5, 6}, {3, 2}, "b");
  auto c = af::ops::matmul(w0, a, b);
  auto w1 = root.with_device("/job:worker/task:1");
  auto d = af::ops::add(w1, af::ops::matmul(w1, a, b), af::ops::log(w1, af::ops::add(w1, 100.f, c)));
  af::Session sess(root, (*server)->target(), af::SessionOptions{}.log_device_placement(log_placement));
  auto out = sess.run({d});
  if (!out.ok()) {
    std::cerr << "remote_matmul: " << out.status() << "\n";
    return 1;
  }
  std::cout << (*out)[0].to_string() << std::endl;
  return 0;
}
