// The task's resource container: named variable actors, shared by every session and step
// on this task (TensorFlow's resource container, seed 003). A device actor serves a kernel's
// ResourceCall at once on its own thread when the resource's inline part takes it (a read, or an
// update of a small host variable: no mailbox hop either way), and otherwise turns it into a
// message to the named actor and hands the reply back to the kernel on its own thread
// (docs/architecture/variables.md, "Variable calls served inline").
//
// Message interface of a resource (variable) actor:
//   (resource_atom, ResourceCallPtr) -> std::vector<Tensor>
#pragma once

#include <caf/all.hpp>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/interfaces.h"
#include "core/status.h"
#include "device/kernel.h"

namespace actorflow {

// resource_atom, ResourceCallPtr and variable_actor_t (the interface of a resource actor):
// actors/interfaces.h.

// The part of a resource that serves some calls on the caller's own thread, under the
// resource's lock, instead of through its actor's mailbox (a variable actor's state; actors/
// variable_actor.h says which calls). Owned by the ResourceManager and the actor together; it
// outlives the actor, and once the actor is gone it serves nothing.
class InlineResource {
 public:
  virtual ~InlineResource() = default;
  // Serves `call` now, on the calling thread, and returns its answer (the same answer the actor
  // would give); nullopt when the call must go to the actor instead (what the actor alone
  // serves, or the actor is gone). Blocks at most for the call the resource is serving at that
  // moment. Thread-safe.
  virtual std::optional<Result<std::vector<Tensor>>> try_call(const ResourceCall& call) = 0;
};

// One resource: its actor and, where it has one, its inline part (null: every call goes to the
// actor). Converts from a bare actor handle (a resource without an inline part).
struct Resource {
  Resource() = default;
  Resource(variable_actor_t a) : actor(std::move(a)) {}  // NOLINT: implicit by design
  Resource(variable_actor_t a, std::shared_ptr<InlineResource> i) : actor(std::move(a)), inline_part(std::move(i)) {}
  variable_actor_t actor;
  std::shared_ptr<InlineResource> inline_part;
};

// Spawns the actor of resource `name` (e.g. a variable actor) in `sys`, with its inline part
// where it has one.
using ResourceFactory = std::function<Resource(caf::actor_system& sys, const std::string& name)>;

// Thread-safe map name -> resource actor of one task.
class ResourceManager {
 public:
  ResourceManager(caf::actor_system& sys, ResourceFactory factory) : sys_(sys), factory_(std::move(factory)) {}
  // Closes the container (close()).
  ~ResourceManager();
  // The actor of `name`, spawned on first use. FailedPrecondition when no factory is set;
  // Cancelled once close() ran (nothing is spawned then).
  Result<variable_actor_t> get_or_create(const std::string& name);
  // For a kernel's call (a direct access, not a replicated one): the resource of `name` (its
  // actor and inline part), spawned on first use, except that a name not held here is first put
  // to the kernel gate (set_kernel_gate), whose error is returned instead of spawning an empty
  // actor. Same errors as get_or_create() otherwise.
  Result<Resource> get_for_kernel(const std::string& name);
  // The gate get_for_kernel() asks before it spawns `name` (OK: spawn it). A ps task that
  // returned after a failover refuses so: its variables are served by another task, and an
  // empty copy here would fork the model. Called under the container's lock: `gate` must not
  // call back into this container. Null: no gate (the default).
  void set_kernel_gate(std::function<Status(const std::string& name)> gate);
  // The actor of `name` or null.
  variable_actor_t find(const std::string& name) const;
  // Every resource, by name.
  std::map<std::string, variable_actor_t> all() const;
  // Stops and forgets every resource (a parameter server that lost its state); later uses
  // spawn them afresh.
  void clear();
  // Stops and forgets every resource, and for good: get_or_create() answers Cancelled from now
  // on. For the end of the task (Server::stop): a kernel still running then (a partition of a
  // step that failed on another device, left running until its abort arrives) must not spawn
  // a resource actor that nobody would ever stop, on which actor_system::await_all_actors_done()
  // would wait forever. Idempotent; safe against concurrent get_or_create() calls (each either
  // spawned its actor before, and close() stops it, or gets Cancelled).
  void close();
  // True once close() ran.
  bool closed() const;

 private:
  caf::actor_system& sys_;
  ResourceFactory factory_;
  std::function<Status(const std::string&)> kernel_gate_;  // guarded by mu_
  mutable std::mutex mu_;
  // The resource of `name`, spawned on first use. Called with mu_ held.
  Result<Resource> locked_get_or_create(const std::string& name);

  std::map<std::string, Resource> resources_;  // guarded by mu_
  bool closed_ = false;                             // guarded by mu_
};

}  // namespace actorflow

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorflow::ResourceCallPtr)
