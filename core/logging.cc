#include "core/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace actorflow {
namespace {
std::atomic<int>& level_ref() {
  static std::atomic<int> level{[] {
    const char* env = std::getenv("AF_MIN_LOG_LEVEL");
    return env ? std::atoi(env) : 0;
  }()};
  return level;
}
}  // namespace

void set_min_log_level(LogLevel level) { level_ref().store(static_cast<int>(level)); }
LogLevel min_log_level() { return static_cast<LogLevel>(level_ref().load()); }

namespace detail {
LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t t = system_clock::to_time_t(now);
  auto us = duration_cast<microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char ts[64];
  std::strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
  char frac[16];
  std::snprintf(frac, sizeof frac, ".%06ld", static_cast<long>(us));
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  const char tag = level == LogLevel::INFO ? 'I' : level == LogLevel::WARNING ? 'W' : 'E';
  os_ << ts << frac << ": " << tag << " " << base << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  os_ << '\n';
  const std::string s = os_.str();
  ssize_t r = ::write(STDERR_FILENO, s.data(), s.size());
  (void)r;
  (void)level_;
}
}  // namespace detail

}  // namespace actorflow
