// Small helpers for tests that run graphs on an in-process server.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "actorflow/actorflow.h"

namespace actorflow {
namespace testing {

// A local server with two CPU devices: /cpu:1 plays a parameter server, /cpu:0 a worker. Aborts
// the test binary (a test set-up failure) if the server cannot start.
inline std::unique_ptr<Server> two_device_server() {
  LocalServerOptions o;
  o.cpu_devices = 2;
  return std::move(*Server::local(o));
}

// A float32 vector tensor of `v`.
inline Tensor vec(std::vector<float> v) {
  const auto n = static_cast<int64_t>(v.size());
  return Tensor::from_vector<float>(std::move(v), {n});
}

}  // namespace testing
}  // namespace actorflow
