// Challenge-response authentication of the control plane (node actor handshake).
//
// Both ends prove they hold the cluster secret without sending it:
//   client -> node : hello(version, fingerprint, client_nonce, client_task)
//   node -> client : (server_nonce, HMAC(secret, "node" | client_nonce | fingerprint | version))
//   client -> node : auth(HMAC(secret, "client" | server_nonce | fingerprint | version))
// The secret never appears in messages or logs. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace actorflow {

// Protocol version of the actorflow wire (control and data plane). Peers must agree.
// 2: NodeInfo carries serves_for (replicated parameter servers).
constexpr uint32_t kProtocolVersion = 2;

// 32 random bytes from the OS CSPRNG (OpenSSL RAND_bytes), hex-encoded.
std::string random_nonce();
// Hex HMAC-SHA256 of `role|nonce|fingerprint|version` under `secret` (empty secret allowed).
std::string auth_proof(const std::string& secret, const std::string& role, const std::string& nonce,
                       const std::string& fingerprint, uint32_t version);
// Constant-time equality of two proofs.
bool proofs_equal(const std::string& a, const std::string& b);

}  // namespace actorflow
