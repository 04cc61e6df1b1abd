#include "tensor/pooling_allocator.h"

namespace actorflow {

PoolingAllocator::PoolingAllocator(Allocator* base, size_t min_pooled_bytes, size_t max_cached_bytes)
    : base_(base), min_pooled_(min_pooled_bytes), max_cached_(max_cached_bytes) {}

PoolingAllocator::~PoolingAllocator() {
  for (auto& [bytes, blocks] : free_)
    for (auto& b : blocks) base_->deallocate(b.ptr, bytes);
}

void* PoolingAllocator::allocate(size_t bytes, size_t alignment) {
  if (bytes < min_pooled_) return base_->allocate(bytes, alignment);
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = free_.find(bytes);
    if (it != free_.end()) {
      auto& blocks = it->second;
      for (size_t i = blocks.size(); i-- > 0;) {
        if (blocks[i].alignment % alignment != 0) continue;
        Block b = blocks[i];
        blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
        if (blocks.empty()) free_.erase(it);
        stats_.cached_bytes -= bytes;
        ++stats_.hits;
        alignment_of_[b.ptr] = b.alignment;
        return b.ptr;
      }
    }
    ++stats_.misses;
  }
  void* p = base_->allocate(bytes, alignment);
  if (p) {
    std::lock_guard<std::mutex> l(mu_);
    alignment_of_[p] = alignment;
  }
  return p;
}

void PoolingAllocator::deallocate(void* ptr, size_t bytes) {
  if (!ptr) return;
  if (bytes < min_pooled_) return base_->deallocate(ptr, bytes);
  std::vector<std::pair<void*, size_t>> evicted;  // freed outside the lock (munmap is slow)
  bool cached = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    size_t alignment = 64;
    auto a = alignment_of_.find(ptr);
    if (a != alignment_of_.end()) {
      alignment = a->second;
      alignment_of_.erase(a);
    }
    if (bytes <= max_cached_) {
      // Make room by evicting the least recently cached blocks (sizes a workload stopped
      // using must not pin the cache forever).
      while (stats_.cached_bytes + bytes > max_cached_ && !free_.empty()) {
        auto oldest = free_.end();
        size_t at = 0;
        for (auto it = free_.begin(); it != free_.end(); ++it)
          for (size_t i = 0; i < it->second.size(); ++i)
            if (oldest == free_.end() || it->second[i].seq < oldest->second[at].seq) {
              oldest = it;
              at = i;
            }
        evicted.emplace_back(oldest->second[at].ptr, oldest->first);
        stats_.cached_bytes -= oldest->first;
        ++stats_.evictions;
        oldest->second.erase(oldest->second.begin() + static_cast<std::ptrdiff_t>(at));
        if (oldest->second.empty()) free_.erase(oldest);
      }
      free_[bytes].push_back(Block{ptr, alignment, ++seq_});
      stats_.cached_bytes += bytes;
      cached = true;
    }
  }
  for (auto& [p, n] : evicted) base_->deallocate(p, n);
  if (!cached) base_->deallocate(ptr, bytes);
}

PoolingAllocator::PoolStats PoolingAllocator::pool_stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

PoolingAllocator* cpu_host_pool() {
  static PoolingAllocator* p = new PoolingAllocator(cpu_allocator());  // leaked: outlives all tensors
  return p;
}

}  // namespace actorflow
