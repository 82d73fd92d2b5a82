// StepFeedback: the prior's straggler is probed while the measured step improves and left
// alone once it does not; a probe the planner ignores grows, then is dropped; a calm group
// and a held plan are not probed. Through the decision loop, on workers whose straggler
// is slower than its timers show, the step falls to near the best.
#include "coordinator/step_feedback.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "coordinator/decision_loop.h"
#include "testing/control_plane_messages.h"
#include "testing/fake_clock.h"
#include "testing/fake_policy_store.h"
#include "testing/simulated_job.h"

namespace ballast::coordinator {
namespace {

using ::testing::Contains;
using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const GroupRef kGroup{.key = {"vit", "tp0"}, .incarnation = 1};

// Two ranks, rank 1 the prior's straggler, the workers running plan `version`, the newest
// pushed, at a step of `step` seconds (0: not enough steps under it yet).
StepFeedback::Round Ran(int64_t version, double step) {
  return {.size = 2,
          .straggler = 1,
          .plan_version = version,
          .published_version = version,
          .step_seconds = step};
}

class StepFeedbackTest : public ::testing::Test {
 protected:
  StepFeedback::Correction Update(const StepFeedback::Round& round) {
    return feedback_.Update(kGroup, round, lines_);
  }
  double Factor(const StepFeedback::Round& round) { return Update(round).factors[1]; }

  testing::FakeClock clock_;
  StepFeedbackOptions options_{.probe = 0.25,
                               .min_gain = 0.04,
                               .drift = 0.15,
                               .max_factor = 2,
                               .probe_timeout = absl::Seconds(5),
                               .backoff = absl::Minutes(2)};
  StepFeedback feedback_{&clock_, options_};
  std::vector<std::string> lines_;
};

TEST_F(StepFeedbackTest, ProbesOnWhileTheStepImprovesAndSettlesWhenItDoesNot) {
  EXPECT_EQ(Factor(Ran(1, 0)), 1);
  EXPECT_THAT(lines_.back(), HasSubstr("waiting for steps under the plan in force"));
  // Measured: the first probe at once.
  StepFeedback::Correction c = Update(Ran(1, 0.200));
  EXPECT_THAT(c.factors, ElementsAre(1, 1.25));
  EXPECT_TRUE(c.moved);
  EXPECT_THAT(lines_.back(), HasSubstr("probing: the step is 0.2000 s"));
  // The planner's plan for it (2) runs, but not long enough yet.
  EXPECT_EQ(Factor(Ran(2, 0)), 1.25);
  EXPECT_FALSE(Update(Ran(2, 0)).moved);
  // 10% faster: kept, and the next probe goes on.
  EXPECT_THAT(Factor(Ran(2, 0.180)), DoubleNear(1.5625, 1e-12));
  EXPECT_THAT(lines_.back(), HasSubstr("ran 0.1800 s against 0.2000 s: kept; probing on"));
  // 1% faster: within the noise, the factor goes back and the loop settles (the climb
  // gained, so the way back down is known worse).
  EXPECT_EQ(Factor(Ran(3, 0.178)), 1.25);
  EXPECT_THAT(lines_.back(), HasSubstr("not 4% faster: the factor goes back; settled"));
  // The planner keeps plan 3 (or pushes one like 2, a new version): it is measured afresh
  // and nothing moves.
  EXPECT_FALSE(Update(Ran(3, 0.178)).moved);
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(Factor(Ran(3, 0.179)), 1.25);
  EXPECT_THAT(lines_.back(), HasSubstr("settled at a step of 0.1780 s; next probe in 1m"));
  // After the backoff, a new climb.
  clock_.Advance(absl::Minutes(1));
  EXPECT_THAT(Factor(Ran(3, 0.179)), DoubleNear(1.5625, 1e-12));
}

TEST_F(StepFeedbackTest, AClimbThatGainsNothingTriesDownOnceAndBacksOffLongerEachTime) {
  Update(Ran(1, 0.200));                   // probe to 1.25
  Update(Ran(2, 0.180));                   // kept, probe to 1.5625
  EXPECT_EQ(Factor(Ran(3, 0.181)), 1.25);  // back, settled for 2 minutes
  clock_.Advance(absl::Minutes(2));
  EXPECT_THAT(Factor(Ran(3, 0.180)), DoubleNear(1.5625, 1e-12));  // a new climb
  EXPECT_EQ(Factor(Ran(4, 0.182)), 1);                            // up gained nothing: down once
  EXPECT_THAT(lines_.back(), HasSubstr("probing down"));
  EXPECT_EQ(Factor(Ran(5, 0.190)), 1.25);  // down is worse: back, settled
  EXPECT_THAT(lines_.back(), HasSubstr("settled"));
  // The first climb without a gain waits the backoff, each further one twice as long.
  Update(Ran(5, 0.181));  // measured afresh
  clock_.Advance(absl::Minutes(2) - absl::Seconds(1));
  EXPECT_EQ(Factor(Ran(5, 0.181)), 1.25);
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(Factor(Ran(5, 0.181)), DoubleNear(1.5625, 1e-12));
  EXPECT_EQ(Factor(Ran(6, 0.183)), 1);     // up: nothing; down once
  EXPECT_EQ(Factor(Ran(7, 0.185)), 1.25);  // down: nothing; settled for 4 minutes
  Update(Ran(7, 0.185));
  clock_.Advance(absl::Minutes(4) - absl::Seconds(1));
  EXPECT_EQ(Factor(Ran(7, 0.185)), 1.25);
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(Factor(Ran(7, 0.185)), DoubleNear(1.5625, 1e-12));
}

TEST_F(StepFeedbackTest, AProbeThePlannerDoesNotActOnGrowsThenIsDropped) {
  Update(Ran(1, 0.200));  // probe to 1.25
  clock_.Advance(absl::Seconds(4));
  EXPECT_EQ(Factor(Ran(1, 0.200)), 1.25);
  EXPECT_THAT(lines_.back(), HasSubstr("waiting for the planner's plan"));
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(Factor(Ran(1, 0.200)), DoubleNear(1.5625, 1e-12));
  EXPECT_THAT(lines_.back(), HasSubstr("the planner kept its plan: probing further"));
  clock_.Advance(absl::Seconds(5));
  EXPECT_THAT(Factor(Ran(1, 0.200)), DoubleNear(1.953125, 1e-12));
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(Factor(Ran(1, 0.200)), 2);  // max_factor
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(Factor(Ran(1, 0.200)), 1);
  EXPECT_THAT(lines_.back(), HasSubstr("the probe is dropped"));
}

TEST_F(StepFeedbackTest, NoStragglerOrAHeldPlanIsNotProbed) {
  StepFeedback::Round calm = Ran(1, 0.2);
  calm.straggler = -1;
  EXPECT_THAT(Update(calm).factors, ElementsAre(1, 1));
  EXPECT_THAT(lines_.back(), HasSubstr("no straggler"));
  StepFeedback::Round held = Ran(1, 0.2);
  held.held = true;
  EXPECT_EQ(Factor(held), 1);
  EXPECT_THAT(lines_.back(), HasSubstr("held"));
  EXPECT_EQ(Factor(Ran(1, 0.2)), 1.25) << "probed once neither holds";
}

// A probe kept while a flap hold is on (the planner's own flap, or a hold after the
// probe's plan) probes on once the hold ends, not after the backoff.
TEST_F(StepFeedbackTest, AProbeKeptUnderAHoldProbesOnWhenItEnds) {
  Update(Ran(1, 0.200));  // 1.25
  StepFeedback::Round held = Ran(2, 0.180);
  held.held = true;
  StepFeedback::Correction c = Update(held);
  EXPECT_EQ(c.factors[1], 1.25);
  EXPECT_TRUE(c.news);
  EXPECT_THAT(lines_.back(), HasSubstr("kept; the next probe waits for the hold"));
  EXPECT_FALSE(Update(held).news);
  EXPECT_THAT(Factor(Ran(2, 0.180)), DoubleNear(1.5625, 1e-12));
}

TEST_F(StepFeedbackTest, ANewStragglerOrACalmGroupEndsTheCorrection) {
  Update(Ran(1, 0.200));
  Update(Ran(2, 0.180));  // 1.5625
  StepFeedback::Round other = Ran(2, 0.180);
  other.straggler = 0;
  StepFeedback::Correction c = Update(other);
  EXPECT_TRUE(c.moved);
  EXPECT_THAT(lines_[lines_.size() - 2], HasSubstr("rank 1 is no longer judged the straggler"));
  EXPECT_THAT(c.factors, ElementsAre(1.25, 1)) << "rank 0 is probed afresh";
  StepFeedback::Round calm = Ran(2, 0.180);
  calm.straggler = -1;
  EXPECT_THAT(Update(calm).factors, ElementsAre(1, 1));
  // A new incarnation starts afresh too.
  Update(Ran(2, 0.180));
  const GroupRef again{.key = kGroup.key, .incarnation = 2};
  EXPECT_THAT(feedback_.Update(again, Ran(1, 0), lines_).factors, ElementsAre(1, 1));
}

// A straggler that looks calm for a few rounds (a quota straggler relieved of units
// does) keeps its correction and its backoff; a new straggler inherits the backoff, so
// a target that comes and goes buys no probe each time.
TEST_F(StepFeedbackTest, AStragglerThatComesAndGoesKeepsItsStateAndBackoff) {
  Update(Ran(1, 0.200));                   // 1.25
  Update(Ran(2, 0.180));                   // kept, 1.5625
  EXPECT_EQ(Factor(Ran(3, 0.179)), 1.25);  // back, settled for 2 minutes
  StepFeedback::Round calm = Ran(4, 0.150);
  calm.straggler = -1;
  EXPECT_THAT(Update(calm).factors, ElementsAre(1, 1));
  EXPECT_THAT(lines_.back(), HasSubstr("rank 1's correction is kept for its return"));
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(Factor(Ran(5, 0.180)), 1.25) << "back: corrected, measured afresh, no probe";
  EXPECT_THAT(lines_.back(), HasSubstr("settled at a step of 0.1800 s"));
  // Rank 0 takes over: a fresh factor, but the backoff stands.
  StepFeedback::Round other = Ran(5, 0.180);
  other.straggler = 0;
  EXPECT_THAT(Update(other).factors, ElementsAre(1, 1));
  EXPECT_THAT(lines_.back(), HasSubstr("next probe in 1m50s"));
  // Calm past 30 s: forgotten.
  calm.plan_version = calm.published_version = 6;
  Update(calm);
  clock_.Advance(absl::Seconds(31));
  Update(calm);
  EXPECT_THAT(lines_.back(), HasSubstr("no straggler, nothing to correct"));
}

// A probe is answered by a plan published after it; the workers may take a while to run
// it (no timeout meanwhile). An operator's hold before any answer drops the probe.
TEST_F(StepFeedbackTest, AProbeWaitsForTheWorkersAndAHoldDropsAnUnansweredOne) {
  Update(Ran(1, 0.200));  // 1.25
  StepFeedback::Round pushed = Ran(1, 0.200);
  pushed.published_version = 2;  // the planner answered; the workers still run 1
  clock_.Advance(absl::Seconds(20));
  EXPECT_EQ(Factor(pushed), 1.25);
  EXPECT_THAT(lines_.back(), HasSubstr("waiting for the workers to run its plan"));
  EXPECT_THAT(Factor(Ran(2, 0.180)), DoubleNear(1.5625, 1e-12)) << "judged: kept";
  StepFeedback::Round held = Ran(2, 0.180);
  held.held = true;
  EXPECT_EQ(Factor(held), 1.25);
  EXPECT_THAT(lines_.back(), HasSubstr("the plan is held: the probe is dropped"));
}

TEST_F(StepFeedbackTest, AStepThatDriftsUnderTheSamePlanReArmsTheProbes) {
  Update(Ran(1, 0.200));
  EXPECT_EQ(Factor(Ran(2, 0.199)), 1);  // nothing gained: back (no way down), settled
  Update(Ran(2, 0.200));
  EXPECT_EQ(Factor(Ran(2, 0.220)), 1) << "10% is within the drift";
  EXPECT_EQ(Factor(Ran(2, 0.240)), 1.25) << "20% is not: probed at once";
  EXPECT_THAT(lines_[lines_.size() - 2], HasSubstr("moved from 0.2000 s to 0.2400 s"));
}

// A probe whose plan ran slower than the plan before it by min_gain or more takes that
// plan back too (Correction::undo: no hysteresis keeps it); one within the noise leaves
// the plan to the planner.
TEST_F(StepFeedbackTest, AProbeMeasuredWorseTakesItsPlanBack) {
  EXPECT_FALSE(Update(Ran(1, 0.200)).undo);  // probe to 1.25
  StepFeedback::Correction c = Update(Ran(2, 0.240));
  EXPECT_EQ(c.factors[1], 1);
  EXPECT_TRUE(c.undo);
  EXPECT_THAT(lines_.back(),
              HasSubstr("the factor goes back, and no hysteresis keeps the probe's"));
  EXPECT_FALSE(Update(Ran(3, 0.200)).undo) << "said once, for the round that judged it";

  StepFeedback other(&clock_, options_);
  const GroupRef group{.key = {"vit", "tp1"}, .incarnation = 1};
  other.Update(group, Ran(1, 0.200), lines_);
  c = other.Update(group, Ran(2, 0.205), lines_);  // 2.5% slower: within the noise
  EXPECT_EQ(c.factors[1], 1);
  EXPECT_FALSE(c.undo);
  EXPECT_THAT(lines_.back(), Not(HasSubstr("no hysteresis")));
}

TEST(StepFeedbackOptionsTest, BadOptionsNameTheField) {
  EXPECT_THAT(ValidateStepFeedbackOptions({.probe = 0}).message(), HasSubstr("probe 0"));
  EXPECT_THAT(ValidateStepFeedbackOptions({.min_gain = 1}).message(), HasSubstr("min_gain 1"));
  EXPECT_THAT(ValidateStepFeedbackOptions({.drift = 0}).message(), HasSubstr("drift 0"));
  EXPECT_THAT(ValidateStepFeedbackOptions({.max_factor = 0.5}).message(),
              HasSubstr("max_factor 0.5"));
  EXPECT_THAT(ValidateStepFeedbackOptions({.min_steps = 0}).message(), HasSubstr("min_steps 0"));
  EXPECT_THAT(ValidateStepFeedbackOptions({.probe_timeout = absl::ZeroDuration()}).message(),
              HasSubstr("probe_timeout 0"));
  EXPECT_TRUE(ValidateStepFeedbackOptions({}).ok());
}

// Through the decision loop. 32 units, 16 a rank. Rank 1's timers say 1.5 ms a unit
// against rank 0's 1 ms, but each of its units costs it 2.4 ms of the step (a quota
// throttles it in its collectives too). Balanced by the timers it keeps 13 units, a
// 33.2 ms step; the best is 9 (25 ms).
using LoopResult = testing::SimulatedJobResult;

LoopResult RunLoop(bool feedback, double straggler_seconds_per_unit = 2.4e-3,
                   double hysteresis = 0.05) {
  DecisionLoopOptions options;
  options.dwell.plan_dwell = absl::Milliseconds(500);
  if (feedback) {
    options.step_feedback = StepFeedbackOptions{
        .min_steps = 8, .probe_timeout = absl::Seconds(2), .backoff = absl::Minutes(2)};
  }
  JobPolicy policy;
  policy.mode = BalanceMode::kMigrate;
  policy.report_period = absl::Milliseconds(100);
  policy.hysteresis = hysteresis;
  return testing::RunSimulatedJob(options, policy, [&](const testing::SimulatedStepIn& in) {
    const double busy[2] = {in.units[0] * 1e-3, in.units[1] * straggler_seconds_per_unit};
    return testing::SimulatedStepCost{.compute = {in.units[0] * 1e-3, in.units[1] * 1.5e-3},
                                      .wall = std::max(busy[0], busy[1]) + 2e-3};
  });
}

TEST(StepFeedbackLoopTest, TheLoopMovesMoreOffAStragglerSlowerThanItsTimersShow) {
  const LoopResult timers = RunLoop(/*feedback=*/false);
  EXPECT_EQ(timers.straggler_units, 13);
  EXPECT_NEAR(timers.step, 0.0332, 1e-4);
  // The probes take it to 11, 9 (both kept), then 8 (26 ms: not kept; the factor goes
  // back, and the planner may keep 8 units, which its hysteresis tells from 9 no better
  // than the step did).
  const LoopResult closed = RunLoop(/*feedback=*/true);
  EXPECT_GE(closed.straggler_units, 8);
  EXPECT_LE(closed.straggler_units, 10);
  EXPECT_LE(closed.step, 1.05 * 0.025) << "within 5% of the best";
  EXPECT_LE(closed.plans, timers.plans + 8) << "a probe or two a gain, then settled";
  EXPECT_THAT(closed.why, Contains(HasSubstr("step feedback: rank 1's seconds per unit")));
}

// A slower device: rank 1's units cost it what its timers say (1.5 ms), so the timers'
// plan (13 units, a 21.5 ms step) is the best, and a probe can only lose. With a job
// hysteresis of 10% the probe's plan (11 units: 23 ms, 7% slower) would be kept once the
// factor went back (the timers' plan predicts 19.5 ms against its 21 ms: 7.1% better,
// short of 10%); measured slower, it is taken back, and the loop settles on the timers'
// plan.
TEST(StepFeedbackLoopTest, UnderASlowerDeviceAFailedProbesPlanIsTakenBack) {
  const LoopResult timers = RunLoop(/*feedback=*/false, 1.5e-3, /*hysteresis=*/0.1);
  EXPECT_EQ(timers.straggler_units, 13);
  EXPECT_NEAR(timers.step, 0.0215, 1e-4);
  const LoopResult closed = RunLoop(/*feedback=*/true, 1.5e-3, /*hysteresis=*/0.1);
  EXPECT_EQ(closed.straggler_units, 13);
  EXPECT_NEAR(closed.step, timers.step, 1e-9);
  EXPECT_LE(closed.plans, timers.plans + 4) << "a probe and its way back, then settled";
}

}  // namespace
}  // namespace ballast::coordinator
