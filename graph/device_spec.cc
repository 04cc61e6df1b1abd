#include "graph/device_spec.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace actorflow {
namespace {

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool is_number(const std::string& s) {
  return !s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool valid_job_name(const std::string& s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

bool valid_type(const std::string& s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }) &&
         std::isalpha(static_cast<unsigned char>(s[0]));
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) { out.push_back(cur); cur.clear(); }
    else cur += c;
  }
  out.push_back(cur);
  return out;
}

}  // namespace

Result<DeviceSpec> DeviceSpec::parse(const std::string& s) {
  DeviceSpec spec;
  if (s.empty()) return spec;
  auto bad = [&](const std::string& why) {
    return InvalidArgument("malformed device '" + s + "': " + why);
  };
  std::string body = s[0] == '/' ? s.substr(1) : s;
  if (body.empty()) return spec;
  auto parts = split(body, '/');
  auto set_int = [&](std::optional<int>& field, const std::string& what, const std::string& v) -> Status {
    if (v == "*") {
      if (field) return bad(what + " given twice");
      return Status::OK();
    }
    if (!is_number(v)) {
      const bool digits = !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
      return bad(what + " index '" + v + (digits ? "' is out of range" : "' is not a number"));
    }
    int val = std::stoi(v);
    if (field && *field != val) return bad(what + " given twice with different values");
    field = val;
    return Status::OK();
  };
  auto set_device = [&](const std::string& type, const std::string& idx, bool has_idx) -> Status {
    if (type == "*") {  // "/device:*:1": any type (what to_string() prints for an index alone)
      return has_idx ? set_int(spec.index, "device", idx) : Status::OK();
    }
    if (!valid_type(type)) return bad("device type '" + type + "' is not a name");
    std::string t = upper(type);
    if (spec.type && *spec.type != t) return bad("device type given twice ('" + *spec.type + "' and '" + t + "')");
    spec.type = t;
    if (has_idx) return set_int(spec.index, "device", idx);
    return Status::OK();
  };
  for (const auto& p : parts) {
    if (p.empty()) return bad("empty component (double or trailing '/')");
    auto f = split(p, ':');
    const std::string key = f[0];
    const std::string lkey = upper(key);
    if (key == "job") {
      if (f.size() != 2) return bad("component '" + p + "' should be job:NAME");
      if (f[1] == "*") {
        if (spec.job) return bad("job given twice");
        continue;
      }
      if (!valid_job_name(f[1])) return bad("job name '" + f[1] + "' must start with a letter and use [A-Za-z0-9_-]");
      if (spec.job && *spec.job != f[1]) return bad("job given twice ('" + *spec.job + "' and '" + f[1] + "')");
      spec.job = f[1];
    } else if (key == "replica") {
      if (f.size() != 2) return bad("component '" + p + "' should be replica:N");
      AF_RETURN_IF_ERROR(set_int(spec.replica, "replica", f[1]));
    } else if (key == "task") {
      if (f.size() != 2) return bad("component '" + p + "' should be task:N");
      AF_RETURN_IF_ERROR(set_int(spec.task, "task", f[1]));
    } else if (key == "device") {
      // device:TYPE:N, device:TYPE:*, device:TYPE
      if (f.size() == 2) AF_RETURN_IF_ERROR(set_device(f[1], "", false));
      else if (f.size() == 3) AF_RETURN_IF_ERROR(set_device(f[1], f[2], true));
      else return bad("component '" + p + "' should be device:TYPE:N");
    } else if (lkey == "CPU" || lkey == "GPU" || (f.size() == 2 && valid_type(key) && key != "device")) {
      // legacy /cpu:0, /gpu:1, /GPU:*, /xla_cpu:0
      if (f.size() != 2) return bad("component '" + p + "' should be " + key + ":N");
      if (lkey != "CPU" && lkey != "GPU") return bad("unknown component '" + p + "' (expected job:, replica:, task:, device:, cpu: or gpu:)");
      AF_RETURN_IF_ERROR(set_device(key, f[1], true));
    } else {
      return bad("unknown component '" + p + "' (expected job:, replica:, task:, device:, cpu: or gpu:)");
    }
  }
  return spec;
}

DeviceSpec DeviceSpec::full(const std::string& job, int replica, int task, const std::string& type, int index) {
  DeviceSpec d;
  d.job = job;
  d.replica = replica;
  d.task = task;
  d.type = upper(type);
  d.index = index;
  return d;
}

std::string DeviceSpec::to_string() const {
  std::string s;
  if (job) s += "/job:" + *job;
  if (replica) s += "/replica:" + std::to_string(*replica);
  if (task) s += "/task:" + std::to_string(*task);
  if (type) s += "/device:" + *type + ":" + (index ? std::to_string(*index) : std::string("*"));
  else if (index) s += "/device:*:" + std::to_string(*index);
  return s;
}

std::string DeviceSpec::legacy_device_name() const {
  std::string t = type ? *type : std::string("*");
  for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return "/" + t + ":" + (index ? std::to_string(*index) : std::string("*"));
}

void DeviceSpec::merge_from(const DeviceSpec& o) {
  if (o.job) job = o.job;
  if (o.replica) replica = o.replica;
  if (o.task) task = o.task;
  if (o.type) {
    if (type && *type != *o.type) index.reset();  // GPU:1 merged with /device:CPU is CPU:*, not CPU:1
    type = o.type;
  }
  if (o.index) index = o.index;
}

void DeviceSpec::fill_from(const DeviceSpec& d) {
  if (!job) job = d.job;
  if (!replica) replica = d.replica;
  if (!task) task = d.task;
  if (!type) {
    type = d.type;
    if (!index) index = d.index;
  } else if (!index && d.type == type) {
    index = d.index;  // "/device:GPU" filled from ".../GPU:1" is GPU:1; from CPU:0 it stays GPU:*
  }
}

bool DeviceSpec::matches(const DeviceSpec& d) const {
  if (job && job != d.job) return false;
  if (replica && replica != d.replica) return false;
  if (task && task != d.task) return false;
  if (type && type != d.type) return false;
  if (index && index != d.index) return false;
  return true;
}

bool DeviceSpec::compatible_with(const DeviceSpec& o) const {
  if (job && o.job && job != o.job) return false;
  if (replica && o.replica && replica != o.replica) return false;
  if (task && o.task && task != o.task) return false;
  if (type && o.type && type != o.type) return false;
  if (index && o.index && index != o.index) return false;
  return true;
}

bool apply_task_aliases(DeviceSpec& s, const std::map<std::string, std::string>& aliases) {
  if (aliases.empty() || !s.job || !s.task) return false;
  for (const auto& [from, to] : aliases) {
    auto f = DeviceSpec::parse(from);
    if (!f.ok() || !f->job || !f->task || *f->job != *s.job || *f->task != *s.task) continue;
    if (s.replica && f->replica && *s.replica != *f->replica) continue;
    auto t = DeviceSpec::parse(to);
    if (!t.ok() || !t->job || !t->task) continue;
    s.job = t->job;
    s.task = t->task;
    if (t->replica) s.replica = t->replica;
    return true;
  }
  return false;
}

}  // namespace actorflow
