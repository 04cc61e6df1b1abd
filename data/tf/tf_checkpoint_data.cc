// CheckpointData in TensorFlow's checkpoint format (data/tf/tf_checkpoint_data.h).
#include "data/tf/tf_checkpoint_data.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "core/logging.h"
#include "data/tf/tf_checkpoint.h"
#include "data/variable_slots.h"

namespace actorflow {
namespace {

constexpr const char* kGlobalStep = "global_step";
constexpr const char* kAdamStepSuffix = "/Adam_t";
// TensorFlow's default Adam betas, the only ones an update count is derived from.
constexpr double kDefaultBeta1 = 0.9;
constexpr double kDefaultBeta2 = 0.999;

// TensorFlow's slot variable name for each slot id (tf.compat.v1 optimizers: the optimizer's
// name, made unique per variable in creation order).
const char* tf_slot_suffix(int id) {
  switch (static_cast<SlotId>(id)) {
    case SlotId::kMomentum: return "/Momentum";
    case SlotId::kAdamM: return "/Adam";
    case SlotId::kAdamV: return "/Adam_1";
    case SlotId::kAdagradAccum: return "/Adagrad";
    case SlotId::kRmsMs: return "/RMSProp";
    case SlotId::kRmsMom: return "/RMSProp_1";
    case SlotId::kFtrlAccum: return "/Ftrl";
    case SlotId::kFtrlLinear: return "/Ftrl_1";
  }
  return "";
}

TfTensor int64_scalar(int64_t v) {
  TfTensor t;
  t.dtype = TfDType::kInt64;
  t.shape = Shape{};
  t.bytes.resize(8);
  const uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) t.bytes[static_cast<size_t>(i)] = static_cast<char>((u >> (8 * i)) & 0xff);
  return t;
}

// The value of an int32/int64 scalar, nullopt for anything else.
std::optional<int64_t> int_scalar(const Tensor& t) {
  if (!t.is_initialized() || t.num_elements() != 1 || !t.shape().dims().empty()) return std::nullopt;
  if (t.dtype() == DType::kInt64) return *t.data<int64_t>();
  if (t.dtype() == DType::kInt32) return *t.data<int32_t>();
  return std::nullopt;
}

std::optional<double> float_scalar(const std::map<std::string, Tensor>& vars, const std::string& name) {
  auto it = vars.find(name);
  if (it == vars.end() || it->second.num_elements() != 1 || !it->second.shape().dims().empty()) return std::nullopt;
  if (it->second.dtype() == DType::kFloat32) return *it->second.data<float>();
  if (it->second.dtype() == DType::kFloat64) return *it->second.data<double>();
  return std::nullopt;
}

// Adam's update count from TensorFlow's beta powers: after K updates beta1_power is beta1^(K+1)
// (TensorFlow multiplies it after each update; actorflow's count is the updates made). Only the
// default betas are recognised, both powers agreeing to 1e-3 relative.
std::optional<int64_t> adam_count_from_beta_powers(const std::map<std::string, Tensor>& vars) {
  auto b1p = float_scalar(vars, "beta1_power");
  auto b2p = float_scalar(vars, "beta2_power");
  if (!b1p || !b2p || !(*b1p > 0) || !(*b1p <= 1) || !(*b2p > 0) || !(*b2p <= 1)) return std::nullopt;
  const double k1 = std::log(*b1p) / std::log(kDefaultBeta1);
  if (!(k1 < 1e15)) return std::nullopt;
  const int64_t k = std::llround(k1);
  if (k < 1) return std::nullopt;
  auto close = [](double want, double got) { return std::fabs(want - got) <= 1e-3 * want; };
  if (!close(std::pow(kDefaultBeta1, static_cast<double>(k)), *b1p) ||
      !close(std::pow(kDefaultBeta2, static_cast<double>(k)), *b2p))
    return std::nullopt;
  return k - 1;
}

}  // namespace

Status write_checkpoint_data_as_tf(const std::string& prefix, const CheckpointData& data) {
  std::vector<TfWriteItem> items;
  std::set<std::string> names;
  auto add = [&](const std::string& name, TfTensor t) {
    if (!names.insert(name).second) return;  // written already (a slot before a same-named variable)
    TfWriteItem item;
    item.name = name;
    item.tensor = std::move(t);
    items.push_back(std::move(item));
  };
  // Slots first: a variable of an imported TensorFlow graph named like a slot ("w/Adam") is the
  // slot variable TensorFlow's graph declares, which actorflow's variable actor does not update
  // (it keeps the slots itself); the state it holds is the slot's, so that is what is written.
  for (const auto& [name, blob] : data.variables) {
    if (!is_slots_key(name)) continue;
    const std::string var = name.substr(0, name.size() - std::strlen(kSlotsSuffix));
    auto vit = data.variables.find(var);
    if (vit == data.variables.end())
      return InvalidArgument("checkpoint entry '" + name + "' holds the optimizer slots of '" + var +
                             "', which is not saved");
    Result<VariableSlotSet> set = decode_variable_slots(blob, vit->second.dtype(), vit->second.shape());
    if (!set.ok()) return InvalidArgument("checkpoint variable '" + var + "': " + set.status().message());
    for (int id = 1; id <= kNumSlotIds; ++id) {
      const Tensor& slot = set->slot[static_cast<size_t>(id)];
      if (!slot.is_initialized()) continue;
      Result<TfTensor> tt = tf_tensor_from(slot);
      if (!tt.ok()) return InvalidArgument("optimizer slot of '" + var + "': " + tt.status().message());
      add(var + tf_slot_suffix(id), std::move(*tt));
    }
    if (set->adam_t > 0) add(var + kAdamStepSuffix, int64_scalar(set->adam_t));
  }
  for (const auto& [name, t] : data.variables) {
    if (is_slots_key(name)) continue;
    Result<TfTensor> tt = tf_tensor_from(t);
    if (!tt.ok())
      return InvalidArgument("checkpoint variable '" + name + "' cannot be written in TensorFlow's format: " +
                             tt.status().message());
    add(name, std::move(*tt));
  }
  add(kGlobalStep, int64_scalar(data.global_step));
  return write_tf_checkpoint(prefix, items, 1);
}

Result<CheckpointData> read_tf_checkpoint_data(const std::string& prefix) {
  AF_ASSIGN_OR_RETURN(TfCheckpointReader reader, TfCheckpointReader::open(prefix));
  CheckpointData d;
  for (const TfEntryInfo& e : reader.entries()) {
    AF_ASSIGN_OR_RETURN(TfTensor tt, reader.read(e.name));
    Result<Tensor> t = tf_tensor_to_tensor(tt);
    if (!t.ok()) return DataLoss(prefix + ".index: entry '" + e.name + "': " + t.status().message());
    d.variables.emplace(e.name, std::move(*t));
  }
  if (auto it = d.variables.find(kGlobalStep); it != d.variables.end())
    if (auto step = int_scalar(it->second)) d.global_step = *step;

  const std::optional<int64_t> beta_count = adam_count_from_beta_powers(d.variables);
  std::map<std::string, Tensor> blobs;
  for (const auto& [var, value] : d.variables) {
    VariableSlotSet set;
    bool any = false;
    for (int id = 1; id <= kNumSlotIds; ++id) {
      auto it = d.variables.find(var + tf_slot_suffix(id));
      if (it == d.variables.end() || it->second.dtype() != value.dtype() || it->second.shape() != value.shape())
        continue;
      set.slot[static_cast<size_t>(id)] = it->second;
      any = true;
    }
    if (!any) continue;
    if (set.at(SlotId::kAdamM).is_initialized() || set.at(SlotId::kAdamV).is_initialized()) {
      std::optional<int64_t> count;
      if (auto it = d.variables.find(var + kAdamStepSuffix); it != d.variables.end()) count = int_scalar(it->second);
      if (!count) count = beta_count;
      const bool both = set.at(SlotId::kAdamM).is_initialized() && set.at(SlotId::kAdamV).is_initialized();
      if (!count || *count < 0 || !both) {
        AF_LOG(WARNING) << "checkpoint " << prefix << ": Adam's moments of '" << var
                        << "' are not restored as its optimizer state ("
                        << (both ? "no '" + var + kAdamStepSuffix +
                                       "' and no beta1_power/beta2_power of the default betas 0.9/0.999"
                                 : std::string("only one of the two moments"))
                        << "); the variable's value is";
        set.at(SlotId::kAdamM) = Tensor();
        set.at(SlotId::kAdamV) = Tensor();
      } else {
        set.adam_t = *count;
      }
    }
    if (set.empty()) continue;
    Result<Tensor> blob = encode_variable_slots(set, value.bytes());
    if (!blob.ok()) return blob.status();
    blobs.emplace(slots_key(var), std::move(*blob));
  }
  for (auto& [k, b] : blobs) d.variables.emplace(k, std::move(b));
  return d;
}

bool is_tf_checkpoint(const std::string& path) {
  struct stat st {};
  const std::string suffix = ".index";
  if (path.size() > suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0 &&
      ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
    return true;
  return ::stat((path + suffix).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string checkpoint_name_of(const std::string& path) {
  const std::string suffix = ".index";
  struct stat st {};
  if (path.size() > suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0 &&
      ::stat(path.c_str(), &st) == 0 && ::stat((path + suffix).c_str(), &st) != 0)
    return path.substr(0, path.size() - suffix.size());
  return path;
}

Result<CheckpointData> read_any_checkpoint(const std::string& path) {
  if (!is_tf_checkpoint(path)) return read_checkpoint(path);
  return read_tf_checkpoint_data(checkpoint_name_of(path));
}

}  // namespace actorflow
