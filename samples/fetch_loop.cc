// Fetches variables of a parameter server back to back, as a checkpoint or an evaluation reads
// them, and reports lost or late replies and the latency per size. Only the public API.
//
//   fetch_loop --cluster F --job ps                          # serves until SIGINT/SIGTERM
//   fetch_loop --cluster F --job worker [--sizes 1024,6272000,...] [--fetches 1000]
//              [--timeout-secs 10] [--seconds S]
//
// The cluster file has one ps and one worker task (TLS or not, as the file says). The worker puts
// one float variable per size (bytes, rounded down to whole floats) on ps/0, initialises them,
// then fetches each size `--fetches` times (or for `--seconds` per size) with the session's
// deadline at `--timeout-secs`, checking that the fetched values are the initialised ones. One line
// per size:
//   size 6272000 B: 1000 fetches, 0 lost, p50 1.93 ms, p99 2.71 ms, max 9.80 ms
// then "LOST <n>" (every fetch that failed or returned other values) and "WORST-MS <ms>". Exit 0
// when nothing was lost, 1 otherwise, 2 for bad flags or a cluster that cannot start.
#include <CLI/CLI.hpp>

#include <actorflow/actorflow.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace af = actorflow;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<int64_t> parse_sizes(const std::string& list) {
  std::vector<int64_t> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    const long long v = std::stoll(item, &used);
    if (used != item.size() || v < 4) throw std::invalid_argument("size '" + item + "' (bytes, at least 4)");
    out.push_back(v);
  }
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fetch_loop: back-to-back fetches of ps variables, lost replies and latency per size"};
  std::string cluster_file, job, sizes_flag = "1024,65536,1048576,2097152,4194304,6272000,12845056,16777216,67108864";
  int fetches = 1000;
  double timeout_secs = 10, seconds = 0;
  app.add_option("--cluster", cluster_file, "cluster file with one ps and one worker task")->required();
  app.add_option("--job", job, "ps or worker")->required();
  app.add_option("--sizes", sizes_flag, "comma-separated variable sizes in bytes");
  app.add_option("--fetches", fetches, "fetches per size")->check(CLI::Range(1, 100000000));
  app.add_option("--timeout-secs", timeout_secs, "each fetch's deadline")->check(CLI::Range(0.001, 86400.0));
  app.add_option("--seconds", seconds, "fetch each size for this long instead of --fetches times");
  CLI11_PARSE(app, argc, argv);
  auto cluster = af::ClusterSpec::from_file(cluster_file);
  if (!cluster.ok()) {
    std::cerr << "fetch_loop: " << cluster.status() << "\n";
    return 2;
  }
  if (job == "ps") return af::serve_until_signal(*cluster, af::TaskId{"ps", 0}).ok() ? 0 : 1;
  if (job != "worker") {
    std::cerr << "fetch_loop: --job must be ps or worker, not '" << job << "'\n";
    return 2;
  }
  std::vector<int64_t> sizes;
  try {
    sizes = parse_sizes(sizes_flag);
  } catch (const std::exception& e) {
    std::cerr << "fetch_loop: bad --sizes: " << e.what() << "\n";
    return 2;
  }
  auto server = af::Server::create(*cluster, af::TaskId{"worker", 0});
  if (!server.ok()) {
    std::cerr << "fetch_loop: " << server.status() << "\n";
    return 2;
  }
  af::Scope root = af::Scope::root();
  auto ps = root.with_device("/job:ps/task:0");
  std::vector<af::Output> vars;
  for (int64_t bytes : sizes)
    vars.push_back(af::train::get_variable(ps, "v" + std::to_string(bytes), {bytes / 4}, af::DType::kFloat32,
                                           af::train::constant_initializer(0.25f)));
  auto init = af::train::global_variables_initializer(root);
  if (!root.ok() || !init.ok()) {
    std::cerr << "fetch_loop: " << root.status() << " " << init.status() << "\n";
    return 2;
  }
  af::Session sess(root, (*server)->target(),
                   af::SessionOptions{}.timeout(std::chrono::milliseconds(static_cast<int64_t>(timeout_secs * 1000))));
  auto st = sess.run({}, {}, {*init});
  if (!st.ok()) {
    std::cerr << "fetch_loop: initialising: " << st.status() << "\n";
    return 1;
  }
  int64_t lost = 0;
  double worst = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<double> ms;
    int64_t lost_here = 0;
    std::string first_error;
    const auto end = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    for (int i = 0; seconds > 0 ? Clock::now() < end : i < fetches; ++i) {
      const auto t0 = Clock::now();
      auto r = sess.run({vars[k]});
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      bool good = r.ok() && (*r)[0].num_elements() == sizes[k] / 4;
      if (good) {
        const float* p = (*r)[0].data<float>();
        const int64_t n = (*r)[0].num_elements();
        good = p[0] == 0.25f && p[n / 2] == 0.25f && p[n - 1] == 0.25f;
      }
      if (!good) {
        ++lost_here;
        if (first_error.empty()) first_error = r.ok() ? "wrong values" : r.status().to_string();
      }
    }
    lost += lost_here;
    const double mx = ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end());
    worst = std::max(worst, mx);
    std::printf("size %lld B: %zu fetches, %lld lost, p50 %.2f ms, p99 %.2f ms, max %.2f ms%s%s\n",
                static_cast<long long>(sizes[k]), ms.size(), static_cast<long long>(lost_here), percentile(ms, 0.5),
                percentile(ms, 0.99), mx, first_error.empty() ? "" : "; first failure: ", first_error.c_str());
    std::fflush(stdout);
  }
  std::printf("LOST %lld\nWORST-MS %.2f\n", static_cast<long long>(lost), worst);
  std::fflush(stdout);
  af::destroy_server_bounded(std::move(*server), std::chrono::seconds(10), 3, lost ? 1 : 0);
  return lost ? 1 : 0;
}
