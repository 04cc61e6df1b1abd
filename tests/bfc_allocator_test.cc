// BFCAllocator on host memory: alignment, reuse, coalescing, the hard limit, region growth,
// fragmentation and a random stress run checked against a shadow model.
#include "device/bfc_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace actorflow {
namespace {

// Counts the regions handed out so tests can see growth and the final release.
class CountingSubAllocator final : public SubAllocator {
 public:
  struct Counters {
    int allocs = 0, frees = 0;
    std::vector<size_t> sizes;
    size_t refuse_above = SIZE_MAX;  // simulate a device with less memory than promised
  };
  explicit CountingSubAllocator(Counters* c) : c_(c) {}
  void* alloc(size_t alignment, size_t bytes) override {
    if (bytes > c_->refuse_above) return nullptr;
    c_->allocs++;
    c_->sizes.push_back(bytes);
    return host_.alloc(alignment, bytes);
  }
  void free(void* p, size_t bytes) override {
    c_->frees++;
    host_.free(p, bytes);
  }
  bool host_accessible() const override { return true; }

 private:
  Counters* c_;
  HostSubAllocator host_;
};

std::unique_ptr<BFCAllocator> make(int64_t limit, bool growth, int64_t initial = 1024,
                                   CountingSubAllocator::Counters* counters = nullptr) {
  BFCOptions o;
  o.memory_limit = limit;
  o.allow_growth = growth;
  o.initial_region_bytes = initial;
  std::unique_ptr<SubAllocator> sub;
  if (counters)
    sub = std::make_unique<CountingSubAllocator>(counters);
  else
    sub = std::make_unique<HostSubAllocator>();
  auto a = BFCAllocator::create(std::move(sub), "test_bfc", o);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? std::move(*a) : nullptr;
}

TEST(BFCAllocatorTest, RoundsToMultiplesOf256) {
  EXPECT_EQ(BFCAllocator::rounded_bytes(0), 256u);
  EXPECT_EQ(BFCAllocator::rounded_bytes(1), 256u);
  EXPECT_EQ(BFCAllocator::rounded_bytes(256), 256u);
  EXPECT_EQ(BFCAllocator::rounded_bytes(257), 512u);
  EXPECT_EQ(BFCAllocator::rounded_bytes(4000), 4096u);
}

TEST(BFCAllocatorTest, RejectsBadOptions) {
  BFCOptions o;
  o.memory_limit = 0;
  auto a = BFCAllocator::create(std::make_unique<HostSubAllocator>(), "gpu_0_bfc", o);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), Code::kInvalidArgument);
  EXPECT_NE(a.status().message().find("gpu_0_bfc"), std::string::npos) << a.status();
  EXPECT_NE(a.status().message().find("memory_limit"), std::string::npos) << a.status();
}

TEST(BFCAllocatorTest, Alignment) {
  auto a = make(1 << 20, true, 4096);
  std::vector<std::pair<void*, size_t>> live;
  for (size_t align : {1u, 8u, 64u, 256u, 512u, 4096u}) {
    for (size_t bytes : {1u, 100u, 300u, 5000u}) {
      void* p = a->allocate(bytes, align);
      ASSERT_NE(p, nullptr) << bytes << " @ " << align;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % std::max<size_t>(align, 256), 0u) << bytes << " @ " << align;
      std::memset(p, 0xab, bytes);  // the memory is writable for its full length
      live.push_back({p, bytes});
      ASSERT_TRUE(a->check_invariants().ok()) << a->check_invariants();
    }
  }
  // No two allocations overlap.
  std::sort(live.begin(), live.end());
  for (size_t i = 1; i < live.size(); ++i)
    EXPECT_GE(static_cast<char*>(live[i].first), static_cast<char*>(live[i - 1].first) + live[i - 1].second);
  for (auto& [p, n] : live) a->deallocate(p, n);
  EXPECT_TRUE(a->check_invariants().ok()) << a->check_invariants();
  EXPECT_EQ(a->stats().bytes_in_use, 0);
  EXPECT_EQ(a->allocate(64, 3), nullptr);  // alignment not a power of two
  EXPECT_EQ(a->allocate(64, 0), nullptr);
}

TEST(BFCAllocatorTest, ZeroByteAllocationsAreDistinct) {
  auto a = make(4096, false);
  void* p = a->allocate(0);
  void* q = a->allocate(0);
  ASSERT_NE(p, nullptr);
  ASSERT_NE(q, nullptr);
  EXPECT_NE(p, q);
  a->deallocate(p, 0);
  a->deallocate(q, 0);
  EXPECT_TRUE(a->check_invariants().ok());
}

TEST(BFCAllocatorTest, ReuseAfterFree) {
  CountingSubAllocator::Counters c;
  auto a = make(1 << 20, true, 1 << 16, &c);
  void* p = a->allocate(1000);
  ASSERT_NE(p, nullptr);
  a->deallocate(p, 1000);
  void* q = a->allocate(1000);
  EXPECT_EQ(q, p);  // best fit, lowest address: the same chunk comes back
  a->deallocate(q, 1000);
  EXPECT_EQ(c.allocs, 1);  // no new region was needed
  auto s = a->stats();
  EXPECT_EQ(s.num_allocs, 2);
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.peak_bytes_in_use, 1024);  // one chunk of 1000 rounded to 1024
  EXPECT_EQ(s.largest_alloc, 1024);
  EXPECT_EQ(s.bytes_limit, 1 << 20);
}

TEST(BFCAllocatorTest, BestFitPrefersTheSmallestHole) {
  auto a = make(64 * 1024, false);
  // Layout: [A 4K][B 1K][C 4K][D 2K][E 1K][tail]; free B and D: holes of 1K and 2K.
  void* A = a->allocate(4096);
  void* B = a->allocate(1024);
  void* C = a->allocate(4096);
  void* D = a->allocate(2048);
  void* E = a->allocate(1024);  // keeps D from merging with the free tail
  ASSERT_TRUE(A && B && C && D && E);
  a->deallocate(B, 1024);
  a->deallocate(D, 2048);
  EXPECT_EQ(a->allocate(1500), D);  // the 2K hole, not the tail
  EXPECT_EQ(a->allocate(600), B);   // the 1K hole
  EXPECT_TRUE(a->check_invariants().ok()) << a->check_invariants();
}

TEST(BFCAllocatorTest, CoalescingLetsABigRequestSucceed) {
  // 16 KiB reserved up front, no growth: only merging free neighbours can serve 16 KiB.
  auto a = make(16 * 1024, false);
  std::vector<void*> ps;
  for (int i = 0; i < 16; ++i) {
    ps.push_back(a->allocate(1024));
    ASSERT_NE(ps.back(), nullptr);
  }
  EXPECT_EQ(a->allocate(1024), nullptr);  // full
  // Free in an interleaved order so merges happen with the previous, the next and both.
  for (int i : {1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14}) {
    a->deallocate(ps[static_cast<size_t>(i)], 1024);
    ASSERT_TRUE(a->check_invariants().ok()) << a->check_invariants();
  }
  EXPECT_EQ(a->bfc_stats().num_free_chunks, 1);
  void* big = a->allocate(16 * 1024);
  EXPECT_EQ(big, ps[0]);
  a->deallocate(big, 16 * 1024);
}

TEST(BFCAllocatorTest, LimitIsEnforced) {
  CountingSubAllocator::Counters c;
  auto a = make(8 * 1024, true, 1024, &c);
  EXPECT_EQ(a->allocate(8 * 1024 + 1), nullptr);  // beyond the cap outright
  void* p = a->allocate(6 * 1024);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(a->allocate(4 * 1024), nullptr);  // 6K + 4K > 8K
  void* q = a->allocate(2 * 1024);            // exactly fills the cap
  ASSERT_NE(q, nullptr);
  auto s = a->bfc_stats();
  EXPECT_LE(s.bytes_reserved, 8 * 1024);
  EXPECT_EQ(s.base.bytes_in_use, 8 * 1024);
  EXPECT_EQ(s.num_failed_allocs, 2);
  EXPECT_NE(a->summary().find("limit 8.0KiB (8192 bytes)"), std::string::npos) << a->summary();
  a->deallocate(p, 0);
  a->deallocate(q, 0);
  EXPECT_TRUE(a->check_invariants().ok()) << a->check_invariants();
}

TEST(BFCAllocatorTest, ReserveUpFrontTakesTheWholeLimitOnce) {
  CountingSubAllocator::Counters c;
  auto a = make(64 * 1024, false, 1024, &c);
  ASSERT_EQ(c.allocs, 1);
  EXPECT_EQ(c.sizes[0], 64u * 1024);
  EXPECT_EQ(a->bfc_stats().bytes_reserved, 64 * 1024);
  std::vector<void*> ps;
  for (int i = 0; i < 8; ++i) ps.push_back(a->allocate(8 * 1024));
  for (void* p : ps) EXPECT_NE(p, nullptr);
  EXPECT_EQ(a->allocate(1), nullptr);
  EXPECT_EQ(c.allocs, 1);  // never grows
  for (void* p : ps) a->deallocate(p, 0);
  a.reset();
  EXPECT_EQ(c.frees, 1);  // the region goes back on destruction
}

TEST(BFCAllocatorTest, ReserveUpFrontFailsWhenTheDeviceRefuses) {
  CountingSubAllocator::Counters c;
  c.refuse_above = 1024;
  BFCOptions o;
  o.memory_limit = 1 << 20;
  o.allow_growth = false;
  auto a = BFCAllocator::create(std::make_unique<CountingSubAllocator>(&c), "gpu_1_bfc", o);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), Code::kResourceExhausted);
  EXPECT_NE(a.status().message().find("could not reserve 1.0MiB"), std::string::npos) << a.status();
}

TEST(BFCAllocatorTest, GrowthDoublesRegionsUpToTheLimit) {
  CountingSubAllocator::Counters c;
  auto a = make(32 * 1024, true, 1024, &c);
  EXPECT_EQ(c.allocs, 0);  // nothing reserved before the first request
  std::vector<void*> ps;
  for (int i = 0; i < 31; ++i) {
    void* p = a->allocate(1024);
    if (!p) break;
    ps.push_back(p);
  }
  // Regions of 1K, 2K, 4K, 8K, 16K = 31K; the last 1K of the cap becomes a final region.
  std::vector<size_t> want = {1024, 2048, 4096, 8192, 16384};
  ASSERT_GE(c.sizes.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(c.sizes[i], want[i]) << "region " << i;
  EXPECT_EQ(ps.size(), 31u);
  void* last = a->allocate(1024);
  ASSERT_NE(last, nullptr);  // region 6: what is left of the limit (1K)
  EXPECT_EQ(c.sizes.back(), 1024u);
  EXPECT_EQ(a->allocate(1), nullptr);
  EXPECT_EQ(a->bfc_stats().bytes_reserved, 32 * 1024);
  EXPECT_TRUE(a->check_invariants().ok()) << a->check_invariants();
  for (void* p : ps) a->deallocate(p, 0);
  a->deallocate(last, 0);
  EXPECT_TRUE(a->check_invariants().ok()) << a->check_invariants();
  a.reset();
  EXPECT_EQ(c.frees, c.allocs);
}

TEST(BFCAllocatorTest, GrowthBacksOffWhenTheDeviceHasLessThanPromised) {
  CountingSubAllocator::Counters c;
  c.refuse_above = 3000;
  auto a = make(1 << 20, true, 1024, &c);
  void* p = a->allocate(1024);  // region 1K
  void* q = a->allocate(2048);  // wants a 2K region, fine
  void* r = a->allocate(2048);  // wants 4K, refused; backs off to something <= 3000
  EXPECT_NE(p, nullptr);
  EXPECT_NE(q, nullptr);
  EXPECT_NE(r, nullptr);
  EXPECT_LE(c.sizes.back(), 3000u);
  for (void* x : {p, q, r}) a->deallocate(x, 0);
}

TEST(BFCAllocatorTest, FragmentationScenario) {
  // 32 KiB up front. Fill with 32 x 1K, free every other one: 16K free but no 2K hole.
  auto a = make(32 * 1024, false);
  std::vector<void*> ps;
  for (int i = 0; i < 32; ++i) ps.push_back(a->allocate(1024));
  for (int i = 0; i < 32; i += 2) a->deallocate(ps[static_cast<size_t>(i)], 0);
  auto s = a->bfc_stats();
  EXPECT_EQ(s.base.bytes_in_use, 16 * 1024);
  EXPECT_EQ(s.num_free_chunks, 16);
  EXPECT_EQ(s.largest_free_chunk, 1024);
  EXPECT_EQ(a->allocate(2048), nullptr);  // fragmented: fails although 16K are free
  // Freeing one odd neighbour joins three 1K chunks into a 3K hole.
  a->deallocate(ps[5], 0);
  EXPECT_EQ(a->bfc_stats().largest_free_chunk, 3 * 1024);
  void* p = a->allocate(3 * 1024);
  EXPECT_EQ(p, ps[4]);
  EXPECT_TRUE(a->check_invariants().ok()) << a->check_invariants();
  a->deallocate(p, 0);
  for (int i = 1; i < 32; i += 2) {
    if (i != 5) a->deallocate(ps[static_cast<size_t>(i)], 0);
  }
  EXPECT_EQ(a->bfc_stats().num_free_chunks, 1);
  void* all = a->allocate(32 * 1024);
  EXPECT_NE(all, nullptr);
  a->deallocate(all, 0);
}

TEST(BFCAllocatorTest, UnknownPointerIsIgnored) {
  auto a = make(4096, false);
  int x = 0;
  a->deallocate(&x, 4);  // logged, not fatal
  EXPECT_TRUE(a->check_invariants().ok());
}

// Random alloc/free against a shadow model: every live block keeps a byte pattern, blocks
// never overlap, counters match the model, invariants hold throughout.
TEST(BFCAllocatorTest, RandomStressAgainstShadowModel) {
  for (bool growth : {true, false}) {
    auto a = make(4 << 20, growth, 4096);
    std::mt19937 rng(growth ? 1234 : 5678);
    struct Block { size_t bytes; uint8_t tag; };
    std::map<char*, Block> live;
    int64_t model_in_use = 0;
    for (int step = 0; step < 6000; ++step) {
      bool do_alloc = live.empty() || (rng() % 100) < 55;
      if (do_alloc) {
        size_t bytes = (rng() % 4 == 0) ? (rng() % 200000) : (rng() % 3000);
        size_t align = size_t{1} << (rng() % 11);  // 1 .. 1024
        char* p = static_cast<char*>(a->allocate(bytes, align));
        if (!p) {
          // A failure is legitimate only when no free chunk can hold the request and the
          // limit leaves no room for a region that could.
          auto s = a->bfc_stats();
          const int64_t worst = static_cast<int64_t>(BFCAllocator::rounded_bytes(bytes) +
                                                     (align > 256 ? align - 256 : 0));
          ASSERT_GT(s.bytes_reserved + worst, int64_t{4} << 20) << "failed although the limit allows growth";
          ASSERT_LT(s.base.bytes_in_use, int64_t{4} << 20);
          if (align <= 256) {
            ASSERT_LT(s.largest_free_chunk, worst) << "failed although a free chunk fits";
          }
          continue;
        }
        ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % std::max<size_t>(align, 256), 0u);
        auto next = live.lower_bound(p);
        if (next != live.end()) {
          ASSERT_LE(p + bytes, next->first) << "overlaps the next block";
        }
        if (next != live.begin()) {
          auto prev = std::prev(next);
          ASSERT_LE(prev->first + std::max<size_t>(prev->second.bytes, 1), p) << "overlaps the previous block";
        }
        uint8_t tag = static_cast<uint8_t>(rng());
        std::memset(p, tag, bytes);
        live[p] = {bytes, tag};
        model_in_use += static_cast<int64_t>(BFCAllocator::rounded_bytes(bytes));
      } else {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        for (size_t i = 0; i < it->second.bytes; i += 97)
          ASSERT_EQ(static_cast<uint8_t>(it->first[i]), it->second.tag) << "block content clobbered";
        model_in_use -= static_cast<int64_t>(BFCAllocator::rounded_bytes(it->second.bytes));
        a->deallocate(it->first, it->second.bytes);
        live.erase(it);
      }
      if (step % 50 == 0) {
        ASSERT_TRUE(a->check_invariants().ok()) << a->check_invariants() << " at step " << step;
      }
      auto s = a->bfc_stats();
      ASSERT_EQ(s.base.bytes_in_use, model_in_use) << "step " << step;
      ASSERT_LE(s.bytes_reserved, 4 << 20);
    }
    for (auto& [p, b] : live) a->deallocate(p, b.bytes);
    ASSERT_TRUE(a->check_invariants().ok()) << a->check_invariants();
    auto s = a->bfc_stats();
    EXPECT_EQ(s.base.bytes_in_use, 0);
    EXPECT_EQ(s.num_free_chunks, s.num_regions);  // everything merged back per region
  }
}

TEST(BFCAllocatorTest, ConcurrentUseIsSafe) {
  auto a = make(8 << 20, true, 64 * 1024);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&a, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<std::pair<void*, size_t>> mine;
      for (int i = 0; i < 2000; ++i) {
        if (mine.empty() || rng() % 2) {
          size_t n = rng() % 5000 + 1;
          void* p = a->allocate(n);
          if (p) {
            std::memset(p, t, n);
            mine.push_back({p, n});
          }
        } else {
          a->deallocate(mine.back().first, mine.back().second);
          mine.pop_back();
        }
      }
      for (auto& [p, n] : mine) a->deallocate(p, n);
    });
  }
  for (auto& th : ts) th.join();
  EXPECT_TRUE(a->check_invariants().ok()) << a->check_invariants();
  EXPECT_EQ(a->stats().bytes_in_use, 0);
}

TEST(BFCAllocatorTest, HumanBytes) {
  EXPECT_EQ(human_bytes(12), "12B");
  EXPECT_EQ(human_bytes(1536), "1.5KiB");
  EXPECT_EQ(human_bytes(3 << 20), "3.0MiB");
  EXPECT_EQ(human_bytes(int64_t{5} << 30), "5.0GiB");
}

}  // namespace
}  // namespace actorflow
