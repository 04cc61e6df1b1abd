// GPU optimizer updates for variables that live in GPU memory: the SgdUpdateF,
// MomentumUpdateF, AdamUpdateF, AdagradUpdateF and RmsPropUpdateF functors of
// device/functors.h applied elementwise on the
// device's stream (in place, no wait). Shapes and dtypes must match (float32 or float64);
// errors say which operand is wrong. Not thread-safe for the same tensors (the variable's
// owner serialises updates).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "device/cuda/gpu_device.h"
#include "tensor/tensor.h"

namespace actorflow {

// w -= lr * g.
Status gpu_apply_sgd(GpuDevice& dev, Tensor& w, const Tensor& g, double lr);
// a = momentum * a + g; w -= lr * a (or the Nesterov form).
Status gpu_apply_momentum(GpuDevice& dev, Tensor& w, Tensor& accum, const Tensor& g, double lr, double momentum,
                          bool use_nesterov);
// Adam with bias correction for update number t >= 1.
Status gpu_apply_adam(GpuDevice& dev, Tensor& w, Tensor& m, Tensor& v, const Tensor& g, double lr, double beta1,
                      double beta2, double epsilon, int64_t t);
// accum += g^2; w -= lr * g / sqrt(accum). The caller creates accum (initial_accumulator_value).
Status gpu_apply_adagrad(GpuDevice& dev, Tensor& w, Tensor& accum, const Tensor& g, double lr);
// ms = decay*ms + (1-decay)*g^2; mom = momentum*mom + lr*g/sqrt(ms+epsilon); w -= mom. The
// caller creates ms (TF 1.x: ones) and mom (zeros).
Status gpu_apply_rms_prop(GpuDevice& dev, Tensor& w, Tensor& ms, Tensor& mom, const Tensor& g, double lr,
                          double decay, double momentum, double epsilon);

}  // namespace actorflow
