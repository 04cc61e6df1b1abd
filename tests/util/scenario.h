// What the fault scenario suites check about a finished training job (tests/scenario_test.cc on
// loopback, tests/multihost/ across network namespaces): the job finished, trained well, kept
// global_step monotonic except logged parameter-server restores, left every checkpoint readable
// and no process behind; and the detection/recovery figures measured from the log lines' own
// timestamps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace actorflow {
namespace testing {

// The lines of `s`, without their '\n'.
std::vector<std::string> lines_of(const std::string& s);
// Seconds since the epoch of a log line "2026-11-22 11:50:17.365757: ..." read as UTC (-1: the
// line has no timestamp). Log lines are written in local time, so only differences between
// stamps (and log_stamp_now()) are meaningful.
double log_stamp(const std::string& line);
// Now, on log_stamp's scale (what log_stamp would read from a line logged at this moment).
double log_stamp_now();
inline bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

struct Outcome {
  std::string name;
  std::string out;              // everything the job's processes printed, in arrival order
  int up_exit = -1;             // exit status of `actorflow up` (of every host's: the first non-zero)
  std::vector<double> accuracy, loss;
  double detection_secs = -1;   // fault injected -> first failure noticed ("is down", "step failed")
  double recovery_secs = -1;    // fault injected -> training resumed (restored / ready / resuming)
  int64_t rolled_back = 0;      // global steps a parameter-server restore rolled back
  int64_t acknowledged = 0;     // the workers' training runs that answered OK ("Local-Steps: N", summed)
  int64_t final_global_step = -1;  // the largest "Global-Step: G" a worker read after its training
  int64_t failed_runs = 0;      // training runs that failed and were retried (the managed session's lines)
  double wall_secs = 0;
  std::vector<std::string> logdir_files;  // the names in the job's logdir when it ended, sorted
};

// The first violation of "global_step never goes backwards except by a logged ps restore", or "".
std::string check_monotonic(const std::string& out);

// Fills o.accuracy, o.loss, o.rolled_back, o.acknowledged, o.final_global_step, o.failed_runs,
// o.detection_secs and o.recovery_secs from o.out.
// Times count from `fault_t` (log_stamp's scale) or, when it is < 0, from the first "fault
// injected:" line.
void measure(Outcome& o, double fault_t = -1);

struct TrainingBounds {
  size_t workers = 2;           // every one must print its test accuracy
  double min_accuracy = 0.75;
  double max_loss = 0.75;
};

// Everything a scenario run must satisfy (gtest EXPECTs, messages naming o.name): `up` exited 0,
// every worker finished within the accuracy and loss bounds, global_step monotonic
// (check_monotonic), at least one checkpoint in `logdir` and each readable except one the output
// says a fault damaged (": damaged PATH"), no process left whose command line contains
// `run_dir` (those found are SIGKILLed).
void expect_scenario_outcome(const Outcome& o, const TrainingBounds& bounds, const std::string& logdir,
                             const std::string& run_dir);

// Prints "<tag> {json}" with o's figures and, with AF_SCENARIO_REPORT=FILE set, appends the JSON
// line to FILE; with AF_SCENARIO_OUTPUT=DIR set, writes the job's whole output to DIR/<name>.log
// (the name with every non-alphanumeric character as '_').
void report(const Outcome& o, const char* tag = "SCENARIO");

// The lines of `out` that say something went wrong (warnings, errors, failed steps, tasks down):
// what a failure message shows first, since a whole job's output is long.
std::string trouble(const std::string& out);

}  // namespace testing
}  // namespace actorflow
