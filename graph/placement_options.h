// What a client chooses about placement, as plain data: the one declaration SessionOptions,
// RunRequest, ClientRunRequest and the placer's PlacerOptions (runtime/placer.h) all use. Kept
// in graph/ (device request strings are a graph-level notion) so that public headers that
// train/ includes may carry it.
#pragma once

#include <map>
#include <string>

namespace actorflow {

struct PlacementOptions {
  // Lets the placer move an op to another device of its task when the requested one cannot run
  // it (TensorFlow's allow_soft_placement).
  bool allow_soft_placement = true;
  // Logs every op's placement when a graph is placed.
  bool log_device_placement = false;
  // Full or partial device that fills unset request fields, usually the client's task CPU
  // "/job:localhost/replica:0/task:0/device:CPU:0". Empty: no default (the master fills in its
  // task's CPU:0).
  std::string default_device;
  // Task substitutions, task prefix -> task prefix ("/job:ps/replica:0/task:0" ->
  // "/job:ps/replica:0/task:1"): a request naming the key's job and task (replica unset or the
  // key's) is placed as if it named the value's. Set by the runtime when a replicated parameter
  // server failed over to its backup (actors/ps_replication.h, PsServing); empty otherwise.
  std::map<std::string, std::string> task_aliases;
  // Computes MatMul and the convolutions (and their gradients) with bfloat16 operands and float32
  // results on CPUs that have native bfloat16 (graph/mixed_precision.h): each step's placed graph
  // is marked. Not placement, but carried with it to the master that plans the step.
  bool mixed_bfloat16 = false;
  // Fuses Conv2D/MatMul + BiasAdd (+ Relu) and MaxPoolGrad + ReluGrad on CPU devices into single
  // kernels (graph/fusion.h; TensorFlow's grappler remapper). Results equal the unfused ops'.
  // Default true; false runs every op of the graph as written (debugging, comparisons).
  bool fuse_kernels = true;
};

}  // namespace actorflow
