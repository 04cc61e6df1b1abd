// Indexing and activation ops for embedding-style models: Gather, UnsortedSegmentSum,
// Concat, Slice, Sigmoid, Tanh, L2Loss, and the two helper ops their gradients use (ConcatPart,
// SliceGrad). Shape functions, gradients and the ops:: builders declared in graph/ops.h; the CPU
// kernels are in device/cpu/indexing_kernels.cc.
#include "core/checked_math.h"
#include "graph/op_registry.h"
#include "graph/ops.h"
#include "graph/shape_util.h"

namespace actorflow {

namespace {

using Outs = std::vector<Output>;

const DTypes& index_types() {
  static const DTypes t{DType::kInt32, DType::kInt64};
  return t;
}

// Gather(params, indices) -> indices.shape + params.shape[1:].
Status gather_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(1), index_types(), "indices"));
  const Shape& p = c.input_shape(0);
  const Shape& ids = c.input_shape(1);
  if (!p.unknown_rank() && p.rank() < 1) return InvalidArgument("params must have rank >= 1, got a scalar");
  if (p.unknown_rank() || ids.unknown_rank()) {
    c.set_output(0, c.input_type(0), Shape::unknown());
    return Status::OK();
  }
  std::vector<int64_t> out = ids.dims();
  for (int i = 1; i < p.rank(); ++i) out.push_back(p.dim(i));
  c.set_output(0, c.input_type(0), Shape(std::move(out)));
  return Status::OK();
}

// The value of a scalar or one-element integer input known at graph time, or -1.
int64_t known_count(const InferenceContext& c, int i) {
  const Tensor* v = c.input_value(i);
  if (!v || v->num_elements() != 1) return -1;
  if (v->dtype() == DType::kInt32) return v->data<int32_t>()[0];
  if (v->dtype() == DType::kInt64) return v->data<int64_t>()[0];
  return -1;
}

// UnsortedSegmentSum(data, segment_ids, num_segments) -> [num_segments] + data.shape[ids.rank:].
Status segment_sum_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), numeric_types(), "data"));
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(1), index_types(), "segment_ids"));
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(2), index_types(), "num_segments"));
  const Shape& d = c.input_shape(0);
  const Shape& ids = c.input_shape(1);
  if (d.unknown_rank() || ids.unknown_rank()) {
    c.set_output(0, c.input_type(0), Shape::unknown());
    return Status::OK();
  }
  if (ids.rank() > d.rank())
    return InvalidArgument("segment_ids " + ids.to_string() + " must be a prefix of data's shape " + d.to_string());
  for (int i = 0; i < ids.rank(); ++i)
    if (ids.dim(i) >= 0 && d.dim(i) >= 0 && ids.dim(i) != d.dim(i))
      return InvalidArgument("segment_ids " + ids.to_string() + " must be a prefix of data's shape " + d.to_string());
  std::vector<int64_t> out{known_count(c, 2)};
  for (int i = ids.rank(); i < d.rank(); ++i) out.push_back(d.dim(i));
  c.set_output(0, c.input_type(0), Shape(std::move(out)));
  return Status::OK();
}

// Concat(values..., attr axis): same dtype and rank, equal dims except along axis.
Status concat_shape(InferenceContext& c) {
  if (c.num_inputs() < 1) return InvalidArgument("Concat needs at least one input");
  AF_ASSIGN_OR_RETURN(int64_t axis, c.attrs().get<int64_t>("axis"));
  int rank = -1;
  for (int i = 0; i < c.num_inputs(); ++i) {
    AF_RETURN_IF_ERROR(check_same_dtype(c.input_type(0), c.input_type(i)));
    if (!c.input_shape(i).unknown_rank()) {
      if (rank >= 0 && c.input_shape(i).rank() != rank)
        return InvalidArgument("values[" + std::to_string(i) + "] has rank " + std::to_string(c.input_shape(i).rank()) +
                               ", values[0] rank " + std::to_string(rank));
      rank = c.input_shape(i).rank();
    }
  }
  if (rank < 0) {
    c.set_output(0, c.input_type(0), Shape::unknown());
    return Status::OK();
  }
  if (rank == 0) return InvalidArgument("cannot concatenate scalars");
  AF_ASSIGN_OR_RETURN(int ax, normalize_axis(axis, rank));
  std::vector<int64_t> out(static_cast<size_t>(rank), -1);
  int64_t along = 0;
  for (int i = 0; i < c.num_inputs(); ++i) {
    const Shape& s = c.input_shape(i);
    if (s.unknown_rank()) {
      along = -1;
      continue;
    }
    for (int d = 0; d < rank; ++d) {
      if (d == ax) continue;
      auto& o = out[static_cast<size_t>(d)];
      if (s.dim(d) < 0) continue;
      if (o >= 0 && o != s.dim(d))
        return InvalidArgument("values[" + std::to_string(i) + "] " + s.to_string() + " differs from the others in dim " +
                               std::to_string(d) + " (concatenating along " + std::to_string(ax) + ")");
      o = s.dim(d);
    }
    if (along >= 0 && s.dim(ax) < 0) along = -1;
    else if (along >= 0 && !checked_add(along, s.dim(ax), &along))
      return InvalidArgument("the concatenated dim " + std::to_string(ax) + " overflows int64");
  }
  out[static_cast<size_t>(ax)] = along;
  c.set_output(0, c.input_type(0), Shape(std::move(out)));
  return Status::OK();
}

// ConcatPart(dy, values..., attrs axis, index): the part of dy that values[index] became.
Status concat_part_shape(InferenceContext& c) {
  AF_ASSIGN_OR_RETURN(int64_t index, c.attrs().get<int64_t>("index"));
  if (index < 0 || index >= c.num_inputs() - 1)
    return InvalidArgument("index " + std::to_string(index) + " names no value of the " +
                           std::to_string(c.num_inputs() - 1) + " concatenated");
  c.set_output(0, c.input_type(0), c.input_shape(static_cast<int>(index) + 1));
  return Status::OK();
}

// Slice(x, attrs begin, size): size -1 = to the end of that dim.
Status slice_shape(InferenceContext& c) {
  AF_ASSIGN_OR_RETURN(auto begin, c.attrs().get<std::vector<int64_t>>("begin"));
  AF_ASSIGN_OR_RETURN(auto size, c.attrs().get<std::vector<int64_t>>("size"));
  if (begin.size() != size.size())
    return InvalidArgument("begin " + int_list_to_string(begin) + " and size " + int_list_to_string(size) +
                           " differ in length");
  const Shape& in = c.input_shape(0);
  if (!in.unknown_rank() && static_cast<size_t>(in.rank()) != begin.size())
    return InvalidArgument("begin " + int_list_to_string(begin) + " has " + std::to_string(begin.size()) +
                           " entries but the input has rank " + std::to_string(in.rank()));
  std::vector<int64_t> out(begin.size());
  for (size_t i = 0; i < begin.size(); ++i) {
    if (begin[i] < 0) return InvalidArgument("begin " + int_list_to_string(begin) + " has a negative entry");
    if (size[i] < -1) return InvalidArgument("size " + int_list_to_string(size) + " has an entry below -1");
    const int64_t dim = in.unknown_rank() ? -1 : in.dim(static_cast<int>(i));
    if (dim >= 0 && (begin[i] > dim || (size[i] >= 0 && size[i] > dim - begin[i])))
      return InvalidArgument("slice begin " + int_list_to_string(begin) + " size " + int_list_to_string(size) +
                             " does not fit in " + in.to_string());
    out[i] = size[i] >= 0 ? size[i] : (dim >= 0 ? dim - begin[i] : -1);
  }
  c.set_output(0, c.input_type(0), Shape(std::move(out)));
  return Status::OK();
}

// SliceGrad(dy, x, attrs begin, size): zeros of x's shape with dy placed at begin.
Status slice_grad_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_same_dtype(c.input_type(0), c.input_type(1)));
  c.set_output(0, c.input_type(1), c.input_shape(1));
  return Status::OK();
}

// Split(x, attrs axis, num_split): num_split equal parts along axis.
Status split_shape(InferenceContext& c) {
  AF_ASSIGN_OR_RETURN(int64_t axis, c.attrs().get<int64_t>("axis"));
  AF_ASSIGN_OR_RETURN(int64_t parts, c.attrs().get<int64_t>("num_split"));
  if (parts < 1 || parts > kMaxOpOutputs)
    return InvalidArgument("num_split must be in [1, " + std::to_string(kMaxOpOutputs) + "], got " +
                           std::to_string(parts));
  const Shape& in = c.input_shape(0);
  if (in.unknown_rank()) {
    for (int64_t i = 0; i < parts; ++i) c.set_output(static_cast<int>(i), c.input_type(0), Shape::unknown());
    return Status::OK();
  }
  if (in.rank() == 0) return InvalidArgument("cannot split a scalar");
  AF_ASSIGN_OR_RETURN(int ax, normalize_axis(axis, in.rank()));
  std::vector<int64_t> dims = in.dims();
  const int64_t d = dims[static_cast<size_t>(ax)];
  if (d >= 0 && d % parts != 0)
    return InvalidArgument("dim " + std::to_string(ax) + " of " + in.to_string() + " does not split into " +
                           std::to_string(parts) + " equal parts");
  dims[static_cast<size_t>(ax)] = d >= 0 ? d / parts : -1;
  for (int64_t i = 0; i < parts; ++i) c.set_output(static_cast<int>(i), c.input_type(0), Shape(dims));
  return Status::OK();
}

// Dropout(x, attrs rate, seed) -> (y, scale): scale is 0 or 1 / (1 - rate) per element.
Status dropout_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), floating_types()));
  AF_ASSIGN_OR_RETURN(double rate, c.attrs().get<double>("rate"));
  if (!(rate >= 0 && rate < 1)) return InvalidArgument("rate must be in [0, 1), got " + std::to_string(rate));
  c.set_output(0, c.input_type(0), c.input_shape(0));
  c.set_output(1, c.input_type(0), c.input_shape(0));
  return Status::OK();
}

// SparseSoftmaxCrossEntropyWithLogits(logits [batch, classes], labels [batch] int) ->
// (loss [batch], backprop [batch, classes]).
Status sparse_xent_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), {DType::kFloat32}, "logits"));
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(1), index_types(), "labels"));
  const Shape& l = c.input_shape(0);
  const Shape& y = c.input_shape(1);
  if (!l.unknown_rank() && l.rank() != 2) return InvalidArgument("logits must have rank 2, got " + l.to_string());
  if (!y.unknown_rank() && y.rank() != 1) return InvalidArgument("labels must have rank 1, got " + y.to_string());
  int64_t batch = l.unknown_rank() ? -1 : l.dim(0);
  if (!y.unknown_rank() && y.dim(0) >= 0) {
    if (batch >= 0 && batch != y.dim(0))
      return InvalidArgument("logits " + l.to_string() + " and labels " + y.to_string() + " differ in batch size");
    batch = y.dim(0);
  }
  c.set_output(0, DType::kFloat32, Shape{batch});
  c.set_output(1, DType::kFloat32, l.unknown_rank() ? Shape{batch, -1} : Shape{batch, l.dim(1)});
  return Status::OK();
}

// IndexedSlices(indices [n] int, values [n] + rows, dense_shape int64 [rank], attr shape): the
// dense tensor of static shape `shape` whose rows indices[i] sum values[i].
Status indexed_slices_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), index_types(), "indices"));
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(2), {DType::kInt64}, "dense_shape"));
  AF_ASSIGN_OR_RETURN(Shape shape, c.attrs().get<Shape>("shape"));
  c.set_output(0, c.input_type(1), shape);
  return Status::OK();
}

// DynamicPartition(data, partitions int32, attr num_partitions): output i holds the slices
// data[j] (j over partitions' elements, in order) with partitions[j] == i:
// [count_i] + data.shape[partitions.rank:] (count unknown before run time).
Status dynamic_partition_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(1), {DType::kInt32}, "partitions"));
  AF_ASSIGN_OR_RETURN(int64_t n, c.attrs().get<int64_t>("num_partitions"));
  if (n < 1 || n > kMaxOpOutputs)
    return InvalidArgument("num_partitions must be in [1, " + std::to_string(kMaxOpOutputs) + "], got " +
                           std::to_string(n));
  const Shape& d = c.input_shape(0);
  const Shape& p = c.input_shape(1);
  Shape out = Shape::unknown();
  if (!d.unknown_rank() && !p.unknown_rank()) {
    if (p.rank() > d.rank())
      return InvalidArgument("partitions " + p.to_string() + " must be a prefix of data's shape " + d.to_string());
    for (int i = 0; i < p.rank(); ++i)
      if (p.dim(i) >= 0 && d.dim(i) >= 0 && p.dim(i) != d.dim(i))
        return InvalidArgument("partitions " + p.to_string() + " must be a prefix of data's shape " + d.to_string());
    std::vector<int64_t> dims{-1};
    for (int i = p.rank(); i < d.rank(); ++i) dims.push_back(d.dim(i));
    out = Shape(std::move(dims));
  }
  for (int64_t i = 0; i < n; ++i) c.set_output(static_cast<int>(i), c.input_type(0), out);
  return Status::OK();
}

// DynamicStitch(indices_0..indices_{N-1} int32, data_0..data_{N-1}): merged[indices_m[...]] =
// data_m[...]; [max index + 1] + data_0.shape[indices_0.rank:].
Status dynamic_stitch_shape(InferenceContext& c) {
  const int n2 = c.num_inputs();
  if (n2 < 2 || n2 % 2 != 0) return InvalidArgument("DynamicStitch needs N index tensors and N data tensors");
  const int n = n2 / 2;
  for (int i = 0; i < n; ++i) {
    AF_RETURN_IF_ERROR(check_dtype(c.input_type(i), {DType::kInt32}, "indices"));
    AF_RETURN_IF_ERROR(check_same_dtype(c.input_type(n), c.input_type(n + i)));
  }
  const Shape& ind = c.input_shape(0);
  const Shape& d = c.input_shape(n);
  if (ind.unknown_rank() || d.unknown_rank()) {
    c.set_output(0, c.input_type(n), Shape::unknown());
    return Status::OK();
  }
  if (ind.rank() > d.rank())
    return InvalidArgument("indices[0] " + ind.to_string() + " must be a prefix of data[0]'s shape " + d.to_string());
  std::vector<int64_t> dims{-1};
  for (int i = ind.rank(); i < d.rank(); ++i) dims.push_back(d.dim(i));
  c.set_output(0, c.input_type(n), Shape(std::move(dims)));
  return Status::OK();
}

// PartitionIds(ids int, attrs num_shards, num_rows, strategy) -> (shard int32, local id,
// position int32), each of ids' shape.
Status partition_ids_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), index_types(), "ids"));
  AF_ASSIGN_OR_RETURN(int64_t shards, c.attrs().get<int64_t>("num_shards"));
  AF_ASSIGN_OR_RETURN(int64_t rows, c.attrs().get<int64_t>("num_rows"));
  AF_ASSIGN_OR_RETURN(std::string strategy, c.attrs().get<std::string>("strategy"));
  if (shards < 1 || rows < shards)
    return InvalidArgument("cannot spread " + std::to_string(rows) + " rows over " + std::to_string(shards) + " shards");
  if (strategy != "mod" && strategy != "div")
    return InvalidArgument("partition strategy must be \"mod\" or \"div\", got \"" + strategy + "\"");
  c.set_output(0, DType::kInt32, c.input_shape(0));
  c.set_output(1, c.input_type(0), c.input_shape(0));
  c.set_output(2, DType::kInt32, c.input_shape(0));
  return Status::OK();
}

Status l2_loss_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), floating_types()));
  c.set_output(0, c.input_type(0), Shape{});
  return Status::OK();
}

Status float_unary_shape(InferenceContext& c) {
  AF_RETURN_IF_ERROR(check_dtype(c.input_type(0), floating_types()));
  c.set_output(0, c.input_type(0), c.input_shape(0));
  return Status::OK();
}

// ---- gradients --------------------------------------------------------------------------------

// The parts' gradients joined again; a part that does not reach the loss contributes zeros.
Status grad_split(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  std::vector<Output> parts;
  for (size_t i = 0; i < dy.size(); ++i)
    parts.push_back(dy[i].valid() ? dy[i] : ops::zeros_like(s, output_of(s, n, static_cast<int>(i))));
  dx->push_back(ops::concat(s, parts, n.attrs.get_or<int64_t>("axis", 0)));
  return Status::OK();
}

// d/dx = dy * scale (the same elements dropped as in the forward pass).
Status grad_dropout(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::mul(s, dy[0], output_of(s, n, 1)));
  return Status::OK();
}

// d/dlogits = backprop * dloss; labels are not differentiable. (The backprop output's own
// gradient is not supported: second derivatives through this op.)
Status grad_sparse_xent(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  if (dy.size() > 1 && dy[1].valid())
    return Unimplemented("the gradient of SparseSoftmaxCrossEntropyWithLogits's backprop output");
  dx->push_back(ops::mul(s, output_of(s, n, 1), ops::expand_dims(s, dy[0], {-1})));
  dx->push_back(Output());
  return Status::OK();
}


// d/dparams of a gather: the rows of dy, each for the row its id names. When the rows' shape is
// known statically, a sparse value (an IndexedSlices node: flat ids and their rows, never
// densified unless a consumer needs the dense tensor; optimizers apply it with sparse updates);
// else the dense unsorted_segment_sum. No gradient for the ids.
Status grad_gather(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output params = input_of(s, n, 0), ids = input_of(s, n, 1);
  const Shape& ps = params.shape();
  bool rows_known = !ps.unknown_rank() && ps.rank() >= 1 && !n.attrs.get_or<bool>("drop_negatives", false);
  for (int i = 1; rows_known && i < ps.rank(); ++i) rows_known = ps.dim(i) >= 0;
  if (rows_known) {
    std::vector<int64_t> value_dims{-1};
    for (int i = 1; i < ps.rank(); ++i) value_dims.push_back(ps.dim(i));
    dx->push_back(ops::indexed_slices(s, ops::reshape(s, ids, {-1}), ops::reshape(s, dy[0], value_dims),
                                      ops::shape_of(s, params), ps));
    dx->push_back(Output());
    return Status::OK();
  }
  Output rows = ops::slice(s, ops::shape_of(s, params), {0}, {1});
  dx->push_back(ops::unsorted_segment_sum(s, dy[0], ids, rows));
  dx->push_back(Output());
  return Status::OK();
}

// d/ddata of a segment sum: each element gets its segment's gradient (dropped ids get 0).
Status grad_segment_sum(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::gather(s, dy[0], input_of(s, n, 1), /*drop_negatives=*/true));
  dx->push_back(Output());
  dx->push_back(Output());
  return Status::OK();
}

Status grad_concat(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  const int64_t axis = n.attrs.get_or<int64_t>("axis", 0);
  std::vector<Output> values;
  for (size_t i = 0; i < n.inputs.size(); ++i) values.push_back(input_of(s, n, static_cast<int>(i)));
  for (size_t i = 0; i < values.size(); ++i)
    dx->push_back(ops::concat_part(s, dy[0], values, axis, static_cast<int64_t>(i)));
  return Status::OK();
}

// ConcatPart is linear in dy; the values lend only their shapes.
Status grad_concat_part(const Scope&, const Node&, const Outs&, Outs*) {
  return Unimplemented("second derivatives through Concat's gradient");
}

Status grad_slice(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::slice_grad(s, dy[0], input_of(s, n, 0), n.attrs.get_or<std::vector<int64_t>>("begin", {}),
                                n.attrs.get_or<std::vector<int64_t>>("size", {})));
  return Status::OK();
}

// sigmoid' = y (1 - y); tanh' = 1 - y^2 (y the op's output).
Status grad_sigmoid(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output y = output_of(s, n);
  dx->push_back(ops::mul(s, dy[0], ops::mul(s, y, ops::sub(s, 1.f, y))));
  return Status::OK();
}

Status grad_tanh(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  Output y = output_of(s, n);
  dx->push_back(ops::mul(s, dy[0], ops::sub(s, 1.f, ops::square(s, y))));
  return Status::OK();
}

// L2Loss = sum(x^2) / 2: d/dx = dy * x.
Status grad_l2_loss(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  dx->push_back(ops::mul(s, dy[0], input_of(s, n, 0)));
  return Status::OK();
}

// d/ddata_m of a stitch: the rows of dy at indices_m (TensorFlow's gradient: where several data
// write one index, each gets dy of that index). No gradient for the indices.
Status grad_dynamic_stitch(const Scope& s, const Node& n, const Outs& dy, Outs* dx) {
  const int half = static_cast<int>(n.inputs.size()) / 2;
  for (int i = 0; i < half; ++i) dx->push_back(Output());
  for (int i = 0; i < half; ++i) dx->push_back(ops::gather(s, dy[0], input_of(s, n, i)));
  return Status::OK();
}

}  // namespace

void register_indexing_ops(OpRegistry& r) {
  r.add(op_def("Gather", 2, gather_shape));
  r.add(op_def("UnsortedSegmentSum", 3, segment_sum_shape));
  r.add(op_def("Concat", -1, concat_shape));
  r.add(op_def("ConcatPart", -1, concat_part_shape));
  r.add(op_def("Slice", 1, slice_shape));
  r.add(op_def("SliceGrad", 2, slice_grad_shape));
  r.add(op_def("Sigmoid", 1, float_unary_shape));
  r.add(op_def("Tanh", 1, float_unary_shape));
  r.add(op_def("L2Loss", 1, l2_loss_shape));
  r.add(op_def("IndexedSlices", 3, indexed_slices_shape));
  r.add(op_def("Split", 1, split_shape));
  r.add(op_def("Dropout", 1, dropout_shape));
  r.add(op_def("SparseSoftmaxCrossEntropyWithLogits", 2, sparse_xent_shape));
  r.add(op_def("DynamicPartition", 2, dynamic_partition_shape));
  r.add(op_def("DynamicStitch", -1, dynamic_stitch_shape));
  r.add(op_def("PartitionIds", 1, partition_ids_shape));
  (void)r.set_grad("DynamicStitch", grad_dynamic_stitch);
  (void)r.set_grad("Split", grad_split);
  (void)r.set_grad("Dropout", grad_dropout);
  (void)r.set_grad("SparseSoftmaxCrossEntropyWithLogits", grad_sparse_xent);
  (void)r.set_grad("Gather", grad_gather);
  (void)r.set_grad("UnsortedSegmentSum", grad_segment_sum);
  (void)r.set_grad("Concat", grad_concat);
  (void)r.set_grad("ConcatPart", grad_concat_part);
  (void)r.set_grad("Slice", grad_slice);
  (void)r.set_grad("Sigmoid", grad_sigmoid);
  (void)r.set_grad("Tanh", grad_tanh);
  (void)r.set_grad("L2Loss", grad_l2_loss);
}

namespace ops {

Output gather(const Scope& s, Input params, Input indices, bool drop_negatives) {
  NodeBuilder b(s, "Gather");
  b.input(params).input(indices);
  if (drop_negatives) b.attr("drop_negatives", true);
  return b.output();
}

Output embedding_lookup(const Scope& s, Input params, Input ids) {
  // With the table, as TensorFlow's embedding_lookup: the ids travel to it and only the rows
  // come back (and the gradient's rows go there), never the whole table.
  if (params.is_output() && params.output().valid()) return gather(s.colocate_with(params.output()), params, ids);
  return gather(s, params, ids);
}

Output unsorted_segment_sum(const Scope& s, Input data, Input segment_ids, Input num_segments) {
  return NodeBuilder(s, "UnsortedSegmentSum").input(data).input(segment_ids).input(num_segments).output();
}

Output unsorted_segment_sum(const Scope& s, Input data, Input segment_ids, int64_t num_segments) {
  return unsorted_segment_sum(s, data, segment_ids, Input(Tensor::scalar<int64_t>(num_segments)));
}

Output concat(const Scope& s, const std::vector<Output>& values, int64_t axis) {
  return NodeBuilder(s, "Concat").inputs(values).attr("axis", axis).output();
}

Output concat_part(const Scope& s, Input dy, const std::vector<Output>& values, int64_t axis, int64_t index) {
  return NodeBuilder(s, "ConcatPart").input(dy).inputs(values).attr("axis", axis).attr("index", index).output();
}

Output slice(const Scope& s, Input x, const std::vector<int64_t>& begin, const std::vector<int64_t>& size) {
  return NodeBuilder(s, "Slice").input(x).attr("begin", begin).attr("size", size).output();
}

Output slice_grad(const Scope& s, Input dy, Input x, const std::vector<int64_t>& begin,
                  const std::vector<int64_t>& size) {
  return NodeBuilder(s, "SliceGrad").input(dy).input(x).attr("begin", begin).attr("size", size).output();
}

std::vector<Output> split(const Scope& s, Input x, int64_t num_split, int64_t axis) {
  Output first = NodeBuilder(s, "Split").input(x).attr("axis", axis).attr("num_split", num_split).output();
  std::vector<Output> out;
  if (!first.valid()) return out;
  for (int64_t i = 0; i < num_split; ++i) out.push_back(Output(first.node(), static_cast<int>(i)));
  return out;
}

Output stack(const Scope& s, const std::vector<Output>& values, int64_t axis) {
  if (values.empty()) {
    s.update_status(InvalidArgument("stack needs at least one value"));
    return Output();
  }
  int64_t ax = axis;
  if (ax < 0) {
    const Shape& v = values[0].shape();
    if (v.unknown_rank()) {
      s.update_status(InvalidArgument("stack: a negative axis needs values of known rank"));
      return Output();
    }
    ax += v.rank() + 1;
  }
  std::vector<Output> expanded;
  for (const auto& v : values) expanded.push_back(ops::expand_dims(s, v, {ax}));
  return concat(s, expanded, ax);
}

Output dropout(const Scope& s, Input x, double rate, int64_t seed) {
  return NodeBuilder(s, "Dropout").input(x).attr("rate", rate).attr("seed", seed).output();
}

std::vector<Output> sparse_softmax_cross_entropy_with_logits(const Scope& s, Input logits, Input labels) {
  Output first = NodeBuilder(s, "SparseSoftmaxCrossEntropyWithLogits").input(logits).input(labels).output();
  if (!first.valid()) return {};
  return {first, Output(first.node(), 1)};
}

Output indexed_slices(const Scope& s, Input indices, Input values, Input dense_shape, const Shape& shape) {
  return NodeBuilder(s, "IndexedSlices").input(indices).input(values).input(dense_shape).attr("shape", shape).output();
}

bool is_indexed_slices(const Output& o) { return o.valid() && o.node()->op == "IndexedSlices" && o.index() == 0; }

std::vector<Output> dynamic_partition(const Scope& s, Input data, Input partitions, int64_t num_partitions) {
  Output first =
      NodeBuilder(s, "DynamicPartition").input(data).input(partitions).attr("num_partitions", num_partitions).output();
  std::vector<Output> out;
  if (!first.valid()) return out;
  for (int64_t i = 0; i < num_partitions; ++i) out.push_back(Output(first.node(), static_cast<int>(i)));
  return out;
}

Output dynamic_stitch(const Scope& s, const std::vector<Output>& indices, const std::vector<Output>& data) {
  if (indices.size() != data.size() || indices.empty()) {
    s.update_status(InvalidArgument("dynamic_stitch: " + std::to_string(indices.size()) + " index tensors and " +
                                    std::to_string(data.size()) + " data tensors (needs as many of each, at least one)"));
    return Output();
  }
  return NodeBuilder(s, "DynamicStitch").inputs(indices).inputs(data).output();
}

std::vector<Output> partition_ids(const Scope& s, Input ids, int64_t num_shards, int64_t num_rows,
                                  const std::string& strategy) {
  Output first = NodeBuilder(s, "PartitionIds")
                     .input(ids)
                     .attr("num_shards", num_shards)
                     .attr("num_rows", num_rows)
                     .attr("strategy", strategy)
                     .output();
  if (!first.valid()) return {};
  return {first, Output(first.node(), 1), Output(first.node(), 2)};
}

Output embedding_lookup(const Scope& s, const std::vector<Output>& shards, Input ids, const std::string& strategy) {
  if (!s.ok()) return Output();
  auto fail = [&](const std::string& why) {
    s.update_status(InvalidArgument("embedding_lookup: " + why));
    return Output();
  };
  if (shards.empty()) return fail("no shards to look up in");
  if (shards.size() == 1) return embedding_lookup(s, shards[0], ids);
  if (strategy != "mod" && strategy != "div")
    return fail("partition strategy must be \"mod\" or \"div\", got \"" + strategy + "\"");
  const int64_t n = static_cast<int64_t>(shards.size());
  int64_t rows = 0;
  std::vector<int64_t> row_dims;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!shards[i].valid()) return fail("shard " + std::to_string(i) + " is an invalid Output");
    const Shape& sh = shards[i].shape();
    if (sh.unknown_rank() || sh.rank() < 1 || sh.dim(0) < 0)
      return fail("shard " + std::to_string(i) + " '" + shards[i].name() + "' needs a statically known row count, has " +
                  sh.to_string());
    std::vector<int64_t> rest(sh.dims().begin() + 1, sh.dims().end());
    if (i == 0) row_dims = rest;
    if (rest != row_dims)
      return fail("shard " + std::to_string(i) + " '" + shards[i].name() + "' " + sh.to_string() +
                  " has rows of another shape than shard 0's");
    rows += sh.dim(0);
  }
  // The shards must be laid out as TensorFlow's partitioners lay them out (the first rows % n
  // shards one row longer), which both strategies' arithmetic assumes.
  for (int64_t i = 0; i < n; ++i) {
    const int64_t want = rows / n + (i < rows % n ? 1 : 0);
    if (shards[static_cast<size_t>(i)].shape().dim(0) != want)
      return fail("shard " + std::to_string(i) + " has " + std::to_string(shards[static_cast<size_t>(i)].shape().dim(0)) +
                  " rows; " + std::to_string(rows) + " rows over " + std::to_string(n) + " shards need " +
                  std::to_string(want) + " there (as train::get_partitioned_variable makes them)");
  }
  Output ids_out = ids.is_output() ? ids.output() : ops::constant(s, ids.tensor());
  if (!ids_out.valid()) return Output();
  const Shape& ish = ids_out.shape();
  int unknown = 0;
  if (!ish.unknown_rank())
    for (int i = 0; i < ish.rank(); ++i) unknown += ish.dim(i) < 0 ? 1 : 0;
  if (ish.unknown_rank() || unknown > 1)
    return fail("ids of shape " + ish.to_string() + ": a lookup over shards needs ids of known rank with at most one unknown dim");
  Output flat = ops::reshape(s, ids_out, {-1});
  auto parts = partition_ids(s, flat, n, rows, strategy);
  if (parts.size() != 3) return Output();
  auto local = dynamic_partition(s, parts[1], parts[0], n);
  auto where = dynamic_partition(s, parts[2], parts[0], n);
  if (local.size() != static_cast<size_t>(n) || where.size() != static_cast<size_t>(n)) return Output();
  std::vector<Output> found;
  for (int64_t i = 0; i < n; ++i) found.push_back(embedding_lookup(s, shards[static_cast<size_t>(i)], local[static_cast<size_t>(i)]));
  Output merged = dynamic_stitch(s, where, found);
  std::vector<int64_t> dims = ish.dims();
  dims.insert(dims.end(), row_dims.begin(), row_dims.end());
  for (auto& d : dims) d = d < 0 ? -1 : d;
  return ops::reshape(s, merged, dims);
}

Output sigmoid(const Scope& s, Input x) { return NodeBuilder(s, "Sigmoid").input(x).output(); }
Output tanh(const Scope& s, Input x) { return NodeBuilder(s, "Tanh").input(x).output(); }
Output l2_loss(const Scope& s, Input x) { return NodeBuilder(s, "L2Loss").input(x).output(); }

}  // namespace ops
}  // namespace actorflow
