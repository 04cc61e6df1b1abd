#include "core/step_stats.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <unordered_map>

#include "core/waits.h"  // json_quote

namespace actorflow {

Result<ClockAlignment> align_clock(const std::vector<ClockSample>& samples, bool same_process) {
  ClockAlignment a;
  if (same_process) {
    a.method = "same process";
    return a;
  }
  if (samples.empty()) return InvalidArgument("align_clock: no clock samples of the task");
  const ClockSample* best = nullptr;
  for (const auto& s : samples) {
    if (s.received_ns < s.sent_ns)
      return InvalidArgument("align_clock: a sample answered at " + std::to_string(s.received_ns) +
                             " ns, before its request at " + std::to_string(s.sent_ns) + " ns");
    if (!best || s.received_ns - s.sent_ns < best->received_ns - best->sent_ns) best = &s;
  }
  a.method = "round-trip midpoint";
  a.round_trip_ns = best->received_ns - best->sent_ns;
  // sent + rtt/2 without overflowing for clocks near the top of int64.
  const int64_t midpoint = best->sent_ns + a.round_trip_ns / 2;
  a.offset_ns = best->remote_ns - midpoint;
  a.uncertainty_ns = (a.round_trip_ns + 1) / 2;
  return a;
}

StepStats merge_step_trace(int64_t step_id, int64_t start_ns, int64_t end_ns, const std::string& client_task,
                           std::vector<TaskTracePart> parts) {
  StepStats out;
  out.step_id = step_id;
  out.start_ns = start_ns;
  out.end_ns = end_ns;
  std::vector<TraceEvent> all;
  for (auto& p : parts) {
    TaskTraceInfo info;
    info.task = p.task;
    info.clock = p.clock;
    info.dropped = p.dropped;
    info.error = p.error;
    out.tasks.push_back(std::move(info));
    for (auto& e : p.events) {
      e.start_ns -= p.clock.offset_ns;
      e.end_ns -= p.clock.offset_ns;
      all.push_back(std::move(e));
    }
  }
  // Each task's count of the events it recorded (a process serving several tasks reports them
  // all in one part); a task that recorded nothing and reports nothing amiss was not touched.
  std::map<std::string, int64_t> per_task;
  for (const auto& e : all) ++per_task[e.task];
  std::vector<TaskTraceInfo> touched;
  for (auto& info : out.tasks) {
    info.events = per_task[info.task];
    if (info.events > 0 || info.dropped > 0 || !info.error.empty() || info.task == client_task)
      touched.push_back(std::move(info));
  }
  out.tasks = std::move(touched);
  // Transfers: send -> (arrive) -> deliver of one rendezvous key (a step sends each key once).
  std::unordered_map<std::string, size_t> arrive, deliver;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].kind == "arrive") arrive.emplace(all[i].name, i);
    if (all[i].kind == "deliver") deliver.emplace(all[i].name, i);
  }
  std::vector<bool> folded(all.size(), false);
  std::vector<TraceEvent> transfers;
  for (size_t i = 0; i < all.size(); ++i) {
    const TraceEvent& s = all[i];
    if (s.kind != "send") continue;
    auto d = deliver.find(s.name);
    if (d == deliver.end()) continue;
    const TraceEvent& dv = all[d->second];
    auto a = arrive.find(s.name);
    const TraceEvent* ar = a == arrive.end() ? nullptr : &all[a->second];
    TraceEvent t;
    t.task = dv.task;
    t.track = "transfers";
    t.name = s.name;
    t.kind = "transfer";
    t.op = s.op;
    t.start_ns = s.start_ns;
    t.end_ns = std::max(dv.start_ns, s.start_ns);
    const int64_t arrived = ar ? ar->start_ns : s.end_ns;
    t.nums = {{"bytes", s.num("bytes", 0)},
              {"send_ns", s.end_ns - s.start_ns},
              {"wire_ns", ar ? std::max<int64_t>(0, arrived - s.start_ns) : 0},
              {"queue_ns", std::max<int64_t>(0, dv.start_ns - arrived)}};
    t.texts = {{"sender", s.track}, {"receiver", dv.track}};
    folded[d->second] = true;
    if (ar) folded[a->second] = true;
    transfers.push_back(std::move(t));
  }
  for (size_t i = 0; i < all.size(); ++i)
    if (!folded[i]) out.events.push_back(std::move(all[i]));
  for (auto& t : transfers) out.events.push_back(std::move(t));
  TraceEvent step;
  step.task = client_task;
  step.track = "Session::run";
  step.name = "step " + std::to_string(step_id);
  step.kind = "step";
  step.op = "Session::run";
  step.start_ns = start_ns;
  step.end_ns = end_ns;
  out.events.push_back(std::move(step));
  std::stable_sort(out.events.begin(), out.events.end(),
                   [](const TraceEvent& a, const TraceEvent& b) { return a.start_ns < b.start_ns; });
  return out;
}

namespace {

std::string micros(int64_t ns) {
  char b[48];
  std::snprintf(b, sizeof b, "%.3f", static_cast<double>(ns) / 1000.0);
  return b;
}

std::string args_json(const TraceEvent& e) {
  std::string o = "{";
  bool first = true;
  auto sep = [&] {
    if (!first) o += ", ";
    first = false;
  };
  if (!e.op.empty()) {
    sep();
    o += "\"op\": " + json_quote(e.op);
  }
  for (const auto& [k, v] : e.nums) {
    sep();
    o += json_quote(k) + ": " + std::to_string(v);
  }
  for (const auto& [k, v] : e.texts) {
    sep();
    o += json_quote(k) + ": " + json_quote(v);
  }
  return o + "}";
}

}  // namespace

std::string chrome_trace_json(const StepStats& stats) {
  std::map<std::string, int> pids;
  std::map<std::pair<int, std::string>, int> tids;
  std::string meta;
  auto pid_of = [&](const std::string& task) {
    auto it = pids.find(task);
    if (it != pids.end()) return it->second;
    const int pid = static_cast<int>(pids.size()) + 1;
    pids.emplace(task, pid);
    meta += "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + std::to_string(pid) +
            ", \"args\": {\"name\": " + json_quote(task.empty() ? "(this process)" : task) + "}},\n";
    meta += "{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": " + std::to_string(pid) +
            ", \"args\": {\"sort_index\": " + std::to_string(pid) + "}},\n";
    return pid;
  };
  auto tid_of = [&](int pid, const std::string& track) {
    auto key = std::make_pair(pid, track);
    auto it = tids.find(key);
    if (it != tids.end()) return it->second;
    const int tid = static_cast<int>(tids.size()) + 1;
    tids.emplace(key, tid);
    meta += "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + std::to_string(pid) + ", \"tid\": " +
            std::to_string(tid) + ", \"args\": {\"name\": " + json_quote(track) + "}},\n";
    return tid;
  };
  for (const auto& t : stats.tasks) pid_of(t.task);
  std::string body;
  // Where each send ran, for the transfers' flow arrows.
  std::map<std::string, std::pair<int, int>> send_at;
  for (const auto& e : stats.events) {
    const int pid = pid_of(e.task);
    const int tid = tid_of(pid, e.track);
    if (e.kind == "send") send_at[e.name] = {pid, tid};
    body += "{\"name\": " + json_quote(e.name) + ", \"cat\": " + json_quote(e.kind) + ", \"ph\": \"X\", \"ts\": " +
            micros(e.start_ns - stats.start_ns) + ", \"dur\": " + micros(std::max<int64_t>(0, e.end_ns - e.start_ns)) +
            ", \"pid\": " + std::to_string(pid) + ", \"tid\": " + std::to_string(tid) + ", \"args\": " +
            args_json(e) + "},\n";
  }
  int flow = 0;
  for (const auto& e : stats.events) {
    if (e.kind != "transfer") continue;
    auto s = send_at.find(e.name);
    if (s == send_at.end()) continue;
    ++flow;
    const int pid = pid_of(e.task);
    const int tid = tid_of(pid, e.track);
    body += "{\"name\": \"transfer\", \"cat\": \"transfer\", \"ph\": \"s\", \"id\": " + std::to_string(flow) +
            ", \"ts\": " + micros(e.start_ns - stats.start_ns) + ", \"pid\": " + std::to_string(s->second.first) +
            ", \"tid\": " + std::to_string(s->second.second) + "},\n";
    body += "{\"name\": \"transfer\", \"cat\": \"transfer\", \"ph\": \"f\", \"bp\": \"e\", \"id\": " +
            std::to_string(flow) + ", \"ts\": " + micros(e.start_ns - stats.start_ns) + ", \"pid\": " +
            std::to_string(pid) + ", \"tid\": " + std::to_string(tid) + "},\n";
  }
  std::string events = meta + body;
  if (events.size() >= 2) events.resize(events.size() - 2);  // the last ",\n"
  std::string other = "{\"step_id\": " + std::to_string(stats.step_id) + ", \"window_us\": " +
                      micros(stats.end_ns - stats.start_ns) +
                      ", \"clock\": \"each task's steady clock, moved onto the collecting task's: method per task\"" +
                      ", \"tasks\": [";
  for (size_t i = 0; i < stats.tasks.size(); ++i) {
    const auto& t = stats.tasks[i];
    other += std::string(i ? ", " : "") + "{\"task\": " + json_quote(t.task) + ", \"clock_method\": " +
             json_quote(t.clock.method) + ", \"clock_offset_us\": " + micros(t.clock.offset_ns) +
             ", \"round_trip_us\": " + micros(t.clock.round_trip_ns) + ", \"uncertainty_us\": " +
             micros(t.clock.uncertainty_ns) + ", \"events\": " + std::to_string(t.events) +
             ", \"dropped_events\": " + std::to_string(t.dropped) + ", \"error\": " + json_quote(t.error) + "}";
  }
  other += "]}";
  return "{\"traceEvents\": [\n" + events + "\n],\n\"displayTimeUnit\": \"ns\",\n\"otherData\": " + other + "}\n";
}

Status write_chrome_trace(const StepStats& stats, const std::string& path) {
  const std::string json = chrome_trace_json(stats);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return Unavailable("cannot write the trace to " + path + ": " + std::strerror(errno));
  f.write(json.data(), static_cast<std::streamsize>(json.size()));
  f.close();
  if (!f) return Unavailable("writing the trace to " + path + " failed: " + std::strerror(errno));
  return Status::OK();
}

std::string encode_step_stats(const StepStats& stats) {
  std::vector<TraceEvent> all;
  all.reserve(1 + stats.tasks.size() + stats.events.size());
  TraceEvent head;
  head.kind = "step_stats";
  head.start_ns = stats.start_ns;
  head.end_ns = stats.end_ns;
  head.nums = {{"step_id", stats.step_id}, {"tasks", static_cast<int64_t>(stats.tasks.size())}};
  all.push_back(std::move(head));
  for (const TaskTraceInfo& t : stats.tasks) {
    TraceEvent e;
    e.kind = "task_info";
    e.task = t.task;
    e.name = t.clock.method;
    e.nums = {{"offset_ns", t.clock.offset_ns}, {"round_trip_ns", t.clock.round_trip_ns},
              {"uncertainty_ns", t.clock.uncertainty_ns}, {"events", t.events}, {"dropped", t.dropped}};
    e.texts = {{"error", t.error}};
    all.push_back(std::move(e));
  }
  all.insert(all.end(), stats.events.begin(), stats.events.end());
  return encode_trace_events(all, 0);
}

Result<StepStats> decode_step_stats(const std::string& bytes, size_t max_events) {
  AF_ASSIGN_OR_RETURN(auto decoded, decode_trace_events(bytes, max_events));
  std::vector<TraceEvent>& all = decoded.first;
  if (all.empty() || all[0].kind != "step_stats") return DataLoss("step stats: no leading step_stats record");
  StepStats s;
  const TraceEvent& head = all[0];
  s.step_id = head.num("step_id", 0);
  s.start_ns = head.start_ns;
  s.end_ns = head.end_ns;
  const int64_t tasks = head.num("tasks", -1);
  if (tasks < 0 || static_cast<uint64_t>(tasks) > all.size() - 1) return DataLoss("step stats: a bad task count");
  for (int64_t i = 1; i <= tasks; ++i) {
    const TraceEvent& e = all[static_cast<size_t>(i)];
    if (e.kind != "task_info") return DataLoss("step stats: record " + std::to_string(i) + " is not a task's");
    TaskTraceInfo t;
    t.task = e.task;
    t.clock.method = e.name;
    t.clock.offset_ns = e.num("offset_ns", 0);
    t.clock.round_trip_ns = e.num("round_trip_ns", 0);
    t.clock.uncertainty_ns = e.num("uncertainty_ns", 0);
    t.events = e.num("events", 0);
    t.dropped = e.num("dropped", 0);
    t.error = e.text("error");
    s.tasks.push_back(std::move(t));
  }
  s.events.assign(std::make_move_iterator(all.begin() + 1 + tasks), std::make_move_iterator(all.end()));
  return s;
}

StepStats align_remote_step_stats(StepStats stats, int64_t sent_ns, int64_t received_ns, const std::string& via) {
  // Halves first: no overflow for any clock readings.
  const int64_t offset = (stats.start_ns / 2 + stats.end_ns / 2) - (sent_ns / 2 + received_ns / 2);
  const int64_t outside = std::max<int64_t>(0, (received_ns - sent_ns) - (stats.end_ns - stats.start_ns));
  const int64_t uncertainty = outside / 2 + 1;
  stats.start_ns -= offset;
  stats.end_ns -= offset;
  for (TraceEvent& e : stats.events) {
    e.start_ns -= offset;
    e.end_ns -= offset;
  }
  for (TaskTraceInfo& t : stats.tasks) {
    t.clock.method += " via " + via + " (round-trip midpoint)";
    t.clock.offset_ns += offset;
    t.clock.round_trip_ns += received_ns - sent_ns;
    t.clock.uncertainty_ns += uncertainty;
  }
  return stats;
}

}  // namespace actorflow
