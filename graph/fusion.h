// Kernel fusion on a placed graph (TensorFlow's grappler remapper, for the patterns a training
// step of a CNN has): chains of ops that each read and write a whole activation become one
// kernel that makes a single pass, so the step touches memory fewer times.
//
// The patterns, each only where every node of the chain is assigned to the same CPU device and
// the intermediate tensors have no other consumer (data or control) in the graph:
//
//   1. Conv2D(x, f) -> BiasAdd(., b) [-> Relu]   becomes  _FusedConv2D(x, f, b)   {fused_relu}
//   2. MatMul(a, w) -> BiasAdd(., b) [-> Relu]   becomes  _FusedMatMul(a, w, b)   {fused_relu}
//      The CPU kernels run oneDNN's convolution / matmul with a bias and a ReLU post-op: the
//      bias is added and the ReLU applied while each output block is still in registers.
//   3. MaxPoolGrad(y, p, dp) -> ReluGrad(., y), where y (MaxPool's input) is the same tensor the
//      ReluGrad masks with (the gradient of Relu -> MaxPool), becomes _FusedMaxPoolGrad(y, p, dp):
//      the gradient routed to each window's maximum is kept only where that maximum is > 0,
//      which is ReluGrad's rule applied to the one element it can reach.
//
// The fused node takes the name of the chain's last node, so errors and placement logs keep
// pointing at the user's op, and carries the first node's attributes (strides, padding,
// transposes, the bfloat16 mark). Results equal the unfused chain's: the same float32 sums with
// the bias and the ReLU applied to each final sum (pattern 3: bit for bit).
//
// Pure function; thread-safe.
#pragma once

#include "core/status.h"
#include "graph/graph.h"

namespace actorflow {

// The attribute (bool) of _FusedConv2D and _FusedMatMul that says a ReLU follows the bias.
inline constexpr const char kFusedReluAttr[] = "fused_relu";

// What fuse_cpu_kernels did.
struct FusionStats {
  int conv_bias = 0;        // pattern 1, with or without the ReLU
  int matmul_bias = 0;      // pattern 2
  int relu = 0;             // of those, how many took the ReLU too
  int max_pool_grad = 0;    // pattern 3
};

// Returns a copy of the placed graph `g` (every node's assigned_device set) with the patterns
// above fused; node ids are renumbered, names kept. `stats`, when given, receives the counts.
// Errors: only the graph's own (a cycle), which a placed graph from plan_step does not have.
Result<Graph> fuse_cpu_kernels(const Graph& g, FusionStats* stats = nullptr);

}  // namespace actorflow
