#include "core/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/logging.h"

namespace actorflow {
namespace {

template <class A>
void atomic_add(A& a, double d) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + d, std::memory_order_relaxed)) {
  }
}

// Prometheus label value escaping: backslash, double quote and newline.
std::string escape(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

std::string label_text(const Labels& extra, const Labels& own, const char* le = nullptr) {
  std::string o;
  auto add = [&](const std::string& k, const std::string& v) {
    o += o.empty() ? "{" : ",";
    o += k + "=\"" + escape(v) + "\"";
  };
  for (const auto& [k, v] : extra) add(k, v);
  for (const auto& [k, v] : own) add(k, v);
  if (le) add("le", le);
  return o.empty() ? o : o + "}";
}

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

const double kStart = static_cast<double>(
    std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count()) /
    1000.0;

}  // namespace

void Gauge::add(double d) { atomic_add(v_, d); }

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  counts_ = std::make_unique<std::atomic<int64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::observe(double v) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  atomic_add(sum_, v);
}

std::vector<double> latency_buckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

Metrics& Metrics::global() {
  static Metrics* m = new Metrics();  // never destroyed: series outlive every static user
  return *m;
}

Metrics::Family& Metrics::family(const std::string& name, const std::string& help, Type type) {
  auto [it, fresh] = families_.try_emplace(name);
  if (fresh) {
    it->second.type = type;
    it->second.help = help;
  } else if (it->second.type != type) {
    AF_LOG(ERROR) << "metric '" << name << "' registered with two types; the second is not rendered";
  }
  return it->second;
}

Counter& Metrics::counter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  auto& slot = family(name, help, Type::kCounter).counters[labels];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& Metrics::gauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  auto& slot = family(name, help, Type::kGauge).gauges[labels];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& Metrics::histogram(const std::string& name, const std::string& help, const Labels& labels,
                              const std::vector<double>& bounds) {
  std::lock_guard<std::mutex> l(mu_);
  auto& slot = family(name, help, Type::kHistogram).histograms[labels];
  if (!slot) slot = std::make_unique<Histogram>(bounds);
  return *slot;
}

int64_t Metrics::counter_value(const std::string& name, const Labels& labels) const {
  std::lock_guard<std::mutex> l(mu_);
  auto f = families_.find(name);
  if (f == families_.end()) return 0;
  auto c = f->second.counters.find(labels);
  return c == f->second.counters.end() ? 0 : c->second->value();
}

void Metrics::add_collector(std::function<void()> collect) {
  std::lock_guard<std::mutex> l(collectors_mu_);
  collectors_.push_back(std::move(collect));
}

std::string Metrics::render(const Labels& extra) const {
  {
    std::vector<std::function<void()>> run;
    {
      std::lock_guard<std::mutex> l(collectors_mu_);
      run = collectors_;
    }
    for (auto& c : run) c();
  }
  std::ostringstream o;
  auto header = [&](const std::string& name, const std::string& help, const char* type) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  };
  const double cpu = process_cpu_seconds();
  if (cpu >= 0) {
    header("process_cpu_seconds_total", "User and system CPU time spent in seconds.", "counter");
    o << "process_cpu_seconds_total" << label_text(extra, {}) << " " << num(cpu) << "\n";
  }
  const int64_t rss = process_rss_bytes();
  if (rss >= 0) {
    header("process_resident_memory_bytes", "Resident memory size in bytes.", "gauge");
    o << "process_resident_memory_bytes" << label_text(extra, {}) << " " << rss << "\n";
  }
  header("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", "gauge");
  o << "process_start_time_seconds" << label_text(extra, {}) << " " << num(kStart) << "\n";
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [name, f] : families_) {
    switch (f.type) {
      case Type::kCounter:
        header(name, f.help, "counter");
        for (const auto& [labels, c] : f.counters) o << name << label_text(extra, labels) << " " << c->value() << "\n";
        break;
      case Type::kGauge:
        header(name, f.help, "gauge");
        for (const auto& [labels, g] : f.gauges) o << name << label_text(extra, labels) << " " << num(g->value()) << "\n";
        break;
      case Type::kHistogram:
        header(name, f.help, "histogram");
        for (const auto& [labels, h] : f.histograms) {
          int64_t cum = 0;
          for (size_t i = 0; i < h->bounds().size(); ++i) {
            cum += h->bucket(i);
            o << name << "_bucket" << label_text(extra, labels, num(h->bounds()[i]).c_str()) << " " << cum << "\n";
          }
          cum += h->bucket(h->bounds().size());
          o << name << "_bucket" << label_text(extra, labels, "+Inf") << " " << cum << "\n";
          o << name << "_sum" << label_text(extra, labels) << " " << num(h->sum()) << "\n";
          o << name << "_count" << label_text(extra, labels) << " " << h->count() << "\n";
        }
        break;
    }
  }
  return o.str();
}

double process_cpu_seconds() {
  std::ifstream f("/proc/self/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = s.rfind(')');  // the command name may contain spaces
  if (close == std::string::npos) return -1;
  std::istringstream in(s.substr(close + 2));
  std::string field;
  // Fields after the name: state(3) ... utime(14) stime(15): skip 11, read 2.
  for (int i = 0; i < 11 && in >> field; ++i) {
  }
  unsigned long long ut = 0, st = 0;
  if (!(in >> ut >> st)) return -1;
  const long hz = sysconf(_SC_CLK_TCK);
  return hz > 0 ? static_cast<double>(ut + st) / static_cast<double>(hz) : -1;
}

int64_t process_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  long long size = 0, resident = 0;
  if (!(f >> size >> resident)) return -1;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace actorflow
