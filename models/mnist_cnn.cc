#include "models/mnist_cnn.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "actorflow/graph.h"
#include "actorflow/monitored_session.h"
#include "actorflow/server.h"
#include "actorflow/session.h"
#include "core/logging.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "graph/ops.h"
#include "graph/ops_variables.h"
#include "graph/replica_device_setter.h"
#include "actorflow/train.h"

namespace actorflow {

Result<CnnModel> build_mnist_cnn(const Scope& root, const CnnOptions& o) {
  CnnModel m;
  // Variables round-robin over the parameter servers (tf.train.replica_device_setter), in the
  // order they are created: the global step first, then the layers' weights and biases.
  ReplicaDeviceSetter setter(o.num_ps, o.worker_device);
  Scope w = setter.for_ops(root);
  uint64_t seed = o.seed;
  auto weight = [&](const std::string& name, const Shape& shape) {
    return train::get_variable(setter.for_variable(root, shape, DType::kFloat32), name, shape, DType::kFloat32,
                               train::glorot_uniform_initializer(++seed));
  };
  auto bias = [&](const std::string& name, int64_t n) {
    return train::get_variable(setter.for_variable(root, Shape{n}, DType::kFloat32), name, Shape{n},
                               DType::kFloat32, train::zeros_initializer());
  };
  m.global_step = train::get_or_create_global_step(setter.for_variable(root, Shape{}, DType::kInt64));
  m.x = ops::placeholder(w, DType::kFloat32, Shape{-1, 784}, "x-input");
  m.labels = ops::placeholder(w, DType::kFloat32, Shape{-1, 10}, "y-input");
  auto x_image = ops::reshape(w, m.x, {-1, 28, 28, 1});
  auto conv = [&](const std::string& name, Output in, int64_t cin, int64_t cout) {
    auto k = weight(name + "/weights", Shape{5, 5, cin, cout});
    auto b = bias(name + "/biases", cout);
    Scope s = w.new_sub_scope(name);
    return ops::relu(s, ops::bias_add(s, ops::conv2d(s, in, k, {1, 1, 1, 1}, "SAME"), b));
  };
  auto pool = [&](const std::string& name, Output in) {
    return ops::max_pool(w.new_sub_scope(name), in, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  };
  const int64_t c1 = o.conv1_channels, c2 = o.conv2_channels;
  auto net = pool("pool1", conv("conv1", x_image, 1, c1));
  net = pool("pool2", conv("conv2", net, c1, c2));
  net = ops::reshape(w.new_sub_scope("flatten"), net, {-1, 7 * 7 * c2});
  {
    // The fully connected weight is 96 % of the model's bytes: one ps link carries it all unless
    // it is partitioned over the ps tasks (row shards, each on its own ps; the worker reads and
    // concatenates them, and each shard's gradient goes back to its own ps).
    Output k;
    if (o.partition_fc && o.num_ps > 1) {
      AF_ASSIGN_OR_RETURN(
          train::PartitionedVariable pv,
          train::get_partitioned_variable(root, "fully_connected/weights", Shape{7 * 7 * c2, o.hidden},
                                          train::fixed_size_partitioner(o.num_ps), DType::kFloat32,
                                          train::glorot_uniform_initializer(++seed), true, setter.shard_placement()));
      k = ops::concat(w.new_sub_scope("fully_connected"), pv.shards, 0);
    } else {
      k = weight("fully_connected/weights", Shape{7 * 7 * c2, o.hidden});
    }
    auto b = bias("fully_connected/biases", o.hidden);
    Scope s = w.new_sub_scope("fully_connected");
    net = ops::relu(s, ops::bias_add(s, ops::matmul(s, net, k), b));
  }
  {
    auto k = weight("pred/weights", Shape{o.hidden, 10});
    auto b = bias("pred/biases", 10);
    Scope s = w.new_sub_scope("pred");
    m.logits = ops::bias_add(s, ops::matmul(s, net, k), b);
  }
  auto xent = ops::softmax_cross_entropy_with_logits(w, m.logits, m.labels);
  if (!root.ok()) return root.status();
  m.loss = ops::reduce_mean(w.with_op_name("cross_entropy"), xent[0]);
  auto correct = ops::equal(w, ops::argmax(w, m.logits, 1), ops::argmax(w, m.labels, 1));
  m.accuracy = ops::reduce_mean(w.with_op_name("accuracy"), ops::cast(w, correct, DType::kFloat32));
  // As the seed: tf.train.AdamOptimizer(lr), wrapped in SyncReplicasOptimizer for --sync.
  const train::AdamOptimizer adam(o.learning_rate);
  if (o.sync) {
    train::SyncReplicasOptimizer sync(adam, o.replicas_to_aggregate, o.total_replicas, o.sync_timeout_secs,
                                      o.sync_deadline_secs);
    AF_ASSIGN_OR_RETURN(m.train_op, sync.minimize(w, m.loss, m.global_step));
    AF_ASSIGN_OR_RETURN(m.sync_finish_op, sync.finish_op(w));
    AF_ASSIGN_OR_RETURN(m.sync_stats, sync.accumulator_stats(w, m.global_step));
  } else {
    AF_ASSIGN_OR_RETURN(m.train_op, adam.minimize(w, m.loss, m.global_step));
  }
  AF_ASSIGN_OR_RETURN(m.init_op, train::global_variables_initializer(root));
  return m;
}

Result<CnnModel> import_mnist_cnn(const Scope& root, const CnnOptions& o) {
  if (o.sync || o.partition_fc)
    return InvalidArgument("an imported GraphDef (" + o.graph_def + ") trains as its graph says: no --sync or --partition-fc");
  const Scope w = o.worker_device.empty() ? root : root.with_device(o.worker_device);
  ImportGraphDefOptions io;
  io.drop_save_restore = true;
  AF_ASSIGN_OR_RETURN(ImportedGraph g, import_graph_def_file(w, o.graph_def, io));
  auto target = [&](const char* name) -> Result<Output> {
    Node* n = g.node(name);
    if (!n) return NotFound(o.graph_def + ": the model needs a node '" + name + "', which the GraphDef lacks");
    return Output(n, 0);
  };
  CnnModel m;
  AF_ASSIGN_OR_RETURN(m.x, g.output("x-input"));
  AF_ASSIGN_OR_RETURN(m.labels, g.output("y-input"));
  AF_ASSIGN_OR_RETURN(m.logits, g.output("logits"));
  AF_ASSIGN_OR_RETURN(m.loss, g.output("loss"));
  AF_ASSIGN_OR_RETURN(m.global_step, g.output("global_step"));
  AF_ASSIGN_OR_RETURN(m.train_op, target("train"));
  AF_ASSIGN_OR_RETURN(m.init_op, target("init"));
  auto correct = ops::equal(w, ops::argmax(w, m.logits, 1), ops::argmax(w, m.labels, 1));
  m.accuracy = ops::reduce_mean(w.with_op_name("accuracy"), ops::cast(w, correct, DType::kFloat32));
  if (!root.ok()) return root.status();
  return m;
}

Result<CnnTrainResult> train_mnist_cnn_worker(Server& server, const CnnOptions& mo, const CnnTrainOptions& o) {
  auto out = o.out ? o.out : [](const std::string& s) { std::printf("%s\n", s.c_str()); std::fflush(stdout); };
  AF_ASSIGN_OR_RETURN(MnistData data, load_mnist(o.data_dir));
  AF_ASSIGN_OR_RETURN(Tensor train_y, to_categorical(data.train_labels, 10));
  AF_ASSIGN_OR_RETURN(Tensor test_y, to_categorical(data.test_labels, 10));
  Scope root = Scope::root();
  AF_ASSIGN_OR_RETURN(CnnModel m, mo.graph_def.empty() ? build_mnist_cnn(root, mo) : import_mnist_cnn(root, mo));
  // An imported graph's placeholders have a fixed batch: training and evaluation feed that.
  const Shape& x_shape = m.x.node()->output_shapes.empty() ? Shape() : m.x.node()->output_shapes[0];
  const int64_t fixed_batch = !x_shape.unknown_rank() && x_shape.dims().size() == 2 ? x_shape.dims()[0] : -1;
  if (fixed_batch > 0 && fixed_batch != o.batch)
    return InvalidArgument(mo.graph_def + ": its x-input takes batches of " + std::to_string(fixed_batch) +
                           ", the training loop feeds " + std::to_string(o.batch));
  const std::string me = "worker/" + std::to_string(o.task_index);

  // tf.train.MonitoredTrainingSession(master, is_chief, checkpoint_dir, hooks=[StopAtStepHook]):
  // it initialises or restores the model, saves checkpoints and summaries, and recovers from a
  // lost parameter server or chief by itself.
  train::MonitoredTrainingSession::Options so;
  so.master = server.target();
  so.is_chief = o.is_chief;
  so.checkpoint_dir = o.logdir;
  so.save_checkpoint_secs = o.save_checkpoint_secs;
  so.keep_checkpoints = o.keep_checkpoints;
  so.tensorflow_checkpoints = o.tensorflow_checkpoints;
  so.ready_timeout_secs = o.ready_timeout_secs;
  so.task_name = me;
  so.init_op = m.init_op;
  if (o.step_timeout_secs > 0)
    so.session.timeout(std::chrono::milliseconds(static_cast<int64_t>(o.step_timeout_secs * 1000)));
  so.hooks.push_back(std::make_shared<train::StopAtStepHook>(0, o.steps));
  if (o.save_summaries_secs > 0 && !o.logdir.empty()) {
    // Scalars, and (tf.summary.histogram) every trainable variable and the logits as histograms.
    std::map<std::string, Output> histograms{{"logits", m.logits}};
    for (const Output& v : train::trainable_variables(root)) histograms[v.node()->name] = v;
    so.hooks.push_back(std::make_shared<train::SummarySaverHook>(
        0, o.save_summaries_secs, std::map<std::string, Output>{{"accuracy", m.accuracy}, {"loss", m.loss}},
        std::move(histograms)));
  }
  AF_ASSIGN_OR_RETURN(auto sess, train::MonitoredTrainingSession::create(root, so));

  auto ds = Dataset::from_tensors({data.train_images, train_y})
                .shuffle(Dataset::kFullBuffer, o.seed * 1000 + static_cast<uint64_t>(o.task_index))
                .repeat()
                .batch(o.batch);
  AF_ASSIGN_OR_RETURN(auto it, ds.make_iterator());
  Prefetcher batches(std::move(it), 4);
  CnnTrainResult res;
  int64_t step = 0;
  const auto t0 = std::chrono::steady_clock::now();
  Status loop_status;
  double worst_step_ms = 0;
  while (!sess->should_stop()) {
    auto batch = batches.next();
    if (!batch.ok() || !batch->has_value()) {
      loop_status = batch.ok() ? OutOfRange("the training data ended") : batch.status();
      break;
    }
    const auto& b = **batch;
    const auto run_t0 = std::chrono::steady_clock::now();
    auto r = sess->run({{m.x, b[0]}, {m.labels, b[1]}}, {m.accuracy, m.global_step}, {m.train_op});
    // The hooks' work (a chief's checkpoint or summary) counts: it holds this worker's training.
    worst_step_ms = std::max(worst_step_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - run_t0).count());
    if (!r.ok()) {
      // Synchronous training closed: fewer replicas than a step aggregates are left (the others
      // finished), so this step can never fill. Training is over for this worker too.
      if (r.status().code() == Code::kOutOfRange && m.sync_finish_op.valid()) {
        out(me + ": synchronous training ended (" + r.status().message() + ")");
        break;
      }
      loop_status = r.status();
      break;
    }
    ++res.local_steps;
    step = (*r)[1].data<int64_t>()[0];
    if (o.print_every > 0 && res.local_steps % o.print_every == 0) {
      char line[128];
      std::snprintf(line, sizeof line, "Worker : %d, Step: %lld, Accuracy (batch): %.2f", o.task_index,
                    static_cast<long long>(step), (*r)[0].data<float>()[0]);
      out(line);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.images_per_sec = secs > 0 ? res.local_steps * o.batch / secs : 0;
  batches.stop();
  Session& raw = sess->raw_session();
  if (loop_status.ok() && m.sync_finish_op.valid()) {
    // This replica leaves the synchronous group: once too few are left, the others' waiting
    // steps end at once instead of at their timeout.
    auto f = raw.run({}, {}, {m.sync_finish_op});
    if (!f.ok()) AF_LOG(WARNING) << me << ": leaving synchronous training: " << f.status();
  }
  if (!loop_status.ok()) {
    sess->supervisor().request_stop(loop_status);
    sess->close();
    return loop_status;
  }
  // Test accuracy in chunks (the whole test set at once would need ~1 GB of activations).
  const int64_t n = data.test_images.shape().dim(0);
  const int64_t chunk = fixed_batch > 0 ? fixed_batch : 1000;
  // A fixed batch evaluates whole batches only (the last n % batch test images are left out).
  const int64_t n_eval = fixed_batch > 0 ? n - n % fixed_batch : n;
  double correct = 0, loss = 0;
  for (int64_t s = 0; s < n_eval; s += chunk) {
    const int64_t len = std::min(chunk, n_eval - s);
    Tensor xs(DType::kFloat32, Shape{len, 784}), ys(DType::kFloat32, Shape{len, 10});
    std::memcpy(xs.raw_data(), data.test_images.data<float>() + s * 784, static_cast<size_t>(len) * 784 * 4);
    std::memcpy(ys.raw_data(), test_y.data<float>() + s * 10, static_cast<size_t>(len) * 10 * 4);
    // Recovered as a step is: a parameter server lost now is waited for (and restored).
    AF_ASSIGN_OR_RETURN(auto r, sess->run_without_hooks({{m.x, xs}, {m.labels, ys}}, {m.accuracy, m.loss}));
    correct += r[0].data<float>()[0] * static_cast<double>(len);
    loss += r[1].data<float>()[0] * static_cast<double>(len);
  }
  res.test_accuracy = correct / static_cast<double>(n_eval);
  res.test_loss = loss / static_cast<double>(n_eval);
  res.final_global_step = step;
  char line[64];
  std::snprintf(line, sizeof line, "Test-Accuracy: %.4f", res.test_accuracy);
  out(line);
  std::snprintf(line, sizeof line, "Test-Loss: %.4f", res.test_loss);
  out(line);
  // This worker's training throughput (local steps x batch / training seconds).
  std::snprintf(line, sizeof line, "Images-Per-Sec: %.1f", res.images_per_sec);
  out(line);
  // What the scenario suite checks "no acknowledged update lost" with: the global step, read after
  // this worker's own training ended, against the workers' acknowledged steps.
  std::snprintf(line, sizeof line, "Local-Steps: %lld", static_cast<long long>(res.local_steps));
  out(line);
  // The longest training run of this worker, hooks included (a stalled step shows here).
  std::snprintf(line, sizeof line, "Worst-Step-Ms: %.1f", worst_step_ms);
  out(line);
  AF_ASSIGN_OR_RETURN(auto gs, sess->run_without_hooks({}, {m.global_step}));
  std::snprintf(line, sizeof line, "Global-Step: %lld", static_cast<long long>(gs[0].data<int64_t>()[0]));
  out(line);
  if (m.sync_stats.valid()) {
    // The job's synchronous steps as the global step's accumulator counted them (read after this
    // worker's training): replica step gradients dropped as stale, steps closed short at the
    // sync deadline.
    // sync: informational; a failed read is logged, not the worker's failure.
    auto st = sess->run_without_hooks({}, {m.sync_stats});
    if (!st.ok() || (*st)[0].num_elements() < 7) {
      AF_LOG(WARNING) << me << ": no synchronous training counts: "
                      << (st.ok() ? std::string("the accumulator's stats are too short") : st.status().message());
    } else {
      res.stale_gradients = (*st)[0].data<int64_t>()[2];
      res.short_steps = (*st)[0].data<int64_t>()[6];
      std::snprintf(line, sizeof line, "Stale-Gradients: %lld", static_cast<long long>(res.stale_gradients));
      out(line);
      std::snprintf(line, sizeof line, "Short-Steps: %lld", static_cast<long long>(res.short_steps));
      out(line);
    }
  }
  AF_RETURN_IF_ERROR(sess->close());
  return res;
}

}  // namespace actorflow
