#include "actors/resources.h"

namespace actorflow {

ResourceManager::~ResourceManager() { close(); }

Result<Resource> ResourceManager::locked_get_or_create(const std::string& name) {
  if (closed_) return Cancelled("resource '" + name + "': the task is shutting down (its resource container is closed)");
  auto it = resources_.find(name);
  if (it != resources_.end()) return it->second;
  if (!factory_) return FailedPrecondition("no resource container on this task for '" + name + "'");
  Resource r = factory_(sys_, name);
  resources_[name] = r;
  return r;
}

Result<variable_actor_t> ResourceManager::get_or_create(const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  auto r = locked_get_or_create(name);
  if (!r.ok()) return r.status();
  return r->actor;
}

Result<Resource> ResourceManager::get_for_kernel(const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  if (!closed_ && kernel_gate_ && !resources_.count(name)) {
    Status gate = kernel_gate_(name);
    if (!gate.ok()) return gate;
  }
  return locked_get_or_create(name);
}

void ResourceManager::set_kernel_gate(std::function<Status(const std::string&)> gate) {
  std::lock_guard<std::mutex> l(mu_);
  kernel_gate_ = std::move(gate);
}

variable_actor_t ResourceManager::find(const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = resources_.find(name);
  return it == resources_.end() ? variable_actor_t() : it->second.actor;
}

std::map<std::string, variable_actor_t> ResourceManager::all() const {
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, variable_actor_t> out;
  for (const auto& [n, r] : resources_) out.emplace(n, r.actor);
  return out;
}

void ResourceManager::clear() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [n, r] : resources_) caf::anon_send_exit(r.actor, caf::exit_reason::user_shutdown);
  resources_.clear();
}

void ResourceManager::close() {
  std::lock_guard<std::mutex> l(mu_);
  closed_ = true;
  for (auto& [n, r] : resources_) caf::anon_send_exit(r.actor, caf::exit_reason::user_shutdown);
  resources_.clear();
}

bool ResourceManager::closed() const {
  std::lock_guard<std::mutex> l(mu_);
  return closed_;
}

}  // namespace actorflow
