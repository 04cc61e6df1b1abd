// `actorflow k8s`: Kubernetes manifests for a cluster file (docs/kubernetes.md).
//
// One headless Service per job, one StatefulSet (of one pod) per task, a ConfigMap with the cluster
// file rewritten to the pods' stable DNS names, and one Secret per task holding only what that
// task's pod needs (its own certificate and key, the CA certificate, the cluster secret and scrape
// token); the tools' client certificate and key go into a Secret no pod mounts. The objects
// are built as a small tree (Node) and written as YAML documents or one JSON v1 List, so both
// forms always carry the same content.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <clocale>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <locale>
#include <map>
#include <set>
#include <sstream>

#include "actorflow/actorflow.h"
#include "cli/commands.h"
#include "core/private_file.h"
#include "net/certs.h"
#include "net/socket.h"
#include "config/cluster_spec.h"  // the cluster file's options

namespace actorflow {
namespace cli {
namespace {

constexpr int kDefaultMetricsPort = 9100;
constexpr const char* kConfigDir = "/etc/actorflow";
constexpr const char* kSecretDir = "/etc/actorflow/secret";
constexpr const char* kSecretKeyName = "cluster.key";  // the secret file's key in the Secret
constexpr const char* kMetricsTokenKeyName = "metrics.token";  // Prometheus' scrape token's key in it

// ---- a tiny document tree, written as YAML or JSON --------------------------------------------

struct Node {
  enum Kind { kString, kInt, kBool, kMap, kList } kind = kMap;
  std::string s;
  long long i = 0;
  bool b = false;
  std::vector<std::pair<std::string, Node>> map;
  std::vector<Node> list;
  std::string comment;  // YAML only: "# ..." lines written before this value's key
};

Node str(std::string s) {
  Node n;
  n.kind = Node::kString;
  n.s = std::move(s);
  return n;
}
Node num(long long i) {
  Node n;
  n.kind = Node::kInt;
  n.i = i;
  return n;
}
Node boolean(bool b) {
  Node n;
  n.kind = Node::kBool;
  n.b = b;
  return n;
}
Node map(std::vector<std::pair<std::string, Node>> entries) {
  Node n;
  n.kind = Node::kMap;
  n.map = std::move(entries);
  return n;
}
Node list(std::vector<Node> items) {
  Node n;
  n.kind = Node::kList;
  n.list = std::move(items);
  return n;
}
Node commented(Node n, std::string comment) {
  n.comment = std::move(comment);
  return n;
}

// A JSON string literal (also a valid YAML double-quoted scalar).
std::string quote_json(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '\r': o += "\\r"; break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o + "\"";
}

void write_json(std::ostream& o, const Node& n, int indent) {
  const std::string pad(indent + 2, ' ');
  switch (n.kind) {
    case Node::kString: o << quote_json(n.s); return;
    case Node::kInt: o << n.i; return;
    case Node::kBool: o << (n.b ? "true" : "false"); return;
    case Node::kMap:
      if (n.map.empty()) {
        o << "{}";
        return;
      }
      o << "{\n";
      for (size_t k = 0; k < n.map.size(); ++k) {
        o << pad << quote_json(n.map[k].first) << ": ";
        write_json(o, n.map[k].second, indent + 2);
        o << (k + 1 < n.map.size() ? ",\n" : "\n");
      }
      o << std::string(indent, ' ') << "}";
      return;
    case Node::kList:
      if (n.list.empty()) {
        o << "[]";
        return;
      }
      o << "[\n";
      for (size_t k = 0; k < n.list.size(); ++k) {
        o << pad;
        write_json(o, n.list[k], indent + 2);
        o << (k + 1 < n.list.size() ? ",\n" : "\n");
      }
      o << std::string(indent, ' ') << "]";
      return;
  }
}

bool plain_yaml_key(const std::string& k) {
  if (k.empty()) return false;
  for (char c : k)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '/' && c != '-' && c != '_') return false;
  return std::isalpha(static_cast<unsigned char>(k[0]));
}

// True when `s` can be written as a YAML literal block: several printable ASCII lines whose first
// does not start with a space, ending in exactly one newline.
bool literal_block_ok(const std::string& s) {
  if (s.find('\n') == std::string::npos || s.back() != '\n' || s[0] == ' ' || s[0] == '\n') return false;
  if (s.size() >= 2 && s[s.size() - 2] == '\n') return false;
  for (unsigned char c : s)
    if (c != '\n' && (c < 0x20 || c >= 0x7f)) return false;
  return true;
}

void write_yaml_map(std::ostream& o, const Node& m, int indent);
void write_yaml_list(std::ostream& o, const Node& l, int indent);

// Writes `v` after "key:" (or after "- " for a list item when `item`), ending the line.
void write_yaml_value(std::ostream& o, const Node& v, int indent) {
  switch (v.kind) {
    case Node::kString:
      if (literal_block_ok(v.s)) {
        o << " |\n";
        std::istringstream lines(v.s);
        for (std::string line; std::getline(lines, line);)
          o << (line.empty() ? "" : std::string(indent + 2, ' ') + line) << "\n";
      } else {
        o << " " << quote_json(v.s) << "\n";
      }
      return;
    case Node::kInt: o << " " << v.i << "\n"; return;
    case Node::kBool: o << " " << (v.b ? "true" : "false") << "\n"; return;
    case Node::kMap:
      if (v.map.empty()) {
        o << " {}\n";
        return;
      }
      o << "\n";
      write_yaml_map(o, v, indent + 2);
      return;
    case Node::kList:
      if (v.list.empty()) {
        o << " []\n";
        return;
      }
      o << "\n";
      write_yaml_list(o, v, indent + 2);
      return;
  }
}

void write_comment(std::ostream& o, const std::string& comment, int indent) {
  std::istringstream lines(comment);
  for (std::string line; std::getline(lines, line);) o << std::string(indent, ' ') << "# " << line << "\n";
}

void write_yaml_map(std::ostream& o, const Node& m, int indent) {
  for (const auto& [k, v] : m.map) {
    if (!v.comment.empty()) write_comment(o, v.comment, indent);
    o << std::string(indent, ' ') << (plain_yaml_key(k) ? k : quote_json(k)) << ":";
    write_yaml_value(o, v, indent);
  }
}

void write_yaml_list(std::ostream& o, const Node& l, int indent) {
  for (const Node& item : l.list) {
    if (item.kind == Node::kMap && !item.map.empty()) {
      std::ostringstream inner;
      write_yaml_map(inner, item, indent + 2);
      std::string text = inner.str();
      // The item's first line starts with "- " in place of two of its spaces of indentation.
      const size_t first = text.find_first_not_of(' ');
      if (!item.map.front().second.comment.empty() || first != static_cast<size_t>(indent + 2)) {
        o << std::string(indent, ' ') << "-\n" << text;
      } else {
        o << std::string(indent, ' ') << "- " << text.substr(indent + 2);
      }
    } else if (item.kind == Node::kMap || item.kind == Node::kList) {
      o << std::string(indent, ' ') << "-";
      write_yaml_value(o, item, indent);
    } else {
      o << std::string(indent, ' ') << "-";
      write_yaml_value(o, item, indent);
    }
  }
}

// ---- names -------------------------------------------------------------------------------------

// `s` lower-cased with every character outside [a-z0-9-] replaced by '-', without leading or
// trailing '-': a DNS-1123 label (length is checked by the caller).
std::string dns_label(const std::string& s) {
  std::string o;
  for (char c : s) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    o += ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9')) ? l : '-';
  }
  const size_t b = o.find_first_not_of('-');
  if (b == std::string::npos) return "";
  return o.substr(b, o.find_last_not_of('-') - b + 1);
}

bool is_dns_label(const std::string& s) { return !s.empty() && s.size() <= 63 && dns_label(s) == s; }

std::string base64(const std::string& in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::string> read_file(const std::string& path, const std::string& what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return NotFound("cannot read " + what + " '" + path + "': no such file");
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot read " + what + " '" + path + "'");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// ---- the cluster file for the pods -------------------------------------------------------------

// A TOML float that reads back as exactly `d`.
std::string toml_double(double d) {
  std::string s;
  for (int p = 1; p <= 17; ++p) {
    std::ostringstream o;
    o.imbue(std::locale::classic());
    o.precision(p);
    o << d;
    s = o.str();
    std::istringstream back(s);
    back.imbue(std::locale::classic());
    double r = 0;
    back >> r;
    if (r == d) break;
  }
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string toml_bool(bool b) { return b ? "true" : "false"; }

// "key = value" lines for the options of `s` that differ from `base` (bind and metrics_port are
// written by the caller).
std::string server_option_lines(const ServerOptions& s, const ServerOptions& base) {
  std::ostringstream o;
  if (s.log_device_placement != base.log_device_placement)
    o << "log_device_placement = " << toml_bool(s.log_device_placement) << "\n";
  if (s.allow_soft_placement != base.allow_soft_placement)
    o << "allow_soft_placement = " << toml_bool(s.allow_soft_placement) << "\n";
  if (s.mixed_bfloat16 != base.mixed_bfloat16)
    o << "mixed_precision = \"" << (s.mixed_bfloat16 ? "bfloat16" : "float32") << "\"\n";
  if (s.gpu_memory_fraction != base.gpu_memory_fraction)
    o << "gpu_memory_fraction = " << toml_double(s.gpu_memory_fraction) << "\n";
  if (s.allow_growth != base.allow_growth) o << "allow_growth = " << toml_bool(s.allow_growth) << "\n";
  if (s.visible_devices != base.visible_devices) o << "visible_devices = " << quote_json(s.visible_devices) << "\n";
  if (s.cpu_devices != base.cpu_devices) o << "cpu_devices = " << s.cpu_devices << "\n";
  if (s.connect_timeout_ms != base.connect_timeout_ms) o << "connect_timeout_ms = " << s.connect_timeout_ms << "\n";
  if (s.heartbeat_interval_ms != base.heartbeat_interval_ms)
    o << "heartbeat_interval_ms = " << s.heartbeat_interval_ms << "\n";
  if (s.peer_timeout_ms != base.peer_timeout_ms) o << "peer_timeout_ms = " << s.peer_timeout_ms << "\n";
  if (s.step_timeout_secs != base.step_timeout_secs)
    o << "step_timeout_secs = " << toml_double(s.step_timeout_secs) << "\n";
  return o.str();
}

struct JobPlan {
  std::string job;
  std::string object;               // "<name>-<job>": the Service; task i's StatefulSet is "<object>-<i>"
  int replicas = 0;
  std::vector<int> task_ports;      // per task index
  int metrics_port = kDefaultMetricsPort;
  std::string program;              // shell text run instead of `actorflow node`; "" = node
};

struct Plan {
  std::string name;       // DNS-1123 prefix of every object
  std::string ns;
  std::string image;
  bool tls = false;
  bool mount_secret = false;  // the cluster has a secret or TLS: each pod mounts its task's Secret
  bool emit_secrets = false;  // false with --no-secret: the operator creates the Secrets
  std::vector<JobPlan> jobs;
  std::map<std::string, std::string> shared_data;  // Secret key -> content every task's Secret holds
  std::map<std::string, std::map<std::string, std::string>> task_data;  // "job/i" -> its own files
  std::map<std::string, std::string> client_data;  // the tools' Secret (TLS only); no pod mounts it
  bool tools = false;                               // --tools: the tools Pod and its Secret
  std::map<std::string, std::string> tools_data;   // the tools Pod's Secret: shared_data + client cert/key
  std::string cluster_toml;
};

// Task i's StatefulSet (one pod, "<its name>-0").
std::string task_object(const JobPlan& j, int i) { return j.object + "-" + std::to_string(i); }

// The Secret task i's pod mounts.
std::string task_secret(const JobPlan& j, int i) { return task_object(j, i) + "-secret"; }

std::string pod_address(const Plan& p, const JobPlan& j, int i) {
  return task_object(j, i) + "-0." + j.object + "." + p.ns + ".svc.cluster.local:" + std::to_string(j.task_ports[i]);
}

std::string cluster_toml(const ClusterSpec& c, const Plan& p, const std::string& source) {
  std::ostringstream o;
  o << "# Generated by `actorflow k8s` from " << source << ": every task's address is the DNS name\n"
    << "# of its StatefulSet pod; relative paths are read from this file's directory (" << kConfigDir << ").\n"
    << "# secret/ is the task's own Secret <StatefulSet>-secret: only its key, never another task's.\n"
    << "[cluster]\n"
    << "name = " << quote_json(c.name()) << "\n";
  if (!c.secret_origin().empty() && !c.secret().empty())
    o << "secret_file = \"secret/" << kSecretKeyName << "\"\n";
  if (c.tls()) o << "tls_dir = \"secret\"\n";
  if (!c.metrics_token().empty()) o << "metrics_token_file = \"secret/" << kMetricsTokenKeyName << "\"\n";
  o << "\n[jobs]\n";
  for (const JobPlan& j : p.jobs) {
    o << j.job << " = [";
    for (int i = 0; i < j.replicas; ++i) o << (i ? ",\n  " : "\n  ") << quote_json(pod_address(p, j, i));
    o << ",\n]\n";
  }
  const ServerOptions base = c.server_options(TaskId{"~", -1});  // the [server] options
  bool one_metrics_port = true;
  for (const JobPlan& j : p.jobs) one_metrics_port &= j.metrics_port == p.jobs.front().metrics_port;
  o << "\n[server]\n"
    << "bind = \"0.0.0.0\"   # a pod does not own its DNS name when it binds\n"
    << server_option_lines(base, ServerOptions{});
  if (one_metrics_port) o << "metrics_port = " << p.jobs.front().metrics_port << "\n";
  for (const JobPlan& j : p.jobs) {
    for (int i = 0; i < j.replicas; ++i) {
      const std::string lines = server_option_lines(c.server_options(TaskId{j.job, i}), base);
      if (lines.empty() && one_metrics_port) continue;
      o << "\n[tasks." << quote_json(j.job + "/" + std::to_string(i)) << "]\n" << lines;
      if (!one_metrics_port) o << "metrics_port = " << j.metrics_port << "\n";
    }
  }
  const SupervisorOptions& s = c.supervisor();
  const SupervisorOptions d;
  o << "\n[supervisor]\nchief = " << quote_json(s.chief.to_string()) << "\n";
  if (s.logdir != d.logdir) o << "logdir = " << quote_json(s.logdir) << "\n";
  if (s.save_checkpoint_secs != d.save_checkpoint_secs)
    o << "save_checkpoint_secs = " << toml_double(s.save_checkpoint_secs) << "\n";
  if (s.keep_checkpoints != d.keep_checkpoints) o << "keep_checkpoints = " << s.keep_checkpoints << "\n";
  if (s.tensorflow_checkpoints) o << "checkpoint_format = \"tensorflow\"\n";
  if (s.max_restarts != d.max_restarts) o << "max_restarts = " << s.max_restarts << "\n";
  if (s.restart_window_secs != d.restart_window_secs)
    o << "restart_window_secs = " << toml_double(s.restart_window_secs) << "\n";
  if (s.ready_timeout_secs != d.ready_timeout_secs)
    o << "ready_timeout_secs = " << toml_double(s.ready_timeout_secs) << "\n";
  if (s.save_summaries_secs != d.save_summaries_secs)
    o << "save_summaries_secs = " << toml_double(s.save_summaries_secs) << "\n";
  return o.str();
}

// Checks the cluster against what StatefulSets can run and fills everything but the objects.
Result<Plan> make_plan(const ClusterSpec& c, const K8sOptions& o) {
  Plan p;
  p.ns = o.ns;
  p.image = o.image;
  p.tls = c.tls();
  p.mount_secret = c.tls() || !c.secret().empty();
  if (!p.mount_secret)
    return InvalidArgument("the cluster has neither a secret nor TLS, and the pods' addresses are not loopback: "
                           "set [cluster] secret_file, or tls_dir (see `actorflow certs` and docs/kubernetes.md)");
  if (!is_dns_label(p.ns))
    return InvalidArgument("--namespace '" + p.ns + "' is not a DNS-1123 label (lower-case letters, digits and '-')");
  p.name = c.name() == "default" ? "actorflow" : dns_label(c.name());
  if (p.name.empty()) p.name = "actorflow";
  std::map<std::string, std::string> programs;  // job -> shell text
  for (const std::string& spec : o.programs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return InvalidArgument("--program '" + spec + "': expected JOB=COMMAND, e.g. worker=distributed_cnn");
    const std::string job = spec.substr(0, eq);
    if (c.num_tasks(job) == 0) return InvalidArgument("--program '" + spec + "': the cluster has no job '" + job + "'");
    programs[job] = spec.substr(eq + 1);
  }
  std::set<std::string> objects;
  for (const std::string& job : c.jobs()) {
    JobPlan j;
    j.job = job;
    j.object = p.name + "-" + dns_label(job);
    if (dns_label(job).empty())
      return InvalidArgument("job '" + job + "' has no letter or digit for its Kubernetes names: rename it");
    if (!objects.insert(j.object).second)
      return InvalidArgument("jobs '" + job + "' and another job both become the object name '" + j.object +
                             "': rename one (names are lower-cased, '_' becomes '-')");
    const std::vector<int> idx = c.task_indices(job);
    for (size_t k = 0; k < idx.size(); ++k)
      if (idx[k] != static_cast<int>(k))
        return InvalidArgument("job '" + job + "' has no task " + std::to_string(k) +
                               ": the generated cluster file lists a job's tasks 0..N-1, so number them so");
    j.replicas = static_cast<int>(idx.size());
    // Task i's StatefulSet "<object>-<i>" has the pod "<object>-<i>-0", and Kubernetes adds a
    // controller-revision-hash label "<StatefulSet>-<hash of up to 10>", which must stay within 63
    // characters: StatefulSet names of at most 52 are safe (the pod name, a DNS label, then is too).
    const std::string longest = task_object(j, j.replicas - 1);
    if (longest.size() > 52)
      return InvalidArgument("the StatefulSet name '" + longest + "' of task " + job + "/" +
                             std::to_string(j.replicas - 1) + " is " + std::to_string(longest.size()) +
                             " characters, more than 52 (its pod's DNS label and revision label must stay within "
                             "63): shorten [cluster] name or the job name");
    int metrics = -1;
    std::string metrics_task;
    for (int i : idx) {
      auto addr = c.task_address(TaskId{job, i});
      auto hp = addr.ok() ? parse_address(*addr) : Result<std::pair<std::string, int>>(addr.status());
      if (!hp.ok()) return hp.status();
      j.task_ports.push_back(hp->second);
      const int m = c.server_options(TaskId{job, i}).metrics_port;
      if (metrics >= 0 && m != metrics)
        return InvalidArgument("tasks " + metrics_task + " and " + job + "/" + std::to_string(i) +
                               " have different metrics ports (" + std::to_string(metrics) + " and " +
                               std::to_string(m) +
                               "): the pods of a job share one spec, so set one metrics_port per job "
                               "(in [server], or the same in every [tasks.\"" + job + "/N\"])");
      metrics = m;
      metrics_task = job + "/" + std::to_string(i);
    }
    j.metrics_port = metrics > 0 ? metrics : kDefaultMetricsPort;
    for (int port : j.task_ports)
      if (port == j.metrics_port)
        return InvalidArgument("job '" + job + "' uses port " + std::to_string(port) +
                               " for a task and for metrics: set another [server] metrics_port");
    if (programs.count(job)) j.program = programs[job];
    p.jobs.push_back(std::move(j));
  }
  p.emit_secrets = !o.no_secret;
  if (p.emit_secrets) {
    if (!c.secret().empty() && !c.secret_origin().empty() && c.secret_origin() != kSecretEnvVar) {
      AF_ASSIGN_OR_RETURN(p.shared_data[kSecretKeyName], read_file(c.secret_origin(), "secret file"));
    } else if (!c.secret().empty()) {
      p.shared_data[kSecretKeyName] = c.secret();  // from ACTORFLOW_SECRET: the pods get it as a file
    }
    if (!c.metrics_token().empty()) p.shared_data[kMetricsTokenKeyName] = c.metrics_token();
    if (c.tls()) {
      auto tls_file = [&](const std::string& file) {
        return read_file(c.tls_dir() + "/" + file, "TLS file (from `actorflow certs`)");
      };
      // The CA key stays offline, the operator's certificate with the operator: neither is emitted.
      AF_ASSIGN_OR_RETURN(p.shared_data["ca.crt"], tls_file("ca.crt"));
      for (const TaskId& t : c.all_tasks()) {
        std::map<std::string, std::string>& own = p.task_data[t.to_string()];
        const std::string stem = net::cert_file_stem(t.to_string());
        for (const char* ext : {".crt", ".key"}) {
          AF_ASSIGN_OR_RETURN(own[stem + ext], tls_file(stem + ext));
        }
      }
      p.client_data["ca.crt"] = p.shared_data["ca.crt"];
      for (const char* file : {"client.crt", "client.key"}) {
        AF_ASSIGN_OR_RETURN(p.client_data[file], tls_file(file));
      }
    }
  }
  p.tools = o.tools;
  if (p.tools && p.emit_secrets) {
    // What the cluster file names for a tool (the secret file, the scrape token, ca.crt) and the
    // tools' own certificate; no task's key.
    p.tools_data = p.shared_data;
    for (const auto& [k, v] : p.client_data) p.tools_data[k] = v;
  }
  p.cluster_toml = cluster_toml(c, p, o.cluster);
  return p;
}

// ---- the objects -------------------------------------------------------------------------------

Node metadata(const Plan& p, const std::string& name, std::vector<std::pair<std::string, Node>> labels) {
  std::vector<std::pair<std::string, Node>> m = {{"name", str(name)}, {"namespace", str(p.ns)}};
  if (!labels.empty()) m.push_back({"labels", map(std::move(labels))});
  return map(std::move(m));
}

std::vector<std::pair<std::string, Node>> job_labels(const Plan& p, const JobPlan& j) {
  return {{"app.kubernetes.io/name", str(p.name)}, {"actorflow/job", str(j.job)}};
}

// The labels of task i's pod: its job's (the Service selects them) and its index (its
// StatefulSet selects that one pod).
std::vector<std::pair<std::string, Node>> task_labels(const Plan& p, const JobPlan& j, int i) {
  auto labels = job_labels(p, j);
  labels.push_back({"actorflow/task", str(std::to_string(i))});
  return labels;
}

Node secret_object(const Plan& p, const std::string& name, const std::map<std::string, std::string>& files,
                   const std::string& comment) {
  std::vector<std::pair<std::string, Node>> data;
  for (const auto& [k, v] : files) data.push_back({k, str(base64(v))});
  return map({{"apiVersion", str("v1")},
              {"kind", commented(str("Secret"), comment)},
              {"metadata", metadata(p, name, {{"app.kubernetes.io/name", str(p.name)}})},
              {"type", str("Opaque")},
              {"data", map(std::move(data))}});
}

std::vector<Node> port_list(const JobPlan& j, bool container) {
  std::vector<Node> ports;
  std::set<int> seen;
  for (int port : j.task_ports) {
    if (!seen.insert(port).second) continue;
    const std::string name = seen.size() == 1 ? "task" : "task-" + std::to_string(seen.size() - 1);
    if (container)
      ports.push_back(map({{"name", str(name)}, {"containerPort", num(port)}, {"protocol", str("TCP")}}));
    else
      ports.push_back(map({{"name", str(name)}, {"port", num(port)}, {"targetPort", num(port)},
                           {"protocol", str("TCP")}}));
  }
  if (container)
    ports.push_back(map({{"name", str("metrics")}, {"containerPort", num(j.metrics_port)}, {"protocol", str("TCP")}}));
  else
    ports.push_back(map({{"name", str("metrics")}, {"port", num(j.metrics_port)}, {"targetPort", num(j.metrics_port)},
                         {"protocol", str("TCP")}}));
  return ports;
}

// A probe's timeout in seconds (see probe()).
constexpr int kProbeTimeoutSeconds = 5;

Node probe(bool tls, int period, int failures) {
  Node check = tls ? map({{"tcpSocket", map({{"port", str("metrics")}})}})
                   : map({{"httpGet", map({{"path", str("/healthz")}, {"port", str("metrics")},
                                           {"scheme", str("HTTP")}})}});
  check.map.push_back({"periodSeconds", num(period)});
  // The bound SecurityHealthTest holds the metrics port to while a stranger keeps 1 000 idle and
  // slow connections open on it (docs/security.md, "Health that survives").
  check.map.push_back({"timeoutSeconds", commented(num(kProbeTimeoutSeconds),
                                                   "the endpoint answers within this whatever strangers hold open")});
  check.map.push_back({"failureThreshold", num(failures)});
  if (tls)
    check.map.front().second.comment =
        "With TLS the metrics port asks every client for a certificate of the cluster's CA, which\n"
        "the kubelet cannot present: the probe checks that the port accepts connections.";
  return check;
}

Node service(const Plan& p, const JobPlan& j) {
  return map({{"apiVersion", str("v1")},
              {"kind", str("Service")},
              {"metadata", metadata(p, j.object, job_labels(p, j))},
              {"spec", map({{"clusterIP", commented(str("None"), "headless: one DNS name per pod")},
                            {"publishNotReadyAddresses",
                             commented(boolean(true), "peers must find each other before they are ready")},
                            {"selector", map(job_labels(p, j))},
                            {"ports", list(port_list(j, false))}})}});
}

// Task i's StatefulSet: one pod, which mounts the task's own Secret and no other.
Node stateful_set(const Plan& p, const JobPlan& j, int i) {
  const bool has_secret = p.mount_secret;
  const std::string cluster_flags =
      "--cluster " + std::string(kConfigDir) + "/cluster.toml --job " + j.job + " --task " + std::to_string(i);
  // A program that finishes its work (exit 0) then idles, so the StatefulSet does not start the
  // training again; a failure exits and the container is restarted.
  const std::string shell = j.program.empty() ? "exec actorflow node " + cluster_flags
                                              : j.program + " " + cluster_flags + " && exec sleep infinity";
  std::vector<Node> mounts = {map({{"name", str("cluster")},
                                   {"mountPath", str(std::string(kConfigDir) + "/cluster.toml")},
                                   {"subPath", str("cluster.toml")},
                                   {"readOnly", boolean(true)}})};
  std::vector<Node> volumes = {map({{"name", str("cluster")},
                                    {"configMap", map({{"name", str(p.name + "-cluster")}})}})};
  if (has_secret) {
    mounts.push_back(map({{"name", str("secret")}, {"mountPath", str(kSecretDir)}, {"readOnly", boolean(true)}}));
    volumes.push_back(map({{"name", str("secret")},
                           {"secret", map({{"secretName", str(task_secret(j, i))},
                                           {"defaultMode", commented(num(0400), "0400: keys must not be group/other readable")}})}}));
  }
  const bool ps = j.job == "ps";
  std::vector<std::pair<std::string, Node>> container = {
      {"name", str("actorflow")},
      {"image", str(p.image)},
      {"command", list({str("/bin/sh"), str("-c"), str(shell)})},
      {"ports", list(port_list(j, true))},
      {"volumeMounts", list(mounts)},
      {"readinessProbe", probe(p.tls, 5, 3)}};
  // A program's exit already restarts the container, and after a finished run it idles with the
  // port closed: liveness applies to `actorflow node` only.
  if (j.program.empty()) container.push_back({"livenessProbe", probe(p.tls, 10, 6)});
  container.push_back({"resources", commented(map({{"requests", map({{"cpu", str(ps ? "1" : "2")},
                                                                     {"memory", str(ps ? "1Gi" : "2Gi")}})}}),
                                              "requests only: no limits, a task may use idle CPUs")});
  Node pod_spec = map({{"restartPolicy", commented(str("Always"), "the pod template default (the only policy a "
                                                                  "StatefulSet allows): a failed task restarts")},
                       {"containers", list({map(container)})},
                       {"volumes", list(volumes)}});
  return map({{"apiVersion", str("apps/v1")},
              {"kind", str("StatefulSet")},
              {"metadata", metadata(p, task_object(j, i), task_labels(p, j, i))},
              {"spec", map({{"serviceName", commented(str(j.object), "the job's headless Service: the pod's DNS name")},
                            {"replicas", commented(num(1), "one task per StatefulSet: its pod mounts only that "
                                                           "task's key")},
                            {"podManagementPolicy", str("Parallel")},
                            {"selector", map({{"matchLabels", map(task_labels(p, j, i))}})},
                            {"template", map({{"metadata", map({{"labels", map(task_labels(p, j, i))}})},
                                              {"spec", pod_spec}})}})}});
}

// The tools Pod: idles so that `kubectl exec <name>-tools -- actorflow status ...` runs a tool with
// the tools' certificate (a task's pod holds only its task's key, which cannot speak as a tool).
// It mounts the cluster file and the Secret <name>-tools, never a task's Secret.
Node tools_pod(const Plan& p) {
  const std::string name = p.name + "-tools";
  std::vector<Node> mounts = {map({{"name", str("cluster")},
                                   {"mountPath", str(std::string(kConfigDir) + "/cluster.toml")},
                                   {"subPath", str("cluster.toml")},
                                   {"readOnly", boolean(true)}}),
                              map({{"name", str("secret")}, {"mountPath", str(kSecretDir)}, {"readOnly", boolean(true)}})};
  std::vector<Node> volumes = {
      map({{"name", str("cluster")}, {"configMap", map({{"name", str(p.name + "-cluster")}})}}),
      map({{"name", str("secret")},
           {"secret", map({{"secretName", commented(str(name), "the tools' key, no task's")},
                           {"defaultMode", commented(num(0400), "0400: keys must not be group/other readable")}})}})};
  std::vector<std::pair<std::string, Node>> container = {
      {"name", str("tools")},
      {"image", str(p.image)},
      {"command", commented(list({str("/bin/sh"), str("-c"), str("exec sleep infinity")}),
                            "kubectl exec " + name + " -- actorflow status --cluster " + kConfigDir +
                                "/cluster.toml")},
      {"volumeMounts", list(mounts)},
      {"resources", map({{"requests", map({{"cpu", str("100m")}, {"memory", str("128Mi")}})}})}};
  Node pod_spec = map({{"restartPolicy", str("Always")},
                       {"containers", list({map(container)})},
                       {"volumes", list(volumes)}});
  return map({{"apiVersion", str("v1")},
              {"kind", str("Pod")},
              {"metadata", metadata(p, name, {{"app.kubernetes.io/name", str(p.name)},
                                              {"app.kubernetes.io/component", str("tools")}})},
              {"spec", pod_spec}});
}

}  // namespace

int run_k8s(const K8sOptions& o) {
  auto fail = [](const Status& st) {
    std::cerr << "actorflow k8s: " << st.message() << "\n";
    return 2;
  };
  if (o.image.empty()) return fail(InvalidArgument("--image IMAGE is required (build one from deploy/Dockerfile)"));
  if (o.format != "yaml" && o.format != "json")
    return fail(InvalidArgument("--format '" + o.format + "': expected yaml or json"));
  auto cluster = load_cluster(o.cluster);
  if (!cluster.ok()) return fail(cluster.status());
  auto plan = make_plan(*cluster, o);
  if (!plan.ok()) return fail(plan.status());

  std::vector<std::pair<std::string, Node>> docs;  // file stem, object
  docs.push_back({"configmap", map({{"apiVersion", str("v1")},
                                    {"kind", str("ConfigMap")},
                                    {"metadata", metadata(*plan, plan->name + "-cluster", {{"app.kubernetes.io/name", str(plan->name)}})},
                                    {"data", map({{"cluster.toml", str(plan->cluster_toml)}})}})});
  if (plan->emit_secrets) {
    for (const JobPlan& j : plan->jobs)
      for (int i = 0; i < j.replicas; ++i) {
        std::map<std::string, std::string> files = plan->shared_data;
        for (const auto& [k, v] : plan->task_data[j.job + "/" + std::to_string(i)]) files[k] = v;
        docs.push_back({"secret-" + dns_label(j.job) + "-" + std::to_string(i),
                        secret_object(*plan, task_secret(j, i), files,
                                      "Mounted by task " + j.job + "/" + std::to_string(i) +
                                          "'s pod only: its own key, never another task's")});
      }
    if (!plan->client_data.empty())
      docs.push_back({"secret-client",
                      secret_object(*plan, plan->name + "-client", plan->client_data,
                                    "The tools' certificate (actorflow status, Prometheus): no pod of the\n"
                                    "cluster mounts it; mount it only where a tool runs")});
    if (plan->tools)
      docs.push_back({"secret-tools",
                      secret_object(*plan, plan->name + "-tools", plan->tools_data,
                                    "Mounted by the tools Pod " + plan->name + "-tools only: the tools' key\n"
                                    "(with TLS) and what the cluster file names; no task's key")});
  }
  for (const JobPlan& j : plan->jobs) {
    docs.push_back({"service-" + dns_label(j.job), service(*plan, j)});
    for (int i = 0; i < j.replicas; ++i)
      docs.push_back({"statefulset-" + dns_label(j.job) + "-" + std::to_string(i), stateful_set(*plan, j, i)});
  }
  if (plan->tools) docs.push_back({"pod-tools", tools_pod(*plan)});

  // JSON: one v1 List on stdout, the object itself in a file of --out.
  auto render = [&](const std::vector<std::pair<std::string, Node>>& ds) {
    std::ostringstream out;
    if (o.format == "json" && ds.size() == 1 && !o.out.empty()) {
      write_json(out, ds.front().second, 0);
      out << "\n";
    } else if (o.format == "json") {
      std::vector<Node> items;
      for (const auto& d : ds) items.push_back(d.second);
      write_json(out, map({{"apiVersion", str("v1")}, {"kind", str("List")}, {"items", list(items)}}), 0);
      out << "\n";
    } else {
      for (const auto& d : ds) {
        out << "---\n";
        write_yaml_map(out, d.second, 0);
      }
    }
    return out.str();
  };
  if (o.out.empty()) {
    std::cout << "# Generated by `actorflow k8s --cluster " << o.cluster << "` for namespace " << plan->ns
              << ": kubectl apply -f -\n"
              << render(docs) << std::flush;
    return 0;
  }
  if (::mkdir(o.out.c_str(), 0700) != 0 && errno != EEXIST) {
    std::cerr << "actorflow k8s: cannot create '" << o.out << "': " << std::strerror(errno) << "\n";
    return 1;
  }
  const std::string ext = o.format == "json" ? ".json" : ".yaml";
  struct OutFile {
    std::string path, content;
    bool secret = false;
  };
  std::vector<OutFile> files;
  // Numbered so that the names sort in the documents' order, however many tasks there are.
  const int digits = std::max<int>(2, static_cast<int>(std::to_string(docs.size() - 1).size()));
  for (size_t k = 0; k < docs.size(); ++k) {
    std::string prefix = std::to_string(k);
    prefix = std::string(std::max<int>(0, digits - static_cast<int>(prefix.size())), '0') + prefix + "-";
    const Node* kind = nullptr;
    for (const auto& [key, v] : docs[k].second.map)
      if (key == "kind") kind = &v;
    files.push_back({o.out + "/" + prefix + docs[k].first + ext, render({docs[k]}), kind && kind->s == "Secret"});
  }
  files.push_back({o.out + "/cluster.toml", plan->cluster_toml, false});
  for (const auto& [path, content, secret] : files) {
    // A Secret's file is mode 0600 from its creation on (no moment in which another user may
    // open it, never chmod-ed): written through a temporary file and renamed into place.
    if (secret) {
      if (Status s = write_private_file(path, content); !s.ok()) {
        std::cerr << "actorflow k8s: " << s.message() << "\n";
        return 1;
      }
      continue;
    }
    net::Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
    bool ok = fd.valid();
    for (size_t off = 0; ok && off < content.size();) {
      const ssize_t w = ::write(fd.get(), content.data() + off, content.size() - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) ok = false;
      else off += static_cast<size_t>(w);
    }
    if (!ok || ::close(fd.release()) != 0) {
      std::cerr << "actorflow k8s: cannot write '" << path << "': " << std::strerror(errno) << "\n";
      return 1;
    }
  }
  std::cerr << "wrote " << docs.size() << " objects for namespace " << plan->ns << " to " << o.out << "/:\n";
  for (const auto& f : files) std::cerr << "  " << f.path << "\n";
  std::cerr << "build the image " << o.image << " with: docker build -f deploy/Dockerfile -t " << o.image << " .\n"
            << "then: kubectl apply -f " << o.out << "/   (see docs/kubernetes.md)" << std::endl;
  return 0;
}

}  // namespace cli
}  // namespace actorflow
