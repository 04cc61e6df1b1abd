// The runtime's view of af::Session: the public class (include/actorflow/session.h) plus the
// actor-level types its embedding members use (caf::actor, RunRequest, run_atom). Code inside
// actorflow keeps including this header; programs include <actorflow/session.h> or, to embed
// actors, <actorflow/embedding.h>.
#pragma once

#include <caf/all.hpp>

#include "actorflow/session.h"
#include "actors/messages.h"
