#include "net/tensor_transport.h"

#include <openssl/crypto.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/metrics.h"
#include "core/cpu_relax.h"
#include "core/logging.h"
#include "net/preauth_listener.h"
#include "net/socket.h"
#include "net/stream.h"
#include "net/tls.h"

namespace actorflow {
namespace net {
namespace {

HandshakeConfig handshake_config(const TransportOptions& o) {
  HandshakeConfig c;
  c.fingerprint = o.cluster_fingerprint;
  c.secret = o.secret;
  c.task_name = o.task_name;
  c.version = o.protocol_version;
  c.timeout = o.handshake_timeout;
  c.tls = o.tls;
  return c;
}

void wipe(std::string& s) {
  if (!s.empty()) OPENSSL_cleanse(&s[0], s.size());
  s.clear();
}

// Buffered reader over a Stream whose I/O timeout bounds each recv. Small reads are served from
// a 64 KiB buffer (one recv usually brings a whole small frame); large payloads are received
// straight into the destination (MSG_WAITALL on plain sockets).
class FrameReader {
 public:
  FrameReader(Stream& stream, std::string peer, const std::atomic<bool>* stopping)
      : stream_(stream), peer_(std::move(peer)), stopping_(stopping), buf_(new unsigned char[kCap]) {}

  // Reads exactly n bytes into dst. `frame_started` false means we are between frames: then a
  // receive timeout just keeps waiting and a clean close yields Cancelled("eof").
  //
  // The socket's low-water mark is 1 whenever this returns: a raised mark also governs poll()
  // (POLLIN only once that many bytes are queued), so a mark left raised after a large payload
  // hid the small frame behind it (a step's kDone after its fetched tensor) from whoever polls
  // the socket next (ClientConnection::lead), until its wait ran out.
  Status read(void* dst, size_t n, bool frame_started) {
    Status st = read_raw(dst, n, frame_started);
    if (lowat_ != 1) set_lowat(1);
    return st;
  }

  // True when bytes received earlier wait in the buffer.
  bool buffered() const { return pos_ < end_; }

  // Discards n bytes.
  Status skip(size_t n) {
    unsigned char scratch[4096];
    while (n > 0) {
      size_t k = std::min(n, sizeof scratch);
      AF_RETURN_IF_ERROR(read(scratch, k, true));
      n -= k;
    }
    return Status::OK();
  }

 private:
  // read() without restoring the low-water mark.
  Status read_raw(void* dst, size_t n, bool frame_started) {
    auto* out = static_cast<unsigned char*>(dst);
    while (n > 0) {
      if (pos_ < end_) {
        size_t k = std::min(n, end_ - pos_);
        std::memcpy(out, buf_.get() + pos_, k);
        pos_ += k;
        out += k;
        n -= k;
        frame_started = true;
        continue;
      }
      if (n >= kCap / 2) {
        // A large payload on a plain socket: woken only once a good part of it is there (SO_RCVLOWAT,
        // never more than what is still to come, or the last part would never wake the reader),
        // instead of for every segment: fewer wake-ups and context switches per megabyte.
        const bool lowat = !stream_.is_tls() && n >= kLowatMin;
        if (lowat) set_lowat(std::min(n, kLowat));
        else if (lowat_ != 1) set_lowat(1);
        ssize_t r = stream_.recv(out, n, /*wait_all=*/!lowat);
        AF_RETURN_IF_ERROR(check(r, frame_started));
        if (r > 0) {
          out += r;
          n -= static_cast<size_t>(r);
          frame_started = true;
        }
        continue;
      }
      if (lowat_ != 1) set_lowat(1);
      ssize_t r = stream_.recv(buf_.get(), kCap, /*wait_all=*/false);
      AF_RETURN_IF_ERROR(check(r, frame_started));
      if (r > 0) {
        pos_ = 0;
        end_ = static_cast<size_t>(r);
      }
    }
    return Status::OK();
  }

  static constexpr size_t kCap = 64 * 1024;
  static constexpr size_t kLowatMin = 1 << 20;  // payloads from this size wake the reader in parts of
  static constexpr size_t kLowat = 512 * 1024;  // this size

  // SO_RCVLOWAT of the plain socket (a failure leaves the reader waking per segment, as before).
  void set_lowat(size_t v) {
    int x = static_cast<int>(v);
    if (::setsockopt(stream_.fd(), SOL_SOCKET, SO_RCVLOWAT, &x, sizeof x) == 0) lowat_ = v;
  }
  size_t lowat_ = 1;  // the socket's SO_RCVLOWAT as last set

  // Turns a recv result into a Status; r < 0 with a timeout between frames is OK (keep waiting).
  Status check(ssize_t r, bool frame_started) {
    if (r > 0) return Status::OK();
    if (stopping_->load()) return Cancelled("server shutting down");
    if (r == 0) {
      if (!frame_started) return Cancelled("eof");
      return DataLoss("connection closed by " + peer_ + " in the middle of a frame");
    }
    if (errno == EINTR) return Status::OK();
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!frame_started) return Status::OK();
      return DataLoss("frame from " + peer_ + " stalled (no data within the I/O timeout)");
    }
    if (errno == EPROTO && stream_.is_tls())
      return DataLoss("a TLS record from " + peer_ + " failed to decrypt or verify (altered or corrupted on the way: " +
                      stream_.tls_error() + ")");
    return Unavailable("reading from " + peer_ + " failed: " + std::strerror(errno));
  }

  Stream& stream_;
  std::string peer_;
  const std::atomic<bool>* stopping_;
  std::unique_ptr<unsigned char[]> buf_;
  size_t pos_ = 0, end_ = 0;
};

// The typed body of a frame of kind `kind` from its key area (`p`, `key_bytes`) and error text.
// DataLoss when the step-control fields do not decode (decode_step_fields).
Result<FrameBody> body_of(FrameKind kind, const char* p, size_t key_bytes, std::string error) {
  if (!is_step_control(kind)) {
    std::string key(p, key_bytes);
    if (kind == FrameKind::kError) return FrameBody(ErrorFrame{std::move(key), std::move(error)});
    return FrameBody(TensorFrame{std::move(key), Tensor()});
  }
  AF_ASSIGN_OR_RETURN(StepFields f, decode_step_fields(kind, p, key_bytes));
  switch (kind) {
    case FrameKind::kFeed: return FrameBody(FeedFrame{std::move(f.key), Tensor()});
    case FrameKind::kRun:
      return FrameBody(RunFrame{std::move(f.device), std::move(f.handle), std::move(f.reply_to), std::move(f.from_task)});
    case FrameKind::kRet: return FrameBody(RetFrame{std::move(f.device), f.number, Tensor()});
    case FrameKind::kDone: return FrameBody(DoneFrame{std::move(f.device), f.number, std::move(error), std::move(f.detail)});
    case FrameKind::kQuery: return FrameBody(QueryFrame{std::move(f.device), std::move(f.reply_to)});
    case FrameKind::kState: return FrameBody(StateFrame{std::move(f.device), f.number != 0});
    default: break;
  }
  return DataLoss(std::string("frame of kind ") + frame_kind_name(kind) + " has no step fields");
}

// Reads one whole frame from `reader` into `msg` (received tensors come from `allocator`).
// Cancelled("eof") when the peer closed cleanly between frames; DataLoss/InvalidArgument for a
// bad or truncated frame (the connection must then be dropped). A tensor that cannot be
// allocated is skipped and the frame delivered as an ErrorFrame saying so (its `of` the frame's
// kind), keeping the stream in sync.
Status read_frame(FrameReader& reader, const FrameLimits& limits, Allocator* allocator, const std::string& who,
                  Frame* msg) {
  unsigned char fixed[kFrameFixedBytes];
  AF_RETURN_IF_ERROR(reader.read(fixed, sizeof fixed, /*frame_started=*/false));
  AF_ASSIGN_OR_RETURN(FrameHeader h, decode_frame_fixed(fixed, limits));
  std::vector<unsigned char> var(h.variable_bytes());
  if (!var.empty()) AF_RETURN_IF_ERROR(reader.read(var.data(), var.size(), true));
  AF_ASSIGN_OR_RETURN(std::vector<int64_t> dims, decode_frame_dims(h, var.data()));
  msg->step_id = h.step_id;
  const char* p = reinterpret_cast<const char*>(var.data()) + size_t{h.rank} * 8;
  AF_ASSIGN_OR_RETURN(msg->body, body_of(h.kind, p, h.key_bytes, std::string(p + h.key_bytes, h.error_bytes)));
  Tensor* slot = frame_tensor(msg->body);
  if (!slot) return Status::OK();
  Result<Tensor> t = Tensor::allocate(allocator, h.dtype, Shape(std::move(dims)));
  if (!t.ok()) {
    AF_RETURN_IF_ERROR(reader.skip(h.data_bytes));
    ErrorFrame e;
    e.key = frame_name(msg->body);
    e.of = h.kind;
    if (const auto* r = std::get_if<RetFrame>(&msg->body)) e.index = r->index;
    e.error = "the tensor of " + std::string(frame_kind_name(h.kind)) + " frame '" + e.key + "' from " + who +
              " could not be received: " + t.status().to_string();
    AF_LOG(ERROR) << "data plane: " << e.error;
    msg->body = std::move(e);
    return Status::OK();
  }
  *slot = std::move(*t);
  if (h.data_bytes) AF_RETURN_IF_ERROR(reader.read(slot->raw_data(), h.data_bytes, true));
  if (h.dtype == DType::kBool) {
    const auto* b = static_cast<const unsigned char*>(slot->raw_data());
    for (uint64_t i = 0; i < h.data_bytes; ++i)
      if (b[i] > 1)
        return DataLoss("bool tensor '" + frame_name(msg->body) + "' holds byte value " + std::to_string(b[i]) +
                        " at element " + std::to_string(i));
  }
  return Status::OK();
}

// The step-control fields of body `b` (is_step_control of its kind). Pure.
StepFields step_fields(const FrameBody& b) {
  StepFields f;
  if (const auto* x = std::get_if<FeedFrame>(&b)) f.key = x->key;
  if (const auto* x = std::get_if<RunFrame>(&b)) {
    f.device = x->device;
    f.handle = x->handle;
    f.reply_to = x->reply_to;
    f.from_task = x->from_task;
  }
  if (const auto* x = std::get_if<RetFrame>(&b)) {
    f.device = x->device;
    f.number = x->index;
  }
  if (const auto* x = std::get_if<DoneFrame>(&b)) {
    f.device = x->device;
    f.number = x->code;
    f.detail = x->detail;
  }
  if (const auto* x = std::get_if<QueryFrame>(&b)) {
    f.device = x->device;
    f.reply_to = x->reply_to;
  }
  if (const auto* x = std::get_if<StateFrame>(&b)) {
    f.device = x->device;
    f.number = x->running ? 1 : 0;
  }
  return f;
}

// Encodes the frame prefix of `msg` for `addr` and where its payload is. InvalidArgument for a
// message that cannot be sent.
Status encode_message(const std::string& addr, const Frame& msg, std::string* prefix, const void** data,
                      size_t* nbytes) {
  *data = nullptr;
  *nbytes = 0;
  const FrameKind kind = msg.kind();
  const bool control = is_step_control(kind);
  const std::string key = control ? encode_step_fields(kind, step_fields(msg.body)) : frame_name(msg.body);
  if (const auto* e = msg.as<ErrorFrame>()) {
    if (e->error.empty()) return InvalidArgument("an error frame for '" + e->key + "' to " + addr + " has no text");
    return encode_frame_prefix(FrameKind::kError, msg.step_id, key, DType::kInvalid, {}, 0, e->error, prefix);
  }
  if (const auto* d = msg.as<DoneFrame>()) {
    if (d->code != 0 && d->message.empty())
      return InvalidArgument("a failed done frame for '" + d->device + "' to " + addr + " has no message");
    return encode_frame_prefix(kind, msg.step_id, key, DType::kInvalid, {}, 0, d->code == 0 ? "" : d->message, prefix);
  }
  const Tensor* slot = frame_tensor(msg.body);
  if (!slot) return encode_frame_prefix(kind, msg.step_id, key, DType::kInvalid, {}, 0, "", prefix);
  const Tensor& t = *slot;
  const std::string& name = frame_name(msg.body);
  if (!t.is_initialized()) return InvalidArgument("cannot send the uninitialised tensor '" + name + "' to " + addr);
  if (!t.shape().fully_defined())
    return InvalidArgument("cannot send tensor '" + name + "' of partial shape " + t.shape().to_string());
  if (!t.on_host())
    return InvalidArgument("tensor '" + name + "' is not in host memory; copy it to the host before sending to " +
                           addr);
  *nbytes = t.bytes();
  *data = t.raw_data();
  if (*nbytes && (!*data || !t.buffer() || t.buffer()->size() < *nbytes))
    return InvalidArgument("tensor '" + name + "' has no buffer for its " + std::to_string(*nbytes) + " bytes");
  return encode_frame_prefix(kind, msg.step_id, key, t.dtype(), t.shape().dims(), *nbytes, "", prefix);
}

// The frames of msgs[0..count) as iovecs over `prefixes` (filled here) and the tensors' buffers
// (which must outlive the write). All or nothing: InvalidArgument for the first bad message.
// The peer label of a data-plane metric: the task's name when the connection knows it ("addr
// (task 'worker/0')"), else the address dialled. Bounded: one series per peer
// task or address, never per connection.
std::string peer_label(const std::string& who) {
  const size_t t = who.find("(task '");
  if (t == std::string::npos) return who;
  const size_t end = who.find('\'', t + 7);
  return who.substr(t + 7, end == std::string::npos ? std::string::npos : end - t - 7);
}

Counter& plane_counter(const char* name, const char* help, const std::string& who) {
  return Metrics::global().counter(name, help, {{"peer", peer_label(who)}});
}

Status encode_batch(const std::string& addr, const Frame* msgs, size_t count,
                    std::vector<std::string>* prefixes, std::vector<iovec>* iov) {
  prefixes->assign(count, std::string());
  iov->clear();
  iov->reserve(2 * count);
  for (size_t i = 0; i < count; ++i) {
    const void* data = nullptr;
    size_t nbytes = 0;
    AF_RETURN_IF_ERROR(encode_message(addr, msgs[i], &(*prefixes)[i], &data, &nbytes));
    iov->push_back(iovec{const_cast<char*>((*prefixes)[i].data()), (*prefixes)[i].size()});
    if (nbytes) iov->push_back(iovec{const_cast<void*>(data), nbytes});
  }
  size_t total = 0;
  for (const auto& v : *iov) total += v.iov_len;
  plane_counter("actorflow_data_plane_sent_bytes_total", "Bytes of tensor frames this task sent, per peer.", addr)
      .inc(static_cast<int64_t>(total));
  plane_counter("actorflow_data_plane_sent_messages_total", "Tensor frames this task sent, per peer.", addr)
      .inc(static_cast<int64_t>(count));
  return Status::OK();
}

std::atomic<uint64_t> g_next_channel_id{1};

// Calls `cb(msg)` on a data-plane thread; an exception is logged (naming the `what` callback and
// the key) instead of ending the thread.
void deliver_guarded(const std::function<void(const Frame&)>& cb, const Frame& msg,
                     const char* what) {
  try {
    cb(msg);
  } catch (const std::exception& e) {
    AF_LOG(ERROR) << "data plane: the " << what << " callback threw for a " << frame_kind_name(msg.kind())
                  << " frame of '" << frame_name(msg.body) << "': " << e.what();
  } catch (...) {
    AF_LOG(ERROR) << "data plane: the " << what << " callback threw for a " << frame_kind_name(msg.kind())
                  << " frame of '" << frame_name(msg.body) << "'";
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ReplyChannel

ReplyChannel::ReplyChannel(std::unique_ptr<Stream> stream, std::string peer)
    : stream_(std::move(stream)), peer_(std::move(peer)), id_(g_next_channel_id.fetch_add(1)) {}

ReplyChannel::~ReplyChannel() = default;

Status ReplyChannel::send_batch(const std::vector<Frame>& msgs) {
  if (msgs.empty()) return Status::OK();
  std::vector<std::string> prefixes;
  std::vector<iovec> iov;
  AF_RETURN_IF_ERROR(encode_batch(peer_, msgs.data(), msgs.size(), &prefixes, &iov));
  std::lock_guard<std::mutex> lock(write_mu_);
  if (closed_.load()) return Unavailable("the connection from " + peer_ + " is closed");
  Status st = stream_->write_all(iov.data(), static_cast<int>(iov.size()), peer_);
  if (!st.ok()) {
    // A partly written batch leaves the stream unusable: end the connection for both sides.
    closed_.store(true);
    stream_->shutdown();
  }
  return st;
}

// ---------------------------------------------------------------------------------------------
// TensorServer

class TensorServer::Impl {
 public:
  Impl(const TransportOptions& options, Callback cb, ClosedCallback closed)
      : opts_(options), cb_(std::move(cb)), closed_cb_(std::move(closed)) {
    if (!opts_.allocator) opts_.allocator = cpu_host_pool();
    hs_ = handshake_config(opts_);
  }

  ~Impl() {
    stopping_.store(true);
    listener_.reset();  // joins the acceptor: no new connections after this
    std::list<std::shared_ptr<Conn>> conns;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& c : conns_)
        if (c->chan) c->chan->stream().shutdown();
      conns.swap(conns_);
    }
    for (auto& c : conns)
      if (c->thread.joinable()) c->thread.join();
    wipe(opts_.secret);
    wipe(hs_.secret);
  }

  Status start(const std::string& host, uint16_t port) {
    AF_ASSIGN_OR_RETURN(Fd fd, listen_tcp(host, port));
    PreAuthListener::Options lo;
    lo.handshake = hs_;
    lo.handshake.plane = Plane::kData;
    lo.what = "data plane";
    lo.handshake_timeout = opts_.handshake_timeout;
    lo.max_pending = opts_.max_pending_handshakes;
    AF_ASSIGN_OR_RETURN(listener_,
                        PreAuthListener::start(
                            std::move(fd), std::move(lo),
                            [this](std::unique_ptr<Stream> conn, const PeerIdentity& id,
                                   const std::string& addr) { adopt(std::move(conn), id, addr); },
                            [this](const Status& why) { rejected(why); }, [this] { reap(); }));
    port_ = listener_->port();
    return Status::OK();
  }

  uint16_t port() const { return port_; }

  TensorServerStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  bool wait_for_stats(const std::function<bool(const TensorServerStats&)>& pred,
                      std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> lock(mu_);
    return stats_cv_.wait_for(lock, timeout, [&] { return pred(stats_); });
  }

 private:
  struct Conn {
    std::shared_ptr<ReplyChannel> chan;  // owns the socket; shared with replies in flight
    std::string peer;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  void bump(int64_t TensorServerStats::*field, int64_t delta = 1) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.*field += delta;
    }
    stats_cv_.notify_all();
  }

  // A failed handshake (counted after the listener logged it and shut the socket down).
  void rejected(const Status& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.connections_accepted;
      ++stats_.handshakes_rejected;
      if (why.code() == Code::kUnauthenticated) ++stats_.auth_failures;
    }
    stats_cv_.notify_all();
  }

  // An authenticated member's connection: one reader thread each (members only, at most
  // max_connections).
  void adopt(std::unique_ptr<Stream> conn, const PeerIdentity& id, const std::string& addr) {
    reap();
    auto c = std::make_shared<Conn>();
    c->peer = addr + " (task '" + id.task_name + "')";
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.connections_accepted;
      if (stats_.active_connections >= opts_.max_connections) {
        AF_LOG(WARNING) << "data plane: refusing connection from " << c->peer << ": already "
                        << stats_.active_connections << " connections (max_connections)";
        ++stats_.handshakes_rejected;
        stats_cv_.notify_all();
        return;
      }
      conn->set_bulk(true);
      c->chan = std::make_shared<ReplyChannel>(std::move(conn), c->peer);
      ++stats_.handshakes_ok;
      ++stats_.active_connections;
      conns_.push_back(c);
      c->thread = std::thread([this, c] { serve(*c); });
    }
    stats_cv_.notify_all();
  }

  // Joins and forgets connections whose threads have finished. Called on the listener's thread.
  void reap() {
    std::list<std::shared_ptr<Conn>> finished;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = conns_.begin(); it != conns_.end();) {
        if ((*it)->done.load()) {
          finished.push_back(*it);
          it = conns_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& c : finished) c->thread.join();
  }

  void serve(Conn& c) {
    Stream& stream = c.chan->stream();
    SocketTuning tuning;
    tuning.buffer_bytes = opts_.socket_buffer_bytes;
    Status st = tune_socket(stream.fd(), tuning);
    if (st.ok()) st = stream.set_io_timeout(opts_.io_timeout);
    if (st.ok()) st = read_frames(c.chan, c.peer);
    c.chan->close_for_writes();
    // After the last frame of this connection was delivered: nothing more comes on it.
    if (closed_cb_) {
      try {
        closed_cb_(c.chan->id());
      } catch (const std::exception& e) {
        AF_LOG(ERROR) << "data plane: the connection-closed callback threw for " << c.peer << ": " << e.what();
      } catch (...) {
        AF_LOG(ERROR) << "data plane: the connection-closed callback threw for " << c.peer;
      }
    }
    bool bad = !st.ok() && st.code() != Code::kCancelled;
    if (bad && !stopping_.load()) {
      AF_LOG(ERROR) << "data plane: dropping connection from " << c.peer << " on port " << port_ << ": " << st;
    }
    stream.shutdown();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (bad) ++stats_.bad_frames;
      --stats_.active_connections;
    }
    stats_cv_.notify_all();
    c.done.store(true);
  }

  // Reads frames until the peer closes (Cancelled) or a frame is bad (any other error).
  Status read_frames(const std::shared_ptr<ReplyChannel>& chan, const std::string& who) {
    FrameReader reader(chan->stream(), who, &stopping_);
    Counter& bytes = plane_counter("actorflow_data_plane_received_bytes_total",
                                   "Payload bytes (keys and tensor data) of the tensor frames this task received, per peer.", who);
    Counter& frames = plane_counter("actorflow_data_plane_received_messages_total",
                                    "Tensor frames this task received, per peer.", who);
    while (!stopping_.load()) {
      Frame msg;
      AF_RETURN_IF_ERROR(read_frame(reader, opts_.limits, opts_.allocator, who, &msg));
      frames.inc();
      const Tensor* t = frame_tensor(msg.body);
      const auto* e = msg.as<ErrorFrame>();
      bytes.inc(static_cast<int64_t>(frame_name(msg.body).size() + (e ? e->error.size() : 0)) +
                (t && t->is_initialized() ? static_cast<int64_t>(t->bytes()) : 0));
      msg.reply = chan;
      bump(&TensorServerStats::frames_received);
      deliver_guarded(cb_, msg, "tensor");
    }
    return Cancelled("server shutting down");
  }

  TransportOptions opts_;
  HandshakeConfig hs_;
  Callback cb_;
  ClosedCallback closed_cb_;  // may be empty
  std::unique_ptr<PreAuthListener> listener_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;  // guards conns_ and stats_
  mutable std::condition_variable stats_cv_;
  std::list<std::shared_ptr<Conn>> conns_;
  TensorServerStats stats_;
};

TensorServer::TensorServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TensorServer::~TensorServer() = default;

Result<std::unique_ptr<TensorServer>> TensorServer::start(const TransportOptions& options,
                                                          const std::string& bind_host, uint16_t port,
                                                          Callback on_tensor, ClosedCallback on_closed) {
  if (!on_tensor) return InvalidArgument("TensorServer::start needs an on_tensor callback");
  auto impl = std::make_unique<Impl>(options, std::move(on_tensor), std::move(on_closed));
  AF_RETURN_IF_ERROR(impl->start(bind_host, port));
  return std::unique_ptr<TensorServer>(new TensorServer(std::move(impl)));
}

uint16_t TensorServer::port() const { return impl_->port(); }
TensorServerStats TensorServer::stats() const { return impl_->stats(); }
bool TensorServer::wait_for_stats(const std::function<bool(const TensorServerStats&)>& pred,
                                  std::chrono::milliseconds timeout) const {
  return impl_->wait_for_stats(pred, timeout);
}

// ---------------------------------------------------------------------------------------------
// TensorClient

// One pooled, authenticated client connection. The socket closes when the last owner (the pool,
// a request awaiting replies) lets go; a broken connection is shut down at once so that a thread
// reading replies wakes.
class ClientConnection {
 public:
  ClientConnection(std::unique_ptr<Stream> stream, std::string peer)
      : stream_(std::move(stream)), peer_(std::move(peer)) {}

  int fd() const { return stream_->fd(); }
  Stream& stream() { return *stream_; }
  const std::string& peer() const { return peer_; }

  // Marks the connection failed with `why` (first reason wins), shuts the socket down and wakes
  // every thread awaiting replies on it.
  void fail(const Status& why) {
    {
      std::lock_guard<std::mutex> l(state_mu_);
      if (!broken_) {
        broken_ = true;
        error_ = why;
      }
    }
    stream_->shutdown();
    cv_.notify_all();
  }
  bool broken() const {
    std::lock_guard<std::mutex> l(state_mu_);
    return broken_;
  }

  Status await(const TransportOptions& opts, const std::function<void(const Frame&)>& on_reply,
               const std::function<bool()>& done, std::chrono::microseconds spin, std::chrono::milliseconds wait) {
    const auto start = std::chrono::steady_clock::now();
    const auto spin_end = start + spin;
    const auto deadline = start + wait;
    {
      std::unique_lock<std::mutex> l(state_mu_);
      while (true) {
        if (done()) return Status::OK();
        if (broken_) return error_;
        if (!reading_) break;
        if (cv_.wait_until(l, deadline) == std::cv_status::timeout) {
          if (broken_ && !done()) return error_;
          return Status::OK();
        }
      }
      reading_ = true;  // this thread reads until its own reply is in (or time is up)
    }
    Status st = lead(opts, on_reply, done, spin_end, deadline);
    {
      std::lock_guard<std::mutex> l(state_mu_);
      reading_ = false;
    }
    if (!st.ok()) fail(st);  // notifies too
    else cv_.notify_all();   // another waiter may take over reading
    if (!st.ok() && done()) return Status::OK();
    return st;
  }

 private:
  // Reads and hands on frames until done() or the deadline. Errors: the connection is unusable.
  Status lead(const TransportOptions& opts, const std::function<void(const Frame&)>& on_reply,
              const std::function<bool()>& done, std::chrono::steady_clock::time_point spin_end,
              std::chrono::steady_clock::time_point deadline) {
    static const std::atomic<bool> never_stopping{false};
    if (!reader_) reader_ = std::make_unique<FrameReader>(*stream_, peer_, &never_stopping);
    while (!done()) {
      if (!reader_->buffered() && !stream_->buffered()) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) return Status::OK();
        if (now < spin_end) {
          if (!stream_->readable_now()) {
            cpu_relax();
            continue;
          }
        } else {
          pollfd p{stream_->fd(), POLLIN, 0};
          auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
          int pr = ::poll(&p, 1, static_cast<int>(std::max<long long>(1, ms)));
          if (pr == 0 || (pr < 0 && errno == EINTR)) continue;
          if (pr < 0) return Unavailable("waiting for replies from " + peer_ + ": " + std::strerror(errno));
        }
      }
      Frame msg;
      Status st = read_frame(*reader_, opts.limits, opts.allocator, peer_, &msg);
      if (!st.ok()) {
        if (st.code() == Code::kCancelled) return Unavailable("the connection to " + peer_ + " was closed");
        return Unavailable("reading replies: " + st.message());
      }
      deliver_guarded(on_reply, msg, "reply");
      {
        // A follower checks done() under this lock before it sleeps: taking it here means the
        // follower either saw its reply or gets this notification.
        std::lock_guard<std::mutex> l(state_mu_);
      }
      cv_.notify_all();
    }
    return Status::OK();
  }

  std::unique_ptr<Stream> stream_;
  const std::string peer_;
  mutable std::mutex state_mu_;
  std::condition_variable cv_;
  bool reading_ = false;  // a thread is in lead()
  bool broken_ = false;
  Status error_;
  std::unique_ptr<FrameReader> reader_;  // used only by the thread in lead()
};

class TensorClient::Impl {
 public:
  explicit Impl(TransportOptions options) : opts_(std::move(options)) {
    if (!opts_.allocator) opts_.allocator = cpu_host_pool();
    hs_ = handshake_config(opts_);
  }
  ~Impl() {
    wipe(opts_.secret);
    wipe(hs_.secret);
  }

  const TransportOptions& options() const { return opts_; }

  Result<std::shared_ptr<ClientConnection>> send(const std::string& addr, const Frame* msgs, size_t count) {
    std::vector<std::string> prefixes;
    std::vector<iovec> iov;
    AF_RETURN_IF_ERROR(encode_batch(addr, msgs, count, &prefixes, &iov));
    std::shared_ptr<Peer> peer = get_peer(addr);
    std::lock_guard<std::mutex> lock(peer->mu);
    bool reused = peer->conn != nullptr;
    if (reused && !usable(*peer->conn)) {
      drop(*peer, Unavailable("the connection to " + addr + " was closed"));
      reused = false;
    }
    if (!peer->conn) AF_RETURN_IF_ERROR(connect(addr, peer.get()));
    if (iov.empty()) return peer->conn;
    // write_all advances the iovecs it is given: keep the originals for a retry.
    std::vector<iovec> pending = iov;
    Status st = peer->conn->stream().write_all(pending.data(), static_cast<int>(pending.size()), addr);
    if (!st.ok() && reused) {
      AF_LOG(INFO) << "data plane: connection to " << addr << " broke (" << st.message() << "); reconnecting once";
      drop(*peer, st);
      AF_RETURN_IF_ERROR(connect(addr, peer.get()));
      pending = iov;
      st = peer->conn->stream().write_all(pending.data(), static_cast<int>(pending.size()), addr);
    }
    if (!st.ok()) {
      drop(*peer, st);
      return st;
    }
    return peer->conn;
  }

  void expect_task(const std::string& addr, const std::string& task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = expected_.find(addr);
      if (it != expected_.end() && it->second == task) return;
      expected_[addr] = task;
    }
    disconnect(addr);
  }

  std::string expected_task(const std::string& addr) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = expected_.find(addr);
    return it == expected_.end() ? std::string() : it->second;
  }

  void disconnect(const std::string& addr) {
    std::shared_ptr<Peer> peer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = peers_.find(addr);
      if (it == peers_.end()) return;
      peer = it->second;
    }
    std::lock_guard<std::mutex> lock(peer->mu);
    drop(*peer, Unavailable("the connection to " + addr + " was closed by this process"));
  }

  bool is_connected(const std::string& addr, bool probe) const {
    std::shared_ptr<Peer> peer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = peers_.find(addr);
      if (it == peers_.end()) return false;
      peer = it->second;
    }
    std::lock_guard<std::mutex> lock(peer->mu);
    return peer->conn && !peer->conn->broken() && (!probe || usable(*peer->conn));
  }

  Status ensure_connected(const std::string& addr) {
    std::shared_ptr<Peer> peer = get_peer(addr);
    std::lock_guard<std::mutex> lock(peer->mu);
    if (peer->conn && usable(*peer->conn)) return Status::OK();
    drop(*peer, Unavailable("the connection to " + addr + " was closed"));
    return connect(addr, peer.get());
  }

  size_t num_connections() const {
    std::vector<std::shared_ptr<Peer>> peers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& kv : peers_) peers.push_back(kv.second);
    }
    size_t n = 0;
    for (auto& p : peers) {
      std::lock_guard<std::mutex> lock(p->mu);
      if (p->conn && !p->conn->broken()) ++n;
    }
    return n;
  }

 private:
  struct Peer {
    std::mutex mu;  // serialises connecting and writing
    std::shared_ptr<ClientConnection> conn;
  };

  std::shared_ptr<Peer> get_peer(const std::string& addr) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& p = peers_[addr];
    if (!p) p = std::make_shared<Peer>();
    return p;
  }

  // Forgets the peer's connection, failing whatever still awaits replies on it. Under peer.mu.
  static void drop(Peer& peer, const Status& why) {
    if (!peer.conn) return;
    peer.conn->fail(why);
    peer.conn.reset();
  }

  // Whether the connection can still carry requests: not failed, and the peer has not closed or
  // reset it. The server writes after the handshake only replies (which stay queued until read),
  // so pending bytes alone say nothing; POLLRDHUP reports the peer's close even behind them.
  static bool usable(const ClientConnection& c) {
    if (c.broken()) return false;
    pollfd p{c.fd(), POLLRDHUP, 0};
    int r = ::poll(&p, 1, 0);
    if (r < 0) return errno == EINTR;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0;
  }

  // Opens a new connection to `addr` as peer->conn. Under peer->mu.
  Status connect(const std::string& addr, Peer* peer) {
    AF_ASSIGN_OR_RETURN(Fd fd, connect_tcp(addr, opts_.connect_timeout));
    SocketTuning tuning;
    tuning.buffer_bytes = opts_.socket_buffer_bytes;
    AF_RETURN_IF_ERROR(tune_socket(fd.get(), tuning));
    std::unique_ptr<Stream> stream;
    if (hs_.tls) {
      AF_ASSIGN_OR_RETURN(HostPort hp, parse_host_port(addr));
      // The plane reads and writes the session itself (net/stream.h); the handshake runs inside TLS.
      AF_ASSIGN_OR_RETURN(stream,
                          tls_connect(std::move(fd), *hs_.tls, hp.host, addr, Clock::now() + hs_.timeout,
                                      expected_task(addr)));
    } else {
      stream = std::make_unique<Stream>(std::move(fd));
    }
    Status st = client_handshake(*stream, hs_, addr);
    if (!st.ok()) {
      AF_LOG(WARNING) << "data plane: " << st;
      return st;
    }
    AF_RETURN_IF_ERROR(stream->set_io_timeout(opts_.io_timeout));
    stream->set_bulk(true);
    peer->conn = std::make_shared<ClientConnection>(std::move(stream), addr);
    return Status::OK();
  }

  TransportOptions opts_;
  HandshakeConfig hs_;
  mutable std::mutex mu_;  // guards peers_ (the map, not the connections)
  std::unordered_map<std::string, std::shared_ptr<Peer>> peers_;
  std::unordered_map<std::string, std::string> expected_;  // address -> task its certificate must name; under mu_
};

TensorClient::TensorClient(TransportOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
TensorClient::~TensorClient() = default;
Status TensorClient::send(const std::string& peer_addr, const Frame& msg) {
  return impl_->send(peer_addr, &msg, 1).status();
}
Status TensorClient::send_batch(const std::string& peer_addr, const std::vector<Frame>& msgs) {
  if (msgs.empty()) return Status::OK();
  return impl_->send(peer_addr, msgs.data(), msgs.size()).status();
}
Result<std::shared_ptr<ClientConnection>> TensorClient::send_batch_awaiting(const std::string& peer_addr,
                                                                            const std::vector<Frame>& msgs) {
  return impl_->send(peer_addr, msgs.data(), msgs.size());
}
Status TensorClient::await_replies(ClientConnection& conn, const std::function<void(const Frame&)>& on_reply,
                                   const std::function<bool()>& done, std::chrono::microseconds spin,
                                   std::chrono::milliseconds wait) {
  return conn.await(impl_->options(), on_reply, done, spin, wait);
}
void TensorClient::disconnect(const std::string& peer_addr) { impl_->disconnect(peer_addr); }
void TensorClient::expect_task(const std::string& peer_addr, const std::string& task) {
  impl_->expect_task(peer_addr, task);
}
size_t TensorClient::num_connections() const { return impl_->num_connections(); }
bool TensorClient::is_connected(const std::string& peer_addr, bool probe) const {
  return impl_->is_connected(peer_addr, probe);
}
Status TensorClient::ensure_connected(const std::string& peer_addr) { return impl_->ensure_connected(peer_addr); }

}  // namespace net
}  // namespace actorflow
