// The cache of oneDNN primitives that every oneDNN-backed CPU kernel keeps (device/cpu/nn_kernels.cc).
//
// Creating a oneDNN primitive descriptor and primitive costs far more than running a small
// primitive, and a kernel instance runs every step, usually with the same input shapes (the
// batch dimension may change between steps). So each kernel keeps the primitives it built,
// keyed by the input shapes they were built for, in one DnnlPrimitiveCache.
//
// This header is internal to the CPU kernels and depends on nothing but the standard library
// (an Entry holds the oneDNN objects; the cache never looks inside it).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <utility>

namespace actorflow {

// A bounded, thread-safe map from Key to Entry for one kernel instance.
//
// Key: a copyable value with operator<, naming the shapes an Entry was built for (e.g.
// std::array<int64_t, N> of dimensions). Entry: a movable bundle of primitive descriptors,
// primitives and whatever per-shape state goes with them (lazily built reorders). The cache
// owns its entries.
//
// Bound: at most kCapacity entries. A miss that finds the cache full drops every entry before
// building the new one, so shapes that keep changing cost rebuilds, never unbounded memory.
//
// Thread-safety: with() holds the cache's mutex while it finds or builds the entry and for the
// whole of `use`, so concurrent calls on one cache run one at a time. State the kernel touches
// only inside `use` (scratchpads, reorder buffers) is guarded by the same mutex. Calling with()
// again on the same cache from inside `make` or `use` deadlocks.
template <class Key, class Entry, std::size_t kCapacity = 16>
class DnnlPrimitiveCache {
 public:
  static_assert(kCapacity >= 1, "a primitive cache holds at least one entry");

  // Finds the entry for `key`, building it with `make()` (which returns an Entry) on a miss,
  // and returns `use(entry)`. The Entry& given to `use` is valid only during that call (a later
  // miss may drop it). Exceptions from `make` or `use` (dnnl::error, std::bad_alloc) propagate;
  // a `make` that throws leaves no entry for `key`.
  template <class Make, class Use>
  auto with(const Key& key, Make&& make, Use&& use) -> decltype(use(std::declval<Entry&>())) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      if (entries_.size() >= kCapacity) entries_.clear();
      it = entries_.emplace(key, make()).first;
    }
    return use(it->second);
  }

  // How many entries the cache holds now (at most kCapacity). Thread-safe.
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_.size();
  }

 private:
  mutable std::mutex mu_;
  std::map<Key, Entry> entries_;
};

}  // namespace actorflow
