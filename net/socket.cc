#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace actorflow {
namespace net {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1000000 ? 1000000 : static_cast<int>(left);
}

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::string sockaddr_text(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = {0};
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "<unknown peer>";
}

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};

Result<std::unique_ptr<addrinfo, AddrInfoDeleter>> resolve(const std::string& host, uint16_t port,
                                                           bool passive, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  std::string port_s = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_s.c_str(), &hints, &res);
  if (rc != 0 || !res)
    return Unavailable("cannot resolve " + what + ": " + gai_strerror(rc));
  return std::unique_ptr<addrinfo, AddrInfoDeleter>(res);
}

}  // namespace

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<HostPort> parse_host_port(const std::string& addr) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon + 1 >= addr.size())
    return InvalidArgument("address '" + addr + "' is not of the form host:port");
  HostPort hp;
  hp.host = addr.substr(0, colon);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']')
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  if (hp.host.empty()) return InvalidArgument("address '" + addr + "' has an empty host");
  const std::string port_s = addr.substr(colon + 1);
  if (port_s.size() > 5 || !std::all_of(port_s.begin(), port_s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return InvalidArgument("address '" + addr + "' has a bad port '" + port_s + "'");
  unsigned long p = std::stoul(port_s);
  if (p > 65535) return InvalidArgument("address '" + addr + "' has a port above 65535");
  hp.port = static_cast<uint16_t>(p);
  return hp;
}

Status tune_socket(int fd, const SocketTuning& tuning) {
  int one = 1;
  int domain = 0;
  socklen_t dl = sizeof domain;
  // TCP only: a TLS connection's plane end is an AF_UNIX socket (net/tls.h).
  const bool tcp = getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dl) != 0 || domain == AF_INET || domain == AF_INET6;
  if (tcp && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    return Internal("setsockopt(TCP_NODELAY): " + errno_text(errno));
  if (tuning.buffer_bytes > 0) {
    int b = tuning.buffer_bytes;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);  // capped by the kernel; best effort
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
  }
  if (tuning.io_timeout.count() > 0) {
    timeval tv = to_timeval(tuning.io_timeout);
    if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0)
      return Internal("setsockopt(SO_SNDTIMEO/SO_RCVTIMEO): " + errno_text(errno));
  }
  return Status::OK();
}

Result<Fd> listen_tcp(const std::string& host, uint16_t port, int backlog) {
  const std::string what = host + ":" + std::to_string(port);
  AF_ASSIGN_OR_RETURN(auto res, resolve(host, port, /*passive=*/true, what));
  std::string last_error = "no usable address";
  for (addrinfo* ai = res.get(); ai; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) {
      last_error = "socket: " + errno_text(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last_error = "bind: " + errno_text(errno);
      continue;
    }
    if (::listen(fd.get(), backlog) != 0) {
      last_error = "listen: " + errno_text(errno);
      continue;
    }
    return fd;
  }
  return Unavailable("cannot listen on " + what + ": " + last_error);
}

uint16_t local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "<unknown peer>";
  return sockaddr_text(reinterpret_cast<sockaddr*>(&ss));
}

Result<Fd> connect_tcp(const std::string& addr, std::chrono::milliseconds timeout) {
  AF_ASSIGN_OR_RETURN(HostPort hp, parse_host_port(addr));
  const auto deadline = Clock::now() + timeout;
  AF_ASSIGN_OR_RETURN(auto res, resolve(hp.host, hp.port, /*passive=*/false, addr));
  std::string last_error = "no usable address";
  for (addrinfo* ai = res.get(); ai; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) {
      last_error = "socket: " + errno_text(errno);
      continue;
    }
    int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno != EINPROGRESS) {
      last_error = errno_text(errno);
      continue;
    }
    if (rc != 0) {
      pollfd p{fd.get(), POLLOUT, 0};
      int pr;
      do {
        pr = ::poll(&p, 1, remaining_ms(deadline));
      } while (pr < 0 && errno == EINTR);
      if (pr == 0) {
        return Unavailable("cannot connect to " + addr + ": timed out after " +
                           std::to_string(timeout.count()) + " ms");
      }
      int err = 0;
      socklen_t len = sizeof err;
      if (pr < 0) err = errno;
      else if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) {
        last_error = errno_text(err);
        continue;
      }
    }
    int flags = fcntl(fd.get(), F_GETFL, 0);
    if (flags < 0 || fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
      return Internal("fcntl on the socket to " + addr + ": " + errno_text(errno));
    return fd;
  }
  return Unavailable("cannot connect to " + addr + ": " + last_error);
}

Status write_all(int fd, struct iovec* iov, int iovcnt, const std::string& peer) {
  while (iovcnt > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(std::min(iovcnt, 1024));  // IOV_MAX on Linux
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return Unavailable("sending to " + peer + " stalled: the peer stopped reading");
      return Unavailable("sending to " + peer + " failed: " + errno_text(errno));
    }
    size_t done = static_cast<size_t>(n);
    while (iovcnt > 0 && done >= iov->iov_len) {
      done -= iov->iov_len;
      ++iov;
      --iovcnt;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + done;
      iov->iov_len -= done;
    }
  }
  return Status::OK();
}

Status write_all(int fd, const void* data, size_t n, const std::string& peer) {
  iovec iov{const_cast<void*>(data), n};
  return write_all(fd, &iov, 1, peer);
}

Status read_exact_until(int fd, void* data, size_t n, Clock::time_point deadline,
                        const std::string& peer) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    int pr = ::poll(&pfd, 1, remaining_ms(deadline));
    if (pr < 0) {
      if (errno == EINTR) continue;
      return Unavailable("waiting for " + peer + " failed: " + errno_text(errno));
    }
    if (pr == 0) return DeadlineExceeded("timed out waiting for " + peer);
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r == 0) return Unavailable("connection closed by " + peer);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return Unavailable("reading from " + peer + " failed: " + errno_text(errno));
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::OK();
}

}  // namespace net
}  // namespace actorflow
