// The host side of the GPU kernels, tested without a GPU: the per-element functors of
// device/functors.h the CUDA kernels apply (activations, optimizer updates, the math they
// share with the CPU), and the index plans (device/index_plan.h) whose offset arithmetic the
// broadcasting and reduction kernels run.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "device/device.h"
#include "device/functors.h"
#include "device/index_plan.h"
#include "device/kernel.h"
#include "device/window_plan.h"
#include "graph/shape_util.h"

namespace actorflow {
namespace {

using namespace functors;  // NOLINT

TEST(GpuFunctorsTest, Relu) {
  ReluF f;
  EXPECT_EQ(f(3.5f), 3.5f);
  EXPECT_EQ(f(-2.0f), 0.0f);
  EXPECT_EQ(f(0.0), 0.0);
  EXPECT_TRUE(std::isnan(f(NAN)));  // NaN propagates
  ReluGradF g;
  EXPECT_EQ(g(0.25f, 1.0f), 0.25f);   // feature > 0: gradient passes
  EXPECT_EQ(g(0.25f, -1.0f), 0.0f);   // feature < 0: blocked
  EXPECT_EQ(g(0.25f, 0.0f), 0.0f);    // feature == 0: blocked (TensorFlow's convention)
  EXPECT_EQ(g(-3.0, 2.0), -3.0);
}

TEST(GpuFunctorsTest, SgdUpdate) {
  SgdUpdateF<float> f{0.1f};
  float w = 1.0f;
  f(w, 2.0f);  // 1 - 0.1 * 2
  EXPECT_FLOAT_EQ(w, 0.8f);
  f(w, -1.0f);  // 0.8 + 0.1
  EXPECT_FLOAT_EQ(w, 0.9f);
  SgdUpdateF<double> d{0.5};
  double wd = 3.0;
  d(wd, 4.0);
  EXPECT_DOUBLE_EQ(wd, 1.0);
}

TEST(GpuFunctorsTest, MomentumUpdate) {
  MomentumUpdateF<double> f{0.1, 0.9, false};
  double w = 1.0, a = 0.0;
  f(w, a, 1.0);  // a = 0.9*0 + 1 = 1; w = 1 - 0.1*1 = 0.9
  EXPECT_DOUBLE_EQ(a, 1.0);
  EXPECT_DOUBLE_EQ(w, 0.9);
  f(w, a, 0.5);  // a = 0.9*1 + 0.5 = 1.4; w = 0.9 - 0.14 = 0.76
  EXPECT_DOUBLE_EQ(a, 1.4);
  EXPECT_NEAR(w, 0.76, 1e-15);

  MomentumUpdateF<double> n{0.1, 0.9, true};
  double wn = 1.0, an = 0.0;
  n(wn, an, 1.0);  // a = 1; w = 1 - (0.1*1 + 0.1*0.9*1) = 0.81
  EXPECT_DOUBLE_EQ(an, 1.0);
  EXPECT_NEAR(wn, 0.81, 1e-15);
  n(wn, an, 0.5);  // a = 1.4; w = 0.81 - (0.05 + 0.1*0.9*1.4) = 0.634
  EXPECT_NEAR(an, 1.4, 1e-15);
  EXPECT_NEAR(wn, 0.634, 1e-15);
}

TEST(GpuFunctorsTest, AdamUpdateWithBiasCorrection) {
  // Step 1, lr 0.001, beta1 0.9, beta2 0.999, eps 1e-8, g = 0.5, from m = v = 0:
  //   lr_t = 0.001 * sqrt(1 - 0.999) / (1 - 0.9) = 0.001 * 0.0316227766 / 0.1 = 3.16227766e-4
  //   m = 0.1 * 0.5 = 0.05;  v = 0.001 * 0.25 = 2.5e-4;  sqrt(v) = 0.0158113883
  //   w = 1 - 3.16227766e-4 * 0.05 / (0.0158113883 + 1e-8) = 1 - 0.00099999937 = 0.99900000063
  auto f = AdamUpdateF<double>::make(0.001, 0.9, 0.999, 1e-8, 1);
  EXPECT_NEAR(f.lr_t, 3.16227766016838e-4, 1e-15);
  double w = 1.0, m = 0.0, v = 0.0;
  f(w, m, v, 0.5);
  EXPECT_NEAR(m, 0.05, 1e-15);
  EXPECT_NEAR(v, 2.5e-4, 1e-15);
  EXPECT_NEAR(w, 1.0 - 3.16227766016838e-4 * 0.05 / (std::sqrt(2.5e-4) + 1e-8), 1e-15);
  EXPECT_NEAR(w, 0.99900000063, 1e-10);  // the first Adam step moves by about lr

  // Step 2 with g = -0.5: lr_t = 0.001 * sqrt(1 - 0.999^2) / (1 - 0.81)
  auto f2 = AdamUpdateF<double>::make(0.001, 0.9, 0.999, 1e-8, 2);
  EXPECT_NEAR(f2.lr_t, 0.001 * std::sqrt(1 - 0.998001) / 0.19, 1e-15);
  const double w1 = w;
  f2(w, m, v, -0.5);
  EXPECT_NEAR(m, 0.9 * 0.05 + 0.1 * -0.5, 1e-15);             // -0.005
  EXPECT_NEAR(v, 0.999 * 2.5e-4 + 0.001 * 0.25, 1e-15);       // 4.9975e-4
  EXPECT_NEAR(w, w1 - f2.lr_t * m / (std::sqrt(v) + 1e-8), 1e-15);

  // float instantiation agrees with double within float precision.
  auto ff = AdamUpdateF<float>::make(0.001f, 0.9f, 0.999f, 1e-8f, 1);
  float wf = 1.0f, mf = 0.0f, vf = 0.0f;
  ff(wf, mf, vf, 0.5f);
  EXPECT_NEAR(wf, 0.99900000063, 1e-6);
}

TEST(GpuFunctorsTest, AdagradUpdate) {
  // lr 0.1, accumulator from 0.1 (TF's initial_accumulator_value), g = 0.5 then -1:
  //   a = 0.1 + 0.25 = 0.35;  w = 1 - 0.1 * 0.5 / sqrt(0.35) = 1 - 0.05 / 0.5916079783 = 0.9154845745
  //   a = 0.35 + 1 = 1.35;    w = 0.9154845745 + 0.1 / sqrt(1.35) = 0.9154845745 + 0.0860662966
  AdagradUpdateF<double> f{0.1};
  double w = 1.0, a = 0.1;
  f(w, a, 0.5);
  EXPECT_NEAR(a, 0.35, 1e-15);
  EXPECT_NEAR(w, 0.9154845745271484, 1e-12);
  f(w, a, -1.0);
  EXPECT_NEAR(a, 1.35, 1e-15);
  EXPECT_NEAR(w, 1.0015508711095353, 1e-12);
  AdagradUpdateF<float> ff{0.1f};
  float wf = 1.0f, af = 0.1f;
  ff(wf, af, 0.5f);
  EXPECT_NEAR(wf, 0.9154845745, 1e-6);
}

TEST(GpuFunctorsTest, RmsPropUpdate) {
  // lr 0.01, decay 0.9, momentum 0.5, epsilon 1e-10, ms from 1 (TF 1.x), mom from 0, g = 2 twice:
  //   ms = 0.9 * 1 + 0.1 * 4 = 1.3;     mom = 0.01 * 2 / sqrt(1.3) = 0.0175411604;  w = 0.9824588396
  //   ms = 0.9 * 1.3 + 0.1 * 4 = 1.57;  mom = 0.5 * 0.0175411604 + 0.02 / sqrt(1.57) = 0.0247323179
  //   w = 0.9824588396 - 0.0247323179 = 0.9577265217
  RmsPropUpdateF<double> f{0.01, 0.9, 0.5, 1e-10};
  double w = 1.0, ms = 1.0, mom = 0.0;
  f(w, ms, mom, 2.0);
  EXPECT_NEAR(ms, 1.3, 1e-15);
  EXPECT_NEAR(mom, 0.017541160385465923, 1e-12);
  EXPECT_NEAR(w, 0.9824588396145341, 1e-12);
  f(w, ms, mom, 2.0);
  EXPECT_NEAR(ms, 1.57, 1e-15);
  EXPECT_NEAR(mom, 0.02473231788157707, 1e-12);
  EXPECT_NEAR(w, 0.957726521732957, 1e-12);
  RmsPropUpdateF<float> ff{0.01f, 0.9f, 0.5f, 1e-10f};
  float wf = 1.0f, msf = 1.0f, momf = 0.0f;
  ff(wf, msf, momf, 2.0f);
  EXPECT_NEAR(wf, 0.9824588396, 1e-6);
}

TEST(GpuFunctorsTest, SharedMathTheGpuKernelsUse) {
  EXPECT_EQ(AddF()(2, 3), 5);
  EXPECT_EQ(SubF()(2.5, 3.0), -0.5);
  EXPECT_EQ(MulF()(int64_t{4}, int64_t{-3}), -12);
  EXPECT_EQ(DivF()(7, 2), 3);
  EXPECT_EQ(DivF()(-7, 2), -3);  // truncation toward zero
  EXPECT_EQ(DivF()(7, 0), 0);    // never traps on the device
  EXPECT_TRUE(std::isnan(MaximumF()(NAN, 1.0f)));
  EXPECT_TRUE(std::isnan(MaximumF()(1.0f, NAN)));
  EXPECT_EQ(MaximumF()(-1, 4), 4);
  EXPECT_TRUE(EqualF()(3, 3));
  EXPECT_FALSE(GreaterF()(3, 3));
  EXPECT_EQ(CastF<int32_t>()(-2.7f), -2);
  EXPECT_EQ(CastF<bool>()(0.5), true);
  EXPECT_EQ(CastF<float>()(true), 1.0f);
  EXPECT_EQ(SelectF()(true, 1, 2), 1);
  EXPECT_EQ(SumReducer::identity<float>(), 0.0f);
  EXPECT_EQ(MaxReducer::identity<int32_t>(), INT32_MIN);
  EXPECT_TRUE(std::isinf(MaxReducer::identity<float>()));
  EXPECT_NEAR(LogF()(std::exp(1.5f)), 1.5f, 1e-6f);
  EXPECT_NEAR(ExpF()(0.0), 1.0, 0.0);
}

// ---- index plans -----------------------------------------------------------------------

// Naive NumPy broadcasting offsets for output index i of shape `out`.
void naive_offsets(const Shape& a, const Shape& b, const Shape& out, int64_t i, int64_t* ai, int64_t* bi) {
  std::vector<int64_t> idx(static_cast<size_t>(out.rank()));
  for (int d = out.rank() - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = i % out.dim(d);
    i /= out.dim(d);
  }
  auto off = [&](const Shape& s) {
    int64_t o = 0, stride = 1;
    for (int d = s.rank() - 1; d >= 0; --d) {
      const int od = out.rank() - s.rank() + d;
      const int64_t c = s.dim(d) == 1 ? 0 : idx[static_cast<size_t>(od)];
      o += c * stride;
      stride *= s.dim(d);
    }
    return o;
  };
  *ai = off(a);
  *bi = off(b);
}

TEST(IndexPlanTest, BroadcastShape) {
  EXPECT_EQ(*broadcast_shapes(Shape{2, 3}, Shape{3}), (Shape{2, 3}));
  EXPECT_EQ(*broadcast_shapes(Shape{4, 1, 5}, Shape{3, 1}), (Shape{4, 3, 5}));
  EXPECT_EQ(*broadcast_shapes(Shape{}, Shape{2}), (Shape{2}));
  auto r = broadcast_shapes(Shape{2, 3}, Shape{4});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "incompatible shapes [2,3] and [4]");
}

TEST(IndexPlanTest, BroadcastPlanCollapsesDims) {
  // [2,3,4] + [4]: a is contiguous everywhere (one dim of 24); b repeats over the first 6.
  auto p = make_broadcast_plan(Shape{2, 3, 4}, Shape{4});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->rank, 2);
  EXPECT_EQ(p->out[0], 6);
  EXPECT_EQ(p->out[1], 4);
  EXPECT_EQ(p->a_stride[0], 4);
  EXPECT_EQ(p->b_stride[0], 0);
  EXPECT_EQ(p->b_stride[1], 1);
  // Size-1 dims vanish: [1,5,1] + [1,5,1] is one dim.
  auto q = make_broadcast_plan(Shape{1, 5, 1}, Shape{1, 5, 1});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->rank, 1);
  EXPECT_EQ(q->out[0], 5);
}

TEST(IndexPlanTest, BroadcastOffsetsMatchNumPy) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {Shape{2, 3}, Shape{2, 3}},       {Shape{2, 3}, Shape{3}},          {Shape{2, 3}, Shape{2, 1}},
      {Shape{4, 1, 5}, Shape{3, 1}},    {Shape{1, 3, 1, 2}, Shape{4, 1, 5, 1}}, {Shape{}, Shape{3, 2}},
      {Shape{2, 1, 3, 1, 2}, Shape{2, 4, 1, 5, 2}}, {Shape{7}, Shape{1}}, {Shape{3, 1}, Shape{1, 3}},
  };
  for (const auto& [a, b] : cases) {
    auto out = broadcast_shapes(a, b);
    ASSERT_TRUE(out.ok()) << a.to_string() << " " << b.to_string();
    auto p = make_broadcast_plan(a, b);
    ASSERT_TRUE(p.ok());
    for (int64_t i = 0; i < out->num_elements(); ++i) {
      int64_t ai, bi, na, nb;
      broadcast_offsets(*p, i, &ai, &bi);
      naive_offsets(a, b, *out, i, &na, &nb);
      ASSERT_EQ(ai, na) << a.to_string() << " op " << b.to_string() << " at " << i;
      ASSERT_EQ(bi, nb) << a.to_string() << " op " << b.to_string() << " at " << i;
    }
  }
}

TEST(IndexPlanTest, ReductionMaskAndShape) {
  EXPECT_EQ(*reduction_mask({}, 3), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(*reduction_mask({-1}, 3), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(*reduction_mask({0, 2}, 3), (std::vector<bool>{true, false, true}));
  EXPECT_FALSE(reduction_mask({3}, 3).ok());
  EXPECT_FALSE(reduction_mask({1, -2}, 3).ok());
  EXPECT_EQ(reduced_shape(Shape{2, 3, 4}, {true, false, true}, false), (Shape{3}));
  EXPECT_EQ(reduced_shape(Shape{2, 3, 4}, {true, false, true}, true), (Shape{1, 3, 1}));
}

// Reduces with the plan exactly as the GPU kernel does (sum) and compares with a naive sum.
TEST(IndexPlanTest, ReducePlanSumsMatchNaive) {
  std::mt19937 rng(7);
  const std::vector<Shape> shapes = {Shape{6}, Shape{2, 3}, Shape{4, 1, 5}, Shape{2, 3, 4, 5}, Shape{3, 1, 2, 1, 4},
                                     Shape{0, 3}, Shape{3, 0}};
  for (const Shape& s : shapes) {
    const int rank = s.rank();
    std::vector<double> x(static_cast<size_t>(s.num_elements()));
    for (auto& v : x) v = static_cast<double>(rng() % 100);
    for (int m = 0; m < (1 << rank); ++m) {
      std::vector<bool> mask(static_cast<size_t>(rank));
      for (int d = 0; d < rank; ++d) mask[static_cast<size_t>(d)] = (m >> d) & 1;
      auto p = make_reduce_plan(s, mask);
      ASSERT_TRUE(p.ok());
      const Shape out = reduced_shape(s, mask, false);
      ASSERT_EQ(p->num_out, out.num_elements()) << s.to_string() << " mask " << m;
      // Naive: scatter each input element into its output slot.
      std::vector<double> want(static_cast<size_t>(out.num_elements()), 0.0);
      for (int64_t i = 0; i < s.num_elements(); ++i) {
        int64_t rem = i, o = 0, ostride = 1;
        for (int d = rank - 1; d >= 0; --d) {
          const int64_t c = rem % s.dim(d);
          rem /= s.dim(d);
          if (!mask[static_cast<size_t>(d)]) {
            o += c * ostride;
            ostride *= s.dim(d);
          }
        }
        want[static_cast<size_t>(o)] += x[static_cast<size_t>(i)];
      }
      for (int64_t o = 0; o < p->num_out; ++o) {
        double got = 0;
        for (int64_t r = 0; r < p->num_reduce; ++r) got += x[static_cast<size_t>(reduce_offset(*p, o, r))];
        ASSERT_EQ(got, want[static_cast<size_t>(o)]) << s.to_string() << " mask " << m << " out " << o;
      }
    }
  }
}

TEST(IndexPlanTest, ReducePlanCollapsesAdjacentAxes) {
  // [2,3,4,5] over axes {1,2}: kept [2] and [5], reduced one group of 12.
  auto p = make_reduce_plan(Shape{2, 3, 4, 5}, {false, true, true, false});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->red_rank, 1);
  EXPECT_EQ(p->red_size[0], 12);
  EXPECT_EQ(p->red_stride[0], 5);
  EXPECT_EQ(p->kept_rank, 2);
  EXPECT_EQ(p->num_out, 10);
  // BiasAddGrad's pattern [N,H,W,C] over all but C: a single reduced group.
  auto q = make_reduce_plan(Shape{8, 7, 7, 16}, {true, true, true, false});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->red_rank, 1);
  EXPECT_EQ(q->num_reduce, 8 * 7 * 7);
  EXPECT_EQ(q->red_stride[0], 16);
}

// Naive transpose offsets against the collapsed plan.
TEST(IndexPlanTest, TransposeOffsetsMatchNaive) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {Shape{2, 3}, {1, 0}},          {Shape{2, 3, 4}, {0, 2, 1}},     {Shape{2, 3, 4}, {2, 0, 1}},
      {Shape{2, 3, 4, 5}, {0, 1, 3, 2}}, {Shape{2, 1, 3, 1, 4}, {4, 3, 2, 1, 0}}, {Shape{3, 4, 5}, {0, 1, 2}},
      {Shape{1, 1}, {1, 0}},          {Shape{4, 1, 5}, {2, 1, 0}},     {Shape{2, 3, 4, 5}, {1, 2, 3, 0}},
  };
  for (const auto& [in, perm] : cases) {
    auto p = make_transpose_plan(in, perm);
    ASSERT_TRUE(p.ok()) << p.status();
    const int r = in.rank();
    std::vector<int64_t> in_stride(static_cast<size_t>(r));
    int64_t s = 1;
    for (int i = r - 1; i >= 0; --i) {
      in_stride[static_cast<size_t>(i)] = s;
      s *= in.dim(i);
    }
    for (int64_t i = 0; i < in.num_elements(); ++i) {
      // Decompose i over the output dims (in.dim(perm[d])).
      int64_t rem = i, off = 0;
      for (int d = r - 1; d >= 0; --d) {
        const int64_t n = in.dim(static_cast<int>(perm[static_cast<size_t>(d)]));
        off += (rem % n) * in_stride[static_cast<size_t>(perm[static_cast<size_t>(d)])];
        rem /= n;
      }
      ASSERT_EQ(transpose_offset(*p, i), off) << in.to_string() << " element " << i;
    }
  }
  // Swapping the last two axes of [2,3,4] leaves 3 collapsed dims; [2,3,4] by {0,1,2} one.
  EXPECT_EQ(make_transpose_plan(Shape{2, 3, 4}, {0, 2, 1})->rank, 3);
  EXPECT_EQ(make_transpose_plan(Shape{2, 3, 4}, {0, 1, 2})->rank, 1);
  EXPECT_EQ(make_transpose_plan(Shape{2, 3, 4}, {1, 2, 0})->rank, 2);  // [2] and [3,4] swap as blocks
  EXPECT_EQ(make_transpose_plan(Shape{2, 3}, {0, 0}).status().message(), "perm [0,0] is not a permutation of 0..1");
  EXPECT_FALSE(make_transpose_plan(Shape{2, 3}, {0}).ok());
}

// ---- window geometry (Conv2D via cuDNN, MaxPool kernels) --------------------------------

AttrMap window_attrs(int64_t k, int64_t s, const std::string& pad) {
  AttrMap a;
  a.set("strides", std::vector<int64_t>{1, s, s, 1});
  a.set("ksize", std::vector<int64_t>{1, k, k, 1});
  a.set("padding", pad);
  return a;
}

// cuDNN's output size over the (possibly extended) input with symmetric padding equals
// TensorFlow's for every size, window, stride and padding.
TEST(WindowPlanTest, CudnnSymmetricPaddingGivesTensorFlowSizes) {
  int asymmetric = 0;
  for (int64_t in = 1; in <= 12; ++in) {
    for (int64_t k = 1; k <= 6; ++k) {
      for (int64_t s = 1; s <= 3; ++s) {
        for (const char* pad : {"SAME", "VALID"}) {
          auto g = conv_geometry(window_attrs(k, s, pad), Shape{2, in, in + 1, 3}, Shape{k, k, 3, 4});
          if (std::string(pad) == "VALID" && k > in) {
            EXPECT_FALSE(g.ok());
            continue;
          }
          ASSERT_TRUE(g.ok()) << g.status();
          const int64_t want_h = std::string(pad) == "SAME" ? (in + s - 1) / s : (in - k) / s + 1;
          EXPECT_EQ(g->wh.out, want_h);
          EXPECT_EQ((g->ph + 2 * g->wh.pad_before - k) / s + 1, g->wh.out) << in << " " << k << " " << s << pad;
          EXPECT_EQ((g->pw + 2 * g->ww.pad_before - k) / s + 1, g->ww.out) << in << " " << k << " " << s << pad;
          EXPECT_GE(g->ph - g->h, 0);
          EXPECT_LE(g->ph - g->h, 1);
          EXPECT_EQ(g->asymmetric, g->ph != g->h || g->pw != g->w);
          asymmetric += g->asymmetric;
        }
      }
    }
  }
  EXPECT_GT(asymmetric, 0);  // the sweep exercises the padded-copy path
  // MNIST's 28x28 with a 3x3 window at stride 2: 14 outputs, 0 rows before and 1 after.
  auto g = conv_geometry(window_attrs(3, 2, "SAME"), Shape{1, 28, 28, 1}, Shape{3, 3, 1, 8});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->wh.out, 14);
  EXPECT_EQ(g->wh.pad_before, 0);
  EXPECT_EQ(g->ph, 29);
  EXPECT_TRUE(g->asymmetric);
  auto bad = conv_geometry(window_attrs(3, 1, "SAME"), Shape{1, 5, 5, 2}, Shape{3, 3, 4, 8});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("input depth 2 does not match the filter's input depth 4"),
            std::string::npos);
}

// The GPU MaxPool / MaxPoolGrad kernels' per-output window scan, run on the host, against the
// CPU kernels on random data.
TEST(WindowPlanTest, PoolWindowScanMatchesCpuKernels) {
  auto cpu = make_cpu_device("/job:w/replica:0/task:0/device:CPU:0", 0);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  struct Case { Shape in; int64_t k, s; const char* pad; };
  for (const Case& c : {Case{Shape{2, 7, 9, 3}, 2, 2, "SAME"}, Case{Shape{1, 6, 6, 2}, 3, 2, "SAME"},
                        Case{Shape{2, 8, 5, 4}, 3, 1, "VALID"}, Case{Shape{1, 5, 5, 1}, 3, 3, "SAME"}}) {
    const AttrMap attrs = window_attrs(c.k, c.s, c.pad);
    auto g = pool_geometry(attrs, c.in);
    ASSERT_TRUE(g.ok()) << g.status();
    Tensor x(DType::kFloat32, c.in);
    for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = u(rng);
    const Shape pooled{g->n, g->wh.out, g->ww.out, g->c};
    Tensor dy(DType::kFloat32, pooled);
    for (int64_t i = 0; i < dy.num_elements(); ++i) dy.data<float>()[i] = u(rng);
    // The GPU kernels' arithmetic on the host.
    std::vector<float> y(static_cast<size_t>(pooled.num_elements()));
    std::vector<float> dx(static_cast<size_t>(x.num_elements()), 0.f);
    for (int64_t i = 0; i < pooled.num_elements(); ++i) {
      float v;
      const int64_t off = pool_window_argmax(x.data<float>(), *g, i, &v);
      ASSERT_GE(off, 0);
      y[static_cast<size_t>(i)] = v;
      dx[static_cast<size_t>(off)] += dy.data<float>()[i];
    }
    // The CPU kernels.
    auto run_cpu = [&](const std::string& op, std::vector<Tensor> in) -> Result<Tensor> {
      Node n;
      n.name = "p";
      n.op = op;
      n.inputs.resize(in.size());  // the registry checks the op's input count
      n.attrs = attrs;
      n.output_types = {DType::kFloat32};
      AF_ASSIGN_OR_RETURN(auto k, KernelRegistry::global().create(n, "CPU"));
      OpKernelContext ctx(n, cpu.get(), std::move(in), 1);
      AF_RETURN_IF_ERROR(k->compute(ctx));
      return ctx.outputs()[0];
    };
    auto cy = run_cpu("MaxPool", {x});
    ASSERT_TRUE(cy.ok()) << cy.status();
    ASSERT_EQ(cy->shape(), pooled);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], cy->data<float>()[i]) << c.in.to_string() << " out " << i;
    auto cdx = run_cpu("MaxPoolGrad", {x, *cy, dy});
    ASSERT_TRUE(cdx.ok()) << cdx.status();
    for (size_t i = 0; i < dx.size(); ++i)
      ASSERT_NEAR(dx[i], cdx->data<float>()[i], 1e-5f) << c.in.to_string() << " input " << i;
  }
}

TEST(WindowPlanTest, FilterLayoutsAndPaddedCopies) {
  const int64_t fh = 2, fw = 3, c = 4, k = 5, n = fh * fw * c * k;
  // HWIO element (h=1, w=2, i=3, o=4) sits at OHWI (4, 1, 2, 3).
  const int64_t hwio = ((1 * fw + 2) * c + 3) * k + 4, ohwi = ((4 * fh + 1) * fw + 2) * c + 3;
  EXPECT_EQ(ohwi_from_hwio(ohwi, fh, fw, c, k), hwio);
  EXPECT_EQ(hwio_from_ohwi(hwio, fh, fw, c, k), ohwi);
  // The two maps are inverse permutations.
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = ohwi_from_hwio(i, fh, fw, c, k);
    ASSERT_FALSE(seen[static_cast<size_t>(j)]);
    seen[static_cast<size_t>(j)] = true;
    ASSERT_EQ(hwio_from_ohwi(j, fh, fw, c, k), i);
  }
  // Padding [2,3,3,2] into [2,4,4,2] and cropping back restores every element; the extra row
  // and column stay untouched (zero).
  const int64_t N = 2, H = 3, W = 3, C = 2;
  std::vector<int> src(static_cast<size_t>(N * H * W * C)), padded(static_cast<size_t>(N * 4 * 4 * C), 0),
      back(src.size(), -1);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<int>(i) + 1;
  for (int64_t i = 0; i < N * H * W * C; ++i) {
    int64_t so, d;
    window_copy_offsets(i, H, W, C, H, W, 4, 4, &so, &d);
    padded[static_cast<size_t>(d)] = src[static_cast<size_t>(so)];
  }
  for (int64_t i = 0; i < N * H * W * C; ++i) {
    int64_t so, d;
    window_copy_offsets(i, H, W, C, 4, 4, H, W, &so, &d);
    back[static_cast<size_t>(d)] = padded[static_cast<size_t>(so)];
  }
  EXPECT_EQ(back, src);
  int nonzero = 0;
  for (int v : padded) nonzero += v != 0;
  EXPECT_EQ(nonzero, N * H * W * C);
  EXPECT_EQ(padded[static_cast<size_t>(((0 * 4 + 3) * 4 + 0) * C)], 0);  // the added row
  EXPECT_EQ(padded[static_cast<size_t>(((1 * 4 + 1) * 4 + 1) * C + 1)],
            src[static_cast<size_t>(((1 * H + 1) * W + 1) * C + 1)]);
}

}  // namespace
}  // namespace actorflow
