// GPU kernel throughput: GEMM and convolution GFLOP/s through actorflow's kernels (MatMul,
// Conv2D as the executor runs them: kernel lookup, output allocation from the BFC allocator,
// filter transpose, algorithm choice) next to the same cuBLAS / cuDNN call made directly on
// pre-allocated buffers (the baseline), measured in the same run. Prints the ratio
// ours / direct (1.0 = no overhead).
//
// Without a visible GPU (or in a CPU-only build) it prints
// "skipped: no CUDA GPU visible (<reason>)" and exits 0.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "device/device.h"
#include "device/kernel.h"

#ifdef AF_WITH_CUDA
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/gpu_device.h"
#endif

using namespace actorflow;  // NOLINT

#ifndef AF_WITH_CUDA

int main() {
  std::printf("skipped: no CUDA GPU visible (built without CUDA: AF_ENABLE_CUDA=OFF or nvcc not found)\n");
  return 0;
}

#else

namespace {

using Clock = std::chrono::steady_clock;

// Seconds per call of `fn` (which queues work on dev's stream), after warm-up.
template <class Fn>
Result<double> time_per_call(GpuDevice& dev, int iters, Fn&& fn) {
  for (int i = 0; i < 3; ++i) AF_RETURN_IF_ERROR(fn());
  AF_RETURN_IF_ERROR(dev.sync());
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) AF_RETURN_IF_ERROR(fn());
  AF_RETURN_IF_ERROR(dev.sync());
  return std::chrono::duration<double>(Clock::now() - t0).count() / iters;
}

Result<Tensor> device_random(GpuDevice& dev, const Shape& s) {
  Tensor h(DType::kFloat32, s);
  for (int64_t i = 0; i < h.num_elements(); ++i) h.data<float>()[i] = static_cast<float>((i * 7919) % 1000) / 1000.f - 0.5f;
  return dev.copy_from_host(h);
}

// Runs node `n` on `dev` once with device inputs (what the executor does per step).
Status run_kernel(OpKernel& k, const Node& n, GpuDevice& dev, const std::vector<Tensor>& in) {
  OpKernelContext ctx(n, &dev, in, 1);
  return k.compute(ctx);
}

Status bench_gemm(GpuDevice& dev, int64_t m, int64_t k, int64_t n) {
  AF_ASSIGN_OR_RETURN(Tensor a, device_random(dev, Shape{m, k}));
  AF_ASSIGN_OR_RETURN(Tensor b, device_random(dev, Shape{k, n}));
  AF_ASSIGN_OR_RETURN(Tensor c, Tensor::allocate(dev.allocator(), DType::kFloat32, Shape{m, n}));
  Node node;
  node.name = "gemm";
  node.op = "MatMul";
  node.output_types = {DType::kFloat32};
  AF_ASSIGN_OR_RETURN(auto kernel, KernelRegistry::global().create(node, "GPU"));
  const int iters = m >= 2048 ? 10 : 30;
  AF_ASSIGN_OR_RETURN(double ours, time_per_call(dev, iters, [&] { return run_kernel(*kernel, node, dev, {a, b}); }));
  const float one = 1, zero = 0;
  AF_ASSIGN_OR_RETURN(double direct, time_per_call(dev, iters, [&]() -> Status {
    std::lock_guard<std::mutex> lock(dev.library_mutex());
    return cublas_status(cublasSgemm(dev.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                     static_cast<int>(k), &one, b.data<float>(), static_cast<int>(n), a.data<float>(),
                                     static_cast<int>(k), &zero, c.data<float>(), static_cast<int>(n)),
                         "cublasSgemm");
  }));
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  std::printf("gemm %5lldx%5lldx%5lld   ours %9.1f GFLOP/s   cuBLAS direct %9.1f GFLOP/s   ratio %.3f\n",
              static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n), flops / ours / 1e9,
              flops / direct / 1e9, direct / ours);
  return Status::OK();
}

struct ConvCase {
  int n, h, w, c, fh, fw, k;
};

Status bench_conv(GpuDevice& dev, const ConvCase& cc) {
  AF_ASSIGN_OR_RETURN(Tensor x, device_random(dev, Shape{cc.n, cc.h, cc.w, cc.c}));
  AF_ASSIGN_OR_RETURN(Tensor f_hwio, device_random(dev, Shape{cc.fh, cc.fw, cc.c, cc.k}));
  AF_ASSIGN_OR_RETURN(Tensor f_ohwi, device_random(dev, Shape{cc.k, cc.fh, cc.fw, cc.c}));
  AF_ASSIGN_OR_RETURN(Tensor y, Tensor::allocate(dev.allocator(), DType::kFloat32, Shape{cc.n, cc.h, cc.w, cc.k}));
  Node node;
  node.name = "conv";
  node.op = "Conv2D";
  node.attrs.set("strides", std::vector<int64_t>{1, 1, 1, 1});
  node.attrs.set("padding", std::string("SAME"));
  node.output_types = {DType::kFloat32};
  AF_ASSIGN_OR_RETURN(auto kernel, KernelRegistry::global().create(node, "GPU"));
  AF_ASSIGN_OR_RETURN(double ours, time_per_call(dev, 20, [&] { return run_kernel(*kernel, node, dev, {x, f_hwio}); }));

  // Direct cuDNN: descriptors, algorithm and workspace prepared once (odd filter sizes give
  // symmetric SAME padding, so no padding copy is needed).
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t fd;
  cudnnConvolutionDescriptor_t cd;
  AF_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&xd));
  AF_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&yd));
  AF_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&fd));
  AF_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&cd));
  Status s = [&]() -> Status {
    AF_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, cc.n, cc.c, cc.h, cc.w));
    AF_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, cc.n, cc.k, cc.h, cc.w));
    AF_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(fd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, cc.k, cc.c, cc.fh, cc.fw));
    AF_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(cd, cc.fh / 2, cc.fw / 2, 1, 1, 1, 1,
                                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    AF_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(dev.cudnn(), xd, fd, cd, yd,
                                                                    CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
    if (count == 0) return Internal("cuDNN offers no forward algorithm");
    AF_ASSIGN_OR_RETURN(Tensor ws, Tensor::allocate(dev.allocator(), DType::kUInt8,
                                                    Shape{static_cast<int64_t>(perf[0].memory)}));
    const float one = 1, zero = 0;
    AF_ASSIGN_OR_RETURN(double direct, time_per_call(dev, 20, [&]() -> Status {
      std::lock_guard<std::mutex> lock(dev.library_mutex());
      return cudnn_status(cudnnConvolutionForward(dev.cudnn(), &one, xd, x.raw_data(), fd, f_ohwi.raw_data(), cd,
                                                  perf[0].algo, ws.raw_data(), ws.bytes(), &zero, yd, y.raw_data()),
                          "cudnnConvolutionForward");
    }));
    const double flops = 2.0 * cc.n * cc.h * cc.w * cc.k * cc.fh * cc.fw * cc.c;
    std::printf("conv N%d %dx%dx%d * %dx%dx%dx%d SAME   ours %9.1f GFLOP/s   cuDNN direct %9.1f GFLOP/s   ratio %.3f\n",
                cc.n, cc.h, cc.w, cc.c, cc.fh, cc.fw, cc.c, cc.k, flops / ours / 1e9, flops / direct / 1e9,
                direct / ours);
    return Status::OK();
  }();
  cudnnDestroyConvolutionDescriptor(cd);
  cudnnDestroyFilterDescriptor(fd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyTensorDescriptor(xd);
  return s;
}

}  // namespace

int main() {
  std::string why;
  if (cuda_device_count(&why) == 0) {
    std::printf("skipped: no CUDA GPU visible (%s)\n", why.c_str());
    return 0;
  }
  DeviceEnumerationOptions o;
  o.allow_growth = true;
  o.gpu_memory_fraction = 0.5;
  auto devs = create_devices("/job:localhost/replica:0/task:0", o);
  if (!devs.ok()) {
    std::fprintf(stderr, "creating devices: %s\n", devs.status().to_string().c_str());
    return 1;
  }
  GpuDevice* gpu = nullptr;
  for (auto& d : *devs) {
    if (d->type() == "GPU" && !gpu) gpu = static_cast<GpuDevice*>(d.get());
  }
  if (!gpu) {
    std::printf("skipped: no CUDA GPU visible (create_devices found none)\n");
    return 0;
  }
  std::printf("device: %s (%s)\n", gpu->name().c_str(), gpu->attributes().description.c_str());
  for (int64_t s : {512, 1024, 2048, 4096}) {
    Status st = bench_gemm(*gpu, s, s, s);
    if (!st.ok()) {
      std::fprintf(stderr, "gemm %lld: %s\n", static_cast<long long>(s), st.to_string().c_str());
      return 1;
    }
  }
  // The seed CNN's layers (MNIST, batch 100) and a wider layer.
  for (const ConvCase& cc : {ConvCase{100, 28, 28, 1, 5, 5, 32}, ConvCase{100, 14, 14, 32, 5, 5, 64},
                             ConvCase{64, 56, 56, 64, 3, 3, 64}}) {
    Status st = bench_conv(*gpu, cc);
    if (!st.ok()) {
      std::fprintf(stderr, "conv: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  return 0;
}

#endif  // AF_WITH_CUDA
