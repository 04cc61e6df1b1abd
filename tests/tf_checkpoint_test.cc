// TensorFlow V2 checkpoints (data/tf/tf_checkpoint.h) against golden files written by TensorFlow
// itself (tests/data/tf_ckpt/, made by make_golden.py; expected.json holds what TensorFlow's own
// reader returned for every variable), plus writes read back, bit-identity with TensorFlow's
// files, Debian's LevelDB reading TensorFlow's index, and corrupt, truncated and lying files.
#include <gtest/gtest.h>
#include <leveldb/env.h>
#include <leveldb/iterator.h>
#include <leveldb/options.h>
#include <leveldb/table.h>
#include <leveldb/table_builder.h>
#include <dirent.h>
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "data/crc32c.h"
#include "data/tf/tf_checkpoint.h"
#include "data/tf/tf_checkpoint_data.h"
#include "data/variable_slots.h"
#include "proto/tf/tensor_bundle.pb.h"
#include "tests/util/fuzz.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using testing::TempDir;

const std::string kGolden = std::string(AF_SOURCE_DIR) + "/tests/data/tf_ckpt";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

nlohmann::json expected() { return nlohmann::json::parse(slurp(kGolden + "/expected.json")); }

TEST(TfCheckpointTest, ReadsEveryGoldenVariableAsTensorFlowDoes) {
  const auto want = expected();
  ASSERT_EQ(want["checkpoints"].size(), 5u);
  int tensors = 0;
  for (const auto& [prefix, vars] : want["checkpoints"].items()) {
    auto r = TfCheckpointReader::open(kGolden + "/" + prefix);
    ASSERT_TRUE(r.ok()) << r.status();
    std::set<std::string> names;
    for (const TfEntryInfo& e : r->entries()) names.insert(e.name);
    std::set<std::string> want_names;
    for (const auto& [name, v] : vars.items()) want_names.insert(name);
    EXPECT_EQ(names, want_names) << prefix;
    for (const TfEntryInfo& e : r->entries()) {
      const auto& v = vars[e.name];
      EXPECT_EQ(tf_dtype_name(e.dtype), v["dtype"].get<std::string>()) << prefix << " " << e.name;
      EXPECT_EQ(e.shape.dims(), v["shape"].get<std::vector<int64_t>>()) << prefix << " " << e.name;
      auto t = r->read(e.name);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->bytes, unhex(v["hex"].get<std::string>())) << prefix << " " << e.name;
      ++tensors;
    }
  }
  EXPECT_EQ(tensors, 10 + 3 + 4 + 6 + 13);
}

TEST(TfCheckpointTest, GoldenValuesConvertToActorflowTensors) {
  auto r = TfCheckpointReader::open(kGolden + "/plain/model.ckpt-7");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_shards(), 1);
  auto f16 = tf_tensor_to_tensor(*r->read("f16"));
  ASSERT_TRUE(f16.ok());
  EXPECT_EQ(f16->dtype(), DType::kFloat32);
  EXPECT_EQ(f16->data<float>()[0], 0.5f);
  EXPECT_EQ(f16->data<float>()[1], -1.25f);
  EXPECT_EQ(f16->data<float>()[2], 65504.0f);
  EXPECT_EQ(f16->data<float>()[3], 1023.0f / (1 << 24));  // 6.1e-5 rounded to float16: subnormal 0x03ff
  auto bf16 = tf_tensor_to_tensor(*r->read("bf16"));
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ(bf16->data<float>()[1], -3.140625f);
  EXPECT_EQ(bf16->data<float>()[3], 0.0078125f);
  // Narrowing the widened values gives TensorFlow's bytes back.
  EXPECT_EQ(tf_tensor_narrow(*f16, TfDType::kHalf)->bytes, r->read("f16")->bytes);
  EXPECT_EQ(tf_tensor_narrow(*bf16, TfDType::kBFloat16)->bytes, r->read("bf16")->bytes);
  // And rounding from float32 as TensorFlow's casts do (1e30 -> bfloat16 0x714a).
  auto big = tf_tensor_narrow(Tensor::from_vector<float>({1e30f, 1.0f / 3}, {2}), TfDType::kBFloat16);
  EXPECT_EQ(big->bytes, std::string("\x4a\x71\xab\x3e", 4));
  auto i64 = tf_tensor_to_tensor(*r->read("i64"));
  EXPECT_EQ(i64->data<int64_t>()[0], 9007199254740993);
  auto flags = tf_tensor_to_tensor(*r->read("flags"));
  EXPECT_EQ(flags->dtype(), DType::kBool);
  EXPECT_TRUE(flags->data<bool>()[0]);
  EXPECT_FALSE(flags->data<bool>()[1]);
  auto step = tf_tensor_to_tensor(*r->read("global_step"));
  EXPECT_EQ(step->data<int64_t>()[0], 7);
}

TEST(TfCheckpointTest, ListsThePartitionedVariableAsItsThreeSlices) {
  auto r = TfCheckpointReader::open(kGolden + "/partitioned/model.ckpt-3");
  ASSERT_TRUE(r.ok()) << r.status();
  const TfEntryInfo* part = nullptr;
  for (const auto& e : r->entries())
    if (e.name == "part") part = &e;
  ASSERT_NE(part, nullptr);
  EXPECT_EQ(part->shape, (Shape{5, 2}));
  ASSERT_EQ(part->slices.size(), 3u);
  const std::vector<std::vector<TfExtent>> want = {{{0, 2}, {0, 2}}, {{2, 2}, {0, 2}}, {{4, 1}, {0, 2}}};
  EXPECT_EQ(part->slices, want);
  auto t = tf_tensor_to_tensor(*r->read("part"));
  ASSERT_TRUE(t.ok());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(t->data<float>()[i], i + 0.5f);
}

TEST(TfCheckpointTest, ReadsTheStateFiles) {
  auto latest = latest_tf_checkpoint(kGolden + "/sharded");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, kGolden + "/sharded/model.ckpt-5");
  auto st = read_tf_checkpoint_state(kGolden + "/plain");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->all_model_checkpoint_paths, std::vector<std::string>{"model.ckpt-7"});
  auto r = TfCheckpointReader::open(*latest);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->num_shards(), 3);

  TempDir dir;
  TfCheckpointState mine{"model.ckpt-9", {"model.ckpt-8", "model.ckpt-9"}};
  ASSERT_TRUE(write_tf_checkpoint_state(dir.path(), mine).ok());
  EXPECT_EQ(slurp(dir.file("checkpoint")),
            "model_checkpoint_path: \"model.ckpt-9\"\nall_model_checkpoint_paths: \"model.ckpt-8\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-9\"\n");
  EXPECT_EQ(*latest_tf_checkpoint(dir.path()), dir.path() + "/model.ckpt-9");
  dir.write("checkpoint", "model_checkpoint_path: model.ckpt-9\"\n");
  auto bad = read_tf_checkpoint_state(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kDataLoss);
  EXPECT_NE(bad.status().message().find(dir.file("checkpoint")), std::string::npos) << bad.status();
  EXPECT_EQ(read_tf_checkpoint_state(dir.path() + "/none").status().code(), Code::kNotFound);
}

// Re-writing TensorFlow's single-shard checkpoints with actorflow's writer gives TensorFlow's
// files byte for byte: the same index (header, entries, table layout) and the same data file.
TEST(TfCheckpointTest, RewritingTensorFlowsCheckpointGivesItsBytes) {
  for (const std::string prefix : {"plain/model.ckpt-7", "partitioned/model.ckpt-3"}) {
    auto r = TfCheckpointReader::open(kGolden + "/" + prefix);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<TfWriteItem> items;
    for (const TfEntryInfo& e : r->entries()) {
      auto t = r->read(e.name);
      ASSERT_TRUE(t.ok());
      if (e.slices.empty()) {
        items.push_back({e.name, *t, 0, {}, {}});
        continue;
      }
      // Cut the whole tensor back into its slices (row slices of a rank-2 tensor here).
      for (const auto& ext : e.slices) {
        TfTensor part{t->dtype, Shape{ext[0].length, e.shape.dim(1)}, {}};
        const size_t row = static_cast<size_t>(e.shape.dim(1)) * tf_dtype_size(t->dtype);
        part.bytes = t->bytes.substr(static_cast<size_t>(ext[0].start) * row, static_cast<size_t>(ext[0].length) * row);
        items.push_back({e.name, part, 0, e.shape, ext});
      }
    }
    TempDir dir;
    ASSERT_TRUE(write_tf_checkpoint(dir.file("out"), items).ok());
    EXPECT_EQ(slurp(dir.file("out.index")), slurp(kGolden + "/" + prefix + ".index")) << prefix;
    EXPECT_EQ(slurp(dir.file("out.data-00000-of-00001")), slurp(kGolden + "/" + prefix + ".data-00000-of-00001"))
        << prefix;
  }
}

TEST(TfCheckpointTest, WritesShardsAndSlicesAndReadsThemBack) {
  TempDir dir;
  std::vector<TfWriteItem> items;
  items.push_back({"w", *tf_tensor_from(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})), 1, {}, {}});
  items.push_back({"d", *tf_tensor_from(Tensor::from_vector<double>({-1.5, 2.25}, {2})), 0, {}, {}});
  items.push_back({"step", *tf_tensor_from(Tensor::scalar<int64_t>(42)), 0, {}, {}});
  items.push_back({"i", *tf_tensor_from(Tensor::from_vector<int32_t>({-7}, {1, 1})), 2, {}, {}});
  items.push_back({"b", *tf_tensor_from(Tensor::from_vector<bool>({true, false, true}, {3})), 1, {}, {}});
  items.push_back({"h", *tf_tensor_narrow(Tensor::from_vector<float>({0.5f, -2}, {2}), TfDType::kHalf), 2, {}, {}});
  items.push_back({"e", *tf_tensor_from(Tensor(DType::kFloat32, Shape{0, 4})), 0, {}, {}});
  // A [4,3] int64 variable in three column slices over two shards: columns [0,1), [1,3) and one
  // row-and-column slice pair.
  const Shape full{4, 3};
  auto part = [&](std::vector<TfExtent> ext, Shape s, std::vector<int64_t> v, int shard) {
    items.push_back({"p", *tf_tensor_from(Tensor::from_vector<int64_t>(v, s)), shard, full, ext});
  };
  part({{0, -1}, {0, 1}}, {4, 1}, {0, 3, 6, 9}, 0);
  part({{0, 2}, {1, 2}}, {2, 2}, {1, 2, 4, 5}, 1);
  part({{2, 2}, {1, 2}}, {2, 2}, {7, 8, 10, 11}, 2);
  ASSERT_TRUE(write_tf_checkpoint(dir.file("m"), items, 3).ok());
  for (int s = 0; s < 3; ++s)
    EXPECT_EQ(access(dir.file("m.data-0000" + std::to_string(s) + "-of-00003").c_str(), F_OK), 0);
  auto r = TfCheckpointReader::open(dir.file("m"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_shards(), 3);
  ASSERT_EQ(r->entries().size(), 8u);
  for (const TfWriteItem& it : items) {
    if (it.name == "p") continue;
    auto t = r->read(it.name);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->bytes, it.tensor.bytes) << it.name;
    EXPECT_EQ(t->shape, it.tensor.shape) << it.name;
    EXPECT_EQ(t->dtype, it.tensor.dtype) << it.name;
  }
  auto p = tf_tensor_to_tensor(*r->read("p"));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->shape(), full);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(p->data<int64_t>()[i], i);

  // Items that cannot make a checkpoint are refused, naming the tensor.
  auto refused = [&](std::vector<TfWriteItem> bad, const std::string& needle) {
    Status s = write_tf_checkpoint(dir.file("bad"), bad, 3);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s;
  };
  refused({{"x", items[0].tensor, 3, {}, {}}}, "\"x\": shard 3");
  refused({{"x", items[0].tensor, 0, {}, {}}, {"x", items[1].tensor, 0, {}, {}}}, "\"x\": written twice");
  TfTensor shortt = items[0].tensor;
  shortt.bytes.pop_back();
  refused({{"x", shortt, 0, {}, {}}}, "\"x\": 23 bytes");
  refused({items[7], items[8]}, "\"p\": slices hold 8 of 12");
  refused({items[7], items[8], items[8]}, "\"p\": written twice");
  EXPECT_EQ(access(dir.file("bad.index").c_str(), F_OK), -1);
  // An I/O error names the file and leaves no temporary file behind.
  const TfWriteItem one{"w", items[0].tensor, 0, {}, {}};
  Status s = write_tf_checkpoint(dir.file("missing/m"), {one});
  EXPECT_EQ(s.code(), Code::kUnavailable) << s;
  EXPECT_NE(s.message().find(dir.file("missing/m.data-00000-of-00001")), std::string::npos) << s;
  // The index cannot be renamed into place (a non-empty directory has its name): Unavailable
  // naming it, and no temporary file remains.
  ASSERT_EQ(::mkdir(dir.file("ro").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir.file("ro/m.index").c_str(), 0755), 0);
  dir.write("ro/m.index/keep", "x");
  s = write_tf_checkpoint(dir.file("ro/m"), {one});
  EXPECT_EQ(s.code(), Code::kUnavailable) << s;
  EXPECT_NE(s.message().find(dir.file("ro/m.index")), std::string::npos) << s;
  for (const auto& f : {"ro/m.data-00000-of-00001", "ro/m.index/keep"})
    EXPECT_EQ(access(dir.file(f).c_str(), F_OK), 0) << f;
  DIR* d = ::opendir(dir.file("ro").c_str());
  ASSERT_NE(d, nullptr);
  int files = 0;
  while (dirent* ent = ::readdir(d))
    if (ent->d_name[0] != '.') ++files;
  ::closedir(d);
  EXPECT_EQ(files, 2);  // m.index (the directory) and the data file: no temporary file
}

// CheckpointData with placement: one data file per place, in numeric task order (task:10 after
// task:2), each variable and its slots in its place's file, the global step (no variable) in the
// first; a partitioned variable and its Adam moments as slices of their full names with Adam's
// count the parts' largest plus the one part that differs; sharded = false: one data file.
TEST(TfCheckpointTest, CheckpointDataIsWrittenOneDataFilePerPlaceWithSlices) {
  TempDir dir;
  CheckpointData d;
  d.global_step = 9;
  d.variables["emb"] = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {5, 2});
  d.variables["w"] = Tensor::from_vector<double>({-1.5, 2.25}, {2});
  d.variables["n"] = Tensor::scalar<int32_t>(-7);
  const std::string t0 = "/job:ps/replica:0/task:0", t1 = "/job:ps/replica:0/task:1";
  const std::string t2 = "/job:ps/replica:0/task:2", t10 = "/job:ps/replica:0/task:10";
  d.placement["emb"].parts = {{"emb/part_0", 0, 3, t1}, {"emb/part_1", 3, 2, t0}};
  d.placement["w"].place = t10;
  d.placement["n"].place = t2;
  auto adam_slots = [](int64_t t, std::vector<float> m, std::vector<float> v, Shape s) {
    VariableSlotSet set;
    set.adam_t = t;
    set.at(SlotId::kAdamM) = Tensor::from_vector<float>(m, s);
    set.at(SlotId::kAdamV) = Tensor::from_vector<float>(v, s);
    return *encode_variable_slots(set, set.at(SlotId::kAdamM).bytes());
  };
  d.variables[slots_key("emb/part_0")] = adam_slots(3, {10, 11, 12, 13, 14, 15}, {20, 21, 22, 23, 24, 25}, {3, 2});
  d.variables[slots_key("emb/part_1")] = adam_slots(2, {16, 17, 18, 19}, {26, 27, 28, 29}, {2, 2});
  const std::string prefix = dir.file("model.ckpt-9");
  ASSERT_TRUE(write_checkpoint_data_as_tf(prefix, d).ok());
  auto r = TfCheckpointReader::open(prefix);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_shards(), 4);
  // task:0: emb rows 3..4, its two moments' rows (16 bytes each), the global step (8 bytes);
  // task:1: emb rows 0..2 and the moments' (24 bytes each) and emb/Adam_t; task:2: n; task:10: w.
  EXPECT_EQ(slurp(prefix + ".data-00000-of-00004").size(), 16u * 3 + 8 + 8);  // + emb/part_1/Adam_t
  EXPECT_EQ(slurp(prefix + ".data-00001-of-00004").size(), 24u * 3 + 8);
  EXPECT_EQ(slurp(prefix + ".data-00002-of-00004").size(), 4u);
  EXPECT_EQ(slurp(prefix + ".data-00003-of-00004").size(), 16u);
  std::map<std::string, TfEntryInfo> by_name;
  for (const TfEntryInfo& e : r->entries()) by_name[e.name] = e;
  const std::vector<std::vector<TfExtent>> rows{{{0, 3}, {0, 2}}, {{3, 2}, {0, 2}}};
  for (const std::string name : {"emb", "emb/Adam", "emb/Adam_1"}) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_EQ(by_name[name].shape, (Shape{5, 2})) << name;
    EXPECT_EQ(by_name[name].slices, rows) << name;
  }
  auto floats_of = [&](const std::string& name) {
    auto t = tf_tensor_to_tensor(*r->read(name));
    return std::vector<float>(t->data<float>(), t->data<float>() + t->num_elements());
  };
  EXPECT_EQ(floats_of("emb"), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(floats_of("emb/Adam"), (std::vector<float>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
  EXPECT_EQ(floats_of("emb/Adam_1"), (std::vector<float>{20, 21, 22, 23, 24, 25, 26, 27, 28, 29}));
  EXPECT_EQ(*tf_tensor_to_tensor(*r->read("emb/Adam_t"))->data<int64_t>(), 3);
  EXPECT_EQ(*tf_tensor_to_tensor(*r->read("emb/part_1/Adam_t"))->data<int64_t>(), 2);
  EXPECT_FALSE(by_name.count("emb/part_0/Adam_t"));
  // Read back: the whole variable with its slots folded (count from emb/Adam_t).
  auto back = read_tf_checkpoint_data(prefix);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->global_step, 9);
  auto slots = decode_variable_slots(back->variables.at(slots_key("emb")), DType::kFloat32, Shape{5, 2});
  ASSERT_TRUE(slots.ok()) << slots.status();
  EXPECT_EQ(slots->adam_t, 3);
  EXPECT_EQ(slots->at(SlotId::kAdamV).data<float>()[9], 29.0f);

  // One data file when asked, same entries.
  TfSaveOptions one;
  one.sharded = false;
  ASSERT_TRUE(write_checkpoint_data_as_tf(dir.file("one"), d, one).ok());
  auto r1 = TfCheckpointReader::open(dir.file("one"));
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(r1->num_shards(), 1);
  EXPECT_EQ(r1->entries().size(), r->entries().size());
  EXPECT_EQ(r1->read("emb")->bytes, r->read("emb")->bytes);

  // A slot only some parts hold is left out; parts that do not tile the rows: written whole.
  CheckpointData partial = d;
  partial.variables.erase(slots_key("emb/part_1"));
  partial.placement["w"].parts = {{"w/part_0", 0, 1, t0}};
  ASSERT_TRUE(write_checkpoint_data_as_tf(dir.file("partial"), partial).ok());
  auto rp = TfCheckpointReader::open(dir.file("partial"));
  ASSERT_TRUE(rp.ok()) << rp.status();
  std::set<std::string> names;
  for (const TfEntryInfo& e : rp->entries()) {
    names.insert(e.name);
    if (e.name == "w") {
      EXPECT_TRUE(e.slices.empty());
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"emb", "emb/Adam_t", "emb/part_1/Adam_t", "global_step", "n", "w"}));
  // Slots of neither a variable nor a part are refused, naming them.
  CheckpointData stray = d;
  stray.variables[slots_key("ghost")] = stray.variables.at(slots_key("emb/part_1"));
  Status st = write_checkpoint_data_as_tf(dir.file("stray"), stray);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("'ghost'"), std::string::npos) << st;
}

TEST(TfCheckpointTest, SliceKeysRoundTripForEveryEncodingLength) {
  std::vector<int64_t> values = {0,
                                 1,
                                 -1,
                                 63,
                                 64,
                                 -64,
                                 -65,
                                 8191,
                                 8192,
                                 -8193,
                                 int64_t{1} << 40,
                                 -(int64_t{1} << 40),
                                 (int64_t{1} << 55) - 1,
                                 int64_t{1} << 55,
                                 (int64_t{1} << 62) - 1,
                                 int64_t{1} << 62,
                                 std::numeric_limits<int64_t>::max(),
                                 std::numeric_limits<int64_t>::min()};
  std::string prev;
  for (int64_t v : values) {
    std::vector<TfExtent> ext = {{v, v < 0 ? 1 : v}, {v < 0 ? -v - 1 : 0, -1}};
    const std::string key = tf_slice_key(std::string("a\0b\xff", 4), ext);
    std::string name;
    std::vector<TfExtent> back;
    ASSERT_TRUE(tf_parse_slice_key(key, &name, &back).ok()) << v;
    EXPECT_EQ(name, std::string("a\0b\xff", 4));
    ext[1].start = 0;  // a full extent reads back as (0, -1)
    EXPECT_EQ(back, ext) << v;
  }
  // Ordered: keys of increasing starts sort in increasing order.
  for (int64_t v = -300; v < 300; ++v) {
    std::string k = tf_slice_key("n", {{v, 1}});
    if (v > -300) {
      EXPECT_LT(prev, k) << v;
    }
    prev = k;
  }
  std::string name;
  std::vector<TfExtent> ext;
  EXPECT_FALSE(tf_parse_slice_key(std::string("\0n\0\x01\x01\x01", 6), &name, &ext).ok());
  EXPECT_FALSE(tf_parse_slice_key(std::string("\0n", 2), &name, &ext).ok());
}

std::string hex(const std::string& b) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : b) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

// TensorFlow's own reader (tf.train.load_checkpoint, through tests/data/tf_ckpt/tf_read.py) reads
// a checkpoint actorflow wrote: every dtype, a partitioned variable, three shards, the state
// file; bit-identical values. Needs the project's .venv-tf (bench/tf_venv.sh); skipped without it.
TEST(TfCheckpointTest, TensorFlowReadsWhatActorflowWrites) {
  const std::string python = std::string(AF_SOURCE_DIR) + "/.venv-tf/bin/python";
  if (access(python.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << python << " (bench/tf_venv.sh makes it)";
  TempDir dir;
  std::vector<TfWriteItem> items;
  items.push_back({"f32", *tf_tensor_from(Tensor::from_vector<float>({1.5f, -0.1f, 3e38f, 0}, {2, 2})), 0, {}, {}});
  items.push_back({"f64", *tf_tensor_from(Tensor::from_vector<double>({1.0 / 3, -1e-300}, {2})), 1, {}, {}});
  items.push_back({"i32", *tf_tensor_from(Tensor::from_vector<int32_t>({-2147483647 - 1, 5}, {2})), 2, {}, {}});
  items.push_back({"scope/i64", *tf_tensor_from(Tensor::scalar<int64_t>(-9007199254740993)), 0, {}, {}});
  items.push_back({"flags", *tf_tensor_from(Tensor::from_vector<bool>({false, true}, {2, 1})), 1, {}, {}});
  items.push_back(
      {"f16", *tf_tensor_narrow(Tensor::from_vector<float>({0.1f, -65504, 1e-7f}, {3}), TfDType::kHalf), 2, {}, {}});
  items.push_back(
      {"bf16", *tf_tensor_narrow(Tensor::from_vector<float>({0.1f, -1e38f}, {2}), TfDType::kBFloat16), 0, {}, {}});
  const Shape full{3, 2};
  items.push_back(
      {"part", *tf_tensor_from(Tensor::from_vector<float>({0, 1, 2, 3}, {2, 2})), 1, full, {{0, 2}, {0, 2}}});
  items.push_back({"part", *tf_tensor_from(Tensor::from_vector<float>({4, 5}, {1, 2})), 2, full, {{2, 1}, {0, 2}}});
  // Column slices whose row extent is "everything" (no length in the proto, -1 in the key).
  const Shape cols{2, 3};
  items.push_back(
      {"colpart", *tf_tensor_from(Tensor::from_vector<int64_t>({0, 3}, {2, 1})), 0, cols, {{0, -1}, {0, 1}}});
  items.push_back(
      {"colpart", *tf_tensor_from(Tensor::from_vector<int64_t>({1, 2, 4, 5}, {2, 2})), 1, cols, {{0, -1}, {1, 2}}});
  ASSERT_TRUE(write_tf_checkpoint(dir.file("model.ckpt-11"), items, 3).ok());
  ASSERT_TRUE(write_tf_checkpoint_state(dir.path(), {"model.ckpt-11", {"model.ckpt-11"}}).ok());
  const std::string out = dir.file("tf.json");
  const std::string cmd = python + " " + AF_SOURCE_DIR + "/tests/data/tf_ckpt/tf_read.py " + dir.file("model.ckpt-11") +
                          " " + dir.path() + " > " + out + " 2> " + dir.file("tf.err");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(dir.file("tf.err"));
  const auto got = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(got["latest"].get<std::string>(), dir.file("model.ckpt-11"));
  ASSERT_EQ(got["tensors"].size(), 9u) << got.dump();
  for (const TfWriteItem& it : items) {
    const auto& v = got["tensors"][it.name];
    EXPECT_EQ(v["dtype"].get<std::string>(), tf_dtype_name(it.tensor.dtype)) << it.name;
    if (it.name == "part" || it.name == "colpart") continue;
    EXPECT_EQ(v["shape"].get<std::vector<int64_t>>(), it.tensor.shape.dims()) << it.name;
    EXPECT_EQ(v["hex"].get<std::string>(), hex(it.tensor.bytes)) << it.name;
  }
  EXPECT_EQ(got["tensors"]["part"]["shape"].get<std::vector<int64_t>>(), full.dims());
  EXPECT_EQ(got["tensors"]["part"]["hex"].get<std::string>(),
            hex(tf_tensor_from(Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, full))->bytes));
  EXPECT_EQ(got["tensors"]["colpart"]["shape"].get<std::vector<int64_t>>(), cols.dims());
  EXPECT_EQ(got["tensors"]["colpart"]["hex"].get<std::string>(),
            hex(tf_tensor_from(Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 5}, cols))->bytes));
}

// Debian's LevelDB reads TensorFlow's index tables, and writes the same bytes for the same
// entries (the writer uses it; docs/interop.md, "TensorFlow checkpoints").
TEST(TfCheckpointTest, DebiansLevelDbReadsTensorFlowsIndex) {
  for (const std::string prefix : {"plain/model.ckpt-7", "partitioned/model.ckpt-3", "sharded/model.ckpt-5"}) {
    const std::string path = kGolden + "/" + prefix + ".index";
    leveldb::Env* env = leveldb::Env::Default();
    uint64_t size = 0;
    ASSERT_TRUE(env->GetFileSize(path, &size).ok());
    leveldb::RandomAccessFile* raw = nullptr;
    ASSERT_TRUE(env->NewRandomAccessFile(path, &raw).ok());
    std::unique_ptr<leveldb::RandomAccessFile> file(raw);
    leveldb::Table* t = nullptr;
    leveldb::Options opt;
    ASSERT_TRUE(leveldb::Table::Open(opt, file.get(), size, &t).ok()) << prefix;
    std::unique_ptr<leveldb::Table> table(t);
    leveldb::ReadOptions ro;
    ro.verify_checksums = true;
    std::unique_ptr<leveldb::Iterator> it(table->NewIterator(ro));
    int n = 0;
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (n == 0) {
        EXPECT_TRUE(it->key().empty());
        actorflow::tf::BundleHeaderProto h;
        ASSERT_TRUE(h.ParseFromString(it->value().ToString()));
        EXPECT_GE(h.num_shards(), 1);
      }
      ++n;
    }
    EXPECT_TRUE(it->status().ok());
    EXPECT_GE(n, 4) << prefix;
  }
}

// Builds "<prefix>.index" from entries (header first) with valid table CRCs, so the reader's
// checks behind the CRCs are reached.
void build_index(const std::string& prefix, const std::string& header,
                 std::vector<std::pair<std::string, std::string>> entries) {
  std::sort(entries.begin(), entries.end());
  leveldb::WritableFile* raw = nullptr;
  ASSERT_TRUE(leveldb::Env::Default()->NewWritableFile(prefix + ".index", &raw).ok());
  std::unique_ptr<leveldb::WritableFile> out(raw);
  leveldb::Options opt;
  opt.compression = leveldb::kNoCompression;
  leveldb::TableBuilder b(opt, out.get());
  b.Add("", header);
  for (const auto& [k, v] : entries) b.Add(k, v);
  ASSERT_TRUE(b.Finish().ok());
  ASSERT_TRUE(out->Close().ok());
}

TEST(TfCheckpointTest, CorruptTruncatedAndLyingFilesAreClearErrors) {
  TempDir dir;
  const std::string p = dir.file("m");
  ASSERT_TRUE(
      write_tf_checkpoint(p, {{"w", *tf_tensor_from(Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2})), 0, {}, {}}})
          .ok());
  const std::string index = slurp(p + ".index"), data = slurp(p + ".data-00000-of-00001");
  auto expect_error = [&](Code code, const std::string& needle, const std::string& name = "w") {
    auto r = TfCheckpointReader::open(p);
    Status s = r.ok() ? r->read(name).status() : r.status();
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s;
  };
  // Truncated index at every length; a flipped byte anywhere.
  for (size_t n = 0; n < index.size(); ++n) {
    spit(p + ".index", index.substr(0, n));
    auto r = TfCheckpointReader::open(p);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << n;
    EXPECT_NE(r.status().message().find(p + ".index"), std::string::npos) << r.status();
  }
  for (size_t i = 0; i < index.size(); ++i) {
    std::string b = index;
    b[i] ^= 0x10;
    spit(p + ".index", b);
    auto r = TfCheckpointReader::open(p);
    if (r.ok())
      EXPECT_TRUE(r->read("w").ok()) << i;  // only padding bytes may change harmlessly
    else
      EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status();
  }
  spit(p + ".index", index);
  // Data file: truncated, flipped, missing.
  spit(p + ".data-00000-of-00001", data.substr(0, 15));
  expect_error(Code::kDataLoss, "lie past the end of " + p + ".data-00000-of-00001");
  std::string flipped = data;
  flipped[3] ^= 1;
  spit(p + ".data-00000-of-00001", flipped);
  expect_error(Code::kDataLoss, "tensor \"w\": CRC-32C mismatch in " + p + ".data-00000-of-00001");
  ::unlink((p + ".data-00000-of-00001").c_str());
  expect_error(Code::kDataLoss, "cannot open data file");
  spit(p + ".data-00000-of-00001", data);
  expect_error(Code::kNotFound, "no tensor \"nope\"", "nope");

  // Lying entries behind valid table CRCs.
  actorflow::tf::BundleHeaderProto header;
  header.set_num_shards(1);
  auto entry = [](int dtype, std::vector<int64_t> dims, int shard, int64_t offset, int64_t size) {
    actorflow::tf::BundleEntryProto e;
    e.set_dtype(static_cast<actorflow::tf::DataType>(dtype));
    for (int64_t d : dims) e.mutable_shape()->add_dim()->set_size(d);
    e.set_shard_id(shard);
    e.set_offset(offset);
    e.set_size(size);
    return e;
  };
  auto lie = [&](const actorflow::tf::BundleEntryProto& e, Code code, const std::string& needle,
                 std::vector<std::pair<std::string, std::string>> more = {}) {
    more.insert(more.begin(), {"w", e.SerializeAsString()});
    build_index(p, header.SerializeAsString(), more);
    expect_error(code, needle);
  };
  lie(entry(1, {2, 2}, 0, 0, 15), Code::kDataLoss,
      "entry \"w\": size 15 bytes does not match a float32 tensor of shape [2,2]");
  lie(entry(1, {2, 2}, 1, 0, 16), Code::kDataLoss, "entry \"w\": shard 1 outside [0, 1)");
  lie(entry(1, {2, 2}, 0, 8, 16), Code::kDataLoss, "lie past the end of");
  lie(entry(1, {2, -2}, 0, 0, 16), Code::kDataLoss, "shape has dimension -2");
  lie(entry(1, {int64_t{1} << 62, 4}, 0, 0, 16), Code::kDataLoss, "is not a valid tensor shape");
  lie(entry(1, {int64_t{1} << 40, 4}, 0, 0, int64_t{1} << 44), Code::kDataLoss, "lie past the end of");
  lie(entry(7, {2}, 0, 0, 2), Code::kUnimplemented, "dtype DT_STRING is not supported");
  lie(entry(1, {2, 2}, 0, -4, 16), Code::kDataLoss, "negative offset or size");
  lie(entry(1, {2, 2}, 0, std::numeric_limits<int64_t>::max(), 16), Code::kDataLoss, "offset + size overflows");
  {
    auto e = entry(1, {2, 2}, 0, 0, 16);
    e.set_crc32c(1);
    lie(e, Code::kDataLoss, "CRC-32C mismatch");
  }
  // Partitioned: a huge tensor whose one slice claims everything; overlapping slices; missing
  // slice entries; a slice outside the shape.
  auto sliced = [&](std::vector<int64_t> dims, std::vector<std::vector<TfExtent>> slices) {
    auto e = entry(1, dims, 0, 0, 0);
    for (const auto& s : slices) {
      auto* ps = e.add_slices();
      for (const auto& x : s) {
        auto* px = ps->add_extent();
        px->set_start(x.start);
        if (x.length >= 0) px->set_length(x.length);
      }
    }
    return e;
  };
  lie(sliced({int64_t{1} << 40}, {{{0, int64_t{1} << 40}}}), Code::kDataLoss, "are not in data file",
      {{tf_slice_key("w", {{0, int64_t{1} << 40}}),
        entry(1, {int64_t{1} << 40}, 0, 0, int64_t{1} << 42).SerializeAsString()}});
  {
    auto s0 = entry(1, {2}, 0, 0, 8);
    s0.set_crc32c(actorflow::crc32c_masked(actorflow::crc32c(data.data(), 8)));
    lie(sliced({4}, {{{0, 2}}, {{0, 2}}}), Code::kDataLoss, "slice 1 overlaps another",
        {{tf_slice_key("w", {{0, 2}}), s0.SerializeAsString()}});
  }
  {  // two slices reading the same 16 bytes: together more than the 16-byte file holds
    auto s = entry(1, {4}, 0, 0, 16);
    s.set_crc32c(actorflow::crc32c_masked(actorflow::crc32c(data.data(), 16)));
    lie(sliced({8}, {{{0, 4}}, {{4, 4}}}), Code::kDataLoss, "hold more bytes than the file (16)",
        {{tf_slice_key("w", {{0, 4}}), s.SerializeAsString()}, {tf_slice_key("w", {{4, 4}}), s.SerializeAsString()}});
  }
  lie(sliced({4}, {{{0, 2}}, {{2, 2}}}), Code::kDataLoss, "a listed slice has no entry");
  lie(sliced({4}, {{{3, 2}}}), Code::kDataLoss, "outside dimension 0 of [4]");
  lie(sliced({4}, {{{0, 4}}}), Code::kDataLoss, "slice entry is float32 [2], expected float32 [4]",
      {{tf_slice_key("w", {{0, 4}}), entry(1, {2}, 0, 0, 8).SerializeAsString()}});
  // Header lies.
  header.set_num_shards(0);
  lie(entry(1, {2, 2}, 0, 0, 16), Code::kDataLoss, "num_shards 0 outside [1, 100000]");
  header.set_num_shards(1);
  header.set_endianness(actorflow::tf::BundleHeaderProto::BIG);
  lie(entry(1, {2, 2}, 0, 0, 16), Code::kUnimplemented, "is big-endian");
}

// An index whose data block handle claims 100 GB, or 2^64-3 bytes (so offset + size + trailer
// wraps), under a valid CRC (tests/data/tf_ckpt/lying/lie.py): Debian's leveldb::Table aborts
// or crashes on these; the reader names the file and the block.
TEST(TfCheckpointTest, LyingBlockHandlesAreDataLoss) {
  TempDir dir;
  for (const std::string name : {"handle_100g", "handle_wrap"}) {
    spit(dir.file(name + ".index"), slurp(kGolden + "/lying/" + name + ".index"));
    auto r = TfCheckpointReader::open(dir.file(name));
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status();
    EXPECT_NE(r.status().message().find(dir.file(name) + ".index data block at offset 0: block [0, +"),
              std::string::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("lies outside the file"), std::string::npos) << r.status();
  }
}

// Prefix compression lets a small index spell huge keys: 20 000 keys sharing a 64 KiB prefix
// (one restart point) are a 1.4 MB file but 1.3 GB of keys. The reader bounds what it
// materialises and says so, instead of allocating it.
TEST(TfCheckpointTest, KeysExpandingFarBeyondTheIndexAreDataLoss) {
  TempDir dir;
  const std::string p = dir.file("m");
  {
    leveldb::WritableFile* raw = nullptr;
    ASSERT_TRUE(leveldb::Env::Default()->NewWritableFile(p + ".index", &raw).ok());
    std::unique_ptr<leveldb::WritableFile> out(raw);
    leveldb::Options opt;
    opt.compression = leveldb::kNoCompression;
    opt.block_restart_interval = 1 << 30;
    opt.block_size = 1 << 30;
    leveldb::TableBuilder b(opt, out.get());
    actorflow::tf::BundleHeaderProto h;
    h.set_num_shards(1);
    b.Add("", h.SerializeAsString());
    const std::string prefix(64 << 10, 'k');
    char suffix[16];
    for (int i = 0; i < 20000; ++i) {
      std::snprintf(suffix, sizeof suffix, "%08d", i);
      b.Add(prefix + suffix, "");
    }
    ASSERT_TRUE(b.Finish().ok());
    ASSERT_TRUE(out->Close().ok());
  }
  struct stat st;
  ASSERT_EQ(stat((p + ".index").c_str(), &st), 0);
  EXPECT_LT(st.st_size, 2 << 20);
  auto r = TfCheckpointReader::open(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find(p + ".index"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("expand"), std::string::npos) << r.status();
}

// Seeded mutation fuzzing: the index's bytes (stopped by CRCs mostly) and, behind valid CRCs,
// the entries' protobuf bytes. Never a crash or an escaping exception; every error names the
// checkpoint; decoded tensors are never larger than the data file.
TEST(TfCheckpointTest, FuzzedIndexesAreErrorsOrBoundedTensors) {
  TempDir dir;
  const std::string p = dir.file("m");
  std::vector<TfWriteItem> items;
  items.push_back({"w", *tf_tensor_from(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})), 0, {}, {}});
  items.push_back({"b", *tf_tensor_from(Tensor::from_vector<bool>({true, false}, {2})), 0, {}, {}});
  items.push_back(
      {"p", *tf_tensor_from(Tensor::from_vector<double>({1, 2}, {1, 2})), 0, Shape{2, 2}, {{0, 1}, {0, -1}}});
  items.push_back(
      {"p", *tf_tensor_from(Tensor::from_vector<double>({3, 4}, {1, 2})), 0, Shape{2, 2}, {{1, 1}, {0, -1}}});
  ASSERT_TRUE(write_tf_checkpoint(p, items).ok());
  const std::string index = slurp(p + ".index");
  const size_t data_size = slurp(p + ".data-00000-of-00001").size();
  // The table's entries, for rebuilding with valid CRCs.
  std::vector<std::pair<std::string, std::string>> kv;
  {
    leveldb::RandomAccessFile* raw = nullptr;
    ASSERT_TRUE(leveldb::Env::Default()->NewRandomAccessFile(p + ".index", &raw).ok());
    std::unique_ptr<leveldb::RandomAccessFile> file(raw);
    leveldb::Table* t = nullptr;
    ASSERT_TRUE(leveldb::Table::Open(leveldb::Options(), file.get(), index.size(), &t).ok());
    std::unique_ptr<leveldb::Table> table(t);
    std::unique_ptr<leveldb::Iterator> it(table->NewIterator(leveldb::ReadOptions()));
    for (it->SeekToFirst(); it->Valid(); it->Next()) kv.emplace_back(it->key().ToString(), it->value().ToString());
  }
  ASSERT_EQ(kv.size(), 6u);
  std::vector<std::string> corpus;
  for (const auto& e : kv) corpus.push_back(e.second);
  std::mt19937_64 rng(34);
  const int cases = 2000;
  int opened = 0, read = 0;
  for (int i = 0; i < cases; ++i) {
    if (i % 2) {
      spit(p + ".index", testing::mutate(index, {index}, rng));
    } else {
      auto m = kv;
      const size_t k = rng() % m.size();
      m[k].second = testing::mutate(m[k].second, corpus, rng);
      if (rng() % 8 == 0) m[k].first = testing::mutate(m[k].first, {m[k].first}, rng);
      std::sort(m.begin() + 1, m.end());
      m.erase(std::unique(m.begin() + 1, m.end(), [](auto& a, auto& b) { return a.first == b.first; }), m.end());
      if (m[1].first.empty()) continue;
      build_index(p, m[0].second, {m.begin() + 1, m.end()});
    }
    auto r = TfCheckpointReader::open(p);
    if (!r.ok()) {
      ASSERT_NE(r.status().message().find(p), std::string::npos) << "case " << i << ": " << r.status();
      continue;
    }
    ++opened;
    for (const auto& e : r->entries()) {
      auto t = r->read(e.name);
      if (!t.ok()) {
        ASSERT_NE(t.status().message().find(p), std::string::npos) << "case " << i << ": " << t.status();
        continue;
      }
      ++read;
      ASSERT_LE(t->bytes.size(), data_size) << "case " << i;
    }
  }
  std::printf("tf checkpoint indexes: %d cases, %d opened, %d tensors read\n", cases, opened, read);
  EXPECT_GT(opened, 0);
}

}  // namespace
}  // namespace actorflow
