// The fatal-signal backtrace (core/crash_trace.h): each death test crashes a forked copy of this
// process and checks what it wrote and how it ended.
#include "core/crash_trace.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

namespace actorflow {
namespace {

class CrashTraceTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// The crash line, then at least one frame of this test binary, then the end line.
constexpr const char* kTrace =
    "\\*\\*\\* actorflow: /job:worker/replica:0/task:1: fatal signal 6 \\(Aborted\\); backtrace of the crashing "
    "thread[^\n]*\n(.*\n)*.*crash_trace_test.*\n(.*\n)*\\*\\*\\* end of backtrace";

[[noreturn]] void install_and(void (*crash)()) {
  if (!install_crash_backtrace("/job:worker/replica:0/task:1").ok()) std::_Exit(90);
  crash();
  std::_Exit(91);  // not reached
}

TEST_F(CrashTraceTest, AnAbortWritesTheTaskAndTheStackThenEndsBySignal) {
  EXPECT_EXIT(install_and([] { std::abort(); }), ::testing::KilledBySignal(SIGABRT), kTrace);
}

TEST_F(CrashTraceTest, AnAbortOnAnotherThreadIsReportedToo) {
  EXPECT_EXIT(install_and([] {
                std::thread t([] { std::abort(); });
                t.join();
              }),
              ::testing::KilledBySignal(SIGABRT), kTrace);
}

// What glibc does on "double free or corruption": its message, then abort() — which now says
// where. (Under AddressSanitizer the double free is ASan's report first; it then aborts too.)
TEST_F(CrashTraceTest, ADoubleFreeSaysWhere) {
  EXPECT_EXIT(install_and([] {
                void* volatile p = std::malloc(48);
                std::free(p);
                std::free(p);
              }),
              ::testing::KilledBySignal(SIGABRT), kTrace);
}

TEST_F(CrashTraceTest, ASegfaultNamesTheAddressAndTheSignalKeepsItsEffect) {
  // The effect is the previous disposition's: the default (killed by SIGSEGV), or a sanitizer's
  // own handler, which reports and exits non-zero.
  auto crashed = [](int status) {
    return (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
  };
  EXPECT_EXIT(install_and([] {
                volatile int* volatile p = nullptr;
                *p = 1;
              }),
              crashed, "fatal signal 11 \\(Segmentation fault\\) at address 0x0; backtrace");
}

TEST_F(CrashTraceTest, TheHandlerInstalledBeforeStillRuns) {
  EXPECT_EXIT(
      {
        struct sigaction sa {};
        sa.sa_handler = [](int) {
          const char msg[] = "the previous handler ran\n";
          (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
          std::_Exit(3);
        };
        sigemptyset(&sa.sa_mask);
        ::sigaction(SIGABRT, &sa, nullptr);
        install_and([] { std::abort(); });
      },
      ::testing::ExitedWithCode(3), "fatal signal 6(.*\n)*the previous handler ran");
}

TEST_F(CrashTraceTest, ASecondInstallOnlyRenamesAndNeverLoops) {
  EXPECT_EXIT(
      {
        if (!install_crash_backtrace("first").ok()) std::_Exit(90);
        install_and([] { std::abort(); });  // installs again under the test's name
      },
      ::testing::KilledBySignal(SIGABRT), kTrace);
}

}  // namespace
}  // namespace actorflow
