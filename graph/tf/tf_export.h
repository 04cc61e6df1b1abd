// export_graph_def: an actorflow Graph written as TensorFlow's GraphDef (binary or text), the
// inverse of import_graph_def (graph/tf/tf_import.h). docs/interop.md, "GraphDef export", lists
// the ops exported and what is refused.
//
// Every node keeps its name, inputs ("n", "n:i", control inputs "^n"), requested device and
// colocation (`_class: loc:@n`), and gets TensorFlow's op name and the attributes TensorFlow's op
// needs (T, dtype, shape, value, strides, padding, data_format, ksize, transpose_a/b, keep_dims,
// ...). What actorflow holds as an attribute and TensorFlow takes as a tensor input (Reshape's
// shape, Sum's axes, ArgMax's dimension, ConcatV2's axis, Fill's dims and value, ...) becomes a
// Const node named "<node>/<input name>" (made unique with "_1", "_2", ... when taken). Variables
// are reference variables (VariableV2) whose Assign nodes take the variable as input 0, as
// tf.compat.v1's tf.Variable writes them; a variable listed in ExportGraphDefOptions::frozen
// becomes a Const of the given value instead. Dense optimizer updates (ApplyMomentum, ApplyAdam,
// ApplyRMSProp, ApplyAdagrad), whose slots actorflow keeps in the variable actor, are written with
// TensorFlow's slot variables ("w/Momentum", "w/Adam", "w/Adam_1", "beta1_power", ...; the names of
// TensorFlow's checkpoints) created and initialised by the graph's init, as TensorFlow's
// optimizers make them.
//
// An actorflow op with no TensorFlow counterpart (or an attribute value TensorFlow cannot express)
// is an InvalidArgument naming the node and its op, unless for_tensorboard is set.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/tf/tf_import.h"
#include "tensor/tensor.h"

namespace actorflow {

// Options of an export. A plain value type.
struct ExportGraphDefOptions {
  // kBinary (and kAuto): the protobuf wire format (.pb); kText: protobuf text format (.pbtxt).
  GraphDefFormat format = GraphDefFormat::kBinary;
  // true: for TensorBoard's Graphs tab. A node TensorFlow has no op for is kept with actorflow's
  // op name, its inputs and device and no attributes instead of refused (the file then draws but
  // may not import into TensorFlow); every node carries `_output_shapes`; the device written is
  // the assigned one when the graph was placed, else the requested one. Never an error for an op.
  bool for_tensorboard = false;
  // Node names, or tensor names ("n:i"): when not empty, only these nodes and what they need
  // (data and control inputs, transitively, and the variable an Assign or update acts on) are
  // written. A name the graph does not have is NotFound naming it.
  std::vector<std::string> outputs;
  // Variable node name -> its value: that VariableV2 is written as a Const of the value (a frozen
  // graph). The value must have the variable's dtype and a shape compatible with its shape; a name
  // that is not a variable of the graph, and an exported node that assigns or updates a frozen
  // variable, are InvalidArgument naming them.
  std::map<std::string, Tensor> frozen;
  // true: no device strings are written.
  bool clear_devices = false;
};

// `g` as a serialized TensorFlow GraphDef (versions.producer = 2474, TensorFlow 2.21's, so that
// TensorFlow applies no conversions of older graphs). Errors (InvalidArgument / NotFound) name the
// node, its op and the attribute; nothing is returned then. `g` is only read; pure and
// thread-safe as long as nobody changes `g` meanwhile.
Result<std::string> export_graph_def(const Graph& g, const ExportGraphDefOptions& opts = {});

// `g` as a binary GraphDef for TensorBoard (export_graph_def with for_tensorboard: every node
// drawn, with its output shapes and device), as the Supervisor writes it into its event file
// (data/event_file.h: EventFileWriter::add_graph). An error only where a tensor cannot be
// serialized (a GraphDef over 2 GiB). Same thread-safety as export_graph_def.
Result<std::string> tf_graph_def_proto(const Graph& g);

}  // namespace actorflow
