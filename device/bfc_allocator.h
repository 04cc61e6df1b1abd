// BFCAllocator: a best-fit-with-coalescing allocator after TensorFlow's GPU allocator.
//
// Memory comes from a SubAllocator in big regions (cudaMalloc on a GPU, aligned host memory
// in tests) and is carved into chunks. Free chunks sit in size-class bins (bin i holds sizes
// in [256 << i, 256 << (i + 1))); an allocation takes the smallest free chunk that fits
// (best fit, lowest address on ties) and splits off the rest; a freed chunk merges with free
// neighbours of the same region (coalescing). When nothing fits, a new region is requested
// from the SubAllocator: with allow_growth the region sizes start small and double, up to
// memory_limit; without it the whole memory_limit is reserved once at creation and never
// grows. Regions are returned to the SubAllocator only when the BFCAllocator is destroyed.
//
// Thread-safety: all public methods are thread-safe (one mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tensor/allocator.h"

namespace actorflow {

// The source of big regions. Implementations must be thread-safe or be used by one
// BFCAllocator only (which serialises its calls under its mutex).
class SubAllocator {
 public:
  virtual ~SubAllocator() = default;
  // Returns `bytes` bytes aligned to at least `alignment` (a power of two >= 256), or
  // nullptr when the memory is not available. The caller owns the region until free().
  virtual void* alloc(size_t alignment, size_t bytes) = 0;
  // Returns a region obtained from alloc() with the same `bytes`.
  virtual void free(void* ptr, size_t bytes) = 0;
  // True when the regions are addressable by the host CPU.
  virtual bool host_accessible() const = 0;
};

// Host memory regions from std::aligned_alloc (used by the tests and host-side tools).
// Thread-safe.
class HostSubAllocator final : public SubAllocator {
 public:
  void* alloc(size_t alignment, size_t bytes) override;
  void free(void* ptr, size_t bytes) override;
  bool host_accessible() const override { return true; }
};

struct BFCOptions {
  // Hard cap on the bytes obtained from the SubAllocator (> 0). A request that cannot be met
  // within it returns nullptr.
  int64_t memory_limit = 0;
  // true: start with a region of initial_region_bytes and double the region size on each
  // growth, up to memory_limit. false: reserve memory_limit in one region at creation.
  bool allow_growth = true;
  // First region size with allow_growth (rounded up to 256 bytes; capped by memory_limit).
  int64_t initial_region_bytes = int64_t{2} << 20;
};

// Detailed counters of a BFCAllocator (a superset of AllocatorStats). Plain snapshot.
struct BFCStats {
  AllocatorStats base;                 // bytes_in_use counts whole chunks (rounded sizes)
  int64_t bytes_requested_in_use = 0;  // what callers asked for, summed over live allocations
  int64_t bytes_reserved = 0;          // region bytes obtained from the SubAllocator
  int64_t num_regions = 0;
  int64_t num_free_chunks = 0;
  int64_t largest_free_chunk = 0;
  int64_t num_failed_allocs = 0;       // requests that returned nullptr
};

class BFCAllocator final : public Allocator {
 public:
  // Smallest chunk size and the granularity of every chunk (bytes).
  static constexpr size_t kMinAllocationSize = 256;
  static constexpr int kNumBins = 21;

  // Creates an allocator named `name` over `sub` (owned). Without allow_growth the whole
  // memory_limit is reserved here; ResourceExhausted if the SubAllocator refuses it.
  // InvalidArgument when memory_limit <= 0.
  static Result<std::unique_ptr<BFCAllocator>> create(std::unique_ptr<SubAllocator> sub, const std::string& name,
                                                      const BFCOptions& options);
  // Returns every region to the SubAllocator. Live allocations become dangling: destroy the
  // allocator only after every tensor it produced (a leak is logged as a warning).
  ~BFCAllocator() override;

  std::string name() const override { return name_; }
  // Best-fit allocation of `bytes` (rounded up to 256) at `alignment` (a power of two; any
  // value up to 256 is free, larger ones may split off an aligned prefix). nullptr when the
  // request cannot be met within memory_limit. allocate(0) returns a distinct 256-byte chunk.
  void* allocate(size_t bytes, size_t alignment = 64) override;
  // Frees a pointer from allocate() and merges it with free neighbours. `bytes` is ignored
  // (the chunk knows its size); an unknown pointer is logged and ignored.
  void deallocate(void* ptr, size_t bytes) override;
  AllocatorStats stats() const override;
  bool host_accessible() const override { return host_accessible_; }

  // All counters, including region and fragmentation figures.
  BFCStats bfc_stats() const;
  // "limit 1.0MiB, reserved 512.0KiB in 2 regions, in use 300.0KiB in 3 chunks, largest free
  // chunk 200.0KiB" — for out-of-memory messages.
  std::string summary() const;
  // Verifies the internal invariants (chunks tile each region, no two adjacent free chunks,
  // bins hold exactly the free chunks, counters agree). Internal error naming the first
  // violation. O(chunks); for tests.
  Status check_invariants() const;
  // The rounded chunk size that allocate(bytes) uses.
  static size_t rounded_bytes(size_t bytes);
  const BFCOptions& options() const { return options_; }

 private:
  using ChunkHandle = int64_t;
  static constexpr ChunkHandle kInvalidChunk = -1;

  struct Chunk {
    char* ptr = nullptr;
    size_t size = 0;
    size_t requested = 0;  // 0 when free
    bool in_use = false;
    ChunkHandle prev = kInvalidChunk, next = kInvalidChunk;  // neighbours in the same region
    int bin = -1;                                            // -1 when not in a bin
  };
  struct Region {
    char* ptr;
    size_t size;
  };
  struct BinOrder {
    const BFCAllocator* self;
    bool operator()(ChunkHandle a, ChunkHandle b) const;
  };

  BFCAllocator(std::unique_ptr<SubAllocator> sub, std::string name, const BFCOptions& options);

  static int bin_for_size(size_t size);
  void* allocate_locked(size_t rounded, size_t requested, size_t alignment);
  void* find_chunk_locked(size_t rounded, size_t requested, size_t alignment);
  bool extend_locked(size_t needed);
  ChunkHandle new_chunk_locked();
  void delete_chunk_locked(ChunkHandle h);
  void insert_free_locked(ChunkHandle h);
  void remove_free_locked(ChunkHandle h);
  // Splits h so that it keeps `size` bytes; the remainder becomes a new free chunk.
  void split_locked(ChunkHandle h, size_t size);
  // Merges free chunk h with its free neighbours (h must not be in a bin).
  ChunkHandle coalesce_locked(ChunkHandle h);
  size_t largest_free_locked() const;

  const std::unique_ptr<SubAllocator> sub_;
  const std::string name_;
  const BFCOptions options_;
  const bool host_accessible_;

  mutable std::mutex mu_;
  std::vector<Chunk> chunks_;
  std::vector<ChunkHandle> free_handles_;
  std::vector<std::set<ChunkHandle, BinOrder>> bins_;
  std::unordered_map<const void*, ChunkHandle> in_use_;  // user pointer -> chunk
  std::vector<Region> regions_;
  size_t reserved_ = 0;
  size_t next_region_bytes_ = 0;
  AllocatorStats stats_;
  int64_t requested_in_use_ = 0;
  int64_t failed_allocs_ = 0;
};

// "1.5MiB", "300.0KiB", "12B": a byte count for messages.
std::string human_bytes(int64_t bytes);

}  // namespace actorflow
