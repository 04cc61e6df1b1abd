// Minimal TensorFlow-style logging: `I file.cc:123] message` lines on stderr.
//
// AF_LOG(INFO) << "text";  Levels: INFO, WARNING, ERROR. Each statement writes one
// whole line atomically (one write call), so lines from several threads never interleave.
// Thread-safe. The minimum level comes from env AF_MIN_LOG_LEVEL (0 INFO, 1 WARNING, 2 ERROR),
// or set_min_log_level().
#pragma once

#include <sstream>
#include <string>

namespace actorflow {

enum class LogLevel : int { INFO = 0, WARNING = 1, ERROR = 2 };

// Sets the minimum level that is written. Thread-safe.
void set_min_log_level(LogLevel level);
// Returns the current minimum level.
LogLevel min_log_level();

namespace detail {
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();  // writes the line
  std::ostringstream& stream() { return os_; }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

// Turns AF_LOG's `stream << ...` chain into void so both arms of its `?:` have type void.
struct LogVoidify {
  void operator&(std::ostream&) const {}
};
}  // namespace detail

}  // namespace actorflow

// AF_LOG(level) is one expression, not an `if`: `if (c) AF_LOG(INFO) << x; else y();` runs y()
// exactly when c is false, and an unbraced `if (c) AF_LOG(INFO) << x;` draws no -Wdangling-else.
// Below the minimum level nothing after `<<` is evaluated. (glog's `? (void)0 : Voidify() &`:
// `&` binds looser than `<<`, so the whole chain is streamed first, then turned into void.)
#define AF_LOG(level)                                                                    \
  (::actorflow::LogLevel::level < ::actorflow::min_log_level())                          \
      ? (void)0                                                                          \
      : ::actorflow::detail::LogVoidify() &                                              \
            ::actorflow::detail::LogMessage(::actorflow::LogLevel::level, __FILE__, __LINE__).stream()
