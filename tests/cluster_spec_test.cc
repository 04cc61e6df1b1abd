// Tests of config/: cluster files, ClusterSpec queries, validation messages, fingerprint, secret.
#include "config/cluster_spec.h"
#include "config/tf_cluster.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace actorflow {
namespace {

// `s` contains `sub` (with both shown on failure).
::testing::AssertionResult Contains(const std::string& s, const std::string& sub) {
  if (s.find(sub) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << s << "' does not contain '" << sub << "'";
}
::testing::AssertionResult Lacks(const std::string& s, const std::string& sub) {
  if (s.find(sub) == std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << s << "' contains '" << sub << "'";
}
::testing::AssertionResult Starts(const std::string& s, const std::string& prefix) {
  if (s.rfind(prefix, 0) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << s << "' does not start with '" << prefix << "'";
}
using Strings = std::vector<std::string>;
using Ints = std::vector<int>;

// The project's original design example of a cluster file, verbatim (docs/cluster-file.md,
// "Example", is its current form).
const char* kDesignExample = R"(
[cluster]
name = "mnist"
secret_file = "cluster.key"        # required for any non-loopback address

[jobs]
ps     = ["localhost:2222"]
worker = ["localhost:2223", "localhost:2224", "localhost:2225"]
# sparse form: worker = { 0 = "a.example:2222", 7 = "b.example:2222" }

[server]                           # defaults for every task
log_device_placement = false
allow_soft_placement = true
gpu_memory_fraction  = 0.2         # TF per_process_gpu_memory_fraction
allow_growth         = true
visible_devices      = "0"         # TF visible_device_list; CUDA_VISIBLE_DEVICES also applies
cpu_devices          = 1

[tasks."worker/1"]                 # per-task overrides of [server]
visible_devices = "1"

[supervisor]
chief               = "worker/0"
logdir              = "./logs"
save_checkpoint_secs = 60
keep_checkpoints    = 5
max_restarts        = 5
restart_window_secs = 60
)";

class ClusterSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/af_cluster_spec_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const char* env = std::getenv(kSecretEnvVar);
    had_env_ = env != nullptr;
    if (env) saved_env_ = env;
    unsetenv(kSecretEnvVar);
  }
  void TearDown() override {
    if (had_env_) {
      setenv(kSecretEnvVar, saved_env_.c_str(), 1);
    } else {
      unsetenv(kSecretEnvVar);
    }
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }

  // Writes `text` to dir_/name (mode 0600) and returns the path.
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.close();
    chmod(path.c_str(), 0600);
    return path;
  }

  // Parses `text` written to dir_/cluster.toml and returns the error message ("" if it parsed).
  std::string error_of(const std::string& text) {
    auto r = ClusterSpec::from_file(write("cluster.toml", text));
    if (r.ok()) return "";
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status();
    return r.status().message();
  }

  std::string dir_;
  bool had_env_ = false;
  std::string saved_env_;
};

// ---- TaskId ------------------------------------------------------------------------------

TEST(TaskIdTest, FormatsAndParses) {
  TaskId t{"worker", 1};
  EXPECT_EQ(t.to_string(), "worker/1");
  EXPECT_EQ(t.device_prefix(), "/job:worker/replica:0/task:1");
  for (const char* s : {"worker/1", "/job:worker/task:1", "/job:worker/replica:0/task:1"}) {
    auto p = TaskId::parse(s);
    ASSERT_TRUE(p.ok()) << s << ": " << p.status();
    EXPECT_EQ(*p, t) << s;
  }
  auto big = TaskId::parse("ps_2/12");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->job, "ps_2");
  EXPECT_EQ(big->index, 12);
}

TEST(TaskIdTest, RejectsMalformed) {
  struct Case {
    const char* text;
    const char* why;
  } cases[] = {
      {"worker", "missing '/'"},
      {"worker/", "task index '' is not a non-negative integer"},
      {"worker/-1", "task index '-1' is not a non-negative integer"},
      {"worker/x", "task index 'x' is not a non-negative integer"},
      {"/1", "empty job name"},
      {"1job/0", "job name '1job' must match"},
      {"/job:worker", "missing /task:N"},
      {"/job:worker/replica:1/task:0", "only replica:0 exists"},
      {"/job:worker/task:0/device:CPU:0", "unexpected component 'device:CPU:0'"},
  };
  for (const Case& c : cases) {
    auto p = TaskId::parse(c.text);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
    EXPECT_TRUE(Contains(p.status().message(), std::string("'") + c.text + "'"));
    EXPECT_TRUE(Contains(p.status().message(), c.why));
  }
}

TEST(TaskIdTest, OrdersByJobThenIndex) {
  std::map<TaskId, int> m;
  m[TaskId{"worker", 10}] = 3;
  m[TaskId{"worker", 2}] = 2;
  m[TaskId{"ps", 5}] = 1;
  std::vector<std::string> order;
  for (const auto& [t, v] : m) order.push_back(t.to_string());
  EXPECT_EQ(order, (Strings{"ps/5", "worker/2", "worker/10"}));
  EXPECT_NE((TaskId{"worker", 1}), (TaskId{"worker", 2}));
  EXPECT_EQ(std::hash<TaskId>()(TaskId{"a", 1}), std::hash<TaskId>()(TaskId{"a", 1}));
}

// ---- addresses ---------------------------------------------------------------------------

TEST(AddressTest, ParsesHostAndPort) {
  auto a = parse_address("localhost:2222");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "localhost");
  EXPECT_EQ(a->second, 2222);
  auto b = parse_address("[::1]:65535");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->first, "::1");
  EXPECT_EQ(b->second, 65535);
  auto c = parse_address("Worker0.Example.COM:1");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->first, "worker0.example.com");
  EXPECT_EQ(format_address("::1", 2222), "[::1]:2222");
  EXPECT_EQ(format_address("10.0.0.1", 80), "10.0.0.1:80");
}

TEST(AddressTest, RejectsMalformedWithReason) {
  struct Case {
    const char* addr;
    const char* why;
  } cases[] = {
      {"", "empty"},
      {"localhost", "missing ':port'"},
      {":2222", "empty host"},
      {"localhost:", "empty port"},
      {"localhost:0", "port out of range 1..65535"},
      {"localhost:65536", "port out of range 1..65535"},
      {"localhost:99999", "port out of range 1..65535"},
      {"localhost:1234567", "port out of range 1..65535"},
      {"localhost:22a", "port '22a' is not a number"},
      {"localhost:-1", "port '-1' is not a number"},
      {"::1:2222", "IPv6 addresses must be in brackets"},
      {"[::1:2222", "'[' without ']'"},
      {"[::1]", "missing ':port' after ']'"},
      {"[zz::1]:80", "not an IPv6 address"},
      {"bad host:80", "has a character other than"},
      {"-host:80", "starts with '-'"},
  };
  for (const Case& c : cases) {
    auto r = parse_address(c.addr);
    ASSERT_FALSE(r.ok()) << c.addr;
    EXPECT_TRUE(Starts(r.status().message(), std::string("malformed address '") + c.addr + "': "));
    EXPECT_TRUE(Contains(r.status().message(), c.why));
  }
}

TEST(AddressTest, Loopback) {
  for (const char* h : {"localhost", "LOCALHOST", "127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"})
    EXPECT_TRUE(is_loopback_host(h)) << h;
  for (const char* h : {"10.0.0.1", "0.0.0.0", "128.0.0.1", "::", "example.com", "localhost.example.com", "::2"})
    EXPECT_FALSE(is_loopback_host(h)) << h;
}

// ---- reading files -----------------------------------------------------------------------

TEST_F(ClusterSpecTest, DesignExampleParses) {
  write("cluster.key", "design-secret-bytes\n");
  const std::string path = write("cluster.toml", kDesignExample);
  auto r = ClusterSpec::from_file(path);
  ASSERT_TRUE(r.ok()) << r.status();
  const ClusterSpec& c = *r;
  EXPECT_EQ(c.name(), "mnist");
  EXPECT_EQ(c.source(), path);
  EXPECT_EQ(c.jobs(), (Strings{"ps", "worker"}));
  EXPECT_EQ(c.num_tasks("ps"), 1);
  EXPECT_EQ(c.num_tasks("worker"), 3);
  EXPECT_EQ(c.num_tasks("chief"), 0);
  EXPECT_EQ(c.task_indices("worker"), (Ints{0, 1, 2}));
  EXPECT_EQ(*c.task_address(TaskId{"ps", 0}), "localhost:2222");
  EXPECT_EQ(*c.task_address(TaskId{"worker", 2}), "localhost:2225");
  EXPECT_EQ(c.all_tasks(),
            (std::vector<TaskId>{{"ps", 0}, {"worker", 0}, {"worker", 1}, {"worker", 2}}));
  EXPECT_TRUE(c.all_loopback());

  const ServerOptions w0 = c.server_options(TaskId{"worker", 0});
  EXPECT_FALSE(w0.log_device_placement);
  EXPECT_TRUE(w0.allow_soft_placement);
  EXPECT_DOUBLE_EQ(w0.gpu_memory_fraction, 0.2);
  EXPECT_TRUE(w0.allow_growth);
  EXPECT_EQ(w0.visible_devices, "0");
  EXPECT_EQ(w0.cpu_devices, 1);
  EXPECT_EQ(w0.connect_timeout_ms, 30000);
  EXPECT_EQ(w0.heartbeat_interval_ms, 500);
  EXPECT_EQ(w0.peer_timeout_ms, 3000);
  EXPECT_DOUBLE_EQ(w0.step_timeout_secs, 600);  // every step is bounded by default
  const ServerOptions w1 = c.server_options(TaskId{"worker", 1});
  EXPECT_EQ(w1.visible_devices, "1");
  EXPECT_DOUBLE_EQ(w1.gpu_memory_fraction, 0.2);  // inherited from [server]
  EXPECT_TRUE(w1.allow_growth);
  EXPECT_EQ(c.server_options(TaskId{"ps", 0}), w0);

  const SupervisorOptions& s = c.supervisor();
  EXPECT_EQ(s.chief, (TaskId{"worker", 0}));
  EXPECT_EQ(s.logdir, "./logs");
  EXPECT_DOUBLE_EQ(s.save_checkpoint_secs, 60);
  EXPECT_EQ(s.keep_checkpoints, 5);
  EXPECT_EQ(s.max_restarts, 5);
  EXPECT_DOUBLE_EQ(s.restart_window_secs, 60);
  EXPECT_DOUBLE_EQ(s.ready_timeout_secs, 120);  // default
  EXPECT_DOUBLE_EQ(s.save_summaries_secs, 10);  // default

  EXPECT_EQ(c.secret(), "design-secret-bytes");  // trailing newline dropped
  EXPECT_EQ(c.secret_origin(), dir_ + "/cluster.key");
}

TEST_F(ClusterSpecTest, MinimalFileTakesDefaults) {
  auto r = ClusterSpec::from_string("[jobs]\nworker = [\"127.0.0.1:5000\"]\n", "mem.toml");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->name(), "default");
  EXPECT_EQ(r->source(), "mem.toml");
  EXPECT_EQ(r->server_options(TaskId{"worker", 0}), ServerOptions());
  EXPECT_EQ(r->supervisor(), SupervisorOptions());
  EXPECT_EQ(r->secret(), "");
  EXPECT_EQ(r->secret_origin(), "");
  EXPECT_TRUE(r->all_loopback());
}

TEST_F(ClusterSpecTest, SparseForm) {
  const std::string text = R"([jobs]
ps = ["localhost:3000"]
worker = { 0 = "localhost:3100", 7 = "localhost:3107" }

[jobs.eval]
3 = "127.0.0.1:3203"
)";
  auto r = ClusterSpec::from_string(text, "sparse.toml");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->jobs(), (Strings{"eval", "ps", "worker"}));
  EXPECT_EQ(r->num_tasks("worker"), 2);
  EXPECT_EQ(r->task_indices("worker"), (Ints{0, 7}));
  EXPECT_EQ(r->task_indices("eval"), (Ints{3}));
  EXPECT_EQ(*r->task_address(TaskId{"worker", 7}), "localhost:3107");
  EXPECT_EQ(*r->task_address(TaskId{"eval", 3}), "127.0.0.1:3203");
  EXPECT_TRUE(r->validate_task(TaskId{"worker", 7}).ok());

  // A task in a gap: NotFound with the job's line and the indices that exist.
  Status st = r->validate_task(TaskId{"worker", 3});
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_EQ(st.message(), "sparse.toml:3:1: jobs.worker: no task 3 in job 'worker' (task indices: 0, 7)");
  auto addr = r->task_address(TaskId{"worker", 3});
  ASSERT_FALSE(addr.ok());
  EXPECT_EQ(addr.status(), st);
  Status nojob = r->validate_task(TaskId{"chief", 0});
  EXPECT_EQ(nojob.code(), Code::kNotFound);
  EXPECT_EQ(nojob.message(), "sparse.toml:1:1: jobs: no job 'chief' in the cluster (jobs: eval, ps, worker)");
  auto j = ClusterSpec::from_jobs({{"worker", {"localhost:1"}}});
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->validate_task(TaskId{"ps", 0}).message(), "<jobs>: no job 'ps' in the cluster (jobs: worker)");
  EXPECT_EQ(j->validate_task(TaskId{"worker", 1}).message(),
            "<jobs>: jobs.worker: no task 1 in job 'worker' (task indices: 0)");
}

TEST_F(ClusterSpecTest, PerTaskOverrides) {
  const std::string text = R"([jobs]
ps = ["localhost:4000"]
worker = ["localhost:4001", "localhost:4002", "localhost:4003"]

[server]
cpu_devices = 2
gpu_memory_fraction = 0.5
log_device_placement = true
heartbeat_interval_ms = 100
peer_timeout_ms = 1000

[tasks."worker/2"]
cpu_devices = 4
allow_soft_placement = false
connect_timeout_ms = 0

[tasks."/job:ps/task:0"]
gpu_memory_fraction = 0
visible_devices = "0,2"
)";
  auto r = ClusterSpec::from_string(text, "o.toml");
  ASSERT_TRUE(r.ok()) << r.status();
  ServerOptions base;
  base.cpu_devices = 2;
  base.gpu_memory_fraction = 0.5;
  base.log_device_placement = true;
  base.heartbeat_interval_ms = 100;
  base.peer_timeout_ms = 1000;
  EXPECT_EQ(r->server_options(TaskId{"worker", 0}), base);
  EXPECT_EQ(r->server_options(TaskId{"worker", 1}), base);
  ServerOptions w2 = base;
  w2.cpu_devices = 4;
  w2.allow_soft_placement = false;
  w2.connect_timeout_ms = 0;
  EXPECT_EQ(r->server_options(TaskId{"worker", 2}), w2);
  ServerOptions ps = base;
  ps.gpu_memory_fraction = 0;
  ps.visible_devices = "0,2";
  EXPECT_EQ(r->server_options(TaskId{"ps", 0}), ps);
  EXPECT_EQ(r->server_options(TaskId{"nosuch", 0}), base);  // unknown task: [server]
}

TEST_F(ClusterSpecTest, DefaultChiefWhenUnset) {
  auto a = ClusterSpec::from_string("[jobs]\nps=[\"localhost:1\"]\nworker=[\"localhost:2\"]\n", "a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->supervisor().chief, (TaskId{"worker", 0}));
  auto b = ClusterSpec::from_string("[jobs]\nps=[\"localhost:1\"]\nlocal={ 3 = \"localhost:2\" }\n", "b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->supervisor().chief, (TaskId{"local", 3}));
  auto c = ClusterSpec::from_string("[jobs]\nps=[\"localhost:1\"]\n[supervisor]\nchief=\"/job:ps/task:0\"\n", "c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->supervisor().chief, (TaskId{"ps", 0}));
}

TEST_F(ClusterSpecTest, FromJobsLikeTensorFlow) {
  auto r = ClusterSpec::from_jobs({{"local", {"localhost:2222", "localhost:2223"}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->jobs(), (Strings{"local"}));
  EXPECT_EQ(r->num_tasks("local"), 2);
  EXPECT_EQ(*r->task_address(TaskId{"local", 1}), "localhost:2223");
  EXPECT_EQ(r->supervisor().chief, (TaskId{"local", 0}));
  EXPECT_EQ(r->source(), "<jobs>");
  EXPECT_EQ(r->server_options(TaskId{"local", 0}), ServerOptions());

  auto tf = ClusterSpec::from_jobs({{"ps", {"localhost:2222"}},
                                    {"worker", {"localhost:2223", "localhost:2224", "localhost:2225"}}});
  ASSERT_TRUE(tf.ok());
  EXPECT_EQ(tf->supervisor().chief, (TaskId{"worker", 0}));
  EXPECT_EQ(tf->all_tasks().size(), 4u);

  auto sparse = ClusterSpec::from_sparse_jobs({{"worker", {{1, "localhost:10"}, {5, "localhost:11"}}}});
  ASSERT_TRUE(sparse.ok()) << sparse.status();
  EXPECT_EQ(sparse->task_indices("worker"), (Ints{1, 5}));
  EXPECT_EQ(sparse->supervisor().chief, (TaskId{"worker", 1}));
}

TEST_F(ClusterSpecTest, FromJobsErrors) {
  auto bad = ClusterSpec::from_jobs({{"worker", {"localhost:2222", "localhost:99999"}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "<jobs>: jobs.worker[1]: malformed address 'localhost:99999': port out of range 1..65535");
  auto dup = ClusterSpec::from_jobs({{"ps", {"localhost:2222"}}, {"worker", {"localhost:2222"}}});
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().message(), "<jobs>: jobs.worker[0]: duplicate address 'localhost:2222': already used by ps/0");
  auto empty = ClusterSpec::from_jobs({{"worker", {}}});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), "<jobs>: jobs.worker: job 'worker' has no tasks");
  auto none = ClusterSpec::from_jobs({});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "<jobs>: jobs: no jobs");
  auto name = ClusterSpec::from_jobs({{"my-job", {"localhost:1"}}});
  ASSERT_FALSE(name.ok());
  EXPECT_TRUE(Contains(name.status().message(), "bad job name 'my-job'"));
  auto neg = ClusterSpec::from_sparse_jobs({{"w", {{-1, "localhost:1"}}}});
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.status().message(), "<jobs>: jobs.w.-1: task index -1 out of range 0..999999");
  auto remote = ClusterSpec::from_jobs({{"worker", {"worker0.example.com:2222"}}});
  ASSERT_FALSE(remote.ok());
  EXPECT_EQ(remote.status().message(),
            "<jobs>: jobs.worker[0]: address 'worker0.example.com:2222' is not loopback, so the cluster needs a "
            "secret: set [cluster] secret_file or the ACTORFLOW_SECRET environment variable, or turn on TLS with "
            "[cluster] tls_dir (see `actorflow certs`)");
}

// ---- validation errors in files ----------------------------------------------------------

TEST_F(ClusterSpecTest, MalformedAddressHasFileLineColumnAndKey) {
  const std::string msg = error_of(R"(# a cluster
[cluster]
name = "x"

[jobs]
ps = ["localhost:2222"]
worker = ["localhost:2223",
         "localhost:99999"]
)");
  EXPECT_EQ(msg, dir_ + "/cluster.toml:8:10: jobs.worker[1]: malformed address 'localhost:99999': port out of "
                        "range 1..65535");
}

TEST_F(ClusterSpecTest, SyntaxErrorHasLine) {
  const std::string msg = error_of("[jobs]\nworker = [\"localhost:1\"\n\n[server]\n");
  EXPECT_TRUE(Starts(msg, dir_ + "/cluster.toml:4:"));
  EXPECT_TRUE(Contains(msg, "TOML syntax error: "));
  const std::string msg2 = error_of("[jobs]\nworker = [\"localhost:1\"]\n[server]\ncpu_devices = = 2\n");
  EXPECT_TRUE(Starts(msg2, dir_ + "/cluster.toml:4:"));
  EXPECT_TRUE(Contains(msg2, "TOML syntax error"));
  // A key defined twice is a syntax error in TOML (also catches a sparse index given twice).
  const std::string msg3 = error_of("[jobs]\nworker = { 0 = \"localhost:1\", 0 = \"localhost:2\" }\n");
  EXPECT_TRUE(Starts(msg3, dir_ + "/cluster.toml:2:"));
  EXPECT_TRUE(Contains(msg3, "TOML syntax error"));
}

TEST_F(ClusterSpecTest, UnknownKeysSuggestClosest) {
  const std::string msg = error_of(R"([jobs]
worker = ["localhost:1"]
[server]
allow_grwoth = true
zzz = 1
[servr]
[supervisor]
max_restart = 3
[cluster]
nmae = "x"
)");
  const std::string f = dir_ + "/cluster.toml";
  EXPECT_EQ(msg, f + ":4:1: server.allow_grwoth: unknown key (did you mean 'allow_growth'?)\n" +
                     f + ":5:1: server.zzz: unknown key (known: log_device_placement, allow_soft_placement, "
                         "mixed_precision, gpu_memory_fraction, allow_growth, visible_devices, cpu_devices, connect_timeout_ms, "
                         "heartbeat_interval_ms, peer_timeout_ms, bind, metrics_port, step_timeout_secs)\n" +
                     f + ":6:2: servr: unknown table (did you mean 'server'?)\n" +
                     f + ":8:1: supervisor.max_restart: unknown key (did you mean 'max_restarts'?)\n" +
                     f + ":10:1: cluster.nmae: unknown key (did you mean 'name'?)");
}

TEST_F(ClusterSpecTest, WrongTypes) {
  const std::string f = dir_ + "/cluster.toml";
  const std::string msg = error_of(R"([jobs]
ps = 5
worker = ["localhost:1", 2]
[server]
allow_growth = "yes"
cpu_devices = 2.0
gpu_memory_fraction = "0.5"
visible_devices = 0
[supervisor]
chief = 0
logdir = ""
)");
  EXPECT_EQ(msg, f + ":2:6: jobs.ps: expected an array of \"host:port\" strings or a table { 0 = \"host:port\" }, "
                     "got integer\n" +
                     f + ":3:26: jobs.worker[1]: expected a \"host:port\" string, got integer\n" +
                     f + ":5:16: server.allow_growth: expected a boolean (true or false), got string\n" +
                     f + ":6:15: server.cpu_devices: expected an integer, got float\n" +
                     f + ":7:23: server.gpu_memory_fraction: expected a number, got string\n" +
                     f + ":8:19: server.visible_devices: expected a string such as \"0,1\", got integer (write "
                         "\"0\")\n" +
                     f + ":10:9: supervisor.chief: expected a string, got integer\n" +
                     f + ":11:10: supervisor.logdir: must not be empty");
  const std::string msg2 = error_of("jobs = [\"localhost:1\"]\n");
  EXPECT_TRUE(Contains(msg2, "cluster.toml:1:8: jobs: expected a table, got array"));
}

TEST_F(ClusterSpecTest, DuplicateAddressesAcrossJobs) {
  const std::string f = dir_ + "/cluster.toml";
  setenv(kSecretEnvVar, "a-cluster-secret-0123", 1);  // host-a is not loopback
  const std::string msg = error_of(R"([jobs]
worker = ["localhost:2222", "host-a:2223"]
ps = ["Host-A:2223"]
eval = ["127.0.0.1:2222"]
)");
  EXPECT_EQ(msg, f + ":3:7: jobs.ps[0]: duplicate address 'Host-A:2223': already used by worker/1 (line 2)\n" +
                     f + ":4:9: jobs.eval[0]: address '127.0.0.1:2222' is the same endpoint as 'localhost:2222' of "
                         "worker/0 (line 2)");
}

TEST_F(ClusterSpecTest, EndpointAliasesCollide) {
  const std::string f = dir_ + "/cluster.toml";
  setenv(kSecretEnvVar, "a-cluster-secret-0123", 1);  // not loopback
  // An IPv4-mapped IPv6 address is the IPv4 address; the all-interfaces address collides with
  // every address on its port, whichever comes first.
  const std::string msg = error_of(R"([jobs]
worker = ["10.0.0.5:2222", "[::ffff:10.0.0.5]:2222"]
ps = ["0.0.0.0:2300", "10.0.0.7:2300"]
eval = ["10.0.0.8:2400", "[::]:2400", "[::ffff:127.0.0.1]:2500", "localhost:2500"]
)");
  EXPECT_TRUE(Contains(msg, f + ":2:28: jobs.worker[1]: address '[::ffff:10.0.0.5]:2222' is the same endpoint as "
                                 "'10.0.0.5:2222' of worker/0 (line 2)")) << msg;
  EXPECT_TRUE(Contains(msg, "jobs.ps[1]: address '10.0.0.7:2300' is the same endpoint as '0.0.0.0:2300' of ps/0")) << msg;
  EXPECT_TRUE(Contains(msg, "jobs.eval[1]: address '[::]:2400' is the same endpoint as '10.0.0.8:2400' of eval/0"))
      << msg;
  EXPECT_TRUE(Contains(msg, "jobs.eval[3]: address 'localhost:2500' is the same endpoint as")) << msg;
}

TEST_F(ClusterSpecTest, BindAddressOption) {
  setenv(kSecretEnvVar, "a-cluster-secret-0123", 1);
  const std::string f = dir_ + "/cluster.toml";
  {
    std::ofstream(f) << "[jobs]\nworker = [\"w0.example:2222\", \"w1.example:2222\"]\n[server]\nbind = \"0.0.0.0\"\n"
                     << "[tasks.\"worker/1\"]\nbind = \"::\"\n";
    auto spec = ClusterSpec::from_file(f);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->server_options(TaskId{"worker", 0}).bind, "0.0.0.0");
    EXPECT_EQ(spec->server_options(TaskId{"worker", 1}).bind, "::");
  }
  const std::string msg = error_of("[jobs]\nworker = [\"localhost:2222\"]\n[server]\nbind = \"localhost:2222\"\n");
  EXPECT_TRUE(Contains(msg, f + ":4:8: server.bind: 'localhost:2222' looks like host:port")) << msg;
  const std::string msg2 = error_of("[jobs]\nworker = [\"localhost:2222\"]\n[server]\nbind = \"a b\"\n");
  EXPECT_TRUE(Contains(msg2, "server.bind: 'a b' is not a host name or IP address")) << msg2;
}

TEST_F(ClusterSpecTest, MixedPrecisionOption) {
  const std::string f = dir_ + "/cluster.toml";
  {
    std::ofstream(f) << "[jobs]\nworker = [\"localhost:2222\", \"localhost:2223\"]\n[server]\n"
                     << "mixed_precision = \"bfloat16\"\n[tasks.\"worker/1\"]\nmixed_precision = \"float32\"\n";
    auto spec = ClusterSpec::from_file(f);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_TRUE(spec->server_options(TaskId{"worker", 0}).mixed_bfloat16);
    EXPECT_FALSE(spec->server_options(TaskId{"worker", 1}).mixed_bfloat16);  // the task's override
  }
  {
    std::ofstream(f) << "[jobs]\nworker = [\"localhost:2222\"]\n";
    auto spec = ClusterSpec::from_file(f);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_FALSE(spec->server_options(TaskId{"worker", 0}).mixed_bfloat16);  // the default
  }
  EXPECT_EQ(error_of("[jobs]\nworker = [\"localhost:2222\"]\n[server]\nmixed_precision = \"fp16\"\n"),
            f + ":4:19: server.mixed_precision: expected \"float32\" or \"bfloat16\", got \"fp16\"");
  EXPECT_EQ(error_of("[jobs]\nworker = [\"localhost:2222\"]\n[server]\nmixed_precision = true\n"),
            f + ":4:19: server.mixed_precision: expected a string, got boolean");
}

TEST_F(ClusterSpecTest, EmptyJobsAndBadSparseKeys) {
  const std::string f = dir_ + "/cluster.toml";
  const std::string msg = error_of(R"([jobs]
a = []
b = {}
c = { x = "localhost:1", 07 = "localhost:2", 1000000 = "localhost:3" }
"d-e" = ["localhost:4"]
)");
  EXPECT_EQ(msg, f + ":2:5: jobs.a: job 'a' has no tasks\n" +
                     f + ":3:5: jobs.b: job 'b' has no tasks\n" +
                     f + ":4:7: jobs.c.x: bad task index 'x': sparse-form keys are task indices 0..999999 without "
                         "leading zeros, e.g. { 0 = \"host:2222\" }\n" +
                     f + ":4:26: jobs.c.07: bad task index '07': sparse-form keys are task indices 0..999999 "
                         "without leading zeros, e.g. { 0 = \"host:2222\" }\n" +
                     f + ":4:46: jobs.c.1000000: bad task index '1000000': sparse-form keys are task indices "
                         "0..999999 without leading zeros, e.g. { 0 = \"host:2222\" }\n" +
                     f + ":5:1: jobs.d-e: bad job name 'd-e': must match [A-Za-z][A-Za-z0-9_]*");
  EXPECT_TRUE(Contains(error_of("[cluster]\nname = \"x\"\n"),
                       "cluster.toml:1:1: jobs: missing required table [jobs]"));
  EXPECT_TRUE(Contains(error_of("[jobs]\n"), "cluster.toml:1:1: jobs: no jobs"));
}

TEST_F(ClusterSpecTest, TaskOverridesMustNameExistingTasks) {
  const std::string f = dir_ + "/cluster.toml";
  const std::string msg = error_of(R"([jobs]
worker = ["localhost:1", "localhost:2"]
[tasks."worker/9"]
cpu_devices = 2
[tasks."chief/0"]
cpu_devices = 2
[tasks.worker]
cpu_devices = 2
[tasks."worker/1"]
cpu_devices = 2
[tasks."/job:worker/task:1"]
cpu_devices = 3
)");
  EXPECT_EQ(msg, f + ":3:8: tasks.\"worker/9\": task 'worker/9' is not in [jobs] (job 'worker' has task indices "
                     "0, 1)\n" +
                     f + ":5:8: tasks.\"chief/0\": task 'chief/0' names job 'chief', which is not in [jobs] (jobs: "
                         "worker)\n" +
                     f + ":7:8: tasks.worker: bad task 'worker': missing '/' (expected \"job/index\" such as "
                         "\"worker/1\", or \"/job:worker/task:1\"); write the header as [tasks.\"worker/1\"]\n" +
                     f + ":11:8: tasks.\"/job:worker/task:1\": task worker/1 already has overrides (line 9)");
}

TEST_F(ClusterSpecTest, RangesAndCounts) {
  const std::string f = dir_ + "/cluster.toml";
  const std::string msg = error_of(R"([jobs]
worker = ["localhost:1"]
[server]
gpu_memory_fraction = 1.5
cpu_devices = -1
connect_timeout_ms = -5
visible_devices = "0,,1"
[tasks."worker/0"]
gpu_memory_fraction = -0.1
visible_devices = "1,1"
heartbeat_interval_ms = 0
[supervisor]
keep_checkpoints = -2
max_restarts = -1
restart_window_secs = 0
save_checkpoint_secs = -1
ready_timeout_secs = nan
save_summaries_secs = -inf
chief = "worker/3"
)");
  EXPECT_EQ(msg, f + ":4:23: server.gpu_memory_fraction: must be in [0, 1], got 1.5\n" +
                     f + ":5:15: server.cpu_devices: must be in 1..4096, got -1\n" +
                     f + ":6:22: server.connect_timeout_ms: must be >= 0, got -5\n" +
                     f + ":7:19: server.visible_devices: '0,,1' is not a comma-separated list of GPU indices such "
                         "as \"0,1\" (\"\" = all GPUs)\n" +
                     f + ":9:23: tasks.\"worker/0\".gpu_memory_fraction: must be in [0, 1], got -0.1\n" +
                     f + ":10:19: tasks.\"worker/0\".visible_devices: GPU 1 is listed twice in '1,1'\n" +
                     f + ":11:25: tasks.\"worker/0\".heartbeat_interval_ms: must be >= 1, got 0\n" +
                     f + ":13:20: supervisor.keep_checkpoints: must be >= 0, got -2\n" +
                     f + ":14:16: supervisor.max_restarts: must be >= 0, got -1\n" +
                     f + ":15:23: supervisor.restart_window_secs: must be > 0, got 0\n" +
                     f + ":16:24: supervisor.save_checkpoint_secs: must be >= 0, got -1\n" +
                     f + ":17:22: supervisor.ready_timeout_secs: must be a finite number, got nan\n" +
                     f + ":18:23: supervisor.save_summaries_secs: must be a finite number, got -inf\n" +
                     f + ":19:9: supervisor.chief: chief 'worker/3' is not in [jobs] (job 'worker' has task "
                         "indices 0)");
}

TEST_F(ClusterSpecTest, PsReplicas) {
  // Default 1; 2 with two ps tasks; fingerprints differ only when it is set.
  auto one = ClusterSpec::from_string("[jobs]\nps=[\"localhost:1\",\"localhost:2\"]\nworker=[\"localhost:3\"]\n", "a");
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->supervisor().ps_replicas, 1);
  EXPECT_EQ(one->canonical_form().find("ps_replicas"), std::string::npos);
  auto two = ClusterSpec::from_string(
      "[jobs]\nps=[\"localhost:1\",\"localhost:2\"]\nworker=[\"localhost:3\"]\n[supervisor]\nps_replicas = 2\n", "b");
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(two->supervisor().ps_replicas, 2);
  EXPECT_NE(one->fingerprint(), two->fingerprint());
  const std::string f = dir_ + "/cluster.toml";
  EXPECT_EQ(error_of("[jobs]\nps=[\"localhost:1\",\"localhost:2\"]\n[supervisor]\nps_replicas = 3\n"),
            f + ":4:15: supervisor.ps_replicas: must be in 1..2, got 3");
  EXPECT_EQ(error_of("[jobs]\nps=[\"localhost:1\"]\nworker=[\"localhost:3\"]\n[supervisor]\nps_replicas = 2\n"),
            f + ":5:15: supervisor.ps_replicas: 2 needs at least 2 ps tasks (a variable's replica lives on another "
                "ps task), the cluster has 1");
}

TEST_F(ClusterSpecTest, SyncDeadline) {
  // Default 0 (none, left out of the fingerprint); milliseconds in [0, 86400000]; errors name the
  // file, the line and the key.
  const std::string jobs = "[jobs]\nps=[\"localhost:1\"]\nworker=[\"localhost:3\"]\n";
  auto none = ClusterSpec::from_string(jobs, "a");
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->supervisor().sync_deadline_ms, 0);
  EXPECT_EQ(none->canonical_form().find("sync_deadline_ms"), std::string::npos);
  auto set = ClusterSpec::from_string(jobs + "[supervisor]\nsync_deadline_ms = 1500\n", "b");
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_EQ(set->supervisor().sync_deadline_ms, 1500);
  EXPECT_NE(set->canonical_form().find("supervisor sync_deadline_ms 1500\n"), std::string::npos);
  EXPECT_NE(set->fingerprint(), none->fingerprint());
  auto neg = ClusterSpec::from_string(jobs + "[supervisor]\nsync_deadline_ms = -1\n", "c.toml");
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.status().message(), "c.toml:5:20: supervisor.sync_deadline_ms: must be in 0..86400000, got -1");
  auto text = ClusterSpec::from_string(jobs + "[supervisor]\nsync_deadline_ms = \"1s\"\n", "d.toml");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("d.toml:5:20: supervisor.sync_deadline_ms: expected an integer"),
            std::string::npos)
      << text.status().message();
}

TEST_F(ClusterSpecTest, StepTimeoutIsPositiveAndBounded) {
  const std::string f = dir_ + "/cluster.toml";
  auto c = ClusterSpec::from_string("[jobs]\nw = [\"localhost:1\", \"localhost:2\"]\n[server]\nstep_timeout_secs = 2.5\n"
                                    "[tasks.\"w/1\"]\nstep_timeout_secs = 90\n", "inline");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->server_options(TaskId{"w", 0}).step_timeout_secs, 2.5);
  EXPECT_DOUBLE_EQ(c->server_options(TaskId{"w", 1}).step_timeout_secs, 90);
  EXPECT_NE(error_of("[jobs]\nw = [\"localhost:1\"]\n[server]\nstep_timeout_secs = 0\n").find(
                "server.step_timeout_secs: must be in (0, 604800]"),
            std::string::npos);
  EXPECT_NE(error_of("[jobs]\nw = [\"localhost:1\"]\n[server]\nstep_timeout_secs = 1e9\n").find("must be in"),
            std::string::npos);
}

TEST_F(ClusterSpecTest, PeerTimeoutMustExceedHeartbeat) {
  const std::string f = dir_ + "/cluster.toml";
  EXPECT_EQ(error_of("[jobs]\nw = [\"localhost:1\"]\n[server]\npeer_timeout_ms = 400\n"),
            f + ":4:19: server.peer_timeout_ms: peer_timeout_ms (400) must be greater than heartbeat_interval_ms "
                "(500)");
  EXPECT_EQ(error_of("[jobs]\nw = [\"localhost:1\"]\n[tasks.\"w/0\"]\nheartbeat_interval_ms = 3000\n"),
            f + ":4:25: tasks.\"w/0\".heartbeat_interval_ms: peer_timeout_ms (3000) must be greater than "
                "heartbeat_interval_ms (3000)");
}

TEST_F(ClusterSpecTest, MissingFileAndDirectory) {
  auto r = ClusterSpec::from_file(dir_ + "/nope.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_EQ(r.status().message(), "cannot open cluster file '" + dir_ + "/nope.toml': No such file or directory");
  auto d = ClusterSpec::from_file(dir_);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), "cannot open cluster file '" + dir_ + "': is a directory, not a regular file");
}

// [supervisor] checkpoint_format picks the format the chief's checkpoints are written in.
TEST_F(ClusterSpecTest, CheckpointFormatIsActorflowOrTensorflow) {
  auto c = ClusterSpec::from_string("[jobs]\nworker=[\"localhost:1\"]\n", "c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->supervisor().tensorflow_checkpoints);
  auto tf = ClusterSpec::from_string(
      "[jobs]\nworker=[\"localhost:1\"]\n[supervisor]\ncheckpoint_format = \"tensorflow\"\n", "c");
  ASSERT_TRUE(tf.ok()) << tf.status();
  EXPECT_TRUE(tf->supervisor().tensorflow_checkpoints);
  EXPECT_NE(tf->supervisor(), c->supervisor());
  auto af = ClusterSpec::from_string(
      "[jobs]\nworker=[\"localhost:1\"]\n[supervisor]\ncheckpoint_format = \"actorflow\"\n", "c");
  ASSERT_TRUE(af.ok()) << af.status();
  EXPECT_FALSE(af->supervisor().tensorflow_checkpoints);
  const std::string f = dir_ + "/cluster.toml";
  EXPECT_EQ(error_of("[jobs]\nworker=[\"localhost:1\"]\n[supervisor]\ncheckpoint_format = \"onnx\"\n"),
            f + ":4:21: supervisor.checkpoint_format: must be \"actorflow\" or \"tensorflow\", got \"onnx\"");
}

TEST_F(ClusterSpecTest, ErrorsAreListedInFileOrder) {
  const std::string f = dir_ + "/cluster.toml";
  const std::string msg = error_of(R"([supervisor]
keep_checkpoints = -1
[jobs]
worker = ["localhost:0"]
[cluster]
bogus = 1
)");
  EXPECT_EQ(msg, f + ":2:20: supervisor.keep_checkpoints: must be >= 0, got -1\n" +
                     f + ":4:11: jobs.worker[0]: malformed address 'localhost:0': port out of range 1..65535\n" +
                     f + ":6:1: cluster.bogus: unknown key (known: name, secret_file, tls_dir, metrics_token_file)");
}

// ---- secret ------------------------------------------------------------------------------

TEST_F(ClusterSpecTest, SecretFromFileRelativeToClusterFile) {
  ASSERT_EQ(mkdir((dir_ + "/conf").c_str(), 0700), 0);
  write("conf/k", "s3cr3t-from-file\r\n");
  const std::string path = write("conf/c.toml", "[cluster]\nsecret_file = \"k\"\n[jobs]\nw = [\"10.0.0.1:2222\"]\n");
  setenv(kSecretEnvVar, "env-secret-0123456789", 1);  // the file's secret_file wins over the environment
  auto r = ClusterSpec::from_file(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->secret(), "s3cr3t-from-file");
  EXPECT_EQ(r->secret_origin(), dir_ + "/conf/k");
  EXPECT_FALSE(r->all_loopback());

  // An absolute secret_file is used as is.
  const std::string abs = write("c2.toml", "[cluster]\nsecret_file = \"" + dir_ + "/conf/k\"\n[jobs]\nw = [\"10.0.0.1:1\"]\n");
  auto r2 = ClusterSpec::from_file(abs);
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(r2->secret(), "s3cr3t-from-file");
}

// A secret shorter than 16 bytes can be guessed: refused with the file (or the environment
// variable) named, never echoing it (failed before: a 1-byte secret was accepted).
TEST_F(ClusterSpecTest, SecretsShorterThan16BytesAreRefused) {
  write("short.key", "hunter2\n");
  const std::string path = write("short.toml", "[cluster]\nsecret_file = \"short.key\"\n[jobs]\nw = [\"10.0.0.1:1\"]\n");
  auto r = ClusterSpec::from_file(path);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "secret file '" + dir_ + "/short.key' holds 7 bytes; a cluster secret "
                                             "needs at least 16"))
      << r.status();
  EXPECT_TRUE(Lacks(r.status().message(), "hunter2"));
  unsetenv(kSecretEnvVar);
  setenv(kSecretEnvVar, "hunter2", 1);
  auto e = ClusterSpec::from_file(write("env.toml", "[jobs]\nw = [\"10.0.0.1:1\"]\n"));
  unsetenv(kSecretEnvVar);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(Contains(e.status().message(), "ACTORFLOW_SECRET holds 7 bytes")) << e.status();
  EXPECT_TRUE(Lacks(e.status().message(), "hunter2"));
  write("ok.key", "0123456789abcdef\n");  // exactly 16
  EXPECT_TRUE(ClusterSpec::from_file(write("ok16.toml", "[cluster]\nsecret_file = \"ok.key\"\n[jobs]\nw = [\"10.0.0.1:1\"]\n")).ok());
}

// [cluster] metrics_token_file: Prometheus' read-only token, read relative to the cluster file;
// too short, or the cluster secret itself, is an error naming the key and the file.
TEST_F(ClusterSpecTest, MetricsTokenFileIsReadAndNeverTheSecret) {
  ASSERT_EQ(mkdir((dir_ + "/m").c_str(), 0700), 0);
  write("m/k", "the-cluster-secret-value\n");
  write("m/token", "0123456789abcdef0123\n");
  write("m/short", "short\n");
  auto ok = ClusterSpec::from_file(write(
      "m/c.toml", "[cluster]\nsecret_file = \"k\"\nmetrics_token_file = \"token\"\n[jobs]\nw = [\"localhost:2222\"]\n"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->metrics_token(), "0123456789abcdef0123");
  EXPECT_EQ(ok->secret(), "the-cluster-secret-value");
  const std::string same = dir_ + "/m/same.toml";
  auto r = ClusterSpec::from_file(write(
      "m/same.toml", "[cluster]\nsecret_file = \"k\"\nmetrics_token_file = \"k\"\n[jobs]\nw = [\"localhost:2222\"]\n"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), same + ":3:22: cluster.metrics_token_file: metrics token file '" + dir_ +
                                                 "/m/k' holds the cluster secret"))
      << r.status();
  auto s = ClusterSpec::from_file(write(
      "m/short.toml", "[cluster]\nsecret_file = \"k\"\nmetrics_token_file = \"short\"\n[jobs]\nw = [\"localhost:2222\"]\n"));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status().message(), "holds fewer than 16 bytes")) << s.status();
}

TEST_F(ClusterSpecTest, SecretFromEnvironment) {
  setenv(kSecretEnvVar, "env-secret-value", 1);
  auto r = ClusterSpec::from_string("[jobs]\nw = [\"10.0.0.1:2222\", \"[fe80::1]:2222\"]\n", "e.toml");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->secret(), "env-secret-value");
  EXPECT_EQ(r->secret_origin(), "ACTORFLOW_SECRET");
  EXPECT_EQ(*r->task_address(TaskId{"w", 1}), "[fe80::1]:2222");
  auto j = ClusterSpec::from_jobs({{"worker", {"worker0.example.com:2222"}}});
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->secret(), "env-secret-value");
}

TEST_F(ClusterSpecTest, SecretRequiredForNonLoopback) {
  const std::string f = dir_ + "/cluster.toml";
  EXPECT_EQ(error_of("[jobs]\nps = [\"localhost:1\"]\nworker = [\"[::1]:2\", \"192.168.1.5:2222\"]\n"),
            f + ":3:22: jobs.worker[1]: address '192.168.1.5:2222' is not loopback, so the cluster needs a secret: "
                "set [cluster] secret_file or the ACTORFLOW_SECRET environment variable, or turn on TLS with [cluster] "
                "tls_dir (see `actorflow certs`)");
  setenv(kSecretEnvVar, "", 1);  // empty counts as unset
  EXPECT_TRUE(Contains(error_of("[jobs]\nw = [\"0.0.0.0:2222\"]\n"), "is not loopback"));
  // All loopback: no secret needed.
  EXPECT_EQ(error_of("[jobs]\nw = [\"localhost:1\", \"127.0.0.2:1\", \"[::1]:3\"]\n"), "");
}

TEST_F(ClusterSpecTest, TlsDirReplacesTheSecretAndIsPartOfTheFingerprint) {
  const std::string remote = "[jobs]\nps = [\"10.0.0.1:2222\"]\nworker = [\"10.0.0.2:2222\"]\n";
  auto tls = ClusterSpec::from_file(write("cluster.toml", "[cluster]\ntls_dir = \"certs\"\n" + remote));
  ASSERT_TRUE(tls.ok()) << tls.status();  // non-loopback addresses, no secret: TLS authenticates
  EXPECT_TRUE(tls->tls());
  EXPECT_EQ(tls->tls_dir(), dir_ + "/certs");  // relative to the cluster file
  auto abs = ClusterSpec::from_file(write("cluster.toml", "[cluster]\ntls_dir = \"/etc/af\"\n" + remote));
  ASSERT_TRUE(abs.ok());
  EXPECT_EQ(abs->tls_dir(), "/etc/af");
  // Both ends must agree on TLS; where the files lie is a per-host choice.
  EXPECT_EQ(abs->fingerprint(), tls->fingerprint());
  setenv(kSecretEnvVar, "a-cluster-secret-0123", 1);
  auto plain = ClusterSpec::from_file(write("cluster.toml", remote));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->tls());
  EXPECT_NE(plain->fingerprint(), tls->fingerprint());
  unsetenv(kSecretEnvVar);
  const std::string local = "[jobs]\nw = [\"localhost:1\"]\n";
  EXPECT_EQ(error_of("[cluster]\ntls_dir = \"\"\n" + local),
            dir_ + "/cluster.toml:2:11: cluster.tls_dir: must not be empty (omit it to run without TLS)");
  EXPECT_TRUE(Contains(error_of("[cluster]\ntls_dir = 3\n" + local), "cluster.toml:2:11: cluster.tls_dir:"));
}

TEST_F(ClusterSpecTest, UnreadableOrEmptySecretFile) {
  const std::string f = dir_ + "/cluster.toml";
  setenv(kSecretEnvVar, "env-secret-0123456789", 1);  // does not excuse a broken secret_file
  EXPECT_EQ(error_of("[jobs]\nw = [\"localhost:1\"]\n\n[cluster]\nsecret_file = \"missing.key\"\n"),
            f + ":5:15: cluster.secret_file: cannot read secret file '" + dir_ +
                "/missing.key': No such file or directory");
  write("empty.key", "\n\n");
  EXPECT_EQ(error_of("[cluster]\nsecret_file = \"empty.key\"\n[jobs]\nw = [\"10.1.1.1:1\"]\n"),
            f + ":2:15: cluster.secret_file: secret file '" + dir_ + "/empty.key' is empty");
  ASSERT_EQ(mkdir((dir_ + "/keydir").c_str(), 0700), 0);
  EXPECT_EQ(error_of("[cluster]\nsecret_file = \"keydir\"\n[jobs]\nw = [\"localhost:1\"]\n"),
            f + ":2:15: cluster.secret_file: cannot read secret file '" + dir_ + "/keydir': is a directory, not a regular file");
  EXPECT_TRUE(Contains(error_of("[cluster]\nsecret_file = \"\"\n[jobs]\nw = [\"localhost:1\"]\n"),
                       ":2:15: cluster.secret_file: must not be empty"));
}

TEST_F(ClusterSpecTest, SecretNeverInMessages) {
  const std::string inline_secret = "hunter2-inline-value";
  const std::string msg = error_of("[cluster]\nsecret = \"" + inline_secret + "\"\n[jobs]\nw = [\"localhost:1\"]\n");
  EXPECT_TRUE(Contains(msg, ":2:1: cluster.secret: inline secrets are not allowed"));
  EXPECT_TRUE(Lacks(msg, inline_secret));

  write("k.key", "file-secret-value-xyz");
  setenv(kSecretEnvVar, "env-secret-value-abc", 1);
  const std::string msg2 = error_of(
      "[cluster]\nsecret_file = \"k.key\"\n[jobs]\nw = [\"remote:1\", \"remote:1\"]\n[server]\nbad = 1\n");
  EXPECT_TRUE(Contains(msg2, "duplicate address"));
  EXPECT_TRUE(Lacks(msg2, "file-secret-value-xyz"));
  EXPECT_TRUE(Lacks(msg2, "env-secret-value-abc"));
  auto ok = ClusterSpec::from_file(write("ok.toml", "[cluster]\nsecret_file = \"k.key\"\n[jobs]\nw = [\"remote:1\"]\n"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(Lacks(ok->canonical_form(), "file-secret-value-xyz"));
  EXPECT_TRUE(Lacks(ok->canonical_form(), "k.key"));
}

// ---- fingerprint -------------------------------------------------------------------------

TEST_F(ClusterSpecTest, FingerprintIgnoresFormattingAndForm) {
  const std::string a = R"([cluster]
name = "fp"
[jobs]
ps = ["localhost:2222"]
worker = ["localhost:2223", "localhost:2224"]
[server]
cpu_devices = 2
[supervisor]
max_restarts = 3
)";
  // Same cluster: comments, spacing, order of tables and keys, sparse form, inline tables, an option set
  // per task instead of in [server], a different secret, defaults spelled out, host case.
  const std::string b = R"(
# reformatted
supervisor = { max_restarts = 3, keep_checkpoints = 5 }

[jobs.worker]
1 = "LOCALHOST:2224"
0 = "localhost:2223"

[jobs]
ps = [ "localhost:2222", ]

[tasks."worker/0"]
cpu_devices = 2
[tasks."worker/1"]
cpu_devices = 2
[tasks."/job:ps/task:0"]
cpu_devices=2

[cluster]
name="fp"
)";
  auto ra = ClusterSpec::from_string(a, "a.toml");
  auto rb = ClusterSpec::from_string(b, "b.toml");
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ(ra->canonical_form(), rb->canonical_form());
  EXPECT_EQ(ra->fingerprint(), rb->fingerprint());
  EXPECT_EQ(ra->fingerprint().size(), 64u);
  EXPECT_EQ(ra->fingerprint().find_first_not_of("0123456789abcdef"), std::string::npos);

  // The secret does not change it.
  setenv(kSecretEnvVar, "some-cluster-secret-0123", 1);
  auto rs = ClusterSpec::from_string(a, "a.toml");
  ASSERT_TRUE(rs.ok());
  EXPECT_EQ(rs->fingerprint(), ra->fingerprint());
  unsetenv(kSecretEnvVar);

  // Any change of an address, a task, the name or an option does.
  auto differs = [&](const std::string& from, const std::string& to) {
    std::string changed = a;
    const size_t at = changed.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    changed.replace(at, from.size(), to);
    auto rc = ClusterSpec::from_string(changed, "c.toml");
    EXPECT_TRUE(rc.ok()) << rc.status();
    if (rc.ok()) {
      EXPECT_NE(rc->fingerprint(), ra->fingerprint()) << from << " -> " << to;
    }
  };
  differs("localhost:2224", "localhost:2225");
  differs("\"localhost:2224\"]", "\"localhost:2224\", \"localhost:2226\"]");
  differs("name = \"fp\"", "name = \"fp2\"");
  differs("cpu_devices = 2", "cpu_devices = 3");
  differs("max_restarts = 3", "max_restarts = 4");
  differs("[server]", "[server]\ngpu_memory_fraction = 0.25");
}

TEST_F(ClusterSpecTest, FingerprintIsStable) {
  // Pinned: peers on every machine and build must agree on this value for this cluster. The hash
  // was computed independently (Python hashlib.sha256 of the text below). If the canonical form is
  // changed on purpose, bump its version line and update both.
  auto r = ClusterSpec::from_jobs({{"ps", {"localhost:2222"}}, {"worker", {"localhost:2223"}}});
  ASSERT_TRUE(r.ok());
  std::string expected =
      "actorflow-cluster-spec 1\n"
      "cluster.name \"default\"\n"
      "task \"ps\" 0 \"localhost:2222\"\n"
      "task \"worker\" 0 \"localhost:2223\"\n";
  for (const char* t : {"ps/0", "worker/0"}) {
    const std::string p = std::string("server \"") + t + "\" ";
    expected += p + "log_device_placement 0\n" + p + "allow_soft_placement 1\n" + p + "gpu_memory_fraction 0\n" +
                p + "allow_growth 0\n" + p + "visible_devices \"\"\n" + p + "cpu_devices 1\n" + p +
                "connect_timeout_ms 30000\n" + p + "heartbeat_interval_ms 500\n" + p + "peer_timeout_ms 3000\n";
  }
  expected +=
      "supervisor chief \"worker/0\"\n"
      "supervisor logdir \"./logs\"\n"
      "supervisor save_checkpoint_secs 60\n"
      "supervisor keep_checkpoints 5\n"
      "supervisor max_restarts 5\n"
      "supervisor restart_window_secs 60\n"
      "supervisor ready_timeout_secs 120\n"
      "supervisor save_summaries_secs 10\n";
  EXPECT_EQ(r->canonical_form(), expected);
  EXPECT_EQ(r->fingerprint(), "a78ad6bc1452f2f66e2e72cddd378b5c9d6f5353480184c7fb95738990c8b49c");
}

}  // namespace
}  // namespace actorflow

namespace actorflow {
namespace {

// cluster_task_from_args: the three ways a program is told its cluster and task, the flags taken
// out and the rest kept in order, and errors naming the flag.
TEST_F(ClusterSpecTest, ClusterAndTaskFromSeedStyleArguments) {
  const std::string toml = write("c.toml", "[jobs]\nps = [\"localhost:7001\"]\nworker = [\"localhost:7002\", \"localhost:7003\"]\n");
  auto a = cluster_task_from_args({"--steps", "10", "--cluster", toml, "--job=worker", "--task", "1", "--sync"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->task, (TaskId{"worker", 1}));
  EXPECT_EQ(a->cluster.num_tasks("worker"), 2);
  EXPECT_EQ(a->rest, (std::vector<std::string>{"--steps", "10", "--sync"}));
  // Seed 002's flags.
  auto b = cluster_task_from_args({"--ps_hosts=localhost:7001", "--worker_hosts=localhost:7002,localhost:7003",
                                   "--job_name=ps", "--task_index=0"});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->task, (TaskId{"ps", 0}));
  EXPECT_EQ(b->cluster.num_tasks("worker"), 2);
  EXPECT_TRUE(b->rest.empty());
  // TF_CONFIG: its task stands for --job/--task; flags still override it.
  const std::string tf = R"({"cluster": {"worker": ["localhost:7002", "localhost:7003"], "ps": ["localhost:7001"]},
                             "task": {"type": "worker", "index": 1}})";
  auto c = cluster_task_from_args({"--steps", "5"}, tf);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->task, (TaskId{"worker", 1}));
  auto d = cluster_task_from_args({"--job", "worker", "--task", "0"}, tf);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->task, (TaskId{"worker", 0}));
  // Errors name what is wrong.
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--cluster"}, "--cluster needs a value"},
      {{"--cluster", toml, "--ps_hosts=localhost:1"}, "either --cluster or --ps_hosts/--worker_hosts"},
      {{"--job", "worker"}, "no cluster"},
      {{"--cluster", toml}, "which task is this?"},
      {{"--cluster", toml, "--job", "worker"}, "--job needs --task"},
      {{"--cluster", toml, "--job", "worker", "--task", "x1"}, "--task 'x1' is not a task index"},
      {{"--cluster", toml, "--job", "worker", "--task", "9"}, "worker"},
      {{"--cluster", toml, "--job", "worker", "--task", "0", "--task_index", "1"}, "given twice"},
  };
  for (const auto& [args, want] : bad) {
    auto r = cluster_task_from_args(args);
    ASSERT_FALSE(r.ok()) << want;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << want << ": " << r.status();
  }
}

}  // namespace
}  // namespace actorflow
