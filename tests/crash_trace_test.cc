// The fatal-signal backtrace (core/crash_trace.h): each death test crashes a forked copy of this
// process and checks what it wrote and how it ended.
#include "core/crash_trace.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace actorflow {
namespace {

class CrashTraceTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// The crash line, then at least one frame of this test binary, then the end line.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUnderAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kUnderAsan = true;
#else
constexpr bool kUnderAsan = false;
#endif
#else
constexpr bool kUnderAsan = false;
#endif

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
  // The effect is the previous disposition's: the default (killed by SIGSEGV), or, in a build
  // under AddressSanitizer, its own handler, which reports and then exits non-zero or, with
  // ASAN_OPTIONS=abort_on_error=1 (scripts/test-sanitizers.sh), aborts.
  auto crashed = [](int status) {
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) return true;
    if (!kUnderAsan) return false;
    return (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
  };
  // A store into a page mapped without access: a real fault at a known address, which
  // UndefinedBehaviorSanitizer does not take for its own (it reports a store through a null
  // pointer itself, before any signal).
  // "fast" (fork without exec): the child has the parent's mapping at the same address.
  GTEST_FLAG_SET(death_test_style, "fast");
  static char* page = nullptr;
  page = static_cast<char*>(::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(static_cast<void*>(page), MAP_FAILED);
  char expected[128];
  std::snprintf(expected, sizeof expected, "fatal signal 11 \\(Segmentation fault\\) at address %p; backtrace",
                static_cast<void*>(page + 12));
  EXPECT_EXIT(install_and([] {
                volatile int* volatile p = reinterpret_cast<int*>(page + 12);
                *p = 1;
              }),
              crashed, expected);
  ::munmap(page, 4096);
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
