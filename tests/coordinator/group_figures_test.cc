// group_figures: the measured step and collectives' floor wait for every attached rank to
// run min_steps steps under the plan, and read the slowest step and the least collectives
// (and each rank's, by rank); each rank's units computed follow the plan's ownership,
// prunes and offloads; the predicted step adds a throttled rank's arrival spread's wait at
// the lead its loads, summed over the blocks, have over the others'; a plan stating the
// ownership its workers run runs all-local, and reads as those moves made.
#include "coordinator/group_figures.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "coordinator/arrival_spread.h"

namespace ballast::coordinator {
namespace {

RankSnapshot Rank(int32_t rank, double step, double collectives, int64_t steps = 16,
                  int64_t version = 7) {
  return {.rank = rank,
          .attached = true,
          .plan_step_median = step,
          .plan_collective_median = collectives,
          .plan_steps = steps,
          .last_plan_version = version};
}

TEST(GroupFiguresTest, MeasuredStepAndCollectivesWaitForEveryAttachedRank) {
  std::vector<RankSnapshot> ranks = {Rank(0, 0.30, 0.12), Rank(1, 0.32, 0.05)};
  EXPECT_DOUBLE_EQ(MeasuredStep(ranks, 7, 16), 0.32);         // the slowest rank's step
  EXPECT_DOUBLE_EQ(MeasuredCollectives(ranks, 7, 16), 0.05);  // the least collectives
  EXPECT_EQ(MeasuredCollectives(ranks, 8, 16), 0) << "another plan";
  EXPECT_EQ(MeasuredCollectives(ranks, 7, 17), 0) << "too few steps";
  ranks[1].plan_steps = 3;
  EXPECT_EQ(MeasuredStep(ranks, 7, 16), 0);
  EXPECT_EQ(MeasuredCollectives(ranks, 7, 16), 0);
  ranks[1].attached = false;  // a detached rank measures nothing and holds nothing up
  EXPECT_DOUBLE_EQ(MeasuredCollectives(ranks, 7, 16), 0.12);
}

TEST(GroupFiguresTest, MeasuredRankCollectivesAreEachRanksByRank) {
  std::vector<RankSnapshot> ranks = {Rank(1, 0.32, 0.05), Rank(0, 0.30, 0.12)};
  EXPECT_EQ(MeasuredRankCollectives(ranks, 7, 16, 2), (std::vector<double>{0.12, 0.05}));
  EXPECT_EQ(MeasuredRankCollectives(ranks, 7, 16, 3), (std::vector<double>{0.12, 0.05, 0}));
  EXPECT_TRUE(MeasuredRankCollectives(ranks, 8, 16, 2).empty()) << "another plan";
  EXPECT_TRUE(MeasuredRankCollectives(ranks, 7, 17, 2).empty()) << "too few steps";
  ranks[0].attached = false;
  EXPECT_EQ(MeasuredRankCollectives(ranks, 7, 16, 2), (std::vector<double>{0.12, 0}));
}

TEST(GroupFiguresTest, ThePredictedStepAddsTheArrivalSpreadsWaitAtTheThrottledRanksLead) {
  // Two blocks; rank 1's loads sum to 0.100 s, rank 0's to 0.110 s: it leads by 0.010 s.
  std::map<int32_t, BlockDecision> decisions;
  decisions[0].predicted_step_seconds = 0.060;
  decisions[0].rank_seconds = {0.060, 0.050};
  decisions[1].predicted_step_seconds = 0.050;
  decisions[1].rank_seconds = {0.050, 0.050};
  StepPricing pricing{.common_fixed_seconds = 0.020, .throttled_rank = 1, .arrival_spread = 0.03};
  StepPrediction p = PredictStep(decisions, pricing, {});
  EXPECT_DOUBLE_EQ(p.blocks, 0.110);
  EXPECT_DOUBLE_EQ(p.collectives, 0.020);
  EXPECT_DOUBLE_EQ(p.spread_wait, SpreadWait(0.03, -0.010));
  EXPECT_NEAR(p.spread_wait, 0.00763, 1e-5);
  EXPECT_DOUBLE_EQ(p.Step(), 0.130 + p.spread_wait);
  // The lead is against the slowest other rank, whichever is throttled: with a third rank
  // at 0.050 s, rank 1 still trails rank 0 by 0.010 s (not leads rank 2 by 0.050 s).
  std::map<int32_t, BlockDecision> three = decisions;
  three[0].rank_seconds.push_back(0.030);
  three[1].rank_seconds.push_back(0.020);
  EXPECT_DOUBLE_EQ(PredictStep(three, pricing, {}).spread_wait, SpreadWait(0.03, -0.010));
  pricing.throttled_rank = 2;
  EXPECT_DOUBLE_EQ(PredictStep(three, pricing, {}).spread_wait, SpreadWait(0.03, 0.050 - 0.110));
  pricing.throttled_rank = 0;
  EXPECT_DOUBLE_EQ(PredictStep(decisions, pricing, {}).spread_wait, SpreadWait(0.03, 0.010));
  // No spread, no throttled rank, or a block whose loads do not name it: no wait.
  pricing.arrival_spread = 0;
  EXPECT_EQ(PredictStep(decisions, pricing, {}).spread_wait, 0);
  pricing = {.throttled_rank = -1, .arrival_spread = 0.03};
  EXPECT_EQ(PredictStep(decisions, pricing, {}).spread_wait, 0);
  pricing = {.throttled_rank = 2, .arrival_spread = 0.03};
  EXPECT_EQ(PredictStep(decisions, pricing, {}).spread_wait, 0);
  decisions[1].rank_seconds.clear();
  pricing.throttled_rank = 1;
  EXPECT_EQ(PredictStep(decisions, pricing, {}).spread_wait, 0);
  // Nothing planned: no prediction at all.
  EXPECT_EQ(PredictStep({}, pricing, {}).Step(), 0);
}

GroupSnapshot TwoRanks() {
  GroupSnapshot g;
  g.size = 2;
  g.blocks = {
      {.block = 0, .num_units = 4, .owner_of_unit = {RankId(0), RankId(0), RankId(1), RankId(1)}},
      {.block = 1, .num_units = 2, .owner_of_unit = {RankId(0), RankId(1)}}};
  return g;
}

TEST(GroupFiguresTest, UnitsComputedFollowOwnershipPrunesAndOffloadsUnitsOwnedOwnership) {
  GroupSnapshot g = TwoRanks();
  EXPECT_EQ(UnitsComputed(g), (std::vector<int32_t>{3, 3}));
  // Block 0 moved to rank 0 but one unit (restated until confirmed), which rank 1
  // offloads to rank 0; block 1 prunes rank 1's unit.
  BlockPlan move{.block = BlockId(0),
                 .offloads = {{.owner = RankId(1), .helper = RankId(0), .units = 1}},
                 .owner_of_unit = {RankId(0), RankId(0), RankId(0), RankId(1)}};
  BlockPlan prune{.block = BlockId(1), .pruned_units = {0, 1}};
  g.plan.blocks = {move, prune};
  EXPECT_EQ(UnitsComputed(g), (std::vector<int32_t>{5, 0}));
  // Owned alone: the move counts, the offload and the prune do not.
  EXPECT_EQ(UnitsComputed(g, /*computed=*/false), (std::vector<int32_t>{4, 2}));
}

TEST(GroupFiguresTest, UnitsComputedLeaveOutExpertsAndNeedOwnership) {
  GroupSnapshot g = TwoRanks();
  g.blocks[1].units_divide = true;  // experts' replicas are judged by their loads
  EXPECT_EQ(UnitsComputed(g), (std::vector<int32_t>{2, 2}));
  g.blocks[0].owner_of_unit.push_back(RankId(5));  // a rank out of range counts nowhere
  EXPECT_EQ(UnitsComputed(g), (std::vector<int32_t>{2, 2}));
  g.blocks[0].owner_of_unit.clear();  // a snapshot without ownership
  EXPECT_TRUE(UnitsComputed(g).empty());
}

// A reshard's plan stays in force stating its move once the workers have made it
// (group_planner.h, WithoutMadeMove): the group runs all-local then, as it did on the plan
// once pushed only to drop the statement, and waits a marginal straggler out as before.
TEST(GroupFiguresTest, APlanStatingAMoveTheWorkersMadeRunsAllLocal) {
  GroupSnapshot g = TwoRanks();
  EXPECT_TRUE(PlanRunsAllLocal(g)) << "no plan";
  const std::vector<RankId> moved = {RankId(0), RankId(0), RankId(0), RankId(1)};
  g.plan.blocks = {{.block = BlockId(0), .owner_of_unit = moved}};
  EXPECT_FALSE(PlanRunsAllLocal(g)) << "the workers still run the even split";
  g.blocks[0].owner_of_unit = moved;
  EXPECT_TRUE(PlanRunsAllLocal(g)) << "the move made";
  g.plan.blocks[0].offloads = {{.owner = RankId(1), .helper = RankId(0), .units = 1}};
  EXPECT_FALSE(PlanRunsAllLocal(g)) << "an offload on the new split";
  g.plan.blocks = {{.block = BlockId(1), .pruned_units = {0, 1}}};
  EXPECT_FALSE(PlanRunsAllLocal(g)) << "a prune";
  g.plan.blocks = {{.block = BlockId(7), .owner_of_unit = moved}};
  EXPECT_FALSE(PlanRunsAllLocal(g)) << "a block the workers do not report";
}

// The blocks the registry found running the ownership the plan states: those status
// reads "reshard (made)".
TEST(GroupFiguresTest, MovesMadeAreTheBlocksRunningTheirStatedOwnership) {
  GroupSnapshot g = TwoRanks();
  EXPECT_THAT(MovesMade(g), ::testing::IsEmpty());
  g.blocks[0].move_made = true;
  EXPECT_THAT(MovesMade(g), ::testing::ElementsAre(BlockId(g.blocks[0].block)));
}

}  // namespace
}  // namespace ballast::coordinator
