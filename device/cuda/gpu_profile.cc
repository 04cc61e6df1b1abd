#include "device/cuda/gpu_profile.h"

#include "device/cuda/cuda_status.h"

namespace actorflow {

GpuProfiler& GpuProfiler::global() {
  static GpuProfiler* p = new GpuProfiler();  // never destroyed: kernels may report at exit
  return *p;
}

cudaEvent_t GpuProfiler::take_event() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!pool_.empty()) {
      cudaEvent_t e = pool_.back();
      pool_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return e;
}

GpuProfiler::Mark GpuProfiler::begin(cudaStream_t stream) {
  Mark m;
  if (!enabled()) return m;
  m.start = take_event();
  if (!m.start) return m;
  if (cudaEventRecord(m.start, stream) != cudaSuccess) {
    (void)cudaGetLastError();
    std::lock_guard<std::mutex> l(mu_);
    pool_.push_back(m.start);
    return Mark{};
  }
  m.stream = stream;
  m.active = true;
  return m;
}

void GpuProfiler::end(const Mark& m, const std::string& what, bool copy) {
  if (!m.active) return;
  cudaEvent_t stop = take_event();
  if (!stop || cudaEventRecord(stop, m.stream) != cudaSuccess) {
    (void)cudaGetLastError();
    std::lock_guard<std::mutex> l(mu_);
    pool_.push_back(m.start);
    if (stop) pool_.push_back(stop);
    return;
  }
  std::lock_guard<std::mutex> l(mu_);
  pending_.push_back(Interval{m.start, stop, what, copy});
}

void GpuProfiler::add_staging_ms(double ms) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> l(mu_);
  staging_ms_ += ms;
}

Result<GpuProfiler::Summary> GpuProfiler::collect() {
  std::vector<Interval> todo;
  Summary s;
  {
    std::lock_guard<std::mutex> l(mu_);
    todo.swap(pending_);
    s.staging_ms = staging_ms_;
    staging_ms_ = 0;
  }
  Status failed;
  for (const Interval& i : todo) {
    float ms = 0;
    Status st = cuda_status(cudaEventSynchronize(i.stop), "cudaEventSynchronize");
    if (st.ok()) st = cuda_status(cudaEventElapsedTime(&ms, i.start, i.stop), "cudaEventElapsedTime");
    if (!st.ok()) {
      if (failed.ok()) failed = st;
      continue;
    }
    if (i.copy) {
      s.copy_ms += ms;
      ++s.copies;
    } else {
      s.kernel_ms += ms;
      ++s.kernels;
      s.kernel_ms_by_op[i.what] += ms;
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const Interval& i : todo) {
      pool_.push_back(i.start);
      pool_.push_back(i.stop);
    }
  }
  if (!failed.ok()) return failed;
  return s;
}

}  // namespace actorflow
