// PlanBlock's reshard: how far it goes (water-filled, halfway), what margin it must win
// by, and how far its search goes.
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

#include "absl/strings/match.h"
#include "coordinator/planner/ownership.h"
#include "coordinator/planner/planner.h"
#include "tests/coordinator/planner/planner_test_util.h"

namespace ballast::coordinator {
namespace {

using planner_testing::Case;
using planner_testing::Checked;
using planner_testing::Describe;
using planner_testing::Explained;
using planner_testing::kInf;
using planner_testing::MakeInput;
using planner_testing::PlanExplained;
using planner_testing::Straggler;
using planner_testing::Total;
using ::testing::HasSubstr;
using ::testing::Not;

// A chronic straggler's first reshard, from an even split, goes all the way to the
// water-filled counts; one that refines a split already uneven goes halfway (its speeds
// were measured under the load the last move set); a cordon is drained all the way.
TEST(PlannerTest, ARefiningReshardGoesHalfway) {
  Case k;
  k.c = {1e-3, 2.16e-3};  // water-filled: 123 / 57 of 180 units
  k.chronic = {false, true};
  k.tau = 1;  // offloads priced out: the choice is all-local or a reshard
  k.policy.mode = BalanceMode::kMigrate;
  auto counts = [](const BlockPlan& plan) {
    std::vector<int32_t> out(2, 0);
    for (RankId r : plan.owner_of_unit) ++out[r.value()];
    return out;
  };
  k.n = {90, 90};
  const PlannerInput even = MakeInput(k);
  std::vector<int32_t> filled = WaterFillCounts(even.ranks, static_cast<int32_t>(Total(k)));
  ASSERT_EQ(filled, (std::vector<int32_t>{123, 57}));
  absl::StatusOr<Explained> d = PlanExplained(even, k.policy, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->chosen, CandidateKind::kReshard) << d->explanation;
  EXPECT_EQ(counts(d->plan), (std::vector<int32_t>{123, 57})) << d->explanation;

  k.n = {100, 80};  // resharded before, on other estimates
  d = PlanExplained(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->chosen, CandidateKind::kReshard) << d->explanation;
  EXPECT_EQ(counts(d->plan), (std::vector<int32_t>{111, 69})) << d->explanation;
  EXPECT_THAT(d->explanation, HasSubstr("halfway to the water-filled 123,57")) << d->explanation;
  // From there, half of the rest (to 117 / 63) gains 8.7%, under the 9.1% margin: the
  // split stays.
  k.n = {111, 69};
  d = PlanExplained(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_NE(d->chosen, CandidateKind::kReshard) << d->explanation;
  EXPECT_THAT(d->explanation, HasSubstr("reshard to 117,63")) << d->explanation;

  k.cordoned = {false, true};
  d = PlanExplained(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->chosen, CandidateKind::kReshard) << d->explanation;
  EXPECT_EQ(counts(d->plan), (std::vector<int32_t>{180, 0})) << d->explanation;
}

// In a wider group a reshard leaves the others within the threshold of their share and
// the straggler far below it (98 x 7 and 34 of 720: share 90): that split is uneven too,
// and its refinement goes halfway.
TEST(PlannerTest, ARefiningReshardGoesHalfwayInAWideGroup) {
  Case k;
  k.c.assign(8, 1e-3);
  k.c[7] = 6e-3;
  k.n.assign(8, 98);
  k.n[7] = 34;
  k.chronic.assign(8, false);
  k.chronic[7] = true;
  k.tau = 1;
  k.policy.mode = BalanceMode::kMigrate;
  const PlannerInput in = MakeInput(k);
  std::vector<int32_t> filled = WaterFillCounts(in.ranks, static_cast<int32_t>(Total(k)));
  const std::vector<int32_t> halfway = HalfwayCounts(k.n, filled);
  ASSERT_NE(halfway, filled);  // else this would not tell the two apart
  absl::StatusOr<Explained> d = PlanExplained(in, k.policy, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->chosen, CandidateKind::kReshard) << d->explanation;
  std::vector<int32_t> got(8, 0);
  for (RankId r : d->plan.owner_of_unit) ++got[r.value()];
  EXPECT_EQ(got, halfway) << d->explanation;
}

TEST(PlannerTest, ChronicStragglerReshardsOnlyWhenItPays) {
  Case k = Straggler();
  k.chronic.assign(8, false);
  k.chronic[7] = true;
  k.tau = 1e-3;  // offloads are dear: moving units for good beats shipping them each step
  absl::StatusOr<Explained> d = PlanExplained(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->chosen, CandidateKind::kReshard) << d->explanation;
  k.tau = 0;  // free offloads balance it as well as owning would: a tie is no reshard
  d = PlanExplained(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(d.ok());
  EXPECT_NE(d->chosen, CandidateKind::kReshard) << d->explanation;
}

// A chronic straggler's first reshard, in place of offloads, needs no margin: under a 2x
// straggler on an even 45/45 split, shipping 15 of its units each step (60.45 ms) and
// owning 60/30 (60 ms) differ by 0.7%, inside the 9.1% the margin would ask. Nor does a
// plan in force that offloads hold it off. Once the split is uneven, a further reshard
// needs the margin again.
TEST(PlannerTest, AStragglersFirstReshardNeedsNoMarginOverOffloads) {
  Case k;
  k.c = {1e-3, 2e-3};
  k.n = {45, 45};
  k.tau = 3e-5;
  k.chronic = {false, true};
  k.policy.mode = BalanceMode::kMigrate;
  absl::StatusOr<Explained> d = PlanExplained(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  const PlanCandidate offloads = TechniqueOf(*d, k.policy.mode);
  ASSERT_GT(offloads.cost.offloaded_units, 0) << d->explanation;
  EXPECT_EQ(d->chosen, CandidateKind::kReshard) << d->explanation;
  EXPECT_GT(d->objective, (1 - 0.1 / 1.1) * offloads.cost.objective) << d->explanation;
  EXPECT_EQ(d->plan.offloads.size(), 0u) << d->explanation;

  // The offloads in force (the plan of the straggler's first steps) do not hold it off.
  absl::StatusOr<Explained> from_offloads = PlanExplained(MakeInput(k), k.policy, &offloads.plan);
  ASSERT_TRUE(from_offloads.ok()) << from_offloads.status();
  EXPECT_EQ(from_offloads->chosen, CandidateKind::kReshard) << from_offloads->explanation;

  // Not chronic: no reshard is priced, the offloads stay.
  Case passing = k;
  passing.chronic = {false, false};
  d = PlanExplained(MakeInput(passing), passing.policy, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->chosen, CandidateKind::kMigrate) << d->explanation;

  // Resharded to 57/33, short of the 60/30 these speeds fill to: offloading 3 units
  // (60.1 ms) and going halfway to 60/30 are near-equal, and a refinement must beat the
  // offloads by the margin.
  Case refined = k;
  refined.n = {57, 33};
  d = PlanExplained(MakeInput(refined), refined.policy, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_GT(TechniqueOf(*d, refined.policy.mode).cost.offloaded_units, 0) << d->explanation;
  EXPECT_EQ(d->chosen, CandidateKind::kMigrate) << d->explanation;
  EXPECT_THAT(d->explanation, HasSubstr("the hysteresis or the straggler threshold"));
}

// The reshard's search stops once no plan on the new ownership can win: its candidate is
// then the best plan seen, and says so; a reshard that can win is priced exactly; one that
// even a perfect balance could not make win is not searched at all. And in auto, where the
// reshard is priced before the current ownership's joint search, that search stops once
// the reshard wins whatever it would find: the auto candidate then says so, and the best
// plan on the current ownership is above the reshard's by the margin. Checked against
// BestPlan on the water-filled ownership and on the current one. Half the cases in
// migrate, whose reshard is priced after its plan on the current ownership.
TEST(PlannerTest, AReshardIsSearchedOnlyAsFarAsItCouldWin) {
  std::mt19937_64 rng(77);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  int cut_off = 0, exact = 0, not_priced = 0, not_priced_with_fixed = 0, current_cut_off = 0,
      current_cut_off_against_offloads = 0;
  for (int i = 0; i < 1600; ++i) {
    Case k;
    const int p = 2 + i % 7;
    for (int r = 0; r < p; ++r) {
      k.c.push_back(1e-3 * uniform(1, 10));
      k.n.push_back(8 + i % 9);
    }
    k.chronic.assign(p, false);
    k.chronic[0] = true;
    k.tau = 1e-3 * uniform(0, 2);
    k.policy.mode = i % 4 < 2 ? BalanceMode::kAuto : BalanceMode::kMigrate;
    k.policy.accuracy_weight_seconds = 1e-3 * uniform(0, 3) * Total(k);
    k.policy.max_pruned_fraction_rank = uniform(0.2, 1);
    k.policy.max_pruned_fraction_group = uniform(0.1, 1);
    // Half with fixed costs (up to 8 ms, a few units' worth): the skip's bound then has a
    // kink where the water level meets the largest fixed cost.
    if (i % 2 == 1) {
      for (int r = 0; r < p; ++r) k.f.push_back(1e-3 * uniform(0, 8));
    }
    const std::string what = Describe(k, k.policy.mode);
    const PlannerInput in = MakeInput(k);
    absl::StatusOr<Explained> d = PlanExplained(in, k.policy, nullptr);
    ASSERT_TRUE(d.ok()) << d.status() << what;
    const PlanCandidate* reshard = nullptr;
    for (const PlanCandidate& c : d->candidates) {
      if (c.kind == CandidateKind::kReshard) reshard = &c;
    }
    ASSERT_NE(reshard, nullptr) << what;
    const bool skipped = absl::StrContains(reshard->note, "not priced");
    // Otherwise infeasible: the water-filled ownership is the current one.
    if (!reshard->feasible && !skipped) continue;
    PlannerInput moved = in;
    if (skipped) {
      std::vector<int32_t> filled =
          WaterFillCounts(in.ranks, static_cast<int32_t>(in.owner_of_unit.size()));
      moved.owner_of_unit = MoveUnits(in.owner_of_unit, filled);
    } else {
      moved.owner_of_unit = reshard->plan.owner_of_unit;
    }
    for (PlannerRank& rank : moved.ranks) rank.owned_units = 0;
    for (RankId r : moved.owner_of_unit) ++moved.ranks[r.value()].owned_units;
    absl::StatusOr<PlanCandidate> optimum = BestPlan(moved, k.policy);
    ASSERT_TRUE(optimum.ok()) << optimum.status() << what;
    const double threshold_margin = std::max(
        k.policy.hysteresis, k.policy.straggler_threshold / (1 + k.policy.straggler_threshold));
    // The best plan on the current ownership, exact (the auto candidate may be the best
    // seen), and the bar the reshard must beat it by: none when it offloads (every split
    // here is even: a straggler's first reshard in place of offloads), else the
    // threshold's.
    absl::StatusOr<PlanCandidate> here = BestPlan(in, k.policy);
    ASSERT_TRUE(here.ok()) << here.status() << what;
    const bool here_offloads = here->cost.offloaded_units > 0;
    const double needed = (here_offloads ? 1 : 1 - threshold_margin) * here->cost.objective;
    if (absl::StrContains(d->explanation, "the search stopped there")) {
      ++current_cut_off;
      current_cut_off_against_offloads += here_offloads;
      EXPECT_EQ(d->chosen, CandidateKind::kReshard) << d->explanation;
      EXPECT_NEAR(reshard->cost.objective, optimum->cost.objective, 1e-12 * optimum->cost.objective)
          << what;
      EXPECT_LT(reshard->cost.objective, needed) << what;
      continue;
    }
    if (skipped) {
      ++not_priced;
      not_priced_with_fixed += !k.f.empty();
      EXPECT_GE(optimum->cost.objective, needed * (1 - 1e-12)) << what;
    } else if (absl::StrContains(reshard->note, "which no plan on it does")) {
      ++cut_off;
      EXPECT_GE(optimum->cost.objective, needed * (1 - 1e-12)) << what;
      EXPECT_GE(reshard->cost.objective, optimum->cost.objective * (1 - 1e-12)) << what;
    } else {
      ++exact;
      EXPECT_NEAR(reshard->cost.objective, optimum->cost.objective, 1e-12 * optimum->cost.objective)
          << what;
      // Chosen exactly when it beats the bar (away from ties within rounding).
      if (std::abs(reshard->cost.objective - needed) > 1e-9 * needed) {
        EXPECT_EQ(d->chosen == CandidateKind::kReshard, reshard->cost.objective < needed)
            << what << d->explanation;
      }
    }
  }
  // A reshard's search is cut off in auto only (migrate's has no joint search), and since
  // it is priced first there, only above what the plans of single techniques on the
  // current ownership reach: 14 of these cases.
  EXPECT_GT(cut_off, 10) << exact << " exact, " << not_priced << " not priced, " << current_cut_off
                        << " current cut off";
  EXPECT_GT(exact, 20);
  EXPECT_GT(not_priced, 20);
  EXPECT_GT(not_priced_with_fixed, 10);
  EXPECT_GT(current_cut_off, 40);
  // Cut off against both bars: a best plan that offloads, and one that does not.
  EXPECT_GT(current_cut_off_against_offloads, 5);
  EXPECT_GT(current_cut_off - current_cut_off_against_offloads, 1);
}

// A reshard must beat the best plan by the straggler threshold too (t / (1 + t) of the
// objective), but a cordon is drained on the hysteresis alone; a threshold of 1 or more
// (margin 1 before) does not rule resharding out.
TEST(PlannerTest, AReshardBeatsTheThresholdUnlessACordonIsDrained) {
  Case k = Straggler();
  k.c[7] = 8e-3;  // 8x
  k.chronic.assign(8, false);
  k.chronic[7] = true;
  k.tau = 1;  // offloads priced out: the choice is all-local or a reshard
  k.policy.mode = BalanceMode::kMigrate;
  for (double threshold : {0.1, 1.0, 3.0}) {  // margins 0.09, 0.5, 0.75
    k.policy.straggler_threshold = threshold;
    absl::StatusOr<Explained> d = PlanExplained(MakeInput(k), k.policy, nullptr);
    ASSERT_TRUE(d.ok()) << d.status();
    // All-local: 0.512 s; resharded, 0.072 s: better by 86%.
    EXPECT_EQ(d->chosen, CandidateKind::kReshard) << "threshold " << threshold << "\n"
                                                  << d->explanation;
  }
  // A gain between the hysteresis (5%) and the threshold (10%: 9.1% of the objective) is
  // noise for a straggler, not for a cordon.
  k.c[7] = 1.1e-3;
  k.policy.straggler_threshold = 0.1;
  absl::StatusOr<Explained> d = PlanExplained(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->chosen, CandidateKind::kMigrate) << d->explanation;
  EXPECT_THAT(d->explanation, HasSubstr("the hysteresis or the straggler threshold"));
  // Even a perfect balance (0.0647 s against all-local's 0.0704 s) is not 9.1% better:
  // the reshard is not searched.
  EXPECT_THAT(d->explanation, HasSubstr("reshard: not priced: no split can beat 0.064 "));
  k.cordoned.assign(8, false);
  k.cordoned[0] = true;
  k.c[7] = 1e-3;
  d = PlanExplained(MakeInput(k), k.policy, nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->chosen, CandidateKind::kReshard) << d->explanation;
}

// The reshard's own hysteresis (DecideGroup passes the job's inside a dwell) is checked
// like the policy's.
TEST(PlannerTest, AReshardHysteresisOutOfRangeIsRejected) {
  Case k = Straggler();
  for (double bad : {-0.1, 1.5, std::nan("")}) {
    PlannerWorkspace workspace;
    absl::StatusOr<BlockDecision> d = PlanBlock(MakeInput(k), k.policy, nullptr, bad, &workspace);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(d.status().message(), HasSubstr("reshard_hysteresis"));
    EXPECT_THAT(d.status().message(), HasSubstr("out of range [0, 1]"));
  }
}

// Offloads the coordinator's offload check refuses: no plan ships units, whatever the
// model says they gain, but prunes and a chronic straggler's reshard stay as the mode
// allows; in mode migrate nothing but a reshard is left.
TEST(PlannerTest, RefusedOffloadsLeavePrunesAndReshards) {
  Case k;
  k.c = {1e-3, 2e-3};
  k.n = {45, 45};
  k.tau = 1e-5;
  auto offloaded = [](const BlockPlan& plan) {
    int32_t units = 0;
    for (const Offload& o : plan.offloads) units += o.units;
    return units;
  };
  for (BalanceMode mode : {BalanceMode::kAuto, BalanceMode::kMigrate}) {
    SCOPED_TRACE(BalanceModeName(mode));
    k.policy.mode = mode;
    k.chronic = {false, false};
    PlannerInput in = MakeInput(k);
    absl::StatusOr<Explained> d = PlanExplained(in, k.policy, nullptr);
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_GT(offloaded(d->plan), 10) << d->explanation;  // 15 by the model

    const BlockPlan offloading = d->plan;
    in.offloads_refused = true;
    d = PlanExplained(in, k.policy, nullptr);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(offloaded(d->plan), 0) << d->explanation;
    EXPECT_TRUE(d->plan.owner_of_unit.empty()) << "not chronic: no reshard";
    EXPECT_THAT(d->explanation, HasSubstr("offloads refused (the coordinator"));
    // Nor is a plan in force that offloads kept, by hysteresis or otherwise.
    d = PlanExplained(in, k.policy, &offloading);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(offloaded(d->plan), 0) << d->explanation;
    EXPECT_THAT(d->explanation, HasSubstr("it offloads, and offloads are refused"));
    if (mode == BalanceMode::kMigrate) {
      EXPECT_TRUE(d->plan.pruned_units.empty() ||
                  *std::max_element(d->plan.pruned_units.begin(), d->plan.pruned_units.end()) == 0)
          << d->explanation;
    }

    k.chronic = {false, true};
    in = MakeInput(k);
    in.offloads_refused = true;
    d = PlanExplained(in, k.policy, nullptr);
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(d->chosen, CandidateKind::kReshard) << d->explanation;
    EXPECT_EQ(offloaded(d->plan), 0) << d->explanation;
    std::vector<int32_t> owned(2, 0);
    for (RankId r : d->plan.owner_of_unit) ++owned[r.value()];
    EXPECT_EQ(owned, (std::vector<int32_t>{60, 30})) << "the water-filled split";

    // A cordon is drained whatever was refused: only transfers empty a device.
    k.chronic = {false, false};
    k.cordoned = {false, true};
    in = MakeInput(k);
    in.offloads_refused = true;
    d = PlanExplained(in, k.policy, nullptr);
    ASSERT_TRUE(d.ok()) << d.status();
    std::vector<int32_t> computed = {45, 45};
    if (!d->plan.owner_of_unit.empty()) {
      computed = {0, 0};
      for (RankId r : d->plan.owner_of_unit) ++computed[r.value()];
    }
    for (const Offload& o : d->plan.offloads) {
      computed[o.owner.value()] -= o.units;
      computed[o.helper.value()] += o.units;
    }
    EXPECT_EQ(computed[1], 0) << d->explanation;
    EXPECT_THAT(d->explanation, Not(HasSubstr("offloads refused"))) << "not in effect";
    k.cordoned.clear();
  }
}

}  // namespace
}  // namespace ballast::coordinator
