// The partitioner: splits a placed graph into one graph per device and replaces every
// cross-device edge by a _Send/_Recv pair (TensorFlow's graph_partition.cc).
//
// Pure function of its arguments; thread-safe.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "core/status.h"
#include "graph/graph.h"

namespace actorflow {

struct PartitionOptions {
  // The rendezvous key (attr "tensor_name" of both halves of a pair) for the tensor `edge`
  // sent from src_dev to dst_dev. `edge` is "node:index" for a data edge and "^node" for a
  // control edge. Empty: the default, RendezvousKey::make(src_dev, incarnation_of(src_dev),
  // dst_dev, edge)'s wire form (device/rendezvous_key.h), built once here. Keys must be unique
  // per (src_dev, dst_dev, edge); the runtime adds the step id. A custom key that is no
  // RendezvousKey's wire form cannot be sent by the runtime (its _Send's executor refuses it).
  std::function<std::string(const std::string& src_dev, const std::string& dst_dev, const std::string& edge)> key_fn;
  // The incarnation of the task of device `device` (what its keys carry as the sender's); null
  // or 0: not known (keys without an incarnation). Used by the default keys only.
  std::function<uint64_t(const std::string& device)> incarnation_of;
};

// The default key without an incarnation: src_dev + ";" + dst_dev + ";" + edge.
std::string default_rendezvous_key(const std::string& src_dev, const std::string& dst_dev, const std::string& edge);

// Splits `placed` (every node has a non-empty assigned_device) into one graph per device
// that has nodes, keyed by the device name. Inside a partition nodes keep their names,
// attributes, devices and relative order; data and control edges between nodes of the
// same device are kept.
//
// A data edge from endpoint e (on device S) to a consumer on device D != S becomes
//   S: `_Send` "_send_<node>_<index>_to_<D>" with input e and attrs tensor_name,
//      send_device=S, recv_device=D, client_terminated=false;
//   D: `_Recv` "_recv_<node>_<index>_from_<S>" with attrs tensor_name, send_device,
//      recv_device, client_terminated=false, dtype and shape of e, feeding the consumer;
// one pair per (e, D), shared by every consumer of e on D (names get "_1", ... when they
// would collide with another node's name; non-alphanumeric device characters become '_').
// A control edge from node n on S to a node on D becomes, once per (n, D): a scalar float
// `Const` "_ctrl_<n>" on S with a control input from n, a _Send of it, and on D a _Recv of
// it that is a control input of every consumer of n on D. Edge key of that pair: "^n".
//
// Errors: InvalidArgument naming the node when a node has no assigned_device or an input
// refers to a missing node or output; InvalidArgument naming the edge when its default key
// cannot be built (a device or node name holding ';' or a control character, a key over
// RendezvousKey::kMaxWireBytes).
Result<std::map<std::string, Graph>> partition_graph(const Graph& placed, const PartitionOptions& opts = {});

}  // namespace actorflow
