// tf.train.replica_device_setter: variables go to parameter-server tasks, everything else to the
// worker's device.
//
//   ReplicaDeviceSetter setter(cluster.num_tasks("ps"), "/job:worker/task:1");
//   Scope s = root.with_device_function(setter.device_function());   // with tf.device(setter):
//   auto w = train::get_variable(s, "w", shape);                      //   on /job:ps/task:k
//   auto y = ops::matmul(s, x, w);                                    //   on the worker
// or, per variable:
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
  // As TensorFlow's `with tf.device(replica_device_setter(...))`, for Scope::with_device_function:
  // each variable op (VariableV2, VarHandleOp, ...) created under it goes to the next ps task (as
  // for_variable chooses, its shape and dtype from its attributes), every other op to the
  // worker device. The ops that read or update a variable in place (Assign, Apply*, ...) are not
  // asked: their builders request the variable's device themselves (graph/ops_variables.h). The
  // function refers to this setter, which must outlive it.
  DeviceFunction device_function();
  // Bytes placed on each ps task so far.
  const std::vector<int64_t>& bytes_per_task() const { return bytes_; }

 private:
  // The ps task device the next variable of `shape`/`dtype` goes to (the strategy's choice).
  std::string next_ps_device(const Shape& shape, DType dtype);

  int num_ps_;
  std::string worker_device_;
  Strategy strategy_;
  std::string ps_job_;
  int next_ = 0;
  std::vector<int64_t> bytes_;
};

}  // namespace actorflow
