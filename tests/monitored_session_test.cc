// train::MonitoredTrainingSession and its hooks (include/actorflow/monitored_session.h) on a local
// server: StopAtStepHook ends at the exact step, CheckpointSaverHook saves every N steps and a new
// chief session restores the last one, LoggingTensorHook and SummarySaverHook report the values
// the runs computed (worked out by hand), a user hook's extra fetches, NanTensorHook failing or
// stopping, and misuse as Status values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "actorflow/monitored_session.h"
#include "actorflow/train.h"
#include "data/tf/tf_checkpoint.h"
#include "actorflow/cluster.h"
#include "actorflow/cluster_options.h"
#include "tests/util/event_reader.h"
#include "tests/util/local_server.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

namespace train = actorflow::train;
using testing::TempDir;
using testing::vec;

// w = [1] on the "ps" (/cpu:1), loss = sum(w * x) (or sum(log(w * x)) with `log_loss`), plain
// gradient descent with lr 0.1 and the global step: with x = 1 each run moves w by -0.1.
struct Model {
  Scope root = Scope::root();
  Output w, x, loss, gs, train_op;
  explicit Model(bool log_loss = false) {
    Scope ps = root.with_device("/cpu:1"), worker = root.with_device("/cpu:0");
    w = train::get_variable(ps, "w", Shape{1}, DType::kFloat32,
                            [](const Scope& s, const Shape&, DType) { return ops::constant(s, vec({1})); });
    gs = train::get_or_create_global_step(ps);
    x = ops::placeholder(worker, DType::kFloat32, Shape{1}, "x");
    Output wx = ops::mul(worker, w, x);
    loss = ops::reduce_sum(worker.with_op_name("loss"), log_loss ? ops::log(worker, wx) : wx);
    auto t = train::GradientDescentOptimizer(0.1f).minimize(worker, loss, gs);
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) train_op = *t;
  }
};

int64_t read_step(train::MonitoredTrainingSession& s, const Output& gs) {
  auto r = s.raw_session().run({gs});
  return r.ok() ? (*r)[0].data<int64_t>()[0] : -1;
}

// A hook's after_run that fails with Unavailable once (its own run met a task that died) is
// recovered from as a failed step is, and training goes on: the step counts, the next runs too.
// A hook's other error still ends the run.
TEST(MonitoredSessionTest, AHookThatMeetsADeadTaskIsRecoveredFromAndTrainingGoesOn) {
  struct FlakyHook : train::SessionRunHook {
    int calls = 0;
    Code code = Code::kUnavailable;
    Status after_run(train::SessionRunContext&, const train::SessionRunValues&) override {
      return ++calls == 2 ? Status(code, "task /job:ps/replica:0/task:0 failed during the hook's run") : Status::OK();
    }
  };
  for (Code code : {Code::kUnavailable, Code::kInvalidArgument}) {
    auto server = testing::two_device_server();
    Model m;
    auto hook = std::make_shared<FlakyHook>();
    hook->code = code;
    train::MonitoredTrainingSession::Options o;
    o.master = server->target();
    o.hooks = {hook};
    o.ready_timeout_secs = 10;
    auto sess = train::MonitoredTrainingSession::create(m.root, o);
    ASSERT_TRUE(sess.ok()) << sess.status();
    int ok = 0;
    for (int i = 0; i < 4; ++i) ok += (*sess)->run({{m.x, vec({1})}}, {}, {m.train_op}).ok();
    if (code == Code::kUnavailable) {
      EXPECT_EQ(ok, 4);
      EXPECT_EQ(read_step(**sess, m.gs), 4);
    } else {
      EXPECT_EQ(ok, 3);  // the second run returns the hook's error
      EXPECT_EQ(read_step(**sess, m.gs), 4);
    }
    EXPECT_EQ(hook->calls, 4);
  }
}

// Options::for_task reads the cluster file's [supervisor] for one task, as a seed program passes
// them to tf.train.MonitoredTrainingSession by hand.
TEST(MonitoredSessionTest, OptionsForATaskComeFromItsClusterFile) {
  TempDir dir;
  const std::string file = dir.write(
      "c.toml",
      "[jobs]\nps = [\"localhost:7001\"]\nworker = [\"localhost:7002\", \"127.0.0.1:7003\"]\n"
      "[supervisor]\nchief = \"worker/1\"\nlogdir = \"/tmp/runs/a\"\nsave_checkpoint_secs = 7\n"
      "keep_checkpoints = 3\ncheckpoint_format = \"tensorflow\"\nready_timeout_secs = 9\n");
  auto cluster = ClusterSpec::from_file(file);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto chief = train::MonitoredTrainingSession::Options::for_task(*cluster, TaskId{"worker", 1});
  ASSERT_TRUE(chief.ok()) << chief.status();
  EXPECT_EQ(chief->master, "actorflow://127.0.0.1:7003");
  EXPECT_TRUE(chief->is_chief);
  EXPECT_EQ(chief->checkpoint_dir, "/tmp/runs/a");
  EXPECT_EQ(chief->save_checkpoint_secs, 7);
  EXPECT_EQ(chief->keep_checkpoints, 3);
  EXPECT_TRUE(chief->tensorflow_checkpoints);
  EXPECT_EQ(chief->ready_timeout_secs, 9);
  EXPECT_EQ(chief->task_name, "worker/1");
  auto other = train::MonitoredTrainingSession::Options::for_task(*cluster, TaskId{"worker", 0});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(other->is_chief);
  EXPECT_EQ(other->master, "actorflow://localhost:7002");
  auto missing = train::MonitoredTrainingSession::Options::for_task(*cluster, TaskId{"worker", 5});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("worker"), std::string::npos) << missing.status();
}

// A worker whose chief never initializes the model gives up after ready_timeout_secs, and the
// error names the variables that are not initialized (as TensorFlow's "Variables not
// initialized: ..."), not only how many.
TEST(MonitoredSessionTest, AWorkerWaitingForTheChiefNamesTheUninitializedVariables) {
  auto server = testing::two_device_server();
  Model m;
  train::MonitoredTrainingSession::Options o;
  o.master = server->target();
  o.is_chief = false;
  o.ready_timeout_secs = 0.5;
  auto sess = train::MonitoredTrainingSession::create(m.root, o);
  ASSERT_FALSE(sess.ok());
  EXPECT_EQ(sess.status().code(), Code::kDeadlineExceeded) << sess.status();
  for (const char* part : {"0 of 2 variables initialized", "not initialized: w, global_step"})
    EXPECT_NE(sess.status().message().find(part), std::string::npos) << part << ": " << sess.status();
}

TEST(MonitoredSessionTest, StopsAtTheLastStepSavesEveryNStepsAndANewChiefRestores) {
  auto server = testing::two_device_server();
  TempDir dir;
  auto saver = std::make_shared<train::CheckpointSaverHook>(4, 0.0);
  {
    Model m;
    train::MonitoredTrainingSession::Options o;
    o.master = server->target();
    o.checkpoint_dir = dir.path();
    o.hooks = {std::make_shared<train::StopAtStepHook>(0, 10)};
    o.chief_only_hooks = {saver};
    auto sess = train::MonitoredTrainingSession::create(m.root, o);
    ASSERT_TRUE(sess.ok()) << sess.status();
    int runs = 0;
    while (!(*sess)->should_stop()) {
      auto r = (*sess)->run({{m.x, vec({1})}}, {m.loss}, {m.train_op});
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->size(), 1u) << "only the loop's own fetches come back";
      ++runs;
      ASSERT_LT(runs, 100);
    }
    EXPECT_EQ(runs, 10);
    EXPECT_EQ(read_step(**sess, m.gs), 10);
    auto w = (*sess)->raw_session().run({m.w});
    ASSERT_TRUE(w.ok());
    EXPECT_NEAR((*w)[0].data<float>()[0], 0.0f, 1e-5);  // 1 - 10 * 0.1
    // Saved when the runs had read steps 4 and 8.
    ASSERT_EQ(saver->saved().size(), 2u);
    for (const auto& p : saver->saved()) EXPECT_TRUE(std::filesystem::exists(p)) << p;
    auto again = (*sess)->run({{m.x, vec({1})}}, {m.loss}, {m.train_op});
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.status().code(), Code::kFailedPrecondition);
    ASSERT_TRUE((*sess)->close().ok());
  }
  // A new chief over the same directory restores step 10 (the final checkpoint of close()) and
  // trains 3 more steps with num_steps.
  Model m;
  train::MonitoredTrainingSession::Options o;
  o.master = server->target();
  o.checkpoint_dir = dir.path();
  o.hooks = {std::make_shared<train::StopAtStepHook>(3, 0)};
  auto sess = train::MonitoredTrainingSession::create(m.root, o);
  ASSERT_TRUE(sess.ok()) << sess.status();
  EXPECT_EQ((*sess)->supervisor().restored_step(), 10);
  int runs = 0;
  while (!(*sess)->should_stop() && runs < 100) {
    ASSERT_TRUE((*sess)->run({{m.x, vec({1})}}, {}, {m.train_op}).ok());
    ++runs;
  }
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(read_step(**sess, m.gs), 13);
  auto w = (*sess)->raw_session().run({m.w});
  ASSERT_TRUE(w.ok());
  EXPECT_NEAR((*w)[0].data<float>()[0], -0.3f, 1e-5);
}

// With tensorflow_checkpoints the chief's checkpoints are TensorFlow's V2 checkpoints (the
// Supervisor's final one at close() included) holding w and the global step under their names;
// a new chief in actorflow's default format restores from them and goes on.
TEST(MonitoredSessionTest, TensorFlowFormatCheckpointsAreWrittenAndRestored) {
  auto server = testing::two_device_server();
  TempDir dir;
  {
    Model m;
    train::MonitoredTrainingSession::Options o;
    o.master = server->target();
    o.checkpoint_dir = dir.path();
    o.tensorflow_checkpoints = true;
    o.hooks = {std::make_shared<train::StopAtStepHook>(0, 4)};
    auto sess = train::MonitoredTrainingSession::create(m.root, o);
    ASSERT_TRUE(sess.ok()) << sess.status();
    for (int runs = 0; !(*sess)->should_stop() && runs < 100; ++runs)
      ASSERT_TRUE((*sess)->run({{m.x, vec({1})}}, {}, {m.train_op}).ok());
    ASSERT_TRUE((*sess)->close().ok());
  }
  ASSERT_TRUE(std::filesystem::exists(dir.file("model.ckpt-4.index")));
  ASSERT_TRUE(std::filesystem::exists(dir.file("model.ckpt-4.data-00000-of-00001")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("model.ckpt-4")));
  auto r = TfCheckpointReader::open(dir.file("model.ckpt-4"));
  ASSERT_TRUE(r.ok()) << r.status();
  auto w = r->read("w");
  ASSERT_TRUE(w.ok()) << w.status();
  float wv = 0;
  ASSERT_EQ(w->bytes.size(), 4u);
  std::memcpy(&wv, w->bytes.data(), 4);
  EXPECT_NEAR(wv, 0.6f, 1e-6);  // 1 - 4 * 0.1
  auto gs = r->read("global_step");
  ASSERT_TRUE(gs.ok()) << gs.status();
  int64_t step = 0;
  std::memcpy(&step, gs->bytes.data(), 8);
  EXPECT_EQ(step, 4);

  Model m;
  train::MonitoredTrainingSession::Options o;
  o.master = server->target();
  o.checkpoint_dir = dir.path();
  o.hooks = {std::make_shared<train::StopAtStepHook>(2, 0)};
  auto sess = train::MonitoredTrainingSession::create(m.root, o);
  ASSERT_TRUE(sess.ok()) << sess.status();
  EXPECT_EQ((*sess)->supervisor().restored_step(), 4);
  for (int runs = 0; !(*sess)->should_stop() && runs < 100; ++runs)
    ASSERT_TRUE((*sess)->run({{m.x, vec({1})}}, {}, {m.train_op}).ok());
  EXPECT_EQ(read_step(**sess, m.gs), 6);
  auto wn = (*sess)->raw_session().run({m.w});
  ASSERT_TRUE(wn.ok());
  EXPECT_NEAR((*wn)[0].data<float>()[0], 0.4f, 1e-5);
}

// Records what it asked for and what came back.
struct RecordingHook : train::SessionRunHook {
  Output w;
  std::vector<float> seen;
  int64_t created_at = -2;
  bool ended = false;
  explicit RecordingHook(Output v) : w(std::move(v)) {}
  Status after_create_session(Session&, int64_t gs) override {
    created_at = gs;
    return Status::OK();
  }
  train::SessionRunArgs before_run(train::SessionRunContext&) override { return {{w}}; }
  Status after_run(train::SessionRunContext&, const train::SessionRunValues& v) override {
    if (v.results.size() != 1) return Internal("expected one extra fetch");
    seen.push_back(v.results[0].data<float>()[0]);
    return Status::OK();
  }
  Status end(Session&) override {
    ended = true;
    return Status::OK();
  }
};

// A chief whose checkpoint directory holds another model (a variable of another shape) gets an
// error naming the variable and both shapes, and nothing of the failed session outlives it (its
// supervisor once saved a final checkpoint through the destroyed session: a crash).
TEST(MonitoredSessionTest, ARestoreOfAnotherModelIsAnErrorNotACrash) {
  auto server = testing::two_device_server();
  TempDir dir;
  {
    Model m;
    train::MonitoredTrainingSession::Options o;
    o.master = server->target();
    o.checkpoint_dir = dir.path();
    o.hooks = {std::make_shared<train::StopAtStepHook>(0, 2)};
    auto sess = train::MonitoredTrainingSession::create(m.root, o);
    ASSERT_TRUE(sess.ok()) << sess.status();
    while (!(*sess)->should_stop()) ASSERT_TRUE((*sess)->run({{m.x, vec({1})}}, {}, {m.train_op}).ok());
    ASSERT_TRUE((*sess)->close().ok());
  }
  Scope root = Scope::root();
  Scope ps = root.with_device("/cpu:1");
  auto w = train::get_variable(ps, "w", Shape{2}, DType::kFloat32,
                               [](const Scope& s, const Shape&, DType) { return ops::constant(s, vec({1, 2})); });
  auto gs = train::get_or_create_global_step(ps);
  auto init = train::global_variables_initializer(root);
  ASSERT_TRUE(root.ok()) << root.status();
  train::MonitoredTrainingSession::Options o;
  o.master = server->target();
  o.checkpoint_dir = dir.path();
  auto other = train::MonitoredTrainingSession::create(root, o);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), Code::kInvalidArgument) << other.status();
  EXPECT_NE(other.status().message().find("variable 'w' has shape [2] but checkpoint"), std::string::npos)
      << other.status();
  (void)w;
  (void)gs;
  (void)init;
}

TEST(MonitoredSessionTest, LoggingSummaryAndUserHooksSeeTheValuesTheRunsComputed) {
  auto server = testing::two_device_server();
  TempDir dir;
  Model m;
  std::vector<std::string> lines;
  auto user = std::make_shared<RecordingHook>(m.w);
  train::MonitoredTrainingSession::Options o;
  o.master = server->target();
  o.checkpoint_dir = dir.path();
  o.task_name = "worker/0";
  o.hooks = {std::make_shared<train::LoggingTensorHook>(std::map<std::string, Output>{{"loss", m.loss}}, 3,
                                                        [&](const std::string& l) { lines.push_back(l); }),
             std::make_shared<train::SummarySaverHook>(2, 0.0, std::map<std::string, Output>{{"loss", m.loss}},
                                                       std::map<std::string, Output>{{"w", m.w}}),
             user};
  auto sess = train::MonitoredTrainingSession::create(m.root, o);
  ASSERT_TRUE(sess.ok()) << sess.status();
  EXPECT_EQ(user->created_at, 0);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE((*sess)->run({{m.x, vec({1})}}, {}, {m.train_op}).ok());
  ASSERT_TRUE((*sess)->close().ok());
  EXPECT_TRUE(user->ended);
  // Run k (from 0) computes its loss from w = 1 - 0.1 k, before its own update.
  ASSERT_EQ(lines.size(), 3u);  // runs 0, 3, 6
  EXPECT_EQ(lines[0], "loss = 1 (step 0)");
  EXPECT_EQ(lines[1], "loss = 0.7 (step 3)");
  EXPECT_EQ(lines[2], "loss = 0.4 (step 6)");
  ASSERT_EQ(user->seen.size(), 7u);
  for (size_t k = 0; k < 7; ++k) EXPECT_NEAR(user->seen[k], 1.f - 0.1f * static_cast<float>(k), 1e-6) << k;
  // Summaries on runs 2, 4, 6 (from 1): steps 1, 3, 5.
  std::ifstream in(dir.path() + "/summaries-worker_0.jsonl");
  ASSERT_TRUE(in.good());
  std::vector<std::string> summaries;
  for (std::string l; std::getline(in, l);)
    if (l.find("\"loss\"") != std::string::npos) summaries.push_back(l);
  ASSERT_EQ(summaries.size(), 3u);
  EXPECT_NE(summaries[0].find("\"step\": 1,"), std::string::npos) << summaries[0];
  EXPECT_NE(summaries[2].find("\"step\": 5,"), std::string::npos) << summaries[2];
  // The same summaries in the task's TensorBoard event file.
  std::string events;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) events = e.path().string();
  ASSERT_FALSE(events.empty()) << "no event file in " << dir.path();
  auto c = testing::read_event_file(events);
  ASSERT_EQ(c.error, "");
  std::vector<std::pair<int64_t, float>> losses;
  for (const auto& e : c.events)
    if (e.scalars.count("loss")) losses.emplace_back(e.step, e.scalars.at("loss"));
  ASSERT_EQ(losses.size(), 3u);
  // Run k (from 0) reads loss = 1 - 0.1 k at global step k.
  EXPECT_EQ(losses[0].first, 1);
  EXPECT_NEAR(losses[0].second, 0.9f, 1e-6);
  EXPECT_EQ(losses[2].first, 5);
  EXPECT_NEAR(losses[2].second, 0.5f, 1e-6);
  // The graph comes right after the file version; w's histograms at the same runs as the
  // scalars, each of the one value w had when the run read it.
  ASSERT_GE(c.events.size(), 2u);
  EXPECT_TRUE(c.events[1].has_graph);
  bool has_loss_node = false;
  for (const auto& n : c.events[1].graph) has_loss_node |= n.name == "loss" && n.op == "Sum";
  EXPECT_TRUE(has_loss_node);
  std::vector<std::pair<int64_t, testing::DecodedHistogram>> ws;
  for (const auto& e : c.events)
    if (e.histograms.count("w")) ws.emplace_back(e.step, e.histograms.at("w"));
  ASSERT_EQ(ws.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const double want = 1.0 - 0.1 * static_cast<double>(ws[i].first);
    EXPECT_EQ(ws[i].first, static_cast<int64_t>(2 * i + 1));
    EXPECT_EQ(ws[i].second.num, 1.0);
    EXPECT_NEAR(ws[i].second.min, want, 1e-6);
    EXPECT_NEAR(ws[i].second.sum, want, 1e-6);
    ASSERT_EQ(ws[i].second.bucket.size(), 1u);
    EXPECT_GT(ws[i].second.bucket_limit[0], want);
  }
}

// The seconds trigger: a period shorter than any run saves on every run; an hour never within
// the test; steps and seconds together save on either.
TEST(MonitoredSessionTest, SummarySaverHookSavesByTimeAsWellAsBySteps) {
  auto server = testing::two_device_server();
  struct Case {
    int64_t steps;
    double secs;
    size_t expected;
  };
  for (Case c : {Case{0, 1e-9, 4}, Case{0, 3600, 0}, Case{2, 3600, 2}}) {
    TempDir dir;
    Model m;
    train::MonitoredTrainingSession::Options o;
    o.master = server->target();
    o.checkpoint_dir = dir.path();
    o.task_name = "worker/0";
    o.hooks = {std::make_shared<train::SummarySaverHook>(c.steps, c.secs,
                                                         std::map<std::string, Output>{{"loss", m.loss}})};
    auto sess = train::MonitoredTrainingSession::create(m.root, o);
    ASSERT_TRUE(sess.ok()) << sess.status();
    for (int i = 0; i < 4; ++i) ASSERT_TRUE((*sess)->run({{m.x, vec({1})}}, {}, {m.train_op}).ok());
    ASSERT_TRUE((*sess)->close().ok());
    std::ifstream in(dir.path() + "/summaries-worker_0.jsonl");
    std::vector<std::string> summaries;
    for (std::string l; std::getline(in, l);)
      if (l.find("\"loss\"") != std::string::npos) summaries.push_back(l);
    ASSERT_EQ(summaries.size(), c.expected) << "steps " << c.steps << ", secs " << c.secs;
    // Run k reads loss = 1 - 0.1 k at global step k.
    if (c.expected == 4) {
      EXPECT_NE(summaries[3].find("\"step\": 3,"), std::string::npos) << summaries[3];
      EXPECT_NE(summaries[3].find("\"loss\": 0.7"), std::string::npos) << summaries[3];
    }
  }
}

TEST(MonitoredSessionTest, NanLossFailsTheRunOrStopsTraining) {
  auto server = testing::two_device_server();
  for (bool fail : {true, false}) {
    Model m(/*log_loss=*/true);
    train::MonitoredTrainingSession::Options o;
    o.master = server->target();
    o.hooks = {std::make_shared<train::NanTensorHook>(m.loss, fail)};
    auto sess = train::MonitoredTrainingSession::create(m.root, o);
    ASSERT_TRUE(sess.ok()) << sess.status();
    ASSERT_TRUE((*sess)->run({{m.x, vec({1})}}, {}, {m.train_op}).ok());  // log(1) = 0
    EXPECT_FALSE((*sess)->should_stop());
    auto r = (*sess)->run({{m.x, vec({-1})}}, {}, {m.train_op});  // log of a negative: NaN
    if (fail) {
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
      EXPECT_NE(r.status().message().find("NaN loss during training (step 1)"), std::string::npos) << r.status();
    } else {
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE((*sess)->should_stop());
    }
  }
}

TEST(MonitoredSessionTest, MisusedHooksAreStatuses) {
  auto server = testing::two_device_server();
  Model m;
  train::MonitoredTrainingSession::Options o;
  o.master = server->target();
  o.hooks = {std::make_shared<train::StopAtStepHook>(5, 10)};
  auto both = train::MonitoredTrainingSession::create(m.root, o);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("exactly one of num_steps (5) and last_step (10)"), std::string::npos)
      << both.status();
  // No global step in the graph.
  Scope root = Scope::root();
  train::get_variable(root, "v", Shape{1});
  o.hooks = {std::make_shared<train::StopAtStepHook>(5, 0)};
  auto none = train::MonitoredTrainingSession::create(root, o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("needs a global step"), std::string::npos) << none.status();
}

}  // namespace
}  // namespace actorflow
