#include "ballast/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ballast {
namespace {

using ::testing::HasSubstr;

// A group of 3 ranks with one 8-unit block owned 3/3/2.
GroupShape Shape() {
  GroupShape shape;
  shape.group = GroupId("job/tp0");
  shape.size = 3;
  BlockShape block;
  block.block = BlockId(7);
  block.num_units = 8;
  for (int r : {0, 0, 0, 1, 1, 1, 2, 2}) block.owner_of_unit.push_back(RankId(r));
  shape.blocks.push_back(block);
  return shape;
}

WorkloadPlan ValidPlan() {
  WorkloadPlan plan;
  plan.group = GroupId("job/tp0");
  plan.version = PlanVersion(4);
  BlockPlan& bp = plan.blocks.emplace_back();
  bp.block = BlockId(7);
  bp.pruned_units = {0, 1, 0};
  bp.offloads = {{RankId(1), RankId(0), 2}};
  return plan;
}

void ExpectInvalid(const WorkloadPlan& plan, const std::string& field) {
  absl::Status status = ValidatePlan(plan, Shape());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(field));
}

TEST(ValidatePlanTest, AcceptsValidPlan) { EXPECT_TRUE(ValidatePlan(ValidPlan(), Shape()).ok()); }

TEST(ValidatePlanTest, AcceptsEmptyPlan) {
  WorkloadPlan plan;
  plan.group = GroupId("job/tp0");
  plan.version = PlanVersion(1);
  EXPECT_TRUE(ValidatePlan(plan, Shape()).ok());
}

TEST(ValidatePlanTest, RejectsOtherGroup) {
  WorkloadPlan plan = ValidPlan();
  plan.group = GroupId("job/tp1");
  ExpectInvalid(plan, "group 'job/tp1'");
}

TEST(ValidatePlanTest, RejectsNonPositiveVersion) {
  WorkloadPlan plan = ValidPlan();
  plan.version = PlanVersion(0);
  ExpectInvalid(plan, "version 0");
}

TEST(ValidatePlanTest, RejectsUnknownBlock) {
  WorkloadPlan plan = ValidPlan();
  plan.blocks[0].block = BlockId(99);
  ExpectInvalid(plan, "block 99: block unknown");
}

TEST(ValidatePlanTest, RejectsDuplicateBlock) {
  WorkloadPlan plan = ValidPlan();
  plan.blocks.push_back(plan.blocks[0]);
  ExpectInvalid(plan, "listed twice");
}

TEST(ValidatePlanTest, RejectsPrunedUnitsOfWrongLength) {
  WorkloadPlan plan = ValidPlan();
  plan.blocks[0].pruned_units = {0, 1};
  ExpectInvalid(plan, "pruned_units has 2 entries");
}

TEST(ValidatePlanTest, RejectsNegativePruneCount) {
  WorkloadPlan plan = ValidPlan();
  plan.blocks[0].pruned_units = {0, -1, 0};
  ExpectInvalid(plan, "pruned_units[1] = -1");
}

TEST(ValidatePlanTest, RejectsPruningMoreThanOwned) {
  WorkloadPlan plan = ValidPlan();
  plan.blocks[0].pruned_units = {0, 0, 3};
  ExpectInvalid(plan, "pruned_units[2] = 3 out of range [0, 2]");
}

TEST(ValidatePlanTest, RejectsOffloadFieldsOutOfRange) {
  WorkloadPlan plan = ValidPlan();
  plan.blocks[0].offloads = {{RankId(1), RankId(3), 1}};
  ExpectInvalid(plan, "offloads[0].helper 3 out of range [0, 3)");
  plan.blocks[0].offloads = {{RankId(-1), RankId(0), 1}};
  ExpectInvalid(plan, "offloads[0].owner -1");
  plan.blocks[0].offloads = {{RankId(1), RankId(1), 1}};
  ExpectInvalid(plan, "offloads[0].helper equals its owner");
  plan.blocks[0].offloads = {{RankId(1), RankId(0), 0}};
  ExpectInvalid(plan, "offloads[0].units 0");
  plan.blocks[0].offloads = {{RankId(1), RankId(0), 1}, {RankId(1), RankId(0), 1}};
  ExpectInvalid(plan, "offloads[1] repeats owner 1 -> helper 0");
}

TEST(ValidatePlanTest, RejectsRemovingMoreThanOwned) {
  WorkloadPlan plan = ValidPlan();
  plan.blocks[0].pruned_units = {0, 2, 0};
  plan.blocks[0].offloads = {{RankId(1), RankId(0), 2}};
  ExpectInvalid(plan, "rank 1 prunes and offloads 4 units but owns 3");
}

TEST(ValidatePlanTest, ChecksCountsAgainstThePlansOwnOwnership) {
  WorkloadPlan plan = ValidPlan();
  BlockPlan& bp = plan.blocks[0];
  // Rank 2 takes everything: it may now prune 5 of its 8 units; rank 1 owns none.
  bp.owner_of_unit.assign(8, RankId(2));
  bp.offloads.clear();
  bp.pruned_units = {0, 0, 5};
  EXPECT_TRUE(ValidatePlan(plan, Shape()).ok());
  bp.pruned_units = {0, 1, 0};
  ExpectInvalid(plan, "pruned_units[1] = 1 out of range [0, 0]");
}

TEST(ValidatePlanTest, RejectsBadOwnership) {
  WorkloadPlan plan = ValidPlan();
  plan.blocks[0].owner_of_unit.assign(7, RankId(0));
  ExpectInvalid(plan, "owner_of_unit has 7 entries, block has 8 units");
  plan.blocks[0].owner_of_unit.assign(8, RankId(0));
  plan.blocks[0].owner_of_unit[5] = RankId(4);
  ExpectInvalid(plan, "owner_of_unit[5] = 4 out of range");
}

// Rank 1's unit 3 split with ranks 0 and 2, rank 0's unit 0 with rank 2.
WorkloadPlan ReplicaPlan() {
  WorkloadPlan plan;
  plan.group = GroupId("job/tp0");
  plan.version = PlanVersion(5);
  BlockPlan& bp = plan.blocks.emplace_back();
  bp.block = BlockId(7);
  bp.replicas = {{3, RankId(0), 0.25}, {3, RankId(2), 0.75}, {0, RankId(2), 0.5}};
  return plan;
}

GroupShape DividingShape() {
  GroupShape shape = Shape();
  shape.blocks[0].units_divide = true;
  return shape;
}

TEST(ValidatePlanTest, AcceptsReplicasOfUnitsThatDivide) {
  EXPECT_TRUE(ValidatePlan(ReplicaPlan(), DividingShape()).ok());
  absl::Status whole = ValidatePlan(ReplicaPlan(), Shape());
  EXPECT_THAT(std::string(whole.message()), HasSubstr("replicas need a block whose units"));
}

TEST(ValidatePlanTest, RejectsBadReplicasNamingTheField) {
  auto expect = [](WorkloadPlan plan, const std::string& field) {
    absl::Status status = ValidatePlan(plan, DividingShape());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(std::string(status.message()), HasSubstr(field));
  };
  WorkloadPlan plan = ReplicaPlan();
  plan.blocks[0].replicas[1].unit = 8;
  expect(plan, "replicas[1].unit 8 out of range [0, 8)");
  plan = ReplicaPlan();
  plan.blocks[0].replicas[0].helper = RankId(3);
  expect(plan, "replicas[0].helper 3 out of range [0, 3)");
  plan = ReplicaPlan();
  plan.blocks[0].replicas[0].helper = RankId(1);
  expect(plan, "replicas[0].helper equals the owner 1 of unit 3");
  plan = ReplicaPlan();
  plan.blocks[0].replicas[2].share = 0;
  expect(plan, "replicas[2].share 0 out of range (0, 1]");
  plan = ReplicaPlan();
  plan.blocks[0].replicas[1].share = 0.8;
  expect(plan, "replicas[1]: unit 3's shares sum to 1.05, over 1");
  plan = ReplicaPlan();
  plan.blocks[0].replicas.push_back({0, RankId(2), 0.1});
  expect(plan, "replicas[3] repeats unit 0 on helper 2");
  plan = ReplicaPlan();
  plan.blocks[0].pruned_units = {0, 1, 0};
  expect(plan, "replicas[0]: unit 3's owner 1 also prunes or offloads");
  // Owners after the plan's reshard: unit 3 moved to rank 2 cannot be replicated on it.
  plan = ReplicaPlan();
  plan.blocks[0].owner_of_unit = Shape().blocks[0].owner_of_unit;
  plan.blocks[0].owner_of_unit[3] = RankId(2);
  expect(plan, "replicas[1].helper equals the owner 2 of unit 3");
}

TEST(ValidatePlanTest, CapacityFactorOnlyWhereUnitsDivideAndFiniteNonNegative) {
  WorkloadPlan plan = ValidPlan();  // a cap goes with prunes and offloads by count
  plan.blocks[0].capacity_factor = 1.25;
  EXPECT_TRUE(ValidatePlan(plan, DividingShape()).ok());
  // So small that ceil(factor x tokens x top_k / experts) is 1: still a cap, of one token.
  plan.blocks[0].capacity_factor = 1e-9;
  EXPECT_TRUE(ValidatePlan(plan, DividingShape()).ok());
  plan.blocks[0].capacity_factor = 0;  // no cap: fine on any block
  EXPECT_TRUE(ValidatePlan(plan, Shape()).ok());
  plan.blocks[0].capacity_factor = 1.25;
  ExpectInvalid(plan, "block 7: capacity_factor 1.25 needs a block whose units' work divides");
  const BlockShape dividing = DividingShape().blocks[0];
  for (double bad : {-0.5, std::nan(""), std::numeric_limits<double>::infinity()}) {
    plan.blocks[0].capacity_factor = bad;
    const absl::Status status = ValidateBlockPlan(plan.blocks[0], dividing, 3);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(status.message()), HasSubstr("block 7: capacity_factor "));
    EXPECT_THAT(std::string(status.message()), HasSubstr("must be finite and >= 0")) << bad;
  }
}

TEST(ValidatePlanTest, RejectsUnknownImputation) {
  WorkloadPlan plan = ValidPlan();
  plan.imputation = static_cast<Imputation>(9);
  ExpectInvalid(plan, "imputation 9 unknown");
}

TEST(ValidatePlanTest, RejectsUnknownPriority) {
  WorkloadPlan plan = ValidPlan();
  plan.priority = static_cast<Priority>(7);
  ExpectInvalid(plan, "priority 7 unknown");
}

// One block on its own (the planner prices blocks one at a time): the same rule and the
// same words as in a whole plan, which only adds its version.
TEST(ValidateBlockPlanTest, IsTheBlockPartOfValidatePlan) {
  const GroupShape shape = Shape();
  WorkloadPlan plan = ValidPlan();
  EXPECT_TRUE(ValidateBlockPlan(plan.blocks[0], shape.blocks[0], shape.size).ok());
  plan.blocks[0].offloads = {{RankId(1), RankId(9), 1}};
  const absl::Status block = ValidateBlockPlan(plan.blocks[0], shape.blocks[0], shape.size);
  EXPECT_EQ(block.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(block.message(), "block 7: offloads[0].helper 9 out of range [0, 3)");
  EXPECT_EQ(ValidatePlan(plan, shape).message(),
            "plan v4 block 7: offloads[0].helper 9 out of range [0, 3)");
}

TEST(PlanNamesTest, RoundTrip) {
  for (Imputation i : {Imputation::kZero, Imputation::kMean}) {
    EXPECT_EQ(*ParseImputation(ImputationName(i)), i);
  }
  for (Priority p :
       {Priority::kChange, Priority::kMagnitude, Priority::kRandom, Priority::kRoundRobin}) {
    EXPECT_EQ(*ParsePriority(PriorityName(p)), p);
  }
  EXPECT_THAT(std::string(ParsePriority("fastest").status().message()), HasSubstr("'fastest'"));
  EXPECT_FALSE(ParseImputation("median").ok());
}

TEST(PlanSummaryTest, DescribesPlan) {
  EXPECT_EQ(PlanSummary(ValidPlan()), "v4 (zero): block 7 pruned {0,1,0} offload 1->0 x2;");
  WorkloadPlan plan = ValidPlan();
  plan.priority = Priority::kRoundRobin;
  EXPECT_EQ(PlanSummary(plan), "v4 (zero, round-robin): block 7 pruned {0,1,0} offload 1->0 x2;");
  EXPECT_EQ(PlanSummary(ReplicaPlan()),
            "v5 (zero): block 7 replica 3->0 x0.25 replica 3->2 x0.75 replica 0->2 x0.5;");
  plan = ValidPlan();
  plan.blocks[0].capacity_factor = 1.5;
  EXPECT_EQ(PlanSummary(plan), "v4 (zero): block 7 pruned {0,1,0} offload 1->0 x2 capacity x1.5;");
  // A reshard, and one the workers have made (they run the ownership it states).
  plan = ValidPlan();
  plan.blocks[0].owner_of_unit = {RankId(0), RankId(0), RankId(1)};
  EXPECT_EQ(PlanSummary(plan), "v4 (zero): block 7 pruned {0,1,0} offload 1->0 x2 reshard;");
  EXPECT_EQ(PlanSummary(plan, {BlockId(7)}),
            "v4 (zero): block 7 pruned {0,1,0} offload 1->0 x2 reshard (made);");
  EXPECT_EQ(PlanSummary(plan, {BlockId(3)}),
            "v4 (zero): block 7 pruned {0,1,0} offload 1->0 x2 reshard;");
}

TEST(MoveMadeTest, AMoveIsMadeWhereTheWorkersRunTheOwnershipItStates) {
  BlockPlan block;
  block.block = BlockId(7);
  const std::vector<RankId> even = {RankId(0), RankId(0), RankId(1), RankId(1)};
  const std::vector<RankId> moved = {RankId(0), RankId(0), RankId(0), RankId(1)};
  EXPECT_FALSE(MoveMade(block, even)) << "no move stated";
  EXPECT_FALSE(MoveMade(block, {})) << "no move stated, no ownership reported";
  block.owner_of_unit = moved;
  EXPECT_FALSE(MoveMade(block, even)) << "stated, not yet run";
  EXPECT_FALSE(MoveMade(block, {})) << "stated, no ownership reported";
  EXPECT_TRUE(MoveMade(block, moved));
  block.pruned_units = {0, 1};
  EXPECT_TRUE(MoveMade(block, moved)) << "what else the block asks is not the move's";
}

}  // namespace
}  // namespace ballast
