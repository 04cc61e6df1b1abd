#include "actors/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <random>

namespace actorflow {
namespace {
std::string hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = d[p[i] >> 4];
    s[2 * i + 1] = d[p[i] & 15];
  }
  return s;
}
}  // namespace

std::string random_nonce() {
  unsigned char buf[32];
  if (RAND_bytes(buf, sizeof buf) != 1) {
    std::random_device rd;
    for (auto& b : buf) b = static_cast<unsigned char>(rd());
  }
  return hex(buf, sizeof buf);
}

std::string auth_proof(const std::string& secret, const std::string& role, const std::string& nonce,
                       const std::string& fingerprint, uint32_t version) {
  const std::string msg = role + "|" + nonce + "|" + fingerprint + "|" + std::to_string(version);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return hex(out, len);
}

bool proofs_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace actorflow
