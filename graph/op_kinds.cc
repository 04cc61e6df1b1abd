#include "graph/op_kinds.h"

#include <set>

namespace actorflow {

bool is_variable_op(const std::string& op) {
  return op == "VariableV2" || op == "Variable" || op == "VarHandleOp";
}

bool is_ref_consumer_op(const std::string& op) {
  static const std::set<std::string> kOps = {
      "Assign",          "AssignAdd",           "AssignSub",           "ReadVariable",
      "ReadVariableOp",  "AssignVariableOp",    "AssignAddVariableOp", "AssignSubVariableOp",
      "IsVariableInitialized", "VariableShape", "CountUpTo", "SyncAccumulatorControl", "VariableSlots",
      "RestoreVariableSlots"};
  if (kOps.count(op)) return true;
  auto starts = [&](const char* p) { return op.rfind(p, 0) == 0; };
  return starts("Apply") || starts("ResourceApply") || starts("Scatter") || starts("ResourceScatter") ||
         starts("SparseApply") || starts("ResourceSparseApply");
}

bool is_runtime_op(const std::string& op) {
  return op == "_Arg" || op == "_Retval" || op == "_Send" || op == "_Recv";
}

bool is_pure_compute_op(const std::string& op) {
  static const std::set<std::string> kOps = {
      "MatMul",   "Conv2D",      "Conv2DBackpropInput", "Conv2DBackpropFilter", "MaxPool", "MaxPoolGrad",
      "AvgPool",  "AvgPoolGrad", "BiasAdd",             "BiasAddGrad",          "Relu",    "ReluGrad",
      "Add",      "Sub",         "Mul",                 "Div",                  "Neg",     "Square"};
  return kOps.count(op) > 0;
}

}  // namespace actorflow
