#include "cli/waits_view.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "config/task_names.h"

namespace actorflow {
namespace cli {
namespace {

std::string age_text(double secs) {
  char b[32];
  std::snprintf(b, sizeof b, secs < 100 ? "%.1fs" : "%.0fs", secs);
  return b;
}

}  // namespace

std::vector<TaskWaits> parse_task_waits(const std::vector<std::pair<std::string, Result<std::string>>>& answers,
                                        double min_age_secs) {
  std::vector<TaskWaits> out;
  for (const auto& [task, body] : answers) {
    TaskWaits t;
    t.task = task;
    if (!body.ok()) {
      t.error = body.status().message();
      out.push_back(std::move(t));
      continue;
    }
    const nlohmann::json j = nlohmann::json::parse(*body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("waits") || !j["waits"].is_array()) {
      t.error = "GET /waits did not answer the JSON of waits (an older actorflow?)";
      out.push_back(std::move(t));
      continue;
    }
    for (const auto& w : j["waits"]) {
      if (!w.is_object()) continue;
      WaitInfo i;
      i.kind = w.value("kind", "");
      i.what = w.value("what", "");
      i.on = w.value("on", "");
      i.since_unix_ms = w.value("since_unix_ms", int64_t{0});
      i.age_secs = w.value("age_secs", 0.0);
      if (i.age_secs >= min_age_secs) t.waits.push_back(std::move(i));
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::string> waits_end_at(const std::vector<TaskWaits>& tasks) {
  std::map<std::string, std::set<std::string>> edges;  // task -> the other tasks it waits on
  std::set<std::string> unreadable, waited_on;
  for (const auto& t : tasks) {
    if (!t.error.empty()) unreadable.insert(t.task);
    for (const auto& w : t.waits) {
      const std::string on = normalise_task_name(w.on);
      if (on.empty() || on == t.task) continue;
      edges[t.task].insert(on);
      waited_on.insert(on);
    }
  }
  std::vector<std::string> ends;
  for (const auto& on : waited_on)
    if (unreadable.count(on) || !edges.count(on)) ends.push_back(on);
  if (ends.empty()) ends.assign(waited_on.begin(), waited_on.end());  // a cycle: all of it
  return ends;
}

std::string render_waits_text(const std::vector<TaskWaits>& tasks) {
  std::ostringstream o;
  for (const auto& t : tasks) {
    if (!t.error.empty()) {
      o << t.task << ": waits unknown (" << t.error << ")\n";
      continue;
    }
    if (t.waits.empty()) {
      o << t.task << ": no waits\n";
      continue;
    }
    o << t.task << ": " << t.waits.size() << (t.waits.size() == 1 ? " wait\n" : " waits\n");
    std::vector<std::vector<std::string>> cells{{"KIND", "ON", "AGE", "WHAT"}};
    for (const auto& w : t.waits)
      cells.push_back({w.kind, w.on.empty() ? "-" : short_task_name(w.on), age_text(w.age_secs), w.what});
    size_t width[3] = {0, 0, 0};
    for (const auto& row : cells)
      for (size_t c = 0; c < 3; ++c) width[c] = std::max(width[c], row[c].size());
    for (const auto& row : cells) {
      o << "  ";
      for (size_t c = 0; c < 3; ++c) o << row[c] << std::string(width[c] - row[c].size() + 2, ' ');
      o << row[3] << "\n";
    }
  }
  const auto ends = waits_end_at(tasks);
  if (ends.empty()) {
    o << "no task waits on another\n";
  } else {
    o << "waits end at:";
    for (const auto& e : ends) o << " " << e;
    o << "\n";
  }
  return o.str();
}

std::string render_waits_json(const std::vector<TaskWaits>& tasks) {
  std::string o = "{\"tasks\": [";
  for (size_t i = 0; i < tasks.size(); ++i) {
    const auto& t = tasks[i];
    std::string w = waits_json(t.task, t.waits);  // {"task": ..., "waits": [...]}\n
    while (!w.empty() && (w.back() == '\n' || w.back() == '}')) w.pop_back();
    o += (i ? ", " : "") + w + ", \"error\": " + json_quote(t.error) + "}";
  }
  o += "], \"waits_end_at\": [";
  const auto ends = waits_end_at(tasks);
  for (size_t i = 0; i < ends.size(); ++i) o += (i ? ", " : "") + json_quote(ends[i]);
  return o + "]}\n";
}

}  // namespace cli
}  // namespace actorflow
