// The public actorflow API in one include:
//   #include <actorflow/actorflow.h>
//   namespace af = actorflow;
// Tensors, the graph-building API (Scope, ops::), sessions, servers and cluster files.
#pragma once

#include "actors/data_actor.h"
#include "actors/master_actor.h"
#include "actors/membership.h"
#include "actors/server.h"
#include "config/cluster_spec.h"
#include "actors/session.h"
#include "core/status.h"
#include "device/device_spec.h"
#include "graph/ops.h"
#include "graph/scope.h"
#include "graph/tensor.h"
