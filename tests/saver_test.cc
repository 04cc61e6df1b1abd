// train::Saver and train::latest_checkpoint (<actorflow/saver.h>) on a local server with the
// variables on a second device: exact round trips, var_list subsets, max_to_keep pruning (the
// exact file set), latest_checkpoint over corrupt files, restore errors; and the real
// `actorflow ckpt list|show` binary on files written here (output lines and exit codes).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "actorflow/actorflow.h"
#include "actorflow/train.h"
#include "data/checkpoint.h"
#include "data/crc32c.h"
#include "data/tf/tf_checkpoint.h"
#include "data/tf/tf_checkpoint_data.h"
#include "data/variable_slots.h"
#include "actors/variable_checkpoint.h"
#include "graph/ops_variables.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

namespace fs = std::filesystem;
using testing::binary;
using testing::ChildProcess;
using testing::TempDir;

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<float> floats(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements()); }

// w: float32 [2,3] = 1..6, b: float32 [2] = {0.5, -0.5}, n: int32 scalar = 7, and the global
// step, all on /cpu:1 (the "ps"); `set` ops on /cpu:0 overwrite w, b and n with other values.
struct Model {
  std::unique_ptr<Server> server;
  Scope root = Scope::root();
  Output w, b, n, gs, init;
  Output set_w, set_b, set_n, set_gs;
  std::unique_ptr<Session> sess;

  Model() {
    LocalServerOptions o;
    o.cpu_devices = 2;
    server = std::move(*Server::local(o));
    Scope ps = root.with_device("/cpu:1"), worker = root.with_device("/cpu:0");
    auto value = [](Tensor t) {
      return [t](const Scope& s, const Shape&, DType) { return ops::constant(s, t); };
    };
    w = train::get_variable(ps, "w", Shape{2, 3}, DType::kFloat32,
                            value(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})));
    b = train::get_variable(ps, "layer/b", Shape{2}, DType::kFloat32,
                            value(Tensor::from_vector<float>({0.5f, -0.5f}, {2})));
    n = train::get_variable(ps, "n", Shape{}, DType::kInt32, value(Tensor::scalar<int32_t>(7)), false);
    gs = train::get_or_create_global_step(ps);
    set_w = ops::assign(worker, w, ops::constant(worker, Tensor::from_vector<float>({-1, -2, -3, -4, -5, -6}, {2, 3})));
    set_b = ops::assign(worker, b, ops::constant(worker, Tensor::from_vector<float>({9, 9}, {2})));
    set_n = ops::assign(worker, n, ops::constant(worker, Tensor::scalar<int32_t>(-1)));
    set_gs = ops::assign(worker, gs, ops::constant(worker, Tensor::scalar<int64_t>(42)));
    init = *train::global_variables_initializer(root);
    sess = std::make_unique<Session>(root, server->target());
    EXPECT_TRUE(sess->run({}, {}, {init}).ok());
  }
  void scramble() { ASSERT_TRUE(sess->run({}, {}, {set_w, set_b, set_n}).ok()); }
  std::vector<Tensor> values() {
    auto r = sess->run({w, b, n});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<Tensor>{};
  }
};

TEST(SaverTest, SaveThenRestoreGivesBackTheExactValues) {
  TempDir dir;
  Model m;
  train::Saver saver(m.root);
  ASSERT_TRUE(saver.status().ok()) << saver.status();
  ASSERT_EQ(saver.var_list().size(), 4u);  // w, layer/b, n, global_step: every variable
  auto path = saver.save(*m.sess, dir.path() + "/model.ckpt", int64_t{7});
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir.path() + "/model.ckpt-7");

  auto file = read_checkpoint(*path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->global_step, 7);
  std::vector<std::string> names;
  for (const auto& [name, t] : file->variables) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"global_step", "layer/b", "n", "w"}));

  m.scramble();
  EXPECT_EQ(floats(m.values()[0]), (std::vector<float>{-1, -2, -3, -4, -5, -6}));
  ASSERT_TRUE(saver.restore(*m.sess, *path).ok());
  auto v = m.values();
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(floats(v[0]), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(v[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(floats(v[1]), (std::vector<float>{0.5f, -0.5f}));
  EXPECT_EQ(v[2].data<int32_t>()[0], 7);
}

// The optimizer's slots travel with the values: after restoring the checkpoint of step 2 (into
// the same variables, and into a fresh "parameter server"), the next Adam step gives exactly what
// the step after saving gave; without the slots (m, v and Adam's step count) it would not.
TEST(SaverTest, OptimizerSlotsAreSavedAndRestoredWithTheValues) {
  TempDir dir;
  LocalServerOptions so;
  so.cpu_devices = 2;
  auto server = std::move(*Server::local(so));
  Scope root = Scope::root();
  Scope ps = root.with_device("/cpu:1"), worker = root.with_device("/cpu:0");
  Output w = train::get_variable(ps, "w", Shape{2}, DType::kFloat32, train::constant_initializer(1));
  Output gs = train::get_or_create_global_step(ps);
  Output x = ops::placeholder(worker, DType::kFloat32, Shape{2}, "x");
  Output loss = ops::reduce_sum(worker, ops::mul(worker, w, x));
  Output step = *train::AdamOptimizer(0.1f).minimize(worker, loss, gs);
  Output init = *train::global_variables_initializer(root);
  train::Saver saver(root);
  ASSERT_TRUE(saver.status().ok()) << saver.status();
  const Tensor xv = Tensor::from_vector<float>({1, -2}, {2});
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({}, {}, {init}).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(sess.run({{x, xv}}, {}, {step}).ok());
  auto path = saver.save(sess, dir.path() + "/model.ckpt", gs);
  ASSERT_TRUE(path.ok()) << path.status();
  // The file holds w, its slots (Adam's m and v: 8 + 8 + 4 header bytes and 2 x (1 + 8)), the step.
  auto data = read_checkpoint(*path);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_TRUE(data->variables.count("w:slots"));
  EXPECT_EQ(data->variables.at("w:slots").dtype(), DType::kUInt8);
  EXPECT_EQ(data->variables.at("w:slots").num_elements(), 38);
  EXPECT_FALSE(data->variables.count("global_step:slots"));  // no optimizer updates the step
  ASSERT_TRUE(sess.run({{x, xv}}, {}, {step}).ok());
  auto after = sess.run({w});
  ASSERT_TRUE(after.ok());
  const std::vector<float> third = floats((*after)[0]);
  // Back to step 2 in the same variables: the slots of step 3 are replaced by those saved.
  ASSERT_TRUE(saver.restore(sess, *path).ok());
  ASSERT_TRUE(sess.run({{x, xv}}, {}, {step}).ok());
  auto again = sess.run({w});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(floats((*again)[0]), third);
  // A fresh server (a parameter server that restarted empty) restored from the file.
  auto fresh = std::move(*Server::local(so));
  Session sess2(root, fresh->target());
  ASSERT_TRUE(saver.restore(sess2, *path).ok());
  ASSERT_TRUE(sess2.run({{x, xv}}, {}, {step}).ok());
  auto restored = sess2.run({w});
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(floats((*restored)[0]), third);
  // A malformed slot blob is refused naming the variable; the slots stay as they were.
  Output bad = ops::restore_variable_slots(ps, w, ops::constant(ps, Tensor::from_vector<uint8_t>({1, 2, 3}, {3})));
  auto r = sess2.run({bad});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("variable 'w'"), std::string::npos) << r.status();
  // `actorflow ckpt show` lists the slots as bytes of w's, not as a variable.
  auto show = ChildProcess::start({binary("actorflow"), "ckpt", "show", *path});
  ASSERT_EQ(show->wait(std::chrono::seconds(30)), 0) << show->output();
  EXPECT_NE(show->output().find("optimizer slots of 'w'"), std::string::npos) << show->output();
  EXPECT_NE(show->output().find("variables    2 "), std::string::npos) << show->output();
}

// The values of a float32 tensor of a TensorFlow checkpoint.
std::vector<float> tf_floats(const TfCheckpointReader& r, const std::string& name) {
  auto t = r.read(name);
  EXPECT_TRUE(t.ok()) << name << ": " << t.status();
  if (!t.ok()) return {};
  EXPECT_EQ(t->dtype, TfDType::kFloat) << name;
  std::vector<float> out(t->bytes.size() / 4);
  std::memcpy(out.data(), t->bytes.data(), t->bytes.size());
  return out;
}

int64_t tf_int64(const TfCheckpointReader& r, const std::string& name) {
  auto t = r.read(name);
  EXPECT_TRUE(t.ok()) << name << ": " << t.status();
  if (!t.ok() || t->bytes.size() != 8) return -1;
  int64_t v = 0;
  std::memcpy(&v, t->bytes.data(), 8);
  return v;
}

// w = [1, 1] on /cpu:1 trained by Adam(0.1) on loss = sum(w * x) with x = [1, -2], or with
// `squared` on sum(w * w * x), whose gradient changes with w (TensorFlow's golden
// tests/data/tf_ckpt/adam is that model).
struct AdamModel {
  std::unique_ptr<Server> server;
  Scope root = Scope::root();
  Output w, gs, x, step, init;
  std::unique_ptr<Session> sess;
  const Tensor xv = Tensor::from_vector<float>({1, -2}, {2});
  explicit AdamModel(bool squared = false) {
    LocalServerOptions so;
    so.cpu_devices = 2;
    server = std::move(*Server::local(so));
    Scope ps = root.with_device("/cpu:1"), worker = root.with_device("/cpu:0");
    w = train::get_variable(ps, "w", Shape{2}, DType::kFloat32, train::constant_initializer(1));
    gs = train::get_or_create_global_step(ps);
    x = ops::placeholder(worker, DType::kFloat32, Shape{2}, "x");
    Output wx = ops::mul(worker, w, x);
    Output loss = ops::reduce_sum(worker, squared ? ops::mul(worker, w, wx) : wx);
    step = *train::AdamOptimizer(0.1f).minimize(worker, loss, gs);
    init = *train::global_variables_initializer(root);
    sess = std::make_unique<Session>(root, server->target());
  }
  void train_step() { ASSERT_TRUE(sess->run({{x, xv}}, {}, {step}).ok()); }
  std::vector<float> w_now() {
    auto r = sess->run({w});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? floats((*r)[0]) : std::vector<float>{};
  }
};

// SaverOptions::tensorflow_format writes TensorFlow's V2 checkpoint with TensorFlow's names:
// values, Adam's moments as w/Adam and w/Adam_1 (hand-computed: after two steps of g = x,
// m = 0.19 g and v = 0.001999 g^2), the update count as w/Adam_t and the global step; restore()
// reads it back (the same variables and a fresh server continue exactly as before the save);
// latest_checkpoint() names its prefix; max_to_keep deletes the index and data files together.
TEST(SaverTest, TensorFlowFormatSavesValuesSlotsAndStepUnderTensorFlowsNames) {
  TempDir dir;
  AdamModel m;
  train::SaverOptions opts;
  opts.tensorflow_format = true;
  opts.max_to_keep = 2;
  train::Saver saver(m.root, {}, opts);
  ASSERT_TRUE(saver.status().ok()) << saver.status();
  ASSERT_TRUE(m.sess->run({}, {}, {m.init}).ok());
  m.train_step();
  m.train_step();
  auto path = saver.save(*m.sess, dir.path() + "/model.ckpt", m.gs);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir.path() + "/model.ckpt-2");
  EXPECT_EQ(dir_entries(dir.path()),
            (std::vector<std::string>{"checkpoint", "model.ckpt-2.data-00000-of-00001", "model.ckpt-2.index"}));
  auto r = TfCheckpointReader::open(*path);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> names;
  for (const auto& e : r->entries()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"global_step", "w", "w/Adam", "w/Adam_1", "w/Adam_t"}));
  EXPECT_EQ(tf_floats(*r, "w"), m.w_now());
  const std::vector<float> adam_m = tf_floats(*r, "w/Adam"), adam_v = tf_floats(*r, "w/Adam_1");
  ASSERT_EQ(adam_m.size(), 2u);
  ASSERT_EQ(adam_v.size(), 2u);
  EXPECT_NEAR(adam_m[0], 0.19f, 1e-6);
  EXPECT_NEAR(adam_m[1], -0.38f, 1e-6);
  // 1 - 0.999f is 0.00099998713 in float32: v is 0.001999 g^2 to about 1e-5 relative.
  EXPECT_NEAR(adam_v[0], 0.001999f, 0.001999f * 2e-5);
  EXPECT_NEAR(adam_v[1], 0.007996f, 0.007996f * 2e-5);
  EXPECT_EQ(tf_int64(*r, "w/Adam_t"), 2);
  EXPECT_EQ(tf_int64(*r, "global_step"), 2);

  m.train_step();
  const std::vector<float> third = m.w_now();
  auto latest = train::latest_checkpoint(dir.path());
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, *path);
  ASSERT_TRUE(saver.restore(*m.sess, *path).ok());
  m.train_step();
  EXPECT_EQ(m.w_now(), third);
  // A fresh server (a parameter server that restarted empty) from the TensorFlow checkpoint; the
  // ".index" file's name is accepted too.
  LocalServerOptions so;
  so.cpu_devices = 2;
  auto fresh = std::move(*Server::local(so));
  Session sess2(m.root, fresh->target());
  ASSERT_TRUE(saver.restore(sess2, *path + ".index").ok());
  ASSERT_TRUE(sess2.run({{m.x, m.xv}}, {}, {m.step}).ok());
  auto again = sess2.run({m.w, m.gs});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(floats((*again)[0]), third);
  EXPECT_EQ(*(*again)[1].data<int64_t>(), 3);

  // Rotation: after two more saves only the newest two remain, each with its data file.
  m.train_step();
  ASSERT_TRUE(saver.save(*m.sess, dir.path() + "/model.ckpt", m.gs).ok());
  m.train_step();
  ASSERT_TRUE(saver.save(*m.sess, dir.path() + "/model.ckpt", m.gs).ok());
  EXPECT_EQ(dir_entries(dir.path()),
            (std::vector<std::string>{"checkpoint", "model.ckpt-4.data-00000-of-00001", "model.ckpt-4.index",
                                      "model.ckpt-5.data-00000-of-00001", "model.ckpt-5.index"}));
}

// A checkpoint TensorFlow 2.21 wrote (tests/data/tf_ckpt/adam: tf.compat.v1's AdamOptimizer after
// two steps of loss = sum(w * w * [1, -2]), with beta1_power/beta2_power instead of an update
// count) restores into the same model built with actorflow's API, optimizer state included: the
// moments become w's slots with update count 2, and one more step gives TensorFlow's own
// third-step value to 1e-6 (the gradient changes with w, so the step depends on the moments and
// the count, not only on the gradient's sign).
TEST(SaverTest, ATensorFlowWrittenAdamCheckpointContinuesAsTensorFlowWould) {
  const std::string golden = std::string(AF_SOURCE_DIR) + "/tests/data/tf_ckpt";
  std::ifstream f(golden + "/expected.json");
  const auto want = nlohmann::json::parse(f)["adam_third_step"]["w"].get<std::vector<float>>();
  ASSERT_EQ(want.size(), 2u);
  AdamModel m(/*squared=*/true);
  train::Saver saver(m.root);
  ASSERT_TRUE(saver.status().ok()) << saver.status();
  auto data = read_tf_checkpoint_data(golden + "/adam/model.ckpt-2");
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_TRUE(data->variables.count("w:slots"));
  const Tensor& wv = data->variables.at("w");
  auto slots = decode_variable_slots(data->variables.at("w:slots"), wv.dtype(), wv.shape());
  ASSERT_TRUE(slots.ok()) << slots.status();
  EXPECT_EQ(slots->adam_t, 2);
  EXPECT_EQ(floats(slots->at(SlotId::kAdamM)), floats(data->variables.at("w/Adam")));
  EXPECT_EQ(floats(slots->at(SlotId::kAdamV)), floats(data->variables.at("w/Adam_1")));
  auto latest = train::latest_checkpoint(golden + "/adam");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, golden + "/adam/model.ckpt-2");
  ASSERT_TRUE(saver.restore(*m.sess, *latest).ok());
  auto gs = m.sess->run({m.gs});
  ASSERT_TRUE(gs.ok()) << gs.status();
  EXPECT_EQ(*(*gs)[0].data<int64_t>(), 2);
  m.train_step();
  const std::vector<float> got = m.w_now();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NEAR(got[0], want[0], 1e-6);
  EXPECT_NEAR(got[1], want[1], 1e-6);
}

std::string slurp_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string hex_of(const void* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<const unsigned char*>(p)[i];
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// The round trip the other way: actorflow trains two Adam steps and its Saver writes TensorFlow's
// format; TensorFlow 2.21's own tf.compat.v1.train.Saver restores w, global_step, w/Adam and
// w/Adam_1 bit-identically, and one more TensorFlow step (its beta powers set from w/Adam_t)
// equals actorflow's own third step to 1e-6. Runs tests/data/tf_ckpt/tf_restore_adam.py with the
// project's .venv-tf (bench/tf_venv.sh; scripts/test.sh makes it where PyPI is reachable);
// skipped without it.
TEST(SaverTest, TensorFlowRestoresTheSaversCheckpointAndContinuesTheSameWay) {
  const std::string python = std::string(AF_SOURCE_DIR) + "/.venv-tf/bin/python";
  if (access(python.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << python << " (bench/tf_venv.sh makes it)";
  TempDir dir;
  AdamModel m(/*squared=*/true);
  train::SaverOptions opts;
  opts.tensorflow_format = true;
  train::Saver saver(m.root, {}, opts);
  ASSERT_TRUE(m.sess->run({}, {}, {m.init}).ok());
  m.train_step();
  m.train_step();
  auto path = saver.save(*m.sess, dir.path() + "/model.ckpt", m.gs);
  ASSERT_TRUE(path.ok()) << path.status();
  auto saved = read_tf_checkpoint_data(*path);
  ASSERT_TRUE(saved.ok()) << saved.status();
  m.train_step();
  const std::vector<float> third = m.w_now();

  const std::string out = dir.file("tf.json"), err = dir.file("tf.err");
  const std::string cmd = python + " " + AF_SOURCE_DIR + "/tests/data/tf_ckpt/tf_restore_adam.py " + *path + " > " +
                          out + " 2> " + err;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp_file(err);
  const auto got = nlohmann::json::parse(slurp_file(out));
  EXPECT_EQ(got["adam_t"], 2);
  for (const std::string name : {"w", "global_step", "w/Adam", "w/Adam_1"}) {
    const Tensor& t = saved->variables.at(name);
    EXPECT_EQ(got["restored"][name].get<std::string>(), hex_of(t.raw_data(), t.bytes())) << name;
  }
  const auto next = got["next_w"].get<std::vector<float>>();
  ASSERT_EQ(next.size(), 2u);
  ASSERT_EQ(third.size(), 2u);
  EXPECT_NEAR(next[0], third[0], 1e-6);
  EXPECT_NEAR(next[1], third[1], 1e-6);
}

// Two "ps tasks" of a local server, /cpu:1 and /cpu:2, holding: "emb" [7,3] float32 in `parts`
// shards (fixed_size_partitioner) placed alternately on /cpu:1 and /cpu:2, emb row r column c
// initialised to 0.5 (3r + c) - 3; on /cpu:1 f64 [2,2] float64, f16 [4] float32, i32 [2,2] int32
// and the global step; on /cpu:2 bias [3] float32, bf16 [4] float32, i64 [3] int64, flags [3]
// bool. `step` is one AdamOptimizer(0.1) step on loss = sum(emb * emb) (only emb is trainable).
struct PsModel {
  std::unique_ptr<Server> server;
  Scope root = Scope::root();
  train::PartitionedVariable emb;
  std::vector<Output> emb_slots;
  Output f64, f16, i32, bias, bf16, i64, flags, gs, step, init;
  std::unique_ptr<Session> sess;

  explicit PsModel(int64_t parts) {
    LocalServerOptions so;
    so.cpu_devices = 3;
    server = std::move(*Server::local(so));
    Scope ps1 = root.with_device("/cpu:1"), ps2 = root.with_device("/cpu:2"), worker = root.with_device("/cpu:0");
    auto next = std::make_shared<int>(0);
    train::ShardPlacement place = [next](const Scope& s, const Shape&, DType) {
      return s.with_device((*next)++ % 2 == 0 ? "/cpu:1" : "/cpu:2");
    };
    emb = *train::get_partitioned_variable(root, "emb", Shape{7, 3}, train::fixed_size_partitioner(parts),
                                           DType::kFloat32, train::zeros_initializer(), true, place);
    for (size_t i = 0; i < emb.shards.size(); ++i) {
      Scope dev = root.with_device(emb.shards[i].node()->requested_device);
      std::vector<float> v;
      for (int64_t r = emb.offsets[i]; r < emb.offsets[i] + emb.shards[i].shape().dim(0); ++r)
        for (int c = 0; c < 3; ++c) v.push_back(0.5f * static_cast<float>(3 * r + c) - 3.0f);
      train::set_initial_value(dev, emb.shards[i],
                               ops::constant(dev, Tensor::from_vector<float>(v, {emb.shards[i].shape().dim(0), 3})));
      emb_slots.push_back(ops::variable_slots(dev, emb.shards[i]));
    }
    auto value = [](const Scope& s, const std::string& name, Tensor t) {
      Output v = train::get_variable(s, name, t.shape(), t.dtype(), {}, /*trainable=*/false);
      train::set_initial_value(s, v, ops::constant(s, t));
      return v;
    };
    f64 = value(ps1, "f64", Tensor::from_vector<double>({1.0 / 3, -2.5e-300, 1e300, -0.0}, {2, 2}));
    f16 = value(ps1, "f16", Tensor::from_vector<float>({9, 9, 9, 9}, {4}));
    i32 = value(ps1, "i32", Tensor::from_vector<int32_t>({1, -2, 2147483647, -2147483647 - 1}, {2, 2}));
    bias = value(ps2, "bias", Tensor::from_vector<float>({0.1f, -0.2f, 0.3f}, {3}));
    bf16 = value(ps2, "bf16", Tensor::from_vector<float>({9, 9, 9, 9}, {4}));
    i64 = value(ps2, "i64", Tensor::from_vector<int64_t>({9007199254740993LL, -1, 0}, {3}));
    flags = value(ps2, "flags", Tensor::from_vector<bool>({true, false, true}, {3}));
    gs = train::get_or_create_global_step(ps1);
    Output loss;
    for (const Output& shard : emb.shards) {
      Output part = ops::reduce_sum(worker, ops::mul(worker, shard, shard));
      loss = loss.valid() ? ops::add(worker, loss, part) : part;
    }
    step = *train::AdamOptimizer(0.1f).minimize(worker, loss, gs, emb.shards);
    init = *train::global_variables_initializer(root);
    sess = std::make_unique<Session>(root, server->target());
  }
  // The bytes of `outs` fetched in one run, concatenated (the shards of emb make its whole tensor).
  std::string bytes_of(const std::vector<Output>& outs) {
    auto r = sess->run(outs);
    EXPECT_TRUE(r.ok()) << r.status();
    std::string b;
    if (r.ok())
      for (const Tensor& t : *r) b.append(static_cast<const char*>(t.raw_data()), t.bytes());
    return b;
  }
  // One of Adam's moments of emb (SlotId kAdamM or kAdamV), its shards' rows concatenated.
  std::string emb_moment(SlotId id, int64_t* adam_t = nullptr) {
    auto r = sess->run(emb_slots);
    EXPECT_TRUE(r.ok()) << r.status();
    std::string b;
    for (size_t i = 0; r.ok() && i < emb.shards.size(); ++i) {
      auto set = decode_variable_slots((*r)[i], DType::kFloat32, emb.shards[i].shape());
      EXPECT_TRUE(set.ok()) << set.status();
      if (!set.ok()) return "";
      const Tensor& t = set->at(id);
      if (!t.is_initialized()) return "";
      b.append(static_cast<const char*>(t.raw_data()), t.bytes());
      if (adam_t) *adam_t = set->adam_t;
    }
    return b;
  }
};

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

std::string float_bytes(std::vector<uint32_t> bits) {
  return std::string(reinterpret_cast<const char*>(bits.data()), bits.size() * 4);
}

// TensorFlow 2.21's sharded save (tests/data/tf_ckpt/ps_sharded: two data files, "emb" as 3 row
// slices with its Adam moments sliced alike after one step, float64/float16/bfloat16/int32/
// int64/bool variables) restores by name into the model built with actorflow's API with emb in
// 2 shards: every value bit-identical to what TensorFlow's reader returned (float16 and bfloat16
// widened exactly to the float32 variables: hand-written bit patterns), the moments cut to the
// shards' rows with the count 1 (from the beta powers); the Saver then writes it back as 2 data
// files (one per place) with emb and its moments as 2 slices holding TensorFlow's bytes.
TEST(SaverTest, RestoresTensorFlowsShardedSaveWithAPartitionedVariable) {
  const std::string golden = std::string(AF_SOURCE_DIR) + "/tests/data/tf_ckpt";
  const auto want = nlohmann::json::parse(slurp_file(golden + "/expected.json"))["checkpoints"]["ps_sharded/model.ckpt-4"];
  auto tf_bytes = [&](const std::string& name) { return unhex(want[name]["hex"].get<std::string>()); };
  auto golden_reader = TfCheckpointReader::open(golden + "/ps_sharded/model.ckpt-4");
  ASSERT_TRUE(golden_reader.ok()) << golden_reader.status();
  ASSERT_EQ(golden_reader->num_shards(), 2);
  PsModel m(2);
  train::Saver saver(m.root);
  ASSERT_TRUE(m.sess->run({}, {}, {m.init}).ok());
  ASSERT_TRUE(saver.restore(*m.sess, golden + "/ps_sharded/model.ckpt-4").ok());
  EXPECT_EQ(m.bytes_of(m.emb.shards), tf_bytes("emb"));
  int64_t adam_t = 0;
  EXPECT_EQ(m.emb_moment(SlotId::kAdamM, &adam_t), tf_bytes("emb/Adam"));
  EXPECT_EQ(m.emb_moment(SlotId::kAdamV), tf_bytes("emb/Adam_1"));
  EXPECT_EQ(adam_t, 1);
  for (const auto& [name, var] : std::vector<std::pair<std::string, Output>>{
           {"f64", m.f64}, {"i32", m.i32}, {"bias", m.bias}, {"i64", m.i64}, {"flags", m.flags}, {"global_step", m.gs}})
    EXPECT_EQ(m.bytes_of({var}), tf_bytes(name)) << name;
  // float16 0x3800 0xbd00 0x7bff 0x03ff and bfloat16 0x3f80 0xc049 0x714a 0x3c00 as float32.
  EXPECT_EQ(m.bytes_of({m.f16}), float_bytes({0x3f000000u, 0xbfa00000u, 0x477fe000u, 0x387fc000u}));
  EXPECT_EQ(m.bytes_of({m.bf16}), float_bytes({0x3f800000u, 0xc0490000u, 0x714a0000u, 0x3c000000u}));

  TempDir dir;
  train::SaverOptions opts;
  opts.tensorflow_format = true;
  train::Saver tf_saver(m.root, {}, opts);
  auto path = tf_saver.save(*m.sess, dir.path() + "/model.ckpt", m.gs);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(dir_entries(dir.path()), (std::vector<std::string>{"checkpoint", "model.ckpt-4.data-00000-of-00002",
                                                               "model.ckpt-4.data-00001-of-00002", "model.ckpt-4.index"}));
  auto r = TfCheckpointReader::open(*path);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<std::vector<TfExtent>> halves{{{0, 4}, {0, 3}}, {{4, 3}, {0, 3}}};
  for (const TfEntryInfo& e : r->entries()) {
    if (e.name == "emb" || e.name == "emb/Adam" || e.name == "emb/Adam_1") {
      EXPECT_EQ(e.slices, halves) << e.name;
      EXPECT_EQ(r->read(e.name)->bytes, tf_bytes(e.name)) << e.name;
    }
  }
}

// The other way: actorflow's Saver in TensorFlow's format with variables on two places and emb in
// 3 shards spread over both after one Adam step writes 2 data files; TensorFlow 2.21 reads every
// entry with tf.train.load_checkpoint (emb whole from its 3 slices) and restores them with
// tf.compat.v1.train.Saver into emb = get_variable(partitioner=fixed_size_partitioner(3)) and its
// Adam slots, all bit-identical to the values actorflow's session holds. Runs
// tests/data/tf_ckpt/tf_restore_sharded.py with the project's .venv-tf; skipped without it.
TEST(SaverTest, TensorFlowRestoresAShardedSaveWithAPartitionedVariable) {
  const std::string python = std::string(AF_SOURCE_DIR) + "/.venv-tf/bin/python";
  if (access(python.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << python << " (bench/tf_venv.sh makes it)";
  TempDir dir;
  PsModel m(3);
  ASSERT_TRUE(m.sess->run({}, {}, {m.init}).ok());
  ASSERT_TRUE(m.sess->run({}, {}, {m.step}).ok());
  train::SaverOptions opts;
  opts.tensorflow_format = true;
  train::Saver saver(m.root, {}, opts);
  auto path = saver.save(*m.sess, dir.path() + "/model.ckpt", m.gs);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir.path() + "/model.ckpt-1");
  auto r = TfCheckpointReader::open(*path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_shards(), 2);
  for (const TfEntryInfo& e : r->entries())
    if (e.name == "emb") {
      EXPECT_EQ(e.slices.size(), 3u);
    }

  const std::string out = dir.file("tf.json"), err = dir.file("tf.err");
  const std::string cmd = python + " " + AF_SOURCE_DIR + "/tests/data/tf_ckpt/tf_restore_sharded.py " + *path + " > " +
                          out + " 2> " + err;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp_file(err);
  const auto got = nlohmann::json::parse(slurp_file(out));
  EXPECT_EQ(got["data_files"], (std::vector<std::string>{"model.ckpt-1.data-00000-of-00002", "model.ckpt-1.data-00001-of-00002"}));
  std::map<std::string, std::string> mine{{"emb", m.bytes_of(m.emb.shards)},
                                          {"emb/Adam", m.emb_moment(SlotId::kAdamM)},
                                          {"emb/Adam_1", m.emb_moment(SlotId::kAdamV)},
                                          {"f64", m.bytes_of({m.f64})},
                                          {"i32", m.bytes_of({m.i32})},
                                          {"i64", m.bytes_of({m.i64})},
                                          {"flags", m.bytes_of({m.flags})},
                                          {"bias", m.bytes_of({m.bias})},
                                          {"global_step", m.bytes_of({m.gs})}};
  EXPECT_FALSE(mine["emb/Adam"].empty());
  for (const auto& [name, bytes] : mine) {
    const std::string hex = hex_of(bytes.data(), bytes.size());
    EXPECT_EQ(got["tensors"][name].get<std::string>(), hex) << name << " through load_checkpoint";
    EXPECT_EQ(got["restored"][name].get<std::string>(), hex) << name << " through Saver.restore";
  }
}

// Where a variable is saved from: its task, whatever its device part; a local device as itself.
TEST(SaverTest, CheckpointPlaceIsTheTaskOrTheLocalDevice) {
  EXPECT_EQ(checkpoint_place("/job:ps/task:1"), "/job:ps/replica:0/task:1");
  EXPECT_EQ(checkpoint_place("/job:ps/replica:0/task:1/device:CPU:0"), "/job:ps/replica:0/task:1");
  EXPECT_EQ(checkpoint_place("/job:ps/task:1/gpu:0"), "/job:ps/replica:0/task:1");
  EXPECT_EQ(checkpoint_place("/job:ps"), "/job:ps/replica:0/task:0");
  EXPECT_EQ(checkpoint_place("/cpu:1"), "/device:CPU:1");
  EXPECT_EQ(checkpoint_place(""), "");
}

TEST(SaverTest, SaveReadsTheGlobalStepInTheSameRun) {
  TempDir dir;
  Model m;
  ASSERT_TRUE(m.sess->run({}, {}, {m.set_gs}).ok());
  train::Saver saver(m.root);
  auto path = saver.save(*m.sess, dir.path() + "/model.ckpt", m.gs);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir.path() + "/model.ckpt-42");
  auto file = read_checkpoint(*path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->global_step, 42);
  EXPECT_EQ(file->variables.at("global_step").data<int64_t>()[0], 42);
  // A global step that is not an integer scalar.
  auto bad = saver.save(*m.sess, dir.path() + "/model.ckpt", m.w);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument) << bad.status();
  EXPECT_NE(bad.status().message().find("global step 'w'"), std::string::npos) << bad.status();
}

TEST(SaverTest, AVarListSubsetSavesAndRestoresOnlyThoseVariables) {
  TempDir dir;
  Model m;
  train::Saver saver(m.root, {m.w});
  ASSERT_EQ(saver.var_list().size(), 1u);
  auto path = saver.save(*m.sess, dir.path() + "/w.ckpt", int64_t{3});
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir.path() + "/w.ckpt-3");
  auto file = read_checkpoint(*path);
  ASSERT_TRUE(file.ok());
  ASSERT_EQ(file->variables.size(), 1u);
  EXPECT_EQ(floats(file->variables.at("w")), (std::vector<float>{1, 2, 3, 4, 5, 6}));

  m.scramble();
  ASSERT_TRUE(saver.restore(*m.sess, *path).ok());
  auto v = m.values();
  EXPECT_EQ(floats(v[0]), (std::vector<float>{1, 2, 3, 4, 5, 6}));  // restored
  EXPECT_EQ(floats(v[1]), (std::vector<float>{9, 9}));              // not in the list: unchanged
  EXPECT_EQ(v[2].data<int32_t>()[0], -1);

  // A full checkpoint restores into a subset Saver (other values in the file are ignored).
  train::Saver all(m.root);
  auto full = all.save(*m.sess, dir.path() + "/model.ckpt", int64_t{4});
  ASSERT_TRUE(full.ok());
  train::Saver only_b(m.root, {m.b});
  ASSERT_TRUE(m.sess->run({}, {}, {m.init}).ok());
  ASSERT_TRUE(only_b.restore(*m.sess, *full).ok());
  v = m.values();
  EXPECT_EQ(floats(v[0]), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(floats(v[1]), (std::vector<float>{9, 9}));
  EXPECT_EQ(v[2].data<int32_t>()[0], 7);
}

TEST(SaverTest, MaxToKeepPrunesTheOldestAndTheIndexNamesTheRest) {
  TempDir dir;
  Model m;
  train::SaverOptions opts;
  opts.max_to_keep = 3;
  train::Saver saver(m.root, {}, opts);
  for (int64_t step : {10, 20, 30, 40, 50}) ASSERT_TRUE(saver.save(*m.sess, dir.path() + "/model.ckpt", step).ok());
  EXPECT_EQ(dir_entries(dir.path()),
            (std::vector<std::string>{"checkpoint", "model.ckpt-30", "model.ckpt-40", "model.ckpt-50"}));
  std::ifstream idx(dir.path() + "/checkpoint");
  std::stringstream text;
  text << idx.rdbuf();
  EXPECT_EQ(text.str(),
            "model_checkpoint_path: \"model.ckpt-50\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-30\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-40\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-50\"\n");

  // max_to_keep 0 keeps every checkpoint.
  TempDir all_dir;
  opts.max_to_keep = 0;
  train::Saver keep_all(m.root, {m.w}, opts);
  for (int64_t step = 1; step <= 7; ++step) ASSERT_TRUE(keep_all.save(*m.sess, all_dir.path() + "/m", step).ok());
  EXPECT_EQ(dir_entries(all_dir.path()), (std::vector<std::string>{"checkpoint", "m-1", "m-2", "m-3", "m-4", "m-5",
                                                                   "m-6", "m-7"}));
}

TEST(SaverTest, LatestCheckpointSkipsCorruptFilesAndReportsNone) {
  TempDir dir;
  auto none = train::latest_checkpoint(dir.path());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kNotFound);
  EXPECT_NE(none.status().message().find(dir.path()), std::string::npos) << none.status();
  auto missing = train::latest_checkpoint(dir.path() + "/nope");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);

  Model m;
  train::Saver saver(m.root);
  for (int64_t step : {100, 200, 300}) ASSERT_TRUE(saver.save(*m.sess, dir.path() + "/model.ckpt", step).ok());
  auto latest = train::latest_checkpoint(dir.path());
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir.path() + "/model.ckpt-300");
  EXPECT_EQ(train::latest_checkpoint(dir.path(), "other").status().code(), Code::kNotFound);

  // The newest fails its checksum: the previous one.
  ASSERT_EQ(*corrupt_latest(dir.path(), CorruptMode::kFlipByte), dir.path() + "/model.ckpt-300");
  latest = train::latest_checkpoint(dir.path());
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir.path() + "/model.ckpt-200");

  // Every one damaged: DataLoss naming each file.
  fs::remove(dir.path() + "/model.ckpt-300");
  ASSERT_TRUE(corrupt_latest(dir.path(), CorruptMode::kTruncateHalf).ok());
  fs::remove(dir.path() + "/model.ckpt-200");
  ASSERT_TRUE(corrupt_latest(dir.path(), CorruptMode::kZeroLength).ok());
  auto bad = train::latest_checkpoint(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kDataLoss);
  EXPECT_NE(bad.status().message().find("model.ckpt-100"), std::string::npos) << bad.status();
}

TEST(SaverTest, RestoreErrorsNameTheVariableOrTheFileAndChangeNothing) {
  TempDir dir;
  Model m;
  train::Saver all(m.root);
  train::Saver only_w(m.root, {m.w});
  auto w_path = only_w.save(*m.sess, dir.path() + "/w.ckpt", int64_t{1});
  ASSERT_TRUE(w_path.ok());
  m.scramble();

  // A variable the file lacks.
  Status st = all.restore(*m.sess, *w_path);
  EXPECT_EQ(st.code(), Code::kNotFound) << st;
  EXPECT_NE(st.message().find("no value for variable 'layer/b'"), std::string::npos) << st;
  EXPECT_NE(st.message().find(*w_path), std::string::npos) << st;

  // A shape and a dtype that differ.
  CheckpointData wrong;
  wrong.global_step = 5;
  wrong.variables["w"] = Tensor::from_vector<float>({1, 2, 3}, {3});
  ASSERT_TRUE(write_checkpoint(dir.path() + "/shape.ckpt-5", wrong).ok());
  st = only_w.restore(*m.sess, dir.path() + "/shape.ckpt-5");
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("variable 'w' has shape [2,3] but checkpoint " + dir.path() +
                              "/shape.ckpt-5 holds shape [3]"),
            std::string::npos)
      << st;
  wrong.variables["w"] = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  ASSERT_TRUE(write_checkpoint(dir.path() + "/dtype.ckpt-5", wrong).ok());
  st = only_w.restore(*m.sess, dir.path() + "/dtype.ckpt-5");
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("variable 'w' is float32 but checkpoint " + dir.path() + "/dtype.ckpt-5 holds float64"),
            std::string::npos)
      << st;

  // Corrupt and missing files.
  auto full = all.save(*m.sess, dir.path() + "/model.ckpt", int64_t{9});
  ASSERT_TRUE(full.ok());
  ASSERT_EQ(*corrupt_latest(dir.path(), CorruptMode::kFlipByte), *full);
  st = all.restore(*m.sess, *full);
  EXPECT_EQ(st.code(), Code::kDataLoss) << st;
  EXPECT_NE(st.message().find("checkpoint " + *full + " is corrupt"), std::string::npos) << st;
  st = all.restore(*m.sess, dir.path() + "/model.ckpt-8");
  EXPECT_EQ(st.code(), Code::kNotFound) << st;
  EXPECT_NE(st.message().find(dir.path() + "/model.ckpt-8 does not exist"), std::string::npos) << st;

  // None of the failed restores assigned anything: the scrambled values are still there.
  auto v = m.values();
  EXPECT_EQ(floats(v[0]), (std::vector<float>{-1, -2, -3, -4, -5, -6}));
  EXPECT_EQ(floats(v[1]), (std::vector<float>{9, 9}));
  EXPECT_EQ(v[2].data<int32_t>()[0], -1);
}

TEST(SaverTest, ConstructionAndSavePathErrors) {
  TempDir dir;
  Model m;
  Output c = ops::constant(m.root, Tensor::scalar<float>(1.f), "c");
  train::Saver not_a_var(m.root, {m.w, c});
  EXPECT_EQ(not_a_var.status().code(), Code::kInvalidArgument);
  EXPECT_NE(not_a_var.status().message().find("'c' is a Const, not a variable"), std::string::npos)
      << not_a_var.status();
  auto r = not_a_var.save(*m.sess, dir.path() + "/model.ckpt", int64_t{1});
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(train::Saver(m.root, {m.w, m.w}).status().code(), Code::kInvalidArgument);

  train::Saver saver(m.root);
  r = saver.save(*m.sess, dir.path() + "/", int64_t{1});
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("no file name prefix"), std::string::npos) << r.status();
  r = saver.save(*m.sess, dir.path() + "/model.ckpt", int64_t{-1});
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status();
  EXPECT_TRUE(dir_entries(dir.path()).empty());
}

// ---- the actorflow ckpt command ---------------------------------------------------------

struct CliRun {
  int code = -1;
  std::string out;
};

CliRun actorflow(const std::vector<std::string>& args) {
  std::vector<std::string> argv{binary("actorflow")};
  argv.insert(argv.end(), args.begin(), args.end());
  auto p = ChildProcess::start(argv, {}, {});
  if (!p) return {};
  auto code = p->await_exit(std::chrono::seconds(60));
  EXPECT_TRUE(code.ok()) << code.status();
  return {code.ok() ? *code : -1, p->output()};
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// A table row split at its column gaps (two or more spaces).
std::vector<std::string> columns(const std::string& line) {
  static const std::regex gap(" {2,}");
  return {std::sregex_token_iterator(line.begin(), line.end(), gap, -1), std::sregex_token_iterator()};
}

std::string crc_hex(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", crc32c(bytes.data(), bytes.size() - 5));
  return buf;
}

// Writes model.ckpt-<step> for steps 5 and 15: "w" float32 [2,3] = step + 0..5 (listed), "big"
// float32 [12] = 0..11 (summarised: min 0 max 11 mean 5.5), "global_step" int64.
void write_two(const std::string& dir) {
  CheckpointManager mgr(dir, 5);
  for (int64_t step : {5, 15}) {
    CheckpointData d;
    d.global_step = step;
    std::vector<float> w, big;
    for (int i = 0; i < 6; ++i) w.push_back(static_cast<float>(step) + static_cast<float>(i));
    for (int i = 0; i < 12; ++i) big.push_back(static_cast<float>(i));
    d.variables["w"] = Tensor::from_vector<float>(w, {2, 3});
    d.variables["big"] = Tensor::from_vector<float>(big, {12});
    d.variables["global_step"] = Tensor::scalar<int64_t>(step);
    ASSERT_TRUE(mgr.save(d).ok());
  }
}

TEST(CkptCliTest, ListShowsEveryCheckpointNewestFirst) {
  TempDir dir;
  write_two(dir.path());
  const std::string p5 = dir.path() + "/model.ckpt-5", p15 = dir.path() + "/model.ckpt-15";
  CliRun r = actorflow({"ckpt", "list", dir.path()});
  EXPECT_EQ(r.code, 0) << r.out;
  auto l = lines(r.out);
  ASSERT_EQ(l.size(), 3u) << r.out;
  EXPECT_EQ(columns(l[0]),
            (std::vector<std::string>{"STEP", "FORMAT", "VARIABLES", "BYTES", "SHARDS", "CHECKSUM", "PATH"}));
  EXPECT_EQ(columns(l[1]),
            (std::vector<std::string>{"15", "actorflow", "3", std::to_string(fs::file_size(p15)), "-", "ok", p15}));
  EXPECT_EQ(columns(l[2]),
            (std::vector<std::string>{"5", "actorflow", "3", std::to_string(fs::file_size(p5)), "-", "ok", p5}));

  CliRun j = actorflow({"ckpt", "list", dir.path(), "--json"});
  EXPECT_EQ(j.code, 0) << j.out;
  auto doc = nlohmann::json::parse(j.out);
  ASSERT_EQ(doc["checkpoints"].size(), 2u);
  EXPECT_EQ(doc["checkpoints"][0]["path"], p15);
  EXPECT_EQ(doc["checkpoints"][0]["global_step"], 15);
  EXPECT_EQ(doc["checkpoints"][1]["checksum"], "ok");
  EXPECT_EQ(doc["checkpoints"][1]["bytes"], fs::file_size(p5));

  // One damaged: listed as BAD, the reason on stderr, exit 1.
  ASSERT_EQ(*corrupt_latest(dir.path(), CorruptMode::kDropLastByte), p15);
  r = actorflow({"ckpt", "list", dir.path()});
  EXPECT_EQ(r.code, 1) << r.out;
  l = lines(r.out);
  ASSERT_EQ(l.size(), 5u) << r.out;
  EXPECT_EQ(columns(l[1]),
            (std::vector<std::string>{"15", "actorflow", "-", std::to_string(fs::file_size(p15)), "-", "BAD", p15}));
  EXPECT_EQ(columns(l[2])[5], "ok");
  EXPECT_EQ(l[3], "actorflow ckpt list: 1 of 2 checkpoints in " + dir.path() + " are unreadable:");
  EXPECT_NE(l[4].find("checkpoint " + p15 + " is truncated or corrupt"), std::string::npos) << l[4];
}

// Variable names come from the file: `show` prints their control bytes, DEL, bytes >= 0x80 and
// backslashes as \xNN, so a name cannot carry terminal escape codes or forge a line such as
// "all checks passed" (failed before: printed raw). --json stays valid JSON.
TEST(CkptCliTest, ShowEscapesNonPrintableBytesInNames) {
  TempDir dir;
  CheckpointData d;
  d.global_step = 1;
  const std::string evil = "w\x1b[2J\x1b[32m\nall checks passed\\\x7f\xff";
  d.variables[evil] = Tensor::scalar<float>(1.f);
  const std::string p = dir.path() + "/model.ckpt-1";
  ASSERT_TRUE(write_checkpoint(p, d).ok());
  CliRun r = actorflow({"ckpt", "show", p});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\nall checks passed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("w\\x1b[2J\\x1b[32m\\x0aall checks passed\\x5c\\x7f\\xff"), std::string::npos) << r.out;
  CliRun j = actorflow({"ckpt", "show", p, "--json"});
  EXPECT_EQ(j.code, 0) << j.out;
  auto doc = nlohmann::json::parse(j.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << j.out;
  EXPECT_EQ(j.out.find('\x1b'), std::string::npos) << j.out;
}

TEST(CkptCliTest, ShowPrintsTheStepChecksumAndEveryVariable) {
  TempDir dir;
  write_two(dir.path());
  const std::string p5 = dir.path() + "/model.ckpt-5";
  CliRun r = actorflow({"ckpt", "show", p5});
  EXPECT_EQ(r.code, 0) << r.out;
  auto l = lines(r.out);
  ASSERT_EQ(l.size(), 9u) << r.out;
  EXPECT_EQ(l[0], "checkpoint   " + p5);
  EXPECT_EQ(l[1], "format       actorflow");
  EXPECT_EQ(l[2], "global_step  5");
  EXPECT_EQ(l[3], "checksum     ok (crc32c " + crc_hex(p5) + ")");
  EXPECT_EQ(l[4], "variables    3 (80 bytes of values, " + std::to_string(fs::file_size(p5)) + " bytes in the file)");
  EXPECT_EQ(columns(l[5]), (std::vector<std::string>{"NAME", "DTYPE", "SHAPE", "ELEMENTS", "VALUES"}));
  EXPECT_EQ(columns(l[6]), (std::vector<std::string>{"big", "float32", "[12]", "12", "min 0 max 11 mean 5.5"}));
  EXPECT_EQ(columns(l[7]), (std::vector<std::string>{"global_step", "int64", "[]", "1", "[5]"}));
  EXPECT_EQ(columns(l[8]), (std::vector<std::string>{"w", "float32", "[2,3]", "6", "[5, 6, 7, 8, 9, 10]"}));

  CliRun j = actorflow({"ckpt", "show", p5, "--json"});
  EXPECT_EQ(j.code, 0) << j.out;
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["global_step"], 5);
  EXPECT_EQ(doc["checksum"], "ok");
  EXPECT_EQ(doc["crc32c"], crc_hex(p5));
  EXPECT_EQ(doc["format"], "actorflow");
  ASSERT_EQ(doc["variables"].size(), 3u);
  EXPECT_EQ(doc["variables"][0]["name"], "big");
  EXPECT_EQ(doc["variables"][0]["mean"], 5.5);
  EXPECT_EQ(doc["variables"][2]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(doc["variables"][2]["values"], nlohmann::json({5, 6, 7, 8, 9, 10}));
}

// TensorFlow checkpoints in `actorflow ckpt`: list shows both formats in one directory (the
// TensorFlow one by its prefix, its bytes the index's and data files'), show reads a checkpoint
// TensorFlow wrote (by prefix or by its .index), and convert goes actorflow -> TensorFlow ->
// actorflow with every value, the slots and the step unchanged; it never replaces a file and
// names what is wrong.
TEST(CkptCliTest, TensorFlowCheckpointsAreListedShownAndConverted) {
  TempDir dir;
  write_two(dir.path());  // actorflow's model.ckpt-5 and model.ckpt-15
  const std::string p15 = dir.path() + "/model.ckpt-15", tf20 = dir.path() + "/model.ckpt-20";
  CliRun r = actorflow({"ckpt", "convert", p15, tf20});
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "wrote " + tf20 + " (tensorflow, global_step 15, 3 entries) from " + p15 + " (actorflow)\n");
  r = actorflow({"ckpt", "list", dir.path()});
  EXPECT_EQ(r.code, 0) << r.out;
  auto l = lines(r.out);
  ASSERT_EQ(l.size(), 4u) << r.out;
  const auto tf_bytes = fs::file_size(tf20 + ".index") + fs::file_size(tf20 + ".data-00000-of-00001");
  EXPECT_EQ(columns(l[1]), (std::vector<std::string>{"15", "tensorflow", "3", std::to_string(tf_bytes), "1", "ok", tf20}));
  EXPECT_EQ(columns(l[2])[1], "actorflow");
  // Back to actorflow's format: the same data as the original file.
  const std::string back = dir.path() + "/back.ckpt";
  r = actorflow({"ckpt", "convert", tf20 + ".index", back});
  ASSERT_EQ(r.code, 0) << r.out;
  auto a = read_checkpoint(p15), b = read_checkpoint(back);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_EQ(b->global_step, 15);
  ASSERT_EQ(b->variables.size(), a->variables.size());
  for (const auto& [name, t] : a->variables) {
    ASSERT_TRUE(b->variables.count(name)) << name;
    const Tensor& u = b->variables.at(name);
    EXPECT_EQ(u.dtype(), t.dtype()) << name;
    EXPECT_EQ(u.shape(), t.shape()) << name;
    EXPECT_EQ(std::memcmp(u.raw_data(), t.raw_data(), t.bytes()), 0) << name;
  }
  // A checkpoint written by TensorFlow, by prefix and by index file.
  const std::string golden = std::string(AF_SOURCE_DIR) + "/tests/data/tf_ckpt/adam/model.ckpt-2";
  for (const std::string& p : {golden, golden + ".index"}) {
    r = actorflow({"ckpt", "show", p});
    EXPECT_EQ(r.code, 0) << r.out;
    l = lines(r.out);
    ASSERT_GE(l.size(), 6u) << r.out;
    EXPECT_EQ(l[0], "checkpoint   " + golden);
    EXPECT_EQ(l[1], "format       tensorflow (V2 checkpoint)");
    EXPECT_EQ(l[2], "global_step  2");
    EXPECT_EQ(l[3], "checksum     ok (every block and tensor CRC-32C checked)");
    EXPECT_NE(r.out.find("w/Adam_1"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(":slots"), std::string::npos) << r.out;
  }
  CliRun j = actorflow({"ckpt", "show", golden, "--json"});
  EXPECT_EQ(j.code, 0) << j.out;
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["format"], "tensorflow");
  EXPECT_EQ(doc["variables"].size(), 6u);  // beta1_power, beta2_power, global_step, w, w/Adam, w/Adam_1
  EXPECT_EQ(doc["shards"], 1);

  // TensorFlow's sharded save: its data files counted, a partitioned tensor's slices shown in
  // TensorFlow's notation (start,length per dimension), "-" for tensors stored whole.
  const std::string sharded = std::string(AF_SOURCE_DIR) + "/tests/data/tf_ckpt/ps_sharded/model.ckpt-4";
  r = actorflow({"ckpt", "show", sharded});
  EXPECT_EQ(r.code, 0) << r.out;
  l = lines(r.out);
  ASSERT_GE(l.size(), 7u) << r.out;
  EXPECT_EQ(l[5], "shards       2 data files");
  EXPECT_EQ(columns(l[6]), (std::vector<std::string>{"NAME", "DTYPE", "SHAPE", "ELEMENTS", "SLICES", "VALUES"}));
  std::map<std::string, std::vector<std::string>> row;
  for (const std::string& line : l) {
    auto c = columns(line);
    if (!c.empty()) row[c[0]] = c;
  }
  EXPECT_EQ(row["emb"], (std::vector<std::string>{"emb", "float32", "[7,3]", "21", "3: 0,3:0,3 3,2:0,3 5,2:0,3",
                                                  "min -2.6 max 2.4 mean -0.095238"}));
  ASSERT_EQ(row["emb/Adam_1"].size(), 6u) << r.out;
  EXPECT_EQ(row["emb/Adam_1"][4], "3: 0,3:0,3 3,2:0,3 5,2:0,3");
  ASSERT_EQ(row["f64"].size(), 6u) << r.out;
  EXPECT_EQ(row["f64"][4], "-");
  j = actorflow({"ckpt", "show", sharded, "--json"});
  doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["shards"], 2);
  for (const auto& v : doc["variables"])
    if (v["name"] == "emb") {
      EXPECT_EQ(v["slices"].dump(), "[[[0,3],[0,3]],[[3,2],[0,3]],[[5,2],[0,3]]]");
    }
  r = actorflow({"ckpt", "list", std::string(AF_SOURCE_DIR) + "/tests/data/tf_ckpt/ps_sharded"});
  EXPECT_EQ(r.code, 0) << r.out;
  l = lines(r.out);
  ASSERT_EQ(l.size(), 2u) << r.out;
  EXPECT_EQ(columns(l[1])[4], "2");
  // Errors: an existing destination (either form), an unknown --to, a missing source, a damaged one.
  r = actorflow({"ckpt", "convert", p15, tf20});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "actorflow ckpt convert: " + tf20 + ".index exists; not replacing it\n");
  r = actorflow({"ckpt", "convert", tf20, back});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "actorflow ckpt convert: " + back + " exists; not replacing it\n");
  r = actorflow({"ckpt", "convert", p15, dir.path() + "/x", "--to", "onnx"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "actorflow ckpt convert: --to must be tensorflow or actorflow, got 'onnx'\n");
  r = actorflow({"ckpt", "convert", dir.path() + "/nope", dir.path() + "/x"});
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(dir.path() + "/nope does not exist"), std::string::npos) << r.out;
  ASSERT_EQ(*corrupt_latest(dir.path(), CorruptMode::kFlipByte), tf20 + ".index");
  r = actorflow({"ckpt", "convert", tf20, dir.path() + "/y"});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(tf20 + ".index"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.path() + "/y"));
  r = actorflow({"ckpt", "list", dir.path()});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("tensorflow  -"), std::string::npos) << r.out;
}

TEST(CkptCliTest, BadInputIsAClearErrorAndANonZeroExit) {
  TempDir dir;
  // Missing file / directory: exit 2 naming it.
  CliRun r = actorflow({"ckpt", "show", dir.path() + "/model.ckpt-1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "actorflow ckpt show: checkpoint " + dir.path() + "/model.ckpt-1 does not exist\n");
  r = actorflow({"ckpt", "list", dir.path() + "/nope"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "actorflow ckpt list: directory " + dir.path() + "/nope does not exist\n");
  // A directory given to show, a file given to list.
  r = actorflow({"ckpt", "show", dir.path()});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "actorflow ckpt show: checkpoint " + dir.path() + " is a directory, not a regular file\n");
  const std::string text = dir.write("notes.txt", "not a checkpoint at all\n");
  r = actorflow({"ckpt", "list", text});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find(text + " is not a directory"), std::string::npos) << r.out;
  // An empty directory.
  r = actorflow({"ckpt", "list", dir.path()});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "actorflow ckpt list: no checkpoint model.ckpt-<step> in " + dir.path() + "\n");
  // Not a checkpoint, truncated, corrupt: exit 1 naming the file.
  r = actorflow({"ckpt", "show", text});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("actorflow ckpt show: checkpoint " + text + " is truncated or corrupt"), std::string::npos)
      << r.out;
  write_two(dir.path());
  const std::string p15 = dir.path() + "/model.ckpt-15";
  ASSERT_EQ(*corrupt_latest(dir.path(), CorruptMode::kTruncateHalf), p15);
  r = actorflow({"ckpt", "show", p15});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("actorflow ckpt show: checkpoint " + p15 + " is "), std::string::npos) << r.out;
  const std::string p5 = dir.path() + "/model.ckpt-5";
  fs::remove(p15);
  ASSERT_EQ(*corrupt_latest(dir.path(), CorruptMode::kFlipByte), p5);
  r = actorflow({"ckpt", "show", p5});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("actorflow ckpt show: checkpoint " + p5 + " is corrupt or truncated: crc32c mismatch"),
            std::string::npos)
      << r.out;
  // Help documents both commands.
  r = actorflow({"ckpt", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("list"), std::string::npos);
  EXPECT_NE(r.out.find("show"), std::string::npos);
  r = actorflow({"--help"});
  EXPECT_NE(r.out.find("ckpt"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace actorflow
