// What `actorflow status --waits` and the dashboard show of the tasks' waits (GET /waits of each
// task's metrics endpoint, core/waits.h): parsed per task, and where the chains of waits end.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/waits.h"

namespace actorflow {
namespace cli {

// One task's waits, or why they could not be read. Plain value.
struct TaskWaits {
  std::string task;   // "/job:ps/replica:0/task:0"
  std::string error;  // "" when its waits were read
  std::vector<WaitInfo> waits;
};

// Parses each task's GET /waits answer (a failed fetch becomes `error`), keeping the waits at
// least `min_age_secs` old. An answer that is not the expected JSON becomes an error naming what
// is wrong. Pure.
std::vector<TaskWaits> parse_task_waits(const std::vector<std::pair<std::string, Result<std::string>>>& answers,
                                        double min_age_secs);

// Where the waits end: the tasks that some other task waits on and that either wait on no other
// task themselves or whose waits could not be read (a stopped, partitioned or dead task); when
// every waited-on task waits on another (a cycle), those tasks. Sorted, each once. Pure.
std::vector<std::string> waits_end_at(const std::vector<TaskWaits>& tasks);

// The text of `status --waits`: per task its waits (KIND, ON, AGE, WHAT) or its error, then the
// "waits end at:" line (or "no task waits on another"). Pure.
std::string render_waits_text(const std::vector<TaskWaits>& tasks);
// The same as one JSON document: {"tasks": [{"task", "error", "waits": [...]}], "waits_end_at": [...]}. Pure.
std::string render_waits_json(const std::vector<TaskWaits>& tasks);

}  // namespace cli
}  // namespace actorflow
