// `actorflow chaos --cluster F --plan P`: applies a seeded fault plan to a running cluster.
//
// The plan is checked here first (syntax, kinds, tasks of the cluster), then its text goes to the
// node actor of every task as (fault_atom, plan_toml) over an authenticated connection (the same
// handshake as `actorflow status`); each task loads the faults it takes part in
// (FaultInjector::load) and answers with their descriptions, which are printed per task.
#include <fstream>
#include <iostream>
#include <sstream>

#include "actorflow/embedding.h"
#include "actors/faults.h"
#include "cli/commands.h"

namespace actorflow {
namespace cli {

int run_chaos(const ChaosOptions& o) {
  auto cluster = load_cluster(o.cluster);
  if (!cluster.ok()) {
    std::cerr << "actorflow chaos: " << cluster.status().message() << "\n";
    return 2;
  }
  std::string text;
  if (!o.clear) {
    if (o.plan.empty()) {
      std::cerr << "actorflow chaos: --plan FILE (or --clear) is required\n";
      return 2;
    }
    auto plan = FaultPlan::from_file(o.plan);
    Status st = plan.ok() ? check_plan_tasks(*plan, *cluster) : plan.status();
    if (!st.ok()) {
      std::cerr << "actorflow chaos: " << st.message() << "\n";
      return 2;
    }
    std::cout << "plan " << o.plan << " (seed " << plan->seed << "): " << plan->faults.size() << " fault(s)\n";
    for (size_t i = 0; i < plan->faults.size(); ++i) {
      auto start = plan->start_secs(i);
      std::cout << "  [" << i << "] " << plan->faults[i].describe();
      if (start) std::cout << " (starts at t=" << *start << " s after load)";
      std::cout << "\n";
    }
    text = plan->to_toml();  // canonical and already validated; tasks re-parse it
  }
  caf::actor_system_config cfg;
  Server::configure(cfg);
  caf::actor_system sys{cfg};
  auto mc = tool_membership_config(*cluster, "_chaos");
  if (!mc.ok()) {
    std::cerr << "actorflow chaos: " << mc.status().message() << "\n";
    return 2;
  }
  Membership m(sys, *mc);
  std::vector<std::string> failed;
  ScopedActor self{sys};
  for (const auto& t : cluster->all_tasks()) {
    auto addr = cluster->task_address(t);
    std::cout << t.to_string() << "  ";
    auto p = m.ensure(t.device_prefix(), *addr, std::chrono::milliseconds(o.timeout_ms));
    if (!p.ok()) {
      std::cout << "UNREACHABLE  (" << p.status().message() << ")\n";
      failed.push_back(t.to_string());
      continue;
    }
    self->request(p->node, std::chrono::milliseconds(o.timeout_ms) + std::chrono::seconds(5), fault_atom::value, text)
        .receive(
            [&](const std::vector<std::string>& loaded) {
              if (o.clear) std::cout << "cleared\n";
              else if (loaded.empty()) std::cout << "nothing applies\n";
              else std::cout << "applied " << loaded.size() << " fault(s)\n";
              for (const auto& d : loaded) std::cout << "    " << d << "\n";
            },
            [&](caf::error& e) {
              std::cout << "REFUSED  (" << from_caf_error(e, "task " + t.to_string()).message() << ")\n";
              failed.push_back(t.to_string());
            });
  }
  std::cout << std::flush;
  if (!failed.empty()) {
    std::string list;
    for (const auto& f : failed) list += (list.empty() ? "" : ", ") + f;
    std::cerr << "actorflow chaos: could not apply the plan to " << list << "\n";
    return 1;
  }
  return 0;
}

}  // namespace cli
}  // namespace actorflow
