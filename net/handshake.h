// The data plane's connection handshake: protocol version and cluster-file fingerprint check,
// then mutual challenge-response authentication with the cluster secret (HMAC-SHA256).
//
// Wire exchange (all integers little-endian; the first six bytes of every server message,
// magic and version, are stable across protocol versions so a mismatch is always reported):
//
//   client -> server  HELLO     magic "AFHS" u32, version u16, auth mode u8 (0 none, 1 HMAC),
//                               0 u8, fingerprint length u16, task length u16, client nonce[32],
//                               fingerprint, task name
//   server -> client  CHALLENGE magic u32, version u16, code u8, 0 u8, message length u16,
//                               server nonce[32], message
//   client -> server  AUTH      magic u32, client MAC[32]
//   server -> client  RESULT    magic u32, code u8, 0 u8 x3, server MAC[32]
//
//   client MAC = HMAC-SHA256(secret, "actorflow/client" | server nonce | client nonce | version | fingerprint)
//   server MAC = HMAC-SHA256(secret, "actorflow/server" | client nonce | server nonce | version | fingerprint)
//
// Nonces are 32 random bytes from OpenSSL's RAND_bytes. The role labels keep one side's answer
// from being replayed as the other's; both nonces bind the answers to this connection. The server
// reveals its MAC only after the client proved itself, and the client sends nothing else until the
// server proved itself. MACs are compared with CRYPTO_memcmp (constant time). An empty secret is
// accepted only when both ends have none (auth mode 0 on both); the fingerprint and version are
// still checked. Neither the secret nor any MAC ever appears in a message or log line.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace actorflow {
namespace net {

// The data-plane protocol version this build speaks.
constexpr uint16_t kProtocolVersion = 1;

// What one end brings to a handshake. Plain value; the secret should be wiped by its owner
// (see TensorServer / TensorClient) when no longer needed.
struct HandshakeConfig {
  std::string fingerprint;  // identifies the cluster file; at most 1024 bytes
  std::string secret;       // the cluster secret; empty = none (loopback clusters only)
  std::string task_name;    // this end's task, e.g. "worker/1" (for the peer's logs); <= 1024 bytes
  uint16_t version = kProtocolVersion;  // overridable for tests
  std::chrono::milliseconds timeout{5000};  // bound on the whole exchange
};

// What the server learns about an authenticated client.
struct PeerIdentity {
  std::string task_name;
};

// Runs the client side on a connected blocking socket `fd`. OK once both ends have proven
// knowledge of the secret and agree on version and fingerprint. Errors name `peer_addr`:
// FailedPrecondition (version or fingerprint mismatch), Unauthenticated (wrong or one-sided
// secret, or the server failed to prove itself), DeadlineExceeded (no answer within the timeout),
// Unavailable (connection closed or failed), DataLoss (malformed answer).
Status client_handshake(int fd, const HandshakeConfig& config, const std::string& peer_addr);

// Runs the server side on an accepted blocking socket `fd`. Returns the client's identity once it
// has proven itself and has been sent the server's proof. Errors as for client_handshake, naming
// `peer_addr` (and the client's task once known). The caller closes the socket on error.
Result<PeerIdentity> server_handshake(int fd, const HandshakeConfig& config, const std::string& peer_addr);

}  // namespace net
}  // namespace actorflow
