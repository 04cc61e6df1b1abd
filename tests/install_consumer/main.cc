// Trains one step of w -= 0.1 * x on an in-process server through the installed headers and
// libraries; prints the values and exits non-zero when they are not w = 1 - 0.1 * 2 = 0.8 and
// global_step = 1. It includes only public headers that bring no CAF header (scripts/test-install.sh
// checks that compiling it opens none).
#include <actorflow/graph.h>
#include <actorflow/server.h>
#include <actorflow/session.h>
#include <actorflow/train.h>

#include <cmath>
#include <cstdio>

namespace af = actorflow;

int main() {
  af::LocalServerOptions so;
  so.cpu_devices = 2;
  auto server = af::Server::local(so);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().to_string().c_str());
    return 1;
  }
  af::Scope root = af::Scope::root();
  af::Scope ps = root.with_device("/cpu:1");
  af::Output w = af::train::get_variable(ps, "w", af::Shape{1}, af::DType::kFloat32, af::train::constant_initializer(1));
  af::Output gs = af::train::get_or_create_global_step(ps);
  af::Output x = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{1}, "x");
  af::Output loss = af::ops::reduce_sum(root, af::ops::mul(root, w, x));
  auto train = af::train::GradientDescentOptimizer(0.1f).minimize(root, loss, gs);
  auto init = af::train::global_variables_initializer(root);
  if (!train.ok() || !init.ok()) {
    std::fprintf(stderr, "graph: %s\n", (!train.ok() ? train.status() : init.status()).to_string().c_str());
    return 1;
  }
  af::Session sess(root, (*server)->target());
  if (!sess.run({}, {}, {*init}).ok()) return 1;
  af::Tensor two = af::Tensor::from_vector<float>({2.f}, {1});
  auto step = sess.run({{x, two}}, {}, {*train});
  auto r = sess.run({w, gs});
  if (!step.ok() || !r.ok()) {
    std::fprintf(stderr, "run: %s\n", (!step.ok() ? step.status() : r.status()).to_string().c_str());
    return 1;
  }
  const float wv = (*r)[0].data<float>()[0];
  const long long g = static_cast<long long>((*r)[1].data<int64_t>()[0]);
  std::printf("w = %g, global_step = %lld\n", wv, g);
  return std::fabs(wv - 0.8f) < 1e-6f && g == 1 ? 0 : 1;
}
