#include "tests/util/scenario.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "data/checkpoint.h"
#include "data/tf/tf_checkpoint_data.h"
#include "tests/util/process.h"

namespace actorflow {
namespace testing {

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

double log_stamp(const std::string& line) {
  std::tm tm{};
  int us = 0;
  if (std::sscanf(line.c_str(), "%4d-%2d-%2d %2d:%2d:%2d.%6d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &us) != 7)
    return -1;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm)) + us / 1e6;
}

double log_stamp_now() {
  // The logger's format (core/logging.cc: local time, microseconds), read back by log_stamp.
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d.%06d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(us));
  return log_stamp(buf);
}

std::string check_monotonic(const std::string& out) {
  static const std::regex step_re("Worker : ([0-9]+), Step: ([0-9]+)");
  // A running chief's recovery ("parameter server restored from global step N") or a fresh
  // chief's start ("restored the model from global step N", after its process was restarted).
  static const std::regex restore_re("restored (?:the model )?from global step ([0-9]+)");
  std::map<int, int64_t> last;
  std::smatch m;
  for (const auto& l : lines_of(out)) {
    if (std::regex_search(l, m, restore_re)) {
      const int64_t r = std::stoll(m[1]);
      for (auto& [w, s] : last) s = std::min(s, r);
      continue;
    }
    if (!std::regex_search(l, m, step_re)) continue;
    const int w = std::stoi(m[1]);
    const int64_t s = std::stoll(m[2]);
    auto it = last.find(w);
    if (it != last.end() && s < it->second)
      return "worker " + std::to_string(w) + " saw global step " + std::to_string(s) + " after " +
             std::to_string(it->second) + " with no parameter-server restore in between";
    last[w] = s;
  }
  return "";
}

void measure(Outcome& o, double fault_t) {
  static const std::regex acc_re("Test-Accuracy: ([0-9.]+)"), loss_re("Test-Loss: ([0-9.]+)"),
      rolled_re("; ([0-9]+) global steps rolled back"), local_re("Local-Steps: ([0-9]+)"),
      global_re("Global-Step: ([0-9]+)");
  o.accuracy.clear();
  o.loss.clear();
  o.rolled_back = 0;
  o.acknowledged = o.failed_runs = 0;
  o.final_global_step = -1;
  o.detection_secs = o.recovery_secs = -1;
  std::smatch m;
  for (const auto& l : lines_of(o.out)) {
    if (std::regex_search(l, m, acc_re)) o.accuracy.push_back(std::stod(m[1]));
    if (std::regex_search(l, m, loss_re)) o.loss.push_back(std::stod(m[1]));
    if (std::regex_search(l, m, rolled_re)) o.rolled_back += std::stoll(m[1]);
    if (std::regex_search(l, m, local_re)) o.acknowledged += std::stoll(m[1]);
    if (std::regex_search(l, m, global_re)) o.final_global_step = std::max<int64_t>(o.final_global_step, std::stoll(m[1]));
    // One line per failed attempt of a managed run (the supervisor's own line says it again).
    if (contains(l, "monitored_session.cc") && contains(l, ": step failed (")) ++o.failed_runs;
    const double t = log_stamp(l);
    if (t < 0) continue;
    if (fault_t < 0 && contains(l, "fault injected:")) fault_t = t;
    if (fault_t < 0 || t < fault_t) continue;
    if (contains(l, "user_shutdown")) continue;  // a task that finished and closed its connections
    if (o.detection_secs < 0 && (contains(l, " is down: ") || contains(l, "step failed (")))
      o.detection_secs = t - fault_t;
    if (o.recovery_secs < 0 && o.detection_secs >= 0 &&
        (contains(l, "global steps rolled back") || contains(l, "model is available again") ||
         contains(l, "resuming without restoring") || contains(l, ": model is ready")))
      o.recovery_secs = t - fault_t;
  }
}

void expect_scenario_outcome(const Outcome& o, const TrainingBounds& bounds, const std::string& logdir,
                             const std::string& run_dir) {
  const std::string& name = o.name;
  EXPECT_EQ(o.up_exit, 0) << name << ": `actorflow up` did not finish cleanly\n" << o.out;
  EXPECT_EQ(o.accuracy.size(), bounds.workers) << name << ": every worker must finish\n" << o.out;
  for (double a : o.accuracy) EXPECT_GT(a, bounds.min_accuracy) << name;
  for (double l : o.loss) EXPECT_LT(l, bounds.max_loss) << name;
  EXPECT_EQ(check_monotonic(o.out), "") << name << "\n" << o.out;
  // Every checkpoint is readable, except one a fault damaged on purpose.
  std::string damaged;
  std::smatch m;
  static const std::regex damaged_re(": damaged (\\S+)");
  if (std::regex_search(o.out, m, damaged_re)) damaged = m[1];
  // A TensorFlow checkpoint is damaged through its index; it is listed by its prefix.
  if (damaged.size() > 6 && damaged.compare(damaged.size() - 6, 6, ".index") == 0) damaged.resize(damaged.size() - 6);
  CheckpointManager mgr(logdir, 0);
  const auto files = mgr.list();
  EXPECT_FALSE(files.empty()) << name << ": no checkpoint was written";
  for (const auto& f : files) {
    if (f == damaged) continue;
    auto r = read_any_checkpoint(f);  // actorflow's file or TensorFlow's checkpoint
    EXPECT_TRUE(r.ok()) << name << ": " << f << ": " << r.status();
  }
  // No process left behind: every task's command line names the run's directory.
  const auto left = processes_with({run_dir});
  EXPECT_TRUE(left.empty()) << name << ": " << left.size() << " process(es) left behind";
  for (int pid : left) kill(pid, SIGKILL);
}

void report(const Outcome& o, const char* tag) {
  char buf[512];
  const double acc = o.accuracy.empty() ? 0 : *std::min_element(o.accuracy.begin(), o.accuracy.end());
  const double loss = o.loss.empty() ? 0 : *std::max_element(o.loss.begin(), o.loss.end());
  std::snprintf(buf, sizeof buf,
                "{\"scenario\": \"%s\", \"detection_secs\": %.3f, \"recovery_secs\": %.3f, \"rolled_back\": %lld, "
                "\"accuracy\": %.4f, \"loss\": %.4f, \"wall_secs\": %.1f, \"acknowledged_steps\": %lld, "
                "\"final_global_step\": %lld, \"failed_runs\": %lld}",
                o.name.c_str(), o.detection_secs, o.recovery_secs, static_cast<long long>(o.rolled_back), acc, loss,
                o.wall_secs, static_cast<long long>(o.acknowledged), static_cast<long long>(o.final_global_step),
                static_cast<long long>(o.failed_runs));
  std::printf("%s %s\n", tag, buf);
  // AF_SCENARIO_OUTPUT=DIR keeps each job's whole output as DIR/<name>.log (for reading a run).
  if (const char* d = std::getenv("AF_SCENARIO_OUTPUT")) {
    std::string file = o.name;
    for (char& c : file)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    std::ofstream(std::string(d) + "/" + file + ".log") << o.out;
  }
  if (const char* f = std::getenv("AF_SCENARIO_REPORT")) std::ofstream(f, std::ios::app) << buf << "\n";
}

std::string trouble(const std::string& out) {
  std::string t;
  for (const auto& l : lines_of(out))
    if (contains(l, "step failed") || contains(l, " is down") || contains(l, "] W ") || contains(l, ": W ") ||
        contains(l, ": E ") || contains(l, "rror"))
      t += l + "\n";
  return t;
}

}  // namespace testing
}  // namespace actorflow
