#include "device/variable_call.h"

#include "device/kernel.h"

#include <algorithm>
#include <type_traits>

namespace actorflow {
namespace {

Result<VariableCall> decode(const std::string& m, const AttrMap& a) {
  if (m == "read" || m == "save") return VariableCall(vcall::Read{m == "save"});
  if (m == "is_initialized") return VariableCall(vcall::IsInitialized{});
  if (m == "assign" || m == "restore") return VariableCall(vcall::Assign{m == "restore"});
  if (m == "assign_add") return VariableCall(vcall::AssignAdd{});
  if (m == "scatter_add" || m == "scatter_update") return VariableCall(vcall::Scatter{m == "scatter_add"});
  if (m == "save_slots") return VariableCall(vcall::SaveSlots{});
  if (m == "restore_slots") return VariableCall(vcall::RestoreSlots{});
  if (m == "sync_state") return VariableCall(vcall::SyncState{});
  for (const OptimizerSpec& s : optimizer_specs()) {
    if (m == s.dense_method || (s.sparse_method && m == s.sparse_method)) {
      const OptimizerHyper h = hyper_from_attrs(s.kind, a, false);
      AF_RETURN_IF_ERROR(check_hyper(s.kind, h, m));
      if (m == s.dense_method) return VariableCall(vcall::ApplyDense{s.kind, h});
      return VariableCall(vcall::ApplySparse{s.kind, h});
    }
  }
  if (m == "apply_sync" || m == "sparse_apply_sync") {
    vcall::SyncContribution c;
    c.sparse = m == "sparse_apply_sync";
    const std::string opt = a.get_or<std::string>("optimizer", "adam");
    c.increment = opt == "increment";
    if (!c.increment) {
      const OptimizerSpec* s = find_optimizer(opt);
      if (!s) return InvalidArgument(m + ": unknown synchronous optimizer '" + opt + "'");
      c.opt = s->kind;
    }
    if (c.sparse && (c.increment || !optimizer_spec(c.opt).sparse_method))
      return InvalidArgument(m + ": no sparse form of optimizer '" + opt + "'");
    c.hyper = hyper_from_attrs(c.opt, a, true);
    if (!c.increment) AF_RETURN_IF_ERROR(check_hyper(c.opt, c.hyper, m));
    c.replicas = a.get_or<int64_t>("replicas_to_aggregate", 1);
    // A peer's attribute: NaN, negative or huge timeouts become 0 s or a day (no undefined
    // double -> integer conversion later).
    const double t = a.get_or<double>("sync_timeout_secs", 60.0);
    c.timeout_secs = t >= 0 ? std::min(t, 86400.0) : 0.0;
    const double d = a.get_or<double>("sync_deadline_secs", 0.0);
    c.deadline_secs = d >= 0 ? std::min(d, 86400.0) : 0.0;
    c.wait = a.get_or<bool>("wait", true);
    return VariableCall(c);
  }
  if (m == "sync_control") {
    vcall::SyncControl c;
    const std::string action = a.get_or<std::string>("action", "stats");
    if (action == "stats") c.action = vcall::SyncControl::Action::kStats;
    else if (action == "leave") c.action = vcall::SyncControl::Action::kLeave;
    else if (action == "close") c.action = vcall::SyncControl::Action::kClose;
    else return InvalidArgument("unknown sync_control action '" + action + "'");
    c.replicas = a.get_or<int64_t>("replicas_to_aggregate", 1);
    c.total = a.get_or<int64_t>("total_num_replicas", c.replicas);
    return VariableCall(c);
  }
  return InvalidArgument("unknown variable method '" + m + "'");
}

}  // namespace

Result<std::shared_ptr<const VariableOp>> decode_variable_op(const std::string& method, AttrMap attrs) {
  AF_ASSIGN_OR_RETURN(VariableCall call, decode(method, attrs));
  auto op = std::make_shared<VariableOp>();
  op->method = method;
  op->dtype = attrs.get_or<DType>("dtype", DType::kInvalid);
  op->shape = attrs.get_or<Shape>("shape", Shape::unknown());
  op->attrs = std::move(attrs);
  op->call = std::move(call);
  return std::shared_ptr<const VariableOp>(std::move(op));
}

std::vector<std::string> variable_methods() {
  std::vector<std::string> out = {"read", "save", "is_initialized", "assign", "restore", "assign_add",
                                  "scatter_add", "scatter_update", "save_slots", "restore_slots", "sync_state",
                                  "apply_sync", "sparse_apply_sync", "sync_control"};
  for (const OptimizerSpec& s : optimizer_specs()) {
    out.push_back(s.dense_method);
    if (s.sparse_method) out.push_back(s.sparse_method);
  }
  return out;
}

bool mutates(const VariableCall& c) {
  return std::visit(
      [](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, vcall::Read> || std::is_same_v<T, vcall::IsInitialized> ||
                      std::is_same_v<T, vcall::SaveSlots>)
          return false;
        else if constexpr (std::is_same_v<T, vcall::SyncControl>)
          return x.action != vcall::SyncControl::Action::kStats;
        else
          return true;
      },
      c);
}

const std::string& ResourceCall::method() const { return op->method; }
const AttrMap& ResourceCall::attrs() const { return op->attrs; }

bool is_dense_update(const VariableCall& c) { return std::holds_alternative<vcall::ApplyDense>(c); }

}  // namespace actorflow
