// Child processes for the benchmarks that start their own tasks (bench/ps_throughput.cc,
// bench/scale.cc): fork/exec with the output appended to a log file, a bounded wait, and the
// small file helpers both use.
// Header-only; each function is safe to call from any thread (no shared state).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace actorflow {
namespace bench {

// Starts argv[0] (a path) with `argv`, its stdout and stderr appended to `log`. Returns the
// child's pid, or -1 when fork failed (a failed exec ends the child with 127).
inline pid_t spawn(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    if (FILE* f = std::fopen(log.c_str(), "a")) {
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
    }
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  return pid;
}

// Waits for `pid` up to `limit`, then SIGKILLs and reaps it. Its exit status (128 + signal for
// a signalled child), or -1 when it had to be killed or is not our child.
inline int wait_bounded(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    int st = 0;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (r < 0) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling a child process: no other signal
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

// This executable's path (/proc/self/exe), "" when unreadable.
inline std::string self_path() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// Whether `p` exists.
inline bool exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }

// The whole file `p` ("" when unreadable).
inline std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace bench
}  // namespace actorflow
