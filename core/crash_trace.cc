#include "core/crash_trace.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace actorflow {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr size_t kMaxName = 200;
constexpr int kMaxFrames = 64;

std::mutex g_install_mu;
bool g_installed = false;
// The crash line's prefix, written whole before it is published (g_name_len): the handler reads
// only what a completed install() or rename wrote.
char g_name[2][kMaxName + 1];
std::atomic<int> g_name_slot{-1};
struct sigaction g_previous[NSIG];
std::atomic<bool> g_in_handler{false};

// Async-signal-safe writes: write(2) only.
void put(const char* s, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}
void put(const char* s) { put(s, std::strlen(s)); }
void put_int(int v) {
  char buf[16];
  int i = sizeof buf;
  unsigned u = v < 0 ? static_cast<unsigned>(-v) : static_cast<unsigned>(v);
  do {
    buf[--i] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u > 0 && i > 1);
  if (v < 0) buf[--i] = '-';
  put(buf + i, sizeof buf - static_cast<size_t>(i));
}

void on_fatal_signal(int sig, siginfo_t* info, void*) {
  // A second crash (in this handler, or in another thread meanwhile) goes straight to the
  // previous disposition: one backtrace per process.
  if (!g_in_handler.exchange(true)) {
    const int slot = g_name_slot.load(std::memory_order_acquire);
    put("*** actorflow: ");
    if (slot >= 0) {
      put(g_name[slot]);
      put(": ");
    }
    put("fatal signal ");
    put_int(sig);
    put(" (");
    put(strsignal(sig));  // glibc's table of constant strings
    put(")");
    if (sig != SIGABRT && info) {
      char addr[2 + 16 + 1];
      uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
      int i = sizeof addr - 1;
      addr[i] = '\0';
      do {
        addr[--i] = "0123456789abcdef"[a & 15];
        a >>= 4;
      } while (a != 0 && i > 2);
      addr[--i] = 'x';
      addr[--i] = '0';
      put(" at address ");
      put(addr + i);
    }
    put("; backtrace of the crashing thread (addr2line -f -C -e <binary> <offset>):\n");
    void* frames[kMaxFrames];
    const int n = ::backtrace(frames, kMaxFrames);
    ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
    put("*** end of backtrace\n");
  }
  // The previous disposition, then the signal again: it is blocked while this handler runs, so it
  // is delivered (with that disposition) as soon as the handler returns — for a fault, an abort()
  // and a signal sent from outside alike.
  ::sigaction(sig, &g_previous[sig], nullptr);
  ::raise(sig);
}

}  // namespace

Status install_crash_backtrace(const std::string& who) {
  std::lock_guard<std::mutex> l(g_install_mu);
  // Publish the name into the slot the handler is not reading.
  const int slot = g_name_slot.load() == 0 ? 1 : 0;
  const size_t n = std::min(who.size(), kMaxName);
  std::memcpy(g_name[slot], who.data(), n);
  g_name[slot][n] = '\0';
  g_name_slot.store(slot, std::memory_order_release);
  if (g_installed) return Status::OK();
  // backtrace() loads libgcc_s on its first call, which allocates: do that here, not in a handler.
  void* warm[1];
  (void)::backtrace(warm, 1);
  static char* alt_stack = new char[SIGSTKSZ + 64 * 1024];  // process lifetime
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = SIGSTKSZ + 64 * 1024;
  // Only the calling thread gets this alternate stack (sigaltstack is per thread); other threads
  // run the handler on their own stacks, which is enough for everything but their overflow.
  if (::sigaltstack(&ss, nullptr) != 0)
    return Internal(std::string("install_crash_backtrace: sigaltstack: ") + std::strerror(errno));
  // Once, even if a sigaction below fails: a second install must not record this handler as the
  // "previous" one of a signal (its re-raise would then never end).
  g_installed = true;
  for (int sig : kSignals) {
    struct sigaction sa {};
    sa.sa_sigaction = on_fatal_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(sig, &sa, &g_previous[sig]) != 0)
      return Internal("install_crash_backtrace: sigaction(" + std::to_string(sig) + "): " + std::strerror(errno));
  }
  return Status::OK();
}

}  // namespace actorflow
