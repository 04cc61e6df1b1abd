// Watching a directory with inotify while another process writes into it: what a local user
// could have seen there, event by event. For tests of files that must never be readable by
// others (keys, Secrets), not only once written (tests/k8s_test.cc, tests/tls_test.cc).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace actorflow {
namespace testing {

// One inotify event on a file of the watched directory, with the mode the name had when the
// event was read (-1 when it was gone by then: a later event of the same name says more).
struct DirEvent {
  std::string name;
  uint32_t mask = 0;
  uint32_t cookie = 0;
  int mode = -1;  // st_mode & 07777
};

// Watches `dir` (IN_CREATE, IN_MOVED_FROM, IN_MOVED_TO, IN_CLOSE_WRITE, IN_ATTRIB) on a thread of
// its own from construction until stop() or destruction; events() are the events in order.
// ok() is false when inotify could not watch the directory. Thread-safe; every wait bounded
// (the thread polls every 20 ms for stop()).
class DirWatch {
 public:
  explicit DirWatch(const std::string& dir) : dir_(dir) {
    fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd_ < 0) return;
    if (::inotify_add_watch(fd_, dir.c_str(), IN_CREATE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ATTRIB) < 0)
      return;
    ok_ = true;
    thread_ = std::thread([this] { loop(); });
  }
  ~DirWatch() {
    stop();
    if (fd_ >= 0) ::close(fd_);
  }
  DirWatch(const DirWatch&) = delete;
  DirWatch& operator=(const DirWatch&) = delete;

  bool ok() const { return ok_; }
  // Reads what is left in the queue, then ends the thread. Idempotent.
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  std::vector<DirEvent> events() const {
    std::lock_guard<std::mutex> l(mu_);
    return events_;
  }
  // The names a file that ends as `name` had before, following renames (IN_MOVED_FROM and
  // IN_MOVED_TO of one cookie), with `name` itself.
  std::set<std::string> history_of(const std::string& name) const {
    std::set<std::string> names = {name};
    const std::vector<DirEvent> ev = events();
    bool grew = true;
    while (grew) {
      grew = false;
      for (const DirEvent& to : ev) {
        if (!(to.mask & IN_MOVED_TO) || !names.count(to.name)) continue;
        for (const DirEvent& from : ev)
          if ((from.mask & IN_MOVED_FROM) && from.cookie == to.cookie && names.insert(from.name).second) grew = true;
      }
    }
    return names;
  }

 private:
  void loop() {
    alignas(inotify_event) char buf[64 * (sizeof(inotify_event) + NAME_MAX + 1)];
    for (;;) {
      const bool last = stop_.load();  // one more read after stop(): nothing queued is lost
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, last ? 0 : 20) > 0) {
        const ssize_t n = ::read(fd_, buf, sizeof buf);
        for (ssize_t off = 0; n > 0 && off < n;) {
          const auto* e = reinterpret_cast<const inotify_event*>(buf + off);
          off += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
          if (e->len == 0) continue;
          DirEvent d;
          d.name = e->name;
          d.mask = e->mask;
          d.cookie = e->cookie;
          struct stat st {};
          if (::lstat((dir_ + "/" + d.name).c_str(), &st) == 0) d.mode = static_cast<int>(st.st_mode & 07777);
          std::lock_guard<std::mutex> l(mu_);
          events_.push_back(d);
        }
        if (n > 0) continue;  // more may be queued
      }
      if (last) return;
    }
  }

  std::string dir_;
  int fd_ = -1;
  bool ok_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<DirEvent> events_;
};

// Success when the file `name` of `w`'s directory `dir` was never readable or writable by group
// or others, as far as a local user watching could tell: at every event of every name it had
// (following renames) its mode had no group/other bit, its mode never changed after creation
// (no IN_ATTRIB: a file created with a wider mode and chmod-ed afterwards shows one, however short
// the window), and it is mode 0600 now. Call after w.stop().
inline ::testing::AssertionResult private_from_creation(const DirWatch& w, const std::string& dir,
                                                        const std::string& name) {
  const std::set<std::string> names = w.history_of(name);
  bool seen = false;
  for (const DirEvent& e : w.events()) {
    if (!names.count(e.name)) continue;
    seen = true;
    if (e.mask & IN_ATTRIB)
      return ::testing::AssertionFailure() << name << ": the mode (or owner) of '" << e.name
                                           << "' changed after it was created (IN_ATTRIB)";
    if (e.mode >= 0 && (e.mode & 077) != 0) {
      std::ostringstream what;
      what << name << ": '" << e.name << "' had mode 0" << std::oct << e.mode << " at an event (mask 0x" << std::hex
           << e.mask << ")";
      return ::testing::AssertionFailure() << what.str();
    }
  }
  if (!seen) return ::testing::AssertionFailure() << name << ": no inotify event seen for it";
  struct stat st {};
  if (::lstat((dir + "/" + name).c_str(), &st) != 0) return ::testing::AssertionFailure() << name << " is missing";
  if ((st.st_mode & 07777) != 0600) {
    std::ostringstream what;
    what << name << " has mode 0" << std::oct << (st.st_mode & 07777);
    return ::testing::AssertionFailure() << what.str();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace testing
}  // namespace actorflow
