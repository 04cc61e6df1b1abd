#include "net/metrics_http.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <vector>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdlib>

#include "core/logging.h"
#include "core/metrics.h"
#include "net/handshake_limiter.h"
#include "net/log_limiter.h"
#include "net/stream.h"
#include "net/tls.h"

namespace actorflow {
namespace net {
namespace {

constexpr size_t kMaxRequest = 8 << 10;
constexpr size_t kMaxAuthAnswer = 4 << 10;
constexpr size_t kMaxConnections = 1024;
constexpr size_t kMaxPerPeer = 64;
constexpr size_t kMaxQueued = 16;  // requests waiting for (or on) the handler thread
constexpr auto kRequestBudget = std::chrono::seconds(2);
constexpr auto kAnswerBudget = std::chrono::seconds(5);
constexpr auto kHandlerBudget = std::chrono::seconds(30);

std::string response(int code, const std::string& reason, const std::string& body, const std::string& type = "text/plain",
                     const std::string& extra = "", bool keep_alive = false) {
  return "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: " +
         (keep_alive ? "keep-alive" : "close") + "\r\n" + extra + "\r\n" + body;
}

std::string hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = d[p[i] >> 4];
    s[2 * i + 1] = d[p[i] & 15];
  }
  return s;
}

// 32 random bytes from OpenSSL as 64 hex digits, or "" when it fails.
std::string random_hex32() {
  unsigned char b[32];
  if (RAND_bytes(b, sizeof b) != 1) return "";
  return hex(b, sizeof b);
}

bool is_hex64(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

bool same(const std::string& value, const std::string& expect) {
  return !expect.empty() && value.size() == expect.size() &&
         CRYPTO_memcmp(value.data(), expect.data(), expect.size()) == 0;
}

// The value of the first header `name` (lower case, no colon) of a request or answer head, with
// surrounding spaces removed; "" when absent. Header names are case-insensitive.
std::string header_value(const std::string& head, const std::string& name) {
  std::string lower(head.size(), ' ');
  for (size_t i = 0; i < head.size(); ++i) lower[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(head[i])));
  const size_t h = lower.find("\n" + name + ":");
  if (h == std::string::npos) return "";
  size_t v = h + name.size() + 2;
  while (v < head.size() && (head[v] == ' ' || head[v] == '\t')) ++v;
  size_t end = head.find_first_of("\r\n", v);
  if (end == std::string::npos) end = head.size();
  while (end > v && (head[end - 1] == ' ' || head[end - 1] == '\t')) --end;
  return head.substr(v, end - v);
}

// Where a request head ends (just past its blank line), or npos.
size_t head_end(const std::string& s) {
  const size_t a = s.find("\r\n\r\n"), b = s.find("\n\n");
  if (a == std::string::npos && b == std::string::npos) return std::string::npos;
  if (b == std::string::npos || (a != std::string::npos && a < b)) return a + 4;
  return b + 2;
}

// A request line split up; ok = false when it is not "METHOD TARGET HTTP/...".
struct RequestLine {
  bool ok = false;
  std::string method, target, path, query;
};
RequestLine parse_request_line(const std::string& head) {
  RequestLine r;
  const std::string line = head.substr(0, head.find_first_of("\r\n"));
  const size_t sp1 = line.find(' '), sp2 = line.find(' ', sp1 == std::string::npos ? 0 : sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0) return r;
  r.ok = true;
  r.method = line.substr(0, sp1);
  r.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const size_t q = r.target.find('?');
  r.path = r.target.substr(0, q);
  r.query = q == std::string::npos ? "" : r.target.substr(q + 1);
  return r;
}

}  // namespace

std::string http_header(const std::string& head, const std::string& name) {
  std::string lower(name.size(), ' ');
  for (size_t i = 0; i < name.size(); ++i) lower[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(name[i])));
  return header_value(head, lower);
}

std::string metrics_proof(const std::string& secret, const std::string& role, const std::string& fingerprint,
                          const std::string& task, const std::string& first, const std::string& second) {
  const std::string msg = "actorflow/metrics/" + role + "\n" + fingerprint + "\n" + task + "\n" + first + "\n" + second;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  static const unsigned char kEmptyKey[1] = {0};
  const unsigned char* key = secret.empty() ? kEmptyKey : reinterpret_cast<const unsigned char*>(secret.data());
  if (!HMAC(EVP_sha256(), key, static_cast<int>(secret.size()), reinterpret_cast<const unsigned char*>(msg.data()),
            msg.size(), out, &len))
    return "";
  std::string h = hex(out, len);
  OPENSSL_cleanse(out, sizeof out);
  return h;
}

// The server's state, all of it driven by the loop thread but for the handler queue (`mu`).
struct MetricsHttpServer::Impl {
  struct Conn {
    enum class State { kHandshake, kReading, kBusy, kWriting };
    uint64_t id = 0;
    Fd fd;                           // the socket while TLS is set up (then `stream` owns it)
    std::unique_ptr<TlsAccept> tls;  // the TLS handshake in progress (kHandshake)
    std::unique_ptr<Stream> stream;  // the connection once any TLS handshake is done
    std::string peer, ip;            // "ip:port", "ip"
    State state = State::kReading;
    Clock::time_point deadline;      // closed when it passes (see the header's bounds)
    std::string in;                  // received, not consumed yet
    bool eof = false;                // the peer shut its side down
    std::string out;                 // the answer being written, from out_off
    size_t out_off = 0;
    bool keep_open = false;          // after `out`: read one more request (the one after GET /auth)
    bool head_only = false;          // HEAD: only the head of the handler's answer
    bool after_auth = false;         // the next request may carry a tool's proof for cn/sn
    std::string cn, sn;              // GET /auth's nonces on this connection
    int sock() const { return stream ? stream->fd() : fd.get(); }
  };
  using Iter = std::list<Conn>::iterator;
  struct Job {
    uint64_t conn = 0;
    std::function<std::string()> answer;
  };

  MetricsHttpOptions opts;
  Fd listen;
  Fd wake;  // eventfd: stop, or an answer of the handler thread is ready
  size_t max_conns = kMaxConnections;
  std::atomic<bool> stopping{false};
  // Loop thread only.
  std::list<Conn> conns;  // oldest first
  std::map<std::string, size_t> per_ip;
  uint64_t next_id = 1;
  size_t outstanding = 0;  // jobs handed to the handler thread whose answer has not come back
  Clock::time_point accept_resume{};
  std::chrono::milliseconds backoff{0};
  LogLimiter tls_log, timeout_log, evict_log, accept_log, poll_log, rate_log;
  Counter* tls_refused = nullptr;  // actorflow_tls_handshakes_refused_total{listener="metrics"} (TLS only)
  // Handler thread's queue.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;                               // guarded by mu
  std::vector<std::pair<uint64_t, std::string>> done;  // guarded by mu
  bool handler_stop = false;                          // guarded by mu
  std::thread loop_thread, handler_thread;

  void notify() {
    const uint64_t one = 1;
    (void)!::write(wake.get(), &one, sizeof one);
  }

  void handler_loop() {
    std::unique_lock<std::mutex> l(mu);
    for (;;) {
      cv.wait(l, [&] { return handler_stop || !jobs.empty(); });
      if (handler_stop) return;
      Job j = std::move(jobs.front());
      jobs.pop_front();
      l.unlock();
      std::string a = j.answer();
      l.lock();
      done.emplace_back(j.conn, std::move(a));
      notify();
    }
  }

  void run() {
    std::vector<pollfd> fds;
    while (!stopping.load()) {
      const auto now = Clock::now();
      const bool accepting = now >= accept_resume;
      fds.clear();
      fds.push_back({wake.get(), POLLIN, 0});
      fds.push_back({listen.get(), static_cast<short>(accepting ? POLLIN : 0), 0});
      Clock::time_point next = now + std::chrono::seconds(1);
      if (!accepting) next = std::min(next, accept_resume);
      for (const Conn& c : conns) {
        short ev = 0;
        if (c.state == Conn::State::kHandshake) ev = c.tls->wants() == TlsAccept::Want::kWrite ? POLLOUT : POLLIN;
        else if (c.state == Conn::State::kReading) ev = POLLIN;
        else if (c.state == Conn::State::kWriting) ev = POLLOUT;
        fds.push_back({c.sock(), ev, 0});
        next = std::min(next, c.deadline);
      }
      const int wait_ms = static_cast<int>(std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1));
      const int pr = ::poll(fds.data(), fds.size(), wait_ms);
      if (pr < 0 && errno != EINTR) {
        int64_t held = 0;
        if (poll_log.allow(&held)) {
          AF_LOG(ERROR) << "metrics endpoint: poll: " << strerror(errno) << suppressed_note(held);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (stopping.load()) break;
      if (pr > 0) {
        // Connections first (their pollfds follow the listener's, in list order); new ones are
        // only appended below, and a step erases at most the connection it was given.
        size_t i = 2;
        for (auto it = conns.begin(); it != conns.end() && i < fds.size(); ++i) {
          const short ev = fds[i].revents;
          it = ev == 0 ? std::next(it) : step(it, ev);
        }
        if (fds[0].revents & POLLIN) {
          uint64_t n;
          (void)!::read(wake.get(), &n, sizeof n);
          std::vector<std::pair<uint64_t, std::string>> ready;
          {
            std::lock_guard<std::mutex> l(mu);
            ready.swap(done);
          }
          for (auto& [id, answer] : ready) complete(id, std::move(answer));
        }
      }
      expire(Clock::now());
      if (pr > 0 && (fds[1].revents & POLLIN)) accept_some();
    }
    conns.clear();
  }

  void accept_some() {
    for (int n = 0; n < 256 && !stopping.load(); ++n) {
      const int fd = ::accept4(listen.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        const int e = errno;
        if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == ECONNABORTED || e == EPROTO) return;
        if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
          backoff = backoff.count() == 0 ? std::chrono::milliseconds(10)
                                         : std::min(backoff * 2, std::chrono::milliseconds(1000));
          accept_resume = Clock::now() + backoff;
          (void)evict(nullptr, "out of descriptors");  // frees one for the next try
        }
        int64_t held = 0;
        if (accept_log.allow(&held)) {
          AF_LOG(WARNING) << "metrics endpoint: accept on port " << local_port(listen.get()) << " failed: "
                          << strerror(e) << "; not accepting for " << backoff.count() << " ms" << suppressed_note(held);
        }
        return;
      }
      backoff = std::chrono::milliseconds(0);
      admit(Fd(fd));
    }
  }

  void admit(Fd fd) {
    Conn c;
    c.id = next_id++;
    c.peer = peer_name(fd.get());
    c.ip = c.peer.substr(0, c.peer.rfind(':'));
    c.deadline = Clock::now() + kRequestBudget;
    if (opts.tls && !opts.tls_limiter->admit(c.ip)) {
      // Over its address's rate of TLS handshakes: closed before any TLS work (net/handshake_limiter.h).
      tls_refused->inc();
      int64_t held = 0;
      if (rate_log.allow(&held)) {
        const HandshakeLimits& lim = opts.tls_limiter->limits();
        AF_LOG(WARNING) << "metrics endpoint: closing the connection from " << c.peer
                        << " at accept: its address is over its rate of TLS handshakes (" << lim.burst
                        << " at once, then " << lim.per_second
                        << " a second: ACTORFLOW_TLS_HANDSHAKE_BURST, ACTORFLOW_TLS_HANDSHAKES_PER_SECOND)"
                        << suppressed_note(held);
      }
      return;  // `fd` closes
    }
    auto same_ip = per_ip.find(c.ip);
    if (same_ip != per_ip.end() && same_ip->second >= kMaxPerPeer)
      (void)evict(&c.ip, "at its cap of " + std::to_string(kMaxPerPeer) + " connections from " + c.ip);
    if (conns.size() >= max_conns && !evict(nullptr, "at its cap of " + std::to_string(max_conns) + " connections"))
      return;  // every one awaits its answer: the new one is closed

    if (opts.tls) {
      c.tls = std::make_unique<TlsAccept>(*opts.tls, fd.get(), c.peer);
      c.fd = std::move(fd);
      c.state = Conn::State::kHandshake;
    } else {
      c.stream = std::make_unique<Stream>(std::move(fd));
    }
    ++per_ip[c.ip];
    conns.push_back(std::move(c));
  }

  Iter close(Iter it) {
    auto p = per_ip.find(it->ip);
    if (p != per_ip.end() && --p->second == 0) per_ip.erase(p);
    return conns.erase(it);
  }

  // Closes the oldest connection (from `ip` when given) that is not waiting for the handler
  // thread's answer; false when there is none. `why` starts the log line.
  bool evict(const std::string* ip, const std::string& why) {
    for (auto it = conns.begin(); it != conns.end(); ++it) {
      if (it->state == Conn::State::kBusy || (ip && it->ip != *ip)) continue;
      int64_t held = 0;
      if (evict_log.allow(&held)) {
        AF_LOG(WARNING) << "metrics endpoint: " << why << "; closing the oldest connection, from " << it->peer
                        << suppressed_note(held);
      }
      close(it);
      return true;
    }
    return false;
  }

  void expire(Clock::time_point now) {
    for (auto it = conns.begin(); it != conns.end();) {
      if (it->deadline > now) {
        ++it;
        continue;
      }
      int64_t held = 0;
      if (timeout_log.allow(&held)) {
        const char* what = it->state == Conn::State::kWriting ? "took no whole answer within 5 s"
                           : it->state == Conn::State::kBusy  ? "got no answer from the handler within 30 s"
                                                              : "sent no whole request within 2 s";
        AF_LOG(INFO) << "metrics endpoint: closing the connection from " << it->peer << ": it " << what
                     << suppressed_note(held);
      }
      it = close(it);
    }
  }

  Iter step(Iter it, short ev) {
    Conn& c = *it;
    switch (c.state) {
      case Conn::State::kHandshake: {
        const TlsAccept::Want w = c.tls->step();
        if (w == TlsAccept::Want::kFailed) {
          int64_t held = 0;
          if (tls_log.allow(&held)) {
            AF_LOG(INFO) << "metrics endpoint: " << c.tls->error() << suppressed_note(held);
          }
          return close(it);
        }
        if (w != TlsAccept::Want::kDone) return std::next(it);
        auto s = c.tls->take_stream(std::move(c.fd));
        c.tls.reset();
        if (!s.ok()) return close(it);
        c.stream = std::move(*s);
        c.state = Conn::State::kReading;
        return read(it);  // the request may have come with the handshake's last flight
      }
      case Conn::State::kReading:
        return read(it);
      case Conn::State::kWriting:
        return flush(it);
      case Conn::State::kBusy:
        return (ev & (POLLERR | POLLHUP | POLLNVAL)) ? close(it) : std::next(it);  // gone: else poll() spins
    }
    return std::next(it);
  }

  // Takes what the socket has (up to the size cap) and answers once a whole head is in.
  Iter read(Iter it) {
    Conn& c = *it;
    char buf[4096];
    while (!c.eof && c.in.size() <= kMaxRequest) {
      const ssize_t n = c.stream->recv_now(buf, sizeof buf);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        c.eof = true;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        break;
      } else {
        return close(it);
      }
    }
    const size_t end = head_end(c.in);
    if (end == std::string::npos || end > kMaxRequest) {
      if (c.in.size() > kMaxRequest) return write(it, response(400, "Bad Request", "request too large or too slow\n"), false);
      return c.eof ? close(it) : std::next(it);
    }
    const std::string head = c.in.substr(0, end);
    c.in.erase(0, end);
    return answer(it, head);
  }

  // Starts writing `a`; with `keep_open` the connection then reads one more request.
  Iter write(Iter it, std::string a, bool keep_open) {
    Conn& c = *it;
    c.out = std::move(a);
    c.out_off = 0;
    c.keep_open = keep_open;
    c.state = Conn::State::kWriting;
    c.deadline = Clock::now() + kAnswerBudget;
    return flush(it);
  }

  Iter flush(Iter it) {
    Conn& c = *it;
    while (c.out_off < c.out.size()) {
      const ssize_t w = c.stream->send_now(c.out.data() + c.out_off, c.out.size() - c.out_off);
      if (w > 0) {
        c.out_off += static_cast<size_t>(w);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        return std::next(it);
      } else {
        return close(it);
      }
    }
    c.out.clear();
    if (!c.keep_open) {
      c.stream->shutdown();
      return close(it);
    }
    c.state = Conn::State::kReading;
    c.deadline = Clock::now() + kRequestBudget;
    return read(it);  // the next request may be here already (pipelined)
  }

  // Hands `make` to the handler thread; 503 when too many requests wait for it.
  Iter hand_off(Iter it, std::function<std::string()> make, bool head_only) {
    if (outstanding >= kMaxQueued)
      return write(it, response(503, "Service Unavailable", "busy: try again\n", "text/plain", "Retry-After: 1\r\n"), false);
    ++outstanding;
    it->state = Conn::State::kBusy;
    it->head_only = head_only;
    it->deadline = Clock::now() + kHandlerBudget;
    {
      std::lock_guard<std::mutex> l(mu);
      jobs.push_back(Job{it->id, std::move(make)});
    }
    cv.notify_one();
    return std::next(it);
  }

  void complete(uint64_t id, std::string a) {
    --outstanding;
    for (auto it = conns.begin(); it != conns.end(); ++it) {
      if (it->id != id) continue;
      if (it->state != Conn::State::kBusy) return;
      if (it->head_only) a = a.substr(0, a.find("\r\n\r\n") + 4);
      write(it, std::move(a), false);
      return;
    }
  }

  // One request head: the answer, written now or by the handler thread.
  Iter answer(Iter it, const std::string& head) {
    Conn& c = *it;
    const RequestLine rl = parse_request_line(head);
    bool proved = false;
    if (c.after_auth) {
      // The one request after GET /auth: it may carry the tool's proof for this connection's nonces.
      c.after_auth = false;
      const std::string auth = header_value(head, "authorization");
      if (auth.rfind("Actorflow ", 0) == 0)
        proved = same(auth.substr(10), metrics_proof(opts.secret, "client", opts.fingerprint, opts.task, c.sn, c.cn));
    } else if (rl.ok && rl.path == "/auth" && rl.method == "GET" && !opts.secret.empty()) {
      // A tool's challenge (see the header): this task proves itself, then the tool on the same
      // connection. Without a secret there is nothing to prove (404 below).
      c.cn = header_value(head, "x-actorflow-nonce");
      if (!is_hex64(c.cn))
        return write(it, response(400, "Bad Request", "X-Actorflow-Nonce must be 64 lower-case hex digits\n"), false);
      c.sn = random_hex32();
      const std::string proof = metrics_proof(opts.secret, "server", opts.fingerprint, opts.task, c.cn, c.sn);
      if (c.sn.empty() || proof.empty())
        return write(it, response(500, "Internal Server Error", "no randomness or HMAC from OpenSSL\n"), false);
      c.after_auth = true;
      return write(it,
                   response(200, "OK", "task " + opts.task + "\nnonce " + c.sn + "\nproof " + proof + "\n", "text/plain",
                            "Cache-Control: no-store\r\n", /*keep_alive=*/true),
                   /*keep_open=*/true);
    }
    if (!rl.ok) return write(it, response(400, "Bad Request", "not an HTTP request\n"), false);
    const std::string& method = rl.method;
    const std::string& path = rl.path;
    const bool head_only = method == "HEAD";
    auto now = [&](std::string a) {
      if (head_only) a = a.substr(0, a.find("\r\n\r\n") + 4);
      return write(it, std::move(a), false);
    };
    const auto route = opts.routes.find(path);
    if (method != "GET" && method != "HEAD")
      return now(response(405, "Method Not Allowed", "GET only\n", "text/plain", "Allow: GET\r\n"));
    if (path == "/healthz") return now(response(200, "OK", "ok\n"));
    if (route != opts.routes.end() && route->second.handle) {
      const HttpRoute* r = &route->second;
      return hand_off(it, [r, req = HttpRequest{method, path, rl.query, head}] {
        const HttpResponse h = r->handle(req);
        return response(h.code, h.reason, h.body, h.content_type, h.headers);
      }, head_only);
    }
    if (route == opts.routes.end() && (path != "/metrics" || !opts.render))
      return now(response(404, "Not Found", opts.render ? "try /metrics\n" : "not found\n"));
    const bool needs = route == opts.routes.end() || route->second.needs_secret;
    // Open without any credential configured; with TLS the handshake accepted a certificate of
    // the cluster's CA; a tool proved the secret; Prometheus' read-only token for /metrics.
    bool allowed = !needs || (opts.secret.empty() && opts.scrape_token.empty()) || opts.tls != nullptr || proved;
    if (!allowed && path == "/metrics" && !opts.scrape_token.empty()) {
      const std::string auth = header_value(head, "authorization");
      allowed = auth.rfind("Bearer ", 0) == 0 && same(auth.substr(7), opts.scrape_token);
    }
    if (!allowed)
      return now(response(401, "Unauthorized",
                          "this needs a proof of the cluster secret (GET /auth first) or, for /metrics, "
                          "Authorization: Bearer <scrape token>\n",
                          "text/plain", "WWW-Authenticate: Bearer realm=\"actorflow\"\r\n"));
    if (route != opts.routes.end()) {
      const HttpRoute* r = &route->second;
      return hand_off(it, [r] {
        return response(200, "OK", r->body(), r->content_type, "Cache-Control: no-store\r\n");
      }, head_only);
    }
    return hand_off(it, [this] {
      return response(200, "OK", opts.render(), "text/plain; version=0.0.4; charset=utf-8");
    }, head_only);
  }
};

Result<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::start(MetricsHttpOptions opts) {
  if (!opts.render && opts.routes.empty()) return InvalidArgument("metrics endpoint: no render function");
  for (const auto& [path, r] : opts.routes)
    if (!r.body && !r.handle) return InvalidArgument("metrics endpoint: route " + path + " has neither a body nor a handler");
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->impl_ = std::make_unique<Impl>();
  Impl& im = *s->impl_;
  // A listen backlog as deep as the connection cap (the kernel caps it at net.core.somaxconn): a
  // burst of strangers' connects must not fill it, or a probe's SYN is dropped and retried 1 s later.
  auto l = listen_tcp(opts.host, opts.port, static_cast<int>(kMaxConnections));
  if (!l.ok()) return l.status().with_prefix("metrics endpoint");
  im.listen = std::move(*l);
  s->port_ = local_port(im.listen.get());
  im.wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!im.wake.valid()) return Internal("metrics endpoint: eventfd: " + std::string(strerror(errno)));
  // Half of the descriptors above 64 (the rest of the process needs its own), at most 1024.
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
    im.max_conns = std::max<size_t>(16, std::min<size_t>(kMaxConnections, nofile.rlim_cur > 64 ? (nofile.rlim_cur - 64) / 2 : 0));
  im.opts = std::move(opts);
  if (im.opts.tls) {
    if (!im.opts.tls_limiter) im.opts.tls_limiter = HandshakeLimiter::process();
    im.tls_refused = &Metrics::global().counter("actorflow_tls_handshakes_refused_total",
                                                "TLS handshakes refused at accept: their source address was over its rate",
                                                {{"listener", "metrics"}});
  }
  im.handler_thread = std::thread([&im] { im.handler_loop(); });
  im.loop_thread = std::thread([&im] { im.run(); });
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (!impl_) return;
  impl_->stopping.store(true);
  impl_->notify();
  if (impl_->loop_thread.joinable()) impl_->loop_thread.join();
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->handler_stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->handler_thread.joinable()) impl_->handler_thread.join();
}

Result<std::string> scrape_metrics(const std::string& host, uint16_t port, const ScrapeOptions& o) {
  const std::string where = host + ":" + std::to_string(port);
  const auto deadline = Clock::now() + o.timeout;
  const std::string dial = host.find(':') != std::string::npos ? "[" + host + "]:" + std::to_string(port) : where;
  auto fd = connect_tcp(dial, o.timeout);
  if (!fd.ok()) return Unavailable("metrics endpoint " + where + ": " + fd.status().message());
  std::unique_ptr<Stream> stream;
  if (o.tls) {
    auto s = tls_connect(std::move(*fd), *o.tls, host, where, deadline, o.task);
    if (!s.ok()) return s.status().with_prefix("metrics endpoint " + where);
    stream = std::move(*s);
  } else {
    stream = std::make_unique<Stream>(std::move(*fd));
  }
  (void)stream->set_io_timeout(o.timeout);
  std::string ans;  // what has arrived and is not consumed yet
  char buf[16384];
  // Reads what arrives next into `ans`: true, or false once the peer closed the connection.
  auto receive = [&]() -> Result<bool> {
    if (Clock::now() > deadline) return DeadlineExceeded("metrics endpoint " + where + ": no whole answer in time");
    if (ans.size() > (64u << 20)) return Internal("metrics endpoint " + where + ": answer over 64 MiB");
    const ssize_t n = stream->recv(buf, sizeof buf, false);
    if (n > 0) ans.append(buf, static_cast<size_t>(n));
    else if (n == 0) return false;
    else if (errno != EAGAIN) return Unavailable("metrics endpoint " + where + ": " + strerror(errno));
    return true;
  };
  // During the challenge: a closed connection or an error is a refusal.
  auto receive_challenge = [&](const std::string& refused) -> Status {
    auto more = receive();
    if (!more.ok()) return more.status().code() == Code::kDeadlineExceeded ? more.status()
                                                                           : Unauthenticated(refused + " (" + more.status().message() + ")");
    if (!*more) return Unauthenticated(refused + " (it closed the connection); nothing was sent to it");
    return Status::OK();
  };
  std::string credential;
  if (!o.secret.empty()) {
    // The endpoint proves it is o.task first; nothing that depends on the secret leaves before.
    const std::string refused = "metrics endpoint " + where + " did not prove it is task " + o.task;
    const std::string cn = random_hex32();
    if (cn.empty()) return Internal("metrics endpoint " + where + ": no randomness from OpenSSL");
    const std::string hello = "GET /auth HTTP/1.1\r\nHost: " + where + "\r\nX-Actorflow-Nonce: " + cn +
                              "\r\nConnection: keep-alive\r\n\r\n";
    AF_RETURN_IF_ERROR(stream->write_all(hello.data(), hello.size(), where));
    size_t end;
    while ((end = ans.find("\r\n\r\n")) == std::string::npos) {
      if (ans.size() > kMaxAuthAnswer) return Unauthenticated(refused + " (an oversized answer); nothing was sent to it");
      AF_RETURN_IF_ERROR(receive_challenge(refused));
    }
    const std::string head = ans.substr(0, end + 4);
    if (head.compare(0, 12, "HTTP/1.1 200") != 0)
      return Unauthenticated(refused + " (it answered " + head.substr(0, std::min<size_t>(head.find('\r'), 40)) +
                             " to the challenge); nothing was sent to it");
    const std::string length = header_value(head, "content-length");
    const size_t n = length.empty() || length.size() > 4 || length.find_first_not_of("0123456789") != std::string::npos
                         ? kMaxAuthAnswer + 1
                         : static_cast<size_t>(std::stoul(length));
    if (n > kMaxAuthAnswer) return Unauthenticated(refused + " (a malformed answer); nothing was sent to it");
    while (ans.size() < end + 4 + n) AF_RETURN_IF_ERROR(receive_challenge(refused));
    const std::string body = ans.substr(end + 4, n);
    ans.erase(0, end + 4 + n);
    std::map<std::string, std::string> fields;
    for (size_t pos = 0; pos < body.size();) {
      size_t eol = body.find('\n', pos);
      if (eol == std::string::npos) eol = body.size();
      const std::string line = body.substr(pos, eol - pos);
      const size_t sp = line.find(' ');
      if (sp != std::string::npos) fields[line.substr(0, sp)] = line.substr(sp + 1);
      pos = eol + 1;
    }
    const std::string sn = fields["nonce"];
    const std::string expected = metrics_proof(o.secret, "server", o.fingerprint, o.task, cn, sn);
    if (!is_hex64(sn) || !same(fields["proof"], expected)) {
      std::string says = fields["task"].substr(0, 100);
      for (char& c : says)
        if (c < 0x20 || c > 0x7e) c = '?';
      return Unauthenticated(refused + (says.empty() || says == o.task ? std::string() : " (it says it is " + says + ")") +
                             ": its proof does not match this cluster's secret and that task; nothing was sent to it");
    }
    credential = "Authorization: Actorflow " + metrics_proof(o.secret, "client", o.fingerprint, o.task, sn, cn) + "\r\n";
  }
  const std::string req = "GET " + o.path + " HTTP/1.1\r\nHost: " + where + "\r\n" + credential + "Connection: close\r\n\r\n";
  AF_RETURN_IF_ERROR(stream->write_all(req.data(), req.size(), where));
  for (;;) {
    AF_ASSIGN_OR_RETURN(bool more, receive());
    if (!more) break;
  }
  const size_t head_end = ans.find("\r\n\r\n");
  if (ans.compare(0, 9, "HTTP/1.1 ") != 0 || head_end == std::string::npos)
    return Internal("metrics endpoint " + where + ": not an HTTP answer");
  const std::string code = ans.substr(9, 3);
  if (code == "401") return PermissionDenied("metrics endpoint " + where + ": 401 (our proof of the cluster secret was refused)");
  if (code != "200") return Internal("metrics endpoint " + where + ": HTTP " + code);
  return ans.substr(head_end + 4);
}

namespace {
// Calls f(line) for each line of `text` (without its newline).
template <class F>
void for_each_line(const std::string& text, F&& f) {
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    f(text.substr(pos, eol - pos));
    pos = eol + 1;
  }
}
}  // namespace

std::map<std::string, double> sum_by_family(const std::string& text) {
  std::map<std::string, double> out;
  for_each_line(text, [&](const std::string& line) {
    if (line.empty() || line[0] == '#') return;
    const size_t name_end = line.find_first_of("{ ");
    const size_t sp = line.rfind(' ');
    if (name_end == std::string::npos || sp == std::string::npos || sp + 1 >= line.size()) return;
    const std::string name = line.substr(0, name_end);
    if (name.size() > 7 && name.compare(name.size() - 7, 7, "_bucket") == 0) return;
    char* end = nullptr;
    const double v = std::strtod(line.c_str() + sp + 1, &end);
    if (end == line.c_str() + sp + 1) return;
    out[name] += v;
  });
  return out;
}

std::map<std::string, double> sum_by_label(const std::string& text, const std::string& name, const std::string& label) {
  std::map<std::string, double> out;
  for_each_line(text, [&](const std::string& line) {
    if (line.size() <= name.size() || line.compare(0, name.size(), name) != 0 || line[name.size()] != '{') return;
    // Walk the labels: name="value" pairs, values with \\ \" \n escapes.
    size_t i = name.size() + 1;
    std::string value;
    bool found = false, ok = false;
    while (i < line.size()) {
      if (line[i] == '}') {
        ok = true;
        ++i;
        break;
      }
      if (line[i] == ',' || line[i] == ' ') {
        ++i;
        continue;
      }
      const size_t eq = line.find("=\"", i);
      if (eq == std::string::npos) break;
      const bool mine = line.compare(i, eq - i, label) == 0;
      std::string v;
      size_t j = eq + 2;
      for (; j < line.size() && line[j] != '"'; ++j) {
        if (line[j] == '\\' && j + 1 < line.size()) {
          ++j;
          v += line[j] == 'n' ? '\n' : line[j];
        } else {
          v += line[j];
        }
      }
      if (j >= line.size()) break;
      if (mine) {
        value = v;
        found = true;
      }
      i = j + 1;
    }
    if (!ok || !found) return;
    char* end = nullptr;
    while (i < line.size() && line[i] == ' ') ++i;
    const double v = std::strtod(line.c_str() + i, &end);
    if (end == line.c_str() + i) return;
    out[value] += v;
  });
  return out;
}

}  // namespace net
}  // namespace actorflow
