// GraphDef (msgpack): exact round trips of every node field and attribute kind, clear
// errors for every kind of invalid content, and no crash on truncated or garbled bytes.
#include <gtest/gtest.h>

#include <msgpack.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "graph/graph_def.h"
#include "graph/ops.h"
#include "runtime/partition.h"
#include "runtime/placer.h"

namespace actorflow {
namespace {

void register_two_outputs() {
  static bool done = [] {
    OpRegistry::global().add({"TestTwoOutputs", 1, [](InferenceContext& c) -> Status {
                                c.set_output(0, c.input_type(0), c.input_shape(0));
                                c.set_output(1, DType::kInt64, Shape{});
                                return Status::OK();
                              }});
    return true;
  }();
  (void)done;
}

void expect_same_graph(const Graph& a, const Graph& b) {
  ASSERT_EQ(a.num_nodes(), b.num_nodes());
  for (int id = 0; id < a.num_nodes(); ++id) {
    const Node& x = *a.node(id);
    const Node& y = *b.node(id);
    SCOPED_TRACE("node " + x.name);
    EXPECT_EQ(y.id, id);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.op, y.op);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.control_inputs, y.control_inputs);
    EXPECT_EQ(x.requested_device, y.requested_device);
    EXPECT_EQ(x.assigned_device, y.assigned_device);
    EXPECT_EQ(x.colocate_with, y.colocate_with);
    EXPECT_TRUE(x.attrs == y.attrs);
    ASSERT_EQ(x.attrs.all().size(), y.attrs.all().size());
    for (const auto& [k, v] : x.attrs.all()) {
      const AttrValue& w = y.attrs.all().at(k);
      EXPECT_EQ(v.index(), w.index()) << k;
    }
    EXPECT_EQ(x.output_types, y.output_types);
    EXPECT_EQ(x.output_shapes, y.output_shapes);
    EXPECT_EQ(b.find(x.name), &y);
  }
}

// A graph with every dtype, shape form, attribute kind and node field.
Graph rich_graph() {
  register_two_outputs();
  Scope root = Scope::root();
  auto ps = root.with_device("/job:ps/task:0");
  auto f = ops::constant(ps, {1.5f, -2, 3, 4}, {2, 2}, "f");
  ops::constant(root, Tensor::from_vector<int32_t>({1, -2, 3}, {3}), "i32");
  ops::constant(root, Tensor::from_vector<int64_t>({int64_t{1} << 40, -5}, {2}), "i64");
  ops::constant(root, Tensor::from_vector<double>({3.25, -1e300}, {2, 1}), "f64");
  ops::constant(root, Tensor::from_vector<uint8_t>({0, 255, 7}, {3}), "u8");
  ops::constant(root, Tensor::from_vector<bool>({true, false, true}, {3}), "bl");
  ops::constant(root, Tensor(DType::kFloat32, Shape{0, 3}), "empty");
  ops::constant(root, Tensor::scalar<float>(9.f), "scalar");
  auto p = ops::placeholder(root, DType::kFloat32, Shape{-1, 2}, "p");
  ops::placeholder(root, DType::kInt32, Shape::unknown(), "pu");
  auto two = NodeBuilder(root.with_op_name("two"), "TestTwoOutputs").input(f).output();
  auto second = ops::identity(root.with_op_name("second"), Output(two.node(), 1));
  auto every = NodeBuilder(root.colocate_with(f).with_device("/gpu:1").with_op_name("every_attr"), "Identity")
                   .input(f)
                   .attr("i", int64_t{-42})
                   .attr("i_max", std::numeric_limits<int64_t>::max())
                   .attr("i_min", std::numeric_limits<int64_t>::min())
                   .attr("fl", 2.5)
                   .attr("fl_tiny", 1e-310)
                   .attr("fl_integral", 2.0)
                   .attr("fl_negzero", -0.0)
                   .attr("fl_inf", -std::numeric_limits<double>::infinity())
                   .attr("b_true", true)
                   .attr("b_false", false)
                   .attr("s", std::string("with\0nul", 8))
                   .attr("s_empty", std::string())
                   .attr("t", DType::kInt64)
                   .attr("shape", Shape{2, -1})
                   .attr("shape_unknown", Shape::unknown())
                   .attr("shape_scalar", Shape{})
                   .attr("li", std::vector<int64_t>{1, -2, 3})
                   .attr("li_empty", std::vector<int64_t>{})
                   .attr("ls", std::vector<std::string>{"x", "", "y/z"})
                   .attr("tensor", Tensor::from_vector<int32_t>({5, 6, 7, 8, 9, 10}, {2, 3}))
                   .attr("tensor_uninit", Tensor())
                   .output();
  ops::no_op(root.with_control_dependencies({every, p, second}), {}, "group");
  EXPECT_TRUE(root.ok()) << root.status();
  Graph g = *root.graph();
  g.find("f")->assigned_device = "/job:ps/replica:0/task:0/device:CPU:0";
  g.find("every_attr")->assigned_device = "/job:ps/replica:0/task:0/device:GPU:1";
  return g;
}

TEST(GraphDefTest, RoundTripsEveryFieldAndAttrKind) {
  Graph g = rich_graph();
  const std::string bytes = serialize_graph(g);
  auto back = deserialize_graph(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  expect_same_graph(g, *back);
  // Spot checks that the comparison compares real content.
  const Node* e = back->find("every_attr");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->attrs.get_or<std::string>("s", ""), std::string("with\0nul", 8));
  EXPECT_EQ(e->attrs.get_or<int64_t>("i_min", 0), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(e->attrs.get_or<double>("fl_tiny", 0), 1e-310);
  EXPECT_EQ(e->attrs.get_or<double>("fl_integral", 0), 2.0);  // still a double, not an int
  EXPECT_TRUE(std::signbit(e->attrs.get_or<double>("fl_negzero", 1)));
  EXPECT_EQ(e->attrs.get_or<double>("fl_inf", 0), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(e->attrs.get_or<Shape>("shape_unknown", Shape{}).unknown_rank());
  const Tensor t = e->attrs.get_or<Tensor>("tensor", Tensor());
  ASSERT_EQ(t.dtype(), DType::kInt32);
  ASSERT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + 6), (std::vector<int32_t>{5, 6, 7, 8, 9, 10}));
  EXPECT_FALSE(e->attrs.get_or<Tensor>("tensor_uninit", Tensor::scalar<float>(1)).is_initialized());
  EXPECT_EQ(e->colocate_with, std::vector<std::string>{"f"});
  EXPECT_EQ(e->requested_device, "/gpu:1");
  EXPECT_EQ(back->find("second")->inputs[0], (Endpoint{back->find("two")->id, 1}));
  const Tensor bl = back->find("bl")->attrs.get_or<Tensor>("value", Tensor());
  ASSERT_EQ(bl.dtype(), DType::kBool);
  EXPECT_EQ(std::vector<bool>(bl.data<bool>(), bl.data<bool>() + 3), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(back->find("group")->control_inputs.size(), 3u);
  // NaN survives too (apart, since NaN != NaN defeats the attribute comparison).
  Graph n;
  Node nan_node;
  nan_node.name = "nan";
  nan_node.op = "NoOp";
  nan_node.attrs.set("x", std::numeric_limits<double>::quiet_NaN());
  ASSERT_TRUE(n.add_node(nan_node).ok());
  auto nan_back = deserialize_graph(serialize_graph(n));
  ASSERT_TRUE(nan_back.ok()) << nan_back.status();
  EXPECT_TRUE(std::isnan(nan_back->find("nan")->attrs.get_or<double>("x", 0)));
  // Deterministic: serialising the copy gives the same bytes.
  EXPECT_EQ(serialize_graph(*back), bytes);
  // The format name and version are at the top.
  EXPECT_NE(bytes.find("actorflow.GraphDef"), std::string::npos);
  EXPECT_LT(bytes.find("actorflow.GraphDef"), 40u);
}

TEST(GraphDefTest, RoundTripsPlacedPartitions) {
  Scope root = Scope::root();
  auto a = ops::constant(root.with_device("/cpu:0"), {1, 2}, {2}, "a");
  auto x = ops::no_op(root.with_device("/cpu:0"), {}, "x");
  ops::identity(root.with_device("/cpu:1").with_control_dependencies({x}).with_op_name("b"), a);
  Graph g = *root.graph();
  PlacerOptions opts;
  opts.default_device = "/job:localhost/replica:0/task:0/device:CPU:0";
  ASSERT_TRUE(place_graph(g, {{"/job:localhost/replica:0/task:0/device:CPU:0", "CPU"},
                              {"/job:localhost/replica:0/task:0/device:CPU:1", "CPU"}},
                          opts)
                  .ok());
  auto parts = partition_graph(g);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 2u);
  for (const auto& [dev, part] : *parts) {
    SCOPED_TRACE(dev);
    auto back = deserialize_graph(serialize_graph(part));
    ASSERT_TRUE(back.ok()) << back.status();
    expect_same_graph(part, *back);
  }
  Graph empty;
  auto e = deserialize_graph(serialize_graph(empty));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->num_nodes(), 0);
}

// ---- hand-made GraphDefs for the error cases -----------------------------------------

// A msgpack value built in the test, so one field at a time can be made wrong.
struct V {
  enum Kind { kNil, kInt, kUInt, kStr, kBin, kArr, kMap, kBool, kDbl } kind = kNil;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  std::string s;
  std::vector<V> a;
  std::vector<std::pair<std::string, V>> m;

  static V nil() { return V{}; }
  static V num(int64_t x) { V v; v.kind = kInt; v.i = x; return v; }
  static V unum(uint64_t x) { V v; v.kind = kUInt; v.u = x; return v; }
  static V str(std::string x) { V v; v.kind = kStr; v.s = std::move(x); return v; }
  static V bin(std::string x) { V v; v.kind = kBin; v.s = std::move(x); return v; }
  static V arr(std::vector<V> x) { V v; v.kind = kArr; v.a = std::move(x); return v; }
  static V map(std::vector<std::pair<std::string, V>> x) { V v; v.kind = kMap; v.m = std::move(x); return v; }
  static V boolean(bool x) { V v; v.kind = kBool; v.i = x; return v; }
  static V dbl(double x) { V v; v.kind = kDbl; v.d = x; return v; }

  V& at(const std::string& k) {
    for (auto& kv : m)
      if (kv.first == k) return kv.second;
    ADD_FAILURE() << "no key " << k;
    return *this;
  }
  void erase(const std::string& k) {
    for (auto it = m.begin(); it != m.end(); ++it)
      if (it->first == k) { m.erase(it); return; }
  }
};

void pack(msgpack::packer<msgpack::sbuffer>& pk, const V& v) {
  switch (v.kind) {
    case V::kNil: pk.pack_nil(); break;
    case V::kInt: pk.pack_int64(v.i); break;
    case V::kUInt: pk.pack_uint64(v.u); break;
    case V::kBool: if (v.i) pk.pack_true(); else pk.pack_false(); break;
    case V::kDbl: pk.pack_double(v.d); break;
    case V::kStr:
      pk.pack_str(static_cast<uint32_t>(v.s.size()));
      pk.pack_str_body(v.s.data(), static_cast<uint32_t>(v.s.size()));
      break;
    case V::kBin:
      pk.pack_bin(static_cast<uint32_t>(v.s.size()));
      pk.pack_bin_body(v.s.data(), static_cast<uint32_t>(v.s.size()));
      break;
    case V::kArr:
      pk.pack_array(static_cast<uint32_t>(v.a.size()));
      for (const auto& x : v.a) pack(pk, x);
      break;
    case V::kMap:
      pk.pack_map(static_cast<uint32_t>(v.m.size()));
      for (const auto& [k, x] : v.m) {
        pk.pack_str(static_cast<uint32_t>(k.size()));
        pk.pack_str_body(k.data(), static_cast<uint32_t>(k.size()));
        pack(pk, x);
      }
      break;
  }
}

std::string bytes_of(const V& v) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  pack(pk, v);
  return std::string(buf.data(), buf.size());
}

V node(const std::string& name, const std::string& op, std::vector<V> inputs, std::vector<std::pair<std::string, V>> attrs,
       std::vector<V> types, std::vector<V> shapes) {
  return V::map({{"name", V::str(name)},
                 {"op", V::str(op)},
                 {"inputs", V::arr(std::move(inputs))},
                 {"control_inputs", V::arr({})},
                 {"requested_device", V::str("")},
                 {"assigned_device", V::str("")},
                 {"colocate_with", V::arr({})},
                 {"attrs", V::map(std::move(attrs))},
                 {"output_types", V::arr(std::move(types))},
                 {"output_shapes", V::arr(std::move(shapes))}});
}

V tensor_attr(int64_t dtype, std::vector<V> dims, std::string data) {
  return V::arr({V::str("tensor"),
                 V::map({{"dtype", V::num(dtype)}, {"shape", V::arr(std::move(dims))}, {"data", V::bin(std::move(data))}})});
}

// Const "a" (float32 [2]) -> Identity "b". Valid as built.
V good() {
  V a = node("a", "Const", {},
             {{"value", tensor_attr(1, {V::num(2)}, std::string(8, '\0'))}, {"dtype", V::arr({V::str("type"), V::num(1)})}},
             {V::num(1)}, {V::arr({V::num(2)})});
  V b = node("b", "Identity", {V::str("a:0")}, {}, {V::num(1)}, {V::arr({V::num(2)})});
  return V::map({{"format", V::str("actorflow.GraphDef")}, {"version", V::num(1)}, {"nodes", V::arr({a, b})}});
}

void expect_error(const V& v, Code code, const std::string& text) {
  auto r = deserialize_graph(bytes_of(v));
  ASSERT_FALSE(r.ok()) << "accepted; wanted: " << text;
  EXPECT_EQ(r.status().code(), code) << r.status();
  EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status();
}

TEST(GraphDefTest, HandMadeGoodGraphIsAccepted) {
  auto r = deserialize_graph(bytes_of(good()));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_nodes(), 2);
  EXPECT_EQ(r->find("b")->inputs[0], (Endpoint{0, 0}));
}

TEST(GraphDefTest, InvalidContentIsRejectedWithClearErrors) {
  const Code kBad = Code::kInvalidArgument;
  { V v = good(); v.at("format") = V::str("tensorflow.GraphDef");
    expect_error(v, kBad, "format is 'tensorflow.GraphDef', expected 'actorflow.GraphDef'"); }
  { V v = good(); v.at("version") = V::num(2); expect_error(v, kBad, "unsupported version 2 (this build reads version 1)"); }
  { V v = good(); v.at("version") = V::str("1"); expect_error(v, kBad, "GraphDef: version: expected an integer, found string"); }
  { V v = good(); v.erase("nodes"); expect_error(v, kBad, "GraphDef: missing field 'nodes'"); }
  { V v = good(); v.m.push_back({"extra", V::nil()}); expect_error(v, kBad, "GraphDef: unknown field 'extra'"); }
  { V v = V::arr({}); expect_error(v, kBad, "GraphDef: expected a map, found array"); }
  { V v = good(); v.at("nodes").a[1].at("op") = V::str("NoSuchOp");
    expect_error(v, kBad, "node 1 ('b'): op type 'NoSuchOp' is not registered"); }
  { V v = good(); v.at("nodes").a[1].at("inputs") = V::arr({V::str("zz:0")});
    expect_error(v, kBad, "node 1 ('b'): input 0 'zz:0' names no node of the graph"); }
  { V v = good(); v.at("nodes").a[1].at("inputs") = V::arr({V::str("a:3")});
    expect_error(v, kBad, "input 0 'a:3': 'a' (Const) has 1 outputs"); }
  { V v = good(); v.at("nodes").a[1].at("inputs") = V::arr({V::str("a")});
    expect_error(v, kBad, "input 0 'a' is not 'node:index'"); }
  { V v = good(); v.at("nodes").a[1].at("inputs") = V::arr({});
    expect_error(v, kBad, "op Identity takes 1 inputs, the GraphDef gives 0"); }
  { V v = good(); v.at("nodes").a[1].at("control_inputs") = V::arr({V::str("ghost")});
    expect_error(v, kBad, "control input 'ghost' names no node of the graph"); }
  { V v = good(); v.at("nodes").a[1].at("name") = V::str("a"); expect_error(v, kBad, "node 1 ('a'): a node named 'a' already exists"); }
  { V v = good(); v.at("nodes").a[1].at("name") = V::str(""); expect_error(v, kBad, "node 1: empty name"); }
  { V v = good(); v.at("nodes").a[0].erase("attrs"); expect_error(v, kBad, "node 0: missing field 'attrs'"); }
  { V v = good(); v.at("nodes").a[0].at("output_types") = V::arr({V::num(99)});
    expect_error(v, kBad, "node 0 ('a'): output_types[0]: 99 is not a dtype"); }
  { V v = good(); v.at("nodes").a[0].at("output_shapes") = V::arr({});
    expect_error(v, kBad, "1 output types but 0 output shapes"); }
  { V v = good(); v.at("nodes").a[0].at("output_shapes") = V::arr({V::arr({V::num(-2)})});
    expect_error(v, kBad, "dimension -2 is negative"); }
  { V v = good(); v.at("nodes").a[0].at("attrs").at("value") = tensor_attr(1, {V::num(2)}, std::string(7, '\0'));
    expect_error(v, kBad, "attr 'value' (tensor): 7 data bytes do not match float32 [2] (8 bytes)"); }
  { V v = good(); v.at("nodes").a[0].at("attrs").at("value") =
        tensor_attr(1, {V::num(int64_t{1} << 40), V::num(int64_t{1} << 40)}, std::string(8, '\0'));
    expect_error(v, kBad, "shape [1099511627776,1099511627776] has more than 2^60 elements"); }  // before any byte count
  { V v = good(); v.at("nodes").a[0].at("attrs").at("value") = tensor_attr(1, {V::num(-1)}, "");
    expect_error(v, kBad, "tensor shape [?] is not fully defined"); }
  { V v = good(); v.at("nodes").a[0].at("attrs").at("value") = tensor_attr(42, {V::num(2)}, std::string(8, '\0'));
    expect_error(v, kBad, "attr 'value' (tensor).dtype: 42 is not a dtype"); }
  { V v = good(); v.at("nodes").a[0].at("attrs").at("dtype") = V::arr({V::str("complex"), V::num(1)});
    expect_error(v, kBad, "attr 'dtype': unknown attribute kind 'complex'"); }
  { V v = good(); v.at("nodes").a[0].at("attrs").at("dtype") = V::arr({V::str("int"), V::unum(~uint64_t{0})});
    expect_error(v, kBad, "does not fit int64"); }
  { V v = good(); v.at("nodes").a[0].at("attrs").at("dtype") = V::arr({V::str("bool"), V::num(1)});
    expect_error(v, kBad, "attr 'dtype' (bool): expected a bool, found int"); }
  { V v = good(); v.at("nodes").a[0].at("attrs").at("dtype") = V::str("type");
    expect_error(v, kBad, "attr 'dtype': expected a [kind, value] pair, found string"); }
  { V v = good(); v.at("nodes").a[0].at("attrs").at("dtype") = V::arr({V::str("list_int"), V::arr({V::dbl(1.5)})});
    expect_error(v, kBad, "attr 'dtype' (list_int)[0]: expected an integer, found float"); }
  // Shapes no tensor can have (docs/security.md): declared, and of a constant with zero elements; bool
  // bytes other than 0 and 1.
  { V v = good(); v.at("nodes").a[1].at("output_shapes") = V::arr({V::arr({V::num((int64_t{1} << 62) + 1), V::num(4)})});
    expect_error(v, kBad, "Identity 'b' output_shapes[0]: shape [4611686018427387905,4] has more than 2^60 elements"); }
  { V v = good(); v.at("nodes").a[0].at("attrs").at("value") = tensor_attr(1, {V::num(0), V::num(int64_t{1} << 62)}, "");
    expect_error(v, kBad, "has more than 2^60 elements"); }
  { V v = good(); v.at("nodes").a[0].at("attrs").at("value") = tensor_attr(6, {V::num(2)}, std::string("\x01\x02", 2));
    expect_error(v, kBad, "a bool tensor holds a byte other than 0 and 1"); }
  // A cycle a -> b -> a.
  { V v = good(); v.at("nodes").a[0] = node("a", "Identity", {V::str("b:0")}, {}, {V::num(1)}, {V::arr({V::num(2)})});
    expect_error(v, kBad, "cycle"); }
}

TEST(GraphDefTest, TruncatedBytesAreDataLossAtEveryLength) {
  const std::string bytes = serialize_graph(rich_graph());
  ASSERT_GT(bytes.size(), 100u);
  for (size_t len = 0; len < bytes.size(); ++len) {
    auto r = deserialize_graph(bytes.substr(0, len));
    ASSERT_FALSE(r.ok()) << "prefix of " << len << " bytes accepted";
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << len << ": " << r.status();
  }
  auto trailing = deserialize_graph(bytes + "x");
  ASSERT_FALSE(trailing.ok());
  EXPECT_NE(trailing.status().message().find("1 trailing bytes"), std::string::npos) << trailing.status();
}

TEST(GraphDefTest, GarbledBytesNeverCrash) {
  const std::string bytes = serialize_graph(rich_graph());
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string m = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) m[rng() % m.size()] = static_cast<char>(rng() & 0xff);
    auto r = deserialize_graph(m);
    if (r.ok()) {
      ++accepted;  // a harmless change (e.g. a letter of a value): the result must be usable
      auto again = deserialize_graph(serialize_graph(*r));
      ASSERT_TRUE(again.ok()) << again.status();
    } else {
      EXPECT_FALSE(r.status().message().empty());
    }
  }
  // Random buffers, including huge declared container sizes (0xdd = array32, 0xdf = map32).
  for (int trial = 0; trial < 2000; ++trial) {
    std::string m(1 + rng() % 64, '\0');
    for (auto& c : m) c = static_cast<char>(rng() & 0xff);
    if (trial % 3 == 0) m[0] = static_cast<char>(0xdd);
    if (trial % 3 == 1) m[0] = static_cast<char>(0xdf);
    EXPECT_FALSE(deserialize_graph(m).ok());
  }
  EXPECT_FALSE(deserialize_graph(std::string("\xdd\xff\xff\xff\xff", 5)).ok());
  EXPECT_FALSE(deserialize_graph(std::string("\xc6\xff\xff\xff\xff", 5)).ok());
  RecordProperty("accepted_mutants", accepted);
}

}  // namespace
}  // namespace actorflow
