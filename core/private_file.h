// Writing files that hold secrets (TLS keys, Kubernetes Secrets, login tokens) so that no other
// user can read them at any moment, not only once the writer is done.
#pragma once

#include <string>

#include "core/status.h"

namespace actorflow {

// Writes `data` to `path` so that it is never readable by group or others: into a temporary file
// in the same directory created with mode 0600 (mkostemp: 0600 from its creation on, whatever
// the umask, and never chmod-ed afterwards), written whole and fsync'ed, then moved to `path`
// (rename, or with `overwrite` false link + unlink, so an existing `path` is never replaced:
// AlreadyExists naming it). A symbolic link or file at `path` is replaced, never written
// through, and keeps nothing of its old mode. Errors name `path`: PermissionDenied (EACCES,
// EPERM), AlreadyExists, Unavailable (other I/O errors); the temporary file is removed on every
// error. The caller owns nothing afterwards. Thread-safe (distinct temporary names).
Status write_private_file(const std::string& path, const std::string& data, bool overwrite = true);

}  // namespace actorflow
