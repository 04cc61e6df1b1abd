#include "core/thread_exits.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

namespace actorflow {
namespace {

pid_t this_thread_id() { return static_cast<pid_t>(::syscall(SYS_gettid)); }
// True once thread `tid` of this process has exited: the kernel reaps a thread only after its
// destructors ran and it called exit.
bool gone(pid_t tid) { return ::syscall(SYS_tgkill, ::getpid(), tid, 0) != 0 && errno == ESRCH; }

}  // namespace

void ThreadExits::started() {
  std::lock_guard<std::mutex> l(mu_);
  running_.insert(this_thread_id());
}

void ThreadExits::finishing() {
  const pid_t me = this_thread_id();
  std::lock_guard<std::mutex> l(mu_);
  running_.erase(me);
  for (auto it = exiting_.begin(); it != exiting_.end();) it = gone(*it) ? exiting_.erase(it) : std::next(it);
  exiting_.insert(me);
}

std::vector<pid_t> ThreadExits::await_gone(std::chrono::milliseconds bound) {
  std::vector<pid_t> left;
  {
    std::lock_guard<std::mutex> l(mu_);
    left.assign(running_.begin(), running_.end());
    left.insert(left.end(), exiting_.begin(), exiting_.end());
  }
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (true) {
    left.erase(std::remove_if(left.begin(), left.end(), gone), left.end());
    if (left.empty() || std::chrono::steady_clock::now() >= deadline) return left;
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // polling: see await_gone's contract
  }
}

}  // namespace actorflow
