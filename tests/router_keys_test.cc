// The router's side of rendezvous keys (actors/router.h, device/rendezvous_key.h): a _Send whose
// key was planned for another incarnation of its own task fails; frames entering over the data
// plane with a malformed key, or with a key of an incarnation their sender ran as before it
// restarted, are dropped and counted; a newer incarnation the router has not heard of passes.
// And the error frames a receiver makes of a tensor it could not take (net/frames.h): each ends
// what waits for that tensor, saying why.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "actors/router.h"
#include "actors/server.h"
#include "core/metrics.h"
#include "device/rendezvous_key.h"

namespace actorflow {
namespace {

const std::string kOwnTask = "/job:worker/replica:0/task:0";
const std::string kOwnCpu = kOwnTask + "/device:CPU:0";
const std::string kPeerTask = "/job:ps/replica:0/task:0";
const std::string kPeerCpu = kPeerTask + "/device:CPU:0";

Counter& bad_keys(const char* reason) {
  return Metrics::global().counter(
      "actorflow_bad_rendezvous_keys_total",
      "Data-plane frames dropped for their rendezvous key: malformed, or of a stale incarnation of the sender",
      {{"reason", reason}});
}

RendezvousKey key(const std::string& src, uint64_t inc, const std::string& dst) {
  auto k = RendezvousKey::make(src, inc, dst, "x:0");
  EXPECT_TRUE(k.ok()) << k.status();
  return k.ok() ? *k : RendezvousKey();
}

net::Frame frame(net::FrameKind kind, const std::string& wire) {
  if (kind == net::FrameKind::kFeed) return net::Frame(9, net::FeedFrame{wire, Tensor::scalar<float>(1.f)});
  return net::Frame(9, wire, Tensor::scalar<float>(1.f));
}

TEST(RouterKeysTest, ASendPlannedForAnotherIncarnationOfItsTaskFails) {
  auto r = std::make_shared<ProcessRouter>(kOwnTask, 0xaa);
  const Tensor t = Tensor::scalar<float>(1.f);
  Status stale = r->route_key(1, key(kOwnCpu, 0xbb, kPeerCpu), t);
  ASSERT_EQ(stale.code(), Code::kAborted) << stale;
  EXPECT_NE(stale.message().find("incarnation 00000000000000bb of " + kOwnTask), std::string::npos) << stale;
  EXPECT_NE(stale.message().find("now runs as incarnation 00000000000000aa"), std::string::npos) << stale;
  // Its own incarnation, or none, passes the check (and finds no route: nothing is set up).
  EXPECT_EQ(r->route_key(1, key(kOwnCpu, 0xaa, kPeerCpu), t).code(), Code::kUnavailable);
  EXPECT_EQ(r->route_key(1, key(kOwnCpu, 0, kPeerCpu), t).code(), Code::kUnavailable);
  // The string form is parsed once, and a malformed one says so.
  Status bad = r->route(1, kOwnCpu + ";" + kPeerCpu, t);
  ASSERT_EQ(bad.code(), Code::kInvalidArgument) << bad;
  EXPECT_NE(bad.message().find("2 ';'-separated field"), std::string::npos) << bad;
  EXPECT_EQ(r->route(1, key(kOwnCpu, 0xaa, kPeerCpu).wire(), t).code(), Code::kUnavailable);
}

TEST(RouterKeysTest, FramesWithMalformedOrStaleKeysAreDroppedAndCounted) {
  auto r = std::make_shared<ProcessRouter>(kOwnTask, 0xaa);
  Counter& stale = bad_keys("stale");
  Counter& malformed = bad_keys("malformed");
  const int64_t stale0 = stale.value(), malformed0 = malformed.value();
  // The peer ran as 0x1, then restarted as 0x2: 0x1 is retired.
  r->set_remote(kPeerTask, node_actor_t(), "", 0x1);
  r->deliver(frame(net::FrameKind::kTensor, key(kPeerCpu, 0x1, kOwnCpu).wire()));
  EXPECT_EQ(stale.value(), stale0);  // still its current incarnation
  r->set_remote(kPeerTask, node_actor_t(), "", 0x2);
  r->deliver(frame(net::FrameKind::kTensor, key(kPeerCpu, 0x1, kOwnCpu).wire()));
  EXPECT_EQ(stale.value(), stale0 + 1);
  r->deliver(frame(net::FrameKind::kFeed, key(kPeerCpu, 0x1, kOwnCpu).wire()));
  EXPECT_EQ(stale.value(), stale0 + 2);
  // The current incarnation, one not heard of yet (a restart the membership has not seen), and
  // keys without an incarnation pass.
  r->deliver(frame(net::FrameKind::kTensor, key(kPeerCpu, 0x2, kOwnCpu).wire()));
  r->deliver(frame(net::FrameKind::kTensor, key(kPeerCpu, 0x3, kOwnCpu).wire()));
  r->deliver(frame(net::FrameKind::kTensor, key(kPeerCpu, 0, kOwnCpu).wire()));
  EXPECT_EQ(stale.value(), stale0 + 2);
  EXPECT_EQ(malformed.value(), malformed0);
  // Malformed keys, of each kind of frame that carries one.
  r->deliver(frame(net::FrameKind::kTensor, "no key at all"));
  r->deliver(frame(net::FrameKind::kFeed, kPeerCpu + ";;x:0"));
  r->deliver(frame(net::FrameKind::kTensor, kPeerCpu + ";" + kOwnCpu + ";" + std::string(5000, 'e')));
  EXPECT_EQ(malformed.value(), malformed0 + 3);
  EXPECT_EQ(stale.value(), stale0 + 2);
}

// An error frame standing for a fetched value (a ret) that could not be received fails that
// device's part of the step at once, as a ResourceExhausted outcome that carries the reason; one
// standing for a tensor aborts the step on the key's device, naming the key and the reason.
TEST(RouterKeysTest, ErrorFramesEndWhatWaitsForTheirTensorSayingWhy) {
  caf::actor_system_config cfg;
  Server::configure(cfg);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto r = std::make_shared<ProcessRouter>(kOwnTask, 0xaa);
  r->set_master(caf::actor_cast<master_actor_t>(self), nullptr);
  r->add(kOwnCpu, caf::actor_cast<device_actor_t>(self));
  net::ErrorFrame lost_ret{kPeerCpu, "the tensor of ret frame could not be received: no memory", net::FrameKind::kRet, 1};
  r->deliver(net::Frame(41, lost_ret));
  bool done = false;
  self->receive(
      [&](stepdone_atom, int64_t step, const std::string& device, const Status& outcome) {
        done = true;
        EXPECT_EQ(step, 41);
        EXPECT_EQ(device, kPeerCpu);
        EXPECT_EQ(outcome.code(), Code::kResourceExhausted) << outcome;
        EXPECT_NE(outcome.message().find("no memory"), std::string::npos) << outcome;
      },
      caf::after(std::chrono::seconds(10)) >> [] {});
  EXPECT_TRUE(done) << "no outcome reached the master";

  const RendezvousKey k = key(kPeerCpu, 0x1, kOwnCpu);
  r->deliver(net::Frame(42, net::ErrorFrame{k.wire(), "the sender's kernel failed"}));
  bool aborted = false;
  self->receive(
      [&](abort_atom, int64_t step, const std::string& why) {
        aborted = true;
        EXPECT_EQ(step, 42);
        EXPECT_NE(why.find(k.wire()), std::string::npos) << why;
        EXPECT_NE(why.find("the sender's kernel failed"), std::string::npos) << why;
      },
      caf::after(std::chrono::seconds(10)) >> [] {});
  EXPECT_TRUE(aborted) << "the device was not told";
  // A lost feed is left to its step's deadline; a malformed key is dropped as for a tensor.
  Counter& malformed = bad_keys("malformed");
  const int64_t malformed0 = malformed.value();
  r->deliver(net::Frame(43, net::ErrorFrame{"no key", "x", net::FrameKind::kFeed}));
  EXPECT_EQ(malformed.value(), malformed0 + 1);
  r->deliver(net::Frame(44, net::ErrorFrame{k.wire(), "lost", net::FrameKind::kFeed}));
  // Both deliveries ran on this thread, so a message they sent is in the mailbox already.
  bool anything = false;
  self->receive([&](abort_atom, int64_t, const std::string&) { anything = true; },
                [&](stepdone_atom, int64_t, const std::string&, const Status&) { anything = true; },
                caf::after(std::chrono::milliseconds(0)) >> [] {});
  EXPECT_FALSE(anything) << "a lost feed reached an actor";
  r->clear();
}

}  // namespace
}  // namespace actorflow
