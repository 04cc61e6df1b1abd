#include "data/event_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/proto_writer.h"
#include "data/crc32c.h"

namespace actorflow {
namespace {

using proto::put_bytes;
using proto::put_double;
using proto::put_float;
using proto::put_key;
using proto::put_le;
using proto::put_packed_doubles;
using proto::put_uint;
using proto::put_varint;

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

// Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary = 5.
// Summary: value = 1 (repeated Value). Value: tag = 1 (string), simple_value = 2 (float).
std::string scalar_event(double wall_time, int64_t step, const std::map<std::string, double>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    put_bytes(value, 1, tag);
    put_float(value, 2, static_cast<float>(v));
    put_bytes(summary, 1, value);
  }
  std::string ev;
  put_double(ev, 1, wall_time);
  put_uint(ev, 2, static_cast<uint64_t>(step));
  put_bytes(ev, 5, summary);
  return ev;
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

// HistogramProto: min = 1, max = 2, num = 3, sum = 4, sum_squares = 5 (doubles), bucket_limit = 6,
// bucket = 7 (packed doubles). Value.histo = 5.
std::string histogram_proto(const std::vector<double>& values) {
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
  // Only non-empty buckets are written (with their upper limits), as TensorFlow's encoder skips
  // runs of empty ones; a reader needs nothing else.
  std::vector<double> lim, cnt;
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] > 0) {
      lim.push_back(limits[i]);
      cnt.push_back(counts[i]);
    }
  std::string h;
  put_double(h, 1, lo);
  put_double(h, 2, hi);
  put_double(h, 3, num);
  put_double(h, 4, sum);
  put_double(h, 5, sum_sq);
  put_packed_doubles(h, 6, lim);
  put_packed_doubles(h, 7, cnt);
  return h;
}

std::string histogram_event(double wall_time, int64_t step, const std::map<std::string, std::vector<double>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    put_bytes(value, 1, tag);
    put_bytes(value, 5, histogram_proto(v));
    put_bytes(summary, 1, value);
  }
  std::string ev;
  put_double(ev, 1, wall_time);
  put_uint(ev, 2, static_cast<uint64_t>(step));
  put_bytes(ev, 5, summary);
  return ev;
}

// Event.graph_def = 4 (bytes: a serialized GraphDef).
std::string graph_event(double wall_time, const std::string& graph_def) {
  std::string ev;
  put_double(ev, 1, wall_time);
  put_bytes(ev, 4, graph_def);
  return ev;
}

std::string file_version_event(double wall_time, const std::string& version) {
  std::string ev;
  put_double(ev, 1, wall_time);
  put_bytes(ev, 3, version);
  return ev;
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

Status EventFileWriter::write(const std::string& data) {
  const std::string rec = event_record(data);
  std::lock_guard<std::mutex> l(mu_);
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size() || std::fflush(file_) != 0)
    return Unavailable("cannot write event file " + path_ + ": " + std::strerror(errno));
  return Status::OK();
}

}  // namespace actorflow
