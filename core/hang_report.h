// The hang report: what a process is doing now, so that a hung job is diagnosed without a
// debugger (`actorflow status --dump`, GET /dump of the metrics endpoint, SIGUSR1 in
// `actorflow node` and the samples). It holds:
//   - the registered waits (core/waits.h), oldest first;
//   - the process's threads: id, name, state and kernel wait channel, from /proc/self/task;
//   - what components report about themselves (DumpReporter): each device actor's steps in
//     flight and what they wait for, its early tensors and last mailbox size; the master's runs
//     in flight; ...
// Docs: docs/architecture/diagnosis.md.
//
// Bounds: at most kMaxReporters reporters (more are not registered), each report cut to
// kMaxReportBytes, at most kMaxThreads threads listed, the whole report cut to kMaxDumpBytes.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"

namespace actorflow {

// A component's part of the hang report, registered while the object lives. Movable, not
// copyable. `report` is called on whatever thread builds a report (the metrics endpoint's
// handler thread, the signal's dump thread), so it must be thread-safe with respect to the
// component (e.g. read atomics or a snapshot under the component's own lock) and return
// quickly. The destructor waits for a call of `report` in progress, so `report` may use what
// its owner holds until then. Thread-safe.
class DumpReporter {
 public:
  static constexpr size_t kMaxReporters = 4096;
  static constexpr size_t kMaxReportBytes = 16 * 1024;

  DumpReporter() = default;
  // Registers `report` under `name` (e.g. "device /job:ps/replica:0/task:0/device:CPU:0").
  DumpReporter(std::string name, std::function<std::string()> report);
  ~DumpReporter();
  DumpReporter(DumpReporter&& o) noexcept;
  DumpReporter& operator=(DumpReporter&& o) noexcept;
  DumpReporter(const DumpReporter&) = delete;
  DumpReporter& operator=(const DumpReporter&) = delete;

  struct Entry;

 private:
  void reset();
  std::shared_ptr<Entry> entry_;
};

// The whole report as text, for task `task` (this process's, e.g. "/job:ps/replica:0/task:0").
// Sections: "== waits", "== threads", "== reporters". At most kMaxDumpBytes. Thread-safe.
constexpr size_t kMaxDumpBytes = 1024 * 1024;
constexpr size_t kMaxThreads = 4096;
std::string hang_report(const std::string& task);

// Writes the hang report to stderr (one log line per report line, after a header) each time
// signal `signo` (SIGUSR1) arrives. The handler only writes a byte to a pipe; a thread of this
// object builds and writes the report. The previous disposition of `signo` is restored by the
// destructor. One per process at a time: install() fails with FailedPrecondition while another
// lives. Errors: Internal naming what failed (pipe, sigaction). Not thread-safe itself.
class DumpOnSignal {
 public:
  static Result<std::unique_ptr<DumpOnSignal>> install(int signo, std::function<std::string()> task);
  ~DumpOnSignal();
  DumpOnSignal(const DumpOnSignal&) = delete;
  DumpOnSignal& operator=(const DumpOnSignal&) = delete;

  // Reports written so far (for tests).
  int reports() const;

 private:
  struct Impl;
  explicit DumpOnSignal(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace actorflow
