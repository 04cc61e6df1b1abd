// A step's plan, without actors: what the master runs for one (graph, signature, devices,
// placement options). plan_step rewrites the client graph for its feeds and fetches
// (graph/subgraph.h), places it (runtime/placer.h) and partitions it per device with _Send/_Recv
// pairs (runtime/partition.h) (marking it for bfloat16 operands when the options ask,
// graph/mixed_precision.h), and says for each partition which feeds it takes, which fetches it
// returns, and whether it only passes feeds on to other devices. The master (actors/) registers
// the partitions with their devices and runs them; nothing here knows how.
//
// Pure functions of their arguments; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "device/rendezvous_key.h"
#include "graph/subgraph.h"
#include "runtime/partition.h"
#include "runtime/placer.h"

namespace actorflow {

// Feed `arg` goes to the _Recv whose rendezvous key is `key` (another device's; parsed once,
// when the step is planned).
struct FeedForward {
  int arg = 0;
  RendezvousKey key;
};

struct PartitionPlan {
  std::string device;                    // canonical device name
  std::shared_ptr<const Graph> graph;    // the partition
  std::vector<int> arg_indices;          // the feeds its _Args take (indices into the signature's)
  std::vector<int> retval_indices;       // the fetches its _Retvals give
  // True when the partition is only _Arg -> _Send (it passes feeds on to other devices); then
  // `forwards` lists what it sends.
  bool forwarder = false;
  std::vector<FeedForward> forwards;
};

struct StepPlan {
  std::vector<PartitionPlan> partitions;
  std::vector<DType> arg_types;      // per feed, as the graph declares it
  std::vector<Shape> arg_shapes;
  std::vector<std::string> feed_names;
  size_t num_fetches = 0;
  // With opts.log_device_placement: one line per placed node (runtime/placer.h's format).
  std::vector<std::string> placement_log;
};

// Plans one step of `graph` for `sig` over `devices`. Errors: the rewrite's (unknown feed or
// fetch), the placer's (naming the node and its request), the partitioner's.
Result<StepPlan> plan_step(const Graph& graph, const RunSignature& sig, const std::vector<AvailableDevice>& devices,
                           const PlacerOptions& placer, const PartitionOptions& partition = {});

}  // namespace actorflow
