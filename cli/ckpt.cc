// `actorflow ckpt list DIR`, `actorflow ckpt show CKPT` and `actorflow ckpt convert SRC DST`:
// inspect and convert checkpoints, actorflow's files (data/checkpoint.h) and TensorFlow's V2
// checkpoints (data/tf/tf_checkpoint_data.h), without a cluster.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "actors/variable_checkpoint.h"
#include "data/checkpoint.h"
#include "data/tf/tf_checkpoint.h"
#include "data/tf/tf_checkpoint_data.h"

namespace actorflow {
namespace cli {
namespace {

using nlohmann::json;

constexpr int kMaxListedValues = 6;

std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// `name` for a terminal: a byte below 0x20, 0x7f or above (terminal escape codes, a forged
// line break, bytes that are no UTF-8 the terminal would show) and the backslash become \xNN,
// so a checkpoint's names cannot move the cursor, recolour or add lines to what `show` prints.
std::string printable_name(const std::string& name) {
  std::string out;
  for (unsigned char c : name) {
    if (c < 0x20 || c >= 0x7f || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// Prints rows as columns separated by two spaces (the last column is not padded).
void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

// What `show` says about one variable's values: every value for small tensors, otherwise
// min/max/mean (numbers) or the count of true (bool).
struct ValueSummary {
  std::vector<double> values;  // all values when the tensor has at most kMaxListedValues
  bool summarised = false;     // else: min/max/mean over every element
  double min = 0, max = 0, mean = 0;
  int64_t nans = 0;
};

ValueSummary summarise(const Tensor& t) {
  ValueSummary s;
  const int64_t n = t.num_elements();
  std::vector<double> all(static_cast<size_t>(n));
  dispatch_dtype(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = static_cast<double>(p[i]);
  });
  if (n <= kMaxListedValues) {
    s.values = std::move(all);
    return s;
  }
  s.summarised = true;
  bool first = true;
  double sum = 0;
  int64_t counted = 0;
  for (double v : all) {
    if (std::isnan(v)) {
      ++s.nans;
      continue;
    }
    if (first || v < s.min) s.min = v;
    if (first || v > s.max) s.max = v;
    first = false;
    sum += v;
    ++counted;
  }
  s.mean = counted ? sum / static_cast<double>(counted) : NAN;
  return s;
}

std::string summary_text(const ValueSummary& s) {
  if (!s.summarised) {
    std::string out = "[";
    for (size_t i = 0; i < s.values.size(); ++i) out += (i ? ", " : "") + fmt_double(s.values[i]);
    return out + "]";
  }
  std::string out = "min " + fmt_double(s.min) + " max " + fmt_double(s.max) + " mean " + fmt_double(s.mean);
  if (s.nans) out += " (" + std::to_string(s.nans) + " NaN)";
  return out;
}

// The CRC-32C stored in a file read_checkpoint() accepted (its last four bytes), as 8 hex digits.
std::string stored_crc(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  unsigned char b[4] = {0, 0, 0, 0};
  f.seekg(-4, std::ios::end);
  f.read(reinterpret_cast<char*>(b), 4);
  if (!f) return "?";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%02x%02x%02x%02x", b[0], b[1], b[2], b[3]);
  return buf;
}

int64_t file_bytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}


// The bytes of a checkpoint: actorflow's file, or a TensorFlow checkpoint's index and data files.
int64_t checkpoint_bytes(const std::string& path, bool tf) {
  if (!tf) return file_bytes(path);
  int64_t total = std::max<int64_t>(0, file_bytes(path + ".index"));
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string head = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".data-";
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.compare(0, head.size(), head) == 0 && name.find(".tmp.") == std::string::npos)
        total += std::max<int64_t>(0, file_bytes((slash == std::string::npos ? "" : dir) + name));
    }
    ::closedir(d);
  }
  return total;
}

// Exit code for a checkpoint that cannot be read: 2 when the argument names no checkpoint file
// at all (missing, a directory, a FIFO), 1 when the file is damaged or not a checkpoint.
int exit_code_for(const Status& st) {
  return st.code() == Code::kNotFound || st.code() == Code::kInvalidArgument ? 2 : 1;
}

// The variables of a checkpoint, not counting their optimizer-slot entries.
size_t count_variables(const CheckpointData& d) {
  size_t n = 0;
  for (const auto& kv : d.variables) n += is_slots_key(kv.first) ? 0 : 1;
  return n;
}

// The number of data files of TensorFlow checkpoint `prefix` (its index read again), 0 when it
// does not open.
int tf_num_shards(const std::string& prefix) {
  auto r = TfCheckpointReader::open(prefix);
  return r.ok() ? r->num_shards() : 0;
}

// A slice in TensorFlow's notation: "start,length" per dimension joined by ':', "-" for a whole
// dimension ("0,3:-").
std::string slice_text(const std::vector<TfExtent>& slice) {
  std::string out;
  for (size_t d = 0; d < slice.size(); ++d) {
    if (d) out += ':';
    out += slice[d].length == -1 ? "-" : std::to_string(slice[d].start) + "," + std::to_string(slice[d].length);
  }
  return out;
}

}  // namespace

int run_ckpt_list(const CkptOptions& o) {
  struct stat st {};
  if (::stat(o.path.c_str(), &st) != 0) {
    std::cerr << "actorflow ckpt list: directory " << o.path << " does not exist\n";
    return 2;
  }
  if (!S_ISDIR(st.st_mode)) {
    std::cerr << "actorflow ckpt list: " << o.path << " is not a directory (use `actorflow ckpt show " << o.path
              << "` for one file)\n";
    return 2;
  }
  std::vector<std::pair<int64_t, std::string>> files;
  if (DIR* d = ::opendir(o.path.c_str())) {
    while (dirent* e = ::readdir(d))
      if (auto step = checkpoint_step_from_path(e->d_name, o.prefix)) {
        std::string name = e->d_name;
        if (ends_with(name, ".index")) name.resize(name.size() - 6);  // a TensorFlow checkpoint's prefix
        files.emplace_back(*step, (o.path.back() == '/' ? o.path : o.path + "/") + name);
      }
    ::closedir(d);
  } else {
    std::cerr << "actorflow ckpt list: cannot read directory " << o.path << "\n";
    return 2;
  }
  if (files.empty()) {
    std::cerr << "actorflow ckpt list: no checkpoint " << o.prefix << "-<step> in " << o.path << "\n";
    return 1;
  }
  std::sort(files.rbegin(), files.rend());  // newest (highest step) first
  files.erase(std::unique(files.begin(), files.end()), files.end());
  std::vector<std::vector<std::string>> rows{{"STEP", "FORMAT", "VARIABLES", "BYTES", "SHARDS", "CHECKSUM", "PATH"}};
  json out = {{"dir", o.path}, {"checkpoints", json::array()}};
  int bad = 0;
  std::string problems;
  for (const auto& [step, path] : files) {
    const bool tf = is_tf_checkpoint(path);
    auto data = read_any_checkpoint(path);
    const int64_t bytes = checkpoint_bytes(path, tf);
    const std::string format = tf ? "tensorflow" : "actorflow";
    json j = {{"path", path}, {"format", format}, {"bytes", bytes}};
    if (data.ok()) {
      const int shards = tf ? tf_num_shards(path) : 0;
      j["global_step"] = data->global_step;
      j["variables"] = count_variables(*data);
      j["checksum"] = "ok";
      if (tf) j["shards"] = shards;
      rows.push_back({std::to_string(data->global_step), format, std::to_string(count_variables(*data)),
                      std::to_string(bytes), tf ? std::to_string(shards) : "-", "ok", path});
    } else {
      ++bad;
      j["global_step"] = step;  // from the file name
      j["checksum"] = "BAD";
      j["error"] = data.status().message();
      rows.push_back({std::to_string(step), format, "-", std::to_string(bytes), "-", "BAD", path});
      problems += "  " + data.status().message() + "\n";
    }
    out["checkpoints"].push_back(j);
  }
  if (o.json) std::cout << out.dump(2) << "\n";
  else print_table(rows);
  std::cout.flush();
  if (bad) {
    std::cerr << "actorflow ckpt list: " << bad << " of " << files.size() << " checkpoints in " << o.path
              << " are unreadable:\n"
              << problems;
    return 1;
  }
  return 0;
}

int run_ckpt_show(const CkptOptions& in) {
  CkptOptions o = in;
  o.path = checkpoint_name_of(in.path);
  const bool tf = is_tf_checkpoint(o.path);
  auto data = read_any_checkpoint(o.path);
  if (data.ok() && tf) {
    // TensorFlow's entries as they are: the slot blobs folded from them are not shown twice.
    for (auto it = data->variables.begin(); it != data->variables.end();)
      it = is_slots_key(it->first) ? data->variables.erase(it) : std::next(it);
  }
  if (!data.ok()) {
    if (o.json) {
      json j = {{"path", o.path}, {"checksum", "BAD"}, {"error", data.status().message()}};
      if (exit_code_for(data.status()) == 2) j["checksum"] = nullptr;
      std::cout << j.dump(2) << std::endl;
    }
    std::cerr << "actorflow ckpt show: " << data.status().message() << "\n";
    return exit_code_for(data.status());
  }
  // TensorFlow's layout: the data files and each partitioned tensor's slices.
  int shards = 0;
  std::map<std::string, std::vector<std::vector<TfExtent>>> slices;
  if (tf) {
    if (auto r = TfCheckpointReader::open(o.path); r.ok()) {
      shards = r->num_shards();
      for (const TfEntryInfo& e : r->entries())
        if (!e.slices.empty()) slices[e.name] = e.slices;
    }
  }
  const std::string crc = tf ? "" : stored_crc(o.path);
  const int64_t bytes = checkpoint_bytes(o.path, tf);
  size_t value_bytes = 0;
  for (const auto& [name, t] : data->variables) value_bytes += t.bytes();
  json vars = json::array();
  std::vector<std::vector<std::string>> rows{{"NAME", "DTYPE", "SHAPE", "ELEMENTS", "VALUES"}};
  if (tf) rows[0].insert(rows[0].begin() + 4, "SLICES");
  for (const auto& [name, t] : data->variables) {
    if (is_slots_key(name)) {
      // A variable's optimizer slots (actors/variable_checkpoint.h): bytes, not values.
      const std::string of = name.substr(0, name.size() - std::char_traits<char>::length(kSlotsSuffix));
      rows.push_back({printable_name(name), dtype_name(t.dtype()), t.shape().to_string(),
                      std::to_string(t.num_elements()), "optimizer slots of '" + printable_name(of) + "'"});
      if (tf) rows.back().insert(rows.back().begin() + 4, "-");
      vars.push_back({{"name", name}, {"slots_of", of}, {"dtype", dtype_name(t.dtype())}, {"bytes", t.bytes()}});
      continue;
    }
    const ValueSummary s = summarise(t);
    rows.push_back({printable_name(name), dtype_name(t.dtype()), t.shape().to_string(),
                    std::to_string(t.num_elements()), summary_text(s)});
    json v = {{"name", name}, {"dtype", dtype_name(t.dtype())}, {"shape", t.shape().dims()},
              {"elements", t.num_elements()}, {"bytes", t.bytes()}};
    if (tf) {
      // "3: 0,3:0,3 3,2:0,3 5,2:0,3" (at most 8 shown), "-" for a tensor stored whole.
      std::string text = "-";
      if (auto sl = slices.find(name); sl != slices.end()) {
        text = std::to_string(sl->second.size()) + ":";
        json list = json::array();
        for (size_t i = 0; i < sl->second.size(); ++i) {
          if (i < 8) text += " " + slice_text(sl->second[i]);
          json ext = json::array();
          for (const TfExtent& x : sl->second[i]) ext.push_back({x.start, x.length});
          list.push_back(ext);
        }
        if (sl->second.size() > 8) text += " ...";
        v["slices"] = list;
      }
      rows.back().insert(rows.back().begin() + 4, text);
    }
    if (s.summarised) {
      v["min"] = s.min;
      v["max"] = s.max;
      v["mean"] = s.mean;
      if (s.nans) v["nans"] = s.nans;
    } else {
      v["values"] = s.values;
    }
    vars.push_back(v);
  }
  if (o.json) {
    json j = {{"path", o.path},   {"format", tf ? "tensorflow" : "actorflow"}, {"global_step", data->global_step},
              {"checksum", "ok"}, {"bytes", bytes}, {"variables", vars}};
    if (!tf) j["crc32c"] = crc;
    if (tf) j["shards"] = shards;
    // JSON escapes control characters itself; bytes that are no UTF-8 become U+FFFD.
    std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << std::endl;
    return 0;
  }
  std::cout << "checkpoint   " << printable_name(o.path) << "\n"
            << "format       " << (tf ? "tensorflow (V2 checkpoint)" : "actorflow") << "\n"
            << "global_step  " << data->global_step << "\n"
            << "checksum     ok (" << (tf ? std::string("every block and tensor CRC-32C checked") : "crc32c " + crc)
            << ")\n"
            << "variables    " << count_variables(*data) << " (" << value_bytes << " bytes of values, " << bytes
            << " bytes in " << (tf ? "the files" : "the file") << ")\n";
  if (tf) std::cout << "shards       " << shards << " data file" << (shards == 1 ? "" : "s") << "\n";
  if (!data->variables.empty()) print_table(rows);
  std::cout.flush();
  return 0;
}

int run_ckpt_convert(const CkptOptions& o) {
  const std::string src = checkpoint_name_of(o.path);
  const bool src_tf = is_tf_checkpoint(src);
  bool to_tf = !src_tf;
  if (o.to == "tensorflow") {
    to_tf = true;
  } else if (o.to == "actorflow") {
    to_tf = false;
  } else if (!o.to.empty()) {
    std::cerr << "actorflow ckpt convert: --to must be tensorflow or actorflow, got '" << printable_name(o.to)
              << "'\n";
    return 2;
  }
  std::string dst = o.out;
  if (to_tf && ends_with(dst, ".index")) dst.resize(dst.size() - 6);
  if (dst.empty()) {
    std::cerr << "actorflow ckpt convert: the destination is empty\n";
    return 2;
  }
  if (file_bytes(dst) >= 0 || file_bytes(dst + ".index") >= 0) {
    std::cerr << "actorflow ckpt convert: " << printable_name(dst) << (file_bytes(dst) >= 0 ? "" : ".index")
              << " exists; not replacing it\n";
    return 2;
  }
  auto data = read_any_checkpoint(src);
  if (!data.ok()) {
    std::cerr << "actorflow ckpt convert: " << data.status().message() << "\n";
    return exit_code_for(data.status());
  }
  // From TensorFlow's format, the slot blobs folded from its slot entries are kept beside the
  // entries themselves (a graph imported from TensorFlow has them as variables).
  Status st = to_tf ? write_checkpoint_data_as_tf(dst, *data) : write_checkpoint(dst, *data);
  if (!st.ok()) {
    std::cerr << "actorflow ckpt convert: writing " << printable_name(dst) << ": " << st.message() << "\n";
    return 1;
  }
  std::cout << "wrote " << printable_name(dst) << " (" << (to_tf ? "tensorflow" : "actorflow") << ", global_step "
            << data->global_step << ", " << count_variables(*data) << " entries) from " << printable_name(src)
            << " (" << (src_tf ? "tensorflow" : "actorflow") << ")\n";
  return 0;
}

}  // namespace cli
}  // namespace actorflow
