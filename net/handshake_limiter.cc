#include "net/handshake_limiter.h"

#include <algorithm>

#include "core/env.h"

namespace actorflow {
namespace net {

HandshakeLimits HandshakeLimits::from_env() {
  HandshakeLimits l;
  l.burst = positive_env_int("ACTORFLOW_TLS_HANDSHAKE_BURST", l.burst);
  l.per_second = positive_env_int("ACTORFLOW_TLS_HANDSHAKES_PER_SECOND", l.per_second);
  return l;
}

namespace {
HandshakeLimits sane(HandshakeLimits l) {
  l.burst = std::max<int64_t>(1, l.burst);
  l.per_second = std::max<int64_t>(1, l.per_second);
  l.max_addresses = std::max<size_t>(1, l.max_addresses);
  return l;
}
}  // namespace

HandshakeLimiter::HandshakeLimiter(HandshakeLimits limits, Now now) : limits_(sane(limits)), now_(std::move(now)) {}

bool HandshakeLimiter::admit(const std::string& host) {
  const Clock::time_point t = now();
  std::lock_guard<std::mutex> l(mu_);
  auto it = buckets_.find(host);
  if (it == buckets_.end()) {
    if (buckets_.size() >= limits_.max_addresses) {
      buckets_.erase(lru_.back());  // the least recently seen address starts over when it returns
      lru_.pop_back();
    }
    lru_.push_front(host);
    Bucket b;
    b.tokens = static_cast<double>(limits_.burst);
    b.at = t;
    b.lru = lru_.begin();
    it = buckets_.emplace(host, b).first;
  } else {
    Bucket& b = it->second;
    if (t > b.at) {
      const double elapsed = std::chrono::duration<double>(t - b.at).count();
      b.tokens = std::min(static_cast<double>(limits_.burst), b.tokens + elapsed * static_cast<double>(limits_.per_second));
      b.at = t;
    }
    lru_.splice(lru_.begin(), lru_, b.lru);  // most recently seen (a flooding address stays tracked)
  }
  stats_.tracked = buckets_.size();
  Bucket& b = it->second;
  if (b.tokens < 1.0) {
    ++stats_.refused;
    return false;
  }
  b.tokens -= 1.0;
  ++stats_.admitted;
  return true;
}

HandshakeLimiterStats HandshakeLimiter::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

std::shared_ptr<HandshakeLimiter> HandshakeLimiter::process() {
  static const std::shared_ptr<HandshakeLimiter> p = std::make_shared<HandshakeLimiter>(HandshakeLimits::from_env());
  return p;
}

}  // namespace net
}  // namespace actorflow
