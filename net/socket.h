// POSIX TCP socket helpers for the tensor data plane: an RAII file descriptor, "host:port"
// parsing, listening and connecting with bounded timeouts, and whole-buffer reads and writes.
//
// Everything here reports errors as Status values naming the peer address; nothing throws and
// nothing raises SIGPIPE (writes use MSG_NOSIGNAL). Functions are thread-safe in the sense that
// distinct descriptors may be used from distinct threads; one descriptor is not synchronised.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace actorflow {
namespace net {

using Clock = std::chrono::steady_clock;

// Owns one file descriptor and closes it on destruction. Move-only. -1 means "none".
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing; returns the descriptor.
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  // Closes the held descriptor (if any) and takes `fd`.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// A parsed "host:port" ("[::1]:2222" for IPv6 literals).
struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// Parses "host:port"; InvalidArgument naming `addr` when the form or port is bad. Port 0 is
// accepted (it means "any free port" when listening).
Result<HostPort> parse_host_port(const std::string& addr);

// Socket tuning applied to every data-plane socket.
struct SocketTuning {
  // SO_SNDBUF / SO_RCVBUF in bytes; 0 leaves the kernel's auto-tuning alone (usually best on
  // Linux, whose tcp_rmem/tcp_wmem maxima exceed what SO_*BUF may request).
  int buffer_bytes = 0;
  // Per-call stall limit for blocking send/recv (SO_SNDTIMEO / SO_RCVTIMEO); 0 = none.
  std::chrono::milliseconds io_timeout{0};
};

// Sets TCP_NODELAY, the buffer sizes and the timeouts of `tuning` on a connected socket.
Status tune_socket(int fd, const SocketTuning& tuning);

// Binds and listens on `host:port` (port 0 picks a free port). Returns the listening socket
// (non-blocking, close-on-exec, SO_REUSEADDR). Unavailable naming the address on failure.
Result<Fd> listen_tcp(const std::string& host, uint16_t port, int backlog = 128);

// The local port a bound socket listens on; 0 on error.
uint16_t local_port(int fd);

// "ip:port" of the remote end of a connected socket, or "<unknown peer>".
std::string peer_name(int fd);

// Connects to `addr` ("host:port"), trying each resolved address until one answers, giving up
// when `timeout` has passed. Returns a blocking, close-on-exec socket. Unavailable naming `addr`
// (refused, unreachable, timed out); InvalidArgument when `addr` cannot be parsed.
Result<Fd> connect_tcp(const std::string& addr, std::chrono::milliseconds timeout);

// Writes all of `iov[0..iovcnt)` (iovcnt <= IOV_MAX) with sendmsg(MSG_NOSIGNAL), retrying on
// partial writes and EINTR. `iov` is modified. Unavailable naming `peer` on any error (broken pipe,
// reset, a stall longer than the socket's SO_SNDTIMEO).
Status write_all(int fd, struct iovec* iov, int iovcnt, const std::string& peer);
// Convenience for one contiguous buffer.
Status write_all(int fd, const void* data, size_t n, const std::string& peer);

// Reads exactly `n` bytes, waiting at most until `deadline`. Unavailable naming `peer` when the
// connection closes first ("closed by peer") or fails; DeadlineExceeded when the deadline passes.
Status read_exact_until(int fd, void* data, size_t n, Clock::time_point deadline,
                        const std::string& peer);

}  // namespace net
}  // namespace actorflow
