// Round trip of a tiny cross-process Session step against a raw TCP ping-pong, in one run.
//
//   build/bench/step_latency [iterations]      (default 3000, in 6 alternating rounds)
//
// The step: a host task (this process) feeds a float scalar, `y = x + 1` runs on worker/0 (an
// `actorflow node` child process on loopback), and the host fetches y: the master's dispatch,
// the node actor, the worker's device actor and the tensor data plane both ways. The baseline: a
// 64-byte message echoed by a child process over one raw loopback TCP connection. The two
// alternate in rounds (this VM's wake-up latency drifts between two levels); the medians over
// all samples, their ratio (goal: <= 2x) and each round's medians are printed. Then untraced and
// traced steps (RunOptions kFullTrace, docs/tracing.md) alternate in rounds: their medians and
// ratio, and the cost of the check a recording site makes when no step is traced.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <caf/io/all.hpp>

#include "actorflow/embedding.h"
#include "actors/messages.h"
#include "actors/server.h"
#include "net/certs.h"
#include "net/port_reservation.h"
#include "net/socket.h"
#include "actors/server_runtime.h"

namespace af = actorflow;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A 64-byte ping-pong with a forked echo process over one raw loopback TCP connection. The
// child lives as long as this object, so rounds of it can alternate with rounds of steps.
class RawEcho {
 public:
  RawEcho() {
    auto listener = af::net::listen_tcp("127.0.0.1", 0);
    if (!listener.ok()) {
      std::fprintf(stderr, "step_latency: %s\n", listener.status().to_string().c_str());
      std::exit(1);
    }
    const uint16_t port = af::net::local_port(listener->get());
    child_ = fork();
    if (child_ == 0) {
      auto c = af::net::connect_tcp("127.0.0.1:" + std::to_string(port), std::chrono::seconds(10));
      if (!c.ok()) _exit(1);
      af::net::SocketTuning t;
      af::net::tune_socket(c->get(), t);
      char buf[64];
      while (true) {
        size_t got = 0;
        while (got < sizeof buf) {
          ssize_t r = ::recv(c->get(), buf + got, sizeof buf - got, 0);
          if (r <= 0) _exit(0);
          got += static_cast<size_t>(r);
        }
        if (::send(c->get(), buf, sizeof buf, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof buf)) _exit(0);
      }
    }
    pollfd pfd{listener->get(), POLLIN, 0};
    if (::poll(&pfd, 1, 10000) != 1) {  // the listener is non-blocking
      std::fprintf(stderr, "step_latency: the echo process never connected\n");
      kill(child_, SIGKILL);
      std::exit(1);
    }
    fd_ = ::accept(listener->get(), nullptr, nullptr);
    af::net::SocketTuning t;
    af::net::tune_socket(fd_, t);
  }
  ~RawEcho() {
    ::close(fd_);
    kill(child_, SIGKILL);  // the echo child has no other way out that we rely on
    waitpid(child_, nullptr, 0);
  }
  RawEcho(const RawEcho&) = delete;
  RawEcho& operator=(const RawEcho&) = delete;

  // Microseconds of each of `iterations` round trips (after `warmup` unmeasured ones).
  std::vector<double> measure(int iterations, int warmup) {
    char buf[64] = {1};
    std::vector<double> us;
    for (int i = 0; i < iterations + warmup; ++i) {
      const auto t0 = Clock::now();
      if (::send(fd_, buf, sizeof buf, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof buf)) break;
      size_t got = 0;
      while (got < sizeof buf) {
        ssize_t r = ::recv(fd_, buf + got, sizeof buf - got, 0);
        if (r <= 0) break;
        got += static_cast<size_t>(r);
      }
      if (i >= warmup) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    return us;
  }

 private:
  pid_t child_ = -1;
  int fd_ = -1;
};

std::string actorflow_binary() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::string self = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  return self.substr(0, self.rfind('/')) + "/../actorflow";  // build/bench/.. = build
}

// A loopback port reserved for this process (net/port_reservation.h), or 0.
int free_port() {
  auto p = af::net::reserve_port_for_process();
  return p.ok() ? *p : 0;
}

// Median microseconds of `iterations` CAF request/response round trips (ping_atom) from a
// scoped actor of `sys` to `dest`; 0 when a request fails.
template <class Handle>
double caf_ping_us(caf::actor_system& sys, const Handle& dest, int iterations) {
  caf::scoped_actor self{sys};
  std::vector<double> us;
  for (int i = 0; i < iterations + 200; ++i) {
    const auto t0 = Clock::now();
    bool ok = false;
    self->request(dest, std::chrono::seconds(10), af::ping_atom::value)
        .receive([&](const std::string&) { ok = true; }, [&](caf::error&) {});
    if (!ok) return 0;
    if (i >= 200) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return median(us);
}

}  // namespace

int main(int argc, char** argv) {
  // Arguments: [ITERATIONS] [--tls] (--tls: the cluster runs TLS 1.3 on both planes, no secret;
  // the raw ping-pong baseline stays plain TCP).
  int iterations = 3000;
  bool tls = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--tls") tls = true;
    else iterations = std::max(100, std::atoi(argv[i]));
  }
  // The cross-process step and the raw ping-pong alternate in this many rounds, so that a
  // change in the machine's state (this VM's wake-up latency is bimodal) hits both alike.
  const int rounds = 6;
  const int per_round = std::max(50, iterations / rounds);
  RawEcho echo;

  // For reference: the same step inside one process (session, master and device actor, no
  // network): the floor any cross-process step pays on top of its network round trips.
  double local = 0;
  {
    auto ls = af::Server::local();
    if (!ls.ok()) return 1;
    af::Scope r = af::Scope::root();
    auto lx = af::ops::placeholder(r, af::DType::kFloat32, af::Shape{}, "x");
    auto ly = af::ops::add(r.with_op_name("y"), lx, af::ops::constant(r, af::Tensor::scalar<float>(1)));
    af::Session s(r, (*ls)->target());
    std::vector<double> lus;
    for (int i = 0; i < iterations + 200; ++i) {
      const auto t0 = Clock::now();
      auto res = s.run({{lx, af::Tensor::scalar<float>(1.f)}}, {ly});
      if (!res.ok()) return 1;
      if (i >= 200) lus.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    local = median(lus);
  }

  // The cluster: host/0 here, worker/0 a child `actorflow node`.
  char dir_tmpl[] = "/tmp/af_step_latency_XXXXXX";
  const std::string dir = mkdtemp(dir_tmpl);
  const std::string file = dir + "/cluster.toml";
  const int worker_port = free_port();
  const int host_port = free_port();
  if (tls) {
    af::Status st = af::net::write_cluster_certs(
        dir + "/certs", {{"host/0", {"localhost"}}, {"worker/0", {"localhost"}}, {"client", {}}}, true);
    if (!st.ok()) {
      std::fprintf(stderr, "step_latency: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  std::ofstream(file) << (tls ? "[cluster]\ntls_dir = \"certs\"\n" : "") << "[jobs]\nhost = [\"localhost:" << host_port
                      << "\"]\nworker = [\"localhost:" << worker_port << "\"]\n";
  pid_t node = fork();
  if (node == 0) {
    execl(actorflow_binary().c_str(), "actorflow", "node", "--cluster", file.c_str(), "--job", "worker", "--task", "0",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  auto cluster = af::ClusterSpec::from_file(file);
  if (!cluster.ok()) {
    std::fprintf(stderr, "step_latency: %s\n", cluster.status().to_string().c_str());
    return 1;
  }
  auto server = af::Server::create(*cluster, af::TaskId{"host", 0});
  if (!server.ok()) {
    std::fprintf(stderr, "step_latency: %s\n", server.status().to_string().c_str());
    kill(node, SIGKILL);
    return 1;
  }
  af::Scope root = af::Scope::root();
  auto x = af::ops::placeholder(root.with_device("/job:host/task:0"), af::DType::kFloat32, af::Shape{}, "x");
  auto y = af::ops::add(root.with_device("/job:worker/task:0").with_op_name("y"), x,
                        af::ops::constant(root.with_device("/job:worker/task:0"), af::Tensor::scalar<float>(1)));
  af::Session sess(root, (*server)->target());
  std::vector<double> us, raw_us, round_ratio;
  std::vector<std::pair<double, double>> round_medians;
  float v = 0;
  int steps_run = 0;
  bool ok = true;
  for (int round = 0; round < rounds && ok; ++round) {
    std::vector<double> raw_round = echo.measure(per_round, round == 0 ? 200 : 20);
    std::vector<double> step_round;
    const int warmup = round == 0 ? 200 : 20;  // the first runs connect and register
    for (int i = 0; i < per_round + warmup; ++i) {
      const auto t0 = Clock::now();
      auto r = sess.run({{x, af::Tensor::scalar<float>(v)}}, {y});
      if (!r.ok()) {
        std::fprintf(stderr, "step_latency: step %d: %s\n", steps_run, r.status().to_string().c_str());
        ok = false;
        break;
      }
      ++steps_run;
      v = (*r)[0].data<float>()[0];
      if (i >= warmup) step_round.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    if (!ok) break;
    const double rm = median(raw_round), sm = median(step_round);
    round_medians.emplace_back(rm, sm);
    round_ratio.push_back(rm > 0 ? sm / rm : 0);
    raw_us.insert(raw_us.end(), raw_round.begin(), raw_round.end());
    us.insert(us.end(), step_round.begin(), step_round.end());
  }
  // Step traces (docs/tracing.md): untraced steps against traced ones (RunOptions kFullTrace:
  // through the master, armed on and collected from the worker), alternating in rounds.
  std::vector<double> plain_us, traced_us;
  size_t trace_events = 0;
  af::RunOptions trace_opts;
  trace_opts.trace_level = af::RunOptions::TraceLevel::kFullTrace;
  const int trace_per_round = std::max(20, per_round / 4);
  for (int round = 0; round < rounds && ok; ++round) {
    for (int traced = 0; traced < 2 && ok; ++traced) {
      for (int i = 0; i < trace_per_round + 5; ++i) {
        af::RunMetadata md;
        const auto t0 = Clock::now();
        auto r = sess.run(traced ? trace_opts : af::RunOptions{}, {{x, af::Tensor::scalar<float>(v)}}, {y}, {}, &md);
        const double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (!r.ok() || md.step_stats.empty() != !traced) {
          std::fprintf(stderr, "step_latency: %s step: %s\n", traced ? "traced" : "untraced",
                       r.ok() ? "metadata not as asked" : r.status().to_string().c_str());
          ok = false;
          break;
        }
        ++steps_run;
        v = (*r)[0].data<float>()[0];
        if (i < 5) continue;
        (traced ? traced_us : plain_us).push_back(t);
        if (traced) trace_events = md.step_stats.events.size();
      }
    }
  }
  // The check every recording site makes when nothing is traced (step_trace: one relaxed load).
  double check_ns = 0;
  {
    const int n = 100'000'000;
    int64_t hits = 0;
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      hits += af::step_trace(i) != nullptr;
      asm volatile("" ::: "memory");
    }
    check_ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
    if (hits) ok = false;
  }
  const double step = median(us);
  const double raw = median(raw_us);
  // Where the time goes: one CAF request/response with the worker's node actor (the control
  // plane hop a step's run request takes; this host authenticated with it during the steps),
  // and one with an actor of this process (a hop between two threads, no network).
  double caf_remote = 0, caf_local = 0;
  if (ok) {
    auto& sys = (*server)->system();
    // The connection the steps used (the control plane admits only authenticated members).
    if (auto* m = af::ServerRuntime(**server).membership())
      for (const auto& p : m->peers())
        if (p.node) caf_remote = caf_ping_us(sys, p.node, iterations);
    auto echo_actor = sys.spawn([]() -> caf::behavior { return {[](af::ping_atom) { return std::string("pong"); }}; });
    caf_local = caf_ping_us(sys, echo_actor, iterations);
    caf::anon_send_exit(echo_actor, caf::exit_reason::user_shutdown);
  }
  kill(node, SIGTERM);
  waitpid(node, nullptr, 0);
  std::remove(file.c_str());
  rmdir(dir.c_str());
  if (!ok) return 1;
  if (v != static_cast<float>(steps_run)) {
    std::fprintf(stderr, "step_latency: wrong result %g after %d steps\n", v, steps_run);
    return 1;
  }
  if (tls) std::printf("TLS 1.3 on both planes (the raw ping-pong stays plain TCP); goal <= 3x\n");
  std::printf("Tiny cross-process step round trip (%d rounds of %d raw ping-pongs then %d steps, medians)\n", rounds,
              per_round, per_round);
  for (size_t i = 0; i < round_medians.size(); ++i)
    std::printf("  round %zu: raw %6.1f us, step %6.1f us, ratio %.2fx\n", i + 1, round_medians[i].first,
                round_medians[i].second, round_ratio[i]);
  std::printf("  raw TCP ping-pong, 64 bytes:                       %8.1f us\n", raw);
  std::printf("  Session::run, y = x + 1 on a worker process:       %8.1f us  ratio %.2fx (goal <= 2x)\n", step,
              raw > 0 ? step / raw : 0);
  std::printf("  median of the rounds' ratios:                                  %.2fx\n", median(round_ratio));
  std::printf("  for reference, the same step in one process:      %8.1f us\n", local);
  std::printf("  for reference, a CAF request to the worker's node: %8.1f us  ratio %.2fx\n", caf_remote,
              raw > 0 ? caf_remote / raw : 0);
  std::printf("  for reference, a CAF request to a local actor:     %8.1f us\n", caf_local);
  const double plain = median(plain_us), traced = median(traced_us);
  std::printf("Step traces (%d rounds of %d untraced then %d traced steps, medians)\n", rounds, trace_per_round,
              trace_per_round);
  std::printf("  untraced step:                                     %8.1f us\n", plain);
  std::printf("  traced step (kFullTrace, %3zu events, 2 tasks):      %8.1f us  ratio %.2fx\n", trace_events, traced,
              plain > 0 ? traced / plain : 0);
  std::printf("  the untraced check at each recording site:         %8.2f ns\n", check_ns);
  return 0;
}
