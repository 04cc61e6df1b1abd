// Fatal-signal backtraces: a process that crashes (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT — the
// last is how glibc ends a process on "double free or corruption") first writes one line naming
// its task and the signal, then the stack of the thread that crashed, to stderr; then the signal
// takes its previous effect (a core dump, the exit status "killed by signal N", or the handler an
// embedder installed before). A crash seen once in a CI log or a supervisor's output can then be
// located without a core file: each frame is written as `binary(+offset)` or `lib(symbol+offset)`,
// which `addr2line -f -C -e binary offset` turns into function, file and line for a build of the
// same commit. Docs: docs/architecture/diagnosis.md.
#pragma once

#include <string>

#include "core/status.h"

namespace actorflow {

// Installs the handler for the five signals, process-wide, on an alternate signal stack (so a
// stack overflow is reported too). `who` names the process in the crash line (its task, e.g.
// "/job:worker/replica:0/task:0"); at most 200 bytes are kept. A later call only replaces the
// name (the handlers stay installed once). The handler itself is async-signal-safe except for
// glibc's backtrace(), whose one-time initialisation (loading libgcc_s) this call performs
// beforehand. Errors: Internal naming the failed sigaltstack or sigaction. Thread-safe.
Status install_crash_backtrace(const std::string& who);

}  // namespace actorflow
