// TensorBoard event files (data/event_file.h): TFRecord framing with masked CRC-32C, checked by an
// independent bitwise CRC, and the Event protos decoded field by field.
#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "data/crc32c.h"
#include "data/event_file.h"
#include "graph/tf/tf_export.h"
#include "actorflow/actorflow.h"
#include "tests/util/event_reader.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

TEST(EventFileTest, MaskedCrcIsTensorFlowsAndMatchesABitwiseCrc) {
  EXPECT_EQ(testing::crc32c_bitwise("123456789"), 0xE3069283u);  // the CRC-32C check value
  const std::string s = "any bytes \x01\x02";
  EXPECT_EQ(crc32c(s.data(), s.size()), testing::crc32c_bitwise(s));
  EXPECT_EQ(crc32c_masked(0xE3069283u), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u);
}

TEST(EventFileTest, RecordsFrameEventsThatDecodeBack) {
  testing::TempDir dir;
  auto w = EventFileWriter::open(dir.path() + "/logs/run1", ".worker_0");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->add_scalars(7, {{"loss", 0.5}, {"accuracy", 0.25}}).ok());
  ASSERT_TRUE((*w)->add_scalars(12, {{"loss", 0.125}}).ok());
  const std::string path = (*w)->path();
  EXPECT_NE(path.find("/logs/run1/events.out.tfevents."), std::string::npos) << path;
  EXPECT_EQ(path.substr(path.size() - 9), ".worker_0");
  auto c = testing::read_event_file(path);
  ASSERT_EQ(c.error, "");
  ASSERT_EQ(c.events.size(), 3u);
  EXPECT_EQ(c.events[0].file_version, "brain.Event:2");
  EXPECT_GT(c.events[0].wall_time, 1.7e9);  // seconds since 1970, this decade
  EXPECT_EQ(c.events[1].step, 7);
  EXPECT_EQ(c.events[1].scalars, (std::map<std::string, float>{{"loss", 0.5f}, {"accuracy", 0.25f}}));
  EXPECT_EQ(c.events[2].step, 12);
  EXPECT_EQ(c.events[2].scalars, (std::map<std::string, float>{{"loss", 0.125f}}));
  EXPECT_GE(c.events[2].wall_time, c.events[1].wall_time);
  // One flipped byte in the data is caught by the data CRC.
  std::string rec = event_record(scalar_event(1.0, 3, {{"x", 1.0}}));
  rec[14] ^= 0x40;
  const std::string bad = dir.write("bad", rec);
  EXPECT_NE(testing::read_event_file(bad).error.find("bad data CRC"), std::string::npos);
}

// Histograms: TensorFlow's default bucket limits (hand-checked ends and growth), each value in
// the bucket [limit[i-1], limit[i]) as TensorFlow's Histogram::Add puts it, and the summary
// statistics computed by hand.
TEST(EventFileTest, HistogramsUseTensorFlowsBucketsAndStatistics) {
  const auto& limits = histogram_bucket_limits();
  ASSERT_EQ(limits.size() % 2, 1u);  // symmetric around the single 0
  const size_t zero = limits.size() / 2;
  EXPECT_EQ(limits[zero], 0.0);
  EXPECT_EQ(limits[zero + 1], 1e-12);
  EXPECT_NEAR(limits[zero + 2], 1.1e-12, 1e-24);
  EXPECT_EQ(limits.back(), std::numeric_limits<double>::max());
  EXPECT_EQ(limits.front(), -std::numeric_limits<double>::max());
  EXPECT_LT(limits[limits.size() - 2], 1.1e20);
  EXPECT_GE(limits[limits.size() - 2], 1e20 / 1.1);
  for (size_t i = 1; i < limits.size(); ++i) ASSERT_LT(limits[i - 1], limits[i]) << i;
  // 1e-12 * 1.1^k < 1e20 for k = 0..773 (log(1e32) / log(1.1) = 773.1): 774 limits a side, plus
  // +-DBL_MAX and 0.
  EXPECT_EQ(limits.size(), 2u * (774u + 1u) + 1u);

  testing::TempDir dir;
  auto w = EventFileWriter::open(dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<double> values = {-2.0, 0.0, 0.5, 0.5, 3.0, std::nan("")};
  ASSERT_TRUE((*w)->add_histograms(4, {{"weights", values}, {"empty", {}}}).ok());
  auto c = testing::read_event_file((*w)->path());
  ASSERT_EQ(c.error, "");
  ASSERT_EQ(c.events.size(), 2u);
  const auto& e = c.events[1];
  EXPECT_EQ(e.step, 4);
  ASSERT_EQ(e.histograms.count("weights"), 1u);
  const auto& h = e.histograms.at("weights");
  EXPECT_EQ(h.min, -2.0);
  EXPECT_EQ(h.max, 3.0);
  EXPECT_EQ(h.num, 5.0);  // the NaN left out
  EXPECT_EQ(h.sum, 2.0);
  EXPECT_EQ(h.sum_squares, 4.0 + 0.25 + 0.25 + 9.0);
  ASSERT_EQ(h.bucket_limit.size(), h.bucket.size());
  ASSERT_EQ(h.bucket.size(), 4u);  // -2, 0, 0.5 (twice), 3: four non-empty buckets
  double total = 0;
  for (double b : h.bucket) total += b;
  EXPECT_EQ(total, 5.0);
  // Each value lies in [previous limit, its bucket's limit).
  const std::vector<std::pair<double, double>> want = {{-2.0, 1}, {0.0, 1}, {0.5, 2}, {3.0, 1}};
  for (size_t i = 0; i < want.size(); ++i) {
    const auto at = std::find(limits.begin(), limits.end(), h.bucket_limit[i]);
    ASSERT_NE(at, limits.end()) << "limit " << h.bucket_limit[i] << " is not a default bucket limit";
    ASSERT_NE(at, limits.begin());
    EXPECT_LE(*(at - 1), want[i].first) << i;
    EXPECT_LT(want[i].first, *at) << i;
    EXPECT_EQ(h.bucket[i], want[i].second) << i;
  }
  ASSERT_EQ(e.histograms.count("empty"), 1u);
  EXPECT_EQ(e.histograms.at("empty").num, 0.0);
  EXPECT_TRUE(e.histograms.at("empty").bucket.empty());
}

// The graph event: a tensorflow.GraphDef whose nodes carry TensorFlow's input spelling
// ("x", "x:1", "^x"), the device and the output shapes.
TEST(EventFileTest, TheGraphIsATensorFlowGraphDef) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root.with_device("/job:worker/task:0"), DType::kFloat32, Shape{-1, 3}, "x");
  auto w = ops::constant(root.with_op_name("w"), Tensor::from_vector<float>({1, 2, 3}, {3, 1}));
  auto y = ops::matmul(root.with_op_name("y"), x, w);
  auto split = ops::split(root.with_op_name("parts"), ops::constant(root, Tensor::from_vector<float>({1, 2}, {2})), 2, 0);
  ops::add(root.with_op_name("z").with_control_dependencies({y}), split[1], split[0]);
  ASSERT_TRUE(root.ok()) << root.status();
  testing::TempDir dir;
  auto wr = EventFileWriter::open(dir.path());
  ASSERT_TRUE(wr.ok()) << wr.status();
  auto gd = tf_graph_def_proto(*root.graph());
  ASSERT_TRUE(gd.ok()) << gd.status();
  ASSERT_TRUE((*wr)->add_graph(*gd).ok());
  auto c = testing::read_event_file((*wr)->path());
  ASSERT_EQ(c.error, "");
  ASSERT_EQ(c.events.size(), 2u);
  const auto& e = c.events[1];
  ASSERT_TRUE(e.has_graph);
  EXPECT_EQ(e.graph_producer, 2474);  // TensorFlow 2.21's GraphDef version
  std::map<std::string, testing::DecodedNode> by_name;
  for (const auto& n : e.graph) by_name[n.name] = n;
  // Every node, and the Const TensorFlow's Split takes its axis from (input 0).
  EXPECT_EQ(static_cast<int>(e.graph.size()), root.graph()->num_nodes() + 1);
  ASSERT_EQ(by_name.count("parts/split_dim"), 1u);
  EXPECT_EQ(by_name["parts/split_dim"].op, "Const");
  EXPECT_EQ(by_name["parts"].inputs, (std::vector<std::string>{"parts/split_dim", "Const"}));
  ASSERT_EQ(by_name.count("y"), 1u);
  EXPECT_EQ(by_name["y"].op, "MatMul");
  EXPECT_EQ(by_name["y"].inputs, (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(by_name["x"].device, "/job:worker/task:0");
  ASSERT_EQ(by_name["y"].output_shapes.size(), 1u);
  EXPECT_EQ(by_name["y"].output_shapes[0], (std::vector<int64_t>{-1, 1}));
  ASSERT_EQ(by_name.count("z"), 1u);
  EXPECT_EQ(by_name["z"].inputs, (std::vector<std::string>{"parts:1", "parts", "^y"}));
}

TEST(EventFileTest, AnUnwritableLogdirIsAnErrorNamingIt) {
  testing::TempDir dir;
  const std::string file = dir.write("plain", "x");
  auto w = EventFileWriter::open(file + "/sub");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find(file), std::string::npos) << w.status();
}

}  // namespace
}  // namespace actorflow
