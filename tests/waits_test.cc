// The wait registry (core/waits.h) and the hang report (core/hang_report.h): registration,
// snapshot, deregistration, the threshold logged once, the metrics, the bounds, SIGUSR1.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/hang_report.h"
#include "core/metrics.h"
#include "core/waits.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;

const WaitInfo* find_wait(const std::vector<WaitInfo>& ws, uint64_t id) {
  for (const auto& w : ws)
    if (w.id == id) return &w;
  return nullptr;
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(WaitsTest, AHandleIsRegisteredWhileItLivesAndMovesWithItsWait) {
  const size_t before = WaitRegistry::global().size();
  uint64_t id = 0;
  {
    WaitHandle w("tensor", "step 7 waits for tensor a;b;c", "/job:worker/replica:0/task:1");
    ASSERT_TRUE(w.active());
    id = w.id();
    const auto snap = WaitRegistry::global().snapshot();
    const WaitInfo* i = find_wait(snap, id);
    ASSERT_NE(i, nullptr);
    EXPECT_EQ(i->kind, "tensor");
    EXPECT_EQ(i->what, "step 7 waits for tensor a;b;c");
    EXPECT_EQ(i->on, "/job:worker/replica:0/task:1");
    const int64_t now_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    EXPECT_LE(i->since_unix_ms, now_ms);
    EXPECT_GT(i->since_unix_ms, now_ms - 60000);
    EXPECT_GE(i->age_secs, 0.0);
    EXPECT_EQ(WaitRegistry::global().size(), before + 1);

    // Moved: still one wait, the same one; update keeps its start.
    WaitHandle moved = std::move(w);
    EXPECT_FALSE(w.active());  // NOLINT(bugprone-use-after-move): moved-from holds nothing
    EXPECT_EQ(moved.id(), id);
    moved.update("step 7 waits for tensor x;y;z", "/job:ps/replica:0/task:0");
    const auto snap2 = WaitRegistry::global().snapshot();
    const WaitInfo* j = find_wait(snap2, id);
    ASSERT_NE(j, nullptr);
    EXPECT_EQ(j->what, "step 7 waits for tensor x;y;z");
    EXPECT_EQ(j->on, "/job:ps/replica:0/task:0");
    EXPECT_EQ(j->since_unix_ms, i->since_unix_ms);
    EXPECT_EQ(WaitRegistry::global().size(), before + 1);
  }
  EXPECT_EQ(find_wait(WaitRegistry::global().snapshot(), id), nullptr);
  EXPECT_EQ(WaitRegistry::global().size(), before);
}

TEST(WaitsTest, ASnapshotIsOldestFirstAndTheJsonCarriesEveryField) {
  WaitHandle a("connect", "first", "/job:ps/replica:0/task:0");
  std::this_thread::sleep_for(5ms);  // two distinct start times (the clock is what is tested)
  WaitHandle b("model", "second \"quoted\" <b>\n", "");
  const auto snap = WaitRegistry::global().snapshot();
  size_t ia = snap.size(), ib = snap.size();
  for (size_t i = 0; i < snap.size(); ++i) {
    if (snap[i].id == a.id()) ia = i;
    if (snap[i].id == b.id()) ib = i;
  }
  ASSERT_LT(ia, snap.size());
  ASSERT_LT(ib, snap.size());
  EXPECT_LT(ia, ib);
  const std::string json = waits_json("/job:ps/replica:0/task:0", {snap[ib]});
  EXPECT_EQ(json.rfind("{\"task\": \"/job:ps/replica:0/task:0\", \"waits\": [{\"kind\": \"model\", \"what\": "
                       "\"second \\\"quoted\\\" \\u003cb>\\u000a\", \"on\": \"\", \"since_unix_ms\": ",
                       0),
            0u)
      << json;
  EXPECT_NE(json.find("\"age_secs\": "), std::string::npos) << json;
}

// GET /waits shows at most kMaxWaitsShown waits, the oldest, and says how many it left out.
TEST(WaitsTest, TheJsonShowsTheOldestWaitsUpToItsBoundAndCountsTheRest) {
  std::vector<WaitInfo> many(kMaxWaitsShown + 5);
  for (size_t i = 0; i < many.size(); ++i) {
    many[i].kind = "tensor";
    many[i].what = "wait " + std::to_string(i);
  }
  const std::string json = waits_json("/job:ps/replica:0/task:0", many);
  size_t shown = 0;
  for (size_t at = json.find("\"kind\""); at != std::string::npos; at = json.find("\"kind\"", at + 1)) ++shown;
  EXPECT_EQ(shown, kMaxWaitsShown);
  EXPECT_NE(json.find("\"wait 0\""), std::string::npos);
  EXPECT_EQ(json.find("\"wait " + std::to_string(kMaxWaitsShown) + "\""), std::string::npos);
  EXPECT_NE(json.find("\"omitted\": 5}"), std::string::npos) << json.substr(json.size() - 80);
  // Without a cut there is no "omitted".
  EXPECT_EQ(waits_json("t", {many[0]}).find("omitted"), std::string::npos);
}

TEST(WaitsTest, AWaitPastTheThresholdIsLoggedOnceAndCounted) {
  auto& reg = WaitRegistry::global();
  const auto old_threshold = reg.threshold();
  reg.set_threshold(20ms);
  Counter& over = Metrics::global().counter("actorflow_waits_over_threshold_total", "", {{"kind", "test-logged"}});
  Gauge& live = Metrics::global().gauge("actorflow_waits", "", {{"kind", "test-logged"}});
  Gauge& oldest = Metrics::global().gauge("actorflow_wait_oldest_seconds", "", {{"kind", "test-logged"}});
  const int64_t over_before = over.value();
  testing::internal::CaptureStderr();
  size_t logged_total = 0;
  {
    WaitHandle w("test-logged", "the contribution of worker/1 to step 3", "/job:worker/replica:0/task:1");
    // Young: nothing logged.
    reg.check();
    // Past the threshold (the passing of time is the condition): logged by the first check after.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (logged_total == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
      logged_total += reg.check();
    }
    // Never again, however often it is checked.
    for (int i = 0; i < 5; ++i) logged_total += reg.check();
    EXPECT_EQ(live.value(), 1);
    EXPECT_GE(oldest.value(), 0.02);
    const auto snap = reg.snapshot();
    const WaitInfo* i = find_wait(snap, w.id());
    ASSERT_NE(i, nullptr);
    EXPECT_TRUE(i->logged);
  }
  reg.check();
  const std::string err = testing::internal::GetCapturedStderr();
  reg.set_threshold(old_threshold);
  EXPECT_GE(logged_total, 1u);
  EXPECT_EQ(count(err, "for test-logged on /job:worker/replica:0/task:1: the contribution of worker/1 to step 3"), 1u)
      << err;
  EXPECT_EQ(over.value(), over_before + 1);
  EXPECT_EQ(live.value(), 0);  // gone: the gauge follows
  EXPECT_EQ(oldest.value(), 0);
}

TEST(WaitsTest, TheWatcherThreadLogsWithoutAnyoneChecking) {
  auto& reg = WaitRegistry::global();
  const auto old_threshold = reg.threshold();
  reg.set_threshold(20ms);
  testing::internal::CaptureStderr();
  bool logged = false;
  {
    WaitWatch watch;
    WaitHandle w("test-watched", "a wait nobody checks", "");
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!logged && std::chrono::steady_clock::now() < deadline) {
      const auto snap = reg.snapshot();
      const WaitInfo* i = find_wait(snap, w.id());
      logged = i && i->logged;
      if (!logged) std::this_thread::sleep_for(5ms);  // the watcher's period, not a message
    }
  }
  const std::string err = testing::internal::GetCapturedStderr();
  reg.set_threshold(old_threshold);
  EXPECT_TRUE(logged);
  EXPECT_EQ(count(err, "for test-watched: a wait nobody checks"), 1u) << err;
}

TEST(WaitsTest, TheRegistryIsBoundedAndCutsLongTexts) {
  auto& reg = WaitRegistry::global();
  Counter& refused = Metrics::global().counter("actorflow_waits_refused_total", "");
  const int64_t refused_before = refused.value();
  std::vector<WaitHandle> many;
  const size_t room = WaitRegistry::kMaxWaits - reg.size();
  many.reserve(room);
  for (size_t i = 0; i < room; ++i) many.emplace_back("test-bound", "w", "");
  EXPECT_EQ(reg.size(), WaitRegistry::kMaxWaits);
  WaitHandle extra("test-bound", "one too many", "");
  EXPECT_FALSE(extra.active());
  EXPECT_EQ(refused.value(), refused_before + 1);
  many.clear();
  WaitHandle big("test-bound", std::string(100000, 'x'), std::string(100000, 'y'));
  ASSERT_TRUE(big.active());
  const WaitInfo* i = nullptr;
  const auto snap = reg.snapshot();
  i = find_wait(snap, big.id());
  ASSERT_NE(i, nullptr);
  EXPECT_EQ(i->what.size(), WaitRegistry::kMaxText);
  EXPECT_EQ(i->on.size(), WaitRegistry::kMaxText);
}

TEST(WaitsTest, TheHangReportHasWaitsThreadsAndReporters) {
  WaitHandle w("sync-contributions", "variable 'global_step': step 4 has 1 of 2 gradients", "/job:worker/replica:0/task:1");
  std::string report;
  {
    DumpReporter r("device /job:ps/replica:0/task:0/device:CPU:0", [] { return std::string("steps in flight: 3\n"); });
    DumpReporter huge("huge", [] { return std::string(10 * DumpReporter::kMaxReportBytes, 'z'); });
    report = hang_report("/job:ps/replica:0/task:0");
  }
  EXPECT_EQ(report.rfind("hang report of /job:ps/replica:0/task:0 (pid ", 0), 0u) << report.substr(0, 200);
  EXPECT_NE(report.find("sync-contributions  on /job:worker/replica:0/task:1  variable 'global_step': step 4 has 1 of 2 "
                        "gradients"),
            std::string::npos)
      << report.substr(0, 2000);
  // This thread is listed with its state (running: R).
  EXPECT_NE(report.find("== threads\n"), std::string::npos);
  EXPECT_NE(report.find("  R  "), std::string::npos) << report.substr(0, 4000);
  EXPECT_NE(report.find("-- device /job:ps/replica:0/task:0/device:CPU:0\nsteps in flight: 3\n"), std::string::npos);
  EXPECT_LT(count(report, "z"), DumpReporter::kMaxReportBytes + 10);
  EXPECT_LE(report.size(), kMaxDumpBytes + 200);
  // Dropped reporters are gone.
  const std::string later = hang_report("");
  EXPECT_EQ(later.find("-- device /job:ps/replica:0/task:0/device:CPU:0"), std::string::npos);
}

TEST(WaitsTest, SigusrOneWritesTheHangReportToStderr) {
  WaitHandle w("test-signal", "waiting for the signal test", "/job:worker/replica:0/task:1");
  testing::internal::CaptureStderr();
  int reports = 0;
  {
    auto d = DumpOnSignal::install(SIGUSR1, [] { return std::string("/job:test/replica:0/task:0"); });
    ASSERT_TRUE(d.ok()) << d.status();
    auto second = DumpOnSignal::install(SIGUSR1, [] { return std::string(); });
    EXPECT_EQ(second.status().code(), Code::kFailedPrecondition);
    ::raise(SIGUSR1);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while ((*d)->reports() < 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    reports = (*d)->reports();
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(reports, 1);
  EXPECT_NE(err.find("hang report requested by signal " + std::to_string(SIGUSR1)), std::string::npos) << err;
  EXPECT_NE(err.find("hang report of /job:test/replica:0/task:0"), std::string::npos) << err;
  EXPECT_NE(err.find("test-signal  on /job:worker/replica:0/task:1  waiting for the signal test"), std::string::npos) << err;
  // Uninstalled: the previous disposition is back (a second install works).
  auto again = DumpOnSignal::install(SIGUSR1, nullptr);
  EXPECT_TRUE(again.ok()) << again.status();
}

}  // namespace
}  // namespace actorflow
