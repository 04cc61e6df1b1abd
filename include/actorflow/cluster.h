// Clusters: which tasks make up a job, where they listen, and the options of each task's server.
//
//   #include <actorflow/cluster.h>
//   auto c = af::ClusterSpec::from_file("cluster.toml");            // actorflow's TOML cluster file
//   auto t = af::cluster_from_tf_config_file("tf_config.json");      // TF_CONFIG-style JSON
//   auto s = af::Server::create(*c, af::TaskId{"worker", 0});        // <actorflow/server.h>
//
// ClusterSpec comes from config/cluster.h, TaskId and the address helpers from config/task_id.h;
// the TensorFlow-style readers (TF_CONFIG JSON, --ps_hosts/--worker_hosts flags) from
// config/tf_cluster.h. Every declaration there documents its errors and thread-safety (value
// types; the readers are pure functions). Brings no CAF header.
//
// The options a cluster file sets (ServerOptions from ClusterSpec::server_options,
// SupervisorOptions from ClusterSpec::supervisor) are forward-declared here: code that reads them
// also includes <actorflow/cluster_options.h>, which <actorflow/actorflow.h> leaves out so that a
// new cluster-file option recompiles only the code that reads options.
#pragma once

#include "config/cluster.h"
#include "config/task_id.h"
#include "config/tf_cluster.h"
