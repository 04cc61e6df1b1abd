// Process-wide timing of GPU work, for benchmarks (bench/gpu_ops: the CNN step split into
// kernels, copies and runtime overhead). Off by default; when enabled, every GPU kernel
// (GpuOpKernel::compute) and every host<->device copy of a GpuDevice records a CUDA event
// before and after its work on its device's stream, and collect() sums the intervals.
//
// What an interval measures: a kernel's is the stream time from the op's first queued work to
// its last (several launches, e.g. a filter transpose and cuDNN's convolution, and any host work
// between them while the stream was idle); a copy's is the DMA transfer of one staging chunk on
// the stream. Intervals of one stream tile its busy time without overlap. The host side of a
// staged copy (the memcpy into or out of the pinned buffer) is measured with the host clock.
//
// Thread-safety: every member is thread-safe. Costs nothing measurable when disabled (one
// relaxed atomic load per kernel and copy).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace actorflow {

class GpuProfiler {
 public:
  // What collect() returns: totals since the last collect().
  struct Summary {
    double kernel_ms = 0;        // GPU kernels (stream intervals)
    double copy_ms = 0;          // host<->device DMA (stream intervals)
    double staging_ms = 0;       // host memcpy into/out of the pinned staging buffers (host clock)
    int64_t kernels = 0, copies = 0;
    std::map<std::string, double> kernel_ms_by_op;  // by op type
  };
  // An interval being recorded: begin()'s events and what they time.
  struct Mark {
    cudaEvent_t start = nullptr;
    cudaStream_t stream = nullptr;
    bool active = false;
  };

  static GpuProfiler& global();

  void enable(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Records the start of an interval on `stream` (the caller's device current). An inactive
  // Mark when disabled or when the event cannot be recorded (timing is best effort).
  Mark begin(cudaStream_t stream);
  // Records the end of `m` on its stream and files it under `what` (an op type) as a kernel, or
  // as a copy. Nothing for an inactive Mark.
  void end(const Mark& m, const std::string& what, bool copy);
  // Adds host staging time.
  void add_staging_ms(double ms);
  // Waits for every recorded event, sums the intervals and starts afresh. Errors name the CUDA
  // call that failed (the intervals are dropped then).
  Result<Summary> collect();

 private:
  struct Interval {
    cudaEvent_t start, stop;
    std::string what;
    bool copy;
  };
  cudaEvent_t take_event();  // from the pool or new; null on failure
  std::atomic<bool> enabled_{false};
  std::mutex mu_;
  std::vector<Interval> pending_;   // guarded by mu_
  std::vector<cudaEvent_t> pool_;   // guarded by mu_
  double staging_ms_ = 0;           // guarded by mu_
};

}  // namespace actorflow
