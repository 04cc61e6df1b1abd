#include "actors/node_actor.h"

#include <map>

#include "actors/auth.h"
#include "actors/device_actor.h"
#include "core/logging.h"

namespace actorflow {

bool sender_allowed(caf::local_actor* self, const AuthenticatedPeers* peers, const char* what) {
  const auto& sender = self->current_sender();
  if (!sender) {
    AF_LOG(WARNING) << "rejected anonymous " << what;
    return false;
  }
  if (sender->node() == self->home_system().node()) return true;
  if (peers && peers->contains(sender->node())) return true;
  AF_LOG(WARNING) << "rejected " << what << " from unauthenticated node " << caf::to_string(sender->node());
  return false;
}

namespace {

struct NodeState {
  NodeActorConfig cfg;
  std::map<std::string, caf::actor> local;  // device name -> device actor
  std::map<caf::node_id, std::string> challenges;  // server nonce per peer node
  static constexpr const char* name = "node";
};
using NodeActor = caf::stateful_actor<NodeState>;

caf::behavior node_actor(NodeActor* self, NodeActorConfig cfg) {
  self->state.cfg = std::move(cfg);
  for (const auto& d : self->state.cfg.devices) self->state.local[d.name] = d.actor;
  auto device = [self](const std::string& name) -> caf::actor {
    auto it = self->state.local.find(name);
    return it == self->state.local.end() ? caf::actor() : it->second;
  };
  auto no_device = [self](const std::string& name) {
    return to_caf_error(NotFound("task " + self->state.cfg.task + " has no device '" + name + "'"));
  };
  // The devices as peers see them: reachable through this node actor.
  auto advertised = [self] {
    std::vector<DeviceInfo> out = self->state.cfg.devices;
    for (auto& d : out) d.actor = caf::actor_cast<caf::actor>(self);
    return out;
  };
  auto unauth = [](const char* what) {
    return to_caf_error(Unauthenticated(std::string(what) + " refused: peer has not authenticated"));
  };
  return {
      [=](hello_atom, uint32_t version, const std::string& fingerprint,
          const std::string& client_task) -> caf::result<std::string> {
        auto& st = self->state;
        if (version != kProtocolVersion) {
          AF_LOG(WARNING) << "peer " << client_task << " speaks protocol " << version << ", this task "
                          << kProtocolVersion << ": refused";
          return to_caf_error(FailedPrecondition("protocol version mismatch: peer " + client_task + " has " +
                                                 std::to_string(version) + ", task " + st.cfg.task + " has " +
                                                 std::to_string(kProtocolVersion)));
        }
        if (fingerprint != st.cfg.fingerprint) {
          AF_LOG(WARNING) << "peer " << client_task << " holds a different cluster file: refused";
          return to_caf_error(FailedPrecondition("cluster file mismatch: peer " + client_task + " has fingerprint " +
                                                 fingerprint.substr(0, 12) + "..., task " + st.cfg.task + " has " +
                                                 st.cfg.fingerprint.substr(0, 12) + "..."));
        }
        const auto& sender = self->current_sender();
        if (!sender) return to_caf_error(Unauthenticated("anonymous hello"));
        std::string nonce = random_nonce();
        st.challenges[sender->node()] = nonce;
        return nonce;
      },
      [=](auth_atom, const std::string& client_proof,
          const std::string& client_nonce) -> caf::result<NodeInfo, std::string> {
        auto& st = self->state;
        const auto& sender = self->current_sender();
        if (!sender) return to_caf_error(Unauthenticated("anonymous auth message"));
        auto it = st.challenges.find(sender->node());
        if (it == st.challenges.end()) return to_caf_error(Unauthenticated("auth without hello"));
        std::string expected = auth_proof(st.cfg.secret, "client", it->second, st.cfg.fingerprint, kProtocolVersion);
        st.challenges.erase(it);
        if (!proofs_equal(expected, client_proof)) {
          AF_LOG(WARNING) << "peer node " << caf::to_string(sender->node())
                          << " failed authentication (wrong cluster secret): dropped";
          return to_caf_error(Unauthenticated("authentication failed: wrong cluster secret"));
        }
        if (sender->node() != self->home_system().node()) st.cfg.peers->add(sender->node());
        return caf::result<NodeInfo, std::string>(
            NodeInfo{st.cfg.task, advertised(), st.cfg.data_addr},
            auth_proof(st.cfg.secret, "node", client_nonce, st.cfg.fingerprint, kProtocolVersion));
      },
      [=](devices_atom) -> caf::result<std::vector<DeviceInfo>> {
        if (!sender_allowed(self, self->state.cfg.peers.get(), "devices request")) return unauth("devices");
        return advertised();
      },
      [=](register_atom, const std::string& dev, const std::string& handle, std::string& graph_def) -> caf::result<bool> {
        if (!sender_allowed(self, self->state.cfg.peers.get(), "partition registration")) return unauth("register");
        auto a = device(dev);
        if (!a) return no_device(dev);
        self->delegate(a, register_atom::value, handle, std::move(graph_def));
        return caf::delegated<bool>();
      },
      [=](deregister_atom, const std::string& dev, const std::string& handle) -> caf::result<bool> {
        if (!sender_allowed(self, self->state.cfg.peers.get(), "deregistration")) return unauth("deregister");
        auto a = device(dev);
        if (!a) return no_device(dev);
        self->delegate(a, deregister_atom::value, handle);
        return caf::delegated<bool>();
      },
      [=](run_atom, const std::string& dev, const std::string& handle, int64_t step_id,
          std::vector<Tensor>& args) -> caf::result<std::vector<Tensor>> {
        if (!sender_allowed(self, self->state.cfg.peers.get(), "run request")) return unauth("run");
        auto a = device(dev);
        if (!a) return no_device(dev);
        self->delegate(a, run_atom::value, handle, step_id, std::move(args));
        return caf::delegated<std::vector<Tensor>>();
      },
      [=](abort_atom, const std::string& dev, int64_t step_id, const std::string& why) {
        if (!sender_allowed(self, self->state.cfg.peers.get(), "abort")) return;
        if (auto a = device(dev)) self->send(a, abort_atom::value, step_id, why);
      },
      [=](tensor_atom, int64_t step_id, const std::string& key, Tensor& t) {
        if (!sender_allowed(self, self->state.cfg.peers.get(), "tensor")) return;
        const std::string dst = rendezvous_key_destination(key);
        if (auto a = device(dst)) self->send(a, tensor_atom::value, step_id, key, std::move(t));
        else AF_LOG(WARNING) << "dropped tensor " << key << ": no device " << dst << " on this task";
      },
      [=](ping_atom) -> caf::result<std::string> {
        if (!sender_allowed(self, self->state.cfg.peers.get(), "ping")) return unauth("ping");
        return self->state.cfg.task;
      },
      [=](peers_atom, std::vector<std::string>& tasks) -> caf::result<bool> {
        if (!sender_allowed(self, self->state.cfg.peers.get(), "peer list")) return unauth("peers");
        auto fn = self->state.cfg.connect_peers;
        if (!fn) return true;
        // Connecting blocks: do it on a worker with its own thread.
        auto worker = self->spawn<caf::detached>([fn](caf::event_based_actor* w) -> caf::behavior {
          return {[=](peers_atom, const std::vector<std::string>& ts) -> caf::result<bool> {
            Status s = fn(ts);
            w->quit();
            if (!s.ok()) return to_caf_error(s);
            return true;
          }};
        });
        self->delegate(worker, peers_atom::value, std::move(tasks));
        return caf::delegated<bool>();
      },
  };
}

}  // namespace

caf::actor spawn_node_actor(caf::actor_system& sys, NodeActorConfig cfg) {
  return sys.spawn(node_actor, std::move(cfg));
}

void register_node_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<NodeInfo>("actorflow::NodeInfo");
}

}  // namespace actorflow
