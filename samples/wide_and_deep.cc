// A wide & deep click model whose embedding tables are too big to move whole:
// a 1M x 64 embedding table and a 1M x 1 wide table, each partitioned over the ps tasks
// (train::get_partitioned_variable, fixed_size_partitioner(num_ps), placed round robin), looked
// up with embedding_lookup's "mod" strategy (each id goes only to the shard that owns it) and
// trained with sparse Adagrad updates on the ps (only the rows a batch touched travel and change).
//
//   actorflow up --cluster F -- build/samples/wide_and_deep [--steps 3000] [--sync]
//   build/samples/wide_and_deep --cluster F --job ps|worker --task I ...
//
// The data is synthetic, drawn from a known generating model, so the best achievable loss is
// known: each example has 4 categorical ids; with probability 1/2 an id is one of 10 000 "signal"
// ids (spread over the whole id space), each with a true weight t ~ N(0, 1), otherwise a uniform
// id of the vocabulary with no effect. The label is 1 with probability sigmoid(-0.5 + sum of the
// example's true weights). The Bayes loss (the model that knows t) is the mean binary entropy of
// those probabilities on the evaluation set. Workers print
//   Worker : 0, Step: 400, Loss (batch): 0.62
// and end with
//   Eval-Loss: 0.5021 Bayes-Loss: 0.4870 Gap: 0.0151
//   Bytes per worker step: 0.55 MB of rows, ids and gradients (dense tables: 520.00 MB)
#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <random>
#include <unordered_map>

#include "actorflow/actorflow.h"
#include "actorflow/cluster_options.h"  // [supervisor] options
#include "core/crash_trace.h"

namespace af = actorflow;
namespace train = actorflow::train;

namespace {

// The generating model: which ids carry signal and their true weights. The same in every
// process (seeded by --data-seed).
struct Truth {
  int64_t vocab = 0;
  std::unordered_map<int64_t, float> weight;  // signal id -> t
  std::vector<int64_t> signal;                // the signal ids
  static constexpr float kBias = -0.5f;
};

Truth make_truth(int64_t vocab, int64_t signal_ids, uint64_t seed) {
  Truth t;
  t.vocab = vocab;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int64_t> any(0, vocab - 1);
  while (static_cast<int64_t>(t.signal.size()) < signal_ids) {
    const int64_t id = any(rng);
    if (t.weight.emplace(id, normal(rng)).second) t.signal.push_back(id);
  }
  return t;
}

// `n` examples of `k` ids: ids [n, k] int64, labels [n] int64, and each example's true
// probability of a 1.
struct Batch {
  af::Tensor ids, labels;
  std::vector<double> p;
};

Batch draw(const Truth& truth, int64_t n, int k, std::mt19937_64& rng) {
  Batch b{af::Tensor(af::DType::kInt64, af::Shape{n, k}), af::Tensor(af::DType::kInt64, af::Shape{n}), {}};
  std::uniform_int_distribution<size_t> sig(0, truth.signal.size() - 1);
  std::uniform_int_distribution<int64_t> any(0, truth.vocab - 1);
  std::uniform_real_distribution<double> u(0, 1);
  int64_t* ids = b.ids.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    double logit = Truth::kBias;
    for (int j = 0; j < k; ++j) {
      const int64_t id = u(rng) < 0.5 ? truth.signal[sig(rng)] : any(rng);
      ids[i * k + j] = id;
      auto w = truth.weight.find(id);
      if (w != truth.weight.end()) logit += w->second;
    }
    const double p = 1.0 / (1.0 + std::exp(-logit));
    b.p.push_back(p);
    b.labels.data<int64_t>()[i] = u(rng) < p ? 1 : 0;
  }
  return b;
}

double entropy(double p) {
  const double e = 1e-12;
  return -(p * std::log(std::max(p, e)) + (1 - p) * std::log(std::max(1 - p, e)));
}

struct Model {
  af::Output ids, labels, loss, global_step, train_op, init_op, sync_finish;
};

af::Result<Model> build(af::Scope root, int num_ps, const std::string& worker_device, int64_t vocab, int64_t dim,
                        int k, float lr, bool sync, int replicas, int total, uint64_t seed) {
  Model m;
  af::ReplicaDeviceSetter setter(num_ps, worker_device);
  af::Scope w = setter.for_ops(root);
  m.global_step = train::get_or_create_global_step(setter.for_variable(root, af::Shape{}, af::DType::kInt64));
  const auto shards = train::fixed_size_partitioner(std::max(1, num_ps));
  AF_ASSIGN_OR_RETURN(auto deep, train::get_partitioned_variable(root, "deep/embeddings", af::Shape{vocab, dim}, shards,
                                                                 af::DType::kFloat32,
                                                                 train::random_uniform_initializer(-0.05f, 0.05f, seed),
                                                                 true, setter.shard_placement()));
  AF_ASSIGN_OR_RETURN(auto wide, train::get_partitioned_variable(root, "wide/weights", af::Shape{vocab, 1}, shards,
                                                                 af::DType::kFloat32, train::zeros_initializer(), true,
                                                                 setter.shard_placement()));
  const int64_t hidden = 32;
  auto w1 = train::get_variable(setter.for_variable(root, af::Shape{dim, hidden}, af::DType::kFloat32), "deep/w1",
                                af::Shape{dim, hidden}, af::DType::kFloat32, train::glorot_uniform_initializer(seed + 1));
  auto b1 = train::get_variable(setter.for_variable(root, af::Shape{hidden}, af::DType::kFloat32), "deep/b1",
                                af::Shape{hidden}, af::DType::kFloat32, train::zeros_initializer());
  auto w2 = train::get_variable(setter.for_variable(root, af::Shape{hidden, 1}, af::DType::kFloat32), "deep/w2",
                                af::Shape{hidden, 1}, af::DType::kFloat32, train::glorot_uniform_initializer(seed + 2));
  auto b2 = train::get_variable(setter.for_variable(root, af::Shape{1}, af::DType::kFloat32), "bias", af::Shape{1},
                                af::DType::kFloat32, train::zeros_initializer());
  m.ids = af::ops::placeholder(w, af::DType::kInt64, af::Shape{-1, k}, "ids");
  m.labels = af::ops::placeholder(w, af::DType::kInt64, af::Shape{-1}, "labels");
  // Deep: the mean of the ids' embeddings through a ReLU layer. Wide: the sum of their weights.
  af::Scope ds = w.new_sub_scope("deep");
  auto e = af::ops::reduce_mean(ds, train::embedding_lookup(ds, deep, m.ids, "mod"), {1});
  auto h = af::ops::relu(ds, af::ops::bias_add(ds, af::ops::matmul(ds, e, w1), b1));
  auto deep_logit = af::ops::matmul(ds, h, w2);  // [n, 1]
  af::Scope ws = w.new_sub_scope("wide");
  auto wide_logit = af::ops::reduce_sum(ws, train::embedding_lookup(ws, wide, m.ids, "mod"), {1});  // [n, 1]
  auto logit = af::ops::add(w, af::ops::add(w, deep_logit, wide_logit), b2);
  // Binary cross-entropy as a two-class softmax over (0, logit).
  auto two = af::ops::concat(w, {af::ops::zeros_like(w, logit), logit}, 1);
  auto xent = af::ops::sparse_softmax_cross_entropy_with_logits(w, two, m.labels);
  if (!root.ok()) return root.status();
  m.loss = af::ops::reduce_mean(w.with_op_name("loss"), xent[0]);
  const train::AdagradOptimizer adagrad(lr);
  if (sync) {
    train::SyncReplicasOptimizer opt(adagrad, replicas, total, 60);
    AF_ASSIGN_OR_RETURN(m.train_op, opt.minimize(w, m.loss, m.global_step));
    AF_ASSIGN_OR_RETURN(m.sync_finish, opt.finish_op(w));
  } else {
    AF_ASSIGN_OR_RETURN(m.train_op, adagrad.minimize(w, m.loss, m.global_step));
  }
  AF_ASSIGN_OR_RETURN(m.init_op, train::global_variables_initializer(root));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wide & deep on a 1M-row embedding partitioned over the parameter servers"};
  std::string cluster_file, job;
  int task = 0, print_every = 100, batch = 256, k = 4;
  int64_t steps = 3000, vocab = 1000000, dim = 64, signal = 10000, eval_n = 20000;
  float lr = 0.5f;
  bool sync = false;
  uint64_t seed = 1, data_seed = 7;
  app.add_option("--cluster", cluster_file, "cluster file (TOML)")->required();
  app.add_option("--job", job, "ps or worker")->required();
  app.add_option("--task", task, "task index");
  app.add_option("--steps", steps, "global steps to train")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--batch", batch, "examples per step")->check(CLI::Range(1, 1 << 20));
  app.add_option("--vocab", vocab, "rows of the embedding tables")->check(CLI::Range(int64_t{2}, int64_t{1} << 31));
  app.add_option("--dim", dim, "embedding width")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_option("--signal-ids", signal, "ids with a true effect")->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  app.add_option("--eval-examples", eval_n, "held-out examples")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--learning-rate", lr, "Adagrad learning rate")->check(CLI::PositiveNumber);
  app.add_flag("--sync", sync, "synchronous replicas (sparse gradients aggregated by index)");
  app.add_option("--print-every", print_every, "progress line every N local steps");
  app.add_option("--seed", seed, "initializer and data seed of this run");
  app.add_option("--data-seed", data_seed, "seed of the generating model (the same in every task)");
  CLI11_PARSE(app, argc, argv);
  if (signal > vocab) {
    std::cerr << "wide_and_deep: --signal-ids " << signal << " exceeds --vocab " << vocab << "\n";
    return 2;
  }
  auto cluster = af::ClusterSpec::from_file(cluster_file);
  if (!cluster.ok()) {
    std::cerr << "wide_and_deep: " << cluster.status().message() << "\n";
    return 2;
  }
  af::TaskId me{job, task};
  if (af::Status v = cluster->validate_task(me); !v.ok()) {
    std::cerr << "wide_and_deep: " << v.message() << "\n";
    return 2;
  }
  if (job == "ps") {  // server.join(): serve until SIGINT/SIGTERM
    af::Status st = af::serve_until_signal(*cluster, me);
    if (!st.ok()) std::cerr << "wide_and_deep: " << st.message() << "\n";
    return st.ok() ? 0 : 1;
  }
  auto server = af::Server::create(*cluster, me);
  if (!server.ok()) {
    std::cerr << "wide_and_deep: " << server.status().message() << "\n";
    return 1;
  }
  // A crash: this task and the crashing thread's stack on stderr (core/crash_trace.h).
  if (af::Status st = af::install_crash_backtrace(me.device_prefix()); !st.ok())
    std::cerr << "wide_and_deep: no backtrace on a crash: " << st.message() << "\n";
  const int workers = cluster->num_tasks("worker"), num_ps = cluster->num_tasks("ps");
  const std::string who = "worker/" + std::to_string(task);
  auto run = [&]() -> af::Status {
    af::Scope root = af::Scope::root();
    AF_ASSIGN_OR_RETURN(Model m, build(root, num_ps, "/job:worker/task:" + std::to_string(task), vocab, dim, k, lr, sync,
                                       workers, workers, seed));
    train::MonitoredTrainingSession::Options so;
    so.master = (*server)->target();
    so.is_chief = cluster->supervisor().chief == me;
    so.ready_timeout_secs = std::max(120.0, cluster->supervisor().ready_timeout_secs);
    so.task_name = who;
    so.init_op = m.init_op;
    so.hooks.push_back(std::make_shared<train::StopAtStepHook>(0, steps));
    AF_ASSIGN_OR_RETURN(auto sess, train::MonitoredTrainingSession::create(root, so));
    const Truth truth = make_truth(vocab, signal, data_seed);
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(task));
    int64_t local = 0;
    while (!sess->should_stop()) {
      Batch b = draw(truth, batch, k, rng);
      auto r = sess->run({{m.ids, b.ids}, {m.labels, b.labels}}, {m.loss, m.global_step}, {m.train_op});
      if (!r.ok()) {
        if (r.status().code() == af::Code::kOutOfRange && m.sync_finish.valid()) break;  // the group closed
        return r.status();
      }
      if (print_every > 0 && ++local % print_every == 0)
        std::printf("Worker : %d, Step: %lld, Loss (batch): %.3f\n", task,
                    static_cast<long long>((*r)[1].data<int64_t>()[0]), (*r)[0].data<float>()[0]);
      std::fflush(stdout);
    }
    af::Session& raw = sess->raw_session();
    if (m.sync_finish.valid()) (void)raw.run({}, {}, {m.sync_finish});
    // The held-out set is the same for every worker; its Bayes loss is the mean entropy of the
    // true probabilities.
    std::mt19937_64 eval_rng(data_seed * 7919 + 1);
    Batch ev = draw(truth, eval_n, k, eval_rng);
    double bayes = 0;
    for (double p : ev.p) bayes += entropy(p);
    bayes /= static_cast<double>(eval_n);
    AF_ASSIGN_OR_RETURN(auto r, raw.run({{m.ids, ev.ids}, {m.labels, ev.labels}}, {m.loss}));
    const double loss = r[0].data<float>()[0];
    std::printf("Eval-Loss: %.4f Bayes-Loss: %.4f Gap: %.4f\n", loss, bayes, loss - bayes);
    // What crosses between a worker and the ps per step: each id once to its shard (int64),
    // its deep and wide rows back (float32), and the sparse gradient's indices and rows up.
    const double n = static_cast<double>(batch) * k;
    const double sparse = n * 8 + n * (dim + 1) * 4 + n * 8 * 2 + n * (dim + 1) * 4;
    const double dense = 2.0 * static_cast<double>(vocab) * static_cast<double>(dim + 1) * 4;
    std::printf("Bytes per worker step: %.2f MB of rows, ids and gradients (dense tables: %.2f MB)\n", sparse / 1e6,
                dense / 1e6);
    std::fflush(stdout);
    return sess->close();
  };
  af::Status st = run();
  if (!st.ok()) std::cerr << "wide_and_deep: " << who << ": " << st << "\n";
  af::destroy_server_bounded(std::move(*server), std::chrono::seconds(10), st.ok() ? 0 : 1, st.ok() ? 0 : 1);
  return st.ok() ? 0 : 1;
}
