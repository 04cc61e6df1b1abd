#include "config/tf_cluster.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/file_read.h"

namespace actorflow {
namespace {

constexpr uint64_t kMaxJsonBytes = 1 << 20;

Result<std::vector<std::string>> split_hosts(const std::string& list, const std::string& flag) {
  std::vector<std::string> out;
  if (list.empty()) return out;
  size_t start = 0;
  for (;;) {
    const size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty())
      return InvalidArgument(flag + ": empty entry at position " + std::to_string(out.size()) + " in '" + list + "'");
    out.push_back(std::move(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

Result<TfClusterConfig> cluster_from_tf_config(const std::string& json_text, const std::string& source) {
  using nlohmann::json;
  json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument(source + ": not valid JSON");
  if (!doc.is_object()) return InvalidArgument(source + ": expected a JSON object with \"cluster\"");
  auto cl = doc.find("cluster");
  if (cl == doc.end() || !cl->is_object() || cl->empty())
    return InvalidArgument(source + ": \"cluster\" must be an object of jobs, e.g. {\"worker\": [\"host:port\"]}");
  std::map<std::string, std::vector<std::string>> jobs;
  for (auto it = cl->begin(); it != cl->end(); ++it) {
    const std::string where = source + ": cluster." + it.key();
    if (!it.value().is_array()) return InvalidArgument(where + ": expected a list of \"host:port\" strings");
    std::vector<std::string>& addrs = jobs[it.key()];
    for (size_t i = 0; i < it.value().size(); ++i) {
      const json& a = it.value()[i];
      if (!a.is_string())
        return InvalidArgument(where + "[" + std::to_string(i) + "]: expected a \"host:port\" string");
      addrs.push_back(a.get<std::string>());
    }
  }
  for (auto it = doc.begin(); it != doc.end(); ++it)
    if (it.key() != "cluster" && it.key() != "task" && it.key() != "environment")
      return InvalidArgument(source + ": unknown key \"" + it.key() + "\" (known: cluster, task, environment)");
  auto spec = ClusterSpec::from_jobs(jobs);
  if (!spec.ok()) return spec.status().with_prefix(source);
  TfClusterConfig out{std::move(*spec), std::nullopt};
  auto task = doc.find("task");
  if (task != doc.end()) {
    if (!task->is_object()) return InvalidArgument(source + ": \"task\" must be an object {\"type\": job, \"index\": i}");
    auto type = task->find("type");
    auto index = task->find("index");
    if (type == task->end() || !type->is_string())
      return InvalidArgument(source + ": task.type: expected a job name string");
    if (index == task->end() || !index->is_number_integer() || index->get<int64_t>() < 0 ||
        index->get<int64_t>() > 1000000)
      return InvalidArgument(source + ": task.index: expected a non-negative integer");
    TaskId t{type->get<std::string>(), static_cast<int>(index->get<int64_t>())};
    Status valid = out.cluster.validate_task(t);
    if (!valid.ok()) return valid.with_prefix(source + ": task");
    out.task = t;
  }
  return out;
}

Result<TfClusterConfig> cluster_from_tf_config_file(const std::string& path) {
  AF_ASSIGN_OR_RETURN(std::string text, read_regular_file(path, kMaxJsonBytes, "cluster JSON"));
  return cluster_from_tf_config(text, path);
}

Result<ClusterSpec> cluster_from_host_flags(const std::string& ps_hosts, const std::string& worker_hosts) {
  if (ps_hosts.empty() && worker_hosts.empty())
    return InvalidArgument("--ps_hosts and --worker_hosts are both empty: name at least one task");
  std::map<std::string, std::vector<std::string>> jobs;
  AF_ASSIGN_OR_RETURN(auto ps, split_hosts(ps_hosts, "--ps_hosts"));
  AF_ASSIGN_OR_RETURN(auto workers, split_hosts(worker_hosts, "--worker_hosts"));
  if (!ps.empty()) jobs["ps"] = std::move(ps);
  if (!workers.empty()) jobs["worker"] = std::move(workers);
  return ClusterSpec::from_jobs(jobs);
}

Result<TfClusterConfig> cluster_from_any_file(const std::string& path) {
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0) return cluster_from_tf_config_file(path);
  AF_ASSIGN_OR_RETURN(ClusterSpec spec, ClusterSpec::from_file(path));
  TfClusterConfig out;
  out.cluster = std::move(spec);
  return out;
}

Result<ClusterTask> cluster_task_from_args(const std::vector<std::string>& args, const std::string& tf_config) {
  static const std::vector<std::string> kFlags = {"--cluster", "--job",      "--task",       "--job_name",
                                                  "--task_index", "--ps_hosts", "--worker_hosts"};
  std::map<std::string, std::string> given;
  ClusterTask out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string flag = a, value;
    bool inline_value = false;
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
      inline_value = true;
    }
    if (std::find(kFlags.begin(), kFlags.end(), flag) == kFlags.end()) {
      out.rest.push_back(a);
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) return InvalidArgument(flag + " needs a value");
      value = args[++i];
    }
    std::string key = flag == "--job_name" ? "--job" : flag == "--task_index" ? "--task" : flag;
    if (given.count(key) && given[key] != value)
      return InvalidArgument(flag + " given twice with different values ('" + given[key] + "', '" + value + "')");
    given[key] = value;
  }
  const bool host_flags = given.count("--ps_hosts") || given.count("--worker_hosts");
  if (host_flags && given.count("--cluster"))
    return InvalidArgument("give either --cluster or --ps_hosts/--worker_hosts, not both");
  std::optional<TaskId> from_file;
  if (host_flags) {
    AF_ASSIGN_OR_RETURN(out.cluster, cluster_from_host_flags(given["--ps_hosts"], given["--worker_hosts"]));
  } else if (given.count("--cluster")) {
    AF_ASSIGN_OR_RETURN(TfClusterConfig c, cluster_from_any_file(given["--cluster"]));
    out.cluster = std::move(c.cluster);
    from_file = c.task;
  } else if (!tf_config.empty()) {
    AF_ASSIGN_OR_RETURN(TfClusterConfig c, cluster_from_tf_config(tf_config, "TF_CONFIG"));
    out.cluster = std::move(c.cluster);
    from_file = c.task;
  } else {
    return InvalidArgument("no cluster: give --cluster FILE, --ps_hosts/--worker_hosts, or TF_CONFIG");
  }
  if (given.count("--job") != given.count("--task"))
    return InvalidArgument(given.count("--job") ? "--job needs --task (or --task_index)" : "--task needs --job (or --job_name)");
  if (given.count("--job")) {
    const std::string& t = given["--task"];
    if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos)
      return InvalidArgument("--task '" + t + "' is not a task index (0, 1, ...)");
    out.task = TaskId{given["--job"], std::atoi(t.c_str())};
  } else if (from_file) {
    out.task = *from_file;
  } else {
    return InvalidArgument("which task is this? give --job and --task (or --job_name and --task_index)");
  }
  AF_RETURN_IF_ERROR(out.cluster.validate_task(out.task));
  return out;
}

Result<ClusterTask> cluster_task_from_args(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  const char* tf = std::getenv("TF_CONFIG");
  return cluster_task_from_args(args, tf ? tf : "");
}

}  // namespace actorflow
