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
