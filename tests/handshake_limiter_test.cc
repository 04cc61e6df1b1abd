// net::HandshakeLimiter (net/handshake_limiter.h) on an injected clock: the burst, the steady
// rate, independence of addresses, the bounded table (least recently seen forgotten first), the
// environment variables. The limiter against a real ClientHello flood on real `actorflow node`
// processes: SecurityHealthTest.ACompleteClientHelloFloodDoesNotSlowAnHonestStatus
// (tests/security_test.cc).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "net/handshake_limiter.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using net::Clock;
using net::HandshakeLimiter;
using net::HandshakeLimits;

// A clock the test moves by hand.
struct FakeClock {
  Clock::time_point t = Clock::time_point() + 1000s;
  HandshakeLimiter::Now fn() {
    return [this] { return t; };
  }
};

HandshakeLimits limits(int64_t burst, int64_t per_second, size_t max_addresses = 4096) {
  HandshakeLimits l;
  l.burst = burst;
  l.per_second = per_second;
  l.max_addresses = max_addresses;
  return l;
}

// How many of `n` handshakes from `host` are admitted now.
int admitted(HandshakeLimiter& l, const std::string& host, int n) {
  int ok = 0;
  for (int i = 0; i < n; ++i) ok += l.admit(host) ? 1 : 0;
  return ok;
}

TEST(HandshakeLimiterTest, AnAddressGetsItsBurstThenItsRate) {
  FakeClock clock;
  HandshakeLimiter l(limits(32, 16), clock.fn());
  EXPECT_EQ(admitted(l, "127.0.0.2", 100), 32);  // the burst, nothing more at the same instant
  clock.t += 1s;
  EXPECT_EQ(admitted(l, "127.0.0.2", 100), 16);  // one second's rate
  clock.t += 250ms;
  EXPECT_EQ(admitted(l, "127.0.0.2", 100), 4);
  clock.t += 62ms;  // 0.992 of a token: not yet
  EXPECT_EQ(admitted(l, "127.0.0.2", 1), 0);
  clock.t += 1ms;
  EXPECT_EQ(admitted(l, "127.0.0.2", 1), 1);
  // A long quiet time refills the bucket to its burst, not beyond.
  clock.t += 3600s;
  EXPECT_EQ(admitted(l, "127.0.0.2", 100), 32);
  const auto s = l.stats();
  EXPECT_EQ(s.admitted, 32 + 16 + 4 + 1 + 32);
  EXPECT_EQ(s.refused, 68 + 84 + 96 + 1 + 68);
  EXPECT_EQ(s.tracked, 1u);
}

TEST(HandshakeLimiterTest, AnAddressOverItsRateDoesNotDelayAnother) {
  FakeClock clock;
  HandshakeLimiter l(limits(8, 2), clock.fn());
  EXPECT_EQ(admitted(l, "10.0.0.66", 1000), 8);
  EXPECT_EQ(admitted(l, "127.0.0.1", 8), 8);  // its own full burst at the same instant
  for (int i = 0; i < 10; ++i) {
    clock.t += 500ms;
    EXPECT_EQ(admitted(l, "10.0.0.66", 1000), 1) << i;
    EXPECT_TRUE(l.admit("127.0.0.1")) << i;
  }
  EXPECT_EQ(l.stats().tracked, 2u);
}

TEST(HandshakeLimiterTest, TheTableIsBoundedAndForgetsTheLeastRecentlySeen) {
  FakeClock clock;
  HandshakeLimiter l(limits(2, 1, 3), clock.fn());
  EXPECT_EQ(admitted(l, "a", 5), 2);
  EXPECT_EQ(admitted(l, "b", 5), 2);
  EXPECT_EQ(admitted(l, "c", 5), 2);
  EXPECT_EQ(admitted(l, "a", 1), 0);  // "a" is the most recently seen now; "b" the least
  EXPECT_EQ(admitted(l, "d", 5), 2);  // a fourth address: "b" is forgotten
  EXPECT_EQ(l.stats().tracked, 3u);
  EXPECT_EQ(admitted(l, "a", 1), 0);  // still tracked, still empty
  EXPECT_EQ(admitted(l, "c", 1), 0);
  EXPECT_EQ(admitted(l, "b", 5), 2);  // forgotten: it starts over with a full bucket
  EXPECT_EQ(l.stats().tracked, 3u);
  // Many addresses: the table never holds more than its bound.
  for (int i = 0; i < 10000; ++i) (void)l.admit("10.1." + std::to_string(i / 256) + "." + std::to_string(i % 256));
  EXPECT_EQ(l.stats().tracked, 3u);
}

TEST(HandshakeLimiterTest, LimitsAreRaisedToAtLeastOne) {
  FakeClock clock;
  HandshakeLimiter l(limits(0, 0, 0), clock.fn());
  EXPECT_EQ(l.limits().burst, 1);
  EXPECT_EQ(l.limits().per_second, 1);
  EXPECT_EQ(l.limits().max_addresses, 1u);
  EXPECT_EQ(admitted(l, "x", 3), 1);
  clock.t += 1s;
  EXPECT_EQ(admitted(l, "x", 3), 1);
}

TEST(HandshakeLimiterTest, TheEnvironmentSetsTheRuleAndBadValuesKeepTheDefaults) {
  ::setenv("ACTORFLOW_TLS_HANDSHAKE_BURST", "100", 1);
  ::setenv("ACTORFLOW_TLS_HANDSHAKES_PER_SECOND", "7", 1);
  HandshakeLimits l = HandshakeLimits::from_env();
  EXPECT_EQ(l.burst, 100);
  EXPECT_EQ(l.per_second, 7);
  ::setenv("ACTORFLOW_TLS_HANDSHAKE_BURST", "-3", 1);
  ::setenv("ACTORFLOW_TLS_HANDSHAKES_PER_SECOND", "lots", 1);
  l = HandshakeLimits::from_env();
  EXPECT_EQ(l.burst, HandshakeLimits().burst);
  EXPECT_EQ(l.per_second, HandshakeLimits().per_second);
  ::unsetenv("ACTORFLOW_TLS_HANDSHAKE_BURST");
  ::unsetenv("ACTORFLOW_TLS_HANDSHAKES_PER_SECOND");
  EXPECT_EQ(HandshakeLimits::from_env().burst, 32);
  EXPECT_EQ(HandshakeLimits::from_env().per_second, 16);
}

TEST(HandshakeLimiterTest, ConcurrentListenersShareOneBucketPerAddress) {
  FakeClock clock;  // never moves: exactly the burst is admitted, whichever thread asks
  HandshakeLimiter l(limits(500, 1), clock.fn());
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] { ok += admitted(l, "127.0.0.2", 1000); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 500);
  EXPECT_EQ(l.stats().admitted + l.stats().refused, 4000);
  EXPECT_EQ(HandshakeLimiter::process().get(), HandshakeLimiter::process().get());  // one per process
}

}  // namespace
}  // namespace actorflow
