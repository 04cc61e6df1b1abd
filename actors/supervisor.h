// The runtime's view of af::Supervisor: the public class (include/actorflow/supervisor.h) plus
// the session's actor-level types. Programs include <actorflow/train.h>.
#pragma once

#include "actorflow/supervisor.h"
#include "actors/session.h"
