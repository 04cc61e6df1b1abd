// The detached actors of a Server, and the wait for their release before its actor system ends.
//
// CAF 0.17.6 ends an actor system by stopping its modules (the middleman and its multiplexer
// first) and then waiting, without a bound, until every detached actor's thread ended; a detached
// actor's thread ends only once the actor object is destroyed, that is once its last strong
// reference is released. An actor that ends unregisters from the system *before* it sends its
// exit notices (caf::local_actor::cleanup), so await_all_actors_done() may return while such a
// notice is still on its way. When a remote node holds a proxy of the actor, CAF's BASP broker
// monitors it, and that notice (a down_msg whose sender is a strong reference to the actor) goes
// to the broker's mailbox. If it arrives after the middleman stopped the broker, nothing ever
// reads it (a broker's cleanup does not drain its mailbox): the reference lives as long as the
// broker, the broker as long as the multiplexer, and the multiplexer is destroyed only after the
// wait for the detached threads — which therefore never returns. (Found with
// scripts/gdb/teardown_holders.py on a parameter server whose teardown hung; docs/testing.md.)
//
// So a Server records every detached actor it spawns, right after spawning it (before its handle
// goes anywhere, so before any remote node can hold a proxy of it), by attaching a functor to it.
// CAF runs an ending actor's attached functors and monitors newest first, so this one runs after
// every exit notice attached later — the broker's among them — was put into its receiver's
// mailbox. Before it destroys its actor system the Server waits, bounded, until that functor ran
// for each recorded actor: a notice to the broker is then queued ahead of the middleman's stop,
// and the broker reads it (releasing the reference it holds) before it stops. Waiting for the
// actors' destruction instead would also wait for references that the actor clock holds until
// a request's timeout, which its own shutdown releases.
#pragma once

#include <caf/actor_control_block.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>

#include "core/status.h"

namespace actorflow {

class DetachedActors {
 public:
  // Records `actor`, a detached actor just spawned whose handle went nowhere yet (null is
  // ignored): attaches the functor that marks it ended once its exit notices went out. An actor
  // that already ended is marked at once. Thread-safe; the functor stays valid if this object is
  // destroyed first.
  void add(const caf::strong_actor_ptr& actor);

  // Waits until every recorded actor ended and sent its exit notices, up to `bound`. OK then;
  // DeadlineExceeded naming how many (and their actor ids) are still running past the bound.
  // Thread-safe.
  Status await_ended(std::chrono::milliseconds bound);

  // The number of recorded actors that did not end yet. Thread-safe.
  size_t running() const;

 private:
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::set<uint64_t> running;  // actor ids; guarded by mu
  };
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

}  // namespace actorflow
