// import_graph_def against TensorFlow itself: the GraphDefs in tests/data/tf_graph/ were written by
// TensorFlow 2.21's tf.compat.v1 (make_golden.py there), and expected.json holds what TensorFlow
// computed from them (forward outputs; a training step's variables). Each graph is imported, run
// with actorflow's Session in-process and compared within 1e-5.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "actorflow/graph.h"
#include "actorflow/monitored_session.h"
#include "actorflow/saver.h"
#include "actorflow/server.h"
#include "actorflow/session.h"
#include "data/tf/tf_checkpoint.h"
#include "proto/tf/graph.pb.h"
#include "runtime/placer.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

// tests/data/tf_graph: TensorFlow 2.21's golden files and the scripts that write and check them;
// its tf1_15/ holds the same generators' output under TensorFlow 1.15 (tf1_15/README.md).
const std::string kGoldenBase = std::string(AF_SOURCE_DIR) + "/tests/data/tf_graph";

// The directory of golden files the running test reads: kGoldenBase, or the TensorFlow version's
// that a TfGoldenTest sets up (gtest runs one test at a time, so one value suffices).
std::string& golden_dir() {
  static std::string dir = kGoldenBase;
  return dir;
}

// The parsed JSON file `name` of the current golden directory, parsed once per directory.
const nlohmann::json& golden_json(const std::string& name);

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

const nlohmann::json& golden_json(const std::string& name) {
  static std::map<std::string, nlohmann::json> parsed;
  const std::string path = golden_dir() + "/" + name;
  auto it = parsed.find(path);
  if (it == parsed.end()) it = parsed.emplace(path, nlohmann::json::parse(slurp(path))).first;
  return it->second;
}

// The golden tests, once with TensorFlow 2.21's files and once with TensorFlow 1.15's (the same
// generators run by that version: its gradient graphs differ, e.g. BroadcastGradientArgs of
// run-time shapes, and its files carry an older producer version).
class TfGoldenTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { golden_dir() = kGoldenBase + GetParam(); }
  void TearDown() override { golden_dir() = kGoldenBase; }
};

INSTANTIATE_TEST_SUITE_P(TensorFlow, TfGoldenTest, ::testing::Values("", "/tf1_15"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param).empty() ? std::string("v2_21") : std::string("v1_15");
                         });

// The python of the TensorFlow version whose files golden_dir() holds: .venv-tf (2.21,
// bench/tf_venv.sh) or .venv-tf1 (1.15, tests/data/tf_graph/make_tf1_15.sh).
bool golden_is_tf1() { return golden_dir() != kGoldenBase; }
std::string golden_python() {
  return std::string(AF_SOURCE_DIR) + (golden_is_tf1() ? "/.venv-tf1/bin/python" : "/.venv-tf/bin/python");
}
const char* golden_python_maker() { return golden_is_tf1() ? "tests/data/tf_graph/make_tf1_15.sh" : "bench/tf_venv.sh"; }

const nlohmann::json& expected() {
  return golden_json("expected.json");
}

Tensor tensor_of(const nlohmann::json& j) {
  std::vector<int64_t> dims = j["shape"].get<std::vector<int64_t>>();
  std::vector<float> v;
  for (const auto& x : j["values"]) v.push_back(static_cast<float>(x.get<double>()));
  return Tensor::from_vector<float>(v, Shape(dims));
}

void expect_near(const Tensor& got, const nlohmann::json& want, const std::string& what, double tol = 1e-5) {
  const Tensor w = tensor_of(want);
  ASSERT_EQ(got.shape(), w.shape()) << what;
  ASSERT_EQ(got.dtype(), DType::kFloat32) << what;
  for (int64_t i = 0; i < w.num_elements(); ++i)
    ASSERT_NEAR(got.data<float>()[i], w.data<float>()[i], tol) << what << " element " << i;
}

std::vector<std::pair<std::string, Tensor>> feeds_of(const nlohmann::json& g) {
  std::vector<std::pair<std::string, Tensor>> f;
  for (const auto& [k, v] : g["feeds"].items()) f.emplace_back(k, tensor_of(v));
  return f;
}

// Places `g` on /job:ps/task:0 and /job:worker/task:0 (one CPU each; the worker's the default),
// as replica_device_setter's graphs run; the placer's status (printed when it fails).
Status place_on_ps_and_worker(Graph& g) {
  PlacerOptions po;
  po.default_device = "/job:worker/replica:0/task:0/device:CPU:0";
  auto st = place_graph(g,
                        {{"/job:ps/replica:0/task:0/device:CPU:0", "CPU"},
                         {"/job:worker/replica:0/task:0/device:CPU:0", "CPU"}},
                        po);
  if (!st.ok()) ADD_FAILURE() << st.status();
  return st.ok() ? Status::OK() : st.status();
}

// Imports a golden forward graph, runs its init op when it has one, and compares every fetch.
void check_forward(const std::string& file, const std::string& key) {
  SCOPED_TRACE(file);
  Scope root = Scope::root();
  auto imported = import_graph_def_file(root, golden_dir() + "/" + file);
  ASSERT_TRUE(imported.ok()) << imported.status();
  Session sess(root);
  ASSERT_TRUE(sess.status().ok()) << sess.status();
  if (imported->node("init")) {
    auto init = sess.run_by_name({}, {}, {"init"});
    ASSERT_TRUE(init.ok()) << init.status();
  }
  const auto& g = expected()[key];
  std::vector<std::string> names;
  for (const auto& [k, v] : g["fetches"].items()) names.push_back(k);
  auto out = sess.run_by_name(feeds_of(g), names);
  ASSERT_TRUE(out.ok()) << out.status();
  for (size_t i = 0; i < names.size(); ++i) expect_near((*out)[i], g["fetches"][names[i]], names[i]);
}

// Imports the GraphDef `file` into `root` with its devices cleared, to run it in one process as
// TensorFlow ran it; the import's error otherwise.
::testing::AssertionResult import_cleared(const Scope& root, const std::string& file) {
  ImportGraphDefOptions opts;
  opts.clear_devices = true;
  auto imported = import_graph_def_file(root, file, opts);
  if (!imported.ok()) return ::testing::AssertionFailure() << file << ": " << imported.status();
  return ::testing::AssertionSuccess();
}

TEST_P(TfGoldenTest, ForwardMlpGivesTensorFlowsOutputsFromBinaryAndText) {
  check_forward("mlp_forward.pb", "mlp_forward");
  check_forward("mlp_forward.pbtxt", "mlp_forward");
}

TEST_P(TfGoldenTest, SeedCnnForwardGivesTensorFlowsOutputs) { check_forward("cnn_forward.pb", "cnn_forward"); }

// One step of each golden training graph (reference and resource variables; SGD and Adam): the
// loss before it and every variable after it equal TensorFlow's. The graphs were built under
// replica_device_setter: imported as they are, their variables request /job:ps/task:0 and the
// placer puts them on the ps; to run in one process they are imported again with clear_devices.
TEST_P(TfGoldenTest, OneTrainingStepEqualsTensorFlows) {
  for (const char* name : {"mlp_train_ref_sgd.pbtxt", "mlp_train_ref_adam.pbtxt", "mlp_train_resource_sgd.pbtxt",
                           "mlp_train_resource_adam.pbtxt", "cnn_train_ref_momentum.pb",
                           "cnn_train_resource_rmsprop.pb", "mlp_train_ref_adagrad.pb"}) {
    SCOPED_TRACE(name);
    const std::string key = std::string(name).substr(0, std::string(name).find('.'));
    const auto& g = expected()[key];
    ASSERT_FALSE(g.is_null()) << key;
    const std::string file = golden_dir() + "/" + name;
    {
      Scope root = Scope::root();
      auto imported = import_graph_def_file(root, file);
      ASSERT_TRUE(imported.ok()) << imported.status();
      EXPECT_EQ(imported->variables.size(), g["devices"].size());
      for (const auto& [var, dev] : g["devices"].items()) {
        Node* n = imported->node(var);
        ASSERT_NE(n, nullptr) << var;
        EXPECT_EQ(n->op, "VariableV2") << var;
        EXPECT_EQ(n->requested_device, "/job:ps/task:0") << var;
        EXPECT_EQ(dev.get<std::string>(), "/job:ps/task:0") << var;
      }
      Graph placed = *root.graph();
      ASSERT_TRUE(place_on_ps_and_worker(placed).ok());
      for (const auto& [var, dev] : g["devices"].items())
        EXPECT_EQ(placed.find(var)->assigned_device, "/job:ps/replica:0/task:0/device:CPU:0") << var;
      // The optimizer's updates run where their variables live.
      for (int i = 0; i < placed.num_nodes(); ++i) {
        if (placed.node(i)->op.rfind("Apply", 0) == 0) {
          EXPECT_EQ(placed.node(i)->assigned_device, "/job:ps/replica:0/task:0/device:CPU:0") << placed.node(i)->name;
        }
      }
    }
    Scope root = Scope::root();
    ASSERT_TRUE(import_cleared(root, file));
    Session sess(root);
    ASSERT_TRUE(sess.run_by_name({}, {}, {"init"}).ok());
    std::vector<std::string> vars;
    for (const auto& [var, v] : g["after"].items()) vars.push_back(var);
    // TensorFlow keeps the optimizer's slots as variables; actorflow's variable actor keeps them
    // itself, so the model's variables are compared after the step (the slot variables stay at
    // their initial values here), and Adam's beta powers, updated by the graph's own Assign ops.
    auto before = sess.run_by_name({}, vars);
    ASSERT_TRUE(before.ok()) << before.status();
    for (size_t i = 0; i < vars.size(); ++i) expect_near((*before)[i], g["before"][vars[i]], vars[i] + " after init");
    auto loss = sess.run_by_name(feeds_of(g), {"loss"});
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_NEAR((*loss)[0].data<float>()[0], g["loss"].get<double>(), 1e-5);
    auto step = sess.run_by_name(feeds_of(g), {}, {"train"});
    ASSERT_TRUE(step.ok()) << step.status();
    auto after = sess.run_by_name({}, vars);
    ASSERT_TRUE(after.ok()) << after.status();
    int compared = 0;
    for (size_t i = 0; i < vars.size(); ++i) {
      expect_near((*after)[i], g["after"][vars[i]], vars[i] + " after one step");
      // The step changed it (so the comparison can fail): TensorFlow's values moved.
      if (vars[i].find("_power") == std::string::npos) {
        const Tensor b = tensor_of(g["before"][vars[i]]), a = tensor_of(g["after"][vars[i]]);
        EXPECT_FALSE(a.equals(b)) << vars[i];
      }
      ++compared;
    }
    EXPECT_GE(compared, 4);
  }
}

// Seed 002's CNN training graph as TensorFlow writes it (make_seed_cnn.py: x [None, 784],
// replica_device_setter, Adam, a global step; reference and resource variables): imported with its
// devices, its 8 model variables, Adam's slots and the global step are placed on the ps with every
// update; in one process, at batch 8, the global step counts the steps, every model variable
// moves, and the loss on the same batch falls over five steps (Adam at 1e-4 from TensorFlow's
// initialisers, so the fall is far above rounding).
TEST_P(TfGoldenTest, TheSeedsTrainingGraphPlacesItsVariablesOnThePsAndTrains) {
  for (const char* form : {"ref", "resource"}) {
    const std::string file = golden_dir() + "/seed_cnn_train_" + form + ".pb";
    SCOPED_TRACE(file);
    {
      Scope root = Scope::root();
      auto imported = import_graph_def_file(root, file);
      ASSERT_TRUE(imported.ok()) << imported.status();
      EXPECT_EQ(imported->variables.size(), 8u + 16u + 2u + 1u);  // model, Adam's m and v, beta powers, step
      Graph placed = *root.graph();
      ASSERT_TRUE(place_on_ps_and_worker(placed).ok());
      int on_ps = 0;
      for (int i = 0; i < placed.num_nodes(); ++i) {
        const Node* n = placed.node(i);
        if (n->op == "VariableV2" || n->op.find("Apply") != std::string::npos) {
          EXPECT_EQ(n->assigned_device, "/job:ps/replica:0/task:0/device:CPU:0") << n->name;
          ++on_ps;
        }
      }
      EXPECT_GE(on_ps, 8 + 8);
    }
    Scope root = Scope::root();
    ASSERT_TRUE(import_cleared(root, file));
    Session sess(root);
    ASSERT_TRUE(sess.run_by_name({}, {}, {"init"}).ok());
    std::vector<float> xs(8 * 784), ys(8 * 10, 0.f);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 37) % 101) / 101.f;
    for (int b = 0; b < 8; ++b) ys[static_cast<size_t>(b * 10 + b % 10)] = 1.f;
    const std::vector<std::pair<std::string, Tensor>> feeds = {{"x-input", Tensor::from_vector<float>(xs, Shape{8, 784})},
                                                               {"y-input", Tensor::from_vector<float>(ys, Shape{8, 10})}};
    const std::vector<std::string> vars = {"conv1/weights", "conv1/biases", "conv2/weights", "conv2/biases",
                                           "fc1/weights",   "fc1/biases",   "fc2/weights",   "fc2/biases"};
    auto before = sess.run_by_name(feeds, {"loss"});
    auto w0 = sess.run_by_name({}, vars);
    ASSERT_TRUE(before.ok() && w0.ok()) << before.status() << w0.status();
    for (int step = 0; step < 5; ++step) ASSERT_TRUE(sess.run_by_name(feeds, {}, {"train"}).ok());
    auto after = sess.run_by_name(feeds, {"loss", "global_step"});
    auto w5 = sess.run_by_name({}, vars);
    ASSERT_TRUE(after.ok() && w5.ok()) << after.status() << w5.status();
    const float l0 = (*before)[0].data<float>()[0], l5 = (*after)[0].data<float>()[0];
    EXPECT_TRUE(std::isfinite(l0) && std::isfinite(l5));
    EXPECT_LT(l5, l0 - 1e-3) << "loss " << l0 << " -> " << l5;
    EXPECT_EQ((*after)[1].data<int64_t>()[0], 5);
    for (size_t i = 0; i < vars.size(); ++i) EXPECT_FALSE((*w5)[i].equals((*w0)[i])) << vars[i];
  }
}

// TensorFlow 1.15's gradient of a mean divides the run-time batch by a constant
// (`Prod(shape) // Maximum(Prod(...), 1)`): kept exact, it trains (TfGoldenTest above). Made
// inexact (the divisor 3, which the batch need not be a multiple of), or dividing by the batch,
// it is refused naming the node, the op and the file.
TEST(TfImportTest, ArithmeticOnARunTimeBatchIsKeptOnlyWhereExact) {
  const std::string graph = slurp(kGoldenBase + "/tf1_15/dynamic_train_ref_adam.pb");
  for (int bad = 0; bad < 2; ++bad) {
    actorflow::tf::GraphDef d;
    ASSERT_TRUE(d.ParseFromString(graph));
    int changed = 0;
    for (auto& n : *d.mutable_node()) {
      if (bad == 0 && n.name() == "gradients/loss_grad/Maximum/y") {
        for (auto& a : *n.mutable_attr())
          if (a.key() == "value") a.mutable_value()->mutable_tensor()->set_int_val(0, 3);
        ++changed;
      } else if (bad == 1 && n.name() == "gradients/loss_grad/floordiv") {
        std::swap((*n.mutable_input())[0], (*n.mutable_input())[1]);
        ++changed;
      }
    }
    ASSERT_EQ(changed, 1);
    std::string bytes;
    ASSERT_TRUE(d.SerializeToString(&bytes));
    Scope root = Scope::root();
    auto r = import_graph_def(root, bytes, {}, "mean_grad.pb");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status();
    for (const char* part : {"gradients/loss_grad/floordiv", "FloorDiv", "mean_grad.pb", bad == 0 ? "by 3" : "divides by"})
      EXPECT_NE(r.status().message().find(part), std::string::npos) << part << ": " << r.status();
    EXPECT_EQ(root.graph()->num_nodes(), 0);
  }
}

// Between-graph replication of an imported graph across processes, as TensorFlow 1.x users run
// it: `actorflow node` processes for /job:ps/task:0 and two workers, and two clients (this test
// process), each importing the same GraphDef as it is (replica_device_setter's devices kept) and
// running it by names through its own worker. The variables live once, on the ps task: the
// first client's init and one training step give TensorFlow's values; the second client,
// without running init, reads those very values, takes a step of its own, and the first sees it.
TEST(TfImportTest, TwoWorkersTrainOneImportedGraphOnAParameterServerProcess) {
  using namespace std::chrono_literals;
  testing::TempDir dir;
  const int ps = testing::free_port(), w0 = testing::free_port(), w1 = testing::free_port();
  const std::string file = dir.write(
      "cluster.toml", "[cluster]\nname = \"imported\"\n[jobs]\nps = [\"localhost:" + std::to_string(ps) +
                          "\"]\nworker = [\"localhost:" + std::to_string(w0) + "\", \"localhost:" +
                          std::to_string(w1) + "\"]\n");
  std::vector<std::unique_ptr<testing::ChildProcess>> nodes;
  for (const auto& [job, task] : std::vector<std::pair<std::string, std::string>>{{"ps", "0"}, {"worker", "0"}, {"worker", "1"}}) {
    nodes.push_back(testing::ChildProcess::start(
        {testing::binary("actorflow"), "node", "--cluster", file, "--job", job, "--task", task}));
    ASSERT_TRUE(nodes.back() && nodes.back()->wait_for_output("serving", 30s)) << nodes.back()->output();
  }
  const auto& g = expected()["mlp_train_resource_sgd"];
  std::vector<std::string> vars;
  for (const auto& [var, v] : g["after"].items()) vars.push_back(var);
  ASSERT_GE(vars.size(), 4u);
  struct Client {
    Scope root = Scope::root();
    std::unique_ptr<Session> sess;
  };
  auto client = [&](int port) {
    auto c = std::make_unique<Client>();
    auto imported = import_graph_def_file(c->root, golden_dir() + "/mlp_train_resource_sgd.pbtxt");
    EXPECT_TRUE(imported.ok()) << imported.status();
    for (const std::string& v : vars) EXPECT_EQ(imported->node(v)->requested_device, "/job:ps/task:0") << v;
    c->sess = std::make_unique<Session>(c->root, "actorflow://localhost:" + std::to_string(port),
                                        SessionOptions().cluster_file(file).timeout(60s));
    EXPECT_TRUE(c->sess->status().ok()) << c->sess->status();
    return c;
  };
  auto a = client(w0);
  ASSERT_TRUE(a->sess->run_by_name({}, {}, {"init"}).ok());
  auto loss = a->sess->run_by_name(feeds_of(g), {"loss"});
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR((*loss)[0].data<float>()[0], g["loss"].get<double>(), 1e-5);
  ASSERT_TRUE(a->sess->run_by_name(feeds_of(g), {}, {"train"}).ok());
  auto after = a->sess->run_by_name({}, vars);
  ASSERT_TRUE(after.ok()) << after.status();
  for (size_t i = 0; i < vars.size(); ++i) expect_near((*after)[i], g["after"][vars[i]], vars[i] + " after one step");

  auto b = client(w1);  // the same GraphDef, imported again by another worker's client
  auto seen = b->sess->run_by_name({}, vars);
  ASSERT_TRUE(seen.ok()) << seen.status();
  for (size_t i = 0; i < vars.size(); ++i) EXPECT_TRUE((*seen)[i].equals((*after)[i])) << vars[i];
  ASSERT_TRUE(b->sess->run_by_name(feeds_of(g), {}, {"train"}).ok());
  auto later = a->sess->run_by_name({}, vars);
  ASSERT_TRUE(later.ok()) << later.status();
  int moved = 0;
  for (size_t i = 0; i < vars.size(); ++i) moved += (*later)[i].equals((*after)[i]) ? 0 : 1;
  EXPECT_GT(moved, 0) << "the second worker's step did not reach the shared variables";
  for (auto& n : nodes) EXPECT_TRUE(n->running()) << n->output();
}

// Bring a model over and take it back: TensorFlow's Adam training graph (reference variables) is
// imported, trained three steps by actorflow and saved by actorflow's Saver in TensorFlow's
// format; TensorFlow 2.21 imports the same GraphDef, restores every variable of it with its own
// tf.compat.v1.train.Saver (the Adam slots w1/Adam, w1/Adam_1, ... are actorflow's optimizer
// state, not the imported slot variables' initial zeros) and takes a fourth step: its loss and
// every variable after it equal actorflow's own fourth step to 1e-5. Runs
// tests/data/tf_graph/tf_resume.py with the project's .venv-tf; skipped without it.
TEST_P(TfGoldenTest, TensorFlowResumesAGraphActorflowTrained) {
  const std::string python = golden_python();
  if (access(python.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << python << " (" << golden_python_maker() << " makes it)";
  const auto& g = expected()["mlp_train_ref_adam"];
  const std::string graph = golden_dir() + "/mlp_train_ref_adam.pbtxt";
  testing::TempDir dir;
  Scope root = Scope::root();
  ImportGraphDefOptions opts;
  opts.clear_devices = true;
  auto imported = import_graph_def_file(root, graph, opts);
  ASSERT_TRUE(imported.ok()) << imported.status();
  Session sess(root);
  ASSERT_TRUE(sess.run_by_name({}, {}, {"init"}).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(sess.run_by_name(feeds_of(g), {}, {"train"}).ok());
  train::SaverOptions so;
  so.tensorflow_format = true;
  train::Saver saver(root, {}, so);
  ASSERT_TRUE(saver.status().ok()) << saver.status();
  auto path = saver.save(sess, dir.path() + "/model.ckpt", 3);
  ASSERT_TRUE(path.ok()) << path.status();
  std::vector<std::string> vars;
  for (const std::string& v : imported->variables)
    if (v.find("/Adam") == std::string::npos) vars.push_back(v);  // the model's and the beta powers
  ASSERT_EQ(vars.size(), 6u);
  auto saved = sess.run_by_name({}, vars);
  ASSERT_TRUE(saved.ok()) << saved.status();
  auto loss = sess.run_by_name(feeds_of(g), {"loss"});
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_TRUE(sess.run_by_name(feeds_of(g), {}, {"train"}).ok());
  auto fourth = sess.run_by_name({}, vars);
  ASSERT_TRUE(fourth.ok()) << fourth.status();

  const std::string out = dir.path() + "/tf.json", err = dir.path() + "/tf.err";
  const std::string cmd = python + " " + kGoldenBase + "/tf_resume.py " + graph + " mlp_train_ref_adam " + *path + " > " +
                          out + " 2> " + err;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(err);
  const auto got = nlohmann::json::parse(slurp(out));
  EXPECT_NEAR(got["loss"].get<double>(), (*loss)[0].data<float>()[0], 1e-5);
  auto expect_values = [](const nlohmann::json& want, const Tensor& t, const std::string& what) {
    const auto v = want.get<std::vector<double>>();
    ASSERT_EQ(static_cast<int64_t>(v.size()), t.num_elements()) << what;
    for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(v[i], t.data<float>()[i], 1e-5) << what << " element " << i;
  };
  for (size_t i = 0; i < vars.size(); ++i) {
    expect_values(got["restored"][vars[i]], (*saved)[i], vars[i] + " restored by TensorFlow");
    expect_values(got["after"][vars[i]], (*fourth)[i], vars[i] + " after TensorFlow's step");
  }
}

// actorflow's MonitoredTrainingSession runs an imported graph: its chief initialises it with the
// GraphDef's own init op, trains it through the managed session (feeds and fetches by the imported
// tensors), saves it at close (TensorFlow's format), and a new chief over the same directory with
// a fresh import on a fresh server restores it instead of initialising: the variables are those
// after the steps (initialised, they would be TensorFlow's initial values).
TEST_P(TfGoldenTest, AMonitoredTrainingSessionInitialisesSavesAndRestoresAnImportedGraph) {
  const auto& g = expected()["mlp_train_ref_sgd"];
  testing::TempDir dir;
  LocalServerOptions lo;
  auto server = Server::local(lo);
  ASSERT_TRUE(server.ok()) << server.status();
  auto restarted = Server::local(lo);  // the second chief's: its variables start uninitialised
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  std::vector<std::string> vars;
  for (const auto& [var, v] : g["after"].items()) vars.push_back(var);
  struct Run {
    Scope root = Scope::root();
    ImportedGraph imported;
    FeedDict feeds;
  };
  auto import = [&](Run& r) {
    ImportGraphDefOptions opts;
    opts.clear_devices = true;
    auto imported = import_graph_def_file(r.root, golden_dir() + "/mlp_train_ref_sgd.pbtxt", opts);
    ASSERT_TRUE(imported.ok()) << imported.status();
    r.imported = std::move(*imported);
    for (const auto& [name, t] : feeds_of(g)) r.feeds.emplace_back(*r.imported.output(name), t);
  };
  auto options = [&](Run& r, Server& on) {
    train::MonitoredTrainingSession::Options o;
    o.master = on.target();
    o.checkpoint_dir = dir.path();
    o.tensorflow_checkpoints = true;
    o.init_op = Output(r.imported.node("init"), 0);
    return o;
  };
  std::vector<Tensor> trained;
  {
    Run r;
    import(r);
    auto sess = train::MonitoredTrainingSession::create(r.root, options(r, **server));
    ASSERT_TRUE(sess.ok()) << sess.status();
    auto before = (*sess)->raw_session().run_by_name({}, vars);
    ASSERT_TRUE(before.ok()) << before.status();
    for (size_t i = 0; i < vars.size(); ++i) expect_near((*before)[i], g["before"][vars[i]], vars[i] + " after init");
    const Output train_op(r.imported.node("train"), 0);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*sess)->run(r.feeds, {}, {train_op}).ok());
    auto after = (*sess)->raw_session().run_by_name({}, vars);
    ASSERT_TRUE(after.ok()) << after.status();
    trained = *after;
    for (size_t i = 0; i < vars.size(); ++i) EXPECT_FALSE(trained[i].equals((*before)[i])) << vars[i];
    ASSERT_TRUE((*sess)->close().ok());
  }
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/model.ckpt-0.index"));
  Run r;
  import(r);
  auto sess = train::MonitoredTrainingSession::create(r.root, options(r, **restarted));
  ASSERT_TRUE(sess.ok()) << sess.status();
  auto restored = (*sess)->raw_session().run_by_name({}, vars);
  ASSERT_TRUE(restored.ok()) << restored.status();
  for (size_t i = 0; i < vars.size(); ++i) EXPECT_TRUE((*restored)[i].equals(trained[i])) << vars[i];
}

// As under TensorFlow's tf.device: the scope's device fills what a node's own device leaves unset.
// replica_device_setter wrote "/job:worker" on the compute nodes (no task) and "/job:ps/task:0"
// on the variables: imported under worker 2's device, the compute nodes request worker 2 (before,
// "/job:worker" alone, which the placer may put on any worker task) and the variables stay.
TEST(TfImportTest, TheScopesDeviceFillsWhatANodesDeviceLeavesOpen) {
  Scope root = Scope::root();
  auto imported = import_graph_def_file(root.with_device("/job:worker/task:2"), golden_dir() + "/mlp_train_resource_sgd.pbtxt");
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->node("x")->requested_device, "/job:worker/task:2");
  EXPECT_EQ(imported->node("w1")->requested_device, "/job:ps/task:0");
  Scope plain = Scope::root();
  auto as_written = import_graph_def_file(plain, golden_dir() + "/mlp_train_resource_sgd.pbtxt");
  ASSERT_TRUE(as_written.ok()) << as_written.status();
  EXPECT_EQ(as_written->node("x")->requested_device, "/job:worker");
}

TEST(TfImportTest, PrefixAndInputMap) {
  Scope root = Scope::root();
  auto x = ops::placeholder(root, DType::kFloat32, Shape{2, 6}, "my_x");
  ImportGraphDefOptions opts;
  opts.prefix = "net";
  opts.input_map["x:0"] = x;
  auto imported = import_graph_def_file(root, golden_dir() + "/mlp_forward.pb", opts);
  ASSERT_TRUE(imported.ok()) << imported.status();
  Node* mm = imported->node("MatMul");
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->name, "net/MatMul");
  EXPECT_EQ(mm->inputs[0].node, x.node()->id);  // reads the remapped input
  auto probs = imported->output("probs");
  ASSERT_TRUE(probs.ok()) << probs.status();
  EXPECT_EQ(probs->node()->name, "net/probs");
  EXPECT_EQ(imported->output("x:0")->node(), x.node());
  EXPECT_FALSE(imported->output("nope").ok());
  // The imported net runs from the remapped placeholder, under its prefix.
  Session sess(root);
  ASSERT_TRUE(sess.run_by_name({}, {}, {"net/init"}).ok());
  const auto& g = expected()["mlp_forward"];
  auto out = sess.run({{x, tensor_of(g["feeds"]["x"])}}, {*probs});
  ASSERT_TRUE(out.ok()) << out.status();
  expect_near((*out)[0], g["fetches"]["probs"], "probs");
  // A second import under the same prefix collides: an error, and nothing is added.
  const int before = root.graph()->num_nodes();
  auto again = import_graph_def_file(root, golden_dir() + "/mlp_forward.pb", opts);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("already exists"), std::string::npos) << again.status();
  EXPECT_EQ(root.graph()->num_nodes(), before);
  // input_map naming a tensor the GraphDef lacks.
  ImportGraphDefOptions bad;
  bad.input_map["nothing:0"] = x;
  auto r = import_graph_def_file(root, golden_dir() + "/mlp_forward.pb", bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nothing:0"), std::string::npos) << r.status();
}

TEST(TfImportTest, ControlInputsAndColocationAreKept) {
  Scope root = Scope::root();
  auto imported = import_graph_def_file(root, golden_dir() + "/mlp_train_ref_adam.pbtxt");
  ASSERT_TRUE(imported.ok()) << imported.status();
  Node* train = imported->node("train");
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->op, "NoOp");
  EXPECT_EQ(train->control_inputs.size(), 6u);  // two Assigns of the beta powers, four ApplyAdams
  Node* read = imported->node("w1/read");
  ASSERT_NE(read, nullptr);
  EXPECT_EQ(read->colocate_with, std::vector<std::string>{"w1"});
  Node* apply = imported->node("train/update_w1/ApplyAdam");
  ASSERT_NE(apply, nullptr);
  EXPECT_EQ(apply->op, "ApplyAdam");
  EXPECT_EQ(apply->attrs.get_or<std::string>("var_name", ""), "w1");
  EXPECT_EQ(apply->inputs.size(), 5u);
}

// A graph written with a tf.compat.v1.train.Saver: its save/restore ops import (see the Saver
// tests below); drop_save_restore leaves out exactly the save/ subgraph, and the model runs as
// TensorFlow's.
TEST(TfImportTest, SaveRestoreSubgraphIsRefusedOrDropped) {
  const std::string file = golden_dir() + "/mlp_saver.pbtxt";
  {
    Scope root = Scope::root();
    auto r = import_graph_def_file(root, file);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_NE(r->node("save/SaveV2"), nullptr);
    EXPECT_EQ(r->node("save/SaveV2")->op, "SaveV2");
    EXPECT_EQ(r->node("save/RestoreV2")->attrs.get_or<std::vector<std::string>>("tensor_names", {}),
              (std::vector<std::string>{"b1", "b2", "w1", "w2"}));
  }
  Scope root = Scope::root();
  ImportGraphDefOptions o;
  o.drop_save_restore = true;
  auto r = import_graph_def_file(root, file, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->dropped.size(), 15u);  // save/filename/input ... save/restore_all
  for (const auto& d : r->dropped) EXPECT_EQ(d.rfind("save/", 0), 0u) << d;
  for (const auto& [name, node] : r->nodes) EXPECT_NE(name.rfind("save/", 0), 0u) << name;
  Session sess(root);
  ASSERT_TRUE(sess.run_by_name({}, {}, {"init"}).ok());
  const auto& g = expected()["mlp_forward"];
  auto out = sess.run_by_name(feeds_of(g), {"probs"});
  ASSERT_TRUE(out.ok()) << out.status();
  expect_near((*out)[0], g["fetches"]["probs"], "probs");
}

// BroadcastGradientArgs of constant shapes folds to TensorFlow's reduction indices (the cases and
// their answers are TensorFlow 2.21's tf.raw_ops.BroadcastGradientArgs).
TEST(TfImportTest, BroadcastGradientArgsFoldsAsTensorFlowComputesIt) {
  struct Case {
    std::vector<int32_t> s0, s1, r0, r1;
  };
  const std::vector<Case> cases = {{{4, 3}, {3}, {}, {0}},           {{4, 1}, {1, 3}, {1}, {0}},
                                   {{2, 1, 5}, {1, 1}, {1}, {0, 1, 2}}, {{1}, {1}, {}, {}},
                                   {{}, {4, 3}, {0, 1}, {}},          {{5, 1, 3}, {1, 7, 1}, {1}, {0, 2}},
                                   {{1, 1, 3}, {3}, {0, 1}, {0, 1}},   {{1, 4}, {1, 1}, {0}, {0, 1}}};
  auto node = [](const std::string& name, const std::vector<int32_t>& v) {
    std::string t = "tensor { dtype: DT_INT32 tensor_shape { dim { size: " + std::to_string(v.size()) + " } }";
    for (int32_t x : v) t += " int_val: " + std::to_string(x);
    return "node { name: \"" + name + "\" op: \"Const\" attr { key: \"dtype\" value { type: DT_INT32 } } " +
           "attr { key: \"value\" value { " + t + " } } } }\n";
  };
  for (const Case& k : cases) {
    Scope root = Scope::root();
    ImportGraphDefOptions o;
    o.format = GraphDefFormat::kText;
    const std::string text = node("a", k.s0) + node("b", k.s1) +
                             "node { name: \"g\" op: \"BroadcastGradientArgs\" input: \"a\" input: \"b\" "
                             "attr { key: \"T\" value { type: DT_INT32 } } }";
    auto r = import_graph_def(root, text, o, "bga.pbtxt");
    ASSERT_TRUE(r.ok()) << r.status();
    for (int out = 0; out < 2; ++out) {
      auto t = r->output("g:" + std::to_string(out));
      ASSERT_TRUE(t.ok()) << t.status();
      ASSERT_EQ(t->node()->op, "Const");
      auto v = t->node()->attrs.get<Tensor>("value");
      ASSERT_TRUE(v.ok());
      const std::vector<int32_t>& want = out == 0 ? k.r0 : k.r1;
      ASSERT_EQ(v->num_elements(), static_cast<int64_t>(want.size())) << "output " << out;
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(v->data<int32_t>()[i], want[i]) << "output " << out;
    }
  }
  // Shapes that do not broadcast are an error naming the node.
  Scope root = Scope::root();
  ImportGraphDefOptions o;
  o.format = GraphDefFormat::kText;
  auto bad = import_graph_def(root, node("a", {4, 3}) + node("b", {5}) +
                                        "node { name: \"g\" op: \"BroadcastGradientArgs\" input: \"a\" input: \"b\" }",
                              o, "bga.pbtxt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("node 'g'"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("do not broadcast"), std::string::npos) << bad.status();
}

// Imports the text-format GraphDef `text` into `root` (a new graph when not given: then only the
// status of the result may be used, as its nodes die with that graph).
Result<ImportedGraph> import_text(const std::string& text, Scope root = Scope::root(),
                                  const std::string& source = "hand.pbtxt") {
  ImportGraphDefOptions o;
  o.format = GraphDefFormat::kText;
  return import_graph_def(root, text, o, source);
}

void expect_error(const Result<ImportedGraph>& r, const std::vector<std::string>& parts) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status();
  for (const auto& p : parts) EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status() << " lacks " << p;
}

// TensorFlow 1.15 writes the gradient of `x + b` for x [?, 3] and b [3] with BroadcastGradientArgs
// of x's run-time Shape and b's: it folds (r0 = [], r1 = [0]), and the Sums over them run at any
// batch (hand-computed sums). Which input a run-time size against a known size above 1, or against
// another run-time size, reduces depends on the run: refused naming the node and both shapes.
TEST(TfImportTest, BroadcastGradientArgsOfRunTimeShapesFoldsWhenTheRunCannotChangeIt) {
  const std::string x = R"(node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } }
      attr { key: "shape" value { shape { dim { size: -1 } dim { size: 3 } } } } }
    node { name: "z" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } }
      attr { key: "shape" value { shape { dim { size: -1 } dim { size: 3 } } } } }
    node { name: "sx" op: "Shape" input: "x" attr { key: "T" value { type: DT_FLOAT } } attr { key: "out_type" value { type: DT_INT32 } } }
    node { name: "sz" op: "Shape" input: "z" attr { key: "T" value { type: DT_FLOAT } } attr { key: "out_type" value { type: DT_INT32 } } }
  )";
  auto ints = [](const std::string& name, const std::vector<int>& v) {
    std::string t = "tensor { dtype: DT_INT32 tensor_shape { dim { size: " + std::to_string(v.size()) + " } }";
    for (int k : v) t += " int_val: " + std::to_string(k);
    return "node { name: \"" + name + "\" op: \"Const\" attr { key: \"dtype\" value { type: DT_INT32 } } " +
           "attr { key: \"value\" value { " + t + " } } } }\n";
  };
  auto bga = [](const std::string& a, const std::string& b) {
    return "node { name: \"g\" op: \"BroadcastGradientArgs\" input: \"" + a + "\" input: \"" + b +
           "\" attr { key: \"T\" value { type: DT_INT32 } } }\n";
  };
  auto sum = [](const std::string& name, const std::string& axes) {
    return "node { name: \"" + name + "\" op: \"Sum\" input: \"x\" input: \"" + axes +
           "\" attr { key: \"T\" value { type: DT_FLOAT } } attr { key: \"Tidx\" value { type: DT_INT32 } } }\n";
  };
  Scope root = Scope::root();
  auto r = import_text(x + ints("sb", {3}) + bga("sx", "sb") + sum("gx", "g") + sum("gb", "g:1"), root);
  ASSERT_TRUE(r.ok()) << r.status();
  Session sess(root);
  for (int64_t batch : {1, 4}) {
    std::vector<float> xv;
    for (int64_t i = 0; i < batch * 3; ++i) xv.push_back(static_cast<float>(i) * 0.5f - 1.f);
    auto out = sess.run_by_name({{"x", Tensor::from_vector<float>(xv, Shape{batch, 3})}}, {"gx", "gb"});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)[0].shape(), (Shape{batch, 3}));  // r0 empty: x's gradient as it is
    for (int64_t i = 0; i < batch * 3; ++i) EXPECT_EQ((*out)[0].data<float>()[i], xv[static_cast<size_t>(i)]);
    ASSERT_EQ((*out)[1].shape(), (Shape{3}));  // r1 = [0]: summed over the batch
    for (int64_t j = 0; j < 3; ++j) {
      float want = 0;
      for (int64_t i = 0; i < batch; ++i) want += xv[static_cast<size_t>(i * 3 + j)];
      EXPECT_FLOAT_EQ((*out)[1].data<float>()[j], want) << "batch " << batch << " column " << j;
    }
  }
  // The same run-time shape on both sides: nothing reduced.
  Scope same = Scope::root();
  auto r2 = import_text(x + bga("sx", "sx"), same);
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(r2->output("g:0")->node()->attrs.get<Tensor>("value")->num_elements(), 0);
  EXPECT_EQ(r2->output("g:1")->node()->attrs.get<Tensor>("value")->num_elements(), 0);
  expect_error(import_text(x + ints("s5", {5, 3}) + bga("sx", "s5"), Scope::root(), "bga.pbtxt"),
               {"node 'g'", "BroadcastGradientArgs", "[?,3]", "[5,3]", "run time", "bga.pbtxt"});
  expect_error(import_text(x + bga("sx", "sz")), {"node 'g'", "[?,3]", "depends on the run"});
}

TEST(TfImportTest, UnsupportedOpsAttributesAndDtypesNameNodeOpAndFile) {
  const std::string x = R"(node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } })";
  expect_error(import_text(x + R"( node { name: "w" op: "Cumsum" input: "x" })"),
               {"node 'w'", "op Cumsum", "hand.pbtxt", "not supported"});
  expect_error(import_text(x + R"( node { name: "r" op: "Relu" input: "x" attr { key: "frobnicate" value { i: 1 } } })"),
               {"node 'r'", "op Relu", "attribute 'frobnicate'", "hand.pbtxt"});
  expect_error(import_text(R"(node { name: "h" op: "Placeholder" attr { key: "dtype" value { type: DT_HALF } } })"),
               {"node 'h'", "attribute 'dtype'", "DT_HALF"});
  expect_error(import_text(x + R"( node { name: "c" op: "Conv2D" input: "x" input: "x"
      attr { key: "data_format" value { s: "NCHW" } } attr { key: "strides" value { list { i: 1 i: 1 i: 1 i: 1 } } }
      attr { key: "padding" value { s: "SAME" } } })"),
               {"node 'c'", "op Conv2D", "attribute 'data_format'", "NCHW"});
  expect_error(import_text(x + R"( node { name: "m" op: "MatMul" input: "x" input: "nowhere" })"),
               {"node 'm'", "nowhere", "names no node"});
  expect_error(import_text(x + R"( node { name: "a" op: "Identity" input: "b" } node { name: "b" op: "Identity" input: "a" })"),
               {"cycle"});
  expect_error(import_text(x + R"( node { name: "s" op: "SaveV2" input: "x" })"), {"node 's'", "op SaveV2"});
  expect_error(import_text(x + R"( node { name: "r" op: "Reshape" input: "x" input: "x" })"),
               {"node 'r'", "op Reshape", "computed at run time"});
  expect_error(import_text(x + x), {"node 'x'", "defined twice"});
  expect_error(import_text(R"(node { name: "a:b" op: "NoOp" })"), {"node 'a:b'", "not a TensorFlow node name"});
  expect_error(import_text(R"(node { name: "k" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
      attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 3 } } tensor_content: "abcd" } } } })"),
               {"node 'k'", "attribute 'value'", "4 bytes", "needs 12"});
  // A typed field with the wrong count, and the splat form TensorFlow writes.
  expect_error(import_text(R"(node { name: "k" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
      attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 3 } } float_val: 1 float_val: 2 } } } })"),
               {"node 'k'", "2 float_val values for 3 elements"});
  Scope kept = Scope::root();
  auto splat = import_text(R"(node { name: "k" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
      attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 3 } } int_val: 7 } } } })",
                           kept);
  ASSERT_TRUE(splat.ok()) << splat.status();
  auto kv = splat->node("k")->attrs.get<Tensor>("value");
  ASSERT_TRUE(kv.ok());
  const Tensor k = *kv;
  EXPECT_EQ(k.num_elements(), 3);
  EXPECT_EQ(k.data<int32_t>()[2], 7);
  // A splat constant that a few bytes spell as 512 MiB is refused before it is allocated.
  expect_error(import_text(R"(node { name: "big" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
      attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 134217728 } } float_val: 1 } } } })"),
               {"node 'big'", "536870912 bytes exceeds"});
  // A function library is refused.
  expect_error(import_text(x + R"( library { function { signature { name: "f" } } })"), {"hand.pbtxt"});
}

TEST(TfImportTest, TruncatedAndGarbageInputsAreErrorsNamingTheFile) {
  const std::string pb = slurp(golden_dir() + "/mlp_forward.pb");
  ASSERT_GT(pb.size(), 100u);
  Scope root = Scope::root();
  for (size_t cut : {size_t{1}, size_t{7}, pb.size() / 2, pb.size() - 1}) {
    ImportGraphDefOptions o;
    o.format = GraphDefFormat::kBinary;
    auto r = import_graph_def(root, pb.substr(0, cut), o, "cut.pb");
    ASSERT_FALSE(r.ok()) << cut;
    EXPECT_NE(r.status().message().find("cut.pb"), std::string::npos) << r.status();
  }
  auto garbage = import_graph_def(root, std::string("\xff\xfe garbage {{{", 15), {}, "junk.pb");
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find("junk.pb"), std::string::npos) << garbage.status();
  ImportGraphDefOptions as_text;
  as_text.format = GraphDefFormat::kText;
  auto text = import_graph_def(root, "node { name: \"x\" op: ", as_text, "t.pbtxt");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("t.pbtxt"), std::string::npos) << text.status();
  EXPECT_NE(text.status().message().find("line 1"), std::string::npos) << text.status();
  auto missing = import_graph_def_file(root, golden_dir() + "/no_such.pb");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no_such.pb"), std::string::npos) << missing.status();
  EXPECT_EQ(root.graph()->num_nodes(), 0);  // nothing was added by any failed import
}

// The prefix tensors and golden values of the Saver tests.
const nlohmann::json& saver_expected() {
  return golden_json("saver_expected.json");
}

std::vector<std::pair<std::string, Tensor>> saver_feeds() {
  std::vector<std::pair<std::string, Tensor>> f;
  for (const auto& [k, v] : saver_expected()["feeds"].items()) {
    std::vector<float> vals;
    std::vector<int64_t> dims{static_cast<int64_t>(v.size()), static_cast<int64_t>(v[0].size())};
    for (const auto& row : v)
      for (const auto& x : row) vals.push_back(x.get<float>());
    f.emplace_back(k, Tensor::from_vector<float>(vals, Shape(dims)));
  }
  return f;
}

std::vector<float> flat(const nlohmann::json& j) {
  std::vector<float> out;
  if (j.is_array()) {
    for (const auto& x : j) {
      auto sub = flat(x);
      out.insert(out.end(), sub.begin(), sub.end());
    }
  } else {
    out.push_back(j.get<float>());
  }
  return out;
}

// A TensorFlow GraphDef with a Saver (Adam on reference variables, replica_device_setter) runs its
// own save and restore ops by name, as TensorFlow's C++ users run a SaverDef:
//  - restore_all fed TensorFlow's checkpoint (written after two TensorFlow steps) gives every
//    variable (slots and beta powers included) TensorFlow's bytes, and actorflow's next step equals
//    TensorFlow's third to 1e-5: Adam's moments and count reached actorflow's variable actor;
//  - save/control_dependency fed a prefix writes a checkpoint holding exactly TensorFlow's names,
//    every model variable and beta power bit-identical to what the session reads, and the Adam
//    slots equal to TensorFlow's after its third step (the variable actor's state, not the graph's
//    zero slot variables);
//  - a missing checkpoint, a directory that does not exist: errors naming the op and the path.
// With its devices kept, the graph places: variables, the slot reads and writes on the ps.
TEST_P(TfGoldenTest, TheGraphsOwnSaverSavesAndRestoresAsTensorFlowsDoes) {
  const std::string file = golden_dir() + "/mlp_train_saver_adam.pb";
  const auto& want = saver_expected();
  {
    Scope root = Scope::root();
    auto imported = import_graph_def_file(root, file);
    ASSERT_TRUE(imported.ok()) << imported.status();
    Graph placed = *root.graph();
    ASSERT_TRUE(place_on_ps_and_worker(placed).ok());
    int slot_ops = 0;
    for (int i = 0; i < placed.num_nodes(); ++i) {
      const Node* n = placed.node(i);
      if (n->op == "VariableSlots" || n->op == "RestoreVariableSlots") {
        EXPECT_EQ(n->assigned_device, "/job:ps/replica:0/task:0/device:CPU:0") << n->name;
        ++slot_ops;
      }
    }
    EXPECT_EQ(slot_ops, 8);  // 4 variables with Adam slots, each read by save and written by restore
  }
  Scope root = Scope::root();
  ASSERT_TRUE(import_cleared(root, file));
  std::vector<std::string> names;
  for (const auto& [n, v] : want["saved"].items()) names.push_back(n);
  ASSERT_EQ(names.size(), 14u);  // 4 variables, 8 Adam slots, 2 beta powers
  Session sess(root);
  const std::string tf_ckpt = golden_dir() + "/saver_ckpt/tf.ckpt";
  auto restored = sess.run_by_name({{"save/Const:0", tf_string_tensor(tf_ckpt)}}, {}, {"save/restore_all"});
  ASSERT_TRUE(restored.ok()) << restored.status();
  auto vals = sess.run_by_name({}, names);
  ASSERT_TRUE(vals.ok()) << vals.status();
  for (size_t i = 0; i < names.size(); ++i) {
    const auto w = flat(want["saved"][names[i]]);
    ASSERT_EQ(static_cast<int64_t>(w.size()), (*vals)[i].num_elements()) << names[i];
    for (size_t k = 0; k < w.size(); ++k) EXPECT_EQ((*vals)[i].data<float>()[k], w[k]) << names[i] << " element " << k;
  }
  ASSERT_TRUE(sess.run_by_name(saver_feeds(), {}, {"train"}).ok());
  testing::TempDir dir;
  const std::string prefix = dir.path() + "/af.ckpt";
  auto saved = sess.run_by_name({{"save/Const:0", tf_string_tensor(prefix)}}, {"save/control_dependency"});
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*saved)[0].data<uint8_t>()),
                        static_cast<size_t>((*saved)[0].num_elements())),
            prefix);
  auto third = sess.run_by_name({}, names);
  ASSERT_TRUE(third.ok()) << third.status();
  auto reader = TfCheckpointReader::open(prefix);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ(reader->entries().size(), names.size());
  int slots = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    auto t = reader->read(names[i]);
    ASSERT_TRUE(t.ok()) << t.status();
    const std::string& bytes = t->bytes;
    const auto tf_third = flat(want["third"][names[i]]);
    ASSERT_EQ(bytes.size(), tf_third.size() * 4) << names[i];
    if (names[i].find("/Adam") == std::string::npos) {
      // The session's own values, bit for bit; and TensorFlow's third step to 1e-5.
      EXPECT_EQ(std::memcmp(bytes.data(), (*third)[i].raw_data(), bytes.size()), 0) << names[i];
    } else {
      ++slots;
    }
    for (size_t k = 0; k < tf_third.size(); ++k) {
      float f;
      std::memcpy(&f, bytes.data() + 4 * k, 4);
      EXPECT_NEAR(f, tf_third[k], 1e-5) << names[i] << " element " << k;
    }
  }
  EXPECT_EQ(slots, 8);
  auto missing = sess.run_by_name({{"save/Const:0", tf_string_tensor(dir.path() + "/none")}}, {}, {"save/restore_all"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("RestoreV2 'save/RestoreV2'"), std::string::npos) << missing.status();
  EXPECT_NE(missing.status().message().find(dir.path() + "/none"), std::string::npos) << missing.status();
  // As TensorFlow's BundleWriter, SaveV2 makes the prefix's directories; one it cannot make (a
  // file is in the way) is an error naming the op and the path.
  auto newdir = sess.run_by_name({{"save/Const:0", tf_string_tensor(dir.path() + "/new/dir/x")}},
                                 {"save/control_dependency"});
  ASSERT_TRUE(newdir.ok()) << newdir.status();
  EXPECT_TRUE(TfCheckpointReader::open(dir.path() + "/new/dir/x").ok());
  { std::ofstream(dir.path() + "/file") << "x"; }
  auto nodir = sess.run_by_name({{"save/Const:0", tf_string_tensor(dir.path() + "/file/sub/x")}},
                                {"save/control_dependency"});
  ASSERT_FALSE(nodir.ok());
  EXPECT_NE(nodir.status().message().find("SaveV2 'save/SaveV2'"), std::string::npos) << nodir.status();
  EXPECT_NE(nodir.status().message().find("file/sub"), std::string::npos) << nodir.status();
}

// The same model over two ps tasks with TensorFlow's sharded Saver (Saver(sharded=True), as
// MonitoredTrainingSession's Scaffold makes it: StaticRegexFullMatch, Select and StringJoin make
// "<prefix>_temp/part", ShardedFilename each shard's name, one SaveV2 per device, Pack and
// MergeV2Checkpoints the one bundle). The imported graph restores TensorFlow's sharded checkpoint
// bit for bit, then saves by running the SaverDef's save tensor ("save/Identity:0"): one index,
// two data files, no temporary directory left, every entry the session's value (slots: TensorFlow's
// third step to 1e-5), restored again by save/restore_all; TensorFlow's reader reads it.
TEST_P(TfGoldenTest, AShardedSaverSavesMergesAndRestoresAsTensorFlowsDoes) {
  const std::string file = golden_dir() + "/mlp_train_saver_sharded.pb";
  const auto& want = saver_expected();
  Scope root = Scope::root();
  ASSERT_TRUE(import_cleared(root, file));
  std::vector<std::string> names;
  for (const auto& [n, v] : want["saved"].items()) names.push_back(n);
  Session sess(root);
  auto restored = sess.run_by_name({{"save/Const:0", tf_string_tensor(golden_dir() + "/saver_ckpt/tf_sharded.ckpt")}}, {},
                                   {"save/restore_all"});
  ASSERT_TRUE(restored.ok()) << restored.status();
  auto vals = sess.run_by_name({}, names);
  ASSERT_TRUE(vals.ok()) << vals.status();
  for (size_t i = 0; i < names.size(); ++i) {
    const auto w = flat(want["saved"][names[i]]);
    ASSERT_EQ(static_cast<int64_t>(w.size()), (*vals)[i].num_elements()) << names[i];
    for (size_t k = 0; k < w.size(); ++k) EXPECT_EQ((*vals)[i].data<float>()[k], w[k]) << names[i] << " element " << k;
  }
  ASSERT_TRUE(sess.run_by_name(saver_feeds(), {}, {"train"}).ok());
  testing::TempDir dir;
  const std::string prefix = dir.path() + "/model.ckpt";
  auto saved = sess.run_by_name({{"save/Const:0", tf_string_tensor(prefix)}}, {"save/Identity"});
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*saved)[0].data<uint8_t>()),
                        static_cast<size_t>((*saved)[0].num_elements())),
            prefix);
  std::set<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files.insert(e.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"model.ckpt.index", "model.ckpt.data-00000-of-00002",
                                          "model.ckpt.data-00001-of-00002"}));
  auto third = sess.run_by_name({}, names);
  ASSERT_TRUE(third.ok()) << third.status();
  auto reader = TfCheckpointReader::open(prefix);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->num_shards(), 2);
  ASSERT_EQ(reader->entries().size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    auto t = reader->read(names[i]);
    ASSERT_TRUE(t.ok()) << t.status();
    const auto tf_third = flat(want["third"][names[i]]);
    ASSERT_EQ(t->bytes.size(), tf_third.size() * 4) << names[i];
    if (names[i].find("/Adam") == std::string::npos) {
      EXPECT_EQ(std::memcmp(t->bytes.data(), (*third)[i].raw_data(), t->bytes.size()), 0) << names[i];
    }
    for (size_t k = 0; k < tf_third.size(); ++k) {
      float f;
      std::memcpy(&f, t->bytes.data() + 4 * k, 4);
      EXPECT_NEAR(f, tf_third[k], 1e-5) << names[i] << " element " << k;
    }
  }
  // Back to the initial values, then restored from the merged bundle.
  ASSERT_TRUE(sess.run_by_name({}, {}, {"init"}).ok());
  ASSERT_TRUE(sess.run_by_name({{"save/Const:0", tf_string_tensor(prefix)}}, {}, {"save/restore_all"}).ok());
  auto again = sess.run_by_name({}, names);
  ASSERT_TRUE(again.ok()) << again.status();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].find("/Adam") == std::string::npos) {
      EXPECT_TRUE((*again)[i].equals((*third)[i])) << names[i];
    } else {  // the graph's slot variable now holds the restored slot (actorflow's own was saved)
      const auto tf_third = flat(want["third"][names[i]]);
      for (size_t k = 0; k < tf_third.size(); ++k) EXPECT_NEAR((*again)[i].data<float>()[k], tf_third[k], 1e-5) << names[i];
    }
  }
  const std::string python = testing::tf_python();
  if (access(python.c_str(), X_OK) == 0) {
    const std::string out = dir.path() + "/tf.json", err = dir.path() + "/tf.err";
    const std::string cmd = python + " " + kGoldenBase + "/tf_read_ckpt.py " + prefix + " > " + out + " 2> " + err;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(err);
    const auto got = nlohmann::json::parse(slurp(out));
    ASSERT_EQ(got.size(), names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string hex = got[names[i]]["hex"].get<std::string>();
      ASSERT_EQ(hex.size(), static_cast<size_t>((*third)[i].num_elements()) * 8) << names[i];
      if (names[i].find("/Adam") != std::string::npos) continue;
      std::string bytes;
      for (size_t k = 0; k + 1 < hex.size(); k += 2) bytes += static_cast<char>(std::stoi(hex.substr(k, 2), nullptr, 16));
      EXPECT_EQ(std::memcmp(bytes.data(), (*third)[i].raw_data(), bytes.size()), 0) << names[i];
    }
  }
}

// TensorFlow's own reader (tf.train.load_checkpoint, .venv-tf) reads what the imported graph's
// save op wrote after two actorflow steps: every entry, bit-identical to the session's variables,
// and the Adam slots equal to TensorFlow's after two steps (from TensorFlow's checkpoint) to 1e-5.
TEST_P(TfGoldenTest, TensorFlowReadsTheCheckpointTheImportedSaverWrote) {
  const std::string python = golden_python();
  if (access(python.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << python << " (" << golden_python_maker() << " makes it)";
  const auto& want = saver_expected();
  Scope root = Scope::root();
  ASSERT_TRUE(import_cleared(root, golden_dir() + "/mlp_train_saver_adam.pb"));
  Session sess(root);
  ASSERT_TRUE(sess.run_by_name({}, {}, {"init"}).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(sess.run_by_name(saver_feeds(), {}, {"train"}).ok());
  testing::TempDir dir;
  const std::string prefix = dir.path() + "/model.ckpt";
  ASSERT_TRUE(sess.run_by_name({{"save/Const:0", tf_string_tensor(prefix)}}, {"save/control_dependency"}).ok());
  std::vector<std::string> names;
  for (const auto& [n, v] : want["saved"].items()) names.push_back(n);
  auto vals = sess.run_by_name({}, names);
  ASSERT_TRUE(vals.ok()) << vals.status();
  const std::string out = dir.path() + "/tf.json", err = dir.path() + "/tf.err";
  const std::string cmd = python + " " + kGoldenBase + "/tf_read_ckpt.py " + prefix + " > " + out + " 2> " + err;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(err);
  const auto got = nlohmann::json::parse(slurp(out));
  ASSERT_EQ(got.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& e = got[names[i]];
    ASSERT_FALSE(e.is_null()) << names[i];
    EXPECT_EQ(e["dtype"].get<std::string>(), "float32") << names[i];
    const std::string hex = e["hex"].get<std::string>();
    std::string bytes;
    for (size_t k = 0; k + 1 < hex.size(); k += 2) bytes += static_cast<char>(std::stoi(hex.substr(k, 2), nullptr, 16));
    const auto tf_two = flat(want["saved"][names[i]]);
    ASSERT_EQ(bytes.size(), tf_two.size() * 4) << names[i];
    if (names[i].find("/Adam") == std::string::npos) {
      EXPECT_EQ(std::memcmp(bytes.data(), (*vals)[i].raw_data(), bytes.size()), 0) << names[i];
    }
    for (size_t k = 0; k < tf_two.size(); ++k) {
      float f;
      std::memcpy(&f, bytes.data() + 4 * k, 4);
      EXPECT_NEAR(f, tf_two[k], 1e-5) << names[i] << " element " << k;
    }
  }
}

const nlohmann::json& dynamic_expected() {
  return golden_json("dynamic_expected.json");
}

Tensor float_matrix(const nlohmann::json& rows) {
  std::vector<float> v;
  for (const auto& r : rows)
    for (const auto& x : r) v.push_back(x.get<float>());
  return Tensor::from_vector<float>(v, Shape{static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
}

// float16 and bfloat16 constants (TensorFlow-written: 65504, -0, 1/3, 3e-5 as a float16; 1e30 as a
// bfloat16) read through Casts to float32 give TensorFlow's y to 1e-5 relative; a float16 constant
// read by anything but a Cast is an error naming the node, the op, the dtype and the file.
TEST_P(TfGoldenTest, HalfConstantsAreWidenedExactlyForTheirCasts) {
  const std::string file = golden_dir() + "/half_consts.pbtxt";
  const auto& want = dynamic_expected()["half_consts"];
  Scope root = Scope::root();
  auto imported = import_graph_def_file(root, file);
  ASSERT_TRUE(imported.ok()) << imported.status();
  Session sess(root);
  auto y = sess.run_by_name({{"x", float_matrix(want["x"])}}, {"y", "h"});
  ASSERT_TRUE(y.ok()) << y.status();
  const Tensor w = float_matrix(want["y"]);
  ASSERT_EQ((*y)[0].shape(), w.shape());
  for (int64_t i = 0; i < w.num_elements(); ++i)
    EXPECT_NEAR((*y)[0].data<float>()[i], w.data<float>()[i], 1e-5 * std::max(1.f, std::fabs(w.data<float>()[i]))) << i;
  // The widened constant itself: float16's exact values.
  EXPECT_EQ((*y)[1].data<float>()[3], 65504.f);
  EXPECT_TRUE(std::signbit((*y)[1].data<float>()[4]));
  EXPECT_EQ((*y)[1].data<float>()[5], 0.333251953125f);
  Scope bad_root = Scope::root();
  auto bad = import_graph_def(bad_root,
                              slurp(file) + R"( node { name: "bad" op: "AddV2" input: "h" input: "h" )"
                                            R"(attr { key: "T" value { type: DT_HALF } } })",
                              {}, "half_bad.pbtxt");
  ASSERT_FALSE(bad.ok());
  for (const char* part : {"node 'bad' (op AddV2)", "float16", "half_bad.pbtxt", "Cast"})
    EXPECT_NE(bad.status().message().find(part), std::string::npos) << part << ": " << bad.status();
  EXPECT_EQ(bad_root.graph()->num_nodes(), 0);
}

// A placeholder of shape [?, 6] whose run-time batch size flows through Shape, StridedSlice and
// Pack into Reshape and Fill (and Shape -> StridedSlice -> Prod into a flattening Reshape) runs at
// batch 3 and at batch 5 with TensorFlow's outputs: the shape and batch exactly, the values to 1e-5.
TEST_P(TfGoldenTest, ARunTimeBatchSizeFeedsShapeReshapeAndFill) {
  Scope root = Scope::root();
  auto imported = import_graph_def_file(root, golden_dir() + "/dynamic_batch.pb");
  ASSERT_TRUE(imported.ok()) << imported.status();
  Session sess(root);
  for (const char* batch : {"3", "5"}) {
    SCOPED_TRACE(batch);
    const auto& want = dynamic_expected()["dynamic_batch"][batch];
    auto out = sess.run_by_name({{"x", float_matrix(want["x"])}}, {"s", "b", "r", "f", "flat", "y"});
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor& s = (*out)[0];
    ASSERT_EQ(s.dtype(), DType::kInt32);
    ASSERT_EQ(s.num_elements(), 2);
    EXPECT_EQ(s.data<int32_t>()[0], want["s"][0].get<int32_t>());
    EXPECT_EQ(s.data<int32_t>()[1], 6);
    ASSERT_EQ((*out)[1].dtype(), DType::kInt32);
    EXPECT_EQ((*out)[1].data<int32_t>()[0], std::stoi(batch));
    const int64_t b = std::stoi(batch);
    EXPECT_EQ((*out)[2].shape(), (Shape{b, 2, 3}));
    EXPECT_EQ((*out)[3].shape(), (Shape{b, 4}));
    EXPECT_EQ((*out)[4].shape(), (Shape{b, 6}));
    EXPECT_EQ((*out)[5].shape(), (Shape{b, 6}));
    for (const auto& [k, idx] : std::vector<std::pair<std::string, int>>{{"r", 2}, {"f", 3}, {"flat", 4}, {"y", 5}}) {
      const auto w = flat(want[k]);
      ASSERT_EQ(static_cast<int64_t>(w.size()), (*out)[static_cast<size_t>(idx)].num_elements()) << k;
      for (size_t i = 0; i < w.size(); ++i)
        EXPECT_NEAR((*out)[static_cast<size_t>(idx)].data<float>()[i], w[i], 1e-5) << k << " element " << i;
    }
  }
}

// Training graphs as TensorFlow 1.x users write them, with the batch known only at run time
// (x [None, 4, 4, 1], y [None, 3]; make_dynamic_golden.py): their gradients compute shapes at run
// time (Shape/ShapeN of [?, ...] tensors, BroadcastGradientArgs, Sum over run-time axes, Reshape
// to a run-time shape, Tile, GatherV2 and Prod of a run-time shape, ...). Both variable forms
// (placed as written on a ps and a worker, and run in one process) take a step at
// batch 3 and then at batch 5 in one Session: the loss before each and every variable after each
// equal TensorFlow's to 1e-5.
TEST_P(TfGoldenTest, TrainingGraphsWithARunTimeBatchTrainAsTensorFlowDoes) {
  for (const char* form : {"ref", "resource"}) {
    const std::string name = std::string("dynamic_train_") + form + "_adam";
    SCOPED_TRACE(name);
    {
      Scope placed = Scope::root();
      auto imported = import_graph_def_file(placed, golden_dir() + "/" + name + ".pb");
      ASSERT_TRUE(imported.ok()) << imported.status();
      ASSERT_TRUE(place_on_ps_and_worker(*placed.graph()).ok());
    }
    // In one process: the same graph with its devices cleared, as TensorFlow ran it.
    Scope root = Scope::root();
    ASSERT_TRUE(import_cleared(root, golden_dir() + "/" + name + ".pb"));
    Session sess(root);
    ASSERT_TRUE(sess.status().ok()) << sess.status();
    auto init = sess.run_by_name({}, {}, {"init"});
    ASSERT_TRUE(init.ok()) << init.status();
    const auto& steps = dynamic_expected()[name];
    ASSERT_EQ(steps.size(), 2u);
    for (const auto& step : steps) {
      const int64_t b = step["batch"].get<int64_t>();
      SCOPED_TRACE("batch " + std::to_string(b));
      const std::vector<float> xs = flat(step["x"]);
      ASSERT_EQ(static_cast<int64_t>(xs.size()), b * 16);
      const std::vector<std::pair<std::string, Tensor>> feeds = {
          {"x", Tensor::from_vector<float>(xs, Shape{b, 4, 4, 1})}, {"y", float_matrix(step["y"])}};
      auto loss = sess.run_by_name(feeds, {"loss"});
      ASSERT_TRUE(loss.ok()) << loss.status();
      EXPECT_NEAR((*loss)[0].data<float>()[0], step["loss"].get<double>(), 1e-5);
      auto train = sess.run_by_name(feeds, {}, {"train"});
      ASSERT_TRUE(train.ok()) << train.status();
      std::vector<std::string> vars;
      for (const auto& [v, _] : step["after"].items()) vars.push_back(v);
      ASSERT_EQ(vars.size(), 10u);  // 8 of the model and Adam's two beta powers
      auto after = sess.run_by_name({}, vars);
      ASSERT_TRUE(after.ok()) << after.status();
      for (size_t i = 0; i < vars.size(); ++i) {
        const std::vector<float> w = flat(step["after"][vars[i]]);
        ASSERT_EQ(static_cast<int64_t>(w.size()), (*after)[i].num_elements()) << vars[i];
        for (size_t k = 0; k < w.size(); ++k)
          ASSERT_NEAR((*after)[i].data<float>()[k], w[k], 1e-5) << vars[i] << " element " << k;
      }
    }
  }
}

// TensorFlow's FtrlOptimizer (ApplyFtrl with l1, l2 and lr_power -0.5; ApplyFtrlV2 with an l2
// shrinkage, lr_power -0.7 and a zero initial accumulator), reference and resource variables:
// three steps give TensorFlow's variables to 1e-5, and the graph's own Saver writes the
// accumulator and linear slots ("w/Ftrl", "w/Ftrl_1") that actorflow's variable actor holds, equal
// to TensorFlow's, and restores them into a fresh server's variable actors. An FTRL update whose l2_shrinkage is not a constant, or with
// multiply_linear_by_lr, is refused naming the node.
TEST_P(TfGoldenTest, FtrlTrainingGraphsTrainAsTensorFlowDoesAndSaveTheirSlots) {
  for (const char* name : {"ftrl_v1_ref", "ftrl_v1_resource", "ftrl_v2_ref", "ftrl_v2_resource"}) {
    SCOPED_TRACE(name);
    const auto& want = dynamic_expected()[name];
    ASSERT_FALSE(want.is_null());
    Scope root = Scope::root();
    ASSERT_TRUE(import_cleared(root, golden_dir() + "/" + name + ".pb"));
    int ftrl = 0;
    for (int i = 0; i < root.graph()->num_nodes(); ++i) ftrl += root.graph()->node(i)->op == "ApplyFtrl";
    EXPECT_EQ(ftrl, 8);
    Session sess(root);
    ASSERT_TRUE(sess.run_by_name({}, {}, {"init"}).ok());
    const std::vector<float> xs = flat(want["x"]);
    const std::vector<std::pair<std::string, Tensor>> feeds = {{"x", Tensor::from_vector<float>(xs, Shape{3, 4, 4, 1})},
                                                               {"y", float_matrix(want["y"])}};
    for (int step = 0; step < 3; ++step) {
      auto r = sess.run_by_name(feeds, {}, {"train"});
      ASSERT_TRUE(r.ok()) << r.status();
    }
    std::vector<std::string> vars;
    for (const auto& [v, _] : want["after"].items())
      if (v.find("/Ftrl") == std::string::npos) vars.push_back(v);
    ASSERT_EQ(vars.size(), 8u);
    auto after = sess.run_by_name({}, vars);
    ASSERT_TRUE(after.ok()) << after.status();
    for (size_t i = 0; i < vars.size(); ++i) {
      const std::vector<float> w = flat(want["after"][vars[i]]);
      ASSERT_EQ(static_cast<int64_t>(w.size()), (*after)[i].num_elements()) << vars[i];
      bool moved = false;
      for (size_t k = 0; k < w.size(); ++k) {
        ASSERT_NEAR((*after)[i].data<float>()[k], w[k], 1e-5) << vars[i] << " element " << k;
        moved = moved || w[k] != 0;
      }
      EXPECT_TRUE(moved) << vars[i];
    }
    testing::TempDir dir;
    const std::string prefix = dir.path() + "/ftrl.ckpt";
    auto saved = sess.run_by_name({{"save/Const:0", tf_string_tensor(prefix)}}, {"save/control_dependency"});
    ASSERT_TRUE(saved.ok()) << saved.status();
    auto reader = TfCheckpointReader::open(prefix);
    ASSERT_TRUE(reader.ok()) << reader.status();
    int slots = 0;
    for (const auto& [v, values] : want["after"].items()) {
      if (v.find("/Ftrl") == std::string::npos) continue;
      auto t = reader->read(v);
      ASSERT_TRUE(t.ok()) << v << ": " << t.status();
      const std::vector<float> w = flat(values);
      ASSERT_EQ(t->bytes.size(), w.size() * 4) << v;
      for (size_t k = 0; k < w.size(); ++k) {
        float f;
        std::memcpy(&f, t->bytes.data() + 4 * k, 4);
        ASSERT_NEAR(f, w[k], 1e-5 * std::max(1.f, std::fabs(w[k]))) << v << " element " << k;
      }
      ++slots;
    }
    EXPECT_EQ(slots, 16);  // accumulator and linear of each of the 8 variables
    // A fresh process's view: a new Session (its own server, so new variable actors) restores the
    // checkpoint with the graph's restore_all; one more step there and one in the first session
    // give the same variables only if the FTRL slots came back into the variable actor (resource
    // variables restore through RestoreV2 -> Identity -> AssignVariableOp).
    Session fresh(root);
    auto restored = fresh.run_by_name({{"save/Const:0", tf_string_tensor(prefix)}}, {}, {"save/restore_all"});
    ASSERT_TRUE(restored.ok()) << restored.status();
    ASSERT_TRUE(fresh.run_by_name(feeds, {}, {"train"}).ok());
    ASSERT_TRUE(sess.run_by_name(feeds, {}, {"train"}).ok());
    auto cont = sess.run_by_name({}, vars);
    auto again = fresh.run_by_name({}, vars);
    ASSERT_TRUE(cont.ok() && again.ok());
    for (size_t i = 0; i < vars.size(); ++i)
      for (int64_t k = 0; k < (*cont)[i].num_elements(); ++k)
        ASSERT_NEAR((*again)[i].data<float>()[k], (*cont)[i].data<float>()[k], 1e-6) << vars[i] << " element " << k;
  }
  const std::string graph = slurp(golden_dir() + "/ftrl_v2_ref.pb");
  for (int bad = 0; bad < 2; ++bad) {
    actorflow::tf::GraphDef d;
    ASSERT_TRUE(d.ParseFromString(graph));
    bool changed = false;
    for (auto& n : *d.mutable_node()) {
      if (n.op() != "ApplyFtrlV2" || changed) continue;
      if (bad == 0) (*n.mutable_input())[7] = "x";  // l2_shrinkage: a run-time tensor
      else {  // TensorFlow 1.15's ApplyFtrlV2 has no such attribute: it is added there
        bool set = false;
        for (auto& a : *n.mutable_attr())
          if (a.key() == "multiply_linear_by_lr") set = (a.mutable_value()->set_b(true), true);
        if (!set) {
          auto* a = n.add_attr();
          a->set_key("multiply_linear_by_lr");
          a->mutable_value()->set_b(true);
        }
      }
      changed = true;
    }
    ASSERT_TRUE(changed);
    std::string bytes;
    ASSERT_TRUE(d.SerializeToString(&bytes));
    Scope root = Scope::root();
    auto r = import_graph_def(root, bytes, {}, "ftrl_bad.pb");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status();
    for (const char* part : {"ApplyFtrlV2", "ftrl_bad.pb", bad == 0 ? "l2_shrinkage" : "multiply_linear_by_lr"})
      EXPECT_NE(r.status().message().find(part), std::string::npos) << part << ": " << r.status();
  }
}

}  // namespace
}  // namespace actorflow
