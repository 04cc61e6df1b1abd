// bfloat16 mixed precision on CPUs that compute bfloat16 natively (TensorFlow's
// auto_mixed_precision_onednn_bfloat16 rewrite, and the comparison for Keras' mixed_bfloat16
// policy).
//
// A marked node computes with bfloat16 operands and float32 accumulation: its kernel converts
// its float32 inputs to bfloat16 on the way in and writes float32 outputs, so the graph, its
// variables (the master weights), the gradients that reach the optimizer and every tensor that
// crosses a device are unchanged float32. Only the rounding of the operands differs (8 bits of
// mantissa instead of 24).
//
// Which ops: the ones whose cost is their multiply-adds and for which oneDNN has bfloat16
// kernels: MatMul, Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter. Where the CPU has no
// native bfloat16 (oneDNN's effective ISA below avx512_core_bf16) the mark is ignored and the
// op computes in float32, so a marked graph runs everywhere.
//
// How a graph gets marked: SessionOptions::mixed_bfloat16(true) or a cluster file's
// [server] mixed_precision = "bfloat16" mark each step's placed graph (runtime/step_plan.cc);
// mark_mixed_bfloat16() marks a graph directly; a single node opts in by setting the
// attribute itself.
#pragma once

#include <string>

namespace actorflow {

class Graph;

// The node attribute (bool) that asks a kernel for bfloat16 operands.
inline constexpr const char kMixedBfloat16Attr[] = "_mixed_bfloat16";

// True for the ops whose CPU kernels honour kMixedBfloat16Attr.
bool takes_mixed_bfloat16(const std::string& op);

// Sets kMixedBfloat16Attr on every node of `g` whose op takes it; returns how many nodes it
// marked. Not synchronised: `g` must not be used by another thread meanwhile.
int mark_mixed_bfloat16(Graph& g);

}  // namespace actorflow
