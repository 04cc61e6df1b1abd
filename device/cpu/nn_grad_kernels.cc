// CPU kernels of the second-order neural-network ops (gradients of gradient ops):
// MaxPoolGradGrad. float32, NHWC, same window rules as MaxPool (device/window_plan.h).
#include <string>

#include "device/kernel.h"
#include "device/window_plan.h"

namespace actorflow {
namespace {

// MaxPoolGradGrad(orig_input, orig_output, grad): output[i] = grad at the first maximum of
// window i of orig_input (0 for a window that covers no input), the position MaxPoolGrad
// routes the pooled gradient to.
class MaxPoolGradGradKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;

  Status compute(OpKernelContext& ctx) override {
    for (int i = 0; i < 3; ++i) {
      if (ctx.input(i).dtype() != DType::kFloat32)
        return ctx.invalid_argument(std::string("CPU kernel supports float32 only, but input ") + std::to_string(i) +
                                    " is " + dtype_name(ctx.input(i).dtype()));
    }
    const Tensor& x = ctx.input(0);
    const Tensor& g = ctx.input(2);
    auto geo = pool_geometry(ctx.attrs(), x.shape());
    if (!geo.ok()) return ctx.invalid_argument(geo.status().message());
    const Shape pooled{geo->n, geo->wh.out, geo->ww.out, geo->c};
    if (ctx.input(1).shape() != pooled)
      return ctx.invalid_argument("orig_output " + ctx.input(1).shape().to_string() +
                                  " does not match the pooled shape " + pooled.to_string());
    if (g.shape() != x.shape())
      return ctx.invalid_argument("grad " + g.shape().to_string() + " does not match orig_input " +
                                  x.shape().to_string());
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, pooled));
    const float* xp = x.data<float>();
    const float* gp = g.data<float>();
    float* op = out->data<float>();
    const int64_t n = out->num_elements();
    for (int64_t i = 0; i < n; ++i) {
      float best = 0;
      const int64_t at = pool_window_argmax(xp, *geo, i, &best);
      op[i] = at < 0 ? 0.f : gp[at];
    }
    return Status::OK();
  }
};

}  // namespace

void register_cpu_nn_grad_kernels(KernelRegistry& r) {
  r.add("MaxPoolGradGrad", "CPU", simple_factory<MaxPoolGradGradKernel>());
}

}  // namespace actorflow
