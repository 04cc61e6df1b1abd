// The connection handshake of both planes (the tensor data plane and the CAF control plane):
// protocol version and plane check, mutual challenge-response authentication with the cluster
// secret (HMAC-SHA256), then the cluster-file fingerprint check, which only a peer that proved
// the secret gets an answer to.
//
// Wire exchange (all integers little-endian; the first six bytes of every server message, magic
// and version, are stable across protocol versions so a mismatch is always reported):
//
//   client -> server  HELLO     magic "AFHS" u32, version u16, auth mode u8 (0 none, 1 HMAC),
//                               plane u8 (0 data, 1 control), task length u16,
//                               client nonce[32], task name
//   server -> client  CHALLENGE magic u32, version u16, code u8, 0 u8, message length u16,
//                               server nonce[32], message
//   client -> server  AUTH      magic u32, client MAC[32], fingerprint length u16, fingerprint
//   server -> client  RESULT    magic u32, code u8, 0 u8 x3, server MAC[32]
//
//   client MAC = HMAC-SHA256(secret, "actorflow/client" | plane | server nonce | client nonce |
//                            version | client's fingerprint)
//   server MAC = HMAC-SHA256(secret, "actorflow/server" | plane | client nonce | server nonce |
//                            version | client's fingerprint)
//
// Nonces are 32 random bytes from OpenSSL's RAND_bytes; both bind the answers to this connection
// (a recorded AUTH fails on any other connection), the role labels keep one side's answer from
// being replayed as the other's, and the plane byte keeps a data-plane exchange from opening the
// control plane. The server answers a HELLO the same way whatever fingerprint the client holds
// (the fingerprint travels only in AUTH), and answers a wrong proof with RESULT code "auth failed"
// and no MAC, whatever fingerprint came with it: a peer without the secret learns nothing about
// the cluster file (no fingerprint oracle). A peer with the secret but another cluster file gets
// RESULT "fingerprint mismatch" with a valid server MAC, so the client can trust that answer.
// MACs are compared with CRYPTO_memcmp (constant time). An empty secret is accepted only when
// both ends have none (auth mode 0 on both: loopback clusters; it authenticates nobody). Neither
// the secret nor any MAC ever appears in a message or log line.
//
// The server side is a non-blocking state machine (ServerHandshake) so one thread can drive many
// pre-authentication connections (net/preauth_listener.h); it never reads past the end of the
// handshake, so the bytes that follow it (a BASP handshake on the control plane) stay in the
// socket for whoever takes the connection over.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace actorflow {
namespace net {

class TlsContext;
class Stream;

// The handshake protocol version this build speaks (2: fingerprint checked after the proof,
// plane byte; 3: the data plane's step query and state frames, net/wire.h; 4: a step outcome
// (done frame) carries its status's typed detail; 5: rendezvous keys carry the sender's
// incarnation, device/rendezvous_key.h).
constexpr uint16_t kProtocolVersion = 5;

// Which listener a connection is meant for.
enum class Plane : uint8_t { kData = 0, kControl = 1 };

// What one end brings to a handshake. Plain value; the secret should be wiped by its owner
// (see TensorServer / TensorClient) when no longer needed.
struct HandshakeConfig {
  std::string fingerprint;  // identifies the cluster file; at most 1024 bytes
  std::string secret;       // the cluster secret; empty = none (loopback clusters only)
  std::string task_name;    // this end's task, e.g. "worker/1" (for the peer's logs); <= 1024 bytes
  Plane plane = Plane::kData;
  uint16_t version = kProtocolVersion;  // overridable for tests
  std::chrono::milliseconds timeout{5000};  // bound on the whole exchange
  // TLS (net/tls.h): when set, connections run TLS 1.3 with mutual certificate authentication
  // first and this handshake inside it; the listener also checks that the client's certificate
  // is the task it names. Shared, immutable. Null: plain TCP.
  std::shared_ptr<const TlsContext> tls;
};

// What the server learns about an authenticated client. `task_name` is what the client claims
// (printable characters only); the proof shows it holds the secret, not that it is that task.
struct PeerIdentity {
  std::string task_name;
};

// Runs the client side on a connected blocking socket `fd`. OK once both ends have proven
// knowledge of the secret and agree on version, plane and fingerprint. Reads exactly the
// handshake's bytes. Errors name `peer_addr`: FailedPrecondition (version, plane or fingerprint
// mismatch), Unauthenticated (wrong or one-sided secret, or the server failed to prove itself),
// DeadlineExceeded (no answer within the timeout), Unavailable (connection closed or failed),
// DataLoss (malformed answer).
Status client_handshake(int fd, const HandshakeConfig& config, const std::string& peer_addr);
// The same over a Stream (plain or TLS; net/stream.h), blocking, bounded by config.timeout.
Status client_handshake(Stream& stream, const HandshakeConfig& config, const std::string& peer_addr);

// The server side of one connection's handshake, without I/O: the caller reads at most
// `wanted()` bytes from the socket and hands them to `feed`, and writes whatever `output()`
// holds. Not thread-safe (one connection, one driver). The secret is copied and wiped on
// destruction.
class ServerHandshake {
 public:
  enum class State { kReading, kDone, kFailed };

  ServerHandshake(const HandshakeConfig& config, std::string peer_addr);
  ~ServerHandshake();
  ServerHandshake(const ServerHandshake&) = delete;
  ServerHandshake& operator=(const ServerHandshake&) = delete;

  State state() const { return state_; }
  // Bytes the current message still needs (> 0 only while kReading). Reading no more than this
  // never consumes bytes that follow the handshake.
  size_t wanted() const;
  // Consumes `n` <= wanted() bytes; may produce output and change the state.
  void feed(const unsigned char* data, size_t n);
  // Bytes to send to the client; the driver erases what it wrote. After kFailed it may still hold
  // a refusal worth sending (best effort) before the connection is closed.
  std::vector<unsigned char>& output() { return out_; }
  // The failure (kFailed), naming the peer and, once known, the task it claims.
  const Status& error() const { return error_; }
  // The authenticated client (kDone).
  const PeerIdentity& peer() const { return peer_; }
  // True when the failure was a wrong or missing proof (for counters).
  bool auth_failed() const { return error_.code() == Code::kUnauthenticated; }

 private:
  enum class Step { kHelloFixed, kHelloTask, kAuthFixed, kAuthFingerprint, kEnd };
  void on_message();
  void fail(Status s);

  HandshakeConfig config_;
  std::string where_;
  Step step_ = Step::kHelloFixed;
  State state_ = State::kReading;
  std::vector<unsigned char> in_;
  size_t need_;
  std::vector<unsigned char> out_;
  std::array<unsigned char, 32> server_nonce_{};
  std::array<unsigned char, 32> client_nonce_{};
  std::array<unsigned char, 32> client_mac_{};
  PeerIdentity peer_;
  Status error_;
};

// Runs the server side on an accepted blocking socket `fd` (ServerHandshake driven with
// blocking reads and writes, bounded by config.timeout). Returns the client's identity once it
// has proven itself and has been sent the server's proof. Errors as for client_handshake, naming
// `peer_addr` (and the client's task once known). The caller closes the socket on error.
Result<PeerIdentity> server_handshake(int fd, const HandshakeConfig& config, const std::string& peer_addr);

}  // namespace net
}  // namespace actorflow
