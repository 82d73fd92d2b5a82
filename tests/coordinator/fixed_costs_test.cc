#include "coordinator/fixed_costs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace ballast::coordinator {
namespace {

using ::testing::HasSubstr;

// The e2e benchmark's shape: rank 1 at 2x, arriving last at every all-reduce, so its 0.097 s
// of collectives are its own cost; rank 0 spends 0.097 s too, but 0.054 s of it waiting.
TEST(FixedCostsTest, AStragglersSlowerCollectivesAreItsExcessAndTheWaitIsNot) {
  absl::StatusOr<FixedCosts> f = EstimateFixedCosts({0.097, 0.097}, {1.0, 2.0});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->measured);
  // base = min(0.097 / 1, 0.097 / 2) = 0.0485: rank 0's own cost is 0.0485, not 0.097.
  EXPECT_DOUBLE_EQ(f->common, 0.0485);
  EXPECT_DOUBLE_EQ(f->excess[0], 0);
  EXPECT_DOUBLE_EQ(f->excess[1], 0.097 - 0.0485);
}

// Never more than a rank measured: a fast rank that arrives last (the straggler was given
// too few units) has its own cost measured, and the straggler's scaled estimate is capped
// by its own collective time.
TEST(FixedCostsTest, NoRankIsGivenMoreThanItsOwnCollectiveTime) {
  absl::StatusOr<FixedCosts> f = EstimateFixedCosts({0.040, 0.060}, {1.0, 2.0});
  ASSERT_TRUE(f.ok()) << f.status();
  // base = min(0.040, 0.030) = 0.030; rank 0: min(0.040, 0.030) = 0.030; rank 1: min(0.060,
  // 0.060) = 0.060.
  EXPECT_DOUBLE_EQ(f->common, 0.030);
  EXPECT_DOUBLE_EQ(f->excess[0], 0);
  EXPECT_DOUBLE_EQ(f->excess[1], 0.030);
  absl::StatusOr<FixedCosts> g = EstimateFixedCosts({0.040, 0.050}, {1.0, 2.0});
  ASSERT_TRUE(g.ok());
  // base 0.025: rank 1 min(0.050, 0.050), rank 0 min(0.040, 0.025).
  EXPECT_DOUBLE_EQ(g->excess[1], 0.025);
}

// Calm ranks with equal collective times have no excess: the planner sees compute alone.
TEST(FixedCostsTest, CalmRanksHaveNoExcess) {
  absl::StatusOr<FixedCosts> f = EstimateFixedCosts({0.043, 0.043, 0.043, 0.043}, {1, 1, 1, 1});
  ASSERT_TRUE(f.ok());
  EXPECT_DOUBLE_EQ(f->common, 0.043);
  for (double e : f->excess) EXPECT_EQ(e, 0);
}

TEST(FixedCostsTest, RanksNotMeasuredGetNothingAndNoneMeasuredIsSaid) {
  absl::StatusOr<FixedCosts> f = EstimateFixedCosts({0.05, 0, 0.08}, {1.0, 1.5, 0});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->measured);
  EXPECT_DOUBLE_EQ(f->common, 0.05);
  EXPECT_EQ(f->excess[1], 0);  // no collective time
  EXPECT_EQ(f->excess[2], 0);  // no slowdown
  absl::StatusOr<FixedCosts> none = EstimateFixedCosts({0, 0}, {1, 2});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->measured);
  EXPECT_EQ(none->common, 0);
  EXPECT_THAT(DescribeFixedCosts(*none), HasSubstr("no collective time measured"));
  EXPECT_THAT(DescribeFixedCosts(*f), HasSubstr("beyond 0.05 s of collectives"));
  EXPECT_THAT(DescribeFixedCosts(*f), HasSubstr(" 2 +0"));
}

// A rank priced at its step's slowdown (1.7x: its step over the calm one, collectives
// included) pays its collectives at 1.7 times their calm 0.043 s, not the 0.120 s it
// measured under the quota (already in its slowdown), nor capped by the 0.050 s it measures
// relieved of units; the others are based on the calm cost too. Without a calm cost, as
// before.
TEST(FixedCostsTest, ARankPricedByItsStepPaysItsCollectivesAtItsSlowdownOfTheCalmOnes) {
  const ThrottledPriced step{.ranks = {false, true}, .calm_collective_seconds = 0.043};
  absl::StatusOr<FixedCosts> plain = EstimateFixedCosts({0.200, 0.120}, {1.0, 1.7}, step);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_DOUBLE_EQ(plain->common, 0.043);
  EXPECT_DOUBLE_EQ(plain->excess[0], 0);
  EXPECT_DOUBLE_EQ(plain->excess[1], 1.7 * 0.043 - 0.043);
  absl::StatusOr<FixedCosts> relieved = EstimateFixedCosts({0.060, 0.050}, {1.0, 1.7}, step);
  ASSERT_TRUE(relieved.ok());
  EXPECT_DOUBLE_EQ(relieved->excess[1], 1.7 * 0.043 - 0.043);
  // The calm rank measured less than the calm cost (the machine sped up): its own time.
  absl::StatusOr<FixedCosts> faster = EstimateFixedCosts({0.040, 0.120}, {1.0, 1.7}, step);
  ASSERT_TRUE(faster.ok());
  EXPECT_DOUBLE_EQ(faster->common, 0.040);
  EXPECT_DOUBLE_EQ(faster->excess[1], 1.7 * 0.043 - 0.040);
  absl::StatusOr<FixedCosts> no_calm =
      EstimateFixedCosts({0.200, 0.120}, {1.0, 1.7}, ThrottledPriced{.ranks = {false, true}});
  ASSERT_TRUE(no_calm.ok());
  EXPECT_DOUBLE_EQ(no_calm->excess[1], 0.120 - 0.120 / 1.7);
}

// A rank priced by its straggling floor pays its collectives at that floor, 0.233 s, in
// every plan: not the 0.120 s it measured relieved of units, nor its timers' 1.36x of the
// calm 0.043 s. The others are based on the calm cost.
TEST(FixedCostsTest, ARankPricedByItsStragglingFloorPaysThatFloorInEveryPlan) {
  const ThrottledPriced floor{
      .ranks = {false, true}, .calm_collective_seconds = 0.043, .straggling_floors = {0, 0.233}};
  for (const double measured : {0.240, 0.120}) {
    absl::StatusOr<FixedCosts> f = EstimateFixedCosts({0.200, measured}, {1.0, 1.36}, floor);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_DOUBLE_EQ(f->common, 0.043) << measured;
    EXPECT_DOUBLE_EQ(f->excess[0], 0) << measured;
    EXPECT_DOUBLE_EQ(f->excess[1], 0.233 - 0.043) << measured;
  }
  // A priced rank without a floor is priced by its step (1.2 x 0.043 s); a floor on a rank
  // not priced is not read (rank 1 at its 0.120 s, under its 1.36 x 0.043 s).
  absl::StatusOr<FixedCosts> mixed =
      EstimateFixedCosts({0.200, 0.120}, {1.2, 1.36},
                         ThrottledPriced{.ranks = {true, false},
                                         .calm_collective_seconds = 0.043,
                                         .straggling_floors = {0, 0.233}});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_DOUBLE_EQ(mixed->common, 1.2 * 0.043);
  EXPECT_DOUBLE_EQ(mixed->excess[1], std::min(0.120, 1.36 * 0.043) - 1.2 * 0.043);
  // A floor under the others' cost is the least: the others pay beyond it.
  absl::StatusOr<FixedCosts> low =
      EstimateFixedCosts({0.200, 0.120}, {1.0, 1.36},
                         ThrottledPriced{.ranks = {false, true},
                                         .calm_collective_seconds = 0.043,
                                         .straggling_floors = {0, 0.030}});
  ASSERT_TRUE(low.ok());
  EXPECT_DOUBLE_EQ(low->common, 0.030);
  EXPECT_DOUBLE_EQ(low->excess[0], 0.043 - 0.030);
  EXPECT_DOUBLE_EQ(low->excess[1], 0);
  // None priced: a floor is not read, and rank 1 is as the formula above prices it.
  absl::StatusOr<FixedCosts> unpriced =
      EstimateFixedCosts({0.200, 0.120}, {1.0, 1.36},
                         ThrottledPriced{.ranks = {false, false},
                                         .calm_collective_seconds = 0.043,
                                         .straggling_floors = {0, 0.233}});
  ASSERT_TRUE(unpriced.ok());
  EXPECT_DOUBLE_EQ(unpriced->excess[1], 0.120 - 0.120 / 1.36);
}

TEST(FixedCostsTest, BadInputIsNamed) {
  EXPECT_THAT(EstimateFixedCosts({0.1}, {1, 2}).status().message(),
              HasSubstr("collective_seconds has 1 ranks but slowdowns has 2"));
  EXPECT_THAT(EstimateFixedCosts({0.1, std::nan("")}, {1, 2}).status().message(),
              HasSubstr("rank 1: collective seconds nan"));
  EXPECT_THAT(
      EstimateFixedCosts({0.1, 0.1}, {1, 2}, ThrottledPriced{.ranks = {true}}).status().message(),
      HasSubstr("throttled ranks has 1 ranks but collective_seconds has 2"));
  EXPECT_THAT(EstimateFixedCosts(
                  {0.1, 0.1}, {1, 2},
                  ThrottledPriced{.ranks = {false, true}, .calm_collective_seconds = std::nan("")})
                  .status()
                  .message(),
              HasSubstr("calm collective seconds nan must be finite"));
  EXPECT_THAT(EstimateFixedCosts({0.1, 0.1}, {1, 2},
                                 ThrottledPriced{.ranks = {false, true},
                                                 .calm_collective_seconds = 0.05,
                                                 .straggling_floors = {0.2}})
                  .status()
                  .message(),
              HasSubstr("straggling floors has 1 ranks but collective_seconds has 2"));
  EXPECT_THAT(EstimateFixedCosts({0.1, 0.1}, {1, 2},
                                 ThrottledPriced{.ranks = {false, true},
                                                 .calm_collective_seconds = 0.05,
                                                 .straggling_floors = {0, INFINITY}})
                  .status()
                  .message(),
              HasSubstr("rank 1: straggling floor inf must be finite and >= 0"));
  EXPECT_THAT(EstimateFixedCosts({0.1, 0.1}, {1, 2},
                                 ThrottledPriced{.ranks = {false, true},
                                                 .calm_collective_seconds = 0.05,
                                                 .straggling_floors = {-0.1, 0.2}})
                  .status()
                  .message(),
              HasSubstr("rank 0: straggling floor -0.1 must be finite and >= 0"));
}

TEST(FixedCostsTest, ModesParseAndAWrongOneIsNamed) {
  for (const auto& [text, mode] :
       {std::pair{"off", FixedCostsMode::kOff}, std::pair{"false", FixedCostsMode::kOff},
        std::pair{"auto", FixedCostsMode::kAuto}, std::pair{"on", FixedCostsMode::kOn},
        std::pair{"true", FixedCostsMode::kOn}, std::pair{"AUTO", FixedCostsMode::kAuto},
        std::pair{"1", FixedCostsMode::kOn}, std::pair{"no", FixedCostsMode::kOff}}) {
    absl::StatusOr<FixedCostsMode> parsed = ParseFixedCostsMode(text);
    ASSERT_TRUE(parsed.ok()) << text;
    EXPECT_EQ(*parsed, mode) << text;
  }
  EXPECT_THAT(ParseFixedCostsMode("sometimes").status().message(),
              HasSubstr("fixed costs mode 'sometimes' is not one of off, auto, on"));
}

TEST(FixedCostsTest, ThrottledPricesParseAndAWrongOneIsNamed) {
  for (const auto& [text, how] :
       {std::pair{"timers", ThrottledPrice::kTimers}, std::pair{"step", ThrottledPrice::kStep},
        std::pair{"floor", ThrottledPrice::kFloor}, std::pair{"Floor", ThrottledPrice::kFloor}}) {
    absl::StatusOr<ThrottledPrice> parsed = ParseThrottledPrice(text);
    ASSERT_TRUE(parsed.ok()) << text;
    EXPECT_EQ(*parsed, how) << text;
  }
  // The bool flag it replaced took true: no silent guess at which pricing that meant.
  EXPECT_THAT(ParseThrottledPrice("true").status().message(),
              HasSubstr("throttled price 'true' is not one of timers, step, floor"));
}

}  // namespace
}  // namespace ballast::coordinator
