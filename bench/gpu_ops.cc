// GPU throughput against the GPU's own figures, measured in one run:
//  1. device: name, SMs, clock, memory, and the peaks the shares below are taken against: FP32
//     and TF32 (dense) from a table of known GPUs (H100/H200 SXM: 67 and 495 TFLOP/s), otherwise
//     FP32 derived from SMs x FP32 lanes x 2 x clock, and no TF32 figure; the host link: PCIe
//     Gen5 x16 (63 GB/s per direction) unless AF_LINK_GBPS says otherwise.
//  2. MatMul (cuBLAS through actorflow's kernel, as the executor runs it: kernel lookup, output from
//     the BFC allocator) next to cuBLAS called directly, in FP32 and with TF32 tensor cores
//     (CUBLAS_TF32_TENSOR_OP_MATH), each as a share of the matching peak.
//  3. The seed CNN's convolutions (batch 100: 28x28x1 -> 32 and 14x14x32 -> 64, 5x5, SAME) and a
//     wider layer: actorflow's Conv2D (cuDNN's default math, which may use TF32) and its two
//     gradients, and cuDNN called directly with CUDNN_FMA_MATH (FP32) and CUDNN_TENSOR_OP_MATH
//     (TF32), each as a share of the FP32 and the TF32 peak.
//  4. Host <-> device copies, 64 KiB to 256 MiB: pinned and pageable cudaMemcpy, and actorflow's
//     staged copies (GpuDevice::copy_from_host / copy_to_host), in GB/s and as a share of the link.
//  5. The seed CNN's training step (batch 50, Adam) with its worker on the GPU and the variables on
//     an in-process parameter server's CPU, split into GPU kernels and host<->device copies (CUDA
//     events around every kernel and copy, device/cuda/gpu_profile.h) and the rest of the wall
//     time (runtime overhead: executor, actors, the ps's updates, transfers between the tasks).
// Lines starting with "RESULT " carry the figures for scripts (scripts/gpu-check.sh).
//
// Without a visible GPU (or in a CPU-only build) it prints
// "skipped: no CUDA GPU visible (<reason>)" and exits 0.
//   build/bench/gpu_ops [--quick] [--cnn-only] [--cnn-steps N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device/device.h"
#include "device/kernel.h"
#include "graph/op_registry.h"

#ifdef AF_WITH_CUDA
#include <algorithm>
#include <map>
#include <memory>
#include <random>

#include "actorflow/actorflow.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/gpu_device.h"
#include "device/cuda/gpu_profile.h"
#include "models/mnist_cnn.h"
#include "net/port_reservation.h"
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

// ---- the GPU's figures ------------------------------------------------------------------------------

struct Peaks {
  std::string gpu;
  int sms = 0, clock_mhz = 0, cc_major = 0, cc_minor = 0;
  double mem_gib = 0;
  double fp32_tflops = 0;  // the share's denominator
  std::string fp32_from;   // "table" or "derived"
  double tf32_tflops = 0;  // 0: unknown
  double link_gbps = 0;    // GB/s per direction
  std::string link_from;
};

// FP32 lanes per SM by compute capability (CUDA C Programming Guide, "Arithmetic Instructions").
int fp32_lanes(int major, int minor) {
  if (major == 8 && minor == 0) return 64;
  if (major == 7) return 64;
  return 128;  // 8.6, 8.9, 9.0, 10.x, 12.x
}

Result<Peaks> read_peaks(const GpuDevice& dev) {
  Peaks p;
  cudaDeviceProp prop;
  AF_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, dev.ordinal()));
  int clock_khz = 0;
  AF_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev.ordinal()));
  p.gpu = prop.name;
  p.sms = prop.multiProcessorCount;
  p.clock_mhz = clock_khz / 1000;
  p.cc_major = prop.major;
  p.cc_minor = prop.minor;
  p.mem_gib = static_cast<double>(prop.totalGlobalMem) / (1u << 30);
  p.fp32_tflops = 2.0 * p.sms * fp32_lanes(prop.major, prop.minor) * clock_khz * 1e3 / 1e12;
  p.fp32_from = "derived: " + std::to_string(p.sms) + " SMs x " + std::to_string(fp32_lanes(prop.major, prop.minor)) +
                " lanes x 2 x " + std::to_string(p.clock_mhz) + " MHz";
  // Datasheet figures (dense, no sparsity), SXM boards.
  struct Known {
    const char* match;
    double fp32, tf32;
  };
  const Known known[] = {{"H200 NVL", 60, 418},      {"H200", 67, 495},     {"H100 80GB HBM3", 67, 495},
                         {"H100 SXM", 67, 495},       {"H100 PCIe", 51, 378}, {"H100 NVL", 60, 418},
                         {"A100", 19.5, 156}};  // first match wins
  for (const Known& k : known) {
    if (p.gpu.find(k.match) != std::string::npos) {
      p.fp32_tflops = k.fp32;
      p.tf32_tflops = k.tf32;
      p.fp32_from = std::string("table: ") + k.match;
      break;
    }
  }
  p.link_gbps = 63.0;  // PCIe Gen5 x16: 32 GT/s x 16 lanes x 128/130 / 8
  p.link_from = "assumed PCIe Gen5 x16 (63 GB/s per direction; set AF_LINK_GBPS for another link)";
  if (const char* l = std::getenv("AF_LINK_GBPS")) {
    p.link_gbps = std::atof(l);
    p.link_from = "AF_LINK_GBPS";
  }
  return p;
}

// ---- timing -----------------------------------------------------------------------------------------

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

std::string pct(double part, double whole) {
  if (whole <= 0) return "   n/a";
  char b[32];
  std::snprintf(b, sizeof b, "%5.1f%%", 100.0 * part / whole);
  return b;
}

// ---- MatMul -------------------------------------------------------------------------------------------

Status bench_gemm(GpuDevice& dev, const Peaks& pk, int64_t m, int64_t k, int64_t n) {
  AF_ASSIGN_OR_RETURN(Tensor a, device_random(dev, Shape{m, k}));
  AF_ASSIGN_OR_RETURN(Tensor b, device_random(dev, Shape{k, n}));
  AF_ASSIGN_OR_RETURN(Tensor c, Tensor::allocate(dev.allocator(), DType::kFloat32, Shape{m, n}));
  Node node;
  node.name = "gemm";
  node.op = "MatMul";
  node.inputs.resize(2);  // a, b (the registry checks the op's input count)
  node.output_types = {DType::kFloat32};
  AF_ASSIGN_OR_RETURN(auto kernel, KernelRegistry::global().create(node, "GPU"));
  const int iters = m >= 2048 ? 10 : 30;
  const float one = 1, zero = 0;
  auto direct = [&]() -> Status {
    std::lock_guard<std::mutex> lock(dev.library_mutex());
    return cublas_status(cublasSgemm(dev.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                     static_cast<int>(k), &one, b.data<float>(), static_cast<int>(n), a.data<float>(),
                                     static_cast<int>(k), &zero, c.data<float>(), static_cast<int>(n)),
                         "cublasSgemm");
  };
  auto ours = [&] { return run_kernel(*kernel, node, dev, {a, b}); };
  auto set_math = [&](cublasMath_t mode) -> Status {
    std::lock_guard<std::mutex> lock(dev.library_mutex());
    return cublas_status(cublasSetMathMode(dev.cublas(), mode), "cublasSetMathMode");
  };
  AF_RETURN_IF_ERROR(set_math(CUBLAS_DEFAULT_MATH));
  AF_ASSIGN_OR_RETURN(double ours_fp32, time_per_call(dev, iters, ours));
  AF_ASSIGN_OR_RETURN(double direct_fp32, time_per_call(dev, iters, direct));
  AF_RETURN_IF_ERROR(set_math(CUBLAS_TF32_TENSOR_OP_MATH));
  auto tf32 = time_per_call(dev, iters, ours);
  auto direct_tf32 = time_per_call(dev, iters, direct);
  AF_RETURN_IF_ERROR(set_math(CUBLAS_DEFAULT_MATH));
  AF_RETURN_IF_ERROR(tf32.status());
  AF_RETURN_IF_ERROR(direct_tf32.status());
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const double f_ours = flops / ours_fp32 / 1e12, f_direct = flops / direct_fp32 / 1e12;
  const double t_ours = flops / *tf32 / 1e12, t_direct = flops / *direct_tf32 / 1e12;
  std::printf("matmul %5lldx%5lldx%5lld  FP32: ours %6.2f TFLOP/s (%s of FP32 peak), cuBLAS %6.2f (%s)   "
              "TF32: ours %6.2f TFLOP/s (%s of TF32 peak), cuBLAS %6.2f (%s)\n",
              static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n), f_ours,
              pct(f_ours, pk.fp32_tflops).c_str(), f_direct, pct(f_direct, pk.fp32_tflops).c_str(), t_ours,
              pct(t_ours, pk.tf32_tflops).c_str(), t_direct, pct(t_direct, pk.tf32_tflops).c_str());
  std::printf("RESULT matmul_%lld_fp32_tflops=%.3f matmul_%lld_fp32_share=%.4f matmul_%lld_tf32_tflops=%.3f "
              "matmul_%lld_tf32_share=%.4f\n",
              static_cast<long long>(m), f_ours, static_cast<long long>(m), f_ours / pk.fp32_tflops,
              static_cast<long long>(m), t_ours, static_cast<long long>(m),
              pk.tf32_tflops > 0 ? t_ours / pk.tf32_tflops : 0.0);
  return Status::OK();
}

// ---- convolutions ---------------------------------------------------------------------------------------

struct ConvCase {
  const char* name;
  int n, h, w, c, fh, fw, k;
};

// cuDNN's forward convolution called directly with `math`, descriptors and workspace prepared
// once (odd filter sizes: symmetric SAME padding, no padding copy). Seconds per call.
Result<double> direct_conv(GpuDevice& dev, const ConvCase& cc, cudnnMathType_t math, const Tensor& x,
                           const Tensor& f_ohwi, Tensor& y) {
  cudnnTensorDescriptor_t xd = nullptr, yd = nullptr;
  cudnnFilterDescriptor_t fd = nullptr;
  cudnnConvolutionDescriptor_t cd = nullptr;
  Result<double> out = Internal("not run");
  Status s = [&]() -> Status {
    AF_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&xd));
    AF_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&yd));
    AF_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&fd));
    AF_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&cd));
    AF_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, cc.n, cc.c, cc.h, cc.w));
    AF_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, cc.n, cc.k, cc.h, cc.w));
    AF_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(fd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, cc.k, cc.c, cc.fh, cc.fw));
    AF_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(cd, cc.fh / 2, cc.fw / 2, 1, 1, 1, 1,
                                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    AF_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(cd, math));
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    AF_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(dev.cudnn(), xd, fd, cd, yd,
                                                                    CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
    int pick = -1;
    for (int i = 0; i < count && pick < 0; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].mathType == math) pick = i;
    if (pick < 0) return Unimplemented("cuDNN offers no forward algorithm with this math type");
    AF_ASSIGN_OR_RETURN(Tensor ws, Tensor::allocate(dev.allocator(), DType::kUInt8,
                                                    Shape{static_cast<int64_t>(std::max<size_t>(perf[pick].memory, 1))}));
    const float one = 1, zero = 0;
    out = time_per_call(dev, 20, [&]() -> Status {
      std::lock_guard<std::mutex> lock(dev.library_mutex());
      return cudnn_status(cudnnConvolutionForward(dev.cudnn(), &one, xd, x.raw_data(), fd, f_ohwi.raw_data(), cd,
                                                  perf[pick].algo, ws.raw_data(), perf[pick].memory, &zero, yd,
                                                  y.raw_data()),
                          "cudnnConvolutionForward");
    });
    return Status::OK();
  }();
  if (cd) cudnnDestroyConvolutionDescriptor(cd);
  if (fd) cudnnDestroyFilterDescriptor(fd);
  if (yd) cudnnDestroyTensorDescriptor(yd);
  if (xd) cudnnDestroyTensorDescriptor(xd);
  if (!s.ok()) return s;
  return out;
}

Status bench_conv(GpuDevice& dev, const Peaks& pk, const ConvCase& cc) {
  AF_ASSIGN_OR_RETURN(Tensor x, device_random(dev, Shape{cc.n, cc.h, cc.w, cc.c}));
  AF_ASSIGN_OR_RETURN(Tensor f_hwio, device_random(dev, Shape{cc.fh, cc.fw, cc.c, cc.k}));
  AF_ASSIGN_OR_RETURN(Tensor f_ohwi, device_random(dev, Shape{cc.k, cc.fh, cc.fw, cc.c}));
  AF_ASSIGN_OR_RETURN(Tensor dy, device_random(dev, Shape{cc.n, cc.h, cc.w, cc.k}));
  AF_ASSIGN_OR_RETURN(Tensor y, Tensor::allocate(dev.allocator(), DType::kFloat32, Shape{cc.n, cc.h, cc.w, cc.k}));
  const Tensor sizes = Tensor::from_vector<int32_t>({cc.n, cc.h, cc.w, cc.c}, Shape{4});
  AF_ASSIGN_OR_RETURN(Tensor sizes_d, dev.copy_from_host(sizes));
  auto make = [&](const char* op) {
    Node node;
    node.name = "conv";
    node.op = op;
    if (auto d = OpRegistry::global().lookup(op); d.ok() && (*d)->num_inputs > 0)
      node.inputs.resize(static_cast<size_t>((*d)->num_inputs));  // the registry checks the count
    node.attrs.set("strides", std::vector<int64_t>{1, 1, 1, 1});
    node.attrs.set("padding", std::string("SAME"));
    node.attrs.set("filter_sizes", std::vector<int64_t>{cc.fh, cc.fw, cc.c, cc.k});
    node.output_types = {DType::kFloat32};
    node.output_shapes = {std::string(op) == "Conv2DBackpropInput" ? Shape{cc.n, cc.h, cc.w, cc.c} : Shape::unknown()};
    return node;
  };
  const Node fwd = make("Conv2D"), bwd_in = make("Conv2DBackpropInput"), bwd_f = make("Conv2DBackpropFilter");
  AF_ASSIGN_OR_RETURN(auto k_fwd, KernelRegistry::global().create(fwd, "GPU"));
  AF_ASSIGN_OR_RETURN(auto k_in, KernelRegistry::global().create(bwd_in, "GPU"));
  AF_ASSIGN_OR_RETURN(auto k_f, KernelRegistry::global().create(bwd_f, "GPU"));
  AF_ASSIGN_OR_RETURN(double ours, time_per_call(dev, 20, [&] { return run_kernel(*k_fwd, fwd, dev, {x, f_hwio}); }));
  AF_ASSIGN_OR_RETURN(double ours_in,
                      time_per_call(dev, 20, [&] { return run_kernel(*k_in, bwd_in, dev, {sizes_d, f_hwio, dy}); }));
  AF_ASSIGN_OR_RETURN(double ours_f, time_per_call(dev, 20, [&] { return run_kernel(*k_f, bwd_f, dev, {x, dy}); }));
  auto fp32 = direct_conv(dev, cc, CUDNN_FMA_MATH, x, f_ohwi, y);
  auto tf32 = direct_conv(dev, cc, CUDNN_TENSOR_OP_MATH, x, f_ohwi, y);
  const double flops = 2.0 * cc.n * cc.h * cc.w * cc.k * cc.fh * cc.fw * cc.c;
  auto tf = [&](double secs) { return flops / secs / 1e12; };
  std::printf("conv %-6s N%d %dx%dx%d * %dx%dx%dx%d SAME\n", cc.name, cc.n, cc.h, cc.w, cc.c, cc.fh, cc.fw, cc.c,
              cc.k);
  std::printf("  ours (cuDNN default math)  forward %6.2f TFLOP/s (%s of FP32 peak, %s of TF32 peak)   "
              "input grad %6.2f (%s / %s)   filter grad %6.2f (%s / %s)\n",
              tf(ours), pct(tf(ours), pk.fp32_tflops).c_str(), pct(tf(ours), pk.tf32_tflops).c_str(), tf(ours_in),
              pct(tf(ours_in), pk.fp32_tflops).c_str(), pct(tf(ours_in), pk.tf32_tflops).c_str(), tf(ours_f),
              pct(tf(ours_f), pk.fp32_tflops).c_str(), pct(tf(ours_f), pk.tf32_tflops).c_str());
  if (fp32.ok())
    std::printf("  cuDNN direct, FMA math (FP32)        %6.2f TFLOP/s (%s of FP32 peak)\n", tf(*fp32),
                pct(tf(*fp32), pk.fp32_tflops).c_str());
  else
    std::printf("  cuDNN direct, FMA math (FP32): %s\n", fp32.status().to_string().c_str());
  if (tf32.ok())
    std::printf("  cuDNN direct, tensor-op math (TF32)  %6.2f TFLOP/s (%s of TF32 peak)\n", tf(*tf32),
                pct(tf(*tf32), pk.tf32_tflops).c_str());
  else
    std::printf("  cuDNN direct, tensor-op math (TF32): %s\n", tf32.status().to_string().c_str());
  std::printf("RESULT conv_%s_tflops=%.3f conv_%s_fp32_share=%.4f conv_%s_tf32_share=%.4f conv_%s_direct_fp32_tflops=%.3f "
              "conv_%s_direct_tf32_tflops=%.3f\n",
              cc.name, tf(ours), cc.name, tf(ours) / pk.fp32_tflops, cc.name,
              pk.tf32_tflops > 0 ? tf(ours) / pk.tf32_tflops : 0.0, cc.name, fp32.ok() ? tf(*fp32) : 0.0, cc.name,
              tf32.ok() ? tf(*tf32) : 0.0);
  return Status::OK();
}

// ---- copies -----------------------------------------------------------------------------------------------

Status bench_copies(GpuDevice& dev, const Peaks& pk, bool quick) {
  std::printf("copies (GB/s, share of the link's %.0f GB/s per direction: %s)\n", pk.link_gbps, pk.link_from.c_str());
  std::printf("  %10s  %21s  %21s  %21s\n", "bytes", "pinned  H2D / D2H", "pageable  H2D / D2H", "ours  H2D / D2H");
  const std::vector<size_t> sizes = quick ? std::vector<size_t>{size_t{1} << 20, size_t{64} << 20}
                                          : std::vector<size_t>{size_t{64} << 10, size_t{1} << 20, size_t{16} << 20,
                                                                size_t{256} << 20};
  const size_t max_bytes = sizes.back();
  void* pinned = nullptr;
  AF_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&pinned, max_bytes, cudaHostAllocDefault));
  std::unique_ptr<void, void (*)(void*)> pinned_guard(pinned, [](void* p) { cudaFreeHost(p); });
  std::vector<char> pageable(max_bytes, 1);
  std::memset(pinned, 1, max_bytes);
  AF_ASSIGN_OR_RETURN(Tensor d, Tensor::allocate(dev.allocator(), DType::kUInt8, Shape{static_cast<int64_t>(max_bytes)}));
  AF_RETURN_IF_ERROR(dev.activate());
  double best_pinned_h2d = 0, best_pinned_d2h = 0, best_ours_h2d = 0, best_ours_d2h = 0;
  for (size_t bytes : sizes) {
    const int iters = bytes >= (size_t{64} << 20) ? 5 : bytes >= (size_t{1} << 20) ? 20 : 200;
    auto rate = [&](auto&& fn) -> Result<double> {
      AF_ASSIGN_OR_RETURN(double secs, time_per_call(dev, iters, fn));
      return static_cast<double>(bytes) / secs / 1e9;
    };
    auto memcpy_async = [&](void* dst, const void* src, cudaMemcpyKind kind) {
      return [&dev, dst, src, kind, bytes]() -> Status {
        return cuda_status(cudaMemcpyAsync(dst, src, bytes, kind, dev.stream()), "cudaMemcpyAsync");
      };
    };
    AF_ASSIGN_OR_RETURN(double p_h2d, rate(memcpy_async(d.raw_data(), pinned, cudaMemcpyHostToDevice)));
    AF_ASSIGN_OR_RETURN(double p_d2h, rate(memcpy_async(pinned, d.raw_data(), cudaMemcpyDeviceToHost)));
    // Pageable: cudaMemcpyAsync from pageable memory is synchronous with the host.
    AF_ASSIGN_OR_RETURN(double g_h2d, rate(memcpy_async(d.raw_data(), pageable.data(), cudaMemcpyHostToDevice)));
    AF_ASSIGN_OR_RETURN(double g_d2h, rate(memcpy_async(pageable.data(), d.raw_data(), cudaMemcpyDeviceToHost)));
    Tensor host(DType::kUInt8, Shape{static_cast<int64_t>(bytes)});
    std::memset(host.raw_data(), 2, bytes);
    Tensor on_dev;
    AF_ASSIGN_OR_RETURN(double o_h2d, rate([&]() -> Status {
      AF_ASSIGN_OR_RETURN(on_dev, dev.copy_from_host(host));
      return Status::OK();
    }));
    AF_ASSIGN_OR_RETURN(double o_d2h, rate([&]() -> Status { return dev.copy_to_host(on_dev).status(); }));
    std::printf("  %10zu  %9.1f / %9.1f  %9.1f / %9.1f  %9.1f / %9.1f   (pinned %s / %s of the link)\n", bytes, p_h2d,
                p_d2h, g_h2d, g_d2h, o_h2d, o_d2h, pct(p_h2d, pk.link_gbps).c_str(), pct(p_d2h, pk.link_gbps).c_str());
    best_pinned_h2d = std::max(best_pinned_h2d, p_h2d);
    best_pinned_d2h = std::max(best_pinned_d2h, p_d2h);
    best_ours_h2d = std::max(best_ours_h2d, o_h2d);
    best_ours_d2h = std::max(best_ours_d2h, o_d2h);
  }
  std::printf("RESULT copy_pinned_h2d_gbps=%.2f copy_pinned_d2h_gbps=%.2f copy_ours_h2d_gbps=%.2f copy_ours_d2h_gbps=%.2f "
              "link_gbps=%.1f\n",
              best_pinned_h2d, best_pinned_d2h, best_ours_h2d, best_ours_d2h, pk.link_gbps);
  return Status::OK();
}

// ---- the CNN step ---------------------------------------------------------------------------------------

int free_port() {
  auto p = net::reserve_port_for_process();
  return p.ok() ? *p : 0;
}

Status bench_cnn_step(int steps) {
  const std::string toml = "[jobs]\nps = [\"127.0.0.1:" + std::to_string(free_port()) + "\"]\nworker = [\"127.0.0.1:" +
                           std::to_string(free_port()) +
                           "\"]\n[server]\ngpu_memory_fraction = 0.3\nallow_growth = true\n";
  AF_ASSIGN_OR_RETURN(ClusterSpec cluster, ClusterSpec::from_string(toml, "gpu_ops-cnn.toml"));
  AF_ASSIGN_OR_RETURN(std::unique_ptr<Server> ps, Server::create(cluster, TaskId{"ps", 0}));
  AF_ASSIGN_OR_RETURN(std::unique_ptr<Server> worker, Server::create(cluster, TaskId{"worker", 0}));
  // Variables on the ps's CPU (as with a ps whose GPU is masked), the model on the worker's GPU.
  Scope root = Scope::root().with_device("/device:CPU:0");
  CnnOptions mo;
  mo.worker_device = "/job:worker/task:0/device:GPU:0";
  AF_ASSIGN_OR_RETURN(CnnModel m, build_mnist_cnn(root, mo));
  Session sess(root, worker->target());
  AF_RETURN_IF_ERROR(sess.run({}, {}, {m.init_op}).status());
  const int batch = 50;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  Tensor x(DType::kFloat32, Shape{batch, 784}), y(DType::kFloat32, Shape{batch, 10});
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = u(rng);
  for (int i = 0; i < batch; ++i) y.data<float>()[i * 10 + i % 10] = 1.f;
  auto step = [&]() { return sess.run({{m.x, x}, {m.labels, y}}, {}, {m.train_op}).status(); };
  for (int i = 0; i < 5; ++i) AF_RETURN_IF_ERROR(step());  // warm-up: plans, cuDNN algorithms, memory
  GpuProfiler& prof = GpuProfiler::global();
  AF_RETURN_IF_ERROR(prof.collect().status());  // drop the warm-up's intervals
  prof.enable(true);
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) AF_RETURN_IF_ERROR(step());
  const double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  prof.enable(false);
  AF_ASSIGN_OR_RETURN(GpuProfiler::Summary s, prof.collect());
  // Untimed steps for comparison: what profiling itself costs.
  const auto t1 = Clock::now();
  for (int i = 0; i < steps; ++i) AF_RETURN_IF_ERROR(step());
  const double plain_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  const double per = wall_ms / steps, kern = s.kernel_ms / steps, copy = (s.copy_ms + s.staging_ms) / steps;
  const double other = std::max(0.0, per - kern - copy);
  std::printf("cnn step (seed CNN, batch %d, Adam; worker requested on %s, variables on the ps's CPU), %d steps:\n", batch,
              "GPU:0", steps);
  std::printf("  wall %.2f ms/step (%.0f images/s; %.2f ms/step without the profiling events)\n", per,
              batch * 1000.0 / per, plain_ms / steps);
  std::printf("  GPU kernels      %7.2f ms  %s   (%lld kernels/step)\n", kern, pct(kern, per).c_str(),
              static_cast<long long>(s.kernels / std::max(1, steps)));
  std::printf("  host<->device    %7.2f ms  %s   (DMA %.2f ms + staging memcpy %.2f ms; %lld chunks/step)\n", copy,
              pct(copy, per).c_str(), s.copy_ms / steps, s.staging_ms / steps,
              static_cast<long long>(s.copies / std::max(1, steps)));
  std::printf("  runtime overhead %7.2f ms  %s   (the rest: executor, actors, the ps's Adam updates, ps<->worker "
              "transfers)\n",
              other, pct(other, per).c_str());
  std::vector<std::pair<double, std::string>> ops;
  for (const auto& [op, ms] : s.kernel_ms_by_op) ops.emplace_back(ms / steps, op);
  std::sort(ops.rbegin(), ops.rend());
  std::printf("  kernels by op:");
  for (size_t i = 0; i < ops.size() && i < 8; ++i) std::printf(" %s %.3f ms;", ops[i].second.c_str(), ops[i].first);
  std::printf("\n");
  std::printf("RESULT cnn_step_ms=%.3f cnn_images_per_sec=%.1f cnn_kernel_ms=%.3f cnn_copy_ms=%.3f cnn_overhead_ms=%.3f "
              "cnn_step_unprofiled_ms=%.3f\n",
              per, batch * 1000.0 / per, kern, copy, other, plain_ms / steps);
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, cnn_only = false;
  int cnn_steps = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
      cnn_steps = 20;
    } else if (a == "--cnn-only") {  // the CNN step split alone (without a GPU: soft-placed on the CPU)
      cnn_only = true;
    } else if (a == "--cnn-steps" && i + 1 < argc) {
      cnn_steps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: gpu_ops [--quick] [--cnn-only] [--cnn-steps N]\n");
      return 2;
    }
  }
  if (cnn_only) {
    Status st = bench_cnn_step(cnn_steps);
    if (!st.ok()) std::printf("FAILED cnn step: %s\n", st.to_string().c_str());
    return st.ok() ? 0 : 1;
  }
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
  auto pk = read_peaks(*gpu);
  if (!pk.ok()) {
    std::fprintf(stderr, "reading the device's properties: %s\n", pk.status().to_string().c_str());
    return 1;
  }
  std::printf("device: %s (%s)\n", gpu->name().c_str(), gpu->attributes().description.c_str());
  std::printf("  %d SMs, %d MHz, compute capability %d.%d, %.1f GiB\n", pk->sms, pk->clock_mhz, pk->cc_major,
              pk->cc_minor, pk->mem_gib);
  std::printf("  peaks: FP32 %.1f TFLOP/s (%s), TF32 %s, link %.0f GB/s (%s)\n", pk->fp32_tflops, pk->fp32_from.c_str(),
              pk->tf32_tflops > 0 ? (std::to_string(static_cast<int>(pk->tf32_tflops)) + " TFLOP/s dense").c_str()
                                  : "unknown for this GPU",
              pk->link_gbps, pk->link_from.c_str());
  std::printf("RESULT gpu=\"%s\" sms=%d clock_mhz=%d fp32_peak_tflops=%.1f tf32_peak_tflops=%.1f\n", pk->gpu.c_str(),
              pk->sms, pk->clock_mhz, pk->fp32_tflops, pk->tf32_tflops);
  int failures = 0;
  auto report = [&](const char* what, const Status& st) {
    if (st.ok()) return;
    ++failures;
    std::printf("FAILED %s: %s\n", what, st.to_string().c_str());
  };
  const std::vector<int64_t> gemms = quick ? std::vector<int64_t>{1024, 4096} : std::vector<int64_t>{512, 1024, 2048, 4096, 8192};
  for (int64_t s : gemms) report("matmul", bench_gemm(*gpu, *pk, s, s, s));
  for (const ConvCase& cc : {ConvCase{"seed1", 100, 28, 28, 1, 5, 5, 32}, ConvCase{"seed2", 100, 14, 14, 32, 5, 5, 64},
                             ConvCase{"wide", 64, 56, 56, 64, 3, 3, 64}})
    report("conv", bench_conv(*gpu, *pk, cc));
  report("copies", bench_copies(*gpu, *pk, quick));
  devs->clear();  // the CNN's servers make their own devices
  report("cnn step", bench_cnn_step(cnn_steps));
  return failures == 0 ? 0 : 1;
}

#endif  // AF_WITH_CUDA
