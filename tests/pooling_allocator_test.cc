// PoolingAllocator: large blocks are reused by exact size within a bound; small ones pass
// through; tensors built on it own their memory as usual.
#include "tensor/pooling_allocator.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tensor/tensor.h"

namespace actorflow {
namespace {

TEST(PoolingAllocatorTest, ReusesLargeBlocksOfTheSameSize) {
  PoolingAllocator pool(cpu_allocator(), /*min_pooled_bytes=*/1024, /*max_cached_bytes=*/1 << 20);
  void* a = pool.allocate(4096);
  ASSERT_NE(a, nullptr);
  std::memset(a, 7, 4096);
  pool.deallocate(a, 4096);
  EXPECT_EQ(pool.pool_stats().cached_bytes, 4096u);
  void* b = pool.allocate(4096);
  EXPECT_EQ(b, a);  // the warm block again
  EXPECT_EQ(pool.pool_stats().hits, 1);
  void* c = pool.allocate(8192);  // another size: new memory
  EXPECT_NE(c, a);
  EXPECT_EQ(pool.pool_stats().misses, 2);
  pool.deallocate(b, 4096);
  pool.deallocate(c, 8192);
  EXPECT_EQ(pool.pool_stats().cached_bytes, 4096u + 8192u);
}

TEST(PoolingAllocatorTest, SmallBlocksAreNotCached) {
  PoolingAllocator pool(cpu_allocator(), 1024, 1 << 20);
  void* a = pool.allocate(100);
  ASSERT_NE(a, nullptr);
  pool.deallocate(a, 100);
  EXPECT_EQ(pool.pool_stats().cached_bytes, 0u);
  EXPECT_EQ(pool.pool_stats().hits + pool.pool_stats().misses, 0);
}

TEST(PoolingAllocatorTest, TheCacheStaysWithinItsBound) {
  PoolingAllocator pool(cpu_allocator(), 1024, /*max_cached_bytes=*/10000);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(pool.allocate(4096));
  for (void* p : blocks) pool.deallocate(p, 4096);
  EXPECT_EQ(pool.pool_stats().cached_bytes, 8192u);  // the third and fourth went back to the base
}

TEST(PoolingAllocatorTest, AFullCacheEvictsTheLeastRecentlyCachedBlocks) {
  PoolingAllocator pool(cpu_allocator(), 1024, /*max_cached_bytes=*/10000);
  void* a = pool.allocate(4096);
  void* b = pool.allocate(4096);
  void* c = pool.allocate(6000);  // a size the workload then keeps using
  pool.deallocate(a, 4096);       // cached first: evicted first
  pool.deallocate(b, 4096);
  EXPECT_EQ(pool.pool_stats().cached_bytes, 8192u);
  pool.deallocate(c, 6000);  // needs 6000 of 10000: both 4096-byte blocks must go (a first, then b)
  EXPECT_EQ(pool.pool_stats().cached_bytes, 6000u);
  EXPECT_EQ(pool.pool_stats().evictions, 2);
  void* again = pool.allocate(6000);
  EXPECT_EQ(again, c);  // the block freed last is the one kept
  EXPECT_EQ(pool.pool_stats().hits, 1);
  pool.deallocate(again, 6000);
  void* big = pool.allocate(20000);  // larger than the whole bound: never cached, evicts nothing
  pool.deallocate(big, 20000);
  EXPECT_EQ(pool.pool_stats().cached_bytes, 6000u);
  EXPECT_EQ(pool.pool_stats().evictions, 2);
}

TEST(PoolingAllocatorTest, HostTensorsAndCpuKernelOutputsComeFromTheHostPool) {
  // A large host tensor freed and allocated again reuses the same warm block (no page faults).
  const auto before = cpu_host_pool()->pool_stats();
  void* first = nullptr;
  {
    Tensor t(DType::kFloat32, Shape{1 << 20});  // 4 MiB
    first = t.raw_data();
    EXPECT_EQ(t.data<float>()[12345], 0.f);
    t.data<float>()[12345] = 5.f;
  }
  Tensor again(DType::kFloat32, Shape{1 << 20});
  EXPECT_EQ(again.raw_data(), first);
  EXPECT_EQ(again.data<float>()[12345], 0.f);  // zero-filled even from a reused block
  EXPECT_GT(cpu_host_pool()->pool_stats().hits, before.hits);
}

TEST(PoolingAllocatorTest, HonoursAlignment) {
  PoolingAllocator pool(cpu_allocator(), 1024, 1 << 20);
  void* a = pool.allocate(4096, 64);
  pool.deallocate(a, 4096);
  void* b = pool.allocate(4096, 4096);  // the cached block was only asked 64-byte aligned
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 4096, 0u);
  pool.deallocate(b, 4096);
}

TEST(PoolingAllocatorTest, TensorsOnThePoolKeepTheirValuesAndReturnTheirBuffers) {
  PoolingAllocator pool(cpu_allocator(), 1024, 1 << 20);
  void* first = nullptr;
  {
    auto t = Tensor::allocate(&pool, DType::kFloat32, Shape{1024});
    ASSERT_TRUE(t.ok());
    first = t->raw_data();
    for (int i = 0; i < 1024; ++i) t->data<float>()[i] = static_cast<float>(i);
    Tensor copy = *t;  // shares the buffer: it must not go back to the pool yet
    t = Result<Tensor>(Tensor());
    EXPECT_EQ(pool.pool_stats().cached_bytes, 0u);
    EXPECT_EQ(copy.data<float>()[1023], 1023.f);
  }
  EXPECT_GT(pool.pool_stats().cached_bytes, 0u);  // the last reference returned it
  auto again = Tensor::allocate(&pool, DType::kFloat32, Shape{1024});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->raw_data(), first);
  EXPECT_EQ(pool.pool_stats().hits, 1);
}

}  // namespace
}  // namespace actorflow
