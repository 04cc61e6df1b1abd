// Graph, Node and attributes: the dataflow graph a client builds and the master
// places, partitions and ships to devices.
//
// A Graph owns its nodes; Node pointers stay valid for the Graph's lifetime (nodes are
// never removed, only added). A Graph is not synchronised: build it from one thread,
// then share it read-only (e.g. as std::shared_ptr<const Graph>).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/status.h"
#include "tensor/tensor.h"
#include "tensor/types.h"

namespace actorflow {

// One attribute value. Lists of ints cover strides/ksize/perm; Tensor covers Const values.
using AttrValue = std::variant<int64_t, double, bool, std::string, DType, Shape, std::vector<int64_t>,
                               std::vector<std::string>, Tensor>;

// Name -> value map of a node's attributes. Value type, not synchronised.
class AttrMap {
 public:
  void set(const std::string& name, AttrValue v) { attrs_[name] = std::move(v); }
  bool has(const std::string& name) const { return attrs_.count(name) != 0; }
  // Removes `name` (nothing when absent).
  void erase(const std::string& name) { attrs_.erase(name); }
  // Returns the value of `name` as T; NotFound or InvalidArgument (wrong type) naming the attr.
  template <typename T>
  Result<T> get(const std::string& name) const {
    auto it = attrs_.find(name);
    if (it == attrs_.end()) return NotFound("missing attribute '" + name + "'");
    if (auto* p = std::get_if<T>(&it->second)) return *p;
    return InvalidArgument("attribute '" + name + "' has the wrong type");
  }
  // Returns the value of `name` as T, or `dflt` when absent or of another type.
  template <typename T>
  T get_or(const std::string& name, T dflt) const {
    auto it = attrs_.find(name);
    if (it == attrs_.end()) return dflt;
    if (auto* p = std::get_if<T>(&it->second)) return *p;
    return dflt;
  }
  const std::map<std::string, AttrValue>& all() const { return attrs_; }
  bool operator==(const AttrMap& o) const;

 private:
  std::map<std::string, AttrValue> attrs_;
};

// One output of a node: (node id, output index).
struct Endpoint {
  int node = -1;
  int index = 0;
  bool operator==(const Endpoint& o) const { return node == o.node && index == o.index; }
  bool operator<(const Endpoint& o) const { return node < o.node || (node == o.node && index < o.index); }
};

struct Node {
  int id = -1;
  std::string name;               // unique in the graph, e.g. "tower_0/MatMul_1"
  std::string op;                 // registered op type, e.g. "MatMul"
  std::vector<Endpoint> inputs;   // data inputs, in order
  std::vector<int> control_inputs;  // node ids that must run first
  std::string requested_device;   // as the user wrote it (Scope::with_device), may be partial
  std::string assigned_device;    // canonical full name after placement; "" before
  std::vector<std::string> colocate_with;  // node names this node must share a device with
  AttrMap attrs;
  std::vector<DType> output_types;   // filled by the op's shape function
  std::vector<Shape> output_shapes;

  int num_outputs() const { return static_cast<int>(output_types.size()); }
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph& other);             // deep copy of all nodes
  Graph& operator=(const Graph& other);
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  // Adds `node` (its id is assigned here) and returns a stable pointer owned by the graph.
  // AlreadyExists if the name is taken.
  Result<Node*> add_node(Node node);

  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  // Precondition: 0 <= id < num_nodes().
  Node* node(int id) { return nodes_[static_cast<size_t>(id)].get(); }
  const Node* node(int id) const { return nodes_[static_cast<size_t>(id)].get(); }
  // The node called `name`, or nullptr.
  Node* find(const std::string& name);
  const Node* find(const std::string& name) const;

  // Returns `base` if unused, else "base_1", "base_2", ... (TensorFlow's scheme). Reserves it.
  std::string unique_name(const std::string& base);

  // Output endpoint as TensorFlow names it: "name" for index 0, "name:1" otherwise.
  std::string endpoint_name(const Endpoint& e) const;
  // Parses "name" / "name:i" into an endpoint of this graph; NotFound / InvalidArgument.
  Result<Endpoint> parse_endpoint(const std::string& s) const;

  // For each node id, the ids of nodes that consume it (data or control). O(nodes + edges).
  std::vector<std::vector<int>> consumers() const;
  // Node ids in an order where every node follows its inputs and control inputs;
  // InvalidArgument naming a node on the cycle when the graph is cyclic.
  Result<std::vector<int>> topological_order() const;

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
  std::unordered_map<std::string, int> by_name_;
  std::unordered_map<std::string, int> name_counts_;
};

}  // namespace actorflow
