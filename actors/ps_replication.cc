#include "actors/ps_replication.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "actors/auth.h"
#include "actors/membership.h"
#include "core/logging.h"

namespace actorflow {
namespace {

template <class T>
void put(std::string& out, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_str(std::string& out, const std::string& s) {
  put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out += s;
}

// Reads from [p, end); every read is bounds-checked.
struct Reader {
  const char* p;
  const char* end;
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    if (static_cast<size_t>(end - p) < sizeof(T)) {
      ok = false;
      return v;
    }
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  std::string str() {
    const uint32_t n = get<uint32_t>();
    if (!ok || static_cast<size_t>(end - p) < n) {
      ok = false;
      return {};
    }
    std::string s(p, n);
    p += n;
    return s;
  }
};

}  // namespace

std::string encode_call_attrs(const AttrMap& attrs) {
  std::string out;
  for (const auto& [name, v] : attrs.all()) {
    if (std::holds_alternative<Tensor>(v)) continue;
    put_str(out, name);
    if (auto* x = std::get_if<int64_t>(&v)) {
      out += 'i';
      put<int64_t>(out, *x);
    } else if (auto* d = std::get_if<double>(&v)) {
      out += 'd';
      put<double>(out, *d);
    } else if (auto* b = std::get_if<bool>(&v)) {
      out += 'b';
      put<uint8_t>(out, *b ? 1 : 0);
    } else if (auto* s = std::get_if<std::string>(&v)) {
      out += 's';
      put_str(out, *s);
    } else if (auto* t = std::get_if<DType>(&v)) {
      out += 't';
      put<int32_t>(out, static_cast<int32_t>(*t));
    } else if (auto* sh = std::get_if<Shape>(&v)) {
      out += 'h';
      put<uint8_t>(out, sh->unknown_rank() ? 1 : 0);
      put<uint32_t>(out, static_cast<uint32_t>(sh->dims().size()));
      for (int64_t dim : sh->dims()) put<int64_t>(out, dim);
    } else if (auto* li = std::get_if<std::vector<int64_t>>(&v)) {
      out += 'I';
      put<uint32_t>(out, static_cast<uint32_t>(li->size()));
      for (int64_t x2 : *li) put<int64_t>(out, x2);
    } else if (auto* ls = std::get_if<std::vector<std::string>>(&v)) {
      out += 'S';
      put<uint32_t>(out, static_cast<uint32_t>(ls->size()));
      for (const auto& s2 : *ls) put_str(out, s2);
    }
  }
  return out;
}

Result<AttrMap> decode_call_attrs(const std::string& bytes) {
  AttrMap out;
  Reader r{bytes.data(), bytes.data() + bytes.size()};
  auto bad = [] { return InvalidArgument("replicated call: malformed attributes"); };
  while (r.ok && r.p != r.end) {
    const std::string name = r.str();
    const char tag = r.get<char>();
    if (!r.ok) return bad();
    switch (tag) {
      case 'i': out.set(name, r.get<int64_t>()); break;
      case 'd': out.set(name, r.get<double>()); break;
      case 'b': out.set(name, r.get<uint8_t>() != 0); break;
      case 's': out.set(name, r.str()); break;
      case 't': out.set(name, static_cast<DType>(r.get<int32_t>())); break;
      case 'h': {
        const bool unknown = r.get<uint8_t>() != 0;
        const uint32_t n = r.get<uint32_t>();
        if (!r.ok || n > 64) return bad();
        std::vector<int64_t> dims;
        for (uint32_t i = 0; i < n && r.ok; ++i) dims.push_back(r.get<int64_t>());
        out.set(name, unknown ? Shape::unknown() : Shape(std::move(dims)));
        break;
      }
      case 'I': {
        const uint32_t n = r.get<uint32_t>();
        if (!r.ok || n > bytes.size()) return bad();
        std::vector<int64_t> l;
        for (uint32_t i = 0; i < n && r.ok; ++i) l.push_back(r.get<int64_t>());
        out.set(name, std::move(l));
        break;
      }
      case 'S': {
        const uint32_t n = r.get<uint32_t>();
        if (!r.ok || n > bytes.size()) return bad();
        std::vector<std::string> l;
        for (uint32_t i = 0; i < n && r.ok; ++i) l.push_back(r.str());
        out.set(name, std::move(l));
        break;
      }
      default: return bad();
    }
  }
  if (!r.ok) return bad();
  return out;
}

PsReplicator::PsReplicator(std::string own_task, std::string backup_task, std::string backup_address,
                           std::chrono::milliseconds timeout)
    : own_task_(std::move(own_task)),
      backup_task_(std::move(backup_task)),
      backup_address_(std::move(backup_address)),
      instance_(random_nonce()),
      timeout_(timeout) {}

void PsReplicator::primary_seen(const std::string& task) {
  std::lock_guard<std::mutex> l(mu_);
  primaries_alive_.insert(task);
  taken_over_.erase(task);
}

std::vector<std::string> PsReplicator::taken_over() const {
  std::lock_guard<std::mutex> l(mu_);
  return {taken_over_.begin(), taken_over_.end()};
}

void PsReplicator::set_on_connect(std::function<void(const std::vector<std::string>&)> f) {
  std::lock_guard<std::mutex> l(mu_);
  on_connect_ = std::move(f);
}

void PsReplicator::primary_lost(const std::string& task) {
  bool was;
  {
    std::lock_guard<std::mutex> l(mu_);
    was = primaries_alive_.erase(task) > 0;
    if (was) taken_over_.insert(task);
  }
  if (was) {
    AF_LOG(WARNING) << "ps replication: primary " << task << " is gone; its copies here take over at their first update";
  }
}

bool PsReplicator::primary_alive(const std::string& task) const {
  std::lock_guard<std::mutex> l(mu_);
  return primaries_alive_.count(task) > 0;
}

PsServing::PsServing(std::vector<std::string> ps_tasks) : ps_(std::move(ps_tasks)) {
  for (const auto& t : ps_) serving_[t] = t;
}

bool PsServing::move_all(const std::string& from, const std::string& to) {
  bool changed = false;
  for (auto& [task, server] : serving_) {
    if (server == from && server != to) {
      server = to;
      changed = true;
    }
  }
  if (changed) ++generation_;
  return changed;
}

bool PsServing::task_down(const std::string& task) {
  std::lock_guard<std::mutex> l(mu_);
  auto at = std::find(ps_.begin(), ps_.end(), task);
  if (at == ps_.end() || ps_.size() < 2) return false;
  const std::string& backup = (at + 1 == ps_.end()) ? ps_.front() : *(at + 1);
  return move_all(task, backup);
}

bool PsServing::redirect(const std::string& copy_task, const std::string& primary_task) {
  std::lock_guard<std::mutex> l(mu_);
  if (!serving_.count(copy_task) || !serving_.count(primary_task)) return false;
  return move_all(copy_task, primary_task);
}

bool PsServing::serves(const std::string& task) const {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [from, server] : serving_)
    if (server == task) return true;
  return false;
}

bool PsServing::follow_claims(const std::map<std::string, std::vector<std::string>>& claims) {
  auto claimed_by = [&](const std::string& claimant, const std::string& task) {
    auto c = claims.find(claimant);
    return c != claims.end() && std::find(c->second.begin(), c->second.end(), task) != c->second.end();
  };
  std::lock_guard<std::mutex> l(mu_);
  bool changed = false;
  for (size_t i = 0; i < ps_.size(); ++i) {
    const std::string& task = ps_[i];
    std::string& server = serving_[task];
    std::string next = server;
    bool claimed = false;
    for (size_t k = 1; k < ps_.size() && !claimed; ++k) {
      const std::string& other = ps_[(i + k) % ps_.size()];
      if (claimed_by(other, task)) {
        next = other;
        claimed = true;
      }
    }
    if (!claimed && (claims.count(task) || claims.count(server))) next = task;
    if (next != server) {
      server = next;
      changed = true;
    }
  }
  if (changed) ++generation_;
  return changed;
}

std::string PsServing::server_of(const std::string& task) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = serving_.find(task);
  return it == serving_.end() ? task : it->second;
}

std::vector<std::string> PsServing::served_by(const std::string& task) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> out;
  for (const auto& t : ps_) {
    auto it = serving_.find(t);
    if (t != task && it != serving_.end() && it->second == task) out.push_back(t);
  }
  return out;
}

std::map<std::string, std::string> PsServing::aliases() const {
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, std::string> out;
  for (const auto& [task, server] : serving_)
    if (task != server) out[task] = server;
  return out;
}

uint64_t PsServing::generation() const {
  std::lock_guard<std::mutex> l(mu_);
  return generation_;
}

namespace {
// Never the start of a rendezvous key (those start with a device name, "/job:...").
constexpr char kReplicaFramePrefix[] = "!replica;";

// Parses a decimal size_t at s[*pos..] up to ';' (moves *pos past it). False on anything else.
bool parse_field(const std::string& s, size_t* pos, size_t* v) {
  const size_t semi = s.find(';', *pos);
  if (semi == std::string::npos || semi == *pos || semi - *pos > 6) return false;
  size_t x = 0;
  for (size_t i = *pos; i < semi; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    x = x * 10 + static_cast<size_t>(s[i] - '0');
  }
  *v = x;
  *pos = semi + 1;
  return true;
}
}  // namespace

ReplicaInbox::ReplicaInbox(size_t max_bytes, std::chrono::milliseconds ttl) : max_bytes_(max_bytes), ttl_(ttl) {}

bool ReplicaInbox::is_replica_frame(const net::Frame& m) {
  return (m.as<net::TensorFrame>() || m.as<net::ErrorFrame>()) &&
         net::frame_name(m.body).compare(0, sizeof(kReplicaFramePrefix) - 1, kReplicaFramePrefix) == 0;
}

std::string ReplicaInbox::frame_key(size_t i, size_t n, const std::string& call_key) {
  return kReplicaFramePrefix + std::to_string(i) + ";" + std::to_string(n) + ";" + call_key;
}

bool ReplicaInbox::valid_call_key(const std::string& call_key) {
  return !call_key.empty() && call_key.size() <= kMaxCallKeyBytes;
}

void ReplicaInbox::expire_locked(std::chrono::steady_clock::time_point now) {
  for (auto it = calls_.begin(); it != calls_.end();) {
    if (it->second.n > 0 && now - it->second.first > ttl_) {
      AF_LOG(WARNING) << "ps replication: dropped the tensors of replicated call " << it->first << " (not taken within "
                      << ttl_.count() << " ms)";
      bytes_ -= it->second.bytes;
      it = calls_.erase(it);
    } else {
      ++it;
    }
  }
}

void ReplicaInbox::put(const net::Frame& m) {
  const std::string from = m.reply ? m.reply->peer() : std::string("a peer");
  if (const auto* e = m.as<net::ErrorFrame>()) {
    AF_LOG(WARNING) << "ps replication: dropped a replica frame from " << from << " (key '" << e->key.substr(0, 80)
                    << "'): " << e->error;
    return;
  }
  const auto* t = m.as<net::TensorFrame>();
  size_t pos = sizeof(kReplicaFramePrefix) - 1, i = 0, n = 0;
  if (!t || !is_replica_frame(m) || !parse_field(t->key, &pos, &i) || !parse_field(t->key, &pos, &n) ||
      pos == t->key.size() || n == 0 || n > kMaxArgs || i >= kMaxArgs || !t->tensor.is_initialized()) {
    AF_LOG(WARNING) << "ps replication: dropped a malformed replica frame from " << from << " (key '"
                    << (t ? t->key.substr(0, 80) : std::string()) << "')";
    return;
  }
  const std::string& key = t->key;
  const Tensor& tensor = t->tensor;
  const std::string call_key = key.substr(pos);
  std::function<void()> ready;
  {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = std::chrono::steady_clock::now();
    expire_locked(now);
    Entry& e = calls_[call_key];
    const bool dup = std::any_of(e.tensors.begin(), e.tensors.end(), [&](const auto& t) { return t.first == i; });
    std::string why;
    if (e.n != 0 && e.n != n) why = "its count " + std::to_string(n) + " disagrees with the call's " + std::to_string(e.n);
    else if (dup) why = "argument " + std::to_string(i) + " came twice";
    else if (e.tensors.size() >= n) why = "more than " + std::to_string(n) + " arguments";
    else if (bytes_ + tensor.bytes() > max_bytes_) why = "the inbox holds " + std::to_string(bytes_) + " bytes already";
    if (!why.empty()) {
      AF_LOG(WARNING) << "ps replication: dropped a replica frame of call " << call_key.substr(0, 120) << " from " << from
                      << ": " << why;
      if (e.n == 0 && !e.ready) calls_.erase(call_key);
      return;
    }
    if (e.n == 0) {
      e.n = n;
      e.first = now;
    }
    if (!said_first_) {
      said_first_ = true;
      AF_LOG(INFO) << "ps replication: tensors of replicated calls arrive over the data plane from " << from;
    }
    e.tensors.emplace_back(i, tensor);
    e.bytes += tensor.bytes();
    bytes_ += tensor.bytes();
    if (e.tensors.size() == e.n && e.ready) ready = std::move(e.ready);
  }
  if (ready) ready();
}

bool ReplicaInbox::take(const std::string& call_key, size_t n, std::vector<std::pair<size_t, Tensor>>* out) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = calls_.find(call_key);
  if (it == calls_.end() || it->second.n != n || it->second.tensors.size() != n) return false;
  *out = std::move(it->second.tensors);
  bytes_ -= it->second.bytes;
  calls_.erase(it);
  return true;
}

void ReplicaInbox::notify(const std::string& call_key, std::function<void()> ready) {
  {
    std::lock_guard<std::mutex> l(mu_);
    Entry& e = calls_[call_key];
    if (e.n == 0 || e.tensors.size() != e.n) {
      e.ready = std::move(ready);
      return;
    }
  }
  ready();
}

void ReplicaInbox::forget(const std::string& call_key) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = calls_.find(call_key);
  if (it == calls_.end()) return;
  bytes_ -= it->second.bytes;
  calls_.erase(it);
}

size_t ReplicaInbox::held_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return bytes_;
}

size_t ReplicaInbox::held_calls() const {
  std::lock_guard<std::mutex> l(mu_);
  return calls_.size();
}

PsReplicator::~PsReplicator() { stop(); }

void PsReplicator::start(Membership* membership, std::optional<net::TransportOptions> data) {
  membership_ = membership;
  if (data) {
    // A stalled backup fails a send within the peer timeout, as it fails a call.
    data->io_timeout = timeout_;
    data->connect_timeout = std::max(timeout_, std::chrono::milliseconds(1000));
    data_ = std::make_unique<net::TensorClient>(*data);
  }
  thread_ = std::thread([this] { run(); });
}

void PsReplicator::send_tensors(uint64_t epoch, const std::string& call_key,
                                std::vector<std::pair<size_t, Tensor>> tensors) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_ || epoch != epoch_ || !node_) return;
    outgoing_.push_back(Outgoing{epoch, call_key, std::move(tensors)});
  }
  cv_.notify_all();
}

void PsReplicator::send_now(const Outgoing& o, const std::string& data_addr) {
  std::vector<net::Frame> frames;
  frames.reserve(o.tensors.size());
  for (const auto& [index, t] : o.tensors)
    frames.emplace_back(0, ReplicaInbox::frame_key(index, o.tensors.size(), o.call_key), t);
  Status s = data_->send_batch(data_addr, frames);
  if (!s.ok()) {
    data_->disconnect(data_addr);
    backup_failed(o.epoch, "data plane: " + s.message());
  }
}

void PsReplicator::stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    node_ = node_actor_t();
    outgoing_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

PsReplicator::Backup PsReplicator::backup() const {
  std::lock_guard<std::mutex> l(mu_);
  return Backup{node_, epoch_, node_ ? data_addr_ : std::string()};
}

void PsReplicator::backup_failed(uint64_t epoch, const std::string& why) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (epoch != epoch_ || !node_) return;
    node_ = node_actor_t();
    outgoing_.clear();
  }
  AF_LOG(WARNING) << "ps replication: backup " << backup_task_ << " failed (" << why
                  << "); serving without it until it is back";
  cv_.notify_all();
}

void PsReplicator::run() {
  // Between attempts while the backup is away: a retry backoff (Membership::ensure itself is
  // bounded by the peer timeout), cut short by stop().
  const auto backoff = std::chrono::milliseconds(200);
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    if (node_) {
      cv_.wait(l, [&] { return stopping_ || !node_ || !outgoing_.empty(); });
      if (stopping_ || !node_ || outgoing_.empty()) continue;
      // The tensors of replicated calls, in order, while the connection lasts.
      Outgoing o = std::move(outgoing_.front());
      outgoing_.pop_front();
      if (o.epoch != epoch_) continue;
      const std::string addr = data_addr_;
      l.unlock();
      send_now(o, addr);
      l.lock();
      continue;
    }
    l.unlock();
    auto p = membership_->ensure(backup_task_, backup_address_, std::max(timeout_, std::chrono::milliseconds(1000)),
                                 /*quiet=*/true);
    l.lock();
    if (stopping_) break;
    if (p.ok() && p->node) {
      node_ = p->node;
      ++epoch_;
      data_addr_ = data_ ? p->data_addr : std::string();
      if (!data_addr_.empty()) {
        data_->expect_task(data_addr_, backup_task_);
        AF_LOG(INFO) << "ps replication: replicated tensors go to " << backup_task_ << "'s data plane at " << data_addr_;
      }
      AF_LOG(INFO) << "ps replication: backup " << backup_task_ << " connected (epoch " << epoch_ << ")";
      if (on_connect_) {
        auto f = on_connect_;
        const std::vector<std::string> serves_for = p->serves_for;
        l.unlock();
        f(serves_for);
        l.lock();
      }
      continue;
    }
    cv_.wait_for(l, backoff, [&] { return stopping_; });
  }
}

}  // namespace actorflow
