// Step traces, the collecting side: the clocks of the tasks aligned, every task's events merged
// into one StepStats (TensorFlow's RunMetadata.step_stats), and that written as a Chrome trace
// (the JSON that chrome://tracing and ui.perfetto.dev open). The recording side is
// core/step_trace.h; docs/architecture/tracing.md tells the whole story.
//
// Everything here is pure (write_chrome_trace writes a file) and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/step_trace.h"

namespace actorflow {

// One exchange with a task, in nanoseconds: the collector's clock when it sent the request and
// when the answer came, and the task's clock when it answered. Plain value.
struct ClockSample {
  int64_t sent_ns = 0;
  int64_t remote_ns = 0;
  int64_t received_ns = 0;
};

// How a task's clock maps onto the collector's: collector time = task time - offset_ns. Plain value.
struct ClockAlignment {
  // "same process" (offset 0, exact) or "round-trip midpoint" (the task's reading is taken to
  // have happened halfway through the exchange with the shortest round trip).
  std::string method;
  int64_t offset_ns = 0;       // task clock - collector clock
  int64_t round_trip_ns = 0;   // of the exchange used (0 for the same process)
  int64_t uncertainty_ns = 0;  // |error| is at most this: half that round trip
};

// The alignment of a task from its exchanges (at least one unless `same_process`):
// offset = remote - (sent + received) / 2 of the sample with the shortest round trip (ties: the
// first). InvalidArgument for no samples, or a sample whose answer came before its request.
Result<ClockAlignment> align_clock(const std::vector<ClockSample>& samples, bool same_process);

// What the trace holds of one task. Plain value.
struct TaskTraceInfo {
  std::string task;
  ClockAlignment clock;
  int64_t events = 0;   // kept
  int64_t dropped = 0;  // past the bound on events
  std::string error;    // why its events are missing ("" = none missing)
};

// One traced step of the whole cluster, in the collector's clock (TensorFlow's StepStats).
// Plain value.
struct StepStats {
  int64_t step_id = 0;
  int64_t start_ns = 0;  // the collector's steady clock: the run was sent to the master
  int64_t end_ns = 0;    // its answer came
  std::vector<TaskTraceInfo> tasks;
  // Every event, sorted by start: the recorded ones (op, send, variable, sync_wait, ...) and
  // those the merge derives: one "transfer" per tensor that went from a _Send to a _Recv (nums
  // bytes, send_ns, wire_ns, queue_ns; texts sender, receiver) and the "step" itself.
  std::vector<TraceEvent> events;

  // Whether nothing was recorded (an untraced run).
  bool empty() const { return events.empty() && tasks.empty(); }
};

// One task's part of a trace before the merge. Plain value.
struct TaskTracePart {
  std::string task;
  ClockAlignment clock;
  std::vector<TraceEvent> events;  // in the task's clock
  int64_t dropped = 0;
  std::string error;
};

// Merges `parts` into the collector's clock (start - offset) and derives the transfers: a "send"
// event and the "deliver" event of the same rendezvous key (and the "arrive" event between, for
// the data plane) make one "transfer" event from the send's start to the delivery, on the
// receiver's task, with send_ns (the sender's time in the send: waiting for the connection and
// writing), wire_ns (from the send's start to the arrival in the receiving process, 0 in one
// process) and queue_ns (from the arrival to the executor taking it). The "step" event spans
// [start_ns, end_ns] on `client_task`.
StepStats merge_step_trace(int64_t step_id, int64_t start_ns, int64_t end_ns, const std::string& client_task,
                           std::vector<TaskTracePart> parts);

// The Chrome trace JSON of `stats`: {"traceEvents": [...], "displayTimeUnit": "ns",
// "otherData": {...}}. One process (pid) per task, one thread (tid) per track; "X" events with
// ts/dur in microseconds from the step's start; transfers also as flow arrows ("s"/"f") from the
// send to the transfer; "otherData" holds the step id, each task's clock alignment (method,
// offset, round trip, uncertainty) and dropped events.
std::string chrome_trace_json(const StepStats& stats);
// Writes chrome_trace_json(stats) to `path` (replacing it). Errors name the path.
Status write_chrome_trace(const StepStats& stats, const std::string& path);

// A whole StepStats as bytes, for a task that traced a remote client's step (the reply carries
// them): encode_trace_events' format, the header and each TaskTraceInfo as leading events of
// kinds "step_stats" and "task_info". Pure.
std::string encode_step_stats(const StepStats& stats);
// The inverse; decode_trace_events' errors (DataLoss naming the offset; ResourceExhausted past
// `max_events` events in all), and DataLoss when the leading events are missing or malformed.
// Pure.
Result<StepStats> decode_step_stats(const std::string& bytes, size_t max_events);
// `stats` as a remote task recorded it, moved onto the client's clock: the client sent the run at
// `sent_ns` and had the answer at `received_ns`; the task's run spanned [stats.start_ns,
// stats.end_ns] of its clock. Offset = the run's midpoint minus the exchange's, uncertainty half
// the time outside the run; every event, the step and each task's alignment (offset added,
// uncertainty added, method "<method> via <via> (round-trip midpoint)") move by it. Pure.
StepStats align_remote_step_stats(StepStats stats, int64_t sent_ns, int64_t received_ns, const std::string& via);

}  // namespace actorflow
