#include "device/cuda/optimizer_kernels.h"

#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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

// Checks w and `slots` (same dtype and shape as w, in device memory) and g, then launches the
// update kernel for the number of slots with the functor make(T{}) for w's element type
// (float32 or float64). `what` names the update in errors ("Adam update kernel").
template <class Make>
Status launch_update(GpuDevice& dev, Tensor& w, std::initializer_list<std::pair<Tensor*, const char*>> slots,
                     const Tensor& g, const char* what, Make make) {
  AF_RETURN_IF_ERROR(check_dtype(w));
  for (const auto& [t, name] : slots) AF_RETURN_IF_ERROR(check_like(w, *t, name));
  AF_RETURN_IF_ERROR(check_like(w, g, "the gradient"));
  const int64_t n = w.num_elements();
  if (n == 0) return Status::OK();
  AF_RETURN_IF_ERROR(dev.activate());
  std::vector<Tensor*> sl;
  for (const auto& p : slots) sl.push_back(p.first);
  // The functor's arity says how many slots it updates (the callers pass that many).
  auto run = [&](auto zero) {
    using T = decltype(zero);
    auto f = make(zero);
    using F = decltype(f);
    const auto blocks = num_blocks(n);
    if constexpr (std::is_invocable_v<const F&, T&, T>)
      update1_kernel<<<blocks, kThreadsPerBlock, 0, dev.stream()>>>(w.data<T>(), g.data<T>(), n, f);
    else if constexpr (std::is_invocable_v<const F&, T&, T&, T>)
      update2_kernel<<<blocks, kThreadsPerBlock, 0, dev.stream()>>>(w.data<T>(), sl[0]->data<T>(), g.data<T>(), n, f);
    else
      update3_kernel<<<blocks, kThreadsPerBlock, 0, dev.stream()>>>(w.data<T>(), sl[0]->data<T>(), sl[1]->data<T>(),
                                                                    g.data<T>(), n, f);
  };
  if (w.dtype() == DType::kFloat32)
    run(float{});
  else
    run(double{});
  return cuda_launch_status(what);
}

}  // namespace

Status gpu_apply_sgd(GpuDevice& dev, Tensor& w, const Tensor& g, double lr) {
  return launch_update(dev, w, {}, g, "SGD update kernel", [&](auto zero) {
    using T = decltype(zero);
    return functors::SgdUpdateF<T>{static_cast<T>(lr)};
  });
}

Status gpu_apply_momentum(GpuDevice& dev, Tensor& w, Tensor& accum, const Tensor& g, double lr, double momentum,
                          bool use_nesterov) {
  return launch_update(dev, w, {{&accum, "the accumulator"}}, g, "Momentum update kernel", [&](auto zero) {
    using T = decltype(zero);
    return functors::MomentumUpdateF<T>{static_cast<T>(lr), static_cast<T>(momentum), use_nesterov};
  });
}

Status gpu_apply_adam(GpuDevice& dev, Tensor& w, Tensor& m, Tensor& v, const Tensor& g, double lr, double beta1,
                      double beta2, double epsilon, int64_t t) {
  if (t < 1) return InvalidArgument("Adam update number must be >= 1, got " + std::to_string(t));
  return launch_update(dev, w, {{&m, "the first moment (m)"}, {&v, "the second moment (v)"}}, g,
                       "Adam update kernel", [&](auto zero) {
                         using T = decltype(zero);
                         return functors::AdamUpdateF<T>::make(static_cast<T>(lr), static_cast<T>(beta1),
                                                               static_cast<T>(beta2), static_cast<T>(epsilon), t);
                       });
}

Status gpu_apply_adagrad(GpuDevice& dev, Tensor& w, Tensor& accum, const Tensor& g, double lr) {
  return launch_update(dev, w, {{&accum, "the accumulator"}}, g, "Adagrad update kernel", [&](auto zero) {
    using T = decltype(zero);
    return functors::AdagradUpdateF<T>{static_cast<T>(lr)};
  });
}

Status gpu_apply_rms_prop(GpuDevice& dev, Tensor& w, Tensor& ms, Tensor& mom, const Tensor& g, double lr,
                          double decay, double momentum, double epsilon) {
  return launch_update(dev, w, {{&ms, "the mean square (ms)"}, {&mom, "the momentum (mom)"}}, g,
                       "RMSProp update kernel", [&](auto zero) {
                         using T = decltype(zero);
                         return functors::RmsPropUpdateF<T>{static_cast<T>(lr), static_cast<T>(decay),
                                                            static_cast<T>(momentum), static_cast<T>(epsilon)};
                       });
}

}  // namespace actorflow
