#include "net/preauth_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <unordered_map>
#include <mutex>
#include <vector>

#include "core/logging.h"
#include "core/metrics.h"
#include "net/log_limiter.h"
#include "net/stream.h"
#include "net/tls.h"

namespace actorflow {
namespace net {

struct PreAuthListener::Impl {
  struct Pending {
    Fd fd;  // the TCP socket while TLS is being set up (then the stream owns it)
    std::unique_ptr<Stream> stream;  // the connection once any TLS handshake is done
    std::string addr;
    Clock::time_point deadline;
    std::unique_ptr<ServerHandshake> hs;
    // TLS (opts.handshake.tls): the TLS handshake runs first on the TCP socket; once it is done
    // `stream` reads and writes through the session and `cert_cn` is the client certificate's CN.
    std::unique_ptr<TlsAccept> tls;
    bool tls_used = false;
    std::string cert_cn;
  };

  Fd listener;
  Fd wake;
  Options opts;
  OnAuthenticated on_auth;
  OnRejected on_rejected;
  OnTick on_tick;
  std::atomic<bool> stopping{false};
  std::list<Pending> pending;  // oldest first
  mutable std::mutex mu;       // guards stats
  PreAuthStats stats;
  LogLimiter refused_log, timeout_log, accept_log, evict_log;
  Clock::time_point accept_resume{};  // no accepting before this (descriptor back-off)
  // Failed proofs per source address (host part of "ip:port"); see the header.
  struct Strikes {
    int failures = 0;
    Clock::time_point until{};  // new connections from the address are closed before this
    Clock::time_point last{};   // the latest failure
  };
  std::unordered_map<std::string, Strikes> strikes;
  LogLimiter throttle_log, rate_log;
  Counter* tls_refused = nullptr;  // actorflow_tls_handshakes_refused_total{listener=opts.what} (TLS only)

  static std::string host_part(const std::string& addr) {
    const size_t colon = addr.rfind(':');
    return colon == std::string::npos ? addr : addr.substr(0, colon);
  }

  // True when connections from `host` are backing off now.
  bool throttled(const std::string& host, Clock::time_point now) {
    auto it = strikes.find(host);
    if (it == strikes.end()) return false;
    if (now - it->second.last > std::chrono::seconds(60)) {
      strikes.erase(it);
      return false;
    }
    return now < it->second.until;
  }

  // Counts a failed proof from `host`; bounded table (expired entries, then the quietest, go).
  void strike(const std::string& host, Clock::time_point now) {
    if (strikes.size() >= kMaxTrackedAddresses && !strikes.count(host)) {
      auto quietest = strikes.end();
      for (auto it = strikes.begin(); it != strikes.end();) {
        if (now - it->second.last > std::chrono::seconds(60)) {
          it = strikes.erase(it);
          continue;
        }
        if (quietest == strikes.end() || it->second.last < quietest->second.last) quietest = it;
        ++it;
      }
      if (strikes.size() >= kMaxTrackedAddresses && quietest != strikes.end()) strikes.erase(quietest);
    }
    Strikes& s = strikes[host];
    ++s.failures;
    s.last = now;
    if (s.failures > kFreeFailures) {
      const int doublings = std::min(s.failures - kFreeFailures - 1, 7);
      s.until = now + std::min(std::chrono::milliseconds(10) * (1 << doublings), std::chrono::milliseconds(1000));
    }
  }
  std::chrono::milliseconds backoff{0};

  void count(int64_t PreAuthStats::*field, int64_t delta = 1) {
    std::lock_guard<std::mutex> l(mu);
    stats.*field += delta;
  }

  void run() {
    auto last_tick = Clock::now();
    std::vector<pollfd> fds;
    while (!stopping.load()) {
      const auto now = Clock::now();
      const bool accepting = now >= accept_resume;
      fds.clear();
      fds.push_back({wake.get(), POLLIN, 0});
      fds.push_back({listener.get(), static_cast<short>(accepting ? POLLIN : 0), 0});
      Clock::time_point next = now + std::chrono::seconds(1);
      if (!accepting) next = std::min(next, accept_resume);
      bool ready_now = false;  // a session holds bytes poll() cannot see
      for (auto& p : pending) {
        short events = p.hs->output().empty() ? POLLIN : POLLOUT;
        if (p.tls) events = p.tls->wants() == TlsAccept::Want::kWrite ? POLLOUT : POLLIN;
        fds.push_back({p.stream ? p.stream->fd() : p.fd.get(), events, 0});
        next = std::min(next, p.deadline);
        if (p.stream && p.hs->output().empty() && p.stream->buffered()) ready_now = true;
      }
      if (ready_now) next = now;
      const int wait_ms = static_cast<int>(std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1));
      int pr = ::poll(fds.data(), fds.size(), wait_ms);
      if (pr < 0 && errno != EINTR) {
        AF_LOG(ERROR) << opts.what << ": poll failed on port " << local_port(listener.get()) << ": "
                      << std::strerror(errno);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (stopping.load() || (pr > 0 && fds[0].revents)) break;
      // Pending handshakes first (their pollfds follow the listener's, in list order).
      if (pr > 0 || ready_now) {
        size_t i = 2;
        for (auto it = pending.begin(); it != pending.end() && i < fds.size(); ++i) {
          short ev = fds[i].revents;
          if (ev == 0 && it->stream && it->hs->output().empty() && it->stream->buffered()) ev = POLLIN;
          if (ev == 0) {
            ++it;
            continue;
          }
          it = step(it, ev);
        }
      }
      expire(Clock::now());
      if (pr > 0 && (fds[1].revents & POLLIN)) accept_all();
      if (on_tick && Clock::now() - last_tick >= std::chrono::seconds(1)) {
        last_tick = Clock::now();
        on_tick();
      }
    }
    pending.clear();
    set_pending();
  }

  void set_pending() {
    std::lock_guard<std::mutex> l(mu);
    stats.pending = static_cast<int64_t>(pending.size());
  }

  void accept_all() {
    for (int n = 0; n < 64 && !stopping.load(); ++n) {
      int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        const int e = errno;
        if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == ECONNABORTED || e == EPROTO) return;
        count(&PreAuthStats::accept_errors);
        if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
          backoff = backoff.count() == 0 ? std::chrono::milliseconds(10)
                                         : std::min(backoff * 2, std::chrono::milliseconds(1000));
          accept_resume = Clock::now() + backoff;
        }
        int64_t held = 0;
        if (accept_log.allow(&held)) {
          AF_LOG(WARNING) << opts.what << ": accept on port " << local_port(listener.get())
                          << " failed: " << std::strerror(e) << "; not accepting for " << backoff.count() << " ms"
                          << suppressed_note(held);
        }
        return;
      }
      backoff = std::chrono::milliseconds(0);
      count(&PreAuthStats::accepted);
      const std::string addr = peer_name(fd);
      if (throttled(host_part(addr), Clock::now())) {
        count(&PreAuthStats::throttled);
        int64_t held = 0;
        if (throttle_log.allow(&held)) {
          AF_LOG(WARNING) << opts.what << ": closing the connection from " << addr
                          << " at once: its address failed to authenticate " << strikes[host_part(addr)].failures
                          << " times and is backing off" << suppressed_note(held);
        }
        ::close(fd);
        continue;
      }
      if (opts.handshake.tls && !opts.tls_limiter->admit(host_part(addr))) {
        count(&PreAuthStats::rate_limited);
        tls_refused->inc();
        int64_t held = 0;
        if (rate_log.allow(&held)) {
          const HandshakeLimits& lim = opts.tls_limiter->limits();
          AF_LOG(WARNING) << opts.what << ": closing the connection from " << addr
                          << " at accept: its address is over its rate of TLS handshakes (" << lim.burst
                          << " at once, then " << lim.per_second
                          << " a second: ACTORFLOW_TLS_HANDSHAKE_BURST, ACTORFLOW_TLS_HANDSHAKES_PER_SECOND)"
                          << suppressed_note(held);
        }
        ::close(fd);
        continue;
      }
      if (pending.size() >= opts.max_pending) {
        count(&PreAuthStats::evicted);
        auto victim = oldest_of_busiest_address();
        int64_t held = 0;
        if (evict_log.allow(&held)) {
          AF_LOG(WARNING) << opts.what << ": " << opts.max_pending
                          << " connections already in the handshake; closing the oldest of the address with the "
                             "most of them, from "
                          << victim->addr << suppressed_note(held);
        }
        pending.erase(victim);
      }
      Pending p;
      p.addr = addr;
      p.deadline = Clock::now() + opts.handshake_timeout;
      p.hs = std::make_unique<ServerHandshake>(opts.handshake, p.addr);
      if (opts.handshake.tls) {
        p.fd = Fd(fd);
        p.tls = std::make_unique<TlsAccept>(*opts.handshake.tls, fd, p.addr);
        p.tls_used = true;
      } else {
        p.stream = std::make_unique<Stream>(Fd(fd));
      }
      pending.push_back(std::move(p));
      set_pending();
    }
  }

  // The oldest pending connection of the source address with the most pending connections
  // (the oldest of all on a tie); pending must not be empty.
  std::list<Pending>::iterator oldest_of_busiest_address() {
    std::unordered_map<std::string, size_t> per_host;
    std::string busiest;
    size_t most = 0;
    for (const Pending& p : pending) {
      const size_t n = ++per_host[host_part(p.addr)];
      if (n > most) {
        most = n;
        busiest = host_part(p.addr);
      }
    }
    for (auto it = pending.begin(); it != pending.end(); ++it)
      if (host_part(it->addr) == busiest) return it;
    return pending.begin();
  }

  // Reads what the handshake wants / writes what it has; finishes the connection when done.
  std::list<Pending>::iterator step(std::list<Pending>::iterator it, short ev) {
    Pending& p = *it;
    if (p.tls) {
      const TlsAccept::Want w = p.tls->step();
      if (w == TlsAccept::Want::kFailed) return finish(it, p.tls->error());
      if (w != TlsAccept::Want::kDone) return ++it;
      p.cert_cn = p.tls->peer_cn();
      Result<std::unique_ptr<Stream>> session = p.tls->take_stream(std::move(p.fd));
      p.tls.reset();
      if (!session.ok()) return finish(it, session.status());
      p.stream = std::move(*session);
      return ++it;  // the client's HELLO comes through the session
    }
    auto& out = p.hs->output();
    if (!out.empty() && (ev & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t w = p.stream->send_now(out.data(), out.size());
      if (w > 0) out.erase(out.begin(), out.begin() + w);
      else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return finish(it, Unavailable(opts.what + ": connection from " + p.addr + " failed: " + std::strerror(errno)));
    } else if (out.empty() && (ev & (POLLIN | POLLERR | POLLHUP))) {
      unsigned char buf[1100];
      const size_t want = std::min(sizeof buf, p.hs->wanted());
      ssize_t r = want ? p.stream->recv_now(buf, want) : 0;
      if (r == 0)
        return finish(it, Unavailable(opts.what + ": connection from " + p.addr + " closed during the handshake"));
      if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return ++it;
        return finish(it, Unavailable(opts.what + ": connection from " + p.addr + " failed: " + std::strerror(errno)));
      }
      p.hs->feed(buf, static_cast<size_t>(r));
      // With TLS, a client may only name the task its certificate is for: refuse before any
      // answer of the handshake goes out.
      if (p.tls_used && !p.hs->peer().task_name.empty()) {
        Status id = identity_check(p);
        if (!id.ok()) return finish(it, id);
      }
      // A short answer normally fits the socket buffer at once.
      auto& o = p.hs->output();
      if (!o.empty()) {
        ssize_t w = p.stream->send_now(o.data(), o.size());
        if (w > 0) o.erase(o.begin(), o.begin() + w);
      }
    }
    if (!p.hs->output().empty()) return ++it;  // finish writing first
    if (p.hs->state() == ServerHandshake::State::kFailed) return finish(it, p.hs->error());
    if (p.hs->state() == ServerHandshake::State::kDone) return finish(it, Status::OK());
    return ++it;
  }

  // With TLS: OK when the client's certificate is for the task it names in the handshake.
  Status identity_check(const Pending& p) const {
    if (certificate_allows(p.cert_cn, p.hs->peer().task_name)) return Status::OK();
    return Unauthenticated(opts.what + ": connection from " + p.addr + " presents the certificate of '" + p.cert_cn +
                           "' but names the task '" + p.hs->peer().task_name + "'");
  }

  std::list<Pending>::iterator finish(std::list<Pending>::iterator it, const Status& st) {
    Pending p = std::move(*it);
    it = pending.erase(it);
    set_pending();
    Status why = st;
    if (why.ok() && p.tls_used) why = identity_check(p);
    if (why.ok()) {
      count(&PreAuthStats::authenticated);
      if (!p.stream->is_tls()) {
        // Plain connections are handed over blocking (TLS sessions stay non-blocking: Stream).
        int fd = p.stream->fd();
        int flags = ::fcntl(fd, F_GETFL, 0);
        if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
      }
      if (on_auth) on_auth(std::move(p.stream), p.hs->peer(), p.addr);
      return it;
    }
    {
      std::lock_guard<std::mutex> l(mu);
      ++stats.rejected;
      if (why.code() == Code::kUnauthenticated) ++stats.auth_failures;
    }
    if (why.code() == Code::kUnauthenticated) strike(host_part(p.addr), Clock::now());
    int64_t held = 0;
    if (!stopping.load() && refused_log.allow(&held)) {
      AF_LOG(WARNING) << opts.what << ": rejected connection on port " << local_port(listener.get()) << ": " << why
                      << suppressed_note(held);
    }
    ::shutdown(p.stream ? p.stream->fd() : p.fd.get(), SHUT_RDWR);
    if (on_rejected) on_rejected(why);
    return it;
  }

  void expire(Clock::time_point now) {
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->deadline > now) {
        ++it;
        continue;
      }
      count(&PreAuthStats::timed_out);
      {
        std::lock_guard<std::mutex> l(mu);
        ++stats.rejected;
      }
      int64_t held = 0;
      if (timeout_log.allow(&held)) {
        AF_LOG(WARNING) << opts.what << ": closing the connection from " << it->addr << ": no handshake within "
                        << opts.handshake_timeout.count() << " ms" << suppressed_note(held);
      }
      Status why = DeadlineExceeded(opts.what + ": no handshake from " + it->addr + " within " +
                                    std::to_string(opts.handshake_timeout.count()) + " ms");
      it = pending.erase(it);
      set_pending();
      if (on_rejected) on_rejected(why);
    }
  }
};

Result<std::unique_ptr<PreAuthListener>> PreAuthListener::start(Fd listener, Options options, OnAuthenticated on_auth,
                                                                OnRejected on_rejected, OnTick on_tick) {
  std::unique_ptr<PreAuthListener> l(new PreAuthListener());
  l->impl_ = std::make_unique<Impl>();
  Impl& im = *l->impl_;
  im.wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!im.wake.valid()) return Internal(std::string("eventfd: ") + std::strerror(errno));
  int flags = ::fcntl(listener.get(), F_GETFL, 0);
  if (flags >= 0) ::fcntl(listener.get(), F_SETFL, flags | O_NONBLOCK);
  l->port_ = local_port(listener.get());
  im.listener = std::move(listener);
  im.opts = std::move(options);
  if (im.opts.max_pending == 0) im.opts.max_pending = 1;
  if (im.opts.handshake.tls) {
    if (!im.opts.tls_limiter) im.opts.tls_limiter = HandshakeLimiter::process();
    im.tls_refused = &Metrics::global().counter("actorflow_tls_handshakes_refused_total",
                                                "TLS handshakes refused at accept: their source address was over its rate",
                                                {{"listener", im.opts.what}});
  }
  im.on_auth = std::move(on_auth);
  im.on_rejected = std::move(on_rejected);
  im.on_tick = std::move(on_tick);
  l->thread_ = std::thread([&im] { im.run(); });
  return l;
}

PreAuthListener::~PreAuthListener() {
  if (!impl_) return;
  impl_->stopping.store(true);
  uint64_t one = 1;
  ssize_t r = ::write(impl_->wake.get(), &one, sizeof one);
  (void)r;
  if (thread_.joinable()) thread_.join();
  if (!impl_->opts.handshake.secret.empty())
    std::fill(impl_->opts.handshake.secret.begin(), impl_->opts.handshake.secret.end(), '\0');
}

PreAuthStats PreAuthListener::stats() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->stats;
}

}  // namespace net
}  // namespace actorflow
