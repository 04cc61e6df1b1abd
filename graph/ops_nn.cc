// Neural-network ops: shape functions and builders of MatMul, Relu, BiasAdd, Conv2D, MaxPool,
// Softmax, SoftmaxCrossEntropyWithLogits, and of the backward ops their gradients use
// (ReluGrad, BiasAddGrad, Conv2DBackpropInput, Conv2DBackpropFilter, MaxPoolGrad).
// Layouts follow TensorFlow: NHWC activations, HWIO filters.
#include <string>
#include <vector>

#include "graph/op_registry.h"
#include "graph/ops.h"
#include "graph/ops_nn_grad.h"
#include "graph/ops_nn_util.h"

namespace actorflow {
namespace {

std::string dims_string(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// InvalidArgument unless `s` has rank `rank` (an unknown rank passes).
Status check_rank(const Shape& s, int rank, const std::string& what) {
  if (s.unknown_rank() || s.rank() == rank) return Status::OK();
  return InvalidArgument(what + " must be rank " + std::to_string(rank) + ", got shape " + s.to_string());
}

Status check_min_rank(const Shape& s, int rank, const std::string& what) {
  if (s.unknown_rank() || s.rank() >= rank) return Status::OK();
  return InvalidArgument(what + " must be at least rank " + std::to_string(rank) + ", got shape " + s.to_string());
}

Status check_floating(DType t, const std::string& what) {
  if (dtype_is_floating(t)) return Status::OK();
  return InvalidArgument(what + " must be float32 or float64, got " + dtype_name(t));
}

Status check_same_type(DType a, DType b, const std::string& wa, const std::string& wb) {
  if (a == b) return Status::OK();
  return InvalidArgument(wa + " is " + dtype_name(a) + " but " + wb + " is " + dtype_name(b));
}

// Dimension i of `s`, or -1 when the rank or the dimension is unknown.
int64_t dim_or_unknown(const Shape& s, int i) {
  if (s.unknown_rank() || i >= s.rank()) return -1;
  return s.dim(i);
}

// The merge of two compatible shapes (known dims win); InvalidArgument when incompatible.
Result<Shape> merge_shapes(const Shape& a, const Shape& b, const std::string& wa, const std::string& wb) {
  if (a.unknown_rank()) return b;
  if (b.unknown_rank()) return a;
  if (!a.compatible_with(b))
    return InvalidArgument(wa + " " + a.to_string() + " and " + wb + " " + b.to_string() +
                           " must have the same shape");
  std::vector<int64_t> d = a.dims();
  for (int i = 0; i < a.rank(); ++i)
    if (d[static_cast<size_t>(i)] < 0) d[static_cast<size_t>(i)] = b.dim(i);
  return Shape(d);
}

// Output shape of a 2-D window op (Conv2D, MaxPool) over NHWC `in` with window (kh, kw).
Result<Shape> window_output(const Shape& in, int64_t kh, int64_t kw, const std::vector<int64_t>& strides,
                            Padding p, int64_t out_channels) {
  AF_ASSIGN_OR_RETURN(WindowDim h, compute_window(dim_or_unknown(in, 1), kh, strides[1], p, "height"));
  AF_ASSIGN_OR_RETURN(WindowDim w, compute_window(dim_or_unknown(in, 2), kw, strides[2], p, "width"));
  return Shape{dim_or_unknown(in, 0), h.out, w.out, out_channels};
}

// Checks the NHWC input against the HWIO filter and returns the Conv2D output shape.
Result<Shape> conv2d_output(const Shape& input, const Shape& filter, const AttrMap& attrs) {
  AF_RETURN_IF_ERROR(check_rank(input, 4, "input"));
  AF_RETURN_IF_ERROR(check_rank(filter, 4, "filter"));
  AF_ASSIGN_OR_RETURN(auto strides, parse_nhwc_window(attrs, "strides"));
  AF_ASSIGN_OR_RETURN(Padding p, parse_padding(attrs));
  const int64_t in_c = dim_or_unknown(input, 3), f_in = dim_or_unknown(filter, 2);
  if (in_c >= 0 && f_in >= 0 && in_c != f_in)
    return InvalidArgument("input depth " + std::to_string(in_c) + " does not match the filter's input depth " +
                           std::to_string(f_in) + " (input " + input.to_string() + ", filter " +
                           filter.to_string() + ")");
  const int64_t fh = dim_or_unknown(filter, 0), fw = dim_or_unknown(filter, 1);
  if (fh == 0 || fw == 0) return InvalidArgument("filter " + filter.to_string() + " has an empty window");
  if (fh < 0 || fw < 0) {
    // The window is unknown: only batch and depth are known.
    return Shape{dim_or_unknown(input, 0), -1, -1, dim_or_unknown(filter, 3)};
  }
  return window_output(input, fh, fw, strides, p, dim_or_unknown(filter, 3));
}

Result<Shape> max_pool_output(const Shape& input, const AttrMap& attrs) {
  AF_RETURN_IF_ERROR(check_rank(input, 4, "input"));
  AF_ASSIGN_OR_RETURN(auto ksize, parse_nhwc_window(attrs, "ksize"));
  AF_ASSIGN_OR_RETURN(auto strides, parse_nhwc_window(attrs, "strides"));
  AF_ASSIGN_OR_RETURN(Padding p, parse_padding(attrs));
  return window_output(input, ksize[1], ksize[2], strides, p, dim_or_unknown(input, 3));
}

// ---- shape functions ---------------------------------------------------------------------

Status matmul_shape(InferenceContext& c) {
  const Shape& a = c.input_shape(0);
  const Shape& b = c.input_shape(1);
  AF_RETURN_IF_ERROR(check_rank(a, 2, "a"));
  AF_RETURN_IF_ERROR(check_rank(b, 2, "b"));
  AF_RETURN_IF_ERROR(check_floating(c.input_type(0), "a"));
  AF_RETURN_IF_ERROR(check_same_type(c.input_type(0), c.input_type(1), "a", "b"));
  const bool ta = c.attrs().get_or<bool>("transpose_a", false);
  const bool tb = c.attrs().get_or<bool>("transpose_b", false);
  const int64_t m = dim_or_unknown(a, ta ? 1 : 0), ka = dim_or_unknown(a, ta ? 0 : 1);
  const int64_t kb = dim_or_unknown(b, tb ? 1 : 0), n = dim_or_unknown(b, tb ? 0 : 1);
  if (ka >= 0 && kb >= 0 && ka != kb)
    return InvalidArgument("inner dimensions " + std::to_string(ka) + " and " + std::to_string(kb) + " differ");
  c.set_output(0, c.input_type(0), Shape{m, n});
  return Status::OK();
}

Status relu_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_floating(c.input_type(0), "features"));
  c.set_output(0, c.input_type(0), c.input_shape(0));
  return Status::OK();
}

Status bias_add_shape(InferenceContext& c) {
  const Shape& v = c.input_shape(0);
  const Shape& b = c.input_shape(1);
  AF_RETURN_IF_ERROR(check_floating(c.input_type(0), "value"));
  AF_RETURN_IF_ERROR(check_same_type(c.input_type(0), c.input_type(1), "value", "bias"));
  AF_RETURN_IF_ERROR(check_min_rank(v, 2, "value"));
  AF_RETURN_IF_ERROR(check_rank(b, 1, "bias"));
  Shape out = v;
  if (!v.unknown_rank()) {
    const int64_t last = v.dim(v.rank() - 1), nb = dim_or_unknown(b, 0);
    if (last >= 0 && nb >= 0 && last != nb)
      return InvalidArgument("bias of size " + std::to_string(nb) + " does not match the last dimension " +
                             std::to_string(last) + " of value " + v.to_string());
    if (last < 0) out.set_dim(v.rank() - 1, nb);
  }
  c.set_output(0, c.input_type(0), out);
  return Status::OK();
}

Status conv2d_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_floating(c.input_type(0), "input"));
  AF_RETURN_IF_ERROR(check_same_type(c.input_type(0), c.input_type(1), "input", "filter"));
  AF_ASSIGN_OR_RETURN(Shape out, conv2d_output(c.input_shape(0), c.input_shape(1), c.attrs()));
  c.set_output(0, c.input_type(0), out);
  return Status::OK();
}

// The fused ops of graph/fusion.h: the base op's shape, plus a rank-1 bias of the same type as
// input 2 (the kernel checks its size against the output's channels).
Status fused_bias_input(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_same_type(c.input_type(0), c.input_type(2), "input", "bias"));
  return check_rank(c.input_shape(2), 1, "bias");
}
Status fused_conv2d_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(conv2d_shape(c));
  return fused_bias_input(c);
}
Status fused_matmul_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(matmul_shape(c));
  return fused_bias_input(c);
}

Status max_pool_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_floating(c.input_type(0), "input"));
  AF_ASSIGN_OR_RETURN(Shape out, max_pool_output(c.input_shape(0), c.attrs()));
  c.set_output(0, c.input_type(0), out);
  return Status::OK();
}

// AvgPoolGrad(orig_input, grad): the input's shape; grad must be the pooled shape.
Status avg_pool_grad_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_floating(c.input_type(1), "grad"));
  AF_ASSIGN_OR_RETURN(Shape pooled, max_pool_output(c.input_shape(0), c.attrs()));
  if (!c.input_shape(1).compatible_with(pooled))
    return InvalidArgument("grad " + c.input_shape(1).to_string() + " is not the pooled shape " + pooled.to_string());
  c.set_output(0, c.input_type(1), c.input_shape(0));
  return Status::OK();
}

Status softmax_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_floating(c.input_type(0), "logits"));
  AF_RETURN_IF_ERROR(check_min_rank(c.input_shape(0), 1, "logits"));
  c.set_output(0, c.input_type(0), c.input_shape(0));
  return Status::OK();
}

Status xent_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_floating(c.input_type(0), "logits"));
  AF_RETURN_IF_ERROR(check_same_type(c.input_type(0), c.input_type(1), "logits", "labels"));
  AF_RETURN_IF_ERROR(check_rank(c.input_shape(0), 2, "logits"));
  AF_RETURN_IF_ERROR(check_rank(c.input_shape(1), 2, "labels"));
  AF_ASSIGN_OR_RETURN(Shape s, merge_shapes(c.input_shape(0), c.input_shape(1), "logits", "labels"));
  c.set_output(0, c.input_type(0), Shape{dim_or_unknown(s, 0)});
  c.set_output(1, c.input_type(0), Shape{dim_or_unknown(s, 0), dim_or_unknown(s, 1)});
  return Status::OK();
}

Status relu_grad_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_floating(c.input_type(0), "gradients"));
  AF_RETURN_IF_ERROR(check_same_type(c.input_type(0), c.input_type(1), "gradients", "features"));
  AF_ASSIGN_OR_RETURN(Shape s, merge_shapes(c.input_shape(0), c.input_shape(1), "gradients", "features"));
  c.set_output(0, c.input_type(0), s);
  return Status::OK();
}

Status bias_add_grad_shape(InferenceContext& c) {
  const Shape& g = c.input_shape(0);
  AF_RETURN_IF_ERROR(check_floating(c.input_type(0), "out_backprop"));
  AF_RETURN_IF_ERROR(check_min_rank(g, 2, "out_backprop"));
  c.set_output(0, c.input_type(0), Shape{g.unknown_rank() ? -1 : g.dim(g.rank() - 1)});
  return Status::OK();
}

// Reads a 1-D int32/int64 constant of 4 elements (input_sizes); nullopt-like empty vector when
// the value is not a constant.
Result<std::vector<int64_t>> const_sizes(const Tensor* t, const std::string& what) {
  std::vector<int64_t> v;
  if (!t) return v;
  if (t->shape().rank() != 1 || t->num_elements() != 4)
    return InvalidArgument(what + " must be a 4-element vector, got shape " + t->shape().to_string());
  for (int i = 0; i < 4; ++i) {
    if (t->dtype() == DType::kInt32) v.push_back(t->data<int32_t>()[i]);
    else if (t->dtype() == DType::kInt64) v.push_back(t->data<int64_t>()[i]);
    else return InvalidArgument(what + " must be int32 or int64, got " + dtype_name(t->dtype()));
  }
  return v;
}

// Checks that convolving `input` with `filter` gives `out_backprop`'s shape.
Status check_conv_backprop(const Shape& input, const Shape& filter, const Shape& out_backprop,
                           const AttrMap& attrs) {
  AF_RETURN_IF_ERROR(check_rank(out_backprop, 4, "out_backprop"));
  AF_ASSIGN_OR_RETURN(Shape expect, conv2d_output(input, filter, attrs));
  if (!expect.compatible_with(out_backprop))
    return InvalidArgument("out_backprop " + out_backprop.to_string() + " does not match the convolution output " +
                           expect.to_string() + " of input " + input.to_string() + " and filter " +
                           filter.to_string());
  return Status::OK();
}

// Conv2DBackpropInput(input_sizes, filter, out_backprop) -> [N, H, W, C].
Status conv2d_backprop_input_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_floating(c.input_type(1), "filter"));
  AF_RETURN_IF_ERROR(check_same_type(c.input_type(1), c.input_type(2), "filter", "out_backprop"));
  if (c.input_type(0) != DType::kInt32 && c.input_type(0) != DType::kInt64)
    return InvalidArgument(std::string("input_sizes must be int32 or int64, got ") + dtype_name(c.input_type(0)));
  AF_RETURN_IF_ERROR(check_rank(c.input_shape(0), 1, "input_sizes"));
  const Shape& filter = c.input_shape(1);
  const Shape& dy = c.input_shape(2);
  AF_RETURN_IF_ERROR(check_rank(filter, 4, "filter"));
  AF_RETURN_IF_ERROR(check_rank(dy, 4, "out_backprop"));
  AF_ASSIGN_OR_RETURN(auto sizes, const_sizes(c.input_value(0), "input_sizes"));
  Shape in;
  if (sizes.empty()) {
    AF_RETURN_IF_ERROR(parse_nhwc_window(c.attrs(), "strides").status());
    AF_RETURN_IF_ERROR(parse_padding(c.attrs()).status());
    in = Shape{dim_or_unknown(dy, 0), -1, -1, dim_or_unknown(filter, 2)};
  } else {
    in = Shape(sizes);
    AF_RETURN_IF_ERROR(check_conv_backprop(in, filter, dy, c.attrs()));
  }
  c.set_output(0, c.input_type(1), in);
  return Status::OK();
}

// Conv2DBackpropFilter(input, out_backprop), attr filter_sizes -> filter_sizes.
Status conv2d_backprop_filter_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_floating(c.input_type(0), "input"));
  AF_RETURN_IF_ERROR(check_same_type(c.input_type(0), c.input_type(1), "input", "out_backprop"));
  auto fs = c.attrs().get<std::vector<int64_t>>("filter_sizes");
  if (!fs.ok()) return InvalidArgument("needs a 4-element int list attribute 'filter_sizes'");
  if (fs->size() != 4) return InvalidArgument("filter_sizes must have 4 elements, got " + dims_string(*fs));
  for (int64_t d : *fs)
    if (d < 0) return InvalidArgument("filter_sizes must be fully known, got " + dims_string(*fs));
  Shape filter(*fs);
  AF_RETURN_IF_ERROR(check_conv_backprop(c.input_shape(0), filter, c.input_shape(1), c.attrs()));
  c.set_output(0, c.input_type(0), filter);
  return Status::OK();
}

// The checks MaxPoolGrad and MaxPoolGradGrad share on (orig_input, orig_output, grad): one
// floating dtype, rank-4 orig_output and grad, orig_output compatible with the pooled shape of
// orig_input. Returns that pooled shape.
Result<Shape> check_pool_grad_inputs(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_floating(c.input_type(0), "orig_input"));
  AF_RETURN_IF_ERROR(check_same_type(c.input_type(0), c.input_type(1), "orig_input", "orig_output"));
  AF_RETURN_IF_ERROR(check_same_type(c.input_type(0), c.input_type(2), "orig_input", "grad"));
  AF_ASSIGN_OR_RETURN(Shape pooled, max_pool_output(c.input_shape(0), c.attrs()));
  AF_RETURN_IF_ERROR(check_rank(c.input_shape(1), 4, "orig_output"));
  AF_RETURN_IF_ERROR(check_rank(c.input_shape(2), 4, "grad"));
  if (!pooled.compatible_with(c.input_shape(1)))
    return InvalidArgument("orig_output " + c.input_shape(1).to_string() + " does not match the pooled shape " +
                           pooled.to_string());
  return pooled;
}

// MaxPoolGrad(orig_input, orig_output, grad) -> orig_input's shape.
Status max_pool_grad_shape(InferenceContext& c) {
  AF_ASSIGN_OR_RETURN(Shape pooled, check_pool_grad_inputs(c));
  if (!pooled.compatible_with(c.input_shape(2)))
    return InvalidArgument("grad " + c.input_shape(2).to_string() + " does not match the pooled shape " +
                           pooled.to_string());
  c.set_output(0, c.input_type(0), c.input_shape(0));
  return Status::OK();
}

// MaxPoolGradGrad(orig_input, orig_output, grad) -> orig_output's (pooled) shape; grad has
// orig_input's shape.
Status max_pool_grad_grad_shape(InferenceContext& c) {
  AF_ASSIGN_OR_RETURN(Shape pooled, check_pool_grad_inputs(c));
  if (!c.input_shape(0).compatible_with(c.input_shape(2)))
    return InvalidArgument("grad " + c.input_shape(2).to_string() + " does not match orig_input " +
                           c.input_shape(0).to_string());
  AF_ASSIGN_OR_RETURN(Shape out, merge_shapes(pooled, c.input_shape(1), "pooled shape", "orig_output"));
  c.set_output(0, c.input_type(0), std::move(out));
  return Status::OK();
}

// A MaxPoolGrad-shaped node `op`(orig_input, orig_output, grad) with its window attributes.
Output pool_grad_node(const Scope& s, const char* op, const Input& orig_input, const Input& orig_output,
                      const Input& grad, const std::vector<int64_t>& ksize, const std::vector<int64_t>& strides,
                      const std::string& padding) {
  return NodeBuilder(s, op)
      .input(orig_input)
      .input(orig_output)
      .input(grad)
      .attr("ksize", ksize)
      .attr("strides", strides)
      .attr("padding", padding)
      .output();
}

}  // namespace

void register_nn_ops(OpRegistry& r) {
  r.add(op_def("MatMul", 2, matmul_shape));
  r.add(op_def("Relu", 1, relu_shape));
  r.add(op_def("BiasAdd", 2, bias_add_shape));
  r.add(op_def("Conv2D", 2, conv2d_shape));
  r.add(op_def("MaxPool", 1, max_pool_shape));
  r.add(op_def("AvgPool", 1, max_pool_shape));  // the same window arithmetic
  r.add(op_def("AvgPoolGrad", 2, avg_pool_grad_shape));
  r.add(op_def("Softmax", 1, softmax_shape));
  r.add(op_def("SoftmaxCrossEntropyWithLogits", 2, xent_shape));
  r.add(op_def("ReluGrad", 2, relu_grad_shape));
  r.add(op_def("BiasAddGrad", 1, bias_add_grad_shape));
  r.add(op_def("Conv2DBackpropInput", 3, conv2d_backprop_input_shape));
  r.add(op_def("Conv2DBackpropFilter", 2, conv2d_backprop_filter_shape));
  r.add(op_def("MaxPoolGrad", 3, max_pool_grad_shape));
  r.add(op_def("MaxPoolGradGrad", 3, max_pool_grad_grad_shape));
  // Made only by graph/fusion.h on placed graphs; no gradients (they appear after differentiation).
  r.add(op_def("_FusedConv2D", 3, fused_conv2d_shape));
  r.add(op_def("_FusedMatMul", 3, fused_matmul_shape));
  r.add(op_def("_FusedMaxPoolGrad", 3, max_pool_grad_shape));
}

namespace ops {

Output matmul(const Scope& s, Input a, Input b, MatMulAttrs attrs) {
  return NodeBuilder(s, "MatMul")
      .input(a)
      .input(b)
      .attr("transpose_a", attrs.transpose_a)
      .attr("transpose_b", attrs.transpose_b)
      .output();
}

Output relu(const Scope& s, Input x) { return NodeBuilder(s, "Relu").input(x).output(); }

Output bias_add(const Scope& s, Input value, Input bias) {
  return NodeBuilder(s, "BiasAdd").input(value).input(bias).output();
}

Output conv2d(const Scope& s, Input input, Input filter, const std::vector<int64_t>& strides,
              const std::string& padding) {
  return NodeBuilder(s, "Conv2D")
      .input(input)
      .input(filter)
      .attr("strides", strides)
      .attr("padding", padding)
      .output();
}

Output max_pool(const Scope& s, Input input, const std::vector<int64_t>& ksize, const std::vector<int64_t>& strides,
                const std::string& padding) {
  return NodeBuilder(s, "MaxPool")
      .input(input)
      .attr("ksize", ksize)
      .attr("strides", strides)
      .attr("padding", padding)
      .output();
}

Output avg_pool(const Scope& s, Input input, const std::vector<int64_t>& ksize, const std::vector<int64_t>& strides,
                const std::string& padding) {
  return NodeBuilder(s, "AvgPool")
      .input(input)
      .attr("ksize", ksize)
      .attr("strides", strides)
      .attr("padding", padding)
      .output();
}

Output avg_pool_grad(const Scope& s, Input orig_input, Input grad, const std::vector<int64_t>& ksize,
                     const std::vector<int64_t>& strides, const std::string& padding) {
  return NodeBuilder(s, "AvgPoolGrad")
      .input(orig_input)
      .input(grad)
      .attr("ksize", ksize)
      .attr("strides", strides)
      .attr("padding", padding)
      .output();
}

Output softmax(const Scope& s, Input logits) { return NodeBuilder(s, "Softmax").input(logits).output(); }

std::vector<Output> softmax_cross_entropy_with_logits(const Scope& s, Input logits, Input labels) {
  Node* n = NodeBuilder(s, "SoftmaxCrossEntropyWithLogits").input(logits).input(labels).finalize();
  if (!n) return {Output(), Output()};
  return {Output(n, 0), Output(n, 1)};
}

}  // namespace ops

namespace nn {
Output softmax_cross_entropy_with_logits(const Scope& s, Input labels, Input logits) {
  return ops::softmax_cross_entropy_with_logits(s, logits, labels)[0];
}

Output sparse_softmax_cross_entropy_with_logits(const Scope& s, Input labels, Input logits) {
  std::vector<Output> r = ops::sparse_softmax_cross_entropy_with_logits(s, logits, labels);
  return r.empty() ? Output() : r[0];
}
}  // namespace nn

namespace ops {
Output relu_grad(const Scope& s, Input gradients, Input features) {
  return NodeBuilder(s, "ReluGrad").input(gradients).input(features).output();
}

Output bias_add_grad(const Scope& s, Input out_backprop) {
  return NodeBuilder(s, "BiasAddGrad").input(out_backprop).output();
}

Output conv2d_backprop_input(const Scope& s, Input input_sizes, Input filter, Input out_backprop,
                             const std::vector<int64_t>& strides, const std::string& padding) {
  return NodeBuilder(s, "Conv2DBackpropInput")
      .input(input_sizes)
      .input(filter)
      .input(out_backprop)
      .attr("strides", strides)
      .attr("padding", padding)
      .output();
}

Output conv2d_backprop_filter(const Scope& s, Input input, const std::vector<int64_t>& filter_sizes,
                              Input out_backprop, const std::vector<int64_t>& strides, const std::string& padding) {
  return NodeBuilder(s, "Conv2DBackpropFilter")
      .input(input)
      .input(out_backprop)
      .attr("filter_sizes", filter_sizes)
      .attr("strides", strides)
      .attr("padding", padding)
      .output();
}

Output max_pool_grad(const Scope& s, Input orig_input, Input orig_output, Input grad,
                     const std::vector<int64_t>& ksize, const std::vector<int64_t>& strides,
                     const std::string& padding) {
  return pool_grad_node(s, "MaxPoolGrad", orig_input, orig_output, grad, ksize, strides, padding);
}

Output max_pool_grad_grad(const Scope& s, Input orig_input, Input orig_output, Input grad,
                          const std::vector<int64_t>& ksize, const std::vector<int64_t>& strides,
                          const std::string& padding) {
  return pool_grad_node(s, "MaxPoolGradGrad", orig_input, orig_output, grad, ksize, strides, padding);
}

}  // namespace ops
}  // namespace actorflow
