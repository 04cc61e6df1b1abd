#include <gtest/gtest.h>

#include "actorflow/embedding.h"
#include "actors/data_actor.h"

namespace actorflow {
namespace {

TEST(DataActorTest, ServesBatchesInOrderThenOutOfRange) {
  caf::actor_system_config cfg;
  Server::configure(cfg);
  caf::actor_system sys{cfg};
  std::vector<float> v(10);
  for (int i = 0; i < 10; ++i) v[i] = static_cast<float>(i);
  auto ds = Dataset::from_tensors({Tensor::from_vector<float>(v, {10, 1})}).batch(4);
  auto it = ds.make_iterator();
  ASSERT_TRUE(it.ok()) << it.status();
  auto data = spawn_data_actor(sys, std::move(*it), 2);
  auto b1 = next_batch(sys, data);
  ASSERT_TRUE(b1.ok()) << b1.status();
  EXPECT_EQ((*b1)[0].to_string(), "[[0.]\n [1.]\n [2.]\n [3.]]");
  auto b2 = next_batch(sys, data);
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ((*b2)[0].data<float>()[0], 4.f);
  auto b3 = next_batch(sys, data);
  ASSERT_TRUE(b3.ok());
  EXPECT_EQ((*b3)[0].shape(), Shape({2, 1}));
  auto end = next_batch(sys, data);
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.status().code(), Code::kOutOfRange) << end.status();
  caf::anon_send_exit(data, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace actorflow
