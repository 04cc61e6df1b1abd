#include "device/cuda/optimizer_kernels.h"

#include <string>

#include "device/cuda/cuda_status.h"
#include "device/cuda/gpu_kernel.h"
#include "device/functors.h"

namespace actorflow {
namespace {

template <class T, class F>
__global__ void update1_kernel(T* w, const T* g, int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    f(w[i], g[i]);
}

template <class T, class F>
__global__ void update2_kernel(T* w, T* s, const T* g, int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    f(w[i], s[i], g[i]);
}

template <class T, class F>
__global__ void update3_kernel(T* w, T* s1, T* s2, const T* g, int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    f(w[i], s1[i], s2[i], g[i]);
}

Status check_like(const Tensor& w, const Tensor& t, const char* what) {
  if (t.dtype() != w.dtype() || t.shape() != w.shape())
    return InvalidArgument(std::string(what) + " is " + t.debug_string() + " but the variable is " + w.debug_string());
  if (t.on_host()) return InvalidArgument(std::string(what) + " is in host memory, expected device memory");
  return Status::OK();
}

Status check_dtype(const Tensor& w) {
  if (w.dtype() != DType::kFloat32 && w.dtype() != DType::kFloat64)
    return Unimplemented(std::string("GPU optimizer updates need float32 or float64 variables, got ") +
                         dtype_name(w.dtype()));
  if (w.on_host()) return InvalidArgument("the variable is in host memory, expected device memory");
  return Status::OK();
}

}  // namespace

Status gpu_apply_sgd(GpuDevice& dev, Tensor& w, const Tensor& g, double lr) {
  AF_RETURN_IF_ERROR(check_dtype(w));
  AF_RETURN_IF_ERROR(check_like(w, g, "the gradient"));
  const int64_t n = w.num_elements();
  if (n == 0) return Status::OK();
  AF_RETURN_IF_ERROR(dev.activate());
  if (w.dtype() == DType::kFloat32)
    update1_kernel<<<num_blocks(n), kThreadsPerBlock, 0, dev.stream()>>>(
        w.data<float>(), g.data<float>(), n, functors::SgdUpdateF<float>{static_cast<float>(lr)});
  else
    update1_kernel<<<num_blocks(n), kThreadsPerBlock, 0, dev.stream()>>>(w.data<double>(), g.data<double>(), n,
                                                                          functors::SgdUpdateF<double>{lr});
  return cuda_launch_status("SGD update kernel");
}

Status gpu_apply_momentum(GpuDevice& dev, Tensor& w, Tensor& accum, const Tensor& g, double lr, double momentum,
                          bool use_nesterov) {
  AF_RETURN_IF_ERROR(check_dtype(w));
  AF_RETURN_IF_ERROR(check_like(w, accum, "the accumulator"));
  AF_RETURN_IF_ERROR(check_like(w, g, "the gradient"));
  const int64_t n = w.num_elements();
  if (n == 0) return Status::OK();
  AF_RETURN_IF_ERROR(dev.activate());
  if (w.dtype() == DType::kFloat32) {
    functors::MomentumUpdateF<float> f{static_cast<float>(lr), static_cast<float>(momentum), use_nesterov};
    update2_kernel<<<num_blocks(n), kThreadsPerBlock, 0, dev.stream()>>>(w.data<float>(), accum.data<float>(),
                                                                          g.data<float>(), n, f);
  } else {
    functors::MomentumUpdateF<double> f{lr, momentum, use_nesterov};
    update2_kernel<<<num_blocks(n), kThreadsPerBlock, 0, dev.stream()>>>(w.data<double>(), accum.data<double>(),
                                                                          g.data<double>(), n, f);
  }
  return cuda_launch_status("Momentum update kernel");
}

Status gpu_apply_adam(GpuDevice& dev, Tensor& w, Tensor& m, Tensor& v, const Tensor& g, double lr, double beta1,
                      double beta2, double epsilon, int64_t t) {
  if (t < 1) return InvalidArgument("Adam update number must be >= 1, got " + std::to_string(t));
  AF_RETURN_IF_ERROR(check_dtype(w));
  AF_RETURN_IF_ERROR(check_like(w, m, "the first moment (m)"));
  AF_RETURN_IF_ERROR(check_like(w, v, "the second moment (v)"));
  AF_RETURN_IF_ERROR(check_like(w, g, "the gradient"));
  const int64_t n = w.num_elements();
  if (n == 0) return Status::OK();
  AF_RETURN_IF_ERROR(dev.activate());
  if (w.dtype() == DType::kFloat32) {
    auto f = functors::AdamUpdateF<float>::make(static_cast<float>(lr), static_cast<float>(beta1),
                                                static_cast<float>(beta2), static_cast<float>(epsilon), t);
    update3_kernel<<<num_blocks(n), kThreadsPerBlock, 0, dev.stream()>>>(w.data<float>(), m.data<float>(),
                                                                          v.data<float>(), g.data<float>(), n, f);
  } else {
    auto f = functors::AdamUpdateF<double>::make(lr, beta1, beta2, epsilon, t);
    update3_kernel<<<num_blocks(n), kThreadsPerBlock, 0, dev.stream()>>>(w.data<double>(), m.data<double>(),
                                                                          v.data<double>(), g.data<double>(), n, f);
  }
  return cuda_launch_status("Adam update kernel");
}

}  // namespace actorflow
