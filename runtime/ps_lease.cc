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

bool bad_name(const std::string& s) { return s.empty() || s.size() > kMaxNameBytes; }

}  // namespace

std::string to_string(const ShardTerm& t) {
  std::string s = "term " + std::to_string(t.term) + " owner " + (t.owner.empty() ? "(none)" : t.owner) + " backups [";
  for (size_t i = 0; i < t.backups.size(); ++i) s += (i ? ", " : "") + t.backups[i];
  s += "]";
  if (t.version != 0) s += " version " + std::to_string(t.version);
  return s;
}

Status validate(const LeaseRequest& r) {
  if (bad_name(r.shard)) return InvalidArgument("lease request: the shard must be a task name of 1 to 1024 bytes");
  const std::string where = "lease request for shard " + r.shard + ": ";
  if (r.want.term < 1) return InvalidArgument(where + "term must be >= 1, got " + std::to_string(r.want.term));
  if (r.want.version < 0) return InvalidArgument(where + "version must be >= 0, got " + std::to_string(r.want.version));
  if (bad_name(r.want.owner)) return InvalidArgument(where + "the owner must be a task name of 1 to 1024 bytes");
  if (r.want.backups.size() > kMaxBackups)
    return InvalidArgument(where + "at most 8 backups, got " + std::to_string(r.want.backups.size()));
  std::set<std::string> seen;
  for (const auto& b : r.want.backups) {
    if (bad_name(b)) return InvalidArgument(where + "a backup must be a task name of 1 to 1024 bytes");
    if (b == r.want.owner) return InvalidArgument(where + "the owner " + b + " is also listed as its own backup");
    if (!seen.insert(b).second) return InvalidArgument(where + "backup " + b + " is listed twice");
  }
  return Status::OK();
}

Status validate(const PrepareRequest& r) {
  if (bad_name(r.shard)) return InvalidArgument("prepare request: the shard must be a task name of 1 to 1024 bytes");
  const std::string where = "prepare request for shard " + r.shard + ": ";
  if (r.term < 1) return InvalidArgument(where + "term must be >= 1, got " + std::to_string(r.term));
  if (bad_name(r.candidate)) return InvalidArgument(where + "the candidate must be a task name of 1 to 1024 bytes");
  return Status::OK();
}

LeaseVoter::LeaseVoter(std::chrono::milliseconds lease, LeaseClock::time_point started,
                       std::map<std::string, ShardTerm> initial)
    : lease_(lease), quiet_until_(started + lease) {
  for (auto& [shard, term] : initial) shards_[shard].v.accepted = std::move(term);
}

std::optional<LeaseAnswer> LeaseVoter::blocked(const std::string& shard, const std::string& asker,
                                               const std::string& asked, LeaseClock::time_point now) const {
  auto it = shards_.find(shard);
  if (it == shards_.end()) return refuse(ShardTerm{}, "shard " + shard + " is not known to this voter");
  const Record& rec = it->second;
  if (now < quiet_until_)
    return refuse(rec.v.accepted, asked + "but this voter started less than a lease ago (it answers again in " +
                                      std::to_string(ms_between(now, quiet_until_)) + " ms)");
  if (asker != rec.promised_to && now < rec.until)
    return refuse(rec.v.accepted, asked + "but this voter promised " + rec.promised_to + " the shard for " +
                                      std::to_string(ms_between(now, rec.until)) + " ms more");
  return std::nullopt;
}

LeaseAnswer LeaseVoter::prepare(const PrepareRequest& r, LeaseClock::time_point now) {
  LeaseAnswer a = prepare_answer(r, now);
  a.prepared_term = view(r.shard).prepared_term;
  return a;
}

LeaseAnswer LeaseVoter::request(const LeaseRequest& r, LeaseClock::time_point now) {
  LeaseAnswer a = request_answer(r, now);
  a.prepared_term = view(r.shard).prepared_term;
  return a;
}

LeaseAnswer LeaseVoter::prepare_answer(const PrepareRequest& r, LeaseClock::time_point now) {
  if (Status s = validate(r); !s.ok()) return refuse(current(r.shard), s.message());
  const std::string asked = "shard " + r.shard + ": " + r.candidate + " prepared term " + std::to_string(r.term) + ", ";
  if (auto no = blocked(r.shard, r.candidate, asked, now)) return *no;
  View& v = shards_.at(r.shard).v;
  if (r.term <= v.accepted.term) return refuse(v.accepted, asked + "but this voter accepted " + to_string(v.accepted));
  if (r.term < v.prepared_term || (r.term == v.prepared_term && r.candidate != v.prepared_for))
    return refuse(v.accepted, asked + "but this voter prepared term " + std::to_string(v.prepared_term) + " for " +
                                  v.prepared_for);
  v.prepared_term = r.term;
  v.prepared_for = r.candidate;
  LeaseAnswer a;
  a.granted = true;
  a.current = v.accepted;
  return a;
}

LeaseAnswer LeaseVoter::request_answer(const LeaseRequest& r, LeaseClock::time_point now) {
  if (Status s = validate(r); !s.ok()) return refuse(current(r.shard), s.message());
  const std::string asked = "shard " + r.shard + ": asked " + to_string(r.want) + ", ";
  if (auto no = blocked(r.shard, r.want.owner, asked, now)) return *no;
  Record& rec = shards_.at(r.shard);
  const ShardTerm& acc = rec.v.accepted;
  if (r.want.term < acc.term) return refuse(acc, asked + "but " + to_string(acc) + " is newer");
  if (r.want.term < rec.v.prepared_term)
    return refuse(acc, asked + "but this voter prepared term " + std::to_string(rec.v.prepared_term) + " for " +
                           rec.v.prepared_for);
  if (r.want.term == acc.term) {
    if (r.want.owner != acc.owner) return refuse(acc, asked + "but that term belongs to " + acc.owner);
    if (r.want.version < acc.version) return refuse(acc, asked + "but " + to_string(acc) + " is newer");
  } else if (r.want.term != rec.v.prepared_term || r.want.owner != rec.v.prepared_for) {
    return refuse(acc, asked + "but this voter did not prepare that term for " + r.want.owner);
  }
  // Accepted: a renewal (the owner may change the copies it waits for: a backup out of date, or
  // back in sync; its term, its call), or the new term this voter prepared.
  const bool same_owner = r.want.owner == rec.promised_to;
  rec.v.accepted = r.want;
  rec.until = same_owner ? std::max(rec.until, now + lease_) : now + lease_;
  rec.promised_to = r.want.owner;
  LeaseAnswer a;
  a.granted = true;
  a.current = rec.v.accepted;
  return a;
}

LeaseVoter::View LeaseVoter::view(const std::string& shard) const {
  auto it = shards_.find(shard);
  return it == shards_.end() ? View{} : it->second.v;
}

void LeaseVoter::adopt(const std::string& shard, const std::vector<View>& others) {
  auto it = shards_.find(shard);
  if (it == shards_.end()) return;
  View& v = it->second.v;
  for (const View& o : others) {
    if (o.accepted.term > 0 && o.accepted.newer_than(v.accepted)) v.accepted = o.accepted;
    if (o.prepared_term > v.prepared_term) {
      v.prepared_term = o.prepared_term;
      v.prepared_for = o.prepared_for;
    }
  }
}

ShardTerm LeaseVoter::current(const std::string& shard) const { return view(shard).accepted; }

LeaseClock::time_point LeaseVoter::promised_until(const std::string& shard) const {
  auto it = shards_.find(shard);
  return it == shards_.end() ? LeaseClock::time_point{} : it->second.until;
}

LeaseRound::LeaseRound(int64_t term, std::set<std::string> voters, LeaseClock::time_point sent,
                       std::chrono::milliseconds lease, double drift)
    : term_(term), voters_(std::move(voters)), sent_(sent), lease_(lease), drift_(std::clamp(drift, 0.0, 0.49)) {
  if (voters_.empty()) state_ = State::kRefused;
}

LeaseRound::State LeaseRound::answer(const std::string& voter, const LeaseAnswer& a) {
  if (!voters_.count(voter) || !answered_.insert(voter).second) return state_;
  if (a.current.newer_than(newest_)) newest_ = a.current;
  highest_prepared_ = std::max(highest_prepared_, a.prepared_term);
  if (a.granted) {
    ++granted_;
  } else {
    ++refused_;
    refusals_ += (refusals_.empty() ? "" : "; ") + voter + ": " + a.why;
  }
  const size_t majority = voters_.size() / 2 + 1;
  if (newest_.term > term_) {
    state_ = State::kDeposed;  // a newer term was accepted somewhere: this one is over
  } else if (state_ == State::kPending) {
    if (granted_ >= majority) state_ = State::kGranted;
    else if (refused_ > voters_.size() - majority) state_ = State::kRefused;
  }
  return state_;
}

LeaseClock::time_point LeaseRound::valid_until() const {
  if (state_ != State::kGranted) return sent_;
  return sent_ + std::chrono::duration_cast<LeaseClock::duration>(lease_ * (1.0 - drift_));
}

std::string LeaseRound::refusals() const { return refusals_; }

bool eligible_owner(const ShardTerm& newest, const std::string& candidate) {
  return newest.term > 0 && (newest.owner == candidate ||
                             std::find(newest.backups.begin(), newest.backups.end(), candidate) != newest.backups.end());
}

std::vector<std::string> successor_backups(const ShardTerm& newest, const std::string& new_owner) {
  std::vector<std::string> out;
  auto add = [&](const std::string& t) {
    if (!t.empty() && t != new_owner && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  };
  add(newest.owner);
  for (const auto& b : newest.backups) add(b);
  return out;
}

std::optional<ShardTerm> newest_term(const std::vector<ShardTerm>& records) {
  std::optional<ShardTerm> best;
  for (const auto& r : records)
    if (r.term > 0 && (!best || r.newer_than(*best))) best = r;
  return best;
}

}  // namespace actorflow
