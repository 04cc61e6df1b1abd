// A node's metrics endpoint (issue 16 item 3): a minimal HTTP/1.1 server for Prometheus.
//
//   GET /metrics   200, the node's measurements in text exposition format 0.0.4
//   GET /healthz   200 "ok" (liveness and readiness probes; says nothing else, no secret needed)
//   routes         200, each extra path of MetricsHttpOptions::routes (the dashboard's page and API)
//   anything else  404 (unknown path), 405 (not GET), 400 (not HTTP or a request over 8 KiB)
//
// It sits behind the cluster's front-door rules: it binds the task's own address (or [server]
// bind), never all interfaces by default; with a cluster secret /metrics requires
// "Authorization: Bearer <secret>" (401 otherwise, compared in constant time); with TLS the
// endpoint speaks TLS 1.3 only and requires a client certificate of the cluster's CA, as the other
// ports do (Prometheus: scheme https, tls_config with the CA and a client certificate, and
// authorization credentials when there is a secret).
//
// Up to 8 connections at a time (each on its own short-lived thread; beyond that the accept loop
// serves the next one itself), each bounded: 2 s to handshake, send the request and receive the
// answer, a request of at most 8 KiB; then the connection is closed (no keep-alive). A stranger
// can delay scrapes by 2 s per connection but cannot hang or grow the server.
//
// Thread-safety: start() returns a running server (one accept thread); port() may be called from
// any thread; the destructor stops the thread and closes the socket (it must not race with other
// calls; it waits for the connections being served, at most their 2 s budget). `render` and the
// routes' bodies run on the server's threads, possibly concurrently: they must be thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"
#include "net/socket.h"

namespace actorflow {
namespace net {

class TlsContext;

// One more GET path of the server (the dashboard's page, script and API, cli/dashboard.cc).
struct HttpRoute {
  std::string content_type = "text/plain; charset=utf-8";
  bool needs_secret = true;             // behind the Bearer secret like /metrics (when there is one)
  std::function<std::string()> body;    // called on the server's thread for each request
};

struct MetricsHttpOptions {
  std::string host;                          // address to bind
  uint16_t port = 0;                         // 0: any free port (tests)
  std::string secret;                        // "" = no Authorization required
  std::shared_ptr<const TlsContext> tls;     // null = plain HTTP
  std::function<std::string()> render;       // the body of GET /metrics; null: no /metrics (404)
  std::map<std::string, HttpRoute> routes;   // more GET paths, exact match without the query
  // Also accept the secret as the query parameter "token=<secret>" (a browser's address bar
  // cannot send a header); only for plain HTTP on trusted networks: the URL carries the secret.
  bool token_in_query = false;
};

class MetricsHttpServer {
 public:
  // Binds and starts serving. Errors: the bind's (naming the address), InvalidArgument without
  // a render function nor routes, or a route without a body function.
  static Result<std::unique_ptr<MetricsHttpServer>> start(MetricsHttpOptions opts);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  uint16_t port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  void loop();
  void serve(Fd conn);

  MetricsHttpOptions opts_;
  Fd listen_;
  Fd wake_read_, wake_write_;  // a pipe that ends the loop
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable idle_;
  int active_ = 0;  // connections served on their own threads (guarded by mu_)
};

// GET /metrics of the endpoint at host:port (what `actorflow status` reads): the body of a 200
// answer. With `secret` it sends the Bearer credentials; with `tls` it speaks TLS presenting that
// context's certificate. Errors: Unavailable (cannot connect, connection closed), DeadlineExceeded
// (no whole answer by `timeout`), PermissionDenied (401), Internal (another status or not HTTP),
// each naming host:port.
Result<std::string> scrape_metrics(const std::string& host, uint16_t port, const std::string& secret,
                                   const std::shared_ptr<const TlsContext>& tls, std::chrono::milliseconds timeout);

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
