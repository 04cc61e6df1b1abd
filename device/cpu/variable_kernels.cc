// Kernels of the variable ops: each one is a call on the task's variable actor (through
// OpKernelContext::resources()), answered asynchronously; plus Fill and the seeded random ops.
#include <cmath>
#include <random>

#include "device/executor.h"
#include "device/kernel.h"

namespace actorflow {
namespace {

// Calls method `method` of the variable named by attr var_name (or shared_name) with the
// node's inputs, and sets output 0 from the reply.
class VariableCallKernel : public AsyncOpKernel {
 public:
  VariableCallKernel(const Node& n, std::string method) : AsyncOpKernel(n), method_(std::move(method)) {}
  void compute_async(std::shared_ptr<OpKernelContext> ctx, DoneCallback done) override {
    ResourceEnv* env = ctx->resources();
    if (!env) {
      done(ctx->error(Code::kFailedPrecondition, "no variable container on this device"));
      return;
    }
    ResourceCall call;
    const AttrMap& a = ctx->attrs();
    call.resource = a.get_or<std::string>("var_name", a.get_or<std::string>("shared_name", ctx->node().name));
    call.method = method_;
    for (int i = 0; i < ctx->num_inputs(); ++i) call.args.push_back(ctx->input(i));
    call.attrs = a;
    call.step_id = ctx->step_id();
    env->call(std::move(call), [ctx, done](Result<std::vector<Tensor>> r) {
      if (!r.ok()) {
        done(ctx->error(r.status().code(), r.status().message()));
        return;
      }
      if (r->empty() || !(*r)[0].is_initialized()) {
        done(ctx->error(Code::kInternal, "variable actor returned no value"));
        return;
      }
      ctx->set_output(0, std::move((*r)[0]));
      done(Status::OK());
    });
  }

 private:
  std::string method_;
};

KernelFactory call_factory(const std::string& method) {
  return [method](const Node& n) -> Result<std::unique_ptr<OpKernel>> {
    return std::unique_ptr<OpKernel>(new VariableCallKernel(n, method));
  };
}

class FillKernel : public OpKernel {
 public:
  explicit FillKernel(const Node& n) : OpKernel(n) {}
  Status compute(OpKernelContext& ctx) override {
    const DType t = ctx.attrs().get_or<DType>("dtype", DType::kFloat32);
    const double v = ctx.attrs().get_or<double>("value", 0.0);
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, t, ctx.node().output_shapes[0]));
    dispatch_dtype(t, [&](auto zero) {
      using T = decltype(zero);
      T* d = out->data<T>();
      for (int64_t i = 0; i < out->num_elements(); ++i) d[i] = static_cast<T>(v);
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
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, ctx.node().output_shapes[0]));
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

}  // namespace

void register_cpu_variable_kernels(KernelRegistry& r) {
  r.add("VariableV2", "CPU", call_factory("read"));
  r.add("Assign", "CPU", call_factory("assign"));
  r.add("AssignAdd", "CPU", call_factory("assign_add"));
  r.add("ScatterAdd", "CPU", call_factory("scatter_add"));
  r.add("SparseApplyGradientDescent", "CPU", call_factory("sparse_apply_sgd"));
  r.add("SparseApplyMomentum", "CPU", call_factory("sparse_apply_momentum"));
  r.add("SparseApplyAdam", "CPU", call_factory("sparse_apply_adam"));
  r.add("SparseApplyAdagrad", "CPU", call_factory("sparse_apply_adagrad"));
  r.add("ScatterUpdate", "CPU", call_factory("scatter_update"));
  r.add("IsVariableInitialized", "CPU", call_factory("is_initialized"));
  r.add("ApplyGradientDescent", "CPU", call_factory("apply_sgd"));
  r.add("ApplyMomentum", "CPU", call_factory("apply_momentum"));
  r.add("ApplyAdam", "CPU", call_factory("apply_adam"));
  r.add("ApplyAdagrad", "CPU", call_factory("apply_adagrad"));
  r.add("ApplyRMSProp", "CPU", call_factory("apply_rms_prop"));
  r.add("ApplyGradientSync", "CPU", call_factory("apply_sync"));
  r.add("SparseApplyGradientSync", "CPU", call_factory("sparse_apply_sync"));
  r.add("SyncAccumulatorControl", "CPU", call_factory("sync_control"));
  r.add("VariableSlots", "CPU", call_factory("save_slots"));
  r.add("RestoreVariableSlots", "CPU", call_factory("restore_slots"));
  r.add("Fill", "CPU", simple_factory<FillKernel>());
  r.add("RandomUniform", "CPU", [](const Node& n) -> Result<std::unique_ptr<OpKernel>> {
    return std::unique_ptr<OpKernel>(new RandomKernel(n, false));
  });
  r.add("TruncatedNormal", "CPU", [](const Node& n) -> Result<std::unique_ptr<OpKernel>> {
    return std::unique_ptr<OpKernel>(new RandomKernel(n, true));
  });
}

}  // namespace actorflow
