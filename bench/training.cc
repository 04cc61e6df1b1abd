// Training throughput of the seed CNN: one worker next to PyTorch (same model, batch and
// optimizer, one thread, measured in the same run by bench/torch_cnn.py with Debian's
// python3-torch; skipped with a message when it is not installed), and the aggregate images/s
// of 1, 2 and 3 workers with one ps, all tasks in this process on loopback. Then (unless
// --job-steps 0) the seed's whole job against TensorFlow's own runtime: 1 ps + 3 workers as
// processes on loopback, JOB_STEPS global steps (default 5000), wall time from launch to the last
// worker's exit and worker 0's test accuracy, actorflow (`actorflow up -- samples/distributed_cnn`)
// and TensorFlow (bench/tf_cnn.py with .venv-tf's python, created by bench/tf_venv.sh; --no-tf or
// a failure to create it skips it with the reason), and the ratio of the wall times. With --bf16
// both sides of the job compute MatMul and the convolutions with bfloat16 operands: actorflow by
// its cluster file's [server] mixed_precision = "bfloat16", TensorFlow by casting those ops'
// operands to bfloat16 and their results back (what Keras' mixed_bfloat16 policy does per layer,
// variables float32).
// With --imported, the job runs three times on actorflow instead, without TensorFlow: the model
// built with actorflow's API (fc 1024), then TensorFlow's own GraphDef of it imported by every
// worker (`samples/distributed_cnn --graph-def`), as TensorFlow 2.21 wrote it
// (tests/data/tf_graph/seed_cnn_train_ref.pb) and as TensorFlow 1.15 did (tf1_15/ there), each
// with the ratio of its wall time to the API job's.
//   build/bench/training [steps_per_worker=60] [--job-steps 5000] [--no-tf] [--bf16] [--imported]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <iostream>
#include <thread>

#include "actorflow/actorflow.h"
#include "core/logging.h"
#include "models/mnist_cnn.h"
#include "net/port_reservation.h"

namespace af = actorflow;

namespace {

// A loopback port reserved for this process (net/port_reservation.h), or 0 (the cluster file
// check then reports the bad address).
int free_port() {
  auto p = af::net::reserve_port_for_process();
  return p.ok() ? *p : 0;
}

// Aggregate images/s of `workers` workers each doing `steps` local steps.
double run_cluster(int workers, int64_t steps) {
  std::map<std::string, std::vector<std::string>> jobs;
  jobs["ps"] = {"localhost:" + std::to_string(free_port())};
  for (int i = 0; i < workers; ++i) jobs["worker"].push_back("localhost:" + std::to_string(free_port()));
  auto cluster = af::ClusterSpec::from_jobs(jobs);
  auto ps = af::Server::create(*cluster, af::TaskId{"ps", 0});
  if (!ps.ok()) { std::cerr << ps.status() << "\n"; return 0; }
  std::vector<std::unique_ptr<af::Server>> servers;
  for (int i = 0; i < workers; ++i) servers.push_back(std::move(*af::Server::create(*cluster, af::TaskId{"worker", i})));
  std::vector<double> ips(static_cast<size_t>(workers), 0);
  std::vector<std::thread> th;
  for (int i = 0; i < workers; ++i) {
    th.emplace_back([&, i] {
      af::CnnOptions mo;
      mo.worker_device = "/job:worker/task:" + std::to_string(i);
      af::CnnTrainOptions to;
      to.steps = steps * workers;  // global steps: each worker does about `steps`
      to.print_every = 0;
      to.task_index = i;
      to.is_chief = i == 0;
      to.out = [](const std::string&) {};
      auto r = af::train_mnist_cnn_worker(*servers[static_cast<size_t>(i)], mo, to);
      if (r.ok()) ips[static_cast<size_t>(i)] = r->images_per_sec;
      else std::cerr << "worker " << i << ": " << r.status() << "\n";
    });
  }
  for (auto& t : th) t.join();
  double sum = 0;
  for (double v : ips) sum += v;
  return sum;
}

double torch_images_per_sec(int steps) {
  if (access("/usr/bin/python3", X_OK) != 0) return -1;
  const std::string cmd = "/usr/bin/python3 " + std::string(AF_SOURCE_DIR) + "/bench/torch_cnn.py --bench-steps " +
                          std::to_string(steps) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char line[512];
  double v = -1;
  while (fgets(line, sizeof line, p)) {
    if (std::sscanf(line, "torch_images_per_sec %lf", &v) == 1) break;
    if (std::string(line).find("No module named 'torch'") != std::string::npos) v = -2;
  }
  pclose(p);
  return v;
}

// The seed's job on actorflow: `actorflow up -- distributed_cnn --steps N`, 1 ps + 3 workers.
// Wall seconds and worker 0's test accuracy; false with the reason when it failed.
bool actorflow_job(int64_t steps, bool bf16, double* wall, double* accuracy, std::string* why,
                   const std::string& extra_args = "") {
  char tmpl[] = "/tmp/af_training_job_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string file = dir + "/cluster.toml";
  FILE* f = std::fopen(file.c_str(), "w");
  if (!f) return *why = "cannot write " + file, false;
  std::fprintf(f, "[jobs]\nps = [\"localhost:%d\"]\nworker = [\"localhost:%d\", \"localhost:%d\", \"localhost:%d\"]\n",
               free_port(), free_port(), free_port(), free_port());
  if (bf16) std::fprintf(f, "[server]\nmixed_precision = \"bfloat16\"\n");
  // Its own logdir: the default ./logs would restore an earlier run's final checkpoint and end at once.
  std::fprintf(f, "[supervisor]\nlogdir = \"%s/logs\"\n", dir.c_str());
  std::fclose(f);
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  const std::string exe = n > 0 ? std::string(self, static_cast<size_t>(n)) : "";
  const std::string build = exe.substr(0, exe.rfind('/')) + "/..";
  const std::string cmd = "'" + build + "/actorflow' up --cluster '" + file + "' -- '" + build +
                          "/samples/distributed_cnn' --steps " + std::to_string(steps) + " --print-every 1000" + extra_args +
                          " 2>" + dir + "/up.log";
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return *why = "cannot start actorflow up", false;
  char line[512];
  *accuracy = -1;
  bool worker0 = false;
  while (fgets(line, sizeof line, p)) {
    // Each worker prints its own "Test-Accuracy:"; `up` prefixes nothing, so take the first
    // (every worker evaluates the same model at the end).
    double a;
    if (std::sscanf(line, "Test-Accuracy: %lf", &a) == 1 && !worker0) {
      *accuracy = a;
      worker0 = true;
    }
  }
  const int rc = pclose(p);
  *wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rc != 0 || *accuracy < 0) return *why = "the job failed; its log is " + dir + "/up.log", false;
  std::system(("rm -rf '" + dir + "'").c_str());
  return true;
}

// The same job on TensorFlow's runtime (bench/tf_cnn.py).
bool tensorflow_job(const std::string& python, int64_t steps, bool bf16, double* wall, double* accuracy,
                    std::string* why) {
  const std::string cmd = "TF_CPP_MIN_LOG_LEVEL=2 '" + python + "' '" + std::string(AF_SOURCE_DIR) +
                          "/bench/tf_cnn.py' --steps " + std::to_string(steps) + " --workers 3" +
                          (bf16 ? " --bf16" : "") + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return *why = "cannot start " + python, false;
  std::string out;
  char buf[4096];
  while (size_t k = fread(buf, 1, sizeof buf, p)) out.append(buf, k);
  const int rc = pclose(p);
  const auto at = out.find("tf wall_secs=");
  if (rc != 0 || at == std::string::npos)
    return *why = "TensorFlow's run failed:\n" + out.substr(out.size() > 3000 ? out.size() - 3000 : 0), false;
  std::sscanf(out.c_str() + at, "tf wall_secs=%lf test_accuracy=%lf", wall, accuracy);
  return true;
}

// .venv-tf's python (bench/tf_venv.sh creates it), or "" with the reason printed.
std::string tf_python() {
  FILE* p = popen(("bash '" + std::string(AF_SOURCE_DIR) + "/bench/tf_venv.sh' 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  const int rc = p ? pclose(p) : -1;
  std::string last = out;
  while (!last.empty() && (last.back() == '\n' || last.back() == ' ')) last.pop_back();
  last = last.substr(last.find_last_of('\n') == std::string::npos ? 0 : last.find_last_of('\n') + 1);
  if (rc == 0 && access(last.c_str(), X_OK) == 0) return last;
  std::printf("TensorFlow baseline skipped: %s\n", out.c_str());
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 60, job_steps = 5000;
  bool tf = true, bf16 = false, imported = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-tf") tf = false;
    else if (a == "--bf16") bf16 = true;
    else if (a == "--imported") imported = true;
    else if (a == "--job-steps" && i + 1 < argc) job_steps = std::atoll(argv[++i]);
    else if (!a.empty() && std::isdigit(static_cast<unsigned char>(a[0]))) steps = std::atoll(a.c_str());
    else {
      std::fprintf(stderr, "training: unknown argument '%s' (usage: training [steps_per_worker] [--job-steps N] [--no-tf] [--bf16] [--imported])\n",
                   a.c_str());
      return 2;
    }
  }
  if (steps < 1 || job_steps < 0) {
    std::fprintf(stderr, "training: steps_per_worker must be >= 1 and --job-steps >= 0\n");
    return 2;
  }
  setenv("AF_MIN_LOG_LEVEL", "1", 0);
  af::set_min_log_level(af::LogLevel::WARNING);
  if (imported) {
    std::printf("seed CNN job (fc 1024), 1 ps + 3 workers as processes on loopback, %lld global steps, Adam 1e-4, "
                "batch 50: built with actorflow's API, then TensorFlow's GraphDef of it imported\n",
                static_cast<long long>(job_steps));
    std::fflush(stdout);
    double api_wall = 0, api_acc = 0, gd_wall = 0, gd_acc = 0;
    std::string why;
    if (!actorflow_job(job_steps, false, &api_wall, &api_acc, &why, " --hidden 1024")) {
      std::printf("actorflow API job FAILED: %s\n", why.c_str());
      return 1;
    }
    std::printf("actorflow's API:        %7.1f s wall, test accuracy %.4f\n", api_wall, api_acc);
    std::fflush(stdout);
    for (const char* version : {"2.21", "1.15"}) {
      const std::string graph = std::string(AF_SOURCE_DIR) + "/tests/data/tf_graph/" +
                                (version[0] == '1' ? "tf1_15/" : "") + "seed_cnn_train_ref.pb";
      if (!actorflow_job(job_steps, false, &gd_wall, &gd_acc, &why, " --graph-def '" + graph + "'")) {
        std::printf("imported GraphDef (TensorFlow %s) job FAILED: %s\n", version, why.c_str());
        return 1;
      }
      std::printf("TensorFlow %s's GraphDef: %7.1f s wall, test accuracy %.4f; imported / API wall time = %.2f\n",
                  version, gd_wall, gd_acc, gd_wall / api_wall);
      std::fflush(stdout);
    }
    return 0;
  }
  std::printf("seed CNN, batch 50, Adam; %lld steps per worker; oneDNN one thread per kernel\n",
              static_cast<long long>(steps));
  const double torch = torch_images_per_sec(static_cast<int>(steps));
  double one = 0;
  for (int w = 1; w <= 3; ++w) {
    const double ips = run_cluster(w, steps);
    if (w == 1) one = ips;
    std::printf("workers %d (1 ps): %8.1f images/s aggregate  (%.2fx one worker)\n", w, ips, one > 0 ? ips / one : 0);
  }
  if (torch > 0)
    std::printf("PyTorch one thread: %8.1f images/s; actorflow one worker / PyTorch = %.2f\n", torch, one / torch);
  else
    std::printf("PyTorch baseline skipped: /usr/bin/python3 with python3-torch is not installed\n");
  if (job_steps == 0) return 0;
  std::printf("\nseed CNN job, 1 ps + 3 workers as processes on loopback, %lld global steps, Adam 1e-4, batch 50\n",
              static_cast<long long>(job_steps));
  std::fflush(stdout);
  double af_wall = 0, af_acc = 0;
  std::string why;
  if (bf16) std::printf("bfloat16 operands for MatMul and the convolutions on both sides\n");
  if (!actorflow_job(job_steps, bf16, &af_wall, &af_acc, &why)) {
    std::printf("actorflow job FAILED: %s\n", why.c_str());
    return 1;
  }
  std::printf("actorflow:  %7.1f s wall, test accuracy %.4f\n", af_wall, af_acc);
  std::fflush(stdout);
  const std::string python = tf ? tf_python() : "";
  if (python.empty()) return 0;
  double tf_wall = 0, tf_acc = 0;
  if (!tensorflow_job(python, job_steps, bf16, &tf_wall, &tf_acc, &why)) {
    std::printf("TensorFlow job FAILED: %s\n", why.c_str());
    return 1;
  }
  std::printf("TensorFlow: %7.1f s wall, test accuracy %.4f\n", tf_wall, tf_acc);
  std::printf("actorflow is %.2fx TensorFlow's speed (wall time ratio TF / actorflow)\n", tf_wall / af_wall);
  return 0;
}
