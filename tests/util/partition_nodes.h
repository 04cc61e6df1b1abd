// Test helpers: the partition-style nodes the master's partitioner inserts (runtime/partition.cc),
// for tests that build partitions by hand. Header-only; pure graph construction.
#pragma once

#include <cstdint>
#include <string>

#include "graph/ops.h"

namespace actorflow {
namespace testutil {

// A _Recv of rendezvous key `key` producing a `dtype` tensor of `shape`; returns its output.
inline Output recv_node(const Scope& s, const std::string& name, const std::string& key, DType dtype,
                        const Shape& shape) {
  return NodeBuilder(s.with_op_name(name), "_Recv")
      .attr("tensor_name", std::string(key))
      .attr("dtype", dtype)
      .attr("shape", shape)
      .output();
}
// A _Retval fetching `x` as fetch `index`; the node is owned by the scope's graph.
inline Node* retval_node(const Scope& s, const std::string& name, Output x, int64_t index) {
  return NodeBuilder(s.with_op_name(name), "_Retval").input(x).attr("index", index).finalize();
}
// A _Send of `x` under rendezvous key `key`; the node is owned by the scope's graph.
inline Node* send_node(const Scope& s, const std::string& name, Output x, const std::string& key) {
  return NodeBuilder(s.with_op_name(name), "_Send").input(x).attr("tensor_name", std::string(key)).finalize();
}

}  // namespace testutil
}  // namespace actorflow
