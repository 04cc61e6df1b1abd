// Gradient functions of the differentiable ops (registered with OpRegistry::set_grad).
// Shapes may be partially unknown (a placeholder's batch dim): broadcasting gradients use the
// run-time SumToShape op and reductions rebuild shapes with one -1.
#include <algorithm>

#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops.h"
#include "graph/ops_nn_grad.h"

namespace actorflow {
namespace {

using Outs = std::vector<Output>;

Graph* graph_of(const Scope& s) { return s.graph(); }

Output input_of(const Scope& s, const Node& n, int i) {
  const Endpoint& e = n.inputs[static_cast<size_t>(i)];
  return Output(graph_of(s)->node(e.node), e.index);
}

Output output_of(const Scope& s, const Node& n, int i) { return Output(graph_of(s)->node(n.id), i); }

// The static shape of `x` with the reduced axes set to 1, as a reshape target (one -1 allowed).
Result<std::vector<int64_t>> keep_dims_shape(const Shape& x, std::vector<int64_t> axes) {
  if (x.unknown_rank()) return InvalidArgument("gradient of a reduction needs the input's rank");
  const int r = x.rank();
  if (axes.empty())
    for (int i = 0; i < r; ++i) axes.push_back(i);
  std::vector<int64_t> out(static_cast<size_t>(r));
  int unknown = 0;
  for (int i = 0; i < r; ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end() ||
                   std::find(axes.begin(), axes.end(), i - r) != axes.end();
    out[static_cast<size_t>(i)] = reduced ? 1 : x.dim(i);
    if (out[static_cast<size_t>(i)] < 0) {
      out[static_cast<size_t>(i)] = -1;
      ++unknown;
    }
  }
  if (unknown > 1) return InvalidArgument("gradient of a reduction over an input with several unknown dims");
  return out;
}

// dy of a reduction broadcast back to x's shape.
Result<Output> unreduce(const Scope& s, const Node& n, const Output& dy) {
  Output x = input_of(s, n, 0);
  const auto axes = n.attrs.get_or<std::vector<int64_t>>("axes", {});
  const bool keep = n.attrs.get_or<bool>("keep_dims", false);
  Output d = dy;
  if (!keep) {
    AF_ASSIGN_OR_RETURN(auto shape, keep_dims_shape(x.shape(), axes));
    d = ops::reshape(s, dy, shape);
  }
  return ops::mul(s, ops::ones_like(s, x), d);
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

Status grad_maximum(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output x = input_of(s, n, 0), y = input_of(s, n, 1);
  Output mx = ops::cast(s, ops::greater(s, x, y), x.dtype());
  Output my = ops::sub(s, ops::ones_like(s, mx), mx);
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
  AF_ASSIGN_OR_RETURN(Output d, unreduce(s, n, dy[0]));
  dx->push_back(d);
  return Status::OK();
}

Status grad_mean(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  AF_ASSIGN_OR_RETURN(Output d, unreduce(s, n, dy[0]));
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
  Output x = input_of(s, n, 0);
  Output y = output_of(s, n, 0);
  const auto axes = n.attrs.get_or<std::vector<int64_t>>("axes", {});
  const bool keep = n.attrs.get_or<bool>("keep_dims", false);
  Output yk = y, dyk = dy[0];
  if (!keep) {
    AF_ASSIGN_OR_RETURN(auto shape, keep_dims_shape(x.shape(), axes));
    yk = ops::reshape(s, y, shape);
    dyk = ops::reshape(s, dy[0], shape);
  }
  Output mask = ops::cast(s, ops::equal(s, x, ops::mul(s, ops::ones_like(s, x), yk)), x.dtype());
  Output count = ops::reduce_sum(s, mask, axes, true);  // ties share the gradient
  dx->push_back(ops::div(s, ops::mul(s, mask, dyk), count));
  return Status::OK();
}

Status grad_reshape(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output x = input_of(s, n, 0);
  if (x.shape().unknown_rank()) return InvalidArgument("gradient of Reshape needs the input's rank");
  std::vector<int64_t> shape;
  int unknown = 0;
  for (int64_t d : x.shape().dims()) {
    shape.push_back(d < 0 ? -1 : d);
    unknown += d < 0;
  }
  if (unknown > 1) return InvalidArgument("gradient of Reshape: input has several unknown dims");
  dx->push_back(ops::reshape(s, dy[0], shape));
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

Status grad_conv2d(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output x = input_of(s, n, 0), f = input_of(s, n, 1);
  const auto strides = n.attrs.get_or<std::vector<int64_t>>("strides", {1, 1, 1, 1});
  const std::string padding = n.attrs.get_or<std::string>("padding", "SAME");
  if (!f.shape().fully_defined()) return InvalidArgument("gradient of Conv2D needs a filter of known shape");
  dx->push_back(ops::conv2d_backprop_input(s, ops::shape_of(s, x), f, dy[0], strides, padding));
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

Status grad_softmax(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output y = output_of(s, n, 0);
  Output dot = ops::reduce_sum(s, ops::mul(s, dy[0], y), {-1}, true);
  dx->push_back(ops::mul(s, ops::sub(s, dy[0], dot), y));
  return Status::OK();
}

Status grad_xent(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  // d loss / d logits = backprop * dloss (per row); labels get no gradient here.
  if (!dy[0].valid()) {
    dx->push_back(Output());
    dx->push_back(Output());
    return Status::OK();
  }
  Output backprop = output_of(s, n, 1);
  Output dl = ops::reshape(s, dy[0], {-1, 1});
  dx->push_back(ops::mul(s, backprop, dl));
  dx->push_back(Output());
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
  set("Softmax", grad_softmax);
  set("SoftmaxCrossEntropyWithLogits", grad_xent);
}

}  // namespace actorflow
