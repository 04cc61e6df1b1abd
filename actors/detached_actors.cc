#include "actors/detached_actors.h"

#include <caf/abstract_actor.hpp>
#include <caf/error.hpp>

#include <string>

namespace actorflow {

void DetachedActors::add(const caf::strong_actor_ptr& actor) {
  if (!actor) return;
  const uint64_t id = actor->id();
  {
    std::lock_guard<std::mutex> l(shared_->mu);
    shared_->running.insert(id);
  }
  std::weak_ptr<Shared> weak = shared_;
  // Runs on the actor's own thread at its end, after the notices attached later were sent (or
  // at once, here, when the actor ended already).
  actor->get()->attach_functor([weak, id](const caf::error&) {
    auto s = weak.lock();
    if (!s) return;
    std::lock_guard<std::mutex> l(s->mu);
    s->running.erase(id);
    s->cv.notify_all();
  });
}

size_t DetachedActors::running() const {
  std::lock_guard<std::mutex> l(shared_->mu);
  return shared_->running.size();
}

Status DetachedActors::await_ended(std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> l(shared_->mu);
  if (shared_->cv.wait_for(l, bound, [&] { return shared_->running.empty(); })) return Status::OK();
  std::string ids;
  for (uint64_t id : shared_->running) ids += (ids.empty() ? "#" : ", #") + std::to_string(id);
  return DeadlineExceeded(std::to_string(shared_->running.size()) + " detached actor(s) still running after " +
                          std::to_string(bound.count()) + " ms: " + ids);
}

}  // namespace actorflow
