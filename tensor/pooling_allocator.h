// PoolingAllocator: keeps large freed blocks for reuse instead of returning them.
//
// glibc serves large allocations with fresh mmap()s and unmaps them on free, so a receiver
// that gets a 64 MiB tensor per message page-faults through 16384 new pages every time (that
// halved the data plane's throughput for 64 MiB tensors). This allocator caches blocks of at
// least `min_pooled_bytes` by exact size, up to `max_cached_bytes` in total (beyond that a freed
// block goes back to the base allocator), so a steady stream of same-sized tensors reuses warm,
// mapped memory; when a freed block does not fit, the least recently cached blocks are evicted
// (returned to the base) to make room, so sizes a workload stopped using do not pin the cache.
// Smaller blocks pass straight through.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tensor/allocator.h"

namespace actorflow {

class PoolingAllocator final : public Allocator {
 public:
  // `base` (borrowed, must outlive this allocator and every block it handed out) provides the
  // memory.
  PoolingAllocator(Allocator* base, size_t min_pooled_bytes = size_t{1} << 20,
                   size_t max_cached_bytes = size_t{256} << 20);
  // Returns the cached blocks to `base`.
  ~PoolingAllocator() override;
  PoolingAllocator(const PoolingAllocator&) = delete;
  PoolingAllocator& operator=(const PoolingAllocator&) = delete;

  std::string name() const override { return "pool(" + base_->name() + ")"; }
  // A cached block of exactly `bytes` (alignment permitting) when there is one, else new memory
  // from `base`. Thread-safe.
  void* allocate(size_t bytes, size_t alignment = 64) override;
  // Caches the block when it is large and not over the bound itself (evicting the least recently
  // cached blocks while the cache would exceed the bound), else frees it. Thread-safe.
  void deallocate(void* ptr, size_t bytes) override;
  // The base's counters (cached blocks count as in use there). Thread-safe.
  AllocatorStats stats() const override { return base_->stats(); }
  bool host_accessible() const override { return base_->host_accessible(); }

  // Reuse counters, for tests and benchmarks. Thread-safe.
  struct PoolStats {
    int64_t hits = 0;          // allocations served from the cache
    int64_t misses = 0;        // large allocations that needed new memory
    size_t cached_bytes = 0;   // bytes held in the cache now
    int64_t evictions = 0;     // cached blocks returned to the base to make room
  };
  PoolStats pool_stats() const;

 private:
  struct Block {
    void* ptr;
    size_t alignment;
    uint64_t seq;  // when it was cached: the smallest is evicted first
  };
  Allocator* base_;
  const size_t min_pooled_;
  const size_t max_cached_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<Block>> free_;  // by size
  std::map<void*, size_t> alignment_of_;       // alignment each live large block was asked with
  PoolStats stats_;
  uint64_t seq_ = 0;
};

// The process-wide pool over cpu_allocator() (blocks of >= 1 MiB, at most 256 MiB cached) that
// host tensors come from: the CPU device's kernel outputs, received tensors, and
// Tensor(dtype, shape). Never null; lives for the whole process. Thread-safe.
PoolingAllocator* cpu_host_pool();

}  // namespace actorflow
