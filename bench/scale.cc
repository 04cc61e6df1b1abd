// The control plane at scale (docs/scale.md): W workers and P parameter servers on 127.0.0.1,
// lightweight tasks (several worker tasks per process), measured per task and in total.
//
//   build/bench/scale [--workers 64,128,256] [--ps 8] [--window 10] [--per-process 16]
//                     [--actorflow build/actorflow] [--out FILE] [--keep]
//
// Per worker count it writes a cluster file with free loopback ports, starts the ps tasks (this
// binary, re-executed with --role task; one process each), waits until they serve, starts the
// workers (the chief and the last two in a process each, the others --per-process to a process,
// each task a Server with its own actor system), and waits (bounded) until every worker's session
// is ready. Results and their reading: docs/scale.md. The model is tiny: one float scalar per ps
// (`/job:ps/task:k`), initialised by the chief's Supervisor (worker 0, which also watches every
// task: SupervisorConfig::monitor_tasks); a step is one assign_add(v_k, 1) on every ps. Then:
//   1. idle window (`--window` s, nobody steps): heartbeats and membership events per second per
//      task (the counters actorflow_heartbeats_sent_total / _received_total /
//      actorflow_membership_events_total, which each task process writes to a file every 500 ms),
//      established TCP connections per process (net/proc_sockets.h), membership peers per task,
//      PSS per process, and the CPU the task processes and the host used;
//   2. `actorflow status --cluster F` run once: its wall time minus its rate interval (10 ms);
//   3. load window (`--window` s, every worker steps as fast as it can): variable updates per
//      second the ps tasks sustain, from the variables' values the chief reads at the window's
//      start and end (each update adds 1), PSS and connections under load;
//   4. kill -9 of the last worker: the time until it leaves the chief's membership (the chief
//      polls Membership::peers() every 2 ms and writes when each task left);
//   5. SIGSTOP of the next-to-last worker (a silent task: no closed connection): the same delay,
//      which is about peer_timeout_ms.
// Every wait is bounded; at the end every child is told to stop (a file), woken if stopped, and
// SIGKILLed after a bounded wait, on error too; a child whose orchestrator died exits by itself
// (it polls its parent). A task process whose task fails (its step or session errs) ends with all
// its tasks, and the run reports the failure with the log directory.
// Prints one markdown row per worker count (docs/scale.md) and appends them to --out.
// Exit status: 0 ok; 1 a run failed (the reason and the tasks' log directory are printed);
// 2 bad options.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <functional>
#include <memory>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "actorflow/actorflow.h"
#include "bench/child_process.h"
#include "actors/membership.h"
#include "core/metrics.h"
#include "net/port_reservation.h"
#include "net/proc_sockets.h"
#include "actors/server_runtime.h"

namespace af = actorflow;
using Clock = std::chrono::steady_clock;

namespace {

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

using actorflow::bench::exists;
using actorflow::bench::self_path;
using actorflow::bench::slurp;

// Writes `text` to `p` atomically (a reader never sees half a file).
void put(const std::string& p, const std::string& text) {
  const std::string tmp = p + ".tmp";
  { std::ofstream(tmp) << text; }
  std::rename(tmp.c_str(), p.c_str());
}

std::string task_file(const std::string& dir, const std::string& what, const std::string& job, int index) {
  return dir + "/" + what + "_" + job + "_" + std::to_string(index) + ".txt";
}

// ---- one task -----------------------------------------------------------------------------
// The counters this bench reads, as "name value" lines.
std::string counters_text() {
  auto& m = af::Metrics::global();
  std::ostringstream o;
  for (const char* n : {"actorflow_heartbeats_sent_total", "actorflow_heartbeats_received_total",
                        "actorflow_membership_events_total", "actorflow_variable_updates_total"})
    o << n << " " << m.counter_value(n) << "\n";
  o << "time_ms " << wall_ms() << "\n";
  return o.str();
}

// The orchestrator's commands (files in the run's directory), polled by one thread per process
// and handed to its tasks without each task polling.
struct Flags {
  std::mutex mu;
  std::condition_variable cv;
  bool go = false, halt = false, over = false;
  // Sets go and halt (what the files say) and wakes the tasks when they changed.
  void set(bool g, bool h) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (g == go && h == halt) return;
      go = g;
      halt = h;
    }
    cv.notify_all();
  }
  // The run is over: every task returns.
  void finish() {
    {
      std::lock_guard<std::mutex> l(mu);
      over = true;
    }
    cv.notify_all();
  }
};

// One worker task: its session on `server` through a Supervisor (the chief, index 0, initialises
// the model and watches every task), then steps while the go file says so, until `over()`.
af::Status worker_loop(af::Server& server, int index, int num_ps, const std::string& dir, Flags& flags) {
  af::Scope root = af::Scope::root();
  std::vector<af::Output> vars, inits, adds;
  for (int k = 0; k < num_ps; ++k) {
    af::Scope ps = root.with_device("/job:ps/task:" + std::to_string(k));
    auto v = af::ops::variable(ps.with_op_name("v" + std::to_string(k)), af::Shape{}, af::DType::kFloat32, false);
    vars.push_back(v);
    inits.push_back(af::ops::assign(ps, v, af::ops::constant(ps, af::Tensor::scalar<float>(0.f))));
    adds.push_back(af::ops::assign_add(ps, v, af::ops::constant(ps, af::Tensor::scalar<float>(1.f))));
  }
  auto init = af::ops::no_op(root, inits, "init");
  auto step = af::ops::no_op(root, adds, "step");
  const bool chief = index == 0;
  af::SupervisorConfig sc;
  sc.is_chief = chief;
  sc.init_op = init;
  sc.save_checkpoint_secs = 0;
  sc.save_summaries_secs = 0;
  sc.ready_timeout_secs = 900;
  sc.task_name = "worker" + std::to_string(index);
  sc.monitor_tasks = chief;
  af::Supervisor sv(root, sc);
  auto sess = sv.managed_session(server.target());
  if (!sess.ok()) return sess.status();
  // The chief records when each task leaves its membership (polled every 2 ms).
  std::atomic<bool> done{false};
  std::thread watch;
  if (chief) {
    watch = std::thread([&] {
      af::Membership* m = af::ServerRuntime(server).membership();
      std::set<std::string> seen, gone;
      while (!done) {
        std::set<std::string> now;
        for (const auto& p : m->peers()) now.insert(p.task);
        std::string lines;
        for (const auto& t : seen)
          if (!now.count(t) && !gone.count(t)) {
            gone.insert(t);
            lines += t + " " + std::to_string(wall_ms()) + "\n";
          }
        seen.insert(now.begin(), now.end());
        if (!lines.empty()) std::ofstream(dir + "/left.txt", std::ios::app) << lines;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));  // sampling the membership
      }
    });
  }
  auto total = [&]() -> af::Result<double> {
    auto r = (*sess)->run(vars);
    if (!r.ok()) return r.status();
    double s = 0;
    for (const auto& t : *r) s += t.data<float>()[0];
    return s;
  };
  put(task_file(dir, "ready", "worker", index), "ok\n");
  bool stepping = false, measured = false;
  double s0 = 0;
  int64_t t0 = 0, steps = 0;
  af::Status outcome;
  while (true) {
    bool go = false;
    {
      std::lock_guard<std::mutex> l(flags.mu);
      if (flags.over) break;
      go = flags.go && !flags.halt;
    }
    if (go && !stepping && !measured) {
      stepping = true;
      if (chief) {
        auto s = total();
        if (!s.ok()) { outcome = s.status(); break; }
        s0 = *s;
        t0 = wall_ms();
      }
    }
    if (stepping && !go) {
      stepping = false;
      measured = true;
      if (chief) {
        auto s = total();
        if (!s.ok()) { outcome = s.status(); break; }
        const int64_t t1 = wall_ms();
        put(dir + "/updates.txt", std::to_string(*s - s0) + " " + std::to_string((t1 - t0) / 1000.0) + "\n");
      }
      put(task_file(dir, "steps", "worker", index), std::to_string(steps) + "\n");
    }
    if (stepping) {
      auto r = (*sess)->run({}, {}, {step});
      if (!r.ok()) { outcome = r.status(); break; }
      ++steps;
    } else {
      // Idle until the window opens (once) or the run is over.
      std::unique_lock<std::mutex> l(flags.mu);
      flags.cv.wait_for(l, std::chrono::seconds(1),
                        [&] { return flags.over || (flags.go && !flags.halt && !measured); });
    }
  }
  done = true;
  if (watch.joinable()) watch.join();
  return outcome;
}

// The tasks `indices` of `job` in this process, each a Server with an actor system of its own
// (lightweight tasks: the process's fixed cost, e.g. the CUDA libraries' ~150 MiB, is paid once).
int run_tasks(const std::string& cluster_file, const std::string& job, const std::vector<int>& indices, int num_ps,
              const std::string& dir) {
  const pid_t parent = getppid();
  auto fail = [&](int index, const af::Status& s) {
    std::fprintf(stderr, "%s %d: %s\n", job.c_str(), index, s.to_string().c_str());
    put(task_file(dir, "failed", job, index), s.to_string() + "\n");
    return 1;
  };
  auto cluster = af::ClusterSpec::from_file(cluster_file);
  if (!cluster.ok()) return fail(indices[0], cluster.status());
  std::vector<std::unique_ptr<af::Server>> servers;
  for (int i : indices) {
    auto server = af::Server::create(*cluster, af::TaskId{job, i});
    if (!server.ok()) return fail(i, server.status());
    servers.push_back(std::move(*server));
  }
  const std::string stop_file = dir + "/stop", go_file = dir + "/go", halt_file = dir + "/halt";
  std::atomic<bool> failed{false};
  Flags flags;
  auto over = [&] { return failed || exists(stop_file) || getppid() != parent; };
  std::vector<std::thread> threads;
  if (job == "ps") {
    for (int i : indices) put(task_file(dir, "ready", job, i), "ok\n");
  } else {
    for (size_t t = 0; t < indices.size(); ++t)
      threads.emplace_back([&, t] {
        af::Status st = worker_loop(*servers[t], indices[t], num_ps, dir, flags);
        if (!st.ok()) {
          fail(indices[t], st);
          failed = true;
        }
      });
  }
  auto last_dump = Clock::now() - std::chrono::seconds(1);
  while (!over()) {
    flags.set(exists(go_file), exists(halt_file));
    if (Clock::now() - last_dump >= std::chrono::milliseconds(500)) {
      last_dump = Clock::now();
      size_t peers = 0;  // the peers the process's tasks connected to (Membership::ensure)
      for (auto& sv : servers) peers += af::ServerRuntime(*sv).membership()->peers().size();
      put(task_file(dir, "counters", job, indices[0]),
          counters_text() + "membership_peers " + std::to_string(peers) + "\n");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polls the orchestrator's files
  }
  flags.finish();
  for (auto& t : threads) t.join();
  std::_Exit(failed ? 1 : 0);  // the bench is over: no orderly goodbye to hundreds of peers
}

// ---- measuring the processes --------------------------------------------------------------
// A field of /proc/<pid>/smaps_rollup ("Rss:", "Pss:"), in bytes; 0 when unreadable.
double smaps_bytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string k;
  while (in >> k) {
    if (k == field) {
      double kb = 0;
      in >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

// CPU seconds (user + system) `pid` used so far; 0 when unreadable.
double cpu_secs(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const auto close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream f(line.substr(close + 2));
  std::string x;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 13; ++i) f >> x;  // fields 3..13
  f >> utime >> stime;
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The host's busy CPU seconds (all cores, everything but idle and iowait) so far.
double host_busy_secs() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double v[10] = {0};
  in >> cpu;
  for (double& x : v) in >> x;
  return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// One process of the run and the tasks it hosts.
struct Proc {
  std::string job;
  std::vector<int> indices;
  pid_t pid = -1;
  std::string name(size_t i = 0) const {
    return "/job:" + job + "/replica:0/task:" + std::to_string(indices[i]);
  }
};

std::map<std::string, double> read_counters(const std::string& p) {
  std::map<std::string, double> m;
  std::istringstream in(slurp(p));
  std::string k;
  double v;
  while (in >> k >> v) m[k] = v;
  return m;
}

using actorflow::bench::spawn;
using actorflow::bench::wait_bounded;

// Every child of one run; the destructor ends them all (stop file, SIGCONT, bounded wait,
// SIGKILL), error or not, and removes the run's directory once the run succeeded.
struct Children {
  std::string dir;
  std::vector<Proc> procs;
  bool remove_dir = false;
  ~Children() {
    put(dir + "/stop", "stop\n");
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (auto& p : procs) {
      if (p.pid <= 0) continue;
      kill(p.pid, SIGCONT);  // a stopped task could not see the stop file
      const auto left = std::max<Clock::duration>(deadline - Clock::now(), std::chrono::milliseconds(1));
      wait_bounded(p.pid, std::chrono::duration_cast<std::chrono::milliseconds>(left));
      p.pid = -1;
    }
    if (remove_dir && std::system(("rm -rf '" + dir + "'").c_str()) != 0)
      std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  }
};

struct Row {
  int workers = 0, ps = 0, procs = 0;
  double chief_peers = 0, chief_sockets = 0;
  double ps_peer_procs = 0, ps_sockets_avg = 0, ps_sockets_max = 0;
  double worker_sockets_avg = 0;   // per worker task
  double worker_members_avg = 0;   // membership peers per worker task
  double ps_members_avg = 0;       // membership peers per ps task
  double worker_peer_procs_max = 0;  // distinct peer processes of a worker process
  int worker_worker = 0;           // sockets between two worker processes other than the chief, or inside one
  double total_connections = 0, load_connections = 0;
  double hb_total = 0, hb_chief = 0, hb_ps_avg = 0, hb_worker_avg = 0;  // sent + received per second
  double events_per_sec = 0;
  double pss_total = 0, pss_chief = 0, pss_ps_avg = 0, pss_worker_avg = 0, pss_worker_marginal = 0, pss_load_total = 0;
  double status_secs = -1, detect_kill_secs = -1, detect_stop_secs = -1, updates_per_sec = -1;
  double startup_secs = 0;
  double idle_cpu = 0, chief_cpu = 0, host_cpu = 0;  // cores busy in the idle window: the tasks, the chief, the host
};

// Waits until every task of `procs` wrote its `what` file, or one failed; bounded by `limit`.
af::Status await_files(const std::string& dir, const std::vector<Proc>& procs, const std::string& what,
                       std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  for (const Proc& p : procs) {
    for (size_t i = 0; i < p.indices.size(); ++i) {
      while (!exists(task_file(dir, what, p.job, p.indices[i]))) {
        for (int j : p.indices)
          if (exists(task_file(dir, "failed", p.job, j)))
            return af::Internal(p.name(i) + "'s process failed: " + slurp(task_file(dir, "failed", p.job, j)));
        int st = 0;
        if (p.pid > 0 && waitpid(p.pid, &st, WNOHANG) == p.pid)
          return af::Internal("the process of " + p.name(i) + " exited early; its log is in " + dir);
        if (Clock::now() > deadline)
          return af::DeadlineExceeded(p.name(i) + " did not write '" + what + "' within " +
                                      std::to_string(limit.count()) + " s; logs in " + dir);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // files of other processes
      }
    }
  }
  return af::Status::OK();
}

// Seconds from `t0_ms` until `task` appears in the chief's left.txt, or -1 after `limit`.
double await_left(const std::string& dir, const std::string& task, int64_t t0_ms, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    std::istringstream in(slurp(dir + "/left.txt"));
    std::string t;
    int64_t ms;
    while (in >> t >> ms)
      if (t == task) return (ms - t0_ms) / 1000.0;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a file of another process
  }
  return -1;
}

// One run: `workers` workers (worker 0, the chief, in a process of its own; the last two, the
// victims of kill -9 and SIGSTOP, in one each; the others `per_proc` to a process) and `num_ps`
// ps tasks (one per process).
af::Result<Row> run_one(int workers, int num_ps, int per_proc, double window, const std::string& actorflow_bin,
                        bool keep) {
  if (workers < 4) return af::InvalidArgument("the run needs at least 4 workers (chief, 1 packed, 2 victims)");
  Row row;
  row.workers = workers;
  row.ps = num_ps;
  char tmpl[] = "/tmp/af_scale_XXXXXX";
  if (!mkdtemp(tmpl)) return af::Internal("mkdtemp failed");
  Children ch;
  ch.dir = tmpl;
  const std::string dir = ch.dir, file = dir + "/cluster.toml";
  auto list = [&](int n) -> af::Result<std::string> {
    std::string s;
    for (int i = 0; i < n; ++i) {
      auto p = af::net::reserve_port_for_process();
      if (!p.ok()) return p.status();
      s += std::string(i ? ", " : "") + "\"127.0.0.1:" + std::to_string(*p) + "\"";
    }
    return s;
  };
  AF_ASSIGN_OR_RETURN(std::string ps_list, list(num_ps));
  AF_ASSIGN_OR_RETURN(std::string w_list, list(workers));
  put(file, "[jobs]\nps = [" + ps_list + "]\nworker = [" + w_list + "]\n");
  const std::string self = self_path();
  const auto t_start = Clock::now();
  auto start = [&](const std::string& job, std::vector<int> indices) {
    Proc p{job, std::move(indices), -1};
    std::string list;
    for (int i : p.indices) list += (list.empty() ? "" : ",") + std::to_string(i);
    p.pid = spawn({self, "--role", "task", "--cluster", file, "--job", job, "--index", list, "--ps",
                   std::to_string(num_ps), "--dir", dir},
                  dir + "/" + job + std::to_string(p.indices[0]) + ".log");
    ch.procs.push_back(std::move(p));
  };
  for (int k = 0; k < num_ps; ++k) start("ps", {k});
  AF_RETURN_IF_ERROR(await_files(dir, ch.procs, "ready", std::chrono::seconds(120)));
  start("worker", {0});
  for (int i = 1; i < workers - 2; i += per_proc) {
    std::vector<int> idx;
    for (int j = i; j < std::min(i + per_proc, workers - 2); ++j) idx.push_back(j);
    start("worker", idx);
  }
  start("worker", {workers - 2});
  start("worker", {workers - 1});
  row.procs = static_cast<int>(ch.procs.size());
  AF_RETURN_IF_ERROR(await_files(dir, ch.procs, "ready", std::chrono::seconds(120 + 3 * workers)));
  row.startup_secs = std::chrono::duration<double>(Clock::now() - t_start).count();
  std::fprintf(stderr, "  %d workers + %d ps in %d processes ready after %.1f s\n", workers, num_ps, row.procs,
               row.startup_secs);
  const size_t chief = static_cast<size_t>(num_ps);  // worker 0's process
  auto is_victim = [&](size_t i) { return i + 2 >= ch.procs.size(); };

  // 1. The idle window.
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the chief's monitor reaches late tasks
  std::vector<std::map<std::string, double>> c0(ch.procs.size()), c1(ch.procs.size());
  auto counters = [&](size_t i) { return read_counters(task_file(dir, "counters", ch.procs[i].job, ch.procs[i].indices[0])); };
  std::vector<double> cpu0(ch.procs.size()), cpu1(ch.procs.size());
  for (size_t i = 0; i < ch.procs.size(); ++i) {
    c0[i] = counters(i);
    cpu0[i] = cpu_secs(ch.procs[i].pid);
  }
  const double host0 = host_busy_secs();
  const auto w0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(window));  // the measured window
  const double wsecs = std::chrono::duration<double>(Clock::now() - w0).count();
  row.host_cpu = (host_busy_secs() - host0) / wsecs;
  for (size_t i = 0; i < ch.procs.size(); ++i) {
    c1[i] = counters(i);
    cpu1[i] = cpu_secs(ch.procs[i].pid);
    row.idle_cpu += (cpu1[i] - cpu0[i]) / wsecs;
  }
  row.chief_cpu = (cpu1[chief] - cpu0[chief]) / wsecs;
  std::vector<pid_t> pids;
  std::map<pid_t, size_t> index_of;
  for (size_t i = 0; i < ch.procs.size(); ++i) {
    pids.push_back(ch.procs[i].pid);
    index_of[ch.procs[i].pid] = i;
  }
  AF_ASSIGN_OR_RETURN(auto conns, af::net::tcp_connections(pids));
  double ps_hb = 0, w_hb = 0, ps_pss = 0, w_pss = 0, ps_socks = 0, w_socks = 0;
  double packed_pss = 0, packed_tasks = 0, packed_procs = 0, victim_pss = 0;
  for (size_t i = 0; i < ch.procs.size(); ++i) {
    const Proc& p = ch.procs[i];
    const auto& c = conns[p.pid];
    const double secs = (c1[i]["time_ms"] - c0[i]["time_ms"]) / 1000.0;
    auto rate = [&](const char* n) { return secs > 0 ? (c1[i][n] - c0[i][n]) / secs : 0; };
    const double hb = rate("actorflow_heartbeats_sent_total") + rate("actorflow_heartbeats_received_total");
    const double pss = smaps_bytes(p.pid, "Pss:");
    row.hb_total += hb / 2;  // each heartbeat is counted by its sender and by its receiver
    row.events_per_sec += rate("actorflow_membership_events_total");
    row.pss_total += pss;
    row.total_connections += c.sockets;
    if (i == chief) {
      row.hb_chief = hb;
      row.pss_chief = pss;
      row.chief_peers = c1[i]["membership_peers"];
      row.chief_sockets = c.sockets;
    } else if (p.job == "ps") {
      ps_hb += hb;
      ps_pss += pss;
      ps_socks += c.sockets;
      row.ps_members_avg += c1[i]["membership_peers"] / num_ps;
      row.ps_sockets_max = std::max(row.ps_sockets_max, static_cast<double>(c.sockets));
      row.ps_peer_procs = std::max(row.ps_peer_procs, static_cast<double>(c.peers.size()));
    } else {
      w_hb += hb;
      w_pss += pss;
      w_socks += c.sockets;
      row.worker_members_avg += c1[i]["membership_peers"] / (workers - 1);
      row.worker_peer_procs_max = std::max(row.worker_peer_procs_max, static_cast<double>(c.peers.size()));
      row.worker_worker += c.self_sockets;
      for (pid_t q : c.peers) {
        const size_t j = index_of[q];
        if (j != chief && ch.procs[j].job == "worker") ++row.worker_worker;
      }
      if (is_victim(i)) {
        victim_pss = std::max(victim_pss, pss);
      } else {
        packed_pss += pss;
        packed_tasks += static_cast<double>(p.indices.size());
        packed_procs += 1;
      }
    }
  }
  row.total_connections /= 2;  // both ends of a loopback connection are counted
  row.worker_worker /= 2;
  const double nw = workers - 1;
  row.hb_ps_avg = ps_hb / num_ps;
  row.hb_worker_avg = w_hb / nw;
  row.pss_ps_avg = ps_pss / num_ps;
  row.pss_worker_avg = w_pss / nw;
  // What one more worker task costs in a process that already holds some: (a packed process - a
  // one-task process) / (its tasks - 1), averaged over the packed processes.
  if (packed_tasks > packed_procs)
    row.pss_worker_marginal = (packed_pss - packed_procs * victim_pss) / (packed_tasks - packed_procs);
  row.ps_sockets_avg = ps_socks / num_ps;
  row.worker_sockets_avg = w_socks / nw;

  // 2. `actorflow status`, once.
  if (!actorflow_bin.empty()) {
    const auto t = Clock::now();
    pid_t st = spawn({actorflow_bin, "status", "--cluster", file, "--interval-ms", "10", "--timeout-ms", "5000"},
                     dir + "/status.log");
    const int rc = wait_bounded(st, std::chrono::seconds(300));
    const double secs = std::chrono::duration<double>(Clock::now() - t).count() - 0.010;
    if (rc != 0) return af::Internal("actorflow status exited " + std::to_string(rc) + "; see " + dir + "/status.log");
    row.status_secs = secs;
  }

  // 3. The load window.
  put(dir + "/go", "go\n");
  std::this_thread::sleep_for(std::chrono::duration<double>(window));  // the measured window
  for (const auto& p : ch.procs) row.pss_load_total += smaps_bytes(p.pid, "Pss:");
  {
    AF_ASSIGN_OR_RETURN(auto loaded, af::net::tcp_connections(pids));
    for (const auto& [pid, c] : loaded) row.load_connections += c.sockets / 2.0;
  }
  put(dir + "/halt", "halt\n");
  {
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (!exists(dir + "/updates.txt") && Clock::now() < deadline) {
      if (exists(task_file(dir, "failed", "worker", 0))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a file of another process
    }
    double updates = 0, secs = 0;
    std::istringstream(slurp(dir + "/updates.txt")) >> updates >> secs;
    if (secs <= 0) return af::Internal("the chief wrote no update count; logs in " + dir);
    row.updates_per_sec = updates / secs;
  }

  // 4. kill -9 of the last worker (a process of its own).
  {
    Proc& p = ch.procs.back();
    const int64_t t0 = wall_ms();
    kill(p.pid, SIGKILL);
    row.detect_kill_secs = await_left(dir, p.name(), t0, std::chrono::seconds(30));
    waitpid(p.pid, nullptr, 0);
    p.pid = -1;
  }
  // 5. SIGSTOP of the next-to-last: silent, its connections stay open.
  {
    Proc& p = ch.procs[ch.procs.size() - 2];
    const int64_t t0 = wall_ms();
    kill(p.pid, SIGSTOP);
    row.detect_stop_secs = await_left(dir, p.name(), t0, std::chrono::seconds(60));
    kill(p.pid, SIGKILL);
    kill(p.pid, SIGCONT);
    waitpid(p.pid, nullptr, 0);
    p.pid = -1;
  }
  // The logs stay when a run fails (the early returns above) or with --keep.
  if (keep) std::fprintf(stderr, "  logs kept in %s\n", dir.c_str());
  ch.remove_dir = !keep;
  return row;
}

std::string mib(double b) {
  char o[32];
  std::snprintf(o, sizeof o, "%.1f", b / (1024.0 * 1024.0));
  return o;
}

std::string num(double v, const char* f = "%.1f") {
  char o[32];
  std::snprintf(o, sizeof o, f, v);
  return o;
}

std::string header() {
  return "| workers | ps | processes | chief: membership peers / sockets | ps: membership peers / sockets avg / max | worker: membership peers / sockets per task | "
         "worker-worker sockets | TCP connections total (idle / load) | heartbeats/s total | hb/s chief | hb/s per ps | hb/s per "
         "worker | membership events/s | PSS chief MiB | PSS per ps MiB | PSS per worker MiB (avg / marginal) | PSS "
         "total MiB (idle / load) | detect kill -9 s | detect SIGSTOP s | status s | updates/s | startup s | idle CPU cores: tasks / chief / host |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
}

std::string render(const Row& r) {
  std::ostringstream o;
  o << "| " << r.workers << " | " << r.ps << " | " << r.procs << " | " << num(r.chief_peers, "%.0f") << " / "
    << num(r.chief_sockets, "%.0f") << " | " << num(r.ps_members_avg) << " / " << num(r.ps_sockets_avg) << " / "
    << num(r.ps_sockets_max, "%.0f") << " | " << num(r.worker_members_avg, "%.2f") << " / "
    << num(r.worker_sockets_avg, "%.2f") << " | " << r.worker_worker << " | "
    << num(r.total_connections, "%.0f") << " / " << num(r.load_connections, "%.0f") << " | " << num(r.hb_total) << " | " << num(r.hb_chief) << " | "
    << num(r.hb_ps_avg) << " | " << num(r.hb_worker_avg, "%.2f") << " | " << num(r.events_per_sec, "%.2f") << " | "
    << mib(r.pss_chief) << " | " << mib(r.pss_ps_avg) << " | " << mib(r.pss_worker_avg) << " / "
    << mib(r.pss_worker_marginal) << " | " << mib(r.pss_total) << " / " << mib(r.pss_load_total) << " | "
    << num(r.detect_kill_secs, "%.3f") << " | " << num(r.detect_stop_secs, "%.2f") << " | "
    << num(r.status_secs, "%.2f") << " | " << num(r.updates_per_sec, "%.0f") << " | " << num(r.startup_secs)
    << " | " << num(r.idle_cpu, "%.2f") << " / " << num(r.chief_cpu, "%.2f") << " / " << num(r.host_cpu, "%.2f") << " |\n";
  return o.str();
}

std::string arg(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (name == argv[i]) return argv[i + 1];
  return def;
}

bool flag(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i)
    if (name == argv[i]) return true;
  return false;
}

bool parse_int(const std::string& s, int lo, int hi, int* out) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // Every argument must be one this tool knows (a typo or --help must not start a 10-minute run).
  static const std::set<std::string> with_value = {"--role", "--ps", "--index", "--cluster", "--job", "--dir",
                                                   "--workers", "--window", "--actorflow", "--per-process", "--out"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--keep") continue;
    if (with_value.count(a) && i + 1 < argc) {
      ++i;
      continue;
    }
    std::fprintf(stderr,
                 "scale: unknown or incomplete argument '%s'\nusage: scale [--workers 64,128,256] [--ps 8] [--window 10] "
                 "[--per-process 16] [--actorflow build/actorflow] [--out FILE] [--keep]\n",
                 a.c_str());
    return 2;
  }
  const std::string role = arg(argc, argv, "--role", "");
  int num_ps = 0;
  if (!parse_int(arg(argc, argv, "--ps", "8"), 1, 64, &num_ps)) {
    std::fprintf(stderr, "scale: --ps must be 1..64\n");
    return 2;
  }
  if (role == "task") {
    std::vector<int> indices;
    std::istringstream in(arg(argc, argv, "--index", ""));
    std::string part;
    while (std::getline(in, part, ',')) {
      int index = 0;
      if (!parse_int(part, 0, 100000, &index)) {
        std::fprintf(stderr, "scale: --index takes task indexes separated by commas, got '%s'\n", part.c_str());
        return 2;
      }
      indices.push_back(index);
    }
    if (indices.empty()) {
      std::fprintf(stderr, "scale: --index is required with --role task\n");
      return 2;
    }
    return run_tasks(arg(argc, argv, "--cluster", ""), arg(argc, argv, "--job", ""), indices, num_ps,
                     arg(argc, argv, "--dir", ""));
  }
  if (!role.empty()) {
    std::fprintf(stderr, "scale: unknown --role '%s'\n", role.c_str());
    return 2;
  }
  std::vector<int> counts;
  {
    std::istringstream in(arg(argc, argv, "--workers", "64,128,256"));
    std::string part;
    while (std::getline(in, part, ',')) {
      int n = 0;
      if (!parse_int(part, 1, 2000, &n)) {
        std::fprintf(stderr, "scale: --workers takes counts 1..2000 separated by commas, got '%s'\n", part.c_str());
        return 2;
      }
      counts.push_back(n);
    }
  }
  int window = 0;
  if (!parse_int(arg(argc, argv, "--window", "10"), 1, 600, &window)) {
    std::fprintf(stderr, "scale: --window must be 1..600 seconds\n");
    return 2;
  }
  std::string bin = arg(argc, argv, "--actorflow", "");
  if (bin.empty()) {
    const std::string self = self_path();
    const std::string guess = self.substr(0, self.rfind('/')) + "/../actorflow";
    if (exists(guess)) bin = guess;
  }
  if (!bin.empty() && !exists(bin)) {
    std::fprintf(stderr, "scale: --actorflow %s does not exist\n", bin.c_str());
    return 2;
  }
  if (bin.empty()) std::fprintf(stderr, "scale: no actorflow binary found next to this one: status not timed\n");
  int per_proc = 0;
  if (!parse_int(arg(argc, argv, "--per-process", "16"), 1, 1000, &per_proc)) {
    std::fprintf(stderr, "scale: --per-process must be 1..1000\n");
    return 2;
  }
  const std::string out = arg(argc, argv, "--out", "");
  const bool keep = flag(argc, argv, "--keep");
  std::string table = header();
  std::printf("%s", table.c_str());
  std::fflush(stdout);
  int rc = 0;
  for (int n : counts) {
    std::fprintf(stderr, "scale: %d workers, %d ps, %d s windows\n", n, num_ps, window);
    auto r = run_one(n, num_ps, per_proc, window, bin, keep);
    if (!r.ok()) {
      std::fprintf(stderr, "scale: %d workers: %s\n", n, r.status().to_string().c_str());
      rc = 1;
      continue;
    }
    const std::string line = render(*r);
    table += line;
    std::printf("%s", line.c_str());
    std::fflush(stdout);
  }
  if (!out.empty()) std::ofstream(out, std::ios::app) << table;
  return rc;
}
