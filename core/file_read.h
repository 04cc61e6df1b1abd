// Reading whole files that a user or another process names (cluster files, secret files, fault
// plans, checkpoints), so that a wrong path can never hang or exhaust the reader.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace actorflow {

// Reads the regular file `path` whole. `what` names its role in errors ("cluster file").
// Never blocks on a FIFO, device or socket (opened with O_NONBLOCK, checked with fstat before any
// read) and refuses them, and directories, with InvalidArgument naming the file and its kind;
// refuses a file larger than `max_bytes` (or that grows past it while read) with
// ResourceExhausted before reading more than max_bytes + 1 bytes. NotFound when it does not
// exist, PermissionDenied when it may not be read, Unavailable for other I/O errors. Thread-safe.
Result<std::string> read_regular_file(const std::string& path, uint64_t max_bytes, const std::string& what);

// The kind of a file mode for messages: "a FIFO", "a character device", "a directory", ...
std::string file_kind(unsigned mode);

}  // namespace actorflow
