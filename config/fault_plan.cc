// Fault plans: the format's reader (config/toml_read.h's helpers, shared with cluster files) and
// writer, fault validation, descriptions, and the seed-derived random streams.
#include "config/fault_plan.h"
#include "config/cluster.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "config/toml_read.h"
#include "core/file_read.h"

namespace actorflow {

// ---- names and descriptions --------------------------------------------------------------

const char* fault_kind_name(FaultKind k) {
  switch (k) {
    case FaultKind::kKill: return "kill";
    case FaultKind::kThrow: return "throw";
    case FaultKind::kDrop: return "drop";
    case FaultKind::kDelay: return "delay";
    case FaultKind::kDuplicate: return "duplicate";
    case FaultKind::kPartition: return "partition";
    case FaultKind::kSlow: return "slow";
    case FaultKind::kCorruptCheckpoint: return "corrupt_checkpoint";
  }
  return "?";
}

bool is_link_fault(FaultKind k) {
  return k == FaultKind::kDrop || k == FaultKind::kDelay || k == FaultKind::kDuplicate;
}

bool is_one_shot_fault(FaultKind k) {
  return k == FaultKind::kKill || k == FaultKind::kThrow || k == FaultKind::kCorruptCheckpoint;
}

namespace {

const std::vector<std::pair<std::string, FaultKind>> kKinds = {
    {"kill", FaultKind::kKill},           {"throw", FaultKind::kThrow},
    {"drop", FaultKind::kDrop},           {"delay", FaultKind::kDelay},
    {"duplicate", FaultKind::kDuplicate}, {"partition", FaultKind::kPartition},
    {"slow", FaultKind::kSlow},           {"corrupt_checkpoint", FaultKind::kCorruptCheckpoint}};

std::string any_task(const std::string& t) { return t.empty() ? "*" : short_task_name(t); }

std::string task_set(const std::vector<std::string>& ts) {
  std::string out = "{";
  for (size_t i = 0; i < ts.size(); ++i) out += (i ? ", " : "") + short_task_name(ts[i]);
  return out + "}";
}

}  // namespace

std::string Fault::describe() const {
  std::string s = fault_kind_name(kind);
  switch (kind) {
    case FaultKind::kKill: s += " " + short_task_name(task); break;
    case FaultKind::kThrow: s += " in the " + actor + " actor of " + short_task_name(task); break;
    case FaultKind::kDrop:
    case FaultKind::kDuplicate:
      s += " " + any_task(src) + " -> " + any_task(dst) + " p=" + shortest_number(probability);
      break;
    case FaultKind::kDelay:
      s += " " + any_task(src) + " -> " + any_task(dst) + " by " + std::to_string(delay_ms) + " ms p=" + shortest_number(probability);
      break;
    case FaultKind::kPartition: s += " " + task_set(tasks_a) + " | " + task_set(tasks_b); break;
    case FaultKind::kSlow:
      s += " " + short_task_name(task) + (device.empty() ? "" : " " + device) + " by x" + shortest_number(factor);
      break;
    case FaultKind::kCorruptCheckpoint:
      s += " (" + mode + ") newest checkpoint in " + logdir + " by " + short_task_name(task);
      break;
  }
  if (at_step) s += " at step " + std::to_string(*at_step);
  if (after_secs) s += " after " + shortest_number(*after_secs) + " s";
  if (jitter_secs > 0) s += " (+ up to " + shortest_number(jitter_secs) + " s jitter)";
  if (duration_secs) s += " for " + shortest_number(*duration_secs) + " s";
  return s;
}

namespace {

// A fault of kind `k` on `task` (the builders' common start).
Fault fault_on(FaultKind k, const std::string& task) {
  Fault f;
  f.kind = k;
  f.task = task;
  return f;
}

}  // namespace

Fault Fault::kill_after(const std::string& task, double secs) {
  Fault f = fault_on(FaultKind::kKill, task);
  f.after_secs = secs;
  return f;
}
Fault Fault::kill_at_step(const std::string& task, int64_t step) {
  Fault f = fault_on(FaultKind::kKill, task);
  f.at_step = step;
  return f;
}
Fault Fault::throw_in(const std::string& task, const std::string& actor) {
  Fault f = fault_on(FaultKind::kThrow, task);
  f.actor = actor;
  return f;
}
Fault Fault::drop(const std::string& src, const std::string& dst, double probability) {
  Fault f = fault_on(FaultKind::kDrop, "");
  f.src = src;
  f.dst = dst;
  f.probability = probability;
  return f;
}
Fault Fault::delay(const std::string& src, const std::string& dst, int64_t delay_ms, double probability) {
  Fault f = drop(src, dst, probability);
  f.kind = FaultKind::kDelay;
  f.delay_ms = delay_ms;
  return f;
}
Fault Fault::duplicate(const std::string& src, const std::string& dst, double probability) {
  Fault f = drop(src, dst, probability);
  f.kind = FaultKind::kDuplicate;
  return f;
}
Fault Fault::partition(std::vector<std::string> a, std::vector<std::string> b, double secs) {
  Fault f = fault_on(FaultKind::kPartition, "");
  f.tasks_a = std::move(a);
  f.tasks_b = std::move(b);
  f.duration_secs = secs;
  return f;
}
Fault Fault::slow(const std::string& task, double factor, const std::string& device) {
  Fault f = fault_on(FaultKind::kSlow, task);
  f.factor = factor;
  f.device = device;
  return f;
}
Fault Fault::corrupt_checkpoint(const std::string& task, const std::string& logdir, const std::string& mode) {
  Fault f = fault_on(FaultKind::kCorruptCheckpoint, task);
  f.logdir = logdir;
  f.mode = mode;
  return f;
}

// ---- validation shared by the parser and FaultInjector::add -------------------------------

namespace {

// Which keys a kind accepts besides "kind".
const std::vector<std::string>& keys_for(FaultKind k) {
  static const std::vector<std::string> kill = {"task", "at_step", "after_secs", "jitter_secs"};
  static const std::vector<std::string> thr = {"task", "actor", "at_step", "after_secs", "jitter_secs"};
  static const std::vector<std::string> link = {"src",        "dst",           "probability", "at_step",
                                                "after_secs", "duration_secs", "jitter_secs"};
  static const std::vector<std::string> delay = {"src",           "dst",         "probability", "delay_ms", "at_step",
                                                 "after_secs",    "duration_secs", "jitter_secs"};
  static const std::vector<std::string> part = {"tasks_a", "tasks_b", "at_step", "after_secs", "duration_secs",
                                                "jitter_secs"};
  static const std::vector<std::string> slow = {"task",          "factor",     "device", "at_step", "after_secs",
                                                "duration_secs", "jitter_secs"};
  static const std::vector<std::string> corrupt = {"task",    "logdir",     "mode",
                                                   "at_step", "after_secs", "jitter_secs"};
  switch (k) {
    case FaultKind::kKill: return kill;
    case FaultKind::kThrow: return thr;
    case FaultKind::kDrop:
    case FaultKind::kDuplicate: return link;
    case FaultKind::kDelay: return delay;
    case FaultKind::kPartition: return part;
    case FaultKind::kSlow: return slow;
    case FaultKind::kCorruptCheckpoint: return corrupt;
  }
  return kill;
}

const std::vector<std::string> kAllFaultKeys = {
    "kind",     "task",        "tasks_a",     "tasks_b", "src",    "dst",   "at_step",
    "after_secs", "duration_secs", "jitter_secs", "probability", "delay_ms", "factor", "device",
    "actor",    "mode",        "logdir"};

// Normalises "cpu:0" / "/device:CPU:0" to "CPU:0"; "" on a malformed name.
std::string normalise_device(const std::string& d) {
  std::string s = d;
  if (s.rfind("/device:", 0) == 0) s = s.substr(8);
  auto colon = s.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) return "";
  std::string type = s.substr(0, colon), idx = s.substr(colon + 1);
  for (char& c : type) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (type != "CPU" && type != "GPU") return "";
  if (!std::all_of(idx.begin(), idx.end(), [](char c) { return c >= '0' && c <= '9'; })) return "";
  return type + ":" + idx;
}

}  // namespace

// Each check adds (key, what) for the key a message is about.
std::vector<FaultProblem> check_fault(Fault* fault) {
  Fault& f = *fault;
  std::vector<FaultProblem> errs;
  auto bad = [&](const char* key, std::string what) { errs.push_back(FaultProblem{key, std::move(what)}); };
  auto canon = [&](std::string& t, const char* key) {
    if (t.empty()) return;
    auto c = canonical_task(t);
    if (!c.ok()) bad(key, c.status().message());
    else t = *c;
  };
  canon(f.task, "task");
  canon(f.src, "src");
  canon(f.dst, "dst");
  for (auto* set : {&f.tasks_a, &f.tasks_b})
    for (auto& t : *set) canon(t, set == &f.tasks_a ? "tasks_a" : "tasks_b");
  if (f.at_step && f.after_secs) bad("at_step", "at_step and after_secs exclude each other");
  if (f.at_step && *f.at_step < 0) bad("at_step", "must be >= 0");
  // Times are capped so that converting them to clock durations cannot overflow (1e10 s in
  // nanoseconds does) and a typo cannot schedule a fault for after the job.
  const std::string cap = "must be at most " + std::to_string(static_cast<long long>(kMaxFaultSecs)) + " s";
  if (f.after_secs && !(*f.after_secs >= 0)) bad("after_secs", "must be >= 0");
  else if (f.after_secs && !(*f.after_secs <= kMaxFaultSecs)) bad("after_secs", cap);
  if (f.duration_secs && !(*f.duration_secs > 0)) bad("duration_secs", "must be > 0");
  else if (f.duration_secs && !(*f.duration_secs <= kMaxFaultSecs)) bad("duration_secs", cap);
  if (!(f.jitter_secs >= 0)) bad("jitter_secs", "must be >= 0");
  else if (!(f.jitter_secs <= kMaxFaultSecs)) bad("jitter_secs", cap);
  const bool needs_task = !is_link_fault(f.kind) && f.kind != FaultKind::kPartition;
  if (needs_task && f.task.empty()) bad("task", std::string("required for kind '") + fault_kind_name(f.kind) + "'");
  switch (f.kind) {
    case FaultKind::kKill:
      if (!f.at_step && !f.after_secs) bad("at_step", "kill needs at_step or after_secs");
      break;
    case FaultKind::kThrow:
      if (f.actor != "device" && f.actor != "variable" && f.actor != "node")
        bad("actor", "'" + f.actor + "' is not an actor kind (device, variable or node)");
      break;
    case FaultKind::kDelay:
      if (f.delay_ms < 1 || f.delay_ms > 3600000) bad("delay_ms", "must be in 1..3600000");
      [[fallthrough]];
    case FaultKind::kDrop:
    case FaultKind::kDuplicate:
      if (!(f.probability > 0 && f.probability <= 1)) bad("probability", "must be in (0, 1]");
      if (f.src.empty() && f.dst.empty()) bad("src", "a link fault needs src or dst (or both)");
      if (!f.src.empty() && f.src == f.dst) bad("dst", "src and dst are the same task");
      break;
    case FaultKind::kPartition: {
      if (f.tasks_a.empty()) bad("tasks_a", "a partition needs tasks on both sides");
      if (f.tasks_b.empty()) bad("tasks_b", "a partition needs tasks on both sides");
      if (!f.duration_secs) bad("duration_secs", "required for kind 'partition'");
      std::set<std::string> a;
      for (const auto& t : f.tasks_a)
        if (!a.insert(t).second) bad("tasks_a", "task " + short_task_name(t) + " is listed twice");
      std::set<std::string> b;
      for (const auto& t : f.tasks_b) {
        if (!b.insert(t).second) bad("tasks_b", "task " + short_task_name(t) + " is listed twice");
        if (a.count(t)) bad("tasks_b", "task " + short_task_name(t) + " is on both sides");
      }
      break;
    }
    case FaultKind::kSlow:
      if (!(f.factor > 1 && f.factor <= 1000)) bad("factor", "must be in (1, 1000]");
      if (!f.device.empty()) {
        std::string d = normalise_device(f.device);
        if (d.empty()) bad("device", "'" + f.device + "' is not a device such as \"CPU:0\" or \"GPU:1\"");
        else f.device = d;
      }
      break;
    case FaultKind::kCorruptCheckpoint:
      if (f.logdir.empty()) bad("logdir", "required for kind 'corrupt_checkpoint'");
      if (f.mode != "flip" && f.mode != "truncate")
        bad("mode", "'" + f.mode + "' is not a corruption mode (flip or truncate)");
      break;
  }
  return errs;
}

// ---- TOML reading ----------------------------------------------------------------------------

namespace {

// Reads one plan, collecting every mistake. Single use; not thread-safe.
class PlanReader : private TomlReader {
 public:
  explicit PlanReader(std::string source) : TomlReader(source) { plan_.source = std::move(source); }

  Result<FaultPlan> read(std::string_view text) {
    toml::table root;
    if (!parse(text, "fault plans", &root)) return finish();
    bool have_seed = false;
    for (auto&& [k, v] : root) {
      const std::string key(k.str());
      if (key == "seed") {
        int64_t seed = 0;
        if (!read_integer(v, "seed", &seed)) continue;
        if (seed < 0) {
          error(toml_pos(v.source()), "seed", "must be >= 0, got " + std::to_string(seed));
        } else {
          plan_.seed = static_cast<uint64_t>(seed);
          have_seed = true;
        }
      } else if (key == "fault") {
        const toml::array* arr = v.as_array();
        if (!arr || !arr->is_array_of_tables()) {
          error(toml_pos(v.source()), "fault", "expected [[fault]] tables");
          continue;
        }
        for (size_t i = 0; i < arr->size(); ++i) read_fault(*arr->get(i)->as_table(), i);
      } else {
        unknown_key(k, key, {"seed", "fault"});
      }
    }
    if (!have_seed && !root.get("seed")) error(TomlPos{1, 1}, "seed", "missing: a plan needs a seed (seed = 7)");
    return finish();
  }

 private:
  Result<FaultPlan> finish() {
    Status s = status();
    if (!s.ok()) return s;
    return std::move(plan_);
  }

  // An array of strings (task names).
  bool read_strings(const toml::node& v, const std::string& path, std::vector<std::string>* out) {
    const auto* a = v.as_array();
    if (!a) {
      error(toml_pos(v.source()), path, std::string("expected an array of task names, got ") + toml_type_name(v));
      return false;
    }
    for (size_t i = 0; i < a->size(); ++i) {
      std::string s;
      if (!read_string(*a->get(i), path + "[" + std::to_string(i) + "]", &s)) return false;
      out->push_back(s);
    }
    return true;
  }

  void read_fault(const toml::table& t, size_t index) {
    const std::string prefix = "fault[" + std::to_string(index) + "]";
    const TomlPos table_pos = toml_pos(t.source());
    Fault f;
    f.line = table_pos.line;
    f.column = table_pos.column;
    // The kind decides which keys apply.
    std::optional<FaultKind> kind;
    if (const toml::node* k = t.get("kind")) {
      std::string s;
      if (read_string(*k, prefix + ".kind", &s)) {
        for (const auto& [name, kk] : kKinds)
          if (name == s) kind = kk;
        if (!kind) {
          std::vector<std::string> names;
          for (const auto& [name, kk] : kKinds) names.push_back(name);
          error(toml_pos(k->source()), prefix + ".kind", "unknown kind '" + s + "'" + suggest_name(s, names));
        }
      }
    } else {
      error(table_pos, prefix + ".kind", "missing (kill, throw, drop, delay, duplicate, partition, slow or corrupt_checkpoint)");
    }
    if (kind) f.kind = *kind;
    std::map<std::string, TomlPos> key_pos;
    for (auto&& [k, v] : t) {
      const std::string key(k.str()), path = prefix + "." + key;
      key_pos[key] = toml_pos(v.source());
      if (key == "kind") continue;
      if (std::find(kAllFaultKeys.begin(), kAllFaultKeys.end(), key) == kAllFaultKeys.end()) {
        unknown_key(k, path, kind ? keys_for(*kind) : kAllFaultKeys);
        continue;
      }
      if (kind) {
        const auto& allowed = keys_for(*kind);
        if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
          error(toml_pos(k.source()), path, std::string("does not apply to kind '") + fault_kind_name(*kind) + "'");
          continue;
        }
      }
      double d = 0;
      int64_t i = 0;
      if (key == "task") read_string(v, path, &f.task);
      else if (key == "src") read_string(v, path, &f.src);
      else if (key == "dst") read_string(v, path, &f.dst);
      else if (key == "tasks_a") read_strings(v, path, &f.tasks_a);
      else if (key == "tasks_b") read_strings(v, path, &f.tasks_b);
      else if (key == "at_step") { if (read_integer(v, path, &i)) f.at_step = i; }
      else if (key == "after_secs") { if (read_number(v, path, &d)) f.after_secs = d; }
      else if (key == "duration_secs") { if (read_number(v, path, &d)) f.duration_secs = d; }
      else if (key == "jitter_secs") { if (read_number(v, path, &d)) f.jitter_secs = d; }
      else if (key == "probability") { if (read_number(v, path, &d)) f.probability = d; }
      else if (key == "delay_ms") { if (read_integer(v, path, &i)) f.delay_ms = i; }
      else if (key == "factor") { if (read_number(v, path, &d)) f.factor = d; }
      else if (key == "device") read_string(v, path, &f.device);
      else if (key == "actor") read_string(v, path, &f.actor);
      else if (key == "mode") read_string(v, path, &f.mode);
      else if (key == "logdir") read_string(v, path, &f.logdir);
    }
    if (!kind) return;
    for (auto& [key, msg] : check_fault(&f)) {
      auto p = key_pos.find(key);
      error(p == key_pos.end() ? table_pos : p->second, prefix + "." + key, msg);
    }
    plan_.faults.push_back(std::move(f));
  }

  FaultPlan plan_;
};

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

Result<FaultPlan> FaultPlan::parse(std::string_view toml, const std::string& source) {
  return PlanReader(source).read(toml);
}

Result<FaultPlan> FaultPlan::from_file(const std::string& path) {
  AF_ASSIGN_OR_RETURN(std::string text, read_regular_file(path, kMaxPlanBytes, "fault plan"));
  return parse(text, path);
}

std::string FaultPlan::to_toml() const {
  std::ostringstream o;
  o << "seed = " << seed << "\n";
  for (const Fault& f : faults) {
    o << "\n[[fault]]\nkind = \"" << fault_kind_name(f.kind) << "\"\n";
    auto task = [&](const char* key, const std::string& t) {
      if (!t.empty()) o << key << " = " << toml_string(short_task_name(t)) << "\n";
    };
    auto tasks = [&](const char* key, const std::vector<std::string>& ts) {
      if (ts.empty()) return;
      o << key << " = [";
      for (size_t i = 0; i < ts.size(); ++i) o << (i ? ", " : "") << toml_string(short_task_name(ts[i]));
      o << "]\n";
    };
    const auto& keys = keys_for(f.kind);
    auto has = [&](const char* k) { return std::find(keys.begin(), keys.end(), k) != keys.end(); };
    task("task", f.task);
    tasks("tasks_a", f.tasks_a);
    tasks("tasks_b", f.tasks_b);
    task("src", f.src);
    task("dst", f.dst);
    if (f.at_step) o << "at_step = " << *f.at_step << "\n";
    if (f.after_secs) o << "after_secs = " << toml_float(*f.after_secs) << "\n";
    if (f.duration_secs) o << "duration_secs = " << toml_float(*f.duration_secs) << "\n";
    if (f.jitter_secs > 0) o << "jitter_secs = " << toml_float(f.jitter_secs) << "\n";
    if (has("probability")) o << "probability = " << toml_float(f.probability) << "\n";
    if (has("delay_ms")) o << "delay_ms = " << f.delay_ms << "\n";
    if (has("factor")) o << "factor = " << toml_float(f.factor) << "\n";
    if (has("device") && !f.device.empty()) o << "device = " << toml_string(f.device) << "\n";
    if (has("actor")) o << "actor = " << toml_string(f.actor) << "\n";
    if (has("mode")) o << "mode = " << toml_string(f.mode) << "\n";
    if (has("logdir")) o << "logdir = " << toml_string(f.logdir) << "\n";
  }
  return o.str();
}

FaultRng FaultRng::stream(uint64_t plan_seed, uint64_t index, uint64_t purpose) {
  uint64_t x = mix64(plan_seed + 0x9e3779b97f4a7c15ULL);
  x = mix64(x ^ ((index + 1) * 0xd1b54a32d192ed03ULL));
  x = mix64(x ^ ((purpose + 1) * 0x8cb92ba72f3d8dd7ULL));
  return FaultRng(x);
}

uint64_t FaultRng::next() {
  state_ += 0x9e3779b97f4a7c15ULL;
  return mix64(state_);
}

double FaultRng::uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

std::optional<double> fault_start_secs(const Fault& f, uint64_t seed, size_t index) {
  if (f.at_step) return std::nullopt;
  double t = f.after_secs.value_or(0.0);
  if (f.jitter_secs > 0) t += f.jitter_secs * FaultRng::stream(seed, index, 1).uniform();
  return t;
}

std::optional<double> FaultPlan::start_secs(size_t i) const {
  if (i >= faults.size()) return std::nullopt;
  return fault_start_secs(faults[i], seed, i);
}

bool FaultPlan::involves(size_t i, const std::string& self_task) const {
  if (i >= faults.size()) return false;
  const Fault& f = faults[i];
  const std::string self = normalise_task_name(self_task);
  if (is_link_fault(f.kind)) return f.dst.empty() || f.dst == self;
  if (f.kind == FaultKind::kPartition)
    return std::find(f.tasks_a.begin(), f.tasks_a.end(), self) != f.tasks_a.end() ||
           std::find(f.tasks_b.begin(), f.tasks_b.end(), self) != f.tasks_b.end();
  return f.task == self;
}

std::vector<std::string> FaultPlan::tasks() const {
  std::set<std::string> s;
  for (const Fault& f : faults) {
    for (const auto* t : {&f.task, &f.src, &f.dst})
      if (!t->empty()) s.insert(*t);
    s.insert(f.tasks_a.begin(), f.tasks_a.end());
    s.insert(f.tasks_b.begin(), f.tasks_b.end());
  }
  return std::vector<std::string>(s.begin(), s.end());
}

Status check_plan_tasks(const FaultPlan& plan, const ClusterSpec& cluster) {
  std::string errors;
  for (size_t i = 0; i < plan.faults.size(); ++i) {
    const Fault& f = plan.faults[i];
    std::vector<std::string> named = f.tasks_a;
    named.insert(named.end(), f.tasks_b.begin(), f.tasks_b.end());
    for (const auto* t : {&f.task, &f.src, &f.dst})
      if (!t->empty()) named.push_back(*t);
    for (const auto& t : named) {
      auto id = TaskId::parse(t);
      Status s = id.ok() ? cluster.validate_task(*id) : id.status();
      if (s.ok()) continue;
      errors += (errors.empty() ? "" : "\n") + plan.source + ":" + std::to_string(f.line) + ":" +
                std::to_string(f.column) + ": fault[" + std::to_string(i) + "]: task " + short_task_name(t) +
                " is not in cluster " + cluster.source() + " (" + s.message() + ")";
    }
  }
  return errors.empty() ? Status::OK() : InvalidArgument(errors);
}

}  // namespace actorflow
