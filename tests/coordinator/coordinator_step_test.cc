// The coordinator's step, two ranks in lockstep on the fake clock: the step it predicts,
// the collectives it balances as fixed costs, and what a straggler's measured kind changes
// (straggler_kind.h): fixed costs where its collectives slowed with it, a reshard as soon
// as the kind is known, a throttled rank priced by its step's slowdown or its collectives'
// floor, and the wait its arrival spread adds to the predicted step near the balanced
// split (a throttled rank once resharded: coordinator_throttled_test.cc). Apart from
// coordinator_test.cc, the facade's other decisions.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/arrival_spread.h"
#include "coordinator/coordinator.h"
#include "proto/convert.h"
#include "testing/control_plane_messages.h"
#include "testing/coordinator_fixtures.h"
#include "testing/fake_clock.h"
#include "tests/coordinator/coordinator_step_test_base.h"
#include "tests/coordinator/coordinator_test_base.h"

namespace ballast::coordinator {
namespace {

using testing::kUnits;
using testing::RecordingSink;

// Status predicts the whole step: the planner's block compute plus the collectives' own
// cost, the smallest median over the ranks (the last rank to arrive waits least). The
// measured step is the slowest rank's median, so one stalled report moves neither. Here
// the ranks' collectives cost them alike (2 ms), and fixed costs are off: compute alone
// is balanced, as a cluster whose slow ranks are slow only in compute wants.
TEST_F(CoordinatorTest, StatusPredictsTheWholeStepFromMedians) {
  RecordingSink sink;
  ASSERT_NO_FATAL_FAILURE(StartMigrateJob({.fixed_costs = FixedCostsMode::kOff}, &sink));
  JobPolicy policy = *coordinator_->GetPolicy("vit");
  policy.mode = BalanceMode::kObserve;  // explain, push nothing: all-local stays
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  TwoRankLockstep ranks(coordinator_.get(), &clock_);
  const std::vector<double> c = {1e-3, 3e-3}, own = {2e-3, 2e-3};

  // All-local with rank 1 at 3x: 12 ms of compute on rank 1, 2 ms of collectives.
  ranks.Run(20, {4, 4}, c, own, 0);
  v1::GroupStatus g = ranks.Status();
  EXPECT_NEAR(g.predicted_collective_seconds(), 2e-3, 1e-9);
  EXPECT_NEAR(g.predicted_step_seconds(), 14e-3, 1e-9);
  EXPECT_NEAR(g.measured_step_seconds(), 14e-3, 1e-9);
  ranks.Run(1, {4, 4}, c, own, 0, /*stall=*/1.0);  // one report stalled a second
  g = ranks.Status();
  EXPECT_NEAR(g.predicted_step_seconds(), 14e-3, 1e-9);
  EXPECT_NEAR(g.measured_step_seconds(), 14e-3, 1e-9);
  absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
  ASSERT_TRUE(why.ok());
  EXPECT_THAT(why->text(), ::testing::HasSubstr("step: 0.0140 s predicted = 0.0120 s of block "
                                                "compute + 0.0020 s of collectives"));
  EXPECT_THAT(why->text(), ::testing::HasSubstr("fixed costs: off"));

  // Balanced (migrate): 2 of rank 1's units on rank 0, 6 ms each, nobody waits.
  policy.mode = BalanceMode::kMigrate;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  ranks.Run(1, {4, 4}, c, own, 0);
  ASSERT_EQ(sink.plans().size(), 1u);
  ASSERT_EQ(OffloadedUnits(sink.plans()[0]), 2);
  ranks.Run(20, {6, 2}, c, own, sink.plans()[0].version());
  g = ranks.Status();
  EXPECT_NEAR(g.measured_step_seconds(), 8e-3, 1e-9);
  // The planner adds the transfer of 2 units on a 1 GB/s link (2 x 2 us a unit).
  EXPECT_NEAR(g.predicted_step_seconds(), 8e-3, 1e-5);

  // Mode off: all-local again, and no prediction (it plans nothing), not the migrate
  // plan's 8 ms against a measured 14 ms.
  policy.mode = BalanceMode::kOff;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  ranks.Run(1, {6, 2}, c, own, sink.plans()[0].version());
  ASSERT_EQ(sink.plans().size(), 2u);
  ASSERT_EQ(OffloadedUnits(sink.plans()[1]), 0);
  ranks.Run(20, {4, 4}, c, own, sink.plans()[1].version());
  g = ranks.Status();
  EXPECT_NEAR(g.measured_step_seconds(), 14e-3, 1e-9);
  EXPECT_EQ(g.predicted_step_seconds(), 0);
  EXPECT_EQ(g.predicted_collective_seconds(), 0);
  // Observe plans again, and predicts the all-local step it leaves in force.
  policy.mode = BalanceMode::kObserve;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  ranks.Run(1, {4, 4}, c, own, sink.plans()[1].version());
  EXPECT_EQ(sink.plans().size(), 2u);
  EXPECT_NEAR(ranks.Status().predicted_step_seconds(), 14e-3, 1e-9);

  // Observe straight after a balancing mode ends its plan too (all-local, once), so the
  // step it predicts is the one in force, not the old plan left running unattended.
  policy.mode = BalanceMode::kMigrate;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  ranks.Run(1, {4, 4}, c, own, sink.plans()[1].version());
  ASSERT_EQ(sink.plans().size(), 3u);
  ASSERT_EQ(OffloadedUnits(sink.plans()[2]), 2);
  policy.mode = BalanceMode::kObserve;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  ranks.Run(1, {6, 2}, c, own, sink.plans()[2].version());
  ASSERT_EQ(sink.plans().size(), 4u);
  EXPECT_EQ(OffloadedUnits(sink.plans()[3]), 0);
  ranks.Run(20, {4, 4}, c, own, sink.plans()[3].version());
  EXPECT_EQ(sink.plans().size(), 4u) << "observe pushed a second plan";
  g = ranks.Status();
  EXPECT_NEAR(g.predicted_step_seconds(), 14e-3, 1e-9);
  EXPECT_NEAR(g.measured_step_seconds(), 14e-3, 1e-9);
}

// A straggler's collectives slow with it (a CPU quota: every wake-up waits for its share):
// rank 1 at 3x spends 6 ms of its own in collectives, rank 0 2 ms. Compute alone balanced
// (2 units offloaded) leaves rank 1 at 6 + 6 = 12 ms a step and rank 0 waiting. With its
// 4 ms of excess as a fixed cost the planner offloads 3 units: 7 + 2 = 3 + 6 = 9 ms. The
// estimate holds once rank 0 no longer waits, and the prediction stays the measured step.
TEST_F(CoordinatorTest, AStragglersSlowerCollectivesAreBalancedAsAFixedCost) {
  const std::vector<double> c = {1e-3, 3e-3}, own = {2e-3, 6e-3};
  for (bool fixed_costs : {true, false}) {
    SCOPED_TRACE(fixed_costs ? "fixed costs on" : "fixed costs off");
    RecordingSink sink;
    // (The offload check would probe the plan once 16 steps ran under it: this is about
    // what the plan is.)
    ASSERT_NO_FATAL_FAILURE(
        StartMigrateJob({.fixed_costs = fixed_costs ? FixedCostsMode::kOn : FixedCostsMode::kOff,
                         .offload_check = std::nullopt},
                        &sink));
    TwoRankLockstep ranks(coordinator_.get(), &clock_);
    ranks.Run(1, {4, 4}, c, own, 0);
    ASSERT_EQ(sink.plans().size(), 1u);
    const int offloaded = OffloadedUnits(sink.plans()[0]);
    EXPECT_EQ(offloaded, fixed_costs ? 3 : 2);
    ranks.Run(20, {4 + offloaded, 4 - offloaded}, c, own, sink.plans()[0].version());
    EXPECT_EQ(sink.plans().size(), 1u) << "the plan moved on its own outcome";
    const v1::GroupStatus g = ranks.Status();
    EXPECT_NEAR(g.measured_step_seconds(), fixed_costs ? 9e-3 : 12e-3, 1e-9);
    // Within the transfers' few microseconds.
    EXPECT_NEAR(g.predicted_step_seconds(), fixed_costs ? 9e-3 : 12e-3, 1e-5);
    absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
    ASSERT_TRUE(why.ok());
    if (fixed_costs) {
      EXPECT_THAT(why->text(), ::testing::HasSubstr("fixed seconds a step beyond 0.002 s of "
                                                    "collectives (balanced with the units): "
                                                    "0 +0 1 +0.004"));
      EXPECT_THAT(why->text(), ::testing::HasSubstr("1:0.004+0.003x"));
    }
  }
}

// --fixed_costs=auto, the default: fixed costs only for a straggler whose collectives
// were measured slower than the group's calm ones. The group runs calm (10 ms a unit, 20
// ms of collectives each), then rank 1 turns 3x slower under mode observe (all-local, so
// its collectives are measured): as a CPU quota would (its own collectives 60 ms: the
// floor 3x the calm one), its 40 ms of excess are balanced as a fixed cost and migrate
// offloads 3 units; as a slower device would (its own still 20 ms), compute alone and 2
// units. A straggler there since the start has no calm floor to compare with: 2 units.
TEST_F(CoordinatorTest, FixedCostsOnlyWhereTheStragglersCollectivesSlowedWithIt) {
  struct Case {
    const char* name;
    bool calm_first;
    std::vector<double> own;
    int offloaded;
    const char* kind;
  };
  for (const Case& k : {Case{"quota", true, {20e-3, 60e-3}, 3, "slow in its collectives too"},
                        Case{"device", true, {20e-3, 20e-3}, 2, "slow in its compute alone"},
                        Case{"from the start", false, {20e-3, 60e-3}, 2, "unknown"}}) {
    SCOPED_TRACE(k.name);
    RecordingSink sink;
    // (A straggler of measured kind would be resharded at once: the next test. This one is
    // about the offloads' fixed costs.)
    ASSERT_NO_FATAL_FAILURE(StartMigrateJob({.reshard_slower_devices = false,
                                             .reshard_throttled_ranks = false,
                                             .offload_check = std::nullopt},
                                            &sink));
    ASSERT_NO_FATAL_FAILURE(
        SlowUnderObserveThenMigrate(coordinator_.get(), &clock_, k.calm_first, k.own));
    absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
    ASSERT_TRUE(why.ok());
    EXPECT_THAT(why->text(),
                ::testing::HasSubstr(absl::StrCat("straggler kind (rank 1): ", k.kind)));
    ASSERT_EQ(sink.plans().size(), 1u);
    EXPECT_EQ(OffloadedUnits(sink.plans()[0]), k.offloaded);
    coordinator_.reset();
  }
}

// --reshard_slower_devices and --reshard_throttled_ranks, the defaults: a straggler whose
// kind was measured is resharded as soon as it is known, not offloaded until it has lasted
// reshard_after (60 s here). The group of the test above: calm, then rank 1 3x slower for
// 6 s under observe (all-local, so its collectives are measured), then migrate. As a
// slower device (its collectives as calm) or throttled whole (a CPU quota: its
// collectives 3x too) it owns fewer units in the first plan and offloads none; with its
// kind's flag off it is offloaded.
TEST_F(CoordinatorTest, AStragglerIsReshardedOnceItsKindIsMeasured) {
  struct Case {
    const char* name;
    bool reshard_slower_devices;
    bool reshard_throttled_ranks;
    std::vector<double> own;
    bool resharded;
    const char* why;
  };
  for (const Case& k :
       {Case{"device", true, true, {20e-3, 20e-3}, true, "rank 1: a slower device (measured)"},
        Case{"device, flag off", false, true, {20e-3, 20e-3}, false, ""},
        Case{"quota",
             true,
             true,
             {20e-3, 60e-3},
             true,
             "rank 1: throttled whole (its collectives slow too) (measured)"},
        Case{"quota, flag off", true, false, {20e-3, 60e-3}, false, ""}}) {
    SCOPED_TRACE(k.name);
    RecordingSink sink;
    ASSERT_NO_FATAL_FAILURE(StartMigrateJob({.reshard_slower_devices = k.reshard_slower_devices,
                                             .reshard_throttled_ranks = k.reshard_throttled_ranks,
                                             .offload_check = std::nullopt},
                                            &sink));
    ASSERT_NO_FATAL_FAILURE(SlowUnderObserveThenMigrate(coordinator_.get(), &clock_,
                                                        /*calm_first=*/true, k.own));
    ASSERT_EQ(sink.plans().size(), 1u);
    absl::StatusOr<WorkloadPlan> plan = FromProto(sink.plans()[0]);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->blocks.size(), 1u);
    const std::vector<RankId>& owners = plan->blocks[0].owner_of_unit;
    absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
    ASSERT_TRUE(why.ok());
    if (k.resharded) {
      ASSERT_EQ(owners.size(), static_cast<size_t>(kUnits));
      EXPECT_LT(std::count(owners.begin(), owners.end(), RankId(1)), kUnits / 2);
      EXPECT_EQ(OffloadedUnits(sink.plans()[0]), 0);
      EXPECT_THAT(why->text(), ::testing::HasSubstr(absl::StrCat(k.why, ": chronic now")));
      // Status shows the rank as the decisions see it (6 s of straggling: transient by
      // reshard_after alone).
      absl::StatusOr<v1::ClusterStatus> status = coordinator_->Status("vit");
      ASSERT_TRUE(status.ok()) << status.status();
      const v1::GroupStatus& g = status->jobs(0).groups(0);
      ASSERT_EQ(g.ranks_size(), 2);
      EXPECT_EQ(g.ranks(1).state(), "chronic");
    } else {
      EXPECT_TRUE(owners.empty()) << "resharded a straggler not chronic, its flag off";
      EXPECT_GT(OffloadedUnits(sink.plans()[0]), 0);
      EXPECT_THAT(why->text(), ::testing::Not(::testing::HasSubstr("chronic now")));
    }
    coordinator_.reset();
  }
}

// --throttled_price (timers by default): a straggler throttled whole priced by its step
// is priced at the slowdown its step measured where its timers see less; by its floor,
// its collectives at what they cost it straggling. The group of the tests above, calm at
// 60 ms a step, then rank 1 as a CPU quota slows it: its timers 1.5x (15 ms a unit), its
// own collectives 2x (40 ms), so its step takes 100 ms, 1.67x the calm one. Priced at
// 1.67x, or its collectives at their 40 ms, it keeps fewer units in the first plan than
// at its timers' 1.5x, and explain says why; a slower device (collectives as calm) is
// priced by its timers alone.
TEST_F(CoordinatorTest, ARankThrottledWholeIsPricedAtItsStepsSlowdownOrItsFloor) {
  struct Case {
    const char* name;
    ThrottledPrice how;
    std::vector<double> own;
    FixedCostsMode fixed_costs = FixedCostsMode::kAuto;
  };
  std::map<std::string, int64_t> kept;
  for (const Case& k : {Case{"quota", ThrottledPrice::kStep, {20e-3, 40e-3}},
                        Case{"quota, floor", ThrottledPrice::kFloor, {20e-3, 40e-3}},
                        Case{"quota, timers", ThrottledPrice::kTimers, {20e-3, 40e-3}},
                        Case{"device", ThrottledPrice::kStep, {20e-3, 20e-3}},
                        Case{"device, floor", ThrottledPrice::kFloor, {20e-3, 20e-3}},
                        // floor prices a fixed cost: none balanced, nothing priced.
                        Case{"quota, floor, no fixed costs",
                             ThrottledPrice::kFloor,
                             {20e-3, 40e-3},
                             FixedCostsMode::kOff}}) {
    SCOPED_TRACE(k.name);
    RecordingSink sink;
    ASSERT_NO_FATAL_FAILURE(StartMigrateJob(
        {.fixed_costs = k.fixed_costs, .throttled_price = k.how, .offload_check = std::nullopt},
        &sink));
    ASSERT_NO_FATAL_FAILURE(SlowUnderObserveThenMigrate(coordinator_.get(), &clock_,
                                                        /*calm_first=*/true, k.own,
                                                        /*slow=*/{10e-3, 15e-3}));
    absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
    ASSERT_TRUE(why.ok());
    const std::string by_step =
        "rank 1: throttled whole, priced at the 1.67x slowdown its step measured, not the "
        "1.50x its compute timers see (coordinator flag --throttled_price=step)";
    const std::string by_floor =
        "rank 1: throttled whole, its collectives priced at the 0.04 s they cost it "
        "straggling on the calm split, its units at the 1.50x its compute timers see "
        "(coordinator flag --throttled_price=floor)";
    const std::string name = k.name;
    if (name == "quota") {
      EXPECT_THAT(why->text(), ::testing::HasSubstr(by_step));
    } else if (name == "quota, floor") {
      EXPECT_THAT(why->text(), ::testing::HasSubstr(by_floor));
    } else {
      EXPECT_THAT(why->text(), ::testing::Not(::testing::HasSubstr("priced at the")));
    }
    ASSERT_EQ(sink.plans().size(), 1u);
    absl::StatusOr<WorkloadPlan> plan = FromProto(sink.plans()[0]);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->blocks.size(), 1u);
    const std::vector<RankId>& owners = plan->blocks[0].owner_of_unit;
    kept[k.name] =
        owners.empty() ? kUnits / 2 : std::count(owners.begin(), owners.end(), RankId(1));
    coordinator_.reset();
  }
  EXPECT_LT(kept["quota"], kept["quota, timers"]);
  EXPECT_LT(kept["quota, floor"], kept["quota, timers"]);
  EXPECT_EQ(kept["quota, timers"], 3);
  EXPECT_EQ(kept["device"], 3);
  EXPECT_EQ(kept["device, floor"], 3);
}

// Priced by its step or by its floor, a throttled rank's collectives are priced once: the
// group of the test above under plain TP (mode observe), its step 100 ms measured (60 ms
// of compute, 40 ms of collectives, 1.67x the calm 60 ms).
//   - step: its units at 1.67x (66.7 ms) and its collectives at 1.67x their calm 20 ms
//     (33.3 ms) predict the 100 ms; at the 40 ms it measured on top of its units' price
//     (already in its slowdown) they predicted 107 ms (fixed_costs.h).
//   - floor: its units at its timers' 1.5x (60 ms) and its collectives at their 40 ms
//     straggling floor predict the 100 ms; at 1.5x their calm cost, 90 ms.
TEST_F(CoordinatorTest, AThrottledRanksCollectivesArePricedOnceByItsStepOrItsFloor) {
  for (const ThrottledPrice how : {ThrottledPrice::kStep, ThrottledPrice::kFloor}) {
    const bool by_step = how == ThrottledPrice::kStep;
    SCOPED_TRACE(by_step ? "step" : "floor");
    RecordingSink sink;
    ASSERT_NO_FATAL_FAILURE(
        StartMigrateJob({.throttled_price = how, .offload_check = std::nullopt}, &sink));
    JobPolicy policy = *coordinator_->GetPolicy("vit");
    policy.mode = BalanceMode::kObserve;
    ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
    TwoRankLockstep ranks(coordinator_.get(), &clock_);
    ranks.Run(30, {4, 4}, {10e-3, 10e-3}, {20e-3, 20e-3}, 0);
    ranks.Run(60, {4, 4}, {10e-3, 15e-3}, {20e-3, 40e-3}, 0);
    absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
    ASSERT_TRUE(why.ok());
    EXPECT_THAT(why->text(),
                ::testing::HasSubstr(by_step ? "priced at the 1.67x slowdown its step measured"
                                             : "its collectives priced at the 0.04 s"));
    EXPECT_THAT(
        why->text(),
        ::testing::HasSubstr(by_step ? "pays its collectives at that slowdown times the 0.02 s"
                                     : "a throttled rank pays its collectives' straggling "
                                       "floor (relieved of units, times the share they cost "
                                       "it relieved), not what it measured under this plan; the "
                                       "others what they measured, at most their "
                                       "slowdown times the 0.02 s"));
    const v1::GroupStatus g = ranks.Status();
    EXPECT_NEAR(g.measured_step_seconds(), 100e-3, 1e-9);
    EXPECT_NEAR(g.predicted_collective_seconds(), 20e-3, 1e-6);
    EXPECT_NEAR(g.predicted_step_seconds(), 100e-3, 1e-6);
    EXPECT_TRUE(sink.plans().empty()) << "observe pushes nothing";
    coordinator_.reset();
  }
}

// Balanced on average, a throttled rank still arrives late at some collectives and early
// at others, and each side waits (arrival_spread.h). Calm at 60 ms a step, then rank 1
// throttled under plain TP (its units 2x, its collectives 40 ms against 20 ms calm: 120 ms
// a step), then held at half its units, where the two sides' means are equal (80 ms of
// compute and collectives each) but each waits 10 ms more a step: the others 10 ms beyond
// their calm 20 ms, rank 1 10 ms beyond its 40 ms floor, a spread of 25 ms. Priced by its
// floor, the held plan's step is predicted at its 90 ms with the spread's wait, and 80 ms
// (11% short) before the spread was fitted.
TEST_F(CoordinatorTest, AThrottledRanksArrivalSpreadIsPredictedNearTheBalancedSplit) {
  RecordingSink sink;
  ASSERT_NO_FATAL_FAILURE(StartMigrateJob(
      {.throttled_price = ThrottledPrice::kFloor, .offload_check = std::nullopt}, &sink));
  JobPolicy policy = *coordinator_->GetPolicy("vit");
  policy.mode = BalanceMode::kObserve;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  TwoRankLockstep ranks(coordinator_.get(), &clock_);
  ranks.Run(30, {4, 4}, {10e-3, 10e-3}, {20e-3, 20e-3}, 0);
  ranks.Run(60, {4, 4}, {10e-3, 20e-3}, {20e-3, 40e-3}, 0);
  EXPECT_NEAR(ranks.Status().predicted_step_seconds(), 120e-3, 1e-6) << "plain TP";
  ASSERT_TRUE(
      coordinator_->SetHold("vit", "tp0", GroupHold{.rank = 1, .reshard_fraction = 0.5}).ok());
  coordinator_->Tick();
  ASSERT_EQ(sink.plans().size(), 1u);
  const int64_t version = sink.plans().back().version();
  ranks.Run(10, {6, 2}, {10e-3, 20e-3}, {20e-3, 40e-3}, version, 0, /*spread_wait=*/10e-3);
  EXPECT_NEAR(ranks.Status().predicted_step_seconds(), 80e-3, 1e-6) << "not fitted yet";
  ranks.Run(20, {6, 2}, {10e-3, 20e-3}, {20e-3, 40e-3}, version, 0, /*spread_wait=*/10e-3);
  const v1::GroupStatus g = ranks.Status();
  EXPECT_NEAR(g.measured_step_seconds(), 90e-3, 1e-9);
  EXPECT_NEAR(g.predicted_step_seconds(), 90e-3, 1e-6);
  EXPECT_NEAR(g.predicted_collective_seconds(), 20e-3, 1e-6);
  absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
  ASSERT_TRUE(why.ok());
  EXPECT_THAT(why->text(),
              ::testing::HasSubstr("+ 0.01 s of waits for rank 1's arrival spread (0.0251 s; near "
                                   "the balanced split)"));
  // Back on plain TP (held at the even split), rank 1 the later by 60 ms: the spread's
  // wait fades (0.07 ms), and the step is predicted at about its 120 ms.
  ASSERT_TRUE(coordinator_->SetHold("vit", "tp0", GroupHold{.rank = 1}).ok());
  coordinator_->Tick();
  ASSERT_EQ(sink.plans().size(), 2u);
  ranks.Run(20, {4, 4}, {10e-3, 20e-3}, {20e-3, 40e-3}, sink.plans().back().version());
  const double spread = 10e-3 * std::sqrt(2 * M_PI);
  EXPECT_NEAR(ranks.Status().predicted_step_seconds(), 120e-3 + SpreadWait(spread, 60e-3), 1e-6);
  EXPECT_LT(SpreadWait(spread, 60e-3), 0.1e-3);
  ASSERT_TRUE(coordinator_->SetHold("vit", "tp0", std::nullopt).ok());
}

}  // namespace
}  // namespace ballast::coordinator
