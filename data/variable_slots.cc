// Optimizer-slot blobs (data/variable_slots.h).
#include "data/variable_slots.h"

#include <cstring>
#include <string>

#include "tensor/pooling_allocator.h"

namespace actorflow {
namespace {

constexpr char kSlotsMagic[8] = {'A', 'F', 'S', 'L', 'O', 'T', 'S', '1'};
constexpr size_t kHeaderBytes = 8 + 8 + 4;

}  // namespace

std::string slots_key(const std::string& variable) { return variable + kSlotsSuffix; }

bool is_slots_key(const std::string& name) {
  const size_t n = std::char_traits<char>::length(kSlotsSuffix);
  return name.size() > n && name.compare(name.size() - n, n, kSlotsSuffix) == 0;
}

bool VariableSlotSet::empty() const {
  if (adam_t != 0) return false;
  for (size_t id = 1; id <= kNumSlotIds; ++id)
    if (slot[id].is_initialized()) return false;
  return true;
}

Result<Tensor> encode_variable_slots(const VariableSlotSet& s, size_t slot_bytes) {
  if (s.empty()) return Tensor(DType::kUInt8, Shape{0});
  size_t count = 0;
  for (size_t id = 1; id <= kNumSlotIds; ++id) {
    if (!s.slot[id].is_initialized()) continue;
    if (s.slot[id].bytes() != slot_bytes)
      return InvalidArgument("slots: slot " + std::to_string(id) + " has " + std::to_string(s.slot[id].bytes()) +
                             " bytes, the variable " + std::to_string(slot_bytes));
    ++count;
  }
  const size_t total = kHeaderBytes + count * (1 + slot_bytes);
  // Every byte is written below: allocated without the zero fill of Tensor(dtype, shape).
  AF_ASSIGN_OR_RETURN(Tensor out,
                      Tensor::allocate(cpu_host_pool(), DType::kUInt8, Shape{static_cast<int64_t>(total)}));
  uint8_t* p = out.data<uint8_t>();
  std::memcpy(p, kSlotsMagic, 8);
  p += 8;
  const uint64_t t = static_cast<uint64_t>(s.adam_t);
  for (int i = 0; i < 8; ++i) *p++ = static_cast<uint8_t>(t >> (8 * i));
  const uint32_t n = static_cast<uint32_t>(count);
  for (int i = 0; i < 4; ++i) *p++ = static_cast<uint8_t>(n >> (8 * i));
  for (size_t id = 1; id <= kNumSlotIds; ++id) {
    if (!s.slot[id].is_initialized()) continue;
    *p++ = static_cast<uint8_t>(id);
    if (slot_bytes) std::memcpy(p, s.slot[id].raw_data(), slot_bytes);
    p += slot_bytes;
  }
  return out;
}

Result<VariableSlotSet> decode_variable_slots(const Tensor& blob, DType dtype, const Shape& shape) {
  if (!blob.is_initialized() || blob.dtype() != DType::kUInt8 || blob.shape().dims().size() != 1)
    return InvalidArgument("slots must be a uint8 vector");
  VariableSlotSet out;
  const size_t size = static_cast<size_t>(blob.num_elements());
  if (size == 0) return out;
  const uint8_t* p = blob.data<uint8_t>();
  const uint8_t* end = p + size;
  if (size < kHeaderBytes || std::memcmp(p, kSlotsMagic, 8) != 0)
    return InvalidArgument("slots: not an actorflow slot blob (" + std::to_string(size) + " bytes)");
  p += 8;
  uint64_t t = 0;
  for (int i = 0; i < 8; ++i) t |= static_cast<uint64_t>(*p++) << (8 * i);
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(*p++) << (8 * i);
  if (t > static_cast<uint64_t>(INT64_MAX)) return InvalidArgument("slots: Adam step count out of range");
  out.adam_t = static_cast<int64_t>(t);
  if (n > kNumSlotIds) return InvalidArgument("slots: " + std::to_string(n) + " slots (at most " + std::to_string(kNumSlotIds) + ")");
  if (n == 0) return out;
  if (dtype == DType::kInvalid) return FailedPrecondition("slots restored before the variable's value");
  if (!shape.valid_for_tensor()) return InvalidArgument("slots: the variable's shape " + shape.to_string() + " is not valid");
  const size_t slot_bytes = static_cast<size_t>(shape.num_elements()) * dtype_size(dtype);
  for (uint32_t k = 0; k < n; ++k) {
    if (static_cast<size_t>(end - p) < 1 + slot_bytes)
      return InvalidArgument("slots: truncated (slot " + std::to_string(k) + " of " + std::to_string(n) + " needs " +
                             std::to_string(slot_bytes) + " bytes for shape " + shape.to_string() + ")");
    const uint8_t id = *p++;
    if (id < 1 || id > kNumSlotIds || out.slot[id].is_initialized())
      return InvalidArgument("slots: bad or repeated slot id " + std::to_string(id));
    AF_ASSIGN_OR_RETURN(Tensor slot, Tensor::allocate(cpu_host_pool(), dtype, shape));  // overwritten whole
    if (slot_bytes) std::memcpy(slot.raw_data(), p, slot_bytes);
    out.slot[id] = std::move(slot);
    p += slot_bytes;
  }
  if (p != end) return InvalidArgument("slots: " + std::to_string(end - p) + " trailing bytes");
  return out;
}

}  // namespace actorflow
