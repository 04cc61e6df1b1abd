// The public actorflow API in one include:
//   #include <actorflow/actorflow.h>
//   namespace af = actorflow;
// Tensors and the graph-building API (Scope, ops::: <actorflow/graph.h>), input pipelines
// (<actorflow/data.h>), cluster files (<actorflow/cluster.h>), servers (<actorflow/server.h>),
// sessions (<actorflow/session.h>), training (optimizers, Saver, Supervisor,
// MonitoredTrainingSession: <actorflow/train.h>, <actorflow/monitored_session.h>) and layers
// (tf.compat.v1.layers: <actorflow/layers.h>).
//
// None of these headers brings a CAF header: a program that does not embed actors compiles
// without CAF's headers (tests/public_headers_test.sh checks it). A C++ service that runs
// actorflow inside its own CAF actor system includes <actorflow/embedding.h> instead (or too).
#pragma once

#include "actorflow/cluster.h"
#include "actorflow/data.h"
#include "actorflow/graph.h"
#include "actorflow/layers.h"
#include "actorflow/monitored_session.h"
#include "actorflow/saver.h"
#include "actorflow/server.h"
#include "actorflow/session.h"
#include "actorflow/supervisor.h"
#include "actorflow/train.h"
