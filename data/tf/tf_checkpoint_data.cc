// CheckpointData in TensorFlow's checkpoint format (data/tf/tf_checkpoint_data.h).
#include "data/tf/tf_checkpoint_data.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
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
constexpr const char* kAdamStepSuffix = kTfAdamCountSuffix;
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

namespace {

// The order of places, and so of data files: digit runs compare as numbers ("/job:ps/replica:0/
// task:2" before ".../task:10"), everything else bytewise.
bool place_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      size_t iz = i, jz = j;  // skip leading zeros
      while (iz + 1 < ie && a[iz] == '0') ++iz;
      while (jz + 1 < je && b[jz] == '0') ++jz;
      if (ie - iz != je - jz) return ie - iz < je - jz;
      const int c = a.compare(iz, ie - iz, b, jz, je - jz);
      if (c != 0) return c < 0;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j || (a.size() - i == b.size() - j && a < b);
}

// True when `parts` are consecutive row ranges covering the rows of `shape` (rank >= 1) in order.
bool parts_tile_rows(const std::vector<SavedPart>& parts, const Shape& shape) {
  if (parts.empty() || shape.rank() < 1) return false;
  int64_t next = 0;
  for (const SavedPart& p : parts) {
    if (p.offset != next || p.rows < 0 || p.rows > shape.dim(0) - next) return false;
    next += p.rows;
  }
  return next == shape.dim(0);
}

// Rows [offset, offset + rows) of `t` (rank >= 1, the range inside it).
TfTensor tf_rows(const TfTensor& t, int64_t offset, int64_t rows) {
  std::vector<int64_t> dims = t.shape.dims();
  const size_t row = dims[0] == 0 ? 0 : t.bytes.size() / static_cast<size_t>(dims[0]);
  dims[0] = rows;
  TfTensor out;
  out.dtype = t.dtype;
  out.shape = Shape(std::move(dims));
  out.bytes = t.bytes.substr(static_cast<size_t>(offset) * row, static_cast<size_t>(rows) * row);
  return out;
}

// TensorFlow's slice extents of rows [offset, offset + rows) of `full`: explicit start and
// length in every dimension, as TensorFlow's Saver writes them.
std::vector<TfExtent> row_extents(const Shape& full, int64_t offset, int64_t rows) {
  std::vector<TfExtent> ext{{offset, rows}};
  for (int d = 1; d < full.rank(); ++d) ext.push_back({0, full.dim(d)});
  return ext;
}

}  // namespace

Status write_checkpoint_data_as_tf(const std::string& prefix, const CheckpointData& data, const TfSaveOptions& opts) {
  std::vector<TfWriteItem> items;
  std::vector<std::optional<std::string>> item_place;  // per item; nullopt: the first data file
  std::set<std::string> names;
  auto place_of = [&](const std::string& var) -> std::string {
    auto it = data.placement.find(var);
    return it == data.placement.end() ? std::string() : it->second.place;
  };
  auto push = [&](const std::string& name, TfTensor t, std::optional<std::string> place, const Shape& full,
                  std::vector<TfExtent> slice) {
    TfWriteItem item;
    item.name = name;
    item.tensor = std::move(t);
    item.full_shape = full;
    item.slice = std::move(slice);
    items.push_back(std::move(item));
    item_place.push_back(std::move(place));
  };
  auto add = [&](const std::string& name, TfTensor t, std::optional<std::string> place) {
    if (!names.insert(name).second) return;  // written already (a slot before a same-named variable)
    push(name, std::move(t), std::move(place), Shape{}, {});
  };
  // Partitioned variables written as slices: each part's variable name -> (logical name, part).
  std::map<std::string, std::pair<std::string, const SavedPart*>> part_of;
  for (const auto& [name, pl] : data.placement) {
    auto v = data.variables.find(name);
    if (v == data.variables.end() || !parts_tile_rows(pl.parts, v->second.shape())) continue;
    for (const SavedPart& part : pl.parts) part_of[part.variable] = {name, &part};
  }
  // A partitioned variable's slots, gathered per part: slot[id][part index].
  struct PartSlots {
    std::array<std::vector<Tensor>, kNumSlotIds + 1> slot;
    std::vector<int64_t> adam_t;
  };
  std::map<std::string, PartSlots> part_slots;

  // Slots first: a variable of an imported TensorFlow graph named like a slot ("w/Adam") is the
  // slot variable TensorFlow's graph declares, which actorflow's variable actor does not update
  // (it keeps the slots itself); the state it holds is the slot's, so that is what is written.
  for (const auto& [name, blob] : data.variables) {
    if (!is_slots_key(name)) continue;
    const std::string var = name.substr(0, name.size() - std::strlen(kSlotsSuffix));
    auto vit = data.variables.find(var);
    auto pit = part_of.find(var);
    if (vit == data.variables.end() && pit == part_of.end())
      return InvalidArgument("checkpoint entry '" + name + "' holds the optimizer slots of '" + var +
                             "', which is not saved");
    if (vit == data.variables.end()) {  // a part of a partitioned variable
      const std::string& logical = pit->second.first;
      const Tensor& whole = data.variables.at(logical);
      const std::vector<SavedPart>& parts = data.placement.at(logical).parts;
      const size_t index = static_cast<size_t>(pit->second.second - parts.data());
      std::vector<int64_t> dims = whole.shape().dims();
      dims[0] = pit->second.second->rows;
      Result<VariableSlotSet> set = decode_variable_slots(blob, whole.dtype(), Shape(std::move(dims)));
      if (!set.ok()) return InvalidArgument("checkpoint variable '" + var + "': " + set.status().message());
      PartSlots& ps = part_slots[logical];
      for (int id = 1; id <= kNumSlotIds; ++id) {
        ps.slot[static_cast<size_t>(id)].resize(parts.size());
        ps.slot[static_cast<size_t>(id)][index] = set->slot[static_cast<size_t>(id)];
      }
      ps.adam_t.resize(parts.size());
      ps.adam_t[index] = set->adam_t;
      continue;
    }
    Result<VariableSlotSet> set = decode_variable_slots(blob, vit->second.dtype(), vit->second.shape());
    if (!set.ok()) return InvalidArgument("checkpoint variable '" + var + "': " + set.status().message());
    for (int id = 1; id <= kNumSlotIds; ++id) {
      const Tensor& slot = set->slot[static_cast<size_t>(id)];
      if (!slot.is_initialized()) continue;
      Result<TfTensor> tt = tf_tensor_from(slot);
      if (!tt.ok()) return InvalidArgument("optimizer slot of '" + var + "': " + tt.status().message());
      add(var + tf_slot_suffix(id), std::move(*tt), place_of(var));
    }
    if (set->adam_t > 0) add(var + kTfAdamCountSuffix, int64_scalar(set->adam_t), place_of(var));
  }
  for (const auto& [logical, ps] : part_slots) {
    const Tensor& whole = data.variables.at(logical);
    const std::vector<SavedPart>& parts = data.placement.at(logical).parts;
    for (int id = 1; id <= kNumSlotIds; ++id) {
      const std::vector<Tensor>& per_part = ps.slot[static_cast<size_t>(id)];
      const size_t present = static_cast<size_t>(
          std::count_if(per_part.begin(), per_part.end(), [](const Tensor& t) { return t.is_initialized(); }));
      if (present == 0) continue;
      const std::string slot_name = logical + tf_slot_suffix(id);
      if (present != parts.size()) {
        AF_LOG(WARNING) << "checkpoint " << prefix << ": optimizer slot '" << slot_name << "' is held by " << present
                        << " of the " << parts.size() << " parts of '" << logical << "'; not written";
        continue;
      }
      if (!names.insert(slot_name).second) continue;
      for (size_t i = 0; i < parts.size(); ++i) {
        Result<TfTensor> tt = tf_tensor_from(per_part[i]);
        if (!tt.ok()) return InvalidArgument("optimizer slot of '" + parts[i].variable + "': " + tt.status().message());
        push(slot_name, std::move(*tt), parts[i].place, whole.shape(),
             row_extents(whole.shape(), parts[i].offset, parts[i].rows));
      }
    }
    const int64_t most = ps.adam_t.empty() ? 0 : *std::max_element(ps.adam_t.begin(), ps.adam_t.end());
    if (most > 0) {
      add(logical + kTfAdamCountSuffix, int64_scalar(most), parts.front().place);
      for (size_t i = 0; i < parts.size(); ++i)
        if (ps.adam_t[i] != most) add(parts[i].variable + kTfAdamCountSuffix, int64_scalar(ps.adam_t[i]), parts[i].place);
    }
  }
  for (const auto& [name, t] : data.variables) {
    if (is_slots_key(name)) continue;
    Result<TfTensor> tt = tf_tensor_from(t);
    if (!tt.ok())
      return InvalidArgument("checkpoint variable '" + name + "' cannot be written in TensorFlow's format: " +
                             tt.status().message());
    auto pl = data.placement.find(name);
    if (pl == data.placement.end() || !parts_tile_rows(pl->second.parts, t.shape())) {
      add(name, std::move(*tt), place_of(name));
      continue;
    }
    if (!names.insert(name).second) continue;
    for (const SavedPart& part : pl->second.parts)
      push(name, tf_rows(*tt, part.offset, part.rows), part.place, t.shape(),
           row_extents(t.shape(), part.offset, part.rows));
  }
  add(kGlobalStep, int64_scalar(data.global_step), std::nullopt);

  // One data file per place, in place order (or one for all).
  std::vector<std::string> places;
  for (const auto& p : item_place)
    if (p) places.push_back(*p);
  std::sort(places.begin(), places.end(), place_less);
  places.erase(std::unique(places.begin(), places.end()), places.end());
  const int num_shards = opts.sharded && !places.empty() ? static_cast<int>(places.size()) : 1;
  if (num_shards > 1)
    for (size_t i = 0; i < items.size(); ++i)
      if (item_place[i])
        items[i].shard = static_cast<int>(std::lower_bound(places.begin(), places.end(), *item_place[i], place_less) -
                                          places.begin());
  return write_tf_checkpoint(prefix, items, num_shards);
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
