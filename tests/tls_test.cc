// TLS 1.3 with mutual authentication (net/tls.h, net/certs.h): certificates made as `actorflow
// certs` makes them, the data plane through TLS (values, large tensors, replies), refusals of
// every wrong certificate (another CA, another host, another task, none), an on-path observer
// that sees no plaintext and an on-path attacker whose altered byte is detected, and a real
// multi-process cluster with TLS on and no secret.
#include <gtest/gtest.h>

#include <regex>
#include <openssl/ssl.h>
#include <netinet/in.h>
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include "actors/control_plane.h"
#include "actors/membership.h"
#include "actors/messages.h"
#include "actors/server.h"
#include "config/cluster.h"
#include "net/certs.h"
#include "net/socket.h"
#include "net/tensor_transport.h"
#include "net/tls.h"
#include "tests/util/dir_watch.h"
#include "tests/util/frames.h"
#include "tests/util/process.h"

#include <caf/io/all.hpp>

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::key_of;
using testing::tensor_of;
using testing::ChildProcess;
using testing::free_port;
using testing::TempDir;

// A cluster CA in a temp dir with certificates for tasks a/0 and b/0 on 127.0.0.1.
struct Pki {
  TempDir dir;
  Pki() {
    Status st = net::write_cluster_certs(dir.path(), {{"a/0", {"127.0.0.1"}}, {"b/0", {"127.0.0.1"}}, {"client", {}}},
                                         false);
    EXPECT_TRUE(st.ok()) << st;
  }
  std::shared_ptr<const net::TlsContext> ctx(const std::string& name) const {
    auto c = net::TlsContext::load(net::cluster_tls_files(dir.path(), name));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : nullptr;
  }
};

net::TransportOptions options(const std::string& task, std::shared_ptr<const net::TlsContext> tls) {
  net::TransportOptions o;
  o.cluster_fingerprint = "fp";
  o.task_name = task;
  o.tls = std::move(tls);
  o.handshake_timeout = 3000ms;
  return o;
}

Tensor filled(int64_t n, float base) {
  Tensor t(DType::kFloat32, Shape({n}));
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = base + static_cast<float>(i % 1000);
  return t;
}

// Collects what a TensorServer delivers.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<net::Frame> got;
  net::TensorServer::Callback cb() {
    return [this](const net::Frame& m) {
      std::lock_guard<std::mutex> l(mu);
      got.push_back(m);
      cv.notify_all();
    };
  }
  // True once `n` messages were delivered (the server counts a frame before its callback runs).
  bool wait_for(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, timeout, [&] { return got.size() >= n; });
  }
  size_t size() {
    std::lock_guard<std::mutex> l(mu);
    return got.size();
  }
};

TEST(TlsTest, CertsAreWrittenMode0600AndNotOverwritten) {
  Pki pki;
  for (const char* f : {"ca.crt", "ca.key", "a-0.crt", "a-0.key", "b-0.key", "client.crt", "client.key"}) {
    struct stat st {};
    ASSERT_EQ(::stat((pki.dir.path() + "/" + f).c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
  Status again = net::write_cluster_certs(pki.dir.path(), {{"a/0", {"127.0.0.1"}}}, false);
  EXPECT_EQ(again.code(), Code::kAlreadyExists) << again;
  EXPECT_NE(again.message().find("ca.crt"), std::string::npos) << again;
  auto ctx = pki.ctx("a/0");
  ASSERT_TRUE(ctx);
  EXPECT_EQ(ctx->identity(), "a/0");
}

// `actorflow certs --out DIR` under umask 000, DIR watched with inotify: every key and
// certificate is mode 0600 from its creation on (no event shows a group or other bit, no mode
// change after creation), none is left under a temporary name; the same with --force over the
// first run's files (failed before: each file was fchmod-ed after it was created).
TEST(TlsTest, CertsAreNeverReadableByOthersNotEvenWhileWritten) {
  testing::TempDir in;
  const std::string cluster =
      in.write("cluster.toml", "[cluster]\ntls_dir = \"certs\"\n[jobs]\nworker = [\"localhost:2223\"]\n");
  ASSERT_EQ(::mkdir(in.file("certs").c_str(), 0700), 0);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    testing::DirWatch watch(in.file("certs"));
    ASSERT_TRUE(watch.ok());
    std::vector<std::string> argv = {"/bin/sh", "-c", "umask 000 && exec \"$0\" \"$@\"", testing::binary("actorflow"),
                                     "certs", "--cluster", cluster, "--out", in.file("certs")};
    if (round == 1) argv.push_back("--force");
    auto p = testing::ChildProcess::start(argv, {}, {});
    ASSERT_TRUE(p);
    auto code = p->await_exit(std::chrono::seconds(60));
    watch.stop();
    ASSERT_TRUE(code.ok()) << code.status();
    ASSERT_EQ(*code, 0) << p->output();
    int n = 0;
    if (DIR* d = ::opendir(in.file("certs").c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        ++n;
        EXPECT_TRUE(name.size() > 4 && (name.compare(name.size() - 4, 4, ".crt") == 0 ||
                                        name.compare(name.size() - 4, 4, ".key") == 0))
            << name << ": a file left behind";
        EXPECT_TRUE(testing::private_from_creation(watch, in.file("certs"), name));
      }
      ::closedir(d);
    }
    EXPECT_EQ(n, 8) << "ca, worker-0, client and operator: a .crt and a .key each";
  }
}

TEST(TlsTest, LoadErrorsNameTheFile) {
  Pki pki;
  Pki other;
  auto files = net::cluster_tls_files(pki.dir.path(), "a/0");
  auto missing = files;
  missing.cert = pki.dir.path() + "/nope.crt";
  auto r = net::TlsContext::load(missing);
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("nope.crt"), std::string::npos) << r.status();
  // A key of another task.
  auto wrong_key = files;
  wrong_key.key = pki.dir.path() + "/b-0.key";
  r = net::TlsContext::load(wrong_key);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("does not belong"), std::string::npos) << r.status();
  // A certificate of another CA.
  auto foreign = files;
  foreign.ca = other.dir.path() + "/ca.crt";
  r = net::TlsContext::load(foreign);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not valid under the CA"), std::string::npos) << r.status();
  // Not PEM.
  auto junk = files;
  junk.ca = pki.dir.write("junk.crt", "not a certificate\n");
  r = net::TlsContext::load(junk);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("junk.crt"), std::string::npos) << r.status();
  // A key that other users may read.
  ASSERT_EQ(::chmod(files.key.c_str(), 0644), 0);
  r = net::TlsContext::load(files);
  EXPECT_EQ(r.status().code(), Code::kPermissionDenied) << r.status();
  // A FIFO as the CA is refused at once, never read.
  auto fifo = files;
  fifo.ca = pki.dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.ca.c_str(), 0600), 0);
  ASSERT_EQ(::chmod(files.key.c_str(), 0600), 0);
  r = net::TlsContext::load(fifo);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status();
}

TEST(TlsTest, CertificateNamesItsTask) {
  EXPECT_TRUE(net::certificate_allows("worker/1", "worker/1"));
  EXPECT_TRUE(net::certificate_allows("worker/1", "/job:worker/replica:0/task:1"));
  EXPECT_FALSE(net::certificate_allows("worker/1", "worker/0"));
  EXPECT_FALSE(net::certificate_allows("worker/1", "/job:ps/replica:0/task:1"));
  EXPECT_TRUE(net::certificate_allows("client", "/job:_status/replica:0/task:0"));
  EXPECT_FALSE(net::certificate_allows("client", "ps/0"));
  // A wildcard or an empty name allows nothing (failed before: "*" was accepted as any task).
  EXPECT_FALSE(net::certificate_allows("*", "ps/0"));
  EXPECT_FALSE(net::certificate_allows("*", "/job:_status/replica:0/task:0"));
  EXPECT_FALSE(net::certificate_allows("ps/*", "ps/0"));
  EXPECT_FALSE(net::certificate_allows("", ""));
  // A server must be the task dialled; tools' certificates and wildcards serve as no task.
  EXPECT_TRUE(net::certificate_is_task("ps/0", "/job:ps/replica:0/task:0"));
  EXPECT_TRUE(net::certificate_is_task("ps/0", ""));
  EXPECT_FALSE(net::certificate_is_task("worker/1", "ps/0"));
  EXPECT_FALSE(net::certificate_is_task("client", ""));
  EXPECT_FALSE(net::certificate_is_task("operator", ""));
  EXPECT_FALSE(net::certificate_is_task("*", "ps/0"));
  EXPECT_FALSE(net::certificate_is_task("", ""));
  // The operator's job (fault plans: `actorflow chaos`) needs the "operator" certificate.
  EXPECT_FALSE(net::certificate_allows("client", "/job:_chaos/replica:0/task:0"));
  EXPECT_TRUE(net::certificate_allows("operator", "/job:_chaos/replica:0/task:0"));
  EXPECT_TRUE(net::certificate_allows("operator", "/job:_status/replica:0/task:0"));
  EXPECT_FALSE(net::certificate_allows("operator", "worker/0"));
}

TEST(TlsTest, TensorsAndRepliesCrossTheDataPlaneThroughTls) {
  Pki pki;
  Inbox inbox;
  std::shared_ptr<net::ReplyChannel> chan;
  std::mutex chan_mu;
  auto server = net::TensorServer::start(options("a/0", pki.ctx("a/0")), "127.0.0.1", 0,
                                         [&](const net::Frame& m) {
                                           {
                                             std::lock_guard<std::mutex> l(chan_mu);
                                             chan = m.reply;
                                           }
                                           inbox.cb()(m);
                                         });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string addr = "127.0.0.1:" + std::to_string((*server)->port());
  net::TensorClient client(options("b/0", pki.ctx("b/0")));
  // A small tensor, and one of 8 MiB (many TLS records, partial writes on both sides).
  net::Frame small(7, "small", filled(3, 1.5f));
  net::Frame big(8, "big", filled(2 << 20, -4.f));
  ASSERT_TRUE(client.send(addr, small).ok());
  ASSERT_TRUE(client.send(addr, big).ok());
  ASSERT_TRUE(inbox.wait_for(2, 20s));
  ASSERT_EQ(inbox.size(), 2u);
  EXPECT_EQ(key_of(inbox.got[0]), "small");
  EXPECT_EQ(tensor_of(inbox.got[0]).data<float>()[2], 3.5f);
  ASSERT_EQ(tensor_of(inbox.got[1]).num_elements(), 2 << 20);
  const float* b = tensor_of(inbox.got[1]).data<float>();
  for (int64_t i = 0; i < (2 << 20); i += 4099) ASSERT_EQ(b[i], -4.f + static_cast<float>(i % 1000)) << i;
  EXPECT_EQ(b[(2 << 20) - 1], -4.f + static_cast<float>(((2 << 20) - 1) % 1000));
  // A reply on the request's own connection comes back through the same session.
  auto conn = client.send_batch_awaiting(addr, {net::Frame(9, "ask", filled(1, 0.f))});
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE(inbox.wait_for(3, 10s));
  {
    std::lock_guard<std::mutex> l(chan_mu);
    ASSERT_TRUE(chan);
    ASSERT_TRUE(chan->send_batch({net::Frame(9, "answer", filled(2, 40.f))}).ok());
  }
  std::vector<net::Frame> replies;
  Status st = client.await_replies(
      **conn, [&](const net::Frame& m) { replies.push_back(m); }, [&] { return !replies.empty(); }, 0us, 10s);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(key_of(replies[0]), "answer");
  EXPECT_EQ(tensor_of(replies[0]).data<float>()[1], 41.f);
  EXPECT_EQ((*server)->stats().handshakes_ok, 1);
  // The data plane reads and writes its sessions itself: no relay thread carries it.
  EXPECT_EQ(net::tls_relays_running(), 0);
}

// One connection, both directions at once: the client keeps writing requests (small and large,
// so records of both kinds interleave with the batching of bulk mode) while the server's reader
// answers each on the same connection at once, so on both ends a reader and a writer share one
// TLS session. Every reply must arrive whole and in order.
TEST(TlsTest, RequestsAndRepliesCrossOneSessionInBothDirectionsAtOnce) {
  Pki pki;
  std::atomic<int> served{0};
  auto server = net::TensorServer::start(options("a/0", pki.ctx("a/0")), "127.0.0.1", 0,
                                         [&](const net::Frame& m) {
                                           // Echo: the request's size, its first value plus 1.
                                           // Counted before the reply goes out: once the client
                                           // holds every reply, every request was counted.
                                           served.fetch_add(1);
                                           const int64_t n = tensor_of(m).num_elements();
                                           Tensor t = filled(n, tensor_of(m).data<float>()[0] + 1.f);
                                           Status st = m.reply->send_batch(
                                               {net::Frame(m.step_id, "re:" + key_of(m), t)});
                                           EXPECT_TRUE(st.ok()) << st;
                                         });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string addr = "127.0.0.1:" + std::to_string((*server)->port());
  net::TensorClient client(options("b/0", pki.ctx("b/0")));
  constexpr int kRequests = 60;
  auto size_of = [](int i) -> int64_t { return i % 3 == 0 ? (300 << 10) : 7 + i; };  // 1.2 MB or a few floats
  auto request = [&](int i) {
    return client.send_batch_awaiting(
        addr, {net::Frame(i, "q" + std::to_string(i), filled(size_of(i), static_cast<float>(i)))});
  };
  auto first = request(0);
  ASSERT_TRUE(first.ok()) << first.status();
  std::shared_ptr<net::ClientConnection> conn = *first;
  // Replies are read on this thread while the main thread goes on writing requests.
  std::vector<net::Frame> replies;
  Status st;
  std::thread reader([&] {
    st = client.await_replies(
        *conn, [&](const net::Frame& m) { replies.push_back(m); },
        [&] { return replies.size() == static_cast<size_t>(kRequests); }, 0us, 30s);
  });
  for (int i = 1; i < kRequests; ++i) {
    auto c = request(i);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) break;
    EXPECT_EQ(conn.get(), c->get()) << "one pooled connection";
  }
  reader.join();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(replies.size(), static_cast<size_t>(kRequests));
  for (int i = 0; i < kRequests; ++i) {
    const net::Frame& r = replies[static_cast<size_t>(i)];
    ASSERT_EQ(key_of(r), "re:q" + std::to_string(i));
    ASSERT_EQ(r.step_id, i);
    ASSERT_EQ(tensor_of(r).num_elements(), size_of(i));
    const float* v = tensor_of(r).data<float>();
    const int64_t n = size_of(i);
    for (int64_t k = 0; k < n; k += (n > 1000 ? 997 : 1))
      ASSERT_EQ(v[k], static_cast<float>(i) + 1.f + static_cast<float>(k % 1000)) << i << " " << k;
    ASSERT_EQ(v[n - 1], static_cast<float>(i) + 1.f + static_cast<float>((n - 1) % 1000));
  }
  EXPECT_EQ(served.load(), kRequests);
  EXPECT_EQ((*server)->stats().bad_frames, 0);
}

// A peer that stops reading: a large write over TLS fails within the I/O timeout, naming the
// peer, instead of blocking forever (the TLS socket is non-blocking; the stream bounds its waits).
// The client asks once and never reads the answer; the server answers with 256 MiB.
TEST(TlsTest, AWriteToAPeerThatStopsReadingFailsWithinTheIoTimeout) {
  Pki pki;
  std::mutex mu;
  std::condition_variable cv;
  bool answered = false;
  Status answer;
  std::chrono::steady_clock::duration took{};
  net::TransportOptions so = options("a/0", pki.ctx("a/0"));
  so.io_timeout = 300ms;
  auto server = net::TensorServer::start(so, "127.0.0.1", 0, [&](const net::Frame& m) {
    const auto t0 = std::chrono::steady_clock::now();
    Status st = m.reply->send_batch({net::Frame(m.step_id, "huge", filled(64 << 20, 0.f))});
    std::lock_guard<std::mutex> l(mu);
    took = std::chrono::steady_clock::now() - t0;
    answer = st;
    answered = true;
    cv.notify_all();
  });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string addr = "127.0.0.1:" + std::to_string((*server)->port());
  net::TensorClient client(options("b/0", pki.ctx("b/0")));
  auto conn = client.send_batch_awaiting(addr, {net::Frame(1, "ask", filled(1, 0.f))});
  ASSERT_TRUE(conn.ok()) << conn.status();
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, 30s, [&] { return answered; }));
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.code(), Code::kUnavailable) << answer;
  EXPECT_NE(answer.message().find("stalled"), std::string::npos) << answer;
  EXPECT_NE(answer.message().find("b/0"), std::string::npos) << answer;
  EXPECT_LT(took, 20s);
}

// Connects a client with `ctx` claiming `task` to a TLS server of pki's a/0; returns the send's
// status and checks the server refused it (and was not handed a connection).
Status refused_send(const Pki& pki, std::shared_ptr<const net::TlsContext> ctx, const std::string& task,
                    const std::string& server_name = "a/0") {
  Inbox inbox;
  auto server = net::TensorServer::start(options(server_name, pki.ctx(server_name)), "127.0.0.1", 0, inbox.cb());
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return server.status();
  net::TensorClient client(options(task, std::move(ctx)));
  Status st = client.send("127.0.0.1:" + std::to_string((*server)->port()),
                          net::Frame(1, "k", filled(4, 1.f)));
  // Whatever the client saw, the server must never deliver the tensor or count the connection.
  (*server)->wait_for_stats([](const net::TensorServerStats& s) { return s.handshakes_rejected >= 1; }, 5s);
  EXPECT_EQ(inbox.size(), 0u);
  EXPECT_EQ((*server)->stats().handshakes_ok, 0);
  return st;
}

TEST(TlsTest, CertificateOfAnotherCaIsRefused) {
  Pki pki;
  Pki stranger;
  Status st = refused_send(pki, stranger.ctx("b/0"), "b/0");
  EXPECT_FALSE(st.ok());
  // The client also refuses the server: its certificate is not from the client's CA.
  EXPECT_NE(st.message().find("certificate"), std::string::npos) << st;
}

TEST(TlsTest, ServerCertificateForAnotherHostIsRefusedByTheClient) {
  Pki pki;
  ASSERT_TRUE(net::issue_cert(pki.dir.path(), {"c/0", {"10.9.9.9", "elsewhere.example"}}, false).ok());
  Status st = refused_send(pki, pki.ctx("b/0"), "b/0", "c/0");
  EXPECT_EQ(st.code(), Code::kUnauthenticated) << st;
  EXPECT_NE(st.message().find("mismatch"), std::string::npos) << st;
}

TEST(TlsTest, CertificateOfOneTaskCannotSpeakAsAnother) {
  Pki pki;
  Status st = refused_send(pki, pki.ctx("b/0"), "ps/0");
  EXPECT_FALSE(st.ok());
  // And the "client" certificate of tools cannot speak as a task either.
  st = refused_send(pki, pki.ctx("client"), "b/0");
  EXPECT_FALSE(st.ok());
}

// The data plane's client checks the server's certificate as the task it dials: b/0's key serving
// at the address expected for a/0 is refused, and so is a tool's certificate serving anywhere.
TEST(TlsTest, ADataPlaneServerMustPresentTheTaskDialled) {
  Pki pki;
  Inbox inbox;
  auto server = net::TensorServer::start(options("b/0", pki.ctx("b/0")), "127.0.0.1", 0, inbox.cb());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string addr = "127.0.0.1:" + std::to_string((*server)->port());
  net::TensorClient client(options("a/0", pki.ctx("a/0")));
  client.expect_task(addr, "/job:a/replica:0/task:0");
  Status st = client.send(addr, net::Frame(1, "k", filled(4, 1.f)));
  EXPECT_EQ(st.code(), Code::kUnauthenticated) << st;
  EXPECT_NE(st.message().find("names 'b/0', not the task 'a/0'"), std::string::npos) << st;
  client.expect_task(addr, "b/0");
  st = client.send(addr, net::Frame(1, "k", filled(4, 1.f)));
  EXPECT_TRUE(st.ok()) << st;
  // The tools' certificate (here one that names the host too) serving the data plane: no task.
  TempDir other;
  ASSERT_TRUE(net::write_cluster_certs(other.path(), {{"a/0", {"127.0.0.1"}}, {"client", {"127.0.0.1"}}}, false).ok());
  auto tool_ctx = net::TlsContext::load(net::cluster_tls_files(other.path(), "client"));
  auto a0_ctx = net::TlsContext::load(net::cluster_tls_files(other.path(), "a/0"));
  ASSERT_TRUE(tool_ctx.ok() && a0_ctx.ok());
  net::TensorClient client2(options("a/0", *a0_ctx));
  auto tool = net::TensorServer::start(options("b/0", *tool_ctx), "127.0.0.1", 0, inbox.cb());
  ASSERT_TRUE(tool.ok()) << tool.status();
  st = client2.send("127.0.0.1:" + std::to_string((*tool)->port()), net::Frame(1, "k", filled(4, 1.f)));
  EXPECT_EQ(st.code(), Code::kUnauthenticated) << st;
  EXPECT_NE(st.message().find("names 'client', which is no task"), std::string::npos) << st;
}

// A trust file or TLS directory other users may write is refused, naming the path.
TEST(TlsTest, WorldWritableTrustFilesAreRefused) {
  Pki pki;
  const std::string ca = pki.dir.path() + "/ca.crt";
  ASSERT_EQ(::chmod(ca.c_str(), 0646), 0);
  auto r = net::TlsContext::load(net::cluster_tls_files(pki.dir.path(), "a/0"));
  EXPECT_EQ(r.status().code(), Code::kPermissionDenied) << r.status();
  EXPECT_NE(r.status().message().find("'" + ca + "' may be written by other users (mode 646)"), std::string::npos)
      << r.status();
  ASSERT_EQ(::chmod(ca.c_str(), 0600), 0);
  ASSERT_EQ(::chmod(pki.dir.path().c_str(), 0777), 0);
  r = net::TlsContext::load(net::cluster_tls_files(pki.dir.path(), "a/0"));
  EXPECT_EQ(r.status().code(), Code::kPermissionDenied) << r.status();
  EXPECT_NE(r.status().message().find("TLS directory '" + pki.dir.path() + "' may be written by other users"),
            std::string::npos)
      << r.status();
  ASSERT_EQ(::chmod(pki.dir.path().c_str(), 0700), 0);
  EXPECT_TRUE(net::TlsContext::load(net::cluster_tls_files(pki.dir.path(), "a/0")).ok());
}

TEST(TlsTest, PlainClientAndTlsServerRefuseEachOther) {
  Pki pki;
  Status st = refused_send(pki, nullptr, "b/0");
  EXPECT_FALSE(st.ok());
  // A TLS client meets a plain server: the server sees garbage instead of a HELLO.
  Inbox inbox;
  auto plain = net::TensorServer::start(options("a/0", nullptr), "127.0.0.1", 0, inbox.cb());
  ASSERT_TRUE(plain.ok());
  net::TensorClient client(options("b/0", pki.ctx("b/0")));
  st = client.send("127.0.0.1:" + std::to_string((*plain)->port()), net::Frame(1, "k", filled(4, 1.f)));
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(inbox.size(), 0u);
}

// A TCP proxy between a client and a server that records what passes and may flip one byte of
// the client's stream at offset `flip_at` (0 = none).
class Proxy {
 public:
  Proxy(int target_port, size_t flip_at) : target_(target_port), flip_at_(flip_at) {
    auto l = net::listen_tcp("127.0.0.1", 0);
    EXPECT_TRUE(l.ok());
    listener_ = std::move(*l);
    port_ = net::local_port(listener_.get());
    thread_ = std::thread([this] { run(); });
  }
  ~Proxy() {
    stop_ = true;
    thread_.join();
  }
  int port() const { return port_; }
  std::string seen() {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }

 private:
  void run() {
    net::Fd in;
    while (!stop_ && !in.valid()) {
      pollfd p{listener_.get(), POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) in = net::Fd(::accept(listener_.get(), nullptr, nullptr));
    }
    if (!in.valid()) return;
    auto out = net::connect_tcp("127.0.0.1:" + std::to_string(target_), 5000ms);
    if (!out.ok()) return;
    size_t offset = 0;
    char buf[65536];
    while (!stop_) {
      pollfd p[2] = {{in.get(), POLLIN, 0}, {out->get(), POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      if (p[0].revents) {
        ssize_t r = ::recv(in.get(), buf, sizeof buf, 0);
        if (r <= 0) break;
        {
          std::lock_guard<std::mutex> l(mu_);
          seen_.append(buf, static_cast<size_t>(r));
        }
        if (flip_at_ && offset <= flip_at_ && flip_at_ < offset + static_cast<size_t>(r)) buf[flip_at_ - offset] ^= 0x20;
        offset += static_cast<size_t>(r);
        if (!net::write_all(out->get(), buf, static_cast<size_t>(r), "target").ok()) break;
      }
      if (p[1].revents) {
        ssize_t r = ::recv(out->get(), buf, sizeof buf, 0);
        if (r <= 0) break;
        if (!net::write_all(in.get(), buf, static_cast<size_t>(r), "client").ok()) break;
      }
    }
  }

  int target_;
  size_t flip_at_;
  net::Fd listener_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string seen_;
  std::thread thread_;
};

// A tensor whose bytes spell a marker an observer could search for.
Tensor marker_tensor(std::string* marker) {
  *marker = "actorflow-plaintext-marker-0123456789";
  Tensor t(DType::kUInt8, Shape({64 * 1024}));
  auto* p = static_cast<char*>(t.raw_data());
  for (size_t i = 0; i < 64 * 1024; ++i) p[i] = (*marker)[i % marker->size()];
  return t;
}

TEST(TlsTest, OnPathObserverSeesNoPlaintextAndAnAlteredByteIsDetected) {
  Pki pki;
  std::string marker;
  Tensor t = marker_tensor(&marker);
  for (bool tls : {false, true}) {
    Inbox inbox;
    auto server = net::TensorServer::start(options("a/0", tls ? pki.ctx("a/0") : nullptr), "127.0.0.1", 0, inbox.cb());
    ASSERT_TRUE(server.ok());
    Proxy proxy((*server)->port(), 0);
    net::TensorClient client(options("b/0", tls ? pki.ctx("b/0") : nullptr));
    ASSERT_TRUE(client.send("127.0.0.1:" + std::to_string(proxy.port()), net::Frame(1, "m", t)).ok());
    ASSERT_TRUE(inbox.wait_for(1, 10s));
    const std::string seen = proxy.seen();
    // Without TLS the observer reads the tensor (so this check can fail); with TLS it cannot.
    EXPECT_EQ(seen.find(marker) != std::string::npos, !tls) << (tls ? "TLS" : "plain");
  }
  // An attacker flips one bit well inside the tensor's records: the server's data plane drops
  // the connection (bad record MAC, counted as a bad frame) and nothing of that tensor is delivered.
  Inbox inbox;
  auto server = net::TensorServer::start(options("a/0", pki.ctx("a/0")), "127.0.0.1", 0, inbox.cb());
  ASSERT_TRUE(server.ok());
  Proxy proxy((*server)->port(), 20000);
  net::TensorClient client(options("b/0", pki.ctx("b/0")));
  (void)client.send("127.0.0.1:" + std::to_string(proxy.port()), net::Frame(1, "m", t));
  // The connection authenticated, then ended at the altered record instead of delivering it.
  ASSERT_TRUE((*server)->wait_for_stats(
      [](const net::TensorServerStats& s) { return s.handshakes_ok == 1 && s.active_connections == 0; }, 10s))
      << "connections still open: " << (*server)->stats().active_connections;
  EXPECT_EQ(inbox.size(), 0u);
  EXPECT_EQ((*server)->stats().bad_frames, 1);
}

// A real cluster with TLS on and no secret: `actorflow certs` makes the files, two `actorflow
// node` workers serve, `actorflow status` (the "client" certificate) sees them up, and seed 000's
// host program runs its graph across both (control and data plane through TLS) and prints
// TensorFlow's values.
TEST(TlsClusterTest, Seed000AcrossThreeProcessesWithTlsAndNoSecret) {
  TempDir dir;
  const int host = free_port(), w0 = free_port(), w1 = free_port(), metrics = free_port();
  auto cluster_text = [&](const std::string& tls_dir) {
    return "[cluster]\nname = \"tls\"\ntls_dir = \"" + tls_dir + "\"\n\n[jobs]\nhost = [\"localhost:" +
           std::to_string(host) + "\"]\nworker = [\"localhost:" + std::to_string(w0) + "\", \"localhost:" +
           std::to_string(w1) + "\"]\n\n[server]\nheartbeat_interval_ms = 200\npeer_timeout_ms = 1500\n" +
           "[tasks.\"worker/1\"]\nmetrics_port = " + std::to_string(metrics) + "\n";
  };
  const std::string file = dir.write("cluster.toml", cluster_text("certs"));
  auto certs = ChildProcess::start({binary("actorflow"), "certs", "--cluster", file, "--out", dir.path() + "/certs"}, {});
  auto code = certs->await_exit(60s);
  ASSERT_TRUE(code.ok() && *code == 0) << certs->output();
  EXPECT_NE(certs->output().find("worker-1.crt"), std::string::npos) << certs->output();
  // Again without --force: refused, exit 2, files kept.
  auto again = ChildProcess::start({binary("actorflow"), "certs", "--cluster", file, "--out", dir.path() + "/certs"}, {});
  code = again->await_exit(60s);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2) << again->output();
  EXPECT_NE(again->output().find("already exists"), std::string::npos) << again->output();

  std::vector<std::unique_ptr<ChildProcess>> nodes;
  for (int i = 0; i < 2; ++i)
    nodes.push_back(ChildProcess::start(
        {binary("actorflow"), "node", "--cluster", file, "--job", "worker", "--task", std::to_string(i)}, {}));
  for (auto& n : nodes) ASSERT_TRUE(n->await_output("serving", 30s).ok()) << n->output();
  auto status = ChildProcess::start({binary("actorflow"), "status", "--cluster", file, "--timeout-ms", "5000"}, {});
  code = status->await_exit(60s);
  ASSERT_TRUE(code.ok());
  EXPECT_TRUE(std::regex_search(status->output(),
                                std::regex("\nworker/1 +localhost:" + std::to_string(w1) + " +worker +UP ")))
      << status->output();
  // worker/1's metrics endpoint speaks only TLS with a client certificate of the cluster's CA:
  // status (the "client" certificate) measured it; plain HTTP from outside gets no answer.
  EXPECT_TRUE(std::regex_search(status->output(), std::regex("\nworker/1 .*[0-9.]+MiB .*\\d+s")))
      << status->output();
  EXPECT_EQ(status->output().find("(metrics:"), std::string::npos) << status->output();
  {
    auto fd = net::connect_tcp("127.0.0.1:" + std::to_string(metrics), 5s);
    ASSERT_TRUE(fd.ok()) << fd.status();
    const std::string req = "GET /metrics HTTP/1.1\r\n\r\n";
    (void)net::write_all(fd->get(), req.data(), req.size(), "metrics");
    timeval tv{5, 0};
    setsockopt(fd->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string ans;
    char buf[512];
    for (ssize_t n; (n = ::recv(fd->get(), buf, sizeof buf, 0)) > 0;) ans.append(buf, static_cast<size_t>(n));
    EXPECT_EQ(ans.find("HTTP/1.1 200"), std::string::npos) << ans;
    EXPECT_EQ(ans.find("process_cpu_seconds_total"), std::string::npos) << ans;
  }

  auto prog = ChildProcess::start({binary("samples/remote_matmul"), "--cluster", file, "--job", "host", "--task", "0"}, {});
  ASSERT_EQ(prog->wait(60s), 0) << prog->output();
  EXPECT_NE(prog->output().find("[[26.80402  32.85203 ]\n [54.003944 69.09987 ]]"), std::string::npos)
      << prog->output();

  // Without the certificate files a tool cannot start: a clear error naming the file.
  TempDir empty;
  const std::string bad = empty.write("cluster.toml", cluster_text("nocerts"));
  auto bad_status = ChildProcess::start({binary("actorflow"), "status", "--cluster", bad, "--timeout-ms", "2000"}, {});
  code = bad_status->await_exit(60s);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2) << bad_status->output();
  EXPECT_NE(bad_status->output().find("nocerts/ca.crt"), std::string::npos) << bad_status->output();

  for (auto& n : nodes) n->signal(SIGTERM);
  for (auto& n : nodes) {
    auto c = n->await_exit(30s);
    EXPECT_TRUE(c.ok() && *c == 0) << n->output();
  }
}

// Strangers against a real `actorflow node` with TLS on: a plain CAF client, a client with a
// certificate of another CA, a client without TLS (right fingerprint) and raw garbage all get
// nothing; the node then still serves an honest tool with the cluster's client certificate.
TEST(TlsClusterTest, StrangersWithoutAClusterCertificateReachNothing) {
  TempDir dir;
  const int port = free_port();
  ASSERT_TRUE(net::write_cluster_certs(dir.path() + "/certs", {{"worker/0", {"localhost"}}, {"client", {}}}, false).ok());
  Pki stranger;
  const std::string file = dir.write("cluster.toml", "[cluster]\nname = \"tls\"\ntls_dir = \"certs\"\n\n[jobs]\nworker = "
                                                     "[\"localhost:" + std::to_string(port) + "\"]\n");
  auto spec = ClusterSpec::from_file(file);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto node = ChildProcess::start({binary("actorflow"), "node", "--cluster", file, "--job", "worker", "--task", "0"}, {});
  ASSERT_TRUE(node->await_output("serving", 30s).ok()) << node->output();
  caf::actor_system_config cfg;
  Server::configure(cfg);
  caf::actor_system sys{cfg};
  // The hand-made client below writes with OpenSSL's plain write(): when the node has already
  // closed the connection that raises SIGPIPE, which must not end the test process.
  ::signal(SIGPIPE, SIG_IGN);
  // First (the node logs at most one refusal a second, so this one is the line to check): a
  // hand-made TLS client that trusts the cluster's CA but presents a certificate of another
  // CA: its side of the handshake completes (TLS 1.3 clients finish first), then the node refuses
  // the certificate and nothing it sends gets an answer.
  {
    SSL_CTX* c = SSL_CTX_new(TLS_client_method());
    ASSERT_TRUE(c);
    ASSERT_EQ(SSL_CTX_load_verify_locations(c, (dir.path() + "/certs/ca.crt").c_str(), nullptr), 1);
    ASSERT_EQ(SSL_CTX_use_certificate_file(c, (stranger.dir.path() + "/a-0.crt").c_str(), SSL_FILETYPE_PEM), 1);
    ASSERT_EQ(SSL_CTX_use_PrivateKey_file(c, (stranger.dir.path() + "/a-0.key").c_str(), SSL_FILETYPE_PEM), 1);
    auto fd = net::connect_tcp("127.0.0.1:" + std::to_string(port), 5000ms);
    ASSERT_TRUE(fd.ok());
    SSL* ssl = SSL_new(c);
    SSL_set_fd(ssl, fd->get());
    const int connected = SSL_connect(ssl);
    std::string hello = "AFHS";
    hello.resize(64, '\0');
    int answered = -1;
    if (connected == 1 && SSL_write(ssl, hello.data(), static_cast<int>(hello.size())) > 0) {
      char b[64];
      answered = SSL_read(ssl, b, sizeof b);
    }
    EXPECT_LE(answered, 0) << "the node answered a client whose certificate is not from the cluster CA";
    SSL_free(ssl);
    SSL_CTX_free(c);
  }
  // CAF's own handshake straight away.
  auto plain_caf = sys.middleman().remote_actor("127.0.0.1", static_cast<uint16_t>(port));
  EXPECT_FALSE(plain_caf) << "a plain CAF client got a handle";
  // Our handshake with the right fingerprint, but no TLS; then TLS with another CA's certificate.
  net::HandshakeConfig hs;
  hs.fingerprint = spec->fingerprint();
  hs.task_name = "/job:worker/replica:0/task:0";
  auto no_tls = connect_control_plane(sys, "127.0.0.1", static_cast<uint16_t>(port), hs, 5s);
  EXPECT_FALSE(no_tls.ok());
  // Garbage: closed without an answer worth anything.
  {
    auto fd = net::connect_tcp("127.0.0.1:" + std::to_string(port), 5000ms);
    ASSERT_TRUE(fd.ok());
    std::string junk(4096, '\x16');
    (void)net::write_all(fd->get(), junk.data(), junk.size(), "node");
    char b[256];
    pollfd p{fd->get(), POLLIN, 0};
    ASSERT_GT(::poll(&p, 1, 10000), 0) << "the node kept a garbage connection open";
    while (::recv(fd->get(), b, sizeof b, 0) > 0) {
    }
  }
  // An honest tool with the cluster's client certificate still gets in.
  // (tool_membership_config: the "client" certificate, claiming a '_' job; other names refused.)
  EXPECT_EQ(tool_membership_config(*spec, "worker").status().code(), Code::kInvalidArgument);
  auto mc = tool_membership_config(*spec, "_test");
  ASSERT_TRUE(mc.ok()) << mc.status();
  EXPECT_EQ(mc->self_task, "/job:_test/replica:0/task:0");
  ASSERT_TRUE(mc->tls != nullptr);
  EXPECT_EQ(mc->tls->identity(), "client");
  Membership m(sys, *mc);
  auto peer = m.ensure("/job:worker/replica:0/task:0", "localhost:" + std::to_string(port), 10s);
  EXPECT_TRUE(peer.ok()) << peer.status() << "\n" << node->output();
  // Roles under TLS: the holder of the "client" certificate is a client at the node, whatever it
  // says in the node actor's hello: a fault plan (even an empty one) is PermissionDenied; and it
  // cannot claim the operator's job (_chaos) in the connection handshake.
  if (peer.ok()) {
    caf::scoped_actor self{sys};
    Status fault = Internal("no answer");
    self->request(peer->node, 10s, fault_atom::value, std::string())
        .receive([&](std::vector<std::string>&) { fault = Status::OK(); },
                 [&](caf::error& e) { fault = from_caf_error(e); });
    EXPECT_EQ(fault.code(), Code::kPermissionDenied) << fault;
    EXPECT_NE(fault.message().find("the peer is a client (/job:_test/replica:0/task:0)"), std::string::npos) << fault;
  }
  {
    MembershipConfig chaos = *mc;  // the client certificate, claiming the operator's job
    chaos.self_task = "/job:_chaos/replica:0/task:0";
    caf::actor_system_config cfg2;
    Server::configure(cfg2);
    caf::actor_system sys2{cfg2};
    Membership m2(sys2, chaos);
    auto refused = m2.ensure("/job:worker/replica:0/task:0", "localhost:" + std::to_string(port), 5s);
    EXPECT_FALSE(refused.ok()) << "the client certificate spoke as the operator";
  }
  // Every refusal was logged, each naming its reason, and nothing else piled up.
  const std::string out = node->output();
  EXPECT_NE(out.find("its certificate was refused"), std::string::npos) << out;
  EXPECT_TRUE(node->running());
  node->signal(SIGTERM);
  auto code = node->await_exit(30s);
  EXPECT_TRUE(code.ok() && *code == 0) << node->output();
}

// Against real `actorflow node` processes on one host: a process serving as ps/0 with worker/1's
// certificate and key (same cluster file, same host) is refused by a client that dials ps/0
// (failed before: the host matched, and with TLS and no secret nothing else was checked); a
// certificate with CN "*" from the cluster CA speaks as no task (failed before: accepted as any);
// a node whose TLS directory other users may write does not start, naming the directory.
TEST(TlsClusterTest, AnotherTasksKeyCannotServeAsThisTaskNorAWildcardAsAny) {
  TempDir honest, impostor;
  const int ps = free_port(), worker0 = free_port(), worker1 = free_port();
  const std::string text = "[cluster]\nname = \"tls\"\ntls_dir = \"certs\"\n\n[jobs]\nps = [\"localhost:" +
                           std::to_string(ps) + "\"]\nworker = [\"localhost:" + std::to_string(worker0) +
                           "\", \"localhost:" + std::to_string(worker1) + "\"]\n";
  ASSERT_TRUE(net::write_cluster_certs(honest.path() + "/certs",
                                       {{"ps/0", {"localhost"}}, {"worker/0", {"localhost"}}, {"worker/1", {"localhost"}},
                                        {"client", {}}},
                                       false)
                  .ok());
  const std::string file = honest.write("cluster.toml", text);
  // The impostor: the same cluster file, its certs/ a copy in which ps-0 is worker/1's pair.
  ASSERT_EQ(::mkdir((impostor.path() + "/certs").c_str(), 0700), 0);
  auto copy = [&](const std::string& from, const std::string& to) {
    std::ifstream in(honest.path() + "/certs/" + from, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    impostor.write("certs/" + to, bytes);
    ::chmod((impostor.path() + "/certs/" + to).c_str(), 0600);
  };
  for (const char* f : {"ca.crt", "worker-0.crt", "worker-0.key", "worker-1.crt", "worker-1.key"}) copy(f, f);
  copy("worker-1.crt", "ps-0.crt");
  copy("worker-1.key", "ps-0.key");
  const std::string fake_file = impostor.write("cluster.toml", text);
  auto fake = ChildProcess::start({binary("actorflow"), "node", "--cluster", fake_file, "--job", "ps", "--task", "0"}, {});
  ASSERT_TRUE(fake->await_output("serving", 30s).ok()) << fake->output();
  auto spec = ClusterSpec::from_file(file);
  ASSERT_TRUE(spec.ok()) << spec.status();
  caf::actor_system_config cfg;
  Server::configure(cfg);
  caf::actor_system sys{cfg};
  {
    auto mc = tool_membership_config(*spec, "_test");
    ASSERT_TRUE(mc.ok()) << mc.status();
    Membership m(sys, *mc);
    auto p = m.ensure("/job:ps/replica:0/task:0", "localhost:" + std::to_string(ps), 10s);
    EXPECT_FALSE(p.ok()) << "worker/1's certificate served as ps/0";
    EXPECT_EQ(p.status().code(), Code::kUnauthenticated) << p.status();
    EXPECT_NE(p.status().message().find("names 'worker/1', not the task 'ps/0'"), std::string::npos) << p.status();
  }
  fake->signal(SIGTERM);
  (void)fake->await_exit(30s);

  // An honest worker/0; a client with a CN "*" certificate of the cluster CA claims to be ps/0.
  auto w0 = ChildProcess::start({binary("actorflow"), "node", "--cluster", file, "--job", "worker", "--task", "0"}, {});
  ASSERT_TRUE(w0->await_output("serving", 30s).ok()) << w0->output();
  ASSERT_TRUE(net::issue_cert(honest.path() + "/certs", {"*", {"localhost"}}, false).ok());
  auto any = net::TlsContext::load(net::cluster_tls_files(honest.path() + "/certs", "*"));
  ASSERT_TRUE(any.ok()) << any.status();
  net::HandshakeConfig hs;
  hs.fingerprint = spec->fingerprint();
  hs.task_name = "/job:ps/replica:0/task:0";
  hs.tls = *any;
  auto wild = connect_control_plane(sys, "127.0.0.1", static_cast<uint16_t>(worker0), hs, 5s,
                                    "/job:worker/replica:0/task:0");
  EXPECT_FALSE(wild.ok()) << "a certificate with CN '*' spoke as ps/0";
  EXPECT_TRUE(w0->wait_for_output("presents the certificate of '*' but names the task", 10s)) << w0->output();
  // The honest tool still gets in.
  {
    auto mc = tool_membership_config(*spec, "_test");
    ASSERT_TRUE(mc.ok());
    Membership m(sys, *mc);
    auto p = m.ensure("/job:worker/replica:0/task:0", "localhost:" + std::to_string(worker0), 10s);
    EXPECT_TRUE(p.ok()) << p.status() << "\n" << w0->output();
  }
  w0->signal(SIGTERM);
  (void)w0->await_exit(30s);

  // A TLS directory other users may write: the node refuses to start, naming it.
  ASSERT_EQ(::chmod((honest.path() + "/certs").c_str(), 0777), 0);
  auto open_dir = ChildProcess::start({binary("actorflow"), "node", "--cluster", file, "--job", "worker", "--task", "1"}, {});
  auto code = open_dir->await_exit(30s);
  ASSERT_TRUE(code.ok());
  EXPECT_NE(*code, 0) << open_dir->output();
  EXPECT_NE(open_dir->output().find("TLS directory '" + honest.path() + "/certs' may be written by other users"),
            std::string::npos)
      << open_dir->output();
  ::chmod((honest.path() + "/certs").c_str(), 0700);
}

}  // namespace
}  // namespace actorflow
