// Fencing of replicated parameter servers: shards, terms and leases granted by a majority of
// voters (docs/architecture/ps-replication.md, "Fencing: the design chosen"). This header holds
// the protocol's rules only, with the clock passed in, so they are tested without processes:
// the voter's table (LeaseVoter), one round of answers (LeaseRound), who may take a shard over
// (eligible_owner), and the choice among records (newest_term). Sending the requests between
// tasks is the actors' part.
//
// A shard is the set of variables whose home is one ps task (named by that task's prefix). Each
// has a term: a number and, for it, one owner (the only copy that applies direct updates) and the
// backups that acknowledge every update before the owner does (the owner changes them within its
// term as versions). A voter keeps the record it last accepted, the newest term it prepared and
// for whom, and a lease promise. The rules:
//   - accepting a request is a promise to its owner until the voter's receipt time + lease:
//     while it runs, the voter prepares and accepts nothing for anyone else (so two owners' valid
//     leases, each inside its granting voters' promises, never overlap: any two majorities share
//     a voter); a voter answers nothing in its first lease after it started (it may have promised
//     something before a restart), and then recovers its record from the other voters (adopt);
//   - the owner renews its term (and changes its backups as a newer version of it); an older
//     term or version, or its term asked by another owner, is refused;
//   - a new term takes two rounds, as Paxos does. Prepare: a majority promises to accept nothing
//     older than the new term and answers with its records; the candidate may go on only when the
//     newest of those records lists it (its owner or a backup: it holds every acknowledged
//     update), or when it restores the model from a checkpoint (every copy was lost). Accept: the
//     new term with the candidate as owner; a voter accepts a new term only for the candidate it
//     prepared it for. Any record a majority accepted is among any majority's prepare answers, so
//     a candidate never overlooks a backup being dropped;
//   - the owner's lease is valid from its round's send time until send time + lease x (1 -
//     drift) once a majority accepted; it acknowledges updates only while valid;
//   - a refusal carries the voter's record; a newer term there deposes the asker.
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

// One shard's term as a voter records it. term 0 means "nothing recorded". Within a term the
// owner changes its backups (one out of date dropped, one brought up listed again) as versions
// 0, 1, 2, ...: records are ordered by (term, version).
struct ShardTerm {
  int64_t term = 0;
  std::string owner;                 // a ps task prefix
  std::vector<std::string> backups;  // task prefixes, in the order updates go to them
  int64_t version = 0;
  bool operator==(const ShardTerm& o) const {
    return term == o.term && owner == o.owner && backups == o.backups && version == o.version;
  }
  bool operator!=(const ShardTerm& o) const { return !(*this == o); }
  // Whether this record is newer than `o`: a higher term, or the same term at a higher version.
  bool newer_than(const ShardTerm& o) const { return term != o.term ? term > o.term : version > o.version; }
};
// "term 3 owner /job:ps/replica:0/task:1 backups [...]" (then " version 2" when not 0), for logs
// and errors. Pure.
std::string to_string(const ShardTerm& t);

// A request to accept `want` (a renewal, a new version, or a new term after its prepare).
struct LeaseRequest {
  std::string shard;  // the home ps task's prefix
  ShardTerm want;     // its owner is the asker
};
// The first round of a new term: `candidate` asks for `term`.
struct PrepareRequest {
  std::string shard;
  int64_t term = 0;
  std::string candidate;
};

struct LeaseAnswer {
  bool granted = false;
  ShardTerm current;  // the voter's accepted record after the request
  std::string why;    // a refusal's reason, naming the shard and the records; empty when granted
  int64_t prepared_term = 0;  // the newest term the voter prepared (a candidate asks above it)
};

// Check a request's own form: a non-empty shard and owner, term >= 1, version >= 0, no backup
// twice, the owner not among its backups, at most 8 backups, every name at most 1024 bytes.
// InvalidArgument naming the field otherwise. Pure.
Status validate(const LeaseRequest& r);
Status validate(const PrepareRequest& r);

class LeaseVoter {
 public:
  // A voter whose acceptances bind it for `lease`, started at `started` (it refuses everything
  // until started + lease). `initial`: each shard's first term (term 1: owner the home task, its
  // backup), as every voter derives it from the cluster file; a shard not in it is refused.
  LeaseVoter(std::chrono::milliseconds lease, LeaseClock::time_point started, std::map<std::string, ShardTerm> initial);

  // Answers `r` received at `now`, by the rules at the top of this header: prepare() records the
  // prepared term and answers with the accepted record; request() accepts a renewal, a newer
  // version or the prepared new term, and makes the lease promise. Every answer carries the
  // voter's accepted record and prepared term after it; a refusal says why (a malformed request
  // is refused, naming the field).
  LeaseAnswer prepare(const PrepareRequest& r, LeaseClock::time_point now);
  LeaseAnswer request(const LeaseRequest& r, LeaseClock::time_point now);

  // What a voter knows of a shard, as a restarted voter reads it from the others.
  struct View {
    ShardTerm accepted;
    int64_t prepared_term = 0;
    std::string prepared_for;
  };
  View view(const std::string& shard) const;
  // After a restart: the views of every other voter (all of them: a record a majority accepted
  // may be held by one other voter only). Keeps the newest accepted record and the highest
  // prepared term of this voter's and theirs. Promises are not views: this voter's own ends stay.
  void adopt(const std::string& shard, const std::vector<View>& others);
  // The accepted record of `shard` (term 0 when unknown).
  ShardTerm current(const std::string& shard) const;
  // When this voter's promise for `shard` ends (the epoch when none).
  LeaseClock::time_point promised_until(const std::string& shard) const;

 private:
  struct Record {
    View v;
    std::string promised_to;         // the owner of this voter's last acceptance
    LeaseClock::time_point until{};  // when that promise ends
  };
  LeaseAnswer prepare_answer(const PrepareRequest& r, LeaseClock::time_point now);
  LeaseAnswer request_answer(const LeaseRequest& r, LeaseClock::time_point now);
  // A refusal when the voter is quiet, the shard unknown, or another owner holds its promise.
  std::optional<LeaseAnswer> blocked(const std::string& shard, const std::string& asker, const std::string& asked,
                                     LeaseClock::time_point now) const;
  const std::chrono::milliseconds lease_;
  const LeaseClock::time_point quiet_until_;
  std::map<std::string, Record> shards_;
};

// One round of requests (prepare or accept) to every voter, then their answers. Granted once a
// majority granted; deposed as soon as an answer names a newer term than asked.
class LeaseRound {
 public:
  // A round asking for term `term` among `voters` (task prefixes; a majority is voters/2 + 1),
  // sent at `sent`, with lease `lease` and clock drift bound `drift` in [0, 0.5).
  LeaseRound(int64_t term, std::set<std::string> voters, LeaseClock::time_point sent, std::chrono::milliseconds lease,
             double drift = 0.05);

  enum class State { kPending, kGranted, kRefused, kDeposed };
  // Records `voter`'s answer (a voter not in the round, or one that already answered, changes
  // nothing). Returns the state after it: kGranted once a majority granted; kDeposed when an
  // answer names a newer term than asked; kRefused once a majority can no longer grant.
  State answer(const std::string& voter, const LeaseAnswer& a);
  State state() const { return state_; }
  // Until when an accept round's lease is valid (granted rounds only): sent + lease x (1 - drift).
  LeaseClock::time_point valid_until() const;
  // The newest record (ShardTerm::newer_than) the answers named; term 0 before any. For a
  // granted prepare round: what eligible_owner() decides on.
  const ShardTerm& newest() const { return newest_; }
  // The newest term any answer said its voter prepared (0 before any). An owner that sees one
  // above its term is being taken over, or blocked at that voter by a candidate that failed:
  // it prepares a newer term itself (it is eligible as the owner).
  int64_t highest_prepared() const { return highest_prepared_; }
  // The refusals' reasons, "voter: why" joined by "; ".
  std::string refusals() const;

 private:
  int64_t term_;
  std::set<std::string> voters_;
  std::set<std::string> answered_;
  size_t granted_ = 0, refused_ = 0;
  LeaseClock::time_point sent_;
  std::chrono::milliseconds lease_;
  double drift_;
  State state_ = State::kPending;
  ShardTerm newest_;
  int64_t highest_prepared_ = 0;
  std::string refusals_;
};

// Whether `candidate` may own the term after `newest` (the newest record of a granted prepare
// round): it is its owner or one of its backups. A restore of the model from a checkpoint needs
// no such record. Pure.
bool eligible_owner(const ShardTerm& newest, const std::string& candidate);
// The backups a new owner starts with: every copy `newest` names (its owner and backups) but the
// new owner, since each holds every acknowledged update; the owner drops the unreachable ones by
// its next versions. Pure.
std::vector<std::string> successor_backups(const ShardTerm& newest, const std::string& new_owner);

// Of several records of one shard, the newest (ShardTerm::newer_than; the first of equals).
// nullopt for an empty list or only term 0.
std::optional<ShardTerm> newest_term(const std::vector<ShardTerm>& records);

}  // namespace actorflow
