#include "tests/util/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "net/port_reservation.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace actorflow {
namespace testing {

namespace {

std::string describe_status(int st) {
  if (st >= 128) return "killed by signal " + std::to_string(st - 128) + " (" + strsignal(st - 128) + ")";
  return "exit code " + std::to_string(st);
}

size_t count_of(const std::string& hay, const std::string& needle, int want) {
  size_t n = 0;
  for (size_t pos = hay.find(needle); pos != std::string::npos && n < static_cast<size_t>(want);
       pos = hay.find(needle, pos + 1))
    ++n;
  return n;
}

}  // namespace

const std::vector<std::string>& default_fail_fast_lines() {
  static const std::vector<std::string> lines = {"giving up on it", "cannot listen"};
  return lines;
}

std::unique_ptr<ChildProcess> ChildProcess::start(const std::vector<std::string>& argv,
                                                  const std::map<std::string, std::string>& env,
                                                  std::vector<std::string> fail_fast_lines,
                                                  std::shared_ptr<SharedLog> tee) {
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
  c->fail_fast_ = std::move(fail_fast_lines);
  c->tee_ = std::move(tee);
  c->name_ = argv.empty() ? "?" : argv[0].substr(argv[0].rfind('/') + 1);
  if (argv.size() > 1 && argv[1].rfind("-", 0) != 0) c->name_ += " " + argv[1];
  // pidfd: the reader learns of the exit at once. Absent (old kernel): it polls waitpid.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  const int rfd = fds[0];
  c->reader_ = std::thread([p = c.get(), rfd, pidfd] { p->reader_loop(rfd, pidfd); });
  return c;
}

void SharedLog::append(const std::string& lines) {
  std::lock_guard<std::mutex> l(mu_);
  text_ += lines;
}

std::string SharedLog::text() const {
  std::lock_guard<std::mutex> l(mu_);
  return text_;
}

void ChildProcess::append_locked(const char* data, size_t n) {
  out_.append(data, n);
  const size_t teed = scanned_;
  for (size_t nl; (nl = out_.find('\n', scanned_)) != std::string::npos; scanned_ = nl + 1) {
    if (!fail_line_.empty()) continue;
    const std::string line = out_.substr(scanned_, nl - scanned_);
    for (const auto& f : fail_fast_)
      if (line.find(f) != std::string::npos) {
        fail_line_ = line;
        break;
      }
  }
  if (tee_ && scanned_ > teed) tee_->append(out_.substr(teed, scanned_ - teed));
}

void ChildProcess::reader_loop(int fd, int pidfd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  // Reads what the pipe holds now; true at end of output.
  auto drain = [&]() -> bool {
    char buf[4096];
    while (true) {
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n > 0) {
        std::lock_guard<std::mutex> l(mu_);
        append_locked(buf, static_cast<size_t>(n));
        cv_.notify_all();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    }
  };
  bool eof = false, reaped = false;
  while (!eof || !reaped) {
    pollfd p[2] = {{eof ? -1 : fd, POLLIN, 0}, {reaped ? -1 : pidfd, POLLIN, 0}};
    // Without a pidfd, look at the process every 20 ms.
    const int r = poll(p, 2, pidfd < 0 && !reaped ? 20 : -1);
    if (r < 0 && errno != EINTR) break;
    if (!eof && (p[0].revents != 0)) eof = drain();
    if (!reaped && (pidfd < 0 || p[1].revents != 0)) {
      int st = 0;
      const pid_t w = waitpid(pid_, &st, WNOHANG);
      if (w == 0 && pidfd >= 0 && p[1].revents != 0) {
        // The pidfd says "exited" but there is nothing to reap yet: poll waitpid from now on
        // rather than spin on a pidfd that stays readable.
        close(pidfd);
        pidfd = -1;
      }
      if (w == pid_ || (w < 0 && errno == ECHILD)) {
        // What it wrote before exiting is in the pipe now: read it before reporting the exit.
        if (!eof) eof = drain();
        std::lock_guard<std::mutex> l(mu_);
        exited_ = true;
        status_ = w != pid_ ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        reaped = true;
        cv_.notify_all();
      }
    }
  }
  close(fd);
  if (pidfd >= 0) close(pidfd);
  std::lock_guard<std::mutex> l(mu_);
  if (tee_ && scanned_ < out_.size()) tee_->append(out_.substr(scanned_) + "\n");
  eof_ = true;
  cv_.notify_all();
}

ChildProcess::~ChildProcess() {
  signal(SIGCONT);
  signal(SIGKILL);
  if (reader_.joinable()) reader_.join();  // reaps the process
}

std::string ChildProcess::describe_exit_locked() const {
  return name_ + " (pid " + std::to_string(pid_) + ") exited with " + describe_status(status_);
}

Status ChildProcess::await_output(const std::string& needle, std::chrono::milliseconds timeout, int count) {
  std::unique_lock<std::mutex> l(mu_);
  const auto found = [&] { return count_of(out_, needle, count) >= static_cast<size_t>(count); };
  cv_.wait_for(l, timeout, [&] { return found() || !fail_line_.empty() || exited_; });
  if (found()) return Status::OK();
  const std::string what = count > 1 ? std::to_string(count) + " x '" + needle + "'" : "'" + needle + "'";
  if (!fail_line_.empty())
    return Aborted(name_ + " (pid " + std::to_string(pid_) + ") printed \"" + fail_line_ + "\" before " + what);
  if (exited_) return FailedPrecondition(describe_exit_locked() + " before printing " + what);
  return DeadlineExceeded(name_ + " (pid " + std::to_string(pid_) + ") printed no " + what + " within " +
                          std::to_string(timeout.count()) + " ms");
}

::testing::AssertionResult ChildProcess::wait_for_output(const std::string& needle, std::chrono::milliseconds timeout,
                                                         int count) {
  const Status st = await_output(needle, timeout, count);
  if (st.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << st;
}

Result<int> ChildProcess::await_exit(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_until(l, deadline, [&] { return exited_ || !fail_line_.empty(); });
  if (!exited_) {
    if (!fail_line_.empty())
      return Aborted(name_ + " (pid " + std::to_string(pid_) + ") printed \"" + fail_line_ + "\"");
    return DeadlineExceeded(name_ + " (pid " + std::to_string(pid_) + ") still runs after " +
                            std::to_string(timeout.count()) + " ms");
  }
  // The rest of the output, from children of the process that still hold it (bounded).
  cv_.wait_until(l, std::max(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(5)),
                 [&] { return eof_; });
  return status_;
}

int ChildProcess::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> l(mu_);
  if (!cv_.wait_until(l, deadline, [&] { return exited_; })) return -1;
  cv_.wait_until(l, std::max(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(5)),
                 [&] { return eof_; });
  return status_;
}

std::string ChildProcess::fail_fast_line() const {
  std::lock_guard<std::mutex> l(mu_);
  return fail_line_;
}

std::string ChildProcess::output() const {
  std::lock_guard<std::mutex> l(mu_);
  return out_;
}

void ChildProcess::signal(int sig) {
  // Under the lock: once reaped, the pid may belong to another process.
  std::lock_guard<std::mutex> l(mu_);
  if (pid_ > 0 && !exited_) ::kill(pid_, sig);
}

bool ChildProcess::wait_stopped(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (true) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (pid_ <= 0 || exited_) return false;
      siginfo_t info{};
      // WNOWAIT: observe the stop without consuming it (the reader still reaps the final exit).
      if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WSTOPPED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == pid_ && info.si_code == CLD_STOPPED)
        return true;
    }
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // polls a kernel state, bounded
  }
}

bool ChildProcess::running() {
  std::lock_guard<std::mutex> l(mu_);
  return !exited_;
}

int free_port() {
  auto p = net::reserve_port_for_process();
  if (!p.ok()) {
    ADD_FAILURE() << "free_port: " << p.status();
    return 0;
  }
  return *p;
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

std::string tf_python() {
  const std::string python = std::string(AF_SOURCE_DIR) + "/.venv-tf/bin/python";
  return access(python.c_str(), X_OK) == 0 ? python : "";
}

double slowdown() {
  const char* v = std::getenv("AF_TEST_SLOWDOWN");
  if (!v || !*v) return 1;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(d >= 1) || d > 20) return 1;
  return d;
}

std::string scaled_secs(double secs) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", secs * slowdown());
  return buf;
}

}  // namespace testing
}  // namespace actorflow
