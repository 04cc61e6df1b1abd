// Closing one peer's control-plane (CAF/BASP) connection from this process.
//
// CAF 0.17.6 has no public call that closes the connection to one remote node: the middleman
// only unpublishes or closes listening ports (`middleman::unpublish`, `close_atom`), which
// leaves established connections open. The BASP broker that owns the connections does expose
// its routing table (`instance.tbl()`), `connection_cleanup` and `close` publicly, and CAF
// itself disconnects a node by exactly `connection_cleanup(hdl); close(hdl)` when a connection
// times out. close_peer_connection does the same on the middleman's I/O thread (where the
// broker runs, so no locking is needed): the peer's proxies here are killed and its socket is
// shut down gracefully (data already queued, such as an error reply, is still written). The
// peer observes a closed connection: its proxies of our actors go down
// (exit reason remote_link_unreachable) and its requests in flight fail.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace actorflow {

// Asynchronously closes this process's direct BASP connection to `peer` (no-op when there is
// none, e.g. the peer is only reachable through a third node, or already gone). `why` is
// logged at WARNING with the peer's node id when the connection is found and closed. Requires
// the middleman module to be loaded in `sys`. Thread-safe.
void close_peer_connection(caf::actor_system& sys, const caf::node_id& peer, const std::string& why);

// Finds, on the middleman's I/O thread, `peer`'s direct BASP connection and the task recorded for
// it when it was handed over (connection_task, actors/control_plane.h), then calls `done` there
// with that task, or "" when the peer has no direct connection or one this process did not hand
// over (unknown). `done` must be quick and thread-safe (e.g. send a message). If the broker is
// gone (the system is stopping) `done` is not called. Thread-safe.
void resolve_peer_task(caf::actor_system& sys, const caf::node_id& peer, std::function<void(std::string)> done);

// Closes this process's BASP connections that never completed CAF's own handshake (a TCP
// client on the node's port that sends nothing, or garbage CAF cannot parse into a handshake):
// CAF 0.17 keeps those open forever. With `node_port` and `authenticated` set, it also closes
// connections accepted on `node_port` whose node completed CAF's handshake but never
// authenticated with the node actor (never said hello: the node actor's own deadline only
// covers nodes that did). Connections this process opened (to peers it contacted) and other
// ports' connections (an embedding service's own) are left alone. Each sweep() looks at every
// connection on the middleman's I/O thread; one still in either state `limit` after a sweep
// first saw it is closed and logged at WARNING with its remote address. Call sweep()
// periodically (every limit / 2 bounds detection to 1.5 x limit). Thread-safe; the object may
// be destroyed while a sweep is queued.
class SilentConnectionSweeper {
 public:
  // `authenticated(node)` is called on the middleman thread: cheap, thread-safe, no blocking.
  SilentConnectionSweeper(caf::actor_system& sys, std::chrono::milliseconds limit, uint16_t node_port = 0,
                          std::function<bool(const caf::node_id&)> authenticated = nullptr);
  // Sweeps queued but not yet run do nothing once the sweeper is gone (its owner, the node
  // actor, ends before the middleman stops).
  ~SilentConnectionSweeper();
  SilentConnectionSweeper(const SilentConnectionSweeper&) = delete;
  SilentConnectionSweeper& operator=(const SilentConnectionSweeper&) = delete;
  void sweep();
  std::chrono::milliseconds limit() const { return limit_; }

 private:
  struct Seen;  // first-seen times, only touched on the middleman thread
  caf::actor_system& sys_;
  std::chrono::milliseconds limit_;
  uint16_t node_port_;
  std::function<bool(const caf::node_id&)> authenticated_;
  std::shared_ptr<Seen> seen_;
};

}  // namespace actorflow
