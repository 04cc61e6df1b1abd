// TensorBoard event files (data/event_file.h): TFRecord framing with masked CRC-32C, checked by an
// independent bitwise CRC, and the Event protos decoded field by field.
#include <gtest/gtest.h>

#include <dirent.h>

#include "data/crc32c.h"
#include "data/event_file.h"
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

TEST(EventFileTest, AnUnwritableLogdirIsAnErrorNamingIt) {
  testing::TempDir dir;
  const std::string file = dir.write("plain", "x");
  auto w = EventFileWriter::open(file + "/sub");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find(file), std::string::npos) << w.status();
}

}  // namespace
}  // namespace actorflow
