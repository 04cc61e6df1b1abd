// One connection of the data plane as a byte stream: plain TCP, or a TLS 1.3 session over TCP
// that the plane's own threads read and write (no relay thread, see net/tls.h for why the control
// plane still needs one).
//
//   plain:  plane threads --recv/sendmsg--> TCP socket (blocking; SO_RCVTIMEO/SO_SNDTIMEO)
//   TLS:    plane threads --SSL_read/SSL_write under one lock--> TCP socket (non-blocking; poll)
//
// The calls mirror recv(2) and a whole-buffer write on a socket with an I/O timeout, so code that
// reads frames is the same for both kinds.
//
// Thread-safety: one thread may read (recv*, buffered, readable_now) while others write
// (write_all, send_now); writers must be serialised by the caller (each batch is written whole),
// as must readers. For TLS an internal lock serialises the SSL calls of the reader and the writer;
// it is never held while a thread waits for the socket. shutdown() and fd() may be called from any
// thread at any time. The destructor must not race with any other call.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"
#include "net/socket.h"

typedef struct ssl_st SSL;

namespace actorflow {
namespace net {

class Stream {
 public:
  // Plain TCP over the connected socket `fd` (owned).
  explicit Stream(Fd fd);
  // A TLS session whose handshake is complete; takes `ssl` (freed by the destructor, after a
  // best-effort close_notify) and `tcp` (its socket, owned; made non-blocking here). Made by
  // net/tls.h (tls_connect_stream, TlsAccept::take_stream).
  Stream(Fd tcp, SSL* ssl);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // The TCP socket (owned by this object; valid for its lifetime).
  int fd() const { return fd_.get(); }
  bool is_tls() const { return ssl_ != nullptr; }

  // For long-lived connections that move large payloads (the data plane): a TLS stream then
  // reads ahead (one recv takes many records) and gathers the records of a write into sends of up
  // to 256 KiB. No effect on plain streams. Call after the handshake, before other threads use
  // the stream.
  void set_bulk(bool on);

  // A blocking read or write that makes no progress for `t` fails (0 = wait forever). Plain
  // streams set SO_RCVTIMEO/SO_SNDTIMEO; TLS streams bound their waits for the socket.
  Status set_io_timeout(std::chrono::milliseconds t);

  // As recv(2) on a blocking socket with the I/O timeout: waits for at least one byte (all `n`
  // when `wait_all`, as MSG_WAITALL; fewer only at end of stream, on a timeout or an error).
  // Returns the bytes read (> 0); 0 at a clean end of stream; -1 with errno set (EAGAIN: the
  // timeout passed with nothing read; EPROTO: a TLS record failed to decrypt or verify; others
  // as recv). The caller owns `buf`.
  ssize_t recv(void* buf, size_t n, bool wait_all);
  // Non-blocking recv: returns at once; -1 with EAGAIN when nothing can be read now.
  ssize_t recv_now(void* buf, size_t n);
  // Non-blocking send of up to `n` bytes: returns the bytes accepted (> 0), or -1 with errno
  // (EAGAIN: nothing fits now). Never raises SIGPIPE.
  ssize_t send_now(const void* buf, size_t n);

  // Writes every byte of iov[0..iovcnt) in order (iov is modified), blocking; small buffers are
  // gathered so that a batch of small frames leaves in one system call (one TLS record).
  // Unavailable naming `peer` on any error or a stall longer than the I/O timeout.
  Status write_all(iovec* iov, int iovcnt, const std::string& peer);
  Status write_all(const void* data, size_t n, const std::string& peer);
  // Reads exactly `n` bytes by `deadline`. Unavailable naming `peer` when the connection closes
  // or fails first; DeadlineExceeded when the deadline passes.
  Status read_exact_until(void* data, size_t n, Clock::time_point deadline, const std::string& peer);

  // True when bytes have already been taken off the socket and wait inside (TLS only): poll()
  // on fd() does not see them, so a reader must check this before it waits for the socket.
  bool buffered() const;
  // True when a read would return at once: buffered(), or the socket is readable now.
  bool readable_now() const;

  // After a read failed with EPROTO: OpenSSL's reason (a record that failed to decrypt or verify,
  // a protocol violation). Empty otherwise; later reads fail the same way. Thread-safe.
  std::string tls_error() const;

  // Shuts the socket down in both directions: blocked and later calls fail or see the end of
  // the stream. Thread-safe; idempotent.
  void shutdown();

  // The stream as one plaintext descriptor for code that can only read sockets (CAF's BASP
  // broker): plain streams give up their socket as it is; TLS streams hand the session to a
  // relay thread (net/tls.h) and return its plaintext end (non-blocking). `peer` names the other
  // end in the relay's logs.
  static Result<Fd> into_fd(std::unique_ptr<Stream> s, const std::string& peer);

 private:
  enum class Wait { kRead, kWrite };
  // Waits (without the lock) until the socket is ready for `w` or `timeout_ms` (-1: forever)
  // passes. True when ready (or woken by an error the next call will report).
  bool wait_for(Wait w, int timeout_ms) const;
  int io_timeout_ms() const;  // -1 when there is no I/O timeout
  // TLS: writes n bytes of p (blocking, bounded by the I/O timeout).
  Status tls_write(const char* p, size_t n, const std::string& peer);
  // TLS: sends the records the socket BIO still holds (bulk mode), blocking.
  Status tls_flush(const std::string& peer);

  void note_failure();  // under ssl_mu_: keeps OpenSSL's reason; the session is unusable from now
  bool failed() const;

  Fd fd_;
  SSL* ssl_ = nullptr;
  std::string tls_error_;  // guarded by ssl_mu_
  mutable std::mutex ssl_mu_;  // serialises calls on ssl_
  std::chrono::milliseconds io_timeout_{0};
};

}  // namespace net
}  // namespace actorflow
