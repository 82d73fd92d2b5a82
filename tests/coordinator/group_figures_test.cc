// group_figures: the measured step and collectives' floor wait for every attached rank to
// run min_steps steps under the plan, and read the slowest step and the least collectives;
// each rank's units computed follow the plan's ownership, prunes and offloads.
#include "coordinator/group_figures.h"

#include <gtest/gtest.h>

#include <vector>

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

GroupSnapshot TwoRanks() {
  GroupSnapshot g;
  g.size = 2;
  g.blocks = {
      {.block = 0, .num_units = 4, .owner_of_unit = {RankId(0), RankId(0), RankId(1), RankId(1)}},
      {.block = 1, .num_units = 2, .owner_of_unit = {RankId(0), RankId(1)}}};
  return g;
}

TEST(GroupFiguresTest, UnitsComputedFollowOwnershipPrunesAndOffloads) {
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

}  // namespace
}  // namespace ballast::coordinator
