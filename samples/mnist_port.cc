// Seed 002 (distribute_mnist_cnn.py) as a TensorFlow 1.x user ports it, part for part: seed-style
// flags, layers for TF-Slim's, a device function for replica_device_setter, and the cluster
// file's [supervisor] for tf.train.Supervisor (docs/porting.md measures it against the Python).
//   build/samples/mnist_port --cluster cluster.toml --job ps --task 0
//   build/samples/mnist_port --cluster cluster.toml --job worker --task 0 [--steps 5000] [--data DIR]
// or seed 002's --ps_hosts=h:p --worker_hosts=h:p,h:p --job_name=worker --task_index=0, or
// TF_CONFIG; under `actorflow up --cluster F -- build/samples/mnist_port`. Exit 2 on bad
// arguments, 1 when training fails.
#include <cstdlib>
#include <iostream>

#include "actorflow/actorflow.h"

namespace af = actorflow;
using af::ops::relu;

// 2. The CNN, as the seed's TF-Slim net(x): conv2d is SAME with relu, max_pool2d 2x2 stride 2.
af::Output net(const af::Scope& s, af::Output x) {
  auto n = af::ops::reshape(s, x, {-1, 28, 28, 1});
  n = af::layers::conv2d(s, n, 32, {5, 5}, {1, 1}, "same", relu);
  n = af::layers::max_pooling2d(s, n, {2, 2}, {2, 2});
  n = af::layers::conv2d(s, n, 64, {5, 5}, {1, 1}, "same", relu);
  n = af::layers::max_pooling2d(s, n, {2, 2}, {2, 2});
  n = af::layers::flatten(s, n);
  n = af::layers::dense(s, n, 500, relu);
  return af::layers::dense(s, n, 10);
}

int fail(const std::string& what, const af::Status& st, int code) {
  std::cerr << "mnist_port: " << what << ": " << st << "\n";
  return code;
}

int main(int argc, char** argv) {
  // 1. Cluster and flags.
  auto ct = af::cluster_task_from_args(argc, argv);
  if (!ct.ok()) return fail("arguments", ct.status(), 2);
  int64_t steps = 5000;
  std::string data = "/usr/share/datasets/fashion-mnist";
  for (size_t i = 0; i < ct->rest.size(); i += 2) {
    const std::string& flag = ct->rest[i];
    const char* value = i + 1 < ct->rest.size() ? ct->rest[i + 1].c_str() : nullptr;
    char* end = nullptr;
    if (flag == "--data" && value) data = value;
    else if (flag == "--steps" && value && (steps = std::strtoll(value, &end, 10)) > 0 && *end == '\0') continue;
    else return fail("arguments", af::InvalidArgument("unknown flag or bad value: " + flag), 2);
  }
  if (ct->task.job == "ps") {  // server.join()
    af::Status st = af::serve_until_signal(ct->cluster, ct->task);
    return st.ok() ? 0 : fail("ps", st, 1);
  }

  // 0. MNIST.
  auto mnist = af::load_mnist(data);
  if (!mnist.ok()) return fail("data", mnist.status(), 2);
  auto train_y = af::to_categorical(mnist->train_labels, 10), test_y = af::to_categorical(mnist->test_labels, 10);
  if (!train_y.ok() || !test_y.ok()) return fail("labels", train_y.ok() ? test_y.status() : train_y.status(), 2);
  // Each worker its own order (the seed's unseeded shuffle differs per process).
  const int task_index = ct->task.index;
  auto batches = af::Dataset::from_tensors({mnist->train_images, *train_y}).shuffle(100000, task_index + 1);
  auto next_batch = batches.repeat().batch(50).make_iterator();
  if (!next_batch.ok()) return fail("dataset", next_batch.status(), 1);

  // 3. The model under replica_device_setter.
  af::ReplicaDeviceSetter setter(ct->cluster.num_tasks("ps"), "/job:worker/task:" + std::to_string(task_index));
  af::Scope root = af::Scope::root().with_device_function(setter.device_function());
  auto global_step = af::train::get_variable(root, "global_step", {}, af::DType::kFloat32,
                                             af::train::constant_initializer(0), false);
  auto x = af::ops::placeholder(root, af::DType::kFloat32, {-1, 784}, "x-input");
  auto y_ = af::ops::placeholder(root, af::DType::kFloat32, {-1, 10}, "y-input");
  auto y = net(root, x);
  auto cross_entropy = af::ops::reduce_mean(root, af::nn::softmax_cross_entropy_with_logits(root, y_, y));
  auto train_step = af::train::AdamOptimizer(1e-4f).minimize(root, cross_entropy, global_step);
  auto correct_prediction = af::ops::equal(root, af::ops::argmax(root, y, 1), af::ops::argmax(root, y_, 1));
  auto accuracy = af::ops::reduce_mean(root, af::ops::cast(root, correct_prediction, af::DType::kFloat32));
  if (!train_step.ok()) return fail("model", train_step.status(), 1);

  // tf.train.Supervisor(is_chief, logdir, ...) and managed_session(server.target), from the
  // cluster file's [supervisor].
  auto server = af::Server::create(ct->cluster, ct->task);
  if (!server.ok()) return fail("server", server.status(), 1);
  auto options = af::train::MonitoredTrainingSession::Options::for_task(ct->cluster, ct->task);
  auto sess = options.ok() ? af::train::MonitoredTrainingSession::create(root, *options)
                           : af::Result<std::unique_ptr<af::train::MonitoredTrainingSession>>(options.status());
  af::Status status = sess.ok() ? af::Status() : sess.status();
  float step = 0;
  while (status.ok() && !(*sess)->should_stop() && step <= static_cast<float>(steps)) {
    auto batch = next_batch->next();
    if (!batch.ok() || !*batch) break;
    auto r = (*sess)->run({{x, (**batch)[0]}, {y_, (**batch)[1]}}, {accuracy, global_step}, {*train_step});
    if (!r.ok()) status = r.status();
    if (!r.ok()) break;
    step = *(*r)[1].data<float>();
    if (static_cast<int64_t>(step) % 100 == 0)
      std::cout << "Worker : " << task_index << ", Step: " << step << ", Accuracy (batch): " << *(*r)[0].data<float>()
                << std::endl;
  }
  if (status.ok()) {
    auto test = (*sess)->run_without_hooks({{x, mnist->test_images}, {y_, *test_y}}, {accuracy});
    if (test.ok()) std::cout << "Test-Accuracy: " << *(*test)[0].data<float>() << std::endl;
    status = test.ok() ? (*sess)->close() : test.status();
  }
  if (!status.ok()) fail("worker " + std::to_string(task_index), status, 1);
  if (sess.ok()) sess->reset();
  af::destroy_server_bounded(std::move(*server), std::chrono::seconds(10), 1, status.ok() ? 0 : 1);
  return status.ok() ? 0 : 1;
}
