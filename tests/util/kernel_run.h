// Running single kernels by hand in tests: a real variable actor per variable name behind the
// ResourceEnv interface (ActorResources), and run_node(), which runs one node's kernel on a
// device with host inputs and returns host outputs. Used by tests/gpu_backend_ops_test.cc and
// tests/device_variables_test.cc. Single-threaded use (the test's thread).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/messages.h"
#include "actors/resources.h"
#include "actors/variable_actor.h"
#include "actorflow/embedding.h"
#include "device/device.h"
#include "device/executor.h"
#include "device/kernel.h"

namespace actorflow {
namespace testing {

// An actor system with actorflow's types (Server::configure), for variable actors.
struct TestActorSystem {
  TestActorSystem() : sys(configured(cfg)) {}
  static caf::actor_system_config& configured(caf::actor_system_config& c) {
    Server::configure(c);
    return c;
  }
  caf::actor_system_config cfg;
  caf::actor_system sys;
};

// The task's variables for kernels run by hand: a variable actor per name, spawned on first use
// and stopped with this object. call() waits for the actor's answer; the kernel gets it from
// drain(), after call() returned, as the ResourceEnv contract asks.
class ActorResources final : public ResourceEnv {
 public:
  explicit ActorResources(caf::actor_system& sys) : sys_(sys), self_(sys) {}
  ~ActorResources() override {
    for (auto& [n, a] : actors_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
  void call(ResourceCall call, ResourceDone done) override {
    auto& a = actors_[call.resource];
    if (!a) a = spawn_variable_actor(sys_, call.resource);
    Result<std::vector<Tensor>> r = Internal("no reply from variable '" + call.resource + "'");
    self_->request(a, std::chrono::seconds(60), resource_atom::value,
                   ResourceCallPtr(std::make_shared<ResourceCall>(std::move(call))))
        .receive([&](std::vector<Tensor>& out) { r = std::move(out); },
                 [&](caf::error& e) { r = from_caf_error(e, "variable"); });
    pending_.emplace_back(std::move(done), std::move(r));
  }
  // Hands the answers of the calls made so far to their kernels.
  void drain() {
    auto p = std::move(pending_);
    pending_.clear();
    for (auto& [done, r] : p) done(std::move(r));
  }

 private:
  caf::actor_system& sys_;
  caf::scoped_actor self_;
  std::map<std::string, variable_actor_t> actors_;
  std::vector<std::pair<ResourceDone, Result<std::vector<Tensor>>>> pending_;
};

// Runs `node`'s kernel (the registry's for `kernel_type`, by default the device's type) once on
// `dev` with `host_in` copied to the device; returns the outputs as the kernel left them
// (`to_host` false) or copied to the host. `res` serves variable ops (null: none).
inline Result<std::vector<Tensor>> run_node(const Node& node, Device* dev, const std::vector<Tensor>& host_in,
                                            ActorResources* res, bool to_host = true,
                                            const std::string& kernel_type = "") {
  AF_ASSIGN_OR_RETURN(auto kernel,
                      KernelRegistry::global().create(node, kernel_type.empty() ? dev->type() : kernel_type));
  std::vector<Tensor> in;
  for (const Tensor& t : host_in) {
    AF_ASSIGN_OR_RETURN(Tensor d, dev->copy_from_host(t));
    in.push_back(d);
  }
  auto ctx = std::make_shared<OpKernelContext>(node, dev, in, 1, res);
  if (auto* async = dynamic_cast<AsyncOpKernel*>(kernel.get())) {
    if (!res) return FailedPrecondition("an asynchronous kernel needs the variable resources");
    Status st = Internal("the kernel never finished");
    async->compute_async(ctx, [&st](Status s) { st = s; });
    res->drain();
    AF_RETURN_IF_ERROR(st);
  } else {
    AF_RETURN_IF_ERROR(kernel->compute(*ctx));
  }
  AF_RETURN_IF_ERROR(dev->sync());
  std::vector<Tensor> out;
  for (int o = 0; o < node.num_outputs(); ++o) {
    const Tensor& t = ctx->outputs()[static_cast<size_t>(o)];
    if (!t.is_initialized()) return Internal("the kernel did not produce output " + std::to_string(o));
    if (!to_host) {
      out.push_back(t);
      continue;
    }
    AF_ASSIGN_OR_RETURN(Tensor h, dev->copy_to_host(t));
    out.push_back(h);
  }
  return out;
}

}  // namespace testing
}  // namespace actorflow
