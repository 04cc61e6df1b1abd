#include "graph/replica_device_setter.h"

#include <algorithm>

#include "graph/op_kinds.h"

namespace actorflow {

ReplicaDeviceSetter::ReplicaDeviceSetter(int num_ps, std::string worker_device, Strategy strategy, std::string ps_job)
    : num_ps_(num_ps), worker_device_(std::move(worker_device)), strategy_(strategy), ps_job_(std::move(ps_job)),
      bytes_(static_cast<size_t>(std::max(num_ps, 0)), 0) {}

Scope ReplicaDeviceSetter::for_variable(const Scope& root, const Shape& shape, DType dtype) {
  if (num_ps_ <= 0) return for_ops(root);  // no ps: variables live with the worker
  return root.with_device(next_ps_device(shape, dtype));
}

std::string ReplicaDeviceSetter::next_ps_device(const Shape& shape, DType dtype) {
  int task;
  if (strategy_ == Strategy::kGreedyByBytes) {
    task = static_cast<int>(std::min_element(bytes_.begin(), bytes_.end()) - bytes_.begin());
  } else {
    task = next_++ % num_ps_;
  }
  const int64_t n = shape.num_elements();
  bytes_[static_cast<size_t>(task)] += (n > 0 ? n : 0) * static_cast<int64_t>(dtype_size(dtype));
  return "/job:" + ps_job_ + "/task:" + std::to_string(task);
}

DeviceFunction ReplicaDeviceSetter::device_function() {
  return [this](const Graph&, const Node& n) -> std::string {
    if (is_variable_op(n.op) && num_ps_ > 0) {
      const Shape shape = n.attrs.get_or<Shape>("shape", Shape());
      const DType dtype = n.attrs.get_or<DType>("dtype", DType::kFloat32);
      return next_ps_device(shape, dtype);
    }
    return worker_device_;
  };
}

Scope ReplicaDeviceSetter::for_ops(const Scope& root) const {
  return worker_device_.empty() ? root : root.with_device(worker_device_);
}

}  // namespace actorflow
