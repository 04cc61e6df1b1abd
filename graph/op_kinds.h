// What kind of op a node runs, as far as graph-level rules need to know: which ops hold a
// variable's state and which must run where their variable lives. Used by the placer's
// colocation rules (runtime/placer.cc), the training API (train/) and the checkpoint and
// supervisor code that looks for variables. Pure functions; thread-safe.
#pragma once

#include <string>

namespace actorflow {

// True for ops that hold a variable's state: VariableV2, Variable, VarHandleOp.
bool is_variable_op(const std::string& op);
// True for ops that must run where the variable of their first input lives: Assign,
// AssignAdd, AssignSub, Apply*, ResourceApply*, ReadVariable, ReadVariableOp,
// AssignVariableOp, Assign{Add,Sub}VariableOp, Scatter*, ResourceScatter*, IsVariableInitialized.
bool is_ref_consumer_op(const std::string& op);
// True for the runtime's own ops, which the master inserts when it partitions a graph: _Arg,
// _Retval, _Send, _Recv. A client's graph may not hold them (a _Send or _Recv of its own would
// speak into the rendezvous of the task's steps).
bool is_runtime_op(const std::string& op);
// True for ops whose only effect is their outputs, computed from their inputs alone (no state,
// randomness, files or communication) and costly enough that skipping an unread one matters:
// the forward and backward ops of MatMul, convolutions, pooling, BiasAdd and Relu, and
// elementwise arithmetic. rewrite_for_run (graph/subgraph.h) turns such a node into a NoOp when
// nothing reads its outputs.
bool is_pure_compute_op(const std::string& op);

}  // namespace actorflow
