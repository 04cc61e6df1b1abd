// Seed 003's "one neural network per device": the same MLP (784-128-10) on every CPU device of a
// local server, each with its own learning rate, trained side by side in one session on
// Fashion-MNIST; prints each network's test accuracy and the best learning rate.
//   build/samples/hparam_search [--devices 3] [--steps 300] [--data DIR]
#include <CLI/CLI.hpp>

#include <cstring>
#include <iostream>

#include "actorflow/actorflow.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "graph/gradients.h"
#include "graph/ops_variables.h"

namespace af = actorflow;

int main(int argc, char** argv) {
  CLI::App app{"seed 003: hyper-parameter search, one network per device"};
  int devices = 3, steps = 300;
  std::string data = "/usr/share/datasets/fashion-mnist";
  app.add_option("--devices", devices, "number of CPU devices (one network each)");
  app.add_option("--steps", steps, "training steps");
  app.add_option("--data", data, "directory with MNIST-format IDX files");
  CLI11_PARSE(app, argc, argv);
  if (devices < 1 || devices > 8) {
    std::cerr << "hparam_search: --devices must be 1..8\n";
    return 2;
  }
  auto mnist = af::load_mnist(data);
  if (!mnist.ok()) {
    std::cerr << "hparam_search: " << mnist.status().message() << "\n";
    return 1;
  }
  af::LocalServerOptions so;
  so.cpu_devices = devices;
  auto server = af::Server::local(so);
  if (!server.ok()) {
    std::cerr << "hparam_search: " << server.status().message() << "\n";
    return 1;
  }
  af::Scope root = af::Scope::root();
  auto x = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{-1, 784}, "x");
  auto y = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{-1, 10}, "y");
  std::vector<float> rates;
  std::vector<af::Output> trains, accs, inits;
  for (int d = 0; d < devices; ++d) {
    const float lr = 0.3f / static_cast<float>(1 << (2 * d));  // 0.3, 0.075, 0.019, ...
    rates.push_back(lr);
    af::Scope s = root.with_device("/cpu:" + std::to_string(d)).new_sub_scope("net" + std::to_string(d));
    auto w1 = af::ops::variable(s.with_op_name("w1"), af::Shape{784, 128}, af::DType::kFloat32);
    auto b1 = af::ops::variable(s.with_op_name("b1"), af::Shape{128}, af::DType::kFloat32);
    auto w2 = af::ops::variable(s.with_op_name("w2"), af::Shape{128, 10}, af::DType::kFloat32);
    auto b2 = af::ops::variable(s.with_op_name("b2"), af::Shape{10}, af::DType::kFloat32);
    inits.push_back(af::ops::assign(s, w1, af::ops::glorot_uniform(s, af::Shape{784, 128}, 10 + d)));
    inits.push_back(af::ops::assign(s, b1, af::ops::zeros(s, af::Shape{128}, af::DType::kFloat32)));
    inits.push_back(af::ops::assign(s, w2, af::ops::glorot_uniform(s, af::Shape{128, 10}, 20 + d)));
    inits.push_back(af::ops::assign(s, b2, af::ops::zeros(s, af::Shape{10}, af::DType::kFloat32)));
    auto h = af::ops::relu(s, af::ops::bias_add(s, af::ops::matmul(s, x, w1), b1));
    auto logits = af::ops::bias_add(s, af::ops::matmul(s, h, w2), b2);
    auto loss = af::ops::reduce_mean(s, af::ops::softmax_cross_entropy_with_logits(s, logits, y)[0]);
    auto grads = af::gradients(s, {loss}, {w1, b1, w2, b2});
    if (!grads.ok()) {
      std::cerr << "hparam_search: " << grads.status() << "\n";
      return 1;
    }
    std::vector<af::Output> ups;
    const std::vector<af::Output> vars{w1, b1, w2, b2};
    for (size_t i = 0; i < vars.size(); ++i) ups.push_back(af::ops::apply_gradient_descent(s, vars[i], lr, (*grads)[i]));
    trains.push_back(af::ops::no_op(s, ups, "train"));
    auto correct = af::ops::equal(s, af::ops::argmax(s, logits, 1), af::ops::argmax(s, y, 1));
    accs.push_back(af::ops::reduce_mean(s, af::ops::cast(s, correct, af::DType::kFloat32)));
  }
  if (!root.ok()) {
    std::cerr << "hparam_search: " << root.status() << "\n";
    return 1;
  }
  af::Session sess(root, (*server)->target());
  if (auto r = sess.run({}, {}, inits); !r.ok()) {
    std::cerr << "hparam_search: " << r.status() << "\n";
    return 1;
  }
  auto train_y = af::to_categorical(mnist->train_labels, 10);
  auto test_y = af::to_categorical(mnist->test_labels, 10);
  auto ds = af::Dataset::from_tensors({mnist->train_images, *train_y}).shuffle(af::Dataset::kFullBuffer, 3).repeat().batch(50);
  auto it = ds.make_iterator();
  for (int step = 0; step < steps; ++step) {
    auto b = it->next();
    if (!b.ok() || !*b) {
      std::cerr << "hparam_search: input pipeline ended\n";
      return 1;
    }
    // Every network trains on the same batch in the same step, each on its own device.
    auto r = sess.run({{x, (**b)[0]}, {y, (**b)[1]}}, {}, trains);
    if (!r.ok()) {
      std::cerr << "hparam_search: " << r.status() << "\n";
      return 1;
    }
  }
  auto r = sess.run({{x, mnist->test_images}, {y, *test_y}}, accs);
  if (!r.ok()) {
    std::cerr << "hparam_search: " << r.status() << "\n";
    return 1;
  }
  int best = 0;
  for (int d = 0; d < devices; ++d) {
    const float a = (*r)[static_cast<size_t>(d)].data<float>()[0];
    std::printf("device /cpu:%d  learning rate %-8g test accuracy %.4f\n", d, rates[static_cast<size_t>(d)], a);
    if (a > (*r)[static_cast<size_t>(best)].data<float>()[0]) best = d;
  }
  std::printf("best: learning rate %g (/cpu:%d)\n", rates[static_cast<size_t>(best)], best);
  return 0;
}
