#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "core/checked_math.h"
#include "tensor/allocator.h"
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

TEST(CheckedMathTest, OverflowIsReportedNeverWrapped) {
  const int64_t max = std::numeric_limits<int64_t>::max(), min = std::numeric_limits<int64_t>::min();
  int64_t r = 0;
  EXPECT_TRUE(checked_mul(int64_t{3}, int64_t{-7}, &r));
  EXPECT_EQ(r, -21);
  EXPECT_FALSE(checked_mul((int64_t{1} << 62) + 1, int64_t{4}, &r));  // the attack's shape: wraps to 4
  EXPECT_FALSE(checked_mul(min, int64_t{-1}, &r));
  EXPECT_TRUE(checked_add(max - 1, int64_t{1}, &r));
  EXPECT_EQ(r, max);
  EXPECT_FALSE(checked_add(max, int64_t{1}, &r));
  EXPECT_FALSE(checked_sub(min, int64_t{1}, &r));
  size_t z = 0;
  EXPECT_FALSE(checked_mul_size(size_t{1} << 62, size_t{8}, &z));
  EXPECT_FALSE(checked_round_up(std::numeric_limits<size_t>::max() - 3, 64, &z));
  EXPECT_TRUE(checked_round_up(65, 64, &z));
  EXPECT_EQ(z, 128u);
  const int64_t dims[] = {0, max, max};
  EXPECT_TRUE(checked_dims_product(dims, 3, &r));
  EXPECT_EQ(r, 0);
  const int64_t big[] = {max, 2};
  EXPECT_FALSE(checked_dims_product(big, 2, &r));
  const int64_t neg[] = {2, -1};
  EXPECT_FALSE(checked_dims_product(neg, 2, &r));
  auto e = mul_or_error(max, 2, "row bytes");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
  EXPECT_NE(e.status().message().find("row bytes"), std::string::npos) << e.status();
  EXPECT_EQ(saturating_cast<int32_t>(1e300), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(saturating_cast<int64_t>(-1e300), min);
  EXPECT_EQ(saturating_cast<int64_t>(std::nan("")), 0);
  EXPECT_EQ(saturating_cast<uint8_t>(-3.0), 0);
  EXPECT_EQ(saturating_cast<int32_t>(-7.9), -7);
}

// Shape::num_elements never wraps: the attack's [2^62+1, 4] has no int64 element count.
TEST(ShapeTest, ElementCountsNeverWrapAndTensorsRefuseOversizedShapes) {
  const Shape attack{(int64_t{1} << 62) + 1, 4};
  EXPECT_EQ(attack.num_elements(), -1);
  auto n = attack.checked_num_elements();
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), Code::kInvalidArgument);
  EXPECT_NE(n.status().message().find("2^60"), std::string::npos) << n.status();
  EXPECT_FALSE(attack.valid_for_tensor());
  EXPECT_EQ(Shape({0, int64_t{1} << 40}).num_elements(), 0);
  EXPECT_TRUE(Shape({0, int64_t{1} << 40}).valid_for_tensor());
  EXPECT_FALSE(Shape({0, int64_t{1} << 62}).valid_for_tensor());  // non-zero dims over the limit
  EXPECT_EQ(*Shape({int64_t{1} << 30, int64_t{1} << 30}).checked_num_elements(), int64_t{1} << 60);
  EXPECT_FALSE(Shape({-1, 3}).checked_num_elements().ok());
  EXPECT_FALSE(Shape::unknown().valid_for_tensor());
  EXPECT_FALSE(Shape(std::vector<int64_t>(255, 1)).valid_for_tensor());
  EXPECT_TRUE(Shape(std::vector<int64_t>(254, 1)).valid_for_tensor());

  // Nothing is requested from the allocator for such shapes; a plain constructor throws.
  const int64_t before = cpu_allocator()->stats().num_allocs;
  auto t = Tensor::allocate(cpu_allocator(), DType::kFloat32, attack);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(cpu_allocator()->stats().num_allocs, before);
  auto bytes = Tensor::allocate(cpu_allocator(), DType::kInt64, Shape{int64_t{1} << 60, 2});
  EXPECT_FALSE(bytes.ok());
  EXPECT_THROW(Tensor(DType::kFloat32, attack), std::length_error);
  EXPECT_THROW(Tensor(DType::kFloat32, Shape({-1, 2})), std::length_error);
  // A 4-element tensor cannot be viewed as [2^62+1, 4] (the products agreed modulo 2^64).
  Tensor four = Tensor::from_vector<float>({1, 2, 3, 4}, {4});
  auto r = four.reshaped(attack);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  // A view never reaches past its buffer.
  EXPECT_THROW(Tensor(DType::kFloat32, Shape{5}, four.buffer()), std::length_error);
  EXPECT_EQ(Tensor(DType::kFloat32, Shape{2, 2}, four.buffer()).num_elements(), 4);
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
