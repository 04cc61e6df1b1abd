// Seeded mutation fuzzing of what a peer's bytes reach first: the handshake state machine
// (net/handshake.h), the data plane's frame decoder (net/wire.h) and the CAF Tensor inspector
// (actors/messages.h). Each starts from valid inputs, applies seeded mutations (bit flips, byte
// inserts and deletes, truncation, splices, interesting integers) and checks that decoding never
// crashes or throws, and never asks for more memory than the input declared and carried.
// Seeds are fixed: a failure names the case and reproduces.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "actors/messages.h"
#include "actors/ps_replication.h"
#include "core/status.h"
#include "core/step_stats.h"
#include "core/step_trace.h"
#include "net/handshake.h"
#include "net/wire.h"
#include "tests/util/fuzz.h"

namespace actorflow {
namespace {

constexpr int kCases = 100000;
using testing::mutate;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- the handshake's server side ---------------------------------------------------------------

std::string le16(uint16_t v) { return std::string{static_cast<char>(v & 0xff), static_cast<char>(v >> 8)}; }

TEST(FuzzWireTest, ServerHandshakeNeverOverreadsOrGrows) {
  net::HandshakeConfig cfg;
  cfg.fingerprint = std::string(64, 'f');
  cfg.secret = "s";
  std::vector<std::string> corpus;
  for (const std::string& task : std::vector<std::string>{"", "worker/0", std::string(1024, 't')}) {
    std::string hello = "AFHS" + le16(net::kProtocolVersion) + std::string(1, '\1') + std::string(1, '\0') +
                        le16(static_cast<uint16_t>(task.size())) + std::string(32, 'n') + task;
    std::string auth = "AFHS" + std::string(32, 'm') + le16(64) + std::string(64, 'f');
    corpus.push_back(hello + auth);
    corpus.push_back(hello);
  }
  std::mt19937_64 rng(20261124);
  const auto t0 = std::chrono::steady_clock::now();
  int done = 0, failed = 0;
  for (int i = 0; i < kCases; ++i) {
    const std::string in = mutate(corpus[rng() % corpus.size()], corpus, rng);
    net::ServerHandshake hs(cfg, "fuzz");
    size_t pos = 0;
    size_t out_total = 0;
    while (hs.state() == net::ServerHandshake::State::kReading && pos < in.size()) {
      const size_t want = hs.wanted();
      ASSERT_GT(want, 0u) << "case " << i;
      ASSERT_LE(want, 1100u) << "case " << i << ": asks for " << want << " bytes at once";
      const size_t n = std::min(want, std::min<size_t>(in.size() - pos, 1 + rng() % 64));
      hs.feed(reinterpret_cast<const unsigned char*>(in.data()) + pos, n);
      pos += n;
      out_total += hs.output().size();
      hs.output().clear();
    }
    ASSERT_LE(out_total, 2000u) << "case " << i;
    // A wrong proof (these inputs never carry a right one) never completes the handshake.
    ASSERT_NE(hs.state(), net::ServerHandshake::State::kDone) << "case " << i;
    if (hs.state() == net::ServerHandshake::State::kFailed) ++failed;
    ++done;
  }
  std::printf("handshake: %d cases (%d refused, the rest incomplete) in %.2f s\n", done, failed, seconds_since(t0));
  EXPECT_GT(failed, kCases / 4);
}

// ---- the data plane's frame decoder --------------------------------------------------------------

TEST(FuzzWireTest, FrameDecoderChecksShapeAgainstBytes) {
  std::vector<std::string> corpus;
  auto frame = [&](DType dt, std::vector<int64_t> dims, const std::string& key) {
    uint64_t bytes = dtype_size(dt);
    for (int64_t d : dims) bytes *= static_cast<uint64_t>(d);
    std::string out;
    EXPECT_TRUE(net::encode_frame_prefix(net::FrameKind::kTensor, 7, key, dt, dims, bytes, "", &out).ok());
    corpus.push_back(out + std::string(bytes, 'x'));
  };
  frame(DType::kFloat32, {2, 3}, "a;b;e");
  frame(DType::kInt64, {}, "k");
  frame(DType::kFloat32, {0, 5}, "");
  frame(DType::kInt32, {4, 1, 2, 1}, std::string(100, 'k'));
  std::string err;
  ASSERT_TRUE(net::encode_frame_prefix(net::FrameKind::kError, 9, "key", DType::kInvalid, {}, 0, "bad", &err).ok());
  corpus.push_back(err);
  // Step control: every kind without a tensor, its fields in the key area.
  for (net::FrameKind k : {net::FrameKind::kRun, net::FrameKind::kDone, net::FrameKind::kQuery, net::FrameKind::kState}) {
    net::StepFields f;
    f.device = "/job:ps/replica:0/task:0/device:CPU:0";
    f.handle = "m1.abc_p2";
    f.reply_to = "127.0.0.1:9";
    f.from_task = "/job:worker/replica:0/task:0";
    f.number = 1;
    std::string out;
    ASSERT_TRUE(net::encode_frame_prefix(k, 11, net::encode_step_fields(k, f), DType::kInvalid, {}, 0,
                                         k == net::FrameKind::kDone ? "oops" : "", &out)
                    .ok());
    corpus.push_back(out);
  }
  net::FrameLimits limits;
  limits.max_tensor_bytes = 1 << 20;
  std::mt19937_64 rng(424242);
  const auto t0 = std::chrono::steady_clock::now();
  int accepted = 0;
  for (int i = 0; i < kCases; ++i) {
    const std::string in = mutate(corpus[rng() % corpus.size()], corpus, rng);
    if (in.size() < net::kFrameFixedBytes) continue;
    const auto* p = reinterpret_cast<const unsigned char*>(in.data());
    auto h = net::decode_frame_fixed(p, limits);
    if (!h.ok()) continue;
    ASSERT_LE(h->data_bytes, limits.max_tensor_bytes) << "case " << i;
    ASSERT_LE(h->key_bytes, limits.max_key_bytes) << "case " << i;
    if (h->variable_bytes() > in.size() - net::kFrameFixedBytes) continue;  // a reader would wait for more
    auto dims = net::decode_frame_dims(*h, p + net::kFrameFixedBytes);
    if (!dims.ok()) continue;
    if (h->kind == net::FrameKind::kTensor) {
      // What a reader allocates next: exactly data_bytes, which the shape must describe.
      ASSERT_TRUE(tensor_bytes_match(h->dtype, *dims, h->data_bytes)) << "case " << i;
    }
    if (net::is_step_control(h->kind)) {
      // The typed fields: decoded whole or refused, never read past the key area.
      const char* key = reinterpret_cast<const char*>(p + net::kFrameFixedBytes) + size_t{h->rank} * 8;
      auto f = net::decode_step_fields(h->kind, key, h->key_bytes);
      if (f.ok() && (h->kind == net::FrameKind::kQuery || h->kind == net::FrameKind::kState)) {
        ASSERT_EQ(h->data_bytes, 0u) << "case " << i;
        ASSERT_EQ(h->error_bytes, 0u) << "case " << i;
      }
    }
    ++accepted;
  }
  std::printf("frames: %d cases (%d decoded) in %.2f s\n", kCases, accepted, seconds_since(t0));
  EXPECT_GT(accepted, 0);
}

// ---- the CAF Tensor inspector -------------------------------------------------------------------

TEST(FuzzWireTest, TensorInspectorAllocatesNoMoreThanItReceived) {
  std::vector<std::string> corpus;
  for (const Tensor& t : {Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3}), Tensor::scalar<int64_t>(5),
                          Tensor::from_vector<int32_t>({1, 2, 3}, Shape{3, 1}), Tensor()}) {
    std::vector<char> buf;
    caf::binary_serializer sink(nullptr, buf);
    Tensor copy = t;
    ASSERT_FALSE(sink(copy));
    corpus.emplace_back(buf.begin(), buf.end());
  }
  std::mt19937_64 rng(77);
  const auto t0 = std::chrono::steady_clock::now();
  int decoded = 0;
  for (int i = 0; i < kCases; ++i) {
    const std::string in = mutate(corpus[rng() % corpus.size()], corpus, rng);
    caf::binary_deserializer source(nullptr, in.data(), in.size());
    Tensor t;
    auto e = source(t);
    if (e) continue;
    ++decoded;
    if (t.is_initialized()) {
      ASSERT_LE(t.bytes(), in.size()) << "case " << i;
    }
  }
  std::printf("tensor inspector: %d cases (%d decoded) in %.2f s\n", kCases, decoded, seconds_since(t0));
  EXPECT_GT(decoded, 0);
}

// The small decoders of typed control data, each under mutation of real encodings (half of the
// cases behind a valid prefix, as a peer would send them): a Status's typed detail (in CAF errors
// and the data plane's done frame), a step trace's events (a task's reply to the collector) and a
// replicated call's attributes (ReplicaCall::attrs). Never a crash; nothing decoded is larger than
// the bytes that arrived; what decodes re-encodes to bytes that decode to the same.
TEST(FuzzWireTest, StatusDetailsTraceEventsAndCallAttrsNeverCrashOrGrow) {
  std::mt19937_64 rng(36);
  constexpr int kCases = 30000;
  {
    std::vector<std::string> corpus = {encode_status_detail(ServedBy{"/job:ps/replica:0/task:1", "/job:ps/replica:0/task:0"}),
                                       encode_status_detail(Uninitialized{"conv1/weights"})};
    int ok = 0;
    for (int i = 0; i < kCases; ++i) {
      const std::string in = mutate(corpus[rng() % corpus.size()], corpus, rng);
      auto d = decode_status_detail(in);
      if (!d.ok()) continue;
      ++ok;
      const std::string again = encode_status_detail(*d);
      ASSERT_LE(again.size(), in.size()) << "case " << i;
      auto d2 = decode_status_detail(again);
      ASSERT_TRUE(d2.ok()) << "case " << i << ": " << d2.status();
      ASSERT_TRUE(*d2 == *d) << "case " << i;
    }
    EXPECT_GT(ok, 0);
  }
  {
    TraceEvent e;
    e.task = "/job:worker/replica:0/task:0";
    e.track = "/job:worker/replica:0/task:0/device:CPU:0";
    e.name = "MatMul";
    e.kind = "op";
    e.op = "MatMul";
    e.start_ns = 1000;
    e.end_ns = 2500;
    e.nums = {{"bytes", 16}, {"seq", 3}};
    e.texts = {{"to", "/job:ps/replica:0/task:0/device:CPU:0"}};
    TraceEvent f = e;
    f.kind = "transfer";
    f.nums.clear();
    std::vector<std::string> corpus = {encode_trace_events({e, f}, 2), encode_trace_events({}, 0),
                                       encode_trace_events({f}, 0)};
    int ok = 0;
    for (int i = 0; i < kCases; ++i) {
      const std::string in = mutate(corpus[rng() % corpus.size()], corpus, rng);
      auto r = decode_trace_events(in, 8);
      if (!r.ok()) {
        ASSERT_TRUE(r.status().code() == Code::kDataLoss || r.status().code() == Code::kResourceExhausted)
            << "case " << i << ": " << r.status();
        continue;
      }
      ++ok;
      ASSERT_LE(r->first.size(), 8u) << "case " << i;
      size_t bytes = 0;
      for (const TraceEvent& t : r->first) {
        bytes += t.task.size() + t.track.size() + t.name.size() + t.kind.size() + t.op.size();
        for (const auto& [k, v] : t.texts) bytes += k.size() + v.size();
        for (const auto& [k, v] : t.nums) bytes += k.size();
      }
      ASSERT_LE(bytes, in.size()) << "case " << i;
      const std::string again = encode_trace_events(r->first, r->second);
      auto r2 = decode_trace_events(again, 8);
      ASSERT_TRUE(r2.ok()) << "case " << i << ": " << r2.status();
      ASSERT_EQ(r2->first.size(), r->first.size()) << "case " << i;
      ASSERT_EQ(r2->second, r->second) << "case " << i;
    }
    EXPECT_GT(ok, 0);
    // A whole StepStats (a remote client's traced reply) is those events behind its header records.
    StepStats st;
    st.step_id = 9;
    st.start_ns = 100;
    st.end_ns = 900;
    TaskTraceInfo ti;
    ti.task = e.task;
    ti.clock.method = "same process";
    ti.events = 2;
    st.tasks = {ti, ti};
    st.events = {e, f};
    const std::vector<std::string> stats = {encode_step_stats(st), encode_step_stats(StepStats{})};
    int stats_ok = 0;
    for (int i = 0; i < kCases; ++i) {
      const std::string in = mutate(stats[rng() % stats.size()], stats, rng);
      auto r = decode_step_stats(in, 8);
      if (!r.ok()) {
        ASSERT_TRUE(r.status().code() == Code::kDataLoss || r.status().code() == Code::kResourceExhausted)
            << "case " << i << ": " << r.status();
        continue;
      }
      ++stats_ok;
      ASSERT_LE(r->events.size() + r->tasks.size(), 7u) << "case " << i;
      auto again = decode_step_stats(encode_step_stats(*r), 8);
      ASSERT_TRUE(again.ok()) << "case " << i << ": " << again.status();
      ASSERT_EQ(again->events.size(), r->events.size()) << "case " << i;
      ASSERT_EQ(again->tasks.size(), r->tasks.size()) << "case " << i;
    }
    EXPECT_GT(stats_ok, 0);
  }
  {
    AttrMap a;
    a.set("var_name", std::string("conv1/weights"));
    a.set("shape", Shape{5, 5, 1, 32});
    a.set("axes", std::vector<int64_t>{0, 2});
    a.set("lr", 0.001);
    a.set("use_locking", true);
    a.set("dtype", DType::kFloat32);
    a.set("names", std::vector<std::string>{"a", "b"});
    AttrMap b;
    b.set("initial_accumulator_value", 0.1);
    std::vector<std::string> corpus = {encode_call_attrs(a), encode_call_attrs(b), encode_call_attrs(AttrMap{})};
    int ok = 0;
    for (int i = 0; i < kCases; ++i) {
      const std::string in = mutate(corpus[rng() % corpus.size()], corpus, rng);
      auto m = decode_call_attrs(in);
      if (!m.ok()) {
        ASSERT_EQ(m.status().code(), Code::kInvalidArgument) << "case " << i << ": " << m.status();
        continue;
      }
      ++ok;
      ASSERT_LE(m->all().size(), in.size()) << "case " << i;
      auto m2 = decode_call_attrs(encode_call_attrs(*m));
      ASSERT_TRUE(m2.ok()) << "case " << i << ": " << m2.status();
      if (!(*m2 == *m)) {
        for (const auto& [k, v] : m->all()) {
          auto it = m2->all().find(k);
          ASSERT_NE(it, m2->all().end()) << "case " << i << ": attribute lost";
          if (it->second == v) continue;
          // NaN is the one value unequal to itself: the same bits are all that can be asked.
          const double* x = std::get_if<double>(&v);
          const double* y = std::get_if<double>(&it->second);
          ASSERT_TRUE(x && y && std::isnan(*x) && std::memcmp(x, y, sizeof *x) == 0) << "case " << i << ": attribute changed";
        }
        ASSERT_EQ(m->all().size(), m2->all().size()) << "case " << i;
      }
    }
    EXPECT_GT(ok, 0);
  }
}

}  // namespace
}  // namespace actorflow
