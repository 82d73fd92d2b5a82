// StragglerJudge on a fake clock: a rank is chronic after reshard_after of straggling
// without a break (a calm spell of a round or two is none), a gap in the rounds breaks
// the run, a reshard restarts the count, and a group registered again starts afresh. A
// block's skewed loads last the same way, per block, and a marginal skew is waited out as
// a marginal straggler is.
#include "coordinator/straggler_judge.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "testing/fake_clock.h"

namespace ballast::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr StragglerKind::Kind kDevice = StragglerKind::Kind::kCompute;
constexpr StragglerKind::Kind kThrottled = StragglerKind::Kind::kWhole;

// Two ranks, rank 1 at `slowdown` (straggling above 1.1x).
PooledGroup Pooled(double slowdown) {
  PooledGroup g;
  g.ranks = {{.slowdown = 1, .blocks_judged = 1},
             {.slowdown = slowdown, .blocks_judged = 1, .straggling = slowdown > 1.1}};
  g.calm = slowdown <= 1.1;
  return g;
}

class StragglerJudgeTest : public ::testing::Test {
 protected:
  StragglerJudgeTest() : judge_(&clock_, absl::Seconds(1)) {
    policy_.report_period = absl::Milliseconds(100);
    policy_.reshard_after = absl::Seconds(2);
  }
  StragglerJudge::Verdict Round(double slowdown, bool all_local = false,
                                absl::Duration flap_wait = absl::ZeroDuration()) {
    clock_.Advance(absl::Milliseconds(100));
    lines_.clear();
    return judge_.Judge(ref_, {0, 1}, 2, Pooled(slowdown), 1, policy_, all_local, flap_wait,
                        lines_);
  }
  std::vector<std::string> lines_;  // the last round's

  testing::FakeClock clock_;
  StragglerJudge judge_;
  JobPolicy policy_;
  GroupRef ref_{{"vit", "tp0"}, 1};
};

TEST_F(StragglerJudgeTest, ARankIsChronicAfterReshardAfterWithoutABreak) {
  for (int i = 0; i < 20; ++i) EXPECT_THAT(Round(2.0).chronic, ElementsAre(false, false)) << i;
  EXPECT_THAT(Round(2.0).chronic, ElementsAre(false, true));
  EXPECT_TRUE(judge_.Ranks(ref_).at(1).straggling_since.has_value());
  // A gap of more than 3 report periods breaks the run: the count starts again.
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(Round(2.0).chronic, ElementsAre(false, false));
}

// A calm spell no longer than the grace (a gap the run survives, 3 report periods: 300 ms
// here, at most kMaxCalmSpell) since the rank last straggled does not end its run: the
// count to chronic goes on through it (not chronic while calm). A longer spell ends it.
TEST_F(StragglerJudgeTest, AShortCalmSpellDoesNotRestartTheCountToChronic) {
  for (int i = 0; i < 10; ++i) Round(2.0);  // 0.1-1.0 s
  for (int i = 0; i < 3; ++i) EXPECT_THAT(Round(1.0).chronic, ElementsAre(false, false)) << i;
  EXPECT_THAT(lines_, ::testing::Contains(
                          HasSubstr("rank 1 not straggling for 300ms, straggling again within "
                                    "300ms keeps its count to chronic")));
  StragglerJudge::RankRun run = judge_.Ranks(ref_).at(1);
  EXPECT_TRUE(run.straggling_since.has_value());
  EXPECT_TRUE(run.InCalmSpell());
  for (int i = 0; i < 7; ++i) EXPECT_FALSE(Round(2.0).chronic[1]) << i;  // to 2.0 s
  EXPECT_FALSE(judge_.Ranks(ref_).at(1).InCalmSpell());
  EXPECT_TRUE(Round(2.0).chronic[1]);
  EXPECT_THAT(lines_, ::testing::Contains(HasSubstr("rank 1 straggling for 2s: chronic")));
  EXPECT_FALSE(Round(1.0).chronic[1]) << "chronic while calm";

  // Calm for 400 ms since it last straggled: the run ends, and the next one counts from
  // its own start.
  for (int i = 0; i < 3; ++i) Round(1.0);
  EXPECT_FALSE(judge_.Ranks(ref_).at(1).straggling_since.has_value());
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(Round(2.0).chronic[1]) << i;
  EXPECT_TRUE(Round(2.0).chronic[1]);
}

// At the default report period (1 s) the grace is kMaxCalmSpell, 1 s, not the 3 s of a
// gap: one calm round is kept, two end the run (a blip's seconds of calm end it).
TEST_F(StragglerJudgeTest, TheCalmSpellsGraceIsAtMostASecond) {
  policy_.report_period = absl::Seconds(1);
  auto round = [&](double slowdown) {
    clock_.Advance(absl::Milliseconds(900));
    return Round(slowdown);  // 1 s after the last
  };
  for (int i = 0; i < 3; ++i) round(2.0);
  round(1.0);
  EXPECT_TRUE(judge_.Ranks(ref_).at(1).straggling_since.has_value());
  round(2.0);
  EXPECT_THAT(lines_, ::testing::Contains(HasSubstr("rank 1 straggling for 4s")));
  round(1.0);
  round(1.0);
  EXPECT_FALSE(judge_.Ranks(ref_).at(1).straggling_since.has_value());
  round(2.0);
  EXPECT_EQ(judge_.Ranks(ref_).at(1).straggling_since, clock_.Monotonic());
}

TEST_F(StragglerJudgeTest, AReshardRestartsTheCountToChronic) {
  for (int i = 0; i < 21; ++i) Round(2.0);
  judge_.UnitsMoved(ref_, {1});
  for (int i = 0; i < 19; ++i) EXPECT_FALSE(Round(2.0).chronic[1]) << i;
  EXPECT_TRUE(Round(2.0).chronic[1]);
}

// A straggler measured a slower device in its straggling run is chronic at once (and
// status reads it so), but the planner's reshards stay reshard_after apart: not within
// 2 s of the last move, and again once it has passed.
TEST_F(StragglerJudgeTest, ASlowerDeviceIsChronicAtOnceButReshardsStaySpaced) {
  EXPECT_FALSE(Round(2.0).chronic[1]);
  const absl::Duration measured = clock_.Monotonic();
  lines_.clear();
  EXPECT_TRUE(judge_.KindMeasuredChronic(ref_, 1, kDevice, measured, /*still_last=*/false, policy_,
                                         lines_));
  EXPECT_THAT(lines_, ElementsAre(HasSubstr("rank 1: a slower device (measured): chronic now")));
  EXPECT_TRUE(judge_.Ranks(ref_).at(1).kind_measured);
  judge_.UnitsMoved(ref_, {1});
  for (int i = 0; i < 19; ++i) {
    Round(2.0);
    lines_.clear();
    EXPECT_FALSE(judge_.KindMeasuredChronic(ref_, 1, kDevice, measured, /*still_last=*/false,
                                            policy_, lines_))
        << i;
  }
  EXPECT_THAT(lines_, ElementsAre(HasSubstr("rank 1: a slower device, but units moved 1.9s ago: "
                                            "chronic only once reshard_after (2s) has passed")));
  Round(2.0);
  EXPECT_TRUE(judge_.KindMeasuredChronic(ref_, 1, kDevice, measured, /*still_last=*/false, policy_,
                                         lines_));
  // A group registered again has moved nothing (and its rank straggles anew).
  judge_.UnitsMoved(ref_, {1});
  const GroupRef again{ref_.key, ref_.incarnation + 1};
  clock_.Advance(absl::Milliseconds(100));
  std::vector<std::string> lines;
  judge_.Judge(again, {0, 1}, 2, Pooled(2.0), 1, policy_, false, absl::ZeroDuration(), lines);
  EXPECT_TRUE(judge_.KindMeasuredChronic(again, 1, kDevice, clock_.Monotonic(),
                                         /*still_last=*/false, policy_, lines));
}

// An operator's hold that moved units replaces the planner's ownership: the planner's
// last reshard no longer spaces its next one, for a slower device and for a straggler
// chronic by lasting (the straggle went on through the hold). A later move of the
// planner's own spaces again.
TEST_F(StragglerJudgeTest, AHoldThatMovedUnitsLiftsThePlannersReshardSpacing) {
  for (int i = 0; i < 21; ++i) Round(2.0);
  const absl::Duration measured = clock_.Monotonic();
  judge_.UnitsMoved(ref_, {1});
  Round(2.0);
  EXPECT_FALSE(Round(2.0).chronic[1]);
  lines_.clear();
  EXPECT_FALSE(judge_.KindMeasuredChronic(ref_, 1, kDevice, measured, /*still_last=*/false, policy_,
                                          lines_));
  EXPECT_THAT(lines_, ElementsAre(HasSubstr("units moved 200ms ago")));
  judge_.HoldMovedUnits(ref_);
  EXPECT_TRUE(Round(2.0).chronic[1]);  // straggling since before the planner's move
  lines_.clear();
  EXPECT_TRUE(judge_.KindMeasuredChronic(ref_, 1, kDevice, measured, /*still_last=*/false, policy_,
                                         lines_));
  EXPECT_THAT(lines_, ElementsAre(HasSubstr("a slower device (measured): chronic now")));
  judge_.UnitsMoved(ref_, {1});
  EXPECT_FALSE(Round(2.0).chronic[1]);
  EXPECT_FALSE(judge_.KindMeasuredChronic(ref_, 1, kDevice, measured, /*still_last=*/false, policy_,
                                          lines_));
}

// A rank measured throttled whole (a CPU quota, a co-tenant) is chronic at once as a
// slower device is, spaced the same way; a straggler of no measured kind is not.
TEST_F(StragglerJudgeTest, AThrottledRankIsChronicAtOnceAsASlowerDeviceIs) {
  EXPECT_FALSE(Round(2.0).chronic[1]);
  const absl::Duration measured = clock_.Monotonic();
  lines_.clear();
  EXPECT_FALSE(judge_.KindMeasuredChronic(ref_, 1, StragglerKind::Kind::kUnknown, measured,
                                          /*still_last=*/false, policy_, lines_));
  EXPECT_TRUE(lines_.empty());
  EXPECT_FALSE(judge_.Ranks(ref_).at(1).kind_measured);
  EXPECT_TRUE(judge_.KindMeasuredChronic(ref_, 1, kThrottled, measured, /*still_last=*/false,
                                         policy_, lines_));
  EXPECT_THAT(lines_, ElementsAre(HasSubstr(
                          "rank 1: throttled whole (its collectives slow too) (measured): chronic "
                          "now, without lasting reshard_after (coordinator flag "
                          "--reshard_throttled_ranks)")));
  EXPECT_TRUE(judge_.Ranks(ref_).at(1).kind_measured);
  judge_.UnitsMoved(ref_, {1});
  Round(2.0);
  lines_.clear();
  EXPECT_FALSE(judge_.KindMeasuredChronic(ref_, 1, kThrottled, measured, /*still_last=*/false,
                                          policy_, lines_));
  EXPECT_THAT(lines_, ElementsAre(HasSubstr("throttled whole (its collectives slow too), but "
                                            "units moved 100ms ago")));
}

// The round's straggler is the slowest straggling rank, none in a group judged calm.
// A move is for the straggler the round that pushed it named: a straggle by another rank
// that began after it was not answered by it, so a kind measured makes that one chronic
// at once, not spaced from the move (the quota onset after a blip of its peer resharded
// in the calm segment before). Spaced still: the move's own straggler, a rank the move or
// an earlier one within reshard_after took units from (two ranks taking turns), a rank
// that straggled through the move, and any straggler after a move made with none
// straggling.
TEST_F(StragglerJudgeTest, AStraggleAfterAMoveForAnotherRanksIsNotSpacedFromIt) {
  // A round of group `ref`: rank 0 at `slow0`, rank 1 at `slow1`.
  const auto round = [&](const GroupRef& ref, double slow0, double slow1) {
    clock_.Advance(absl::Milliseconds(100));
    lines_.clear();
    PooledGroup g;
    g.ranks = {{.slowdown = slow0, .blocks_judged = 1, .straggling = slow0 > 1.1},
               {.slowdown = slow1, .blocks_judged = 1, .straggling = slow1 > 1.1}};
    g.calm = slow0 <= 1.1 && slow1 <= 1.1;
    return judge_.Judge(ref, {0, 1}, 2, g, 1, policy_, false, absl::ZeroDuration(), lines_);
  };
  const auto chronic_now = [&](const GroupRef& ref, int32_t rank, bool still_last = false) {
    lines_.clear();
    return judge_.KindMeasuredChronic(ref, rank, kThrottled, clock_.Monotonic(), still_last,
                                      policy_, lines_);
  };
  EXPECT_EQ(round(ref_, 1.0, 1.0).straggler, -1);
  EXPECT_EQ(round(ref_, 1.3, 1.2).straggler, 0);
  EXPECT_EQ(round(ref_, 1.2, 1.3).straggler, 1);

  // A blip of rank 0 is resharded (its kind measured), then rank 1 straggles.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(round(ref_, 1.3, 1.0).straggler, 0);
  judge_.UnitsMoved(ref_, {0});
  for (int i = 0; i < 5; ++i) round(ref_, 1.0, 1.0);  // 500 ms calm: rank 0's run ends
  EXPECT_EQ(round(ref_, 1.0, 2.0).straggler, 1);
  EXPECT_TRUE(chronic_now(ref_, 1));
  EXPECT_THAT(lines_, ElementsAre(HasSubstr(
                          "(measured): chronic now, without lasting reshard_after (coordinator "
                          "flag --reshard_throttled_ranks); units moved 600ms ago for rank 0's "
                          "straggle, before this one began: not spaced from that move")));

  // That reshard is for rank 1: its own straggle is spaced from it.
  judge_.UnitsMoved(ref_, {1});
  round(ref_, 1.0, 2.0);
  EXPECT_FALSE(chronic_now(ref_, 1));
  EXPECT_THAT(lines_, ElementsAre(HasSubstr("but units moved 100ms ago")));
  // And so is a straggle of its own that began after it (relieved, a quota's straggler
  // flickers calm).
  for (int i = 0; i < 5; ++i) round(ref_, 1.0, 1.0);
  round(ref_, 1.0, 2.0);
  EXPECT_FALSE(chronic_now(ref_, 1));
  EXPECT_THAT(lines_, ElementsAre(HasSubstr("but units moved 700ms ago")));
  // Unless a window of the move's plan found it still arriving last: it was relieved too
  // little, and a further move is not spaced from that one.
  EXPECT_TRUE(chronic_now(ref_, 1, /*still_last=*/true));
  EXPECT_THAT(lines_, ElementsAre(HasSubstr(
                          "(measured): chronic now, without lasting reshard_after (coordinator "
                          "flag --reshard_throttled_ranks); units moved 700ms ago relieved it, "
                          "but it still arrives last: not spaced from that move")));
  // Rank 0 straggling anew after rank 1's move is spaced by its own, 1.4 s before.
  EXPECT_EQ(round(ref_, 2.0, 1.0).straggler, 0);
  EXPECT_FALSE(chronic_now(ref_, 0));
  EXPECT_THAT(lines_, ElementsAre(HasSubstr("but units moved 800ms ago")));

  // A move for rank 1 that also took units from rank 0 spaces rank 0's straggle after it.
  const GroupRef also{{"vit", "tp1"}, 1};
  round(also, 1.0, 2.0);
  judge_.UnitsMoved(also, {0, 1});
  EXPECT_EQ(round(also, 2.0, 1.0).straggler, 0);
  EXPECT_FALSE(chronic_now(also, 0));
  EXPECT_THAT(lines_, ElementsAre(HasSubstr("but units moved 100ms ago")));

  // Rank 0 straggling through a move for rank 1 (2.0x over its 1.5x) is spaced from it.
  const GroupRef both{{"vit", "tp2"}, 1};
  round(both, 1.5, 2.0);
  judge_.UnitsMoved(both, {1});
  EXPECT_EQ(round(both, 2.0, 1.5).straggler, 0);
  EXPECT_FALSE(chronic_now(both, 0));
  EXPECT_THAT(lines_, ElementsAre(HasSubstr("but units moved 100ms ago")));
  // Still last is no waiver for a rank the move did not relieve.
  EXPECT_FALSE(chronic_now(both, 0, /*still_last=*/true));
  EXPECT_THAT(lines_, ElementsAre(HasSubstr("but units moved 100ms ago")));

  // A move made with none straggling (back to even, after rank 0's straggle ended) spaces
  // every straggler.
  const GroupRef calm{{"vit", "tp3"}, 1};
  round(calm, 2.0, 1.0);
  EXPECT_EQ(round(calm, 1.0, 1.0).straggler, -1);
  judge_.UnitsMoved(calm, {0});
  round(calm, 1.0, 2.0);
  EXPECT_FALSE(chronic_now(calm, 1));
  EXPECT_THAT(lines_, ElementsAre(HasSubstr("but units moved 100ms ago")));
}

// A kind measured in a straggling run before this one (its verdict stands through calm
// spells under 30 s) makes the straggle chronic at once only once it has outlasted the
// group's longest blip about as slow as it (within the straggler threshold), of those that
// ended within the blip memory: a straggle of any of its ranks that ended on its own,
// nothing done about it while it lasted, shorter than the max wait, as its rounds' span
// plus a report period. With no such blip it waits the min (0 by default: its first
// round).
TEST_F(StragglerJudgeTest, AKindMeasuredBeforeThisStraggleCountsOnceItOutlastsTheGroupsBlips) {
  int group = 0;
  // A judge with the given bounds on a group of its own, rank 1's kind measured in a
  // one-round straggle that ended (500 ms calm).
  struct Group {
    StragglerJudge judge;
    GroupRef ref;
    absl::Duration measured;
  };
  const auto make = [&](absl::Duration min, absl::Duration max,
                        absl::Duration memory = StragglerJudge::kBlipMemory) {
    // (A judge holds a mutex: built in place.)
    return std::unique_ptr<Group>(
        new Group{StragglerJudge(&clock_, absl::Seconds(1), min, max, memory),
                  GroupRef{{"vit", absl::StrCat("tp", group++)}, 1}, absl::ZeroDuration()});
  };
  // `judged0`: the blocks that measured rank 0 (0: not measured, so not straggling).
  const auto round = [&](Group& g, double slow0, double slow1, bool all_local = true,
                         int32_t judged0 = 1) {
    clock_.Advance(absl::Milliseconds(100));
    PooledGroup p;
    p.ranks = {
        {.slowdown = slow0, .blocks_judged = judged0, .straggling = judged0 > 0 && slow0 > 1.1},
        {.slowdown = slow1, .blocks_judged = 1, .straggling = slow1 > 1.1}};
    p.calm = slow0 <= 1.1 && slow1 <= 1.1;
    std::vector<std::string> lines;
    g.judge.Judge(g.ref, {0, 1}, 2, p, 1, policy_, all_local, absl::ZeroDuration(), lines);
  };
  const auto measure = [&](Group& g) {
    round(g, 1.0, 2.0, /*all_local=*/false);  // offloaded: no blip
    g.measured = clock_.Monotonic();
    for (int i = 0; i < 5; ++i) round(g, 1.0, 1.0);
    ASSERT_FALSE(g.judge.Ranks(g.ref).at(1).straggling_since.has_value());
  };
  // Rank `rank` straggles `rounds` rounds at `slowdown`, then 500 ms of calm end the run.
  const auto straggle = [&](Group& g, int32_t rank, int rounds, bool all_local = true,
                            double slowdown = 2.0) {
    for (int i = 0; i < rounds; ++i) {
      round(g, rank == 0 ? slowdown : 1.0, rank == 1 ? slowdown : 1.0, all_local);
    }
    for (int i = 0; i < 5; ++i) round(g, 1.0, 1.0);
  };
  // Rank 1 straggles again (at `slowdown`): the rounds until it is chronic, and the first
  // round's line.
  const auto rounds_to_chronic = [&](Group& g, std::string* said, double slowdown = 2.0) {
    for (int n = 1; n <= 100; ++n) {
      round(g, 1.0, slowdown);
      lines_.clear();
      if (g.judge.KindMeasuredChronic(g.ref, 1, kDevice, g.measured, /*still_last=*/false, policy_,
                                      lines_)) {
        EXPECT_TRUE(g.judge.Ranks(g.ref).at(1).kind_measured);
        return n;
      }
      EXPECT_FALSE(g.judge.Ranks(g.ref).at(1).kind_measured);
      if (n == 1 && !lines_.empty()) *said = lines_[0];
    }
    return -1;
  };
  const absl::Duration zero = StragglerJudge::kKnownKindStraggleMin;
  const absl::Duration five = StragglerJudge::kKnownKindStraggleMax;
  ASSERT_EQ(zero, absl::ZeroDuration());
  std::string said;
  {
    SCOPED_TRACE("no blip yet: chronic at its first round");
    auto g = make(zero, five);
    measure(*g);
    EXPECT_EQ(g->judge.LongestBlip(g->ref), std::nullopt);
    EXPECT_EQ(rounds_to_chronic(*g, &said), 1);
  }
  {
    SCOPED_TRACE(
        "rank 0 blipped 3 rounds at 1.3x (marginal), 2 at 2x: rank 1 waits 4 rounds "
        "at 1.4x, 3 at 1.5x, none at 2.3x");
    auto g = make(zero, five);
    measure(*g);
    ASSERT_DOUBLE_EQ(policy_.straggler_threshold, 0.1);  // 1.3x is within 1 + 3 x 0.1
    straggle(*g, 0, 3, /*all_local=*/true, 1.3);
    straggle(*g, 0, 2);
    EXPECT_EQ(g->judge.LongestBlip(g->ref), absl::Milliseconds(300));
    said.clear();
    EXPECT_EQ(rounds_to_chronic(*g, &said, 1.4), 4);  // 1.3 x 1.1 >= 1.4: 300 ms
    EXPECT_THAT(said, HasSubstr("rank 1: a slower device, measured before this straggle began: "
                                "chronic once the straggle has lasted 300ms (not a blip: this "
                                "group's longest blip 300ms (up to 1.30x) within the last 2m "
                                "about as slow as this straggle's 1.40x, kept within "
                                "--known_kind_wait_min 0 and --known_kind_wait_max 5s)"));
    g->judge.UnitsMoved(g->ref, {1});  // resharded: no blip
    for (int i = 0; i < 5; ++i) round(*g, 1.0, 1.0);
    clock_.Advance(policy_.reshard_after);            // the move no longer spaces the next
    EXPECT_EQ(rounds_to_chronic(*g, &said, 1.5), 3);  // 1.3 x 1.1 < 1.5: the 2x one, 200 ms
    g->judge.UnitsMoved(g->ref, {1});
    for (int i = 0; i < 5; ++i) round(*g, 1.0, 1.0);
    clock_.Advance(policy_.reshard_after);
    said.clear();
    EXPECT_EQ(rounds_to_chronic(*g, &said, 2.3), 1);  // 2 x 1.1 < 2.3: slower than every blip
    EXPECT_EQ(g->judge.BlipToOutlast(g->ref, 2.3, 0.1), std::nullopt);
    EXPECT_EQ(g->judge.BlipToOutlast(g->ref, 2.2, 0.1)->lasted, absl::Milliseconds(200));
    EXPECT_DOUBLE_EQ(g->judge.BlipToOutlast(g->ref, 1.0, 0.1)->peak_slowdown, 1.3);
    g->judge.UnitsMoved(g->ref, {1});
    for (int i = 0; i < 5; ++i) round(*g, 1.0, 1.0);
    // A calm spell inside a blip is part of it: 2 rounds, 200 ms calm, 1 round.
    round(*g, 2.0, 1.0);
    round(*g, 2.0, 1.0);
    round(*g, 1.0, 1.0);
    round(*g, 1.0, 1.0);
    straggle(*g, 0, 1);
    EXPECT_EQ(g->judge.LongestBlip(g->ref), absl::Milliseconds(500));
    // Registered again, the group has shown no blip.
    const GroupRef again{g->ref.key, g->ref.incarnation + 1};
    std::vector<std::string> lines;
    g->judge.Judge(again, {0, 1}, 2, Pooled(1.0), 1, policy_, true, absl::ZeroDuration(), lines);
    EXPECT_EQ(g->judge.LongestBlip(again), std::nullopt);
  }
  {
    SCOPED_TRACE("straggles something was done about, or not seen end, are no blips");
    auto g = make(zero, five);
    measure(*g);
    straggle(*g, 0, 3, /*all_local=*/false);  // offloads, prunes: not all-local
    round(*g, 2.0, 1.0);
    round(*g, 2.0, 1.0, /*all_local=*/false);  // offloaded in its last round
    for (int i = 0; i < 5; ++i) round(*g, 1.0, 1.0);
    round(*g, 2.0, 1.0);
    round(*g, 1.0, 1.0, /*all_local=*/false);  // offloaded as it ended
    for (int i = 0; i < 5; ++i) round(*g, 1.0, 1.0);
    round(*g, 2.0, 1.0);
    g->judge.UnitsMoved(g->ref, {0});
    straggle(*g, 0, 1);
    round(*g, 2.0, 1.0);
    g->judge.HoldMovedUnits(g->ref);
    straggle(*g, 0, 1);
    straggle(*g, 0, 50);  // 4.9 s + a period: 5 s, as long as the max
    // Rank 0 not measured (a block whose units divide, its experts got no tokens).
    round(*g, 2.0, 1.0);
    for (int i = 0; i < 5; ++i) round(*g, 1.0, 1.0, /*all_local=*/true, /*judged0=*/0);
    EXPECT_FALSE(g->judge.Ranks(g->ref).at(0).straggling_since.has_value());
    // A gap in the rounds breaks a run: its end is unknown.
    round(*g, 2.0, 1.0);
    clock_.Advance(absl::Seconds(1));
    EXPECT_EQ(g->judge.LongestBlip(g->ref), std::nullopt);
    straggle(*g, 0, 1);
    EXPECT_EQ(g->judge.LongestBlip(g->ref), absl::Milliseconds(100));  // the one after the gap
    straggle(*g, 0, 49);
    EXPECT_EQ(g->judge.LongestBlip(g->ref), absl::Milliseconds(4900));
    EXPECT_EQ(rounds_to_chronic(*g, &said), 50);
  }
  {
    SCOPED_TRACE("an operator's change: a run open then, or begun within 1 s, is no blip");
    ASSERT_EQ(StragglerJudge::kOperatorEcho, absl::Seconds(1));
    auto g = make(zero, five);
    measure(*g);
    round(*g, 2.0, 1.0);
    g->judge.OperatorChanged(g->ref);
    straggle(*g, 0, 2);  // open at the change
    g->judge.OperatorChanged(g->ref);
    straggle(*g, 0, 2);  // begun 100 ms after it
    g->judge.OperatorChanged(g->ref);
    clock_.Advance(absl::Milliseconds(900));
    straggle(*g, 0, 2);  // begun 1 s after it
    EXPECT_EQ(g->judge.LongestBlip(g->ref), std::nullopt);
    g->judge.OperatorChanged(g->ref);
    clock_.Advance(absl::Milliseconds(910));
    straggle(*g, 0, 1);  // begun 1.01 s after it: a blip
    EXPECT_EQ(g->judge.LongestBlip(g->ref), absl::Milliseconds(100));
  }
  {
    SCOPED_TRACE("the bounds: at least min; a straggle of max or longer is no blip");
    auto g = make(absl::Milliseconds(500), absl::Seconds(1));
    measure(*g);
    said.clear();
    EXPECT_EQ(rounds_to_chronic(*g, &said), 6);
    EXPECT_THAT(said, HasSubstr("lasted 500ms (not a blip: no blip within the last 2m about as "
                                "slow as this straggle's 2.00x, kept within "
                                "--known_kind_wait_min 500ms and --known_kind_wait_max 1s)"));
    auto f = make(absl::Milliseconds(500), absl::Seconds(1));
    measure(*f);
    straggle(*f, 0, 3);  // 300 ms, under the min
    EXPECT_EQ(rounds_to_chronic(*f, &said), 6);
    auto h = make(zero, absl::Seconds(1));
    measure(*h);
    straggle(*h, 0, 9);   // 900 ms: a blip
    straggle(*h, 0, 12);  // 1.2 s: none, longer than the max
    EXPECT_EQ(h->judge.LongestBlip(h->ref), absl::Milliseconds(900));
    EXPECT_EQ(rounds_to_chronic(*h, &said), 10);
  }
  {
    SCOPED_TRACE("a blip counts for the memory after it ended (10 s here), then is forgotten");
    const absl::Duration memory = absl::Seconds(10);
    // Calm rounds until `at` after the clock's `from`.
    const auto calm_until = [&](Group& g, absl::Duration from, absl::Duration at) {
      while (clock_.Monotonic() - from < at) round(g, 1.0, 1.0);
    };
    auto g = make(zero, five, memory);
    measure(*g);
    straggle(*g, 0, 9);  // 900 ms
    // (Found ended by its 4th calm round, a round ago: calm past the grace.)
    const absl::Duration long_ended = clock_.Monotonic() - absl::Milliseconds(100);
    calm_until(*g, long_ended, absl::Seconds(4));
    straggle(*g, 0, 3);  // 300 ms, shorter and later: kept for when the long one is forgotten
    // (Found ended by its 4th calm round, a round ago.)
    const absl::Duration short_ended = clock_.Monotonic() - absl::Milliseconds(100);
    EXPECT_EQ(g->judge.LongestBlip(g->ref), absl::Milliseconds(900));
    calm_until(*g, long_ended, memory);
    EXPECT_EQ(g->judge.LongestBlip(g->ref), absl::Milliseconds(900)) << "10 s after: kept";
    round(*g, 1.0, 1.0);
    EXPECT_EQ(g->judge.LongestBlip(g->ref), absl::Milliseconds(300));
    said.clear();
    EXPECT_EQ(rounds_to_chronic(*g, &said), 4);
    EXPECT_THAT(said, HasSubstr("(not a blip: this group's longest blip 300ms (up to 2.00x) "
                                "within the last 10s about as slow as this straggle's 2.00x, "
                                "kept within"));
    g->judge.UnitsMoved(g->ref, {1});  // resharded, as the planner would: no blip
    for (int i = 0; i < 5; ++i) round(*g, 1.0, 1.0);
    calm_until(*g, short_ended, memory + absl::Milliseconds(100));
    EXPECT_EQ(g->judge.LongestBlip(g->ref), std::nullopt);
    EXPECT_EQ(rounds_to_chronic(*g, &said), 1);

    auto f = make(zero, five, memory);
    measure(*f);
    straggle(*f, 0, 3);  // 300 ms, then a longer one: the shorter is never the longest again
    // (Found ended by its 4th calm round, a round ago.)
    const absl::Duration first_ended = clock_.Monotonic() - absl::Milliseconds(100);
    calm_until(*f, first_ended, absl::Seconds(4));
    straggle(*f, 0, 9);
    // (Found ended by its 4th calm round, a round ago.)
    const absl::Duration second_ended = clock_.Monotonic() - absl::Milliseconds(100);
    EXPECT_EQ(f->judge.LongestBlip(f->ref), absl::Milliseconds(900));
    calm_until(*f, first_ended, memory + absl::Milliseconds(100));
    EXPECT_EQ(f->judge.LongestBlip(f->ref), absl::Milliseconds(900));
    // Read without a round since (the judge forgets by the clock, not only in Judge).
    clock_.Advance(second_ended + memory + absl::Milliseconds(1) - clock_.Monotonic());
    EXPECT_EQ(f->judge.LongestBlip(f->ref), std::nullopt);
  }
}

TEST_F(StragglerJudgeTest, CalmLastsOnlyAfterReshardAfterAndAMarginalStragglerIsWaitedOut) {
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(Round(1.0).calm_lasted) << i;
  EXPECT_TRUE(Round(1.0).calm_lasted);
  // 1.2x is marginal (within 1 + 3 x 0.1): a group running all-local stays calm for 1 s.
  int calm_rounds = 0;
  while (calm_rounds < 30 && Round(1.2, /*all_local=*/true).calm) ++calm_rounds;
  EXPECT_GE(calm_rounds, 9);  // 1 s of 100 ms rounds
  EXPECT_LE(calm_rounds, 11);
  // A large straggler is balanced at once.
  EXPECT_FALSE(Round(2.0, true).calm);
}

// While the group's plans flap, any straggler waits out the flap's wait (5 s here), and
// the pooled line says so; one that turns chronic (reshard_after, 2 s here) is no blip.
TEST_F(StragglerJudgeTest, WhilePlansFlapAStragglerIsWaitedOutUntilChronic) {
  const absl::Duration kFlapWait = absl::Seconds(5);
  int waited = 0;
  while (waited < 60 && Round(2.0, true, kFlapWait).calm) {
    ++waited;
    if (waited == 11) {
      EXPECT_THAT(lines_[0], HasSubstr("; a straggler while the plans flap, for 1s of 5s "
                                       "before balancing: all-local"));
    }
  }
  EXPECT_GE(waited, 19);  // 2 s of 100 ms rounds
  EXPECT_LE(waited, 21);
  EXPECT_TRUE(Round(2.0, true, kFlapWait).chronic[1]);
  EXPECT_THAT(lines_[0], ::testing::Not(HasSubstr("flap")));
  // A calm round does not end the straggle (chronic again after it; not while calm);
  // calm for 400 ms, then the straggler again: waited out afresh (not yet chronic).
  StragglerJudge::Verdict calm = Round(1.0, true, kFlapWait);
  EXPECT_TRUE(calm.calm);
  EXPECT_FALSE(calm.chronic[1]);
  EXPECT_TRUE(Round(2.0, true, kFlapWait).chronic[1]);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(Round(1.0, true, kFlapWait).calm);
  EXPECT_TRUE(Round(2.0, true, kFlapWait).calm);
  EXPECT_THAT(lines_[0], HasSubstr("for 0 of 5s before balancing"));
  // Not on a group with a plan in force (its uneven split is balanced whatever the
  // verdict): only all-local groups wait.
  EXPECT_FALSE(Round(2.0, false, kFlapWait).calm);
  // A marginal straggler waits the longer of its own wait (1 s) and the flap's (2 s).
  policy_.reshard_after = absl::Seconds(60);
  EXPECT_TRUE(Round(1.0, true).calm);
  waited = 0;
  while (waited < 60 && Round(1.2, true, absl::Seconds(2)).calm) ++waited;
  EXPECT_GE(waited, 19);
  EXPECT_LE(waited, 21);
  EXPECT_TRUE(Round(1.0, true).calm);
  waited = 0;
  while (waited < 60 && Round(1.2, true, absl::Milliseconds(300)).calm) ++waited;
  EXPECT_GE(waited, 9);
  EXPECT_LE(waited, 11);
}

TEST_F(StragglerJudgeTest, AGroupRegisteredAgainStartsAfresh) {
  for (int i = 0; i < 21; ++i) Round(2.0);
  ASSERT_TRUE(Round(2.0).chronic[1]);
  ref_.incarnation = 2;
  EXPECT_TRUE(judge_.Ranks(ref_).empty());
  EXPECT_FALSE(Round(2.0).chronic[1]);
  judge_.Forget(ref_.key);
  EXPECT_TRUE(judge_.Ranks(ref_).empty());
}

TEST_F(StragglerJudgeTest, ABlocksSkewLastsAfterReshardAfterPerBlockAndRestartsOnAMove) {
  std::vector<std::string> lines;
  // A large skew (all-local 2x the ideal), so no marginal wait.
  auto skewed = [&](int32_t block, bool skew) {
    clock_.Advance(absl::Milliseconds(100));
    const StragglerJudge::SkewVerdict v = judge_.JudgeSkew(
        ref_, block, {.ratio = skew ? 2.0 : 1.0, .band = 0.1, .balanced = !skew}, policy_, lines);
    EXPECT_FALSE(v.waits);
    return v.lasted;
  };
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(skewed(3, true)) << i;
  EXPECT_TRUE(skewed(3, true));
  EXPECT_THAT(lines.back(),
              HasSubstr("block 3: loads unbalanced on its experts' ownership (all-local 2.00x the "
                        "ideal) for 2s: lasted, a reshard is priced (reshard_after 2s)"));
  // Another block's run is its own; a balanced round ends a run.
  EXPECT_FALSE(skewed(4, true));
  EXPECT_FALSE(skewed(3, false));
  EXPECT_FALSE(skewed(3, true));
  // A plan that moved units restarts the count, as for a chronic straggler.
  for (int i = 0; i < 25; ++i) skewed(3, true);
  ASSERT_TRUE(skewed(3, true));
  judge_.UnitsMoved(ref_, {1});
  for (int i = 0; i < 19; ++i) EXPECT_FALSE(skewed(3, true)) << i;
  EXPECT_THAT(lines.back(), HasSubstr("since the last reshard"));
  EXPECT_TRUE(skewed(3, true));
  // A gap of more than 3 report periods breaks it too.
  clock_.Advance(absl::Seconds(1));
  EXPECT_FALSE(skewed(3, true));
}

// A marginal skew (all-local within 1 + 3 x 0.1 of the ideal) on a block running
// all-local is waited out for marginal_straggler_for (1 s here), as a marginal straggler
// is; a larger one, or one on a block already splitting experts, is not; a balanced
// round or a gap ends the wait's run.
TEST_F(StragglerJudgeTest, AMarginalSkewIsWaitedOutALargeOneIsNot) {
  std::vector<std::string> lines;
  auto round = [&](double ratio, bool replicating = false) {
    clock_.Advance(absl::Milliseconds(100));
    const LoadsSkew skew{
        .ratio = ratio, .band = 0.1, .balanced = ratio <= 1.1, .replicating = replicating};
    return judge_.JudgeSkew(ref_, 0, skew, policy_, lines).waits;
  };
  int waited = 0;
  while (waited < 30 && round(1.2)) ++waited;
  EXPECT_GE(waited, 9);  // 1 s of 100 ms rounds
  EXPECT_LE(waited, 11);
  EXPECT_FALSE(round(1.2)) << "the marginal skew lasted: balanced";
  EXPECT_FALSE(round(1.05)) << "balanced: nothing to wait for";
  EXPECT_TRUE(round(1.2)) << "a new marginal skew is waited out afresh";
  EXPECT_THAT(lines.back(), HasSubstr("; a marginal skew, for 0 of 1s before splitting experts"));
  EXPECT_FALSE(round(1.5)) << "a large skew is balanced at once";
  EXPECT_TRUE(round(1.2));
  EXPECT_FALSE(round(1.2, /*replicating=*/true)) << "experts split already: no wait";
  // A gap of more than 3 report periods restarts the wait.
  for (int i = 0; i < 5; ++i) round(1.2);
  clock_.Advance(absl::Seconds(1));
  waited = 0;
  while (waited < 30 && round(1.2)) ++waited;
  EXPECT_GE(waited, 9);
  // A marginal skew that has lasted reshard_after is priced for a reshard, not waited out.
  policy_.reshard_after = absl::Milliseconds(500);
  clock_.Advance(absl::Seconds(1));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(round(1.2)) << i;
  EXPECT_FALSE(round(1.2));
  EXPECT_THAT(lines.back(), HasSubstr("lasted, a reshard is priced"));
  EXPECT_THAT(lines.back(), ::testing::Not(HasSubstr("a marginal skew")));
  // Other blocks wait on their own.
  clock_.Advance(absl::Milliseconds(100));
  EXPECT_TRUE(
      judge_.JudgeSkew(ref_, 1, {.ratio = 1.2, .band = 0.1, .balanced = false}, policy_, lines)
          .waits);
}

}  // namespace
}  // namespace ballast::coordinator
