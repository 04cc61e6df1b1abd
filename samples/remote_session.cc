// Seed 000 as its client really is: a process that is not a task of the cluster, like
// tf.Session("grpc://worker7.example.com:2222"). Start the workers with `actorflow node`, then
//   build/samples/remote_session --cluster cluster.toml --target actorflow://localhost:2222
// (--target defaults to /job:worker/task:0's address). The client authenticates with the cluster
// file's secret (and TLS files), ships its graph to that task, whose master places it on the
// cluster: constants and a matmul on /job:worker/task:0, matmul(a,b) + log(100 + c) on
// /job:worker/task:1. It prints what TensorFlow prints:
//   [[ 26.7...  32.8...]
//    [ 53.9...  68.3...]]
#include <CLI/CLI.hpp>

#include <iostream>

#include "actorflow/actorflow.h"

namespace af = actorflow;

int main(int argc, char** argv) {
  CLI::App app{"seed 000's client: a remote session on a cluster it is not part of"};
  std::string cluster_file, target;
  bool log_placement = false;
  app.add_option("--cluster", cluster_file, "the cluster file (its secret authenticates this client)")->required();
  app.add_option("--target", target, "actorflow://host:port of the task to run on (default: worker 0)");
  app.add_flag("--log-device-placement", log_placement, "the task logs the placement");
  CLI11_PARSE(app, argc, argv);

  if (target.empty()) {
    auto cluster = af::ClusterSpec::from_file(cluster_file);
    if (!cluster.ok()) {
      std::cerr << "remote_session: " << cluster.status().message() << "\n";
      return 2;
    }
    auto addr = cluster->task_address(af::TaskId{"worker", 0});
    if (!addr.ok()) {
      std::cerr << "remote_session: " << addr.status().message() << "\n";
      return 2;
    }
    target = "actorflow://" + *addr;
  }
  af::Scope root = af::Scope::root();
  auto w0 = root.with_device("/job:worker/task:0");
  auto a = af::ops::constant(w0, {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
  auto b = af::ops::constant(w0, {1, 2, 3, 4, 5, 6}, {3, 2}, "b");
  auto c = af::ops::matmul(w0, a, b);
  auto w1 = root.with_device("/job:worker/task:1");
  auto d = af::ops::add(w1, af::ops::matmul(w1, a, b), af::ops::log(w1, af::ops::add(w1, 100.f, c)));
  af::Session sess(root, target,
                   af::SessionOptions{}.cluster_file(cluster_file).log_device_placement(log_placement).timeout(
                       std::chrono::seconds(60)));
  if (!sess.status().ok()) {
    std::cerr << "remote_session: " << sess.status() << "\n";
    return 2;
  }
  auto out = sess.run({d});
  if (!out.ok()) {
    std::cerr << "remote_session: " << out.status() << "\n";
    return 1;
  }
  std::cout << (*out)[0].to_string() << std::endl;
  return 0;
}
