// DecisionLoop over a real registry, judge and settings on a fake clock: what it decides
// from a snapshot, when a group is due, and that a group forgotten keeps nothing.
#include "coordinator/decision_loop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/coordinator_fixtures.h"

namespace ballast::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Hello;

class DecisionLoopTest : public testing::CoordinatorPartsTest {
 protected:
  DecisionLoopTest() : CoordinatorPartsTest({.forget_after = absl::Seconds(5)}) {}
  void SetUp() override {
    CoordinatorPartsTest::SetUp();
    JobPolicy policy;
    policy.mode = BalanceMode::kMigrate;
    policy.report_period = absl::Milliseconds(100);
    ASSERT_TRUE(settings_->SetPolicy("vit", policy).ok());
  }
  // Both ranks report step `step`: rank 1 at `slow` seconds per unit.
  void Reports(int64_t step, double slow) {
    for (int rank : {0, 1}) {
      const v1::WorkerReport r =
          testing::StepReport({}, rank, step, 4, 4 * (rank == 0 ? 1e-3 : slow));
      ASSERT_TRUE(registry_->Report("agent-1", r).ok());
    }
  }
  DecisionRecord Record() { return loop_->Record(registry_->Groups().at(0)); }
};

TEST_F(DecisionLoopTest, WaitsForEveryRankThenPublishesWhatThePlannerDecides) {
  v1::AgentHello one_rank = Hello({0, 0, 0, 0, 1, 1, 1, 1});
  one_rank.mutable_workers()->RemoveLast();
  ASSERT_TRUE(registry_->AgentConnected(one_rank, &sink_).ok());
  loop_->Tick();
  EXPECT_THAT(Record().reasons.before, ElementsAre("waiting for ranks: 1 of 2 registered"));

  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  for (int64_t step = 0; step < 10 && sink_.plans().empty(); ++step) {
    Reports(step, 3e-3);
    clock_.Advance(absl::Milliseconds(100));
    loop_->Tick();
  }
  ASSERT_EQ(sink_.plans().size(), 1u) << "rank 1 at 3x was not balanced";
  EXPECT_EQ(sink_.plans()[0].number(), 1);
  // Published: the registry holds it as the plan in force, the record says why.
  EXPECT_EQ(registry_->Snapshot({"vit", "tp0"}, false)->plan.number, 1);
  EXPECT_EQ(Record().decisions.size(), 1u);
  EXPECT_GT(loop_->Prediction(*registry_->Snapshot({"vit", "tp0"}, false)).blocks, 0);
  EXPECT_EQ(registry_->counters().plan_changes, 1);
}

TEST_F(DecisionLoopTest, AGroupIsPlannedOncePerReportPeriodOrWhenASettingChanges) {
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  loop_->Tick();
  EXPECT_EQ(loop_->decisions(), 1);
  loop_->Tick();  // no time passed: not due
  EXPECT_EQ(loop_->decisions(), 1);
  loop_->ReplanNow("other-job");
  loop_->Tick();
  EXPECT_EQ(loop_->decisions(), 1);
  loop_->ReplanNow("vit");
  loop_->Tick();
  EXPECT_EQ(loop_->decisions(), 2);
  ASSERT_TRUE(settings_->SetPaused("", true).ok());
  clock_.Advance(absl::Milliseconds(100));
  loop_->Tick();
  EXPECT_EQ(loop_->decisions(), 2);
  EXPECT_THAT(Record().reasons.before, ElementsAre(HasSubstr("balancing paused")));
}

TEST_F(DecisionLoopTest, AForgottenGroupKeepsNothingAndComesBackFresh) {
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  loop_->Tick();
  ASSERT_FALSE(Record().reasons.before.empty());
  registry_->AgentDisconnected("agent-1", &sink_);
  clock_.Advance(absl::Seconds(6));
  EXPECT_TRUE(loop_->Tick());  // forgotten
  EXPECT_TRUE(registry_->Groups().empty());
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  EXPECT_TRUE(Record().reasons.before.empty()) << "the old incarnation's decision shows";
}

// A held group gets its hold's plan before any speed is known, and once every rank has an
// estimate the plan is priced as the planner prices its own.
TEST_F(DecisionLoopTest, AHeldGroupRunsItsHoldAndIsPredictedOnceSpeedsAreKnown) {
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  ASSERT_TRUE(settings_->SetHold("vit", "tp0", GroupHold{.rank = 1, .offload_fraction = 0.5}).ok());
  loop_->Tick();
  ASSERT_EQ(sink_.plans().size(), 1u) << "a hold needs no speeds";
  ASSERT_EQ(sink_.plans()[0].blocks_size(), 1);
  const v1::BlockPlan held = sink_.plans()[0].blocks(0);  // plans() is a copy
  ASSERT_EQ(held.offloads_size(), 1);
  EXPECT_EQ(held.offloads(0).owner(), 1);
  EXPECT_EQ(held.offloads(0).units(), 2);
  EXPECT_EQ(loop_->Prediction(*registry_->Snapshot({"vit", "tp0"}, false)).blocks, 0);
  EXPECT_THAT(Record().reasons.decision.notes, ElementsAre(HasSubstr("held by an operator")));

  // Rank 1 at 3 ms a unit, rank 0 at 1: with 2 of rank 1's 4 units offloaded, each computes
  // 6 ms (and sends or receives 2 units, 2 us each at the link's prior).
  for (int64_t step = 0; step < 10; ++step) {
    Reports(step, 3e-3);
    clock_.Advance(absl::Milliseconds(100));
    loop_->Tick();
  }
  EXPECT_EQ(sink_.plans().size(), 1u) << "the held plan was pushed again";
  EXPECT_NEAR(loop_->Prediction(*registry_->Snapshot({"vit", "tp0"}, false)).blocks, 6e-3, 1e-4);
  EXPECT_THAT(Record().reasons.after, ElementsAre(HasSubstr("predicted for the held plan")));

  // A plan the hold cannot price is said so, and predicts nothing.
  ASSERT_TRUE(settings_->SetCordon("dev1", true, "").ok());
  loop_->ReplanNow("vit");
  loop_->Tick();
  EXPECT_EQ(loop_->Prediction(*registry_->Snapshot({"vit", "tp0"}, false)).blocks, 0);
  EXPECT_THAT(Record().reasons.after, ElementsAre(HasSubstr("the held plan is not priced")));
  ASSERT_TRUE(settings_->SetCordon("dev1", false, "").ok());

  // Released, the planner decides again.
  ASSERT_TRUE(settings_->SetHold("vit", "tp0", std::nullopt).ok());
  loop_->ReplanNow("vit");
  loop_->Tick();
  EXPECT_THAT(Record().reasons.decision.notes,
              ::testing::Not(::testing::Contains(HasSubstr("held"))));
  EXPECT_EQ(Record().decisions.size(), 1u);
}

// A rank whose plan gives every unit away measures no speed. After a coordinator restart
// (a fresh speed model) the loop must not wait for its estimate for ever: it plans it at
// the block's reference speed, and so replaces the plan the workers run.
TEST_F(DecisionLoopTest, ARankThatComputesNothingIsPlannedAtTheReferenceSpeed) {
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  for (int64_t step = 0; step < 10 && sink_.plans().empty(); ++step) {
    for (int rank : {0, 1}) {
      // Rank 1's units all offloaded to rank 0.
      v1::WorkerReport r =
          testing::StepReport({}, rank, step, rank == 0 ? 8 : 0, rank == 0 ? 8e-3 : 0);
      r.mutable_step()->set_plan_version(123);  // an earlier coordinator's plan
      ASSERT_TRUE(registry_->Report("agent-1", r).ok());
    }
    clock_.Advance(absl::Milliseconds(100));
    loop_->Tick();
  }
  ASSERT_EQ(sink_.plans().size(), 1u) << "the loop waited for rank 1's estimate";
  EXPECT_GT(sink_.plans()[0].version(), 123);
  EXPECT_THAT(Record().reasons.before,
              ::testing::Contains(HasSubstr("rank 1 computes no units under the plan it runs")));
}

}  // namespace
}  // namespace ballast::coordinator
