#include "core/waits.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/env.h"
#include "core/logging.h"
#include "core/metrics.h"

namespace actorflow {
namespace {

using Steady = std::chrono::steady_clock;

std::string cut(std::string s) {
  if (s.size() > WaitRegistry::kMaxText) {
    s.resize(WaitRegistry::kMaxText - 3);
    s += "...";
  }
  return s;
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct WaitRegistry::Impl {
  struct Entry {
    std::string kind, what, on;
    Steady::time_point since;
    int64_t since_unix_ms = 0;
    bool logged = false;
  };
  struct KindSeries {
    Gauge* live = nullptr;
    Gauge* oldest = nullptr;
    Counter* over = nullptr;
  };

  mutable std::mutex mu;
  std::unordered_map<uint64_t, Entry> waits;  // guarded by mu
  uint64_t next_id = 0;                       // guarded by mu
  std::chrono::milliseconds threshold{std::chrono::seconds(positive_env_int("AF_WAIT_LOG_SECS", 10))};  // mu
  std::string task;                           // guarded by mu
  std::map<std::string, KindSeries> kinds;    // guarded by mu; at most kMaxKinds (+ "other")
  Counter* refused = nullptr;

  // The watcher thread (WaitWatch): started by the first watch, stopped by the last.
  std::mutex watch_mu;
  int watchers = 0;  // guarded by watch_mu
  std::thread watcher;
  std::mutex wake_mu;
  std::condition_variable wake;
  bool stop = false;  // guarded by wake_mu

  // The series of `kind` (a bounded number of kinds get their own). Called with mu held.
  KindSeries& series(const std::string& kind) {
    auto it = kinds.find(kind);
    if (it != kinds.end()) return it->second;
    const std::string k = kinds.size() < kMaxKinds ? kind : "other";
    it = kinds.find(k);
    if (it != kinds.end()) return it->second;
    KindSeries s;
    Metrics& m = Metrics::global();
    s.live = &m.gauge("actorflow_waits", "Waits of the runtime registered now, by kind (core/waits.h).", {{"kind", k}});
    s.oldest = &m.gauge("actorflow_wait_oldest_seconds", "Age of the oldest live wait of each kind, in seconds.",
                        {{"kind", k}});
    s.over = &m.counter("actorflow_waits_over_threshold_total",
                        "Waits that lasted past the threshold (AF_WAIT_LOG_SECS) and were logged, by kind.", {{"kind", k}});
    return kinds.emplace(k, s).first->second;
  }

  // Refreshes the per-kind gauges. Called with mu held.
  void refresh_metrics(Steady::time_point now) {
    std::map<std::string, std::pair<int, double>> by_kind;
    for (const auto& [id, e] : waits) {
      auto& v = by_kind[kinds.count(e.kind) || kinds.size() < kMaxKinds ? e.kind : "other"];
      ++v.first;
      v.second = std::max(v.second, std::chrono::duration<double>(now - e.since).count());
    }
    for (auto& [k, s] : kinds) {
      auto it = by_kind.find(k);
      s.live->set(it == by_kind.end() ? 0 : it->second.first);
      s.oldest->set(it == by_kind.end() ? 0 : it->second.second);
    }
    for (const auto& [k, v] : by_kind) {
      KindSeries& s = series(k);
      s.live->set(v.first);
      s.oldest->set(v.second);
    }
  }

  void run_watcher() {
    while (true) {
      std::chrono::milliseconds every;
      {
        std::lock_guard<std::mutex> l(mu);
        every = std::clamp(threshold / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
      }
      {
        std::unique_lock<std::mutex> l(wake_mu);
        if (wake.wait_for(l, every, [this] { return stop; })) return;
      }
      WaitRegistry::global().check();
    }
  }
};

WaitRegistry::WaitRegistry() : impl_(new Impl) {
  impl_->refused = &Metrics::global().counter("actorflow_waits_refused_total",
                                              "Waits not registered because the wait registry was full.");
}

WaitRegistry& WaitRegistry::global() {
  static WaitRegistry* r = [] {
    auto* reg = new WaitRegistry();
    Metrics::global().add_collector([reg] {
      std::lock_guard<std::mutex> l(reg->impl_->mu);
      reg->impl_->refresh_metrics(Steady::now());
    });
    return reg;
  }();
  return *r;
}

uint64_t WaitRegistry::add(std::string kind, std::string what, std::string on) {
  Impl::Entry e{cut(std::move(kind)), cut(std::move(what)), cut(std::move(on)), Steady::now(), unix_ms_now(), false};
  std::lock_guard<std::mutex> l(impl_->mu);
  if (impl_->waits.size() >= kMaxWaits) {
    impl_->refused->inc();
    return 0;
  }
  const uint64_t id = ++impl_->next_id;
  impl_->waits.emplace(id, std::move(e));
  return id;
}

void WaitRegistry::update(uint64_t id, std::string what, std::string on) {
  what = cut(std::move(what));
  on = cut(std::move(on));
  std::lock_guard<std::mutex> l(impl_->mu);
  auto it = impl_->waits.find(id);
  if (it == impl_->waits.end()) return;
  it->second.what = std::move(what);
  it->second.on = std::move(on);
}

void WaitRegistry::remove(uint64_t id) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->waits.erase(id);
}

std::vector<WaitInfo> WaitRegistry::snapshot() const {
  const auto now = Steady::now();
  std::vector<WaitInfo> out;
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    out.reserve(impl_->waits.size());
    for (const auto& [id, e] : impl_->waits)
      out.push_back(WaitInfo{id, e.kind, e.what, e.on, e.since_unix_ms,
                             std::chrono::duration<double>(now - e.since).count(), e.logged});
  }
  std::sort(out.begin(), out.end(), [](const WaitInfo& a, const WaitInfo& b) {
    return a.age_secs != b.age_secs ? a.age_secs > b.age_secs : a.id < b.id;
  });
  return out;
}

size_t WaitRegistry::size() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->waits.size();
}

std::chrono::milliseconds WaitRegistry::threshold() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->threshold;
}

void WaitRegistry::set_threshold(std::chrono::milliseconds t) {
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->threshold = std::max(t, std::chrono::milliseconds(1));
  }
  impl_->wake.notify_all();
}

void WaitRegistry::set_task(const std::string& task) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->task = cut(task);
}

std::string WaitRegistry::task() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->task;
}

size_t WaitRegistry::check() {
  const auto now = Steady::now();
  std::vector<std::string> lines;
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    for (auto& [id, e] : impl_->waits) {
      if (e.logged || now - e.since < impl_->threshold) continue;
      e.logged = true;
      impl_->series(e.kind).over->inc();
      char age[32];
      std::snprintf(age, sizeof age, "%.1f", std::chrono::duration<double>(now - e.since).count());
      lines.push_back((impl_->task.empty() ? std::string() : impl_->task + ": ") + "waiting " + age +
                      " s for " + e.kind + (e.on.empty() ? std::string() : " on " + e.on) + ": " + e.what);
    }
    impl_->refresh_metrics(now);
  }
  for (const auto& line : lines) AF_LOG(WARNING) << line;
  return lines.size();
}

void WaitRegistry::watch(bool start) {
  std::lock_guard<std::mutex> l(impl_->watch_mu);
  if (start) {
    if (impl_->watchers++ == 0) {
      {
        std::lock_guard<std::mutex> w(impl_->wake_mu);
        impl_->stop = false;
      }
      impl_->watcher = std::thread([this] { impl_->run_watcher(); });
    }
    return;
  }
  if (impl_->watchers == 0 || --impl_->watchers > 0) return;
  {
    std::lock_guard<std::mutex> w(impl_->wake_mu);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  if (impl_->watcher.joinable()) impl_->watcher.join();
}

WaitWatch::WaitWatch() { WaitRegistry::global().watch(true); }
WaitWatch::~WaitWatch() { WaitRegistry::global().watch(false); }

WaitHandle::WaitHandle(std::string kind, std::string what, std::string on)
    : id_(WaitRegistry::global().add(std::move(kind), std::move(what), std::move(on))) {}

WaitHandle::~WaitHandle() { reset(); }

WaitHandle::WaitHandle(WaitHandle&& o) noexcept : id_(o.id_) { o.id_ = 0; }

WaitHandle& WaitHandle::operator=(WaitHandle&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    o.id_ = 0;
  }
  return *this;
}

void WaitHandle::update(std::string what, std::string on) {
  if (id_ != 0) WaitRegistry::global().update(id_, std::move(what), std::move(on));
}

void WaitHandle::reset() {
  if (id_ == 0) return;
  WaitRegistry::global().remove(id_);
  id_ = 0;
}

std::string json_quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      o += b;
    } else if (c == '<') {
      o += "\\u003c";
    } else {
      o += c;
    }
  }
  return o + "\"";
}

std::string waits_json(const std::string& task, const std::vector<WaitInfo>& waits) {
  std::string o = "{\"task\": " + json_quote(task) + ", \"waits\": [";
  const size_t shown = std::min(waits.size(), kMaxWaitsShown);
  for (size_t i = 0; i < shown; ++i) {
    const WaitInfo& w = waits[i];
    char age[32];
    std::snprintf(age, sizeof age, "%.3f", w.age_secs);
    o += (i ? ", " : "") + std::string("{\"kind\": ") + json_quote(w.kind) + ", \"what\": " + json_quote(w.what) +
         ", \"on\": " + json_quote(w.on) + ", \"since_unix_ms\": " + std::to_string(w.since_unix_ms) +
         ", \"age_secs\": " + age + "}";
  }
  o += "]";
  if (shown < waits.size()) o += ", \"omitted\": " + std::to_string(waits.size() - shown);
  return o + "}\n";
}

}  // namespace actorflow
