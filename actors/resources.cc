#include "actors/resources.h"

namespace actorflow {

ResourceManager::~ResourceManager() { close(); }

Result<variable_actor_t> ResourceManager::get_or_create(const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  if (closed_) return Cancelled("resource '" + name + "': the task is shutting down (its resource container is closed)");
  auto it = actors_.find(name);
  if (it != actors_.end()) return it->second;
  if (!factory_) return FailedPrecondition("no resource container on this task for '" + name + "'");
  variable_actor_t a = factory_(sys_, name);
  actors_[name] = a;
  return a;
}

Result<variable_actor_t> ResourceManager::get_for_kernel(const std::string& name) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!closed_ && kernel_gate_ && !actors_.count(name)) {
      Status gate = kernel_gate_(name);
      if (!gate.ok()) return gate;
    }
  }
  return get_or_create(name);
}

void ResourceManager::set_kernel_gate(std::function<Status(const std::string&)> gate) {
  std::lock_guard<std::mutex> l(mu_);
  kernel_gate_ = std::move(gate);
}

variable_actor_t ResourceManager::find(const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = actors_.find(name);
  return it == actors_.end() ? variable_actor_t() : it->second;
}

std::map<std::string, variable_actor_t> ResourceManager::all() const {
  std::lock_guard<std::mutex> l(mu_);
  return actors_;
}

void ResourceManager::clear() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [n, a] : actors_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  actors_.clear();
}

void ResourceManager::close() {
  std::lock_guard<std::mutex> l(mu_);
  closed_ = true;
  for (auto& [n, a] : actors_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  actors_.clear();
}

bool ResourceManager::closed() const {
  std::lock_guard<std::mutex> l(mu_);
  return closed_;
}

}  // namespace actorflow
