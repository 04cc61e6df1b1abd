// import_graph_def: TensorFlow's GraphDef (binary .pb or text .pbtxt, as TensorFlow 1.15 and
// TensorFlow 2.x's tf.compat.v1 write it) read into an actorflow graph. docs/interop.md, "GraphDef
// import", lists every supported TensorFlow op and what is refused.
//
// Each TensorFlow node becomes one actorflow node of the same name (under the scope's name prefix
// and ImportGraphDefOptions::prefix): its op, inputs, control inputs (`^name`), requested device
// and colocation (`_class: loc:@name`) kept. As under TensorFlow's tf.device, the scope's device
// fills what a node's device leaves unset ("/job:worker" under "/job:worker/task:2" requests
// task 2) and is the device of a node that has none. Where actorflow's op takes as an attribute what
// TensorFlow feeds as a tensor (Reshape's shape, Sum's axes, Fill's dims, ...), that input must be
// a constant the importer can compute (Const, Shape of a fully known shape, integer Pack, ConcatV2,
// Slice, Sub, ...); such integer arithmetic is folded into Const nodes of the same names. A shape
// known only at run time (a batch of -1) is a run-time Shape whose known elements the importer
// tracks through StridedSlice and Pack, so that Reshape (one unknown element) and Fill take it.
// A Saver's SaveV2/RestoreV2 run (their file name fed as tf_string_tensor); float16/bfloat16
// constants are widened to float32 for the Casts that read them.
// Variables of both forms become actorflow variables (VariableV2 nodes whose output is the value),
// their reads, assignments and optimizer updates actorflow's ops on that variable.
//
// Anything not supported (an op, an attribute value, a dtype, a function library, a cycle) is an
// InvalidArgument naming the node, its op and attribute, and the file; a file that does not parse
// is InvalidArgument naming the file. An import either adds every node or none.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/scope.h"

namespace actorflow {

// How the bytes of a GraphDef are encoded.
enum class GraphDefFormat {
  kAuto,    // files: text for a name ending in .pbtxt or .txt, else binary; bytes: binary, then text
  kBinary,  // the protobuf wire format (.pb)
  kText,    // protobuf text format (.pbtxt)
};

// Options of an import (TensorFlow's import_graph_def arguments). A plain value type.
struct ImportGraphDefOptions {
  // Prepended as "prefix/" to every imported node's name (after the scope's own prefix); "" = none.
  std::string prefix;
  // TensorFlow tensor names of the GraphDef ("x", "x:0", "split:1") replaced by outputs that exist
  // in the scope's graph: consumers of that tensor read the given output instead. A mapped tensor
  // that the GraphDef does not have is an error.
  std::map<std::string, Output> input_map;
  // true: the GraphDef's device strings are dropped (the scope's device, if any, is requested instead).
  bool clear_devices = false;
  GraphDefFormat format = GraphDefFormat::kAuto;
  // true: TensorFlow's save/restore subgraph is left out (false: SaveV2/RestoreV2 import and run,
  // docs/interop.md "A graph's own Saver"; a sharded Saver's ops are refused): every SaveV2, RestoreV2,
  // MergeV2Checkpoints, SaveSlices and RestoreSlice node, every node that consumes one (data or
  // control, transitively: the restoring Assigns, restore_all), and then every node all of whose
  // consumers were left out (the file name and tensor-name constants). ImportedGraph::dropped
  // lists them. false (the default): SaveV2/RestoreV2 are imported, the other ops an error naming
  // the node.
  bool drop_save_restore = false;
};

// What an import added. Node pointers are owned by the scope's graph and live as long as it does.
// A plain value; not synchronised.
struct ImportedGraph {
  // TensorFlow node name -> the actorflow node made for it (nodes folded to constants included).
  std::map<std::string, Node*> nodes;
  // TensorFlow tensor name ("name:i", output 0 also as "name") -> the actorflow output that holds
  // its value (remapped inputs included).
  std::map<std::string, Output> outputs;
  // Names (as imported) of the variable nodes, VariableV2 and VarHandleOp alike, in GraphDef order.
  std::vector<std::string> variables;
  // TensorFlow node names left out by ImportGraphDefOptions::drop_save_restore, in GraphDef order.
  std::vector<std::string> dropped;

  // The output for TensorFlow tensor name `tf_name` ("x", "x:0", "h:1"); NotFound naming it.
  Result<Output> output(const std::string& tf_name) const;
  // The node made for TensorFlow node `tf_name`, or nullptr.
  Node* node(const std::string& tf_name) const;
};

// A TensorFlow string scalar as an imported graph holds it: actorflow has no string dtype, so a
// DT_STRING constant or placeholder becomes a uint8 vector of the string's bytes. Feed this as a
// Saver's filename tensor ("save/Const:0") to run the graph's own save or restore_all with the
// checkpoint prefix `s`. Returns a new host tensor owned by the caller; pure.
Tensor tf_string_tensor(const std::string& s);

// Imports the GraphDef in `data` into `scope`'s graph. `source` names the data in errors (a file
// name; "<bytes>" when empty). On error nothing is added to the graph and the scope's status is
// unchanged. Not thread-safe (graph construction is single-threaded).
Result<ImportedGraph> import_graph_def(const Scope& scope, const std::string& data,
                                       const ImportGraphDefOptions& opts = {}, const std::string& source = "");
// The same for the file at `path` (read whole, at most 1 GiB; NotFound / errors naming it).
Result<ImportedGraph> import_graph_def_file(const Scope& scope, const std::string& path,
                                            const ImportGraphDefOptions& opts = {});

}  // namespace actorflow
