// What the control plane's connections carry, per peer, from the kernel's own TCP counters.
//
// The control plane's sockets belong to CAF's BASP broker once authenticated (actors/
// control_plane.h), and CAF 0.17 has no hook that sees its bytes. But the kernel counts every TCP
// connection's traffic (struct tcp_info: tcpi_bytes_sent, tcpi_bytes_received, tcpi_segs_out,
// tcpi_segs_in), and netlink's sock_diag reports it for any socket of this network namespace by
// its inode. So a connection is tracked by its socket's inode when it is handed to BASP, and at
// every metrics render a collector dumps the TCP sockets once, adds each tracked connection's
// growth since the last look to the per-peer counters
//
//   actorflow_control_plane_sent_bytes_total{peer}        actorflow_control_plane_sent_segments_total{peer}
//   actorflow_control_plane_received_bytes_total{peer}    actorflow_control_plane_received_segments_total{peer}
//
// and forgets connections that are gone. Bytes are TCP payload on the wire (with TLS: the
// records, not the plaintext); "segments" stand for messages (BASP's message boundaries are not
// visible outside CAF). What a connection moved between the last render and its close is not
// counted (at most one scrape interval of it).
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "core/status.h"

namespace actorflow {
namespace net {

// The kernel's counters of one TCP connection.
struct TcpCounters {
  uint64_t bytes_sent = 0;      // tcpi_bytes_sent (tcpi_bytes_acked on kernels before 4.19)
  uint64_t bytes_received = 0;  // tcpi_bytes_received
  uint64_t segs_out = 0;        // tcpi_segs_out
  uint64_t segs_in = 0;         // tcpi_segs_in
};

// The inode of socket `fd` (what sock_diag reports as idiag_inode); 0 when fd is not a socket.
uint64_t socket_inode(int fd);

// The counters of this network namespace's TCP sockets (IPv4 and IPv6) whose inode is in
// `inodes`, from one netlink sock_diag dump; sockets not found (closed) are absent. Unavailable
// with the reason when netlink refuses (no NETLINK_SOCK_DIAG).
Result<std::map<uint64_t, TcpCounters>> tcp_counters(const std::set<uint64_t>& inodes);

// The process-wide tracker of the control plane's connections (see the file comment).
class ConnectionTraffic {
 public:
  // The control plane's tracker; registers its collector with Metrics::global() on first use.
  static ConnectionTraffic& control_plane();

  // Tracks TCP socket `fd` as a connection with `peer` (a task name, or host:port when the name is
  // unknown). Call before the socket changes hands; fd stays the caller's.
  void track(int fd, const std::string& peer);
  // One sock_diag dump: adds each tracked connection's growth to its peer's counters and drops
  // the connections that are gone. Runs at every metrics render; callable directly (tests).
  void refresh();
  // Tracked connections still open (for tests).
  size_t tracked() const;

 private:
  ConnectionTraffic() = default;
  struct Conn {
    std::string peer;
    TcpCounters seen;  // what was already counted
  };
  mutable std::mutex mu_;
  std::map<uint64_t, Conn> conns_;  // by socket inode; guarded by mu_
  bool warned_ = false;             // sock_diag unavailable, logged once; guarded by mu_
};

}  // namespace net
}  // namespace actorflow
