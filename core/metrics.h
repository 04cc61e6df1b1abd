// What a node measures about itself: counters, gauges and histograms in one
// process-wide registry, rendered in Prometheus' text exposition format (version 0.0.4) by the
// node's metrics endpoint (net/metrics_http.h, `[server] metrics_port`).
//
//   static Counter& steps = Metrics::global().counter("actorflow_steps_total", "Steps run by the master");
//   steps.inc();
//   Metrics::global().counter("actorflow_tensor_bytes_sent_total", "...", {{"plane", "data"}, {"peer", p}}).inc(n);
//
// Conventions (Prometheus'): counters end in _total, values are in base units (seconds, bytes), a
// metric family has one help text and one type; the job/task labels are added when rendering.
// Cost: a counter or gauge update is one relaxed atomic add; a histogram observation is two
// atomic adds and a bucket search (a dozen compares). Looking a series up by name and labels takes
// a lock and a map lookup, so hot paths look a series up once and keep the reference.
//
// Thread-safety: every method may be called from any thread. References returned stay valid for
// the life of the process (series are never removed).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace actorflow {

// Label name -> value, e.g. {{"peer", "/job:ps/replica:0/task:0"}}. Names must match
// [a-zA-Z_][a-zA-Z0-9_]*; values are escaped when rendered.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing count.
class Counter {
 public:
  void inc(int64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  int64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

// A value that goes up and down (stored as a double).
class Gauge {
 public:
  void set(double v) { v_.store(v, std::memory_order_relaxed); }
  void add(double d);
  double value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

// Observations counted into cumulative buckets (upper bounds, ascending) plus their sum.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Non-cumulative count of bucket i (i == bounds().size() is +Inf's own share).
  int64_t bucket(size_t i) const { return counts_[i].load(std::memory_order_relaxed); }
  int64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<int64_t>[]> counts_;
  std::atomic<int64_t> count_{0};
  std::atomic<double> sum_{0};
};

// Seconds from 100 us to 60 s, roughly x2.5 apart: step latencies, waits, round trips.
std::vector<double> latency_buckets();

class Metrics {
 public:
  // The process's registry (a node measures its own process).
  static Metrics& global();

  // The series of family `name` with `labels`, created at zero on first use. `help` is kept from
  // the family's first registration. A name already used with another type gives a series that
  // is counted but not rendered (a programming error, logged once).
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help, const Labels& labels = {},
                       const std::vector<double>& bounds = latency_buckets());

  // Every family in Prometheus text format, with `extra` labels (job, task) added to each series
  // first, plus the process's own: process_cpu_seconds_total (user + system, from
  // /proc/self/stat), process_resident_memory_bytes (/proc/self/statm), process_start_time_seconds.
  std::string render(const Labels& extra) const;

  // The value of counter series `name` with exactly `labels` (0 when absent): for tests and
  // `actorflow status`.
  int64_t counter_value(const std::string& name, const Labels& labels = {}) const;

  // Registers `collect`, run at the start of every render() (on the rendering thread, without the
  // registry's lock held, so it may update series): for measurements read from elsewhere on
  // demand, e.g. the kernel's counters of the control plane's connections
  // (net/conn_traffic.h). Collectors live as long as the registry; they must be thread-safe
  // (two renders may run at once). Thread-safe.
  void add_collector(std::function<void()> collect);

 private:
  Metrics() = default;
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type;
    std::string help;
    std::map<Labels, std::unique_ptr<Counter>> counters;
    std::map<Labels, std::unique_ptr<Gauge>> gauges;
    std::map<Labels, std::unique_ptr<Histogram>> histograms;
  };
  Family& family(const std::string& name, const std::string& help, Type type);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  mutable std::mutex collectors_mu_;
  std::vector<std::function<void()>> collectors_;  // guarded by collectors_mu_
};

// The process's CPU time (user + system) in seconds and resident memory in bytes, from /proc;
// -1 when unreadable.
double process_cpu_seconds();
int64_t process_rss_bytes();

}  // namespace actorflow
