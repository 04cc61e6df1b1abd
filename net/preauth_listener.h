// The front door of every port a task opens: accepts TCP connections and runs the server side
// of the handshake (net/handshake.h) on all of them from one thread, so nothing a connection
// sends before it proved membership reaches anything else (the data plane's frame reader, or
// CAF's BASP broker on the control plane).
//
// Bounds, whatever a peer does:
//   - at most `max_pending` connections are in the handshake at once; when a new one arrives at
//     the cap, a pending one is closed (so idle connections cannot lock members out): the oldest
//     of the source address with the most pending connections, so one address evicts its own;
//   - each pending connection is closed `handshake_timeout` after it was accepted;
//   - no thread per connection: one poll loop drives every pending handshake;
//   - when accept fails for lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) the
//     loop stops accepting for a back-off (10 ms doubling to 1 s) and resumes once descriptors
//     are free; the backlog is left to the kernel;
//   - failed proofs (a wrong secret, a refused certificate) are throttled per source address: after
//     kFreeFailures of them, each further one closes every new connection from that address at
//     accept, without an answer, for a back-off (10 ms doubling to 1 s); an address is forgotten
//     after 60 s without a failure, and at most kMaxTrackedAddresses are tracked (the quietest
//     forgotten first), so guessing the secret costs about a second a guess;
//   - with TLS, TLS handshakes are admitted per source address by a limiter shared with the
//     process's other TLS listeners (net/handshake_limiter.h: a burst, then a steady rate): a
//     connection from an address over its rate is closed at accept, before any TLS work, counted
//     in stats().rate_limited and in actorflow_tls_handshakes_refused_total{listener};
//   - log lines are rate limited: at most one per second per kind (refused handshake, timeout,
//     accept failure, rate limit), with a count of those suppressed.
// Thread-safety: the callbacks run on the listener's thread, one at a time; they must not block
// for long. The destructor stops the thread (joins it) and closes the pending connections.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"
#include "net/handshake.h"
#include "net/handshake_limiter.h"
#include "net/socket.h"
#include "net/stream.h"

namespace actorflow {
namespace net {

// Counts a listener keeps. Read with PreAuthListener::stats().
struct PreAuthStats {
  int64_t accepted = 0;          // TCP connections accepted
  int64_t authenticated = 0;     // handshakes completed and handed over
  int64_t rejected = 0;          // handshakes that failed (any reason)
  int64_t auth_failures = 0;     // of those: wrong or missing proof of the secret
  int64_t timed_out = 0;         // closed for taking longer than handshake_timeout
  int64_t evicted = 0;           // closed because max_pending newer connections arrived
  int64_t accept_errors = 0;     // accept() failures (EMFILE, ...)
  int64_t throttled = 0;         // closed at accept: their address is backing off after failed proofs
  int64_t rate_limited = 0;      // closed at accept: their address is over its rate of TLS handshakes
  int64_t pending = 0;           // in the handshake now
};

class PreAuthListener {
 public:
  // Failed proofs an address may make before it backs off; addresses tracked at most.
  static constexpr int kFreeFailures = 16;
  static constexpr size_t kMaxTrackedAddresses = 4096;
  struct Options {
    HandshakeConfig handshake;      // the server's side (secret, fingerprint, plane)
    std::string what = "data plane";  // for log lines: "data plane", "control plane"
    size_t max_pending = 64;
    std::chrono::milliseconds handshake_timeout{5000};
    // With TLS (handshake.tls): who admits TLS handshakes per source address; null means the
    // process's (HandshakeLimiter::process()). Unused without TLS.
    std::shared_ptr<HandshakeLimiter> tls_limiter;
  };
  // Called with each authenticated connection (a Stream whose handshake bytes have all been
  // consumed: a blocking, close-on-exec socket, or a TLS session; the callee owns it), the peer's
  // identity and "ip:port".
  using OnAuthenticated =
      std::function<void(std::unique_ptr<Stream> conn, const PeerIdentity& peer, const std::string& addr)>;
  // Called after each failed handshake with its error (for counters; may be null).
  using OnRejected = std::function<void(const Status& why)>;
  // Called about once a second and after each event (housekeeping; may be null).
  using OnTick = std::function<void()>;

  // Starts serving the listening socket `listener` (non-blocking; the listener takes it).
  // Internal when the thread's wake-up descriptor cannot be created.
  static Result<std::unique_ptr<PreAuthListener>> start(Fd listener, Options options, OnAuthenticated on_auth,
                                                        OnRejected on_rejected = nullptr, OnTick on_tick = nullptr);
  ~PreAuthListener();
  PreAuthListener(const PreAuthListener&) = delete;
  PreAuthListener& operator=(const PreAuthListener&) = delete;

  // The port the listening socket is bound to.
  uint16_t port() const { return port_; }
  // A snapshot of the counters. Thread-safe.
  PreAuthStats stats() const;

 private:
  struct Impl;
  PreAuthListener() = default;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace net
}  // namespace actorflow
