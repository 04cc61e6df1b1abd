// Kernels of SaveV2 and RestoreV2 (graph/ops_io.cc): TensorFlow's V2 checkpoint written and read
// with data/tf/tf_checkpoint.h on the machine the kernel runs on; and of a sharded Saver's string
// ops and MergeV2Checkpoints (graph/string_ops.h). Every problem with the path, the
// files or the entries is an error naming the op, the node and the file; nothing is left half
// written (write_tf_checkpoint writes to temporary names and renames).
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/tf/tf_checkpoint.h"
#include "data/tf/tf_checkpoint_data.h"
#include "data/variable_slots.h"
#include "device/kernel.h"
#include "graph/string_ops.h"

namespace actorflow {
namespace {

// The prefix a uint8 input spells; InvalidArgument naming the op for an empty one or a NUL byte.
Result<std::string> prefix_of(OpKernelContext& ctx, int i = 0) {
  const Tensor& t = ctx.input(i);
  if (t.dtype() != DType::kUInt8 || t.shape().rank() != 1)
    return ctx.invalid_argument("the prefix (input " + std::to_string(i) + ") must be a uint8 vector (the path's bytes), got " +
                                t.debug_string());
  std::string p(reinterpret_cast<const char*>(t.data<uint8_t>()), static_cast<size_t>(t.num_elements()));
  if (p.empty()) return ctx.invalid_argument("the checkpoint prefix is empty");
  if (p.find('\0') != std::string::npos) return ctx.invalid_argument("the checkpoint prefix holds a NUL byte");
  return p;
}

// The entries' layout from the node's attributes (checked again: a kernel may be created from a
// peer's graph whose shape function was not run).
struct Layout {
  std::vector<std::string> names;
  std::vector<int64_t> slot_of, slot_id;
  std::vector<int64_t> owners;  // entry indexes of the variables owning slots, in order of first use
  size_t owner_index(int64_t entry) const {
    for (size_t k = 0; k < owners.size(); ++k)
      if (owners[k] == entry) return k;
    return owners.size();
  }
};

Result<Layout> layout_of(OpKernelContext& ctx) {
  Layout l;
  auto names = ctx.attrs().get<std::vector<std::string>>("tensor_names");
  if (!names.ok()) return ctx.invalid_argument(names.status().message());
  l.names = std::move(*names);
  l.slot_of = ctx.attrs().get_or<std::vector<int64_t>>("slot_of", {});
  l.slot_id = ctx.attrs().get_or<std::vector<int64_t>>("slot_id", {});
  const size_t n = l.names.size();
  if (n == 0) return ctx.invalid_argument("tensor_names is empty");
  if (l.slot_of.empty() && l.slot_id.empty()) {
    l.slot_of.assign(n, -1);
    l.slot_id.assign(n, 0);
  }
  if (l.slot_of.size() != n || l.slot_id.size() != n)
    return ctx.invalid_argument("slot_of and slot_id must have one value per tensor name");
  for (size_t i = 0; i < n; ++i) {
    const int64_t j = l.slot_of[i];
    if (j == -1) continue;
    if (j < 0 || static_cast<size_t>(j) >= n || static_cast<size_t>(j) == i || l.slot_of[static_cast<size_t>(j)] != -1 ||
        l.slot_id[i] < 1 || l.slot_id[i] > kNumSlotIds)
      return ctx.invalid_argument("entry " + std::to_string(i) + " has a bad slot_of/slot_id");
    if (l.owner_index(j) == l.owners.size()) l.owners.push_back(j);
  }
  return l;
}

// TensorFlow's dtype of an actorflow dtype a checkpoint can hold.
bool same_dtype(TfDType tf, DType af) {
  switch (af) {
    case DType::kFloat32: return tf == TfDType::kFloat;
    case DType::kFloat64: return tf == TfDType::kDouble;
    case DType::kInt32: return tf == TfDType::kInt32;
    case DType::kInt64: return tf == TfDType::kInt64;
    case DType::kBool: return tf == TfDType::kBool;
    default: return false;
  }
}

// The string input i's bytes (a uint8 vector of at most kMaxStringOpBytes).
Result<std::string_view> bytes_of(OpKernelContext& ctx, int i, const std::string& what) {
  const Tensor& t = ctx.input(i);
  if (t.dtype() != DType::kUInt8 || t.shape().rank() != 1)
    return ctx.invalid_argument(what + " (input " + std::to_string(i) + ") must be a uint8 vector, got " + t.debug_string());
  if (static_cast<size_t>(t.num_elements()) > kMaxStringOpBytes)
    return ctx.invalid_argument(what + " (input " + std::to_string(i) + ") is longer than 64 KiB");
  return std::string_view(reinterpret_cast<const char*>(t.data<uint8_t>()), static_cast<size_t>(t.num_elements()));
}

Result<int64_t> int_scalar(OpKernelContext& ctx, int i, const std::string& what) {
  const Tensor& t = ctx.input(i);
  if (t.dtype() != DType::kInt32 || t.num_elements() != 1)
    return ctx.invalid_argument(what + " (input " + std::to_string(i) + ") must be an int32 scalar, got " + t.debug_string());
  return t.data<int32_t>()[0];
}

void set_bytes(OpKernelContext& ctx, const std::string& s) {
  Tensor t(DType::kUInt8, Shape{static_cast<int64_t>(s.size())});
  if (!s.empty()) std::memcpy(t.raw_data(), s.data(), s.size());
  ctx.set_output(0, std::move(t));
}

// Makes the directories above `prefix` that do not exist (as mkdir -p); Unavailable naming the one
// that could not be made.
Status make_parent_dirs(const std::string& prefix) {
  for (size_t slash = prefix.find('/', 1); slash != std::string::npos; slash = prefix.find('/', slash + 1)) {
    const std::string dir = prefix.substr(0, slash);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      return Unavailable("making directory " + dir + ": " + std::strerror(errno));
  }
  return Status::OK();
}

class StringJoinKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const std::string sep = ctx.attrs().get_or<std::string>("separator", "");
    const bool vector = ctx.attrs().get_or<bool>("vector", false);
    std::string out;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      AF_ASSIGN_OR_RETURN(std::string_view b, bytes_of(ctx, i, "string " + std::to_string(i)));
      if (vector && b.find('\0') != std::string_view::npos)
        return ctx.invalid_argument("string " + std::to_string(i) + " holds a NUL byte");
      if (i > 0 && !vector) out += sep;
      out += b;
      if (vector) out += '\0';
      if (out.size() > kMaxStringOpBytes) return ctx.invalid_argument("the joined string is longer than 64 KiB");
    }
    set_bytes(ctx, out);
    return Status::OK();
  }
};

class RegexFullMatchKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    auto pattern = parse_literal_pattern(ctx.attrs().get_or<std::string>("pattern", ""));
    if (!pattern.ok()) return ctx.invalid_argument(pattern.status().message());
    AF_ASSIGN_OR_RETURN(std::string_view b, bytes_of(ctx, 0, "the string"));
    Tensor t(DType::kBool, Shape{});
    t.data<bool>()[0] = pattern->full_match(b);
    ctx.set_output(0, std::move(t));
    return Status::OK();
  }
};

class StringSelectKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& cond = ctx.input(0);
    if (cond.dtype() != DType::kBool || cond.num_elements() != 1)
      return ctx.invalid_argument("cond (input 0) must be a bool scalar, got " + cond.debug_string());
    AF_ASSIGN_OR_RETURN(std::string_view a, bytes_of(ctx, 1, "a"));
    AF_ASSIGN_OR_RETURN(std::string_view b, bytes_of(ctx, 2, "b"));
    set_bytes(ctx, std::string(cond.data<bool>()[0] ? a : b));
    return Status::OK();
  }
};

class ShardedFilenameKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    AF_ASSIGN_OR_RETURN(std::string_view base, bytes_of(ctx, 0, "basename"));
    AF_ASSIGN_OR_RETURN(int64_t shard, int_scalar(ctx, 1, "shard"));
    AF_ASSIGN_OR_RETURN(int64_t num, int_scalar(ctx, 2, "num_shards"));
    auto name = tf_sharded_filename(std::string(base), shard, num);
    if (!name.ok()) return ctx.invalid_argument(name.status().message());
    set_bytes(ctx, *name);
    return Status::OK();
  }
};

// MergeV2Checkpoints: the shards a sharded Saver's SaveV2s wrote become one bundle.
class MergeV2CheckpointsKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    AF_ASSIGN_OR_RETURN(std::string_view list, bytes_of(ctx, 0, "checkpoint_prefixes"));
    auto prefixes = split_string_vector(list);
    if (!prefixes.ok()) return ctx.invalid_argument("checkpoint_prefixes: " + prefixes.status().message());
    for (const auto& p : *prefixes)
      if (p.empty()) return ctx.invalid_argument("checkpoint_prefixes holds an empty prefix");
    AF_ASSIGN_OR_RETURN(std::string dest, prefix_of(ctx, 1));
    Status s = merge_tf_checkpoints(*prefixes, dest, ctx.attrs().get_or<bool>("delete_old_dirs", true),
                                    ctx.attrs().get_or<bool>("allow_missing_files", false));
    if (!s.ok()) return ctx.error(s.code(), s.message());
    return Status::OK();
  }
};

// SaveV2: every entry's tensor into the checkpoint; a slot entry from its variable's slot blob when
// the variable actor holds that slot (the graph's slot variable, which actorflow's updates do not
// touch, otherwise: its initial value, as TensorFlow would save it before the first update).
class SaveV2Kernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    AF_ASSIGN_OR_RETURN(Layout l, layout_of(ctx));
    const size_t n = l.names.size();
    if (static_cast<size_t>(ctx.num_inputs()) != 1 + n + l.owners.size())
      return ctx.invalid_argument("takes " + std::to_string(1 + n + l.owners.size()) + " inputs, got " +
                                  std::to_string(ctx.num_inputs()));
    AF_ASSIGN_OR_RETURN(std::string prefix, prefix_of(ctx));
    std::vector<VariableSlotSet> slots(l.owners.size());
    for (size_t k = 0; k < l.owners.size(); ++k) {
      const Tensor& owner = ctx.input(static_cast<int>(1 + l.owners[k]));
      auto s = decode_variable_slots(ctx.input(static_cast<int>(1 + n + k)), owner.dtype(), owner.shape());
      if (!s.ok())
        return ctx.error(s.status().code(), "the optimizer slots of '" + l.names[static_cast<size_t>(l.owners[k])] +
                                                "': " + s.status().message());
      slots[k] = std::move(*s);
    }
    std::vector<TfWriteItem> items;
    items.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      Tensor t = ctx.input(static_cast<int>(1 + i));
      if (l.slot_of[i] >= 0) {
        const Tensor& held = slots[l.owner_index(l.slot_of[i])].at(static_cast<SlotId>(l.slot_id[i]));
        if (held.is_initialized()) {
          if (held.dtype() != t.dtype() || !(held.shape() == t.shape()))
            return ctx.invalid_argument("slot entry '" + l.names[i] + "' is " + t.debug_string() +
                                        " in the graph but the variable holds " + held.debug_string());
          t = held;
        }
      }
      auto tf = tf_tensor_from(t);
      if (!tf.ok()) return ctx.invalid_argument("entry '" + l.names[i] + "': " + tf.status().message());
      TfWriteItem item;
      item.name = l.names[i];
      item.tensor = std::move(*tf);
      items.push_back(std::move(item));
    }
    // As TensorFlow's BundleWriter, the prefix's directory is made (a sharded Saver writes each
    // shard under "<prefix>_temp/").
    Status s = make_parent_dirs(prefix);
    if (s.ok()) s = write_tf_checkpoint(prefix, items, 1);
    if (!s.ok()) return ctx.error(s.code(), "writing checkpoint '" + prefix + "': " + s.message());
    return Status::OK();
  }
};

// RestoreV2: every entry read with exactly its dtype; for each variable owning slot entries, its
// slot blob (the moments and Adam's count as data/tf/tf_checkpoint_data.h derives them), which
// RestoreVariableSlots gives to the variable actor.
class RestoreV2Kernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    AF_ASSIGN_OR_RETURN(Layout l, layout_of(ctx));
    auto dtypes = ctx.attrs().get<std::vector<std::string>>("dtypes");
    if (!dtypes.ok() || dtypes->size() != l.names.size())
      return ctx.invalid_argument("dtypes must list one type per tensor name");
    AF_ASSIGN_OR_RETURN(std::string prefix, prefix_of(ctx));
    auto reader = TfCheckpointReader::open(prefix);
    if (!reader.ok()) return ctx.error(reader.status().code(), reader.status().message());
    std::vector<Tensor> values;
    for (size_t i = 0; i < l.names.size(); ++i) {
      auto want = dtype_from_name((*dtypes)[i]);
      if (!want.ok()) return ctx.invalid_argument(want.status().message());
      auto tf = reader->read(l.names[i]);
      if (!tf.ok()) return ctx.error(tf.status().code(), tf.status().message());
      if (!same_dtype(tf->dtype, *want))
        return ctx.invalid_argument("checkpoint '" + prefix + "' holds '" + l.names[i] + "' as " +
                                    tf_dtype_name(tf->dtype) + ", the graph restores it as " + dtype_name(*want));
      auto t = tf_tensor_to_tensor(*tf);
      if (!t.ok()) return ctx.error(t.status().code(), t.status().message());
      values.push_back(std::move(*t));
    }
    std::vector<Tensor> blobs;
    if (!l.owners.empty()) {
      auto data = read_tf_checkpoint_data(prefix);
      if (!data.ok()) return ctx.error(data.status().code(), data.status().message());
      for (int64_t j : l.owners) {
        const std::string& owner = l.names[static_cast<size_t>(j)];
        auto it = data->variables.find(slots_key(owner));
        Tensor blob = it == data->variables.end() ? Tensor(DType::kUInt8, Shape{0}) : it->second;
        const Tensor& v = values[static_cast<size_t>(j)];
        auto set = decode_variable_slots(blob, v.dtype(), v.shape());
        if (!set.ok()) return ctx.error(set.status().code(), "the optimizer slots of '" + owner + "': " + set.status().message());
        for (size_t i = 0; i < l.names.size(); ++i)
          if (l.slot_of[i] == j && !set->at(static_cast<SlotId>(l.slot_id[i])).is_initialized())
            return ctx.error(Code::kFailedPrecondition,
                             "checkpoint '" + prefix + "': entry '" + l.names[i] + "' cannot become the optimizer state of '" +
                                 owner + "' (its shape or dtype differs, or Adam's count is neither '" + owner +
                                 "/Adam_t' nor derivable from beta1_power/beta2_power at the default betas)");
        blobs.push_back(std::move(blob));
      }
    }
    for (size_t i = 0; i < values.size(); ++i) ctx.set_output(static_cast<int>(i), std::move(values[i]));
    for (size_t k = 0; k < blobs.size(); ++k) ctx.set_output(static_cast<int>(values.size() + k), std::move(blobs[k]));
    return Status::OK();
  }
};

}  // namespace

void register_cpu_io_kernels(KernelRegistry& r) {
  r.add("SaveV2", "CPU", simple_factory<SaveV2Kernel>());
  r.add("RestoreV2", "CPU", simple_factory<RestoreV2Kernel>());
  r.add("StringJoin", "CPU", simple_factory<StringJoinKernel>());
  r.add("RegexFullMatch", "CPU", simple_factory<RegexFullMatchKernel>());
  r.add("StringSelect", "CPU", simple_factory<StringSelectKernel>());
  r.add("ShardedFilename", "CPU", simple_factory<ShardedFilenameKernel>());
  r.add("MergeV2Checkpoints", "CPU", simple_factory<MergeV2CheckpointsKernel>());
}

}  // namespace actorflow
