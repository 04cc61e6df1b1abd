// TLS 1.3 with mutual authentication for both planes, below actorflow's own handshake.
//
// Where TLS sits: a connection is TCP, then (when the cluster file turns TLS on) a TLS 1.3
// session in which both ends present a certificate signed by the cluster CA, then the handshake
// of net/handshake.h inside it, then the plane's own traffic (CAF's BASP on the control plane,
// tensor frames on the data plane). Kernel TLS is not available on every Linux (this project's
// VMs have no `tls` ULP), and neither CAF's BASP broker nor the data plane's frame reader can
// read through an SSL object, so each TLS connection is terminated by a relay: a thread that
// owns the TCP socket and the TLS session and pumps plaintext to and from one end of a
// socketpair(AF_UNIX); the other end is what the plane gets. The data plane reads and writes
// its sockets itself (net/stream.h), so it calls SSL_read/SSL_write directly, with no relay: the
// relay's extra socket hops and thread wake-ups cost more than the cipher (docs/benchmarks.md).
// The handshake of net/handshake.h runs over the Stream on both planes; only once it has passed
// does a control-plane connection move to a relay. With TLS off nothing of this file runs.
//
//   control: peer ==TLS records== [TCP fd | relay thread: SSL_read/SSL_write] ==plaintext== [AF_UNIX] BASP
//   data:    peer ==TLS records== [TCP fd | Stream: SSL_read/SSL_write on the plane's threads]
//
// Identity: every certificate names one task in its subject CN ("worker/1", as the cluster file
// writes it; "client" for tools such as `actorflow status`) and its host in subjectAltName.
//   - A client checks that the server's certificate chains to the cluster CA, names the host
//     it dialled (OpenSSL's host/IP check) and is the task it dialled (`certificate_is_task`: a
//     worker's key on the same host cannot serve as the ps);
//   - a server checks that the client's certificate chains to the cluster CA, and, once the
//     client has named its task in the handshake inside TLS, that the certificate is that
//     task's (`certificate_allows`): a worker's key cannot speak as the chief or a ps.
// A refused peer is logged with its address and the reason (unknown CA, other host, other task).
//
// Thread-safety: a TlsContext is immutable after load() and may be shared by any number of
// threads and connections (OpenSSL's SSL_CTX is reference counted and thread-safe for this use).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/status.h"
#include "net/socket.h"
#include "net/stream.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace actorflow {
namespace net {

// Where one end's TLS material lives (PEM files).
struct TlsFiles {
  std::string ca;    // the cluster CA's certificate
  std::string cert;  // this end's certificate, signed by the CA
  std::string key;   // this end's private key (must be mode 0600 or stricter)
};

// The files of `name` ("worker/1", "client") in a cluster's TLS directory, as `actorflow certs`
// lays them out (net/certs.h): DIR/ca.crt, DIR/<stem>.crt, DIR/<stem>.key.
TlsFiles cluster_tls_files(const std::string& dir, const std::string& name);

// The TLS configuration of one end: the CA to trust, and the certificate and key to present.
class TlsContext {
 public:
  // Reads and checks `files`: each a regular file below 1 MiB; the key matches the certificate;
  // the certificate is signed by the CA and currently valid; the key file is not readable by
  // group or others. Errors name the file: NotFound, InvalidArgument (not PEM, key mismatch,
  // not signed by the CA, expired), PermissionDenied (key mode).
  static Result<std::shared_ptr<const TlsContext>> load(const TlsFiles& files);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // The subject CN of this end's certificate ("worker/1", "client").
  const std::string& identity() const { return identity_; }
  // OpenSSL contexts (owned here; TLS 1.3 only, peer certificates required and verified).
  SSL_CTX* server_ctx() const { return server_; }
  SSL_CTX* client_ctx() const { return client_; }

 private:
  TlsContext() = default;
  SSL_CTX* server_ = nullptr;
  SSL_CTX* client_ = nullptr;
  std::string identity_;
};

// True when a peer whose certificate's CN is `cn` may claim to be `claimed_task` in the
// handshake: the CN is the claimed task ("worker/1" and "/job:worker/replica:0/task:1" are the
// same task), or the CN is "client" and the claimed name is a tool's (a job whose name starts
// with '_', such as "/job:_status/replica:0/task:0") other than the operator job "_chaos", or the
// CN is "operator" and the claimed name is any tool's (`actorflow chaos` claims "_chaos", whose
// role may load fault plans: docs/security.md "Roles"). An empty CN or one holding '*' allows
// nothing. Pure, thread-safe.
bool certificate_allows(const std::string& cn, const std::string& claimed_task);

// True when a server whose certificate's CN is `cn` may answer for `task` ("ps/0" or
// "/job:ps/replica:0/task:0"): the CN names exactly that task; with `task` empty (the caller
// dialled an address without knowing its task), any task of the cluster. Never for the tools'
// certificates ("client", "operator", a '_' job), an empty CN or one holding '*'. Pure.
bool certificate_is_task(const std::string& cn, const std::string& task);

// Client side: runs the TLS handshake on the connected socket `tcp` (blocking or not), checking
// that the server's certificate chains to the CA, names `host` and is `expected_task`
// (certificate_is_task; "" = any task of the cluster), bounded by `deadline`, and
// returns the session as a Stream (which owns `tcp`; Stream::into_fd hands it to a relay for
// planes that need a descriptor). Errors name `peer_addr`: Unauthenticated (certificate refused,
// either side), DeadlineExceeded, Unavailable.
Result<std::unique_ptr<Stream>> tls_connect(Fd tcp, const TlsContext& ctx, const std::string& host,
                                            const std::string& peer_addr, Clock::time_point deadline,
                                            const std::string& expected_task);

// Server side of the TLS handshake on an accepted non-blocking socket, driven by the caller's
// poll loop (net/preauth_listener.h): call step() when the socket is ready for what wants()
// says. Not thread-safe (one connection, one driver).
class TlsAccept {
 public:
  enum class Want { kRead, kWrite, kDone, kFailed };
  // `fd` stays owned by the caller until relay().
  TlsAccept(const TlsContext& ctx, int fd, std::string peer_addr);
  ~TlsAccept();
  TlsAccept(const TlsAccept&) = delete;
  TlsAccept& operator=(const TlsAccept&) = delete;

  // Advances the handshake as far as the socket allows.
  Want step();
  Want wants() const { return want_; }
  // Why it failed (kFailed): Unauthenticated naming the peer and OpenSSL's reason.
  const Status& error() const { return error_; }
  // The client certificate's CN (kDone).
  const std::string& peer_cn() const { return peer_cn_; }
  // After kDone: the session over `tcp` (the socket given to the constructor) as a Stream, which
  // owns both. FailedPrecondition before kDone.
  Result<std::unique_ptr<Stream>> take_stream(Fd tcp);

 private:
  SSL* ssl_ = nullptr;
  std::string peer_;
  Want want_ = Want::kRead;
  Status error_;
  std::string peer_cn_;
};

// The relays now running in this process (for tests and status).
int tls_relays_running();

// Internal to net/ (Stream::into_fd): hands the established session `ssl` (owned from here on)
// over `tcp` to a relay thread and returns the plaintext end (a blocking, close-on-exec AF_UNIX
// stream socket; closing it ends the relay and the connection).
Result<Fd> tls_relay(SSL* ssl, Fd tcp, const std::string& peer);
// Internal to net/ (Stream::set_bulk): with `on`, `ssl` reads ahead (one recv takes many records)
// and its records are gathered in a buffer (at most 256 KiB) that leaves when it is full or on
// BIO_flush(SSL_get_wbio(ssl)), which the caller must do after each SSL_write. False when `ssl`
// does not use this file's socket BIO.
bool tls_bulk_mode(SSL* ssl, bool on);

}  // namespace net
}  // namespace actorflow
