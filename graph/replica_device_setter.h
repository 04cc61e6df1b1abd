// tf.train.replica_device_setter: variables go to parameter-server tasks, everything else to the
// worker's device.
//
//   ReplicaDeviceSetter setter(cluster.num_tasks("ps"), "/job:worker/task:1");
//   auto w = ops::variable(setter.for_variable(root, shape, dtype).with_op_name("w"), shape, dtype);
//   auto y = ops::matmul(setter.for_ops(root), x, w);
//
// Not thread-safe (graph construction is single-threaded).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/scope.h"

namespace actorflow {

class ReplicaDeviceSetter {
 public:
  enum class Strategy {
    kRoundRobin,     // variable i goes to ps task i mod num_ps (TF's default)
    kGreedyByBytes,  // each variable goes to the ps task holding the fewest bytes so far
  };
  // `num_ps` parameter-server tasks of job `ps_job`; `worker_device` for every other op.
  ReplicaDeviceSetter(int num_ps, std::string worker_device, Strategy strategy = Strategy::kRoundRobin,
                      std::string ps_job = "ps");

  // The scope a variable of `shape`/`dtype` is created in: root on the chosen ps task.
  Scope for_variable(const Scope& root, const Shape& shape, DType dtype);
  // for_variable as a function, for train::get_partitioned_variable's ShardPlacement (each
  // shard placed as one variable). The function refers to this setter, which must outlive it.
  std::function<Scope(const Scope&, const Shape&, DType)> shard_placement() {
    return [this](const Scope& s, const Shape& shape, DType dtype) { return for_variable(s, shape, dtype); };
  }
  // The scope for the model's other ops: root on the worker device.
  Scope for_ops(const Scope& root) const;
  // Bytes placed on each ps task so far.
  const std::vector<int64_t>& bytes_per_task() const { return bytes_; }

 private:
  int num_ps_;
  std::string worker_device_;
  Strategy strategy_;
  std::string ps_job_;
  int next_ = 0;
  std::vector<int64_t> bytes_;
};

}  // namespace actorflow
