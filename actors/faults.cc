// Fault plans (TOML via toml++, header-only, exceptions caught here) and the FaultInjector.
#include "actors/faults.h"

#include "config/toml_guard.h"
#include "core/file_read.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstring>
#include <map>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "config/cluster_spec.h"
#include "core/logging.h"
#include "data/checkpoint.h"

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

namespace {

const std::vector<std::pair<std::string, FaultKind>> kKinds = {
    {"kill", FaultKind::kKill},           {"throw", FaultKind::kThrow},
    {"drop", FaultKind::kDrop},           {"delay", FaultKind::kDelay},
    {"duplicate", FaultKind::kDuplicate}, {"partition", FaultKind::kPartition},
    {"slow", FaultKind::kSlow},           {"corrupt_checkpoint", FaultKind::kCorruptCheckpoint}};

bool is_link(FaultKind k) { return k == FaultKind::kDrop || k == FaultKind::kDelay || k == FaultKind::kDuplicate; }
bool is_one_shot(FaultKind k) {
  return k == FaultKind::kKill || k == FaultKind::kThrow || k == FaultKind::kCorruptCheckpoint;
}

// Shortest round-trip decimal, locale-independent.
std::string num(double d) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d);
  return std::string(buf, r.ptr);
}

std::string secs(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", d);
  return buf;
}

std::string any_task(const std::string& t) { return t.empty() ? "*" : short_task_name(t); }

std::string task_set(const std::vector<std::string>& ts) {
  std::string out = "{";
  for (size_t i = 0; i < ts.size(); ++i) out += (i ? ", " : "") + short_task_name(ts[i]);
  return out + "}";
}

}  // namespace

std::string task_of_device(const std::string& device_name) {
  auto d = device_name.find("/device:");
  return d == std::string::npos ? device_name : device_name.substr(0, d);
}

std::string short_task_name(const std::string& task_prefix) {
  auto t = TaskId::parse(task_of_device(task_prefix));
  return t.ok() ? t->to_string() : task_prefix;
}

Result<std::string> canonical_task(const std::string& name) {
  AF_ASSIGN_OR_RETURN(TaskId t, TaskId::parse(name));
  return t.device_prefix();
}

bool is_global_step_name(const std::string& name) {
  std::string n = name;
  if (n.size() > 2 && n.compare(n.size() - 2, 2, ":0") == 0) n.resize(n.size() - 2);
  const std::string gs = "global_step";
  if (n == gs) return true;
  return n.size() > gs.size() && n.compare(n.size() - gs.size(), gs.size(), gs) == 0 && n[n.size() - gs.size() - 1] == '/';
}

std::string Fault::describe() const {
  std::string s = fault_kind_name(kind);
  switch (kind) {
    case FaultKind::kKill: s += " " + short_task_name(task); break;
    case FaultKind::kThrow: s += " in the " + actor + " actor of " + short_task_name(task); break;
    case FaultKind::kDrop:
    case FaultKind::kDuplicate:
      s += " " + any_task(src) + " -> " + any_task(dst) + " p=" + num(probability);
      break;
    case FaultKind::kDelay:
      s += " " + any_task(src) + " -> " + any_task(dst) + " by " + std::to_string(delay_ms) + " ms p=" + num(probability);
      break;
    case FaultKind::kPartition: s += " " + task_set(tasks_a) + " | " + task_set(tasks_b); break;
    case FaultKind::kSlow:
      s += " " + short_task_name(task) + (device.empty() ? "" : " " + device) + " by x" + num(factor);
      break;
    case FaultKind::kCorruptCheckpoint:
      s += " (" + mode + ") newest checkpoint in " + logdir + " by " + short_task_name(task);
      break;
  }
  if (at_step) s += " at step " + std::to_string(*at_step);
  if (after_secs) s += " after " + num(*after_secs) + " s";
  if (jitter_secs > 0) s += " (+ up to " + num(jitter_secs) + " s jitter)";
  if (duration_secs) s += " for " + num(*duration_secs) + " s";
  return s;
}

Fault Fault::kill_after(const std::string& task, double secs) {
  Fault f;
  f.kind = FaultKind::kKill;
  f.task = task;
  f.after_secs = secs;
  return f;
}
Fault Fault::kill_at_step(const std::string& task, int64_t step) {
  Fault f;
  f.kind = FaultKind::kKill;
  f.task = task;
  f.at_step = step;
  return f;
}
Fault Fault::throw_in(const std::string& task, const std::string& actor) {
  Fault f;
  f.kind = FaultKind::kThrow;
  f.task = task;
  f.actor = actor;
  return f;
}
Fault Fault::drop(const std::string& src, const std::string& dst, double probability) {
  Fault f;
  f.kind = FaultKind::kDrop;
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
  Fault f;
  f.kind = FaultKind::kPartition;
  f.tasks_a = std::move(a);
  f.tasks_b = std::move(b);
  f.duration_secs = secs;
  return f;
}
Fault Fault::slow(const std::string& task, double factor, const std::string& device) {
  Fault f;
  f.kind = FaultKind::kSlow;
  f.task = task;
  f.factor = factor;
  f.device = device;
  return f;
}
Fault Fault::corrupt_checkpoint(const std::string& task, const std::string& logdir, const std::string& mode) {
  Fault f;
  f.kind = FaultKind::kCorruptCheckpoint;
  f.task = task;
  f.logdir = logdir;
  f.mode = mode;
  return f;
}

// ---- validation shared by the parser and add() --------------------------------------------

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

// Semantic checks of one fault with canonical task names; "" when fine, else "<key>: <what>".
std::vector<std::pair<std::string, std::string>> check_fault(Fault& f) {
  std::vector<std::pair<std::string, std::string>> errs;
  auto canon = [&](std::string& t, const char* key) {
    if (t.empty()) return;
    auto c = canonical_task(t);
    if (!c.ok()) errs.emplace_back(key, c.status().message());
    else t = *c;
  };
  canon(f.task, "task");
  canon(f.src, "src");
  canon(f.dst, "dst");
  for (auto* set : {&f.tasks_a, &f.tasks_b})
    for (auto& t : *set) canon(t, set == &f.tasks_a ? "tasks_a" : "tasks_b");
  if (f.at_step && f.after_secs) errs.emplace_back("at_step", "at_step and after_secs exclude each other");
  if (f.at_step && *f.at_step < 0) errs.emplace_back("at_step", "must be >= 0");
  // Times are capped so that converting them to clock durations cannot overflow (1e10 s in
  // nanoseconds does) and a typo cannot schedule a fault for after the job.
  const std::string cap = "must be at most " + std::to_string(static_cast<long long>(kMaxFaultSecs)) + " s";
  if (f.after_secs && !(*f.after_secs >= 0)) errs.emplace_back("after_secs", "must be >= 0");
  else if (f.after_secs && !(*f.after_secs <= kMaxFaultSecs)) errs.emplace_back("after_secs", cap);
  if (f.duration_secs && !(*f.duration_secs > 0)) errs.emplace_back("duration_secs", "must be > 0");
  else if (f.duration_secs && !(*f.duration_secs <= kMaxFaultSecs)) errs.emplace_back("duration_secs", cap);
  if (!(f.jitter_secs >= 0)) errs.emplace_back("jitter_secs", "must be >= 0");
  else if (!(f.jitter_secs <= kMaxFaultSecs)) errs.emplace_back("jitter_secs", cap);
  const bool needs_task = !is_link(f.kind) && f.kind != FaultKind::kPartition;
  if (needs_task && f.task.empty()) errs.emplace_back("task", std::string("required for kind '") + fault_kind_name(f.kind) + "'");
  switch (f.kind) {
    case FaultKind::kKill:
      if (!f.at_step && !f.after_secs) errs.emplace_back("at_step", "kill needs at_step or after_secs");
      break;
    case FaultKind::kThrow:
      if (f.actor != "device" && f.actor != "variable")
        errs.emplace_back("actor", "'" + f.actor + "' is not an actor kind (device or variable)");
      break;
    case FaultKind::kDelay:
      if (f.delay_ms < 1 || f.delay_ms > 3600000) errs.emplace_back("delay_ms", "must be in 1..3600000");
      [[fallthrough]];
    case FaultKind::kDrop:
    case FaultKind::kDuplicate:
      if (!(f.probability > 0 && f.probability <= 1)) errs.emplace_back("probability", "must be in (0, 1]");
      if (f.src.empty() && f.dst.empty()) errs.emplace_back("src", "a link fault needs src or dst (or both)");
      if (!f.src.empty() && f.src == f.dst) errs.emplace_back("dst", "src and dst are the same task");
      break;
    case FaultKind::kPartition: {
      if (f.tasks_a.empty()) errs.emplace_back("tasks_a", "a partition needs tasks on both sides");
      if (f.tasks_b.empty()) errs.emplace_back("tasks_b", "a partition needs tasks on both sides");
      if (!f.duration_secs) errs.emplace_back("duration_secs", "required for kind 'partition'");
      std::set<std::string> a;
      for (const auto& t : f.tasks_a)
        if (!a.insert(t).second) errs.emplace_back("tasks_a", "task " + short_task_name(t) + " is listed twice");
      std::set<std::string> b;
      for (const auto& t : f.tasks_b) {
        if (!b.insert(t).second) errs.emplace_back("tasks_b", "task " + short_task_name(t) + " is listed twice");
        if (a.count(t)) errs.emplace_back("tasks_b", "task " + short_task_name(t) + " is on both sides");
      }
      break;
    }
    case FaultKind::kSlow:
      if (!(f.factor > 1 && f.factor <= 1000)) errs.emplace_back("factor", "must be in (1, 1000]");
      if (!f.device.empty()) {
        std::string d = normalise_device(f.device);
        if (d.empty()) errs.emplace_back("device", "'" + f.device + "' is not a device such as \"CPU:0\" or \"GPU:1\"");
        else f.device = d;
      }
      break;
    case FaultKind::kCorruptCheckpoint:
      if (f.logdir.empty()) errs.emplace_back("logdir", "required for kind 'corrupt_checkpoint'");
      if (f.mode != "flip" && f.mode != "truncate")
        errs.emplace_back("mode", "'" + f.mode + "' is not a corruption mode (flip or truncate)");
      break;
  }
  return errs;
}

// ---- TOML reading ----------------------------------------------------------------------------

struct Pos {
  int line = 0, column = 0;
};
Pos pos_of(const toml::source_region& r) { return Pos{static_cast<int>(r.begin.line), static_cast<int>(r.begin.column)}; }

const char* type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    default: return "date/time";
  }
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string suggestion(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& k : known) {
    size_t d = edit_distance(key, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  if (best_d <= 2 || best_d <= key.size() / 3) return " (did you mean '" + best + "'?)";
  std::string all;
  for (size_t i = 0; i < known.size(); ++i) all += (i ? ", " : "") + known[i];
  return " (known: " + all + ")";
}

class PlanReader {
 public:
  explicit PlanReader(std::string source) { plan_.source = std::move(source); }

  Result<FaultPlan> read(std::string_view text) {
    toml::table root;
    if (const TomlAsciiError bad = first_non_ascii(text); bad.line > 0) {
      error(Pos{bad.line, bad.column}, "", non_ascii_message(bad, "fault plans"));
      return finish();
    }
    try {
      root = toml::parse(text, std::string_view(plan_.source));
    } catch (const toml::parse_error& e) {
      error(pos_of(e.source()), "", "TOML syntax error: " + std::string(e.description()));
      return finish();
    }
    bool have_seed = false;
    for (auto&& [k, v] : root) {
      const std::string key(k.str());
      if (key == "seed") {
        const auto* i = v.as_integer();
        if (!i) error(pos_of(v.source()), "seed", std::string("expected an integer, got ") + type_name(v));
        else if (i->get() < 0) error(pos_of(v.source()), "seed", "must be >= 0, got " + std::to_string(i->get()));
        else {
          plan_.seed = static_cast<uint64_t>(i->get());
          have_seed = true;
        }
      } else if (key == "fault") {
        const toml::array* arr = v.as_array();
        if (!arr || !arr->is_array_of_tables()) {
          error(pos_of(v.source()), "fault", "expected [[fault]] tables");
          continue;
        }
        for (size_t i = 0; i < arr->size(); ++i) read_fault(*arr->get(i)->as_table(), i);
      } else {
        error(pos_of(k.source()), key, "unknown key" + suggestion(key, {"seed", "fault"}));
      }
    }
    if (!have_seed && !root.get("seed")) error(Pos{1, 1}, "seed", "missing: a plan needs a seed (seed = 7)");
    return finish();
  }

 private:
  struct Error {
    Pos pos;
    std::string text;
  };

  void error(Pos p, const std::string& key, const std::string& msg) {
    std::string text = plan_.source + ":";
    if (p.line > 0) text += std::to_string(p.line) + ":" + std::to_string(p.column) + ":";
    text += " ";
    if (!key.empty()) text += key + ": ";
    errors_.push_back(Error{p, text + msg});
  }

  Result<FaultPlan> finish() {
    if (errors_.empty()) return std::move(plan_);
    std::stable_sort(errors_.begin(), errors_.end(), [](const Error& a, const Error& b) {
      return a.pos.line != b.pos.line ? a.pos.line < b.pos.line : a.pos.column < b.pos.column;
    });
    std::string msg;
    for (size_t i = 0; i < errors_.size(); ++i) msg += (i ? "\n" : "") + errors_[i].text;
    return InvalidArgument(msg);
  }

  bool number(const toml::node& v, const std::string& path, double* out) {
    if (const auto* f = v.as_floating_point()) *out = f->get();
    else if (const auto* i = v.as_integer()) *out = static_cast<double>(i->get());
    else {
      error(pos_of(v.source()), path, std::string("expected a number, got ") + type_name(v));
      return false;
    }
    if (!std::isfinite(*out)) {
      error(pos_of(v.source()), path, "must be a finite number");
      return false;
    }
    return true;
  }
  bool integer(const toml::node& v, const std::string& path, int64_t* out) {
    const auto* i = v.as_integer();
    if (!i) {
      error(pos_of(v.source()), path, std::string("expected an integer, got ") + type_name(v));
      return false;
    }
    *out = i->get();
    return true;
  }
  bool string(const toml::node& v, const std::string& path, std::string* out) {
    const auto* s = v.as_string();
    if (!s) {
      error(pos_of(v.source()), path, std::string("expected a string, got ") + type_name(v));
      return false;
    }
    *out = s->get();
    return true;
  }
  bool strings(const toml::node& v, const std::string& path, std::vector<std::string>* out) {
    const auto* a = v.as_array();
    if (!a) {
      error(pos_of(v.source()), path, std::string("expected an array of task names, got ") + type_name(v));
      return false;
    }
    for (size_t i = 0; i < a->size(); ++i) {
      std::string s;
      if (!string(*a->get(i), path + "[" + std::to_string(i) + "]", &s)) return false;
      out->push_back(s);
    }
    return true;
  }

  void read_fault(const toml::table& t, size_t index) {
    const std::string prefix = "fault[" + std::to_string(index) + "]";
    const Pos table_pos = pos_of(t.source());
    Fault f;
    f.line = table_pos.line;
    f.column = table_pos.column;
    // The kind decides which keys apply.
    std::optional<FaultKind> kind;
    if (const toml::node* k = t.get("kind")) {
      std::string s;
      if (string(*k, prefix + ".kind", &s)) {
        for (const auto& [name, kk] : kKinds)
          if (name == s) kind = kk;
        if (!kind) {
          std::vector<std::string> names;
          for (const auto& [name, kk] : kKinds) names.push_back(name);
          error(pos_of(k->source()), prefix + ".kind", "unknown kind '" + s + "'" + suggestion(s, names));
        }
      }
    } else {
      error(table_pos, prefix + ".kind", "missing (kill, throw, drop, delay, duplicate, partition, slow or corrupt_checkpoint)");
    }
    if (kind) f.kind = *kind;
    std::map<std::string, Pos> key_pos;
    for (auto&& [k, v] : t) {
      const std::string key(k.str()), path = prefix + "." + key;
      key_pos[key] = pos_of(v.source());
      if (key == "kind") continue;
      if (std::find(kAllFaultKeys.begin(), kAllFaultKeys.end(), key) == kAllFaultKeys.end()) {
        error(pos_of(k.source()), path,
              "unknown key" + suggestion(key, kind ? keys_for(*kind) : kAllFaultKeys));
        continue;
      }
      if (kind) {
        const auto& allowed = keys_for(*kind);
        if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
          error(pos_of(k.source()), path, std::string("does not apply to kind '") + fault_kind_name(*kind) + "'");
          continue;
        }
      }
      double d = 0;
      int64_t i = 0;
      if (key == "task") string(v, path, &f.task);
      else if (key == "src") string(v, path, &f.src);
      else if (key == "dst") string(v, path, &f.dst);
      else if (key == "tasks_a") strings(v, path, &f.tasks_a);
      else if (key == "tasks_b") strings(v, path, &f.tasks_b);
      else if (key == "at_step") { if (integer(v, path, &i)) f.at_step = i; }
      else if (key == "after_secs") { if (number(v, path, &d)) f.after_secs = d; }
      else if (key == "duration_secs") { if (number(v, path, &d)) f.duration_secs = d; }
      else if (key == "jitter_secs") { if (number(v, path, &d)) f.jitter_secs = d; }
      else if (key == "probability") { if (number(v, path, &d)) f.probability = d; }
      else if (key == "delay_ms") { if (integer(v, path, &i)) f.delay_ms = i; }
      else if (key == "factor") { if (number(v, path, &d)) f.factor = d; }
      else if (key == "device") string(v, path, &f.device);
      else if (key == "actor") string(v, path, &f.actor);
      else if (key == "mode") string(v, path, &f.mode);
      else if (key == "logdir") string(v, path, &f.logdir);
    }
    if (!kind) return;
    for (auto& [key, msg] : check_fault(f)) {
      auto p = key_pos.find(key);
      error(p == key_pos.end() ? table_pos : p->second, prefix + "." + key, msg);
    }
    plan_.faults.push_back(std::move(f));
  }

  FaultPlan plan_;
  std::vector<Error> errors_;
};

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string toml_float(double d) {
  std::string s = num(d);
  if (s.find_first_of(".eE") == std::string::npos && s.find("inf") == std::string::npos && s.find("nan") == std::string::npos)
    s += ".0";
  return s;
}

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

namespace {
std::optional<double> derived_start(const Fault& f, uint64_t seed, size_t index) {
  if (f.at_step) return std::nullopt;
  double t = f.after_secs.value_or(0.0);
  if (f.jitter_secs > 0) t += f.jitter_secs * FaultRng::stream(seed, index, 1).uniform();
  return t;
}

// Lenient canonical form for hook arguments ("" stays "").
std::string norm_task(const std::string& s) {
  if (s.empty()) return s;
  if (s.rfind("/job:", 0) == 0 && s.find("/replica:") != std::string::npos) return task_of_device(s);
  auto c = canonical_task(task_of_device(s));
  return c.ok() ? *c : s;
}
}  // namespace

std::optional<double> FaultPlan::start_secs(size_t i) const {
  if (i >= faults.size()) return std::nullopt;
  return derived_start(faults[i], seed, i);
}

bool FaultPlan::involves(size_t i, const std::string& self_task) const {
  if (i >= faults.size()) return false;
  const Fault& f = faults[i];
  const std::string self = norm_task(self_task);
  if (is_link(f.kind)) return f.dst.empty() || f.dst == self;
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

// ---- FaultInjector ---------------------------------------------------------------------------

struct FaultInjector::Active {
  Fault f;
  size_t index = 0;
  uint64_t seed = 0;
  FaultRng rng{0};
  bool send_side = true, recv_side = true;
  std::optional<Clock::time_point> start, end;
  double start_secs = 0;  // derived, for logs
  bool started = false, ended = false, fired = false;
  int64_t hits = 0;

  // How the start reads in the log line (describe() already says "at step N").
  std::string trigger() const { return f.at_step ? std::string() : "at t=" + secs(start_secs) + " s"; }

  bool active(Clock::time_point now) const {
    if (!start || now < *start) return false;
    if (end && now >= *end) return false;
    return !(is_one_shot(f.kind) && fired);
  }
};

FaultInjector& FaultInjector::global() {
  static FaultInjector* g = new FaultInjector();
  return *g;
}

FaultInjector::FaultInjector() = default;

FaultInjector::~FaultInjector() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (timer_.joinable()) timer_.join();
}

void FaultInjector::set_seed(uint64_t seed) {
  std::lock_guard<std::mutex> l(mu_);
  seed_ = seed;
}

uint64_t FaultInjector::seed() const {
  std::lock_guard<std::mutex> l(mu_);
  return seed_;
}

void FaultInjector::set_kill_handler_for_testing(std::function<void(const std::string&)> fn) {
  std::lock_guard<std::mutex> l(mu_);
  kill_fn_ = std::move(fn);
}

void FaultInjector::ensure_timer_locked() {
  if (!timer_.joinable()) timer_ = std::thread([this] { timer_loop(); });
}

Status FaultInjector::add_locked(Fault f, size_t index, uint64_t seed, bool send_side, bool recv_side,
                                 std::optional<double> start_secs, std::string* description) {
  auto errs = check_fault(f);
  if (!errs.empty()) {
    std::string msg = "fault " + std::string(fault_kind_name(f.kind)) + ": ";
    for (size_t i = 0; i < errs.size(); ++i) msg += (i ? "; " : "") + errs[i].first + ": " + errs[i].second;
    return InvalidArgument(msg);
  }
  auto a = std::make_unique<Active>();
  a->index = index;
  a->seed = seed;
  a->rng = FaultRng::stream(seed, index, 0);
  a->send_side = send_side;
  a->recv_side = recv_side;
  if (start_secs) {
    a->start_secs = *start_secs;
    a->start = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*start_secs));
    if (f.duration_secs)
      a->end = *a->start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*f.duration_secs));
  }
  a->f = std::move(f);
  if (description) {
    *description = a->f.describe();
    if (start_secs) *description += " (starts at t=" + secs(*start_secs) + " s)";
  }
  faults_.push_back(std::move(a));
  armed_.store(true, std::memory_order_release);
  ensure_timer_locked();
  return Status::OK();
}

Status FaultInjector::add(Fault f) {
  std::lock_guard<std::mutex> l(mu_);
  const size_t index = added_++;
  std::optional<double> start = derived_start(f, seed_, index);
  Status s = add_locked(std::move(f), index, seed_, true, true, start, nullptr);
  cv_.notify_all();
  return s;
}

Result<std::vector<std::string>> FaultInjector::load(const FaultPlan& plan, const std::string& self_task) {
  std::vector<std::string> out;
  std::lock_guard<std::mutex> l(mu_);
  seed_ = plan.seed;
  for (size_t i = 0; i < plan.faults.size(); ++i) {
    if (!plan.involves(i, self_task)) continue;
    const Fault& f = plan.faults[i];
    const bool receiver_only = is_link(f.kind) || f.kind == FaultKind::kPartition;
    std::string desc;
    AF_RETURN_IF_ERROR(add_locked(f, i, plan.seed, !receiver_only, true, plan.start_secs(i), &desc));
    ++added_;
    AF_LOG(INFO) << "fault plan " << plan.source << " (seed " << plan.seed << "): loaded for "
                 << short_task_name(norm_task(self_task)) << ": " << desc;
    out.push_back(desc);
  }
  cv_.notify_all();
  return out;
}

void FaultInjector::clear() {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& a : faults_)
    AF_LOG(INFO) << "fault cleared: " << a->f.describe() << " (" << a->hits << " hits, seed " << a->seed << ")";
  faults_.clear();
  armed_.store(false, std::memory_order_release);
  cv_.notify_all();
}

std::vector<std::string> FaultInjector::describe() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> out;
  const auto now = Clock::now();
  for (const auto& a : faults_) {
    const char* state = a->active(now) ? "active" : (a->start && (a->fired || a->ended || now >= *a->start)) ? "done" : "pending";
    out.push_back(a->f.describe() + " [" + state + ", " + std::to_string(a->hits) + " hits]");
  }
  return out;
}

FaultStats FaultInjector::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void FaultInjector::fire_locked(Active& a, const std::string& trigger, std::vector<std::function<void()>>* actions) {
  if (a.started) return;
  a.started = true;
  const std::string what = a.f.describe();
  const std::string line =
      "fault injected: " + what + (trigger.empty() ? "" : " " + trigger) + " (seed " + std::to_string(a.seed) + ")";
  switch (a.f.kind) {
    case FaultKind::kKill: {
      a.fired = true;
      ++stats_.killed;
      ++a.hits;
      AF_LOG(WARNING) << line << ": SIGKILL to pid " << ::getpid();
      auto fn = kill_fn_;
      actions->push_back([fn, line] {
        if (fn) fn(line);
        else ::kill(::getpid(), SIGKILL);
      });
      break;
    }
    case FaultKind::kCorruptCheckpoint: {
      a.fired = true;
      ++stats_.corrupted;
      ++a.hits;
      const std::string dir = a.f.logdir;
      const CorruptMode mode = a.f.mode == "truncate" ? CorruptMode::kTruncateHalf : CorruptMode::kFlipByte;
      actions->push_back([dir, mode, line] {
        auto p = corrupt_latest(dir, mode);
        if (p.ok()) AF_LOG(WARNING) << line << ": damaged " << *p;
        else AF_LOG(WARNING) << line << ": nothing damaged (" << p.status().message() << ")";
      });
      break;
    }
    case FaultKind::kThrow:
      AF_LOG(WARNING) << line << ": armed for the next message";
      break;
    default:
      AF_LOG(WARNING) << line;
  }
}

void FaultInjector::timer_loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    std::vector<std::function<void()>> actions;
    const auto now = Clock::now();
    auto next = Clock::time_point::max();
    for (auto it = timed_.begin(); it != timed_.end();) {
      if (it->at <= now) {
        actions.push_back(std::move(it->fn));
        it = timed_.erase(it);
      } else {
        next = std::min(next, it->at);
        ++it;
      }
    }
    for (auto& a : faults_) {
      if (a->start && !a->started) {
        if (now >= *a->start) fire_locked(*a, a->trigger(), &actions);
        else next = std::min(next, *a->start);
      }
      if (a->end && a->started && !a->ended) {
        if (now >= *a->end) {
          a->ended = true;
          AF_LOG(WARNING) << "fault healed: " << a->f.describe() << " (" << a->hits << " messages affected, seed "
                          << a->seed << ")";
        } else {
          next = std::min(next, *a->end);
        }
      }
    }
    if (!actions.empty()) {
      l.unlock();
      for (auto& fn : actions) fn();
      l.lock();
      continue;
    }
    if (next == Clock::time_point::max()) cv_.wait(l);
    else cv_.wait_until(l, next);
  }
}

void FaultInjector::run_after(std::chrono::milliseconds delay, std::function<void()> fn) {
  std::lock_guard<std::mutex> l(mu_);
  timed_.push_back(Timed{Clock::now() + delay, std::move(fn)});
  ensure_timer_locked();
  cv_.notify_all();
}

Status FaultInjector::apply(const LinkDecision& d, const std::function<Status()>& deliver) {
  if (d.drop) return Status::OK();
  if (d.delay_ms > 0) {
    const bool dup = d.duplicate;
    run_after(std::chrono::milliseconds(d.delay_ms), [deliver, dup] {
      for (int i = 0; i < (dup ? 2 : 1); ++i) {
        Status s = deliver();
        if (!s.ok()) {
          AF_LOG(WARNING) << "delayed delivery failed: " << s.message();
        }
      }
    });
    return Status::OK();
  }
  Status s = deliver();
  if (d.duplicate) {
    Status s2 = deliver();
    if (s.ok()) s = s2;
  }
  return s;
}

LinkDecision FaultInjector::decide(const std::string& src_in, const std::string& dst_in, bool sending) {
  LinkDecision d;
  if (!armed()) return d;
  const std::string src = norm_task(src_in), dst = norm_task(dst_in);
  if (!src.empty() && src == dst) return d;  // not a link
  std::vector<std::function<void()>> actions;
  std::lock_guard<std::mutex> l(mu_);
  const auto now = Clock::now();
  auto in = [](const std::vector<std::string>& v, const std::string& t) {
    return !t.empty() && std::find(v.begin(), v.end(), t) != v.end();
  };
  for (auto& ap : faults_) {
    Active& a = *ap;
    if (sending ? !a.send_side : !a.recv_side) continue;
    const Fault& f = a.f;
    if (f.kind == FaultKind::kPartition) {
      if (!a.active(now)) continue;
      if ((in(f.tasks_a, src) && in(f.tasks_b, dst)) || (in(f.tasks_b, src) && in(f.tasks_a, dst))) {
        fire_locked(a, a.trigger(), &actions);
        d.drop = true;
        ++a.hits;
      }
      continue;
    }
    if (!is_link(f.kind) || !a.active(now)) continue;
    if (!f.src.empty() && f.src != src) continue;
    if (!f.dst.empty() && f.dst != dst) continue;
    fire_locked(a, a.trigger(), &actions);
    if (f.probability < 1.0 && !(a.rng.uniform() < f.probability)) continue;
    ++a.hits;
    if (f.kind == FaultKind::kDrop) d.drop = true;
    else if (f.kind == FaultKind::kDelay) d.delay_ms = std::max(d.delay_ms, f.delay_ms);
    else d.duplicate = true;
  }
  if (d.drop) {
    ++stats_.dropped;
    d.delay_ms = 0;
    d.duplicate = false;
  } else {
    if (d.delay_ms > 0) ++stats_.delayed;
    if (d.duplicate) ++stats_.duplicated;
  }
  return d;
}

LinkDecision FaultInjector::on_send(const std::string& src_task, const std::string& dst_task) {
  return decide(src_task, dst_task, true);
}

LinkDecision FaultInjector::on_receive(const std::string& src_task, const std::string& self_task) {
  return decide(src_task, self_task, false);
}

void FaultInjector::on_global_step(int64_t step) {
  int64_t prev = last_step_.load();
  while (step > prev && !last_step_.compare_exchange_weak(prev, step)) {
  }
  if (!armed()) return;
  std::vector<std::function<void()>> actions;
  {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = Clock::now();
    for (auto& a : faults_) {
      if (!a->f.at_step || a->start || step < *a->f.at_step) continue;
      a->start = now;
      if (a->f.duration_secs)
        a->end = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*a->f.duration_secs));
      fire_locked(*a, "(observed step " + std::to_string(step) + ")", &actions);
    }
    cv_.notify_all();  // end times to watch
  }
  for (auto& fn : actions) fn();
}

bool FaultInjector::targets_device(const std::string& device_name) const {
  if (!armed()) return false;
  std::lock_guard<std::mutex> l(mu_);
  const auto now = Clock::now();
  const std::string task = task_of_device(device_name);
  for (const auto& a : faults_) {
    const bool device_fault = a->f.kind == FaultKind::kSlow || (a->f.kind == FaultKind::kThrow && a->f.actor == "device");
    if (!device_fault || (a->end && now >= *a->end) || (is_one_shot(a->f.kind) && a->fired)) continue;
    if (a->f.task.empty() || a->f.task == task) return true;
  }
  return false;
}

double FaultInjector::slow_factor(const std::string& device_name) {
  if (!armed()) return 1.0;
  std::vector<std::function<void()>> actions;
  double factor = 1.0;
  {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = Clock::now();
    const std::string task = task_of_device(device_name);
    for (auto& a : faults_) {
      if (a->f.kind != FaultKind::kSlow || !a->active(now)) continue;
      if (a->f.task != task) continue;
      if (!a->f.device.empty()) {
        const std::string suffix = "/device:" + a->f.device;
        if (device_name.size() < suffix.size() ||
            device_name.compare(device_name.size() - suffix.size(), suffix.size(), suffix) != 0)
          continue;
      }
      fire_locked(*a, a->trigger(),
                  &actions);
      ++a->hits;
      factor = std::max(factor, a->f.factor);
    }
    if (factor > 1.0) ++stats_.slowed_steps;
  }
  for (auto& fn : actions) fn();
  return factor;
}

void FaultInjector::maybe_throw(const std::string& actor_kind, const std::string& where) {
  if (!armed()) return;
  std::string msg;
  std::vector<std::function<void()>> actions;
  {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = Clock::now();
    const std::string task = where.empty() ? "" : task_of_device(where);
    for (auto& a : faults_) {
      if (a->f.kind != FaultKind::kThrow || a->f.actor != actor_kind || !a->active(now)) continue;
      if (!task.empty() && !a->f.task.empty() && a->f.task != task) continue;
      fire_locked(*a, a->trigger(),
                  &actions);
      a->fired = true;
      ++a->hits;
      ++stats_.thrown;
      msg = "injected fault: exception in the " + actor_kind + " actor " + (where.empty() ? short_task_name(a->f.task) : where) +
            " (seed " + std::to_string(a->seed) + ")";
      break;
    }
  }
  for (auto& fn : actions) fn();
  if (!msg.empty()) {
    AF_LOG(WARNING) << "fault injected: throwing: " << msg;
    throw InjectedFault(msg);
  }
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
