// net::PortReservation: ports outside the ephemeral range, never the same port twice across
// processes while held, released on destruction.
#include "net/port_reservation.h"

#include <gtest/gtest.h>

#include <optional>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <vector>

#include "tests/util/process.h"

namespace actorflow {
namespace {

using net::PortRange;
using net::PortReservation;
using net::PortReservationOptions;

TEST(PortReservationTest, RangeLiesOutsideTheEphemeralRange) {
  auto r = net::reservable_port_range(PortRange{32768, 60999});  // Linux's default
  EXPECT_EQ(r.first, 20000);
  EXPECT_EQ(r.last, 32767);
  r = net::reservable_port_range(PortRange{40000, 60999});
  EXPECT_EQ(r.first, 27232);
  EXPECT_EQ(r.last, 39999);
  r = net::reservable_port_range(PortRange{1100, 60000});  // more room above
  EXPECT_EQ(r.first, 60001);
  EXPECT_EQ(r.last, 65535);
  r = net::reservable_port_range(PortRange{1024, 65535});  // nothing left: everything
  EXPECT_EQ(r.first, 1024);
  EXPECT_EQ(r.last, 65535);
  r = net::reservable_port_range(PortRange{1200, 65400});  // too little on either side
  EXPECT_EQ(r.first, 1024);
  EXPECT_EQ(r.last, 65535);
}

TEST(PortReservationTest, ReadsTheKernelsEphemeralRange) {
  testing::TempDir dir;
  auto r = net::ephemeral_port_range(dir.write("range", "32768\t60999\n"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first, 32768);
  EXPECT_EQ(r->last, 60999);
  EXPECT_EQ(net::ephemeral_port_range(dir.write("bad", "x y\n")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(net::ephemeral_port_range(dir.path() + "/missing").status().code(), Code::kNotFound);
  EXPECT_TRUE(net::ephemeral_port_range().ok());  // this machine's /proc
}

TEST(PortReservationTest, DefaultReservationIsOutsideTheEphemeralRange) {
  auto eph = net::ephemeral_port_range();
  ASSERT_TRUE(eph.ok()) << eph.status();
  const PortRange range = net::reservable_port_range(*eph);
  if (range.size() == 65535 - 1024 + 1) GTEST_SKIP() << "the ephemeral range covers every port here";
  testing::TempDir dir;
  PortReservationOptions o;
  o.lock_dir = dir.path() + "/locks";
  std::vector<PortReservation> held;
  std::set<int> ports;
  for (int i = 0; i < 20; ++i) {
    auto r = PortReservation::reserve(o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(eph->contains(r->port())) << r->port();
    EXPECT_TRUE(range.contains(r->port())) << r->port();
    EXPECT_TRUE(ports.insert(r->port()).second) << "port " << r->port() << " reserved twice";
    held.push_back(std::move(*r));
  }
  // The process-wide helper (what tests' free_port() uses) too.
  auto p = net::reserve_port_for_process();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(eph->contains(*p)) << *p;
}

// A range of `n` ports that 127.0.0.1 can bind now, with a private lock directory.
PortReservationOptions small_range(const std::string& lock_dir, int n) {
  PortReservationOptions o;
  o.lock_dir = lock_dir;
  auto eph = net::ephemeral_port_range();
  const PortRange all = eph.ok() ? net::reservable_port_range(*eph) : PortRange{20000, 32767};
  // Start where a reservation in the shared directory landed: likely a quiet neighbourhood.
  auto probe = PortReservation::reserve();
  const int first = probe.ok() ? std::min<int>(probe->port(), all.last - n + 1) : all.first;
  o.range = PortRange{static_cast<uint16_t>(first), static_cast<uint16_t>(first + n - 1)};
  return o;
}

// Reserves in a forked child (which holds nothing new of its own) and reports the port it got,
// or 0 when it got none.
int reserve_in_child(const PortReservationOptions& o) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    auto r = PortReservation::reserve(o);
    const int port = r.ok() ? r->port() : 0;
    (void)!write(fds[1], &port, sizeof port);
    _exit(0);
  }
  close(fds[1]);
  int port = -1;
  if (read(fds[0], &port, sizeof port) != sizeof port) port = -1;
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return port;
}

TEST(PortReservationTest, AnotherProcessNeverGetsAHeldPortAndGetsItOnceReleased) {
  testing::TempDir dir;
  const PortReservationOptions o = small_range(dir.path() + "/locks", 8);
  // The parent takes every port of the range it can.
  std::vector<PortReservation> held;
  while (true) {
    auto r = PortReservation::reserve(o);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status();
      break;
    }
    held.push_back(std::move(*r));
  }
  ASSERT_FALSE(held.empty()) << "no port of " << o.range.first << "-" << o.range.last << " was free";
  // A child process finds nothing left while the parent holds them.
  EXPECT_EQ(reserve_in_child(o), 0);
  // Released in the parent: the child gets exactly that port.
  const int released = held.back().port();
  held.pop_back();
  EXPECT_EQ(reserve_in_child(o), released);
}

TEST(PortReservationTest, LockIsReleasedOnDestructionAndFollowsMoves) {
  testing::TempDir dir;
  // A one-port range whose port is free now: another process may hold the first candidate, so
  // walk on to the next ones (never skip: the test must run).
  PortReservationOptions o = small_range(dir.path() + "/locks", 1);
  std::optional<PortReservation> first;
  for (int k = 0; k < 64 && !first; ++k) {
    auto r = PortReservation::reserve(o);
    if (r.ok()) {
      first.emplace(std::move(*r));
      break;
    }
    o.range.first = o.range.last = static_cast<uint16_t>(o.range.first > 20000 ? o.range.first - 1 : o.range.first + 1);
  }
  ASSERT_TRUE(first.has_value()) << "64 single-port ranges were all busy";
  const int port = first->port();
  EXPECT_EQ(PortReservation::reserve(o).status().code(), Code::kUnavailable);
  PortReservation moved = std::move(*first);
  EXPECT_EQ(moved.port(), port);
  EXPECT_EQ(first->port(), 0);  // NOLINT(bugprone-use-after-move): moved-from reports 0
  EXPECT_EQ(PortReservation::reserve(o).status().code(), Code::kUnavailable);
  { PortReservation gone = std::move(moved); }
  auto again = PortReservation::reserve(o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->port(), port);
}

}  // namespace
}  // namespace actorflow
