#include "graph/graph.h"

#include <deque>

namespace actorflow {

bool AttrMap::operator==(const AttrMap& o) const {
  if (attrs_.size() != o.attrs_.size()) return false;
  for (const auto& [k, v] : attrs_) {
    auto it = o.attrs_.find(k);
    if (it == o.attrs_.end() || it->second.index() != v.index()) return false;
    if (auto* t = std::get_if<Tensor>(&v)) {
      if (!t->equals(std::get<Tensor>(it->second))) return false;
    } else if (!(v == it->second)) {
      return false;
    }
  }
  return true;
}

Graph::Graph(const Graph& other) { *this = other; }

Graph& Graph::operator=(const Graph& other) {
  if (this == &other) return *this;
  nodes_.clear();
  for (const auto& n : other.nodes_) nodes_.push_back(std::make_unique<Node>(*n));
  by_name_ = other.by_name_;
  name_counts_ = other.name_counts_;
  return *this;
}

Result<Node*> Graph::add_node(Node node) {
  if (node.name.empty()) return InvalidArgument("node of op " + node.op + " has an empty name");
  if (by_name_.count(node.name)) return AlreadyExists("a node named '" + node.name + "' already exists");
  node.id = static_cast<int>(nodes_.size());
  by_name_[node.name] = node.id;
  name_counts_.emplace(node.name, 0);
  nodes_.push_back(std::make_unique<Node>(std::move(node)));
  return nodes_.back().get();
}

Node* Graph::find(const std::string& name) {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : nodes_[static_cast<size_t>(it->second)].get();
}

const Node* Graph::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : nodes_[static_cast<size_t>(it->second)].get();
}

std::string Graph::unique_name(const std::string& base) {
  auto it = name_counts_.find(base);
  if (it == name_counts_.end() && !by_name_.count(base)) {
    name_counts_[base] = 0;
    return base;
  }
  int& count = name_counts_[base];
  std::string candidate;
  do {
    ++count;
    candidate = base + "_" + std::to_string(count);
  } while (by_name_.count(candidate) || (name_counts_.count(candidate) && candidate != base));
  name_counts_[candidate] = 0;
  return candidate;
}

std::string Graph::endpoint_name(const Endpoint& e) const {
  const std::string& n = node(e.node)->name;
  return e.index == 0 ? n : n + ":" + std::to_string(e.index);
}

Result<Endpoint> Graph::parse_endpoint(const std::string& s) const {
  std::string name = s;
  int index = 0;
  auto colon = s.rfind(':');
  if (colon != std::string::npos) {
    name = s.substr(0, colon);
    const std::string idx = s.substr(colon + 1);
    if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos)
      return InvalidArgument("malformed tensor name '" + s + "': expected 'node' or 'node:index'");
    // At most 9 digits: std::stoi would throw past INT_MAX (a name from a remote client).
    if (idx.size() > 9) return InvalidArgument("tensor name '" + s + "': output index " + idx + " is out of range");
    index = std::stoi(idx);
  }
  const Node* n = find(name);
  if (!n) return NotFound("no node named '" + name + "' in the graph");
  if (index >= n->num_outputs())
    return InvalidArgument("node '" + name + "' (" + n->op + ") has " + std::to_string(n->num_outputs()) +
                           " outputs; '" + s + "' asks for output " + std::to_string(index));
  return Endpoint{n->id, index};
}

std::vector<std::vector<int>> Graph::consumers() const {
  std::vector<std::vector<int>> out(nodes_.size());
  for (const auto& n : nodes_) {
    for (const auto& in : n->inputs) out[static_cast<size_t>(in.node)].push_back(n->id);
    for (int c : n->control_inputs) out[static_cast<size_t>(c)].push_back(n->id);
  }
  return out;
}

Result<std::vector<int>> Graph::topological_order() const {
  std::vector<int> pending(nodes_.size(), 0);
  auto cons = consumers();
  for (const auto& n : nodes_) pending[static_cast<size_t>(n->id)] = static_cast<int>(n->inputs.size() + n->control_inputs.size());
  std::deque<int> ready;
  for (const auto& n : nodes_)
    if (pending[static_cast<size_t>(n->id)] == 0) ready.push_back(n->id);
  std::vector<int> order;
  while (!ready.empty()) {
    int id = ready.front();
    ready.pop_front();
    order.push_back(id);
    for (int c : cons[static_cast<size_t>(id)])
      if (--pending[static_cast<size_t>(c)] == 0) ready.push_back(c);
  }
  if (order.size() != nodes_.size()) {
    for (const auto& n : nodes_)
      if (pending[static_cast<size_t>(n->id)] > 0)
        return InvalidArgument("graph has a cycle through node '" + n->name + "' (" + n->op + ")");
  }
  return order;
}

}  // namespace actorflow
