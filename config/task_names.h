// Task-name helpers shared by fault plans, the FaultInjector and the runtime's hooks: pure string
// functions over the spellings of a task ("worker/1", "/job:worker/task:1",
// "/job:worker/replica:0/task:1", a device name under it). TaskId (config/cluster_spec.h) parses
// them. Every function here is pure and thread-safe.
#pragma once

#include <string>

#include "core/status.h"

namespace actorflow {

// The task prefix of a device name ("/job:w/replica:0/task:1/device:CPU:0" ->
// "/job:w/replica:0/task:1"); a name without "/device:" is returned unchanged.
std::string task_of_device(const std::string& device_name);

// "worker/1" for a canonical task prefix or a device name under it (the input unchanged when it is
// neither).
std::string short_task_name(const std::string& task_prefix);

// The canonical task prefix ("/job:worker/replica:0/task:1") for "worker/1", "/job:worker/task:1"
// or a full prefix; InvalidArgument (TaskId::parse's message) for anything else.
Result<std::string> canonical_task(const std::string& name);

// A lenient canonical_task for hook arguments: "" stays "", a device name becomes its task's
// canonical prefix, and a name that does not parse is returned unchanged.
std::string normalise_task_name(const std::string& name);

// True for the global step variable's name or output: "global_step", "global_step:0",
// "scope/global_step".
bool is_global_step_name(const std::string& name);

}  // namespace actorflow
