// GraphDef: the msgpack wire and file form of a Graph (what the master ships to a task
// when it registers a partition).
//
// Layout (msgpack), version 1:
//   { "format": "actorflow.GraphDef", "version": 1,
//     "nodes": [ { "name": str, "op": str,
//                  "inputs": [ "producer:index", ... ],        // always with the index
//                  "control_inputs": [ "producer", ... ],
//                  "requested_device": str, "assigned_device": str,
//                  "colocate_with": [ str, ... ],
//                  "attrs": { name: [ kind, value ] },           // kind below
//                  "output_types": [ uint, ... ],                // DType numeric values
//                  "output_shapes": [ shape, ... ] }, ... ] }
//   shape  = nil (unknown rank) | [ int, ... ]  (-1 = unknown dimension)
//   kinds: "int" int64, "float" float64, "bool", "string" str, "type" uint (DType),
//          "shape" shape, "list_int" [int...], "list_string" [str...],
//          "tensor" { "dtype": uint, "shape": shape, "data": bin (raw row-major bytes) }
// Nodes are stored in id order, so a round trip preserves node ids.
//
// Free functions; thread-safe.
#pragma once

#include <string>

#include "core/status.h"
#include "graph/graph.h"

namespace actorflow {

inline constexpr const char* kGraphDefFormat = "actorflow.GraphDef";
inline constexpr int kGraphDefVersion = 1;

// Serialises every node field of `g`. Preconditions: `g` is well formed (every input and
// control input names a node of `g`, as Graph/NodeBuilder guarantee), tensor attributes
// hold host tensors (Const values always do) of less than 4 GiB. Doubles are always
// written as msgpack float64 (so 2.0 and -0.0 stay doubles).
std::string serialize_graph(const Graph& g);

// Parses bytes written by serialize_graph into an equal Graph. Never crashes on bad input:
// DataLoss for bytes that are not one complete msgpack value (truncated, garbled, trailing
// bytes); InvalidArgument naming the node and field for a wrong format name or version, a
// missing/ill-typed field, an unregistered op, a wrong number of inputs, an input naming a
// missing node or output, a duplicate node name, a bad dtype or shape, tensor bytes that do
// not match dtype and shape, or a cycle.
Result<Graph> deserialize_graph(const std::string& bytes);

}  // namespace actorflow
