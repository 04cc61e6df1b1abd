// In-graph replication (the cifar10_multi_gpu_train pattern, seed 001/003) and model parallelism
// with one client: (1) one tower of an MLP per CPU device, each on its slice of the batch, with
// variables shared on /cpu:0 and the towers' gradients averaged before one update; (2) the same
// model split across devices, layer 1 on /cpu:0 and layer 2 on /cpu:1. Both train on
// Fashion-MNIST and print their test accuracy.
//   build/samples/in_graph_replication [--towers 2] [--steps 200] [--data DIR]
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstring>
#include <iostream>

#include "actorflow/actorflow.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "graph/gradients.h"
#include "graph/ops_variables.h"

namespace af = actorflow;

namespace {

struct Mlp {
  af::Output w1, b1, w2, b2;
  std::vector<af::Output> vars() const { return {w1, b1, w2, b2}; }
};

Mlp make_vars(const af::Scope& s, std::vector<af::Output>* inits) {
  Mlp m;
  m.w1 = af::ops::variable(s.with_op_name("w1"), af::Shape{784, 128}, af::DType::kFloat32);
  m.b1 = af::ops::variable(s.with_op_name("b1"), af::Shape{128}, af::DType::kFloat32);
  m.w2 = af::ops::variable(s.with_op_name("w2"), af::Shape{128, 10}, af::DType::kFloat32);
  m.b2 = af::ops::variable(s.with_op_name("b2"), af::Shape{10}, af::DType::kFloat32);
  inits->push_back(af::ops::assign(s, m.w1, af::ops::glorot_uniform(s, af::Shape{784, 128}, 1)));
  inits->push_back(af::ops::assign(s, m.b1, af::ops::zeros(s, af::Shape{128}, af::DType::kFloat32)));
  inits->push_back(af::ops::assign(s, m.w2, af::ops::glorot_uniform(s, af::Shape{128, 10}, 2)));
  inits->push_back(af::ops::assign(s, m.b2, af::ops::zeros(s, af::Shape{10}, af::DType::kFloat32)));
  return m;
}

af::Output accuracy(const af::Scope& s, af::Output logits, af::Output y) {
  auto correct = af::ops::equal(s, af::ops::argmax(s, logits, 1), af::ops::argmax(s, y, 1));
  return af::ops::reduce_mean(s, af::ops::cast(s, correct, af::DType::kFloat32));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"in-graph replication and model parallelism with one client"};
  int towers = 2, steps = 200;
  std::string data = "/usr/share/datasets/fashion-mnist";
  app.add_option("--towers", towers, "towers (one per CPU device)");
  app.add_option("--steps", steps, "training steps");
  app.add_option("--data", data, "directory with MNIST-format IDX files");
  CLI11_PARSE(app, argc, argv);
  if (towers < 1 || towers > 8) {
    std::cerr << "in_graph_replication: --towers must be 1..8\n";
    return 2;
  }
  auto mnist = af::load_mnist(data);
  if (!mnist.ok()) {
    std::cerr << "in_graph_replication: " << mnist.status().message() << "\n";
    return 1;
  }
  af::LocalServerOptions so;
  so.cpu_devices = std::max(2, towers);
  auto server = af::Server::local(so);
  if (!server.ok()) return 1;
  auto train_y = af::to_categorical(mnist->train_labels, 10);
  auto test_y = af::to_categorical(mnist->test_labels, 10);
  const int per_tower = 50;

  af::Scope root = af::Scope::root();
  std::vector<af::Output> inits;
  // (1) Towers: variables on /cpu:0, one tower per device on its slice, averaged gradients.
  af::Scope vs = root.with_device("/cpu:0").new_sub_scope("shared");
  Mlp shared = make_vars(vs, &inits);
  std::vector<af::Output> xs, ys;
  std::vector<std::vector<af::Output>> tower_grads;
  for (int t = 0; t < towers; ++t) {
    af::Scope s = root.with_device("/cpu:" + std::to_string(t)).new_sub_scope("tower" + std::to_string(t));
    auto x = af::ops::placeholder(s, af::DType::kFloat32, af::Shape{-1, 784}, "x");
    auto y = af::ops::placeholder(s, af::DType::kFloat32, af::Shape{-1, 10}, "y");
    auto h = af::ops::relu(s, af::ops::bias_add(s, af::ops::matmul(s, x, shared.w1), shared.b1));
    auto logits = af::ops::bias_add(s, af::ops::matmul(s, h, shared.w2), shared.b2);
    auto loss = af::ops::reduce_mean(s, af::ops::softmax_cross_entropy_with_logits(s, logits, y)[0]);
    auto g = af::gradients(s, {loss}, shared.vars());
    if (!g.ok()) {
      std::cerr << "in_graph_replication: " << g.status() << "\n";
      return 1;
    }
    xs.push_back(x);
    ys.push_back(y);
    tower_grads.push_back(*g);
  }
  af::Scope avg = root.with_device("/cpu:0").new_sub_scope("average");
  std::vector<af::Output> updates;
  for (size_t v = 0; v < 4; ++v) {
    std::vector<af::Output> gs;
    for (const auto& tg : tower_grads) gs.push_back(tg[v]);
    auto mean = af::ops::mul(avg, af::ops::add_n(avg, gs), 1.f / static_cast<float>(towers));
    updates.push_back(af::ops::apply_gradient_descent(avg, shared.vars()[v], 0.1f, mean));
  }
  auto train_towers = af::ops::no_op(root, updates, "train_towers");
  auto tx = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{-1, 784}, "test_x");
  auto ty = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{-1, 10}, "test_y");
  auto eval_h = af::ops::relu(root, af::ops::bias_add(root, af::ops::matmul(root, tx, shared.w1), shared.b1));
  auto towers_acc = accuracy(root, af::ops::bias_add(root, af::ops::matmul(root, eval_h, shared.w2), shared.b2), ty);

  // (2) Model parallelism: layer 1 on /cpu:0, layer 2 on /cpu:1.
  af::Scope l1 = root.with_device("/cpu:0").new_sub_scope("mp_layer1");
  af::Scope l2 = root.with_device("/cpu:1").new_sub_scope("mp_layer2");
  std::vector<af::Output> mp_inits;
  Mlp mp;
  {
    Mlp a = make_vars(l1, &mp_inits), b = make_vars(l2, &mp_inits);
    mp = Mlp{a.w1, a.b1, b.w2, b.b2};
    for (auto* p : {&inits}) p->insert(p->end(), mp_inits.begin(), mp_inits.end());
  }
  auto mx = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{-1, 784}, "mp_x");
  auto my = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{-1, 10}, "mp_y");
  auto mh = af::ops::relu(l1, af::ops::bias_add(l1, af::ops::matmul(l1, mx, mp.w1), mp.b1));
  auto mlogits = af::ops::bias_add(l2, af::ops::matmul(l2, mh, mp.w2), mp.b2);
  auto mloss = af::ops::reduce_mean(l2, af::ops::softmax_cross_entropy_with_logits(l2, mlogits, my)[0]);
  auto mg = af::gradients(root, {mloss}, mp.vars());
  if (!mg.ok()) {
    std::cerr << "in_graph_replication: " << mg.status() << "\n";
    return 1;
  }
  std::vector<af::Output> mups;
  for (size_t v = 0; v < 4; ++v) mups.push_back(af::ops::apply_gradient_descent(root, mp.vars()[v], 0.1f, (*mg)[v]));
  auto train_mp = af::ops::no_op(root, mups, "train_mp");
  auto mp_acc = accuracy(l2, mlogits, my);
  if (!root.ok()) {
    std::cerr << "in_graph_replication: " << root.status() << "\n";
    return 1;
  }

  af::Session sess(root, (*server)->target());
  if (auto r = sess.run({}, {}, inits); !r.ok()) {
    std::cerr << "in_graph_replication: " << r.status() << "\n";
    return 1;
  }
  auto ds = af::Dataset::from_tensors({mnist->train_images, *train_y})
                .shuffle(af::Dataset::kFullBuffer, 5)
                .repeat()
                .batch(per_tower * towers);
  auto it = ds.make_iterator();
  for (int step = 0; step < steps; ++step) {
    auto b = it->next();
    if (!b.ok() || !*b) return 1;
    const af::Tensor& bx = (**b)[0];
    const af::Tensor& by = (**b)[1];
    af::FeedDict feeds;
    for (int t = 0; t < towers; ++t) {
      af::Tensor sx(af::DType::kFloat32, af::Shape{per_tower, 784}), sy(af::DType::kFloat32, af::Shape{per_tower, 10});
      std::memcpy(sx.raw_data(), bx.data<float>() + t * per_tower * 784, per_tower * 784 * sizeof(float));
      std::memcpy(sy.raw_data(), by.data<float>() + t * per_tower * 10, per_tower * 10 * sizeof(float));
      feeds.emplace_back(xs[static_cast<size_t>(t)], sx);
      feeds.emplace_back(ys[static_cast<size_t>(t)], sy);
    }
    feeds.emplace_back(mx, bx);
    feeds.emplace_back(my, by);
    auto r = sess.run(feeds, {}, {train_towers, train_mp});
    if (!r.ok()) {
      std::cerr << "in_graph_replication: " << r.status() << "\n";
      return 1;
    }
  }
  auto r = sess.run({{tx, mnist->test_images}, {ty, *test_y}, {mx, mnist->test_images}, {my, *test_y}},
                    {towers_acc, mp_acc});
  if (!r.ok()) {
    std::cerr << "in_graph_replication: " << r.status() << "\n";
    return 1;
  }
  std::printf("in-graph replication, %d towers: test accuracy %.4f\n", towers, (*r)[0].data<float>()[0]);
  std::printf("model parallelism, 2 devices: test accuracy %.4f\n", (*r)[1].data<float>()[0]);
  // Same initial values, and the mean of the towers' mean-loss gradients is the full batch's
  // gradient, so the two models take the same steps: equal accuracies check the replication.
  std::printf("towers and model-parallel agree: %s\n",
              std::fabs((*r)[0].data<float>()[0] - (*r)[1].data<float>()[0]) < 2e-3f ? "yes" : "no");
  return 0;
}
