// OpKernel, OpKernelContext and the kernel registry.
//
// A kernel is created once per node when a partition is registered (so attribute errors
// surface early) and then computes once per step. compute() may be called from any thread
// but never concurrently for the same kernel instance unless the kernel says it is
// stateless (all built-in kernels are: they keep no per-call state in members).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "device/device.h"
#include "graph/graph.h"

namespace actorflow {

// A call on a named resource of this task (a variable actor): `op`, decoded once when the
// calling kernel was constructed (device/variable_call.h: the VariableCall, its method name and
// attributes), with this step's tensor arguments. Implemented by the runtime (actors/), so
// kernels stay free of CAF.
struct VariableOp;  // device/variable_call.h
// Where a replicated call came from ([supervisor] ps_replicas = 2, actors/ps_replication.h): set
// only by the backup task's node actor on a call it received from a primary ps task as a typed
// replicate message, never derived from the op's attributes, so no graph can make a call look
// replicated. Plain value.
struct ReplicaOrigin {
  // The primary's task (the one its node named in its authenticated hello); "" when unknown.
  std::string primary_task;
};

struct ResourceCall {
  std::string resource;                   // the variable's shared name
  std::shared_ptr<const VariableOp> op;   // shared by every call of the kernel; never null when sent
  std::vector<Tensor> args;
  int64_t step_id = 0;
  // The calling kernel's device: where `args` live (null or a host device: host memory). A
  // variable whose kernels run on a GPU keeps its value there (actors/variable_actor.h). The
  // device outlives the call (it outlives the task's actors).
  Device* device = nullptr;
  // The task whose step made this call ("/job:worker/replica:0/task:1"; "" when unknown), set by
  // the device actor that runs the step: a synchronous contribution's accumulator names whose
  // contributions are missing (actors/sync_waits.h). Data of the call, not of the op.
  std::string caller_task;
  // Traced steps only (core/step_trace.h): when the calling kernel's device sent the call, in
  // the trace clock (the variable actor's event shows how long the call queued); 0 otherwise.
  int64_t sent_ns = 0;
  // Set: a primary's call replicated to this task's backup copy (the variable actor applies it as
  // a backup and never forwards it). Nullopt: a direct call (a kernel's).
  std::optional<ReplicaOrigin> replica;
  // The op's method name and attributes (op must be set; defined in device/variable_call.cc).
  const std::string& method() const;
  const AttrMap& attrs() const;
};
using ResourceDone = std::function<void(Result<std::vector<Tensor>>)>;

class ResourceEnv {
 public:
  virtual ~ResourceEnv() = default;
  // Starts `call`; `done` runs exactly once on the thread that owns the step (the device actor):
  // inside call() when served at once (actors/resources.h InlineResource), else later.
  virtual void call(ResourceCall call, ResourceDone done) = 0;
};

class OpKernelContext {
 public:
  // A context for one call of `node`'s kernel. An uninitialised input (a Tensor() that came from
  // a peer or a feed) is recorded in status(): the caller must not run the kernel then.
  OpKernelContext(const Node& node, Device* device, std::vector<Tensor> inputs, int64_t step_id,
                  ResourceEnv* resources = nullptr);

  // The task's resources (variables); null where the runtime provides none (run_local).
  ResourceEnv* resources() const { return resources_; }

  const Node& node() const { return node_; }
  const AttrMap& attrs() const { return node_.attrs; }
  Device* device() const { return device_; }
  Allocator* allocator() const { return device_->allocator(); }
  int64_t step_id() const { return step_id_; }

  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  // Input i; an index outside [0, num_inputs()) gives an uninitialised Tensor (kernels of
  // variadic ops check num_inputs() first; nothing is read past the inputs).
  const Tensor& input(int i) const;
  // Moves input i out (for kernels that forward their input's buffer); Tensor() outside the range.
  Tensor release_input(int i);

  // Allocates output i from the device allocator and returns a pointer to it (owned by the
  // context). InvalidArgument naming the op when `shape` is not a tensor's (Tensor::allocate:
  // not fully defined, over the rank or element limits) or the node has no output i;
  // ResourceExhausted naming the op, the request and the allocator when the allocator refuses or
  // the bytes are over max_output_bytes().
  Result<Tensor*> allocate_output(int i, DType dtype, const Shape& shape);
  // Sets output i to `t` (e.g. forwarding an input buffer without copying). An output the node
  // does not declare is never written: the call is recorded in status() and `t` dropped.
  void set_output(int i, Tensor t);
  std::vector<Tensor>& outputs() { return outputs_; }
  // OK, or the first misuse recorded: an uninitialised input (from the constructor), an output
  // index the node does not declare. Callers fail the kernel with it (device/executor.cc).
  const Status& status() const { return status_; }

  // An error Status with the node named: "<Op> '<name>': <msg>".
  Status error(Code code, const std::string& msg) const;
  // `s` (not OK) named the same way: "<op> '<node>': <message>", its typed detail kept.
  Status error(const Status& s) const;
  Status invalid_argument(const std::string& msg) const { return error(Code::kInvalidArgument, msg); }

 private:
  const Node& node_;
  Device* device_;
  std::vector<Tensor> inputs_;
  int64_t step_id_;
  std::vector<Tensor> outputs_;
  ResourceEnv* resources_;
  Status status_;
};

// The most bytes one kernel output may have on a host device (CPU kernels, whose outputs sizes a
// peer can steer through shapes, attributes and index values): larger requests are refused with
// ResourceExhausted naming the op before anything is allocated. Defaults to half the host's
// physical memory (at least 1 GiB), or ACTORFLOW_MAX_OUTPUT_BYTES when set. Thread-safe.
size_t max_output_bytes();
// Sets max_output_bytes() (0 restores the default). For tests and servers that know their budget;
// thread-safe.
void set_max_output_bytes(size_t bytes);

class OpKernel {
 public:
  explicit OpKernel(const Node& node) : node_(node) {}
  virtual ~OpKernel() = default;
  // Computes the outputs from ctx's inputs. Returns an error naming the node on failure.
  virtual Status compute(OpKernelContext& ctx) = 0;
  const Node& node() const { return node_; }

 private:
  const Node& node_;  // owned by the partition graph, which outlives the kernel
};

// Creates a kernel for `node` (validating attrs) or returns an error naming the node.
using KernelFactory = std::function<Result<std::unique_ptr<OpKernel>>(const Node& node)>;

class KernelRegistry {
 public:
  // The process-wide registry with all built-in kernels. Thread-safe after first use.
  static KernelRegistry& global();
  // Registers a factory for (op, device_type). Start-up only.
  void add(const std::string& op, const std::string& device_type, KernelFactory factory);
  bool has(const std::string& op, const std::string& device_type) const;
  // Creates the kernel of `node` for `device_type`; NotFound "no GPU kernel for MatMul 'c'"
  // when missing, InvalidArgument when the node's input count is not its op's (a fixed-arity op).
  Result<std::unique_ptr<OpKernel>> create(const Node& node, const std::string& device_type) const;
  // Every registration as (op, device_type), sorted by op, then device type; each pair once.
  // For tools and tests that walk the kernels of a device type (tests/gpu_backend_ops_test.cc
  // compares every GPU kernel with its CPU kernel). Thread-safe after start-up (no add() running).
  std::vector<std::pair<std::string, std::string>> registered() const;

 private:
  std::map<std::pair<std::string, std::string>, KernelFactory> factories_;
};

// Helper for the common case: a kernel class with constructor (const Node&).
template <typename K>
KernelFactory simple_factory() {
  return [](const Node& n) -> Result<std::unique_ptr<OpKernel>> { return std::unique_ptr<OpKernel>(new K(n)); };
}

// Registration hooks, one per family, called by KernelRegistry::global().
void register_core_kernels(KernelRegistry& r);   // Const, Identity, NoOp, shape-only ops (device-independent)
void register_cpu_math_kernels(KernelRegistry& r);   // device/cpu/math_kernels.cc
void register_cpu_array_kernels(KernelRegistry& r);  // device/cpu/array_kernels.cc
void register_cpu_nn_kernels(KernelRegistry& r);  // device/cpu/nn_kernels.cc (oneDNN)
void register_cpu_nn_grad_kernels(KernelRegistry& r);  // device/cpu/nn_grad_kernels.cc (second-order ops)
void register_cpu_variable_kernels(KernelRegistry& r);  // device/cpu/variable_kernels.cc: register_variable_kernels(r, "CPU")
// The variable ops (calls on the task's variable actors, naming the kernel's device) and the
// initializers Fill, RandomUniform and TruncatedNormal (computed on the host, then copied to a
// non-host device) for `device_type` (device/cpu/variable_kernels.cc; the GPU backend registers
// them for "GPU"). Start-up only.
void register_variable_kernels(KernelRegistry& r, const std::string& device_type);
void register_cpu_indexing_kernels(KernelRegistry& r);  // device/cpu/indexing_kernels.cc
// SaveV2 and RestoreV2 (device/cpu/io_kernels.cc): TensorFlow checkpoints on the kernel's machine.
void register_cpu_io_kernels(KernelRegistry& r);
// Every kernel: register_core_kernels, then every backend's (register_backend_kernels,
// device/backends.h).
void register_all_kernels(KernelRegistry& r);

}  // namespace actorflow
