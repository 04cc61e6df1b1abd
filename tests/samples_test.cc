// The sample programs run and print what their seeds print.
#include <gtest/gtest.h>

#include <signal.h>

#include <regex>

#include "tests/util/process.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::ChildProcess;

TEST(SamplesTest, LocalMatmulPrintsSeedValuesAndPlacement) {
  auto p = ChildProcess::start({binary("samples/local_matmul")});
  ASSERT_EQ(p->wait(60s), 0) << p->output();
  EXPECT_NE(p->output().find("[[22. 28.]\n [49. 64.]]"), std::string::npos) << p->output();
  EXPECT_NE(p->output().find("MatMul: (MatMul): /job:localhost/replica:0/task:0/device:CPU:0"), std::string::npos);
}

TEST(SamplesTest, MultiDeviceAddNUsesBothDevices) {
  auto p = ChildProcess::start({binary("samples/multi_device_addn")});
  ASSERT_EQ(p->wait(60s), 0) << p->output();
  EXPECT_NE(p->output().find("[[ 44.  56.]\n [ 98. 128.]]"), std::string::npos) << p->output();
  EXPECT_NE(p->output().find("MatMul: (MatMul): /job:localhost/replica:0/task:0/device:CPU:0"), std::string::npos);
  EXPECT_NE(p->output().find("MatMul_1: (MatMul): /job:localhost/replica:0/task:0/device:CPU:1"), std::string::npos);
}

TEST(SamplesTest, MultiGpuAddNFallsBackToCpuWithALogLine) {
  auto p = ChildProcess::start({binary("samples/multi_gpu_addn")});
  ASSERT_EQ(p->wait(60s), 0) << p->output();
  EXPECT_NE(p->output().find("[[ 44.  56.]\n [ 98. 128.]]"), std::string::npos) << p->output();
  EXPECT_NE(p->output().find("soft placement put it on"), std::string::npos) << p->output();
}

TEST(SamplesTest, HparamSearchReportsTheBestRate) {
  auto p = ChildProcess::start({binary("samples/hparam_search"), "--devices", "2", "--steps", "40"});
  ASSERT_EQ(p->wait(120s), 0) << p->output();
  EXPECT_NE(p->output().find("device /cpu:1  learning rate 0.075"), std::string::npos) << p->output();
  EXPECT_NE(p->output().find("best: learning rate"), std::string::npos) << p->output();
}

TEST(SamplesTest, InGraphReplicationMatchesModelParallelTraining) {
  auto p = ChildProcess::start({binary("samples/in_graph_replication"), "--towers", "2", "--steps", "30"});
  ASSERT_EQ(p->wait(120s), 0) << p->output();
  EXPECT_NE(p->output().find("in-graph replication, 2 towers: test accuracy"), std::string::npos) << p->output();
  EXPECT_NE(p->output().find("towers and model-parallel agree: yes"), std::string::npos) << p->output();
}

TEST(SamplesTest, DistributedCnnRejectsBadFlags) {
  auto p = ChildProcess::start({binary("samples/distributed_cnn"), "--cluster", "/nonexistent.toml", "--job", "worker",
                                "--task", "0"});
  EXPECT_EQ(p->wait(30s), 2) << p->output();
  EXPECT_NE(p->output().find("/nonexistent.toml"), std::string::npos) << p->output();
}

// Seed 002's flags and seed 000's TF_CONFIG-style JSON instead of a TOML cluster file: 1 ps + 1
// worker as separate processes train a small CNN and the worker reports its test accuracy.
void train_with(const std::vector<std::string>& ps_args, const std::vector<std::string>& worker_args,
                const std::string& logdir) {
  const std::vector<std::string> model = {"--hidden", "16", "--conv1", "4", "--conv2", "4", "--steps", "30",
                                          "--print-every", "10", "--logdir", logdir};
  std::vector<std::string> ps = {binary("samples/distributed_cnn")};
  ps.insert(ps.end(), ps_args.begin(), ps_args.end());
  std::vector<std::string> worker = {binary("samples/distributed_cnn")};
  worker.insert(worker.end(), worker_args.begin(), worker_args.end());
  worker.insert(worker.end(), model.begin(), model.end());
  auto p = ChildProcess::start(ps);
  ASSERT_TRUE(p->await_output("serving", 60s).ok()) << p->output();
  auto w = ChildProcess::start(worker);
  ASSERT_EQ(w->wait(120s), 0) << w->output();
  EXPECT_NE(w->output().find("Worker : 0, Step: "), std::string::npos) << w->output();
  EXPECT_NE(w->output().find("Test-Accuracy: "), std::string::npos) << w->output();
  p->signal(SIGTERM);
  EXPECT_EQ(p->wait(30s), 0) << p->output();
}

TEST(SamplesTest, DistributedCnnTrainsFromSeed002sHostFlags) {
  testing::TempDir dir;
  const std::string ps = "127.0.0.1:" + std::to_string(testing::free_port());
  const std::string wk = "127.0.0.1:" + std::to_string(testing::free_port());
  train_with({"--ps_hosts=" + ps, "--worker_hosts=" + wk, "--job_name=ps", "--task_index=0"},
             {"--ps_hosts=" + ps, "--worker_hosts=" + wk, "--job_name=worker", "--task_index=0"}, dir.path());
}

TEST(SamplesTest, DistributedCnnTrainsFromATfConfigJson) {
  testing::TempDir dir;
  const std::string cluster = "{\"ps\": [\"127.0.0.1:" + std::to_string(testing::free_port()) +
                              "\"], \"worker\": [\"127.0.0.1:" + std::to_string(testing::free_port()) + "\"]}";
  const std::string ps = dir.write("ps.json", "{\"cluster\": " + cluster + ", \"task\": {\"type\": \"ps\", \"index\": 0}}");
  const std::string wk =
      dir.write("worker.json", "{\"cluster\": " + cluster + ", \"task\": {\"type\": \"worker\", \"index\": 0}}");
  train_with({"--cluster", ps}, {"--cluster", wk}, dir.path() + "/logs");
}

TEST(SamplesTest, DistributedCnnRejectsBadClusterJsonAndMixedFlags) {
  testing::TempDir dir;
  const std::string bad = dir.write("bad.json", "{\"cluster\": {\"worker\": [\"127.0.0.1:1\", 7]}}");
  auto p = ChildProcess::start({binary("samples/distributed_cnn"), "--cluster", bad});
  EXPECT_EQ(p->wait(30s), 2) << p->output();
  EXPECT_NE(p->output().find(bad + ": cluster.worker[1]: expected a \"host:port\" string"), std::string::npos)
      << p->output();
  const std::string garbage = dir.write("garbage.json", "{not json");
  auto g = ChildProcess::start({binary("samples/distributed_cnn"), "--cluster", garbage});
  EXPECT_EQ(g->wait(30s), 2) << g->output();
  EXPECT_NE(g->output().find(garbage + ": not valid JSON"), std::string::npos) << g->output();
  auto both = ChildProcess::start({binary("samples/distributed_cnn"), "--cluster", bad, "--ps_hosts=127.0.0.1:1",
                                   "--job_name=ps", "--task_index=0"});
  EXPECT_EQ(both->wait(30s), 2) << both->output();
  EXPECT_NE(both->output().find("not both"), std::string::npos) << both->output();
  auto none = ChildProcess::start({binary("samples/distributed_cnn"), "--job", "worker", "--task", "0"});
  EXPECT_EQ(none->wait(30s), 2) << none->output();
  EXPECT_NE(none->output().find("give --cluster F, or --ps_hosts/--worker_hosts"), std::string::npos)
      << none->output();
  auto empty_entry = ChildProcess::start({binary("samples/distributed_cnn"), "--worker_hosts=127.0.0.1:1,,127.0.0.1:2",
                                          "--job_name=worker", "--task_index=0"});
  EXPECT_EQ(empty_entry->wait(30s), 2) << empty_entry->output();
  EXPECT_NE(empty_entry->output().find("--worker_hosts: empty entry at position 1"), std::string::npos)
      << empty_entry->output();
}

// Seed 002 as a TensorFlow 1.x user ports it (samples/mnist_port.cc: layers, a device function,
// the cluster file's [supervisor]): the seed's model (conv 32/64, fc 500, Adam 1e-4) on 1 ps + 2
// workers under `actorflow up`, checkpointing every second; each worker reports a test accuracy
// well above chance. Run again for more steps, the chief restores the newest checkpoint and the
// job goes on from its global step.
TEST(SamplesTest, TheSeed002PortTrainsUnderUpWithCheckpointsAndResumesFromThem) {
  testing::TempDir dir;
  const std::string file = dir.write(
      "cluster.toml", "[jobs]\nps = [\"localhost:" + std::to_string(testing::free_port()) + "\"]\nworker = [\"localhost:" +
                          std::to_string(testing::free_port()) + "\", \"localhost:" +
                          std::to_string(testing::free_port()) + "\"]\n[supervisor]\nlogdir = \"" + dir.path() +
                          "/logs\"\nsave_checkpoint_secs = 1\n");
  static const std::regex acc_re("Test-Accuracy: ([0-9.]+)");
  auto accuracies = [](const std::string& out) {
    std::vector<double> a;
    for (std::sregex_iterator it(out.begin(), out.end(), acc_re), end; it != end; ++it) a.push_back(std::stod((*it)[1]));
    return a;
  };
  auto first = ChildProcess::start({binary("actorflow"), "up", "--cluster", file, "--", binary("samples/mnist_port"),
                                    "--steps", "300"});
  ASSERT_EQ(first->wait(240s), 0) << first->output();
  const auto a = accuracies(first->output());
  ASSERT_EQ(a.size(), 2u) << first->output();
  for (double v : a) EXPECT_GT(v, 0.5) << first->output();  // chance is 0.1; about 0.7 after 300 steps
  // Which worker prints a "Step:" line is a race (the seed prints at global steps divisible by
  // 100); that the second worker trained to the end is what its own lines show.
  EXPECT_NE(first->output().find("worker/1: model is ready"), std::string::npos) << first->output();
  EXPECT_NE(first->output().find("worker/1 finished"), std::string::npos) << first->output();

  auto second = ChildProcess::start({binary("actorflow"), "up", "--cluster", file, "--", binary("samples/mnist_port"),
                                     "--steps", "400"});
  ASSERT_EQ(second->wait(240s), 0) << second->output();
  static const std::regex restored_re("restored the model from global step ([0-9]+)");
  std::smatch m;
  const std::string out = second->output();
  ASSERT_TRUE(std::regex_search(out, m, restored_re)) << out;
  EXPECT_GE(std::stol(m[1]), 250) << out;  // the last checkpoint, at the end of the first run
  EXPECT_EQ(accuracies(out).size(), 2u) << out;
}

TEST(SamplesTest, TheSeed002PortRejectsBadFlagsNamingThem) {
  const std::string hosts = "--worker_hosts=127.0.0.1:" + std::to_string(testing::free_port());
  auto steps = ChildProcess::start({binary("samples/mnist_port"), hosts, "--job_name=worker", "--task_index=0",
                                    "--steps", "12x"});
  EXPECT_EQ(steps->wait(30s), 2) << steps->output();
  EXPECT_NE(steps->output().find("unknown flag or bad value: --steps"), std::string::npos) << steps->output();
  auto task = ChildProcess::start({binary("samples/mnist_port"), hosts, "--job_name=worker", "--task_index=3"});
  EXPECT_EQ(task->wait(30s), 2) << task->output();
  EXPECT_NE(task->output().find("mnist_port: arguments: "), std::string::npos) << task->output();
  auto data = ChildProcess::start({binary("samples/mnist_port"), hosts, "--job_name=worker", "--task_index=0",
                                   "--data", "/nonexistent"});
  EXPECT_EQ(data->wait(30s), 2) << data->output();
  EXPECT_NE(data->output().find("/nonexistent"), std::string::npos) << data->output();
}

// The wide & deep sample: tables partitioned over 2 ps, 2 workers, sparse
// updates; each worker's held-out loss must come within 0.08 nats of the generating model's
// Bayes loss (the sample at its defaults, 1M rows and 3000 steps, ends about 0.03 above it; here
// 100 000 rows and fewer steps keep the test short).
void wide_and_deep(const std::vector<std::string>& extra, double max_gap) {
  testing::TempDir dir;
  const std::string file = dir.write(
      "cluster.toml", "[jobs]\nps = [\"localhost:" + std::to_string(testing::free_port()) + "\", \"localhost:" +
                          std::to_string(testing::free_port()) + "\"]\nworker = [\"localhost:" +
                          std::to_string(testing::free_port()) + "\", \"localhost:" +
                          std::to_string(testing::free_port()) + "\"]\n");
  std::vector<std::string> argv = {binary("actorflow"), "up", "--cluster", file, "--", binary("samples/wide_and_deep"),
                                   "--vocab", "100000", "--print-every", "200"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto p = ChildProcess::start(argv);
  ASSERT_TRUE(p);
  ASSERT_EQ(p->wait(240s), 0) << p->output();
  static const std::regex eval_re("Eval-Loss: ([0-9.]+) Bayes-Loss: ([0-9.]+) Gap: (-?[0-9.]+)");
  const std::string out = p->output();
  int evals = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), eval_re), end; it != end; ++it) {
    ++evals;
    const double loss = std::stod((*it)[1]), bayes = std::stod((*it)[2]);
    EXPECT_NEAR(bayes, 0.5223, 1e-3) << "the generating model's loss on the held-out set";
    EXPECT_LT(loss - bayes, max_gap) << out;
    EXPECT_GT(loss - bayes, -0.01) << "no model beats the Bayes loss by more than noise\n" << out;
  }
  EXPECT_EQ(evals, 2) << out;
  EXPECT_NE(out.find("Bytes per worker step: 0.56 MB of rows, ids and gradients (dense tables: 52.00 MB)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("Worker : 1, Step: "), std::string::npos) << out;
}

TEST(SamplesTest, WideAndDeepOnPartitionedTablesNearsTheBayesLoss) { wide_and_deep({"--steps", "3000"}, 0.08); }

TEST(SamplesTest, WideAndDeepSynchronousAggregatesSparseGradients) {
  wide_and_deep({"--steps", "1000", "--sync"}, 0.08);
}

TEST(SamplesTest, WideAndDeepRejectsBadFlags) {
  auto p = ChildProcess::start({binary("samples/wide_and_deep"), "--cluster", "/nonexistent.toml", "--job", "worker"});
  EXPECT_EQ(p->wait(30s), 2) << p->output();
  EXPECT_NE(p->output().find("/nonexistent.toml"), std::string::npos) << p->output();
}

}  // namespace
}  // namespace actorflow
