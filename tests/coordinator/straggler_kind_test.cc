// StragglerKind: a straggler whose collectives' floor rose over the group's calm one is
// judged slow in them too (fixed costs), one whose floor stayed is judged slow in compute
// alone; nothing is judged from plans with offloads, from steps that were not all the
// straggler's, against a stale calm floor, under a cordon, or while the straggler computes
// fewer units than it did calm; a verdict stands while the straggler lasts (and while it
// looks calm relieved of units, for up to 30 s: then it is rechecked, and the next
// recheck waits twice as long when the rank is judged throttled again soon after), a
// calm spell of 30 s ends it, another straggler is judged afresh; each verdict knows
// when it was measured, and a throttled rank's verdict the slowdown its step measured on the split
// it ran calm, a median over windows, and its arrival spread fitted near the balanced split. A
// "calm" floor far above the calm one is a straggler's the timers call calm, not taken.
#include "coordinator/straggler_kind.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "testing/fake_clock.h"

namespace ballast::coordinator {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using Kind = StragglerKind::Kind;

const GroupRef kGroup{.key = {"gpt", "tp0"}, .incarnation = 1};

// The workers run plan `version` (the newest pushed), without offloads unless said, at a
// step of 0.1 s whose collectives cost `collectives` at least.
StragglerKind::Round Ran(int32_t straggler, int64_t version, double collectives,
                         bool offloads = false, std::vector<int32_t> units = {}) {
  return {.straggler = straggler,
          .plan_version = version,
          .published_version = version,
          .offloads = offloads,
          .units = std::move(units),
          .step_seconds = 0.1,
          .collective_seconds = collectives};
}

// Plan 1 without offloads at a step of `step` s on `units`.
StragglerKind::Round RanStep(int32_t straggler, double step, double collectives,
                             const std::vector<int32_t>& units) {
  StragglerKind::Round round = Ran(straggler, 1, collectives, false, units);
  round.step_seconds = step;
  return round;
}

class StragglerKindTest : public ::testing::Test {
 protected:
  Kind Update(const StragglerKind::Round& round) {
    lines_.clear();
    return kinds_.Update(kGroup, round, lines_);
  }
  std::string Said() const { return lines_.empty() ? "" : lines_.back(); }
  // Calm for 2 s (16 steps of 0.1 s take 1.6 s), with collectives at 43 ms.
  void Calm(double collectives = 0.043) {
    Update(Ran(-1, 1, collectives));
    clock_.Advance(absl::Seconds(2));
    Update(Ran(-1, 1, collectives));
  }
  // Rank 1 straggles; 2 s later the plan in force (without offloads) shows `collectives`.
  Kind Straggle(double collectives, int64_t version = 1) {
    Update(Ran(1, version, 0.043));  // the median still holds calm steps
    clock_.Advance(absl::Seconds(2));
    return Update(Ran(1, version, collectives));
  }

  // Calm for 2 s on the even split (45 units a rank) at 43 ms of collectives, then rank 1
  // straggling there for 2 s at `collectives` (plan 1): its kind.
  Kind CalmThenJudgedOnEven(double collectives) {
    const std::vector<int32_t> even{45, 45};
    Update(Ran(-1, 1, 0.043, false, even));
    clock_.Advance(absl::Seconds(2));
    Update(Ran(-1, 1, 0.043, false, even));
    Update(Ran(1, 1, 0.043, false, even));
    clock_.Advance(absl::Seconds(2));
    return Update(Ran(1, 1, collectives, false, even));
  }

  // On another StragglerKind: calm for 2 s at 43 ms of collectives, then rank 1 straggling
  // (its first round).
  void CalmThenStraggling(StragglerKind& kinds, std::vector<std::string>& lines) {
    kinds.Update(kGroup, Ran(-1, 1, 0.043), lines);
    clock_.Advance(absl::Seconds(2));
    kinds.Update(kGroup, Ran(-1, 1, 0.043), lines);
    kinds.Update(kGroup, Ran(1, 1, 0.043), lines);
  }

  testing::FakeClock clock_;
  StragglerKind kinds_{&clock_, StragglerKindOptions{}};
  std::vector<std::string> lines_;
};

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

// A throttled rank's step on the split it ran calm is its slowdown in all it does,
// measured once with its verdict; a slower device, a different split or a step no slower
// measure none, and none stands once the verdict ends.
TEST_F(StragglerKindTest, AThrottledRanksStepOnTheCalmSplitIsItsSlowdown) {
  const std::vector<int32_t> even{45, 45}, uneven{40, 50};
  auto judged = [&](const std::vector<int32_t>& units, double step, double collectives) {
    StragglerKind kinds(&clock_, StragglerKindOptions{});
    std::vector<std::string> lines;
    kinds.Update(kGroup, RanStep(-1, 0.100, 0.043, even), lines);
    clock_.Advance(absl::Seconds(2));
    kinds.Update(kGroup, RanStep(-1, 0.100, 0.043, even), lines);
    kinds.Update(kGroup, RanStep(1, 0.100, 0.043, units), lines);
    clock_.Advance(absl::Seconds(3));  // 16 steps of 0.163 s
    lines.clear();
    const Kind kind = kinds.Update(kGroup, RanStep(1, step, collectives, units), lines);
    EXPECT_EQ(kinds.StragglingFloor(kGroup, 1) > 0, kind == Kind::kWhole && units == even)
        << "a floor only for a throttled rank measured on the calm split";
    return std::make_tuple(kind, kinds.StepSlowdown(kGroup, 1),
                           lines.empty() ? std::string() : lines.back());
  };
  const auto [whole, slowdown, why] = judged(even, 0.163, 0.097);
  EXPECT_EQ(whole, Kind::kWhole);
  EXPECT_NEAR(slowdown, 1.63, 1e-12);
  EXPECT_THAT(why, HasSubstr("the group's step 0.1630 s against 0.1000 s calm on the same "
                             "split (medians of 1 and 1 windows of 16 steps): slowed 1.63x in "
                             "all it does"));
  EXPECT_EQ(std::get<0>(judged(even, 0.163, 0.050)), Kind::kCompute);
  EXPECT_EQ(std::get<1>(judged(even, 0.163, 0.050)), 0) << "a slower device: its timers see it";
  EXPECT_EQ(std::get<0>(judged(uneven, 0.163, 0.097)), Kind::kWhole);
  EXPECT_EQ(std::get<1>(judged(uneven, 0.163, 0.097)), 0) << "not the split it ran calm";
  EXPECT_EQ(std::get<1>(judged(even, 0.095, 0.097)), 0) << "a step no slower";

  // Measured once: relieved of units, its step says less, and the price stays.
  Update(RanStep(-1, 0.100, 0.043, even));
  clock_.Advance(absl::Seconds(2));
  Update(RanStep(-1, 0.100, 0.043, even));
  Update(RanStep(1, 0.100, 0.043, even));
  clock_.Advance(absl::Seconds(3));
  ASSERT_EQ(Update(RanStep(1, 0.170, 0.097, even)), Kind::kWhole);
  EXPECT_EQ(Update(RanStep(1, 0.120, 0.060, uneven)), Kind::kWhole);
  EXPECT_NEAR(kinds_.StepSlowdown(kGroup, 1), 1.7, 1e-12);
  EXPECT_EQ(kinds_.StepSlowdown(kGroup, 0), 0);
  EXPECT_EQ(kinds_.StepSlowdown({kGroup.key, kGroup.incarnation + 1}, 1), 0);
  // Its collectives' straggling floor, held too: 0.097 s on the calm split, not the 0.060
  // s it measures relieved.
  EXPECT_NEAR(kinds_.StragglingFloor(kGroup, 1), 0.097, 1e-12);
  EXPECT_EQ(kinds_.StragglingFloor(kGroup, 0), 0);
  EXPECT_EQ(kinds_.StragglingFloor({kGroup.key, kGroup.incarnation + 1}, 1), 0);
  // Calm for 30 s on the even split: the verdict and its slowdown and floor end.
  Update(RanStep(-1, 0.100, 0.043, even));
  clock_.Advance(absl::Seconds(31));
  Update(RanStep(-1, 0.100, 0.043, even));
  EXPECT_EQ(kinds_.StepSlowdown(kGroup, 1), 0);
  EXPECT_EQ(kinds_.StragglingFloor(kGroup, 1), 0);
}

// A throttled rank's arrival spread: fitted to both sides' waits (the others' beyond the
// calm collectives, its own beyond its straggling floor) under a plan without offloads near
// the balanced split, once a window, in straggling and calm rounds alike while its verdict
// stands; the median of the fits; none far from the balanced split (plain TP's waits do
// not tell it), on the calm split, under offloads or a plan not yet run; ended with the
// verdict.
TEST_F(StragglerKindTest, AThrottledRanksArrivalSpreadIsFittedToBothSidesWaitsNearBalance) {
  const std::vector<int32_t> even{45, 45}, near{55, 35};
  const auto waited = [](int32_t straggler, const std::vector<int32_t>& units, double others,
                         double throttled, bool offloads = false) {
    StragglerKind::Round round = RanStep(straggler, 0.150, std::min(others, throttled), units);
    round.offloads = offloads;
    round.rank_collective_seconds = {others, throttled};
    return round;
  };
  Update(RanStep(-1, 0.100, 0.043, even));
  clock_.Advance(absl::Seconds(2));
  Update(RanStep(-1, 0.100, 0.043, even));
  Update(RanStep(1, 0.100, 0.043, even));
  clock_.Advance(absl::Seconds(3));
  // Judged on plain TP, whose waits are all the others': no spread from them.
  StragglerKind::Round plain = waited(1, even, 0.170, 0.097);
  plain.step_seconds = 0.170;
  ASSERT_EQ(Update(plain), Kind::kWhole);
  ASSERT_NEAR(kinds_.StragglingFloor(kGroup, 1), 0.097, 1e-12);
  EXPECT_EQ(kinds_.ArrivalSpread(kGroup, 1), 0);
  // Nor from waits on both sides on the calm split, where its floor was measured: its wait
  // beyond it there is that floor's noise.
  clock_.Advance(absl::Seconds(1));
  Update(waited(1, even, 0.043 + 0.02, 0.097 + 0.02));
  EXPECT_EQ(kinds_.ArrivalSpread(kGroup, 1), 0);

  // Near the balanced split the others waited 0.0105 s beyond the calm 0.043 s, it 0.0150 s
  // beyond its 0.097 s floor: a spread of 0.0316 s (arrival_spread_test.cc).
  clock_.Advance(absl::Seconds(3));
  Update(waited(1, near, 0.043 + 0.0105, 0.097 + 0.0150));
  EXPECT_NEAR(kinds_.ArrivalSpread(kGroup, 1), 0.03164, 1e-5);
  EXPECT_THAT(lines_, Contains(HasSubstr(
                          "arrival spread (rank 1): 0.0316 s fitted to this plan's waits (the "
                          "others 0.0105 s a step beyond the 0.0430 s their collectives cost "
                          "calm, it 0.0150 s beyond its straggling floor 0.0970 s)")));
  // A second later: the same window (16 steps of 0.15 s take 2.4 s), no second fit.
  clock_.Advance(absl::Seconds(1));
  Update(waited(1, near, 0.043 + 0.02, 0.097 + 0.02));
  EXPECT_NEAR(kinds_.ArrivalSpread(kGroup, 1), 0.03164, 1e-5);
  // Balanced waits of 0.02 s: 0.0501 s, and the median of the two.
  clock_.Advance(absl::Seconds(3));
  Update(waited(1, near, 0.043 + 0.02, 0.097 + 0.02));
  EXPECT_NEAR(kinds_.ArrivalSpread(kGroup, 1), (0.03164 + 0.02 * std::sqrt(2 * M_PI)) / 2, 1e-5);
  const double two = kinds_.ArrivalSpread(kGroup, 1);
  // Not from plain TP's waits, under offloads, or from a plan pushed but not yet run.
  clock_.Advance(absl::Seconds(3));
  Update(waited(1, even, 0.170, 0.097));
  clock_.Advance(absl::Seconds(3));
  Update(waited(1, near, 0.043 + 0.005, 0.097 + 0.005, /*offloads=*/true));
  clock_.Advance(absl::Seconds(3));
  StragglerKind::Round pushed = waited(1, near, 0.043 + 0.005, 0.097 + 0.005);
  pushed.published_version = 2;
  Update(pushed);
  EXPECT_DOUBLE_EQ(kinds_.ArrivalSpread(kGroup, 1), two);
  // A calm round while the verdict stands (relieved, its timers call it calm) fits too:
  // 0.015 s each, 0.0376 s, the median of three.
  clock_.Advance(absl::Seconds(3));
  Update(waited(-1, near, 0.043 + 0.015, 0.097 + 0.015));
  EXPECT_NEAR(kinds_.ArrivalSpread(kGroup, 1), 0.015 * std::sqrt(2 * M_PI), 1e-5);
  // Only the throttled rank's, in this incarnation.
  EXPECT_EQ(kinds_.ArrivalSpread(kGroup, 0), 0);
  EXPECT_EQ(kinds_.ArrivalSpread({kGroup.key, kGroup.incarnation + 1}, 1), 0);
  // Calm for 30 s on the even split: the verdict and its spread end.
  Update(RanStep(-1, 0.100, 0.043, even));
  clock_.Advance(absl::Seconds(31));
  Update(RanStep(-1, 0.100, 0.043, even));
  EXPECT_EQ(kinds_.ArrivalSpread(kGroup, 1), 0);
}

// The step slowdown is a median over disjoint windows on the calm split, the straggler's
// and the calm ones: one slow window does not set the price (it over-priced the GPT's
// quota straggler, docs/benchmarks.md 2026-12-04 (b)); the straggler's windows are taken
// again when it runs the calm split again (a hold), never on another split; the calm ones
// also while its verdict stands, but not from a round whose floor is a straggler's.
TEST_F(StragglerKindTest, AThrottledRanksSlowdownIsTheMedianOfItsWindowsOnTheCalmSplit) {
  const std::vector<int32_t> even{45, 45}, uneven{40, 50};
  // Calm windows of 0.100, 0.090 and 0.100 s, 2 s apart (16 steps take 1.6 s).
  Update(RanStep(-1, 0.100, 0.043, even));
  for (const double step : {0.100, 0.090, 0.100}) {
    clock_.Advance(absl::Seconds(2));
    Update(RanStep(-1, step, 0.043, even));
  }
  Update(RanStep(1, 0.100, 0.043, even));
  clock_.Advance(absl::Seconds(3));
  ASSERT_EQ(Update(RanStep(1, 0.186, 0.150, even)), Kind::kWhole);
  EXPECT_NEAR(kinds_.StepSlowdown(kGroup, 1), 1.86, 1e-12);
  // What the collectives cost calm, against which the slowdown was measured.
  EXPECT_NEAR(kinds_.CalmCollectives(kGroup), 0.043, 1e-12);
  EXPECT_EQ(kinds_.CalmCollectives({kGroup.key, kGroup.incarnation + 1}), 0);
  EXPECT_THAT(Said(), HasSubstr("0.1860 s against 0.1000 s calm on the same split (medians of "
                                "1 and 3 windows of 16 steps): slowed 1.86x"));
  // A second after: the same window, not another.
  clock_.Advance(absl::Seconds(1));
  Update(RanStep(1, 0.150, 0.150, even));
  EXPECT_NEAR(kinds_.StepSlowdown(kGroup, 1), 1.86, 1e-12);
  // Resharded: its steps on another split are not windows.
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Seconds(3));
    Update(RanStep(1, 0.120, 0.060, uneven));
  }
  EXPECT_NEAR(kinds_.StepSlowdown(kGroup, 1), 1.86, 1e-12);
  // Held on the calm split again: two more windows, and the median is 0.165 s.
  for (const double step : {0.164, 0.165}) {
    clock_.Advance(absl::Seconds(3));
    Update(RanStep(1, step, 0.150, even));
  }
  EXPECT_NEAR(kinds_.StepSlowdown(kGroup, 1), 1.65, 1e-12);
  EXPECT_THAT(Said(), HasSubstr("(medians of 3 and 3 windows of 16 steps): slowed 1.65x"));
  // Calm on the calm split while the verdict stands: a window whose floor rose 1.5x with
  // the machine is calm (nearer the calm 0.043 s than the straggler's 0.150 s), and the
  // calm step is the median of four, 0.100 s; one whose floor is the straggler's adds none.
  Update(RanStep(-1, 0.105, 0.065, even));
  clock_.Advance(absl::Seconds(2));
  Update(RanStep(-1, 0.105, 0.065, even));
  clock_.Advance(absl::Seconds(2));
  Update(RanStep(-1, 0.160, 0.140, even));
  clock_.Advance(absl::Seconds(3));
  Update(RanStep(1, 0.165, 0.150, even));
  EXPECT_THAT(Said(), HasSubstr("(medians of 3 and 4 windows of 16 steps): slowed 1.65x"));
  EXPECT_NEAR(kinds_.StepSlowdown(kGroup, 1), 0.165 / 0.100, 1e-12);
  // Four calm windows more on a slower machine (0.130 s, floors 0.075 s): the calm step
  // follows it (the median of the last five, 0.130 s).
  for (int i = 0; i < 4; ++i) {
    Update(RanStep(-1, 0.130, 0.075, even));
    clock_.Advance(absl::Seconds(3));
  }
  Update(RanStep(-1, 0.130, 0.075, even));
  EXPECT_NEAR(kinds_.StepSlowdown(kGroup, 1), 0.165 / 0.130, 1e-12);
  EXPECT_NEAR(kinds_.CalmCollectives(kGroup), 0.075, 1e-12) << "the calm windows' floor";
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
