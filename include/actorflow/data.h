// Input pipelines (tf.data): Dataset and its transformations (map, batch, shuffle, repeat,
// prefetch, ...), from data/dataset.h, and the IDX (MNIST) readers of data/idx.h, whose
// declarations document ownership and thread-safety.
// Feed a pipeline's batches to Session::run; an actor system can also serve one
// (spawn_data_actor, <actorflow/embedding.h>). Brings no CAF header.
#pragma once

#include "data/dataset.h"
#include "data/idx.h"
