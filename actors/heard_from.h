// When each peer node (a process's CAF node id, as text: the sender of a ping is exactly the node a
// watcher watches, not merely a process claiming the same task) last sent this task a heartbeat. The node actor records every ping a member
// sends it (after fault injection had its say); the peer watchers read it (actors/membership.cc):
// a ping received from a peer proves the peer alive and its link to us working, so the watcher of
// that peer counts it as an answer and sends no ping of its own while the peer keeps pinging. Two
// tasks that watch each other (a worker pings a ps, and the ps, which connected back to the worker,
// would ping it too) then settle on one heartbeat per interval instead of two.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace actorflow {

class HeardFrom {
 public:
  using Clock = std::chrono::steady_clock;
  // Records a heartbeat from `node` now.
  void heard(const std::string& node) {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> l(mu_);
    last_[node] = now;
  }
  // When `node` last sent one; Clock::time_point{} (the epoch) when never.
  Clock::time_point last(const std::string& node) const {
    std::lock_guard<std::mutex> l(mu_);
    auto it = last_.find(node);
    return it == last_.end() ? Clock::time_point{} : it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, Clock::time_point> last_;
};

}  // namespace actorflow
