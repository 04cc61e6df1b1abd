// A node's metrics endpoint: a minimal HTTP/1.1 server for Prometheus.
//
//   GET /metrics   200, the node's measurements in text exposition format 0.0.4
//   GET /healthz   200 "ok" (liveness and readiness probes; says nothing else, no secret needed)
//   GET /auth      the task proves itself to a tool, then the tool to the task (below)
//   routes         200, each extra path of MetricsHttpOptions::routes (the dashboard's page and API)
//   anything else  404 (unknown path), 405 (not GET), 400 (not HTTP or a request over 8 KiB)
//
// No secret before proof (docs/security.md, "Metrics and dashboard"). The cluster secret is never
// a credential here and never crosses the connection; it keys a challenge-response that makes the
// endpoint prove which task it is before a tool (`actorflow status`, `actorflow dashboard`) sends
// anything that depends on the secret:
//
//   tool -> task   GET /auth            X-Actorflow-Nonce: <cn: 64 hex digits, fresh>
//   task -> tool   200, keep-alive      "task <task>\nnonce <sn: 64 hex digits, fresh>\nproof <P>\n"
//   tool -> task   GET /metrics         Authorization: Actorflow <C>      (same connection)
//   task -> tool   200 and the metrics, or 401
//
//   P = HMAC-SHA256(secret, "actorflow/metrics/server" | fingerprint | task | cn | sn)   (hex)
//   C = HMAC-SHA256(secret, "actorflow/metrics/client" | fingerprint | task | sn | cn)   (hex)
//   ("|" is a newline byte). The tool checks P against the task it meant to reach before it
//   sends C: a process on a stopped task's port, or another task on it, is refused by name and
//   gets nothing but a fresh nonce. C is bound to this connection's nonces: useless elsewhere.
//
// Who may GET /metrics (and routes with needs_secret): anyone when the endpoint has neither a
// secret nor a scrape token (loopback clusters without a secret); with TLS, any client whose
// certificate the TLS handshake accepted (the cluster CA's); a tool that proved the secret as
// above; and, for /metrics only, "Authorization: Bearer <scrape token>" (MetricsHttpOptions::
// scrape_token, the cluster file's [cluster] metrics_token_file: a read-only credential for
// Prometheus, worth only the metrics, never the cluster secret). Credentials are compared in
// constant time.
//
// It binds the task's own address (or [server] bind), never all interfaces by default. With TLS
// the endpoint speaks TLS 1.3 only and requires a client certificate of the cluster's CA, as the
// other ports do (Prometheus: scheme https, tls_config with the CA and a client certificate).
//
// Health that survives (docs/security.md, "Health that survives"): whatever a stranger holds open,
// /healthz and the metrics keep answering. One thread drives every connection with poll(): it
// accepts without blocking (up to 256 a wake-up, from a listen backlog of 1024), runs TLS
// handshakes, reads requests and writes answers on non-blocking sockets, so no connection can
// hold it. Bounds:
//   - a connection has 2 s from its accept to a whole request head (TLS handshake included;
//     after GET /auth, 2 s more for the one request that follows) and 5 s to take its answer,
//     then it is closed; a request head is at most 8 KiB (400);
//   - at most 1024 connections (fewer when RLIMIT_NOFILE is low: half the descriptors above 64,
//     at least 16) and 64 from one address; a new connection beyond either cap closes the OLDEST
//     one (of that address, for the per-address cap) that is not waiting for its answer, so idle
//     connections cannot lock probes out;
//   - /healthz, /auth and refusals are answered on the loop itself; GET /metrics and the routes'
//     bodies and handlers run on one handler thread, at most 16 requests waiting for it (503
//     beyond), so a slow render never delays a probe; an answer not ready 30 s after its
//     request closes the connection;
//   - accept failing for lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) closes
//     the oldest connection and backs off (10 ms doubling to 1 s) instead of spinning;
//   - with TLS, a connection whose source address is over its rate of TLS handshakes (a limiter
//     shared with the process's other TLS listeners, net/handshake_limiter.h) is closed at accept,
//     before any TLS work, and counted in actorflow_tls_handshakes_refused_total{listener="metrics"};
//   - log lines about strangers (failed TLS handshakes, timeouts, evictions, accept failures,
//     rate limits) are rate limited to one a second per kind, with a count of those held back.
//
// Thread-safety: start() returns a running server; port() may be called from any thread; the
// destructor stops both threads and closes every connection (it must not race with other calls;
// it waits for a handler already running). `render` and the routes' bodies and handlers run on
// the handler thread, one at a time, while other threads of the program run: they must be
// thread-safe with respect to those, and should return within seconds.
#pragma once

#include <cstdint>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/status.h"
#include "net/socket.h"

namespace actorflow {
namespace net {

class TlsContext;
class HandshakeLimiter;

// A request as a route's handler sees it. Plain value.
struct HttpRequest {
  std::string method;  // "GET" or "HEAD"
  std::string path;    // the target up to '?'
  std::string query;   // after '?' ("" when none)
  std::string head;    // the whole request head (request line and headers)
};

// A route handler's answer. Plain value.
struct HttpResponse {
  int code = 200;
  std::string reason = "OK";
  std::string content_type = "text/plain; charset=utf-8";
  std::string headers;  // extra header lines, each ending in "\r\n"
  std::string body;
};

// One more GET path of the server (the dashboard's page, script and API, cli/dashboard.cc).
struct HttpRoute {
  std::string content_type = "text/plain; charset=utf-8";
  bool needs_secret = true;             // behind the same rule as /metrics, scrape token aside
  std::function<std::string()> body;    // called on the server's handler thread for each request
  // When set, answers the request itself instead of `body` (no check by the server: the handler
  // does its own, e.g. the dashboard's session cookie). Called on the server's handler thread.
  std::function<HttpResponse(const HttpRequest&)> handle;
};

struct MetricsHttpOptions {
  std::string host;                          // address to bind
  uint16_t port = 0;                         // 0: any free port (tests)
  std::string secret;                        // keys GET /auth's proofs; "" = no proofs (see above)
  std::string task;                          // the task this endpoint proves to be ("worker/1")
  std::string fingerprint;                   // the cluster file's, bound into the proofs
  std::string scrape_token;                  // Bearer credential for GET /metrics only; "" = none
  std::shared_ptr<const TlsContext> tls;     // null = plain HTTP
  // With tls: who admits TLS handshakes per source address; null means the process's
  // (HandshakeLimiter::process()). Unused for plain HTTP.
  std::shared_ptr<HandshakeLimiter> tls_limiter;
  std::function<std::string()> render;       // the body of GET /metrics; null: no /metrics (404)
  std::map<std::string, HttpRoute> routes;   // more GET paths, exact match without the query
};

class MetricsHttpServer {
 public:
  // Binds and starts serving. Errors: the bind's (naming the address), InvalidArgument without
  // a render function nor routes, or a route with neither a body function nor a handler.
  static Result<std::unique_ptr<MetricsHttpServer>> start(MetricsHttpOptions opts);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  uint16_t port() const { return port_; }

 private:
  struct Impl;
  MetricsHttpServer() = default;

  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
};

// How a tool scrapes one task's endpoint. Plain value.
struct ScrapeOptions {
  std::string secret;       // the cluster secret: "" = a plain GET (clusters without one)
  std::string task;         // the task the endpoint must prove to be ("worker/1"); with a secret
  std::string fingerprint;  // the cluster file's
  std::shared_ptr<const TlsContext> tls;  // null = plain HTTP
  std::chrono::milliseconds timeout{2000};
  std::string path = "/metrics";
};

// GET o.path of the endpoint at host:port (what `actorflow status` reads): the body of a 200
// answer. With a secret it first has the endpoint prove that it is o.task (GET /auth, above) and
// only then sends its own proof; the secret itself is never sent. With `tls` it speaks TLS
// presenting that context's certificate. Errors, each naming host:port: Unauthenticated naming
// the task when the endpoint does not prove it is that task (nothing was sent to it but a nonce);
// Unavailable (cannot connect, connection closed), DeadlineExceeded (no whole answer by the
// timeout), PermissionDenied (401), Internal (another status or not HTTP).
Result<std::string> scrape_metrics(const std::string& host, uint16_t port, const ScrapeOptions& o);

// The proofs of GET /auth (hex HMAC-SHA256, see above): `role` is "server" (P: first = the
// client's nonce, second = the server's) or "client" (C: first = the server's nonce, second =
// the client's). Pure; "" if OpenSSL fails.
std::string metrics_proof(const std::string& secret, const std::string& role, const std::string& fingerprint,
                          const std::string& task, const std::string& first, const std::string& second);

// The value of the first header `name` (case-insensitive, without the colon) of an HTTP request
// or answer head, without surrounding blanks; "" when absent. Pure.
std::string http_header(const std::string& head, const std::string& name);

// One scrape in Prometheus text format reduced to what a table needs: family name (a histogram's
// "_sum"/"_count" series keep their suffix, buckets are dropped) -> the sum over its series.
// Comment lines and lines that do not parse are skipped. Pure.
std::map<std::string, double> sum_by_family(const std::string& text);

// The series of family `name` in a scrape, summed by the value of their label `label` (series
// without it are skipped): e.g. ("actorflow_summary", "tag") -> {"loss": 0.3, "accuracy": 0.9}.
// Label values are unescaped (\\, \", \n). Pure.
std::map<std::string, double> sum_by_label(const std::string& text, const std::string& name, const std::string& label);

}  // namespace net
}  // namespace actorflow
