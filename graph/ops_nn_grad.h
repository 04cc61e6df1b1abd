// Builders of the backward neural-network ops, for gradient functions (graph/ops_nn.cc).
// Same conventions as graph/ops.h: each adds one node, infers its shape at once and returns
// its Output; on error the scope records "<Op> '<name>': <why>" and an invalid Output is
// returned. Not thread-safe (graph construction is single-threaded). All are float32 on CPU.
#pragma once

#include <string>
#include <vector>

#include "graph/scope.h"

namespace actorflow {
namespace ops {

// dL/dfeatures of Relu: gradients where features > 0, else 0. Same shape as `features`.
Output relu_grad(const Scope& s, Input gradients, Input features);

// dL/dbias of BiasAdd: `out_backprop` (rank >= 2) summed over every dimension but the last.
// Result shape [C].
Output bias_add_grad(const Scope& s, Input out_backprop);

// dL/dinput of Conv2D, as TensorFlow's op: `input_sizes` is a 1-D int32 or int64 tensor of 4
// elements holding the NHWC input shape; it is an input (not an attribute) so that an unknown
// batch dimension can be supplied at run time, e.g. ops::shape_of(s, x). A constant
// (Input({50, 14, 14, 32})) gives a fully inferred output shape; otherwise only batch and depth
// are inferred. `filter` is HWIO, `out_backprop` NHWC; strides and padding as the forward op.
Output conv2d_backprop_input(const Scope& s, Input input_sizes, Input filter, Input out_backprop,
                             const std::vector<int64_t>& strides, const std::string& padding);

// dL/dfilter of Conv2D. `filter_sizes` is the HWIO filter shape (an attribute: filters are
// variables of fully known shape). Node inputs are (input, out_backprop).
Output conv2d_backprop_filter(const Scope& s, Input input, const std::vector<int64_t>& filter_sizes,
                              Input out_backprop, const std::vector<int64_t>& strides, const std::string& padding);

// dL/dinput of MaxPool: `grad` (pooled shape) routed to the first maximum of each window of
// `orig_input`. `orig_output` is the forward result (checked for shape only). Same ksize,
// strides and padding attributes as the forward op. Result shape: orig_input's.
Output max_pool_grad(const Scope& s, Input orig_input, Input orig_output, Input grad,
                     const std::vector<int64_t>& ksize, const std::vector<int64_t>& strides,
                     const std::string& padding);

// Gradient of MaxPoolGrad with respect to its `grad` input: for each pooled position, `grad`
// (orig_input's shape) at the first maximum of the window of `orig_input` (the position
// MaxPoolGrad routes to). Result shape: orig_output's. CPU only.
Output max_pool_grad_grad(const Scope& s, Input orig_input, Input orig_output, Input grad,
                          const std::vector<int64_t>& ksize, const std::vector<int64_t>& strides,
                          const std::string& padding);

}  // namespace ops
}  // namespace actorflow
