// Listening ports for local clusters (tests, `actorflow demo`, benchmarks) that cannot collide.
//
// A port picked by binding port 0 comes from the kernel's ephemeral range, which every outgoing
// connection on the machine also draws from: between picking it and binding it for real, another
// process (a concurrently running test's connection) may take it. A PortReservation instead takes a
// port *outside* the ephemeral range (read from /proc/sys/net/ipv4/ip_local_port_range at run time)
// and holds an exclusive flock(2) on `<lock_dir>/<port>.lock` for its lifetime, so no other
// reservation, in this process or any other using the same lock directory, returns the same port
// while it is held. Before returning a port it checks that 127.0.0.1:<port> can be bound.
//
// What it cannot prevent: a program that does not use reservations binding the port on its own.
// Lock files are never deleted (deleting them would race with another process locking them);
// they are empty and there is at most one per port.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "net/socket.h"

namespace actorflow {
namespace net {

// An inclusive range of TCP ports.
struct PortRange {
  uint16_t first = 0;
  uint16_t last = 0;
  // Number of ports in the range (0 when last < first).
  int size() const { return last >= first ? last - first + 1 : 0; }
  bool contains(int port) const { return port >= first && port <= last; }
};

// The kernel's ephemeral port range, parsed from `path` (by default the running kernel's
// /proc/sys/net/ipv4/ip_local_port_range). NotFound / InvalidArgument naming the path when it
// cannot be read or parsed.
Result<PortRange> ephemeral_port_range(const std::string& path = "/proc/sys/net/ipv4/ip_local_port_range");

// The ports reservations draw from, given the ephemeral range: up to 12768 ports just below it
// (never below 1024), or above it when there is more room there; when neither side has at least
// 256 ports (the ephemeral range covers nearly everything), all of 1024-65535 (collisions with
// outgoing connections are then possible again, but not between reservations). Pure function.
PortRange reservable_port_range(const PortRange& ephemeral);

// Where reservations and how many ports they try.
struct PortReservationOptions {
  // Directory of the per-port lock files, created (mode 01777) when missing. Every process that
  // must not collide with another has to use the same directory.
  std::string lock_dir = "/tmp/actorflow-ports";
  // Ports to draw from; the default {0, 0} means reservable_port_range(ephemeral range),
  // or 20000-32767 when the ephemeral range cannot be read.
  PortRange range{};
};

// One reserved port. Move-only RAII: the lock (and so the reservation) is released when the
// object is destroyed. Thread-safety: reserve() may be called from any number of threads and
// processes at once; one PortReservation object is not synchronised. The lock descriptor is
// close-on-exec; a child forked without exec shares it (and so the reservation) until it exits.
class PortReservation {
 public:
  // Reserves a port of `options.range` that no other live reservation holds and that 127.0.0.1
  // can bind now, starting the search at a random port of the range. Unavailable when every port
  // of the range is reserved or in use; an error naming the directory when the lock directory
  // cannot be created or used.
  static Result<PortReservation> reserve(const PortReservationOptions& options = {});

  PortReservation(PortReservation&& o) noexcept : lock_(std::move(o.lock_)), port_(o.port_) { o.port_ = 0; }
  PortReservation& operator=(PortReservation&& o) noexcept {
    if (this != &o) {
      lock_ = std::move(o.lock_);
      port_ = o.port_;
      o.port_ = 0;
    }
    return *this;
  }
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  ~PortReservation() = default;  // closing lock_ releases the flock

  // The reserved port (0 for a moved-from object).
  uint16_t port() const { return port_; }

 private:
  PortReservation(Fd lock, uint16_t port) : lock_(std::move(lock)), port_(port) {}
  Fd lock_;
  uint16_t port_ = 0;
};

// Reserves a port with PortReservation::reserve(default options) and keeps the reservation until
// this process exits (the kernel then releases the lock): for programs and tests that put a local
// cluster together and would otherwise have to keep the objects alive. Thread-safe. Errors as
// PortReservation::reserve.
Result<uint16_t> reserve_port_for_process();

}  // namespace net
}  // namespace actorflow
