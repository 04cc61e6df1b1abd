#include "actors/server.h"
#include "actors/server_runtime.h"
#include "actors/server_gate.h"
#include <caf/thread_hook.hpp>
#include "core/crash_trace.h"
#include "core/thread_exits.h"

#include "core/hang_report.h"
#include "core/metrics.h"
#include "core/waits.h"
#include "net/metrics_http.h"

#include "actors/client_sessions.h"

#include "actors/auth.h"
#include "actors/control_plane.h"

#include "actors/restart.h"

#include <arpa/inet.h>
#include <signal.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <map>
#include <unordered_map>

#include "actors/direct_step.h"
#include "actors/router.h"
#include "actors/faults.h"
#include "actors/master_actor.h"
#include "actors/peer_link.h"
#include "net/tls.h"
#include "net/tensor_transport.h"
#include "actors/variable_actor.h"
#include "actors/detached_actors.h"
#include "actors/ps_replication.h"
#include "core/logging.h"
#include "config/cluster_spec.h"  // the cluster file's options

namespace actorflow {
namespace {

std::mutex g_registry_mu;
std::map<std::string, Server*>& registry() {
  static auto* m = new std::map<std::string, Server*>();
  return *m;
}

// The incarnation peer `p` runs as (its devices carry it), or 0 when it advertised none.
uint64_t incarnation_of(const PeerInfo& p) { return p.devices.empty() ? 0 : p.devices.front().incarnation; }

// Records the threads of a server's own actor system (core/thread_exits.h). CAF 0.17 runs each
// detached actor on a detached std::thread that signs off (actor_system::dec_detached_threads)
// before it has exited: its thread-local and pthread-key destructors still run after
// ~actor_system returned. A program that then returned from main() ran libcublas's exit-time
// destructor (the library is loaded though no GPU is used) beside such a thread's key destructor,
// and both freed the thread's value: the chief's "double free or corruption" at its end
// (docs/changelog.md, 2026-11-28). So ~Server waits until every thread its system started is gone.
class RecordSystemThreads final : public caf::thread_hook {
 public:
  explicit RecordSystemThreads(std::shared_ptr<ThreadExits> threads) : threads_(std::move(threads)) {}
  void init(caf::actor_system&) override {}
  void thread_started() override { threads_->started(); }
  void thread_terminates() override { threads_->finishing(); }

 private:
  std::shared_ptr<ThreadExits> threads_;
};

}  // namespace

// The server's state (include/actorflow/server.h keeps it, and CAF, out of the public header).
struct Server::Impl {
  RestartPolicy restarts_;  // this server's actors' in-place restart budget
  std::unique_ptr<caf::actor_system_config> own_cfg_;
  std::unique_ptr<caf::actor_system> own_sys_;
  // Keeps the process's wait watcher running (core/waits.h): waits past the threshold are logged.
  WaitWatch wait_watch_;
  caf::actor_system* sys_ = nullptr;
  std::string target_;
  std::string task_prefix_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<DeviceInfo> device_infos_;
  std::shared_ptr<ProcessRouter> router_;
  std::shared_ptr<DirectSteps> direct_;
  std::shared_ptr<ResourceManager> resources_;
  std::shared_ptr<PsReplicator> replicator_;  // a ps task with [supervisor] ps_replicas = 2
  std::shared_ptr<PsServing> ps_serving_;     // every cluster task with ps_replicas = 2
  master_actor_t master_;
  node_actor_t node_;
  ClusterSpec cluster_;
  TaskId task_;
  ServerOptions server_options_;
  uint16_t port_ = 0;
  std::shared_ptr<AuthenticatedPeers> auth_peers_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<ControlPlaneListener> control_;  // the task port (cluster mode)
  std::unique_ptr<net::MetricsHttpServer> metrics_;  // [server] metrics_port (cluster mode)
  std::string shutdown_token_;                      // stops node_ (actors/node_actor.h)
  std::shared_ptr<std::atomic<bool>> stopping_flag_ = std::make_shared<std::atomic<bool>>(false);
  // Set by ~Server once every actor of the server has ended (before the actor system's teardown).
  std::shared_ptr<std::atomic<bool>> actors_ended_ = std::make_shared<std::atomic<bool>>(false);
  std::string routes_key_;
  std::unique_ptr<actorflow::net::TensorServer> data_server_;
  std::shared_ptr<actorflow::net::TensorClient> data_client_;  // shared with the router
  std::mutex connect_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::shared_ptr<ServerGate> gate_ = std::make_shared<ServerGate>();
  // Every detached actor of this server (device actors, the node actor's workers): ~Server waits
  // until they ended before the actor system's teardown (actors/detached_actors.h).
  std::shared_ptr<DetachedActors> detached_ = std::make_shared<DetachedActors>();
  // The threads of own_sys_ (RecordSystemThreads): ~Server returns after they all exited.
  std::shared_ptr<ThreadExits> threads_ = std::make_shared<ThreadExits>();
};

Server::Server() : impl_(std::make_unique<Impl>()) {}

ServerRuntime::ServerRuntime(Server& server) : server_(&server), impl_(server.impl_.get()) {}

std::shared_ptr<ServerGate> ServerRuntime::gate() const { return impl_->gate_; }

const std::string& Server::target() const { return impl_->target_; }
const std::string& ServerRuntime::task_prefix() const { return impl_->task_prefix_; }
const ClusterSpec& ServerRuntime::cluster() const { return impl_->cluster_; }
uint16_t Server::port() const { return impl_->port_; }
const ServerOptions& ServerRuntime::server_options() const { return impl_->server_options_; }
caf::actor_system& Server::system() { return *impl_->sys_; }
caf::actor Server::master() const { return caf::actor_cast<caf::actor>(impl_->master_); }
Membership* ServerRuntime::membership() { return impl_->membership_.get(); }
const std::shared_ptr<ResourceManager>& ServerRuntime::resources() const { return impl_->resources_; }
const std::vector<DeviceInfo>& ServerRuntime::devices() const { return impl_->device_infos_; }
std::shared_ptr<DirectSteps> ServerRuntime::direct_steps() const { return impl_->direct_; }
std::shared_ptr<ProcessRouter> ServerRuntime::router() const { return impl_->router_; }

std::shared_ptr<PsServing> ServerRuntime::ps_serving() const { return impl_->ps_serving_; }

void ServerRuntime::note_step_failure(const Status& why) {
  if (!impl_->ps_serving_ || why.ok() || !impl_->membership_) return;
  if (const ServedBy* refusal = why.detail<ServedBy>()) {
    // A refusal: this process routes some ps task's variables to a task that does not serve them.
    refresh_ps_serving("a ps task refused a variable (" + refusal->copy_task + " names " + refusal->primary_task +
                       " as its primary)");
  } else if (why.detail<Uninitialized>() && !impl_->ps_serving_->aliases().empty()) {
    // A failed-over route that finds no variable: the copies it followed may have died too, and
    // the model been restored where it was placed.
    refresh_ps_serving("a variable was not initialized where this process routes it after a failover");
  }
}

ServerRuntime::PsRefresh ServerRuntime::refresh_ps_serving(const std::string& why) {
  PsRefresh out;
  if (!impl_->ps_serving_ || !impl_->membership_) return out;
  // Which ps task a refused or missing variable belongs to, and whether the other routes are
  // wrong too, one error cannot say (after both copies died and the model was restored, ps/0 may
  // rightly serve its own variables and hold backup copies of ps/1's). So every ps task that
  // answers now says which ps tasks it serves for, and PsServing::follow_claims routes by that:
  // to the claimant, else to the task itself when it or its present server answered.
  const std::vector<std::string>& ps = impl_->ps_serving_->ps_tasks();
  const auto timeout = std::chrono::milliseconds(std::max(1000, impl_->server_options_.peer_timeout_ms));
  std::map<std::string, std::vector<std::string>> claims;  // answering ps task -> what it serves for
  ScopedActor self{*impl_->sys_};
  for (const auto& t : ps) {
    auto spec = DeviceSpec::parse(t);
    if (!spec.ok() || !spec->job || !spec->task) continue;
    auto addr = impl_->cluster_.task_address(TaskId{*spec->job, *spec->task});
    if (!addr.ok()) continue;
    auto p = impl_->membership_->ensure(t, *addr, std::chrono::milliseconds(1), /*quiet=*/true);
    if (!p.ok() || !p->node) continue;
    self->request(p->node, timeout, servesfor_atom::value)
        .receive([&](std::vector<std::string>& v) { claims[t] = std::move(v); }, [](const caf::error&) {});
  }
  out.all_answered = claims.size() == ps.size();
  out.changed = impl_->ps_serving_->follow_claims(claims);
  if (!out.changed) return out;
  std::string moved;
  for (const auto& [from, to] : impl_->ps_serving_->aliases()) moved += " " + from + "->" + to;
  AF_LOG(WARNING) << impl_->task_prefix_ << ": ps failover: " << why << "; as the ps tasks say, served now:"
                  << (moved.empty() ? std::string(" each by itself") : moved);
  return out;
}

void ServerRuntime::learn_own_failover(const std::vector<std::pair<std::string, std::string>>& ps_peers) {
  std::weak_ptr<PsServing> serving = impl_->ps_serving_;
  const std::string own = impl_->replicator_->own_task();
  // A ps task that says it serves this one's variables took them over when this task failed (its
  // backup, or further on after a chain of failures): they stay there (sticky, as every other
  // process sees it) and this task keeps backup copies only.
  auto learn = [serving, own](const std::string& peer, const std::vector<std::string>& serves_for) {
    auto s = serving.lock();
    if (!s || std::find(serves_for.begin(), serves_for.end(), own) == serves_for.end()) return false;
    if (s->redirect(own, peer)) {
      AF_LOG(WARNING) << own << ": ps failover: this task came back after a failover; its variables are served by "
                      << peer << ", and it keeps backup copies only";
    }
    return true;
  };
  const std::string backup = impl_->replicator_->backup_task();
  impl_->replicator_->set_on_connect([learn, backup](const std::vector<std::string>& serves_for) { learn(backup, serves_for); });
  // Before this task serves anyone (its node actor is not published yet): one connection attempt
  // to each other ps task, the backup first. A task that is not up refuses at once (then it serves
  // nothing of this task's), so a cluster's first start is not slowed.
  for (const auto& [peer, addr] : ps_peers) {
    auto p = impl_->membership_->ensure(peer, addr, std::chrono::milliseconds(1), /*quiet=*/true);
    if (p.ok() && learn(peer, p->serves_for)) break;
  }
  // A kernel's access to a variable that is not here, on a task whose variables are served
  // elsewhere, comes from a process that has not failed over (it started after the failover):
  // refused with the ServedBy detail (which moves that process's routing to the serving task),
  // never answered with an empty, uninitialized copy that a chief would then initialize.
  impl_->resources_->set_kernel_gate([serving, own](const std::string& name) -> Status {
    auto s = serving.lock();
    const std::string by = s ? s->server_of(own) : own;
    if (by == own) return Status::OK();
    return Unavailable("variable '" + name + "' is not on " + own + ": this ps task came back after a failover and " + by +
                       " serves its variables")
        .with_detail(ServedBy{own, by});
  });
}

Result<std::unique_ptr<Server>> Server::local(const LocalServerOptions& opts) {
  std::unique_ptr<Server> s(new Server());
  s->impl_->own_cfg_ = std::make_unique<caf::actor_system_config>();
  configure(*s->impl_->own_cfg_);
  s->impl_->own_cfg_->add_thread_hook<RecordSystemThreads>(s->impl_->threads_);
  s->impl_->own_sys_ = std::make_unique<caf::actor_system>(*s->impl_->own_cfg_);
  s->impl_->sys_ = s->impl_->own_sys_.get();
  AF_RETURN_IF_ERROR(ServerRuntime(*s).init_local(opts));
  return s;
}

Result<std::unique_ptr<Server>> Server::local_in(caf::actor_system& sys, const LocalServerOptions& opts) {
  std::unique_ptr<Server> s(new Server());
  s->impl_->sys_ = &sys;
  AF_RETURN_IF_ERROR(ServerRuntime(*s).init_local(opts));
  return s;
}

Status ServerRuntime::init_local(const LocalServerOptions& opts) {
  if (opts.max_restarts < 0 || !(opts.restart_window_secs > 0))
    return InvalidArgument("LocalServerOptions: max_restarts must be >= 0 and restart_window_secs > 0 (got " +
                           std::to_string(opts.max_restarts) + " and " + std::to_string(opts.restart_window_secs) + ")");
  impl_->restarts_ = RestartPolicy{opts.max_restarts, opts.restart_window_secs};
  const DeviceEnumerationOptions d = opts;  // the DeviceOptions base
  return init("/job:localhost/replica:0/task:0", d);
}

Status ServerRuntime::init(const std::string& task_prefix, const DeviceOptions& dopts) {
  static std::atomic<int> counter{0};
  impl_->task_prefix_ = task_prefix;
  WaitRegistry::global().set_task(task_prefix);
  AF_ASSIGN_OR_RETURN(impl_->devices_, create_devices(task_prefix, dopts));
  // This process's incarnation: every device it advertises carries it, and so does every
  // rendezvous key a plan builds for a tensor these devices send (device/rendezvous_key.h).
  const uint64_t incarnation = new_incarnation();
  auto router = std::make_shared<ProcessRouter>(task_prefix, incarnation);
  impl_->router_ = router;
  impl_->resources_ = std::make_shared<ResourceManager>(*impl_->sys_, variable_actor_factory(impl_->restarts_, impl_->replicator_));
  for (auto& d : impl_->devices_) {
    device_actor_t a = spawn_device_actor(*impl_->sys_, d.get(), impl_->router_, impl_->resources_, nullptr, impl_->restarts_);
    impl_->detached_->add(caf::actor_cast<caf::strong_actor_ptr>(a));
    router->add(d->name(), a);
    DeviceInfo info;
    info.name = d->name();
    info.type = d->type();
    info.memory_limit = d->attributes().memory_limit;
    info.description = d->attributes().description;
    info.actor = a;
    info.incarnation = incarnation;
    impl_->device_infos_.push_back(info);
  }
  impl_->direct_ = std::make_shared<DirectSteps>();
  impl_->master_ = spawn_master_actor(*impl_->sys_, impl_->device_infos_, task_prefix + "/device:CPU:0", impl_->router_, impl_->direct_);
  router->set_master(impl_->master_, impl_->direct_);
  impl_->target_ = "local://" + std::to_string(++counter);
  std::lock_guard<std::mutex> l(g_registry_mu);
  registry()[impl_->target_] = server_;
  return Status::OK();
}

Server* ServerRuntime::find(const std::string& target) {
  std::lock_guard<std::mutex> l(g_registry_mu);
  auto it = registry().find(target);
  return it == registry().end() ? nullptr : it->second;
}

std::shared_ptr<ServerGate> ServerRuntime::gate_of(const std::string& target) {
  std::lock_guard<std::mutex> l(g_registry_mu);
  auto it = registry().find(target);
  return it == registry().end() ? nullptr : it->second->impl_->gate_;
}

void Server::join() {
  std::unique_lock<std::mutex> l(impl_->mu_);
  impl_->cv_.wait(l, [this] { return impl_->stopped_; });
}

void Server::stop() {
  {
    std::lock_guard<std::mutex> l(impl_->mu_);
    if (impl_->stopped_) return;
    impl_->stopped_ = true;
  }
  {
    std::lock_guard<std::mutex> l(g_registry_mu);
    registry().erase(impl_->target_);
  }
  // Sessions: no new call gets in; the waits of those inside end (the master answers its
  // in-flight runs when it exits below, direct steps and connection attempts here).
  impl_->gate_->close();
  const Status stopping = Cancelled("the server " + impl_->target_ + " stopped");
  if (impl_->membership_) impl_->membership_->cancel(stopping);
  if (impl_->direct_) impl_->direct_->cancel_all(stopping);
  if (impl_->router_) impl_->router_->clear();
  if (impl_->replicator_) impl_->replicator_->stop();
  if (impl_->node_) {
    impl_->stopping_flag_->store(true);
    impl_->metrics_.reset();
    impl_->control_.reset();  // no new connections; BASP forgets the published node actor below
    if (impl_->port_) impl_->sys_->middleman().unpublish(impl_->node_, impl_->port_);
    caf::anon_send(impl_->node_, shutdown_atom::value, impl_->shutdown_token_);
  }
  for (auto& info : impl_->device_infos_) caf::anon_send_exit(info.actor, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(impl_->master_, caf::exit_reason::user_shutdown);
  // The resource container closes for good: a device actor still running a kernel (the other
  // partitions of a step that failed on one device run on until their abort or exit arrives)
  // gets Cancelled instead of spawning a resource actor after this, which nothing would stop
  // and ~Server's await_all_actors_done() would wait for forever. (After the exits, as clear()
  // was: closing first changed the shutdown's timing and ./bench/training's in-process servers
  // then hung in await_detached_threads in 2 of 4 runs.)
  if (impl_->resources_) impl_->resources_->close();
  impl_->cv_.notify_all();
}

Server::~Server() {
  stop();
  // Sessions' calls still inside use the server: let them leave first (their waits were cancelled
  // by stop(); what is left is bounded by the transport's timeouts).
  if (!impl_->gate_->wait_empty(std::chrono::seconds(60))) {
    AF_LOG(ERROR) << impl_->target_ << ": " << impl_->gate_->inside()
                  << " session call(s) still inside after 60 s; destroying the server anyway";
  }
  impl_->membership_.reset();
  impl_->data_server_.reset();
  impl_->data_client_.reset();
  if (impl_->own_sys_) {
    impl_->own_sys_->await_all_actors_done();
  } else {
    // Embedded: wait until our device actors are gone before the devices they borrow die.
    ScopedActor self{*impl_->sys_};
    for (auto& info : impl_->device_infos_) {
      self->wait_for(info.actor);
    }
  }
  impl_->actors_ended_->store(true);
  impl_->device_infos_.clear();
  impl_->master_ = master_actor_t();
  impl_->node_ = node_actor_t();
  // Every actor unregistered, but a detached one may not have sent its exit notices yet: wait
  // until they went out, so that the middleman still reads a notice for its broker (otherwise the
  // system's teardown below could wait for that actor forever; actors/detached_actors.h).
  if (Status st = impl_->detached_->await_ended(std::chrono::milliseconds(5000)); !st.ok()) {
    AF_LOG(WARNING) << impl_->task_prefix_ << ": " << st.message();
  }
  if (impl_->own_sys_) {
    impl_->own_sys_.reset();
    const std::vector<pid_t> left = impl_->threads_->await_gone(std::chrono::milliseconds(5000));
    if (!left.empty())
      AF_LOG(WARNING) << impl_->task_prefix_ << ": " << left.size()
                      << " thread(s) of the actor system still exiting after 5000 ms (first: thread id "
                      << left.front() << ")";
  }
  impl_->devices_.clear();
}

}  // namespace actorflow

// ---- cluster servers ---------------------------------------------------------------------
namespace actorflow {
namespace {

bool is_loopback_name(const std::string& h) {
  return h == "localhost" || h == "::1" || h == "[::1]" || h.rfind("127.", 0) == 0;
}

}  // namespace

bool is_local_host(const std::string& host) {
  if (is_loopback_name(host) || host == "0.0.0.0") return true;
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) == 0 && host == name) return true;
  struct ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return false;
  bool found = false;
  for (auto* i = ifs; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    char buf[INET6_ADDRSTRLEN] = {0};
    if (i->ifa_addr->sa_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    else if (i->ifa_addr->sa_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf, sizeof buf);
    if (host == buf) found = true;
  }
  freeifaddrs(ifs);
  return found;
}

void Server::configure(caf::actor_system_config& cfg) {
  register_actorflow_types(cfg);
  register_node_types(cfg);
  cfg.load<caf::io::middleman>();
  cfg.set("logger.verbosity", caf::atom("quiet"));
  cfg.set("logger.console", caf::atom("none"));
  // CAF 0.17's default work-stealing scheduler lets idle workers sleep between polls, so every
  // hand-off of a step (session -> master -> device actor -> reply) can wait out a sleep. The
  // sharing policy wakes a worker through a condition variable at once.
  cfg.set("scheduler.policy", caf::atom("sharing"));
  // BASP deserializes incoming messages inline on the middleman's I/O thread instead of handing
  // each to a BASP worker (one more thread hand-off per message on its way to the actor).
  cfg.set("middleman.workers", 0);
}

Result<std::unique_ptr<Server>> Server::create(const ClusterSpec& cluster, const TaskId& task) {
  AF_RETURN_IF_ERROR(cluster.validate_task(task));
  std::unique_ptr<Server> s(new Server());
  s->impl_->own_cfg_ = std::make_unique<caf::actor_system_config>();
  configure(*s->impl_->own_cfg_);
  s->impl_->own_cfg_->add_thread_hook<RecordSystemThreads>(s->impl_->threads_);
  s->impl_->own_sys_ = std::make_unique<caf::actor_system>(*s->impl_->own_cfg_);
  s->impl_->sys_ = s->impl_->own_sys_.get();
  AF_RETURN_IF_ERROR(ServerRuntime(*s).init_cluster(cluster, task));
  const char* plan_file = std::getenv(kFaultPlanEnv);
  if (plan_file && *plan_file) {
    auto plan = FaultPlan::from_file(plan_file);
    if (!plan.ok()) return plan.status().with_prefix(std::string(kFaultPlanEnv) + "=" + plan_file);
    Status known = check_plan_tasks(*plan, cluster);
    if (!known.ok()) return known.with_prefix(std::string(kFaultPlanEnv) + "=" + plan_file);
    auto loaded = FaultInjector::global().load(*plan, task.device_prefix());
    if (!loaded.ok()) return loaded.status().with_prefix(std::string(kFaultPlanEnv) + "=" + plan_file);
    AF_LOG(INFO) << "fault plan " << plan_file << " (seed " << plan->seed << "): " << loaded->size()
                 << " fault(s) for " << task.to_string();
  }
  return s;
}

Result<std::unique_ptr<Server>> Server::create_in(caf::actor_system& sys, const ClusterSpec& cluster,
                                                  const TaskId& task) {
  AF_RETURN_IF_ERROR(cluster.validate_task(task));
  std::unique_ptr<Server> s(new Server());
  s->impl_->sys_ = &sys;
  AF_RETURN_IF_ERROR(ServerRuntime(*s).init_cluster(cluster, task));
  return s;
}

// What the steps of ServerRuntime::init_cluster share: the task, its address and security,
// and what one step builds for the next.
struct ClusterInit {
  const ClusterSpec& cluster;
  TaskId task;
  std::string address;                   // "host:port" from the cluster file
  std::pair<std::string, int> hp;        // its host and port
  std::string where;                     // "task T at ADDRESS", the prefix of every error
  std::string bind;                      // the IP this task listens on ([server] bind, else its own)
  std::string advertised;                // the IP peers are told for the data plane
  std::shared_ptr<const net::TlsContext> tls;
  ServerOptions opts;
  MembershipConfig mc;
  NodeActorConfig nc;
  // A replicated ps task's peers (task prefix, address), its backup first, then on around the ring.
  std::vector<std::pair<std::string, std::string>> ps_peers;
};

Status ServerRuntime::init_cluster(const ClusterSpec& cluster, const TaskId& task) {
  AF_ASSIGN_OR_RETURN(ClusterInit c, cluster_task(cluster, task));
  // Actors restarted in place after an exception follow the cluster's [supervisor] budget.
  impl_->restarts_ = RestartPolicy{cluster.supervisor().max_restarts, cluster.supervisor().restart_window_secs};
  AF_RETURN_IF_ERROR(init_ps_replication(c));
  const DeviceEnumerationOptions d = c.opts;  // the DeviceOptions base
  AF_RETURN_IF_ERROR(init(task.device_prefix(), d));
  init_membership(c);
  if (impl_->replicator_ && impl_->ps_serving_) learn_own_failover(c.ps_peers);
  init_node_config(c);
  AF_RETURN_IF_ERROR(init_data_plane(c));
  init_node_actor(c);
  AF_RETURN_IF_ERROR(init_control_plane(c));
  AF_RETURN_IF_ERROR(init_metrics(c));
  {
    std::lock_guard<std::mutex> l(g_registry_mu);
    registry().erase(impl_->target_);
    impl_->target_ = "actorflow://" + c.address;
    registry()[impl_->target_] = server_;
  }
  AF_LOG(INFO) << "Started server for " << impl_->task_prefix_ << " at " << c.address;
  return Status::OK();
}

Result<ClusterInit> ServerRuntime::cluster_task(const ClusterSpec& cluster, const TaskId& task) {
  impl_->cluster_ = cluster;
  impl_->task_ = task;
  impl_->server_options_ = cluster.server_options(task);
  ClusterInit c{cluster, task, {}, {}, {}, {}, {}, nullptr, cluster.server_options(task), {}, {}, {}};
  AF_ASSIGN_OR_RETURN(c.address, cluster.task_address(task));
  AF_ASSIGN_OR_RETURN(c.hp, parse_address(c.address));
  c.where = "task " + task.to_string() + " at " + c.address;
  if (!is_local_host(c.hp.first))
    return InvalidArgument(c.where + ": '" + c.hp.first + "' is not an address of this machine");
  if (!cluster.all_loopback() && cluster.secret().empty() && !cluster.tls())
    return FailedPrecondition("cluster file " + cluster.source() +
                              " has non-loopback addresses: a cluster secret is required (secret_file or "
                              "ACTORFLOW_SECRET), or TLS ([cluster] tls_dir)");
  auto tls_or = cluster_tls(cluster, task.to_string());
  if (!tls_or.ok()) return tls_or.status().with_prefix(c.where);
  c.tls = *tls_or;
  // The task's configured address (never all interfaces unless [server] bind says so); peers
  // are told the configured address.
  c.advertised = c.hp.first == "localhost" ? "127.0.0.1" : c.hp.first;
  if (c.advertised.size() > 2 && c.advertised.front() == '[') c.advertised = c.advertised.substr(1, c.advertised.size() - 2);
  c.bind = c.opts.bind.empty() ? c.advertised : c.opts.bind;
  return c;
}

// Replicated parameter servers: ps task p's variables have their backup on the next ps task
// (in index order, cyclically); actors/ps_replication.h.
Status ServerRuntime::init_ps_replication(ClusterInit& c) {
  if (c.task.job != "ps" || c.cluster.supervisor().ps_replicas != 2) return Status::OK();
  const std::vector<int> ps = c.cluster.task_indices("ps");
  auto at = std::find(ps.begin(), ps.end(), c.task.index);
  const TaskId backup{"ps", (at + 1 == ps.end()) ? ps.front() : *(at + 1)};
  AF_ASSIGN_OR_RETURN(std::string backup_addr, c.cluster.task_address(backup));
  const size_t me = static_cast<size_t>(at - ps.begin());
  for (size_t k = 1; k < ps.size(); ++k) {
    const TaskId peer{"ps", ps[(me + k) % ps.size()]};
    AF_ASSIGN_OR_RETURN(std::string addr, c.cluster.task_address(peer));
    c.ps_peers.emplace_back(peer.device_prefix(), addr);
  }
  impl_->replicator_ = std::make_shared<PsReplicator>(c.task.device_prefix(), backup.device_prefix(), backup_addr,
                                                      std::chrono::milliseconds(c.opts.peer_timeout_ms));
  return Status::OK();
}

void ServerRuntime::init_membership(ClusterInit& c) {
  impl_->auth_peers_ = std::make_shared<AuthenticatedPeers>();
  MembershipConfig& mc = c.mc;
  mc.self_task = impl_->task_prefix_;
  mc.fingerprint = c.cluster.fingerprint();
  mc.secret = c.cluster.secret();
  mc.tls = c.tls;
  mc.connect_timeout = std::chrono::milliseconds(c.opts.connect_timeout_ms);
  mc.heartbeat_interval = std::chrono::milliseconds(c.opts.heartbeat_interval_ms);
  mc.peer_timeout = std::chrono::milliseconds(c.opts.peer_timeout_ms);
  impl_->membership_ = std::make_unique<Membership>(*impl_->sys_, mc);
  impl_->membership_->add_listener(caf::actor_cast<caf::actor>(impl_->master_));
  if (c.cluster.supervisor().ps_replicas != 2) return;
  // Which ps task serves each ps task's variables: a ps task that goes down hands them to its
  // backup, before the master fails the steps that involved it (actors/ps_replication.h).
  std::vector<std::string> ps;
  for (int i : c.cluster.task_indices("ps")) ps.push_back(TaskId{"ps", i}.device_prefix());
  impl_->ps_serving_ = std::make_shared<PsServing>(std::move(ps));
  std::weak_ptr<PsServing> serving = impl_->ps_serving_;
  const std::string me = impl_->task_prefix_;
  impl_->membership_->add_down_callback([serving, me](const std::string& task) {
    auto s = serving.lock();
    if (!s || !s->task_down(task)) return;
    std::string moved;
    for (const auto& [from, to] : s->aliases()) moved += " " + from + "->" + to;
    AF_LOG(WARNING) << me << ": ps failover: " << task << " is down; served now:" << moved;
  });
}

void ServerRuntime::init_node_config(ClusterInit& c) {
  NodeActorConfig& nc = c.nc;
  nc.detached = impl_->detached_;
  nc.resources = impl_->resources_;
  nc.replicator = impl_->replicator_;
  nc.serving = impl_->ps_serving_;
  nc.task = impl_->task_prefix_;
  nc.fingerprint = c.mc.fingerprint;
  nc.secret = c.mc.secret;
  nc.devices = impl_->device_infos_;
  nc.peers = impl_->auth_peers_;
  // The handshake deadline of membership (actors/membership.cc) also bounds unauthenticated peers.
  nc.auth_timeout = std::max<std::chrono::milliseconds>(c.mc.peer_timeout, std::chrono::milliseconds(1000));
  // Runs on a worker actor of the node actor, which ~Server does not wait for before it destroys
  // the membership and the router: inside the gate, as a session's call is, or not at all.
  nc.connect_peers = [srv = server_, gate = impl_->gate_, task = impl_->task_prefix_](
                         const std::vector<std::string>& tasks) -> Status {
    ServerGate::Entry in(gate);
    if (!in) return Cancelled("task " + task + " is stopping");
    return ServerRuntime(*srv).connect_tasks(tasks);
  };
  // Remote client sessions (actors/client_sessions.h) run on this server, under its final target.
  nc.clients = std::make_shared<ClientSessions>("actorflow://" + c.address);
  // TCP clients of the node's port that never complete CAF's handshake are closed too.
  // So are nodes that connect to it and never authenticate with the node actor.
  std::weak_ptr<AuthenticatedPeers> weak_peers = impl_->auth_peers_;
  nc.sweeper = std::make_shared<SilentConnectionSweeper>(
      *impl_->sys_, nc.auth_timeout, static_cast<uint16_t>(c.hp.second), [weak_peers](const caf::node_id& n) {
        auto peers = weak_peers.lock();
        return !peers || peers->contains(n);
      });
}

// The tensor data plane: its own listener on the task's host (ephemeral port, advertised to
// authenticated peers in NodeInfo), with its own challenge-response handshake.
Status ServerRuntime::init_data_plane(ClusterInit& c) {
  net::TransportOptions topts;
  topts.cluster_fingerprint = c.mc.fingerprint;
  topts.secret = c.mc.secret;
  topts.task_name = c.task.to_string();
  topts.tls = c.tls;
  // The same bound on the handshake as the control plane's (max(peer_timeout_ms, 1 s)), not
  // the transport's default.
  topts.handshake_timeout = c.nc.auth_timeout;
  ProcessRouter* router = impl_->router_.get();
  // A replicated ps task takes its primaries' tensors over the data plane too (they wait in
  // the inbox for their calls, which come over the control plane: actors/ps_replication.h).
  std::shared_ptr<ReplicaInbox> inbox;
  if (impl_->replicator_) {
    inbox = std::make_shared<ReplicaInbox>(size_t{2} << 30, std::max(4 * impl_->replicator_->timeout(),
                                                                      std::chrono::milliseconds(10000)));
    c.nc.replica_inbox = inbox;
  }
  auto ds = net::TensorServer::start(topts, c.bind, 0, [router, inbox](const net::Frame& m) {
    if (inbox && ReplicaInbox::is_replica_frame(m)) {
      inbox->put(m);
      return;
    }
    router->deliver(m);
  }, [router](uint64_t channel_id) { router->connection_closed(channel_id); });
  if (!ds.ok()) return ds.status().with_prefix(c.where + ": tensor data plane");
  impl_->data_server_ = std::move(*ds);
  impl_->data_client_ = std::make_shared<net::TensorClient>(topts);
  c.nc.data_addr = (c.advertised.find(':') != std::string::npos ? "[" + c.advertised + "]" : c.advertised) + ":" +
                   std::to_string(impl_->data_server_->port());
  router->set_data_client(impl_->data_client_, c.nc.data_addr);
  if (impl_->replicator_) impl_->replicator_->start(impl_->membership_.get(), topts);
  return Status::OK();
}

void ServerRuntime::init_node_actor(ClusterInit& c) {
  impl_->shutdown_token_ = random_nonce();
  c.nc.shutdown_token = impl_->shutdown_token_;
  impl_->node_ = spawn_node_actor(*impl_->sys_, c.nc);
  // A node actor that ends while the server runs (no message from outside can end it, but an
  // exception escaping one of its handlers, or an embedder's actor system, can) would leave a
  // process that serves nothing and that no supervisor restarts: end the process instead.
  std::weak_ptr<std::atomic<bool>> stopping = impl_->stopping_flag_;
  const std::string t = impl_->task_prefix_;
  impl_->node_->attach_functor([stopping, t](const caf::error& reason) {
    auto s = stopping.lock();
    if (s && !s->load()) {
      AF_LOG(ERROR) << "the node actor of " << t << " ended unexpectedly (" << caf::to_string(reason)
                    << "): this task no longer serves its peers; ending the process with exit status "
                    << kNodeActorLostExitCode << " so that its supervisor restarts it";
      std::fflush(nullptr);
      std::_Exit(kNodeActorLostExitCode);
    }
  });
  impl_->router_->set_self_node(impl_->node_);
}

// The control plane: CAF's BASP only behind actorflow's handshake (actors/control_plane.h), on
// the task's configured address, never on every interface.
Status ServerRuntime::init_control_plane(ClusterInit& c) {
  ControlPlaneListener::Options co;
  co.handshake.fingerprint = c.mc.fingerprint;
  co.handshake.secret = c.mc.secret;
  co.handshake.task_name = c.task.to_string();
  co.handshake.tls = c.tls;
  co.handshake_timeout = c.nc.auth_timeout;
  auto cl = ControlPlaneListener::start(*impl_->sys_, caf::actor_cast<caf::actor>(impl_->node_), c.bind,
                                        static_cast<uint16_t>(c.hp.second), std::move(co));
  if (!cl.ok()) return Unavailable(c.where + ": cannot listen (" + cl.status().message() + "); is the address already in use?");
  impl_->control_ = std::move(*cl);
  impl_->port_ = impl_->control_->port();
  return Status::OK();
}

// The metrics endpoint, on the task's address, behind TLS when the cluster has it; with a secret
// it proves itself to tools before they prove themselves (net/metrics_http.h).
Status ServerRuntime::init_metrics(const ClusterInit& c) {
  if (c.opts.metrics_port <= 0) return Status::OK();
  net::MetricsHttpOptions mo;
  mo.host = c.bind;
  mo.port = static_cast<uint16_t>(c.opts.metrics_port);
  mo.secret = c.mc.secret;  // keys the tools' challenge (GET /auth); never a credential itself
  mo.task = c.task.to_string();
  mo.fingerprint = c.mc.fingerprint;
  mo.scrape_token = c.cluster.metrics_token();
  mo.tls = c.tls;
  const Labels labels{{"job", c.task.job}, {"task", std::to_string(c.task.index)}};
  mo.render = [labels] { return Metrics::global().render(labels); };
  // What this task waits for, and the hang report (core/waits.h, core/hang_report.h;
  // docs/architecture/diagnosis.md): behind the same proof as /metrics.
  const std::string task_name = c.task.device_prefix();
  net::HttpRoute waits;
  waits.content_type = "application/json";
  waits.body = [task_name] { return waits_json(task_name, WaitRegistry::global().snapshot()); };
  mo.routes["/waits"] = std::move(waits);
  net::HttpRoute dump;
  dump.body = [task_name] { return hang_report(task_name); };
  mo.routes["/dump"] = std::move(dump);
  auto ms = net::MetricsHttpServer::start(std::move(mo));
  if (!ms.ok()) return Unavailable(c.where + ": metrics_port " + std::to_string(c.opts.metrics_port) + ": " + ms.status().message());
  impl_->metrics_ = std::move(*ms);
  AF_LOG(INFO) << impl_->task_prefix_ << ": metrics at " << (c.tls ? "https://" : "http://") << c.bind << ":"
               << impl_->metrics_->port() << "/metrics";
  return Status::OK();
}

Status ServerRuntime::connect_tasks(const std::vector<std::string>& tasks) {
  for (const auto& prefix : tasks) {
    if (prefix == impl_->task_prefix_) continue;
    auto spec = DeviceSpec::parse(prefix);
    if (!spec.ok() || !spec->job || !spec->task)
      return InvalidArgument("malformed task name '" + prefix + "'");
    TaskId t{*spec->job, *spec->task};
    AF_ASSIGN_OR_RETURN(std::string addr, impl_->cluster_.task_address(t));
    AF_ASSIGN_OR_RETURN(PeerInfo p, impl_->membership_->ensure(prefix, addr));
    impl_->router_->set_remote(prefix, p.node, p.data_addr, incarnation_of(p));
  }
  return Status::OK();
}

Result<std::vector<DeviceInfo>> ServerRuntime::cluster_devices_for(const Graph& graph, std::chrono::milliseconds timeout,
                                                            const std::map<std::string, std::string>& task_aliases) {
  std::vector<DeviceInfo> out = impl_->device_infos_;
  if (!impl_->membership_) return out;
  // Which tasks does the graph name?
  std::set<std::string> tasks;
  for (int i = 0; i < graph.num_nodes(); ++i) {
    const std::string& req = graph.node(i)->requested_device;
    if (req.empty()) continue;
    auto spec = DeviceSpec::parse(req);
    if (!spec.ok()) continue;  // the placer reports it with the op name
    if (!spec->job) continue;
    if (spec->task) {
      apply_task_aliases(*spec, task_aliases);
      tasks.insert(TaskId{*spec->job, *spec->task}.device_prefix());
    } else {
      for (int idx : impl_->cluster_.task_indices(*spec->job)) {
        DeviceSpec t = DeviceSpec::full(*spec->job, 0, idx, "CPU", 0);
        apply_task_aliases(t, task_aliases);
        tasks.insert(TaskId{*t.job, *t.task}.device_prefix());
      }
    }
  }
  tasks.erase(impl_->task_prefix_);
  std::lock_guard<std::mutex> l(impl_->connect_mu_);
  std::vector<PeerInfo> peers;
  for (const auto& prefix : tasks) {
    auto spec = DeviceSpec::parse(prefix);
    TaskId t{*spec->job, *spec->task};
    auto addr = impl_->cluster_.task_address(t);
    if (!addr.ok()) return addr.status();  // placer would say the same; say it early
    Result<PeerInfo> got = Unavailable("not tried");
    if (impl_->ps_serving_ && t.job == "ps") {
      // A replicated ps: connect in slices, and stop as soon as it serves no ps task's variables
      // any more (it went down and failed over after this run read the serving map; the next run
      // goes to its backup) instead of retrying a dead task for the whole connect timeout.
      const auto limit = timeout.count() > 0 ? timeout : std::chrono::milliseconds(impl_->server_options_.connect_timeout_ms);
      const auto deadline = std::chrono::steady_clock::now() + limit;
      while (true) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        got = impl_->membership_->ensure(
            prefix, *addr, std::max(std::chrono::milliseconds(1), std::min(left, std::chrono::milliseconds(1000))),
            /*quiet=*/true);
        if (got.ok() || left.count() <= 0) break;
        if (!impl_->ps_serving_->serves(prefix))
          return Unavailable("task " + prefix + " failed over to its backup while this run connected to it; the next run goes there");
      }
    } else {
      got = impl_->membership_->ensure(prefix, *addr, timeout);
    }
    AF_RETURN_IF_ERROR(got.status());
    PeerInfo p = std::move(*got);
    impl_->router_->set_remote(prefix, p.node, p.data_addr, incarnation_of(p));
    peers.push_back(p);
  }
  // Every involved task must be able to send to every other: tell them who is involved.
  std::vector<std::string> involved(tasks.begin(), tasks.end());
  involved.push_back(impl_->task_prefix_);
  const std::string key = [&] {
    std::string k = std::to_string(impl_->membership_->epoch()) + "|";
    for (const auto& t : involved) k += t + ",";
    return k;
  }();
  if (key != impl_->routes_key_) {
    ScopedActor self{*impl_->sys_};
    for (const auto& p : peers) {
      Status st;
      self->request(p.node, std::chrono::seconds(60), peers_atom::value, involved)
          .receive([](bool) {}, [&](caf::error& e) { st = from_caf_error(e, "task " + p.task); });
      if (!st.ok()) return st;
    }
    impl_->routes_key_ = key;
  }
  for (const auto& p : peers) out.insert(out.end(), p.devices.begin(), p.devices.end());
  return out;
}

Status serve_until_signal(const ClusterSpec& cluster, const TaskId& task) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A crash says where (core/crash_trace.h): this call owns its process, as SIGUSR1's dump below.
  if (Status st = install_crash_backtrace(task.device_prefix()); !st.ok())
    AF_LOG(WARNING) << task.device_prefix() << ": no backtrace on a crash: " << st.message();
  AF_ASSIGN_OR_RETURN(std::unique_ptr<Server> server, Server::create(cluster, task));
  // SIGUSR1 writes the hang report to stderr (core/hang_report.h): a program's server only.
  const std::string name = task.device_prefix();
  auto dump = DumpOnSignal::install(SIGUSR1, [name] { return name; });
  if (!dump.ok()) AF_LOG(WARNING) << name << ": no hang report on SIGUSR1: " << dump.status().message();
  std::printf("%s %d serving %s\n", task.job.c_str(), task.index, server->target().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  destroy_server_bounded(std::move(server), std::chrono::seconds(10), 0);
  return Status::OK();
}

void destroy_server_bounded(std::unique_ptr<Server> server, std::chrono::milliseconds bound, int exit_code_on_timeout,
                            int exit_code_if_actors_ended) {
  if (!server) return;
  const std::string task = server->impl_->task_prefix_;
  std::shared_ptr<std::atomic<bool>> actors_ended = server->impl_->actors_ended_;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> l(mu);
    if (cv.wait_for(l, bound, [&] { return done; })) return;
    if (actors_ended->load()) {
      // Every actor ended, its work with it; only CAF's teardown waits (docs/architecture/step-path.md).
      AF_LOG(WARNING) << task << ": every actor ended, but CAF's actor-system teardown still waits after "
                      << bound.count() << " ms (a finished detached actor not released); exiting";
      std::fflush(nullptr);
      _exit(exit_code_if_actors_ended);
    }
    AF_LOG(ERROR) << task << ": shutdown took longer than " << bound.count() << " ms; exiting";
    std::fflush(nullptr);
    _exit(exit_code_on_timeout);
  });
  server.reset();
  {
    std::lock_guard<std::mutex> l(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
}

}  // namespace actorflow
