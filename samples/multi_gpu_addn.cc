// Seed 001's multi-GPU example: a matmul tower on /gpu:0 and one on /gpu:1, summed with
// add_n on /cpu:0, with log_device_placement. Without GPUs, soft placement moves the towers
// to the CPU (a log line says so) and the result is the same:
//   [[ 44.  56.]
//    [ 98. 128.]]
//   build/samples/multi_gpu_addn
#include <iostream>

#include "actorflow/actorflow.h"

namespace af = actorflow;

int main() {
  auto server = af::Server::local();
  if (!server.ok()) {
    std::cerr << "multi_gpu_addn: " << server.status() << "\n";
    return 1;
  }
  af::Scope root = af::Scope::root();
  std::vector<af::Output> c;
  for (const char* d : {"/gpu:0", "/gpu:1"}) {
    auto s = root.with_device(d);
    auto a = af::ops::constant(s, {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
    auto b = af::ops::constant(s, {1, 2, 3, 4, 5, 6}, {3, 2}, "b");
    c.push_back(af::ops::matmul(s.with_op_name("MatMul"), a, b));
  }
  auto sum = af::ops::add_n(root.with_device("/cpu:0").with_op_name("AddN"), c);
  af::Session sess(root, (*server)->target(),
                   af::SessionOptions{}.log_device_placement(true).allow_soft_placement(true));
  auto out = sess.run({sum});
  if (!out.ok()) {
    std::cerr << "multi_gpu_addn: " << out.status() << "\n";
    return 1;
  }
  std::cout << (*out)[0].to_string() << std::endl;
  return 0;
}
