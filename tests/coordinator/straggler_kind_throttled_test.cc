// StragglerKind's measures of a throttled rank: the slowdown its step measured on the split
// it ran calm, a median over windows, and its arrival spread fitted to both sides' waits
// near the balanced split, each ended with its verdict; its timers there, against which a
// drift is told from its contention back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "coordinator/straggler_kind.h"
#include "testing/fake_clock.h"
#include "tests/coordinator/straggler_kind_test_base.h"

namespace ballast::coordinator {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using Kind = StragglerKind::Kind;

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

// Relieved of units, a throttled rank's collectives cost it less than its straggling floor
// (the small GPT's 0.94x and 0.98x, docs/benchmarks.md 2026-12-06): the ratio of its own
// collectives to that floor, once a window under a plan without offloads in which it
// computes fewer units than calm, the median of the newest five, at most 1. Not on the
// calm split or where it computes more than calm, under offloads, from a plan not yet run,
// or from a window whose collectives lie nearer calm than its floor (its contention gone);
// only its own, in this incarnation, and ended with its verdict.
TEST_F(StragglerKindTest, AThrottledRanksCollectivesRelievedOfUnitsAreTheShareOfItsFloor) {
  const std::vector<int32_t> even{45, 45}, relieved{55, 35}, loaded{40, 50};
  const auto ran = [](int32_t straggler, const std::vector<int32_t>& units, double own,
                      bool offloads = false) {
    StragglerKind::Round round = RanOwn(straggler, units, own);
    round.offloads = offloads;
    return round;
  };
  const auto ratio = [&](int* windows = nullptr) {
    return kinds_.RelievedFloorRatio(kGroup, 1, relieved, windows);
  };
  const StragglerKind::Round plain = JudgeThrottledOnEven();
  ASSERT_NEAR(kinds_.StragglingFloor(kGroup, 1), 0.100, 1e-12);
  int windows = -1;
  EXPECT_EQ(ratio(&windows), 1);
  EXPECT_EQ(windows, 0);
  // Not on the calm split, where its floor is measured, nor computing more than calm.
  clock_.Advance(absl::Seconds(3));
  Update(ran(1, even, 0.090));
  clock_.Advance(absl::Seconds(3));
  Update(ran(1, loaded, 0.090));
  EXPECT_EQ(ratio(), 1);

  clock_.Advance(absl::Seconds(3));
  Update(ran(1, relieved, 0.094));
  EXPECT_NEAR(ratio(&windows), 0.94, 1e-12);
  EXPECT_EQ(windows, 1);
  EXPECT_THAT(lines_, Contains(HasSubstr(
                          "relieved (rank 1): its collectives 0.0940 s a step at 35 units, "
                          "0.940x the 0.1000 s they cost it straggling on the calm split; "
                          "0.940x, the median of 1 windows, prices them while it is relieved")));
  // A second later: the same window (16 steps of 0.15 s take 2.4 s).
  clock_.Advance(absl::Seconds(1));
  Update(ran(1, relieved, 0.050 * 2));
  EXPECT_NEAR(ratio(), 0.94, 1e-12);
  // A calm round (its timers call it calm, relieved) is a window too: 0.90, and the median
  // of the two is their mean.
  clock_.Advance(absl::Seconds(3));
  Update(ran(-1, relieved, 0.090));
  EXPECT_NEAR(ratio(&windows), 0.92, 1e-12);
  EXPECT_EQ(windows, 2);
  // Not under offloads or a cordon, from a plan pushed but not yet run, or nearer calm
  // (0.060 s: 0.060^2 < 0.043 x 0.100).
  clock_.Advance(absl::Seconds(3));
  Update(ran(1, relieved, 0.070, /*offloads=*/true));
  clock_.Advance(absl::Seconds(3));
  StragglerKind::Round cordoned = ran(1, relieved, 0.070);
  cordoned.cordon = true;
  Update(cordoned);
  clock_.Advance(absl::Seconds(3));
  StragglerKind::Round pushed = ran(1, relieved, 0.070);
  pushed.published_version = 2;
  Update(pushed);
  clock_.Advance(absl::Seconds(3));
  Update(ran(1, relieved, 0.060));
  EXPECT_NEAR(ratio(&windows), 0.92, 1e-12);
  EXPECT_EQ(windows, 2);
  // Waiting for the others it measures above its floor: the median of 0.90, 0.94 and 1.20
  // is 0.94; with two more above 1, the price is its floor, not above.
  clock_.Advance(absl::Seconds(3));
  Update(ran(1, relieved, 0.120));
  EXPECT_NEAR(ratio(), 0.94, 1e-12);
  for (int i = 0; i < 2; ++i) {
    clock_.Advance(absl::Seconds(3));
    Update(ran(1, relieved, 0.110));
  }
  EXPECT_EQ(ratio(&windows), 1);
  EXPECT_EQ(windows, 5);
  // The newest five: three more at 0.92 leave 0.92, 0.92, 0.92, 1.10, 1.10.
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Seconds(3));
    Update(ran(1, relieved, 0.092));
  }
  EXPECT_NEAR(ratio(), 0.92, 1e-12);
  // Only where it computes fewer units than calm (the floor holds on the calm split), and
  // in this incarnation.
  EXPECT_EQ(kinds_.RelievedFloorRatio(kGroup, 1, even, &windows), 1);
  EXPECT_EQ(windows, 0);
  EXPECT_EQ(kinds_.RelievedFloorRatio(kGroup, 1, loaded), 1);
  EXPECT_EQ(kinds_.RelievedFloorRatio({kGroup.key, kGroup.incarnation + 1}, 1, relieved), 1);
  // Calm for 30 s on the even split: the verdict and its ratios end, and a verdict taken
  // afresh starts without them.
  Update(RanStep(-1, 0.100, 0.043, even));
  clock_.Advance(absl::Seconds(31));
  Update(RanStep(-1, 0.100, 0.043, even));
  EXPECT_EQ(ratio(&windows), 1);
  EXPECT_EQ(windows, 0);
  Update(RanStep(1, 0.100, 0.043, even));
  clock_.Advance(absl::Seconds(3));
  ASSERT_EQ(Update(plain), Kind::kWhole);
  EXPECT_EQ(ratio(&windows), 1);
  EXPECT_EQ(windows, 0);
}

// A throttled rank relieved too little still arrives last: its collectives the least, the
// others' min_ratio (1.25x) of them or more, its floor not nearer calm than its straggling
// floor. Each round says afresh, on the same terms as a relieved window.
TEST_F(StragglerKindTest, ARelievedThrottledRankTheOthersStillWaitForIsStillLast) {
  const std::vector<int32_t> even{45, 45}, relieved{48, 42};
  double own = 0, others = 0;
  EXPECT_FALSE(kinds_.StillLast(kGroup, 1)) << "no verdict";
  JudgeThrottledOnEven();  // its straggling floor 0.100 s
  EXPECT_FALSE(kinds_.StillLast(kGroup, 1)) << "on the calm split";
  clock_.Advance(absl::Seconds(3));
  Update(RanPeerOwn(1, relieved, 0.150, 0.095));
  EXPECT_TRUE(kinds_.StillLast(kGroup, 1, &own, &others));
  EXPECT_DOUBLE_EQ(own, 0.095);
  EXPECT_DOUBLE_EQ(others, 0.150);
  EXPECT_FALSE(kinds_.StillLast(kGroup, 0)) << "no verdict on rank 0";
  EXPECT_FALSE(kinds_.StillLast({kGroup.key, kGroup.incarnation + 1}, 1));
  struct Case {
    const char* what;
    StragglerKind::Round round;
    bool still_last;
  };
  StragglerKind::Round pushed = RanPeerOwn(1, relieved, 0.150, 0.095);
  pushed.published_version = 2;
  StragglerKind::Round cordoned = RanPeerOwn(1, relieved, 0.150, 0.095);
  cordoned.cordon = true;
  const Case cases[] = {
      // (Exact in binary: 1.25 x 0.09375 = 0.1171875.)
      {"the others at exactly 1.25x", RanPeerOwn(1, relieved, 0.1171875, 0.09375), true},
      {"the others just under 1.25x", RanPeerOwn(1, relieved, 0.1171, 0.09375), false},
      {"it waits for the others", RanPeerOwn(1, relieved, 0.080, 0.120), false},
      {"its floor nearer calm (0.060^2 < 0.043 x 0.100)", RanPeerOwn(1, relieved, 0.150, 0.060),
       false},
      {"under offloads", RanPeerOwn(1, relieved, 0.150, 0.095, /*offloads=*/true), false},
      {"a plan pushed, not yet run", pushed, false},
      {"a cordon", cordoned, false},
      {"not relieved", RanPeerOwn(1, {42, 48}, 0.150, 0.095), false},
      {"the calm split", RanPeerOwn(1, even, 0.150, 0.095), false},
      {"calm by its timers, still last", RanPeerOwn(-1, relieved, 0.150, 0.095), true},
  };
  for (const Case& c : cases) {
    clock_.Advance(absl::Seconds(3));
    Update(c.round);
    EXPECT_EQ(kinds_.StillLast(kGroup, 1), c.still_last) << c.what;
  }
}

// A recheck that ends a verdict sets its ratios aside with it, and a verdict back (the
// rank throttled still) brings them back, as it does its floor: the same contention,
// measured relieved before. Only a verdict taken afresh starts without them (above).
TEST_F(StragglerKindTest, AVerdictBackFromARecheckBringsItsRelievedRatiosBack) {
  const std::vector<int32_t> even{45, 45}, relieved{55, 35};
  const auto ratio = [&](int* windows) {
    return kinds_.RelievedFloorRatio(kGroup, 1, relieved, windows);
  };
  const StragglerKind::Round plain = JudgeThrottledOnEven();
  ASSERT_NEAR(kinds_.StragglingFloor(kGroup, 1), 0.100, 1e-12);
  clock_.Advance(absl::Seconds(3));
  Update(RanOwn(1, relieved, 0.094));
  int windows = -1;
  ASSERT_NEAR(ratio(&windows), 0.94, 1e-12);
  // Relieved and calm for half a minute: the recheck ends the verdict, and its ratios are
  // no price while it is ended.
  Update(RanOwn(-1, relieved, 0.094));
  clock_.Advance(absl::Seconds(31));
  ASSERT_EQ(Update(RanOwn(-1, relieved, 0.094)), Kind::kUnknown);
  ASSERT_THAT(lines_, Contains(HasSubstr("relieved of units and calm for 31s: its verdict ends")));
  EXPECT_EQ(ratio(&windows), 1);
  EXPECT_EQ(windows, 0);
  // Straggling again on its units for a floor's window: the verdict is back, its ratio with
  // it (the window taken before the recheck; none since, the verdict ended first).
  Update(RanOwn(1, even, 0.100));
  clock_.Advance(absl::Seconds(3));
  ASSERT_EQ(Update(plain), Kind::kWhole);
  ASSERT_THAT(Said(), HasSubstr("after a recheck ended its verdict: back"));
  EXPECT_NEAR(ratio(&windows), 0.94, 1e-12);
  EXPECT_EQ(windows, 1);
}

// A drift is not the contention back: its verdict's step windows read 1.5x, 1.3x and
// 2.3x on its timers (median 1.5x), and a straggle milder than that median by the
// threshold (1.12x and 1.20x: x 1.1 under 1.5x) leaves the floor to tell at once, young
// as it is: reading calm, the contention is gone; reading near the straggling floor, it is
// not. One about as slow (1.40x x 1.1 >= 1.5x), one whose timers are not known, one against
// a verdict whose windows' timers were not known, or against windows that read under
// 1.1^3 = 1.331x (too near the drifts the judge names to tell them apart), is too young to
// tell, as before.
TEST_F(StragglerKindTest, AStraggleMilderThanItsVerdictsIsNotItsContentionBack) {
  const std::vector<int32_t> even{45, 45};
  const auto timed = [&even](int32_t straggler, double collectives, double slowdown,
                             double threshold = 0.10) {
    StragglerKind::Round round = Ran(straggler, 1, collectives, false, even);
    round.straggler_slowdown = slowdown;
    round.straggler_threshold = threshold;
    return round;
  };
  // Calm on the even split, rank 1 judged throttled there with its windows' timers at
  // `slowdowns` (a window each, 2 s apart), then calm again for 2 s: its contention gone.
  const auto judged_then_gone = [&](StragglerKind& kinds, std::vector<double> slowdowns) {
    std::vector<std::string> lines;
    kinds.Update(kGroup, Ran(-1, 1, 0.043, false, even), lines);
    clock_.Advance(absl::Seconds(2));
    kinds.Update(kGroup, Ran(-1, 1, 0.043, false, even), lines);
    kinds.Update(kGroup, timed(1, 0.043, slowdowns.front()), lines);
    for (const double slowdown : slowdowns) {
      clock_.Advance(absl::Seconds(2));
      ASSERT_EQ(kinds.Update(kGroup, timed(1, 0.097, slowdown), lines), Kind::kWhole);
    }
    kinds.Update(kGroup, Ran(-1, 1, 0.045, false, even), lines);
    clock_.Advance(absl::Seconds(2));
    kinds.Update(kGroup, Ran(-1, 1, 0.045, false, even), lines);
    ASSERT_TRUE(kinds.ContentionGone(kGroup, 1));
  };
  judged_then_gone(kinds_, {1.5, 1.3, 2.3});
  EXPECT_EQ(Update(timed(1, 0.045, 1.12)), Kind::kWhole) << "the verdict stands";
  EXPECT_TRUE(kinds_.ContentionGone(kGroup, 1)) << "a drift, the floor calm";
  std::string not_gone;
  Update(timed(1, 0.090, 1.12));
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 1, nullptr, &not_gone));
  EXPECT_THAT(not_gone, HasSubstr("nearer its straggling 0.097 s"));
  Update(Ran(-1, 1, 0.045, false, even));
  Update(timed(1, 0.045, 1.20));
  EXPECT_TRUE(kinds_.ContentionGone(kGroup, 1)) << "milder than the median, not the mildest";
  // About as slow as the median (though milder than the mean): too young to tell, whatever
  // the floor reads.
  Update(Ran(-1, 1, 0.045, false, even));
  Update(timed(1, 0.045, 1.40));
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 1, nullptr, &not_gone));
  EXPECT_THAT(not_gone, HasSubstr("rank 1's straggle began 0 ago"));
  // ... but milder under a threshold of 5% (1.40 x 1.05 < 1.5).
  Update(timed(1, 0.045, 1.40, 0.05));
  EXPECT_TRUE(kinds_.ContentionGone(kGroup, 1));
  // Timers not known: too young to tell.
  Update(Ran(-1, 1, 0.045, false, even));
  Update(timed(1, 0.045, 0));
  EXPECT_FALSE(kinds_.ContentionGone(kGroup, 1));
  // A verdict whose windows' timers were not known, or read 1.3x: too young to tell.
  for (const double windows : {0.0, 1.3}) {
    SCOPED_TRACE(windows);
    StragglerKind kinds(&clock_, StragglerKindOptions{});
    judged_then_gone(kinds, {windows, windows});
    std::vector<std::string> lines;
    kinds.Update(kGroup, timed(1, 0.045, 1.12), lines);
    EXPECT_FALSE(kinds.ContentionGone(kGroup, 1));
  }
}

}  // namespace
}  // namespace ballast::coordinator
