// Test helpers for multi-process tests: child processes with captured output whose waits end
// as soon as the run cannot succeed any more, reserved ports, temporary directories. RAII: a
// ChildProcess is SIGKILLed and reaped when destroyed, so no test leaves a process behind.
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

#include <gtest/gtest.h>

#include "core/status.h"

namespace actorflow {
namespace testing {

// Output lines that mean a run cannot succeed any more, so waits on the process end at once
// (see ChildProcess::await_output): `actorflow up` gave up restarting a task ("... giving up on
// it", cli/up.cc), or a task could not listen on its port ("cannot listen", actors/server.cc and
// net/socket.cc: the port was taken).
const std::vector<std::string>& default_fail_fast_lines();

// Output lines of several processes in the order they arrived, as one text: what a single
// pipe shared by them would hold (the processes of one job started separately, e.g. one
// `actorflow up` per host). Thread-safe.
class SharedLog {
 public:
  // Appends whole lines (each ending in '\n').
  void append(const std::string& lines);
  std::string text() const;

 private:
  mutable std::mutex mu_;
  std::string text_;
};

class ChildProcess {
 public:
  // Starts argv[0] (a path) with argv and extra environment variables; stdout and stderr are
  // captured together. A line of output containing one of `fail_fast_lines` makes every wait
  // but wait() end at once with an error (pass {} for a process expected to print one).
  // With `tee`, every complete line of output is also appended to it as it arrives (a last line
  // without '\n' when the output ends).
  // Returns nullptr (and an ADD_FAILURE) when fork/exec fails.
  static std::unique_ptr<ChildProcess> start(const std::vector<std::string>& argv,
                                             const std::map<std::string, std::string>& env = {},
                                             std::vector<std::string> fail_fast_lines = default_fail_fast_lines(),
                                             std::shared_ptr<SharedLog> tee = nullptr);
  // SIGKILLs the process if it still runs, reaps it and waits until its output is closed.
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // Blocks until the captured output contains `needle` at least `count` times: OK. Ends early,
  // at once, with an error saying why: Aborted quoting the fail-fast line the output has (the
  // run cannot succeed any more); FailedPrecondition when the process exited without printing it
  // (how it exited); DeadlineExceeded when `timeout` passed. Thread-safe.
  Status await_output(const std::string& needle, std::chrono::milliseconds timeout, int count = 1);
  // await_output for gtest assertions: success, or failure carrying the error's text, e.g.
  // `ASSERT_TRUE(p->wait_for_output("serving", 20s)) << p->output();`.
  ::testing::AssertionResult wait_for_output(const std::string& needle, std::chrono::milliseconds timeout,
                                             int count = 1);
  // Waits until the process exits and returns its exit code (128+signal for a signal). Ends
  // early with Aborted quoting a fail-fast line the output has while the process still runs, or
  // DeadlineExceeded after `timeout`. Once the process exited, waits a little (bounded) for the
  // rest of its output (of children still holding it).
  Result<int> await_exit(std::chrono::milliseconds timeout);
  // Waits up to `timeout` for exit, whatever the output says; returns the exit code, 128+signal
  // for a signal, or -1 on timeout.
  int wait(std::chrono::milliseconds timeout);
  // The first output line that contained a fail-fast line, or "".
  std::string fail_fast_line() const;
  // Everything captured so far.
  std::string output() const;
  // Sends `sig` (e.g. SIGKILL, SIGSTOP, SIGCONT, SIGTERM) unless the process was reaped.
  void signal(int sig);
  // After signal(SIGSTOP): waits up to `timeout` until every thread of the process has stopped.
  // True when it has.
  bool wait_stopped(std::chrono::milliseconds timeout);
  // False once the process has exited (it is reaped by the reader thread as soon as it exits).
  bool running();

 private:
  ChildProcess() = default;
  // Reads the output until it closes and reaps the process when it exits (pidfd, or polling
  // waitpid where pidfd_open is missing).
  void reader_loop(int fd, int pidfd);
  // Appends `data` and records the first fail-fast line among the complete lines. Holds mu_.
  void append_locked(const char* data, size_t n);
  std::string describe_exit_locked() const;
  pid_t pid_ = -1;
  std::string name_;
  std::vector<std::string> fail_fast_;
  std::thread reader_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int status_ = -1;        // exit code or 128+signal, once exited_
  bool exited_ = false;    // reaped
  std::string out_;
  size_t scanned_ = 0;     // out_[0, scanned_) was checked for fail-fast lines (whole lines)
  std::string fail_line_;  // first fail-fast line seen
  std::shared_ptr<SharedLog> tee_;
  bool eof_ = false;
};

// A TCP port on 127.0.0.1 outside the kernel's ephemeral range, reserved for the rest of this
// test process's life (net::reserve_port_for_process), so no concurrently running test that
// also uses it gets the same port and no outgoing connection takes it. Fails the test (and
// returns 0) when no port can be reserved.
int free_port();
// A fresh directory under /tmp, removed (recursively) by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  // The full path of `name` inside the directory (path()/name); creates nothing.
  std::string file(const std::string& name) const { return path_ + "/" + name; }
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

// The TensorFlow venv's python (<source>/.venv-tf/bin/python, made by bench/tf_venv.sh), or ""
// when there is none.
std::string tf_python();

// How many times slower than a normal build the code under test runs: $AF_TEST_SLOWDOWN (a number
// in [1, 20]; scripts/test-sanitizers.sh sets 4 for ASan + UBSan), 1 when unset or invalid. Tests
// multiply the bounds that stand for "a message was lost" (a training step's timeout in a fault-free
// job) by it, so a sanitized build's slower steps are not taken for lost ones. Thread-safe.
double slowdown();
// `secs` x slowdown(), as a command-line number ("5", "20").
std::string scaled_secs(double secs);

}  // namespace testing
}  // namespace actorflow
