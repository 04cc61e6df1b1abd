// Variable collections, initializers and the global step (include/actorflow/train.h).
//
// The collections are not a separate registry: every VariableV2 node built by ops::variable
// carries attr "_trainable", and an initializer recorded by get_variable / set_initial_value is
// the name of its Assign node in attr "_initializer". Listing variables walks the graph in node
// order, which is creation order. So the records travel with graph copies and GraphDef and can
// never disagree with the graph.
#include <algorithm>
#include <cmath>
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

Node* find_global_step(Graph* g) {
  for (int i = 0; i < g->num_nodes(); ++i) {
    Node* n = g->node(i);
    if (is_variable_op(n->op) && (n->attrs.get_or<bool>(kGlobalStep, false) || n->name == "global_step")) return n;
  }
  return nullptr;
}

}  // namespace

uint64_t name_seed(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

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

Partitioner fixed_size_partitioner(int64_t num_shards) {
  return [num_shards](const Shape& shape, DType) -> Result<int64_t> {
    if (num_shards < 1)
      return InvalidArgument("fixed_size_partitioner: num_shards must be >= 1, got " + std::to_string(num_shards));
    return std::min<int64_t>(num_shards, shape.dim(0));
  };
}

Partitioner min_max_variable_partitioner(int64_t max_partitions, int64_t min_slice_size) {
  return [=](const Shape& shape, DType dtype) -> Result<int64_t> {
    if (max_partitions < 1)
      return InvalidArgument("min_max_variable_partitioner: max_partitions must be >= 1, got " +
                             std::to_string(max_partitions));
    if (min_slice_size < 1)
      return InvalidArgument("min_max_variable_partitioner: min_slice_size must be >= 1 byte, got " +
                             std::to_string(min_slice_size));
    const int64_t bytes = shape.num_elements() * static_cast<int64_t>(dtype_size(dtype));
    const int64_t by_size = std::max<int64_t>(1, bytes / min_slice_size);
    return std::max<int64_t>(1, std::min({max_partitions, by_size, shape.dim(0)}));
  };
}

Result<PartitionedVariable> get_partitioned_variable(const Scope& s, const std::string& name, const Shape& shape,
                                                     const Partitioner& partitioner, DType dtype,
                                                     const Initializer& initializer, bool trainable,
                                                     const ShardPlacement& place) {
  AF_RETURN_IF_ERROR(s.status());
  const std::string full = s.name_prefix() + name;
  const std::string what = "get_partitioned_variable('" + full + "')";
  if (name.empty()) return InvalidArgument("get_partitioned_variable: the variable needs a name");
  if (!shape.fully_defined() || shape.rank() < 1 || shape.dim(0) < 1)
    return InvalidArgument(what + ": a partitioned variable needs a known shape with at least one row, got " +
                           shape.to_string());
  if (!partitioner) return InvalidArgument(what + ": no partitioner");
  Result<int64_t> count = partitioner(shape, dtype);
  if (!count.ok()) return count.status().with_prefix(what);
  const int64_t n = *count;
  if (n < 1 || n > shape.dim(0))
    return InvalidArgument(what + ": the partitioner asked for " + std::to_string(n) + " shards of " +
                           std::to_string(shape.dim(0)) + " rows");
  if (const Node* taken = s.graph()->find(full + "/part_0"))
    return AlreadyExists(what + ": '" + taken->name + "' already exists; every variable needs its own name");
  PartitionedVariable v;
  v.name = full;
  v.shape = shape;
  v.dtype = dtype;
  // The default float initializer: glorot_uniform's limit of the whole variable (as TF computes
  // it for a partitioned variable), each shard seeded by its own full name.
  const float limit = ops::glorot_limit(shape);
  const int64_t rows = shape.dim(0), per = rows / n, extras = rows % n;
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> dims = shape.dims();
    dims[0] = per + (i < extras ? 1 : 0);
    const Shape shard_shape(dims);
    Scope ps = place ? place(s, shard_shape, dtype) : s;
    AF_RETURN_IF_ERROR(ps.status());
    const std::string part = name + "/part_" + std::to_string(i);
    Initializer init = initializer;
    if (!init && dtype == DType::kFloat32)
      init = random_uniform_initializer(-limit, limit, name_seed(ps.name_prefix() + part));
    Output var = get_variable(ps, part, shard_shape, dtype, init, trainable);
    AF_RETURN_IF_ERROR(s.status().with_prefix(what));
    if (!var.valid()) return Internal(what + ": shard " + std::to_string(i) + " was not built");
    ops::set_partition_record(var.node(), ops::PartitionRecord{full, shape, offset});
    v.shards.push_back(var);
    v.offsets.push_back(offset);
    offset += dims[0];
  }
  return v;
}

Output embedding_lookup(const Scope& s, const PartitionedVariable& v, Input ids, const std::string& strategy) {
  return ops::embedding_lookup(s, v.shards, std::move(ids), strategy);
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
