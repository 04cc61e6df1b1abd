// The oneDNN CPU kernels on ONE thread: MatMul 1024x1024x1024 and the seed CNN's second
// convolution (batch 50, 14x14x32 input, 64 filters 5x5, SAME), forward and both backward
// passes, against naive loops (the baseline, measured in the same run), with GFLOP/s and the
// share of this core's single-thread FP32 peak computed from the detected ISA.
//
// Usage: kernels [seconds-per-case] [--bf16]   (default 2 s)
//        --bf16: the cases marked for bfloat16 operands (graph/mixed_precision.h), still measured
//        against the FP32 peak; the naive baseline stays float32, so "max rel diff" then shows
//        bfloat16's rounding (about 1e-2).
// Run it with AF_INTRA_OP_THREADS unset: the benchmark pins kernels to one thread itself.
#include <cpuid.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/kernel_runner.h"
#include "device/cpu/nn_kernels.h"
#include "device/device.h"
#include "device/kernel.h"
#include "graph/mixed_precision.h"
#include "graph/ops.h"
#include "graph/ops_nn_grad.h"

namespace af = actorflow;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct Timing {
  double best_s, median_s, cpu_per_wall;
  int reps;
};

// Runs f repeatedly for about `budget` seconds (at least 3 times, after one warm-up call).
Timing measure(double budget, const std::function<void()>& f) {
  f();
  std::vector<double> t;
  const double c0 = cpu_s(), w0 = now_s();
  while (t.size() < 3 || (now_s() - w0 < budget && t.size() < 1000)) {
    const double s = now_s();
    f();
    t.push_back(now_s() - s);
  }
  const double cpu = cpu_s() - c0, wall = now_s() - w0;
  std::sort(t.begin(), t.end());
  return Timing{t.front(), t[t.size() / 2], cpu / wall, static_cast<int>(t.size())};
}

af::Tensor random_tensor(const af::Shape& s, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  af::Tensor t(af::DType::kFloat32, s);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = d(gen);
  return t;
}

using af::bench::KernelRunner;

bool g_bf16 = false;  // --bf16

// make_runner() after checking that building the graph succeeded.
KernelRunner make_runner(af::Device* dev, const af::Scope& root, const af::Output& out, std::vector<af::Tensor> in) {
  if (!root.ok() || !out.valid()) {
    std::fprintf(stderr, "graph: %s\n", root.status().to_string().c_str());
    std::exit(1);
  }
  if (g_bf16) af::mark_mixed_bfloat16(*root.graph());
  return af::bench::make_runner(dev, out, std::move(in));
}

double max_rel_diff(const af::Tensor& a, const std::vector<float>& b) {
  double m = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    const double want = b[static_cast<size_t>(i)];
    m = std::max(m, std::fabs(a.data<float>()[i] - want) / std::max(1.0, std::fabs(want)));
  }
  return m;
}

// ---- the machine -----------------------------------------------------------------------

struct Cpu {
  std::string vendor, model;
  unsigned family = 0, model_id = 0;
  std::string isa;
  int flops_per_cycle = 0;  // FP32, one core
  std::string fpc_reason;
  double nominal_ghz = 0;
  std::string clock_source;
  double measured_ghz = 0;
};

// Effective clock while busy: a chain of dependent integer adds retires one per cycle.
double measure_clock_ghz() {
  const long iters = 50'000'000;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    // Register operands: Intel cores since Golden Cove fold adds of an immediate at rename, so a
    // chain of `add $1` retired several per cycle there (this read 21 GHz on a Sapphire Rapids).
    unsigned long x = 0, one = 1;
    const double t0 = now_s();
    for (long i = 0; i < iters; ++i) {
      asm volatile(
          "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
          "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
          : "+r"(x)
          : "r"(one));
    }
    const double dt = now_s() - t0;
    best = std::max(best, 8.0 * static_cast<double>(iters) / dt / 1e9);
  }
  return best;
}

// Measured FP32 FMA throughput of one core: 12 independent chains of 64-byte vector FMAs (as
// compiled for this build's -march=native), a cross-check of the ISA table below.
double measure_fma_gflops() {
  typedef float Vec __attribute__((vector_size(64)));
  constexpr int kLanes = 16, kChains = 12;
  Vec m, c, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11;
  for (int l = 0; l < kLanes; ++l) {
    m[l] = 0.9999f;
    c[l] = 1e-4f;
    a0[l] = a1[l] = a2[l] = a3[l] = a4[l] = a5[l] = 1.f + 0.01f * static_cast<float>(l);
    a6[l] = a7[l] = a8[l] = a9[l] = a10[l] = a11[l] = 2.f - 0.01f * static_cast<float>(l);
  }
  const long iters = 20'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = now_s();
    for (long i = 0; i < iters; ++i) {  // a = a * m + c is contracted to one FMA
      a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
      a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
      a8 = a8 * m + c; a9 = a9 * m + c; a10 = a10 * m + c; a11 = a11 * m + c;
    }
    const double dt = now_s() - t0;
    best = std::max(best, 2.0 * kLanes * kChains * static_cast<double>(iters) / dt / 1e9);
  }
  const Vec sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
  if (sum[0] == 42.f) std::printf(" ");  // keeps the chains live
  return best;
}

Cpu detect_cpu() {
  Cpu c;
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &cx, &d)) {
    char v[13] = {};
    std::memcpy(v, &b, 4);
    std::memcpy(v + 4, &d, 4);
    std::memcpy(v + 8, &cx, 4);
    c.vendor = v;
  }
  if (__get_cpuid(1, &a, &b, &cx, &d)) {
    const unsigned base_family = (a >> 8) & 0xf, ext_family = (a >> 20) & 0xff;
    const unsigned base_model = (a >> 4) & 0xf, ext_model = (a >> 16) & 0xf;
    c.family = base_family == 0xf ? base_family + ext_family : base_family;
    c.model_id = (base_family == 0x6 || base_family == 0xf) ? (ext_model << 4) + base_model : base_model;
  }
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  double mhz = 0;
  while (std::getline(info, line)) {
    if (c.model.empty() && line.rfind("model name", 0) == 0) c.model = line.substr(line.find(':') + 2);
    if (mhz == 0 && line.rfind("cpu MHz", 0) == 0) mhz = std::atof(line.substr(line.find(':') + 1).c_str());
  }
  std::ifstream maxf("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  long khz = 0;
  if (maxf >> khz && khz > 0) {
    c.nominal_ghz = static_cast<double>(khz) / 1e6;
    c.clock_source = "cpufreq cpuinfo_max_freq";
  } else {
    c.nominal_ghz = mhz / 1e3;
    c.clock_source = "/proc/cpuinfo 'cpu MHz' (no cpufreq: probably a VM)";
  }
  const bool amd = c.vendor == "AuthenticAMD";
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool fma = __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
  if (avx512) {
    c.isa = "AVX-512";
    if (amd && c.family <= 0x19) {
      c.flops_per_cycle = 32;
      c.fpc_reason = "AMD Zen 4 (family 0x19) runs 512-bit FMAs on two 256-bit FMA pipes: 2 x 8 lanes x 2";
    } else {
      c.flops_per_cycle = 64;
      c.fpc_reason = amd ? "AMD Zen 5: two 512-bit FMA pipes: 2 x 16 lanes x 2"
                         : "Intel AVX-512, assuming two FMA units: 2 x 16 lanes x 2 (one-unit SKUs: 32)";
    }
  } else if (fma) {
    c.isa = "AVX2+FMA";
    c.flops_per_cycle = 32;
    c.fpc_reason = "two 256-bit FMA units: 2 x 8 lanes x 2";
  } else if (__builtin_cpu_supports("avx")) {
    c.isa = "AVX";
    c.flops_per_cycle = 16;
    c.fpc_reason = "one 256-bit add and one 256-bit multiply per cycle";
  } else {
    c.isa = "SSE";
    c.flops_per_cycle = 8;
    c.fpc_reason = "one 128-bit add and one 128-bit multiply per cycle";
  }
  c.measured_ghz = measure_clock_ghz();
  return c;
}

// ---- baselines ---------------------------------------------------------------------------

// C = A B, row-major, i-k-j order so the inner loop is a vectorised axpy.
void naive_matmul(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  std::fill(c, c + m * n, 0.f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const float av = a[i * k + p];
      const float* __restrict br = b + p * n;
      float* __restrict cr = c + i * n;
      for (int64_t j = 0; j < n; ++j) cr[j] += av * br[j];
    }
}

// NHWC x HWIO direct convolution, SAME, stride 1; inner loop over output channels.
void naive_conv(const float* x, const float* f, float* y, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                int64_t kw, int64_t o) {
  const int64_t ph = (kh - 1) / 2, pw = (kw - 1) / 2;
  std::fill(y, y + n * h * w * o, 0.f);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) {
        float* __restrict yr = y + ((b * h + i) * w + j) * o;
        for (int64_t di = 0; di < kh; ++di) {
          const int64_t ii = i + di - ph;
          if (ii < 0 || ii >= h) continue;
          for (int64_t dj = 0; dj < kw; ++dj) {
            const int64_t jj = j + dj - pw;
            if (jj < 0 || jj >= w) continue;
            const float* xr = x + ((b * h + ii) * w + jj) * c;
            const float* fr = f + (di * kw + dj) * c * o;
            for (int64_t ic = 0; ic < c; ++ic) {
              const float xv = xr[ic];
              const float* __restrict fo = fr + ic * o;
              for (int64_t oc = 0; oc < o; ++oc) yr[oc] += xv * fo[oc];
            }
          }
        }
      }
}

// Multiply-adds per output position along one SAME, stride-1 dimension of size `in` with
// window k, summed over the positions: the taps that fall inside the input (zero padding
// contributes nothing and a good kernel skips it).
int64_t valid_taps(int64_t in, int64_t k) {
  const int64_t before = (k - 1) / 2;
  int64_t total = 0;
  for (int64_t i = 0; i < in; ++i)
    for (int64_t d = 0; d < k; ++d) total += (i + d - before >= 0 && i + d - before < in) ? 1 : 0;
  return total;
}

// `flops` is what the peak share is computed from; `nominal_flops` (when different) is the
// conventional count including padded taps, printed for comparison with other reports.
void print_case(const char* name, double flops, const Timing& ours, const Timing* base, double err, double peak,
                double nominal_flops = 0) {
  const double gf = flops / ours.median_s / 1e9, gf_best = flops / ours.best_s / 1e9;
  std::printf("%-40s %8.2f ms  %7.1f GFLOP/s (best %6.1f)  %5.1f%% of peak (best %5.1f%%)  cpu/wall %.2f", name,
              ours.median_s * 1e3, gf, gf_best, 100 * gf / peak, 100 * gf_best / peak, ours.cpu_per_wall);
  if (nominal_flops > 0) std::printf("  [nominal count incl. padding: %.1f GFLOP/s]", nominal_flops / ours.median_s / 1e9);
  if (base)
    std::printf("  | naive %8.2f ms %6.1f GFLOP/s  speed-up %5.1fx  max rel diff %.1e",
                base->median_s * 1e3, flops / base->median_s / 1e9, base->median_s / ours.median_s, err);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  // `kernels --peak`: only the single-core FP32 peak in GFLOP/s, one number (for scripts such as
  // bench/cluster_usage.py); `kernels [seconds per case]`: the whole table.
  const bool peak_only = argc > 1 && std::string(argv[1]) == "--peak";
  double budget = 2.0;
  for (int i = peak_only ? 2 : 1; i < argc; ++i) {
    const std::string a = argv[i];
    char* end = nullptr;
    const double v = std::strtod(a.c_str(), &end);
    if (a == "--bf16") {
      g_bf16 = true;
    } else if (!a.empty() && *end == '\0' && v > 0) {
      budget = v;
    } else {
      std::fprintf(stderr, "kernels: bad argument '%s' (usage: kernels [seconds per case > 0] [--bf16] | kernels --peak)\n",
                   a.c_str());
      return 2;
    }
  }
  af::set_intra_op_threads(1);  // one OpenMP thread inside every oneDNN call of this thread

  const Cpu cpu = detect_cpu();
  const double peak_nominal = cpu.flops_per_cycle * cpu.nominal_ghz;
  const double peak_measured = cpu.flops_per_cycle * cpu.measured_ghz;
  const double peak = std::max(peak_nominal, peak_measured);
  if (peak_only) {
    std::printf("%.1f\n", peak);
    return 0;
  }
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) < 0) load[0] = -1;
  std::printf("CPU: %s (%s family 0x%x model 0x%x)\n", cpu.model.c_str(), cpu.vendor.c_str(), cpu.family, cpu.model_id);
  std::printf("ISA: %s -> %d FP32 FLOP/cycle/core (%s)\n", cpu.isa.c_str(), cpu.flops_per_cycle, cpu.fpc_reason.c_str());
  std::printf("clock: nominal %.3f GHz from %s; measured %.3f GHz (dependent-add chain, one add/cycle)\n",
              cpu.nominal_ghz, cpu.clock_source.c_str(), cpu.measured_ghz);
  std::printf("single-core FP32 peak: %.1f GFLOP/s = %d x max(nominal, measured) GHz (nominal: %.1f, measured: %.1f)\n",
              peak, cpu.flops_per_cycle, peak_nominal, peak_measured);
  const double fma = measure_fma_gflops();
  std::printf("measured FMA loop (12 independent 64-byte vector chains): %.1f GFLOP/s = %.1f FLOP/cycle at the measured clock\n",
              fma, fma / cpu.measured_ghz);
  std::printf("threads: 1 (af::set_intra_op_threads(1) -> omp_set_num_threads(1)); load average %.2f; %.1f s per case\n",
              load[0], budget);
  std::printf("times are medians; cpu/wall near 1.00 confirms one busy thread; convolution FLOPs count only taps\n"
              "inside the input (SAME zero padding excluded: 64/70 taps per spatial dimension here)\n\n");

  if (g_bf16)
    std::printf("--bf16: MatMul and convolutions take bfloat16 operands (float32 results)%s\n\n",
                af::cpu_has_native_bfloat16() ? "" : "; this CPU has no native bfloat16, so they run float32");
  auto dev = af::make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0);

  // MatMul 1024^3.
  {
    const int64_t n = 1024;
    af::Scope root = af::Scope::root();
    auto a = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{n, n}, "a");
    auto b = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{n, n}, "b");
    auto c = af::ops::matmul(root, a, b);
    af::Tensor av = random_tensor(af::Shape{n, n}, 1), bv = random_tensor(af::Shape{n, n}, 2);
    KernelRunner k = make_runner(dev.get(), root, c, {av, bv});
    std::vector<float> ref(static_cast<size_t>(n * n));
    const Timing base = measure(budget, [&] { naive_matmul(av.data<float>(), bv.data<float>(), ref.data(), n, n, n); });
    const Timing ours = measure(budget, [&] { k.run(); });
    print_case("MatMul 1024x1024x1024", 2.0 * n * n * n, ours, &base, max_rel_diff(k.result, ref), peak);
  }

  // The seed CNN's dense layer fc1 and its two gradients, as the graph runs them: x [50,3136],
  // w [3136,500]; forward x.w, input gradient dy.w^T (transpose_b), weight gradient x^T.dy
  // (transpose_a). A batch of 50 rows makes these the step's most memory-bound products.
  {
    const int64_t m = 50, k = 3136, n = 500;
    af::Scope root = af::Scope::root();
    auto x = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{m, k}, "x");
    auto w = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{k, n}, "w");
    auto dy = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{m, n}, "dy");
    auto y = af::ops::matmul(root, x, w);
    auto dx = af::ops::matmul(root, dy, w, {false, true});
    auto dw = af::ops::matmul(root, x, dy, {true, false});
    af::Tensor xv = random_tensor(af::Shape{m, k}, 11), wv = random_tensor(af::Shape{k, n}, 12);
    af::Tensor dyv = random_tensor(af::Shape{m, n}, 13);
    KernelRunner fwd = make_runner(dev.get(), root, y, {xv, wv});
    KernelRunner bwd_data = make_runner(dev.get(), root, dx, {dyv, wv});
    KernelRunner bwd_filter = make_runner(dev.get(), root, dw, {xv, dyv});
    std::vector<float> ref(static_cast<size_t>(m * n));
    const Timing base = measure(budget, [&] { naive_matmul(xv.data<float>(), wv.data<float>(), ref.data(), m, k, n); });
    const double flops = 2.0 * m * k * n;
    const Timing tfwd = measure(budget, [&] { fwd.run(); });  // runs before result is read
    print_case("MatMul fc1 fwd 50x3136 . 3136x500", flops, tfwd, &base, max_rel_diff(fwd.result, ref), peak);
    const Timing td = measure(budget, [&] { bwd_data.run(); });
    print_case("MatMul fc1 input gradient 50x500 . (3136x500)^T", flops, td, nullptr, 0, peak);
    const Timing tw = measure(budget, [&] { bwd_filter.run(); });
    print_case("MatMul fc1 weight gradient (50x3136)^T . 50x500", flops, tw, nullptr, 0, peak);
  }

  // The seed CNN's conv2: [50,14,14,32] * [5,5,32,64], SAME, stride 1.
  {
    const int64_t n = 50, h = 14, w = 14, ci = 32, co = 64, kk = 5;
    const double nominal = 2.0 * n * h * w * co * kk * kk * ci;
    const double flops = 2.0 * n * valid_taps(h, kk) * valid_taps(w, kk) * co * ci;
    const std::vector<int64_t> s1{1, 1, 1, 1};
    af::Scope root = af::Scope::root();
    auto x = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{n, h, w, ci}, "x");
    auto f = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{kk, kk, ci, co}, "f");
    auto dy = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{n, h, w, co}, "dy");
    auto y = af::ops::conv2d(root, x, f, s1, "SAME");
    auto dx = af::ops::conv2d_backprop_input(root, af::Input({50, 14, 14, 32}), f, dy, s1, "SAME");
    auto df = af::ops::conv2d_backprop_filter(root, x, {kk, kk, ci, co}, dy, s1, "SAME");
    af::Tensor xv = random_tensor(af::Shape{n, h, w, ci}, 3), fv = random_tensor(af::Shape{kk, kk, ci, co}, 4);
    af::Tensor dyv = random_tensor(af::Shape{n, h, w, co}, 5);
    af::Tensor sizes = af::Tensor::from_vector<int32_t>({50, 14, 14, 32}, af::Shape{4});
    KernelRunner fwd = make_runner(dev.get(), root, y, {xv, fv});
    KernelRunner bwd_data = make_runner(dev.get(), root, dx, {sizes, fv, dyv});
    KernelRunner bwd_filter = make_runner(dev.get(), root, df, {xv, dyv});
    std::vector<float> ref(static_cast<size_t>(n * h * w * co));
    const Timing base =
        measure(budget, [&] { naive_conv(xv.data<float>(), fv.data<float>(), ref.data(), n, h, w, ci, kk, kk, co); });
    const Timing ours = measure(budget, [&] { fwd.run(); });
    print_case("Conv2D fwd 50x14x14x32 * 5x5x32x64 SAME", flops, ours, &base, max_rel_diff(fwd.result, ref), peak,
               nominal);
    const Timing td = measure(budget, [&] { bwd_data.run(); });
    print_case("Conv2DBackpropInput (same layer)", flops, td, nullptr, 0, peak, nominal);
    const Timing tf = measure(budget, [&] { bwd_filter.run(); });
    print_case("Conv2DBackpropFilter (same layer)", flops, tf, nullptr, 0, peak, nominal);
  }

  // The seed CNN's conv1: [50,28,28,1] * [5,5,1,32], SAME: one input channel, the case a
  // channel-blocked convolution fits worst.
  {
    const int64_t n = 50, h = 28, w = 28, ci = 1, co = 32, kk = 5;
    const double nominal = 2.0 * n * h * w * co * kk * kk * ci;
    const double flops = 2.0 * n * valid_taps(h, kk) * valid_taps(w, kk) * co * ci;
    const std::vector<int64_t> s1{1, 1, 1, 1};
    af::Scope root = af::Scope::root();
    auto x = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{n, h, w, ci}, "x");
    auto f = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{kk, kk, ci, co}, "f");
    auto dy = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{n, h, w, co}, "dy");
    auto y = af::ops::conv2d(root, x, f, s1, "SAME");
    auto df = af::ops::conv2d_backprop_filter(root, x, {kk, kk, ci, co}, dy, s1, "SAME");
    af::Tensor xv = random_tensor(af::Shape{n, h, w, ci}, 6), fv = random_tensor(af::Shape{kk, kk, ci, co}, 7);
    af::Tensor dyv = random_tensor(af::Shape{n, h, w, co}, 8);
    KernelRunner fwd = make_runner(dev.get(), root, y, {xv, fv});
    KernelRunner bwd_filter = make_runner(dev.get(), root, df, {xv, dyv});
    std::vector<float> ref(static_cast<size_t>(n * h * w * co));
    const Timing base =
        measure(budget, [&] { naive_conv(xv.data<float>(), fv.data<float>(), ref.data(), n, h, w, ci, kk, kk, co); });
    const Timing ours = measure(budget, [&] { fwd.run(); });
    print_case("Conv2D fwd 50x28x28x1 * 5x5x1x32 SAME", flops, ours, &base, max_rel_diff(fwd.result, ref), peak,
               nominal);
    const Timing tf = measure(budget, [&] { bwd_filter.run(); });
    print_case("Conv2DBackpropFilter (same layer)", flops, tf, nullptr, 0, peak, nominal);
  }
  return 0;
}
