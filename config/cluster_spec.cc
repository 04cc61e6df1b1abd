// ClusterSpec queries, TaskId, addresses and the fingerprint. Reading files is in cluster_file.cc.
#include "config/cluster_spec.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>

#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <locale>
#include <sstream>

namespace actorflow {

namespace {

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// Parses a non-negative decimal int without sign; false on overflow or non-digits.
bool parse_nonneg_int(const std::string& s, int* out) {
  if (!all_digits(s) || s.size() > 9) return false;
  *out = std::stoi(s);
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string join_ints(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out;
}

// A double as the shortest decimal that round-trips; locale-independent.
std::string canonical_double(double d) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d);
  return std::string(buf, r.ptr);
}

// A string quoted with JSON-style escapes, so canonical lines are unambiguous.
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

// ---- TaskId ------------------------------------------------------------------------------

bool is_valid_job_name(const std::string& name) {
  if (name.empty() || !std::isalpha(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

std::string TaskId::to_string() const { return job + "/" + std::to_string(index); }

std::string TaskId::device_prefix() const {
  return "/job:" + job + "/replica:0/task:" + std::to_string(index);
}

Result<TaskId> TaskId::parse(const std::string& s) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("bad task '" + s + "': " + why +
                           " (expected \"job/index\" such as \"worker/1\", or \"/job:worker/task:1\")");
  };
  std::string job, index;
  if (s.rfind("/job:", 0) == 0) {
    std::vector<std::string> parts;  // "job:x", "replica:0", "task:1"
    std::string rest = s.substr(1), part;
    std::istringstream in(rest);
    while (std::getline(in, part, '/')) parts.push_back(part);
    if (!rest.empty() && rest.back() == '/') return bad("trailing '/'");
    for (const std::string& p : parts) {
      if (p.rfind("job:", 0) == 0 && job.empty()) {
        job = p.substr(4);
      } else if (p.rfind("task:", 0) == 0 && index.empty()) {
        index = p.substr(5);
        if (index.empty()) return bad("empty task index");
      } else if (p == "replica:0") {
        continue;
      } else if (p.rfind("replica:", 0) == 0) {
        return bad("only replica:0 exists");
      } else {
        return bad("unexpected component '" + p + "'");
      }
    }
    if (index.empty()) return bad("missing /task:N");
  } else {
    size_t slash = s.find('/');
    if (slash == std::string::npos) return bad("missing '/'");
    job = s.substr(0, slash);
    index = s.substr(slash + 1);
  }
  if (job.empty()) return bad("empty job name");
  if (!is_valid_job_name(job)) return bad("job name '" + job + "' must match [A-Za-z][A-Za-z0-9_]*");
  int i = 0;
  if (!parse_nonneg_int(index, &i)) return bad("task index '" + index + "' is not a non-negative integer");
  return TaskId{job, i};
}

// ---- options -----------------------------------------------------------------------------

bool ServerOptions::operator==(const ServerOptions& o) const {
  return log_device_placement == o.log_device_placement && allow_soft_placement == o.allow_soft_placement &&
         mixed_bfloat16 == o.mixed_bfloat16 &&
         gpu_memory_fraction == o.gpu_memory_fraction && allow_growth == o.allow_growth &&
         visible_devices == o.visible_devices && cpu_devices == o.cpu_devices &&
         connect_timeout_ms == o.connect_timeout_ms && heartbeat_interval_ms == o.heartbeat_interval_ms &&
         peer_timeout_ms == o.peer_timeout_ms && bind == o.bind &&
         metrics_port == o.metrics_port && step_timeout_secs == o.step_timeout_secs;
}

bool SupervisorOptions::operator==(const SupervisorOptions& o) const {
  return chief == o.chief && logdir == o.logdir && save_checkpoint_secs == o.save_checkpoint_secs &&
         keep_checkpoints == o.keep_checkpoints && max_restarts == o.max_restarts &&
         tensorflow_checkpoints == o.tensorflow_checkpoints &&
         restart_window_secs == o.restart_window_secs && ready_timeout_secs == o.ready_timeout_secs &&
         save_summaries_secs == o.save_summaries_secs && ps_replicas == o.ps_replicas &&
         trace_every_steps == o.trace_every_steps && trace_dir == o.trace_dir &&
         sync_deadline_ms == o.sync_deadline_ms;
}

// ---- addresses ---------------------------------------------------------------------------

Result<std::pair<std::string, int>> parse_address(const std::string& addr) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("malformed address '" + addr + "': " + why);
  };
  if (addr.empty()) return bad("empty (expected \"host:port\")");
  std::string host, port;
  if (addr[0] == '[') {
    size_t close = addr.find(']');
    if (close == std::string::npos) return bad("'[' without ']' (IPv6 is written \"[::1]:2222\")");
    host = addr.substr(1, close - 1);
    if (close + 1 >= addr.size() || addr[close + 1] != ':')
      return bad("missing ':port' after ']'");
    port = addr.substr(close + 2);
    if (host.empty()) return bad("empty host");
    for (char c : host)
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.')
        return bad("'" + host + "' is not an IPv6 address");
    if (host.find(':') == std::string::npos) return bad("'" + host + "' in brackets is not an IPv6 address");
    in6_addr a6{};
    if (inet_pton(AF_INET6, host.c_str(), &a6) != 1) return bad("'" + host + "' is not an IPv6 address");
  } else {
    size_t colon = addr.rfind(':');
    if (colon == std::string::npos) return bad("missing ':port'");
    host = addr.substr(0, colon);
    port = addr.substr(colon + 1);
    if (host.find(':') != std::string::npos)
      return bad("IPv6 addresses must be in brackets, e.g. \"[::1]:2222\"");
    if (host.empty()) return bad("empty host");
    for (char c : host)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_')
        return bad("host '" + host + "' has a character other than letters, digits, '-', '.', '_'");
    if (host.front() == '.' || host.front() == '-') return bad("host '" + host + "' starts with '" +
                                                                std::string(1, host.front()) + "'");
  }
  if (port.empty()) return bad("empty port");
  if (!all_digits(port)) return bad("port '" + port + "' is not a number");
  if (port.size() > 5 || std::stoi(port) < 1 || std::stoi(port) > 65535)
    return bad("port out of range 1..65535");
  return std::make_pair(lower(host), std::stoi(port));
}

std::string format_address(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

bool is_loopback_host(const std::string& host) {
  std::string h = lower(host);
  if (h == "localhost") return true;
  in_addr a4{};
  if (inet_pton(AF_INET, h.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  if (inet_pton(AF_INET6, h.c_str(), &a6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&a6)) return a6.s6_addr[12] == 127;
  }
  return false;
}

// ---- ClusterSpec queries -----------------------------------------------------------------

ClusterSpec::ClusterSpec() : options_(std::make_shared<Options>()) {}

const SupervisorOptions& ClusterSpec::supervisor() const { return options_->supervisor; }

std::string ClusterSpec::where(const Position& p) const {
  if (p.line <= 0) return source_ + ": ";
  return source_ + ":" + std::to_string(p.line) + ":" + std::to_string(p.column) + ": ";
}

std::vector<std::string> ClusterSpec::jobs() const {
  std::vector<std::string> out;
  for (const auto& [job, tasks] : jobs_) out.push_back(job);
  return out;
}

int ClusterSpec::num_tasks(const std::string& job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? 0 : static_cast<int>(it->second.size());
}

std::vector<int> ClusterSpec::task_indices(const std::string& job) const {
  std::vector<int> out;
  auto it = jobs_.find(job);
  if (it != jobs_.end())
    for (const auto& [i, addr] : it->second) out.push_back(i);
  return out;
}

Status ClusterSpec::validate_task(const TaskId& t) const {
  auto it = jobs_.find(t.job);
  if (it == jobs_.end()) {
    return NotFound(where(jobs_position_) + (jobs_position_.line > 0 ? "jobs: " : "") + "no job '" + t.job +
                    "' in the cluster (jobs: " +
                    (jobs_.empty() ? std::string("none") : join(jobs())) + ")");
  }
  if (it->second.count(t.index)) return Status::OK();
  auto pos = job_positions_.find(t.job);
  return NotFound(where(pos == job_positions_.end() ? Position{} : pos->second) + "jobs." + t.job +
                  ": no task " + std::to_string(t.index) + " in job '" + t.job + "' (task indices: " +
                  join_ints(task_indices(t.job)) + ")");
}

Result<std::string> ClusterSpec::task_address(const TaskId& t) const {
  AF_RETURN_IF_ERROR(validate_task(t));
  return jobs_.at(t.job).at(t.index);
}

std::vector<TaskId> ClusterSpec::all_tasks() const {
  std::vector<TaskId> out;
  for (const auto& [job, tasks] : jobs_)
    for (const auto& [i, addr] : tasks) out.push_back(TaskId{job, i});
  return out;
}

ServerOptions ClusterSpec::server_options(const TaskId& t) const {
  auto it = options_->task_options.find(t);
  return it == options_->task_options.end() ? options_->server_defaults : it->second;
}

bool ClusterSpec::all_loopback() const {
  for (const auto& [job, tasks] : jobs_)
    for (const auto& [i, addr] : tasks) {
      auto hp = parse_address(addr);
      if (!hp.ok() || !is_loopback_host(hp->first)) return false;
    }
  return true;
}

void ClusterSpec::choose_default_chief() {
  if (jobs_.empty()) return;
  auto w = jobs_.find("worker");
  if (w != jobs_.end() && w->second.count(0)) {
    options_->supervisor.chief = TaskId{"worker", 0};
    return;
  }
  for (const auto& [job, tasks] : jobs_) {
    if (job != "ps") {
      options_->supervisor.chief = TaskId{job, tasks.begin()->first};
      return;
    }
  }
  options_->supervisor.chief = TaskId{jobs_.begin()->first, jobs_.begin()->second.begin()->first};
}

std::string ClusterSpec::canonical_form() const {
  std::ostringstream o;
  o.imbue(std::locale::classic());  // no digit grouping whatever the global locale
  o << "actorflow-cluster-spec 1\n";
  o << "cluster.name " << quote(name_) << "\n";
  if (!tls_dir_.empty()) o << "cluster.tls 1\n";  // not the directory: a per-host path
  for (const auto& [job, tasks] : jobs_)
    for (const auto& [i, addr] : tasks) o << "task " << quote(job) << " " << i << " " << quote(addr) << "\n";
  for (const TaskId& t : all_tasks()) {
    const ServerOptions s = server_options(t);
    const std::string p = "server " + quote(t.to_string()) + " ";
    o << p << "log_device_placement " << s.log_device_placement << "\n"
      << p << "allow_soft_placement " << s.allow_soft_placement << "\n"
      << p << "gpu_memory_fraction " << canonical_double(s.gpu_memory_fraction) << "\n"
      << p << "allow_growth " << s.allow_growth << "\n"
      << p << "visible_devices " << quote(s.visible_devices) << "\n"
      << p << "cpu_devices " << s.cpu_devices << "\n"
      << p << "connect_timeout_ms " << s.connect_timeout_ms << "\n"
      << p << "heartbeat_interval_ms " << s.heartbeat_interval_ms << "\n"
      << p << "peer_timeout_ms " << s.peer_timeout_ms << "\n";
    // Only when set, so that the fingerprints of files written before the option stay the same.
    if (s.mixed_bfloat16) o << p << "mixed_bfloat16 1\n";
  }
  const SupervisorOptions& v = options_->supervisor;
  o << "supervisor chief " << quote(v.chief.to_string()) << "\n"
    << "supervisor logdir " << quote(v.logdir) << "\n"
    << "supervisor save_checkpoint_secs " << canonical_double(v.save_checkpoint_secs) << "\n"
    << "supervisor keep_checkpoints " << v.keep_checkpoints << "\n"
    << "supervisor max_restarts " << v.max_restarts << "\n"
    << "supervisor restart_window_secs " << canonical_double(v.restart_window_secs) << "\n"
    << "supervisor ready_timeout_secs " << canonical_double(v.ready_timeout_secs) << "\n"
    << "supervisor save_summaries_secs " << canonical_double(v.save_summaries_secs) << "\n";
  // Only when not the default, so that the fingerprints of files without it stay as they were.
  if (v.tensorflow_checkpoints) o << "supervisor checkpoint_format \"tensorflow\"\n";
  // Only when set, so the fingerprints of files without replication stay what they were.
  if (v.ps_replicas != 1) o << "supervisor ps_replicas " << v.ps_replicas << "\n";
  // Only when set (a job-wide training rule every task must agree on).
  if (v.sync_deadline_ms != 0) o << "supervisor sync_deadline_ms " << v.sync_deadline_ms << "\n";
  return o.str();
}

std::string ClusterSpec::fingerprint() const {
  const std::string text = canonical_form();
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr) != 1) return std::string();
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

}  // namespace actorflow
