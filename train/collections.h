// Internal to train/: the variable records that include/actorflow/train.h's collections read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/scope.h"

namespace actorflow {
namespace train {

// The variables of `g` (VariableV2 and the other variable ops) whose names start with
// `prefix` ("" = all), in node order (creation order); only those recorded trainable (attr
// "_trainable", true when absent) with `trainable_only`. The Outputs point into `g`.
std::vector<Output> graph_variables(Graph& g, const std::string& prefix, bool trainable_only);

// FNV-1a of `name`: a seed that depends only on the name, the same in every build and process
// (std::hash may differ between builds). Pure.
uint64_t name_seed(const std::string& name);

}  // namespace train
}  // namespace actorflow
