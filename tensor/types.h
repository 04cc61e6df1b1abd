// DType and Shape: the element type and dimensions of a Tensor.
// Both are plain value types; thread-safe for concurrent const use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/status.h"

namespace actorflow {

// Element types. The numeric values are part of the GraphDef and checkpoint formats.
enum class DType : uint8_t {
  kInvalid = 0,
  kFloat32 = 1,
  kFloat64 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kUInt8 = 5,
  kBool = 6,
};

// The float32 value of an IEEE float16 (binary16) bit pattern, exactly (every float16 is a float32:
// subnormals, infinities and NaN payloads included). Pure.
float float16_bits_to_float(uint16_t bits);
// The float32 value of a bfloat16 bit pattern (its upper 16 bits), exactly. Pure.
float bfloat16_bits_to_float(uint16_t bits);

// Size in bytes of one element; 0 for kInvalid.
size_t dtype_size(DType t);
// TensorFlow-style name: "float32", "float64", "int32", "int64", "uint8", "bool", "invalid".
const char* dtype_name(DType t);
// Parses a dtype_name() string; error names the bad string.
Result<DType> dtype_from_name(const std::string& name);
// True for float32 and float64.
bool dtype_is_floating(DType t);

// Maps a C++ element type to its DType: DTypeOf<float>::value == DType::kFloat32.
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };

// Calls f(T{}) with T the C++ type for `t` (bool for kBool). Returns f's result.
// Precondition: t != kInvalid.
template <typename F>
auto dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::kFloat64: return f(double{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt64: return f(int64_t{});
    case DType::kUInt8: return f(uint8_t{});
    case DType::kBool: return f(bool{});
    case DType::kFloat32:
    default: return f(float{});
  }
}

// The limits every Tensor's shape keeps (Shape::checked_num_elements). The element limit bounds
// the product of a shape's non-zero dims, so the element count of a tensor, of any box inside it
// and of any run of its dims, times any dtype_size (<= 8), fits in int64 without a check: a
// kernel may multiply dims of one valid tensor freely. Products that mix dims of different
// tensors or attribute values go through core/checked_math.h.
constexpr int kMaxTensorRank = 254;                       // TensorFlow's limit
constexpr int64_t kMaxTensorElements = int64_t{1} << 60;  // 8 EiB of bytes at 8 bytes each

// A tensor shape. A dimension of -1 means "unknown" (e.g. a placeholder's batch dimension);
// an unknown rank is represented by `Shape::unknown()`.
class Shape {
 public:
  // Scalar shape (rank 0, one element).
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  // A shape whose rank is not known.
  static Shape unknown() { Shape s; s.unknown_rank_ = true; return s; }

  bool unknown_rank() const { return unknown_rank_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[static_cast<size_t>(i)]; }
  void set_dim(int i, int64_t v) { dims_[static_cast<size_t>(i)] = v; }
  const std::vector<int64_t>& dims() const { return dims_; }
  // True when the rank and every dimension are known.
  bool fully_defined() const;
  // Product of the dims: 1 for scalars, 0 when a dim is 0 (however large the others); -1 when
  // not fully defined or when the product does not fit in int64 (it never wraps).
  int64_t num_elements() const;
  // The element count of a tensor of this shape: InvalidArgument "shape [..] is not fully
  // defined", "shape ... has rank 300, more than 254" or "shape [4611686018427387905,4] has more
  // than 2^60 elements" (the product of its non-zero dims is over kMaxTensorElements). Every
  // Tensor's shape passes this check (Tensor refuses others).
  Result<int64_t> checked_num_elements() const;
  // True when checked_num_elements() succeeds.
  bool valid_for_tensor() const;
  // "[2,3]", "[?,784]", "[]" for scalars, "<unknown>" for unknown rank.
  std::string to_string() const;
  // True when the two shapes could describe the same tensor (unknowns match anything).
  bool compatible_with(const Shape& other) const;

  bool operator==(const Shape& o) const { return unknown_rank_ == o.unknown_rank_ && dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  std::vector<int64_t> dims_;
  bool unknown_rank_ = false;
};

}  // namespace actorflow
