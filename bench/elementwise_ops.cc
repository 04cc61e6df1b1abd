// Elementwise, reduction and transpose CPU kernels against plain scalar loops (the baseline,
// measured in the same run). Prints one line per case with both times and the speed-up.
// Usage: elementwise_ops [repeats]   (default 20)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/kernel_runner.h"
#include "device/device.h"
#include "device/kernel.h"
#include "graph/ops.h"

namespace af = actorflow;

namespace {

// Best-of-`reps` wall time of f in milliseconds.
double time_ms(int reps, const std::function<void()>& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return best;
}

af::Tensor random_tensor(const af::Shape& s, float lo, float hi, unsigned seed) {
  af::Tensor t(af::DType::kFloat32, s);
  std::srand(seed);
  float* d = t.data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i)
    d[i] = lo + (hi - lo) * static_cast<float>(std::rand()) / static_cast<float>(RAND_MAX);
  return t;
}

using af::bench::KernelRunner;
using af::bench::make_runner;

float max_abs_diff(const af::Tensor& a, const std::vector<float>& b) {
  float m = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i)
    m = std::max(m, std::fabs(a.data<float>()[i] - b[static_cast<size_t>(i)]) /
                        std::max(1.f, std::fabs(b[static_cast<size_t>(i)])));
  return m;
}

void report(const char* name, double base, double ours, float err) {
  std::printf("%-34s baseline %8.3f ms   actorflow %8.3f ms   speed-up %5.2fx   max rel diff %.2g\n", name, base,
              ours, base / ours, static_cast<double>(err));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  auto dev = af::make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0);
  const int64_t R = 1024, C = 1024, N = R * C;
  af::Scope root = af::Scope::root();
  auto pa = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{R, C}, "a");
  auto pb = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{R, C}, "b");
  auto prow = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{C}, "row");
  auto pcol = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{R, 1}, "col");
  const af::Tensor a = random_tensor({R, C}, 0.1f, 4.f, 1), b = random_tensor({R, C}, 0.1f, 4.f, 2);
  const af::Tensor row = random_tensor({C}, 0.1f, 4.f, 3), col = random_tensor({R, 1}, 0.1f, 4.f, 4);
  std::vector<float> ref(static_cast<size_t>(N));
  const float* A = a.data<float>();
  const float* B = b.data<float>();
  const float* ROW = row.data<float>();
  const float* COL = col.data<float>();
  float* O = ref.data();

  {
    // Warm the host allocator first: the first large allocations of a process page-fault
    // (glibc raises its mmap threshold only after freeing one), which is not kernel time.
    auto warm = make_runner(dev.get(), af::ops::add(root, pa, pb), {a, b});
    time_ms(reps, [&] { warm.run(); });
  }
  {
    auto k = make_runner(dev.get(), af::ops::add(root, pa, pb), {a, b});
    double base = time_ms(reps, [&] { for (int64_t i = 0; i < N; ++i) O[i] = A[i] + B[i]; });
    double ours = time_ms(reps, [&] { k.run(); });
    report("Add [1024,1024]+[1024,1024]", base, ours, max_abs_diff(k.result, ref));
  }
  {
    auto k = make_runner(dev.get(), af::ops::mul(root, pa, prow), {a, row});
    double base = time_ms(reps, [&] {
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) O[r * C + c] = A[r * C + c] * ROW[c];
    });
    double ours = time_ms(reps, [&] { k.run(); });
    report("Mul [1024,1024]*[1024]", base, ours, max_abs_diff(k.result, ref));
  }
  {
    auto k = make_runner(dev.get(), af::ops::sub(root, pcol, prow), {col, row});
    double base = time_ms(reps, [&] {
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) O[r * C + c] = COL[r] - ROW[c];
    });
    double ours = time_ms(reps, [&] { k.run(); });
    report("Sub [1024,1]-[1024]", base, ours, max_abs_diff(k.result, ref));
  }
  {
    auto k = make_runner(dev.get(), af::ops::exp(root, pa), {a});
    double base = time_ms(reps, [&] { for (int64_t i = 0; i < N; ++i) O[i] = std::exp(A[i]); });
    double ours = time_ms(reps, [&] { k.run(); });
    report("Exp [1024,1024]", base, ours, max_abs_diff(k.result, ref));
  }
  {
    auto k = make_runner(dev.get(), af::ops::log(root, pa), {a});
    double base = time_ms(reps, [&] { for (int64_t i = 0; i < N; ++i) O[i] = std::log(A[i]); });
    double ours = time_ms(reps, [&] { k.run(); });
    report("Log [1024,1024]", base, ours, max_abs_diff(k.result, ref));
  }
  {
    auto k = make_runner(dev.get(), af::ops::reduce_sum(root, pa, {1}), {a});
    double base = time_ms(reps, [&] {
      for (int64_t r = 0; r < R; ++r) {
        float s = 0;
        for (int64_t c = 0; c < C; ++c) s += A[r * C + c];
        O[r] = s;
      }
    });
    double ours = time_ms(reps, [&] { k.run(); });
    std::vector<float> r1(ref.begin(), ref.begin() + R);
    report("Sum [1024,1024] axis 1", base, ours, max_abs_diff(k.result, r1));
  }
  {
    auto k = make_runner(dev.get(), af::ops::reduce_sum(root, pa, {0}), {a});
    double base = time_ms(reps, [&] {
      for (int64_t c = 0; c < C; ++c) {
        float s = 0;
        for (int64_t r = 0; r < R; ++r) s += A[r * C + c];
        O[c] = s;
      }
    });
    double ours = time_ms(reps, [&] { k.run(); });
    std::vector<float> r0(ref.begin(), ref.begin() + C);
    report("Sum [1024,1024] axis 0", base, ours, max_abs_diff(k.result, r0));
  }
  {
    auto k = make_runner(dev.get(), af::ops::reduce_max(root, pa, {1}), {a});
    double base = time_ms(reps, [&] {
      for (int64_t r = 0; r < R; ++r) {
        float s = -INFINITY;
        for (int64_t c = 0; c < C; ++c) s = std::max(s, A[r * C + c]);
        O[r] = s;
      }
    });
    double ours = time_ms(reps, [&] { k.run(); });
    std::vector<float> r1(ref.begin(), ref.begin() + R);
    report("Max [1024,1024] axis 1", base, ours, max_abs_diff(k.result, r1));
  }
  {
    auto k = make_runner(dev.get(), af::ops::transpose(root, pa, {1, 0}), {a});
    double base = time_ms(reps, [&] {
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) O[c * R + r] = A[r * C + c];
    });
    double ours = time_ms(reps, [&] { k.run(); });
    report("Transpose [1024,1024]", base, ours, max_abs_diff(k.result, ref));
  }
  if (!root.ok()) {
    std::fprintf(stderr, "%s\n", root.status().to_string().c_str());
    return 1;
  }
  return 0;
}
