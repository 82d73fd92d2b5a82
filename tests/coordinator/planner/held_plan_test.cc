// Held plans (ballastctl hold): the same fractions give the same plan whatever the group
// ran before, the workers' check passes, and a hold the group cannot take is refused by
// name.
#include "coordinator/planner/held_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ballast/ownership.h"
#include "coordinator/planner/group_planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ballast::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

BlockShape Even(int32_t block, int32_t units, int32_t size) {
  return {.block = BlockId(block), .num_units = units, .owner_of_unit = EvenOwnership(units, size)};
}

int32_t Owned(const std::vector<RankId>& owners, int32_t rank) {
  return static_cast<int32_t>(std::count(owners.begin(), owners.end(), RankId(rank)));
}

TEST(HeldPlanTest, AnOffloadSpreadsOverTheOtherRanks) {
  // Rank 1 of 3 owns 4 of 12 units; 75% of them (3) go to ranks 0 and 2, the lower rank
  // taking the remainder.
  absl::StatusOr<BlockPlan> plan = HeldBlockPlan({.rank = 1, .offload_fraction = 0.75},
                                                 Even(0, 12, 3), {false, false, false}, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->owner_of_unit.empty()) << "nothing resharded: ownership unchanged";
  EXPECT_TRUE(plan->pruned_units.empty());
  EXPECT_THAT(plan->offloads,
              ElementsAre(Offload{RankId(1), RankId(0), 2}, Offload{RankId(1), RankId(2), 1}));
}

TEST(HeldPlanTest, AReshardMovesUnitsAndTheOffloadIsOfWhatIsKept) {
  // Rank 1 of 3 keeps half its 4 units; the other 2 go one each to ranks 0 and 2; then
  // half of the 2 it keeps are offloaded, to rank 0.
  absl::StatusOr<BlockPlan> plan =
      HeldBlockPlan({.rank = 1, .offload_fraction = 0.5, .reshard_fraction = 0.5}, Even(3, 12, 3),
                    {false, false, false}, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->block, BlockId(3));
  ASSERT_EQ(plan->owner_of_unit.size(), 12u);
  EXPECT_EQ(Owned(plan->owner_of_unit, 0), 5);
  EXPECT_EQ(Owned(plan->owner_of_unit, 1), 2);
  EXPECT_EQ(Owned(plan->owner_of_unit, 2), 5);
  EXPECT_THAT(plan->offloads, ElementsAre(Offload{RankId(1), RankId(0), 1}));
}

TEST(HeldPlanTest, TheSameHoldIsTheSamePlanWhateverRanBefore) {
  const GroupHold hold{.rank = 0, .offload_fraction = 0.25, .reshard_fraction = 0.25};
  absl::StatusOr<BlockPlan> from_even =
      HeldBlockPlan(hold, Even(0, 16, 2), {false, false}, nullptr);
  ASSERT_TRUE(from_even.ok()) << from_even.status();
  // The workers moved to it, or to some other split: the held ownership is the same.
  for (std::vector<RankId> ran :
       {from_even->owner_of_unit, EvenOwnership(16, 2), std::vector<RankId>(16, RankId(1))}) {
    BlockShape shape{.block = BlockId(0), .num_units = 16, .owner_of_unit = ran};
    absl::StatusOr<BlockPlan> again = HeldBlockPlan(hold, shape, {false, false}, &*from_even);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(*again, *from_even);
  }
  // Restated while in force, so the plan does not change once the workers have moved.
  BlockShape moved{.block = BlockId(0), .num_units = 16, .owner_of_unit = from_even->owner_of_unit};
  absl::StatusOr<BlockPlan> restated = HeldBlockPlan(hold, moved, {false, false}, &*from_even);
  ASSERT_TRUE(restated.ok());
  EXPECT_EQ(restated->owner_of_unit, from_even->owner_of_unit);
  // Rank 0 kept 6 of its 8 units (25% of 8 = 2 resharded), and offloads 2 of them (25% of
  // 6 = 1.5, rounded half up).
  EXPECT_EQ(Owned(from_even->owner_of_unit, 0), 6);
  EXPECT_THAT(from_even->offloads, ElementsAre(Offload{RankId(0), RankId(1), 2}));
}

TEST(HeldPlanTest, CordonedRanksTakeNothingAndAHoldNobodyCanTakeIsRefused) {
  absl::StatusOr<BlockPlan> plan = HeldBlockPlan({.rank = 2, .offload_fraction = 1}, Even(0, 12, 3),
                                                 {true, false, false}, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->offloads, ElementsAre(Offload{RankId(2), RankId(1), 4}));

  absl::StatusOr<BlockPlan> nobody = HeldBlockPlan({.rank = 2, .reshard_fraction = 0.5},
                                                   Even(5, 12, 3), {true, true, false}, nullptr);
  EXPECT_EQ(nobody.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(nobody.status().message(), HasSubstr("block 5: every rank but 2 is cordoned"));
  // Holding everything local needs nobody.
  EXPECT_TRUE(HeldBlockPlan({.rank = 2}, Even(5, 12, 3), {true, true, false}, nullptr).ok());
}

TEST(HeldPlanTest, BadHoldsNameTheField) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    GroupHold hold;
    int32_t size;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {{.rank = 2}, 2, "hold: rank 2 out of range [0, 2)"},
           {{.rank = -1}, 2, "hold: rank -1 out of range [0, 2)"},
           {{.rank = 0, .offload_fraction = 1.5}, 2, "offload_fraction 1.5 out of range [0, 1]"},
           {{.rank = 0, .reshard_fraction = -0.1}, 2, "reshard_fraction -0.1 out of range"},
           {{.rank = 0, .offload_fraction = nan}, 2, "offload_fraction nan"},
           {{.rank = 0}, 1, "the group has 1 rank; a hold needs at least 2"},
       }) {
    absl::Status s = ValidateHold(c.hold, c.size);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST(HeldPlanTest, AHeldGroupChangesOnlyWhenItsPlanDoes) {
  GroupPlannerInput input;
  input.group = GroupId("tp0");
  const std::vector<BlockShape> shapes = {Even(0, 8, 2), Even(1, 4, 2)};
  JobPolicy policy;
  policy.mode = BalanceMode::kResize;  // a hold does not ask the mode
  const GroupHold hold{.rank = 1, .offload_fraction = 0.5};
  GroupDecision first = DecideHeldGroup(input, shapes, {false, false}, hold, policy);
  ASSERT_TRUE(first.change.has_value());
  EXPECT_FALSE(first.moves_units);
  ASSERT_EQ(first.change->blocks.size(), 2u);
  EXPECT_THAT(first.change->blocks[0].offloads, ElementsAre(Offload{RankId(1), RankId(0), 2}));
  EXPECT_THAT(first.change->blocks[1].offloads, ElementsAre(Offload{RankId(1), RankId(0), 1}));
  EXPECT_THAT(first.notes[0], HasSubstr("held by an operator"));

  input.in_force = *first.change;
  input.in_force.version = PlanVersion(5);
  EXPECT_FALSE(DecideHeldGroup(input, shapes, {false, false}, hold, policy).change.has_value());

  // A hold one block cannot take changes nothing, and says why.
  const GroupHold reshard{.rank = 1, .reshard_fraction = 1};
  GroupDecision refused = DecideHeldGroup(input, shapes, {true, false}, reshard, policy);
  EXPECT_FALSE(refused.change.has_value());
  EXPECT_EQ(refused.failed.size(), 2u);
  EXPECT_THAT(refused.notes.back(), HasSubstr("the plan in force stays"));
}

}  // namespace
}  // namespace ballast::coordinator
