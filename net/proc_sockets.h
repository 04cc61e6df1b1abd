// Which processes of this host hold TCP connections to which others, from /proc: the
// connections each task of a cluster holds (bench/scale.cc, tests/scale_test.cc).
//
// A socket of process P is found through /proc/P/fd ("socket:[inode]"); an established TCP
// socket of this network namespace is listed with its inode in /proc/net/tcp and /proc/net/tcp6.
// A connection between two of the given processes shows up twice (once per end); its peer is the
// process that owns the socket with the same two endpoints swapped (a local port alone is not
// unique: a listener's accepted sockets share it, and Linux reuses an outgoing port towards
// different destinations).
//
// Thread-safety: a pure function of /proc; may be called from any thread.
#pragma once

#include <sys/types.h>

#include <map>
#include <set>
#include <vector>

#include "core/status.h"

namespace actorflow {
namespace net {

struct ProcessConnections {
  int sockets = 0;          // established TCP sockets the process holds (to anyone)
  std::set<pid_t> peers;    // which of the given processes hold the other end of one of them
  int self_sockets = 0;     // sockets whose other end this same process holds (counted twice)
};

// For each of `pids` (their established TCP connections, as above). A pid that is not running
// (or whose /proc/P/fd cannot be read: another user's process) is NotFound naming it; a missing
// /proc/net/tcp is Unavailable.
Result<std::map<pid_t, ProcessConnections>> tcp_connections(const std::vector<pid_t>& pids);

}  // namespace net
}  // namespace actorflow
