// A variable's inline part (actors/resources.h InlineResource, actors/variable_actor.cc VarCell):
// reads and updates of small host variables are served on the caller's thread with the answer
// the actor would give; everything else is left to the actor; inline and actor calls on one
// variable never interleave; once the actor is gone nothing is served inline.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "actorflow/server.h"
#include "actors/messages.h"
#include "actors/resources.h"
#include "actors/variable_actor.h"
#include "device/kernel.h"
#include "device/variable_call.h"

namespace actorflow {
namespace {

Tensor floats(std::vector<float> v) {
  const auto n = static_cast<int64_t>(v.size());
  return Tensor::from_vector<float>(std::move(v), Shape{n});
}

ResourceCall make_call(const std::string& var, const std::string& method, std::vector<Tensor> args,
                       AttrMap attrs = AttrMap()) {
  auto op = decode_variable_op(method, std::move(attrs));
  EXPECT_TRUE(op.ok()) << method << ": " << op.status();
  ResourceCall c;
  c.resource = var;
  c.op = op.ok() ? *op : nullptr;
  c.args = std::move(args);
  c.step_id = 1;
  return c;
}

// The actor's answer to `call` (the path every call took before the inline part).
Result<std::vector<Tensor>> through_actor(caf::actor_system& sys, const variable_actor_t& a, ResourceCall call) {
  caf::scoped_actor self{sys};
  Result<std::vector<Tensor>> out = Internal("no answer within 10 s");
  self->request(a, std::chrono::seconds(10), resource_atom::value, ResourceCallPtr(std::make_shared<ResourceCall>(std::move(call))))
      .receive([&](std::vector<Tensor>& v) { out = std::move(v); },
               [&](caf::error& e) { out = from_caf_error(e, "resource"); });
  return out;
}

// The inline answer, or an error saying the call was left to the actor.
Result<std::vector<Tensor>> served(std::optional<Result<std::vector<Tensor>>> r) {
  if (!r) return Internal("not served inline");
  return std::move(*r);
}

std::vector<float> values(const Result<std::vector<Tensor>>& r) {
  if (!r.ok() || r->empty() || !(*r)[0].is_initialized()) return {};
  const Tensor& t = (*r)[0];
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}

struct Fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<ResourceManager> rm;
  Fixture() {
    Server::configure(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    rm = std::make_unique<ResourceManager>(*sys, variable_actor_factory(RestartPolicy{}, nullptr));
  }
  ~Fixture() { rm->close(); }
};

TEST(InlineVariableTest, SmallCallsAreServedInlineWithTheActorsAnswers) {
  Fixture f;
  auto w = f.rm->get_for_kernel("w");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(w->inline_part) << "a variable actor's resource has an inline part";
  InlineResource& in = *w->inline_part;

  // A read of a variable not yet initialized: the actor's error, inline. (The actor's first
  // answer also means it has started: before, its inline part serves nothing and every call
  // goes to the actor.)
  const auto actor_unread = through_actor(*f.sys, w->actor, make_call("w", "read", {}));
  auto unread = in.try_call(make_call("w", "read", {}));
  ASSERT_TRUE(unread.has_value()) << "a read is served inline";
  ASSERT_FALSE(unread->ok());
  EXPECT_EQ(unread->status().to_string(), actor_unread.status().to_string());
  EXPECT_NE(unread->status().message().find("variable 'w'"), std::string::npos) << unread->status();

  auto assigned = in.try_call(make_call("w", "assign", {floats({1, 2, 3, 4})}));
  ASSERT_TRUE(assigned.has_value());
  EXPECT_EQ(values(*assigned), (std::vector<float>{1, 2, 3, 4}));
  // Plain SGD, lr 0.5, gradient 2: w - 1 (hand-computed).
  auto applied = in.try_call(make_call("w", "apply_sgd", {Tensor::scalar<float>(0.5f), floats({2, 2, 2, 2})}));
  ASSERT_TRUE(applied.has_value()) << "an update of a 16-byte variable is served inline";
  EXPECT_EQ(values(*applied), (std::vector<float>{0, 1, 2, 3}));
  // The actor sees what the inline calls did, and the other way round.
  EXPECT_EQ(values(through_actor(*f.sys, w->actor, make_call("w", "read", {}))), (std::vector<float>{0, 1, 2, 3}));
  ASSERT_TRUE(through_actor(*f.sys, w->actor, make_call("w", "assign_add", {floats({10, 10, 10, 10})})).ok());
  EXPECT_EQ(values(served(in.try_call(make_call("w", "read", {})))), (std::vector<float>{10, 11, 12, 13}));
  // A bad gradient: the actor's error, naming the variable, and nothing changes.
  auto bad = in.try_call(make_call("w", "apply_sgd", {Tensor::scalar<float>(0.5f), floats({1, 2, 3})}));
  ASSERT_TRUE(bad.has_value());
  ASSERT_FALSE(bad->ok());
  const auto actor_bad =
      through_actor(*f.sys, w->actor, make_call("w", "apply_sgd", {Tensor::scalar<float>(0.5f), floats({1, 2, 3})}));
  EXPECT_EQ(bad->status().to_string(), actor_bad.status().to_string());
  EXPECT_EQ(values(served(in.try_call(make_call("w", "read", {})))), (std::vector<float>{10, 11, 12, 13}));

  // What stays with the actor: synchronous contributions (their answers are held) and the
  // checkpoint's slot blobs.
  AttrMap sync;
  sync.set("optimizer", std::string("sgd"));
  sync.set("lr", 0.5);
  sync.set("replicas_to_aggregate", int64_t{2});
  sync.set("total_num_replicas", int64_t{2});
  EXPECT_FALSE(in.try_call(make_call("w", "apply_sync", {floats({1, 1, 1, 1}), Tensor::scalar<int64_t>(0)}, sync)));
  EXPECT_FALSE(in.try_call(make_call("w", "save_slots", {})));
}

TEST(InlineVariableTest, UpdatesOfLargeVariablesGoToTheActorAndReadsStayInline) {
  Fixture f;
  auto big = f.rm->get_for_kernel("big");
  ASSERT_TRUE(big.ok()) << big.status();
  InlineResource& in = *big->inline_part;
  ASSERT_TRUE(through_actor(*f.sys, big->actor, make_call("big", "is_initialized", {})).ok());  // started
  // 16 385 floats: one element past the inline bound of 64 KiB.
  const int64_t n = 16 * 1024 + 1;
  Tensor ones(DType::kFloat32, Shape{n});
  for (int64_t i = 0; i < n; ++i) ones.data<float>()[i] = 1.f;
  EXPECT_FALSE(in.try_call(make_call("big", "assign", {ones}))) << "a 64 KiB + 4 B assign was served inline";
  ASSERT_TRUE(through_actor(*f.sys, big->actor, make_call("big", "assign", {ones})).ok());
  EXPECT_FALSE(in.try_call(make_call("big", "apply_sgd", {Tensor::scalar<float>(1.f), ones})));
  EXPECT_FALSE(in.try_call(make_call("big", "assign_add", {ones})));
  auto read = in.try_call(make_call("big", "read", {}));
  ASSERT_TRUE(read.has_value()) << "a read of any size is served inline (it hands out the buffer)";
  ASSERT_TRUE(read->ok()) << read->status();
  const Tensor held = (**read)[0];
  EXPECT_EQ(held.num_elements(), n);
  // A read's buffer is a snapshot: an update after it copies first (as through the actor).
  ASSERT_TRUE(through_actor(*f.sys, big->actor, make_call("big", "assign_add", {ones})).ok());
  EXPECT_EQ(held.data<float>()[n - 1], 1.f);
  const std::vector<float> now = values(served(in.try_call(make_call("big", "read", {}))));
  ASSERT_EQ(now.size(), static_cast<size_t>(n));
  EXPECT_EQ(now.back(), 2.f);
  // A variable that grew past the bound by an inline assign of a small value? Shapes are fixed
  // by the first assign, so a small variable stays small; a call from a GPU kernel (arguments
  // in device memory) is the actor's too, tested with the GPU (tests/gpu_device_test.cc).
}

TEST(InlineVariableTest, InlineAndActorCallsOnOneVariableNeverInterleave) {
  Fixture f;
  auto c = f.rm->get_for_kernel("c");
  ASSERT_TRUE(c.ok()) << c.status();
  auto in = c->inline_part;
  ASSERT_TRUE(through_actor(*f.sys, c->actor, make_call("c", "assign", {floats({0, 0})})).ok());
  constexpr int kThreads = 3, kEach = 2000;
  // A call the inline path declines (the actor holds the variable: the inline path never waits
  // for it) goes to the actor, as DeviceResourceEnv::call sends it.
  std::atomic<int> inline_served{0}, declined{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        auto r = in->try_call(make_call("c", "assign_add", {floats({1, 1})}));
        if (!r) {
          ++declined;
          if (!through_actor(*f.sys, c->actor, make_call("c", "assign_add", {floats({1, 1})})).ok()) ++failed;
        } else if (r->ok()) {
          ++inline_served;
        } else {
          ++failed;
        }
      }
    });
  int actor_served = 0;
  for (int i = 0; i < kEach; ++i)
    if (through_actor(*f.sys, c->actor, make_call("c", "assign_add", {floats({1, 1})})).ok()) ++actor_served;
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(inline_served.load() + declined.load(), kThreads * kEach);
  EXPECT_GT(inline_served.load(), 0);
  EXPECT_EQ(actor_served, kEach);
  // Every update counted exactly once (float32 is exact to 2^24).
  EXPECT_EQ(values(through_actor(*f.sys, c->actor, make_call("c", "read", {}))),
            (std::vector<float>{float(kThreads * kEach + kEach), float(kThreads * kEach + kEach)}));
}

TEST(InlineVariableTest, NothingIsServedInlineOnceTheActorIsGone) {
  Fixture f;
  auto v = f.rm->get_for_kernel("v");
  ASSERT_TRUE(v.ok()) << v.status();
  std::shared_ptr<InlineResource> in = v->inline_part;
  ASSERT_TRUE(through_actor(*f.sys, v->actor, make_call("v", "assign", {floats({7})})).ok());
  auto before = in->try_call(make_call("v", "read", {}));
  ASSERT_TRUE(before.has_value() && before->ok());
  EXPECT_EQ(values(*before), (std::vector<float>{7}));
  caf::scoped_actor self{*f.sys};
  self->monitor(v->actor);
  f.rm->clear();  // a parameter server that lost its state: its actors are stopped
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; },
                caf::after(std::chrono::seconds(10)) >> [] { ADD_FAILURE() << "the variable actor did not stop"; });
  ASSERT_TRUE(down);
  EXPECT_FALSE(in->try_call(make_call("v", "read", {}))) << "a stopped variable's state was read inline";
  EXPECT_FALSE(in->try_call(make_call("v", "assign", {floats({1})})));
}

}  // namespace
}  // namespace actorflow
