// Running one Output of a test's graph on a CPU device in this thread, and reading a tensor's
// values: shared by the op tests (ops_*_test.cc). Test-only; not thread-safe across tests that
// share the static device (gtest runs a binary's tests one at a time).
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "device/executor.h"
#include "graph/ops.h"

namespace actorflow {
namespace testing {

// One CPU device for the whole test binary.
inline Device* cpu() {
  static auto dev = make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0);
  return dev.get();
}

// The value of `o` (the scope's first error, or the run's, otherwise).
inline Result<Tensor> eval(const Scope& s, const Output& o, const std::map<std::string, Tensor>& feeds = {}) {
  if (!s.ok()) return s.status();
  auto r = run_local(*s.graph(), {o.name()}, feeds, cpu());
  if (!r.ok()) return r.status();
  return (*r)[0];
}

// The values of `outs`, computed in one run (the scope's first error, or the run's, otherwise).
inline Result<std::vector<Tensor>> eval_all(const Scope& s, const std::vector<Output>& outs,
                                            const std::map<std::string, Tensor>& feeds = {}) {
  if (!s.ok()) return s.status();
  std::vector<std::string> names;
  for (const auto& o : outs) names.push_back(o.name());
  return run_local(*s.graph(), names, feeds, cpu());
}

// A float32 tensor of shape `s` with values uniform in [lo, hi), the same for the same seed.
inline Tensor random_tensor(const Shape& s, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor t(DType::kFloat32, s);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = d(gen);
  return t;
}

// The elements of `t` (dtype T) in row-major order.
template <class T>
std::vector<T> vals(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.num_elements());
}

}  // namespace testing
}  // namespace actorflow
