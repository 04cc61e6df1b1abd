#include "tensor/allocator.h"

#include <atomic>
#include <cstdlib>

#include "core/checked_math.h"

namespace actorflow {
namespace {

class CpuAllocator final : public Allocator {
 public:
  std::string name() const override { return "cpu"; }

  void* allocate(size_t bytes, size_t alignment) override {
    if (alignment < sizeof(void*)) alignment = sizeof(void*);
    size_t rounded;
    if (!checked_round_up(bytes, alignment, &rounded)) return nullptr;  // no size wraps to a small one
    if (rounded == 0) rounded = alignment;
    void* p = std::aligned_alloc(alignment, rounded);
    if (!p) return nullptr;
    num_allocs_.fetch_add(1, std::memory_order_relaxed);
    int64_t now = in_use_.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed) +
                  static_cast<int64_t>(bytes);
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    int64_t largest = largest_.load(std::memory_order_relaxed);
    while (static_cast<int64_t>(bytes) > largest &&
           !largest_.compare_exchange_weak(largest, static_cast<int64_t>(bytes),
                                           std::memory_order_relaxed)) {
    }
    return p;
  }

  void deallocate(void* ptr, size_t bytes) override {
    if (!ptr) return;
    in_use_.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
    std::free(ptr);
  }

  AllocatorStats stats() const override {
    AllocatorStats s;
    s.num_allocs = num_allocs_.load();
    s.bytes_in_use = in_use_.load();
    s.peak_bytes_in_use = peak_.load();
    s.largest_alloc = largest_.load();
    return s;
  }

 private:
  std::atomic<int64_t> num_allocs_{0}, in_use_{0}, peak_{0}, largest_{0};
};

}  // namespace

Allocator* cpu_allocator() {
  static CpuAllocator* a = new CpuAllocator();  // intentionally leaked: outlives all tensors
  return a;
}

}  // namespace actorflow
