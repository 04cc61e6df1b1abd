#include "data/event_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "data/crc32c.h"
#include "proto/tf/event.pb.h"
#include "proto/tf/step_stats.pb.h"

namespace actorflow {
namespace {

namespace pb = actorflow::tf;

// `bytes` little-endian bytes of v.
void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string serialized(const pb::Event& ev) {
  std::string out;
  ev.SerializeToString(&out);  // proto3, no required fields, no UTF-8-checked strings: fails only past 2 GiB
  return out;
}

// The statistics and non-empty buckets of `values` into h (NaNs left out).
void fill_histogram(const std::vector<double>& values, pb::HistogramProto* h);

double now_secs() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string event_record(const std::string& data) {
  std::string out;
  std::string len;
  put_le(len, data.size(), 8);
  out += len;
  put_le(out, crc32c_masked(crc32c(len.data(), len.size())), 4);
  out += data;
  put_le(out, crc32c_masked(crc32c(data.data(), data.size())), 4);
  return out;
}

std::string scalar_event(double wall_time, int64_t step, const std::map<std::string, double>& values) {
  pb::Event ev;
  ev.set_wall_time(wall_time);
  ev.set_step(step);
  pb::Summary* summary = ev.mutable_summary();
  for (const auto& [tag, v] : values) {
    pb::Summary::Value* value = summary->add_value();
    value->set_tag(tag);
    value->set_simple_value(static_cast<float>(v));
  }
  return serialized(ev);
}

const std::vector<double>& histogram_bucket_limits() {
  // TensorFlow's default buckets (core/lib/histogram): +-1e-12 * 1.1^k up to 1e20, 0, +-DBL_MAX.
  static const std::vector<double> limits = [] {
    std::vector<double> pos, neg;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) {
      pos.push_back(v);
      neg.push_back(-v);
    }
    pos.push_back(std::numeric_limits<double>::max());
    neg.push_back(-std::numeric_limits<double>::max());
    std::vector<double> all(neg.rbegin(), neg.rend());
    all.push_back(0.0);
    all.insert(all.end(), pos.begin(), pos.end());
    return all;
  }();
  return limits;
}

namespace {

void fill_histogram(const std::vector<double>& values, pb::HistogramProto* h) {
  const auto& limits = histogram_bucket_limits();
  std::vector<double> counts(limits.size(), 0.0);
  double lo = std::numeric_limits<double>::max(), hi = -std::numeric_limits<double>::max(), sum = 0, sum_sq = 0;
  double num = 0;
  for (double v : values) {
    if (std::isnan(v)) continue;  // TensorFlow's summary op rejects NaN; here it is left out
    // As TensorFlow's Histogram::Add: bucket i holds [limits[i-1], limits[i]).
    const size_t b = static_cast<size_t>(std::upper_bound(limits.begin(), limits.end(), v) - limits.begin());
    counts[std::min(b, limits.size() - 1)] += 1;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sum_sq += v * v;
    num += 1;
  }
  if (num == 0) lo = hi = 0;
  h->set_min(lo);
  h->set_max(hi);
  h->set_num(num);
  h->set_sum(sum);
  h->set_sum_squares(sum_sq);
  // Only non-empty buckets are written (with their upper limits), as TensorFlow's encoder skips
  // runs of empty ones; a reader needs nothing else.
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] > 0) {
      h->add_bucket_limit(limits[i]);
      h->add_bucket(counts[i]);
    }
}

}  // namespace

std::string histogram_proto(const std::vector<double>& values) {
  pb::HistogramProto h;
  fill_histogram(values, &h);
  std::string out;
  h.SerializeToString(&out);
  return out;
}

std::string histogram_event(double wall_time, int64_t step, const std::map<std::string, std::vector<double>>& values) {
  pb::Event ev;
  ev.set_wall_time(wall_time);
  ev.set_step(step);
  pb::Summary* summary = ev.mutable_summary();
  for (const auto& [tag, v] : values) {
    pb::Summary::Value* value = summary->add_value();
    value->set_tag(tag);
    fill_histogram(v, value->mutable_histo());
  }
  return serialized(ev);
}

std::string graph_event(double wall_time, const std::string& graph_def) {
  pb::Event ev;
  ev.set_wall_time(wall_time);
  ev.set_graph_def(graph_def);
  return serialized(ev);
}

std::string run_metadata_proto(const StepStats& stats, int64_t wall_minus_steady_ns) {
  pb::RunMetadata md;
  std::map<std::string, pb::DeviceStepStats*> devices;
  for (const TraceEvent& e : stats.events) {
    std::string device = e.track.rfind("/job:", 0) == 0 ? e.track : e.task + " " + e.track;
    pb::DeviceStepStats*& d = devices[device];
    if (!d) {
      d = md.mutable_step_stats()->add_dev_stats();
      d->set_device(device);
    }
    pb::NodeExecStats* n = d->add_node_stats();
    n->set_node_name(e.name);
    const int64_t start = e.start_ns + wall_minus_steady_ns;
    const int64_t took = std::max<int64_t>(0, e.end_ns - e.start_ns);
    n->set_all_start_micros(start / 1000);
    n->set_op_start_rel_micros(0);
    n->set_op_end_rel_micros(took / 1000);
    n->set_all_end_rel_micros(took / 1000);
    n->set_all_start_nanos(start);
    n->set_op_start_rel_nanos(0);
    n->set_op_end_rel_nanos(took);
    n->set_all_end_rel_nanos(took);
    n->set_timeline_label(e.kind + " " + e.op + " " + e.name);
  }
  std::string out;
  md.SerializeToString(&out);
  return out;
}

std::string run_metadata_event(double wall_time, int64_t step, const std::string& tag, const std::string& run_metadata) {
  pb::Event ev;
  ev.set_wall_time(wall_time);
  ev.set_step(step);
  ev.mutable_tagged_run_metadata()->set_tag(tag);
  ev.mutable_tagged_run_metadata()->set_run_metadata(run_metadata);
  return serialized(ev);
}

std::string file_version_event(double wall_time, const std::string& version) {
  pb::Event ev;
  ev.set_wall_time(wall_time);
  ev.set_file_version(version);
  return serialized(ev);
}

Result<std::unique_ptr<EventFileWriter>> EventFileWriter::open(const std::string& logdir, const std::string& suffix) {
  std::error_code ec;
  std::filesystem::create_directories(logdir, ec);
  if (ec) return Unavailable("cannot create directory " + logdir + ": " + ec.message());
  char host[256] = "localhost";
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  const double t = now_secs();
  const std::string path = logdir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(t)) + "." + host + suffix;
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (!f) return Unavailable("cannot create event file " + path + ": " + std::strerror(errno));
  std::unique_ptr<EventFileWriter> w(new EventFileWriter(f, path));
  AF_RETURN_IF_ERROR(w->write(file_version_event(t)));
  return w;
}

EventFileWriter::~EventFileWriter() {
  if (file_) std::fclose(file_);
}

Status EventFileWriter::add_scalars(int64_t step, const std::map<std::string, double>& values) {
  return write(scalar_event(now_secs(), step, values));
}

Status EventFileWriter::add_histograms(int64_t step, const std::map<std::string, std::vector<double>>& values) {
  return write(histogram_event(now_secs(), step, values));
}

Status EventFileWriter::add_graph(const std::string& graph_def) { return write(graph_event(now_secs(), graph_def)); }

Status EventFileWriter::add_run_metadata(int64_t step, const std::string& tag, const StepStats& stats) {
  const int64_t wall_minus_steady =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count() -
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return write(run_metadata_event(now_secs(), step, tag, run_metadata_proto(stats, wall_minus_steady)));
}

Status EventFileWriter::write(const std::string& data) {
  const std::string rec = event_record(data);
  std::lock_guard<std::mutex> l(mu_);
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size() || std::fflush(file_) != 0)
    return Unavailable("cannot write event file " + path_ + ": " + std::strerror(errno));
  return Status::OK();
}

}  // namespace actorflow
