#include "core/step_trace.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

namespace actorflow {

int64_t TraceEvent::num(const std::string& key, int64_t otherwise) const {
  for (const auto& [k, v] : nums)
    if (k == key) return v;
  return otherwise;
}

std::string TraceEvent::text(const std::string& key) const {
  for (const auto& [k, v] : texts)
    if (k == key) return v;
  return "";
}

int64_t trace_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t trace_process_token() {
  static const uint64_t token = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return token;
}

void StepTrace::add(TraceEvent e) {
  auto cut = [](std::string& s) {
    if (s.size() > kMaxText) s.resize(kMaxText);
  };
  cut(e.task);
  cut(e.track);
  cut(e.name);
  cut(e.kind);
  cut(e.op);
  for (auto& [k, v] : e.texts) {
    cut(k);
    cut(v);
  }
  for (auto& kv : e.nums) cut(kv.first);
  std::lock_guard<std::mutex> l(mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(e));
}

std::pair<std::vector<TraceEvent>, int64_t> StepTrace::take() {
  std::lock_guard<std::mutex> l(mu_);
  auto out = std::make_pair(std::move(events_), dropped_);
  events_.clear();
  dropped_ = 0;
  return out;
}

StepTraces& StepTraces::global() {
  static StepTraces* t = new StepTraces();  // never destroyed: recorders may run at exit
  return *t;
}

void StepTraces::arm(int64_t step_id, size_t max_events) {
  max_events = std::clamp<size_t>(max_events, 1, kMaxEventsLimit);
  std::lock_guard<std::mutex> l(mu_);
  if (steps_.count(step_id)) return;
  while (steps_.size() >= kMaxArmed && !order_.empty()) {
    steps_.erase(order_.front());
    order_.pop_front();
  }
  steps_.emplace(step_id, std::make_shared<StepTrace>(max_events));
  order_.push_back(step_id);
  detail::g_armed_steps.store(static_cast<int>(steps_.size()), std::memory_order_relaxed);
}

std::shared_ptr<StepTrace> StepTraces::find(int64_t step_id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = steps_.find(step_id);
  return it == steps_.end() ? nullptr : it->second;
}

Result<std::pair<std::vector<TraceEvent>, int64_t>> StepTraces::take(int64_t step_id) {
  std::shared_ptr<StepTrace> t;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = steps_.find(step_id);
    if (it == steps_.end())
      return NotFound("step " + std::to_string(step_id) + " is not traced in this process (never armed, taken " +
                      "already, or forgotten past " + std::to_string(kMaxArmed) + " armed steps)");
    t = std::move(it->second);
    steps_.erase(it);
    order_.erase(std::remove(order_.begin(), order_.end(), step_id), order_.end());
    detail::g_armed_steps.store(static_cast<int>(steps_.size()), std::memory_order_relaxed);
  }
  return t->take();
}

size_t StepTraces::armed() const {
  std::lock_guard<std::mutex> l(mu_);
  return steps_.size();
}

// ---- encoding: u32 magic, u64 dropped, u32 count, then per event its strings (u32 length +
// bytes), two i64 times, u32 + (string, i64) nums, u32 + (string, string) texts. Little-endian.
namespace {

constexpr uint32_t kMagic = 0x31525441;  // "ATR1"

void put_u32(std::string* o, uint32_t v) { o->append(reinterpret_cast<const char*>(&v), 4); }
void put_i64(std::string* o, int64_t v) { o->append(reinterpret_cast<const char*>(&v), 8); }
void put_str(std::string* o, const std::string& s) {
  put_u32(o, static_cast<uint32_t>(s.size()));
  o->append(s);
}

struct Reader {
  const std::string& b;
  size_t at = 0;
  Status fail(const char* what) const {
    return DataLoss(std::string("trace events: ") + what + " truncated or malformed at byte " + std::to_string(at) +
                    " of " + std::to_string(b.size()));
  }
  Status u32(uint32_t* v, const char* what) {
    if (b.size() - at < 4) return fail(what);
    std::memcpy(v, b.data() + at, 4);
    at += 4;
    return Status::OK();
  }
  Status i64(int64_t* v, const char* what) {
    if (b.size() - at < 8) return fail(what);
    std::memcpy(v, b.data() + at, 8);
    at += 8;
    return Status::OK();
  }
  Status str(std::string* v, const char* what) {
    uint32_t n = 0;
    AF_RETURN_IF_ERROR(u32(&n, what));
    if (b.size() - at < n) return fail(what);
    v->assign(b.data() + at, n);
    at += n;
    return Status::OK();
  }
};

}  // namespace

std::string encode_trace_events(const std::vector<TraceEvent>& events, int64_t dropped) {
  std::string o;
  put_u32(&o, kMagic);
  put_i64(&o, dropped);
  put_u32(&o, static_cast<uint32_t>(events.size()));
  for (const auto& e : events) {
    for (const std::string* s : {&e.task, &e.track, &e.name, &e.kind, &e.op}) put_str(&o, *s);
    put_i64(&o, e.start_ns);
    put_i64(&o, e.end_ns);
    put_u32(&o, static_cast<uint32_t>(e.nums.size()));
    for (const auto& [k, v] : e.nums) {
      put_str(&o, k);
      put_i64(&o, v);
    }
    put_u32(&o, static_cast<uint32_t>(e.texts.size()));
    for (const auto& [k, v] : e.texts) {
      put_str(&o, k);
      put_str(&o, v);
    }
  }
  return o;
}

Result<std::pair<std::vector<TraceEvent>, int64_t>> decode_trace_events(const std::string& bytes, size_t max_events) {
  Reader r{bytes};
  uint32_t magic = 0, count = 0;
  int64_t dropped = 0;
  AF_RETURN_IF_ERROR(r.u32(&magic, "the header"));
  if (magic != kMagic) return DataLoss("trace events: not an encoded trace (bad magic)");
  AF_RETURN_IF_ERROR(r.i64(&dropped, "the dropped count"));
  AF_RETURN_IF_ERROR(r.u32(&count, "the event count"));
  if (count > max_events)
    return ResourceExhausted("trace events: " + std::to_string(count) + " events, more than the bound of " +
                             std::to_string(max_events));
  // Each event takes at least 40 bytes: no allocation beyond what arrived.
  if (count > (bytes.size() - r.at) / 40) return r.fail("the event count");
  std::vector<TraceEvent> events(count);
  for (auto& e : events) {
    for (std::string* s : {&e.task, &e.track, &e.name, &e.kind, &e.op}) AF_RETURN_IF_ERROR(r.str(s, "a name"));
    AF_RETURN_IF_ERROR(r.i64(&e.start_ns, "a start time"));
    AF_RETURN_IF_ERROR(r.i64(&e.end_ns, "an end time"));
    uint32_t n = 0;
    AF_RETURN_IF_ERROR(r.u32(&n, "the number count"));
    if (n > (bytes.size() - r.at) / 12) return r.fail("the number count");
    e.nums.resize(n);
    for (auto& [k, v] : e.nums) {
      AF_RETURN_IF_ERROR(r.str(&k, "a number's name"));
      AF_RETURN_IF_ERROR(r.i64(&v, "a number"));
    }
    AF_RETURN_IF_ERROR(r.u32(&n, "the text count"));
    if (n > (bytes.size() - r.at) / 8) return r.fail("the text count");
    e.texts.resize(n);
    for (auto& [k, v] : e.texts) {
      AF_RETURN_IF_ERROR(r.str(&k, "a text's name"));
      AF_RETURN_IF_ERROR(r.str(&v, "a text"));
    }
  }
  if (r.at != bytes.size()) return r.fail("the end");
  return std::make_pair(std::move(events), dropped);
}

}  // namespace actorflow
