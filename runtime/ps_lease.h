// Fencing of replicated parameter servers: shards, terms and leases granted by a majority of
// voters (docs/architecture/ps-replication.md, "Fencing: the design chosen"). This header holds
// the protocol's rules only, with the clock passed in, so they are tested without processes:
// the voter's table (LeaseVoter), the owner's side of a lease round (LeaseRound), and the choice
// among answers (newest_term). Sending the requests between tasks is the actors' part.
//
// A shard is the set of variables whose home is one ps task (named by that task's prefix). Each
// has a term: a number and, for it, one owner (the only copy that applies direct updates) and the
// backups that acknowledge every update before the owner does. The rules:
//   - a voter's grant is a promise to the asker until its receipt time + lease: while it runs, the
//     voter grants nothing to anyone else (so two owners' valid leases, each inside its granting
//     voters' promises, never overlap: any two majorities share a voter); a voter grants nothing
//     in its first lease after it started (it may have promised something before a restart);
//   - an older term, or the recorded term asked by another owner, is refused;
//   - a new term is a compare-and-set: granted only when the asker names as `base` exactly the
//     term the voter records, and is its owner or one of its backups (they hold every
//     acknowledged update), or with `restore` (every copy was lost: the model comes from a
//     checkpoint);
//   - the owner's lease is valid from its round's send time until send time + lease x (1 -
//     drift) once a majority granted; it acknowledges updates only while valid;
//   - a refusal carries the voter's record; a higher term there deposes the asker.
// Not thread-safe: each object belongs to one actor or one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace actorflow {

using LeaseClock = std::chrono::steady_clock;

// One shard's term as a voter records it. term 0 means "nothing recorded".
struct ShardTerm {
  int64_t term = 0;
  std::string owner;                 // a ps task prefix
  std::vector<std::string> backups;  // task prefixes, in the order updates go to them
  bool operator==(const ShardTerm& o) const { return term == o.term && owner == o.owner && backups == o.backups; }
  bool operator!=(const ShardTerm& o) const { return !(*this == o); }
};
// "term 3 owner /job:ps/replica:0/task:1 backups [...]", for logs and errors. Pure.
std::string to_string(const ShardTerm& t);

struct LeaseRequest {
  std::string shard;  // the home ps task's prefix
  ShardTerm want;     // the term asked for (its owner is the asker)
  ShardTerm base;     // a new term only: the term it follows, as the asker knows it
  // Every copy the recorded term lists was lost: a new term for any owner (the chief's restore
  // of a checkpoint). Still only after the present promise expired.
  bool restore = false;
};

struct LeaseAnswer {
  bool granted = false;
  ShardTerm current;  // the voter's record after the request: the granted term, or what refused it
  std::string why;    // a refusal's reason, naming the shard and both terms; empty when granted
};

// Checks a request's own form: a non-empty shard and owner, term >= 1, no backup twice, the
// owner not among its backups, at most 8 backups, every name at most 1024 bytes; a base term
// >= 0 within the same bounds.
// InvalidArgument naming the field otherwise. Pure.
Status validate(const LeaseRequest& r);

class LeaseVoter {
 public:
  // A voter whose grants bind it for `lease`, started at `started` (it refuses every request
  // until started + lease). `initial`: each shard's first term (term 1: owner the home task,
  // its backup), as every voter derives it from the cluster file; a shard not in it is unknown
  // (refused).
  LeaseVoter(std::chrono::milliseconds lease, LeaseClock::time_point started, std::map<std::string, ShardTerm> initial);

  // Answers `r` received at `now` (validate(r) first: a malformed request is refused, naming why).
  LeaseAnswer request(const LeaseRequest& r, LeaseClock::time_point now);
  // A term granted by others (seen in an answer): recorded when newer than this voter's. The
  // promise this voter made, if any, keeps its owner and end. Returns whether it was newer.
  bool learn(const std::string& shard, const ShardTerm& t);
  // The recorded term of `shard` (term 0 when unknown).
  ShardTerm current(const std::string& shard) const;
  // When this voter's promise for `shard` ends (the epoch when none).
  LeaseClock::time_point promised_until(const std::string& shard) const;

 private:
  struct Record {
    ShardTerm term;
    std::string promised_to;         // the owner of this voter's last grant
    LeaseClock::time_point until{};  // when that promise ends
  };
  const std::chrono::milliseconds lease_;
  const LeaseClock::time_point quiet_until_;
  std::map<std::string, Record> shards_;
};

// The owner's (or a candidate's) side of one round: the same request to every voter, then their
// answers. Valid once a majority granted; deposed as soon as a voter names a newer term.
class LeaseRound {
 public:
  // A round for `request` among `voters` (task prefixes; a majority is voters/2 + 1), sent at
  // `sent` with lease `lease` and clock drift bound `drift` in [0, 0.5).
  LeaseRound(LeaseRequest request, std::set<std::string> voters, LeaseClock::time_point sent,
             std::chrono::milliseconds lease, double drift = 0.05);

  enum class State { kPending, kGranted, kRefused, kDeposed };
  // Records `voter`'s answer (a voter not in the round, or one that already answered, changes
  // nothing). Returns the state after it: kGranted once a majority granted; kDeposed when an
  // answer names a newer term than asked; kRefused once a majority can no longer grant.
  State answer(const std::string& voter, const LeaseAnswer& a);
  State state() const { return state_; }
  const LeaseRequest& request() const { return request_; }
  // Until when the lease is valid (granted rounds only): sent + lease x (1 - drift).
  LeaseClock::time_point valid_until() const;
  // The newest record the answers named (a granting voter names the asked term); of equal
  // terms, one that refused the asker in another owner's name (a rival won it there). Term 0
  // before any answer.
  const ShardTerm& newest() const { return newest_; }
  // The refusals' reasons, "voter: why" joined by "; ".
  std::string refusals() const;

 private:
  LeaseRequest request_;
  std::set<std::string> voters_;
  std::set<std::string> answered_;
  size_t granted_ = 0, refused_ = 0;
  LeaseClock::time_point sent_;
  std::chrono::milliseconds lease_;
  double drift_;
  State state_ = State::kPending;
  ShardTerm newest_;
  std::string refusals_;
};

// Of several voters' records of one shard, the newest (highest term; the first of equals). How
// a process that routes updates picks the owner to follow. nullopt for an empty list or only
// term 0.
std::optional<ShardTerm> newest_term(const std::vector<ShardTerm>& records);

}  // namespace actorflow
