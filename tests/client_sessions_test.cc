// The task's side of remote client sessions (actors/client_sessions.h) fed what an authenticated
// but buggy or hostile client could send: garbage or truncated GraphDef bytes, feed names and
// tensors that do not pair up, a session the task never saw, more sessions than the bound. Each is
// a Status naming what is wrong, nothing is kept for it, and an honest session still runs after.
#include <gtest/gtest.h>

#include "actors/client_sessions.h"
#include "actors/server.h"
#include "graph/graph_def.h"
#include "graph/ops.h"

namespace actorflow {
namespace {

// A request of session `id` that computes c = a + 2 with a fed.
ClientRunRequest honest(uint64_t id, const std::string& graph_def, uint64_t version) {
  ClientRunRequest r;
  r.session = id;
  r.graph_version = version;
  r.graph_def = graph_def;
  r.feed_names = {"a"};
  r.feeds = {Tensor::from_vector<float>({1, 2}, {2})};
  r.fetches = {"c"};
  return r;
}

TEST(ClientSessionsTest, MalformedRequestsAreStatusesAndAnHonestSessionStillRuns) {
  auto server = Server::local();
  ASSERT_TRUE(server.ok()) << server.status();
  Scope root = Scope::root();
  auto a = ops::placeholder(root, DType::kFloat32, Shape{2}, "a");
  auto c = ops::add(root.with_op_name("c"), a, 2.f);
  ASSERT_TRUE(root.ok() && c.valid()) << root.status();
  const std::string def = serialize_graph(*root.graph());
  const uint64_t version = static_cast<uint64_t>(root.graph()->num_nodes());
  ClientSessions::Limits limits;
  limits.max_sessions = 2;
  ClientSessions cs((*server)->target(), limits);

  // Garbage and truncated graphs: nothing is kept for them.
  for (const std::string& bad : {std::string("\xff\x00garbage", 9), def.substr(0, def.size() / 2)}) {
    auto r = cs.run("peer", honest(1, bad, version));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status();  // the GraphDef reader's verdict
    EXPECT_NE(r.status().message().find("client graph of session 1"), std::string::npos) << r.status();
  }
  EXPECT_EQ(cs.size(), 0u);
  // Feed names and tensors that do not pair up: refused before anything is looked up.
  ClientRunRequest mismatched = honest(2, def, version);
  mismatched.feeds.push_back(Tensor::scalar<float>(1));
  auto m = cs.run("peer", mismatched);
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument) << m.status();
  EXPECT_NE(m.status().message().find("1 feed names but 2 feed tensors"), std::string::npos) << m.status();
  // A session the task never saw, without its graph: the client is asked to send it.
  auto unknown = cs.run("peer", honest(3, "", version));
  EXPECT_EQ(unknown.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(unknown.status().message().find(kClientGraphUnknown), std::string::npos) << unknown.status();
  // A later graph version without the graph: asked again, not run on the old one.
  auto ok = cs.run("peer", honest(4, def, version));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].to_string(), "[3. 4.]");
  auto stale = cs.run("peer", honest(4, "", version + 1));
  EXPECT_EQ(stale.status().code(), Code::kFailedPrecondition) << stale.status();
  // Past max_sessions the least recently used idle session is dropped, never more are held.
  ASSERT_TRUE(cs.run("peer", honest(5, def, version)).ok());
  ASSERT_TRUE(cs.run("other", honest(4, def, version)).ok());
  EXPECT_EQ(cs.size(), 2u);
  auto dropped = cs.run("peer", honest(4, "", version));  // the oldest: evicted
  EXPECT_EQ(dropped.status().code(), Code::kFailedPrecondition) << dropped.status();
  // The honest session goes on; close forgets it.
  auto again = cs.run("peer", honest(5, "", version));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)[0].to_string(), "[3. 4.]");
  cs.close("peer", 5);
  EXPECT_EQ(cs.run("peer", honest(5, "", version)).status().code(), Code::kFailedPrecondition);
}

}  // namespace
}  // namespace actorflow
