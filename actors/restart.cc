#include "core/metrics.h"
#include "actors/restart.h"

#include <atomic>
#include <mutex>
#include <sstream>

#include "core/logging.h"

namespace actorflow {
namespace {
std::atomic<int64_t> g_total{0};
}  // namespace

int64_t restarts_total() { return g_total.load(); }

Status RestartBudget::record_failure(const std::string& who, const std::string& what) {
  const auto now = std::chrono::steady_clock::now();
  const auto window = std::chrono::duration<double>(policy_.restart_window_secs);
  while (!times_.empty() && now - times_.front() > window) times_.pop_front();
  times_.push_back(now);
  const int n = static_cast<int>(times_.size());
  static Counter& failures = Metrics::global().counter(
      "actorflow_actor_failures_total", "Exceptions that restarted an actor in place (or exhausted its budget).");
  failures.inc();
  std::ostringstream win;
  win << policy_.restart_window_secs;
  if (n > policy_.max_restarts) {
    Status s = Internal(who + " failed " + std::to_string(n) + " times within " + win.str() +
                        " s (max_restarts = " + std::to_string(policy_.max_restarts) + "); giving up: " + what);
    AF_LOG(ERROR) << s.message();
    return s;
  }
  ++g_total;
  AF_LOG(WARNING) << who << " restarted in place after: " << what << " (restart " << n << " of at most "
                  << policy_.max_restarts << " within " << win.str() << " s)";
  return Status::OK();
}

}  // namespace actorflow
