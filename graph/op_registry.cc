#include "graph/op_registry.h"

namespace actorflow {

OpRegistry& OpRegistry::global() {
  static OpRegistry* r = [] {
    auto* reg = new OpRegistry();
    register_all_ops(*reg);
    return reg;
  }();
  return *r;
}

void OpRegistry::add(OpDef def) {
  std::string name = def.name;
  ops_[name] = std::move(def);
}

Status OpRegistry::set_grad(const std::string& op, GradFn grad) {
  auto it = ops_.find(op);
  if (it == ops_.end()) return NotFound("cannot register a gradient for unknown op type '" + op + "'");
  it->second.grad = std::move(grad);
  return Status::OK();
}

Result<const OpDef*> OpRegistry::lookup(const std::string& op) const {
  auto it = ops_.find(op);
  if (it == ops_.end()) return NotFound("op type '" + op + "' is not registered");
  return &it->second;
}

std::vector<std::string> OpRegistry::op_names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : ops_) out.push_back(k);
  return out;
}

// Every op family. Families added later append their hook here.
void register_all_ops(OpRegistry& r) {
  register_core_ops(r);
  register_math_ops(r);
  register_array_ops(r);
  register_nn_ops(r);
  register_variable_ops(r);
  register_indexing_ops(r);
  register_io_ops(r);
  register_gradients(r);  // last: gradients attach to the ops registered above
}

}  // namespace actorflow
