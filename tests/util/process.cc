#include "tests/util/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace actorflow {
namespace testing {

std::unique_ptr<ChildProcess> ChildProcess::start(const std::vector<std::string>& argv,
                                                  const std::map<std::string, std::string>& env) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe failed";
    return nullptr;
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return nullptr;
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    // Die with the test process, even when it crashes.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  std::unique_ptr<ChildProcess> c(new ChildProcess());
  c->pid_ = pid;
  int rfd = fds[0];
  c->reader_ = std::thread([p = c.get(), rfd] { p->reader_loop(rfd); });
  return c;
}

void ChildProcess::reader_loop(int fd) {
  char buf[4096];
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    std::lock_guard<std::mutex> l(mu_);
    out_.append(buf, static_cast<size_t>(n));
    cv_.notify_all();
  }
  close(fd);
  std::lock_guard<std::mutex> l(mu_);
  eof_ = true;
  cv_.notify_all();
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !exited_) {
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    int st = 0;
    waitpid(pid_, &st, 0);
  }
  if (reader_.joinable()) reader_.join();
}

bool ChildProcess::wait_for_output(const std::string& needle, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, timeout, [&] { return out_.find(needle) != std::string::npos || eof_; }) &&
         out_.find(needle) != std::string::npos;
}

std::string ChildProcess::output() const {
  std::lock_guard<std::mutex> l(mu_);
  return out_;
}

void ChildProcess::signal(int sig) {
  if (pid_ > 0 && !exited_) ::kill(pid_, sig);
}

bool ChildProcess::wait_stopped(std::chrono::milliseconds timeout) {
  if (pid_ <= 0 || exited_) return false;
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (true) {
    siginfo_t info{};
    // WNOWAIT: observe the stop without consuming it (wait() still sees the final exit).
    if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WSTOPPED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_ &&
        info.si_code == CLD_STOPPED)
      return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // polls a kernel state, bounded
  }
}

int ChildProcess::wait(std::chrono::milliseconds timeout) {
  if (exited_) return status_;
  // Poll waitpid with WNOHANG; there is no waitpid with a timeout.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (reader_.joinable()) reader_.join();
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool ChildProcess::running() { return wait(std::chrono::milliseconds(0)) == -1; }

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/actorflow_test_XXXXXX";
  char* p = mkdtemp(tmpl);
  path_ = p ? p : "/tmp";
}

TempDir::~TempDir() {
  std::error_code ec;
  if (path_ != "/tmp") std::filesystem::remove_all(path_, ec);
}

std::string TempDir::write(const std::string& name, const std::string& content) const {
  std::string p = path_ + "/" + name;
  std::ofstream f(p);
  f << content;
  return p;
}

std::vector<int> processes_with(const std::vector<std::string>& needles) {
  std::vector<int> pids;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const int pid = std::stoi(name);
    if (pid == getpid()) continue;
    std::ifstream f(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (auto& c : cmd)
      if (c == '\0') c = ' ';
    bool all = !cmd.empty();
    for (const auto& n : needles) all = all && cmd.find(n) != std::string::npos;
    if (all) pids.push_back(pid);
  }
  return pids;
}

std::string binary(const std::string& rel) { return std::string(AF_BINARY_DIR) + "/" + rel; }

}  // namespace testing
}  // namespace actorflow
