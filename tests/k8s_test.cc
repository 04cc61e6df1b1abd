// `actorflow k8s` (cli/k8s.cc): the manifests name every task's pod consistently (ConfigMap
// addresses, headless Services, StatefulSets), the rewritten cluster file loads back, and bad input
// exits 2 naming the problem. The schema check is scripts/k8s-validate.sh (ctest
// K8sTest.ManifestsValidateAgainstTheKubernetesSchemas).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "config/cluster_spec.h"
#include "net/tls.h"
#include "tests/util/dir_watch.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::binary;
using testing::ChildProcess;
using testing::TempDir;

struct CliRun {
  int code = -1;
  std::string output;  // stdout and stderr together
};

CliRun run_actorflow(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {binary("actorflow")};
  argv.insert(argv.end(), args.begin(), args.end());
  auto p = ChildProcess::start(argv, {}, {});
  if (!p) return {};
  auto code = p->await_exit(60s);
  return {code.ok() ? *code : -1, p->output()};
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The regular files of `dir` with names ending in `ext`, sorted by name.
std::vector<std::string> files_in(const std::string& dir, const std::string& ext) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > ext.size() && n.compare(n.size() - ext.size(), ext.size(), ext) == 0) out.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string base64_decode(const std::string& in) {
  static const std::string kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  unsigned v = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const size_t k = kAlphabet.find(c);
    if (k == std::string::npos) return "<not base64>";
    v = (v << 6) | static_cast<unsigned>(k);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xff);
    }
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  return parts;
}

constexpr const char* kSecret = "k8s-test-secret-0123456789\n";

// 2 ps + 3 workers with a secret file and a per-task option, in `dir`.
std::string write_cluster(const TempDir& dir, const std::string& extra = "") {
  dir.write("cluster.key", kSecret);
  return dir.write("cluster.toml",
                   "[cluster]\n"
                   "name = \"Mnist_CNN\"\n"
                   "secret_file = \"cluster.key\"\n"
                   "[jobs]\n"
                   "ps = [\"localhost:2222\", \"localhost:2226\"]\n"
                   "worker = [\"localhost:2223\", \"localhost:2224\", \"localhost:2225\"]\n"
                   "[server]\n"
                   "gpu_memory_fraction = 0.25\n"
                   "[tasks.\"worker/1\"]\n"
                   "visible_devices = \"1\"\n"
                   "[supervisor]\n"
                   "logdir = \"/var/lib/actorflow/logs\"\n" +
                       extra);
}

// Runs `actorflow k8s ... --format json --out DIR` and returns the objects in file order.
std::vector<json> manifests(const std::vector<std::string>& args, const TempDir& out, CliRun* run) {
  std::vector<std::string> a = {"k8s"};
  a.insert(a.end(), args.begin(), args.end());
  a.insert(a.end(), {"--format", "json", "--out", out.path()});
  *run = run_actorflow(a);
  std::vector<json> objects;
  for (const std::string& f : files_in(out.path(), ".json")) objects.push_back(json::parse(read_text(out.file(f))));
  return objects;
}

const json* find_object(const std::vector<json>& objects, const std::string& kind, const std::string& name) {
  for (const json& o : objects)
    if (o["kind"] == kind && o["metadata"]["name"] == name) return &o;
  return nullptr;
}

TEST(K8sTest, EveryTaskAddressIsItsPodsNameBehindAHeadlessServiceAndTheClusterFileLoadsBack) {
  TempDir in, out;
  const std::string file = write_cluster(in);
  CliRun run;
  const std::vector<json> objects = manifests({"--cluster", file, "--image", "reg.example/af:1", "--namespace", "ml"}, out, &run);
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("deploy/Dockerfile"), std::string::npos) << run.output;

  // Kinds and names, in their fixed order.
  std::vector<std::string> got;
  for (const json& o : objects) {
    got.push_back(o["kind"].get<std::string>() + " " + o["metadata"]["name"].get<std::string>());
    EXPECT_EQ(o["metadata"]["namespace"], "ml") << got.back();
  }
  EXPECT_EQ(got, (std::vector<std::string>{
                     "ConfigMap mnist-cnn-cluster", "Secret mnist-cnn-ps-0-secret", "Secret mnist-cnn-ps-1-secret",
                     "Secret mnist-cnn-worker-0-secret", "Secret mnist-cnn-worker-1-secret",
                     "Secret mnist-cnn-worker-2-secret", "Service mnist-cnn-ps", "StatefulSet mnist-cnn-ps-0",
                     "StatefulSet mnist-cnn-ps-1", "Service mnist-cnn-worker", "StatefulSet mnist-cnn-worker-0",
                     "StatefulSet mnist-cnn-worker-1", "StatefulSet mnist-cnn-worker-2"}));
  ASSERT_EQ(objects.size(), 13u);

  // Each task's Secret holds the secret file's bytes (no TLS: nothing else).
  for (size_t k = 1; k <= 5; ++k) {
    EXPECT_EQ(objects[k]["type"], "Opaque");
    EXPECT_EQ(objects[k]["data"].size(), 1u) << objects[k]["data"].dump();
    EXPECT_EQ(base64_decode(objects[k]["data"].value("cluster.key", "")), kSecret);
  }
  const json& secret = objects[1];

  // StatefulSets: one per task, one pod each; labels, the command, the mounts, the resources.
  const json* ps = find_object(objects, "StatefulSet", "mnist-cnn-ps-0");
  const json* worker = find_object(objects, "StatefulSet", "mnist-cnn-worker-2");
  ASSERT_TRUE(ps && worker);
  for (const json& s : objects) {
    if (s["kind"] != "StatefulSet") continue;
    const json& spec = s["spec"];
    EXPECT_EQ(spec["replicas"], 1);
    EXPECT_EQ(spec["podManagementPolicy"], "Parallel");
    EXPECT_EQ(spec["selector"]["matchLabels"], spec["template"]["metadata"]["labels"]);
    const json& c = spec["template"]["spec"]["containers"][0];
    EXPECT_EQ(c["image"], "reg.example/af:1");
    EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"], "/healthz");
    EXPECT_EQ(c["readinessProbe"]["httpGet"]["port"], "metrics");
    EXPECT_EQ(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    // The bound SecurityHealthTest holds /healthz to under 1 000 idle and slow connections.
    EXPECT_EQ(c["readinessProbe"]["timeoutSeconds"], 5);
    EXPECT_EQ(c["livenessProbe"]["timeoutSeconds"], 5);
    EXPECT_FALSE(c["resources"].contains("limits"));
    bool metrics_port = false;
    for (const json& p : c["ports"]) metrics_port |= p["name"] == "metrics" && p["containerPort"] == 9100;
    EXPECT_TRUE(metrics_port) << c["ports"].dump();
    const std::string job = spec["template"]["metadata"]["labels"]["actorflow/job"];
    const std::string task = spec["template"]["metadata"]["labels"]["actorflow/task"];
    EXPECT_EQ(s["metadata"]["name"], "mnist-cnn-" + job + "-" + task);
    EXPECT_EQ(c["command"], json({"/bin/sh", "-c",
                                  "exec actorflow node --cluster /etc/actorflow/cluster.toml --job " + job +
                                      " --task " + task}));
    EXPECT_EQ(spec["template"]["spec"]["volumes"][1]["secret"]["secretName"],
              s["metadata"]["name"].get<std::string>() + "-secret");
    std::map<std::string, std::string> mounts;
    for (const json& m : c["volumeMounts"]) mounts[m["name"]] = m["mountPath"];
    EXPECT_EQ(mounts, (std::map<std::string, std::string>{{"cluster", "/etc/actorflow/cluster.toml"},
                                                          {"secret", "/etc/actorflow/secret"}}));
  }
  EXPECT_EQ((*ps)["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"],
            json({{"cpu", "1"}, {"memory", "1Gi"}}));
  EXPECT_EQ((*worker)["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"],
            json({{"cpu", "2"}, {"memory", "2Gi"}}));

  // The ConfigMap's cluster file, next to the Secret's files as in a pod, loads back.
  const std::string toml = objects[0]["data"]["cluster.toml"];
  TempDir pod;
  ASSERT_EQ(::mkdir(pod.file("secret").c_str(), 0700), 0);
  pod.write("secret/cluster.key", base64_decode(secret["data"]["cluster.key"].get<std::string>()));
  ::chmod(pod.file("secret/cluster.key").c_str(), 0600);
  const std::string pod_file = pod.write("cluster.toml", toml);
  auto spec = ClusterSpec::from_file(pod_file);
  ASSERT_TRUE(spec.ok()) << spec.status().message() << "\n" << toml;
  auto orig = ClusterSpec::from_file(file);
  ASSERT_TRUE(orig.ok()) << orig.status().message();
  EXPECT_EQ(spec->jobs(), (std::vector<std::string>{"ps", "worker"}));
  EXPECT_EQ(spec->num_tasks("ps"), 2);
  EXPECT_EQ(spec->num_tasks("worker"), 3);
  EXPECT_EQ(spec->secret(), orig->secret());
  EXPECT_EQ(spec->supervisor(), orig->supervisor());
  EXPECT_EQ(spec->name(), orig->name());

  for (const TaskId& t : spec->all_tasks()) {
    SCOPED_TRACE(t.to_string());
    // Every option but bind and metrics_port is the original's.
    ServerOptions want = orig->server_options(t);
    want.bind = "0.0.0.0";
    want.metrics_port = 9100;
    EXPECT_EQ(spec->server_options(t), want);
    EXPECT_EQ(spec->server_options(t).bind, "0.0.0.0");
    EXPECT_EQ(spec->server_options(t).metrics_port, 9100);

    // <pod>.<service>.<namespace>.svc.cluster.local:<port>
    auto addr = spec->task_address(t);
    ASSERT_TRUE(addr.ok());
    auto hp = parse_address(*addr);
    ASSERT_TRUE(hp.ok()) << *addr;
    auto orig_hp = parse_address(*orig->task_address(t));
    EXPECT_EQ(hp->second, orig_hp->second) << "the task keeps its port";
    const std::vector<std::string> labels = split(hp->first, '.');
    ASSERT_EQ(labels.size(), 6u) << *addr;
    EXPECT_EQ(labels[2], "ml");
    EXPECT_EQ(labels[3] + "." + labels[4] + "." + labels[5], "svc.cluster.local");
    const std::string pod_name = labels[0], service_name = labels[1];

    // The pod exists: <statefulset>-0 of a StatefulSet of one pod that runs task t.
    ASSERT_GT(pod_name.size(), 2u);
    ASSERT_EQ(pod_name.substr(pod_name.size() - 2), "-0") << pod_name;
    const json* sts = find_object(objects, "StatefulSet", pod_name.substr(0, pod_name.size() - 2));
    ASSERT_NE(sts, nullptr) << "no StatefulSet has a pod named " << pod_name;
    EXPECT_EQ((*sts)["spec"]["replicas"], 1);
    EXPECT_EQ((*sts)["spec"]["template"]["metadata"]["labels"]["actorflow/job"], t.job);
    EXPECT_EQ((*sts)["spec"]["template"]["metadata"]["labels"]["actorflow/task"], std::to_string(t.index));
    EXPECT_EQ((*sts)["spec"]["serviceName"], service_name);

    // The service is headless and selects that pod and no pod of another job, with t's port.
    const json* svc = find_object(objects, "Service", service_name);
    ASSERT_NE(svc, nullptr) << "no Service " << service_name;
    EXPECT_EQ((*svc)["spec"]["clusterIP"], "None");
    EXPECT_EQ((*svc)["spec"]["publishNotReadyAddresses"], true);
    const json& pod_labels = (*sts)["spec"]["template"]["metadata"]["labels"];
    for (auto& [k, v] : (*svc)["spec"]["selector"].items()) EXPECT_EQ(pod_labels.value(k, json()), v) << k;
    for (const json& o : objects)
      if (o["kind"] == "StatefulSet" && o["spec"]["template"]["metadata"]["labels"]["actorflow/job"] != t.job) {
        bool all = true;
        for (auto& [k, v] : (*svc)["spec"]["selector"].items())
          all &= o["spec"]["template"]["metadata"]["labels"].value(k, json()) == v;
        EXPECT_FALSE(all) << service_name << " also selects " << o["metadata"]["name"];
      }
    bool has_port = false;
    for (const json& p : (*svc)["spec"]["ports"]) has_port |= p["port"] == hp->second;
    EXPECT_TRUE(has_port) << (*svc)["spec"]["ports"].dump();
  }

  // --out also writes the cluster file itself, identical to the ConfigMap's.
  EXPECT_EQ(read_text(out.file("cluster.toml")), toml);

  // The YAML form (stdout) carries the same objects as documents separated by ---.
  CliRun yaml = run_actorflow({"k8s", "--cluster", file, "--image", "reg.example/af:1", "--namespace", "ml"});
  ASSERT_EQ(yaml.code, 0) << yaml.output;
  size_t docs = 0;
  for (size_t p = yaml.output.find("\n---\n"); p != std::string::npos; p = yaml.output.find("\n---\n", p + 1)) ++docs;
  EXPECT_EQ(docs, 13u) << yaml.output;
  EXPECT_NE(yaml.output.find("kind: \"StatefulSet\"\nmetadata:\n  name: \"mnist-cnn-worker-2\""), std::string::npos);
  EXPECT_NE(yaml.output.find("\n  cluster.toml: |\n    # Generated by `actorflow k8s`"), std::string::npos)
      << yaml.output;
}

TEST(K8sTest, ProgramRunsTheTrainingInsteadOfNodeAndTlsShipsTheCertificatesButNotTheCaKey) {
  TempDir in, out;
  const std::string file = write_cluster(in, "");
  // TLS on: `actorflow certs` writes the material the Secret must carry.
  CliRun certs = run_actorflow({"certs", "--cluster", file, "--out", in.file("certs")});
  ASSERT_EQ(certs.code, 0) << certs.output;
  std::string text = read_text(file);
  text.replace(text.find("[jobs]"), 6, "tls_dir = \"certs\"\n[jobs]");
  in.write("cluster.toml", text);
  CliRun run;
  const std::vector<json> objects = manifests(
      {"--cluster", file, "--image", "af:2", "--program", "worker=distributed_cnn --steps 200"}, out, &run);
  ASSERT_EQ(run.code, 0) << run.output;
  const json* secret = find_object(objects, "Secret", "mnist-cnn-worker-1-secret");
  ASSERT_NE(secret, nullptr);
  std::vector<std::string> keys;
  for (auto& [k, v] : (*secret)["data"].items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"ca.crt", "cluster.key", "worker-1.crt", "worker-1.key"}));
  EXPECT_EQ(base64_decode((*secret)["data"]["ca.crt"].get<std::string>()), read_text(in.file("certs/ca.crt")));
  EXPECT_TRUE(base64_decode((*secret)["data"]["worker-1.key"].get<std::string>()) ==
              read_text(in.file("certs/worker-1.key")));
  const json* client = find_object(objects, "Secret", "mnist-cnn-client");
  ASSERT_NE(client, nullptr);
  keys.clear();
  for (auto& [k, v] : (*client)["data"].items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"ca.crt", "client.crt", "client.key"}));
  EXPECT_NE(find_object(objects, "ConfigMap", "mnist-cnn-cluster")->at("data").at("cluster.toml").get<std::string>().find(
                "tls_dir = \"secret\""),
            std::string::npos);

  const json* worker = find_object(objects, "StatefulSet", "mnist-cnn-worker-1");
  const json* ps = find_object(objects, "StatefulSet", "mnist-cnn-ps-1");
  ASSERT_TRUE(worker && ps);
  const json& wc = (*worker)["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(wc["command"][2], "distributed_cnn --steps 200 --cluster /etc/actorflow/cluster.toml --job worker "
                              "--task 1 && exec sleep infinity");
  EXPECT_FALSE(wc.contains("livenessProbe"));
  // Under TLS the kubelet cannot present a client certificate: a TCP probe.
  EXPECT_EQ(wc["readinessProbe"]["tcpSocket"]["port"], "metrics");
  const json& pc = (*ps)["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(pc["command"][2], "exec actorflow node --cluster /etc/actorflow/cluster.toml --job ps --task 1");
  EXPECT_EQ(pc["livenessProbe"]["tcpSocket"]["port"], "metrics");
}

// The pod-mounted Secret volumes of a pod template (plain and projected), by Secret name.
std::vector<std::string> mounted_secrets(const json& pod_spec) {
  std::vector<std::string> names;
  for (const json& v : pod_spec.value("volumes", json::array())) {
    if (v.contains("secret")) names.push_back(v["secret"].value("secretName", ""));
    if (v.contains("projected"))
      for (const json& src : v["projected"].value("sources", json::array()))
        if (src.contains("secret")) names.push_back(src["secret"].value("name", ""));
  }
  return names;
}

// One compromised pod must not be able to impersonate another task. Each task's
// pod mounts one Secret with only its own certificate and key, the CA certificate and the shared
// cluster secret / scrape token; no pod mounts another task's key or the tools' client key.
TEST(K8sTest, EachPodMountsOnlyItsOwnTasksKeyNeverAnotherTasksNorTheClientKey) {
  TempDir in, out;
  in.write("cluster.key", kSecret);
  in.write("metrics.token", "0123456789abcdef0123456789abcdef\n");
  ASSERT_EQ(::chmod(in.file("metrics.token").c_str(), 0600), 0);
  ASSERT_EQ(::chmod(in.file("cluster.key").c_str(), 0600), 0);
  const std::string plain = "[cluster]\nname = \"cnn\"\nsecret_file = \"cluster.key\"\n"
                            "metrics_token_file = \"metrics.token\"\n";
  const std::string jobs = "[jobs]\nps = [\"localhost:2222\"]\nworker = [\"localhost:2223\", \"localhost:2224\"]\n";
  const std::string file = in.write("cluster.toml", plain + jobs);
  CliRun certs = run_actorflow({"certs", "--cluster", file, "--out", in.file("certs")});
  ASSERT_EQ(certs.code, 0) << certs.output;
  in.write("cluster.toml", plain + "tls_dir = \"certs\"\n" + jobs);
  CliRun run;
  const std::vector<json> objects = manifests({"--cluster", file, "--image", "af:3", "--namespace", "ml"}, out, &run);
  ASSERT_EQ(run.code, 0) << run.output;

  // Every private key `actorflow certs` wrote, by file name.
  std::map<std::string, std::string> keys;
  for (const std::string& f : files_in(in.file("certs"), ".key")) keys[f] = read_text(in.file("certs/" + f));
  ASSERT_EQ(keys.size(), 6u);  // ca, client, operator, ps-0, worker-0, worker-1

  std::set<std::string> tasks_seen;
  std::set<std::string> mounted;  // every Secret some pod mounts
  for (const json& o : objects) {
    if (o["kind"] != "StatefulSet") continue;
    const std::string sts = o["metadata"]["name"];
    SCOPED_TRACE(sts);
    const json& pod = o["spec"]["template"]["spec"];
    // One pod per template: a template shared by several tasks would give each the others' key.
    EXPECT_EQ(o["spec"]["replicas"], 1);
    const std::string cmd = pod["containers"][0]["command"].back();
    const size_t j = cmd.find("--job "), t = cmd.find(" --task ");
    ASSERT_TRUE(j != std::string::npos && t != std::string::npos) << cmd;
    const std::string job = cmd.substr(j + 6, t - j - 6);
    const std::string index = cmd.substr(t + 8, cmd.find_first_not_of("0123456789", t + 8) - (t + 8));
    // Without a fixed index the template serves several tasks; its Secret is judged as task 0's.
    EXPECT_FALSE(index.empty()) << "the pod's task index is not fixed in its template: " << cmd;
    const std::string i = index.empty() ? "0" : index;
    const std::string task = job + "/" + i, stem = job + "-" + i;
    EXPECT_TRUE(tasks_seen.insert(task).second) << task << " has two StatefulSets";

    const std::vector<std::string> secrets = mounted_secrets(pod);
    ASSERT_EQ(secrets.size(), 1u) << pod["volumes"].dump();
    mounted.insert(secrets[0]);
    const json* secret = find_object(objects, "Secret", secrets[0]);
    ASSERT_NE(secret, nullptr) << "no Secret " << secrets[0];
    std::map<std::string, std::string> data;
    for (auto& [k, v] : (*secret)["data"].items()) data[k] = base64_decode(v.get<std::string>());
    std::vector<std::string> names;
    for (const auto& [k, v] : data) names.push_back(k);
    EXPECT_EQ(names, (std::vector<std::string>{"ca.crt", "cluster.key", "metrics.token", stem + ".crt", stem + ".key"}));
    EXPECT_EQ(data["ca.crt"], read_text(in.file("certs/ca.crt")));
    EXPECT_EQ(data[stem + ".crt"], read_text(in.file("certs/" + stem + ".crt")));
    EXPECT_EQ(data[stem + ".key"], keys[stem + ".key"]);
    EXPECT_EQ(data["cluster.key"], kSecret);
    // By content too: no other private key under any name.
    for (const auto& [k, v] : data) {
      for (const auto& [kf, kv] : keys) {
        if (kf == stem + ".key") continue;
        EXPECT_TRUE(v != kv) << "the Secret " << secrets[0] << " of " << task << " holds " << kf << " as " << k;
      }
    }

    // What the pod sees (the ConfigMap's cluster file beside its Secret) loads, and the task's
    // TLS identity loads from it: the pod has everything it needs.
    const json* cm = find_object(objects, "ConfigMap", "cnn-cluster");
    ASSERT_NE(cm, nullptr);
    TempDir view;
    ASSERT_EQ(::mkdir(view.file("secret").c_str(), 0700), 0);
    for (const auto& [k, v] : data) {
      view.write("secret/" + k, v);
      ASSERT_EQ(::chmod(view.file("secret/" + k).c_str(), 0400), 0);
    }
    auto spec = ClusterSpec::from_file(view.write("cluster.toml", (*cm)["data"]["cluster.toml"].get<std::string>()));
    ASSERT_TRUE(spec.ok()) << spec.status().message();
    EXPECT_EQ(spec->secret(), ClusterSpec::from_file(file)->secret());
    auto tls = net::TlsContext::load(net::cluster_tls_files(spec->tls_dir(), task));
    ASSERT_TRUE(tls.ok()) << tls.status().message();
    // The pod's own address in the cluster file is its StatefulSet's pod behind the job's Service.
    auto addr = spec->task_address(TaskId{job, std::stoi(i)});
    ASSERT_TRUE(addr.ok());
    EXPECT_EQ(addr->substr(0, addr->find(':')), sts + "-0." + o["spec"]["serviceName"].get<std::string>() +
                                                    ".ml.svc.cluster.local");
  }
  EXPECT_EQ(tasks_seen, (std::set<std::string>{"ps/0", "worker/0", "worker/1"}));
  EXPECT_EQ(mounted.size(), 3u) << "each task's pod mounts a Secret of its own";

  // The tools' client certificate and key are in a Secret of their own that no pod mounts.
  const json* client = find_object(objects, "Secret", "cnn-client");
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(mounted.count("cnn-client"), 0u);
  EXPECT_TRUE(base64_decode((*client)["data"].value("client.key", "")) == keys["client.key"]);
  // No Secret anywhere holds the CA key or the operator key.
  for (const json& o : objects) {
    if (o["kind"] != "Secret") continue;
    for (auto& [k, v] : o["data"].items()) {
      for (const char* never : {"ca.key", "operator.key"})
        EXPECT_TRUE(base64_decode(v.get<std::string>()) != keys[never]) << o["metadata"]["name"] << " holds " << never;
    }
  }
}

// Secret files are created 0600 from the start: `actorflow k8s --out DIR`, run
// under umask 000 while DIR is watched with inotify, writes every Secret's file (they hold keys
// and the cluster secret) so that there is no moment at which another user could open it: at
// each event (IN_CREATE, IN_CLOSE_WRITE, IN_MOVED_TO) of every name the file had, its mode has no
// group or other bit, and its mode never changes after creation (no IN_ATTRIB), ending 0600; no
// temporary file is left behind; the other manifests and cluster.toml are 0644 as before. Run
// twice, the second time over the first's files. (Failed before: the file was opened and then
// fchmod-ed, a mode change a watcher cannot tell from a chmod after a world-readable creation.)
TEST(K8sTest, SecretFilesAreNeverReadableByOthersNotEvenWhileWritten) {
  TempDir in, out;
  const std::string file = write_cluster(in);
  ASSERT_EQ(::chmod(in.file("cluster.key").c_str(), 0600), 0);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    testing::DirWatch watch(out.path());
    ASSERT_TRUE(watch.ok());
    auto p = ChildProcess::start({"/bin/sh", "-c", "umask 000 && exec \"$0\" \"$@\"", binary("actorflow"), "k8s",
                                  "--cluster", file, "--image", "af:4", "--out", out.path()},
                                 {}, {});
    ASSERT_TRUE(p);
    auto code = p->await_exit(60s);
    watch.stop();
    ASSERT_TRUE(code.ok()) << code.status();
    ASSERT_EQ(*code, 0) << p->output();
    int secrets = 0;
    std::vector<std::string> names = files_in(out.path(), "");
    for (const std::string& n : names) {
      if (n == "." || n == "..") continue;
      SCOPED_TRACE(n);
      EXPECT_TRUE((n.size() > 5 && n.compare(n.size() - 5, 5, ".yaml") == 0) || n == "cluster.toml")
          << "a file left behind";
      const std::string text = read_text(out.file(n));
      if (text.find("\nkind: \"Secret\"\n") != std::string::npos) {
        ++secrets;
        EXPECT_TRUE(testing::private_from_creation(watch, out.path(), n));
        continue;
      }
      struct stat st {};
      ASSERT_EQ(::stat(out.file(n).c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 07777, 0644u);
    }
    EXPECT_EQ(secrets, 5) << "a Secret per task";
  }
}

// With TLS, `kubectl exec <task pod> -- actorflow status` cannot work (a task's pod holds only
// its task's key, and a task's certificate cannot speak as a tool): `actorflow k8s --tools` adds a
// Pod <name>-tools that idles with the tools' certificate. It mounts the ConfigMap's cluster file
// and the Secret <name>-tools (ca.crt, client.crt/.key, the secret file, the scrape token: what
// the cluster file names) and nothing else: no task's key by name or content, never the CA's or
// the operator's key; no task's pod mounts the tools' or the client Secret; what the tools pod
// sees loads as a cluster file whose TLS identity is the tools' ("client"). Without --tools there
// is no tools Pod.
TEST(K8sTest, AToolsPodMountsTheClientKeyAndNoTaskKey) {
  TempDir in, out, plain_out;
  in.write("cluster.key", kSecret);
  in.write("metrics.token", "0123456789abcdef0123456789abcdef\n");
  ASSERT_EQ(::chmod(in.file("metrics.token").c_str(), 0600), 0);
  ASSERT_EQ(::chmod(in.file("cluster.key").c_str(), 0600), 0);
  const std::string head = "[cluster]\nname = \"cnn\"\nsecret_file = \"cluster.key\"\n"
                           "metrics_token_file = \"metrics.token\"\n";
  const std::string jobs = "[jobs]\nps = [\"localhost:2222\"]\nworker = [\"localhost:2223\", \"localhost:2224\"]\n";
  const std::string file = in.write("cluster.toml", head + jobs);
  CliRun certs = run_actorflow({"certs", "--cluster", file, "--out", in.file("certs")});
  ASSERT_EQ(certs.code, 0) << certs.output;
  in.write("cluster.toml", head + "tls_dir = \"certs\"\n" + jobs);

  CliRun run;
  const std::vector<json> plain = manifests({"--cluster", file, "--image", "af:5"}, plain_out, &run);
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_EQ(find_object(plain, "Pod", "cnn-tools"), nullptr) << "a tools Pod without --tools";
  EXPECT_EQ(find_object(plain, "Secret", "cnn-tools"), nullptr);

  const std::vector<json> objects = manifests({"--cluster", file, "--image", "af:5", "--tools"}, out, &run);
  ASSERT_EQ(run.code, 0) << run.output;
  std::map<std::string, std::string> keys;  // every private key `actorflow certs` wrote
  for (const std::string& f : files_in(in.file("certs"), ".key")) keys[f] = read_text(in.file("certs/" + f));
  ASSERT_EQ(keys.size(), 6u);

  const json* pod = find_object(objects, "Pod", "cnn-tools");
  ASSERT_NE(pod, nullptr);
  const json& spec = (*pod)["spec"];
  const json& c = spec["containers"][0];
  EXPECT_EQ(c["image"], "af:5");
  EXPECT_EQ(c["command"], json({"/bin/sh", "-c", "exec sleep infinity"}));
  EXPECT_FALSE(c.contains("ports")) << "the tools pod serves nothing";
  EXPECT_EQ(mounted_secrets(spec), std::vector<std::string>{"cnn-tools"});
  std::set<std::string> config_maps;
  for (const json& v : spec["volumes"])
    if (v.contains("configMap")) config_maps.insert(v["configMap"]["name"].get<std::string>());
  EXPECT_EQ(config_maps, std::set<std::string>{"cnn-cluster"});
  std::map<std::string, std::string> mounts;  // volume -> mount path
  for (const json& m : c["volumeMounts"]) mounts[m["name"]] = m["mountPath"];
  EXPECT_EQ(mounts, (std::map<std::string, std::string>{{"cluster", "/etc/actorflow/cluster.toml"},
                                                        {"secret", "/etc/actorflow/secret"}}));

  const json* secret = find_object(objects, "Secret", "cnn-tools");
  ASSERT_NE(secret, nullptr);
  std::map<std::string, std::string> data;
  for (auto& [k, v] : (*secret)["data"].items()) data[k] = base64_decode(v.get<std::string>());
  std::vector<std::string> names;
  for (const auto& [k, v] : data) names.push_back(k);
  EXPECT_EQ(names, (std::vector<std::string>{"ca.crt", "client.crt", "client.key", "cluster.key", "metrics.token"}));
  EXPECT_TRUE(data["client.key"] == keys["client.key"]);
  for (const auto& [k, v] : data)
    for (const auto& [kf, kv] : keys)
      if (kf != "client.key") {
        EXPECT_TRUE(v != kv) << "the tools' Secret holds " << kf << " as " << k;
      }

  // No task's pod mounts the tools' or the client Secret; each mounts its own only.
  int sets = 0;
  for (const json& o : objects) {
    if (o["kind"] != "StatefulSet") continue;
    ++sets;
    const std::vector<std::string> m = mounted_secrets(o["spec"]["template"]["spec"]);
    EXPECT_EQ(m, std::vector<std::string>{o["metadata"]["name"].get<std::string>() + "-secret"});
  }
  EXPECT_EQ(sets, 3);

  // What the tools pod sees loads, and its TLS identity is the tools' certificate.
  const json* cm = find_object(objects, "ConfigMap", "cnn-cluster");
  ASSERT_NE(cm, nullptr);
  TempDir view;
  ASSERT_EQ(::mkdir(view.file("secret").c_str(), 0700), 0);
  for (const auto& [k, v] : data) {
    view.write("secret/" + k, v);
    ASSERT_EQ(::chmod(view.file("secret/" + k).c_str(), 0400), 0);
  }
  auto loaded = ClusterSpec::from_file(view.write("cluster.toml", (*cm)["data"]["cluster.toml"].get<std::string>()));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  auto tls = net::TlsContext::load(net::cluster_tls_files(loaded->tls_dir(), "client"));
  ASSERT_TRUE(tls.ok()) << tls.status().message();
  EXPECT_EQ((*tls)->identity(), "client");
}

TEST(K8sTest, BadInputExitsTwoNamingTheProblem) {
  TempDir in;
  const std::string file = write_cluster(in);
  struct Case {
    std::vector<std::string> args;
    std::string want;
  };
  const std::string missing = in.file("nope.toml");
  const std::string ports = in.write("ports.toml",
                                     "[cluster]\nsecret_file = \"cluster.key\"\n[jobs]\n"
                                     "worker = [\"localhost:2223\", \"localhost:2224\"]\n"
                                     "[tasks.\"worker/0\"]\nmetrics_port = 9100\n"
                                     "[tasks.\"worker/1\"]\nmetrics_port = 9101\n");
  const std::string tls = in.write("tls.toml",
                                   "[cluster]\ntls_dir = \"no-certs\"\n[jobs]\nworker = [\"localhost:2223\"]\n");
  const std::string plain = in.write("plain.toml", "[jobs]\nworker = [\"localhost:2223\"]\n");
  const std::string sparse = in.write("sparse.toml", "[cluster]\nsecret_file = \"cluster.key\"\n"
                                                     "[jobs]\nworker = { 0 = \"localhost:2223\", 2 = \"localhost:2224\" }\n");
  // A 45-character name: worker/0's StatefulSet "<name>-worker-0" has 54 characters.
  const std::string long_name = in.write(
      "long.toml", "[cluster]\nname = \"" + std::string(45, 'a') + "\"\nsecret_file = \"cluster.key\"\n[jobs]\n"
                   "worker = [\"localhost:2223\"]\n");
  const std::vector<Case> cases = {
      {{"k8s", "--cluster", file}, "--image IMAGE is required"},
      {{"k8s", "--cluster", missing, "--image", "i"}, "cannot open cluster file '" + missing + "'"},
      {{"k8s", "--cluster", ports, "--image", "i"},
       "tasks worker/0 and worker/1 have different metrics ports (9100 and 9101)"},
      {{"k8s", "--cluster", tls, "--image", "i"}, in.file("no-certs") + "/ca.crt"},
      {{"k8s", "--cluster", plain, "--image", "i"}, "neither a secret nor TLS"},
      {{"k8s", "--cluster", sparse, "--image", "i"}, "job 'worker' has no task 1"},
      {{"k8s", "--cluster", file, "--image", "i", "--namespace", "Bad_NS"}, "--namespace 'Bad_NS'"},
      {{"k8s", "--cluster", file, "--image", "i", "--program", "chief=x"}, "the cluster has no job 'chief'"},
      {{"k8s", "--cluster", long_name, "--image", "i"},
       "the StatefulSet name '" + std::string(45, 'a') + "-worker-0' of task worker/0 is 54 characters, more than 52"},
  };
  for (const Case& c : cases) {
    CliRun r = run_actorflow(c.args);
    EXPECT_EQ(r.code, 2) << c.want << "\n" << r.output;
    EXPECT_NE(r.output.find("actorflow k8s: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.want), std::string::npos) << "want: " << c.want << "\ngot: " << r.output;
  }
}

}  // namespace
}  // namespace actorflow
