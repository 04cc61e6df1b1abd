// The optimizer slots of one variable as one uint8 blob (ops VariableSlots /
// RestoreVariableSlots, the ":slots" entries of checkpoints). All integers little-endian:
//   "AFSLOTS1" | int64 adam_t | uint32 count | count x (uint8 slot id | the slot's raw bytes)
// Each slot has the variable's dtype and shape, so its byte count is the value's. A variable no
// optimizer has updated (no slot, adam_t 0) is the empty blob. Pure functions, thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "device/slot_ids.h"
#include "tensor/tensor.h"

namespace actorflow {

// Slot ids (device/slot_ids.h) are stored in the blob as they are.

// A variable's slots: slot[id] for id 1..kNumSlotIds (index 0 unused), uninitialised when absent; each
// present one has the variable's dtype and shape. adam_t counts ApplyAdam's updates.
struct VariableSlotSet {
  int64_t adam_t = 0;
  std::array<Tensor, kNumSlotIds + 1> slot;
  Tensor& at(SlotId id) { return slot[static_cast<size_t>(id)]; }
  const Tensor& at(SlotId id) const { return slot[static_cast<size_t>(id)]; }
  // True when no slot is present and adam_t is 0 (what the empty blob means).
  bool empty() const;
};

// The blob of `s` (uint8 vector; the empty vector for an empty set). Every present slot must
// have `slot_bytes` bytes (the variable's value size); InvalidArgument naming the slot otherwise.
// ResourceExhausted when the blob cannot be allocated.
Result<Tensor> encode_variable_slots(const VariableSlotSet& s, size_t slot_bytes);

// Decodes a blob for a variable of `dtype` and `shape`, checking it completely (magic, counts,
// ids in 1..kNumSlotIds and not repeated, exact length). InvalidArgument "slots: ..." describing the first
// problem; FailedPrecondition when the blob holds slots and dtype is kInvalid (a variable whose
// value was never set). The slots are freshly allocated host tensors owned by the caller.
Result<VariableSlotSet> decode_variable_slots(const Tensor& blob, DType dtype, const Shape& shape);

// The suffix of a checkpoint entry holding a variable's optimizer slots ("w:slots"); ':' cannot
// occur in a node name, so it never collides with a variable.
inline constexpr const char* kSlotsSuffix = ":slots";
// slots_key("w") == "w:slots". Pure.
std::string slots_key(const std::string& variable);
// True for a name slots_key made. Pure.
bool is_slots_key(const std::string& name);

}  // namespace actorflow
