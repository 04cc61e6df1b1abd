// The options a cluster file sets: ServerOptions (a task's [server] options merged with its
// [tasks."job/N"] overrides, from ClusterSpec::server_options) and SupervisorOptions ([supervisor],
// from ClusterSpec::supervisor). Plain value types, thread-safe to read; every key and its default
// is documented in docs/cluster-file.md.
//
//   #include <actorflow/cluster.h>
//   #include <actorflow/cluster_options.h>
//   auto c = af::ClusterSpec::from_file("cluster.toml");
//   double secs = c->supervisor().save_checkpoint_secs;
//
// Not included by <actorflow/actorflow.h>: include it where options are read, so that adding a
// cluster-file option recompiles only that code. Brings no CAF header.
#pragma once

#include "actorflow/cluster.h"
#include "config/cluster_spec.h"
