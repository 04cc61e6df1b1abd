// Seed 001's multi-device example: one matmul tower per device, summed with add_n on the
// CPU. Without GPUs the towers run on two CPU devices (/cpu:0 and /cpu:1) of a local
// server; the placement log shows both devices.
//   build/samples/multi_device_addn
#include <iostream>

#include "actorflow/actorflow.h"

namespace af = actorflow;

int main() {
  af::LocalServerOptions opts;
  opts.cpu_devices = 2;
  auto server = af::Server::local(opts);
  if (!server.ok()) {
    std::cerr << "multi_device_addn: " << server.status() << "\n";
    return 1;
  }
  af::Scope root = af::Scope::root();
  std::vector<af::Output> c;
  for (const char* d : {"/cpu:0", "/cpu:1"}) {
    auto s = root.with_device(d);
    auto a = af::ops::constant(s, {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
    auto b = af::ops::constant(s, {1, 2, 3, 4, 5, 6}, {3, 2}, "b");
    c.push_back(af::ops::matmul(s.with_op_name("MatMul"), a, b));
  }
  auto sum = af::ops::add_n(root.with_device("/cpu:0").with_op_name("AddN"), c);
  af::Session sess(root, (*server)->target(), af::SessionOptions{}.log_device_placement(true));
  auto out = sess.run({sum});
  if (!out.ok()) {
    std::cerr << "multi_device_addn: " << out.status() << "\n";
    return 1;
  }
  std::cout << (*out)[0].to_string() << std::endl;
  return 0;
}
