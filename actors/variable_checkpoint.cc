#include "actors/variable_checkpoint.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "actors/session.h"
#include "data/tf/tf_checkpoint_data.h"
#include "graph/device_spec.h"
#include "graph/ops.h"
#include "graph/ops_variables.h"
#include "graph/op_kinds.h"

namespace actorflow {

VariableCheckpointOps::VariableCheckpointOps(const Scope& scope, const std::vector<Output>& vars,
                                             const std::string& name) {
  if (!scope.ok()) {
    status_ = scope.status();
    return;
  }
  std::set<const Node*> seen;
  for (const Output& v : vars) {
    if (!v.valid()) {
      status_ = InvalidArgument("an entry of the variable list is an invalid Output (an earlier op failed)");
      return;
    }
    if (!is_variable_op(v.node()->op)) {
      status_ = InvalidArgument("'" + v.node()->name + "' is a " + v.node()->op + ", not a variable");
      return;
    }
    if (!seen.insert(v.node()).second) {
      status_ = InvalidArgument("variable '" + v.node()->name + "' is listed twice");
      return;
    }
  }
  Scope sub = scope.new_sub_scope(name).with_no_control_dependencies();
  for (const Output& v : vars) {
    const Node* node = v.node();
    Scope dev = sub.with_device(node->requested_device);
    Output ph = ops::placeholder(dev, node->output_types[0], node->output_shapes[0], node->name + "_restore");
    Output as = ops::assign(dev, Output(v.node(), 0), ph);
    // The optimizer's slots travel beside the value (restored after it, in the same run).
    Output slots = ops::variable_slots(dev, Output(v.node(), 0));
    Output slots_ph = ops::placeholder(dev, DType::kUInt8, Shape{-1}, node->name + "_restore_slots");
    Output slots_as = ops::restore_variable_slots(dev.with_control_dependencies({as}), Output(v.node(), 0), slots_ph);
    vars_.emplace_back(v.node(), 0);
    ops::PartitionRecord part;
    if (!ops::partition_record(*node, &part)) part.logical.clear();
    parts_.push_back(part);
    placeholders_.push_back(ph);
    assigns_.push_back(as);
    slots_.push_back(slots);
    slot_placeholders_.push_back(slots_ph);
    slot_assigns_.push_back(slots_as);
  }
  if (!scope.ok()) status_ = scope.status();
}

std::string checkpoint_place(const std::string& device) {
  if (device.empty()) return "";
  Result<DeviceSpec> spec = DeviceSpec::parse(device);
  if (!spec.ok()) return device;
  if (!spec->job) return spec->to_string();
  return "/job:" + *spec->job + "/replica:" + std::to_string(spec->replica.value_or(0)) +
         "/task:" + std::to_string(spec->task.value_or(0));
}

Result<int64_t> global_step_value(const Tensor& t) {
  const DType d = t.dtype();
  if (t.num_elements() != 1 ||
      (d != DType::kInt64 && d != DType::kInt32 && d != DType::kFloat32 && d != DType::kFloat64))
    return InvalidArgument("the global step must be an int64, int32, float32 or float64 scalar, not " + t.debug_string());
  if (d == DType::kInt64) return t.data<int64_t>()[0];
  if (d == DType::kInt32) return static_cast<int64_t>(t.data<int32_t>()[0]);
  // A float global step (TensorFlow 1.x's get_variable('global_step', [], trainable=False)):
  // counted by adding 1.0, so a whole number within +-2^53.
  const double v = d == DType::kFloat32 ? static_cast<double>(t.data<float>()[0]) : t.data<double>()[0];
  if (!(std::fabs(v) <= 9007199254740992.0) || v != std::floor(v))
    return InvalidArgument("the global step " + t.debug_string() + " is not a whole number within +-2^53");
  return static_cast<int64_t>(v);
}

namespace {

// Bytes of one row (dim 0) of `t`.
size_t row_bytes(const Tensor& t) {
  size_t b = dtype_size(t.dtype());
  for (int i = 1; i < t.shape().rank(); ++i) b *= static_cast<size_t>(t.shape().dim(i));
  return b;
}

// Rows [offset, offset + rows) of `t` (rank >= 1, the range inside it) as a new tensor.
Tensor row_range(const Tensor& t, int64_t offset, int64_t rows) {
  Shape shape = t.shape();
  std::vector<int64_t> dims = shape.dims();
  dims[0] = rows;
  Tensor out(t.dtype(), Shape(dims));
  if (out.num_elements() > 0)
    std::memcpy(out.raw_data(), static_cast<const char*>(t.raw_data()) + static_cast<size_t>(offset) * row_bytes(t),
                row_bytes(t) * static_cast<size_t>(rows));
  return out;
}

// A shard's slots from its logical variable's (`blob`, for the whole tensor of `part`): each
// present slot cut to the shard's rows `shard_shape`; Adam's count `count` when given, else the
// logical one. Errors as decode_variable_slots / encode_variable_slots, naming the variable.
Result<Tensor> shard_slots(const Tensor& blob, const ops::PartitionRecord& part, DType dtype, const Shape& shard_shape,
                           std::optional<int64_t> count) {
  Result<VariableSlotSet> whole = decode_variable_slots(blob, dtype, part.full_shape);
  if (!whole.ok()) return whole.status().with_prefix("the optimizer slots of '" + part.logical + "'");
  VariableSlotSet set;
  set.adam_t = count.value_or(whole->adam_t);
  size_t bytes = 0;
  for (int id = 1; id <= kNumSlotIds; ++id) {
    const Tensor& s = whole->slot[static_cast<size_t>(id)];
    if (!s.is_initialized()) continue;
    set.slot[static_cast<size_t>(id)] = row_range(s, part.offset, shard_shape.dim(0));
    bytes = set.slot[static_cast<size_t>(id)].bytes();
  }
  return encode_variable_slots(set, bytes);
}

}  // namespace

const std::string& VariableCheckpointOps::saved_name(size_t i) const {
  return parts_[i].logical.empty() ? vars_[i].node()->name : parts_[i].logical;
}

Result<CheckpointData> VariableCheckpointOps::read(Session& sess, const Output& global_step) const {
  AF_RETURN_IF_ERROR(status_);
  std::vector<Output> fetches = vars_;
  fetches.insert(fetches.end(), slots_.begin(), slots_.end());
  size_t step_at = fetches.size();
  if (global_step.valid()) {
    for (size_t i = 0; i < vars_.size(); ++i)
      if (vars_[i].node() == global_step.node() && global_step.index() == 0) step_at = i;
    if (step_at == fetches.size()) fetches.push_back(global_step);
  }
  AF_ASSIGN_OR_RETURN(std::vector<Tensor> values, sess.run(fetches));
  CheckpointData data;
  for (size_t i = 0; i < vars_.size(); ++i) {
    const ops::PartitionRecord& part = parts_[i];
    const std::string place = checkpoint_place(vars_[i].node()->requested_device);
    if (part.logical.empty()) {
      data.variables[vars_[i].node()->name] = values[i];
      data.placement[vars_[i].node()->name].place = place;
    } else {
      SavedPart saved;
      saved.variable = vars_[i].node()->name;
      saved.offset = part.offset;
      saved.rows = values[i].shape().rank() > 0 ? values[i].shape().dim(0) : 0;
      saved.place = place;
      std::vector<SavedPart>& layout = data.placement[part.logical].parts;
      layout.insert(std::upper_bound(layout.begin(), layout.end(), saved,
                                     [](const SavedPart& a, const SavedPart& b) { return a.offset < b.offset; }),
                    std::move(saved));
      // A shard: its rows go into the one tensor of the logical variable, at its offset.
      auto it = data.variables.find(part.logical);
      if (it == data.variables.end()) {
        Tensor whole(values[i].dtype(), part.full_shape);
        if (whole.num_elements() > 0) std::memset(whole.raw_data(), 0, row_bytes(whole) * static_cast<size_t>(part.full_shape.dim(0)));
        it = data.variables.emplace(part.logical, std::move(whole)).first;
      }
      const Tensor& shard = values[i];
      Tensor& whole = it->second;
      if (shard.dtype() != whole.dtype() || shard.shape().rank() != whole.shape().rank() ||
          row_bytes(shard) != row_bytes(whole) || part.offset < 0 ||
          part.offset + shard.shape().dim(0) > whole.shape().dim(0))
        return Internal("shard '" + vars_[i].node()->name + "' " + shard.shape().to_string() + " at row " +
                        std::to_string(part.offset) + " does not fit its variable '" + part.logical + "' " +
                        whole.shape().to_string());
      if (shard.num_elements() > 0)
        std::memcpy(static_cast<char*>(whole.raw_data()) + static_cast<size_t>(part.offset) * row_bytes(whole),
                    shard.raw_data(), row_bytes(shard) * static_cast<size_t>(shard.shape().dim(0)));
    }
    const Tensor& slots = values[vars_.size() + i];
    if (slots.num_elements() > 0) data.variables[slots_key(vars_[i].node()->name)] = slots;
  }
  if (global_step.valid()) {
    auto step = global_step_value(values[step_at]);
    if (!step.ok()) return step.status().with_prefix("global step '" + global_step.name() + "'");
    data.global_step = *step;
  }
  return data;
}

std::vector<std::string> VariableCheckpointOps::missing_from(const CheckpointData& data) const {
  std::vector<std::string> out;
  for (const Output& v : vars_)
    if (!data.variables.count(saved_name(static_cast<size_t>(&v - vars_.data())))) out.push_back(v.node()->name);
  return out;
}

Status VariableCheckpointOps::assign(Session& sess, const CheckpointData& data, const std::string& source,
                                     bool allow_missing) const {
  AF_RETURN_IF_ERROR(status_);
  FeedDict feeds;
  std::vector<Output> targets;
  for (size_t i = 0; i < vars_.size(); ++i) {
    const Node* node = vars_[i].node();
    const ops::PartitionRecord& part = parts_[i];
    auto it = data.variables.find(saved_name(i));
    if (it == data.variables.end()) {
      if (allow_missing) continue;
      return NotFound("checkpoint " + source + " has no value for variable '" + saved_name(i) + "'" +
                      (part.logical.empty() ? "" : " (of which '" + node->name + "' is a shard)"));
    }
    Tensor t = it->second;
    if (!part.logical.empty()) {
      // The shard's rows of the logical variable, saved as one tensor.
      if (t.dtype() != node->output_types[0])
        return InvalidArgument("variable '" + part.logical + "' is " + dtype_name(node->output_types[0]) +
                               " but checkpoint " + source + " holds " + dtype_name(t.dtype()));
      if (t.shape() != part.full_shape)
        return InvalidArgument("partitioned variable '" + part.logical + "' has shape " + part.full_shape.to_string() +
                               " but checkpoint " + source + " holds shape " + t.shape().to_string());
      const Shape& ss = node->output_shapes[0];
      if (!ss.fully_defined() || ss.rank() != t.shape().rank() || part.offset < 0 ||
          part.offset + ss.dim(0) > t.shape().dim(0))
        return InvalidArgument("shard '" + node->name + "' " + ss.to_string() + " at row " + std::to_string(part.offset) +
                               " does not fit variable '" + part.logical + "' " + t.shape().to_string());
      t = row_range(t, part.offset, ss.dim(0));
    }
    if (t.dtype() != node->output_types[0])
      return InvalidArgument("variable '" + node->name + "' is " + dtype_name(node->output_types[0]) +
                             " but checkpoint " + source + " holds " + dtype_name(t.dtype()));
    if (!t.shape().compatible_with(node->output_shapes[0]))
      return InvalidArgument("variable '" + node->name + "' has shape " + node->output_shapes[0].to_string() +
                             " but checkpoint " + source + " holds shape " + t.shape().to_string());
    feeds.emplace_back(placeholders_[i], t);
    targets.push_back(assigns_[i]);
    // The slots as saved; none saved (no optimizer had updated it, or an older file) clears them.
    auto sl = data.variables.find(slots_key(node->name));
    const bool logical_slots = sl == data.variables.end() && !part.logical.empty();
    if (logical_slots) sl = data.variables.find(slots_key(part.logical));
    if (sl != data.variables.end() && sl->second.dtype() != DType::kUInt8)
      return InvalidArgument("checkpoint " + source + ": the optimizer slots of '" +
                             (logical_slots ? part.logical : node->name) + "' are " +
                             dtype_name(sl->second.dtype()) + ", not uint8");
    Tensor slots = sl != data.variables.end() ? sl->second : Tensor(DType::kUInt8, Shape{0});
    if (logical_slots && sl != data.variables.end()) {
      // A TensorFlow checkpoint's slot variables are sliced as their variable: take this shard's rows.
      std::optional<int64_t> count;
      if (auto c = data.variables.find(node->name + kTfAdamCountSuffix); c != data.variables.end()) {
        Result<int64_t> v = global_step_value(c->second);
        if (v.ok() && *v >= 0) count = *v;
      }
      Result<Tensor> mine = shard_slots(sl->second, part, t.dtype(), t.shape(), count);
      if (!mine.ok()) return mine.status().with_prefix("checkpoint " + source);
      slots = std::move(*mine);
    }
    feeds.emplace_back(slot_placeholders_[i], std::move(slots));
    targets.push_back(slot_assigns_[i]);
  }
  if (targets.empty()) return Status::OK();
  return sess.run(feeds, {}, targets).status();
}

}  // namespace actorflow
