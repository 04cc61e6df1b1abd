#include <gtest/gtest.h>

#include "tensor/tensor.h"

namespace actorflow {
namespace {

TEST(ShapeTest, Basics) {
  Shape s{2, 3};
  EXPECT_EQ(s.rank(), 2);
  EXPECT_EQ(s.num_elements(), 6);
  EXPECT_EQ(s.to_string(), "[2,3]");
  EXPECT_EQ(Shape().num_elements(), 1);
  EXPECT_EQ(Shape({-1, 784}).to_string(), "[?,784]");
  EXPECT_EQ(Shape({-1, 784}).num_elements(), -1);
  EXPECT_TRUE(Shape({-1, 784}).compatible_with(Shape{50, 784}));
  EXPECT_FALSE(Shape({-1, 784}).compatible_with(Shape{50, 783}));
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kFloat32), 4u);
  EXPECT_EQ(dtype_size(DType::kFloat64), 8u);
  EXPECT_EQ(dtype_size(DType::kInt32), 4u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  EXPECT_EQ(dtype_size(DType::kUInt8), 1u);
  EXPECT_EQ(dtype_size(DType::kBool), 1u);
  EXPECT_EQ(*dtype_from_name("int64"), DType::kInt64);
  EXPECT_FALSE(dtype_from_name("complex").ok());
}

TEST(TensorTest, PrintsLikeNumpy) {
  EXPECT_EQ(Tensor::from_vector<float>({22, 28, 49, 64}, {2, 2}).to_string(), "[[22. 28.]\n [49. 64.]]");
  EXPECT_EQ(Tensor::from_vector<float>({44, 56, 98, 128}, {2, 2}).to_string(),
            "[[ 44.  56.]\n [ 98. 128.]]");
  EXPECT_EQ(Tensor::from_vector<float>({1.5f, 2.25f}, {2}).to_string(), "[1.5  2.25]");
  EXPECT_EQ(Tensor::from_vector<int32_t>({1, -2, 30}, {3}).to_string(), "[ 1 -2 30]");
  EXPECT_EQ(Tensor::from_vector<bool>({true, false}, {2}).to_string(), "[ True False]");
  EXPECT_EQ(Tensor::scalar<float>(3.f).to_string(), "3.");
  EXPECT_EQ(Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}).to_string(),
            "[[[1 2]\n  [3 4]]\n\n [[5 6]\n  [7 8]]]");
  Tensor big(DType::kInt32, Shape{2000});
  EXPECT_EQ(big.to_string(), "[0 0 0 ... 0 0 0]");
}

TEST(TensorTest, SharesBufferOnCopyAndReshape) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = a;
  EXPECT_TRUE(a.shares_buffer_with(b));
  auto r = a.reshaped(Shape{3, 2});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->shares_buffer_with(a));
  EXPECT_FALSE(a.reshaped(Shape{4}).ok());
  Tensor c = a.deep_copy();
  EXPECT_FALSE(c.shares_buffer_with(a));
  EXPECT_TRUE(c.equals(a));
}

TEST(TensorTest, BufferReturnsToAllocator) {
  const int64_t before = cpu_allocator()->stats().bytes_in_use;
  {
    Tensor t(DType::kFloat32, Shape{1024});
    EXPECT_EQ(cpu_allocator()->stats().bytes_in_use, before + 4096);
  }
  EXPECT_EQ(cpu_allocator()->stats().bytes_in_use, before);
}

}  // namespace
}  // namespace actorflow

namespace actorflow {
namespace {
TEST(TensorTest, PrintsShortestRoundTripDigits) {
  // Expected strings are what NumPy 1.x prints for the same arrays.
  EXPECT_EQ(Tensor::from_vector<float>({26.80403f, 0.1f, 1.f / 3}, {3}).to_string(),
            "[26.80403     0.1         0.33333334]");
  // Seed 000's result, as NumPy prints it.
  EXPECT_EQ(Tensor::from_vector<float>({26.80402f, 32.85203f, 54.003944f, 69.09987f}, {2, 2}).to_string(),
            "[[26.80402  32.85203 ]\n [54.003944 69.09987 ]]");
  EXPECT_EQ(Tensor::from_vector<float>({1e-5f, 1.f}, {2}).to_string(), "[1.e-05 1.e+00]");
  EXPECT_EQ(Tensor::from_vector<float>({1.5f, -2.25f}, {2}).to_string(), "[ 1.5  -2.25]");
  EXPECT_EQ(Tensor::from_vector<double>({0.5, 0.25}, {2}).to_string(), "[0.5  0.25]");
}
}  // namespace
}  // namespace actorflow
