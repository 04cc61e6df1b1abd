// Parameter-server throughput against TensorFlow's own distributed runtime, in one run.
//
//   build/bench/ps_throughput [--elements 16777216,4194304,1] [--seconds 15] [--workers 2]
//                             [--rounds 1] [--no-tf] [--sparse [--vocab 1000000]]
//
// --sparse adds the sparse case: samples/wide_and_deep's job (2 ps
// + the workers; a 1M x 64 and a 1M x 1 table partitioned over the ps, sparse Adagrad, batch 256)
// against the same model on TensorFlow's runtime (bench/tf_wide_and_deep.py:
// fixed_size_partitioner, embedding_lookup "mod", AdagradOptimizer), global steps per second
// after a 10 s warm-up. Use --elements "" with it to run only the sparse case.
//
// The workload (the dense cases): one float32 variable w of
// N elements on /job:ps/task:0, initialised to 1. Each step a worker reads w, computes
// g = w * 0 + 1 on its own device and applies plain SGD on the ps (apply_gradient_descent,
// lr 2^-20). 1 ps + W workers (default 2), each its own process on 127.0.0.1 (this binary,
// re-executed with --role), asynchronous, every worker stepping as fast as it can for the
// window after 3 warm-up steps. Steps/s is the sum over the workers. After the window every
// element of w must be exactly 1 - lr * (steps applied by all workers), or the run fails: no
// side may skip or lose an update.
//
// TensorFlow's side is bench/tf_ps_throughput.py (tf.compat.v1 train.Server per task, thread
// pools of 1, ResourceApplyGradientDescent with use_locking) with the python of .venv-tf
// (bench/tf_venv.sh creates it with pip's tensorflow-cpu; --no-tf or a failure to create it
// skips the baseline with the reason). The two sides alternate per workload and round; the
// ratio actorflow / TensorFlow is printed per workload (goal: >= 1.5 for 64 and 16 MiB).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "actorflow/actorflow.h"
#include "bench/child_process.h"
#include "net/port_reservation.h"

namespace af = actorflow;
using Clock = std::chrono::steady_clock;

namespace {

constexpr float kLr = 1.0f / (1 << 20);
constexpr int kWarmup = 3;

using actorflow::bench::exists;
using actorflow::bench::self_path;
using actorflow::bench::slurp;

// Waits for `p` to exist with a complete line, up to `limit`. True when it did.
bool await_file(const std::string& p, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (exists(p)) {
      std::string s = slurp(p);
      if (!s.empty() && s.back() == '\n') return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling another process's file
  }
  return false;
}

// ---- one worker task ----------------------------------------------------------------------
int run_worker(const std::string& cluster_file, int task, int64_t elements, double seconds, int workers,
               const std::string& dir) {
  auto cluster = af::ClusterSpec::from_file(cluster_file);
  if (!cluster.ok()) {
    std::fprintf(stderr, "worker %d: %s\n", task, cluster.status().to_string().c_str());
    return 1;
  }
  auto server = af::Server::create(*cluster, af::TaskId{"worker", task});
  if (!server.ok()) {
    std::fprintf(stderr, "worker %d: %s\n", task, server.status().to_string().c_str());
    return 1;
  }
  af::Scope root = af::Scope::root();
  af::Scope ps = root.with_device("/job:ps/task:0");
  af::Scope me = root.with_device("/job:worker/task:" + std::to_string(task));
  auto w = af::ops::variable(ps.with_op_name("w"), af::Shape{elements}, af::DType::kFloat32);
  auto init = af::ops::assign(ps, w, af::ops::fill(ps, af::Shape{elements}, 1.f));
  auto inited = af::ops::is_variable_initialized(ps, w);
  auto g = af::ops::add(me, af::ops::mul(me, w, 0.f), 1.f);
  auto train = af::ops::apply_gradient_descent(ps, w, af::ops::constant(ps, af::Tensor::scalar<float>(kLr)), g);
  auto lo = af::ops::reduce_max(ps, af::ops::mul(ps, w, -1.f));  // -min(w)
  auto hi = af::ops::reduce_max(ps, w);
  af::Session sess(root, (*server)->target());
  auto fail = [&](const af::Status& s) {
    std::fprintf(stderr, "worker %d: %s\n", task, s.to_string().c_str());
    return 1;
  };
  if (task == 0) {
    auto r = sess.run({}, {}, {init});
    if (!r.ok()) return fail(r.status());
  } else {
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (true) {
      auto r = sess.run({inited});
      if (!r.ok()) return fail(r.status());
      if ((*r)[0].data<bool>()[0]) break;
      if (Clock::now() > deadline) return fail(af::DeadlineExceeded("w was never initialised"));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // another process initialises it
    }
  }
  for (int i = 0; i < kWarmup; ++i) {
    auto r = sess.run({}, {}, {train});
    if (!r.ok()) return fail(r.status());
  }
  int64_t steps = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  while ((elapsed = std::chrono::duration<double>(Clock::now() - t0).count()) < seconds) {
    auto r = sess.run({}, {}, {train});
    if (!r.ok()) return fail(r.status());
    ++steps;
  }
  std::ofstream(dir + "/w" + std::to_string(task) + ".txt") << steps << " " << kWarmup << " " << elapsed << "\n";
  if (task == 0) {
    int64_t total = 0;
    for (int i = 0; i < workers; ++i) {
      const std::string p = dir + "/w" + std::to_string(i) + ".txt";
      if (!await_file(p, std::chrono::seconds(120))) return fail(af::DeadlineExceeded("worker " + std::to_string(i) + " never finished"));
      int64_t s = 0, wu = 0;
      std::istringstream(slurp(p)) >> s >> wu;
      total += s + wu;
    }
    auto r = sess.run({lo, hi});
    if (!r.ok()) return fail(r.status());
    const float want = 1.f - kLr * static_cast<float>(total);
    const float l = -(*r)[0].data<float>()[0], h = (*r)[1].data<float>()[0];
    std::ofstream(dir + "/check.txt") << (l == want && h == want ? "ok " : "bad ") << l << " " << h << " " << want << " "
                                      << total << "\n";
  }
  return 0;
}

// ---- the orchestrator ---------------------------------------------------------------------
struct Outcome {
  bool ok = false;
  double steps_per_sec = 0;
  int64_t steps = 0;
  std::string why;
};

using actorflow::bench::spawn;
using actorflow::bench::wait_bounded;

Outcome run_actorflow(int64_t elements, double seconds, int workers) {
  Outcome o;
  char tmpl[] = "/tmp/af_ps_throughput_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string file = dir + "/cluster.toml";
  std::ostringstream toml;
  auto port = [] {
    auto p = af::net::reserve_port_for_process();
    return p.ok() ? static_cast<int>(*p) : 0;
  };
  toml << "[jobs]\nps = [\"localhost:" << port() << "\"]\nworker = [";
  for (int i = 0; i < workers; ++i) toml << (i ? ", " : "") << "\"localhost:" << port() << "\"";
  toml << "]\n";
  std::ofstream(file) << toml.str();
  const std::string self = self_path();
  pid_t ps = spawn({self, "--role", "ps", "--cluster", file}, dir + "/ps.log");
  std::vector<pid_t> ws;
  for (int i = 0; i < workers; ++i)
    ws.push_back(spawn({self, "--role", "worker", "--cluster", file, "--task", std::to_string(i), "--elements",
                        std::to_string(elements), "--seconds", std::to_string(seconds), "--workers",
                        std::to_string(workers), "--dir", dir},
                     dir + "/worker" + std::to_string(i) + ".log"));
  bool all = true;
  for (pid_t w : ws) all = wait_bounded(w, std::chrono::seconds(static_cast<int64_t>(seconds) + 300)) == 0 && all;
  kill(ps, SIGTERM);
  wait_bounded(ps, std::chrono::seconds(30));
  if (!all) {
    o.why = "a worker failed; the tasks' logs are in " + dir;
    return o;
  }
  for (int i = 0; i < workers; ++i) {
    int64_t steps = 0, warm = 0;
    double elapsed = 0;
    std::istringstream(slurp(dir + "/w" + std::to_string(i) + ".txt")) >> steps >> warm >> elapsed;
    o.steps += steps;
    if (elapsed > 0) o.steps_per_sec += static_cast<double>(steps) / elapsed;
  }
  const std::string check = slurp(dir + "/check.txt");
  if (check.rfind("ok ", 0) != 0) {
    o.why = "wrong final value (min max want updates): " + check;
    return o;
  }
  std::system(("rm -rf '" + dir + "'").c_str());
  o.ok = true;
  return o;
}

// Runs `cmd` through the shell and returns its output; *rc its exit status (-1: not started).
std::string capture(const std::string& cmd, int* rc) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *rc = -1;
    return "";
  }
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  *rc = pclose(p);
  return out;
}

// The tail of a failed baseline's output, for the report.
std::string tail_of(const std::string& out) { return out.substr(out.size() > 3000 ? out.size() - 3000 : 0); }

Outcome run_tf(const std::string& python, int64_t elements, double seconds, int workers) {
  Outcome o;
  const std::string cmd = "TF_CPP_MIN_LOG_LEVEL=2 '" + python + "' '" + std::string(AF_SOURCE_DIR) +
                          "/bench/tf_ps_throughput.py' --elements " + std::to_string(elements) + " --seconds " +
                          std::to_string(seconds) + " --workers " + std::to_string(workers) + " 2>&1";
  int rc = 0;
  const std::string out = capture(cmd, &rc);
  const auto at = out.find("tf steps_per_sec=");
  if (rc != 0 || at == std::string::npos) {
    o.why = "TensorFlow's run failed (exit " + std::to_string(rc) + "):\n" + tail_of(out);
    return o;
  }
  std::sscanf(out.c_str() + at, "tf steps_per_sec=%lf steps=%ld", &o.steps_per_sec, &o.steps);
  o.ok = true;
  return o;
}

// ---- the sparse case: samples/wide_and_deep --------------------------------------------
// The sample's job (2 ps + `workers` workers, 1M x 64 and 1M x 1 tables partitioned over the ps,
// sparse Adagrad) under `actorflow up`, its progress lines read as they come: global steps per
// second over `seconds` after a `warmup`, from the steps the lines print and their arrival times.
Outcome run_actorflow_sparse(double seconds, double warmup, int workers, int64_t vocab) {
  Outcome o;
  char tmpl[] = "/tmp/af_ps_sparse_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string file = dir + "/cluster.toml";
  auto port = [] {
    auto p = af::net::reserve_port_for_process();
    return p.ok() ? static_cast<int>(*p) : 0;
  };
  std::ostringstream toml;
  toml << "[jobs]\nps = [\"localhost:" << port() << "\", \"localhost:" << port() << "\"]\nworker = [";
  for (int i = 0; i < workers; ++i) toml << (i ? ", " : "") << "\"localhost:" << port() << "\"";
  toml << "]\n";
  std::ofstream(file) << toml.str();
  const std::string build = self_path().substr(0, self_path().rfind('/')) + "/..";
  const std::string cmd = "exec '" + build + "/actorflow' up --cluster '" + file + "' -- '" + build +
                          "/samples/wide_and_deep' --steps 100000000 --print-every 50 --vocab " + std::to_string(vocab) +
                          " 2>" + dir + "/up.log";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    o.why = "cannot start actorflow up";
    return o;
  }
  const auto t_start = Clock::now();
  double t0 = -1, t1 = -1;
  long long s0 = -1, s1 = -1, last_step = -1;
  char line[512];
  while (fgets(line, sizeof line, p)) {
    const double at = std::chrono::duration<double>(Clock::now() - t_start).count();
    const char* k = std::strstr(line, "Step: ");
    if (!k) continue;
    last_step = std::atoll(k + 6);
    if (t0 < 0 && at >= warmup) {
      t0 = at;
      s0 = last_step;
    } else if (t0 >= 0 && at - t0 >= seconds) {
      t1 = at;
      s1 = last_step;
      break;
    }
  }
  // Stop the job: `up` ends every task on SIGTERM; pclose waits for it.
  std::system(("pkill -TERM -f -- '--cluster " + file + "' >/dev/null 2>&1").c_str());
  pclose(p);
  if (t1 < 0 || s1 <= s0) {
    o.why = "the job printed no progress through the window (last step " + std::to_string(last_step) + "); log in " + dir;
    return o;
  }
  o.steps = s1 - s0;
  o.steps_per_sec = static_cast<double>(s1 - s0) / (t1 - t0);
  std::system(("rm -rf '" + dir + "'").c_str());
  o.ok = true;
  return o;
}

Outcome run_tf_sparse(const std::string& python, double seconds, double warmup, int workers, int64_t vocab) {
  Outcome o;
  const std::string cmd = "TF_CPP_MIN_LOG_LEVEL=2 '" + python + "' '" + std::string(AF_SOURCE_DIR) +
                          "/bench/tf_wide_and_deep.py' --seconds " + std::to_string(seconds) + " --warmup " +
                          std::to_string(warmup) + " --ps 2 --workers " + std::to_string(workers) + " --vocab " +
                          std::to_string(vocab) + " 2>&1";
  int rc = 0;
  const std::string out = capture(cmd, &rc);
  const auto at = out.find("tf global_steps_per_sec=");
  if (rc != 0 || at == std::string::npos) {
    o.why = "TensorFlow's run failed (exit " + std::to_string(rc) + "):\n" + tail_of(out);
    return o;
  }
  std::sscanf(out.c_str() + at, "tf global_steps_per_sec=%lf steps=%ld", &o.steps_per_sec, &o.steps);
  o.ok = true;
  return o;
}

std::string mib(int64_t elements) {
  char b[64];
  const double bytes = static_cast<double>(elements) * 4;
  if (bytes >= 1 << 20) std::snprintf(b, sizeof b, "%g MiB", bytes / (1 << 20));
  else std::snprintf(b, sizeof b, "%g B", bytes);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  std::string role, cluster, dir;
  std::vector<int64_t> sizes = {16777216, 4194304, 1};
  double seconds = 15;
  int workers = 2, task = 0, rounds = 1;
  int64_t elements = 1;
  bool tf = true, sparse = false;
  int64_t vocab = 1000000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ps_throughput: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--role") role = next();
    else if (a == "--cluster") cluster = next();
    else if (a == "--dir") dir = next();
    else if (a == "--task") task = std::atoi(next().c_str());
    else if (a == "--workers") workers = std::atoi(next().c_str());
    else if (a == "--rounds") rounds = std::atoi(next().c_str());
    else if (a == "--seconds") seconds = std::atof(next().c_str());
    else if (a == "--elements" && !role.empty()) elements = std::atoll(next().c_str());
    else if (a == "--elements") {
      sizes.clear();
      std::stringstream ss(next());
      for (std::string t; std::getline(ss, t, ',');) sizes.push_back(std::atoll(t.c_str()));
    } else if (a == "--no-tf") tf = false;
    else if (a == "--sparse") sparse = true;
    else if (a == "--vocab") vocab = std::atoll(next().c_str());
    else {
      std::fprintf(stderr, "ps_throughput: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (workers < 1 || rounds < 1 || !(seconds > 0) || (sizes.empty() && !sparse)) {
    std::fprintf(stderr, "ps_throughput: --workers, --rounds and --seconds must be positive\n");
    return 2;
  }
  for (int64_t n : sizes)
    if (n < 1) {
      std::fprintf(stderr, "ps_throughput: --elements must be positive, got %ld\n", n);
      return 2;
    }
  if (role == "ps") {
    auto c = af::ClusterSpec::from_file(cluster);
    if (!c.ok()) return 1;
    return af::serve_until_signal(*c, af::TaskId{"ps", 0}).ok() ? 0 : 1;
  }
  if (role == "worker") return run_worker(cluster, task, elements, seconds, workers, dir);

  std::string python;
  if (tf) {
    FILE* p = popen(("bash '" + std::string(AF_SOURCE_DIR) + "/bench/tf_venv.sh' 2>&1").c_str(), "r");
    char buf[4096];
    std::string out;
    while (p && fgets(buf, sizeof buf, p)) out += buf;
    const int rc = p ? pclose(p) : -1;
    if (rc == 0 && !out.empty()) python = out.substr(out.find_last_of('\n', out.size() - 2) + 1, std::string::npos);
    while (!python.empty() && (python.back() == '\n' || python.back() == ' ')) python.pop_back();
    if (python.empty()) std::printf("TensorFlow baseline skipped: %s\n", out.c_str());
  }
  std::printf("ps_throughput: 1 ps (2 for the sparse case) + %d workers on 127.0.0.1, %g s windows, %d round(s); "
              "steps/s summed over workers\n",
              workers, seconds, rounds);
  int failures = 0;
  for (int64_t n : sizes) {
    double af_sum = 0, tf_sum = 0;
    int af_n = 0, tf_n = 0;
    for (int r = 0; r < rounds; ++r) {
      Outcome a = run_actorflow(n, seconds, workers);
      if (!a.ok) {
        std::printf("  %-10s actorflow FAILED: %s\n", mib(n).c_str(), a.why.c_str());
        ++failures;
      } else {
        af_sum += a.steps_per_sec;
        ++af_n;
        std::printf("  %-10s round %d actorflow  %10.1f steps/s (%ld steps, final value checked)\n", mib(n).c_str(), r + 1,
                    a.steps_per_sec, a.steps);
      }
      std::fflush(stdout);
      if (python.empty()) continue;
      Outcome t = run_tf(python, n, seconds, workers);
      if (!t.ok) {
        std::printf("  %-10s TensorFlow FAILED: %s\n", mib(n).c_str(), t.why.c_str());
      } else {
        tf_sum += t.steps_per_sec;
        ++tf_n;
        std::printf("  %-10s round %d TensorFlow %10.1f steps/s (%ld steps, final value checked)\n", mib(n).c_str(), r + 1,
                    t.steps_per_sec, t.steps);
      }
      std::fflush(stdout);
    }
    if (af_n && tf_n)
      std::printf("  %-10s actorflow %.1f / TensorFlow %.1f steps/s = %.2fx\n", mib(n).c_str(), af_sum / af_n,
                  tf_sum / tf_n, (af_sum / af_n) / (tf_sum / tf_n));
  }
  if (sparse) {
    // Global steps/s of samples/wide_and_deep on 2 ps + `workers` workers, each side after a
    // warm-up of 10 s (its graph registration and first lookups).
    const double warmup = 10;
    double af_sum = 0, tf_sum = 0;
    int af_n = 0, tf_n = 0;
    for (int r = 0; r < rounds; ++r) {
      Outcome a = run_actorflow_sparse(seconds, warmup, workers, vocab);
      if (!a.ok) {
        std::printf("  sparse     actorflow FAILED: %s\n", a.why.c_str());
        ++failures;
      } else {
        af_sum += a.steps_per_sec;
        ++af_n;
        std::printf("  sparse     round %d actorflow  %10.1f global steps/s (%ld steps)\n", r + 1, a.steps_per_sec, a.steps);
      }
      std::fflush(stdout);
      if (python.empty()) continue;
      Outcome t = run_tf_sparse(python, seconds, warmup, workers, vocab);
      if (!t.ok) {
        std::printf("  sparse     TensorFlow FAILED: %s\n", t.why.c_str());
      } else {
        tf_sum += t.steps_per_sec;
        ++tf_n;
        std::printf("  sparse     round %d TensorFlow %10.1f global steps/s (%ld steps)\n", r + 1, t.steps_per_sec, t.steps);
      }
      std::fflush(stdout);
    }
    if (af_n && tf_n)
      std::printf("  sparse     actorflow %.1f / TensorFlow %.1f global steps/s = %.2fx\n", af_sum / af_n, tf_sum / tf_n,
                  (af_sum / af_n) / (tf_sum / tf_n));
  }
  return failures ? 1 : 0;
}
