// Reading cluster files (TOML, via toml++) and job maps into a validated ClusterSpec.
//
// Every mistake found is collected with its file position and key path; the resulting
// InvalidArgument lists them in file order. The TOML reading (parsing, typed values, messages) is
// config/toml_read.h's, shared with fault plans; toml++'s exceptions never cross the API.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <set>

#include "config/cluster_spec.h"
#include "config/toml_read.h"
#include "core/file_read.h"
#include "core/logging.h"

namespace actorflow {

namespace {

constexpr size_t kMaxSecretBytes = 64 * 1024;
// A shorter secret can be guessed: the handshake answers a guess in well under a millisecond.
constexpr size_t kMinSecretBytes = 16;
constexpr size_t kMaxClusterFileBytes = 1 << 20;  // 1 MiB: a cluster of 10 000 tasks is ~300 KiB
constexpr size_t kMaxReportedErrors = 20;
constexpr int kMaxTaskIndex = 999999;

using Pos = TomlPos;

bool is_bare_key(const std::string& k) {
  if (k.empty()) return false;
  for (char c : k)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// "prefix.key", quoting the key as TOML would when it is not a bare key.
std::string key_path(const std::string& prefix, const std::string& key) {
  const std::string k = is_bare_key(key) ? key : "\"" + key + "\"";
  return prefix.empty() ? k : prefix + "." + k;
}

// A sparse-form task key: "0" or [1-9][0-9]* up to kMaxTaskIndex.
bool parse_task_index_key(const std::string& s, int* out) {
  if (s.empty() || s.size() > 6) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  if (s.size() > 1 && s[0] == '0') return false;
  *out = std::stoi(s);
  return *out <= kMaxTaskIndex;
}

// Checks a visible_devices list: "" or comma-separated distinct non-negative integers.
std::string check_device_list(const std::string& s) {
  if (s.empty()) return std::string();
  std::set<std::string> seen;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty() || item.size() > 6 ||
        !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return "'" + s + "' is not a comma-separated list of GPU indices such as \"0,1\" (\"\" = all GPUs)";
    if (!seen.insert(item).second) return "GPU " + item + " is listed twice in '" + s + "'";
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return std::string();
}

// Checks a [server] bind value: "" or a host name / IP literal without a port.
std::string check_bind_address(const std::string& s) {
  if (s.empty()) return std::string();
  if (s.size() > 253) return "bind address longer than 253 characters";
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' || c == '_'))
      return "'" + s + "' is not a host name or IP address (write \"0.0.0.0\", \"::\" or a local address, no port)";
  if (s.find(':') != std::string::npos && s.find('.') == std::string::npos && s.find("::") == std::string::npos &&
      std::count(s.begin(), s.end(), ':') < 2)
    return "'" + s + "' looks like host:port; bind takes an address only (the port comes from [jobs])";
  return std::string();
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return std::string();
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Closes a file descriptor on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

// Reads a whole regular file into `out`; on failure returns the reason (errno text or "is a
// directory"/"larger than N bytes") and sets *err to the errno (0 if none), on success "".
std::string read_whole_file(const std::string& path, size_t max_bytes, std::string* out, mode_t* mode,
                            int* err) {
  *err = 0;
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it before any read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    *err = errno;
    return std::strerror(*err);
  }
  FdCloser closer(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    *err = errno;
    return std::strerror(*err);
  }
  if (!S_ISREG(st.st_mode)) return "is " + file_kind(st.st_mode) + ", not a regular file";
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return "larger than " + std::to_string(max_bytes) + " bytes";
  if (mode) *mode = st.st_mode;
  out->clear();
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      *err = errno;
      return std::strerror(*err);
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > max_bytes) return "larger than " + std::to_string(max_bytes) + " bytes";
  }
  return std::string();
}

const std::vector<std::string> kTopKeys = {"cluster", "jobs", "server", "tasks", "supervisor"};
const std::vector<std::string> kClusterKeys = {"name", "secret_file", "tls_dir", "metrics_token_file"};
const std::vector<std::string> kServerKeys = {
    "log_device_placement", "allow_soft_placement", "mixed_precision", "gpu_memory_fraction",
    "allow_growth",         "visible_devices",      "cpu_devices",
    "connect_timeout_ms",   "heartbeat_interval_ms", "peer_timeout_ms",
    "bind", "metrics_port", "step_timeout_secs"};
const std::vector<std::string> kSupervisorKeys = {
    "chief",        "logdir",              "save_checkpoint_secs", "keep_checkpoints",
    "max_restarts", "restart_window_secs", "ready_timeout_secs",   "save_summaries_secs",
    "ps_replicas",  "checkpoint_format",   "trace_every_steps",    "trace_dir",
    "sync_deadline_ms"};

}  // namespace

// Builds one ClusterSpec, collecting every mistake. Single use; not thread-safe.
class ClusterFileReader : private TomlReader {
 public:
  ClusterFileReader(const std::string& source, std::string base_dir)
      : TomlReader(source, kMaxReportedErrors), base_dir_(std::move(base_dir)) {
    spec_.source_ = source;
  }

  Result<ClusterSpec> read_toml(const std::string& text) {
    toml::table root;
    if (!parse(text, "cluster files", &root)) return finish();
    for (auto&& [k, v] : root) {
      const std::string key(k.str());
      if (std::find(kTopKeys.begin(), kTopKeys.end(), key) == kTopKeys.end()) {
        unknown_key(k, "", kTopKeys, "unknown table");
      } else if (!v.is_table()) {
        error(toml_pos(v.source()), key, std::string("expected a table, got ") + toml_type_name(v));
      }
    }
    auto table_at = [&](const char* name) -> const toml::table* {
      const toml::node* n = root.get(name);
      return n ? n->as_table() : nullptr;
    };
    if (const toml::table* j = table_at("jobs")) {
      read_jobs(*j);
    } else if (!root.get("jobs")) {
      error(Pos{1, 1}, "jobs", "missing required table [jobs] (e.g. [jobs] worker = [\"localhost:2222\"])");
    }
    spec_.choose_default_chief();
    if (const toml::table* c = table_at("cluster")) read_cluster(*c);
    if (const toml::table* s = table_at("server")) read_server(*s, "server", &spec_.options_->server_defaults);
    if (const toml::table* t = table_at("tasks")) read_tasks(*t);
    if (const toml::table* s = table_at("supervisor")) read_supervisor(*s);
    load_secret();
    check_secret_required();
    load_metrics_token();
    return finish();
  }

  Result<ClusterSpec> read_map(const std::map<std::string, std::map<int, std::string>>& jobs, bool list_form) {
    if (jobs.empty()) error(Pos{}, "jobs", "no jobs");
    for (const auto& [job, tasks] : jobs) {
      const std::string path = key_path("jobs", job);
      if (!is_valid_job_name(job)) {
        error(Pos{}, path, "bad job name '" + job + "': must match [A-Za-z][A-Za-z0-9_]*");
        continue;
      }
      if (tasks.empty()) error(Pos{}, path, "job '" + job + "' has no tasks");
      for (const auto& [index, addr] : tasks) {
        const std::string ipath = list_form ? path + "[" + std::to_string(index) + "]"
                                            : path + "." + std::to_string(index);
        if (index < 0 || index > kMaxTaskIndex) {
          error(Pos{}, ipath, "task index " + std::to_string(index) + " out of range 0.." +
                                  std::to_string(kMaxTaskIndex));
          continue;
        }
        add_task(job, index, addr, Pos{}, ipath);
      }
    }
    spec_.choose_default_chief();
    load_secret();
    check_secret_required();
    return finish();
  }

 private:
  struct Endpoint {
    TaskId task;
    Pos pos;
    std::string addr;
  };

  Result<ClusterSpec> finish() {
    Status s = status();
    if (!s.ok()) return s;
    return std::move(spec_);
  }

  void unknown_key(const toml::key& k, const std::string& prefix, const std::vector<std::string>& known,
                   const char* what = "unknown key") {
    TomlReader::unknown_key(k, key_path(prefix, std::string(k.str())), known, what);
  }

  // ---- tables ----------------------------------------------------------------------------

  void read_cluster(const toml::table& t) {
    for (auto&& [k, v] : t) {
      const std::string key(k.str()), path = key_path("cluster", key);
      if (key == "name") {
        std::string s;
        if (read_string(v, path, &s)) {
          if (s.empty()) {
            error(toml_pos(v.source()), path, "must not be empty");
          } else {
            spec_.name_ = s;
          }
        }
      } else if (key == "secret_file") {
        std::string s;
        if (read_string(v, path, &s)) {
          if (s.empty()) {
            error(toml_pos(v.source()), path,
                  std::string("must not be empty (omit it to take the secret from ") + kSecretEnvVar + ")");
          } else {
            secret_file_ = s;
            secret_file_pos_ = toml_pos(v.source());
          }
        }
      } else if (key == "metrics_token_file") {
        std::string s;
        if (read_string(v, path, &s)) {
          if (s.empty()) {
            error(toml_pos(v.source()), path, "must not be empty (omit it to scrape without a token)");
          } else {
            metrics_token_file_ = s;
            metrics_token_file_pos_ = toml_pos(v.source());
          }
        }
      } else if (key == "tls_dir") {
        std::string s;
        if (read_string(v, path, &s)) {
          if (s.empty()) {
            error(toml_pos(v.source()), path, "must not be empty (omit it to run without TLS)");
          } else {
            spec_.tls_dir_ = (s[0] == '/' || base_dir_.empty()) ? s : base_dir_ + "/" + s;
          }
        }
      } else if (key == "secret") {
        // Never echo the value: it is probably a real secret.
        error(toml_pos(k.source()), path,
              std::string("inline secrets are not allowed (files get shared and logged); put the secret in a "
                          "file named by secret_file, or in the ") +
                  kSecretEnvVar + " environment variable");
      } else {
        unknown_key(k, "cluster", kClusterKeys);
      }
    }
  }

  void read_jobs(const toml::table& t) {
    struct Pending {
      Pos pos;
      std::string job;
      int index;
      std::string addr, path;
    };
    std::vector<Pending> pending;  // added in file order so duplicates are reported where they recur
    const Pos tp = toml_pos(t.source());
    spec_.jobs_position_ = ClusterSpec::Position{tp.line, tp.column};
    if (t.empty()) error(toml_pos(t.source()), "jobs", "no jobs (e.g. worker = [\"localhost:2222\"])");
    for (auto&& [k, v] : t) {
      const std::string job(k.str()), path = key_path("jobs", job);
      const Pos kp = toml_pos(k.source());
      if (!is_valid_job_name(job)) {
        error(kp, path, "bad job name '" + job + "': must match [A-Za-z][A-Za-z0-9_]*");
        continue;
      }
      spec_.job_positions_[job] = ClusterSpec::Position{kp.line, kp.column};
      if (const toml::array* arr = v.as_array()) {
        if (arr->empty()) error(toml_pos(v.source()), path, "job '" + job + "' has no tasks");
        for (size_t i = 0; i < arr->size(); ++i) {
          const toml::node& e = *arr->get(i);
          const std::string epath = path + "[" + std::to_string(i) + "]";
          if (const auto* s = e.as_string()) {
            pending.push_back(Pending{toml_pos(e.source()), job, static_cast<int>(i), s->get(), epath});
          } else {
            error(toml_pos(e.source()), epath, std::string("expected a \"host:port\" string, got ") + toml_type_name(e));
          }
        }
      } else if (const toml::table* tbl = v.as_table()) {
        if (tbl->empty()) error(toml_pos(v.source()), path, "job '" + job + "' has no tasks");
        for (auto&& [ik, iv] : *tbl) {
          const std::string ks(ik.str()), epath = key_path(path, ks);
          int index = 0;
          if (!parse_task_index_key(ks, &index)) {
            error(toml_pos(ik.source()), epath,
                  "bad task index '" + ks + "': sparse-form keys are task indices 0.." +
                      std::to_string(kMaxTaskIndex) + " without leading zeros, e.g. { 0 = \"host:2222\" }");
            continue;
          }
          if (const auto* s = iv.as_string()) {
            pending.push_back(Pending{toml_pos(iv.source()), job, index, s->get(), epath});
          } else {
            error(toml_pos(iv.source()), epath, std::string("expected a \"host:port\" string, got ") + toml_type_name(iv));
          }
        }
      } else {
        error(toml_pos(v.source()), path,
              std::string("expected an array of \"host:port\" strings or a table { 0 = \"host:port\" }, got ") +
                  toml_type_name(v));
      }
    }
    std::stable_sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
      return a.pos.line != b.pos.line ? a.pos.line < b.pos.line : a.pos.column < b.pos.column;
    });
    for (const Pending& p : pending) add_task(p.job, p.index, p.addr, p.pos, p.path);
  }

  void add_task(const std::string& job, int index, const std::string& addr, Pos p, const std::string& path) {
    auto hp = parse_address(addr);
    if (!hp.ok()) {
      error(p, path, hp.status().message());
      return;
    }
    const std::string& host = hp->first;
    const std::string canon = format_address(host, hp->second);
    const TaskId task{job, index};
    // Aliases of one endpoint collide: localhost, 127.0.0.1, ::1 and ::ffff:127.0.0.1 name the
    // same machine; ::ffff:a.b.c.d is a.b.c.d; and the all-interfaces address (0.0.0.0, ::)
    // collides with every address on the same port.
    std::string h = host;
    if (h.rfind("::ffff:", 0) == 0 && h.find('.') != std::string::npos) h = h.substr(7);
    const bool loopback_alias = h == "localhost" || h == "::1" || h == "127.0.0.1";
    const bool wildcard = h == "0.0.0.0" || h == "::";
    const std::string endpoint = loopback_alias ? "loopback:" + std::to_string(hp->second)
                                 : wildcard     ? "any:" + std::to_string(hp->second)
                                                : format_address(h, hp->second);
    auto it = endpoints_.find(endpoint);
    if (it == endpoints_.end()) {
      // The all-interfaces address against any other on the same port, either way round: one
      // lookup in the per-port index (a scan of every endpoint made parsing quadratic in tasks).
      auto by_port = endpoints_by_port_.find(hp->second);
      if (by_port != endpoints_by_port_.end()) {
        const std::string& e = wildcard ? by_port->second.first_any_endpoint : by_port->second.wildcard_endpoint;
        if (!e.empty()) it = endpoints_.find(e);
      }
    }
    if (it != endpoints_.end()) {
      const Endpoint& other = it->second;
      const std::string who =
          other.task.to_string() + (other.pos.line > 0 ? " (line " + std::to_string(other.pos.line) + ")" : "");
      if (other.addr == canon) {
        error(p, path, "duplicate address '" + addr + "': already used by " + who);
      } else {
        error(p, path, "address '" + addr + "' is the same endpoint as '" + other.addr + "' of " + who);
      }
      return;
    }
    endpoints_[endpoint] = Endpoint{task, p, canon};
    PortEndpoints& on_port = endpoints_by_port_[hp->second];
    if (on_port.first_any_endpoint.empty()) on_port.first_any_endpoint = endpoint;
    if (wildcard && on_port.wildcard_endpoint.empty()) on_port.wildcard_endpoint = endpoint;
    spec_.jobs_[job][index] = canon;
    address_where_[task] = std::make_pair(p, path);
  }

  // Reads [server] or a [tasks."job/N"] table into `o` (which holds the inherited values).
  void read_server(const toml::table& t, const std::string& prefix, ServerOptions* o) {
    bool timing_set = false;
    Pos timing_pos;
    std::string timing_key;
    for (auto&& [k, v] : t) {
      const std::string key(k.str()), path = key_path(prefix, key);
      if (key == "log_device_placement") {
        read_bool(v, path, &o->log_device_placement);
      } else if (key == "allow_soft_placement") {
        read_bool(v, path, &o->allow_soft_placement);
      } else if (key == "mixed_precision") {
        std::string m;
        if (read_string(v, path, &m)) {
          if (m == "bfloat16" || m == "float32") o->mixed_bfloat16 = m == "bfloat16";
          else error(toml_pos(v.source()), path, "expected \"float32\" or \"bfloat16\", got \"" + m + "\"");
        }
      } else if (key == "gpu_memory_fraction") {
        read_number_in(v, path, 0.0, true, 1.0, &o->gpu_memory_fraction);
      } else if (key == "allow_growth") {
        read_bool(v, path, &o->allow_growth);
      } else if (key == "visible_devices") {
        std::string s;
        if (v.is_integer()) {
          error(toml_pos(v.source()), path, "expected a string such as \"0,1\", got integer (write \"" +
                                              std::to_string(v.as_integer()->get()) + "\")");
        } else if (read_string(v, path, &s)) {
          const std::string why = check_device_list(s);
          if (!why.empty()) {
            error(toml_pos(v.source()), path, why);
          } else {
            o->visible_devices = s;
          }
        }
      } else if (key == "bind") {
        std::string b;
        if (read_string(v, path, &b)) {
          const std::string why = check_bind_address(b);
          if (!why.empty()) error(toml_pos(v.source()), path, why);
          else o->bind = b;
        }
      } else if (key == "cpu_devices") {
        read_int(v, path, 1, 4096, &o->cpu_devices);
      } else if (key == "metrics_port") {
        read_int(v, path, 0, 65535, &o->metrics_port);
      } else if (key == "step_timeout_secs") {
        read_number_in(v, path, 0.0, false, 7 * 86400.0, &o->step_timeout_secs);
      } else if (key == "connect_timeout_ms") {
        read_int(v, path, 0, INT_MAX, &o->connect_timeout_ms);
      } else if (key == "heartbeat_interval_ms" || key == "peer_timeout_ms") {
        int* field = key == "heartbeat_interval_ms" ? &o->heartbeat_interval_ms : &o->peer_timeout_ms;
        if (read_int(v, path, 1, INT_MAX, field) && (!timing_set || key == "peer_timeout_ms")) {
          timing_set = true;
          timing_pos = toml_pos(v.source());
          timing_key = path;
        }
      } else {
        unknown_key(k, prefix, kServerKeys);
      }
    }
    if (timing_set && o->peer_timeout_ms <= o->heartbeat_interval_ms) {
      error(timing_pos, timing_key,
            "peer_timeout_ms (" + std::to_string(o->peer_timeout_ms) + ") must be greater than heartbeat_interval_ms (" +
                std::to_string(o->heartbeat_interval_ms) + ")");
    }
  }

  // Checks that `t` is a task of the cluster; else reports why at (p, path) and returns false.
  bool check_task_exists(const TaskId& t, Pos p, const std::string& path, const std::string& what) {
    auto it = spec_.jobs_.find(t.job);
    if (it == spec_.jobs_.end()) {
      error(p, path, what + " '" + t.to_string() + "' names job '" + t.job + "', which is not in [jobs] (jobs: " +
                         (spec_.jobs_.empty() ? std::string("none") : join_names(spec_.jobs())) + ")");
      return false;
    }
    if (!it->second.count(t.index)) {
      std::vector<std::string> idx;
      for (int i : spec_.task_indices(t.job)) idx.push_back(std::to_string(i));
      error(p, path, what + " '" + t.to_string() + "' is not in [jobs] (job '" + t.job + "' has task indices " +
                         join_names(idx) + ")");
      return false;
    }
    return true;
  }

  void read_tasks(const toml::table& t) {
    std::vector<std::pair<const toml::key*, const toml::node*>> entries;  // in file order
    for (auto&& [k, v] : t) entries.emplace_back(&k, &v);
    std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
      const Pos pa = toml_pos(a.first->source()), pb = toml_pos(b.first->source());
      return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
    });
    std::map<TaskId, Pos> seen;
    for (const auto& [kptr, vptr] : entries) {
      const toml::key& k = *kptr;
      const toml::node& v = *vptr;
      const std::string key(k.str()), path = key_path("tasks", key);
      const Pos kp = toml_pos(k.source());
      auto task = TaskId::parse(key);
      if (!task.ok()) {
        error(kp, path, task.status().message() + "; write the header as [tasks.\"worker/1\"]");
        continue;
      }
      if (!check_task_exists(*task, kp, path, "task")) continue;
      auto prev = seen.find(*task);
      if (prev != seen.end()) {
        error(kp, path, "task " + task->to_string() + " already has overrides (line " +
                            std::to_string(prev->second.line) + ")");
        continue;
      }
      seen[*task] = kp;
      const toml::table* tbl = v.as_table();
      if (!tbl) {
        error(toml_pos(v.source()), path, std::string("expected a table of [server] keys, got ") + toml_type_name(v));
        continue;
      }
      ServerOptions o = spec_.options_->server_defaults;
      read_server(*tbl, path, &o);
      spec_.options_->task_options[*task] = o;
    }
  }

  void read_supervisor(const toml::table& t) {
    SupervisorOptions& s = spec_.options_->supervisor;
    for (auto&& [k, v] : t) {
      const std::string key(k.str()), path = key_path("supervisor", key);
      if (key == "chief") {
        std::string str;
        if (!read_string(v, path, &str)) continue;
        auto task = TaskId::parse(str);
        if (!task.ok()) {
          error(toml_pos(v.source()), path, task.status().message());
        } else if (check_task_exists(*task, toml_pos(v.source()), path, "chief")) {
          s.chief = *task;
        }
      } else if (key == "logdir") {
        std::string str;
        if (read_string(v, path, &str)) {
          if (str.empty()) {
            error(toml_pos(v.source()), path, "must not be empty");
          } else {
            s.logdir = str;
          }
        }
      } else if (key == "save_checkpoint_secs") {
        read_number_in(v, path, 0.0, true, HUGE_VAL, &s.save_checkpoint_secs);
      } else if (key == "keep_checkpoints") {
        read_int(v, path, 0, INT_MAX, &s.keep_checkpoints);
      } else if (key == "checkpoint_format") {
        std::string str;
        if (read_string(v, path, &str)) {
          if (str == "actorflow" || str == "tensorflow") {
            s.tensorflow_checkpoints = str == "tensorflow";
          } else {
            error(toml_pos(v.source()), path, "must be \"actorflow\" or \"tensorflow\", got \"" + str + "\"");
          }
        }
      } else if (key == "sync_deadline_ms") {
        read_int(v, path, 0, 86400 * 1000, &s.sync_deadline_ms);
      } else if (key == "trace_every_steps") {
        read_int(v, path, 0, INT_MAX, &s.trace_every_steps);
      } else if (key == "trace_dir") {
        std::string str;
        if (read_string(v, path, &str)) {
          if (str.empty()) error(toml_pos(v.source()), path, "must not be empty (leave it out for <logdir>/traces)");
          else s.trace_dir = str;
        }
      } else if (key == "max_restarts") {
        read_int(v, path, 0, INT_MAX, &s.max_restarts);
      } else if (key == "restart_window_secs") {
        read_number_in(v, path, 0.0, false, HUGE_VAL, &s.restart_window_secs);
      } else if (key == "ready_timeout_secs") {
        read_number_in(v, path, 0.0, false, HUGE_VAL, &s.ready_timeout_secs);
      } else if (key == "save_summaries_secs") {
        read_number_in(v, path, 0.0, true, HUGE_VAL, &s.save_summaries_secs);
      } else if (key == "ps_replicas") {
        int n = 1;
        if (!read_int(v, path, 1, 2, &n)) continue;
        const int ps = spec_.num_tasks("ps");
        if (n == 2 && ps < 2) {
          error(toml_pos(v.source()), path,
                "2 needs at least 2 ps tasks (a variable's replica lives on another ps task), the cluster has " +
                    std::to_string(ps));
          continue;
        }
        s.ps_replicas = n;
      } else {
        unknown_key(k, "supervisor", kSupervisorKeys);
      }
    }
  }

  // ---- the secret ------------------------------------------------------------------------

  // [cluster] secret_file when the file names one (it must then be readable and non-empty), else
  // ACTORFLOW_SECRET when set and non-empty. The bytes never reach a message or a log line.
  void load_secret() {
    if (!secret_file_.empty()) {
      const std::string path =
          (secret_file_[0] == '/' || base_dir_.empty()) ? secret_file_ : base_dir_ + "/" + secret_file_;
      std::string bytes;
      mode_t mode = 0;
      int err = 0;
      const std::string why = read_whole_file(path, kMaxSecretBytes, &bytes, &mode, &err);
      if (!why.empty()) {
        secret_failed_ = true;
        error(secret_file_pos_, "cluster.secret_file", "cannot read secret file '" + path + "': " + why);
        return;
      }
      while (!bytes.empty() && (bytes.back() == '\n' || bytes.back() == '\r' || bytes.back() == ' ' ||
                                bytes.back() == '\t'))
        bytes.pop_back();
      if (bytes.empty()) {
        secret_failed_ = true;
        error(secret_file_pos_, "cluster.secret_file", "secret file '" + path + "' is empty");
        return;
      }
      if (bytes.size() < kMinSecretBytes) {
        secret_failed_ = true;
        error(secret_file_pos_, "cluster.secret_file",
              "secret file '" + path + "' holds " + std::to_string(bytes.size()) + " bytes; a cluster secret needs at least " +
                  std::to_string(kMinSecretBytes) + " (e.g. `openssl rand -hex 32 > " + path + "`)");
        return;
      }
      if ((mode & 077) != 0) {
        AF_LOG(WARNING) << spec_.source_ << ": secret file " << path
                        << " is accessible by group or others; chmod 600 it";
      }
      spec_.secret_ = std::move(bytes);
      spec_.secret_origin_ = path;
      return;
    }
    const char* env = std::getenv(kSecretEnvVar);
    if (env && *env) {
      if (std::strlen(env) < kMinSecretBytes) {
        secret_failed_ = true;
        error(Pos{}, kSecretEnvVar,
              "the environment variable " + std::string(kSecretEnvVar) + " holds " + std::to_string(std::strlen(env)) +
                  " bytes; a cluster secret needs at least " + std::to_string(kMinSecretBytes) +
                  " (e.g. `openssl rand -hex 32`)");
        return;
      }
      spec_.secret_ = env;
      spec_.secret_origin_ = kSecretEnvVar;
    }
  }

  // [cluster] metrics_token_file: Prometheus' read-only Bearer token for /metrics (net/metrics_http.h).
  // Read like the secret file (regular file, at most 64 KiB, trailing whitespace dropped); at
  // least 16 bytes, and never the cluster secret itself (it travels in clear over plain HTTP).
  void load_metrics_token() {
    if (metrics_token_file_.empty()) return;
    const std::string path = (metrics_token_file_[0] == '/' || base_dir_.empty()) ? metrics_token_file_
                                                                                 : base_dir_ + "/" + metrics_token_file_;
    std::string bytes;
    mode_t mode = 0;
    int err = 0;
    const std::string why = read_whole_file(path, kMaxSecretBytes, &bytes, &mode, &err);
    if (!why.empty()) {
      error(metrics_token_file_pos_, "cluster.metrics_token_file", "cannot read metrics token file '" + path + "': " + why);
      return;
    }
    while (!bytes.empty() && (bytes.back() == '\n' || bytes.back() == '\r' || bytes.back() == ' ' || bytes.back() == '\t'))
      bytes.pop_back();
    if (bytes.size() < 16) {
      error(metrics_token_file_pos_, "cluster.metrics_token_file",
            "metrics token file '" + path + "' holds fewer than 16 bytes (e.g. `openssl rand -hex 32 > " + path + "`)");
      return;
    }
    if (bytes == spec_.secret_) {
      error(metrics_token_file_pos_, "cluster.metrics_token_file",
            "metrics token file '" + path + "' holds the cluster secret: the token travels in clear to whoever "
            "answers a metrics port, so it must be a different value");
      return;
    }
    if ((mode & 077) != 0)
      AF_LOG(WARNING) << spec_.source_ << ": metrics token file " << path << " is accessible by group or others; chmod 600 it";
    spec_.metrics_token_ = std::move(bytes);
  }

  void check_secret_required() {
    // Certificates from the cluster CA authenticate every connection just as the secret does.
    if (!spec_.secret_.empty() || secret_failed_ || !spec_.tls_dir_.empty()) return;
    const std::pair<Pos, std::string>* first = nullptr;
    std::string first_addr;
    for (const auto& [task, where] : address_where_) {
      const std::string& addr = spec_.jobs_.at(task.job).at(task.index);
      auto hp = parse_address(addr);
      if (hp.ok() && is_loopback_host(hp->first)) continue;
      const bool earlier = !first || (where.first.line > 0 && (first->first.line == 0 ||
                                                               where.first.line < first->first.line ||
                                                               (where.first.line == first->first.line &&
                                                                where.first.column < first->first.column)));
      if (earlier) {
        first = &where;
        first_addr = addr;
      }
    }
    if (first) {
      error(first->first, first->second,
            "address '" + first_addr + "' is not loopback, so the cluster needs a secret: set [cluster] "
            "secret_file or the " + std::string(kSecretEnvVar) + " environment variable, or turn on TLS with [cluster] "
            "tls_dir (see `actorflow certs`)");
    }
  }

  ClusterSpec spec_;
  std::string base_dir_;
  std::map<std::string, Endpoint> endpoints_;                      // endpoint key -> first task using it
  struct PortEndpoints {
    std::string first_any_endpoint;  // the first endpoint key on the port (of any host)
    std::string wildcard_endpoint;   // "any:<port>" once an all-interfaces address uses the port
  };
  std::unordered_map<int, PortEndpoints> endpoints_by_port_;  // port -> its endpoints (for aliases)
  std::map<TaskId, std::pair<Pos, std::string>> address_where_;  // task -> position and key path
  std::string secret_file_;
  Pos secret_file_pos_;
  bool secret_failed_ = false;
  std::string metrics_token_file_;
  Pos metrics_token_file_pos_;
};

Result<ClusterSpec> ClusterSpec::from_string(const std::string& toml, const std::string& source_name) {
  ClusterFileReader reader(source_name, dir_of(source_name));
  return reader.read_toml(toml);
}

Result<ClusterSpec> ClusterSpec::from_file(const std::string& path) {
  std::string text;
  int err = 0;
  const std::string why = read_whole_file(path, kMaxClusterFileBytes, &text, nullptr, &err);
  if (!why.empty()) {
    const std::string msg = "cannot open cluster file '" + path + "': " + why;
    if (err == ENOENT || err == ENOTDIR) return NotFound(msg);
    if (err == EACCES) return PermissionDenied(msg);
    return InvalidArgument(msg);
  }
  return from_string(text, path);
}

Result<ClusterSpec> ClusterSpec::from_jobs(const std::map<std::string, std::vector<std::string>>& jobs) {
  std::map<std::string, std::map<int, std::string>> sparse;
  for (const auto& [job, addrs] : jobs) {
    auto& tasks = sparse[job];
    for (size_t i = 0; i < addrs.size(); ++i) tasks[static_cast<int>(i)] = addrs[i];
  }
  ClusterFileReader reader("<jobs>", std::string());
  return reader.read_map(sparse, /*list_form=*/true);
}

Result<ClusterSpec> ClusterSpec::from_sparse_jobs(const std::map<std::string, std::map<int, std::string>>& jobs) {
  ClusterFileReader reader("<jobs>", std::string());
  return reader.read_map(jobs, /*list_form=*/false);
}

}  // namespace actorflow
