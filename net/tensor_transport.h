// The tensor data plane: moves tensors between task processes over TCP without CAF.
//
// Each task process runs one TensorServer (a TCP listener; its port() is advertised to peers over
// the CAF control plane) and one TensorClient (a pool with one connection per peer "host:port").
// A connection starts with the handshake of net/handshake.h (version, cluster fingerprint, mutual
// HMAC authentication with the cluster secret); only then are frames (net/wire.h) accepted: a
// header plus the tensor's raw bytes, written with one writev straight from the tensor's buffer and
// read straight into a freshly allocated tensor. A peer that fails the handshake or sends a bad
// frame has its connection dropped with a log line naming it; nothing it sent is delivered.
//
// Tensors between actors of one process never come here: they pass by reference (the Router's job).
#pragma once

#include <chrono>
#include <cstdint>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "tensor/allocator.h"
#include "tensor/pooling_allocator.h"
#include "tensor/tensor.h"
#include "net/frames.h"
#include "net/handshake.h"
#include "net/wire.h"

namespace actorflow {
namespace net {

class ClientConnection;
class Stream;

// Settings shared by TensorServer and TensorClient. Plain value.
struct TransportOptions {
  std::string cluster_fingerprint;  // both ends must agree (identifies the cluster file)
  std::string secret;               // cluster secret; empty only if every peer has none (loopback)
  std::string task_name;            // this task, e.g. "worker/1"; shown in the peer's logs
  // TLS for every connection (net/tls.h); null = plain TCP. Both ends must agree.
  std::shared_ptr<const TlsContext> tls;
  uint16_t protocol_version = kProtocolVersion;  // only tests change this
  std::chrono::milliseconds handshake_timeout{5000};  // a peer silent for longer is dropped
  std::chrono::milliseconds connect_timeout{5000};    // bound on TCP connect
  // A send or a frame read that makes no progress for this long fails (0 = wait forever). Idle
  // connections between frames are not affected.
  std::chrono::milliseconds io_timeout{60000};
  int socket_buffer_bytes = 0;  // SO_SNDBUF/SO_RCVBUF; 0 keeps the kernel's auto-tuning
  FrameLimits limits;           // receive-side caps (tensor size, key and error length)
  Allocator* allocator = nullptr;  // receive buffers; null = cpu_host_pool() (reuses large buffers); must outlive the tensors
  int max_connections = 1024;   // server: authenticated connections beyond this are refused and logged
  // server: connections still in the handshake at once; at the cap the oldest is closed
  // (net/preauth_listener.h). Unauthenticated connections never get a thread of their own.
  size_t max_pending_handshakes = 64;
};

// Counters of a TensorServer; a snapshot.
struct TensorServerStats {
  int64_t connections_accepted = 0;  // TCP connections accepted
  int64_t handshakes_ok = 0;         // connections that authenticated
  int64_t handshakes_rejected = 0;   // any handshake failure (version, fingerprint, secret, timeout, garbage)
  int64_t auth_failures = 0;         // of those: wrong or one-sided cluster secret
  int64_t frames_received = 0;       // messages delivered to the callback
  int64_t bad_frames = 0;            // authenticated connections dropped for a bad or truncated frame
  int64_t active_connections = 0;    // connections currently open
};

// Listens for peers and delivers their tensors to a callback.
//
// Threading: one acceptor thread that runs every handshake (net/preauth_listener.h), plus one
// reader thread per authenticated connection. `on_tensor` runs on the
// reader thread of the connection the message came from: messages of one connection arrive in the
// order they were sent; messages of different connections may be delivered concurrently, so the
// callback must be thread-safe, and it should return quickly (it blocks that connection). The
// callback owns nothing it is given beyond the call, but may copy the message (the Tensor shares
// its buffer). The callback is never called after the destructor has returned.
// `on_closed`, when given, runs on that same reader thread once the connection has ended (the
// peer closed it, a frame was bad, or the server stops), after its last message was delivered:
// no message with a `reply` channel of that id follows. It gets the id of the connection's
// ReplyChannel (ReplyChannel::id()); same rules as `on_tensor` (thread-safe, quick, no throw
// expected: an exception is caught and logged).
class TensorServer {
 public:
  using Callback = std::function<void(const Frame&)>;
  using ClosedCallback = std::function<void(uint64_t channel_id)>;

  // Binds `bind_host:port` (port 0 = an ephemeral port; see port()) and starts serving.
  // Unavailable when the address cannot be bound; InvalidArgument for a missing `on_tensor`
  // (`on_closed` may be empty).
  static Result<std::unique_ptr<TensorServer>> start(const TransportOptions& options, const std::string& bind_host,
                                                     uint16_t port, Callback on_tensor,
                                                     ClosedCallback on_closed = nullptr);

  // Stops accepting, closes every connection and joins every thread. Waits for running callbacks.
  ~TensorServer();
  TensorServer(const TensorServer&) = delete;
  TensorServer& operator=(const TensorServer&) = delete;

  // The port this server listens on. Thread-safe.
  uint16_t port() const;
  // A snapshot of the counters. Thread-safe.
  TensorServerStats stats() const;
  // Blocks until `pred(stats())` holds or `timeout` passes; returns whether it held. A rejected or
  // dropped connection is counted after its log line is written and its socket shut down.
  // Thread-safe (for tests and monitors).
  bool wait_for_stats(const std::function<bool(const TensorServerStats&)>& pred,
                      std::chrono::milliseconds timeout) const;

  class Impl;

 private:
  explicit TensorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The server end of one accepted, authenticated connection: frames written here travel back to
// the TensorClient that opened it, where only TensorClient::await_replies reads them. Owned by
// the server's connection and by whoever holds a shared_ptr; the socket closes when the last
// owner lets go. Thread-safe: writers are serialised, each batch is written whole.
class ReplyChannel {
 public:
  // Takes ownership of the connected, authenticated `stream` (TensorServer makes these; `peer`
  // names the other end in errors).
  ReplyChannel(std::unique_ptr<Stream> stream, std::string peer);
  ReplyChannel(const ReplyChannel&) = delete;
  ReplyChannel& operator=(const ReplyChannel&) = delete;
  ~ReplyChannel();

  // Writes `msgs` back to the peer, in order, with one system call where the socket allows.
  // InvalidArgument for a bad message (nothing written); Unavailable naming the peer when the
  // connection is closed (the server stopped serving it, or the peer went away) or stalls.
  Status send_batch(const std::vector<Frame>& msgs);
  // A number unique among the channels of this process (never reused). Thread-safe.
  uint64_t id() const { return id_; }
  // The peer as shown in logs ("ip:port (task 'worker/0')").
  const std::string& peer() const { return peer_; }
  // The connection (owned by this object; valid for its lifetime). For the server's reader.
  Stream& stream() { return *stream_; }
  // Fails every later send_batch() (the server stopped reading this connection). Thread-safe.
  void close_for_writes() { closed_.store(true); }

 private:
  std::unique_ptr<Stream> stream_;  // owned: closed by the destructor
  std::string peer_;
  uint64_t id_;
  std::mutex write_mu_;
  std::atomic<bool> closed_{false};
};

// Sends tensors to peers' TensorServers, keeping one authenticated connection per peer.
//
// Thread-safe: any number of threads may call send() concurrently; sends to one peer are
// serialised on its connection (each message is written whole), sends to different peers proceed
// in parallel.
class TensorClient {
 public:
  explicit TensorClient(TransportOptions options);
  // Closes every connection. Precondition: no send() is running.
  ~TensorClient();
  TensorClient(const TensorClient&) = delete;
  TensorClient& operator=(const TensorClient&) = delete;

  // Writes `msg` to the peer at `peer_addr` ("host:port"), connecting and authenticating first if
  // there is no open connection. Blocks until the whole message is in the socket (not until the
  // peer has processed it). A connection found broken is re-established once. A tensor a frame
  // carries (tensor, feed, ret) must be initialised, fully defined and on the host; an error
  // frame's text must not be empty. The caller keeps ownership of msg.
  // Errors name the peer: InvalidArgument (bad message or address), Unavailable (cannot connect,
  // connection lost, stalled), FailedPrecondition (protocol version or cluster file mismatch),
  // Unauthenticated (wrong or one-sided secret, or the peer failed to prove itself).
  Status send(const std::string& peer_addr, const Frame& msg);
  // Writes `msgs` to the peer in this order with one system call where the socket allows (the
  // peer's reader then usually gets them in one read). All or nothing as far as validation goes:
  // a bad message fails the batch before anything is written. Errors as send().
  Status send_batch(const std::string& peer_addr, const std::vector<Frame>& msgs);

  // Closes the pooled connection to `peer_addr`, if any; the next send() reconnects. Thread-safe.
  void disconnect(const std::string& peer_addr);
  // With TLS: connections to `peer_addr` from now on must present `task`'s certificate ("ps/0"
  // or "/job:ps/replica:0/task:0"; net::certificate_is_task). An address never named here may
  // be served by any task's certificate (never a tool's). A changed task closes the pooled
  // connection. Thread-safe.
  void expect_task(const std::string& peer_addr, const std::string& task);
  // Number of open pooled connections. Thread-safe.
  size_t num_connections() const;
  // True when a pooled, authenticated connection to `peer_addr` is open now (so send() will not
  // block on connecting, unless that connection breaks). With `probe` false, only whether one
  // was opened and not found broken yet (no system call). Thread-safe.
  bool is_connected(const std::string& peer_addr, bool probe = true) const;
  // Opens (connects and authenticates) the pooled connection to `peer_addr` unless one is open.
  // Blocks at most about TransportOptions::connect_timeout plus the handshake. Errors as send().
  Status ensure_connected(const std::string& peer_addr);

  // Request/reply on one connection. send_batch_awaiting() is send_batch() that also returns
  // the connection the batch went on; the peer answers on it through the ReplyChannel of the
  // messages it got, and the sender reads the answers with await_replies(). The connection
  // stays pooled (other sends share it); if it is replaced (it broke), replies still owed on
  // the old one are lost and await_replies() on it fails.
  Result<std::shared_ptr<ClientConnection>> send_batch_awaiting(const std::string& peer_addr,
                                                                const std::vector<Frame>& msgs);
  // Reads frames the peer writes back on `conn` and hands each to `on_reply` (on the calling
  // thread), until `done()` holds or `wait` has passed (both OK: the caller checks done()), or
  // the connection fails (Unavailable naming the peer; every later call on `conn` fails too).
  // Polls the socket without sleeping for the first `spin` (a wake-up through the kernel may
  // cost more than a tiny reply). Any number of threads may wait on one connection: one reads
  // at a time (and hands on frames meant for the others' requests: `on_reply` must accept any
  // reply and must not block), the rest sleep until their done() holds or the reader leaves.
  // `done` is called with an internal lock held: it must be a cheap check that takes no locks.
  Status await_replies(ClientConnection& conn, const std::function<void(const Frame&)>& on_reply,
                       const std::function<bool()>& done, std::chrono::microseconds spin,
                       std::chrono::milliseconds wait);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace net
}  // namespace actorflow
