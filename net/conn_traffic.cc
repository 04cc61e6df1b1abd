#include "net/conn_traffic.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <vector>

#include "core/logging.h"
#include "core/metrics.h"
#include "net/socket.h"

namespace actorflow {
namespace net {
namespace {

// One dump of `family`'s TCP sockets over netlink socket `nl`, keeping those in `want`.
Status dump_family(int nl, int family, const std::set<uint64_t>& want, std::map<uint64_t, TcpCounters>* out) {
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof msg;
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  msg.req.sdiag_family = static_cast<uint8_t>(family);
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0u;  // every state: a closing connection still reports its counts
  msg.req.idiag_ext = 1 << (INET_DIAG_INFO - 1);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(nl, &msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
    return Unavailable(std::string("sock_diag: cannot send the dump request: ") + std::strerror(errno));
  std::vector<char> buf(64 << 10);
  while (true) {
    const ssize_t n = ::recv(nl, buf.data(), buf.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Unavailable(std::string("sock_diag: ") + std::strerror(errno));
    }
    int len = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type == NLMSG_DONE) return Status::OK();
      if (h->nlmsg_type == NLMSG_ERROR) {
        const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
        return Unavailable(std::string("sock_diag: ") + std::strerror(-e->error));
      }
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) continue;
      const auto* d = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      if (!want.count(d->idiag_inode)) continue;
      int alen = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof *d));
      for (auto* a = reinterpret_cast<rtattr*>(const_cast<inet_diag_msg*>(d) + 1); RTA_OK(a, alen); a = RTA_NEXT(a, alen)) {
        if (a->rta_type != INET_DIAG_INFO) continue;
        // The kernel sends as much of struct tcp_info as it knows: read each field only when
        // the attribute reaches it.
        tcp_info ti{};
        const size_t have = std::min(static_cast<size_t>(RTA_PAYLOAD(a)), sizeof ti);
        std::memcpy(&ti, RTA_DATA(a), have);
        auto has = [&](size_t end) { return have >= end; };
        TcpCounters c;
        if (has(offsetof(tcp_info, tcpi_bytes_sent) + sizeof ti.tcpi_bytes_sent) && ti.tcpi_bytes_sent)
          c.bytes_sent = ti.tcpi_bytes_sent;
        else if (has(offsetof(tcp_info, tcpi_bytes_acked) + sizeof ti.tcpi_bytes_acked))
          c.bytes_sent = ti.tcpi_bytes_acked;
        if (has(offsetof(tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received))
          c.bytes_received = ti.tcpi_bytes_received;
        if (has(offsetof(tcp_info, tcpi_segs_in) + sizeof ti.tcpi_segs_in)) {
          c.segs_out = ti.tcpi_segs_out;
          c.segs_in = ti.tcpi_segs_in;
        }
        (*out)[d->idiag_inode] = c;
      }
    }
  }
}

Counter& plane_counter(const char* name, const char* help, const std::string& peer) {
  return Metrics::global().counter(name, help, {{"peer", peer}});
}

}  // namespace

uint64_t socket_inode(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

Result<std::map<uint64_t, TcpCounters>> tcp_counters(const std::set<uint64_t>& inodes) {
  std::map<uint64_t, TcpCounters> out;
  if (inodes.empty()) return out;
  const int nl = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return Unavailable(std::string("sock_diag: cannot open a netlink socket: ") + std::strerror(errno));
  Fd guard(nl);
  timeval tv{1, 0};  // the kernel answers at once; never hang a scrape on it
  ::setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  AF_RETURN_IF_ERROR(dump_family(nl, AF_INET, inodes, &out));
  AF_RETURN_IF_ERROR(dump_family(nl, AF_INET6, inodes, &out));
  return out;
}

ConnectionTraffic& ConnectionTraffic::control_plane() {
  static ConnectionTraffic* t = [] {
    auto* c = new ConnectionTraffic();  // leaked: the registry's collector refers to it
    Metrics::global().add_collector([c] { c->refresh(); });
    return c;
  }();
  return *t;
}

void ConnectionTraffic::track(int fd, const std::string& peer) {
  const uint64_t inode = socket_inode(fd);
  if (inode == 0) return;
  std::lock_guard<std::mutex> l(mu_);
  conns_[inode] = Conn{peer, {}};
}

size_t ConnectionTraffic::tracked() const {
  std::lock_guard<std::mutex> l(mu_);
  return conns_.size();
}

void ConnectionTraffic::refresh() {
  std::lock_guard<std::mutex> l(mu_);  // one refresh at a time: growth is counted once
  if (conns_.empty()) return;
  std::set<uint64_t> inodes;
  for (const auto& [inode, c] : conns_) inodes.insert(inode);
  auto now = tcp_counters(inodes);
  if (!now.ok()) {
    if (!warned_) {
      AF_LOG(WARNING) << "control-plane traffic is not measured: " << now.status();
    }
    warned_ = true;
    return;
  }
  for (auto it = conns_.begin(); it != conns_.end();) {
    auto f = now->find(it->first);
    if (f == now->end()) {  // closed (and gone from the kernel's tables)
      it = conns_.erase(it);
      continue;
    }
    Conn& c = it->second;
    const TcpCounters& n = f->second;
    auto grow = [](uint64_t now_v, uint64_t seen) { return static_cast<int64_t>(now_v > seen ? now_v - seen : 0); };
    plane_counter("actorflow_control_plane_sent_bytes_total", "Bytes this task sent on control-plane connections, per peer.", c.peer)
        .inc(grow(n.bytes_sent, c.seen.bytes_sent));
    plane_counter("actorflow_control_plane_received_bytes_total",
                  "Bytes this task received on control-plane connections, per peer.", c.peer)
        .inc(grow(n.bytes_received, c.seen.bytes_received));
    plane_counter("actorflow_control_plane_sent_segments_total",
                  "TCP segments this task sent on control-plane connections, per peer.", c.peer)
        .inc(grow(n.segs_out, c.seen.segs_out));
    plane_counter("actorflow_control_plane_received_segments_total",
                  "TCP segments this task received on control-plane connections, per peer.", c.peer)
        .inc(grow(n.segs_in, c.seen.segs_in));
    c.seen = n;
    ++it;
  }
}

}  // namespace net
}  // namespace actorflow
