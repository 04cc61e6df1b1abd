#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "data/checkpoint.h"
#include "data/crc32c.h"
#include "data/tf/tf_checkpoint.h"
#include "data/tf/tf_checkpoint_data.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A small model whose values depend on the step, so a restore can be checked exactly.
CheckpointData model_at(int64_t step) {
  CheckpointData d;
  d.global_step = step;
  std::vector<float> w(12);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(step) + 0.25f * static_cast<float>(i);
  d.variables["conv1/weights"] = Tensor::from_vector<float>(w, {3, 4});
  d.variables["conv1/biases"] = Tensor::from_vector<float>({float(step), -float(step)}, {2});
  d.variables["global_step"] = Tensor::scalar<int64_t>(step);
  return d;
}

void expect_same(const CheckpointData& a, const CheckpointData& b) {
  EXPECT_EQ(a.global_step, b.global_step);
  ASSERT_EQ(a.variables.size(), b.variables.size());
  for (const auto& [name, t] : a.variables) {
    auto it = b.variables.find(name);
    ASSERT_NE(it, b.variables.end()) << name;
    EXPECT_TRUE(t.equals(it->second)) << name << ": " << t.to_string() << " vs " << it->second.to_string();
  }
}

TEST(Crc32cTest, StandardVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(detail::crc32c_extend_portable(0, "123456789", 9), 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[static_cast<size_t>(i)] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(Crc32cTest, HardwareAndPortableAgreeAndExtendComposes) {
  std::mt19937 rng(1);
  std::vector<unsigned char> buf(4099);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (size_t off : {0, 1, 3, 7}) {
    for (size_t len : {0, 1, 7, 8, 9, 63, 64, 1000, 4092}) {
      EXPECT_EQ(crc32c(buf.data() + off, len), detail::crc32c_extend_portable(0, buf.data() + off, len))
          << off << "+" << len;
    }
  }
  const uint32_t whole = crc32c(buf.data(), buf.size());
  for (size_t cut : {0, 1, 100, 4098}) {
    EXPECT_EQ(crc32c_extend(crc32c(buf.data(), cut), buf.data() + cut, buf.size() - cut), whole);
  }
  std::cout << "crc32c hardware path: " << (detail::crc32c_uses_hardware() ? "yes" : "no") << "\n";
}

TEST(CheckpointFileTest, RoundTripsEveryDtype) {
  TempDir dir;
  CheckpointData d;
  d.global_step = 1234567890123;
  d.variables["f32"] = Tensor::from_vector<float>({1.5f, -0.f, 3e38f, 1e-45f}, {2, 2});
  d.variables["f64"] = Tensor::from_vector<double>({3.141592653589793, -1e-300}, {2});
  d.variables["i32"] = Tensor::from_vector<int32_t>({INT32_MIN, 0, INT32_MAX}, {3, 1});
  d.variables["i64"] = Tensor::from_vector<int64_t>({INT64_MIN, 42}, {1, 2});
  d.variables["u8"] = Tensor::from_vector<uint8_t>({0, 128, 255}, {3});
  d.variables["b"] = Tensor::from_vector<bool>({true, false, true}, {3});
  d.variables["scalar"] = Tensor::scalar<float>(7.f);
  d.variables["empty"] = Tensor(DType::kFloat32, Shape{0, 5});
  std::vector<float> big(100000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f;
  d.variables["fc/weights"] = Tensor::from_vector<float>(big, {500, 200});
  ASSERT_TRUE(write_checkpoint(dir.file("ck"), d).ok());
  EXPECT_EQ(dir_entries(dir.path()), std::vector<std::string>{"ck"});  // no temporary left
  auto r = read_checkpoint(dir.file("ck"));
  ASSERT_TRUE(r.ok()) << r.status();
  expect_same(d, *r);
  EXPECT_EQ(r->variables["empty"].shape(), (Shape{0, 5}));
  EXPECT_EQ(r->variables["scalar"].shape(), Shape{});
}

TEST(CheckpointFileTest, FileStartsWithMsgpackMapAndEndsWithCrcOfTheRest) {
  TempDir dir;
  ASSERT_TRUE(write_checkpoint(dir.file("ck"), model_at(5)).ok());
  std::ifstream f(dir.file("ck"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 5u);
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x84);  // fixmap of 4 entries
  EXPECT_NE(bytes.find("actorflow.checkpoint"), std::string::npos);
  const size_t body = bytes.size() - 5;
  EXPECT_EQ(static_cast<unsigned char>(bytes[body]), 0xce);
  const auto* t = reinterpret_cast<const unsigned char*>(bytes.data() + body + 1);
  const uint32_t stored = uint32_t{t[0]} << 24 | uint32_t{t[1]} << 16 | uint32_t{t[2]} << 8 | t[3];
  EXPECT_EQ(stored, crc32c(bytes.data(), body));
}

TEST(CheckpointFileTest, EveryTruncationAndEveryByteFlipIsDataLoss) {
  TempDir dir;
  const std::string p = dir.file("model.ckpt-5");
  ASSERT_TRUE(write_checkpoint(p, model_at(5)).ok());
  std::ifstream f(p, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  f.close();
  const std::string bad = dir.file("bad");
  auto write = [&](const std::string& bytes) {
    std::ofstream o(bad, std::ios::binary | std::ios::trunc);
    o.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  for (size_t len = 0; len < good.size(); ++len) {
    write(good.substr(0, len));
    auto r = read_checkpoint(bad);
    ASSERT_FALSE(r.ok()) << "truncated to " << len;
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << len << ": " << r.status();
    EXPECT_NE(r.status().message().find(bad), std::string::npos);
  }
  for (size_t i = 0; i < good.size(); ++i) {
    std::string b = good;
    b[i] = static_cast<char>(b[i] ^ (1 << (i % 8)));
    write(b);
    auto r = read_checkpoint(bad);
    ASSERT_FALSE(r.ok()) << "bit flip at " << i;
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << i << ": " << r.status();
  }
  write(good + "x");
  EXPECT_EQ(read_checkpoint(bad).status().code(), Code::kDataLoss);
  auto missing = read_checkpoint(dir.file("nope"));
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
}

// Rewrites the checksum trailer of a checkpoint's bytes after a test edited its body.
void reseal(std::string& bytes) {
  const size_t body = bytes.size() - 5;
  const uint32_t c = crc32c(bytes.data(), body);
  for (int i = 0; i < 4; ++i) bytes[body + 1 + i] = static_cast<char>(c >> (24 - 8 * i));
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(CheckpointFileTest, InvalidValuesAreRefusedEvenWithAValidChecksum) {
  TempDir dir;
  CheckpointData d;
  d.global_step = 5;
  d.variables["b"] = Tensor::from_vector<bool>({true, false, true}, {3});
  ASSERT_TRUE(write_checkpoint(dir.file("ck"), d).ok());
  const std::string good = slurp(dir.file("ck"));
  {
    std::string bytes = good;
    const std::string bin("\xc4\x03\x01\x00\x01", 5);  // bin8 of 3 bytes: the bool data
    const size_t at = bytes.find(bin);
    ASSERT_NE(at, std::string::npos);
    bytes[at + 3] = 7;
    reseal(bytes);
    std::ofstream(dir.file("bool7"), std::ios::binary) << bytes;
    auto r = read_checkpoint(dir.file("bool7"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status();
    EXPECT_NE(r.status().message().find("holds byte 7 at element 1, not 0 or 1"), std::string::npos) << r.status();
  }
  {
    std::string bytes = good;
    const std::string step = std::string("global_step", 11) + '\x05';
    const size_t at = bytes.find(step);
    ASSERT_NE(at, std::string::npos);
    bytes[at + 11] = static_cast<char>(0xfd);  // negative fixint -3
    reseal(bytes);
    std::ofstream(dir.file("negative"), std::ios::binary) << bytes;
    auto r = read_checkpoint(dir.file("negative"));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("negative global_step -3"), std::string::npos) << r.status();
  }
}

// Where each variable lived (a plain variable's place; a partitioned one's parts) survives
// actorflow's file, so converting it gives the data files a TensorFlow-format save would: one per
// place (here 2, the 3-part variable as slices across both). Files without placement read with
// none; a placement that lies (a part not following the one before, a wrong type) is DataLoss.
TEST(CheckpointFileTest, PlacementRoundTripsAndShardsTheConversion) {
  TempDir dir;
  CheckpointData d;
  d.global_step = 7;
  d.variables["w"] = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  d.variables["global_step"] = Tensor::scalar<int64_t>(7);
  d.variables["emb"] = Tensor::from_vector<float>({0, 0.5f, 1, 1.5f, 2, 2.5f}, {3, 2});  // a partitioned one: whole
  d.placement["w"].place = "/job:ps/replica:0/task:1";
  d.placement["global_step"].place = "/job:ps/replica:0/task:0";
  for (int k = 0; k < 3; ++k)
    d.placement["emb"].parts.push_back(SavedPart{"emb/part_" + std::to_string(k), k, 1,
                                                 k == 1 ? "/job:ps/replica:0/task:1" : "/job:ps/replica:0/task:0"});
  ASSERT_TRUE(write_checkpoint(dir.file("ck"), d).ok());
  auto r = read_checkpoint(dir.file("ck"));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->placement.size(), 3u);
  EXPECT_EQ(r->placement.at("w").place, "/job:ps/replica:0/task:1");
  ASSERT_EQ(r->placement.at("emb").parts.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    const SavedPart& p = r->placement.at("emb").parts[static_cast<size_t>(k)];
    EXPECT_EQ(p.variable, "emb/part_" + std::to_string(k));
    EXPECT_EQ(p.offset, k);
    EXPECT_EQ(p.rows, 1);
    EXPECT_EQ(p.place, d.placement.at("emb").parts[static_cast<size_t>(k)].place);
  }
  ASSERT_TRUE(write_checkpoint_data_as_tf(dir.file("tf"), *r).ok());
  EXPECT_TRUE(fs::exists(dir.file("tf.data-00000-of-00002")));
  EXPECT_TRUE(fs::exists(dir.file("tf.data-00001-of-00002")));
  auto tf = TfCheckpointReader::open(dir.file("tf"));
  ASSERT_TRUE(tf.ok()) << tf.status();
  EXPECT_EQ(tf->num_shards(), 2);
  bool emb = false;
  for (const TfEntryInfo& e : tf->entries())
    if (e.name == "emb") {
      emb = true;
      EXPECT_EQ(e.slices.size(), 3u);
      EXPECT_EQ(e.shape, (Shape{3, 2}));
    }
  EXPECT_TRUE(emb);
  // Without placement: the map is absent and reads as none.
  CheckpointData plain = d;
  plain.placement.clear();
  ASSERT_TRUE(write_checkpoint(dir.file("plain"), plain).ok());
  EXPECT_EQ(slurp(dir.file("plain")).find("placement"), std::string::npos);
  auto rp = read_checkpoint(dir.file("plain"));
  ASSERT_TRUE(rp.ok()) << rp.status();
  EXPECT_TRUE(rp->placement.empty());
  // A part whose offset does not follow the one before, and a place that is not a string.
  const std::string good = slurp(dir.file("ck"));
  {
    std::string bytes = good;
    const std::string off = std::string("offset", 6) + '\x01';  // part 1's offset 1 -> 2
    const size_t at = bytes.find(off);
    ASSERT_NE(at, std::string::npos);
    bytes[at + 6] = 2;
    reseal(bytes);
    std::ofstream(dir.file("gap"), std::ios::binary) << bytes;
    auto bad = read_checkpoint(dir.file("gap"));
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), Code::kDataLoss) << bad.status();
    EXPECT_NE(bad.status().message().find("placement of 'emb'"), std::string::npos) << bad.status();
  }
  {
    std::string bytes = good;
    const std::string key("\xa5place", 6);  // the key "place" (fixstr 5): renamed "plact"
    const size_t at = bytes.find(key);
    ASSERT_NE(at, std::string::npos);
    bytes[at + 5] = 't';
    reseal(bytes);
    std::ofstream(dir.file("type"), std::ios::binary) << bytes;
    auto bad = read_checkpoint(dir.file("type"));
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), Code::kDataLoss) << bad.status();
    EXPECT_NE(bad.status().message().find("placement"), std::string::npos) << bad.status();
  }
}

TEST(CheckpointFileTest, FifosAndDevicesAreRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  auto t0 = std::chrono::steady_clock::now();
  auto r = read_checkpoint(dir.file("fifo"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is a FIFO, not a regular file"), std::string::npos) << r.status();
  auto z = read_checkpoint("/dev/zero");
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().message().find("is a character device"), std::string::npos) << z.status();
}

TEST(CheckpointFileTest, RejectsUnwritableInput) {
  TempDir dir;
  CheckpointData d;
  d.variables["x"] = Tensor();
  EXPECT_EQ(write_checkpoint(dir.file("ck"), d).code(), Code::kInvalidArgument);
  EXPECT_FALSE(write_checkpoint("/nonexistent/dir/ck", model_at(1)).ok());
  EXPECT_TRUE(dir_entries(dir.path()).empty());
}

TEST(CheckpointManagerTest, KeepsNewestKAndWritesIndex) {
  TempDir dir;
  CheckpointManager m(dir.path() + "/logs/run1", 3);  // created on first save
  for (int64_t step = 10; step <= 60; step += 10) {
    auto p = m.save(model_at(step));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(*p, dir.path() + "/logs/run1/model.ckpt-" + std::to_string(step));
  }
  const std::string d = dir.path() + "/logs/run1";
  EXPECT_EQ(m.list(), (std::vector<std::string>{d + "/model.ckpt-60", d + "/model.ckpt-50", d + "/model.ckpt-40"}));
  EXPECT_EQ(dir_entries(d), (std::vector<std::string>{"checkpoint", "model.ckpt-40", "model.ckpt-50", "model.ckpt-60"}));
  std::ifstream f(m.index_path());
  std::string index((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(index,
            "model_checkpoint_path: \"model.ckpt-60\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-40\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-50\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-60\"\n");
  auto r = m.restore_latest();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  expect_same(model_at(60), **r);
  EXPECT_TRUE(m.last_restore_skipped().empty());
}

TEST(CheckpointManagerTest, EmptyOrMissingDirectoryRestoresNothing) {
  TempDir dir;
  CheckpointManager m(dir.path(), 5);
  auto r = m.restore_latest();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  CheckpointManager gone(dir.path() + "/never/created", 5);
  auto g = gone.restore_latest();
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->has_value());
  EXPECT_TRUE(gone.list().empty());
}

TEST(CheckpointManagerTest, RestoreFallsBackWhenNewestIsCorrupt) {
  for (CorruptMode mode : {CorruptMode::kFlipByte, CorruptMode::kTruncateHalf, CorruptMode::kDropLastByte,
                           CorruptMode::kZeroLength}) {
    TempDir dir;
    CheckpointManager m(dir.path(), 5);
    for (int64_t step : {100, 200, 300}) ASSERT_TRUE(m.save(model_at(step)).ok());
    auto hit = corrupt_latest(dir.path(), mode);
    ASSERT_TRUE(hit.ok()) << hit.status();
    EXPECT_EQ(*hit, dir.file("model.ckpt-300"));
    auto r = m.restore_latest();
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->has_value());
    expect_same(model_at(200), **r);
    ASSERT_EQ(m.last_restore_skipped().size(), 1u);
    EXPECT_EQ(m.last_restore_skipped()[0].path, dir.file("model.ckpt-300"));
    EXPECT_EQ(m.last_restore_skipped()[0].why.code(), Code::kDataLoss);
  }
}

TEST(CheckpointManagerTest, AllCorruptIsAnErrorListingEachFile) {
  TempDir dir;
  CheckpointManager m(dir.path(), 5);
  ASSERT_TRUE(m.save(model_at(1)).ok());
  ASSERT_TRUE(m.save(model_at(2)).ok());
  ASSERT_TRUE(corrupt_latest(dir.path(), CorruptMode::kFlipByte).ok());
  fs::resize_file(dir.file("model.ckpt-1"), 3);
  auto r = m.restore_latest();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDataLoss);
  EXPECT_NE(r.status().message().find("model.ckpt-2: DataLoss"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("model.ckpt-1: DataLoss"), std::string::npos) << r.status();
  EXPECT_EQ(corrupt_latest(dir.path() + "/none", CorruptMode::kFlipByte).status().code(), Code::kNotFound);
}

TEST(CheckpointManagerTest, UnreadableIndexFallsBackToDirectoryScan) {
  TempDir dir;
  CheckpointManager m(dir.path(), 5);
  ASSERT_TRUE(m.save(model_at(7)).ok());
  ASSERT_TRUE(m.save(model_at(8)).ok());
  { std::ofstream(m.index_path(), std::ios::trunc) << "garbage\n"; }
  EXPECT_EQ(m.list(), (std::vector<std::string>{dir.file("model.ckpt-8"), dir.file("model.ckpt-7")}));
  auto r = m.restore_latest();
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->global_step, 8);
  // The next save repairs the index.
  ASSERT_TRUE(m.save(model_at(9)).ok());
  EXPECT_EQ(m.list().front(), dir.file("model.ckpt-9"));
  EXPECT_EQ(m.list().size(), 3u);
}

TEST(CheckpointManagerTest, SavingAnOlderStepDropsTheAbandonedFuture) {
  TempDir dir;
  CheckpointManager m(dir.path(), 5);
  for (int64_t step : {10, 20, 30}) ASSERT_TRUE(m.save(model_at(step)).ok());
  ASSERT_TRUE(m.save(model_at(25)).ok());  // training went on from step 20
  EXPECT_EQ(m.list(), (std::vector<std::string>{dir.file("model.ckpt-25"), dir.file("model.ckpt-20"),
                                                dir.file("model.ckpt-10")}));
  EXPECT_FALSE(fs::exists(dir.file("model.ckpt-30")));
  ASSERT_TRUE(m.save(model_at(25)).ok());  // same step again replaces it
  EXPECT_EQ(m.list().size(), 3u);
}

// CheckpointFormat::kTensorFlow: each save is a TensorFlow bundle (index + one data file), the
// rotation deletes both files of an old one, restore_latest() reads them back exactly, falls back
// past a damaged one (every corrupt_latest mode, applied to its index), and a directory holding
// both formats is one history ordered by step.
// The manager in TensorFlow's format writes one data file per place by default (the weights on
// ps task 1, the biases and the step on task 0) and rotation deletes every data file of a
// checkpoint with its index; set_tensorflow_sharded(false) writes one data file; both restore the
// same values.
TEST(CheckpointManagerTest, TensorFlowFormatWritesOneDataFilePerPsTask) {
  TempDir dir;
  CheckpointManager m(dir.path(), 1, "model.ckpt", CheckpointFormat::kTensorFlow);
  EXPECT_TRUE(m.tensorflow_sharded());
  auto placed = [](int64_t step) {
    CheckpointData d = model_at(step);
    d.placement["conv1/weights"].place = "/job:ps/replica:0/task:1";
    d.placement["conv1/biases"].place = "/job:ps/replica:0/task:0";
    d.placement["global_step"].place = "/job:ps/replica:0/task:0";
    return d;
  };
  ASSERT_TRUE(m.save(placed(10)).ok());
  EXPECT_EQ(dir_entries(dir.path()),
            (std::vector<std::string>{"checkpoint", "model.ckpt-10.data-00000-of-00002",
                                      "model.ckpt-10.data-00001-of-00002", "model.ckpt-10.index"}));
  // task 0: the biases (8 bytes) and the step (8); task 1: the weights (48).
  EXPECT_EQ(fs::file_size(dir.file("model.ckpt-10.data-00000-of-00002")), 16u);
  EXPECT_EQ(fs::file_size(dir.file("model.ckpt-10.data-00001-of-00002")), 48u);
  auto r = m.restore_latest();
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  expect_same(model_at(10), **r);
  m.set_tensorflow_sharded(false);
  ASSERT_TRUE(m.save(placed(20)).ok());
  EXPECT_EQ(dir_entries(dir.path()),
            (std::vector<std::string>{"checkpoint", "model.ckpt-20.data-00000-of-00001", "model.ckpt-20.index"}));
  r = m.restore_latest();
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  expect_same(model_at(20), **r);
}

TEST(CheckpointManagerTest, TensorFlowFormatRotatesRestoresAndFallsBack) {
  TempDir dir;
  CheckpointManager m(dir.path(), 2, "model.ckpt", CheckpointFormat::kTensorFlow);
  EXPECT_EQ(m.format(), CheckpointFormat::kTensorFlow);
  for (int64_t step : {10, 20, 30}) {
    auto p = m.save(model_at(step));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(*p, dir.file("model.ckpt-" + std::to_string(step)));
  }
  EXPECT_EQ(dir_entries(dir.path()),
            (std::vector<std::string>{"checkpoint", "model.ckpt-20.data-00000-of-00001", "model.ckpt-20.index",
                                      "model.ckpt-30.data-00000-of-00001", "model.ckpt-30.index"}));
  EXPECT_EQ(m.list(), (std::vector<std::string>{dir.file("model.ckpt-30"), dir.file("model.ckpt-20")}));
  auto r = m.restore_latest();
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  expect_same(model_at(30), **r);
  EXPECT_EQ(m.last_restored_path(), dir.file("model.ckpt-30"));

  // actorflow's format in the same directory: one history by step.
  CheckpointManager native(dir.path(), 5);
  ASSERT_TRUE(native.save(model_at(40)).ok());
  r = m.restore_latest();
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  expect_same(model_at(40), **r);
  EXPECT_EQ(native.list(), (std::vector<std::string>{dir.file("model.ckpt-40"), dir.file("model.ckpt-30"),
                                                     dir.file("model.ckpt-20")}));
  fs::remove(dir.file("model.ckpt-40"));

  for (CorruptMode mode : {CorruptMode::kFlipByte, CorruptMode::kTruncateHalf, CorruptMode::kDropLastByte,
                           CorruptMode::kZeroLength}) {
    TempDir d2;
    CheckpointManager tf(d2.path(), 5, "model.ckpt", CheckpointFormat::kTensorFlow);
    for (int64_t step : {100, 200}) ASSERT_TRUE(tf.save(model_at(step)).ok());
    auto hit = corrupt_latest(d2.path(), mode);
    ASSERT_TRUE(hit.ok()) << hit.status();
    EXPECT_EQ(*hit, d2.file("model.ckpt-200.index"));
    auto back = tf.restore_latest();
    ASSERT_TRUE(back.ok() && back->has_value()) << back.status();
    expect_same(model_at(100), **back);
    ASSERT_EQ(tf.last_restore_skipped().size(), 1u);
    EXPECT_EQ(tf.last_restore_skipped()[0].why.code(), Code::kDataLoss) << tf.last_restore_skipped()[0].why;
  }
  // A variable TensorFlow's format cannot hold is an error naming it, and nothing is left behind.
  TempDir d3;
  CheckpointManager tf(d3.path(), 5, "model.ckpt", CheckpointFormat::kTensorFlow);
  CheckpointData bad = model_at(1);
  bad.variables["bytes"] = Tensor::from_vector<uint8_t>({1, 2}, {2});
  auto p = tf.save(bad);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
  EXPECT_NE(p.status().message().find("'bytes'"), std::string::npos) << p.status();
  EXPECT_TRUE(dir_entries(d3.path()).empty());
}

TEST(CheckpointManagerTest, StepFromPath) {
  EXPECT_EQ(checkpoint_step_from_path("/a/b/model.ckpt-123"), 123);
  EXPECT_EQ(checkpoint_step_from_path("model.ckpt-0"), 0);
  EXPECT_FALSE(checkpoint_step_from_path("model.ckpt-12.tmp.5.0").has_value());
  EXPECT_FALSE(checkpoint_step_from_path("model.ckpt-").has_value());
  EXPECT_FALSE(checkpoint_step_from_path("checkpoint").has_value());
  EXPECT_EQ(checkpoint_step_from_path("run/w.ckpt-9", "w.ckpt"), 9);
  // A TensorFlow checkpoint's index names its step; its data files do not.
  EXPECT_EQ(checkpoint_step_from_path("/a/model.ckpt-77.index"), 77);
  EXPECT_FALSE(checkpoint_step_from_path("model.ckpt-77.data-00000-of-00001").has_value());
  EXPECT_FALSE(checkpoint_step_from_path("model.ckpt-77.index.tmp.5").has_value());
}

TEST(CheckpointManagerTest, HookThatThrowsLeavesStateLikeACrash) {
  TempDir dir;
  CheckpointManager m(dir.path(), 2);
  ASSERT_TRUE(m.save(model_at(1)).ok());
  m.set_save_hook_for_testing([](SavePoint p) {
    if (p == SavePoint::kPartiallyWritten) throw std::runtime_error("simulated crash");
  });
  EXPECT_THROW(m.save(model_at(2)), std::runtime_error);
  bool tmp_left = false;
  for (const std::string& e : dir_entries(dir.path())) tmp_left |= e.find(".tmp.") != std::string::npos;
  EXPECT_TRUE(tmp_left);
  auto r = m.restore_latest();
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->global_step, 1);
  m.set_save_hook_for_testing(nullptr);
  ASSERT_TRUE(m.save(model_at(3)).ok());
  EXPECT_EQ(dir_entries(dir.path()), (std::vector<std::string>{"checkpoint", "model.ckpt-1", "model.ckpt-3"}));
}

// Crash (process death via _exit in a forked child) at every point of a save: the parent must
// still restore a whole checkpoint, the new one once its data file has been renamed into place,
// and the next save must work and clean up.
class CrashDuringSaveTest : public ::testing::TestWithParam<int> {};

TEST_P(CrashDuringSaveTest, NewestReadableCheckpointSurvives) {
  const auto point = static_cast<SavePoint>(GetParam());
  TempDir dir;
  {
    CheckpointManager m(dir.path(), 2);
    ASSERT_TRUE(m.save(model_at(100)).ok());
    ASSERT_TRUE(m.save(model_at(200)).ok());
  }
  fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    CheckpointManager m(dir.path(), 2);
    m.set_save_hook_for_testing([point](SavePoint p) {
      if (p == point) _exit(42);
    });
    auto r = m.save(model_at(300));  // with keep 2, deletes model.ckpt-100 (reaches kOldDeleted)
    _exit(r.ok() ? 3 : 4);           // the hook never fired
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 42) << "the child did not reach " << save_point_name(point);

  CheckpointManager m(dir.path(), 2);
  auto r = m.restore_latest();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  const int64_t expected = point >= SavePoint::kRenamed ? 300 : 200;
  expect_same(model_at(expected), **r);
  EXPECT_TRUE(m.last_restore_skipped().empty());
  // The index names only complete files.
  for (const std::string& p : m.list()) EXPECT_TRUE(read_checkpoint(p).ok()) << p;

  // Recovery: the next save succeeds, removes temporaries and keeps 2.
  ASSERT_TRUE(m.save(model_at(400)).ok());
  const std::vector<std::string> entries = dir_entries(dir.path());
  for (const std::string& e : entries) EXPECT_EQ(e.find(".tmp."), std::string::npos) << e;
  EXPECT_EQ(entries, (std::vector<std::string>{"checkpoint", "model.ckpt-" + std::to_string(expected), "model.ckpt-400"}));
  auto again = m.restore_latest();
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->global_step, 400);

  // And when the newest is then corrupted, the survivor of the crash is used.
  ASSERT_TRUE(corrupt_latest(dir.path(), CorruptMode::kTruncateHalf).ok());
  auto fallback = m.restore_latest();
  ASSERT_TRUE(fallback.ok() && fallback->has_value()) << fallback.status();
  expect_same(model_at(expected), **fallback);
}

INSTANTIATE_TEST_SUITE_P(EverySavePoint, CrashDuringSaveTest, ::testing::Range(0, kNumSavePoints),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(save_point_name(static_cast<SavePoint>(info.param)));
                         });

}  // namespace
}  // namespace actorflow
