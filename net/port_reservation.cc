#include "net/port_reservation.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <vector>

namespace actorflow {
namespace net {
namespace {

constexpr int kMinPort = 1024;
constexpr int kMaxPort = 65535;
constexpr int kMaxSpan = 12768;  // 20000-32767 below Linux's default ephemeral range
constexpr int kMinUsefulSpan = 256;
constexpr PortRange kFallbackRange{20000, 32767};

std::string errno_text(int err) { return std::strerror(err); }

// True when 127.0.0.1:`port` can be bound now (without SO_REUSEADDR: a port with connections
// still lingering in TIME_WAIT is skipped too).
bool bindable(uint16_t port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

Status ensure_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 01777) == 0) {
    ::chmod(dir.c_str(), 01777);  // mkdir applies the umask; other users' processes lock here too
    return Status::OK();
  }
  if (errno != EEXIST) return Unavailable("cannot create the port lock directory " + dir + ": " + errno_text(errno));
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return FailedPrecondition("port lock directory " + dir + " is not a directory");
  return Status::OK();
}

}  // namespace

Result<PortRange> ephemeral_port_range(const std::string& path) {
  std::ifstream f(path);
  if (!f) return NotFound("cannot read the ephemeral port range from " + path);
  long first = 0, last = 0;
  if (!(f >> first >> last) || first < 1 || last > kMaxPort || first > last)
    return InvalidArgument("cannot parse the ephemeral port range in " + path);
  return PortRange{static_cast<uint16_t>(first), static_cast<uint16_t>(last)};
}

PortRange reservable_port_range(const PortRange& ephemeral) {
  const int below_last = ephemeral.first - 1;
  const int below_first = std::max(kMinPort, below_last - kMaxSpan + 1);
  const int below = below_last >= below_first ? below_last - below_first + 1 : 0;
  const int above_first = ephemeral.last + 1;
  const int above_last = std::min(kMaxPort, above_first + kMaxSpan - 1);
  const int above = above_last >= above_first ? above_last - above_first + 1 : 0;
  if (std::max(below, above) < kMinUsefulSpan) return PortRange{kMinPort, kMaxPort};
  if (below >= above) return PortRange{static_cast<uint16_t>(below_first), static_cast<uint16_t>(below_last)};
  return PortRange{static_cast<uint16_t>(above_first), static_cast<uint16_t>(above_last)};
}

Result<PortReservation> PortReservation::reserve(const PortReservationOptions& options) {
  PortRange range = options.range;
  if (range.first == 0 && range.last == 0) {
    auto eph = ephemeral_port_range();
    range = eph.ok() ? reservable_port_range(*eph) : kFallbackRange;
  }
  if (range.size() == 0 || range.first == 0)
    return InvalidArgument("empty port range " + std::to_string(range.first) + "-" + std::to_string(range.last));
  AF_RETURN_IF_ERROR(ensure_dir(options.lock_dir));
  // A random start, so concurrent processes rarely contend for the same lock files.
  std::random_device rd;
  std::mt19937 gen(rd() ^ static_cast<unsigned>(::getpid()) ^
                   static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
  const int n = range.size();
  const int start = std::uniform_int_distribution<int>(0, n - 1)(gen);
  int locked_elsewhere = 0, in_use = 0;
  for (int i = 0; i < n; ++i) {
    const uint16_t port = static_cast<uint16_t>(range.first + (start + i) % n);
    const std::string path = options.lock_dir + "/" + std::to_string(port) + ".lock";
    Fd fd(::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0666));
    if (!fd.valid()) {
      // Another user's lock file we cannot open: its port is someone else's.
      if (errno == EACCES) {
        ++locked_elsewhere;
        continue;
      }
      return Unavailable("cannot open port lock file " + path + ": " + errno_text(errno));
    }
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK || errno == EINTR) {
        ++locked_elsewhere;
        continue;
      }
      return Unavailable("cannot lock " + path + ": " + errno_text(errno));
    }
    if (!bindable(port)) {
      ++in_use;
      continue;  // fd's destructor releases the lock
    }
    return PortReservation(std::move(fd), port);
  }
  return Unavailable("no free port in " + std::to_string(range.first) + "-" + std::to_string(range.last) + " (" +
                     std::to_string(locked_elsewhere) + " reserved under " + options.lock_dir + ", " +
                     std::to_string(in_use) + " in use)");
}

Result<uint16_t> reserve_port_for_process() {
  AF_ASSIGN_OR_RETURN(PortReservation r, PortReservation::reserve());
  static std::mutex mu;
  static auto* held = new std::vector<PortReservation>();  // never destroyed: held until exit
  const uint16_t port = r.port();
  std::lock_guard<std::mutex> l(mu);
  held->push_back(std::move(r));
  return port;
}

}  // namespace net
}  // namespace actorflow
