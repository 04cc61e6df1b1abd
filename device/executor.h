// The non-blocking dataflow executor of one graph partition on one device.
//
// An Executor is built once per registered partition: it creates every node's kernel and
// precomputes the edges. A StepExecution runs one step of it: run() executes every ready
// node in this thread and returns as soon as nothing more is ready — when the step is
// done, failed, or waiting for a _Recv tensor (or an asynchronous kernel) that has not
// arrived. It never blocks. The owner (a device actor) calls deliver() when a tensor
// arrives and then run() again, so a scheduler thread is never held while waiting.
//
// Thread-safety: an Executor is immutable after create() and may be shared by concurrent
// steps. A StepExecution is single-threaded (its actor's thread).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/step_trace.h"
#include "device/device.h"
#include "device/kernel.h"
#include "device/rendezvous_key.h"
#include "graph/graph.h"

namespace actorflow {

class Counter;

// A kernel that finishes later: compute_async() starts the work and calls done(status)
// exactly once, on the thread that owns the step (the device actor routes replies so).
class AsyncOpKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  using DoneCallback = std::function<void(Status)>;
  Status compute(OpKernelContext&) final { return Internal("AsyncOpKernel::compute called"); }
  virtual void compute_async(std::shared_ptr<OpKernelContext> ctx, DoneCallback done) = 0;
};

class Executor {
 public:
  // Builds kernels for every node of `graph` on `device` (device->type() picks the kernels).
  // Errors name the node: "no CPU kernel for MatMul 'c'". `graph` must be acyclic.
  // `kernel_factory` overrides kernel creation for some ops (used by the runtime for
  // _Send/_Recv-like ops it implements); return nullptr to fall back to the registry.
  using KernelOverride = std::function<Result<std::unique_ptr<OpKernel>>(const Node&)>;
  static Result<std::shared_ptr<const Executor>> create(std::shared_ptr<const Graph> graph, Device* device,
                                                          KernelOverride override_fn = nullptr);

  const Graph& graph() const { return *graph_; }
  Device* device() const { return device_; }
  int num_args() const { return num_args_; }
  int num_retvals() const { return num_retvals_; }
  // Expected dtype/shape of _Arg i, for validating feeds.
  DType arg_dtype(int i) const { return arg_types_[static_cast<size_t>(i)]; }
  const Shape& arg_shape(int i) const { return arg_shapes_[static_cast<size_t>(i)]; }
  const std::string& arg_name(int i) const { return arg_names_[static_cast<size_t>(i)]; }
  // True when no kernel is asynchronous (AsyncOpKernel: resource calls) and there is no _Send:
  // given every _Recv tensor up front, one StepExecution::run() ends the step without waiting
  // for anything or sending anything anywhere.
  bool self_contained() const { return self_contained_; }
  // The rendezvous keys of the _Recv nodes, in node order.
  const std::vector<std::string>& recv_keys() const { return recv_keys_; }
  // The parsed form of _Recv key `wire` (parsed once, by create()), or null when `wire` is no
  // _Recv's key or does not parse as a RendezvousKey (a test's free-form key). The pointer lives
  // as long as this executor.
  const RendezvousKey* parsed_recv_key(const std::string& wire) const;

 private:
  friend class StepExecution;
  struct OutEdge { int dst; int slot; };  // slot -1 = control edge
  struct NodeInfo {
    std::unique_ptr<OpKernel> kernel;
    // This op type's kernel CPU time and calls (actorflow_kernel_*_total{op}); null without a kernel.
    Counter* kernel_us = nullptr;
    Counter* kernel_calls = nullptr;
    int num_inputs = 0;
    int initial_pending = 0;
    std::vector<std::vector<OutEdge>> out_edges;  // per output
    std::vector<int> control_out;
    int arg_index = -1, retval_index = -1;
    RendezvousKey send_key;  // _Send: its key, parsed once (valid() only for a _Send)
    std::string recv_key;    // _Recv: its key (tensors are matched by the wire form)
  };
  Executor() = default;
  std::shared_ptr<const Graph> graph_;
  Device* device_ = nullptr;
  std::vector<NodeInfo> nodes_;
  std::vector<int> roots_;
  int num_args_ = 0, num_retvals_ = 0;
  std::vector<DType> arg_types_;
  std::vector<Shape> arg_shapes_;
  std::vector<std::string> arg_names_;
  bool self_contained_ = true;
  std::vector<std::string> recv_keys_;
  std::unordered_map<std::string, RendezvousKey> parsed_recv_keys_;
};

class StepExecution {
 public:
  // Called when a _Send node runs with its tensor and its key (attr tensor_name, parsed once
  // when the executor was created; valid for the call only). Must not block; an error fails the
  // step.
  using SendFn = std::function<Status(const RendezvousKey& key, const Tensor& t)>;

  // `args` must hold num_args() tensors (already validated by the caller).
  // `resources` (may be null) is handed to kernels; it must outlive the step.
  StepExecution(std::shared_ptr<const Executor> ex, int64_t step_id, std::vector<Tensor> args, SendFn send,
                ResourceEnv* resources = nullptr);

  // Runs every ready node; returns when done, failed or blocked. Safe to call repeatedly.
  void run();
  // Supplies the tensor for _Recv key `key`; it may arrive before the _Recv is reached.
  void deliver(const std::string& key, Tensor t);
  // Fails the step with `s` (e.g. a peer task died). Pending work is dropped.
  void abort(const Status& s);

  // The executor this step runs (borrowed; shared by the step).
  const Executor& executor() const { return *ex_; }
  bool done() const { return finished_ || !status_.ok(); }
  const Status& status() const { return status_; }
  int64_t step_id() const { return step_id_; }
  // The fetched tensors, by _Retval index. Valid once done() with an OK status.
  std::vector<Tensor>& retvals() { return retvals_; }
  // The _Recv keys this step still waits for (diagnostics for timeouts).
  std::vector<std::string> waiting_for() const;

 private:
  void process(int node_id);
  void finish_node(int node_id, std::vector<Tensor> outputs);
  void activate(int node_id);
  // Traced steps only (trace_ set): one "op" event of `node` from `start_ns` to now.
  void trace_op(int node_id, int64_t start_ns, std::vector<std::pair<std::string, int64_t>> nums = {});
  // Traced steps only: an instant `kind` event named `key` (a tensor reached this device).
  void trace_instant(const std::string& kind, const std::string& key, int64_t bytes);

  std::shared_ptr<const Executor> ex_;
  int64_t step_id_;
  ResourceEnv* resources_ = nullptr;
  SendFn send_;
  std::vector<Tensor> args_;
  std::vector<std::vector<Tensor>> inputs_;
  std::vector<int> pending_;
  std::vector<int> ready_;
  std::unordered_map<std::string, Tensor> inbox_;
  std::unordered_map<std::string, int> waiting_recv_;  // key -> node
  int outstanding_ = 0;  // nodes not yet completed
  int async_in_flight_ = 0;
  std::vector<Tensor> retvals_;
  Status status_;
  bool finished_ = false;
  bool running_ = false;
  std::shared_ptr<bool> alive_;
  // The step's trace in this process when the step is traced (core/step_trace.h), else null:
  // every recording below is behind `if (trace_)`.
  std::shared_ptr<StepTrace> trace_;
  std::unordered_map<int, int64_t> recv_parked_ns_;  // traced: when each parked _Recv was reached
};

// Runs `graph` once on `device` in this thread, for tests and tools: rewrites it for the
// given feeds and fetches (see graph/subgraph.h), then executes every node on `device`.
// Errors name the node that failed. Precondition: the graph has no _Send/_Recv.
Result<std::vector<Tensor>> run_local(const Graph& graph, const std::vector<std::string>& fetches,
                                      const std::map<std::string, Tensor>& feeds, Device* device,
                                      const std::vector<std::string>& targets = {},
                                      ResourceEnv* resources = nullptr);

}  // namespace actorflow
