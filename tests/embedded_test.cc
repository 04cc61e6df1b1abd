// Embedding: the Server lives in the caller's actor system; the caller's own actor runs steps
// through the master without blocking.
#include <gtest/gtest.h>

#include "actorflow/embedding.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

TEST(EmbeddedTest, ServerInCallersSystemServesCallerActor) {
  caf::actor_system_config cfg;
  Server::configure(cfg);
  caf::actor_system sys{cfg};
  auto server = Server::local_in(sys);
  ASSERT_TRUE(server.ok()) << server.status();
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{-1, 2}, "x");
  ops::mul(root.with_op_name("y"), x, 3.f);  // fetched by name
  Session sess(root, (*server)->target());
  // The caller's actor sends requests to the master itself.
  auto req = sess.prepare({{"x", Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2})}}, {"y"});
  ASSERT_TRUE(req.ok()) << req.status();
  caf::scoped_actor self{sys};
  std::vector<float> got;
  self->request(sess.master(), std::chrono::seconds(30), run_atom::value, RunRequestPtr(*req))
      .receive([&](std::vector<Tensor>& out) { got.assign(out[0].data<float>(), out[0].data<float>() + 4); },
               [&](caf::error& e) { ADD_FAILURE() << sys.render(e); });
  EXPECT_EQ(got, (std::vector<float>{3, 6, 9, 12}));
}

TEST(EmbeddedTest, SampleServiceAnswersItsRequests) {
  auto p = testing::ChildProcess::start({testing::binary("samples/embedded_service")});
  ASSERT_EQ(p->wait(std::chrono::seconds(60)), 0) << p->output();
  // W = [[1,-1],[0.5,2],[0,1]], b = [0.5,-4]. For x = [1,2,3]: x W = [2, 6], + b = [2.5, 2],
  // relu = [2.5, 2]. For x = 0: relu(b) = [0.5, 0]. For x = [-1,1,2]: relu([-0.5+0.5, 5-4]) = [0, 1].
  EXPECT_NE(p->output().find("score(1, 2, 3) = [2.5, 2]"), std::string::npos) << p->output();
  EXPECT_NE(p->output().find("score(0, 0, 0) = [0.5, 0]"), std::string::npos) << p->output();
  EXPECT_NE(p->output().find("score(-1, 1, 2) = [0, 1]"), std::string::npos) << p->output();
}

}  // namespace
}  // namespace actorflow
