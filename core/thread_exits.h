// Detached threads whose exit must be complete — their thread-local and pthread-key destructors
// included — before their owner returns: a program that returns from main() runs its libraries'
// exit-time destructors, and those must not run beside a thread's own (a library's per-thread
// value freed by both, "double free or corruption"; docs/changelog.md, 2026-11-28). A detached
// std::thread, or a thread of CAF 0.17's detached actors, signs off to whoever waits for it
// before it has exited; this records such threads by kernel thread id and waits until the kernel
// no longer knows them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <mutex>
#include <set>
#include <vector>

namespace actorflow {

class ThreadExits {
 public:
  // The calling thread is tracked from now on. Thread-safe.
  void started();
  // The calling thread has finished its work and exits next (it may still run destructors).
  // Threads already gone are forgotten here, so the set stays bounded by the threads running or
  // exiting at once. Thread-safe.
  void finishing();
  // Waits until every tracked thread has exited or `bound` passed (polling: a detached thread's
  // exit sends no notice); returns the ids of those still there. Thread-safe.
  std::vector<pid_t> await_gone(std::chrono::milliseconds bound);

 private:
  std::mutex mu_;
  std::set<pid_t> running_;  // started, not finishing
  std::set<pid_t> exiting_;  // finishing, perhaps not gone yet
};

}  // namespace actorflow
