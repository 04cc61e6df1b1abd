// Seed 001: a 2x3 by 3x2 matmul with log_device_placement, on a local server.
//   build/samples/local_matmul
#include <iostream>

#include "actorflow/actorflow.h"

namespace af = actorflow;

int main() {
  auto server = af::Server::local();
  if (!server.ok()) {
    std::cerr << "local_matmul: " << server.status() << "\n";
    return 1;
  }
  af::Scope root = af::Scope::root();
  auto a = af::ops::constant(root, {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
  auto b = af::ops::constant(root, {1, 2, 3, 4, 5, 6}, {3, 2}, "b");
  auto c = af::ops::matmul(root.with_op_name("MatMul"), a, b);
  af::Session sess(root, (*server)->target(), af::SessionOptions{}.log_device_placement(true));
  auto out = sess.run({c});
  if (!out.ok()) {
    std::cerr << "local_matmul: " << out.status() << "\n";
    return 1;
  }
  std::cout << (*out)[0].to_string() << std::endl;
  return 0;
}
