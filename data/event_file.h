// TensorBoard event files: what `tensorboard --logdir` reads.
//
// A file events.out.tfevents.<seconds>.<host> in a log directory holds TFRecord records
//
//   +-----------------+---------------------------+--------------+---------------------------+
//   | length (u64 LE) | masked CRC-32C of length  | data[length] | masked CRC-32C of data    |
//   |    8 bytes      |   4 bytes (u32 LE)        |              |   4 bytes (u32 LE)        |
//   +-----------------+---------------------------+--------------+---------------------------+
//
// each holding one serialized tensorflow.Event proto: first {wall_time, file_version =
// "brain.Event:2"}, then {wall_time, step, summary {value {tag, simple_value}}...} for scalars,
// {wall_time, step, summary {value {tag, histo}}...} for histograms (HistogramProto over
// TensorFlow's default exponential buckets) and {wall_time, graph_def} for the graph. The protos
// are the generated classes of proto/tf/event.proto and summary.proto (TensorFlow's field numbers,
// package actorflow.tf; library af_tf_proto); the framing and CRCs are written here.
//
// Thread-safety: an EventFileWriter may be used from several threads (one lock per writer).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/step_stats.h"

namespace actorflow {

// The record framing above around `data`. Pure.
std::string event_record(const std::string& data);

// A serialized Event {wall_time, step, summary: one simple_value per (tag, value)}. Pure.
std::string scalar_event(double wall_time, int64_t step, const std::map<std::string, double>& values);

// TensorFlow's default histogram bucket upper limits: -DBL_MAX, -1e20..-1e-12 (factor 1.1), 0,
// 1e-12..1e20, DBL_MAX (ascending). Bucket i holds the values in [limit[i-1], limit[i]). Pure.
const std::vector<double>& histogram_bucket_limits();

// A serialized HistogramProto of `values` (NaNs left out): min, max, num, sum, sum_squares and
// the non-empty buckets with their upper limits. Pure.
std::string histogram_proto(const std::vector<double>& values);

// A serialized Event {wall_time, step, summary: one histo per (tag, values)}. Pure.
std::string histogram_event(double wall_time, int64_t step, const std::map<std::string, std::vector<double>>& values);

// A serialized Event {wall_time, graph_def: `graph_def`, a serialized tensorflow.GraphDef (see
// graph/tf/tf_export.h: tf_graph_def_proto, export_graph_def)}. Pure.
std::string graph_event(double wall_time, const std::string& graph_def);

// A serialized tensorflow.RunMetadata holding `stats` as TensorFlow's StepStats: one
// DeviceStepStats per track of a task (device "<task> <track>", or the track alone when it is a
// full device name), one NodeExecStats per event (node_name, the start in wall-clock micros and
// nanos, the duration as op and all end relative to it, timeline_label "<kind> <op> <name>").
// `wall_minus_steady_ns` turns the trace's steady clock into wall-clock time. Pure.
std::string run_metadata_proto(const StepStats& stats, int64_t wall_minus_steady_ns);

// A serialized Event {wall_time, step, tagged_run_metadata {tag, run_metadata}}. Pure.
std::string run_metadata_event(double wall_time, int64_t step, const std::string& tag, const std::string& run_metadata);

// A serialized Event {wall_time, file_version}. Pure.
std::string file_version_event(double wall_time, const std::string& version = "brain.Event:2");

class EventFileWriter {
 public:
  // Creates `logdir` if needed and a new events file in it (named as TensorFlow names them, with
  // `suffix` appended when not empty), and writes the file-version record. Errors: the directory
  // or file cannot be created or written (the message names the path).
  static Result<std::unique_ptr<EventFileWriter>> open(const std::string& logdir, const std::string& suffix = "");
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Appends one event of scalars for global step `step`, stamped now, and flushes it to the file.
  Status add_scalars(int64_t step, const std::map<std::string, double>& values);
  // Appends one event of histograms (tag -> the values summarised) for global step `step`.
  Status add_histograms(int64_t step, const std::map<std::string, std::vector<double>>& values);
  // Appends the graph (a serialized tensorflow.GraphDef) as TensorBoard's Graphs tab reads it.
  Status add_graph(const std::string& graph_def);
  // Appends a traced step's run metadata (run_metadata_proto of `stats`) under `tag` for global
  // step `step`, as TensorFlow's FileWriter.add_run_metadata: TensorBoard's Graphs tab shows it.
  Status add_run_metadata(int64_t step, const std::string& tag, const StepStats& stats);
  // The file's path.
  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::FILE* f, std::string path) : file_(f), path_(std::move(path)) {}
  Status write(const std::string& data);

  std::mutex mu_;
  std::FILE* file_;
  std::string path_;
};

}  // namespace actorflow
