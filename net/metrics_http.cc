#include "net/metrics_http.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdlib>

#include "core/logging.h"
#include "net/stream.h"
#include "net/tls.h"

namespace actorflow {
namespace net {
namespace {

constexpr size_t kMaxRequest = 8 << 10;
constexpr int kMaxConcurrent = 8;
constexpr auto kConnectionBudget = std::chrono::seconds(2);

std::string response(int code, const char* reason, const std::string& body, const char* type = "text/plain",
                     const char* extra = "") {
  return "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n" + extra + "\r\n" + body;
}

// Waits until `fd` is ready for `events` or `deadline` passes; false on timeout or error.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return false;
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, static_cast<int>(left)) == 1 && (p.revents & (events | POLLHUP | POLLERR));
}

}  // namespace

Result<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::start(MetricsHttpOptions opts) {
  if (!opts.render && opts.routes.empty()) return InvalidArgument("metrics endpoint: no render function");
  for (const auto& [path, r] : opts.routes)
    if (!r.body) return InvalidArgument("metrics endpoint: route " + path + " has no body function");
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  auto l = listen_tcp(opts.host, opts.port, 16);
  if (!l.ok()) return l.status().with_prefix("metrics endpoint");
  s->listen_ = std::move(*l);
  s->port_ = local_port(s->listen_.get());
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return Internal("metrics endpoint: pipe: " + std::string(strerror(errno)));
  s->wake_read_.reset(p[0]);
  s->wake_write_.reset(p[1]);
  s->opts_ = std::move(opts);
  s->thread_ = std::thread([raw = s.get()] { raw->loop(); });
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (wake_write_.valid()) {
    const char b = 1;
    (void)!::write(wake_write_.get(), &b, 1);
  }
  if (thread_.joinable()) thread_.join();
  std::unique_lock<std::mutex> l(mu_);
  idle_.wait(l, [&] { return active_ == 0; });
}

void MetricsHttpServer::loop() {
  while (true) {
    pollfd p[2] = {{listen_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      AF_LOG(ERROR) << "metrics endpoint: poll: " << strerror(errno);
      return;
    }
    if (p[1].revents) return;
    if (!(p[0].revents & POLLIN)) continue;
    const int c = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;  // the peer left, or out of descriptors: try again with the next one
    {
      std::lock_guard<std::mutex> l(mu_);
      if (active_ < kMaxConcurrent) {
        ++active_;
        std::thread([this, c] {
          serve(Fd(c));
          std::lock_guard<std::mutex> l2(mu_);
          --active_;
          idle_.notify_all();
        }).detach();
        continue;
      }
    }
    serve(Fd(c));  // at the cap: the accept loop serves this one itself (bounded by its budget)
  }
}

void MetricsHttpServer::serve(Fd conn) {
  const auto deadline = Clock::now() + kConnectionBudget;
  const std::string peer = peer_name(conn.get());
  std::unique_ptr<Stream> stream;
  if (opts_.tls) {
    const int fl = ::fcntl(conn.get(), F_GETFL);
    ::fcntl(conn.get(), F_SETFL, fl | O_NONBLOCK);
    TlsAccept hs(*opts_.tls, conn.get(), peer);
    for (auto w = hs.step(); w != TlsAccept::Want::kDone; w = hs.step()) {
      if (w == TlsAccept::Want::kFailed) {
        AF_LOG(INFO) << "metrics endpoint: " << hs.error();
        return;
      }
      if (!wait_for(conn.get(), w == TlsAccept::Want::kRead ? POLLIN : POLLOUT, deadline)) return;
    }
    auto s = hs.take_stream(std::move(conn));
    if (!s.ok()) return;
    stream = std::move(*s);
  } else {
    stream = std::make_unique<Stream>(std::move(conn));
  }
  (void)stream->set_io_timeout(std::chrono::milliseconds(500));
  // The request head: up to the blank line, within the size and time budget.
  std::string req;
  char buf[2048];
  while (req.find("\r\n\r\n") == std::string::npos && req.find("\n\n") == std::string::npos) {
    if (req.size() > kMaxRequest || Clock::now() > deadline) {
      const std::string r = response(400, "Bad Request", "request too large or too slow\n");
      (void)stream->write_all(r.data(), r.size(), peer);
      return;
    }
    const ssize_t n = stream->recv(buf, sizeof buf, false);
    if (n > 0) {
      req.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EAGAIN) {
      return;
    }
  }
  const size_t eol = req.find_first_of("\r\n");
  const std::string line = req.substr(0, eol);
  const size_t sp1 = line.find(' '), sp2 = line.find(' ', sp1 == std::string::npos ? 0 : sp1 + 1);
  std::string answer;
  if (sp1 == std::string::npos || sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
    answer = response(400, "Bad Request", "not an HTTP request\n");
  } else {
    const std::string method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const size_t q = target.find('?');
    const std::string path = target.substr(0, q);
    const auto route = opts_.routes.find(path);
    if (method != "GET" && method != "HEAD") {
      answer = response(405, "Method Not Allowed", "GET only\n", "text/plain", "Allow: GET\r\n");
    } else if (path == "/healthz") {
      answer = response(200, "OK", "ok\n");
    } else if (route == opts_.routes.end() && (path != "/metrics" || !opts_.render)) {
      answer = response(404, "Not Found", opts_.render ? "try /metrics\n" : "not found\n");
    } else {
      const bool needs = route == opts_.routes.end() || route->second.needs_secret;
      bool allowed = opts_.secret.empty() || !needs;
      const std::string want = "Bearer " + opts_.secret;
      auto same = [&](const std::string& value, const std::string& expect) {
        return value.size() == expect.size() && CRYPTO_memcmp(value.data(), expect.data(), expect.size()) == 0;
      };
      if (!allowed) {
        // Header names are case-insensitive; look for "authorization:" at a line start.
        std::string lower(req.size(), ' ');
        for (size_t i = 0; i < req.size(); ++i) lower[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(req[i])));
        const size_t h = lower.find("\nauthorization:");
        if (h != std::string::npos) {
          size_t v = h + 15;
          while (v < req.size() && req[v] == ' ') ++v;
          const size_t end = req.find_first_of("\r\n", v);
          allowed = same(req.substr(v, end - v), want);
        }
      }
      if (!allowed && opts_.token_in_query && q != std::string::npos) {
        // ?token=<secret> among the query's &-separated parameters (the secret is not URL-encoded:
        // cluster secrets are printable without '&', '#' or spaces, or this fails closed).
        const std::string query = target.substr(q + 1);
        for (size_t p = 0; p <= query.size() && !allowed;) {
          size_t amp = query.find('&', p);
          if (amp == std::string::npos) amp = query.size();
          const std::string kv = query.substr(p, amp - p);
          if (kv.compare(0, 6, "token=") == 0) allowed = same(kv.substr(6), opts_.secret);
          p = amp + 1;
        }
      }
      if (!allowed) {
        answer = response(401, "Unauthorized",
                          opts_.token_in_query ? "this needs Authorization: Bearer <cluster secret> or ?token=<cluster secret>\n"
                                               : "this cluster needs Authorization: Bearer <cluster secret>\n",
                          "text/plain", "WWW-Authenticate: Bearer realm=\"actorflow\"\r\n");
      } else if (route != opts_.routes.end()) {
        answer = response(200, "OK", route->second.body(), route->second.content_type.c_str(),
                          "Cache-Control: no-store\r\n");
      } else {
        answer = response(200, "OK", opts_.render(), "text/plain; version=0.0.4; charset=utf-8");
      }
      if (method == "HEAD") answer = answer.substr(0, answer.find("\r\n\r\n") + 4);
    }
  }
  (void)stream->write_all(answer.data(), answer.size(), peer);
  (void)stream->shutdown();
}

Result<std::string> scrape_metrics(const std::string& host, uint16_t port, const std::string& secret,
                                   const std::shared_ptr<const TlsContext>& tls, std::chrono::milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  const auto deadline = Clock::now() + timeout;
  const std::string dial = host.find(':') != std::string::npos ? "[" + host + "]:" + std::to_string(port) : where;
  auto fd = connect_tcp(dial, timeout);
  if (!fd.ok()) return Unavailable("metrics endpoint " + where + ": " + fd.status().message());
  std::unique_ptr<Stream> stream;
  if (tls) {
    auto s = tls_connect(std::move(*fd), *tls, host, where, deadline);
    if (!s.ok()) return s.status().with_prefix("metrics endpoint " + where);
    stream = std::move(*s);
  } else {
    stream = std::make_unique<Stream>(std::move(*fd));
  }
  (void)stream->set_io_timeout(timeout);
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: " + where + "\r\n" +
                          (secret.empty() ? "" : "Authorization: Bearer " + secret + "\r\n") + "Connection: close\r\n\r\n";
  AF_RETURN_IF_ERROR(stream->write_all(req.data(), req.size(), where));
  std::string ans;
  char buf[16384];
  while (true) {
    if (Clock::now() > deadline) return DeadlineExceeded("metrics endpoint " + where + ": no whole answer in time");
    if (ans.size() > (64u << 20)) return Internal("metrics endpoint " + where + ": answer over 64 MiB");
    const ssize_t n = stream->recv(buf, sizeof buf, false);
    if (n > 0) ans.append(buf, static_cast<size_t>(n));
    else if (n == 0) break;
    else if (errno != EAGAIN) return Unavailable("metrics endpoint " + where + ": " + strerror(errno));
  }
  const size_t head_end = ans.find("\r\n\r\n");
  if (ans.compare(0, 9, "HTTP/1.1 ") != 0 || head_end == std::string::npos)
    return Internal("metrics endpoint " + where + ": not an HTTP answer");
  const std::string code = ans.substr(9, 3);
  if (code == "401") return PermissionDenied("metrics endpoint " + where + ": 401 (the cluster secret was refused)");
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
