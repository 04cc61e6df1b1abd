// Embedding actorflow in a C++ service that runs its own CAF (0.17) actor system: the one
// public header that brings CAF.
//
//   #include <actorflow/embedding.h>
//   caf::actor_system_config cfg;
//   af::Server::configure(cfg);                        // message types, middleman, scheduler
//   caf::actor_system sys{cfg};
//   auto server = af::Server::local_in(sys);           // or Server::create_in(sys, cluster, task)
//   af::Session sess(root, (*server)->target());
//   auto req = sess.prepare({{"x", batch}}, {"loss"}); // Result<std::shared_ptr<const RunRequest>>
//   self->request(sess.master(), caf::infinite, af::run_atom::value, af::RunRequestPtr(*req))
//       .then([](std::vector<af::Tensor>& out) { ... });
//
// It makes complete everything the public headers only name:
//   - Server::configure, Server::local_in, Server::create_in, Server::system() (the server's
//     caf::actor_system) and Server::master() (the master actor);
//   - Session::prepare (RunRequest, RunRequestPtr) and Session::master() for asynchronous
//     sends: (run_atom, RunRequestPtr) -> std::vector<Tensor> or an error;
//   - register_actorflow_types (all message types), the message atoms and the actors' typed
//     interfaces (actors/interfaces.h, included by actors/messages.h);
//   - spawn_data_actor / next_batch, a data actor over a Dataset (actors/data_actor.h);
//   - from_caf_error, turning a caf::error from actorflow's actors into a Status.
// Thread-safety and ownership are those of CAF: actor handles are values, shared freely between
// threads; the actor system must outlive every Server created in it.
#pragma once

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actorflow/actorflow.h"
#include "actors/data_actor.h"
#include "actors/master_actor.h"
#include "actors/membership.h"
#include "actors/messages.h"
#include "actors/server.h"
#include "actors/session.h"
#include "actors/supervisor.h"
