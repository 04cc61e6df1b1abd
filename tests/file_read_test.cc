// Readers of files named by users never hang or exhaust memory: FIFOs, devices, directories and
// oversized files are refused at once with an error naming the file (core/file_read.h and the
// readers of cluster files, secret files, fault plans and IDX files).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include "actors/faults.h"
#include "config/cluster.h"
#include "core/file_read.h"
#include "data/idx.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using testing::TempDir;
using Clock = std::chrono::steady_clock;

// Runs `f` and checks it took well under the time a blocked open would hang.
template <class F>
auto quickly(F f) {
  const auto t0 = Clock::now();
  auto r = f();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  return r;
}

TEST(FileReadTest, RegularFilesAreReadWhole) {
  TempDir dir;
  const std::string p = dir.write("a.txt", std::string(100000, 'x') + "end");
  auto r = read_regular_file(p, 1 << 20, "test file");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 100003u);
  EXPECT_EQ(r->substr(r->size() - 3), "end");
  auto empty = read_regular_file(dir.write("e", ""), 10, "test file");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(FileReadTest, FifoDeviceDirectoryAndOversizedAreRefused) {
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = quickly([&] { return read_regular_file(fifo, 1 << 20, "cluster file"); });
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(f.status().message(), "cluster file '" + fifo + "' is a FIFO, not a regular file");
  auto z = quickly([&] { return read_regular_file("/dev/zero", 1 << 20, "cluster file"); });
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().message().find("is a character device"), std::string::npos) << z.status();
  auto d = read_regular_file(dir.path(), 1 << 20, "fault plan");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("is a directory"), std::string::npos) << d.status();
  auto big = read_regular_file(dir.write("big", std::string(2000, 'x')), 1000, "secret file");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), Code::kResourceExhausted);
  EXPECT_NE(big.status().message().find("2000 bytes, more than the limit of 1000"), std::string::npos) << big.status();
  auto missing = read_regular_file(dir.path() + "/nope", 10, "fault plan");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
}

TEST(FileReadTest, ClusterAndSecretFilesThatAreNotRegularFiles) {
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto c = quickly([&] { return ClusterSpec::from_file(fifo); });
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("is a FIFO, not a regular file"), std::string::npos) << c.status();
  auto z = quickly([&] { return ClusterSpec::from_file("/dev/zero"); });
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().message().find("cannot open cluster file '/dev/zero': is a character device"),
            std::string::npos)
      << z.status();
  auto big = ClusterSpec::from_file(dir.write("big.toml", "# " + std::string(2 << 20, 'x') + "\n"));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("larger than 1048576 bytes"), std::string::npos) << big.status();
  // A FIFO as secret file.
  const std::string cfg =
      dir.write("c.toml", "[cluster]\nsecret_file = \"fifo\"\n[jobs]\nworker = [\"localhost:2222\"]\n");
  auto s = quickly([&] { return ClusterSpec::from_file(cfg); });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("c.toml:2:15: cluster.secret_file: cannot read secret file"), std::string::npos)
      << s.status();
  EXPECT_NE(s.status().message().find("is a FIFO"), std::string::npos) << s.status();
}

TEST(FileReadTest, FaultPlansAndIdxFilesThatAreNotRegularFiles) {
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto p = quickly([&] { return FaultPlan::from_file(fifo); });
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "fault plan '" + fifo + "' is a FIFO, not a regular file");
  auto big = FaultPlan::from_file(dir.write("big.toml", std::string(kMaxPlanBytes + 1, '#')));
  EXPECT_EQ(big.status().code(), Code::kResourceExhausted) << big.status();
  auto idx = quickly([&] { return read_idx(fifo); });
  ASSERT_FALSE(idx.ok());
  EXPECT_NE(idx.status().message().find("is a FIFO, not a regular file"), std::string::npos) << idx.status();
  auto dev = read_idx("/dev/zero");
  ASSERT_FALSE(dev.ok());
  EXPECT_NE(dev.status().message().find("is a character device"), std::string::npos) << dev.status();
}

// toml++ 3.3.0 reaches undefined behaviour on many non-ASCII characters: TOML files are ASCII and
// a non-ASCII byte is refused with its position before the parser sees it.
TEST(FileReadTest, NonAsciiTomlIsRefusedWithItsPosition) {
  auto c = ClusterSpec::from_string("[jobs]\n# caf\xc3\xa9\nworker = [\"localhost:2222\"]\n", "c.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("c.toml:2:6: non-ASCII byte 0xC3: cluster files must be ASCII"),
            std::string::npos)
      << c.status();
  auto p = FaultPlan::parse("seed = 1\n[[fault]]\nkind = \"kill\"\ntask = \"w\xc3\xa9/1\"\n", "p.toml");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("p.toml:4:10: non-ASCII byte 0xC3: fault plans must be ASCII"),
            std::string::npos)
      << p.status();
}

}  // namespace
}  // namespace actorflow
