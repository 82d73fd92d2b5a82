// StragglerKind: a straggler whose collectives' floor rose over the group's calm one is
// judged slow in them too (fixed costs), one whose floor stayed is judged slow in compute
// alone; nothing is judged from plans with offloads, from steps that were not all the
// straggler's, against a stale calm floor, under a cordon, or while the straggler computes
// fewer units than it did calm; a verdict stands while the straggler lasts (and while it
// looks calm relieved of units, for up to 30 s: then it is rechecked, and the next
// recheck waits twice as long when the rank is judged throttled again soon after), a
// calm spell of 30 s ends it, another straggler is judged afresh; each verdict knows
// when it was measured (a throttled rank's step slowdown and arrival spread:
// straggler_kind_throttled_test.cc). A "calm" floor far above the calm one is a
// straggler's the timers call calm, not taken.
#include "coordinator/straggler_kind.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/fake_clock.h"
#include "tests/coordinator/straggler_kind_test_base.h"

namespace ballast::coordinator {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using Kind = StragglerKind::Kind;

TEST_F(StragglerKindTest, CollectivesThatSlowWithTheStragglerAreItsWhole) {
  Calm();
  EXPECT_THAT(Said(), HasSubstr("collectives 0.0430 s a step at least when calm"));
  EXPECT_EQ(Straggle(0.097), Kind::kWhole);
  EXPECT_THAT(Said(), HasSubstr("straggler kind (rank 1): slow in its collectives too (a CPU "
                                "quota or a co-tenant): collectives 0.0970 s a step at least "
                                "against 0.0430 s calm (2.26x, >= 1.25x"));
}

TEST_F(StragglerKindTest, CollectivesAsCalmMeanASlowerDevice) {
  Calm();
  EXPECT_EQ(Straggle(0.050), Kind::kCompute);
  EXPECT_THAT(Said(), HasSubstr("slow in its compute alone (a slower device): collectives "
                                "0.0500 s a step at least against 0.0430 s calm (1.16x, < "
                                "1.25x"));
}

// A slower device throttled later, its straggle never pausing for a calm window (this
// VM's rank 1, 1.13-1.26x its peer with no contention, then under a 2x quota:
// docs/benchmarks.md, 2026-12-06 (d)): a window on the calm split after its verdict, all
// of it its straggle's, where its own collectives are the floor and that floor is 1.75x
// the calm one or more, turns the verdict to kWhole. Not in the verdict's own window, not
// under offloads, not on another split, not below that bar, not where another rank sets
// the floor, not in a window begun before its straggle came back; and never back.
TEST_F(StragglerKindTest, ASlowerDeviceThrottledLaterIsJudgedWholeOnTheCalmSplit) {
  const std::vector<int32_t> even{45, 45}, relieved{55, 35};
  ASSERT_EQ(CalmThenJudgedOnEven(0.050), Kind::kCompute);
  const absl::Duration judged = clock_.Monotonic();
  // The verdict's own window (16 steps of 0.1 s take 1.6 s).
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(Update(RanPeerOwn(1, even, 0.200, 0.097)), Kind::kCompute);
  // Under offloads, on another split, below 1.75x (1.63x), or with rank 0 the floor (its
  // own throttle: rank 1 waits for it).
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Update(RanPeerOwn(1, even, 0.200, 0.097, /*offloads=*/true)), Kind::kCompute);
  EXPECT_EQ(Update(RanPeerOwn(1, relieved, 0.200, 0.097)), Kind::kCompute);
  EXPECT_EQ(Update(RanPeerOwn(1, even, 0.200, 0.070)), Kind::kCompute);
  EXPECT_EQ(Update(RanPeerOwn(1, even, 0.097, 0.120)), Kind::kCompute);
  // Rank 0 straggles for a round, then rank 1 again: a window from then.
  Update(RanPeerOwn(0, even, 0.200, 0.097));
  Update(RanPeerOwn(1, even, 0.200, 0.097));
  EXPECT_EQ(Update(RanPeerOwn(1, even, 0.200, 0.097)), Kind::kCompute);
  EXPECT_EQ(kinds_.MeasuredAt(kGroup, 1), judged);
  // 2.26x on the calm split, a window on.
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Update(RanPeerOwn(1, even, 0.200, 0.097)), Kind::kWhole);
  EXPECT_THAT(Said(), HasSubstr("straggler kind (rank 1): slow in its collectives too (a CPU "
                                "quota or a co-tenant): collectives 0.0970 s a step at least on "
                                "the calm split against 0.0430 s calm (2.26x, >= 1.75x), "
                                "throttled 5s after it was judged slow in its compute alone (a "
                                "slower device): collectives 0.0500 s"));
  EXPECT_EQ(kinds_.MeasuredAt(kGroup, 1), clock_.Monotonic());
  EXPECT_NEAR(kinds_.StragglingFloor(kGroup, 1), 0.097, 1e-12) << "its floor from this window";
  // Never back: a floor near calm on the calm split reads as the contention gone.
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Update(RanPeerOwn(1, even, 0.200, 0.050)), Kind::kWhole);
  EXPECT_TRUE(kinds_.ContentionGone(kGroup, 1));
}

// A recheck ends a turned verdict as it ends any throttled one (relieved, calm for 30 s),
// but straggling again (for a window of its own) gives the rank back as the slower device
// it was, not as throttled, and the next recheck waits no longer: a slower device
// straggles whether or not it is throttled still. The calm split it runs again tells
// which: there it turns again, against the calm floor it had though that is now stale
// (none is measured while a verdict stands), and only then does the next recheck wait
// twice as long.
TEST_F(StragglerKindTest, ATurnedVerdictEndedByARecheckComesBackAsASlowerDevice) {
  const std::vector<int32_t> even{45, 45}, relieved{55, 35};
  // Rank 0's collectives at 0.200 s a step, rank 1's `own`.
  const auto ran = [](int32_t straggler, const std::vector<int32_t>& units, double own) {
    return RanPeerOwn(straggler, units, 0.200, own);
  };
  ASSERT_EQ(CalmThenJudgedOnEven(0.050), Kind::kCompute);
  clock_.Advance(absl::Seconds(2));
  ASSERT_EQ(Update(ran(1, even, 0.097)), Kind::kWhole);
  // Relieved, straggling for 10 minutes, then calm for 31 s: the recheck ends it.
  Update(Ran(1, 1, 0.200, false, relieved));
  clock_.Advance(absl::Minutes(10));
  Update(Ran(1, 1, 0.200, false, relieved));
  Update(Ran(-1, 1, 0.043, false, relieved));
  clock_.Advance(absl::Seconds(31));
  Update(Ran(-1, 1, 0.043, false, relieved));
  ASSERT_THAT(lines_, Contains(HasSubstr("its verdict ends, to see whether its contention is "
                                         "over")));
  // Straggling again on the even split: nothing until that lasts a window (rank 0's
  // round before it does not count), then a slower device, measured now.
  Update(ran(0, even, 0.050));
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Update(ran(1, even, 0.050)), Kind::kUnknown);
  EXPECT_THAT(Said(), HasSubstr("back once that lasts 16 steps"));
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Update(ran(1, even, 0.050)), Kind::kCompute);
  EXPECT_THAT(Said(), HasSubstr("slow in its compute alone (a slower device): collectives "
                                "0.0500 s a step at least against 0.0430 s calm (1.16x, < 1.25x; "
                                "judged once, for as long as it straggles); a slower device "
                                "again 4s after a recheck ended its verdict of throttled"));
  EXPECT_EQ(kinds_.MeasuredAt(kGroup, 1), clock_.Monotonic());
  EXPECT_EQ(kinds_.StragglingFloor(kGroup, 1), 0);
  // Throttled still, its floor on the calm split turns it again a window on (the calm
  // floor now 10m37s old), and the next recheck waits 1m, not 30 s.
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Update(ran(1, even, 0.097)), Kind::kWhole);
  EXPECT_THAT(Said(), HasSubstr("throttled still after a recheck: the next recheck after a "
                                "calm spell of 1m while relieved"));
}

// When the verdict that stands was measured: the round that measured it, kept while it
// stands; none before, for another rank, or for another incarnation.
TEST_F(StragglerKindTest, AVerdictKnowsWhenItWasMeasured) {
  Calm();
  EXPECT_FALSE(kinds_.MeasuredAt(kGroup, 1).has_value());
  ASSERT_EQ(Straggle(0.050), Kind::kCompute);
  const absl::Duration measured = clock_.Monotonic();
  EXPECT_EQ(kinds_.MeasuredAt(kGroup, 1), measured);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(Update(Ran(1, 1, 0.050)), Kind::kCompute);
  EXPECT_EQ(kinds_.MeasuredAt(kGroup, 1), measured) << "measured again while it stands";
  EXPECT_FALSE(kinds_.MeasuredAt(kGroup, 0).has_value());
  EXPECT_FALSE(kinds_.MeasuredAt({kGroup.key, kGroup.incarnation + 1}, 1).has_value());
}

TEST_F(StragglerKindTest, NothingIsJudgedWithoutACalmFloor) {
  // A straggler from the job's start.
  EXPECT_EQ(Straggle(0.097), Kind::kUnknown);
  EXPECT_THAT(Said(), HasSubstr("unknown: no calm collectives measured within 10m"));
  // A calm spell under offloads measures no floor (their transfers are timed as
  // collectives)...
  Update(Ran(-1, 2, 0.043, /*offloads=*/true));
  clock_.Advance(absl::Seconds(2));
  Update(Ran(-1, 2, 0.043, /*offloads=*/true));
  EXPECT_THAT(Said(), HasSubstr("calm collectives not measured yet"));
  // ...nor does one shorter than the 16 steps of a median.
  Update(Ran(1, 3, 0.097));
  Update(Ran(-1, 3, 0.043));
  EXPECT_THAT(Said(), HasSubstr("calm collectives not measured yet"));
  clock_.Advance(absl::Seconds(1));
  Update(Ran(-1, 3, 0.043));
  EXPECT_THAT(Said(), HasSubstr("calm collectives not measured yet"));
  clock_.Advance(absl::Seconds(1));
  Update(Ran(-1, 3, 0.043));
  EXPECT_THAT(Said(), HasSubstr("collectives 0.0430 s a step at least when calm"));
}

// Rounds judged calm whose floor is min_ratio times the fresh calm one or more are a
// straggler's the timers call calm (a quota's): the calm floor stays, and the straggler is
// judged against it; a floor that rose less is the calm that moved, and a stale one is
// replaced whatever the new one.
TEST_F(StragglerKindTest, ACalmRoundsFloorFarAboveTheCalmIsNotTakenAsCalm) {
  Calm();
  Update(Ran(-1, 1, 0.097));  // plain TP under a quota, the timers judging it calm
  clock_.Advance(absl::Seconds(2));
  Update(Ran(-1, 1, 0.097));
  EXPECT_THAT(lines_, Contains(HasSubstr("straggler kind: collectives 0.0970 s a step at least "
                                         "in a round judged calm, 2.26x the calm 0.0430 s: not "
                                         "taken as calm")));
  EXPECT_THAT(Said(), HasSubstr("collectives 0.0430 s a step at least when calm"));
  EXPECT_EQ(Straggle(0.097), Kind::kWhole) << "judged against the calm floor";

  StragglerKind moved(&clock_, StragglerKindOptions{});
  std::vector<std::string> lines;
  for (double floor : {0.043, 0.050, 0.060}) {  // each under 1.25x the one before
    moved.Update(kGroup, Ran(-1, 1, floor), lines);
    clock_.Advance(absl::Seconds(2));
    moved.Update(kGroup, Ran(-1, 1, floor), lines);
  }
  EXPECT_THAT(lines.back(), HasSubstr("collectives 0.0600 s a step at least when calm"));
  clock_.Advance(absl::Minutes(11));
  moved.Update(kGroup, Ran(-1, 1, 0.097), lines);
  EXPECT_THAT(lines.back(), HasSubstr("collectives 0.0970 s a step at least when calm"))
      << "a stale floor is replaced";
}

// A straggler the timers see near the threshold (a quota's) flickers calm: a calm spell
// shorter than a floor's window (16 steps) keeps its run, a longer one restarts it.
TEST_F(StragglerKindTest, AStragglersRunOutlastsCalmFlickers) {
  Calm();
  Update(Ran(1, 1, 0.043));
  clock_.Advance(absl::Seconds(1));
  Update(Ran(-1, 1, 0.097));  // judged calm for a round
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(Update(Ran(1, 1, 0.097)), Kind::kWhole) << "16 steps since its run began";

  StragglerKind other(&clock_, StragglerKindOptions{});
  std::vector<std::string> lines;
  CalmThenStraggling(other, lines);
  clock_.Advance(absl::Seconds(1));
  other.Update(kGroup, Ran(-1, 1, 0.060), lines);
  clock_.Advance(absl::Seconds(1.6));  // calm for a floor's window
  other.Update(kGroup, Ran(-1, 1, 0.060), lines);
  EXPECT_EQ(other.Update(kGroup, Ran(1, 1, 0.097), lines), Kind::kUnknown) << "run restarted";
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(other.Update(kGroup, Ran(1, 1, 0.097), lines), Kind::kWhole);
}

TEST_F(StragglerKindTest, AStaleCalmFloorIsNoneAndACordonMeasuresNothing) {
  Calm();
  Update(Ran(1, 1, 0.043));
  clock_.Advance(absl::Minutes(11));
  EXPECT_EQ(Update(Ran(1, 1, 0.097)), Kind::kUnknown);
  EXPECT_THAT(Said(), HasSubstr("no calm collectives measured within 10m"));

  StragglerKind other(&clock_, StragglerKindOptions{});
  std::vector<std::string> lines;
  CalmThenStraggling(other, lines);
  clock_.Advance(absl::Seconds(2));
  StragglerKind::Round cordoned = Ran(1, 1, 0.097);
  cordoned.cordon = true;
  EXPECT_EQ(other.Update(kGroup, cordoned, lines), Kind::kUnknown);
  EXPECT_EQ(other.Update(kGroup, Ran(1, 1, 0.097), lines), Kind::kWhole);
}

TEST_F(StragglerKindTest, WaitsForAPlanWithoutOffloadsRunAllUnderTheStraggler) {
  Calm();
  Update(Ran(1, 1, 0.043));
  clock_.Advance(absl::Seconds(1));  // 10 of the 16 steps were its own
  EXPECT_EQ(Update(Ran(1, 1, 0.097)), Kind::kUnknown);
  EXPECT_THAT(Said(), HasSubstr("not measured yet"));
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(Update(Ran(1, 2, 0.2, /*offloads=*/true)), Kind::kUnknown)
      << "an offload's transfers are timed as collectives";
  StragglerKind::Round pushed = Ran(1, 2, 0.097);
  pushed.published_version = 3;  // the workers do not run the newest plan yet
  EXPECT_EQ(Update(pushed), Kind::kUnknown);
  EXPECT_EQ(Update(Ran(1, 3, 0.0)), Kind::kUnknown) << "not 16 steps under it yet";
  EXPECT_EQ(Update(Ran(1, 3, 0.097)), Kind::kWhole);  // the offload check's probe
}

TEST_F(StragglerKindTest, AVerdictStandsWhileTheStragglerLasts) {
  Calm();
  ASSERT_EQ(Straggle(0.097), Kind::kWhole);
  // Balanced, a throttled rank idles more and its collectives speed up: still whole.
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(Update(Ran(1, 4, 0.045)), Kind::kWhole);
  // A calm blip keeps it; another straggler is judged afresh.
  EXPECT_EQ(Update(Ran(-1, 4, 0.045)), Kind::kWhole);
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(Update(Ran(1, 4, 0.045)), Kind::kWhole);
  EXPECT_EQ(Update(Ran(0, 4, 0.045)), Kind::kUnknown);
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Update(Ran(0, 4, 0.045)), Kind::kCompute);
  // Calm for 30 s: the verdict ends, and the calm floor moves with the calm measured.
  Update(Ran(-1, 4, 0.050));
  clock_.Advance(absl::Seconds(31));
  Update(Ran(-1, 4, 0.050));
  EXPECT_EQ(Straggle(0.060, 4), Kind::kCompute) << "0.060 against 0.050 calm: 1.2x";
}

// On the calm split a throttled rank arrives last, and the floor is its collectives: a
// floor nearer the calm one than its straggling floor (by ratio: under sqrt(0.043 x 0.097)
// = 0.0646 s) says its contention is gone. Not measured off the calm split, under
// offloads or before every rank ran the plan; its verdict stands throughout.
TEST_F(StragglerKindTest, AFloorNearTheCalmOneOnTheCalmSplitSaysTheContentionIsGone) {
  const std::vector<int32_t> even{45, 45}, resharded{60, 30};
  ASSERT_EQ(CalmThenJudgedOnEven(0.097), Kind::kWhole);
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 1)) << "its floor is the straggling one";
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 0)) << "no verdict on rank 0";
  // Still straggling on the calm split, its collectives back near calm.
  EXPECT_EQ(Update(Ran(1, 1, 0.050, false, even)), Kind::kWhole);
  double floor_now = 0;
  EXPECT_TRUE(kinds_.ContentionGone(kGroup, 1, &floor_now));
  EXPECT_DOUBLE_EQ(floor_now, 0.050);
  // Between the two, nearer the straggling floor: not gone.
  Update(Ran(1, 1, 0.066, false, even));
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 1));
  // Calm split, calm rounds too.
  Update(Ran(-1, 1, 0.045, false, even));
  EXPECT_TRUE(kinds_.ContentionGone(kGroup, 1));
  // Off the calm split, with offloads, or before the workers run the newest plan: unknown.
  Update(Ran(1, 2, 0.045, false, resharded));
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 1));
  Update(Ran(1, 3, 0.045, true, even));
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 1));
  StragglerKind::Round pushed = Ran(1, 3, 0.045, false, even);
  pushed.published_version = 4;
  Update(pushed);
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 1));
  EXPECT_EQ(Update(Ran(1, 4, 0.0, false, even)), Kind::kWhole) << "the verdict stands";
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 1)) << "no floor measured under plan 4 yet";
  // Windows without the contention do not bring its straggling floor down: three of them
  // on the calm split, 2 s apart (16 steps take 1.6 s), and the floor is still 0.097.
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Seconds(2));
    Update(Ran(1, 4, 0.045, false, even));
    EXPECT_TRUE(kinds_.ContentionGone(kGroup, 1));
  }
  EXPECT_DOUBLE_EQ(kinds_.StragglingFloor(kGroup, 1), 0.097);
  // The contention back: a window of it counts (the median of 0.097 and 0.090).
  clock_.Advance(absl::Seconds(2));
  Update(Ran(1, 4, 0.090, false, even));
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 1));
  EXPECT_DOUBLE_EQ(kinds_.StragglingFloor(kGroup, 1), (0.097 + 0.090) / 2);
}

// The floor is a median over 16 steps, so a straggle younger than that window says
// nothing of its contention through it: at a quota onset the floor still held calm steps
// and read calm, and the rank was priced by its timers (resharded short). Not gone until
// the straggle has lasted the window (16 steps of 0.1 s take 1.6 s), whatever the floor
// reads; a calm round between restarts it, and so does another rank's straggle.
TEST_F(StragglerKindTest, AStraggleYoungerThanTheFloorsWindowSaysNothingOfItsContention) {
  const std::vector<int32_t> even{45, 45};
  ASSERT_EQ(CalmThenJudgedOnEven(0.097), Kind::kWhole);
  // Calm for 3 s on the even split: the verdict stands, its contention gone meanwhile.
  clock_.Advance(absl::Seconds(1));
  Update(Ran(-1, 1, 0.045, false, even));
  clock_.Advance(absl::Seconds(2));
  Update(Ran(-1, 1, 0.045, false, even));
  ASSERT_TRUE(kinds_.ContentionGone(kGroup, 1));
  // Straggling again, the floor still reading calm: too young to tell.
  EXPECT_EQ(Update(Ran(1, 1, 0.045, false, even)), Kind::kWhole);
  std::string not_gone;
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 1, nullptr, &not_gone));
  EXPECT_EQ(not_gone,
            "rank 1's straggle began 0 ago, within the 16 steps the floor is a median of "
            "(some of them from before it)");
  clock_.Advance(absl::Milliseconds(1500));
  Update(Ran(1, 1, 0.045, false, even));
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 1, nullptr, &not_gone));
  EXPECT_THAT(not_gone, HasSubstr("rank 1's straggle began 1.5s ago"));
  // A window of it: a floor reading calm says the contention is gone (a drift).
  clock_.Advance(absl::Milliseconds(100));
  Update(Ran(1, 1, 0.045, false, even));
  EXPECT_TRUE(kinds_.ContentionGone(kGroup, 1));
  // A calm round, or rank 0's, and rank 1's straggle starts afresh.
  Update(Ran(-1, 1, 0.045, false, even));
  Update(Ran(1, 1, 0.045, false, even));
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 1));
  clock_.Advance(absl::Seconds(2));
  Update(Ran(1, 1, 0.045, false, even));
  ASSERT_TRUE(kinds_.ContentionGone(kGroup, 1));
  Update(Ran(0, 1, 0.045, false, even));
  Update(Ran(1, 1, 0.045, false, even));
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 1));
}

TEST_F(StragglerKindTest, FewerUnitsThanCalmMeasureNothing) {
  const std::vector<int32_t> even{45, 45}, resharded{60, 30};
  Update(Ran(-1, 1, 0.043, false, even));
  clock_.Advance(absl::Seconds(2));
  Update(Ran(-1, 1, 0.043, false, even));
  // Held at a third of its units, a throttled rank's collectives look nearly calm.
  Update(Ran(1, 2, 0.043, false, resharded));
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Update(Ran(1, 2, 0.050, false, resharded)), Kind::kUnknown);
  EXPECT_THAT(Said(), HasSubstr("not measured yet: it computes 30 units under the plan in "
                                "force, fewer than the 45 it computed when calm"));
  // Back at all of them (plain TP, or the offload check's probe): judged once 16 steps ran.
  EXPECT_EQ(Update(Ran(1, 3, 0.0, false, even)), Kind::kUnknown);
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Update(Ran(1, 3, 0.097, false, even)), Kind::kWhole);
}

TEST_F(StragglerKindTest, RelievedAndLookingCalmTheStragglerKeepsItsVerdict) {
  const std::vector<int32_t> even{45, 45}, resharded{60, 30};
  ASSERT_EQ(CalmThenJudgedOnEven(0.097), Kind::kWhole);
  EXPECT_FALSE(kinds_.UnitsGoingBack(kGroup));
  // Resharded, its timers read calm for 25 s: the verdict stands (the planner goes on
  // pricing what relieved it), and the calm floor is not measured from it.
  EXPECT_EQ(Update(Ran(-1, 2, 0.060, false, resharded)), Kind::kWhole);
  clock_.Advance(absl::Seconds(25));
  EXPECT_EQ(Update(Ran(-1, 2, 0.060, false, resharded)), Kind::kWhole);
  EXPECT_THAT(lines_, Contains(HasSubstr("collectives 0.0430 s a step at least when calm")));
  EXPECT_THAT(Said(), HasSubstr("straggler kind (rank 1, calm now): slow in its collectives"));
  EXPECT_EQ(Update(Ran(1, 2, 0.060, false, resharded)), Kind::kWhole);
  // Given its units back and calm for 30 s: the contention is over.
  Update(Ran(-1, 3, 0.050, false, even));
  clock_.Advance(absl::Seconds(31));
  EXPECT_EQ(Update(Ran(-1, 3, 0.050, false, even)), Kind::kUnknown);
  EXPECT_THAT(Said(), HasSubstr("collectives 0.0500 s a step at least when calm"));
  EXPECT_EQ(Update(Ran(1, 3, 0.050, false, even)), Kind::kUnknown);
}

TEST_F(StragglerKindTest, ARelievedStragglerCalmForHalfAMinuteIsRecheckedAndBacksOff) {
  const std::vector<int32_t> even{45, 45}, resharded{60, 30};
  auto judge_on_even = [&](int64_t version) {
    Update(Ran(1, version, 0.043, false, even));
    clock_.Advance(absl::Seconds(2));
    return Update(Ran(1, version, 0.097, false, even));
  };
  ASSERT_EQ(CalmThenJudgedOnEven(0.097), Kind::kWhole);
  // Resharded and calm: the spell counts; a straggling blip (any rank's) does not restart
  // it, a straggling run as long as a floor's window (16 steps of 0.1 s) does.
  EXPECT_EQ(Update(Ran(-1, 2, 0.045, false, resharded)), Kind::kWhole);
  clock_.Advance(absl::Seconds(10));
  Update(Ran(0, 2, 0.045, false, resharded));
  clock_.Advance(absl::Seconds(1));
  Update(Ran(0, 2, 0.045, false, resharded));
  EXPECT_EQ(Update(Ran(-1, 2, 0.045, false, resharded)), Kind::kWhole);
  EXPECT_THAT(lines_, Contains(HasSubstr("relieved of units and calm for 11s")));
  EXPECT_EQ(Update(Ran(1, 2, 0.045, false, resharded)), Kind::kWhole);
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Update(Ran(1, 2, 0.045, false, resharded)), Kind::kWhole);
  EXPECT_EQ(Update(Ran(-1, 2, 0.045, false, resharded)), Kind::kWhole);
  EXPECT_THAT(lines_, Contains(HasSubstr("relieved of units and calm for 0s")));
  clock_.Advance(absl::Seconds(29));
  EXPECT_EQ(Update(Ran(-1, 2, 0.045, false, resharded)), Kind::kWhole);
  EXPECT_THAT(lines_, Contains(HasSubstr("relieved of units and calm for 29s: its verdict "
                                         "ends once that lasts 30s")));
  // Half a minute of it: the verdict ends, so that its units go back; the resharded split's
  // collectives are not taken as the calm floor on the way.
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Update(Ran(-1, 2, 0.045, false, resharded)), Kind::kUnknown);
  EXPECT_THAT(lines_, Contains(HasSubstr("rank 1 relieved of units and calm for 31s: its "
                                         "verdict ends")));
  EXPECT_THAT(lines_, Contains(HasSubstr("collectives 0.0430 s a step at least when calm")));
  // Calm on the relieved split: its units are to go back, and no calm floor is taken
  // from it (its rank 0 waits for nobody), however long.
  EXPECT_TRUE(kinds_.UnitsGoingBack(kGroup));
  clock_.Advance(absl::Seconds(5));
  Update(Ran(-1, 2, 0.036, false, resharded));
  EXPECT_THAT(lines_, Contains(HasSubstr("calm collectives not measured on the split a "
                                         "recheck found relieved")));
  EXPECT_THAT(lines_, Contains(HasSubstr("collectives 0.0430 s a step at least when calm")));
  // Throttled still: on its units again it straggles, and once that lasts 16 steps its
  // verdict is back (no fresh calm floor needed), the next check waiting twice as long.
  EXPECT_EQ(judge_on_even(3), Kind::kWhole);
  EXPECT_THAT(Said(), HasSubstr("throttled still 7s after a recheck ended its verdict: back, "
                                "the next recheck after a calm spell of 1m while relieved"));
  EXPECT_FALSE(kinds_.UnitsGoingBack(kGroup)) << "its units are back, and it is resharded";
  EXPECT_EQ(Update(Ran(-1, 4, 0.045, false, resharded)), Kind::kWhole);
  clock_.Advance(absl::Seconds(45));
  EXPECT_EQ(Update(Ran(-1, 4, 0.045, false, resharded)), Kind::kWhole);
  clock_.Advance(absl::Seconds(16));
  EXPECT_EQ(Update(Ran(-1, 4, 0.045, false, resharded)), Kind::kUnknown);
  // Over this time: calm on its units for 10 minutes, where the calm floor is measured
  // again. A straggler judged then is no failed recheck, and its check waits half a
  // minute again.
  Update(Ran(-1, 5, 0.043, false, even));
  clock_.Advance(absl::Minutes(10));
  Update(Ran(-1, 5, 0.041, false, even));
  EXPECT_THAT(lines_, Contains(HasSubstr("collectives 0.0410 s a step at least when calm "
                                         "(measured 0s ago)")));
  ASSERT_EQ(judge_on_even(5), Kind::kWhole);
  EXPECT_THAT(Said(), Not(HasSubstr("recheck")));
  Update(Ran(-1, 6, 0.045, false, resharded));
  clock_.Advance(absl::Seconds(31));
  EXPECT_EQ(Update(Ran(-1, 6, 0.045, false, resharded)), Kind::kUnknown);
}

TEST_F(StragglerKindTest, OffloadsBackDoNotHideAReshardFromTheRecheck) {
  const std::vector<int32_t> even{45, 45}, resharded{60, 30};
  ASSERT_EQ(CalmThenJudgedOnEven(0.097), Kind::kWhole);
  // Calm on its reshard, its peer offloading 15 units back: it computes 45, owns 30. Its
  // reshard is what a recheck undoes.
  StragglerKind::Round back = Ran(-1, 2, 0.045, true, even);
  back.owned = resharded;
  Update(back);
  EXPECT_THAT(lines_, Contains(HasSubstr("relieved of units and calm for 0s")));
  // Relieved by what it owns alone; not in another incarnation of the group, nor back on
  // its calm units.
  EXPECT_THAT(kinds_.RelievedThrottled(kGroup, even, resharded), ::testing::ElementsAre(1));
  EXPECT_THAT(kinds_.RelievedThrottled({kGroup.key, kGroup.incarnation + 1}, even, resharded),
              ::testing::IsEmpty());
  EXPECT_THAT(kinds_.RelievedThrottled(kGroup, even, even), ::testing::IsEmpty());
  clock_.Advance(absl::Seconds(31));
  EXPECT_EQ(Update(back), Kind::kUnknown);
  EXPECT_TRUE(kinds_.UnitsGoingBack(kGroup));
  EXPECT_THAT(kinds_.RelievedThrottled(kGroup, even, resharded), ::testing::IsEmpty())
      << "the recheck ended its verdict";
  // Going back is asked for half a minute at most: a planner that keeps the split is not
  // overruled in every calm round after.
  clock_.Advance(absl::Seconds(31));
  Update(back);
  EXPECT_FALSE(kinds_.UnitsGoingBack(kGroup));
}

TEST_F(StragglerKindTest, ARelievedSlowerDeviceIsNotRechecked) {
  const std::vector<int32_t> resharded{60, 30};
  ASSERT_EQ(CalmThenJudgedOnEven(0.045), Kind::kCompute);
  // Resharded it looks calm, and stays slower: its verdict stands, its units stay.
  Update(Ran(-1, 2, 0.045, false, resharded));
  clock_.Advance(absl::Minutes(2));
  EXPECT_EQ(Update(Ran(-1, 2, 0.045, false, resharded)), Kind::kCompute);
  EXPECT_FALSE(kinds_.UnitsGoingBack(kGroup));
  EXPECT_THAT(kinds_.RelievedThrottled(kGroup, resharded, resharded), ::testing::IsEmpty())
      << "a slower device is no throttled rank";
  EXPECT_THAT(lines_, Not(Contains(HasSubstr("relieved of units and calm"))));
}

TEST_F(StragglerKindTest, TwoStragglersTakingTurnsKeepTheirVerdicts) {
  Calm();
  ASSERT_EQ(Straggle(0.097), Kind::kWhole);
  Update(Ran(0, 1, 0.097));
  clock_.Advance(absl::Seconds(2));
  ASSERT_EQ(Update(Ran(0, 1, 0.050)), Kind::kCompute);
  EXPECT_EQ(Update(Ran(1, 1, 0.050)), Kind::kWhole) << "rank 1's verdict, not measured again";
  EXPECT_EQ(Update(Ran(0, 1, 0.097)), Kind::kCompute);
}

// A verdict ends with its own rank's absence of kAbsentFor, whatever its peers do. The
// interleaved benchmark judged rank 0 a slower device once, from the VM's drift, and its
// peer, straggling in most segments, kept that verdict standing all run: each later drift
// of rank 0 was chronic at once (docs/benchmarks.md, 2026-12-06 (j)).
TEST_F(StragglerKindTest, AVerdictEndsWithItsRanksOwnAbsence) {
  Calm();
  ASSERT_EQ(Straggle(0.097), Kind::kWhole);  // rank 1 throttled
  Update(Ran(0, 1, 0.050));
  clock_.Advance(absl::Seconds(2));
  ASSERT_EQ(Update(Ran(0, 1, 0.050)), Kind::kCompute);  // rank 0 a slower device
  // Rank 1 straggles for 29 s: rank 0's verdict stands (two stragglers taking turns).
  for (int i = 0; i < 29; ++i) {
    clock_.Advance(absl::Seconds(1));
    Update(Ran(1, 1, 0.097));
  }
  EXPECT_EQ(Update(Ran(0, 1, 0.050)), Kind::kCompute) << "absent 28 s: kept";
  // Rank 1 straggles 31 s more (30 s since rank 0's first absent round): rank 0's verdict
  // ends, rank 1's stands.
  for (int i = 0; i < 31; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_EQ(Update(Ran(1, 1, 0.097)), Kind::kWhole);
  }
  EXPECT_EQ(Update(Ran(0, 1, 0.050)), Kind::kUnknown) << "rank 0 is measured afresh";
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Update(Ran(0, 1, 0.050)), Kind::kCompute);
}

TEST_F(StragglerKindTest, ANewIncarnationStartsAfresh) {
  Calm();
  ASSERT_EQ(Straggle(0.097), Kind::kWhole);
  const GroupRef again{.key = kGroup.key, .incarnation = 2};
  std::vector<std::string> lines;
  EXPECT_EQ(kinds_.Update(again, Ran(1, 1, 0.097), lines), Kind::kUnknown);
  // The new incarnation measures its own calm floor; forgotten, it has none again.
  kinds_.Update(again, Ran(-1, 1, 0.043), lines);
  clock_.Advance(absl::Seconds(2));
  kinds_.Update(again, Ran(-1, 1, 0.043), lines);
  kinds_.Forget(kGroup.key);
  kinds_.Update(again, Ran(1, 1, 0.043), lines);
  clock_.Advance(absl::Seconds(2));
  lines.clear();
  EXPECT_EQ(kinds_.Update(again, Ran(1, 1, 0.097), lines), Kind::kUnknown);
  EXPECT_THAT(lines, Contains(HasSubstr("no calm collectives measured")));
}

TEST(StragglerKindOptionsTest, ValidationNamesTheField) {
  EXPECT_TRUE(ValidateStragglerKindOptions({}).ok());
  EXPECT_THAT(ValidateStragglerKindOptions({.min_steps = 0}).message(), HasSubstr("min_steps"));
  EXPECT_THAT(ValidateStragglerKindOptions({.min_ratio = 1.0}).message(), HasSubstr("min_ratio"));
  EXPECT_THAT(ValidateStragglerKindOptions({.calm_fresh = absl::ZeroDuration()}).message(),
              HasSubstr("calm_fresh"));
}

}  // namespace
}  // namespace ballast::coordinator
