#include "net/stream.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "net/openssl_util.h"
#include "net/tls.h"

namespace actorflow {
namespace net {
namespace {

// Plaintext handed to one SSL_write: large enough that a big tensor costs few lock round trips,
// small enough that a reader waiting for the lock waits well under a millisecond.
constexpr size_t kWriteChunk = 256 * 1024;
// Buffers below this are gathered into one record with their neighbours.
constexpr size_t kGather = 64 * 1024;

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, left));
}

}  // namespace

Stream::Stream(Fd fd) : fd_(std::move(fd)) {}

Stream::Stream(Fd tcp, SSL* ssl) : fd_(std::move(tcp)), ssl_(ssl) { set_nonblocking(fd_.get()); }

Stream::~Stream() {
  if (ssl_) {
    // close_notify, best effort: the socket is non-blocking and the peer may be gone.
    ERR_clear_error();
    tls_bulk_mode(ssl_, false);
    SSL_shutdown(ssl_);
    ERR_clear_error();
    SSL_free(ssl_);
  }
}

void Stream::set_bulk(bool on) {
  if (ssl_) tls_bulk_mode(ssl_, on);
}

Status Stream::set_io_timeout(std::chrono::milliseconds t) {
  io_timeout_ = t;
  if (ssl_) return Status::OK();
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  if (setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
      setsockopt(fd_.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)
    return Internal(std::string("setting the socket's I/O timeout: ") + std::strerror(errno));
  return Status::OK();
}

int Stream::io_timeout_ms() const {
  return io_timeout_.count() > 0 ? static_cast<int>(io_timeout_.count()) : -1;
}

bool Stream::wait_for(Wait w, int timeout_ms) const {
  pollfd p{fd_.get(), static_cast<short>(w == Wait::kRead ? POLLIN : POLLOUT), 0};
  for (;;) {
    int r = ::poll(&p, 1, timeout_ms);
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // the next call reports the socket's error
  }
}

ssize_t Stream::recv(void* buf, size_t n, bool wait_all) {
  if (!ssl_) return ::recv(fd_.get(), buf, n, wait_all ? MSG_WAITALL : 0);
  char* out = static_cast<char*>(buf);
  size_t got = 0;
  if (failed()) {
    errno = EPROTO;
    return -1;
  }
  while (got < n) {
    int e = SSL_ERROR_NONE, saved_errno = 0;
    {
      std::lock_guard<std::mutex> l(ssl_mu_);
      ERR_clear_error();
      errno = 0;
      size_t k = 0;
      if (SSL_read_ex(ssl_, out + got, n - got, &k) == 1) {
        got += k;
        if (!wait_all) break;
        continue;
      }
      saved_errno = errno;
      e = SSL_get_error(ssl_, 0);
      if (e == SSL_ERROR_SSL) note_failure();
      ERR_clear_error();
    }
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      if (wait_for(e == SSL_ERROR_WANT_READ ? Wait::kRead : Wait::kWrite, io_timeout_ms())) continue;
      if (got > 0) break;
      errno = EAGAIN;
      return -1;
    }
    if (got > 0) break;
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && saved_errno == 0)) return 0;  // end of stream
    errno = e == SSL_ERROR_SYSCALL ? saved_errno : EPROTO;
    return -1;
  }
  return static_cast<ssize_t>(got);
}

ssize_t Stream::recv_now(void* buf, size_t n) {
  if (!ssl_) return ::recv(fd_.get(), buf, n, MSG_DONTWAIT);
  std::lock_guard<std::mutex> l(ssl_mu_);
  if (!tls_error_.empty()) {
    errno = EPROTO;
    return -1;
  }
  ERR_clear_error();
  errno = 0;
  size_t k = 0;
  if (SSL_read_ex(ssl_, buf, n, &k) == 1) return static_cast<ssize_t>(k);
  const int saved_errno = errno;
  const int e = SSL_get_error(ssl_, 0);
  if (e == SSL_ERROR_SSL) note_failure();
  ERR_clear_error();
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    errno = EAGAIN;
    return -1;
  }
  if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && saved_errno == 0)) return 0;
  errno = e == SSL_ERROR_SYSCALL ? saved_errno : EPROTO;
  return -1;
}

ssize_t Stream::send_now(const void* buf, size_t n) {
  if (!ssl_) return ::send(fd_.get(), buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  std::lock_guard<std::mutex> l(ssl_mu_);
  ERR_clear_error();
  errno = 0;
  size_t w = 0;
  if (SSL_write_ex(ssl_, buf, n, &w) == 1) return static_cast<ssize_t>(w);
  const int saved_errno = errno;
  const int e = SSL_get_error(ssl_, 0);
  ERR_clear_error();
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    errno = EAGAIN;
    return -1;
  }
  errno = e == SSL_ERROR_SYSCALL && saved_errno != 0 ? saved_errno : EPIPE;
  return -1;
}

Status Stream::tls_write(const char* p, size_t n, const std::string& peer) {
  while (n > 0) {
    // After a WANT_* the retry passes the same buffer and length, as OpenSSL requires.
    const size_t chunk = std::min(n, kWriteChunk);
    int e = SSL_ERROR_NONE, saved_errno = 0;
    std::string why;
    {
      std::lock_guard<std::mutex> l(ssl_mu_);
      ERR_clear_error();
      errno = 0;
      size_t w = 0;
      if (SSL_write_ex(ssl_, p, chunk, &w) == 1) {
        p += w;
        n -= w;
        continue;
      }
      saved_errno = errno;
      e = SSL_get_error(ssl_, 0);
      if (e == SSL_ERROR_SSL) why = ssl_errors();
      ERR_clear_error();
    }
    if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
      if (wait_for(e == SSL_ERROR_WANT_WRITE ? Wait::kWrite : Wait::kRead, io_timeout_ms())) continue;
      return Unavailable("sending to " + peer + " stalled: the peer stopped reading");
    }
    if (why.empty()) why = saved_errno != 0 ? std::strerror(saved_errno) : "the connection was closed";
    return Unavailable("sending to " + peer + " failed: " + why);
  }
  return Status::OK();
}

Status Stream::write_all(iovec* iov, int iovcnt, const std::string& peer) {
  if (!ssl_) return net::write_all(fd_.get(), iov, iovcnt, peer);
  // Small buffers (frame headers, small tensors) travel together in one record; large ones are
  // encrypted straight from where they lie.
  thread_local std::vector<char> staging;
  staging.clear();
  for (int i = 0; i < iovcnt; ++i) {
    const char* base = static_cast<const char*>(iov[i].iov_base);
    const size_t len = iov[i].iov_len;
    if (len < kGather && staging.size() + len <= kGather) {
      staging.insert(staging.end(), base, base + len);
      continue;
    }
    if (!staging.empty()) {
      AF_RETURN_IF_ERROR(tls_write(staging.data(), staging.size(), peer));
      staging.clear();
    }
    if (len < kGather) {
      staging.insert(staging.end(), base, base + len);
    } else {
      AF_RETURN_IF_ERROR(tls_write(base, len, peer));
    }
  }
  if (!staging.empty()) AF_RETURN_IF_ERROR(tls_write(staging.data(), staging.size(), peer));
  if (staging.capacity() > 4 * kGather) std::vector<char>().swap(staging);
  return tls_flush(peer);
}

Status Stream::tls_flush(const std::string& peer) {
  for (;;) {
    int r;
    {
      std::lock_guard<std::mutex> l(ssl_mu_);
      BIO* b = SSL_get_wbio(ssl_);
      if (!b) return Status::OK();
      errno = 0;
      r = BIO_flush(b);
      if (r == 1) return Status::OK();
      if (!BIO_should_retry(b))
        return Unavailable("sending to " + peer + " failed: " +
                           (errno != 0 ? std::string(std::strerror(errno)) : std::string("the connection was closed")));
    }
    if (!wait_for(Wait::kWrite, io_timeout_ms()))
      return Unavailable("sending to " + peer + " stalled: the peer stopped reading");
  }
}

Status Stream::write_all(const void* data, size_t n, const std::string& peer) {
  iovec iov{const_cast<void*>(data), n};
  return write_all(&iov, 1, peer);
}

Status Stream::read_exact_until(void* data, size_t n, Clock::time_point deadline, const std::string& peer) {
  if (!ssl_) return net::read_exact_until(fd_.get(), data, n, deadline, peer);
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = recv_now(p, n);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return Unavailable("connection closed by " + peer);
    if (errno != EAGAIN && errno != EINTR)
      return Unavailable("reading from " + peer + " failed: " + std::strerror(errno));
    if (Clock::now() >= deadline) return DeadlineExceeded("timed out waiting for " + peer);
    if (!wait_for(Wait::kRead, std::max(1, ms_until(deadline))) && Clock::now() >= deadline)
      return DeadlineExceeded("timed out waiting for " + peer);
  }
  return Status::OK();
}

void Stream::note_failure() {
  tls_error_ = ssl_errors();
}

bool Stream::failed() const {
  std::lock_guard<std::mutex> l(ssl_mu_);
  return !tls_error_.empty();
}

std::string Stream::tls_error() const {
  std::lock_guard<std::mutex> l(ssl_mu_);
  return tls_error_;
}

bool Stream::buffered() const {
  if (!ssl_) return false;
  std::lock_guard<std::mutex> l(ssl_mu_);
  return SSL_has_pending(ssl_) == 1;
}

bool Stream::readable_now() const {
  if (buffered()) return true;
  pollfd p{fd_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

void Stream::shutdown() { ::shutdown(fd_.get(), SHUT_RDWR); }

Result<Fd> Stream::into_fd(std::unique_ptr<Stream> s, const std::string& peer) {
  if (!s) return InvalidArgument("no stream");
  if (!s->ssl_) return std::move(s->fd_);
  SSL* ssl = s->ssl_;
  s->ssl_ = nullptr;
  tls_bulk_mode(ssl, false);  // the relay writes records as they come
  return tls_relay(ssl, std::move(s->fd_), peer);
}

}  // namespace net
}  // namespace actorflow
