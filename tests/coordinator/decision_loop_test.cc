// DecisionLoop over a real registry, judge and settings on a fake clock: what it decides
// from a snapshot, when a group is due, and that a group forgotten keeps nothing (its
// mixture-of-experts decisions: decision_loop_experts_test.cc).
#include "coordinator/decision_loop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "testing/coordinator_fixtures.h"
#include "tests/coordinator/decision_loop_test_base.h"

namespace ballast::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Hello;

TEST_F(DecisionLoopTest, WaitsForEveryRankThenPublishesWhatThePlannerDecides) {
  v1::AgentHello one_rank = Hello({0, 0, 0, 0, 1, 1, 1, 1});
  one_rank.mutable_workers()->RemoveLast();
  ASSERT_TRUE(registry_->AgentConnected(one_rank, &sink_).ok());
  loop_->Tick();
  EXPECT_THAT(Record().reasons.before, ElementsAre("waiting for ranks: 1 of 2 registered"));

  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  std::string log;
  for (int64_t step = 0; step < 10 && sink_.plans().empty(); ++step) {
    Reports(step, 3e-3);
    clock_.Advance(absl::Milliseconds(100));
    ::testing::internal::CaptureStderr();
    loop_->Tick();
    log = ::testing::internal::GetCapturedStderr();
  }
  ASSERT_EQ(sink_.plans().size(), 1u) << "rank 1 at 3x was not balanced";
  EXPECT_EQ(sink_.plans()[0].number(), 1);
  // Logged with the round's verdicts, which explain loses at the next round.
  EXPECT_THAT(log, HasSubstr("job=vit group=tp0 new plan #1 (mean, change): block 0 "));
  EXPECT_THAT(log, HasSubstr(absl::StrCat(" why: ", Record().reasons.before.at(0), "; ")));
  EXPECT_THAT(log, HasSubstr("1 3.00x straggling"));
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

// A marginal straggle waited out on an all-local group is a blip, whose length a known
// kind's straggle then waits out (straggler_judge.h); one that begins as an operator
// changes a setting (ReplanNow: a policy set, a hold, its release) is that change's: the
// interleaved benchmark's segment switches learned such blips (docs/benchmarks.md,
// 2026-12-07 (d)).
TEST_F(DecisionLoopTest, AStraggleBegunAsAnOperatorChangesASettingIsNoBlip) {
  ASSERT_TRUE(registry_->AgentConnected(testing::Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  int64_t step = 0;
  const auto rounds = [&](int n, double slow) {
    for (int i = 0; i < n; ++i) {
      Reports(step++, slow);
      clock_.Advance(absl::Milliseconds(100));
      loop_->Tick();
    }
  };
  rounds(20, 1e-3);
  const GroupRef ref = registry_->Groups().at(0);
  loop_->ReplanNow("vit");
  rounds(6, 1.2e-3);  // 1.2x: marginal, waited out all-local
  rounds(20, 1e-3);
  EXPECT_EQ(judge_->LongestBlip(ref), std::nullopt);
  EXPECT_TRUE(sink_.plans().empty());
  rounds(6, 1.2e-3);
  rounds(20, 1e-3);
  EXPECT_TRUE(judge_->LongestBlip(ref).has_value()) << "the same straggle, no operator";
  EXPECT_TRUE(sink_.plans().empty());
}

// A straggler whose speed wanders between 1.6x and 2.5x every 3 s (as a CPU quota's
// estimates do) makes the best plan swing between offloading 1 and 2 units, each 17-20%
// better than the other in turn: past the job's hysteresis (10%), under the dwell's
// (30%). Without flap damping the plan would change at every swing; a change undone
// within the flap hold holds the group's changes 30 s, then 60 s.
TEST_F(DecisionLoopTest, APlanUndoneSoonHoldsTheGroupsChangesLonger) {
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  std::vector<int64_t> changed_at;  // steps (100 ms each) at which a plan was pushed
  for (int64_t step = 0; step < 900; ++step) {
    Reports(step, (step / 30) % 2 == 0 ? 1.6e-3 : 2.5e-3);
    clock_.Advance(absl::Milliseconds(100));
    const size_t before = sink_.plans().size();
    loop_->Tick();
    if (sink_.plans().size() > before) changed_at.push_back(step);
  }
  ASSERT_GE(changed_at.size(), 3u);
  // The first plan, its change and the undo came at the swings; then nothing for 30 s.
  EXPECT_LT(changed_at[2], 90);
  if (changed_at.size() > 3) {
    EXPECT_GE(changed_at[3] - changed_at[2], 300);
  }
  // 30 swings in 90 s: the hold keeps all but a few.
  EXPECT_LE(changed_at.size(), 7u) << absl::StrJoin(changed_at, ", ");
  EXPECT_THAT(absl::StrJoin(Record().reasons.before, "\n"),
              HasSubstr("counted, so a change of a plan that balances is held"));
}

// A calm rank that is 2x slower for 1.5 s every 4.5 s (a shared VM's blips) got a plan
// for each blip, ended by calm soon after: two changes a blip. Balancing ended that soon
// is a flap, and while the group flaps a straggler must last twice as long as the blip
// balanced (at most the 30 s hold) before balancing starts again; one that lasts is
// balanced once it has. (The wait outlasts the hold's decay by 10 minutes after the last
// blip: plan_flaps_test.cc.)
TEST_F(DecisionLoopTest, BlipsAreWaitedOutOnceOneWasBalancedInVainAStragglerThatLastsIsNot) {
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  std::vector<int64_t> changed_at;  // steps (100 ms each) at which a plan was pushed
  std::string waited;
  for (int64_t step = 0; step < 800; ++step) {
    const bool slow = step >= 200 || step % 45 < 15;
    Reports(step, slow ? 2e-3 : 1e-3);
    clock_.Advance(absl::Milliseconds(100));
    const size_t before = sink_.plans().size();
    loop_->Tick();
    if (sink_.plans().size() > before) changed_at.push_back(step);
    if (step == 190) waited = absl::StrJoin(Record().reasons.before, "\n");
  }
  ASSERT_GE(changed_at.size(), 3u) << absl::StrJoin(changed_at, ", ");
  // The first blip balanced and ended; the blips of the next 15 s waited out.
  EXPECT_LT(changed_at[0], 15);
  EXPECT_LT(changed_at[1], 45);
  EXPECT_THAT(waited, HasSubstr("a straggler while the plans flap, for "));
  // The first blip's balancing lasted 1.7 s (its 1.5 s, delayed at both ends by a report):
  // a straggler must last twice that, not the 30 s hold.
  EXPECT_THAT(waited, HasSubstr("of 3.4s before balancing: all-local"));
  // The straggler from step 200 on: balanced once it lasted the wait, and kept.
  EXPECT_EQ(changed_at.size(), 3u) << absl::StrJoin(changed_at, ", ");
  EXPECT_GE(changed_at[2], 200 + 34);
  EXPECT_LT(changed_at[2], 200 + 40);
}

// A calm group's blips a minute or more apart (this VM's: 61 s apart in one calm run, 4
// plan changes in 1,000 steps): the first is balanced and ended, the next, 80 s later,
// after the hold has decayed, is waited out, as the blip is remembered for 10 minutes.
TEST_F(DecisionLoopTest, BlipsAMinuteApartCostOnePlanAndItsEnd) {
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  std::vector<int64_t> changed_at;  // steps (100 ms each) at which a plan was pushed
  std::string waited;
  for (int64_t step = 0; step < 1400; ++step) {
    const bool slow = (step >= 100 && step < 115) || (step >= 900 && step < 915);
    Reports(step, slow ? 2e-3 : 1e-3);
    clock_.Advance(absl::Milliseconds(100));
    const size_t before = sink_.plans().size();
    loop_->Tick();
    if (sink_.plans().size() > before) changed_at.push_back(step);
    if (step == 905) waited = absl::StrJoin(Record().reasons.before, "\n");
  }
  ASSERT_EQ(changed_at.size(), 2u) << absl::StrJoin(changed_at, ", ");
  EXPECT_LT(changed_at[1], 130);
  // (The first blip's balancing lasted 1.5 s here: its plan came a round late and so did
  // its end.)
  EXPECT_THAT(waited, HasSubstr("blips of up to 1.5s within the last 10m: a straggler must "
                                "last 3s or turn chronic before balancing starts"));
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

// The count to chronic restarts at the planner's reshards, not at an operator's: rank 1
// at 3x from the start, held with a quarter of its units resharded from 1 s to 2.5 s, has
// straggled 2.4 s (judged from 0.1 s) when the hold is released, past reshard_after
// (2 s), and the planner prices reshards for it at once. Had the hold's move restarted
// the count, rank 1 would be chronic only at 3.1 s. (Which plan it then picks is the
// planner's to say: from the hold's 5/3 split, offloading one unit evens the compute as
// owning 2 would.)
TEST_F(DecisionLoopTest, AHeldReshardDoesNotRestartTheCountToChronic) {
  ASSERT_NO_FATAL_FAILURE(StartAutoWithShortReshardAfter());
  for (int64_t step = 0; step < 25; ++step) {
    if (step == 10) {
      ASSERT_TRUE(
          settings_->SetHold("vit", "tp0", GroupHold{.rank = 1, .reshard_fraction = 0.25}).ok());
    }
    Reports(step, 3e-3);
    clock_.Advance(absl::Milliseconds(100));
    loop_->Tick();
  }
  ASSERT_GE(sink_.plans().size(), 2u) << "no plan before the hold, or no hold";
  const v1::BlockPlan held = sink_.plans().back().blocks(0);
  ASSERT_EQ(held.owner_of_unit_size(), 8) << "the hold moved no units";
  EXPECT_EQ(std::count(held.owner_of_unit().begin(), held.owner_of_unit().end(), 1), 3);

  ASSERT_TRUE(settings_->SetHold("vit", "tp0", std::nullopt).ok());
  loop_->ReplanNow("vit");
  loop_->Tick();
  const DecisionRecord record = Record();
  const std::string reasons = absl::StrJoin(record.reasons.before, "\n");
  EXPECT_THAT(reasons, HasSubstr("rank 1 straggling for 2.4s: chronic")) << reasons;
  EXPECT_THAT(reasons, ::testing::Not(HasSubstr("since the last reshard")));
  ASSERT_EQ(record.reasons.planned.blocks.size(), 1u);
  const std::vector<PlannerRank>& ranks = record.reasons.planned.blocks[0].input.ranks;
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_TRUE(ranks[1].chronic) << "the planner was not given the chronic straggler";
  EXPECT_FALSE(ranks[0].chronic);
}

// A hold that moves units replaces the planner's ownership: released within reshard_after
// (2 s) of the planner's own reshard, the straggler (slow through it all) is chronic at
// once, not only once reshard_after has passed since that reshard. Without it a ViT's
// device straggler released from a held even split was offloaded from that split for ~20 s.
TEST_F(DecisionLoopTest, AHoldThatMovedUnitsLiftsThePlannersReshardSpacing) {
  ASSERT_NO_FATAL_FAILURE(StartAutoWithShortReshardAfter());
  // Rank 1 at 3 ms a unit, rank 0 at 1 ms.
  PlanFollowers workers;
  auto run_step = [&] { RunNewestPlan(workers, {1e-3, 3e-3}); };
  auto rank1_units = [&] { return workers.units(1); };
  while (workers.step < 40 && rank1_units() == 4) ASSERT_NO_FATAL_FAILURE(run_step());
  ASSERT_LT(rank1_units(), 4) << "the planner never resharded the chronic straggler";
  ASSERT_NO_FATAL_FAILURE(run_step());  // the workers confirm the reshard
  ASSERT_TRUE(
      settings_->SetHold("vit", "tp0", GroupHold{.rank = 1, .offload_fraction = 0.25}).ok());
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(run_step());
  ASSERT_EQ(rank1_units(), 4) << "the held offload kept the planner's ownership";

  ASSERT_TRUE(settings_->SetHold("vit", "tp0", std::nullopt).ok());
  loop_->ReplanNow("vit");
  loop_->Tick();
  const std::string reasons = absl::StrJoin(Record().reasons.before, "\n");
  EXPECT_THAT(reasons, HasSubstr(": chronic")) << reasons;
  EXPECT_THAT(reasons, ::testing::Not(HasSubstr("since the last reshard"))) << reasons;
  ASSERT_NO_FATAL_FAILURE(run_step());
  EXPECT_LT(rank1_units(), 4) << "released from the hold's even split, it was not resharded";
}

// A straggler whose block time has a fixed part (4 ms + 3 ms a unit) reads 4 ms a unit at
// 4 units and 5 ms at 2. Once it has run both counts the planner prices it by the fit: a
// unit moved saves 3 ms, not 5. With the coordinator's --unit_count_fit=false, by its
// seconds over its units.
TEST_F(DecisionLoopTest, AFixedPartOfABlocksTimeIsPricedOnceARankRanTwoUnitCounts) {
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  int64_t step = 0;
  auto steps = [&](int32_t straggler_units, int n) {
    for (int i = 0; i < n; ++i, ++step) {
      for (int rank : {0, 1}) {
        const int32_t units = rank == 0 ? 4 : straggler_units;
        const double seconds = rank == 0 ? 4e-3 : 4e-3 + 3e-3 * units;
        ASSERT_TRUE(
            registry_->Report("agent-1", testing::StepReport({}, rank, step, units, seconds)).ok());
      }
      clock_.Advance(absl::Milliseconds(100));
      loop_->Tick();
    }
  };
  auto straggler = [&]() -> PlannerRank {
    const GroupPlannerInput& planned = Record().reasons.planned;
    if (planned.blocks.empty() || planned.blocks[0].input.ranks.size() != 2) {
      ADD_FAILURE() << "nothing planned";
      return {};
    }
    EXPECT_EQ(planned.blocks[0].input.ranks[0].fixed_seconds, 0) << "rank 0 ran one count";
    return planned.blocks[0].input.ranks[1];
  };
  steps(4, 6);
  EXPECT_EQ(straggler().fixed_seconds, 0) << "one count: no fit";
  EXPECT_NEAR(straggler().seconds_per_unit, 4e-3, 1e-9);
  steps(2, 6);
  PlannerRank r = straggler();
  EXPECT_NEAR(r.fixed_seconds, 4e-3, 1e-6);
  EXPECT_NEAR(r.seconds_per_unit, 3e-3, 1e-7);
  EXPECT_THAT(Record().reasons.before,
              ::testing::Contains(HasSubstr("rank 1: block time fitted as fixed + per unit")));

  loop_ =
      std::make_unique<DecisionLoop>(DecisionLoopOptions{.unit_count_fit = false}, &clock_,
                                     registry_.get(), judge_.get(), settings_.get(), speeds_.get());
  steps(2, 1);
  r = straggler();
  EXPECT_EQ(r.fixed_seconds, 0);
  EXPECT_NEAR(r.seconds_per_unit, 5e-3, 1e-9);
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
              ::testing::Contains(HasSubstr(
                  "rank 1 computes no units (or, for experts, no tokens) under the plan it runs")));
}

// The offload check's refusal against a reshard holds for another straggler only once
// that one is chronic (OffloadCheck::RefusalHolds, told by the loop: Round::chronic).
// Rank 1 straggles 3x from the start. Offloads cost 10 ms a unit on this link (its prior
// prices them free), so they lose to the plan without them that the probe ends on, the
// reshard made once rank 1 is chronic, and are refused against it. Then, on that split,
// rank 1 is calm and rank 0 3x slower: its offloads are allowed until it is chronic, and
// refused from that round on (the plan without them goes out).
TEST_F(DecisionLoopTest, ARefusalAgainstAReshardHoldsForAnotherStragglerOnceChronic) {
  loop_ = std::make_unique<DecisionLoop>(
      DecisionLoopOptions{.offload_check = OffloadCheckOptions{}}, &clock_, registry_.get(),
      judge_.get(), settings_.get(), speeds_.get());
  JobPolicy policy;
  policy.mode = BalanceMode::kMigrate;
  policy.report_period = absl::Milliseconds(100);
  policy.reshard_after = absl::Seconds(3);
  ASSERT_TRUE(settings_->SetPolicy("vit", policy).ok());
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  // Every unit offloaded adds 10 ms to the step; 20 ms of collectives a step.
  PlanFollowers workers;
  auto run_step = [&](const std::vector<double>& spu) {
    RunNewestPlan(workers, spu, /*collectives=*/20e-3, /*per_offload=*/10e-3);
  };
  auto line_with = [&](const std::string& part) {
    for (const std::string& line : Record().reasons.before) {
      if (absl::StrContains(line, part)) return line;
    }
    return std::string();
  };

  bool refused = false;
  while (workers.step < 120 && !refused) {
    ASSERT_NO_FATAL_FAILURE(run_step({1e-3, 3e-3}));
    refused = absl::StrContains(line_with("offload check"), "offloads refused");
  }
  ASSERT_TRUE(refused) << "rank 1's offloads were never refused";
  ASSERT_NO_FATAL_FAILURE(run_step({1e-3, 3e-3}));
  ASSERT_EQ(workers.units(1), 2) << "refused against the even split, not a reshard";
  ASSERT_EQ(workers.offloaded, 0);

  bool allowed_before = false;
  std::string at_chronic;
  while (workers.step < 200 && at_chronic.empty()) {
    ASSERT_NO_FATAL_FAILURE(run_step({3e-3, 1e-3}));
    const std::string check = line_with("offload check (rank 0)");
    // The judge's count ("rank 0 straggling for 3s: chronic (reshard_after 3s)").
    if (absl::StrContains(line_with("rank 0 straggling for"), ": chronic")) {
      at_chronic = check;
    } else if (absl::StrContains(check, "allowed here: refused against rank 1's reshard") &&
               workers.offloaded > 0) {
      allowed_before = true;
    }
  }
  EXPECT_TRUE(allowed_before) << "rank 0 was not offloaded on rank 1's reshard split";
  ASSERT_FALSE(at_chronic.empty()) << "rank 0 never turned chronic";
  EXPECT_THAT(at_chronic, ::testing::StartsWith("offload check (rank 0): refused: offloads ran"));
  ASSERT_NO_FATAL_FAILURE(run_step({3e-3, 1e-3}));
  EXPECT_EQ(workers.offloaded, 0) << "the plan of the round rank 0 turned chronic offloads";
}

// The relieved rank whose own offloads a round refuses (DecisionLoop::RefusesOffloads):
// one the pooled verdict calls straggling, whichever rank is the slowest, or any in a calm
// round; none where only other ranks straggle.
TEST(RelievedSenderTest, ARelievedRankThatStragglesOrACalmGroupRefusesItsOwnOffloads) {
  PooledGroup pooled;
  pooled.ranks.resize(4);
  pooled.ranks[1].straggling = true;
  pooled.ranks[3].straggling = true;
  EXPECT_EQ(DecisionLoop::RelievedSender(pooled, /*straggler=*/3, {}), -1) << "none relieved";
  EXPECT_EQ(DecisionLoop::RelievedSender(pooled, /*straggler=*/-1, {2}), 2) << "a calm round";
  EXPECT_EQ(DecisionLoop::RelievedSender(pooled, /*straggler=*/1, {1}), 1);
  EXPECT_EQ(DecisionLoop::RelievedSender(pooled, /*straggler=*/3, {1}), 1)
      << "rank 3 the slowest this round, rank 1 straggling still";
  EXPECT_EQ(DecisionLoop::RelievedSender(pooled, /*straggler=*/3, {2}), -1)
      << "only the others straggle: their offloads stay the planner's";
}

}  // namespace
}  // namespace ballast::coordinator
