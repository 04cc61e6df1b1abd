// The sample programs run and print what their seeds print.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace actorflow
