// The ids of a variable's optimizer slots: which optimizer state a slot tensor is. Plain data,
// included by the optimizer math (device/optimizers.h: which slots each optimizer has), the slot
// blob format (data/variable_slots.h: the ids stored) and TensorFlow's slot names
// (data/tf/tf_checkpoint_data.cc). Ids are part of the blob format: never renumber one.
#pragma once

#include <cstdint>

namespace actorflow {

enum class SlotId : uint8_t {
  kMomentum = 1,      // ApplyMomentum's accumulator
  kAdamM = 2,         // ApplyAdam's first moment
  kAdamV = 3,         // ApplyAdam's second moment
  kAdagradAccum = 4,  // ApplyAdagrad's accumulator
  kRmsMs = 5,         // ApplyRMSProp's mean square
  kRmsMom = 6,        // ApplyRMSProp's momentum
  kFtrlAccum = 7,     // ApplyFtrl's accumulator (sum of squared gradients)
  kFtrlLinear = 8,    // ApplyFtrl's linear term
};
// The largest id; ids run 1..kNumSlotIds.
inline constexpr int kNumSlotIds = 8;

}  // namespace actorflow
