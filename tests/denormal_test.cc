// Denormal floats are flushed to zero in kernels and variable updates, as TensorFlow does
// (core/denormal.h): the guard itself, a kernel's result, and an optimizer update on the
// parameter-server side. 2^-127 and 2^-128 are denormal (below FLT_MIN = 2^-126).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "actorflow/actorflow.h"
#include "core/denormal.h"
#include "graph/ops.h"
#include "tests/util/local_server.h"
#include "tests/util/eval.h"

namespace actorflow {
namespace {

const float kMin = std::numeric_limits<float>::min();  // 2^-126, the smallest normal float

bool is_denormal(float x) { return x != 0.f && std::fabs(x) < kMin; }

TEST(DenormalTest, GuardFlushesResultsAndInputsAndRestoresTheMode) {
  volatile float a = kMin, half = 0.5f, d = kMin / 2;  // volatile: computed at run time
  ASSERT_TRUE(is_denormal(d));
  float outside = a * half;
  EXPECT_TRUE(is_denormal(outside)) << outside;
  {
    ScopedFlushDenormal flush;
    const float product = a * half;  // FTZ: a denormal result is 0
    EXPECT_EQ(product, 0.f);
    const float sum = d + 0.f;  // DAZ: a denormal input reads as 0
    EXPECT_EQ(sum, 0.f);
    const float normal = a * 2.f;  // normal values are untouched
    EXPECT_EQ(normal, 2 * kMin);
  }
  outside = a * half;
  EXPECT_TRUE(is_denormal(outside)) << "the previous mode was not restored";
}

TEST(DenormalTest, KernelResultsAreFlushed) {
  // Mul on the CPU device: FLT_MIN x 0.5 is 2^-127 in IEEE arithmetic; 0 in a kernel.
  Scope root = Scope::root();
  auto x = ops::constant(root, {kMin, 3.f}, {2}, "x");
  auto y = ops::mul(root, x, ops::constant(root, {0.5f, 0.5f}, {2}, "half"));
  auto r = testing::eval(root, y);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(testing::vals<float>(*r), (std::vector<float>{0.f, 1.5f}));
}

TEST(DenormalTest, VariableUpdatesOnTheParameterServerFlush) {
  // w = FLT_MIN, plain SGD with lr 0.5 and gradient FLT_MIN: w - lr g = 2^-127, a denormal: the
  // variable actor's update writes 0. A normal element beside it is updated exactly.
  auto server = testing::two_device_server();
  Scope root = Scope::root();
  Scope ps = root.with_device("/cpu:1");
  auto w = ops::variable(ps.with_op_name("w"), Shape{2}, DType::kFloat32);
  auto init = ops::assign(root, w, Tensor::from_vector<float>({kMin, 1.f}, {2}));
  auto step = ops::apply_gradient_descent(root, w, 0.5f, Tensor::from_vector<float>({kMin, 1.f}, {2}));
  ASSERT_TRUE(root.ok()) << root.status();
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {init}).ok());
  ASSERT_TRUE(sess.run({}, {}, {step}).ok());
  auto r = sess.run({w});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(testing::vals<float>((*r)[0]), (std::vector<float>{0.f, 0.5f}));
}

}  // namespace
}  // namespace actorflow
