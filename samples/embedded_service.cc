// Embedding: an actorflow Server inside the caller's own CAF actor system, next to the
// caller's actors. The "scorer" service actor answers (score, features) requests by running
// a small graph (relu(x W + b)) through the master actor, without blocking any thread.
//   build/samples/embedded_service
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <iostream>

#include "actorflow/embedding.h"

namespace af = actorflow;

using score_atom = caf::atom_constant<caf::atom("score")>;

// The caller's own service actor: owns a Session on the embedded server.
caf::behavior scorer(caf::event_based_actor* self, af::Session* sess, std::string x_name, std::string y_name) {
  return {
      [=](score_atom, const std::vector<float>& features) -> caf::result<std::vector<float>> {
        auto rp = self->make_response_promise<std::vector<float>>();
        auto x = af::Tensor::from_vector<float>(features, {1, static_cast<int64_t>(features.size())});
        auto req = sess->prepare({{x_name, x}}, {y_name});
        if (!req.ok()) {
          rp.deliver(af::to_caf_error(req.status()));
          return rp;
        }
        self->request(sess->master(), std::chrono::seconds(30), af::run_atom::value, af::RunRequestPtr(*req))
            .then(
                [=](std::vector<af::Tensor>& out) mutable {
                  const af::Tensor& y = out[0];
                  rp.deliver(std::vector<float>(y.data<float>(), y.data<float>() + y.num_elements()));
                },
                [=](caf::error& e) mutable { rp.deliver(e); });
        return rp;
      },
  };
}

int main() {
  caf::actor_system_config cfg;
  af::Server::configure(cfg);  // actorflow's message types and the middleman
  caf::actor_system sys{cfg};
  auto server = af::Server::local_in(sys);
  if (!server.ok()) {
    std::cerr << "embedded_service: " << server.status() << "\n";
    return 1;
  }
  af::Scope root = af::Scope::root();
  auto x = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{-1, 3}, "x");
  auto w = af::ops::constant(root, {1, -1, 0.5f, 2, 0, 1}, {3, 2}, "W");
  auto b = af::ops::constant(root, {0.5f, -4}, {2}, "b");
  auto y = af::ops::relu(root.with_op_name("y"), af::ops::bias_add(root, af::ops::matmul(root, x, w), b));
  af::Session sess(root, (*server)->target());
  auto service = sys.spawn(scorer, &sess, x.name(), y.name());

  caf::scoped_actor client{sys};
  int failures = 0;
  for (const auto& f : std::vector<std::vector<float>>{{1, 2, 3}, {0, 0, 0}, {-1, 1, 2}}) {
    client->request(service, std::chrono::seconds(30), score_atom::value, f)
        .receive(
            [&](const std::vector<float>& s) {
              std::cout << "score(" << f[0] << ", " << f[1] << ", " << f[2] << ") = [" << s[0] << ", " << s[1] << "]\n";
            },
            [&](caf::error& e) {
              std::cerr << "request failed: " << sys.render(e) << "\n";
              ++failures;
            });
  }
  caf::anon_send_exit(service, caf::exit_reason::user_shutdown);
  return failures == 0 ? 0 : 1;
}
