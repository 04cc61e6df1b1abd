// Gradient functions of the differentiable ops (registered with OpRegistry::set_grad).
// Shapes may be partially unknown (a placeholder's batch dim): every gradient works on run-time
// shapes — broadcasting gradients use SumToShape, reductions ExpandDims, reshapes ReshapeLike —
// and gradients() gives each result its x's static shape.
#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops.h"
#include "graph/ops_nn_grad.h"

namespace actorflow {
namespace {

using Outs = std::vector<Output>;

// dy of a reduction (attrs axes, keep_dims) of x, reshaped so that it broadcasts against x:
// the reduced axes come back as size-1 dims (run-time shapes, so unknown dims are fine).
Output keep_dims_of(const Scope& s, const Node& n, const Output& dy) {
  const auto axes = n.attrs.get_or<std::vector<int64_t>>("axes", {});
  const bool keep = n.attrs.get_or<bool>("keep_dims", false);
  // Reducing every axis gives a scalar (or all-ones dims), which broadcasts as it is.
  if (keep || axes.empty()) return dy;
  return ops::expand_dims(s, dy, axes);
}

// dy of a reduction broadcast back to x's shape.
Output unreduce(const Scope& s, const Node& n, const Output& dy) {
  return ops::mul(s, ops::ones_like(s, input_of(s, n, 0)), keep_dims_of(s, n, dy));
}

Status grad_identity(const Scope&, const Node&, const Outs& dy, Outs* dx) {
  dx->push_back(dy[0]);
  return Status::OK();
}

Status grad_add(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::sum_to_shape_of(s, dy[0], input_of(s, n, 0)));
  dx->push_back(ops::sum_to_shape_of(s, dy[0], input_of(s, n, 1)));
  return Status::OK();
}

Status grad_sub(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::sum_to_shape_of(s, dy[0], input_of(s, n, 0)));
  dx->push_back(ops::sum_to_shape_of(s, ops::neg(s, dy[0]), input_of(s, n, 1)));
  return Status::OK();
}

Status grad_mul(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output x = input_of(s, n, 0), y = input_of(s, n, 1);
  dx->push_back(ops::sum_to_shape_of(s, ops::mul(s, dy[0], y), x));
  dx->push_back(ops::sum_to_shape_of(s, ops::mul(s, dy[0], x), y));
  return Status::OK();
}

Status grad_div(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output x = input_of(s, n, 0), y = input_of(s, n, 1);
  dx->push_back(ops::sum_to_shape_of(s, ops::div(s, dy[0], y), x));
  dx->push_back(ops::sum_to_shape_of(s, ops::neg(s, ops::div(s, ops::mul(s, dy[0], x), ops::square(s, y))), y));
  return Status::OK();
}

// Ties go to x, as in TensorFlow (x >= y).
Status grad_maximum(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output x = input_of(s, n, 0), y = input_of(s, n, 1);
  Output my = ops::cast(s, ops::greater(s, y, x), x.dtype());
  Output mx = ops::sub(s, ops::ones_like(s, my), my);
  dx->push_back(ops::sum_to_shape_of(s, ops::mul(s, dy[0], mx), x));
  dx->push_back(ops::sum_to_shape_of(s, ops::mul(s, dy[0], my), y));
  return Status::OK();
}

Status grad_neg(const Scope& s, const Node&, const Outs& dy, Outs* dx) {
  dx->push_back(ops::neg(s, dy[0]));
  return Status::OK();
}

Status grad_square(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::mul(s, dy[0], ops::mul(s, input_of(s, n, 0), 2.f)));
  return Status::OK();
}

Status grad_log(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::div(s, dy[0], input_of(s, n, 0)));
  return Status::OK();
}

Status grad_exp(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::mul(s, dy[0], output_of(s, n, 0)));
  return Status::OK();
}

Status grad_sqrt(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::div(s, ops::mul(s, dy[0], 0.5f), output_of(s, n, 0)));
  return Status::OK();
}

Status grad_add_n(const Scope&, const Node& n, const Outs& dy, Outs* dx) {
  for (size_t i = 0; i < n.inputs.size(); ++i) dx->push_back(dy[0]);
  return Status::OK();
}

Status grad_cast(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output x = input_of(s, n, 0);
  if (!dtype_is_floating(x.dtype())) {
    dx->push_back(Output());
    return Status::OK();
  }
  dx->push_back(ops::cast(s, dy[0], x.dtype()));
  return Status::OK();
}

Status grad_select(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output c = input_of(s, n, 0);
  Output zero = ops::zeros_like(s, dy[0]);
  dx->push_back(Output());
  dx->push_back(ops::sum_to_shape_of(s, ops::select(s, c, dy[0], zero), input_of(s, n, 1)));
  dx->push_back(ops::sum_to_shape_of(s, ops::select(s, c, zero, dy[0]), input_of(s, n, 2)));
  return Status::OK();
}

Status grad_sum(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(unreduce(s, n, dy[0]));
  return Status::OK();
}

Status grad_mean(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output d = unreduce(s, n, dy[0]);
  Output x = input_of(s, n, 0);
  const int64_t nx = x.shape().num_elements(), ny = output_of(s, n, 0).shape().num_elements();
  if (nx > 0 && ny > 0) {
    dx->push_back(ops::mul(s, d, static_cast<float>(ny) / static_cast<float>(nx)));
  } else {
    // Unknown batch: divide by the run-time element counts.
    Output count_x = ops::reduce_sum(s, ops::ones_like(s, x));
    Output count_y = ops::reduce_sum(s, ops::ones_like(s, dy[0]));
    dx->push_back(ops::mul(s, d, ops::div(s, count_y, count_x)));
  }
  return Status::OK();
}

Status grad_max(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  // TensorFlow's rule: the gradient goes to every position equal to the maximum, split evenly
  // between ties.
  Output x = input_of(s, n, 0);
  const auto axes = n.attrs.get_or<std::vector<int64_t>>("axes", {});
  Output yk = keep_dims_of(s, n, output_of(s, n, 0)), dyk = keep_dims_of(s, n, dy[0]);
  Output mask = ops::cast(s, ops::equal(s, x, ops::mul(s, ops::ones_like(s, x), yk)), x.dtype());
  Output count = ops::reduce_sum(s, mask, axes, true);  // ties share the gradient
  dx->push_back(ops::div(s, ops::mul(s, mask, dyk), count));
  return Status::OK();
}

// Reshape, ExpandDims: dy back in x's run-time shape.
Status grad_reshape(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::reshape_like(s, dy[0], input_of(s, n, 0)));
  return Status::OK();
}

// ReshapeLike(x, like): the same, and `like` only lends its shape.
Status grad_reshape_like(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::reshape_like(s, dy[0], input_of(s, n, 0)));
  dx->push_back(Output());
  return Status::OK();
}

Status grad_transpose(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  auto perm = n.attrs.get_or<std::vector<int64_t>>("perm", {});
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  dx->push_back(ops::transpose(s, dy[0], inv));
  return Status::OK();
}

Status grad_matmul(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output a = input_of(s, n, 0), b = input_of(s, n, 1);
  const bool ta = n.attrs.get_or<bool>("transpose_a", false), tb = n.attrs.get_or<bool>("transpose_b", false);
  const Output& g = dy[0];
  if (!ta && !tb) {
    dx->push_back(ops::matmul(s, g, b, {false, true}));
    dx->push_back(ops::matmul(s, a, g, {true, false}));
  } else if (ta && !tb) {
    dx->push_back(ops::matmul(s, b, g, {false, true}));
    dx->push_back(ops::matmul(s, a, g, {false, false}));
  } else if (!ta && tb) {
    dx->push_back(ops::matmul(s, g, b, {false, false}));
    dx->push_back(ops::matmul(s, g, a, {true, false}));
  } else {
    dx->push_back(ops::matmul(s, b, g, {true, true}));
    dx->push_back(ops::matmul(s, g, a, {true, true}));
  }
  return Status::OK();
}

Status grad_relu(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::relu_grad(s, dy[0], output_of(s, n, 0)));
  return Status::OK();
}

Status grad_bias_add(const Scope& s, const Node&, const Outs& dy, Outs* dx) {
  dx->push_back(dy[0]);
  dx->push_back(ops::bias_add_grad(s, dy[0]));
  return Status::OK();
}

// The input gradient of a convolution over `x`: Conv2DBackpropInput with x's sizes, a constant
// when x's shape is fully known, else its run-time shape (then EnsureShape carries x's known
// dims into the static shape at no cost).
Output conv_input_grad(const Scope& s, const Output& x, const Output& filter, const Output& dy,
                       const std::vector<int64_t>& strides, const std::string& padding) {
  if (x.shape().fully_defined()) {
    Tensor sizes = Tensor::from_vector<int64_t>(x.shape().dims(), Shape{x.shape().rank()});
    return ops::conv2d_backprop_input(s, sizes, filter, dy, strides, padding);
  }
  return ops::ensure_shape(s, ops::conv2d_backprop_input(s, ops::shape_of(s, x), filter, dy, strides, padding),
                           x.shape());
}

Status grad_conv2d(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output x = input_of(s, n, 0), f = input_of(s, n, 1);
  const auto strides = n.attrs.get_or<std::vector<int64_t>>("strides", {1, 1, 1, 1});
  const std::string padding = n.attrs.get_or<std::string>("padding", "SAME");
  if (!f.shape().fully_defined()) return InvalidArgument("needs a filter of known shape, got " + f.shape().to_string());
  dx->push_back(conv_input_grad(s, x, f, dy[0], strides, padding));
  dx->push_back(ops::conv2d_backprop_filter(s, x, f.shape().dims(), dy[0], strides, padding));
  return Status::OK();
}

Status grad_max_pool(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  const auto ksize = n.attrs.get_or<std::vector<int64_t>>("ksize", {1, 2, 2, 1});
  const auto strides = n.attrs.get_or<std::vector<int64_t>>("strides", {1, 2, 2, 1});
  const std::string padding = n.attrs.get_or<std::string>("padding", "VALID");
  dx->push_back(ops::max_pool_grad(s, input_of(s, n, 0), output_of(s, n, 0), dy[0], ksize, strides, padding));
  return Status::OK();
}

Status grad_avg_pool(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::avg_pool_grad(s, input_of(s, n, 0), dy[0], n.attrs.get_or<std::vector<int64_t>>("ksize", {}),
                                   n.attrs.get_or<std::vector<int64_t>>("strides", {}),
                                   n.attrs.get_or<std::string>("padding", "VALID")));
  return Status::OK();
}

// AvgPoolGrad is linear in grad; orig_input lends its shape.
Status grad_avg_pool_grad(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(Output());
  dx->push_back(ops::avg_pool(s, dy[0], n.attrs.get_or<std::vector<int64_t>>("ksize", {}),
                              n.attrs.get_or<std::vector<int64_t>>("strides", {}),
                              n.attrs.get_or<std::string>("padding", "VALID")));
  return Status::OK();
}

Status grad_softmax(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output y = output_of(s, n, 0);
  Output dot = ops::reduce_sum(s, ops::mul(s, dy[0], y), {-1}, true);
  dx->push_back(ops::mul(s, ops::sub(s, dy[0], dot), y));
  return Status::OK();
}

// SoftmaxCrossEntropyWithLogits(logits, labels) -> (loss [batch], backprop = softmax - labels).
// d/dlogits = backprop * dloss (+ the softmax Jacobian applied to dbackprop);
// d/dlabels = -log_softmax(logits) * dloss (- dbackprop), as TensorFlow's v2 op.
Status grad_xent(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output logits = input_of(s, n, 0);
  Outs dlogits, dlabels;
  if (dy[0].valid()) {
    Output dl = ops::expand_dims(s, dy[0], {-1});
    dlogits.push_back(ops::mul(s, output_of(s, n, 1), dl));
    Output shifted = ops::sub(s, logits, ops::reduce_max(s, logits, {-1}, true));
    Output log_sum = ops::log(s, ops::reduce_sum(s, ops::exp(s, shifted), {-1}, true));
    dlabels.push_back(ops::mul(s, ops::sub(s, log_sum, shifted), dl));
  }
  if (dy.size() > 1 && dy[1].valid()) {
    Output sm = ops::softmax(s, logits);
    Output dot = ops::reduce_sum(s, ops::mul(s, dy[1], sm), {-1}, true);
    dlogits.push_back(ops::mul(s, ops::sub(s, dy[1], dot), sm));
    dlabels.push_back(ops::neg(s, dy[1]));
  }
  auto total = [&](const Outs& v) { return v.size() == 1 ? v[0] : ops::add_n(s, v); };
  dx->push_back(total(dlogits));
  dx->push_back(total(dlabels));
  return Status::OK();
}

// ZerosLike, OnesLike: the output does not depend on x's values.
Status grad_none(const Scope&, const Node& n, const Outs&, Outs* dx) {
  dx->assign(n.inputs.size(), Output());
  return Status::OK();
}

// SumToShape(x, like): dy (like's shape) broadcast back to x's shape; `like` only lends its shape.
Status grad_sum_to_shape(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::mul(s, ops::ones_like(s, input_of(s, n, 0)), dy[0]));
  dx->push_back(Output());
  return Status::OK();
}

// ReluGrad(gradients, features) = gradients * (features > 0): linear in gradients, piecewise
// constant in features (zero gradient almost everywhere).
Status grad_relu_grad(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::relu_grad(s, dy[0], input_of(s, n, 1)));
  dx->push_back(Output());
  return Status::OK();
}

// BiasAddGrad(out_backprop) sums all but the last dim: dy [C] broadcast back.
Status grad_bias_add_grad(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::mul(s, ops::ones_like(s, input_of(s, n, 0)), dy[0]));
  return Status::OK();
}

// Conv2DBackpropInput(input_sizes, filter, out_backprop) is linear in filter and out_backprop:
// the transposed convolution, whose adjoints are Conv2D and Conv2DBackpropFilter.
Status grad_conv2d_backprop_input(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output f = input_of(s, n, 1), g = input_of(s, n, 2);
  const auto strides = n.attrs.get_or<std::vector<int64_t>>("strides", {1, 1, 1, 1});
  const std::string padding = n.attrs.get_or<std::string>("padding", "SAME");
  if (!f.shape().fully_defined()) return InvalidArgument("needs a filter of known shape, got " + f.shape().to_string());
  dx->push_back(Output());
  dx->push_back(ops::conv2d_backprop_filter(s, dy[0], f.shape().dims(), g, strides, padding));
  dx->push_back(ops::conv2d(s, dy[0], f, strides, padding));
  return Status::OK();
}

// Conv2DBackpropFilter(input, out_backprop), linear in each: d/dinput is the backprop-input of
// out_backprop through dy (as a filter), d/dout_backprop the convolution of input with dy.
Status grad_conv2d_backprop_filter(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output x = input_of(s, n, 0), g = input_of(s, n, 1);
  const auto strides = n.attrs.get_or<std::vector<int64_t>>("strides", {1, 1, 1, 1});
  const std::string padding = n.attrs.get_or<std::string>("padding", "SAME");
  dx->push_back(conv_input_grad(s, x, dy[0], g, strides, padding));
  dx->push_back(ops::conv2d(s, x, dy[0], strides, padding));
  return Status::OK();
}

// MaxPoolGrad(orig_input, orig_output, grad) routes grad to each window's maximum: linear in
// grad (adjoint MaxPoolGradGrad), piecewise constant in orig_input and orig_output.
Status grad_max_pool_grad(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  const auto ksize = n.attrs.get_or<std::vector<int64_t>>("ksize", {1, 2, 2, 1});
  const auto strides = n.attrs.get_or<std::vector<int64_t>>("strides", {1, 2, 2, 1});
  const std::string padding = n.attrs.get_or<std::string>("padding", "VALID");
  dx->push_back(Output());
  dx->push_back(Output());
  dx->push_back(ops::max_pool_grad_grad(s, input_of(s, n, 0), input_of(s, n, 1), dy[0], ksize, strides, padding));
  return Status::OK();
}

// MaxPoolGradGrad picks grad at each window's maximum: its adjoint in grad is MaxPoolGrad.
Status grad_max_pool_grad_grad(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  const auto ksize = n.attrs.get_or<std::vector<int64_t>>("ksize", {1, 2, 2, 1});
  const auto strides = n.attrs.get_or<std::vector<int64_t>>("strides", {1, 2, 2, 1});
  const std::string padding = n.attrs.get_or<std::string>("padding", "VALID");
  dx->push_back(Output());
  dx->push_back(Output());
  dx->push_back(ops::max_pool_grad(s, input_of(s, n, 0), input_of(s, n, 1), dy[0], ksize, strides, padding));
  return Status::OK();
}

}  // namespace

void register_gradients(OpRegistry& r) {
  auto set = [&](const char* op, GradFn f) {
    if (r.lookup(op).ok()) (void)r.set_grad(op, std::move(f));
  };
  set("Identity", grad_identity);
  set("Add", grad_add);
  set("Sub", grad_sub);
  set("Mul", grad_mul);
  set("Div", grad_div);
  set("Maximum", grad_maximum);
  set("Neg", grad_neg);
  set("Square", grad_square);
  set("Log", grad_log);
  set("Exp", grad_exp);
  set("Sqrt", grad_sqrt);
  set("AddN", grad_add_n);
  set("Cast", grad_cast);
  set("Select", grad_select);
  set("Sum", grad_sum);
  set("Mean", grad_mean);
  set("Max", grad_max);
  set("Reshape", grad_reshape);
  set("Transpose", grad_transpose);
  set("MatMul", grad_matmul);
  set("Relu", grad_relu);
  set("BiasAdd", grad_bias_add);
  set("Conv2D", grad_conv2d);
  set("MaxPool", grad_max_pool);
  set("AvgPool", grad_avg_pool);
  set("AvgPoolGrad", grad_avg_pool_grad);
  set("Softmax", grad_softmax);
  set("SoftmaxCrossEntropyWithLogits", grad_xent);
  set("ZerosLike", grad_none);
  set("OnesLike", grad_none);
  set("SumToShape", grad_sum_to_shape);
  set("ExpandDims", grad_reshape);
  set("ReshapeLike", grad_reshape_like);
  set("ReluGrad", grad_relu_grad);
  set("BiasAddGrad", grad_bias_add_grad);
  set("Conv2DBackpropInput", grad_conv2d_backprop_input);
  set("Conv2DBackpropFilter", grad_conv2d_backprop_filter);
  set("MaxPoolGrad", grad_max_pool_grad);
  set("MaxPoolGradGrad", grad_max_pool_grad_grad);
}

}  // namespace actorflow
