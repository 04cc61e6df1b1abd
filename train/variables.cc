// Variable collections, initializers and the global step (include/actorflow/train.h).
//
// The collections are not a separate registry: every VariableV2 node built by ops::variable
// carries attr "_trainable", and an initializer recorded by get_variable / set_initial_value is
// the name of its Assign node in attr "_initializer". Listing variables walks the graph in node
// order, which is creation order. So the records travel with graph copies and GraphDef and can
// never disagree with the graph.
#include <string>
#include <vector>

#include "actorflow/train.h"
#include "graph/ops.h"
#include "graph/ops_variables.h"
#include "graph/op_kinds.h"
#include "train/collections.h"

namespace actorflow {
namespace train {
namespace {

constexpr const char* kTrainable = "_trainable";
constexpr const char* kInitializer = "_initializer";
constexpr const char* kGlobalStep = "_global_step";

// FNV-1a: a seed that depends only on the name (std::hash may differ between builds).
uint64_t name_seed(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

Node* find_global_step(Graph* g) {
  for (int i = 0; i < g->num_nodes(); ++i) {
    Node* n = g->node(i);
    if (is_variable_op(n->op) && (n->attrs.get_or<bool>(kGlobalStep, false) || n->name == "global_step")) return n;
  }
  return nullptr;
}

}  // namespace

std::vector<Output> graph_variables(Graph& g, const std::string& prefix, bool trainable_only) {
  std::vector<Output> out;
  for (int i = 0; i < g.num_nodes(); ++i) {
    Node* n = g.node(i);
    if (!is_variable_op(n->op) || n->name.compare(0, prefix.size(), prefix) != 0) continue;
    if (trainable_only && !n->attrs.get_or<bool>(kTrainable, true)) continue;
    out.emplace_back(n, 0);
  }
  return out;
}

Initializer zeros_initializer() {
  return [](const Scope& s, const Shape& shape, DType dtype) { return ops::zeros(s, shape, dtype); };
}

Initializer constant_initializer(double value) {
  return [value](const Scope& s, const Shape& shape, DType dtype) {
    return ops::fill(s, shape, static_cast<float>(value), dtype);
  };
}

Initializer random_uniform_initializer(float minval, float maxval, uint64_t seed) {
  return [=](const Scope& s, const Shape& shape, DType) { return ops::random_uniform(s, shape, minval, maxval, seed); };
}

Initializer truncated_normal_initializer(float mean, float stddev, uint64_t seed) {
  return [=](const Scope& s, const Shape& shape, DType) { return ops::truncated_normal(s, shape, mean, stddev, seed); };
}

Initializer glorot_uniform_initializer(uint64_t seed) {
  return [=](const Scope& s, const Shape& shape, DType) { return ops::glorot_uniform(s, shape, seed); };
}

Output get_variable(const Scope& s, const std::string& name, const Shape& shape, DType dtype,
                    const Initializer& initializer, bool trainable) {
  if (!s.ok()) return Output();
  const std::string full = s.name_prefix() + name;
  if (name.empty()) {
    s.update_status(InvalidArgument("get_variable: the variable needs a name"));
    return Output();
  }
  if (const Node* taken = s.graph()->find(full)) {
    s.update_status(AlreadyExists("get_variable: variable '" + full + "' already exists (" +
                                  (is_variable_op(taken->op) ? std::string("a variable") : "a " + taken->op) +
                                  "); every variable needs its own name"));
    return Output();
  }
  Output var = ops::variable(s.with_op_name(name), shape, dtype, trainable);
  if (!var.valid()) return Output();
  Initializer init = initializer;
  if (!init) init = dtype == DType::kFloat32 ? glorot_uniform_initializer(name_seed(full)) : zeros_initializer();
  Scope is = s.with_no_control_dependencies();
  Output value = init(is.with_op_name(name + "/Initializer"), shape, dtype);
  if (!value.valid()) {
    s.update_status(InvalidArgument("get_variable: the initializer of variable '" + full + "' built no value"));
    return Output();
  }
  if (!set_initial_value(is.with_op_name(name + "/Assign"), var, value).valid()) return Output();
  return var;
}

Output set_initial_value(const Scope& s, const Output& var, Input value) {
  Output a = ops::assign(s, var, std::move(value));
  if (a.valid()) var.node()->attrs.set(kInitializer, a.node()->name);
  return a;
}

std::vector<Output> global_variables(const Scope& s) { return graph_variables(*s.graph(), s.name_prefix(), false); }

std::vector<Output> trainable_variables(const Scope& s) {
  return graph_variables(*s.graph(), s.name_prefix(), true);
}

Result<Output> variables_initializer(const Scope& s, const std::vector<Output>& var_list) {
  AF_RETURN_IF_ERROR(s.status());
  Graph* g = s.graph();
  std::vector<Output> inits;
  std::string missing;
  for (const Output& v : var_list) {
    if (!v.valid()) return InvalidArgument("variables_initializer: an entry of var_list is an invalid Output");
    Node* n = v.node();
    if (!is_variable_op(n->op))
      return InvalidArgument("variables_initializer: '" + n->name + "' is a " + n->op + ", not a variable");
    const std::string init = n->attrs.get_or<std::string>(kInitializer, "");
    Node* a = init.empty() ? nullptr : g->find(init);
    if (!a) {
      missing += (missing.empty() ? "'" : ", '") + n->name + "'";
      continue;
    }
    inits.emplace_back(a, 0);
  }
  if (!missing.empty())
    return FailedPrecondition("variables_initializer: no initializer recorded for variable(s) " + missing +
                              " (create them with train::get_variable or give them one with "
                              "train::set_initial_value)");
  Output op = ops::no_op(s.with_no_control_dependencies(), inits, "init");
  if (!op.valid()) return s.status();
  return op;
}

Result<Output> global_variables_initializer(const Scope& s) {
  return variables_initializer(s, global_variables(s));
}

Output get_global_step(const Scope& s) {
  Node* n = find_global_step(s.graph());
  return n ? Output(n, 0) : Output();
}

Output get_or_create_global_step(const Scope& s) {
  if (!s.ok()) return Output();
  Output gs = get_global_step(s);
  if (!gs.valid()) gs = ops::global_step(s);
  if (!gs.valid()) return Output();
  if (!gs.node()->attrs.has(kInitializer)) {
    Scope is = s.with_no_control_dependencies().with_device(gs.node()->requested_device);
    Output zero = ops::constant(is, Tensor::scalar<int64_t>(0), "global_step/Initializer");
    if (!set_initial_value(is.with_op_name("global_step/Assign"), gs, zero).valid()) return Output();
  }
  return gs;
}

}  // namespace train
}  // namespace actorflow
