// Tensor: a typed, shaped view of a reference-counted buffer.
//
// Copying a Tensor copies the handle, not the bytes: both copies share the buffer
// (this is how tensors pass between actors of one process). Use deep_copy() for a
// private copy. The buffer is returned to its allocator when the last Tensor that
// references it is destroyed. A Tensor handle is not synchronised; concurrent reads of
// a shared buffer are safe, concurrent writes are the caller's business (kernels write
// only outputs they allocated).
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tensor/allocator.h"
#include "tensor/types.h"

namespace actorflow {

// Owns `size` bytes obtained from `allocator`; frees them on destruction.
class Buffer {
 public:
  // Takes ownership of `data` (from allocator->allocate(size)). `allocator` may be null
  // for memory owned elsewhere together with `release`.
  Buffer(Allocator* allocator, void* data, size_t size) : alloc_(allocator), data_(data), size_(size) {}
  ~Buffer() { if (alloc_ && data_) alloc_->deallocate(data_, size_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  Allocator* allocator() const { return alloc_; }

 private:
  Allocator* alloc_;
  void* data_;
  size_t size_;
};

class Tensor {
 public:
  // An empty, uninitialised tensor (dtype kInvalid). is_initialized() is false.
  Tensor() = default;
  // Allocates a host tensor of `dtype` and `shape` from cpu_host_pool(), zero-filled. Throws
  // std::length_error when `shape` is not a tensor's (not fully defined, or over the limits of
  // Shape::checked_num_elements) and std::bad_alloc if host memory is exhausted. For shapes a
  // peer chose use allocate(), which returns errors as values.
  Tensor(DType dtype, const Shape& shape);
  // Wraps an existing buffer. Throws std::length_error when `shape` is not a tensor's or a
  // non-null `buffer` is smaller than the bytes of dtype/shape (it never views past a buffer).
  Tensor(DType dtype, const Shape& shape, std::shared_ptr<Buffer> buffer);

  // Allocates from `allocator`; InvalidArgument when `shape` is not a tensor's (not fully
  // defined, rank over kMaxTensorRank, more than kMaxTensorElements elements: nothing is
  // requested then), ResourceExhausted (naming the allocator and the size) when the allocator
  // refuses. Memory is not initialised.
  static Result<Tensor> allocate(Allocator* allocator, DType dtype, const Shape& shape);

  // A host scalar holding `v`.
  template <typename T>
  static Tensor scalar(T v) {
    Tensor t(DTypeOf<T>::value, Shape{});
    *t.data<T>() = v;
    return t;
  }
  // A host tensor of `shape` holding `values` (row-major). Precondition: sizes agree.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
    Tensor t(DTypeOf<T>::value, shape);
    T* d = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) d[i] = values[i];
    return t;
  }

  bool is_initialized() const { return dtype_ != DType::kInvalid; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t num_elements() const { return shape_.num_elements(); }
  // Bytes of element data (num_elements * dtype_size).
  size_t bytes() const { return static_cast<size_t>(num_elements()) * dtype_size(dtype_); }

  // Pointer to the first element. Precondition: T matches dtype(). The pointer is valid while
  // any Tensor shares the buffer.
  template <typename T> T* data() { return static_cast<T*>(raw_data()); }
  template <typename T> const T* data() const { return static_cast<const T*>(raw_data()); }
  void* raw_data() const { return buf_ ? static_cast<char*>(buf_->data()) : nullptr; }
  const std::shared_ptr<Buffer>& buffer() const { return buf_; }
  bool shares_buffer_with(const Tensor& o) const { return buf_ && buf_ == o.buf_; }
  // True when the bytes live in host memory (always for CPU tensors).
  bool on_host() const { return !buf_ || !buf_->allocator() || buf_->allocator()->host_accessible(); }

  // The same buffer viewed with another shape of equal element count; InvalidArgument when the
  // counts differ or `shape` is not a tensor's (checked, never a wrapped product).
  Result<Tensor> reshaped(const Shape& shape) const;
  // A host copy with its own buffer. Precondition: on_host().
  Tensor deep_copy() const;

  // The values formatted as NumPy prints them, e.g. "[[22. 28.]\n [49. 64.]]". Host only;
  // tensors over 1000 elements are summarised with "...".
  std::string to_string() const;
  // "Tensor<type: float32 shape: [2,3]>".
  std::string debug_string() const;

  // Element-wise equality of dtype, shape and bytes (host tensors only).
  bool equals(const Tensor& o) const;
  // Same as equals(): value comparison (so Tensor can live in std::variant attribute values).
  bool operator==(const Tensor& o) const { return equals(o); }
  bool operator!=(const Tensor& o) const { return !equals(o); }

 private:
  DType dtype_ = DType::kInvalid;
  Shape shape_;
  std::shared_ptr<Buffer> buf_;
};

// False when `type` is bool and one of the `n` bytes at `p` is neither 0 nor 1 (a C++ bool may not
// hold another value: loading one is undefined behaviour); true otherwise. Every decoder of a
// peer's tensor bytes checks it (wire, GraphDef constants, checkpoints). Pure; thread-safe.
bool bool_bytes_valid(DType type, const void* p, size_t n);

}  // namespace actorflow
