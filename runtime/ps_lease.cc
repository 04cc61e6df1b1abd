#include "runtime/ps_lease.h"

#include <algorithm>
#include <utility>

namespace actorflow {

namespace {

constexpr size_t kMaxBackups = 8;
constexpr size_t kMaxNameBytes = 1024;

long long ms_between(LeaseClock::time_point from, LeaseClock::time_point to) {
  return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count());
}

LeaseAnswer refuse(const ShardTerm& current, std::string why) {
  LeaseAnswer a;
  a.current = current;
  a.why = std::move(why);
  return a;
}

}  // namespace

std::string to_string(const ShardTerm& t) {
  std::string s = "term " + std::to_string(t.term) + " owner " + (t.owner.empty() ? "(none)" : t.owner) + " backups [";
  for (size_t i = 0; i < t.backups.size(); ++i) s += (i ? ", " : "") + t.backups[i];
  return s + "]";
}

Status validate(const LeaseRequest& r) {
  if (r.shard.empty() || r.shard.size() > kMaxNameBytes)
    return InvalidArgument("lease request: the shard must be a task name of 1 to 1024 bytes");
  const std::string where = "lease request for shard " + r.shard + ": ";
  if (r.want.term < 1) return InvalidArgument(where + "term must be >= 1, got " + std::to_string(r.want.term));
  if (r.want.owner.empty() || r.want.owner.size() > kMaxNameBytes)
    return InvalidArgument(where + "the owner must be a task name of 1 to 1024 bytes");
  if (r.want.backups.size() > kMaxBackups)
    return InvalidArgument(where + "at most 8 backups, got " + std::to_string(r.want.backups.size()));
  if (r.base.term < 0 || r.base.owner.size() > kMaxNameBytes || r.base.backups.size() > kMaxBackups)
    return InvalidArgument(where + "the base term must be >= 0 with an owner of at most 1024 bytes and at most 8 backups");
  for (const auto& b : r.base.backups)
    if (b.size() > kMaxNameBytes) return InvalidArgument(where + "a base backup's name is longer than 1024 bytes");
  std::set<std::string> seen;
  for (const auto& b : r.want.backups) {
    if (b.empty() || b.size() > kMaxNameBytes) return InvalidArgument(where + "a backup must be a task name of 1 to 1024 bytes");
    if (b == r.want.owner) return InvalidArgument(where + "the owner " + b + " is also listed as its own backup");
    if (!seen.insert(b).second) return InvalidArgument(where + "backup " + b + " is listed twice");
  }
  return Status::OK();
}

LeaseVoter::LeaseVoter(std::chrono::milliseconds lease, LeaseClock::time_point started,
                       std::map<std::string, ShardTerm> initial)
    : lease_(lease), quiet_until_(started + lease) {
  for (auto& [shard, term] : initial) shards_[shard].term = std::move(term);
}

LeaseAnswer LeaseVoter::request(const LeaseRequest& r, LeaseClock::time_point now) {
  if (Status s = validate(r); !s.ok()) return refuse(current(r.shard), s.message());
  auto it = shards_.find(r.shard);
  if (it == shards_.end()) return refuse(ShardTerm{}, "shard " + r.shard + " is not known to this voter");
  Record& rec = it->second;
  const ShardTerm& cur = rec.term;
  const std::string asked = "shard " + r.shard + ": asked " + to_string(r.want) + ", ";
  if (now < quiet_until_)
    return refuse(cur, asked + "but this voter started less than a lease ago (it grants again in " +
                           std::to_string(ms_between(now, quiet_until_)) + " ms)");
  if (r.want.term < cur.term) return refuse(cur, asked + "but " + to_string(cur) + " is newer");
  if (r.want.term == cur.term && r.want.owner != cur.owner)
    return refuse(cur, asked + "but that term belongs to " + cur.owner);
  if (r.want.owner != rec.promised_to && now < rec.until)
    return refuse(cur, asked + "but this voter promised " + rec.promised_to + " the shard for " +
                           std::to_string(ms_between(now, rec.until)) + " ms more");
  if (r.want.term > cur.term && !r.restore) {
    if (r.base != cur)
      return refuse(cur, asked + "following " + to_string(r.base) + ", but this voter records " + to_string(cur));
    const bool listed =
        r.want.owner == cur.owner || std::find(cur.backups.begin(), cur.backups.end(), r.want.owner) != cur.backups.end();
    if (!listed)
      return refuse(cur, asked + "but " + r.want.owner + " is not a copy that " + to_string(cur) +
                             " lists (it may lack acknowledged updates)");
  }
  // Granted: a renewal (the owner may change the copies it waits for: a backup out of date, or
  // back in sync; its term, its call), or a new term.
  rec.term = r.want;
  rec.until = r.want.owner == rec.promised_to ? std::max(rec.until, now + lease_) : now + lease_;
  rec.promised_to = r.want.owner;
  LeaseAnswer a;
  a.granted = true;
  a.current = rec.term;
  return a;
}

bool LeaseVoter::learn(const std::string& shard, const ShardTerm& t) {
  auto it = shards_.find(shard);
  if (it == shards_.end() || t.term <= it->second.term.term || t.owner.empty()) return false;
  it->second.term = t;
  return true;
}

ShardTerm LeaseVoter::current(const std::string& shard) const {
  auto it = shards_.find(shard);
  return it == shards_.end() ? ShardTerm{} : it->second.term;
}

LeaseClock::time_point LeaseVoter::promised_until(const std::string& shard) const {
  auto it = shards_.find(shard);
  return it == shards_.end() ? LeaseClock::time_point{} : it->second.until;
}

LeaseRound::LeaseRound(LeaseRequest request, std::set<std::string> voters, LeaseClock::time_point sent,
                       std::chrono::milliseconds lease, double drift)
    : request_(std::move(request)),
      voters_(std::move(voters)),
      sent_(sent),
      lease_(lease),
      drift_(std::clamp(drift, 0.0, 0.49)) {
  if (voters_.empty()) state_ = State::kRefused;
}

LeaseRound::State LeaseRound::answer(const std::string& voter, const LeaseAnswer& a) {
  if (!voters_.count(voter) || !answered_.insert(voter).second) return state_;
  // The newest record named; of equal terms, one that refused the asker with another owner.
  if (a.current.term > newest_.term ||
      (a.current.term == newest_.term && !a.granted && a.current.owner != request_.want.owner))
    newest_ = a.current;
  if (a.granted) {
    ++granted_;
  } else {
    ++refused_;
    refusals_ += (refusals_.empty() ? "" : "; ") + voter + ": " + a.why;
  }
  const size_t majority = voters_.size() / 2 + 1;
  if (newest_.term > request_.want.term) {
    state_ = State::kDeposed;  // a majority granted a newer term somewhere: this one is over
  } else if (state_ == State::kPending) {
    if (granted_ >= majority) state_ = State::kGranted;
    else if (refused_ > voters_.size() - majority) state_ = State::kRefused;
  }
  return state_;
}

LeaseClock::time_point LeaseRound::valid_until() const {
  if (state_ != State::kGranted) return sent_;
  const auto valid = std::chrono::duration_cast<LeaseClock::duration>(lease_ * (1.0 - drift_));
  return sent_ + valid;
}

std::string LeaseRound::refusals() const { return refusals_; }

std::optional<ShardTerm> newest_term(const std::vector<ShardTerm>& records) {
  std::optional<ShardTerm> best;
  for (const auto& r : records)
    if (r.term > 0 && (!best || r.term > best->term)) best = r;
  return best;
}

}  // namespace actorflow
