// Step traces (RunOptions::trace_level = kFullTrace -> RunMetadata::step_stats -> Chrome trace):
// the clock alignment, the bounds, the encoding, the merge, a traced step in one process, and a
// traced step of a worker (this process) and a ps (another process) checked through its JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <unistd.h>

#include "actorflow/monitored_session.h"
#include "actorflow/session.h"
#include "actorflow/train.h"
#include "actors/server.h"
#include "config/cluster_spec.h"
#include "config/task_names.h"
#include "core/step_stats.h"
#include "core/step_trace.h"
#include "graph/ops_variables.h"
#include "tests/util/event_reader.h"
#include "tests/util/local_server.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using testing::binary;
using testing::ChildProcess;
using testing::free_port;
using testing::TempDir;

// ---- clocks ---------------------------------------------------------------------------------

TEST(StepTraceTest, ClockOffsetIsTheRoundTripMidpointOfTheShortestExchange) {
  // Sample 1: sent at 1000, answered at 1400 (round trip 400, midpoint 1200), the task read 5600:
  // offset 4400 +- 200. Sample 2 has a longer round trip (1000) and is not used.
  auto a = align_clock({{2000, 9000, 3000}, {1000, 5600, 1400}}, false);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->method, "round-trip midpoint");
  EXPECT_EQ(a->offset_ns, 4400);
  EXPECT_EQ(a->round_trip_ns, 400);
  EXPECT_EQ(a->uncertainty_ns, 200);
  // A task behind the collector: negative offset.
  auto b = align_clock({{10'000, 4'000, 10'100}}, false);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->offset_ns, 4'000 - 10'050);
  // One process: exact, no samples needed.
  auto same = align_clock({}, true);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->method, "same process");
  EXPECT_EQ(same->offset_ns, 0);
  EXPECT_EQ(align_clock({}, false).status().code(), Code::kInvalidArgument);
  auto backwards = align_clock({{500, 1, 400}}, false);
  EXPECT_EQ(backwards.status().code(), Code::kInvalidArgument);
  EXPECT_NE(backwards.status().message().find("before its request"), std::string::npos) << backwards.status();
}

// ---- bounds and encoding -----------------------------------------------------------------------

TraceEvent event(std::string task, std::string track, std::string name, std::string kind, int64_t start, int64_t end) {
  TraceEvent e;
  e.task = std::move(task);
  e.track = std::move(track);
  e.name = std::move(name);
  e.kind = std::move(kind);
  e.start_ns = start;
  e.end_ns = end;
  return e;
}

TEST(StepTraceTest, AStepKeepsAtMostItsBoundAndCountsTheRest) {
  StepTrace t(3);
  for (int i = 0; i < 5; ++i) t.add(event("t", "d", "op" + std::to_string(i), "op", i, i + 1));
  auto [events, dropped] = t.take();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].name, "op2");
  EXPECT_EQ(dropped, 2);
  // Texts are cut.
  StepTrace u(1);
  u.add(event("t", "d", std::string(5000, 'x'), "op", 0, 1));
  EXPECT_EQ(u.take().first[0].name.size(), StepTrace::kMaxText);
}

TEST(StepTraceTest, ArmingPastTheBoundForgetsTheOldestStep) {
  StepTraces& reg = StepTraces::global();
  const int64_t base = 7'000'000'000;
  ASSERT_EQ(reg.armed(), 0u);
  EXPECT_FALSE(StepTraces::any());
  EXPECT_EQ(step_trace(base), nullptr);
  for (int64_t i = 0; i <= static_cast<int64_t>(StepTraces::kMaxArmed); ++i) reg.arm(base + i, 10);
  EXPECT_TRUE(StepTraces::any());
  EXPECT_EQ(reg.armed(), StepTraces::kMaxArmed);
  auto gone = reg.take(base);
  EXPECT_EQ(gone.status().code(), Code::kNotFound);
  EXPECT_NE(gone.status().message().find(std::to_string(base)), std::string::npos) << gone.status();
  ASSERT_NE(step_trace(base + 1), nullptr);
  step_trace(base + 1)->add(event("t", "d", "x", "op", 1, 2));
  auto kept = reg.take(base + 1);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->first.size(), 1u);
  for (int64_t i = 2; i <= static_cast<int64_t>(StepTraces::kMaxArmed); ++i) ASSERT_TRUE(reg.take(base + i).ok());
  EXPECT_EQ(reg.armed(), 0u);
  EXPECT_FALSE(StepTraces::any());
}

TEST(StepTraceTest, EventsSurviveTheirEncodingAndBadBytesAreRejected) {
  TraceEvent e = event("/job:ps/replica:0/task:0", "variable w", "w", "variable", -5, 123456789012);
  e.op = "apply_sgd";
  e.nums = {{"bytes", 16}, {"queued_ns", 42}};
  e.texts = {{"caller", "/job:worker/replica:0/task:0"}};
  const std::string bytes = encode_trace_events({e, event("a", "b", "c", "op", 1, 2)}, 7);
  auto back = decode_trace_events(bytes, 10);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->first.size(), 2u);
  EXPECT_EQ(back->second, 7);
  const TraceEvent& d = back->first[0];
  EXPECT_EQ(d.task, e.task);
  EXPECT_EQ(d.op, e.op);
  EXPECT_EQ(d.start_ns, -5);
  EXPECT_EQ(d.end_ns, 123456789012);
  EXPECT_EQ(d.num("bytes"), 16);
  EXPECT_EQ(d.num("queued_ns"), 42);
  EXPECT_EQ(d.text("caller"), "/job:worker/replica:0/task:0");
  // Every truncation is DataLoss naming where; more events than allowed is ResourceExhausted.
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto cut = decode_trace_events(bytes.substr(0, n), 10);
    ASSERT_FALSE(cut.ok()) << n;
    EXPECT_EQ(cut.status().code(), Code::kDataLoss) << n;
  }
  EXPECT_EQ(decode_trace_events(bytes + "x", 10).status().code(), Code::kDataLoss);
  EXPECT_EQ(decode_trace_events(bytes, 1).status().code(), Code::kResourceExhausted);
  // A count claiming far more events than the bytes hold allocates nothing and fails.
  std::string liar = bytes.substr(0, 12) + std::string("\xff\xff\xff\x0f", 4);
  EXPECT_EQ(decode_trace_events(liar, 1u << 30).status().code(), Code::kDataLoss);
}

// ---- the merge ---------------------------------------------------------------------------------

TEST(StepTraceTest, MergeMovesEachTaskOntoTheCollectorsClockAndDerivesTransfers) {
  // The worker (collector) sends a tensor of 64 bytes to the ps, whose clock runs 1'000'000 ns
  // ahead. Worker clock: send 100..130. Ps clock: arrival 1'000'150, delivery 1'000'190.
  TaskTracePart worker;
  worker.task = "/job:worker/replica:0/task:0";
  worker.clock.method = "same process";
  TraceEvent send = event(worker.task, "/job:worker/replica:0/task:0/device:CPU:0", "k", "send", 100, 130);
  send.op = "data plane";
  send.nums = {{"bytes", 64}};
  worker.events = {send};
  TaskTracePart ps;
  ps.task = "/job:ps/replica:0/task:0";
  ps.clock.method = "round-trip midpoint";
  ps.clock.offset_ns = 1'000'000;
  ps.events = {event(ps.task, "data plane", "k", "arrive", 1'000'150, 1'000'150),
               event(ps.task, "/job:ps/replica:0/task:0/device:CPU:0", "k", "deliver", 1'000'190, 1'000'190),
               event(ps.task, "/job:ps/replica:0/task:0/device:CPU:0", "upd", "op", 1'000'200, 1'000'260)};
  StepStats s = merge_step_trace(9, 50, 400, worker.task, {worker, ps});
  EXPECT_EQ(s.step_id, 9);
  ASSERT_EQ(s.tasks.size(), 2u);
  EXPECT_EQ(s.tasks[1].events, 3);
  const TraceEvent* transfer = nullptr;
  const TraceEvent* upd = nullptr;
  for (const auto& e : s.events) {
    EXPECT_NE(e.kind, "arrive");  // folded into the transfer
    EXPECT_NE(e.kind, "deliver");
    if (e.kind == "transfer") transfer = &e;
    if (e.name == "upd") upd = &e;
  }
  ASSERT_NE(transfer, nullptr);
  ASSERT_NE(upd, nullptr);
  EXPECT_EQ(upd->start_ns, 200);
  EXPECT_EQ(upd->end_ns, 260);
  EXPECT_EQ(transfer->task, ps.task);
  EXPECT_EQ(transfer->start_ns, 100);
  EXPECT_EQ(transfer->end_ns, 190);
  EXPECT_EQ(transfer->num("bytes"), 64);
  EXPECT_EQ(transfer->num("send_ns"), 30);
  EXPECT_EQ(transfer->num("wire_ns"), 50);   // arrival 150 - send start 100
  EXPECT_EQ(transfer->num("queue_ns"), 40);  // delivery 190 - arrival 150
  EXPECT_EQ(transfer->text("sender"), "/job:worker/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(transfer->text("receiver"), "/job:ps/replica:0/task:0/device:CPU:0");
  // Sorted by start; the step spans the window.
  for (size_t i = 1; i < s.events.size(); ++i) EXPECT_LE(s.events[i - 1].start_ns, s.events[i].start_ns);
  // The JSON parses and carries the alignment.
  const auto j = nlohmann::json::parse(chrome_trace_json(s), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["otherData"]["tasks"][1]["clock_method"], "round-trip midpoint");
  EXPECT_DOUBLE_EQ(j["otherData"]["tasks"][1]["clock_offset_us"].get<double>(), 1000.0);
  int flows = 0;
  for (const auto& e : j["traceEvents"]) flows += e["ph"] == "s" || e["ph"] == "f";
  EXPECT_EQ(flows, 2);
}

// ---- traced steps --------------------------------------------------------------------------------

// The Chrome trace of `md`, parsed; fails the test when it does not parse.
nlohmann::json trace_json(const RunMetadata& md, const TempDir& dir) {
  const std::string path = dir.path() + "/trace.json";
  Status w = md.write_chrome_trace(path);
  EXPECT_TRUE(w.ok()) << w;
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << ss.str().substr(0, 2000);
  return j;
}

// The process (pid) of each task and the "X" events, from a parsed trace.
struct ParsedTrace {
  std::map<std::string, int> pid;  // task -> pid
  std::vector<nlohmann::json> complete;
  explicit ParsedTrace(const nlohmann::json& j) {
    for (const auto& e : j["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "process_name") pid[e["args"]["name"]] = e["pid"];
      if (e["ph"] == "X") complete.push_back(e);
    }
  }
  // The X events of category `cat` whose name is `name` ("" = any).
  std::vector<nlohmann::json> find(const std::string& cat, const std::string& name = "") const {
    std::vector<nlohmann::json> out;
    for (const auto& e : complete)
      if (e["cat"] == cat && (name.empty() || e["name"] == name)) out.push_back(e);
    return out;
  }
};

TEST(StepTraceTest, UntracedRunsReturnEmptyMetadataAndArmNothing) {
  Scope root = Scope::root();
  auto a = ops::constant(root, Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}));
  auto b = ops::matmul(root.with_op_name("mm"), a, a);
  Session sess(root);
  RunMetadata md;
  md.step_stats.step_id = 5;  // overwritten
  auto r = sess.run(RunOptions{}, {}, {b}, {}, &md);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(md.step_stats.empty());
  EXPECT_EQ(md.step_stats.step_id, 0);
  EXPECT_EQ(StepTraces::global().armed(), 0u);
  TempDir dir;
  EXPECT_EQ(md.write_chrome_trace(dir.path() + "/t.json").code(), Code::kFailedPrecondition);
}

TEST(StepTraceTest, ATracedStepInOneProcessRecordsOpsTransfersAndVariableCalls) {
  Scope root = Scope::root();
  auto cpu1 = root.with_device("/cpu:1");
  auto w = ops::variable(cpu1.with_op_name("w"), Shape{2, 2}, DType::kFloat32);
  auto init = ops::assign(cpu1, w, Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}));
  auto x = ops::placeholder(root, DType::kFloat32, Shape{2, 2}, "x");
  auto y = ops::matmul(root.with_device("/cpu:0").with_op_name("y"), x, w);
  auto upd = ops::apply_gradient_descent(cpu1.with_op_name("upd"), w, 0.5f, y);
  auto server = testing::two_device_server();
  Session sess(root, server->target());
  ASSERT_TRUE(sess.run({init}).ok());
  RunOptions traced;
  traced.trace_level = RunOptions::TraceLevel::kFullTrace;
  RunMetadata md;
  const Tensor eye = Tensor::from_vector<float>({1, 0, 0, 1}, {2, 2});
  auto r = sess.run(traced, {{x, eye}}, {y}, {upd}, &md);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].to_string(), "[[1. 2.]\n [3. 4.]]");
  const StepStats& s = md.step_stats;
  ASSERT_FALSE(s.empty());
  EXPECT_NE(s.step_id, 0);
  EXPECT_EQ(StepTraces::global().armed(), 0u);  // collected and disarmed
  std::set<std::string> ops_seen;
  for (const auto& e : s.events) {
    EXPECT_GE(e.end_ns, e.start_ns) << e.name;
    if (e.kind == "op") ops_seen.insert(e.op);
  }
  EXPECT_TRUE(ops_seen.count("MatMul")) << "ops: " << ops_seen.size();
  EXPECT_TRUE(ops_seen.count("ApplyGradientDescent"));
  TempDir dir;
  ParsedTrace t(trace_json(md, dir));
  ASSERT_EQ(t.find("op", "y").size(), 1u);
  EXPECT_EQ(t.find("op", "y")[0]["args"]["op"], "MatMul");
  auto var = t.find("variable", "w");
  ASSERT_FALSE(var.empty());
  EXPECT_EQ(var.back()["args"]["op"], "apply_sgd");
  // w (cpu:1 -> cpu:0) and y (cpu:0 -> cpu:1), by reference, 16 bytes each.
  auto transfers = t.find("transfer");
  ASSERT_EQ(transfers.size(), 2u);
  for (const auto& tr : transfers) {
    EXPECT_EQ(tr["args"]["bytes"], 16);
    EXPECT_EQ(tr["args"]["op"], "in process");
    EXPECT_EQ(tr["args"]["wire_ns"], 0);
  }
  // A second untraced run afterwards leaves nothing armed and returns nothing.
  RunMetadata none;
  ASSERT_TRUE(sess.run(RunOptions{}, {{x, eye}}, {y}, {}, &none).ok());
  EXPECT_TRUE(none.step_stats.empty());
}

// ---- a worker (this process) and a ps (another process) --------------------------------------

struct PsCluster {
  TempDir dir;
  int worker_port = free_port(), ps_port = free_port();
  std::string file;
  PsCluster() {
    file = dir.write("cluster.toml", "[cluster]\nname = \"trace\"\n[jobs]\nworker = [\"localhost:" +
                                         std::to_string(worker_port) + "\"]\nps = [\"localhost:" +
                                         std::to_string(ps_port) + "\"]\n[server]\nconnect_timeout_ms = 20000\n");
  }
};

TEST(StepTraceTest, ATracedStepAcrossAWorkerAndAPsProcess) {
  PsCluster c;
  auto ps = ChildProcess::start({binary("actorflow"), "node", "--cluster", c.file, "--job", "ps", "--task", "0"});
  ASSERT_TRUE(ps);
  ASSERT_TRUE(ps->wait_for_output("serving", 20s)) << ps->output();
  auto spec = ClusterSpec::from_file(c.file);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto server = Server::create(*spec, TaskId{"worker", 0});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string kWorker = "/job:worker/replica:0/task:0", kPs = "/job:ps/replica:0/task:0";

  Scope root = Scope::root();
  auto on_ps = root.with_device("/job:ps/task:0");
  auto on_worker = root.with_device("/job:worker/task:0");
  auto w = ops::variable(on_ps.with_op_name("w"), Shape{2, 2}, DType::kFloat32);
  auto init = ops::assign(on_ps, w, Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}));
  auto x = ops::placeholder(on_worker, DType::kFloat32, Shape{2, 2}, "x");
  auto y = ops::matmul(on_worker.with_op_name("y"), x, w);
  auto upd = ops::apply_gradient_descent(on_ps.with_op_name("upd"), w, 0.5f, y);
  Session sess(root, (*server)->target());
  ASSERT_TRUE(sess.run({init}).ok());
  const Tensor eye = Tensor::from_vector<float>({1, 0, 0, 1}, {2, 2});
  ASSERT_TRUE(sess.run({{x, eye}}, {y}, {}).ok());  // untraced first: placement and registration

  RunOptions traced;
  traced.trace_level = RunOptions::TraceLevel::kFullTrace;
  RunMetadata md;
  auto r = sess.run(traced, {{x, eye}}, {y}, {upd}, &md);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].to_string(), "[[1. 2.]\n [3. 4.]]");
  const StepStats& s = md.step_stats;
  ASSERT_FALSE(s.empty());
  // Both tasks, the ps aligned by the round trip, nothing missing or dropped.
  std::map<std::string, TaskTraceInfo> info;
  for (const auto& t : s.tasks) info[t.task] = t;
  ASSERT_TRUE(info.count(kWorker));
  ASSERT_TRUE(info.count(kPs)) << "tasks: " << s.tasks.size();
  EXPECT_EQ(info[kWorker].clock.method, "same process");
  EXPECT_EQ(info[kPs].clock.method, "round-trip midpoint");
  EXPECT_GT(info[kPs].clock.round_trip_ns, 0);
  EXPECT_EQ(info[kPs].error, "");
  EXPECT_EQ(info[kPs].dropped, 0);
  EXPECT_GT(info[kPs].events, 0);

  TempDir dir;
  const nlohmann::json j = trace_json(md, dir);
  ParsedTrace t(j);
  ASSERT_TRUE(t.pid.count(kWorker));
  ASSERT_TRUE(t.pid.count(kPs));
  const int worker_pid = t.pid[kWorker], ps_pid = t.pid[kPs];
  // The MatMul on the worker, the ApplyGradientDescent on the ps and its variable call.
  auto mm = t.find("op", "y");
  ASSERT_EQ(mm.size(), 1u);
  EXPECT_EQ(mm[0]["args"]["op"], "MatMul");
  EXPECT_EQ(mm[0]["pid"], worker_pid);
  auto apply = t.find("op", "upd");
  ASSERT_EQ(apply.size(), 1u);
  EXPECT_EQ(apply[0]["args"]["op"], "ApplyGradientDescent");
  EXPECT_EQ(apply[0]["pid"], ps_pid);
  auto var = t.find("variable", "w");
  ASSERT_FALSE(var.empty());
  EXPECT_EQ(var.back()["pid"], ps_pid);
  EXPECT_EQ(var.back()["args"]["op"], "apply_sgd");
  EXPECT_GE(var.back()["args"]["queued_ns"].get<int64_t>(), 0);
  // Two transfers over the data plane: w (ps -> worker) and y (worker -> ps), 16 bytes each.
  auto transfers = t.find("transfer");
  ASSERT_EQ(transfers.size(), 2u) << j.dump(1).substr(0, 4000);
  std::set<std::string> directions;
  for (const auto& tr : transfers) {
    EXPECT_EQ(tr["args"]["bytes"], 16);
    EXPECT_EQ(tr["args"]["op"], "data plane");
    EXPECT_GE(tr["args"]["wire_ns"].get<int64_t>(), 0);
    EXPECT_GE(tr["args"]["queue_ns"].get<int64_t>(), 0);
    directions.insert(task_of_device(tr["args"]["sender"].get<std::string>()) + " -> " +
                      task_of_device(tr["args"]["receiver"].get<std::string>()));
  }
  EXPECT_EQ(directions, (std::set<std::string>{kPs + " -> " + kWorker, kWorker + " -> " + kPs}));
  // Every event ends after it starts; after alignment the ps's events lie inside the step's
  // window, widened by the alignment's uncertainty.
  const double window_us = j["otherData"]["window_us"].get<double>();
  const double slack_us = static_cast<double>(info[kPs].clock.uncertainty_ns) / 1000.0 + 0.001;
  int ps_events = 0;
  for (const auto& e : t.complete) {
    EXPECT_GE(e["dur"].get<double>(), 0.0) << e.dump();
    if (e["pid"] != ps_pid) continue;
    ++ps_events;
    EXPECT_GE(e["ts"].get<double>(), -slack_us) << e.dump();
    EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), window_us + slack_us) << e.dump();
  }
  EXPECT_GE(ps_events, 3);
  for (const auto& e : s.events) EXPECT_GE(e.end_ns, e.start_ns) << e.kind << " " << e.name;

  // The ps's trace is gone once collected: an untraced step afterwards returns nothing.
  RunMetadata none;
  ASSERT_TRUE(sess.run(RunOptions{}, {{x, eye}}, {y}, {upd}, &none).ok());
  EXPECT_TRUE(none.step_stats.empty());
  ps->signal(SIGTERM);
  EXPECT_EQ(ps->wait(20s), 0) << ps->output();
}

// A remote client session (tf.Session("grpc://...")): the worker and the ps are `actorflow node`
// processes; this process is only a client of the worker. The traced run comes back with the
// worker's trace of both tasks, moved onto this process's clock: the MatMul on the worker, the
// update and its variable call on the ps, two data-plane transfers; each task's alignment says it
// went through the target; the step lies inside this client's send and answer, within the
// uncertainty; an untraced run afterwards has no trace and no extra tensor.
TEST(StepTraceTest, ARemoteClientSessionsTracedStepComesBackOnItsClock) {
  PsCluster c;
  auto ps = ChildProcess::start({binary("actorflow"), "node", "--cluster", c.file, "--job", "ps", "--task", "0"});
  ASSERT_TRUE(ps);
  auto worker = ChildProcess::start({binary("actorflow"), "node", "--cluster", c.file, "--job", "worker", "--task", "0"});
  ASSERT_TRUE(worker);
  ASSERT_TRUE(ps->wait_for_output("serving", 20s)) << ps->output();
  ASSERT_TRUE(worker->wait_for_output("serving", 20s)) << worker->output();
  const std::string kWorker = "/job:worker/replica:0/task:0", kPs = "/job:ps/replica:0/task:0";
  const std::string target = "actorflow://localhost:" + std::to_string(c.worker_port);

  Scope root = Scope::root();
  auto on_ps = root.with_device("/job:ps/task:0");
  auto on_worker = root.with_device("/job:worker/task:0");
  auto w = ops::variable(on_ps.with_op_name("w"), Shape{2, 2}, DType::kFloat32);
  auto init = ops::assign(on_ps, w, Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}));
  auto x = ops::placeholder(on_worker, DType::kFloat32, Shape{2, 2}, "x");
  auto y = ops::matmul(on_worker.with_op_name("y"), x, w);
  auto upd = ops::apply_gradient_descent(on_ps.with_op_name("upd"), w, 0.5f, y);
  Session sess(root, target, SessionOptions().cluster_file(c.file));
  ASSERT_TRUE(sess.status().ok()) << sess.status();
  ASSERT_TRUE(sess.run({init}).ok());
  const Tensor eye = Tensor::from_vector<float>({1, 0, 0, 1}, {2, 2});
  ASSERT_TRUE(sess.run({{x, eye}}, {y}, {}).ok());

  RunOptions traced;
  traced.trace_level = RunOptions::TraceLevel::kFullTrace;
  RunMetadata md;
  const int64_t sent = trace_clock_ns();
  auto r = sess.run(traced, {{x, eye}}, {y}, {upd}, &md);
  const int64_t answered = trace_clock_ns();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].to_string(), "[[1. 2.]\n [3. 4.]]");
  const StepStats& s = md.step_stats;
  ASSERT_FALSE(s.empty());
  std::map<std::string, TaskTraceInfo> info;
  for (const auto& t : s.tasks) info[t.task] = t;
  ASSERT_TRUE(info.count(kWorker) && info.count(kPs)) << "tasks: " << s.tasks.size();
  for (const auto& [task, ti] : info) {
    EXPECT_NE(ti.clock.method.find("via " + target + " (round-trip midpoint)"), std::string::npos) << ti.clock.method;
    EXPECT_GT(ti.clock.uncertainty_ns, 0) << task;
    EXPECT_EQ(ti.error, "") << task;
    EXPECT_GT(ti.events, 0) << task;
    // One machine: every process reads the same steady clock, so the true offset is 0.
    EXPECT_LE(std::llabs(ti.clock.offset_ns), ti.clock.uncertainty_ns) << task;
  }
  const int64_t slack = info[kWorker].clock.uncertainty_ns;
  EXPECT_GE(s.start_ns, sent - slack);
  EXPECT_LE(s.end_ns, answered + slack);
  int matmul = 0, apply = 0, variable = 0, transfers = 0;
  for (const TraceEvent& e : s.events) {
    EXPECT_GE(e.end_ns, e.start_ns) << e.kind << " " << e.name;
    EXPECT_GE(e.start_ns, sent - 2 * slack - info[kPs].clock.uncertainty_ns) << e.kind << " " << e.name;
    EXPECT_LE(e.end_ns, answered + 2 * slack + info[kPs].clock.uncertainty_ns) << e.kind << " " << e.name;
    if (e.kind == "op" && e.name == "y" && e.task == kWorker) matmul += e.op == "MatMul";
    if (e.kind == "op" && e.name == "upd" && e.task == kPs) ++apply;
    if (e.kind == "variable" && e.name == "w" && e.task == kPs) ++variable;
    if (e.kind == "transfer") ++transfers;
  }
  EXPECT_EQ(matmul, 1);
  EXPECT_EQ(apply, 1);
  EXPECT_GE(variable, 1);
  EXPECT_EQ(transfers, 2);
  TempDir dir;
  ASSERT_TRUE(md.write_chrome_trace(dir.path() + "/remote.json").ok());

  RunMetadata none;
  auto plain = sess.run(RunOptions{}, {{x, eye}}, {y}, {}, &none);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->size(), 1u);
  EXPECT_TRUE(none.step_stats.empty());
  for (auto* p : {&worker, &ps}) {
    (*p)->signal(SIGTERM);
    EXPECT_EQ((*p)->wait(20s), 0) << (*p)->output();
  }
}

// ---- MonitoredTrainingSession: ProfilerHook and [supervisor] trace_every_steps ------------------

// w on the "ps" (/cpu:1), the loss and its gradient on the worker (/cpu:0), the global step.
struct HookModel {
  Scope root = Scope::root();
  Output w, x, loss, gs, train_op;
  HookModel() {
    Scope ps = root.with_device("/cpu:1"), worker = root.with_device("/cpu:0");
    w = train::get_variable(ps, "w", Shape{1}, DType::kFloat32, [](const Scope& s, const Shape&, DType) {
      return ops::constant(s, Tensor::from_vector<float>({1}, {1}));
    });
    gs = train::get_or_create_global_step(ps);
    x = ops::placeholder(worker, DType::kFloat32, Shape{1}, "x");
    loss = ops::reduce_sum(worker.with_op_name("loss"), ops::mul(worker, w, x));
    auto t = train::GradientDescentOptimizer(0.1f).minimize(worker, loss, gs);
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) train_op = *t;
  }
};

// Sees every run's metadata: how many came traced.
class MetadataProbe : public train::SessionRunHook {
 public:
  Status after_run(train::SessionRunContext&, const train::SessionRunValues& v) override {
    EXPECT_NE(v.run_metadata, nullptr);
    if (v.run_metadata) traced.push_back(!v.run_metadata->step_stats.empty());
    return Status::OK();
  }
  std::vector<bool> traced;
};

// The ops of a trace file, by name -> type; fails the test when it does not parse.
std::map<std::string, std::string> ops_in(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << path;
  std::map<std::string, std::string> out;
  if (j.is_discarded()) return out;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "op") out[e["name"]] = e["args"]["op"];
  return out;
}

TEST(StepTraceTest, ProfilerHookTracesEveryNthRunIntoItsDirectory) {
  auto server = testing::two_device_server();
  TempDir dir;
  HookModel m;
  auto profiler = std::make_shared<train::ProfilerHook>(3, dir.path() + "/traces");
  auto probe = std::make_shared<MetadataProbe>();
  train::MonitoredTrainingSession::Options o;
  o.master = server->target();
  o.hooks = {profiler, probe};
  auto sess = train::MonitoredTrainingSession::create(m.root, o);
  ASSERT_TRUE(sess.ok()) << sess.status();
  for (int i = 0; i < 7; ++i) ASSERT_TRUE((*sess)->run({{m.x, Tensor::from_vector<float>({1}, {1})}}, {m.loss}, {m.train_op}).ok());
  // Runs 0, 3 and 6 traced (the global step each read before its increment).
  EXPECT_EQ(probe->traced, (std::vector<bool>{true, false, false, true, false, false, true}));
  ASSERT_EQ(profiler->written(), (std::vector<std::string>{dir.path() + "/traces/timeline-0.json",
                                                           dir.path() + "/traces/timeline-3.json",
                                                           dir.path() + "/traces/timeline-6.json"}));
  for (const auto& p : profiler->written()) {
    auto ops = ops_in(p);
    EXPECT_EQ(ops["loss"], "Sum") << p;
    bool applied = false;
    for (const auto& [name, type] : ops) applied |= type == "ApplyGradientDescent";
    EXPECT_TRUE(applied) << p;
  }
  // The same three steps as TensorBoard's run metadata, in an events file beside them.
  std::vector<std::string> event_files;
  for (const auto& f : std::filesystem::directory_iterator(dir.path() + "/traces"))
    if (f.path().filename().string().rfind("events.out.tfevents.", 0) == 0) event_files.push_back(f.path().string());
  ASSERT_EQ(event_files.size(), 1u);
  auto contents = testing::read_event_file(event_files[0]);
  ASSERT_EQ(contents.error, "");
  std::vector<std::string> tags;
  for (const auto& e : contents.events) {
    if (e.run_metadata_tag.empty()) continue;
    tags.push_back(e.run_metadata_tag);
    EXPECT_EQ(e.run_metadata_tag, "step_" + std::to_string(e.step));
    EXPECT_FALSE(e.run_devices.empty());
    ASSERT_TRUE(e.run_node_ns.count("loss")) << e.run_metadata_tag;
    EXPECT_GE(e.run_node_ns.at("loss"), 0);
  }
  EXPECT_EQ(tags, (std::vector<std::string>{"step_0", "step_3", "step_6"}));
  // TensorFlow reads them as its own RunMetadata.
  if (const std::string python = testing::tf_python(); !python.empty()) {
    const std::string script = dir.write("read.py",
                                         "import sys\n"
                                         "import tensorflow as tf\n"
                                         "from tensorflow.core.protobuf import config_pb2\n"
                                         "for e in tf.compat.v1.train.summary_iterator(sys.argv[1]):\n"
                                         "    if e.HasField('tagged_run_metadata'):\n"
                                         "        md = config_pb2.RunMetadata()\n"
                                         "        md.ParseFromString(e.tagged_run_metadata.run_metadata)\n"
                                         "        names = {n.node_name for d in md.step_stats.dev_stats for n in d.node_stats}\n"
                                         "        print(e.tagged_run_metadata.tag, e.step, 'loss' in names)\n");
    const std::string out = dir.path() + "/tf.out";
    const std::string cmd = python + " " + script + " " + event_files[0] + " > " + out + " 2> /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(out);
    std::stringstream got;
    got << in.rdbuf();
    EXPECT_EQ(got.str(), "step_0 0 True\nstep_3 3 True\nstep_6 6 True\n");
  }
  ASSERT_TRUE((*sess)->close().ok());
}

TEST(StepTraceTest, TheClusterFilesTraceEveryStepsAddsAProfilerToEverySession) {
  TempDir dir;
  const std::string traces = dir.path() + "/t";
  auto write = [&](const std::string& supervisor) {
    return dir.write("c.toml", "[jobs]\nworker = [\"localhost:" + std::to_string(free_port()) +
                                   "\"]\n[server]\ncpu_devices = 2\n[supervisor]\n" + supervisor);
  };
  // Bad values are named.
  auto neg = ClusterSpec::from_file(write("trace_every_steps = -1\n"));
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("trace_every_steps"), std::string::npos) << neg.status();
  auto empty = ClusterSpec::from_file(write("trace_dir = \"\"\n"));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("trace_dir"), std::string::npos) << empty.status();
  auto spec = ClusterSpec::from_file(write("trace_every_steps = 2\ntrace_dir = \"" + traces + "\"\n"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->supervisor().trace_every_steps, 2);
  EXPECT_EQ(spec->supervisor().trace_dir, traces);
  auto server = Server::create(*spec, TaskId{"worker", 0});
  ASSERT_TRUE(server.ok()) << server.status();
  HookModel m;
  train::MonitoredTrainingSession::Options o;
  o.master = (*server)->target();
  auto sess = train::MonitoredTrainingSession::create(m.root, o);
  ASSERT_TRUE(sess.ok()) << sess.status();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*sess)->run({{m.x, Tensor::from_vector<float>({1}, {1})}}, {m.loss}, {m.train_op}).ok());
  ASSERT_TRUE((*sess)->close().ok());
  EXPECT_TRUE(std::filesystem::exists(traces + "/timeline-0.json"));
  EXPECT_FALSE(std::filesystem::exists(traces + "/timeline-1.json"));
  EXPECT_TRUE(std::filesystem::exists(traces + "/timeline-2.json"));
  EXPECT_EQ(ops_in(traces + "/timeline-2.json")["loss"], "Sum");
}

}  // namespace
}  // namespace actorflow
