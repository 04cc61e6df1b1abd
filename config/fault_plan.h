// Fault plans: the TOML file format of seeded, reproducible fault plans, its reader and writer,
// the validation of a fault, and the seed-derived random streams. CAF-free; the runtime side is
// actors/fault_injector.h.
//
// A plan is TOML (see docs/reliability.md, "Fault injection"):
//
//   seed = 7
//   [[fault]]
//   kind = "kill"          # kill | throw | drop | delay | duplicate | partition | slow | corrupt_checkpoint
//   task = "worker/1"
//   at_step = 300
//
// Every random choice of a fault comes from its own stream, derived from the plan's seed and the
// fault's index in the plan, so a plan replays the same way (per process: the n-th decision of a
// fault is the same for the same seed; which message meets it depends on message order).
//
// Everything here is a plain value or a pure function, safe to use from any thread on distinct
// objects, except FaultRng (one stream, one thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/task_id.h"
#include "config/task_names.h"
#include "core/status.h"

namespace actorflow {

class ClusterSpec;  // config/cluster.h

// Limits of fault plans: times (after_secs, duration_secs, jitter_secs) in seconds, and the size
// of a plan file.
constexpr double kMaxFaultSecs = 1e6;
constexpr uint64_t kMaxPlanBytes = 1 << 20;

enum class FaultKind { kKill, kThrow, kDrop, kDelay, kDuplicate, kPartition, kSlow, kCorruptCheckpoint };

// "kill", "throw", ... as written in plans. Pure; the pointer is to a static string.
const char* fault_kind_name(FaultKind k);

// One fault, a plain value. Task names are canonical task prefixes ("/job:worker/replica:0/task:1") once the
// fault has been parsed or added; builders and add() accept "worker/1" too.
struct Fault {
  FaultKind kind = FaultKind::kKill;
  std::string task;                            // kill, throw, slow, corrupt_checkpoint
  std::vector<std::string> tasks_a, tasks_b;   // partition
  std::string src, dst;                        // drop, delay, duplicate ("" = any task)
  std::optional<int64_t> at_step;              // trigger: the observed global step reaches this
  std::optional<double> after_secs;            // trigger: seconds after the plan was loaded
  std::optional<double> duration_secs;         // how long a window fault lasts (none = until cleared)
  double jitter_secs = 0;                      // start moved later by a seed-derived U[0, jitter)
  double probability = 1.0;                    // drop, delay, duplicate: per message
  int64_t delay_ms = 0;                        // delay
  double factor = 1.0;                         // slow (> 1)
  std::string device;                          // slow: "CPU:0" ("" = every device of the task)
  std::string actor = "device";                // throw: "device", "variable" or "node"
  std::string mode = "flip";                   // corrupt_checkpoint: "flip" or "truncate"
  std::string logdir;                          // corrupt_checkpoint
  int line = 0, column = 0;                    // position of the [[fault]] in its plan file

  // "kill worker/1 at step 300", "drop host/0 -> worker/1 p=0.3", ... Pure.
  std::string describe() const;

  // Builders for tests and embedders (task names as "worker/1" or full prefixes). Pure; they do
  // not validate: FaultInjector::add (or check_fault) does.
  static Fault kill_after(const std::string& task, double secs);
  static Fault kill_at_step(const std::string& task, int64_t step);
  static Fault throw_in(const std::string& task, const std::string& actor = "device");
  static Fault drop(const std::string& src, const std::string& dst, double probability = 1.0);
  static Fault delay(const std::string& src, const std::string& dst, int64_t delay_ms, double probability = 1.0);
  static Fault duplicate(const std::string& src, const std::string& dst, double probability = 1.0);
  static Fault partition(std::vector<std::string> a, std::vector<std::string> b, double secs);
  static Fault slow(const std::string& task, double factor, const std::string& device = "");
  static Fault corrupt_checkpoint(const std::string& task, const std::string& logdir, const std::string& mode = "flip");
};

// A parsed plan. Plain value.
struct FaultPlan {
  uint64_t seed = 0;
  std::string source = "<plan>";  // file name used in error messages
  std::vector<Fault> faults;

  // Parses and validates a plan. InvalidArgument listing every mistake as
  // "<source>:<line>:<column>: fault[<i>].<key>: <what>" (unknown keys and kinds, keys that do
  // not apply to the kind, wrong types, out-of-range values, malformed or repeated task names).
  // Task names come out canonical. Pure; thread-safe.
  static Result<FaultPlan> parse(std::string_view toml, const std::string& source = "<plan>");
  // Reads the file `path` (at most kMaxPlanBytes; read_regular_file's errors: NotFound,
  // PermissionDenied, ResourceExhausted, ...) and parses it with `path` as the source.
  // Thread-safe.
  static Result<FaultPlan> from_file(const std::string& path);

  // The plan as TOML; parse(to_toml()) gives an equal plan (positions aside). Pure.
  std::string to_toml() const;
  // Seconds after load at which fault i starts: after_secs (0 when absent) plus its seed-derived
  // jitter; nullopt for a fault triggered by at_step. Pure: the same seed gives the same times.
  std::optional<double> start_secs(size_t i) const;
  // True when task `self_task` (any accepted spelling) executes or enforces fault i: it is the
  // fault's task, the receiving end of a link fault (or any task when dst is omitted), or in
  // either set of a partition.
  bool involves(size_t i, const std::string& self_task) const;
  // Every task the plan names, canonical, sorted, without duplicates. Pure.
  std::vector<std::string> tasks() const;
};

// A seed-derived random stream (splitmix64): the same seed gives the same sequence on every
// platform. Not thread-safe.
class FaultRng {
 public:
  explicit FaultRng(uint64_t seed) : state_(seed) {}
  // The stream of fault `index`, for `purpose` (0 = per-message decisions, 1 = start jitter).
  // Pure: the same arguments give the same stream.
  static FaultRng stream(uint64_t plan_seed, uint64_t index, uint64_t purpose);
  // The next 64 random bits; advances the stream.
  uint64_t next();
  // Uniform in [0, 1), from next().
  double uniform();

 private:
  uint64_t state_;
};

// True for the faults that act on messages of one link: drop, delay, duplicate. Pure.
bool is_link_fault(FaultKind k);
// True for the faults that act once and are then done: kill, throw, corrupt_checkpoint. Pure.
bool is_one_shot_fault(FaultKind k);

// One problem of a fault: the key it is about ("task", "probability", ...) and what is wrong.
struct FaultProblem {
  std::string key;
  std::string what;
};

// The checks plans and FaultInjector::add share. Canonicalises f's task names (task, src, dst,
// tasks_a, tasks_b) and device ("cpu:0" -> "CPU:0") in place, then returns every problem (empty
// when f is valid): malformed or repeated task names, out-of-range values, missing keys the kind
// needs. Modifies only *f; thread-safe on distinct faults.
std::vector<FaultProblem> check_fault(Fault* f);

// Seconds after load at which a fault with index `index` in a plan (or among add()ed faults) with
// seed `seed` starts: after_secs (0 when absent) plus its seed-derived jitter; nullopt for a fault
// triggered by at_step. Pure.
std::optional<double> fault_start_secs(const Fault& f, uint64_t seed, size_t index);

// OK when every task `plan` names is a task of `cluster`; else InvalidArgument naming the
// plan's [[fault]] line and the task. Pure; thread-safe.
Status check_plan_tasks(const FaultPlan& plan, const ClusterSpec& cluster);

}  // namespace actorflow
