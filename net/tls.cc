#include "net/tls.h"

#include "core/thread_exits.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/file_read.h"
#include "net/openssl_util.h"
#include "core/logging.h"
#include "net/certs.h"

namespace actorflow {
namespace net {
namespace {

constexpr uint64_t kMaxPemBytes = 1 << 20;


struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* s) const { X509_STORE_CTX_free(s); }
};

Result<X509Ptr> parse_cert(const std::string& pem, const std::string& path) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr x(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!x) {
    ERR_clear_error();
    return InvalidArgument("TLS certificate '" + path + "' holds no PEM certificate");
  }
  return x;
}

std::string common_name(X509* x) {
  if (!x) return "";
  char buf[512] = {0};
  int n = X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// "worker/1" for "worker/1" and "/job:worker/replica:0/task:1"; other names as they are.
std::string canonical_task(const std::string& name) {
  if (name.rfind("/job:", 0) != 0) return name;
  const size_t job_end = name.find('/', 5);
  const std::string job = name.substr(5, job_end == std::string::npos ? std::string::npos : job_end - 5);
  const size_t t = name.find("/task:");
  if (t == std::string::npos) return job + "/0";
  return job + "/" + name.substr(t + 6);
}

bool is_ip_literal(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

void set_nonblocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) ::fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

// ---- the socket BIO -----------------------------------------------------------------------------

// OpenSSL's own socket BIO writes with write(2), which raises SIGPIPE when the peer has gone, and
// sends every TLS record (at most 16 KiB) with its own system call. Every session here reads and
// writes its socket through this BIO instead: recv(2) and send(2) with MSG_NOSIGNAL, retry flags
// as the socket BIO sets them, and, once a Stream turns batching on, records gathered in a
// buffer of up to kBatchBytes that leaves with one send when the Stream flushes (after each
// SSL_write): a 4 MiB tensor then costs 16 sends instead of 256, and the receiver, reading ahead,
// as many wake-ups.
constexpr size_t kBatchBytes = 256 * 1024;
constexpr int kCtrlBatch = 0x7f01;  // BIO_ctrl(b, kCtrlBatch, on, nullptr): batching on/off

struct SockBio {
  int fd = -1;
  bool batch = false;
  std::vector<char> out;  // records not yet sent (batching)
  size_t sent = 0;        // of out
  size_t pending() const { return out.size() - sent; }
};

SockBio* state_of(BIO* b) { return static_cast<SockBio*>(BIO_get_data(b)); }

// Sends what is buffered, without blocking. 1: all sent; 0: the socket is full (retry set);
// -1: the connection failed (errno set).
int send_pending(BIO* b, SockBio* st) {
  while (st->pending() > 0) {
    ssize_t n = ::send(st->fd, st->out.data() + st->sent, st->pending(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      st->sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      BIO_set_retry_write(b);
      return 0;
    }
    return -1;
  }
  st->out.clear();
  st->sent = 0;
  return 1;
}

int nosig_write(BIO* b, const char* data, size_t len, size_t* written) {
  BIO_clear_retry_flags(b);
  SockBio* st = state_of(b);
  // Bytes already buffered leave first, so that nothing is reordered.
  if (st->pending() > 0 && (!st->batch || st->pending() + len > kBatchBytes)) {
    if (send_pending(b, st) != 1) return 0;  // retry flag set, or failed
  }
  if (st->batch) {
    st->out.insert(st->out.end(), data, data + len);
    *written = len;
    return 1;
  }
  for (;;) {
    ssize_t n = ::send(st->fd, data, len, MSG_NOSIGNAL);
    if (n >= 0) {
      *written = static_cast<size_t>(n);
      return 1;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(b);
    return 0;
  }
}

int nosig_read(BIO* b, char* data, size_t len, size_t* got) {
  BIO_clear_retry_flags(b);
  for (;;) {
    ssize_t n = ::recv(state_of(b)->fd, data, len, 0);
    if (n > 0) {
      *got = static_cast<size_t>(n);
      return 1;
    }
    if (n == 0) {
      BIO_set_flags(b, BIO_FLAGS_IN_EOF);
      return 0;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(b);
    return 0;
  }
}

long nosig_ctrl(BIO* b, int cmd, long num, void* ptr) {
  SockBio* st = state_of(b);
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      BIO_clear_retry_flags(b);
      return send_pending(b, st);
    case BIO_CTRL_WPENDING:
      return static_cast<long>(st->pending());
    case BIO_CTRL_EOF:
      return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    case BIO_C_GET_FD:
      if (ptr) *static_cast<int*>(ptr) = st->fd;
      return st->fd;
    case kCtrlBatch:
      st->batch = num != 0;
      return 1;
    default:
      return 0;
  }
}

int nosig_create(BIO* b) {
  BIO_set_data(b, new SockBio());
  BIO_set_init(b, 1);
  return 1;
}

int nosig_destroy(BIO* b) {
  delete state_of(b);
  BIO_set_data(b, nullptr);
  return 1;
}

int nosig_type() {
  static const int type = BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR;
  return type;
}

const BIO_METHOD* nosig_method() {
  static BIO_METHOD* m = [] {
    BIO_METHOD* meth = BIO_meth_new(nosig_type(), "actorflow socket");
    if (!meth) return meth;
    BIO_meth_set_write_ex(meth, nosig_write);
    BIO_meth_set_read_ex(meth, nosig_read);
    BIO_meth_set_ctrl(meth, nosig_ctrl);
    BIO_meth_set_create(meth, nosig_create);
    BIO_meth_set_destroy(meth, nosig_destroy);
    return meth;
  }();
  return m;
}

// Makes `ssl` read and write `fd` through the BIO above. False when OpenSSL is out of memory.
bool attach_socket(SSL* ssl, int fd) {
  const BIO_METHOD* m = nosig_method();
  BIO* b = m ? BIO_new(m) : nullptr;
  if (!b) return false;
  state_of(b)->fd = fd;
  SSL_set_bio(ssl, b, b);  // one reference, owned by ssl for both directions
  return true;
}

}  // namespace

bool tls_bulk_mode(SSL* ssl, bool on) {
  BIO* b = SSL_get_wbio(ssl);
  if (!b || BIO_method_type(b) != nosig_type()) return false;
  SSL_set_read_ahead(ssl, on ? 1 : 0);
  return BIO_ctrl(b, kCtrlBatch, on ? 1 : 0, nullptr) == 1;
}

namespace {

// ---- relays ---------------------------------------------------------------------------------

// Every running relay, so that process exit can end them before OpenSSL's own exit handler
// frees what they use. Never destroyed (relay threads may outlive static destructors).
struct RelayRegistry {
  std::mutex mu;
  std::condition_variable cv;
  std::set<std::pair<int, int>> fds;  // (tcp, app) of each running relay
  int running = 0;
  bool exiting = false;
  // The relay threads by thread id: after `running` drops to 0 they may still be exiting, and
  // OpenSSL's per-thread cleanup must not run beside its exit-time one (core/thread_exits.h).
  ThreadExits threads;
};

RelayRegistry& registry() {
  static RelayRegistry* r = new RelayRegistry();
  return *r;
}

void end_relays_at_exit() {
  RelayRegistry& r = registry();
  std::unique_lock<std::mutex> l(r.mu);
  r.exiting = true;
  for (const auto& p : r.fds) {
    ::shutdown(p.first, SHUT_RDWR);
    ::shutdown(p.second, SHUT_RDWR);
  }
  r.cv.wait_for(l, std::chrono::seconds(2), [&] { return r.running == 0; });
  l.unlock();
  (void)r.threads.await_gone(std::chrono::seconds(2));
}

bool exiting() {
  RelayRegistry& r = registry();
  std::lock_guard<std::mutex> l(r.mu);
  return r.exiting;
}

// Pumps plaintext between `app` (AF_UNIX) and the TLS session on `tcp` until both directions
// have ended. Owns all three.
class Relay {
 public:
  Relay(SSL* ssl, Fd tcp, Fd app, std::string peer)
      : ssl_(ssl), tcp_(std::move(tcp)), app_(std::move(app)), peer_(std::move(peer)), to_net_(kCap), to_app_(kCap) {}
  ~Relay() { SSL_free(ssl_); }

  void run() {
    set_nonblocking(tcp_.get(), true);
    set_nonblocking(app_.get(), true);
    Clock::time_point linger_until{};
    Clock::time_point drain_until{};  // once the plane ended: the bound on sending what is left
    for (;;) {
      bool progress = false;
      if (!pump_app_to_net(&progress) || !pump_net_to_app(&progress)) break;
      // The plane closed its end (seen as EOF, or as a hang-up while the records for the peer fill
      // the buffer and nothing more is read from the plane): what is left must go within a bound.
      if (((app_eof_ && tn_begin_ < tn_end_) || plane_hup_) && drain_until == Clock::time_point())
        drain_until = Clock::now() + kDrainBound;
      if (app_eof_ && tn_begin_ == tn_end_ && !sent_close_) {
        SSL_shutdown(ssl_);  // close_notify; the peer's relay ends its plane's connection
        ::shutdown(tcp_.get(), SHUT_WR);
        sent_close_ = true;
        linger_until = Clock::now() + std::chrono::seconds(5);
      }
      if (net_eof_ && ta_begin_ == ta_end_ && !app_shut_) {
        ::shutdown(app_.get(), SHUT_WR);
        app_shut_ = true;
      }
      if (app_eof_ && net_eof_ && ta_begin_ == ta_end_) break;
      if (progress) continue;
      pollfd p[2] = {{tcp_.get(), 0, 0}, {app_.get(), 0, 0}};
      if (!net_eof_ && ta_end_ < kCap) p[0].events |= POLLIN;
      if (tn_begin_ < tn_end_ || net_wants_write_) p[0].events |= POLLOUT;
      if (!app_eof_ && tn_end_ < kCap) p[1].events |= POLLIN;
      if (ta_begin_ < ta_end_) p[1].events |= POLLOUT;
      if (plane_hup_ && p[1].events == 0) p[1].fd = -1;  // its hang-up is known: poll() would not wait
      int wait_ms = -1;
      if (sent_close_) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(linger_until - Clock::now()).count();
        if (left <= 0) break;  // the peer never closed its side: give up on it
        wait_ms = static_cast<int>(left);
      } else if (drain_until != Clock::time_point()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(drain_until - Clock::now()).count();
        if (left <= 0) {
          // The plane is gone and the peer does not take what is left (a client that stopped
          // reading, whose connection the node closed): drop it and reset the connection, so
          // neither this thread nor the TCP connection waits on the peer.
          if (!exiting()) {
            AF_LOG(WARNING) << "TLS connection with " << peer_ << ": the peer did not take the last "
                            << (tn_end_ - tn_begin_) << " bytes within " << kDrainBound.count()
                            << " ms after the connection was closed; resetting it";
          }
          linger hard{1, 0};
          (void)::setsockopt(tcp_.get(), SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
          break;
        }
        wait_ms = static_cast<int>(left);
      }
      int r = ::poll(p, 2, wait_ms);
      if (r < 0 && errno != EINTR) break;
      if (r > 0 && ((p[0].revents | p[1].revents) & POLLNVAL)) break;
      if (r > 0 && (p[1].revents & (POLLHUP | POLLERR))) plane_hup_ = true;
    }
    ::shutdown(app_.get(), SHUT_RDWR);
    ::shutdown(tcp_.get(), SHUT_RDWR);
  }

  int tcp() const { return tcp_.get(); }
  int app() const { return app_.get(); }

 private:
  static constexpr size_t kCap = 1024 * 1024;
  // After the plane closed its end: how long the peer has to take what is still to be sent.
  static constexpr std::chrono::milliseconds kDrainBound{5000};

  // The plane's bytes into TLS records. False when the relay must end.
  bool pump_app_to_net(bool* progress) {
    if (!app_eof_ && tn_end_ < kCap) {
      ssize_t r = ::read(app_.get(), to_net_.data() + tn_end_, kCap - tn_end_);
      if (r > 0) {
        tn_end_ += static_cast<size_t>(r);
        *progress = true;
      } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        app_eof_ = true;
        *progress = true;
      }
    }
    net_wants_write_ = false;
    while (tn_begin_ < tn_end_) {
      ERR_clear_error();
      int n = SSL_write(ssl_, to_net_.data() + tn_begin_, static_cast<int>(tn_end_ - tn_begin_));
      if (n > 0) {
        tn_begin_ += static_cast<size_t>(n);
        *progress = true;
        continue;
      }
      const int e = SSL_get_error(ssl_, n);
      if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
        net_wants_write_ = e == SSL_ERROR_WANT_WRITE;
        break;
      }
      fail("sending", e);
      return false;
    }
    if (tn_begin_ == tn_end_) tn_begin_ = tn_end_ = 0;
    return true;
  }

  // TLS records into the plane's bytes. False when the relay must end.
  bool pump_net_to_app(bool* progress) {
    while (!net_eof_ && ta_end_ < kCap) {
      ERR_clear_error();
      int n = SSL_read(ssl_, to_app_.data() + ta_end_, static_cast<int>(kCap - ta_end_));
      if (n > 0) {
        ta_end_ += static_cast<size_t>(n);
        *progress = true;
        continue;
      }
      const int e = SSL_get_error(ssl_, n);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) break;
      if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)) {
        net_eof_ = true;  // close_notify, or the TCP connection ended
        *progress = true;
        break;
      }
      fail("receiving", e);
      return false;
    }
    while (ta_begin_ < ta_end_) {
      ssize_t w = ::send(app_.get(), to_app_.data() + ta_begin_, ta_end_ - ta_begin_, MSG_NOSIGNAL);
      if (w > 0) {
        ta_begin_ += static_cast<size_t>(w);
        *progress = true;
        continue;
      }
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
      return false;  // the plane closed its end: nobody left to deliver to
    }
    if (ta_begin_ == ta_end_) ta_begin_ = ta_end_ = 0;
    return true;
  }

  void fail(const char* what, int e) {
    const std::string why = e == SSL_ERROR_SYSCALL ? std::string(std::strerror(errno)) : ssl_errors();
    if (!exiting()) {
      AF_LOG(WARNING) << "TLS connection with " << peer_ << " failed while " << what << ": " << why
                      << " (connection closed)";
    }
  }

  SSL* ssl_;
  Fd tcp_;
  Fd app_;
  std::string peer_;
  std::vector<char> to_net_, to_app_;
  size_t tn_begin_ = 0, tn_end_ = 0, ta_begin_ = 0, ta_end_ = 0;
  bool app_eof_ = false, net_eof_ = false, sent_close_ = false, app_shut_ = false, net_wants_write_ = false;
  bool plane_hup_ = false;  // poll() reported the plane's end closed
};

// Starts a relay thread for `ssl` over `tcp`; returns the plane's end of the socketpair.
Result<Fd> start_relay(SSL* ssl, Fd tcp, const std::string& peer, bool app_nonblocking) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    SSL_free(ssl);
    return Unavailable("TLS connection with " + peer + ": socketpair: " + std::strerror(errno));
  }
  // Large buffers: a tensor crosses the socketpair in few wake-ups.
  int b = 4 << 20;
  for (int fd : sv) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
  }
  Fd plane(sv[0]);
  set_nonblocking(plane.get(), app_nonblocking);
  int one = 1;
  setsockopt(tcp.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto relay = std::make_unique<Relay>(ssl, std::move(tcp), Fd(sv[1]), peer);
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(end_relays_at_exit); });
  RelayRegistry& r = registry();
  {
    std::lock_guard<std::mutex> l(r.mu);
    if (r.exiting) return Unavailable("TLS connection with " + peer + ": the process is exiting");
    ++r.running;
    r.fds.insert({relay->tcp(), relay->app()});
  }
  std::thread([rl = relay.release()] {
    registry().threads.started();
    std::unique_ptr<Relay> self(rl);
    self->run();
    const std::pair<int, int> key{self->tcp(), self->app()};
    RelayRegistry& reg = registry();
    std::lock_guard<std::mutex> l(reg.mu);
    reg.fds.erase(key);
    self.reset();  // closes the descriptors while they are still registered as ours
    reg.threads.finishing();
    --reg.running;
    reg.cv.notify_all();
  }).detach();
  return plane;
}

Status verify_failure(SSL* ssl, const std::string& peer, const std::string& base) {
  const long v = SSL_get_verify_result(ssl);
  std::string why = base;
  if (v != X509_V_OK) why = std::string("its certificate was refused: ") + X509_verify_cert_error_string(v);
  return Unauthenticated("TLS handshake with " + peer + " failed: " + why);
}

}  // namespace

TlsFiles cluster_tls_files(const std::string& dir, const std::string& name) {
  TlsFiles f;
  f.ca = dir + "/ca.crt";
  f.cert = dir + "/" + cert_file_stem(name) + ".crt";
  f.key = dir + "/" + cert_file_stem(name) + ".key";
  return f;
}

// ---- TlsContext --------------------------------------------------------------------------------

namespace {
// PermissionDenied naming `path` when other users may write it (mode o+w): whoever can replace a
// trust file or the directory holding it chooses whom this end trusts.
Status refuse_world_writable(const std::string& path, const char* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::OK();  // reading it reports what is wrong
  if ((st.st_mode & S_IWOTH) == 0) return Status::OK();
  char mode[8];
  std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
  return PermissionDenied(std::string(what) + " '" + path + "' may be written by other users (mode " + mode +
                          "); chmod o-w it");
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}
}  // namespace

Result<std::shared_ptr<const TlsContext>> TlsContext::load(const TlsFiles& files) {
  OPENSSL_init_ssl(OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS, nullptr);
  AF_RETURN_IF_ERROR(refuse_world_writable(dir_of(files.ca), "TLS directory"));
  if (dir_of(files.cert) != dir_of(files.ca))
    AF_RETURN_IF_ERROR(refuse_world_writable(dir_of(files.cert), "TLS directory"));
  AF_RETURN_IF_ERROR(refuse_world_writable(files.ca, "TLS CA certificate"));
  AF_RETURN_IF_ERROR(refuse_world_writable(files.cert, "TLS certificate"));
  AF_ASSIGN_OR_RETURN(std::string ca_pem, read_regular_file(files.ca, kMaxPemBytes, "TLS CA certificate"));
  AF_ASSIGN_OR_RETURN(std::string cert_pem, read_regular_file(files.cert, kMaxPemBytes, "TLS certificate"));
  struct stat st {};
  if (::stat(files.key.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
    return PermissionDenied("TLS key '" + files.key + "' may be read by other users (mode " +
                            std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) +
                            std::to_string(st.st_mode & 7) + "); chmod 600 it");
  AF_ASSIGN_OR_RETURN(std::string key_pem, read_regular_file(files.key, kMaxPemBytes, "TLS key"));
  AF_ASSIGN_OR_RETURN(X509Ptr ca, parse_cert(ca_pem, files.ca));
  AF_ASSIGN_OR_RETURN(X509Ptr cert, parse_cert(cert_pem, files.cert));
  PkeyPtr key;
  {
    std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
    key.reset(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
    OPENSSL_cleanse(&key_pem[0], key_pem.size());
    if (!key) {
      ERR_clear_error();
      return InvalidArgument("TLS key '" + files.key + "' holds no PEM private key");
    }
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("TLS key '" + files.key + "' does not belong to the certificate '" + files.cert + "'");
  }
  {
    std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
    std::unique_ptr<X509_STORE_CTX, StoreCtxFree> vctx(X509_STORE_CTX_new());
    X509_STORE_add_cert(store.get(), ca.get());
    X509_STORE_CTX_init(vctx.get(), store.get(), cert.get(), nullptr);
    if (X509_verify_cert(vctx.get()) != 1) {
      const int err = X509_STORE_CTX_get_error(vctx.get());
      ERR_clear_error();
      return InvalidArgument("TLS certificate '" + files.cert + "' is not valid under the CA '" + files.ca +
                             "': " + X509_verify_cert_error_string(err));
    }
  }
  std::shared_ptr<TlsContext> ctx(new TlsContext());
  ctx->identity_ = common_name(cert.get());
  if (ctx->identity_.empty())
    return InvalidArgument("TLS certificate '" + files.cert + "' has no subject CN naming its task");
  for (int server = 0; server < 2; ++server) {
    SSL_CTX* c = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!c) return Internal("SSL_CTX_new: " + ssl_errors());
    (server ? ctx->server_ : ctx->client_) = c;
    SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION);
    SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    // With read-ahead (data-plane streams in bulk mode, net/stream.h) one recv takes up to this
    // many bytes of records instead of one record's header and then its body.
    SSL_CTX_set_default_read_buffer_len(c, kBatchBytes);
    // A peer that dies (no close_notify) ends the stream as a closed TCP connection does; frames
    // carry their own lengths, so a truncated frame is still detected.
    SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_ciphersuites(c, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
    if (server) SSL_CTX_set_num_tickets(c, 0);  // no post-handshake messages
    if (SSL_CTX_use_certificate(c, cert.get()) != 1 || SSL_CTX_use_PrivateKey(c, key.get()) != 1 ||
        SSL_CTX_check_private_key(c) != 1)
      return InvalidArgument("TLS certificate '" + files.cert + "': " + ssl_errors());
    if (X509_STORE_add_cert(SSL_CTX_get_cert_store(c), ca.get()) != 1)
      return InvalidArgument("TLS CA certificate '" + files.ca + "': " + ssl_errors());
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return std::shared_ptr<const TlsContext>(std::move(ctx));
}

TlsContext::~TlsContext() {
  SSL_CTX_free(server_);
  SSL_CTX_free(client_);
}

namespace {
// True for a CN no task or tool may hold: empty, or a wildcard ("*" anywhere).
bool unusable_name(const std::string& cn) { return cn.empty() || cn.find('*') != std::string::npos; }
}  // namespace

bool certificate_allows(const std::string& cn, const std::string& claimed_task) {
  if (unusable_name(cn)) return false;
  const std::string claimed = canonical_task(claimed_task);
  // Tools: "client" any '_' job but the operator's (_chaos: fault plans), "operator" any '_' job.
  const bool tool = !claimed.empty() && claimed[0] == '_';
  const bool operator_job = claimed.rfind("_chaos/", 0) == 0 || claimed == "_chaos";
  if (cn == "client") return tool && !operator_job;
  if (cn == "operator") return tool;
  return canonical_task(cn) == claimed;
}

bool certificate_is_task(const std::string& cn, const std::string& task) {
  if (unusable_name(cn) || cn == "client" || cn == "operator") return false;
  const std::string named = canonical_task(cn);
  if (named.empty() || named[0] == '_') return false;  // a tool's name is no task's
  return task.empty() || named == canonical_task(task);
}

// ---- client ------------------------------------------------------------------------------------

Result<std::unique_ptr<Stream>> tls_connect(Fd tcp, const TlsContext& ctx, const std::string& host,
                                            const std::string& peer_addr, Clock::time_point deadline,
                                            const std::string& expected_task) {
  SSL* ssl = SSL_new(ctx.client_ctx());
  if (!ssl) return Internal("SSL_new: " + ssl_errors());
  std::unique_ptr<SSL, void (*)(SSL*)> guard(ssl, SSL_free);
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (is_ip_literal(h)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), h.c_str());
  } else {
    SSL_set1_host(ssl, h.c_str());
    SSL_set_tlsext_host_name(ssl, h.c_str());
  }
  if (!attach_socket(ssl, tcp.get())) return Internal("TLS connection with " + peer_addr + ": " + ssl_errors());
  set_nonblocking(tcp.get(), true);
  for (;;) {
    ERR_clear_error();
    int r = SSL_connect(ssl);
    if (r == 1) break;
    const int e = SSL_get_error(ssl, r);
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
      const std::string base =
          e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
              ? std::string("connection closed (is TLS on at both ends?)")
              : ssl_errors();
      Status st = verify_failure(ssl, peer_addr, base);
      AF_LOG(WARNING) << st.message();
      return st;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return DeadlineExceeded("TLS handshake with " + peer_addr + ": no answer in time");
    pollfd p{tcp.get(), static_cast<short>(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
    ::poll(&p, 1, static_cast<int>(left));
  }
  // The host matched; the certificate must also be the task this end dialled (a worker's key on
  // the same host cannot serve as the ps), and never a tool's or a wildcard.
  const std::string cn = common_name(SSL_get0_peer_certificate(ssl));
  if (!certificate_is_task(cn, expected_task)) {
    Status st = Unauthenticated("TLS handshake with " + peer_addr + " failed: its certificate names '" + cn + "', " +
                                (expected_task.empty() ? std::string("which is no task of the cluster")
                                                       : "not the task '" + canonical_task(expected_task) + "'"));
    AF_LOG(WARNING) << st.message();
    return st;
  }
  int one = 1;
  setsockopt(tcp.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return std::make_unique<Stream>(std::move(tcp), guard.release());
}

Result<Fd> tls_relay(SSL* ssl, Fd tcp, const std::string& peer) {
  return start_relay(ssl, std::move(tcp), peer, /*app_nonblocking=*/false);
}

// ---- server ------------------------------------------------------------------------------------

TlsAccept::TlsAccept(const TlsContext& ctx, int fd, std::string peer_addr) : peer_(std::move(peer_addr)) {
  ssl_ = SSL_new(ctx.server_ctx());
  if (!ssl_) {
    want_ = Want::kFailed;
    error_ = Internal("SSL_new: " + ssl_errors());
    return;
  }
  if (!attach_socket(ssl_, fd)) {
    want_ = Want::kFailed;
    error_ = Internal("TLS connection with " + peer_ + ": " + ssl_errors());
  }
}

TlsAccept::~TlsAccept() {
  if (ssl_) SSL_free(ssl_);
}

TlsAccept::Want TlsAccept::step() {
  if (want_ == Want::kDone || want_ == Want::kFailed) return want_;
  ERR_clear_error();
  int r = SSL_accept(ssl_);
  if (r == 1) {
    X509* peer_cert = SSL_get0_peer_certificate(ssl_);
    peer_cn_ = common_name(peer_cert);
    want_ = Want::kDone;
    return want_;
  }
  const int e = SSL_get_error(ssl_, r);
  if (e == SSL_ERROR_WANT_READ) return want_ = Want::kRead;
  if (e == SSL_ERROR_WANT_WRITE) return want_ = Want::kWrite;
  const std::string base = e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
                               ? std::string("connection closed during the TLS handshake")
                               : ssl_errors();
  error_ = verify_failure(ssl_, peer_, base);
  return want_ = Want::kFailed;
}

Result<std::unique_ptr<Stream>> TlsAccept::take_stream(Fd tcp) {
  if (want_ != Want::kDone) return FailedPrecondition("TLS handshake with " + peer_ + " has not completed");
  SSL* s = ssl_;
  ssl_ = nullptr;
  int one = 1;
  setsockopt(tcp.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return std::make_unique<Stream>(std::move(tcp), s);
}

int tls_relays_running() {
  RelayRegistry& r = registry();
  std::lock_guard<std::mutex> l(r.mu);
  return r.running;
}

}  // namespace net
}  // namespace actorflow
