#include "tensor/types.h"

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
  int64_t n = 1;
  for (auto d : dims_) n *= d;
  return n;
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

}  // namespace actorflow
