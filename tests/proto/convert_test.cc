// Plans across the wire (proto/convert.h): every field survives the round trip, and the
// priority, which older coordinators never send, stays optional. Step reports carry every
// timing the coordinator reads.
#include "proto/convert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "ballast/plan.h"
#include "ballast/tp_group.h"

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
  plan.blocks.push_back({.block = BlockId(2),
                         .replicas = {{0, RankId(1), 0.25}, {0, RankId(2), 0.5}},
                         .capacity_factor = 0.75});
  return plan;
}

// A capacity cap crosses the wire both ways; a block without one sends 0, which reads back
// as no cap (what a coordinator from before the field sends).
TEST(ConvertTest, CapacityFactorRoundTrips) {
  const WorkloadPlan plan = SomePlan();
  const v1::WorkloadPlan wire = ToProto(plan);
  ASSERT_EQ(wire.blocks_size(), 2);
  EXPECT_EQ(wire.blocks(0).capacity_factor(), 0.0);
  EXPECT_EQ(wire.blocks(1).capacity_factor(), 0.75);
  absl::StatusOr<WorkloadPlan> back = FromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->blocks[0].capacity_factor, 0.0);
  EXPECT_EQ(back->blocks[1].capacity_factor, 0.75);
  EXPECT_EQ(*back, plan);
}

// NaN is unequal to itself, so a plan holding one could never match its re-encoding (the
// plan fuzzer's round trip found it): refused by name on the way in.
TEST(ConvertTest, ANanShareOrCapacityIsRefused) {
  v1::WorkloadPlan wire;
  wire.set_version(3);
  wire.set_imputation(v1::IMPUTATION_MEAN);
  v1::BlockPlan* b = wire.add_blocks();
  b->set_block(2);
  b->set_capacity_factor(std::nan(""));
  absl::StatusOr<WorkloadPlan> plan = FromProto(wire);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(), "plan v3 block 2: capacity_factor is nan");
  b->set_capacity_factor(1.5);
  v1::Replica* r = b->add_replicas();
  r->set_share(std::nan(""));
  plan = FromProto(wire);
  EXPECT_EQ(plan.status().message(), "plan v3 block 2: a replica's share is nan");
  r->set_share(0.5);
  EXPECT_TRUE(FromProto(wire).ok());
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

TEST(ConvertTest, AStepReportCarriesEveryTiming) {
  StepTimings timings;
  timings.step = 7;
  timings.plan_version = PlanVersion(42);
  timings.plan_number = 3;
  timings.agreement_seconds = 0.5;
  timings.blocks.push_back({.block = BlockId(1),
                            .compute_seconds = 0.25,
                            .comm_seconds = 0.125,
                            .units_computed = 6,
                            .micro_batches = 2,
                            .received_from = 1,
                            .received_bytes = 4096,
                            .received_seconds = 0.01,
                            .unit_tokens = {3, 0, 5, 2, 1, 4},
                            .tokens_computed = 9});
  timings.blocks.push_back({.block = BlockId(2)});  // no link sample
  const v1::StepReport wire = ToProto(timings);
  EXPECT_EQ(wire.step(), 7);
  EXPECT_EQ(wire.plan_version(), 42);
  EXPECT_EQ(wire.plan_number(), 3);
  EXPECT_EQ(wire.agreement_seconds(), 0.5);
  ASSERT_EQ(wire.blocks_size(), 2);
  const v1::BlockTiming& b = wire.blocks(0);
  EXPECT_EQ(b.block(), 1);
  EXPECT_EQ(b.compute_seconds(), 0.25);
  EXPECT_EQ(b.comm_seconds(), 0.125);
  EXPECT_EQ(b.units_computed(), 6);
  EXPECT_EQ(b.micro_batches(), 2);
  ASSERT_TRUE(b.has_received());
  EXPECT_EQ(b.received().from_rank(), 1);
  EXPECT_EQ(b.received().bytes(), 4096);
  EXPECT_EQ(b.received().seconds(), 0.01);
  EXPECT_THAT(b.unit_tokens(), ::testing::ElementsAre(3, 0, 5, 2, 1, 4));
  EXPECT_EQ(b.tokens_computed(), 9);
  EXPECT_FALSE(wire.blocks(1).has_received());
  // A block whose units do not divide reports no token loads.
  EXPECT_EQ(wire.blocks(1).unit_tokens_size(), 0);
  EXPECT_EQ(wire.blocks(1).tokens_computed(), 0);
}

}  // namespace
}  // namespace ballast
