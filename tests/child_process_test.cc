// tests/util's ChildProcess: waits end at once, with the reason, when the process exits or
// prints a fail-fast line ("giving up on it", "cannot listen"), well before their timeouts.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "net/port_reservation.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using Clock = std::chrono::steady_clock;

std::unique_ptr<ChildProcess> sh(const std::string& script, std::vector<std::string> fail_fast =
                                                                testing::default_fail_fast_lines()) {
  return ChildProcess::start({"/bin/sh", "-c", script}, {}, std::move(fail_fast));
}

double secs_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

TEST(ChildProcessTest, FindsTheNeedleAndCountsIt) {
  auto p = sh("echo one; echo Step: 1; echo Step: 2; exec sleep 60");
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->wait_for_output("Step: ", 30s, 2)) << p->output();
  EXPECT_TRUE(p->await_output("one", 30s).ok());
  const auto t0 = Clock::now();
  const Status st = p->await_output("Step: ", 300ms, 3);
  EXPECT_EQ(st.code(), Code::kDeadlineExceeded) << st;
  EXPECT_GE(secs_since(t0), 0.29);
  EXPECT_TRUE(p->running());
}

// Two processes teeing into one SharedLog: every line of both, whole (a line written in two
// pieces arrives as one), and a last line without '\n' when the output ends.
TEST(ChildProcessTest, ProcessesTeeWholeLinesIntoASharedLog) {
  auto log = std::make_shared<testing::SharedLog>();
  auto a = ChildProcess::start({"/bin/sh", "-c", "for i in 1 2 3; do echo a$i; done; printf 'a-pa'; sleep 0.2; echo rt"},
                               {}, {}, log);
  auto b = ChildProcess::start({"/bin/sh", "-c", "echo b1; printf 'b-last'"}, {}, {}, log);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->wait(30s), 0);
  EXPECT_EQ(b->wait(30s), 0);
  a.reset();  // the reader threads have seen the end of the output
  b.reset();
  std::vector<std::string> lines;
  std::istringstream in(log->text());
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"a-part", "a1", "a2", "a3", "b-last", "b1"})) << log->text();
}

TEST(ChildProcessTest, AnExitEndsTheWaitAtOnceWithTheExitStatus) {
  auto p = sh("echo starting; exit 3");
  ASSERT_TRUE(p);
  const auto t0 = Clock::now();
  const Status st = p->await_output("serving", 60s);
  EXPECT_LT(secs_since(t0), 5.0) << "the wait should end with the process, not after 60 s";
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("exited with exit code 3 before printing 'serving'"), std::string::npos) << st;
  // The gtest adapter carries the same reason.
  const ::testing::AssertionResult r = p->wait_for_output("serving", 60s);
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("exit code 3"), std::string::npos) << r.message();
  EXPECT_EQ(p->wait(1s), 3);
  EXPECT_FALSE(p->running());
}

TEST(ChildProcessTest, AnExitEndsTheWaitEvenWhileAGrandchildHoldsTheOutput) {
  // `sleep` keeps the output pipe open after the shell exited (as `up`'s tasks may).
  auto p = sh("sleep 2 & echo started; exit 0");
  ASSERT_TRUE(p);
  const auto t0 = Clock::now();
  const Status st = p->await_output("never printed", 60s);
  EXPECT_LT(secs_since(t0), 1.5) << st;
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st;
}

TEST(ChildProcessTest, AGiveUpLineEndsEveryWaitAtOnce) {
  // What `actorflow up` prints when it stops restarting a task; it keeps running the others.
  auto p = sh("echo 'E up.cc:150] worker/0 failed (exit code 1) 6 times within 60 s; max_restarts = 5: giving up "
              "on it'; exec sleep 60");
  ASSERT_TRUE(p);
  auto t0 = Clock::now();
  Status st = p->await_output("Step: ", 60s);
  EXPECT_LT(secs_since(t0), 5.0);
  EXPECT_EQ(st.code(), Code::kAborted) << st;
  EXPECT_NE(st.message().find("worker/0 failed (exit code 1) 6 times"), std::string::npos) << st;
  t0 = Clock::now();
  const Result<int> code = p->await_exit(60s);
  EXPECT_LT(secs_since(t0), 5.0);
  EXPECT_EQ(code.status().code(), Code::kAborted) << code.status();
  EXPECT_TRUE(p->running());
  EXPECT_NE(p->fail_fast_line().find("giving up on it"), std::string::npos);
}

TEST(ChildProcessTest, APortTakenEndsTheWaitAtOnce) {
  auto p = sh("echo 'actorflow node: /job:worker/replica:0/task:0 at localhost:20001: cannot listen (bind failed); "
              "is the address already in use?'; exec sleep 60");
  ASSERT_TRUE(p);
  const auto t0 = Clock::now();
  const Status st = p->await_output("serving", 60s);
  EXPECT_LT(secs_since(t0), 5.0);
  EXPECT_EQ(st.code(), Code::kAborted) << st;
  EXPECT_NE(st.message().find("cannot listen"), std::string::npos) << st;
}

TEST(ChildProcessTest, FailFastLinesCanBeTurnedOff) {
  auto p = sh("echo 'cannot listen'; echo serving; exit 1", {});
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->wait_for_output("serving", 30s)) << p->output();
  const Result<int> code = p->await_exit(30s);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
}

TEST(ChildProcessTest, ASignalIsReportedAsSuch) {
  auto p = sh("exec sleep 60");
  ASSERT_TRUE(p);
  p->signal(SIGKILL);
  const Result<int> code = p->await_exit(30s);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 128 + SIGKILL);
  const Status st = p->await_output("x", 30s);
  EXPECT_NE(st.message().find("killed by signal 9"), std::string::npos) << st;
}

TEST(ChildProcessTest, FreePortsAreDistinctAndOutsideTheEphemeralRange) {
  const int a = testing::free_port(), b = testing::free_port();
  EXPECT_NE(a, b);
  EXPECT_GT(a, 0);
  auto eph = net::ephemeral_port_range();
  ASSERT_TRUE(eph.ok()) << eph.status();
  if (net::reservable_port_range(*eph).size() < 65535 - 1024 + 1) {
    EXPECT_FALSE(eph->contains(a)) << a;
    EXPECT_FALSE(eph->contains(b)) << b;
  }
}

}  // namespace
}  // namespace actorflow

namespace actorflow {
namespace {

// The sanitizer slowdown factor: a number in [1, 20] from $AF_TEST_SLOWDOWN, else 1.
TEST(TestSlowdownTest, ScalesOnlyByAValidFactor) {
  const char* saved = std::getenv("AF_TEST_SLOWDOWN");
  const std::string keep = saved ? saved : "";
  auto with = [](const char* v) {
    if (v) setenv("AF_TEST_SLOWDOWN", v, 1);
    else unsetenv("AF_TEST_SLOWDOWN");
  };
  with(nullptr);
  EXPECT_EQ(testing::slowdown(), 1);
  EXPECT_EQ(testing::scaled_secs(5), "5");
  with("4");
  EXPECT_EQ(testing::slowdown(), 4);
  EXPECT_EQ(testing::scaled_secs(5), "20");
  with("2.5");
  EXPECT_EQ(testing::scaled_secs(3), "7.5");
  for (const char* bad : {"", "abc", "0.5", "0", "-3", "21", "4x"}) {
    with(bad);
    EXPECT_EQ(testing::slowdown(), 1) << "'" << bad << "'";
  }
  with(saved ? keep.c_str() : nullptr);
}

}  // namespace
}  // namespace actorflow
