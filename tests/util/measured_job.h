// A small training job whose every task serves its metrics, for tests of the tools that read them
// (`actorflow status`, `actorflow dashboard`). Test-only.
#pragma once

#include <signal.h>

#include <chrono>
#include <memory>
#include <string>

#include "tests/util/process.h"

namespace actorflow {
namespace testing {

// 1 ps + 2 workers under `actorflow up` on loopback, each task with a free metrics_port, training
// a small seed-002 CNN for as long as the object lives (SIGTERM to `up` on destruction, bounded).
// `supervisor` is extra `[supervisor]` TOML (e.g. "save_summaries_secs = 1\n"; "@DIR@" in it
// stands for the job's own temporary directory); "" adds none.
struct MeasuredJob {
  TempDir dir;
  std::string file;
  std::unique_ptr<ChildProcess> up;
  explicit MeasuredJob(const std::string& supervisor = "") {
    std::string text = "[jobs]\nps = [\"localhost:" + std::to_string(free_port()) + "\"]\nworker = [\"localhost:" +
                       std::to_string(free_port()) + "\", \"localhost:" + std::to_string(free_port()) + "\"]\n";
    if (!supervisor.empty()) {
      std::string sup = supervisor;
      for (size_t at; (at = sup.find("@DIR@")) != std::string::npos;) sup.replace(at, 5, dir.path());
      text += "[supervisor]\n" + sup;
    }
    for (const char* t : {"ps/0", "worker/0", "worker/1"})
      text += "[tasks.\"" + std::string(t) + "\"]\nmetrics_port = " + std::to_string(free_port()) + "\n";
    file = dir.write("cluster.toml", text);
    up = ChildProcess::start({binary("actorflow"), "up", "--cluster", file, "--", binary("samples/distributed_cnn"),
                              "--steps", "100000", "--print-every", "20", "--conv1", "4", "--conv2", "8", "--hidden", "32"});
  }
  ~MeasuredJob() {
    if (up) {
      up->signal(SIGTERM);
      up->wait(std::chrono::seconds(60));
    }
  }
  MeasuredJob(const MeasuredJob&) = delete;
  MeasuredJob& operator=(const MeasuredJob&) = delete;
};

}  // namespace testing
}  // namespace actorflow
