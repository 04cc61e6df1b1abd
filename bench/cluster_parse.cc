// Parsing a large cluster file: the time ClusterSpec::from_file takes for N tasks (default 40 000,
// about 0.8 MiB, inside the reader's 1 MiB cap), one job, each task on 127.0.0.1 with its own
// port. Parsing is linear in tasks (docs/security.md "Readers of files"); this shows it.
//
//   build/bench/cluster_parse [tasks]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "config/cluster.h"

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 40000;
  if (n < 1 || n > 60000) {
    std::fprintf(stderr, "usage: cluster_parse [tasks, 1..60000]\n");
    return 2;
  }
  char tmpl[] = "/tmp/af-cluster-parse-XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) return 1;
  std::string text = "[jobs]\nw = [";
  for (int i = 0; i < n; ++i) text += (i ? ", \"127.0.0.1:" : "\"127.0.0.1:") + std::to_string(1024 + i) + "\"";
  text += "]\n";
  {
    std::ofstream f(tmpl, std::ios::binary);
    f << text;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto spec = actorflow::ClusterSpec::from_file(tmpl);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::remove(tmpl);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", spec.status().message().c_str());
    return 1;
  }
  std::printf("%d tasks, %zu bytes: parsed in %.3f s\n", n, text.size(), s);
  return 0;
}
