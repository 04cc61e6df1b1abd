// Subcommands of the actorflow binary. Each returns the process exit code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace actorflow {
namespace cli {

struct DemoOptions {
  int64_t steps = 0;    // 0 = the demo's default
  int workers = 2;
  float learning_rate = 1e-3f;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
};
// `actorflow demo`: the main job on an embedded local cluster.
int run_demo(const DemoOptions& opts);

struct NodeOptions {
  std::string cluster;
  std::string job;
  int task = 0;
};
// `actorflow node`: serve one task until SIGINT/SIGTERM.
int run_node(const NodeOptions& opts);

struct StatusOptions {
  std::string cluster;
  int timeout_ms = 2000;
};
struct UpOptions {
  std::string cluster;
  std::vector<std::string> program;  // empty: `actorflow node` per task
};
// `actorflow up`: run and supervise every local task. Exit 0 when every task finished
// normally or on SIGINT/SIGTERM; 1 when a task failed more than max_restarts times.
int run_up(const UpOptions& opts);

// `actorflow status`: each task up or down, with its devices. Exit 0 when all are up.
int run_status(const StatusOptions& opts);

}  // namespace cli
}  // namespace actorflow
