#include "data/dataset.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>

namespace actorflow {
namespace detail {

// One stage of the index pipeline. A stream of groups of `group()` int64 row indices; padding
// entries (-1) may end the group of a partial batch. Not thread-safe.
class IndexStage {
 public:
  explicit IndexStage(size_t group) : group_(group) {}
  virtual ~IndexStage() = default;
  // (Re)starts the stream from its beginning. Called before the first pull and by repeat.
  virtual void start() = 0;
  // Writes up to `max` (>= 1) groups to `out` (room for max * group() indices); returns how many
  // were written; 0 means the end of the stream (until the next start()).
  virtual size_t pull(int64_t* out, size_t max) = 0;
  size_t group() const { return group_; }

 protected:
  size_t group_;
};

}  // namespace detail

namespace {

using detail::IndexStage;
constexpr size_t kChunk = 1024;  // groups moved per upstream pull where a stage buffers

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// xoshiro256**: small, fast, and the same sequence on every platform (unlike std:: distributions).
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) {
    for (auto& s : s_) s = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, n), n >= 1, without modulo bias (Lemire's method).
  uint64_t below(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

class RangeStage final : public IndexStage {
 public:
  explicit RangeStage(int64_t n) : IndexStage(1), n_(n) {}
  void start() override { pos_ = 0; }
  size_t pull(int64_t* out, size_t max) override {
    const size_t k = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(max), n_ - pos_));
    for (size_t i = 0; i < k; ++i) out[i] = pos_ + static_cast<int64_t>(i);
    pos_ += static_cast<int64_t>(k);
    return k;
  }

 private:
  int64_t n_;
  int64_t pos_ = 0;
};

class ShardStage final : public IndexStage {
 public:
  ShardStage(std::unique_ptr<IndexStage> up, int64_t num, int64_t index)
      : IndexStage(up->group()), up_(std::move(up)), num_(static_cast<uint64_t>(num)), index_(static_cast<uint64_t>(index)) {}
  void start() override {
    up_->start();
    pos_ = 0;
  }
  size_t pull(int64_t* out, size_t max) override {
    // Pulling at most max * num upstream groups keeps at most `max` of them.
    const size_t want = std::min(max, kChunk) * num_;
    scratch_.resize(want * group_);
    while (true) {
      const size_t got = up_->pull(scratch_.data(), want);
      if (got == 0) return 0;
      size_t kept = 0;
      for (size_t i = 0; i < got; ++i, ++pos_) {
        if (pos_ % num_ != index_) continue;
        std::memcpy(out + kept * group_, scratch_.data() + i * group_, group_ * sizeof(int64_t));
        ++kept;
      }
      if (kept > 0) return kept;
    }
  }

 private:
  std::unique_ptr<IndexStage> up_;
  uint64_t num_, index_;
  uint64_t pos_ = 0;
  std::vector<int64_t> scratch_;
};

class ShuffleStage final : public IndexStage {
 public:
  ShuffleStage(std::unique_ptr<IndexStage> up, int64_t buffer_size, uint64_t seed, bool reshuffle)
      : IndexStage(up->group()),
        up_(std::move(up)),
        capacity_(buffer_size < 0 ? std::numeric_limits<size_t>::max() : static_cast<size_t>(buffer_size)),
        seed_(seed),
        reshuffle_(reshuffle) {}

  void start() override {
    up_->start();
    uint64_t s = seed_ ^ 0x5DEECE66Dull;
    uint64_t mixed = splitmix64(s);
    uint64_t e = reshuffle_ ? epoch_ : 0;
    mixed ^= splitmix64(e);
    rng_ = Rng(mixed);
    ++epoch_;
    buffer_.clear();
    staging_.clear();
    staging_pos_ = 0;
    upstream_done_ = false;
  }

  size_t pull(int64_t* out, size_t max) override {
    size_t produced = 0;
    while (produced < max) {
      fill();
      const size_t n = buffer_.size() / group_;
      if (n == 0) break;
      const size_t r = static_cast<size_t>(rng_.below(n));
      int64_t* slot = buffer_.data() + r * group_;
      std::memcpy(out + produced * group_, slot, group_ * sizeof(int64_t));
      const int64_t* last = buffer_.data() + (n - 1) * group_;
      if (slot != last) std::memcpy(slot, last, group_ * sizeof(int64_t));
      buffer_.resize((n - 1) * group_);
      ++produced;
    }
    return produced;
  }

 private:
  // Tops the buffer up to capacity from upstream (via a staging chunk, so upstream is pulled
  // kChunk groups at a time while the buffer still refills one element per output as in tf.data).
  void fill() {
    while (buffer_.size() / group_ < capacity_) {
      if (staging_pos_ == staging_.size()) {
        if (upstream_done_) return;
        staging_.resize(kChunk * group_);
        const size_t got = up_->pull(staging_.data(), kChunk);
        staging_.resize(got * group_);
        staging_pos_ = 0;
        if (got == 0) {
          upstream_done_ = true;
          return;
        }
      }
      const size_t avail = (staging_.size() - staging_pos_) / group_;
      const size_t room = capacity_ - buffer_.size() / group_;
      const size_t take = std::min(avail, room);
      buffer_.insert(buffer_.end(), staging_.begin() + static_cast<std::ptrdiff_t>(staging_pos_),
                     staging_.begin() + static_cast<std::ptrdiff_t>(staging_pos_ + take * group_));
      staging_pos_ += take * group_;
    }
  }

  std::unique_ptr<IndexStage> up_;
  size_t capacity_;
  uint64_t seed_;
  bool reshuffle_;
  uint64_t epoch_ = 0;
  Rng rng_;
  std::vector<int64_t> buffer_;
  std::vector<int64_t> staging_;
  size_t staging_pos_ = 0;
  bool upstream_done_ = false;
};

class RepeatStage final : public IndexStage {
 public:
  RepeatStage(std::unique_ptr<IndexStage> up, int64_t count) : IndexStage(up->group()), up_(std::move(up)), count_(count) {}
  void start() override {
    done_ = 0;
    produced_in_epoch_ = 0;
    ended_ = count_ == 0;
    if (!ended_) up_->start();
  }
  size_t pull(int64_t* out, size_t max) override {
    while (!ended_) {
      const size_t got = up_->pull(out, max);
      if (got > 0) {
        produced_in_epoch_ += got;
        return got;
      }
      ++done_;
      if ((count_ >= 0 && done_ >= count_) || produced_in_epoch_ == 0) {
        ended_ = true;
        break;
      }
      up_->start();
      produced_in_epoch_ = 0;
    }
    return 0;
  }

 private:
  std::unique_ptr<IndexStage> up_;
  int64_t count_;
  int64_t done_ = 0;
  uint64_t produced_in_epoch_ = 0;
  bool ended_ = false;
};

class TakeStage final : public IndexStage {
 public:
  TakeStage(std::unique_ptr<IndexStage> up, int64_t count) : IndexStage(up->group()), up_(std::move(up)), count_(count) {}
  void start() override {
    up_->start();
    left_ = count_ < 0 ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(count_);
  }
  size_t pull(int64_t* out, size_t max) override {
    if (left_ == 0) return 0;
    const size_t got = up_->pull(out, static_cast<size_t>(std::min<uint64_t>(max, left_)));
    left_ -= got;
    return got;
  }

 private:
  std::unique_ptr<IndexStage> up_;
  int64_t count_;
  uint64_t left_ = 0;
};

class SkipStage final : public IndexStage {
 public:
  SkipStage(std::unique_ptr<IndexStage> up, int64_t count) : IndexStage(up->group()), up_(std::move(up)), count_(count) {}
  void start() override {
    up_->start();
    to_skip_ = count_ < 0 ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(count_);
  }
  size_t pull(int64_t* out, size_t max) override {
    while (to_skip_ > 0) {
      scratch_.resize(kChunk * group_);
      const size_t got = up_->pull(scratch_.data(), static_cast<size_t>(std::min<uint64_t>(kChunk, to_skip_)));
      if (got == 0) return 0;
      to_skip_ -= got;
    }
    return up_->pull(out, max);
  }

 private:
  std::unique_ptr<IndexStage> up_;
  int64_t count_;
  uint64_t to_skip_ = 0;
  std::vector<int64_t> scratch_;
};

class BatchStage final : public IndexStage {
 public:
  BatchStage(std::unique_ptr<IndexStage> up, int64_t batch, bool drop)
      : IndexStage(up->group() * static_cast<size_t>(batch)), up_(std::move(up)), batch_(static_cast<size_t>(batch)), drop_(drop) {}
  void start() override {
    up_->start();
    ended_ = false;
  }
  size_t pull(int64_t* out, size_t max) override {
    const size_t in_group = up_->group();
    size_t produced = 0;
    while (produced < max && !ended_) {
      int64_t* dst = out + produced * group_;
      size_t have = 0;
      while (have < batch_) {
        const size_t got = up_->pull(dst + have * in_group, batch_ - have);
        if (got == 0) break;
        have += got;
      }
      if (have < batch_) {
        ended_ = true;
        if (have == 0 || drop_) break;
        std::fill(dst + have * in_group, dst + group_, int64_t{-1});
      }
      ++produced;
    }
    return produced;
  }

 private:
  std::unique_ptr<IndexStage> up_;
  size_t batch_;
  bool drop_;
  bool ended_ = false;
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

// ---- Dataset ----------------------------------------------------------------------------

Dataset::Dataset() : status_(FailedPrecondition("Dataset has no source; use Dataset::from_tensors")) {}

Dataset Dataset::from_tensors(std::vector<Tensor> components) {
  Dataset d;
  d.status_ = Status::OK();
  if (components.empty()) {
    d.status_ = InvalidArgument("Dataset::from_tensors needs at least one tensor");
    return d;
  }
  for (size_t i = 0; i < components.size(); ++i) {
    const Tensor& t = components[i];
    std::string where = "Dataset::from_tensors component " + std::to_string(i);
    if (!t.is_initialized()) {
      d.status_ = InvalidArgument(where + " is an uninitialised tensor");
    } else if (!t.on_host()) {
      d.status_ = InvalidArgument(where + " (" + t.debug_string() + ") is not in host memory");
    } else if (t.shape().rank() < 1) {
      d.status_ = InvalidArgument(where + " is a scalar; components are sliced along dimension 0");
    } else if (t.shape().dim(0) != components[0].shape().dim(0)) {
      d.status_ = InvalidArgument(where + " has " + std::to_string(t.shape().dim(0)) + " rows (shape " +
                                  t.shape().to_string() + ") but component 0 has " +
                                  std::to_string(components[0].shape().dim(0)) + " (shape " +
                                  components[0].shape().to_string() + ")");
    }
    if (!d.status_.ok()) return d;
  }
  d.components_ = std::make_shared<const std::vector<Tensor>>(std::move(components));
  return d;
}

Dataset Dataset::with_op(Op op, Status error) const {
  Dataset d = *this;
  if (!d.status_.ok()) return d;
  if (!error.ok()) {
    d.status_ = std::move(error);
    return d;
  }
  d.ops_.push_back(op);
  return d;
}

Dataset Dataset::shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration) const {
  Op op{OpKind::kShuffle, buffer_size, 0, seed, reshuffle_each_iteration};
  Status err;
  if (buffer_size < 1 && buffer_size != kFullBuffer)
    err = InvalidArgument("Dataset::shuffle: buffer_size must be >= 1 or kFullBuffer, got " + std::to_string(buffer_size));
  return with_op(op, err);
}

Dataset Dataset::repeat(int64_t count) const {
  Status err;
  if (count < kInfinite) err = InvalidArgument("Dataset::repeat: count must be >= 0 or kInfinite, got " + std::to_string(count));
  return with_op(Op{OpKind::kRepeat, count}, err);
}

Dataset Dataset::batch(int64_t batch_size, bool drop_remainder) const {
  Status err;
  if (batch_size < 1) err = InvalidArgument("Dataset::batch: batch_size must be >= 1, got " + std::to_string(batch_size));
  for (const Op& o : ops_)
    if (o.kind == OpKind::kBatch) err = Unimplemented("Dataset::batch: a pipeline may batch only once");
  return with_op(Op{OpKind::kBatch, batch_size, 0, 0, drop_remainder}, err);
}

Dataset Dataset::shard(int64_t num_shards, int64_t index) const {
  Status err;
  if (num_shards < 1 || index < 0 || index >= num_shards)
    err = InvalidArgument("Dataset::shard: need num_shards >= 1 and 0 <= index < num_shards, got num_shards=" +
                          std::to_string(num_shards) + " index=" + std::to_string(index));
  return with_op(Op{OpKind::kShard, num_shards, index}, err);
}

Dataset Dataset::take(int64_t count) const {
  Status err;
  if (count < kInfinite) err = InvalidArgument("Dataset::take: count must be >= 0 or kInfinite, got " + std::to_string(count));
  return with_op(Op{OpKind::kTake, count}, err);
}

Dataset Dataset::skip(int64_t count) const {
  Status err;
  if (count < kInfinite) err = InvalidArgument("Dataset::skip: count must be >= 0 or kInfinite, got " + std::to_string(count));
  return with_op(Op{OpKind::kSkip, count}, err);
}

int64_t Dataset::cardinality() const {
  if (!status_.ok()) return 0;
  int64_t n = (*components_)[0].shape().dim(0);
  for (const Op& o : ops_) {
    switch (o.kind) {
      case OpKind::kShard:
        if (n != kInfinite) n = n > o.b ? ceil_div(n - o.b, o.a) : 0;
        break;
      case OpKind::kShuffle:
        break;
      case OpKind::kRepeat:
        if (n == 0 || o.a == 0) n = 0;
        else if (o.a == kInfinite || n == kInfinite) n = kInfinite;
        else n *= o.a;
        break;
      case OpKind::kTake:
        if (o.a != kInfinite) n = n == kInfinite ? o.a : std::min(n, o.a);
        break;
      case OpKind::kSkip:
        if (o.a == kInfinite) n = 0;
        else if (n != kInfinite) n = std::max<int64_t>(0, n - o.a);
        break;
      case OpKind::kBatch:
        if (n != kInfinite) n = o.flag ? n / o.a : ceil_div(n, o.a);
        break;
    }
  }
  return n;
}

Result<DatasetIterator> Dataset::make_iterator() const {
  if (!status_.ok()) return status_;
  DatasetIterator it;
  it.components_ = components_;
  std::unique_ptr<IndexStage> s = std::make_unique<RangeStage>((*components_)[0].shape().dim(0));
  int64_t n = (*components_)[0].shape().dim(0);  // running cardinality, to refuse infinite full shuffles
  Dataset prefix = *this;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const Op& o = ops_[i];
    prefix.ops_.assign(ops_.begin(), ops_.begin() + static_cast<std::ptrdiff_t>(i));
    n = prefix.cardinality();
    switch (o.kind) {
      case OpKind::kShard: s = std::make_unique<ShardStage>(std::move(s), o.a, o.b); break;
      case OpKind::kShuffle:
        if (o.a == kFullBuffer && n == kInfinite)
          return InvalidArgument("Dataset::shuffle(kFullBuffer) of an infinite input (a repeat() before it) "
                                 "would never emit an element; shuffle before repeat or give a buffer size");
        s = std::make_unique<ShuffleStage>(std::move(s), o.a, o.seed, o.flag);
        break;
      case OpKind::kRepeat: s = std::make_unique<RepeatStage>(std::move(s), o.a); break;
      case OpKind::kTake: s = std::make_unique<TakeStage>(std::move(s), o.a); break;
      case OpKind::kSkip: s = std::make_unique<SkipStage>(std::move(s), o.a); break;
      case OpKind::kBatch:
        s = std::make_unique<BatchStage>(std::move(s), o.a, o.flag);
        it.batched_ = true;
        break;
    }
  }
  it.group_ = s->group();
  s->start();
  it.root_ = std::move(s);
  it.scratch_.resize(it.group_);
  return it;
}

// ---- DatasetIterator --------------------------------------------------------------------

DatasetIterator::DatasetIterator(DatasetIterator&&) noexcept = default;
DatasetIterator& DatasetIterator::operator=(DatasetIterator&&) noexcept = default;
DatasetIterator::~DatasetIterator() = default;

Result<std::optional<std::vector<Tensor>>> DatasetIterator::next() {
  if (ended_ || !root_) return std::optional<std::vector<Tensor>>();
  if (root_->pull(scratch_.data(), 1) == 0) {
    ended_ = true;
    return std::optional<std::vector<Tensor>>();
  }
  const int64_t* idx = scratch_.data();
  const size_t count = static_cast<size_t>(std::find(idx, idx + group_, int64_t{-1}) - idx);
  std::vector<Tensor> out;
  out.reserve(components_->size());
  for (const Tensor& src : *components_) {
    const std::vector<int64_t>& dims = src.shape().dims();
    std::vector<int64_t> out_dims;
    if (batched_) out_dims.push_back(static_cast<int64_t>(count));
    out_dims.insert(out_dims.end(), dims.begin() + 1, dims.end());
    AF_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(cpu_allocator(), src.dtype(), Shape(std::move(out_dims))));
    const size_t row = src.shape().dim(0) == 0 ? 0 : src.bytes() / static_cast<size_t>(src.shape().dim(0));
    const char* from = static_cast<const char*>(src.raw_data());
    char* to = static_cast<char*>(t.raw_data());
    // One memcpy per run of consecutive source rows.
    for (size_t i = 0; i < count;) {
      size_t j = i + 1;
      while (j < count && idx[j] == idx[j - 1] + 1) ++j;
      std::memcpy(to + i * row, from + static_cast<size_t>(idx[i]) * row, (j - i) * row);
      i = j;
    }
    out.push_back(std::move(t));
  }
  return std::optional<std::vector<Tensor>>(std::move(out));
}

// ---- Prefetcher -------------------------------------------------------------------------

Prefetcher::Prefetcher(Producer producer, size_t depth, std::function<void()> on_ready)
    : producer_(std::move(producer)), depth_(depth == 0 ? 1 : depth), on_ready_(std::move(on_ready)) {
  thread_ = std::thread([this] { run(); });
}

Prefetcher::Prefetcher(DatasetIterator it, size_t depth, std::function<void()> on_ready)
    : Prefetcher(
          [iter = std::make_shared<DatasetIterator>(std::move(it))]() { return iter->next(); }, depth,
          std::move(on_ready)) {}

Prefetcher::~Prefetcher() { stop(); }

void Prefetcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    queue_.clear();
  }
  not_full_.notify_all();
  not_empty_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Prefetcher::run() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      not_full_.wait(lock, [this] { return stopped_ || queue_.size() < depth_; });
      if (stopped_) return;
    }
    Result<std::optional<Element>> r = Status(Code::kInternal, "prefetch producer did not run");
    try {
      r = producer_();
    } catch (const std::exception& e) {
      r = Internal(std::string("prefetch producer threw: ") + e.what());
    } catch (...) {
      r = Internal("prefetch producer threw a non-standard exception");
    }
    bool done = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      if (!r.ok()) {
        terminal_ = r.status();
        finished_ = done = true;
      } else if (!r->has_value()) {
        finished_ = done = true;
      } else {
        queue_.push_back(std::move(**r));
      }
    }
    not_empty_.notify_all();
    if (on_ready_) on_ready_();
    if (done) return;
  }
}

Result<std::optional<Prefetcher::Element>> Prefetcher::pop_locked() {
  if (!queue_.empty()) {
    Element e = std::move(queue_.front());
    queue_.pop_front();
    not_full_.notify_one();
    return std::optional<Element>(std::move(e));
  }
  if (stopped_) return Cancelled("prefetcher stopped");
  if (!terminal_.ok()) return terminal_;
  return std::optional<Element>();
}

Result<std::optional<Prefetcher::Element>> Prefetcher::next() {
  std::unique_lock<std::mutex> lock(mu_);
  not_empty_.wait(lock, [this] { return ready_locked(); });
  return pop_locked();
}

Result<std::optional<Prefetcher::Element>> Prefetcher::next_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!not_empty_.wait_for(lock, timeout, [this] { return ready_locked(); }))
    return DeadlineExceeded("prefetcher produced nothing within " + std::to_string(timeout.count()) + " ms");
  return pop_locked();
}

std::optional<Result<std::optional<Prefetcher::Element>>> Prefetcher::try_next() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ready_locked()) return std::nullopt;
  return pop_locked();
}

size_t Prefetcher::buffered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

}  // namespace actorflow
