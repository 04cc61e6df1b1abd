#include "actors/peer_link.h"

#include <caf/io/all.hpp>
#include <caf/io/basp_broker.hpp>

#include "core/logging.h"

namespace actorflow {

void close_peer_connection(caf::actor_system& sys, const caf::node_id& peer, const std::string& why) {
  auto* mm = &sys.middleman();
  // run_later executes on the multiplexer thread, the only thread that runs brokers.
  mm->run_later([mm, peer, why] {
    caf::actor handle = mm->named_broker<caf::io::basp_broker>(caf::atom("BASP"));
    auto* broker = static_cast<caf::io::basp_broker*>(caf::actor_cast<caf::abstract_actor*>(handle));
    if (broker == nullptr || broker->getf(caf::abstract_actor::is_terminated_flag)) return;
    auto hdl = broker->instance.tbl().lookup_direct(peer);
    if (!hdl) {
      AF_LOG(INFO) << "peer node " << caf::to_string(peer) << ": no direct connection left to close (" << why << ")";
      return;
    }
    AF_LOG(WARNING) << "closing the connection of peer node " << caf::to_string(peer) << ": " << why;
    broker->connection_cleanup(*hdl, caf::sec::none);
    broker->close(*hdl);
  });
}

}  // namespace actorflow
