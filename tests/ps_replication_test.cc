// Replicated parameter servers ([supervisor] ps_replicas = 2, actors/ps_replication.h): a
// primary's updates are held by its backup before they are acknowledged; the backup's copy
// serves (and is promoted) when the primary's task dies; the returning task gets the whole state
// back from the acting primary.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <thread>

#include "actorflow/embedding.h"
#include "actorflow/server.h"
#include "actors/membership.h"
#include "actors/messages.h"
#include "actors/node_actor.h"
#include "actors/ps_replication.h"
#include "actors/resources.h"
#include "device/variable_call.h"
#include "actors/variable_actor.h"
#include "device/kernel.h"
#include "graph/ops_variables.h"
#include "tests/util/process.h"
#include "actors/server_runtime.h"
#include "net/wire.h"

#include <caf/binary_serializer.hpp>

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::ChildProcess;
using testing::free_port;
using testing::TempDir;

TEST(PsReplicationTest, CallAttributesRoundTrip) {
  AttrMap a;
  a.set("i", int64_t{-7});
  a.set("d", 0.1);
  a.set("b", true);
  a.set("s", std::string("adam"));
  a.set("t", DType::kFloat32);
  a.set("h", Shape{3, 4});
  a.set("u", Shape::unknown());
  a.set("I", std::vector<int64_t>{1, 2});
  a.set("S", std::vector<std::string>{"x", ""});
  auto back = decode_call_attrs(encode_call_attrs(a));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == a);
  std::string bad = encode_call_attrs(a);
  bad.resize(bad.size() - 3);
  EXPECT_FALSE(decode_call_attrs(bad).ok());
  // Which calls are replicated: those whose decoded call mutates the variable.
  auto replicated = [](const std::string& method, AttrMap attrs) {
    auto op = decode_variable_op(method, std::move(attrs));
    EXPECT_TRUE(op.ok()) << method << ": " << op.status();
    return op.ok() && mutates((*op)->call);
  };
  AttrMap leave;
  leave.set("action", std::string("leave"));
  EXPECT_TRUE(replicated("apply_adam", AttrMap{}));
  EXPECT_TRUE(replicated("sparse_apply_sgd", AttrMap{}));
  EXPECT_TRUE(replicated("sync_control", leave));
  EXPECT_FALSE(replicated("read", AttrMap{}));
  EXPECT_FALSE(replicated("save_slots", AttrMap{}));
  EXPECT_FALSE(replicated("sync_control", AttrMap{}));
}

// The serving map through a chain of failures and a redirect, as every process keeps it.
Tensor filled(int64_t n, float v) {
  Tensor t(DType::kFloat32, Shape{n});
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = v;
  return t;
}

// ---- the typed refusal (core/status.h StatusDetail) ------------------------------------------

TEST(TypedRefusalTest, AStatusDetailRoundTripsAndBadBytesAreRefused) {
  const ServedBy sb{"/job:ps/replica:0/task:1", "/job:ps/replica:0/task:0"};
  const Status refused = Unavailable("variable 'w' is a backup copy").with_detail(sb);
  ASSERT_NE(refused.detail<ServedBy>(), nullptr);
  EXPECT_EQ(*refused.detail<ServedBy>(), sb);
  EXPECT_EQ(refused.detail<Uninitialized>(), nullptr);
  // The prefixes a step's error collects on its way keep the detail; OK never carries one.
  const Status prefixed = refused.with_prefix("ApplyAdam 'train/w'").with_prefix("step 7");
  ASSERT_NE(prefixed.detail<ServedBy>(), nullptr);
  EXPECT_EQ(*prefixed.detail<ServedBy>(), sb);
  EXPECT_EQ(Status::OK().with_detail(sb).any_detail(), nullptr);
  EXPECT_NE(refused, Unavailable("variable 'w' is a backup copy")) << "the detail is part of a status's value";
  for (const StatusDetail& d : {StatusDetail{sb}, StatusDetail{Uninitialized{"w"}}}) {
    auto back = decode_status_detail(encode_status_detail(d));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(*back == d);
  }
  // Malformed bytes: an error naming what is wrong, never a crash or a huge allocation.
  const std::string good = encode_status_detail(sb);
  auto fails_with = [](const std::string& bytes, const std::string& what) {
    auto d = decode_status_detail(bytes);
    ASSERT_FALSE(d.ok()) << "decoded " << bytes.size() << " bytes";
    EXPECT_EQ(d.status().code(), Code::kInvalidArgument);
    EXPECT_NE(d.status().message().find(what), std::string::npos) << d.status();
  };
  fails_with("", "no bytes");
  fails_with(std::string(1, '\x07') + good.substr(1), "unknown tag 7");
  fails_with(good.substr(0, good.size() - 1), "'primary_task' is truncated");
  fails_with(good + "x", "1 bytes after its fields");
  fails_with(std::string(1, '\x02') + std::string(4, '\0'), "'resource' is empty");
  fails_with(std::string(1, '\x02') + std::string("\xff\xff\xff\xff", 4), "claims 4294967295 bytes");
  fails_with(std::string(1, '\x01') + std::string("\x01\x00", 2), "'copy_task' is missing or truncated");
  // A receiver keeps the code and the message of a status whose detail does not decode.
  const Status lost = Unavailable("m").with_wire_detail("\x01junk");
  EXPECT_EQ(lost, Unavailable("m"));
  EXPECT_EQ(Unavailable("m").with_wire_detail(good).detail<ServedBy>()->primary_task, sb.primary_task);
  EXPECT_EQ(code_from_wire(14), Code::kUnavailable);
  EXPECT_EQ(code_from_wire(200), Code::kUnknown);
  EXPECT_EQ(code_from_wire(-1), Code::kUnknown);
}

// Serialized as BASP serializes a response error between processes.
caf::error across_processes(caf::actor_system& sys, const caf::error& e) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  caf::error copy = e;
  EXPECT_FALSE(sink(copy));
  caf::binary_deserializer source{sys, buf};
  caf::error back;
  EXPECT_FALSE(source(back));
  return back;
}

TEST(TypedRefusalTest, ARefusalCrossesProcessesTyped) {
  caf::actor_system_config cfg;
  Server::configure(cfg);
  caf::actor_system sys{cfg};
  const ServedBy sb{"/job:ps/replica:0/task:1", "/job:ps/replica:0/task:0"};
  const Status refused = Unavailable("variable 'w' is a backup copy").with_detail(sb);
  // A CAF response error (the variable actor's answer, a remote run's outcome).
  const Status back = from_caf_error(across_processes(sys, to_caf_error(refused)), "ps/1");
  EXPECT_EQ(back, refused);
  const Status plain = from_caf_error(across_processes(sys, to_caf_error(FailedPrecondition("x"))));
  EXPECT_EQ(plain, FailedPrecondition("x"));
  EXPECT_EQ(plain.any_detail(), nullptr);
  // Crafted errors of our category: a detail that does not decode is dropped, an unknown code
  // reads as Unknown, extra context elements are ignored; nothing crashes.
  const auto cat = caf::atom("actorflow");
  const Status junk = from_caf_error(
      across_processes(sys, caf::error(14, cat, caf::make_message(std::string("m"), std::string("\x01\xff\xff\xff\xff")))));
  EXPECT_EQ(junk, Unavailable("m"));
  const Status odd = from_caf_error(caf::error(200, cat, caf::make_message(std::string("m"), std::string())));
  EXPECT_EQ(odd.code(), Code::kUnknown);
  EXPECT_EQ(odd.any_detail(), nullptr);
  EXPECT_EQ(from_caf_error(caf::error(14, cat, caf::make_message(int32_t{1}, std::string("x")))).any_detail(), nullptr);
  // A step outcome on the data plane (the done frame of a step dispatched there).
  net::StepFields f;
  f.device = "/job:ps/replica:0/task:1/device:CPU:0";
  f.number = static_cast<int32_t>(Code::kUnavailable);
  f.detail = encode_status_detail(sb);
  const std::string area = net::encode_step_fields(net::FrameKind::kDone, f);
  auto got = net::decode_step_fields(net::FrameKind::kDone, area.data(), area.size());
  ASSERT_TRUE(got.ok()) << got.status();
  const Status outcome = Status(code_from_wire(got->number), "m").with_wire_detail(got->detail);
  ASSERT_NE(outcome.detail<ServedBy>(), nullptr);
  EXPECT_EQ(*outcome.detail<ServedBy>(), sb);
  // A done frame whose detail does not decode, or that puts one on a success, is a bad frame.
  net::StepFields bad = f;
  bad.detail = "\x09";
  std::string b = net::encode_step_fields(net::FrameKind::kDone, bad);
  auto r = net::decode_step_fields(net::FrameKind::kDone, b.data(), b.size());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDataLoss);
  EXPECT_NE(r.status().message().find("unknown tag 9"), std::string::npos) << r.status();
  bad = f;
  bad.number = 0;
  b = net::encode_step_fields(net::FrameKind::kDone, bad);
  r = net::decode_step_fields(net::FrameKind::kDone, b.data(), b.size());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("a typed detail on a successful outcome"), std::string::npos) << r.status();
}

caf::actor_system_config& configured(caf::actor_system_config& cfg) {
  Server::configure(cfg);
  return cfg;
}

// ps/1 of a 2-ps cluster in this process, as far as its copies go: an actor system and ps/1's
// replicator, never started (no backup of its own: its copies serve alone once promoted), which
// has seen ps/0 replicate to it (ps/0 is alive).
struct InProcessPs1 {
  caf::actor_system_config cfg;
  caf::actor_system sys{configured(cfg)};
  const std::string ps0 = "/job:ps/replica:0/task:0", ps1 = "/job:ps/replica:0/task:1";
  std::shared_ptr<PsReplicator> rep =
      std::make_shared<PsReplicator>(ps1, ps0, "127.0.0.1:1", std::chrono::milliseconds(1000));
  InProcessPs1() { rep->primary_seen(ps0); }
  std::tuple<caf::actor_system&, std::shared_ptr<PsReplicator>&, const std::string&, const std::string&> parts() {
    return {sys, rep, ps0, ps1};
  }
};

std::shared_ptr<ResourceCall> variable_call(const std::string& method, AttrMap attrs, TensorList args) {
  auto c = std::make_shared<ResourceCall>();
  c->resource = "w";
  auto op = decode_variable_op(method, std::move(attrs));
  EXPECT_TRUE(op.ok()) << op.status();
  if (op.ok()) c->op = *op;
  c->args = std::move(args);
  return c;
}

Result<TensorList> call_variable(caf::scoped_actor& self, const variable_actor_t& v, std::shared_ptr<ResourceCall> c) {
  Result<TensorList> out = Internal("no answer");
  self->request(v, std::chrono::seconds(10), resource_atom::value, ResourceCallPtr(std::move(c)))
      .receive([&](TensorList& r) { out = std::move(r); }, [&](caf::error& e) { out = from_caf_error(e); });
  return out;
}

// A copy that took replicated calls (ResourceCall::replica, as the node actor marks them) is a
// backup: a direct update is refused with the typed ServedBy naming its primary while that
// lives, and promotes the copy once it is gone.
TEST(TypedRefusalTest, ABackupCopyRefusesADirectUpdateNamingItsPrimary) {
  InProcessPs1 ps;
  auto [sys, rep, ps0, ps1] = ps.parts();
  auto v = spawn_variable_actor(sys, "w", RestartPolicy{}, rep);
  caf::scoped_actor self{sys};
  auto replicated = variable_call("assign", AttrMap{}, {filled(4, 1.f)});
  replicated->replica = ReplicaOrigin{ps0};
  auto ack = call_variable(self, v, replicated);
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_TRUE(ack->empty()) << "a replicated call is acknowledged, not answered with the value";
  auto refused = call_variable(self, v, variable_call("assign_add", AttrMap{}, {filled(4, 1.f)}));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kUnavailable);
  ASSERT_NE(refused.status().detail<ServedBy>(), nullptr) << refused.status();
  EXPECT_EQ(*refused.status().detail<ServedBy>(), (ServedBy{ps1, ps0}));
  EXPECT_EQ(refused.status().message().find("[served_by"), std::string::npos) << "no text marker left to parse";
  // Reads are served; once the primary is gone the next direct update promotes the copy.
  auto read = call_variable(self, v, variable_call("read", AttrMap{}, {}));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->at(0).data<float>()[0], 1.f);
  rep->primary_lost(ps0);
  auto promoted = call_variable(self, v, variable_call("assign_add", AttrMap{}, {filled(4, 1.f)}));
  ASSERT_TRUE(promoted.ok()) << promoted.status();
  EXPECT_EQ(promoted->at(0).data<float>()[0], 2.f);
  // A variable with no value yet says so typed (a failed-over route that finds nothing).
  auto empty = spawn_variable_actor(sys, "e", RestartPolicy{}, rep);
  auto uninit = call_variable(self, empty, variable_call("read", AttrMap{}, {}));
  ASSERT_FALSE(uninit.ok());
  ASSERT_NE(uninit.status().detail<Uninitialized>(), nullptr) << uninit.status();
  EXPECT_EQ(uninit.status().detail<Uninitialized>()->resource, "e");
  self->send_exit(v, caf::exit_reason::user_shutdown);
  self->send_exit(empty, caf::exit_reason::user_shutdown);
}

// Replication was once marked with op attributes ("_replica", "_replica_from"), which any graph
// could set: a kernel's call with them was taken for a primary's and held unapplied on the
// "backup". Now only ResourceCall::replica marks it: such attributes change nothing.
TEST(TypedRefusalTest, AnOpAttributeNamedReplicaDoesNotMakeACallReplicated) {
  InProcessPs1 ps;
  auto [sys, rep, ps0, ps1] = ps.parts();
  auto v = spawn_variable_actor(sys, "w", RestartPolicy{}, rep);
  caf::scoped_actor self{sys};
  ASSERT_TRUE(call_variable(self, v, variable_call("assign", AttrMap{}, {filled(4, 1.f)})).ok());
  AttrMap spoofed;
  spoofed.set("_replica", true);
  spoofed.set("_replica_from", ps0);
  spoofed.set("_replica_data", std::string("1;k"));
  // A dense update: a replicated one would be held unapplied and answered with nothing.
  auto sgd = call_variable(self, v, variable_call("apply_sgd", spoofed, {Tensor::scalar<float>(0.5f), filled(4, 2.f)}));
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  ASSERT_EQ(sgd->size(), 1u) << "the spoofed call was taken for a replicated one";
  EXPECT_EQ(sgd->at(0).data<float>()[0], 0.f);  // 1 - 0.5 * 2: applied now
  // The copy did not become a backup: the next direct update is not refused.
  auto next = call_variable(self, v, variable_call("assign_add", spoofed, {filled(4, 3.f)}));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->at(0).data<float>()[0], 3.f);
  self->send_exit(v, caf::exit_reason::user_shutdown);
}

// The backup's node actor marks what it hands the copy as replicated (the typed field), for a
// typed ReplicaCall whatever its attributes: the copy then holds a dense update unapplied.
TEST(TypedRefusalTest, TheNodeActorMarksAReplicaCallWithoutAttributes) {
  InProcessPs1 ps;
  auto [sys, rep, ps0, ps1] = ps.parts();
  auto resources = std::make_shared<ResourceManager>(sys, variable_actor_factory(RestartPolicy{}, rep));
  NodeActorConfig nc;
  nc.task = ps1;
  nc.resources = resources;
  nc.replicator = rep;
  nc.shutdown_token = "test-token";
  node_actor_t node = spawn_node_actor(sys, nc);
  caf::scoped_actor self{sys};
  auto replicate = [&](const std::string& method, TensorList args) {
    Result<TensorList> out = Internal("no answer");
    self->request(node, std::chrono::seconds(10), replicate_atom::value,
                  ReplicaCall{"w", method, std::move(args), encode_call_attrs(AttrMap()), 0, ""})
        .receive([&](TensorList& r) { out = std::move(r); }, [&](caf::error& e) { out = from_caf_error(e); });
    return out;
  };
  auto assigned = replicate("assign", {filled(4, 1.f)});
  ASSERT_TRUE(assigned.ok()) << assigned.status();
  EXPECT_TRUE(assigned->empty()) << "the node actor did not mark the call as replicated";
  auto held = replicate("apply_sgd", {Tensor::scalar<float>(0.5f), filled(4, 2.f)});
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_TRUE(held->empty());
  // A read applies what the backup held, in order.
  auto w = resources->find("w");
  ASSERT_TRUE(w);
  auto read = call_variable(self, w, variable_call("read", AttrMap{}, {}));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->at(0).data<float>()[0], 0.f);
  self->send(node, shutdown_atom::value, std::string("test-token"));
  resources->close();
}

TEST(PsServingTest, ServerOfAndServedByFollowFailuresAndRedirects) {
  const std::string p0 = "/job:ps/replica:0/task:0", p1 = "/job:ps/replica:0/task:1", p2 = "/job:ps/replica:0/task:2";
  PsServing s({p0, p1, p2});
  EXPECT_EQ(s.server_of(p0), p0);
  EXPECT_TRUE(s.served_by(p1).empty());
  EXPECT_EQ(s.server_of("/job:ps/replica:0/task:9"), "/job:ps/replica:0/task:9");
  ASSERT_TRUE(s.task_down(p0));  // p0 -> its backup p1
  EXPECT_EQ(s.server_of(p0), p1);
  EXPECT_EQ(s.served_by(p1), std::vector<std::string>{p0});
  ASSERT_TRUE(s.task_down(p1));  // p1, and what it served, -> p2
  EXPECT_EQ(s.server_of(p0), p2);
  EXPECT_EQ(s.server_of(p1), p2);
  EXPECT_EQ(s.served_by(p2), (std::vector<std::string>{p0, p1}));
  EXPECT_TRUE(s.served_by(p0).empty());
  // A returned task told that p2 serves it: redirect moves what it serves (itself) there.
  PsServing fresh({p0, p1, p2});
  ASSERT_TRUE(fresh.redirect(p0, p2));
  EXPECT_EQ(fresh.server_of(p0), p2);
  EXPECT_EQ(fresh.server_of(p1), p1);
  EXPECT_FALSE(fresh.redirect(p0, p2));  // nothing changes twice
}

// Routing by what the ps tasks that answer say they serve for (ServerRuntime::refresh_ps_serving).
TEST(PsServingTest, FollowClaimsRoutesWhereTheAnsweringTasksSay) {
  const std::string p0 = "/job:ps/replica:0/task:0", p1 = "/job:ps/replica:0/task:1", p2 = "/job:ps/replica:0/task:2";
  using Claims = std::map<std::string, std::vector<std::string>>;
  // Both copies died, p0 then p1: p0's variables went to p1, then p1's (and p0's) to p0.
  PsServing s({p0, p1});
  ASSERT_TRUE(s.task_down(p0));
  ASSERT_TRUE(s.task_down(p1));
  ASSERT_EQ(s.server_of(p0), p0);
  ASSERT_EQ(s.server_of(p1), p0);
  // Nobody answers: nothing is known, every route stays.
  EXPECT_FALSE(s.follow_claims({}));
  EXPECT_EQ(s.server_of(p1), p0);
  // The restarted p0 answers first and serves for nobody: its own variables come home, and p1's
  // must not stay on p0 (a chief would restore p1's variables there; seen in CI), even though p1
  // is still silent.
  EXPECT_TRUE(s.follow_claims(Claims{{p0, {}}}));
  EXPECT_EQ(s.server_of(p0), p0);
  EXPECT_EQ(s.server_of(p1), p1);
  EXPECT_TRUE(s.aliases().empty());
  EXPECT_FALSE(s.follow_claims(Claims{{p0, {}}, {p1, {}}}));  // nothing changes twice
  // A live backup that took over: its claim wins, whether or not the dead primary answers.
  PsServing t({p0, p1, p2});
  EXPECT_TRUE(t.follow_claims(Claims{{p1, {p0}}, {p2, {}}}));
  EXPECT_EQ(t.server_of(p0), p1);
  EXPECT_TRUE(t.follow_claims(Claims{{p0, {}}, {p1, {}}, {p2, {p0}}}));  // the first claimant in ring order
  EXPECT_EQ(t.server_of(p0), p2);
  // A failed-over route whose server is silent, as is the task: it stays.
  PsServing u({p0, p1, p2});
  ASSERT_TRUE(u.task_down(p0));
  EXPECT_FALSE(u.follow_claims(Claims{{p2, {}}}));
  EXPECT_EQ(u.server_of(p0), p1);
}

// The kernel gate refuses spawning a resource for a kernel, never one that exists or comes by
// replication (get_or_create), and nothing once the gate says OK.
TEST(PsServingTest, TheKernelGateRefusesOnlyResourcesNotHeld) {
  caf::actor_system_config cfg;
  Server::configure(cfg);
  caf::actor_system sys{cfg};
  ResourceManager rm(sys, variable_actor_factory(RestartPolicy{}, nullptr));
  bool refuse = true;
  int asked = 0;
  rm.set_kernel_gate([&](const std::string& name) {
    ++asked;
    return refuse ? Unavailable("not here: " + name) : Status::OK();
  });
  auto r = rm.get_for_kernel("w");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_EQ(r.status().message(), "not here: w");
  EXPECT_FALSE(rm.find("w")) << "a refused kernel access spawned the resource";
  auto copy = rm.get_or_create("w");  // a replicated call's copy
  ASSERT_TRUE(copy.ok()) << copy.status();
  auto again = rm.get_for_kernel("w");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->actor, *copy);
  EXPECT_EQ(asked, 1) << "the gate was asked about a resource that is held";
  refuse = false;
  EXPECT_TRUE(rm.get_for_kernel("v").ok());
  EXPECT_EQ(asked, 2);
  rm.close();
}

net::Frame replica_frame(size_t i, size_t n, const std::string& key, float v, int64_t elems = 4) {
  Tensor t(DType::kFloat32, Shape{elems});
  for (int64_t k = 0; k < elems; ++k) t.data<float>()[k] = v;
  return net::Frame(0, ReplicaInbox::frame_key(i, n, key), t);
}

TEST(ReplicaInboxTest, HoldsACallsTensorsUntilTakenAndSaysWhenTheyAreAllThere) {
  ReplicaInbox inbox(1 << 20, std::chrono::milliseconds(60000));
  EXPECT_TRUE(ReplicaInbox::is_replica_frame(replica_frame(0, 1, "k", 0.f)));
  net::Frame rendezvous(0, "/job:ps/replica:0/task:0/device:CPU:0;x", Tensor::scalar<float>(1.f));
  EXPECT_FALSE(ReplicaInbox::is_replica_frame(rendezvous));
  // Arguments 3 and 1 of a call that moved two, the last one first; the call key may hold ';'.
  const std::string key = "abc|w;x|7";
  int ready = 0;
  inbox.notify(key, [&] { ++ready; });
  inbox.put(replica_frame(3, 2, key, 3.f));
  std::vector<std::pair<size_t, Tensor>> got;
  EXPECT_FALSE(inbox.take(key, 2, &got));
  EXPECT_EQ(ready, 0);
  inbox.put(replica_frame(1, 2, key, 1.f));
  EXPECT_EQ(ready, 1);
  EXPECT_EQ(inbox.held_bytes(), 32u);
  EXPECT_FALSE(inbox.take(key, 3, &got));  // the call says 3: not this one
  ASSERT_TRUE(inbox.take(key, 2, &got));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, 3u);
  EXPECT_EQ(got[0].second.data<float>()[0], 3.f);
  EXPECT_EQ(got[1].first, 1u);
  EXPECT_EQ(got[1].second.data<float>()[2], 1.f);
  EXPECT_EQ(inbox.held_bytes(), 0u);
  EXPECT_EQ(inbox.held_calls(), 0u);
  // Asked after they are all there: the callback runs at once.
  inbox.put(replica_frame(0, 1, "k2", 5.f));
  inbox.notify("k2", [&] { ++ready; });
  EXPECT_EQ(ready, 2);
  inbox.forget("k2");
  EXPECT_EQ(inbox.held_bytes(), 0u);
  EXPECT_EQ(inbox.held_calls(), 0u);
}

TEST(ReplicaInboxTest, DropsMalformedFramesAndBoundsItsMemory) {
  ReplicaInbox inbox(100, std::chrono::milliseconds(60000));
  auto keyed = [](const std::string& k) {
    net::Frame m = replica_frame(0, 1, "x", 1.f);
    m.as<net::TensorFrame>()->key = k;
    return m;
  };
  for (const char* k : {"!replica;", "!replica;0;", "!replica;0;1;", "!replica;a;1;k", "!replica;0;0;k",
                        "!replica;64;65;k", "!replica;0;65;k", "!replica;99999999;1;k", "!replica;-1;1;k"})
    inbox.put(keyed(k));
  EXPECT_EQ(inbox.held_calls(), 0u);
  EXPECT_EQ(inbox.held_bytes(), 0u);
  // A replica frame whose tensor could not be received (an error frame in its place).
  net::Frame err(0, net::ErrorFrame{ReplicaInbox::frame_key(0, 1, "e"), "boom"});
  EXPECT_TRUE(ReplicaInbox::is_replica_frame(err));
  inbox.put(err);
  EXPECT_EQ(inbox.held_calls(), 0u);
  // A repeated index and a count that disagrees with the call's first frame are dropped.
  inbox.put(replica_frame(0, 2, "c", 1.f));
  inbox.put(replica_frame(0, 2, "c", 9.f));
  inbox.put(replica_frame(1, 3, "c", 9.f));
  std::vector<std::pair<size_t, Tensor>> got;
  EXPECT_FALSE(inbox.take("c", 2, &got));
  EXPECT_EQ(inbox.held_bytes(), 16u);
  // Past max_bytes (100): 16 + 64 fits, 32 more does not.
  inbox.put(replica_frame(1, 2, "c", 2.f, 16));
  inbox.put(replica_frame(0, 1, "d", 3.f, 8));
  EXPECT_EQ(inbox.held_bytes(), 80u);
  EXPECT_FALSE(inbox.take("d", 1, &got));
  ASSERT_TRUE(inbox.take("c", 2, &got));
  EXPECT_EQ(got[0].second.data<float>()[0], 1.f);
  EXPECT_EQ(got[1].second.shape(), Shape{16});
  EXPECT_EQ(inbox.held_bytes(), 0u);
}

TEST(ReplicaInboxTest, TensorsNobodyTakesExpire) {
  ReplicaInbox inbox(1 << 20, std::chrono::milliseconds(0));
  inbox.put(replica_frame(0, 2, "old", 1.f));
  EXPECT_EQ(inbox.held_calls(), 1u);
  // The next frame finds the first older than the ttl (0 ms) and drops it.
  inbox.put(replica_frame(0, 1, "new", 1.f));
  std::vector<std::pair<size_t, Tensor>> got;
  EXPECT_EQ(inbox.held_calls(), 1u);
  EXPECT_TRUE(inbox.take("new", 1, &got));
  EXPECT_EQ(inbox.held_bytes(), 0u);
}

// A backup's node actor (in process, with its inbox) gets a primary's two calls before the first
// one's data-plane tensor: the second, which carries its tensor, must wait behind the first.
// Applied out of order, assign(5) after assign_add(1) would leave 5, not 6.
TEST(ReplicaInboxTest, ABackupAppliesAPrimarysCallsInTheirOrderWhateverArrivesFirst) {
  caf::actor_system_config cfg;
  Server::configure(cfg);
  caf::actor_system sys{cfg};
  auto resources = std::make_shared<ResourceManager>(sys, variable_actor_factory(RestartPolicy{}, nullptr));
  auto inbox = std::make_shared<ReplicaInbox>(1 << 20, std::chrono::milliseconds(60000));
  NodeActorConfig nc;
  nc.task = "/job:ps/replica:0/task:1";
  nc.resources = resources;
  nc.replica_inbox = inbox;
  nc.shutdown_token = "test-token";
  node_actor_t node = spawn_node_actor(sys, nc);
  {
    caf::scoped_actor self{sys};
    ReplicaCall ahead{"w", "assign", TensorList{Tensor()}, encode_call_attrs(AttrMap()), 1, "primary|w|1"};
    self->send(node, replicate_atom::value, ahead);
    self->send(node, replicate_atom::value,
               ReplicaCall{"w", "assign_add", TensorList{filled(8, 1.f)}, encode_call_attrs(AttrMap()), 0, ""});
    // Malformed calls are refused, naming the field; nothing is spawned for them.
    auto refusal = [&](ReplicaCall rc) {
      std::string refused;
      self->request(node, std::chrono::seconds(10), replicate_atom::value, std::move(rc))
          .receive([&](const TensorList&) { refused = "answered"; },
                   [&](const caf::error& e) { refused = caf::to_string(e); });
      return refused;
    };
    const std::string attrs = encode_call_attrs(AttrMap());
    EXPECT_NE(refusal({"v", "assign", TensorList{Tensor()}, attrs, 2, "k"}).find("data_count 2 for 1 arguments"),
              std::string::npos);
    EXPECT_NE(refusal({"v", "assign", TensorList{Tensor()}, attrs, 1, ""}).find("data_key of 0 bytes"), std::string::npos);
    EXPECT_NE(refusal({"v", "assign", TensorList{Tensor()}, attrs, 0, "k"}).find("a data_key without data_count"),
              std::string::npos);
    EXPECT_NE(refusal({"v", "no_such_method", TensorList{}, attrs, 0, ""}).find("no_such_method"), std::string::npos);
    EXPECT_NE(refusal({"v", "assign", TensorList{}, "\x01garbage", 0, ""}).find("malformed attributes"), std::string::npos);
    EXPECT_NE(refusal({"", "assign", TensorList{}, attrs, 0, ""}).find("no variable name"), std::string::npos);
    EXPECT_FALSE(resources->find("v")) << "a refused replicated call spawned its variable";
    // Now the first call's tensor arrives over the data plane: both calls are applied, in order.
    inbox->put(net::Frame(0, ReplicaInbox::frame_key(0, 1, "primary|w|1"), filled(8, 5.f)));
    int answered = 0;
    for (int i = 0; i < 2; ++i)
      self->receive([&](const TensorList&) { ++answered; },
                    [&](const caf::error& e) { ADD_FAILURE() << caf::to_string(e); },
                    caf::after(std::chrono::seconds(10)) >> [&] { ADD_FAILURE() << "no answer"; });
    EXPECT_EQ(answered, 2);
    EXPECT_EQ(inbox->held_calls(), 0u);
    auto w = resources->find("w");
    ASSERT_TRUE(w);
    auto read = std::make_shared<ResourceCall>();
    read->resource = "w";
    read->op = *decode_variable_op("read", AttrMap{});
    Tensor value;
    self->request(w, std::chrono::seconds(10), resource_atom::value, ResourceCallPtr(read))
        .receive([&](const TensorList& v) { value = v.empty() ? Tensor() : v[0]; },
                 [&](const caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    ASSERT_TRUE(value.is_initialized());
    for (int i = 0; i < 8; ++i) EXPECT_EQ(value.data<float>()[i], 6.f) << i;
    self->send(node, shutdown_atom::value, std::string("test-token"));
  }
  resources->close();
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
}

// The variable "w" of `n` floats as seen on one ps task: its value, its slots, an Adam update
// and an increment.
struct View {
  Scope root = Scope::root();
  Output w, slots, adam, add;
  explicit View(const std::string& ps, int64_t n = 4) {
    Scope s = root.with_device(ps);
    w = ops::variable(s.with_op_name("w"), Shape{n}, DType::kFloat32);
    slots = ops::variable_slots(s.with_op_name("w_slots"), w);
    auto c = [&](float v) { return ops::constant(s, Tensor::scalar<float>(v)); };
    Tensor g(DType::kFloat32, Shape{n});
    for (int64_t i = 0; i < n; ++i) g.data<float>()[i] = 0.25f * static_cast<float>(i % 7 + 1);
    adam = ops::apply_adam(s.with_op_name("w_adam"), w, c(0.01f), c(0.9f), c(0.999f), c(1e-8f), ops::constant(s, g));
    Tensor one(DType::kFloat32, Shape{n});
    for (int64_t i = 0; i < n; ++i) one.data<float>()[i] = 1.f;
    add = ops::assign_add(s.with_op_name("w_add"), w, ops::constant(s, one));
  }
};

// A cluster of `hosts` in-process "host" tasks (host/0 the chief) and `ps_tasks` replicated ps
// tasks (`actorflow node` processes, each the backup of the one before it, cyclically), with a
// short peer timeout.
struct ReplicatedCluster {
  TempDir dir;
  std::string file;
  explicit ReplicatedCluster(int hosts, int ps_tasks = 2) {
    std::string h, p;
    for (int i = 0; i < hosts; ++i) h += std::string(i ? ", " : "") + "\"localhost:" + std::to_string(free_port()) + "\"";
    for (int i = 0; i < ps_tasks; ++i) p += std::string(i ? ", " : "") + "\"localhost:" + std::to_string(free_port()) + "\"";
    file = dir.write("c.toml", "[jobs]\nhost = [" + h + "]\nps = [" + p +
                                   "]\n[server]\nheartbeat_interval_ms = 250\npeer_timeout_ms = 1500\n[supervisor]\n"
                                   "chief = \"host/0\"\nps_replicas = 2\n");
  }
  // Starts ps task `i` and waits until it serves.
  std::unique_ptr<ChildProcess> start_ps(int i) const {
    auto p = ChildProcess::start({binary("actorflow"), "node", "--cluster", file, "--job", "ps", "--task", std::to_string(i)});
    EXPECT_TRUE(p && p->wait_for_output("serving", 30s)) << (p ? p->output() : "not started");
    return p;
  }
  // An in-process server of host task `i` of this cluster.
  Result<std::unique_ptr<Server>> host(int i) const {
    AF_ASSIGN_OR_RETURN(ClusterSpec cluster, ClusterSpec::from_file(file));
    return Server::create(cluster, TaskId{"host", i});
  }
};

// Acknowledged updates of an `n`-float variable are on the backup, which serves them once the
// primary dies and gives the returning task the whole state. With `data_plane`, the variable is
// large enough (kReplicaDataMinBytes) that the updates' tensors and the whole states go over
// the data plane, which both directions must say they use.
void acknowledged_updates_survive(int64_t n, bool data_plane) {
  ReplicatedCluster rc(2);
  const std::string& file = rc.file;
  auto start_ps = [&](int i) { return rc.start_ps(i); };
  auto ps0 = start_ps(0);
  auto ps1 = start_ps(1);
  // Task 0 serves alone until it reaches its backup (a cluster starting up): wait for that.
  ASSERT_TRUE(ps0->wait_for_output("backup /job:ps/replica:0/task:1 connected", 30s)) << ps0->output();
  auto cluster = ClusterSpec::from_file(file);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto server = Server::create(*cluster, TaskId{"host", 0});
  ASSERT_TRUE(server.ok()) << server.status();

  View primary("/job:ps/task:0", n), backup("/job:ps/task:1", n);
  Session a(primary.root, (*server)->target());
  Session b(backup.root, (*server)->target());
  Tensor init(DType::kFloat32, Shape{n});
  for (int64_t i = 0; i < n; ++i) init.data<float>()[i] = static_cast<float>(i % 11);
  auto init_op = ops::assign(primary.root.with_op_name("w_init").with_device("/job:ps/task:0"), primary.w,
                             ops::constant(primary.root.with_device("/job:ps/task:0"), init));
  ASSERT_TRUE(a.run({init_op}).ok());
  // Every acknowledged update is on the backup already: no wait between the two.
  for (int i = 0; i < 20; ++i) {
    auto up = a.run({i % 2 ? primary.adam : primary.add});
    ASSERT_TRUE(up.ok()) << up.status();
    auto pv = a.run({primary.w, primary.slots});
    auto bv = b.run({backup.w, backup.slots});
    ASSERT_TRUE(pv.ok() && bv.ok()) << pv.status() << " " << bv.status();
    EXPECT_TRUE(same_bytes((*pv)[0], (*bv)[0])) << "value differs after update " << i;
    EXPECT_TRUE(same_bytes((*pv)[1], (*bv)[1])) << "slots differ after update " << i;
  }
  // Dense updates with nothing read from the backup between them: it holds them unapplied and
  // takes the primary's whole state now and then (variable_actor.cc, kSyncEvery and kHeldStates:
  // here every 6th, by bytes); 19 leave some held past the last whole state, which the reads below must
  // include.
  for (int i = 0; i < 19; ++i) {
    auto up = a.run({primary.adam});
    ASSERT_TRUE(up.ok()) << up.status();
  }
  auto last = a.run({primary.w, primary.slots});
  ASSERT_TRUE(last.ok());
  const char* kOverDataPlane = "tensors of replicated calls arrive over the data plane";
  // Every update above was acknowledged, so its tensors have reached the backup (whose log the
  // test reads through a pipe: waited for).
  if (data_plane) EXPECT_TRUE(ps1->wait_for_output(kOverDataPlane, 10s)) << ps1->output();
  else EXPECT_EQ(ps1->output().find(kOverDataPlane), std::string::npos) << ps1->output();

  // The primary's task dies: its backup holds every acknowledged update and serves them.
  ps0->signal(SIGKILL);
  ps0->wait(10s);
  auto kept = b.run({backup.w, backup.slots});
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(same_bytes((*last)[0], (*kept)[0]));
  EXPECT_TRUE(same_bytes((*last)[1], (*kept)[1]));
  // Updated there, the backup copy becomes the primary (its backup, task 0, is down: alone).
  auto promoted = b.run({backup.add});
  ASSERT_TRUE(promoted.ok()) << promoted.status();

  // Task 0 returns empty; once task 1 has reconnected to it, the acting primary's next update
  // gives it the whole state. Read there directly by a process that started after the failover
  // (host/1: task 0 not aliased to task 1), the copy equals the acting primary's.
  ps0 = start_ps(0);
  ASSERT_TRUE(ps1->wait_for_output("backup /job:ps/replica:0/task:0 connected (epoch 2)", 30s)) << ps1->output();
  auto up = b.run({backup.adam});
  ASSERT_TRUE(up.ok()) << up.status();
  auto bv = b.run({backup.w, backup.slots});
  ASSERT_TRUE(bv.ok()) << bv.status();
  auto late = Server::create(*cluster, TaskId{"host", 1});
  ASSERT_TRUE(late.ok()) << late.status();
  Session c(primary.root, (*late)->target());
  auto pv = c.run({primary.w, primary.slots});
  ASSERT_TRUE(pv.ok()) << "task 0 never got the state back: " << pv.status();
  EXPECT_TRUE(same_bytes((*pv)[0], (*bv)[0]));
  EXPECT_TRUE(same_bytes((*pv)[1], (*bv)[1]));
  if (data_plane) EXPECT_TRUE(ps0->wait_for_output(kOverDataPlane, 10s)) << ps0->output();
  else EXPECT_EQ(ps0->output().find(kOverDataPlane), std::string::npos) << ps0->output();
  (*late)->stop();
  (*server)->stop();
}

// A cluster member sends a ps task's data plane replica frames no primary sent: malformed keys,
// out-of-range indices and counts, counts that disagree, error frames, and a flood of calls that
// never come. The node drops them (its inbox bounded and expiring), keeps serving, and a member
// with the wrong secret cannot even deliver one.
TEST(PsReplicationTest, ForgedReplicaFramesAreDroppedAndTheNodeServesOn) {
  ReplicatedCluster rc(1);
  auto ps1 = rc.start_ps(1);
  auto cluster = ClusterSpec::from_file(rc.file);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  caf::actor_system_config cfg;
  Server::configure(cfg);
  caf::actor_system sys{cfg};
  MembershipConfig mc;
  mc.self_task = "/job:host/replica:0/task:0";
  mc.fingerprint = cluster->fingerprint();
  Membership m(sys, mc);
  auto addr = cluster->task_address(TaskId{"ps", 1});
  ASSERT_TRUE(addr.ok());
  auto peer = m.ensure("/job:ps/replica:0/task:1", *addr, 10s);
  ASSERT_TRUE(peer.ok()) << peer.status();
  net::TransportOptions o;
  o.cluster_fingerprint = cluster->fingerprint();
  o.task_name = "host/0";
  {
    net::TransportOptions wrong = o;
    wrong.secret = "not-the-cluster-secret";
    net::TensorClient stranger(wrong);
    EXPECT_FALSE(stranger.send(peer->data_addr, replica_frame(0, 1, "x", 1.f)).ok());
  }
  net::TensorClient c(o);
  std::vector<net::Frame> forged;
  for (const char* k : {"!replica;", "!replica;0;0;k", "!replica;64;65;k", "!replica;99999999;1;k", "!replica;0;1;"}) {
    net::Frame f = replica_frame(0, 1, "x", 1.f);
    f.as<net::TensorFrame>()->key = k;
    forged.push_back(f);
  }
  forged.push_back(replica_frame(0, 2, "c", 1.f));
  forged.push_back(replica_frame(0, 2, "c", 1.f));  // repeated index
  forged.push_back(replica_frame(1, 3, "c", 1.f));  // count disagrees
  ASSERT_TRUE(c.send_batch(peer->data_addr, forged).ok());
  // A flood: 2000 calls whose BASP message never comes (64 MB held at most, dropped by expiry).
  for (int i = 0; i < 2000; i += 100) {
    std::vector<net::Frame> flood;
    for (int k = i; k < i + 100; ++k) flood.push_back(replica_frame(0, 2, "flood|" + std::to_string(k), 2.f, 8192));
    ASSERT_TRUE(c.send_batch(peer->data_addr, flood).ok());
  }
  // Still serving: the node actor answers a member, and the data plane takes a frame.
  caf::scoped_actor self{sys};
  std::string task;
  self->request(peer->node, 10s, ping_atom::value)
      .receive([&](std::string& t) { task = t; }, [&](caf::error& e) { task = caf::to_string(e); });
  EXPECT_EQ(task, "/job:ps/replica:0/task:1");
  EXPECT_TRUE(c.send(peer->data_addr, replica_frame(0, 1, "after", 3.f)).ok());
  EXPECT_TRUE(ps1->running()) << ps1->output();
  EXPECT_TRUE(ps1->wait_for_output("dropped a replica frame of call c", 10s)) << ps1->output();
  EXPECT_NE(ps1->output().find("dropped a malformed replica frame"), std::string::npos) << ps1->output();
}

TEST(PsReplicationTest, AcknowledgedUpdatesAreOnTheBackupAndSurviveThePrimary) {
  acknowledged_updates_survive(4, /*data_plane=*/false);
}

TEST(PsReplicationTest, LargeUpdatesGoOverTheDataPlaneAndSurviveThePrimary) {
  acknowledged_updates_survive(8192, /*data_plane=*/true);
}

// Counts the updates of a job with one variable on each of `n` ps tasks ("v<i>" on ps task i,
// the backup of ps task i - 1).
struct Counters {
  Scope root = Scope::root();
  std::vector<Output> vars;
  Output add, read;
  explicit Counters(int n) {
    std::vector<Output> incs, ids;
    for (int i = 0; i < n; ++i) {
      Scope si = root.with_device("/job:ps/task:" + std::to_string(i));
      vars.push_back(ops::variable(si.with_op_name("v" + std::to_string(i)), Shape{}, DType::kFloat32));
      incs.push_back(ops::assign_add(si.with_op_name("v" + std::to_string(i) + "_add"), vars.back(),
                                     ops::constant(si, Tensor::scalar<float>(1.f))));
      ids.push_back(ops::identity(si, vars.back()));
    }
    add = ops::add_n(root.with_op_name("all"), incs);
    read = ops::add_n(root.with_op_name("sum"), ids);
  }
  Output init(float v) {
    std::vector<Output> as;
    for (size_t i = 0; i < vars.size(); ++i) {
      Scope si = root.with_device("/job:ps/task:" + std::to_string(i));
      as.push_back(ops::assign(si, vars[i], ops::constant(si, Tensor::scalar<float>(v))));
    }
    return ops::add_n(root.with_op_name("init"), as);
  }
};

// A process that updates a Counters model and counts its acknowledged and failed runs.
struct CountingClient {
  Counters& m;
  Session& sess;
  int64_t acked = 0, failed = 0;
  Status step() {
    auto r = sess.run({m.add});
    r.ok() ? ++acked : ++failed;
    return r.status();
  }
  // Runs until `n` runs succeeded (or 20 s passed); returns how many did.
  int64_t succeed(int64_t n) {
    int64_t ok = 0;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (ok < n && std::chrono::steady_clock::now() < deadline)
      if (step().ok()) ++ok;
    return ok;
  }
  float sum() {
    auto r = sess.run({m.read});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->at(0).data<float>()[0] : -1.f;
  }
};

// The replicated ps tasks of `rc` (0..n-1), started, each connected to its backup.
std::vector<std::unique_ptr<ChildProcess>> start_replicated_ps(const ReplicatedCluster& rc, int n) {
  std::vector<std::unique_ptr<ChildProcess>> ps;
  for (int i = 0; i < n; ++i) ps.push_back(rc.start_ps(i));
  for (int i = 0; i < n; ++i) {
    const std::string backup = "backup /job:ps/replica:0/task:" + std::to_string((i + 1) % n) + " connected";
    EXPECT_TRUE(ps[static_cast<size_t>(i)]->wait_for_output(backup, 30s)) << ps[static_cast<size_t>(i)]->output();
  }
  return ps;
}

// Kills ps task 0 of a Counters job run by `c` (30 acknowledged runs before) and checks the
// failover: at most a few failed runs, then 30 acknowledged ones, ps/0's variable served by ps/1
// with every acknowledged update (and at most the failed runs besides: at-least-once, as a
// retried step).
void kill_ps0_and_fail_over(CountingClient& c, Server& server, ChildProcess& ps0, int n) {
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(c.step().ok());
  ps0.signal(SIGKILL);
  ps0.wait(10s);
  Status first = c.step();
  EXPECT_EQ(c.succeed(30), 30) << "no failover; the first run after the kill: " << first;
  const auto aliases = ServerRuntime(server).ps_serving()->aliases();
  ASSERT_EQ(aliases.size(), 1u);
  EXPECT_EQ(aliases.begin()->first, "/job:ps/replica:0/task:0");
  EXPECT_EQ(aliases.begin()->second, "/job:ps/replica:0/task:1");
  const float total = c.sum();
  EXPECT_GE(total, static_cast<float>(n * c.acked));
  EXPECT_LE(total, static_cast<float>(n * (c.acked + c.failed)));
  EXPECT_LE(c.failed, 3) << "failover took more than a few failed runs";
}

TEST(PsReplicationTest, AWorkerFailsOverToTheBackupAndANewcomerIsRedirected) {
  ReplicatedCluster rc(2);
  auto ps = start_replicated_ps(rc, 2);
  auto server = rc.host(0);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NE(ServerRuntime(**server).ps_serving(), nullptr);
  Counters m(2);
  Session sess(m.root, (*server)->target());
  ASSERT_TRUE(sess.run({m.init(0.f)}).ok());
  CountingClient c{m, sess};
  // ps/0 dies: its variable is served by its backup on ps/1 from then on, with every
  // acknowledged update: no restore, no rollback.
  kill_ps0_and_fail_over(c, **server, *ps[0], 2);
  if (HasFatalFailure()) return;

  // ps/0 returns empty. Its backup ps/1, which serves ps/0's variable now, tells it so, and
  // replicates both variables to it (ps/0 is ps/1's backup). A process that starts now routes
  // ps/0's variable to ps/0 and is refused there once with the name of the primary, whether ps/0
  // holds its backup copy yet (an update of a copy is refused while its primary lives) or not (a
  // variable not there is refused, never created empty); then it follows the primary.
  ps[0] = rc.start_ps(0);
  ASSERT_TRUE(ps[0]->wait_for_output("its variables are served by /job:ps/replica:0/task:1", 30s)) << ps[0]->output();
  auto newcomer = rc.host(1);
  ASSERT_TRUE(newcomer.ok()) << newcomer.status();
  Counters m2(2);
  Session late(m2.root, (*newcomer)->target());
  ASSERT_TRUE(c.step().ok());
  auto refused = late.run({m2.add});
  ASSERT_FALSE(refused.ok()) << "ps/0 took an update of a variable its backup serves";
  ASSERT_NE(refused.status().detail<ServedBy>(), nullptr) << refused.status();
  EXPECT_EQ(*refused.status().detail<ServedBy>(), (ServedBy{"/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"}))
      << refused.status();
  auto accepted = late.run({m2.add});
  EXPECT_TRUE(accepted.ok()) << accepted.status();
  auto both = late.run({m2.read});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->at(0).data<float>()[0], c.sum()) << "two primaries";
  (*newcomer)->stop();
  (*server)->stop();
}

// With 3 ps tasks a returning ps/0 is the backup of ps/2 only, so it never gets a copy of its own
// old variable, which ps/1 serves: ps/0 learns that from ps/1 when it starts, and refuses every
// access to that variable (reads too) with ps/1's name, instead of creating an empty one that a
// newcomer would read as uninitialized and a restarted chief would initialize (a second, forked
// model). The newcomer follows the refusal and sees the one model.
TEST(PsReplicationTest, AReturningPsRefusesTheVariablesItsBackupTookOver) {
  ReplicatedCluster rc(2, 3);
  auto ps = start_replicated_ps(rc, 3);
  auto server = rc.host(0);
  ASSERT_TRUE(server.ok()) << server.status();
  Counters m(3);
  Session sess(m.root, (*server)->target());
  ASSERT_TRUE(sess.run({m.init(0.f)}).ok());
  CountingClient c{m, sess};
  kill_ps0_and_fail_over(c, **server, *ps[0], 3);
  if (HasFatalFailure()) return;

  ps[0] = rc.start_ps(0);
  ASSERT_TRUE(ps[0]->wait_for_output("its variables are served by /job:ps/replica:0/task:1", 30s)) << ps[0]->output();
  // ps/2 replicates its variable to the returned ps/0 (its backup) on its next update.
  ASSERT_TRUE(c.step().ok());
  auto newcomer = rc.host(1);
  ASSERT_TRUE(newcomer.ok()) << newcomer.status();
  Counters m2(3);
  Session late(m2.root, (*newcomer)->target());
  auto refused = late.run({m2.read});
  ASSERT_FALSE(refused.ok()) << "ps/0 served its old variable, which ps/1 serves now";
  EXPECT_NE(refused.status().message().find("came back after a failover"), std::string::npos) << refused.status();
  ASSERT_NE(refused.status().detail<ServedBy>(), nullptr) << refused.status();
  EXPECT_EQ(*refused.status().detail<ServedBy>(), (ServedBy{"/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"}))
      << refused.status();
  auto seen = late.run({m2.read});
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->at(0).data<float>()[0], c.sum()) << "the newcomer sees another model";
  ASSERT_TRUE(late.run({m2.add}).ok());
  ASSERT_TRUE(c.step().ok());
  EXPECT_EQ(c.sum(), seen->at(0).data<float>()[0] + 6.f) << "an update of one process is missing in the other's model";
  const auto aliases = ServerRuntime(**newcomer).ps_serving()->aliases();
  ASSERT_EQ(aliases.size(), 1u);
  EXPECT_EQ(aliases.begin()->second, "/job:ps/replica:0/task:1");
  (*newcomer)->stop();
  (*server)->stop();
}

// Both copies die one after the other (ps/1 took ps/0 over, then died too): nothing holds the
// model, and a new chief puts it back where it was placed (here it initializes it). A process
// that lived through both failovers routes both ps tasks' variables to ps/0, which holds ps/1's
// only as a backup copy (or not at all yet): its run fails once, it asks the ps tasks where the
// variables are served, and then it trains on the same model as the new process (before, it
// followed each refusal blindly from one ps task to the other, forever).
TEST(PsReplicationTest, AProcessThatLivedThroughBothFailoversFollowsTheRestoredModel) {
  ReplicatedCluster rc(2);
  auto ps = start_replicated_ps(rc, 2);
  auto server = rc.host(0);
  ASSERT_TRUE(server.ok()) << server.status();
  Counters m(2);
  Session sess(m.root, (*server)->target());
  ASSERT_TRUE(sess.run({m.init(0.f)}).ok());
  CountingClient c{m, sess};
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(c.step().ok());
  ps[0]->signal(SIGKILL);
  ps[0]->wait(10s);
  ASSERT_EQ(c.succeed(5), 5) << "no failover to ps/1";
  ps[1]->signal(SIGKILL);
  ps[1]->wait(10s);
  EXPECT_FALSE(c.step().ok()) << "a run succeeded with both copies dead";
  const auto old_routes = ServerRuntime(**server).ps_serving()->aliases();
  ASSERT_EQ(old_routes.size(), 1u);
  EXPECT_EQ(old_routes.begin()->first, "/job:ps/replica:0/task:1");
  EXPECT_EQ(old_routes.begin()->second, "/job:ps/replica:0/task:0");

  ps = start_replicated_ps(rc, 2);
  auto chief = rc.host(1);
  ASSERT_TRUE(chief.ok()) << chief.status();
  Counters m2(2);
  Session fresh(m2.root, (*chief)->target());
  ASSERT_TRUE(fresh.run({m2.init(100.f)}).ok());
  ASSERT_TRUE(fresh.run({m2.add}).ok());  // each copy replicated to the other ps task

  const int64_t failed_before = c.failed;
  ASSERT_EQ(c.succeed(1), 1) << "the old process never found the restored model";
  EXPECT_LE(c.failed - failed_before, 1) << "more than one failed run before the old process followed";
  EXPECT_TRUE(ServerRuntime(**server).ps_serving()->aliases().empty()) << "routes still failed over";
  // 100 + 100, the fresh process's add (2), the old process's acknowledged add (2), and what a
  // failed run applied before it was refused (its add on the ps task that serves it: 0 or 1).
  auto seen = fresh.run({m2.read});
  ASSERT_TRUE(seen.ok()) << seen.status();
  const float expected = 204.f + static_cast<float>(c.failed - failed_before);
  EXPECT_GE(seen->at(0).data<float>()[0], 204.f);
  EXPECT_LE(seen->at(0).data<float>()[0], expected);
  EXPECT_EQ(c.sum(), seen->at(0).data<float>()[0]) << "the two processes see different models";
  (*chief)->stop();
  (*server)->stop();
}

}  // namespace
}  // namespace actorflow
