// `actorflow up`: run every task of a cluster file whose address is on this host as a child
// process, restart children that die abnormally (with backoff, up to max_restarts within
// restart_window_secs), and stop them all on SIGINT/SIGTERM, leaving no process behind.
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <thread>

#include "actorflow/embedding.h"
#include "actors/faults.h"
#include "actors/server.h"
#include "cli/commands.h"
#include "core/logging.h"
#include "actors/server_runtime.h"
#include "config/cluster_spec.h"  // the cluster file's options

namespace actorflow {
namespace cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Child {
  TaskId task;
  std::vector<std::string> argv;
  std::vector<std::string> first_argv;  // argv of the first start (with --plan)
  std::vector<std::string> first_env;   // extra environment of the first start (a program's plan)
  pid_t pid = -1;
  bool finished = false;                 // exited with status 0: not restarted
  bool given_up = false;                 // too many restarts
  std::deque<Clock::time_point> restarts;
  Clock::time_point restart_at{};
  bool pending_restart = false;
  int restart_count = 0;
};

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "actorflow";
  buf[n] = 0;
  return buf;
}

// Starts `argv` with up's environment plus `extra_env` ("NAME=value" entries).
pid_t spawn(const std::vector<std::string>& argv, const sigset_t& old_mask,
            const std::vector<std::string>& extra_env = {}) {
  // Everything the child needs is built before fork (only async-signal-safe calls after it).
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e; ++e) envp.push_back(*e);
  for (const auto& e : extra_env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  // Child: default signal mask, and die if `up` dies.
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  execvpe(args[0], args.data(), envp.data());
  std::fprintf(stderr, "actorflow up: cannot execute %s: %s\n", args[0], std::strerror(errno));
  _exit(127);
}

std::string describe_exit(int st) {
  if (WIFEXITED(st)) return "exit code " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return std::string("killed by signal ") + std::to_string(WTERMSIG(st)) + " (" +
                              strsignal(WTERMSIG(st)) + ")";
  return "status " + std::to_string(st);
}

}  // namespace

int run_up(const UpOptions& o) {
  auto cluster = ClusterSpec::from_file(o.cluster);
  if (!cluster.ok()) {
    std::cerr << "actorflow up: " << cluster.status().message() << "\n";
    return 2;
  }
  if (!o.plan.empty()) {
    auto plan = FaultPlan::from_file(o.plan);
    Status st = plan.ok() ? check_plan_tasks(*plan, *cluster) : plan.status();
    if (!st.ok()) {
      std::cerr << "actorflow up: " << st.message() << "\n";
      return 2;
    }
  }
  const SupervisorOptions& sv = cluster->supervisor();
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, &old);

  std::vector<Child> children;
  for (const auto& t : cluster->all_tasks()) {
    auto addr = cluster->task_address(t);
    auto hp = parse_address(*addr);
    if (!hp.ok() || !is_local_host(hp->first)) continue;
    Child c;
    c.task = t;
    if (o.program.empty()) {
      c.argv = {self_exe(), "node"};
    } else {
      c.argv = o.program;
    }
    for (const auto& a : std::vector<std::string>{"--cluster", o.cluster, "--job", t.job, "--task",
                                                   std::to_string(t.index)})
      c.argv.push_back(a);
    // The fault plan goes to each task's first start only: a restarted task runs clean
    // (otherwise a kill fault would repeat until max_restarts).
    c.first_argv = c.argv;
    if (!o.plan.empty() && o.program.empty()) {
      c.first_argv.push_back("--plan");
      c.first_argv.push_back(o.plan);
    } else if (!o.plan.empty()) {
      // A user's program gets the plan through its Server (actors/server.h, kFaultPlanEnv).
      char abs[PATH_MAX];
      c.first_env.push_back(std::string(kFaultPlanEnv) + "=" +
                            (::realpath(o.plan.c_str(), abs) ? std::string(abs) : o.plan));
    }
    children.push_back(std::move(c));
  }
  if (children.empty()) {
    std::cerr << "actorflow up: no task of " << o.cluster << " has an address on this host\n";
    return 2;
  }
  for (auto& c : children) {
    c.pid = spawn(c.first_argv, old, c.first_env);
    AF_LOG(INFO) << "started " << c.task.to_string() << " (pid " << c.pid << ")";
  }
  int exit_code = 0;
  bool stopping = false;
  // SIGTERM to every live task, then SIGKILL to those still there after 10 s: no stop waits
  // without a bound.
  auto stop_all = [&] {
    stopping = true;
    std::vector<pid_t> pids;
    for (auto& c : children)
      if (c.pid > 0) {
        kill(c.pid, SIGTERM);
        pids.push_back(c.pid);
      }
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    std::thread([deadline, pids] {
      std::this_thread::sleep_until(deadline);
      for (pid_t p : pids) kill(p, SIGKILL);
    }).detach();
  };
  while (true) {
    // Reap.
    int st = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
      for (auto& c : children) {
        if (c.pid != pid) continue;
        c.pid = -1;
        if (stopping) break;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
          c.finished = true;
          AF_LOG(INFO) << c.task.to_string() << " finished";
          break;
        }
        const auto now = Clock::now();
        while (!c.restarts.empty() &&
               now - c.restarts.front() > std::chrono::duration<double>(sv.restart_window_secs))
          c.restarts.pop_front();
        if (static_cast<int>(c.restarts.size()) >= sv.max_restarts) {
          c.given_up = true;
          exit_code = 1;
          AF_LOG(ERROR) << c.task.to_string() << " failed (" << describe_exit(st) << ") " << c.restarts.size() + 1
                        << " times within " << sv.restart_window_secs << " s; max_restarts = " << sv.max_restarts
                        << ": giving up on it";
          break;
        }
        const double backoff = std::min(10.0, 0.25 * (1 << std::min<size_t>(c.restarts.size(), 6)));
        c.restarts.push_back(now);
        ++c.restart_count;
        c.pending_restart = true;
        c.restart_at = now + std::chrono::milliseconds(static_cast<int>(backoff * 1000));
        AF_LOG(WARNING) << c.task.to_string() << " died (" << describe_exit(st) << "); restart #" << c.restart_count
                        << " in " << backoff << " s";
        break;
      }
    }
    // A training program's parameter servers serve forever (server.join()); once every other
    // task finished successfully, or was given up on past max_restarts, there is nobody left to
    // serve: stop them, like Ctrl-C would (exit 1 when a task was given up on).
    bool workers_done = !stopping && !o.program.empty();
    bool any_ps = false, any_worker = false, any_given_up = false;
    for (auto& c : children) {
      if (c.task.job == "ps") {
        any_ps |= c.pid > 0;
        continue;
      }
      any_worker = true;
      any_given_up |= c.given_up;
      if (!c.finished && !c.given_up) workers_done = false;
    }
    if (workers_done && any_worker && any_ps) {
      if (any_given_up)
        AF_LOG(ERROR) << "no worker is left running (given up on past max_restarts); stopping the parameter servers";
      else
        AF_LOG(INFO) << "every worker finished; stopping the parameter servers";
      stop_all();
    }
    if (stopping) {
      bool any = false;
      for (auto& c : children) any |= c.pid > 0;
      if (!any) break;
    } else {
      bool all_done = true;
      for (auto& c : children) {
        if (c.pending_restart && Clock::now() >= c.restart_at) {
          c.pending_restart = false;
          c.pid = spawn(c.argv, old);
          AF_LOG(INFO) << "restarted " << c.task.to_string() << " (pid " << c.pid << ")";
        }
        if (c.pid > 0 || c.pending_restart) all_done = false;
      }
      if (all_done) break;
    }
    timespec ts{0, 100 * 1000 * 1000};
    siginfo_t info;
    int sig = sigtimedwait(&set, &info, &ts);
    if ((sig == SIGINT || sig == SIGTERM) && !stopping) {
      AF_LOG(INFO) << "stopping " << children.size() << " task(s)";
      stop_all();
    }
  }
  return exit_code;
}

}  // namespace cli
}  // namespace actorflow
