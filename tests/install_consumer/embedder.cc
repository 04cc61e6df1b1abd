// An embedding service against the installed tree: its own CAF actor system, actorflow's server
// inside it (<actorflow/embedding.h>), and a step sent to the master actor by the caller's actor
// rather than through the blocking Session::run. Prints the values and exits non-zero unless
// y = 3 * x = [3, 6].
#include <actorflow/embedding.h>

#include <cstdio>

namespace af = actorflow;

int main() {
  caf::actor_system_config cfg;
  af::Server::configure(cfg);
  caf::actor_system sys{cfg};
  int rc = 1;
  {
    auto server = af::Server::local_in(sys);
    if (!server.ok()) {
      std::fprintf(stderr, "server: %s\n", server.status().to_string().c_str());
      return 1;
    }
    if (&(*server)->system() != &sys) return 1;
    af::Scope root = af::Scope::root();
    af::Output x = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{2}, "x");
    af::ops::mul(root.with_op_name("y"), x, 3.f);
    af::Session sess(root, (*server)->target());
    auto req = sess.prepare({{"x", af::Tensor::from_vector<float>({1.f, 2.f}, {2})}}, {"y"});
    if (!req.ok()) {
      std::fprintf(stderr, "prepare: %s\n", req.status().to_string().c_str());
      return 1;
    }
    caf::scoped_actor self{sys};
    self->request(sess.master(), std::chrono::seconds(30), af::run_atom::value, af::RunRequestPtr(*req))
        .receive(
            [&](std::vector<af::Tensor>& out) {
              const float* y = out[0].data<float>();
              std::printf("y = [%g, %g]\n", y[0], y[1]);
              rc = y[0] == 3.f && y[1] == 6.f ? 0 : 1;
            },
            [&](caf::error& e) { std::fprintf(stderr, "run: %s\n", sys.render(e).c_str()); });
  }
  return rc;
}
