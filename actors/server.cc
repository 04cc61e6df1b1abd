#include "actors/server.h"

#include "actors/client_sessions.h"

#include "actors/auth.h"
#include "actors/control_plane.h"

#include "actors/restart.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <condition_variable>
#include <cstdio>
#include <thread>
#include <map>
#include <unordered_map>

#include "actors/direct_step.h"
#include "actors/faults.h"
#include "actors/master_actor.h"
#include "actors/peer_link.h"
#include "net/tls.h"
#include "net/tensor_transport.h"
#include "actors/variable_actor.h"
#include "core/logging.h"

namespace actorflow {
namespace {

std::mutex g_registry_mu;
std::map<std::string, Server*>& registry() {
  static auto* m = new std::map<std::string, Server*>();
  return *m;
}

// Routes tensors: to device actors of this process by reference, to other tasks through
// their node actors (sent as this task's node actor, so the receiver can authenticate it).
class LocalRouter final : public Router, public std::enable_shared_from_this<LocalRouter> {
 public:
  // `own_task`: the task prefix of this process (the receiving end of its link faults).
  explicit LocalRouter(std::string own_task) : own_task_(std::move(own_task)) {}
  void add(const std::string& device, caf::actor a) {
    std::lock_guard<std::mutex> l(mu_);
    local_[device] = std::move(a);
  }
  void set_self_node(caf::actor node) {
    std::lock_guard<std::mutex> l(mu_);
    self_node_ = std::move(node);
  }
  void set_remote(const std::string& task_prefix, caf::actor node, const std::string& data_addr = "") {
    std::lock_guard<std::mutex> l(mu_);
    remote_[task_prefix] = std::move(node);
    if (!data_addr.empty()) data_[task_prefix] = data_addr;
  }
  void set_data_client(net::TensorClient* client, const std::string& own_data_addr = "") {
    std::lock_guard<std::mutex> l(mu_);
    client_ = client;
    own_data_addr_ = own_data_addr;
  }
  void set_master(caf::actor master, std::shared_ptr<DirectSteps> direct) {
    std::lock_guard<std::mutex> l(mu_);
    master_ = std::move(master);
    direct_ = std::move(direct);
  }
  // A message from the data plane: a tensor for a local device, or step control (steps
  // dispatched over the data plane, see Router): keys starting with kControl.
  //
  // Fault injection: this is the data plane's receiving hook. Every message that enters this
  // process over it passes this task's link faults here, whatever step path sent it (a tensor,
  // a run request, an outcome); the feeds of a run request travel with it and share its fate.
  void deliver(const net::TensorMessage& m) {
    FaultInjector& inj = FaultInjector::global();
    if (!inj.armed() || (!m.key.empty() && m.key[0] == kControl && m.key.compare(1, 5, "feed" + std::string(1, kSep)) == 0)) {
      deliver_now(m);
      return;
    }
    const bool control = !m.key.empty() && m.key[0] == kControl;
    std::string src;
    bool repeatable = !control;  // tensors and fetched values may arrive twice; requests and outcomes not
    if (!control) {
      src = task_of_device(m.key.substr(0, m.key.find(';')));
    } else {
      std::vector<std::string> f = split_control(m.key);
      if (f.size() == 5 && f[0] == "run") src = f[4];
      else if (f.size() == 3) src = task_of_device(f[1]);
      repeatable = f.size() == 3 && f[0] == "ret";
    }
    LinkDecision d = inj.on_receive(src, own_task_);
    if (d.drop) {
      if (control) drop_carried(m.step_id);  // a dropped run request takes its feeds with it
      return;
    }
    if (d.delay_ms > 0) {
      std::weak_ptr<LocalRouter> weak = weak_from_this();
      const int copies = d.duplicate && repeatable ? 2 : 1;
      inj.run_after(std::chrono::milliseconds(d.delay_ms), [weak, m, copies] {
        if (auto r = weak.lock())
          for (int i = 0; i < copies; ++i) r->deliver_now(m);
      });
      return;
    }
    if (d.duplicate && repeatable) deliver_now(m);
    deliver_now(m);
  }

 private:
  void drop_carried(int64_t step_id) {
    std::lock_guard<std::mutex> l(mu_);
    carried_.erase(step_id);
  }
  // deliver() past the fault hook.
  void deliver_now(const net::TensorMessage& m) {
    if (m.key.empty() || m.key[0] != kControl) {
      if (m.status_error.empty()) deliver_local(m.step_id, m.key, m.tensor);
      return;
    }
    std::vector<std::string> f = split_control(m.key);
    if (f.size() == 2 && f[0] == "feed") {  // feed, rendezvous key: travels with the run that follows
      if (!m.status_error.empty()) return;
      std::lock_guard<std::mutex> l(mu_);
      if (carried_.size() >= kMaxCarried) {
        AF_LOG(WARNING) << "data plane: " << carried_.size() << " steps' feeds arrived without their run requests; dropped";
        carried_.clear();
      }
      carried_[m.step_id].emplace_back(f[1], m.tensor);
      return;
    }
    if (f.size() == 5 && f[0] == "run") {  // run, device, handle, reply_to, from_task
      caf::actor a;
      std::vector<std::string> keys;
      std::vector<Tensor> tensors;
      {
        std::lock_guard<std::mutex> l(mu_);
        if (f[3].empty()) {
          // Reply on the connection the request came on: the device actor gets a token for it.
          if (!m.reply) {
            AF_LOG(WARNING) << "step " << m.step_id << " asks for a reply on a connection that has none; ignored";
            return;
          }
          f[3] = std::string(1, kChannelToken) + std::to_string(m.reply->id());
          if (channels_.emplace(f[3], m.reply).second && channels_.size() > 2 * channels_pruned_at_) {
            for (auto it = channels_.begin(); it != channels_.end();)
              it = it->second.expired() ? channels_.erase(it) : std::next(it);
            channels_pruned_at_ = std::max<size_t>(16, channels_.size());
          }
        }
        auto it = local_.find(f[1]);
        if (it != local_.end()) a = it->second;
        auto c = carried_.find(m.step_id);
        if (c != carried_.end()) {
          for (auto& [k, t] : c->second) {
            keys.push_back(std::move(k));
            tensors.push_back(std::move(t));
          }
          carried_.erase(c);
        }
      }
      if (!a) {
        AF_LOG(WARNING) << "step " << m.step_id << " dispatched to unknown device " << f[1] << " here";
        Status s = reply_step(f[3], m.step_id, f[1], NotFound("no device '" + f[1] + "' on this task"), {});
        if (!s.ok()) AF_LOG(WARNING) << "cannot report step " << m.step_id << ": " << s;
        return;
      }
      // A self-contained partition whose device is idle runs right here: no thread to wake.
      // Device faults (slow, throw) act inside the device actor: a device one targets runs its
      // steps there.
      if (auto entry = FaultInjector::global().targets_device(f[1]) ? std::nullopt : inline_.find(f[1], f[2])) {
        if (auto outcome = try_run_inline(*entry, f[1], m.step_id, keys, tensors)) {
          inline_steps_.fetch_add(1, std::memory_order_relaxed);
          Status s = reply_step(f[3], m.step_id, f[1], outcome->first, outcome->second);
          if (!s.ok()) AF_LOG(WARNING) << f[1] << ": cannot report step " << m.step_id << ": " << s;
          return;
        }
      }
      // One message with the step's feeds: the device actor wakes once.
      caf::anon_send(a, steprun_atom::value, f[2], m.step_id, f[3], std::move(keys), std::move(tensors));
      return;
    }
    caf::actor master;
    std::shared_ptr<DirectSteps> direct;
    {
      std::lock_guard<std::mutex> l(mu_);
      master = master_;
      direct = direct_;
    }
    // A direct step's outcome completes its caller's wait here, on this reader thread.
    if (direct && f.size() == 3 && f[0] == "ret" &&
        direct->on_ret(m.step_id, f[1], static_cast<int32_t>(std::atoi(f[2].c_str())), m.tensor))
      return;
    if (direct && f.size() == 3 && f[0] == "done" &&
        direct->on_done(m.step_id, f[1], static_cast<int32_t>(std::atoi(f[2].c_str())), m.status_error))
      return;
    if (!master) return;
    if (f.size() == 3 && f[0] == "ret") {  // ret, device, fetch index
      caf::anon_send(master, stepret_atom::value, m.step_id, f[1], static_cast<int32_t>(std::atoi(f[2].c_str())),
                     m.tensor);
    } else if (f.size() == 3 && f[0] == "done") {  // done, device, status code
      caf::anon_send(master, stepdone_atom::value, m.step_id, f[1], static_cast<int32_t>(std::atoi(f[2].c_str())),
                     m.status_error);
    } else {
      AF_LOG(WARNING) << "data plane: ignored a malformed step control message (step " << m.step_id << ")";
    }
  }

 public:
  // Where run requests for `device` go: its task's data-plane address, this process's own (for
  // replies) and the client; false when steps for it cannot go over the data plane.
  bool dispatch_route(const std::string& device, std::string* addr, std::string* own, net::TensorClient** client) {
    std::lock_guard<std::mutex> l(mu_);
    auto da = data_.find(task_of_device(device));
    if (da == data_.end() || !client_ || own_data_addr_.empty()) return false;
    *addr = da->second;
    *own = own_data_addr_;
    *client = client_;
    return true;
  }
  InlinePartitions* inline_partitions() override { return &inline_; }
  void abort_remote_step(const caf::actor& device_actor, const std::string& device, int64_t step_id,
                         const std::string& why) override {
    caf::actor node;
    {
      std::lock_guard<std::mutex> l(mu_);
      node = self_node_;
    }
    if (node) caf::send_as(node, device_actor, abort_atom::value, device, step_id, why);
    else caf::anon_send(device_actor, abort_atom::value, device, step_id, why);
  }
  uint64_t inline_steps_run() const override { return inline_steps_.load(std::memory_order_relaxed); }
  bool can_dispatch(const std::string& device) override {
    std::string addr, own;
    net::TensorClient* client = nullptr;
    return dispatch_route(device, &addr, &own, &client) && client->is_connected(addr, /*probe=*/false);
  }
  bool dispatch_connection_open(const std::string& device) override {
    std::string addr, own;
    net::TensorClient* client = nullptr;
    return dispatch_route(device, &addr, &own, &client) && client->is_connected(addr, /*probe=*/true);
  }
  Status open_dispatch(const std::string& device) override {
    std::string addr, own;
    net::TensorClient* client = nullptr;
    if (!dispatch_route(device, &addr, &own, &client)) return Unavailable("no data-plane route to " + device);
    return client->ensure_connected(addr);
  }
  // Fault injection: a run request passes this process's sending-side link faults as its feeds
  // would (from `from_task` to the device's task): dropped, delayed (written later by the
  // injector's timer thread) or with its feeds sent twice (the request itself once).
  Status dispatch_step(const std::string& device, const std::string& handle, int64_t step_id,
                       const std::string& from_task,
                       const std::vector<std::pair<std::string, Tensor>>& feeds) override {
    std::string addr, own;
    net::TensorClient* client = nullptr;
    if (!dispatch_route(device, &addr, &own, &client)) return Unavailable("no data-plane route to " + device);
    FaultInjector& inj = FaultInjector::global();
    if (inj.armed()) {
      LinkDecision d = inj.on_send(from_task, task_of_device(device));
      if (d.drop || d.delay_ms > 0 || d.duplicate)
        return send_faulted(d, addr, run_request(device, handle, step_id, own, from_task, feeds));
    }
    Status s = client->send_batch(addr, run_request(device, handle, step_id, own, from_task, feeds));
    if (!s.ok()) return Unavailable("dispatching step " + std::to_string(step_id) + " to " + device + ": " + s.message());
    return Status::OK();
  }
  // With a link fault on the way, the request goes as dispatch_step() sends it (with this
  // process's reply address) and the result is a null connection: the caller waits for the
  // outcome through the reader threads.
  Result<std::shared_ptr<net::ClientConnection>> dispatch_step_awaiting(
      const std::string& device, const std::string& handle, int64_t step_id, const std::string& from_task,
      const std::vector<std::pair<std::string, Tensor>>& feeds) override {
    std::string addr, own;
    net::TensorClient* client = nullptr;
    if (!dispatch_route(device, &addr, &own, &client)) return Unavailable("no data-plane route to " + device);
    FaultInjector& inj = FaultInjector::global();
    if (inj.armed()) {
      LinkDecision d = inj.on_send(from_task, task_of_device(device));
      if (d.drop || d.delay_ms > 0 || d.duplicate) {
        Status s = send_faulted(d, addr, run_request(device, handle, step_id, own, from_task, feeds));
        if (!s.ok()) return s;
        return std::shared_ptr<net::ClientConnection>();
      }
    }
    // An empty reply address: the outcome comes back on this connection.
    auto conn = client->send_batch_awaiting(addr, run_request(device, handle, step_id, "", from_task, feeds));
    if (!conn.ok())
      return Unavailable("dispatching step " + std::to_string(step_id) + " to " + device + ": " +
                         conn.status().message());
    return conn;
  }
  Status await_dispatched(net::ClientConnection& conn, const std::function<bool()>& done,
                          std::chrono::microseconds spin, std::chrono::milliseconds wait) override {
    net::TensorClient* client = nullptr;
    {
      std::lock_guard<std::mutex> l(mu_);
      client = client_;
    }
    if (!client) return Unavailable("no data plane in this process");
    return client->await_replies(
        conn, [this](const net::TensorMessage& m) { deliver_reply(m); }, done, spin, wait);
  }
  Status reply_step(const std::string& reply_to, int64_t step_id, const std::string& device, const Status& status,
                    const std::vector<Tensor>& retvals) override {
    net::TensorClient* client = nullptr;
    std::shared_ptr<net::ReplyChannel> channel;
    {
      std::lock_guard<std::mutex> l(mu_);
      client = client_;
      if (!reply_to.empty() && reply_to[0] == kChannelToken) {
        auto it = channels_.find(reply_to);
        if (it != channels_.end()) channel = it->second.lock();
        if (!channel) return Unavailable("the connection step " + std::to_string(step_id) + " came on is closed");
      }
    }
    if (!channel && !client) return Unavailable("no data plane in this process");
    // The fetched tensors and the outcome in one write: the master's reader gets them together.
    std::vector<net::TensorMessage> msgs;
    if (status.ok())
      for (size_t i = 0; i < retvals.size(); ++i) {
        if (!retvals[i].is_initialized()) continue;
        net::TensorMessage r;
        r.step_id = step_id;
        r.key = control_key({"ret", device, std::to_string(i)});
        r.tensor = retvals[i];
        msgs.push_back(std::move(r));
      }
    net::TensorMessage m;
    m.step_id = step_id;
    if (status.ok()) m.tensor = Tensor::scalar<int64_t>(0);
    else m.status_error = status.message().empty() ? std::string("error") : status.message();
    m.key = control_key({"done", device, std::to_string(static_cast<int>(status.code()))});
    msgs.push_back(std::move(m));
    if (channel) return channel->send_batch(msgs);
    {
      // Only to a member's data plane (learned from its authenticated NodeInfo, whose host
      // Membership checked against the cluster file): a request cannot make this task dial
      // an address of the requester's choosing.
      std::lock_guard<std::mutex> l(mu_);
      bool member = reply_to == own_data_addr_;
      for (const auto& kv : data_) member = member || kv.second == reply_to;
      if (!member)
        return PermissionDenied("step " + std::to_string(step_id) + " asks for its outcome at " + reply_to +
                                ", which is no member's data-plane address");
    }
    return client->send_batch(reply_to, msgs);
  }
  // The outcome of a step this process dispatched, read from the request's connection: only
  // step outcomes are accepted there.
  void deliver_reply(const net::TensorMessage& m) {
    if (m.key.size() > 4 && m.key[0] == kControl && (m.key.compare(1, 4, "ret" + std::string(1, kSep)) == 0 ||
                                                     m.key.compare(1, 5, "done" + std::string(1, kSep)) == 0)) {
      deliver(m);
      return;
    }
    AF_LOG(WARNING) << "data plane: ignored a message that is not a step outcome on a request connection (step "
                    << m.step_id << ")";
  }
  // A tensor that arrived over the data plane: hand it to the local device actor.
  void deliver_local(int64_t step_id, const std::string& key, const Tensor& t) {
    const std::string dst = rendezvous_key_destination(key);
    caf::actor a;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = local_.find(dst);
      if (it == local_.end()) {
        AF_LOG(WARNING) << "dropped tensor " << key << " from the data plane: no device " << dst << " here";
        return;
      }
      a = it->second;
    }
    caf::anon_send(a, tensor_atom::value, step_id, key, t);
  }
  void clear() {
    std::lock_guard<std::mutex> l(mu_);
    local_.clear();
    remote_.clear();
    data_.clear();
    client_ = nullptr;
    self_node_ = nullptr;
    master_ = nullptr;
    direct_ = nullptr;
  }
  // Fault injection: this is the sending hook. A tensor for another task passes this process's
  // sending-side link faults (faults add()ed here; a plan's act where they are received).
  Status route(int64_t step_id, const std::string& key, const Tensor& t) override {
    FaultInjector& inj = FaultInjector::global();
    if (inj.armed()) {
      const std::string src = task_of_device(key.substr(0, key.find(';')));
      const std::string dst = task_of_device(rendezvous_key_destination(key));
      if (src != dst) {
        std::weak_ptr<LocalRouter> weak = weak_from_this();
        return inj.apply(inj.on_send(src, dst), [weak, step_id, key, t] {
          auto r = weak.lock();
          return r ? r->route_now(step_id, key, t) : Cancelled("the router is gone");
        });
      }
    }
    return route_now(step_id, key, t);
  }
  // route() past the fault hook.
  Status route_now(int64_t step_id, const std::string& key, const Tensor& t) {
    const std::string dst = rendezvous_key_destination(key);
    caf::actor a, via;
    std::string data_addr;
    net::TensorClient* client = nullptr;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = local_.find(dst);
      if (it != local_.end()) {
        a = it->second;
      } else {
        auto d = dst.find("/device:");
        const std::string task = d == std::string::npos ? dst : dst.substr(0, d);
        auto r = remote_.find(task);
        if (r == remote_.end() || !self_node_)
          return Unavailable("no route to device '" + dst + "' for tensor " + key);
        a = r->second;
        via = self_node_;
        auto da = data_.find(task);
        if (da != data_.end() && client_) {
          data_addr = da->second;
          client = client_;
        }
      }
    }
    if (client) {
      // The data plane: a header and one raw block per tensor, no per-element work.
      net::TensorMessage m;
      m.step_id = step_id;
      m.key = key;
      m.tensor = t;
      Status s = client->send(data_addr, m);
      if (!s.ok()) return Unavailable("sending tensor to " + dst + ": " + s.message());
      return Status::OK();
    }
    if (via) {
      // No data-plane route (a peer that advertised none): CAF carries it as one byte block.
      static std::atomic<int> warned{0};
      if (warned.fetch_add(1) == 0) AF_LOG(WARNING) << "tensor " << key << " to " << dst << " goes through CAF: no data-plane route";
      caf::send_as(via, a, tensor_atom::value, step_id, key, t);
    }
    else caf::anon_send(a, tensor_atom::value, step_id, key, t);
    return Status::OK();
  }

 private:
  // A run request that meets a sending-side link fault `d`.
  Status send_faulted(LinkDecision d, const std::string& addr, std::vector<net::TensorMessage> msgs) {
    std::weak_ptr<LocalRouter> weak = weak_from_this();
    const bool dup = d.duplicate;
    d.duplicate = false;  // the request once, its feeds twice
    return FaultInjector::global().apply(d, [weak, addr, msgs = std::move(msgs), dup]() -> Status {
      auto r = weak.lock();
      if (!r) return Cancelled("the router is gone");
      return r->send_run_request(addr, msgs, dup);
    });
  }
  // Writes a run request's frames; with `duplicate_feeds` its feeds once more afterwards, as plain
  // tensors (the device finds them already delivered and ignores them).
  Status send_run_request(const std::string& addr, const std::vector<net::TensorMessage>& msgs, bool duplicate_feeds) {
    net::TensorClient* client = nullptr;
    {
      std::lock_guard<std::mutex> l(mu_);
      client = client_;
    }
    if (!client) return Unavailable("no data plane in this process");
    AF_RETURN_IF_ERROR(client->send_batch(addr, msgs));
    if (!duplicate_feeds) return Status::OK();
    std::vector<net::TensorMessage> again;
    for (size_t i = 0; i + 1 < msgs.size(); ++i) {
      net::TensorMessage m = msgs[i];
      m.key = split_control(m.key).back();  // the feed's rendezvous key
      again.push_back(std::move(m));
    }
    return again.empty() ? Status::OK() : client->send_batch(addr, again);
  }
  // Step control keys: kControl, then fields separated by kSep (never in device names or handles).
  static constexpr char kControl = '\x01';
  // First character of a reply address that names a connection of this process's TensorServer.
  static constexpr char kChannelToken = '#';
  static constexpr char kSep = '\x1f';
  static std::string control_key(const std::vector<std::string>& fields) {
    std::string k(1, kControl);
    for (size_t i = 0; i < fields.size(); ++i) {
      if (i) k += kSep;
      k += fields[i];
    }
    return k;
  }
  // The frames of a run request: `feeds` for the partition's _Recvs, then the run itself.
  static std::vector<net::TensorMessage> run_request(const std::string& device, const std::string& handle,
                                                     int64_t step_id, const std::string& reply_to,
                                                     const std::string& from_task,
                                                     const std::vector<std::pair<std::string, Tensor>>& feeds) {
    std::vector<net::TensorMessage> msgs(feeds.size() + 1);
    for (size_t i = 0; i < feeds.size(); ++i) {
      msgs[i].step_id = step_id;
      msgs[i].key = control_key({"feed", feeds[i].first});
      msgs[i].tensor = feeds[i].second;
    }
    net::TensorMessage& m = msgs.back();
    m.step_id = step_id;
    m.key = control_key({"run", device, handle, reply_to, from_task});
    m.tensor = Tensor::scalar<int64_t>(0);
    return msgs;
  }
  static std::vector<std::string> split_control(const std::string& key) {
    std::vector<std::string> out;
    size_t start = 1;
    while (true) {
      size_t e = key.find(kSep, start);
      out.push_back(key.substr(start, e == std::string::npos ? std::string::npos : e - start));
      if (e == std::string::npos) break;
      start = e + 1;
    }
    return out;
  }

  // Feeds of dispatched steps whose run request has not been read yet (they precede it in the
  // same write); bounded.
  static constexpr size_t kMaxCarried = 4096;
  std::unordered_map<int64_t, std::vector<std::pair<std::string, Tensor>>> carried_;
  // Connections run requests came on that want their replies there, by token ("#<id>").
  std::unordered_map<std::string, std::weak_ptr<net::ReplyChannel>> channels_;
  InlinePartitions inline_;
  std::atomic<uint64_t> inline_steps_{0};
  size_t channels_pruned_at_ = 16;
  std::mutex mu_;
  caf::actor master_;
  std::shared_ptr<DirectSteps> direct_;
  std::string own_data_addr_;
  const std::string own_task_;
  std::map<std::string, caf::actor> local_;
  std::map<std::string, caf::actor> remote_;
  std::map<std::string, std::string> data_;  // task prefix -> data-plane "host:port"
  net::TensorClient* client_ = nullptr;
  caf::actor self_node_;
};

}  // namespace

// The server's state (include/actorflow/server.h keeps it, and CAF, out of the public header).
struct Server::Impl {
  std::unique_ptr<caf::actor_system_config> own_cfg_;
  std::unique_ptr<caf::actor_system> own_sys_;
  caf::actor_system* sys_ = nullptr;
  std::string target_;
  std::string task_prefix_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<DeviceInfo> device_infos_;
  std::shared_ptr<Router> router_;
  std::shared_ptr<DirectSteps> direct_;
  std::shared_ptr<ResourceManager> resources_;
  caf::actor master_;
  caf::actor node_;
  ClusterSpec cluster_;
  TaskId task_;
  ServerOptions server_options_;
  uint16_t port_ = 0;
  std::shared_ptr<AuthenticatedPeers> auth_peers_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<ControlPlaneListener> control_;  // the task port (cluster mode)
  std::string shutdown_token_;                      // stops node_ (actors/node_actor.h)
  std::shared_ptr<std::atomic<bool>> stopping_flag_ = std::make_shared<std::atomic<bool>>(false);
  std::string routes_key_;
  std::unique_ptr<actorflow::net::TensorServer> data_server_;
  std::unique_ptr<actorflow::net::TensorClient> data_client_;
  std::mutex connect_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
};

Server::Server() : impl_(std::make_unique<Impl>()) {}

const std::string& Server::target() const { return impl_->target_; }
const std::string& Server::task_prefix() const { return impl_->task_prefix_; }
const ClusterSpec& Server::cluster() const { return impl_->cluster_; }
uint16_t Server::port() const { return impl_->port_; }
const ServerOptions& Server::server_options() const { return impl_->server_options_; }
caf::actor_system& Server::system() { return *impl_->sys_; }
caf::actor Server::master() const { return impl_->master_; }
Membership* Server::membership() { return impl_->membership_.get(); }
const std::shared_ptr<ResourceManager>& Server::resources() const { return impl_->resources_; }
const std::vector<DeviceInfo>& Server::devices() const { return impl_->device_infos_; }
std::shared_ptr<DirectSteps> Server::direct_steps() const { return impl_->direct_; }
std::shared_ptr<Router> Server::router() const { return impl_->router_; }

Result<std::unique_ptr<Server>> Server::local(const LocalServerOptions& opts) {
  std::unique_ptr<Server> s(new Server());
  s->impl_->own_cfg_ = std::make_unique<caf::actor_system_config>();
  configure(*s->impl_->own_cfg_);
  s->impl_->own_sys_ = std::make_unique<caf::actor_system>(*s->impl_->own_cfg_);
  s->impl_->sys_ = s->impl_->own_sys_.get();
  DeviceEnumerationOptions d;
  d.cpu_devices = opts.cpu_devices;
  d.visible_devices = opts.visible_devices;
  d.gpu_memory_fraction = opts.gpu_memory_fraction;
  d.allow_growth = opts.allow_growth;
  AF_RETURN_IF_ERROR(s->init("/job:localhost/replica:0/task:0", d));
  return s;
}

Result<std::unique_ptr<Server>> Server::local_in(caf::actor_system& sys, const LocalServerOptions& opts) {
  std::unique_ptr<Server> s(new Server());
  s->impl_->sys_ = &sys;
  DeviceEnumerationOptions d;
  d.cpu_devices = opts.cpu_devices;
  d.visible_devices = opts.visible_devices;
  d.gpu_memory_fraction = opts.gpu_memory_fraction;
  d.allow_growth = opts.allow_growth;
  AF_RETURN_IF_ERROR(s->init("/job:localhost/replica:0/task:0", d));
  return s;
}

Status Server::init(const std::string& task_prefix, const DeviceEnumerationOptions& dopts) {
  static std::atomic<int> counter{0};
  impl_->task_prefix_ = task_prefix;
  AF_ASSIGN_OR_RETURN(impl_->devices_, create_devices(task_prefix, dopts));
  auto router = std::make_shared<LocalRouter>(task_prefix);
  impl_->router_ = router;
  install_variable_actors();
  impl_->resources_ = std::make_shared<ResourceManager>(*impl_->sys_, default_resource_factory());
  for (auto& d : impl_->devices_) {
    caf::actor a = spawn_device_actor(*impl_->sys_, d.get(), impl_->router_, impl_->resources_);
    router->add(d->name(), a);
    DeviceInfo info;
    info.name = d->name();
    info.type = d->type();
    info.memory_limit = d->attributes().memory_limit;
    info.description = d->attributes().description;
    info.actor = a;
    impl_->device_infos_.push_back(info);
  }
  impl_->direct_ = std::make_shared<DirectSteps>();
  impl_->master_ = spawn_master_actor(*impl_->sys_, impl_->device_infos_, task_prefix + "/device:CPU:0", impl_->router_, impl_->direct_);
  router->set_master(impl_->master_, impl_->direct_);
  impl_->target_ = "local://" + std::to_string(++counter);
  std::lock_guard<std::mutex> l(g_registry_mu);
  registry()[impl_->target_] = this;
  return Status::OK();
}

Server* Server::find(const std::string& target) {
  std::lock_guard<std::mutex> l(g_registry_mu);
  auto it = registry().find(target);
  return it == registry().end() ? nullptr : it->second;
}

void Server::join() {
  std::unique_lock<std::mutex> l(impl_->mu_);
  impl_->cv_.wait(l, [this] { return impl_->stopped_; });
}

void Server::stop() {
  {
    std::lock_guard<std::mutex> l(impl_->mu_);
    if (impl_->stopped_) return;
    impl_->stopped_ = true;
  }
  {
    std::lock_guard<std::mutex> l(g_registry_mu);
    registry().erase(impl_->target_);
  }
  if (auto* lr = dynamic_cast<LocalRouter*>(impl_->router_.get())) lr->clear();
  if (impl_->node_) {
    impl_->stopping_flag_->store(true);
    impl_->control_.reset();  // no new connections; BASP forgets the published node actor below
    if (impl_->port_) impl_->sys_->middleman().unpublish(impl_->node_, impl_->port_);
    caf::anon_send(impl_->node_, shutdown_atom::value, impl_->shutdown_token_);
  }
  for (auto& info : impl_->device_infos_) caf::anon_send_exit(info.actor, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(impl_->master_, caf::exit_reason::user_shutdown);
  if (impl_->resources_) impl_->resources_->clear();
  impl_->cv_.notify_all();
}

Server::~Server() {
  stop();
  impl_->membership_.reset();
  impl_->data_server_.reset();
  impl_->data_client_.reset();
  if (impl_->own_sys_) {
    impl_->own_sys_->await_all_actors_done();
  } else {
    // Embedded: wait until our device actors are gone before the devices they borrow die.
    caf::scoped_actor self{*impl_->sys_};
    for (auto& info : impl_->device_infos_) {
      self->wait_for(info.actor);
    }
  }
  impl_->device_infos_.clear();
  impl_->master_ = nullptr;
  impl_->node_ = nullptr;
  impl_->own_sys_.reset();
  impl_->devices_.clear();
}

}  // namespace actorflow

// ---- cluster servers ---------------------------------------------------------------------
namespace actorflow {
namespace {

bool is_loopback_name(const std::string& h) {
  return h == "localhost" || h == "::1" || h == "[::1]" || h.rfind("127.", 0) == 0;
}

}  // namespace

bool is_local_host(const std::string& host) {
  if (is_loopback_name(host) || host == "0.0.0.0") return true;
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) == 0 && host == name) return true;
  struct ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return false;
  bool found = false;
  for (auto* i = ifs; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    char buf[INET6_ADDRSTRLEN] = {0};
    if (i->ifa_addr->sa_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    else if (i->ifa_addr->sa_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf, sizeof buf);
    if (host == buf) found = true;
  }
  freeifaddrs(ifs);
  return found;
}

void Server::configure(caf::actor_system_config& cfg) {
  register_actorflow_types(cfg);
  register_node_types(cfg);
  cfg.load<caf::io::middleman>();
  cfg.set("logger.verbosity", caf::atom("quiet"));
  cfg.set("logger.console", caf::atom("none"));
  // CAF 0.17's default work-stealing scheduler lets idle workers sleep between polls, so every
  // hand-off of a step (session -> master -> device actor -> reply) can wait out a sleep. The
  // sharing policy wakes a worker through a condition variable at once.
  cfg.set("scheduler.policy", caf::atom("sharing"));
  // BASP deserializes incoming messages inline on the middleman's I/O thread instead of handing
  // each to a BASP worker (one more thread hand-off per message on its way to the actor).
  cfg.set("middleman.workers", 0);
}

Result<std::unique_ptr<Server>> Server::create(const ClusterSpec& cluster, const TaskId& task) {
  AF_RETURN_IF_ERROR(cluster.validate_task(task));
  std::unique_ptr<Server> s(new Server());
  s->impl_->own_cfg_ = std::make_unique<caf::actor_system_config>();
  configure(*s->impl_->own_cfg_);
  s->impl_->own_sys_ = std::make_unique<caf::actor_system>(*s->impl_->own_cfg_);
  s->impl_->sys_ = s->impl_->own_sys_.get();
  AF_RETURN_IF_ERROR(s->init_cluster(cluster, task));
  const char* plan_file = std::getenv(kFaultPlanEnv);
  if (plan_file && *plan_file) {
    auto plan = FaultPlan::from_file(plan_file);
    if (!plan.ok()) return plan.status().with_prefix(std::string(kFaultPlanEnv) + "=" + plan_file);
    Status known = check_plan_tasks(*plan, cluster);
    if (!known.ok()) return known.with_prefix(std::string(kFaultPlanEnv) + "=" + plan_file);
    auto loaded = FaultInjector::global().load(*plan, task.device_prefix());
    if (!loaded.ok()) return loaded.status().with_prefix(std::string(kFaultPlanEnv) + "=" + plan_file);
    AF_LOG(INFO) << "fault plan " << plan_file << " (seed " << plan->seed << "): " << loaded->size()
                 << " fault(s) for " << task.to_string();
  }
  return s;
}

Result<std::unique_ptr<Server>> Server::create_in(caf::actor_system& sys, const ClusterSpec& cluster,
                                                  const TaskId& task) {
  AF_RETURN_IF_ERROR(cluster.validate_task(task));
  std::unique_ptr<Server> s(new Server());
  s->impl_->sys_ = &sys;
  AF_RETURN_IF_ERROR(s->init_cluster(cluster, task));
  return s;
}

Status Server::init_cluster(const ClusterSpec& cluster, const TaskId& task) {
  impl_->cluster_ = cluster;
  impl_->task_ = task;
  impl_->server_options_ = cluster.server_options(task);
  AF_ASSIGN_OR_RETURN(std::string address, cluster.task_address(task));
  AF_ASSIGN_OR_RETURN(auto hp, parse_address(address));
  const std::string where = "task " + task.to_string() + " at " + address;
  if (!is_local_host(hp.first))
    return InvalidArgument(where + ": '" + hp.first + "' is not an address of this machine");
  if (!cluster.all_loopback() && cluster.secret().empty() && !cluster.tls())
    return FailedPrecondition("cluster file " + cluster.source() +
                              " has non-loopback addresses: a cluster secret is required (secret_file or "
                              "ACTORFLOW_SECRET), or TLS ([cluster] tls_dir)");
  auto tls_or = cluster_tls(cluster, task.to_string());
  if (!tls_or.ok()) return tls_or.status().with_prefix(where);
  const std::shared_ptr<const net::TlsContext> tls = *tls_or;
  const ServerOptions opts = cluster.server_options(task);
  // Actors restarted in place after an exception follow the cluster's [supervisor] budget.
  set_restart_policy(RestartPolicy{cluster.supervisor().max_restarts, cluster.supervisor().restart_window_secs});
  DeviceEnumerationOptions d;
  d.cpu_devices = opts.cpu_devices;
  d.visible_devices = opts.visible_devices;
  d.gpu_memory_fraction = opts.gpu_memory_fraction;
  d.allow_growth = opts.allow_growth;
  AF_RETURN_IF_ERROR(init(task.device_prefix(), d));
  impl_->auth_peers_ = std::make_shared<AuthenticatedPeers>();
  MembershipConfig mc;
  mc.self_task = impl_->task_prefix_;
  mc.fingerprint = cluster.fingerprint();
  mc.secret = cluster.secret();
  mc.tls = tls;
  mc.connect_timeout = std::chrono::milliseconds(opts.connect_timeout_ms);
  mc.heartbeat_interval = std::chrono::milliseconds(opts.heartbeat_interval_ms);
  mc.peer_timeout = std::chrono::milliseconds(opts.peer_timeout_ms);
  impl_->membership_ = std::make_unique<Membership>(*impl_->sys_, mc);
  impl_->membership_->add_listener(impl_->master_);
  NodeActorConfig nc;
  nc.task = impl_->task_prefix_;
  nc.fingerprint = mc.fingerprint;
  nc.secret = mc.secret;
  nc.devices = impl_->device_infos_;
  nc.peers = impl_->auth_peers_;
  // The handshake deadline of membership (actors/membership.cc) also bounds unauthenticated peers.
  nc.auth_timeout = std::max<std::chrono::milliseconds>(mc.peer_timeout, std::chrono::milliseconds(1000));
  nc.connect_peers = [this](const std::vector<std::string>& tasks) { return connect_tasks(tasks); };
  // Remote client sessions (actors/client_sessions.h) run on this server, under its final target.
  nc.clients = std::make_shared<ClientSessions>("actorflow://" + address);
  // TCP clients of the node's port that never complete CAF's handshake are closed too.
  // So are nodes that connect to it and never authenticate with the node actor.
  std::weak_ptr<AuthenticatedPeers> weak_peers = impl_->auth_peers_;
  nc.sweeper = std::make_shared<SilentConnectionSweeper>(
      *impl_->sys_, nc.auth_timeout, static_cast<uint16_t>(hp.second), [weak_peers](const caf::node_id& n) {
        auto peers = weak_peers.lock();
        return !peers || peers->contains(n);
      });
  // The tensor data plane: its own listener on the task's host (ephemeral port, advertised
  // to authenticated peers in NodeInfo), with its own challenge-response handshake.
  {
    net::TransportOptions topts;
    topts.cluster_fingerprint = mc.fingerprint;
    topts.secret = mc.secret;
    topts.task_name = task.to_string();
    topts.tls = tls;
    // The task's configured address (never all interfaces unless [server] bind says so); peers
    // are told the configured address.
    std::string bind_ip = hp.first == "localhost" ? "127.0.0.1" : hp.first;
    if (bind_ip.size() > 2 && bind_ip.front() == '[') bind_ip = bind_ip.substr(1, bind_ip.size() - 2);
    const std::string advertised = bind_ip;
    if (!opts.bind.empty()) bind_ip = opts.bind;
    auto* router = static_cast<LocalRouter*>(impl_->router_.get());
    auto ds = net::TensorServer::start(topts, bind_ip, 0,
                                       [router](const net::TensorMessage& m) { router->deliver(m); });
    if (!ds.ok()) return ds.status().with_prefix(where + ": tensor data plane");
    impl_->data_server_ = std::move(*ds);
    impl_->data_client_ = std::make_unique<net::TensorClient>(topts);
    nc.data_addr = (advertised.find(':') != std::string::npos ? "[" + advertised + "]" : advertised) + ":" +
                   std::to_string(impl_->data_server_->port());
    router->set_data_client(impl_->data_client_.get(), nc.data_addr);
  }
  impl_->shutdown_token_ = random_nonce();
  nc.shutdown_token = impl_->shutdown_token_;
  impl_->node_ = spawn_node_actor(*impl_->sys_, nc);
  // A node actor that ends while the server runs (exit_reason::kill cannot be refused) leaves a
  // task that serves nothing: say so loudly.
  {
    std::weak_ptr<std::atomic<bool>> stopping = impl_->stopping_flag_;
    const std::string t = impl_->task_prefix_;
    impl_->node_->attach_functor([stopping, t](const caf::error& reason) {
      auto s = stopping.lock();
      if (s && !s->load())
        AF_LOG(ERROR) << "the node actor of " << t << " ended unexpectedly (" << caf::to_string(reason)
                      << "): this task no longer serves its peers";
    });
  }
  static_cast<LocalRouter*>(impl_->router_.get())->set_self_node(impl_->node_);
  // The control plane: CAF's BASP only behind actorflow's handshake (actors/control_plane.h),
  // on the task's configured address, never on every interface.
  {
    std::string bind = hp.first == "localhost" ? "127.0.0.1" : hp.first;
    if (bind.size() > 2 && bind.front() == '[') bind = bind.substr(1, bind.size() - 2);
    if (!opts.bind.empty()) bind = opts.bind;
    ControlPlaneListener::Options co;
    co.handshake.fingerprint = mc.fingerprint;
    co.handshake.secret = mc.secret;
    co.handshake.task_name = task.to_string();
    co.handshake.tls = tls;
    co.handshake_timeout = nc.auth_timeout;
    auto cl = ControlPlaneListener::start(*impl_->sys_, impl_->node_, bind, static_cast<uint16_t>(hp.second), std::move(co));
    if (!cl.ok()) return Unavailable(where + ": cannot listen (" + cl.status().message() + "); is the address already in use?");
    impl_->control_ = std::move(*cl);
    impl_->port_ = impl_->control_->port();
  }
  {
    std::lock_guard<std::mutex> l(g_registry_mu);
    registry().erase(impl_->target_);
    impl_->target_ = "actorflow://" + address;
    registry()[impl_->target_] = this;
  }
  AF_LOG(INFO) << "Started server for " << impl_->task_prefix_ << " at " << address;
  return Status::OK();
}

Status Server::connect_tasks(const std::vector<std::string>& tasks) {
  for (const auto& prefix : tasks) {
    if (prefix == impl_->task_prefix_) continue;
    auto spec = DeviceSpec::parse(prefix);
    if (!spec.ok() || !spec->job || !spec->task)
      return InvalidArgument("malformed task name '" + prefix + "'");
    TaskId t{*spec->job, *spec->task};
    AF_ASSIGN_OR_RETURN(std::string addr, impl_->cluster_.task_address(t));
    AF_ASSIGN_OR_RETURN(PeerInfo p, impl_->membership_->ensure(prefix, addr));
    static_cast<LocalRouter*>(impl_->router_.get())->set_remote(prefix, p.node, p.data_addr);
  }
  return Status::OK();
}

Result<std::vector<DeviceInfo>> Server::cluster_devices_for(const Graph& graph, std::chrono::milliseconds timeout) {
  std::vector<DeviceInfo> out = impl_->device_infos_;
  if (!impl_->membership_) return out;
  // Which tasks does the graph name?
  std::set<std::string> tasks;
  for (int i = 0; i < graph.num_nodes(); ++i) {
    const std::string& req = graph.node(i)->requested_device;
    if (req.empty()) continue;
    auto spec = DeviceSpec::parse(req);
    if (!spec.ok()) continue;  // the placer reports it with the op name
    if (!spec->job) continue;
    if (spec->task) {
      tasks.insert(TaskId{*spec->job, *spec->task}.device_prefix());
    } else {
      for (int idx : impl_->cluster_.task_indices(*spec->job)) tasks.insert(TaskId{*spec->job, idx}.device_prefix());
    }
  }
  tasks.erase(impl_->task_prefix_);
  std::lock_guard<std::mutex> l(impl_->connect_mu_);
  std::vector<PeerInfo> peers;
  for (const auto& prefix : tasks) {
    auto spec = DeviceSpec::parse(prefix);
    TaskId t{*spec->job, *spec->task};
    auto addr = impl_->cluster_.task_address(t);
    if (!addr.ok()) return addr.status();  // placer would say the same; say it early
    AF_ASSIGN_OR_RETURN(PeerInfo p, impl_->membership_->ensure(prefix, *addr, timeout));
    static_cast<LocalRouter*>(impl_->router_.get())->set_remote(prefix, p.node, p.data_addr);
    peers.push_back(p);
  }
  // Every involved task must be able to send to every other: tell them who is involved.
  std::vector<std::string> involved(tasks.begin(), tasks.end());
  involved.push_back(impl_->task_prefix_);
  const std::string key = [&] {
    std::string k = std::to_string(impl_->membership_->epoch()) + "|";
    for (const auto& t : involved) k += t + ",";
    return k;
  }();
  if (key != impl_->routes_key_) {
    caf::scoped_actor self{*impl_->sys_};
    for (const auto& p : peers) {
      Status st;
      self->request(p.node, std::chrono::seconds(60), peers_atom::value, involved)
          .receive([](bool) {}, [&](caf::error& e) { st = from_caf_error(e, "task " + p.task); });
      if (!st.ok()) return st;
    }
    impl_->routes_key_ = key;
  }
  for (const auto& p : peers) out.insert(out.end(), p.devices.begin(), p.devices.end());
  return out;
}

void destroy_server_bounded(std::unique_ptr<Server> server, std::chrono::milliseconds bound, int exit_code_on_timeout) {
  if (!server) return;
  const std::string task = server->task_prefix();
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> l(mu);
    if (cv.wait_for(l, bound, [&] { return done; })) return;
    AF_LOG(ERROR) << task << ": shutdown took longer than " << bound.count() << " ms; exiting";
    std::fflush(nullptr);
    _exit(exit_code_on_timeout);
  });
  server.reset();
  {
    std::lock_guard<std::mutex> l(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
}

}  // namespace actorflow
