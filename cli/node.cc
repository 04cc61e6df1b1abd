#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <optional>
#include <thread>

#include "actorflow/embedding.h"
#include "actors/faults.h"
#include "cli/commands.h"
#include "core/crash_trace.h"
#include "core/hang_report.h"
#include "core/logging.h"

namespace actorflow {
namespace cli {

Result<ClusterSpec> load_cluster(const std::string& path) {
  if (path.empty()) return InvalidArgument("--cluster FILE is required");
  return ClusterSpec::from_file(path);
}

int run_node(const NodeOptions& o) {
  // Block the stop signals before any thread starts, so every thread inherits the mask and
  // this thread alone receives them through sigwait.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto cluster = load_cluster(o.cluster);
  if (!cluster.ok()) {
    std::cerr << "actorflow node: " << cluster.status().message() << "\n";
    return 2;
  }
  TaskId task{o.job, o.task};
  Status valid = cluster->validate_task(task);
  if (!valid.ok()) {
    std::cerr << "actorflow node: " << valid.message() << "\n";
    return 2;
  }
  std::optional<FaultPlan> plan;
  if (!o.plan.empty()) {
    auto p = FaultPlan::from_file(o.plan);
    Status st = p.ok() ? check_plan_tasks(*p, *cluster) : p.status();
    if (!st.ok()) {
      std::cerr << "actorflow node: " << st.message() << "\n";
      return 2;
    }
    plan = std::move(*p);
    ::unsetenv(kFaultPlanEnv);  // --plan is this task's plan: never load a second one
  }
  auto server = Server::create(*cluster, task);
  if (!server.ok()) {
    std::cerr << "actorflow node: " << server.status().message() << "\n";
    return 1;
  }
  if (plan) {
    auto loaded = FaultInjector::global().load(*plan, task.device_prefix());
    if (!loaded.ok()) {
      std::cerr << "actorflow node: " << loaded.status().message() << "\n";
      return 2;
    }
    std::string summary = "fault plan " + o.plan + " (seed " + std::to_string(plan->seed) + "): " +
                          std::to_string(loaded->size()) + " fault(s) for " + task.to_string() + "\n";
    for (const auto& d : *loaded) summary += "  " + d + "\n";
    std::cout << summary << std::flush;
  }
  // SIGUSR1: the hang report on stderr (core/hang_report.h, docs/architecture/diagnosis.md).
  const std::string name = task.device_prefix();
  // A crash: the task and the crashing thread's stack on stderr (core/crash_trace.h).
  if (Status st = install_crash_backtrace(name); !st.ok())
    AF_LOG(WARNING) << name << ": no backtrace on a crash: " << st.message();
  auto dump = DumpOnSignal::install(SIGUSR1, [name] { return name; });
  if (!dump.ok()) AF_LOG(WARNING) << name << ": no hang report on SIGUSR1: " << dump.status().message();
  std::cout << "actorflow node " << task.to_string() << " serving " << (*server)->target() << std::endl;
  int sig = 0;
  sigwait(&set, &sig);
  AF_LOG(INFO) << "received " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", shutting down " << task.to_string();
  // Bound the shutdown: a stuck peer must not keep the process alive.
  destroy_server_bounded(std::move(*server), std::chrono::seconds(10), 1);
  return 0;
}

}  // namespace cli
}  // namespace actorflow
