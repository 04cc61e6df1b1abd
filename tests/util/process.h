// Test helpers for multi-process tests: child processes with captured output, free ports,
// temporary directories. RAII: a ChildProcess is SIGKILLed and reaped when destroyed, so no
// test leaves a process behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace actorflow {
namespace testing {

class ChildProcess {
 public:
  // Starts argv[0] (a path) with argv and extra environment variables; stdout and stderr are
  // captured together. Returns nullptr (and an ADD_FAILURE) when fork/exec fails.
  static std::unique_ptr<ChildProcess> start(const std::vector<std::string>& argv,
                                             const std::map<std::string, std::string>& env = {});
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // Blocks until the captured output contains `needle` or the process exits or `timeout`
  // passes. True when found.
  bool wait_for_output(const std::string& needle, std::chrono::milliseconds timeout);
  // Everything captured so far.
  std::string output() const;
  // Sends `sig` (e.g. SIGKILL, SIGSTOP, SIGCONT, SIGTERM).
  void signal(int sig);
  // After signal(SIGSTOP): waits up to `timeout` until every thread of the process has stopped.
  // True when it has.
  bool wait_stopped(std::chrono::milliseconds timeout);
  // Waits up to `timeout` for exit; returns the exit code, 128+signal for a signal, or -1 on
  // timeout.
  int wait(std::chrono::milliseconds timeout);
  bool running();

 private:
  ChildProcess() = default;
  void reader_loop(int fd);
  pid_t pid_ = -1;
  int status_ = -1;
  bool exited_ = false;
  std::thread reader_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string out_;
  bool eof_ = false;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();
// A fresh directory under /tmp, removed (recursively) by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  // Writes `content` to path()/name and returns the full path.
  std::string write(const std::string& name, const std::string& content) const;

 private:
  std::string path_;
};
// Pids of the running processes whose command line contains every one of `needles` (a run's
// unique temporary directory, a "--job ps" flag...), excluding this process. Reads /proc.
std::vector<int> processes_with(const std::vector<std::string>& needles);
// Path of a built binary: AF_BINARY_DIR + "/" + rel (e.g. "actorflow", "samples/remote_matmul").
std::string binary(const std::string& rel);

}  // namespace testing
}  // namespace actorflow
