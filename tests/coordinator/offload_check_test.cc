// OffloadCheck: a straggler's offloads measured against the best plan without them, and
// refused where they are no faster; kept where they are; a verdict stands until it is
// checked again, through a change of straggler, not through a long calm; a refusal
// against a reshard holds on its split and once the straggler is chronic; a hold, or a
// probe not judged in time, is dropped. Through the decision loop, on workers whose
// offloads cost the step more than the model prices them, the group ends at plain tensor
// parallelism's step; where offloads pay, at theirs; a cordon drains its rank whatever
// the verdict.
#include "coordinator/offload_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "coordinator/decision_loop.h"
#include "testing/control_plane_messages.h"
#include "testing/fake_clock.h"
#include "testing/fake_policy_store.h"
#include "testing/simulated_job.h"

namespace ballast::coordinator {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

const GroupRef kGroup{.key = {"gpt", "tp0"}, .incarnation = 1};

// Rank 1 the straggler; the workers run plan `version`, the newest pushed, which
// offloads or not, at a step of `step` seconds (0: not enough steps under it yet).
OffloadCheck::Round Ran(int64_t version, bool offloads, double step) {
  return {.straggler = 1,
          .plan_version = version,
          .published_version = version,
          .offloads = offloads,
          .step_seconds = step};
}

class OffloadCheckTest : public ::testing::Test {
 protected:
  // Rank 1 has straggled 10 s: a median of 16 steps of up to 0.6 s is all its own.
  void SetUp() override {
    Update(Ran(0, false, 0));
    clock_.Advance(absl::Seconds(10));
  }
  OffloadCheck::Verdict Update(const OffloadCheck::Round& round) {
    return check_.Update(kGroup, round, lines_);
  }
  // Plan 1 offloads and runs `with` seconds a step; the probe's plan 2 does not, and
  // runs `without`.
  OffloadCheck::Verdict Probe(double with, double without) {
    Update(Ran(1, true, with));
    OffloadCheck::Round pushed = Ran(1, true, with);
    pushed.published_version = 2;
    pushed.offloads = false;
    Update(pushed);
    return Update(Ran(2, false, without));
  }

  testing::FakeClock clock_;
  OffloadCheckOptions options_{.min_steps = 16,
                               .min_gain = 0.03,
                               .probe_timeout = absl::Seconds(20),
                               .recheck_after = absl::Minutes(5)};
  OffloadCheck check_{&clock_, options_};
  std::vector<std::string> lines_;
};

TEST_F(OffloadCheckTest, OffloadsNoFasterThanWithoutAreRefusedUntilCheckedAgain) {
  OffloadCheck::Verdict v = Update(Ran(1, true, 0));
  EXPECT_FALSE(v.refuse);
  EXPECT_THAT(lines_.back(), HasSubstr("waiting for 16 steps of every rank under the plan that"));
  // Measured: offloads refused, and the plan that offloads must go.
  v = Update(Ran(1, true, 0.45));
  EXPECT_TRUE(v.refuse);
  EXPECT_TRUE(v.undo);
  EXPECT_TRUE(v.changed);
  EXPECT_THAT(lines_.back(), HasSubstr("offloads ran 0.4500 s a step: probing"));
  v = Update(Ran(1, true, 0.45));  // the round planned nothing (a block without estimates)
  EXPECT_TRUE(v.refuse);
  EXPECT_TRUE(v.undo) << "still pushed: still to go";
  EXPECT_FALSE(v.changed);
  EXPECT_THAT(lines_.back(), HasSubstr("waiting for the planner's plan without offloads"));
  OffloadCheck::Round pushed = Ran(1, true, 0.45);
  pushed.published_version = 2;
  pushed.offloads = false;
  v = Update(pushed);
  EXPECT_TRUE(v.refuse);
  EXPECT_FALSE(v.undo);
  EXPECT_THAT(lines_.back(), HasSubstr("steps of every rank under the plan without offloads"));
  EXPECT_TRUE(Update(Ran(2, false, 0)).refuse);
  // 0.45 s against 0.44 s: not 3% faster.
  v = Update(Ran(2, false, 0.44));
  EXPECT_TRUE(v.refuse);
  EXPECT_FALSE(v.changed);
  EXPECT_THAT(lines_.back(), HasSubstr("offloads ran 0.4500 s a step against 0.4400 s without "
                                       "them, not 3% faster: offloads refused"));
  clock_.Advance(absl::Minutes(4));
  v = Update(Ran(2, false, 0.44));
  EXPECT_TRUE(v.refuse);
  EXPECT_THAT(lines_.back(), HasSubstr("refused: offloads ran 0.4500 s"));
  EXPECT_THAT(lines_.back(), HasSubstr("checked again in 1m"));
  // Checked again: allowed, and the planner's next plan that offloads is measured anew.
  clock_.Advance(absl::Minutes(1));
  v = Update(Ran(2, false, 0.44));
  EXPECT_FALSE(v.refuse);
  EXPECT_TRUE(v.changed);
  EXPECT_THAT(lines_.back(), HasSubstr("no offloads pushed, nothing to check"));
  EXPECT_FALSE(Update(Ran(3, true, 0)).refuse);
  // Judged against the plan without offloads that ran until the recheck: no probe.
  v = Update(Ran(3, true, 0.42));
  EXPECT_FALSE(v.refuse);
  EXPECT_FALSE(v.probing);
  EXPECT_THAT(lines_.back(), HasSubstr("offloads ran 0.4200 s a step against 0.4400 s without "
                                       "them (measured 0s before): offloads allowed"));
}

TEST_F(OffloadCheckTest, OffloadsThatPayAreKeptUntilCheckedAgain) {
  OffloadCheck::Verdict v = Probe(0.30, 0.40);
  EXPECT_FALSE(v.refuse);
  EXPECT_TRUE(v.changed) << "the planner offloads again";
  EXPECT_TRUE(v.undo) << "without hysteresis: the dwell would hold the probe's plan";
  EXPECT_FALSE(v.probing);
  EXPECT_THAT(lines_.back(), HasSubstr("offloads ran 0.3000 s a step against 0.4000 s without "
                                       "them: offloads allowed"));
  // The planner's next plans are not probed until the verdict is checked again.
  for (int64_t version : {3, 4}) {
    v = Update(Ran(version, true, 0.31));
    EXPECT_FALSE(v.refuse);
    EXPECT_FALSE(v.changed);
  }
  clock_.Advance(absl::Minutes(5));
  EXPECT_TRUE(Update(Ran(4, true, 0.31)).refuse) << "checked again";
}

TEST_F(OffloadCheckTest, TheVerdictOutlivesANewStragglerNotALongCalm) {
  ASSERT_TRUE(Probe(0.45, 0.40).refuse);
  OffloadCheck::Round calm = Ran(2, false, 0.40);
  calm.straggler = -1;
  EXPECT_TRUE(Update(calm).refuse) << "kept for its return";
  EXPECT_THAT(lines_.back(), HasSubstr("rank 1's verdict is kept for its return"));
  clock_.Advance(absl::Seconds(29));
  EXPECT_TRUE(Update(calm).refuse);
  EXPECT_TRUE(Update(Ran(2, false, 0.40)).refuse) << "back: refused still";
  clock_.Advance(absl::Seconds(1));
  Update(calm);
  clock_.Advance(OffloadCheck::kAbsentFor);
  OffloadCheck::Verdict v = Update(calm);
  EXPECT_FALSE(v.refuse);
  EXPECT_TRUE(v.changed);
  EXPECT_THAT(lines_.back(), HasSubstr("rank 1 not straggling for 30s: its check ends"));

  Update(Ran(2, false, 0));  // rank 1 again, for long enough
  clock_.Advance(absl::Seconds(10));
  // Two stragglers that swap places buy no probe each time: the verdict is the group's.
  ASSERT_TRUE(Probe(0.45, 0.40).refuse);
  OffloadCheck::Round other = Ran(2, false, 0.40);
  other.straggler = 0;
  v = Update(other);
  EXPECT_TRUE(v.refuse);
  EXPECT_FALSE(v.changed);
  EXPECT_THAT(lines_,
              Contains(HasSubstr("rank 0 is the straggler now, not rank 1: the verdict stands")));
}

// The probe's best plan without offloads resharded (a chronic straggler): the offloads
// lost to the reshard, not to no offloads on their own split. Back there (the units given
// back, the straggler returning), on another split, or for another straggler, offloads
// are allowed until it is chronic; for the straggler on the reshard's split, refused.
TEST_F(OffloadCheckTest, ARefusalAgainstAReshardHoldsOnItsSplitAndOnceChronic) {
  constexpr uint64_t kEven = 1, kResharded = 2, kOther = 3;
  auto on = [](OffloadCheck::Round round, uint64_t ownership, int32_t straggler = 1,
               bool chronic = false) {
    round.ownership = ownership;
    round.straggler = straggler;
    round.chronic = chronic;
    return round;
  };
  Update(on(Ran(1, true, 0.45), kEven));
  OffloadCheck::Round pushed = on(Ran(1, true, 0.45), kResharded);
  pushed.published_version = 2;
  pushed.offloads = false;
  ASSERT_TRUE(Update(pushed).refuse);
  OffloadCheck::Verdict v = Update(on(Ran(2, false, 0.40), kResharded));
  ASSERT_TRUE(v.refuse);
  EXPECT_TRUE(Update(on(Ran(2, false, 0.40), kResharded)).refuse) << "on the reshard";
  EXPECT_TRUE(Update(on(Ran(2, false, 0.40), kResharded, -1)).refuse) << "kept for its return";
  // The units back on the even split, where the straggler returns.
  v = Update(on(Ran(3, false, 0.40), kEven, -1));
  EXPECT_FALSE(v.refuse);
  EXPECT_TRUE(v.changed);
  v = Update(on(Ran(3, false, 0.50), kEven));
  EXPECT_FALSE(v.refuse);
  EXPECT_THAT(lines_.back(),
              HasSubstr("allowed here: refused against rank 1's reshard (offloads ran 0.4500 s "
                        "a step against 0.4000 s without them, not 3% faster), which holds for "
                        "it on that split and for any straggler once chronic, not here before; "
                        "checked again in 5m"));
  // Offloads there are not probed again while the verdict stands.
  v = Update(on(Ran(4, true, 0.45), kEven));
  EXPECT_FALSE(v.refuse);
  EXPECT_FALSE(v.probing);
  EXPECT_FALSE(v.undo);
  // Chronic, the straggler can be resharded again, as the plan that beat them was.
  v = Update(on(Ran(4, true, 0.45), kEven, 1, /*chronic=*/true));
  EXPECT_TRUE(v.refuse);
  EXPECT_TRUE(v.undo);
  EXPECT_THAT(lines_.back(), HasSubstr("refused: offloads ran 0.4500 s"));
  // Another split (another rank's reshard): allowed until the straggler is chronic.
  v = Update(on(Ran(5, false, 0.40), kOther));
  EXPECT_FALSE(v.refuse);
  EXPECT_TRUE(v.changed);
  EXPECT_TRUE(Update(on(Ran(5, false, 0.40), kOther, 1, /*chronic=*/true)).refuse);
  // On the reshard's split, refused before it is chronic too...
  v = Update(on(Ran(6, true, 0.40), kResharded));
  EXPECT_TRUE(v.refuse);
  EXPECT_TRUE(v.undo);
  EXPECT_THAT(lines_.back(), HasSubstr("refused: offloads ran 0.4500 s"));
  // ... for the straggler it relieved, not for another, which it did not.
  v = Update(on(Ran(7, false, 0.50), kResharded, 0));
  EXPECT_FALSE(v.refuse);
  EXPECT_THAT(lines_.back(), HasSubstr("allowed here: refused against rank 1's reshard"));
  EXPECT_TRUE(Update(on(Ran(7, false, 0.50), kResharded, 0, /*chronic=*/true)).refuse);
}

// Measured against a plan without offloads on their own split, a refusal holds there and
// on any other split, chronic or not.
TEST_F(OffloadCheckTest, ARefusalOnTheOffloadsOwnSplitHoldsThere) {
  OffloadCheck::Round offloading = Ran(1, true, 0.45);
  offloading.ownership = 7;
  Update(offloading);
  OffloadCheck::Round pushed = offloading;
  pushed.published_version = 2;
  pushed.offloads = false;
  Update(pushed);
  OffloadCheck::Round without = Ran(2, false, 0.44);
  without.ownership = 7;
  ASSERT_TRUE(Update(without).refuse);
  OffloadCheck::Round again = Ran(3, true, 0.45);
  again.ownership = 7;
  OffloadCheck::Verdict v = Update(again);
  EXPECT_TRUE(v.refuse);
  EXPECT_TRUE(v.undo);
  OffloadCheck::Round elsewhere = Ran(4, true, 0.45);
  elsewhere.ownership = 8;
  v = Update(elsewhere);
  EXPECT_TRUE(v.refuse);
  EXPECT_TRUE(v.undo);
}

TEST_F(OffloadCheckTest, AHoldMeasuresNothingAndDropsAProbe) {
  OffloadCheck::Round held = Ran(1, true, 0.45);
  held.held = true;
  EXPECT_FALSE(Update(held).refuse);
  EXPECT_THAT(lines_.back(), HasSubstr("the plan is held or a rank cordoned: no check"));
  OffloadCheck::Verdict v = Update(Ran(1, true, 0.45));  // released: measured, probing
  ASSERT_TRUE(v.refuse);
  EXPECT_TRUE(v.probing);
  held.published_version = 5;
  v = Update(held);
  EXPECT_FALSE(v.refuse);
  EXPECT_TRUE(v.changed);
  EXPECT_FALSE(v.probing);
  EXPECT_THAT(lines_.back(),
              HasSubstr("the plan is held or a rank cordoned: the probe is dropped"));
}

// The planner kept its plan (one that offloads), or its plan without offloads never ran
// 16 steps before the next change: either way the probe ends, offloads allowed.
// A plan without offloads measured a moment before, on the same split and all under this
// straggler (plain TP held by an operator, here), is what offloads are judged against:
// no probe. Not once it is older than a minute, or on another split, or measured over
// steps from before the straggler.
TEST_F(OffloadCheckTest, AStepMeasuredWithoutOffloadsJustBeforeSparesTheProbe) {
  OffloadCheck::Round plain = Ran(1, false, 0.40);
  plain.held = true;
  OffloadCheck fresh(&clock_, options_);
  fresh.Update(kGroup, plain,
               lines_);  // the straggler is first seen: its median is of steps before it
  clock_.Advance(absl::Seconds(6));
  fresh.Update(kGroup, plain, lines_);
  clock_.Advance(absl::Seconds(2));
  OffloadCheck::Verdict v = fresh.Update(kGroup, Ran(2, true, 0.45), lines_);
  EXPECT_TRUE(v.probing) << "the median of 0.40 s was partly from before the straggler";

  OffloadCheck check(&clock_, options_);
  auto update = [&](const OffloadCheck::Round& round) {
    return check.Update(kGroup, round, lines_);
  };
  update(plain);
  clock_.Advance(absl::Seconds(7));  // 16 steps of 0.40 s: all the straggler's
  update(plain);
  update(Ran(2, true, 0));
  clock_.Advance(absl::Seconds(8));
  v = update(Ran(2, true, 0.45));
  EXPECT_TRUE(v.refuse);
  EXPECT_FALSE(v.probing);
  EXPECT_TRUE(v.undo);
  EXPECT_THAT(lines_.back(), HasSubstr("offloads ran 0.4500 s a step against 0.4000 s without "
                                       "them (measured 8s before), not 3% faster: offloads "
                                       "refused"));
  // Rechecked after 5 minutes: the plan without offloads ran until then.
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Minutes(1));
    update(Ran(3, false, 0.40));
  }
  clock_.Advance(absl::Seconds(1));
  EXPECT_FALSE(update(Ran(3, false, 0.40)).refuse) << "checked again";
  v = update(Ran(4, true, 0.30));
  EXPECT_FALSE(v.refuse);
  EXPECT_FALSE(v.probing);
  EXPECT_THAT(lines_.back(), HasSubstr("against 0.4000 s without them (measured 0s before): "
                                       "offloads allowed"));

  // Too old, or on another split: a probe.
  OffloadCheck stale(&clock_, options_);
  stale.Update(kGroup, plain, lines_);
  clock_.Advance(absl::Seconds(7));
  stale.Update(kGroup, plain, lines_);
  clock_.Advance(absl::Seconds(61));
  EXPECT_TRUE(stale.Update(kGroup, Ran(2, true, 0.45), lines_).probing);
  OffloadCheck::Round moved = Ran(3, true, 0.45);
  moved.ownership = 7;
  OffloadCheck other(&clock_, options_);
  other.Update(kGroup, plain, lines_);
  clock_.Advance(absl::Seconds(7));
  other.Update(kGroup, plain, lines_);
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(other.Update(kGroup, moved, lines_).probing);
}

// Every step of a median judged (with offloads or without) ran while the target
// straggled: not before it was first judged the straggler, not before it came back from a
// calm spell, not another straggler's, and under the plan the workers run.
TEST_F(OffloadCheckTest, OnlyStepsAllRunUnderTheStragglerAreJudged) {
  OffloadCheck first(&clock_, options_);
  OffloadCheck::Verdict v = first.Update(kGroup, Ran(1, true, 0.45), lines_);  // judged now
  EXPECT_FALSE(v.probing);
  EXPECT_THAT(lines_.back(), HasSubstr("waiting for 16 steps"));
  clock_.Advance(absl::Seconds(8));  // 16 steps of 0.45 s
  EXPECT_TRUE(first.Update(kGroup, Ran(1, true, 0.45), lines_).probing);

  // Without offloads: under a plan the workers do not run yet, another straggler's, or
  // from before a calm spell: no step to compare with, so a probe. Back from another
  // straggler, the plan that offloads waits for 16 steps all its own.
  auto after = [&](const std::vector<OffloadCheck::Round>& rounds) {
    OffloadCheck check(&clock_, options_);
    for (const OffloadCheck::Round& round : rounds) {
      check.Update(kGroup, round, lines_);
      clock_.Advance(absl::Seconds(8));
    }
    check.Update(kGroup, Ran(9, true, 0.45), lines_);
    return lines_.back();
  };
  const std::string probe = "probing the best plan without them";
  OffloadCheck::Round plain = Ran(1, false, 0.40);
  EXPECT_THAT(after({plain, plain}), HasSubstr("(measured 8s before), not 3% faster"));
  OffloadCheck::Round lagging = plain;
  lagging.published_version = 2;
  EXPECT_THAT(after({lagging, lagging}), HasSubstr(probe));
  OffloadCheck::Round other = plain;
  other.straggler = 0;
  EXPECT_THAT(after({other, other, plain}), HasSubstr(probe));
  EXPECT_THAT(after({plain, plain, other}), HasSubstr("waiting for 16 steps"));
  OffloadCheck::Round calm = plain;
  calm.straggler = -1;
  EXPECT_THAT(after({plain, plain, calm, plain}), HasSubstr(probe));
}

TEST_F(OffloadCheckTest, AProbeNotJudgedInTimeIsDropped) {
  ASSERT_TRUE(Update(Ran(1, true, 0.45)).refuse);
  clock_.Advance(absl::Seconds(19));
  EXPECT_TRUE(Update(Ran(1, true, 0.45)).refuse);
  EXPECT_THAT(lines_.back(), HasSubstr("waiting for the planner's plan without offloads"));
  clock_.Advance(absl::Seconds(1));
  EXPECT_FALSE(Update(Ran(1, true, 0.45)).refuse);
  EXPECT_THAT(lines_.back(), HasSubstr("a probe not judged within 20s was dropped"));
  EXPECT_FALSE(Update(Ran(1, true, 0.45)).refuse) << "until checked again";

  OffloadCheck again(&clock_, options_);
  again.Update(kGroup, Ran(0, false, 0), lines_);
  clock_.Advance(absl::Seconds(10));
  ASSERT_TRUE(again.Update(kGroup, Ran(1, true, 0.45), lines_).probing);
  for (int64_t version = 2; version < 5; ++version) {  // a new plan every 5 s
    clock_.Advance(absl::Seconds(5));
    EXPECT_TRUE(again.Update(kGroup, Ran(version, false, 0), lines_).refuse);
  }
  clock_.Advance(absl::Seconds(5));
  EXPECT_FALSE(again.Update(kGroup, Ran(5, false, 0), lines_).refuse);
  EXPECT_THAT(lines_.back(), HasSubstr("a probe not judged within 20s was dropped"));
}

TEST_F(OffloadCheckTest, TheNewestPlanThatOffloadsIsTheOneMeasured) {
  Update(Ran(1, true, 0));
  OffloadCheck::Round newer = Ran(1, true, 0.45);  // plan 1's step; plan 2 pushed
  newer.published_version = 2;
  EXPECT_FALSE(Update(newer).refuse);
  EXPECT_THAT(lines_.back(), HasSubstr("waiting for 16 steps"));
  EXPECT_TRUE(Update(Ran(2, true, 0.41)).refuse);
  EXPECT_THAT(lines_.back(), HasSubstr("offloads ran 0.4100 s a step"));
}

TEST(OffloadCheckOptionsTest, BadOptionsNameTheField) {
  EXPECT_THAT(ValidateOffloadCheckOptions({.min_steps = 0}).message(), HasSubstr("min_steps 0"));
  EXPECT_THAT(ValidateOffloadCheckOptions({.min_gain = 1}).message(), HasSubstr("min_gain 1"));
  EXPECT_THAT(ValidateOffloadCheckOptions({.probe_timeout = absl::ZeroDuration()}).message(),
              HasSubstr("probe_timeout 0"));
  EXPECT_THAT(ValidateOffloadCheckOptions({.recheck_after = -absl::Seconds(1)}).message(),
              HasSubstr("recheck_after -1s"));
  EXPECT_TRUE(ValidateOffloadCheckOptions({}).ok());
}

// Through the decision loop. 32 units, 16 a rank; rank 1's units take it 2 ms against
// rank 0's 1 ms, as its timers see. Each unit it offloads also costs the step
// `offload_cost` beyond what the model prices (a throttled rank's transfers, landing in
// its collectives).
using LoopResult = testing::SimulatedJobResult;

// `cordon_at`: the step from which rank 1's device is cordoned (-1: never). `slow`: the
// steps at which rank 1 is 2x slower (else as fast as rank 0); every step when unset.
LoopResult RunLoop(bool check, double offload_cost, int64_t cordon_at = -1,
                   const std::function<bool(int64_t)>& slow = {}) {
  DecisionLoopOptions options;
  options.dwell.plan_dwell = absl::Milliseconds(500);
  if (check) {
    options.offload_check = OffloadCheckOptions{
        .min_steps = 8, .probe_timeout = absl::Seconds(2), .recheck_after = absl::Minutes(5)};
  }
  JobPolicy policy;
  policy.mode = BalanceMode::kMigrate;
  policy.report_period = absl::Milliseconds(100);
  return testing::RunSimulatedJob(
      options, policy,
      [&](const testing::SimulatedStepIn& in) {
        const double per_unit = !slow || slow(in.step) ? 2e-3 : 1e-3;
        const double busy[2] = {in.units[0] * 1e-3, in.units[1] * per_unit};
        return testing::SimulatedStepCost{
            .compute = {busy[0], busy[1]},
            .wall = std::max(busy[0], busy[1]) + 2e-3 + in.offloaded * offload_cost};
      },
      [&](int64_t step, JobSettings& settings, DecisionLoop& loop) {
        if (step != cordon_at) return;
        EXPECT_TRUE(settings.SetCordon("dev1", true, "test").ok());
        loop.ReplanNow("");
      });
}

// Offloads that cost 3 ms a unit more than priced: the model's plan (rank 1 computing 11
// of its 16 units, 5 offloaded) runs 39 ms against plain's 34 ms.
TEST(OffloadCheckLoopTest, OffloadsThatMakeTheStepLongerAreRefused) {
  const LoopResult model = RunLoop(/*check=*/false, 3e-3);
  ASSERT_LT(model.straggler_units, 16);
  EXPECT_GT(model.step, 0.034 * 1.05) << "the model's plan is slower than plain";
  const LoopResult checked = RunLoop(/*check=*/true, 3e-3);
  EXPECT_EQ(checked.straggler_units, 16);
  EXPECT_NEAR(checked.step, 0.034, 1e-9) << "plain's step";
  EXPECT_LE(checked.plans, model.plans + 2) << "the probe, and no way back";
  EXPECT_THAT(checked.why,
              Contains(HasSubstr("refused: offloads ran 0.0390 s a step against 0.0340 s "
                                 "without them, not 3% faster")));
}

// Offloads as the model prices them: the probe costs two plan changes and a few steps,
// and the group ends where the model put it.
TEST(OffloadCheckLoopTest, OffloadsThatPayAreKeptAfterOneProbe) {
  const LoopResult model = RunLoop(/*check=*/false, 0);
  ASSERT_LT(model.straggler_units, 16);
  const LoopResult checked = RunLoop(/*check=*/true, 0);
  EXPECT_EQ(checked.straggler_units, model.straggler_units);
  EXPECT_NEAR(checked.step, model.step, 1e-9);
  EXPECT_LE(checked.plans, model.plans + 2) << "the probe and its way back";
  EXPECT_THAT(checked.why,
              Contains(HasSubstr("allowed: offloads ran 0.0240 s a step against 0.0340 s")));
}

// A cordon is an operator's order, and only transfers empty a device: with offloads
// refused, a cordon of the straggler's device still drains it.
TEST(OffloadCheckLoopTest, ACordonDrainsItsRankWhateverTheVerdict) {
  const LoopResult checked = RunLoop(/*check=*/true, 3e-3, /*cordon_at=*/300);
  EXPECT_EQ(checked.straggler_units, 0);
  EXPECT_THAT(checked.why, Contains(HasSubstr("a rank is cordoned: offloads are not refused")));
}

// A blip (rank 1 2x slower for a moment) balanced and ended by calm, then a straggler for
// good: it outlasts the wait the blip set (plan_flaps.h: StartWait), is balanced, probed
// without its offloads and kept balanced. The probe must not restart the wait: that ended
// it with "no straggler" and balanced afresh after the wait, a plan change every few
// rounds to the run's end.
TEST(OffloadCheckLoopTest, AStragglerAfterABlipIsProbedOnceAndKeptBalanced) {
  const LoopResult r = RunLoop(/*check=*/true, 0, /*cordon_at=*/-1, [](int64_t step) {
    return (step >= 100 && step < 106) || step >= 300;
  });
  const std::vector<int64_t>& changed_at = r.changed_at;
  const std::string changes = absl::StrJoin(changed_at, ", ");
  EXPECT_THAT(r.why, Contains(HasSubstr("a straggler must last"))) << "no blip counted";
  ASSERT_GE(changed_at.size(), 3u) << changes;
  EXPECT_LT(changed_at[0], 120) << changes;  // the blip balanced...
  EXPECT_LT(changed_at[1], 130) << changes;  // ... and ended
  EXPECT_GE(changed_at[2], 300) << changes;
  EXPECT_LE(changed_at.size(), 5u) << "the straggler: start, probe, way back; " << changes;
  EXPECT_LT(r.straggler_units, 16) << changes;
}

}  // namespace
}  // namespace ballast::coordinator
