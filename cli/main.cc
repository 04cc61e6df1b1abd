// The actorflow command line. See `actorflow --help`.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"actorflow: distributed TensorFlow 1.x on actors"};
  app.require_subcommand(1);
  auto* demo = app.add_subcommand("demo", "run the main job on an embedded local cluster");
  actorflow::cli::DemoOptions demo_opts;
  demo->add_option("--steps", demo_opts.steps, "global training steps");
  demo->add_option("--workers", demo_opts.workers, "number of worker tasks (1..3)");
  demo->add_option("--learning-rate", demo_opts.learning_rate, "Adam learning rate");
  demo->add_option("--data", demo_opts.data_dir, "directory with MNIST-format IDX files");
  auto* node = app.add_subcommand("node", "start one task's server and block until SIGINT/SIGTERM");
  actorflow::cli::NodeOptions node_opts;
  node->add_option("--cluster", node_opts.cluster, "cluster file (TOML)")->required();
  node->add_option("--job", node_opts.job, "job name, e.g. worker")->required();
  node->add_option("--task", node_opts.task, "task index within the job")->required();
  node->add_option("--plan", node_opts.plan, "fault plan (TOML) to load for this task once it serves");
  auto* status = app.add_subcommand(
      "status", "show every task of a cluster: role, up or down, devices, and (with metrics_port) step, rates, CPU, RSS");
  actorflow::cli::StatusOptions status_opts;
  status->add_option("--cluster", status_opts.cluster, "cluster file (TOML)")->required();
  status->add_option("--timeout-ms", status_opts.timeout_ms, "how long to try each task")->check(CLI::Range(1, 3600000));
  status->add_flag("--json", status_opts.json, "one JSON document (per redraw with --watch) instead of the table");
  status->add_flag("--watch", status_opts.watch, "redraw in place every interval until Ctrl-C");
  status->add_flag("--waits", status_opts.waits,
                   "per task, what it waits for, on which task, since when; and where the waits end");
  status->add_flag("--dump", status_opts.dump,
                   "each task's hang report: its waits, threads and what its actors report");
  status->add_option("--min-age-ms", status_opts.min_age_ms, "with --waits: only waits at least this old")
      ->check(CLI::Range(0, 86400000));
  status->add_option("--interval-ms", status_opts.interval_ms, "between the scrapes a rate needs, and between redraws")
      ->check(CLI::Range(10, 3600000));
  auto* dash = app.add_subcommand(
      "dashboard", "serve a live page of a cluster: tasks, training curves, CPU and network charts, events");
  actorflow::cli::DashboardOptions dash_opts;
  dash->add_option("--cluster", dash_opts.cluster, "cluster file (TOML)")->required();
  dash->add_option("--port", dash_opts.port, "port of the page (default 8088; 0 = any free port, printed)");
  dash->add_option("--bind", dash_opts.bind,
                   "address to serve on (default 127.0.0.1; elsewhere the page needs a login with the dashboard's own token)");
  dash->add_option("--token-file", dash_opts.token_file,
                   "off loopback: write the dashboard's login token to this file (mode 0600) instead of printing it");
  dash->add_option("--interval-ms", dash_opts.interval_ms, "between polls of the cluster (default 1000)");
  dash->add_option("--timeout-ms", dash_opts.timeout_ms, "how long to try each task per poll")->check(CLI::Range(1, 3600000));
  dash->add_option("--chart-js", dash_opts.chart_js, "Chart.js file (default: the Debian package libjs-chart.js's)");
  dash->footer("Exit status: 0 after Ctrl-C/SIGTERM; 2 bad options or cluster file, port in use, Chart.js missing.");
  auto* up = app.add_subcommand("up", "start every task of this host as a child process and restart failures");
  actorflow::cli::UpOptions up_opts;
  up->add_option("--cluster", up_opts.cluster, "cluster file (TOML)")->required();
  up->add_option("--plan", up_opts.plan, "fault plan (TOML) passed to each task's first start");
  up->add_option("program", up_opts.program, "program run once per task with --cluster/--job/--task appended "
                                             "(after --)");
  auto* chaos = app.add_subcommand("chaos", "apply a seeded fault plan to every task of a running cluster");
  actorflow::cli::ChaosOptions chaos_opts;
  chaos->add_option("--cluster", chaos_opts.cluster, "cluster file (TOML)")->required();
  chaos->add_option("--plan", chaos_opts.plan, "fault plan (TOML)");
  chaos->add_flag("--clear", chaos_opts.clear, "remove every injected fault instead");
  chaos->add_option("--timeout-ms", chaos_opts.timeout_ms, "how long to try each task");
  auto* certs = app.add_subcommand("certs", "create a cluster CA and a TLS certificate and key for every task");
  actorflow::cli::CertsOptions certs_opts;
  certs->add_option("--cluster", certs_opts.cluster, "cluster file (TOML)")->required();
  certs->add_option("--out", certs_opts.out, "directory to write ca.crt, ca.key and <job>-<task>.crt/.key")->required();
  certs->add_flag("--force", certs_opts.force, "replace existing files");
  auto* k8s = app.add_subcommand("k8s", "print Kubernetes manifests (a StatefulSet and a Secret per task, headless "
                                       "Services, ConfigMap) that run the cluster; see docs/kubernetes.md");
  actorflow::cli::K8sOptions k8s_opts;
  k8s->add_option("--cluster", k8s_opts.cluster, "cluster file (TOML)")->required();
  k8s->add_option("--image", k8s_opts.image, "container image with actorflow on PATH (deploy/Dockerfile)");
  k8s->add_option("--namespace", k8s_opts.ns, "namespace of every object (default: default)");
  k8s->add_option("--out", k8s_opts.out, "write one file per object and cluster.toml into DIR instead of stdout");
  k8s->add_option("--format", k8s_opts.format, "yaml (documents separated by ---) or json (one v1 List)");
  k8s->add_option("--program", k8s_opts.programs,
                  "JOB=COMMAND: that job's pods run COMMAND --cluster F --job JOB --task N (e.g. "
                  "worker=distributed_cnn) instead of actorflow node; repeatable");
  k8s->add_flag("--no-secret", k8s_opts.no_secret, "emit no Secret: create each <name>-<job>-<i>-secret yourself");
  k8s->add_flag("--tools", k8s_opts.tools,
                "also a Pod <name>-tools with the tools' key (Secret <name>-tools) for kubectl exec <name>-tools -- "
                "actorflow status --cluster /etc/actorflow/cluster.toml");
  k8s->footer("Exit status: 0 ok; 2 bad options, cluster file or missing secret/TLS files; 1 --out not writable.");
  auto* ckpt = app.add_subcommand("ckpt", "inspect and convert checkpoints (list a directory, show one, convert to/from TensorFlow's format)");
  ckpt->require_subcommand(1);
  actorflow::cli::CkptOptions ckpt_opts;
  auto* ckpt_list = ckpt->add_subcommand(
      "list", "the checkpoints of DIR, newest first: global step, variables, bytes, checksum ok/BAD");
  ckpt_list->add_option("dir", ckpt_opts.path, "checkpoint directory")->required();
  ckpt_list->add_option("--prefix", ckpt_opts.prefix, "checkpoint file name prefix (files PREFIX-<step>)");
  ckpt_list->add_flag("--json", ckpt_opts.json, "print one JSON document instead of a table");
  auto* ckpt_show = ckpt->add_subcommand(
      "show", "one checkpoint: global step, checksum, each variable's dtype, shape and values or min/max/mean");
  ckpt_show->add_option("file", ckpt_opts.path, "checkpoint file, e.g. logs/model.ckpt-300")->required();
  ckpt_show->add_flag("--json", ckpt_opts.json, "print one JSON document instead of text");
  auto* ckpt_convert = ckpt->add_subcommand(
      "convert", "rewrite a checkpoint in the other format: actorflow's file <-> TensorFlow's V2 checkpoint");
  ckpt_convert->add_option("src", ckpt_opts.path, "checkpoint to read (either format)")->required();
  ckpt_convert->add_option("dst", ckpt_opts.out, "checkpoint to write (a TensorFlow checkpoint's prefix)")->required();
  ckpt_convert->add_option("--to", ckpt_opts.to, "tensorflow or actorflow (default: the format src is not in)");
  ckpt->footer("Exit status: 0 ok; 1 a checkpoint is corrupt, truncated or not a checkpoint (or DIR has none);\n"
               "2 the path does not exist or is the wrong kind of file.");
  CLI11_PARSE(app, argc, argv);
  if (ckpt_list->parsed()) return actorflow::cli::run_ckpt_list(ckpt_opts);
  if (ckpt_show->parsed()) return actorflow::cli::run_ckpt_show(ckpt_opts);
  if (ckpt_convert->parsed()) return actorflow::cli::run_ckpt_convert(ckpt_opts);
  if (k8s->parsed()) return actorflow::cli::run_k8s(k8s_opts);
  if (certs->parsed()) return actorflow::cli::run_certs(certs_opts);
  if (up->parsed()) return actorflow::cli::run_up(up_opts);
  if (demo->parsed()) return actorflow::cli::run_demo(demo_opts);
  if (node->parsed()) return actorflow::cli::run_node(node_opts);
  if (status->parsed()) return actorflow::cli::run_status(status_opts);
  if (dash->parsed()) return actorflow::cli::run_dashboard(dash_opts);
  if (chaos->parsed()) return actorflow::cli::run_chaos(chaos_opts);
  return 2;
}
