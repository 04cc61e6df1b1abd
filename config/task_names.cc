#include "config/task_names.h"

#include "config/task_id.h"

namespace actorflow {

std::string task_of_device(const std::string& device_name) {
  auto d = device_name.find("/device:");
  return d == std::string::npos ? device_name : device_name.substr(0, d);
}

std::string short_task_name(const std::string& task_prefix) {
  auto t = TaskId::parse(task_of_device(task_prefix));
  return t.ok() ? t->to_string() : task_prefix;
}

Result<std::string> canonical_task(const std::string& name) {
  AF_ASSIGN_OR_RETURN(TaskId t, TaskId::parse(name));
  return t.device_prefix();
}

std::string normalise_task_name(const std::string& name) {
  if (name.empty()) return name;
  if (name.rfind("/job:", 0) == 0 && name.find("/replica:") != std::string::npos) return task_of_device(name);
  auto c = canonical_task(task_of_device(name));
  return c.ok() ? *c : name;
}

bool is_global_step_name(const std::string& name) {
  std::string n = name;
  if (n.size() > 2 && n.compare(n.size() - 2, 2, ":0") == 0) n.resize(n.size() - 2);
  const std::string gs = "global_step";
  if (n == gs) return true;
  return n.size() > gs.size() && n.compare(n.size() - gs.size(), gs.size(), gs) == 0 && n[n.size() - gs.size() - 1] == '/';
}

}  // namespace actorflow
