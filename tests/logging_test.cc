// AF_LOG (core/logging.h) inside unbraced if/else and loops: the branch taken is the one the code
// reads, a line is written exactly when the level is at or above the minimum, and a suppressed
// statement evaluates nothing it streams.
//
// -Wdangling-else is an error here whatever AF_WERROR says: the former `if (..) {} else stream`
// macro made every unbraced `if (c) AF_LOG(..) << x;` draw that warning, so this file did not
// compile against it.
#pragma GCC diagnostic error "-Wdangling-else"

#include <gtest/gtest.h>

#include <string>

#include "core/logging.h"

namespace actorflow {
namespace {

// Restores the process's minimum log level when a test ends (other tests in the binary log too).
class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = min_log_level(); }
  void TearDown() override { set_min_log_level(saved_); }

 private:
  LogLevel saved_ = LogLevel::INFO;
};

// Runs `body` with stderr captured and returns what it wrote to fd 2 (AF_LOG writes there).
template <typename F>
std::string captured_stderr(F body) {
  ::testing::internal::CaptureStderr();
  body();
  return ::testing::internal::GetCapturedStderr();
}

int count_lines(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

TEST_F(LoggingTest, UnbracedIfElseTakesTheBranchItReads) {
  set_min_log_level(LogLevel::INFO);
  for (bool cond : {true, false}) {
    int else_taken = 0;
    const std::string out = captured_stderr([&] {
      if (cond)
        AF_LOG(INFO) << "then-branch cond=" << cond;
      else
        ++else_taken;
    });
    if (cond) {
      EXPECT_EQ(else_taken, 0);
      EXPECT_EQ(count_lines(out, "then-branch cond=1"), 1) << out;
    } else {
      EXPECT_EQ(else_taken, 1);
      EXPECT_EQ(out, "");
    }
  }
}

TEST_F(LoggingTest, UnbracedIfWithoutElseLogsOnlyWhenTheConditionHolds) {
  set_min_log_level(LogLevel::INFO);
  int after = 0;
  const std::string out = captured_stderr([&] {
    for (int i = 0; i < 4; ++i)
      if (i % 2 == 0) AF_LOG(WARNING) << "even " << i;
    ++after;  // not part of the if or the loop
  });
  EXPECT_EQ(after, 1);
  EXPECT_EQ(count_lines(out, "] even "), 2) << out;
  EXPECT_EQ(count_lines(out, "] even 0\n"), 1) << out;
  EXPECT_EQ(count_lines(out, "] even 2\n"), 1) << out;
  EXPECT_EQ(count_lines(out, ": W logging_test.cc:"), 2) << out;
}

TEST_F(LoggingTest, BelowTheMinimumLevelNothingIsWrittenOrEvaluated) {
  set_min_log_level(LogLevel::ERROR);
  int evaluated = 0;
  int else_taken = 0;
  const std::string out = captured_stderr([&] {
    if (true)
      AF_LOG(WARNING) << "suppressed " << ++evaluated;
    else
      ++else_taken;
    AF_LOG(INFO) << "suppressed " << ++evaluated;
    AF_LOG(ERROR) << "kept " << ++evaluated;
  });
  EXPECT_EQ(else_taken, 0);
  EXPECT_EQ(evaluated, 1);  // only the ERROR statement's operands ran
  EXPECT_EQ(count_lines(out, "suppressed"), 0) << out;
  EXPECT_EQ(count_lines(out, "] kept 1\n"), 1) << out;
  EXPECT_EQ(count_lines(out, ": E logging_test.cc:"), 1) << out;
}

TEST_F(LoggingTest, EachStatementIsOneLine) {
  set_min_log_level(LogLevel::INFO);
  const std::string out = captured_stderr([] {
    AF_LOG(INFO) << "a" << 1 << ' ' << 2.5;
    AF_LOG(INFO);
  });
  EXPECT_EQ(count_lines(out, "\n"), 2) << out;
  EXPECT_EQ(count_lines(out, "] a1 2.5\n"), 1) << out;
  EXPECT_EQ(count_lines(out, "logging_test.cc:"), 2) << out;
}

}  // namespace
}  // namespace actorflow
