// Bounds on what a remote client (a `_` job: a client session, a tool) can make a node hold.
//
// Replies to a client travel over its control-plane (CAF/BASP) connection, and CAF 0.17's broker
// buffers what it writes there without limit: a client that sends run requests and stops reading
// its socket made a node hold every reply (measured: 0.35 -> 2.19 GB, then bad_alloc in the
// broker; docs/security.md, "Bounded buffers"). The node therefore keeps, per client node:
//   - runs in flight: at most `max_runs` client runs at once; one more is refused with
//     ResourceExhausted naming the client and the limit (nothing runs for it);
//   - unread reply bytes: before a run's reply is handed to CAF, the bytes CAF still holds for
//     that connection (the broker's write buffer, read on the middleman thread, the only thread
//     that touches it) plus the replies admitted and not yet written are counted; when the reply
//     would take that past `max_backlog_bytes` (and something is already queued: one reply larger
//     than the limit alone still goes out), the client is not reading its replies: its connection
//     is closed hard (SO_LINGER 0 and shutdown: CAF drops what it queued, the kernel what it
//     held), with a WARNING naming the client, its backlog and the limit, and the run answers
//     ResourceExhausted (which goes nowhere). Honest clients read continuously (their middleman
//     thread does), so only a stalled or hostile one has a backlog.
//   - every other reply (ping, devices, a refused request, CAF's own error replies): small, so
//     not admitted one by one; instead every message a remote node sends the node actor has that
//     node's backlog checked on the middleman thread (note_request, called from the node actor's
//     mailbox; one check per node queued at a time, so a flood costs no more than one pending
//     check). A client (its connection proved a `_` job, or an unknown name; members are trusted
//     and never closed here) whose unread bytes are past `max_backlog_bytes` is closed as above.
//     A reply larger than the limit that went out alone is allowed for until the backlog falls
//     back under the limit.
// Memory held for one client is then at most about max_runs replies being computed, plus twice
// max_backlog_bytes (the admitted bytes, plus the batch CAF is writing, which it no longer shows),
// plus the small replies to the requests read while one check was queued.
//
// Thread-safety: every method may be called from any thread; the object must outlive the
// callbacks it posts (hold it in a shared_ptr; posted work holds a weak reference).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "core/status.h"

namespace actorflow {

class ClientReplyBudget : public std::enable_shared_from_this<ClientReplyBudget> {
 public:
  struct Limits {
    size_t max_backlog_bytes = size_t{256} << 20;  // unread reply bytes per client connection
    int max_runs = 16;                             // client runs in flight per client node
  };
  // The defaults above, or ACTORFLOW_MAX_CLIENT_BACKLOG_BYTES / ACTORFLOW_MAX_CLIENT_RUNS when set
  // to positive integers (other values are ignored with a WARNING). Thread-safe.
  static Limits limits_from_env();

  // `sys` (borrowed; must outlive this object's use) has the middleman loaded.
  static std::shared_ptr<ClientReplyBudget> create(caf::actor_system& sys, Limits limits);

  // A run of client `client` (named `who` in errors) starts: OK (then call end_run once it ends),
  // or ResourceExhausted naming the client and the limit when it has max_runs in flight.
  Status begin_run(const caf::node_id& client, const std::string& who);
  void end_run(const caf::node_id& client);

  // Before a reply of `bytes` goes to `client`: OK when it may go (the bytes are then counted as
  // admitted; call release() once the reply was handed to CAF), or ResourceExhausted after the
  // client's connection was closed for not reading (see the file comment). Blocks the caller for
  // one round trip to the middleman thread, at most 10 s (then OK, not counted, with a WARNING).
  Status admit(const caf::node_id& client, const std::string& who, size_t bytes);
  void release(const caf::node_id& client, size_t bytes);

  // A message from remote node `from` reached the node actor (any message: its reply, if any,
  // goes back on `from`'s connection). Does not block: queues a check of `from`'s backlog on the
  // middleman thread unless one is queued already; the check closes a client's connection as
  // admit() does when what it has not read is past max_backlog_bytes (members are never closed).
  void note_request(const caf::node_id& from);

  const Limits& limits() const { return limits_; }

 private:
  ClientReplyBudget(caf::actor_system& sys, Limits limits) : sys_(sys), limits_(limits) {}
  caf::actor_system& sys_;
  const Limits limits_;
  std::mutex mu_;
  std::map<caf::node_id, int> runs_;         // guarded by mu_
  std::map<caf::node_id, size_t> admitted_;  // guarded by mu_
  // A reply larger than the limit admitted alone: its size, until the backlog is under the limit.
  std::map<caf::node_id, size_t> oversize_;  // guarded by mu_
  std::set<caf::node_id> checks_queued_;     // note_request's checks not run yet; guarded by mu_
};

}  // namespace actorflow
