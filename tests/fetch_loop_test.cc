// The lost replies of multi-MB fetches, as a user met them: a program on the public API only
// (samples/fetch_loop: one ps task holding a float variable per size, one worker fetching each size
// back to back with a deadline per fetch), across two processes, with plain TCP and with TLS.
// Over plain TCP a small frame behind a reply of a megabyte or more used to stay unread in the
// socket until the fetch's deadline (docs/architecture/step-path.md, "No step waits without a bound"):
// 6 to 8 of 10 fetches of a 6.3 MB variable ended in DeadlineExceeded.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "tests/util/process.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::ChildProcess;
using testing::free_port;
using testing::TempDir;

// 1 KiB to 64 MiB, the seed CNN's fc1 (3136 x 500 floats) and 12.8 MB (fc 1024) among them.
constexpr const char* kSizes = "1024,65536,1048576,2097152,4194304,6272000,12845056,16777216,67108864";

void fetch_every_size(bool tls) {
  TempDir dir;
  std::string text = "[cluster]\nname = \"fetch-loop\"\n";
  if (tls) text += "tls_dir = \"certs\"\n";
  text += "[jobs]\nps = [\"127.0.0.1:" + std::to_string(free_port()) + "\"]\nworker = [\"127.0.0.1:" +
          std::to_string(free_port()) + "\"]\n";
  const std::string file = dir.write("cluster.toml", text);
  if (tls) {
    auto certs = ChildProcess::start({binary("actorflow"), "certs", "--cluster", file, "--out", dir.path() + "/certs"});
    ASSERT_TRUE(certs);
    auto code = certs->await_exit(60s);
    ASSERT_TRUE(code.ok() && *code == 0) << certs->output();
  }
  auto ps = ChildProcess::start({binary("samples/fetch_loop"), "--cluster", file, "--job", "ps"});
  ASSERT_TRUE(ps);
  ASSERT_TRUE(ps->wait_for_output("Started server", 30s)) << ps->output();
  // A deadline of 20 s per fetch: a lost reply shows as a failed fetch, never as a slow test pass.
  auto worker = ChildProcess::start({binary("samples/fetch_loop"), "--cluster", file, "--job", "worker", "--sizes", kSizes,
                                     "--fetches", "25", "--timeout-secs", "20"});
  ASSERT_TRUE(worker);
  auto code = worker->await_exit(240s);
  const std::string out = worker->output();
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << out;
  EXPECT_EQ(*code, 0) << out;
  // One line per size, each with 25 fetches and none lost.
  static const std::regex line(R"(size (\d+) B: (\d+) fetches, (\d+) lost)");
  int sizes = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator(); ++it) {
    ++sizes;
    EXPECT_EQ((*it)[2], "25") << (*it)[0];
    EXPECT_EQ((*it)[3], "0") << (*it)[0];
  }
  EXPECT_EQ(sizes, 9) << out;
  EXPECT_NE(out.find("LOST 0"), std::string::npos) << out;
}

TEST(FetchLoopTest, EverySizeFrom1KiBTo64MiBOverPlainTcp) { fetch_every_size(false); }

TEST(FetchLoopTest, EverySizeFrom1KiBTo64MiBOverTls) { fetch_every_size(true); }

}  // namespace
}  // namespace actorflow
