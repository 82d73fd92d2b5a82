#include "coordinator/rank_speeds.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <optional>

namespace ballast::coordinator {
namespace {

// One block as the speed model gives it: the reference seconds per unit, each rank's
// slowdown against it (0: not judged), and the block's units.
PoolBlock Block(double reference, const std::vector<double>& slowdowns, int32_t units = 64) {
  PoolBlock b;
  b.work = units;
  b.speeds.reference_seconds_per_unit = reference;
  for (size_t r = 0; r < slowdowns.size(); ++r) {
    RankSpeed& s = b.speeds.ranks.emplace_back();
    s.rank = RankId(static_cast<int32_t>(r));
    s.has_estimate = slowdowns[r] > 0;
    s.seconds_per_unit = slowdowns[r] * reference;
    s.slowdown = slowdowns[r];
  }
  return b;
}

TEST(RankSpeedsTest, NoiseInOneBlockIsNotAStraggler) {
  // Each rank 20% slower than the other in one block of four: 1.05x over its blocks.
  absl::StatusOr<PooledGroup> g = PoolRankSpeeds(
      {Block(1e-3, {1, 1.2}), Block(1e-3, {1.2, 1}), Block(1e-3, {1, 1}), Block(1e-3, {1, 1})},
      0.10);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->ranks.size(), 2u);
  EXPECT_NEAR(g->ranks[0].slowdown, 1.05, 1e-12);
  EXPECT_NEAR(g->ranks[1].slowdown, 1.05, 1e-12);
  EXPECT_EQ(g->ranks[1].blocks_judged, 4);
  EXPECT_FALSE(g->ranks[1].straggling);
  EXPECT_TRUE(g->calm);
  EXPECT_EQ(DescribePooledGroup(*g, 4, 0.10),
            "ranks pooled over 4 blocks (straggler above 1.10x): 0 1.05x, 1 1.05x; calm");
}

TEST(RankSpeedsTest, BlocksWeighByTheirTime) {
  // Rank 1 is 2.5x slower in the long block and as fast as rank 0 in the two short ones,
  // as a rank under a CPU quota looks when the throttle falls in its long block: over
  // its share of the step it is 2.43x slower, where a median of blocks would say 1x.
  absl::StatusOr<PooledGroup> g = PoolRankSpeeds(
      {Block(1e-3, {1, 2.5}, 64), Block(1e-4, {1, 1}, 16), Block(1e-4, {1, 1}, 16)}, 0.10);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_NEAR(g->ranks[1].slowdown, (2.5 * 64e-3 + 3.2e-3) / (64e-3 + 3.2e-3), 1e-12);
  EXPECT_TRUE(g->ranks[1].straggling);
  EXPECT_FALSE(g->ranks[0].straggling);
  EXPECT_FALSE(g->calm);
  EXPECT_EQ(DescribePooledGroup(*g, 3, 0.10),
            "ranks pooled over 3 blocks (straggler above 1.10x): 0 1.00x, 1 2.43x straggling");
}

TEST(RankSpeedsTest, AFastRankIsNoCalm) {
  // TP 4, three ranks at 2x: the reference (a median) is 2x, so the 1x rank is 0.5x and
  // the group gains from balancing as much as one with a straggler.
  absl::StatusOr<PooledGroup> g = PoolRankSpeeds({Block(2e-3, {0.5, 1, 1, 1})}, 0.10);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->ranks[0].fast);
  EXPECT_FALSE(g->ranks[0].straggling);
  EXPECT_FALSE(g->calm);
  EXPECT_EQ(DescribePooledGroup(*g, 1, 0.10),
            "ranks pooled over 1 block (straggler above 1.10x): 0 0.50x fast, 1 1.00x, 2 1.00x, "
            "3 1.00x");
  // Within the threshold either way: calm.
  g = PoolRankSpeeds({Block(1e-3, {0.95, 1, 1, 1.05})}, 0.10);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->calm);
}

TEST(RankSpeedsTest, ARankJudgedNowhereLeavesTheGroupWithoutVerdict) {
  absl::StatusOr<PooledGroup> g = PoolRankSpeeds({Block(1e-3, {1, 0}), Block(1e-3, {1, 0})}, 0.10);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->ranks[1].blocks_judged, 0);
  EXPECT_FALSE(g->calm);
  EXPECT_THAT(DescribePooledGroup(*g, 2, 0.10), ::testing::HasSubstr("1 not judged"));
  // Judged in one block of two: that block decides.
  g = PoolRankSpeeds({Block(1e-3, {1, 0}), Block(1e-3, {1, 3})}, 0.10);
  ASSERT_TRUE(g.ok());
  EXPECT_DOUBLE_EQ(g->ranks[1].slowdown, 3);
  EXPECT_EQ(g->ranks[1].blocks_judged, 1);
  EXPECT_TRUE(g->ranks[1].straggling);
  // No reference (nobody fresh): nobody is judged.
  g = PoolRankSpeeds({Block(0, {1, 1})}, 0.10);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->calm);
  // Nothing at all: no verdict.
  g = PoolRankSpeeds({}, 0.10);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->calm);
}

TEST(RankSpeedsTest, AMarginalStragglerMustLastALargeOneActsAtOnce) {
  const PooledGroup calm = *PoolRankSpeeds({Block(1e-3, {1, 1.05})}, 0.10);
  const PooledGroup marginal = *PoolRankSpeeds({Block(1e-3, {1, 1.2})}, 0.10);
  const PooledGroup large = *PoolRankSpeeds({Block(1e-3, {1, 2})}, 0.10);
  const PooledGroup much_faster = *PoolRankSpeeds({Block(2e-3, {0.5, 1, 1})}, 0.10);
  const absl::Duration kGap = absl::Milliseconds(1500);
  RoundRun run;
  auto at = [](double seconds) { return absl::Seconds(seconds); };
  auto calm_at = [&](const PooledGroup& g, double seconds, bool all_local = true,
                     absl::Duration wait = absl::Seconds(3)) {
    return TreatAsCalm(g, 0.10, all_local, at(seconds), wait, absl::ZeroDuration(), kGap, run).calm;
  };
  EXPECT_TRUE(calm_at(calm, 0));
  EXPECT_FALSE(run.since.has_value());
  // 1.2x is within 1 + 3 x 0.10: calm until it has lasted 3 s, balanced from then on.
  EXPECT_TRUE(calm_at(marginal, 1));
  EXPECT_EQ(run.since, at(1));
  EXPECT_TRUE(calm_at(marginal, 2));
  EXPECT_TRUE(calm_at(marginal, 3));
  EXPECT_TRUE(calm_at(marginal, 3.99));
  EXPECT_FALSE(calm_at(marginal, 4));
  EXPECT_FALSE(calm_at(marginal, 5));
  // A calm round in between starts the count again.
  EXPECT_TRUE(calm_at(calm, 6));
  EXPECT_FALSE(run.since.has_value());
  EXPECT_TRUE(calm_at(marginal, 7));
  EXPECT_EQ(run.since, at(7));
  // So does a gap in the rounds (a pause, missing reports): unjudged time is no evidence
  // that the straggler lasted.
  EXPECT_TRUE(calm_at(marginal, 8));
  EXPECT_TRUE(calm_at(marginal, 20));
  EXPECT_EQ(run.since, at(20));
  // 2x acts at once; so does a marginal straggler when a plan is in force (the planner
  // decides whether to keep it), and either ends the run of marginal rounds.
  EXPECT_FALSE(calm_at(large, 21));
  EXPECT_FALSE(run.since.has_value());
  EXPECT_FALSE(calm_at(much_faster, 22));
  EXPECT_TRUE(calm_at(marginal, 23));
  EXPECT_FALSE(calm_at(marginal, 24, /*all_local=*/false));
  EXPECT_FALSE(run.since.has_value());
  // A rank nobody could judge is no marginal straggler.
  const PooledGroup unknown = *PoolRankSpeeds({Block(1e-3, {1, 0})}, 0.10);
  EXPECT_FALSE(calm_at(unknown, 25));
  // With no wait, a marginal straggler is balanced at once.
  EXPECT_FALSE(calm_at(marginal, 26, true, absl::ZeroDuration()));
}

// While the group's plans flap, any straggler waits out the flap's wait (the longer of the
// two for a marginal one); a calm round or a gap starts it again.
TEST(RankSpeedsTest, WhilePlansFlapAnyStragglerWaitsTheFlapWait) {
  const PooledGroup calm = *PoolRankSpeeds({Block(1e-3, {1, 1.05})}, 0.10);
  const PooledGroup marginal = *PoolRankSpeeds({Block(1e-3, {1, 1.2})}, 0.10);
  const PooledGroup large = *PoolRankSpeeds({Block(1e-3, {1, 2})}, 0.10);
  const absl::Duration kGap = absl::Milliseconds(1500);
  RoundRun run;
  auto calm_at = [&](const PooledGroup& g, double seconds, double flap_wait,
                     double marginal_for = 3) {
    return TreatAsCalm(g, 0.10, /*running_all_local=*/true, absl::Seconds(seconds),
                       absl::Seconds(marginal_for), absl::Seconds(flap_wait), kGap, run)
        .calm;
  };
  EXPECT_TRUE(calm_at(large, 0, 10));
  EXPECT_TRUE(calm_at(marginal, 1, 10)) << "one run, whatever its size";
  for (int t = 2; t < 10; ++t) EXPECT_TRUE(calm_at(large, t, 10)) << t;
  EXPECT_FALSE(calm_at(large, 10, 10));
  EXPECT_TRUE(calm_at(calm, 11, 10));
  EXPECT_TRUE(calm_at(large, 12, 10)) << "a calm round restarts the wait";
  EXPECT_EQ(run.since, absl::Seconds(12));
  EXPECT_TRUE(calm_at(large, 20, 10)) << "a gap restarts it too";
  EXPECT_EQ(run.since, absl::Seconds(20));
  // A marginal one waits the longer of the two.
  EXPECT_TRUE(calm_at(calm, 30, 1));
  EXPECT_TRUE(calm_at(marginal, 31, 1));
  EXPECT_TRUE(calm_at(marginal, 32, 1));
  EXPECT_TRUE(calm_at(marginal, 33, 1));
  EXPECT_TRUE(calm_at(marginal, 33.9, 1));
  EXPECT_FALSE(calm_at(marginal, 34, 1));
  // The flap's wait decayed: a large straggler acts at once.
  EXPECT_FALSE(calm_at(large, 35, 0));
  EXPECT_FALSE(run.since.has_value());
  // Only a group running all-local waits (on an uneven split the planner balances what
  // is left whatever the verdict), and the verdict says how long.
  const CalmVerdict planned =
      TreatAsCalm(large, 0.10, /*running_all_local=*/false, absl::Seconds(36), absl::Seconds(3),
                  absl::Seconds(10), kGap, run);
  EXPECT_FALSE(planned.calm);
  EXPECT_EQ(planned.wait, absl::ZeroDuration());
  EXPECT_EQ(TreatAsCalm(marginal, 0.10, true, absl::Seconds(37), absl::Seconds(3),
                        absl::Seconds(10), kGap, run)
                .wait,
            absl::Seconds(10));
}

// A rank's price in a block is its pooled slowdown times the block's reference; a fit of
// its block time splits that price as the fit splits the rank's own time.
TEST(RankSpeedsTest, APriceIsThePooledSpeedSplitAsTheFitSplitsTheRanksTime) {
  // Rank 1: 3x in block 0, 2x in block 1; pooled over equal work, 2.5x.
  const std::vector<PoolBlock> blocks = {Block(1e-3, {1, 3}), Block(1e-3, {1, 2})};
  absl::StatusOr<PooledGroup> g = PoolRankSpeeds(blocks, 0.10);
  ASSERT_TRUE(g.ok()) << g.status();
  RankSpeed rank = blocks[0].speeds.ranks[1];
  RankPrice p = PriceRank(rank, blocks[0].speeds, *g, /*use_fit=*/true);
  EXPECT_NEAR(p.seconds_per_unit, 2.5e-3, 1e-12);
  EXPECT_EQ(p.fixed_seconds, 0);
  EXPECT_FALSE(p.fitted) << "no fit to use";

  // Its 3e-3 s a unit at the 32 units it runs is 0.032 s fixed plus 2e-3 a unit...
  rank.affine = AffineTime{.fixed_seconds = 0.032, .seconds_per_unit = 2e-3, .counts = 2};
  p = PriceRank(rank, blocks[0].speeds, *g, /*use_fit=*/true);
  EXPECT_TRUE(p.fitted);
  // ... priced at 2.5 / 3 of that: the same price at 32 units, but a unit moved saves less.
  EXPECT_NEAR(p.fixed_seconds, 0.032 * 2.5 / 3, 1e-12);
  EXPECT_NEAR(p.seconds_per_unit, 2e-3 * 2.5 / 3, 1e-12);
  EXPECT_NEAR(p.fixed_seconds + 32 * p.seconds_per_unit, 32 * 2.5e-3, 1e-12);
  p = PriceRank(rank, blocks[0].speeds, *g, /*use_fit=*/false);
  EXPECT_FALSE(p.fitted);
  EXPECT_NEAR(p.seconds_per_unit, 2.5e-3, 1e-12);

  // A rank judged nowhere keeps its own estimate, and its fit as it is.
  const PooledGroup unjudged;
  p = PriceRank(rank, blocks[0].speeds, unjudged, /*use_fit=*/true);
  EXPECT_NEAR(p.fixed_seconds, 0.032, 1e-12);
  EXPECT_NEAR(p.seconds_per_unit, 2e-3, 1e-12);
}

TEST(RankSpeedsTest, BadInputIsRefusedByName) {
  for (double t :
       {-0.1, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    absl::StatusOr<PooledGroup> g = PoolRankSpeeds({Block(1e-3, {1, 1})}, t);
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(g.status().message(), ::testing::HasSubstr("straggler_threshold"));
  }
  absl::StatusOr<PooledGroup> g = PoolRankSpeeds({Block(1e-3, {1, 1}, -4)}, 0.1);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), ::testing::HasSubstr("blocks[0].work -4 must be finite"));
}

}  // namespace
}  // namespace ballast::coordinator
