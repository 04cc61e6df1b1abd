#include "graph/tf/tf_import.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <set>
#include <unordered_map>

#include "core/checked_math.h"
#include "core/file_read.h"
#include "graph/device_spec.h"
#include "proto/tf/graph.pb.h"

namespace actorflow {
namespace {

namespace pb = actorflow::tf;

constexpr uint64_t kMaxGraphDefBytes = uint64_t{1} << 30;
// The most elements a folded or decoded constant may have (a GraphDef's constant is stored whole
// in the file, so a larger one would be a lie or a spelled-out fill of one value).
constexpr int64_t kMaxConstElements = int64_t{1} << 28;

// Printable, at most 100 bytes: names from a file are shown like this in messages.
std::string printable(const std::string& s) {
  std::string out;
  for (char ch : s.substr(0, 100)) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > 100) out += "...";
  return out;
}

Result<DType> dtype_of(int tf) {
  switch (tf) {
    case pb::DT_FLOAT: return DType::kFloat32;
    case pb::DT_DOUBLE: return DType::kFloat64;
    case pb::DT_INT32: return DType::kInt32;
    case pb::DT_INT64: return DType::kInt64;
    case pb::DT_UINT8: return DType::kUInt8;
    case pb::DT_BOOL: return DType::kBool;
    default: break;
  }
  const std::string name = pb::DataType_IsValid(tf) ? pb::DataType_Name(static_cast<pb::DataType>(tf))
                                                     : "enum value " + std::to_string(tf);
  return InvalidArgument("dtype " + name +
                         " is not supported (actorflow graphs hold float32, float64, int32, int64, uint8, bool)");
}

Result<Shape> shape_of(const pb::TensorShapeProto& p) {
  if (p.unknown_rank()) {
    if (p.dim_size() != 0) return InvalidArgument("a shape of unknown rank lists dimensions");
    return Shape::unknown();
  }
  if (p.dim_size() > 254) return InvalidArgument("a shape of rank " + std::to_string(p.dim_size()) + " (at most 254)");
  std::vector<int64_t> dims;
  for (const auto& d : p.dim()) {
    if (d.size() < -1) return InvalidArgument("a shape has dimension " + std::to_string(d.size()));
    dims.push_back(d.size());
  }
  return Shape(std::move(dims));
}

// Copies `n` values of a typed repeated field into t (a single value fills the whole tensor, as
// TensorFlow writes splat constants); InvalidArgument when the count is neither 0, 1 nor n.
template <typename T, typename Field>
Status fill_typed(Tensor& t, const Field& f, int64_t n, const char* field) {
  T* out = t.data<T>();
  const int64_t have = f.size();
  if (have == 0) {
    std::fill(out, out + n, T{});
  } else if (have == n) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(f.Get(static_cast<int>(i)));
  } else if (have == 1 && n > 1) {
    std::fill(out, out + n, static_cast<T>(f.Get(0)));
  } else {
    return InvalidArgument(std::string("tensor has ") + std::to_string(have) + " " + field + " values for " +
                           std::to_string(n) + " elements");
  }
  return Status::OK();
}

// A TensorProto as an actorflow tensor: tensor_content (exactly elements x dtype size bytes) or
// the dtype's typed field; sizes checked before anything is allocated.
Result<Tensor> tensor_of(const pb::TensorProto& p, int64_t max_bytes) {
  AF_ASSIGN_OR_RETURN(DType dt, dtype_of(p.dtype()));
  AF_ASSIGN_OR_RETURN(Shape shape, shape_of(p.tensor_shape()));
  if (!shape.fully_defined()) return InvalidArgument("tensor shape " + shape.to_string() + " is not fully defined");
  int64_t n = 1;
  for (int64_t d : shape.dims())
    if (!checked_mul(n, d, &n)) return InvalidArgument("tensor shape " + shape.to_string() + " overflows");
  if (n > kMaxConstElements)
    return InvalidArgument("tensor of " + std::to_string(n) + " elements (at most 2^28 in a GraphDef constant)");
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dt);
  if (static_cast<int64_t>(bytes) > max_bytes)
    return InvalidArgument("a tensor of " + std::to_string(bytes) + " bytes exceeds what the import may still " +
                           "materialise (" + std::to_string(max_bytes) + " bytes: constants are bounded by 64 MiB " +
                           "plus 16 times the GraphDef's size)");
  if (!p.tensor_content().empty()) {
    if (p.tensor_content().size() != bytes)
      return InvalidArgument("tensor_content holds " + std::to_string(p.tensor_content().size()) + " bytes, a " +
                             dtype_name(dt) + " tensor of shape " + shape.to_string() + " needs " +
                             std::to_string(bytes));
    Tensor t(dt, shape);
    if (bytes) std::memcpy(t.raw_data(), p.tensor_content().data(), bytes);
    if (dt == DType::kBool)
      for (size_t i = 0; i < bytes; ++i)
        if (static_cast<const uint8_t*>(t.raw_data())[i] > 1) return InvalidArgument("bool tensor holds a byte other than 0 or 1");
    return t;
  }
  Tensor t(dt, shape);
  switch (dt) {
    case DType::kFloat32: AF_RETURN_IF_ERROR((fill_typed<float>(t, p.float_val(), n, "float_val"))); break;
    case DType::kFloat64: AF_RETURN_IF_ERROR((fill_typed<double>(t, p.double_val(), n, "double_val"))); break;
    case DType::kInt32: AF_RETURN_IF_ERROR((fill_typed<int32_t>(t, p.int_val(), n, "int_val"))); break;
    case DType::kInt64: AF_RETURN_IF_ERROR((fill_typed<int64_t>(t, p.int64_val(), n, "int64_val"))); break;
    case DType::kBool: AF_RETURN_IF_ERROR((fill_typed<bool>(t, p.bool_val(), n, "bool_val"))); break;
    case DType::kUInt8: {
      for (int v : p.int_val())
        if (v < 0 || v > 255) return InvalidArgument("uint8 tensor holds int_val " + std::to_string(v));
      AF_RETURN_IF_ERROR((fill_typed<uint8_t>(t, p.int_val(), n, "int_val")));
      break;
    }
    default: return InvalidArgument("unsupported dtype");
  }
  return t;
}

// A constant's values as int64 (int32 or int64 tensors), or an error naming `what`.
Result<std::vector<int64_t>> int_values(const Tensor& t, const std::string& what) {
  std::vector<int64_t> out;
  if (t.dtype() == DType::kInt32) {
    for (int64_t i = 0; i < t.num_elements(); ++i) out.push_back(t.data<int32_t>()[i]);
  } else if (t.dtype() == DType::kInt64) {
    out.assign(t.data<int64_t>(), t.data<int64_t>() + t.num_elements());
  } else {
    return InvalidArgument(what + " must be int32 or int64, got " + dtype_name(t.dtype()));
  }
  return out;
}

Tensor int_tensor(DType dt, const std::vector<int64_t>& v, const Shape& shape) {
  Tensor t(dt, shape);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::kInt32) t.data<int32_t>()[i] = static_cast<int32_t>(v[i]);
    else t.data<int64_t>()[i] = v[i];
  }
  return t;
}

// Everything about the import in progress: the trial graph, the name map and the error context.
class Importer {
 public:
  Importer(Graph& g, const Scope& scope, const ImportGraphDefOptions& opts, std::string source, size_t data_bytes)
      : g_(g), scope_(scope), opts_(opts), source_(std::move(source)) {
    const_limit_ = (int64_t{64} << 20) + 16 * static_cast<int64_t>(data_bytes);
    const_budget_ = const_limit_;
    prefix_ = scope.name_prefix();
    if (!opts.prefix.empty()) prefix_ += opts.prefix + "/";
  }

  Status run(const pb::GraphDef& def);
  ImportedGraph result() { return std::move(out_); }

 private:
  // The node being translated.
  struct Ctx {
    const pb::NodeDef* nd = nullptr;
    std::string tf_name, op, name, device;
    std::vector<Endpoint> in;       // data inputs, resolved
    std::vector<std::string> in_names;  // as the NodeDef spells them
    std::vector<int> ctrl;
    std::vector<std::string> coloc;
    std::set<std::string> used;     // attributes read
    std::map<std::string, const pb::AttrValue*> attrs;
  };

  Status err(const Ctx& c, const std::string& why) const {
    return InvalidArgument("node '" + printable(c.tf_name) + "' (op " + printable(c.op) + ") in " + source_ + ": " + why);
  }
  Status err_attr(const Ctx& c, const std::string& attr, const std::string& why) const {
    return err(c, "attribute '" + printable(attr) + "' " + why);
  }

  // ---- attributes -------------------------------------------------------------------------
  const pb::AttrValue* attr(Ctx& c, const std::string& name) {
    c.used.insert(name);
    auto it = c.attrs.find(name);
    return it == c.attrs.end() ? nullptr : it->second;
  }
  Result<DType> attr_type(Ctx& c, const std::string& name) {
    const pb::AttrValue* a = attr(c, name);
    if (!a || a->value_case() != pb::AttrValue::kType) return err_attr(c, name, "is missing or not a type");
    auto t = dtype_of(a->type());
    if (!t.ok()) return err_attr(c, name, t.status().message());
    return *t;
  }
  Result<Shape> attr_shape(Ctx& c, const std::string& name) {
    const pb::AttrValue* a = attr(c, name);
    if (!a) return Shape::unknown();
    if (a->value_case() != pb::AttrValue::kShape) return err_attr(c, name, "is not a shape");
    auto s = shape_of(a->shape());
    if (!s.ok()) return err_attr(c, name, s.status().message());
    return *s;
  }
  Result<bool> attr_bool(Ctx& c, const std::string& name, bool dflt) {
    const pb::AttrValue* a = attr(c, name);
    if (!a) return dflt;
    if (a->value_case() != pb::AttrValue::kB) return err_attr(c, name, "is not a bool");
    return a->b();
  }
  Result<int64_t> attr_int(Ctx& c, const std::string& name, int64_t dflt) {
    const pb::AttrValue* a = attr(c, name);
    if (!a) return dflt;
    if (a->value_case() != pb::AttrValue::kI) return err_attr(c, name, "is not an int");
    return a->i();
  }
  Result<std::string> attr_string(Ctx& c, const std::string& name, const std::string& dflt) {
    const pb::AttrValue* a = attr(c, name);
    if (!a) return dflt;
    if (a->value_case() != pb::AttrValue::kS) return err_attr(c, name, "is not a string");
    return a->s();
  }
  Result<std::vector<int64_t>> attr_ints(Ctx& c, const std::string& name, bool required) {
    const pb::AttrValue* a = attr(c, name);
    if (!a) {
      if (required) return err_attr(c, name, "is missing");
      return std::vector<int64_t>{};
    }
    if (a->value_case() != pb::AttrValue::kList) return err_attr(c, name, "is not a list of ints");
    return std::vector<int64_t>(a->list().i().begin(), a->list().i().end());
  }
  // data_format must be NHWC (actorflow's only layout).
  Status check_nhwc(Ctx& c) {
    AF_ASSIGN_OR_RETURN(std::string f, attr_string(c, "data_format", "NHWC"));
    if (f != "NHWC") return err_attr(c, "data_format", "is \"" + printable(f) + "\": only NHWC is supported");
    return Status::OK();
  }
  Status check_conv_attrs(Ctx& c) {
    AF_RETURN_IF_ERROR(check_nhwc(c));
    AF_ASSIGN_OR_RETURN(auto dil, attr_ints(c, "dilations", false));
    for (int64_t d : dil)
      if (d != 1) return err_attr(c, "dilations", "is not all 1: dilated convolutions are not supported");
    AF_ASSIGN_OR_RETURN(auto ep, attr_ints(c, "explicit_paddings", false));
    if (!ep.empty()) return err_attr(c, "explicit_paddings", "is not empty: explicit padding is not supported");
    attr(c, "use_cudnn_on_gpu");
    return Status::OK();
  }
  // Copies the window attributes (strides, padding[, ksize]) as actorflow's attrs.
  Status window_attrs(Ctx& c, AttrMap& a, bool ksize) {
    AF_ASSIGN_OR_RETURN(auto strides, attr_ints(c, "strides", true));
    a.set("strides", strides);
    AF_ASSIGN_OR_RETURN(std::string pad, attr_string(c, "padding", ""));
    if (pad != "SAME" && pad != "VALID") return err_attr(c, "padding", "is \"" + printable(pad) + "\" (SAME or VALID)");
    a.set("padding", pad);
    if (ksize) {
      AF_ASSIGN_OR_RETURN(auto k, attr_ints(c, "ksize", true));
      a.set("ksize", k);
    }
    return Status::OK();
  }

  // ---- inputs ------------------------------------------------------------------------------
  const Node* node_of(const Endpoint& e) const { return g_.node(e.node); }
  // Input i's value when it is a constant (an actorflow Const node), else nullptr.
  const Tensor* const_in(const Ctx& c, size_t i) const {
    const Node* n = node_of(c.in[i]);
    if (n->op != "Const") return nullptr;
    auto it = n->attrs.all().find("value");
    return it == n->attrs.all().end() ? nullptr : std::get_if<Tensor>(&it->second);
  }
  // Input i as constant integers, or an error saying it must be a constant.
  Result<std::vector<int64_t>> const_ints(const Ctx& c, size_t i, const std::string& what) {
    const Tensor* t = const_in(c, i);
    if (!t)
      return err(c, what + " (input " + std::to_string(i) + ", '" + printable(c.in_names[i]) +
                        "') is computed at run time; actorflow needs it constant at import");
    auto v = int_values(*t, what);
    if (!v.ok()) return err(c, v.status().message());
    return *v;
  }
  Status want_inputs(const Ctx& c, size_t n) const {
    if (c.in.size() != n)
      return err(c, "has " + std::to_string(c.in.size()) + " data inputs, the op takes " + std::to_string(n));
    return Status::OK();
  }
  // The variable node behind input i (a VariableV2 made from a VariableV2 or VarHandleOp).
  Result<Node*> var_in(const Ctx& c, size_t i) {
    Node* n = g_.node(c.in[i].node);
    if (n->op != "VariableV2")
      return err(c, "input " + std::to_string(i) + " ('" + printable(c.in_names[i]) + "') is a " + n->op +
                        ", not a variable");
    return n;
  }
  // Resolves axis `a` of a rank-`rank` tensor (negative counts from the end).
  Result<int64_t> axis(const Ctx& c, int64_t a, int rank, const std::string& what) {
    if (rank < 0) {
      if (a >= 0) return a;
      return err(c, what + " " + std::to_string(a) + " is negative and the input's rank is unknown");
    }
    if (a < -rank || a >= rank)
      return err(c, what + " " + std::to_string(a) + " is outside a rank-" + std::to_string(rank) + " tensor");
    return a < 0 ? a + rank : a;
  }

  // ---- emitting ----------------------------------------------------------------------------
  // Adds an actorflow node for the current TF node (or a helper of it, named `name`).
  Result<Node*> emit(const Ctx& c, const std::string& op, std::vector<Endpoint> inputs, AttrMap attrs,
                     const std::string& name = "", const std::string& device_override = "") {
    Node n;
    n.name = name.empty() ? c.name : name;
    n.op = op;
    n.inputs = std::move(inputs);
    if (name.empty() || name == c.name) n.control_inputs = c.ctrl;
    n.requested_device = device_override.empty() ? c.device : device_override;
    n.colocate_with = c.coloc;
    n.attrs = std::move(attrs);
    if (g_.find(n.name)) return err(c, "a node named '" + printable(n.name) + "' already exists in the graph");
    Status s = infer_node_shapes(g_, n);
    if (!s.ok()) return err(c, s.message());
    auto added = g_.add_node(std::move(n));
    if (!added.ok()) return err(c, added.status().message());
    return *added;
  }
  Result<Node*> emit_const(const Ctx& c, Tensor t, const std::string& name = "") {
    // Constants a small file spells large (a splat value, a folded Tile) count against a budget.
    const int64_t bytes = static_cast<int64_t>(t.bytes());
    if (bytes > const_budget_)
      return err(c, "its constants would exceed " + std::to_string(const_limit_) +
                        " bytes (64 MiB plus 16 times the GraphDef's size)");
    const_budget_ -= bytes;
    AttrMap a;
    a.set("dtype", t.dtype());
    a.set("value", std::move(t));
    return emit(c, "Const", {}, std::move(a), name);
  }
  // A node acting on variable `v` (actorflow's var_name/dtype/shape attrs), on the TF node's
  // device or, without one, the variable's.
  Result<Node*> emit_var_op(const Ctx& c, Node* v, const std::string& op, std::vector<Endpoint> inputs, AttrMap a = {}) {
    a.set("var_name", v->attrs.get_or<std::string>("shared_name", v->name));
    a.set("dtype", v->output_types[0]);
    a.set("shape", v->output_shapes[0]);
    return emit(c, op, std::move(inputs), std::move(a), "", c.device.empty() ? v->requested_device : "");
  }

  // A slot variable of an optimizer update whose initial value must be a fill of `want` (or, for
  // Adagrad's accumulator, any positive fill, which becomes the update's attribute): checked once
  // every node is imported, since the initializer may come later in the GraphDef.
  struct SlotCheck {
    std::string tf_name, op;  // the update, for messages
    int update = -1;          // its actorflow node
    int slot = -1;            // the slot's variable node
    std::string role;         // "m", "accumulator", ...
    double want = 0;
    bool adagrad = false;
  };
  Status check_slots();
  Status link_slots();
  Status string_const(Ctx& c);
  Status half_const(Ctx& c);
  // The `value` TensorProto of a Const node (no inputs), checked to have dtype `want`.
  Result<const pb::TensorProto*> const_value(Ctx& c, std::initializer_list<int> want) {
    AF_RETURN_IF_ERROR(want_inputs(c, 0));
    attr(c, "dtype");
    const pb::AttrValue* v = attr(c, "value");
    if (!v || v->value_case() != pb::AttrValue::kTensor) return err_attr(c, "value", "is missing or not a tensor");
    if (std::find(want.begin(), want.end(), v->tensor().dtype()) == want.end())
      return err_attr(c, "value", "has a dtype other than its dtype attribute's");
    return &v->tensor();
  }
  // Fill's value (input 1) as a double: a constant float or integer scalar, else an error.
  Result<double> fill_value(const Ctx& c) {
    const Tensor* v = const_in(c, 1);
    if (!v || v->num_elements() != 1 || v->shape().rank() != 0)
      return err(c, "value (input 1) must be a constant scalar at import");
    switch (v->dtype()) {
      case DType::kFloat32: return static_cast<double>(v->data<float>()[0]);
      case DType::kFloat64: return v->data<double>()[0];
      case DType::kInt32: return static_cast<double>(v->data<int32_t>()[0]);
      case DType::kInt64: return static_cast<double>(v->data<int64_t>()[0]);
      default: return err(c, std::string("filling with a ") + dtype_name(v->dtype()) + " value is not supported");
    }
  }
  Status save_restore(Ctx& c);
  // A sharded Saver's string ops (StaticRegexFullMatch, Select and Pack of strings, StringJoin,
  // ShardedFilename, MergeV2Checkpoints) as graph/string_ops.h's; *done false for other nodes.
  Status saver_strings(Ctx& c, bool* done);
  std::set<std::pair<int, int>> string_vec_eps_;  // string endpoints holding a vector of strings
  Result<std::vector<std::string>> const_strings(const Ctx& c, size_t i, const std::string& what);
  Status mark_save_restore(const pb::GraphDef& def, const std::unordered_map<std::string, int>& index,
                           std::vector<char>* dropped);

  Status translate(Ctx& c);
  Status fold_or_fail(Ctx& c, bool* folded);
  Status log_softmax(Ctx& c);

  Graph& g_;
  const Scope& scope_;
  const ImportGraphDefOptions& opts_;
  std::string source_;
  std::string prefix_;
  ImportedGraph out_;
  // TF tensor "name:i" -> actorflow endpoint (also the remapped ones).
  std::unordered_map<std::string, Endpoint> map_;
  // TF node name -> the actorflow node for it (for control inputs).
  std::unordered_map<std::string, int> node_map_;
  std::vector<SlotCheck> slot_checks_;
  // String tensors (actorflow has none: uint8 vectors of the bytes, see tf_string_tensor): the
  // endpoints carrying one, and the values of string constants by actorflow node id.
  std::set<std::pair<int, int>> string_eps_;
  std::unordered_map<int, std::vector<std::string>> strings_;
  std::vector<int> save_nodes_, restore_nodes_;
  // Integer shape values known only in part at import: per element, its value or "dimension `dim`
  // of endpoint (node, index)" (a run-time batch size). Shape of a partly known shape makes them;
  // StridedSlice, Pack, Identity and Cast carry them; Reshape and Fill read them (below).
  struct SymDim {
    int64_t value = 0;
    int node = -1, index = 0, dim = 0;  // node < 0: known value
    int64_t scale = 1;                  // node >= 0: the element is scale * that dimension
    bool same(const SymDim& o) const {
      return node < 0 ? (o.node < 0 && value == o.value)
                      : (node == o.node && index == o.index && dim == o.dim && scale == o.scale);
    }
  };
  std::map<std::pair<int, int>, std::vector<SymDim>> sym_;
  // Input i's elements as SymDims (a constant integer input, or a symbolic one); false otherwise.
  bool sym_in(const Ctx& c, size_t i, std::vector<SymDim>* out) const {
    if (const Tensor* t = const_in(c, i)) {
      auto v = int_values(*t, "value");
      if (!v.ok()) return false;
      out->clear();
      for (int64_t x : *v) out->push_back(SymDim{x, -1, 0, 0});
      return true;
    }
    auto it = sym_.find({c.in[i].node, c.in[i].index});
    if (it == sym_.end()) return false;
    *out = it->second;
    return true;
  }
  // `base` (a helper node's name, under the prefix), or base_1, base_2, ...: a name neither the
  // graph nor the GraphDef has.
  std::string fresh(const std::string& base) const {
    std::string name = base;
    for (int k = 1; g_.find(name) || tf_names_.count(name.substr(std::min(name.size(), prefix_.size()))); ++k)
      name = base + "_" + std::to_string(k);
    return name;
  }
  std::set<std::string> tf_names_;  // every node name of the GraphDef
  Status strided_slice(Ctx& c);
  Status pack(Ctx& c);
  Status fill_at_run_time(Ctx& c, const std::vector<SymDim>& dims);
  // `value` (dtype dt) filled into `dims` at run time (see fill_at_run_time); the last node is
  // named `name` ("" for the TF node's own name).
  Result<Node*> fill_dims(Ctx& c, const std::vector<SymDim>& dims, DType dt, double value, const std::string& name);
  // The run-time shape of `in` as dtype dt (int32 or int64), named `name` ("" for the TF node's),
  // its known dimensions recorded as SymDims.
  Result<Node*> run_time_shape(Ctx& c, Endpoint in, DType dt, const std::string& name);
  // A symbolic element at run time: a scalar of dtype dt (int32, int64 or float), named `name`.
  Result<Node*> sym_scalar(Ctx& c, const SymDim& d, DType dt, const std::string& name);
  Status broadcast_gradient_args(Ctx& c);
  Status gather_sym(Ctx& c, const std::vector<SymDim>& params, bool* done);
  Status prod_sym(Ctx& c, const std::vector<SymDim>& x);
  Status scalar_op_sym(Ctx& c, bool* done);
  Status slice_or_concat_sym(Ctx& c, bool* done);
  // float16/bfloat16 constants, widened to float32 Consts: only a Cast may read them.
  std::set<std::pair<int, int>> widened_eps_;  // SaveV2 / RestoreV2, wired to slots in link_slots
  int64_t const_limit_ = 0, const_budget_ = 0;  // bytes of constants the import may materialise
};

// TensorFlow's rule for node names: [A-Za-z0-9.][A-Za-z0-9_.\-/>]* (so ':' and '^' never occur).
bool valid_node_name(const std::string& s) {
  auto first = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.'; };
  auto rest = [&first](char ch) { return first(ch) || ch == '_' || ch == '-' || ch == '/' || ch == '>'; };
  if (s.empty() || !first(s[0])) return false;
  return std::all_of(s.begin() + 1, s.end(), rest);
}

// Splits "name:i" / "name" / "^name".
bool split_input(const std::string& s, std::string* node, int* index, bool* control) {
  *control = !s.empty() && s[0] == '^';
  std::string rest = *control ? s.substr(1) : s;
  *index = 0;
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos && !*control) {
    const std::string idx = rest.substr(colon + 1);
    if (idx.empty() || idx.size() > 6 || idx.find_first_not_of("0123456789") != std::string::npos) return false;
    *index = std::stoi(idx);
    rest = rest.substr(0, colon);
  }
  *node = rest;
  return !rest.empty();
}

// TensorFlow's ops that write or read checkpoint files.
const std::set<std::string>& save_restore_ops() {
  static const std::set<std::string> ops = {"SaveV2", "RestoreV2", "MergeV2Checkpoints", "SaveSlices",
                                            "RestoreSlice", "Save", "Restore"};
  return ops;
}

// Marks the save/restore subgraph (see ImportGraphDefOptions::drop_save_restore). Inputs were
// checked to name nodes of the GraphDef.
Status Importer::mark_save_restore(const pb::GraphDef& def, const std::unordered_map<std::string, int>& index,
                                   std::vector<char>* dropped) {
  const std::set<std::string>& kSeeds = save_restore_ops();
  const int n = def.node_size();
  std::vector<std::vector<int>> consumers(static_cast<size_t>(n)), producers(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    for (const auto& in : def.node(i).input()) {
      std::string node;
      int idx;
      bool ctl;
      if (!split_input(in, &node, &idx, &ctl)) continue;
      auto it = index.find(node);
      if (it == index.end()) continue;
      consumers[static_cast<size_t>(it->second)].push_back(i);
      producers[static_cast<size_t>(i)].push_back(it->second);
    }
  }
  std::vector<int> work;
  for (int i = 0; i < n; ++i)
    if (kSeeds.count(def.node(i).op())) {
      (*dropped)[static_cast<size_t>(i)] = 1;
      work.push_back(i);
    }
  while (!work.empty()) {  // consumers, transitively
    const int i = work.back();
    work.pop_back();
    for (int j : consumers[static_cast<size_t>(i)])
      if (!(*dropped)[static_cast<size_t>(j)]) {
        (*dropped)[static_cast<size_t>(j)] = 1;
        work.push_back(j);
      }
  }
  // Producers whose every consumer is dropped, transitively (only above dropped nodes).
  for (int i = 0; i < n; ++i)
    if ((*dropped)[static_cast<size_t>(i)]) work.push_back(i);
  while (!work.empty()) {
    const int i = work.back();
    work.pop_back();
    for (int p : producers[static_cast<size_t>(i)]) {
      if ((*dropped)[static_cast<size_t>(p)]) continue;
      bool all = true;
      for (int c : consumers[static_cast<size_t>(p)]) all = all && (*dropped)[static_cast<size_t>(c)];
      if (!all) continue;
      (*dropped)[static_cast<size_t>(p)] = 1;
      work.push_back(p);
    }
  }
  return Status::OK();
}

Status Importer::run(const pb::GraphDef& def) {
  if (def.has_library() && def.library().ByteSizeLong() > 0)
    return InvalidArgument(source_ + ": the GraphDef has a function library; functions are not supported");
  // Names, duplicates and the order: inputs before their consumers (Kahn over data and control inputs).
  std::unordered_map<std::string, int> index;
  const int n = def.node_size();
  for (int i = 0; i < n; ++i) {
    const auto& nd = def.node(i);
    if (nd.name().empty()) return InvalidArgument(source_ + ": node " + std::to_string(i) + " has no name");
    if (!valid_node_name(nd.name()))
      return InvalidArgument("node '" + printable(nd.name()) + "' in " + source_ +
                             ": not a TensorFlow node name ([A-Za-z0-9.][A-Za-z0-9_.-/>]*)");
    if (nd.op().empty())
      return InvalidArgument("node '" + printable(nd.name()) + "' in " + source_ + " has no op");
    if (!index.emplace(nd.name(), i).second)
      return InvalidArgument("node '" + printable(nd.name()) + "' in " + source_ + " is defined twice");
    tf_names_.insert(nd.name());
  }
  for (const auto& [tf_name, out] : opts_.input_map) {
    std::string node;
    int idx;
    bool ctl;
    if (!split_input(tf_name, &node, &idx, &ctl) || ctl)
      return InvalidArgument(source_ + ": input_map key '" + printable(tf_name) + "' is not a tensor name");
    if (!index.count(node))
      return InvalidArgument(source_ + ": input_map names '" + printable(tf_name) + "', which the GraphDef does not have");
    if (!out.valid() || out.node()->id < 0 || out.node()->id >= g_.num_nodes() || g_.node(out.node()->id)->name != out.node()->name)
      return InvalidArgument(source_ + ": input_map of '" + printable(tf_name) + "' is not an output of the scope's graph");
    map_[node + ":" + std::to_string(idx)] = out.endpoint();
  }
  std::vector<char> dropped(static_cast<size_t>(n), 0);
  if (opts_.drop_save_restore) {
    AF_RETURN_IF_ERROR(mark_save_restore(def, index, &dropped));
  } else {
    for (const auto& nd : def.node())
      if (save_restore_ops().count(nd.op()) && nd.op() != "SaveV2" && nd.op() != "RestoreV2" &&
          nd.op() != "MergeV2Checkpoints")
        return InvalidArgument("node '" + printable(nd.name()) + "' (op " + printable(nd.op()) + ") in " + source_ +
                               ": only SaveV2, RestoreV2 and MergeV2Checkpoints of TensorFlow's save/restore ops run "
                               "in actorflow (TensorFlow's V1 slices do not); ImportGraphDefOptions::drop_save_restore "
                               "leaves that subgraph out");
  }
  std::vector<int> pending(static_cast<size_t>(n), 0);
  std::vector<std::vector<int>> consumers(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto& nd = def.node(i);
    if (dropped[static_cast<size_t>(i)]) {
      out_.dropped.push_back(nd.name());
      continue;
    }
    for (const auto& in : nd.input()) {
      std::string node;
      int idx;
      bool ctl;
      if (!split_input(in, &node, &idx, &ctl))
        return InvalidArgument("node '" + printable(nd.name()) + "' (op " + printable(nd.op()) + ") in " + source_ +
                               ": input '" + printable(in) + "' is not a tensor name");
      auto it = index.find(node);
      if (it == index.end())
        return InvalidArgument("node '" + printable(nd.name()) + "' (op " + printable(nd.op()) + ") in " + source_ +
                               ": input '" + printable(in) + "' names no node of the GraphDef");
      if (!ctl && map_.count(node + ":" + std::to_string(idx))) continue;  // remapped: no edge
      ++pending[static_cast<size_t>(i)];
      consumers[static_cast<size_t>(it->second)].push_back(i);
    }
  }
  std::vector<int> ready;
  for (int i = n - 1; i >= 0; --i)
    if (pending[static_cast<size_t>(i)] == 0 && !dropped[static_cast<size_t>(i)]) ready.push_back(i);
  int done = static_cast<int>(out_.dropped.size());
  while (!ready.empty()) {
    const int i = ready.back();
    ready.pop_back();
    ++done;
    const auto& nd = def.node(i);
    Ctx c;
    c.nd = &nd;
    c.tf_name = nd.name();
    c.op = nd.op();
    c.name = prefix_ + nd.name();
    for (const auto& e : nd.attr())
      if (!c.attrs.emplace(e.key(), &e.value()).second) return err_attr(c, e.key(), "is given twice");
    for (const auto& in : nd.input()) {
      std::string node;
      int idx;
      bool ctl;
      split_input(in, &node, &idx, &ctl);
      if (ctl) {
        c.ctrl.push_back(node_map_.at(node));
        continue;
      }
      auto it = map_.find(node + ":" + std::to_string(idx));
      if (it == map_.end())
        return err(c, "input '" + printable(in) + "' names an output that node '" + printable(node) + "' does not have");
      c.in.push_back(it->second);
      c.in_names.push_back(in);
    }
    std::string dev = opts_.clear_devices ? "" : nd.device();
    if (!dev.empty()) {
      auto spec = DeviceSpec::parse(dev);
      if (!spec.ok()) return err(c, "device '" + printable(dev) + "': " + spec.status().message());
      // As TensorFlow's import under a device scope: the node's own fields win, the scope's fill
      // the others (replica_device_setter's "/job:worker" under "/job:worker/task:2" is task 2's).
      if (!scope_.device().empty()) {
        auto outer = DeviceSpec::parse(scope_.device());
        if (outer.ok()) {
          spec->fill_from(*outer);
          dev = spec->to_string();
        }
      }
    } else {
      dev = scope_.device();
    }
    c.device = dev;
    if (const pb::AttrValue* cls = attr(c, "_class")) {
      if (cls->value_case() != pb::AttrValue::kList) return err_attr(c, "_class", "is not a list of strings");
      for (const auto& s : cls->list().s()) {
        if (s.rfind("loc:@", 0) != 0) return err_attr(c, "_class", "holds '" + printable(s) + "', not loc:@<node>");
        const std::string target = s.substr(5);
        if (!index.count(target))
          return err_attr(c, "_class", "colocates with '" + printable(target) + "', which the GraphDef does not have");
        c.coloc.push_back(prefix_ + target);
      }
    }
    const int before = g_.num_nodes();
    AF_RETURN_IF_ERROR(translate(c));
    if (g_.num_nodes() == before) return err(c, "made no node");  // every translation adds one
    Node* made = g_.find(c.name);
    if (!made) return err(c, "made no node of its name");
    for (const auto& [k, v] : c.attrs) {
      if (c.used.count(k) || (!k.empty() && k[0] == '_')) continue;
      return err_attr(c, k, "is not supported (actorflow does not know what it changes)");
    }
    if ((c.op == "Identity" || c.op == "Snapshot" || c.op == "StopGradient" || c.op == "Cast") && c.in.size() == 1 &&
        made->num_outputs() == 1 &&
        (made->output_types[0] == DType::kInt32 || made->output_types[0] == DType::kInt64)) {
      auto sv = sym_.find({c.in[0].node, c.in[0].index});
      if (sv != sym_.end()) {
        std::vector<SymDim> copy = sv->second;
        sym_[{made->id, 0}] = std::move(copy);
      }
    }
    node_map_[nd.name()] = made->id;
    out_.nodes[nd.name()] = made;
    for (int k = 0; k < made->num_outputs(); ++k) {
      const std::string key = nd.name() + ":" + std::to_string(k);
      if (!map_.count(key)) map_[key] = Endpoint{made->id, k};
    }
    for (int j : consumers[static_cast<size_t>(i)])
      if (--pending[static_cast<size_t>(j)] == 0) ready.push_back(j);
  }
  if (done != n) {
    for (int i = 0; i < n; ++i)
      if (pending[static_cast<size_t>(i)] > 0 && !dropped[static_cast<size_t>(i)])
        return InvalidArgument("node '" + printable(def.node(i).name()) + "' (op " + printable(def.node(i).op()) +
                               ") in " + source_ +
                               " is on a cycle: control flow (while loops) is not supported");
  }
  AF_RETURN_IF_ERROR(check_slots());
  AF_RETURN_IF_ERROR(link_slots());
  for (const auto& [key, e] : map_) {
    Node* nd = g_.node(e.node);
    out_.outputs[key] = Output(nd, e.index);
    if (key.size() > 2 && key.compare(key.size() - 2, 2, ":0") == 0) out_.outputs[key.substr(0, key.size() - 2)] = Output(nd, e.index);
  }
  return Status::OK();
}

// actorflow's variable actor keeps the optimizer slots itself, starting them at TensorFlow's
// defaults (zeros; RMSProp's ms at one; Adagrad's accumulator at the update's attribute). The
// GraphDef's slot variables must therefore be initialised to exactly that by an Assign of a
// constant or a Fill, else the imported update would compute something else.
Status Importer::check_slots() {
  if (slot_checks_.empty()) return Status::OK();
  std::unordered_multimap<std::string, int> assigns;  // variable name -> its Assign nodes
  for (int i = 0; i < g_.num_nodes(); ++i)
    if (g_.node(i)->op == "Assign") assigns.emplace(g_.node(i)->attrs.get_or<std::string>("var_name", ""), i);
  for (const SlotCheck& sc : slot_checks_) {
    const Node* slot = g_.node(sc.slot);
    const std::string var = slot->attrs.get_or<std::string>("shared_name", slot->name);
    bool found = false;
    double value = 0;
    bool uniform = true;
    // The initial value: a Fill, a float32 Const, or (FTRL's accumulator, TensorFlow's
    // `ones * initial_accumulator_value`) a Mul of two of them, computed in float32 as TensorFlow
    // does. *ok false when the node is none of these; *same false when its elements differ.
    std::function<void(const Node*, int, float*, bool*, bool*)> start_of = [&](const Node* v, int depth, float* out,
                                                                               bool* ok, bool* same) {
      *ok = false;
      if (v->op == "Fill") {
        *out = static_cast<float>(v->attrs.get_or<double>("value", 0));
        *ok = true;
      } else if (v->op == "Const") {
        auto t = v->attrs.get<Tensor>("value");
        if (!t.ok() || t->dtype() != DType::kFloat32 || t->num_elements() < 1) return;
        const float* p = t->data<float>();
        *out = p[0];
        for (int64_t k = 1; k < t->num_elements(); ++k) *same = *same && p[k] == p[0];
        *ok = true;
      } else if (v->op == "Mul" && v->inputs.size() == 2 && depth < 2) {
        float a = 0, b = 0;
        bool oka = false, okb = false;
        start_of(g_.node(v->inputs[0].node), depth + 1, &a, &oka, same);
        start_of(g_.node(v->inputs[1].node), depth + 1, &b, &okb, same);
        *out = a * b;
        *ok = oka && okb;
      }
    };
    auto range = assigns.equal_range(var);
    for (auto it = range.first; it != range.second && !found; ++it) {
      const Node* n = g_.node(it->second);
      if (n->inputs.size() != 1) continue;
      float f = 0;
      start_of(g_.node(n->inputs[0].node), 0, &f, &found, &uniform);
      value = f;
    }
    const std::string where = "node '" + printable(sc.tf_name) + "' (op " + printable(sc.op) + ") in " + source_ + ": ";
    if (!found)
      return InvalidArgument(where + "its " + sc.role + " slot '" + printable(slot->name) +
                             "' has no initializer assigning a constant; actorflow keeps the slot in the variable "
                             "and must know its initial value");
    if (!uniform) return InvalidArgument(where + "its " + sc.role + " slot '" + printable(slot->name) + "' starts at differing values");
    if (sc.adagrad) {
      // Adagrad's accumulator must start above 0, FTRL's at 0 or above (as TensorFlow's checks).
      const bool ftrl = sc.op.find("Ftrl") != std::string::npos;
      if (ftrl ? !(value >= 0) : !(value > 0))
        return InvalidArgument(where + "its accumulator slot '" + printable(slot->name) + "' starts at " +
                               std::to_string(value) + (ftrl ? " (must be >= 0)" : " (must be > 0)"));
      Node* up = g_.node(sc.update);
      up->attrs.set("initial_accumulator_value", value);
      Status s = infer_node_shapes(g_, *up);
      if (!s.ok()) return InvalidArgument(where + s.message());
    } else if (value != sc.want) {
      return InvalidArgument(where + "its " + sc.role + " slot '" + printable(slot->name) + "' starts at " +
                             std::to_string(value) + "; actorflow's " + sc.op + " starts it at " + std::to_string(sc.want));
    }
  }
  return Status::OK();
}

// Integer shape arithmetic and other computations on constants, folded into a Const named like
// the TF node. *folded is false when the op is not one of them or an input is not constant.
Status Importer::fold_or_fail(Ctx& c, bool* folded) {
  *folded = false;
  const std::string& op = c.op;
  if (op == "Shape" || op == "Size" || op == "Rank" || op == "ShapeN") {
    attr(c, "T");
    if (op == "ShapeN") {
      // One Const per input: output 0 under the node's name, output k as "<name>/shape_k".
      if (c.in.empty()) return err(c, "has no inputs");
      attr(c, "N");
      AF_ASSIGN_OR_RETURN(DType dt, attr_type(c, "out_type"));
      for (size_t k = c.in.size(); k-- > 0;) {
        const Shape& s = node_of(c.in[k])->output_shapes[static_cast<size_t>(c.in[k].index)];
        const std::string name = k == 0 ? "" : c.name + "/shape_" + std::to_string(k);
        Node* n = nullptr;
        if (s.fully_defined()) {
          AF_ASSIGN_OR_RETURN(n, emit_const(c, int_tensor(dt, s.dims(), Shape{s.rank()}), name));
        } else if (!s.unknown_rank()) {
          AF_ASSIGN_OR_RETURN(n, run_time_shape(c, c.in[k], dt, name));
        } else {
          return err(c, "input " + std::to_string(k) + "'s rank is not known at import");
        }
        map_[c.tf_name + ":" + std::to_string(k)] = Endpoint{n->id, 0};
      }
      *folded = true;
      return Status::OK();
    }
    if (c.in.size() != 1) return want_inputs(c, 1);
    const Node* in = node_of(c.in[0]);
    const Shape& s = in->output_shapes[static_cast<size_t>(c.in[0].index)];
    DType dt = DType::kInt32;
    if (op != "Rank") {
      AF_ASSIGN_OR_RETURN(dt, attr_type(c, "out_type"));
    }
    if (op == "Rank") {
      if (s.unknown_rank()) return err(c, "its input's rank is not known at import");
      AF_RETURN_IF_ERROR(emit_const(c, int_tensor(DType::kInt32, {s.rank()}, Shape{})).status());
    } else {
      if (!s.fully_defined() && op == "Shape" && !s.unknown_rank()) {
        AF_RETURN_IF_ERROR(run_time_shape(c, c.in[0], dt, "").status());
        *folded = true;
        return Status::OK();
      }
      if (!s.fully_defined())
        return err(c, "its input's shape " + s.to_string() + " is not fully known at import; actorflow needs it constant");
      if (op == "Shape") {
        AF_RETURN_IF_ERROR(emit_const(c, int_tensor(dt, s.dims(), Shape{s.rank()})).status());
      } else {
        auto count = s.checked_num_elements();
        if (!count.ok()) return err(c, count.status().message());
        AF_RETURN_IF_ERROR(emit_const(c, int_tensor(dt, {*count}, Shape{})).status());
      }
    }
    *folded = true;
    return Status::OK();
  }
  if (op == "BroadcastGradientArgs") {
    AF_RETURN_IF_ERROR(broadcast_gradient_args(c));
    *folded = true;
    return Status::OK();
  }
  if (op == "Slice" || op == "ConcatV2") {
    AF_RETURN_IF_ERROR(slice_or_concat_sym(c, folded));
    if (*folded) return Status::OK();
  }
  if (op == "Prod" && c.in.size() == 2 && !const_in(c, 0)) {
    std::vector<SymDim> x;
    if (sym_in(c, 0, &x)) {
      AF_RETURN_IF_ERROR(prod_sym(c, x));
      *folded = true;
      return Status::OK();
    }
  }
  if ((op == "Mul" || op == "FloorDiv" || op == "Maximum") && c.in.size() == 2) {
    AF_RETURN_IF_ERROR(scalar_op_sym(c, folded));
    if (*folded) return Status::OK();
  }
  // The rest need every data input constant and integer.
  static const std::set<std::string> kIntOps = {"Add", "AddV2", "Sub", "Mul", "Maximum", "Minimum", "FloorDiv",
                                                "FloorMod", "Pack", "ConcatV2", "Slice", "Prod", "Cast"};
  if (!kIntOps.count(op) || c.in.empty()) return Status::OK();
  std::vector<const Tensor*> vals;
  for (size_t i = 0; i < c.in.size(); ++i) {
    const Tensor* t = const_in(c, i);
    if (!t || (t->dtype() != DType::kInt32 && t->dtype() != DType::kInt64)) return Status::OK();
    vals.push_back(t);
  }
  const DType dt = vals[0]->dtype();
  attr(c, "T");
  if (op == "Add" || op == "AddV2" || op == "Sub" || op == "Mul" || op == "Maximum" || op == "Minimum" ||
      op == "FloorDiv" || op == "FloorMod") {
    AF_RETURN_IF_ERROR(want_inputs(c, 2));
    AF_ASSIGN_OR_RETURN(auto a, int_values(*vals[0], "x"));
    AF_ASSIGN_OR_RETURN(auto b, int_values(*vals[1], "y"));
    if (vals[1]->dtype() != dt) return err(c, "its inputs have different dtypes");
    const bool a_scalar = a.size() == 1 && vals[0]->shape().rank() <= 1, b_scalar = b.size() == 1 && vals[1]->shape().rank() <= 1;
    if (!(vals[0]->shape() == vals[1]->shape()) && !a_scalar && !b_scalar)
      return err(c, "folding integer " + op + " of shapes " + vals[0]->shape().to_string() + " and " +
                        vals[1]->shape().to_string() + " is not supported");
    const Shape out_shape = (a_scalar && !b_scalar) ? vals[1]->shape() : vals[0]->shape();
    const size_t m = std::max(a.size(), b.size());
    std::vector<int64_t> r(m);
    for (size_t i = 0; i < m; ++i) {
      const int64_t x = a[a.size() == 1 ? 0 : i], y = b[b.size() == 1 ? 0 : i];
      bool ok = true;
      if (op == "Sub") ok = checked_sub(x, y, &r[i]);
      else if (op == "Mul") ok = checked_mul(x, y, &r[i]);
      else if (op == "Maximum") r[i] = std::max(x, y);
      else if (op == "Minimum") r[i] = std::min(x, y);
      else if (op == "FloorDiv") {
        if (y == 0) return err(c, "integer division by zero");
        if (x == INT64_MIN && y == -1) return err(c, "integer division overflows");
        r[i] = x / y - ((x % y != 0) && ((x < 0) != (y < 0)) ? 1 : 0);
      } else if (op == "FloorMod") {
        if (y == 0) return err(c, "integer modulo by zero");
        r[i] = (x == INT64_MIN && y == -1) ? 0 : x % y;
        if (r[i] != 0 && ((r[i] < 0) != (y < 0))) r[i] += y;
      } else ok = checked_add(x, y, &r[i]);
      if (!ok) return err(c, "integer " + op + " overflows");
    }
    AF_RETURN_IF_ERROR(emit_const(c, int_tensor(dt, r, out_shape)).status());
  } else if (op == "Cast") {
    AF_ASSIGN_OR_RETURN(DType to, attr_type(c, "DstT"));
    attr(c, "SrcT");
    attr(c, "Truncate");
    if (to != DType::kInt32 && to != DType::kInt64) return Status::OK();
    AF_ASSIGN_OR_RETURN(auto a, int_values(*vals[0], "x"));
    AF_RETURN_IF_ERROR(emit_const(c, int_tensor(to, a, vals[0]->shape())).status());
  } else if (op == "Pack") {
    AF_ASSIGN_OR_RETURN(int64_t ax, attr_int(c, "axis", 0));
    attr(c, "N");
    std::vector<int64_t> all;
    for (const Tensor* t : vals) {
      if (t->shape().rank() != 0 || t->dtype() != dt) return Status::OK();  // only scalars fold
      AF_ASSIGN_OR_RETURN(auto v, int_values(*t, "value"));
      all.push_back(v[0]);
    }
    if (ax != 0 && ax != -1) return err_attr(c, "axis", "must be 0 when packing scalars");
    AF_RETURN_IF_ERROR(emit_const(c, int_tensor(dt, all, Shape{static_cast<int64_t>(all.size())})).status());
  } else if (op == "ConcatV2") {
    attr(c, "N");
    attr(c, "Tidx");
    std::vector<int64_t> all;
    for (size_t i = 0; i + 1 < vals.size(); ++i) {
      if (vals[i]->shape().rank() != 1 || vals[i]->dtype() != dt) return Status::OK();  // only vectors fold
      AF_ASSIGN_OR_RETURN(auto v, int_values(*vals[i], "value"));
      all.insert(all.end(), v.begin(), v.end());
    }
    AF_ASSIGN_OR_RETURN(auto ax, int_values(*vals.back(), "axis"));
    if (ax.size() != 1 || (ax[0] != 0 && ax[0] != -1)) return err(c, "axis must be 0 when concatenating vectors");
    AF_RETURN_IF_ERROR(emit_const(c, int_tensor(dt, all, Shape{static_cast<int64_t>(all.size())})).status());
  } else if (op == "Slice") {
    AF_RETURN_IF_ERROR(want_inputs(c, 3));
    attr(c, "Index");
    if (vals[0]->shape().rank() != 1) return Status::OK();
    AF_ASSIGN_OR_RETURN(auto x, int_values(*vals[0], "input"));
    AF_ASSIGN_OR_RETURN(auto b, int_values(*vals[1], "begin"));
    AF_ASSIGN_OR_RETURN(auto s, int_values(*vals[2], "size"));
    if (b.size() != 1 || s.size() != 1) return err(c, "begin and size of a vector's slice must have 1 element");
    const int64_t len = static_cast<int64_t>(x.size());
    const int64_t size = s[0] == -1 ? len - b[0] : s[0];
    if (b[0] < 0 || b[0] > len || size < 0 || size > len - b[0])
      return err(c, "slice [" + std::to_string(b[0]) + ", +" + std::to_string(s[0]) + ") is outside a vector of " +
                        std::to_string(len));
    std::vector<int64_t> r(x.begin() + b[0], x.begin() + b[0] + size);
    AF_RETURN_IF_ERROR(emit_const(c, int_tensor(dt, r, Shape{size})).status());
  } else if (op == "Prod") {
    AF_RETURN_IF_ERROR(want_inputs(c, 2));
    attr(c, "Tidx");
    AF_ASSIGN_OR_RETURN(bool keep, attr_bool(c, "keep_dims", false));
    if (vals[0]->shape().rank() != 1 || keep) return Status::OK();
    AF_ASSIGN_OR_RETURN(auto x, int_values(*vals[0], "input"));
    int64_t p = 1;
    for (int64_t v : x)
      if (!checked_mul(p, v, &p)) return err(c, "integer Prod overflows");
    AF_RETURN_IF_ERROR(emit_const(c, int_tensor(dt, {p}, Shape{})).status());
  }
  *folded = true;
  return Status::OK();
}

// LogSoftmax(x) = (x - max) - log(sum(exp(x - max))) over the last axis, from actorflow's ops.
Status Importer::log_softmax(Ctx& c) {
  AF_RETURN_IF_ERROR(want_inputs(c, 1));
  attr(c, "T");
  const Shape& s = node_of(c.in[0])->output_shapes[static_cast<size_t>(c.in[0].index)];
  if (s.unknown_rank() || s.rank() < 1) return err(c, "needs an input of known rank >= 1, got " + s.to_string());
  const std::vector<int64_t> last{s.rank() - 1};
  AttrMap red;
  red.set("axes", last);
  red.set("keep_dims", true);
  AF_ASSIGN_OR_RETURN(Node* mx, emit(c, "Max", {c.in[0]}, red, c.name + "/max"));
  AF_ASSIGN_OR_RETURN(Node* sh, emit(c, "Sub", {c.in[0], {mx->id, 0}}, {}, c.name + "/shifted"));
  AF_ASSIGN_OR_RETURN(Node* ex, emit(c, "Exp", {{sh->id, 0}}, {}, c.name + "/exp"));
  AF_ASSIGN_OR_RETURN(Node* sm, emit(c, "Sum", {{ex->id, 0}}, red, c.name + "/sum"));
  AF_ASSIGN_OR_RETURN(Node* lg, emit(c, "Log", {{sm->id, 0}}, {}, c.name + "/log"));
  return emit(c, "Sub", {{sh->id, 0}, {lg->id, 0}}, {}).status();
}

Status Importer::translate(Ctx& c) {
  const std::string& op = c.op;
  // String tensors flow only into what the Saver's subgraph does with them.
  for (size_t i = 0; i < c.in.size(); ++i) {
    if (!string_eps_.count({c.in[i].node, c.in[i].index})) continue;
    const bool ok = op == "Identity" || op == "PlaceholderWithDefault" ||
                    ((op == "SaveV2" || op == "RestoreV2") && i <= 2) || (op == "StaticRegexFullMatch" && i == 0) ||
                    (op == "Select" && i >= 1) || op == "StringJoin" || (op == "ShardedFilename" && i == 0) ||
                    op == "Pack" || op == "MergeV2Checkpoints";
    if (!ok)
      return err(c, "input " + std::to_string(i) + " ('" + printable(c.in_names[i]) +
                        "') is a string tensor: actorflow runs strings only as a Saver's file names and tensor names "
                        "(SaveV2, RestoreV2, and a sharded Saver's StaticRegexFullMatch, Select, StringJoin, "
                        "ShardedFilename, Pack and MergeV2Checkpoints)");
  }
  for (size_t i = 0; i < c.in.size(); ++i)
    if (widened_eps_.count({c.in[i].node, c.in[i].index}) && op != "Cast")
      return err(c, "input " + std::to_string(i) + " ('" + printable(c.in_names[i]) +
                        "') is a float16/bfloat16 constant: actorflow has no half types and reads one only through "
                        "a Cast (the constant is widened to float32 exactly)");
  if (op == "SaveV2" || op == "RestoreV2") return save_restore(c);
  {
    bool done = false;
    AF_RETURN_IF_ERROR(saver_strings(c, &done));
    if (done) return Status::OK();
  }
  if (op == "Const") {
    const pb::AttrValue* dt = c.attrs.count("dtype") ? c.attrs.at("dtype") : nullptr;
    if (dt && dt->value_case() == pb::AttrValue::kType && dt->type() == pb::DT_STRING) return string_const(c);
    if (dt && dt->value_case() == pb::AttrValue::kType && (dt->type() == pb::DT_HALF || dt->type() == pb::DT_BFLOAT16))
      return half_const(c);
  }
  if ((op == "Identity" || op == "PlaceholderWithDefault") && c.in.size() == 1 &&
      string_eps_.count({c.in[0].node, c.in[0].index})) {
    attr(c, "T");
    attr(c, "dtype");
    attr(c, "shape");
    AF_ASSIGN_OR_RETURN(Node* n, emit(c, "Identity", c.in, {}));
    n->output_shapes[0] = Shape{-1};  // a feed may be any string (a path of any length)
    string_eps_.insert({n->id, 0});
    if (string_vec_eps_.count({c.in[0].node, c.in[0].index})) string_vec_eps_.insert({n->id, 0});
    auto sv = strings_.find(c.in[0].node);
    if (sv != strings_.end() && c.in[0].index == 0) {
      std::vector<std::string> copy = sv->second;
      strings_[n->id] = std::move(copy);
    }
    return Status::OK();
  }
  bool folded = false;
  AF_RETURN_IF_ERROR(fold_or_fail(c, &folded));
  if (folded) return Status::OK();
  if (op == "StridedSlice") return strided_slice(c);
  if (op == "Pack") return pack(c);

  // Ops whose inputs and attributes are actorflow's as they are (T checked by the shape function).
  static const std::map<std::string, std::string> kSame = {
      {"Identity", "Identity"}, {"StopGradient", "StopGradient"}, {"PreventGradient", "Identity"},
      {"Snapshot", "Identity"}, {"Relu", "Relu"}, {"Softmax", "Softmax"},
      {"SoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits"}, {"ReluGrad", "ReluGrad"},
      {"Add", "Add"}, {"AddV2", "Add"}, {"Sub", "Sub"}, {"Mul", "Mul"}, {"RealDiv", "Div"},
      {"Maximum", "Maximum"}, {"Neg", "Neg"}, {"Square", "Square"}, {"Log", "Log"}, {"Exp", "Exp"},
      {"Sqrt", "Sqrt"}, {"Sigmoid", "Sigmoid"}, {"Tanh", "Tanh"}, {"ZerosLike", "ZerosLike"},
      {"OnesLike", "OnesLike"}, {"AddN", "AddN"}, {"Equal", "Equal"}, {"Greater", "Greater"},
      {"L2Loss", "L2Loss"}};
  auto same = kSame.find(op);
  if (same != kSame.end()) {
    attr(c, "T");
    attr(c, "N");
    if (op == "PreventGradient") attr(c, "message");
    return emit(c, same->second, c.in, {}).status();
  }
  if (op == "NoOp") {
    AF_RETURN_IF_ERROR(want_inputs(c, 0));
    return emit(c, "NoOp", {}, {}).status();
  }
  if (op == "Const") {
    AF_RETURN_IF_ERROR(want_inputs(c, 0));
    AF_ASSIGN_OR_RETURN(DType dt, attr_type(c, "dtype"));
    const pb::AttrValue* v = attr(c, "value");
    if (!v || v->value_case() != pb::AttrValue::kTensor) return err_attr(c, "value", "is missing or not a tensor");
    auto t = tensor_of(v->tensor(), const_budget_);
    if (!t.ok()) return err_attr(c, "value", t.status().message());
    if (t->dtype() != dt) return err_attr(c, "value", std::string("is ") + dtype_name(t->dtype()) + ", dtype says " + dtype_name(dt));
    return emit_const(c, std::move(*t)).status();
  }
  if (op == "Placeholder" || op == "PlaceholderWithDefault") {
    AF_ASSIGN_OR_RETURN(DType dt, attr_type(c, "dtype"));
    AF_ASSIGN_OR_RETURN(Shape s, attr_shape(c, "shape"));
    if (op == "PlaceholderWithDefault") {
      // The default flows on when nothing is fed; a feed replaces the node's output.
      AF_RETURN_IF_ERROR(want_inputs(c, 1));
      const Node* d = node_of(c.in[0]);
      if (d->output_types[static_cast<size_t>(c.in[0].index)] != dt) return err_attr(c, "dtype", "differs from the default's dtype");
      return emit(c, "Identity", c.in, {}).status();
    }
    AF_RETURN_IF_ERROR(want_inputs(c, 0));
    AttrMap a;
    a.set("dtype", dt);
    a.set("shape", s);
    return emit(c, "Placeholder", {}, std::move(a)).status();
  }
  if (op == "MatMul") {
    AF_RETURN_IF_ERROR(want_inputs(c, 2));
    attr(c, "T");
    attr(c, "grad_a");
    attr(c, "grad_b");
    AttrMap a;
    AF_ASSIGN_OR_RETURN(bool ta, attr_bool(c, "transpose_a", false));
    AF_ASSIGN_OR_RETURN(bool tb, attr_bool(c, "transpose_b", false));
    a.set("transpose_a", ta);
    a.set("transpose_b", tb);
    return emit(c, "MatMul", c.in, std::move(a)).status();
  }
  if (op == "BiasAdd" || op == "BiasAddGrad") {
    attr(c, "T");
    AF_RETURN_IF_ERROR(check_nhwc(c));
    return emit(c, op, c.in, {}).status();
  }
  if (op == "LogSoftmax") return log_softmax(c);
  if (op == "Conv2D" || op == "Conv2DBackpropInput" || op == "Conv2DBackpropFilter") {
    attr(c, "T");
    AF_RETURN_IF_ERROR(check_conv_attrs(c));
    AttrMap a;
    AF_RETURN_IF_ERROR(window_attrs(c, a, false));
    if (op == "Conv2DBackpropFilter") {
      AF_RETURN_IF_ERROR(want_inputs(c, 3));
      AF_ASSIGN_OR_RETURN(auto fs, const_ints(c, 1, "filter_sizes"));
      a.set("filter_sizes", fs);
      return emit(c, op, {c.in[0], c.in[2]}, std::move(a)).status();
    }
    return emit(c, op, c.in, std::move(a)).status();
  }
  if (op == "MaxPool" || op == "MaxPoolGrad" || op == "AvgPool") {
    attr(c, "T");
    AF_RETURN_IF_ERROR(check_nhwc(c));
    AF_ASSIGN_OR_RETURN(auto ep, attr_ints(c, "explicit_paddings", false));
    if (!ep.empty()) return err_attr(c, "explicit_paddings", "is not empty: explicit padding is not supported");
    AttrMap a;
    AF_RETURN_IF_ERROR(window_attrs(c, a, true));
    return emit(c, op, c.in, std::move(a)).status();
  }
  if (op == "Reshape") {
    AF_RETURN_IF_ERROR(want_inputs(c, 2));
    attr(c, "T");
    attr(c, "Tshape");
    std::vector<int64_t> shape;
    std::vector<SymDim> sym;
    if (!const_in(c, 1) && sym_in(c, 1, &sym)) {
      // A shape known but for one run-time dimension: that one is -1, which the element count
      // determines (the others known and non-zero: the same value). More unknowns are an error.
      int unknown = 0;
      for (const SymDim& d : sym) {
        if (d.node >= 0) ++unknown;
        if ((d.node < 0 && d.value == -1) || (d.node < 0 && d.value == 0)) unknown += 2;
        shape.push_back(d.node >= 0 ? -1 : d.value);
      }
      if (unknown > 1)
        return err(c, "shape (input 1, '" + printable(c.in_names[1]) + "') has more than one dimension known only at "
                          "run time (or one besides a -1 or a 0); actorflow needs all but one at import");
    } else {
      AF_ASSIGN_OR_RETURN(shape, const_ints(c, 1, "shape"));
    }
    AttrMap a;
    a.set("shape", shape);
    return emit(c, "Reshape", {c.in[0]}, std::move(a)).status();
  }
  if (op == "Transpose") {
    AF_RETURN_IF_ERROR(want_inputs(c, 2));
    attr(c, "T");
    attr(c, "Tperm");
    AF_ASSIGN_OR_RETURN(auto perm, const_ints(c, 1, "perm"));
    AttrMap a;
    a.set("perm", perm);
    return emit(c, "Transpose", {c.in[0]}, std::move(a)).status();
  }
  if (op == "ExpandDims") {
    AF_RETURN_IF_ERROR(want_inputs(c, 2));
    attr(c, "T");
    attr(c, "Tdim");
    AF_ASSIGN_OR_RETURN(auto dim, const_ints(c, 1, "dim"));
    if (dim.size() != 1) return err(c, "dim must hold one value");
    const Shape& s = node_of(c.in[0])->output_shapes[static_cast<size_t>(c.in[0].index)];
    AF_ASSIGN_OR_RETURN(int64_t ax, axis(c, dim[0], s.unknown_rank() ? -1 : s.rank() + 1, "dim"));
    AttrMap a;
    a.set("axes", std::vector<int64_t>{ax});
    return emit(c, "ExpandDims", {c.in[0]}, std::move(a)).status();
  }
  if (op == "Sum" || op == "Mean" || op == "Max") {
    AF_RETURN_IF_ERROR(want_inputs(c, 2));
    attr(c, "T");
    attr(c, "Tidx");
    AF_ASSIGN_OR_RETURN(bool keep, attr_bool(c, "keep_dims", false));
    AF_ASSIGN_OR_RETURN(auto axes, const_ints(c, 1, "reduction_indices"));
    if (axes.empty()) return emit(c, "Identity", {c.in[0]}, {}).status();  // TF: no axis, no reduction
    const Shape& s = node_of(c.in[0])->output_shapes[static_cast<size_t>(c.in[0].index)];
    std::vector<int64_t> norm;
    for (int64_t x : axes) {
      AF_ASSIGN_OR_RETURN(int64_t ax, axis(c, x, s.unknown_rank() ? -1 : s.rank(), "reduction index"));
      norm.push_back(ax);
    }
    AttrMap a;
    a.set("axes", norm);
    a.set("keep_dims", keep);
    return emit(c, op, {c.in[0]}, std::move(a)).status();
  }
  if (op == "ArgMax") {
    AF_RETURN_IF_ERROR(want_inputs(c, 2));
    attr(c, "T");
    attr(c, "Tidx");
    if (attr(c, "output_type")) {  // absent: TensorFlow's default, int64
      AF_ASSIGN_OR_RETURN(DType out, attr_type(c, "output_type"));
      if (out != DType::kInt64) return err_attr(c, "output_type", "is not int64: actorflow's ArgMax gives int64");
    }
    AF_ASSIGN_OR_RETURN(auto dim, const_ints(c, 1, "dimension"));
    if (dim.size() != 1) return err(c, "dimension must hold one value");
    AttrMap a;
    a.set("axis", dim[0]);
    return emit(c, "ArgMax", {c.in[0]}, std::move(a)).status();
  }
  if (op == "Fill") {
    AF_RETURN_IF_ERROR(want_inputs(c, 2));
    attr(c, "T");
    attr(c, "index_type");
    std::vector<SymDim> sym;
    if (!const_in(c, 0) && sym_in(c, 0, &sym)) return fill_at_run_time(c, sym);
    AF_ASSIGN_OR_RETURN(auto dims, const_ints(c, 0, "dims"));
    AF_ASSIGN_OR_RETURN(double value, fill_value(c));
    const Tensor* v = const_in(c, 1);
    for (int64_t d : dims)
      if (d < 0) return err(c, "dims hold a negative size");
    AttrMap a;
    a.set("shape", Shape(dims));
    a.set("dtype", v->dtype());
    a.set("value", value);
    return emit(c, "Fill", {}, std::move(a)).status();
  }
  if (op == "Tile") {
    AF_RETURN_IF_ERROR(want_inputs(c, 2));
    attr(c, "T");
    attr(c, "Tmultiples");
    std::vector<SymDim> msym;
    if (!const_in(c, 1) && sym_in(c, 1, &msym)) {
      // Multiples known only at run time: only size-1 dimensions may be tiled by them, so the
      // result is x * ones(the multiples where x is 1, else 1), built as Fill's dims are.
      const DType xt = node_of(c.in[0])->output_types[static_cast<size_t>(c.in[0].index)];
      const Shape& xs = node_of(c.in[0])->output_shapes[static_cast<size_t>(c.in[0].index)];
      if (xs.unknown_rank() || static_cast<size_t>(xs.rank()) != msym.size())
        return err(c, "multiples do not have one value per dimension of " + xs.to_string());
      std::vector<SymDim> od;
      for (int i = 0; i < xs.rank(); ++i) {
        const SymDim& m = msym[static_cast<size_t>(i)];
        const int64_t d = xs.dim(i);
        if (m.node < 0 && m.value == 1) od.push_back(SymDim{1, -1, 0, 0});
        else if (d == 1 && (m.node >= 0 || m.value >= 0)) od.push_back(m);
        else
          return err(c, "tiling dimension " + std::to_string(i) + " of " + xs.to_string() +
                            " by a multiple known only at run time is not supported (only size-1 dimensions)");
      }
      AF_ASSIGN_OR_RETURN(Node* o, fill_dims(c, od, xt, 1.0, fresh(c.name + "/ones")));
      return emit(c, "Mul", {c.in[0], {o->id, 0}}, {}).status();
    }
    AF_ASSIGN_OR_RETURN(auto mult, const_ints(c, 1, "multiples"));
    const Tensor* x = const_in(c, 0);
    if (!x) {
      // A tile that only repeats size-1 dimensions is a broadcast: x * ones(output shape), exact
      // (x * 1 == x for every value, signed zeros and NaN included).
      const DType xt = node_of(c.in[0])->output_types[static_cast<size_t>(c.in[0].index)];
      const Shape& xs = node_of(c.in[0])->output_shapes[static_cast<size_t>(c.in[0].index)];
      if (xs.unknown_rank() || static_cast<int>(mult.size()) != xs.rank())
        return err(c, "multiples do not have one value per dimension of " + xs.to_string());
      std::vector<int64_t> od;
      for (int i = 0; i < xs.rank(); ++i) {
        const int64_t m = mult[static_cast<size_t>(i)], d = xs.dim(i);
        if (m == 1 && d >= 0) od.push_back(d);
        else if (d == 1 && m >= 0) od.push_back(m);
        else
          return err(c, "tiling dimension " + std::to_string(i) + " of " + xs.to_string() + " by " + std::to_string(m) +
                            " is not supported (actorflow tiles constants, and run-time tensors only along size-1 dimensions)");
      }
      AttrMap ones;
      ones.set("shape", Shape(od));
      ones.set("dtype", xt);
      ones.set("value", 1.0);
      AF_ASSIGN_OR_RETURN(Node* o, emit(c, "Fill", {}, std::move(ones), c.name + "/ones"));
      return emit(c, "Mul", {c.in[0], {o->id, 0}}, {}).status();
    }
    const Shape& s = x->shape();
    if (static_cast<int>(mult.size()) != s.rank()) return err(c, "multiples do not have one value per dimension");
    std::vector<int64_t> od;
    int64_t total = 1;
    for (int i = 0; i < s.rank(); ++i) {
      int64_t d;
      if (mult[static_cast<size_t>(i)] < 0 || !checked_mul(s.dim(i), mult[static_cast<size_t>(i)], &d) ||
          !checked_mul(total, d, &total) || total > kMaxConstElements)
        return err(c, "the tiled constant would have too many elements");
      od.push_back(d);
    }
    if (total * static_cast<int64_t>(dtype_size(x->dtype())) > const_budget_)
      return err(c, "the tiled constant would exceed " + std::to_string(const_limit_) +
                        " bytes of constants (64 MiB plus 16 times the GraphDef's size)");
    Tensor out(x->dtype(), Shape(od));
    const size_t es = dtype_size(x->dtype());
    const char* src = static_cast<const char*>(x->raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    for (int64_t flat = 0; flat < total; ++flat) {  // each output element from its source element
      int64_t rem = flat, src_idx = 0, stride = 1;
      for (int i = s.rank() - 1; i >= 0; --i) {
        const int64_t coord = rem % od[static_cast<size_t>(i)];
        rem /= od[static_cast<size_t>(i)];
        src_idx += (coord % s.dim(i)) * stride;
        stride *= s.dim(i);
      }
      std::memcpy(dst + static_cast<size_t>(flat) * es, src + static_cast<size_t>(src_idx) * es, es);
    }
    return emit_const(c, std::move(out)).status();
  }
  if (op == "Cast") {
    AF_RETURN_IF_ERROR(want_inputs(c, 1));
    attr(c, "SrcT");
    AF_ASSIGN_OR_RETURN(bool trunc, attr_bool(c, "Truncate", false));
    if (trunc) return err_attr(c, "Truncate", "is true: truncating casts are not supported");
    AF_ASSIGN_OR_RETURN(DType to, attr_type(c, "DstT"));
    AttrMap a;
    a.set("DstT", to);
    return emit(c, "Cast", c.in, std::move(a)).status();
  }
  if (op == "ConcatV2") {
    if (c.in.size() < 2) return err(c, "needs values and an axis");
    attr(c, "T");
    attr(c, "N");
    attr(c, "Tidx");
    AF_ASSIGN_OR_RETURN(auto ax, const_ints(c, c.in.size() - 1, "axis"));
    if (ax.size() != 1) return err(c, "axis must hold one value");
    const Shape& s = node_of(c.in[0])->output_shapes[static_cast<size_t>(c.in[0].index)];
    AF_ASSIGN_OR_RETURN(int64_t a0, axis(c, ax[0], s.unknown_rank() ? -1 : s.rank(), "axis"));
    AttrMap a;
    a.set("axis", a0);
    return emit(c, "Concat", std::vector<Endpoint>(c.in.begin(), c.in.end() - 1), std::move(a)).status();
  }
  if (op == "Slice") {
    AF_RETURN_IF_ERROR(want_inputs(c, 3));
    attr(c, "T");
    attr(c, "Index");
    AF_ASSIGN_OR_RETURN(auto b, const_ints(c, 1, "begin"));
    AF_ASSIGN_OR_RETURN(auto s, const_ints(c, 2, "size"));
    AttrMap a;
    a.set("begin", b);
    a.set("size", s);
    return emit(c, "Slice", {c.in[0]}, std::move(a)).status();
  }
  if (op == "GatherV2") {
    AF_RETURN_IF_ERROR(want_inputs(c, 3));
    attr(c, "Tparams");
    attr(c, "Tindices");
    attr(c, "Taxis");
    AF_ASSIGN_OR_RETURN(int64_t bd, attr_int(c, "batch_dims", 0));
    if (bd != 0) return err_attr(c, "batch_dims", "is not 0");
    AF_ASSIGN_OR_RETURN(auto ax, const_ints(c, 2, "axis"));
    if (ax.size() != 1 || ax[0] != 0) return err(c, "axis must be 0 (actorflow gathers rows)");
    std::vector<SymDim> params;
    if (!const_in(c, 0) && sym_in(c, 0, &params)) {
      bool done = false;
      AF_RETURN_IF_ERROR(gather_sym(c, params, &done));
      if (done) return Status::OK();
    }
    return emit(c, "Gather", {c.in[0], c.in[1]}, {}).status();
  }
  if (op == "RandomUniform" || op == "TruncatedNormal") {
    AF_RETURN_IF_ERROR(want_inputs(c, 1));
    attr(c, "T");
    AF_ASSIGN_OR_RETURN(DType dt, attr_type(c, "dtype"));
    AF_ASSIGN_OR_RETURN(auto shape, const_ints(c, 0, "shape"));
    AF_ASSIGN_OR_RETURN(int64_t seed, attr_int(c, "seed", 0));
    AF_ASSIGN_OR_RETURN(int64_t seed2, attr_int(c, "seed2", 0));
    AttrMap a;
    a.set("shape", Shape(shape));
    a.set("dtype", dt);
    a.set("seed", seed);
    a.set("seed2", seed2);
    if (op == "RandomUniform") {
      a.set("minval", 0.0);
      a.set("maxval", 1.0);
    } else {
      a.set("mean", 0.0);
      a.set("stddev", 1.0);
    }
    return emit(c, op, {}, std::move(a)).status();
  }

  // ---- variables ---------------------------------------------------------------------------
  if (op == "VariableV2" || op == "VarHandleOp") {
    AF_RETURN_IF_ERROR(want_inputs(c, 0));
    AF_ASSIGN_OR_RETURN(DType dt, attr_type(c, "dtype"));
    AF_ASSIGN_OR_RETURN(Shape s, attr_shape(c, "shape"));
    AF_ASSIGN_OR_RETURN(std::string container, attr_string(c, "container", ""));
    if (!container.empty()) return err_attr(c, "container", "is \"" + printable(container) + "\": containers are not supported");
    AF_ASSIGN_OR_RETURN(std::string shared, attr_string(c, "shared_name", ""));
    attr(c, "debug_name");
    attr(c, "allowed_devices");
    AttrMap a;
    a.set("dtype", dt);
    a.set("shape", s);
    a.set("_trainable", true);
    // TF shares a variable by shared_name, else by node name: actorflow's variables likewise, under the prefix.
    a.set("shared_name", shared.empty() || shared == c.tf_name ? c.name : prefix_ + shared);
    AF_RETURN_IF_ERROR(emit(c, "VariableV2", {}, std::move(a)).status());
    out_.variables.push_back(c.name);
    return Status::OK();
  }
  if (op == "ReadVariableOp") {
    AF_RETURN_IF_ERROR(want_inputs(c, 1));
    AF_ASSIGN_OR_RETURN(Node* v, var_in(c, 0));
    AF_ASSIGN_OR_RETURN(DType dt, attr_type(c, "dtype"));
    if (dt != v->output_types[0]) return err_attr(c, "dtype", "differs from the variable's");
    return emit(c, "Identity", {c.in[0]}, {}).status();
  }
  if (op == "Assign" || op == "AssignVariableOp" || op == "AssignAdd" || op == "AssignAddVariableOp") {
    AF_RETURN_IF_ERROR(want_inputs(c, 2));
    AF_ASSIGN_OR_RETURN(Node* v, var_in(c, 0));
    attr(c, "T");
    attr(c, "use_locking");
    if (op == "AssignVariableOp" || op == "AssignAddVariableOp") {
      AF_ASSIGN_OR_RETURN(DType dt, attr_type(c, "dtype"));
      if (dt != v->output_types[0]) return err_attr(c, "dtype", "differs from the variable's");
      attr(c, "validate_shape");
    } else {
      AF_ASSIGN_OR_RETURN(bool vs, attr_bool(c, "validate_shape", true));
      if (!vs && op == "Assign") return err_attr(c, "validate_shape", "is false: changing a variable's shape is not supported");
    }
    const bool add = op == "AssignAdd" || op == "AssignAddVariableOp";
    return emit_var_op(c, v, add ? "AssignAdd" : "Assign", {c.in[1]}).status();
  }
  if (op == "IsVariableInitialized" || op == "VarIsInitializedOp") {
    AF_RETURN_IF_ERROR(want_inputs(c, 1));
    AF_ASSIGN_OR_RETURN(Node* v, var_in(c, 0));
    attr(c, "dtype");
    return emit_var_op(c, v, "IsVariableInitialized", {}).status();
  }
  // Optimizer updates: TF's (var, slots..., hyper-parameters..., grad) -> actorflow's
  // (hyper-parameters..., grad) on the variable, whose actor keeps the slots itself.
  struct Slot {
    size_t input;      // the TF input that is the slot variable (dropped)
    const char* role;
    double start;      // the value actorflow's variable actor starts it at
  };
  struct Apply {
    std::string af_op;
    size_t tf_inputs;
    std::vector<Slot> slots;
    std::vector<size_t> keep;  // TF inputs passed on, in actorflow's order
  };
  static const std::map<std::string, Apply> kApply = {
      {"ApplyGradientDescent", {"ApplyGradientDescent", 3, {}, {1, 2}}},
      {"ApplyMomentum", {"ApplyMomentum", 5, {{1, "accumulator", 0}}, {2, 3, 4}}},
      {"ApplyAdam", {"ApplyAdam", 10, {{1, "m", 0}, {2, "v", 0}}, {5, 6, 7, 8, 9}}},
      {"ApplyRMSProp", {"ApplyRMSProp", 8, {{1, "ms", 1}, {2, "mom", 0}}, {3, 4, 5, 6, 7}}},
      {"ApplyAdagrad", {"ApplyAdagrad", 4, {{1, "accumulator", -1}}, {2, 3}}},
      // FTRL: (var, accum, linear, grad, lr, l1, l2[, l2_shrinkage], lr_power) -> (lr, l1, l2,
      // lr_power, grad); V2's l2_shrinkage (a constant) becomes the update's attribute.
      {"ApplyFtrl", {"ApplyFtrl", 8, {{1, "accumulator", -1}, {2, "linear", 0}}, {4, 5, 6, 7, 3}}},
      {"ApplyFtrlV2", {"ApplyFtrl", 9, {{1, "accumulator", -1}, {2, "linear", 0}}, {4, 5, 6, 8, 3}}},
  };
  std::string base = op;
  const bool resource = op.rfind("ResourceApply", 0) == 0;
  if (resource) base = op.substr(8);  // "ResourceApplyAdam" -> "ApplyAdam"
  auto ap = kApply.find(base);
  if (ap != kApply.end()) {
    const Apply& d = ap->second;
    AF_RETURN_IF_ERROR(want_inputs(c, d.tf_inputs));
    AF_ASSIGN_OR_RETURN(Node* v, var_in(c, 0));
    std::vector<SlotCheck> checks;
    for (const Slot& sl : d.slots) {
      AF_ASSIGN_OR_RETURN(Node* sv, var_in(c, sl.input));
      checks.push_back({c.tf_name, c.op, -1, sv->id, sl.role, sl.start, sl.start < 0});
    }
    attr(c, "T");
    AF_ASSIGN_OR_RETURN(bool update_slots, attr_bool(c, "update_slots", true));
    if (!update_slots) return err_attr(c, "update_slots", "is false: an Adagrad that does not update its accumulator is not supported");
    AF_ASSIGN_OR_RETURN(bool locking, attr_bool(c, "use_locking", false));
    (void)locking;  // the variable actor applies one update at a time: always "locked"
    AF_ASSIGN_OR_RETURN(bool nesterov, attr_bool(c, "use_nesterov", false));
    if (nesterov) return err_attr(c, "use_nesterov", "is true: Nesterov momentum is not supported");
    AF_ASSIGN_OR_RETURN(bool by_lr, attr_bool(c, "multiply_linear_by_lr", false));
    if (by_lr) return err_attr(c, "multiply_linear_by_lr", "is true: FTRL's linear term scaled by lr is not supported");
    std::vector<Endpoint> ins;
    for (size_t i : d.keep) ins.push_back(c.in[i]);
    AttrMap extra;
    if (d.af_op == "ApplyAdagrad" || d.af_op == "ApplyFtrl")
      extra.set("initial_accumulator_value", 0.1);  // set from the slot in check_slots
    if (base == "ApplyFtrlV2") {
      const Tensor* shrink = const_in(c, 7);
      if (!shrink || shrink->num_elements() != 1 || shrink->dtype() != DType::kFloat32)
        return err(c, "l2_shrinkage (input 7, '" + printable(c.in_names[7]) +
                          "') must be a float32 scalar constant at import (actorflow's FTRL takes it as an attribute)");
      const float l2s = shrink->data<float>()[0];
      if (!(l2s >= 0)) return err(c, "l2_shrinkage is " + std::to_string(l2s) + " (must be >= 0)");
      extra.set("l2_shrinkage", static_cast<double>(l2s));
    }
    AF_ASSIGN_OR_RETURN(Node* up, emit_var_op(c, v, d.af_op, std::move(ins), std::move(extra)));
    for (SlotCheck& sc : checks) {
      sc.update = up->id;
      slot_checks_.push_back(std::move(sc));
    }
    return Status::OK();
  }
  if (op == "SaveV2" || op == "RestoreV2" || op == "SaveSlices" || op == "RestoreSlice")
    return err(c, "TensorFlow's save/restore ops are not supported in imported graphs (actorflow's Saver saves "
                  "the imported variables)");
  return err(c, "op " + printable(op) + " is not supported (docs/interop.md lists the supported ops)");
}

// StridedSlice of a vector (a shape, mostly): constant begin, end and strides of one element,
// stride 1, begin/end/shrink_axis masks. A constant input folds; a symbolic one (a run-time
// shape) folds when the slice's elements are all known, else is a Slice (and a Reshape to a
// scalar for shrink_axis) carrying the symbolic elements; any other run-time vector is a Slice.
Status Importer::strided_slice(Ctx& c) {
  AF_RETURN_IF_ERROR(want_inputs(c, 4));
  attr(c, "T");
  attr(c, "Index");
  AF_ASSIGN_OR_RETURN(auto b, const_ints(c, 1, "begin"));
  AF_ASSIGN_OR_RETURN(auto e, const_ints(c, 2, "end"));
  AF_ASSIGN_OR_RETURN(auto st, const_ints(c, 3, "strides"));
  AF_ASSIGN_OR_RETURN(int64_t begin_mask, attr_int(c, "begin_mask", 0));
  AF_ASSIGN_OR_RETURN(int64_t end_mask, attr_int(c, "end_mask", 0));
  AF_ASSIGN_OR_RETURN(int64_t shrink, attr_int(c, "shrink_axis_mask", 0));
  for (const char* m : {"ellipsis_mask", "new_axis_mask"}) {
    AF_ASSIGN_OR_RETURN(int64_t v, attr_int(c, m, 0));
    if (v != 0) return err_attr(c, m, "is not 0 (only slices of one dimension are supported)");
  }
  if (b.size() != 1 || e.size() != 1 || st.size() != 1)
    return err(c, "begin, end and strides must hold one value (slices of a vector are supported)");
  if (st[0] != 1) return err(c, "stride " + std::to_string(st[0]) + " is not supported (1 only)");
  const Node* xn = node_of(c.in[0]);
  const Shape& xs = xn->output_shapes[static_cast<size_t>(c.in[0].index)];
  const DType dt = xn->output_types[static_cast<size_t>(c.in[0].index)];
  if (xs.unknown_rank() || xs.rank() != 1)
    return err(c, "input 0 has shape " + xs.to_string() + ": only vectors are sliced");
  std::vector<SymDim> sym;
  const bool have_sym = (dt == DType::kInt32 || dt == DType::kInt64) && sym_in(c, 0, &sym);
  const int64_t len = have_sym ? static_cast<int64_t>(sym.size()) : xs.dim(0);
  if (len < 0) return err(c, "input 0's length is not known at import");
  auto clamp = [len](int64_t v, bool end) {
    if (v < 0) v += len;
    return std::max<int64_t>(0, std::min<int64_t>(v, end ? len : len));
  };
  int64_t lo = (begin_mask & 1) ? 0 : clamp(b[0], false), hi = (end_mask & 1) ? len : clamp(e[0], true);
  const bool scalar = (shrink & 1) != 0;
  if (scalar) {
    const int64_t i = b[0] < 0 ? b[0] + len : b[0];
    if (i < 0 || i >= len) return err(c, "index " + std::to_string(b[0]) + " is outside a vector of " + std::to_string(len));
    lo = i;
    hi = i + 1;
  }
  hi = std::max(hi, lo);
  if (have_sym) {
    std::vector<SymDim> part(sym.begin() + lo, sym.begin() + hi);
    bool known = true;
    std::vector<int64_t> vals;
    for (const SymDim& d : part) {
      known = known && d.node < 0;
      vals.push_back(d.value);
    }
    if (known) {
      const Shape shape = scalar ? Shape{} : Shape{static_cast<int64_t>(vals.size())};
      return emit_const(c, int_tensor(dt, vals, shape)).status();
    }
    sym = std::move(part);
  }
  AttrMap a;
  a.set("begin", std::vector<int64_t>{lo});
  a.set("size", std::vector<int64_t>{hi - lo});
  AF_ASSIGN_OR_RETURN(Node* sl, emit(c, "Slice", {c.in[0]}, std::move(a), scalar ? fresh(c.name + "/slice") : ""));
  Node* made = sl;
  if (scalar) {
    AttrMap r;
    r.set("shape", std::vector<int64_t>{});
    AF_ASSIGN_OR_RETURN(made, emit(c, "Reshape", {Endpoint{sl->id, 0}}, std::move(r)));
  }
  if (have_sym) sym_[{made->id, 0}] = sym;
  return Status::OK();
}

// Pack of scalars along axis 0 with a run-time input (constant ones fold): each a [1] vector,
// then a Concat; symbolic inputs carry their elements.
Status Importer::pack(Ctx& c) {
  if (c.in.empty()) return err(c, "has no inputs");
  attr(c, "T");
  attr(c, "N");
  AF_ASSIGN_OR_RETURN(int64_t ax, attr_int(c, "axis", 0));
  std::vector<Endpoint> parts;
  std::vector<SymDim> sym;
  bool symbolic = true;
  for (size_t i = 0; i < c.in.size(); ++i) {
    const Shape& s = node_of(c.in[i])->output_shapes[static_cast<size_t>(c.in[i].index)];
    if (s.unknown_rank() || s.rank() != 0)
      return err(c, "input " + std::to_string(i) + " has shape " + s.to_string() + ": only scalars are packed");
    std::vector<SymDim> one;
    if (symbolic && sym_in(c, i, &one) && one.size() == 1) sym.push_back(one[0]);
    else symbolic = false;
    AttrMap r;
    r.set("shape", std::vector<int64_t>{1});
    AF_ASSIGN_OR_RETURN(Node* v, emit(c, "Reshape", {c.in[i]}, std::move(r), fresh(c.name + "/" + std::to_string(i))));
    parts.push_back(Endpoint{v->id, 0});
  }
  if (ax != 0 && ax != -1) return err_attr(c, "axis", "must be 0 when packing scalars");
  AttrMap a;
  a.set("axis", int64_t{0});
  AF_ASSIGN_OR_RETURN(Node* made, emit(c, "Concat", parts, std::move(a)));
  if (symbolic) sym_[{made->id, 0}] = sym;
  return Status::OK();
}

// Fill whose dims hold run-time sizes: Fill(known dims, 1 where unknown, value) times, for each
// unknown dimension i that is dimension k of a tensor E, ones shaped [1.., E's size k at i, ..1]
// (a Slice of E, a Reshape and OnesLike, cast to the value's dtype): exact for every value.
Status Importer::fill_at_run_time(Ctx& c, const std::vector<SymDim>& dims) {
  AF_ASSIGN_OR_RETURN(double value, fill_value(c));
  return fill_dims(c, dims, const_in(c, 1)->dtype(), value, "").status();
}

Result<Node*> Importer::fill_dims(Ctx& c, const std::vector<SymDim>& dims, DType dt, double value,
                                  const std::string& name) {
  std::vector<int64_t> base_dims;
  for (const SymDim& d : dims) {
    if (d.node < 0 && d.value < 0) return err(c, "dims hold a negative size");
    if (d.node >= 0 && d.scale != 1)
      return err(c, "a size known only at run time times " + std::to_string(d.scale) + " is not supported here");
    base_dims.push_back(d.node < 0 ? d.value : 1);
  }
  const std::string last_name = name.empty() ? c.name : name;
  AttrMap fa;
  fa.set("shape", Shape(base_dims));
  fa.set("dtype", dt);
  fa.set("value", value);
  AF_ASSIGN_OR_RETURN(Node* acc, emit(c, "Fill", {}, std::move(fa), fresh(last_name + "/known")));
  const int n = static_cast<int>(dims.size());
  int made = 0;
  for (int i = 0; i < n; ++i) {
    const SymDim& d = dims[static_cast<size_t>(i)];
    if (d.node < 0) continue;
    const Node* src = g_.node(d.node);
    const Shape& es = src->output_shapes[static_cast<size_t>(d.index)];
    if (es.unknown_rank() || d.dim >= es.rank()) return err(c, "dims name a dimension of a tensor of unknown rank");
    const std::string pre = fresh(last_name + "/dim" + std::to_string(i));
    AttrMap sa;
    sa.set("begin", std::vector<int64_t>(static_cast<size_t>(es.rank()), 0));
    std::vector<int64_t> size(static_cast<size_t>(es.rank()), 1);
    size[static_cast<size_t>(d.dim)] = -1;
    sa.set("size", size);
    AF_ASSIGN_OR_RETURN(Node* sl, emit(c, "Slice", {Endpoint{d.node, d.index}}, std::move(sa), pre + "/slice"));
    std::vector<int64_t> shape(static_cast<size_t>(n), 1);
    shape[static_cast<size_t>(i)] = -1;
    AttrMap ra;
    ra.set("shape", shape);
    AF_ASSIGN_OR_RETURN(Node* rs, emit(c, "Reshape", {Endpoint{sl->id, 0}}, std::move(ra), pre + "/reshape"));
    AF_ASSIGN_OR_RETURN(Node* ones, emit(c, "OnesLike", {Endpoint{rs->id, 0}}, {}, pre + "/ones"));
    Endpoint one{ones->id, 0};
    if (ones->output_types[0] != dt) {
      AttrMap ca;
      ca.set("DstT", dt);
      AF_ASSIGN_OR_RETURN(Node* cast, emit(c, "Cast", {one}, std::move(ca), pre + "/cast"));
      one = Endpoint{cast->id, 0};
    }
    ++made;
    const bool last = [&] {
      for (int j = i + 1; j < n; ++j)
        if (dims[static_cast<size_t>(j)].node >= 0) return false;
      return true;
    }();
    AF_ASSIGN_OR_RETURN(acc, emit(c, "Mul", {Endpoint{acc->id, 0}, one}, {}, last ? last_name : pre + "/mul"));
  }
  if (made == 0) return err(c, "dims are not known at import");
  return acc;
}

// Shape at run time (actorflow's Shape gives int64; a Cast makes TensorFlow's int32), its known
// dimensions kept for the consumers that need them at import.
Result<Node*> Importer::run_time_shape(Ctx& c, Endpoint in, DType dt, const std::string& name) {
  const std::string own = name.empty() ? c.name : name;
  const Shape& s = node_of(in)->output_shapes[static_cast<size_t>(in.index)];
  Node* made = nullptr;
  if (dt == DType::kInt64) {
    AF_ASSIGN_OR_RETURN(made, emit(c, "Shape", {in}, {}, own));
  } else if (dt == DType::kInt32) {
    AF_ASSIGN_OR_RETURN(Node* sh, emit(c, "Shape", {in}, {}, fresh(own + "/int64")));
    AttrMap a;
    a.set("DstT", DType::kInt32);
    AF_ASSIGN_OR_RETURN(made, emit(c, "Cast", {Endpoint{sh->id, 0}}, std::move(a), own));
  } else {
    return err_attr(c, "out_type", std::string("is ") + dtype_name(dt) + " (int32 or int64)");
  }
  std::vector<SymDim> dims;
  for (int i = 0; i < s.rank(); ++i)
    dims.push_back(s.dim(i) >= 0 ? SymDim{s.dim(i), -1, 0, 0} : SymDim{0, in.node, in.index, i});
  sym_[{made->id, 0}] = dims;
  return made;
}

// scale * dimension `dim` of the tensor the element names: Shape, Slice of one element, Reshape
// to a scalar, Cast, and a Mul by the scale when it is not 1.
Result<Node*> Importer::sym_scalar(Ctx& c, const SymDim& d, DType dt, const std::string& name) {
  const std::string own = name.empty() ? c.name : name;
  if (d.node < 0) return emit_const(c, int_tensor(dt, {d.value}, Shape{}), own);
  AF_ASSIGN_OR_RETURN(Node* sh, emit(c, "Shape", {Endpoint{d.node, d.index}}, {}, fresh(own + "/shape")));
  AttrMap sa;
  sa.set("begin", std::vector<int64_t>{d.dim});
  sa.set("size", std::vector<int64_t>{1});
  AF_ASSIGN_OR_RETURN(Node* sl, emit(c, "Slice", {Endpoint{sh->id, 0}}, std::move(sa), fresh(own + "/slice")));
  const bool cast = dt != DType::kInt64, mul = d.scale != 1;
  AttrMap ra;
  ra.set("shape", std::vector<int64_t>{});
  AF_ASSIGN_OR_RETURN(Node* v, emit(c, "Reshape", {Endpoint{sl->id, 0}}, std::move(ra),
                                    cast || mul ? fresh(own + "/scalar") : own));
  if (cast) {
    AttrMap ca;
    ca.set("DstT", dt);
    AF_ASSIGN_OR_RETURN(v, emit(c, "Cast", {Endpoint{v->id, 0}}, std::move(ca), mul ? fresh(own + "/cast") : own));
  }
  if (mul) {
    AF_ASSIGN_OR_RETURN(Node* k, emit_const(c, int_tensor(dt, {d.scale}, Shape{}), fresh(own + "/scale")));
    AF_ASSIGN_OR_RETURN(v, emit(c, "Mul", {Endpoint{v->id, 0}, Endpoint{k->id, 0}}, {}, own));
  }
  return v;
}

// The dimensions each gradient of a broadcasting binary op sums over: after left-padding the
// shorter shape with 1s, every dimension where that input is 1 (both, unless the shapes are equal:
// then none), as TensorFlow computes them. Folded to two Consts, also when the shapes hold sizes
// known only at run time, as long as that decides the answer: a run-time size against a 1 (the
// other input is reduced there; were the run-time size 1 too, reducing it would sum one element)
// or against the very same run-time size (no reduction). A run-time size against a known size
// above 1, or against another run-time size, depends on the run: refused naming both shapes.
Status Importer::broadcast_gradient_args(Ctx& c) {
  AF_RETURN_IF_ERROR(want_inputs(c, 2));
  attr(c, "T");
  std::vector<SymDim> s0, s1;
  for (size_t k = 0; k < 2; ++k) {
    if (!sym_in(c, k, k == 0 ? &s0 : &s1)) {
      AF_RETURN_IF_ERROR(const_ints(c, k, k == 0 ? "s0" : "s1").status());  // the error naming it
      return err(c, "input " + std::to_string(k) + " is not a shape known at import");
    }
  }
  const DType dt = node_of(c.in[0])->output_types[static_cast<size_t>(c.in[0].index)];
  if (dt != DType::kInt32 && dt != DType::kInt64) return err_attr(c, "T", "is not int32 or int64");
  auto text = [](const std::vector<SymDim>& v) {
    std::string t = "[";
    for (size_t i = 0; i < v.size(); ++i) t += (i ? "," : "") + (v[i].node < 0 ? std::to_string(v[i].value) : std::string("?"));
    return t + "]";
  };
  std::vector<int64_t> r0, r1;
  const bool equal = s0.size() == s1.size() && std::equal(s0.begin(), s0.end(), s1.begin(),
                                                         [](const SymDim& a, const SymDim& b) { return a.same(b); });
  if (!equal) {
    const size_t n = std::max(s0.size(), s1.size());
    const SymDim one{1, -1, 0, 0};
    for (size_t i = 0; i < n; ++i) {
      const SymDim a = i < n - s0.size() ? one : s0[i - (n - s0.size())];
      const SymDim b = i < n - s1.size() ? one : s1[i - (n - s1.size())];
      if (a.node < 0 && b.node < 0) {
        if (a.value != b.value && a.value != 1 && b.value != 1)
          return err(c, "shapes " + text(s0) + " and " + text(s1) + " do not broadcast");
        if (a.value == 1) r0.push_back(static_cast<int64_t>(i));
        if (b.value == 1) r1.push_back(static_cast<int64_t>(i));
      } else if (a.same(b)) {
        continue;
      } else if (a.node < 0 && a.value == 1) {
        r0.push_back(static_cast<int64_t>(i));
      } else if (b.node < 0 && b.value == 1) {
        r1.push_back(static_cast<int64_t>(i));
      } else {
        return err(c, "dimension " + std::to_string(i) + " of shapes " + text(s0) + " and " + text(s1) +
                          " is known only at run time on one side and is not 1 on the other: which input is "
                          "reduced depends on the run (actorflow needs it decided at import)");
      }
    }
  }
  AF_ASSIGN_OR_RETURN(Node* n1, emit_const(c, int_tensor(dt, r1, Shape{static_cast<int64_t>(r1.size())}), c.name + "/r1"));
  map_[c.tf_name + ":1"] = Endpoint{n1->id, 0};
  return emit_const(c, int_tensor(dt, r0, Shape{static_cast<int64_t>(r0.size())})).status();
}

// GatherV2 of a shape holding run-time sizes by constant indices: a Const when every element it
// picks is known, else the run-time Gather carrying the picked elements. *done false: the indices
// are not constant (the caller emits a plain Gather).
Status Importer::gather_sym(Ctx& c, const std::vector<SymDim>& params, bool* done) {
  *done = false;
  const Tensor* it = const_in(c, 1);
  if (!it) return Status::OK();
  AF_ASSIGN_OR_RETURN(auto idx, int_values(*it, "indices"));
  if (it->shape().rank() > 1) return err(c, "indices of a shape must be a scalar or a vector");
  std::vector<SymDim> picked;
  bool known = true;
  std::vector<int64_t> vals;
  for (int64_t i : idx) {
    if (i < 0 || i >= static_cast<int64_t>(params.size()))
      return err(c, "index " + std::to_string(i) + " is outside a shape of " + std::to_string(params.size()) + " elements");
    picked.push_back(params[static_cast<size_t>(i)]);
    known = known && picked.back().node < 0;
    vals.push_back(picked.back().value);
  }
  const DType dt = node_of(c.in[0])->output_types[static_cast<size_t>(c.in[0].index)];
  *done = true;
  if (known) return emit_const(c, int_tensor(dt, vals, it->shape())).status();
  AF_ASSIGN_OR_RETURN(Node* g, emit(c, "Gather", {c.in[0], c.in[1]}, {}));
  sym_[{g->id, 0}] = picked;
  return Status::OK();
}

// Slice of a shape holding run-time sizes (constant begin and size), or ConcatV2 of shapes among
// which one holds run-time sizes: a Const when every element is known, else the run-time Slice or
// Concat carrying the elements. *done false when no input is such a shape.
Status Importer::slice_or_concat_sym(Ctx& c, bool* done) {
  *done = false;
  std::vector<SymDim> all;
  bool any_sym = false;
  if (c.op == "Slice") {
    if (c.in.size() != 3 || const_in(c, 0) || !sym_in(c, 0, &all)) return Status::OK();
    attr(c, "T");
    attr(c, "Index");
    AF_ASSIGN_OR_RETURN(auto b, const_ints(c, 1, "begin"));
    AF_ASSIGN_OR_RETURN(auto sz, const_ints(c, 2, "size"));
    const int64_t len = static_cast<int64_t>(all.size());
    if (b.size() != 1 || sz.size() != 1) return err(c, "begin and size of a vector's slice must have 1 element");
    const int64_t size = sz[0] == -1 ? len - b[0] : sz[0];
    if (b[0] < 0 || b[0] > len || size < 0 || size > len - b[0])
      return err(c, "slice [" + std::to_string(b[0]) + ", +" + std::to_string(sz[0]) + ") is outside a vector of " +
                        std::to_string(len));
    all = std::vector<SymDim>(all.begin() + b[0], all.begin() + b[0] + size);
    any_sym = true;
  } else {
    if (c.in.size() < 2) return Status::OK();
    for (size_t i = 0; i + 1 < c.in.size(); ++i) {
      std::vector<SymDim> part;
      const bool is_sym = !const_in(c, i) && sym_in(c, i, &part);
      if (!is_sym && !(const_in(c, i) && sym_in(c, i, &part))) return Status::OK();
      const Shape& ps = node_of(c.in[i])->output_shapes[static_cast<size_t>(c.in[i].index)];
      if (ps.rank() != 1) return Status::OK();
      any_sym = any_sym || is_sym;
      all.insert(all.end(), part.begin(), part.end());
    }
    if (!any_sym) return Status::OK();
    attr(c, "T");
    attr(c, "N");
    attr(c, "Tidx");
    AF_ASSIGN_OR_RETURN(auto ax, const_ints(c, c.in.size() - 1, "axis"));
    if (ax.size() != 1 || (ax[0] != 0 && ax[0] != -1)) return err(c, "axis must be 0 when concatenating vectors");
  }
  *done = true;
  const DType dt = node_of(c.in[0])->output_types[static_cast<size_t>(c.in[0].index)];
  bool known = true;
  std::vector<int64_t> vals;
  for (const SymDim& d : all) {
    known = known && d.node < 0;
    vals.push_back(d.value);
  }
  if (known) return emit_const(c, int_tensor(dt, vals, Shape{static_cast<int64_t>(vals.size())})).status();
  Node* made = nullptr;
  if (c.op == "Slice") {
    AF_ASSIGN_OR_RETURN(auto b, const_ints(c, 1, "begin"));
    AttrMap a;
    a.set("begin", b);
    a.set("size", std::vector<int64_t>{static_cast<int64_t>(all.size())});
    AF_ASSIGN_OR_RETURN(made, emit(c, "Slice", {c.in[0]}, std::move(a)));
  } else {
    AttrMap a;
    a.set("axis", int64_t{0});
    AF_ASSIGN_OR_RETURN(made, emit(c, "Concat", std::vector<Endpoint>(c.in.begin(), c.in.end() - 1), std::move(a)));
  }
  sym_[{made->id, 0}] = all;
  return Status::OK();
}

// Prod over axis 0 of a shape holding run-time sizes: a Const when all are known; one run-time
// size times the known ones, computed at run time (and carried as that size scaled); more than
// one run-time size is refused.
Status Importer::prod_sym(Ctx& c, const std::vector<SymDim>& x) {
  attr(c, "T");
  attr(c, "Tidx");
  AF_ASSIGN_OR_RETURN(bool keep, attr_bool(c, "keep_dims", false));
  const Shape& xs = node_of(c.in[0])->output_shapes[static_cast<size_t>(c.in[0].index)];
  AF_ASSIGN_OR_RETURN(auto axes, const_ints(c, 1, "reduction_indices"));
  if (keep || xs.rank() != 1 || axes.size() != 1 || (axes[0] != 0 && axes[0] != -1))
    return err(c, "Prod of a shape known only at run time must reduce its one axis without keep_dims");
  const DType dt = node_of(c.in[0])->output_types[static_cast<size_t>(c.in[0].index)];
  int64_t known = 1;
  const SymDim* run = nullptr;
  for (const SymDim& d : x) {
    if (d.node >= 0) {
      if (run) return err(c, "multiplies two sizes known only at run time; actorflow needs all but one at import");
      run = &d;
      if (!checked_mul(known, d.scale, &known)) return err(c, "integer Prod overflows");
    } else if (!checked_mul(known, d.value, &known)) {
      return err(c, "integer Prod overflows");
    }
  }
  if (!run) return emit_const(c, int_tensor(dt, {known}, Shape{})).status();
  SymDim r = *run;
  r.scale = known;
  AF_ASSIGN_OR_RETURN(Node* made, sym_scalar(c, r, dt, ""));
  sym_[{made->id, 0}] = {r};
  return Status::OK();
}

// Mul, FloorDiv or Maximum of a scalar size known only at run time (scale * a dimension) and an
// integer constant scalar, as TensorFlow 1.x's gradients of Mean write them (`Prod(shape) //
// Maximum(Prod(...), 1)`): kept symbolic where that is exact for every run-time size >= 0 (a Mul;
// a FloorDiv by a positive divisor of the scale; a Maximum with a constant <= 0), else an error
// naming the node. *done is false when the inputs are not one such scalar and one constant.
Status Importer::scalar_op_sym(Ctx& c, bool* done) {
  *done = false;
  std::vector<SymDim> a, b;
  if (!sym_in(c, 0, &a) || !sym_in(c, 1, &b) || a.size() != 1 || b.size() != 1) return Status::OK();
  const bool run_a = a[0].node >= 0, run_b = b[0].node >= 0;
  if (run_a == run_b) return Status::OK();  // both constant (folded below) or both run-time (refused)
  for (size_t i = 0; i < 2; ++i)
    if (node_of(c.in[i])->output_shapes[static_cast<size_t>(c.in[i].index)].rank() != 0) return Status::OK();
  const DType dt = node_of(c.in[0])->output_types[static_cast<size_t>(c.in[0].index)];
  if (node_of(c.in[1])->output_types[static_cast<size_t>(c.in[1].index)] != dt)
    return err(c, "its inputs have different dtypes");
  attr(c, "T");
  SymDim r = run_a ? a[0] : b[0];
  const int64_t k = run_a ? b[0].value : a[0].value;
  const std::string what = "a size known only at run time (" + std::to_string(r.scale) + " x a dimension)";
  if (c.op == "Mul") {
    if (!checked_mul(r.scale, k, &r.scale)) return err(c, "integer Mul overflows");
  } else if (c.op == "FloorDiv") {
    if (!run_a) return err(c, "divides by " + what + "; actorflow needs the divisor at import");
    if (k <= 0 || r.scale % k != 0)
      return err(c, "divides " + what + " by " + std::to_string(k) +
                        ", which is not exact for every size; actorflow keeps only exact quotients");
    r.scale /= k;
  } else if (k > 0 || r.scale < 0) {  // Maximum
    return err(c, "takes the maximum of " + what + " and " + std::to_string(k) +
                      ", which depends on the size at run time");
  }
  if (r.scale == 0) r = SymDim{0, -1, 0, 0};
  AF_ASSIGN_OR_RETURN(Node* made, sym_scalar(c, r, dt, ""));
  if (r.node >= 0) sym_[{made->id, 0}] = {r};
  *done = true;
  return Status::OK();
}

// A DT_HALF or DT_BFLOAT16 Const: its 16-bit patterns (tensor_content, little-endian, or half_val)
// widened exactly to a float32 Const of the same name, which only a Cast may read (a Cast from
// float16 to float32 is then exact, to any other type as TensorFlow's: every half value is a
// float32, so casting the widened value gives the same result).
Status Importer::half_const(Ctx& c) {
  AF_ASSIGN_OR_RETURN(const pb::TensorProto* pp, const_value(c, {pb::DT_HALF, pb::DT_BFLOAT16}));
  const pb::TensorProto& p = *pp;
  const bool half = p.dtype() == pb::DT_HALF;
  auto shape = shape_of(p.tensor_shape());
  if (!shape.ok()) return err_attr(c, "value", shape.status().message());
  auto count = shape->checked_num_elements();
  if (!shape->fully_defined() || !count.ok() || *count > kMaxConstElements)
    return err_attr(c, "value", "has shape " + shape->to_string() + " (at most 2^28 elements)");
  const int64_t n = *count;
  if (4 * n > const_budget_) return err(c, "its constants would exceed " + std::to_string(const_limit_) + " bytes");
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  if (!p.tensor_content().empty()) {
    if (p.tensor_content().size() != static_cast<size_t>(2 * n))
      return err_attr(c, "value", "tensor_content holds " + std::to_string(p.tensor_content().size()) + " bytes for " +
                                      std::to_string(n) + " 16-bit elements");
    const auto* b = reinterpret_cast<const unsigned char*>(p.tensor_content().data());
    for (int64_t i = 0; i < n; ++i) bits[static_cast<size_t>(i)] = static_cast<uint16_t>(b[2 * i] | (b[2 * i + 1] << 8));
  } else {
    const int64_t have = p.half_val_size();
    if (have != 0 && have != 1 && have != n)
      return err_attr(c, "value", "holds " + std::to_string(have) + " half_val values for " + std::to_string(n) + " elements");
    for (int64_t i = 0; i < n && have > 0; ++i) {
      const int32_t h = p.half_val(static_cast<int>(have == 1 ? 0 : i));
      if (h < 0 || h > 0xffff) return err_attr(c, "value", "half_val holds " + std::to_string(h) + ", not a 16-bit pattern");
      bits[static_cast<size_t>(i)] = static_cast<uint16_t>(h);
    }
  }
  Tensor t(DType::kFloat32, *shape);
  for (int64_t i = 0; i < n; ++i)
    t.data<float>()[i] = half ? float16_bits_to_float(bits[static_cast<size_t>(i)]) : bfloat16_bits_to_float(bits[static_cast<size_t>(i)]);
  AF_ASSIGN_OR_RETURN(Node* made, emit_const(c, std::move(t)));
  widened_eps_.insert({made->id, 0});
  return Status::OK();
}

// A DT_STRING Const: actorflow has no string dtype, so the node is a uint8 vector of the bytes
// (a scalar's bytes; a vector's strings each followed by a NUL byte) and the strings are kept
// for the Saver ops that read them at import. Only scalars and vectors.
Status Importer::string_const(Ctx& c) {
  AF_ASSIGN_OR_RETURN(const pb::TensorProto* pp, const_value(c, {pb::DT_STRING}));
  const pb::TensorProto& p = *pp;
  auto shape = shape_of(p.tensor_shape());
  if (!shape.ok()) return err_attr(c, "value", shape.status().message());
  if (!shape->fully_defined() || shape->rank() > 1) return err_attr(c, "value", "is a string tensor of shape " + shape->to_string() + " (scalars and vectors only)");
  const int64_t n = shape->rank() == 0 ? 1 : shape->dim(0);
  const int64_t have = p.string_val_size();
  if (have != n && !(have == 1 && n > 1) && !(have == 0))
    return err_attr(c, "value", "holds " + std::to_string(have) + " string_val values for " + std::to_string(n) + " elements");
  if (n > 1000000) return err_attr(c, "value", "holds more than 10^6 strings");
  std::vector<std::string> vals;
  std::string bytes;
  for (int64_t i = 0; i < n; ++i) {
    vals.push_back(have == 0 ? std::string() : p.string_val(static_cast<int>(have == 1 ? 0 : i)));
    if (static_cast<int64_t>(bytes.size() + vals.back().size()) > const_budget_)
      return err(c, "its constants would exceed " + std::to_string(const_limit_) + " bytes");
    bytes += vals.back();
    if (shape->rank() == 1) bytes += '\0';
  }
  Tensor t(DType::kUInt8, Shape{static_cast<int64_t>(bytes.size())});
  if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  AF_ASSIGN_OR_RETURN(Node* made, emit_const(c, std::move(t)));
  string_eps_.insert({made->id, 0});
  if (shape->rank() == 1) string_vec_eps_.insert({made->id, 0});
  strings_[made->id] = std::move(vals);
  return Status::OK();
}

Result<std::vector<std::string>> Importer::const_strings(const Ctx& c, size_t i, const std::string& what) {
  auto it = strings_.find(c.in[i].node);
  if (it == strings_.end() || c.in[i].index != 0)
    return err(c, what + " (input " + std::to_string(i) + ", '" + printable(c.in_names[i]) +
                      "') must be a string constant at import");
  return it->second;
}

// SaveV2(prefix, tensor_names, shape_and_slices, tensors...) / RestoreV2(prefix, tensor_names,
// shape_and_slices) -> actorflow's SaveV2(prefix, tensors...) / RestoreV2(prefix) with the names as
// an attribute. Whole tensors only (every shape_and_slice empty). Slot entries are wired to their
// variables' optimizer state once every node is imported (link_slots).
Status Importer::save_restore(Ctx& c) {
  const bool save = c.op == "SaveV2";
  if (c.in.size() < 3) return err(c, "needs a prefix, tensor names and shapes-and-slices");
  if (!string_eps_.count({c.in[0].node, c.in[0].index}))
    return err(c, "its prefix (input 0, '" + printable(c.in_names[0]) + "') is not a string tensor");
  AF_ASSIGN_OR_RETURN(auto names, const_strings(c, 1, "tensor_names"));
  AF_ASSIGN_OR_RETURN(auto slices, const_strings(c, 2, "shape_and_slices"));
  if (slices.size() != names.size()) return err(c, "tensor_names and shape_and_slices differ in length");
  for (size_t i = 0; i < slices.size(); ++i)
    if (!slices[i].empty())
      return err(c, "entry '" + printable(names[i]) + "' has shape_and_slice \"" + printable(slices[i]) +
                        "\": saving or restoring slices of a partitioned variable is not supported");
  const pb::AttrValue* dts = attr(c, "dtypes");
  if (!dts || dts->value_case() != pb::AttrValue::kList) return err_attr(c, "dtypes", "is missing or not a list of types");
  if (dts->list().type_size() != static_cast<int>(names.size()))
    return err_attr(c, "dtypes", "lists " + std::to_string(dts->list().type_size()) + " types for " +
                                     std::to_string(names.size()) + " tensor names");
  std::vector<std::string> dtype_names;
  for (int i = 0; i < dts->list().type_size(); ++i) {
    auto dt = dtype_of(dts->list().type(i));
    if (!dt.ok() || *dt == DType::kUInt8)
      return err_attr(c, "dtypes", "entry '" + printable(names[static_cast<size_t>(i)]) + "': " +
                                       (dt.ok() ? std::string("uint8 is not a TensorFlow checkpoint dtype here") : dt.status().message()));
    dtype_names.push_back(dtype_name(*dt));
  }
  AttrMap a;
  a.set("tensor_names", names);
  std::vector<Endpoint> ins{c.in[0]};
  if (save) {
    if (c.in.size() != 3 + names.size())
      return err(c, "has " + std::to_string(c.in.size() - 3) + " tensors for " + std::to_string(names.size()) + " names");
    for (size_t i = 0; i < names.size(); ++i) {
      const Endpoint& e = c.in[3 + i];
      const std::string& want = dtype_names[i];
      if (dtype_name(node_of(e)->output_types[static_cast<size_t>(e.index)]) != want)
        return err(c, "tensor '" + printable(names[i]) + "' is " +
                          dtype_name(node_of(e)->output_types[static_cast<size_t>(e.index)]) + ", dtypes says " + want);
      ins.push_back(e);
    }
  } else {
    if (c.in.size() != 3) return err(c, "has " + std::to_string(c.in.size()) + " inputs, the op takes 3");
    a.set("dtypes", dtype_names);
  }
  AF_ASSIGN_OR_RETURN(Node* n, emit(c, c.op, std::move(ins), std::move(a)));
  (save ? save_nodes_ : restore_nodes_).push_back(n->id);
  return Status::OK();
}

Status Importer::saver_strings(Ctx& c, bool* done) {
  *done = false;
  const std::string& op = c.op;
  auto is_str = [this, &c](size_t i) { return string_eps_.count({c.in[i].node, c.in[i].index}) > 0; };
  auto is_vec = [this, &c](size_t i) { return string_vec_eps_.count({c.in[i].node, c.in[i].index}) > 0; };
  auto need_str = [&](size_t i, const std::string& what) -> Status {
    if (i >= c.in.size() || !is_str(i))
      return err(c, what + " (input " + std::to_string(i) + ") is not a string tensor");
    if (is_vec(i)) return err(c, what + " (input " + std::to_string(i) + ") is a vector of strings; a string is needed");
    return Status::OK();
  };
  Node* made = nullptr;
  bool vector = false;
  if (op == "StaticRegexFullMatch") {
    AF_RETURN_IF_ERROR(want_inputs(c, 1));
    AF_RETURN_IF_ERROR(need_str(0, "input"));
    AF_ASSIGN_OR_RETURN(std::string pattern, attr_string(c, "pattern", ""));
    AttrMap a;
    a.set("pattern", pattern);
    AF_RETURN_IF_ERROR(emit(c, "RegexFullMatch", c.in, std::move(a)).status());
    *done = true;
    return Status::OK();
  }
  if (op == "Select" && c.in.size() == 3 && (is_str(1) || is_str(2))) {
    attr(c, "T");
    AF_RETURN_IF_ERROR(need_str(1, "t"));
    AF_RETURN_IF_ERROR(need_str(2, "e"));
    AF_ASSIGN_OR_RETURN(made, emit(c, "StringSelect", c.in, {}));
  } else if (op == "StringJoin") {
    attr(c, "N");
    for (size_t i = 0; i < c.in.size(); ++i) AF_RETURN_IF_ERROR(need_str(i, "string " + std::to_string(i)));
    AF_ASSIGN_OR_RETURN(std::string sep, attr_string(c, "separator", ""));
    AttrMap a;
    a.set("separator", sep);
    AF_ASSIGN_OR_RETURN(made, emit(c, "StringJoin", c.in, std::move(a)));
  } else if (op == "Pack" && !c.in.empty() && is_str(0)) {
    attr(c, "T");
    attr(c, "N");
    AF_ASSIGN_OR_RETURN(int64_t ax, attr_int(c, "axis", 0));
    if (ax != 0 && ax != -1) return err_attr(c, "axis", "must be 0 when packing strings");
    for (size_t i = 0; i < c.in.size(); ++i) AF_RETURN_IF_ERROR(need_str(i, "string " + std::to_string(i)));
    AttrMap a;
    a.set("separator", std::string());
    a.set("vector", true);
    AF_ASSIGN_OR_RETURN(made, emit(c, "StringJoin", c.in, std::move(a)));
    vector = true;
  } else if (op == "ShardedFilename") {
    AF_RETURN_IF_ERROR(want_inputs(c, 3));
    AF_RETURN_IF_ERROR(need_str(0, "basename"));
    AF_ASSIGN_OR_RETURN(made, emit(c, "ShardedFilename", c.in, {}));
  } else if (op == "MergeV2Checkpoints") {
    AF_RETURN_IF_ERROR(want_inputs(c, 2));
    if (!is_str(0) || !is_vec(0)) return err(c, "checkpoint_prefixes (input 0) is not a vector of strings");
    AF_RETURN_IF_ERROR(need_str(1, "destination_prefix"));
    AF_ASSIGN_OR_RETURN(bool del, attr_bool(c, "delete_old_dirs", true));
    AF_ASSIGN_OR_RETURN(bool missing, attr_bool(c, "allow_missing_files", false));
    AttrMap a;
    a.set("delete_old_dirs", del);
    a.set("allow_missing_files", missing);
    AF_RETURN_IF_ERROR(emit(c, "MergeV2Checkpoints", c.in, std::move(a)).status());
    *done = true;
    return Status::OK();
  } else {
    return Status::OK();
  }
  string_eps_.insert({made->id, 0});
  if (vector) string_vec_eps_.insert({made->id, 0});
  *done = true;
  return Status::OK();
}

// actorflow's optimizer updates keep their slots in the variable actor, not in the GraphDef's slot
// variables. So that a graph's own Saver saves and restores what TensorFlow's would, every SaveV2
// or RestoreV2 entry that is a slot variable of an imported update is wired to its variable's
// state: a SaveV2 also reads VariableSlots of the variable (and saves the slot it holds); a
// RestoreV2 also gives the variable's slots, which a RestoreVariableSlots (after the variable's
// restoring Assign) hands to the variable actor, run by whatever runs those Assigns (restore_all).
Status Importer::link_slots() {
  if (save_nodes_.empty() && restore_nodes_.empty()) return Status::OK();
  // slot variable node -> (owner variable node, slot id as data/variable_slots.h numbers them)
  std::map<int, std::pair<int, int64_t>> slot_owner;
  for (const SlotCheck& sc : slot_checks_) {
    const Node* up = g_.node(sc.update);
    const std::string owner_var = up->attrs.get_or<std::string>("var_name", "");
    int owner = -1;
    for (int i = 0; i < g_.num_nodes() && owner < 0; ++i) {
      const Node* v = g_.node(i);
      if (v->op == "VariableV2" && v->attrs.get_or<std::string>("shared_name", v->name) == owner_var) owner = i;
    }
    int64_t id = 0;  // SlotId (device/slot_ids.h): 1 Momentum, 2 Adam m, 3 Adam v, 4 Adagrad, 5 RMSProp ms, 6 RMSProp mom, 7 FTRL accum, 8 FTRL linear
    if (up->op == "ApplyMomentum") id = 1;
    else if (up->op == "ApplyAdam") id = sc.role == "m" ? 2 : 3;
    else if (up->op == "ApplyAdagrad") id = 4;
    else if (up->op == "ApplyRMSProp") id = sc.role == "ms" ? 5 : 6;
    else if (up->op == "ApplyFtrl") id = sc.role == "accumulator" ? 7 : 8;
    if (owner >= 0 && id > 0) slot_owner[sc.slot] = {owner, id};
  }
  // The variable node an entry's tensor reads (through Identity: resource variables' reads).
  auto var_behind = [this](Endpoint e) {
    for (int hops = 0; hops < 8; ++hops) {
      const Node* n = g_.node(e.node);
      if (n->op == "VariableV2") return e.node;
      if (n->op != "Identity" || n->inputs.size() != 1) return -1;
      e = n->inputs[0];
    }
    return -1;
  };
  auto where = [this](const Node* n) {
    return "node '" + printable(n->name.substr(prefix_.size())) + "' (op " + n->op + ") in " + source_ + ": ";
  };
  // Entries of a save/restore node: (slot_of, slot_id) per entry, owners (entry index) in order.
  auto entries = [&](const Node* n, const std::vector<int>& entry_vars, std::vector<int64_t>* slot_of,
                     std::vector<int64_t>* slot_id, std::vector<int64_t>* owners) -> Status {
    const size_t m = entry_vars.size();
    slot_of->assign(m, -1);
    slot_id->assign(m, 0);
    for (size_t i = 0; i < m; ++i) {
      auto it = slot_owner.find(entry_vars[i]);
      if (entry_vars[i] < 0 || it == slot_owner.end()) continue;
      int64_t j = -1;
      for (size_t k = 0; k < m; ++k)
        if (entry_vars[k] == it->second.first) j = static_cast<int64_t>(k);
      const auto names = n->attrs.get_or<std::vector<std::string>>("tensor_names", {});
      if (j < 0)
        return InvalidArgument(where(n) + "entry '" + printable(names[i]) + "' is an optimizer slot of variable '" +
                               printable(g_.node(it->second.first)->name) +
                               "', which it does not list (actorflow keeps the slot in that variable)");
      (*slot_of)[i] = j;
      (*slot_id)[i] = it->second.second;
      if (std::find(owners->begin(), owners->end(), j) == owners->end()) owners->push_back(j);
    }
    return Status::OK();
  };
  auto context = [this](const Node* n) {
    Ctx c;
    c.tf_name = n->name.substr(prefix_.size());
    c.op = n->op;
    c.name = n->name;
    return c;
  };
  for (int id : save_nodes_) {
    Node* n = g_.node(id);
    std::vector<int> vars;
    for (size_t i = 1; i < n->inputs.size(); ++i) vars.push_back(var_behind(n->inputs[i]));
    std::vector<int64_t> slot_of, slot_id, owners;
    AF_RETURN_IF_ERROR(entries(n, vars, &slot_of, &slot_id, &owners));
    if (owners.empty()) continue;
    Ctx c = context(n);
    for (size_t k = 0; k < owners.size(); ++k) {
      Node* v = g_.node(vars[static_cast<size_t>(owners[k])]);
      c.name = fresh(n->name + "/slots_" + std::to_string(k));
      AF_ASSIGN_OR_RETURN(Node* blob, emit_var_op(c, v, "VariableSlots", {}, {}));
      n = g_.node(id);
      n->inputs.push_back(Endpoint{blob->id, 0});
    }
    n->attrs.set("slot_of", slot_of);
    n->attrs.set("slot_id", slot_id);
    Status s = infer_node_shapes(g_, *n);
    if (!s.ok()) return InvalidArgument(where(n) + s.message());
  }
  for (int id : restore_nodes_) {
    Node* n = g_.node(id);
    const size_t m = n->output_types.size();
    // The RestoreV2 output an Assign restores: its input (reference variables), or that through
    // Identity nodes (resource variables: RestoreV2 -> Identity -> AssignVariableOp); -1 when it
    // restores none of this node's.
    auto restored_entry = [this, id](const Node* a) -> int {
      if (a->op != "Assign" || a->inputs.size() != 1) return -1;
      Endpoint e = a->inputs[0];
      for (int hops = 0; hops < 8; ++hops) {
        if (e.node == id) return e.index;
        const Node* x = g_.node(e.node);
        if (x->op != "Identity" || x->inputs.size() != 1) return -1;
        e = x->inputs[0];
      }
      return -1;
    };
    // Each entry's variable: the one its output is assigned to.
    std::vector<int> vars(m, -1);
    std::vector<int> assign_of(m, -1);
    for (int i = 0; i < g_.num_nodes(); ++i) {
      const Node* a = g_.node(i);
      const int entry = restored_entry(a);
      if (entry < 0 || static_cast<size_t>(entry) >= m) continue;
      const size_t k = static_cast<size_t>(entry);
      const std::string var = a->attrs.get_or<std::string>("var_name", "");
      for (int j = 0; j < g_.num_nodes(); ++j) {
        const Node* v = g_.node(j);
        if (v->op == "VariableV2" && v->attrs.get_or<std::string>("shared_name", v->name) == var) vars[k] = j;
      }
      assign_of[k] = i;
    }
    std::vector<int64_t> slot_of, slot_id, owners;
    AF_RETURN_IF_ERROR(entries(n, vars, &slot_of, &slot_id, &owners));
    if (owners.empty()) continue;
    n->attrs.set("slot_of", slot_of);
    n->attrs.set("slot_id", slot_id);
    Status s = infer_node_shapes(g_, *n);
    if (!s.ok()) return InvalidArgument(where(n) + s.message());
    Ctx c = context(n);
    for (size_t k = 0; k < owners.size(); ++k) {
      const size_t j = static_cast<size_t>(owners[k]);
      Node* v = g_.node(vars[j]);
      c.ctrl.clear();
      c.ctrl.push_back(assign_of[j]);  // after the variable's value is restored (it gives dtype and shape)
      c.name = fresh(n->name + "/slots_" + std::to_string(k));
      AF_ASSIGN_OR_RETURN(Node* r, emit_var_op(c, v, "RestoreVariableSlots", {Endpoint{id, static_cast<int>(m + k)}}));
      // Whatever runs the restoring Assigns (restore_all) runs this too.
      const int rid = r->id;
      for (int i = 0; i < g_.num_nodes(); ++i) {
        Node* x = g_.node(i);
        if (i == rid) continue;
        bool runs_restore = false;
        for (int ci : x->control_inputs) runs_restore = runs_restore || restored_entry(g_.node(ci)) >= 0;
        if (runs_restore && std::find(x->control_inputs.begin(), x->control_inputs.end(), rid) == x->control_inputs.end())
          x->control_inputs.push_back(rid);
      }
      n = g_.node(id);
    }
  }
  return Status::OK();
}

Status parse(const std::string& data, GraphDefFormat format, const std::string& source, pb::GraphDef* def) {
  if (data.size() > kMaxGraphDefBytes) return InvalidArgument(source + ": a GraphDef larger than 1 GiB");
  if (format == GraphDefFormat::kBinary || format == GraphDefFormat::kAuto) {
    if (def->ParseFromString(data)) return Status::OK();
    if (format == GraphDefFormat::kBinary)
      return InvalidArgument(source + ": not a binary GraphDef (truncated or not protobuf)");
    def->Clear();
  }
  class Collector : public google::protobuf::io::ErrorCollector {
   public:
    void AddError(int line, int column, const std::string& message) override {
      if (first.empty()) first = "line " + std::to_string(line + 1) + ", column " + std::to_string(column + 1) + ": " + message;
    }
    void AddWarning(int, int, const std::string&) override {}
    std::string first;
  } errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (parser.ParseFromString(data, def)) return Status::OK();
  return InvalidArgument(source + (format == GraphDefFormat::kAuto ? ": neither a binary nor a text GraphDef"
                                                                    : ": not a text GraphDef") +
                         (errors.first.empty() ? "" : " (" + printable(errors.first) + ")"));
}

}  // namespace

Tensor tf_string_tensor(const std::string& s) {
  Tensor t(DType::kUInt8, Shape{static_cast<int64_t>(s.size())});
  if (!s.empty()) std::memcpy(t.raw_data(), s.data(), s.size());
  return t;
}

Result<Output> ImportedGraph::output(const std::string& tf_name) const {
  auto it = outputs.find(tf_name);
  if (it == outputs.end()) return NotFound("the imported graph has no tensor '" + tf_name + "'");
  return it->second;
}

Node* ImportedGraph::node(const std::string& tf_name) const {
  auto it = nodes.find(tf_name);
  return it == nodes.end() ? nullptr : it->second;
}

Result<ImportedGraph> import_graph_def(const Scope& scope, const std::string& data, const ImportGraphDefOptions& opts,
                                       const std::string& source) {
  const std::string src = source.empty() ? "<bytes>" : source;
  if (!scope.ok()) return scope.status();
  pb::GraphDef def;
  AF_RETURN_IF_ERROR(parse(data, opts.format, src, &def));
  // First into a copy, so that a failing import leaves the scope's graph as it was; then the
  // new nodes (ids from the copy's old size on, identical in both) into the graph itself.
  Graph& real = *scope.graph();
  Graph trial(real);
  const int first = trial.num_nodes();
  Importer imp(trial, scope, opts, src, data.size());
  AF_RETURN_IF_ERROR(imp.run(def));
  ImportedGraph got = imp.result();
  for (int id = first; id < trial.num_nodes(); ++id) {
    auto added = real.add_node(*trial.node(id));
    if (!added.ok()) return added.status();
  }
  auto rebind = [&real](Node* n) { return real.node(n->id); };
  for (auto& [k, n] : got.nodes) n = rebind(n);
  for (auto& [k, o] : got.outputs) o = Output(rebind(o.node()), o.index());
  return got;
}

Result<ImportedGraph> import_graph_def_file(const Scope& scope, const std::string& path,
                                            const ImportGraphDefOptions& opts) {
  AF_ASSIGN_OR_RETURN(std::string data, read_regular_file(path, kMaxGraphDefBytes, "GraphDef"));
  ImportGraphDefOptions o = opts;
  if (o.format == GraphDefFormat::kAuto) {
    auto ends = [&path](const char* suf) {
      const size_t n = std::strlen(suf);
      return path.size() >= n && path.compare(path.size() - n, n, suf) == 0;
    };
    o.format = ends(".pbtxt") || ends(".txt") ? GraphDefFormat::kText : GraphDefFormat::kBinary;
  }
  return import_graph_def(scope, data, o, path);
}

}  // namespace actorflow
