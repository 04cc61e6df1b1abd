// What the runtime waits for, while it waits: a process-wide registry of live waits.
//
// Every wait of the runtime that can last (a step waiting for a tensor or a device, a session
// waiting for its step or for the model, a synchronous step waiting for the contributions of
// other replicas, a connection attempt, a checkpoint save) holds a WaitHandle while it lasts:
//
//   WaitHandle w("connect", "connecting to " + addr, "/job:ps/replica:0/task:0");
//   ... the wait ...
//   // ~WaitHandle: the wait is over
//
// A handle can live in an actor's state for a wait that spans messages (created when a step
// parks, destroyed when it proceeds). The registry's snapshot is what `actorflow status --waits`,
// GET /waits and the hang report (core/hang_report.h) show. A wait that lasts past the threshold
// (env AF_WAIT_LOG_SECS, default 10 s) is logged once at WARNING with its kind, what, on-task and
// age, while a WaitWatch lives (Server holds one). Metrics (core/metrics.h), refreshed at every
// render and every check: actorflow_waits{kind} (live waits), actorflow_wait_oldest_seconds{kind}
// (age of the oldest live wait), actorflow_waits_over_threshold_total{kind} (waits that passed
// the threshold), actorflow_waits_refused_total (registrations refused because the registry was
// full). Docs: docs/architecture/diagnosis.md.
//
// Bounds: at most kMaxWaits live waits (a handle made beyond is inactive and counted), texts cut
// to kMaxText bytes, at most kMaxKinds kinds with metric series (others share kind "other").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace actorflow {

// One live wait as a snapshot shows it. Plain value.
struct WaitInfo {
  uint64_t id = 0;
  std::string kind;  // "tensor", "step", "model", "sync-contributions", "connect", "checkpoint", ...
  std::string what;  // a human description: which step, which key, which variables
  std::string on;    // the task waited on ("/job:worker/replica:0/task:1"); "" = none or this task
  int64_t since_unix_ms = 0;  // when the wait began (wall clock)
  double age_secs = 0;        // how long it had lasted at the snapshot
  bool logged = false;        // it passed the threshold and was logged
};

// A registered wait, deregistered by its destructor. Movable, not copyable. A default-made or
// moved-from handle holds no wait. Thread-safe with respect to other handles and the registry;
// one handle must not be used by two threads at once.
class WaitHandle {
 public:
  WaitHandle() = default;
  // Registers a wait that begins now. Inactive (holds nothing) when the registry is full.
  WaitHandle(std::string kind, std::string what, std::string on);
  ~WaitHandle();
  WaitHandle(WaitHandle&& o) noexcept;
  WaitHandle& operator=(WaitHandle&& o) noexcept;
  WaitHandle(const WaitHandle&) = delete;
  WaitHandle& operator=(const WaitHandle&) = delete;

  // Changes what the wait says it waits for; its start stays. No-op on an inactive handle.
  void update(std::string what, std::string on);
  // Ends the wait now (as the destructor does).
  void reset();
  // Whether it holds a registered wait.
  bool active() const { return id_ != 0; }
  uint64_t id() const { return id_; }

 private:
  uint64_t id_ = 0;
};

class WaitRegistry {
 public:
  static constexpr size_t kMaxWaits = 16384;
  static constexpr size_t kMaxText = 512;
  static constexpr size_t kMaxKinds = 32;

  // The process's registry (never destroyed).
  static WaitRegistry& global();

  // Every live wait, oldest first. Thread-safe.
  std::vector<WaitInfo> snapshot() const;
  // The number of live waits. Thread-safe.
  size_t size() const;

  // The age past which a wait is logged (once) and counted. Default: env AF_WAIT_LOG_SECS
  // (positive whole seconds), else 10 s. Thread-safe.
  std::chrono::milliseconds threshold() const;
  void set_threshold(std::chrono::milliseconds t);

  // Logs every live wait past the threshold that was not logged yet (one WARNING line each:
  // kind, on-task, age, what), counts it, and refreshes the metrics. Returns how many it logged.
  // Called by the watcher thread every quarter threshold (at most every second); tests call it
  // directly. Thread-safe.
  size_t check();

  // The task this process serves ("/job:ps/replica:0/task:0"), named in log lines and reports;
  // set by Server (the last one started, in a process with several). Thread-safe.
  void set_task(const std::string& task);
  std::string task() const;

  // Implementation entry points of WaitHandle.
  uint64_t add(std::string kind, std::string what, std::string on);
  void update(uint64_t id, std::string what, std::string on);
  void remove(uint64_t id);

  // Watcher thread reference count (WaitWatch).
  void watch(bool start);

 private:
  WaitRegistry();
  struct Impl;
  Impl* impl_;  // never freed: the registry lives as long as the process
};

// While at least one WaitWatch lives, one thread of the process checks the registry (see
// WaitRegistry::check); the last one to go stops and joins it. Servers hold one, so a process
// with no server has no extra thread. Thread-safe.
class WaitWatch {
 public:
  WaitWatch();
  ~WaitWatch();
  WaitWatch(const WaitWatch&) = delete;
  WaitWatch& operator=(const WaitWatch&) = delete;
};

// The waits as JSON: {"task": ..., "waits": [{"kind", "what", "on", "since_unix_ms",
// "age_secs"}, ...]} (what GET /waits serves). At most kMaxWaitsShown of them, the first ones
// (a snapshot lists the oldest first); when there were more, "omitted": <how many> follows, so
// an answer stays under about 3 MB whatever a peer makes this task wait for. Pure.
inline constexpr size_t kMaxWaitsShown = 2000;
std::string waits_json(const std::string& task, const std::vector<WaitInfo>& waits);

// A JSON string literal of `s` (quotes, backslashes and control characters escaped; '<' as
// \u003c). Pure.
std::string json_quote(const std::string& s);

}  // namespace actorflow
