// What a node measures about itself and serves to Prometheus: the
// registry's text exposition (hand-written expected text), the HTTP endpoint attacked from
// outside with raw sockets (no secret, a wrong one, bad requests, oversized heads), and a real
// training job whose tasks' /metrics are scraped twice: the values must move.
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <regex>
#include <thread>
#include <tuple>
#include <vector>

#include "config/cluster.h"
#include "core/metrics.h"
#include "net/conn_traffic.h"
#include "net/metrics_http.h"
#include "net/socket.h"
#include "tests/util/http.h"
#include "tests/util/measured_job.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::ChildProcess;

using testing::get;
using testing::has;
using testing::raw_http;

TEST(MetricsTest, TheRegistryRendersPrometheusTextWithTheTaskLabels) {
  Metrics& m = Metrics::global();
  m.counter("test_things_total", "Things counted.", {{"peer", "a\"b"}}).inc(3);
  m.gauge("test_level", "A level.").set(2.5);
  Histogram& h = m.histogram("test_wait_seconds", "Waits.", {}, {0.1, 1});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(7);
  const std::string text = m.render({{"job", "worker"}, {"task", "1"}});
  EXPECT_TRUE(has(text, "# HELP test_things_total Things counted.\n# TYPE test_things_total counter\n"
                        "test_things_total{job=\"worker\",task=\"1\",peer=\"a\\\"b\"} 3\n"))
      << text;
  EXPECT_TRUE(has(text, "# TYPE test_level gauge\ntest_level{job=\"worker\",task=\"1\"} 2.5\n")) << text;
  // Cumulative buckets, then +Inf, sum and count.
  EXPECT_TRUE(has(text, "test_wait_seconds_bucket{job=\"worker\",task=\"1\",le=\"0.10000000000000001\"} 1\n"
                        "test_wait_seconds_bucket{job=\"worker\",task=\"1\",le=\"1\"} 2\n"
                        "test_wait_seconds_bucket{job=\"worker\",task=\"1\",le=\"+Inf\"} 3\n"
                        "test_wait_seconds_sum{job=\"worker\",task=\"1\"} 7.5499999999999998\n"
                        "test_wait_seconds_count{job=\"worker\",task=\"1\"} 3\n"))
      << text;
  // The process's own measurements.
  EXPECT_TRUE(has(text, "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total{job=\"worker\",task=\"1\"} "))
      << text;
  EXPECT_TRUE(has(text, "process_resident_memory_bytes{job=\"worker\",task=\"1\"} ")) << text;
  EXPECT_GT(process_rss_bytes(), 1 << 20);
  EXPECT_GE(process_cpu_seconds(), 0);
  EXPECT_EQ(m.counter_value("test_things_total", {{"peer", "a\"b"}}), 3);
}

// The endpoint never takes the cluster secret as a credential: /metrics needs a tool's proof of
// the secret made after the endpoint proved it is its task (GET /auth, net/metrics_http.h), or
// Prometheus' read-only scrape token. A tool asking for another task, or holding another secret,
// is refused naming the task before it sends anything that depends on its secret.
TEST(MetricsTest, TheEndpointAnswersOnlyWhatItShouldAndNeedsAProofOrTheScrapeToken) {
  net::MetricsHttpOptions o;
  o.host = "127.0.0.1";
  o.secret = "s3cret";
  o.task = "worker/1";
  o.fingerprint = "the-fingerprint";
  o.scrape_token = "scrape-token-0123456789";
  o.render = [] { return std::string("test_metric 1\n"); };
  auto srv = net::MetricsHttpServer::start(o);
  ASSERT_TRUE(srv.ok()) << srv.status();
  const uint16_t port = (*srv)->port();
  // No credentials, wrong ones, another scheme, the cluster secret itself, a made-up proof: 401,
  // and the body says nothing of the metrics.
  const std::vector<std::string> refused = {"",          "Bearer wrong", "Bearer s3cret", "Basic czNjcmV0",
                                           "Bearer scrape-token-012345678", "Actorflow " + std::string(64, '0')};
  for (const std::string& auth : refused) {
    const std::string r = get(port, "/metrics", auth);
    EXPECT_TRUE(has(r, "HTTP/1.1 401 Unauthorized\r\n")) << auth << ": " << r;
    EXPECT_TRUE(has(r, "WWW-Authenticate: Bearer")) << r;
    EXPECT_FALSE(has(r, "test_metric")) << r;
  }
  // Prometheus' scrape token (header names are case-insensitive).
  const std::string ok = get(port, "/metrics", "Bearer scrape-token-0123456789");
  EXPECT_TRUE(has(ok, "HTTP/1.1 200 OK\r\n")) << ok;
  EXPECT_TRUE(has(ok, "Content-Type: text/plain; version=0.0.4")) << ok;
  EXPECT_TRUE(has(ok, "\r\n\r\ntest_metric 1\n")) << ok;
  EXPECT_TRUE(has(raw_http(port, "GET /metrics HTTP/1.1\r\nauthorization: Bearer scrape-token-0123456789\r\n\r\n"),
                  " 200 OK"));
  // A tool's scrape: the endpoint proves it is worker/1 of this cluster, then the tool.
  net::ScrapeOptions so;
  so.secret = "s3cret";
  so.task = "worker/1";
  so.fingerprint = "the-fingerprint";
  auto text = net::scrape_metrics("127.0.0.1", port, so);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "test_metric 1\n");
  // The endpoint is not the task the tool meant, or does not hold its secret or cluster file:
  // refused by name.
  for (auto [task, secret, fp] : {std::make_tuple("worker/0", "s3cret", "the-fingerprint"),
                                  std::make_tuple("worker/1", "another", "the-fingerprint"),
                                  std::make_tuple("worker/1", "s3cret", "another-fingerprint")}) {
    net::ScrapeOptions bad = so;
    bad.task = task;
    bad.secret = secret;
    bad.fingerprint = fp;
    auto r = net::scrape_metrics("127.0.0.1", port, bad);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kUnauthenticated) << r.status();
    EXPECT_TRUE(has(r.status().message(), "did not prove it is task " + std::string(task))) << r.status();
  }
  // The challenge's answer, then a proof that is not bound to this connection's nonces: 401.
  const std::string two = raw_http(port, "GET /auth HTTP/1.1\r\nX-Actorflow-Nonce: " + std::string(64, 'a') +
                                             "\r\n\r\nGET /metrics HTTP/1.1\r\nAuthorization: Actorflow " +
                                             std::string(64, 'b') + "\r\n\r\n");
  EXPECT_TRUE(has(two, "HTTP/1.1 200 OK\r\n") && has(two, "\r\n\r\ntask worker/1\nnonce ")) << two;
  EXPECT_TRUE(has(two, "HTTP/1.1 401 Unauthorized\r\n")) << two;
  EXPECT_FALSE(has(two, "test_metric")) << two;
  EXPECT_TRUE(has(raw_http(port, "GET /auth HTTP/1.1\r\nX-Actorflow-Nonce: short\r\n\r\n"), " 400 ")) << "bad nonce";
  // Probes need no secret and learn nothing.
  const std::string health = get(port, "/healthz");
  EXPECT_TRUE(has(health, "HTTP/1.1 200 OK\r\n") && has(health, "\r\n\r\nok\n")) << health;
  EXPECT_TRUE(has(get(port, "/secrets", "Bearer scrape-token-0123456789"), "HTTP/1.1 404 Not Found"));
  EXPECT_TRUE(has(raw_http(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), "HTTP/1.1 405"));
  EXPECT_TRUE(has(raw_http(port, "\x16\x03\x01 garbage\r\n\r\n"), "HTTP/1.1 400"));
  // A head that never ends is cut off at 8 KiB.
  EXPECT_TRUE(has(raw_http(port, "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a')), "HTTP/1.1 400"));
  // A client that connects and says nothing holds the endpoint at most its 2 s budget.
  auto silent = net::connect_tcp("127.0.0.1:" + std::to_string(port), 5s);
  ASSERT_TRUE(silent.ok());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(has(get(port, "/healthz"), " 200 OK"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s);
  // After all of it, an honest scrape still gets the metrics.
  EXPECT_TRUE(net::scrape_metrics("127.0.0.1", port, so).ok());
}

// The endpoint's loop never waits on a render or a connection (net/metrics_http.h): while GET
// /metrics is stuck in a render, /healthz answers; 64 connections from one address are its cap,
// and a 65th closes the oldest of them (not a newer one); a request head that trickles in a byte
// at a time is closed at its 2 s budget; the stuck scrape gets its answer once the render returns.
TEST(MetricsTest, AStuckRenderDelaysNoProbeAndTheOldestIdleConnectionMakesRoom) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  net::MetricsHttpOptions o;
  o.host = "127.0.0.1";
  o.render = [&] {
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, 30s, [&] { return release; });  // bounded: the test releases it
    return std::string("stuck_metric 1\n");
  };
  auto srv = net::MetricsHttpServer::start(o);
  ASSERT_TRUE(srv.ok()) << srv.status();
  const uint16_t port = (*srv)->port();
  std::string stuck;
  std::thread scrape([&] { stuck = get(port, "/metrics"); });
  // The probe answers while the render is stuck (the render runs on the handler thread).
  EXPECT_TRUE(has(get(port, "/healthz"), "HTTP/1.1 200 OK\r\n"));
  // 64 idle connections from 127.0.0.1 (the scrape's is busy: never closed for room), then one more.
  std::vector<net::Fd> idle;
  for (int i = 0; i < 65; ++i) {
    auto fd = net::connect_tcp("127.0.0.1:" + std::to_string(port), 5s);
    ASSERT_TRUE(fd.ok()) << fd.status();
    idle.push_back(std::move(*fd));
    if (i == 0) { EXPECT_TRUE(has(get(port, "/healthz"), " 200 OK")); }  // the first is in the server's list
  }
  // The oldest is closed (end of stream, no answer); the newest still open.
  auto closed_by_server = [](int fd, std::chrono::milliseconds bound) {
    pollfd p{fd, POLLIN, 0};
    char b;
    return ::poll(&p, 1, static_cast<int>(bound.count())) == 1 && ::recv(fd, &b, 1, MSG_DONTWAIT) == 0;
  };
  const auto bound = std::chrono::milliseconds(static_cast<int64_t>(1500 * testing::slowdown()));
  EXPECT_TRUE(closed_by_server(idle.front().get(), bound)) << "the oldest idle connection was not closed for room";
  pollfd newest{idle.back().get(), POLLIN, 0};
  EXPECT_EQ(::poll(&newest, 1, 0), 0) << "the newest connection was closed";
  // A probe still gets in (closing the next oldest).
  EXPECT_TRUE(has(get(port, "/healthz"), "HTTP/1.1 200 OK\r\n"));
  idle.clear();
  // A request head trickling in one byte at a time is cut off at its 2 s budget.
  auto slow = net::connect_tcp("127.0.0.1:" + std::to_string(port), 5s);
  ASSERT_TRUE(slow.ok());
  const std::string head = "GET /healthz HTTP/1.1\r\nX-Slow: " + std::string(100, 'a');
  bool cut = false;
  for (char ch : head) {
    if (::send(slow->get(), &ch, 1, MSG_NOSIGNAL) != 1 || closed_by_server(slow->get(), 100ms)) {
      cut = true;
      break;
    }
  }
  EXPECT_TRUE(cut) << "a head that never ends was not cut off (100 bytes, 100 ms apart, against a 2 s budget)";
  {
    std::lock_guard<std::mutex> l(mu);
    release = true;
  }
  cv.notify_all();
  scrape.join();
  EXPECT_TRUE(has(stuck, "HTTP/1.1 200 OK\r\n") && has(stuck, "\r\n\r\nstuck_metric 1\n")) << stuck;
}

// sum_by_label picks one family's series apart by one label (the dashboard's summary tags and
// fault kinds), unescaping values and skipping other families, prefixes and broken lines.
TEST(MetricsTest, SumByLabelSplitsAFamilyByOneLabel) {
  const std::string text =
      "# TYPE actorflow_summary gauge\n"
      "actorflow_summary{job=\"worker\",task=\"0\",tag=\"loss\"} 0.25\n"
      "actorflow_summary{tag=\"accuracy\",job=\"worker\"} 0.75\n"
      "actorflow_summary{tag=\"a \\\"q\\\" b\"} 2\n"
      "actorflow_summary_other{tag=\"loss\"} 9\n"
      "actorflow_summary{job=\"worker\"} 5\n"
      "actorflow_summary{tag=\"broken} 1\n"
      "actorflow_summary{tag=\"loss\",task=\"1\"} 0.5\n";
  const auto m = net::sum_by_label(text, "actorflow_summary", "tag");
  EXPECT_EQ(m, (std::map<std::string, double>{{"loss", 0.75}, {"accuracy", 0.75}, {"a \"q\" b", 2}}));
  EXPECT_TRUE(net::sum_by_label(text, "nothing", "tag").empty());
  // The registry's own rendering of a summary gauge reads back.
  Metrics::global().gauge("actorflow_summary", "test", {{"tag", "loss"}}).set(1.5);
  EXPECT_EQ(net::sum_by_label(Metrics::global().render({{"job", "worker"}}), "actorflow_summary", "tag").at("loss"), 1.5);
}

// The value of the first series of `name` whose labels contain `labels` in a scrape, or -1.
double value_of(const std::string& scrape, const std::string& name, const std::string& labels) {
  std::istringstream in(scrape);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) != 0 || !has(line, labels)) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// A real job: 1 ps + 2 workers training the CNN, every task serving /metrics behind the cluster
// secret; two scrapes of each task while it trains show steps, updates and traffic moving.
TEST(MetricsTest, ATrainingJobsTasksServeMetricsThatMove) {
  testing::TempDir dir;
  const int ps_port = testing::free_port(), w0 = testing::free_port(), w1 = testing::free_port();
  const int m_ps = testing::free_port(), m_w0 = testing::free_port(), m_w1 = testing::free_port();
  const std::string secret_file = dir.write("secret", "metrics-test-secret\n");
  chmod(secret_file.c_str(), 0600);
  const std::string file = dir.write(
      "cluster.toml", "[cluster]\nsecret_file = \"" + secret_file + "\"\n[jobs]\nps = [\"localhost:" + std::to_string(ps_port) +
                          "\"]\nworker = [\"localhost:" + std::to_string(w0) + "\", \"localhost:" + std::to_string(w1) +
                          "\"]\n[tasks.\"ps/0\"]\nmetrics_port = " + std::to_string(m_ps) +
                          "\n[tasks.\"worker/0\"]\nmetrics_port = " + std::to_string(m_w0) +
                          "\n[tasks.\"worker/1\"]\nmetrics_port = " + std::to_string(m_w1) + "\n");
  auto up = ChildProcess::start({binary("actorflow"), "up", "--cluster", file, "--", binary("samples/distributed_cnn"),
                                 "--steps", "100000", "--print-every", "20", "--conv1", "4", "--conv2", "8", "--hidden",
                                 "32", "--learning-rate", "1e-3"});
  ASSERT_TRUE(up);
  ASSERT_TRUE(up->await_output("Step: ", 120s, 2).ok()) << up->output();
  // As `actorflow status` does: each task proves it is that task, then the scraper proves the secret.
  auto spec = ClusterSpec::from_file(file);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto scrape = [&](int port) {
    net::ScrapeOptions so;
    so.secret = "metrics-test-secret";
    so.task = port == m_ps ? "ps/0" : port == m_w0 ? "worker/0" : "worker/1";
    so.fingerprint = spec->fingerprint();
    so.timeout = 5s;
    auto r = net::scrape_metrics("127.0.0.1", static_cast<uint16_t>(port), so);
    return r.ok() ? " 200 OK\n" + *r : r.status().to_string();
  };
  const std::string ps1 = scrape(m_ps), w01 = scrape(m_w0);
  ASSERT_TRUE(up->await_output("Step: ", 120s, 8).ok()) << up->output();
  const std::string ps2 = scrape(m_ps), w02 = scrape(m_w0), w12 = scrape(m_w1);
  const std::string denied = get(static_cast<uint16_t>(m_w0), "/metrics", "Bearer metrics-test-secret");
  up->signal(SIGTERM);
  up->wait(60s);
  ASSERT_TRUE(has(w01, " 200 OK")) << w01;
  EXPECT_TRUE(has(denied, " 401 Unauthorized")) << denied;
  // Labels name the task.
  EXPECT_TRUE(has(w02, "{job=\"worker\",task=\"0\"")) << w02;
  EXPECT_TRUE(has(w12, "{job=\"worker\",task=\"1\"")) << w12;
  EXPECT_TRUE(has(ps2, "{job=\"ps\",task=\"0\"")) << ps2;
  // Steps run on the worker, updates applied on the ps, both grow.
  const std::string w0l = "job=\"worker\",task=\"0\",result=\"ok\"";
  EXPECT_GT(value_of(w02, "actorflow_session_runs_total", w0l), value_of(w01, "actorflow_session_runs_total", w0l)) << w02;
  EXPECT_GT(value_of(w02, "actorflow_session_run_seconds_count", "task=\"0\""), 0) << w02;
  EXPECT_GT(value_of(ps2, "actorflow_variable_updates_total", "task=\"0\""),
            value_of(ps1, "actorflow_variable_updates_total", "task=\"0\""))
      << ps2;
  // Traffic per peer: the ps receives from and answers the workers, by task name.
  EXPECT_GT(value_of(ps2, "actorflow_data_plane_received_bytes_total", "peer=\"worker/0\""),
            value_of(ps1, "actorflow_data_plane_received_bytes_total", "peer=\"worker/0\""))
      << ps2;
  EXPECT_GT(value_of(ps2, "actorflow_data_plane_received_messages_total", "peer=\"worker/1\""), 0)
      << ps2;
  EXPECT_GT(value_of(w02, "actorflow_data_plane_sent_bytes_total", "job=\"worker\""), 0) << w02;
  EXPECT_GT(value_of(ps2, "process_cpu_seconds_total", "task=\"0\""), 0) << ps2;
  EXPECT_GT(value_of(w02, "process_resident_memory_bytes", "task=\"0\""), 1e6) << w02;
  // The control plane too, per peer, from the kernel's counters: every connection between a
  // worker and the ps carried CAF's handshake, graph registration and heartbeats both ways (the
  // steps themselves travel on the data plane, so it need not grow between two scrapes).
  for (const char* name : {"actorflow_control_plane_sent_bytes_total", "actorflow_control_plane_received_bytes_total",
                           "actorflow_control_plane_sent_segments_total",
                           "actorflow_control_plane_received_segments_total"}) {
    EXPECT_GT(value_of(w02, name, "peer=\"/job:ps/replica:0/task:0\""), 0) << name << "\n" << w02;
    EXPECT_GE(value_of(w02, name, "peer=\"/job:ps/replica:0/task:0\""),
              value_of(w01, name, "peer=\"/job:ps/replica:0/task:0\""))
        << name << "\n" << w02;
    EXPECT_GT(value_of(ps2, name, "peer=\"/job:worker/replica:0/task:1\""), 0) << name << "\n" << ps2;
  }
  // Graph registration is the bulk: far more bytes than segments' headers alone.
  EXPECT_GT(value_of(w02, "actorflow_control_plane_sent_bytes_total", "peer=\"/job:ps/replica:0/task:0\""), 1000) << w02;
}

// The control plane's counters are the kernel's TCP counters of each tracked connection, found
// by socket inode: exact byte counts of a real loopback connection, and a closed connection is
// forgotten.
TEST(MetricsTest, TcpCountersAreTheKernelsAndFollowTheSocketByInode) {
  auto l = net::listen_tcp("127.0.0.1", 0);
  ASSERT_TRUE(l.ok()) << l.status();
  const uint16_t port = net::local_port(l->get());
  auto c = net::connect_tcp("127.0.0.1:" + std::to_string(port), 5s);
  ASSERT_TRUE(c.ok()) << c.status();
  pollfd pfd{l->get(), POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
  net::Fd a(::accept(l->get(), nullptr, nullptr));
  ASSERT_GE(a.get(), 0);
  const std::string out(100000, 'x'), back(1234, 'y');
  ASSERT_EQ(::send(c->get(), out.data(), out.size(), MSG_NOSIGNAL), static_cast<ssize_t>(out.size()));
  std::string got(out.size(), '\0');
  for (size_t n = 0; n < got.size();) {
    const ssize_t r = ::recv(a.get(), &got[n], got.size() - n, 0);
    ASSERT_GT(r, 0);
    n += static_cast<size_t>(r);
  }
  ASSERT_EQ(::send(a.get(), back.data(), back.size(), MSG_NOSIGNAL), static_cast<ssize_t>(back.size()));
  char buf[2000];
  for (size_t n = 0; n < back.size();) {
    const ssize_t r = ::recv(c->get(), buf, sizeof buf, 0);
    ASSERT_GT(r, 0);
    n += static_cast<size_t>(r);
  }
  const uint64_t ic = net::socket_inode(c->get()), ia = net::socket_inode(a.get());
  ASSERT_NE(ic, 0u);
  ASSERT_NE(ic, ia);
  EXPECT_EQ(net::socket_inode(-1), 0u);  // not a socket
  auto counters = net::tcp_counters({ic, ia});
  ASSERT_TRUE(counters.ok()) << counters.status();
  ASSERT_EQ(counters->count(ic), 1u);
  ASSERT_EQ(counters->count(ia), 1u);
  EXPECT_EQ((*counters)[ic].bytes_sent, out.size());
  EXPECT_EQ((*counters)[ic].bytes_received, back.size());
  EXPECT_EQ((*counters)[ia].bytes_sent, back.size());
  EXPECT_EQ((*counters)[ia].bytes_received, out.size());
  EXPECT_GE((*counters)[ic].segs_out, 2u);  // the handshake's ACK and at least one data segment
  // The tracker counts a connection's growth once per refresh, under its peer's label.
  auto& traffic = net::ConnectionTraffic::control_plane();
  const Labels peer{{"peer", "inode-test-peer"}};
  traffic.track(c->get(), "inode-test-peer");
  traffic.refresh();  // the first look counts everything so far
  EXPECT_EQ(Metrics::global().counter_value("actorflow_control_plane_sent_bytes_total", peer), 100000);
  EXPECT_EQ(Metrics::global().counter_value("actorflow_control_plane_received_bytes_total", peer), 1234);
  ASSERT_EQ(::send(c->get(), out.data(), 500, MSG_NOSIGNAL), 500);
  for (size_t n = 0; n < 500;) {
    const ssize_t r = ::recv(a.get(), &got[0], 500 - n, 0);
    ASSERT_GT(r, 0);
    n += static_cast<size_t>(r);
  }
  traffic.refresh();
  EXPECT_EQ(Metrics::global().counter_value("actorflow_control_plane_sent_bytes_total", peer), 100500);
  const size_t before = traffic.tracked();
  c = Result<net::Fd>(net::Fd());  // close our end; the other end too
  a = net::Fd();
  // A closed socket leaves the kernel's tables (after FIN exchange; TIME_WAIT sockets report no
  // inode): the tracker forgets it.
  bool forgotten = false;
  for (int i = 0; i < 200 && !forgotten; ++i) {
    traffic.refresh();
    forgotten = traffic.tracked() == before - 1;
    if (!forgotten) std::this_thread::sleep_for(10ms);  // the kernel's state change, not a message
  }
  EXPECT_TRUE(forgotten);
  EXPECT_EQ(Metrics::global().counter_value("actorflow_control_plane_sent_bytes_total", peer), 100500);
}


using testing::MeasuredJob;

TEST(StatusTest, JsonShowsEachTasksRoleStepAndRates) {
  MeasuredJob job;
  ASSERT_TRUE(job.up);
  ASSERT_TRUE(job.up->await_output("Step: ", 120s, 2).ok()) << job.up->output();
  // A worker can pause for longer than the rate interval (seen once in CI: worker/1 made no step
  // in 500 ms while the chief made 130, the shape of the open bug that keeps ScenarioTest.FaultFree
  // out of the ASan pass, docs/testing.md), so the status is taken again, at most three times,
  // until every worker shows a positive rate; the last answer is checked in full.
  std::string out;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto st = ChildProcess::start({binary("actorflow"), "status", "--cluster", job.file, "--json", "--interval-ms", "500"});
    ASSERT_EQ(st->wait(60s), 0) << st->output();
    out = st->output();
    if (!has(out, "\"steps_per_sec\": 0,")) break;
  }
  EXPECT_EQ(out.rfind("{\"tasks\": [", 0), 0u) << out;
  EXPECT_TRUE(has(out, "\"up\": 3, \"total\": 3}")) << out;
  // One object per task, in order, with its role; the workers report a global step and steps/s,
  // every task CPU and memory.
  const std::regex task_re(
      "\\{\"task\": \"([a-z]+/[0-9])\", \"address\": \"[^\"]+\", \"role\": \"([a-z]+)\", \"state\": \"up\".*?"
      "\"global_step\": ([0-9.e+]+|null), \"steps_per_sec\": ([0-9.e+]+|null), \"cpu_percent\": ([0-9.e+]+|null), "
      "\"rss_bytes\": ([0-9.e+]+|null)");
  std::vector<std::string> seen;
  for (std::sregex_iterator it(out.begin(), out.end(), task_re), end; it != end; ++it) {
    const std::string task = (*it)[1], role = (*it)[2];
    seen.push_back(task + " " + role);
    EXPECT_NE((*it)[5], "null") << task << " cpu\n" << out;
    EXPECT_GT(std::stod((*it)[6]), 1e6) << task << " rss\n" << out;
    if (task != "ps/0") {
      EXPECT_GT(std::stod((*it)[3]), 0) << task << " global step\n" << out;
      EXPECT_GT(std::stod((*it)[4]), 0) << task << " steps/s\n" << out;
    }
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"ps/0 ps", "worker/0 chief", "worker/1 worker"})) << out;
}

// `status --watch` in a real terminal (tmux): the table is redrawn in place and the global step grows.
TEST(StatusTest, WatchRedrawsInPlaceUnderTmux) {
  // tmux is a test dependency (scripts/setup.sh installs it): its absence is a failure, not a skip.
  ASSERT_EQ(system("command -v tmux >/dev/null 2>&1"), 0) << "tmux is not installed (run scripts/setup.sh)";
  MeasuredJob job;
  ASSERT_TRUE(job.up);
  ASSERT_TRUE(job.up->await_output("Step: ", 120s, 2).ok()) << job.up->output();
  const std::string session = "af_status_" + std::to_string(getpid());
  const std::string cmd = "tmux new-session -d -s " + session + " -x 200 -y 20 '" + binary("actorflow") +
                          " status --cluster " + job.file + " --watch --interval-ms 300'";
  ASSERT_EQ(system(cmd.c_str()), 0);
  auto capture = [&] {
    testing::TempDir d;
    const std::string f = d.file("pane");
    const std::string c = "tmux capture-pane -p -t " + session + " > " + f;
    if (system(c.c_str()) != 0) return std::string();
    std::ifstream in(f);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  auto step_of = [](const std::string& pane) -> double {
    std::smatch m;
    static const std::regex re("\nworker/0 +localhost:[0-9]+ +chief +UP +([0-9]+) ");
    return std::regex_search(pane, m, re) ? std::stod(m[1]) : -1;
  };
  // Poll the pane (bounded) until the table shows a step, then until it shows a larger one.
  std::string first, later;
  double s1 = -1, s2 = -1;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  // (A terminal gives no event to wait on: poll it every 50 ms.)
  while (s1 < 0 && std::chrono::steady_clock::now() < deadline) {
    s1 = step_of(first = capture());
    if (s1 < 0) std::this_thread::sleep_for(50ms);
  }
  while (s2 <= s1 && std::chrono::steady_clock::now() < deadline) {
    s2 = step_of(later = capture());
    if (s2 <= s1) std::this_thread::sleep_for(50ms);
  }
  (void)system(("tmux send-keys -t " + session + " C-c; sleep 0.2; tmux kill-session -t " + session + " 2>/dev/null").c_str());
  ASSERT_GT(s1, 0) << first;
  EXPECT_GT(s2, s1) << first << "\n---\n" << later;
  // In place: one header, one table, not a scrolling log.
  const std::string header = "TASK";
  size_t headers = 0;
  for (size_t p = later.find(header); p != std::string::npos; p = later.find(header, p + 1)) ++headers;
  EXPECT_EQ(headers, 1u) << later;
  for (const char* col : {"ADDRESS", "ROLE", "STATE", "STEP", "STEPS/S", "CPU%", "RSS", "NET-IN/S", "NET-OUT/S", "FAIL",
                          "UPTIME", "HB-MS"})
    EXPECT_TRUE(has(later, col)) << col << "\n" << later;
  EXPECT_TRUE(has(later, "3/3 tasks up")) << later;
}

}  // namespace
}  // namespace actorflow
