// The data actor: a worker's input pipeline. It owns a Prefetcher that reads, shuffles and
// batches ahead of the training step on its own thread, and hands out batches on request
// without blocking any scheduler thread (requests that arrive before a batch is ready wait
// in the actor as response promises).
//
// Message interface (data_actor_t in actors/interfaces.h):
//   (next_atom) -> std::vector<Tensor>    the next element (e.g. {images, labels});
//                                          OutOfRange at the end of the data, or the pipeline's error
#pragma once

#include <caf/all.hpp>

#include "actors/interfaces.h"
#include "data/dataset.h"

namespace actorflow {

// next_atom and data_actor_t (the interface): actors/interfaces.h.

// Spawns a data actor over `it` that keeps up to `depth` elements ready.
data_actor_t spawn_data_actor(caf::actor_system& sys, DatasetIterator it, size_t depth = 4);

// Blocking helper for client threads: asks `data` for the next element, waiting at most
// `timeout`. Errors: OutOfRange at the end, DeadlineExceeded, or the pipeline's error.
Result<std::vector<Tensor>> next_batch(caf::actor_system& sys, const data_actor_t& data,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace actorflow
