#include "graph/tf/tf_export.h"

#include <google/protobuf/text_format.h>

#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <set>

#include "proto/tf/graph.pb.h"

namespace actorflow {
namespace {

namespace pb = actorflow::tf;

// TensorFlow 2.21's TF_GRAPH_DEF_VERSION (what its tf.io.write_graph stamps; the golden GraphDefs
// of tests/data/tf_graph/ carry it): TensorFlow converts nothing in a graph of this producer.
constexpr int kProducer = 2474;

pb::DataType tf_type(DType t) {
  switch (t) {
    case DType::kFloat32: return pb::DT_FLOAT;
    case DType::kFloat64: return pb::DT_DOUBLE;
    case DType::kInt32: return pb::DT_INT32;
    case DType::kInt64: return pb::DT_INT64;
    case DType::kUInt8: return pb::DT_UINT8;
    case DType::kBool: return pb::DT_BOOL;
    case DType::kInvalid: break;
  }
  return pb::DT_INVALID;
}

void shape_proto(const Shape& s, pb::TensorShapeProto* p) {
  if (s.unknown_rank()) {
    p->set_unknown_rank(true);
    return;
  }
  for (int64_t d : s.dims()) p->add_dim()->set_size(d);
}

Status tensor_proto(const Tensor& t, pb::TensorProto* p) {
  const pb::DataType dt = tf_type(t.dtype());
  if (dt == pb::DT_INVALID) return InvalidArgument("a tensor of dtype invalid");
  if (!t.on_host()) return InvalidArgument("a tensor that is not in host memory");
  p->set_dtype(dt);
  shape_proto(t.shape(), p->mutable_tensor_shape());
  if (t.bytes() > 0) p->set_tensor_content(static_cast<const char*>(t.raw_data()), t.bytes());
  return Status::OK();
}

pb::AttrValue& attr(pb::NodeDef* nd, const std::string& key) {
  pb::AttrEntry* e = nd->add_attr();
  e->set_key(key);
  return *e->mutable_value();
}
void set_type(pb::NodeDef* nd, const std::string& key, DType t) { attr(nd, key).set_type(tf_type(t)); }
void set_bool(pb::NodeDef* nd, const std::string& key, bool b) { attr(nd, key).set_b(b); }
void set_int(pb::NodeDef* nd, const std::string& key, int64_t i) { attr(nd, key).set_i(i); }
void set_string(pb::NodeDef* nd, const std::string& key, const std::string& s) { attr(nd, key).set_s(s); }
void set_ints(pb::NodeDef* nd, const std::string& key, const std::vector<int64_t>& v) {
  pb::AttrValue::ListValue* l = attr(nd, key).mutable_list();
  for (int64_t i : v) l->add_i(i);
}
void set_shape(pb::NodeDef* nd, const std::string& key, const Shape& s) {
  shape_proto(s, attr(nd, key).mutable_shape());
}

std::string tensor_name(const std::string& node, int index) {
  return index == 0 ? node : node + ":" + std::to_string(index);
}

// One export: the graph, the options, the GraphDef being written and the names taken.
class Exporter {
 public:
  Exporter(const Graph& g, const ExportGraphDefOptions& o) : g_(g), o_(o) {}

  Result<pb::GraphDef> run() {
    for (int id = 0; id < g_.num_nodes(); ++id) {
      const Node* n = g_.node(id);
      used_.insert(n->name);
      if (n->op == "VariableV2") vars_.emplace(n->attrs.get_or<std::string>("shared_name", n->name), n);
    }
    for (const auto& [name, value] : o_.frozen) {
      const Node* v = g_.find(name);
      if (!v || v->op != "VariableV2")
        return InvalidArgument("frozen: '" + name + "' is not a variable (VariableV2 node) of the graph");
      if (value.dtype() != v->output_types[0] || !value.shape().compatible_with(v->output_shapes[0]))
        return InvalidArgument("frozen: the value of variable '" + name + "' is " + dtype_name(value.dtype()) + " " +
                               value.shape().to_string() + ", the variable is " + dtype_name(v->output_types[0]) +
                               " " + v->output_shapes[0].to_string());
    }
    AF_ASSIGN_OR_RETURN(std::vector<bool> keep, selected());
    if (!o_.for_tensorboard) AF_RETURN_IF_ERROR(plan_slots(keep));
    for (int id = 0; id < g_.num_nodes(); ++id) {
      if (!keep[static_cast<size_t>(id)]) continue;
      const Node& n = *g_.node(id);
      const int mark = gd_.node_size();
      Status s = node(n);
      if (s.ok()) continue;
      if (!o_.for_tensorboard)
        return InvalidArgument("node '" + n.name + "' (op " + n.op + "): " + s.message());
      // TensorBoard draws it as actorflow has it.
      gd_.mutable_node()->DeleteSubrange(mark, gd_.node_size() - mark);
      pb::NodeDef* nd = begin(n, n.op);
      // An op on a variable is drawn with the variable as its first input.
      auto v = vars_.find(n.attrs.get_or<std::string>("var_name", ""));
      if (v != vars_.end()) nd->add_input(v->second->name);
      inputs(n, nd, n.inputs);
    }
    gd_.mutable_versions()->set_producer(kProducer);
    return std::move(gd_);
  }

 private:
  // Which nodes are written: all, or those the requested outputs need.
  Result<std::vector<bool>> selected() {
    std::vector<bool> keep(static_cast<size_t>(g_.num_nodes()), o_.outputs.empty());
    if (o_.outputs.empty()) {
      // A sparse gradient's IndexedSlices marker that nothing reads (the optimizer takes its
      // indices and rows) is no TensorFlow op and no computation: left out.
      std::vector<bool> read(static_cast<size_t>(g_.num_nodes()), false);
      for (int i = 0; i < g_.num_nodes(); ++i) {
        for (const Endpoint& e : g_.node(i)->inputs) read[static_cast<size_t>(e.node)] = true;
        for (int c : g_.node(i)->control_inputs) read[static_cast<size_t>(c)] = true;
      }
      for (int i = 0; i < g_.num_nodes(); ++i)
        if (g_.node(i)->op == "IndexedSlices" && !read[static_cast<size_t>(i)] && !o_.for_tensorboard)
          keep[static_cast<size_t>(i)] = false;
      return keep;
    }
    std::deque<int> todo;
    for (const std::string& out : o_.outputs) {
      std::string name = out;
      const size_t colon = out.rfind(':');
      if (colon != std::string::npos && !g_.find(out)) name = out.substr(0, colon);
      const Node* n = g_.find(name);
      if (!n) return NotFound("outputs: the graph has no node '" + out + "'");
      todo.push_back(n->id);
    }
    while (!todo.empty()) {
      const int id = todo.front();
      todo.pop_front();
      if (keep[static_cast<size_t>(id)]) continue;
      keep[static_cast<size_t>(id)] = true;
      const Node* n = g_.node(id);
      for (const Endpoint& e : n->inputs) todo.push_back(e.node);
      for (int c : n->control_inputs) todo.push_back(c);
      if (n->attrs.has("var_name")) {
        auto v = vars_.find(n->attrs.get_or<std::string>("var_name", ""));
        if (v != vars_.end()) todo.push_back(v->second->id);
      }
    }
    return keep;
  }

  // A new NodeDef named like `n`, of TensorFlow op `op`, with n's device and colocation.
  pb::NodeDef* begin(const Node& n, const std::string& op) {
    pb::NodeDef* nd = gd_.add_node();
    nd->set_name(n.name);
    nd->set_op(op);
    if (!o_.clear_devices) {
      const std::string& dev =
          o_.for_tensorboard && !n.assigned_device.empty() ? n.assigned_device : n.requested_device;
      if (!dev.empty()) nd->set_device(dev);
    }
    if (!n.colocate_with.empty()) {
      pb::AttrValue::ListValue* l = attr(nd, "_class").mutable_list();
      for (const std::string& c : n.colocate_with) l->add_s("loc:@" + c);
    }
    if (o_.for_tensorboard && !n.output_shapes.empty()) {
      pb::AttrValue::ListValue* l = attr(nd, "_output_shapes").mutable_list();
      for (const Shape& s : n.output_shapes) shape_proto(s, l->add_shape());
    }
    return nd;
  }

  // Data inputs `ins` of n, then n's control inputs.
  void inputs(const Node& n, pb::NodeDef* nd, const std::vector<Endpoint>& ins) {
    for (const Endpoint& e : ins) nd->add_input(tensor_name(g_.node(e.node)->name, e.index));
    std::set<std::string> extra;
    for (int c : n.control_inputs) {
      nd->add_input("^" + g_.node(c)->name);
      // What runs a variable's initialising Assign runs its slots' (and Adam's beta powers')
      // initialisers; what runs an Adam update runs the beta powers' updates after it.
      auto it = extra_ctrl_.find(c);
      if (it != extra_ctrl_.end()) extra.insert(it->second.begin(), it->second.end());
    }
    for (const std::string& e : extra) nd->add_input("^" + e);
  }

  // A Const named "<n>/<what>" (unique) holding `t`, on n's device; its name.
  Result<std::string> helper_const(const Node& n, const std::string& what, const Tensor& t) {
    std::string name = n.name + "/" + what;
    for (int i = 1; used_.count(name); ++i) name = n.name + "/" + what + "_" + std::to_string(i);
    used_.insert(name);
    pb::NodeDef* nd = gd_.add_node();
    nd->set_name(name);
    nd->set_op("Const");
    if (!o_.clear_devices && !n.requested_device.empty()) nd->set_device(n.requested_device);
    set_type(nd, "dtype", t.dtype());
    AF_RETURN_IF_ERROR(tensor_proto(t, attr(nd, "value").mutable_tensor()));
    if (o_.for_tensorboard) shape_proto(t.shape(), attr(nd, "_output_shapes").mutable_list()->add_shape());
    return name;
  }

  // A NodeDef named "<n>/<what>" (unique) of TensorFlow op `op`, on n's device; its name in *name.
  pb::NodeDef* helper_node(const Node& n, const std::string& what, const std::string& op, std::string* name) {
    *name = n.name + "/" + what;
    for (int i = 1; used_.count(*name); ++i) *name = n.name + "/" + what + "_" + std::to_string(i);
    used_.insert(*name);
    pb::NodeDef* nd = gd_.add_node();
    nd->set_name(*name);
    nd->set_op(op);
    if (!o_.clear_devices && !n.requested_device.empty()) nd->set_device(n.requested_device);
    return nd;
  }

  // Integers as an int32 tensor (int64 when one does not fit) of shape {v.size()}, or a scalar.
  static Tensor ints(const std::vector<int64_t>& v, bool scalar = false) {
    bool fits = true;
    for (int64_t x : v)
      fits = fits && x >= std::numeric_limits<int32_t>::min() && x <= std::numeric_limits<int32_t>::max();
    const Shape s = scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())};
    if (!fits) return Tensor::from_vector<int64_t>(v, s);
    std::vector<int32_t> n(v.begin(), v.end());
    return Tensor::from_vector<int32_t>(n, s);
  }

  DType in_type(const Node& n, size_t i) const {
    const Endpoint& e = n.inputs[i];
    return g_.node(e.node)->output_types[static_cast<size_t>(e.index)];
  }
  const Shape& in_shape(const Node& n, size_t i) const {
    const Endpoint& e = n.inputs[i];
    return g_.node(e.node)->output_shapes[static_cast<size_t>(e.index)];
  }

  template <typename T>
  static Result<T> get(const Node& n, const std::string& key) {
    auto v = n.attrs.get<T>(key);
    if (!v.ok()) return InvalidArgument("attribute '" + key + "': " + v.status().message());
    return v;
  }

  // The variable node an actorflow variable op acts on (attr var_name), checked not frozen.
  Result<const Node*> variable_of(const Node& n) {
    AF_ASSIGN_OR_RETURN(std::string name, get<std::string>(n, "var_name"));
    auto v = vars_.find(name);
    if (v == vars_.end()) return InvalidArgument("acts on variable '" + name + "', which is not in the graph");
    if (o_.frozen.count(v->second->name))
      return InvalidArgument("acts on variable '" + v->second->name + "', which is frozen (written as a Const)");
    return v->second;
  }

  // The node with TensorFlow's op, attributes and inputs (helper Consts before it).
  Status node(const Node& n) {
    const std::string& op = n.op;
    auto t0 = [&]() { return n.inputs.empty() ? n.output_types.at(0) : in_type(n, 0); };
    // Ops whose TensorFlow form is the same op with T (and nothing else) and the same inputs.
    static const std::map<std::string, std::string> kSameT = {
        {"Identity", "Identity"}, {"StopGradient", "StopGradient"}, {"Relu", "Relu"}, {"Softmax", "Softmax"},
        {"SoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits"}, {"ReluGrad", "ReluGrad"},
        {"Add", "AddV2"}, {"Sub", "Sub"}, {"Mul", "Mul"}, {"Maximum", "Maximum"}, {"Neg", "Neg"},
        {"Square", "Square"}, {"Log", "Log"}, {"Exp", "Exp"}, {"Sqrt", "Sqrt"}, {"Sigmoid", "Sigmoid"},
        {"Tanh", "Tanh"}, {"ZerosLike", "ZerosLike"}, {"OnesLike", "OnesLike"}, {"Equal", "Equal"},
        {"Greater", "Greater"}, {"L2Loss", "L2Loss"}};
    if (auto it = kSameT.find(op); it != kSameT.end()) {
      pb::NodeDef* nd = begin(n, it->second);
      set_type(nd, "T", t0());
      inputs(n, nd, n.inputs);
      return Status::OK();
    }
    if (op == "Div") {
      if (t0() != DType::kFloat32 && t0() != DType::kFloat64)
        return InvalidArgument(std::string("Div of ") + dtype_name(t0()) +
                               " is not exported (RealDiv is TensorFlow's division of floats)");
      pb::NodeDef* nd = begin(n, "RealDiv");
      set_type(nd, "T", t0());
      inputs(n, nd, n.inputs);
      return Status::OK();
    }
    if (op == "NoOp") {
      inputs(n, begin(n, "NoOp"), n.inputs);
      return Status::OK();
    }
    if (op == "Const") {
      AF_ASSIGN_OR_RETURN(Tensor v, get<Tensor>(n, "value"));
      pb::NodeDef* nd = begin(n, "Const");
      set_type(nd, "dtype", v.dtype());
      AF_RETURN_IF_ERROR(tensor_proto(v, attr(nd, "value").mutable_tensor()));
      inputs(n, nd, n.inputs);
      return Status::OK();
    }
    if (op == "Placeholder") {
      pb::NodeDef* nd = begin(n, "Placeholder");
      set_type(nd, "dtype", n.output_types.at(0));
      set_shape(nd, "shape", n.output_shapes.at(0));
      inputs(n, nd, n.inputs);
      return Status::OK();
    }
    if (op == "MatMul") {
      pb::NodeDef* nd = begin(n, "MatMul");
      set_type(nd, "T", t0());
      set_bool(nd, "transpose_a", n.attrs.get_or<bool>("transpose_a", false));
      set_bool(nd, "transpose_b", n.attrs.get_or<bool>("transpose_b", false));
      inputs(n, nd, n.inputs);
      return Status::OK();
    }
    if (op == "BiasAdd" || op == "BiasAddGrad") {
      pb::NodeDef* nd = begin(n, op);
      set_type(nd, "T", t0());
      set_string(nd, "data_format", "NHWC");
      inputs(n, nd, n.inputs);
      return Status::OK();
    }
    if (op == "AddN") {
      pb::NodeDef* nd = begin(n, "AddN");
      set_type(nd, "T", t0());
      set_int(nd, "N", static_cast<int64_t>(n.inputs.size()));
      inputs(n, nd, n.inputs);
      return Status::OK();
    }
    if (op == "Cast") {
      pb::NodeDef* nd = begin(n, "Cast");
      set_type(nd, "SrcT", t0());
      set_type(nd, "DstT", n.output_types.at(0));
      set_bool(nd, "Truncate", false);
      inputs(n, nd, n.inputs);
      return Status::OK();
    }
    if (op == "SparseSoftmaxCrossEntropyWithLogits") {
      pb::NodeDef* nd = begin(n, op);
      set_type(nd, "T", t0());
      set_type(nd, "Tlabels", in_type(n, 1));
      inputs(n, nd, n.inputs);
      return Status::OK();
    }
    if (op == "Conv2D" || op == "Conv2DBackpropInput" || op == "Conv2DBackpropFilter" || op == "MaxPool" ||
        op == "AvgPool" || op == "MaxPoolGrad") {
      const bool pool = op == "MaxPool" || op == "AvgPool" || op == "MaxPoolGrad";
      AF_ASSIGN_OR_RETURN(auto strides, get<std::vector<int64_t>>(n, "strides"));
      AF_ASSIGN_OR_RETURN(std::string padding, get<std::string>(n, "padding"));
      std::vector<Endpoint> ins = n.inputs;
      std::string filter_sizes;
      if (op == "Conv2DBackpropFilter") {
        AF_ASSIGN_OR_RETURN(auto fs, get<std::vector<int64_t>>(n, "filter_sizes"));
        AF_ASSIGN_OR_RETURN(filter_sizes, helper_const(n, "filter_sizes", ints(fs)));
      }
      pb::NodeDef* nd = begin(n, op);
      // Conv2DBackpropInput's input 0 is the int32 input_sizes: T is the filter's dtype.
      set_type(nd, "T", op == "Conv2DBackpropInput" ? in_type(n, 1) : t0());
      set_ints(nd, "strides", strides);
      set_string(nd, "padding", padding);
      set_string(nd, "data_format", "NHWC");
      if (pool) {
        AF_ASSIGN_OR_RETURN(auto ksize, get<std::vector<int64_t>>(n, "ksize"));
        set_ints(nd, "ksize", ksize);
      } else {
        set_ints(nd, "dilations", {1, 1, 1, 1});
        set_bool(nd, "use_cudnn_on_gpu", true);
      }
      if (op == "Conv2DBackpropFilter") {
        nd->add_input(tensor_name(g_.node(ins.at(0).node)->name, ins[0].index));
        nd->add_input(filter_sizes);
        inputs(n, nd, {ins.at(1)});
      } else {
        inputs(n, nd, ins);
      }
      return Status::OK();
    }
    if (op == "AvgPoolGrad") {  // actorflow's takes the input, TensorFlow's the input's shape
      const Shape& in = in_shape(n, 0);
      if (!in.fully_defined())
        return InvalidArgument("the shape of input 0 is " + in.to_string() +
                               ": TensorFlow's AvgPoolGrad takes it as a constant, which must be fully known");
      AF_ASSIGN_OR_RETURN(auto strides, get<std::vector<int64_t>>(n, "strides"));
      AF_ASSIGN_OR_RETURN(auto ksize, get<std::vector<int64_t>>(n, "ksize"));
      AF_ASSIGN_OR_RETURN(std::string padding, get<std::string>(n, "padding"));
      AF_ASSIGN_OR_RETURN(std::string shape, helper_const(n, "orig_input_shape", ints(in.dims())));
      pb::NodeDef* nd = begin(n, op);
      set_type(nd, "T", in_type(n, 1));
      set_ints(nd, "ksize", ksize);
      set_ints(nd, "strides", strides);
      set_string(nd, "padding", padding);
      set_string(nd, "data_format", "NHWC");
      nd->add_input(shape);
      inputs(n, nd, {n.inputs.at(1)});
      return Status::OK();
    }
    if (op == "Sum" || op == "Mean" || op == "Max") {
      AF_ASSIGN_OR_RETURN(auto axes, get<std::vector<int64_t>>(n, "axes"));
      if (axes.empty()) {  // actorflow: every axis
        const Shape& s = in_shape(n, 0);
        if (s.unknown_rank()) return InvalidArgument("reduces every axis of an input of unknown rank");
        for (int i = 0; i < s.rank(); ++i) axes.push_back(i);
      }
      AF_ASSIGN_OR_RETURN(std::string idx, helper_const(n, "reduction_indices", ints(axes)));
      pb::NodeDef* nd = begin(n, op);
      set_type(nd, "T", t0());
      set_type(nd, "Tidx", DType::kInt32);
      set_bool(nd, "keep_dims", n.attrs.get_or<bool>("keep_dims", false));
      nd->add_input(tensor_name(g_.node(n.inputs.at(0).node)->name, n.inputs[0].index));
      nd->add_input(idx);
      inputs(n, nd, {});
      fix_index_type(nd, "Tidx", axes);
      return Status::OK();
    }
    if (op == "ArgMax") {
      AF_ASSIGN_OR_RETURN(int64_t axis, get<int64_t>(n, "axis"));
      return with_const_input(n, "ArgMax", "dimension", {axis}, true, "Tidx", [&](pb::NodeDef* nd) {
        set_type(nd, "T", t0());
        set_type(nd, "output_type", n.output_types.at(0));
      });
    }
    if (op == "SumToShape") {
      // The sum of a broadcast's gradient back to its input's shape (both known at export): an
      // Identity when nothing was broadcast, else Sum over the broadcast axes then Reshape to the
      // input's shape, as TensorFlow's gradients of broadcasting ops compute it.
      if (n.inputs.size() != 2) return InvalidArgument("has " + std::to_string(n.inputs.size()) + " inputs");
      const Shape& x = in_shape(n, 0);
      const Shape& like = in_shape(n, 1);
      if (!x.fully_defined() || !like.fully_defined())
        return InvalidArgument("the shapes " + x.to_string() + " and " + like.to_string() +
                               " are not both known: TensorFlow's export of SumToShape needs them");
      const int rx = x.rank(), rl = like.rank();
      std::vector<int64_t> axes;
      for (int ix = 0; ix < rx; ++ix) {
        const int il = ix - (rx - rl);
        if (il < 0 || (like.dim(il) == 1 && x.dim(ix) != 1)) axes.push_back(ix);
        else if (like.dim(il) != x.dim(ix)) return InvalidArgument("cannot sum " + x.to_string() + " down to " + like.to_string());
      }
      const std::string xin = tensor_name(g_.node(n.inputs[0].node)->name, n.inputs[0].index);
      if (axes.empty() && x == like) {
        pb::NodeDef* nd = begin(n, "Identity");
        set_type(nd, "T", t0());
        nd->add_input(xin);
        inputs(n, nd, {});
        return Status::OK();
      }
      AF_ASSIGN_OR_RETURN(std::string ax, helper_const(n, "axes", ints(axes)));
      std::string summed;
      pb::NodeDef* sum = helper_node(n, "sum", "Sum", &summed);
      set_type(sum, "T", t0());
      set_type(sum, "Tidx", ints(axes).dtype());
      set_bool(sum, "keep_dims", false);
      sum->add_input(xin);
      sum->add_input(ax);
      AF_ASSIGN_OR_RETURN(std::string shape, helper_const(n, "shape", ints(like.dims())));
      pb::NodeDef* nd = begin(n, "Reshape");
      set_type(nd, "T", t0());
      set_type(nd, "Tshape", ints(like.dims()).dtype());
      nd->add_input(summed);
      nd->add_input(shape);
      inputs(n, nd, {});
      return Status::OK();
    }
    if (op == "Reshape") {
      AF_ASSIGN_OR_RETURN(auto shape, get<std::vector<int64_t>>(n, "shape"));
      return with_const_input(n, "Reshape", "shape", shape, false, "Tshape",
                              [&](pb::NodeDef* nd) { set_type(nd, "T", t0()); });
    }
    if (op == "Transpose") {
      AF_ASSIGN_OR_RETURN(auto perm, get<std::vector<int64_t>>(n, "perm"));
      return with_const_input(n, "Transpose", "perm", perm, false, "Tperm",
                              [&](pb::NodeDef* nd) { set_type(nd, "T", t0()); });
    }
    if (op == "ExpandDims") {
      AF_ASSIGN_OR_RETURN(auto axes, get<std::vector<int64_t>>(n, "axes"));
      if (axes.size() != 1)
        return InvalidArgument("attribute 'axes' holds " + std::to_string(axes.size()) +
                               " axes: TensorFlow's ExpandDims inserts one");
      return with_const_input(n, "ExpandDims", "dim", axes, true, "Tdim",
                              [&](pb::NodeDef* nd) { set_type(nd, "T", t0()); });
    }
    if (op == "Concat") {
      AF_ASSIGN_OR_RETURN(int64_t axis, get<int64_t>(n, "axis"));
      return with_const_input(n, "ConcatV2", "axis", {axis}, true, "Tidx", [&](pb::NodeDef* nd) {
        set_type(nd, "T", t0());
        set_int(nd, "N", static_cast<int64_t>(n.inputs.size()));
      });
    }
    if (op == "Gather") {
      if (n.attrs.get_or<bool>("drop_negatives", false))
        return InvalidArgument("attribute 'drop_negatives' is true: TensorFlow's GatherV2 fails on a negative index");
      return with_const_input(n, "GatherV2", "axis", {0}, true, "Taxis", [&](pb::NodeDef* nd) {
        set_type(nd, "Tparams", t0());
        set_type(nd, "Tindices", in_type(n, 1));
        set_int(nd, "batch_dims", 0);
      });
    }
    if (op == "Split") {
      AF_ASSIGN_OR_RETURN(int64_t axis, get<int64_t>(n, "axis"));
      AF_ASSIGN_OR_RETURN(int64_t parts, get<int64_t>(n, "num_split"));
      if (axis < std::numeric_limits<int32_t>::min() || axis > std::numeric_limits<int32_t>::max())
        return InvalidArgument("attribute 'axis' is out of int32's range");
      AF_ASSIGN_OR_RETURN(std::string dim, helper_const(n, "split_dim", ints({axis}, true)));
      pb::NodeDef* nd = begin(n, "Split");
      set_type(nd, "T", t0());
      set_int(nd, "num_split", parts);
      nd->add_input(dim);  // TensorFlow's Split takes the axis first
      inputs(n, nd, n.inputs);
      return Status::OK();
    }
    if (op == "Slice") {
      AF_ASSIGN_OR_RETURN(auto b, get<std::vector<int64_t>>(n, "begin"));
      AF_ASSIGN_OR_RETURN(auto sz, get<std::vector<int64_t>>(n, "size"));
      const Tensor bt = Tensor::from_vector<int64_t>(b, Shape{static_cast<int64_t>(b.size())});
      const Tensor st = Tensor::from_vector<int64_t>(sz, Shape{static_cast<int64_t>(sz.size())});
      AF_ASSIGN_OR_RETURN(std::string bn, helper_const(n, "begin", bt));
      AF_ASSIGN_OR_RETURN(std::string sn, helper_const(n, "size", st));
      pb::NodeDef* nd = begin(n, "Slice");
      set_type(nd, "T", t0());
      set_type(nd, "Index", DType::kInt64);
      nd->add_input(tensor_name(g_.node(n.inputs.at(0).node)->name, n.inputs[0].index));
      nd->add_input(bn);
      nd->add_input(sn);
      inputs(n, nd, {});
      return Status::OK();
    }
    if (op == "Fill") {
      AF_ASSIGN_OR_RETURN(Shape shape, get<Shape>(n, "shape"));
      AF_ASSIGN_OR_RETURN(double value, get<double>(n, "value"));
      if (!shape.fully_defined()) return InvalidArgument("attribute 'shape' " + shape.to_string() + " is not fully defined");
      const DType dt = n.output_types.at(0);
      Tensor v(dt, Shape{});
      switch (dt) {
        case DType::kFloat32: *v.data<float>() = static_cast<float>(value); break;
        case DType::kFloat64: *v.data<double>() = value; break;
        case DType::kInt32: *v.data<int32_t>() = static_cast<int32_t>(value); break;
        case DType::kInt64: *v.data<int64_t>() = static_cast<int64_t>(value); break;
        case DType::kUInt8: *v.data<uint8_t>() = static_cast<uint8_t>(value); break;
        case DType::kBool: *v.data<bool>() = value != 0; break;
        case DType::kInvalid: return InvalidArgument("dtype invalid");
      }
      AF_ASSIGN_OR_RETURN(std::string dims, helper_const(n, "dims", ints(shape.dims())));
      AF_ASSIGN_OR_RETURN(std::string val, helper_const(n, "value", v));
      pb::NodeDef* nd = begin(n, "Fill");
      set_type(nd, "T", dt);
      set_type(nd, "index_type", DType::kInt32);
      fix_index_type(nd, "index_type", shape.dims());
      nd->add_input(dims);
      nd->add_input(val);
      inputs(n, nd, {});
      return Status::OK();
    }
    if (op == "Shape") {
      pb::NodeDef* nd = begin(n, "Shape");
      set_type(nd, "T", t0());
      set_type(nd, "out_type", n.output_types.at(0));
      inputs(n, nd, n.inputs);
      return Status::OK();
    }
    // ---- variables ----------------------------------------------------------------------------
    if (op == "VariableV2") {
      auto frozen = o_.frozen.find(n.name);
      if (frozen != o_.frozen.end()) {
        pb::NodeDef* nd = begin(n, "Const");
        set_type(nd, "dtype", frozen->second.dtype());
        AF_RETURN_IF_ERROR(tensor_proto(frozen->second, attr(nd, "value").mutable_tensor()));
        inputs(n, nd, n.inputs);
        return Status::OK();
      }
      pb::NodeDef* nd = begin(n, "VariableV2");
      set_type(nd, "dtype", n.output_types.at(0));
      set_shape(nd, "shape", n.output_shapes.at(0));
      set_string(nd, "container", "");
      const std::string shared = n.attrs.get_or<std::string>("shared_name", n.name);
      set_string(nd, "shared_name", shared == n.name ? "" : shared);
      inputs(n, nd, n.inputs);
      return Status::OK();
    }
    if (op == "Assign" || op == "AssignAdd" || op == "IsVariableInitialized" || op == "ApplyGradientDescent") {
      AF_ASSIGN_OR_RETURN(const Node* v, variable_of(n));
      pb::NodeDef* nd = begin(n, op);
      const DType dt = v->output_types.at(0);
      if (op == "IsVariableInitialized") {
        set_type(nd, "dtype", dt);
      } else {
        set_type(nd, "T", dt);
        set_bool(nd, "use_locking", true);  // actorflow's variable actor applies one change at a time
        if (op == "Assign") set_bool(nd, "validate_shape", true);
      }
      nd->add_input(v->name);  // TensorFlow's variable ops take the (reference) variable first
      inputs(n, nd, n.inputs);
      if (op == "ApplyGradientDescent" && n.inputs.size() == 2) {  // after every update's gradient
        after_every_gradient(nd, n.inputs[1]);
      }
      return Status::OK();
    }
    if (op == "ApplyMomentum" || op == "ApplyAdam" || op == "ApplyRMSProp" || op == "ApplyAdagrad") {
      AF_ASSIGN_OR_RETURN(const Node* v, variable_of(n));
      auto planned = slots_.find(v->name);
      if (planned == slots_.end())  // for TensorBoard: drawn as actorflow's op, its variable first
        return InvalidArgument("slot variables are written only in an export for TensorFlow");
      const auto& slots = planned->second;
      AF_RETURN_IF_ERROR(write_slots(*v));
      pb::NodeDef* nd = begin(n, op);
      set_type(nd, "T", v->output_types.at(0));
      set_bool(nd, "use_locking", true);  // actorflow's variable actor applies one change at a time
      if (op == "ApplyMomentum" || op == "ApplyAdam") set_bool(nd, "use_nesterov", false);
      if (op == "ApplyAdagrad") set_bool(nd, "update_slots", true);
      nd->add_input(v->name);
      for (const SlotPlan& sp : slots) nd->add_input(sp.name);
      auto in = [&](size_t i) { return tensor_name(g_.node(n.inputs.at(i).node)->name, n.inputs.at(i).index); };
      if (n.inputs.size() != (op == "ApplyAdagrad" ? 2u : op == "ApplyMomentum" ? 3u : 5u))
        return InvalidArgument("has " + std::to_string(n.inputs.size()) + " inputs");
      if (op == "ApplyAdam") {
        nd->add_input(adam_.beta1_power);
        nd->add_input(adam_.beta2_power);
      }
      // actorflow's inputs -> TensorFlow's after (var, slots[, beta powers]): Momentum (lr, grad,
      // momentum); Adam (lr, beta1, beta2, epsilon, grad); RMSProp (lr, rho, momentum, epsilon,
      // grad); Adagrad (lr, grad): the same order.
      for (size_t i = 0; i < n.inputs.size(); ++i) nd->add_input(in(i));
      inputs(n, nd, {});
      // TensorFlow's reference variables are read when a consumer runs, so an update could change a
      // variable another gradient still reads; actorflow reads before updating. Every update runs
      // after every update's gradient (no gradient reads a variable after an update).
      after_every_gradient(nd, n.inputs.at(op == "ApplyAdagrad" || op == "ApplyMomentum" ? 1 : 4));
      return Status::OK();
    }
    if (op == "ApplyFtrl") {
      // actorflow's (lr, l1, l2, lr_power, grad), l2_shrinkage an attribute -> TensorFlow's
      // ApplyFtrl(var, accum, linear, grad, lr, l1, l2, lr_power), or ApplyFtrlV2 with the
      // shrinkage as a Const "<n>/l2_shrinkage" before lr_power.
      AF_ASSIGN_OR_RETURN(const Node* v, variable_of(n));
      auto planned = slots_.find(v->name);
      if (planned == slots_.end()) return InvalidArgument("slot variables are written only in an export for TensorFlow");
      if (n.inputs.size() != 5) return InvalidArgument("has " + std::to_string(n.inputs.size()) + " inputs");
      AF_RETURN_IF_ERROR(write_slots(*v));
      const double shrink = n.attrs.get_or<double>("l2_shrinkage", 0.0);
      AF_ASSIGN_OR_RETURN(std::string shrink_const, l2_shrinkage_const(n, v->output_types.at(0), shrink));
      pb::NodeDef* nd = begin(n, shrink != 0 ? "ApplyFtrlV2" : "ApplyFtrl");
      set_type(nd, "T", v->output_types.at(0));
      set_bool(nd, "use_locking", true);
      set_bool(nd, "multiply_linear_by_lr", false);
      nd->add_input(v->name);
      for (const SlotPlan& sp : planned->second) nd->add_input(sp.name);
      auto in = [&](size_t i) { return tensor_name(g_.node(n.inputs.at(i).node)->name, n.inputs.at(i).index); };
      nd->add_input(in(4));  // grad
      for (size_t i = 0; i < 3; ++i) nd->add_input(in(i));  // lr, l1, l2
      if (shrink != 0) nd->add_input(shrink_const);
      nd->add_input(in(3));  // lr_power
      inputs(n, nd, {});
      after_every_gradient(nd, n.inputs.at(4));
      return Status::OK();
    }
    if (op == "SparseApplyGradientDescent" || op == "SparseApplyMomentum" || op == "SparseApplyAdagrad" ||
        op == "SparseApplyRMSProp" || op == "SparseApplyFtrl")
      return sparse_apply(n);
    if (op.rfind("Apply", 0) == 0 || op.rfind("SparseApply", 0) == 0)
      return InvalidArgument("TensorFlow's " + op + " is not exported (the dense ApplyMomentum, ApplyAdam, "
                             "ApplyRMSProp, ApplyAdagrad and ApplyFtrl are, and the sparse updates but Adam's: "
                             "actorflow's updates only the rows present, which no TensorFlow op does)");
    return InvalidArgument("TensorFlow has no op for actorflow's " + op +
                           " (ExportGraphDefOptions::for_tensorboard keeps it for drawing)");
  }

  // Control inputs on every update's gradient but `own` (the update's own, `grad`'s node):
  // TensorFlow reads a reference variable when its consumer runs, so no update may run before a
  // gradient that still reads the variable it changes.
  void after_every_gradient(pb::NodeDef* nd, const Endpoint& grad) {
    const std::string& own = g_.node(grad.node)->name;
    for (const std::string& g : update_grads_)
      if (g != own) nd->add_input("^" + g);
  }

  // FTRL's l2 shrinkage as a scalar Const "<n>/l2_shrinkage" of the variable's dtype (TensorFlow's
  // ApplyFtrlV2 takes it as an input); "" when `shrink` is 0 (ApplyFtrl has none).
  Result<std::string> l2_shrinkage_const(const Node& n, DType dt, double shrink) {
    if (shrink == 0) return std::string();
    Tensor t(dt, Shape{});
    if (dt == DType::kFloat32) t.data<float>()[0] = static_cast<float>(shrink);
    else if (dt == DType::kFloat64) t.data<double>()[0] = shrink;
    else return InvalidArgument(std::string("FTRL of a ") + dtype_name(dt) + " variable");
    return helper_const(n, "l2_shrinkage", t);
  }

  // actorflow's sparse updates (hyper-parameters, indices, values; duplicate indices summed first)
  // as TensorFlow's optimizers write them: SGD as ScatterSub(var, indices, values * lr) (duplicates
  // add up there); the others after TensorFlow's _deduplicate_indexed_slices (Unique, then
  // UnsortedSegmentSum of the rows into the unique indices) as SparseApplyMomentum, -Adagrad,
  // -RMSProp and -Ftrl(V2) on the variable's slot variables. actorflow's output (the count of rows
  // updated) has no TensorFlow equivalent: an update whose output is read is refused.
  Status sparse_apply(const Node& n) {
    const std::string& op = n.op;
    AF_ASSIGN_OR_RETURN(const Node* v, variable_of(n));
    for (int i = 0; i < g_.num_nodes(); ++i)
      for (const Endpoint& e : g_.node(i)->inputs)
        if (e.node == n.id)
          return InvalidArgument("its output (the count of rows updated) is read by '" + g_.node(i)->name +
                                 "'; TensorFlow's sparse updates output the variable");
    // Where the indices and the rows are among n's inputs.
    const size_t ids = op == "SparseApplyGradientDescent" || op == "SparseApplyMomentum" || op == "SparseApplyAdagrad" ? 1 : 4;
    const size_t arity = op == "SparseApplyMomentum" ? 4 : ids + 2;
    if (n.inputs.size() != arity) return InvalidArgument("has " + std::to_string(n.inputs.size()) + " inputs");
    auto in = [&](size_t i) { return tensor_name(g_.node(n.inputs.at(i).node)->name, n.inputs.at(i).index); };
    const DType dt = v->output_types.at(0), it = in_type(n, ids);
    if (op == "SparseApplyGradientDescent") {
      std::string scaled;
      pb::NodeDef* mul = helper_node(n, "scaled", "Mul", &scaled);
      set_type(mul, "T", dt);
      mul->add_input(in(ids + 1));
      mul->add_input(in(0));
      pb::NodeDef* nd = begin(n, "ScatterSub");
      set_type(nd, "T", dt);
      set_type(nd, "Tindices", it);
      set_bool(nd, "use_locking", true);
      nd->add_input(v->name);
      nd->add_input(in(ids));
      nd->add_input(scaled);
      inputs(n, nd, {});
      after_every_gradient(nd, n.inputs.at(ids + 1));
      return Status::OK();
    }
    auto planned = slots_.find(v->name);
    if (planned == slots_.end()) return InvalidArgument("slot variables are written only in an export for TensorFlow");
    AF_RETURN_IF_ERROR(write_slots(*v));
    std::string unique, size, summed;
    pb::NodeDef* u = helper_node(n, "unique", "Unique", &unique);
    set_type(u, "T", it);
    set_type(u, "out_idx", DType::kInt32);
    u->add_input(in(ids));
    pb::NodeDef* sz = helper_node(n, "unique_count", "Size", &size);
    set_type(sz, "T", it);
    set_type(sz, "out_type", DType::kInt32);
    sz->add_input(unique);
    pb::NodeDef* sum = helper_node(n, "summed", "UnsortedSegmentSum", &summed);
    set_type(sum, "T", dt);
    set_type(sum, "Tindices", DType::kInt32);
    set_type(sum, "Tnumsegments", DType::kInt32);
    sum->add_input(in(ids + 1));
    sum->add_input(unique + ":1");
    sum->add_input(size);
    const double shrink = op == "SparseApplyFtrl" ? n.attrs.get_or<double>("l2_shrinkage", 0.0) : 0.0;
    AF_ASSIGN_OR_RETURN(std::string shrink_const, l2_shrinkage_const(n, dt, shrink));
    pb::NodeDef* nd = begin(n, shrink != 0 ? "SparseApplyFtrlV2" : op);
    set_type(nd, "T", dt);
    set_type(nd, "Tindices", it);
    set_bool(nd, "use_locking", true);
    if (op == "SparseApplyMomentum") set_bool(nd, "use_nesterov", false);
    if (op == "SparseApplyAdagrad") set_bool(nd, "update_slots", true);
    if (op == "SparseApplyFtrl") set_bool(nd, "multiply_linear_by_lr", false);
    nd->add_input(v->name);
    for (const SlotPlan& sp : planned->second) nd->add_input(sp.name);
    if (op == "SparseApplyMomentum") {  // (var, accum, lr, grad, indices, momentum)
      nd->add_input(in(0));
      nd->add_input(summed);
      nd->add_input(unique);
      nd->add_input(in(3));
    } else if (op == "SparseApplyAdagrad") {  // (var, accum, lr, grad, indices)
      nd->add_input(in(0));
      nd->add_input(summed);
      nd->add_input(unique);
    } else if (op == "SparseApplyRMSProp") {  // (var, ms, mom, lr, rho, momentum, epsilon, grad, indices)
      for (size_t i = 0; i < 4; ++i) nd->add_input(in(i));
      nd->add_input(summed);
      nd->add_input(unique);
    } else {  // (var, accum, linear, grad, indices, lr, l1, l2[, l2_shrinkage], lr_power)
      nd->add_input(summed);
      nd->add_input(unique);
      for (size_t i = 0; i < 3; ++i) nd->add_input(in(i));
      if (shrink != 0) nd->add_input(shrink_const);
      nd->add_input(in(3));
    }
    inputs(n, nd, {});
    after_every_gradient(nd, n.inputs.at(ids + 1));
    return Status::OK();
  }

  // `tf_op` of n's inputs plus a Const "<n>/<what>" of `values` (a scalar when `scalar`) last,
  // the Const's dtype as attribute `idx_attr`; `attrs` adds the op's other attributes.
  Status with_const_input(const Node& n, const std::string& tf_op, const std::string& what,
                          const std::vector<int64_t>& values, bool scalar, const std::string& idx_attr,
                          const std::function<void(pb::NodeDef*)>& attrs) {
    AF_ASSIGN_OR_RETURN(std::string c, helper_const(n, what, ints(values, scalar)));
    pb::NodeDef* nd = begin(n, tf_op);
    attrs(nd);
    set_type(nd, idx_attr, DType::kInt32);
    fix_index_type(nd, idx_attr, values);
    for (const Endpoint& e : n.inputs) nd->add_input(tensor_name(g_.node(e.node)->name, e.index));
    nd->add_input(c);
    inputs(n, nd, {});
    return Status::OK();
  }

  // Sets attribute `key` (already int32) to int64 when `v` does not fit int32 (as ints() does).
  static void fix_index_type(pb::NodeDef* nd, const std::string& key, const std::vector<int64_t>& v) {
    if (ints(v).dtype() != DType::kInt64) return;
    for (auto& e : *nd->mutable_attr())
      if (e.key() == key) e.mutable_value()->set_type(pb::DT_INT64);
  }

  // A slot variable TensorFlow's optimizer would have made: its name and initial value.
  struct SlotPlan {
    std::string name;
    double initial = 0;
    bool exists = false;  // a VariableV2 of that name is in the graph already (an imported TensorFlow graph)
  };
  // Adam's shared beta powers, as TensorFlow's AdamOptimizer keeps them (one pair for all updates).
  struct AdamPlan {
    bool used = false, exist = false;
    double beta1 = 0, beta2 = 0;
    std::string beta1_power = "beta1_power", beta2_power = "beta2_power";
    DType dtype = DType::kFloat32;
    std::string device;
    std::vector<std::string> updates;  // the ApplyAdam nodes
  };

  // The scalar value of a Const input, or an error naming the input.
  Result<double> const_scalar(const Node& n, size_t i, const std::string& what) const {
    const Node* c = g_.node(n.inputs.at(i).node);
    auto t = c->attrs.get<Tensor>("value");
    if (c->op != "Const" || !t.ok() || t->num_elements() != 1 || t->dtype() != DType::kFloat32)
      return InvalidArgument(what + " (input " + std::to_string(i) + ", '" + c->name +
                             "') must be a float32 scalar constant: TensorFlow's beta powers start at its value");
    return static_cast<double>(t->data<float>()[0]);
  }

  // TensorFlow's slot variables for every exported dense optimizer update (docs/interop.md):
  // their names, initial values and the nodes whose control inputs gain their initialisers.
  Status plan_slots(const std::vector<bool>& keep) {
    for (int id = 0; id < g_.num_nodes(); ++id) {
      if (!keep[static_cast<size_t>(id)]) continue;
      const Node& n = *g_.node(id);
      std::vector<std::pair<std::string, double>> want;
      // SGD keeps no slots, but its gradient is ordered before every other update as theirs are.
      if ((n.op == "ApplyGradientDescent" && n.inputs.size() == 2) ||
          (n.op == "SparseApplyGradientDescent" && n.inputs.size() == 3)) {
        update_grads_.insert(g_.node(n.inputs.back().node)->name);
        continue;
      }
      // A sparse update keeps the dense one's slots (its inputs: hyper-parameters, indices, rows).
      const bool sparse = n.op.rfind("SparseApply", 0) == 0 && n.op != "SparseApplyGradientDescent" &&
                          n.op != "SparseApplyAdam" && n.op != "SparseApplyGradientSync";
      const std::string dense = sparse ? n.op.substr(6) : n.op;
      if (sparse) {
        std::vector<std::pair<std::string, double>> sw;
        if (dense == "ApplyMomentum") sw = {{"Momentum", 0.0}};
        else if (dense == "ApplyRMSProp") sw = {{"RMSProp", 1.0}, {"RMSProp_1", 0.0}};
        else if (dense == "ApplyAdagrad") sw = {{"Adagrad", n.attrs.get_or<double>("initial_accumulator_value", 0.1)}};
        else if (dense == "ApplyFtrl") sw = {{"Ftrl", n.attrs.get_or<double>("initial_accumulator_value", 0.1)}, {"Ftrl_1", 0.0}};
        else continue;
        auto where = [&n](const Status& s) { return InvalidArgument("node '" + n.name + "' (op " + n.op + "): " + s.message()); };
        auto v = variable_of(n);
        if (!v.ok()) return where(v.status());
        std::vector<SlotPlan> plan;
        for (const auto& [suffix, init] : sw) {
          SlotPlan sp{(*v)->name + "/" + suffix, init, false};
          if (const Node* e = g_.find(sp.name)) {
            if (e->op != "VariableV2" || e->output_types.at(0) != (*v)->output_types.at(0))
              return where(InvalidArgument("its slot's name '" + sp.name + "' is taken by a node that is not a variable like '" +
                                           (*v)->name + "'"));
            sp.exists = true;
          }
          plan.push_back(sp);
        }
        const size_t ids = dense == "ApplyMomentum" || dense == "ApplyAdagrad" ? 1 : 4;
        if (n.inputs.size() > ids + 1) update_grads_.insert(g_.node(n.inputs.at(ids + 1).node)->name);
        auto [it, fresh] = slots_.emplace((*v)->name, plan);
        if (!fresh && it->second.front().name != plan.front().name)
          return where(InvalidArgument("variable '" + (*v)->name + "' is updated by two different optimizers"));
        continue;
      }
      if (n.op == "ApplyMomentum") want = {{"Momentum", 0.0}};
      else if (n.op == "ApplyAdam") want = {{"Adam", 0.0}, {"Adam_1", 0.0}};
      else if (n.op == "ApplyRMSProp") want = {{"RMSProp", 1.0}, {"RMSProp_1", 0.0}};
      else if (n.op == "ApplyAdagrad") want = {{"Adagrad", n.attrs.get_or<double>("initial_accumulator_value", 0.1)}};
      else if (n.op == "ApplyFtrl") want = {{"Ftrl", n.attrs.get_or<double>("initial_accumulator_value", 0.1)}, {"Ftrl_1", 0.0}};
      else continue;
      auto where = [&n](const Status& s) { return InvalidArgument("node '" + n.name + "' (op " + n.op + "): " + s.message()); };
      const size_t arity = n.op == "ApplyAdagrad" ? 2 : n.op == "ApplyMomentum" ? 3 : 5;
      if (n.inputs.size() != arity)
        return where(InvalidArgument("has " + std::to_string(n.inputs.size()) + " inputs, the op takes " + std::to_string(arity)));
      auto v = variable_of(n);
      if (!v.ok()) return where(v.status());
      std::vector<SlotPlan> plan;
      for (const auto& [suffix, init] : want) {
        SlotPlan sp{(*v)->name + "/" + suffix, init, false};
        if (const Node* e = g_.find(sp.name)) {
          if (e->op != "VariableV2" || e->output_types.at(0) != (*v)->output_types.at(0))
            return where(InvalidArgument("its slot's name '" + sp.name + "' is taken by a node that is not a variable like '" +
                                         (*v)->name + "'"));
          sp.exists = true;
        }
        plan.push_back(sp);
      }
      update_grads_.insert(g_.node(n.inputs.at(n.op == "ApplyAdagrad" || n.op == "ApplyMomentum" ? 1 : 4).node)->name);  // FTRL: 4
      auto [it, fresh] = slots_.emplace((*v)->name, plan);
      if (!fresh && it->second.front().name != plan.front().name)
        return where(InvalidArgument("variable '" + (*v)->name + "' is updated by two different optimizers"));
      if (n.op == "ApplyAdam") {
        auto b1 = const_scalar(n, 1, "beta1");
        if (!b1.ok()) return where(b1.status());
        auto b2 = const_scalar(n, 2, "beta2");
        if (!b2.ok()) return where(b2.status());
        if (adam_.used && (adam_.beta1 != *b1 || adam_.beta2 != *b2))
          return where(InvalidArgument("its betas differ from another Adam update's: TensorFlow's beta powers are "
                                       "shared by every update of one optimizer"));
        if (!adam_.used) {
          adam_.used = true;
          adam_.beta1 = *b1;
          adam_.beta2 = *b2;
          adam_.dtype = (*v)->output_types.at(0);
          adam_.device = (*v)->requested_device;
          const Node* p1 = g_.find(adam_.beta1_power);
          const Node* p2 = g_.find(adam_.beta2_power);
          adam_.exist = p1 && p2 && p1->op == "VariableV2" && p2->op == "VariableV2";
          if (!adam_.exist && (p1 || p2 || used_.count("Adam_beta_powers")))
            return where(InvalidArgument("the names beta1_power/beta2_power are taken by nodes that are not variables"));
        }
        adam_.updates.push_back(n.name);
      }
    }
    // Initialisers: whatever runs a variable's initialising Assign runs its new slots'; what runs an
    // Adam update runs the beta powers' updates (when this export makes them).
    for (int id = 0; id < g_.num_nodes(); ++id) {
      const Node& n = *g_.node(id);
      // An initialising Assign: of a constant, a fill or a random value (not a restore).
      static const std::set<std::string> kInitial = {"Const", "Fill", "RandomUniform", "TruncatedNormal"};
      if (n.op == "Assign" && n.inputs.size() == 1 && kInitial.count(g_.node(n.inputs[0].node)->op)) {
        auto v = vars_.find(n.attrs.get_or<std::string>("var_name", ""));
        if (v == vars_.end()) continue;
        auto sl = slots_.find(v->second->name);
        if (sl == slots_.end()) continue;
        for (const SlotPlan& sp : sl->second)
          if (!sp.exists) extra_ctrl_[id].push_back(sp.name + "/Assign");
        if (adam_.used && !adam_.exist && sl->second.front().name == v->second->name + "/Adam") {
          extra_ctrl_[id].push_back(adam_.beta1_power + "/Assign");
          extra_ctrl_[id].push_back(adam_.beta2_power + "/Assign");
        }
      }
      if (n.op == "ApplyAdam" && adam_.used && !adam_.exist) {
        extra_ctrl_[id].push_back("Adam_beta_powers/Assign");
        extra_ctrl_[id].push_back("Adam_beta_powers/Assign_1");
      }
    }
    return Status::OK();
  }

  // A VariableV2 `name` like `v` (colocated with it), its Assign "<name>/Assign" of a Const
  // "<name>/Initializer/Const" filled with `value`.
  Status slot_variable(const Node& v, const std::string& name, const Shape& shape, DType dt, double value) {
    for (const std::string& taken : {name, name + "/Assign", name + "/Initializer/Const"})
      if (used_.count(taken)) return InvalidArgument("the slot node name '" + taken + "' is taken");
    used_.insert(name);
    used_.insert(name + "/Assign");
    used_.insert(name + "/Initializer/Const");
    auto place = [&](pb::NodeDef* nd) {
      if (!o_.clear_devices && !v.requested_device.empty()) nd->set_device(v.requested_device);
      attr(nd, "_class").mutable_list()->add_s("loc:@" + v.name);
    };
    pb::NodeDef* var = gd_.add_node();
    var->set_name(name);
    var->set_op("VariableV2");
    place(var);
    set_type(var, "dtype", dt);
    set_shape(var, "shape", shape);
    set_string(var, "container", "");
    set_string(var, "shared_name", "");
    if (!shape.fully_defined()) return InvalidArgument("variable '" + v.name + "' has shape " + shape.to_string() +
                                                       ": its slot needs a fully known shape");
    Tensor init(dt, shape);
    const int64_t count = init.num_elements();
    if (dt == DType::kFloat32) std::fill(init.data<float>(), init.data<float>() + count, static_cast<float>(value));
    else if (dt == DType::kFloat64) std::fill(init.data<double>(), init.data<double>() + count, value);
    else return InvalidArgument(std::string("a slot of a ") + dtype_name(dt) + " variable");
    pb::NodeDef* c = gd_.add_node();
    c->set_name(name + "/Initializer/Const");
    c->set_op("Const");
    place(c);
    set_type(c, "dtype", dt);
    AF_RETURN_IF_ERROR(tensor_proto(init, attr(c, "value").mutable_tensor()));
    pb::NodeDef* a = gd_.add_node();
    a->set_name(name + "/Assign");
    a->set_op("Assign");
    place(a);
    set_type(a, "T", dt);
    set_bool(a, "use_locking", true);
    set_bool(a, "validate_shape", true);
    a->add_input(name);
    a->add_input(name + "/Initializer/Const");
    return Status::OK();
  }

  // The slot variables of `v` (once), and Adam's beta powers with their updates (once).
  Status write_slots(const Node& v) {
    if (!written_slots_.insert(v.name).second) return Status::OK();
    for (const SlotPlan& sp : slots_.at(v.name))
      if (!sp.exists) AF_RETURN_IF_ERROR(slot_variable(v, sp.name, v.output_shapes.at(0), v.output_types.at(0), sp.initial));
    if (!adam_.used || adam_.exist || adam_written_ || slots_.at(v.name).front().name != v.name + "/Adam")
      return Status::OK();
    adam_written_ = true;
    AF_RETURN_IF_ERROR(slot_variable(v, adam_.beta1_power, Shape{}, adam_.dtype, adam_.beta1));
    AF_RETURN_IF_ERROR(slot_variable(v, adam_.beta2_power, Shape{}, adam_.dtype, adam_.beta2));
    // After every Adam update of a step: beta_power *= beta (TensorFlow's Adam/mul, Adam/Assign).
    const std::string scope = "Adam_beta_powers";
    for (int k = 0; k < 2; ++k) {
      const std::string power = k == 0 ? adam_.beta1_power : adam_.beta2_power;
      const std::string suffix = k == 0 ? "" : "_1";
      for (const std::string& taken : {scope + "/beta" + suffix, scope + "/mul" + suffix, scope + "/Assign" + suffix})
        if (!used_.insert(taken).second) return InvalidArgument("the node name '" + taken + "' is taken");
      Tensor beta(adam_.dtype, Shape{});
      if (adam_.dtype == DType::kFloat32) *beta.data<float>() = static_cast<float>(k == 0 ? adam_.beta1 : adam_.beta2);
      else *beta.data<double>() = k == 0 ? adam_.beta1 : adam_.beta2;
      pb::NodeDef* c = gd_.add_node();
      c->set_name(scope + "/beta" + suffix);
      c->set_op("Const");
      if (!o_.clear_devices && !adam_.device.empty()) c->set_device(adam_.device);
      set_type(c, "dtype", adam_.dtype);
      AF_RETURN_IF_ERROR(tensor_proto(beta, attr(c, "value").mutable_tensor()));
      pb::NodeDef* m = gd_.add_node();
      m->set_name(scope + "/mul" + suffix);
      m->set_op("Mul");
      if (!o_.clear_devices && !adam_.device.empty()) m->set_device(adam_.device);
      set_type(m, "T", adam_.dtype);
      m->add_input(power);
      m->add_input(scope + "/beta" + suffix);
      for (const std::string& u : adam_.updates) m->add_input("^" + u);
      pb::NodeDef* a = gd_.add_node();
      a->set_name(scope + "/Assign" + suffix);
      a->set_op("Assign");
      if (!o_.clear_devices && !adam_.device.empty()) a->set_device(adam_.device);
      attr(a, "_class").mutable_list()->add_s("loc:@" + power);
      set_type(a, "T", adam_.dtype);
      set_bool(a, "use_locking", true);
      set_bool(a, "validate_shape", true);
      a->add_input(power);
      a->add_input(scope + "/mul" + suffix);
    }
    return Status::OK();
  }

  const Graph& g_;
  const ExportGraphDefOptions& o_;
  std::map<std::string, std::vector<SlotPlan>> slots_;  // variable node name -> its slots
  std::set<std::string> written_slots_;
  std::set<std::string> update_grads_;  // the nodes computing the exported updates' gradients
  AdamPlan adam_;
  bool adam_written_ = false;
  std::map<int, std::vector<std::string>> extra_ctrl_;  // node id -> control inputs its consumers gain
  pb::GraphDef gd_;
  std::set<std::string> used_;
  std::map<std::string, const Node*> vars_;  // shared_name -> the VariableV2 node
};

}  // namespace

Result<std::string> export_graph_def(const Graph& g, const ExportGraphDefOptions& opts) {
  AF_ASSIGN_OR_RETURN(pb::GraphDef gd, Exporter(g, opts).run());
  std::string out;
  if (opts.format == GraphDefFormat::kText) {
    if (!google::protobuf::TextFormat::PrintToString(gd, &out)) return Internal("GraphDef: text format failed");
    return out;
  }
  if (gd.ByteSizeLong() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return InvalidArgument("GraphDef: " + std::to_string(gd.ByteSizeLong()) +
                           " bytes, more than protobuf's 2 GiB limit (freeze fewer or smaller constants)");
  if (!gd.SerializeToString(&out)) return Internal("GraphDef: serialization failed");
  return out;
}

Result<std::string> tf_graph_def_proto(const Graph& g) {
  ExportGraphDefOptions o;
  o.for_tensorboard = true;
  return export_graph_def(g, o);
}

}  // namespace actorflow
