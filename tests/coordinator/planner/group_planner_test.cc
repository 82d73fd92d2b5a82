// DecideGroup: the whole decision for a group (dwell, restated moves, whether a plan is a
// change), on small blocks whose plans are worked out by hand.
#include "coordinator/planner/group_planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "ballast/block.h"
#include "ballast/plan.h"

namespace ballast::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Two ranks owning 4 units each of block 0; rank 1 computes a unit in `slow_seconds`,
// rank 0 in 1 s; an offloaded unit costs each side `tau`.
PlannerInput TwoRanks(double slow_seconds, double tau) {
  PlannerInput in;
  in.block = BlockId(0);
  in.owner_of_unit = EvenOwnership(8, 2);
  in.ranks = {{.seconds_per_unit = 1, .owned_units = 4},
              {.seconds_per_unit = slow_seconds, .owned_units = 4}};
  in.transfer_seconds_per_unit = tau;
  return in;
}

JobPolicy Migrate() {
  JobPolicy policy;
  policy.mode = BalanceMode::kMigrate;
  return policy;
}

GroupPlannerInput OneBlock(const PlannerInput& block) {
  GroupPlannerInput in;
  in.group = GroupId("tp0");
  in.blocks.push_back({.input = block});
  return in;
}

// Rank 1 at 2 s/unit, tau 0.01: all-local takes 8 s; offloading one unit to rank 0 takes
// 6.01 s, 25% better: past the job's hysteresis (5%), short of the dwell's (30%).
TEST(GroupPlannerTest, ADwellHoldsThePlanUnlessTheImprovementIsLarge) {
  GroupPlannerInput in = OneBlock(TwoRanks(2, 0.01));
  in.in_force.group = GroupId("tp0");
  in.in_force.version = PlanVersion(5);  // all-local, pushed
  const DwellOptions dwell{.plan_dwell = absl::Seconds(2), .dwell_hysteresis = 0.3};

  in.since_change = absl::Seconds(1);
  GroupDecision held = DecideGroup(in, Migrate(), dwell);
  EXPECT_FALSE(held.change.has_value());
  ASSERT_FALSE(held.notes.empty());
  EXPECT_THAT(held.notes[0], HasSubstr("plan changed 1s ago: hysteresis 0.3 until the 2s dwell"));
  // Explained with the hysteresis it was planned with: the dwell's.
  const std::vector<std::string> why = ExplainGroup(in, held);
  ASSERT_EQ(why.size(), 2u);
  EXPECT_EQ(why[0], held.notes[0]);
  EXPECT_THAT(why[1], HasSubstr("block 0:\nblock 0 mode migrate"));
  EXPECT_THAT(why[1], HasSubstr("hysteresis 0.3"));
  ASSERT_TRUE(held.blocks.contains(0));
  EXPECT_TRUE(held.blocks.at(0).kept_current);

  in.since_change = absl::Seconds(3);
  GroupDecision changed = DecideGroup(in, Migrate(), dwell);
  ASSERT_TRUE(changed.change.has_value());
  EXPECT_EQ(changed.change->group, GroupId("tp0"));
  EXPECT_EQ(changed.change->version, PlanVersion(0)) << "versions are the caller's";
  ASSERT_EQ(changed.change->blocks.size(), 1u);
  EXPECT_EQ(changed.change->blocks[0].offloads, (std::vector<Offload>{{RankId(1), RankId(0), 1}}));
  EXPECT_FALSE(changed.moves_units);
}

TEST(GroupPlannerTest, AnUnchangedPlanIsNotPushedAgainUnlessTheWorkersRunAnother) {
  GroupPlannerInput in = OneBlock(TwoRanks(2, 0.01));
  GroupDecision first = DecideGroup(in, Migrate(), DwellOptions{});
  ASSERT_TRUE(first.change.has_value());
  in.in_force = *first.change;
  in.in_force.version = PlanVersion(7);
  EXPECT_FALSE(DecideGroup(in, Migrate(), DwellOptions{}).change.has_value());
  // A restarted coordinator: the workers run a newer plan than the one it knows.
  in.unknown_plan_in_force = true;
  GroupDecision again = DecideGroup(in, Migrate(), DwellOptions{});
  ASSERT_TRUE(again.change.has_value());
  EXPECT_EQ(again.change->blocks, first.change->blocks);
}

// The job's imputation and priority travel with the plan, and changing either re-pushes a
// plan that balances (they decide which units it prunes and what stands in for them).
TEST(GroupPlannerTest, ThePlanCarriesTheJobsImputationAndPriority) {
  GroupPlannerInput in = OneBlock(TwoRanks(2, 0.01));
  JobPolicy policy = Migrate();
  policy.imputation = Imputation::kZero;
  policy.priority = Priority::kMagnitude;
  GroupDecision first = DecideGroup(in, policy, DwellOptions{});
  ASSERT_TRUE(first.change.has_value());
  EXPECT_EQ(first.change->imputation, Imputation::kZero);
  EXPECT_EQ(first.change->priority, Priority::kMagnitude);
  in.in_force = *first.change;
  in.in_force.version = PlanVersion(7);
  EXPECT_FALSE(DecideGroup(in, policy, DwellOptions{}).change.has_value());

  policy.priority = Priority::kRoundRobin;
  GroupDecision again = DecideGroup(in, policy, DwellOptions{});
  ASSERT_TRUE(again.change.has_value()) << "a new priority was not pushed";
  EXPECT_EQ(again.change->priority, Priority::kRoundRobin);
  EXPECT_EQ(again.change->blocks, first.change->blocks);

  // A calm group's all-local plan prunes nothing: neither setting makes it a change.
  GroupPlannerInput calm = OneBlock(TwoRanks(1, 0.01));
  calm.in_force.version = PlanVersion(3);  // all-local, pushed under the old settings
  calm.in_force.priority = Priority::kChange;
  EXPECT_FALSE(DecideGroup(calm, policy, DwellOptions{}).change.has_value());
}

TEST(GroupPlannerTest, AllLocalIsNotPushedWhenNothingWasPushedYet) {
  GroupPlannerInput in = OneBlock(TwoRanks(1, 0.01));
  GroupDecision d = DecideGroup(in, Migrate(), DwellOptions{});
  EXPECT_FALSE(d.change.has_value());
  // Once a plan was pushed, going back to all-local is a change.
  in.in_force.version = PlanVersion(3);
  in.in_force.blocks.push_back({.block = BlockId(0), .offloads = {{RankId(1), RankId(0), 1}}});
  d = DecideGroup(in, Migrate(), DwellOptions{});
  ASSERT_TRUE(d.change.has_value());
  EXPECT_TRUE(d.change->blocks.empty());
}

TEST(GroupPlannerTest, ModeObserveExplainsAndOnlyEndsAPlanInForce) {
  JobPolicy observe = Migrate();
  observe.mode = BalanceMode::kObserve;
  GroupPlannerInput in = OneBlock(TwoRanks(2, 0.01));
  GroupDecision d = DecideGroup(in, observe, DwellOptions{});
  EXPECT_FALSE(d.change.has_value());
  ASSERT_TRUE(d.blocks.contains(0));
  EXPECT_EQ(d.blocks.at(0).recommended.kind, CandidateKind::kAuto);
  EXPECT_THAT(absl::StrJoin(ExplainGroup(in, d), "\n"), HasSubstr("mode observe pushes all-local"));
  // A plan a balancing mode left in force is ended (all-local), not left running.
  in.in_force.version = PlanVersion(3);
  in.in_force.blocks.push_back({.block = BlockId(0), .offloads = {{RankId(1), RankId(0), 1}}});
  d = DecideGroup(in, observe, DwellOptions{});
  ASSERT_TRUE(d.change.has_value());
  EXPECT_TRUE(d.change->blocks.empty());
}

// Rank 1 at 10 s/unit and chronic, tau 2: offloading y of its units costs rank 0
// 4 + 3y and rank 1 40 - 8y, 16 s at best (y = 3 or 4); the water-filled ownership, all
// 8 units on rank 0, takes 8 s with no transfers: a reshard.
TEST(GroupPlannerTest, AReshardMovesUnitsAndIsRestatedUntilConfirmed) {
  PlannerInput block = TwoRanks(10, 2);
  block.ranks[1].chronic = true;
  GroupDecision d = DecideGroup(OneBlock(block), Migrate(), DwellOptions{});
  ASSERT_TRUE(d.change.has_value());
  EXPECT_TRUE(d.moves_units);
  EXPECT_THAT(d.relieved, ElementsAre(1));
  ASSERT_EQ(d.change->blocks.size(), 1u);
  const std::vector<RankId> moved = d.change->blocks[0].owner_of_unit;
  ASSERT_EQ(moved.size(), 8u);
  EXPECT_EQ(std::count(moved.begin(), moved.end(), RankId(0)), 8);

  // Next round: planned on the moved ownership, the plan is all-local; until a worker
  // reports the move, it is restated, and that restatement is no move of its own.
  GroupPlannerInput next = OneBlock(block);
  next.blocks[0].input.owner_of_unit = moved;
  next.blocks[0].input.ranks[0].owned_units = 8;
  next.blocks[0].input.ranks[1].owned_units = 0;
  next.blocks[0].move_unconfirmed = true;
  next.in_force = *d.change;
  next.in_force.version = PlanVersion(9);
  GroupDecision restated = DecideGroup(next, Migrate(), DwellOptions{});
  EXPECT_FALSE(restated.change.has_value()) << "the plan in force already says it";
  EXPECT_FALSE(restated.moves_units);
  EXPECT_THAT(restated.relieved, IsEmpty());
  // Every worker reported the move: the plan in force, which still states it, is what
  // they run (all-local on the new ownership), and no plan is pushed only to drop the
  // statement: it would be a plan change that changes nothing.
  next.blocks[0].move_unconfirmed = false;
  GroupDecision confirmed = DecideGroup(next, Migrate(), DwellOptions{});
  EXPECT_FALSE(confirmed.change.has_value()) << "the workers run the plan in force";
  EXPECT_TRUE(RunsAllLocal(next.in_force.blocks[0], moved));
  EXPECT_FALSE(RunsAllLocal(next.in_force.blocks[0], EvenOwnership(8, 2)))
      << "a move the workers have not made asks something of them";
  // The group's next change drops it: here an offload in force that the planner ends.
  next.in_force.blocks[0].offloads = {{RankId(0), RankId(1), 1}};
  EXPECT_FALSE(RunsAllLocal(next.in_force.blocks[0], moved));
  GroupDecision ended = DecideGroup(next, Migrate(), DwellOptions{});
  ASSERT_TRUE(ended.change.has_value());
  EXPECT_TRUE(ended.change->blocks.empty()) << "all-local on the new ownership";
  EXPECT_FALSE(ended.moves_units);
}

// `in` with a plan in force (pushed a second ago, under the migrate policy) offloading
// `units` of rank 1's units to rank 0 in block 0.
GroupPlannerInput OffloadingOneSecondAgo(GroupPlannerInput in, int32_t units) {
  in.in_force.group = GroupId("tp0");
  in.in_force.version = PlanVersion(5);
  in.in_force.imputation = Migrate().imputation;
  in.in_force.priority = Migrate().priority;
  in.in_force.blocks.push_back({.block = BlockId(0), .offloads = {{RankId(1), RankId(0), units}}});
  in.since_change = absl::Seconds(1);
  return in;
}

// A dwell of a minute at 30% (a flap hold's).
constexpr DwellOptions kLongDwell{.plan_dwell = absl::Seconds(60), .dwell_hysteresis = 0.3};

// Rank 1 at 3 s/unit, tau 1, the plan in force offloading 1 of its units: 10 s a step.
// Offloading 2 takes 8 s, 20% better: past the job's hysteresis, short of the dwell's
// 30%, so the dwell (or a flap hold, a longer dwell) holds the plan in force. With rank 1
// chronic, the water-filled split (6 units on rank 0, 2 on rank 1) takes 6 s with no
// transfers: it beats the best plan on the even split (8 s) by more than the straggler
// threshold's margin (0.1 / 1.1) and the plan in force by more than the job's
// hysteresis, and it goes out, dwell or not: the persistence is the evidence.
TEST(GroupPlannerTest, ADwellDoesNotHoldOffAChronicStragglersReshard) {
  GroupPlannerInput in = OffloadingOneSecondAgo(OneBlock(TwoRanks(3, 1)), 1);

  GroupDecision held = DecideGroup(in, Migrate(), kLongDwell);
  EXPECT_FALSE(held.change.has_value()) << absl::StrJoin(ExplainGroup(in, held), "\n");
  GroupDecision undwelt =
      DecideGroup(in, Migrate(), DwellOptions{.plan_dwell = absl::ZeroDuration()});
  ASSERT_TRUE(undwelt.change.has_value()) << "no dwell: the 20% better offload goes out";
  EXPECT_FALSE(undwelt.moves_units);

  in.blocks[0].input.ranks[1].chronic = true;
  GroupDecision d = DecideGroup(in, Migrate(), kLongDwell);
  ASSERT_TRUE(d.change.has_value()) << absl::StrJoin(ExplainGroup(in, d), "\n");
  EXPECT_TRUE(d.moves_units);
  EXPECT_THAT(d.relieved, ElementsAre(1));
  ASSERT_EQ(d.change->blocks.size(), 1u);
  const std::vector<RankId>& moved = d.change->blocks[0].owner_of_unit;
  EXPECT_EQ(std::count(moved.begin(), moved.end(), RankId(0)), 6);
  EXPECT_NEAR(d.blocks.at(0).predicted_step_seconds, 6, 1e-9);
}

// Rank 1 at 2 s/unit, tau 0.01: offloading 1 unit takes 6.01 s, 2 units 6.02 s, within
// any hysteresis of each other. A plan in force that the step feedback measured slower
// than the one before it (its failed probe's) is not kept by that hysteresis, nor by a
// dwell: the best plan replaces it.
TEST(GroupPlannerTest, APlanMeasuredWorseIsNotKeptByHysteresis) {
  GroupPlannerInput in = OffloadingOneSecondAgo(OneBlock(TwoRanks(2, 0.01)), 2);
  EXPECT_FALSE(DecideGroup(in, Migrate(), kLongDwell).change.has_value());
  EXPECT_FALSE(DecideGroup(in, Migrate(), DwellOptions{}).change.has_value());

  in.in_force_measured_worse = true;
  GroupDecision d = DecideGroup(in, Migrate(), kLongDwell);
  ASSERT_TRUE(d.change.has_value());
  ASSERT_EQ(d.change->blocks.size(), 1u);
  ASSERT_EQ(d.change->blocks[0].offloads.size(), 1u);
  EXPECT_EQ(d.change->blocks[0].offloads[0].units, 1);
  EXPECT_THAT(absl::StrJoin(ExplainGroup(in, d), "\n"),
              HasSubstr("ran slower than the plan before it"));
}

// Block 0: 20 units a rank; block 1: 2 units a rank (a coarse block, as an attention
// block's heads are); rank 1 at `slow` s/unit, tau 0.01. The plan in force offloads 6 of
// rank 1's block-0 units and none of block 1's, pushed long ago.
GroupPlannerInput BigAndSmallBlocks(double slow) {
  GroupPlannerInput in;
  in.group = GroupId("tp0");
  for (int32_t b = 0; b < 2; ++b) {
    const int32_t per_rank = b == 0 ? 20 : 2;
    PlannerInput block;
    block.block = BlockId(b);
    block.owner_of_unit = EvenOwnership(2 * per_rank, 2);
    block.ranks = {{.seconds_per_unit = 1, .owned_units = per_rank},
                   {.seconds_per_unit = slow, .owned_units = per_rank}};
    block.transfer_seconds_per_unit = 0.01;
    in.blocks.push_back({.input = block});
  }
  in.in_force.group = GroupId("tp0");
  in.in_force.version = PlanVersion(5);
  in.in_force.imputation = Migrate().imputation;
  in.in_force.priority = Migrate().priority;
  in.in_force.blocks.push_back({.block = BlockId(0), .offloads = {{RankId(1), RankId(0), 6}}});
  in.since_change = absl::Minutes(5);
  return in;
}

// At 2 s/unit, offloading 1 of block 1's units takes it from 4 s to 3.01 s: 25% better,
// past the job's hysteresis on that block, but 0.99 s of the group's 32.06 s (3.1%),
// under the 9.1% (threshold 0.1: 0.1 / 1.1) a group that balances must gain to change.
// Block 0's best (offloading 7: 27.07 s against 28.06 s, 3.5%) is under the hysteresis
// on its own. At 3 s/unit the plan in force takes 42.06 s in block 0 and offloading 10
// takes 30.1 s: the group gains 31% and both blocks change.
TEST(GroupPlannerTest, AGroupThatBalancesChangesOnlyForAGainBeyondTheNoise) {
  GroupPlannerInput in = BigAndSmallBlocks(2);
  GroupDecision d = DecideGroup(in, Migrate(), DwellOptions{});
  const std::string why = absl::StrJoin(ExplainGroup(in, d), "\n");
  EXPECT_FALSE(d.change.has_value()) << why;
  EXPECT_TRUE(d.blocks.at(1).kept_for_group) << why;
  EXPECT_TRUE(d.blocks.at(1).plan.offloads.empty());
  EXPECT_NEAR(d.blocks.at(1).predicted_step_seconds, 4, 1e-9) << "the plan in force's";
  EXPECT_EQ(d.blocks.at(1).recommended.plan.offloads.size(), 1u) << "still what it would do";
  EXPECT_FALSE(d.blocks.at(0).kept_for_group) << "kept by its own hysteresis";
  EXPECT_THAT(why, HasSubstr("kept the plan in force in block 1: its best new plan gains "
                             "0.99 s, under the 2.91455 s"));
  EXPECT_THAT(why, HasSubstr("the group's changes together gain too little"));

  GroupPlannerInput worse = BigAndSmallBlocks(3);
  GroupDecision changed = DecideGroup(worse, Migrate(), DwellOptions{});
  ASSERT_TRUE(changed.change.has_value());
  ASSERT_EQ(changed.change->blocks.size(), 2u);
  EXPECT_EQ(changed.change->blocks[0].offloads[0].units, 10);
  EXPECT_EQ(changed.change->blocks[1].offloads[0].units, 1);
  EXPECT_TRUE(changed.notes.empty());
}

// The gate holds only what noise could have made: not a change made on purpose (the
// step feedback's probe, an operator's setting), nor the best plan after a failed probe
// (no plan in force is priced then).
TEST(GroupPlannerTest, AChangeMadeOnPurposeIsNotWeighedAgainstTheNoise) {
  for (const bool probe : {true, false}) {
    GroupPlannerInput in = BigAndSmallBlocks(2);
    in.deliberate = probe;
    in.in_force_measured_worse = !probe;
    GroupDecision d = DecideGroup(in, Migrate(), DwellOptions{});
    ASSERT_TRUE(d.change.has_value()) << absl::StrJoin(ExplainGroup(in, d), "\n");
    ASSERT_EQ(d.change->blocks.size(), 2u);
    EXPECT_EQ(d.change->blocks[1].offloads[0].units, 1);
    EXPECT_FALSE(d.blocks.at(1).kept_for_group);
  }
}

// A split a reshard left uneven balances already, with nothing offloaded: at 2 s/unit on
// 26/14 (block 0 all-local 28 s, offloading 1 27.01 s, under the hysteresis) the coarse
// block's offload gains it 25% and the group 3.1%: held, where on the even split the
// same group starts to balance on the hysteresis alone (the test below).
TEST(GroupPlannerTest, ASplitAReshardLeftUnevenBalancesAlready) {
  GroupPlannerInput in = BigAndSmallBlocks(2);
  in.in_force.blocks.clear();
  PlannerInput& big = in.blocks[0].input;
  big.owner_of_unit.assign(26, RankId(0));
  big.owner_of_unit.resize(40, RankId(1));
  big.ranks[0].owned_units = 26;
  big.ranks[1].owned_units = 14;
  GroupDecision d = DecideGroup(in, Migrate(), DwellOptions{});
  const std::string why = absl::StrJoin(ExplainGroup(in, d), "\n");
  EXPECT_FALSE(d.change.has_value()) << why;
  EXPECT_TRUE(d.blocks.at(1).kept_for_group) << why;
  EXPECT_THAT(why, HasSubstr("kept the plan in force in block 1: its best new plan gains 0.99 s,"));
}

// A group that runs all-local on the even split starts to balance on the job's
// hysteresis alone: rank 1 at 1.2 s/unit, offloading 2 of block 0's units takes it from
// 24 s to 22.02 s, 7.5% of the group's 26.4 s, and goes out. Once it balances, the same
// gain would not be enough (the test above).
TEST(GroupPlannerTest, AGroupStartsToBalanceOnTheHysteresisAlone) {
  GroupPlannerInput in = BigAndSmallBlocks(1.2);
  in.in_force.blocks.clear();
  GroupDecision d = DecideGroup(in, Migrate(), DwellOptions{});
  ASSERT_TRUE(d.change.has_value()) << absl::StrJoin(ExplainGroup(in, d), "\n");
  ASSERT_EQ(d.change->blocks.size(), 1u);
  EXPECT_EQ(d.change->blocks[0].offloads[0].units, 2);
  EXPECT_FALSE(d.blocks.at(0).kept_for_group);
}

// A plan that names no block (mode off) drops a restated move: the workers keep the
// ownership they run, and the coordinator plans on what they report from then on.
TEST(GroupPlannerTest, ModeOffPushesAllLocalWithoutRestatingAMove) {
  GroupPlannerInput in;
  in.group = GroupId("tp0");
  in.in_force.version = PlanVersion(4);
  in.in_force.blocks.push_back(
      {.block = BlockId(0), .owner_of_unit = std::vector<RankId>(8, RankId(0))});
  JobPolicy off = Migrate();
  off.mode = BalanceMode::kOff;
  GroupDecision d = DecideGroup(in, off, DwellOptions{});
  ASSERT_TRUE(d.change.has_value());
  EXPECT_TRUE(d.change->blocks.empty());
  EXPECT_FALSE(d.moves_units);
  EXPECT_TRUE(ExplainGroup(in, d).empty()) << "no dwell line in mode off, and no blocks";
}

TEST(GroupPlannerTest, ABlockThatCannotBePlannedIsLeftOutAndSaysWhy) {
  PlannerInput bad = TwoRanks(2, 0.01);
  bad.ranks[1].seconds_per_unit = std::nan("");
  GroupPlannerInput in = OneBlock(bad);
  in.blocks.push_back({.input = TwoRanks(2, 0.01)});
  in.blocks[1].input.block = BlockId(1);
  GroupDecision d = DecideGroup(in, Migrate(), DwellOptions{});
  EXPECT_FALSE(d.blocks.contains(0));
  EXPECT_TRUE(d.blocks.contains(1));
  const std::vector<std::string> why = ExplainGroup(in, d);
  ASSERT_EQ(why.size(), 2u);
  EXPECT_THAT(why[0], HasSubstr("block 0: ranks[1].seconds_per_unit nan"));
  EXPECT_THAT(why[1], HasSubstr("block 1:\nblock 1 mode migrate"));
  ASSERT_TRUE(d.change.has_value());
  ASSERT_EQ(d.change->blocks.size(), 1u);
  EXPECT_EQ(d.change->blocks[0].block, BlockId(1));
}

}  // namespace
}  // namespace ballast::coordinator
