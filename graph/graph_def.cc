#include "graph/graph_def.h"
#include "graph/shape_util.h"


#include <msgpack.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "graph/op_registry.h"

namespace actorflow {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void put_str(Packer& pk, const std::string& s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void put_strs(Packer& pk, const std::vector<std::string>& v) {
  pk.pack_array(static_cast<uint32_t>(v.size()));
  for (const auto& s : v) put_str(pk, s);
}

void put_shape(Packer& pk, const Shape& s) {
  if (s.unknown_rank()) {
    pk.pack_nil();
    return;
  }
  pk.pack_array(static_cast<uint32_t>(s.rank()));
  for (int64_t d : s.dims()) pk.pack_int64(d);
}

void put_tensor(Packer& pk, const Tensor& t) {
  pk.pack_map(3);
  put_str(pk, "dtype");
  pk.pack_uint8(static_cast<uint8_t>(t.dtype()));
  put_str(pk, "shape");
  put_shape(pk, t.shape());
  put_str(pk, "data");
  const size_t n = t.is_initialized() ? t.bytes() : 0;
  pk.pack_bin(static_cast<uint32_t>(n));
  if (n) pk.pack_bin_body(static_cast<const char*>(t.raw_data()), static_cast<uint32_t>(n));
}

// Always a msgpack float64: Packer::pack_double writes integral values (2.0, -0.0) as
// integers, which would lose the kind and the sign of zero.
void put_double(msgpack::sbuffer& buf, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  char out[9];
  out[0] = static_cast<char>(0xcb);
  for (int i = 0; i < 8; ++i) out[1 + i] = static_cast<char>((bits >> (56 - 8 * i)) & 0xff);
  buf.write(out, sizeof out);
}

struct AttrWriter {
  Packer& pk;
  msgpack::sbuffer& buf;
  void kind(const char* k) {
    pk.pack_array(2);
    put_str(pk, k);
  }
  void operator()(int64_t v) { kind("int"); pk.pack_int64(v); }
  void operator()(double v) { kind("float"); put_double(buf, v); }
  void operator()(bool v) { kind("bool"); if (v) pk.pack_true(); else pk.pack_false(); }
  void operator()(const std::string& v) { kind("string"); put_str(pk, v); }
  void operator()(DType v) { kind("type"); pk.pack_uint8(static_cast<uint8_t>(v)); }
  void operator()(const Shape& v) { kind("shape"); put_shape(pk, v); }
  void operator()(const std::vector<int64_t>& v) {
    kind("list_int");
    pk.pack_array(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) pk.pack_int64(x);
  }
  void operator()(const std::vector<std::string>& v) { kind("list_string"); put_strs(pk, v); }
  void operator()(const Tensor& v) { kind("tensor"); put_tensor(pk, v); }
};

// ---- reading ----------------------------------------------------------------------------

using Obj = msgpack::object;

const char* type_name(const Obj& o) {
  switch (o.type) {
    case msgpack::type::NIL: return "nil";
    case msgpack::type::BOOLEAN: return "bool";
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER: return "int";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return "float";
    case msgpack::type::STR: return "string";
    case msgpack::type::BIN: return "bin";
    case msgpack::type::ARRAY: return "array";
    case msgpack::type::MAP: return "map";
    case msgpack::type::EXT: return "ext";
  }
  return "unknown";
}

Status wrong(const std::string& where, const char* want, const Obj& o) {
  return InvalidArgument(where + ": expected " + want + ", found " + type_name(o));
}

Result<std::string> get_str(const Obj& o, const std::string& where) {
  if (o.type != msgpack::type::STR) return wrong(where, "a string", o);
  return std::string(o.via.str.ptr, o.via.str.size);
}

Result<int64_t> get_int(const Obj& o, const std::string& where) {
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return InvalidArgument(where + ": integer " + std::to_string(o.via.u64) + " does not fit int64");
    return static_cast<int64_t>(o.via.u64);
  }
  return wrong(where, "an integer", o);
}

Result<std::vector<std::string>> get_strs(const Obj& o, const std::string& where) {
  if (o.type != msgpack::type::ARRAY) return wrong(where, "an array of strings", o);
  std::vector<std::string> out;
  out.reserve(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    AF_ASSIGN_OR_RETURN(std::string s, get_str(o.via.array.ptr[i], where + "[" + std::to_string(i) + "]"));
    out.push_back(std::move(s));
  }
  return out;
}

Result<DType> get_dtype(const Obj& o, const std::string& where) {
  AF_ASSIGN_OR_RETURN(int64_t v, get_int(o, where));
  if (v < 0 || v > 255 || (v != 0 && dtype_size(static_cast<DType>(v)) == 0))
    return InvalidArgument(where + ": " + std::to_string(v) + " is not a dtype");
  return static_cast<DType>(v);
}

Result<Shape> get_shape(const Obj& o, const std::string& where) {
  if (o.type == msgpack::type::NIL) return Shape::unknown();
  if (o.type != msgpack::type::ARRAY) return wrong(where, "a shape (nil or an array of ints)", o);
  std::vector<int64_t> dims;
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    AF_ASSIGN_OR_RETURN(int64_t d, get_int(o.via.array.ptr[i], where + "[" + std::to_string(i) + "]"));
    if (d < -1) return InvalidArgument(where + ": dimension " + std::to_string(d) + " is negative");
    dims.push_back(d);
  }
  Shape s(std::move(dims));
  // No shape a tensor could not have (an element count past 2^60, a rank over 254).
  if (Status st = check_static_shape(s); !st.ok()) return InvalidArgument(where + ": " + st.message());
  return s;
}

// Looks up the required keys of a map and rejects unknown ones.
class Fields {
 public:
  static Result<Fields> read(const Obj& o, const std::string& where, const std::vector<const char*>& keys) {
    if (o.type != msgpack::type::MAP) return wrong(where, "a map", o);
    Fields f;
    std::set<std::string> known(keys.begin(), keys.end());
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      AF_ASSIGN_OR_RETURN(std::string k, get_str(kv.key, where + ": key"));
      if (!known.count(k)) return InvalidArgument(where + ": unknown field '" + k + "'");
      if (!f.m_.emplace(k, &kv.val).second) return InvalidArgument(where + ": field '" + k + "' given twice");
    }
    for (const char* k : keys)
      if (!f.m_.count(k)) return InvalidArgument(where + ": missing field '" + k + "'");
    return f;
  }
  const Obj& operator[](const char* k) const { return *m_.at(k); }

 private:
  std::map<std::string, const Obj*> m_;
};

Result<Tensor> get_tensor(const Obj& o, const std::string& where) {
  AF_ASSIGN_OR_RETURN(Fields f, Fields::read(o, where, {"dtype", "shape", "data"}));
  AF_ASSIGN_OR_RETURN(DType dtype, get_dtype(f["dtype"], where + ".dtype"));
  AF_ASSIGN_OR_RETURN(Shape shape, get_shape(f["shape"], where + ".shape"));
  const Obj& data = f["data"];
  if (data.type != msgpack::type::BIN) return wrong(where + ".data", "bin", data);
  const uint64_t have = data.via.bin.size;
  if (dtype == DType::kInvalid) {
    if (shape.unknown_rank() || shape.rank() != 0 || have != 0)
      return InvalidArgument(where + ": an uninitialised tensor must have no shape and no data");
    return Tensor();
  }
  if (!shape.fully_defined()) return InvalidArgument(where + ": tensor shape " + shape.to_string() + " is not fully defined");
  if (auto n = shape.checked_num_elements(); !n.ok()) return InvalidArgument(where + ": " + n.status().message());
  // Expected byte count, without overflow: every factor is bounded by the bytes present.
  uint64_t want = dtype_size(dtype);
  bool fits = true;  // false when the byte count overflows 64 bits
  if (std::find(shape.dims().begin(), shape.dims().end(), 0) != shape.dims().end()) {
    want = 0;
  } else {
    for (int64_t d : shape.dims()) {
      if (want > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) { fits = false; break; }
      want *= static_cast<uint64_t>(d);
    }
  }
  if (!fits || want != have)
    return InvalidArgument(where + ": " + std::to_string(have) + " data bytes do not match " + dtype_name(dtype) + " " +
                           shape.to_string() + (fits ? " (" + std::to_string(want) + " bytes)" : std::string()));
  if (!bool_bytes_valid(dtype, data.via.bin.ptr, have))
    return InvalidArgument(where + ": a bool tensor holds a byte other than 0 and 1");
  Tensor t(dtype, shape);
  if (have) std::memcpy(t.raw_data(), data.via.bin.ptr, have);
  return t;
}

Result<AttrValue> get_attr(const Obj& o, const std::string& where) {
  if (o.type != msgpack::type::ARRAY || o.via.array.size != 2) return wrong(where, "a [kind, value] pair", o);
  AF_ASSIGN_OR_RETURN(std::string kind, get_str(o.via.array.ptr[0], where + ": kind"));
  const Obj& v = o.via.array.ptr[1];
  const std::string w = where + " (" + kind + ")";
  if (kind == "int") {
    AF_ASSIGN_OR_RETURN(int64_t x, get_int(v, w));
    return AttrValue(x);
  }
  if (kind == "float") {
    if (v.type == msgpack::type::FLOAT64 || v.type == msgpack::type::FLOAT32) return AttrValue(v.via.f64);
    // Other msgpack writers store integral doubles as integers.
    if (v.type == msgpack::type::POSITIVE_INTEGER) return AttrValue(static_cast<double>(v.via.u64));
    if (v.type == msgpack::type::NEGATIVE_INTEGER) return AttrValue(static_cast<double>(v.via.i64));
    return wrong(w, "a float", v);
  }
  if (kind == "bool") {
    if (v.type != msgpack::type::BOOLEAN) return wrong(w, "a bool", v);
    return AttrValue(v.via.boolean);
  }
  if (kind == "string") {
    AF_ASSIGN_OR_RETURN(std::string s, get_str(v, w));
    return AttrValue(std::move(s));
  }
  if (kind == "type") {
    AF_ASSIGN_OR_RETURN(DType t, get_dtype(v, w));
    return AttrValue(t);
  }
  if (kind == "shape") {
    AF_ASSIGN_OR_RETURN(Shape s, get_shape(v, w));
    return AttrValue(std::move(s));
  }
  if (kind == "list_int") {
    if (v.type != msgpack::type::ARRAY) return wrong(w, "an array of ints", v);
    std::vector<int64_t> xs;
    for (uint32_t i = 0; i < v.via.array.size; ++i) {
      AF_ASSIGN_OR_RETURN(int64_t x, get_int(v.via.array.ptr[i], w + "[" + std::to_string(i) + "]"));
      xs.push_back(x);
    }
    return AttrValue(std::move(xs));
  }
  if (kind == "list_string") {
    AF_ASSIGN_OR_RETURN(std::vector<std::string> xs, get_strs(v, w));
    return AttrValue(std::move(xs));
  }
  if (kind == "tensor") {
    AF_ASSIGN_OR_RETURN(Tensor t, get_tensor(v, w));
    return AttrValue(std::move(t));
  }
  return InvalidArgument(where + ": unknown attribute kind '" + kind + "'");
}

Result<Graph> decode(const Obj& root) {
  AF_ASSIGN_OR_RETURN(Fields top, Fields::read(root, "GraphDef", {"format", "version", "nodes"}));
  AF_ASSIGN_OR_RETURN(std::string format, get_str(top["format"], "GraphDef: format"));
  if (format != kGraphDefFormat)
    return InvalidArgument("GraphDef: format is '" + format + "', expected '" + kGraphDefFormat + "'");
  AF_ASSIGN_OR_RETURN(int64_t version, get_int(top["version"], "GraphDef: version"));
  if (version != kGraphDefVersion)
    return InvalidArgument("GraphDef: unsupported version " + std::to_string(version) + " (this build reads version " +
                           std::to_string(kGraphDefVersion) + ")");
  const Obj& nodes = top["nodes"];
  if (nodes.type != msgpack::type::ARRAY) return wrong("GraphDef: nodes", "an array", nodes);

  Graph g;
  // Edges by name, resolved once every node exists (inputs may name later nodes).
  std::vector<std::vector<std::string>> inputs(nodes.via.array.size), control(nodes.via.array.size);
  for (uint32_t i = 0; i < nodes.via.array.size; ++i) {
    std::string where = "GraphDef: node " + std::to_string(i);
    AF_ASSIGN_OR_RETURN(Fields f, Fields::read(nodes.via.array.ptr[i], where,
                                               {"name", "op", "inputs", "control_inputs", "requested_device",
                                                "assigned_device", "colocate_with", "attrs", "output_types",
                                                "output_shapes"}));
    Node n;
    AF_ASSIGN_OR_RETURN(n.name, get_str(f["name"], where + ": name"));
    if (n.name.empty()) return InvalidArgument(where + ": empty name");
    where += " ('" + n.name + "')";
    AF_ASSIGN_OR_RETURN(n.op, get_str(f["op"], where + ": op"));
    auto def = OpRegistry::global().lookup(n.op);
    if (!def.ok()) return InvalidArgument(where + ": " + def.status().message());
    AF_ASSIGN_OR_RETURN(inputs[i], get_strs(f["inputs"], where + ": inputs"));
    if ((*def)->num_inputs >= 0 && static_cast<int>(inputs[i].size()) != (*def)->num_inputs)
      return InvalidArgument(where + ": op " + n.op + " takes " + std::to_string((*def)->num_inputs) +
                             " inputs, the GraphDef gives " + std::to_string(inputs[i].size()));
    AF_ASSIGN_OR_RETURN(control[i], get_strs(f["control_inputs"], where + ": control_inputs"));
    AF_ASSIGN_OR_RETURN(n.requested_device, get_str(f["requested_device"], where + ": requested_device"));
    AF_ASSIGN_OR_RETURN(n.assigned_device, get_str(f["assigned_device"], where + ": assigned_device"));
    AF_ASSIGN_OR_RETURN(n.colocate_with, get_strs(f["colocate_with"], where + ": colocate_with"));
    const Obj& attrs = f["attrs"];
    if (attrs.type != msgpack::type::MAP) return wrong(where + ": attrs", "a map", attrs);
    for (uint32_t a = 0; a < attrs.via.map.size; ++a) {
      const auto& kv = attrs.via.map.ptr[a];
      AF_ASSIGN_OR_RETURN(std::string key, get_str(kv.key, where + ": attr name"));
      if (n.attrs.has(key)) return InvalidArgument(where + ": attr '" + key + "' given twice");
      AF_ASSIGN_OR_RETURN(AttrValue v, get_attr(kv.val, where + ": attr '" + key + "'"));
      n.attrs.set(key, std::move(v));
    }
    const Obj& types = f["output_types"];
    const Obj& shapes = f["output_shapes"];
    if (types.type != msgpack::type::ARRAY) return wrong(where + ": output_types", "an array", types);
    if (shapes.type != msgpack::type::ARRAY) return wrong(where + ": output_shapes", "an array", shapes);
    if (types.via.array.size != shapes.via.array.size)
      return InvalidArgument(where + ": " + std::to_string(types.via.array.size) + " output types but " +
                             std::to_string(shapes.via.array.size) + " output shapes");
    for (uint32_t k = 0; k < types.via.array.size; ++k) {
      const std::string w = std::to_string(k);
      AF_ASSIGN_OR_RETURN(DType t, get_dtype(types.via.array.ptr[k], where + ": output_types[" + w + "]"));
      AF_ASSIGN_OR_RETURN(Shape s, get_shape(shapes.via.array.ptr[k], where + ": " + n.op + " '" + n.name +
                                                                           "' output_shapes[" + w + "]"));
      n.output_types.push_back(t);
      n.output_shapes.push_back(std::move(s));
    }
    auto added = g.add_node(std::move(n));
    if (!added.ok()) return InvalidArgument(where + ": " + added.status().message());
  }
  for (uint32_t i = 0; i < nodes.via.array.size; ++i) {
    Node* n = g.node(static_cast<int>(i));
    const std::string where = "GraphDef: node " + std::to_string(i) + " ('" + n->name + "')";
    for (size_t k = 0; k < inputs[i].size(); ++k) {
      const std::string& s = inputs[i][k];
      auto colon = s.rfind(':');
      const std::string idx = colon == std::string::npos ? "" : s.substr(colon + 1);
      if (idx.empty() || idx.size() > 9 || idx.find_first_not_of("0123456789") != std::string::npos)
        return InvalidArgument(where + ": input " + std::to_string(k) + " '" + s + "' is not 'node:index'");
      const Node* src = g.find(s.substr(0, colon));
      if (!src)
        return InvalidArgument(where + ": input " + std::to_string(k) + " '" + s + "' names no node of the graph");
      const int index = std::stoi(idx);
      if (index >= src->num_outputs())
        return InvalidArgument(where + ": input " + std::to_string(k) + " '" + s + "': '" + src->name + "' (" + src->op +
                               ") has " + std::to_string(src->num_outputs()) + " outputs");
      n->inputs.push_back(Endpoint{src->id, index});
    }
    for (const auto& c : control[i]) {
      const Node* src = g.find(c);
      if (!src) return InvalidArgument(where + ": control input '" + c + "' names no node of the graph");
      n->control_inputs.push_back(src->id);
    }
  }
  auto order = g.topological_order();
  if (!order.ok()) return InvalidArgument("GraphDef: " + order.status().message());
  return g;
}

}  // namespace

std::string serialize_graph(const Graph& g) {
  msgpack::sbuffer buf;
  Packer pk(&buf);
  pk.pack_map(3);
  put_str(pk, "format");
  put_str(pk, kGraphDefFormat);
  put_str(pk, "version");
  pk.pack_int64(kGraphDefVersion);
  put_str(pk, "nodes");
  pk.pack_array(static_cast<uint32_t>(g.num_nodes()));
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = *g.node(id);
    pk.pack_map(10);
    put_str(pk, "name");
    put_str(pk, n.name);
    put_str(pk, "op");
    put_str(pk, n.op);
    put_str(pk, "inputs");
    pk.pack_array(static_cast<uint32_t>(n.inputs.size()));
    for (const auto& e : n.inputs) put_str(pk, g.node(e.node)->name + ":" + std::to_string(e.index));
    put_str(pk, "control_inputs");
    pk.pack_array(static_cast<uint32_t>(n.control_inputs.size()));
    for (int c : n.control_inputs) put_str(pk, g.node(c)->name);
    put_str(pk, "requested_device");
    put_str(pk, n.requested_device);
    put_str(pk, "assigned_device");
    put_str(pk, n.assigned_device);
    put_str(pk, "colocate_with");
    put_strs(pk, n.colocate_with);
    put_str(pk, "attrs");
    pk.pack_map(static_cast<uint32_t>(n.attrs.all().size()));
    for (const auto& [k, v] : n.attrs.all()) {
      put_str(pk, k);
      std::visit(AttrWriter{pk, buf}, v);
    }
    put_str(pk, "output_types");
    pk.pack_array(static_cast<uint32_t>(n.output_types.size()));
    for (DType t : n.output_types) pk.pack_uint8(static_cast<uint8_t>(t));
    put_str(pk, "output_shapes");
    pk.pack_array(static_cast<uint32_t>(n.output_shapes.size()));
    for (const auto& s : n.output_shapes) put_shape(pk, s);
  }
  return std::string(buf.data(), buf.size());
}

Result<Graph> deserialize_graph(const std::string& bytes) {
  // Every container needs at least one byte per element, so no declared size may exceed the
  // input: this stops a garbled length from allocating gigabytes before failing.
  const size_t n = bytes.size();
  const msgpack::unpack_limit limit(n, n, n, n, n, 64);
  msgpack::object_handle handle;
  size_t offset = 0;
  try {
    msgpack::unpack(handle, bytes.data(), n, offset, nullptr, nullptr, limit);
  } catch (const msgpack::insufficient_bytes&) {
    return DataLoss("GraphDef: truncated (" + std::to_string(n) + " bytes end inside a value)");
  } catch (const std::bad_alloc&) {
    return DataLoss("GraphDef: malformed msgpack (a size field is too large)");
  } catch (const std::exception& e) {
    return DataLoss(std::string("GraphDef: malformed msgpack: ") + e.what());
  }
  if (offset != n)
    return DataLoss("GraphDef: " + std::to_string(n - offset) + " trailing bytes after the graph (at offset " +
                    std::to_string(offset) + ")");
  return decode(handle.get());
}

}  // namespace actorflow
