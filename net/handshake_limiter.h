// Admission of TLS handshakes per source address (docs/security.md, "Health that survives").
//
// A complete TLS 1.3 ClientHello costs the server a whole flight (a key exchange and a signature)
// on the one thread of the port's poll loop, and connection caps bound connections, not how fast
// they come: a stranger that sends ClientHellos and drops the connections in a tight loop keeps
// every TLS listener of a process busy with its handshakes. So each TLS listener of a process
// (the control plane's, the data plane's, the metrics endpoint's) asks one shared limiter before
// it starts TLS on a connection it accepted; a connection over its address's rate is closed at
// accept, before any TLS work, and counted.
//
// The rule: a token bucket per source address (the host part of "ip:port"): `burst` handshakes
// at once, then `per_second` a second. Addresses are independent: one address over its rate
// does not delay another's handshakes. At most `max_addresses` are tracked; a new address beyond
// that makes the least recently seen one be forgotten (it starts over with a full bucket when it
// comes back), so the table is bounded whatever addresses arrive.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "net/socket.h"

namespace actorflow {
namespace net {

// A limiter's rule. Plain value.
struct HandshakeLimits {
  int64_t burst = 32;          // handshakes an address may start at once (bucket size)
  int64_t per_second = 16;     // handshakes an address may start per second after that
  size_t max_addresses = 4096;  // addresses tracked at most

  // The defaults above, with ACTORFLOW_TLS_HANDSHAKE_BURST and ACTORFLOW_TLS_HANDSHAKES_PER_SECOND
  // (positive integers; another value is logged at WARNING and the default used) when set.
  // Thread-safe (reads the environment only).
  static HandshakeLimits from_env();
};

// Counts of a limiter. Plain value.
struct HandshakeLimiterStats {
  int64_t admitted = 0;  // handshakes allowed to start
  int64_t refused = 0;   // handshakes refused (their address was over its rate)
  size_t tracked = 0;    // addresses in the table now
};

class HandshakeLimiter {
 public:
  // The time source (tests inject their own); null means Clock::now.
  using Now = std::function<Clock::time_point()>;

  // A limiter with `limits` (burst and per_second raised to at least 1, max_addresses to at
  // least 1) reading the time from `now`.
  explicit HandshakeLimiter(HandshakeLimits limits = HandshakeLimits(), Now now = nullptr);
  HandshakeLimiter(const HandshakeLimiter&) = delete;
  HandshakeLimiter& operator=(const HandshakeLimiter&) = delete;

  // True when a TLS handshake from `host` (an address without port) may start now: one of its
  // tokens is taken. False when the address is over its rate (nothing taken; counted as refused).
  // Thread-safe (one mutex; constant time on average).
  bool admit(const std::string& host);

  // A snapshot of the counts. Thread-safe.
  HandshakeLimiterStats stats() const;
  // The rule in force (after the raises above). Thread-safe (immutable).
  const HandshakeLimits& limits() const { return limits_; }

  // The process's limiter, shared by its TLS listeners: HandshakeLimits::from_env() read once,
  // on first use. Never null; the process keeps it alive. Thread-safe.
  static std::shared_ptr<HandshakeLimiter> process();

 private:
  struct Bucket {
    double tokens = 0;
    Clock::time_point at{};             // when `tokens` was last brought up to date
    std::list<std::string>::iterator lru;  // its place in lru_ (front: most recently seen)
  };
  Clock::time_point now() const { return now_ ? now_() : Clock::now(); }

  const HandshakeLimits limits_;
  const Now now_;
  mutable std::mutex mu_;  // guards everything below
  std::unordered_map<std::string, Bucket> buckets_;
  std::list<std::string> lru_;
  HandshakeLimiterStats stats_;
};

}  // namespace net
}  // namespace actorflow
