// The authenticated control plane: CAF's BASP runs only on connections that proved membership.
//
// CAF 0.17 publishes an actor by letting its BASP broker accept on a port, and every byte a
// client sends from then on (CAF's handshake, routed messages that claim any source node, exit
// messages, oversized headers) is BASP's to parse. actorflow instead accepts the task's port
// itself (net/preauth_listener.h): a connection first runs actorflow's handshake
// (net/handshake.h, plane "control": mutual HMAC challenge-response with the cluster secret,
// then the cluster-file fingerprint), and only an authenticated connection is handed to the
// BASP broker, which then runs CAF's own handshake on it as on a connection it accepted
// (BASP's `publish_atom` with a scribe). Outgoing connections are the mirror image: connect,
// run the client side, hand the socket to BASP as `connect_atom` does. So authorization is a
// property of the connection, never of a CAF node id (which a peer chooses), and a stranger
// without the secret reaches nothing: not BASP's parser, not any actor.
//
// What a member may do once connected is checked by the node actor (actors/node_actor.h).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "net/handshake.h"
#include "net/preauth_listener.h"

namespace actorflow {

// Serves `whom` (the node actor) on `host:port` behind the handshake. Owns its listening socket
// and thread; authenticated connections belong to CAF's BASP broker once handed over (they stay
// open after the listener is destroyed, until either end closes them). Thread-safe accessors.
class ControlPlaneListener {
 public:
  struct Options {
    net::HandshakeConfig handshake;  // the task's secret, fingerprint and name (plane is set here)
    size_t max_pending = 64;
    std::chrono::milliseconds handshake_timeout{5000};
  };
  // Binds `host:port` (port 0: any) and starts accepting. Unavailable naming the address when it
  // cannot listen (e.g. the port is in use). Requires the middleman module in `sys`.
  static Result<std::unique_ptr<ControlPlaneListener>> start(caf::actor_system& sys, caf::actor whom,
                                                             const std::string& host, uint16_t port, Options opts);
  ~ControlPlaneListener();
  uint16_t port() const { return listener_->port(); }
  net::PreAuthStats stats() const { return listener_->stats(); }

 private:
  ControlPlaneListener() = default;
  std::unique_ptr<net::PreAuthListener> listener_;
};

// Connects to the control plane of the task at `host:port`: TCP connect, the client side of the
// handshake (plane "control"), then CAF's BASP handshake on the same socket. Returns the actor
// published there (the node actor). Blocks the calling thread up to `timeout` (never call it from
// an actor's handler). Errors name `host:port`: Unavailable (unreachable, refused, closed),
// Unauthenticated (secrets differ), FailedPrecondition (another cluster file or protocol),
// DeadlineExceeded. Thread-safe. The connection's traffic is counted per peer (`peer_task`, or
// host:port when empty) in the control-plane metrics (net/conn_traffic.h).
Result<caf::actor> connect_control_plane(caf::actor_system& sys, const std::string& host, uint16_t port,
                                         const net::HandshakeConfig& handshake, std::chrono::milliseconds timeout,
                                         const std::string& peer_task = "");

// The task a control-plane connection of this process proved in actorflow's handshake (or, for
// a connection this process dialled, the task it dialled), by the descriptor CAF's BASP broker
// adopted for it (CAF 0.17's default multiplexer uses it as the connection handle's id). Both
// ControlPlaneListener and connect_control_plane record every connection they hand over; the
// node actor looks its peers' connections up (resolve_peer_task, actors/peer_link.h) to know
// their role (actors/node_actor.h). Entries are checked against the descriptor's inode, so a
// descriptor number reused by another socket never inherits an identity. Thread-safe.
void remember_connection_task(int fd, const std::string& task);
// The task recorded for descriptor `fd` while it is still the same socket, or "" (unknown).
std::string connection_task(int fd);

}  // namespace actorflow
