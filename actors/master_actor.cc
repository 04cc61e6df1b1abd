#include "actors/master_actor.h"

#include <atomic>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>
#include <set>

#include "actors/device_actor.h"
#include "actors/device_ref.h"
#include "actors/direct_step.h"
#include "actors/faults.h"
#include "actors/membership.h"
#include "actors/node_actor.h"
#include "core/hang_report.h"
#include "core/logging.h"
#include "core/waits.h"
#include "graph/graph_def.h"
#include "runtime/partition.h"
#include "runtime/placer.h"
#include "runtime/step_plan.h"

namespace actorflow {
namespace {

struct PartitionRef {
  DeviceInfo device;
  std::string handle;
  std::vector<int> arg_indices;
  std::vector<int> retval_indices;
  // A partition of only _Arg -> _Send (it passes feeds on to other devices): what it sends.
  bool forwarder = false;
  std::vector<DirectPlan::Forward> forwards;
};

struct Plan {
  std::vector<PartitionRef> partitions;
  std::vector<DType> arg_types;
  std::vector<Shape> arg_shapes;
  size_t num_fetches = 0;
  std::vector<std::string> feed_names;
  bool ready = false;
  Status error;
  std::vector<std::function<void()>> waiters;  // runs queued until registration finishes
};

struct StepRun;
struct MasterState {
  std::vector<DeviceInfo> devices;
  std::map<int64_t, std::shared_ptr<StepRun>> inflight;
  std::string default_device;
  std::map<std::string, std::shared_ptr<Plan>> plans;
  // Plans whose partitions are being registered, each holding the runs that wait for it (its
  // waiters, which hold the plan: a cycle until they run). A plan leaves `plans` when a task it
  // uses goes down, but stays here until its registration answers, so that a master stopping
  // first still answers its runs and breaks the cycle. (Once it did not: the runs' requests,
  // holding the devices' actor handles, outlived the master, and the actor system's teardown
  // waited forever for the device actor they kept alive.)
  std::set<std::shared_ptr<Plan>> registering;
  // A partition's handle names it on its device, which several processes' masters share (every
  // worker's master registers on the ps devices): "m<task>.<this master's random nonce>_p<seq>".
  // It must be unique across them and across restarts of a task. (It was the address of this
  // state: equal in two processes whose heaps lie alike, as under ASan's fixed-address allocator;
  // then the chief's registration replaced worker/1's partition of the same handle on the ps,
  // and each ran the other's partition: steps that never finished, and a checkpoint that sent
  // tensors to worker/1.)
  std::string handle_prefix;
  uint64_t handle_seq = 0;
  std::shared_ptr<StepDispatcher> router;  // may dispatch steps over the data plane (may be null)
  std::string task;                // this master's task prefix
  std::shared_ptr<DirectSteps> direct;  // where direct-step plans are published (may be null)
  Status stopping;                 // set when the master exits: every run is answered with it
  // The hang report's view (core/hang_report.h): runs in flight and plans, published for the
  // report's thread.
  std::shared_ptr<std::atomic<size_t>> published_runs = std::make_shared<std::atomic<size_t>>(0);
  std::shared_ptr<std::atomic<size_t>> published_plans = std::make_shared<std::atomic<size_t>>(0);
  DumpReporter reporter;
  void publish() {
    published_runs->store(inflight.size(), std::memory_order_relaxed);
    published_plans->store(plans.size(), std::memory_order_relaxed);
  }
  static constexpr const char* name = "master";
};

// Self-message: (step_id, device) of a step dispatched over the data plane ran past its timeout.
using steptimeout_atom = caf::atom_constant<caf::atom("steptmo")>;
// The master's interface with its private timer.
using master_impl_t = master_actor_t::extend<caf::reacts_to<steptimeout_atom, int64_t, std::string>>;
using MasterActor = master_impl_t::stateful_base<MasterState>;

}  // namespace

std::string plan_key(const RunRequest& r) {
  std::string k = std::to_string(r.graph_id) + "#" + std::to_string(r.graph->num_nodes()) + "#" +
                  std::to_string(r.membership_epoch) + "#" + std::to_string(r.devices.size()) + "#" +
                  (r.placement.allow_soft_placement ? "s" : "h") + (r.placement.mixed_bfloat16 ? "b" : "f") +
                  (r.placement.fuse_kernels ? "F" : "u") + "#" + r.placement.default_device + "|";
  for (const auto& f : r.sig.feeds) k += f + ",";
  k += "|";
  for (const auto& f : r.sig.fetches) k += f + ",";
  k += "|";
  for (const auto& f : r.sig.targets) k += f + ",";
  k += "|";
  for (const auto& [from, to] : r.placement.task_aliases) k += from + ">" + to + ",";
  return k;
}

std::string partition_handle_prefix(const std::string& task) {
  std::random_device rd;
  char nonce[17];
  std::snprintf(nonce, sizeof nonce, "%08x%08x", static_cast<unsigned>(rd()), static_cast<unsigned>(rd()));
  return "m" + task + "." + nonce;
}

namespace {

// Plans the step (runtime/step_plan.h) and fills `plan` (not yet registered) and the partition
// graphs, giving each partition this master's device reference and a fresh handle.
Status build_plan(MasterState& st, const RunRequest& req, Plan& plan, std::vector<GraphPtr>& graphs) {
  const std::vector<DeviceInfo>& devices = req.devices.empty() ? st.devices : req.devices;
  std::vector<AvailableDevice> avail;
  for (const auto& d : devices) avail.push_back(AvailableDevice{d.name, d.type});
  PlacerOptions popts;
  static_cast<PlacementOptions&>(popts) = req.placement;
  if (popts.default_device.empty()) popts.default_device = st.default_device;
  popts.has_kernel = [](const std::string& op, const std::string& type) { return KernelRegistry::global().has(op, type); };
  PartitionOptions part;
  // Each key carries its sender's incarnation, as the device list says it now (a plan is rebuilt
  // when the membership changes).
  std::map<std::string, uint64_t> incarnations;
  for (const auto& d : devices) incarnations[d.name] = d.incarnation;
  part.incarnation_of = [&incarnations](const std::string& device) {
    auto it = incarnations.find(device);
    return it == incarnations.end() ? uint64_t{0} : it->second;
  };
  AF_ASSIGN_OR_RETURN(StepPlan sp, plan_step(*req.graph, req.sig, avail, popts, part));
  if (popts.log_device_placement) {
    std::string out = "Device mapping:\n";
    for (const auto& d : devices) out += d.name + " -> " + d.description + "\n";
    out += "\n";
    for (const auto& l : sp.placement_log) out += l + "\n";
    std::cout << out << std::flush;
  }
  plan.num_fetches = sp.num_fetches;
  plan.feed_names = std::move(sp.feed_names);
  plan.arg_types = std::move(sp.arg_types);
  plan.arg_shapes = std::move(sp.arg_shapes);
  for (auto& p : sp.partitions) {
    const DeviceInfo* dev = nullptr;
    for (const auto& d : devices)
      if (d.name == p.device) dev = &d;
    if (!dev) return Internal("placer chose unknown device " + p.device);
    PartitionRef ref;
    ref.device = *dev;
    ref.handle = st.handle_prefix + "_p" + std::to_string(++st.handle_seq);
    ref.arg_indices = std::move(p.arg_indices);
    ref.retval_indices = std::move(p.retval_indices);
    ref.forwarder = p.forwarder;
    ref.forwards = std::move(p.forwards);
    plan.partitions.push_back(std::move(ref));
    graphs.push_back(std::move(p.graph));
  }
  return Status::OK();
}

Status validate_feeds(const Plan& plan, const RunRequest& req) {
  return check_feeds(req.sig.feeds, plan.arg_types, plan.arg_shapes, req.feeds);
}

// The direct-step form of a registered plan (see actors/direct_step.h), or null when some
// partition computes in this process or takes feeds on another, or a fetch comes from no
// remote partition.
std::shared_ptr<const DirectPlan> make_direct_plan(MasterActor* self, const Plan& plan) {
  auto dp = std::make_shared<DirectPlan>();
  std::vector<bool> fetched(plan.num_fetches, false);
  std::vector<DirectPlan::Forward> forwards;
  for (const auto& part : plan.partitions) {
    if (device_ref(self, part.device).on_other_process()) {
      if (!part.arg_indices.empty()) return nullptr;
      dp->dispatches.push_back(DirectPlan::Dispatch{part.device, part.handle, {}});
      for (int r : part.retval_indices)
        if (r >= 0 && static_cast<size_t>(r) < fetched.size()) fetched[static_cast<size_t>(r)] = true;
    } else {
      if (!part.forwarder) return nullptr;
      for (const auto& f : part.forwards) {
        if (!f.key.valid() || f.arg < 0 || static_cast<size_t>(f.arg) >= plan.arg_types.size()) return nullptr;
        forwards.push_back(f);
      }
    }
  }
  // Each forwarded feed travels with the run request of the partition that receives it.
  for (const auto& f : forwards) {
    const std::string& dst = f.key.dst_device();
    bool placed = false;
    for (auto& d : dp->dispatches)
      if (d.device.name == dst) {
        d.forwards.push_back(f);
        placed = true;
        break;
      }
    if (!placed) return nullptr;
  }
  if (dp->dispatches.empty()) return nullptr;
  for (bool f : fetched)
    if (!f) return nullptr;
  dp->feed_names = plan.feed_names;
  dp->arg_types = plan.arg_types;
  dp->arg_shapes = plan.arg_shapes;
  dp->num_fetches = plan.num_fetches;
  dp->from_task = self->state.task;
  return dp;
}

struct StepRun {
  int64_t step_id;
  size_t pending;
  std::vector<Tensor> fetches;
  bool failed = false;
  caf::response_promise rp;
  std::vector<std::string> devices;
  std::function<void(const Status&)> fail;
  // Partitions dispatched over the data plane whose stepdone has not arrived (device names).
  std::set<std::string> dispatched;
  std::function<void()> one_done;  // a partition finished OK
  std::chrono::milliseconds timeout{0};  // the step's deadline (0: none)
  // One registered wait per partition that has not reported (core/waits.h), by device name.
  std::map<std::string, WaitHandle> waits;
  void wait_for(const std::string& device, const std::string& master_task) {
    waits.emplace(device, WaitHandle("step", "master of " + master_task + ": step " + std::to_string(step_id) +
                                                 ": the partition on " + device + " has not reported",
                                     task_of_device(device)));
  }
};

void send_abort(MasterActor* self, const DeviceInfo& d, int64_t step_id, const std::string& why) {
  device_ref(self, d).abort(step_id, why);
}

void run_plan(MasterActor* self, std::shared_ptr<Plan> plan, RunRequestPtr req, caf::response_promise rp) {
  if (!self->state.stopping.ok()) {
    rp.deliver(to_caf_error(self->state.stopping));
    return;
  }
  if (!plan->error.ok()) {
    rp.deliver(to_caf_error(plan->error));
    return;
  }
  Status fs = validate_feeds(*plan, *req);
  if (!fs.ok()) {
    rp.deliver(to_caf_error(fs));
    return;
  }
  auto run = std::make_shared<StepRun>();
  run->step_id = req->step_id != 0 ? req->step_id : next_step_id();
  run->pending = plan->partitions.size();
  run->fetches.resize(plan->num_fetches);
  run->rp = rp;
  if (run->pending == 0) {
    rp.deliver(std::move(run->fetches));
    return;
  }
  for (const auto& p : plan->partitions) {
    run->devices.push_back(p.device.name);
    run->wait_for(p.device.name, self->state.task);
  }
  self->state.inflight[run->step_id] = run;
  self->state.publish();
  std::weak_ptr<StepRun> weak_run = run;  // the run owns this function: no cycle
  run->fail = [self, plan, weak_run](const Status& s) {
    auto run = weak_run.lock();
    if (!run || run->failed) return;
    run->failed = true;
    run->waits.clear();
    for (const auto& p : plan->partitions) send_abort(self, p.device, run->step_id, s.message());
    run->rp.deliver(to_caf_error(s));
    self->state.inflight.erase(run->step_id);
    self->state.publish();
  };
  const caf::duration timeout = req->timeout.count() > 0 ? caf::duration{req->timeout} : caf::duration{caf::infinite};
  run->timeout = req->timeout;
  run->one_done = [self, weak_run, req] {
    auto run = weak_run.lock();
    if (!run || run->failed) return;
    if (--run->pending == 0) {
      // Fault injection: a fetched global step drives at_step faults of this process.
      for (size_t i = 0; i < req->sig.fetches.size() && i < run->fetches.size(); ++i)
        if (is_global_step_name(req->sig.fetches[i]) && run->fetches[i].dtype() == DType::kInt64 &&
            run->fetches[i].num_elements() == 1)
          FaultInjector::global().on_global_step(run->fetches[i].data<int64_t>()[0]);
      run->rp.deliver(std::move(run->fetches));
      run->waits.clear();
      self->state.inflight.erase(run->step_id);
      self->state.publish();
    }
  };
  auto& router = self->state.router;
  const bool may_dispatch = static_cast<bool>(router);  // faults or not: one step path
  for (const auto& part : plan->partitions) {
    // Over the data plane: a remote partition without arguments, on an open connection.
    if (may_dispatch && part.arg_indices.empty() && device_ref(self, part.device).on_other_process() &&
        router->can_dispatch(part.device.name)) {
      run->dispatched.insert(part.device.name);
      Status s = router->dispatch_step(part.device.name, part.handle, run->step_id, self->state.task);
      if (!s.ok()) {
        run->fail(s);
        return;
      }
      if (req->timeout.count() > 0)
        self->delayed_send(self, req->timeout, steptimeout_atom::value, run->step_id, part.device.name);
      continue;
    }
    std::vector<Tensor> args;
    for (int idx : part.arg_indices) {
      if (static_cast<size_t>(idx) >= args.size()) args.resize(static_cast<size_t>(idx) + 1);
      args[static_cast<size_t>(idx)] = req->feeds[static_cast<size_t>(idx)];
    }
    const std::string dev_name = part.device.name;
    auto on_ok = [run, dev_name](std::vector<Tensor>& retvals) {
      if (run->failed) return;
      run->waits.erase(dev_name);
      for (size_t i = 0; i < retvals.size() && i < run->fetches.size(); ++i)
        if (retvals[i].is_initialized()) run->fetches[i] = std::move(retvals[i]);
      run->one_done();
    };
    auto on_err = [run, dev_name](caf::error& err) {
      if (err == caf::sec::request_timeout) run->fail(step_deadline_error(run->step_id, dev_name, run->timeout));
      else run->fail(from_caf_error(err, dev_name));
    };
    device_ref(self, part.device).request_run(timeout, part.handle, run->step_id, std::move(args)).then(on_ok, on_err);
  }
}

master_impl_t::behavior_type master_actor(MasterActor* self, std::vector<DeviceInfo> devices, std::string default_device,
                           std::shared_ptr<StepDispatcher> router, std::shared_ptr<DirectSteps> direct) {
  self->state.router = std::move(router);
  self->state.direct = std::move(direct);
  // Stopping (Server::stop sends the exit): every run still waiting for its plan or its
  // partitions is answered, so no session's thread waits for a master that is gone.
  ignore_remote_exits(self, "master actor", [self](const caf::error& reason) {
    auto& st = self->state;
    const Status s = Cancelled("the server stopped while the step ran (" + caf::to_string(reason) + ")");
    st.stopping = s;
    std::set<std::shared_ptr<Plan>> waiting = st.registering;
    for (auto& [key, plan] : st.plans) waiting.insert(plan);
    std::vector<std::function<void()>> waiters;
    for (const auto& plan : waiting) {
      for (auto& w : plan->waiters) waiters.push_back(std::move(w));
      plan->waiters.clear();
    }
    st.registering.clear();
    for (auto& w : waiters) w();  // run_plan answers `stopping`
    auto inflight = st.inflight;
    for (auto& [id, run] : inflight)
      if (run->fail) run->fail(s);
  });
  self->state.task = task_of_device(default_device);
  self->state.reporter = DumpReporter(
      "master " + self->state.task,
      [runs = self->state.published_runs, plans = self->state.published_plans] {
        return "runs in flight: " + std::to_string(runs->load(std::memory_order_relaxed)) +
               ", plans: " + std::to_string(plans->load(std::memory_order_relaxed)) + "\n";
      });
  self->state.handle_prefix = partition_handle_prefix(self->state.task);
  // Step ids (next_step_id) must be unique across every master that uses a device (several
  // workers' masters share the ps devices): random 62-bit start.
  self->state.devices = std::move(devices);
  self->state.default_device = std::move(default_device);
  return {
      [=](run_atom, const RunRequestPtr& req) -> caf::result<std::vector<Tensor>> {
        auto rp = self->make_response_promise();
        auto& st = self->state;
        const std::string key = plan_key(*req);
        auto it = st.plans.find(key);
        if (it != st.plans.end()) {
          auto plan = it->second;
          if (plan->ready) run_plan(self, plan, req, rp);
          else plan->waiters.push_back([=] { run_plan(self, plan, req, rp); });
          return caf::delegated<std::vector<Tensor>>();
        }
        auto plan = std::make_shared<Plan>();
        std::vector<GraphPtr> graphs;
        Status s = build_plan(st, *req, *plan, graphs);
        if (!s.ok()) {
          // Not cached: the client may fix the graph and retry. (The promise owns the reply.)
          rp.deliver(to_caf_error(s));
          return caf::delegated<std::vector<Tensor>>();
        }
        st.plans[key] = plan;
        st.registering.insert(plan);
        st.publish();
        plan->waiters.push_back([=] { run_plan(self, plan, req, rp); });
        auto remaining = std::make_shared<size_t>(plan->partitions.size());
        auto finish_registration = [=] {
          auto& state = self->state;
          plan->ready = true;
          state.registering.erase(plan);
          if (plan->error.ok() && state.direct)
            if (auto dp = make_direct_plan(self, *plan)) state.direct->publish(key, std::move(dp));
          auto waiters = std::move(plan->waiters);
          plan->waiters.clear();
          // A failed plan leaves the cache, unless a newer plan of the same key replaced it there
          // (this one was dropped when a task it used went down).
          auto cached = state.plans.find(key);
          if (!plan->error.ok() && cached != state.plans.end() && cached->second == plan) state.plans.erase(cached);
          for (auto& w : waiters) w();
        };
        if (*remaining == 0) {
          finish_registration();
          return caf::delegated<std::vector<Tensor>>();
        }
        for (size_t i = 0; i < plan->partitions.size(); ++i) {
          const auto& part = plan->partitions[i];
          const std::string dev_name = part.device.name;
          auto on_ok = [=](bool) {
            if (--*remaining == 0) finish_registration();
          };
          auto on_err = [=](caf::error& err) {
            if (plan->error.ok()) plan->error = from_caf_error(err, dev_name);
            if (--*remaining == 0) finish_registration();
          };
          device_ref(self, part.device)
              .request_register(caf::duration{std::chrono::seconds(60)}, part.handle, graphs[i])
              .then(on_ok, on_err);
        }
        return caf::delegated<std::vector<Tensor>>();
      },
      [=](stepret_atom, int64_t step_id, const std::string& dev, int32_t index, Tensor& t) {
        auto it = self->state.inflight.find(step_id);
        if (it == self->state.inflight.end()) return;  // failed or finished already
        auto run = it->second;
        if (run->failed || !run->dispatched.count(dev)) return;
        if (index >= 0 && static_cast<size_t>(index) < run->fetches.size()) run->fetches[static_cast<size_t>(index)] = std::move(t);
      },
      [=](stepdone_atom, int64_t step_id, const std::string& dev, const Status& outcome) {
        auto it = self->state.inflight.find(step_id);
        if (it == self->state.inflight.end()) return;
        auto run = it->second;
        if (run->failed || !run->dispatched.erase(dev)) return;
        run->waits.erase(dev);
        if (!outcome.ok()) {
          run->fail(outcome);
          return;
        }
        run->one_done();
      },
      [=](steptimeout_atom, int64_t step_id, const std::string& dev) {
        auto it = self->state.inflight.find(step_id);
        if (it == self->state.inflight.end()) return;
        auto run = it->second;
        if (run->failed || !run->dispatched.count(dev)) return;
        run->fail(step_deadline_error(step_id, dev, run->timeout));
      },
      [=](devices_atom) { return self->state.devices; },
      [=](devices_atom, std::vector<DeviceInfo>& devs) {
        self->state.devices = std::move(devs);
        self->state.plans.clear();
        if (self->state.direct) self->state.direct->clear_plans();
      },
      [=](down_atom, const std::string& task, const std::string& reason) {
        auto& st = self->state;
        if (st.direct) st.direct->task_down(task, reason);
        const std::string prefix = task + "/";
        std::vector<std::shared_ptr<StepRun>> hit;
        for (auto& [id, run] : st.inflight)
          for (const auto& d : run->devices)
            if (d.rfind(prefix, 0) == 0) { hit.push_back(run); break; }
        for (auto& run : hit) run->fail(Unavailable("task " + task + " failed during step " +
                                                    std::to_string(run->step_id) + ": " + reason));
        // Partitions registered there are gone with it: rebuild plans that used it.
        for (auto it = st.plans.begin(); it != st.plans.end();) {
          bool uses = false;
          for (const auto& p : it->second->partitions)
            if (p.device.name.rfind(prefix, 0) == 0) uses = true;
          if (uses) it = st.plans.erase(it);
          else ++it;
        }
      },
  };
}

}  // namespace

master_actor_t spawn_master_actor(caf::actor_system& sys, std::vector<DeviceInfo> devices, std::string default_device,
                              std::shared_ptr<StepDispatcher> router, std::shared_ptr<DirectSteps> direct) {
  return sys.spawn(master_actor, std::move(devices), std::move(default_device), std::move(router), std::move(direct));
}

}  // namespace actorflow
