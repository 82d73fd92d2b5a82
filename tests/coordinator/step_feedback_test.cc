// StepFeedback: a rank the others wait for is corrected, the correction kept while the step
// improves and undone when it rises; noise and unsettled plans change nothing.
#include "coordinator/step_feedback.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include "coordinator/decision_loop.h"
#include "testing/control_plane_messages.h"
#include "testing/fake_clock.h"
#include "testing/fake_policy_store.h"

namespace ballast::coordinator {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const GroupRef kGroup{.key = {"vit", "tp0"}, .incarnation = 1};

// Two ranks computing 100 ms a step each; rank 1 is `late` seconds late at the collectives
// (rank 0 waits that much longer), and the step takes `step`.
StepFeedback::Round Late(double late, double step, int64_t version) {
  return {.compute_seconds = {0.1, 0.1},
          .collective_seconds = {0.02 + late, 0.02},
          .step_seconds = step,
          .plan_version = version};
}

TEST(StepFeedbackTest, ALateRankIsCorrectedOnceThePlanHasSettled) {
  StepFeedback feedback({.gain = 0.5, .deadband = 0.05, .settle_rounds = 2});
  std::vector<std::string> lines;
  // A new plan's first rounds are not judged.
  EXPECT_THAT(feedback.Update(kGroup, Late(0.04, 0.16, 7), lines), ElementsAre(1, 1));
  EXPECT_THAT(feedback.Update(kGroup, Late(0.04, 0.16, 7), lines), ElementsAre(1, 1));
  EXPECT_THAT(lines.back(), HasSubstr("waiting for steps under the plan in force"));
  // Rank 1 is 40 ms late over 100 ms of compute: x(1 + 0.5 x 0.4).
  EXPECT_THAT(feedback.Update(kGroup, Late(0.04, 0.16, 7), lines),
              ElementsAre(1, DoubleNear(1.2, 1e-12)));
  EXPECT_THAT(lines.back(), HasSubstr("rank 1 is 0.0400 s late at the collectives"));
  EXPECT_THAT(lines.back(), HasSubstr("rank 1 x1.200"));
}

TEST(StepFeedbackTest, ACorrectionIsKeptWhileTheStepImprovesAndUndoneWhenItRises) {
  StepFeedback feedback({.gain = 0.5, .deadband = 0.05, .settle_rounds = 1, .backoff_rounds = 2});
  std::vector<std::string> lines;
  feedback.Update(kGroup, Late(0.04, 0.16, 1), lines);  // settling
  EXPECT_THAT(feedback.Update(kGroup, Late(0.04, 0.16, 1), lines),
              ElementsAre(1, DoubleNear(1.2, 1e-12)));
  // The planner pushed plan 2 for it; the step fell, rank 1 is still a little late.
  feedback.Update(kGroup, Late(0.02, 0.14, 2), lines);  // settling
  EXPECT_THAT(feedback.Update(kGroup, Late(0.02, 0.14, 2), lines),
              ElementsAre(1, DoubleNear(1.2 * 1.1, 1e-12)));
  EXPECT_THAT(lines[lines.size() - 2], HasSubstr("from 0.1600 s to 0.1400 s after the last "
                                                 "correction: kept"));
  // Plan 3 overshoots: rank 0 is now the late one and the step rose. Undone, then none
  // for two rounds.
  feedback.Update(kGroup, Late(0, 0.16, 3), lines);
  std::vector<double> undone = feedback.Update(kGroup,
                                               {.compute_seconds = {0.1, 0.1},
                                                .collective_seconds = {0.02, 0.05},
                                                .step_seconds = 0.16,
                                                .plan_version = 3},
                                               lines);
  EXPECT_THAT(undone, ElementsAre(1, DoubleNear(1.2, 1e-12)));
  EXPECT_THAT(lines.back(), HasSubstr("rose from 0.1400 s to 0.1600 s"));
  EXPECT_THAT(feedback.Update(kGroup, Late(0.04, 0.16, 3), lines),
              ElementsAre(1, DoubleNear(1.2, 1e-12)));
  EXPECT_THAT(feedback.Update(kGroup, Late(0.04, 0.16, 3), lines),
              ElementsAre(1, DoubleNear(1.2, 1e-12)));
  EXPECT_THAT(lines.back(), HasSubstr("backing off"));
  EXPECT_THAT(feedback.Update(kGroup, Late(0.04, 0.16, 3), lines),
              ElementsAre(1, DoubleNear(1.44, 1e-12)));
}

TEST(StepFeedbackTest, LatenessWithinTheDeadbandChangesNothing) {
  StepFeedback feedback({.deadband = 0.05, .settle_rounds = 1});
  std::vector<std::string> lines;
  for (int round = 0; round < 10; ++round) {
    // 7 ms late in a 160 ms step: under 5%.
    EXPECT_THAT(feedback.Update(kGroup, Late(0.007, 0.16, 4), lines), ElementsAre(1, 1));
  }
  EXPECT_THAT(lines.back(), HasSubstr("balanced"));
  // Nothing measured yet: nothing changes either.
  EXPECT_THAT(feedback.Update(kGroup,
                              {.compute_seconds = {0.1, 0.1},
                               .collective_seconds = {0.2, -1},
                               .step_seconds = 0.3,
                               .plan_version = 4},
                              lines),
              ElementsAre(1, 1));
}

TEST(StepFeedbackTest, FactorsAreBoundedAndRelativeAndANewIncarnationStartsAfresh) {
  StepFeedback feedback(
      {.gain = 1, .deadband = 0, .max_factor = 2, .settle_rounds = 1, .backoff_rounds = 0});
  std::vector<std::string> lines;
  std::vector<double> f;
  for (int64_t version = 1; version < 8; ++version) {
    feedback.Update(kGroup, Late(0.1, 0.2, version), lines);
    f = feedback.Update(kGroup, Late(0.1, 0.2, version), lines);
  }
  EXPECT_THAT(f, ElementsAre(1, 2));
  const GroupRef again{.key = kGroup.key, .incarnation = 2};
  EXPECT_THAT(feedback.Update(again, Late(0.1, 0.2, 1), lines), ElementsAre(1, 1));
}

TEST(StepFeedbackTest, BadOptionsNameTheField) {
  EXPECT_THAT(ValidateStepFeedbackOptions({.gain = 0}).message(), HasSubstr("gain 0"));
  EXPECT_THAT(ValidateStepFeedbackOptions({.deadband = 1}).message(), HasSubstr("deadband 1"));
  EXPECT_THAT(ValidateStepFeedbackOptions({.max_factor = 0.5}).message(),
              HasSubstr("max_factor 0.5"));
  EXPECT_THAT(ValidateStepFeedbackOptions({.settle_rounds = 0}).message(),
              HasSubstr("settle_rounds 0"));
  EXPECT_TRUE(ValidateStepFeedbackOptions({}).ok());
}

// Through the decision loop: rank 1's compute timers match rank 0's, but rank 0 waits 5 ms
// a step for it at the collectives. Without feedback the group is calm and stays
// all-local; with it, rank 1's speed is corrected and some of its units are offloaded.
class NullSink final : public AgentSink {
 public:
  void Send(const v1::CoordinatorMessage& m) override {
    if (m.has_plan()) plans.push_back(m.plan().plan());
  }
  std::vector<v1::WorkloadPlan> plans;
};

std::vector<v1::WorkloadPlan> RunLoop(bool feedback) {
  testing::FakeClock clock;
  testing::InMemoryPolicyStore store;
  std::unique_ptr<SpeedModel> speeds = *SpeedModel::Create(SpeedModelOptions{}, &clock);
  std::unique_ptr<JobSettings> settings = *JobSettings::Load(&store, &clock);
  GroupRegistry registry(RegistryOptions{}, &clock, speeds.get());
  StragglerJudge judge(&clock, absl::Seconds(3));
  DecisionLoopOptions options;
  if (feedback) options.step_feedback = StepFeedbackOptions{.settle_rounds = 1};
  DecisionLoop loop(options, &clock, &registry, &judge, settings.get(), speeds.get());
  JobPolicy policy;
  policy.mode = BalanceMode::kMigrate;
  policy.report_period = absl::Milliseconds(100);
  EXPECT_TRUE(settings->SetPolicy("vit", policy).ok());
  const testing::GroupSpec spec;
  NullSink sink;
  EXPECT_TRUE(registry.AgentConnected(testing::GroupHello(spec), &sink).ok());
  for (int64_t step = 0; step < 20; ++step) {
    for (int32_t rank : {0, 1}) {
      v1::WorkerReport r = testing::StepReport(spec, rank, step, 4, 4e-3);
      r.mutable_step()->mutable_blocks(0)->set_comm_seconds(rank == 0 ? 6e-3 : 1e-3);
      EXPECT_TRUE(registry.Report("agent-1", r).ok());
    }
    clock.Advance(absl::Milliseconds(100));
    loop.Tick();
  }
  return sink.plans;
}

TEST(StepFeedbackLoopTest, TheLoopOffloadsARankTheOthersWaitFor) {
  EXPECT_TRUE(RunLoop(/*feedback=*/false).empty()) << "calm by the timers: all-local";
  std::vector<v1::WorkloadPlan> plans = RunLoop(/*feedback=*/true);
  ASSERT_FALSE(plans.empty());
  ASSERT_EQ(plans[0].blocks_size(), 1);
  ASSERT_GE(plans[0].blocks(0).offloads_size(), 1);
  EXPECT_EQ(plans[0].blocks(0).offloads(0).owner(), 1);
}

}  // namespace
}  // namespace ballast::coordinator
