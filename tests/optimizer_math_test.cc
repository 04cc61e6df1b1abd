// The optimizer module (device/optimizers.h) on its own: FTRL's dense and sparse updates and
// sparse RMSProp against values worked out by hand, the slots each optimizer keeps, and the
// hyper-parameter checks.
#include <gtest/gtest.h>

#include <vector>

#include "device/optimizers.h"

namespace actorflow {
namespace {

Tensor floats(std::vector<float> v, Shape shape) {
  Tensor t(DType::kFloat32, shape);
  for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i];
  return t;
}
Tensor vec(std::vector<float> v) { return floats(v, Shape{static_cast<int64_t>(v.size())}); }
std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.num_elements()}; }

OptimizerHyper ftrl(float lr, float l1, float l2, float lr_power = -0.5f, float shrinkage = 0.f) {
  OptimizerHyper h;
  h.lr = lr;
  h.l1 = l1;
  h.l2 = l2;
  h.lr_power = lr_power;
  h.l2_shrinkage = shrinkage;
  h.initial_accumulator = 0.1f;
  return h;
}

TEST(OptimizerMathTest, FtrlDenseMatchesHandValues) {
  // lr 0.1, l1 0.01, l2 0.05, lr_power -0.5, accum from 0.1, linear from 0; w = [1, -1],
  // g = [0.5, -2], [1, 1], [-0.5, 0.25]. Per element: a' = a + g^2;
  // linear += g - (sqrt(a') - sqrt(a)) / 0.1 * w; w = (sign(linear) 0.01 - linear) / (sqrt(a') / 0.1 + 0.1).
  // Element 0, step 1: a' = 0.35; linear = 0.5 - (0.5916079783 - 0.3162277660) * 10 = -2.2538021229;
  //   w = (-0.01 + 2.2538021229) / 6.0160797831 = 0.3729674811.
  // Steps 2, 3 the same way: linear -3.3807872773, w 0.2876356044; linear -4.1770981447, w 0.3268540263.
  // Element 1: linear 15.0861790711, w -0.7409003675; 17.8159760888, -0.7849858978;
  //   18.1742695670, -0.7959406551.
  const OptimizerHyper h = ftrl(0.1f, 0.01f, 0.05f);
  Tensor w = vec({1, -1});
  OptimizerState st;
  const std::vector<std::vector<double>> want = {
      {0.3729674811, -0.7409003675}, {0.2876356044, -0.7849858978}, {0.3268540263, -0.7959406551}};
  const std::vector<std::vector<float>> grads = {{0.5f, -2}, {1, 1}, {-0.5f, 0.25f}};
  for (size_t t = 0; t < grads.size(); ++t) {
    ASSERT_TRUE(apply_dense(Optimizer::kFtrl, h, w, /*in_place=*/t != 1, st, vec(grads[t])).ok());
    EXPECT_NEAR(values(w)[0], want[t][0], 1e-5) << "step " << t + 1;
    EXPECT_NEAR(values(w)[1], want[t][1], 1e-5) << "step " << t + 1;
  }
  EXPECT_NEAR(values(st.at(SlotId::kFtrlAccum))[0], 1.6, 1e-6);
  EXPECT_NEAR(values(st.at(SlotId::kFtrlAccum))[1], 5.1625, 1e-5);
  EXPECT_NEAR(values(st.at(SlotId::kFtrlLinear))[0], -4.1770981447, 1e-4);
  EXPECT_NEAR(values(st.at(SlotId::kFtrlLinear))[1], 18.1742695670, 1e-4);
  EXPECT_EQ(st.steps, 0);  // FTRL counts no steps
}

TEST(OptimizerMathTest, FtrlL1ZeroesSmallLinearTermsAndLrPowerAndShrinkageApply) {
  // l1 2.5 > |linear| = 2.2538021229 after the first step: w = 0 exactly.
  Tensor w = vec({1});
  OptimizerState st;
  ASSERT_TRUE(apply_dense(Optimizer::kFtrl, ftrl(0.1f, 2.5f, 0.f), w, true, st, vec({0.5f})).ok());
  EXPECT_EQ(values(w)[0], 0.f);
  // lr_power -1 (a'^1 - a^1) and l2_shrinkage 0.1 (g' = g + 0.2 w), lr 0.1, w = 1:
  //   g = 0.5: g' = 0.7; a' = 0.35; linear = 0.7 - 0.25 / 0.1 * 1 = -1.8; w = 1.8 / 3.5 = 0.5142857143
  //   g = 1:   g' = 1.1028571429; a' = 1.35; linear = -1.8 + 1.1028571429 - 10 * 0.5142857143 = -5.84;
  //            w = 5.84 / 13.5 = 0.4325925926
  Tensor v = vec({1});
  OptimizerState s2;
  const OptimizerHyper h = ftrl(0.1f, 0.f, 0.f, -1.f, 0.1f);
  ASSERT_TRUE(apply_dense(Optimizer::kFtrl, h, v, true, s2, vec({0.5f})).ok());
  EXPECT_NEAR(values(v)[0], 0.5142857143, 1e-6);
  ASSERT_TRUE(apply_dense(Optimizer::kFtrl, h, v, true, s2, vec({1.f})).ok());
  EXPECT_NEAR(values(v)[0], 0.4325925926, 1e-6);
  EXPECT_NEAR(values(s2.at(SlotId::kFtrlLinear))[0], -5.84, 1e-5);
}

TEST(OptimizerMathTest, FtrlSparseUpdatesOnlyItsRowsAndTheirSlots) {
  // Variable [3, 1] = [1, -1, 2]; indices [1, 1] with rows 0.25 each: row 1 gets g = 0.5.
  //   a' = 0.35; linear = 0.5 + (0.5916079783 - 0.3162277660) * 10 = 3.2538021229;
  //   w = (0.01 - 3.2538021229) / 6.0160797831 = -0.5391886810.
  Tensor w = floats({1, -1, 2}, Shape{3, 1});
  OptimizerState st;
  SparseRows sr = sum_sparse_rows({1, 1}, std::vector<float>{0.25f, 0.25f}.data(), 1);
  ASSERT_TRUE(apply_sparse(Optimizer::kFtrl, ftrl(0.1f, 0.01f, 0.05f), w, st, sr, "sparse_apply_ftrl").ok());
  EXPECT_EQ(values(w)[0], 1.f);
  EXPECT_NEAR(values(w)[1], -0.5391886810, 1e-5);
  EXPECT_EQ(values(w)[2], 2.f);
  EXPECT_NEAR(values(st.at(SlotId::kFtrlAccum))[0], 0.1, 1e-7);  // absent rows keep their start
  EXPECT_NEAR(values(st.at(SlotId::kFtrlAccum))[1], 0.35, 1e-6);
  EXPECT_EQ(values(st.at(SlotId::kFtrlLinear))[2], 0.f);
  EXPECT_NEAR(values(st.at(SlotId::kFtrlLinear))[1], 3.2538021229, 1e-5);
}

TEST(OptimizerMathTest, FtrlRefusesBadHyperParameters) {
  Tensor w = vec({1});
  OptimizerState st;
  Status s = apply_dense(Optimizer::kFtrl, ftrl(0.f, 0.f, 0.f), w, true, st, vec({1}));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("learning rate must be > 0"), std::string::npos) << s;
  s = apply_dense(Optimizer::kFtrl, ftrl(0.1f, -1.f, 0.f), w, true, st, vec({1}));
  EXPECT_NE(s.message().find("l1 must be >= 0"), std::string::npos) << s;
  s = apply_dense(Optimizer::kFtrl, ftrl(0.1f, 0.f, 0.f, 0.5f), w, true, st, vec({1}));
  EXPECT_NE(s.message().find("lr_power must be <= 0"), std::string::npos) << s;
  EXPECT_EQ(values(w)[0], 1.f);  // nothing changed
  EXPECT_FALSE(st.at(SlotId::kFtrlAccum).is_initialized());
}

TEST(OptimizerMathTest, SparseRmsPropUpdatesOnlyItsRowsAndTheirSlots) {
  // Variable [3, 2] = [[1, 2], [3, 4], [5, 6]]; lr 0.01, decay 0.9, momentum 0.5, epsilon 1e-10;
  // ms from 1, mom from 0. Indices [2, 0, 2], rows [1, 1], [0.5, -1], [1, -3]: row 2 gets [2, -2].
  //   ms = ms + (g^2 - ms) * 0.1; mom = 0.5 mom + 0.01 g / sqrt(ms + eps); w -= mom.
  //   row 2: ms = 1.3, 1.3; mom = 0.0175411604, -0.0175411604; w = 4.9824588396, 6.0175411604
  //   row 0: ms = 0.925, 1;  mom = 0.0051987524, -0.01;        w = 0.9948012476, 2.01
  //   row 1: unchanged, its ms stays 1 (a dense update would decay it to 0.9 with g = 0).
  OptimizerHyper h;
  h.lr = 0.01f;
  h.decay = 0.9f;
  h.momentum = 0.5f;
  h.epsilon = 1e-10f;
  Tensor w = floats({1, 2, 3, 4, 5, 6}, Shape{3, 2});
  OptimizerState st;
  SparseRows sr = sum_sparse_rows({2, 0, 2}, std::vector<float>{1, 1, 0.5f, -1, 1, -3}.data(), 2);
  ASSERT_TRUE(apply_sparse(Optimizer::kRmsProp, h, w, st, sr, "sparse_apply_rms_prop").ok());
  const std::vector<double> want = {0.9948012476, 2.01, 3, 4, 4.9824588396, 6.0175411604};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(values(w)[i], want[i], 1e-6) << i;
  const std::vector<double> ms = {0.925, 1, 1, 1, 1.3, 1.3};
  for (size_t i = 0; i < ms.size(); ++i) EXPECT_NEAR(values(st.at(SlotId::kRmsMs))[i], ms[i], 1e-6) << i;
  EXPECT_EQ(values(st.at(SlotId::kRmsMom))[2], 0.f);
  EXPECT_NEAR(values(st.at(SlotId::kRmsMom))[4], 0.0175411604, 1e-7);
}

TEST(OptimizerMathTest, TheTableNamesEachOptimizerOnceWithItsSlots) {
  EXPECT_EQ(optimizer_specs().size(), 6u);
  for (size_t i = 0; i < optimizer_specs().size(); ++i) {
    const OptimizerSpec& s = optimizer_specs()[i];
    EXPECT_EQ(static_cast<size_t>(s.kind), i) << s.name;
    EXPECT_EQ(find_optimizer(s.name), &s);
    EXPECT_LE(s.slots.size(), 2u);
  }
  EXPECT_EQ(find_optimizer("nope"), nullptr);
  const OptimizerSpec& f = optimizer_spec(Optimizer::kFtrl);
  ASSERT_EQ(f.slots.size(), 2u);
  EXPECT_EQ(f.slots[0].id, SlotId::kFtrlAccum);
  EXPECT_EQ(slot_init(f.slots[0], ftrl(0.1f, 0, 0)), 0.1f);  // initial_accumulator_value
  EXPECT_EQ(f.slots[1].id, SlotId::kFtrlLinear);
  EXPECT_FALSE(f.device_form);
  DenseUpdate u;
  EXPECT_FALSE(device_update(Optimizer::kFtrl, ftrl(0.1f, 0, 0), 0, &u));
  EXPECT_TRUE(device_update(Optimizer::kAdam, OptimizerHyper{}, 3, &u));
  EXPECT_EQ(u.adam_t, 3);
}

}  // namespace
}  // namespace actorflow
