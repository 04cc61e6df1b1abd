#include "device/bfc_allocator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/logging.h"

namespace actorflow {

void* HostSubAllocator::alloc(size_t alignment, size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  return std::aligned_alloc(alignment, rounded);
}

void HostSubAllocator::free(void* ptr, size_t) { std::free(ptr); }

std::string human_bytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1fGiB", b / (1 << 30));
  else if (bytes >= (int64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1fMiB", b / (1 << 20));
  else if (bytes >= (int64_t{1} << 10))
    std::snprintf(buf, sizeof buf, "%.1fKiB", b / (1 << 10));
  else
    std::snprintf(buf, sizeof buf, "%lldB", static_cast<long long>(bytes));
  return buf;
}

bool BFCAllocator::BinOrder::operator()(ChunkHandle a, ChunkHandle b) const {
  const Chunk& ca = self->chunks_[static_cast<size_t>(a)];
  const Chunk& cb = self->chunks_[static_cast<size_t>(b)];
  if (ca.size != cb.size) return ca.size < cb.size;
  return ca.ptr < cb.ptr;
}

size_t BFCAllocator::rounded_bytes(size_t bytes) {
  if (bytes == 0) return kMinAllocationSize;
  return (bytes + kMinAllocationSize - 1) / kMinAllocationSize * kMinAllocationSize;
}

int BFCAllocator::bin_for_size(size_t size) {
  size_t units = size / kMinAllocationSize;  // >= 1
  int b = 0;
  while (units > 1 && b < kNumBins - 1) {
    units >>= 1;
    ++b;
  }
  return b;
}

BFCAllocator::BFCAllocator(std::unique_ptr<SubAllocator> sub, std::string name, const BFCOptions& options)
    : sub_(std::move(sub)), name_(std::move(name)), options_(options), host_accessible_(sub_->host_accessible()) {
  bins_.reserve(kNumBins);
  for (int i = 0; i < kNumBins; ++i) bins_.emplace_back(BinOrder{this});
  stats_.bytes_limit = options_.memory_limit;
  if (options_.allow_growth) {
    int64_t first = std::max<int64_t>(options_.initial_region_bytes, kMinAllocationSize);
    next_region_bytes_ = rounded_bytes(static_cast<size_t>(std::min(first, options_.memory_limit)));
  } else {
    next_region_bytes_ = static_cast<size_t>(options_.memory_limit);
  }
}

Result<std::unique_ptr<BFCAllocator>> BFCAllocator::create(std::unique_ptr<SubAllocator> sub,
                                                           const std::string& name, const BFCOptions& options) {
  if (!sub) return InvalidArgument("allocator '" + name + "': no sub-allocator");
  if (options.memory_limit < static_cast<int64_t>(kMinAllocationSize))
    return InvalidArgument("allocator '" + name + "': memory_limit must be at least 256 bytes, got " +
                           std::to_string(options.memory_limit));
  BFCOptions o = options;
  o.memory_limit = o.memory_limit / static_cast<int64_t>(kMinAllocationSize) * static_cast<int64_t>(kMinAllocationSize);
  std::unique_ptr<BFCAllocator> a(new BFCAllocator(std::move(sub), name, o));
  if (!o.allow_growth) {
    std::lock_guard<std::mutex> lock(a->mu_);
    if (!a->extend_locked(static_cast<size_t>(o.memory_limit)))
      return ResourceExhausted("allocator '" + name + "': could not reserve " + human_bytes(o.memory_limit) + " (" +
                               std::to_string(o.memory_limit) + " bytes) up front");
  }
  return a;
}

BFCAllocator::~BFCAllocator() {
  if (!in_use_.empty()) {
    AF_LOG(WARNING) << "allocator '" << name_ << "' destroyed with " << in_use_.size() << " live allocations ("
                    << stats_.bytes_in_use << " bytes)";
  }
  for (const Region& r : regions_) sub_->free(r.ptr, r.size);
}

BFCAllocator::ChunkHandle BFCAllocator::new_chunk_locked() {
  if (!free_handles_.empty()) {
    ChunkHandle h = free_handles_.back();
    free_handles_.pop_back();
    chunks_[static_cast<size_t>(h)] = Chunk{};
    return h;
  }
  chunks_.emplace_back();
  return static_cast<ChunkHandle>(chunks_.size() - 1);
}

void BFCAllocator::delete_chunk_locked(ChunkHandle h) {
  chunks_[static_cast<size_t>(h)] = Chunk{};
  free_handles_.push_back(h);
}

void BFCAllocator::insert_free_locked(ChunkHandle h) {
  Chunk& c = chunks_[static_cast<size_t>(h)];
  c.bin = bin_for_size(c.size);
  bins_[static_cast<size_t>(c.bin)].insert(h);
}

void BFCAllocator::remove_free_locked(ChunkHandle h) {
  Chunk& c = chunks_[static_cast<size_t>(h)];
  bins_[static_cast<size_t>(c.bin)].erase(h);
  c.bin = -1;
}

void BFCAllocator::split_locked(ChunkHandle h, size_t size) {
  ChunkHandle nh = new_chunk_locked();  // may reallocate chunks_: index afresh below
  Chunk& c = chunks_[static_cast<size_t>(h)];
  Chunk& n = chunks_[static_cast<size_t>(nh)];
  n.ptr = c.ptr + size;
  n.size = c.size - size;
  n.prev = h;
  n.next = c.next;
  if (c.next != kInvalidChunk) chunks_[static_cast<size_t>(c.next)].prev = nh;
  c.next = nh;
  c.size = size;
  insert_free_locked(nh);
}

BFCAllocator::ChunkHandle BFCAllocator::coalesce_locked(ChunkHandle h) {
  // Merge the next chunk into h.
  ChunkHandle nx = chunks_[static_cast<size_t>(h)].next;
  if (nx != kInvalidChunk && !chunks_[static_cast<size_t>(nx)].in_use) {
    remove_free_locked(nx);
    Chunk& c = chunks_[static_cast<size_t>(h)];
    Chunk& n = chunks_[static_cast<size_t>(nx)];
    c.size += n.size;
    c.next = n.next;
    if (n.next != kInvalidChunk) chunks_[static_cast<size_t>(n.next)].prev = h;
    delete_chunk_locked(nx);
  }
  // Merge h into the previous chunk.
  ChunkHandle pv = chunks_[static_cast<size_t>(h)].prev;
  if (pv != kInvalidChunk && !chunks_[static_cast<size_t>(pv)].in_use) {
    remove_free_locked(pv);
    Chunk& p = chunks_[static_cast<size_t>(pv)];
    Chunk& c = chunks_[static_cast<size_t>(h)];
    p.size += c.size;
    p.next = c.next;
    if (c.next != kInvalidChunk) chunks_[static_cast<size_t>(c.next)].prev = pv;
    delete_chunk_locked(h);
    h = pv;
  }
  return h;
}

void* BFCAllocator::find_chunk_locked(size_t rounded, size_t requested, size_t alignment) {
  for (int b = bin_for_size(rounded); b < kNumBins; ++b) {
    for (ChunkHandle h : bins_[static_cast<size_t>(b)]) {
      const Chunk& c = chunks_[static_cast<size_t>(h)];
      if (c.size < rounded) continue;
      const uintptr_t addr = reinterpret_cast<uintptr_t>(c.ptr);
      const size_t pad = static_cast<size_t>(((addr + alignment - 1) & ~(uintptr_t{alignment} - 1)) - addr);
      if (c.size < rounded + pad) continue;
      remove_free_locked(h);
      if (pad > 0) {
        // Keep the unaligned prefix free; allocate from the aligned remainder.
        split_locked(h, pad);
        remove_free_locked(chunks_[static_cast<size_t>(h)].next);
        ChunkHandle rest = chunks_[static_cast<size_t>(h)].next;
        insert_free_locked(h);
        h = rest;
      }
      if (chunks_[static_cast<size_t>(h)].size >= rounded + kMinAllocationSize) split_locked(h, rounded);
      Chunk& a = chunks_[static_cast<size_t>(h)];
      a.in_use = true;
      a.requested = requested;
      in_use_[a.ptr] = h;
      stats_.num_allocs++;
      stats_.bytes_in_use += static_cast<int64_t>(a.size);
      stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
      stats_.largest_alloc = std::max(stats_.largest_alloc, static_cast<int64_t>(a.size));
      requested_in_use_ += static_cast<int64_t>(requested);
      return a.ptr;
    }
  }
  return nullptr;
}

bool BFCAllocator::extend_locked(size_t needed) {
  const size_t limit = static_cast<size_t>(options_.memory_limit);
  const size_t available = limit > reserved_ ? limit - reserved_ : 0;
  if (needed > available) return false;
  size_t bytes = std::max<size_t>(next_region_bytes_, kMinAllocationSize);
  while (bytes < needed) bytes *= 2;
  bytes = std::min(bytes, available);
  void* p = sub_->alloc(kMinAllocationSize, bytes);
  // The device may hold less than the limit promises: back off towards the request.
  while (!p && bytes > needed) {
    bytes = std::max(needed, rounded_bytes(bytes / 10 * 9) - kMinAllocationSize);
    p = sub_->alloc(kMinAllocationSize, bytes);
  }
  if (!p) return false;
  if (options_.allow_growth && bytes >= next_region_bytes_) next_region_bytes_ = bytes * 2;
  regions_.push_back(Region{static_cast<char*>(p), bytes});
  reserved_ += bytes;
  ChunkHandle h = new_chunk_locked();
  Chunk& c = chunks_[static_cast<size_t>(h)];
  c.ptr = static_cast<char*>(p);
  c.size = bytes;
  insert_free_locked(h);
  return true;
}

void* BFCAllocator::allocate_locked(size_t rounded, size_t requested, size_t alignment) {
  if (void* p = find_chunk_locked(rounded, requested, alignment)) return p;
  const size_t worst_pad = alignment > kMinAllocationSize ? alignment - kMinAllocationSize : 0;
  if (extend_locked(rounded + worst_pad)) {
    if (void* p = find_chunk_locked(rounded, requested, alignment)) return p;
  }
  return nullptr;
}

void* BFCAllocator::allocate(size_t bytes, size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) return nullptr;  // not a power of two
  if (alignment < kMinAllocationSize) alignment = kMinAllocationSize;
  if (bytes > static_cast<size_t>(options_.memory_limit)) {
    std::lock_guard<std::mutex> lock(mu_);
    failed_allocs_++;
    return nullptr;
  }
  const size_t rounded = rounded_bytes(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = allocate_locked(rounded, bytes, alignment);
  if (!p) failed_allocs_++;
  return p;
}

void BFCAllocator::deallocate(void* ptr, size_t) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find(ptr);
  if (it == in_use_.end()) {
    AF_LOG(ERROR) << "allocator '" << name_ << "': deallocate of unknown pointer " << ptr << " ignored";
    return;
  }
  ChunkHandle h = it->second;
  in_use_.erase(it);
  Chunk& c = chunks_[static_cast<size_t>(h)];
  stats_.bytes_in_use -= static_cast<int64_t>(c.size);
  requested_in_use_ -= static_cast<int64_t>(c.requested);
  c.in_use = false;
  c.requested = 0;
  h = coalesce_locked(h);
  insert_free_locked(h);
}

AllocatorStats BFCAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

size_t BFCAllocator::largest_free_locked() const {
  for (int b = kNumBins - 1; b >= 0; --b) {
    const auto& bin = bins_[static_cast<size_t>(b)];
    if (!bin.empty()) return chunks_[static_cast<size_t>(*bin.rbegin())].size;
  }
  return 0;
}

BFCStats BFCAllocator::bfc_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  BFCStats s;
  s.base = stats_;
  s.bytes_requested_in_use = requested_in_use_;
  s.bytes_reserved = static_cast<int64_t>(reserved_);
  s.num_regions = static_cast<int64_t>(regions_.size());
  for (const auto& bin : bins_) s.num_free_chunks += static_cast<int64_t>(bin.size());
  s.largest_free_chunk = static_cast<int64_t>(largest_free_locked());
  s.num_failed_allocs = failed_allocs_;
  return s;
}

std::string BFCAllocator::summary() const {
  BFCStats s = bfc_stats();
  return "limit " + human_bytes(s.base.bytes_limit) + " (" + std::to_string(s.base.bytes_limit) + " bytes), reserved " +
         human_bytes(s.bytes_reserved) + " in " + std::to_string(s.num_regions) + " region(s), in use " +
         human_bytes(s.base.bytes_in_use) + ", largest free chunk " + human_bytes(s.largest_free_chunk) +
         (options_.allow_growth ? ", allow_growth" : ", reserved up front");
}

Status BFCAllocator::check_invariants() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto fail = [&](const std::string& m) { return Internal("allocator '" + name_ + "' invariant: " + m); };
  size_t reserved = 0, in_use_bytes = 0, in_use_count = 0, free_count = 0;
  int64_t requested = 0;
  // Map each region start to its first chunk.
  std::unordered_map<const char*, ChunkHandle> firsts;
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const Chunk& c = chunks_[i];
    if (c.ptr != nullptr && c.prev == kInvalidChunk) firsts[c.ptr] = static_cast<ChunkHandle>(i);
  }
  for (const Region& r : regions_) {
    reserved += r.size;
    auto f = firsts.find(r.ptr);
    if (f == firsts.end()) return fail("region without a first chunk");
    size_t covered = 0;
    ChunkHandle prev = kInvalidChunk;
    bool prev_free = false;
    for (ChunkHandle h = f->second; h != kInvalidChunk; h = chunks_[static_cast<size_t>(h)].next) {
      const Chunk& c = chunks_[static_cast<size_t>(h)];
      if (c.prev != prev) return fail("broken prev link");
      if (c.ptr != r.ptr + covered) return fail("chunks do not tile their region");
      if (c.size == 0 || c.size % kMinAllocationSize != 0) return fail("chunk size not a multiple of 256");
      covered += c.size;
      if (c.in_use) {
        if (c.bin != -1) return fail("in-use chunk in a bin");
        auto it = in_use_.find(c.ptr);
        if (it == in_use_.end() || it->second != h) return fail("in-use chunk missing from the pointer map");
        if (c.requested > c.size) return fail("requested bytes exceed chunk size");
        in_use_bytes += c.size;
        requested += static_cast<int64_t>(c.requested);
        ++in_use_count;
        prev_free = false;
      } else {
        if (prev_free) return fail("two adjacent free chunks (not coalesced)");
        if (c.bin != bin_for_size(c.size)) return fail("free chunk in the wrong bin");
        if (!bins_[static_cast<size_t>(c.bin)].count(h)) return fail("free chunk missing from its bin");
        ++free_count;
        prev_free = true;
      }
      prev = h;
    }
    if (covered != r.size) return fail("chunks cover " + std::to_string(covered) + " of a region of " +
                                       std::to_string(r.size) + " bytes");
  }
  size_t binned = 0;
  for (const auto& bin : bins_) binned += bin.size();
  if (binned != free_count) return fail("bins hold chunks outside every region");
  if (in_use_count != in_use_.size()) return fail("pointer map size disagrees with in-use chunks");
  if (reserved != reserved_) return fail("reserved bytes disagree");
  if (reserved_ > static_cast<size_t>(options_.memory_limit)) return fail("reserved beyond memory_limit");
  if (static_cast<int64_t>(in_use_bytes) != stats_.bytes_in_use) return fail("bytes_in_use disagrees");
  if (requested != requested_in_use_) return fail("requested bytes disagree");
  return Status::OK();
}

}  // namespace actorflow
