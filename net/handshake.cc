#include "net/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <cstring>
#include <vector>

#include "net/socket.h"

namespace actorflow {
namespace net {
namespace {

constexpr uint32_t kHandshakeMagic = 0x53484641;  // "AFHS" little-endian
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr size_t kMaxField = 1024;
constexpr size_t kHelloFixed = 4 + 2 + 1 + 1 + 2 + 2 + kNonceBytes;
constexpr size_t kChallengeFixed = 4 + 2 + 1 + 1 + 2 + kNonceBytes;
constexpr size_t kAuthBytes = 4 + kMacBytes;
constexpr size_t kResultBytes = 4 + 1 + 3 + kMacBytes;

enum : uint8_t {
  kOk = 0,
  kBadVersion = 1,
  kBadFingerprint = 2,
  kAuthModeMismatch = 3,
  kMalformed = 4,
  kAuthFailed = 5,
};

using Nonce = std::array<unsigned char, kNonceBytes>;
using Mac = std::array<unsigned char, kMacBytes>;

void put_u16(std::vector<unsigned char>& b, uint16_t v) {
  b.push_back(static_cast<unsigned char>(v));
  b.push_back(static_cast<unsigned char>(v >> 8));
}
void put_u32(std::vector<unsigned char>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<unsigned char>(v >> (8 * i)));
}
uint16_t get_u16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t get_u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
void put_bytes(std::vector<unsigned char>& b, const void* p, size_t n) {
  const auto* c = static_cast<const unsigned char*>(p);
  b.insert(b.end(), c, c + n);
}

Status random_nonce(Nonce& n) {
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
    return Internal("OpenSSL RAND_bytes failed to produce a handshake nonce");
  return Status::OK();
}

// HMAC-SHA256(secret, label | first | second | version | fingerprint).
Status compute_mac(const std::string& secret, const char* label, const Nonce& first, const Nonce& second,
                   uint16_t version, const std::string& fingerprint, Mac& out) {
  std::vector<unsigned char> msg;
  msg.reserve(64 + fingerprint.size());
  put_bytes(msg, label, std::strlen(label));
  put_bytes(msg, first.data(), first.size());
  put_bytes(msg, second.data(), second.size());
  put_u16(msg, version);
  put_bytes(msg, fingerprint.data(), fingerprint.size());
  static const unsigned char kEmptyKey[1] = {0};
  const unsigned char* key = secret.empty() ? kEmptyKey : reinterpret_cast<const unsigned char*>(secret.data());
  unsigned int len = 0;
  unsigned char* r = HMAC(EVP_sha256(), key, static_cast<int>(secret.size()), msg.data(), msg.size(),
                          out.data(), &len);
  OPENSSL_cleanse(msg.data(), msg.size());
  if (!r || len != kMacBytes) return Internal("OpenSSL HMAC-SHA256 failed during the handshake");
  return Status::OK();
}

// A short, non-sensitive rendering of a fingerprint for error messages.
std::string printable(const std::string& s) {
  std::string r;
  for (char c : s) r += (c >= 0x20 && c < 0x7f) ? c : '?';
  return r;
}

std::string fp_brief(const std::string& fp) {
  if (fp.size() <= 28) return "'" + printable(fp) + "'";
  return "'" + printable(fp.substr(0, 16)) + "..." + printable(fp.substr(fp.size() - 8)) + "'";
}

Status send_challenge(int fd, uint16_t version, uint8_t code, const Nonce& nonce, const std::string& message,
                      const std::string& peer) {
  std::vector<unsigned char> b;
  put_u32(b, kHandshakeMagic);
  put_u16(b, version);
  b.push_back(code);
  b.push_back(0);
  const std::string m = message.substr(0, kMaxField);
  put_u16(b, static_cast<uint16_t>(m.size()));
  put_bytes(b, nonce.data(), nonce.size());
  put_bytes(b, m.data(), m.size());
  return write_all(fd, b.data(), b.size(), peer);
}

}  // namespace

Status client_handshake(int fd, const HandshakeConfig& config, const std::string& peer_addr) {
  const auto deadline = Clock::now() + config.timeout;
  const std::string where = "handshake with " + peer_addr;
  if (config.fingerprint.size() > kMaxField || config.task_name.size() > kMaxField)
    return InvalidArgument(where + ": fingerprint or task name longer than 1024 bytes");
  Nonce client_nonce;
  AF_RETURN_IF_ERROR(random_nonce(client_nonce));

  // HELLO
  std::vector<unsigned char> hello;
  put_u32(hello, kHandshakeMagic);
  put_u16(hello, config.version);
  hello.push_back(config.secret.empty() ? 0 : 1);
  hello.push_back(0);
  put_u16(hello, static_cast<uint16_t>(config.fingerprint.size()));
  put_u16(hello, static_cast<uint16_t>(config.task_name.size()));
  put_bytes(hello, client_nonce.data(), client_nonce.size());
  put_bytes(hello, config.fingerprint.data(), config.fingerprint.size());
  put_bytes(hello, config.task_name.data(), config.task_name.size());
  AF_RETURN_IF_ERROR(write_all(fd, hello.data(), hello.size(), peer_addr).with_prefix(where));

  // CHALLENGE
  unsigned char ch[kChallengeFixed];
  AF_RETURN_IF_ERROR(read_exact_until(fd, ch, sizeof ch, deadline, peer_addr).with_prefix(where));
  if (get_u32(ch) != kHandshakeMagic)
    return DataLoss(where + ": the peer is not an actorflow data-plane server (bad handshake magic)");
  const uint16_t server_version = get_u16(ch + 4);
  const uint8_t code = ch[6];
  const uint16_t msg_len = get_u16(ch + 8);
  Nonce server_nonce;
  std::memcpy(server_nonce.data(), ch + 10, kNonceBytes);
  if (msg_len > kMaxField) return DataLoss(where + ": malformed challenge (message too long)");
  std::string server_msg(msg_len, '\0');
  if (msg_len)
    AF_RETURN_IF_ERROR(read_exact_until(fd, &server_msg[0], msg_len, deadline, peer_addr).with_prefix(where));
  server_msg = printable(server_msg);
  if (server_version != config.version || code == kBadVersion)
    return FailedPrecondition(where + ": protocol version mismatch: this process speaks v" +
                              std::to_string(config.version) + ", the peer speaks v" +
                              std::to_string(server_version));
  switch (code) {
    case kOk: break;
    case kBadFingerprint:
      return FailedPrecondition(where + ": the peer holds a different cluster file (fingerprint mismatch; ours is " +
                                fp_brief(config.fingerprint) + ")");
    case kAuthModeMismatch:
      return Unauthenticated(where + ": " +
                             (config.secret.empty()
                                  ? std::string("the peer requires a cluster secret and this process has none")
                                  : std::string("this process has a cluster secret and the peer has none")));
    default:
      return DataLoss(where + ": the peer refused the hello (code " + std::to_string(code) + ": " + server_msg + ")");
  }

  // AUTH
  Mac client_mac;
  AF_RETURN_IF_ERROR(compute_mac(config.secret, "actorflow/client", server_nonce, client_nonce, config.version,
                                 config.fingerprint, client_mac));
  std::vector<unsigned char> auth;
  put_u32(auth, kHandshakeMagic);
  put_bytes(auth, client_mac.data(), client_mac.size());
  OPENSSL_cleanse(client_mac.data(), client_mac.size());
  Status st = write_all(fd, auth.data(), auth.size(), peer_addr);
  OPENSSL_cleanse(auth.data(), auth.size());
  AF_RETURN_IF_ERROR(st.with_prefix(where));

  // RESULT
  unsigned char res[kResultBytes];
  st = read_exact_until(fd, res, sizeof res, deadline, peer_addr);
  if (!st.ok()) {
    if (st.code() == Code::kUnavailable)
      return Unauthenticated(where + ": the peer closed the connection after our proof (wrong cluster secret?)");
    return st.with_prefix(where);
  }
  if (get_u32(res) != kHandshakeMagic) return DataLoss(where + ": malformed handshake result (bad magic)");
  if (res[4] == kAuthFailed)
    return Unauthenticated(where + ": the peer rejected our proof: the cluster secrets differ");
  if (res[4] != kOk) return DataLoss(where + ": malformed handshake result (code " + std::to_string(res[4]) + ")");
  Mac expected;
  AF_RETURN_IF_ERROR(compute_mac(config.secret, "actorflow/server", client_nonce, server_nonce, config.version,
                                 config.fingerprint, expected));
  const bool good = CRYPTO_memcmp(expected.data(), res + 8, kMacBytes) == 0;
  OPENSSL_cleanse(expected.data(), expected.size());
  if (!good) return Unauthenticated(where + ": the peer failed to prove it knows the cluster secret");
  return Status::OK();
}

Result<PeerIdentity> server_handshake(int fd, const HandshakeConfig& config, const std::string& peer_addr) {
  const auto deadline = Clock::now() + config.timeout;
  std::string where = "handshake with " + peer_addr;
  Nonce server_nonce;
  AF_RETURN_IF_ERROR(random_nonce(server_nonce));

  // HELLO
  unsigned char h[kHelloFixed];
  AF_RETURN_IF_ERROR(read_exact_until(fd, h, sizeof h, deadline, peer_addr).with_prefix(where));
  if (get_u32(h) != kHandshakeMagic)
    return DataLoss(where + ": not an actorflow data-plane client (bad handshake magic)");
  const uint16_t version = get_u16(h + 4);
  const uint8_t auth_mode = h[6];
  const uint16_t fp_len = get_u16(h + 8);
  const uint16_t task_len = get_u16(h + 10);
  Nonce client_nonce;
  std::memcpy(client_nonce.data(), h + 12, kNonceBytes);
  if (fp_len > kMaxField || task_len > kMaxField || auth_mode > 1) {
    send_challenge(fd, config.version, kMalformed, server_nonce, "malformed hello", peer_addr);
    return DataLoss(where + ": malformed hello (field lengths " + std::to_string(fp_len) + "/" +
                    std::to_string(task_len) + ", auth mode " + std::to_string(auth_mode) + ")");
  }
  std::string fingerprint(fp_len, '\0'), task(task_len, '\0');
  if (fp_len) AF_RETURN_IF_ERROR(read_exact_until(fd, &fingerprint[0], fp_len, deadline, peer_addr).with_prefix(where));
  if (task_len) AF_RETURN_IF_ERROR(read_exact_until(fd, &task[0], task_len, deadline, peer_addr).with_prefix(where));
  PeerIdentity id;
  id.task_name = printable(task);
  where += " (task '" + id.task_name + "')";

  if (version != config.version) {
    send_challenge(fd, config.version, kBadVersion, server_nonce, "protocol version mismatch", peer_addr);
    return FailedPrecondition(where + ": protocol version mismatch: this process speaks v" +
                              std::to_string(config.version) + ", the peer speaks v" + std::to_string(version));
  }
  if (fingerprint != config.fingerprint) {
    send_challenge(fd, config.version, kBadFingerprint, server_nonce, "cluster fingerprint mismatch", peer_addr);
    return FailedPrecondition(where + ": the peer holds a different cluster file (its fingerprint " +
                              fp_brief(fingerprint) + ", ours " + fp_brief(config.fingerprint) + ")");
  }
  const uint8_t our_mode = config.secret.empty() ? 0 : 1;
  if (auth_mode != our_mode) {
    send_challenge(fd, config.version, kAuthModeMismatch, server_nonce, "cluster secret configured on one side only",
                   peer_addr);
    return Unauthenticated(where + ": " +
                           (our_mode ? std::string("the peer has no cluster secret and this process requires one")
                                     : std::string("the peer uses a cluster secret and this process has none")));
  }
  AF_RETURN_IF_ERROR(send_challenge(fd, config.version, kOk, server_nonce, "", peer_addr).with_prefix(where));

  // AUTH
  unsigned char a[kAuthBytes];
  AF_RETURN_IF_ERROR(read_exact_until(fd, a, sizeof a, deadline, peer_addr).with_prefix(where));
  if (get_u32(a) != kHandshakeMagic) return DataLoss(where + ": malformed proof (bad magic)");
  Mac expected;
  AF_RETURN_IF_ERROR(compute_mac(config.secret, "actorflow/client", server_nonce, client_nonce, config.version,
                                 config.fingerprint, expected));
  const bool good = CRYPTO_memcmp(expected.data(), a + 4, kMacBytes) == 0;
  OPENSSL_cleanse(expected.data(), expected.size());
  OPENSSL_cleanse(a, sizeof a);

  // RESULT
  std::vector<unsigned char> r;
  put_u32(r, kHandshakeMagic);
  r.push_back(good ? kOk : kAuthFailed);
  r.push_back(0);
  r.push_back(0);
  r.push_back(0);
  Mac server_mac{};
  if (good)
    AF_RETURN_IF_ERROR(compute_mac(config.secret, "actorflow/server", client_nonce, server_nonce, config.version,
                                   config.fingerprint, server_mac));
  put_bytes(r, server_mac.data(), server_mac.size());
  OPENSSL_cleanse(server_mac.data(), server_mac.size());
  Status st = write_all(fd, r.data(), r.size(), peer_addr);
  OPENSSL_cleanse(r.data(), r.size());
  if (!good) return Unauthenticated(where + ": authentication failed: the peer's proof does not match the cluster secret");
  AF_RETURN_IF_ERROR(st.with_prefix(where));
  return id;
}

}  // namespace net
}  // namespace actorflow
