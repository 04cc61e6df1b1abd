// Tensor data-plane benchmark: two processes on loopback, every transport measured against a
// raw TCP socket in the same run.
//
//   build/bench/transfer            full run (about half a minute)
//   build/bench/transfer --quick    fewer bytes and iterations
//   build/bench/transfer --no-caf   skip the CAF remote-actor comparison
//   build/bench/transfer --tls      the data plane with TLS 1.3 (net/tls.h); the raw TCP
//                                   baseline stays plain TCP
//
// (a) throughput of 4 KiB .. 64 MiB messages: plain write()/read() of the same bytes on one TCP
//     connection (baseline) versus TensorClient::send -> TensorServer, which allocates a fresh
//     tensor per message and hands it to a callback;
// (b) tiny round trip: raw TCP ping-pong of a 64-byte message versus a scalar tensor sent with
//     TensorClient and a scalar reply sent back over the other process's TensorClient (two
//     transports, each authenticated), chained in the callbacks like the raw loop; also the same
//     with a condition-variable hand-off to a waiting thread per round trip;
// (c) for reference, CAF 0.17's own serialization of a 4 MiB std::vector<float> sent to a remote
//     actor (request/response), the path tensors must not take.
// The receiver is a fork()ed child; the parent sends and times. Each throughput figure is the
// median of several alternating repetitions; MB = 10^6 bytes.
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "core/logging.h"
#include "net/certs.h"
#include "net/socket.h"
#include "net/tls.h"
#include "net/tensor_transport.h"

using namespace actorflow;
using namespace actorflow::net;
using Micros = std::chrono::duration<double, std::micro>;
using Seconds = std::chrono::duration<double>;

namespace {

enum Op : int64_t { kRawThroughput = 1, kTensorThroughput, kRawPingPong, kTensorPingPong, kCafStart, kCafStop, kQuit };
struct Cmd {
  int64_t op, a, b;
};

constexpr size_t kPingBytes = 64;

void die(const std::string& what) {
  std::fprintf(stderr, "transfer: %s\n", what.c_str());
  std::fflush(stderr);
  _exit(1);
}

void put(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t r = ::write(fd, c, n);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      die("control pipe write failed");
    }
    c += r;
    n -= static_cast<size_t>(r);
  }
}
bool get(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t r = ::read(fd, c, n);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}
int64_t get64(int fd) {
  int64_t v = 0;
  if (!get(fd, &v, sizeof v)) die("control pipe closed");
  return v;
}
void put64(int fd, int64_t v) { put(fd, &v, sizeof v); }

void read_full(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      die("raw socket read failed");
    }
    c += r;
    n -= static_cast<size_t>(r);
  }
}

std::string g_tls_dir;  // set by --tls: certificates for bench/parent and bench/child

TransportOptions bench_options(const std::string& task) {
  TransportOptions o;
  o.cluster_fingerprint = "bench-fingerprint";
  o.secret = "bench-secret";
  o.task_name = task;
  if (!g_tls_dir.empty()) {
    auto tls = TlsContext::load(cluster_tls_files(g_tls_dir, task));
    if (!tls.ok()) die(tls.status().to_string());
    o.tls = *tls;
  }
  return o;
}

caf::behavior caf_sink(caf::event_based_actor*) {
  return {[](const std::vector<float>& v) { return static_cast<int64_t>(v.size()); }};
}

struct CafConfig : caf::actor_system_config {
  CafConfig() {
    load<caf::io::middleman>();
    add_message_type<std::vector<float>>("float_vector");
  }
};

// ------------------------------------------------------------------------------------------
// The receiving child.

int child_main(int cmd_fd, int reply_fd) {
  auto raw_listener = listen_tcp("127.0.0.1", 0);
  if (!raw_listener.ok()) die(raw_listener.status().to_string());
  std::atomic<int64_t> expected{-1}, received{0};
  std::atomic<bool> pong{false};
  std::unique_ptr<TensorClient> back = std::make_unique<TensorClient>(bench_options("bench/child"));
  std::string back_addr;
  auto server = TensorServer::start(bench_options("bench/child"), "127.0.0.1", 0, [&](const Frame& m) {
    if (!m.as<TensorFrame>()) die(std::string("bench/child: a ") + frame_kind_name(m.kind()) + " frame, not a tensor");
    if (pong.load(std::memory_order_relaxed)) {
      Status st = back->send(back_addr, Frame(m.step_id, "pong", m.as<TensorFrame>()->tensor));
      if (!st.ok()) die(st.to_string());
      return;
    }
    if (received.fetch_add(1) + 1 == expected.load()) put64(reply_fd, 1);
  });
  if (!server.ok()) die(server.status().to_string());
  put64(reply_fd, local_port(raw_listener->get()));
  put64(reply_fd, (*server)->port());

  Fd raw;
  std::vector<char> buf;
  std::unique_ptr<CafConfig> caf_cfg;
  std::unique_ptr<caf::actor_system> caf_sys;
  caf::actor caf_sink_actor;
  uint16_t caf_port = 0;
  for (;;) {
    Cmd c{};
    if (!get(cmd_fd, &c, sizeof c)) break;
    if (c.op == kQuit) break;
    if ((c.op == kRawThroughput || c.op == kRawPingPong) && !raw.valid()) {
      pollfd pfd{raw_listener->get(), POLLIN, 0};
      if (::poll(&pfd, 1, 10000) != 1) die("raw accept timed out");
      raw.reset(::accept(raw_listener->get(), nullptr, nullptr));
      if (!raw.valid()) die("raw accept failed");
      tune_socket(raw.get(), SocketTuning{});
    }
    switch (c.op) {
      case kRawThroughput: {  // a = size, b = count
        buf.resize(static_cast<size_t>(c.a));
        put64(reply_fd, 0);  // ready
        for (int64_t i = 0; i < c.b; ++i) read_full(raw.get(), buf.data(), buf.size());
        put64(reply_fd, 1);
        break;
      }
      case kTensorThroughput: {  // b = count
        received = 0;
        expected = c.b;
        put64(reply_fd, 0);
        break;  // the callback acknowledges
      }
      case kRawPingPong: {  // b = iterations
        char p[kPingBytes];
        put64(reply_fd, 0);
        for (int64_t i = 0; i < c.b; ++i) {
          read_full(raw.get(), p, sizeof p);
          if (!write_all(raw.get(), p, sizeof p, "parent").ok()) die("raw pong write failed");
        }
        break;
      }
      case kTensorPingPong: {  // a = parent's tensor port
        back_addr = "127.0.0.1:" + std::to_string(c.a);
        pong = true;
        put64(reply_fd, 0);
        break;
      }
      case kCafStart: {
        caf_cfg = std::make_unique<CafConfig>();
        caf_sys = std::make_unique<caf::actor_system>(*caf_cfg);
        caf_sink_actor = caf_sys->spawn(caf_sink);
        auto port = caf_sys->middleman().publish(caf_sink_actor, 0, "127.0.0.1");
        caf_port = port ? *port : 0;
        put64(reply_fd, caf_port);
        break;
      }
      case kCafStop: {
        // Unpublish and stop the sink first: CAF 0.17 otherwise may wait forever for it when
        // the actor system is destroyed.
        if (caf_sys && caf_sink_actor) {
          if (caf_port) caf_sys->middleman().unpublish(caf_sink_actor, caf_port);
          caf::anon_send_exit(caf_sink_actor, caf::exit_reason::user_shutdown);
          caf_sink_actor = nullptr;
        }
        caf_sys.reset();
        caf_cfg.reset();
        put64(reply_fd, 0);
        break;
      }
    }
  }
  server->reset();
  back.reset();
  return 0;
}

// ------------------------------------------------------------------------------------------
// The sending parent.

struct Parent {
  int cmd_fd, reply_fd;
  uint16_t raw_port = 0, tensor_port = 0;
  Fd raw;
  TensorClient client{bench_options("bench/parent")};
  std::string child_addr;

  void command(Op op, int64_t a, int64_t b) {
    Cmd c{op, a, b};
    put(cmd_fd, &c, sizeof c);
  }

  double raw_throughput(const std::vector<char>& data, int64_t count) {
    command(kRawThroughput, static_cast<int64_t>(data.size()), count);
    if (!raw.valid()) {
      auto fd = connect_tcp("127.0.0.1:" + std::to_string(raw_port), std::chrono::milliseconds(5000));
      if (!fd.ok()) die(fd.status().to_string());
      raw = std::move(*fd);
      tune_socket(raw.get(), SocketTuning{});
    }
    get64(reply_fd);  // ready
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < count; ++i)
      if (!write_all(raw.get(), data.data(), data.size(), "child").ok()) die("raw write failed");
    get64(reply_fd);
    double s = Seconds(std::chrono::steady_clock::now() - t0).count();
    return static_cast<double>(data.size()) * static_cast<double>(count) / s / 1e6;
  }

  double tensor_throughput(const Tensor& t, int64_t count) {
    command(kTensorThroughput, 0, count);
    get64(reply_fd);
    auto t0 = std::chrono::steady_clock::now();
    Frame m(0, "bench/edge", t);
    for (int64_t i = 0; i < count; ++i) {
      m.step_id = i;
      Status st = client.send(child_addr, m);
      if (!st.ok()) die(st.to_string());
    }
    get64(reply_fd);
    double s = Seconds(std::chrono::steady_clock::now() - t0).count();
    return static_cast<double>(t.bytes()) * static_cast<double>(count) / s / 1e6;
  }

  double raw_pingpong(int64_t iters) {
    command(kRawPingPong, 0, iters);
    get64(reply_fd);
    char p[kPingBytes] = {1};
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) {
      if (!write_all(raw.get(), p, sizeof p, "child").ok()) die("raw ping write failed");
      read_full(raw.get(), p, sizeof p);
    }
    return Micros(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(iters);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string size_name(size_t n) {
  if (n >= (1u << 20)) return std::to_string(n >> 20) + " MiB";
  return std::to_string(n >> 10) + " KiB";
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, with_caf = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--no-caf") with_caf = false;
    else if (a == "--tls") g_tls_dir = "-";
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--no-caf] [--tls]\n", argv[0]);
      return 2;
    }
  }
  set_min_log_level(LogLevel::WARNING);
  if (!g_tls_dir.empty()) {
    char tmpl[] = "/tmp/af_bench_tls_XXXXXX";
    if (!::mkdtemp(tmpl)) die("mkdtemp failed");
    g_tls_dir = tmpl;
    Status st = write_cluster_certs(g_tls_dir, {{"bench/parent", {"127.0.0.1"}}, {"bench/child", {"127.0.0.1"}}}, true);
    if (!st.ok()) die(st.to_string());
  }
  int to_child[2], to_parent[2];
  if (::pipe(to_child) != 0 || ::pipe(to_parent) != 0) die("pipe failed");
  pid_t pid = ::fork();
  if (pid < 0) die("fork failed");
  if (pid == 0) {
    ::close(to_child[1]);
    ::close(to_parent[0]);
    int rc = child_main(to_child[0], to_parent[1]);
    _exit(rc);
  }
  ::close(to_child[0]);
  ::close(to_parent[1]);

  Parent p;
  p.cmd_fd = to_child[1];
  p.reply_fd = to_parent[0];
  p.raw_port = static_cast<uint16_t>(get64(p.reply_fd));
  p.tensor_port = static_cast<uint16_t>(get64(p.reply_fd));
  p.child_addr = "127.0.0.1:" + std::to_string(p.tensor_port);

  std::printf("Tensor transfer between two processes over loopback TCP (MB = 10^6 bytes)%s\n",
              g_tls_dir.empty() ? "" : "; tensors over TLS 1.3, the raw baseline plain TCP");
  std::printf("%-8s %10s %14s %14s %8s\n", "size", "messages", "raw MB/s", "tensor MB/s", "ratio");
  const size_t sizes[] = {4u << 10, 64u << 10, 1u << 20, 4u << 20, 16u << 20, 64u << 20};
  const int reps = quick ? 3 : 5;
  for (size_t size : sizes) {
    const size_t total = quick ? (size >= (1u << 20) ? 128u << 20 : 32u << 20)
                               : (size >= (1u << 20) ? 512u << 20 : 128u << 20);
    const int64_t count = std::max<int64_t>(4, static_cast<int64_t>(total / size));
    Tensor t(DType::kFloat32, Shape{static_cast<int64_t>(size / 4)});
    auto* f = t.data<float>();
    for (size_t i = 0; i < size / 4; ++i) f[i] = static_cast<float>(i % 1000) * 0.5f;
    std::vector<char> bytes(static_cast<char*>(t.raw_data()), static_cast<char*>(t.raw_data()) + size);
    p.raw_throughput(bytes, std::max<int64_t>(1, count / 4));  // warm-up
    p.tensor_throughput(t, std::max<int64_t>(1, count / 4));
    std::vector<double> raw, ours;
    for (int r = 0; r < reps; ++r) {
      raw.push_back(p.raw_throughput(bytes, count));
      ours.push_back(p.tensor_throughput(t, count));
    }
    double mr = median(raw), mo = median(ours);
    std::printf("%-8s %10lld %14.0f %14.0f %7.2fx\n", size_name(size).c_str(), static_cast<long long>(count), mr, mo,
                mo / mr);
    std::fflush(stdout);
  }

  // Tiny round trips.
  const int64_t iters = quick ? 3000 : 10000;
  std::mutex mu;
  std::condition_variable cv;
  int64_t last_pong = -1;
  std::atomic<int64_t> chain_target{-1};
  bool chain_done = false;
  auto server = TensorServer::start(bench_options("bench/parent"), "127.0.0.1", 0, [&](const Frame& m) {
    if (!m.as<TensorFrame>()) die(std::string("bench/parent: a ") + frame_kind_name(m.kind()) + " frame, not a tensor");
    const int64_t target = chain_target.load();
    if (target >= 0) {  // chained: answer the pong with the next ping right here
      if (m.step_id + 1 < target) {
        Status st = p.client.send(p.child_addr, Frame(m.step_id + 1, "ping", m.as<TensorFrame>()->tensor));
        if (!st.ok()) die(st.to_string());
        return;
      }
      std::lock_guard<std::mutex> lock(mu);
      chain_done = true;
      cv.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    last_pong = m.step_id;
    cv.notify_all();
  });
  if (!server.ok()) die(server.status().to_string());
  p.command(kTensorPingPong, (*server)->port(), 0);
  get64(p.reply_fd);
  const Tensor scalar = Tensor::scalar<float>(1.f);
  auto chained = [&]() {
    {
      std::lock_guard<std::mutex> lock(mu);
      chain_done = false;
    }
    chain_target = iters;
    auto t0 = std::chrono::steady_clock::now();
    if (!p.client.send(p.child_addr, Frame(0, "ping", scalar)).ok()) die("ping failed");
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(60), [&] { return chain_done; })) die("ping-pong chain timed out");
    double us = Micros(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(iters);
    chain_target = -1;
    return us;
  };
  auto handoff = [&]() {
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) {
      if (!p.client.send(p.child_addr, Frame(i, "ping", scalar)).ok()) die("ping failed");
      std::unique_lock<std::mutex> lock(mu);
      if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return last_pong == i; })) die("pong timed out");
    }
    double us = Micros(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(iters);
    std::lock_guard<std::mutex> lock(mu);
    last_pong = -1;
    return us;
  };
  p.raw_pingpong(iters / 10);  // warm-up
  chained();
  std::vector<double> raw_rt, chain_rt, handoff_rt;
  for (int r = 0; r < 3; ++r) {
    raw_rt.push_back(p.raw_pingpong(iters));
    chain_rt.push_back(chained());
    handoff_rt.push_back(handoff());
  }
  const double rr = median(raw_rt), cr = median(chain_rt), hr = median(handoff_rt);
  std::printf("\nTiny round trip (%lld iterations, median of 3)\n", static_cast<long long>(iters));
  std::printf("  raw TCP ping-pong, %zu bytes:                      %8.1f us\n", kPingBytes, rr);
  std::printf("  scalar tensor there and back (two transports):     %8.1f us  ratio %.2fx\n", cr, cr / rr);
  std::printf("  same, plus a condition-variable hand-off per trip: %8.1f us  ratio %.2fx\n", hr, hr / rr);
  std::fflush(stdout);

  if (with_caf) {
    p.command(kCafStart, 0, 0);
    const int64_t caf_port = get64(p.reply_fd);
    if (caf_port <= 0) {
      std::printf("\nCAF comparison skipped: publish failed in the child\n");
    } else {
      CafConfig cfg;
      caf::actor_system sys{cfg};
      auto sink = sys.middleman().remote_actor("127.0.0.1", static_cast<uint16_t>(caf_port));
      if (!sink) {
        std::printf("\nCAF comparison skipped: %s\n", sys.render(sink.error()).c_str());
      } else {
        const size_t floats = (4u << 20) / 4;
        std::vector<float> v(floats, 0.5f);
        caf::scoped_actor self{sys};
        auto one = [&]() {
          int64_t n = -1;
          self->request(*sink, caf::infinite, v).receive([&](int64_t r) { n = r; },
                                                           [&](caf::error& e) { die(sys.render(e)); });
          if (n != static_cast<int64_t>(floats)) die("CAF sink answered the wrong size");
        };
        one();  // warm-up
        const int caf_msgs = quick ? 4 : 8;
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < caf_msgs; ++i) one();
        double s = Seconds(std::chrono::steady_clock::now() - t0).count();
        const double caf_mbs = static_cast<double>(floats * 4) * caf_msgs / s / 1e6;
        std::vector<char> bytes(floats * 4, 1);
        const double raw4 = p.raw_throughput(bytes, 64);
        std::printf("\nCAF 0.17 remote actor, 4 MiB std::vector<float> (request/response, %d messages):\n", caf_msgs);
        std::printf("  CAF %0.0f MB/s vs raw socket %0.0f MB/s: ratio %.3fx\n", caf_mbs, raw4, caf_mbs / raw4);
      }
    }
    p.command(kCafStop, 0, 0);
    get64(p.reply_fd);
  }

  p.command(kQuit, 0, 0);
  server->reset();
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
