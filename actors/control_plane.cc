#include "actors/control_plane.h"
#include "actors/messages.h"

#include "net/conn_traffic.h"

#include <caf/io/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/network/default_multiplexer.hpp>

#include <sys/stat.h>

#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>

#include "core/logging.h"
#include "net/socket.h"
#include "net/stream.h"
#include "net/tls.h"

namespace actorflow {
namespace {

caf::actor basp_broker(caf::actor_system& sys) {
  return sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
}

std::string endpoint(const std::string& host, uint16_t port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// (device, inode) of an open descriptor, or {0, 0}.
std::pair<uint64_t, uint64_t> socket_identity(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return {0, 0};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

struct ConnectionTasks {
  std::mutex mu;
  // descriptor -> (its socket's identity when recorded, task); one entry per descriptor number,
  // so the map is bounded by the process's descriptor limit.
  std::unordered_map<int, std::pair<std::pair<uint64_t, uint64_t>, std::string>> by_fd;
};
ConnectionTasks& connection_tasks() {
  static ConnectionTasks* t = new ConnectionTasks();  // never destroyed: BASP threads may look up at exit
  return *t;
}

}  // namespace

void remember_connection_task(int fd, const std::string& task) {
  const auto id = socket_identity(fd);
  auto& t = connection_tasks();
  std::lock_guard<std::mutex> l(t.mu);
  t.by_fd[fd] = {id, task};
}

std::string connection_task(int fd) {
  const auto id = socket_identity(fd);
  if (id.second == 0) return "";
  auto& t = connection_tasks();
  std::lock_guard<std::mutex> l(t.mu);
  auto it = t.by_fd.find(fd);
  return it != t.by_fd.end() && it->second.first == id ? it->second.second : std::string();
}

Result<std::unique_ptr<ControlPlaneListener>> ControlPlaneListener::start(caf::actor_system& sys, caf::actor whom,
                                                                          const std::string& host, uint16_t port,
                                                                          Options opts) {
  AF_ASSIGN_OR_RETURN(net::Fd fd, net::listen_tcp(host, port));
  const uint16_t bound = net::local_port(fd.get());
  net::PreAuthListener::Options lo;
  lo.handshake = std::move(opts.handshake);
  lo.handshake.plane = net::Plane::kControl;
  lo.what = "control plane";
  lo.max_pending = opts.max_pending;
  lo.handshake_timeout = opts.handshake_timeout;
  caf::actor broker = basp_broker(sys);
  caf::strong_actor_ptr published = caf::actor_cast<caf::strong_actor_ptr>(whom);
  caf::actor_system* sysp = &sys;
  auto on_auth = [sysp, broker, published, bound](std::unique_ptr<net::Stream> conn, const net::PeerIdentity& id,
                                                  const std::string& addr) {
    // Its traffic is measured from the kernel's counters (net/conn_traffic.h), by the TCP
    // socket's inode (the same socket under TLS, where the relay owns it).
    net::ConnectionTraffic::control_plane().track(conn->fd(), id.task_name);
    // BASP reads sockets only: a TLS session moves to a relay here (net/tls.h).
    Result<net::Fd> fd = net::Stream::into_fd(std::move(conn), addr);
    if (!fd.ok()) {
      AF_LOG(WARNING) << "control plane: " << addr << " (task '" << id.task_name << "'): " << fd.status();
      return;
    }
    // BASP takes the socket over: it sends its server handshake naming `published` at `bound`.
    // The task it proved goes with the descriptor (its role at the node actor).
    remember_connection_task(fd->get(), id.task_name);
    caf::io::scribe_ptr scribe = sysp->middleman().backend().new_scribe(fd->release());
    AF_LOG(INFO) << "control plane: " << addr << " (task '" << id.task_name << "') authenticated";
    caf::anon_send(broker, caf::publish_atom_v, std::move(scribe), bound, published, std::set<std::string>{});
  };
  std::unique_ptr<ControlPlaneListener> l(new ControlPlaneListener());
  AF_ASSIGN_OR_RETURN(l->listener_, net::PreAuthListener::start(std::move(fd), std::move(lo), std::move(on_auth)));
  return l;
}

ControlPlaneListener::~ControlPlaneListener() = default;

Result<caf::actor> connect_control_plane(caf::actor_system& sys, const std::string& host, uint16_t port,
                                         const net::HandshakeConfig& handshake, std::chrono::milliseconds timeout,
                                         const std::string& peer_task) {
  const std::string addr = endpoint(host, port);
  const auto deadline = net::Clock::now() + timeout;
  AF_ASSIGN_OR_RETURN(net::Fd tcp, net::connect_tcp(addr, timeout));
  net::HandshakeConfig hs = handshake;
  hs.plane = net::Plane::kControl;
  hs.timeout = std::max<std::chrono::milliseconds>(
      std::chrono::milliseconds(1),
      std::min(hs.timeout, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - net::Clock::now())));
  std::unique_ptr<net::Stream> conn;
  if (hs.tls) {
    // TLS first; the handshake runs inside it, then BASP over a relay's plaintext end.
    AF_ASSIGN_OR_RETURN(conn, net::tls_connect(std::move(tcp), *hs.tls, host, addr, deadline, peer_task));
  } else {
    conn = std::make_unique<net::Stream>(std::move(tcp));
  }
  AF_RETURN_IF_ERROR(net::client_handshake(*conn, hs, addr));
  net::ConnectionTraffic::control_plane().track(conn->fd(), peer_task.empty() ? addr : peer_task);
  AF_ASSIGN_OR_RETURN(net::Fd fd, net::Stream::into_fd(std::move(conn), addr));
  // The peer is the task this process dialled ("" when the caller did not name one: unknown).
  remember_connection_task(fd.get(), peer_task);
  caf::io::scribe_ptr scribe = sys.middleman().backend().new_scribe(fd.release());
  ScopedActor self{sys};
  Result<caf::actor> out = Unavailable("control plane of " + addr + ": no answer to CAF's handshake");
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - net::Clock::now());
  self->request(basp_broker(sys), std::max(left, std::chrono::milliseconds(100)), caf::connect_atom_v,
                std::move(scribe), port)
      .receive(
          [&](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
            if (!ptr) {
              out = Unavailable("control plane of " + addr + ": no actor is published there");
              return;
            }
            out = caf::actor_cast<caf::actor>(std::move(ptr));
          },
          [&](caf::error& e) {
            out = Unavailable("control plane of " + addr + ": CAF's handshake failed: " + sys.render(e));
          });
  return out;
}

}  // namespace actorflow
