#include "actors/data_actor.h"

#include <deque>

#include "actors/messages.h"

namespace actorflow {
namespace {

using ready_atom = caf::atom_constant<caf::atom("ready")>;
// The data actor's interface with its private wake-up.
using data_impl_t = data_actor_t::extend<caf::reacts_to<ready_atom>>;

struct DataState {
  // Destroyed with the state when the actor ends: ~Prefetcher stops and joins its thread.
  std::unique_ptr<Prefetcher> prefetcher;
  std::deque<caf::response_promise> waiting;
  static constexpr const char* name = "data";
};
using DataActor = data_impl_t::stateful_base<DataState>;

// Serves waiting requests while elements are ready.
void serve(DataActor* self) {
  auto& st = self->state;
  while (!st.waiting.empty()) {
    auto r = st.prefetcher->try_next();
    if (!r) return;  // nothing ready yet; on_ready will wake us
    auto rp = st.waiting.front();
    st.waiting.pop_front();
    if (!r->ok()) rp.deliver(to_caf_error(r->status()));
    else if (!r->value()) rp.deliver(to_caf_error(OutOfRange("end of the input data")));
    else rp.deliver(std::move(*r->value()));
  }
}

data_impl_t::behavior_type data_actor(DataActor* self, std::shared_ptr<DatasetIterator> it, size_t depth) {
  caf::weak_actor_ptr weak = caf::actor_cast<caf::weak_actor_ptr>(self);
  self->state.prefetcher = std::make_unique<Prefetcher>(std::move(*it), depth, [weak] {
    if (auto strong = caf::actor_cast<data_impl_t>(weak.lock())) caf::anon_send(strong, ready_atom::value);
  });
  // No attach_functor for stopping it: CAF destroys the state (and with it the Prefetcher, whose
  // destructor stops and joins its thread) before it runs attached functors, so one touching
  // self->state would use freed memory (found by AddressSanitizer: the rare "double free or
  // corruption" when a worker process shut down).
  return {
      [=](next_atom) -> caf::result<std::vector<Tensor>> {
        auto rp = self->make_response_promise();
        self->state.waiting.push_back(rp);
        serve(self);
        return caf::delegated<std::vector<Tensor>>();
      },
      [=](ready_atom) { serve(self); },
  };
}

}  // namespace

data_actor_t spawn_data_actor(caf::actor_system& sys, DatasetIterator it, size_t depth) {
  return sys.spawn(data_actor, std::make_shared<DatasetIterator>(std::move(it)), depth);
}

Result<std::vector<Tensor>> next_batch(caf::actor_system& sys, const data_actor_t& data,
                                       std::chrono::milliseconds timeout) {
  ScopedActor self{sys};
  Result<std::vector<Tensor>> out = Internal("no answer from the data actor");
  self->request(data, timeout, next_atom::value)
      .receive([&](std::vector<Tensor>& v) { out = std::move(v); },
               [&](caf::error& e) { out = from_caf_error(e, "data actor"); });
  return out;
}

}  // namespace actorflow
