// An in-memory input pipeline in the spirit of tf.data, and a background prefetcher.
//
//   auto ds = Dataset::from_tensors({images, labels})   // slices along dim 0 (tf's from_tensor_slices)
//                 .shuffle(Dataset::kFullBuffer, /*seed=*/42)
//                 .repeat()
//                 .batch(50);
//   AF_ASSIGN_OR_RETURN(DatasetIterator it, ds.make_iterator());
//   AF_ASSIGN_OR_RETURN(auto batch, it.next());        // std::optional<std::vector<Tensor>>
//
// Implementation: every transformation works on row indices into the source tensors, moved in
// chunks between stages (no per-element virtual calls); the final batch is gathered with one
// memcpy per run of consecutive rows into freshly allocated tensors. Transformations may come in
// any order (shuffle before repeat reshuffles per epoch, repeat before batch makes batches that
// span epochs, batch before repeat/shuffle/take works on whole batches), except that batch() may
// appear only once.
//
// Errors in arguments (batch(0), shard index out of range, mismatched first dimensions) are
// recorded in the Dataset and returned by status() and make_iterator(); transformations applied
// to an errored Dataset keep the first error.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/status.h"
#include "tensor/tensor.h"

namespace actorflow {

class DatasetIterator;

namespace detail {
class IndexStage;
}  // namespace detail

// An immutable description of a pipeline over in-memory tensors. Copies are cheap (the source
// tensors are shared, never copied) and a Dataset may be used from several threads at once;
// each iterator made from it is independent.
class Dataset {
 public:
  // shuffle(kFullBuffer, seed): the buffer holds the whole input, a uniform permutation per epoch.
  static constexpr int64_t kFullBuffer = -1;
  // repeat(kInfinite) repeats forever; cardinality() returns kInfinite for infinite datasets.
  static constexpr int64_t kInfinite = -1;

  // An errored empty dataset (status() is FailedPrecondition); use from_tensors().
  Dataset();

  // Element i is {components[0][i], components[1][i], ...}: every component is sliced along its
  // first dimension, which must be the same for all. Components must be initialised host tensors
  // of rank >= 1. The Dataset shares (does not copy) their buffers; callers must not write to them
  // while iterators are alive.
  static Dataset from_tensors(std::vector<Tensor> components);

  // Randomly shuffles elements with a buffer of `buffer_size` elements (tf.data's algorithm: fill
  // the buffer, then repeatedly emit a uniformly chosen buffered element and replace it with the
  // next input), or the whole input with kFullBuffer. The order depends only on `seed` and on the
  // epoch: with reshuffle_each_iteration, the k-th (re)start of this stage (by repeat(), or k = 0
  // for a fresh iterator) uses a seed derived from (seed, k), so every epoch has a different order
  // and the sequence is reproducible. Without it, every epoch repeats epoch 0's order.
  Dataset shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration = true) const;

  // Repeats the input `count` times (kInfinite: forever). An input with no elements ends at once.
  Dataset repeat(int64_t count = kInfinite) const;

  // Combines `batch_size` consecutive elements into one whose components have a new leading
  // dimension. The last batch may be smaller unless `drop_remainder`. Only one batch() per pipeline.
  Dataset batch(int64_t batch_size, bool drop_remainder = false) const;

  // Keeps elements whose position p satisfies p % num_shards == index (tf.data's shard). The
  // shards for index 0..num_shards-1 are disjoint and together cover the input. Apply before
  // shuffle/repeat for per-worker partitions of the data.
  Dataset shard(int64_t num_shards, int64_t index) const;

  // The first `count` elements (kInfinite: all).
  Dataset take(int64_t count) const;
  // All but the first `count` elements (kInfinite: none).
  Dataset skip(int64_t count) const;

  // OK, or the first error made while building this pipeline.
  const Status& status() const { return status_; }
  // Number of elements an iterator yields, or kInfinite. 0 for an errored dataset.
  int64_t cardinality() const;
  // Number of tensors per element.
  size_t num_components() const { return components_ ? components_->size() : 0; }

  // A fresh iterator positioned at the first element; the error from status() if any, or
  // InvalidArgument for a full-buffer shuffle of an infinite input.
  Result<DatasetIterator> make_iterator() const;

 private:
  enum class OpKind { kShuffle, kRepeat, kBatch, kShard, kTake, kSkip };
  struct Op {
    OpKind kind;
    int64_t a = 0;  // buffer_size / count / batch_size / num_shards
    int64_t b = 0;  // shard index
    uint64_t seed = 0;
    bool flag = false;  // reshuffle_each_iteration / drop_remainder
  };
  Dataset with_op(Op op, Status error) const;

  std::shared_ptr<const std::vector<Tensor>> components_;
  std::vector<Op> ops_;
  Status status_;
};

// Yields a Dataset's elements in order. Move-only; not thread-safe (one consumer at a time; wrap
// it in a Prefetcher to run it on a background thread).
class DatasetIterator {
 public:
  DatasetIterator(DatasetIterator&&) noexcept;
  DatasetIterator& operator=(DatasetIterator&&) noexcept;
  ~DatasetIterator();

  // The next element (one tensor per component, freshly allocated and owned by the caller), or
  // nullopt at the end (and on every later call). ResourceExhausted if host memory runs out.
  Result<std::optional<std::vector<Tensor>>> next();

 private:
  friend class Dataset;
  DatasetIterator() = default;

  std::shared_ptr<const std::vector<Tensor>> components_;
  std::unique_ptr<detail::IndexStage> root_;
  size_t group_ = 1;     // indices per output element
  bool batched_ = false;  // outputs get a leading batch dimension
  bool ended_ = false;
  std::vector<int64_t> scratch_;
};

// Runs a producer (typically DatasetIterator::next) on a background thread, keeping up to `depth`
// finished elements in a bounded queue ahead of the consumer. The producer is called only from
// that thread, never concurrently with itself. All public methods are thread-safe.
//
// End of data and errors are delivered after the elements produced before them, and then
// returned again by every later call. stop() (and the destructor) ends the thread: it waits for
// at most the one producer call in flight, so a producer that returns promptly never hangs
// shutdown.
class Prefetcher {
 public:
  using Element = std::vector<Tensor>;
  using Producer = std::function<Result<std::optional<Element>>()>;

  // Starts the background thread. `depth` >= 1 (0 is treated as 1). `on_ready`, if set, is called
  // on the background thread (without locks held) whenever an element, the end or an error becomes
  // available, so an actor can send itself a message instead of blocking.
  Prefetcher(Producer producer, size_t depth, std::function<void()> on_ready = nullptr);
  // Convenience: prefetches from `it` (moved into the prefetcher).
  Prefetcher(DatasetIterator it, size_t depth, std::function<void()> on_ready = nullptr);
  ~Prefetcher();  // stop() and join
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Blocks until the next element, the end (nullopt) or the producer's error. After stop():
  // Cancelled. Exceptions thrown by the producer arrive as Internal errors.
  Result<std::optional<Element>> next();
  // Like next() but waits at most `timeout`; DeadlineExceeded when nothing arrived in time.
  Result<std::optional<Element>> next_for(std::chrono::milliseconds timeout);
  // Non-blocking: nullopt when nothing is ready yet, else what next() would return.
  std::optional<Result<std::optional<Element>>> try_next();

  // Stops the background thread and drops buffered elements; later next() calls return Cancelled.
  // Idempotent. Must not be called from the producer or from on_ready.
  void stop();

  // Number of elements waiting in the queue.
  size_t buffered() const;

 private:
  void run();
  // Pops one result; precondition: lock held and ready_locked().
  Result<std::optional<Element>> pop_locked();
  bool ready_locked() const { return !queue_.empty() || finished_ || stopped_; }

  Producer producer_;
  const size_t depth_;
  std::function<void()> on_ready_;

  mutable std::mutex mu_;
  std::condition_variable not_full_;   // producer waits for room
  std::condition_variable not_empty_;  // consumers wait for data
  std::deque<Element> queue_;
  bool finished_ = false;  // producer delivered end or error (terminal_)
  Status terminal_;        // OK = end of data
  bool stopped_ = false;
  std::thread thread_;     // last member: started after everything else is initialised
};

}  // namespace actorflow
