#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/idx.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

void write_bytes(const std::string& path, const std::vector<unsigned char>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

void write_gz_bytes(const std::string& path, const std::vector<unsigned char>& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// Hand-built IDX bytes: 2 images of 2x3 pixels.
std::vector<unsigned char> tiny_images() {
  return {0, 0, 0x08, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3,  // magic, dims 2,2,3
          0, 1, 2, 3, 4, 5, 250, 251, 252, 253, 254, 255};
}

TEST(IdxTest, ReadsHandWrittenPlainUbyte) {
  TempDir dir;
  write_bytes(dir.file("img"), tiny_images());
  auto t = read_idx(dir.file("img"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), DType::kUInt8);
  EXPECT_EQ(t->shape(), (Shape{2, 2, 3}));
  EXPECT_TRUE(t->equals(Tensor::from_vector<uint8_t>({0, 1, 2, 3, 4, 5, 250, 251, 252, 253, 254, 255}, {2, 2, 3})));
}

TEST(IdxTest, ReadsGzipDetectedByMagicNotName) {
  TempDir dir;
  write_gz_bytes(dir.file("img.idx"), tiny_images());  // no .gz suffix on purpose
  auto t = read_idx(dir.file("img.idx"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(t->data<uint8_t>()[11], 255);
}

TEST(IdxTest, ReadsBigEndianIntAndFloat) {
  TempDir dir;
  // int32 [2]: 1, -2 ; float32 [1]: 1.5 (0x3FC00000)
  write_bytes(dir.file("i"), {0, 0, 0x0C, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFE});
  write_bytes(dir.file("f"), {0, 0, 0x0D, 1, 0, 0, 0, 1, 0x3F, 0xC0, 0, 0});
  auto i = read_idx(dir.file("i"));
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_TRUE(i->equals(Tensor::from_vector<int32_t>({1, -2}, {2})));
  auto f = read_idx(dir.file("f"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->data<float>()[0], 1.5f);
}

TEST(IdxTest, WriteThenReadRoundTripsPlainAndGzip) {
  TempDir dir;
  Tensor labels = Tensor::from_vector<uint8_t>({7, 2, 1, 0, 4}, {5});
  Tensor d = Tensor::from_vector<double>({0.25, -1e300}, {1, 2});
  for (bool gz : {false, true}) {
    ASSERT_TRUE(write_idx(dir.file("l"), labels, gz).ok());
    auto r = read_idx(dir.file("l"));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->equals(labels));
    ASSERT_TRUE(write_idx(dir.file("d"), d, gz).ok());
    auto rd = read_idx(dir.file("d"));
    ASSERT_TRUE(rd.ok()) << rd.status();
    EXPECT_TRUE(rd->equals(d));
  }
  EXPECT_FALSE(write_idx(dir.file("b"), Tensor::from_vector<bool>({true}, {1}), false).ok());
}

TEST(IdxTest, MissingFileIsNotFoundNamingIt) {
  auto r = read_idx("/nonexistent/dir/train-images-idx3-ubyte");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/dir/train-images-idx3-ubyte"), std::string::npos);
}

TEST(IdxTest, BadMagicUnsupportedTypeAndTruncationAreReported) {
  TempDir dir;
  write_bytes(dir.file("magic"), {0x50, 0x4B, 0x03, 0x04, 0, 0});
  auto r = read_idx(dir.file("magic"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("bad magic 50 4b 03 04"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find(dir.file("magic")), std::string::npos);

  write_bytes(dir.file("short"), {0, 0, 0x0B, 1, 0, 0, 0, 1, 0, 1});
  r = read_idx(dir.file("short"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("0x0b (short)"), std::string::npos) << r.status();

  std::vector<unsigned char> trunc = tiny_images();
  trunc.resize(trunc.size() - 3);
  write_bytes(dir.file("trunc"), trunc);
  r = read_idx(dir.file("trunc"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDataLoss);
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("[2,2,3]"), std::string::npos) << r.status();

  write_gz_bytes(dir.file("trunc.gz"), trunc);
  r = read_idx(dir.file("trunc.gz"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDataLoss);
  EXPECT_NE(r.status().message().find("gzip"), std::string::npos) << r.status();

  std::vector<unsigned char> extra = tiny_images();
  extra.push_back(9);
  write_bytes(dir.file("extra"), extra);
  r = read_idx(dir.file("extra"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("trailing"), std::string::npos) << r.status();

  write_bytes(dir.file("hdr"), {0, 0, 0x08, 3, 0, 0});
  r = read_idx(dir.file("hdr"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("inside its header"), std::string::npos) << r.status();
}

TEST(IdxTest, CutGzipStreamIsDataLoss) {
  TempDir dir;
  std::vector<unsigned char> big(4 + 4 + 100000);
  big[2] = 0x08;
  big[3] = 1;
  big[5] = 0x01;  // 100000 = 0x000186A0
  big[6] = 0x86;
  big[7] = 0xA0;
  for (size_t i = 8; i < big.size(); ++i) big[i] = static_cast<unsigned char>(i * 31 % 251);
  write_gz_bytes(dir.file("x.gz"), big);
  auto ok = read_idx(dir.file("x.gz"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->num_elements(), 100000);
  // Cut the compressed file in half.
  fs::resize_file(dir.file("x.gz"), fs::file_size(dir.file("x.gz")) / 2);
  auto r = read_idx(dir.file("x.gz"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find(dir.file("x.gz")), std::string::npos);
}

void write_mnist_dir(const TempDir& dir, int n_train, int n_train_labels, bool gz) {
  std::vector<uint8_t> px(static_cast<size_t>(n_train) * 4);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 51);
  std::vector<uint8_t> lb(static_cast<size_t>(n_train_labels));
  for (size_t i = 0; i < lb.size(); ++i) lb[i] = static_cast<uint8_t>(i % 10);
  const std::string sfx = gz ? ".gz" : "";
  ASSERT_TRUE(write_idx(dir.file("train-images-idx3-ubyte" + sfx), Tensor::from_vector<uint8_t>(px, {n_train, 2, 2}), gz).ok());
  ASSERT_TRUE(write_idx(dir.file("train-labels-idx1-ubyte" + sfx), Tensor::from_vector<uint8_t>(lb, {n_train_labels}), gz).ok());
  ASSERT_TRUE(write_idx(dir.file("t10k-images-idx3-ubyte" + sfx), Tensor::from_vector<uint8_t>({0, 255, 51, 102}, {1, 2, 2}), gz).ok());
  ASSERT_TRUE(write_idx(dir.file("t10k-labels-idx1-ubyte" + sfx), Tensor::from_vector<uint8_t>({9}, {1}), gz).ok());
}

TEST(MnistTest, LoadsSmallDirectoryScaledAndFlattened) {
  for (bool gz : {false, true}) {
    TempDir dir;
    write_mnist_dir(dir, 3, 3, gz);
    auto m = load_mnist(dir.path());
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->train_images.dtype(), DType::kFloat32);
    EXPECT_EQ(m->train_images.shape(), (Shape{3, 4}));
    EXPECT_EQ(m->train_labels.dtype(), DType::kInt32);
    EXPECT_TRUE(m->train_labels.equals(Tensor::from_vector<int32_t>({0, 1, 2}, {3})));
    // pixel i = (i*51) mod 256; pixel 5 = 255 -> 1.0, pixel 1 = 51 -> 0.2
    EXPECT_FLOAT_EQ(m->train_images.data<float>()[1], 51.f / 255.f);
    EXPECT_EQ(m->train_images.data<float>()[5], 1.0f);
    EXPECT_TRUE(m->test_images.equals(Tensor::from_vector<float>({0.f, 1.f, 51.f / 255.f, 102.f / 255.f}, {1, 4})));
    EXPECT_TRUE(m->test_labels.equals(Tensor::from_vector<int32_t>({9}, {1})));
  }
}

TEST(MnistTest, CountMismatchAndMissingFilesAreNamed) {
  TempDir dir;
  write_mnist_dir(dir, 3, 2, false);
  auto m = load_mnist(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("count mismatch"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("3 images"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("2 labels"), std::string::npos) << m.status();

  TempDir empty;
  m = load_mnist(empty.path());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kNotFound);
  EXPECT_NE(m.status().message().find("train-images-idx3-ubyte"), std::string::npos) << m.status();
}

TEST(MnistTest, OneHot) {
  auto oh = to_categorical(Tensor::from_vector<int32_t>({2, 0}, {2}), 3);
  ASSERT_TRUE(oh.ok()) << oh.status();
  EXPECT_TRUE(oh->equals(Tensor::from_vector<float>({0, 0, 1, 1, 0, 0}, {2, 3})));
  auto bad = to_categorical(Tensor::from_vector<int32_t>({1, 3}, {2}), 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("label 3 at index 1"), std::string::npos) << bad.status();
}

TEST(MnistTest, FashionMnistFromDebianPackage) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  // scripts/setup.sh installs Debian's dataset-fashion-mnist: its absence is a setup failure.
  ASSERT_TRUE(fs::exists(dir + "/train-images-idx3-ubyte.gz") || fs::exists(dir + "/train-images-idx3-ubyte"))
      << dir << " not present (Debian package dataset-fashion-mnist, installed by scripts/setup.sh)";
  auto m = load_mnist(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->train_images.shape(), (Shape{60000, 784}));
  EXPECT_EQ(m->train_labels.shape(), (Shape{60000}));
  EXPECT_EQ(m->test_images.shape(), (Shape{10000, 784}));
  EXPECT_EQ(m->test_labels.shape(), (Shape{10000}));
  std::vector<int64_t> counts(10, 0);
  for (int64_t i = 0; i < 60000; ++i) {
    int32_t l = m->train_labels.data<int32_t>()[i];
    ASSERT_TRUE(l >= 0 && l < 10) << "label " << l << " at " << i;
    ++counts[static_cast<size_t>(l)];
  }
  for (int64_t c : counts) EXPECT_EQ(c, 6000);  // Fashion-MNIST is balanced
  float lo = 1, hi = 0;
  const float* px = m->train_images.data<float>();
  for (int64_t i = 0; i < 60000 * 784; ++i) {
    lo = std::min(lo, px[i]);
    hi = std::max(hi, px[i]);
  }
  EXPECT_EQ(lo, 0.f);
  EXPECT_EQ(hi, 1.f);
  auto oh = to_categorical(m->test_labels, 10);
  ASSERT_TRUE(oh.ok());
  EXPECT_EQ(oh->shape(), (Shape{10000, 10}));
}

}  // namespace
}  // namespace actorflow
