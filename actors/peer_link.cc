#include "actors/peer_link.h"

#include <caf/io/all.hpp>
#include <caf/io/basp_broker.hpp>

#include <atomic>
#include <unordered_map>

#include "actors/control_plane.h"
#include "core/logging.h"
#include "net/socket.h"

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

void resolve_peer_task(caf::actor_system& sys, const caf::node_id& peer, std::function<void(std::string)> done) {
  auto* mm = &sys.middleman();
  mm->run_later([mm, peer, done = std::move(done)] {
    caf::actor handle = mm->named_broker<caf::io::basp_broker>(caf::atom("BASP"));
    auto* broker = static_cast<caf::io::basp_broker*>(caf::actor_cast<caf::abstract_actor*>(handle));
    if (broker == nullptr || broker->getf(caf::abstract_actor::is_terminated_flag)) return;
    auto hdl = broker->instance.tbl().lookup_direct(peer);
    // CAF 0.17's default multiplexer uses the socket descriptor as the handle id.
    done(hdl ? connection_task(static_cast<int>(hdl->id())) : std::string());
  });
}

struct SilentConnectionSweeper::Seen {
  std::atomic<bool> retired{false};  // the sweeper is gone: queued sweeps do nothing
  std::unordered_map<int64_t, std::chrono::steady_clock::time_point> first;
};

SilentConnectionSweeper::SilentConnectionSweeper(caf::actor_system& sys, std::chrono::milliseconds limit,
                                                 uint16_t node_port,
                                                 std::function<bool(const caf::node_id&)> authenticated)
    : sys_(sys),
      limit_(limit),
      node_port_(node_port),
      authenticated_(std::move(authenticated)),
      seen_(std::make_shared<Seen>()) {}

SilentConnectionSweeper::~SilentConnectionSweeper() { seen_->retired.store(true); }

void SilentConnectionSweeper::sweep() {
  auto* mm = &sys_.middleman();
  const auto limit = limit_;
  std::shared_ptr<Seen> seen = seen_;
  const uint16_t node_port = node_port_;
  auto authenticated = authenticated_;
  mm->run_later([mm, limit, seen, node_port, authenticated] {
    if (seen->retired.load()) return;
    caf::actor handle = mm->named_broker<caf::io::basp_broker>(caf::atom("BASP"));
    auto* broker = static_cast<caf::io::basp_broker*>(caf::actor_cast<caf::abstract_actor*>(handle));
    if (broker == nullptr || broker->getf(caf::abstract_actor::is_terminated_flag)) return;
    const auto now = std::chrono::steady_clock::now();
    std::unordered_map<int64_t, std::chrono::steady_clock::time_point> still;
    for (const auto& hdl : broker->connections()) {
      auto node = broker->instance.tbl().lookup_direct(hdl);
      const char* missing = "no CAF handshake";
      if (node != caf::none) {
        // CAF's handshake done. Ours too, or not one we must check: keep it.
        if (!authenticated || node_port == 0 || authenticated(node)) continue;
        // CAF 0.17's default multiplexer uses the socket descriptor as the handle id.
        if (net::local_port(static_cast<int>(hdl.id())) != node_port) continue;  // we opened it
        missing = "no actorflow authentication";
      }
      auto it = seen->first.find(hdl.id());
      const auto first = it == seen->first.end() ? now : it->second;
      if (now - first < limit) {
        still.emplace(hdl.id(), first);
        continue;
      }
      AF_LOG(WARNING) << "closing the control-plane connection from " << broker->remote_addr(hdl) << ":"
                      << broker->remote_port(hdl) << ": " << missing << " within "
                      << std::chrono::duration_cast<std::chrono::milliseconds>(limit).count() << " ms";
      broker->connection_cleanup(hdl, caf::sec::none);
      broker->close(hdl);
    }
    seen->first = std::move(still);
  });
}

}  // namespace actorflow
