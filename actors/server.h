// The runtime's view of af::Server: the public class (include/actorflow/server.h) plus the
// CAF and runtime types its embedding and runtime members use. Code inside actorflow keeps
// including this header; programs include <actorflow/server.h> or, to embed actors,
// <actorflow/embedding.h>.
#pragma once

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actorflow/server.h"
#include "actors/control_plane.h"
#include "actors/device_actor.h"
#include "actors/direct_step.h"
#include "actors/membership.h"
#include "actors/messages.h"
#include "config/cluster.h"
#include "core/status.h"
#include "device/device.h"
