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

#include <string>

namespace actorflow {

// Asynchronously closes this process's direct BASP connection to `peer` (no-op when there is
// none, e.g. the peer is only reachable through a third node, or already gone). `why` is
// logged at WARNING with the peer's node id when the connection is found and closed. Requires
// the middleman module to be loaded in `sys`. Thread-safe.
void close_peer_connection(caf::actor_system& sys, const caf::node_id& peer, const std::string& why);

}  // namespace actorflow
