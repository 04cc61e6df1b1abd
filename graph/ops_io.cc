// Checkpoint ops: TensorFlow's SaveV2 and RestoreV2 as the GraphDef importer maps them
// (graph/tf/tf_import.h), and the string ops of a sharded Saver's subgraph (StringJoin,
// RegexFullMatch, StringSelect, ShardedFilename, MergeV2Checkpoints; graph/string_ops.h). Shape
// functions only; the kernels are device/cpu/io_kernels.cc.
//
// actorflow has no string dtype: the checkpoint prefix is a uint8 vector of the path's bytes
// (tf_string_tensor, graph/tf/tf_import.h), and the tensor names are attributes. An entry may be
// an optimizer slot that actorflow's variable actor keeps (attributes slot_of and slot_id, below).
#include <set>

#include "graph/op_registry.h"
#include "graph/string_ops.h"
#include "graph/shape_util.h"

namespace actorflow {
namespace {

// The checked attributes of both ops: tensor_names (N), slot_of and slot_id (N each, or absent =
// no slots). slot_of[i] is -1 for a plain entry, else the index j != i of the entry of the
// variable whose slot entry i is (itself a plain entry); slot_id[i] is its SlotId (1..8,
// data/variable_slots.h). *owners gets the distinct owners in order of first use.
Status checked_entries(InferenceContext& c, std::vector<std::string>* names, std::vector<int64_t>* owners) {
  AF_ASSIGN_OR_RETURN(*names, c.attrs().get<std::vector<std::string>>("tensor_names"));
  const auto slot_of = c.attrs().get_or<std::vector<int64_t>>("slot_of", {});
  const auto slot_id = c.attrs().get_or<std::vector<int64_t>>("slot_id", {});
  const size_t n = names->size();
  if (n == 0) return InvalidArgument("tensor_names is empty");
  if (n > 100000) return InvalidArgument("tensor_names lists " + std::to_string(n) + " entries (at most 100000)");
  std::set<std::string> seen;
  for (const auto& s : *names) {
    if (s.empty()) return InvalidArgument("tensor_names holds an empty name");
    if (!seen.insert(s).second) return InvalidArgument("tensor_names lists '" + s.substr(0, 100) + "' twice");
  }
  if (slot_of.empty() && slot_id.empty()) return Status::OK();
  if (slot_of.size() != n || slot_id.size() != n)
    return InvalidArgument("slot_of and slot_id must have one value per tensor name (" + std::to_string(n) + ")");
  std::set<int64_t> owner_set;
  for (size_t i = 0; i < n; ++i) {
    const int64_t j = slot_of[i];
    if (j == -1) continue;
    if (j < 0 || static_cast<size_t>(j) >= n || static_cast<size_t>(j) == i || slot_of[static_cast<size_t>(j)] != -1)
      return InvalidArgument("slot_of[" + std::to_string(i) + "] = " + std::to_string(j) +
                             " is not the index of another, plain entry");
    if (slot_id[i] < 1 || slot_id[i] > 8)  // device/slot_ids.h's kNumSlotIds (graph/ is below device/)
      return InvalidArgument("slot_id[" + std::to_string(i) + "] = " + std::to_string(slot_id[i]) + " (1..8)");
    if (owner_set.insert(j).second) owners->push_back(j);
  }
  return Status::OK();
}

Status check_prefix_input(InferenceContext& c) {
  if (c.input_type(0) != DType::kUInt8)
    return InvalidArgument(std::string("the prefix (input 0) must be uint8 (the path's bytes), got ") +
                           dtype_name(c.input_type(0)));
  const Shape& s = c.input_shape(0);
  if (!s.unknown_rank() && s.rank() != 1) return InvalidArgument("the prefix (input 0) must be a vector, got " + s.to_string());
  return Status::OK();
}

// SaveV2(prefix, tensors..., slot blobs...): no outputs.
Status save_v2_shape(InferenceContext& c) {
  std::vector<std::string> names;
  std::vector<int64_t> owners;
  AF_RETURN_IF_ERROR(checked_entries(c, &names, &owners));
  const size_t want = 1 + names.size() + owners.size();
  if (static_cast<size_t>(c.num_inputs()) != want)
    return InvalidArgument("takes " + std::to_string(want) + " inputs (prefix, " + std::to_string(names.size()) +
                           " tensors, " + std::to_string(owners.size()) + " slot blobs), got " +
                           std::to_string(c.num_inputs()));
  AF_RETURN_IF_ERROR(check_prefix_input(c));
  for (size_t k = 0; k < owners.size(); ++k)
    if (c.input_type(static_cast<int>(1 + names.size() + k)) != DType::kUInt8)
      return InvalidArgument("slot blob " + std::to_string(k) + " must be uint8");
  return Status::OK();
}

// RestoreV2(prefix) -> one tensor per name (dtypes[i], shape known only at run time), then one
// uint8 slot blob per owner.
Status restore_v2_shape(InferenceContext& c) {
  std::vector<std::string> names;
  std::vector<int64_t> owners;
  AF_RETURN_IF_ERROR(checked_entries(c, &names, &owners));
  if (c.num_inputs() != 1) return InvalidArgument("takes 1 input (prefix), got " + std::to_string(c.num_inputs()));
  AF_RETURN_IF_ERROR(check_prefix_input(c));
  AF_ASSIGN_OR_RETURN(auto dtypes, c.attrs().get<std::vector<std::string>>("dtypes"));
  if (dtypes.size() != names.size())
    return InvalidArgument("dtypes lists " + std::to_string(dtypes.size()) + " types for " +
                           std::to_string(names.size()) + " tensor names");
  for (size_t i = 0; i < dtypes.size(); ++i) {
    AF_ASSIGN_OR_RETURN(DType t, dtype_from_name(dtypes[i]));
    if (t == DType::kUInt8) return InvalidArgument("dtypes[" + std::to_string(i) + "] is uint8 (no TensorFlow checkpoint dtype here)");
    c.set_output(static_cast<int>(i), t, Shape::unknown());
  }
  for (size_t k = 0; k < owners.size(); ++k) c.set_output(static_cast<int>(names.size() + k), DType::kUInt8, Shape{-1});
  return Status::OK();
}

Status want_uint8_vector(InferenceContext& c, int i, const std::string& what) {
  if (c.input_type(i) != DType::kUInt8)
    return InvalidArgument(what + " (input " + std::to_string(i) + ") must be uint8 (a string's bytes), got " +
                           dtype_name(c.input_type(i)));
  const Shape& s = c.input_shape(i);
  if (!s.unknown_rank() && s.rank() != 1)
    return InvalidArgument(what + " (input " + std::to_string(i) + ") must be a vector, got " + s.to_string());
  return Status::OK();
}

Status want_scalar(InferenceContext& c, int i, DType dt, const std::string& what) {
  if (c.input_type(i) != dt)
    return InvalidArgument(what + " (input " + std::to_string(i) + ") must be " + dtype_name(dt) + ", got " +
                           dtype_name(c.input_type(i)));
  const Shape& s = c.input_shape(i);
  if (!s.unknown_rank() && s.rank() != 0) return InvalidArgument(what + " (input " + std::to_string(i) + ") must be a scalar");
  return Status::OK();
}

// StringJoin(strings...) -> their concatenation with `separator` between (`vector`: a string
// vector of them instead, each followed by NUL, as TensorFlow's Pack of strings).
Status string_join_shape(InferenceContext& c) {
  if (c.num_inputs() < 1 || c.num_inputs() > 100000) return InvalidArgument("takes 1 to 100000 strings");
  AF_ASSIGN_OR_RETURN(std::string sep, c.attrs().get<std::string>("separator"));
  if (sep.size() > kMaxStringOpBytes) return InvalidArgument("separator is longer than 64 KiB");
  for (int i = 0; i < c.num_inputs(); ++i) AF_RETURN_IF_ERROR(want_uint8_vector(c, i, "string " + std::to_string(i)));
  c.set_output(0, DType::kUInt8, Shape{-1});
  return Status::OK();
}

// RegexFullMatch(string) -> bool, `pattern` a LiteralPattern.
Status regex_full_match_shape(InferenceContext& c) {
  if (c.num_inputs() != 1) return InvalidArgument("takes 1 input (a string)");
  AF_ASSIGN_OR_RETURN(std::string pattern, c.attrs().get<std::string>("pattern"));
  AF_RETURN_IF_ERROR(parse_literal_pattern(pattern).status());
  AF_RETURN_IF_ERROR(want_uint8_vector(c, 0, "the string"));
  c.set_output(0, DType::kBool, Shape{});
  return Status::OK();
}

// StringSelect(cond, a, b) -> a when cond, else b (whole strings).
Status string_select_shape(InferenceContext& c) {
  if (c.num_inputs() != 3) return InvalidArgument("takes 3 inputs (cond, a, b)");
  AF_RETURN_IF_ERROR(want_scalar(c, 0, DType::kBool, "cond"));
  AF_RETURN_IF_ERROR(want_uint8_vector(c, 1, "a"));
  AF_RETURN_IF_ERROR(want_uint8_vector(c, 2, "b"));
  c.set_output(0, DType::kUInt8, Shape{-1});
  return Status::OK();
}

// ShardedFilename(basename, shard, num_shards) -> "<basename>-0000s-of-0000n".
Status sharded_filename_shape(InferenceContext& c) {
  if (c.num_inputs() != 3) return InvalidArgument("takes 3 inputs (basename, shard, num_shards)");
  AF_RETURN_IF_ERROR(want_uint8_vector(c, 0, "basename"));
  AF_RETURN_IF_ERROR(want_scalar(c, 1, DType::kInt32, "shard"));
  AF_RETURN_IF_ERROR(want_scalar(c, 2, DType::kInt32, "num_shards"));
  c.set_output(0, DType::kUInt8, Shape{-1});
  return Status::OK();
}

// MergeV2Checkpoints(prefixes (a string vector), destination): no outputs.
Status merge_v2_shape(InferenceContext& c) {
  if (c.num_inputs() != 2) return InvalidArgument("takes 2 inputs (checkpoint_prefixes, destination_prefix)");
  AF_RETURN_IF_ERROR(want_uint8_vector(c, 0, "checkpoint_prefixes"));
  AF_RETURN_IF_ERROR(want_uint8_vector(c, 1, "destination_prefix"));
  return Status::OK();
}

}  // namespace

bool LiteralPattern::full_match(std::string_view s) const {
  if (s.size() < literal.size() || s.compare(0, literal.size(), literal) != 0) return false;
  return any_rest || s.size() == literal.size();
}

Result<LiteralPattern> parse_literal_pattern(const std::string& pattern) {
  const std::string shown = "pattern \"" + pattern.substr(0, 100) + "\"";
  if (pattern.size() > 1024) return InvalidArgument(shown + " is longer than 1024 bytes");
  std::string_view p = pattern;
  if (!p.empty() && p.front() == '^') p.remove_prefix(1);
  if (!p.empty() && p.back() == '$') p.remove_suffix(1);
  LiteralPattern out;
  if (p.size() >= 2 && p.substr(p.size() - 2) == ".*") {
    out.any_rest = true;
    p.remove_suffix(2);
  }
  for (size_t i = 0; i < p.size(); ++i) {
    const char ch = p[i];
    if (std::string_view(".[]()*+?{}|\\^$").find(ch) != std::string_view::npos || static_cast<unsigned char>(ch) < 0x20)
      return InvalidArgument(shown + " is not supported: character " + std::to_string(i) +
                             " is a regular-expression operator; RegexFullMatch supports a literal, "
                             "optionally anchored, optionally followed by .*");
    out.literal += ch;
  }
  return out;
}

Result<std::vector<std::string>> split_string_vector(std::string_view bytes) {
  std::vector<std::string> out;
  if (bytes.empty()) return out;
  if (bytes.back() != '\0') return InvalidArgument("a string vector's bytes must end in a NUL byte");
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != '\0') continue;
    out.emplace_back(bytes.substr(start, i - start));
    start = i + 1;
  }
  return out;
}

void register_io_ops(OpRegistry& r) {
  r.add(op_def("StringJoin", -1, string_join_shape));
  r.add(op_def("RegexFullMatch", 1, regex_full_match_shape));
  r.add(op_def("StringSelect", 3, string_select_shape));
  r.add(op_def("ShardedFilename", 3, sharded_filename_shape));
  OpDef merge = op_def("MergeV2Checkpoints", 2, merge_v2_shape);
  merge.stateful = true;
  merge.touches_files = true;
  r.add(std::move(merge));
  OpDef save = op_def("SaveV2", -1, save_v2_shape);
  save.stateful = true;
  save.touches_files = true;
  r.add(std::move(save));
  OpDef restore = op_def("RestoreV2", 1, restore_v2_shape);
  restore.stateful = true;
  restore.touches_files = true;
  r.add(std::move(restore));
}

}  // namespace actorflow
