#include "net/metrics_http.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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
constexpr size_t kMaxAuthAnswer = 4 << 10;
constexpr int kMaxConcurrent = 8;
constexpr auto kConnectionBudget = std::chrono::seconds(2);

std::string response(int code, const std::string& reason, const std::string& body, const std::string& type = "text/plain",
                     const std::string& extra = "", bool keep_alive = false) {
  return "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: " +
         (keep_alive ? "keep-alive" : "close") + "\r\n" + extra + "\r\n" + body;
}

// Waits until `fd` is ready for `events` or `deadline` passes; false on timeout or error.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return false;
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, static_cast<int>(left)) == 1 && (p.revents & (events | POLLHUP | POLLERR));
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

Result<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::start(MetricsHttpOptions opts) {
  if (!opts.render && opts.routes.empty()) return InvalidArgument("metrics endpoint: no render function");
  for (const auto& [path, r] : opts.routes)
    if (!r.body && !r.handle) return InvalidArgument("metrics endpoint: route " + path + " has neither a body nor a handler");
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
  // Reads one request head (up to its blank line) within the size and time budget; bytes read
  // past it stay in `rest` for the next. 0: got one; 1: too large or too slow; 2: closed.
  std::string rest;
  auto read_head = [&](std::string* head) -> int {
    std::string req = std::move(rest);
    rest.clear();
    char buf[2048];
    size_t end;
    while ((end = head_end(req)) == std::string::npos) {
      if (req.size() > kMaxRequest || Clock::now() > deadline) return 1;
      const ssize_t n = stream->recv(buf, sizeof buf, false);
      if (n > 0) {
        req.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EAGAIN) {
        return 2;
      }
    }
    if (end > kMaxRequest) return 1;
    *head = req.substr(0, end);
    rest = req.substr(end);
    return 0;
  };
  auto too_large = [&] {
    const std::string r = response(400, "Bad Request", "request too large or too slow\n");
    (void)stream->write_all(r.data(), r.size(), peer);
  };
  std::string head;
  int got = read_head(&head);
  if (got == 1) return too_large();
  if (got == 2) return;
  RequestLine rl = parse_request_line(head);
  // A tool's challenge (see the header): this task proves itself, then the tool on the same
  // connection. Without a secret there is nothing to prove (404 below).
  bool proved = false;
  if (rl.ok && rl.path == "/auth" && rl.method == "GET" && !opts_.secret.empty()) {
    const std::string cn = header_value(head, "x-actorflow-nonce");
    if (!is_hex64(cn)) {
      const std::string r = response(400, "Bad Request", "X-Actorflow-Nonce must be 64 lower-case hex digits\n");
      (void)stream->write_all(r.data(), r.size(), peer);
      return;
    }
    const std::string sn = random_hex32();
    const std::string proof = metrics_proof(opts_.secret, "server", opts_.fingerprint, opts_.task, cn, sn);
    if (sn.empty() || proof.empty()) {
      const std::string r = response(500, "Internal Server Error", "no randomness or HMAC from OpenSSL\n");
      (void)stream->write_all(r.data(), r.size(), peer);
      return;
    }
    const std::string r = response(200, "OK", "task " + opts_.task + "\nnonce " + sn + "\nproof " + proof + "\n",
                                   "text/plain", "Cache-Control: no-store\r\n", /*keep_alive=*/true);
    if (!stream->write_all(r.data(), r.size(), peer).ok()) return;
    got = read_head(&head);
    if (got == 1) return too_large();
    if (got == 2) return;
    rl = parse_request_line(head);
    const std::string auth = header_value(head, "authorization");
    if (auth.rfind("Actorflow ", 0) == 0)
      proved = same(auth.substr(10), metrics_proof(opts_.secret, "client", opts_.fingerprint, opts_.task, sn, cn));
  }
  std::string answer;
  if (!rl.ok) {
    answer = response(400, "Bad Request", "not an HTTP request\n");
  } else {
    const std::string& method = rl.method;
    const std::string& path = rl.path;
    const auto route = opts_.routes.find(path);
    if (method != "GET" && method != "HEAD") {
      answer = response(405, "Method Not Allowed", "GET only\n", "text/plain", "Allow: GET\r\n");
    } else if (path == "/healthz") {
      answer = response(200, "OK", "ok\n");
    } else if (route != opts_.routes.end() && route->second.handle) {
      const HttpResponse h = route->second.handle(HttpRequest{method, path, rl.query, head});
      answer = response(h.code, h.reason, h.body, h.content_type, h.headers);
    } else if (route == opts_.routes.end() && (path != "/metrics" || !opts_.render)) {
      answer = response(404, "Not Found", opts_.render ? "try /metrics\n" : "not found\n");
    } else {
      const bool needs = route == opts_.routes.end() || route->second.needs_secret;
      // Open without any credential configured; with TLS the handshake accepted a certificate of
      // the cluster's CA; a tool proved the secret; Prometheus' read-only token for /metrics.
      bool allowed = !needs || (opts_.secret.empty() && opts_.scrape_token.empty()) || opts_.tls != nullptr || proved;
      if (!allowed && path == "/metrics" && !opts_.scrape_token.empty()) {
        const std::string auth = header_value(head, "authorization");
        allowed = auth.rfind("Bearer ", 0) == 0 && same(auth.substr(7), opts_.scrape_token);
      }
      if (!allowed) {
        answer = response(401, "Unauthorized",
                          "this needs a proof of the cluster secret (GET /auth first) or, for /metrics, "
                          "Authorization: Bearer <scrape token>\n",
                          "text/plain", "WWW-Authenticate: Bearer realm=\"actorflow\"\r\n");
      } else if (route != opts_.routes.end()) {
        answer = response(200, "OK", route->second.body(), route->second.content_type, "Cache-Control: no-store\r\n");
      } else {
        answer = response(200, "OK", opts_.render(), "text/plain; version=0.0.4; charset=utf-8");
      }
    }
    if (method == "HEAD") answer = answer.substr(0, answer.find("\r\n\r\n") + 4);
  }
  (void)stream->write_all(answer.data(), answer.size(), peer);
  (void)stream->shutdown();
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
