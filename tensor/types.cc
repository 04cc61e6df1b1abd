#include "tensor/types.h"

#include <cstring>

#include "core/checked_math.h"

namespace actorflow {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
    case DType::kBool: return 1;
    case DType::kInvalid: return 0;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
    case DType::kBool: return "bool";
    case DType::kInvalid: return "invalid";
  }
  return "invalid";
}

Result<DType> dtype_from_name(const std::string& name) {
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kUInt8,
                  DType::kBool}) {
    if (name == dtype_name(t)) return t;
  }
  if (name == "float") return DType::kFloat32;
  if (name == "double") return DType::kFloat64;
  return InvalidArgument("unknown dtype '" + name + "'");
}

bool dtype_is_floating(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

bool Shape::fully_defined() const {
  if (unknown_rank_) return false;
  for (auto d : dims_)
    if (d < 0) return false;
  return true;
}

int64_t Shape::num_elements() const {
  if (!fully_defined()) return -1;
  int64_t n;
  if (!checked_dims_product(dims_.data(), dims_.size(), &n)) return -1;
  return n;
}

namespace {

// The product of the non-zero dims of a fully defined shape, capped: false when over `cap`.
bool nonzero_product_within(const std::vector<int64_t>& dims, int64_t cap) {
  int64_t p = 1;
  for (int64_t d : dims) {
    if (d == 0) continue;
    if (!checked_mul(p, d, &p) || p > cap) return false;
  }
  return true;
}

}  // namespace

Result<int64_t> Shape::checked_num_elements() const {
  if (!fully_defined()) return InvalidArgument("shape " + to_string() + " is not fully defined");
  if (rank() > kMaxTensorRank)
    return InvalidArgument("shape of rank " + std::to_string(rank()) + " has more than " +
                           std::to_string(kMaxTensorRank) + " dimensions");
  if (!nonzero_product_within(dims_, kMaxTensorElements))
    return InvalidArgument("shape " + to_string() + " has more than 2^60 elements");
  return num_elements();
}

bool Shape::valid_for_tensor() const {
  return fully_defined() && rank() <= kMaxTensorRank && nonzero_product_within(dims_, kMaxTensorElements);
}

std::string Shape::to_string() const {
  if (unknown_rank_) return "<unknown>";
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ",";
    s += dims_[i] < 0 ? std::string("?") : std::to_string(dims_[i]);
  }
  return s + "]";
}

bool Shape::compatible_with(const Shape& o) const {
  if (unknown_rank_ || o.unknown_rank_) return true;
  if (dims_.size() != o.dims_.size()) return false;
  for (size_t i = 0; i < dims_.size(); ++i)
    if (dims_[i] >= 0 && o.dims_[i] >= 0 && dims_[i] != o.dims_[i]) return false;
  return true;
}

float float16_bits_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bfloat16_bits_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace actorflow
