#include "actors/client_reply_budget.h"

#include <caf/io/all.hpp>
#include <caf/io/basp_broker.hpp>

#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <future>

#include "core/env.h"
#include "core/logging.h"
#include "core/metrics.h"
#include "actors/control_plane.h"
#include "actors/node_actor.h"

namespace actorflow {
namespace {

// The BASP broker of `mm`, on its own thread; null when it is gone.
caf::io::basp_broker* basp(caf::io::middleman* mm) {
  caf::actor handle = mm->named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  auto* broker = static_cast<caf::io::basp_broker*>(caf::actor_cast<caf::abstract_actor*>(handle));
  if (broker == nullptr || broker->getf(caf::abstract_actor::is_terminated_flag)) return nullptr;
  return broker;
}

// Closes the connection `hdl` of `broker` hard, on the middleman thread: what CAF queued is
// dropped (a graceful close would wait to write it, forever), and the kernel resets the
// connection instead of keeping the unsent bytes. Logs `why` and counts the close.
void close_hard(caf::io::basp_broker* broker, caf::io::connection_handle hdl, const std::string& why) {
  static Counter& closed = Metrics::global().counter(
      "actorflow_client_connections_closed_total", "Client connections closed for not reading their replies");
  closed.inc();
  AF_LOG(WARNING) << why;
  // CAF 0.17's default multiplexer uses the socket descriptor as the handle id.
  const int fd = static_cast<int>(hdl.id());
  linger lg{1, 0};
  (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  (void)::shutdown(fd, SHUT_RDWR);
  broker->connection_cleanup(hdl, caf::sec::none);
  broker->close(hdl);
}

}  // namespace

ClientReplyBudget::Limits ClientReplyBudget::limits_from_env() {
  Limits l;
  l.max_backlog_bytes = static_cast<size_t>(
      positive_env_int("ACTORFLOW_MAX_CLIENT_BACKLOG_BYTES", static_cast<int64_t>(l.max_backlog_bytes)));
  l.max_runs = static_cast<int>(std::min<int64_t>(positive_env_int("ACTORFLOW_MAX_CLIENT_RUNS", l.max_runs), 1 << 20));
  return l;
}

std::shared_ptr<ClientReplyBudget> ClientReplyBudget::create(caf::actor_system& sys, Limits limits) {
  return std::shared_ptr<ClientReplyBudget>(new ClientReplyBudget(sys, limits));
}

Status ClientReplyBudget::begin_run(const caf::node_id& client, const std::string& who) {
  std::lock_guard<std::mutex> l(mu_);
  int& n = runs_[client];
  if (n >= limits_.max_runs) {
    static Counter& refused = Metrics::global().counter(
        "actorflow_client_runs_refused_total", "Client runs refused: the client had its limit of runs in flight");
    refused.inc();
    return ResourceExhausted("client " + who + " already has " + std::to_string(n) +
                             " runs in flight on this task (limit " + std::to_string(limits_.max_runs) +
                             ", ACTORFLOW_MAX_CLIENT_RUNS); wait for their replies");
  }
  ++n;
  return Status::OK();
}

void ClientReplyBudget::end_run(const caf::node_id& client) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = runs_.find(client);
  if (it != runs_.end() && --it->second <= 0) runs_.erase(it);
}

Status ClientReplyBudget::admit(const caf::node_id& client, const std::string& who, size_t bytes) {
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> answer = done->get_future();
  auto* mm = &sys_.middleman();
  std::weak_ptr<ClientReplyBudget> weak = weak_from_this();
  // On the middleman thread: the broker's write buffer is only ever touched there, and so are
  // admitted_'s checks, so two replies cannot both pass on the same room.
  mm->run_later([mm, weak, client, who, bytes, done] {
    auto self = weak.lock();
    caf::io::basp_broker* broker = self ? basp(mm) : nullptr;
    if (!broker) {
      done->set_value(Status::OK());
      return;
    }
    auto hdl = broker->instance.tbl().lookup_direct(client);
    if (!hdl) {  // no direct connection: the reply cannot pile up here
      done->set_value(Status::OK());
      return;
    }
    const size_t queued = broker->wr_buf(*hdl).size();
    std::lock_guard<std::mutex> l(self->mu_);
    size_t& admitted = self->admitted_[client];
    const size_t backlog = queued + admitted;
    const size_t limit = self->limits_.max_backlog_bytes;
    if (backlog == 0 || backlog + bytes <= limit) {
      admitted += bytes;
      if (backlog == 0 && bytes > limit) self->oversize_[client] = bytes;  // goes out alone
      done->set_value(Status::OK());
      return;
    }
    if (admitted == 0) self->admitted_.erase(client);
    self->oversize_.erase(client);
    const std::string why = "client " + who + " does not read its replies: " + std::to_string(backlog) +
                            " bytes are queued for it and a reply of " + std::to_string(bytes) +
                            " bytes would pass the limit of " + std::to_string(limit) +
                            " bytes (ACTORFLOW_MAX_CLIENT_BACKLOG_BYTES); its connection was closed";
    close_hard(broker, *hdl, why);
    done->set_value(ResourceExhausted(why));
  });
  if (answer.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    AF_LOG(WARNING) << "client " << who << ": the middleman did not answer within 10 s; its reply of " << bytes
                    << " bytes goes out unchecked";
    return Status::OK();
  }
  Status s = answer.get();
  return s;
}

void ClientReplyBudget::release(const caf::node_id& client, size_t bytes) {
  auto* mm = &sys_.middleman();
  std::weak_ptr<ClientReplyBudget> weak = weak_from_this();
  // Posted after the reply went to the broker's mailbox, so it is (usually) counted in the write
  // buffer by the time the admitted bytes stop counting.
  mm->run_later([weak, client, bytes] {
    auto self = weak.lock();
    if (!self) return;
    std::lock_guard<std::mutex> l(self->mu_);
    auto it = self->admitted_.find(client);
    if (it == self->admitted_.end()) return;
    it->second = it->second > bytes ? it->second - bytes : 0;
    if (it->second == 0) self->admitted_.erase(it);
  });
}

}  // namespace actorflow

namespace actorflow {

void ClientReplyBudget::note_request(const caf::node_id& from) {
  if (!from || from == sys_.node()) return;  // this process's own sessions reply in memory
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!checks_queued_.insert(from).second) return;  // one queued check per node is enough
  }
  auto* mm = &sys_.middleman();
  std::weak_ptr<ClientReplyBudget> weak = weak_from_this();
  mm->run_later([mm, weak, from] {
    auto self = weak.lock();
    if (!self) return;
    {
      std::lock_guard<std::mutex> l(self->mu_);
      self->checks_queued_.erase(from);
    }
    caf::io::basp_broker* broker = basp(mm);
    if (!broker) return;
    auto hdl = broker->instance.tbl().lookup_direct(from);
    if (!hdl) return;  // no direct connection: nothing of it is queued here
    const std::string task = connection_task(static_cast<int>(hdl->id()));
    if (peer_role(task) == PeerRole::kMember) return;  // members are trusted with their backlog
    const size_t queued = broker->wr_buf(*hdl).size();
    std::lock_guard<std::mutex> l(self->mu_);
    auto a = self->admitted_.find(from);
    const size_t backlog = queued + (a == self->admitted_.end() ? 0 : a->second);
    const size_t limit = self->limits_.max_backlog_bytes;
    auto big = self->oversize_.find(from);
    if (backlog <= limit) {
      if (big != self->oversize_.end()) self->oversize_.erase(big);
      return;
    }
    if (big != self->oversize_.end() && backlog <= limit + big->second) return;  // that reply drains
    if (big != self->oversize_.end()) self->oversize_.erase(big);
    if (a != self->admitted_.end()) self->admitted_.erase(a);
    const std::string who =
        (task.empty() ? std::string("of unknown name") : task) + " (node " + caf::to_string(from) + ")";
    close_hard(broker, *hdl,
               "client " + who + " does not read its replies: " + std::to_string(backlog) +
                   " bytes are queued for it, past the limit of " + std::to_string(limit) +
                   " bytes (ACTORFLOW_MAX_CLIENT_BACKLOG_BYTES); its connection was closed");
  });
}

}  // namespace actorflow
