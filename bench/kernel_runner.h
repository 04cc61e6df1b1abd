// Runs one CPU kernel directly on given inputs, without the executor: the shared harness of the
// kernel benchmarks (bench/kernels.cc, bench/elementwise_ops.cc). Benchmark code: any failure
// prints the status to stderr and exits the process with status 1.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "device/device.h"
#include "device/kernel.h"
#include "graph/ops.h"

namespace actorflow {
namespace bench {

// The CPU kernel of `node` with its inputs. Owns the kernel and the inputs; `dev` and `node`
// are borrowed and must outlive the runner. Not thread-safe: one thread runs it.
struct KernelRunner {
  Device* dev;
  const Node* node;
  std::unique_ptr<OpKernel> kernel;
  std::vector<Tensor> inputs;
  Tensor result;  // output 0 of the last run()

  // Computes the kernel once on `inputs` and keeps output 0 in `result`; exits on an error.
  void run() {
    OpKernelContext ctx(*node, dev, inputs, 0);
    Status s = kernel->compute(ctx);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.to_string().c_str());
      std::exit(1);
    }
    result = ctx.outputs()[0];
  }
};

// A runner for the CPU kernel of `out`'s node on `inputs` (taken by value and owned); exits
// when no CPU kernel can be created for the node.
inline KernelRunner make_runner(Device* dev, const Output& out, std::vector<Tensor> inputs) {
  auto k = KernelRegistry::global().create(*out.node(), "CPU");
  if (!k.ok()) {
    std::fprintf(stderr, "%s\n", k.status().to_string().c_str());
    std::exit(1);
  }
  return KernelRunner{dev, out.node(), std::move(*k), std::move(inputs), {}};
}

}  // namespace bench
}  // namespace actorflow
