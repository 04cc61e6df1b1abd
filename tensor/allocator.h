// Allocator interface and the process-wide CPU allocator.
//
// Device allocators (device/) implement this interface; Tensor buffers remember the
// allocator that produced them and return memory to it when the last reference dies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace actorflow {

// Usage counters of an allocator. Plain snapshot values.
struct AllocatorStats {
  int64_t num_allocs = 0;
  int64_t bytes_in_use = 0;
  int64_t peak_bytes_in_use = 0;
  int64_t largest_alloc = 0;
  int64_t bytes_limit = 0;  // 0 = unlimited
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // A short name for messages, e.g. "cpu" or "gpu_0_bfc".
  virtual std::string name() const = 0;
  // Returns `bytes` bytes aligned to `alignment` (a power of two), or nullptr when the
  // request cannot be met. The caller owns the memory until deallocate(). Thread-safe.
  virtual void* allocate(size_t bytes, size_t alignment = 64) = 0;
  // Returns memory obtained from allocate() with the same `bytes`. Thread-safe.
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  // A snapshot of the counters. Thread-safe.
  virtual AllocatorStats stats() const { return {}; }
  // True when the memory is addressable by the host CPU.
  virtual bool host_accessible() const { return true; }
};

// The process-wide host allocator (64-byte aligned). Never null; lives for the whole
// process. Thread-safe.
Allocator* cpu_allocator();

}  // namespace actorflow
