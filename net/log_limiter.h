// Rate limiting for log lines about what strangers do (refused handshakes, timeouts, evictions):
// a flood of connections must not become a flood of log lines.
#pragma once

#include <cstdint>
#include <string>

#include "net/socket.h"

namespace actorflow {
namespace net {

// At most one line a second for one kind of event; counts the lines it held back. Not
// thread-safe (one per kind per thread, e.g. a listener's loop).
class LogLimiter {
 public:
  // True when a line may be written now; `suppressed` is then set to the lines held back since
  // the last one (and the count restarts).
  bool allow(int64_t* suppressed) {
    const auto now = Clock::now();
    if (last_ != Clock::time_point() && now - last_ < std::chrono::seconds(1)) {
      ++held_;
      return false;
    }
    last_ = now;
    *suppressed = held_;
    held_ = 0;
    return true;
  }

 private:
  Clock::time_point last_{};
  int64_t held_ = 0;
};

// " (N similar lines suppressed)" for N > 0, else "". Pure.
inline std::string suppressed_note(int64_t n) {
  return n > 0 ? " (" + std::to_string(n) + " similar lines suppressed)" : std::string();
}

}  // namespace net
}  // namespace actorflow
