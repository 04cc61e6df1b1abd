#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <set>
#include <vector>

#include "data/dataset.h"

namespace actorflow {
namespace {

// A dataset of n rows: component 0 int32 [n] = row index, component 1 float32 [n,2] = {i, -i}.
Dataset numbers(int n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::vector<float> feats;
  for (int i = 0; i < n; ++i) {
    ids[static_cast<size_t>(i)] = i;
    feats.push_back(static_cast<float>(i));
    feats.push_back(static_cast<float>(-i));
  }
  return Dataset::from_tensors({Tensor::from_vector<int32_t>(ids, {n}), Tensor::from_vector<float>(feats, {n, 2})});
}

// Collects component 0 of every element (flattened) and the sizes of the elements.
struct Drained {
  std::vector<int32_t> ids;
  std::vector<int64_t> sizes;
};

Drained drain(const Dataset& ds, size_t limit = 1000000) {
  Drained d;
  auto it = ds.make_iterator();
  EXPECT_TRUE(it.ok()) << it.status();
  if (!it.ok()) return d;
  for (size_t k = 0; k < limit; ++k) {
    auto e = it->next();
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok() || !e->has_value()) break;
    const Tensor& t = (**e)[0];
    d.sizes.push_back(t.shape().rank() == 0 ? 0 : t.shape().dim(0));
    d.ids.insert(d.ids.end(), t.data<int32_t>(), t.data<int32_t>() + t.num_elements());
  }
  return d;
}

std::vector<int32_t> iota(int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(DatasetTest, SlicesAlongFirstDimension) {
  auto it = numbers(3).make_iterator();
  ASSERT_TRUE(it.ok()) << it.status();
  for (int i = 0; i < 3; ++i) {
    auto e = it->next();
    ASSERT_TRUE(e.ok() && e->has_value());
    ASSERT_EQ((*e)->size(), 2u);
    EXPECT_TRUE((**e)[0].equals(Tensor::scalar<int32_t>(i)));
    EXPECT_TRUE((**e)[1].equals(Tensor::from_vector<float>({float(i), float(-i)}, {2})));
  }
  auto end = it->next();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
  EXPECT_FALSE(it->next()->has_value());  // stays at the end
}

TEST(DatasetTest, BatchesValuesWithPartialLastBatch) {
  auto it = numbers(5).batch(2).make_iterator();
  ASSERT_TRUE(it.ok());
  auto b0 = it->next();
  ASSERT_TRUE(b0.ok() && b0->has_value());
  EXPECT_TRUE((**b0)[0].equals(Tensor::from_vector<int32_t>({0, 1}, {2})));
  EXPECT_TRUE((**b0)[1].equals(Tensor::from_vector<float>({0, 0, 1, -1}, {2, 2})));
  auto b1 = it->next();
  EXPECT_TRUE((**b1)[1].equals(Tensor::from_vector<float>({2, -2, 3, -3}, {2, 2})));
  auto b2 = it->next();
  ASSERT_TRUE(b2.ok() && b2->has_value());
  EXPECT_TRUE((**b2)[0].equals(Tensor::from_vector<int32_t>({4}, {1})));
  EXPECT_TRUE((**b2)[1].equals(Tensor::from_vector<float>({4, -4}, {1, 2})));
  EXPECT_FALSE(it->next()->has_value());
  EXPECT_EQ(numbers(5).batch(2).cardinality(), 3);
}

TEST(DatasetTest, DropRemainder) {
  Drained d = drain(numbers(5).batch(2, /*drop_remainder=*/true));
  EXPECT_EQ(d.sizes, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(d.ids, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(numbers(5).batch(2, true).cardinality(), 2);
}

TEST(DatasetTest, ShuffleIsASeededReproduciblePermutation) {
  Drained a = drain(numbers(100).shuffle(Dataset::kFullBuffer, 7));
  Drained b = drain(numbers(100).shuffle(Dataset::kFullBuffer, 7));
  Drained c = drain(numbers(100).shuffle(Dataset::kFullBuffer, 8));
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_NE(a.ids, c.ids);
  EXPECT_NE(a.ids, iota(100));
  std::vector<int32_t> sorted = a.ids;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(100));
}

TEST(DatasetTest, SmallBufferShuffleIsLocalPermutation) {
  // With a buffer of 4, element i cannot be emitted before position i - 3 (it enters the buffer
  // only after i - 4 outputs).
  Drained a = drain(numbers(50).shuffle(4, 3));
  std::vector<int32_t> sorted = a.ids;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_EQ(sorted, iota(50));
  for (size_t pos = 0; pos < a.ids.size(); ++pos) EXPECT_LE(a.ids[pos], static_cast<int32_t>(pos) + 3);
  EXPECT_NE(a.ids, iota(50));
  EXPECT_EQ(drain(numbers(50).shuffle(4, 3)).ids, a.ids);
}

TEST(DatasetTest, ReshufflesEachEpochReproducibly) {
  Drained a = drain(numbers(20).shuffle(Dataset::kFullBuffer, 5).repeat(3));
  ASSERT_EQ(a.ids.size(), 60u);
  std::vector<int32_t> e0(a.ids.begin(), a.ids.begin() + 20), e1(a.ids.begin() + 20, a.ids.begin() + 40),
      e2(a.ids.begin() + 40, a.ids.end());
  for (auto* e : {&e0, &e1, &e2}) {
    std::vector<int32_t> s = *e;
    std::sort(s.begin(), s.end());
    EXPECT_EQ(s, iota(20));  // every epoch is a full permutation
  }
  EXPECT_NE(e0, e1);
  EXPECT_NE(e1, e2);
  EXPECT_EQ(drain(numbers(20).shuffle(Dataset::kFullBuffer, 5).repeat(3)).ids, a.ids);
  // The first epoch of a fresh iterator equals a single shuffled pass with the same seed.
  EXPECT_EQ(drain(numbers(20).shuffle(Dataset::kFullBuffer, 5)).ids, e0);
  // Without reshuffling every epoch repeats the first order.
  Drained same = drain(numbers(20).shuffle(Dataset::kFullBuffer, 5, false).repeat(2));
  EXPECT_EQ(std::vector<int32_t>(same.ids.begin(), same.ids.begin() + 20), e0);
  EXPECT_EQ(std::vector<int32_t>(same.ids.begin() + 20, same.ids.end()), e0);
}

TEST(DatasetTest, RepeatCountsAndForever) {
  Drained d = drain(numbers(3).repeat(2));
  EXPECT_EQ(d.ids, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(numbers(3).repeat(2).cardinality(), 6);
  EXPECT_TRUE(drain(numbers(3).repeat(0)).ids.empty());
  Drained inf = drain(numbers(3).repeat(), 10);
  EXPECT_EQ(inf.ids, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(numbers(3).repeat().cardinality(), Dataset::kInfinite);
  // An empty input repeated forever ends instead of spinning.
  EXPECT_TRUE(drain(numbers(3).take(0).repeat()).ids.empty());
}

TEST(DatasetTest, RepeatThenBatchSpansEpochsBatchThenRepeatDoesNot) {
  Drained a = drain(numbers(3).repeat(2).batch(4));
  EXPECT_EQ(a.sizes, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(a.ids, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  Drained b = drain(numbers(3).batch(2).repeat(2));
  EXPECT_EQ(b.sizes, (std::vector<int64_t>{2, 1, 2, 1}));
  EXPECT_EQ(numbers(3).batch(2).repeat(2).cardinality(), 4);
}

TEST(DatasetTest, SeedProgramPipeline) {
  // dataset.shuffle(100000).repeat().batch(50): batches of 50, each epoch a permutation.
  Dataset ds = numbers(120).shuffle(100000, 1).repeat().batch(50);
  Drained d = drain(ds, 12);  // 600 elements = 5 epochs
  EXPECT_EQ(d.sizes, std::vector<int64_t>(12, 50));
  for (int e = 0; e < 5; ++e) {
    std::vector<int32_t> ep(d.ids.begin() + e * 120, d.ids.begin() + (e + 1) * 120);
    std::sort(ep.begin(), ep.end());
    EXPECT_EQ(ep, iota(120)) << "epoch " << e;
  }
}

TEST(DatasetTest, ShardsAreDisjointAndCover) {
  std::set<int32_t> all;
  size_t total = 0;
  for (int i = 0; i < 3; ++i) {
    Drained d = drain(numbers(10).shard(3, i));
    EXPECT_EQ(static_cast<int64_t>(d.ids.size()), numbers(10).shard(3, i).cardinality());
    for (int32_t v : d.ids) EXPECT_EQ(v % 3, i);
    total += d.ids.size();
    all.insert(d.ids.begin(), d.ids.end());
  }
  EXPECT_EQ(total, 10u);
  EXPECT_EQ(all.size(), 10u);
  EXPECT_EQ(drain(numbers(10).shard(3, 1)).ids, (std::vector<int32_t>{1, 4, 7}));
  // Sharded, then shuffled and batched: still the shard's elements.
  Drained s = drain(numbers(10).shard(2, 1).shuffle(Dataset::kFullBuffer, 4).batch(2));
  std::vector<int32_t> ids = s.ids;
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 5, 7, 9}));
}

TEST(DatasetTest, TakeSkipAndBatchedShuffleKeepBatchesWhole) {
  EXPECT_EQ(drain(numbers(10).skip(7)).ids, (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(drain(numbers(10).take(2)).ids, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(drain(numbers(10).repeat().skip(9).take(3)).ids, (std::vector<int32_t>{9, 0, 1}));
  Drained d = drain(numbers(8).batch(2).shuffle(Dataset::kFullBuffer, 9));
  ASSERT_EQ(d.ids.size(), 8u);
  for (size_t b = 0; b < 4; ++b) {
    EXPECT_EQ(d.ids[2 * b] % 2, 0);
    EXPECT_EQ(d.ids[2 * b + 1], d.ids[2 * b] + 1);
  }
}

TEST(DatasetTest, ErrorsAreReportedAtMakeIterator) {
  Dataset mismatch = Dataset::from_tensors({Tensor(DType::kInt32, Shape{3}), Tensor(DType::kFloat32, Shape{4, 2})});
  ASSERT_FALSE(mismatch.status().ok());
  EXPECT_NE(mismatch.status().message().find("component 1 has 4 rows"), std::string::npos) << mismatch.status();
  EXPECT_FALSE(mismatch.batch(2).make_iterator().ok());
  EXPECT_FALSE(numbers(3).batch(0).make_iterator().ok());
  EXPECT_FALSE(numbers(3).shard(2, 2).status().ok());
  EXPECT_FALSE(numbers(3).batch(2).batch(2).status().ok());
  EXPECT_FALSE(Dataset::from_tensors({Tensor::scalar<float>(1)}).status().ok());
  auto inf = numbers(3).repeat().shuffle(Dataset::kFullBuffer, 1).make_iterator();
  ASSERT_FALSE(inf.ok());
  EXPECT_EQ(inf.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(numbers(3).repeat().shuffle(10, 1).make_iterator().ok());
}

TEST(DatasetTest, LargeRowsCopyExactly) {
  // 784-float rows as in MNIST: batch of 50 shuffled rows matches the source rows.
  const int n = 200;
  std::vector<float> px(static_cast<size_t>(n) * 784);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<float>(i % 9973) * 0.5f;
  Tensor images = Tensor::from_vector<float>(px, {n, 784});
  Tensor labels(DType::kInt32, Shape{n});
  for (int i = 0; i < n; ++i) labels.data<int32_t>()[i] = i;
  auto it = Dataset::from_tensors({images, labels}).shuffle(Dataset::kFullBuffer, 11).batch(50).make_iterator();
  ASSERT_TRUE(it.ok());
  auto b = it->next();
  ASSERT_TRUE(b.ok() && b->has_value());
  const Tensor& bi = (**b)[0];
  ASSERT_EQ(bi.shape(), (Shape{50, 784}));
  for (int r = 0; r < 50; ++r) {
    const int src = (**b)[1].data<int32_t>()[r];
    EXPECT_EQ(std::memcmp(bi.data<float>() + r * 784, px.data() + static_cast<size_t>(src) * 784, 784 * sizeof(float)), 0);
  }
}

TEST(PrefetcherTest, DeliversInOrderThenEnd) {
  auto it = numbers(25).batch(4).make_iterator();
  ASSERT_TRUE(it.ok());
  std::atomic<int> notified{0};
  Prefetcher p(std::move(*it), 3, [&] { notified++; });
  std::vector<int32_t> got;
  while (true) {
    auto e = p.next();
    ASSERT_TRUE(e.ok()) << e.status();
    if (!e->has_value()) break;
    const Tensor& t = (**e)[0];
    got.insert(got.end(), t.data<int32_t>(), t.data<int32_t>() + t.num_elements());
  }
  EXPECT_EQ(got, iota(25));
  EXPECT_FALSE(p.next()->has_value());  // end is sticky
  p.stop();                             // joins: every on_ready call has returned
  EXPECT_EQ(notified.load(), 8);        // 7 batches + end
}

TEST(PrefetcherTest, QueueIsBoundedByDepth) {
  std::atomic<int> calls{0};
  std::mutex mu;
  std::condition_variable cv;
  int ready = 0;
  Prefetcher p(
      [&]() -> Result<std::optional<Prefetcher::Element>> {
        calls++;
        return std::optional<Prefetcher::Element>(Prefetcher::Element{Tensor::scalar<int32_t>(1)});
      },
      2, [&] {
        std::lock_guard<std::mutex> l(mu);
        ready++;
        cv.notify_all();
      });
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(10), [&] { return ready >= 2; }));
  }
  // The producer blocks once two elements wait: at most depth calls before anything is consumed.
  EXPECT_EQ(p.buffered(), 2u);
  EXPECT_EQ(calls.load(), 2);
  auto e = p.try_next();
  ASSERT_TRUE(e.has_value());
  ASSERT_TRUE(e->ok());
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(10), [&] { return ready >= 3; }));
  }
  EXPECT_EQ(calls.load(), 3);
}

TEST(PrefetcherTest, StopsCleanlyMidStreamOfInfiniteData) {
  auto it = numbers(10).repeat().batch(3).make_iterator();
  ASSERT_TRUE(it.ok());
  auto p = std::make_unique<Prefetcher>(std::move(*it), 4);
  for (int i = 0; i < 5; ++i) {
    auto e = p->next_for(std::chrono::seconds(10));
    ASSERT_TRUE(e.ok() && e->has_value()) << e.status();
    EXPECT_EQ((**e)[0].data<int32_t>()[0], (i * 3) % 10);
  }
  p->stop();
  auto after = p->next();
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), Code::kCancelled);
  p.reset();  // destructor after stop: joins, no hang
  // And a destructor without stop() while the producer is blocked on a full queue.
  auto it2 = numbers(10).repeat().make_iterator();
  ASSERT_TRUE(it2.ok());
  { Prefetcher q(std::move(*it2), 1); }
  SUCCEED();
}

TEST(PrefetcherTest, ProducerErrorsAndExceptionsArriveAfterEarlierElements) {
  int n = 0;
  Prefetcher p(
      [&n]() -> Result<std::optional<Prefetcher::Element>> {
        if (n++ < 2) return std::optional<Prefetcher::Element>(Prefetcher::Element{Tensor::scalar<int32_t>(n)});
        return DataLoss("disk on fire");
      },
      8);
  EXPECT_TRUE(p.next()->has_value());
  EXPECT_TRUE(p.next()->has_value());
  auto e = p.next();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::kDataLoss);
  EXPECT_EQ(p.next().status().code(), Code::kDataLoss);  // sticky

  Prefetcher q([]() -> Result<std::optional<Prefetcher::Element>> { throw std::runtime_error("boom"); }, 2);
  auto x = q.next();
  ASSERT_FALSE(x.ok());
  EXPECT_EQ(x.status().code(), Code::kInternal);
  EXPECT_NE(x.status().message().find("boom"), std::string::npos);
}

}  // namespace
}  // namespace actorflow
