// PlanBlock's policy: hysteresis against the plan in force, the modes, cordons, fixed
// costs, calm groups, and what the explanation says about them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/planner/ownership.h"
#include "coordinator/planner/planner.h"
#include "tests/coordinator/planner/planner_test_util.h"

namespace ballast::coordinator {
namespace {

using planner_testing::Case;
using planner_testing::Checked;
using planner_testing::CheckPlan;
using planner_testing::Explained;
using planner_testing::MakeInput;
using planner_testing::PlanExplained;
using planner_testing::Straggler;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// ---------------------------------------------------------------------------------------
// Hysteresis.

int CountChanges(double hysteresis, int steps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> noise(-0.02, 0.02);
  Case k = Straggler();
  k.policy.hysteresis = hysteresis;
  BlockPlan current;
  bool have = false;
  int changes = 0;
  for (int i = 0; i < steps; ++i) {
    Case noisy = k;
    for (double& c : noisy.c) c *= 1 + noise(rng);
    absl::StatusOr<BlockDecision> d =
        PlanBlock(MakeInput(noisy), k.policy, have ? &current : nullptr);
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return -1;
    if (have && !(d->plan == current)) ++changes;
    current = d->plan;
    have = true;
  }
  return changes;
}

TEST(PlannerHysteresisTest, NoiseDoesNotFlapThePlan) {
  const int with = CountChanges(0.05, 1000, 1);
  const int without = CountChanges(0.0, 1000, 1);
  EXPECT_LE(with, 5);
  EXPECT_GT(without, 5 * std::max(with, 4));
}

TEST(PlannerHysteresisTest, RealSlowdownChangesThePlan) {
  Case k = Straggler();
  absl::StatusOr<BlockDecision> first = PlanBlock(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(first.ok());
  k.c[3] *= 2;  // a second rank becomes 2x slower
  absl::StatusOr<Explained> second = PlanExplained(MakeInput(k), k.policy, &first->plan);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->kept_current);
  EXPECT_FALSE(second->plan == first->plan);
  bool rank3_sheds = false;
  for (const Offload& o : second->plan.offloads) rank3_sheds = rank3_sheds || o.owner == RankId(3);
  EXPECT_TRUE(rank3_sheds) << second->explanation;
}

TEST(PlannerHysteresisTest, KeepsAnEquallyGoodCurrentPlanAndDropsAnInfeasibleOne) {
  Case k = Straggler();
  const PlannerInput in = MakeInput(k);
  absl::StatusOr<BlockDecision> first = PlanBlock(in, k.policy, nullptr);
  ASSERT_TRUE(first.ok());
  absl::StatusOr<BlockDecision> again = PlanBlock(in, k.policy, &first->plan);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->kept_current);
  EXPECT_EQ(again->plan, first->plan);

  BlockPlan broken = first->plan;
  broken.pruned_units.assign(8, 0);
  broken.pruned_units[7] = 60;  // over the per-rank budget
  absl::StatusOr<Explained> fixed = PlanExplained(in, k.policy, &broken);
  ASSERT_TRUE(fixed.ok());
  EXPECT_FALSE(fixed->kept_current);
  EXPECT_THAT(fixed->explanation, HasSubstr("budget"));
}

TEST(PlannerHysteresisTest, OnAReshardedSplitANewPlanMustAlsoBeatTheNoise) {
  // A straggler's reshard left it 33 of 90 units; running all-local on that split, rank 1
  // now reads 1.95x slower. Offloading 3 of its units beats all-local by about 7%: past the
  // 5% hysteresis, inside the straggler threshold's noise (10% on speeds, 9.1% on the
  // objective), so the plan in force is kept, as a reshard would have been held off.
  Case k;
  k.c = {1e-3, 1.95e-3};
  k.n = {57, 33};
  k.tau = 1e-5;
  const BlockPlan all_local{.block = BlockId(1)};
  absl::StatusOr<Explained> held = PlanExplained(MakeInput(k), k.policy, &all_local);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_FALSE(held->recommended.plan.offloads.empty()) << held->explanation;
  const double gain = 1 - held->recommended.cost.objective / held->all_local_step_seconds;
  EXPECT_GT(gain, k.policy.hysteresis) << held->explanation;
  EXPECT_LT(gain, 0.1 / 1.1) << held->explanation;
  EXPECT_TRUE(held->kept_current) << held->explanation;
  EXPECT_TRUE(held->plan.offloads.empty()) << held->explanation;

  // The same gain with a threshold of 2% is no longer noise: the offload is pushed.
  Case sharp = k;
  sharp.policy.straggler_threshold = 0.02;
  absl::StatusOr<Explained> moved = PlanExplained(MakeInput(sharp), sharp.policy, &all_local);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_FALSE(moved->kept_current) << moved->explanation;
  EXPECT_FALSE(moved->plan.offloads.empty()) << moved->explanation;

  // A larger gain (rank 1 2.3x slower) is past the noise: pushed under the default threshold.
  Case slower = k;
  slower.c[1] = 2.3e-3;
  absl::StatusOr<Explained> pushed = PlanExplained(MakeInput(slower), slower.policy, &all_local);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_FALSE(pushed->kept_current) << pushed->explanation;
  EXPECT_FALSE(pushed->plan.offloads.empty()) << pushed->explanation;

  // On an even split the same 7% gain is past the hysteresis alone: pushed.
  Case even;
  even.c = {1e-3, 1.15e-3};
  even.n = {45, 45};
  even.tau = 1e-5;
  absl::StatusOr<Explained> balanced = PlanExplained(MakeInput(even), even.policy, &all_local);
  ASSERT_TRUE(balanced.ok()) << balanced.status();
  const double even_gain =
      1 - balanced->recommended.cost.objective / balanced->all_local_step_seconds;
  EXPECT_GT(even_gain, k.policy.hysteresis) << balanced->explanation;
  EXPECT_LT(even_gain, 0.1 / 1.1) << balanced->explanation;
  EXPECT_FALSE(balanced->kept_current) << balanced->explanation;
  EXPECT_FALSE(balanced->plan.offloads.empty()) << balanced->explanation;
}

// ---------------------------------------------------------------------------------------
// Modes, resharding, explanation.

TEST(PlannerTest, ObserveExplainsButPushesAllLocal) {
  Case k = Straggler();
  k.policy.mode = BalanceMode::kObserve;
  absl::StatusOr<Explained> d = PlanExplained(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->plan.offloads.empty());
  EXPECT_TRUE(d->plan.pruned_units.empty());
  EXPECT_DOUBLE_EQ(d->predicted_step_seconds, d->all_local_step_seconds);
  EXPECT_FALSE(d->recommended.plan.offloads.empty());
  EXPECT_LT(d->recommended.cost.step_seconds, d->all_local_step_seconds);
  EXPECT_THAT(d->explanation, HasSubstr("would push"));
}

TEST(PlannerTest, StragglerOffloadsNearTheIdeal) {
  Case k = Straggler();
  absl::StatusOr<Explained> d = PlanExplained(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->chosen, CandidateKind::kAuto);
  EXPECT_DOUBLE_EQ(d->all_local_step_seconds, 0.128);
  EXPECT_NEAR(d->ideal_step_seconds, 512 * 1e-3 / 7.5, 1e-12);
  EXPECT_LT(d->predicted_step_seconds, 1.02 * (d->ideal_step_seconds + 2e-3));
  EXPECT_TRUE(d->plan.pruned_units.empty());  // w = 1 s makes pruning too dear here
  EXPECT_THAT(d->explanation, HasSubstr("predicted step"));
  EXPECT_THAT(d->explanation, HasSubstr("migrate"));
}

// A straggler whose share of the block's collectives is also slower (a fixed cost, beyond
// its peers', of 16 of its units) is given fewer units than its compute speed alone says:
// everyone finishes the block together, fixed cost included. The ideal and the reshard's
// water-fill count the fixed cost too, and the explanation shows it.
TEST(PlannerTest, AFixedCostIsBalancedWithTheUnits) {
  Case k = Straggler();
  k.tau = 0;  // free transfers: the plan is the water level
  k.policy.mode = BalanceMode::kMigrate;
  const double offloaded_without = [&] {
    absl::StatusOr<Explained> d = PlanExplained(MakeInput(k), k.policy, nullptr);
    EXPECT_TRUE(d.ok());
    return d.ok() ? d->recommended.cost.offloaded_units : -1;
  }();
  k.f.assign(8, 0);
  k.f[7] = 16 * 2e-3;
  absl::StatusOr<Explained> d = PlanExplained(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  // Water level L with 7 (L - 0) / 1e-3 + (L - 0.032) / 2e-3 = 512: L = 0.0704; rank 7
  // computes 19.2 units there, against 34.1 without the fixed cost.
  EXPECT_NEAR(d->ideal_step_seconds, (512 + 16) / 7.5 * 1e-3, 1e-12);
  EXPECT_DOUBLE_EQ(d->all_local_step_seconds, 0.032 + 0.128);
  EXPECT_EQ(offloaded_without, 64 - 34);
  EXPECT_EQ(d->recommended.cost.offloaded_units, 64 - 19);
  EXPECT_NEAR(d->predicted_step_seconds, 0.0704, 1.1e-3);
  EXPECT_DOUBLE_EQ(d->recommended.cost.rank_seconds[7], 0.032 + 19 * 2e-3);
  EXPECT_THAT(d->explanation, HasSubstr("7:0.032+0.002x64"));
  // The reshard's water-fill: rank 7 keeps 19 units (0.032 + 19 x 2 ms = 0.070 s).
  PlannerInput in = MakeInput(k);
  std::vector<int32_t> filled = WaterFillCounts(in.ranks, 512);
  EXPECT_EQ(filled[7], 19);
  // A fixed cost above every other rank's whole load: it gets no unit, and no plan's step
  // is below its fixed cost.
  in.ranks[7].fixed_seconds = 1.0;
  filled = WaterFillCounts(in.ranks, 512);
  EXPECT_EQ(filled[7], 0);
  absl::StatusOr<BlockDecision> all_away = PlanBlock(in, k.policy, nullptr);
  ASSERT_TRUE(all_away.ok());
  EXPECT_DOUBLE_EQ(all_away->ideal_step_seconds, 1.0);
  EXPECT_DOUBLE_EQ(all_away->recommended.cost.step_seconds, 1.0);
}

TEST(PlannerTest, ResizePrunesTheStragglerWithinBudget) {
  Case k = Straggler();
  k.policy.mode = BalanceMode::kResize;
  k.policy.accuracy_weight_seconds = 0.1;  // a pruned unit costs 0.2 ms, computing it 2 ms
  absl::StatusOr<Explained> d = PlanExplained(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->plan.pruned_units.size(), 8u);
  EXPECT_EQ(d->plan.pruned_units[7], 32);  // down to the fast ranks' 64 ms
  EXPECT_DOUBLE_EQ(d->predicted_step_seconds, 0.064);
}

TEST(PlannerTest, CordonedRankOffloadsEverythingOrReshards) {
  Case k = Straggler();
  k.c[7] = 1e-3;
  k.cordoned.assign(8, false);
  k.cordoned[2] = true;
  k.tau = 1e-3;
  k.policy.mode = BalanceMode::kMigrate;
  const PlannerInput in = MakeInput(k);
  absl::StatusOr<Explained> d = PlanExplained(in, k.policy, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  // Offloading costs rank 2 tau per unit each step; resharding does not.
  EXPECT_EQ(d->chosen, CandidateKind::kReshard) << d->explanation;
  ASSERT_EQ(d->plan.owner_of_unit.size(), 512u);
  std::vector<int> counts(8, 0);
  int moved = 0;
  for (size_t u = 0; u < 512; ++u) {
    ++counts[d->plan.owner_of_unit[u].value()];
    moved += d->plan.owner_of_unit[u] != in.owner_of_unit[u];
  }
  EXPECT_EQ(counts[2], 0);
  EXPECT_EQ(moved, 64);
  const Checked check = CheckPlan(in, k.policy, BalanceMode::kMigrate, d->plan);
  EXPECT_EQ(check.error, "");

  // Once applied, the same inputs keep it: no flapping back.
  Case after = k;
  after.n.clear();
  for (int c : counts) after.n.push_back(c);
  PlannerInput in2 = MakeInput(after);
  in2.owner_of_unit = d->plan.owner_of_unit;
  absl::StatusOr<Explained> d2 = PlanExplained(in2, k.policy, &d->plan);
  ASSERT_TRUE(d2.ok()) << d2.status();
  EXPECT_TRUE(d2->plan.owner_of_unit.empty()) << d2->explanation;
  EXPECT_TRUE(d2->plan.offloads.empty()) << d2->explanation;
}

// A rank that takes no offloads (a throttled rank relieved of units: the coordinator's
// DecisionLoop::TakesNoOffloads) helps nobody, and a plan in force that offloads onto it is
// replaced; the straggler's work goes to the others, and a cordon lifts the refusal (its
// units may need every helper).
TEST(PlannerTest, ARankThatTakesNoOffloadsHelpsNobody) {
  Case k = Straggler();
  k.policy.mode = BalanceMode::kMigrate;
  const PlannerInput free_in = MakeInput(k);
  absl::StatusOr<Explained> free_d = PlanExplained(free_in, k.policy, nullptr);
  ASSERT_TRUE(free_d.ok()) << free_d.status();
  const auto helps = [](const BlockPlan& plan, int rank) {
    return std::any_of(plan.offloads.begin(), plan.offloads.end(),
                       [&](const Offload& o) { return o.helper == RankId(rank); });
  };
  ASSERT_TRUE(helps(free_d->plan, 3)) << free_d->explanation;  // the 7 ranks share the work
  k.no_offloads.assign(8, false);
  k.no_offloads[3] = true;
  const PlannerInput in = MakeInput(k);
  absl::StatusOr<Explained> d = PlanExplained(in, k.policy, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(helps(d->plan, 3)) << d->explanation;
  EXPECT_FALSE(d->plan.offloads.empty()) << d->explanation;  // the others still help
  EXPECT_EQ(CheckPlan(in, k.policy, BalanceMode::kMigrate, d->plan).error, "");
  EXPECT_GT(d->predicted_step_seconds, free_d->predicted_step_seconds);  // six helpers, not seven
  EXPECT_THAT(d->explanation, HasSubstr("3:0.001x64(takes no offloads)"));
  // The plan in force offloading onto it is no longer a plan.
  absl::StatusOr<Explained> again = PlanExplained(in, k.policy, &free_d->plan);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->kept_current);
  EXPECT_FALSE(helps(again->plan, 3)) << again->explanation;
  EXPECT_THAT(again->explanation, HasSubstr("it offloads onto rank 3, which takes no offloads"));
  // Nor does it take a straggler's own offloads from it: rank 7 itself may offload.
  k.no_offloads.assign(8, false);
  k.no_offloads[7] = true;
  absl::StatusOr<Explained> own = PlanExplained(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->plan, free_d->plan) << own->explanation;
  // Under a cordon the refusal is lifted: here the cordoned rank's units have only the
  // rank that would take no offloads to go to.
  Case cordon;
  cordon.c = {1e-3, 1e-3};
  cordon.n = {4, 4};
  cordon.tau = 1e-4;
  cordon.cordoned = {true, false};
  cordon.no_offloads = {false, true};
  cordon.policy.mode = BalanceMode::kMigrate;
  const PlannerInput cordoned = MakeInput(cordon);
  absl::StatusOr<Explained> drained = PlanExplained(cordoned, cordon.policy, nullptr);
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_EQ(CheckPlan(cordoned, cordon.policy, BalanceMode::kMigrate, drained->plan).error, "");
  EXPECT_NEAR(drained->predicted_step_seconds, 8e-3, 1e-3) << drained->explanation;
  EXPECT_THAT(drained->explanation, Not(HasSubstr("(takes no offloads)")));
}

// Counts of a reshard's ownership.
std::vector<int32_t> OwnedAfter(const BlockPlan& plan, int32_t ranks) {
  std::vector<int32_t> owned(ranks, 0);
  for (RankId r : plan.owner_of_unit) ++owned[r.value()];
  return owned;
}

TEST(PlannerTest, CalmRanksOnAnUnevenSplitReshardBackToTheEvenSplit) {
  // A straggler was resharded for (96 and 32 units) and has recovered: the group is calm.
  // The estimates still differ by noise (rank 0 7% slower): the even split, not the one
  // they water-fill to, and it replaces the offloads that balanced it, hysteresis or not.
  Case k;
  k.c = {1.07e-3, 1e-3};
  k.n = {96, 32};
  k.tau = 1e-5;
  k.policy.straggler_threshold = 0.1;
  PlannerInput in = MakeInput(k);
  absl::StatusOr<Explained> offloading = PlanExplained(in, k.policy, nullptr);
  ASSERT_TRUE(offloading.ok());
  ASSERT_FALSE(offloading->plan.offloads.empty()) << offloading->explanation;
  in.calm = true;
  // Calm only just now: the split may be right still, and its plan is kept.
  absl::StatusOr<Explained> fresh = PlanExplained(in, k.policy, &offloading->plan);
  ASSERT_TRUE(fresh.ok());
  EXPECT_FALSE(fresh->evens_split);
  EXPECT_NE(fresh->chosen, CandidateKind::kReshard) << fresh->explanation;
  in.calm_lasted = true;
  absl::StatusOr<Explained> home = PlanExplained(in, k.policy, &offloading->plan);
  ASSERT_TRUE(home.ok()) << home.status();
  EXPECT_EQ(home->chosen, CandidateKind::kReshard) << home->explanation;
  EXPECT_TRUE(home->evens_split);
  EXPECT_FALSE(home->kept_current);
  EXPECT_THAT(OwnedAfter(home->plan, 2), ElementsAre(64, 64));
  EXPECT_TRUE(home->plan.offloads.empty()) << home->explanation;
  EXPECT_THAT(home->explanation, HasSubstr("owns more than its share: back to the even split"));
  // On the even split the calm group runs all-local.
  Case even = k;
  even.n = {64, 64};
  PlannerInput rested = MakeInput(even);
  rested.calm = true;
  rested.calm_lasted = true;
  absl::StatusOr<Explained> after = PlanExplained(rested, even.policy, &home->plan);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->calm) << after->explanation;
  EXPECT_EQ(after->chosen, CandidateKind::kAllLocal);
  // Not calm (a straggler, not chronic): no reshard, the estimates decide as before.
  in.calm = false;
  in.calm_lasted = false;
  absl::StatusOr<Explained> busy = PlanExplained(in, k.policy, &offloading->plan);
  ASSERT_TRUE(busy.ok());
  EXPECT_NE(busy->chosen, CandidateKind::kReshard) << busy->explanation;
  EXPECT_FALSE(busy->evens_split);
  // The dwell's raised hysteresis (0.3) does not make going back easier: rank 0 25% slower
  // in this block's estimate (the verdict pooled over all blocks is still calm) and a
  // free link, so the even split (0.08 s) is 12.5% worse than offloading on the uneven
  // one (0.0711 s), beyond t / (1 + t) = 9.1% but within 0.3.
  in.calm = true;
  in.calm_lasted = true;
  in.ranks[0].seconds_per_unit = 1.25e-3;
  in.transfer_seconds_per_unit = 0;
  JobPolicy dwelling = k.policy;
  dwelling.hysteresis = 0.3;
  absl::StatusOr<Explained> dwell = PlanExplained(in, dwelling, &offloading->plan);
  ASSERT_TRUE(dwell.ok());
  EXPECT_FALSE(dwell->evens_split) << dwell->explanation;
  EXPECT_NE(dwell->chosen, CandidateKind::kReshard);
  EXPECT_THAT(dwell->explanation, HasSubstr("x 1.09091: estimate noise"));
  in.ranks[0].seconds_per_unit = 1.07e-3;
  in.transfer_seconds_per_unit = k.tau;
  // A cordon, or a chronic rank, is the usual reshard's business: no even split.
  in.ranks[1].cordoned = true;
  absl::StatusOr<BlockDecision> cordoned = PlanBlock(in, k.policy, nullptr);
  ASSERT_TRUE(cordoned.ok());
  EXPECT_FALSE(cordoned->evens_split);
  in.ranks[1].cordoned = false;
  in.ranks[0].chronic = true;
  absl::StatusOr<Explained> chronic = PlanExplained(in, k.policy, nullptr);
  ASSERT_TRUE(chronic.ok());
  EXPECT_FALSE(chronic->evens_split) << chronic->explanation;
  in.ranks[0].chronic = false;
  // Modes off and observe push all-local: nothing is evened, nor said to be.
  for (BalanceMode mode : {BalanceMode::kOff, BalanceMode::kObserve}) {
    JobPolicy watching = k.policy;
    watching.mode = mode;
    absl::StatusOr<Explained> watched = PlanExplained(in, watching, nullptr);
    ASSERT_TRUE(watched.ok());
    EXPECT_FALSE(watched->evens_split);
    EXPECT_EQ(watched->chosen, CandidateKind::kAllLocal);
    EXPECT_THAT(watched->explanation, Not(HasSubstr("back to the even split")));
  }
  // Resize mode moves no units: calm and uneven, it balances by what it has.
  k.policy.mode = BalanceMode::kResize;
  absl::StatusOr<BlockDecision> resize = PlanBlock(in, k.policy, nullptr);
  ASSERT_TRUE(resize.ok());
  EXPECT_NE(resize->chosen, CandidateKind::kReshard);
  EXPECT_FALSE(resize->evens_split);
}

TEST(PlannerTest, ACalmGroupRunsAllLocalButACordonStillCounts) {
  Case k = Straggler();  // rank 7 at 2x in this block's estimate, but the group is calm
  PlannerInput in = MakeInput(k);
  absl::StatusOr<Explained> busy = PlanExplained(in, k.policy, nullptr);
  ASSERT_TRUE(busy.ok());
  ASSERT_FALSE(busy->plan.offloads.empty());
  in.calm = true;
  // Leaving the plan in force needs no hysteresis: it was for a straggler that is gone.
  absl::StatusOr<Explained> calm = PlanExplained(in, k.policy, &busy->plan);
  ASSERT_TRUE(calm.ok());
  EXPECT_TRUE(calm->calm);
  EXPECT_EQ(calm->chosen, CandidateKind::kAllLocal);
  EXPECT_TRUE(calm->plan.offloads.empty());
  EXPECT_DOUBLE_EQ(calm->predicted_step_seconds, calm->all_local_step_seconds);
  EXPECT_FALSE(calm->recommended.plan.offloads.empty());  // what balancing would do
  EXPECT_THAT(calm->explanation, HasSubstr("all-local: no rank straggles"));
  // After a reshard for a straggler that has since recovered, all-local is uneven: calm
  // ranks with 96 and 32 units are balanced, not kept all-local; by offloads until they
  // have been calm for a while (CalmRanksOnAnUnevenSplitReshardBackToTheEvenSplit).
  Case uneven;
  uneven.c = {1e-3, 1e-3};
  uneven.n = {96, 32};
  uneven.tau = 1e-5;
  PlannerInput unbalanced = MakeInput(uneven);
  unbalanced.calm = true;
  absl::StatusOr<Explained> rebalanced = PlanExplained(unbalanced, uneven.policy, nullptr);
  ASSERT_TRUE(rebalanced.ok());
  EXPECT_FALSE(rebalanced->calm);
  EXPECT_FALSE(rebalanced->plan.offloads.empty()) << rebalanced->explanation;
  EXPECT_THAT(rebalanced->explanation, HasSubstr("owns more than its share: balancing"));
  // 7 units on 4 ranks (2, 2, 2, 1) are as even as they can be: calm stays all-local.
  Case seven;
  seven.c.assign(4, 1e-3);
  seven.c[3] = 1.05e-3;
  seven.n = {2, 2, 2, 1};
  PlannerInput odd = MakeInput(seven);
  odd.calm = true;
  absl::StatusOr<Explained> kept = PlanExplained(odd, seven.policy, nullptr);
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(kept->calm) << kept->explanation;
  // A cordoned rank must compute nothing, calm or not.
  k.c[7] = 1e-3;
  k.cordoned.assign(8, false);
  k.cordoned[2] = true;
  in = MakeInput(k);
  in.calm = true;
  absl::StatusOr<BlockDecision> cordoned = PlanBlock(in, k.policy, nullptr);
  ASSERT_TRUE(cordoned.ok());
  EXPECT_FALSE(cordoned->calm);
  EXPECT_NE(cordoned->chosen, CandidateKind::kAllLocal);
}

TEST(PlannerTest, ResizeCannotHonourAnOverBudgetCordon) {
  Case k = Straggler();
  k.cordoned.assign(8, false);
  k.cordoned[1] = true;
  k.policy.mode = BalanceMode::kResize;
  absl::StatusOr<Explained> d = PlanExplained(MakeInput(k), k.policy, nullptr);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("cordoned rank 1"));
}

TEST(PlannerTest, EmptyBlockIsAllLocal) {
  Case k;
  k.c = {1e-3, 2e-3};
  k.n = {0, 0};
  absl::StatusOr<Explained> d = PlanExplained(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->predicted_step_seconds, 0);
  EXPECT_TRUE(d->plan.offloads.empty());
}

}  // namespace
}  // namespace ballast::coordinator
