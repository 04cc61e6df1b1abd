#include <iostream>

#include "actorflow/actorflow.h"
#include "cli/commands.h"

namespace actorflow {
namespace cli {

// Until distributed training lands, the demo runs seed 001's examples on a local server with
// two CPU devices: the placed matmul and the two-tower add_n.
int run_demo(const DemoOptions&) {
  LocalServerOptions opts;
  opts.cpu_devices = 2;
  auto server = Server::local(opts);
  if (!server.ok()) {
    std::cerr << "actorflow demo: " << server.status() << "\n";
    return 1;
  }
  Scope root = Scope::root();
  std::vector<Output> towers;
  for (const char* d : {"/cpu:0", "/cpu:1"}) {
    auto s = root.with_device(d);
    auto a = ops::constant(s, {1, 2, 3, 4, 5, 6}, {2, 3}, "a");
    auto b = ops::constant(s, {1, 2, 3, 4, 5, 6}, {3, 2}, "b");
    towers.push_back(ops::matmul(s.with_op_name("MatMul"), a, b));
  }
  auto sum = ops::add_n(root.with_device("/cpu:0").with_op_name("AddN"), towers);
  Session sess(root, (*server)->target(), SessionOptions{}.log_device_placement(true));
  auto out = sess.run({towers[0], sum});
  if (!out.ok()) {
    std::cerr << "actorflow demo: " << out.status() << "\n";
    return 1;
  }
  std::cout << "MatMul on /cpu:0:\n" << (*out)[0].to_string() << "\n";
  std::cout << "AddN of both towers:\n" << (*out)[1].to_string() << std::endl;
  return 0;
}

}  // namespace cli
}  // namespace actorflow
