// Plans across the wire (proto/convert.h): every field survives the round trip, and the
// priority, which older coordinators never send, stays optional.
#include "proto/convert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ballast/plan.h"

namespace ballast {
namespace {

WorkloadPlan SomePlan() {
  WorkloadPlan plan;
  plan.group = GroupId("vit/tp0");
  plan.version = PlanVersion(42);
  plan.number = 3;
  plan.imputation = Imputation::kMean;
  plan.blocks.push_back({.block = BlockId(1),
                         .pruned_units = {0, 2},
                         .offloads = {{RankId(1), RankId(0), 3}},
                         .owner_of_unit = {RankId(0), RankId(1), RankId(1)}});
  return plan;
}

TEST(ConvertTest, EveryPriorityRoundTrips) {
  for (Priority p :
       {Priority::kChange, Priority::kMagnitude, Priority::kRandom, Priority::kRoundRobin}) {
    WorkloadPlan plan = SomePlan();
    plan.priority = p;
    absl::StatusOr<WorkloadPlan> back = FromProto(ToProto(plan));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, plan) << PriorityName(p);
  }
}

TEST(ConvertTest, NoPriorityStaysNone) {
  const WorkloadPlan plan = SomePlan();
  const v1::WorkloadPlan wire = ToProto(plan);
  EXPECT_EQ(wire.priority(), v1::PRIORITY_UNSPECIFIED);
  absl::StatusOr<WorkloadPlan> back = FromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->priority.has_value());
  EXPECT_EQ(*back, plan);
}

// A newer coordinator's policy is a hint this worker cannot follow: the plan still
// applies, and its blocks keep their own policy. An unknown imputation changes what the
// step computes, so that plan is refused.
TEST(ConvertTest, AnUnknownPriorityIsDroppedAnUnknownImputationRefused) {
  v1::WorkloadPlan wire = ToProto(SomePlan());
  wire.set_priority(static_cast<v1::Priority>(9));
  absl::StatusOr<WorkloadPlan> back = FromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->priority.has_value());
  EXPECT_EQ(back->blocks, SomePlan().blocks);

  wire.set_imputation(static_cast<v1::Imputation>(9));
  back = FromProto(wire);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(back.status().message()), ::testing::HasSubstr("imputation 9 unknown"));
}

}  // namespace
}  // namespace ballast
