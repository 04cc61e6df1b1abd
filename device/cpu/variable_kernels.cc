// Kernels of the variable ops: each one is a call on the task's variable actor (through
// OpKernelContext::resources()), answered asynchronously; plus Fill and the seeded random ops.
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/checked_math.h"
#include "device/executor.h"
#include "device/kernel.h"
#include "device/optimizers.h"
#include "device/variable_call.h"

namespace actorflow {
namespace {

// Calls the variable named by attr var_name (or shared_name) with the node's inputs, and sets
// output 0 from the reply, in the kernel's device memory. The call is decoded once, here (the
// kernel keeps it; only the tensors change per step). The same kernel serves CPU and GPU devices:
// the call names the device its arguments live on, and a reply in host memory is copied to a GPU
// kernel's device.
class VariableCallKernel : public AsyncOpKernel {
 public:
  VariableCallKernel(const Node& n, std::shared_ptr<const VariableOp> op)
      : AsyncOpKernel(n),
        op_(std::move(op)),
        resource_(n.attrs.get_or<std::string>("var_name", n.attrs.get_or<std::string>("shared_name", n.name))) {}
  void compute_async(std::shared_ptr<OpKernelContext> ctx, DoneCallback done) override {
    ResourceEnv* env = ctx->resources();
    if (!env) {
      done(ctx->error(Code::kFailedPrecondition, "no variable container on this device"));
      return;
    }
    ResourceCall call;
    call.resource = resource_;
    call.op = op_;
    call.args.reserve(static_cast<size_t>(ctx->num_inputs()));
    for (int i = 0; i < ctx->num_inputs(); ++i) call.args.push_back(ctx->input(i));
    call.step_id = ctx->step_id();
    call.device = ctx->device();
    env->call(std::move(call), [ctx, done](Result<std::vector<Tensor>> r) {
      if (!r.ok()) {
        done(ctx->error(r.status()));
        return;
      }
      if (r->empty() || !(*r)[0].is_initialized()) {
        done(ctx->error(Code::kInternal, "variable actor returned no value"));
        return;
      }
      // As is on a CPU device and for a value already in the GPU's memory.
      auto out = ctx->device()->copy_from_host((*r)[0]);
      if (!out.ok()) {
        done(ctx->error(out.status().code(), out.status().message()));
        return;
      }
      ctx->set_output(0, std::move(*out));
      done(Status::OK());
    });
  }

 private:
  std::shared_ptr<const VariableOp> op_;
  std::string resource_;
};

// Decodes the node's call once; a bad attribute fails the kernel's creation naming the node.
KernelFactory call_factory(const std::string& method) {
  return [method](const Node& n) -> Result<std::unique_ptr<OpKernel>> {
    auto op = decode_variable_op(method, n.attrs);
    if (!op.ok())
      return Status(op.status().code(), n.op + " '" + n.name + "': " + op.status().message());
    return std::unique_ptr<OpKernel>(new VariableCallKernel(n, std::move(*op)));
  };
}

class FillKernel : public OpKernel {
 public:
  explicit FillKernel(const Node& n) : OpKernel(n) {}
  Status compute(OpKernelContext& ctx) override {
    const DType t = ctx.attrs().get_or<DType>("dtype", DType::kFloat32);
    const double v = ctx.attrs().get_or<double>("value", 0.0);
    if (dtype_size(t) == 0) return ctx.invalid_argument("Fill needs a valid 'dtype' attribute");
    // The attribute, not the declared output shape (a peer's GraphDef declares what it likes);
    // allocate_output refuses shapes that are not a tensor's and outputs over max_output_bytes.
    auto shape = ctx.attrs().get<Shape>("shape");
    if (!shape.ok()) return ctx.invalid_argument(shape.status().message());
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, t, *shape));
    dispatch_dtype(t, [&](auto zero) {
      using T = decltype(zero);
      T* d = out->data<T>();
      const T value = saturating_cast<T>(v);
      for (int64_t i = 0; i < out->num_elements(); ++i) d[i] = value;
      return 0;
    });
    return Status::OK();
  }
};

class RandomKernel : public OpKernel {
 public:
  RandomKernel(const Node& n, bool normal) : OpKernel(n), normal_(normal) {}
  Status compute(OpKernelContext& ctx) override {
    const AttrMap& a = ctx.attrs();
    if (a.get_or<DType>("dtype", DType::kFloat32) != DType::kFloat32)
      return ctx.invalid_argument("only float32 random values are supported");
    auto shape = a.get<Shape>("shape");
    if (!shape.ok()) return ctx.invalid_argument(shape.status().message());
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, *shape));
    // The same (seed, seed2) gives the same values on every run.
    const uint64_t seed = static_cast<uint64_t>(a.get_or<int64_t>("seed", 0));
    const uint64_t seed2 = static_cast<uint64_t>(a.get_or<int64_t>("seed2", 0));
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 12345 + seed2 * 0xD1B54A32D192ED03ull);
    float* d = out->data<float>();
    const int64_t n = out->num_elements();
    if (normal_) {
      const double mean = a.get_or<double>("mean", 0.0), stddev = a.get_or<double>("stddev", 1.0);
      std::normal_distribution<double> dist(0.0, 1.0);
      for (int64_t i = 0; i < n; ++i) {
        double z;
        do z = dist(rng);
        while (std::fabs(z) > 2.0);
        d[i] = static_cast<float>(mean + stddev * z);
      }
    } else {
      const double lo = a.get_or<double>("minval", 0.0), hi = a.get_or<double>("maxval", 1.0);
      std::uniform_real_distribution<double> dist(lo, hi);
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(dist(rng));
    }
    return Status::OK();
  }

 private:
  bool normal_;
};

// A kernel for a non-host device computed by the op's CPU kernel: the inputs copied to the
// host, the CPU kernel run there, the outputs copied to the device (the same values as on the CPU).
class HostComputedKernel : public OpKernel {
 public:
  HostComputedKernel(const Node& n, std::unique_ptr<OpKernel> host) : OpKernel(n), host_(std::move(host)) {}
  Status compute(OpKernelContext& ctx) override {
    std::vector<Tensor> in;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      auto h = ctx.device()->copy_to_host(ctx.input(i));
      if (!h.ok()) return ctx.error(h.status().code(), h.status().message());
      in.push_back(std::move(*h));
    }
    OpKernelContext hctx(ctx.node(), host_device(), std::move(in), ctx.step_id(), ctx.resources());
    AF_RETURN_IF_ERROR(host_->compute(hctx));
    for (int o = 0; o < ctx.node().num_outputs(); ++o) {
      auto d = ctx.device()->copy_from_host(hctx.outputs()[static_cast<size_t>(o)]);
      if (!d.ok()) return ctx.error(d.status().code(), d.status().message());
      ctx.set_output(o, std::move(*d));
    }
    return Status::OK();
  }

 private:
  // The host memory the CPU kernel allocates from (a device of no task: never placed on).
  static Device* host_device() {
    static Device* d = make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0).release();
    return d;
  }
  std::unique_ptr<OpKernel> host_;
};

// The ops whose kernel is a call on the task's variable actor, and the actor's method: the
// optimizers' from their table (device/optimizers.h), then the others.
std::vector<std::pair<std::string, std::string>> variable_call_ops() {
  std::vector<std::pair<std::string, std::string>> ops = {
      {"VariableV2", "read"},
      {"Assign", "assign"},
      {"AssignAdd", "assign_add"},
      {"ScatterAdd", "scatter_add"},
      {"ScatterUpdate", "scatter_update"},
      {"IsVariableInitialized", "is_initialized"},
      {"ApplyGradientSync", "apply_sync"},
      {"SparseApplyGradientSync", "sparse_apply_sync"},
      {"SyncAccumulatorControl", "sync_control"},
      {"VariableSlots", "save_slots"},
      {"RestoreVariableSlots", "restore_slots"},
  };
  for (const OptimizerSpec& s : optimizer_specs()) {
    ops.emplace_back(s.dense_op, s.dense_method);
    if (s.sparse_op) ops.emplace_back(s.sparse_op, s.sparse_method);
  }
  return ops;
}

KernelFactory random_factory(bool normal) {
  return [normal](const Node& n) -> Result<std::unique_ptr<OpKernel>> {
    return std::unique_ptr<OpKernel>(new RandomKernel(n, normal));
  };
}

// `host` run on the host for a non-host device.
KernelFactory host_computed(KernelFactory host) {
  return [host](const Node& n) -> Result<std::unique_ptr<OpKernel>> {
    AF_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> k, host(n));
    return std::unique_ptr<OpKernel>(new HostComputedKernel(n, std::move(k)));
  };
}

}  // namespace

void register_variable_kernels(KernelRegistry& r, const std::string& device_type) {
  for (const auto& [op, method] : variable_call_ops()) r.add(op, device_type, call_factory(method));
  const std::vector<std::pair<const char*, KernelFactory>> initializers = {
      {"Fill", simple_factory<FillKernel>()},
      {"RandomUniform", random_factory(false)},
      {"TruncatedNormal", random_factory(true)},
  };
  for (const auto& [op, f] : initializers) r.add(op, device_type, device_type == "CPU" ? f : host_computed(f));
}

void register_cpu_variable_kernels(KernelRegistry& r) { register_variable_kernels(r, "CPU"); }

}  // namespace actorflow
