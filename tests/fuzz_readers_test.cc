// Seeded mutation fuzzing of the readers of files users and peers hand us: TOML cluster files,
// fault plans, checkpoints, IDX files (plain and gzip), GraphDefs, rendezvous keys, TensorFlow
// checkpoints and TensorFlow GraphDefs (import_graph_def). 100 000 cases each (TensorFlow
// GraphDefs: 20 000), from valid inputs; never a crash, an abort or an escaping exception, and
// decoded tensors never larger than the input that declared and carried them (IDX gzip: than
// what DEFLATE can expand the input to). Fixed seeds: a failure names its case and reproduces.
#include <gtest/gtest.h>
#include <leveldb/env.h>
#include <leveldb/iterator.h>
#include <leveldb/options.h>
#include <leveldb/table.h>
#include <leveldb/table_builder.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "actors/faults.h"
#include "config/cluster.h"
#include "data/checkpoint.h"
#include "data/crc32c.h"
#include "data/idx.h"
#include "data/tf/tf_checkpoint.h"
#include "device/rendezvous_key.h"
#include "graph/graph_def.h"
#include "graph/ops.h"
#include "graph/tf/tf_import.h"
#include "proto/tf/graph.pb.h"
#include "tests/util/fuzz.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using testing::mutate;
using testing::TempDir;
constexpr int kCases = 100000;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(FuzzReadersTest, ClusterFiles) {
  const std::vector<std::string> corpus = {
      "[cluster]\nname = \"mnist\"\n\n[jobs]\nps = [\"localhost:2222\"]\nworker = [\"localhost:2223\", "
      "\"localhost:2224\"]\n\n[server]\nallow_growth = true\ngpu_memory_fraction = 0.2\nvisible_devices = \"0,1\"\n"
      "bind = \"127.0.0.1\"\n\n[tasks.\"worker/1\"]\ncpu_devices = 2\n\n[supervisor]\nchief = \"worker/0\"\n"
      "save_checkpoint_secs = 60\nkeep_checkpoints = 5\n",
      "[jobs]\nworker = { 0 = \"127.0.0.1:1\", 7 = \"[::1]:2\" }\n[server]\nheartbeat_interval_ms = 100\n"
      "peer_timeout_ms = 900\n"};
  std::mt19937_64 rng(1);
  const auto t0 = std::chrono::steady_clock::now();
  int ok = 0;
  for (int i = 0; i < kCases; ++i) {
    const std::string in = mutate(corpus[rng() % corpus.size()], corpus, rng);
    auto r = ClusterSpec::from_string(in, "fuzz.toml");
    if (r.ok()) ++ok;
    else ASSERT_FALSE(r.status().message().empty()) << "case " << i;
  }
  std::printf("cluster files: %d cases (%d valid) in %.2f s\n", kCases, ok, seconds_since(t0));
  EXPECT_GT(ok, 0);
}

TEST(FuzzReadersTest, FaultPlans) {
  const std::vector<std::string> corpus = {
      "seed = 7\n\n[[fault]]\nkind = \"kill\"\ntask = \"worker/1\"\nat_step = 150\n\n[[fault]]\nkind = \"delay\"\n"
      "src = \"worker/0\"\ndst = \"ps/0\"\ndelay_ms = 20\nprobability = 0.5\nafter_secs = 2\nduration_secs = 3\n",
      "seed = 1\n[[fault]]\nkind = \"partition\"\ntasks_a = [\"worker/0\"]\ntasks_b = [\"ps/0\"]\n"
      "duration_secs = 5\njitter_secs = 1\n"};
  std::mt19937_64 rng(2);
  const auto t0 = std::chrono::steady_clock::now();
  int ok = 0;
  for (int i = 0; i < kCases; ++i) {
    const std::string in = mutate(corpus[rng() % corpus.size()], corpus, rng);
    auto r = FaultPlan::parse(in, "fuzz.toml");
    if (!r.ok()) continue;
    ++ok;
    for (const auto& f : r->faults) {
      if (f.after_secs) { ASSERT_LE(*f.after_secs, kMaxFaultSecs) << "case " << i; }
      if (f.duration_secs) { ASSERT_LE(*f.duration_secs, kMaxFaultSecs) << "case " << i; }
    }
  }
  std::printf("fault plans: %d cases (%d valid) in %.2f s\n", kCases, ok, seconds_since(t0));
  EXPECT_GT(ok, 0);
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(FuzzReadersTest, Checkpoints) {
  TempDir dir;
  std::vector<std::string> corpus;
  {
    CheckpointData d;
    d.global_step = 42;
    d.variables["w"] = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    d.variables["b"] = Tensor::from_vector<bool>({true, false}, {2});
    d.variables["step"] = Tensor::scalar<int64_t>(42);
    d.placement["w"].parts = {{"w/part_0", 0, 1, "/job:ps/replica:0/task:0"}, {"w/part_1", 1, 1, "/job:ps/replica:0/task:1"}};
    d.placement["b"].place = "/job:ps/replica:0/task:1";
    ASSERT_TRUE(write_checkpoint(dir.path() + "/a", d).ok());
    corpus.push_back(file_bytes(dir.path() + "/a"));
    CheckpointData e;
    e.global_step = 0;
    e.variables["empty"] = Tensor(DType::kFloat32, Shape{0, 3});
    ASSERT_TRUE(write_checkpoint(dir.path() + "/b", e).ok());
    corpus.push_back(file_bytes(dir.path() + "/b"));
  }
  // The checksum stops almost every mutation at once; also fuzz behind it by resealing half of
  // the cases, so the decoder itself sees mutated bodies with a matching checksum.
  auto reseal = [](std::string& b) {
    if (b.size() < 6) return;
    const size_t body = b.size() - 5;
    b[body] = static_cast<char>(0xce);
    const uint32_t c = crc32c(b.data(), body);
    for (int k = 0; k < 4; ++k) b[body + 1 + k] = static_cast<char>(c >> (24 - 8 * k));
  };
  std::mt19937_64 rng(3);
  const auto t0 = std::chrono::steady_clock::now();
  int ok = 0;
  for (int i = 0; i < kCases; ++i) {
    std::string in = mutate(corpus[rng() % corpus.size()], corpus, rng);
    if (i % 2) reseal(in);
    auto r = decode_checkpoint(in, "fuzz");
    if (!r.ok()) continue;
    ++ok;
    ASSERT_GE(r->global_step, 0) << "case " << i;
    for (const auto& [name, t] : r->variables) ASSERT_LE(t.bytes(), in.size()) << "case " << i << " " << name;
    for (const auto& [name, pl] : r->placement) ASSERT_LE(pl.parts.size(), in.size()) << "case " << i << " " << name;
  }
  std::printf("checkpoints: %d cases (%d valid) in %.2f s\n", kCases, ok, seconds_since(t0));
  EXPECT_GT(ok, 0);
}

TEST(FuzzReadersTest, IdxFiles) {
  TempDir dir;
  std::vector<std::string> corpus;
  const Tensor images = Tensor::from_vector<uint8_t>(std::vector<uint8_t>(2 * 4 * 4, 7), {2, 4, 4});
  const Tensor floats = Tensor::from_vector<float>({1.5f, -2.f, 3.f}, {3});
  for (bool gz : {false, true}) {
    for (const Tensor* t : {&images, &floats}) {
      const std::string p = dir.path() + "/seed" + std::to_string(corpus.size());
      ASSERT_TRUE(write_idx(p, *t, gz).ok());
      corpus.push_back(file_bytes(p));
    }
  }
  // One file rewritten per case: on /dev/shm when there is one (the disk makes this 10x slower).
  const bool shm = ::access("/dev/shm", W_OK) == 0;
  const std::string path = shm ? "/dev/shm/actorflow-fuzz-idx-" + std::to_string(::getpid()) : dir.path() + "/case";
  struct Remove {
    std::string p;
    ~Remove() { std::remove(p.c_str()); }
  } remove_case{path};
  std::mt19937_64 rng(4);
  const auto t0 = std::chrono::steady_clock::now();
  int ok = 0;
  for (int i = 0; i < kCases; ++i) {
    const std::string in = mutate(corpus[rng() % corpus.size()], corpus, rng);
    {
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      f.write(in.data(), static_cast<std::streamsize>(in.size()));
    }
    auto r = read_idx(path);
    if (!r.ok()) continue;
    ++ok;
    const bool gz = in.size() >= 2 && static_cast<unsigned char>(in[0]) == 0x1f && static_cast<unsigned char>(in[1]) == 0x8b;
    ASSERT_LE(r->bytes(), gz ? 1032 * (in.size() + 1024) : in.size()) << "case " << i;
  }
  std::printf("IDX files: %d cases (%d valid) in %.2f s\n", kCases, ok, seconds_since(t0));
  EXPECT_GT(ok, 0);
}

// A LevelDB WritableFile appending to a string (tables built in memory).
class StringSink : public leveldb::WritableFile {
 public:
  leveldb::Status Append(const leveldb::Slice& d) override {
    out.append(d.data(), d.size());
    return leveldb::Status::OK();
  }
  leveldb::Status Close() override { return leveldb::Status::OK(); }
  leveldb::Status Flush() override { return leveldb::Status::OK(); }
  leveldb::Status Sync() override { return leveldb::Status::OK(); }
  std::string out;
};

// TensorFlow's golden checkpoints (tests/data/tf_ckpt/): their .index bytes mutated, and in half of
// the cases one entry's key or protobuf value mutated and the table rebuilt with valid CRCs, so
// the checks behind the CRCs see hostile entries; every tensor of an index that opens is read
// from the golden data files. Never a crash; every error names the checkpoint; no tensor larger
// than the checkpoint's data files.
TEST(FuzzReadersTest, TensorFlowCheckpoints) {
  const std::string golden = std::string(AF_SOURCE_DIR) + "/tests/data/tf_ckpt/";
  struct Seed {
    std::string prefix, index;
    std::vector<std::pair<std::string, std::string>> kv;
    uint64_t data_bytes = 0;
  };
  std::vector<Seed> seeds;
  std::vector<std::string> corpus;
  for (const std::string p : {"plain/model.ckpt-7", "partitioned/model.ckpt-3", "sharded/model.ckpt-5"}) {
    Seed s;
    s.prefix = golden + p;
    s.index = file_bytes(s.prefix + ".index");
    leveldb::RandomAccessFile* raw = nullptr;
    ASSERT_TRUE(leveldb::Env::Default()->NewRandomAccessFile(s.prefix + ".index", &raw).ok());
    std::unique_ptr<leveldb::RandomAccessFile> file(raw);
    leveldb::Table* t = nullptr;
    ASSERT_TRUE(leveldb::Table::Open(leveldb::Options(), file.get(), s.index.size(), &t).ok());
    std::unique_ptr<leveldb::Table> table(t);
    std::unique_ptr<leveldb::Iterator> it(table->NewIterator(leveldb::ReadOptions()));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      s.kv.emplace_back(it->key().ToString(), it->value().ToString());
      corpus.push_back(s.kv.back().second);
    }
    auto r = TfCheckpointReader::open(s.prefix);
    ASSERT_TRUE(r.ok()) << r.status();
    for (int k = 0; k < r->num_shards(); ++k) {
      char name[64];
      std::snprintf(name, sizeof name, ".data-%05d-of-%05d", k, r->num_shards());
      s.data_bytes += file_bytes(s.prefix + name).size();
    }
    corpus.push_back(s.index);
    seeds.push_back(std::move(s));
  }
  leveldb::Options opt;
  opt.compression = leveldb::kNoCompression;
  std::mt19937_64 rng(5);
  const auto t0 = std::chrono::steady_clock::now();
  int opened = 0, read = 0;
  for (int i = 0; i < kCases; ++i) {
    const Seed& seed = seeds[rng() % seeds.size()];
    std::string in;
    if (i % 2) {
      in = mutate(seed.index, corpus, rng);
    } else {
      auto kv = seed.kv;
      auto& e = kv[rng() % kv.size()];
      if (rng() % 4 == 0) e.first = mutate(e.first, corpus, rng);
      else e.second = mutate(e.second, corpus, rng);
      std::sort(kv.begin(), kv.end());
      kv.erase(std::unique(kv.begin(), kv.end(), [](auto& a, auto& b) { return a.first == b.first; }), kv.end());
      StringSink sink;
      leveldb::TableBuilder b(opt, &sink);
      for (const auto& [k, v] : kv) b.Add(k, v);
      ASSERT_TRUE(b.Finish().ok());
      in = std::move(sink.out);
    }
    auto r = TfCheckpointReader::from_index(in, seed.prefix);
    if (!r.ok()) {
      ASSERT_NE(r.status().message().find(seed.prefix), std::string::npos) << "case " << i << ": " << r.status();
      continue;
    }
    ++opened;
    for (const auto& e : r->entries()) {
      auto t = r->read(e.name);
      if (!t.ok()) {
        ASSERT_NE(t.status().message().find(seed.prefix), std::string::npos) << "case " << i << ": " << t.status();
        continue;
      }
      ++read;
      ASSERT_LE(t->bytes.size(), seed.data_bytes) << "case " << i << " " << e.name;
    }
  }
  std::printf("TensorFlow checkpoints: %d cases (%d opened, %d tensors read) in %.2f s\n", kCases, opened, read,
              seconds_since(t0));
  EXPECT_GT(opened, 0);
}

TEST(FuzzReadersTest, GraphDefs) {
  std::vector<std::string> corpus;
  {
    Scope root = Scope::root();
    auto a = ops::constant(root, {1.f, 2, 3, 4, 5, 6}, {2, 3}, "a");
    auto b = ops::constant(root, {1.f, 2, 3, 4, 5, 6}, {3, 2}, "b");
    auto c = ops::matmul(root.with_device("/job:worker/task:1"), a, b);
    ops::add(root, c, ops::log(root, ops::add(root, 100.f, c)));
    corpus.push_back(serialize_graph(*root.graph()));
  }
  std::mt19937_64 rng(5);
  const auto t0 = std::chrono::steady_clock::now();
  int ok = 0;
  for (int i = 0; i < kCases; ++i) {
    const std::string in = mutate(corpus[rng() % corpus.size()], corpus, rng);
    auto r = deserialize_graph(in);
    if (r.ok()) ++ok;
  }
  std::printf("GraphDefs: %d cases (%d valid) in %.2f s\n", kCases, ok, seconds_since(t0));
  EXPECT_GT(ok, 0);
}

// Rendezvous keys as a peer's frames carry them (device/rendezvous_key.h): a key that parses
// holds non-empty fields, writes back to the same bytes, and is within the length bound; a
// refused one says why, in a bounded message.
TEST(FuzzReadersTest, RendezvousKeys) {
  const std::string src = "/job:worker/replica:0/task:1/device:CPU:0", dst = "/job:ps/replica:0/task:0/device:CPU:0";
  const std::vector<std::string> corpus = {src + ";" + dst + ";gradients/MatMul_grad/MatMul:0",
                                           src + ";00f00dfeedbeef01;" + dst + ";^init",
                                           "/job:a/task:0/cpu:0;/job:b/task:3/gpu:1;x:0"};
  std::mt19937_64 rng(8);
  const auto t0 = std::chrono::steady_clock::now();
  int ok = 0;
  for (int i = 0; i < kCases; ++i) {
    const std::string in = mutate(corpus[rng() % corpus.size()], corpus, rng);
    auto r = RendezvousKey::parse(in);
    if (r.ok()) {
      ++ok;
      ASSERT_EQ(r->wire(), in) << "case " << i;
      ASSERT_LE(in.size(), RendezvousKey::kMaxWireBytes) << "case " << i;
      ASSERT_FALSE(r->src_device().empty() || r->dst_device().empty() || r->edge().empty()) << "case " << i;
      auto again = RendezvousKey::make(r->src_device(), r->src_incarnation(), r->dst_device(), r->edge());
      ASSERT_TRUE(again.ok()) << "case " << i << ": " << again.status();
      ASSERT_EQ(*again, *r) << "case " << i;
    } else {
      ASSERT_FALSE(r.status().message().empty()) << "case " << i;
      ASSERT_LT(r.status().message().size(), 1024u) << "case " << i;
    }
  }
  std::printf("rendezvous keys: %d cases (%d valid) in %.2f s\n", kCases, ok, seconds_since(t0));
  EXPECT_GT(ok, 0);
}

// TensorFlow's golden GraphDefs (tests/data/tf_graph/) imported after mutation: half the cases
// mutate the file's bytes (binary and text), half parse it and change one node (its op swapped
// for another seen op, one input, device or attribute value's bytes mutated, or the node dropped)
// and serialise it again, so the importer itself sees well-formed protobuf with wrong content.
// Never a crash; every error names the source and leaves the graph empty.
TEST(FuzzReadersTest, TensorFlowGraphDefs) {
  const std::string dir = std::string(AF_SOURCE_DIR) + "/tests/data/tf_graph/";
  auto slurp = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  std::vector<std::string> corpus, binary;
  for (const char* f : {"mlp_forward.pb", "mlp_train_ref_adagrad.pb", "cnn_train_ref_momentum.pb", "mlp_train_saver_adam.pb",
                        "dynamic_batch.pb", "dynamic_train_resource_adam.pb", "mlp_train_saver_sharded.pb",
                        "ftrl_v2_resource.pb", "tf1_15/dynamic_train_ref_adam.pb"})
    binary.push_back(slurp(dir + f));
  corpus = binary;
  corpus.push_back(slurp(dir + "mlp_forward.pbtxt"));
  corpus.push_back(slurp(dir + "half_consts.pbtxt"));
  for (const auto& c : corpus) ASSERT_GT(c.size(), 1000u);
  std::vector<std::string> ops;
  {
    actorflow::tf::GraphDef d;
    ASSERT_TRUE(d.ParseFromString(binary[2]));
    for (const auto& n : d.node()) ops.push_back(n.op());
  }
  // 20 000 cases take about 45 s in the plain build; a sanitized build runs fewer of the same
  // seeded sequence (its slowdown() is 4, and it runs this code about ten times slower).
  const int cases = static_cast<int>(20000 / testing::slowdown());
  std::mt19937_64 rng(34);
  const auto t0 = std::chrono::steady_clock::now();
  int imported = 0;
  for (int i = 0; i < cases; ++i) {
    std::string in;
    if (rng() % 2 == 0) {
      in = mutate(corpus[rng() % corpus.size()], corpus, rng);
    } else {
      actorflow::tf::GraphDef d;
      ASSERT_TRUE(d.ParseFromString(binary[rng() % binary.size()]));
      auto* n = d.mutable_node(static_cast<int>(rng() % static_cast<uint64_t>(d.node_size())));
      switch (rng() % 5) {
        case 0: n->set_op(ops[rng() % ops.size()]); break;
        case 1:
          if (n->input_size() > 0) {
            const int k = static_cast<int>(rng() % static_cast<uint64_t>(n->input_size()));
            n->set_input(k, mutate(n->input(k), corpus, rng));
          }
          break;
        case 2: n->set_device(mutate(n->device(), corpus, rng)); break;
        case 3:
          if (n->attr_size() > 0) {
            auto* e = n->mutable_attr(static_cast<int>(rng() % static_cast<uint64_t>(n->attr_size())));
            actorflow::tf::AttrValue v;
            if (v.ParseFromString(mutate(e->value().SerializeAsString(), corpus, rng))) *e->mutable_value() = v;
          }
          break;
        default:
          d.mutable_node()->DeleteSubrange(static_cast<int>(rng() % static_cast<uint64_t>(d.node_size())), 1);
          break;
      }
      in = d.SerializeAsString();
    }
    Scope root = Scope::root();
    auto r = import_graph_def(root, in, {}, "case.pb");
    if (r.ok()) {
      ++imported;
      ASSERT_EQ(r->nodes.empty(), root.graph()->num_nodes() == 0) << "case " << i;
    } else {
      ASSERT_NE(r.status().message().find("case.pb"), std::string::npos) << "case " << i << ": " << r.status();
      ASSERT_EQ(root.graph()->num_nodes(), 0) << "case " << i;
    }
  }
  std::printf("TensorFlow GraphDefs: %d cases (%d imported) in %.2f s\n", cases, imported, seconds_since(t0));
  EXPECT_GT(imported, 0);
}

}  // namespace
}  // namespace actorflow
