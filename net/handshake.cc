#include "net/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "net/socket.h"
#include "net/stream.h"

namespace actorflow {
namespace net {
namespace {

constexpr uint32_t kHandshakeMagic = 0x53484641;  // "AFHS" little-endian
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr size_t kMaxField = 1024;
constexpr size_t kHelloFixed = 4 + 2 + 1 + 1 + 2 + kNonceBytes;
constexpr size_t kChallengeFixed = 4 + 2 + 1 + 1 + 2 + kNonceBytes;
constexpr size_t kAuthFixed = 4 + kMacBytes + 2;
constexpr size_t kResultBytes = 4 + 1 + 3 + kMacBytes;

enum : uint8_t {
  kOk = 0,
  kBadVersion = 1,
  kBadFingerprint = 2,
  kAuthModeMismatch = 3,
  kMalformed = 4,
  kAuthFailed = 5,
  kWrongPlane = 6,
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

const char* plane_name(Plane p) { return p == Plane::kControl ? "control" : "data"; }

// HMAC-SHA256(secret, label | plane | first | second | version | fingerprint).
Status compute_mac(const std::string& secret, const char* label, Plane plane, const Nonce& first,
                   const Nonce& second, uint16_t version, const std::string& fingerprint, Mac& out) {
  std::vector<unsigned char> msg;
  msg.reserve(96 + fingerprint.size());
  put_bytes(msg, label, std::strlen(label));
  msg.push_back(static_cast<unsigned char>(plane));
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

// A short, non-sensitive rendering of a peer-supplied string for error messages.
std::string printable(const std::string& s) {
  std::string r;
  for (char c : s) r += (c >= 0x20 && c < 0x7f) ? c : '?';
  return r;
}

std::vector<unsigned char> challenge(uint16_t version, uint8_t code, const Nonce& nonce, const std::string& message) {
  std::vector<unsigned char> b;
  put_u32(b, kHandshakeMagic);
  put_u16(b, version);
  b.push_back(code);
  b.push_back(0);
  const std::string m = message.substr(0, kMaxField);
  put_u16(b, static_cast<uint16_t>(m.size()));
  put_bytes(b, nonce.data(), nonce.size());
  put_bytes(b, m.data(), m.size());
  return b;
}

// The client side's I/O on a plain descriptor.
struct FdIo {
  int fd;
  Status write_all(const void* data, size_t n, const std::string& peer) { return net::write_all(fd, data, n, peer); }
  Status read_exact_until(void* data, size_t n, Clock::time_point deadline, const std::string& peer) {
    return net::read_exact_until(fd, data, n, deadline, peer);
  }
};

template <typename Io>
Status client_handshake_on(Io& io, const HandshakeConfig& config, const std::string& peer_addr);

}  // namespace

Status client_handshake(int fd, const HandshakeConfig& config, const std::string& peer_addr) {
  FdIo io{fd};
  return client_handshake_on(io, config, peer_addr);
}

Status client_handshake(Stream& stream, const HandshakeConfig& config, const std::string& peer_addr) {
  return client_handshake_on(stream, config, peer_addr);
}

namespace {

template <typename Io>
Status client_handshake_on(Io& io, const HandshakeConfig& config, const std::string& peer_addr) {
  const auto deadline = Clock::now() + config.timeout;
  const std::string where = std::string(plane_name(config.plane)) + "-plane handshake with " + peer_addr;
  if (config.fingerprint.size() > kMaxField || config.task_name.size() > kMaxField)
    return InvalidArgument(where + ": fingerprint or task name longer than 1024 bytes");
  Nonce client_nonce;
  AF_RETURN_IF_ERROR(random_nonce(client_nonce));

  // HELLO
  std::vector<unsigned char> hello;
  put_u32(hello, kHandshakeMagic);
  put_u16(hello, config.version);
  hello.push_back(config.secret.empty() ? 0 : 1);
  hello.push_back(static_cast<unsigned char>(config.plane));
  put_u16(hello, static_cast<uint16_t>(config.task_name.size()));
  put_bytes(hello, client_nonce.data(), client_nonce.size());
  put_bytes(hello, config.task_name.data(), config.task_name.size());
  AF_RETURN_IF_ERROR(io.write_all(hello.data(), hello.size(), peer_addr).with_prefix(where));

  // CHALLENGE
  unsigned char ch[kChallengeFixed];
  AF_RETURN_IF_ERROR(io.read_exact_until(ch, sizeof ch, deadline, peer_addr).with_prefix(where));
  if (get_u32(ch) != kHandshakeMagic)
    return DataLoss(where + ": the peer is not an actorflow server (bad handshake magic)");
  const uint16_t server_version = get_u16(ch + 4);
  const uint8_t code = ch[6];
  const uint16_t msg_len = get_u16(ch + 8);
  Nonce server_nonce;
  std::memcpy(server_nonce.data(), ch + 10, kNonceBytes);
  if (msg_len > kMaxField) return DataLoss(where + ": malformed challenge (message too long)");
  std::string server_msg(msg_len, '\0');
  if (msg_len)
    AF_RETURN_IF_ERROR(io.read_exact_until(&server_msg[0], msg_len, deadline, peer_addr).with_prefix(where));
  server_msg = printable(server_msg);
  if (server_version != config.version || code == kBadVersion)
    return FailedPrecondition(where + ": protocol version mismatch: this process speaks v" +
                              std::to_string(config.version) + ", the peer speaks v" +
                              std::to_string(server_version));
  switch (code) {
    case kOk: break;
    case kWrongPlane:
      return FailedPrecondition(where + ": the port does not serve the " + plane_name(config.plane) +
                                " plane (" + server_msg + ")");
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
  AF_RETURN_IF_ERROR(compute_mac(config.secret, "actorflow/client", config.plane, server_nonce, client_nonce,
                                 config.version, config.fingerprint, client_mac));
  std::vector<unsigned char> auth;
  put_u32(auth, kHandshakeMagic);
  put_bytes(auth, client_mac.data(), client_mac.size());
  OPENSSL_cleanse(client_mac.data(), client_mac.size());
  put_u16(auth, static_cast<uint16_t>(config.fingerprint.size()));
  put_bytes(auth, config.fingerprint.data(), config.fingerprint.size());
  Status st = io.write_all(auth.data(), auth.size(), peer_addr);
  OPENSSL_cleanse(auth.data(), auth.size());
  AF_RETURN_IF_ERROR(st.with_prefix(where));

  // RESULT
  unsigned char res[kResultBytes];
  st = io.read_exact_until(res, sizeof res, deadline, peer_addr);
  if (!st.ok()) {
    if (st.code() == Code::kUnavailable)
      return Unauthenticated(where + ": the peer closed the connection after our proof (wrong cluster secret?)");
    return st.with_prefix(where);
  }
  if (get_u32(res) != kHandshakeMagic) return DataLoss(where + ": malformed handshake result (bad magic)");
  if (res[4] == kAuthFailed)
    return Unauthenticated(where + ": the peer rejected our proof: the cluster secrets differ");
  if (res[4] != kOk && res[4] != kBadFingerprint)
    return DataLoss(where + ": malformed handshake result (code " + std::to_string(res[4]) + ")");
  Mac expected;
  AF_RETURN_IF_ERROR(compute_mac(config.secret, "actorflow/server", config.plane, client_nonce, server_nonce,
                                 config.version, config.fingerprint, expected));
  const bool good = CRYPTO_memcmp(expected.data(), res + 8, kMacBytes) == 0;
  OPENSSL_cleanse(expected.data(), expected.size());
  if (!good) return Unauthenticated(where + ": the peer failed to prove it knows the cluster secret");
  if (res[4] == kBadFingerprint)
    return FailedPrecondition(where + ": the peer holds a different cluster file (fingerprint mismatch)");
  return Status::OK();
}

}  // namespace

// ---- ServerHandshake ----------------------------------------------------------------------

ServerHandshake::ServerHandshake(const HandshakeConfig& config, std::string peer_addr)
    : config_(config), need_(kHelloFixed) {
  where_ = std::string(plane_name(config.plane)) + "-plane handshake with " + peer_addr;
  in_.reserve(kHelloFixed);
  Nonce n;
  Status st = random_nonce(n);
  if (!st.ok()) {
    fail(st);
    return;
  }
  server_nonce_ = n;
}

ServerHandshake::~ServerHandshake() {
  if (!config_.secret.empty()) OPENSSL_cleanse(&config_.secret[0], config_.secret.size());
  OPENSSL_cleanse(client_mac_.data(), client_mac_.size());
}

size_t ServerHandshake::wanted() const { return state_ == State::kReading ? need_ - in_.size() : 0; }

void ServerHandshake::fail(Status s) {
  state_ = State::kFailed;
  step_ = Step::kEnd;
  error_ = std::move(s);
}

void ServerHandshake::feed(const unsigned char* data, size_t n) {
  if (state_ != State::kReading) return;
  n = std::min(n, wanted());
  in_.insert(in_.end(), data, data + n);
  if (in_.size() == need_) on_message();
}

void ServerHandshake::on_message() {
  const unsigned char* p = in_.data();
  switch (step_) {
    case Step::kHelloFixed: {
      if (get_u32(p) != kHandshakeMagic) {
        fail(DataLoss(where_ + ": not an actorflow client (bad handshake magic)"));
        return;
      }
      const uint16_t version = get_u16(p + 4);
      const uint8_t auth_mode = p[6];
      const uint8_t plane = p[7];
      const uint16_t task_len = get_u16(p + 8);
      std::memcpy(client_nonce_.data(), p + 10, kNonceBytes);
      if (task_len > kMaxField || auth_mode > 1 || plane > 1) {
        out_ = challenge(config_.version, kMalformed, server_nonce_, "malformed hello");
        fail(DataLoss(where_ + ": malformed hello (task length " + std::to_string(task_len) + ", auth mode " +
                      std::to_string(auth_mode) + ", plane " + std::to_string(plane) + ")"));
        return;
      }
      if (version != config_.version) {
        out_ = challenge(config_.version, kBadVersion, server_nonce_, "protocol version mismatch");
        fail(FailedPrecondition(where_ + ": protocol version mismatch: this process speaks v" +
                                std::to_string(config_.version) + ", the peer speaks v" + std::to_string(version)));
        return;
      }
      if (plane != static_cast<uint8_t>(config_.plane)) {
        out_ = challenge(config_.version, kWrongPlane, server_nonce_,
                         std::string("this port serves the ") + plane_name(config_.plane) + " plane");
        fail(FailedPrecondition(where_ + ": the client asked for the " + plane_name(static_cast<Plane>(plane)) +
                                " plane"));
        return;
      }
      const uint8_t our_mode = config_.secret.empty() ? 0 : 1;
      if (auth_mode != our_mode) {
        out_ = challenge(config_.version, kAuthModeMismatch, server_nonce_, "cluster secret configured on one side only");
        fail(Unauthenticated(where_ + ": " +
                             (our_mode ? std::string("the peer has no cluster secret and this process requires one")
                                       : std::string("the peer uses a cluster secret and this process has none"))));
        return;
      }
      in_.clear();
      if (task_len > 0) {
        step_ = Step::kHelloTask;
        need_ = task_len;
        return;
      }
      break;  // no task name: answer now
    }
    case Step::kHelloTask:
      peer_.task_name = printable(std::string(in_.begin(), in_.end()));
      where_ += " (task '" + peer_.task_name + "')";
      in_.clear();
      break;
    case Step::kAuthFixed: {
      if (get_u32(p) != kHandshakeMagic) {
        fail(DataLoss(where_ + ": malformed proof (bad magic)"));
        return;
      }
      std::memcpy(client_mac_.data(), p + 4, kMacBytes);
      const uint16_t fp_len = get_u16(p + 4 + kMacBytes);
      in_.clear();
      if (fp_len > kMaxField) {
        fail(DataLoss(where_ + ": malformed proof (fingerprint length " + std::to_string(fp_len) + ")"));
        return;
      }
      if (fp_len > 0) {
        step_ = Step::kAuthFingerprint;
        need_ = fp_len;
        return;
      }
      [[fallthrough]];
    }
    case Step::kAuthFingerprint: {
      const std::string claimed(in_.begin(), in_.end());
      in_.clear();
      Mac expected;
      Status st = compute_mac(config_.secret, "actorflow/client", config_.plane, server_nonce_, client_nonce_,
                              config_.version, claimed, expected);
      if (!st.ok()) {
        fail(st);
        return;
      }
      const bool good = CRYPTO_memcmp(expected.data(), client_mac_.data(), kMacBytes) == 0;
      OPENSSL_cleanse(expected.data(), expected.size());
      OPENSSL_cleanse(client_mac_.data(), client_mac_.size());
      const bool same_file = good && claimed == config_.fingerprint;
      std::vector<unsigned char> r;
      put_u32(r, kHandshakeMagic);
      r.push_back(!good ? kAuthFailed : same_file ? kOk : kBadFingerprint);
      r.push_back(0);
      r.push_back(0);
      r.push_back(0);
      Mac server_mac{};
      if (good) {
        st = compute_mac(config_.secret, "actorflow/server", config_.plane, client_nonce_, server_nonce_,
                         config_.version, claimed, server_mac);
        if (!st.ok()) {
          fail(st);
          return;
        }
      }
      put_bytes(r, server_mac.data(), server_mac.size());
      OPENSSL_cleanse(server_mac.data(), server_mac.size());
      out_.insert(out_.end(), r.begin(), r.end());
      OPENSSL_cleanse(r.data(), r.size());
      if (!good) {
        fail(Unauthenticated(where_ + ": authentication failed: the peer's proof does not match the cluster secret"));
      } else if (!same_file) {
        fail(FailedPrecondition(where_ + ": the peer holds a different cluster file (fingerprint mismatch)"));
      } else {
        state_ = State::kDone;
        step_ = Step::kEnd;
      }
      return;
    }
    case Step::kEnd:
      return;
  }
  // The hello is complete: send the challenge and wait for the proof.
  out_ = challenge(config_.version, kOk, server_nonce_, "");
  step_ = Step::kAuthFixed;
  need_ = kAuthFixed;
}

Result<PeerIdentity> server_handshake(int fd, const HandshakeConfig& config, const std::string& peer_addr) {
  const auto deadline = Clock::now() + config.timeout;
  ServerHandshake hs(config, peer_addr);
  std::vector<unsigned char> buf;
  for (;;) {
    auto& out = hs.output();
    if (!out.empty()) {
      Status st = write_all(fd, out.data(), out.size(), peer_addr);
      out.clear();
      if (!st.ok() && hs.state() != ServerHandshake::State::kFailed) return st;
    }
    if (hs.state() == ServerHandshake::State::kFailed) return hs.error();
    if (hs.state() == ServerHandshake::State::kDone) return hs.peer();
    buf.resize(hs.wanted());
    AF_RETURN_IF_ERROR(read_exact_until(fd, buf.data(), buf.size(), deadline, peer_addr)
                           .with_prefix(std::string(plane_name(config.plane)) + "-plane handshake with " + peer_addr));
    hs.feed(buf.data(), buf.size());
  }
}

}  // namespace net
}  // namespace actorflow
