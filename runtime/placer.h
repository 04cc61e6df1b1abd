// The placer: assigns every node of a graph to one device of the cluster, after
// TensorFlow's (simple_placer.cc / colocation_graph.cc) rules.
//
// 1. Colocation groups (union-find): a node is grouped with the nodes named in its
//    `colocate_with`; a ref consumer (Assign, AssignAdd, AssignSub, Apply*, ResourceApply*,
//    ReadVariable[Op], Scatter*, ...) whose first input comes from a variable node
//    (VariableV2, Variable, VarHandleOp) is grouped with that variable; a _Retval is grouped
//    with the node it returns. Names in colocate_with that are not in the graph (pruned by
//    rewrite_for_run) are ignored.
// 2. The group's request is the merge of its members' requested_device (a non-empty
//    assigned_device counts as a full request). Members disagreeing on job, replica or task
//    is an error naming both nodes; disagreeing on device type or index is an error too,
//    unless soft placement is on, which then drops the type/index and logs a WARNING.
// 3. The request's unset job is taken from the default device; its unset replica and task
//    too when the job is the default's job (a request for another job picks that job's
//    lowest task). The default's device type and index are a preference only.
// 4. Among the devices matching the request whose type has a kernel for every op of the
//    group (ops without a kernel on any device type — _Arg, _Retval, _Send, _Recv — fit
//    anywhere), the placer takes the default device's type/index if it matches, else the
//    lowest (job, replica, task), GPU before CPU before other types, lowest index. A
//    request without job, type and with no default device follows the first input's group.
// 5. No matching device (e.g. /gpu:0 on a CPU-only task) or no kernel there: with
//    allow_soft_placement the group goes to a device of the same task that has the kernels
//    (the requested type if one exists, else a CPU) and a WARNING says so; without it the
//    result is InvalidArgument "Cannot assign a device for operation 'a': Operation was
//    explicitly assigned to /device:GPU:0 but available devices are [ ... ]". A requested
//    job/replica/task that is not in the cluster is always an error naming the node.
// 6. Before all of this, each request's task goes through PlacementOptions::task_aliases
//    (apply_task_aliases, graph/device_spec.h): a failed-over parameter server's ops are placed
//    on its backup task, their colocation and device part unchanged.
//
// Pure function of its arguments apart from logging; thread-safe for distinct graphs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/graph.h"
#include "graph/op_kinds.h"  // is_variable_op, is_ref_consumer_op (the placer's colocation rules)
#include "graph/placement_options.h"

namespace actorflow {

// Whether a kernel for op `op` exists for devices of type `device_type` ("CPU", "GPU"): all the
// placer needs to know about kernels, passed in so that graph/ does not ask device/'s kernel
// registry itself (the master answers with device/kernel.h's KernelRegistry). Called on the placing thread only.
using KernelAvailability = std::function<bool(const std::string& op, const std::string& device_type)>;

// PlacementOptions (what a client chooses): graph/placement_options.h.
// The client's choices plus what the runtime knows.
struct PlacerOptions : PlacementOptions {
  // Null: every op has a kernel for every device type (placement by requests alone).
  KernelAvailability has_kernel;
};

// One device of the cluster: canonical full name ("/job:w/replica:0/task:1/device:GPU:0")
// and type ("CPU", "GPU"; must equal the name's type).
struct AvailableDevice {
  std::string name;
  std::string type;
};

// Sets node.assigned_device (canonical full name) of every node of `g`. Returns one
// placement line per node, in node-id order, in TensorFlow's format
// "name: (Op): /job:localhost/replica:0/task:0/device:CPU:0"; with log_device_placement
// each line is also logged at INFO. On error `g` is left unchanged. Errors are
// InvalidArgument naming the node (and op) and the device spec at fault: malformed
// requests, unknown tasks, conflicting colocation, missing devices without soft placement,
// and an empty or malformed `devices` list.
Result<std::vector<std::string>> place_graph(Graph& g, const std::vector<AvailableDevice>& devices,
                                             const PlacerOptions& opts);

}  // namespace actorflow
