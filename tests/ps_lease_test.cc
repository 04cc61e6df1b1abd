// The fencing protocol's rules (runtime/ps_lease.h): the voter's table, a lease round, and a
// seeded simulation of owners, candidates and voters under delayed, lost and reordered messages
// and paused processes, which checks the promise itself: never two owners of one shard holding a
// valid lease at the same moment.
#include "runtime/ps_lease.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <queue>
#include <random>

namespace actorflow {
namespace {

using namespace std::chrono_literals;
using TP = LeaseClock::time_point;

const std::string kPs0 = "/job:ps/replica:0/task:0", kPs1 = "/job:ps/replica:0/task:1", kChief = "/job:worker/replica:0/task:0";
constexpr auto kLease = 3000ms;

ShardTerm term(int64_t t, std::string owner, std::vector<std::string> backups) {
  return ShardTerm{t, std::move(owner), std::move(backups)};
}
// A request for shard ps/0; a new term follows `base` (by default the first term).
LeaseRequest ask(int64_t t, std::string owner, std::vector<std::string> backups, bool restore = false,
                 ShardTerm base = ShardTerm{1, kPs0, {kPs1}}) {
  LeaseRequest r;
  r.shard = kPs0;
  r.want = term(t, std::move(owner), std::move(backups));
  r.base = std::move(base);
  r.restore = restore;
  return r;
}
// A voter of shard ps/0 (owner ps/0, backup ps/1 in term 1) started at `t0`.
LeaseVoter voter(TP t0) { return LeaseVoter(kLease, t0, {{kPs0, term(1, kPs0, {kPs1})}}); }

TEST(PsLeaseTest, MalformedRequestsAreRefusedNamingTheField) {
  struct Case {
    LeaseRequest r;
    const char* says;
  };
  const std::vector<Case> cases = {
      {LeaseRequest{"", term(1, kPs0, {}), {}, false}, "shard must be"},
      {ask(2, kPs1, {}, false, term(-1, kPs0, {})), "base term must be >= 0"},
      {ask(0, kPs0, {}), "term must be >= 1, got 0"},
      {ask(-4, kPs0, {}), "term must be >= 1, got -4"},
      {ask(1, "", {}), "owner must be"},
      {ask(1, kPs0, {kPs0}), "also listed as its own backup"},
      {ask(1, kPs0, {kPs1, kPs1}), "listed twice"},
      {ask(1, kPs0, {""}), "a backup must be"},
      {ask(1, kPs0, {"a", "b", "c", "d", "e", "f", "g", "h", "i"}), "at most 8 backups, got 9"},
      {ask(1, std::string(1025, 'x'), {}), "owner must be"},
  };
  const TP t0{};
  for (const auto& c : cases) {
    Status s = validate(c.r);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << c.says;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s;
    LeaseVoter v = voter(t0);
    LeaseAnswer a = v.request(c.r, t0 + 10s);
    EXPECT_FALSE(a.granted);
    EXPECT_NE(a.why.find(c.says), std::string::npos) << a.why;
    EXPECT_EQ(v.current(kPs0), term(1, kPs0, {kPs1})) << "a malformed request changed the record";
  }
  EXPECT_TRUE(validate(ask(1, kPs0, {kPs1})).ok());
}

TEST(PsLeaseTest, AVoterGrantsNothingInItsFirstLease) {
  const TP t0 = TP{} + 100s;
  LeaseVoter v = voter(t0);
  LeaseAnswer a = v.request(ask(1, kPs0, {kPs1}), t0 + 2999ms);
  EXPECT_FALSE(a.granted);
  EXPECT_NE(a.why.find("started less than a lease ago (it grants again in 1 ms)"), std::string::npos) << a.why;
  EXPECT_TRUE(v.request(ask(1, kPs0, {kPs1}), t0 + 3000ms).granted);
}

TEST(PsLeaseTest, TheOwnerRenewsAndHoldsOffATakeoverUntilItsPromiseEnds) {
  const TP t0{};
  LeaseVoter v = voter(t0);
  const TP t1 = t0 + 10s;
  ASSERT_TRUE(v.request(ask(1, kPs0, {kPs1}), t1).granted);
  EXPECT_EQ(v.promised_until(kPs0), t1 + kLease);
  ASSERT_TRUE(v.request(ask(1, kPs0, {kPs1}), t1 + 1s).granted);  // a renewal extends it
  EXPECT_EQ(v.promised_until(kPs0), t1 + 1s + kLease);
  // The backup asks for term 2 while the promise holds: refused, naming the owner and the time left.
  LeaseAnswer early = v.request(ask(2, kPs1, {}), t1 + 1s + kLease - 1ms);
  EXPECT_FALSE(early.granted);
  EXPECT_EQ(early.current, term(1, kPs0, {kPs1}));
  EXPECT_NE(early.why.find("promised " + kPs0 + " the shard for 1 ms more"), std::string::npos) << early.why;
  // Once it ended: granted, and the old owner's renewal of term 1 is refused with term 2.
  LeaseAnswer takeover = v.request(ask(2, kPs1, {}), t1 + 1s + kLease);
  ASSERT_TRUE(takeover.granted) << takeover.why;
  EXPECT_EQ(takeover.current, term(2, kPs1, {}));
  LeaseAnswer stale = v.request(ask(1, kPs0, {kPs1}), t1 + 5s);
  EXPECT_FALSE(stale.granted);
  EXPECT_EQ(stale.current, term(2, kPs1, {}));
  EXPECT_NE(stale.why.find("is newer"), std::string::npos) << stale.why;
  // Nobody else may own term 2, and the new owner renews it.
  EXPECT_FALSE(v.request(ask(2, kPs0, {}), t1 + 20s).granted);
  EXPECT_TRUE(v.request(ask(2, kPs1, {kPs0}), t1 + 20s).granted);
  EXPECT_EQ(v.current(kPs0), term(2, kPs1, {kPs0}));
}

TEST(PsLeaseTest, ANewTermGoesOnlyToACopyTheTermListsUnlessRestoring) {
  const TP t0{};
  LeaseVoter v = voter(t0);
  const std::string ps2 = "/job:ps/replica:0/task:2";
  LeaseAnswer a = v.request(ask(2, ps2, {}), t0 + 10s);
  EXPECT_FALSE(a.granted);
  EXPECT_NE(a.why.find("is not a copy that term 1"), std::string::npos) << a.why;
  EXPECT_TRUE(v.request(ask(2, ps2, {}, /*restore=*/true), t0 + 10s).granted);
  // A shard the voter does not know is refused.
  LeaseRequest other = ask(1, ps2, {});
  other.shard = "/job:ps/replica:0/task:7";
  LeaseAnswer unknown = v.request(other, t0 + 10s);
  EXPECT_FALSE(unknown.granted);
  EXPECT_EQ(unknown.current.term, 0);
}

// Serving alone: the owner drops its backup from the term at a majority before it acknowledges
// an update the backup lacks. From then on that backup cannot win a majority for a new term.
TEST(PsLeaseTest, ABackupDroppedByAMajorityCannotBecomeOwner) {
  const TP t0{};
  std::map<std::string, LeaseVoter> voters;
  for (const auto& name : {kPs0, kPs1, kChief}) voters.emplace(name, voter(t0));
  const TP t1 = t0 + 10s;
  LeaseRound alone(ask(1, kPs0, {}), {kPs0, kPs1, kChief}, t1, kLease);
  EXPECT_EQ(alone.answer(kPs0, voters.at(kPs0).request(alone.request(), t1)), LeaseRound::State::kPending);
  EXPECT_EQ(alone.answer(kChief, voters.at(kChief).request(alone.request(), t1 + 1ms)), LeaseRound::State::kGranted);
  // ps/0 then dies; ps/1 (which never heard the drop) asks for term 2 after every promise ended.
  const TP t2 = t1 + 10s;
  LeaseRound takeover(ask(2, kPs1, {}), {kPs0, kPs1, kChief}, t2, kLease);
  // Its own table still lists it; the chief refuses; so does ps/0's table if ps/0 ever answers.
  EXPECT_EQ(takeover.answer(kPs1, voters.at(kPs1).request(takeover.request(), t2)), LeaseRound::State::kPending);
  EXPECT_EQ(takeover.answer(kChief, voters.at(kChief).request(takeover.request(), t2)), LeaseRound::State::kPending);
  EXPECT_EQ(takeover.answer(kPs0, voters.at(kPs0).request(takeover.request(), t2)), LeaseRound::State::kRefused);
  EXPECT_NE(takeover.refusals().find("but this voter records term 1 owner " + kPs0 + " backups []"), std::string::npos)
      << takeover.refusals();
}

// A new term is a compare-and-set on the term the asker follows: a candidate that missed a term
// is refused, naming the term the voter records.
TEST(PsLeaseTest, ANewTermMustFollowTheRecordedTerm) {
  const TP t0{};
  LeaseVoter v = voter(t0);
  const TP t1 = t0 + 10s;
  ASSERT_TRUE(v.request(ask(2, kPs1, {kPs0}), t1).granted);
  // ps/0 returns and asks for term 3 as if it followed term 1: refused.
  LeaseAnswer stale = v.request(ask(3, kPs0, {}), t1 + 10s);
  EXPECT_FALSE(stale.granted);
  EXPECT_NE(stale.why.find("following term 1 owner " + kPs0 + " backups [" + kPs1 + "], but this voter records term 2 owner " +
                           kPs1 + " backups [" + kPs0 + "]"),
            std::string::npos)
      << stale.why;
  // Following term 2, in which it is listed: granted once ps/1's promise ended.
  EXPECT_TRUE(v.request(ask(3, kPs0, {}, false, term(2, kPs1, {kPs0})), t1 + 10s).granted);
  // learn() records only newer terms, and keeps the promise.
  EXPECT_FALSE(v.learn(kPs0, term(2, kPs1, {})));
  EXPECT_TRUE(v.learn(kPs0, term(5, kPs1, {})));
  EXPECT_EQ(v.current(kPs0), term(5, kPs1, {}));
  LeaseAnswer promised = v.request(ask(5, kPs1, {}), t1 + 11s);
  EXPECT_FALSE(promised.granted) << "ps/0's promise still runs";
  EXPECT_NE(promised.why.find("promised " + kPs0), std::string::npos) << promised.why;
}

TEST(PsLeaseTest, ARoundIsGrantedByAMajorityAndDeposedByANewerTerm) {
  const TP sent = TP{} + 50s;
  const std::set<std::string> three = {kPs0, kPs1, kChief};
  LeaseAnswer yes{true, term(1, kPs0, {kPs1}), ""};
  LeaseAnswer no{false, term(1, kPs0, {kPs1}), "busy"};
  {
    LeaseRound r(ask(1, kPs0, {kPs1}), three, sent, kLease, 0.1);
    EXPECT_EQ(r.valid_until(), sent) << "not granted: valid for no time";
    EXPECT_EQ(r.answer(kPs0, yes), LeaseRound::State::kPending);
    EXPECT_EQ(r.answer(kPs0, yes), LeaseRound::State::kPending) << "a second answer of one voter counts once";
    EXPECT_EQ(r.answer("/job:stranger/replica:0/task:0", yes), LeaseRound::State::kPending) << "not a voter";
    EXPECT_EQ(r.answer(kPs1, yes), LeaseRound::State::kGranted);
    EXPECT_EQ(r.valid_until(), sent + 2700ms);  // lease x (1 - drift)
  }
  {
    LeaseRound r(ask(1, kPs0, {kPs1}), three, sent, kLease);
    EXPECT_EQ(r.answer(kPs0, no), LeaseRound::State::kPending);
    EXPECT_EQ(r.answer(kChief, no), LeaseRound::State::kRefused);
    EXPECT_EQ(r.refusals(), kPs0 + ": busy; " + kChief + ": busy");
  }
  {
    LeaseRound r(ask(1, kPs0, {kPs1}), three, sent, kLease);
    EXPECT_EQ(r.answer(kPs0, yes), LeaseRound::State::kPending);
    EXPECT_EQ(r.answer(kPs1, LeaseAnswer{false, term(2, kPs1, {}), "newer"}), LeaseRound::State::kDeposed);
    EXPECT_EQ(r.newest(), term(2, kPs1, {}));
    EXPECT_EQ(r.answer(kChief, yes), LeaseRound::State::kDeposed) << "deposed stays deposed";
    EXPECT_EQ(r.valid_until(), sent);
  }
  {
    // A rival candidate won the same term at a voter: refused, and newest() names the winner.
    LeaseRound r(ask(2, kPs1, {}), three, sent, kLease);
    const std::string ps2 = "/job:ps/replica:0/task:2";
    r.answer(kPs0, LeaseAnswer{false, term(2, ps2, {}), "that term belongs to " + ps2});
    EXPECT_EQ(r.newest(), term(2, ps2, {}));
  }
  EXPECT_EQ(newest_term({term(1, kPs0, {}), term(3, kPs1, {}), term(2, kPs0, {})}), term(3, kPs1, {}));
  EXPECT_EQ(newest_term({term(0, "", {})}), std::nullopt);
  EXPECT_EQ(newest_term({}), std::nullopt);
}

// The promise, simulated: 3 voters (ps/0, ps/1, the chief), one shard, two copies. Each copy
// repeatedly runs rounds: the one that believes it owns the shard renews (dropping or re-adding
// its backup at random), the other asks for the next term after the owner seemed silent.
// Messages are delayed by 0 to 2 leases, lost, or reordered; processes pause (no progress) for
// up to 2 leases; a voter restarts (its table back to term 1) now and then. Every granted round
// gives its owner the interval [answer that completed the majority, valid_until()]; no two
// intervals of different owners may overlap.
struct Simulated {
  int granted = 0, owner_changes = 0;
  std::string overlap;  // the first two owners found holding valid leases at once ("" = none)
};
// `planted_bug`: a restarted voter grants at once instead of after its quiet lease (it forgets
// the promises it made before).
Simulated simulate(int seeds, bool planted_bug) {
  Simulated out;
  for (int seed = 1; seed <= seeds && out.overlap.empty(); ++seed) {
    std::mt19937_64 rng(static_cast<uint64_t>(seed));
    auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    // A message's delay: mostly a few milliseconds, one in five up to two leases.
    auto delay = [&] { return std::chrono::milliseconds(uniform(0, 4) == 0 ? uniform(0, 2 * kLease.count()) : uniform(0, 20)); };
    const TP t0{};
    const std::vector<std::string> names = {kPs0, kPs1, kChief};
    const std::set<std::string> voter_set(names.begin(), names.end());
    std::map<std::string, LeaseVoter> voters;
    for (const auto& n : names) voters.emplace(n, voter(t0));
    struct Event {
      TP at;
      uint64_t order;
      std::function<void()> run;
      bool operator>(const Event& o) const { return at != o.at ? at > o.at : order > o.order; }
    };
    std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue;
    uint64_t order = 0;
    auto at = [&](TP when, std::function<void()> f) { queue.push(Event{when, order++, std::move(f)}); };
    std::map<std::string, TP> paused_until;  // a paused process acts on nothing before this
    struct Interval {
      std::string owner;
      int64_t term;
      TP from, to;
    };
    std::vector<Interval> intervals;
    struct Copy {
      ShardTerm believed;  // the term it last learned
      std::shared_ptr<LeaseRound> round;
    };
    std::map<std::string, Copy> copies = {{kPs0, Copy{term(1, kPs0, {kPs1}), nullptr}},
                                          {kPs1, Copy{term(1, kPs0, {kPs1}), nullptr}}};
    // Delivery of a message to `to` at or after `when`: later if `to` is paused then.
    std::function<void(const std::string&, TP, std::function<void(TP)>)> deliver =
        [&](const std::string& to, TP when, std::function<void(TP)> f) {
          at(when, [&, to, f, when] {
            auto p = paused_until.find(to);
            if (p != paused_until.end() && p->second > when) {
              deliver(to, p->second, f);
              return;
            }
            f(when);
          });
        };
    std::function<void(const std::string&, TP)> start_round = [&](const std::string& self, TP now) {
      Copy& c = copies.at(self);
      LeaseRequest req;
      req.shard = kPs0;
      const std::string other = self == kPs0 ? kPs1 : kPs0;
      req.base = c.believed;
      if (c.believed.owner == self) {
        req.want = term(c.believed.term, self, uniform(0, 3) == 0 ? std::vector<std::string>{} : std::vector<std::string>{other});
      } else {
        req.want = term(c.believed.term + 1, self, {});
      }
      c.round = std::make_shared<LeaseRound>(req, voter_set, now, kLease, 0.05);
      std::shared_ptr<LeaseRound> round = c.round;  // kept alive: answers of an old round are told apart
      for (const auto& v : names) {
        if (uniform(0, 9) == 0) continue;  // lost
        deliver(v, now + delay(), [&, v, req, self, round](TP t) {
          LeaseAnswer a = voters.at(v).request(req, t);
          if (uniform(0, 9) == 0) return;  // the answer is lost
          deliver(self, t + delay(), [&, v, a, self, round](TP t2) {
            Copy& me = copies.at(self);
            if (me.round != round) return;  // an old round's answer
            const bool was_granted = round->state() == LeaseRound::State::kGranted;
            const LeaseRound::State s = round->answer(v, a);
            voters.at(self).learn(kPs0, a.current);  // the copy's own voter hears what it heard
            if (s == LeaseRound::State::kGranted && !was_granted) {
              me.believed = round->request().want;
              if (t2 < round->valid_until()) intervals.push_back({self, me.believed.term, t2, round->valid_until()});
            } else if (s == LeaseRound::State::kDeposed || s == LeaseRound::State::kRefused) {
              // Follow a newer owner; its own term recorded at a minority of voters is no lease.
              if (round->newest().term > me.believed.term && round->newest().owner != self) me.believed = round->newest();
            }
          });
        });
      }
      // The next round: the owner renews every lease/3; the other tries now and then.
      const int64_t next = c.believed.owner == self ? kLease.count() / 3 : uniform(kLease.count() / 6, kLease.count());
      deliver(self, now + std::chrono::milliseconds(next), [&, self](TP t) { start_round(self, t); });
    };
    deliver(kPs0, t0 + 3100ms, [&](TP t) { start_round(kPs0, t); });
    deliver(kPs1, t0 + 3100ms + std::chrono::milliseconds(uniform(0, 5000)), [&](TP t) { start_round(kPs1, t); });
    // Pauses and voter restarts.
    for (int i = 0; i < 30; ++i) {
      const TP when = t0 + std::chrono::milliseconds(uniform(3000, 100000));
      const std::string who = names[static_cast<size_t>(uniform(0, 2))];
      if (uniform(0, 3) == 0) {
        // A restarted voter knows only the first term; when its quiet lease ends it reads the
        // other voters' records and learns the newest (knowledge only: it promised nothing).
        at(when, [&, who, when] {
          voters.erase(who);
          voters.emplace(who, voter(planted_bug ? when - kLease : when));
          at(when + kLease, [&, who] {
            std::vector<ShardTerm> records;
            for (const auto& n : names)
              if (n != who) records.push_back(voters.at(n).current(kPs0));
            if (auto newest = newest_term(records)) voters.at(who).learn(kPs0, *newest);
          });
        });
      } else {
        at(when, [&, who, when] {
          paused_until[who] = std::max(paused_until[who], when + std::chrono::milliseconds(uniform(100, 2 * kLease.count())));
        });
      }
    }
    const TP end = t0 + 120s;
    while (!queue.empty() && queue.top().at < end) {
      Event e = queue.top();
      queue.pop();
      e.run();
    }
    for (size_t i = 0; i < intervals.size() && out.overlap.empty(); ++i)
      for (size_t j = i + 1; j < intervals.size(); ++j) {
        const Interval &a = intervals[i], &b = intervals[j];
        if (a.owner == b.owner || a.to <= b.from || b.to <= a.from) continue;
        out.overlap = "seed " + std::to_string(seed) + ": " + a.owner + " (term " + std::to_string(a.term) + ") and " +
                      b.owner + " (term " + std::to_string(b.term) + ") both held a valid lease";
        break;
      }
    out.granted += static_cast<int>(intervals.size());
    for (size_t i = 1; i < intervals.size(); ++i) out.owner_changes += intervals[i].owner != intervals[i - 1].owner;
  }
  return out;
}

TEST(PsLeaseTest, SeededSchedulesNeverHaveTwoOwnersWithValidLeasesAtOnce) {
  const int kSeeds = 500;
  Simulated r = simulate(kSeeds, /*planted_bug=*/false);
  EXPECT_EQ(r.overlap, "");
  std::printf("%d schedules: %d leases granted, %d changes of owner\n", kSeeds, r.granted, r.owner_changes);
  // The simulation exercised what it checks: leases were granted and owners did change.
  EXPECT_GT(r.granted, kSeeds * 10);
  EXPECT_GT(r.owner_changes, kSeeds / 2);
}

// The simulation catches a voter that forgets its promises across a restart.
TEST(PsLeaseTest, TheSimulationCatchesAVoterThatForgetsItsPromises) {
  Simulated r = simulate(500, /*planted_bug=*/true);
  EXPECT_NE(r.overlap, "") << "500 schedules found no overlap with the planted bug";
  std::printf("planted bug found: %s\n", r.overlap.c_str());
}

}  // namespace
}  // namespace actorflow
