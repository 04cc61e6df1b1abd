// Tests of the tensor data plane (net/tensor_transport.h): round trips, concurrency, the
// authentication handshake and the server's robustness against bad peers.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "net/handshake.h"
#include "net/socket.h"
#include "net/tensor_transport.h"
#include "net/wire.h"
#include "tests/util/frames.h"

namespace actorflow {
namespace net {
namespace {

using std::chrono::milliseconds;
using testing::error_of;
using testing::key_of;
using testing::tensor_of;
constexpr milliseconds kWait{10000};  // generous bound on every wait; tests never sleep

// Collects delivered messages; thread-safe.
class Inbox {
 public:
  TensorServer::Callback callback() {
    return [this](const Frame& m) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        msgs_.push_back(m);
      }
      cv_.notify_all();
    };
  }
  bool wait_for(size_t n, milliseconds timeout = kWait) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return msgs_.size() >= n; });
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return msgs_.size();
  }
  std::vector<Frame> take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Frame> r(msgs_.begin(), msgs_.end());
    msgs_.clear();
    return r;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Frame> msgs_;
};

TransportOptions options(const std::string& secret = "correct horse battery staple",
                         const std::string& fingerprint = "fp-0123456789abcdef", const std::string& task = "worker/0") {
  TransportOptions o;
  o.secret = secret;
  o.cluster_fingerprint = fingerprint;
  o.task_name = task;
  return o;
}

std::unique_ptr<TensorServer> start_server(const TransportOptions& o, Inbox& inbox, uint16_t port = 0) {
  auto s = TensorServer::start(o, "127.0.0.1", port, inbox.callback());
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

std::string addr_of(const TensorServer& s) { return "127.0.0.1:" + std::to_string(s.port()); }

// A tensor of `dtype`/`shape` whose bytes are a deterministic function of `seed` (bools are 0/1).
Tensor patterned(DType dtype, const Shape& shape, uint32_t seed) {
  Tensor t(dtype, shape);
  auto* b = static_cast<unsigned char*>(t.raw_data());
  uint32_t x = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < t.bytes(); ++i) {
    x = x * 1103515245u + 12345u;
    b[i] = static_cast<unsigned char>(x >> 16);
    if (dtype == DType::kBool) b[i] &= 1;
  }
  return t;
}

// Redirects fd 2 into a temporary file for its lifetime; text() returns what was written.
class StderrCapture {
 public:
  StderrCapture() {
    file_ = std::tmpfile();
    saved_ = ::dup(2);
    ::fflush(stderr);
    ::dup2(::fileno(file_), 2);
  }
  ~StderrCapture() { restore(); if (file_) std::fclose(file_); }
  void restore() {
    if (saved_ >= 0) {
      ::fflush(stderr);
      ::dup2(saved_, 2);
      ::close(saved_);
      saved_ = -1;
    }
  }
  std::string text() {
    restore();
    std::string s;
    std::rewind(file_);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, file_)) > 0) s.append(buf, n);
    return s;
  }

 private:
  std::FILE* file_ = nullptr;
  int saved_ = -1;
};

// Waits until the peer closes `fd` (read returns 0 or an error); false on timeout.
bool wait_for_close(int fd, milliseconds timeout = kWait) {
  auto deadline = Clock::now() + timeout;
  char buf[256];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
    if (::poll(&p, 1, std::max(left, 1)) <= 0) continue;
    ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r <= 0) return true;
  }
  return false;
}

// A raw socket that has passed the handshake (to send hand-made frames).
Fd authenticated_socket(const TensorServer& server, const TransportOptions& o) {
  auto fd = connect_tcp(addr_of(server), milliseconds(5000));
  EXPECT_TRUE(fd.ok()) << fd.status();
  if (!fd.ok()) return Fd();
  HandshakeConfig hc;
  hc.fingerprint = o.cluster_fingerprint;
  hc.secret = o.secret;
  hc.task_name = "raw-test-socket";
  Status st = client_handshake(fd->get(), hc, addr_of(server));
  EXPECT_TRUE(st.ok()) << st;
  return std::move(*fd);
}

// The server still works for a correct client after whatever a test did to it.
void expect_serves_correct_peer(const TensorServer& server, Inbox& inbox, const TransportOptions& o) {
  inbox.take();
  TensorClient good(o);
  Frame m(77, "after", Tensor::from_vector<float>({1.5f, -2.f}, Shape{2}));
  ASSERT_TRUE(good.send(addr_of(server), m).ok());
  ASSERT_TRUE(inbox.wait_for(1));
  auto got = inbox.take();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(key_of(got[0]), "after");
  EXPECT_EQ(got[0].step_id, 77);
  EXPECT_TRUE(tensor_of(got[0]).equals(tensor_of(m)));
}

TEST(TensorTransportTest, RoundTripEveryDtypeAndShape) {
  Inbox inbox;
  auto o = options();
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  TensorClient client(o);
  const std::vector<DType> dtypes = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                     DType::kInt64,   DType::kUInt8,   DType::kBool};
  const std::vector<Shape> shapes = {Shape{}, Shape{0}, Shape{3, 0, 2}, Shape{1}, Shape{7}, Shape{2, 3, 4},
                                     Shape{5, 1, 1, 3}, Shape{1000}};
  std::vector<Frame> sent;
  uint32_t seed = 1;
  for (DType d : dtypes)
    for (const Shape& s : shapes) {
      sent.emplace_back(static_cast<int64_t>(seed) * 1000003 - 5,
                        std::string("/job:worker/task:0/cpu:0;/job:ps/task:0/cpu:0;edge_") + dtype_name(d) + "_" +
                            s.to_string(),
                        patterned(d, s, seed));
      ++seed;
    }
  // 16 MiB of float32 and an error report in place of a tensor.
  sent.push_back(Frame(-1, "big", patterned(DType::kFloat32, Shape{4, 1024, 1024}, 99)));
  sent.push_back(Frame(42, ErrorFrame{"failed_edge", "Internal: kernel MatMul 'c' failed"}));
  for (const auto& m : sent) ASSERT_TRUE(client.send(addr_of(*server), m).ok()) << key_of(m);
  ASSERT_TRUE(inbox.wait_for(sent.size()));
  auto got = inbox.take();
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {  // one connection: in order
    SCOPED_TRACE(key_of(sent[i]));
    EXPECT_EQ(got[i].step_id, sent[i].step_id);
    EXPECT_EQ(key_of(got[i]), key_of(sent[i]));
    EXPECT_EQ(error_of(got[i]), error_of(sent[i]));
    if (error_of(sent[i]).empty()) {
      EXPECT_EQ(tensor_of(got[i]).dtype(), tensor_of(sent[i]).dtype());
      EXPECT_EQ(tensor_of(got[i]).shape(), tensor_of(sent[i]).shape());
      EXPECT_EQ(tensor_of(got[i]).bytes(), tensor_of(sent[i]).bytes());
      EXPECT_TRUE(tensor_of(got[i]).equals(tensor_of(sent[i])));  // byte-exact
      EXPECT_FALSE(tensor_of(got[i]).shares_buffer_with(tensor_of(sent[i])));
    } else {
      EXPECT_FALSE(tensor_of(got[i]).is_initialized());
    }
  }
  // Spot-check values by hand too.
  Frame v(7, "v", Tensor::from_vector<int64_t>({-1, 0, 1LL << 40}, Shape{3}));
  ASSERT_TRUE(client.send(addr_of(*server), v).ok());
  ASSERT_TRUE(inbox.wait_for(1));
  auto one = inbox.take();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(tensor_of(one[0]).data<int64_t>()[0], -1);
  EXPECT_EQ(tensor_of(one[0]).data<int64_t>()[2], 1LL << 40);
  EXPECT_EQ(client.num_connections(), 1u);
  EXPECT_EQ(server->stats().handshakes_ok, 1);
  EXPECT_EQ(server->stats().frames_received, static_cast<int64_t>(sent.size() + 1));
}

TEST(TensorTransportTest, BatchesArriveWholeAndInOrder) {
  Inbox inbox;
  auto o = options();
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  TensorClient client(o);
  EXPECT_FALSE(client.is_connected(addr_of(*server)));
  ASSERT_TRUE(client.ensure_connected(addr_of(*server)).ok());
  EXPECT_TRUE(client.is_connected(addr_of(*server)));
  // 600 messages (more iovecs than one sendmsg takes), a 4 MiB tensor and an error among them.
  std::vector<Frame> batch;
  for (int i = 0; i < 600; ++i)
    batch.push_back(Frame(i, "k" + std::to_string(i), Tensor::scalar<int32_t>(3 * i)));
  batch.push_back(Frame(600, "big", patterned(DType::kFloat32, Shape{1024, 1024}, 7)));
  batch.push_back(Frame(601, ErrorFrame{"err", "Aborted: step 601"}));
  ASSERT_TRUE(client.send_batch(addr_of(*server), batch).ok());
  ASSERT_TRUE(inbox.wait_for(batch.size()));
  auto got = inbox.take();
  ASSERT_EQ(got.size(), batch.size());
  for (int i = 0; i < 600; ++i) {
    ASSERT_EQ(key_of(got[static_cast<size_t>(i)]), "k" + std::to_string(i));
    ASSERT_EQ(tensor_of(got[static_cast<size_t>(i)]).data<int32_t>()[0], 3 * i);
  }
  EXPECT_TRUE(tensor_of(got[600]).equals(tensor_of(batch[600])));
  EXPECT_EQ(error_of(got[601]), "Aborted: step 601");
  // A bad message anywhere in a batch refuses the whole batch: nothing is written.
  std::vector<Frame> bad = {Frame(1, "fine", Tensor::scalar<float>(1.f)),
                                    Frame(2, "uninitialised", Tensor())};
  Status s = client.send_batch(addr_of(*server), bad);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s;
  Frame marker(3, "marker", Tensor::scalar<float>(2.f));
  ASSERT_TRUE(client.send(addr_of(*server), marker).ok());
  ASSERT_TRUE(inbox.wait_for(1));
  auto after = inbox.take();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(key_of(after[0]), "marker");
  EXPECT_EQ(client.num_connections(), 1u);
}

TEST(TensorTransportTest, ManyConcurrentSenders) {
  Inbox inbox;
  auto o = options();
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  constexpr int kThreads = 8, kPerThread = 40;
  TensorClient shared(o);
  std::vector<std::unique_ptr<TensorClient>> own;
  for (int i = 0; i < 2; ++i) own.push_back(std::make_unique<TensorClient>(o));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      TensorClient& c = t < 2 ? *own[static_cast<size_t>(t)] : shared;
      for (int i = 0; i < kPerThread; ++i) {
        // Sizes vary from 1 element to 64 Ki elements so writes interleave at many sizes.
        int64_t n = 1 + ((t * 7919 + i * 104729) % 65536);
        Frame m(i, "t" + std::to_string(t), patterned(DType::kFloat32, Shape{n}, static_cast<uint32_t>(t * 1000 + i)));
        if (!c.send(addr_of(*server), m).ok()) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_TRUE(inbox.wait_for(kThreads * kPerThread));
  auto got = inbox.take();
  ASSERT_EQ(got.size(), static_cast<size_t>(kThreads * kPerThread));
  std::map<std::string, int64_t> next;  // each sender's messages arrive in its order
  for (const auto& m : got) {
    int t = std::stoi(key_of(m).substr(1));
    int64_t i = m.step_id;
    EXPECT_EQ(next[key_of(m)], i) << key_of(m);
    next[key_of(m)] = i + 1;
    int64_t n = 1 + ((t * 7919 + i * 104729) % 65536);
    EXPECT_TRUE(tensor_of(m).equals(patterned(DType::kFloat32, Shape{n}, static_cast<uint32_t>(t * 1000 + i)))) << key_of(m) << " " << i;
  }
  EXPECT_EQ(server->stats().handshakes_ok, 3);  // one connection per client
}

TEST(TensorTransportTest, WrongSecretRejectedAtBothEndsAndNeverLogged) {
  Inbox inbox;
  const std::string good_secret = "s3cret-GOOD-5d41402abc4b2a76";
  const std::string bad_secret = "s3cret-BAD-7d793037a0760186";
  auto o = options(good_secret);
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  std::string log;
  {
    StderrCapture capture;
    TensorClient intruder(options(bad_secret, o.cluster_fingerprint, "intruder/0"));
    Frame m(1, "k", Tensor::scalar<float>(3.f));
    for (int attempt = 1; attempt <= 2; ++attempt) {
      Status st = intruder.send(addr_of(*server), m);
      EXPECT_EQ(st.code(), Code::kUnauthenticated) << st;
      EXPECT_NE(st.message().find(addr_of(*server)), std::string::npos) << st;
      EXPECT_TRUE(server->wait_for_stats([&](const TensorServerStats& s) { return s.auth_failures == attempt; }, kWait));
    }
    EXPECT_EQ(intruder.num_connections(), 0u);
    log = capture.text();
  }
  EXPECT_EQ(inbox.size(), 0u);
  EXPECT_EQ(server->stats().frames_received, 0);
  EXPECT_EQ(server->stats().handshakes_ok, 0);
  // Both ends logged the failure, naming the peer; neither secret appears anywhere.
  EXPECT_NE(log.find("authentication failed"), std::string::npos) << log;
  EXPECT_NE(log.find("intruder/0"), std::string::npos) << log;
  EXPECT_NE(log.find("cluster secrets differ"), std::string::npos) << log;
  EXPECT_EQ(log.find(good_secret), std::string::npos);
  EXPECT_EQ(log.find(bad_secret), std::string::npos);
  EXPECT_EQ(log.find("s3cret"), std::string::npos);
  expect_serves_correct_peer(*server, inbox, o);
}

TEST(TensorTransportTest, SecretOnOneSideOnlyIsRejected) {
  Inbox inbox;
  auto with = options("a-secret");
  auto without = options("");
  auto server = start_server(with, inbox);
  ASSERT_TRUE(server);
  TensorClient c(without);
  Status st = c.send(addr_of(*server), Frame(1, "k", Tensor::scalar<int32_t>(1)));
  EXPECT_EQ(st.code(), Code::kUnauthenticated) << st;
  EXPECT_NE(st.message().find("requires a cluster secret"), std::string::npos) << st;
  EXPECT_TRUE(server->wait_for_stats([](const TensorServerStats& s) { return s.auth_failures == 1; }, kWait));

  Inbox inbox2;
  auto open_server = start_server(without, inbox2);
  ASSERT_TRUE(open_server);
  TensorClient c2(with);
  st = c2.send(addr_of(*open_server), Frame(1, "k", Tensor::scalar<int32_t>(1)));
  EXPECT_EQ(st.code(), Code::kUnauthenticated) << st;
  EXPECT_EQ(inbox.size() + inbox2.size(), 0u);
  // Both without a secret (a loopback cluster): accepted.
  expect_serves_correct_peer(*open_server, inbox2, without);
  expect_serves_correct_peer(*server, inbox, with);
}

TEST(TensorTransportTest, FingerprintMismatchIsRejected) {
  Inbox inbox;
  auto o = options("k", "fingerprint-of-cluster-A");
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  TensorClient c(options("k", "fingerprint-of-cluster-B"));
  Status st = c.send(addr_of(*server), Frame(1, "k", Tensor::scalar<float>(1.f)));
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("different cluster file"), std::string::npos) << st;
  EXPECT_NE(st.message().find(addr_of(*server)), std::string::npos) << st;
  EXPECT_TRUE(server->wait_for_stats([](const TensorServerStats& s) { return s.handshakes_rejected == 1; }, kWait));
  EXPECT_EQ(server->stats().auth_failures, 0);
  EXPECT_EQ(inbox.size(), 0u);
  expect_serves_correct_peer(*server, inbox, o);
}

TEST(TensorTransportTest, ProtocolVersionMismatchIsRejected) {
  Inbox inbox;
  auto o = options();
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  auto newer = o;
  newer.protocol_version = kProtocolVersion + 1;
  TensorClient c(newer);
  Status st = c.send(addr_of(*server), Frame(1, "k", Tensor::scalar<float>(1.f)));
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("protocol version mismatch"), std::string::npos) << st;
  EXPECT_NE(st.message().find("v" + std::to_string(kProtocolVersion + 1)), std::string::npos) << st;
  EXPECT_TRUE(server->wait_for_stats([](const TensorServerStats& s) { return s.handshakes_rejected == 1; }, kWait));
  EXPECT_EQ(inbox.size(), 0u);
  expect_serves_correct_peer(*server, inbox, o);
}

// A fake server that does not know the secret: it accepts any proof and answers with a bogus one.
TEST(TensorTransportTest, ClientRejectsServerThatCannotProveItself) {
  auto listener = listen_tcp("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  const uint16_t port = local_port(listener->get());
  std::atomic<bool> got_frame_bytes{false};
  std::thread impostor([&] {
    pollfd p{listener->get(), POLLIN, 0};
    if (::poll(&p, 1, 10000) != 1) return;
    Fd fd(::accept(listener->get(), nullptr, nullptr));
    auto deadline = Clock::now() + kWait;
    unsigned char hello[42];  // magic, version, mode, plane, task length, nonce
    if (!read_exact_until(fd.get(), hello, sizeof hello, deadline, "client").ok()) return;
    size_t rest = static_cast<size_t>(hello[8] | (hello[9] << 8));
    std::vector<unsigned char> tail(rest);
    if (rest && !read_exact_until(fd.get(), tail.data(), rest, deadline, "client").ok()) return;
    // CHALLENGE: magic, version, code 0, 0, msg len 0, nonce
    std::vector<unsigned char> ch = {'A', 'F', 'H', 'S', kProtocolVersion & 0xff, kProtocolVersion >> 8, 0, 0, 0, 0};
    ch.resize(ch.size() + 32, 0xab);
    write_all(fd.get(), ch.data(), ch.size(), "client");
    unsigned char auth[38];  // magic, MAC, fingerprint length
    if (!read_exact_until(fd.get(), auth, sizeof auth, deadline, "client").ok()) return;
    std::vector<unsigned char> fp(static_cast<size_t>(auth[36] | (auth[37] << 8)));
    if (!fp.empty() && !read_exact_until(fd.get(), fp.data(), fp.size(), deadline, "client").ok()) return;
    std::vector<unsigned char> res = {'A', 'F', 'H', 'S', 0, 0, 0, 0};
    res.resize(res.size() + 32, 0x00);  // claims success with a made-up proof
    write_all(fd.get(), res.data(), res.size(), "client");
    // The client must not send a frame now.
    pollfd q{fd.get(), POLLIN, 0};
    if (::poll(&q, 1, 5000) == 1) {
      unsigned char b;
      if (::recv(fd.get(), &b, 1, 0) == 1) got_frame_bytes = true;
    }
  });
  TensorClient c(options());
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  Status st = c.send(addr, Frame(1, "k", Tensor::scalar<float>(1.f)));
  EXPECT_EQ(st.code(), Code::kUnauthenticated) << st;
  EXPECT_NE(st.message().find("failed to prove"), std::string::npos) << st;
  EXPECT_NE(st.message().find(addr), std::string::npos) << st;
  impostor.join();
  EXPECT_FALSE(got_frame_bytes.load());
}

TEST(TensorTransportTest, GarbageBeforeHandshakeDropsConnection) {
  Inbox inbox;
  auto o = options();
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  auto fd = connect_tcp(addr_of(*server), milliseconds(5000));
  ASSERT_TRUE(fd.ok());
  std::string garbage = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  garbage.resize(200, '\xff');
  ASSERT_TRUE(write_all(fd->get(), garbage.data(), garbage.size(), "server").ok());
  EXPECT_TRUE(wait_for_close(fd->get()));
  EXPECT_TRUE(server->wait_for_stats(
      [](const TensorServerStats& s) { return s.handshakes_rejected == 1 && s.active_connections == 0; }, kWait));
  EXPECT_EQ(inbox.size(), 0u);
  expect_serves_correct_peer(*server, inbox, o);
}

TEST(TensorTransportTest, SilentConnectorIsDroppedAfterHandshakeTimeout) {
  Inbox inbox;
  auto o = options();
  o.handshake_timeout = milliseconds(300);
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  auto fd = connect_tcp(addr_of(*server), milliseconds(5000));
  ASSERT_TRUE(fd.ok());
  auto t0 = Clock::now();
  EXPECT_TRUE(wait_for_close(fd->get()));
  EXPECT_GE(Clock::now() - t0, milliseconds(250));
  EXPECT_TRUE(server->wait_for_stats([](const TensorServerStats& s) { return s.handshakes_rejected == 1; }, kWait));
  expect_serves_correct_peer(*server, inbox, o);
}

TEST(TensorTransportTest, PeerClosingMidTensorDeliversNothing) {
  Inbox inbox;
  auto o = options();
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  {
    Fd fd = authenticated_socket(*server, o);
    ASSERT_TRUE(fd.valid());
    Tensor t = patterned(DType::kFloat32, Shape{256, 1024}, 5);  // 1 MiB
    std::string prefix;
    ASSERT_TRUE(encode_frame_prefix(FrameKind::kTensor, 3, "half", t.dtype(), t.shape().dims(), t.bytes(), "", &prefix).ok());
    ASSERT_TRUE(write_all(fd.get(), prefix.data(), prefix.size(), "server").ok());
    ASSERT_TRUE(write_all(fd.get(), t.raw_data(), t.bytes() / 2, "server").ok());
  }  // closed half-way
  EXPECT_TRUE(server->wait_for_stats([](const TensorServerStats& s) { return s.bad_frames == 1; }, kWait));
  EXPECT_EQ(inbox.size(), 0u);
  {
    Fd fd = authenticated_socket(*server, o);  // and one that stops inside the header
    ASSERT_TRUE(fd.valid());
    std::string prefix;
    ASSERT_TRUE(encode_frame_prefix(FrameKind::kTensor, 3, "hdr", DType::kInt32, {4}, 16, "", &prefix).ok());
    ASSERT_TRUE(write_all(fd.get(), prefix.data(), 20, "server").ok());
  }
  EXPECT_TRUE(server->wait_for_stats([](const TensorServerStats& s) { return s.bad_frames == 2; }, kWait));
  EXPECT_EQ(inbox.size(), 0u);
  expect_serves_correct_peer(*server, inbox, o);
}

// Step control crosses the data plane as typed frames (net/wire.h, kinds 3-6): every field of
// every kind arrives as sent, tensors of feed and ret frames too, and a done frame's message.
TEST(TensorTransportTest, StepControlFramesKeepTheirTypedFields) {
  Inbox inbox;
  auto o = options();
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  TensorClient client(o);
  const std::string dev = "/job:w/replica:0/task:0/device:CPU:0";
  const std::string feed_key = "/job:h/replica:0/task:0/device:CPU:0;" + dev + ";x:0";
  std::vector<Frame> sent;
  sent.emplace_back(11, FeedFrame{feed_key, patterned(DType::kFloat32, Shape{3, 2}, 4)});
  sent.emplace_back(11, RunFrame{dev, "partition#7", "127.0.0.1:4242", "/job:h/replica:0/task:0"});
  sent.emplace_back(-3, RetFrame{dev, 2, patterned(DType::kInt64, Shape{}, 9)});
  sent.emplace_back(-3, DoneFrame{dev, 0, "", ""});
  sent.emplace_back(-3, DoneFrame::of(dev, InvalidArgument("kernel MatMul 'c' failed: shapes [2,3] and [2,3]")));
  sent.emplace_back(5, QueryFrame{dev, "127.0.0.1:4243"});
  sent.emplace_back(5, StateFrame{dev, true});
  ASSERT_TRUE(client.send_batch(addr_of(*server), sent).ok());
  ASSERT_TRUE(inbox.wait_for(sent.size()));
  auto got = inbox.take();
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i].kind(), sent[i].kind());
    EXPECT_EQ(got[i].step_id, sent[i].step_id);
    EXPECT_EQ(tensor_of(got[i]).is_initialized(), tensor_of(sent[i]).is_initialized());
    if (tensor_of(sent[i]).is_initialized()) { EXPECT_TRUE(tensor_of(got[i]).equals(tensor_of(sent[i]))); }
  }
  ASSERT_NE(got[0].as<FeedFrame>(), nullptr);
  EXPECT_EQ(got[0].as<FeedFrame>()->key, feed_key);
  const RunFrame* run_frame = got[1].as<RunFrame>();
  ASSERT_NE(run_frame, nullptr);
  EXPECT_EQ(run_frame->device, dev);
  EXPECT_EQ(run_frame->handle, "partition#7");
  EXPECT_EQ(run_frame->reply_to, "127.0.0.1:4242");
  EXPECT_EQ(run_frame->from_task, "/job:h/replica:0/task:0");
  ASSERT_NE(got[2].as<RetFrame>(), nullptr);
  EXPECT_EQ(got[2].as<RetFrame>()->device, dev);
  EXPECT_EQ(got[2].as<RetFrame>()->index, 2);
  ASSERT_NE(got[3].as<DoneFrame>(), nullptr);
  EXPECT_TRUE(got[3].as<DoneFrame>()->status().ok());
  ASSERT_NE(got[4].as<DoneFrame>(), nullptr);
  const Status failed = got[4].as<DoneFrame>()->status();
  EXPECT_EQ(failed.code(), Code::kInvalidArgument);
  EXPECT_EQ(failed.message(), "kernel MatMul 'c' failed: shapes [2,3] and [2,3]");
  ASSERT_NE(got[5].as<QueryFrame>(), nullptr);
  EXPECT_EQ(got[5].as<QueryFrame>()->device, dev);
  EXPECT_EQ(got[5].as<QueryFrame>()->reply_to, "127.0.0.1:4243");
  ASSERT_NE(got[6].as<StateFrame>(), nullptr);
  EXPECT_TRUE(got[6].as<StateFrame>()->running);
  // What a sender may not say: a feed or a ret without its tensor, an error without its text, a
  // failed outcome without a message.
  EXPECT_EQ(client.send(addr_of(*server), Frame(1, FeedFrame{feed_key, Tensor()})).code(), Code::kInvalidArgument);
  EXPECT_EQ(client.send(addr_of(*server), Frame(1, RetFrame{dev, 0, Tensor()})).code(), Code::kInvalidArgument);
  EXPECT_EQ(client.send(addr_of(*server), Frame(1, ErrorFrame{"k", ""})).code(), Code::kInvalidArgument);
  EXPECT_EQ(client.send(addr_of(*server), Frame(1, DoneFrame{dev, 3, "", ""})).code(), Code::kInvalidArgument);
  StepFields run_fields;
  run_fields.device = dev;
  run_fields.handle = "partition#7";
  run_fields.from_task = "/job:h/replica:0/task:0";
  // The field codec on its own: a round trip, then every truncation is DataLoss.
  const std::string run = encode_step_fields(FrameKind::kRun, run_fields);
  auto back = decode_step_fields(FrameKind::kRun, run.data(), run.size());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->handle, "partition#7");
  for (size_t n = 0; n < run.size(); ++n)
    EXPECT_EQ(decode_step_fields(FrameKind::kRun, run.data(), n).status().code(), Code::kDataLoss) << n;
  EXPECT_EQ(decode_step_fields(FrameKind::kTensor, run.data(), run.size()).status().code(), Code::kDataLoss);
}

TEST(TensorTransportTest, BadFramesAfterHandshakeDropConnection) {
  Inbox inbox;
  auto o = options();
  o.limits.max_tensor_bytes = 1 << 20;
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  struct Case {
    const char* what;
    std::string bytes;
  };
  std::vector<Case> cases;
  {
    std::string p;
    encode_frame_prefix(FrameKind::kTensor, 1, "k", DType::kFloat32, {2}, 8, "", &p);
    p[0] = 'X';
    cases.push_back({"bad magic", p + std::string(8, '\0')});
  }
  {
    std::string p;
    encode_frame_prefix(FrameKind::kTensor, 1, "k", DType::kFloat32, {2}, 8, "", &p);
    p[5] = 42;
    cases.push_back({"bad dtype", p + std::string(8, '\0')});
  }
  {
    std::string p;  // shape says 8 bytes, the frame announces 12
    encode_frame_prefix(FrameKind::kTensor, 1, "k", DType::kFloat32, {2}, 12, "", &p);
    cases.push_back({"size mismatch", p + std::string(12, '\0')});
  }
  {
    std::string p;  // 1 GiB announced, cap is 1 MiB: refused before any allocation
    encode_frame_prefix(FrameKind::kTensor, 1, "k", DType::kUInt8, {int64_t{1} << 30}, uint64_t{1} << 30, "", &p);
    cases.push_back({"over the size cap", p});
  }
  {
    std::string p;  // dims whose product overflows 64 bits
    encode_frame_prefix(FrameKind::kTensor, 1, "k", DType::kFloat64, {int64_t{1} << 40, int64_t{1} << 40}, 8, "", &p);
    cases.push_back({"overflowing shape", p});
  }
  {
    std::string p;
    encode_frame_prefix(FrameKind::kTensor, 1, "k", DType::kFloat32, {-2}, 8, "", &p);
    cases.push_back({"negative dim", p + std::string(8, '\0')});
  }
  {
    std::string p;
    encode_frame_prefix(FrameKind::kTensor, 1, "k", DType::kBool, {3}, 3, "", &p);
    cases.push_back({"bool byte 7", p + std::string("\x01\x07\x00", 3)});
  }
  {
    std::string p;
    encode_frame_prefix(FrameKind::kTensor, 1, std::string(100000, 'k'), DType::kUInt8, {1}, 1, "", &p);
    cases.push_back({"key too long", p.substr(0, 64)});
  }
  // Step-control frames (kinds 3-6) whose typed fields do not parse, or that carry what their
  // kind may not.
  {
    std::string p;  // a run frame's key area cut inside its second field
    std::string fields = encode_step_fields(FrameKind::kRun, StepFields{"", "/job:w/replica:0/task:0/device:CPU:0", "h", "", "t", 0, ""});
    fields.resize(fields.size() - 12);
    encode_frame_prefix(FrameKind::kRun, 1, fields, DType::kInvalid, {}, 0, "", &p);
    cases.push_back({"truncated run fields", p});
  }
  {
    std::string p;  // a done frame whose status code field has 3 bytes
    std::string fields = encode_step_fields(FrameKind::kFeed, StepFields{"dev", "", "", "", "", 0, ""});
    fields += std::string("\x03\0\0\0abc", 7);
    encode_frame_prefix(FrameKind::kDone, 1, fields, DType::kInvalid, {}, 0, "", &p);
    cases.push_back({"done with a 3-byte code", p});
  }
  {
    std::string p;  // a run frame that carries a tensor
    std::string fields = encode_step_fields(FrameKind::kRun, StepFields{"", "d", "h", "", "t", 0, ""});
    encode_frame_prefix(FrameKind::kRun, 1, fields, DType::kFloat32, {2}, 8, "", &p);
    cases.push_back({"run with a tensor", p + std::string(8, '\0')});
  }
  {
    std::string p;  // a feed frame with bytes after its one field
    std::string fields = encode_step_fields(FrameKind::kFeed, StepFields{"a;b;c", "", "", "", "", 0, ""}) + "x";
    encode_frame_prefix(FrameKind::kFeed, 1, fields, DType::kFloat32, {2}, 8, "", &p);
    cases.push_back({"feed with trailing bytes", p + std::string(8, '\0')});
  }
  {
    std::string p;
    encode_frame_prefix(FrameKind::kTensor, 1, "k", DType::kFloat32, {2}, 8, "", &p);
    p[4] = 7;
    cases.push_back({"unknown kind 7", p + std::string(8, '\0')});
  }
  int64_t expected_bad = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    Fd fd = authenticated_socket(*server, o);
    ASSERT_TRUE(fd.valid());
    ASSERT_TRUE(write_all(fd.get(), c.bytes.data(), c.bytes.size(), "server").ok());
    EXPECT_TRUE(wait_for_close(fd.get()));
    ++expected_bad;
    EXPECT_TRUE(server->wait_for_stats([&](const TensorServerStats& s) { return s.bad_frames == expected_bad; }, kWait));
  }
  EXPECT_EQ(inbox.size(), 0u);
  EXPECT_EQ(server->stats().frames_received, 0);
  expect_serves_correct_peer(*server, inbox, o);
}

// An allocator that refuses anything above a limit.
class StingyAllocator : public Allocator {
 public:
  std::string name() const override { return "stingy"; }
  void* allocate(size_t bytes, size_t alignment) override {
    return bytes > 1024 ? nullptr : cpu_allocator()->allocate(bytes, alignment);
  }
  void deallocate(void* p, size_t bytes) override { cpu_allocator()->deallocate(p, bytes); }
};

TEST(TensorTransportTest, ReceiverOutOfMemoryReportsErrorAndKeepsConnection) {
  static StingyAllocator stingy;  // outlives every tensor
  Inbox inbox;
  auto o = options();
  o.allocator = &stingy;
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  TensorClient c(o);
  ASSERT_TRUE(c.send(addr_of(*server), Frame(1, "huge", patterned(DType::kFloat32, Shape{4096}, 1))).ok());
  Frame small(2, "small", patterned(DType::kInt32, Shape{16}, 2));
  ASSERT_TRUE(c.send(addr_of(*server), small).ok());
  ASSERT_TRUE(inbox.wait_for(2));
  auto got = inbox.take();
  EXPECT_EQ(key_of(got[0]), "huge");
  EXPECT_NE(error_of(got[0]).find("ResourceExhausted"), std::string::npos) << error_of(got[0]);
  EXPECT_FALSE(tensor_of(got[0]).is_initialized());
  EXPECT_EQ(key_of(got[1]), "small");
  EXPECT_TRUE(tensor_of(got[1]).equals(tensor_of(small)));
  // A feed's and a fetched value's tensor alike: an error frame that says which kind of frame it
  // stands for, its key or device, and (for a ret) the fetch index.
  const std::string dev = "/job:w/replica:0/task:0/device:CPU:0";
  ASSERT_TRUE(c.send_batch(addr_of(*server),
                           {Frame(3, FeedFrame{"feed-key", patterned(DType::kFloat32, Shape{4096}, 3)}),
                            Frame(3, RetFrame{dev, 5, patterned(DType::kFloat32, Shape{4096}, 4)}), small})
                  .ok());
  ASSERT_TRUE(inbox.wait_for(3));
  got = inbox.take();
  ASSERT_EQ(got.size(), 3u);
  const ErrorFrame* feed = got[0].as<ErrorFrame>();
  ASSERT_NE(feed, nullptr) << frame_kind_name(got[0].kind());
  EXPECT_EQ(feed->of, FrameKind::kFeed);
  EXPECT_EQ(feed->key, "feed-key");
  EXPECT_NE(feed->error.find("the tensor of feed frame 'feed-key'"), std::string::npos) << feed->error;
  const ErrorFrame* ret = got[1].as<ErrorFrame>();
  ASSERT_NE(ret, nullptr) << frame_kind_name(got[1].kind());
  EXPECT_EQ(ret->of, FrameKind::kRet);
  EXPECT_EQ(ret->key, dev);
  EXPECT_EQ(ret->index, 5);
  EXPECT_NE(ret->error.find("ResourceExhausted"), std::string::npos) << ret->error;
  EXPECT_TRUE(tensor_of(got[2]).equals(tensor_of(small)));
  EXPECT_EQ(server->stats().handshakes_ok, 1);  // same connection throughout
}

TEST(TensorTransportTest, ReconnectsOnceAfterServerRestart) {
  // Every inbox outlives the server that delivers into it: declared first, destroyed last. A
  // delivery can still be inside the callback (notifying) when wait_for() returns, so an inbox
  // declared after `server` was destroyed under the last server's reader thread (ThreadSanitizer).
  Inbox inbox, inbox2, inbox3;
  auto o = options();
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  const uint16_t port = server->port();
  const std::string addr = addr_of(*server);
  TensorClient c(o);
  ASSERT_TRUE(c.send(addr, Frame(1, "a", Tensor::scalar<float>(1.f))).ok());
  ASSERT_TRUE(inbox.wait_for(1));
  server.reset();  // the pooled connection is now dead
  Status st = c.send(addr, Frame(2, "b", Tensor::scalar<float>(2.f)));
  EXPECT_EQ(st.code(), Code::kUnavailable) << st;
  EXPECT_NE(st.message().find(addr), std::string::npos) << st;
  server = start_server(o, inbox2, port);  // same address again
  ASSERT_TRUE(server);
  ASSERT_TRUE(c.send(addr, Frame(3, "c", Tensor::scalar<float>(3.f))).ok());
  ASSERT_TRUE(inbox2.wait_for(1));
  // Restart once more while the client still holds the old connection: send() must notice and
  // reconnect transparently.
  server.reset();
  server = start_server(o, inbox3, port);
  ASSERT_TRUE(server);
  ASSERT_TRUE(c.send(addr, Frame(4, "d", Tensor::scalar<float>(4.f))).ok());
  ASSERT_TRUE(inbox3.wait_for(1));
  EXPECT_EQ(key_of(inbox3.take()[0]), "d");
}

TEST(TensorTransportTest, InvalidSendsAreRefused) {
  TensorClient c(options());
  EXPECT_EQ(c.send("127.0.0.1:1", Frame(1, "k", Tensor())).code(), Code::kInvalidArgument);
  EXPECT_EQ(c.send("no-port", Frame(1, "k", Tensor::scalar<float>(1.f))).code(), Code::kInvalidArgument);
  EXPECT_EQ(c.send("host:99999", Frame(1, "k", Tensor::scalar<float>(1.f))).code(), Code::kInvalidArgument);
  // A port with nobody listening: Unavailable naming the address.
  auto l = listen_tcp("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  const std::string addr = "127.0.0.1:" + std::to_string(local_port(l->get()));
  l->reset();
  Status st = c.send(addr, Frame(1, "k", Tensor::scalar<float>(1.f)));
  EXPECT_EQ(st.code(), Code::kUnavailable) << st;
  EXPECT_NE(st.message().find(addr), std::string::npos) << st;
}

TEST(TensorTransportTest, ShutdownWithOpenConnectionsDoesNotHang) {
  Inbox inbox;
  auto o = options();
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  TensorClient c(o);
  ASSERT_TRUE(c.send(addr_of(*server), Frame(1, "k", Tensor::scalar<float>(1.f))).ok());
  auto silent = connect_tcp(addr_of(*server), milliseconds(5000));  // stuck in its handshake
  ASSERT_TRUE(silent.ok());
  Fd idle = authenticated_socket(*server, o);  // authenticated, idle between frames
  // Two authenticated connections; the silent one is still in the handshake (not a connection
  // with a reader of its own).
  ASSERT_TRUE(server->wait_for_stats([](const TensorServerStats& s) { return s.active_connections == 2; }, kWait));
  auto t0 = Clock::now();
  server.reset();
  EXPECT_LT(Clock::now() - t0, milliseconds(2000));
  EXPECT_TRUE(wait_for_close(idle.get()));
  EXPECT_TRUE(wait_for_close(silent->get()));
}

// ---------------------------------------------------------------------------------------------
// Request/reply on one connection: Frame::reply, ReplyChannel, send_batch_awaiting and
// await_replies.

using std::chrono::microseconds;

// A request carrying the int64 scalar `value` under `step`.
Frame request(int64_t step, int64_t value, const std::string& key = "req") {
  return Frame(step, key, Tensor::scalar<int64_t>(value));
}

// The answer to `req`: its int64 scalar plus one, under the request's step id.
Frame answer_to(const Frame& req) {
  return Frame(req.step_id, "reply/" + key_of(req), Tensor::scalar<int64_t>(tensor_of(req).data<int64_t>()[0] + 1));
}

// Starts a server that delivers to `cb` (any callback, not only an Inbox).
std::unique_ptr<TensorServer> start_server_with(const TransportOptions& o, TensorServer::Callback cb) {
  auto s = TensorServer::start(o, "127.0.0.1", 0, std::move(cb));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// A server callback that answers every request at once on the connection it came on; counts
// failed replies and signals each answer sent.
class EchoPlusOne {
 public:
  TensorServer::Callback callback() {
    return [this](const Frame& m) {
      Status st = m.reply ? m.reply->send_batch({answer_to(m)}) : Internal("no reply channel");
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (st.ok()) {
          ++answered_;
          channel_ids_.push_back(m.reply->id());
        } else {
          errors_.push_back(st);
        }
      }
      cv_.notify_all();
    };
  }
  bool wait_answered(int n, milliseconds timeout = kWait) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return answered_ >= n; });
  }
  std::vector<Status> errors() {
    std::lock_guard<std::mutex> lock(mu_);
    return errors_;
  }
  std::vector<uint64_t> channel_ids() {
    std::lock_guard<std::mutex> lock(mu_);
    return channel_ids_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int answered_ = 0;
  std::vector<uint64_t> channel_ids_;
  std::vector<Status> errors_;
};

// Waits until `pred` holds (checked whenever `cv` is notified under `mu`); false on timeout.
template <typename Pred>
bool wait_until(std::mutex& mu, std::condition_variable& cv, Pred pred, milliseconds timeout = kWait) {
  std::unique_lock<std::mutex> lock(mu);
  return cv.wait_for(lock, timeout, pred);
}

TEST(TensorTransportTest, RepliesComeBackOnTheRequestConnection) {
  auto o = options();
  EchoPlusOne echo;
  auto server = start_server_with(o, echo.callback());
  ASSERT_TRUE(server);
  const std::string addr = addr_of(*server);
  TensorClient client(o);

  auto conn = client.send_batch_awaiting(addr, {request(41, 1000)});
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE(*conn);
  std::vector<Frame> got;  // on_reply runs on this thread only
  std::atomic<bool> have{false};
  Status st = client.await_replies(
      **conn,
      [&](const Frame& m) {
        got.push_back(m);
        have.store(true);
      },
      [&] { return have.load(); }, microseconds(100), kWait);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(have.load());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].step_id, 41);
  EXPECT_EQ(key_of(got[0]), "reply/req");
  EXPECT_TRUE(error_of(got[0]).empty()) << error_of(got[0]);
  ASSERT_TRUE(tensor_of(got[0]).is_initialized());
  ASSERT_EQ(tensor_of(got[0]).dtype(), DType::kInt64);
  EXPECT_EQ(tensor_of(got[0]).shape(), Shape{});
  EXPECT_EQ(tensor_of(got[0]).data<int64_t>()[0], 1001);

  // A batch of three on the same (pooled) connection: three replies, in order, each keyed by
  // its request's step id and computed from its value.
  auto conn2 = client.send_batch_awaiting(addr, {request(-7, -5, "a"), request(8, 0, "b"), request(1LL << 40, 1LL << 41, "c")});
  ASSERT_TRUE(conn2.ok()) << conn2.status();
  EXPECT_EQ(conn2->get(), conn->get());
  got.clear();
  std::atomic<int> n{0};
  st = client.await_replies(
      **conn2,
      [&](const Frame& m) {
        got.push_back(m);
        n.fetch_add(1);
      },
      [&] { return n.load() >= 3; }, microseconds(0), kWait);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].step_id, -7);
  EXPECT_EQ(key_of(got[0]), "reply/a");
  EXPECT_EQ(tensor_of(got[0]).data<int64_t>()[0], -4);
  EXPECT_EQ(got[1].step_id, 8);
  EXPECT_EQ(key_of(got[1]), "reply/b");
  EXPECT_EQ(tensor_of(got[1]).data<int64_t>()[0], 1);
  EXPECT_EQ(got[2].step_id, 1LL << 40);
  EXPECT_EQ(key_of(got[2]), "reply/c");
  EXPECT_EQ(tensor_of(got[2]).data<int64_t>()[0], (1LL << 41) + 1);

  ASSERT_TRUE(echo.wait_answered(4));  // the callback records after its write returned
  EXPECT_TRUE(echo.errors().empty());
  auto ids = echo.channel_ids();  // every request came on one connection: one reply channel
  ASSERT_EQ(ids.size(), 4u);
  for (uint64_t id : ids) EXPECT_EQ(id, ids[0]);
  EXPECT_EQ(server->stats().handshakes_ok, 1);
  EXPECT_EQ(client.num_connections(), 1u);
}

TEST(TensorTransportTest, ManyThreadsAwaitOneConnection) {
  constexpr int kThreads = 6, kPerThread = 150, kSteps = kThreads * kPerThread;
  auto value_of = [](int64_t step) { return step * 7 - 3; };
  auto o = options();

  // The server queues requests; a separate thread answers them in rounds: once every client
  // thread still running has its request in, the whole round is answered in one batch in
  // reverse order of arrival, so replies meant for one thread are mostly read by another.
  std::mutex qmu;
  std::condition_variable qcv;
  std::vector<Frame> queue;
  bool stop = false;
  auto server = start_server_with(o, [&](const Frame& m) {
    {
      std::lock_guard<std::mutex> lock(qmu);
      queue.push_back(m);
    }
    qcv.notify_all();
  });
  ASSERT_TRUE(server);
  const std::string addr = addr_of(*server);

  std::atomic<int> replier_timeouts{0}, replier_errors{0}, rounds{0};
  std::thread replier([&] {
    std::vector<int> answered(kThreads, 0);
    int active = kThreads, total = 0;
    while (total < kSteps) {
      std::vector<Frame> round;
      {
        std::unique_lock<std::mutex> lock(qmu);
        if (!qcv.wait_for(lock, kWait, [&] { return stop || static_cast<int>(queue.size()) >= active; })) {
          ++replier_timeouts;
          return;
        }
        if (stop) return;
        round.swap(queue);
      }
      std::reverse(round.begin(), round.end());
      std::vector<Frame> replies;
      for (const auto& m : round) {
        replies.push_back(answer_to(m));
        int t = static_cast<int>(m.step_id / kPerThread);
        if (t < 0 || t >= kThreads) {
          ++replier_errors;
          continue;
        }
        if (++answered[static_cast<size_t>(t)] == kPerThread) --active;
        ++total;
      }
      // All requests came on the client's one pooled connection: one write for the round.
      bool one_channel = true;
      for (const auto& m : round) one_channel = one_channel && m.reply == round[0].reply;
      if (!one_channel) ++replier_errors;
      if (!round[0].reply->send_batch(replies).ok()) ++replier_errors;
      ++rounds;
    }
  });

  TensorClient client(o);
  std::unique_ptr<std::atomic<bool>[]> answered(new std::atomic<bool>[kSteps]());
  std::mutex book_mu;
  std::map<int64_t, int64_t> book;  // step -> reply value, from whichever thread read it
  std::atomic<int> duplicates{0}, strays{0}, read_for_others{0}, failures{0};
  std::mutex fail_mu;
  std::vector<std::string> failure_text;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      auto on_reply = [&, t](const Frame& m) {
        if (m.step_id < 0 || m.step_id >= kSteps || !tensor_of(m).is_initialized() || tensor_of(m).dtype() != DType::kInt64 ||
            key_of(m) != "reply/req") {
          ++strays;
          return;
        }
        {
          std::lock_guard<std::mutex> lock(book_mu);
          if (!book.emplace(m.step_id, tensor_of(m).data<int64_t>()[0]).second) ++duplicates;
        }
        if (m.step_id / kPerThread != t) ++read_for_others;
        answered[m.step_id].store(true);
      };
      for (int i = 0; i < kPerThread; ++i) {
        const int64_t step = int64_t{t} * kPerThread + i;
        auto fail = [&](const std::string& what) {
          ++failures;
          std::lock_guard<std::mutex> lock(fail_mu);
          failure_text.push_back("thread " + std::to_string(t) + " step " + std::to_string(step) + ": " + what);
        };
        auto conn = client.send_batch_awaiting(addr, {request(step, value_of(step))});
        if (!conn.ok()) return fail(conn.status().to_string());
        Status st = client.await_replies(**conn, on_reply, [&] { return answered[step].load(); }, microseconds(50), kWait);
        if (!st.ok()) return fail(st.to_string());
        if (!answered[step].load()) return fail("no reply within the wait");
      }
    });
  for (auto& th : threads) th.join();
  {
    std::lock_guard<std::mutex> lock(qmu);
    stop = true;
  }
  qcv.notify_all();
  replier.join();

  EXPECT_EQ(failures.load(), 0) << (failure_text.empty() ? "" : failure_text[0]);
  EXPECT_EQ(replier_timeouts.load(), 0);
  EXPECT_EQ(replier_errors.load(), 0);
  EXPECT_EQ(strays.load(), 0);
  EXPECT_EQ(duplicates.load(), 0);
  std::lock_guard<std::mutex> lock(book_mu);
  EXPECT_EQ(book.size(), static_cast<size_t>(kSteps));
  for (int64_t step = 0; step < kSteps; ++step) {
    ASSERT_TRUE(answered[step].load()) << step;
    auto it = book.find(step);
    ASSERT_NE(it, book.end()) << step;
    ASSERT_EQ(it->second, value_of(step) + 1) << step;
  }
  EXPECT_EQ(rounds.load(), kPerThread);  // lockstep: one round per request of each thread
  EXPECT_GT(read_for_others.load(), 0);  // readers did hand replies to other threads
  EXPECT_EQ(server->stats().handshakes_ok, 1);
  EXPECT_EQ(server->stats().frames_received, kSteps);
}

// A thread sleeping in await_replies wakes as soon as the thread reading the connection hands it
// its reply, without waiting for the reader's own reply.
TEST(TensorTransportTest, WaiterWakesWhenAnotherThreadReadsItsReply) {
  auto o = options();
  Inbox inbox;  // replies are written by hand below
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  const std::string addr = addr_of(*server);
  TensorClient client(o);
  auto conn = client.send_batch_awaiting(addr, {request(1, 10, "y"), request(2, 20, "x")});
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE(inbox.wait_for(2));
  auto reqs = inbox.take();
  ASSERT_EQ(reqs.size(), 2u);
  std::shared_ptr<ReplyChannel> chan = reqs[0].reply;
  ASSERT_TRUE(chan);
  ASSERT_EQ(reqs[1].reply, chan);

  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> ping_seen{false}, y_done{false}, x_done{false};
  std::thread::id ping_reader, x_reply_reader;  // guarded by mu
  int64_t x_value = 0;                          // guarded by mu
  bool x_started = false, x_finished = false;   // guarded by mu
  auto on_reply = [&](const Frame& m) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (m.step_id == 0) ping_reader = std::this_thread::get_id();
      if (m.step_id == 2) {
        x_reply_reader = std::this_thread::get_id();
        x_value = tensor_of(m).data<int64_t>()[0];
      }
    }
    if (m.step_id == 0) ping_seen.store(true);
    if (m.step_id == 1) y_done.store(true);
    if (m.step_id == 2) x_done.store(true);
    cv.notify_all();
  };
  // Waits far longer than the test's bounds: only a reply (or a failure) ends these early.
  constexpr milliseconds kLong{60000};
  Status y_result, x_result;
  std::thread y([&] {
    y_result = client.await_replies(**conn, on_reply, [&] { return y_done.load(); }, microseconds(0), kLong);
  });
  // A first frame that y reads itself: from then on y is the reader (it stays until its reply).
  EXPECT_TRUE(chan->send_batch({Frame(0, "ping", Tensor::scalar<int64_t>(0))}).ok());
  const std::thread::id y_id = y.get_id();
  bool y_reads = wait_until(mu, cv, [&] { return ping_seen.load(); });
  EXPECT_TRUE(y_reads);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(ping_reader, y_id);
  }
  std::thread x([&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      x_started = true;
    }
    cv.notify_all();
    x_result = client.await_replies(**conn, on_reply, [&] { return x_done.load(); }, microseconds(0), kLong);
    {
      std::lock_guard<std::mutex> lock(mu);
      x_finished = true;
    }
    cv.notify_all();
  });
  EXPECT_TRUE(wait_until(mu, cv, [&] { return x_started; }));
  Status st = chan->send_batch({answer_to(reqs[1])});  // x's reply only
  EXPECT_TRUE(st.ok()) << st;
  // x must return while y still waits for its own reply (sent only afterwards).
  EXPECT_TRUE(wait_until(mu, cv, [&] { return x_finished; }));
  EXPECT_FALSE(y_done.load());
  st = chan->send_batch({answer_to(reqs[0])});
  EXPECT_TRUE(st.ok()) << st;
  x.join();
  y.join();
  EXPECT_TRUE(x_result.ok()) << x_result;
  EXPECT_TRUE(x_done.load());
  EXPECT_TRUE(y_result.ok()) << y_result;
  EXPECT_TRUE(y_done.load());
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(x_value, 21);
  if (y_reads) {
    EXPECT_EQ(x_reply_reader, y_id);  // handed over by the reader
  }
}

TEST(TensorTransportTest, ClosedConnectionFailsEveryWaiter) {
  constexpr int kThreads = 4;
  auto o = options();
  Inbox inbox;  // keeps each request, and with it its reply channel; never answers
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  const std::string addr = addr_of(*server);
  TensorClient client(o);

  std::mutex mu;
  std::condition_variable cv;
  int waiting = 0;
  std::shared_ptr<ClientConnection> conn;
  std::atomic<bool> done_flags[kThreads] = {};
  std::vector<Status> results(kThreads);
  std::vector<int> replies_seen(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      auto c = client.send_batch_awaiting(addr, {request(100 + t, t)});
      if (!c.ok()) {
        results[static_cast<size_t>(t)] = c.status();
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        ++waiting;
        if (!conn) conn = *c;
      }
      cv.notify_all();
      // Nothing is ever answered: only a failed connection ends this before the 10 s wait.
      results[static_cast<size_t>(t)] = client.await_replies(
          **c, [&, t](const Frame&) { ++replies_seen[static_cast<size_t>(t)]; },
          [&, t] { return done_flags[t].load(); }, microseconds(20), kWait);
    });
  EXPECT_TRUE(inbox.wait_for(kThreads));
  EXPECT_TRUE(wait_until(mu, cv, [&] { return waiting == kThreads; }));
  auto requests = inbox.take();
  server.reset();  // closes every connection while the threads wait
  for (auto& th : threads) th.join();

  for (int t = 0; t < kThreads; ++t) {
    SCOPED_TRACE(t);
    EXPECT_EQ(results[static_cast<size_t>(t)].code(), Code::kUnavailable) << results[static_cast<size_t>(t)];
    EXPECT_FALSE(done_flags[t].load());
    EXPECT_EQ(replies_seen[static_cast<size_t>(t)], 0);
  }
  ASSERT_TRUE(conn);
  // Every later wait on that connection fails at once, and the pool no longer trusts it.
  std::atomic<bool> never{false};
  Status again = client.await_replies(*conn, [](const Frame&) {}, [&] { return never.load(); },
                                      microseconds(0), kWait);
  EXPECT_EQ(again.code(), Code::kUnavailable) << again;
  EXPECT_FALSE(client.is_connected(addr, true));
  // The reply channels the server handed out refuse to write once it stopped serving them.
  ASSERT_EQ(requests.size(), static_cast<size_t>(kThreads));
  for (const auto& r : requests) {
    ASSERT_TRUE(r.reply);
    Status st = r.reply->send_batch({answer_to(r)});
    EXPECT_EQ(st.code(), Code::kUnavailable) << st;
  }
}

TEST(TensorTransportTest, DisconnectFailsAwaitAndNextSendReconnects) {
  auto o = options();
  // Step 1 is never answered; every other request is answered at once.
  std::atomic<int> reply_errors{0};
  auto server = start_server_with(o, [&](const Frame& m) {
    if (m.step_id == 1) return;
    if (!m.reply || !m.reply->send_batch({answer_to(m)}).ok()) ++reply_errors;
  });
  ASSERT_TRUE(server);
  const std::string addr = addr_of(*server);
  TensorClient client(o);

  auto old_conn = client.send_batch_awaiting(addr, {request(1, 10)});
  ASSERT_TRUE(old_conn.ok()) << old_conn.status();
  ASSERT_TRUE(server->wait_for_stats([](const TensorServerStats& s) { return s.frames_received == 1; }, kWait));
  std::mutex mu;
  std::condition_variable cv;
  bool started = false;
  std::atomic<bool> old_done{false};
  Status old_result;
  std::thread waiter([&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      started = true;
    }
    cv.notify_all();
    old_result = client.await_replies(**old_conn, [&](const Frame&) { old_done.store(true); },
                                      [&] { return old_done.load(); }, microseconds(20), kWait);
  });
  EXPECT_TRUE(wait_until(mu, cv, [&] { return started; }));
  client.disconnect(addr);
  waiter.join();
  EXPECT_EQ(old_result.code(), Code::kUnavailable) << old_result;
  EXPECT_NE(old_result.message().find(addr), std::string::npos) << old_result;
  EXPECT_FALSE(old_done.load());
  EXPECT_EQ(client.num_connections(), 0u);
  EXPECT_FALSE(client.is_connected(addr, false));

  // A new request reconnects and gets its reply on the new connection.
  auto new_conn = client.send_batch_awaiting(addr, {request(2, 20)});
  ASSERT_TRUE(new_conn.ok()) << new_conn.status();
  EXPECT_NE(new_conn->get(), old_conn->get());
  std::vector<Frame> got;
  std::atomic<bool> have{false};
  Status st = client.await_replies(
      **new_conn,
      [&](const Frame& m) {
        got.push_back(m);
        have.store(true);
      },
      [&] { return have.load(); }, microseconds(20), kWait);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].step_id, 2);
  EXPECT_EQ(tensor_of(got[0]).data<int64_t>()[0], 21);
  EXPECT_EQ(reply_errors.load(), 0);
  EXPECT_EQ(server->stats().handshakes_ok, 2);
  EXPECT_EQ(client.num_connections(), 1u);
  // The old connection stays failed.
  std::atomic<bool> never{false};
  Status again = client.await_replies(**old_conn, [](const Frame&) {}, [&] { return never.load(); },
                                      microseconds(0), kWait);
  EXPECT_EQ(again.code(), Code::kUnavailable) << again;
}

TEST(TensorTransportTest, AwaitTimesOutQuietlyAndClosedChannelRefusesReplies) {
  auto o = options();
  Inbox inbox;  // answered by hand below
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  const std::string addr = addr_of(*server);
  TensorClient client(o);

  auto conn = client.send_batch_awaiting(addr, {request(5, 50)});
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE(inbox.wait_for(1));
  auto requests = inbox.take();
  ASSERT_EQ(requests.size(), 1u);
  std::shared_ptr<ReplyChannel> chan = requests[0].reply;
  ASSERT_TRUE(chan);

  // Nothing comes: OK once `wait` has passed, with done() still false.
  std::vector<Frame> got;
  std::atomic<bool> have{false};
  auto on_reply = [&](const Frame& m) {
    got.push_back(m);
    have.store(true);
  };
  auto done = [&] { return have.load(); };
  Status st = client.await_replies(**conn, on_reply, done, microseconds(100), milliseconds(50));
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_FALSE(have.load());
  EXPECT_TRUE(got.empty());
  EXPECT_TRUE(client.is_connected(addr, true));

  // The connection is still good: a late reply arrives on the next wait.
  ASSERT_TRUE(chan->send_batch({answer_to(requests[0])}).ok());
  st = client.await_replies(**conn, on_reply, done, microseconds(100), kWait);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].step_id, 5);
  EXPECT_EQ(tensor_of(got[0]).data<int64_t>()[0], 51);

  // A bad reply is refused before anything is written.
  Status bad = chan->send_batch({Frame(6, "uninitialised", Tensor())});
  EXPECT_EQ(bad.code(), Code::kInvalidArgument) << bad;

  // The client closes the connection: once the server has noticed, the channel refuses writes.
  client.disconnect(addr);
  ASSERT_TRUE(server->wait_for_stats([](const TensorServerStats& s) { return s.active_connections == 0; }, kWait));
  Status refused;
  const auto deadline = Clock::now() + kWait;
  do {
    refused = chan->send_batch({answer_to(requests[0])});
  } while (refused.ok() && Clock::now() < deadline);
  EXPECT_EQ(refused.code(), Code::kUnavailable) << refused;
  EXPECT_NE(refused.message().find(chan->peer()), std::string::npos) << refused;
}

TEST(TensorTransportTest, IsConnectedWhileReplyPending) {
  auto o = options();
  EchoPlusOne echo;
  auto server = start_server_with(o, echo.callback());
  ASSERT_TRUE(server);
  const std::string addr = addr_of(*server);
  TensorClient client(o);

  auto conn = client.send_batch_awaiting(addr, {request(6, 60)});
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE(echo.wait_answered(1));  // the reply is written; nobody has read it
  EXPECT_TRUE(client.is_connected(addr, true));
  EXPECT_TRUE(client.is_connected(addr, false));
  EXPECT_TRUE(client.ensure_connected(addr).ok());
  // Sending more neither drops nor replaces the connection the reply waits on.
  auto conn2 = client.send_batch_awaiting(addr, {request(7, 70)});
  ASSERT_TRUE(conn2.ok()) << conn2.status();
  EXPECT_EQ(conn2->get(), conn->get());
  ASSERT_TRUE(echo.wait_answered(2));
  EXPECT_TRUE(client.is_connected(addr, true));
  EXPECT_EQ(client.num_connections(), 1u);
  EXPECT_EQ(server->stats().handshakes_ok, 1);

  std::vector<Frame> got;
  std::atomic<int> n{0};
  Status st = client.await_replies(
      **conn,
      [&](const Frame& m) {
        got.push_back(m);
        n.fetch_add(1);
      },
      [&] { return n.load() >= 2; }, microseconds(100), kWait);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].step_id, 6);
  EXPECT_EQ(tensor_of(got[0]).data<int64_t>()[0], 61);
  EXPECT_EQ(got[1].step_id, 7);
  EXPECT_EQ(tensor_of(got[1]).data<int64_t>()[0], 71);
  EXPECT_TRUE(client.is_connected(addr, true));  // and with nothing pending
  EXPECT_TRUE(echo.errors().empty());
}

// A reply nobody read, then the server's close: the pending bytes must not hide the close. The
// next send goes to the restarted server on a new connection, not into the dead one.
TEST(TensorTransportTest, UnreadReplyDoesNotHideAServerRestart) {
  auto o = options();
  EchoPlusOne echo;
  auto first = start_server_with(o, echo.callback());
  ASSERT_TRUE(first);
  const uint16_t port = first->port();
  const std::string addr = addr_of(*first);
  TensorClient client(o);
  auto conn = client.send_batch_awaiting(addr, {request(1, 10)});
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE(echo.wait_answered(1));  // the reply waits unread in the client's socket
  first.reset();                       // the server closes its end behind it
  Inbox inbox;
  auto second = start_server(o, inbox, port);
  ASSERT_TRUE(second);
  EXPECT_FALSE(client.is_connected(addr, true));
  ASSERT_TRUE(client.send(addr, request(2, 20)).ok());
  ASSERT_TRUE(inbox.wait_for(1)) << "the send after the restart was lost";
  auto got = inbox.take();
  EXPECT_EQ(got[0].step_id, 2);
  EXPECT_EQ(tensor_of(got[0]).data<int64_t>()[0], 20);
  // The old connection is failed for whoever still waits on it; the pool has the new one only.
  std::atomic<bool> never{false};
  Status st = client.await_replies(**conn, [](const Frame&) {}, [&] { return never.load(); },
                                   microseconds(0), kWait);
  EXPECT_EQ(st.code(), Code::kUnavailable) << st;
  EXPECT_EQ(client.num_connections(), 1u);
}

// A connection an await found broken is not counted as open, even without probing.
TEST(TensorTransportTest, ConnectionFoundBrokenIsNotCounted) {
  auto o = options();
  Inbox inbox;
  auto server = start_server(o, inbox);
  ASSERT_TRUE(server);
  const std::string addr = addr_of(*server);
  TensorClient client(o);
  auto conn = client.send_batch_awaiting(addr, {request(1, 1)});
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE(inbox.wait_for(1));
  server.reset();
  std::atomic<bool> never{false};
  Status st = client.await_replies(**conn, [](const Frame&) {}, [&] { return never.load(); },
                                   microseconds(0), kWait);
  EXPECT_EQ(st.code(), Code::kUnavailable) << st;
  EXPECT_FALSE(client.is_connected(addr, false));
  EXPECT_FALSE(client.is_connected(addr, true));
  EXPECT_EQ(client.num_connections(), 0u);
}

// A step's outcome as the device actor sends it: a large fetched tensor, then a small frame
// (kDone). The reader wakes for large payloads in parts (SO_RCVLOWAT); a reader that left the
// socket's low-water mark raised after the large payload never saw the small frame behind it
// (poll(POLLIN) honours the mark), so await_replies waited for its whole bound with the reply
// sitting in the socket: the lost replies of multi-MB fetches over plain TCP.
class BigThenSmall {
 public:
  explicit BigThenSmall(int64_t floats) : floats_(floats) {}
  TensorServer::Callback callback() {
    return [this](const Frame& m) {
      Tensor big(DType::kFloat32, Shape{floats_});
      float* p = big.data<float>();
      for (int64_t i = 0; i < floats_; ++i) p[i] = static_cast<float>(m.step_id + i % 1000);
      Frame a(m.step_id, "big", big);
      Frame b(m.step_id, "small", Tensor::scalar<int64_t>(m.step_id));
      Status st = m.reply ? m.reply->send_batch({a, b}) : Internal("no reply channel");
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++sent_;
        if (!st.ok()) errors_.push_back(st);
      }
      cv_.notify_all();
    };
  }
  // Waits until `n` answers were written whole into the socket.
  bool wait_sent(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWait, [&] { return sent_ >= n; });
  }
  std::vector<Status> errors() {
    std::lock_guard<std::mutex> lock(mu_);
    return errors_;
  }

 private:
  const int64_t floats_;
  std::mutex mu_;
  std::condition_variable cv_;
  int sent_ = 0;
  std::vector<Status> errors_;
};

// One round trip of BigThenSmall: the small frame must arrive within await_replies' bound (a
// reply still in the socket when the bound passes is the defect). `read_after_sent`: the client
// starts reading only once the server's write returned, so every byte is in the socket already.
void big_then_small_round_trip(TensorClient& client, const std::string& addr, BigThenSmall& server_side,
                               int64_t step, int64_t floats, bool read_after_sent, int sent_before) {
  auto conn = client.send_batch_awaiting(addr, {request(step, 0)});
  ASSERT_TRUE(conn.ok()) << conn.status();
  if (read_after_sent) {
    ASSERT_TRUE(server_side.wait_sent(sent_before + 1));
  }
  bool got_big = false, got_small = false;
  std::atomic<bool> done{false};
  Status st = client.await_replies(
      **conn,
      [&](const Frame& m) {
        ASSERT_EQ(m.step_id, step);
        if (key_of(m) == "big") {
          ASSERT_EQ(tensor_of(m).num_elements(), floats);
          const float* p = tensor_of(m).data<float>();
          EXPECT_EQ(p[0], static_cast<float>(step));
          EXPECT_EQ(p[floats - 1], static_cast<float>(step + (floats - 1) % 1000));
          got_big = true;
        } else {
          EXPECT_EQ(key_of(m), "small");
          EXPECT_TRUE(got_big) << "the small frame came before the big one";
          got_small = true;
          done.store(true);
        }
      },
      [&] { return done.load(); }, microseconds(0), kWait);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(got_big) << "step " << step << ": the " << floats * 4 << "-byte reply did not arrive within "
                       << kWait.count() << " ms";
  ASSERT_TRUE(got_small) << "step " << step << ": the small frame behind a " << floats * 4
                         << "-byte reply did not arrive within " << kWait.count() << " ms";
}

// Deterministic: buffers large enough for the whole answer, read only once it is all there (the
// reader's last large recv then takes everything at once).
TEST(TensorTransportTest, SmallFrameBehindAMultiMegabyteReplyIsReadAtOnce) {
  auto o = options();
  o.socket_buffer_bytes = 4 << 20;
  for (int64_t floats : {int64_t{300} << 10, int64_t{600} << 10}) {  // 1.2 MB and 2.4 MB
    SCOPED_TRACE(floats * 4);
    BigThenSmall answers(floats);
    auto server = start_server_with(o, answers.callback());
    ASSERT_TRUE(server);
    TensorClient client(o);
    for (int i = 0; i < 4 && !HasFatalFailure(); ++i)
      big_then_small_round_trip(client, addr_of(*server), answers, 100 + i, floats, true, i);
    if (HasFatalFailure()) return;
    EXPECT_TRUE(answers.errors().empty());
  }
}

// As a fetch loop meets it: default (auto-tuned) buffers, one connection, back-to-back fetches of
// sizes from 1 KiB to 16 MiB, the reader racing the writer.
TEST(TensorTransportTest, BackToBackFetchesOfEverySizeOnOneConnection) {
  auto o = options();
  for (int64_t bytes : {int64_t{1} << 10, int64_t{1} << 20, int64_t{3} << 20, int64_t{6272000}, int64_t{16} << 20}) {
    SCOPED_TRACE(bytes);
    const int64_t floats = bytes / 4;
    BigThenSmall answers(floats);
    auto server = start_server_with(o, answers.callback());
    ASSERT_TRUE(server);
    TensorClient client(o);
    for (int i = 0; i < 12 && !HasFatalFailure(); ++i)
      big_then_small_round_trip(client, addr_of(*server), answers, 7 + i, floats, false, i);
    if (HasFatalFailure()) return;
    EXPECT_TRUE(answers.errors().empty());
  }
}

// Both processes' roles at once, in one process: two servers, each with a client to the other;
// on each side three threads share the one connection to the other side and fetch alternately a
// 6 MB tensor (then a small frame) and a small answer alone, so multi-MB replies and small
// requests cross on every connection in both directions at the same time. Every fetch must be
// answered, with its own values, within the bound.
TEST(TensorTransportTest, MultiMegabyteRepliesAndSmallRequestsCrossInBothDirections) {
  constexpr int kThreads = 3, kPerThread = 16;
  constexpr int64_t kFloats = 1568000;  // 6.27 MB, the seed CNN's fc1 order of size
  auto o = options();
  // Requests with value > 0 get that many floats then a small frame; value 0 only the small frame.
  auto answer = [](const Frame& m) {
    const int64_t n = tensor_of(m).data<int64_t>()[0];
    std::vector<Frame> out;
    if (n > 0) {
      Tensor big(DType::kFloat32, Shape{n});
      float* p = big.data<float>();
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>((m.step_id + i) % 4096);
      out.push_back(Frame(m.step_id, "big", big));
    }
    out.push_back(Frame(m.step_id, "small", Tensor::scalar<int64_t>(m.step_id * 3)));
    Status st = m.reply->send_batch(out);
    EXPECT_TRUE(st.ok()) << st;
  };
  auto a = start_server_with(o, answer);
  auto b = start_server_with(o, answer);
  ASSERT_TRUE(a && b);
  TensorClient from_a(o), from_b(o);

  struct Fetch {
    bool big = false, small = false;
  };
  std::mutex mu;
  std::map<int64_t, Fetch> got;  // by step id, filled by whichever thread reads
  std::atomic<int> failures{0};
  auto on_reply = [&](const Frame& m) {
    std::lock_guard<std::mutex> l(mu);
    Fetch& f = got[m.step_id];
    if (key_of(m) == "big") {
      const float* p = tensor_of(m).data<float>();
      const int64_t n = tensor_of(m).num_elements();
      if (n != kFloats || p[0] != static_cast<float>(m.step_id % 4096) ||
          p[n - 1] != static_cast<float>((m.step_id + n - 1) % 4096))
        failures.fetch_add(1);
      f.big = true;
    } else if (key_of(m) == "small" && tensor_of(m).data<int64_t>()[0] == m.step_id * 3) {
      f.small = true;
    } else {
      failures.fetch_add(1);
    }
  };
  auto fetcher = [&](TensorClient& client, const std::string& addr, int64_t first_step) {
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t step = first_step + i;
      const bool big = i % 2 == 0;
      auto conn = client.send_batch_awaiting(addr, {request(step, big ? kFloats : 0)});
      if (!conn.ok()) {
        ADD_FAILURE() << conn.status();
        return;
      }
      auto done = [&] {
        auto it = got.find(step);  // done() runs under the connection's lock: only a lookup
        return it != got.end() && it->second.small;
      };
      auto locked_done = [&] {
        std::lock_guard<std::mutex> l(mu);
        return done();
      };
      Status st = client.await_replies(**conn, on_reply, locked_done, microseconds(0), kWait);
      std::lock_guard<std::mutex> l(mu);
      if (!st.ok() || !done() || got[step].big != big) {
        ADD_FAILURE() << "step " << step << " (" << (big ? "6 MB" : "small") << " answer): " << st
                      << (done() ? "" : ", not answered within the bound");
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back(fetcher, std::ref(from_a), addr_of(*b), 1000 * (t + 1));
    threads.emplace_back(fetcher, std::ref(from_b), addr_of(*a), -1000 * (t + 1));
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(got.size(), size_t{2 * kThreads * kPerThread});
  }
  // Not under `mu`: await_replies() runs `locked_done` (which takes `mu`) under the connection's
  // lock, and num_connections() takes the client's lock, which send() holds while it takes the
  // connection's. Holding `mu` here closed that cycle (ThreadSanitizer: lock-order-inversion).
  EXPECT_EQ(from_a.num_connections(), 1u);
  EXPECT_EQ(from_b.num_connections(), 1u);
}

TEST(WireTest, ParseHostPort) {
  auto hp = parse_host_port("localhost:2222");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "localhost");
  EXPECT_EQ(hp->port, 2222);
  hp = parse_host_port("[::1]:80");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "::1");
  EXPECT_FALSE(parse_host_port(":80").ok());
  EXPECT_FALSE(parse_host_port("a:b").ok());
  EXPECT_FALSE(parse_host_port("a:65536").ok());
}

TEST(WireTest, QueryAndStateFramesRoundTripAndRefuseExtras) {
  StepFields q;
  q.device = "/job:ps/replica:0/task:0/device:CPU:0";
  q.reply_to = "10.0.0.1:5";
  const std::string qk = encode_step_fields(FrameKind::kQuery, q);
  auto qd = decode_step_fields(FrameKind::kQuery, qk.data(), qk.size());
  ASSERT_TRUE(qd.ok()) << qd.status();
  EXPECT_EQ(qd->device, q.device);
  EXPECT_EQ(qd->reply_to, q.reply_to);
  StepFields a;
  a.device = q.device;
  a.number = 1;
  const std::string ak = encode_step_fields(FrameKind::kState, a);
  auto ad = decode_step_fields(FrameKind::kState, ak.data(), ak.size());
  ASSERT_TRUE(ad.ok()) << ad.status();
  EXPECT_EQ(ad->number, 1);
  // A query's fields read as a state's are refused (a number field of the wrong size).
  EXPECT_FALSE(decode_step_fields(FrameKind::kState, qk.data(), qk.size()).ok());
  // Neither kind carries a tensor or error text.
  std::string p;
  ASSERT_TRUE(encode_frame_prefix(FrameKind::kQuery, 3, qk, DType::kInvalid, {}, 0, "why", &p).ok());
  auto h = decode_frame_fixed(reinterpret_cast<const unsigned char*>(p.data()), FrameLimits{});
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("query frame carries error text"), std::string::npos) << h.status();
  ASSERT_TRUE(encode_frame_prefix(FrameKind::kState, 3, ak, DType::kFloat32, {2}, 8, "", &p).ok());
  h = decode_frame_fixed(reinterpret_cast<const unsigned char*>(p.data()), FrameLimits{});
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("state frame carries tensor fields"), std::string::npos) << h.status();
}

TEST(WireTest, HeaderRoundTripAndLayout) {
  std::string p;
  ASSERT_TRUE(encode_frame_prefix(FrameKind::kTensor, -9, "key", DType::kInt64, {2, 3}, 48, "", &p).ok());
  ASSERT_EQ(p.size(), kFrameFixedBytes + 16 + 3);
  EXPECT_EQ(p.substr(0, 4), "AFTF");
  auto h = decode_frame_fixed(reinterpret_cast<const unsigned char*>(p.data()), FrameLimits{});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->step_id, -9);
  EXPECT_EQ(h->dtype, DType::kInt64);
  EXPECT_EQ(h->rank, 2);
  EXPECT_EQ(h->key_bytes, 3u);
  EXPECT_EQ(h->data_bytes, 48u);
  auto dims = decode_frame_dims(*h, reinterpret_cast<const unsigned char*>(p.data()) + kFrameFixedBytes);
  ASSERT_TRUE(dims.ok());
  EXPECT_EQ(*dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(p.substr(kFrameFixedBytes + 16), "key");
  EXPECT_FALSE(encode_frame_prefix(FrameKind::kTensor, 0, "k", DType::kFloat32, std::vector<int64_t>(33, 1), 4, "", &p).ok());
}

}  // namespace
}  // namespace net
}  // namespace actorflow
